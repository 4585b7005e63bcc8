#!/bin/sh
# test.sh - the whole optree test suite, run by `make test`.
#
# Phases (README.md, "Testing", lists what each costs):
#   build       include/optree_ops.h up to date with src/core/ops.def, then make
#               all (library, unit tests, examples, optree-bench) with
#               -Werror; a failure stops here
# then two lanes run side by side, each one phase at a time (a lane's make
# and test runner use one job each, so the two lanes keep two CPUs busy),
# each taking the next phase the other has not, longest first (QUEUE
# below), so that they end together on any machine. The phases:
#   layers      tools/layers.py: no file of src/ includes a header or
#               calls a function of a layer above its own (the objects'
#               symbols, nm), no file over 1,000 lines, no function with a
#               cyclomatic complexity over 30 (pmccabe); also in make check
#   library     the shared library's SONAME, that it exports only the
#               public ot_* names (no ot__ internals), that a program
#               using the header's macros links against it alone and runs,
#               and that a C++ program does (tools/cxx_check.cpp, g++ and
#               clang++: the headers compile as C++11 without a warning)
#   unit        ./$BUILD/test_optree
#   sanitizers  the unit tests rebuilt in $BUILD/san with ASan + UBSan and
#               the plan verifier (-DOT_VERIFY_PLANS)
#   cli         tests/cli_check.py: optree-bench's outputs and errors, run
#               as a user runs it (its machine limits measured on 16 MiB
#               arrays and cached in a temporary directory)
#   docs        tools/doc_check.py: every C block of README.md and docs/
#               compiled, and run where it is a whole program
#   mpi         ot_allreduce and examples/mlp_mpi.c on 2 and 3 ranks
#   numpy       tests/diff_numpy.py against $BUILD/liboptree.so, then
#               tests/umath_check.py (recorded as "umath"): exp, exp2,
#               expm1, log, log2, sin, cos and tanh through NumPy's own
#               validation sets on ref, every ISA table and generated code,
#               and tests/norm_check.py ("norm"): batch norm, layer norm and
#               global average pooling against NumPy, and
#               tests/conv_check.py ("conv"): conv, conv_transpose and their
#               gradients against NumPy, and tests/pool_check.py ("pool"):
#               max and average pooling and their gradients against NumPy,
#               and tests/index_check.py ("index"): take, index_add, where,
#               tril and triu and their gradients against NumPy,
#               and tests/attn_check.py ("attn"): attention and its gradients,
#               tests/topk_check.py ("topk"): topk, take_along, scatter_add_along,
#               tests/half_check.py ("half"): every op of the table on f16 and
#               bf16 tensors on ref and cpu against NumPy (docs/half.md),
#               and tests/py/run_tests.py ("py"): the Python module (python/
#               optree), neon's backend page run as written, its declarations
#               against the header
#   clang-O0    library, unit tests, examples, optree-bench and the fuzz
#               targets built with clang at -O0 with -Werror, ASan + UBSan
#               and libFuzzer's coverage into $BUILD/clang-O0 (make
#               fuzz-tree: a build that inlines nothing, where a C99 inline
#               without an external definition fails to link; clang's
#               warnings); then, recorded as "fuzz", make fuzz-inputs from
#               those objects: libFuzzer on ot_parse, ot_load/ot_loadz and
#               ot_model_load, FUZZ_SECONDS (default 10) per target from
#               the seeds in tools/fuzz_seeds/
#   tsan        the unit tests rebuilt in $BUILD/tsan with ThreadSanitizer,
#               running only the cases about threads (name or file contains
#               "thread"; about 20 s; the build compiles only the test files
#               holding them, Makefile's TSEL): a data race ends its case
#               (halt_on_error) and fails it. OpenBLAS runs single-threaded
#               there, and tools/tsan.supp silences third-party libraries
#               only, never optree's own code.
#   valgrind    every example in $BUILD/examples under valgrind
#   arm64       on x86-64 hosts, the NEON table's quick check:
#               ARM64_QUICK=1 tools/test_arm64.sh (installs the cross
#               toolchain and qemu-user when missing, cross-builds the
#               library into $BUILD/arm64, runs the kernel-table cases and
#               examples/isa.c under qemu-aarch64; about 1 minute once
#               installed). OT_TEST_ARM64=0 skips it; `make test-arm64`
#               runs the whole suite there
# Each phase prints its header, its failures and a summary line (with its
# wall and CPU seconds) when it ends; the suite ends with exactly one line
# "N passed, M failed" (summed over the phases) and exits non-zero when
# M > 0. A phase that crashes, exits non-zero or prints no count line
# counts one extra failure. Full output of each phase is kept in
# $BUILD/test-logs/.
#
# `make check` runs `tools/test.sh check`: the build, then the unit and
# numpy phases side by side (the unit runner on JOBS CPUs beside NumPy;
# the numpy phase's umath cases included).
# `tools/test.sh only PHASE...` runs the build, then the named phases one
# after another, each as in its lane (to measure or rerun a phase alone).
#
# The $TMO, $TMO_EX and $NOASLR prefixes below are split on purpose.
# shellcheck disable=SC2086
#
# Environment: BUILD (default build, as in the Makefile), JOBS (default 2),
# PYTHON (default /usr/bin/python3).
set -u

cd "$(dirname "$0")/.." || exit 1

MODE=${1:-all}
[ $# -gt 0 ] && shift
B=${BUILD:-build}
JOBS=${JOBS:-2}
PY=${PYTHON:-/usr/bin/python3}
# The sanitizer build also verifies every plan the compiler makes
# (src/cpu/plan_verify.c): a broken invariant fails the compile, not a run.
SAN='-fsanitize=address,undefined -fno-sanitize-recover=all -DOT_VERIFY_PLANS'
LOGS=$B/test-logs
# How the sanitizer and TSan trees are compiled (their checks are the same
# at any level): the tests' own objects at -O0 (TOPT; a quarter of the
# compile time of -O1 under ASan + UBSan, and the library they call keeps
# OPT: at -O1 it compiled in 57% of -O2's CPU time, but the planner-heavy
# cases ran 40% longer, and the phase took longer), every object with line
# tables only (-g1: reports still give each frame's file and line; -g's
# variable tracking was a quarter of the instrumented kernels' compile
# time). The clang tree (clang-O0 and fuzz) takes -g1 too.
SANBUILD='TOPT=-O0 DEBUG=-g1'
# The build directory as a path to run programs from.
case $B in
/*) RB=$B ;;
*) RB=./$B ;;
esac
RECORDS=$LOGS/records
# Jobs for a lane's make and unit runner: the two lanes share the CPUs.
LJOBS=$(((JOBS + 1) / 2))

# A wall-clock limit on each run (10 minutes for a phase, 8 for an example)
# where coreutils' timeout exists; expanded unquoted as a command prefix.
if command -v timeout >/dev/null 2>&1; then
    TMO="timeout -k 10 600"
    TMO_EX="timeout -k 10 480"
else
    TMO=""
    TMO_EX=""
fi

# glibc's malloc asks for transparent huge pages (the tunable is glibc
# 2.35's; older ones ignore it): on VMs where a page fault is dear (a Zen 5
# guest measured 20 us a 4 KiB fault, against 0.35 us for each 4 KiB of a
# 2 MiB one) the tests' fresh memory cost the unit phase a fifth of its
# time. What the tests check does not change; a caller's tunables stay.
GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
export GLIBC_TUNABLES

# GCC 12's ASan and TSan can fail at start-up where the kernel randomises
# mmap with more than 28 bits; run without ASLR there when the kernel lets us.
NOASLR=""
rnd=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)
if [ "$rnd" -gt 28 ] 2>/dev/null && command -v setarch >/dev/null 2>&1 &&
    setarch "$(uname -m)" -R true >/dev/null 2>&1; then
    NOASLR="setarch $(uname -m) -R"
fi

START=$(date +%s)
T0=$START

# record PHASE PASSED FAILED [NOTE]: one line of $RECORDS (appended whole,
# so that the two lanes may record at once), summed by finish.
record() {
    echo "$1|$2|$3|${4:-}|$(($(date +%s) - T0))" >>"$RECORDS"
}

# skipped PHASE WHY: a phase that did not run (or the build, WHY "ok"),
# listed in the summary without counts.
skipped() {
    echo "$1|-|-|$2|$(($(date +%s) - T0))" >>"$RECORDS"
}

# The summary of every recorded phase, in the order they ended, then the
# one "N passed, M failed" line.
finish() {
    echo
    echo "==== summary ($(($(date +%s) - START)) s)"
    awk -F'|' -v logs="$LOGS" '
        { cpu = ""
          if ((getline c < (logs "/" $1 ".cpu")) > 0) cpu = ", " c " s cpu" }
        $2 == "-" && $4 == "ok" { printf "  %s: ok, %d s\n", $1, $5; next }
        $2 == "-" { printf "  %s: skipped (%s)\n", $1, $4; next }
        { p += $2; f += $3
          printf "  %s: %d passed, %d failed%s, %d s%s\n", $1, $2, $3,
                 ($4 != "" ? " (" $4 ")" : ""), $5, cpu }
        END { printf "%d passed, %d failed\n", p, f; exit (f > 0 ? 1 : 0) }' "$RECORDS"
    exit $?
}

# Shows a phase's log without the passing cases, at most 200 lines.
show() {
    grep -v -E '^(\[ OK \]|ok |PASS)' "$1" | head -n 200
}

# count_phase PHASE LOG RC: parses the last "N passed, M failed" line of LOG
# and records it; a missing line or a non-zero exit status that the count
# does not explain adds one failure.
count_phase() {
    _phase=$1 _log=$2 _rc=$3
    _counts=$(sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1 \2/p' "$_log" | tail -n 1)
    if [ -z "$_counts" ]; then
        echo "$_phase: no 'N passed, M failed' line (exit status $_rc: a crash, a"
        echo "  timeout, or a sanitizer report at exit, which loses buffered output); see $_log"
        record "$_phase" 0 1 "no count line, exit status $_rc"
        return
    fi
    set -- $_counts
    _p=$1 _f=$2
    if [ "$_rc" -ne 0 ] && [ "$_f" -eq 0 ]; then
        echo "$_phase: exit status $_rc although no case failed (crash or leak at exit?); see $_log"
        record "$_phase" "$_p" 1 "exit status $_rc"
        return
    fi
    if [ "$_rc" -eq 0 ] && [ "$_f" -ne 0 ]; then
        record "$_phase" "$_p" "$_f" "but exit status 0"
        return
    fi
    record "$_phase" "$_p" "$_f"
}

# run_logged PHASE COMMAND...: runs a test program into $LOGS/PHASE.log,
# shows its failures and records its count line.
run_logged() {
    _ph=$1
    shift
    "$@" >"$LOGS/$_ph.log" 2>&1
    _rc=$?
    show "$LOGS/$_ph.log"
    count_phase "$_ph" "$LOGS/$_ph.log" "$_rc"
}

# phase NAME TITLE: runs phase_NAME (a - in NAME is _ there) in a
# subshell, its report kept in $LOGS/NAME.out and printed whole when it ends
# (the lanes' reports never interleave), with its wall and CPU seconds
# (user + system, children included; the CPU ones also in $LOGS/NAME.cpu
# for the summary).
phase() {
    _name=$1 _title=$2
    (
        T0=$(date +%s)
        "phase_$(echo "$_name" | tr - _)"
        # times into a file: in a pipeline it would run in a child of its
        # own, which has no children to report.
        times >"$LOGS/$_name.times"
        awk -v ph="$_name" -v t0="$T0" -v now="$(date +%s)" -v cpu="$LOGS/$_name.cpu" '
            function s(x) { split(x, a, "m"); return a[1] * 60 + a[2] }
            NR == 2 { c = s($1) + s($2)
                      printf "---- %s: %d s wall, %.0f s cpu\n", ph, now - t0, c
                      printf "%.0f\n", c > cpu }' "$LOGS/$_name.times"
    ) >"$LOGS/$_name.out" 2>&1
    { echo; echo "==== $_name: $_title"; cat "$LOGS/$_name.out"; }
}

# ---------------------------------------------------------------- phases
# The shared library as a user installs it: a SONAME with the header's major
# version, and only the public ot_* API exported (binutils' readelf and nm).
phase_library() {
    lib_p=0 lib_f=0
    if command -v readelf >/dev/null 2>&1 && command -v nm >/dev/null 2>&1; then
        major=$(sed -n 's/^#define OT_VERSION "\([0-9]*\)\..*/\1/p' include/optree.h)
        if readelf -d "$B/liboptree.so" | grep -q "SONAME.*\[liboptree\.so\.$major\]"; then
            lib_p=$((lib_p + 1))
        else
            echo "library: no SONAME liboptree.so.$major"
            lib_f=$((lib_f + 1))
        fi
        extra=$(nm -D --defined-only "$B/liboptree.so" | awk '{print $3}' |
            grep -v '^ot_[a-z]')
        if [ -z "$extra" ]; then
            lib_p=$((lib_p + 1))
        else
            echo "library: exports beyond the public API:"
            echo "$extra" | head -n 20
            lib_f=$((lib_f + 1))
        fi
    else
        echo "library: readelf or nm not installed; skipped"
    fi
    # What the header's macros and inline helpers call must be exported: a
    # program using them links against the shared library alone, and runs.
    if ${CC:-cc} -std=c11 -Iinclude tools/link_check.c -L"$B" -loptree -o "$B/link_check" &&
        LD_LIBRARY_PATH="$B" "$B/link_check"; then
        lib_p=$((lib_p + 1))
    else
        lib_f=$((lib_f + 1))
    fi
    # The headers as C++ (C linkage, no warning of g++ or clang++ at
    # -Wall -Wextra): a C++ program including a sub-header first links and runs.
    for cxx in "g++ -std=c++11" "clang++ -std=c++11 -pedantic"; do
        command -v "${cxx%% *}" >/dev/null 2>&1 || continue
        if $cxx -Wall -Wextra -Werror -Iinclude tools/cxx_check.cpp -L"$B" -loptree \
            -o "$B/cxx_check" && LD_LIBRARY_PATH="$B" "$B/cxx_check"; then
            lib_p=$((lib_p + 1))
        else
            echo "library: the headers as C++ ($cxx) failed"
            lib_f=$((lib_f + 1))
        fi
    done
    record library "$lib_p" "$lib_f"
}

phase_unit() {
    run_logged unit $TMO env OT_TEST_JOBS="$UNIT_JOBS" "$RB/test_optree"
}

phase_cli() {
    run_logged cli $TMO "$PY" tests/cli_check.py "$RB/optree-bench"
}

phase_docs() {
    run_logged docs $TMO "$PY" tools/doc_check.py --build "$B" --jobs "$LJOBS"
}

phase_numpy() {
    if [ ! -x "$PY" ]; then
        echo "numpy: $PY not found (make deps installs python3-numpy)"
        record numpy 0 1 "no $PY"
        return
    fi
    run_logged numpy $TMO "$PY" tests/diff_numpy.py "$B/liboptree.so"
    run_logged umath $TMO "$PY" tests/umath_check.py "$B/liboptree.so"
    run_logged norm $TMO "$PY" tests/norm_check.py "$B/liboptree.so"
    run_logged conv $TMO "$PY" tests/conv_check.py "$B/liboptree.so"
    run_logged pool $TMO "$PY" tests/pool_check.py "$B/liboptree.so"
    run_logged index $TMO "$PY" tests/index_check.py "$B/liboptree.so"
    run_logged attn $TMO "$PY" tests/attn_check.py "$B/liboptree.so"
    run_logged topk $TMO "$PY" tests/topk_check.py "$B/liboptree.so"
    run_logged half $TMO "$PY" tests/half_check.py "$B/liboptree.so"
    run_logged py $TMO "$PY" tests/py/run_tests.py "$B"
}

# Everything a user builds, once more with clang at -O0 (no call is
# inlined there, and clang's warnings are not gcc's), under ASan + UBSan and
# instrumented for libFuzzer's coverage (make fuzz-tree); then libFuzzer on
# the inputs optree reads from outside, 10 s a target, from the same
# objects (make fuzz-inputs): one clang build serves both, where two cost
# 70 and 110 CPU s.
phase_clang_O0() {
    if ! command -v clang >/dev/null 2>&1; then
        echo "clang-O0: clang not installed (make deps installs it)"
        record clang-O0 0 1 "no clang"
        return
    fi
    _fz="FUZZ_BUILD=$B/clang-O0 FUZZ_OPT=-O0 WERROR=-Werror DEBUG=-g1"
    # shellcheck disable=SC2086  # _fz is a list of assignments
    if make -s -j"$LJOBS" $_fz fuzz-tree >"$LOGS/clang-O0.log" 2>&1; then
        echo "clang-O0: library, unit tests, examples, optree-bench and fuzz targets built"
        record clang-O0 1 0
    else
        show "$LOGS/clang-O0.log"
        record clang-O0 0 1 "build failed"
        return
    fi
    # shellcheck disable=SC2086
    run_logged fuzz $TMO make -s -j"$LJOBS" $_fz SECONDS="${FUZZ_SECONDS:-10}" fuzz-inputs
}

phase_sanitizers() {
    if ! make -s -j"$LJOBS" WERROR=-Werror $SANBUILD BUILD="$B/san" SANFLAGS="$SAN" tests; then
        echo "sanitizers: build FAILED"
        record sanitizers 0 1 "sanitizer build failed"
        return
    fi
    # A quarantine of 64 MiB, not ASan's 256: freed memory is reused sooner,
    # so fewer fresh pages fault in; the phase took a fifth less on a VM
    # where faults are dear, and a use after free is still caught while
    # 64 MiB of later frees have not pushed the block out.
    run_logged sanitizers $TMO env OT_TEST_JOBS="$LJOBS" ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=64 \
        UBSAN_OPTIONS=print_stacktrace=1 $NOASLR "$RB/san/test_optree"
}

phase_tsan() {
    # TSEL=thread: the test program holds only the files with such cases.
    if ! make -s -j"$LJOBS" WERROR=-Werror $SANBUILD BUILD="$B/tsan" SANFLAGS='-fsanitize=thread' \
        TSEL=thread tests; then
        echo "tsan: build FAILED"
        record tsan 0 1 "tsan build failed"
        return
    fi
    run_logged tsan $TMO env OT_TEST_JOBS="$LJOBS" OPENBLAS_NUM_THREADS=1 \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tools/tsan.supp" \
        $NOASLR "$RB/tsan/test_optree" thread
}

# ot_allreduce (src/mpi/allreduce.c, in $B/liboptree_mpi.a) on 2 ranks and
# on 3 (where the order of a sum shows), then examples/mlp_mpi.c small on 2
# ranks, checked against one process; only where Open MPI is installed
# (make deps installs it), reported as skipped otherwise. Not under
# valgrind or the sanitizers: Open MPI's own start-up is what they report.
phase_mpi() {
    if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
        echo "mpi: mpicc or mpirun not installed; skipped"
        skipped mpi "no mpicc or mpirun"
        return
    fi
    # Open MPI refuses root unless told; yielding while waiting keeps ranks
    # on shared vCPUs from spinning against each other.
    MPIRUN="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --mca mpi_yield_when_idle 1"
    mp=0 mf=0
    for np in 2 3; do
        log=$LOGS/mpi-$np.log
        $TMO $MPIRUN -np $np "$RB/mpi/test_allreduce" >"$log" 2>&1
        rc=$?
        show "$log"
        _c=$(sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1 \2/p' "$log" | tail -n 1)
        if [ -z "$_c" ] || [ "$rc" -ne 0 ]; then
            echo "[FAIL] test_allreduce on $np ranks: exit status $rc; see $log"
            mf=$((mf + 1))
        fi
        if [ -n "$_c" ]; then
            set -- $_c
            mp=$((mp + $1)) mf=$((mf + $2))
        fi
    done
    log=$LOGS/mpi-mlp.log
    if $TMO $MPIRUN -np 2 -x OT_EXAMPLE_SMALL=1 "$RB/mpi/mlp_mpi" >"$log" 2>&1; then
        echo "[ OK ] mlp_mpi (OT_EXAMPLE_SMALL=1, 2 ranks)"
        mp=$((mp + 1))
    else
        echo "[FAIL] mlp_mpi (OT_EXAMPLE_SMALL=1, 2 ranks; log $log), last lines:"
        tail -n 30 "$log" | sed 's/^/    /'
        mf=$((mf + 1))
    fi
    echo "$mp passed, $mf failed"
    record mpi "$mp" "$mf"
}

# Every example runs on both backends; the cpu one with its SSE2 kernels,
# which valgrind can run everywhere. Generated code (src/cpu/jit/jit.c) exists for
# AVX2 and AVX-512, and valgrind runs only the first: where the CPU has
# AVX2, the cpu examples and the generated-code unit tests run once more
# under OT_ISA=avx2, so that memcheck sees that code's loads and stores too
# (ASan does not see inside generated code; the AVX-512 code is checked
# natively, bitwise against the interpreter, by the unit tests).
# The environment goes before valgrind: "valgrind env ... prog" would check
# env and run the program natively.
vg_case() {   # name, log, environment (VAR=value ...), command...
    _case=$1 _log=$2 _env=$3
    shift 3
    # shellcheck disable=SC2086  # _env is a list of assignments
    # --read-inline-info=no: inlined frames in reports are all it costs,
    # and reading them for libopenblas was a tenth of each run's start-up.
    $TMO_EX env $_env valgrind -q --error-exitcode=1 --leak-check=full --read-inline-info=no \
        --errors-for-leak-kinds=definite,indirect,possible "$@" >"$_log" 2>&1
    _rc=$?
    if [ "$_rc" -eq 0 ]; then
        echo "[ OK ] $_case"
        vp=$((vp + 1))
    else
        echo "[FAIL] $_case (exit status $_rc; log $_log), last lines:"
        tail -n 30 "$_log" | sed 's/^/    /'
        vf=$((vf + 1))
    fi
}

phase_valgrind() {
    vp=0 vf=0
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "valgrind: not installed (make deps installs it)"
        vf=1
    else
        avx2=0
        if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then avx2=1; fi
        for ex in "$RB"/examples/*; do
            if [ ! -f "$ex" ] || [ ! -x "$ex" ]; then continue; fi
            name=$(basename "$ex")
            for backend in ref cpu; do
                vg_case "$name ($backend)" "$LOGS/valgrind-$name-$backend.log" \
                    "OT_BACKEND=$backend OT_ISA=sse2 OT_EXAMPLE_SMALL=1" "$ex"
            done
            if [ "$avx2" -eq 1 ]; then
                vg_case "$name (cpu, OT_ISA=avx2: generated code)" "$LOGS/valgrind-$name-avx2.log" \
                    "OT_BACKEND=cpu OT_ISA=avx2 OT_EXAMPLE_SMALL=1" "$ex"
            fi
        done
        if [ "$avx2" -eq 1 ]; then
            vg_case "unit tests jit_* (OT_ISA=avx2)" "$LOGS/valgrind-jit-tests.log" \
                "OT_ISA=avx2 OT_TEST_NOFORK=1" "$RB/test_optree" jit
        fi
    fi
    echo "$vp passed, $vf failed"
    record valgrind "$vp" "$vf"
}

# The walls between the layers of src/, file sizes and branch counts
# (tools/layers.py; pmccabe from make deps).
phase_layers() {
    run_logged layers "$PY" tools/layers.py --build "$B"
}

phase_arm64() {
    run_logged arm64 $TMO env ARM64_QUICK=1 BUILD_ARM64="$B/arm64" JOBS="$LJOBS" sh tools/test_arm64.sh
}

# ---------------------------------------------------------------- build
mkdir -p "$LOGS"
: >"$RECORDS"
rm -f "$LOGS"/*.cpu "$LOGS"/*.times
echo "==== build: make all (-j$JOBS)"
# The public op header is generated from src/core/ops.def but committed (users
# build without awk's help); checked before make would regenerate it.
if ! sh tools/gen_ops.sh src/core/ops.def | cmp -s - include/optree_ops.h; then
    echo "build: include/optree_ops.h is stale: run make (tools/gen_ops.sh) and commit it"
    record build 0 1 "stale include/optree_ops.h"
    finish
fi
# So is the Python module's view of the op table and the structs.
if ! "$PY" tools/gen_py.py --check; then
    record build 0 1 "stale python/optree/_decls.py"
    finish
fi
if ! make -s -j"$JOBS" WERROR=-Werror all; then
    echo "build: FAILED"
    record build 0 1 "make all failed"
    finish
fi
echo "build: ok, $(($(date +%s) - START)) s"
skipped build ok

# ---------------------------------------------------------------- make check
if [ "$MODE" = check ]; then
    # The unit runner on every CPU and NumPy's single thread beside it: the
    # unit phase is the longer, so the CPUs stay busy to the end.
    UNIT_JOBS=$JOBS
    phase unit "$RB/test_optree (OT_TEST_JOBS=$UNIT_JOBS)" &
    phase numpy "$PY tests/diff_numpy.py $B/liboptree.so"
    wait
    phase layers "tools/layers.py: includes and calls between the layers of src/, sizes, branches"
    finish
fi

# ---------------------------------------------------------------- lanes
UNIT_JOBS=$LJOBS
if [ "$MODE" = only ]; then
    for _p in "$@"; do
        if command -v "phase_$(echo "$_p" | tr - _)" >/dev/null 2>&1; then
            phase "$_p" "alone"
        else
            echo "only: no phase named $_p"
            record "$_p" 0 1 "no such phase"
        fi
    done
    finish
fi
# The phases, longest first by their CPU seconds (README.md's table): each
# lane takes the next one the other has not claimed (mkdir is the atomic
# claim), so that the two lanes end close together on any machine, however
# its phases' costs compare there (a VM with dear page faults doubled the
# sanitizer phase, where a static split had balanced another machine).
QUEUE="sanitizers valgrind clang-O0 tsan unit arm64 numpy layers cli docs mpi library"

title() {
    case $1 in
    sanitizers) echo "ASan + UBSan build in $B/san" ;;
    valgrind) echo "$B/examples/* on ref and on cpu (OT_ISA=sse2, and avx2 where the CPU has it; OT_EXAMPLE_SMALL=1)" ;;
    tsan) echo "ThreadSanitizer build in $B/tsan, the cases with \"thread\" in their name or file" ;;
    unit) echo "$RB/test_optree (OT_TEST_JOBS=$UNIT_JOBS)" ;;
    clang-O0) echo "clang -O0 build of everything, ASan + UBSan, in $B/clang-O0; then libFuzzer on parse, load and model load from it" ;;
    arm64) echo "the NEON table under qemu-aarch64 (ARM64_QUICK=1 tools/test_arm64.sh, $B/arm64)" ;;
    numpy) echo "$PY tests/diff_numpy.py $B/liboptree.so" ;;
    layers) echo "tools/layers.py: includes and calls between the layers of src/, sizes, branches" ;;
    cli) echo "$PY tests/cli_check.py $B/optree-bench" ;;
    docs) echo "$PY tools/doc_check.py: the C blocks of README.md and docs/" ;;
    mpi) echo "$B/mpi/test_allreduce on 2 and 3 ranks, $B/mpi/mlp_mpi on 2" ;;
    library) echo "SONAME and exported symbols of $B/liboptree.so" ;;
    esac
}

lane() {
    for _q in $QUEUE; do
        if [ "$_q" = arm64 ] && { [ "$(uname -m)" != x86_64 ] || [ "${OT_TEST_ARM64:-1}" = 0 ]; }; then
            continue
        fi
        mkdir "$LOGS/claimed-$_q" 2>/dev/null || continue
        phase "$_q" "$(title "$_q")"
    done
}
rm -rf "$LOGS"/claimed-*
lane &
lane
wait
rm -rf "$LOGS"/claimed-*
finish
