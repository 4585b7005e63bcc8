#!/bin/sh
# test_arm64.sh - `make test-arm64`: the arm64 build (NEON kernel table)
# tested on an x86 machine. Installs what it lacks (cross gcc, qemu-user,
# the arm64 SLEEF and OpenBLAS through Debian multiarch) as tools/deps.sh
# does, cross-builds the library, unit tests and examples into build/arm64
# and runs them under qemu-aarch64; ends with one "N passed, M failed" line.
#
# ARM64_QUICK=1 runs only the kernel-table tests and one example (the
# phase of tools/test.sh). ARM64_INSTALL=0 skips the package check.
set -u

B=${BUILD_ARM64:-build/arm64}
CROSS=aarch64-linux-gnu-gcc
SYSROOT=/usr/aarch64-linux-gnu
PKGS="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libsleef-dev:arm64 libopenblas-dev:arm64"

have() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

install_missing() {
    command -v dpkg-query >/dev/null 2>&1 || {
        echo "arm64: no dpkg here (not Debian?); install an aarch64 cross gcc, qemu-user and the arm64 SLEEF and OpenBLAS yourself" >&2
        return 1
    }
    missing=""
    for p in $PKGS; do have "$p" || missing="$missing $p"; done
    missing=${missing# }
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" -eq 0 ]; then SUDO=""
    elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"
    else
        echo "arm64: missing packages: $missing" >&2
        echo "arm64: run as root: dpkg --add-architecture arm64 && apt-get update && apt-get install -y $missing" >&2
        return 1
    fi
    echo "arm64: installing $missing${SUDO:+ (through sudo)}"
    # Wait for another apt (make deps in a parallel job) rather than fail.
    LOCK="-o DPkg::Lock::Timeout=600"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        $SUDO dpkg --add-architecture arm64 || return 1
    fi
    # shellcheck disable=SC2086
    $SUDO apt-get $LOCK update -q >/dev/null || {
        echo "arm64: apt-get update failed; install these yourself: $missing" >&2
        return 1
    }
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get $LOCK install -y -q \
        --no-install-recommends $missing || {
        echo "arm64: apt-get install failed; install these yourself: $missing" >&2
        return 1
    }
}

if [ "${ARM64_INSTALL:-1}" != 0 ]; then
    install_missing || { echo "0 passed, 1 failed"; exit 1; }
fi
