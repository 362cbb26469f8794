#!/usr/bin/python3
"""Hostile audio files against a real aurald and a real `aural send`.

Every file is made here (struct and wave from the standard library): cut
headers and data, impossible sizes, rates and channel counts, special
floats, things that are not files, files that change while being read.
For each one:

  startup: `aurald --file GOOD --file BAD --hold --exit-when-done`. Either
      start-up fails, aurald exiting non-zero with a message that names
      the file and the problem, or both streams run: the good one to its
      end, the bad one to its end (legal files) or to STREAM_ENDED with
      reason "error" and a message naming the file; then aurald exits 0.
  send: `aural send BAD` to a running daemon fails with a clear message on
      its stderr (or succeeds for legal files), and the daemon goes on
      serving another client and exits 0 on SIGTERM.

Under ASan builds, exit status 0 includes LeakSanitizer's verdict. Run by
meson (`meson test -C build hostile_audio`) with AURALD_BIN, AURAL_BIN and
AURAL_TEST_DATA set; prints `integration: N passed, M failed` at the end.
"""

import math
import os
import struct
import subprocess
import sys
import threading
import time
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon  # noqa: E402
from test_daemon import AURAL, AURALD, TINY, DaemonTest, ac  # noqa: E402

RATE = 16000


def pcm16(n_frames, n_channels=1, rate=RATE):
    """A quiet tone, 16-bit little-endian, interleaved."""
    out = bytearray()
    for i in range(n_frames):
        v = int(8000 * math.sin(2 * math.pi * 440 * i / rate))
        out += struct.pack("<h", v) * n_channels
    return bytes(out)


def riff(fmt_body, data, data_size=None, extra=b""):
    """A RIFF/WAVE file: fmt chunk, extra chunks, data chunk declaring
    data_size (default: the truth) followed by the bytes of data."""
    size = len(data) if data_size is None else data_size
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_body)) + fmt_body +
            extra + b"data" + struct.pack("<I", size) + data)
    return b"RIFF" + struct.pack("<I", min(len(body), 0xFFFFFFFF)) + body


def fmt(tag=1, channels=1, rate=RATE, bits=16, block_align=None):
    block = channels * bits // 8 if block_align is None else block_align
    return struct.pack("<HHIIHH", tag, channels, rate, rate * block & 0xFFFFFFFF,
                       block, bits)


def floats(values):
    return riff(fmt(tag=3, bits=32), struct.pack("<%df" % len(values),
                                                 *values))


def tone_floats(n, bad_at, bad):
    v = [0.25 * math.sin(i / 10) for i in range(n)]
    v[bad_at] = bad
    return v


def au(rate, channels, payload_len, data_size=None):
    """A Sun .au file of 16-bit PCM (its channel count has 32 bits)."""
    size = payload_len if data_size is None else data_size
    return (b".snd" + struct.pack(">IIIII", 24, size, 3, rate, channels) +
            bytes(payload_len))


def nist(n_frames, declared_frames):
    """A NIST SPHERE file (TIMIT's format) of n_frames of 16-bit mono
    PCM whose sample_count declares declared_frames."""
    head = ("NIST_1A\n   1024\nsample_count -i %d\nchannel_count -i 1\n"
            "sample_rate -i %d\nsample_n_bytes -i 2\n"
            "sample_byte_format -s2 01\nsample_coding -s3 pcm\nend_head\n"
            % (declared_frames, RATE)).encode()
    return head.ljust(1024, b" ") + pcm16(n_frames)


def good_wav(path, seconds=0.5, rate=RATE, channels=1):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16(int(seconds * rate), channels, rate))


# name: (file name, contents or a maker taking the path, outcome, keywords).
# outcome "error": the file must be refused (at start-up, or as a stream
# that ends with reason "error"); "ok": it is legal and must be processed
# to its end; keywords ('|' = alternatives) must appear in the message.
def make_cases():
    half = pcm16(RATE // 2)
    cases = {
        "truncated_header": ("cut-header.wav", riff(fmt(), half)[:30],
                             "error", "truncated|not a readable"),
        "truncated_data": ("cut-data.wav", riff(fmt(), half[:4000],
                                                data_size=len(half)),
                           "error", "truncated"),
        "data_size_ffffffff": ("stream.wav", riff(fmt(), half,
                                                  data_size=0xFFFFFFFF),
                               "ok", ""),
        "huge_declared_length": ("huge.wav", riff(fmt(), half,
                                                  data_size=0x7FFFFF00),
                                 "error", "truncated"),
        "chunk_larger_than_file": (
            "bigchunk.wav",
            riff(fmt(), half, extra=b"LIST" + struct.pack("<I", 0x7FFFFF00) +
                 b"INFO"),
            "error", "not a readable|truncated|data"),
        "block_align_0": ("align0.wav", riff(fmt(block_align=0), half),
                          "ok", ""),
        # Formats whose cut-off files libsndfile reads as shorter ones.
        "au_data_size_too_long": ("cut.au", au(RATE, 1, 4000,
                                               data_size=16000),
                                  "error", "truncated"),
        "nist_sample_count_too_long": ("cut.sph", nist(RATE // 4, RATE // 2),
                                       "error", "truncated"),
        "nist_whole": ("whole.sph", nist(RATE // 2, RATE // 2), "ok", ""),
        "channels_0": ("ch0.wav", riff(fmt(channels=0), half), "error",
                       "channel"),
        "channels_100000": ("ch100k.au", au(RATE, 100000, 4000), "error",
                            "channel"),
        "rate_0": ("rate0.wav", riff(fmt(rate=0), half), "error",
                   "0 Hz|sample rate"),
        "rate_1": ("rate1.wav", riff(fmt(rate=1), half), "error", " 1 Hz"),
        "rate_384000": ("rate384k.wav",
                        riff(fmt(rate=384000), pcm16(192000, 1, 384000)),
                        "ok", ""),
        "float_nan": ("nan.wav", floats(tone_floats(8000, 4000, math.nan)),
                      "error", "NaN"),
        "float_inf": ("inf.wav", floats(tone_floats(8000, 100, math.inf)),
                      "error", "infinite"),
        "float_1e30": ("big.wav", floats(tone_floats(8000, 100, 1e30)),
                       "ok", ""),
        "empty_file": ("empty.wav", b"", "error", "empty"),
        "random_bytes": ("noise.wav",
                         bytes((i * 2654435761 >> 13) & 255
                               for i in range(5000)),
                         "error", "not a readable"),
        "text_as_wav": ("notes.wav", b"not a recording\n" * 40, "error",
                        "not a readable"),
        "directory": ("folder.wav", os.mkdir, "error", "directory"),
        # A FIFO: aurald takes only regular files for --file (start-up
        # must not wait for a writer); `aural send` reads it as a live
        # input, and here its writer sends junk.
        "fifo": ("pipe.wav", fifo_with_junk_writer, "error",
                 "not a regular file|not a readable"),
        "aiff_ssnd_too_long": (
            "cut.aiff",
            b"FORM" + struct.pack(">I", 4 + 26 + 16 + 400) + b"AIFF" +
            b"COMM" + struct.pack(">IhIh", 18, 1, 200, 16) +
            b"\x40\x0c\xfa\x00\x00\x00\x00\x00\x00\x00" +
            b"SSND" + struct.pack(">III", 8 + 4000, 0, 0) + bytes(400),
            "error", "truncated"),
        "ogg_vorbis_cut_in_headers": ("cut.ogg", "ogg-cut", "error",
                                      "Ogg|not a readable"),
    }
    return cases


def fifo_with_junk_writer(path):
    """Makes a FIFO and, for up to 10 s, waits for a reader to feed it a
    few hundred bytes that are no audio format."""
    os.mkfifo(path)

    def writer():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                time.sleep(0.02)
                continue
            try:
                os.write(fd, b"no audio here\n" * 20)
            except OSError:
                pass
            os.close(fd)
            return

    threading.Thread(target=writer, daemon=True).start()


CASES = make_cases()


class HostileAudioTest(DaemonTest):
    def make(self, case):
        name, contents, outcome, keywords = CASES[case]
        path = os.path.join(self.tmp, name)
        if contents == "ogg-cut":
            src = os.path.join(self.tmp, "src.wav")
            good_wav(src)
            full = os.path.join(self.tmp, "full.ogg")
            subprocess.run(["sox", src, full], check=True)
            with open(full, "rb") as f:
                data = f.read()
            os.unlink(full)
            with open(path, "wb") as f:
                f.write(data[:1500])  # inside the setup header
        elif callable(contents):
            contents(path)
        else:
            with open(path, "wb") as f:
                f.write(contents)
        return path, outcome, keywords

    def assert_names(self, text, path, keywords):
        self.assertIn(os.path.basename(path), text)
        if keywords:
            self.assertTrue(any(k.lower() in text.lower()
                                for k in keywords.split("|")),
                            "%r does not mention %r" % (text, keywords))

    def assert_no_sanitizer_report(self, text):
        self.assertNotIn("ERROR: AddressSanitizer", text)
        self.assertNotIn("ERROR: LeakSanitizer", text)
        self.assertNotIn("runtime error", text)

    def start_files(self, *files, extra=()):
        """aurald with these --file sources, held for their subscriber.
        Returns (proc, socket path, log path) once it serves, or (proc,
        None, log path) once it has exited at start-up."""
        sock = os.path.join(self.tmp, "files.sock")
        log_path = os.path.join(self.tmp, "aurald-files.log")
        cmd = [AURALD, "-m", TINY, "-s", sock, "--threads", "2", "--hold",
               "--exit-when-done"] + list(extra)
        for f in files:
            cmd += ["--file", f]
        log = open(log_path, "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while True:
            with open(log_path) as f:
                text = f.read()
            if "aurald info: serving" in text:
                return proc, sock, log_path
            if proc.poll() is not None:
                return proc, None, log_path
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                self.fail("aurald neither served nor exited:\n" + text)
            time.sleep(0.02)

    def run_startup(self, case):
        bad, outcome, keywords = self.make(case)
        good = os.path.join(self.tmp, "good.wav")
        good_wav(good)
        proc, sock, log_path = self.start_files(good, bad)
        if sock is None:
            # Refused at start-up: non-zero, and the message says why.
            with open(log_path) as f:
                text = f.read()
            self.assertNotEqual(proc.returncode, 0, text)
            self.assertNotEqual(outcome, "ok",
                                "a legal file was refused:\n" + text)
            self.assert_names(text, bad, keywords)
            self.assert_no_sanitizer_report(text)
            return
        ended = {}
        try:
            c = ac.Client(sock, timeout=30)
            c.subscribe(all=True)
            for ev in c.events(timeout=30):
                if isinstance(ev, ac.StreamEnded):
                    ended[ev.name] = ev
                    if len(ended) == 2:
                        break
            c.close()
            rc = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with open(log_path) as f:
            text = f.read()
        self.assertEqual(rc, 0, text)
        self.assert_no_sanitizer_report(text)
        self.assertEqual(ended["good.wav"].reason, "eof", text)
        self.assertEqual(ended["good.wav"].frames, 50 - 2)  # 0.5 s
        got = ended[os.path.basename(bad)]
        if outcome == "ok":
            self.assertEqual(got.reason, "eof", "%s\n%s" % (got, text))
            self.assertGreater(got.frames, 0)
        else:
            self.assertEqual(got.reason, "error", "%s\n%s" % (got, text))
            self.assert_names(got.message, bad, keywords)

    def run_send(self, case):
        bad, outcome, keywords = self.make(case)
        d = self.start()
        p = subprocess.run([AURAL, "send", "-q", "-s", d.path, "--name",
                            "bad", bad], capture_output=True, text=True,
                           timeout=60)
        if outcome == "ok":
            self.assertEqual(p.returncode, 0, p.stderr)
        else:
            self.assertNotEqual(p.returncode, 0, "accepted: " + p.stdout)
            self.assertIn("aural send: ", p.stderr)
            self.assert_names(p.stderr, bad, keywords)
        self.assert_no_sanitizer_report(p.stderr)
        with ac.Client(d.path, timeout=10) as c:  # still serving
            c.ping(b"after " + case.encode())
        self.stop_clean(d)
        self.assertNotIn("ERROR: LeakSanitizer", d.text())


def add_case_tests():
    for case in CASES:
        setattr(HostileAudioTest, "test_startup_" + case,
                lambda self, c=case: self.run_startup(c))
        setattr(HostileAudioTest, "test_send_" + case,
                lambda self, c=case: self.run_send(c))


add_case_tests()


class ChangingFileTest(DaemonTest):
    """Files that change under a reader that paces itself (--realtime)."""

    def later(self, seconds, fn):
        t = threading.Timer(seconds, fn)
        t.start()
        self.addCleanup(t.cancel)

    def test_startup_file_unlinked_while_read(self):
        # aurald holds the descriptor: the stream completes.
        path = os.path.join(self.tmp, "gone.wav")
        good_wav(path, seconds=1.5)
        d = self.start("--file", path, "--realtime", "--hold",
                       "--exit-when-done")
        c = ac.Client(d.path, timeout=20)
        c.subscribe(all=True)
        self.later(0.3, lambda: os.unlink(path))
        ended = None
        for ev in c.events(timeout=20):
            if isinstance(ev, ac.StreamEnded):
                ended = ev
                break
        c.close()
        self.assertFalse(os.path.exists(path))
        self.assertEqual(ended.reason, "eof")
        self.assertEqual(ended.frames, 150 - 2)
        self.assertEqual(d.proc.wait(20), 0, d.text())

    def test_startup_file_truncated_while_read(self):
        # The data the header promised disappears: the stream ends with an
        # error that says so, not as a shorter recording.
        path = os.path.join(self.tmp, "shrinks.wav")
        good_wav(path, seconds=3.0)
        d = self.start("--file", path, "--realtime", "--hold",
                       "--exit-when-done")
        c = ac.Client(d.path, timeout=20)
        c.subscribe(all=True)
        self.later(0.5, lambda: os.truncate(path, 44 + 2 * RATE))
        ended = None
        for ev in c.events(timeout=20):
            if isinstance(ev, ac.StreamEnded):
                ended = ev
                break
        c.close()
        self.assertEqual(ended.reason, "error", str(ended))
        self.assertIn("shrinks.wav", ended.message)
        self.assertIn("truncated", ended.message)
        self.assertEqual(d.proc.wait(20), 0, d.text())

    def test_send_file_unlinked_while_read(self):
        path = os.path.join(self.tmp, "gone.wav")
        good_wav(path, seconds=1.5)
        d = self.start()
        proc = subprocess.Popen([AURAL, "send", "-q", "-s", d.path,
                                 "--realtime", path], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

        def has_open():
            fd_dir = "/proc/%d/fd" % proc.pid
            try:
                return any(os.readlink(os.path.join(fd_dir, f)) == path
                           for f in os.listdir(fd_dir))
            except OSError:  # an fd closed while listed
                return False
        deadline = time.monotonic() + 20
        while not has_open():  # unlinked once it is being read
            if proc.poll() is not None:
                self.fail("aural send ended before it was seen reading: " +
                          proc.communicate()[1])
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        os.unlink(path)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        with ac.Client(d.path, timeout=10) as c:
            c.ping(b"x")
        self.stop_clean(d)

    def test_send_file_truncated_while_read(self):
        path = os.path.join(self.tmp, "shrinks.wav")
        good_wav(path, seconds=3.0)
        d = self.start()
        self.later(0.5, lambda: os.truncate(path, 44 + 2 * RATE))
        p = subprocess.run([AURAL, "send", "-q", "-s", d.path, "--realtime",
                            path], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("shrinks.wav", p.stderr)
        self.assertIn("truncated", p.stderr)
        with ac.Client(d.path, timeout=10) as c:
            c.ping(b"x")
        self.stop_clean(d)


if __name__ == "__main__":
    test_daemon.main(__name__)
