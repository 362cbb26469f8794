#!/usr/bin/env bash
# Installs the speech synthesizers of the training data (Debian packages):
# espeak-ng, flite, festival with three English voices, sox.
set -euo pipefail
pkgs="espeak-ng flite festival festlex-cmu festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts sox libsox-fmt-base"
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null | awk '$4 != "installed" {print $1}' || true)
for p in $pkgs; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [[ -n ${missing// } ]]; then
  [[ $(id -u) == 0 ]] || { echo "setup_engines.sh: run as root to install:$missing" >&2; exit 1; }
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi
