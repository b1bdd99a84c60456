// Parallel coordinates of an experiment's trials: one vertical axis per swept key and one for the
// objective (its best value so far), one line per trial across them. Numeric keys are linear axes,
// or logarithmic when every value is positive and they span 20× or more; lists and choices are
// categorical axes. Dragging along an axis brushes a range of it: the lines outside every brush
// turn grey and the trials table shows only the trials inside (onFilter gets their ids, or null
// when no axis is brushed); a click on an axis without dragging clears its brush.
import { h, num, paramText } from './util.js';

const NS = 'http://www.w3.org/2000/svg';
const HEIGHT = 260, TOP = 28, BOTTOM = 22, SIDE = 70;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== '') el.append(c instanceof Node ? c : String(c));
  return el;
}

// An axis: where a value sits (a y pixel, or null without a value) and its tick labels.
function axisFor(key, title, values) {
  const present = values.filter(v => v !== undefined && v !== null);
  const numeric = present.length > 0 && present.every(v => typeof v === 'number' && Number.isFinite(v));
  const span = HEIGHT - TOP - BOTTOM;
  if (numeric) {
    let lo = Math.min(...present), hi = Math.max(...present);
    const log = lo > 0 && hi / lo >= 20;
    const f = log ? Math.log10 : x => x;
    if (hi === lo) { lo -= 0.5; hi += 0.5; }
    const a = f(lo), b = f(hi);
    const y = v => (typeof v === 'number' && Number.isFinite(v) ? TOP + span * (1 - (f(v) - a) / (b - a)) : null);
    return { key, title, log, y, ticks: [[hi, y(hi)], [lo, y(lo)]].map(([v, p]) => [num(v), p]) };
  }
  const cats = [...new Set(present.map(paramText))].sort();
  const step = cats.length > 1 ? span / (cats.length - 1) : 0;
  const at = new Map(cats.map((c, i) => [c, cats.length > 1 ? TOP + i * step : TOP + span / 2]));
  return { key, title, log: false, y: v => (v === undefined || v === null ? null : at.get(paramText(v)) ?? null),
           ticks: cats.map(c => [c, at.get(c)]) };
}

export function parallelCoordinates({ onFilter }) {
  const box = h('div', { class: 'parcoords', id: 'parcoords-box' });
  const brushes = new Map();  // axis key -> [y top, y bottom] in pixels
  let state = null;           // { axes, rows, xs, lines }

  function inside(r) {
    for (const [key, [y0, y1]] of brushes) {
      const axis = state.axes.find(a => a.key === key);
      const y = axis ? axis.y(axis.value(r)) : null;
      if (y === null || y < y0 || y > y1) return false;
    }
    return true;
  }

  function applyBrushes() {
    const ids = new Set();
    for (const { row, path } of state.lines) {
      const on = inside(row);
      path.dataset.active = on ? '1' : '0';
      path.setAttribute('class', on ? 'trial' : 'trial out');
      if (on) ids.add(row.id);
    }
    for (const axis of state.axes) {
      const b = brushes.get(axis.key);
      axis.rect.setAttribute('visibility', b ? 'visible' : 'hidden');
      if (b) {
        axis.rect.setAttribute('y', b[0]);
        axis.rect.setAttribute('height', Math.max(1, b[1] - b[0]));
      }
      axis.group.dataset.brushed = b ? `${b[0].toFixed(1)},${b[1].toFixed(1)}` : '';
    }
    onFilter(brushes.size ? ids : null);
  }

  function draw(swept, rows, objective) {
    const keys = swept.filter(k => rows.some(r => r.params && k in r.params));
    if (!keys.length || !rows.length) { box.replaceChildren(); state = null; return; }
    const width = Math.max(480, Math.min(1100, 150 * (keys.length + 1)));
    const axes = keys.map(k => Object.assign(axisFor(k, k, rows.map(r => r.params?.[k])), { value: r => r.params?.[k] }));
    const objAxis = axisFor('objective', `${objective.metric} (best)`, rows.map(r => r.objective_best));
    axes.push(Object.assign(objAxis, { value: r => r.objective_best }));
    for (const k of [...brushes.keys()]) if (!axes.some(a => a.key === k)) brushes.delete(k);
    const xs = axes.map((_, i) => SIDE + (i * (width - 2 * SIDE)) / Math.max(1, axes.length - 1));

    // Lines: darker and greener the better the trial's objective.
    const objs = rows.map(r => r.objective_best).filter(v => typeof v === 'number' && Number.isFinite(v));
    const lo = Math.min(...objs), hi = Math.max(...objs);
    const colour = v => {
      if (typeof v !== 'number' || !Number.isFinite(v)) return '#999';
      let t = hi > lo ? (v - lo) / (hi - lo) : 0;
      if (objective.mode === 'max') t = 1 - t;  // 0 = best
      return `hsl(${Math.round(140 * (1 - t) + 10)} 55% ${30 + 25 * t}%)`;
    };
    const lines = rows.map(r => {
      let d = '', pen = false;
      axes.forEach((a, i) => {
        const y = a.y(a.value(r));
        if (y === null) { pen = false; return; }
        d += `${pen ? 'L' : 'M'}${xs[i].toFixed(1)},${y.toFixed(1)}`;
        pen = true;
      });
      const path = svg('path', { d, class: 'trial', stroke: colour(r.objective_best), dataset: { id: r.id, active: '1' } },
        svg('title', {}, `trial ${r.id}`));
      return { row: r, path };
    });

    const plot = svg('svg', { id: 'parcoords', width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}` },
      svg('g', { class: 'lines' }, lines.map(l => l.path)));
    axes.forEach((a, i) => {
      a.rect = svg('rect', { class: 'brush', x: xs[i] - 8, width: 16, y: TOP, height: 0, visibility: 'hidden' });
      const hit = svg('rect', { class: 'axis-hit', x: xs[i] - 12, width: 24, y: TOP - 4, height: HEIGHT - TOP - BOTTOM + 8 });
      a.group = svg('g', { class: 'axis', dataset: { key: a.key, log: a.log ? '1' : '0' } },
        svg('line', { x1: xs[i], x2: xs[i], y1: TOP, y2: HEIGHT - BOTTOM }),
        a.ticks.map(([label, y]) => svg('text', { x: xs[i] + 6, y: y + 4, class: 'tick' }, label)),
        svg('text', { x: xs[i], y: TOP - 12, class: 'axis-title', 'text-anchor': 'middle' }, a.title + (a.log ? ' (log)' : '')),
        a.rect, hit);
      // Brushing: drag along the axis; a click without a drag clears it.
      hit.addEventListener('mousedown', down => {
        down.preventDefault();
        const top = plot.getBoundingClientRect().top;
        const y0 = down.clientY - top;
        let y1 = y0;
        const move = e => {
          y1 = e.clientY - top;
          brushes.set(a.key, [Math.min(y0, y1), Math.max(y0, y1)]);
          applyBrushes();
        };
        const up = () => {
          window.removeEventListener('mousemove', move);
          window.removeEventListener('mouseup', up);
          if (Math.abs(y1 - y0) < 3) brushes.delete(a.key);
          applyBrushes();
        };
        window.addEventListener('mousemove', move);
        window.addEventListener('mouseup', up);
      });
      plot.append(a.group);
    });
    state = { axes, rows, xs, lines };
    box.replaceChildren(h('h3', {}, 'Parallel coordinates (drag along an axis to filter the trials)'),
      h('div', { class: 'scroll' }, plot),
      h('p', { class: 'muted' }, h('button', { type: 'button', id: 'clear-brushes', onclick: () => { brushes.clear(); applyBrushes(); } },
        'clear the brushes')));
    applyBrushes();
  }

  return { el: box, draw };
}
