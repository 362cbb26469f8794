#!/usr/bin/python3
"""Generate golden data for the C encoder's parity tests (tests/data/encoder).

Writes, deterministically (fixed seeds; speech from espeak-ng 1.51):

  input.npy           float32 [2100, 80]: Kaldi fbank (before CMVN) of 21 s of
                      espeak-ng speech, five sentences and voices, 16 kHz
  NAME.safetensors    a small random-weight model (export.py format)
  NAME.emb.npy        float32 [2100, d_model]: forward(input, START_FRAME)
  NAME.logits.npy     float32 [2100, V], for models with a CTC head
  NAME.ctc.txt        greedy CTC ids (line 1) and text (line 2) of the golden
                      logits, for models with a CTC head
  tiny.safetensors    the small test model with a CTC head (a byte copy of
                      prenorm_gelu_rope.safetensors)
  cases.txt           one line per case: NAME T START_FRAME HAS_HEAD DTYPE
  README.md           how the data was made

Goldens are computed in float64 (module.double(), input.double()) from the
weights as stored in the file (F16/BF16 weights are rounded, then upcast),
and stored as float32. The script also checks, and stops on failure, that:
export -> load -> export is byte-exact; the whole-signal forward equals the
streaming forward_chunk (chunks of 7, 50 and frame by frame) within 1e-5 in
float64, and in float32 within 1e-5 times max(1, largest output magnitude);
and forward matches aural_ref.naive_forward, an
independent loop-by-loop float64 oracle, on the first frames.

Rerun from the repository root:

    /usr/bin/python3 tools/reference/gen_encoder_goldens.py [--out DIR]

Requires torch 1.13 / torchaudio 0.13.1, numpy and espeak-ng.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import wave

import numpy as np
import torch
import torchaudio.functional as taf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aural_ref  # noqa: E402
import export  # noqa: E402

T_FRAMES = 2100
RATE = 16000
N_SAMPLES = 400 + (T_FRAMES - 1) * 160  # exactly T_FRAMES frames
HOUR_FRAMES = 360000
NOISE_SEED = 20240607
NOISE_LSB = 3.0  # std of the background noise, in int16 steps
GAP_SECONDS = 0.25

# (voice, words per minute, text); spoken in this order with short gaps.
SENTENCES = [
    ("en-us", 165, "The quick brown fox jumps over the lazy dog."),
    ("en-gb", 165, "A streaming encoder turns every ten milliseconds of sound into a frame."),
    ("en-us+f3", 175, "Please call Stella and ask her to bring these things with her from the store."),
    ("en-gb-scotland", 160, "Six spoons of fresh snow peas, five thick slabs of blue cheese."),
    ("en-us+m3", 170, "We also need a small plastic snake and a big toy frog for the kids."),
]

TOKENS_A = ["<blank>", "a", "e", "i", "o", "u", "s", "t", "\u2581", "'"]
TOKENS_B = ["<blank>", "\u2581the", "\u2581a", "s", "t", "n", "r", "e", "o", "ing", "\u00e9", "?"]

BASE = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64)

# name, config overrides, cmvn, file dtype, start frame, weight seed
CASES = [
    ("prenorm_gelu_rope",
     dict(activation="gelu", norm_first=True, pos_encoding="rope", window=16,
          n_heads=4, final_norm=True, vocab=TOKENS_A), True, "F32", 0, 121),
    ("postnorm_relu_sin",
     dict(activation="relu", norm_first=False, pos_encoding="sinusoidal", window=8,
          n_heads=2, final_norm=False, layer_norm_eps=1e-6), False, "F32", 0, 102),
    ("none_w1",
     dict(activation="relu", norm_first=True, pos_encoding="none", window=1,
          n_heads=8, n_layers=3, final_norm=False), False, "F32", 0, 103),
    ("wide_window",
     dict(activation="gelu", norm_first=False, pos_encoding="rope", window=4096,
          n_heads=1, final_norm=True, rope_theta=50000.0), False, "F32", 0, 104),
    ("f16_head",
     dict(activation="gelu", norm_first=True, pos_encoding="rope", window=50,
          n_heads=4, final_norm=True, vocab=TOKENS_B), True, "F16", 0, 134),
    ("bf16_sin",
     dict(activation="relu", norm_first=True, pos_encoding="sinusoidal", window=12,
          n_heads=4, final_norm=True), True, "BF16", 0, 106),
    ("offset_rope",
     dict(activation="gelu", norm_first=True, pos_encoding="rope", window=20,
          n_heads=2, final_norm=True), True, "F32", HOUR_FRAMES, 107),
    ("offset_sin",
     dict(activation="relu", norm_first=True, pos_encoding="sinusoidal", window=20,
          d_model=48, n_heads=4, d_ff=96, final_norm=True), True, "F32", HOUR_FRAMES, 108),
]

# Added to the blank's head bias so that, as in a trained CTC model, most
# frames decode to blank. With it, the seeds of the head cases were chosen so
# that no frame's two largest logits are closer than MIN_MARGIN: a float32
# implementation then decodes exactly the golden text.
BLANK_BIAS = 1.0
MIN_MARGIN = 2e-4

TINY_FROM = "prenorm_gelu_rope"
STREAM_TOL = 1e-5
NAIVE_FRAMES = 40


# ---------------------------------------------------------------------------
# Input features
# ---------------------------------------------------------------------------

def espeak(voice, wpm, text):
    """int16 samples at espeak-ng's native 22050 Hz."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", path, text],
                       check=True)
        with wave.open(path, "rb") as w:
            assert w.getnchannels() == 1 and w.getsampwidth() == 2
            assert w.getframerate() == 22050, w.getframerate()
            return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()


def speech_16k():
    """N_SAMPLES int16 samples of speech at 16 kHz with faint seeded noise."""
    gap = np.zeros(int(GAP_SECONDS * 22050), dtype=np.float64)
    parts = []
    for voice, wpm, text in SENTENCES:
        parts += [espeak(voice, wpm, text).astype(np.float64) / 32768.0, gap]
    x22 = np.concatenate(parts)
    x16 = taf.resample(torch.from_numpy(x22), 22050, RATE).numpy()
    x16 = np.pad(x16, (0, max(0, N_SAMPLES - len(x16))))[:N_SAMPLES] * 32768.0
    x16 += np.random.default_rng(NOISE_SEED).standard_normal(N_SAMPLES) * NOISE_LSB
    return np.clip(np.round(x16), -32768, 32767).astype(np.int16)


def input_features(frontend_cfg):
    pcm = speech_16k()
    feats = aural_ref.fbank(pcm.astype(np.float64) / 32768.0, frontend_cfg)
    assert feats.shape == (T_FRAMES, frontend_cfg["num_mel_bins"]), feats.shape
    assert torch.isfinite(feats).all()
    return np.ascontiguousarray(feats.numpy(), dtype="<f4")


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def stream(model, x, start, chunk):
    """forward_chunk over x in chunks of `chunk` frames -> (emb, logits)."""
    state = model.init_state(start)
    embs, logits = [], []
    for piece in x.split(chunk):
        e, l = model.forward_chunk(piece, state)
        embs.append(e)
        if l is not None:
            logits.append(l)
    assert state.pos == start + x.shape[0]
    return torch.cat(embs), (torch.cat(logits) if logits else None)


def max_diff(a, b):
    d = (a.double() - b.double()).abs().max().item()
    return d


def check_streaming(model, x, start, full):
    """Max |stream - full| over embeddings and logits for chunks 7, 50, 1."""
    out = {}
    for chunk in (7, 50, 1):
        e, l = stream(model, x, start, chunk)
        d = max_diff(e, full[0])
        if l is not None:
            d = max(d, max_diff(l, full[1]))
        out[chunk] = d
    return out


def check_roundtrip(model, path, dtype):
    """export -> load is exact: loaded tensors equal the originals rounded to
    the file dtype, and exporting the loaded model again gives the same bytes."""
    loaded = export.load(path)
    orig = model.state_dict()
    for name, t in loaded.state_dict().items():
        want = export.round_to_dtype(orig[name], dtype)
        assert torch.equal(t, want), "round trip changed %s" % name
    with open(path, "rb") as f:
        data = f.read()
    again = export.build_file(loaded.state_dict(), loaded.config, dtype)
    assert again == data, "re-export of %s differs" % path
    (n,) = np.frombuffer(data[:8], dtype="<u8")
    assert n % 8 == 0
    return loaded


def top2_margin(logits):
    top = np.sort(logits, axis=1)[:, -2:]
    return float((top[:, 1] - top[:, 0]).min())


# ---------------------------------------------------------------------------

README = """# Encoder golden data

Made by `tools/reference/gen_encoder_goldens.py` from the PyTorch reference
`tools/reference/aural_ref.py` (torch {torch}, torchaudio {torchaudio},
espeak-ng 1.51). Regenerate from the repository root with

    /usr/bin/python3 tools/reference/gen_encoder_goldens.py

The output is deterministic (fixed seeds); the script stops if any of its
self-checks fails.

## Files

- `input.npy`: float32 [{T}, 80], the input of every case: Kaldi fbank
  features (DESIGN.md §2 defaults, *before* CMVN) of 21 s of espeak-ng
  speech (five sentences, five voices, 0.25 s gaps), resampled to 16 kHz with
  torchaudio, faint seeded noise added, quantized to int16, fbank computed
  in float64 and stored as float32.
- `NAME.safetensors`: a small random-weight model (format: DESIGN.md §2 and
  `tools/reference/export.py`). LayerNorm weights are 1 + 0.1 N(0,1) and
  every bias is random, so a missing term shows. CMVN statistics, when
  present, are the per-bin mean and standard deviation of `input.npy`.
- `NAME.emb.npy`: float32 [{T}, d_model], golden embeddings
  (after the final norm when the model has one).
- `NAME.logits.npy`: float32 [{T}, V], golden raw CTC logits (models with a
  head).
- `NAME.ctc.txt`: greedy CTC decoding of the golden logits (argmax per
  frame, collapse repeats, drop blank 0): line 1 the token ids separated by
  spaces, line 2 the text (plain concatenation of the token strings, UTF-8).
- `cases.txt`: one line per case, `NAME T START_FRAME HAS_HEAD DTYPE`.
  START_FRAME is the absolute index of the first input frame (positions are
  `START_FRAME + row`); 360000 is one hour into a stream.
- `tiny.safetensors`: the small committed test model with a CTC head; a byte
  copy of `{tiny}.safetensors` (so `{tiny}.*.npy` are its goldens).

Goldens are `forward(input, START_FRAME)` computed in float64 from the
weights *as stored* (F16/BF16 weights rounded, then upcast), stored as
float32. The contract for a float32 implementation is 1e-4 (PyTorch's own
float32 forward lands within about 1e-5 of them). Streaming and
whole-signal runs agree within 1e-5 in float32 for the cases whose outputs
are O(1); float32 rounding grows with magnitude, so for `none_w1` (no CMVN,
no final norm, values up to about 30) allow 1e-5 relative to the largest
value.

In the models with a head, the blank's head bias was raised by 1 so that
most frames decode to blank, as in a trained CTC model, and the seeds were
chosen so that no frame's two largest logits are closer than 2e-4: a
float32 implementation within the contract decodes exactly `NAME.ctc.txt`.

## Cases

| case | LN | act | pos | W | heads | d | d_ff | layers | final norm | CMVN | head | dtype | start | max abs emb |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{table}

Other config values: `layer_norm_eps` 1e-5 except `postnorm_relu_sin`
(1e-6); `rope_theta` 10000 except `wide_window` (50000). Vocabularies
contain non-ASCII tokens (U+2581, U+00E9) written as raw UTF-8 in the
header.

## Conventions the C code must mirror

- Window: frame t attends to frames max(0, t-W+1) .. t.
- Sinusoidal (added after `input_proj`): for j = 2i and j = 2i+1,
  `pe[j] = sin / cos (t / 10000^(2i/d_model))` with t the absolute frame
  index, computed in double, rounded to float.
- RoPE: q and k of each head, pairs (2i, 2i+1), angle
  `t * theta^(-2i/head_size)` in double, cos/sin rounded to float;
  `a' = a cos - b sin`, `b' = a sin + b cos`; applied after the in_proj
  bias; the cache holds rotated keys.
- Attention scale 1/sqrt(head_size); softmax over the window; LayerNorm with
  biased variance and eps inside the square root; gelu is the erf form.
- Safetensors header: compact JSON, UTF-8, padded with spaces to a multiple
  of 8 bytes; tensors in state_dict order, contiguous.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/encoder",
                    help="output directory (default: tests/data/encoder)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    import torchaudio
    print("torch %s, torchaudio %s, numpy %s" % (torch.__version__,
                                                torchaudio.__version__, np.__version__))

    frontend_cfg = dict(aural_ref.FRONTEND_DEFAULTS)
    feats = input_features(frontend_cfg)
    np.save(os.path.join(args.out, "input.npy"), feats)
    print("input.npy: %s, min %.3f max %.3f mean %.3f" % (
        feats.shape, feats.min(), feats.max(), feats.mean()))
    x32 = torch.from_numpy(feats)
    x64 = x32.double()
    cmvn_mean = x64.mean(dim=0)
    cmvn_std = x64.std(dim=0)

    lines, rows = [], []
    worst_stream = 0.0
    for name, over, cmvn, dtype, start, seed in CASES:
        cfg = aural_ref.complete_config({**frontend_cfg, **BASE, **over})
        model = aural_ref.AuralEncoder(cfg, cmvn=cmvn)
        aural_ref.init_random(model, seed, cmvn_mean, cmvn_std)
        if model.head is not None:
            with torch.no_grad():
                model.head.bias[0] += BLANK_BIAS
        path = os.path.join(args.out, name + ".safetensors")
        size = export.export(model, cfg, path, dtype)
        loaded = check_roundtrip(model, path, dtype)   # float32, file weights
        gold = export.load(path).double()

        with torch.no_grad():
            emb, logits = gold(x64, start)
            full32 = loaded(x32, start)
            s64 = check_streaming(gold, x64, start, (emb, logits))
            s32 = check_streaming(loaded, x32, start, full32)
            n_emb, n_logits = aural_ref.naive_forward(gold, feats[:NAIVE_FRAMES], start)
        d_naive = np.abs(n_emb - emb[:NAIVE_FRAMES].numpy()).max()
        if logits is not None:
            d_naive = max(d_naive, np.abs(n_logits - logits[:NAIVE_FRAMES].numpy()).max())
        d32 = max_diff(full32[0], emb)
        if logits is not None:
            d32 = max(d32, max_diff(full32[1], logits))

        assert d_naive < 1e-9, (name, d_naive)
        for chunk, d in s64.items():
            assert d <= STREAM_TOL, (name, "float64", chunk, d)
        # float32 GEMM rounding scales with the magnitude of the outputs
        # (none_w1 has neither CMVN nor a final norm, so its values are large).
        scale = max(1.0, emb.abs().max().item(),
                    logits.abs().max().item() if logits is not None else 0.0)
        for chunk, d in s32.items():
            assert d <= STREAM_TOL * scale, (name, "float32", chunk, d, scale)
        worst_stream = max(worst_stream, *s32.values())

        emb32 = np.ascontiguousarray(emb.numpy(), dtype="<f4")
        np.save(os.path.join(args.out, name + ".emb.npy"), emb32)
        has_head = logits is not None
        extra = ""
        if has_head:
            lg = np.ascontiguousarray(logits.numpy(), dtype="<f4")
            np.save(os.path.join(args.out, name + ".logits.npy"), lg)
            ids, text = aural_ref.ctc_greedy(torch.from_numpy(lg), cfg["vocab"])
            with open(os.path.join(args.out, name + ".ctc.txt"), "w", encoding="utf-8") as f:
                f.write(" ".join(map(str, ids)) + "\n" + text + "\n")
            assert top2_margin(lg) >= MIN_MARGIN, (name, top2_margin(lg))
            extra = ", %d CTC tokens, min top-2 logit margin %.2e" % (len(ids), top2_margin(lg))
        lines.append("%s %d %d %d %s" % (name, T_FRAMES, start, int(has_head), dtype))
        rows.append("| %s | %s | %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %d | %.1f |" % (
            name, "pre" if cfg["norm_first"] else "post", cfg["activation"],
            cfg["pos_encoding"], cfg["window"], cfg["n_heads"], cfg["d_model"],
            cfg["d_ff"], cfg["n_layers"], "yes" if cfg["final_norm"] else "no",
            "yes" if cmvn else "no", len(cfg["vocab"]) if has_head else "no",
            dtype, start, emb.abs().max().item()))
        print("%-18s %5s %6d B  |emb| max %.2f  naive %.1e  f32-vs-golden %.2e  "
              "stream f64 %s  f32 %s%s" % (
                  name, dtype, size, emb.abs().max().item(), d_naive, d32,
                  "/".join("%.0e" % s64[c] for c in (7, 50, 1)),
                  "/".join("%.1e" % s32[c] for c in (7, 50, 1)), extra))

    # RoPE depends only on relative positions: an hour's offset changes the
    # result only by rounding. A sanity check of the offset case itself.
    name, over, cmvn, dtype, start, seed = [c for c in CASES if c[0] == "offset_rope"][0]
    gold = export.load(os.path.join(args.out, name + ".safetensors")).double()
    with torch.no_grad():
        d_shift = max_diff(gold(x64, 0)[0], gold(x64, start)[0])
    assert d_shift < 1e-6, d_shift
    print("offset_rope: |forward(start=0) - forward(start=%d)| = %.2e" % (start, d_shift))

    shutil.copyfile(os.path.join(args.out, TINY_FROM + ".safetensors"),
                    os.path.join(args.out, "tiny.safetensors"))
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README.format(torch=torch.__version__, torchaudio=torchaudio.__version__,
                              T=T_FRAMES, tiny=TINY_FROM, table="\n".join(rows)))
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print("worst float32 streaming difference %.2e; wrote %d cases, %d bytes, to %s" % (
        worst_stream, len(lines), total, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
