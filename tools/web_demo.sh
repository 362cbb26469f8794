#!/usr/bin/env bash
# The live page on the bundled recording: builds, starts aurald with
# --http on a loopback port and models/sample.flac as a stream paced at
# real time that starts when the page subscribes (--hold), and opens the
# page in the default browser (or prints its address). The page also
# offers "use my microphone". Ctrl-C stops aurald.
#
#   tools/web_demo.sh [PORT]        # default 8080
set -euo pipefail
cd "$(dirname "$0")/.."
# The command line is checked before anything is installed or built.
case "${1:-}" in
  -h|--help) sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
if [[ $# -gt 1 ]] || [[ $# -eq 1 && ! ( $1 =~ ^[0-9]{1,5}$ &&
                                       10#$1 -ge 1 && 10#$1 -le 65535 ) ]]; then
  echo "web_demo.sh: one argument at most, a port from 1 to 65535," \
       "not '$*' (see --help)" >&2
  exit 2
fi
port=$((10#${1:-8080}))
tools/setup.sh
TARGETS="daemon/aurald tools/aural" tools/build.sh build

dir=$(mktemp -d)
# In a session of its own: a Ctrl-C reaches this script, whose cleanup
# stops aurald once (a second signal would make it skip its flush).
setsid build/daemon/aurald -s "$dir/aural.sock" --http "127.0.0.1:$port" --hold \
  --file models/sample.flac --realtime &
daemon_pid=$!
cleanup() {
  kill -TERM "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  rm -rf "$dir"
}
# Ctrl-C and SIGTERM end the script, and its end alone cleans up: a trap
# of theirs that cleaned up returned into the script, which went on
# without aurald, and cleaned up again at its end.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
source tools/wait_daemon.sh
wait_daemon "$daemon_pid" 300 curl -sf -o /dev/null "http://127.0.0.1:$port/healthz"
url="http://127.0.0.1:$port/"
echo "the page: $url (Ctrl-C stops aurald)"
if command -v xdg-open >/dev/null && [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
  xdg-open "$url" >/dev/null 2>&1 || true
fi
wait "$daemon_pid"
