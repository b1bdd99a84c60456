// The trial page: state and cancel, the resolved config, attempts (executor, job id, nodes, exit
// code), checkpoints, the trial's events (early-stop decisions with reasons), the log tail and a
// chart of every metric it reported.
import { ACTIVE, api, cancelButton, duration, eventRows, h, num, paramText, stateBadge, when } from './util.js';
import { lineChart } from './charts.js';

function table(id, titles, rows) {
  return h('table', { class: 'grid', id }, h('thead', {}, h('tr', {}, titles.map(t => h('th', {}, t)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: titles.length, class: 'muted' }, 'none'))));
}

export async function render(root, id, ctx) {
  const onError = e => ctx.showError(e);
  const header = h('div', { class: 'exp-header' });
  const attempts = h('div'), checkpoints = h('div'), events = h('div'), metrics = h('div', { class: 'metric-grid', id: 'metric-charts' });
  const config = h('pre', { class: 'config', id: 'config' });
  const streamSel = h('select', { id: 'log-stream' }, h('option', { value: 'stderr' }, 'stderr'), h('option', { value: 'stdout' }, 'stdout'));
  const log = h('pre', { class: 'log', id: 'log' });
  root.replaceChildren(header,
    h('section', { class: 'card' }, h('h2', {}, 'Metrics'), metrics),
    h('section', { class: 'card' }, h('h2', {}, 'Attempts'), h('div', { class: 'scroll short' }, attempts)),
    h('section', { class: 'card' }, h('h2', {}, 'Checkpoints'), h('div', { class: 'scroll short' }, checkpoints)),
    h('section', { class: 'card' }, h('h2', {}, 'Resolved config'), config),
    h('section', { class: 'card' }, h('h2', {}, 'Events'), events),
    h('section', { class: 'card' }, h('h2', {}, 'Log tail ', streamSel), log));
  let t = null;

  async function loadLog() {
    const r = await api(`/api/v1/trials/${id}/logs?stream=${streamSel.value}&lines=200`);
    log.textContent = r.text || '(empty)';
    log.scrollTop = log.scrollHeight;
  }
  streamSel.addEventListener('change', () => loadLog().catch(onError));

  async function load() {
    t = await api(`/api/v1/trials/${id}`);
    if (!ctx.isCurrent()) return;
    const [exp, series, ev] = await Promise.all([
      api(`/api/v1/experiments/${t.experiment_id}?limit=1`),
      api(`/api/v1/trials/${id}/metrics?max_points=1000`),
      api(`/api/v1/events?experiment=${t.experiment_id}&limit=10000`),
    ]);
    if (!ctx.isCurrent()) return;
    ctx.crumbs([{ text: 'experiments', href: '#/' }, { text: `${exp.name} (#${exp.id})`, href: `#/experiments/${exp.id}` },
                { text: `trial ${id}` }]);
    const params = Object.entries(t.params || {}).map(([k, v]) => `${k}=${paramText(v)}`).join(' ');
    header.replaceChildren(
      h('h1', {}, `Trial ${id} `, stateBadge(t.state)),
      h('p', {}, params || 'no swept parameters'),
      h('p', { class: 'muted' }, `step ${t.last_step} · attempts ${t.attempts.length} · ` +
        (t.layout ? `layout ${t.layout.tensor} tensor × ${t.layout.data} data × ${t.layout.pipeline ?? 1} pipeline${(t.layout.virtual_stages ?? 1) > 1 ? ` (× ${t.layout.virtual_stages} virtual)` : ''} = ${t.layout.ranks} rank(s) · ` : '') +
        `started ${when(t.started_at)} · ` +
        `ran ${duration(t.started_at ? (t.ended_at || Date.now() / 1000) - t.started_at : null)}` +
        (t.reason && t.state !== 'failed' ? ` · ${t.reason}` : '')),
      // A failure's reason is the trainer's own error line: shown on its own, not in the small print.
      t.state === 'failed' && t.reason ? h('p', { class: 'failure', id: 'trial-reason' }, t.reason) : '',
      h('p', { class: 'muted' }, 'run directory ', h('code', {}, t.run_dir)),
      ACTIVE.has(t.state) ? cancelButton('cancel trial', `/api/v1/trials/${id}/cancel`, load, onError) : '');
    config.textContent = t.config;
    attempts.replaceChildren(table('attempts', ['#', 'executor', 'job / pid', 'nodes', 'state', 'exit code', 'detail', 'started', 'ended'],
      t.attempts.map(a => h('tr', {}, h('td', {}, a.number), h('td', {}, a.executor), h('td', {}, a.external_id), h('td', {}, a.nodes || '—'),
        h('td', {}, a.state), h('td', { class: 'num' }, a.exit_code ?? '—'), h('td', {}, a.detail), h('td', {}, when(a.started_at)),
        h('td', {}, when(a.ended_at))))));
    checkpoints.replaceChildren(table('checkpoints', ['step', 'objective', 'path', 'written', 'deleted'],
      t.checkpoints.map(c => h('tr', {}, h('td', { class: 'num' }, c.step), h('td', { class: 'num' }, num(c.objective)),
        h('td', {}, h('code', {}, c.path)), h('td', {}, when(c.created_at)), h('td', {}, c.deleted_at ? when(c.deleted_at) : '—')))));
    const mine = ev.events.filter(e => e.trial_id === id).reverse();
    events.replaceChildren(table('trial-events', ['time', 'kind', 'trial', 'message'], eventRows(mine)));
    // Metrics that are zero for the whole run (another optimizer's phase times, a Shampoo counter
    // that never moved) are named on one line instead of drawn as flat charts. The series keep
    // each bucket's min and max, so a downsampled series is all zero only when the run is.
    const all = Object.keys(series.metrics).sort();
    const zero = n => series.metrics[n].values.every(v => v === null || v === 0);
    const names = all.filter(n => !zero(n)), empty = all.filter(zero);
    metrics.replaceChildren(...names.map(n => h('div', { class: 'metric', dataset: { metric: n } }, h('h3', {}, n), h('div', { class: 'chart' }))));
    names.forEach((n, i) => {
      const s = series.metrics[n];
      lineChart(metrics.children[i].lastChild, { x: s.steps, series: [{ label: n, values: s.values }], xLabel: 'step', yLabel: n, height: 200 });
    });
    if (empty.length) {
      metrics.append(h('p', { class: 'muted metric-empty', id: 'empty-metrics', dataset: { metrics: empty.join(' ') } },
        `empty (zero for the whole run): ${empty.join(', ')}`));
    }
    if (!all.length) metrics.replaceChildren(h('p', { class: 'muted' }, 'no metrics reported yet'));
    await loadLog();
    document.body.dataset.view = 'trial';
    document.body.dataset.rendered = String(performance.now());
    document.body.dataset.updated = String(Date.now());
  }

  await load();
  return {
    async tick(newEvents) {
      if (newEvents.some(e => e.trial_id === id) || ACTIVE.has(t.state)) await load().catch(onError);
    },
    dispose() {},
  };
}
