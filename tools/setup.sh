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
  libuv1-dev portaudio19-dev libcmocka-dev libespeak-ng-dev zlib1g-dev
  python3 python3-numpy sox util-linux systemd man-db groff-base espeak-ng
  sphinxbase-utils
  libhiredis-dev redis-server python3-redis
  libwebsockets-dev chromium nodejs python3-prometheus-client openssl curl
)
arch=()
if [[ "${1:-}" == "--reference" ]]; then
  packages+=(python3-torch python3-torchaudio libopenblas0-pthread
             fortunes fortune-mod wamerican espeak-ng sox libsoxr0 pocketsphinx-en-us)
elif [[ "${1:-}" == "--aarch64" ]]; then
  # The cross compiler, qemu-user and the arm64 builds of the libraries
  # that the library and the CLI use (tools/cross_aarch64.sh; aurald is
  # left out there).
  arch=(arm64)
  packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
             libfftw3-dev:arm64 libsoxr-dev:arm64 libsndfile1-dev:arm64
             libcmocka-dev:arm64 libespeak-ng-dev:arm64 zlib1g-dev:arm64
             libhiredis-dev:arm64)
elif [[ $# -gt 0 ]]; then
  echo "usage: tools/setup.sh [--reference | --aarch64]" >&2
  exit 2
fi

# A package without an architecture is this machine's (or "all"): with
# arm64 packages installed too, its bare name would match both.
native=$(dpkg --print-architecture)
missing=()
for p in "${packages[@]}"; do
  q=("$p")
  [[ $p == *:* ]] || q=("$p:$native" "$p:all")
  status=""
  for n in "${q[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$n" 2>/dev/null || true)
    [[ -n $status ]] && break
  done
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
for a in "${arch[@]}"; do
  dpkg --print-foreign-architectures | grep -qx "$a" ||
    "${sudo[@]}" dpkg --add-architecture "$a"
done
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
