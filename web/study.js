// A study's page (#/experiments/ID/study): final loss against compute per arm on a log-compute
// axis, every trial a point (each cell's winner filled, the rest faint), the fitted
// L(C) = E + A·C^−α of each arm over the compute range, the arms' compute multipliers against the
// baseline with their 95 % intervals, and the compute-optimal arm at each model size
// (/api/v1/experiments/ID/study, computed and kept by the controller).
import { api, h, num } from './util.js';
import { color, studyChart } from './charts.js';

const CURVE_SAMPLES = 80;

// The arms in the fit's order (baseline first), then any arm that only has points.
function armOrder(study) {
  const names = study.arms.map(a => a.arm);
  for (const p of study.points) if (!names.includes(p.arm)) names.push(p.arm);
  return names;
}

// E + A·C^−α at CURVE_SAMPLES computes spaced evenly in log C over [lo, hi].
function curve(arm, lo, hi) {
  const xs = [], ys = [];
  const a = Math.log(lo), b = Math.log(hi);
  for (let i = 0; i < CURVE_SAMPLES; ++i) {
    const c = Math.exp(a + ((b - a) * i) / (CURVE_SAMPLES - 1));
    xs.push(c);
    ys.push(arm.E + arm.A * Math.pow(c, -arm.alpha));
  }
  return { xs, ys };
}

function multiplierText(v) { return v === null || v === undefined ? '—' : num(v, 3) + '×'; }
function intervalText(iv) { return iv && iv[0] !== null && iv[1] !== null ? `[${num(iv[0], 3)}, ${num(iv[1], 3)}]` : '—'; }
function flops(v) { return v === null || v === undefined ? '—' : v.toExponential(2); }
function count(v) {
  if (v === null || v === undefined) return '—';
  for (const [div, unit] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) if (v >= div) return num(v / div, 3) + unit;
  return String(v);
}

// The baseline's sizes order multiplier_by_size (the fit's ladder): shown as one list.
function armsTable(study, colours) {
  return h('table', { class: 'grid', id: 'study-arms' },
    h('thead', {}, h('tr', {}, h('th', {}, 'arm'), ['multiplier', '95% interval', 'α', 'E', 'A', 'rms residual', 'multiplier by size']
      .map(t => h('th', { class: 'num' }, t)))),
    h('tbody', {}, study.arms.map(a => h('tr', { dataset: { arm: a.arm } },
      h('td', {}, h('span', { class: 'swatch', style: `background:${colours.get(a.arm)}` }), a.arm,
        a.arm === study.baseline ? h('span', { class: 'muted' }, ' (baseline)') : ''),
      h('td', { class: 'num multiplier' }, multiplierText(a.multiplier)),
      h('td', { class: 'num interval' }, a.arm === study.baseline ? '—' : intervalText(a.interval)),
      h('td', { class: 'num alpha' }, num(a.alpha, 3)),
      h('td', { class: 'num' }, num(a.E, 4)),
      h('td', { class: 'num' }, num(a.A, 3)),
      h('td', { class: 'num' }, num(a.rms_residual, 3)),
      h('td', { class: 'num by-size' }, (a.multiplier_by_size || []).map(multiplierText).join(' · '))))));
}

function sizesTable(study, colours) {
  return h('table', { class: 'grid', id: 'study-sizes' },
    h('thead', {}, h('tr', {}, ['size', 'parameters', 'tokens', 'compute (FLOPs)'].map(t => h('th', { class: 'num' }, t)),
      h('th', {}, 'compute-optimal arm'))),
    h('tbody', {}, study.sizes.map(s => h('tr', { dataset: { size: s.size } },
      h('td', { class: 'num' }, s.size),
      h('td', { class: 'num' }, count(s.params)),
      h('td', { class: 'num' }, count(s.tokens)),
      h('td', { class: 'num' }, flops(s.compute)),
      h('td', { class: 'winner' }, s.winner === null || s.winner === undefined ? h('span', { class: 'muted' }, 'none yet')
        : [h('span', { class: 'swatch', style: `background:${colours.get(s.winner)}` }), s.winner])))));
}

function legend(study, names, colours) {
  const byArm = new Map(study.arms.map(a => [a.arm, a]));
  return h('div', { class: 'study-legend', id: 'study-legend' }, names.map(n => {
    const a = byArm.get(n);
    const what = !a ? 'points only' : n === study.baseline ? 'baseline' : `${multiplierText(a.multiplier)} ${intervalText(a.interval)}`;
    return h('span', { class: 'item', dataset: { arm: n, color: colours.get(n) } },
      h('span', { class: 'swatch', style: `background:${colours.get(n)}` }), h('b', {}, n), ' ', h('span', { class: 'muted' }, what));
  }), h('span', { class: 'muted' }, '· filled: each cell\'s winner; faint: the other trials; lines: the fits'));
}

export async function render(root, id, ctx) {
  const onError = e => ctx.showError(e);
  const header = h('div', { class: 'exp-header' });
  const chart = h('div', { class: 'chart', id: 'study-chart' });
  const legendBox = h('div');
  const fitNote = h('div', { id: 'study-fit' });
  const arms = h('div', { class: 'scroll' });
  const sizes = h('div', { class: 'scroll' });
  root.replaceChildren(header,
    h('section', { class: 'card' }, h('h2', {}, 'Loss against compute'), legendBox, chart, fitNote),
    h('section', { class: 'card' }, h('h2', {}, 'Compute multipliers'), arms),
    h('section', { class: 'card' }, h('h2', {}, 'Model sizes'), sizes));
  let study = null;

  function draw() {
    const names = armOrder(study);
    const colours = new Map(names.map((n, i) => [n, color(i)]));
    const computes = study.points.map(p => p.compute).filter(c => c > 0);
    const lo = Math.min(...computes), hi = Math.max(...computes);
    const byArm = new Map(study.arms.map(a => [a.arm, a]));
    const series = names.map((n, i) => ({
      label: n,
      color: colours.get(n),
      faint: color(i, 0.3),
      winners: study.points.filter(p => p.arm === n && p.winner).map(p => ({ x: p.compute, y: p.loss })),
      others: study.points.filter(p => p.arm === n && !p.winner).map(p => ({ x: p.compute, y: p.loss })),
      curve: byArm.has(n) && computes.length ? curve(byArm.get(n), lo, hi) : null,
    }));
    chart.dataset.arms = names.join(' ');
    chart.dataset.points = String(study.points.length);
    if (computes.length) studyChart(chart, { series, xLabel: 'compute (FLOPs)', yLabel: 'final loss' });
    else chart.replaceChildren(h('p', { class: 'muted' }, 'no finished trials yet'));
    legendBox.replaceChildren(legend(study, names, colours));
    fitNote.replaceChildren(
      study.ok ? h('p', { class: 'muted' }, `L(C) = E + A·C^−α per arm, E = ${num(study.E, 4)} shared; multiplier: the ` +
        `compute ${study.baseline} spends at its largest size over the compute the arm needs for the same loss (> 1: the arm needs less)`)
        : h('p', { class: 'failure', id: 'study-reason' }, `no fit: ${study.reason}`),
      // An unfinished study says so among the warnings (the fit is provisional).
      study.warnings.length ? h('ul', { class: 'warnings', id: 'study-warnings' }, study.warnings.map(w => h('li', {}, w))) : '');
    arms.replaceChildren(study.arms.length ? armsTable(study, colours) : h('p', { class: 'muted' }, 'no multipliers without a fit'));
    sizes.replaceChildren(sizesTable(study, colours));
  }

  async function load() {
    const s = await api(`/api/v1/experiments/${id}/study`);
    if (!ctx.isCurrent()) return;
    study = s;
    ctx.crumbs([{ text: 'experiments', href: '#/' }, { text: `${study.name} (#${id})`, href: `#/experiments/${id}` }, { text: 'study' }]);
    header.replaceChildren(h('h1', {}, `Study: ${study.name}`),
      h('p', { class: 'muted' }, `baseline ${study.baseline} · ${study.points.length} completed trials · ${study.sizes.length} sizes · `,
        h('a', { href: `#/experiments/${id}` }, 'the trials')));
    draw();
    document.body.dataset.view = 'study';
    document.body.dataset.rendered = String(performance.now());
  }

  await load();
  return {
    // A trial of this experiment ended or changed: the controller recomputes the fit once.
    async tick(events) {
      if (events.some(e => e.experiment_id === id)) await load().catch(onError);
    },
    dispose() {},
  };
}
