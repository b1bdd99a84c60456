"""Browser test of a study's page: a database seeded (by SQL, on the schema of precon itself) with a
finished study as a worker would leave it, 3 arms (adamw, muon-ns5, muon-ns3) x 4 model sizes x 3
learning-rate factors x 2 seeds, whose final losses follow L = E + A (k C)^-alpha with a known
multiplier k per arm; a study of two sizes, too few for a fit; and an experiment that is not a
study. Against a live `precon serve` in headless Chromium: the study's experiment page links to its
study page and the other experiment's does not; the study page draws every trial as a point and
each arm's fitted curve (the curve's samples are E + A C^-alpha of the API's fit, and the canvas
holds the arm's colour along it), a legend entry per arm, the multipliers with their intervals and
the compute-optimal arm per size as the API answers them; without a fit, the reason and the points;
no console errors. The screenshot goes to --out (its path is printed).

Usage: test_study.py --precon build/orchestrator/precon --out build/tests/browser/screenshots"""
import argparse
import json
import math
import os
import sqlite3
import sys
import time
import unittest

from selenium.webdriver.common.by import By

import harness

ARGS = None

ARMS = [('adamw', 'adamw', 1e-3, 1.0), ('muon-ns5', 'muon', 0.02, 1.6), ('muon-ns3', 'muon', 0.02, 1.35)]
WIDTHS = [32, 64, 128, 256]
LR_FACTORS = [0.5, 1.0, 2.0]
SEEDS = 2
LAYERS, HEADS, SEQ, VOCAB, BATCH = 2, 4, 64, 256, 8
E, A, ALPHA = 1.8, 2000.0, 0.3

def study_recipe(name, widths):
    """The recipe as submitted: its [study] names the baseline the report compares against."""
    return f'''[experiment]
name = "{name}"

[model]
n_layer = {LAYERS}
n_head = {HEADS}
seq_len = {SEQ}
vocab_size = {VOCAB}

[train]
batch_size = {BATCH}
log_every = 10

[study]
baseline = "adamw"
tokens_per_parameter = 20
lr_grid = {LR_FACTORS}
seeds = {SEEDS}
''' + ''.join(f'\n[[study.sizes]]\nmodel = {{d_model = {d}}}\n' for d in widths) + '''
[[study.arms]]
name = "adamw"
optimizer = {name = "adamw", lr = 1e-3}

[[study.arms]]
name = "muon-ns5"
optimizer = {name = "muon", lr = 0.02, muon = {ns_steps = 5}}

[[study.arms]]
name = "muon-ns3"
optimizer = {name = "muon", lr = 0.02, muon = {ns_steps = 3}}
'''


def trial_config(width, optimizer, lr, steps, seed):
    """A trial's stored config: the keys a study sets; the worker's defaults fill in the rest."""
    return (f'[model]\nn_layer = {LAYERS}\nn_head = {HEADS}\nd_model = {width}\nseq_len = {SEQ}\nvocab_size = {VOCAB}\n'
            f'[train]\nsteps = {steps}\nbatch_size = {BATCH}\nlog_every = 10\nseed = {seed}\n'
            f'[optimizer]\nname = "{optimizer}"\nlr = {lr}\n')


def seed_study(con, metric_ids, experiment, widths, now):
    """Every trial of the study completed, with what a worker reports at its last step."""
    index = 0
    for size, width in enumerate(widths):
        params = 12 * LAYERS * width * width + (VOCAB + SEQ) * width
        steps = math.ceil(20 * params / (BATCH * SEQ))
        model_flops = 6.0 * params * steps * BATCH * SEQ
        for arm, optimizer, lr, k in ARMS:
            compute = model_flops * (1.0 if optimizer == 'adamw' else 1.02)
            for factor in LR_FACTORS:
                for s in range(SEEDS):
                    loss = ((E + A * (k * compute) ** -ALPHA) * (1 + 0.05 * math.log2(factor) ** 2) *
                            math.exp(-0.003 if s == 0 else 0.003))
                    cell = {'study.arm': arm, 'study.size': size, 'study.lr_factor': factor, 'study.seed': s}
                    con.execute("INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, reason, run_dir,"
                                " attempts, last_step, created_at, started_at, ended_at) VALUES"
                                " (?, ?, ?, ?, 'completed', 'trained to the last step', ?, 1, ?, ?, ?, ?)",
                                (experiment, index, json.dumps(cell), trial_config(width, optimizer, lr * factor, steps, s),
                                 f'/runs/{experiment}/{index}', steps, now - 600, now - 500, now - 400))
                    trial = con.execute('SELECT max(id) FROM trials').fetchone()[0]
                    rows = [('val_loss', loss), ('flops', model_flops), ('compute_flops', compute), ('step_seconds', 0.01)]
                    con.executemany('INSERT INTO metrics (trial_id, name_id, step, value, time) VALUES (?, ?, ?, ?, ?)',
                                    [(trial, metric_ids[n], steps, v, now - 400) for n, v in rows])
                    index += 1


def seed(db):
    """The study, a study of two sizes (too few for a fit) and an experiment that is not a study; their ids."""
    harness.Controller(ARGS.precon, db=db).stop()
    con = sqlite3.connect(db)
    now = time.time()
    with con:
        def experiment(name, recipe):
            con.execute("INSERT INTO experiments (name, recipe_path, recipe_text, state, objective_metric, objective_mode,"
                        " max_concurrent, max_attempts, created_at, ended_at) VALUES (?, 'study.toml', ?, 'completed',"
                        " 'val_loss', 'min', 2, 1, ?, ?)", (name, recipe, now - 600, now - 10))
            return con.execute('SELECT max(id) FROM experiments').fetchone()[0]
        for name in ('val_loss', 'flops', 'compute_flops', 'step_seconds'):
            con.execute('INSERT OR IGNORE INTO metric_names (name) VALUES (?)', (name,))
        ids = dict(con.execute('SELECT name, id FROM metric_names'))
        study = experiment('muon-vs-adamw', study_recipe('muon-vs-adamw', WIDTHS))
        seed_study(con, ids, study, WIDTHS, now)
        short = experiment('two-sizes', study_recipe('two-sizes', WIDTHS[:2]))
        seed_study(con, ids, short, WIDTHS[:2], now)
        plain = experiment('plain-sweep', harness.tiny_recipe('/data', 'plain-sweep', 10, ''))
        con.execute("INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, run_dir, attempts,"
                    " last_step, created_at, started_at, ended_at) VALUES (?, 0, ?, ?, 'completed', '/runs/plain/0', 1,"
                    " 10, ?, ?, ?)", (plain, json.dumps({'optimizer.lr': 0.01}), trial_config(32, 'adamw', 0.01, 10, 0),
                                      now - 600, now - 500, now - 400))
    con.close()
    return study, short, plain


def sig3(v):
    """The study page's number format for multipliers: 3 significant digits."""
    return float(f'{v:.3g}')


# For each arm: its fitted series' samples (x, y) from the chart's uPlot, and how many of them have
# a pixel of the arm's colour on the canvas within a pixel of where they are drawn.
CURVE_PIXELS = """
const done = arguments[arguments.length - 1];
import('/charts.js').then(m => {
  const el = document.getElementById('study-chart');
  const u = m.chartOf(el);
  const probe = document.createElement('canvas').getContext('2d', { willReadFrequently: true });
  const rgb = css => { probe.clearRect(0, 0, 1, 1); probe.fillStyle = css; probe.fillRect(0, 0, 1, 1);
                       return probe.getImageData(0, 0, 1, 1).data; };
  const out = {};
  for (const item of document.querySelectorAll('#study-legend .item')) {
    const arm = item.dataset.arm, want = rgb(item.dataset.color);
    const si = u.series.findIndex(s => s.label === arm + ' (fit)');
    if (si < 0) { out[arm] = null; continue; }
    const xs = [], ys = [];
    let hits = 0;
    u.data[0].forEach((x, i) => {
      const y = u.data[si][i];
      if (y === null || y === undefined) return;
      xs.push(x); ys.push(y);
      const cx = Math.round(u.valToPos(x, 'x', true)), cy = Math.round(u.valToPos(y, 'y', true));
      const px = u.ctx.getImageData(cx - 1, cy - 1, 3, 3).data;
      for (let p = 0; p < px.length; p += 4) {
        if (px[p + 3] > 200 && Math.abs(px[p] - want[0]) + Math.abs(px[p + 1] - want[1]) + Math.abs(px[p + 2] - want[2]) < 60) {
          hits++;
          break;
        }
      }
    });
    out[arm] = { xs, ys, hits, series: si };
  }
  done({ arms: out, canvas: !!el.querySelector('canvas'), series: u.series.length - 1, rows: u.data[0].length });
}).catch(e => done({ error: String(e) }));
"""


class StudyPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t0 = time.time()
        cls.work = harness.Controller.scratch()
        db = os.path.join(cls.work, 'study.db')
        cls.study_id, cls.short_id, cls.plain_id = seed(db)
        cls.ctl = harness.Controller(ARGS.precon, db=db)
        cls.driver = harness.chromium()
        os.makedirs(ARGS.out, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.ctl.stop()
        import shutil
        shutil.rmtree(cls.work, ignore_errors=True)
        print(f'study browser test wall time: {time.time() - cls.t0:.1f} s', file=sys.stderr)

    def open(self, fragment, view):
        self.driver.get(f'{self.ctl.url}/#{fragment}')
        return harness.rendered(self.driver, view)

    def test_1_only_a_study_links_to_its_study_page(self):
        self.open(f'/experiments/{self.plain_id}', 'experiment')
        self.assertEqual(self.driver.find_elements(By.ID, 'study-link'), [])
        self.open(f'/experiments/{self.study_id}', 'experiment')
        harness.click(self.driver, '#study-link')
        harness.rendered(self.driver, 'study')
        self.assertTrue(self.driver.current_url.endswith(f'#/experiments/{self.study_id}/study'))
        self.assertEqual(harness.console_errors(self.driver), [])

    def test_2_the_study_page_draws_the_fit_and_the_multipliers(self):
        self.open(f'/experiments/{self.study_id}/study', 'study')
        api = self.ctl.get(f'/api/v1/experiments/{self.study_id}/study')
        self.assertTrue(api['ok'], api['reason'])
        arms = {a['arm']: a for a in api['arms']}
        self.assertEqual(api['arms'][0]['arm'], 'adamw')  # the baseline first
        self.assertEqual(sorted(arms), sorted(a[0] for a in ARMS))
        chart = self.driver.find_element(By.ID, 'study-chart')
        self.assertEqual(chart.get_attribute('data-arms'), ' '.join(arms))
        self.assertEqual(int(chart.get_attribute('data-points')), len(api['points']))
        self.assertEqual(len(api['points']), len(WIDTHS) * len(ARMS) * len(LR_FACTORS) * SEEDS)

        drawn = self.driver.execute_async_script(CURVE_PIXELS)
        self.assertNotIn('error', drawn)
        self.assertTrue(drawn['canvas'])
        self.assertEqual(drawn['series'], 3 * len(ARMS))  # per arm: the other trials, the fit, the winners
        computes = [p['compute'] for p in api['points']]
        for name, a in arms.items():
            curve = drawn['arms'][name]
            self.assertIsNotNone(curve, f'no fitted series for {name}')
            # The samples span the trials' compute and lie on E + A C^-alpha of the API's fit.
            self.assertAlmostEqual(min(curve['xs']) / min(computes), 1, places=9)
            self.assertAlmostEqual(max(curve['xs']) / max(computes), 1, places=9)
            for x, y in zip(curve['xs'], curve['ys']):
                self.assertAlmostEqual(y, a['E'] + a['A'] * x ** -a['alpha'], delta=1e-9 * y)
            # Most of the curve shows in the arm's colour (others' curves and points cover some of it).
            self.assertGreaterEqual(curve['hits'], 0.5 * len(curve['xs']), f'{name}: {curve["hits"]} of {len(curve["xs"])}')
            print(f'{name}: {curve["hits"]} of {len(curve["xs"])} curve samples drawn in its colour', file=sys.stderr)

        # The legend names each arm with its multiplier; the table shows the multipliers and intervals.
        legend = {e.get_attribute('data-arm'): e.text for e in self.driver.find_elements(By.CSS_SELECTOR, '#study-legend .item')}
        self.assertEqual(list(legend), list(arms))
        for name, a in arms.items():
            row = self.driver.find_element(By.CSS_SELECTOR, f'#study-arms tbody tr[data-arm="{name}"]')
            shown = row.find_element(By.CSS_SELECTOR, 'td.multiplier').text
            self.assertTrue(shown.endswith('×'), shown)
            self.assertEqual(float(shown[:-1]), sig3(a['multiplier']))
            interval = row.find_element(By.CSS_SELECTOR, 'td.interval').text
            if name == api['baseline']:
                self.assertEqual(interval, '—')
                self.assertIn('baseline', legend[name])
                continue
            lo, hi = (float(v) for v in interval.strip('[]').split(','))
            self.assertEqual((lo, hi), (sig3(a['interval'][0]), sig3(a['interval'][1])))
            self.assertIn(shown, legend[name])
            self.assertIn(interval, legend[name])
            self.assertEqual(float(row.find_element(By.CSS_SELECTOR, 'td.alpha').text), sig3(a['alpha']))
        # The seeded multipliers come back within their intervals (1.6 and 1.35 against AdamW).
        for name, _, _, k in ARMS[1:]:
            self.assertLess(abs(arms[name]['multiplier'] / k - 1), 0.1, arms[name])
        winners = [r.text for r in self.driver.find_elements(By.CSS_SELECTOR, '#study-sizes tbody td.winner')]
        self.assertEqual(winners, [s['winner'] for s in api['sizes']])
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, '#study-warnings li')), len(api['warnings']))
        self.assertEqual(self.driver.find_elements(By.ID, 'study-reason'), [])

        path = os.path.join(ARGS.out, 'study.png')
        harness.full_page_screenshot(self.driver, path)
        print(f'study page screenshot: {path}', file=sys.stderr)
        self.assertEqual(harness.console_errors(self.driver), [])

    def test_3_a_study_without_a_fit_shows_why(self):
        self.open(f'/experiments/{self.short_id}/study', 'study')
        api = self.ctl.get(f'/api/v1/experiments/{self.short_id}/study')
        self.assertFalse(api['ok'])
        self.assertTrue(api['reason'])
        self.assertEqual(self.driver.find_element(By.ID, 'study-reason').text, 'no fit: ' + api['reason'])
        print(f'two sizes: no fit: {api["reason"]}', file=sys.stderr)
        self.assertEqual(self.driver.find_elements(By.ID, 'study-arms'), [])
        # The points are drawn all the same, without curves.
        chart = self.driver.find_element(By.ID, 'study-chart')
        self.assertEqual(int(chart.get_attribute('data-points')), len(api['points']))
        self.assertEqual(int(chart.get_attribute('data-series')), 2 * len(ARMS))
        self.assertEqual(harness.console_errors(self.driver), [])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument('--precon', required=True)
    p.add_argument('--out', required=True, help='directory for the screenshot')
    ARGS, rest = p.parse_known_args()
    ARGS.precon, ARGS.out = os.path.abspath(ARGS.precon), os.path.abspath(ARGS.out)
    unittest.main(argv=[sys.argv[0], '-v'] + rest)


if __name__ == '__main__':
    main()
