#!/usr/bin/env bash
# Fails when a shared library's dynamic symbols are not exactly the
# functions its public headers declare: an internal exported ("aural__"
# names, the protocol's JSON reader linked in), or a public function
# missing (lib/libaural.map lacks its module's prefix).
#   tests/check_exports.sh LIBRARY.so HEADER...
set -euo pipefail
lib=$1
shift
names=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
[[ -n "$names" ]] || { echo "check_exports: $lib exports nothing" >&2; exit 1; }
declared=$(grep -ohE '\baural_[a-z][a-z0-9_]*\(' "$@" | tr -d '(' | sort -u)
extra=$(comm -23 <(echo "$names") <(echo "$declared"))
missing=$(comm -13 <(echo "$names") <(echo "$declared"))
if [[ -n "$extra" ]]; then
  echo "check_exports: $lib exports $(wc -l <<<"$extra") names no public header declares:" >&2
  echo "$extra" >&2
fi
if [[ -n "$missing" ]]; then
  echo "check_exports: $lib lacks $(wc -l <<<"$missing") functions its headers declare:" >&2
  echo "$missing" >&2
fi
[[ -z "$extra" && -z "$missing" ]] || exit 1
echo "check_exports: $(wc -l <<<"$names") names, exactly the public headers' functions"
