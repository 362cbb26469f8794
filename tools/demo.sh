#!/usr/bin/env bash
# The main job on the bundled recording: installs what is missing, builds,
# describes the default model, then streams models/sample.flac through the
# frontend and the encoder (50-frame chunks) and summarises what came out.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
TARGETS=tools/aural tools/build.sh build
build/tools/aural info
echo
build/tools/aural encode --show -o build/sample-embeddings.npy models/sample.flac
