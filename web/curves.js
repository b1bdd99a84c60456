// The experiment page's curve panel: a metric of many trials overlaid, against steps or
// wall-clock seconds, with log-y and smoothing; the server bins every trial onto one shared x
// grid (/api/v1/dashboard/experiments/ID/curves), so 1,000 trials are one request.
import { api, h } from './util.js';
import { color, lineChart } from './charts.js';

const BEST_N = 20;

// Exponential moving average with bias correction; nulls stay null.
function smooth(values, weight) {
  if (weight <= 0) return values;
  let acc = 0, norm = 0;
  return values.map(v => {
    if (v === null) return null;
    acc = acc * weight + (1 - weight) * v;
    norm = norm * weight + (1 - weight);
    return acc / norm;
  });
}

// The metric shown first is the experiment's objective: what the sweep is judged by.
export function curvePanel({ experimentId, objective, onError }) {
  const state = { metric: objective.metric, x: 'step', logY: false, smooth: 0, which: 'best', data: null };
  const metricSel = h('select', { id: 'curve-metric' }, h('option', { value: objective.metric }, objective.metric));
  const xSel = h('select', { id: 'curve-x' }, h('option', { value: 'step' }, 'step'),
    h('option', { value: 'time' }, 'wall-clock seconds'));
  const whichSel = h('select', { id: 'curve-which' }, h('option', { value: 'best' }, `best ${BEST_N}`),
    h('option', { value: 'selected' }, 'selected'), h('option', { value: 'all' }, 'all trials'));
  const logY = h('input', { type: 'checkbox', id: 'curve-logy' });
  const smoothIn = h('input', { type: 'range', id: 'curve-smooth', min: 0, max: 0.98, step: 0.02, value: 0 });
  const chart = h('div', { class: 'chart', id: 'curves-chart' });
  const note = h('p', { class: 'muted', id: 'curves-note' });
  const el = h('section', { class: 'card', id: 'curves' },
    h('h2', {}, 'Curves'),
    h('div', { class: 'controls' },
      h('label', {}, 'metric ', metricSel), h('label', {}, 'x ', xSel), h('label', {}, 'trials ', whichSel),
      h('label', {}, logY, ' log y'), h('label', {}, 'smoothing ', smoothIn)),
    chart, note);
  let rows = [], selected = new Set(), labels = new Map();

  function chosen() {
    if (state.which === 'all') return rows;
    if (state.which === 'selected') return rows.filter(r => selected.has(r.id));
    const sign = objective.mode === 'max' ? -1 : 1;
    return rows.filter(r => r.objective_best !== null)
      .sort((a, b) => sign * (a.objective_best - b.objective_best)).slice(0, BEST_N)
      .concat(rows.filter(r => r.objective_best === null)).slice(0, BEST_N);
  }

  function draw() {
    const d = state.data;
    if (!d) return;
    const series = d.trials.map(t => ({
      label: labels.get(t.id) || 'trial ' + t.id,
      values: smooth(t.values, state.smooth),
      color: color(t.index),
    }));
    const positive = series.every(s => s.values.every(v => v === null || v > 0));
    chart.dataset.metric = state.metric;
    lineChart(chart, {
      x: d.grid, series, logY: state.logY && positive,
      xLabel: state.x === 'step' ? 'step' : 'seconds since start', yLabel: state.metric,
    });
    note.textContent = `${series.length} trial(s); ${d.grid.length} points each, binned on the server` +
      (state.logY && !positive ? '; log y needs positive values' : '');
  }

  async function load() {
    const trials = chosen();
    if (!trials.length) {
      state.data = { grid: [], trials: [] };
      draw();
      return;
    }
    const points = Math.max(100, Math.min(1000, Math.floor(200000 / trials.length)));
    const ids = state.which === 'all' ? '' : '&trials=' + trials.map(t => t.id).join(',');
    const r = await api(`/api/v1/dashboard/experiments/${experimentId}/curves?name=${encodeURIComponent(state.metric)}` +
                        `&x=${state.x}&points=${points}${ids}`);
    const byId = new Map(rows.map(t => [t.id, t]));
    r.trials.forEach(t => { t.index = byId.has(t.id) ? byId.get(t.id).index : 0; });
    state.data = r;
    draw();
  }

  const reload = () => load().catch(onError);
  metricSel.addEventListener('change', () => { state.metric = metricSel.value; reload(); });
  xSel.addEventListener('change', () => { state.x = xSel.value; reload(); });
  whichSel.addEventListener('change', () => { state.which = whichSel.value; reload(); });
  logY.addEventListener('change', () => { state.logY = logY.checked; draw(); });
  smoothIn.addEventListener('input', () => { state.smooth = Number(smoothIn.value); draw(); });

  return {
    el,
    // New trial rows (and the user's selection); reloads the curves.
    async update(newRows, newSelected, newLabels) {
      rows = newRows;
      selected = newSelected;
      labels = newLabels;
      await load();
    },
    selectionChanged(newSelected) {
      selected = newSelected;
      if (state.which === 'selected') reload();
    },
    setMetrics(names) {
      const keep = state.metric;
      const all = names.includes(keep) ? names : [keep, ...names];
      metricSel.replaceChildren(...all.map(n => h('option', { value: n, selected: n === keep }, n)));
    },
    shows(id) { return state.data && state.data.trials.some(t => t.id === id); },
  };
}
