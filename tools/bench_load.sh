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
# JSON goes to DIR/K-N.json, DIR a new aural-load.XXXXXX in $TMPDIR (or
# /tmp) named beneath the table (K: the run's place in the list, so a
# count may be given more than once); copies run at once share no files,
# sockets or daemons.
# Ctrl-C ends the run under way (its row covers what was measured), skips
# the rest, prints the table and stops aurald (exit status 130).
set -euo pipefail
# Paths on the command line are the caller's, from where it was run.
caller=$PWD
cd "$(dirname "$0")/.."

usage() { echo "bench_load.sh: $1 (see --help)" >&2; exit 2; }
# A value that must follow an option: the next argument, which is there.
need() { [[ $# -ge 2 ]] || usage "$1 needs a value"; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && (( 10#$1 >= 1 )); }

model=""
seconds=60
threads=""
precision=f32
limit_ms=250
counts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) need "$@"; model=$2; shift 2 ;;
    --seconds) need "$@"; seconds=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --limit-ms) need "$@"; limit_ms=$2; shift 2 ;;
    --precision) need "$@"; precision=$2; shift 2 ;;
    -h|--help)
      # The comment block above, without the interpreter line.
      sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option '$1'" ;;
    *) counts+=("$1"); shift ;;
  esac
done
[[ ${#counts[@]} -gt 0 ]] || counts=(1 10 50 100 200)
# Checked here, before the setup, the build and the encoder's measurement,
# rather than as runs of 'aural load' that each fail.
for i in "${!counts[@]}"; do
  is_uint "${counts[i]}" ||
    usage "a stream count is a whole number of 1 or more, not '${counts[i]}'"
  counts[i]=$((10#${counts[i]}))
done
is_uint "$seconds" || usage "--seconds takes a whole number of 1 or more, not '$seconds'"
[[ -z "$threads" ]] || is_uint "$threads" ||
  usage "--threads takes a whole number of 1 or more, not '$threads'"
[[ $limit_ms =~ ^[0-9]+([.][0-9]+)?$ ]] ||
  usage "--limit-ms takes a number of milliseconds, not '$limit_ms'"
[[ $precision == f32 || $precision == bf16 ]] ||
  usage "--precision takes f32 or bf16, not '$precision'"
if [[ -n "$model" ]]; then
  [[ $model == /* ]] || model=$caller/$model
  [[ -r "$model" && -f "$model" ]] ||
    { echo "bench_load.sh: -m $model: no such readable file" >&2; exit 1; }
fi

tools/setup.sh
TARGETS="tools/aural daemon/aurald" tools/build.sh build

work=$(mktemp -d)
daemon_pid=""
results=""
reported=0
cleanup() {
  if [[ -n "$daemon_pid" ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  # Runs that no table names (the script was killed) leave nothing.
  [[ -z "$results" || $reported -eq 1 ]] || rm -rf "$results"
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
# In a session of its own, so that a Ctrl-C at the terminal reaches this
# script and 'aural load' but not the daemon, which cleanup stops.
setsid build/daemon/aurald "${daemon_args[@]}" 2>"$work/aurald.log" &
daemon_pid=$!
source tools/wait_daemon.sh
wait_daemon "$daemon_pid" 300 test -S "$sock" ||
  { cat "$work/aurald.log" >&2; exit 1; }

results=$(mktemp -d -t aural-load.XXXXXX)
k=0
interrupted=0
for n in "${counts[@]}"; do
  k=$((k + 1))
  json=$results/$k-$n.json
  echo "bench_load.sh: $n streams for $seconds s" >&2
  # A run that fails (say, streams that never end because the daemon is
  # far behind) is a row of the table, not the end of the measurement.
  # 'aural load' writes its report also when chunks were lost (3) and when
  # interrupted (130: what was measured until then, the last row).
  rc=0
  build/tools/aural load -s "$sock" -n "$n" --seconds "$seconds" \
    --json >"$json" || rc=$?
  if [[ $rc -eq 130 ]]; then
    interrupted=1
    [[ -s "$json" ]] || echo '{"streams": '"$n"', "failed": true}' >"$json"
    break
  elif [[ $rc -ne 0 && $rc -ne 3 ]] || [[ ! -s "$json" ]]; then
    echo '{"streams": '"$n"', "failed": true}' >"$json"
  fi
done

/usr/bin/python3 - "$work/bench.json" "$precision" "$limit_ms" "$results" \
  "${counts[@]:0:k}" <<'PY'
import json, sys
bench = json.load(open(sys.argv[1]))
precision = sys.argv[2]
limit = float(sys.argv[3])
results = sys.argv[4]
counts = sys.argv[5:]
def ms(x):
    return "-" if x is None else "%.0f" % x
print("%6s %22s %15s %6s %10s %8s" % ("N", "p50 / p99 / max (ms)", "worst p99 (ms)",
                                      "lost", "CPU/stream", "p99 ok"))
for k, n in enumerate(counts, 1):
    r = json.load(open("%s/%d-%s.json" % (results, k, n)))
    if r.get("failed"):
        print("%6d %22s %15s %6s %10s %8s" % (r["streams"], "run failed", "-", "-", "-", "NO"))
        continue
    lat = r["latency_ms"]
    worst = lat["worst_stream_p99"]
    ok = r["chunks_lost"] == 0 and worst is not None and worst <= limit
    cpu = r["cpu_percent_per_stream"]
    print("%6d %22s %15s %6d %10s %8s%s" % (
        r["streams"], "%s / %s / %s" % (ms(lat["p50"]), ms(lat["p99"]), ms(lat["max"])),
        ms(worst), r["chunks_lost"], "-" if cpu is None else "%.2f%%" % cpu,
        "yes" if ok else "NO", " (interrupted)" if r.get("interrupted") else ""))
ac = bench["all_cpus"]
one = bench["chunk_frames_per_s"] if precision == "f32" else bench["bf16"]["chunk_frames_per_s"]
both = ac["chunk_frames_per_s"] if precision == "f32" else ac["bf16_chunk_frames_per_s"]
cpus = ac["cpus"]
fps = both if cpus > 1 else one
print("encoder alone (aural bench, chunk mode, %s, a stream per CPU on %d CPU%s at once): "
      "%.0f real-time streams at most" % (precision, cpus, "s" if cpus > 1 else "", fps / 100))
print("each run's JSON: %s/K-N.json" % results)
PY
reported=1
[[ $interrupted -eq 0 ]] || exit 130
