#!/usr/bin/python3
"""Streaming parity of the C encoder with the PyTorch reference on a trained model.

    check_parity.py --test DIR [--count 50] [--condition clean|snr20]
                    [--model models/default.safetensors]
                    [--aural build/tools/aural] [--tol 1e-4]
                    [--precision f32|bf16]

For the first --count held-out utterances of each group of DIR (written by
`synth.py test`; --count 300 takes them all), clean or with noise at 20 dB
SNR, converted to 16 kHz by sox so that no resampling happens in either
path:

1. `aural encode --output features` gives the C log-mel features, and
   `aural encode --output embeddings|logits --chunk-frames 50` the C
   encoder's outputs (after the final norm, and the CTC head's logits),
   computed as a stream in 50-frame chunks;
2. the reference (tools/reference/aural_ref.py, weights as stored in the file
   upcast to float64) runs the whole-signal forward on the C features;
3. the script prints max |C - reference| of the embeddings and the logits
   per utterance, and of the features against aural_ref.fbank, and exits 1
   if either output differs by more than --tol anywhere.

For scale it also prints how far the same reference run in float32 (the
same weights, PyTorch's own kernels) lands from the float64 one: that is
the rounding floor of single precision for the model, which grows as a
trained model's activations and head weights grow.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import aural_ref  # noqa: E402
import evaluate  # noqa: E402
import export  # noqa: E402


def run_c(aural, model, wav, kind, out, precision="f32"):
    subprocess.run([aural, "encode", "-q", "-m", model, "--output", kind,
                    "--chunk-frames", "50", "--precision", precision, "-o", out, wav],
                   check=True)
    return np.load(out)


def to_16k_wav(src, wav):
    """Any file sox reads -> mono 16-bit 16 kHz WAV, without dither."""
    subprocess.run(["sox", "-q", "-D", src, "-c", "1", "-r", "16000", "-b", "16", wav,
                    "rate", "-v"], check=True)


def read_wav16(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", required=True)
    ap.add_argument("--count", type=int, default=50, help="utterances per group")
    ap.add_argument("--condition", choices=("clean", "snr20"), default="clean")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--aural", default=os.path.join(ROOT, "build", "tools", "aural"))
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="the C encoder's --precision (bf16 is approximate: its "
                         "README states its error on the bundled model)")
    args = ap.parse_args()

    model = export.load(args.model).double()
    model32 = export.load(args.model).float()
    cfg = model.config
    refs = evaluate.read_refs(args.test)
    picked = []
    for group in ("seen", "unseen"):
        picked += [r for r in refs if r["group"] == group][:args.count]
    worst_emb = worst_logits = worst_feats = worst32 = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for r in picked:
            src = os.path.join(args.test, r["group"], args.condition, r["file"])
            wav = os.path.join(tmp, "in.wav")
            to_16k_wav(src, wav)
            feats = run_c(args.aural, args.model, wav, "features", os.path.join(tmp, "f.npy"))
            emb = run_c(args.aural, args.model, wav, "embeddings", os.path.join(tmp, "e.npy"),
                        args.precision)
            logits = run_c(args.aural, args.model, wav, "logits", os.path.join(tmp, "l.npy"),
                           args.precision)
            with torch.no_grad():
                want_emb, want = model(torch.from_numpy(feats).double())
                _, want32 = model32(torch.from_numpy(feats).float())
            d_emb = float(np.abs(emb.astype(np.float64) - want_emb.numpy()).max())
            d_logits = float(np.abs(logits.astype(np.float64) - want.numpy()).max())
            d32 = float(np.abs(want32.double().numpy() - want.numpy()).max())
            worst32 = max(worst32, d32)
            torch_feats = aural_ref.fbank(read_wav16(wav).astype(np.float64) / 32768.0, cfg)
            d_feats = float(np.abs(feats - torch_feats.numpy()).max())
            worst_emb = max(worst_emb, d_emb)
            worst_logits = max(worst_logits, d_logits)
            worst_feats = max(worst_feats, d_feats)
            print("%s/%s %-16s %5d frames: max |C - ref| embeddings %.2e, logits %.2e "
                  "(PyTorch float32 %.2e), features %.2e" % (
                      r["group"], r["file"], r["voice"], len(feats), d_emb, d_logits, d32,
                      d_feats))
    ok = max(worst_emb, worst_logits) <= args.tol
    print("max abs diff: embeddings %.2e, logits %.2e (limit %.0e, %s; PyTorch float32 "
          "logits %.2e), features %.2e" % (worst_emb, worst_logits, args.tol,
                                          "ok" if ok else "FAILED", worst32, worst_feats))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
