// The experiments list: name, state, trials by state, best objective, start and duration.
import { api, duration, h, num, stateBadge, when } from './util.js';

const STATES = ['pending', 'running', 'completed', 'failed', 'cancelled', 'pruned'];

function counts(e) {
  return h('span', { class: 'counts' }, STATES.filter(s => e.trial_states[s] > 0).map(s =>
    h('span', { class: 'count state-' + s, title: s, dataset: { state: s } }, `${e.trial_states[s]} ${s}`)));
}

function row(e) {
  return h('tr', { dataset: { id: e.id } },
    h('td', { class: 'num' }, e.id),
    h('td', {}, h('a', { href: `#/experiments/${e.id}`, class: 'name' }, e.name)),
    h('td', { class: 'state-cell' }, stateBadge(e.state)),
    h('td', { class: 'num trials' }, e.trials),
    h('td', {}, counts(e)),
    h('td', { class: 'num best' }, num(e.objective_best)),
    h('td', { class: 'muted' }, `${e.objective.metric} (${e.objective.mode})`),
    h('td', { class: 'started' }, when(e.started_at || e.created_at)),
    h('td', { class: 'num duration' }, duration(e.seconds)));
}

export async function render(root, ctx) {
  ctx.crumbs([{ text: 'experiments' }]);
  const body = h('tbody');
  const table = h('table', { id: 'experiments', class: 'grid' },
    h('thead', {}, h('tr', {}, [['id', 'num'], ['name'], ['state'], ['trials', 'num'], ['by state'], ['best objective', 'num'],
                                 ['objective'], ['started'], ['duration', 'num']].map(([t, cls]) => h('th', { class: cls }, t)))),
    body);
  const empty = h('p', { class: 'muted', hidden: true },
    'No experiments yet. Submit one with `precon submit recipe.toml` or run `precon run recipe.toml`.');
  root.replaceChildren(h('h1', {}, 'Experiments'), table, empty);

  async function load() {
    const r = await api('/api/v1/dashboard/experiments');
    if (!ctx.isCurrent()) return;
    body.replaceChildren(...r.experiments.map(row));
    empty.hidden = r.experiments.length > 0;
    document.body.dataset.view = 'experiments';
    document.body.dataset.rendered = String(performance.now());
  }
  await load();
  return {
    // Durations grow while anything runs; reload on events or while something is active.
    async tick(events) {
      const active = [...body.querySelectorAll('.state-running')].length > 0;
      if (events.length || active) await load();
    },
    dispose() {},
  };
}
