#!/usr/bin/env bash
# Builds libaural and the aural CLI for aarch64 with Debian's cross
# compiler and the arm64 builds of their libraries, and runs the
# library's unit tests under qemu-user: what an ARM machine gets, the
# scalar kernels (vectorized by the compiler; no NEON path of its own:
# README.md says what one would need). Installs what it needs
# (tools/setup.sh --aarch64). Under qemu on two cores the suites take
# about 22 minutes (the encoder's 12, the decoder's 6), so CI leaves this
# out, and the time limits are 30 times meson's.
#
#   tools/cross_aarch64.sh [BUILD_DIR]     (default build-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
# The command line is checked before anything is installed or built (the
# setup adds the arm64 architecture to dpkg).
case "${1:-}" in
  -h|--help) sed -n '2,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "cross_aarch64.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
if [[ $# -gt 1 ]]; then
  echo "cross_aarch64.sh: one BUILD_DIR at most, not '$*' (see --help)" >&2
  exit 2
fi
build=${1:-build-aarch64}
tools/setup.sh
tools/setup.sh --aarch64
mkdir -p "$build"
build=$(realpath "$build")
# meson's description of the host, with pkg-config for the arm64
# libraries. qemu runs the tests against the arm64 system root (-L /):
# the arm64 libraries above bring Debian's libc6:arm64, whose loader is
# /lib/ld-linux-aarch64.so.1. The cross compiler's own copy of glibc in
# /usr/aarch64-linux-gnu may be another release (2.36-8 beside 2.36-9 on
# Debian 12): with -L there, its loader took the system's libc.so.6, and
# the mismatch hung the first pthread_create of every threaded test.
cross=$(cat <<INI
[binaries]
c = 'aarch64-linux-gnu-gcc'
ar = 'aarch64-linux-gnu-ar'
strip = 'aarch64-linux-gnu-strip'
pkgconfig = '$build/aarch64-pkg-config'
exe_wrapper = ['qemu-aarch64', '-L', '/']

[host_machine]
system = 'linux'
cpu_family = 'aarch64'
cpu = 'cortex-a72'
endian = 'little'
INI
)
if [[ -f $build/build.ninja && ! -f $build/cross.ini ]]; then
  echo "cross_aarch64.sh: $build is a build directory this script did not" \
       "make; name another" >&2
  exit 2
fi
if [[ -f $build/build.ninja && "$(cat "$build/cross.ini")" != "$cross" ]]; then
  rm -rf "$build" # made by this script with another description: start again
  mkdir -p "$build"
fi
printf '%s\n' "$cross" >"$build/cross.ini"
cat >"$build/aarch64-pkg-config" <<'SH'
#!/bin/sh
PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig exec pkg-config "$@"
SH
chmod +x "$build/aarch64-pkg-config"
if [[ ! -f $build/build.ninja ]]; then
  # Without aurald: Debian's arm64 libwebsockets-dev cannot be installed
  # beside the native one (they share /usr/include/lws_config.h).
  meson setup "$build" --cross-file "$build/cross.ini" -Dbuildtype=debugoptimized \
    -Ddaemon=false
fi
ninja -C "$build"
# The library's own tests (the daemon's and the tools' need a live
# system around them and are x86-only in CI).
meson test -C "$build" --no-rebuild --print-errorlogs --timeout-multiplier 30 \
  frontend audiofile linalg encoder decoder model proto stream g2p_lib resources
