"""An installed precon serves the dashboard without network: `cmake --install` of the build tree
into a temporary prefix, then the installed `precon serve` (no flags) answers `/` with the
dashboard and `/vendor/uPlot.esm.js` with the charting library the build copied from npm; and
`--web-dir DIR` serves DIR instead.

Usage: test_installed.py --cmake cmake --build-dir build"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import harness

ARGS = None


def fetch(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers.get('Content-Type', ''), r.read().decode('utf-8', 'replace')


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prefix = tempfile.mkdtemp(prefix='precon_install_')
        subprocess.run([ARGS.cmake, '--install', ARGS.build_dir, '--prefix', cls.prefix], check=True,
                       stdout=subprocess.DEVNULL)
        cls.precon = os.path.join(cls.prefix, 'bin', 'precon')

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.prefix, ignore_errors=True)

    def test_installed_serve_finds_the_dashboard(self):
        self.assertTrue(os.path.isfile(os.path.join(self.prefix, 'share', 'precon', 'web', 'vendor', 'uPlot.esm.js')))
        ctl = harness.Controller(self.precon)
        try:
            status, ctype, body = fetch(ctl.url + '/')
            self.assertEqual(status, 200)
            self.assertIn('text/html', ctype)
            self.assertIn('<script type="module" src="app.js">', body)
            status, ctype, body = fetch(ctl.url + '/vendor/uPlot.esm.js')
            self.assertEqual(status, 200)
            self.assertIn('javascript', ctype)
            self.assertIn('export', body)
        finally:
            ctl.stop()

    def test_web_dir_overrides_the_default(self):
        other = tempfile.mkdtemp(prefix='precon_web_')
        with open(os.path.join(other, 'index.html'), 'w') as f:
            f.write('<!doctype html><title>another dashboard</title>')
        ctl = harness.Controller(self.precon, extra_args=['--web-dir', other])
        try:
            self.assertIn('another dashboard', fetch(ctl.url + '/')[2])
        finally:
            ctl.stop()
            shutil.rmtree(other, ignore_errors=True)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument('--cmake', required=True)
    p.add_argument('--build-dir', required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], '-v'] + rest)


if __name__ == '__main__':
    main()
