#!/usr/bin/env bash
# tools/wait_daemon.sh, which the scripts that start aurald wait with: a
# daemon that takes 8 s to get ready (aurald loading the bundled model,
# lexicon and LM on a busy machine) is waited for; one that exits first
# is reported at once, as is one that is never ready.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../tools/wait_daemon.sh
source "$here/../../tools/wait_daemon.sh"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Slow: ready after 8 s.
bash -c 'sleep 8; : >"$1"; sleep 60' _ "$tmp/ready" &
pids+=($!)
t0=$SECONDS
wait_daemon "${pids[0]}" 60 test -e "$tmp/ready" 2>"$tmp/err" ||
  fail "a daemon ready after 8 s was not waited for: $(cat "$tmp/err")"
[[ -e "$tmp/ready" ]] || fail "returned before the daemon was ready"
echo "ok: a daemon ready after $((SECONDS - t0)) s"

# Dead: exits after 1 s without getting ready.
bash -c 'sleep 1; exit 1' &
pids+=($!)
t0=$SECONDS
rc=0
wait_daemon "${pids[1]}" 60 test -e "$tmp/never" 2>"$tmp/err" || rc=$?
[[ $rc -ne 0 ]] || fail "a daemon that exited counted as ready"
grep -q "exited before it was ready" "$tmp/err" || fail "no reason: $(cat "$tmp/err")"
(( SECONDS - t0 < 10 )) || fail "a daemon that exited was waited for $((SECONDS - t0)) s"
echo "ok: a daemon that exits is reported at once"

# Never ready: the time limit.
bash -c 'sleep 60' &
pids+=($!)
rc=0
wait_daemon "${pids[2]}" 2 test -e "$tmp/never" 2>"$tmp/err" || rc=$?
[[ $rc -ne 0 ]] && grep -q "not ready after 2 s" "$tmp/err" ||
  fail "no time limit: $(cat "$tmp/err")"
echo "ok: a daemon never ready is given up after the time limit"
