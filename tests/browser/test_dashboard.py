"""Browser tests of the dashboard: headless Chromium (Selenium) against a live `precon serve`
holding a real finished sweep (2 learning rates x 2 seeds of a tiny GPT), a union of two
sub-grids, a trial the trainer rejected and a running one.
Pages load without console errors, tables show the values the JSON API returns, the curve chart
draws one series per trial (the objective first, each labelled by its own swept keys), the
heatmap starts on two keys that vary within one sub-grid, metrics zero for the whole run are
named on one line instead of charted, the live view updates without a reload, and cancelling from the UI
cancels (checked through the API). Screenshots of every page go to --out.

Usage: test_dashboard.py --precon build/orchestrator/precon --out build/tests/browser"""
import argparse
import json
import math
import os
import random
import sys
import time
import unittest

from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import harness

ARGS = None


def harness_value(v):
    """A swept value as the dashboard writes it: strings as they are, the rest as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def sig4(v):
    """The dashboard's number format: 4 significant digits."""
    return float(f'{v:.4g}')


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t0 = time.time()
        cls.ctl = harness.Controller(ARGS.precon)
        data = cls.ctl.dir
        rng = random.Random(3)
        tokens = [((i % 13) * 5 + (rng.randrange(50) if rng.randrange(5) == 0 else 0)) % 61 for i in range(8000)]
        harness.write_shard(os.path.join(data, 'train.bin'), tokens)
        harness.write_shard(os.path.join(data, 'val.bin'), tokens[:2000])
        sweep = ('[sweep]\nmethod = "grid"\nmax_concurrent = 2\n[sweep.parameters]\n'
                 '"optimizer.lr" = [0.003, 0.01]\n"train.seed" = [1, 2]\n')
        cls.done_id = cls.ctl.submit(harness.tiny_recipe(data, 'finished-sweep', 20, sweep))
        cls.ctl.wait(lambda: cls.ctl.get(f'/api/v1/experiments/{cls.done_id}')['state'] != 'running', 120,
                     'the finished sweep')
        # A union of two sub-grids: AdamW's lr x seed, and Muon's ns_steps alone.
        union = ('[sweep]\nmethod = "grid"\nmax_concurrent = 2\n'
                 '[[sweep.grid]]\n"optimizer.name" = ["adamw"]\n"optimizer.lr" = [0.003, 0.01]\n"train.seed" = [1, 2]\n'
                 '[[sweep.grid]]\n"optimizer.name" = ["muon"]\n"optimizer.muon.ns_steps" = [3, 5]\n')
        cls.union_id = cls.ctl.submit(harness.tiny_recipe(data, 'union-sweep', 10, union))
        cls.ctl.wait(lambda: cls.ctl.get(f'/api/v1/experiments/{cls.union_id}')['state'] != 'running', 120,
                     'the union sweep')
        # A trial the trainer rejects: its train.init_from is a token shard, not a safetensors file
        # (submit checks that the file exists; what it holds is the trainer's to read).
        failing = harness.tiny_recipe(data, 'failing-trial', 20,
                                      '[sweep]\nmax_attempts = 3\n[sweep.parameters]\n"train.seed" = [1]\n'
                                      '"train.init_from" = ["%s"]\n' % os.path.join(data, 'val.bin'))
        cls.failed_id = cls.ctl.submit(failing)
        cls.ctl.wait(lambda: cls.ctl.get(f'/api/v1/experiments/{cls.failed_id}')['state'] != 'running', 60,
                     'the failing trial')
        cls.run_id = cls.ctl.submit(harness.tiny_recipe(data, 'running-sweep', 10000000, '', log_every=5))
        cls.ctl.wait(lambda: cls.ctl.get(f'/api/v1/experiments/{cls.run_id}/trials')['trials'][0]['last_step'] > 0,
                     60, 'the running trial to report')
        cls.driver = harness.chromium()
        os.makedirs(ARGS.out, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.ctl.stop()
        print(f'browser suite wall time: {time.time() - cls.t0:.1f} s', file=sys.stderr)

    def open(self, fragment, view, token=False):
        q = f'?token={self.ctl.token}' if token else ''
        self.driver.get(f'{self.ctl.url}/{q}#{fragment}')
        if token:
            # Asked unless this browser holds that token already.
            try:
                self.answer_token_prompt(accept=True, seconds=2)
            except TimeoutException:
                pass
        return harness.rendered(self.driver, view)

    def saved_token(self):
        return self.driver.execute_script("return localStorage.getItem('precon.token')")

    def answer_token_prompt(self, accept, seconds=10):
        """The dashboard asks before it keeps a token that came in a link; returns the question."""
        alert = WebDriverWait(self.driver, seconds).until(expected_conditions.alert_is_present())
        question = alert.text
        alert.accept() if accept else alert.dismiss()
        return question

    def shot(self, name):
        harness.full_page_screenshot(self.driver, os.path.join(ARGS.out, name + '.png'))

    def assertNoConsoleErrors(self):
        self.assertEqual(harness.console_errors(self.driver), [])

    def cells(self, row, key):
        return row.find_element(By.CSS_SELECTOR, f'td[data-key="{key}"]').text

    def test_1_experiments_list_matches_the_api(self):
        self.open('/', 'experiments')
        api = {e['id']: e for e in self.ctl.get('/api/v1/experiments')['experiments']}
        # One snapshot of the table: it re-renders every poll while an experiment runs.
        rows = self.driver.execute_script("""
            return [...document.querySelectorAll('#experiments tbody tr')].map(r => ({
              id: Number(r.dataset.id), name: r.querySelector('a.name').textContent,
              state: r.querySelector('.state-cell').textContent, trials: Number(r.querySelector('.trials').textContent),
              best: r.querySelector('.best').textContent,
              chips: [...r.querySelectorAll('.count')].map(c => [c.dataset.state, parseInt(c.textContent)])}));""")
        self.assertEqual(len(rows), len(api))
        for row in rows:
            e = api[row['id']]
            self.assertEqual(row['name'], e['name'])
            self.assertEqual(row['state'], e['state'])
            self.assertEqual(row['trials'], e['trials'])
            for state, n in row['chips']:
                self.assertEqual(n, e['trial_states'][state])
        # The finished sweep's best objective: the smallest val_loss of all its trials.
        best = min(v for t in self.ctl.get(f'/api/v1/experiments/{self.done_id}/trials')['trials']
                   for v in self.ctl.get(f'/api/v1/trials/{t["id"]}/metrics?name=val_loss')['metrics']['val_loss']['values']
                   if v is not None)
        done = next(r for r in rows if r['id'] == self.done_id)
        self.assertEqual(float(done['best']), sig4(best))
        self.shot('experiments')
        self.assertNoConsoleErrors()

    def test_2_experiment_page_shows_the_stored_trials(self):
        self.open(f'/experiments/{self.done_id}', 'experiment')
        trials = {t['id']: t for t in self.ctl.get(f'/api/v1/experiments/{self.done_id}/trials')['trials']}
        rows = self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr')
        self.assertEqual(len(rows), 4)
        for row in rows:
            t = trials[int(row.get_attribute('data-id'))]
            self.assertEqual(self.cells(row, 'id'), str(t['id']))  # the trial's one identifier, not its sweep index
            self.assertEqual(self.cells(row, 'state'), t['state'])
            self.assertEqual(int(self.cells(row, 'last_step')), t['last_step'])
            self.assertEqual(float(self.cells(row, 'p:optimizer.lr')), t['params']['optimizer.lr'])
            self.assertEqual(int(self.cells(row, 'attempts')), t['attempts'])
            vals = self.ctl.get(f'/api/v1/trials/{t["id"]}/metrics?name=val_loss')['metrics']['val_loss']['values']
            self.assertEqual(float(self.cells(row, 'objective_best')), sig4(min(v for v in vals if v is not None)))
            self.assertEqual(float(self.cells(row, 'objective_last')), sig4(t['objective']))
        # The curves show the objective first (its metric, val_loss), not train_loss.
        self.assertEqual(self.driver.find_element(By.ID, 'curve-metric').get_attribute('value'), 'val_loss')
        self.assertEqual(self.driver.find_element(By.ID, 'curves-chart').get_attribute('data-metric'), 'val_loss')
        # One curve per trial, listed in the legend; the sweep view has a scatter per swept key and
        # a 2x2 heatmap; the Pareto front loads.
        chart = self.driver.find_element(By.ID, 'curves-chart')
        self.assertEqual(chart.get_attribute('data-series'), '4')
        self.assertEqual(len(chart.find_elements(By.CSS_SELECTOR, '.u-legend tr.u-series')) - 1, 4)
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, '#sweep .scatter canvas')), 2)
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, '#heatmap tbody td')), 4)
        harness.wait_for(self.driver, lambda d: d.execute_script('return document.body.dataset.pareto'), 20, 'the Pareto chart')
        self.assertTrue(self.driver.find_elements(By.CSS_SELECTOR, '#pareto-chart canvas'))
        # Each swept key's importance (fANOVA) as the API computes it: one bar per key, largest first.
        harness.wait_for(self.driver, lambda d: d.execute_script('return document.body.dataset.importance'), 20,
                         'the importance panel')
        self.assertEqual(self.driver.execute_script('return document.body.dataset.importance'), 'ready')
        imp = self.ctl.get(f'/api/v1/experiments/{self.done_id}/importance')['importance']
        bars = self.driver.find_elements(By.CSS_SELECTOR, '#importance tbody tr')
        self.assertEqual([b.get_attribute('data-key') for b in bars], [p['name'] for p in imp])
        self.assertAlmostEqual(sum(float(b.get_attribute('data-importance')) for b in bars), 1.0, places=9)
        # Parallel coordinates: an axis per swept key and one for the objective, a line per trial.
        # Brushing the upper half of the objective's axis (the worse losses) leaves in the table
        # exactly the trials whose lines stay coloured; clearing the brushes brings back all four.
        axes = [a.get_attribute('data-key') for a in self.driver.find_elements(By.CSS_SELECTOR, '#parcoords g.axis')]
        self.assertEqual(axes, ['optimizer.lr', 'train.seed', 'objective'])
        paths = self.driver.find_elements(By.CSS_SELECTOR, '#parcoords path.trial')
        self.assertEqual(len(paths), 4)
        hit = self.driver.find_element(By.CSS_SELECTOR, '#parcoords g.axis[data-key="objective"] rect.axis-hit')
        half = int(hit.size['height']) // 2
        ActionChains(self.driver).move_to_element_with_offset(hit, 0, -half + 2).click_and_hold() \
            .move_by_offset(0, half - 2).release().perform()
        self.assertTrue(self.driver.find_element(By.CSS_SELECTOR, '#parcoords g.axis[data-key="objective"]')
                        .get_attribute('data-brushed'))
        active = {int(p.get_attribute('data-id')) for p in paths if p.get_attribute('data-active') == '1'}
        shown = {int(r.get_attribute('data-id')) for r in self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr')}
        self.assertEqual(shown, active)
        self.assertTrue(0 < len(active) < 4, active)
        best_of = {t['id']: min(v for v in self.ctl.get(f'/api/v1/trials/{t["id"]}/metrics?name=val_loss')['metrics']
                                ['val_loss']['values'] if v is not None)
                   for t in self.ctl.get(f'/api/v1/experiments/{self.done_id}/trials')['trials']}
        self.assertGreater(min(best_of[i] for i in active), max(best_of[i] for i in set(best_of) - active))
        self.driver.find_element(By.ID, 'clear-brushes').click()
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr')), 4)
        # Sorting by the best objective orders the rows by it; selecting two rows draws two curves.
        self.driver.find_element(By.CSS_SELECTOR, '#trials th[data-key="objective_best"]').click()
        best = [float(self.cells(r, 'objective_best')) for r in self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr')]
        self.assertEqual(best, sorted(best))
        boxes = self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody input[type=checkbox]')
        boxes[0].click()
        boxes[1].click()
        self.driver.find_element(By.CSS_SELECTOR, '#curve-which option[value="selected"]').click()
        harness.wait_for(self.driver, lambda d: chart.get_attribute('data-series') == '2', 10, 'two selected curves')
        # Against wall-clock seconds with log y: still two series.
        self.driver.find_element(By.CSS_SELECTOR, '#curve-x option[value="time"]').click()
        self.driver.find_element(By.ID, 'curve-logy').click()
        harness.wait_for(self.driver, lambda d: 'wall' in d.find_element(By.ID, 'curves-chart').text or
                         d.find_element(By.ID, 'curves-chart').get_attribute('data-series') == '2', 10, 'the time axis')
        # Filtering: "key=value" keeps the rows whose swept key has that value, whatever the
        # timing columns show (a plain "0.01" also matches an s/step of 0.0123: a CI run once
        # counted 3 rows that way). The table redraws on each keystroke's input event: wait for it.
        rows = lambda d: len(d.find_elements(By.CSS_SELECTOR, '#trials tbody tr'))
        box = self.driver.find_element(By.ID, 'trial-filter')
        box.send_keys('lr=0.01')
        harness.wait_for(self.driver, lambda d: rows(d) == 2, 10, 'the two rows with lr=0.01')
        lrs = {float(self.cells(r, 'p:optimizer.lr')) for r in self.driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr')}
        self.assertEqual(lrs, {0.01})
        box.clear()
        box.send_keys('optimizer.lr=0.003')
        harness.wait_for(self.driver, lambda d: rows(d) == 2, 10, 'the two rows with optimizer.lr=0.003')
        # Plain text searches what the cells show: every trial shows its state.
        box.clear()
        box.send_keys('COMPLETED')
        harness.wait_for(self.driver, lambda d: rows(d) == 4, 10, 'the four completed rows')
        box.clear()
        box.send_keys('no such text')
        harness.wait_for(self.driver, lambda d: rows(d) == 0, 10, 'no row for text no cell shows')
        self.shot('experiment')
        self.assertNoConsoleErrors()

    def test_2b_a_union_sweep_labels_each_trial_by_its_own_keys(self):
        self.open(f'/experiments/{self.union_id}', 'experiment')
        trials = self.ctl.get(f'/api/v1/experiments/{self.union_id}/trials')['trials']
        self.assertEqual(len(trials), 6)
        chart = self.driver.find_element(By.ID, 'curves-chart')
        self.assertEqual(chart.get_attribute('data-series'), '6')
        legend = [e.text for e in chart.find_elements(By.CSS_SELECTOR, '.u-legend tr.u-series .u-label')][1:]
        self.assertEqual(len(legend), 6)
        short = {'optimizer.name': 'optimizer', 'optimizer.lr': 'lr', 'train.seed': 'train.seed',
                 'optimizer.muon.ns_steps': 'muon.ns_steps'}
        for t in trials:
            label = next(l for l in legend if l.startswith(f'trial {t["id"]}: '))
            self.assertNotIn('undefined', label)
            # Its own keys, the optimizer first; nothing of the other sub-grid.
            want = [f'{short[k]}={harness_value(v)}' for k, v in
                    sorted(t['params'].items(), key=lambda kv: (kv[0] != 'optimizer.name', kv[0]))]
            self.assertEqual(label, f'trial {t["id"]}: ' + ' '.join(want))
        # The heatmap starts on the two keys that vary together within one sub-grid (AdamW's lr x seed),
        # not on the first two swept keys (lr x ns_steps, which no trial has together).
        corner = self.driver.find_element(By.CSS_SELECTOR, '#heatmap thead th').text
        self.assertEqual(corner, 'optimizer.lr \\ train.seed')
        cells = self.driver.find_elements(By.CSS_SELECTOR, '#heatmap tbody td')
        self.assertEqual(len(cells), 4)
        self.assertFalse([c for c in cells if 'empty' in (c.get_attribute('class') or '')])
        self.shot('experiment-union')
        self.assertNoConsoleErrors()

    def test_3_trial_page_shows_config_attempts_and_metrics(self):
        tid = self.ctl.get(f'/api/v1/experiments/{self.done_id}/trials')['trials'][0]['id']
        self.open(f'/trials/{tid}', 'trial')
        t = self.ctl.get(f'/api/v1/trials/{tid}')
        self.assertEqual(self.driver.find_element(By.ID, 'config').text.strip(), t['config'].strip())
        att = self.driver.find_elements(By.CSS_SELECTOR, '#attempts tbody tr')
        self.assertEqual(len(att), len(t['attempts']))
        self.assertEqual(att[0].find_elements(By.TAG_NAME, 'td')[2].text, t['attempts'][0]['external_id'])
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, '#checkpoints tbody tr')), len(t['checkpoints']))
        # A chart for each metric with a non-zero value; the metrics zero for the whole run (AdamW
        # has no Newton-Schulz, statistics, inverse-root or grafting time) on one "empty" line.
        series = self.ctl.get(f'/api/v1/trials/{tid}/metrics?max_points=1000')['metrics']
        zero = sorted(n for n, m in series.items() if all(v in (None, 0) for v in m['values']))
        self.assertIn('optim_newton_schulz_seconds', zero)
        charts = self.driver.find_elements(By.CSS_SELECTOR, '#metric-charts .metric')
        self.assertEqual(sorted(c.get_attribute('data-metric') for c in charts), sorted(set(t['metrics']) - set(zero)))
        empty = self.driver.find_element(By.ID, 'empty-metrics')
        self.assertEqual(sorted(empty.get_attribute('data-metrics').split()), zero)
        self.assertEqual(empty.text, 'empty (zero for the whole run): ' + ', '.join(zero))
        # The log tail is the trainer's stderr as the API returns it, and it shows training steps.
        log = self.driver.find_element(By.ID, 'log').text
        tail = self.ctl.get(f'/api/v1/trials/{tid}/logs?stream=stderr&lines=200')['text']
        self.assertTrue(tail.strip(), 'the trainer wrote nothing to stderr')
        self.assertEqual([l.strip() for l in log.splitlines()], [l.strip() for l in tail.strip().splitlines()])
        self.assertRegex(log, r'\bstep\s+\d+')
        self.shot('trial')
        self.assertNoConsoleErrors()

    def test_3b_a_failed_trial_shows_the_trainers_error(self):
        t = self.ctl.get(f'/api/v1/experiments/{self.failed_id}/trials')['trials'][0]
        self.assertEqual(t['state'], 'failed')
        # A file the model cannot start from is a configuration error: one attempt of three, exit 2.
        self.assertTrue(t['reason'].startswith('train.init_from: '), t['reason'])
        self.assertIn('val.bin', t['reason'])
        self.assertTrue(t['reason'].endswith('(exit code 2: configuration error, not retried)'), t['reason'])
        self.open(f'/experiments/{self.failed_id}', 'experiment')
        row = self.driver.find_element(By.CSS_SELECTOR, '#trials tbody tr')
        self.assertEqual(self.cells(row, 'reason'), t['reason'])
        self.open(f'/trials/{t["id"]}', 'trial')
        self.assertEqual(self.driver.find_element(By.ID, 'trial-reason').text, t['reason'])
        self.assertEqual(self.driver.find_element(By.CSS_SELECTOR, '.exp-header h1').text.split()[:2], ['Trial', str(t['id'])])
        self.assertEqual(self.driver.find_element(By.CSS_SELECTOR, '#crumbs > :last-child').text, f'trial {t["id"]}')
        self.shot('trial-failed')
        self.assertNoConsoleErrors()

    def test_4_live_view_updates_and_cancel_from_the_ui_cancels(self):
        # The table re-renders every poll while the trial runs: cells are read through helpers
        # that look them up again.
        self.open(f'/experiments/{self.run_id}', 'experiment', token=True)
        self.assertNotIn('token=', self.driver.current_url)
        step = 'td[data-key="last_step"]'
        first = int(harness.text(self.driver, f'#trials tbody tr {step}'))
        harness.wait_for(self.driver, lambda d: int(d.find_element(By.CSS_SELECTOR, f'#trials tbody tr {step}').text) > first,
                         20, 'the step to grow')
        self.shot('experiment-live')
        trial_id = int(self.driver.find_element(By.CSS_SELECTOR, '#trials tbody tr').get_attribute('data-id'))
        button = '#trials tbody tr button.danger'
        harness.click(self.driver, button)
        self.assertIn('confirm', harness.text(self.driver, button))
        harness.click(self.driver, button)
        self.ctl.wait(lambda: self.ctl.get(f'/api/v1/trials/{trial_id}')['state'] == 'cancelled', 30,
                      'the trial to be cancelled')
        harness.wait_for(self.driver, lambda d: d.find_element(By.CSS_SELECTOR, '#trials tbody tr td[data-key="state"]').text
                         == 'cancelled', 15, 'the table to show it')
        self.shot('experiment-cancelled')
        self.assertNoConsoleErrors()

    def test_5_a_token_in_a_link_is_kept_only_when_confirmed(self):
        # A saved token, then a link carrying someone else's: declined, the saved one stays.
        self.open('/', 'experiments', token=True)
        self.assertEqual(self.saved_token(), self.ctl.token)
        self.driver.get(f'{self.ctl.url}/?token=junk#/')
        self.assertIn('Use the token in this link', self.answer_token_prompt(accept=False))
        harness.rendered(self.driver, 'experiments')
        self.assertEqual(self.saved_token(), self.ctl.token)
        self.assertNotIn('token=', self.driver.current_url)
        # Confirmed, it is kept; the real one is put back the same way.
        self.driver.get(f'{self.ctl.url}/?token=junk#/')
        self.answer_token_prompt(accept=True)
        harness.rendered(self.driver, 'experiments')
        self.assertEqual(self.saved_token(), 'junk')
        self.open('/', 'experiments', token=True)
        self.assertEqual(self.saved_token(), self.ctl.token)
        self.assertNoConsoleErrors()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument('--precon', required=True)
    p.add_argument('--out', required=True, help='directory for the screenshots')
    ARGS, rest = p.parse_known_args()
    ARGS.precon, ARGS.out = os.path.abspath(ARGS.precon), os.path.abspath(ARGS.out)
    unittest.main(argv=[sys.argv[0], '-v'] + rest)


if __name__ == '__main__':
    main()
