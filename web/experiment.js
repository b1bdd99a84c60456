// The experiment page: header with cancel (and, for a study, a link to its study page), the trial
// table (sortable, filterable, rows selectable for the curves), the curve panel, the sweep panel
// and the experiment's events.
import { ACTIVE, api, apiAll, cancelButton, duration, eventRows, h, num, paramText, rate, stateBadge, trialLabels } from './util.js';
import { curvePanel } from './curves.js';
import { sweepPanel } from './sweep.js';

function columns(swept) {
  return [
    { key: 'id', title: 'trial', get: r => r.id, cls: 'num' },
    { key: 'state', title: 'state', get: r => r.state, cell: r => stateBadge(r.state) },
    ...swept.map(p => ({ key: 'p:' + p, title: p, get: r => (r.params && p in r.params ? r.params[p] : null),
                         cell: r => (r.params && p in r.params ? paramText(r.params[p]) : '—'), cls: 'param' })),
    { key: 'attempts', title: 'attempts', get: r => r.attempts, cls: 'num' },
    { key: 'objective_best', title: 'best', get: r => r.objective_best, cell: r => num(r.objective_best), cls: 'num' },
    { key: 'objective_last', title: 'latest', get: r => r.objective_last, cell: r => num(r.objective_last), cls: 'num' },
    { key: 'train_loss', title: 'train loss', get: r => r.train_loss, cell: r => num(r.train_loss), cls: 'num' },
    { key: 'tokens_per_second', title: 'tokens/s', get: r => r.tokens_per_second, cell: r => rate(r.tokens_per_second), cls: 'num' },
    { key: 'step_seconds', title: 's/step', get: r => r.step_seconds, cell: r => num(r.step_seconds, 3), cls: 'num' },
    { key: 'last_step', title: 'step', get: r => r.last_step, cls: 'num' },
    { key: 'seconds', title: 'time', get: r => r.seconds, cell: r => duration(r.seconds), cls: 'num' },
    { key: 'reason', title: 'reason', get: r => (r.state === 'failed' ? r.reason : null), cls: 'reason' },
  ];
}

// The text a cell shows (what the filter searches), not the raw value behind it: a row whose
// s/step is 0.0123 shows "0.0123", one whose tokens/s is 12345.6 shows "12.3k".
function shownText(c, r) {
  const v = c.get(r);
  if (v === null || v === undefined) return '';
  if (!c.cell) return paramText(v);
  const out = c.cell(r);
  return typeof out === 'string' ? out : out.textContent;
}

// The filter box: "key=value" keeps the rows whose swept key (its full name or its last part,
// "lr" for "optimizer.lr") has exactly that value; any other text keeps the rows that show it
// in some column. Case does not matter.
function rowMatcher(cols, raw) {
  const text = raw.trim().toLowerCase();
  if (!text) return () => true;
  const eq = text.indexOf('=');
  if (eq > 0) {
    const key = text.slice(0, eq).trim(), want = text.slice(eq + 1).trim();
    const named = cols.filter(c => c.key.startsWith('p:')).filter(c => {
      const name = c.key.slice(2).toLowerCase();
      return name === key || name.endsWith('.' + key);
    });
    if (named.length) {
      return r => named.some(c => { const v = c.get(r); return v !== null && paramText(v).toLowerCase() === want; });
    }
  }
  return r => cols.some(c => shownText(c, r).toLowerCase().includes(text));
}

function compare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;   // empty cells last either way
  if (b === null || b === undefined) return -1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return paramText(a).localeCompare(paramText(b), undefined, { numeric: true });
}

// The trial table of every page, with the union of the keys the pages' trials sweep.
function tableOf(id) {
  return apiAll(`/api/v1/dashboard/experiments/${id}`, 'trial_rows',
    (all, page) => { all.swept = [...new Set([...all.swept, ...page.swept])].sort(); });
}

export async function render(root, id, ctx) {
  const onError = e => ctx.showError(e);
  let exp = await tableOf(id);
  if (!ctx.isCurrent()) return { dispose() {} };
  ctx.crumbs([{ text: 'experiments', href: '#/' }, { text: `${exp.name} (#${id})` }]);

  const sort = { key: 'id', dir: 1 };
  const selected = new Set();
  const filterIn = h('input', { type: 'search', id: 'trial-filter', placeholder: 'filter: text in any column, or key=value' });
  const stateSel = h('select', { id: 'state-filter' }, h('option', { value: '' }, 'any state'),
    ['pending', 'running', 'completed', 'failed', 'cancelled', 'pruned'].map(s => h('option', { value: s }, s)));
  const head = h('thead');
  const body = h('tbody');
  const shown = h('span', { class: 'muted', id: 'trial-count' });
  const header = h('div', { class: 'exp-header' });
  const events = h('tbody');
  const curves = curvePanel({ experimentId: id, objective: exp.objective, onError });
  // The trials inside the parallel coordinates' brushes (null: no brush).
  let brushIds = null;
  const sweep = sweepPanel({ experimentId: id, objective: exp.objective, onError,
                             onFilter: ids => { brushIds = ids; drawTable(); } });

  root.replaceChildren(header,
    h('section', { class: 'card' }, h('h2', {}, 'Trials'),
      h('div', { class: 'controls' }, filterIn, stateSel, shown,
        h('button', { type: 'button', id: 'clear-selection', onclick: () => { selected.clear(); drawTable(); curves.selectionChanged(selected); } }, 'clear selection')),
      h('div', { class: 'scroll' }, h('table', { class: 'grid', id: 'trials' }, head, body))),
    curves.el, sweep.el,
    h('section', { class: 'card' }, h('h2', {}, 'Events'), h('div', { class: 'scroll short' },
      h('table', { class: 'grid', id: 'events' }, events))));

  function drawHeader() {
    const active = exp.state === 'running';
    header.replaceChildren(
      h('h1', {}, exp.name, ' ', stateBadge(exp.state)),
      exp.description ? h('p', {}, exp.description) : '',
      h('p', { class: 'muted' }, `objective ${exp.objective.metrics ? exp.objective.metrics.map((m, i) => `${m} (${exp.objective.modes[i]})`).join(', ') : `${exp.objective.metric} (${exp.objective.mode})`} · ${exp.trials} trials · `,
        Object.entries(exp.trial_states).filter(([, n]) => n > 0).map(([s, n]) => `${n} ${s}`).join(', ')),
      // A study's trials carry their cell (study.arm, study.size, ...) as params: the study page has data.
      exp.swept.includes('study.arm') ? h('p', {}, h('a', { href: `#/experiments/${id}/study`, id: 'study-link', class: 'tab' },
        'Study: loss against compute and the compute multipliers')) : '',
      active ? cancelButton('cancel experiment', `/api/v1/experiments/${id}/cancel`, refresh, onError) : '');
  }

  function drawTable() {
    const cols = columns(exp.swept);
    head.replaceChildren(h('tr', {}, h('th', {}, ''), cols.map(c => h('th', {
      class: `sortable ${c.cls || ''}` + (sort.key === c.key ? (sort.dir > 0 ? ' asc' : ' desc') : ''), dataset: { key: c.key },
      onclick: () => { sort.dir = sort.key === c.key ? -sort.dir : 1; sort.key = c.key; drawTable(); },
    }, c.title)), h('th', {}, '')));
    const match = rowMatcher(cols, filterIn.value);
    const col = cols.find(c => c.key === sort.key) || cols[0];
    const rows = exp.trial_rows
      .filter(r => !stateSel.value || r.state === stateSel.value)
      .filter(r => !brushIds || brushIds.has(r.id))
      .filter(match)
      .sort((a, b) => sort.dir * compare(col.get(a), col.get(b)) || a.id - b.id);
    body.replaceChildren(...rows.map(r => {
      const box = h('input', { type: 'checkbox', checked: selected.has(r.id), title: 'show in the curves (trials: selected)' });
      box.addEventListener('change', () => {
        if (box.checked) selected.add(r.id); else selected.delete(r.id);
        curves.selectionChanged(selected);
      });
      return h('tr', { dataset: { id: r.id, state: r.state } }, h('td', {}, box),
        cols.map(c => h('td', { class: c.cls || '', dataset: { key: c.key } },
          c.key === 'id' ? h('a', { href: `#/trials/${r.id}` }, r.id) : (c.cell ? c.cell(r) : c.get(r)))),
        h('td', {}, ACTIVE.has(r.state) ? cancelButton('cancel', `/api/v1/trials/${r.id}/cancel`, refresh, onError) : ''));
    }));
    shown.textContent = `${rows.length} of ${exp.trial_rows.length} trials`;
  }
  filterIn.addEventListener('input', drawTable);
  stateSel.addEventListener('change', drawTable);

  const labels = () => new Map([...trialLabels(exp.trial_rows)].map(([tid, text]) => [tid, `trial ${tid}: ${text}`]));
  drawHeader();
  drawTable();
  await curves.update(exp.trial_rows, selected, labels());
  if (!ctx.isCurrent()) return { dispose() {} };
  sweep.draw(exp.swept, exp.trial_rows);
  document.body.dataset.view = 'experiment';
  document.body.dataset.rendered = String(performance.now());

  // After the first render: metric names for the curve picker, and the event history.
  const withData = exp.trial_rows.find(r => r.last_step > 0);
  if (withData) api(`/api/v1/trials/${withData.id}`).then(t => curves.setMetrics(t.metrics)).catch(onError);
  api(`/api/v1/events?experiment=${id}&limit=10000`)
    .then(r => events.replaceChildren(...eventRows(r.events.slice(-300).reverse()))).catch(onError);

  async function refresh() {
    const before = new Map(exp.trial_rows.map(r => [r.id, r.state]));
    exp = await tableOf(id);
    if (!ctx.isCurrent()) return;
    drawHeader();
    drawTable();
    const changed = exp.trial_rows.some(r => before.get(r.id) !== r.state);
    const running = exp.trial_rows.some(r => r.state === 'running' && curves.shows(r.id));
    if (running || changed) await curves.update(exp.trial_rows, selected, labels());
    if (changed) sweep.draw(exp.swept, exp.trial_rows);
    document.body.dataset.updated = String(Date.now());
  }

  return {
    async tick(newEvents) {
      const mine = newEvents.filter(e => e.experiment_id === id);
      if (mine.length) events.prepend(...eventRows(mine.reverse()));
      if (mine.length || exp.trial_rows.some(r => ACTIVE.has(r.state))) await refresh().catch(onError);
    },
    dispose() {},
  };
}
