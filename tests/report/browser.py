"""Render a local HTML file in headless Chromium, driven through the Chrome DevTools Protocol
over --remote-debugging-pipe (no TCP port, no network), and report what the page did: its
console messages and uncaught exceptions, every URL it requested, the loads that failed, the
values of JavaScript expressions evaluated after the load event, and a full-page screenshot.

    result = render(html_path, png_path=None, width=1280, height=None, timeout=60,
                    scripts=None, chromium="/usr/bin/chromium")
    result["console"]   [{"level", "text", "source"}, ...]  console API calls, Log entries and
                        uncaught exceptions (level "exception"), in arrival order
    result["errors"]    the entries of "console" whose level is "error", "assert" or "exception"
    result["requests"]  URLs from Network.requestWillBeSent, the page's own file:// URL first
                        (data: URLs are cut to 100 characters)
    result["failed"]    [{"url", "error", "type"}, ...] from Network.loadingFailed
    result["eval"]      {name: value} for scripts={name: JS expression}, each evaluated with
                        returnByValue and awaitPromise once the load event has fired; one that
                        throws gives None and an "exception" entry whose source is "eval:NAME"
    result["png"]       png_path once the screenshot is written there, else None

height=None makes the screenshot the whole page (width x content height, at most 16000 CSS
pixels); a height gives a width x height viewport and screenshot. The errors are BrowserError
and its subclasses ChromiumNotFound (the caller's skip) and BrowserTimeout.

png_is_blank(png_path) -> (bool, detail) and png_size(png_path) -> (w, h) read PNGs with zlib
and struct (8-bit RGB or RGBA, non-interlaced, as Chromium writes them).

Timing on the 2-core development machine (Chromium 156): one render of a small page, with a
1280x800 screenshot and an eval, takes 0.6 to 0.75 s of wall time when the machine is idle
(0.9 to 1.7 s while a build runs beside it), nearly all of it Chromium's start and shutdown;
a 1280x16000 screenshot of a tall page about 1.2 to 2 s. png_is_blank takes 0.02 s on a
1280x800 screenshot and about 1.2 s on a 1280x16000 one.

usage: browser.py PAGE.html [OUT.png] [--eval NAME=EXPR ...]   (prints the result as JSON)
"""
import base64
import fcntl
import json
import math
import os
import pathlib
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zlib

CHROMIUM = "/usr/bin/chromium"
MAX_HEIGHT = 16000


class BrowserError(RuntimeError):
    pass


class ChromiumNotFound(BrowserError):
    pass


class BrowserTimeout(BrowserError):
    pass


class _Browser:
    """One Chromium process and its CDP pipe; messages are JSON texts each ended by a NUL."""

    def __init__(self, chromium, deadline, timeout):
        if not (os.path.isfile(chromium) and os.access(chromium, os.X_OK)):
            raise ChromiumNotFound(f"Chromium not found (no executable at {chromium})")
        self.deadline, self.timeout = deadline, timeout
        self.on_event = lambda message: None
        self.next_id, self.buffer, self.replies, self.proc = 0, b"", {}, None
        self.tmp = tempfile.mkdtemp(prefix="f8c-chromium-")
        self.stderr = open(os.path.join(self.tmp, "stderr.log"), "wb")
        to_child, self.to_chrome = os.pipe()     # we write CDP here, Chromium reads it as fd 3
        self.from_chrome, from_child = os.pipe()  # Chromium writes fd 4, we read it here

        def child_fds():  # in the child, before exec: make the pipe ends fds 3 and 4
            # dup above 10 first so that an end that already is fd 3 or 4 is not clobbered
            read_end = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--mute-audio",
                "--user-data-dir=" + os.path.join(self.tmp, "profile"),
                "--remote-debugging-pipe", "about:blank"]
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=self.stderr, stderr=self.stderr,
                                         pass_fds=(3, 4), preexec_fn=child_fds,
                                         start_new_session=True)  # its own process group
        except OSError as e:
            self.close()
            raise BrowserError(f"could not start {chromium}: {e}") from e
        finally:
            os.close(to_child)
            os.close(from_child)

    def stderr_tail(self, lines=15):
        self.stderr.flush()
        with open(self.stderr.name, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        # Leave out the complaints about D-Bus, which there is none of here, on every start.
        kept = [line for line in text.splitlines() if "dbus" not in line.lower()]
        return "\n".join(kept[-lines:])

    def _fail(self, why):
        # Give a dying Chromium a moment so that its exit status and last words are known.
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        raise BrowserError(f"{why} (exit status {code}); Chromium's stderr ends:\n"
                           + self.stderr_tail())

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self.to_chrome, data):]
        except BrokenPipeError:
            self._fail(f"Chromium closed its pipe before {method}")
        return self.next_id

    def pump(self, done, what):
        """Read messages until done() holds (or the deadline passes): command replies are
        kept in self.replies by id, events go to self.on_event."""
        while not done():
            while b"\0" not in self.buffer:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise BrowserTimeout(f"Chromium gave no answer within {self.timeout} s, "
                                         f"waiting for {what}; its stderr ends:\n"
                                         + self.stderr_tail())
                if select.select([self.from_chrome], [], [], left)[0]:
                    chunk = os.read(self.from_chrome, 1 << 20)
                    if not chunk:
                        self._fail(f"Chromium exited while we waited for {what}")
                    self.buffer += chunk
            text, self.buffer = self.buffer.split(b"\0", 1)
            message = json.loads(text)
            if "id" in message:
                self.replies[message["id"]] = message
            else:
                self.on_event(message)

    def call(self, method, params=None, session=None):
        """Send a command and return its result."""
        wanted = self.send(method, params, session)
        self.pump(lambda: wanted in self.replies, method)
        reply = self.replies.pop(wanted)
        if "error" in reply:
            raise BrowserError(f"{method} failed: {reply['error']}")
        return reply.get("result", {})

    def close(self, timed_out=False):
        """Browser.close (unless it timed out), up to 5 s to exit, then SIGKILL the group."""
        try:
            if self.proc is not None and self.proc.poll() is None and not timed_out:
                try:
                    self.send("Browser.close")
                    self.proc.wait(timeout=5)
                except (BrowserError, subprocess.TimeoutExpired):
                    pass
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        finally:
            for fd in (self.to_chrome, self.from_chrome):
                os.close(fd)
            self.stderr.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


def _source(url, line):
    return f"{url}:{line + 1}" if url else ""


def render(html_path, png_path=None, width=1280, height=None, timeout=60, scripts=None,
           chromium=CHROMIUM):
    """Load html_path in headless Chromium; see the module's docstring for the result."""
    url = pathlib.Path(os.path.abspath(html_path)).as_uri()
    result = {"console": [], "errors": [], "requests": [], "failed": [], "eval": {},
              "png": None}
    request_urls = {}  # Network requestId -> URL, to name the failed ones
    state = {"loaded": False}
    session = None

    def note(level, text, source):
        entry = {"level": level, "text": text, "source": source}
        result["console"].append(entry)
        if level in ("error", "assert", "exception"):
            result["errors"].append(entry)

    def on_event(message):
        if message.get("sessionId") != session:
            return  # browser-level events, or another target's
        method, p = message["method"], message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a["value"]) if "value" in a else a.get("description", a["type"])
                            for a in p.get("args", []))
            frames = p.get("stackTrace", {}).get("callFrames", [])
            where = _source(frames[0]["url"], frames[0]["lineNumber"]) if frames else ""
            note(p["type"], text, where)
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text", "")
            note("exception", text, _source(d.get("url", ""), d.get("lineNumber", 0)))
        elif method == "Log.entryAdded":
            e = p["entry"]
            note(e["level"], e["text"], e.get("url") or e.get("source", ""))
        elif method == "Network.requestWillBeSent":
            u = p["request"]["url"]
            if u.startswith("data:") and len(u) > 100:
                u = u[:100] + "..."
            request_urls[p["requestId"]] = u
            result["requests"].append(u)
        elif method == "Network.loadingFailed":
            result["failed"].append({"url": request_urls.get(p["requestId"], "?"),
                                     "error": p.get("errorText", ""),
                                     "type": p.get("type", "")})
        elif method == "Page.loadEventFired":
            state["loaded"] = True

    browser = _Browser(chromium, time.monotonic() + timeout, timeout)
    browser.on_event = on_event
    timed_out = False
    try:
        # The page target that about:blank opened (there may be none yet: then make one).
        pages = [t for t in browser.call("Target.getTargets")["targetInfos"]
                 if t["type"] == "page"]
        target = (pages[0]["targetId"] if pages else
                  browser.call("Target.createTarget", {"url": "about:blank"})["targetId"])
        session = browser.call("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            browser.call(domain + ".enable", session=session)
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height or 800, "deviceScaleFactor": 1,
                      "mobile": False}, session)
        # Without this a page taller than the viewport loses 15 pixels of width to a
        # scrollbar, which then also shows in the screenshot.
        browser.call("Emulation.setScrollbarsHidden", {"hidden": True}, session)
        state["loaded"] = False  # about:blank's load event may have come by now
        nav = browser.call("Page.navigate", {"url": url}, session)
        if nav.get("errorText"):
            raise BrowserError(f"navigating to {url} failed: {nav['errorText']}")
        browser.pump(lambda: state["loaded"], "Page.loadEventFired")

        for name, expr in (scripts or {}).items():
            r = browser.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                  "awaitPromise": True}, session)
            if "exceptionDetails" in r:
                d = r["exceptionDetails"]
                note("exception", d.get("exception", {}).get("description") or d["text"],
                     "eval:" + name)
                result["eval"][name] = None
            else:
                result["eval"][name] = r["result"].get("value")

        if png_path:
            shot_height = height
            if height is None:  # grow the viewport to the page's height, then shoot it all
                size = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
                shot_height = max(1, min(MAX_HEIGHT, math.ceil(size["height"])))
                browser.call("Emulation.setDeviceMetricsOverride",
                             {"width": width, "height": shot_height, "deviceScaleFactor": 1,
                              "mobile": False}, session)
            # The clip keeps a page taller than the cap (or than a given height) to that
            # height: captureBeyondViewport alone would shoot all of it. optimizeForSpeed
            # makes Chromium use PNG's Up filter only, which png_is_blank undoes quickly.
            shot = browser.call("Page.captureScreenshot",
                                {"format": "png", "captureBeyondViewport": True,
                                 "optimizeForSpeed": True,
                                 "clip": {"x": 0, "y": 0, "width": width,
                                          "height": shot_height, "scale": 1}}, session)
            with open(png_path, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            result["png"] = png_path
        # A last round trip, so that events the page sent before it are all handled.
        browser.call("Runtime.evaluate", {"expression": "0"}, session)
    except BrowserTimeout:
        timed_out = True
        raise
    finally:
        browser.close(timed_out)
    return result


# Filters Up and Sub add bytes modulo 256. Done on whole rows as Python integers, one byte a
# lane: add the low 7 bits of each byte, then put back the top bit as a carry-less XOR.
def _add_bytes(x, y):
    n = len(x)
    low, high = int.from_bytes(b"\x7f" * n, "little"), int.from_bytes(b"\x80" * n, "little")
    a, b = int.from_bytes(x, "little"), int.from_bytes(y, "little")
    return (((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(n, "little")


def _sub(row, bpp):
    # A prefix sum along the row, pixel by pixel: after adding copies shifted by 1, 2, 4 ...
    # pixels, each pixel holds the sum of all those to its left and itself.
    shift = bpp
    while shift < len(row):
        row = _add_bytes(row, bytes(shift) + row[:-shift])
        shift *= 2
    return row


def _read_png(png_path):
    """(width, height, bytes per pixel, rows of unfiltered pixel bytes)."""
    with open(png_path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{png_path} is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length  # length, type, body, CRC
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    w, h, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"{png_path}: only 8-bit non-interlaced RGB/RGBA PNGs are read "
                         f"(depth {depth}, colour type {colour}, interlace {interlace})")
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), w * bpp
    rows, prev = [], bytes(stride)
    for y in range(h):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:  # Sub: add the byte one pixel to the left
            row = _sub(row, bpp)
        elif kind == 2:  # Up: add the byte above
            row = _add_bytes(row, prev)
        elif kind == 3:  # Average: add the floored mean of left and above
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:  # Paeth: add whichever of left, above, above-left is nearest l+a-al
            for i in range(stride):
                a = row[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif kind != 0:
            raise ValueError(f"{png_path}: row {y} has filter type {kind}")
        rows.append(bytes(row))
        prev = rows[-1]
    return w, h, bpp, rows


def png_size(png_path):
    with open(png_path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{png_path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def png_is_blank(png_path):
    """(True when every pixel has the same colour, a line naming colours and size)."""
    w, h, bpp, rows = _read_png(png_path)
    colours, seen_rows = set(), set()
    for row in rows:
        if row not in seen_rows:  # pages repeat rows a lot; count each distinct one once
            seen_rows.add(row)
            colours.update(row[i:i + bpp] for i in range(0, len(row), bpp))
    n = len(colours)
    return n <= 1, f"{n} distinct colour{'s' * (n != 1)} in {w}x{h} pixels"


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Render an HTML file in headless Chromium.")
    parser.add_argument("html")
    parser.add_argument("png", nargs="?")
    parser.add_argument("--eval", action="append", default=[], metavar="NAME=EXPR")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    began = time.monotonic()
    out = render(args.html, args.png, width=args.width, timeout=args.timeout,
                 scripts=dict(e.split("=", 1) for e in args.eval))
    out["seconds"] = round(time.monotonic() - began, 3)
    if args.png:
        out["blank"] = png_is_blank(args.png)
    print(json.dumps(out, indent=1))
