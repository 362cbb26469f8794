#!/usr/bin/env bash
# Installs the Debian packages aural needs, and only those that are missing.
#
#   tools/setup.sh              build and test dependencies
#   tools/setup.sh --reference  also the reference stack (PyTorch,
#                               torchaudio, espeak-ng, sox, CMUdict) that
#                               regenerates golden data, the sample recording
#                               and the word resources
#
# Idempotent: when everything is present it changes nothing and needs no
# network. Runs apt-get as root, through sudo when not root.
set -euo pipefail

packages=(
  build-essential pkg-config meson ninja-build
  libsndfile1-dev libsoxr-dev libfftw3-dev
  libuv1-dev portaudio19-dev libcmocka-dev libespeak-ng-dev
  python3 python3-numpy sox util-linux systemd man-db groff-base espeak-ng
)
if [[ "${1:-}" == "--reference" ]]; then
  packages+=(python3-torch python3-torchaudio libopenblas0-pthread
             fortunes fortune-mod wamerican espeak-ng sox libsoxr0 pocketsphinx-en-us)
elif [[ $# -gt 0 ]]; then
  echo "usage: tools/setup.sh [--reference]" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || {
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
