# Sourced by the scripts that start aurald (demo.sh, web_demo.sh,
# bench_load.sh):
#
#   wait_daemon PID SECONDS COMMAND [ARGS...]
#
# Waits until COMMAND succeeds (the socket is there, /healthz answers) while
# the daemon PID runs. Returns 0 then; 1, saying why on stderr, when the
# daemon exits first or SECONDS pass. The start takes as long as the model,
# lexicon and LM take to load: seconds on a busy or slow machine, the first
# time with nothing in the page cache, so that a fixed wait of a few
# seconds is not enough.
wait_daemon() {
  local pid=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do
    "$@" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "aurald (pid $pid) exited before it was ready" >&2
      return 1
    fi
    sleep 0.1
  done
  "$@" 2>/dev/null && return 0
  echo "aurald (pid $pid) not ready after $secs s" >&2
  return 1
}
