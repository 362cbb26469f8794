#!/usr/bin/env bash
# tools/fuzz.sh's build, with a stand-in compiler (the system's cc without
# the sanitizers, logging each source it compiles; a link writes a
# "fuzzer" that exits 0) in a tree of two sources: a second run compiles
# nothing, and a source is compiled again when a header it includes
# changes, wherever that header lives (proto/internal.h), and when the
# compiler changes (another CC).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

root=$tmp/tree
mkdir -p "$root/tools" "$root/lib/include/aural" "$root/proto/include/aural" \
  "$root/daemon" "$root/tests/fuzz/corpus/x" "$tmp/bin"
cp "$src/tools/fuzz.sh" "$root/tools/"
cd "$root"
echo 'int lib_a(void);' >lib/include/aural.h
echo 'int lib_h(void);' >lib/include/aural/a.h
echo '#define LIB_INTERNAL 1' >lib/internal.h
echo '#define PROTO_INTERNAL 1' >proto/internal.h
echo '#define PROTO_PUBLIC 1' >proto/include/aural/p.h
echo '#define DAEMON 1' >daemon/daemon.h
printf '#include "internal.h"\nint lib_a(void) { return LIB_INTERNAL; }\n' \
  >lib/a.c
printf '#include "internal.h"\nint proto_b(void) { return PROTO_INTERNAL; }\n' \
  >proto/b.c
echo 'int fuzz_x;' >tests/fuzz/fuzz_x.c
echo seed >tests/fuzz/corpus/x/seed

cat >"$tmp/bin/cc" <<STANDIN
#!/usr/bin/env bash
args=() out= c=
while ((\$#)); do
  case \$1 in
    -fsanitize=*|-fno-sanitize-recover=*) ;;
    -c) c=\$2; args+=("\$1") ;;
    -o) out=\$2; args+=("\$1") ;;
    *) args+=("\$1") ;;
  esac
  shift
done
if [[ -n \$c ]]; then
  echo "\$c" >>"$tmp/compiled"
  exec cc "\${args[@]}"
fi
printf '#!/bin/sh\nexit 0\n' >"\$out"
chmod +x "\$out"
STANDIN
chmod +x "$tmp/bin/cc"
ln -s cc "$tmp/bin/cc2"

# Runs fuzz.sh for target x; its compiled sources, sorted, in $compiled.
# The objects are then made an hour old and the sources two, so that a
# file touched later is newer whatever the file system's clock resolution.
run() {
  : >"$tmp/compiled"
  CC=${1:-$tmp/bin/cc} tools/fuzz.sh 1 x >"$tmp/out" 2>&1 ||
    fail "fuzz.sh exited $?:"$'\n'"$(cat "$tmp/out")"
  compiled=$(sort "$tmp/compiled" | tr '\n' ' ')
  touch -d '1 hour ago' build-fuzz/obj/*
  find lib proto daemon -type f -exec touch -d '2 hours ago' {} +
}

run
[[ $compiled == "lib/a.c proto/b.c " ]] ||
  fail "the first run compiled '$compiled', not both sources"
run
[[ -z $compiled ]] || fail "a second run compiled '$compiled' again"
echo "ok: each source is compiled once"

touch proto/internal.h
run
[[ $compiled == "proto/b.c " ]] ||
  fail "after proto/internal.h changed, '$compiled' was compiled, not proto/b.c"
touch lib/internal.h
run
[[ $compiled == "lib/a.c " ]] ||
  fail "after lib/internal.h changed, '$compiled' was compiled, not lib/a.c"
echo "ok: a source is compiled again when a header it includes changes"

run "$tmp/bin/cc2"
[[ $compiled == "lib/a.c proto/b.c " ]] ||
  fail "with another CC, '$compiled' was compiled, not both sources"
echo "ok: another compiler compiles every source again"
