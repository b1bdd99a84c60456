// The dashboard's shell: routes by the URL hash (#/, #/experiments/ID, #/experiments/ID/study,
// #/trials/ID), keeps the admin token (pasted once, or ?token= in the URL once confirmed) and polls the
// controller's event cursor every two seconds, handing new events to the current view so it can
// update without a reload.
import { api, h, setToken, token } from './util.js';
import * as experimentsView from './experiments.js';
import * as experimentView from './experiment.js';
import * as studyView from './study.js';
import * as trialView from './trial.js';

const POLL_MS = 2000;
const viewRoot = document.getElementById('view');
const banner = document.getElementById('banner');
let current = null;   // {tick(events), dispose()} of the shown view
let cursor = 0;       // last event id seen
let generation = 0;   // bumps on navigation so stale renders stop
let pollFailed = false;  // the banner shows a polling error, cleared by the next good poll

export function showError(err) {
  banner.hidden = false;
  banner.textContent = err && err.message ? err.message : String(err);
}
function clearError() { banner.hidden = true; banner.textContent = ''; }

function crumbs(parts) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(...parts.map(p => (p.href ? h('a', { href: p.href }, p.text) : h('span', {}, p.text))));
}

async function route() {
  const gen = ++generation;
  if (current) current.dispose();
  current = null;
  clearError();
  delete document.body.dataset.view;
  delete document.body.dataset.rendered;
  viewRoot.replaceChildren(h('p', { class: 'muted' }, 'loading…'));
  const hash = location.hash.replace(/^#/, '') || '/';
  const ctx = { crumbs, showError, isCurrent: () => gen === generation };
  try {
    let m;
    if ((m = hash.match(/^\/experiments\/(\d+)$/))) current = await experimentView.render(viewRoot, Number(m[1]), ctx);
    else if ((m = hash.match(/^\/experiments\/(\d+)\/study$/))) current = await studyView.render(viewRoot, Number(m[1]), ctx);
    else if ((m = hash.match(/^\/trials\/(\d+)$/))) current = await trialView.render(viewRoot, Number(m[1]), ctx);
    else current = await experimentsView.render(viewRoot, ctx);
  } catch (e) {
    if (gen === generation) {
      showError(e);
      viewRoot.replaceChildren();
    }
  }
}

async function poll() {
  try {
    let fresh = [];
    for (;;) {
      const r = await api(`/api/v1/events?since=${cursor}&limit=1000`);
      fresh = fresh.concat(r.events);
      cursor = r.cursor;
      if (r.events.length < 1000) break;
    }
    if (pollFailed) clearError();
    pollFailed = false;
    document.getElementById('live').classList.add('on');
    document.getElementById('live').title = 'live: updated ' + new Date().toLocaleTimeString();
    if (current && current.tick) await current.tick(fresh);
  } catch (e) {
    document.getElementById('live').classList.remove('on');
    pollFailed = true;
    showError(e);
  }
  setTimeout(poll, POLL_MS);
}

// A token in the link (?token=) is only an offer: taken as is, any link from anyone would replace
// the token kept in this browser with theirs. It leaves the address bar at once and is kept only
// when the user confirms.
function setupToken() {
  const params = new URLSearchParams(location.search);
  if (params.has('token')) {
    const offered = params.get('token').trim();
    params.delete('token');
    const q = params.toString();
    history.replaceState(null, '', location.pathname + (q ? '?' + q : '') + location.hash);
    const replacing = token() ? ' It replaces the token saved in this browser.' : '';
    if (offered && offered !== token() &&
        confirm('Use the token in this link for this dashboard?' + replacing +
                ' Accept only a link you made yourself from <db>.token.')) setToken(offered);
  }
  const state = document.getElementById('token-state');
  const input = document.getElementById('token-input');
  const show = () => { state.textContent = token() ? 'token set' : 'no token: cancel needs it (and reads, where they are not public)'; };
  document.getElementById('token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    setToken(input.value.trim());
    input.value = '';
    show();
  });
  show();
}

async function start() {
  setupToken();
  // Start the cursor at the newest event: views load history themselves.
  try {
    for (;;) {
      const r = await api(`/api/v1/events?since=${cursor}&limit=10000`);
      cursor = r.cursor;
      if (r.events.length < 10000) break;
    }
  } catch (e) { showError(e); }
  window.addEventListener('hashchange', route);
  await route();
  setTimeout(poll, POLL_MS);
}

start();
