// Small helpers shared by the views: the API client (with the admin token), DOM building and
// number/time formatting. No plotting here (charts.js wraps uPlot).

const TOKEN_KEY = 'precon.token';

export function token() { return localStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) {
  if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// A JSON route, with the token when one is set (a controller whose reads are not public needs
// it for GETs too); throws ApiError with the server's message.
export async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  if (token()) headers.Authorization = 'Bearer ' + token();
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, 'unreachable', 'the controller does not answer (' + e.message + ')');
  }
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON: reported below */ }
  if (!res.ok) {
    const err = json && json.error ? json.error : { code: 'http_' + res.status, message: text.slice(0, 200) };
    throw new ApiError(res.status, err.code, err.message);
  }
  if (json === null) throw new ApiError(res.status, 'bad_json', path + ' did not answer JSON');
  return json;
}

// The most a page of a long list holds (the controller's maximum).
export const PAGE = 5000;

// Every page of a paginated route (?limit&cursor; the body's next_cursor says where the next
// starts, null after the last): the first page's body with the `key` lists of all pages joined.
// merge(all, page) may combine other fields of the later pages.
export async function apiAll(path, key, merge) {
  const sep = path.includes('?') ? '&' : '?';
  let all = null;
  let cursor = null;
  do {
    const page = await api(`${path}${sep}limit=${PAGE}` + (cursor === null ? '' : `&cursor=${cursor}`));
    if (all === null) all = page;
    else {
      for (const item of page[key]) all[key].push(item);
      if (merge) merge(all, page);
    }
    cursor = page.next_cursor ?? null;
  } while (cursor !== null);
  delete all.next_cursor;
  return all;
}

// h('td', {class: 'num', onclick: f}, 'text', child, ...): an element; strings become text nodes.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // Through the CSSOM: the Content-Security-Policy (style-src 'self') refuses style attributes.
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function num(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (typeof v !== 'number') return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function rate(v) {
  if (v === null || v === undefined) return '—';
  return v >= 1000 ? (v / 1000).toFixed(1) + 'k' : v.toFixed(0);
}

export function when(unix) {
  if (!unix) return '—';
  const d = new Date(unix * 1000);
  const p = n => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function duration(s) {
  if (s === null || s === undefined) return '—';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60), sec = Math.floor(s % 60);
  if (m < 60) return `${m}m ${String(sec).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
}

export function stateBadge(state) { return h('span', { class: 'state state-' + state }, state); }

// The swept value as text: strings as they are, everything else as JSON.
export function paramText(v) { return typeof v === 'string' ? v : JSON.stringify(v); }

// Each trial's swept values that tell it from the others, as "key=value ..." by trial id: only
// the keys the trial has (a union sweep's sub-grids have different keys), and of those the keys
// that take more than one value among the trials having them (all its keys when none does);
// the optimizer's name first. The same rule as `precon run`'s live view.
export function trialLabels(rows) {
  const seen = new Map();  // key -> Set of values
  for (const r of rows) {
    for (const [k, v] of Object.entries(r.params || {})) {
      if (!seen.has(k)) seen.set(k, new Set());
      seen.get(k).add(paramText(v));
    }
  }
  const short = k => (k === 'optimizer.name' ? 'optimizer' : k.replace(/^optimizer\./, ''));
  return new Map(rows.map(r => {
    const keys = Object.keys(r.params || {}).sort((a, b) =>
      (b === 'optimizer.name') - (a === 'optimizer.name') || (a < b ? -1 : a > b ? 1 : 0));
    const pairs = keys.map(k => ({ text: `${short(k)}=${paramText(r.params[k])}`, differs: seen.get(k).size > 1 }));
    const differing = pairs.filter(p => p.differs);
    const shown = differing.length ? differing : pairs;
    return [r.id, shown.length ? shown.map(p => p.text).join(' ') : '(base config)'];
  }));
}

export const ACTIVE = new Set(['pending', 'running']);

// Cancel buttons remember, by route, a pending confirmation and a request already sent, so a
// live re-render of the table does not reset them.
const armedUntil = new Map();  // path -> when the confirmation lapses (ms)
const sent = new Set();        // paths POSTed already

// A button that asks for a second click (within 5 s) before it POSTs `path` with the admin token.
export function cancelButton(label, path, onDone, onError) {
  const armed = () => (armedUntil.get(path) || 0) > Date.now();
  const b = h('button', { class: 'danger', type: 'button', disabled: sent.has(path) },
    sent.has(path) ? 'cancel sent' : armed() ? 'confirm: ' + label : label);
  b.addEventListener('click', async () => {
    if (!token()) { onError(new Error('paste the admin token (top right) first: it is in <db>.token next to the database')); return; }
    if (!armed()) {
      armedUntil.set(path, Date.now() + 5000);
      b.textContent = 'confirm: ' + label;
      setTimeout(() => { if (!armed() && !sent.has(path)) b.textContent = label; }, 5100);
      return;
    }
    armedUntil.delete(path);
    sent.add(path);
    b.disabled = true;
    b.textContent = 'cancelling…';
    try {
      await api(path, { method: 'POST', body: {} });
      b.textContent = 'cancel sent';
      if (onDone) await onDone();
    } catch (e) {
      sent.delete(path);
      b.disabled = false;
      b.textContent = label;
      onError(e);
    }
  });
  return b;
}

// Rows of an events list: time, kind, trial, message (early-stop reasons are in the message).
export function eventRows(events) {
  return events.map(e => h('tr', { class: 'event event-' + e.kind },
    h('td', { class: 'muted' }, when(e.time)),
    h('td', {}, e.kind),
    h('td', {}, e.trial_id ? h('a', { href: `#/trials/${e.trial_id}` }, 'trial ' + e.trial_id) : ''),
    h('td', {}, e.message)));
}
