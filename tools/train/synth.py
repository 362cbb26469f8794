#!/usr/bin/python3
"""Synthesizes the training and test data of the default model with espeak-ng.

    synth.py train --out DIR [--count N] [--first I] [--seed S] [--jobs J]
    synth.py test  --out DIR [--count N] [--seed S]

`train` writes DIR/shard-KKK.npz, each with up to SHARD utterances (shard K
holds utterances K*SHARD onwards; --first, a multiple of SHARD, starts at a
later shard, for a corpus of utterances no earlier model has heard):
`feats` float16 [sum T, 80] (Kaldi fbank of the augmented 16 kHz audio,
before CMVN, exactly the model frontend), `lengths` int32 [n] frames per
utterance, `labels` (one string of space-separated phoneme tokens per
utterance) and `voices` (the espeak-ng voice of each). `test` writes 22.05 kHz WAV files (espeak-ng's native rate, so
the evaluation also exercises the C resampler) under DIR/{seen,unseen}/
{clean,snr20}/ and DIR/refs.tsv.

Every utterance is a pure function of (seed, index): voice, speed, pitch,
text and every augmentation are drawn from numpy's PCG64 seeded with both,
and espeak-ng and sox (with dither off) are deterministic, so the output does
not depend on --jobs.

Training augmentation, applied to the audio before features:
  espeak-ng:  6 dialects x 32 voice variants, 110-240 words/min, pitch 15-85
  sox:        speed perturbation 0.9 / 1.0 / 1.1 (tempo and pitch together),
              reverberation (25%), band-limiting (20%: telephone band or a
              4-7 kHz low-pass)
  numpy:      leading/trailing silence, level -38..-14 dBFS RMS, additive
              white, pink or brown noise at 5-35 dB SNR (50%)
"""

import argparse
import os
import subprocess
import sys
from multiprocessing import Pool

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import corpus  # noqa: E402
import engines  # noqa: E402
import phonemes  # noqa: E402

ESPEAK_RATE = 22050
RATE = 16000
SHARD = 1000
WAV_HEADER = 44  # espeak-ng --stdout writes a canonical 44-byte header


def espeak(voice, wpm, pitch, text):
    """(int16 samples at 22.05 kHz, phoneme tokens) from one espeak-ng run."""
    p = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-p", str(pitch),
                        "-x", "--sep=|", "--phonout=/dev/stderr", "--stdout", text],
                       check=True, capture_output=True)
    pcm = np.frombuffer(p.stdout[WAV_HEADER:], dtype="<i2")
    return pcm, phonemes.tokenize(p.stderr.decode("utf-8", "replace"))


def sox_effects(pcm22, effects):
    """int16 22.05 kHz -> float32 16 kHz through sox with `effects`."""
    cmd = ["sox", "-q", "-D", "-t", "raw", "-r", str(ESPEAK_RATE), "-e", "signed",
           "-b", "16", "-c", "1", "-", "-t", "raw", "-e", "floating-point", "-b", "32",
           "-c", "1", "-"] + effects + ["rate", "-v", str(RATE)]
    p = subprocess.run(cmd, input=pcm22.tobytes(), check=True, capture_output=True)
    return np.frombuffer(p.stdout, dtype="<f4").astype(np.float64)


def colored_noise(rng, n, kind):
    """Unit-power noise: white, pink (1/f) or brown (1/f^2) power spectrum."""
    w = rng.standard_normal(n)
    if kind != "white":
        spec = np.fft.rfft(w)
        f = np.arange(len(spec), dtype=np.float64)
        f[0] = 1.0
        spec /= np.sqrt(f) if kind == "pink" else f
        spec[0] = 0.0
        w = np.fft.irfft(spec, n)
    return w / max(np.sqrt(np.mean(w * w)), 1e-12)


def add_noise(x, snr_db, noise):
    """x plus `noise` scaled so that mean power ratio is snr_db."""
    p_sig = np.mean(x * x)
    return x + noise * np.sqrt(p_sig / 10 ** (snr_db / 10.0))


def train_spec(seed, index, train_sentences, words):
    """Everything random about training utterance `index`."""
    rng = np.random.default_rng([seed, index])
    if rng.random() < 0.7:
        text = train_sentences[rng.integers(len(train_sentences))]
    else:
        text = " ".join(words[k] for k in rng.integers(len(words), size=rng.integers(3, 11)))
    dialect = corpus.TRAIN_DIALECTS[rng.integers(len(corpus.TRAIN_DIALECTS))]
    variant = corpus.TRAIN_VARIANTS[rng.integers(len(corpus.TRAIN_VARIANTS))]
    effects = []
    speed = rng.choice([0.9, 1.0, 1.1], p=[0.25, 0.5, 0.25])
    if speed != 1.0:
        effects += ["speed", "%.2f" % speed]
    if rng.random() < 0.25:
        effects += ["gain", "-6", "reverb", str(rng.integers(10, 70)), str(rng.integers(20, 90)),
                    str(rng.integers(20, 101))]
    if rng.random() < 0.2:
        if rng.random() < 0.5:
            effects += ["sinc", "%d-%d" % (rng.integers(200, 400), rng.integers(3000, 3800))]
        else:
            effects += ["sinc", "-%d" % rng.integers(4000, 7000)]
    return dict(
        voice=corpus.voice_name(dialect, variant), wpm=int(rng.integers(110, 241)),
        pitch=int(rng.integers(15, 86)), text=text, effects=effects,
        pad=(int(rng.integers(800, 9600)), int(rng.integers(800, 6400))),
        level_db=float(rng.uniform(-38, -14)),
        snr_db=float(rng.uniform(5, 35)) if rng.random() < 0.5 else None,
        noise=str(rng.choice(["white", "pink", "brown"], p=[0.5, 0.3, 0.2])),
        noise_seed=int(rng.integers(1 << 62)))


_WORKER = {}


def _init_worker(seed, train_sentences, words):
    import torch
    torch.set_num_threads(1)
    import aural_ref
    _WORKER.update(seed=seed, sentences=train_sentences, words=words, torch=torch,
                   cfg=dict(aural_ref.FRONTEND_DEFAULTS), fbank=aural_ref.fbank)


def make_train_utterance(index):
    w = _WORKER
    spec = train_spec(w["seed"], index, w["sentences"], w["words"])
    pcm22, toks = espeak(spec["voice"], spec["wpm"], spec["pitch"], spec["text"])
    x = sox_effects(pcm22, spec["effects"])
    x = np.concatenate([np.zeros(spec["pad"][0]), x, np.zeros(spec["pad"][1])])
    rms = np.sqrt(np.mean(x * x)) + 1e-9
    x *= 10 ** (spec["level_db"] / 20.0) / rms
    if spec["snr_db"] is not None:
        rng = np.random.default_rng(spec["noise_seed"])
        x = add_noise(x, spec["snr_db"], colored_noise(rng, len(x), spec["noise"]))
    x = np.clip(x, -1.0, 1.0)
    feats = w["fbank"](x, w["cfg"], dtype=w["torch"].float32).numpy()
    return feats.astype(np.float16), " ".join(toks), spec["voice"]


def cmd_train(args):
    os.makedirs(args.out, exist_ok=True)
    train_sentences, _ = corpus.split_sentences()
    words = corpus.dictionary_words()
    n_shards = (args.count + SHARD - 1) // SHARD
    with Pool(args.jobs, _init_worker, (args.seed, train_sentences, words)) as pool:
        for k in range(args.first // SHARD, n_shards):
            path = os.path.join(args.out, "shard-%03d.npz" % k)
            if os.path.exists(path):
                continue
            idx = range(k * SHARD, min(args.count, (k + 1) * SHARD))
            results = pool.map(make_train_utterance, idx, chunksize=8)
            feats = np.concatenate([r[0] for r in results])
            lengths = np.array([len(r[0]) for r in results], dtype=np.int32)
            labels = np.array([r[1] for r in results])
            voices = np.array([r[2] for r in results])
            np.savez(path + ".tmp.npz", feats=feats, lengths=lengths, labels=labels,
                     voices=voices)
            os.replace(path + ".tmp.npz", path)
            print("%s: %d utterances, %.2f h" % (path, len(lengths), lengths.sum() / 360000.0),
                  flush=True)
    return 0


def write_wav(path, x):
    engines.write_wav(path, x, ESPEAK_RATE)


def cmd_test(args):
    """Held-out sentences; `count` utterances in training voices and `count`
    in the two unseen voices (half each), clean and with white noise at 20
    dB SNR (power over the whole utterance)."""
    _, test_sentences = corpus.split_sentences()
    rng = np.random.default_rng([args.seed, 7])
    order = rng.permutation(len(test_sentences))
    assert len(order) >= 2 * args.count, "not enough test sentences"
    for group in ("seen", "unseen"):
        for cond in ("clean", "snr20"):
            os.makedirs(os.path.join(args.out, group, cond), exist_ok=True)
    rows = []
    for i in range(2 * args.count):
        group = "seen" if i < args.count else "unseen"
        if group == "seen":
            voice = corpus.voice_name(
                corpus.TRAIN_DIALECTS[rng.integers(len(corpus.TRAIN_DIALECTS))],
                corpus.TRAIN_VARIANTS[rng.integers(len(corpus.TRAIN_VARIANTS))])
        else:
            voice = corpus.UNSEEN_VOICES[i % 2]
        wpm, pitch = int(rng.integers(140, 201)), int(rng.integers(35, 66))
        text = test_sentences[order[i]]
        pcm22, toks = espeak(voice, wpm, pitch, text)
        x = pcm22.astype(np.float64) / 32768.0
        name = "%04d.wav" % i
        write_wav(os.path.join(args.out, group, "clean", name), x)
        noisy = add_noise(x, 20.0, np.random.default_rng([args.seed, 8, i]).standard_normal(len(x)))
        write_wav(os.path.join(args.out, group, "snr20", name), noisy)
        rows.append("\t".join([group, name, voice, str(wpm), str(pitch), text, " ".join(toks)]))
    with open(os.path.join(args.out, "refs.tsv"), "w") as f:
        f.write("group\tfile\tvoice\twpm\tpitch\ttext\tphonemes\n")
        f.write("\n".join(rows) + "\n")
    print("%s: %d utterances x 2 conditions" % (args.out, len(rows)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("train", "test"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=20000,
                    help="utterances 0..COUNT-1 (train: --first..COUNT-1)")
    ap.add_argument("--first", type=int, default=0,
                    help="train: first utterance, a multiple of %d" % SHARD)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.first and args.what != "train":
        ap.error("--first is for train only")
    if args.first % SHARD or not 0 <= args.first < args.count:
        ap.error("--first must be a multiple of %d below --count" % SHARD)
    return cmd_train(args) if args.what == "train" else cmd_test(args)


if __name__ == "__main__":
    sys.exit(main())
