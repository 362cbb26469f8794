#!/usr/bin/python3
"""Golden data of the bundled model's streaming parity test (tests/data/default).

    gen_default_goldens.py [--model models/default.safetensors]
                           [--out tests/data/default] [--utterance TEST_WAV ...]

Input: the bundled recording (models/sample.flac), and any held-out
utterances given with --utterance (files written by
`tools/train/synth.py test`), each converted to 16 kHz by sox and
computed one after another as separate streams. Writes:

  input.npy    float32 [T, 80]: Kaldi fbank features (aural_ref.fbank, in
               float64, stored as float32) of every input, concatenated
  spans.txt    one line per input: NAME FIRST_ROW N_FRAMES
  emb.npy      float32 [T, d_model]: the reference forward (weights as
               stored in the file, upcast to float64) of each input's
               features, after the final norm
  logits.npy   float32 [T, V]: the CTC head's raw outputs, likewise
  README.md    how the data was made

tests/test_encoder.c runs the C encoder over each span as a fresh stream in
50-frame chunks and frame by frame and requires both outputs within 1e-4
(DESIGN.md §2). The features come from the reference frontend, so the test
measures the encoder alone; the C frontend has its own goldens.
"""

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np
import torch
import torchaudio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import aural_ref  # noqa: E402
import check_parity  # noqa: E402
import export  # noqa: E402

README = """# Golden data of the bundled model

Made by `tools/reference/gen_default_goldens.py` from the PyTorch reference
`tools/reference/aural_ref.py` (torch {torch}, torchaudio {torchaudio}) and
`models/default.safetensors`, sha256
{sha}.
Regenerate from the repository root, after a new default model, with

    /usr/bin/python3 tools/reference/gen_default_goldens.py{utt_args}

- `input.npy`: float32 [{t}, {mels}], Kaldi fbank features (before CMVN) of
  the inputs below, each converted to 16 kHz mono 16-bit by sox, computed in
  float64 by `aural_ref.fbank` and stored as float32.
- `spans.txt`: `NAME FIRST_ROW N_FRAMES` per input; each is a stream of its
  own, starting at frame 0.
- `emb.npy`: float32 [{t}, {d}], the reference forward in float64 (the
  file's weights upcast) of each span's float32 features: the encoder's
  output after the final norm.
- `logits.npy`: float32 [{t}, {v}], the CTC head's raw outputs.

Inputs:
{inputs}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "default"))
    ap.add_argument("--utterance", action="append", default=[],
                    help="a held-out utterance (WAV from synth.py test) to add")
    args = ap.parse_args()

    model = export.load(args.model).double()
    cfg = model.config
    inputs = [("sample.flac", os.path.join(ROOT, "models", "sample.flac"))]
    for path in args.utterance:
        parts = os.path.normpath(path).split(os.sep)
        inputs.append(("/".join(parts[-3:]), path))  # group/condition/file
    feats, embs, logits, spans = [], [], [], []
    row = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in inputs:
            wav = os.path.join(tmp, "in.wav")
            check_parity.to_16k_wav(path, wav)
            pcm = check_parity.read_wav16(wav).astype(np.float64) / 32768.0
            f32 = aural_ref.fbank(pcm, cfg).numpy().astype(np.float32)
            with torch.no_grad():
                emb, lg = model(torch.from_numpy(f32).double())
            feats.append(f32)
            embs.append(emb.numpy().astype(np.float32))
            logits.append(lg.numpy().astype(np.float32))
            spans.append((name, row, len(f32)))
            row += len(f32)
            print("%-32s %5d frames, largest |logit| %.2f" % (name, len(f32),
                                                              float(lg.abs().max())))
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "input.npy"), np.concatenate(feats))
    np.save(os.path.join(args.out, "emb.npy"), np.concatenate(embs))
    np.save(os.path.join(args.out, "logits.npy"), np.concatenate(logits))
    with open(os.path.join(args.out, "spans.txt"), "w", encoding="utf-8") as f:
        for name, first, n in spans:
            f.write("%s %d %d\n" % (name, first, n))
    with open(args.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    utt_args = "".join(" \\\n        --utterance DIR/%s" % name for name, _ in inputs[1:])
    if len(inputs) > 1:
        utt_args += ("\n\nwhere DIR is the held-out test set of the model card,\n"
                     "`tools/train/synth.py test --out DIR --count 300 --seed 1`.")
    listing = "\n".join("- `%s`: %d frames" % (name, n) for name, _, n in spans)
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README.format(torch=torch.__version__, torchaudio=torchaudio.__version__,
                              sha=sha, utt_args=utt_args, t=row, mels=cfg["num_mel_bins"],
                              d=cfg["d_model"], v=len(cfg["vocab"]), inputs=listing))
    print("wrote %s: %d frames in %d streams" % (args.out, row, len(spans)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
