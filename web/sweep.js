// The experiment page's sweep panel: each swept parameter's importance (fANOVA, from
// /api/v1/experiments/ID/importance), the trials in parallel coordinates (parcoords.js; brushing
// an axis filters the trials table through onFilter), the best objective against each swept parameter (scatter;
// categorical parameters by name), a heatmap of two parameters, and the Pareto front of the
// objective against seconds per step (from /api/v1/experiments/ID/best); with several objectives
// (objective.metrics) first their Pareto front: the first two against each other, the front
// highlighted, and the trials by non-domination rank.
import { api, apiAll, h, num, paramText } from './util.js';
import { paretoChart, scatterChart } from './charts.js';
import { parallelCoordinates } from './parcoords.js';

function distinct(values) {
  const numeric = values.every(v => typeof v === 'number');
  const uniq = [...new Map(values.map(v => [paramText(v), v])).values()];
  return numeric ? uniq.sort((a, b) => a - b) : uniq.sort((a, b) => paramText(a).localeCompare(paramText(b)));
}

function scatterFor(param, rows, objective) {
  const withValue = rows.filter(r => r.objective_best !== null && r.params && param in r.params);
  const values = withValue.map(r => r.params[param]);
  const numeric = values.length > 0 && values.every(v => typeof v === 'number');
  const card = h('div', { class: 'scatter', dataset: { param } }, h('h3', {}, `${objective.metric} vs ${param}`));
  const chart = h('div', { class: 'chart' });
  card.append(chart);
  return {
    card,
    draw() {
      if (!withValue.length) { chart.replaceChildren(h('p', { class: 'muted' }, 'no objective values yet')); return; }
      if (numeric) {
        const pos = values.every(v => v > 0);
        const logX = pos && Math.max(...values) / Math.min(...values) >= 20;
        scatterChart(chart, { points: withValue.map(r => ({ x: r.params[param], y: r.objective_best })),
                              xLabel: param + (logX ? ' (log)' : ''), yLabel: objective.metric, logX });
      } else {
        const cats = distinct(values).map(paramText);
        scatterChart(chart, { points: withValue.map(r => ({ x: cats.indexOf(paramText(r.params[param])), y: r.objective_best })),
                              xLabel: param, yLabel: objective.metric, categories: cats });
      }
    },
  };
}

// Rows: values of `a`; columns: values of `b`; a cell holds the best objective of its trials.
function heatmap(a, b, rows, objective) {
  const usable = rows.filter(r => r.params && a in r.params && b in r.params);
  const av = distinct(usable.map(r => r.params[a])), bv = distinct(usable.map(r => r.params[b]));
  const better = (x, y) => (objective.mode === 'max' ? x > y : x < y);
  const cell = new Map();
  for (const r of usable) {
    if (r.objective_best === null) continue;
    const k = paramText(r.params[a]) + '\u0000' + paramText(r.params[b]);
    if (!cell.has(k) || better(r.objective_best, cell.get(k))) cell.set(k, r.objective_best);
  }
  const vals = [...cell.values()];
  const lo = Math.min(...vals), hi = Math.max(...vals);
  const shade = v => {
    let t = hi > lo ? (v - lo) / (hi - lo) : 0;  // 0 = lowest
    if (objective.mode === 'max') t = 1 - t;      // 0 = best
    return `hsl(${Math.round(130 * (1 - t))} 60% ${78 - 18 * (1 - t)}%)`;
  };
  return h('table', { class: 'heatmap', id: 'heatmap' },
    h('thead', {}, h('tr', {}, h('th', {}, `${a} \\ ${b}`), bv.map(v => h('th', {}, paramText(v))))),
    h('tbody', {}, av.map(x => h('tr', {}, h('th', {}, paramText(x)), bv.map(y => {
      const v = cell.get(paramText(x) + '\u0000' + paramText(y));
      return v === undefined ? h('td', { class: 'empty' }, '—')
        : h('td', { style: `background:${shade(v)}`, title: `${a}=${paramText(x)} ${b}=${paramText(y)}` }, num(v));
    })))));
}

// The heatmap's default pair: two keys that vary together within one sub-grid (trials with the
// same set of swept keys; a union sweep has one per [[sweep.grid]] table), the largest such
// sub-grid first; failing that, the two varying keys that the most trials share.
export function defaultPair(swept, rows) {
  const groups = new Map();  // the sub-grid's keys -> its rows
  for (const r of rows) {
    const keys = Object.keys(r.params || {}).sort().join('\u0000');
    if (!groups.has(keys)) groups.set(keys, []);
    groups.get(keys).push(r);
  }
  const varies = (k, rs) => new Set(rs.filter(r => r.params && k in r.params).map(r => paramText(r.params[k]))).size > 1;
  const score = new Map();  // "a\0b" -> [trials of sub-grids where both vary, trials sharing both]
  for (let i = 0; i < swept.length; i++) {
    for (let j = i + 1; j < swept.length; j++) {
      const [a, b] = [swept[i], swept[j]];
      if (!varies(a, rows) || !varies(b, rows)) continue;
      let together = 0;
      for (const rs of groups.values()) if (varies(a, rs) && varies(b, rs)) together += rs.length;
      const shared = rows.filter(r => r.params && a in r.params && b in r.params).length;
      score.set(a + '\u0000' + b, [together, shared]);
    }
  }
  let best = null;
  for (const [k, [together, shared]] of score) {
    if (!best || together > best[1] || (together === best[1] && shared > best[2])) best = [k, together, shared];
  }
  return best && best[2] > 0 ? best[0].split('\u0000') : [swept[0], swept[1]];
}

// One bar per key, its share of the objective's variance; with nothing to rank yet, why.
async function loadImportance(box, experimentId, objective) {
  const r = await api(`/api/v1/experiments/${experimentId}/importance`);
  if (!r.ok) {
    box.replaceChildren(h('p', { class: 'muted', id: 'importance-none' }, `importance: ${r.reason}`));
    document.body.dataset.importance = 'none';
    return;
  }
  box.replaceChildren(h('h3', {}, `Importance for ${objective.metric} (fANOVA over ${r.trials} completed trials)`),
    h('table', { class: 'importance', id: 'importance' }, h('tbody', {}, r.importance.map(p =>
      h('tr', { dataset: { key: p.name, importance: p.importance } }, h('th', {}, p.name),
        h('td', { class: 'bar' }, h('span', { style: `width:${(100 * p.importance).toFixed(1)}%` })),
        h('td', { class: 'num' }, `${(100 * p.importance).toFixed(1)} %`))))),
    r.notes.length ? h('p', { class: 'muted' }, r.notes.join('; ')) : '');
  document.body.dataset.importance = 'ready';
}

export function sweepPanel({ experimentId, objective, onError, onFilter }) {
  const importance = h('div', { id: 'importance-box' });
  const parallel = parallelCoordinates({ onFilter });
  const scatters = h('div', { class: 'scatters' });
  const heat = h('div', { id: 'heatmap-box' });
  const pareto = h('div', { class: 'chart', id: 'pareto-chart' });
  const front = h('p', { class: 'muted', id: 'pareto-front' });
  const several = Array.isArray(objective.metrics) && objective.metrics.length > 1;
  const objectivesBox = h('div', { id: 'objectives-front' });
  const el = h('section', { class: 'card', id: 'sweep' }, h('h2', {}, 'Sweep'), several ? objectivesBox : '', importance,
    parallel.el, scatters, heat, h('h3', {}, `Pareto front: ${objective.metric} vs seconds per step`), pareto, front);
  let pair = null;

  function drawHeat(swept, rows) {
    if (swept.length < 2) { heat.replaceChildren(); return; }
    if (!pair || !swept.includes(pair[0]) || !swept.includes(pair[1])) pair = defaultPair(swept, rows);
    const pick = (i) => {
      const s = h('select', {}, swept.map(p => h('option', { value: p, selected: p === pair[i] }, p)));
      s.addEventListener('change', () => { pair[i] = s.value; drawHeat(swept, rows); });
      return s;
    };
    heat.replaceChildren(h('h3', {}, `Heatmap: best ${objective.metric}`),
      swept.length > 2 ? h('div', { class: 'controls' }, h('label', {}, 'rows ', pick(0)), h('label', {}, 'columns ', pick(1))) : '',
      pair[0] === pair[1] ? h('p', { class: 'muted' }, 'pick two different parameters')
        : h('div', { class: 'scroll' }, heatmap(pair[0], pair[1], rows, objective)));
  }

  // Several objectives: the trials' final values, rank 1 (the front) highlighted, the others by rank.
  function drawObjectives(o) {
    const [m0, m1] = o.metrics;
    const ranked = o.front.filter(e => e.rank !== null);
    const chart = h('div', { class: 'chart', id: 'objectives-chart' });
    const rows = o.front.map(e => h('tr', { class: e.on_front ? 'front' : '' },
      h('td', { class: 'num' }, e.rank === null ? '—' : String(e.rank)),
      h('td', { class: 'num' }, h('a', { href: `#/trials/${e.trial}` }, String(e.trial))),
      e.values.map(v => h('td', { class: 'num' }, num(v))), h('td', {}, e.label), h('td', { class: 'muted' }, e.note)));
    objectivesBox.replaceChildren(
      h('h3', {}, `Pareto front of ${o.metrics.map((m, i) => `${m} (${o.modes[i]})`).join(', ')}`), chart,
      h('div', { class: 'scroll' }, h('table', { class: 'front', id: 'objectives-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'rank'), h('th', {}, 'trial'), o.metrics.map(m => h('th', {}, m)),
          h('th', {}, 'params'), h('th', {}, 'note'))),
        h('tbody', {}, rows))));
    if (!ranked.length) chart.replaceChildren(h('p', { class: 'muted' }, 'no completed trials with every objective yet'));
    else scatterChart(chart, { points: ranked.map(e => ({ x: e.values[0], y: e.values[1] })), xLabel: m0, yLabel: m1 });
    document.body.dataset.objectivesFront = String(ranked.filter(e => e.on_front).length);
  }

  async function loadPareto() {
    const r = await apiAll(`/api/v1/experiments/${experimentId}/best`, 'pareto',
      (all, page) => { if (all.objectives && page.objectives) all.objectives.front.push(...page.objectives.front); });
    if (several && r.objectives) drawObjectives(r.objectives);
    const pts = r.pareto.filter(p => p.compared && p.final_value !== null && p.seconds_per_step > 0)
      .map(p => ({ x: p.seconds_per_step, y: p.final_value, front: p.on_front, label: p.label, trial: p.trial }));
    if (!pts.length) {
      pareto.replaceChildren(h('p', { class: 'muted' }, 'no completed trials with timing yet'));
      front.textContent = '';
    } else {
      paretoChart(pareto, { points: pts, yLabel: objective.metric });
      front.replaceChildren('On the front: ', ...pts.filter(p => p.front).sort((a, b) => a.x - b.x).flatMap((p, i) =>
        [i ? ', ' : '', h('a', { href: `#/trials/${p.trial}` }, `${p.label} (${num(p.y)}, ${num(p.x, 3)} s/step)`)]));
    }
    document.body.dataset.pareto = 'ready';
  }

  return {
    el,
    draw(swept, rows) {
      const cards = swept.map(p => scatterFor(p, rows, objective));
      scatters.replaceChildren(...cards.map(c => c.card));
      cards.forEach(c => c.draw());
      if (!swept.length) scatters.replaceChildren(h('p', { class: 'muted' }, 'nothing is swept in this experiment'));
      drawHeat(swept, rows);
      parallel.draw(swept, rows, objective);
      loadPareto().catch(onError);
      if (swept.length) loadImportance(importance, experimentId, objective).catch(onError);
    },
  };
}
