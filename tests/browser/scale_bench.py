"""Dashboard at scale: seeds a database with one experiment of 1,000 trials x 10,000 train_loss
points each (plus val_loss every 250 steps and step_seconds / tokens_per_second every 100 steps;
10.24 M metric rows, written by SQL in one transaction), starts a real `precon serve` on it and
measures in headless Chromium how long the pages take to render (ms from navigation start to
the app's "rendered" mark; the experiment page's first render includes the trial table, the
overlaid curves of the 20 best trials, the sweep scatters and the heatmap). Prints a table;
it asserts only that the pages render and draw what they should, never a time.

Usage: scale_bench.py --precon build/orchestrator/precon [--out DIR] [--trials 1000] [--points 10000]"""
import argparse
import os
import sqlite3
import sys
import time

from selenium.webdriver.common.by import By

import harness


def seed(db, trials, points):
    """The schema comes from precon itself: a controller started and stopped on the new file."""
    harness.Controller(ARGS.precon, db=db).stop()
    con = sqlite3.connect(db)
    t0 = time.time()
    with con:
        now = time.time()
        start = now - 3600
        con.execute("INSERT INTO experiments (name, description, state, objective_metric, objective_mode, max_concurrent,"
                    " max_attempts, created_at, ended_at) VALUES ('scale', '1,000 trials x 10,000 points', 'completed',"
                    " 'val_loss', 'min', 64, 1, ?, ?)", (start - 10, now))
        exp = con.execute('SELECT max(id) FROM experiments').fetchone()[0]
        ns = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        lrs = [round(1e-4 * 10 ** (3 * k / 99), 8) for k in range(100)]
        rows = []
        for i in range(trials):
            params = f'{{"optimizer.lr": {lrs[i % 100]}, "optimizer.muon.ns_steps": {ns[(i // 100) % 10]}}}'
            rows.append((exp, i, params, f'[train]\nsteps = {points}\n', 'completed', 'trained to the last step',
                         f'/runs/scale/{i}', 1, points, start, start + i * 0.5, start + i * 0.5 + 600))
        con.executemany('INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, reason, run_dir,'
                        ' attempts, last_step, created_at, started_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)', rows)
        con.execute("INSERT INTO attempts (trial_id, number, executor, external_id, state, exit_code, started_at, ended_at)"
                    " SELECT id, 1, 'local', '1000' || idx, 'succeeded', 0, started_at, ended_at FROM trials"
                    " WHERE experiment_id = ?", (exp,))
        for name in ('train_loss', 'val_loss', 'step_seconds', 'tokens_per_second'):
            con.execute('INSERT OR IGNORE INTO metric_names (name) VALUES (?)', (name,))
        ids = dict(con.execute('SELECT name, id FROM metric_names'))
        # Loss falls from ~6 towards a floor that depends on the trial; small deterministic noise.
        series = [
            ('train_loss', 1, '2.2 + 0.3 * ((t.idx * 37) % 100) / 100.0 + 3.8 * exp(-s.step / 1500.0)'
                              ' + 0.05 * (((t.idx * 7919 + s.step * 104729) % 1000) / 1000.0 - 0.5)'),
            ('val_loss', 250, '2.25 + 0.3 * ((t.idx * 37) % 100) / 100.0 + 3.8 * exp(-s.step / 1500.0)'),
            ('step_seconds', 100, '0.05 + 0.002 * ((t.idx / 100) % 10)'),
            ('tokens_per_second', 100, '160000.0 / (1 + 0.04 * ((t.idx / 100) % 10))'),
        ]
        for name, every, expr in series:
            con.execute(
                f'WITH RECURSIVE s(step) AS (SELECT {every} UNION ALL SELECT step + {every} FROM s WHERE step < {points}) '
                f'INSERT INTO metrics (trial_id, name_id, step, value, time) '
                f'SELECT t.id, {ids[name]}, s.step, {expr}, t.started_at + 0.06 * s.step '
                f'FROM trials t, s WHERE t.experiment_id = {exp} ORDER BY t.id, s.step')
        con.execute("INSERT INTO events (time, experiment_id, kind, message) VALUES (?, ?, 'experiment_completed', "
                    "'experiment scale completed')", (now, exp))
    rows = con.execute('SELECT count(*) FROM metrics').fetchone()[0]
    con.close()
    return exp, rows, time.time() - t0


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument('--precon', required=True)
    p.add_argument('--out', default=None, help='directory for screenshots')
    p.add_argument('--trials', type=int, default=1000)
    p.add_argument('--points', type=int, default=10000)
    ARGS = p.parse_args()
    ARGS.precon = os.path.abspath(ARGS.precon)
    work = harness.Controller.scratch()
    db = os.path.join(work, 'scale.db')
    exp, rows, seed_s = seed(db, ARGS.trials, ARGS.points)
    ctl = harness.Controller(ARGS.precon, db=db)
    driver = harness.chromium()
    results = []
    api_results = []
    try:
        def measure(what, fragment, view):
            t0 = time.time()
            driver.get(f'{ctl.url}/?bench={len(results)}#{fragment}')
            ms = harness.rendered(driver, view, seconds=120)
            results.append((what, ms, (time.time() - t0) * 1000))
            errors = harness.console_errors(driver)
            if errors:
                raise AssertionError(f'console errors on {what}: {errors}')
            if ARGS.out:
                os.makedirs(ARGS.out, exist_ok=True)
                harness.full_page_screenshot(driver, os.path.join(ARGS.out, f'scale-{view}.png'))

        def api(what, path):
            t0 = time.time()
            ctl.get(path)
            api_results.append((what, (time.time() - t0) * 1000))

        measure('experiment page, first render (cold cache)', f'/experiments/{exp}', 'experiment')
        rows_shown = len(driver.find_elements(By.CSS_SELECTOR, '#trials tbody tr'))
        assert rows_shown == ARGS.trials, f'{rows_shown} table rows, expected {ARGS.trials}'
        assert driver.find_element(By.ID, 'curves-chart').get_attribute('data-series') == '20'
        measure('experiment page, again (warm)', f'/experiments/{exp}', 'experiment')
        # Every trial's curve in one request, drawn into one chart.
        t0 = time.time()
        driver.find_element(By.CSS_SELECTOR, '#curve-which option[value="all"]').click()
        harness.wait_for(driver, lambda d: d.find_element(By.ID, 'curves-chart').get_attribute('data-series') ==
                         str(ARGS.trials), 120, 'all curves')
        results.append((f'curves of all {ARGS.trials} trials (after the click)', None, (time.time() - t0) * 1000))
        measure('experiments list', '/', 'experiments')
        tid = ctl.get(f'/api/v1/experiments/{exp}/trials')['trials'][0]['id']
        measure('trial page (all metrics)', f'/trials/{tid}', 'trial')
        api('GET /api/v1/dashboard/experiments/ID (trial table)', f'/api/v1/dashboard/experiments/{exp}')
        best20 = ','.join(str(t) for t in range(1, 21))
        api('GET .../curves, 20 trials x 400 points', f'/api/v1/dashboard/experiments/{exp}/curves?points=400&trials={best20}')
        api('GET .../curves, all trials x 200 points', f'/api/v1/dashboard/experiments/{exp}/curves?points=200')
        api('GET .../curves, all trials, wall-clock x', f'/api/v1/dashboard/experiments/{exp}/curves?points=200&x=time')
        api('GET /api/v1/experiments/ID/best (Pareto)', f'/api/v1/experiments/{exp}/best')
    finally:
        driver.quit()
        ctl.stop()
        import shutil
        shutil.rmtree(work, ignore_errors=True)

    print(f'\nDashboard at scale: {ARGS.trials} trials x {ARGS.points} train_loss points '
          f'({rows:,} metric rows, seeded in {seed_s:.1f} s)')
    print(f'{"page":<52} {"rendered (ms)":>14} {"wall (ms)":>10}')
    for what, ms, wall in results:
        print(f'{what:<52} {("%.0f" % ms) if ms is not None else "":>14} {wall:>10.0f}')
    print(f'{"API call (warm)":<52} {"":>14} {"ms":>10}')
    for what, ms in api_results:
        print(f'{what:<52} {"":>14} {ms:>10.0f}')
    print('target: first render of the experiment page <= 2000 ms')


if __name__ == '__main__':
    main()
