"""Shared pieces of the browser tests: token shards in llm.c's format, a real `precon serve` on a
loopback port with its own temporary database, the JSON API, and headless Chromium driven by
Selenium that fails on any console error."""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def write_shard(path, tokens):
    """llm.c token shard: 256 little-endian int32 header {magic, version, count}, then uint16 tokens."""
    header = struct.pack('<256i', SHARD_MAGIC, SHARD_VERSION, len(tokens), *([0] * 253))
    with open(path, 'wb') as f:
        f.write(header)
        f.write(struct.pack(f'<{len(tokens)}H', *tokens))


def tiny_recipe(data_dir, name, steps, extra, log_every=1):
    """A GPT small enough to train in a second on one core; `extra` adds e.g. a [sweep] table."""
    return f'''[experiment]
name = "{name}"
[model]
n_layer = 1
n_head = 2
d_model = 16
seq_len = 16
vocab_size = 61
[data]
train = "{data_dir}/train.bin"
val = "{data_dir}/val.bin"
[train]
steps = {steps}
batch_size = 4
eval_every = 5
eval_batches = 2
checkpoint_every = 10
threads = 1
log_every = {log_every}
[optimizer]
name = "adamw"
lr = 0.003
warmup_steps = 0
''' + extra


def read_line(path):
    with open(path) as f:
        return f.readline().strip()


def complete_line(path):
    """True once the file exists and its first line is written in full (newline included)."""
    try:
        with open(path) as f:
            line = f.readline()
    except FileNotFoundError:
        return False
    return line.endswith('\n') and line.strip() != ''


class Controller:
    """`precon serve` in a temporary directory; stop() ends it and removes the directory."""

    @staticmethod
    def scratch():
        return tempfile.mkdtemp(prefix='precon_browser_')

    def __init__(self, precon, db=None, cpus=2, extra_args=()):
        self.dir = Controller.scratch()
        self.db = db or os.path.join(self.dir, 'precon.db')
        for f in (self.db + '.url', self.db + '.token'):
            if os.path.exists(f):
                os.remove(f)
        self.log = open(os.path.join(self.dir, 'serve.log'), 'w')
        self.proc = subprocess.Popen(
            [precon, 'serve', '--db', self.db, '--port', '0', '--runs', os.path.join(self.dir, 'runs'),
             '--cpus', str(cpus), *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.time() + 30
        # Both files exist and hold their line (each is created, then written).
        while not (complete_line(self.db + '.token') and complete_line(self.db + '.url')):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError('precon serve did not start; its log:\n' + open(self.log.name).read())
            time.sleep(0.05)
        self.url = read_line(self.db + '.url')
        self.token = read_line(self.db + '.token')
        self.get('/healthz')

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method='POST',
                                     headers={'Content-Type': 'application/json',
                                              'Authorization': 'Bearer ' + self.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def submit(self, recipe):
        return self.post('/api/v1/experiments', {'recipe': recipe, 'source': 'browser-test.toml'})['id']

    def wait(self, pred, seconds, what):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.2)
        raise AssertionError(f'timed out after {seconds} s waiting for {what}')

    def cancel_all(self):
        """Cancels every running experiment and waits for it: a stopped controller leaves its
        workers running (a restart adopts them), and a test must not leave trainers behind."""
        running = [e['id'] for e in self.get('/api/v1/experiments')['experiments'] if e['state'] == 'running']
        for exp in running:
            self.post(f'/api/v1/experiments/{exp}/cancel', {})
        self.wait(lambda: all(self.get(f'/api/v1/experiments/{e}')['state'] != 'running' for e in running), 30,
                  'the running experiments to end')

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.cancel_all()
            except Exception as e:  # still stop the controller; the error is printed
                print(f'harness: cancelling the running experiments failed: {e}')
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def chromium(width=1400, height=1000):
    """Headless Debian Chromium with its chromedriver; the browser log is kept for console checks."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which('chromium') or '/usr/bin/chromium'
    for arg in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                f'--window-size={width},{height}', '--disable-extensions', '--no-first-run'):
        options.add_argument(arg)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    service = Service(executable_path=shutil.which('chromedriver') or '/usr/bin/chromedriver')
    return webdriver.Chrome(service=service, options=options)


def console_errors(driver):
    """Console entries at SEVERE level since the last call (reading the log empties it)."""
    return [e for e in driver.get_log('browser') if e.get('level') == 'SEVERE']


def wait_for(driver, fn, seconds=20, what='the page'):
    """Polls fn(driver) until truthy; elements replaced by a live re-render meanwhile are looked up again."""
    return WebDriverWait(driver, seconds, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: fn(d), message=f'waiting for {what}')


def click(driver, css, seconds=10):
    """Clicks the element matching css, finding it again when a live re-render replaced it."""
    def attempt(d):
        d.find_element(By.CSS_SELECTOR, css).click()
        return True
    wait_for(driver, attempt, seconds, f'a click on {css}')


def text(driver, css, seconds=10):
    """The text of the element matching css, read again when a live re-render replaced it."""
    return wait_for(driver, lambda d: [d.find_element(By.CSS_SELECTOR, css).text], seconds, f'the text of {css}')[0]


def rendered(driver, view, seconds=20):
    """Waits until the app marks `view` rendered; returns the render time in ms since navigation."""
    wait_for(driver, lambda d: d.execute_script(
        'return document.body.dataset.view === arguments[0] && document.body.dataset.rendered', view),
        seconds, f'the {view} view')
    return float(driver.execute_script('return document.body.dataset.rendered'))


def full_page_screenshot(driver, path, width=1400):
    """The whole page: the window grows to the document's height (at most 6000 px) for the picture;
    the window's own frame (outer height less the viewport's) comes on top."""
    height = driver.execute_script('return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight')
    driver.set_window_size(width, min(max(height, 1000), 6000))
    driver.save_screenshot(path)
    driver.set_window_size(width, 1000)
