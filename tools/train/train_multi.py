#!/usr/bin/python3
"""Trains the default model on speech of several engines, in the conditions
a microphone meets, synthesized while it trains.

    train_multi.py --init MODEL --out DIR [--minutes M] [--workers N] [--device D]

Worker processes draw utterances (engines.random_spec: espeak-ng, flite and
festival, training voices only, training sentences only), synthesize them,
pass 6% through a GSM codec, and make --variants augmented copies of each
(augment.augment: rooms, babble from the worker's recent utterances, noise,
telephone channels, coloration, level, DC, clipping, noise-only stretches),
returning their fbank features and ARPAbet labels. The main process keeps
every example it has received and trains on random batches of them, so
early examples are seen more often than late ones; the learning rate
follows a cosine over the wall-clock budget (--minutes), since how many
steps fit depends on the machine.

The model starts from --init (an espeak-mnemonic model): the encoder and
CMVN are kept, and the CTC head gets one row per ARPAbet phone: the mean of
the weight rows, and the largest bias, of the mnemonics that map to that
phone alone (arpabet.py).
Training is as train.py's last stage: CTC, AdamW, bfloat16 products, logits
held within +-4, and on every other step the penalty on how much the last
three layers amplify a small error of their input (train.py --probe).

DIR gets model.safetensors (F16, exported every --export-minutes and at the
end) and log.jsonl. Not bit-reproducible: which worker's recent utterances
make the babble depends on timing. The dev PER it logs is of utterances
never trained on, but in training voices and with training sentences (a
progress signal, not a test). Every example is kept in memory (about 50 KB
each as float16): a run of many hours wants more memory than this
script's other needs.
"""

import argparse
import itertools
import json
import math
import os
import sys
import threading
import time
from multiprocessing import get_context

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import arpabet  # noqa: E402
import augment  # noqa: E402
import corpus  # noqa: E402
import engines  # noqa: E402
import export  # noqa: E402
import phonemes  # noqa: E402
import train  # noqa: E402

GSM_SHARE = 0.06
DEV_FIRST = 1 << 40  # indices of the monitoring utterances (never trained on)

_W = {}


def _init_worker(seed, sentences, words, variants):
    torch.set_num_threads(1)
    # Where cores are few, the training step waits for no one: synthesis
    # makes more examples than a CPU trains on, so it yields first.
    os.nice(5)
    _W.update(seed=seed, sentences=sentences, words=words, variants=variants,
              recent=[], fbank=augment.Fbank("cpu"), index=phonemes_index())


def phonemes_index():
    return {p: k for k, p in enumerate(arpabet.VOCAB)}


def make_examples(i):
    """Utterance i: (engine, voice, [(fp16 feats [T, 80], int16 labels), ...])
    or (None, error text, [])."""
    w = _W
    rng = np.random.default_rng([w["seed"], i])
    spec = engines.random_spec(rng, w["sentences"], w["words"], train=True)
    try:
        x, phones = engines.synthesize(spec)
        if rng.random() < GSM_SHARE:
            x = engines.gsm_channel(x)
    except Exception as e:  # one bad utterance must not stop the run
        return None, "%s %s: %s" % (spec["engine"], spec["voice"], e), []
    labels = np.array([w["index"][p] for p in phones], dtype=np.int16)
    x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    recent = w["recent"]
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
    out = []
    for _ in range(w["variants"] if i < DEV_FIRST else 1):
        def others(k):
            if not recent:
                return [x] * k
            return [recent[j] for j in rng.integers(len(recent), size=k)]
        def rir():
            return torch.from_numpy(augment.make_rir(rng)[0])
        y, keep = augment.augment(x, rng, gen, rir, others)
        feats = w["fbank"](y[None])[0]
        if feats.shape[0] < 4:
            continue
        out.append((feats.half().numpy(), labels if keep else labels[:0]))
    recent.append(x)
    del recent[:-40]
    return spec["engine"], spec["voice"], out


class Store:
    """Every example received, appended by a reader thread."""

    def __init__(self):
        self.feats, self.labels, self.engines = [], [], []
        self.errors, self.utterances = 0, 0
        self.lock = threading.Lock()

    def add(self, result):
        engine, voice, examples = result
        with self.lock:
            if engine is None:
                self.errors += 1
                if self.errors <= 5:
                    print("synthesis failed: %s" % voice, flush=True)
                return
            self.utterances += 1
            for f, lab in examples:
                self.feats.append(f)
                self.labels.append(lab)
                self.engines.append(engine)

    def __len__(self):
        return len(self.feats)


def head_from_espeak(model):
    """Replaces the CTC head of an espeak-mnemonic model with ARPAbet rows."""
    old = model.config["vocab"]
    rows = {p: [] for p in arpabet.PHONES}
    m = arpabet.espeak_token_map("en-us")
    for k, t in enumerate(old):
        if t in m and len(m[t]) == 1:
            rows[m[t][0]].append(k)
    head = torch.nn.Linear(model.head.in_features, len(arpabet.VOCAB))
    with torch.no_grad():
        head.weight[0] = model.head.weight[0]
        head.bias[0] = model.head.bias[0]
        for k, p in enumerate(arpabet.PHONES, 1):
            ids = rows[p] or [int(torch.argmax(model.head.bias[1:])) + 1]
            head.weight[k] = model.head.weight[ids].mean(0)
            head.bias[k] = model.head.bias[ids].max()
    model.head = head
    model.vocab = list(arpabet.VOCAB)
    model.config["vocab"] = list(arpabet.VOCAB)


def grow_layers(model, count):
    """Makes a Pre-LN encoder deeper by `count` layers without changing what
    it computes: each new layer is a copy of the layer before it with its
    two output projections (attention out_proj, linear2) zeroed, so that it
    adds nothing to the residual stream until training moves those. The new
    layers are spread evenly: one after every (n_layers / count)-th layer.
    Checked on a random input: the logits before and after are equal."""
    import copy
    layers = list(model.encoder.layers)
    n = len(layers)
    if not model.config["norm_first"]:
        raise SystemExit("--grow-layers: only a Pre-LN model (norm_first) keeps its "
                         "function when a layer with zero outputs is added")
    if not 1 <= count <= n:
        raise SystemExit("--grow-layers: between 1 and %d for a %d-layer model" % (n, n))
    after = {(j + 1) * n // count - 1 for j in range(count)}
    probe = torch.randn(2 * model.window, model.config["num_mel_bins"],
                        generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, before = model(probe)
    grown = []
    for i, layer in enumerate(layers):
        grown.append(layer)
        if i in after:
            new = copy.deepcopy(layer)
            with torch.no_grad():
                for p in (new.self_attn.out_proj.weight, new.self_attn.out_proj.bias,
                          new.linear2.weight, new.linear2.bias):
                    p.zero_()
            grown.append(new)
    model.encoder.layers = torch.nn.ModuleList(grown)
    model.config["n_layers"] = len(grown)
    with torch.no_grad():
        _, now = model(probe)
    if not torch.equal(before, now):
        raise SystemExit("--grow-layers: the grown model computes something else")


def spec_augment(x, lengths, gen):
    """In place on x [B, T, F]: two frequency masks of up to 12 bins and one
    time mask of up to 25 frames per 2 s (train.py's, on the device)."""
    b, t, n_bins = x.shape
    dev = x.device
    f = torch.arange(n_bins, device=dev)[None, :]
    mask_f = torch.zeros(b, n_bins, dtype=torch.bool, device=dev)
    for _ in range(2):
        w = torch.randint(0, 13, (b, 1), generator=gen, device="cpu").to(dev)
        f0 = (torch.rand(b, 1, generator=gen).to(dev) * (n_bins - w + 1)).long()
        mask_f |= (f >= f0) & (f < f0 + w)
    tt = torch.arange(t, device=dev)[None, :]
    mask_t = torch.zeros(b, t, dtype=torch.bool, device=dev)
    # Each utterance gets max(1, its frames // 200) masks, as in train.py.
    n_masks = (lengths // 200).clamp(min=1)[:, None]
    for m in range(max(1, t // 200)):
        w = torch.randint(0, 26, (b, 1), generator=gen).to(dev)
        t0 = (torch.rand(b, 1, generator=gen).to(dev) * (lengths[:, None] - w).clamp(min=1)).long()
        mask_t |= (tt >= t0) & (tt < t0 + w) & (m < n_masks)
    x.masked_fill_(mask_f[:, None, :] | mask_t[:, :, None], 0.0)


def draw_batch(store, rng, max_frames):
    """Random examples while the padded batch stays within max_frames."""
    n = len(store)
    idx, longest = [], 0
    with store.lock:
        for i in rng.integers(n, size=512):
            t = len(store.feats[i])
            if idx and max(longest, t) * (len(idx) + 1) > max_frames:
                break
            idx.append(int(i))
            longest = max(longest, t)
    return idx


def make_batch(store, idx, mean, std, dev):
    with store.lock:
        feats = [store.feats[i] for i in idx]
        labs = [store.labels[i] for i in idx]
    lengths = torch.tensor([len(f) for f in feats])
    x = torch.zeros(len(idx), int(lengths.max()), feats[0].shape[1], dtype=torch.float16)
    for k, f in enumerate(feats):
        x[k, :len(f)] = torch.from_numpy(f)
    x = (x.to(dev, non_blocking=True).float() - mean) / std
    targets = torch.from_numpy(np.concatenate(labs).astype(np.int64))
    return x, lengths.to(dev), targets.to(dev), torch.tensor([len(l) for l in labs]).to(dev)


def cpu_has_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def greedy_per(model, store, idx, mean, std, dev):
    errors = total = 0
    with torch.no_grad():
        for k in range(0, len(idx), 32):
            x, lengths, targets, tl = make_batch(store, idx[k:k + 32], mean, std, dev)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                logits = train.train_forward(model, x).float()
            best = logits.argmax(-1).cpu().numpy()
            off = 0
            for j in range(len(best)):
                ids = best[j, :int(lengths[j])]
                hyp = [int(t) for n, t in enumerate(ids) if t != 0 and (n == 0 or t != ids[n - 1])]
                ref = targets[off:off + int(tl[j])].tolist()
                off += int(tl[j])
                errors += phonemes.edit_distance(ref, hyp)
                total += len(ref)
    return errors / max(total, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init", default="models/default.safetensors", help="model to start from (espeak or ARPAbet vocab)")
    ap.add_argument("--out", default=None, help="output directory")
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock budget, all in")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--variants", type=int, default=3, help="augmented copies per utterance")
    ap.add_argument("--batch-frames", type=int, default=40000)
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--warmup-minutes", type=float, default=0.3)
    ap.add_argument("--min-examples", type=int, default=2000,
                    help="examples to wait for before the first step")
    ap.add_argument("--dev", type=int, default=200, help="monitoring utterances")
    ap.add_argument("--export-minutes", type=float, default=2.0)
    ap.add_argument("--text", default=None,
                    help="JSON of the training sentences and words (written by --write-text), "
                    "for a machine without the fortune and word-list packages")
    ap.add_argument("--write-text", default=None, help="write that JSON here and exit")
    ap.add_argument("--log-seconds", type=float, default=None,
                    help="progress (with the dev PER) this often (default 30 on a GPU, 300 "
                    "on a CPU)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                    help="bfloat16 matrix products (default: on a GPU, or a CPU with "
                    "AMX or AVX512-BF16; elsewhere they are slower than float32)")
    ap.add_argument("--grow-layers", type=int, default=0,
                    help="make the --init model deeper by this many layers, each added "
                    "as an identity (grow_layers), before training")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.write_text:
        sentences, _ = corpus.split_sentences()
        with open(args.write_text, "w") as f:
            json.dump(dict(sentences=sentences, words=corpus.dictionary_words()), f)
        return 0

    if not args.out:
        ap.error("--out is required")
    t0 = time.time()
    deadline = t0 + args.minutes * 60
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if args.bf16 is None:
        args.bf16 = dev.type == "cuda" or cpu_has_bf16()
    if args.log_seconds is None:
        args.log_seconds = 30.0 if dev.type == "cuda" else 300.0
    os.makedirs(args.out, exist_ok=True)
    out_model = os.path.join(args.out, "model.safetensors")
    logf = open(os.path.join(args.out, "log.jsonl"), "a")

    def log(rec):
        rec["minutes"] = round((time.time() - t0) / 60, 3)
        print(json.dumps(rec), flush=True)
        logf.write(json.dumps(rec) + "\n")
        logf.flush()

    if args.text:
        with open(args.text) as f:
            text = json.load(f)
        sentences, words = text["sentences"], text["words"]
    else:
        sentences, _ = corpus.split_sentences()
        words = corpus.dictionary_words()
    ctx = get_context("fork")
    pool = ctx.Pool(args.workers, _init_worker, (args.seed, sentences, words, args.variants))
    dev_store = Store()
    for r in pool.imap_unordered(make_examples, range(DEV_FIRST, DEV_FIRST + args.dev)):
        dev_store.add(r)
    store = Store()
    stop = threading.Event()

    def reader():
        for r in pool.imap_unordered(make_examples, itertools.count(), chunksize=2):
            store.add(r)
            if stop.is_set():
                break
    threading.Thread(target=reader, daemon=True).start()

    model = export.load(args.init)
    if model.config.get("vocab") != arpabet.VOCAB:
        head_from_espeak(model)
    if args.grow_layers:
        grow_layers(model, args.grow_layers)
    # The training forward must be the reference forward: checked before
    # the budget is spent as well as after (a model with a lead-in once
    # failed this only at the end), on the longest monitoring utterance
    # (dev_store is complete: only store grows from here).
    if len(dev_store) == 0:
        raise SystemExit("no monitoring utterance could be synthesized")
    longest = max(dev_store.feats, key=len).astype(np.float32)
    train.check_against_reference(model, longest, 1e-4)
    mean = model.frontend.cmvn.mean.float().to(dev)
    std = model.frontend.cmvn.std.float().to(dev)
    model.to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.01},
                             {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    dev_idx = list(range(len(dev_store)))
    log(dict(event="start", dev_examples=len(dev_store), workers=args.workers,
             device=str(dev), dev_per=greedy_per(model, dev_store, dev_idx, mean, std, dev)))
    while len(store) < args.min_examples and time.time() < deadline - 60:
        time.sleep(1)
        if store.errors >= 50 and store.errors > 5 * store.utterances:
            raise SystemExit("synthesis fails: %d errors, %d utterances" % (
                store.errors, store.utterances))
    train_start = time.time()
    budget = deadline - 30 - train_start
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    step, next_export = 0, time.time() + args.export_minutes * 60
    next_log = last_log = time.time() + 0.0
    next_log += args.log_seconds
    acc = dict(loss=0.0, excess=0.0, gain=0.0, n=0, frames=0)
    model.train()
    while time.time() < deadline - 30:
        frac = (time.time() - train_start) / budget
        warm = args.warmup_minutes * 60 / budget
        lr = args.lr * (min(1.0, frac / warm) if frac < warm else
                        0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, (frac - warm) / (1 - warm)))))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = draw_batch(store, rng, args.batch_frames)
        x, lengths, targets, tl = make_batch(store, idx, mean, std, dev)
        spec_augment(x, lengths, gen)
        probing = step % 2 == 0
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            if probing:
                logits, shift = train.train_forward(model, x, 0.01, 3)
                shift = shift.float()
            else:
                logits = train.train_forward(model, x)
            logits = logits.float()
        logp = F.log_softmax(logits, dim=-1).transpose(0, 1)
        loss = F.ctc_loss(logp, targets, lengths, tl, blank=0, reduction="mean",
                          zero_infinity=True)
        excess = train.logit_excess(logits, lengths, 4.0)
        total = loss + 0.05 * excess
        if probing:
            per_frame = shift.pow(2).mean(-1)
            gain = train.frame_mean(per_frame.pow(4.0), lengths) ** 0.25
            total = total + 2 * 0.001 * gain
            acc["gain"] += gain.item()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        step += 1
        acc["loss"] += loss.item()
        acc["excess"] += excess.item()
        acc["n"] += 1
        acc["frames"] += int(lengths.sum())
        now = time.time()
        if now >= next_log:
            next_log = now + args.log_seconds
            rec = dict(step=step, lr=lr, loss=acc["loss"] / acc["n"],
                       logit_excess=acc["excess"] / acc["n"],
                       probe_gain=acc["gain"] / max(1, acc["n"] // 2),
                       frames_per_s=acc["frames"] / (now - last_log), examples=len(store),
                       utterances=store.utterances, synth_errors=store.errors)
            model.eval()
            rec["dev_per"] = greedy_per(model, dev_store, dev_idx, mean, std, dev)
            model.train()
            log(rec)
            acc = dict(loss=0.0, excess=0.0, gain=0.0, n=0, frames=0)
            last_log = time.time()
        if now >= next_export:
            next_export = now + args.export_minutes * 60
            export.export(model_cpu(model), model.config, out_model, dtype="F16")
    stop.set()
    pool.terminate()
    model.eval()
    cpu = model_cpu(model)
    size = export.export(cpu, model.config, out_model, dtype="F16")
    log(dict(event="end", steps=step, examples=len(store), utterances=store.utterances,
             synth_errors=store.errors, bytes=size,
             engines={e: store.engines.count(e) for e in engines.ENGINE_WEIGHTS},
             dev_per=greedy_per(model, dev_store, dev_idx, mean, std, dev)))
    # The float32 training forward must still be the reference forward.
    train.check_against_reference(cpu, longest, 1e-4)
    return 0


def model_cpu(model):
    import copy
    return copy.deepcopy(model).to("cpu").float()


if __name__ == "__main__":
    sys.exit(main())
