#!/usr/bin/env bash
# Build a free-threaded CPython 3.13 (python3.13t, ./configure --disable-gil) from the upstream
# tarball that Debian's trixie `python3.13` source package carries, into a cache outside the
# checkout, and print the interpreter's path. Reuses the build when it is already there.
#
#   scripts/build-free-threaded-python.sh            # prints e.g. ~/.cache/cpu-lab/python3.13t/bin/python3.13t
#   LAB_CACHE_DIR=/somewhere scripts/build-free-threaded-python.sh
#
# The system's apt configuration is not touched: apt reads a sources file of our own (one
# deb-src line for trixie main, same archive and keyring as the machine's own entry) with its
# lists and cache in the build directory. Needs gcc, make, xz and the zlib headers (Debian:
# build-essential zlib1g-dev). Measured on a 2-CPU VM: download 1 s, configure 27 s, build and
# install 125 s. Progress goes to stderr and the build log, the path alone to stdout.
set -euo pipefail

cache="${LAB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpu-lab}"
prefix="$cache/python3.13t"
python="$prefix/bin/python3.13t"
archive="${LAB_DEBIAN_ARCHIVE:-http://deb.debian.org/debian}"
keyring="${LAB_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"

check() {
    "$1" -c 'import sys, sysconfig; sys.exit(0 if sysconfig.get_config_var("Py_GIL_DISABLED") == 1 and not sys._is_gil_enabled() else 1)' 2>/dev/null
}

if [ -x "$python" ] && check "$python"; then
    echo "$python"
    exit 0
fi

work="$cache/build-python3.13t"
rm -rf "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
log="$work/build.log"
echo "building free-threaded CPython 3.13 into $prefix (log: $log)" >&2

sources="$work/trixie-src.sources"
cat >"$sources" <<EOF
Types: deb-src
URIs: $archive
Suites: trixie
Components: main
Signed-By: $keyring
EOF
apt_opts=(-o "Dir::Etc::sourcelist=$sources" -o "Dir::Etc::sourceparts=/dev/null"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root")

start=$SECONDS
apt-get "${apt_opts[@]}" -qq update >>"$log" 2>&1
(cd "$work/src" && apt-get "${apt_opts[@]}" -qq source --download-only python3.13 >>"$log" 2>&1)
tarball=$(find "$work/src" -maxdepth 1 -name 'python3.13_*.orig.tar.xz' | head -n 1)
if [ -z "$tarball" ]; then
    echo "no python3.13_*.orig.tar.xz was downloaded from $archive (trixie); see $log" >&2
    exit 1
fi
echo "  downloaded $(basename "$tarball") in $((SECONDS - start)) s" >&2

start=$SECONDS
tar -xJf "$tarball" -C "$work/src"
srcdir=$(find "$work/src" -maxdepth 1 -type d -name 'Python-3.13*' | head -n 1)
(cd "$srcdir" && ./configure --disable-gil --prefix="$prefix" --without-ensurepip >>"$log" 2>&1)
echo "  configured in $((SECONDS - start)) s" >&2

start=$SECONDS
(cd "$srcdir" && make -j"$(nproc)" >>"$log" 2>&1 && make install >>"$log" 2>&1)
echo "  built and installed in $((SECONDS - start)) s" >&2

if ! check "$python"; then
    echo "$python was built but is not a free-threaded interpreter with the GIL off; see $log" >&2
    exit 1
fi
rm -rf "$srcdir" "$work/cache"
echo "$python"
