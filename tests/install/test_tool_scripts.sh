#!/usr/bin/env bash
# The scripts of tools/ a user runs (bench_load.sh, bench_compare.sh,
# web_demo.sh, bench_offline.sh, cross_aarch64.sh,
# make_sample_recording.sh, bench_cluster.py, bench_web_latency.py), as a
# user runs them: --help prints the whole comment block that documents a
# shell script, and a bad command line is refused (exit 2, one line)
# before anything is installed, built or measured; bench_compare.sh's
# model flags go on as given, --flag=VALUE too. The runs then go through
# stand-ins for setup, build, aural, aurald, curl and sox: in
# bench_load.sh a run that lost chunks is a row with its count, and a
# Ctrl-C ends the run under way, skips the rest, prints the table and
# stops the daemon (exit 130); web_demo.sh, interrupted while aurald
# starts, stops it and ends (exit 130) without a word; bench_cluster.py
# and bench_web_latency.py stop their aurald (and remove its directory)
# when a run fails; bench_offline.sh, its sox failing halfway through a
# corpus file, leaves no file under that name for a later run to take as
# made. Nothing is left behind. The copies live under a path with a space
# in it.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
# Every temporary file of the scripts goes here, where it is looked for
# and removed at the end, also when an old script fails.
export TMPDIR=$tmp/t
mkdir "$TMPDIR"
bench_pid=""
cleanup() {
  [[ -z "$bench_pid" ]] || kill -KILL -- "-$bench_pid" 2>/dev/null || true
  [[ ! -e "$tmp/fake/web-aurald.pid" ]] || kill "$(cat "$tmp/fake/web-aurald.pid")" 2>/dev/null || true
  [[ ! -e "$tmp/fake/aurald.pid" ]] || kill "$(cat "$tmp/fake/aurald.pid")" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

root="$tmp/a tree"
mkdir -p "$root/tools/python" "$root/build/tools" "$root/build/daemon" \
  "$root/models" "$tmp/fake" "$tmp/cwd"
cp "$src/tools/python/aural_client.py" "$root/tools/python/"
cp "$src/tools/bench_load.sh" "$src/tools/bench_compare.sh" \
   "$src/tools/web_demo.sh" "$src/tools/bench_cluster.py" \
   "$src/tools/bench_offline.sh" "$src/tools/bench_web_latency.py" \
   "$src/tools/cross_aarch64.sh" "$src/tools/make_sample_recording.sh" \
   "$src/tools/wait_daemon.sh" "$root/tools/"
cp "$src/models/sample.flac" "$root/models/"
# Setup and build leave a mark; the argument checks must come first.
for f in setup.sh build.sh; do
  printf '#!/bin/sh\necho "$0" >>"%s/fake/ran"\n' "$tmp" >"$root/tools/$f"
  chmod +x "$root/tools/$f"
done

# --help: every line of the comment block after the interpreter line.
for s in bench_load.sh bench_compare.sh web_demo.sh bench_offline.sh \
  cross_aarch64.sh make_sample_recording.sh; do
  want=$(sed -n '2,/^[^#]/p' "$root/tools/$s" | sed '$d; s/^# \{0,1\}//')
  got=$("$root/tools/$s" --help) || fail "$s --help: exit $?"
  [[ "$got" == "$want" ]] ||
    fail "$s --help is not its comment block:"$'\n'"$(diff <(echo "$want") <(echo "$got"))"
done
echo "ok: --help prints the whole comment block"

bad() {  # SCRIPT ARGS...: refused with exit 2 and a line, nothing run
  local s=$1 rc=0
  shift
  rm -f "$tmp/fake/ran"
  "$root/tools/$s" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc -eq 2 ]] || fail "$s $*: exit $rc, not 2: $(cat "$tmp/err")"
  grep -q "^${s}: " "$tmp/err" || fail "$s $*: no message of its own: $(cat "$tmp/err")"
  ! grep -q -e Traceback -e 'unbound variable' "$tmp/err" ||
    fail "$s $*: $(cat "$tmp/err")"
  [[ ! -e "$tmp/fake/ran" ]] || fail "$s $*: ran $(cat "$tmp/fake/ran") before refusing"
}
bad bench_load.sh -m
bad bench_load.sh --seconds
bad bench_load.sh --seconds 0 10
bad bench_load.sh abc
bad bench_load.sh 10 -5
bad bench_load.sh --precision f16
bad bench_load.sh --threads x
bad bench_load.sh --limit-ms soon
bad bench_load.sh --bogus
bad bench_compare.sh --help-me
bad bench_compare.sh --seconds 2
bad bench_compare.sh --layers
bad bench_compare.sh --layers four
bad bench_compare.sh --pos learned
bad web_demo.sh --port
bad web_demo.sh 8080x
bad web_demo.sh 0
bad web_demo.sh 65536
bad web_demo.sh 8080 8081
bad bench_offline.sh -j
bad bench_offline.sh -j 0
bad bench_offline.sh --files many
bad bench_offline.sh --corpus
bad bench_offline.sh extra
bad cross_aarch64.sh --build-dir x
bad cross_aarch64.sh build-a build-b
bad make_sample_recording.sh --voice en-gb
bad bench_cluster.py 0
bad bench_web_latency.py --streams 0
bad bench_web_latency.py --seconds -1
bad bench_cluster.py --seconds 0 5
bad bench_cluster.py 20 x
echo "ok: bad command lines are refused before setup and build"

# Stand-ins: aurald binds its socket and waits; 'aural load' reports a
# clean run for 1 stream, 5 lost chunks for 2 (exit 3), and for 3 waits
# for the Ctrl-C, then reports and exits 130, as the real one does.
cat >"$root/build/daemon/aurald" <<EOF
#!/usr/bin/env bash
while [[ \$# -gt 0 ]]; do [[ \$1 == -s ]] && sock=\$2; shift; done
echo \$\$ >"$tmp/fake/aurald.pid"
exec /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); time.sleep(600)' "\$sock"
EOF
cat >"$root/build/tools/aural" <<EOF
#!/usr/bin/env bash
report() {  # STREAMS LOST INTERRUPTED
  echo '{"streams":'\$1',"chunks_lost":'\$2',"interrupted":'\$3',
    "latency_ms":{"p50":20,"p99":30,"max":40,"worst_stream_p99":35},
    "cpu_percent_per_stream":1.5}'
}
case \$1 in
  bench)
    [[ \$2 != --save-model ]] || { : >"\$3"; exit 0; }
    printf '%s\\n' "\$@" >"$tmp/fake/bench-args"
    echo '{"chunk_frames_per_s":10000,"bf16":{"chunk_frames_per_s":15000},
      "all_cpus":{"cpus":2,"chunk_frames_per_s":19000,"bf16_chunk_frames_per_s":28000}}' ;;
  load)
    n=\$(echo "\$@" | sed 's/.* -n \([0-9]*\) .*/\1/')
    echo "\$n" >>"$tmp/fake/loads"
    case \$n in
      1) report 1 0 false ;;
      2) report 2 5 false; exit 3 ;;
      5) exit 1 ;;
      3) # Its sleep, a background job, ignores SIGINT: killed here.
         trap 'kill \$! 2>/dev/null; report 3 0 true; exit 130' INT
         : >"$tmp/fake/waiting"
         sleep 30 & wait ;;
    esac ;;
esac
EOF
chmod +x "$root/build/daemon/aurald" "$root/build/tools/aural"

# In a session of its own, as a terminal's job in a group of its own, with
# SIGINT as a terminal leaves it (bash ignores it in its background jobs).
/usr/bin/python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execv(sys.argv[1], sys.argv[1:])' "$root/tools/bench_load.sh" --seconds 2 1 2 3 4 \
  >"$tmp/out" 2>"$tmp/err" &
bench_pid=$!
for ((i = 0; i < 200; i++)); do
  [[ -e "$tmp/fake/waiting" ]] && break
  kill -0 "$bench_pid" 2>/dev/null || break
  sleep 0.05
done
[[ -e "$tmp/fake/waiting" ]] || fail "the run of 3 streams never started: $(cat "$tmp/err")"
kill -INT -- "-$bench_pid"   # Ctrl-C: the terminal signals the whole group
rc=0
wait "$bench_pid" || rc=$?
bench_pid=""
cat "$tmp/out"
[[ $rc -eq 130 ]] || fail "interrupted: exit $rc, not 130: $(cat "$tmp/err")"
[[ "$(cat "$tmp/fake/loads" | tr '\n' ' ')" == "1 2 3 " ]] ||
  fail "runs made: $(cat "$tmp/fake/loads" | tr '\n' ' '), not 1 2 3"
grep -Eq '^ +2 .* 5 +1\.50% +NO$' "$tmp/out" || fail "the run that lost 5 chunks is not a row with them"
grep -Eq '^ +3 .*\(interrupted\)$' "$tmp/out" || fail "the interrupted run is not a row"
! grep -Eq '^ +4 ' "$tmp/out" || fail "a run after the Ctrl-C"
dir=$(sed -n "s|^each run's JSON: \(.*\)/K-N.json$|\1|p" "$tmp/out")
[[ -f "$dir/2-2.json" && -f "$dir/3-3.json" ]] || fail "no JSON in '$dir'"
if kill -0 "$(cat "$tmp/fake/aurald.pid")" 2>/dev/null; then
  fail "aurald still runs"
fi
[[ "$(ls "$TMPDIR")" == "$(basename "$dir")" ]] ||
  fail "left in TMPDIR: $(ls "$TMPDIR" | tr '\n' ' ')"
echo "ok: lost chunks are counted; a Ctrl-C ends the run, prints the table, stops aurald"

# A model given by a path relative to where bench_load.sh is run.
: >"$tmp/cwd/rel model.safetensors"
(cd "$tmp/cwd" && "$root/tools/bench_load.sh" -m "rel model.safetensors" \
  --seconds 1 1) >"$tmp/out" 2>"$tmp/err" || fail "bench_load.sh -m RELATIVE: $(cat "$tmp/err")"
grep -qx -- "$tmp/cwd/rel model.safetensors" "$tmp/fake/bench-args" ||
  fail "bench_load.sh -m RELATIVE measured $(tr '\n' ' ' <"$tmp/fake/bench-args")"
echo "ok: bench_load.sh takes -m from where it is run"

# bench_compare.sh hands its model flags on as given, --flag=VALUE too
# (aural bench and the reference take both forms): its checks refused
# that form, which it had passed on before they came.
rc=0
"$root/tools/bench_compare.sh" --layers=4 --pos=none --window 10 \
  >"$tmp/out" 2>"$tmp/err" || rc=$?
! grep -q "^bench_compare.sh: " "$tmp/err" ||
  fail "bench_compare.sh --layers=4 --pos=none: $(cat "$tmp/err")"
[[ "$(tr '\n' ' ' <"$tmp/fake/bench-args")" == \
   "bench --json --layers=4 --pos=none --window 10 " ]] ||
  fail "bench_compare.sh measured $(tr '\n' ' ' <"$tmp/fake/bench-args")"
bad bench_compare.sh --layers=four
bad bench_compare.sh --pos=
echo "ok: bench_compare.sh takes --flag=VALUE"

# web_demo.sh, Ctrl-C while aurald still starts (here its /healthz takes
# long and fails): the INT trap ran the cleanup, which stopped aurald, and
# the script went on; wait_daemon said 'aurald (pid N) exited before it
# was ready' (exit 1), and the EXIT trap ran the cleanup again, its kill
# aimed at a pid no longer aurald's. It ends 130, saying nothing.
rm -f "$tmp/fake/aurald.pid"
mkdir "$tmp/notready"
printf '#!/bin/sh\nsleep 5\nexit 7\n' >"$tmp/notready/curl"
chmod +x "$tmp/notready/curl"
before=$(ls "$TMPDIR")
PATH=$tmp/notready:$PATH /usr/bin/python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execv(sys.argv[1], sys.argv[1:])' "$root/tools/web_demo.sh" 8089 \
  >"$tmp/out" 2>"$tmp/err" &
bench_pid=$!
for ((i = 0; i < 200; i++)); do
  [[ -s "$tmp/fake/aurald.pid" ]] && break
  sleep 0.05
done
[[ -s "$tmp/fake/aurald.pid" ]] || fail "web_demo.sh started no aurald: $(cat "$tmp/err")"
kill -INT -- "-$bench_pid"
rc=0
wait "$bench_pid" || rc=$?
bench_pid=""
[[ $rc -eq 130 ]] || fail "web_demo.sh interrupted: exit $rc, not 130: $(cat "$tmp/err")"
[[ ! -s "$tmp/err" ]] || fail "web_demo.sh interrupted said: $(cat "$tmp/err")"
if kill -0 "$(cat "$tmp/fake/aurald.pid")" 2>/dev/null; then
  fail "web_demo.sh left its aurald running"
fi
[[ "$(ls "$TMPDIR")" == "$before" ]] || fail "web_demo.sh left its directory"
echo "ok: web_demo.sh, interrupted while aurald starts, stops it and ends"

# bench_cluster.py: 'aural load' fails in the first run; aurald goes too.
rm -f "$tmp/fake/aurald.pid"
rc=0
timeout 60 /usr/bin/python3 "$root/tools/bench_cluster.py" --seconds 1 5 \
  >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ -e "$tmp/fake/aurald.pid" ]] || fail "bench_cluster.py started no aurald"
for ((i = 0; i < 100; i++)); do
  kill -0 "$(cat "$tmp/fake/aurald.pid")" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$(cat "$tmp/fake/aurald.pid")" 2>/dev/null; then
  fail "bench_cluster.py left its aurald running"
fi
[[ $rc -eq 1 ]] || fail "bench_cluster.py, aural load failing: exit $rc: $(cat "$tmp/err")"
grep -q "aural load: exit status 1" "$tmp/err" || fail "no reason: $(cat "$tmp/err")"
! ls "$TMPDIR" | grep -q aural-bench-cluster ||
  fail "bench_cluster.py left $(ls "$TMPDIR" | grep aural-bench-cluster)"
echo "ok: bench_cluster.py stops its aurald when a run fails"

# bench_offline.sh: sox cut off while it writes the first corpus file (a
# FLAC); the run fails, and no utt0000.flac is there to be skipped later.
mkdir "$tmp/bin"
printf '#!/bin/sh\n# -w PATH or --stdout\nwhile [ $# -gt 1 ]; do [ "$1" = -w ] && { echo RIFF >"$2"; exit 0; }; shift; done\necho RIFF\n' \
  >"$tmp/bin/espeak-ng"
printf '#!/bin/sh\nfor a; do out=$a; done\nfor a; do case $a in *.flac) out=$a;; esac; done\necho cut >"$out"; exit 1\n' \
  >"$tmp/bin/sox"
chmod +x "$tmp/bin/espeak-ng" "$tmp/bin/sox"
rc=0
# --corpus relative to where the script is run, as the user gave it.
(cd "$tmp/cwd" && PATH=$tmp/bin:$PATH "$root/tools/bench_offline.sh" \
  --files 2 --corpus corpus) >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ $rc -ne 0 ]] || fail "bench_offline.sh went on past a failed sox"
[[ -d "$tmp/cwd/corpus" ]] || fail "bench_offline.sh --corpus corpus: not made in its working directory"
mv "$tmp/cwd/corpus" "$tmp/corpus"
[[ -z "$(ls -A "$tmp/corpus")" ]] ||
  fail "bench_offline.sh left in its corpus: $(ls -A "$tmp/corpus" | tr '\n' ' ')"
echo "ok: bench_offline.sh's corpus holds whole files only"

# bench_web_latency.py: its aurald (a stand-in that says it serves and
# never answers) fails the run; it is stopped and its directory removed.
cat >"$tmp/bin/aurald" <<EOF
#!/usr/bin/env bash
while [[ \$# -gt 0 ]]; do [[ \$1 == -s ]] && sock=\$2; shift; done
echo \$\$ >"$tmp/fake/web-aurald.pid"
echo "aurald info: http: listening on http://127.0.0.1:1/"
echo "aurald info: serving \$sock"
exec /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); time.sleep(600)' "\$sock"
EOF
chmod +x "$tmp/bin/aurald"
rc=0
timeout 60 /usr/bin/python3 "$root/tools/bench_web_latency.py" --streams 1 \
  --seconds 1 --aurald "$tmp/bin/aurald" >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ $rc -ne 0 ]] || fail "bench_web_latency.py: a daemon that never answers gave a result"
[[ -e "$tmp/fake/web-aurald.pid" ]] || fail "bench_web_latency.py started no aurald: $(cat "$tmp/err")"
for ((i = 0; i < 100; i++)); do
  kill -0 "$(cat "$tmp/fake/web-aurald.pid")" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$(cat "$tmp/fake/web-aurald.pid")" 2>/dev/null; then
  fail "bench_web_latency.py left its aurald running"
fi
! ls "$TMPDIR" | grep -q aural-weblat ||
  fail "bench_web_latency.py left $(ls "$TMPDIR" | grep aural-weblat)"
echo "ok: bench_web_latency.py stops its aurald and removes its directory"
