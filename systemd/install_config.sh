#!/bin/sh
# Installs the example configuration file SRC as DEST (under $DESTDIR, as
# meson install sets it), unless DEST is there already: an installed
# configuration file is the administrator's, and installing again (an
# upgrade) must not replace their settings with the example's. The
# example is also installed among the docs, where a new version's keys
# can be read.
#   install_config.sh SRC DEST
set -eu
src=$1
dest=${DESTDIR:-}$2
if [ -e "$dest" ] || [ -L "$dest" ]; then
  [ -n "${MESON_INSTALL_QUIET:-}" ] || echo "Keeping $dest (it exists)"
  exit 0
fi
mkdir -p "$(dirname "$dest")"
cp "$src" "$dest.new"
chmod 0644 "$dest.new"
mv "$dest.new" "$dest"
[ -n "${MESON_INSTALL_QUIET:-}" ] || echo "Installing $src to $dest"
