#!/usr/bin/env bash
# Every test: installs what is missing, builds with warnings as errors, runs
# the unit and integration tests, then does it all again under
# AddressSanitizer + UndefinedBehaviorSanitizer, and runs the daemon's
# suites (daemon, mic) under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

passed=0
failed=0
run_suite() { # DIR LABEL MESON_SETUP_ARGS...
  local dir=$1 label=$2
  shift 2
  echo "== $label: building in $dir"
  tools/build.sh "$dir" -Dwerror=true "$@"
  echo "== $label: testing"
  local rc=0
  # shellcheck disable=SC2086
  meson test -C "$dir" --print-errorlogs ${SUITES:-} || rc=$?
  # Count CMocka test cases from the full log, for the closing line.
  local p f
  p=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$dir/meson-logs/testlog.txt" |
      awk '{s += $4} END {print s + 0}' || true)
  f=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$dir/meson-logs/testlog.txt" |
      awk '{s += $4} END {print s + 0}' || true)
  # The integration suite prints "integration: N passed, M failed".
  local ip if_
  ip=$(grep -oE '^integration: [0-9]+ passed' "$dir/meson-logs/testlog.txt" |
       awk '{s += $2} END {print s + 0}' || true)
  if_=$(grep -oE '^integration: [0-9]+ passed, [0-9]+ failed' \
        "$dir/meson-logs/testlog.txt" | awk '{s += $4} END {print s + 0}' || true)
  p=$((p + ip))
  f=$((f + if_))
  passed=$((passed + p))
  failed=$((failed + f))
  if [[ $rc -ne 0 && $f -eq 0 ]]; then failed=$((failed + 1)); fi
}

run_suite build "release build"
run_suite build-asan "ASan+UBSan build" -Db_sanitize=address,undefined -Db_lundef=false
# The daemon's threads (loop, workers, capture) under ThreadSanitizer: the
# integration suite, which fails on any report (a daemon's exit status is
# then non-zero), the capture source's handoff with a fake device, the
# log level that every thread reads and a reload writes; and
# the library's thread tests (the headers' thread-safety promises: one
# model shared by streams on several threads, objects created at once),
# about 15 s in all.
SUITES="daemon mic log frontend_threads audiofile_threads encoder_threads \
stream_threads g2p_lib_threads" \
TARGETS="daemon/aurald tools/aural tests/test_mic tests/test_log tests/test_frontend \
tests/test_audiofile tests/test_encoder tests/test_stream tests/test_g2p_lib" \
  run_suite build-tsan "TSan build" -Db_sanitize=thread -Db_lundef=false

echo "tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
