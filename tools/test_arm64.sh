#!/bin/sh
# test_arm64.sh - `make test-arm64`: the arm64 build (NEON kernel table)
# tested on an x86 machine. Installs what it lacks (cross gcc, qemu-user,
# the arm64 SLEEF, OpenBLAS and libzip through Debian multiarch) as tools/deps.sh
# does, cross-builds the library, unit tests and examples into build/arm64
# and runs them under qemu-aarch64; ends with one "N passed, M failed" line.
#
# Environment: ARM64_QUICK=1 builds and runs only the kernel-table cases,
# the 16-bit conversion tables' sampled check and examples/isa.c;
# ARM64_TESTS="substrings" picks unit cases as
# test_optree's arguments do; ARM64_INSTALL=0 skips the package check;
# JOBS (default 2). `tools/test_arm64.sh insns` prints the instruction
# counts of the README's NEON table instead of testing.
#
# The loader: qemu runs the programs with -L / (the multiarch root), so
# that ld-linux-aarch64.so.1 and libc.so.6 both come from libc6:arm64.
# With -L /usr/aarch64-linux-gnu the loader is libc6-arm64-cross's while
# libc.so.6 (found through /etc/ld.so.cache, as SLEEF and OpenBLAS are
# only in the multiarch tree) is libc6:arm64's, a different build of the
# same glibc: their private ABI (_rtld_global) disagrees, and the first
# fork() spins forever in the child (glibc's reclaim_stacks walks a stack
# list it cannot recognise), and a process that started threads never
# exits. With one glibc both work: the suite runs threaded, as on x86.
# $QEMU and $TMO are command prefixes, split on purpose.
# shellcheck disable=SC2086
set -u

cd "$(dirname "$0")/.." || exit 1
B=${BUILD_ARM64:-build/arm64}
JOBS=${JOBS:-2}
CROSS=aarch64-linux-gnu-gcc
PKGS="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libsleef-dev:arm64 libopenblas-dev:arm64 libzip-dev:arm64"

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

QEMU="qemu-aarch64 -L /"
# A limit per run where coreutils' timeout exists (a hang fails, not stalls).
TMO=""
command -v timeout >/dev/null 2>&1 && TMO="timeout -k 10"
# The quick check (a phase of make test) keeps its logs apart, so that it
# never truncates those of a whole run going on in the same build.
LOGS=$B/test-logs
[ "${ARM64_QUICK:-0}" = 1 ] && LOGS=$B/test-logs/quick
mkdir -p "$LOGS" || exit 1
START=$(date +%s)
P=0
F=0

# ---------------------------------------------------------------- insns
# Guest instructions per element of a few f32 kernels, scalar and NEON
# tables, one thread: qemu's exec log in single-step mode (one line per
# instruction executed) of examples/isa.c evaluating the expression twice,
# less the same with one evaluation, over N, leaves out start-up, inputs,
# planning (the second evaluation hits the plan cache). Wall time under
# emulation says nothing about real hardware; instruction counts say what
# the code does (not what it costs: a NEON division or SLEEF's table
# lookups are not one cycle).
if [ "${1:-}" = insns ]; then
    make -s -j"$JOBS" WERROR=-Werror CC=$CROSS BUILD="$B" "$B/examples/isa" || exit 1
    N=${ARM64_N:-65536}
    count() {
        QEMU_LOG_FILENAME=/dev/stdout $QEMU -singlestep -d exec,nochain \
            "$B/examples/isa" "$1" "$N" "$2" "$3" 2>/dev/null | grep -c '^Trace'
    }
    echo "instructions per element, f32, N = $N"
    printf '%-6s %12s %12s %8s\n' kernel scalar neon ratio
    for e in fma exp tanh; do
        s=$(($(count scalar $e 2) - $(count scalar $e 1)))
        v=$(($(count neon $e 2) - $(count neon $e 1)))
        awk -v e=$e -v s=$s -v v=$v -v n="$N" \
            'BEGIN { printf "%-6s %12.2f %12.2f %7.2fx\n", e, s / n, v / n, s / v }'
    done
    exit 0
fi

# ---------------------------------------------------------------- build
echo "==== arm64 build: CC=$CROSS BUILD=$B"
build() {
    if [ "${ARM64_QUICK:-0}" = 1 ]; then
        # The library, then a test binary of the kernel-table cases alone.
        make -s -j"$JOBS" WERROR=-Werror CC=$CROSS BUILD="$B" lib "$B/examples/isa" &&
            mkdir -p "$B/quick" &&
            $CROSS -Iinclude -Isrc/core -Isrc/cpu -Isrc/cpu/jit -Isrc/cpu/kernels -Isrc/front -Isrc/ref -D_POSIX_C_SOURCE=200809L -std=c11 -O2 -fno-math-errno \
                -ffp-contract=off -o "$B/quick/test_kernels" tests/main.c tests/test_kernels.c \
                tests/test_optable.c tests/test_half_tables.c "$B/liboptree.a" -lsleef -lopenblas -lm -lpthread
    else
        make -s -j"$JOBS" WERROR=-Werror CC=$CROSS BUILD="$B" tests examples
    fi
}
if ! build >"$LOGS/build.log" 2>&1; then
    cat "$LOGS/build.log"
    echo "arm64: the cross build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---------------------------------------------------------------- unit
echo "==== arm64 unit tests under $QEMU"
if [ "${ARM64_QUICK:-0}" = 1 ]; then
    # the kernel tables', and the 16-bit conversion tables' sampled check
    $TMO 600 $QEMU "$B/quick/test_kernels" test_kernels test_optable half_tables_sampled \
        >"$LOGS/unit.log" 2>&1
else
    # shellcheck disable=SC2086 # the filter is a list of words
    # Emulation is 10-50 times slower: 20 minutes per case, not 2.
    OT_TEST_TIMEOUT=1200 $TMO 5400 $QEMU "$B/test_optree" ${ARM64_TESTS:-} >"$LOGS/unit.log" 2>&1
fi
rc=$?
grep -a -v '^\[ OK \]' "$LOGS/unit.log" | head -n 200
# shellcheck disable=SC2046 # two numbers, split on purpose
set -- $(sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1 \2/p' "$LOGS/unit.log" | tail -n 1)
if [ $# -eq 2 ]; then
    P=$((P + $1))
    F=$((F + $2))
    [ "$rc" -ne 0 ] && [ "$2" -eq 0 ] && F=$((F + 1))
else
    echo "arm64 unit: no count line (exit status $rc); see $B-unit.log"
    F=$((F + 1))
fi

# ---------------------------------------------------------------- examples
echo "==== arm64 examples under $QEMU (cpu backend, its default table: neon; OT_EXAMPLE_SMALL=1)"
if [ "${ARM64_QUICK:-0}" = 1 ]; then EXS="$B/examples/isa"; else EXS="$B/examples/*"; fi
for ex in $EXS; do
    if OT_BACKEND=cpu OT_EXAMPLE_SMALL=1 $TMO 600 $QEMU "$ex" >"$LOGS/example.log" 2>&1; then
        P=$((P + 1))
        echo "[ OK ] $(basename "$ex")"
    else
        F=$((F + 1))
        echo "[FAIL] $(basename "$ex")"
        tail -n 20 "$LOGS/example.log"
    fi
done

echo "==== arm64: $(($(date +%s) - START)) s"
echo "$P passed, $F failed"
[ "$F" -eq 0 ]
