"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`): no extra package needed.

    with Browser() as b:
        errors = b.open('file:///.../index.html')  # JS exceptions, console errors, failed loads, network requests
        b.screenshot('index.png')

The docs renderer takes its screenshots with it and tests/test_docs.py checks the rendered pages with it.
"""
import base64, fcntl, json, os, select, shutil, subprocess, tempfile, time
from pathlib import Path

def chromium_path():
    "The Chromium (or Chrome) executable on PATH, else None"
    return next(filter(None, map(shutil.which, ('chromium', 'chromium-browser', 'google-chrome'))), None)

def _pipe_fds(to_chrome: int, from_chrome: int):
    "In the child: the pipe ends on fds 3 and 4, where `--remote-debugging-pipe` expects them"
    # copied above 10 first, so that moving one onto 3 or 4 cannot overwrite the other
    a, b = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome, from_chrome))
    os.dup2(a, 3)
    os.dup2(b, 4)

def _error(event: dict):
    "What a DevTools event reports as a page error, else None"
    method, p = event.get('method'), event.get('params', {})
    if method == 'Runtime.exceptionThrown':
        d = p['exceptionDetails']
        return f"exception: {d.get('exception', {}).get('description') or d.get('text')}"
    if method == 'Runtime.consoleAPICalled' and p['type'] in ('error', 'assert'):
        return 'console.error: ' + ' '.join(str(a.get('value', a.get('description', ''))) for a in p['args'])
    if method == 'Log.entryAdded' and p['entry']['level'] == 'error':
        return f"log: {p['entry']['text']} {p['entry'].get('url', '')}".rstrip()
    if method == 'Network.loadingFailed' and not p.get('canceled'):
        return f"failed load: {p['errorText']} ({p.get('type', '')})"
    if method == 'Network.requestWillBeSent' and not p['request']['url'].startswith(('file:', 'data:', 'about:')):
        return f"network request: {p['request']['url']}"  # the site must work offline

class Browser:
    "One headless Chromium with one tab; `open` loads a page and returns the errors it logged"
    def __init__(self, exe=None, width=1280, height=900, timeout=30):
        exe = exe or chromium_path()
        if not exe: raise FileNotFoundError('no chromium on PATH')
        self.profile, self.timeout = tempfile.TemporaryDirectory(), timeout
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()
        args = [exe, '--headless=new', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe', '--no-first-run',
                '--hide-scrollbars', f'--user-data-dir={self.profile.name}', f'--window-size={width},{height}']
        # close_fds=False: Popen would close fds 3 and 4 after preexec_fn; Python's own fds are not inheritable anyway
        self.proc = subprocess.Popen(args, preexec_fn=lambda: _pipe_fds(to_chrome, from_chrome),
                                     close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._id, self._buf, self.events = 0, b'', []
        target = self.send('Target.createTarget', url='about:blank')['targetId']
        self.session = self.send('Target.attachToTarget', targetId=target, flatten=True)['sessionId']
        for domain in ('Page', 'Runtime', 'Log', 'Network'): self.send(f'{domain}.enable', tab=True)
        self.send('Emulation.setDeviceMetricsOverride', tab=True, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def _read(self, timeout: float):
        "The next message from Chromium, or None after `timeout` seconds"
        while b'\0' not in self._buf:
            if not select.select([self._r], [], [], timeout)[0]: return None
            chunk = os.read(self._r, 1 << 20)
            if not chunk: raise ConnectionError('chromium closed the DevTools pipe')
            self._buf += chunk
        msg, self._buf = self._buf.split(b'\0', 1)
        return json.loads(msg)

    def send(self, method: str, tab=False, **params) -> dict:
        "Call DevTools `method` (on the tab's session if `tab`) and return its result; events seen meanwhile are kept"
        self._id += 1
        msg = {'id': self._id, 'method': method, 'params': params, **({'sessionId': self.session} if tab else {})}
        os.write(self._w, json.dumps(msg).encode() + b'\0')
        deadline = time.monotonic() + self.timeout
        while (reply := self._read(max(0, deadline - time.monotonic()))) is not None:
            if reply.get('id') != self._id:
                self.events.append(reply)
                continue
            if 'error' in reply: raise RuntimeError(f"{method}: {reply['error']}")
            return reply['result']
        raise TimeoutError(f'{method}: no reply in {self.timeout}s')

    def _wait(self, method: str):
        "Keep events until `method` arrives"
        deadline = time.monotonic() + self.timeout
        while not any(e.get('method') == method for e in self.events):
            if (msg := self._read(max(0, deadline - time.monotonic()))) is None: raise TimeoutError(method)
            self.events.append(msg)

    def open(self, url: str, settle=0.3) -> list:
        "Load `url`; the errors it logged (JS exceptions, console errors, failed loads, requests to the network)"
        self.events = []
        nav = self.send('Page.navigate', tab=True, url=url)
        if nav.get('errorText'): return [f"navigation: {nav['errorText']} {url}"]
        self._wait('Page.loadEventFired')
        while (msg := self._read(settle)) is not None: self.events.append(msg)  # errors a moment after load count too
        return [e for e in map(_error, self.events) if e]

    def eval(self, expression: str):
        "The value of JavaScript `expression` in the open page"
        return self.send('Runtime.evaluate', tab=True, expression=expression, returnByValue=True)['result'].get('value')

    def screenshot(self, path, full=False):
        "A PNG of the open page at `path` (the viewport, or the whole page if `full`)"
        opts = {'captureBeyondViewport': True} if full else {}
        if full:
            size = self.send('Page.getLayoutMetrics', tab=True)['cssContentSize']
            opts['clip'] = {'x': 0, 'y': 0, 'width': size['width'], 'height': size['height'], 'scale': 1}
        data = self.send('Page.captureScreenshot', tab=True, format='png', **opts)['data']
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        "Quit Chromium and remove its profile"
        try: self.send('Browser.close')
        except (ConnectionError, TimeoutError, OSError): pass
        try: self.proc.wait(10)
        except subprocess.TimeoutExpired: self.proc.kill()
        for fd in (self._r, self._w): os.close(fd)
        self.profile.cleanup()

    def __enter__(self): return self
    def __exit__(self, *exc): self.close()
