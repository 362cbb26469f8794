#!/usr/bin/env bash
# Configures (once) and builds aural into DIR (default: build), quietly
# unless something fails. Extra arguments go to 'meson setup' on first
# configuration. TARGETS (space-separated ninja targets) limits the build.
#   [TARGETS="tools/aural"] tools/build.sh [DIR [MESON_SETUP_ARGS...]]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
[[ $# -gt 0 ]] && shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [[ ! -f "$dir/build.ninja" ]]; then
  meson setup "$dir" "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
elif [[ $# -gt 0 ]]; then
  meson configure "$dir" "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
# shellcheck disable=SC2086
ninja -C "$dir" ${TARGETS:-} >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
