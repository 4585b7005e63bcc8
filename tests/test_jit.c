/*
 * test_jit.c - the generated code of src/cpu/jit/jit.c against the tile kernels it
 * stands in for. The oracle is the interpreter itself: every result must be
 * bitwise that of the same program run op by op through the same table
 * (NaN matching NaN; the random trees compare NaNs bit for bit too), since
 * both use the same instructions and the same SLEEF functions. Each level runs for every table with generated code
 * that this CPU runs (AVX2: VEX-encoded ymm code; AVX-512: EVEX-encoded zmm
 * code):
 *   - hand-built kernels (one op of every kind, f32 and f64, vector and
 *     broadcast operands, special values) run through ot__jit_build's
 *     function directly;
 *   - whole assignments through the public API on a backend with generated
 *     code and one with OT_JIT=0: tails, views, multi-output, reductions,
 *     in-place updates and programs with more live values than registers.
 * Where the CPU has neither (or the build is not x86-64 Linux) there is no
 * generated code, and the API level still checks that both agree.
 */
#define _DEFAULT_SOURCE   /* MAP_ANONYMOUS: a guard page */
#include "test.h"
#include "plan.h"   /* ot__sched_streams */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NV 64   /* elements per hand-built run: whole vectors for both dtypes */

/* The ISAs whose tables have generated code. */
static const char *const jit_isas[] = {"avx2", "avx512"};
#define NJIT_ISA 2

/* The table of jit_isas[i] where code can be generated for it here (the
 * CPU runs it, x86-64 Linux), else NULL. */
static const ot_kernels *jit_table(int i)
{
#if defined(__x86_64__) && defined(__linux__)
    return ot__kernels_for(ot__isa_parse(jit_isas[i]));
#else
    (void)i;
    return NULL;
#endif
}

/* Whether a cpu backend made now generates code (OT_ISA or the best ISA of
 * this CPU, OT_JIT), as the backend reports it. */
static bool backend_jits(void)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    bool on = be && ot_backend_options(be).jit == OT_JIT_ON;
    ot_backend_free(be);
    return on;
}

/* Inputs with the special values first: NaN, +-inf, -0, denormals, huge
 * and tiny, then a spread of ordinary values of both signs. */
static void fill(double *x, int n, int salt)
{
    static const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1e-310, -1e-40,
                                     3e38, -3e38, 1e300, 0.5, -1.0, 1.0, 89.0, -104.0, 710.0};
    int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < n; i++) {
        int k = (i + 5 * salt) % (ns + 24);
        x[i] = k < ns ? special[k] : (k - ns - 11.5) * 0.37 * (1 + salt);
    }
}

static bool same_bits(const void *a, const void *b, int kd, int n)
{
    size_t es = kd == OT_KD_F64 ? 8 : 4;
    for (int i = 0; i < n; i++) {
        const char *x = (const char *)a + i * es, *y = (const char *)b + i * es;
        if (memcmp(x, y, es) == 0) continue;
        double u = kd == OT_KD_F64 ? *(const double *)x : *(const float *)x;
        double v = kd == OT_KD_F64 ? *(const double *)y : *(const float *)y;
        if (!(u != u && v != v)) return false;
    }
    return true;
}

/* A kernel of: LOAD a, LOAD b, LOAD c (vector or scalar), the op under
 * test, then neg of its result (two body ops: one alone is not compiled). */
typedef struct hand {
    ot_kernel k;
    ot_view loads[3];
    ot_insn insns[5];
} hand;

static void hand_init(hand *h, int kd, ot_insn op, unsigned scalar_ops)
{
    memset(h, 0, sizeof *h);
    ot_dtype dt = ot__kd_dtype(kd);
    for (int i = 0; i < 3; i++) {
        h->loads[i] = (ot_view){.space = OT_SPACE_LEAF, .dtype = (uint8_t)dt, .index = i};
        h->loads[i].strides[0] = (scalar_ops >> i & 1) ? 0 : 1;
        h->insns[i] = (ot_insn){.code = OT_I_LOAD, .kd = (uint8_t)kd, .dst = (int16_t)i, .a = -1,
                                .b = -1, .c = -1, .arg = i,
                                .scalar = (uint8_t)((scalar_ops >> i & 1) ? 8 : 0)};
    }
    op.kd = (uint8_t)kd;
    op.dst = 3;
    op.scalar = (uint8_t)(scalar_ops & 7);
    h->insns[3] = op;
    h->insns[4] = (ot_insn){.code = OT_I_UNARY, .op = OT_OP_NEG, .kd = (uint8_t)kd, .dst = 4,
                            .a = 3, .b = -1, .c = -1};
    h->k = (ot_kernel){.kind = OT_KER_EW, .ndim = 1, .dims = {NV}, .nload = 3, .loads = h->loads,
                       .ninsn = 5, .insns = h->insns, .nbuf = 5, .result = 4, .result_kd = (uint8_t)kd,
                       .store = h->loads[0]};
}

/* The same program through the tile kernels. */
static void interpret(const ot_kernels *kt, int acc, const ot_insn *op, int kd, void *const in[3],
                      void *tmp, void *out, unsigned scalar_ops)
{
    int form2 = (scalar_ops & 3) == 1 ? OT_FORM_SV : (scalar_ops & 3) == 2 ? OT_FORM_VS : OT_FORM_VV;
    const void *a = in[op->a], *b = op->b < 0 ? NULL : in[op->b], *c = op->c < 0 ? NULL : in[op->c];
    if (op->code == OT_I_UNARY) kt->unary[acc][op->op][kd](tmp, a, NV);
    else if (op->code == OT_I_BINARY) kt->binary[op->op][kd][form2](tmp, a, b, NV);
    else (op->op == OT_OP_SUB ? kt->fnma : kt->fma)[kd][scalar_ops & 7](tmp, a, b, c, NV);
    kt->unary[acc][OT_OP_NEG][kd](out, tmp, NV);
}

/* Runs fn into out = got + at (guard bytes all around) and compares with
 * want; false on a difference or a guard byte touched. */
static bool run_guarded(void (*fn)(char *const *, char *const *, size_t), char *const *val,
                        char *got, size_t size, int at, const void *want, int kd)
{
    size_t es = kd == OT_KD_F64 ? 8 : 4;
    char *out[1] = {got + at};
    memset(got, 0x5a, size);
    fn(val, out, NV * es);
    bool ok = same_bits(got + at, want, kd, NV);
    for (size_t i = 0; i < size; i++)
        ok = ok && (((unsigned char)got[i] == 0x5a) || (i >= (size_t)at && i < at + NV * es));
    return ok;
}

/* Builds and runs one op, through the plain code with its output
 * unaligned and the streaming-store code with it aligned; returns false
 * (and reports) on a mismatch. */
static bool check_op(const ot_kernels *kt, ot_insn op, int kd, int acc, unsigned scalar_ops,
                     const char *what)
{
    hand h;
    hand_init(&h, kd, op, scalar_ops);
    ot_jit *j = ot__jit_build(&h.k, kt, acc, true);
    ot_jit_map map = {NULL, 0};
    if (j && !ot__jit_install(&j, 1, &map)) {
        ot__jit_free(j);
        j = NULL;
    }
    if (!j) {
        test__fail(__FILE__, __LINE__, "%s (%s, %s, scalars %u): no code generated", ot__isa_name(kt->isa),
                   what, kd ? "f64" : "f32", scalar_ops);
        return false;
    }
    _Alignas(64) char in[3][NV * 8], tmp[NV * 8], want[NV * 8], got[NV * 8 + 128];
    double x[NV];
    for (int i = 0; i < 3; i++) {
        fill(x, NV, i);
        for (int e = 0; e < NV; e++) {
            if (kd == OT_KD_F64) ((double *)in[i])[e] = x[e];
            else ((float *)in[i])[e] = (float)x[e];
        }
    }
    void *ins[3] = {in[0], in[1], in[2]};
    interpret(kt, acc, &op, kd, ins, tmp, want, scalar_ops);
    char *val[5] = {in[0], in[1], in[2], NULL, NULL};
    bool ok = run_guarded(j->fn, val, got, sizeof got, 32, want, kd) &&   /* unaligned */
              j->fn_stream && run_guarded(j->fn_stream, val, got, sizeof got, 64, want, kd);
    if (!ok)
        test__fail(__FILE__, __LINE__, "%s: %s (%s, acc %d, scalars %u): generated code differs",
                   ot__isa_name(kt->isa), what, kd ? "f64" : "f32", acc, scalar_ops);
    ot__jit_free(j);
    ot__jit_unmap(&map);
    return ok;
}

/* Every op of one table's generated code against its tile kernels. */
static void each_op(const ot_kernels *kt)
{
    static const int unary[] = {OT_OP_FINITE, OT_OP_NEG, OT_OP_ABS, OT_OP_SGN, OT_OP_SQRT,
                                OT_OP_SQR, OT_OP_EXP, OT_OP_EXP2, OT_OP_LOG, OT_OP_LOG2,
                                OT_OP_SAFELOG, OT_OP_SIG, OT_OP_SIG2, OT_OP_TANH, OT_OP_TANH2,
                                OT_OP_RINT, OT_OP_RECIP, OT_OP_RELU, OT_OP_SIN, OT_OP_COS};
    static const int binary[] = {OT_OP_ADD, OT_OP_SUB, OT_OP_MUL, OT_OP_DIV, OT_OP_POW,
                                 OT_OP_EQ, OT_OP_NE, OT_OP_LT, OT_OP_LE, OT_OP_GT, OT_OP_GE,
                                 OT_OP_MINIMUM, OT_OP_MAXIMUM};
    for (int kd = 0; kd < 2; kd++)
        for (int acc = 0; acc < 2; acc++) {
            for (size_t i = 0; i < sizeof unary / sizeof *unary; i++)
                check_op(kt, (ot_insn){.code = OT_I_UNARY, .op = (uint8_t)unary[i], .a = 0, .b = -1,
                                   .c = -1},
                         kd, acc, 0, ot_op_name(unary[i]));
            for (size_t i = 0; i < sizeof binary / sizeof *binary; i++)
                for (unsigned sc = 0; sc < 3; sc++)
                    check_op(kt, (ot_insn){.code = OT_I_BINARY, .op = (uint8_t)binary[i], .a = 0,
                                       .b = 1, .c = -1},
                             kd, acc, sc, ot_op_name(binary[i]));
            for (unsigned sc = 0; sc < 7; sc++) {
                check_op(kt, (ot_insn){.code = OT_I_FMA, .op = OT_OP_ADD, .a = 0, .b = 1, .c = 2}, kd,
                         acc, sc, "fma");
                check_op(kt, (ot_insn){.code = OT_I_FMA, .op = OT_OP_SUB, .a = 0, .b = 1, .c = 2}, kd,
                         acc, sc, "fnma");
            }
        }
    /* One operand read twice, in every position. */
    check_op(kt, (ot_insn){.code = OT_I_BINARY, .op = OT_OP_POW, .a = 0, .b = 0, .c = -1}, 0, 0,
             0, "pow(x, x)");
    check_op(kt, (ot_insn){.code = OT_I_FMA, .op = OT_OP_ADD, .a = 1, .b = 0, .c = 1}, 1, 0, 0,
             "fma(y, x, y)");
}

TEST(jit_each_op_bitwise)
{
    for (int i = 0; i < NJIT_ISA; i++)
        if (jit_table(i)) each_op(jit_table(i));
}

/* exp's, log's and tanh's inline steps (jit.c exp_steps, log_steps,
 * tanh_steps (the library's own); log35_steps and tanh35_steps at u35)
 * against the table's functions, on f32 bit patterns, each chunk of 2^16 run
 * through the generated code and through the tile kernels (the op then
 * neg, as hand_init builds it) and compared byte for byte, NaN payloads
 * too: every chunk with OT_TEST_EXHAUSTIVE=1 (about 100 s for both
 * tables), else every fifth, which still meets every sign and exponent 25
 * times over (a chunk is the low 16 bits). safelog (log's steps on its
 * clamped argument) on every 21st chunk (every 4 * stride + 1st), sig,
 * whose exp is the same steps, on every 81st. Under ASan the stride is
 * wider: the compare is instrumented there. Not under valgrind, whose FP
 * emulation takes some 10 s for one chunk of denormals: there
 * jit_each_op_bitwise runs the same code on its special values. */
#if defined(__SANITIZE_ADDRESS__)
#define EXP_CHUNK_STEP 61
#else
#define EXP_CHUNK_STEP 5
#endif

/* Under valgrind (its libraries in LD_PRELOAD) code runs some 40 times
 * slower, and the jit_* valgrind run matches this file. */
static bool under_valgrind(void)
{
    const char *pre = getenv("LD_PRELOAD");
    return pre && strstr(pre, "vgpreload");
}

/* Under valgrind and the sanitizers, where a case costs 5-30 times its
 * plain run (page faults, the shadow's above all), matrices of cases run
 * a rotating third: every value of each parameter still runs; the plain
 * unit phase runs them all. */
static bool slow_tool(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#else
    return under_valgrind();
#endif
}
#define EXP_CHUNK (1 << 16)

/* The code of op at accuracy acc on one f32 vector input (then neg, as
 * hand_init builds it), installed in *map; NULL where none was built. */
static ot_jit *unary_code(const ot_kernels *kt, int op, int acc, ot_jit_map *map)
{
    hand h;
    hand_init(&h, OT_KD_F32, (ot_insn){.code = OT_I_UNARY, .op = (uint8_t)op, .a = 0, .b = -1, .c = -1}, 6);
    ot_jit *j = ot__jit_build(&h.k, kt, acc, false);
    *map = (ot_jit_map){NULL, 0};
    if (!j || !ot__jit_install(&j, 1, map)) {
        ot__jit_free(j);
        return NULL;
    }
    return j;
}

/* Runs n f32 bit patterns (whole vectors) through j and through the tile
 * kernels of op then neg and compares byte for byte, NaN payloads too;
 * reports the first input that differs. tmp, want and got hold n each. */
static bool same_as_table(const ot_kernels *kt, const ot_jit *j, int op, int acc,
                          const uint32_t *in, uint32_t *tmp, uint32_t *want, uint32_t *got,
                          uint32_t n)
{
    kt->unary[acc][op][OT_KD_F32](tmp, in, n);
    kt->unary[0][OT_OP_NEG][OT_KD_F32](want, tmp, n);
    char *val[5] = {(char *)in, (char *)in, (char *)in, NULL, NULL}, *out[1] = {(char *)got};
    j->fn(val, out, (size_t)n * 4);
    if (memcmp(got, want, (size_t)n * 4) == 0) return true;
    for (uint32_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            test__fail(__FILE__, __LINE__, "%s %s u%s(0x%08x): code 0x%08x, table 0x%08x",
                       ot__isa_name(kt->isa), ot_op_name(op), acc ? "35" : "10", in[i],
                       got[i] ^ 0x80000000u, want[i] ^ 0x80000000u);
            break;
        }
    return false;
}

/* Chunks first to last - 1 of those `step` chunks apart (chunk k starts at
 * k * step * EXP_CHUNK). */
static bool every_f32(const ot_kernels *kt, int op, int acc, uint32_t step, uint64_t first,
                      uint64_t last)
{
    ot_jit_map map;
    ot_jit *j = unary_code(kt, op, acc, &map);
    if (!j) return false;
    uint32_t *in = malloc(EXP_CHUNK * 4), *tmp = malloc(EXP_CHUNK * 4);
    uint32_t *want = malloc(EXP_CHUNK * 4), *got = malloc(EXP_CHUNK * 4);
    bool ok = in && tmp && want && got;
    for (uint64_t k = first, base = k * EXP_CHUNK * step; ok && k < last;
         k++, base += (uint64_t)EXP_CHUNK * step) {
        for (uint32_t i = 0; i < EXP_CHUNK; i++) in[i] = (uint32_t)base + i;
        ok = same_as_table(kt, j, op, acc, in, tmp, want, got, EXP_CHUNK);
    }
    free(in);
    free(tmp);
    free(want);
    free(got);
    ot__jit_free(j);
    ot__jit_unmap(&map);
    return ok;
}

/* One function's sweep on every table with inline functions: the chunk
 * step is step_mul * the stride (+ 1 when odd_offset), so that a wider
 * step still starts on other low bits. Part `part` of `parts` sweeps that
 * share of the chunks, so that one slow function's sweep can be split into
 * cases that a runner with two jobs runs side by side. */
static void sweep_part(int op, int acc, uint32_t step_mul, bool odd_offset, bool fixed, int part,
                       int parts)
{
    for (int i = 0; i < NJIT_ISA && !under_valgrind(); i++) {
        const ot_kernels *kt = jit_table(i);
        if (!kt || !kt->inline_sleef) continue;
        const char *all = getenv("OT_TEST_EXHAUSTIVE");
        uint32_t stride = !fixed && all && strcmp(all, "1") == 0 ? 1 : EXP_CHUNK_STEP;
        uint32_t step = step_mul * stride + odd_offset;
        uint64_t chunks = (((uint64_t)1 << 32) + (uint64_t)EXP_CHUNK * step - 1) /
                          ((uint64_t)EXP_CHUNK * step);
        CHECK(every_f32(kt, op, acc, step, chunks * (uint64_t)part / (uint64_t)parts,
                        chunks * (uint64_t)(part + 1) / (uint64_t)parts));
    }
}

static void sweep_every_f32(int op, int acc, uint32_t step_mul, bool odd_offset, bool fixed)
{
    sweep_part(op, acc, step_mul, odd_offset, fixed, 0, 1);
}

/* One case per function, so that a runner with two jobs runs them side by
 * side (together they are half the unit phase's time); tanh's, the slowest
 * by three times (about 30 CPU s), in two halves of its chunks. */
TEST(jit_inline_every_f32_exp) { sweep_every_f32(OT_OP_EXP, 0, 1, false, false); }
TEST(jit_inline_every_f32_log) { sweep_every_f32(OT_OP_LOG, 0, 1, false, false); }
TEST(jit_inline_every_f32_tanh_half1) { sweep_part(OT_OP_TANH, 0, 1, false, false, 0, 2); }
TEST(jit_inline_every_f32_tanh_half2) { sweep_part(OT_OP_TANH, 0, 1, false, false, 1, 2); }
TEST(jit_inline_every_f32_log35) { sweep_every_f32(OT_OP_LOG, 1, 1, false, false); }
TEST(jit_inline_every_f32_tanh35) { sweep_every_f32(OT_OP_TANH, 1, 1, false, false); }
TEST(jit_inline_every_f32_safelog)
{
    sweep_every_f32(OT_OP_SAFELOG, 0, 4, true, false);
    sweep_every_f32(OT_OP_SAFELOG, 1, 4, true, false);
}
TEST(jit_inline_every_f32_sig) { sweep_every_f32(OT_OP_SIG, 0, 16, true, true); }

/* The inputs where log's steps branch or end, as bit patterns: +-0,
 * every denormal exponent (the scaled path) with its smallest, largest and
 * a middle mantissa, FLT_MIN and its neighbours, 1 and the floats nearest
 * it, sqrt(1/2) and sqrt(2) (where e steps) and theirs, safelog's floor
 * exp(-50) and its neighbours, FLT_MAX, inf, negatives (denormal, normal,
 * -inf) and NaNs (quiet, signalling, negative, with payloads): the sweeps
 * above meet only every fifth chunk, and valgrind's run meets only these. */
static uint32_t log_edges(uint32_t *in)
{
    static const uint32_t fixed[] = {
        0x00000000, 0x80000000, 0x007FFFFF, 0x00800000, 0x00800001, 0x3F800000, 0x3F7FFFFF,
        0x3F800001, 0x3F7FFFFE, 0x3F800002, 0x3F3504F2, 0x3F3504F3, 0x3F3504F4, 0x3FB504F2,
        0x3FB504F3, 0x3FB504F4, 0x1B692BEA, 0x1B692BEB, 0x1B692BEC, 0x7F7FFFFF, 0x7F800000,
        0x80000001, 0x807FFFFF, 0xBF800000, 0xC2C80000, 0xFF7FFFFF, 0xFF800000, 0x7FC00000,
        0xFFC00000, 0x7FC12345, 0x7F800001, 0x7FA00000, 0xFFBFFFFF, 0x40000000, 0x3F000000};
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) in[n++] = fixed[i];
    for (int b = 0; b < 23; b++) {   /* the denormals whose top bit is b */
        in[n++] = 1u << b;
        in[n++] = (2u << b) - 1;
        in[n++] = (1u << b) | ((1u << b) - 1) / 3;
    }
    while (n % 16) in[n++] = 0x3F800000;   /* whole vectors */
    return n;
}

/* log and safelog (u10: the library's own; u35: SLEEF's) on log_edges
 * against the tile kernels, bitwise, on every table with generated code
 * this CPU runs; u10's code is inline, calling nothing (no fn_tail, which
 * only code with a call has). */
TEST(jit_inline_log_edges)
{
    static const int ops[] = {OT_OP_LOG, OT_OP_SAFELOG};
    uint32_t in[128], tmp[128], want[128], got[128];
    uint32_t n = log_edges(in);
    for (int i = 0; i < NJIT_ISA; i++)
        for (int acc = 0; acc < 2 && jit_table(i); acc++)
            for (int o = 0; o < 2; o++) {
                const ot_kernels *kt = jit_table(i);
                if (acc && !kt->inline_sleef) continue;
                ot_jit_map map;
                ot_jit *j = unary_code(kt, ops[o], acc, &map);
                CHECK(j != NULL);
                if (!j) continue;
                if (acc == 0) CHECK(j->fn_tail == j->fn);
                CHECK(same_as_table(kt, j, ops[o], acc, in, tmp, want, got, n));
                ot__jit_free(j);
                ot__jit_unmap(&map);
            }
}

/* What the generator refuses: i32, casts, a single body op. */
TEST(jit_declines_what_it_does_not_cover)
{
    ot_jit_map map;
    CHECK(ot__jit_install(NULL, 0, &map) && map.base == NULL);
    hand h;
    for (int i = 0; i < NJIT_ISA; i++) {
        const ot_kernels *kt = jit_table(i);
        if (!kt) continue;
        hand_init(&h, OT_KD_I32, (ot_insn){.code = OT_I_BINARY, .op = OT_OP_ADD, .a = 0, .b = 1, .c = -1}, 0);
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        /* One op alone: only a memory-bound one whose output streams, or
         * an f32 exp emitted inline. */
        hand_init(&h, OT_KD_F32, (ot_insn){.code = OT_I_UNARY, .op = OT_OP_SIN, .a = 0, .b = -1, .c = -1}, 6);
        h.k.ninsn = 4;
        h.k.result = 3;
        CHECK(!ot__sched_streams(&h.k, 1));               /* sin: bound by its arithmetic */
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        CHECK(ot__jit_build(&h.k, kt, 0, true) == NULL);
        h.insns[3].op = OT_OP_EXP;
        ot_jit *alone = ot__jit_build(&h.k, kt, 0, false);
        CHECK((alone != NULL) == kt->inline_sleef);
        ot__jit_free(alone);
        hand_init(&h, OT_KD_F64, (ot_insn){.code = OT_I_UNARY, .op = OT_OP_EXP, .a = 0, .b = -1, .c = -1}, 6);
        h.k.ninsn = 4;
        h.k.result = 3;
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);   /* f64 exp calls SLEEF */
        hand_init(&h, OT_KD_F32, (ot_insn){.code = OT_I_FMA, .op = OT_OP_ADD, .a = 0, .b = 1, .c = 2}, 0);
        h.k.ninsn = 4;
        h.k.result = 3;
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        CHECK(!ot__sched_streams(&h.k, NV * 4));          /* reads what it writes */
        h.k.store.space = OT_SPACE_OUT;
        CHECK(!ot__sched_streams(&h.k, 0));
        /* three loads and a store of NV floats move 16*NV bytes */
        CHECK(!ot__sched_streams(&h.k, 16 * NV + 1));
        CHECK(ot__sched_streams(&h.k, 16 * NV));
        ot_jit *j = ot__jit_build(&h.k, kt, 0, true);
        CHECK(j && j->stream_at > 0);
        ot__jit_free(j);
        hand_init(&h, OT_KD_F32, (ot_insn){.code = OT_I_CAST, .kd_from = OT_KD_F64, .a = 0, .b = -1, .c = -1}, 0);
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
    }
    hand_init(&h, OT_KD_F32, (ot_insn){.code = OT_I_UNARY, .op = OT_OP_EXP, .a = 0, .b = -1, .c = -1}, 0);
    CHECK(ot__jit_build(&h.k, ot__kernels_for(OT_ISA_SCALAR), 0, false) == NULL);
    const ot_kernels *sse2 = ot__kernels_for(OT_ISA_SSE2);
    if (sse2) CHECK(ot__jit_build(&h.k, sse2, 0, false) == NULL);
}

/* The hand kernel as a reduction (op over axis of a 2 x NV/2 space, -1:
 * everything) of its result; loads contiguous along the rows, load
 * scalar_ops broadcast. */
static void hand_reduce(hand *h, int kd, int op, int axis, unsigned scalar_ops)
{
    hand_init(h, kd, (ot_insn){.code = OT_I_BINARY, .op = OT_OP_MUL, .a = 0, .b = 1, .c = -1},
              scalar_ops);
    h->k.kind = OT_KER_REDUCE;
    h->k.red_op = op;
    h->k.red_axis = axis;
    h->k.ndim = 2;
    h->k.dims[0] = 2;
    h->k.dims[1] = NV / 2;
    for (int i = 0; i < 3; i++) {
        h->loads[i].strides[1] = h->loads[i].strides[0];
        h->loads[i].strides[0] *= NV / 2;
    }
}

/* What reductions get code: sum, mean, max and min of floats over rows or
 * everything, contiguous loads, further outputs in place and, for max and
 * min (whose NaN or zero extremes run again interpreted), none at all; a
 * sum down columns gets its body's elementwise code, a max none. */
TEST(jit_reductions_it_declines)
{
    for (int i = 0; i < NJIT_ISA; i++) {
        const ot_kernels *kt = jit_table(i);
        if (!kt) continue;
        hand h;
        static const int ops[] = {OT_OP_SUM, OT_OP_MEAN, OT_OP_MAX, OT_OP_MIN};
        for (int o = 0; o < 4; o++)
            for (int axis = -1; axis <= 1; axis += 2) {
                hand_reduce(&h, o % 2, ops[o], axis, 2);
                ot_jit *j = ot__jit_build(&h.k, kt, 0, false);
                CHECK(j && j->reduce && !j->fn_stream);
                ot__jit_free(j);
            }
        hand_reduce(&h, OT_KD_F32, OT_OP_SUM, 0, 0);             /* a column: its body's code */
        ot_jit *col = ot__jit_build(&h.k, kt, 0, false);
        CHECK(col && !col->reduce && col->code_len > 0 && !col->stream_at);
        ot__jit_free(col);
        hand_reduce(&h, OT_KD_F32, OT_OP_MAX, 0, 0);             /* a column's max: none */
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        hand_reduce(&h, OT_KD_F32, OT_OP_ARGMAX, 1, 0);
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        hand_reduce(&h, OT_KD_I32, OT_OP_SUM, 1, 0);
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        hand_reduce(&h, OT_KD_F32, OT_OP_SUM, 1, 0);
        h.loads[1].strides[1] = 2;                                /* strided */
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
        ot_xstore xs = {.view = h.loads[2], .result = 4, .direct = true};
        for (int o = 0; o < 4; o++) {
            hand_reduce(&h, OT_KD_F64, ops[o], 1, 0);
            h.k.nxstore = 1;
            h.k.xstores = &xs;
            ot_jit *j = ot__jit_build(&h.k, kt, 0, false);
            CHECK((j != NULL) == (o < 2));
            ot__jit_free(j);
        }
        xs.direct = false;
        hand_reduce(&h, OT_KD_F64, OT_OP_SUM, 1, 0);
        h.k.nxstore = 1;
        h.k.xstores = &xs;
        CHECK(ot__jit_build(&h.k, kt, 0, false) == NULL);
    }
}

/* ---- whole assignments: generated code against OT_JIT=0 ------------------ */

/* The ISAs the whole-assignment cases run under: each one with generated
 * code that this CPU runs, or just the environment's choice (NULL) where
 * there is none. Returns how many. */
static int assignment_isas(const char *isa[NJIT_ISA])
{
    int n = 0;
    for (int i = 0; i < NJIT_ISA; i++)
        if (jit_table(i)) isa[n++] = jit_isas[i];
    if (n == 0) isa[n++] = NULL;
    return n;
}

/* How a backend runs elementwise kernels: the tile interpreter alone
 * (OT_JIT=0), generated code, or generated code whose every output
 * streams (OT_STREAM_BYTES=1). */
enum { INTERP, JIT, STREAM };

/* A cpu backend in one of those modes, under OT_ISA=isa (NULL: whatever
 * the environment says), at accuracy acc (OT_ULP10 or OT_ULP35). */
static ot_backend *backend_acc(const char *isa, int mode, int threads, int acc)
{
    static const char *const vars[3] = {"OT_JIT", "OT_STREAM_BYTES", "OT_ISA"};
    const char *values[3] = {mode == INTERP ? "0" : NULL, mode == STREAM ? "1" : NULL, isa};
    char *saved[3];
    int n = isa ? 3 : 2;   /* without isa, OT_ISA stays as the environment says */
    test__env_save(n, vars, saved, values);
    ot_backend *be = ot_backend_new(
        "cpu", &(ot_backend_opts){.threads = threads, .seed = 3, .accuracy = acc});
    test__env_restore(n, vars, saved);
    if (!be) test__fail(__FILE__, __LINE__, "backend (OT_ISA=%s): %s", isa ? isa : "-", ot_errmsg());
    return be;
}

static ot_backend *backend(const char *isa, int mode, int threads)
{
    return backend_acc(isa, mode, threads, OT_ULP10);
}

typedef ot_node *(*tree_fn)(ot_tensor *const *x);

/* Runs tree(x) on a backend of each mode at accuracy acc into outputs of
 * shape out, with inputs of shape in (x[3] a column, x[4] a 0-d), and
 * compares bitwise. */
static void compare_acc(const char *isa, const char *what, ot_dtype dt, ot_shape in, ot_shape out,
                        tree_fn tree, int acc)
{
    ot_backend *be[3] = {backend_acc(isa, INTERP, 1, acc), backend_acc(isa, JIT, 1, acc),
                         backend_acc(isa, STREAM, 1, acc)};
    void *res[3] = {NULL, NULL, NULL};
    int64_t n = 1;
    for (int d = 0; d < out.ndim; d++) n *= out.dims[d];
    for (int b = 0; b < 3 && be[0] && be[1] && be[2]; b++) {
        ot_tensor *x[5];
        ot_shape col = in;
        if (col.ndim > 0) col.dims[col.ndim - 1] = 1;
        for (int i = 0; i < 5; i++) {
            ot_shape s = i == 3 ? col : i == 4 ? (ot_shape){0} : in;
            int64_t m = 1;
            for (int d = 0; d < s.ndim; d++) m *= s.dims[d];
            double *h = malloc(sizeof *h * (size_t)(m ? m : 1));
            fill(h, (int)m, i);
            for (int64_t e = 0; e < m; e++) h[e] = i == 1 ? 0.25 + (double)(e % 97) * 0.031 : h[e];
            ot_tensor *t = ot_array(be[b], s, OT_F64, h);
            x[i] = dt == OT_F64 ? t : ot_empty(be[b], s, dt);
            if (dt != OT_F64) {
                ot_assign(x[i], ot_cast(t, .dtype = dt));
                ot_tensor_free(t);
            }
            free(h);
        }
        ot_tensor *o = ot_empty(be[b], out, dt);
        ot_pool *p = ot_pool_push();
        int rc = ot_assign(o, tree(x));
        ot_pool_pop(p);
        if (rc) test__fail(__FILE__, __LINE__, "%s: assign: %s", what, ot_errmsg());
        res[b] = malloc(ot_dtype_size(dt) * (size_t)(n ? n : 1));
        ot_get(o, res[b]);
        ot_tensor_free(o);
        for (int i = 0; i < 5; i++) ot_tensor_free(x[i]);
    }
    for (int b = 1; b < 3; b++)
        if (res[0] && res[b] && !same_bits(res[0], res[b], ot__kd(dt), (int)n))
            test__fail(__FILE__, __LINE__,
                       "OT_ISA=%s: %s (%s, %lldx%lld): %s and interpreter differ",
                       isa ? isa : "-", what, ot_dtype_name(dt), (long long)in.dims[0],
                       (long long)in.dims[1], b == 1 ? "generated code" : "streaming stores");
    for (int b = 0; b < 3; b++) {
        free(res[b]);
        ot_backend_free(be[b]);
    }
}

static void compare(const char *isa, const char *what, ot_dtype dt, ot_shape in, ot_shape out,
                    tree_fn tree)
{
    compare_acc(isa, what, dt, in, out, tree, OT_ULP10);
}

static ot_node *t_w4(ot_tensor *const *x)
{
    return ot_add(ot_mul(ot_sqrt(ot_abs(x[0])), ot_log(ot_add(ot_mul(x[1], x[1]), 1.0))),
                  ot_mul(ot_exp(ot_neg(x[2])), 0.5));
}
static ot_node *t_bcast(ot_tensor *const *x)
{
    return ot_tanh(ot_add(ot_mul(x[0], x[3]), ot_div(x[4], ot_add(x[1], 1.0))));
}
static ot_node *t_view(ot_tensor *const *x)
{
    return ot_sig(ot_sub(ot_T(x[0]), ot_mul(ot_T(x[1]), 2.0)));
}
static ot_node *t_reduce(ot_tensor *const *x)
{
    return ot_sum(ot_exp(ot_sub(x[0], x[3])), .axis = 1, .keepdims = true);
}
static ot_node *t_softmax(ot_tensor *const *x) { return ot_softmax(x[0], .axis = 1); }
/* More live values than ymm registers, with calls among them. */
static ot_node *t_pressure(ot_tensor *const *x)
{
    ot_node *v[24], *acc = NULL;
    for (int i = 0; i < 24; i++)
        v[i] = i % 3 == 0 ? ot_exp(ot_mul(x[i % 3], 0.01 * i))
                          : ot_add(ot_mul(x[i % 3], (double)i), ot_sqr(x[1]));
    for (int i = 0; i < 24; i++) acc = acc ? ot_add(acc, ot_mul(v[i], v[23 - i])) : v[i];
    return ot_maximum(acc, ot_pow(x[1], x[4]));
}

/* exp, log and tanh inline with many live values and no call at all (the
 * constants then sit in zmm16-31; at both accuracies, whose log and tanh
 * steps differ), and under row reductions: inline where they fit beside
 * the accumulators (log in a sum; u35's log in a min), called where they
 * do not (u10's tanh in a max). */
static ot_node *t_inline_pressure(ot_tensor *const *x)
{
    ot_node *v[18], *acc = NULL;
    for (int i = 0; i < 18; i++)
        v[i] = i % 3 == 0   ? ot_tanh(ot_mul(x[0], 0.1 * i))
               : i % 3 == 1 ? ot_log(ot_add(ot_sqr(x[1]), (double)i))
                            : ot_exp(ot_mul(x[2], 0.01 * i));
    for (int i = 0; i < 18; i++) acc = acc ? ot_add(acc, ot_mul(v[i], v[17 - i])) : v[i];
    return acc;
}
static ot_node *t_inline_reduce(ot_tensor *const *x)
{
    ot_node *lo = ot_min(ot_log(ot_add(ot_sqr(x[2]), 1.0)), .axis = 1, .keepdims = true);
    return ot_add(ot_add(ot_max(ot_tanh(ot_mul(x[0], x[3])), .axis = 1, .keepdims = true),
                         ot_sum(ot_log(ot_sig(x[1])), .axis = 1, .keepdims = true)),
                  lo);
}

/* The selects and compares emitted inline (relu, recip, rint, finite, sgn,
 * eq ... ge, minimum, maximum), scalars among the operands, alone and under
 * reductions (whose frame constants are made only where the body reads
 * one). */
static ot_node *t_selects(ot_tensor *const *x)
{
    ot_node *s = ot_add(ot_mul(ot_relu(x[0]), ot_gt(x[1], x[0])),
                        ot_mul(ot_sgn(x[2]), ot_recip(x[1])));
    ot_node *m = ot_maximum(ot_minimum(x[0], x[1]), ot_rint(ot_mul(x[2], 0.5)));
    return ot_add(ot_add(s, m), ot_add(ot_finite(x[2]), ot_ne(x[4], x[0])));
}
static ot_node *t_selects_reduced(ot_tensor *const *x)
{
    ot_args row = {.axis = 1, .keepdims = true};
    ot_node *r[6] = {ot_sum(ot_add(ot_finite(x[2]), x[0]), row.axis, row.keepdims),
                     ot_sum(ot_mul(ot_recip(x[1]), x[0]), row.axis, row.keepdims),
                     ot_min(ot_maximum(ot_rint(x[2]), ot_sgn(x[0])), row.axis, row.keepdims),
                     ot_sum(ot_ge(x[0], x[1]), row.axis, row.keepdims),
                     ot_sum(ot_lt(x[0], x[4]), row.axis, row.keepdims),
                     ot_max(ot_minimum(ot_relu(x[0]), x[1]), row.axis, row.keepdims)};
    ot_node *t = r[0];
    for (int i = 1; i < 6; i++) t = ot_add(t, r[i]);
    return t;
}

/* Scalars of a row or of everything that the code computes once per call,
 * before its loop (pre): layer norm's rsqrt(s + eps), inline arithmetic
 * and selects on the column x[3] and the 0-d x[4]; and under a row
 * reduction's mean, as rms norm has it (jit_row_scalars_special has the
 * special values). */
static ot_node *t_row_scalars(ot_tensor *const *x)
{
    ot_node *r = ot_rsqrt(ot_add(ot_abs(x[3]), 1e-5));
    ot_node *s = ot_maximum(ot_sqrt(ot_abs(x[3])), ot_div(x[4], ot_sub(x[3], 2.0)));
    ot_node *m = ot_rsqrt(ot_add(ot_mean(ot_sqr(x[1]), .axis = 1, .keepdims = true), 1e-5));
    return ot_add(ot_add(ot_mul(ot_mul(x[0], r), x[2]), ot_mul(s, ot_rsqrt(ot_abs(x[4])))),
                  ot_mul(x[1], m));
}

/* Whether the next of a matrix's cases runs (*j counts them): all, or
 * under the slow tools a rotating third, salt the case's place in the
 * matrix, so that each kind still runs on a third of the shapes. */
static bool pick(int *j, int64_t salt)
{
    return !slow_tool() || (*j)++ % 3 == salt % 3;
}

static void assignments(const char *isa)
{
    static const int64_t rows[] = {1, 3, 7};
    static const int64_t cols[] = {1, 7, 8, 9, 15, 16, 33, 1029};
    for (int d = 0; d < 2; d++) {
        ot_dtype dt = d ? OT_F64 : OT_F32;
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++) {
                ot_shape s = {.ndim = 2, .dims = {rows[r], cols[c]}};
                ot_shape st = {.ndim = 2, .dims = {cols[c], rows[r]}};
                ot_shape col = {.ndim = 2, .dims = {rows[r], 1}};
                int64_t salt = (int64_t)(r + c) + d;
                int j = 0;
                if (pick(&j, salt)) compare(isa, "W4", dt, s, s, t_w4);
                if (pick(&j, salt)) compare(isa, "broadcasts", dt, s, s, t_bcast);
                if (pick(&j, salt)) compare(isa, "transposed views", dt, s, st, t_view);
                if (pick(&j, salt)) compare(isa, "row reduction", dt, s, col, t_reduce);
                if (pick(&j, salt)) compare(isa, "softmax", dt, s, s, t_softmax);
                if (pick(&j, salt)) compare(isa, "register pressure", dt, s, s, t_pressure);
                if (pick(&j, salt))
                    compare(isa, "inline functions, no call", dt, s, s, t_inline_pressure);
                if (pick(&j, salt))
                    compare_acc(isa, "inline functions at u35, no call", dt, s, s,
                                t_inline_pressure, OT_ULP35);
                if (pick(&j, salt))
                    compare(isa, "inline functions, reduced", dt, s, col, t_inline_reduce);
                if (pick(&j, salt))
                    compare_acc(isa, "inline functions at u35, reduced", dt, s, col,
                                t_inline_reduce, OT_ULP35);
                if (pick(&j, salt)) compare(isa, "selects and compares", dt, s, s, t_selects);
                if (pick(&j, salt))
                    compare(isa, "selects and compares, reduced", dt, s, col, t_selects_reduced);
                if (pick(&j, salt)) compare(isa, "scalars of rows", dt, s, s, t_row_scalars);
            }
    }
}

/* A tensor of dtype dt holding the doubles h. */
static ot_tensor *of_dtype(ot_backend *be, ot_shape s, ot_dtype dt, const double *h)
{
    ot_tensor *t = ot_array(be, s, OT_F64, h), *d = t;
    if (dt != OT_F64) {
        d = ot_empty(be, s, dt);
        ot_pool *p = ot_pool_push();
        ot_assign(d, ot_cast(t, .dtype = dt));
        ot_pool_pop(p);
        ot_tensor_free(t);
    }
    return d;
}

/* x * rsqrt(c + eps) + x * (c / 3 - 1) (x^T * rsqrt(c + eps) + 2x when x
 * is square: a transposed read, whose blocks run the code a block of rows
 * per call; with red, the first's sums over rows) over x of shape xs and
 * c of shape cs, on a backend of each mode; whether the generated code and
 * streaming stores give the interpreter's bits. */
static bool row_scalars_same(const char *isa, ot_dtype dt, ot_shape xs, ot_shape cs,
                             const double *x, const double *col, bool code, bool red)
{
    ot_shape os = xs;
    if (red) os.dims[os.ndim - 1] = 1;
    int64_t n = 1;
    for (int d = 0; d < os.ndim; d++) n *= os.dims[d];
    void *res[3];
    for (int b = 0; b < 3; b++) {
        ot_backend *be = backend(isa, b, 1);
        ot_tensor *tc = of_dtype(be, cs, dt, col), *tx = of_dtype(be, xs, dt, x);
        ot_tensor *o = ot_empty(be, os, dt);
        ot_pool *p = ot_pool_push();
        ot_node *r = ot_rsqrt(ot_add(tc, 1e-5));
        ot_node *t = ot_add(ot_mul(tx, r), ot_mul(tx, ot_sub(ot_div(tc, 3.0), 1.0)));
        if (red) t = ot_sum(t, .axis = 1, .keepdims = true);
        else if (xs.ndim == 2 && xs.dims[0] == xs.dims[1])
            t = ot_add(ot_mul(ot_T(tx), r), ot_mul(tx, 2.0));
        CHECK(ot_assign(o, t) == 0);
        char *e = code && b ? test__explain_many(1, &o, &t) : NULL;
        CHECK(!e || strstr(e, "(generated code"));
        free(e);
        ot_pool_pop(p);
        res[b] = malloc(ot_dtype_size(dt) * (size_t)n);
        ot_get(o, res[b]);
        ot_tensor_free(o);
        ot_tensor_free(tx);
        ot_tensor_free(tc);
        ot_backend_free(be);
    }
    bool same = same_bits(res[0], res[1], ot__kd(dt), (int)n) &&
                same_bits(res[0], res[2], ot__kd(dt), (int)n);
    for (int b = 0; b < 3; b++) free(res[b]);
    return same;
}

/* The scalars the generated code computes before its loop (pre) against
 * the interpreter's, bitwise: a column c of every special value (rsqrt of
 * -0, a negative, a denormal, inf, NaN) and ordinary ones under rows of 1
 * to 40 elements (one column: c is a vector, no code in f32), elementwise
 * and under a sum over rows, and each
 * special value as a 0-d c of a vector short enough to run directly (see
 * ot__plan_run_direct); both dtypes, every table that generates code. */
TEST(jit_row_scalars_special)
{
    enum { ROWS = 40, NS = 16 };
    static const int64_t cols[] = {1, 7, 16, 33, ROWS};
    const char *isa[NJIT_ISA];
    double col[ROWS], x[ROWS * ROWS];
    fill(col, ROWS, 0);
    for (int i = 0; i < ROWS * ROWS; i++) x[i] = 0.5 + (double)(i % 13);
    for (int a = 0, na = assignment_isas(isa); a < na; a++)
        for (int d = 0; d < 2; d++) {
            ot_dtype dt = d ? OT_F64 : OT_F32;
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
                for (int red = 0; red < 2; red++)
                    if (!row_scalars_same(isa[a], dt, OT_SHAPE(ROWS, cols[c]), OT_SHAPE(ROWS, 1),
                                          x, col, cols[c] > 1, red))
                        test__fail(__FILE__, __LINE__, "OT_ISA=%s %s %dx%lld%s: code differs",
                                   isa[a] ? isa[a] : "-", ot_dtype_name(dt), ROWS,
                                   (long long)cols[c], red ? ", summed" : "");
            for (int v = 0; v < NS; v++)
                if (!row_scalars_same(isa[a], dt, OT_SHAPE(32), (ot_shape){0}, x, &col[v], true,
                                      false))
                    test__fail(__FILE__, __LINE__, "OT_ISA=%s %s, c = %g: code differs",
                               isa[a] ? isa[a] : "-", ot_dtype_name(dt), col[v]);
        }
}

/* e = x * w + rsqrt(c + eps) * x over x [2,70,16], w [70,16] (kernels of
 * three dims: w's row step goes back at each of x's 2), c [2,70,1], with
 * the sums of (x - w) / 2 and the means of x / (w + 3) over rows: runs of
 * whole rows
 * (exec_rows.c) and of row sums (red_rows, at most 64 rows a call) cut
 * where the step changes and where the threads' chunks cut, bitwise the
 * interpreter's on 1 and 3 threads. */
TEST(jit_row_runs_cut_at_outer_dims)
{
    enum { N = 2 * 70 * 16, R = 2 * 70 };
    const char *isa[NJIT_ISA];
    static double x[N], w[70 * 16], c[R];
    fill(x, N, 1);
    fill(w, 70 * 16, 2);
    for (int i = 0; i < R; i++) c[i] = 0.5 + i;
    for (int a = 0, na = assignment_isas(isa); a < na; a++)
        for (int d = 0; d < 2; d++)
            for (int threads = 1; threads <= 3; threads += 2) {
                ot_dtype dt = d ? OT_F64 : OT_F32;
                size_t es = ot_dtype_size(dt);
                char *res[3];
                for (int b = 0; b < 3; b++) {
                    ot_backend *be = backend(isa[a], b, threads);
                    ot_tensor *tx = of_dtype(be, OT_SHAPE(2, 70, 16), dt, x);
                    ot_tensor *tw = of_dtype(be, OT_SHAPE(70, 16), dt, w);
                    ot_tensor *tc = of_dtype(be, OT_SHAPE(2, 70, 1), dt, c);
                    ot_tensor *o[3] = {ot_empty(be, OT_SHAPE(2, 70, 16), dt),
                                       ot_empty(be, OT_SHAPE(2, 70, 1), dt),
                                       ot_empty(be, OT_SHAPE(2, 70, 1), dt)};
                    ot_pool *p = ot_pool_push();
                    ot_node *r = ot_rsqrt(ot_add(tc, 1e-5));
                    ot_node *e = ot_add(ot_mul(tx, tw), ot_mul(r, tx));
                    ot_node *t[3] = {e, ot_sum(ot_mul(ot_sub(tx, tw), 0.5), .axis = 2, .keepdims = true),
                                     ot_mean(ot_div(tx, ot_add(tw, 3.0)), .axis = 2, .keepdims = true)};
                    CHECK(ot_assign_many(3, o, t) == 0);
                    char *ex = b ? test__explain_many(3, o, t) : NULL;
                    CHECK(!b || (ex && strstr(ex, "[2x70x16]") && strstr(ex, "(generated code")));
                    free(ex);
                    ot_pool_pop(p);
                    res[b] = malloc(es * (N + 2 * R));
                    ot_get(o[0], res[b]);
                    ot_get(o[1], res[b] + es * N);
                    ot_get(o[2], res[b] + es * (N + R));
                    for (int i = 0; i < 3; i++) ot_tensor_free(o[i]);
                    ot_tensor_free(tc);
                    ot_tensor_free(tw);
                    ot_tensor_free(tx);
                    ot_backend_free(be);
                }
                for (int b = 1; b < 3; b++)
                    if (!same_bits(res[0], res[b], d, N + 2 * R))
                        test__fail(__FILE__, __LINE__, "OT_ISA=%s %s, %d threads: %s differs",
                                   isa[a] ? isa[a] : "-", ot_dtype_name(dt), threads,
                                   b == 1 ? "generated code" : "streaming");
                for (int b = 0; b < 3; b++) free(res[b]);
            }
}

TEST(jit_assignments_match_interpreter)
{
    const char *isa[NJIT_ISA];
    for (int i = 0, n = assignment_isas(isa); i < n; i++) assignments(isa[i]);
}

/* In-place updates of several outputs by one kernel, each reading all. */
TEST(jit_in_place_multi_output)
{
    const char *isa[NJIT_ISA];
    int nisa = assignment_isas(isa);
    for (int run = 0; run < 3 * nisa; run++) {
        ot_backend *be = backend(isa[run / 3], run % 3, 1);
        if (!be) return;
        double h[3][203];
        for (int i = 0; i < 3; i++) fill(h[i], 203, i + 1);
        ot_tensor *w = ot_array(be, OT_SHAPE(203), OT_F64, h[0]);
        ot_tensor *u = ot_array(be, OT_SHAPE(203), OT_F64, h[1]);
        ot_tensor *g = ot_array(be, OT_SHAPE(203), OT_F64, h[2]);
        ot_pool *p = ot_pool_push();
        ot_tensor *outs[2] = {w, u};
        ot_node *trees[2] = {ot_sub(w, ot_mul(ot_tanh(g), ot_add(u, 1.0))),
                             ot_add(ot_mul(u, 0.9), ot_exp(ot_mul(w, 0.01)))};
        CHECK_INT(ot_assign_many(2, outs, trees), 0);
        ot_pool_pop(p);
        double got[2][203];
        ot_get(w, got[0]);
        ot_get(u, got[1]);
        for (int i = 0; i < 203; i++) {
            double x = h[0][i], y = h[1][i], z = h[2][i];
            double nw = x - tanh(z) * (y + 1.0), nu = y * 0.9 + exp(x * 0.01);
            CHECK(test__close(got[0][i], nw, 1e-12) || (isnan(nw) && isnan(got[0][i])));
            CHECK(test__close(got[1][i], nu, 1e-12) || (isnan(nu) && isnan(got[1][i])));
        }
        ot_tensor_free(w);
        ot_tensor_free(u);
        ot_tensor_free(g);
        ot_backend_free(be);
    }
}

/* ot_explain says which kernels run as generated code, and only those, and
 * which of them stream their output. */
TEST(jit_explain_marks_generated_code)
{
    const char *isa[NJIT_ISA];
    int nisa = assignment_isas(isa);
    for (int run = 0; run < 3 * nisa; run++) {
        int mode = run % 3;
        ot_backend *be = backend(isa[run / 3], mode, 1);
        if (!be) return;
        bool code = mode != INTERP && (isa[run / 3] || backend_jits());
        ot_tensor *x = ot_empty(be, OT_SHAPE(40), OT_F32), *y = ot_empty(be, OT_SHAPE(40), OT_F32);
        ot_pool *p = ot_pool_push();
        char *chain = test__capture(ot_explain, ot_add(ot_mul(x, y), ot_div(x, y)));
        char *tanh = test__capture(ot_explain, ot_tanh(ot_add(ot_mul(x, y), ot_div(x, y))));
        char *lone = test__capture(ot_explain, ot_log(x));
        char *exp = test__capture(ot_explain, ot_exp(x));
        char *add = test__capture(ot_explain, ot_add(x, y));
        /* tanh does not fit inline beside a max's accumulators: called. */
        char *red = test__capture(ot_explain, ot_max(ot_tanh(ot_mul(x, y))));
        CHECK(chain && tanh && lone && exp && add && red);
        if (red) CHECK((strstr(red, "(generated code") != NULL) == code);
        free(red);
        if (chain && tanh && lone && exp && add) {
            const char *mark = mode == STREAM ? "(generated code, streaming stores)" : "(generated code)";
            CHECK((strstr(chain, mark) != NULL) == code);
            /* Bound by its arithmetic: never streamed. */
            CHECK((strstr(tanh, "(generated code") != NULL) == code);
            CHECK(strstr(tanh, "streaming") == NULL);
            /* log alone, inline too, is one pass in the tile kernels already. */
            CHECK(strstr(lone, "(generated code") == NULL);
            /* exp alone is inline code, which beats calling SLEEF per vector. */
            const ot_kernels *kt = isa[run / 3] ? ot__kernels_for(ot__isa_parse(isa[run / 3])) : NULL;
            if (kt) CHECK((strstr(exp, "(generated code") != NULL) == (code && kt->inline_sleef));
            CHECK((strstr(add, "(generated code") != NULL) == (code && mode == STREAM));
        }
        free(tanh);
        free(chain);
        free(lone);
        free(exp);
        free(add);
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be);
    }
}

/* ot_backend_opts.jit and .stream_bytes choose the code as the environment
 * variables do (with those variables unset). */
TEST(jit_options_choose_code)
{
    const char *const vars[] = {"OT_ISA", "OT_JIT", "OT_STREAM_BYTES"};
    char *saved[3];
    test__env_save(3, vars, saved, NULL);
    const char *isa[NJIT_ISA];
    for (int i = 0, n = assignment_isas(isa); i < n && isa[i]; i++)
        for (int mode = 0; mode < 3; mode++) {
            ot_backend_opts o = {.isa = isa[i], .jit = mode == INTERP ? OT_JIT_OFF : OT_JIT_ON,
                                 .stream_bytes = mode == STREAM ? 1 : OT_STREAM_NEVER};
            ot_backend *be = ot_backend_new("cpu", &o);
            CHECK(be != NULL);
            if (!be) continue;
            ot_tensor *x = ot_empty(be, OT_SHAPE(40), OT_F32), *y = ot_empty(be, OT_SHAPE(40), OT_F32);
            ot_pool *p = ot_pool_push();
            char *chain = test__capture(ot_explain, ot_add(ot_mul(x, y), ot_div(x, y)));
            CHECK(chain != NULL);
            if (chain) {
                CHECK((strstr(chain, "(generated code") != NULL) == (mode != INTERP));
                CHECK((strstr(chain, "streaming stores") != NULL) == (mode == STREAM));
            }
            free(chain);
            ot_pool_pop(p);
            ot_tensor_free(x);
            ot_tensor_free(y);
            ot_backend_free(be);
        }
    test__env_restore(3, vars, saved);
}

/* Streaming stores (OT_STREAM_BYTES=1) across 3 threads, against the
 * interpreter bitwise: a lone fma (the one-op code that exists only to
 * stream), a chain, an output view one element off the vector alignment
 * (plain stores), and an in-place update, with a tail. */
static void streaming(const char *isa, ot_dtype dt)
{
    enum { N = 100003 };
    ot_backend *be[2] = {backend(isa, INTERP, 3), backend(isa, STREAM, 3)};
    size_t es = ot_dtype_size(dt);
    char *res[2][4] = {{NULL}};
    double *h = malloc(sizeof *h * (N + 1));
    for (int b = 0; b < 2 && be[0] && be[1] && h; b++) {
        ot_tensor *x[3], *o = ot_empty(be[b], OT_SHAPE(N), dt);
        ot_tensor *wide = ot_zeros(be[b], OT_SHAPE(N + 1), dt);
        ot_tensor *off = ot_slice(wide, OT_RANGE(1, N + 1));
        for (int i = 0; i < 3; i++) {
            fill(h, N, i + 2);
            for (int e = 0; e < N; e++) h[e] = i == 1 ? 0.5 + (e % 89) * 0.02 : h[e];
            ot_tensor *t = ot_array(be[b], OT_SHAPE(N), OT_F64, h);
            x[i] = ot_empty(be[b], OT_SHAPE(N), dt);
            ot_assign(x[i], ot_cast(t, .dtype = dt));
            ot_tensor_free(t);
        }
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(o, ot_add(ot_mul(x[0], x[1]), x[2])), 0);
        res[b][0] = malloc(N * es);
        ot_get(o, res[b][0]);
        CHECK_INT(ot_assign(o, ot_add(ot_mul(x[0], x[1]), ot_div(x[0], x[1]))), 0);
        res[b][1] = malloc(N * es);
        ot_get(o, res[b][1]);
        CHECK_INT(ot_assign(off, ot_sub(ot_mul(x[2], x[1]), x[0])), 0);
        res[b][2] = malloc(N * es);
        ot_get(off, res[b][2]);
        CHECK_INT(ot_assign(x[0], ot_add(ot_mul(x[0], 0.5), x[1])), 0);
        res[b][3] = malloc(N * es);
        ot_get(x[0], res[b][3]);
        ot_pool_pop(p);
        for (int i = 0; i < 3; i++) ot_tensor_free(x[i]);
        ot_tensor_free(off);
        ot_tensor_free(wide);
        ot_tensor_free(o);
    }
    for (int t = 0; t < 4; t++) {
        if (res[0][t] && res[1][t] && !same_bits(res[0][t], res[1][t], ot__kd(dt), N))
            test__fail(__FILE__, __LINE__, "OT_ISA=%s, %s, tree %d: streaming stores differ",
                       isa ? isa : "-", ot_dtype_name(dt), t);
        free(res[0][t]);
        free(res[1][t]);
    }
    free(h);
    ot_backend_free(be[0]);
    ot_backend_free(be[1]);
}

TEST(jit_streaming_stores_threads_views)
{
    const char *isa[NJIT_ISA];
    for (int i = 0, n = assignment_isas(isa); i < n; i++) {
        streaming(isa[i], OT_F32);
        streaming(isa[i], OT_F64);
    }
}

/* OT_STREAM_BYTES: a decimal byte count; 0 turns streaming off; anything
 * else fails ot_backend_new with OT_EINVAL. */
TEST(jit_stream_bytes_env)
{
    static const char *const bad[] = {"abc", "-5", "12k", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("OT_STREAM_BYTES", bad[i], 1);
        ot_backend *be = ot_backend_new("cpu", NULL);
        CHECK(be == NULL);
        CHECK_ERR(OT_EINVAL, "OT_STREAM_BYTES=", bad[i], " is not a byte count");
        ot_backend_free(be);
    }
    setenv("OT_STREAM_BYTES", "0", 1);
    ot_backend *be = ot_backend_new("cpu", NULL);
    unsetenv("OT_STREAM_BYTES");
    CHECK(be != NULL);
    if (!be) return;
    ot_tensor *x = ot_empty(be, OT_SHAPE(4096), OT_F32);
    ot_pool *p = ot_pool_push();
    char *text = test__capture(ot_explain, ot_tanh(ot_add(ot_mul(x, x), 1.0)));
    CHECK(text && !strstr(text, "streaming"));
    free(text);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- generated reductions: threads, interpreter, ref ------------------------ */

/* Row r, column i of a reduction's input: ordinary values, but for rows of
 * special cases: a NaN; +inf; both infinities; all -inf; all -0.0; zeros
 * of both signs among negatives (max: the first zero); all -inf but a NaN
 * in the last column (a tail's lane); all +inf; zeros of both signs among
 * positives (min: the first zero); a -NaN before a NaN (the first NaN). */
static double red_value(int64_t r, int64_t i, int64_t cols)
{
    double x = sin(0.7 * (double)(r * cols + i) + 0.3) * (1.0 + (double)(i % 5));
    switch (r) {
    case 0: return i == 777 % cols ? NAN : x;
    case 1: return i == 5 % cols ? INFINITY : x;
    case 2: return i == 3 % cols ? -INFINITY : i == cols - 1 ? INFINITY : x;
    case 3: return -INFINITY;
    case 4: return -0.0;
    case 5: return i == cols / 2 ? -0.0 : i == cols / 2 + 1 ? 0.0 : -1.0 - fabs(x);
    case 6: return i == cols - 1 ? NAN : -INFINITY;
    case 7: return INFINITY;
    case 8: return i == cols / 3 ? 0.0 : i == cols / 3 + 1 ? -0.0 : 1.0 + fabs(x);
    case 9: return i == 100 % cols ? -NAN : i == 200 % cols ? NAN : x;
    default: return x;
    }
}

/* op over axis (1, or every axis where axis < 0) of x itself (a bare
 * load), of an inline body, or of a body that calls exp (whose
 * accumulators then live in the frame). */
static ot_node *red_tree(int op, int prefix, int axis, ot_tensor *x)
{
    ot_node *v = prefix == 0 ? ot_tensor_node(x)
               : prefix == 1 ? ot_add(ot_mul(x, 0.5), 0.25)
                             : ot_exp(ot_mul(x, 0.001));
    return ot_build(op, v, NULL, &(ot_args){.axis = axis < 0 ? OT_AXIS_ALL : axis});
}

typedef struct red_case {
    ot_dtype dt;
    int64_t rows, cols;
    int op, prefix, axis;
} red_case;

/* The case's result on be, widened to double (malloc'd; *n elements), or
 * NULL; *generated (where not NULL): whether ot_explain says the
 * reduction runs as generated code. */
static double *red_run(ot_backend *be, const red_case *rc, int64_t *n, bool *generated)
{
    int64_t m = rc->rows * rc->cols;
    double *h = malloc(sizeof *h * (size_t)(m > rc->rows ? m : rc->rows));   /* also the result */
    for (int64_t e = 0; e < m; e++) h[e] = red_value(e / rc->cols, e % rc->cols, rc->cols);
    ot_shape s = OT_SHAPE(rc->rows, rc->cols);
    ot_tensor *t = ot_array(be, s, OT_F64, h), *x = ot_empty(be, s, rc->dt);
    ot_pool *p = ot_pool_push();
    ot_assign(x, ot_cast(t, .dtype = rc->dt));
    ot_node *tree = red_tree(rc->op, rc->prefix, rc->axis, x);
    if (generated) {
        char *text = test__capture(ot_explain, tree);
        *generated = text && strstr(text, "(generated code)");
        free(text);
    }
    ot_tensor *o = ot_eval(tree);
    ot_pool_pop(p);
    double *res = NULL;
    if (o) {
        *n = ot_tensor_numel(o);
        res = malloc(sizeof *res * (size_t)(*n ? *n : 1));
        ot_get(o, h);
        for (int64_t e = 0; e < *n; e++) res[e] = rc->dt == OT_F64 ? h[e] : ((float *)h)[e];
    } else {
        test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
    }
    free(h);
    ot_tensor_free(o);
    ot_tensor_free(x);
    ot_tensor_free(t);
    return res;
}

/* Bits of the results: equal, or (for sums, whose NaN is whichever
 * tile.inc's compiled lane order gives) both NaN. */
static bool red_same(const double *a, const double *b, int64_t n, bool any_nan)
{
    for (int64_t e = 0; e < n; e++)
        if (memcmp(&a[e], &b[e], sizeof *a) && !(any_nan && isnan(a[e]) && isnan(b[e])))
            return false;
    return true;
}

/* What the special rows must give whatever the backend: NaN propagates,
 * all -inf stays -inf, an empty row is the identity (mean: NaN). */
static void red_expect(const red_case *rc, const double *got, int64_t n)
{
    if (rc->axis != 1 || rc->prefix != 0 || n != rc->rows || n < 10) return;
    int op = rc->op;
    bool ext = op == OT_OP_MAX || op == OT_OP_MIN;
    if (rc->cols == 0) {   /* sums only: max and min of nothing are errors */
        for (int64_t r = 0; r < n; r++) CHECK(op == OT_OP_MEAN ? isnan(got[r]) : got[r] == 0);
        return;
    }
    CHECK(isnan(got[0]) && isnan(got[6]) && isnan(got[9]));
    CHECK(got[3] == -INFINITY);
    if (ext) CHECK(got[7] == INFINITY && got[4] == 0 && signbit(got[4]));
    if (op == OT_OP_MAX) CHECK(got[5] == 0 && signbit(got[5]) && got[1] == INFINITY);
    if (op == OT_OP_MIN) CHECK(got[8] == 0 && !signbit(got[8]) && got[2] == -INFINITY);
    if (ext && rc->cols > 200) CHECK(signbit(got[9]));   /* the first NaN: -NaN */
}

/* One case on one ISA: generated code at 1, 2 and 3 threads (be[0..2],
 * bitwise the same), against the interpreter (be[3], bitwise, a sum's NaN
 * aside) and ref (be[4], within rounding). */
static void red_check(const char *isa, ot_backend *const be[5], const red_case *rc)
{
    bool sum = rc->op == OT_OP_SUM || rc->op == OT_OP_MEAN;
    double *res[5] = {NULL};
    int64_t n[5] = {0};
    bool generated = false;
    for (int b = 0; b < 5; b++)
        if (be[b]) res[b] = red_run(be[b], rc, &n[b], b == 0 ? &generated : NULL);
    bool all = res[0] && res[1] && res[2] && res[3] && res[4];
    for (int b = 1; b < 5 && all; b++) all = n[b] == n[0];
    const char *what = rc->op == OT_OP_SUM ? "sum" : rc->op == OT_OP_MEAN ? "mean"
                     : rc->op == OT_OP_MAX ? "max" : "min";
    if (!all)
        test__fail(__FILE__, __LINE__, "OT_ISA=%s %s: no result", isa ? isa : "-", what);
    /* Code where the ISA has it: every case here fits (ot_jit's red). */
    if (isa && rc->cols > 0 && !generated)
        test__fail(__FILE__, __LINE__, "OT_ISA=%s %s %lldx%lld: not generated code", isa, what,
                   (long long)rc->rows, (long long)rc->cols);
    for (int b = 1; b < 3 && all; b++)
        if (!red_same(res[0], res[b], n[0], false))
            test__fail(__FILE__, __LINE__, "OT_ISA=%s %s %s %lldx%lld axis %d prefix %d: %d threads "
                       "differ from 1", isa ? isa : "-", what, ot_dtype_name(rc->dt),
                       (long long)rc->rows, (long long)rc->cols, rc->axis, rc->prefix, b + 1);
    if (all && !red_same(res[0], res[3], n[0], sum))
        test__fail(__FILE__, __LINE__, "OT_ISA=%s %s %s %lldx%lld axis %d prefix %d: generated "
                   "code and interpreter differ", isa ? isa : "-", what, ot_dtype_name(rc->dt),
                   (long long)rc->rows, (long long)rc->cols, rc->axis, rc->prefix);
    /* Without an ISA of generated code (aarch64: NEON, 4 lanes) the f32
     * sums are the interpreter's, whose lanes each add 64 floats per block:
     * on the cancelling rows here (sum 1.05 of |x| summing to ~4700, 2.5e-5
     * off with NEON and SSE2 alike, well inside tile.inc's k*eps*sum|x|)
     * 1e-5 is too tight. */
    double tol = rc->dt == OT_F32 ? (isa ? 1e-5 : 1e-4) : 1e-12;
    for (int64_t e = 0; all && e < n[0]; e++)
        if (!test__close(res[0][e], res[4][e], tol))
            test__fail(__FILE__, __LINE__, "OT_ISA=%s %s %s %lldx%lld axis %d prefix %d [%lld]: "
                       "%.9g, ref %.9g", isa ? isa : "-", what, ot_dtype_name(rc->dt),
                       (long long)rc->rows, (long long)rc->cols, rc->axis, rc->prefix,
                       (long long)e, res[0][e], res[4][e]);
    if (all) red_expect(rc, res[0], n[0]);
    for (int b = 0; b < 5; b++) free(res[b]);
}

/* Runs run on every ISA with the backends red_check compares, one set per
 * ISA (worker threads are dear under TSan and valgrind, and a plan cache's
 * reuse is part of what runs): generated code at 1, 2 and 3 threads, the
 * interpreter, ref. */
static void red_each_isa(void (*run)(const char *isa, ot_backend *const be[5]))
{
    const char *isa[NJIT_ISA];
    for (int i = 0, nisa = assignment_isas(isa); i < nisa; i++) {
        ot_backend *be[5] = {backend(isa[i], JIT, 1), backend(isa[i], JIT, 2), backend(isa[i], JIT, 3),
                             backend(isa[i], INTERP, 1), ot_backend_new("ref", NULL)};
        run(isa[i], be);
        for (int b = 0; b < 5; b++) ot_backend_free(be[b]);
    }
}

/* Sum, mean, max and min over rows and over everything, f32 and f64,
 * bare, inline and calling bodies: 40 rows of 2500 (several tiles and a
 * tail, and enough elements for the pool to split rows and chunks), rows
 * of 7 (chunks of tiles span rows), 1029 and empty rows. */
static void reductions_on(const char *isa, ot_backend *const be[5])
{
    static const int ops[] = {OT_OP_SUM, OT_OP_MEAN, OT_OP_MAX, OT_OP_MIN};
    static const int64_t shapes[][2] = {{40, 2500}, {40, 7}, {3, 1029}, {12, 0}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int op = 0; op < (shapes[s][1] ? 4 : 2); op++)
                for (int prefix = 0; prefix < 3; prefix++)
                    for (int axis = -1; axis <= 1; axis += 2) {
                        red_case rc = {d ? OT_F64 : OT_F32, shapes[s][0], shapes[s][1], ops[op],
                                       prefix, axis};
                        if (!slow_tool() || (prefix + op + (int)s + d + axis + 1) % 3 == 0)
                            red_check(isa, be, &rc);
                    }
}

TEST(jit_reductions_threads_interpreter_ref) { red_each_isa(reductions_on); }

/* ---- random trees: generated code against OT_JIT=0, bitwise ----------------- */

/* Random elementwise trees over every unary and binary op of the table,
 * with constants, broadcasts (a column, a row, a 0-d), transposed views
 * and sometimes a reduction at the root, in f32 and f64, on inputs full of
 * special values, at sizes across every tail. Each tree runs on cpu
 * backends with OT_JIT=0 and OT_JIT=1 of each ISA with generated code, and
 * the results must be bitwise equal, NaNs included: which NaN an add, mul
 * or fma of two NaN operands returns (sign included) depends on the
 * operand order, which the tile kernels pin to the generated code's (see
 * isa_avx2.h). OT_JIT_FUZZ_TREES sets how many trees (default 2500, under
 * a second, 100 under valgrind; 100,000 found nothing offline), OT_JIT_FUZZ_SEED the first
 * seed, OT_JIT_FUZZ_SHOW=1 prints each differing tree, its inputs and the
 * differing elements. */

typedef struct fuzz_rng {
    uint64_t s;
} fuzz_rng;

static uint64_t fuzz_next(fuzz_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static int fuzz_int(fuzz_rng *r, int n) { return (int)(fuzz_next(r) % (uint64_t)n); }

/* A value: often special (NaN, +-inf, zeros, denormals of both dtypes,
 * huge, the edges of exp and sig), else ordinary of a random scale. */
static double fuzz_value(fuzz_rng *r)
{
    static const double special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-310,
                                     -5e-324, 1e-40, -3e-39, 1e-45, 3e38, -3.4e38, 1e300,
                                     -1e308, 1.0, -1.0, 0.5, 2.0, 88.72, -103.9, 709.8,
                                     -745.2, 1e-30, 16777217.0, 0.49999997, 2.5, -2.5};
    int ns = (int)(sizeof special / sizeof special[0]);
    if (fuzz_int(r, 4) == 0) return special[fuzz_int(r, ns)];
    /* 10 to 1e15 straddle where sin and cos change their range reduction
     * (SLEEF picks one per vector: a lane's result depends on its
     * neighbours, padding lanes included). */
    static const double scale[] = {1.0, 1.0, 10.0, 1e-3, 100.0, 1e4, 1e5, 1e6, 1e15};
    double u = (double)(fuzz_next(r) >> 11) / 9007199254740992.0;
    return (2 * u - 1) * scale[fuzz_int(r, (int)(sizeof scale / sizeof scale[0]))];
}

enum { FZ_NX = 7 };   /* x0-x2 (r, c), x3 (r, 1), x4 0-d, x5 (c), x6 (c, r) read transposed */

typedef struct fuzz_ops {
    int un[OT_OP_COUNT], bin[OT_OP_COUNT], nun, nbin;
    bool f32;   /* constants as f32 (else weak f64, folded in double) */
} fuzz_ops;

/* A tree draws from a few ops of the table, so that most trees stay within
 * what generated code covers (one op it does not cover, such as f32 rsqrt,
 * sends the whole kernel to the interpreter). */
static fuzz_ops fuzz_subset(fuzz_rng *r, const fuzz_ops *all)
{
    fuzz_ops s = {.nun = 1 + fuzz_int(r, 5), .nbin = 1 + fuzz_int(r, 4)};
    for (int i = 0; i < s.nun; i++) s.un[i] = all->un[fuzz_int(r, all->nun)];
    for (int i = 0; i < s.nbin; i++) s.bin[i] = all->bin[fuzz_int(r, all->nbin)];
    return s;
}

/* A tree of at most depth levels; the leftmost leaf is full-shaped so that
 * the tree has the output's shape. Recursion is bounded by depth. */
static ot_node *fuzz_tree(fuzz_rng *r, const fuzz_ops *ops, ot_tensor *const *x, int depth,
                          bool full)
{
    int pick = fuzz_int(r, 10);
    if (depth == 0 || pick < 2) {
        if (full || fuzz_int(r, 3)) {
            int k = full ? (int[]){0, 1, 2, 6}[fuzz_int(r, 4)] : fuzz_int(r, FZ_NX);
            return k == 6 ? ot_T(x[6]) : ot_tensor_node(x[k]);
        }
        return ops->f32 ? ot_constf((float)fuzz_value(r)) : ot_const(fuzz_value(r));
    }
    if (pick < 5)
        return ot_build(ops->un[fuzz_int(r, ops->nun)], fuzz_tree(r, ops, x, depth - 1, full),
                        NULL, NULL);
    int op = ops->bin[fuzz_int(r, ops->nbin)];
    bool swap = fuzz_int(r, 2);
    ot_node *a = fuzz_tree(r, ops, x, depth - 1, full && !swap);
    ot_node *b = fuzz_tree(r, ops, x, depth - 1, full && swap);
    return ot_build(op, a, b, NULL);
}

/* The root: the tree, or a reduction of it; *sum says whether a sum. */
static ot_node *fuzz_root(fuzz_rng *r, const fuzz_ops *ops, ot_tensor *const *x, bool *sum)
{
    ot_node *t = fuzz_tree(r, ops, x, 1 + fuzz_int(r, 6), true);
    /* sin or cos of the tree, often: SLEEF reduces their arguments one way
     * for a whole vector, so a lane's result hangs on the other lanes, the
     * padding of a tail included (what the tree left there). */
    if (fuzz_int(r, 2) == 0) t = ot_build(fuzz_int(r, 2) ? OT_OP_SIN : OT_OP_COS, t, NULL, NULL);
    int root = fuzz_int(r, 10);
    *sum = root == 0;
    switch (root) {
    case 0: return ot_sum(t, .axis = 1, .keepdims = true);
    case 1: return ot_max(t, .axis = 1);
    case 2: return ot_min(t);
    default: return t;
    }
}

/* Runs tree number seed on be; returns the result (malloc'd) and its size
 * in bytes, or NULL with *bytes the error code; *sum: whether its root is a
 * sum. With show, prints the tree and its inputs there. */
static void *fuzz_run(ot_backend *be, const fuzz_ops *ops, uint64_t seed, size_t *bytes,
                      int *kd, bool *sum, FILE *show)
{
    static const int64_t cols[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
                                   18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
                                   33, 1029, 4097};
    fuzz_rng r = {seed};
    ot_dtype dt = fuzz_int(&r, 2) ? OT_F64 : OT_F32;
    int64_t rows = 1 + fuzz_int(&r, 3);
    int ncols = (int)(sizeof cols / sizeof cols[0]);
    int64_t c = cols[fuzz_int(&r, 6) ? fuzz_int(&r, ncols - 2) : ncols - 2 + fuzz_int(&r, 2)];
    if (c > 1000) rows = 1;
    ot_shape shapes[FZ_NX] = {{2, {rows, c}}, {2, {rows, c}}, {2, {rows, c}}, {2, {rows, 1}},
                              {0, {0}},       {1, {c}},       {2, {c, rows}}};
    ot_tensor *x[FZ_NX];
    for (int i = 0; i < FZ_NX; i++) {
        int64_t m = 1;
        for (int d = 0; d < shapes[i].ndim; d++) m *= shapes[i].dims[d];
        double *h = malloc(sizeof *h * (size_t)m);
        float *hf = malloc(sizeof *hf * (size_t)m);
        for (int64_t e = 0; e < m; e++) hf[e] = (float)(h[e] = fuzz_value(&r));
        x[i] = ot_array(be, shapes[i], dt, dt == OT_F64 ? (void *)h : (void *)hf);
        free(h);
        free(hf);
    }
    fuzz_ops sub = fuzz_subset(&r, ops);
    sub.f32 = dt == OT_F32 && fuzz_int(&r, 4);
    ot_pool *p = ot_pool_push();
    ot_node *tree = fuzz_root(&r, &sub, x, sum);
    if (show) {
        ot_print(tree, show);
        for (int i = 0; i < FZ_NX; i++) {
            fprintf(show, "x%d = tensor-%p:\n", i, (void *)x[i]);
            ot_tensor_print(x[i], show);
        }
    }
    ot_tensor *o = ot_eval(tree);
    ot_pool_pop(p);
    void *res = NULL;
    *kd = ot__kd(dt);
    if (o) {
        *kd = ot__kd(ot_tensor_dtype(o));
        *bytes = (size_t)ot_tensor_numel(o) * ot_dtype_size(ot_tensor_dtype(o));
        res = malloc(*bytes ? *bytes : 1);
        ot_get(o, res);
    } else {
        *bytes = (size_t)-ot_errcode();
    }
    ot_tensor_free(o);
    for (int i = 0; i < FZ_NX; i++) ot_tensor_free(x[i]);
    return res;
}

TEST(defect07_jit_random_trees_bitwise)
{
    const char *isa[NJIT_ISA];
    int nisa = assignment_isas(isa);
    const char *env = getenv("OT_JIT_FUZZ_TREES"), *senv = getenv("OT_JIT_FUZZ_SEED");
    long ntrees = env ? strtol(env, NULL, 10) : under_valgrind() ? 100 : 2500;
    uint64_t seed0 = senv ? strtoull(senv, NULL, 10) : 1;
    fuzz_ops ops = {.nun = 0};
    for (int op = 0; op < OT_OP_COUNT; op++) {
        if ((ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM)) continue;   /* placeholders of registered ops */
        if (ot_op_kind(op) == OT_KIND_UNARY) ops.un[ops.nun++] = op;
        if (ot_op_kind(op) == OT_KIND_BINARY) ops.bin[ops.nbin++] = op;
    }
    int fails = 0;
    for (int i = 0; i < nisa; i++) {
        ot_backend *bes[2][2] = {{backend(isa[i], INTERP, 1), backend(isa[i], JIT, 1)},
                                 {backend_acc(isa[i], INTERP, 1, OT_ULP35),
                                  backend_acc(isa[i], JIT, 1, OT_ULP35)}};
        bool made = bes[0][0] && bes[0][1] && bes[1][0] && bes[1][1];
        for (long t = 0; t < ntrees && made && fails < 20; t++) {
            uint64_t seed = seed0 + (uint64_t)t;
            ot_backend *const *be = bes[t & 1];   /* odd trees at OT_ULP35 */
            size_t bytes[2];
            int kd[2];
            bool sum;
            void *res[2];
            for (int b = 0; b < 2; b++)
                res[b] = fuzz_run(be[b], &ops, seed, &bytes[b], &kd[b], &sum, NULL);
            bool same = bytes[0] == bytes[1] && !res[0] == !res[1] && kd[0] == kd[1];
            /* Which NaN a sum of NaNs gives hangs on how the C compiler
             * ordered tile.inc's lane additions: any NaN matches there. */
            int n = (int)(bytes[0] / (kd[0] == OT_KD_F64 ? 8 : 4));
            if (same && res[0] && sum) same = same_bits(res[0], res[1], kd[0], n);
            else if (same && res[0]) same = memcmp(res[0], res[1], bytes[0]) == 0;
            if (!same) {
                fails++;
                test__fail(__FILE__, __LINE__, "OT_ISA=%s%s: random tree, seed %llu: generated "
                           "code and interpreter differ", isa[i] ? isa[i] : "-",
                           t & 1 ? " OT_ULP35" : "", (unsigned long long)seed);
                if (getenv("OT_JIT_FUZZ_SHOW")) {
                    free(fuzz_run(be[0], &ops, seed, &bytes[0], &kd[0], &sum, stderr));
                    size_t es = kd[1] == OT_KD_F64 ? 8 : 4;
                    for (size_t e = 0; res[0] && res[1] && e < bytes[1] / es; e++)
                        if (memcmp((char *)res[0] + e * es, (char *)res[1] + e * es, es))
                            fprintf(stderr, "[%zu] interpreter %.17g, generated %.17g\n", e,
                                    es == 8 ? ((double *)res[0])[e] : ((float *)res[0])[e],
                                    es == 8 ? ((double *)res[1])[e] : ((float *)res[1])[e]);
                }
            }
            free(res[0]);
            free(res[1]);
        }
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) ot_backend_free(bes[a][b]);
    }
}

/* The lanes past a tail: the tile kernels pad each op's tail with zeros,
 * and generated code zeroes them before each call (fn_tail), so that
 * sin(log x), whose padding would hold log(0) = -inf, takes SLEEF's range
 * reduction of the interpreter, which picks one for the whole vector.
 * Every tail length, both accuracies, f32 and f64, arguments of every
 * scale to 1e6. */
TEST(defect07_jit_sin_cos_tail_lanes)
{
    const char *isa[NJIT_ISA];
    int nisa = assignment_isas(isa);
    static const int pre[] = {OT_OP_LOG, OT_OP_RECIP, OT_OP_LOG2, OT_OP_SIG};
    double h[40];
    float hf[40];
    for (int e = 0; e < 40; e++)
        hf[e] = (float)(h[e] = (0.3 + 0.7 * (double)((e * 37) % 41) / 41.0) *
                               pow(10.0, (double)(e % 7) - 2.0));
    for (int i = 0; i < nisa; i++)
        for (int acc = OT_ULP10; acc <= OT_ULP35; acc++) {
            ot_backend *be[2] = {backend_acc(isa[i], INTERP, 1, acc),
                                 backend_acc(isa[i], JIT, 1, acc)};
            for (int dt = 0; dt < 2 && be[0] && be[1]; dt++)
                for (int f = 0; f < 8; f++)
                    for (int64_t n = 1; n <= 40; n++) {
                        void *res[2];
                        for (int b = 0; b < 2; b++) {
                            ot_tensor *x = dt ? ot_array(be[b], OT_SHAPE(n), OT_F64, h)
                                              : ot_array(be[b], OT_SHAPE(n), OT_F32, hf);
                            ot_pool *p = ot_pool_push();
                            ot_node *y = ot_build(pre[f / 2], ot_mul(x, ot_const(100.0)), NULL,
                                                  NULL);
                            ot_tensor *o = ot_eval(ot_build(f % 2 ? OT_OP_SIN : OT_OP_COS,
                                                            ot_mul(y, ot_const(1e3)), NULL, NULL));
                            ot_pool_pop(p);
                            res[b] = calloc((size_t)n, 8);
                            if (o) ot_get(o, res[b]);
                            else test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
                            ot_tensor_free(o);
                            ot_tensor_free(x);
                        }
                        if (!same_bits(res[0], res[1], dt ? OT_KD_F64 : OT_KD_F32, (int)n))
                            test__fail(__FILE__, __LINE__, "OT_ISA=%s acc %d %s, %s of %s, n = %lld: "
                                       "generated code and interpreter differ",
                                       isa[i] ? isa[i] : "default", acc,
                                       dt ? "f64" : "f32", f % 2 ? "sin" : "cos",
                                       ot_op_name(pre[f / 2]), (long long)n);
                        free(res[0]);
                        free(res[1]);
                    }
            ot_backend_free(be[0]);
            ot_backend_free(be[1]);
        }
}

/* A column sum with a further output: an MLP step's bias gradient,
 * relu'(z) * g summed over the batch, keeps relu'(z) * g for the weight
 * gradient (one kernel, the sum's). b and w updated in place by SGD, read
 * back as f64 into out (cols, then 64 x cols). */
static void column_pair(ot_backend *be, ot_dtype dt, int64_t rows, int64_t cols, double *out)
{
    double *h = malloc(sizeof *h * (size_t)(64 * cols > rows * 64 ? 64 * cols : rows * 64));
    ot_tensor *t[4], *x[4];
    const int64_t dims[4][2] = {{rows, 64}, {64, cols}, {1, cols}, {cols, 10}};
    for (int q = 0; q < 4; q++) {
        int64_t m = dims[q][0] * dims[q][1];
        for (int64_t e = 0; e < m; e++) h[e] = red_value(e / dims[q][1], e % dims[q][1], dims[q][1]) * 0.01;
        ot_shape s = q == 2 ? OT_SHAPE(cols) : OT_SHAPE(dims[q][0], dims[q][1]);
        t[q] = ot_array(be, s, OT_F64, h);
        x[q] = ot_empty(be, s, dt);
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(x[q], ot_cast(t[q], .dtype = dt)), 0);
        ot_pool_pop(p);
    }
    ot_pool *p = ot_pool_push();
    ot_node *o = ot_dot(ot_relu(ot_add(ot_dot(x[0], x[1]), x[2])), x[3]);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(o, o)), NULL);
    ot_node *trees[2] = {ot_sub(x[2], ot_mul(ot_autodiff_grad(ad, x[2]), 0.1)),
                         ot_sub(x[1], ot_mul(ot_autodiff_grad(ad, x[1]), 0.1))};
    ot_tensor *outs[2] = {x[2], x[1]};
    CHECK_INT(ot_assign_many(2, outs, trees), 0);
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    for (int q = 2, at = 0; q >= 1; q--) {
        int64_t n = ot_tensor_numel(x[q]);
        ot_pool *pp = ot_pool_push();
        CHECK_INT(ot_assign(t[q], ot_cast(x[q], .dtype = OT_F64)), 0);
        ot_pool_pop(pp);
        CHECK_INT(ot_get(t[q], out + at), 0);
        at += (int)n;
    }
    for (int q = 0; q < 4; q++) {
        ot_tensor_free(x[q]);
        ot_tensor_free(t[q]);
    }
    free(h);
}

/* Sums and means down columns of a computed body run the body as
 * generated code and add its values up as the interpreter adds its own:
 * bitwise the interpreter's sums at 1-3 threads, f32 and f64, a body
 * calling exp, rows of several tiles, one tile and a tail; ref within
 * rounding; and an inline body with a further output, bitwise both. A
 * bare column stays interpreted (generated code would only copy it), as
 * does a body of one op (jit.c's worth_it). */
static void column_sums_on(const char *isa, ot_backend *const be[5])
{
    static const int64_t shapes[][2] = {{40, 2500}, {3, 1029}, {130, 7}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int op = 0; op < 2; op++) {
                red_case rc = {d ? OT_F64 : OT_F32, shapes[s][0], shapes[s][1],
                               op ? OT_OP_MEAN : OT_OP_SUM, 2, 0};
                if (!slow_tool() || (op + (int)s + d) % 3 == 0) red_check(isa, be, &rc);
            }
    for (int d = 0; d < 2 && be[2] && be[3]; d++) {
        enum { R = 130, C = 1029 };
        double *got = malloc(sizeof *got * (64 * C + C)), *want = malloc(sizeof *want * (64 * C + C));
        column_pair(be[2], d ? OT_F64 : OT_F32, R, C, got);
        column_pair(be[3], d ? OT_F64 : OT_F32, R, C, want);
        CHECK(memcmp(got, want, sizeof *got * (64 * C + C)) == 0);
        free(got);
        free(want);
    }
    if (isa && be[0]) {
        ot_tensor *x = ot_empty(be[0], OT_SHAPE(8, 64), OT_F32);
        ot_pool *p = ot_pool_push();
        char *bare = test__capture(ot_explain, ot_sum(x, .axis = 0));
        CHECK(bare && !strstr(bare, "generated code"));
        free(bare);
        ot_pool_pop(p);
        ot_tensor_free(x);
    }
}

TEST(jit_column_sums_threads_interpreter_ref) { red_each_isa(column_sums_on); }

/* ---- row reductions a run of rows per call: masked tails ------------------------ */

/* A rows x cols matrix of dtype dt, row stride ld elements, in memory
 * that ends where a PROT_NONE page begins, wrapped on be: code that read
 * or wrote a whole vector past a row's end would fault on the last row.
 * Its elements are red_value's (data) or GAP_VALUE, which also fills the
 * gaps between rows. The map is g->map; NULL where it was not made. */
#define GAP_VALUE 7.0
typedef struct guarded {
    void *map;
    size_t len;
    char *p;   /* element [0, 0] */
} guarded;

static ot_tensor *guarded_rows(ot_backend *be, ot_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                               bool data, guarded *g)
{
    size_t es = dt == OT_F64 ? 8 : 4, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)((rows - 1) * ld + cols) * es;
    g->len = (bytes + page - 1) / page * page + page;
    g->map = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        return NULL;
    }
    char *guard = (char *)g->map + g->len - page;
    g->p = guard - bytes;
    for (int64_t e = 0; e < (rows - 1) * ld + cols; e++) {
        int64_t r = e / ld, c = e % ld;
        double v = data && c < cols ? red_value(r, c, cols) : GAP_VALUE;
        float f = (float)v;
        memcpy(g->p + (size_t)e * es, dt == OT_F64 ? (void *)&v : (void *)&f, es);
    }
    if (mprotect(guard, page, PROT_NONE)) return NULL;
    const int64_t st[2] = {ld, 1};
    return ot_wrap(be, OT_SHAPE(rows, cols), dt, g->p, st, NULL, NULL);
}

/* Whether the gaps between g's rows still hold GAP_VALUE. */
static bool gaps_kept(const guarded *g, ot_dtype dt, int64_t rows, int64_t cols, int64_t ld)
{
    size_t es = dt == OT_F64 ? 8 : 4;
    for (int64_t e = 0; e < (rows - 1) * ld + cols; e++) {
        double v;
        float f;
        memcpy(dt == OT_F64 ? (void *)&v : (void *)&f, g->p + (size_t)e * es, es);
        if (e % ld >= cols && (dt == OT_F64 ? v : f) != GAP_VALUE) return false;
    }
    return true;
}

/* Tree t of the row-run cases over x: a sum of a body, a mean, a max and a
 * min of a body (their zero and NaN rows go back to the interpreter), a
 * softmax, whose row sum also stores exp(x - max) (a further output),
 * elementwise rows reading their row's broadcast, one calling tanh, and a
 * copy (a load and a cast to its own dtype, as code since issue 33). */
static ot_node *row_run_tree(int t, ot_tensor *x)
{
    switch (t) {
    case 0: return ot_sum(ot_add(ot_mul(x, x), 1.0), .axis = 1);
    case 1: return ot_mean(ot_sub(x, 1.0), .axis = 1);
    case 2: return ot_max(ot_mul(x, 2.0), .axis = 1);
    case 3: return ot_min(ot_mul(x, 2.0), .axis = 1);
    case 4: return ot_softmax(x, .axis = 1);
    case 5: return ot_mul(ot_sub(x, ot_mean(x, .axis = 1, .keepdims = true)), 0.25);
    case 6: return ot_tanh(ot_sub(x, ot_max(x, .axis = 1, .keepdims = true)));
    default: return ot_tensor_node(x);
    }
}

/* Tree t over the rows on be (guarded in place, or an array for ref) into
 * doubles (*n of them); NULL on failure. An elementwise tree (t >= 5)
 * assigns into guarded rows too, whose gaps must stay. */
static double *row_run_eval(ot_backend *be, bool guard, ot_dtype dt, int64_t rows, int64_t cols,
                            int64_t ld, int t, int64_t *n)
{
    guarded gx = {0}, gy = {0};
    ot_tensor *x = NULL, *y = NULL;
    if (guard) {
        x = guarded_rows(be, dt, rows, cols, ld, true, &gx);
        if (t >= 5) y = guarded_rows(be, dt, rows, cols, ld, false, &gy);
    } else {
        double *h = malloc(sizeof *h * (size_t)(rows * cols));
        for (int64_t e = 0; e < rows * cols; e++) h[e] = red_value(e / cols, e % cols, cols);
        ot_tensor *d = ot_array(be, OT_SHAPE(rows, cols), OT_F64, h);
        x = ot_empty(be, OT_SHAPE(rows, cols), dt);
        ot_pool *p = ot_pool_push();
        ot_assign(x, ot_cast(d, .dtype = dt));
        ot_pool_pop(p);
        ot_tensor_free(d);
        free(h);
    }
    ot_pool *p = ot_pool_push();
    ot_tensor *o = NULL;
    if (x && y) o = ot_assign(y, row_run_tree(t, x)) ? NULL : y;
    else if (x && (!guard || t < 5)) o = ot_eval(row_run_tree(t, x));
    ot_pool_pop(p);
    double *res = NULL;
    if (y) CHECK(gaps_kept(&gy, dt, rows, cols, ld));
    if (o) {
        *n = ot_tensor_numel(o);
        res = malloc(sizeof *res * (size_t)*n);
        float *f = malloc(sizeof *f * (size_t)*n);
        ot_get(o, dt == OT_F64 ? (void *)res : (void *)f);
        for (int64_t e = 0; dt != OT_F64 && e < *n; e++) res[e] = f[e];
        free(f);
    }
    if (o != y) ot_tensor_free(o);
    ot_tensor_free(y);
    ot_tensor_free(x);
    if (gx.map) munmap(gx.map, gx.len);
    if (gy.map) munmap(gy.map, gy.len);
    return res;
}

/* Reductions over rows of 1, 10, 17 and 33 elements (no whole vectors, a
 * vector's part, several and a part), 130 rows (runs of 64 and a short
 * one), contiguous or strided by 3 more, ending at a guard page: generated
 * code at 1 and 3 threads and the interpreter bitwise alike (a sum's NaN
 * aside), ref within rounding, the special rows as ref has them. */
static void row_runs_on(const char *isa, ot_backend *const be[5])
{
    static const int64_t cols[] = {1, 10, 17, 33};
    enum { ROWS = 130 };
    for (int d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
            for (int t = 0; t < 8; t++)
                for (int64_t pad = 0; pad <= 3; pad += 3) {
                    if (slow_tool() && (d + (int)c + t + (int)pad) % 3) continue;
                    ot_dtype dt = d ? OT_F64 : OT_F32;
                    double *res[5] = {NULL};
                    int64_t n[5] = {0};
                    const int use[4] = {0, 2, 3, 4};   /* 1 and 3 threads, interpreter, ref */
                    for (int u = 0; u < 4; u++)
                        if (be[use[u]])
                            res[use[u]] = row_run_eval(be[use[u]], use[u] < 4, dt, ROWS, cols[c],
                                                       cols[c] + pad, t, &n[use[u]]);
                    bool all = res[0] && res[2] && res[3] && res[4] && n[2] == n[0] &&
                               n[3] == n[0] && n[4] == n[0];
                    if (!all) {
                        test__fail(__FILE__, __LINE__, "OT_ISA=%s tree %d %s x%lld: no result",
                                   isa ? isa : "-", t, ot_dtype_name(dt), (long long)cols[c]);
                    } else {
                        bool sums = t != 2 && t != 3;
                        CHECK(red_same(res[0], res[2], n[0], false));
                        CHECK(red_same(res[0], res[3], n[0], sums));
                        double tol = d ? 1e-12 : 1e-5;
                        for (int64_t e = 0; e < n[0]; e++)
                            if (!test__close(res[0][e], res[4][e], tol))
                                test__fail(__FILE__, __LINE__, "OT_ISA=%s tree %d %s x%lld [%lld]: "
                                           "%.9g, ref %.9g", isa ? isa : "-", t,
                                           ot_dtype_name(dt), (long long)cols[c], (long long)e,
                                           res[0][e], res[4][e]);
                        if (t == 2) CHECK(res[0][5] == 0 && signbit(res[0][5]) && isnan(res[0][0]));
                        if (t == 3) CHECK(res[0][8] == 0 && !signbit(res[0][8]) && isnan(res[0][9]));
                    }
                    for (int b = 0; b < 5; b++) free(res[b]);
                }
}

TEST(jit_row_runs_masked_tails_guard_page) { red_each_isa(row_runs_on); }
