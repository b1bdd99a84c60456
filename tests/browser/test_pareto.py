"""Browser test of the dashboard's Pareto front for several objectives: a live `precon serve` runs a
grid of five trials of a small program that reports chosen values of two objectives (f1, f2), both
minimised. By hand: (1, 5), (2, 3) and (4, 1) trade off (rank 1, the front); (3, 4) is beaten by
(2, 3) only (rank 2); (5, 5) by (3, 4) too (rank 3). In headless Chromium the experiment page's
front table lists every trial with its rank, the front's rows marked, the values as reported; the
scatter of f1 against f2 holds the five points; no console errors. The screenshot goes to --out.

Usage: test_pareto.py --precon build/orchestrator/precon --out build/tests/browser/screenshots"""
import argparse
import os
import sys
import time
import unittest

from selenium.webdriver.common.by import By

import harness

ARGS = None

# (f1, f2) -> rank, worked out by hand (see above).
TRIALS = {(1, 5): 1, (2, 3): 1, (4, 1): 1, (3, 4): 2, (5, 5): 3}

PROGRAM = """import json, sys
with open('metrics.jsonl', 'a') as f:
    f.write(json.dumps({'step': 1, 'f1': float(sys.argv[1]), 'f2': float(sys.argv[2])}) + '\\n')
"""

# The objectives chart's points as uPlot holds them.
CHART_POINTS = """
const done = arguments[arguments.length - 1];
import('/charts.js').then(m => {
  const u = m.chartOf(document.getElementById('objectives-chart'));
  if (!u) { done({ error: 'no chart' }); return; }
  done({ xs: Array.from(u.data[0]), ys: Array.from(u.data[1]), canvas: !!u.ctx });
}).catch(e => done({ error: String(e) }));
"""


class ParetoFront(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t0 = time.time()
        cls.ctl = harness.Controller(ARGS.precon)
        prog = os.path.join(cls.ctl.dir, 'objectives.py')
        with open(prog, 'w') as f:
            f.write(PROGRAM)
        grids = ''.join(f'[[sweep.grid]]\na = [{a}]\nb = [{b}]\n' for a, b in TRIALS)
        recipe = (f'[experiment]\nname = "front"\n[trial]\ncommand = ["{sys.executable}", "{prog}", "{{a}}", "{{b}}"]\n'
                  '[objective]\nmetrics = ["f1", "f2"]\nmodes = ["min", "min"]\n'
                  '[sweep]\nmethod = "grid"\nmax_concurrent = 2\n' + grids)
        cls.exp = cls.ctl.submit(recipe)
        cls.ctl.wait(lambda: cls.ctl.get(f'/api/v1/experiments/{cls.exp}')['state'] != 'running', 60, 'the sweep')
        cls.driver = harness.chromium()
        os.makedirs(ARGS.out, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.ctl.stop()
        print(f'pareto browser test wall time: {time.time() - cls.t0:.1f} s', file=sys.stderr)

    def test_the_front_is_shown_with_each_trials_rank(self):
        trials = self.ctl.get(f'/api/v1/experiments/{self.exp}/trials')['trials']
        self.assertEqual([t['state'] for t in trials], ['completed'] * len(TRIALS))
        values = {t['id']: (t['params']['a'], t['params']['b']) for t in trials}

        self.driver.get(f'{self.ctl.url}/#/experiments/{self.exp}')
        harness.rendered(self.driver, 'experiment')
        harness.wait_for(self.driver, lambda d: d.execute_script('return document.body.dataset.objectivesFront'), 20,
                         'the objectives front')
        self.assertEqual(self.driver.execute_script('return document.body.dataset.objectivesFront'), '3')

        heads = [th.text for th in self.driver.find_elements(By.CSS_SELECTOR, '#objectives-table thead th')]
        self.assertEqual(heads[:4], ['rank', 'trial', 'f1', 'f2'])
        rows = self.driver.find_elements(By.CSS_SELECTOR, '#objectives-table tbody tr')
        self.assertEqual(len(rows), len(TRIALS))
        seen = {}
        for row in rows:
            cells = [td.text for td in row.find_elements(By.TAG_NAME, 'td')]
            trial = int(cells[1])
            f1, f2 = float(cells[2]), float(cells[3])
            self.assertEqual((f1, f2), values[trial], cells)
            want = TRIALS[values[trial]]
            self.assertEqual(int(cells[0]), want, cells)
            self.assertEqual('front' in row.get_attribute('class').split(), want == 1, cells)
            seen[values[trial]] = int(cells[0])
        self.assertEqual(seen, TRIALS)
        # Ranked in order: the front first.
        ranks = [int(r.find_elements(By.TAG_NAME, 'td')[0].text) for r in rows]
        self.assertEqual(ranks, sorted(ranks))

        chart = self.driver.execute_async_script(CHART_POINTS)
        self.assertNotIn('error', chart)
        self.assertTrue(chart['canvas'])
        self.assertEqual(sorted(zip(chart['xs'], chart['ys'])), sorted((float(a), float(b)) for a, b in TRIALS))

        path = os.path.join(ARGS.out, 'pareto.png')
        harness.full_page_screenshot(self.driver, path)
        print(f'pareto front screenshot: {path}', file=sys.stderr)
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
