#!/usr/bin/python3
"""Where single precision loses a trained model's accuracy, layer by layer.

    parity_trace.py [--model models/default.safetensors] [WAV]

Runs the reference forward (tools/reference/aural_ref.py) of one recording
(default: models/sample.flac, converted to 16 kHz by sox) twice, with the
model's weights upcast to float64 and in float32, and prints after the
input projection, after every layer, after the final norm and for the
logits: the largest value, the RMS and max |float32 - float64|. For each
layer it also feeds the float32 run's input to the float64 layer, which
separates what the layer adds by rounding from what it amplifies of the
error it was given (the attention and feed-forward halves apart).

check_parity.py compares the C encoder with the same float64 forward; this
script explains a difference that the float32 reference shares.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import aural_ref  # noqa: E402
import check_parity  # noqa: E402
import export  # noqa: E402


def read_16k(path):
    with tempfile.TemporaryDirectory() as tmp:
        wav = os.path.join(tmp, "in.wav")
        check_parity.to_16k_wav(path, wav)
        return check_parity.read_wav16(wav).astype(np.float64) / 32768.0


def trace(model, feats):
    """Inputs of every layer, then the final norm's output and the logits
    (the last two entries for the parts the model has)."""
    dtype = model.input_proj.weight.dtype
    with torch.no_grad():
        x = model._embed(feats.to(dtype), 0)
        ctx = model._context(0, x.shape[0], 0)
        out = [x]
        for layer in model.encoder.layers:
            x, _, _ = model._layer(layer, x, ctx)
            out.append(x)
        if model.encoder.norm is not None:
            x = model.encoder.norm(x)
            out.append(x)
        if model.head is not None:
            out.append(model.head(x))
    return out


def halves(model, layer, x, ctx):
    """(attention output, feed-forward output) of one Pre-LN layer."""
    attn, _, _ = model._attention(layer, layer.norm1(x), ctx, None, None)
    h = x + attn
    return attn, layer.linear2(model._act(layer.linear1(layer.norm2(h))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wav", nargs="?", default=os.path.join(ROOT, "models", "sample.flac"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)

    m64 = export.load(args.model).double().eval()
    m32 = export.load(args.model).float().eval()
    if m64.pos_encoding != "rope" or not m64.norm_first:
        raise SystemExit("parity_trace.py: only Pre-LN RoPE models are traced")
    feats = aural_ref.fbank(read_16k(args.wav), m64.config)
    a, b = trace(m64, feats), trace(m32, feats)
    n_layers = len(m64.encoder.layers)
    names = (["input projection"] + ["layer %d" % i for i in range(n_layers)]
             + ["final norm"] * (m64.encoder.norm is not None)
             + ["logits"] * (m64.head is not None))
    print("%d frames, %s" % (feats.shape[0], args.model))
    print("%-16s %8s %7s %10s %8s" % ("after", "max|x|", "rms", "f32 error", "frame"))
    for name, u, v in zip(names, a, b):
        err = (u - v.double()).abs().max(1).values
        print("%-16s %8.2f %7.2f %10.2e %8d" % (
            name, u.abs().max(), u.pow(2).mean().sqrt(), err.max(), err.argmax()))

    print("\nper layer, float64 arithmetic on the float32 run's input:")
    print("%-10s %10s %10s %10s %10s" % ("layer", "input err", "output err", "attention", "ffn"))
    ctx = m64._context(0, feats.shape[0], 0)
    with torch.no_grad():
        for i, layer in enumerate(m64.encoder.layers):
            exact, given = a[i], b[i].double()
            y1, _, _ = m64._layer(layer, exact, ctx)
            y2, _, _ = m64._layer(layer, given, ctx)
            at1, ff1 = halves(m64, layer, exact, ctx)
            at2, ff2 = halves(m64, layer, given, ctx)
            print("%-10d %10.2e %10.2e %10.2e %10.2e" % (
                i, (exact - given).abs().max(), (y1 - y2).abs().max(),
                (at1 - at2).abs().max(), (ff1 - ff2).abs().max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
