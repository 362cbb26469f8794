#!/usr/bin/python3
"""Writes the seed corpus of the model-loader fuzz target, tests/fuzz/corpus/model/.

Small valid models (a few kB each, so that libFuzzer's mutations land in the
header often) that between them use every option the loader knows: the
three position encodings, both activations, Pre-LN and Post-LN, F32, F16,
BF16 and a mix of them, a CTC head with non-ASCII tokens, CMVN, final norm
or none, a minimal config and one with every frontend option spelt out;
then a few files one mutation away from valid. Deterministic: run it again
and nothing changes.

    /usr/bin/python3 tests/fuzz/make_model_seeds.py
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "model")

FRONTEND = {
    "sample_rate": 16000, "frame_length": 25.0, "frame_shift": 10.0,
    "dither": 0.0, "preemphasis_coefficient": 0.97, "remove_dc_offset": True,
    "window_type": "povey", "round_to_power_of_two": True, "snip_edges": True,
    "low_freq": 20.0, "high_freq": 0.0, "use_power": True,
    "use_log_fbank": True, "use_energy": False, "input_scale": 32768.0,
}


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16  # round to nearest even
    return struct.pack("<H", b)


def encode(values, dtype):
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in values)
    if dtype == "F16":
        return b"".join(f16(v) for v in values)
    return b"".join(bf16(v) for v in values)


def tensors(cfg, mels, cmvn):
    """(name, shape, kind) in state_dict order; kind: w, b, g (gain), s (std)."""
    d, ff, v = cfg["d_model"], cfg["d_ff"], len(cfg.get("vocab", []))
    t = []
    if cmvn:
        t += [("frontend.cmvn.mean", [mels], "b"), ("frontend.cmvn.std", [mels], "s")]
    t += [("input_proj.weight", [d, mels], "w"), ("input_proj.bias", [d], "b")]
    for i in range(cfg["n_layers"]):
        p = "encoder.layers.%d." % i
        t += [(p + "self_attn.in_proj_weight", [3 * d, d], "w"),
              (p + "self_attn.in_proj_bias", [3 * d], "b"),
              (p + "self_attn.out_proj.weight", [d, d], "w"),
              (p + "self_attn.out_proj.bias", [d], "b"),
              (p + "linear1.weight", [ff, d], "w"), (p + "linear1.bias", [ff], "b"),
              (p + "linear2.weight", [d, ff], "w"), (p + "linear2.bias", [d], "b"),
              (p + "norm1.weight", [d], "g"), (p + "norm1.bias", [d], "b"),
              (p + "norm2.weight", [d], "g"), (p + "norm2.bias", [d], "b")]
    if cfg.get("final_norm"):
        t += [("encoder.norm.weight", [d], "g"), ("encoder.norm.bias", [d], "b")]
    if v:
        t += [("head.weight", [v, d], "w"), ("head.bias", [v], "b")]
    return t


def model(cfg, mels=80, cmvn=False, dtypes=("F32",), seed=1):
    """A valid file: header as the exporter writes it, then the data."""
    rng = random.Random(seed)
    header = {"__metadata__": {"format": "aural", "aural.version": "1",
                               "aural.config": json.dumps(cfg, separators=(",", ":"),
                                                          ensure_ascii=False)}}
    data = b""
    for k, (name, shape, kind) in enumerate(tensors(cfg, mels, cmvn)):
        n = 1
        for s in shape:
            n *= s
        if kind == "w":
            vals = [rng.uniform(-1, 1) / shape[1] ** 0.5 for _ in range(n)]
        elif kind == "g":
            vals = [1 + rng.uniform(-0.1, 0.1) for _ in range(n)]
        elif kind == "s":
            vals = [1 + rng.random() for _ in range(n)]
        else:
            vals = [rng.uniform(-0.1, 0.1) for _ in range(n)]
        dt = dtypes[k % len(dtypes)]
        raw = encode(vals, dt)
        header[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return header, data


def serialize(header, data, pad=True):
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(name, blob):
    assert len(blob) <= 64 * 1024, (name, len(blob))
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def drop(header, data, name):
    """Removes a tensor and its bytes; the rest still tile the data."""
    a, b = header.pop(name)["data_offsets"]
    for k, e in header.items():
        if k != "__metadata__" and e["data_offsets"][0] >= b:
            e["data_offsets"] = [e["data_offsets"][0] - (b - a),
                                 e["data_offsets"][1] - (b - a)]
    return data[:a] + data[b:]


def edit_config(header, **changes):
    cfg = json.loads(header["__metadata__"]["aural.config"])
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    header["__metadata__"]["aural.config"] = json.dumps(cfg, separators=(",", ":"),
                                                        ensure_ascii=False)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))

    # Valid models.
    rope = dict(FRONTEND, num_mel_bins=8, d_model=8, n_heads=2, n_layers=1,
                d_ff=16, activation="gelu", norm_first=True,
                layer_norm_eps=1e-5, window=4, pos_encoding="rope",
                rope_theta=10000.0, final_norm=True,
                vocab=["<blank>", "a", "\u2581b", "\u00e9"])
    write("valid_rope_head_cmvn_f32.safetensors",
          serialize(*model(rope, mels=8, cmvn=True, seed=1)))

    sin = dict(num_mel_bins=5, d_model=4, n_heads=2, n_layers=2, d_ff=8,
               activation="relu", norm_first=False, layer_norm_eps=1e-6,
               window=2, pos_encoding="sinusoidal", final_norm=False)
    write("valid_sin_relu_postln_f16.safetensors",
          serialize(*model(sin, mels=5, dtypes=("F16",), seed=2)))

    none = dict(num_mel_bins=4, d_model=2, n_heads=1, n_layers=1, d_ff=3,
                activation="relu", window=1, pos_encoding="none",
                vocab=["", "x"])
    write("valid_none_w1_mixed_dtypes.safetensors",
          serialize(*model(none, mels=4, cmvn=True,
                           dtypes=("F32", "F16", "BF16"), seed=3)))

    bf = dict(num_mel_bins=4, d_model=6, n_heads=3, n_layers=2, d_ff=5,
              activation="gelu", norm_first=True, window=3,
              pos_encoding="rope", rope_theta=50000.0, final_norm=True)
    write("valid_rope_bf16_odd_sizes.safetensors",
          serialize(*model(bf, mels=4, cmvn=True, dtypes=("BF16",), seed=4)))

    # The default 80 mel bins, minimal config (the frontend from defaults).
    base = dict(d_model=16, n_heads=4, n_layers=1, d_ff=16, activation="gelu",
                norm_first=True, window=8, pos_encoding="rope",
                final_norm=True)
    write("valid_80_mels_f16.safetensors",
          serialize(*model(base, dtypes=("F16",), seed=5)))

    # One mutation from valid.
    h, d = model(sin, mels=5, dtypes=("F16",), seed=2)
    write("bad_trailing_bytes.safetensors", serialize(h, d + b"\0" * 8))

    h, d = model(rope, mels=8, cmvn=True, seed=1)
    d = drop(h, d, "encoder.layers.0.linear2.bias")
    write("bad_missing_tensor.safetensors", serialize(h, d))

    h, d = model(rope, mels=8, cmvn=True, seed=1)
    h["input_proj.bias"]["data_offsets"][0] -= 4
    h["input_proj.bias"]["data_offsets"][1] -= 4
    write("bad_overlap.safetensors", serialize(h, d))

    h, d = model(sin, mels=5, dtypes=("F16",), seed=2)
    edit_config(h, n_heads=3)
    write("bad_heads_not_dividing.safetensors", serialize(h, d))

    h, d = model(none, mels=4, cmvn=True, dtypes=("F32", "F16", "BF16"), seed=3)
    h["input_proj.weight"]["dtype"] = "I8"
    write("bad_dtype_i8.safetensors", serialize(h, d))

    h, d = model(rope, mels=8, cmvn=True, seed=1)
    edit_config(h, vocab=["<blank>", 1, 2, 3])
    write("bad_vocab_numbers.safetensors", serialize(h, d))

    h, d = model(rope, mels=8, cmvn=True, seed=1)
    a, b = h["frontend.cmvn.std"]["data_offsets"]
    d = d[:a] + struct.pack("<f", 0.0) + d[a + 4:]
    write("bad_cmvn_std_zero.safetensors", serialize(h, d))

    h, d = model(bf, mels=4, cmvn=True, dtypes=("BF16",), seed=4)
    h["encoder.layers.1.linear1.weight"]["shape"] = [6, 5]
    write("bad_transposed.safetensors", serialize(h, d))

    h, d = model(sin, mels=5, dtypes=("F16",), seed=2)
    edit_config(h, d_model=5, n_heads=1)
    write("bad_sinusoidal_odd_d_model.safetensors", serialize(h, d))

    h, d = model(rope, mels=8, cmvn=True, seed=1)
    edit_config(h, vocab="<blank> a b c")
    write("bad_vocab_string.safetensors", serialize(h, d))

    h, d = model(none, mels=4, cmvn=True, dtypes=("F32", "F16", "BF16"), seed=3)
    h["input_proj.bias"]["shape"] = [4294967296, 4294967296]
    write("bad_shape_overflow.safetensors", serialize(h, d))

    blob = bytearray(serialize(*model(sin, mels=5, dtypes=("F16",), seed=2)))
    blob[0:8] = struct.pack("<Q", len(blob))
    write("bad_header_length.safetensors", bytes(blob))

    regressions()


def regressions():
    """Inputs kept in tests/fuzz/regressions/model/ for known problems."""
    out = os.path.join(os.path.dirname(OUT), "..", "regressions", "model")
    os.makedirs(out, exist_ok=True)
    # A 52 kB file whose every encoder reserves 27 layers * 1000000 frames
    # * 10 * (k, v) * 4 bytes = 2.16 GB of KV ring: nothing bounds
    # n_layers * window * d_model.
    cfg = dict(num_mel_bins=4, d_model=10, n_heads=1, n_layers=27, d_ff=1,
               activation="relu", window=1000000, pos_encoding="none")
    blob = serialize(*model(cfg, mels=4, dtypes=("F16",), seed=6))
    assert len(blob) <= 64 * 1024
    with open(os.path.join(out, "kv_state_2gb.safetensors"), "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    main()
