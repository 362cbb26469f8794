"""Speech from three synthesizers, with each engine's own phones as labels.

    synthesize(spec) -> (float32 samples at 16 kHz, ARPAbet phone list)

A spec is a dict: engine ("espeak", "flite", "festival"), voice, text and
the engine's prosody settings (drawn by random_spec). The phones are the
ones the engine says it spoke for that run (espeak-ng --phonout, flite -ps,
festival's Segment relation), mapped to ARPAbet-39 by arpabet.py.

Voices held out of training (never synthesized by random_spec with
train=True): espeak-ng's dialects en-us-nyc and en-gb-x-rp and variants
f4 and m6 (as before), flite's rms and festival's ked_diphone.

With AURAL_SYNTH_ROOT set (a directory where synthpack.sh's archive was
unpacked), every program runs through the packed dynamic loader and
libraries, so nothing needs to be installed.
"""

import ctypes
import os
import subprocess
import tempfile
import wave

import numpy as np
import torch

import arpabet
import augment
import corpus
import phonemes

RATE = 16000

FLITE_TRAIN = ["kal", "kal16", "awb", "slt"]
FLITE_HELD_OUT = ["rms"]
FESTIVAL_TRAIN = ["kal_diphone", "cmu_us_slt_arctic_hts"]
FESTIVAL_HELD_OUT = ["ked_diphone"]
# flite's clustergen voices take an f0 scale; its diphone voices a target mean.
FLITE_CG = {"awb", "slt", "rms"}


def _root():
    return os.environ.get("AURAL_SYNTH_ROOT")


def _cmd(argv):
    """argv run through the packed loader when AURAL_SYNTH_ROOT is set."""
    root = _root()
    if not root:
        return argv
    libs = ":".join(os.path.join(root, d) for d in
                    ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu",
                     "usr/lib/x86_64-linux-gnu/pulseaudio"))
    return [os.path.join(root, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
            "--library-path", libs,
            os.path.join(root, argv[0].lstrip("/"))] + argv[1:]


def _run(argv, **kw):
    env = None
    if _root():
        # libsox finds its format modules (GSM among them) through libltdl.
        env = dict(os.environ, LTDL_LIBRARY_PATH=os.path.join(_root(), "usr/lib/x86_64-linux-gnu/sox"))
    p = subprocess.run(_cmd(argv), capture_output=True, env=env, **kw)
    if p.returncode:
        raise RuntimeError("%s exited with %d: %s" % (
            os.path.basename(argv[0]), p.returncode,
            p.stderr.decode("utf-8", "replace").strip()[-300:]))
    return p


def read_wav(path):
    with wave.open(path, "rb") as w:
        rate, n = w.getframerate(), w.getnframes()
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        pcm = np.frombuffer(w.readframes(n), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0, rate


def to_16k(x, rate):
    """Band-limited resampling to 16 kHz (augment.resample, by the DFT)."""
    if rate == RATE:
        return x
    y = augment.resample(torch.from_numpy(x.astype(np.float64)), rate, RATE)
    return y.numpy().astype(np.float32)


def espeak(spec):
    argv = ["/usr/bin/espeak-ng", "-v", spec["voice"], "-s", str(spec["wpm"]),
            "-p", str(spec["pitch"]), "-x", "--sep=|", "--phonout=/dev/stderr", "--stdout"]
    if _root():
        argv += ["--path=" + os.path.join(_root(), "usr/lib/x86_64-linux-gnu")]
    p = _run(argv + [spec["text"]])
    pcm = np.frombuffer(p.stdout[44:], dtype="<i2").astype(np.float32) / 32768.0
    toks = phonemes.tokenize(p.stderr.decode("utf-8", "replace"))
    return to_16k(pcm, 22050), arpabet.from_espeak(toks, spec["voice"])


def flite(spec, tmp):
    path = os.path.join(tmp, "f.wav")
    argv = ["/usr/bin/flite", "-voice", spec["voice"], "--setf",
            "duration_stretch=%.3f" % spec["stretch"]]
    if spec["voice"] in FLITE_CG:
        argv += ["--setf", "f0_shift=%.3f" % spec["f0"]]
    else:
        argv += ["--setf", "int_f0_target_mean=%.1f" % spec["f0"]]
    p = _run(argv + ["-ps", "-t", spec["text"], "-o", path])
    x, rate = read_wav(path)
    return to_16k(x, rate), arpabet.from_radio(p.stdout.decode().split())


def _scheme_string(text):
    return '"' + text.replace("\\", " ").replace('"', " ") + '"'


def festival(spec, tmp):
    wav, seg = os.path.join(tmp, "s.wav"), os.path.join(tmp, "s.txt")
    lines = []
    if _root():
        # Debian's festival looks for init.scm in /usr/share/festival whatever
        # --libdir says: start it bare (-q) and load the packed one.
        lib = os.path.join(_root(), "usr/share/festival/")
        lines += ["(set! libdir %s)" % _scheme_string(lib),
                  "(set! datadir %s)" % _scheme_string(lib),
                  "(load (path-append libdir \"init.scm\"))"]
    lines += ["(voice_%s)" % spec["voice"],
             "(Parameter.set 'Duration_Stretch %.3f)" % spec["stretch"]]
    if spec["voice"].endswith("_diphone"):
        lines.append("(set! int_lr_params (list (list 'target_f0_mean %.1f) "
                     "(list 'target_f0_std %.1f) '(model_f0_mean 170) '(model_f0_std 34)))"
                     % (spec["f0"], spec["f0"] * 0.14))
    lines += ["(set! u (utt.synth (Utterance Text %s)))" % _scheme_string(spec["text"]),
              "(utt.save.wave u %s 'riff)" % _scheme_string(wav),
              "(set! fd (fopen %s \"w\"))" % _scheme_string(seg),
              "(mapcar (lambda (s) (format fd \"%s \" (item.name s))) "
              "(utt.relation.items u 'Segment))",
              "(fclose fd)"]
    script = os.path.join(tmp, "s.scm")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    _run(["/usr/bin/festival"] + (["-q"] if _root() else []) + ["-b", script])
    x, rate = read_wav(wav)
    with open(seg) as f:
        phones = f.read().split()
    return to_16k(x, rate), arpabet.from_radio(phones)


def synthesize(spec):
    """(float32 16 kHz samples, ARPAbet phones) of one spec."""
    if spec["engine"] == "espeak":
        return espeak(spec)
    with tempfile.TemporaryDirectory(prefix="aural-synth-") as tmp:
        return (flite if spec["engine"] == "flite" else festival)(spec, tmp)


def gsm_channel(x, tmp_dir=None):
    """x (16 kHz) through a GSM 06.10 full-rate codec at 8 kHz and back:
    sox resamples, libgsm (which sox's GSM format uses) codes 160-sample
    frames. libgsm is called directly because a packed sox finds no format
    modules (it looks for them where it was installed)."""
    with tempfile.TemporaryDirectory(prefix="aural-gsm-", dir=tmp_dir) as tmp:
        a, n, c, b = (os.path.join(tmp, f) for f in ("a.wav", "a8.wav", "c8.wav", "b.wav"))
        write_wav(a, x, RATE)
        _run(["/usr/bin/sox", "-q", "-D", a, "-r", "8000", n])
        y8, _ = read_wav(n)
        write_wav(c, _gsm_code(y8), 8000)
        _run(["/usr/bin/sox", "-q", "-D", c, "-r", str(RATE), "-b", "16", b])
        y, _ = read_wav(b)
    return y


_GSM = None


def _gsm_code(x8):
    """x8 (8 kHz floats) encoded and decoded by libgsm, 160 samples a frame
    (the last frame padded with silence, then cut)."""
    global _GSM
    if _GSM is None:
        root = _root()
        path = os.path.join(root, "usr/lib/x86_64-linux-gnu/libgsm.so.1") if root else "libgsm.so.1"
        lib = ctypes.CDLL(path)
        lib.gsm_create.restype = ctypes.c_void_p
        lib.gsm_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.gsm_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.gsm_destroy.argtypes = [ctypes.c_void_p]
        _GSM = lib
    pcm = np.clip(np.round(np.asarray(x8, dtype=np.float64) * 32768.0), -32768, 32767)
    n = len(pcm)
    frames = np.zeros(((n + 159) // 160) * 160, dtype=np.int16)
    frames[:n] = pcm
    out = np.zeros_like(frames)
    coded = (ctypes.c_ubyte * 33)()
    # An encoder and a decoder each keep their own state: one handle each.
    enc, dec = _GSM.gsm_create(), _GSM.gsm_create()
    try:
        for k in range(0, len(frames), 160):
            src = np.ascontiguousarray(frames[k:k + 160])
            dst = np.zeros(160, dtype=np.int16)
            _GSM.gsm_encode(enc, src.ctypes.data, coded)
            if _GSM.gsm_decode(dec, coded, dst.ctypes.data) != 0:
                raise RuntimeError("libgsm could not decode its own frame")
            out[k:k + 160] = dst
    finally:
        _GSM.gsm_destroy(enc)
        _GSM.gsm_destroy(dec)
    return out[:n].astype(np.float64) / 32768.0


def write_wav(path, x, rate):
    pcm = np.clip(np.round(np.asarray(x, dtype=np.float64) * 32768.0), -32768, 32767)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())


ENGINE_WEIGHTS = {"espeak": 0.4, "flite": 0.35, "festival": 0.25}


def random_spec(rng, sentences, words, train=True, engine=None):
    """Everything random about one utterance: engine, voice, prosody, text.
    `train` draws training voices only; False draws the held-out ones."""
    if engine is None:
        names = list(ENGINE_WEIGHTS)
        engine = names[rng.choice(len(names), p=list(ENGINE_WEIGHTS.values()))]
    if rng.random() < 0.7 or not words:
        text = sentences[rng.integers(len(sentences))]
    else:
        text = " ".join(words[k] for k in rng.integers(len(words), size=rng.integers(3, 11)))
    if engine == "espeak":
        if train:
            voice = corpus.voice_name(
                corpus.TRAIN_DIALECTS[rng.integers(len(corpus.TRAIN_DIALECTS))],
                corpus.TRAIN_VARIANTS[rng.integers(len(corpus.TRAIN_VARIANTS))])
        else:
            voice = corpus.UNSEEN_VOICES[rng.integers(len(corpus.UNSEEN_VOICES))]
        return dict(engine=engine, voice=voice, text=text, wpm=int(rng.integers(110, 241)),
                    pitch=int(rng.integers(15, 86)))
    pool = (FLITE_TRAIN if train else FLITE_HELD_OUT) if engine == "flite" else \
        (FESTIVAL_TRAIN if train else FESTIVAL_HELD_OUT)
    voice = pool[rng.integers(len(pool))]
    # flite's clustergen voices take an f0 scale, the diphone voices of both
    # engines a target mean; festival's HTS voice takes neither here.
    if voice in FLITE_CG:
        f0 = float(rng.uniform(0.8, 1.25))
    elif voice.endswith("_hts"):
        f0 = None
        rng.uniform()  # the draw the other voices make, so later draws line up
    else:
        f0 = float(rng.uniform(80, 150))
    return dict(engine=engine, voice=voice, text=text, stretch=float(rng.uniform(0.8, 1.3)),
                f0=f0)
