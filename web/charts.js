// Chart builders over uPlot (the npm package, copied to vendor/ by the build): overlaid lines,
// scatter plots with numeric or categorical x, the Pareto front, and a study's points and fits.
// Each builder replaces the chart held by its container, so a view can redraw on every update.
import uPlot from './vendor/uPlot.esm.js';

const charts = new WeakMap();  // container -> uPlot

// The i-th series colour; alpha < 1 gives a faint version of it.
export function color(i, alpha = 1) {
  const hsl = `${(i * 137.508) % 360} 62% 44%`;
  return alpha < 1 ? `hsl(${hsl} / ${alpha})` : `hsl(${hsl})`;
}

function place(container, opts, data) {
  const old = charts.get(container);
  if (old) old.destroy();
  container.replaceChildren();
  const u = new uPlot(opts, data, container);
  charts.set(container, u);
  return u;
}

// Axis tick labels: short, also for tiny values such as seconds per step, with just enough
// significant digits that neighbouring ticks read differently.
function ticks(u, splits) {
  const known = splits.filter(v => v !== null);
  const step = known.length > 1 ? Math.abs(known[1] - known[0]) : 0;
  return splits.map(v => {
    if (v === null) return '';
    if (v === 0) return '0';
    const a = Math.abs(v);
    const digits = step > 0 ? Math.min(7, Math.max(2, Math.ceil(Math.log10(a / step)) + 1)) : 3;
    if (a >= 1e5 || a < 1e-3) return v.toExponential(digits - 1).replace(/\.?0+e/, 'e');
    return String(Number(v.toPrecision(Math.max(4, digits))));
  });
}

// Linear scales padded by 6% of the data range, so points at the extremes stay inside the frame.
function padded(u, min, max) {
  const pad = (max - min) * 0.06 || Math.abs(max) * 0.1 || 1;
  return [min - pad, max + pad];
}

function size(container, height) {
  return { width: Math.max(320, container.clientWidth || 640), height };
}

// The uPlot a container holds (undefined when none): its scales, series and data.
export function chartOf(container) { return charts.get(container); }

export function destroyChart(container) {
  const old = charts.get(container);
  if (old) { old.destroy(); charts.delete(container); }
}

// series: [{label, values, color}] over the shared x array `x`. The legend lists the series
// while there are few enough to read.
export function lineChart(container, { x, series, xLabel, yLabel, logY = false, height = 320 }) {
  const opts = {
    ...size(container, height),
    legend: { show: series.length <= 30, live: series.length <= 30 },
    cursor: { points: { show: series.length <= 30 } },
    scales: { x: { time: false }, y: { distr: logY ? 3 : 1 } },
    axes: [{ label: xLabel, values: ticks }, { label: yLabel, size: 60, values: ticks }],
    series: [{ label: xLabel }, ...series.map((s, i) => ({
      label: s.label, stroke: s.color || color(i), width: 1.25, spanGaps: true, points: { show: false },
    }))],
  };
  container.dataset.series = String(series.length);
  return place(container, opts, [x, ...series.map(s => s.values)]);
}

// points: [{x, y}] with numeric x, or x an index into `categories` (shown as labels).
export function scatterChart(container, { points, xLabel, yLabel, categories = null, logX = false, height = 260 }) {
  const sorted = [...points].sort((a, b) => a.x - b.x);
  const x = categories ? { time: false, range: [-0.5, categories.length - 0.5] }
    : logX ? { time: false, distr: 3 } : { time: false, range: padded };
  const xAxis = { label: xLabel, values: ticks };
  if (categories) {
    xAxis.splits = () => categories.map((_, i) => i);
    xAxis.values = (u, splits) => splits.map(v => categories[v] ?? '');
  }
  const opts = {
    ...size(container, height),
    scales: { x, y: { time: false, range: padded } },
    axes: [xAxis, { label: yLabel, size: 60, values: ticks }],
    series: [{ label: xLabel, value: (u, v) => (v === null ? '—' : categories ? categories[v] : v) },
             { label: yLabel, stroke: color(0), paths: () => null, points: { show: true, size: 8, fill: color(0) } }],
  };
  container.dataset.series = '1';
  container.dataset.points = String(sorted.length);
  return place(container, opts, [sorted.map(p => p.x), sorted.map(p => p.y)]);
}

// points: [{x: seconds per step, y: objective, front: bool}]; the front is drawn as a line.
export function paretoChart(container, { points, yLabel, height = 260 }) {
  const sorted = [...points].sort((a, b) => a.x - b.x);
  const opts = {
    ...size(container, height),
    scales: { x: { time: false, range: padded }, y: { time: false, range: padded } },
    axes: [{ label: 'seconds per step', values: ticks }, { label: yLabel, size: 60, values: ticks }],
    series: [{ label: 's/step' },
             { label: 'trials', stroke: color(3), paths: () => null, points: { show: true, size: 7, fill: color(3) } },
             { label: 'Pareto front', stroke: color(0), width: 2, spanGaps: true, points: { show: true, size: 9, fill: color(0) } }],
  };
  container.dataset.series = '2';
  return place(container, opts, [sorted.map(p => p.x), sorted.map(p => p.y), sorted.map(p => (p.front ? p.y : null))]);
}

// series: [{label, color, faint, winners: [{x, y}], others: [{x, y}], curve: {xs, ys} | null}],
// one per arm, on a log x axis: the others as faint points, the fitted curves as lines, the
// winners as filled points on top. Each point is a row of its own in uPlot's aligned data (two
// trials may share a compute), null in every other series; the lines span those gaps.
export function studyChart(container, { series, xLabel, yLabel, height = 420 }) {
  const rows = [];  // [x, column, y]
  const columns = [];
  const add = (points, opts) => {
    const col = columns.length;
    columns.push(opts);
    for (const p of points) rows.push([p.x, col, p.y]);
  };
  series.forEach(s => add(s.others, { label: s.label + ' (other trials)', stroke: s.faint, paths: () => null,
                                      points: { show: true, size: 6, fill: s.faint, stroke: s.faint } }));
  series.forEach(s => {
    if (s.curve) add(s.curve.xs.map((x, i) => ({ x, y: s.curve.ys[i] })),
                     { label: s.label + ' (fit)', stroke: s.color, width: 2, spanGaps: true, points: { show: false } });
  });
  series.forEach(s => add(s.winners, { label: s.label, stroke: s.color, paths: () => null,
                                       points: { show: true, size: 8, fill: s.color, stroke: s.color } }));
  rows.sort((a, b) => a[0] - b[0]);
  const data = [rows.map(r => r[0]), ...columns.map((_, c) => rows.map(r => (r[1] === c ? r[2] : null)))];
  const opts = {
    ...size(container, height),
    legend: { show: false },
    cursor: { points: { show: false } },
    scales: { x: { time: false, distr: 3 }, y: { time: false, range: padded } },
    axes: [{ label: xLabel, values: ticks }, { label: yLabel, size: 60, values: ticks }],
    series: [{ label: xLabel }, ...columns],
  };
  container.dataset.series = String(columns.length);
  return place(container, opts, data);
}
