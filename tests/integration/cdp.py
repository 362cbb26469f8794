"""Headless Chromium driven over the DevTools protocol (a small client of
our own on tools/python/aural_ws.py): open a page, evaluate JavaScript,
wait for a condition, take a screenshot.

    with Chromium(extra_args=[...]) as b:
        b.navigate("http://127.0.0.1:8080/")
        b.wait_for("document.body.dataset.ready === '1'")
        b.screenshot("page.png")
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
import aural_ws  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or
                          shutil.which("chromium-browser") or "chromium")


class CdpError(Exception):
    pass


class Chromium:
    def __init__(self, extra_args=(), width=1200, height=900):
        self.dir = tempfile.mkdtemp(prefix="aural-chromium-")
        args = [CHROMIUM, "--headless=new", "--remote-debugging-port=0",
                "--user-data-dir=" + self.dir, "--no-first-run",
                "--no-default-browser-check", "--disable-gpu",
                "--autoplay-policy=no-user-gesture-required",
                "--window-size=%d,%d" % (width, height)]
        if os.geteuid() == 0:
            args.append("--no-sandbox")
        args += list(extra_args) + ["about:blank"]
        self.log = open(os.path.join(self.dir, "chromium.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.ws = aural_ws.WebSocket(self._page_url(), timeout=60)
        self.next_id = 0
        self.events = []

    def _page_url(self):
        """The DevTools WebSocket of the first page: the port comes from
        the DevToolsActivePort file Chromium writes."""
        port_file = os.path.join(self.dir, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CdpError("chromium exited %d" % self.proc.returncode)
            if os.path.exists(port_file):
                lines = open(port_file).read().split("\n")
                if lines[0].strip():
                    port = int(lines[0])
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/json/list" % port) as r:
                        for t in json.load(r):
                            if t["type"] == "page":
                                return t["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise CdpError("chromium did not open its DevTools port")

    def send(self, method, **params):
        """One command; its result (events meanwhile are kept)."""
        self.next_id += 1
        mid = self.next_id
        self.ws.send_frame(aural_ws.TEXT, json.dumps(
            {"id": mid, "method": method, "params": params}).encode())
        while True:
            _, data = self.ws.recv()
            msg = json.loads(data)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CdpError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expr, await_promise=False):
        r = self.send("Runtime.evaluate", expression=expr,
                      returnByValue=True, awaitPromise=await_promise,
                      userGesture=True)
        if "exceptionDetails" in r:
            raise CdpError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def navigate(self, url):
        self.send("Page.enable")
        self.send("Page.navigate", url=url)

    def wait_for(self, expr, timeout=30.0, what=None):
        """Polls expr until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.evaluate(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CdpError("timed out waiting for %s" % (what or expr))
            time.sleep(0.2)

    def console_messages(self):
        return [e for e in self.events
                if e.get("method") in ("Runtime.consoleAPICalled",
                                       "Runtime.exceptionThrown")]

    def screenshot(self, path):
        r = self.send("Page.captureScreenshot", format="png",
                      captureBeyondViewport=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
