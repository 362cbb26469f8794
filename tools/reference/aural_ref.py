#!/usr/bin/python3
"""PyTorch reference implementation of the aural encoder (DESIGN.md §2, §3).

This module is the executable form of the model contract. The C encoder in
`lib/` must reproduce `AuralEncoder.forward` (max abs difference <= 1e-4 for
fp32 weights on realistic inputs), and its streaming path must agree with the
whole-signal path as `AuralEncoder.forward_chunk` does here (<= 1e-5).

    import aural_ref
    cfg = aural_ref.complete_config({"d_model": 32, "n_heads": 4, ...})
    model = aural_ref.AuralEncoder(cfg, cmvn=True).eval()
    feats = aural_ref.fbank(samples, cfg)             # [T, n_mels] float32
    emb, logits = model(feats)                        # whole signal
    state = model.init_state()
    for chunk in feats.split(50):                     # or frame by frame
        emb_c, logits_c = model.forward_chunk(chunk, state)
    ids, text = aural_ref.ctc_greedy(logits, cfg["vocab"])

Definitions the C code mirrors exactly (see also tests/data/encoder/README.md):

* Frame t attends to frames max(0, t-W+1) .. t (W frames including itself).
* Positions are absolute frame indices t = start_frame + index.
* Sinusoidal: pe[j] for j = 2i is sin(t / 10000**(2i/d_model)) and for
  j = 2i+1 cos(t / 10000**(2i/d_model)), computed in float64, rounded to
  float32, added to the input projection.
* RoPE: within each head, the pair (2i, 2i+1) of q and of k is rotated by
  angle t * theta**(-2i/head_size): a' = a cos - b sin, b' = a sin + b cos.
  Angles are computed in float64; cos and sin are rounded to float32.
* LayerNorm is PyTorch's (biased variance, eps inside the square root).
* gelu is the exact erf form; attention scale is 1/sqrt(head_size).

For `pos_encoding` "none" and "sinusoidal" the whole-signal path is stock
`nn.TransformerEncoder`; the streaming path (and everything for "rope") uses
the explicit attention below, so the two check each other.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Frontend options (torchaudio.compliance.kaldi.fbank) and their defaults, in
# the order they are written to a model file's aural.config.
FRONTEND_DEFAULTS = {
    "sample_rate": 16000,
    "num_mel_bins": 80,
    "frame_length": 25.0,
    "frame_shift": 10.0,
    "dither": 0.0,
    "preemphasis_coefficient": 0.97,
    "remove_dc_offset": True,
    "window_type": "povey",
    "round_to_power_of_two": True,
    "snip_edges": True,
    "low_freq": 20.0,
    "high_freq": 0.0,
    "use_power": True,
    "use_log_fbank": True,
    "use_energy": False,
    "input_scale": 32768.0,
}

# Encoder keys; None marks a key without a default (it must be given).
ENCODER_DEFAULTS = {
    "d_model": None,
    "n_heads": None,
    "n_layers": None,
    "d_ff": None,
    "activation": None,
    "norm_first": None,
    "layer_norm_eps": 1e-5,
    "window": None,
    "pos_encoding": None,
    "rope_theta": 10000.0,
    "final_norm": False,
}

# lead_in_frames (optional, default 0): frames of digital silence each
# stream starts from. The encoder runs as if the stream's features were
# preceded by that many rows of silence_features(), and drops their
# outputs: a stream's frame t is at position start_frame + lead + t.
MAX_LEAD_IN = 1000

ACTIVATIONS = ("relu", "gelu")
POS_ENCODINGS = ("rope", "sinusoidal", "none")


def complete_config(cfg):
    """Returns a new config dict with defaults filled in, validated.

    Key order is canonical (frontend, encoder, then `vocab` when present), so
    the JSON written to a model file does not depend on how `cfg` was built.
    Unknown keys are rejected: a typo must not silently become a default.
    """
    known = set(FRONTEND_DEFAULTS) | set(ENCODER_DEFAULTS) | {"lead_in_frames", "vocab"}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError("unknown config keys: %s" % ", ".join(unknown))
    out = {}
    for table in (FRONTEND_DEFAULTS, ENCODER_DEFAULTS):
        for key, default in table.items():
            if key in cfg:
                out[key] = cfg[key]
            elif default is None:
                raise ValueError("config key %r is required" % key)
            else:
                out[key] = default
    # Written only when not 0, so that files of models without one keep
    # their config as it was.
    lead = cfg.get("lead_in_frames", 0)
    if (not isinstance(lead, int) or isinstance(lead, bool) or
            not 0 <= lead <= MAX_LEAD_IN):
        raise ValueError("config lead_in_frames must be an integer in 0..%d" % MAX_LEAD_IN)
    if lead:
        out["lead_in_frames"] = lead
    if cfg.get("vocab") is not None:
        out["vocab"] = list(cfg["vocab"])

    d, h = out["d_model"], out["n_heads"]
    for key in ("d_model", "n_heads", "n_layers", "d_ff", "window", "num_mel_bins"):
        if not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 1:
            raise ValueError("config %s must be a positive integer" % key)
    if d % h:
        raise ValueError("d_model %d is not a multiple of n_heads %d" % (d, h))
    if out["activation"] not in ACTIVATIONS:
        raise ValueError("activation must be one of %s" % (ACTIVATIONS,))
    if out["pos_encoding"] not in POS_ENCODINGS:
        raise ValueError("pos_encoding must be one of %s" % (POS_ENCODINGS,))
    if out["pos_encoding"] == "rope" and (d // h) % 2:
        raise ValueError("rope needs an even head size, got %d" % (d // h))
    if not out["rope_theta"] > 0 or not out["layer_norm_eps"] > 0:
        raise ValueError("rope_theta and layer_norm_eps must be positive")
    for key in ("norm_first", "final_norm"):
        if not isinstance(out[key], bool):
            raise ValueError("config %s must be a boolean" % key)
    if "vocab" in out:
        if len(out["vocab"]) < 2 or not all(isinstance(t, str) for t in out["vocab"]):
            raise ValueError("vocab must be a list of at least 2 token strings")
    return out


# ---------------------------------------------------------------------------
# Frontend
# ---------------------------------------------------------------------------

def fbank(samples, cfg, dtype=torch.float64):
    """Log-mel features of mono PCM `samples` (floats in [-1, 1]) at the model rate.

    Exactly torchaudio.compliance.kaldi.fbank(samples * input_scale, ...) with
    the config's options, computed in `dtype` (float64 by default, as the
    golden data is) and returned as float32 [T, num_mel_bins]; T = 0 when
    there are fewer samples than one window.
    """
    import torchaudio.compliance.kaldi as kaldi

    x = torch.as_tensor(np.asarray(samples), dtype=dtype).reshape(1, -1)
    win = int(cfg["sample_rate"] * cfg["frame_length"] * 0.001)
    if x.shape[1] < win:
        return torch.zeros(0, cfg["num_mel_bins"], dtype=torch.float32)
    feats = kaldi.fbank(
        x * cfg["input_scale"],
        num_mel_bins=cfg["num_mel_bins"], frame_length=cfg["frame_length"],
        frame_shift=cfg["frame_shift"], dither=cfg["dither"],
        preemphasis_coefficient=cfg["preemphasis_coefficient"],
        remove_dc_offset=cfg["remove_dc_offset"], window_type=cfg["window_type"],
        round_to_power_of_two=cfg["round_to_power_of_two"],
        snip_edges=cfg["snip_edges"], low_freq=cfg["low_freq"],
        high_freq=cfg["high_freq"], use_power=cfg["use_power"],
        use_log_fbank=cfg["use_log_fbank"], use_energy=cfg["use_energy"],
        sample_frequency=cfg["sample_rate"])
    return feats.to(torch.float32)


def silence_features(cfg, n):
    """[n, num_mel_bins] float32 features of digital silence as the C
    frontend computes them (and torchaudio in float32, as the models were
    trained): the log floor ln(FLT_EPSILON) in every bin, or 0 without
    use_log_fbank. (fbank() above, in float64, floors at float64's
    epsilon instead.)"""
    value = math.log(float(np.finfo(np.float32).eps)) if cfg["use_log_fbank"] else 0.0
    return torch.full((n, cfg["num_mel_bins"]), value, dtype=torch.float32)


class CMVN(nn.Module):
    """Global mean/variance normalization: (x - mean) / std per mel bin."""

    def __init__(self, n_mels):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_mels))
        self.register_buffer("std", torch.ones(n_mels))

    def forward(self, x):
        return (x - self.mean) / self.std


class Frontend(nn.Module):
    """Holds the optional CMVN so its tensors are named frontend.cmvn.*."""

    def __init__(self, n_mels, cmvn):
        super().__init__()
        self.cmvn = CMVN(n_mels) if cmvn else None

    def forward(self, feats):
        return self.cmvn(feats) if self.cmvn is not None else feats


# ---------------------------------------------------------------------------
# Position encodings and attention pieces
# ---------------------------------------------------------------------------

def sinusoidal_table(start, n, d_model):
    """float32 [n, d_model]: the sinusoidal vectors of frames start .. start+n-1.

    Computed in float64 and rounded once to float32. Python ints carry the
    frame index, so the table is exact for any stream length.
    """
    j = np.arange(d_model)
    denom = np.power(10000.0, (2 * (j // 2)).astype(np.float64) / d_model)
    t = np.arange(start, start + n, dtype=np.float64)
    ang = t[:, None] / denom[None, :]
    pe = np.where(j % 2 == 0, np.sin(ang), np.cos(ang))
    return torch.from_numpy(pe.astype(np.float32))


def rope_tables(start, n, head_size, theta):
    """(cos, sin), each float32 [n, head_size / 2], for frames start .. start+n-1.

    Angle of pair i at frame t: t * theta**(-2i/head_size), in float64.
    """
    i = np.arange(head_size // 2, dtype=np.float64)
    inv_freq = np.power(float(theta), -2.0 * i / head_size)
    t = np.arange(start, start + n, dtype=np.float64)
    ang = t[:, None] * inv_freq[None, :]
    return (torch.from_numpy(np.cos(ang).astype(np.float32)),
            torch.from_numpy(np.sin(ang).astype(np.float32)))


def apply_rope(x, cos, sin):
    """Rotates interleaved pairs (2i, 2i+1) of x [H, n, hs] by the tables [n, hs/2]."""
    h, n, hs = x.shape
    pairs = x.reshape(h, n, hs // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).reshape(h, n, hs)


def band_allowed(q_pos, k_pos, window):
    """bool [n_q, n_k]: key frame j is visible from query frame i iff i-W+1 <= j <= i."""
    q = q_pos[:, None]
    k = k_pos[None, :]
    return (k <= q) & (k >= q - window + 1)


def band_mask(n, window):
    """The [n, n] mask for stock PyTorch attention: True where attention is forbidden."""
    pos = torch.arange(n)
    return ~band_allowed(pos, pos, window)


def _split_heads(x, n_heads):
    """[n, d] -> [H, n, head_size]"""
    n, d = x.shape
    return x.reshape(n, n_heads, d // n_heads).transpose(0, 1)


def _merge_heads(x):
    """[H, n, head_size] -> [n, d]"""
    h, n, hs = x.shape
    return x.transpose(0, 1).reshape(n, h * hs)


# ---------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------

class RopeEncoderLayer(nn.Module):
    """One encoder layer with rotary positions; same tensor names as
    nn.TransformerEncoderLayer (self_attn.in_proj_*, self_attn.out_proj.*,
    linear1, linear2, norm1, norm2). The nn.MultiheadAttention is used only
    as a holder of its parameters; attention is computed by AuralEncoder."""

    def __init__(self, d_model, n_heads, d_ff, eps):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0,
                                               bias=True, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)


class RopeEncoder(nn.Module):
    """Container with the names of nn.TransformerEncoder: layers.{i}, norm."""

    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(
            RopeEncoderLayer(cfg["d_model"], cfg["n_heads"], cfg["d_ff"],
                             cfg["layer_norm_eps"])
            for _ in range(cfg["n_layers"]))
        self.norm = (nn.LayerNorm(cfg["d_model"], eps=cfg["layer_norm_eps"])
                     if cfg["final_norm"] else None)


class StreamState:
    """Per-stream encoder state: the next absolute frame index and, per layer,
    the keys and values ([H, m, head_size], m <= W-1, oldest first; keys after
    rotation for rope) of the last frames seen."""

    def __init__(self, n_layers, start_frame=0):
        self.pos = int(start_frame)
        self.k = [None] * n_layers
        self.v = [None] * n_layers


class AuralEncoder(nn.Module):
    """The causal sliding-window Transformer encoder of DESIGN.md §2."""

    def __init__(self, config, cmvn=False):
        super().__init__()
        cfg = complete_config(config)
        self.config = cfg
        d, n_mels = cfg["d_model"], cfg["num_mel_bins"]
        self.n_heads = cfg["n_heads"]
        self.head_size = d // cfg["n_heads"]
        self.window = cfg["window"]
        self.pos_encoding = cfg["pos_encoding"]
        self.norm_first = cfg["norm_first"]
        self.frontend = Frontend(n_mels, cmvn)
        self.input_proj = nn.Linear(n_mels, d)
        if self.pos_encoding == "rope":
            self.encoder = RopeEncoder(cfg)
        else:
            layer = nn.TransformerEncoderLayer(
                d, cfg["n_heads"], cfg["d_ff"], dropout=0.0,
                activation=cfg["activation"], layer_norm_eps=cfg["layer_norm_eps"],
                batch_first=True, norm_first=cfg["norm_first"])
            final = nn.LayerNorm(d, eps=cfg["layer_norm_eps"]) if cfg["final_norm"] else None
            self.encoder = nn.TransformerEncoder(layer, cfg["n_layers"], norm=final,
                                                 enable_nested_tensor=False)
        self.vocab = cfg.get("vocab")
        self.head = nn.Linear(d, len(self.vocab)) if self.vocab else None
        self.lead_in = cfg.get("lead_in_frames", 0)
        self.eval()

    # -- pieces shared by the whole-signal and the streaming paths ---------

    def _act(self, x):
        if self.config["activation"] == "relu":
            return F.relu(x)
        return F.gelu(x)  # exact erf form

    def _embed(self, feats, start):
        """CMVN, input projection and (sinusoidal) positions of frames start..."""
        x = self.frontend(feats.to(self.input_proj.weight.dtype))
        x = self.input_proj(x)
        if self.pos_encoding == "sinusoidal":
            x = x + sinusoidal_table(start, x.shape[0], x.shape[1]).to(x.dtype)
        return x

    def _context(self, start, n, n_past):
        """What every layer needs for n new frames at positions start.. after
        n_past cached frames: the RoPE tables (or None) and the bool [n,
        n_past + n] visibility mask."""
        rope = None
        if self.pos_encoding == "rope":
            rope = rope_tables(start, n, self.head_size, self.config["rope_theta"])
        q_pos = torch.arange(start, start + n)
        k_pos = torch.arange(start - n_past, start + n)
        return rope, band_allowed(q_pos, k_pos, self.window)

    def _attention(self, layer, a, ctx, past_k, past_v):
        """Self-attention of the n new frames `a` [n, d] over themselves and
        the cached past. Returns (out [n, d], keys, values) with keys/values
        covering the past and the new frames, oldest first."""
        mha = layer.self_attn
        n, d = a.shape
        rope, allowed = ctx
        qkv = F.linear(a, mha.in_proj_weight, mha.in_proj_bias)
        q, k, v = (_split_heads(t, self.n_heads) for t in qkv.split(d, dim=1))
        if rope is not None:
            q = apply_rope(q, *rope)
            k = apply_rope(k, *rope)
        if past_k is not None:
            k = torch.cat((past_k, k), dim=1)
            v = torch.cat((past_v, v), dim=1)
        scores = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(self.head_size))
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.matmul(torch.softmax(scores, dim=-1), v)
        out = F.linear(_merge_heads(o), mha.out_proj.weight, mha.out_proj.bias)
        return out, k, v

    def _layer(self, layer, x, ctx, past_k=None, past_v=None):
        """One layer over n frames; returns (y, keys, values)."""
        if self.norm_first:
            attn, k, v = self._attention(layer, layer.norm1(x), ctx, past_k, past_v)
            h = x + attn
            y = h + layer.linear2(self._act(layer.linear1(layer.norm2(h))))
        else:
            attn, k, v = self._attention(layer, x, ctx, past_k, past_v)
            h = layer.norm1(x + attn)
            y = layer.norm2(h + layer.linear2(self._act(layer.linear1(h))))
        return y, k, v

    # -- public API ------------------------------------------------------------

    def forward(self, feats, start_frame=0):
        """Whole-signal encoder. feats: [T, n_mels] fbank features before CMVN
        for frames start_frame .. start_frame+T-1. Returns (embeddings [T, d],
        logits [T, V] or None); logits are the head's raw outputs."""
        start = int(start_frame)
        lead = self.lead_in
        if lead:
            feats = torch.cat((silence_features(self.config, lead).to(feats.dtype), feats))
        x = self._embed(feats, start)
        t = x.shape[0]
        if self.pos_encoding == "rope":
            ctx = self._context(start, t, 0)
            for layer in self.encoder.layers:
                x, _, _ = self._layer(layer, x, ctx)
            if self.encoder.norm is not None:
                x = self.encoder.norm(x)
        elif t > 0:
            # Stock PyTorch, final norm included.
            x = self.encoder(x.unsqueeze(0), mask=band_mask(t, self.window)).squeeze(0)
        elif self.encoder.norm is not None:
            x = self.encoder.norm(x)
        x = x[lead:]
        logits = self.head(x) if self.head is not None else None
        return x, logits

    def init_state(self, start_frame=0):
        """A fresh stream whose first frame has absolute index start_frame
        (its lead-in, if any, already run)."""
        state = StreamState(len(self.encoder.layers), start_frame)
        if self.lead_in:
            self.forward_chunk(silence_features(self.config, self.lead_in), state)
        return state

    def forward_chunk(self, feats, state):
        """Streams n >= 0 new frames [n, n_mels] through the encoder using and
        updating `state` (keeps only the last W-1 keys/values per layer).
        Returns (embeddings [n, d], logits [n, V] or None)."""
        start = state.pos
        x = self._embed(feats, start)
        n = x.shape[0]
        keep = self.window - 1
        n_past = state.k[0].shape[1] if state.k[0] is not None else 0
        ctx = self._context(start, n, n_past)
        for i, layer in enumerate(self.encoder.layers):
            x, k, v = self._layer(layer, x, ctx, state.k[i], state.v[i])
            total = k.shape[1]
            state.k[i] = k[:, max(0, total - keep):].clone() if keep else k[:, :0]
            state.v[i] = v[:, max(0, total - keep):].clone() if keep else v[:, :0]
        state.pos = start + n
        if self.encoder.norm is not None:
            x = self.encoder.norm(x)
        logits = self.head(x) if self.head is not None else None
        return x, logits


# ---------------------------------------------------------------------------
# CTC and initialization
# ---------------------------------------------------------------------------

def ctc_greedy(logits, vocab=None):
    """Greedy CTC decoding: argmax per frame (first index on ties), collapse
    repeats, drop the blank (index 0). Returns (ids, text); text is the plain
    concatenation of the token strings, or None without a vocab."""
    best = torch.as_tensor(logits).argmax(dim=-1).tolist()
    ids = []
    prev = None
    for b in best:
        if b != prev and b != 0:
            ids.append(b)
        prev = b
    text = "".join(vocab[i] for i in ids) if vocab is not None else None
    return ids, text


def init_random(model, seed, cmvn_mean=None, cmvn_std=None):
    """Deterministic random weights from `seed`, scaled like PyTorch's defaults
    but with nothing left trivial: every bias is random and LayerNorm weights
    are 1 + 0.1 N(0,1), biases 0.1 N(0,1), so a bug in any term shows.
    CMVN statistics are taken from the arguments, else made up."""
    g = torch.Generator().manual_seed(int(seed))

    def uniform(shape, bound):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * bound

    def normal(shape, scale):
        return torch.randn(shape, generator=g, dtype=torch.float64) * scale

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("in_proj_weight"):  # xavier uniform, as stock MHA
                val = uniform(shape, math.sqrt(6.0 / (shape[0] // 3 + shape[1])))
            elif ".norm" in name or name.startswith("encoder.norm"):
                val = 1 + normal(shape, 0.1) if name.endswith("weight") else normal(shape, 0.1)
            elif name.endswith("weight"):  # Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
                val = uniform(shape, 1 / math.sqrt(shape[1]))
            elif name.endswith("in_proj_bias") or name.endswith("out_proj.bias"):
                val = normal(shape, 0.1)
            else:  # Linear bias: fan_in from the matching weight
                fan_in = dict(model.named_parameters())[name[:-4] + "weight"].shape[1]
                val = uniform(shape, 1 / math.sqrt(fan_in))
            p.copy_(val.to(p.dtype))
        cmvn = model.frontend.cmvn
        if cmvn is not None:
            n = cmvn.mean.shape[0]
            mean = cmvn_mean if cmvn_mean is not None else 8 + normal((n,), 3)
            std = cmvn_std if cmvn_std is not None else 2 + torch.rand(n, generator=g, dtype=torch.float64) * 3
            cmvn.mean.copy_(torch.as_tensor(mean).to(cmvn.mean.dtype))
            cmvn.std.copy_(torch.as_tensor(std).to(cmvn.std.dtype))
    return model


# ---------------------------------------------------------------------------
# A slow, loop-by-loop oracle used by the golden script to check the above
# ---------------------------------------------------------------------------

def naive_forward(model, feats, start_frame=0):
    """float64 numpy re-derivation of forward() with explicit per-frame,
    per-head, per-pair loops and no PyTorch ops. Slow: for a few dozen
    frames only. Returns (embeddings [T, d], logits [T, V] or None)."""
    cfg = model.config
    P = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    H, W = cfg["n_heads"], cfg["window"]
    d = cfg["d_model"]
    hs = d // H
    eps = cfg["layer_norm_eps"]

    def ln(x, prefix):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * P[prefix + ".weight"] + P[prefix + ".bias"]

    def lin(x, prefix):
        return x @ P[prefix + ".weight"].T + P[prefix + ".bias"]

    erf = np.vectorize(math.erf)

    def act(x):
        if cfg["activation"] == "relu":
            return np.maximum(x, 0)
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))

    x = np.asarray(feats, dtype=np.float64)
    lead = cfg.get("lead_in_frames", 0)
    if lead:
        x = np.concatenate((silence_features(cfg, lead).double().numpy(), x))
    if "frontend.cmvn.mean" in P:
        x = (x - P["frontend.cmvn.mean"]) / P["frontend.cmvn.std"]
    x = lin(x, "input_proj")
    T = x.shape[0]
    if cfg["pos_encoding"] == "sinusoidal":
        for r in range(T):
            t = start_frame + r
            for j in range(d):
                ang = t / 10000.0 ** ((2 * (j // 2)) / d)
                x[r, j] += float(np.float32(math.sin(ang) if j % 2 == 0 else math.cos(ang)))

    def rotate(vec, t):
        out = vec.copy()
        for i in range(hs // 2):
            ang = t * cfg["rope_theta"] ** (-2.0 * i / hs)
            c, s = float(np.float32(math.cos(ang))), float(np.float32(math.sin(ang)))
            a, b = vec[2 * i], vec[2 * i + 1]
            out[2 * i], out[2 * i + 1] = a * c - b * s, a * s + b * c
        return out

    for li in range(cfg["n_layers"]):
        pre = "encoder.layers.%d." % li
        a = ln(x, pre + "norm1") if cfg["norm_first"] else x
        qkv = a @ P[pre + "self_attn.in_proj_weight"].T + P[pre + "self_attn.in_proj_bias"]
        attn = np.zeros((T, d))
        for h in range(H):
            q = qkv[:, h * hs:(h + 1) * hs]
            k = qkv[:, d + h * hs:d + (h + 1) * hs]
            v = qkv[:, 2 * d + h * hs:2 * d + (h + 1) * hs]
            if cfg["pos_encoding"] == "rope":
                q = np.stack([rotate(q[r], start_frame + r) for r in range(T)])
                k = np.stack([rotate(k[r], start_frame + r) for r in range(T)])
            for r in range(T):
                js = range(max(0, r - W + 1), r + 1)
                s = np.array([q[r] @ k[j] / math.sqrt(hs) for j in js])
                p = np.exp(s - s.max())
                p /= p.sum()
                attn[r, h * hs:(h + 1) * hs] = sum(pj * v[j] for pj, j in zip(p, js))
        attn = attn @ P[pre + "self_attn.out_proj.weight"].T + P[pre + "self_attn.out_proj.bias"]
        if cfg["norm_first"]:
            hcur = x + attn
            x = hcur + lin(act(lin(ln(hcur, pre + "norm2"), pre + "linear1")), pre + "linear2")
        else:
            hcur = ln(x + attn, pre + "norm1")
            x = ln(hcur + lin(act(lin(hcur, pre + "linear1")), pre + "linear2"), pre + "norm2")
    if cfg["final_norm"]:
        x = ln(x, "encoder.norm")
    x = x[lead:]
    logits = lin(x, "head") if "head.weight" in P else None
    return x, logits
