#!/usr/bin/env bash
# Side by side, in one run on this machine: aural's encoder against the
# PyTorch reference streaming with its KV cache, same model shape, same two
# modes (50-frame chunks, single frames), one thread each; PyTorch both with
# Debian's OpenBLAS as it loads and with OPENBLAS_CORETYPE=SkylakeX (its
# best, DESIGN.md §7). Also the frontend against torchaudio's fbank.
#
#   tools/bench_compare.sh [MODEL FLAGS...]   e.g. --layers 4 --window 100
#
# MODEL FLAGS, those of 'aural bench' that the reference takes too:
# --d-model N, --heads N, --d-ff N, --layers N, --window N, --chunk N and
# --pos rope|sinusoidal|none, each also as --flag=VALUE. AURAL_ISA=avx2
# (or scalar) measures aural on those kernels instead of the best this CPU
# runs. Installs the reference stack it needs (tools/setup.sh --reference).
set -euo pipefail
cd "$(dirname "$0")/.."
# The flags are checked before anything is installed, built or measured.
usage() { echo "bench_compare.sh: $1 (see --help)" >&2; exit 2; }
args=("$@")
while [[ $# -gt 0 ]]; do
  # --flag=VALUE is checked as --flag VALUE (aural bench and the
  # reference take both; the flags go on to them as given).
  [[ $1 != --*=* ]] || set -- "${1%%=*}" "${1#*=}" "${@:2}"
  case "$1" in
    -h|--help)
      # The comment block above, without the interpreter line.
      sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --d-model|--heads|--d-ff|--layers|--window|--chunk)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] ||
        usage "$1 takes a whole number, not '${2-}'"
      shift 2 ;;
    --pos)
      [[ $# -ge 2 && $2 =~ ^(rope|sinusoidal|none)$ ]] ||
        usage "--pos takes rope, sinusoidal or none, not '${2-}'"
      shift 2 ;;
    *) usage "unknown argument '$1' (model flags only)" ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"
tools/setup.sh --reference
TARGETS=tools/aural tools/build.sh build
py=/usr/bin/python3

aural_json=$(build/tools/aural bench --json "$@")
# Each script's JSON object is its last line of output.
torch_json=$(env -u OPENBLAS_CORETYPE $py tools/reference/bench_torch.py --json "$@" | tail -n 1)
torch_fixed_json=$(OPENBLAS_CORETYPE=SkylakeX $py tools/reference/bench_torch.py --json "$@" | tail -n 1)
fbank_json=$($py tools/bench_frontend_torch.py --json | tail -n 1)

$py - "$aural_json" "$torch_json" "$torch_fixed_json" "$fbank_json" <<'PY'
import json, sys
a, t, tf, fb = (json.loads(x) for x in sys.argv[1:5])
m = a["model"]
print("encoder d_model %d, %d heads, d_ff %d, %d layers, W %d, %s: %.2f MFLOP/frame"
      % (m["d_model"], m["n_heads"], m["d_ff"], m["n_layers"], m["window"],
         m["pos_encoding"], a["flops_per_frame"] / 1e6))
print("aural kernels: %s (%s); core FMA peak %.0f GFLOP/s (AVX-512 %.0f, AVX2 %.0f)"
      % (a["isa"], a["gemm"], a["peak_gflops"], a["peak_gflops_avx512"],
         a["peak_gflops_avx2"]))
print("PyTorch %s: %s" % (t.get("torch_version", "?"), t.get("blas", "?")))
print("PyTorch with OPENBLAS_CORETYPE=SkylakeX: %s" % tf.get("blas", "?"))
print()
print("%-26s %12s %12s %12s %9s %9s" % ("frames/s, one thread", "aural", "PyTorch",
                                         "PyTorch fix", "x PyTorch", "x fixed"))
rows = [("chunk mode, f32 weights", a["chunk_frames_per_s"], "chunk_frames_per_s"),
        ("frame mode, f32 weights", a["frame_frames_per_s"], "frame_frames_per_s"),
        ("chunk mode, f16 weights", a["f16"]["chunk_frames_per_s"], "chunk_frames_per_s"),
        ("frame mode, f16 weights", a["f16"]["frame_frames_per_s"], "frame_frames_per_s")]
for name, ours, key in rows:
    print("%-26s %12.0f %12.0f %12.0f %8.1fx %8.1fx"
          % (name, ours, t[key], tf[key], ours / t[key], ours / tf[key]))
print()
if a["peak_gflops"] > 0:
    print("chunk mode: %.1f GFLOP/s = %.0f%% of the measured %s peak"
          % (a["chunk_gflops"], 100 * a["chunk_gflops"] / a["peak_gflops"], a["isa"]))
ac = a["all_cpus"]
if ac["cpus"] > 1:
    # What serving and 'aural encode -j' can reach: less than CPUs x one
    # thread where the CPUs share a core's units.
    print("all %d CPUs at once, a stream each: chunk mode %.0f frames/s (%.2fx one thread)"
          % (ac["cpus"], ac["chunk_frames_per_s"],
             ac["chunk_frames_per_s"] / a["chunk_frames_per_s"]), end="")
    if ac["peak_gflops"] > 0 and a["peak_gflops"] > 0:
        print("; FMA peak %.0f GFLOP/s (%.2fx one core)"
              % (ac["peak_gflops"], ac["peak_gflops"] / a["peak_gflops"]), end="")
    print()
fe = a["frontend"][0]
print("frontend, 10 ms per push: aural %.2f us/frame; torchaudio batch %.2f us/frame "
      "(%.1fx), per-frame calls %.1f us (%.0fx)"
      % (fe["cpu_us_per_frame"], fb["torchaudio_batch_us_per_frame"],
         fb["torchaudio_batch_us_per_frame"] / fe["cpu_us_per_frame"],
         fb["torchaudio_per_frame_call_us"],
         fb["torchaudio_per_frame_call_us"] / fe["cpu_us_per_frame"]))
PY
