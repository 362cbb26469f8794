#!/usr/bin/env bash
# The main job on the bundled recording: installs what is missing, builds,
# starts aurald on a private socket with models/sample.flac as a stream paced
# at real time, and runs a subscriber that prints what the stream says as it
# arrives: the words as a live caption when the model has a lexicon and LM
# beside it (the bundled one has), else the decoded tokens of each 500 ms
# chunk when it has a CTC head, else a summary of the embeddings. Both exit
# when the recording has been played.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
TARGETS="daemon/aurald tools/aural" tools/build.sh build

model=${AURAL_MODEL:-}
info=$(build/tools/aural info ${model:+"$model"})
echo "$info"
echo

dir=$(mktemp -d)
daemon_pid=
cleanup() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# --hold: the file starts streaming when its subscriber arrives, so the
# subscriber sees it from the first chunk.
build/daemon/aurald -s "$dir/aural.sock" ${model:+-m "$model"} \
  --file models/sample.flac --realtime --hold --exit-when-done \
  --log-level warn &
daemon_pid=$!
source tools/wait_daemon.sh
wait_daemon "$daemon_pid" 300 test -S "$dir/aural.sock"

output=embeddings
if grep -q '^words        lexicon' <<<"$info"; then
  output=words
elif grep -q '^CTC head     [0-9]' <<<"$info"; then
  output=text
fi
build/tools/aural sub -s "$dir/aural.sock" --stream sample.flac \
  --output "$output" --until-end
wait "$daemon_pid"
daemon_pid=
