#!/usr/bin/env bash
# Builds every libFuzzer target tests/fuzz/fuzz_NAME.c with clang
# (-fsanitize=fuzzer,address,undefined) into build-fuzz/, then runs each for
# SECONDS (default 60) on a scratch copy of its seed corpus
# tests/fuzz/corpus/NAME/ (plus tests/fuzz/regressions/NAME/, if any), so
# the committed corpus never grows. Prints each target's executions,
# executions per second and coverage, and exits non-zero if any target
# crashed, leaked, hit undefined behaviour or ran out of time or memory;
# the input that did it is left in build-fuzz/artifacts/ (copy it to
# tests/fuzz/regressions/NAME/ once understood).
#   tools/fuzz.sh [SECONDS [TARGET...]]
# Environment: CC (default clang), FUZZ_ARGS (extra libFuzzer flags),
# FUZZ_KEEP=1 keeps the grown scratch corpus (for coverage reports).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
[[ $# -gt 0 ]] && shift
[[ $secs =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS [TARGET...]]" >&2; exit 2; }
cc=${CC:-clang}
out=build-fuzz
mkdir -p "$out/artifacts"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    targets+=("${name#fuzz_}")
  done
fi

# shellcheck disable=SC2207
libs=($(pkg-config --libs fftw3 soxr sndfile espeak-ng zlib))
# shellcheck disable=SC2054,SC2207
cflags=(-std=c11 -D_DEFAULT_SOURCE -g -O1 -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Ilib -Ilib/include -Iproto/include
        $(pkg-config --cflags fftw3 soxr sndfile espeak-ng zlib))

# Each source is compiled once into $out/obj/, and the targets are linked
# from there: with the fuzzer's instrumentation, lib/linalg.c alone takes
# minutes to compile. An object's name holds a checksum of its command line
# (another CC or flag is another object), and the compiler lists the files
# it was made from (-MMD): it is compiled again when one of them is newer,
# or gone.
mkdir -p "$out/obj"
objects=()
compile() { # compile SRC [FLAGS...]: appends its object to objects
  local src=$1 obj sum dep deps=()
  shift
  sum=$(printf '%s\n' "$cc" "${cflags[@]}" "$@" | cksum)
  obj=$out/obj/$(echo "$src" | tr / _)-${sum%% *}.o
  if [[ -f $obj && -f ${obj%.o}.d ]]; then
    # "OBJ: SRC HEADER ... \" over lines.
    read -rd '' -a deps < <(sed -e 's/^[^:]*://' -e 's/\\$//' "${obj%.o}.d") ||
      true
  else
    deps=("${obj%.o}.d") # none: compile it
  fi
  for dep in "${deps[@]}"; do
    if [[ ! -e $dep || $dep -nt $obj ]]; then
      "$cc" "${cflags[@]}" "$@" -MMD -MF "${obj%.o}.d" -c "$src" -o "$obj"
      break
    fi
  done
  objects+=("$obj")
}

for t in "${targets[@]}"; do
  echo "== fuzz_$t: building"
  objects=()
  extra=()
  if [[ $t == daemon ]]; then
    # The daemon's connection handling, without its main().
    # shellcheck disable=SC2207
    extra=($(pkg-config --cflags --libs libuv portaudio-2.0 libwebsockets \
             hiredis))
    # shellcheck disable=SC2207
    dflags=(-DAURAL_SOURCE_WEB='"web"' -DAURAL_INSTALLED_WEB='"web"'
            $(pkg-config --cflags libuv portaudio-2.0 libwebsockets hiredis))
    for src in daemon/*.c; do
      [[ $src == daemon/main.c ]] || compile "$src" "${dflags[@]}"
    done
  elif [[ $t == web ]]; then
    # What the daemon checks of HTTP and WebSocket peers itself.
    compile daemon/webguard.c -Idaemon
  fi
  # The library and protocol sources (the codec's alone for web: its
  # header decoder).
  srcs=(lib/*.c proto/*.c)
  [[ $t == web ]] && srcs=(proto/*.c)
  for src in "${srcs[@]}"; do compile "$src"; done
  "$cc" "${cflags[@]}" "tests/fuzz/fuzz_$t.c" -Idaemon "${objects[@]}" \
    "${extra[@]}" -o "$out/fuzz_$t" "${libs[@]}" -lfftw3_threads -lm -lpthread
done

failed=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  [[ -d $seeds ]] || { echo "fuzz_$t: no seed corpus $seeds" >&2; exit 1; }
  work=$(mktemp -d "$out/corpus-$t.XXXXXX")
  cp "$seeds"/* "$work"/
  if [[ -d tests/fuzz/regressions/$t ]] &&
     compgen -G "tests/fuzz/regressions/$t/*" >/dev/null; then
    cp tests/fuzz/regressions/"$t"/* "$work"/
  fi
  args=(-max_total_time="$secs" -print_final_stats=1 -max_len=65536
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/artifacts/$t-")
  [[ -f tests/fuzz/fuzz_$t.dict ]] && args+=(-dict="tests/fuzz/fuzz_$t.dict")
  log=$out/fuzz_$t.log
  echo "== fuzz_$t: ${secs}s on $(find "$work" -type f | wc -l) seeds" \
       "(log: $log)"
  rc=0
  # shellcheck disable=SC2086
  "$out/fuzz_$t" "${args[@]}" ${FUZZ_ARGS:-} "$work" >"$log" 2>&1 || rc=$?
  # The last status line ("#N DONE cov: C ft: F corp: ...") and the stats.
  grep -E '^#[0-9]+' "$log" | tail -n 1 || true
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
    "$log" || true
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "!! fuzz_$t failed (exit $rc):"
    grep -E '^==[0-9]+==ERROR|SUMMARY|runtime error|Test unit written' "$log" ||
      tail -n 20 "$log"
  fi
  if [[ -n ${FUZZ_KEEP:-} ]]; then
    echo "   corpus kept in $work"
  else
    rm -rf "$work"
  fi
done
exit $failed
