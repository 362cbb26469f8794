#!/usr/bin/env bash
# The main job on the bundled recording: installs what is missing, builds,
# and turns models/sample.flac into log-mel features, with a summary and a
# coarse spectrogram of what was produced.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
TARGETS=tools/aural tools/build.sh build
out=build/sample-features.npy
build/tools/aural encode --show -o "$out" models/sample.flac
