#!/usr/bin/env bash
# Fails when a shared library defines a dynamic symbol outside its public
# API: every exported name must start with "aural_" and a letter (the
# library's internals are "aural__" names).
#   tests/check_exports.sh LIBRARY.so
set -euo pipefail
lib=$1
names=$(nm -D --defined-only "$lib" | awk '{print $3}')
[[ -n "$names" ]] || { echo "check_exports: $lib exports nothing" >&2; exit 1; }
extra=$(grep -v -E '^aural_[a-z]' <<<"$names" || true)
if [[ -n "$extra" ]]; then
  echo "check_exports: $lib exports $(wc -l <<<"$extra") names outside its API:" >&2
  echo "$extra" >&2
  exit 1
fi
echo "check_exports: $(wc -l <<<"$names") names, all public (aural_*)"
