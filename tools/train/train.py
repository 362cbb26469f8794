#!/usr/bin/python3
"""Trains the default model (CTC phoneme recognition) and exports it.

    train.py --data DIR --out MODEL.safetensors [--steps N] [--seed S]

Reads the shards written by `synth.py train`, builds the phoneme vocabulary
(index 0 = blank) from their labels, computes the global CMVN statistics from
the training features, trains aural_ref.AuralEncoder with CTC and writes the
model with tools/reference/export.py (F16 weights).

The module trained is the reference module itself, so the tensor names and
the config are those the C encoder reads. Only the forward pass used for
training is different, for speed, and it is checked against the reference
forward before training starts and after it ends:

* a batch of padded utterances at once, and the sliding window in block
  form: frames are cut into blocks of W, and each block attends to itself and
  the previous block under the band mask, which is exactly the window "frame
  t sees t-W+1 .. t" at a cost linear in T;
* matrix products in bfloat16 (CPU autocast; the weights, the optimizer and
  everything else stay float32).

Regularization is SpecAugment (time and frequency masks) on top of the audio
augmentation of synth.py; there is no dropout. --logit-bound B adds a
penalty on CTC logits beyond +-B (mean of relu(|z| - B)^2 over real frames
and tokens, times --logit-penalty): greedy decoding needs only the argmax,
while logits that reach +-30 multiply the float32 rounding of everything
before the head into the C encoder's outputs.

--probe E adds a penalty on how much the last --probe-layers layers, the
final norm and the head amplify a small error of their input, which is what
float32 rounding in the C encoder is (a trained model's last layers amplify
it the most). The residual stream entering those layers gets Gaussian noise
of E times each frame's RMS, the layers run a second time on it, and the
penalty is the mean squared logit shift divided by E^2, times
--probe-penalty. With --probe-every N only every Nth step pays the second
run, with N times the weight. As a plain mean over frames it lowers the
typical frame's amplification much more than the worst frame's, which is
what sets the largest C difference (models/README.md, stage 10);
--probe-power P averages the frames' mean squared shifts as a power mean
of order P instead, so that the worst frames dominate.

--average-from S keeps the running mean of the weights over every step from
S on. At the end the model exported is that mean, unless the last step's
weights decode the dev set better (both rates are logged).

The first steps see only short utterances (a curriculum that shortens CTC's
initial all-blank phase). Everything random is drawn from generators seeded
with --seed.
"""

import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import aural_ref  # noqa: E402
import export  # noqa: E402
import phonemes  # noqa: E402

MODEL_CONFIG = dict(d_model=192, n_heads=4, n_layers=8, d_ff=768, activation="gelu",
                    norm_first=True, layer_norm_eps=1e-5, window=50,
                    pos_encoding="rope", rope_theta=10000.0, final_norm=True)
N_DEV = 300  # utterances at the end of the last shard, kept out of training


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

class Corpus:
    """All utterances of a shard directory in memory: float16 features and
    token id sequences."""

    def __init__(self, data_dir):
        feats, lengths, labels, voices = [], [], [], []
        for path in sorted(glob.glob(os.path.join(data_dir, "shard-*.npz"))):
            d = np.load(path)
            if "voices" not in d:
                raise SystemExit("%s has no voices: made by an older synth.py" % path)
            feats.append(d["feats"])
            lengths.append(d["lengths"])
            labels += [str(s) for s in d["labels"]]
            voices += [str(v) for v in d["voices"]]
        self.feats = np.concatenate(feats)
        self.lengths = np.concatenate(lengths).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        self.tokens = [phonemes.canonical(s.split(), v) for s, v in zip(labels, voices)]

    def __len__(self):
        return len(self.lengths)

    def utterance(self, i):
        o = self.offsets[i]
        return self.feats[o:o + self.lengths[i]]


def cmvn_stats(corpus, indices):
    """Per-bin mean and std of the features of `indices`, in float64."""
    s = np.zeros(corpus.feats.shape[1])
    s2 = np.zeros(corpus.feats.shape[1])
    n = 0
    for i in indices:
        x = corpus.utterance(i).astype(np.float64)
        s += x.sum(0)
        s2 += (x * x).sum(0)
        n += len(x)
    mean = s / n
    return mean, np.sqrt(np.maximum(s2 / n - mean * mean, 1e-8))


def make_batches(lengths, indices, max_frames, rng, sort_all=False):
    """Lists of utterance indices of similar length, each with at most
    max_frames frames after padding, in random order (or shortest first)."""
    order = indices[np.argsort(lengths[indices] + rng.random(len(indices)), kind="stable")]
    batches, cur, cur_max = [], [], 0
    for i in order:
        m = max(cur_max, lengths[i])
        if cur and m * (len(cur) + 1) > max_frames:
            batches.append(cur)
            cur, m = [], lengths[i]
        cur.append(i)
        cur_max = m
    if cur:
        batches.append(cur)
    if not sort_all:
        batches = [batches[k] for k in rng.permutation(len(batches))]
    return batches


def spec_augment(x, lengths, rng):
    """In place on x [B, T, F] (already normalized): two frequency masks of up
    to 12 bins and one time mask of up to 25 frames per 2 s of speech."""
    b, _, n_bins = x.shape
    for k in range(b):
        for _ in range(2):
            w = rng.integers(0, 13)
            f0 = rng.integers(0, n_bins - w + 1)
            x[k, :, f0:f0 + w] = 0.0
        n = int(lengths[k])
        for _ in range(max(1, n // 200)):
            w = rng.integers(0, 26)
            t0 = rng.integers(0, max(1, n - w))
            x[k, t0:t0 + w, :] = 0.0


def collate(corpus, batch, vocab_index, mean, std, rng, augment):
    lengths = corpus.lengths[batch]
    t_max = int(lengths.max())
    x = np.zeros((len(batch), t_max, corpus.feats.shape[1]), dtype=np.float32)
    for k, i in enumerate(batch):
        x[k, :lengths[k]] = (corpus.utterance(i).astype(np.float32) - mean) / std
    if augment:
        spec_augment(x, lengths, rng)
    targets = [vocab_index[t] for i in batch for t in corpus.tokens[i]]
    target_lengths = [len(corpus.tokens[i]) for i in batch]
    return (torch.from_numpy(x), torch.from_numpy(lengths),
            torch.tensor(targets, dtype=torch.long), torch.tensor(target_lengths))


# ---------------------------------------------------------------------------
# Batched block-window forward of aural_ref.AuralEncoder (rope, pre-LN)
# ---------------------------------------------------------------------------

def swap_pairs(w):
    """Rows (2i, 2i+1) of w -> (-row 2i+1, row 2i): x @ swap_pairs(W).T is
    the pair-swapped, half-negated x @ W.T that RoPE needs, from the same
    matrix product as q and k."""
    pairs = w.reshape(w.shape[0] // 2, 2, *w.shape[1:])
    return torch.stack((-pairs[:, 1], pairs[:, 0]), 1).reshape(w.shape)


def block_attention(q, k, v, window, bias):
    """Causal sliding-window attention in blocks of `window` frames.
    q, k, v [B, H, T, hs] with T a multiple of window, q already scaled;
    bias [nb, W, 2W] is 0 where a query may see a key and -inf elsewhere."""
    bsz, h, t, hs = q.shape
    nb = t // window
    qb = q.reshape(bsz, h, nb, window, hs)
    kb = k.reshape(bsz, h, nb, window, hs)
    vb = v.reshape(bsz, h, nb, window, hs)
    pad = torch.zeros_like(kb[:, :, :1])
    k2 = torch.cat((torch.cat((pad, kb[:, :, :-1]), 2), kb), 3)  # [B,H,nb,2W,hs]
    v2 = torch.cat((torch.cat((pad, vb[:, :, :-1]), 2), vb), 3)
    scores = torch.add(bias, torch.matmul(qb, k2.transpose(-1, -2)))  # float32
    probs = torch.softmax(scores, dim=-1).to(v2.dtype)
    o = torch.matmul(probs, v2)  # [B,H,nb,W,hs]
    return o.reshape(bsz, h, t, hs)


def window_bias(nb, window):
    """[nb, W, 2W]: key j of block b's [previous block, block] is visible to
    query i when it lies in i's window (none of block -1)."""
    i = torch.arange(window)[:, None]
    j = torch.arange(2 * window)[None, :]
    allowed = (j >= i + 1) & (j <= i + window)  # key j sits at block offset j - W
    mask = allowed.expand(nb, window, 2 * window).clone()
    mask[0] &= j >= window
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))


def train_forward(model, x, probe=0.0, probe_layers=2):
    """x [B, T, n_mels] normalized features (CMVN already applied) ->
    logits [B, T, V]. Same function as model.forward for every sequence.

    Per layer one matrix product gives q, k, v and the pair-swapped q and k,
    so that RoPE is q * cos + q_swapped * sin with no reshuffling; the
    attention scale is folded into q.

    With probe > 0 it returns (logits, shift) instead: shift [B, T, V] is how
    far the logits move, divided by probe, when the residual stream entering
    the last probe_layers layers gets Gaussian noise of probe times each
    frame's RMS, the same layers run again on it. That is a sample of how much
    those layers, the final norm and the head amplify a small relative error
    of their input, which float32 rounding in the C encoder is."""
    cfg = model.config
    window, h, hs = cfg["window"], model.n_heads, model.head_size
    bsz, t, _ = x.shape
    t_pad = -(-t // window) * window
    x = F.pad(x, (0, 0, 0, t_pad - t))
    cos, sin = aural_ref.rope_tables(0, t_pad, hs, cfg["rope_theta"])
    # [T, d]: each pair's angle on both of its lanes, every head alike.
    cos = cos.repeat_interleave(2, dim=1).repeat(1, h).to(x.device)
    sin = sin.repeat_interleave(2, dim=1).repeat(1, h).to(x.device)
    ctx = (cos, sin, window_bias(t_pad // window, window).to(x.device), 1.0 / math.sqrt(hs))
    y = model.input_proj(x).float()  # residual stream stays float32
    layers = model.encoder.layers
    split = len(layers) - probe_layers if probe else len(layers)
    for layer in layers[:split]:
        y = train_layer(layer, y, ctx, h)
    logits = train_top(model, layers[split:], y, ctx, h)[:, :t]
    if not probe:
        return logits
    rms = y.detach().pow(2).mean(-1, keepdim=True).sqrt()
    noisy = y + probe * rms * torch.randn_like(y)
    shifted = train_top(model, layers[split:], noisy, ctx, h)[:, :t]
    return logits, (shifted - logits) / probe


def train_layer(layer, y, ctx, h):
    """One pre-norm layer of train_forward on the residual stream y [B, T, d]."""
    cos, sin, bias, scale = ctx
    bsz, t_pad, d = y.shape
    a = layer.norm1(y)
    w, b = layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias
    w5 = torch.cat((w, swap_pairs(w[:2 * d])))
    b5 = torch.cat((b, swap_pairs(b[:2 * d])))
    qkv = F.linear(a, w5, b5)
    q, k, v, qs, ks = qkv.split(d, -1)
    c, s_ = cos.to(q.dtype), sin.to(q.dtype)
    q = torch.addcmul(q * c, qs, s_) * scale
    k = torch.addcmul(k * c, ks, s_)
    q, k, v = (z.reshape(bsz, t_pad, h, d // h).transpose(1, 2) for z in (q, k, v))
    o = block_attention(q, k, v, bias.shape[1], bias).transpose(1, 2).reshape(bsz, t_pad, d)
    y = y + layer.self_attn.out_proj(o).float()
    return y + layer.linear2(F.gelu(layer.linear1(layer.norm2(y)))).float()


def train_top(model, layers, y, ctx, h):
    """The given (last) layers, the final norm and the head."""
    for layer in layers:
        y = train_layer(layer, y, ctx, h)
    return model.head(model.encoder.norm(y))


def set_weights(params, values):
    """Copies values (tensors of the same shapes) into the parameters."""
    with torch.no_grad():
        for p, v in zip(params, values):
            p.copy_(v)


def check_against_reference(model, feats, tol):
    """The training forward equals aural_ref's forward (float32, no autocast)
    within tol times the largest logit (rounding grows with the logits of a
    trained model; a wrong forward is off by far more). A model with a
    lead-in (config lead_in_frames) gets its silent frames before feats in
    both forwards, as aural_ref's does by itself; training never adds
    them."""
    lead = model.lead_in
    with torch.no_grad():
        f = torch.from_numpy(feats.astype(np.float32))
        _, want = model(f)
        if lead:
            f = torch.cat((aural_ref.silence_features(model.config, lead).to(f.dtype), f))
        got = train_forward(model, model.frontend(f)[None])[0][lead:]
    diff = (got - want).abs().max().item()
    scale = max(1.0, want.abs().max().item())
    print("training forward vs reference: max abs diff %.2e (largest logit %.1f)"
          % (diff, scale), flush=True)
    if not diff <= tol * scale:
        raise SystemExit("training forward differs from the reference by %g" % diff)
    return diff


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------

def greedy_per(model, corpus, indices, mean, std, vocab):
    """Phoneme error rate of greedy CTC decoding with the reference forward."""
    errors = total = 0
    with torch.no_grad():
        for i in indices:
            x = torch.from_numpy((corpus.utterance(i).astype(np.float32) - mean) / std)[None]
            logits = train_forward(model, x)[0]
            ids, _ = aural_ref.ctc_greedy(logits)
            hyp = [vocab[j] for j in ids]
            errors += phonemes.edit_distance(corpus.tokens[i], hyp)
            total += len(corpus.tokens[i])
    return errors / max(total, 1)


def remap_head(model, vocab, path):
    """Gives `model` the CTC head of `vocab`, each token's row (and bias)
    taken from the row of the same name in the model's own vocab: training
    goes on from a model whose inventory had more (merged) tokens, or fewer
    (a larger corpus brings a rare phoneme). A token the model lacks starts
    with a zero row and the lowest bias of the old head, so that the model
    predicts it no more often than its rarest token until trained."""
    old = {t: k for k, t in enumerate(model.config["vocab"])}
    missing = [t for t in vocab if t not in old]
    head = torch.nn.Linear(model.head.in_features, len(vocab))
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(model.head.bias.min())
        for k, t in enumerate(vocab):
            if t in old:
                head.weight[k] = model.head.weight[old[t]]
                head.bias[k] = model.head.bias[old[t]]
    model.head = head
    model.vocab = list(vocab)
    model.config["vocab"] = list(vocab)
    print("head remapped from %s's %d tokens to %d%s" % (
        path, len(old), len(vocab), ", new: " + " ".join(missing) if missing else ""),
        flush=True)


def frame_mean(per_frame, lengths):
    """Mean of per_frame [B, T] over the real (unpadded) frames."""
    t = per_frame.shape[1]
    real = (torch.arange(t, device=per_frame.device)[None, :] < lengths[:, None]).to(per_frame.dtype)
    return (per_frame * real).sum() / real.sum()


def logit_excess(logits, lengths, bound):
    """Mean of relu(|z| - bound)^2 over the real frames of logits [B, T, V]
    and all tokens."""
    return frame_mean(F.relu(logits.abs() - bound).pow(2).mean(-1), lengths)


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * frac)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="directory of synth.py train shards")
    ap.add_argument("--out", required=True, help="output .safetensors")
    ap.add_argument("--steps", type=int, default=1100)
    ap.add_argument("--batch-frames", type=int, default=8000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--curriculum", type=int, default=150,
                    help="first steps on the shortest utterances")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="end (and export) after this many steps; the schedule still spans --steps")
    ap.add_argument("--init", default=None,
                    help="start from this model file instead of random weights (its head "
                    "rows are taken by token name when the vocab differs)")
    ap.add_argument("--logit-bound", type=float, default=None,
                    help="penalize CTC logits beyond +-this (default: no penalty)")
    ap.add_argument("--logit-penalty", type=float, default=0.02,
                    help="weight of the --logit-bound penalty")
    ap.add_argument("--probe", type=float, default=0.0,
                    help="relative noise for the amplification penalty (default: none)")
    ap.add_argument("--probe-layers", type=int, default=2,
                    help="layers the --probe noise passes through (the last ones)")
    ap.add_argument("--probe-penalty", type=float, default=0.0,
                    help="weight of the mean squared logit shift per unit of --probe noise")
    ap.add_argument("--probe-power", type=float, default=1.0,
                    help="average the per-frame shifts as a power mean of this order "
                    "(above 1 weighs the worst frames more)")
    ap.add_argument("--probe-every", type=int, default=1,
                    help="apply the --probe penalty on every Nth step only, times N")
    ap.add_argument("--average-from", type=int, default=None,
                    help="export the mean of the weights of every step from this one on "
                    "(if it decodes the dev set better than the last step's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", default=None, help="also write progress JSON lines here")
    ap.add_argument("--checkpoint-every", type=int, default=250,
                    help="export the model to --out every N steps too")
    args = ap.parse_args()
    if args.probe < 0 or args.probe_every < 1 or args.probe_power <= 0:
        ap.error("--probe must be >= 0, --probe-every >= 1 and --probe-power > 0")
    if args.average_from is not None and not 0 <= args.average_from < min(
            args.steps, args.stop_after or args.steps):
        ap.error("--average-from must be 0 to the last step (--steps, --stop-after) - 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t_start = time.time()

    corpus = Corpus(args.data)
    vocab = phonemes.make_vocab(corpus.tokens)
    vocab_index = {t: k for k, t in enumerate(vocab)}
    n = len(corpus)
    dev = np.arange(n - N_DEV, n)
    longest_dev = dev[np.argmax(corpus.lengths[dev])]
    train = np.arange(0, n - N_DEV)
    mean, std = cmvn_stats(corpus, train)
    print("%d training utterances (%.1f h), %d dev, vocab %d" % (
        len(train), corpus.lengths[train].sum() / 360000.0, len(dev), len(vocab)), flush=True)

    if args.init:
        model = export.load(args.init)
        if model.config.get("vocab") != vocab:
            remap_head(model, vocab, args.init)
        mean = model.frontend.cmvn.mean.double().numpy()
        std = model.frontend.cmvn.std.double().numpy()
    else:
        model = aural_ref.AuralEncoder(dict(MODEL_CONFIG, vocab=vocab), cmvn=True)
        with torch.no_grad():
            model.frontend.cmvn.mean.copy_(torch.from_numpy(mean))
            model.frontend.cmvn.std.copy_(torch.from_numpy(std))
    n_layers = len(model.encoder.layers)
    if args.probe and not 1 <= args.probe_layers <= n_layers:
        ap.error("--probe-layers must be 1 to %d (the model's layers)" % n_layers)
    n_params = sum(p.numel() for p in model.parameters())
    print("parameters: %d" % n_params, flush=True)
    check_against_reference(model, corpus.utterance(longest_dev), 1e-4)

    mean32, std32 = mean.astype(np.float32), std.astype(np.float32)
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-9, foreach=True)

    short = train[corpus.lengths[train] <= np.percentile(corpus.lengths[train], 30)]
    queue = make_batches(corpus.lengths, short, args.batch_frames // 2, rng)[:args.curriculum]
    logf = open(args.log, "a") if args.log else None
    model.train()
    step, epoch = 0, 0
    average = [p.detach().clone() for p in params] if args.average_from is not None else []
    n_averaged = 0
    t_loss, t_excess, t_gain, t_count, t_probed, t_frames = 0.0, 0.0, 0.0, 0, 0, 0
    last = min(args.steps, args.stop_after or args.steps)
    while step < last:
        if not queue:
            queue = make_batches(corpus.lengths, train, args.batch_frames, rng)
            epoch += 1
        batch = queue.pop(0)
        x, lengths, targets, target_lengths = collate(
            corpus, batch, vocab_index, mean32, std32, rng, augment=True)
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16):
            probing = args.probe and step % args.probe_every == 0
            if probing:
                logits, shift = train_forward(model, x, args.probe, args.probe_layers)
                shift = shift.float()
            else:
                logits = train_forward(model, x)
            logits = logits.float()
        logp = F.log_softmax(logits, dim=-1).transpose(0, 1)
        loss = F.ctc_loss(logp, targets, lengths, target_lengths, blank=0,
                          reduction="mean", zero_infinity=True)
        total = loss
        if args.logit_bound is not None:
            excess = logit_excess(logits, lengths, args.logit_bound)
            total = total + args.logit_penalty * excess
            t_excess += excess.item()
        if probing:
            per_frame = shift.pow(2).mean(-1)
            gain = frame_mean(per_frame.pow(args.probe_power), lengths) ** (1.0 / args.probe_power)
            total = total + args.probe_every * args.probe_penalty * gain
            t_gain += gain.item()
            t_probed += 1
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        if args.average_from is not None and step >= args.average_from:
            n_averaged += 1
            with torch.no_grad():
                for a, p in zip(average, params):
                    a.add_(p - a, alpha=1.0 / n_averaged)
        step += 1
        t_loss += loss.item()
        t_count += 1
        t_frames += int(lengths.sum())
        if step % 50 == 0 or step == last:
            elapsed = time.time() - t_start
            rec = dict(step=step, epoch=epoch, lr=lr, loss=t_loss / t_count,
                       frames_per_s=t_frames / elapsed, minutes=elapsed / 60)
            if args.logit_bound is not None:
                rec["logit_excess"] = t_excess / t_count
            if args.probe:
                rec["probe_gain"] = t_gain / max(t_probed, 1)
            if step % 500 == 0 or step == last:
                model.eval()
                rec["dev_per"] = greedy_per(model, corpus, dev[:100], mean32, std32, vocab)
                model.train()
            print(json.dumps(rec), flush=True)
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
            t_loss, t_excess, t_gain, t_count, t_probed = 0.0, 0.0, 0.0, 0, 0
        if args.checkpoint_every and step % args.checkpoint_every == 0 and step < last:
            export.export(model, model.config, args.out, dtype="F16")

    model.eval()
    rec = dict(final_dev_per=greedy_per(model, corpus, dev, mean32, std32, vocab))
    if n_averaged:
        last_per = rec["final_dev_per"]
        last_weights = [p.detach().clone() for p in params]
        set_weights(params, average)
        average_per = greedy_per(model, corpus, dev, mean32, std32, vocab)
        if average_per > last_per:
            set_weights(params, last_weights)
        rec.update(last_step_dev_per=last_per, average_dev_per=average_per,
                   averaged_steps=n_averaged, final_dev_per=min(last_per, average_per))
    rec.update(minutes=(time.time() - t_start) / 60, params=n_params,
               train_hours=float(corpus.lengths[train].sum() / 360000.0),
               train_utterances=int(len(train)), steps=args.steps, epochs=epoch)
    print(json.dumps(rec), flush=True)
    if logf:
        logf.write(json.dumps(rec) + "\n")
    # The fp32 forward must still be the reference forward after training.
    check_against_reference(model, corpus.utterance(longest_dev), 1e-4)
    size = export.export(model, model.config, args.out, dtype="F16")
    print("wrote %s (%d bytes)" % (args.out, size), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
