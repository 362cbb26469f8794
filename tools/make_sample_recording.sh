#!/usr/bin/env bash
# Regenerates models/sample.flac, the bundled demo recording: a few English
# sentences spoken by espeak-ng at its native 22.05 kHz, stored as FLAC (so
# the demo exercises FLAC decoding and resampling). Needs espeak-ng and sox
# (tools/setup.sh --reference). Takes no arguments.
set -euo pipefail
# It replaces a file of the checkout: anything on the command line (a
# --help among it) is answered before that.
case "${1:-}" in
  -h|--help) sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
if [[ $# -gt 0 ]]; then
  echo "make_sample_recording.sh: takes no arguments, not '$*' (see --help)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text="The quick brown fox jumps over the lazy dog. \
A streaming encoder turns every ten milliseconds of sound into a frame."
espeak-ng -v en-us -s 165 -w "$tmp/sample.wav" "$text"
sox "$tmp/sample.wav" -C 8 models/sample.flac
echo "wrote models/sample.flac: $(soxi -D models/sample.flac) s"
