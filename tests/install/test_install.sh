#!/usr/bin/env bash
# The installed aural, end to end:
#
#   tests/install/test_install.sh [BUILD_DIR]
#
# Installs BUILD_DIR (already built; without it, a fresh build with prefix
# /usr in a temporary directory) into a DESTDIR and checks, from that tree
# only:
#   1. the files: programs, shared and static libaural, libaural_proto,
#      headers, aural.pc and aural-proto.pc, the default model and the
#      sample, man pages, systemd units, sysusers.d file, config example,
#      the consumer example; everything 'meson introspect --installed'
#      lists; the programs carry the installed model path and no RUNPATH
#      into the build tree; installing again keeps an edited config file;
#   2. the man pages document every option of every --help
#      (check_man_options.py) and format without warnings;
#   3. building against the installed library through pkg-config
#      (PKG_CONFIG_SYSROOT_DIR into the DESTDIR): the consumer example with
#      its Makefile, and a libaural program linked shared and statically;
#   4. the installed aurald, reading the installed config file, with
#      readiness on $NOTIFY_SOCKET (READY=1, RELOADING=1 on SIGHUP,
#      STOPPING=1): the installed 'aural send' pushes the installed sample
#      and the consumer prints every chunk;
#   5. systemd-analyze verify on the units (ExecStart pointed into the
#      DESTDIR, man pages found through MANPATH); no restart after the exit
#      status of a bad config file;
#   6. socket activation: systemd-socket-activate listens, aurald is started
#      by the first client with the socket as fd 3, 'aural sub' is served,
#      and aurald neither locks nor removes the socket.
# Exit status 0 when every check passes, 77 (skipped) in a sanitizer build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/aural-install.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

n_checks=0
step() { echo "== $*"; }
ok() { n_checks=$((n_checks + 1)); echo "   ok: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Waits up to $2 seconds for file $1 to contain a line matching $3.
wait_for_line() {
  local file=$1 secs=$2 pattern=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    grep -q -- "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Waits up to 20 s until aurald at socket $1 reports a subscriber.
wait_subscribed() {
  local i
  for ((i = 0; i < 200; i++)); do
    "$aural" stats -s "$1" --json 2>/dev/null >"$tmp/stats.json" || true
    grep -q '"subscribers":\[{' "$tmp/stats.json" && return 0
    sleep 0.1
  done
  return 1
}

# --- 0. install ------------------------------------------------------------
build=${1:-}
if [[ -z "$build" ]]; then
  build=$tmp/build
  step "building $src with prefix /usr in $build"
  meson setup "$build" "$src" --prefix=/usr -Dwerror=true >"$tmp/setup.log"
  ninja -C "$build" >"$tmp/ninja.log" || { cat "$tmp/ninja.log"; exit 1; }
fi
build=$(cd "$build" && pwd)
# Programs built here against a sanitized libaural would need the
# sanitizer runtime; the install is tested in plain builds.
sanitize=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c '
import json, sys
print({o["name"]: o["value"] for o in json.load(sys.stdin)}.get("b_sanitize", "none"))')
if [[ "$sanitize" != none ]]; then
  echo "test_install: skipped in a b_sanitize=$sanitize build"
  exit 77
fi
dest=$tmp/dest
step "meson install -C $build --destdir $dest"
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet

# Installation directories, as configured (absolute, before DESTDIR).
eval "$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c '
import json, os, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
for key in ("prefix", "bindir", "sbindir", "libdir", "includedir",
            "datadir", "mandir", "sysconfdir"):
    path = os.path.join(opts["prefix"], opts[key])
    print("%s=%s" % (key, path))
')"
meson introspect "$build" --installed >"$tmp/installed.json"

# --- 1. files --------------------------------------------------------------
step "installed files"
expect=(
  "$sbindir/aurald" "$bindir/aural"
  "$libdir/libaural.so" "$libdir/libaural.a" "$libdir/libaural_proto.a"
  "$libdir/pkgconfig/aural.pc" "$libdir/pkgconfig/aural-proto.pc"
  "$includedir/aural.h" "$includedir/aural/proto.h"
  "$includedir/aural/encoder.h" "$includedir/aural/model.h"
  "$datadir/aural/default.safetensors" "$datadir/aural/sample.flac"
  "$datadir/aural/default.lexicon.txt.gz" "$datadir/aural/default.lm.bin.gz"
  "$datadir/aural/default.g2p.txt"
  "$datadir/aural/web/index.html" "$datadir/aural/web/app.js"
  "$datadir/aural/web/aural-client.js" "$datadir/aural/web/worklet.js"
  "$datadir/aural/web/style.css"
  "$includedir/aural/decoder.h" "$includedir/aural/codes.h"
  "$mandir/man8/aurald.8" "$mandir/man1/aural.1"
  "$sysconfdir/aural/aurald.conf"
  "$datadir/doc/aural/examples/consumer/consumer.c"
  "$datadir/doc/aural/examples/consumer/Makefile"
  "$datadir/doc/aural/examples/stream_file/stream_file.c"
  "$datadir/doc/aural/examples/stream_file/Makefile"
  "$includedir/aural/stream.h"
)
for f in "${expect[@]}"; do
  [[ -e "$dest$f" ]] || fail "not installed: $f"
done
ok "${#expect[@]} expected files"
/usr/bin/python3 - "$tmp/installed.json" "$dest" <<'EOF' || exit 1
import json, os, sys
installed = json.load(open(sys.argv[1]))
missing = [p for p in installed.values()
           if not os.path.lexists(sys.argv[2] + p)]
if missing:
    sys.exit("FAIL: listed by meson but not installed: %s" % missing)
EOF
ok "all $(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$tmp/installed.json") files meson lists"

# The configuration file is the administrator's once installed: installing
# again (an upgrade) keeps it, and puts the new example beside the docs.
conf_installed=$dest$sysconfdir/aural/aurald.conf
echo "# the administrator's own line" >>"$conf_installed"
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet
grep -qx "# the administrator's own line" "$conf_installed" ||
  fail "installing again replaced the edited $sysconfdir/aural/aurald.conf"
cmp -s "$src/systemd/aurald.conf" "$dest$datadir/doc/aural/examples/aurald.conf" ||
  fail "no example config at $datadir/doc/aural/examples/aurald.conf"
ok "installing again keeps the edited $sysconfdir/aural/aurald.conf"

unit=$(find "$dest" -name aurald.service -path '*systemd/system/*' | head -1)
socket_unit=$(find "$dest" -name aurald.socket -path '*systemd/system/*' | head -1)
sysusers=$(find "$dest" -name aural.conf -path '*sysusers.d/*' | head -1)
[[ -n "$unit" && -n "$socket_unit" ]] || fail "no aurald.service/.socket under */systemd/system"
[[ -n "$sysusers" ]] || fail "no sysusers.d/aural.conf"
grep -qx "ExecStart=$sbindir/aurald" "$unit" || fail "$unit: ExecStart is not $sbindir/aurald"
grep -q '^u aural ' "$sysusers" || fail "$sysusers creates no user aural"
ok "units in ${unit%/*}, sysusers in ${sysusers%/*}"

export LD_LIBRARY_PATH=$dest$libdir
aurald=$dest$sbindir/aurald
aural=$dest$bindir/aural
model=$dest$datadir/aural/default.safetensors
sample=$dest$datadir/aural/sample.flac
for exe in "$aurald" "$aural"; do
  grep -qaF "$datadir/aural/default.safetensors" "$exe" ||
    fail "$exe does not look for the model at $datadir/aural/default.safetensors"
  dyn=$(readelf -d "$exe")
  if grep -E 'RPATH|RUNPATH' <<<"$dyn" | grep -F "$build" >/dev/null; then
    fail "$exe has a RUNPATH into the build tree"
  fi
  grep -q "libaural.so.* => $dest$libdir/" <<<"$(ldd "$exe")" ||
    fail "$exe does not load the installed libaural"
done
"$aural" info "$model" >"$tmp/info.txt" || fail "aural info rejects the installed model"
grep -q '^words        lexicon of' "$tmp/info.txt" ||
  fail "aural info finds no lexicon and LM beside the installed model"
"$aural" pronounce -m "$model" Dashwood | grep -q "^Dashwood	" ||
  fail "aural pronounce finds no g2p map beside the installed model"
ok "programs look for $datadir/aural/default.safetensors, load the installed libaural; the installed model is valid"

# --- 2. man pages ----------------------------------------------------------
step "man pages"
mkdir -p "$tmp/man"
cp "$dest$mandir/man8/aurald.8" "$dest$mandir/man1/aural.1" "$tmp/man/"
/usr/bin/python3 "$here/check_man_options.py" "$aurald" "$aural" "$tmp/man" ||
  fail "man pages and --help disagree"
ok "every --help option is in the man pages"

# --- 3. building against the installed library -----------------------------
step "pkg-config consumers"
export PKG_CONFIG_PATH=$dest$libdir/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$dest
pkg-config --exists aural aural-proto || fail "pkg-config finds no aural / aural-proto"
[[ "$(pkg-config --modversion aural)" == "$(meson introspect "$build" --projectinfo |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ]] ||
  fail "aural.pc has the wrong version"
cp -r "$dest$datadir/doc/aural/examples/consumer" "$tmp/consumer"
make -s -C "$tmp/consumer" CFLAGS="-O2 -Wall -Wextra -Wpedantic -Werror" \
  >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log"; fail "the consumer example does not build"; }
consumer=$tmp/consumer/consumer
ok "examples/consumer built with its Makefile: $(pkg-config --cflags --libs aural-proto)"
# Its --help answers (it was refused as an unknown option, exit 2), and
# with no -s it takes the codec's default path, $AURAL_SOCKET first.
help=$("$consumer" --help) || fail "consumer --help exits $?"
[[ $help == usage:* ]] || fail "consumer --help printed '$help'"
rc=0
err=$(AURAL_SOCKET="$tmp/no-such.sock" "$consumer" 2>&1) || rc=$?
[[ $rc -eq 1 && $err == *"$tmp/no-such.sock"* ]] ||
  fail "consumer without -s: exit $rc, '$err' (wanted \$AURAL_SOCKET's path)"
ok "examples/consumer --help, and \$AURAL_SOCKET without -s"

cflags=$(pkg-config --cflags aural)
cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cflags -o "$tmp/link_shared" \
  "$here/link_check.c" $(pkg-config --libs aural) || fail "link against libaural.so"
# libaural.a with what aural.pc declares it needs (Libs.private, and the
# packages of Requires.private), those linked shared. 'pkg-config --static'
# alone would also pull the private libraries of libsndfile's codecs, whose
# static archives Debian's -dev packages do not all provide.
static_libs="$(pkg-config --libs-only-L aural) -l:libaural.a $(sed -n 's/^Libs.private: //p' "$PKG_CONFIG_PATH/aural.pc")
  $(pkg-config --libs $(pkg-config --print-requires-private aural))"
cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cflags -o "$tmp/link_static" \
  "$here/link_check.c" $static_libs || fail "static link against libaural.a"
grep -q 'NEEDED.*libaural\.so' <<<"$(readelf -d "$tmp/link_shared")" || fail "link_shared does not use libaural.so"
! grep -q 'NEEDED.*libaural' <<<"$(readelf -d "$tmp/link_static")" || fail "link_static still needs libaural.so"
shared_out=$("$tmp/link_shared" "$model" "$sample") || fail "link_shared failed"
static_out=$(env -u LD_LIBRARY_PATH "$tmp/link_static" "$model" "$sample") || fail "link_static failed"
[[ "$shared_out" == "$static_out" ]] || fail "shared and static builds differ: '$shared_out' vs '$static_out'"
ok "libaural shared and static: $shared_out"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# --- 4. the installed daemon -----------------------------------------------
step "installed aurald with the installed config, readiness, the consumer"
# The installed config lets group aural in; where that group does not exist
# (no systemd-sysusers here), the caller's group stands in.
conf=$tmp/aurald.conf
cp "$dest$sysconfdir/aural/aurald.conf" "$conf"
getent group aural >/dev/null || sed -i "s/^group = aural$/group = $(id -gn)/" "$conf"
/usr/bin/python3 - "$tmp/notify" "$tmp/notify.log" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(120)
with open(sys.argv[2], "a") as log:
    while True:
        try:
            data = s.recv(4096)
        except socket.timeout:
            break
        for line in data.decode().splitlines():
            print(line, file=log, flush=True)
EOF
pids+=($!)
for ((i = 0; i < 50; i++)); do [[ -S "$tmp/notify" ]] && break; sleep 0.1; done
sock=$tmp/a.sock
NOTIFY_SOCKET=$tmp/notify "$aurald" --config "$conf" -m "$model" -s "$sock" \
  2>"$tmp/aurald.log" &
daemon=$!
pids+=($daemon)
wait_for_line "$tmp/notify.log" 60 '^READY=1' ||
  { cat "$tmp/aurald.log"; fail "aurald sent no READY=1"; }
[[ -S "$sock" ]] || fail "READY=1 before the socket exists"
ok "READY=1 once $sock is served"

timeout 60 "$consumer" -s "$sock" --until-end >"$tmp/consumer.out" 2>&1 &
cons=$!
pids+=($cons)
wait_subscribed "$sock" || { cat "$tmp/consumer.out"; fail "consumer did not subscribe"; }
timeout 60 "$aural" send -q -s "$sock" "$sample" || fail "aural send failed"
wait "$cons" || { cat "$tmp/consumer.out"; fail "consumer exited with an error"; }
n_lines=$(grep -c ' seq [0-9]* ' "$tmp/consumer.out" || true)
n_chunks=$(sed -n 's/.* ended (closed): [0-9]* frames, \([0-9]*\) chunks$/\1/p' "$tmp/consumer.out")
[[ -n "$n_chunks" && "$n_lines" -eq "$n_chunks" && "$n_lines" -gt 0 ]] ||
  { cat "$tmp/consumer.out"; fail "consumer printed $n_lines chunks, the stream had '$n_chunks'"; }
grep -q "^sample.flac  seq $((n_chunks - 1)) .* final$" "$tmp/consumer.out" ||
  fail "no final chunk"
ok "consumer printed all $n_chunks chunks of sample.flac, the last one final"

kill -HUP "$daemon"
wait_for_line "$tmp/aurald.log" 20 'reload' || fail "no reload in the log after SIGHUP"
# The notifications reach notify.log through the listener, which may
# write them after the daemon logged the reload: wait for them.
reloaded=0
for _ in $(seq 100); do
  if [[ $(grep -c '^READY=1' "$tmp/notify.log") -ge 2 ]] &&
     grep -q '^RELOADING=1' "$tmp/notify.log"; then
    reloaded=1
    break
  fi
  sleep 0.1
done
[[ $reloaded -eq 1 ]] || fail "SIGHUP: no RELOADING=1 then READY=1"
ok "SIGHUP: config re-read, RELOADING=1 then READY=1"
kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
[[ $rc -eq 0 ]] || { cat "$tmp/aurald.log"; fail "aurald exited $rc after SIGTERM"; }
grep -q '^STOPPING=1' "$tmp/notify.log" || fail "no STOPPING=1"
ok "SIGTERM: STOPPING=1, exit 0"

# --- 5. systemd-analyze verify ---------------------------------------------
step "systemd-analyze verify"
mkdir -p "$tmp/units"
cp "$unit" "$socket_unit" "$tmp/units/"
sed -i "s|^ExecStart=$sbindir/aurald|ExecStart=$aurald|" "$tmp/units/aurald.service"
MANPATH=$dest$mandir: systemd-analyze verify \
  "$tmp/units/aurald.socket" "$tmp/units/aurald.service" >"$tmp/verify.log" 2>&1 ||
  { cat "$tmp/verify.log"; fail "systemd-analyze verify"; }
[[ ! -s "$tmp/verify.log" ]] || { cat "$tmp/verify.log"; fail "systemd-analyze verify warns"; }
exposure=$(systemd-analyze security --offline=true "$tmp/units/aurald.service" 2>/dev/null |
  sed -n 's/.*Overall exposure level for aurald.service: \([0-9.]*\).*/\1/p')
ok "units verify cleanly; exposure level ${exposure:-?} (systemd-analyze security)"
# A bad config file is not mended by starting again: the unit must not
# restart aurald on the exit status it gives for one.
printf 'no-such-key = 1\n' >"$tmp/bad.conf"
rc=0
"$aurald" --config "$tmp/bad.conf" -m "$model" -s "$tmp/bad.sock" 2>"$tmp/bad.log" || rc=$?
[[ $rc -ne 0 ]] && grep -q "bad.conf:1: unknown key" "$tmp/bad.log" ||
  { cat "$tmp/bad.log"; fail "aurald accepted a bad config file (exit $rc)"; }
grep -qE "^RestartPreventExitStatus=([0-9 ]* )?$rc( |\$)" "$unit" ||
  fail "aurald.service restarts aurald after exit status $rc (a bad config file)"
ok "a bad config file: exit $rc, which aurald.service does not restart"

# --- 6. socket activation --------------------------------------------------
step "socket activation (systemd-socket-activate)"
sock=$tmp/b.sock
systemd-socket-activate -l "$sock" -E LD_LIBRARY_PATH -E PATH \
  "$aurald" --no-config -m "$model" 2>"$tmp/activated.log" &
activated=$!
pids+=($activated)
for ((i = 0; i < 50; i++)); do [[ -S "$sock" ]] && break; sleep 0.1; done
[[ -S "$sock" ]] || fail "systemd-socket-activate did not listen on $sock"
# The first connection starts aurald, which takes over the listening socket.
timeout 60 "$aural" sub -s "$sock" --stream sample.flac --until-end --json \
  >"$tmp/sub.out" 2>&1 &
sub=$!
pids+=($sub)
wait_subscribed "$sock" || { cat "$tmp/activated.log"; fail "the activated aurald has no subscriber"; }
timeout 60 "$aural" send -q -s "$sock" "$sample" ||
  { cat "$tmp/activated.log"; fail "aural send to the activated aurald failed"; }
wait "$sub" || { cat "$tmp/sub.out" "$tmp/activated.log"; fail "aural sub failed under socket activation"; }
n_sub=$(grep -c '^{"event":"chunk"' "$tmp/sub.out" || true)
[[ "$n_sub" -eq "$n_chunks" ]] &&
  grep -q '^{"event":"ended".*"chunks_lost":0' "$tmp/sub.out" ||
  { cat "$tmp/sub.out"; fail "aural sub received $n_sub of $n_chunks chunks"; }
[[ ! -e "$sock.lock" ]] || fail "activated aurald created $sock.lock"
kill -TERM "$activated"
rc=0
wait "$activated" || rc=$?
[[ $rc -eq 0 ]] || { cat "$tmp/activated.log"; fail "activated aurald exited $rc after SIGTERM"; }
[[ -S "$sock" ]] || fail "activated aurald removed the socket it was given"
ok "the first client started aurald on fd 3; aural sub received all $n_sub chunks; no lock file, the socket left in place"

echo "test_install: all $n_checks checks passed"
