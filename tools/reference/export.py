#!/usr/bin/python3
"""Write and read aural model files (safetensors) without the safetensors package.

File layout (DESIGN.md §2):

    u64 little-endian N | N bytes of UTF-8 JSON header | tensor data

The header is compact JSON (no spaces; non-ASCII token strings written as
UTF-8, not \\u escapes) padded at its end with spaces (0x20) so that N is a
multiple of 8 and the data starts 8-byte aligned. It holds

    {"__metadata__": {"format": "aural", "aural.version": "1",
                      "aural.config": "<compact JSON of the full config>"},
     "NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}

with tensors in state_dict order, offsets relative to the start of the data,
stored back to back in header order with no gaps, the last one ending at the
end of the file. Every tensor has the same dtype: F32, F16 (IEEE half,
round to nearest even) or BF16 (upper 16 bits of the float32 after round to
nearest even; NaN stays NaN). All little-endian, C order.

Python use:
    import export, aural_ref
    export.export(model, model.config, "m.safetensors", dtype="F16")
    model2 = export.load("m.safetensors")      # float32 module, eval mode

Command line (random weights, for tests and benchmarks):
    /usr/bin/python3 tools/reference/export.py --random CONFIG.json --seed 1 \\
        [--cmvn] --dtype F16 -o out.safetensors
CONFIG.json holds the config keys (see aural_ref.complete_config); missing
frontend keys take the DESIGN.md defaults. A file's config changed, its
tensors byte for byte as they were (KEY=JSON, repeatable):
    /usr/bin/python3 tools/reference/export.py --input in.safetensors \\
        --set lead_in_frames=10 -o out.safetensors
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aural_ref  # noqa: E402

DTYPES = ("F32", "F16", "BF16")
_ITEM_SIZE = {"F32": 4, "F16": 2, "BF16": 2}
MAX_HEADER_BYTES = 100 * 1000 * 1000  # safetensors' own limit


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    # A NaN must not round into infinity: keep its sign and set the quiet bit.
    rounded[nan] = ((u[nan] >> 16).astype(np.uint16) | 0x0040)
    return rounded


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode_tensor(t, dtype):
    """float tensor -> little-endian bytes of the file dtype."""
    a = t.detach().to(torch.float32).cpu().contiguous().numpy()
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(a).astype("<u2").tobytes()
    raise ValueError("dtype must be one of %s" % (DTYPES,))


def decode_tensor(raw, dtype, shape):
    """Bytes of the file dtype -> float32 numpy array of `shape`."""
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
    else:
        raise ValueError("unsupported dtype %r" % dtype)
    return a.reshape(shape)


def round_to_dtype(t, dtype):
    """What a tensor becomes after a trip through the file dtype (float32)."""
    return torch.from_numpy(decode_tensor(encode_tensor(t, dtype), dtype, tuple(t.shape)))


def config_json(config):
    """The compact JSON string stored as aural.config."""
    return json.dumps(config, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def build_file(state_dict, config, dtype="F32"):
    """Returns the bytes of a safetensors file holding `state_dict`."""
    if dtype not in DTYPES:
        raise ValueError("dtype must be one of %s" % (DTYPES,))
    header = {"__metadata__": {"format": "aural", "aural.version": "1",
                               "aural.config": config_json(config)}}
    blobs = []
    offset = 0
    for name, t in state_dict.items():
        raw = encode_tensor(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def export(module, config, path, dtype="F32"):
    """Writes module's state_dict and config to `path` (see the module doc).
    The config is completed with defaults first. Returns the file size."""
    cfg = aural_ref.complete_config(config)
    data = build_file(module.state_dict(), cfg, dtype)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


def read(path):
    """Parses a file written by export(). Returns (metadata dict, config dict,
    {name: (dtype, float32 numpy array)} in file order). Checks the layout
    rules strictly, so it also documents what a valid file is."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(data):
        raise ValueError("%s: header length %d does not fit the file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    if meta.get("format") != "aural" or meta.get("aural.version") != "1":
        raise ValueError("%s: not an aural v1 file" % path)
    config = json.loads(meta["aural.config"])
    body = data[8 + n:]
    tensors = {}
    expect = 0
    for name, info in header.items():
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if begin != expect or end - begin != count * _ITEM_SIZE[info["dtype"]]:
            raise ValueError("%s: tensor %s has bad data_offsets" % (path, name))
        tensors[name] = (info["dtype"], decode_tensor(body[begin:end], info["dtype"],
                                                      tuple(info["shape"])))
        expect = end
    if expect != len(body):
        raise ValueError("%s: %d bytes after the last tensor" % (path, len(body) - expect))
    return meta, config, tensors


def load(path):
    """Builds an AuralEncoder (float32, eval mode) from a file; weights are
    the stored values upcast to float32. The strict state_dict load rejects
    missing or extra tensors."""
    _, config, tensors = read(path)
    model = aural_ref.AuralEncoder(config, cmvn="frontend.cmvn.mean" in tensors)
    state = {name: torch.from_numpy(a.copy()) for name, (_, a) in tensors.items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


def with_config(path, updates, out):
    """Writes to `out` the file at `path` with its config's keys set to
    `updates` (the config completed and validated again) and its tensors'
    bytes unchanged. Returns the new file's size."""
    read(path)  # the whole layout checked
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    config = json.loads(header["__metadata__"]["aural.config"])
    config.update(updates)
    header["__metadata__"]["aural.config"] = config_json(aural_ref.complete_config(config))
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    new = struct.pack("<Q", len(hjson)) + hjson + data[8 + n:]
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(new)
    os.replace(tmp, out)
    return len(new)


def main():
    ap = argparse.ArgumentParser(
        description="Export a random-weight aural model to safetensors, or "
        "change a model file's config.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--random", metavar="CONFIG.json",
                     help="config JSON (keys of aural_ref.complete_config)")
    src.add_argument("--input", metavar="FILE",
                     help="a model file whose config --set changes")
    ap.add_argument("--set", metavar="KEY=JSON", action="append", default=[],
                    help="with --input: a config key and its JSON value")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    ap.add_argument("--cmvn", action="store_true", help="include made-up CMVN stats")
    ap.add_argument("--dtype", choices=DTYPES, default="F32")
    ap.add_argument("-o", "--output", required=True, help="output .safetensors path")
    args = ap.parse_args()
    if args.input:
        updates = {}
        for item in args.set:
            key, eq, value = item.partition("=")
            try:
                updates[key] = json.loads(value) if eq else None
            except ValueError:
                updates[key] = None
            if not key or updates[key] is None:
                ap.error("--set %r: give KEY=JSON, e.g. lead_in_frames=10" % item)
        if not updates:
            ap.error("--input needs at least one --set KEY=JSON")
        try:
            size = with_config(args.input, updates, args.output)
        except (OSError, ValueError) as e:
            print("export.py: %s" % e, file=sys.stderr)
            return 1
        print("%s: config %s, %d bytes" % (args.output, json.dumps(updates), size))
        return 0
    if args.set:
        ap.error("--set goes with --input")
    with open(args.random) as f:
        config = json.load(f)
    model = aural_ref.init_random(aural_ref.AuralEncoder(config, cmvn=args.cmvn), args.seed)
    size = export(model, model.config, args.output, args.dtype)
    n_params = sum(p.numel() for p in model.state_dict().values())
    print("%s: %d tensors, %d values, %s, %d bytes" % (
        args.output, len(model.state_dict()), n_params, args.dtype, size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
