#!/usr/bin/python3
"""The live page of aurald --http in headless Chromium (driven over the
DevTools protocol by cdp.py):

  - with a fake microphone fed from a WAV file, pressing "use my
    microphone" pushes the audio as a stream of the page's own, whose
    tokens and words on the page are what the server decoded (a
    Unix-socket subscriber's), and within a few phones of what `aural
    encode --output text` gives for the same file (the live capture
    starts a few milliseconds into the file or before it, differently each
    run, and a phone on the edge between two can go either way); a
    screenshot is saved for a person to look at
    ($AURAL_SCREENSHOT_DIR, which meson sets to BUILD/web-screenshots);
  - a file stream is listed, and its posteriorgram and embeddings are
    drawn (the canvases are not blank);
  - the page outlives a restart of aurald: it marks the streams it had,
    tries again, and shows the new daemon's streams in their place;
  - it notices an aurald that stops answering without closing (SIGSTOP:
    as a hung daemon or a half-open connection looks) and connects again
    once it answers.

Run by meson (`meson test -C build page`); skipped without chromium.
"""

import os
import shutil
import signal
import sys
import time
import wave
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cdp  # noqa: E402
import test_daemon  # noqa: E402
from test_daemon import AURAL, SAMPLE, DaemonTest, run  # noqa: E402
from test_web import http_port  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
import aural_client as ac  # noqa: E402

DEFAULT_MODEL = os.path.join(HERE, "..", "..", "models", "default.safetensors")
SHOTS = os.environ.get("AURAL_SCREENSHOT_DIR")

READY = "document.body && document.body.dataset.ready === '1'"
MINE = "document.querySelector('section.stream.mine')"


def edit_distance(a, b):
    """Levenshtein distance between two sequences."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                       prev + (x != y))
    return row[-1]


def card_field(card, field):
    return "(c => c ? c.querySelector('.%s').textContent : '')(%s)" % (
        field, card)


# The share of a canvas's pixels that are not black.
LIT = """(sel => {
  const c = document.querySelector(sel);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let lit = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] + d[i+1] + d[i+2] > 30) lit++;
  return lit / (d.length / 4);
})(%r)"""


@unittest.skipUnless(shutil.which(cdp.CHROMIUM), "no chromium")
class TestPage(DaemonTest):
    def shot(self, browser, name):
        folder = SHOTS or self.tmp
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        browser.screenshot(path)
        print("screenshot: %s" % os.path.abspath(path))
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_microphone_transcript_is_the_servers(self):
        wav = os.path.join(self.tmp, "mic.wav")
        run("sox", SAMPLE, "-r", "48000", "-c", "1", "-b", "16", wav, "pad",
            "0.5", "1.0")
        want = run(AURAL, "encode", "-q", "-m", DEFAULT_MODEL, "--output",
                   "text", wav).stdout.strip().split("\n")[-1]
        d = self.start("--http", "127.0.0.1:0", model=DEFAULT_MODEL)
        args = ["--use-fake-device-for-media-stream",
                "--use-fake-ui-for-media-stream",
                "--use-file-for-fake-audio-capture=%s%%noloop" % wav]
        # The tokens and words the server decodes, as a Unix-socket
        # subscriber gets them: what the page must show. They are not
        # exactly aural encode's: the live capture's start varies by a few
        # milliseconds from run to run, and a phone or a word with it
        # ('lazy' once ended IY on the page against IH from aural encode).
        sub = ac.Client(d.path, timeout=60)
        sub.subscribe(all=True, outputs=("words", "text"))
        with cdp.Chromium(args) as b:
            b.send("Runtime.enable")
            b.navigate("http://127.0.0.1:%d/" % http_port(d))
            b.wait_for(READY, 30, "the page to connect")
            b.evaluate("document.querySelector('#mic').click()")
            state = b.wait_for("document.querySelector('#mic-state')"
                               ".textContent", 20, "the microphone")
            self.assertIn("sending as", state)
            b.wait_for("!!" + MINE, 20, "the page's own stream")
            # The file (8.9 s) plays once in real time, then silence.
            time.sleep(6.0)
            self.shot(b, "page-microphone.png")
            # Stopped once the server has the whole file (a loaded machine
            # plays it late), and some of the silence after it.
            with wave.open(wav) as w:
                file_s = w.getnframes() / w.getframerate()
            deadline = time.monotonic() + 60
            with ac.Client(d.path, timeout=10) as c:
                while not any(st["audio_s"] >= file_s + 0.3
                              for st in c.stats()["streams"]):
                    self.assertLess(time.monotonic(), deadline,
                                    "the page's audio at the server")
                    time.sleep(0.1)
            b.evaluate("document.querySelector('#mic').click()")
            b.wait_for(card_field(MINE, "state") + ".startsWith('ended')", 30,
                       "the stream to end")
            have = b.evaluate(card_field(MINE, "tokens"))
            words = b.evaluate(card_field(MINE, "words"))
            finals, texts = [], []
            for ev in sub.events(timeout=30):
                if isinstance(ev, ac.Words):
                    finals += [w.word for seg in ev.segments for w in seg]
                elif isinstance(ev, ac.Chunk) and ev.text:
                    texts.append(ev.text)
                elif isinstance(ev, ac.StreamEnded):
                    break
            sub.close()
            self.assertEqual(have, " ".join(texts))
            # The same speech: a few phones of about 80 may differ.
            self.assertLessEqual(edit_distance(have.split(), want.split()), 3,
                                 "page %r\naural encode %r" % (have, want))
            self.assertGreater(len(finals), 5)
            self.assertEqual(words.split(), finals)
            self.assertEqual(b.evaluate(card_field(MINE, "state")),
                             "ended (closed)")
            self.shot(b, "page-microphone-ended.png")
            self.assertEqual([e for e in b.console_messages()
                              if e["method"] == "Runtime.exceptionThrown"], [])
        self.stop_clean(d)

    def test_file_stream_is_listed_and_drawn(self):
        d = self.start("--http", "127.0.0.1:0", "--hold", "--file", SAMPLE,
                       "--realtime", model=DEFAULT_MODEL)
        card = "document.querySelector('section.stream[data-name=\"%s\"]')" \
            % os.path.basename(SAMPLE)
        with cdp.Chromium() as b:
            b.navigate("http://127.0.0.1:%d/" % http_port(d))
            b.wait_for(READY, 30, "the page to connect")
            b.wait_for("!!" + card, 20, "the file's stream")
            b.wait_for(card_field(card, "seq") + " >= 5", 30, "5 chunks")
            lit_post = b.evaluate(LIT % "section.stream canvas.posteriorgram")
            lit_emb = b.evaluate(LIT % "section.stream canvas.embeddings")
            # 550 frames wide; after 3 s of chunks part of it is drawn.
            self.assertGreater(lit_post, 0.01)
            self.assertGreater(lit_emb, 0.2)
            self.assertTrue(b.evaluate(card_field(card, "tokens"))
                            .startswith("DH AH K W IH K"))
            self.shot(b, "page-file-stream.png")
        self.stop_clean(d)

    def test_page_keeps_the_latest_ended_streams_and_chunks(self):
        """A page left open keeps the cards of the 20 streams that ended
        last (KEEP_ENDED in web/app.js), and of a stream's token text its
        last 400 chunks' (KEEP_CHUNKS): it used to keep every stream and
        every chunk it had ever seen."""
        d = self.start("--http", "127.0.0.1:0", model=test_daemon.CTC)
        with wave.open(self.wav(300.0)) as w:
            speech = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        cards = "document.querySelectorAll('section.stream').length"
        card = "document.querySelector('section.stream[data-name=\"%s\"]')"
        with cdp.Chromium() as b:
            b.navigate("http://127.0.0.1:%d/" % http_port(d))
            b.wait_for(READY, 30, "the page to connect")
            sub = ac.Client(d.path, timeout=30)
            sub.subscribe("long", outputs=("text",))
            with ac.Client(d.path, timeout=30) as c:
                for i in range(30):
                    sid = c.open_audio("short-%d" % i)
                    c.send_audio(sid, speech[:8000])
                    c.close_audio(sid)
                    b.wait_for(card_field(card % ("short-%d" % i), "state")
                               + ".startsWith('ended')", 10, "its end")
                self.assertEqual(b.evaluate(cards), 20)
                self.assertIsNone(b.evaluate(card % "short-9"))
                self.assertIsNotNone(b.evaluate(card % "short-10"))
                sid = c.open_audio("long")
                c.send_audio(sid, speech)
                c.close_audio(sid)
            texts = []
            for ev in sub.events(timeout=30):
                if isinstance(ev, ac.Chunk) and ev.text:
                    texts.append(ev.text)
                elif isinstance(ev, ac.StreamEnded):
                    break
            sub.close()
            self.assertGreater(len(texts), 400)
            b.wait_for(card_field(card % "long", "state") +
                       ".startsWith('ended')", 30, "the long stream's end")
            self.assertEqual(b.evaluate(card_field(card % "long", "tokens")),
                             " ".join(texts[-400:]))
            self.assertEqual(b.evaluate(cards), 20)
            self.assertEqual([e for e in b.console_messages()
                              if e["method"] == "Runtime.exceptionThrown"], [])
        self.stop_clean(d)

    def test_page_reconnects_after_a_restart(self):
        first = os.path.join(self.tmp, "first.flac")
        second = os.path.join(self.tmp, "second.flac")
        shutil.copy(SAMPLE, first)
        shutil.copy(SAMPLE, second)
        d = self.start("--http", "127.0.0.1:0", "--file", first,
                       "--realtime", model=DEFAULT_MODEL)
        port = http_port(d)
        card = "document.querySelector('section.stream[data-name=\"%s\"]')"
        status = "document.querySelector('#status').textContent"
        with cdp.Chromium() as b:
            b.navigate("http://127.0.0.1:%d/" % port)
            b.wait_for(READY, 30, "the page to connect")
            b.wait_for(card_field(card % "first.flac", "seq") + " >= 1", 30,
                       "a chunk of the first stream")
            self.stop_clean(d)
            self.assertEqual(
                b.wait_for(card_field(card % "first.flac", "state") +
                           ".startsWith('ended') && " +
                           card_field(card % "first.flac", "state"), 10,
                           "the stream's end"), "ended (shutdown)")
            b.wait_for(status + ".startsWith('disconnected')", 10,
                       "the page to see the connection go")
            self.assertFalse(b.evaluate(READY))
            self.assertTrue(b.evaluate("document.querySelector('#mic')"
                                       ".disabled"))
            # Another daemon on the same address: the page finds it.
            d = self.start("--http", "127.0.0.1:%d" % port, "--file", second,
                           "--realtime", model=DEFAULT_MODEL)
            b.wait_for(READY, 30, "the page to connect again")
            b.wait_for(card_field(card % "second.flac", "seq") + " >= 1", 30,
                       "a chunk of the new daemon's stream")
            self.assertEqual(b.evaluate(card_field(card % "second.flac",
                                                   "state")), "live")
            self.assertIsNone(b.evaluate(card % "first.flac"))
            self.assertTrue(b.evaluate(status).startswith("connected to"))
            self.assertFalse(b.evaluate("document.querySelector('#mic')"
                                        ".disabled"))
            self.assertEqual([e for e in b.console_messages()
                              if e["method"] == "Runtime.exceptionThrown"], [])
        self.stop_clean(d)

    def test_page_notices_a_daemon_that_stops_answering(self):
        d = self.start("--http", "127.0.0.1:0", "--file", SAMPLE,
                       "--realtime", model=DEFAULT_MODEL)
        card = "document.querySelector('section.stream[data-name=\"%s\"]')" \
            % os.path.basename(SAMPLE)
        status = "document.querySelector('#status').textContent"
        with cdp.Chromium() as b:
            b.navigate("http://127.0.0.1:%d/" % http_port(d))
            b.wait_for(READY, 30, "the page to connect")
            b.wait_for(card_field(card, "seq") + " >= 1", 30, "a chunk")
            # The connection stays open, and nothing more comes.
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                b.wait_for(status + ".startsWith('disconnected')", 20,
                           "the page to see that aurald does not answer")
                # A PING every 5 s, answered within 5 s.
                self.assertLess(time.monotonic() - t0, 12)
                self.assertFalse(b.evaluate(READY))
                self.assertTrue(b.evaluate(card_field(card, "state"))
                                .startswith("ended"))
                # Tries while it is stopped give up too, and go on.
                b.wait_for(status + ".startsWith('disconnected; trying "
                           "again in 2')", 20, "a second try")
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            b.wait_for(READY, 30, "the page to connect again")
            self.assertTrue(b.evaluate(status).startswith("connected to"))
            self.assertEqual([e for e in b.console_messages()
                              if e["method"] == "Runtime.exceptionThrown"], [])
        self.stop_clean(d)


if __name__ == "__main__":
    test_daemon.main(__name__)
