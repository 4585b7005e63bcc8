#!/bin/sh
# deps.sh - installs what optree needs on Debian/Ubuntu, only when missing.
#
# Run by `make deps` (and so by `make demo` and `make test`). Checks each
# package with dpkg-query and installs the missing ones through apt-get: as
# root directly, otherwise through sudo when it is available. Prints nothing
# when every package is present. On a system without dpkg it prints a note
# and succeeds, leaving the packages to the user.
set -u

# libc6-dev comes with gcc unless gcc was installed without its recommends;
# without it nothing compiles, so it is checked too.
# Open MPI (libopenmpi-dev, openmpi-bin) builds the optional MPI part
# (build/liboptree_mpi.a) and lets make test run it on 2 ranks: about 12 MB
# to fetch and 15 s to install, for a test phase of a few seconds.
# libzip-dev (with zlib) reads and writes .npz archives, stored and
# deflated. clang and its runtimes (libclang-rt-dev: libFuzzer and the
# sanitizers) build the libFuzzer targets of `make fuzz-inputs`, which make
# test runs for a fixed budget. pmccabe counts the branches of every
# function for tools/layers.py (make test: none over 30).
# dataset-fashion-mnist (30 MB) is the data of `make demo-cnn` and of
# `make bench-mlp`; fortunes (2.6 MB of English text) that of `make demo-lm`.
PKGS="libopenblas-dev libsleef-dev libzip-dev python3-numpy valgrind libc6-dev gnuplot-nox libopenmpi-dev openmpi-bin clang libclang-rt-dev pmccabe dataset-fashion-mnist fortunes"

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps: no dpkg here (not Debian?); install OpenBLAS, SLEEF, libzip, NumPy, valgrind, Open MPI and clang yourself: $PKGS"
    exit 0
fi

# The native architecture's package: with a second architecture added
# (make test-arm64 adds arm64), a bare name would report both copies.
arch=$(dpkg --print-architecture 2>/dev/null || true)
missing=""
for p in $PKGS; do
    st=$(dpkg-query -W -f='${Status}' "$p:$arch" 2>/dev/null ||
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [ "$st" != "install ok installed" ]; then
        missing="$missing $p"
    fi
done
missing=${missing# }
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "deps: missing packages: $missing" >&2
    echo "deps: run as root: apt-get update && apt-get install -y $missing" >&2
    exit 1
fi
echo "deps: installing $missing${SUDO:+ (through sudo)}"

# shellcheck disable=SC2086 # word splitting of $SUDO and $missing is wanted
$SUDO apt-get update -q || {
    echo "deps: apt-get update failed; install these yourself: $missing" >&2
    exit 1
}
# shellcheck disable=SC2086
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $missing; then
    echo "deps: apt-get install failed; install these yourself: $missing" >&2
    exit 1
fi
exit 0
