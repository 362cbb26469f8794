#!/usr/bin/env bash
# Packs the speech synthesizers the training data comes from (espeak-ng,
# flite, festival with its English voices, sox) with every shared library
# they load, the dynamic loader included, into one tar.xz, so that
# train_multi.py can synthesize on a machine where they are not installed:
# it unpacks the archive and runs each program through the packed loader
# (engines.py, AURAL_SYNTH_ROOT). Only English espeak-ng data is kept.
# Paths under /lib are stored under /usr/lib (Debian 12 merges the two), so
# that a library's version symlink and its file land in one directory.
#
#   tools/train/synthpack.sh OUT.tar.xz
set -euo pipefail
out=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
tools/train/setup_engines.sh
list=$(mktemp)
trap 'rm -f "$list"' EXIT
bins="/usr/bin/espeak-ng /usr/bin/flite /usr/bin/festival /usr/bin/sox"
# This machine's build of a package, or the architecture-independent one:
# with another architecture's build also installed (tools/setup.sh
# --aarch64 brings libespeak-ng1:arm64), the bare name is ambiguous.
native=$(dpkg --print-architecture)
files_of() {
  dpkg -L "$1:$native" 2>/dev/null || dpkg -L "$1:all" 2>/dev/null || dpkg -L "$1"
}
{
  for p in flite libflite1 espeak-ng libespeak-ng1 festival festlex-cmu festlex-poslex \
           festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts sox libsox3 libsox-fmt-base; do
    files_of "$p" | while read -r f; do [[ -f $f ]] && echo "$f"; done
  done | grep -v -E '/(doc|man|lintian|info)/'
  # espeak-ng's data: English only (and what every language needs).
  find /usr/lib/x86_64-linux-gnu/espeak-ng-data -type f \
    \( -path '*/lang/*' -o -path '*/voices/*' -o -name 'en_dict' -o -name 'phon*' \
       -o -name 'intonations' \)
  # Every library the programs (and libsox's format modules) load.
  for b in $bins /usr/lib/x86_64-linux-gnu/sox/*.so; do
    ldd "$b" | awk '/=> \//{print $3} /^\s*\/lib64/{print $1}'
  done | sort -u | xargs -r readlink -f
  for b in $bins /usr/lib/x86_64-linux-gnu/sox/*.so; do
    ldd "$b" | awk '/=> \//{print $3} /^\s*\/lib64/{print $1}'
  done | sort -u
  readlink -f /lib64/ld-linux-x86-64.so.2
} | sed 's|^/lib/|/usr/lib/|' | sort -u > "$list"
tar cf - --no-recursion -T "$list" 2>/dev/null | xz -T2 -6 > "$out"
echo "$out: $(wc -l < "$list") files, $(du -h "$out" | cut -f1)"
