#!/usr/bin/env bash
# Real-time capacity: starts aurald with the random-weight 'base' model of
# 'aural bench' (or -m MODEL) and runs 'aural load' at each stream count in
# turn, then prints one table: latency p50/p99/max over all chunks, the
# worst stream's p99, chunks lost, the daemon's CPU per stream, and whether
# the run kept every stream's p99 within the limit with nothing lost;
# beneath it, how many real-time streams the encoder alone carries on the
# same CPUs ('aural bench', a stream per CPU at once), the most any run
# could reach.
#
#   tools/bench_load.sh [-m MODEL] [--seconds S] [--threads T]
#                       [--limit-ms L] [--precision f32|bf16] [N...]
#
# Defaults: 60 s per run, aurald's own thread count (one worker per CPU),
# limit 250 ms, precision f32, N = 1 10 50 100 200. Input: the bundled recording
# (22.05 kHz FLAC, so every stream runs the resampler too). Each run's full
# JSON goes to /tmp/aural-load-K-N.json (K: the run's place in the list, so
# a count may be given more than once).
set -euo pipefail
cd "$(dirname "$0")/.."

model=""
seconds=60
threads=""
precision=f32
limit_ms=250
counts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --limit-ms) limit_ms=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench_load.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) counts+=("$1"); shift ;;
  esac
done
[[ ${#counts[@]} -gt 0 ]] || counts=(1 10 50 100 200)

tools/setup.sh
TARGETS="tools/aural daemon/aurald" tools/build.sh build

work=$(mktemp -d)
daemon_pid=""
cleanup() {
  if [[ -n "$daemon_pid" ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -z "$model" ]]; then
  model=$work/base.safetensors
  build/tools/aural bench --save-model "$model" >/dev/null
fi
# The encoder alone, a stream per CPU at once (aural bench): the most
# real-time streams aurald could carry here, before any frontend, network
# or scheduling work. One worker per CPU unless --threads says otherwise.
build/tools/aural bench encoder -m "$model" \
  --streams 1 --cpus "${threads:-$(nproc)}" --json >"$work/bench.json"

sock=$work/aural.sock
daemon_args=(-m "$model" -s "$sock" --no-config --precision "$precision")
[[ -n "$threads" ]] && daemon_args+=(--threads "$threads")
build/daemon/aurald "${daemon_args[@]}" 2>"$work/aurald.log" &
daemon_pid=$!
source tools/wait_daemon.sh
wait_daemon "$daemon_pid" 300 test -S "$sock" ||
  { cat "$work/aurald.log" >&2; exit 1; }

k=0
for n in "${counts[@]}"; do
  k=$((k + 1))
  json=/tmp/aural-load-$k-$n.json
  echo "bench_load.sh: $n streams for $seconds s" >&2
  # A run that fails (say, streams that never end because the daemon is
  # far behind) is a row of the table, not the end of the measurement.
  if ! build/tools/aural load -s "$sock" -n "$n" --seconds "$seconds" \
       --json >"$json"; then
    echo '{"streams": '"$n"', "failed": true}' >"$json"
  fi
done

/usr/bin/python3 - "$work/bench.json" "$precision" "$limit_ms" "${counts[@]}" <<'PY'
import json, sys
bench = json.load(open(sys.argv[1]))
precision = sys.argv[2]
limit = float(sys.argv[3])
counts = sys.argv[4:]
print("%6s %22s %15s %6s %10s %8s" % ("N", "p50 / p99 / max (ms)", "worst p99 (ms)",
                                      "lost", "CPU/stream", "p99 ok"))
for k, n in enumerate(counts, 1):
    r = json.load(open("/tmp/aural-load-%d-%s.json" % (k, n)))
    if r.get("failed"):
        print("%6d %22s %15s %6s %10s %8s" % (r["streams"], "run failed", "-", "-", "-", "NO"))
        continue
    lat = r["latency_ms"]
    ok = r["chunks_lost"] == 0 and lat["worst_stream_p99"] <= limit
    print("%6d %22s %15.0f %6d %9.2f%% %8s" % (
        r["streams"], "%.0f / %.0f / %.0f" % (lat["p50"], lat["p99"], lat["max"]),
        lat["worst_stream_p99"], r["chunks_lost"], r["cpu_percent_per_stream"],
        "yes" if ok else "NO"))
ac = bench["all_cpus"]
one = bench["chunk_frames_per_s"] if precision == "f32" else bench["bf16"]["chunk_frames_per_s"]
both = ac["chunk_frames_per_s"] if precision == "f32" else ac["bf16_chunk_frames_per_s"]
cpus = ac["cpus"]
fps = both if cpus > 1 else one
print("encoder alone (aural bench, chunk mode, %s, a stream per CPU on %d CPU%s at once): "
      "%.0f real-time streams at most" % (precision, cpus, "s" if cpus > 1 else "", fps / 100))
PY
