/*
 * test_kernels.c - the tile kernels of src/cpu/kernels/, table by table, for
 * every table this CPU runs (ot__kernels_for): every op, dtype and operand
 * form, sizes 0..33 and 1029, element 0 at an aligned and at an unaligned
 * address, inputs in exactly sized heap buffers (so that ASan and valgrind
 * see any read past n) and outputs with guard elements on both sides.
 *
 * Oracles, all computed here from the formulas of ref.c:
 *   - exact ops (everything but SLEEF): bitwise equal to ref.c's double
 *     evaluation rounded to the dtype, NaN matching any NaN;
 *   - SLEEF ops: the error in ULPs of the dtype against a long double
 *     evaluation (ULP below the smallest normal is the denormal spacing;
 *     overflow counts as the power of two past the largest finite value).
 *     Bounds: 1 ULP for u10 exp, exp2, log, log2, safelog, sin, cos, pow
 *     and f32 tanh (the library's own); 2 ULP for other u10 tanh and tanh2 (tanh2 is tanh of x*ln2 rounded to the
 *     dtype; the oracle uses the same rounded argument); 4 ULP for every
 *     u35 function (exp has no u35: 1 ULP in both slots). sig and sig2 are
 *     one SLEEF call, an add and a divide: bounds of 3 ULP (u10) and 5 ULP
 *     (u35) cover 1 (or 3.5) + 0.5 + 0.5 ULP plus the growth of the exp
 *     error through 1 + e. Where long double is no wider than double (under
 *     valgrind) the oracle is double and f64 bounds get 1 more ULP. Besides
 *     the fixed data, kernels_ulp_sweep runs 4096 values per function over
 *     its domain (overflow and denormal ranges, huge sin/cos arguments),
 *     and kernels_range_ends the fixed inputs at the ends of the ranges
 *     (where results overflow or turn subnormal; the largest arguments).
 *   - fma: fmaf / fma exactly; casts: (float), (double), ot__to_i32 exactly;
 *   - sum: within k * eps * sum|x| of a long double sum (k the float
 *     additions a lane can see) and bitwise equal at other alignments;
 *     max/min: ref.c's pick (first NaN, first of equal zeros) exactly.
 * OT_KTEST_VERBOSE=1 prints the largest ULP error seen per op and table.
 */
#include "test.h"
#include "cpu.h"
#include "ops.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NMAX 1029
#define LN2 0.693147180559945309417232121458176568

/* ---- the tables under test ------------------------------------------------ */

static const char *const isas[] = {"scalar", "sse2", "avx2", "avx512", "neon"};
enum { NISA = 5 };

/* ---- element access ----------------------------------------------------------- */

static const char *const kdname[] = {"f32", "f64", "i32"};
static size_t ksz(int kd) { return kd == OT_KD_F64 ? 8 : 4; }
static double kget(const void *p, int kd, size_t i)
{
    if (kd == OT_KD_F32) return ((const float *)p)[i];
    if (kd == OT_KD_F64) return ((const double *)p)[i];
    return ((const int32_t *)p)[i];
}
/* v must already be a value of the dtype. */
static void kset(void *p, int kd, size_t i, double v)
{
    if (kd == OT_KD_F32) ((float *)p)[i] = (float)v;
    else if (kd == OT_KD_F64) ((double *)p)[i] = v;
    else ((int32_t *)p)[i] = (int32_t)v;
}
/* Bitwise equal, or both NaN. */
static bool ksame(const void *x, const void *y, int kd, size_t i)
{
    const char *a = (const char *)x + i * ksz(kd), *b = (const char *)y + i * ksz(kd);
    if (kd != OT_KD_I32 && isnan(kget(x, kd, i)) && isnan(kget(y, kd, i))) return true;
    return memcmp(a, b, ksz(kd)) == 0;
}
/* v rounded to the dtype, as ot__store would store it. */
static double kround(int kd, double v)
{
    if (kd == OT_KD_F32) return (double)(float)v;
    if (kd == OT_KD_I32) return ot__to_i32(v);
    return v;
}

/* ---- deterministic data ----------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}
static double unif(double lo, double hi) { return lo + (hi - lo) * (double)(rng() >> 11) * 0x1p-53; }

static const double fspecial[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, INFINITY, -INFINITY, NAN,
    -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, 0x1p-149, -0x1p-149, 0x1p-130, 3.0e-39,
    DBL_MAX, -DBL_MAX, DBL_MIN, 0x1p-1074, -0x1p-1074, 0x1p-1030, 3.14159, -3.14159,
    1e20, -1e20, 88.7, -88.7, 89.0, -95.0, -104.0, 709.7, -720.0, -745.0, 0x1p23 + 1, 0x1p23 - 0.5,
    0x1p52 + 1, 2147483647.0, 2147483647.5, 2147483648.0, -2147483648.0, -2147483648.5,
    -2147483649.0, 4294967296.0, 1e-7, 7.0, -9.0,
};
static const int32_t ispecial[] = {0, 1, -1, 2, -2, 3, INT32_MAX, INT32_MIN, INT32_MAX - 1,
                                   INT32_MIN + 1, 65536, -65536, 46341, -46341, 31, 32, 7};

/* One input array of NMAX elements: the special values first (in a
 * rotated order per seed), then a mix of moderate values, values over a
 * wide exponent range and random bit patterns. */
static void fill(void *p, int kd, uint64_t seed, double lo, double hi)
{
    rng_state = seed * 7919 + 1;
    size_t ns = kd == OT_KD_I32 ? sizeof ispecial / sizeof *ispecial
                                : sizeof fspecial / sizeof *fspecial;
    for (size_t i = 0; i < NMAX; i++) {
        double v;
        uint64_t r = rng();
        if (i < ns) {
            size_t j = (i + seed) % ns;
            v = kd == OT_KD_I32 ? ispecial[j] : fspecial[j];
        } else if (kd == OT_KD_I32) {
            v = (r & 3) == 0 ? (double)(int32_t)(uint32_t)(r >> 32)
                             : (double)((int64_t)(r >> 40) % 41 - 20);
        } else if (r % 8 < 5) {
            v = unif(lo, hi);
        } else if (r % 8 < 7) {
            v = ldexp(unif(0.5, 1.0), (int)((r >> 20) % 200) - 100);
            if (r & 0x100) v = -v;
        } else if (kd == OT_KD_F32) {
            uint32_t b = (uint32_t)(r >> 32);
            float f;
            memcpy(&f, &b, 4);
            v = f;
        } else {
            uint64_t b = rng();
            memcpy(&v, &b, 8);
        }
        kset(p, kd, i, kround(kd, v));
    }
}

/* ---- running kernels in exactly sized buffers ------------------------------------ */

static unsigned char *guarded(size_t n, size_t off, size_t sz)
{
    unsigned char *o = malloc((off + n + 1) * sz);
    memset(o, 0xA5, (off + n + 1) * sz);
    return o;
}
static bool guards_ok(const unsigned char *o, size_t n, size_t off, size_t sz)
{
    for (size_t i = 0; i < off * sz; i++)
        if (o[i] != 0xA5) return false;
    for (size_t i = (off + n) * sz; i < (off + n + 1) * sz; i++)
        if (o[i] != 0xA5) return false;
    return true;
}
/* A heap copy of elements [0, n) of src at element offset off. */
static unsigned char *placed(const void *src, size_t n, size_t off, size_t sz)
{
    unsigned char *p = malloc((off + n) * sz + 1);
    memcpy(p + off * sz, src, n * sz);
    return p;
}

/* Runs a unary-shaped kernel on master[0..n) into out[0..n). */
static void run1(ot_k1 f, int kin, int kout, const void *master, size_t n, size_t off,
                 void *out)
{
    unsigned char *in = placed(master, n, off, ksz(kin));
    unsigned char *o = guarded(n, off, ksz(kout));
    f(o + off * ksz(kout), in + off * ksz(kin), n);
    CHECK(guards_ok(o, n, off, ksz(kout)));
    memcpy(out, o + off * ksz(kout), n * ksz(kout));
    free(in);
    free(o);
}

/* Runs a binary kernel; an operand whose form bit is set is one element
 * (sa / sb), else master[0..n). */
static void run2(ot_k2 f, int kd, int form, const void *ma, const void *mb, size_t n,
                 size_t off, void *out)
{
    size_t sz = ksz(kd);
    unsigned char *a = (form & 1) ? placed(ma, 1, 0, sz) : placed(ma, n, off, sz);
    unsigned char *b = (form & 2) ? placed(mb, 1, 0, sz) : placed(mb, n, off, sz);
    unsigned char *o = guarded(n, off, sz);
    f(o + off * sz, (form & 1) ? a : a + off * sz, (form & 2) ? b : b + off * sz, n);
    CHECK(guards_ok(o, n, off, sz));
    memcpy(out, o + off * sz, n * sz);
    free(a);
    free(b);
    free(o);
}

static void run3(ot_k3 f, int kd, int form, const void *m[3], size_t n, size_t off, void *out)
{
    size_t sz = ksz(kd);
    unsigned char *p[3];
    for (int k = 0; k < 3; k++)
        p[k] = ((form >> k) & 1) ? placed(m[k], 1, 0, sz) : placed(m[k], n, off, sz);
    unsigned char *o = guarded(n, off, sz);
    size_t po[3];
    for (int k = 0; k < 3; k++) po[k] = ((form >> k) & 1) ? 0 : off * sz;
    f(o + off * sz, p[0] + po[0], p[1] + po[1], p[2] + po[2], n);
    CHECK(guards_ok(o, n, off, sz));
    memcpy(out, o + off * sz, n * sz);
    for (int k = 0; k < 3; k++) free(p[k]);
    free(o);
}

/* The sizes every kernel runs at: 0..33 and NMAX, each at offset 0 and 1. */
#define FOR_SIZES(n, off)                                                      \
    for (size_t off = 0; off < 2; off++)                                       \
        for (size_t n##_i = 0, n = 0; n##_i < 35; n##_i++, n = n##_i < 34 ? n##_i : NMAX)

/* ---- ref.c's formulas ------------------------------------------------------------------ */

static double ref_unary(ot_op op, double x)
{
    switch (op) {
    case OT_OP_FINITE: return isfinite(x) ? 1.0 : 0.0;
    case OT_OP_NEG: return -x;
    case OT_OP_ABS: return fabs(x);
    case OT_OP_SGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x + 0.0;   /* np.sign(-0.0) is +0 */
    case OT_OP_SQRT: return sqrt(x);
    case OT_OP_SQR: return x * x;
    case OT_OP_RINT: return nearbyint(x);
    case OT_OP_RSQRT: return 1.0 / sqrt(x);
    case OT_OP_RECIP: return 1.0 / x;
    case OT_OP_RELU: return (x >= 0 || isnan(x)) ? x : 0.0;
    default: return ot__ref_fn1(op)(x);   /* a newer op: its table formula */
    }
}
static double ref_binary(ot_op op, double a, double b)
{
    switch (op) {
    case OT_OP_ADD: return a + b;
    case OT_OP_SUB: return a - b;
    case OT_OP_MUL: return a * b;
    case OT_OP_DIV: return a / b;
    case OT_OP_EQ: return a == b;
    case OT_OP_NE: return a != b;
    case OT_OP_LT: return a < b;
    case OT_OP_LE: return a <= b;
    case OT_OP_GT: return a > b;
    case OT_OP_GE: return a >= b;
    case OT_OP_MINIMUM: return (a <= b || isnan(a)) ? a : b;
    case OT_OP_MAXIMUM: return (a >= b || isnan(a)) ? a : b;
    default: return ot__ref_fn2(op)(a, b);   /* a newer op: its table formula */
    }
}
static double wrap32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    return u <= INT32_MAX ? (double)u : (double)u - 4294967296.0;
}
static double int_pow(double base, double exp_)
{
    int64_t b = (int64_t)base, e = (int64_t)exp_;
    if (e < 0) return b == 1 ? 1.0 : b == -1 ? ((e & 1) ? -1.0 : 1.0) : 0.0;
    uint64_t r = 1, sq = (uint64_t)b;
    for (; e; e >>= 1, sq *= sq)
        if (e & 1) r *= sq;
    return wrap32(r);
}
static double ref_int_unary(ot_op op, double x)
{
    uint64_t v = (uint64_t)(int64_t)x;
    switch (op) {
    case OT_OP_NEG: return wrap32(0 - v);
    case OT_OP_ABS: return wrap32(x < 0 ? 0 - v : v);
    case OT_OP_SQR: return wrap32(v * v);
    default: return ref_unary(op, x);
    }
}
static double ref_int_binary(ot_op op, double a, double b)
{
    uint64_t u = (uint64_t)(int64_t)a, v = (uint64_t)(int64_t)b;
    switch (op) {
    case OT_OP_ADD: return wrap32(u + v);
    case OT_OP_SUB: return wrap32(u - v);
    case OT_OP_MUL: return wrap32(u * v);
    case OT_OP_POW: return int_pow(a, b);
    default: return ref_binary(op, a, b);
    }
}

/* Whether long double has more precision than double at run time. Under
 * valgrind it does not (x87 arithmetic is emulated in double), and the
 * long double functions give wrong results there; the oracles then fall
 * back to double and the f64 bounds get one more ULP for the oracle's own
 * error. */
static bool ld_ok(void)
{
    volatile long double one = 1, eps = LDBL_EPSILON;
    return LDBL_MANT_DIG > DBL_MANT_DIG && one + eps != one;
}

/* The SLEEF ops in long double (or double, see ld_ok) into *y; false for an
 * op without such an oracle. kd says how tanh2's argument and safelog's
 * constant are rounded. */
#define LD(f, x) (ld ? f##l(x) : (long double)f((double)(x)))
static bool oracle(ot_op op, int kd, long double x, bool ld, long double *y)
{
    long double e;
    switch (op) {
    case OT_OP_EXP: *y = LD(exp, x); return true;
    case OT_OP_EXP2: *y = LD(exp2, x); return true;
    case OT_OP_LOG: *y = LD(log, x); return true;
    case OT_OP_LOG2: *y = LD(log2, x); return true;
    case OT_OP_SAFELOG: {
        long double c = kround(kd, exp(-50.0));
        *y = isnan(x) ? x : LD(log, x < c ? c : x);
        return true;
    }
    /* 1 / (1 + e^-x), written so that e never overflows the oracle. */
    case OT_OP_SIG:
        e = LD(exp, -fabsl(x));
        *y = (x < 0 ? e : 1.0L) / (1.0L + e);
        return true;
    case OT_OP_SIG2:
        e = LD(exp2, -fabsl(x));
        *y = (x < 0 ? e : 1.0L) / (1.0L + e);
        return true;
    case OT_OP_TANH: *y = LD(tanh, x); return true;
    case OT_OP_TANH2:
        if (kd == OT_KD_F32) *y = LD(tanh, (float)x * (float)LN2);
        else *y = LD(tanh, (double)x * (double)LN2);
        return true;
    case OT_OP_SIN: *y = LD(sin, x); return true;
    case OT_OP_COS: *y = LD(cos, x); return true;
    default: return false;
    }
}

/* A SLEEF op's exact value: its oracle above, or for a newer op without
 * one its table formula in double (ulp_bound then allows a double oracle's
 * error, as where long double is unavailable). */
static bool has_ld_oracle(ot_op op)
{
    long double y;
    return oracle(op, OT_KD_F64, 1.0L, true, &y);
}
static long double ref_trans(ot_op op, int kd, long double x)
{
    long double y;
    return oracle(op, kd, x, ld_ok(), &y) ? y : (long double)ot__ref_fn1(op)((double)x);
}
static long double ref_pow(double a, double b)
{
    return ld_ok() ? powl(a, b) : (long double)pow(a, b);
}

/* From the op table: exact (ref's value rounded), and i32 kernels. */
static bool is_exact_unary(ot_op op) { return ot__op(op)->exact; }
static bool i32_unary(ot_op op) { return ot__op(op)->i32; }

/* The ULP bound of a SLEEF op at accuracy acc (0 = u10, 1 = u35). */
static double ulp_bound(ot_op op, int kd, int acc)
{
    double slack = kd == OT_KD_F64 && !(ld_ok() && has_ld_oracle(op)) ? 1.0 : 0.0;
    if (op == OT_OP_SIG || op == OT_OP_SIG2) return slack + (acc ? 5.0 : 3.0);
    /* The library's own f32 exp (both slots): 0.775 ULP at most over every
     * other block of 2^22 inputs (make ulp-exhaustive; log: 0.86, so 1). */
    if (kd == OT_KD_F32 && op == OT_OP_EXP) return 0.9;
    if (op == OT_OP_EXP && acc) return slack + 1.0;    /* u10 in both slots */
    if (acc) return slack + 4.0;
    if (op == OT_OP_TANH && kd == OT_KD_F32) return 1.0;      /* the library's own */
    if (op == OT_OP_TANH || op == OT_OP_TANH2) return slack + 2.0;
    return slack + 1.0;
}

/* The spacing of dtype kd's values around r, denormal spacing below the
 * smallest normal. */
static long double ulp_of(int kd, long double r)
{
    int p = kd == OT_KD_F32 ? FLT_MANT_DIG : DBL_MANT_DIG;
    int emin = kd == OT_KD_F32 ? FLT_MIN_EXP : DBL_MIN_EXP;
    int e = emin;
    if (r != 0) frexpl(r, &e);
    if (e < emin) e = emin;
    return ldexpl(1.0L, e - p);
}

/* got's error against ref in ULPs of dtype kd. An infinity against a
 * finite value of the same sign counts as the power of two past the
 * largest finite value (so inf for a true value above it is fine). */
static double ulp_err(int kd, double got, long double ref)
{
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got) ? 0.0 : INFINITY;
    if (got == ref) return 0.0;
    if (isinf(got) || isinf(ref)) {
        long double fin = isinf(got) ? ref : (long double)got;
        bool neg = isinf(got) ? got < 0 : ref < 0;
        if (isinf(fin) || (fin < 0) != neg) return INFINITY;
        long double maxf = kd == OT_KD_F32 ? FLT_MAX : DBL_MAX;
        return (double)((maxf - fabsl(fin)) / ulp_of(kd, maxf) + 1.0L);
    }
    return (double)(fabsl((long double)got - ref) / ulp_of(kd, ref));
}

/* ---- checks with bounded output -------------------------------------------------------- */

/* Reports the first 3 mismatches of one kernel, then one line for the rest. */
typedef struct report { int left; } report;
#define MISMATCH(rep, ...)                                                     \
    do {                                                                       \
        if ((rep)->left > 0)                                                   \
            test__fail(__FILE__, __LINE__, __VA_ARGS__);                       \
        else if ((rep)->left == 0)                                             \
            test__fail(__FILE__, __LINE__, "(further mismatches not shown)");  \
        (rep)->left--;                                                         \
    } while (0)

static bool verbose(void)
{
    const char *v = getenv("OT_KTEST_VERBOSE");
    return v && *v && *v != '0';
}

/* ---- unary ------------------------------------------------------------------------------- */

static void check_unary_table(const ot_kernels *k)
{
    static unsigned char in[3][NMAX * 8], want[3][NMAX * 8], got[NMAX * 8];
    static long double tref[NMAX];
    for (int kd = 0; kd < 3; kd++) fill(in[kd], kd, 11 + kd, -30, 30);
    for (int op = 0; op < OT_OP_COUNT; op++) {
        /* registered ops' placeholders have no table entries: test_custom_op.c */
        if (ot_op_kind((ot_op)op) != OT_KIND_UNARY || (ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM)) continue;
        for (int kd = 0; kd < 3; kd++) {
            bool exact = is_exact_unary((ot_op)op) || kd == OT_KD_I32;
            bool exists = kd != OT_KD_I32 || i32_unary((ot_op)op);
            for (int acc = 0; acc < 2; acc++) {
                ot_k1 f = k->unary[acc][op][kd];
                if (!exists) {
                    CHECK(f == NULL);
                    continue;
                }
                if (!f) {
                    test__fail(__FILE__, __LINE__, "%s: no %s %s kernel", ot__isa_name(k->isa),
                               ot_op_name((ot_op)op), kdname[kd]);
                    continue;
                }
                if (exact && acc == 1) {
                    CHECK(f == k->unary[0][op][kd]);
                    continue;
                }
                for (size_t i = 0; i < NMAX; i++) {
                    double x = kget(in[kd], kd, i);
                    if (kd == OT_KD_I32)
                        kset(want[kd], kd, i, ref_int_unary((ot_op)op, x));
                    else if (exact)
                        kset(want[kd], kd, i, kround(kd, ref_unary((ot_op)op, x)));
                    else
                        tref[i] = ref_trans((ot_op)op, kd, x);
                }
                double worst = 0, bound = exact ? 0 : ulp_bound((ot_op)op, kd, acc);
                report rep = {3};
                FOR_SIZES(n, off) {
                    run1(f, kd, kd, in[kd], n, off, got);
                    for (size_t i = 0; i < n; i++) {
                        double x = kget(in[kd], kd, i);
                        if (exact) {
                            if (!ksame(got, want[kd], kd, i))
                                MISMATCH(&rep, "%s %s %s(%.9g) = %.17g, want %.17g (n %zu, off %zu)",
                                         ot__isa_name(k->isa), kdname[kd], ot_op_name((ot_op)op), x,
                                         kget(got, kd, i), kget(want[kd], kd, i), n, off);
                            continue;
                        }
                        double e = ulp_err(kd, kget(got, kd, i), tref[i]);
                        if (e > worst) worst = e;
                        if (!(e <= bound))
                            MISMATCH(&rep, "%s %s %s u%d(%.9g) = %.17g, want %.17Lg: %g ULP > %g",
                                     ot__isa_name(k->isa), kdname[kd], ot_op_name((ot_op)op), acc ? 35 : 10,
                                     x, kget(got, kd, i), tref[i], e, bound);
                    }
                }
                /* In place: dst is the operand. */
                unsigned char *p = placed(in[kd], NMAX, 1, ksz(kd));
                f(p + ksz(kd), p + ksz(kd), NMAX);
                run1(f, kd, kd, in[kd], NMAX, 1, got);
                CHECK(memcmp(p + ksz(kd), got, NMAX * ksz(kd)) == 0);
                free(p);
                if (verbose() && !exact)
                    fprintf(stderr, "    %-6s %-8s %s u%d: max %.3f ULP\n", ot__isa_name(k->isa),
                            ot_op_name((ot_op)op), kdname[kd], acc ? 35 : 10, worst);
            }
        }
    }
}

/* ---- binary ------------------------------------------------------------------------------- */

static const double fscalars[] = {0.0, -0.0, 1.0, -1.5, 2.0, 0.5, NAN, INFINITY, -INFINITY, 3.0};
static const int32_t iscalars[] = {0, 1, -1, 2, 3, -7, INT32_MAX, INT32_MIN, 31, -2};

static void check_binary_table(const ot_kernels *k)
{
    static unsigned char in_a[3][NMAX * 8], in_b[3][NMAX * 8], got[NMAX * 8];
    for (int kd = 0; kd < 3; kd++) {
        fill(in_a[kd], kd, 21 + kd, -8, 8);
        fill(in_b[kd], kd, 31 + kd, -8, 8);
        for (size_t i = 0; i < NMAX; i += 5)   /* equal pairs for the compares */
            memcpy(in_b[kd] + i * ksz(kd), in_a[kd] + i * ksz(kd), ksz(kd));
    }
    for (int op = 0; op < OT_OP_COUNT; op++) {
        if (ot_op_kind((ot_op)op) != OT_KIND_BINARY || (ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM)) continue;
        for (int kd = 0; kd < 3; kd++) {
            size_t sz = ksz(kd);
            bool exists = kd != OT_KD_I32 || ot__op(op)->i32;
            bool ulp = !ot__op(op)->exact && kd != OT_KD_I32;
            double worst = 0;
            for (int form = 0; form < 3; form++) {
                ot_k2 f = k->binary[op][kd][form];
                if (!exists) {
                    CHECK(f == NULL);
                    continue;
                }
                if (!f) {
                    test__fail(__FILE__, __LINE__, "%s: no %s %s form %d kernel", ot__isa_name(k->isa),
                               ot_op_name((ot_op)op), kdname[kd], form);
                    continue;
                }
                report rep = {3};
                /* Scalar operands: each value of a short list; vectors: the
                 * master arrays. */
                int nscal = form == OT_FORM_VV ? 1 : 10;
                for (int s = 0; s < nscal; s++) {
                    unsigned char sv[8];
                    kset(sv, kd, 0, kd == OT_KD_I32 ? iscalars[s] : kround(kd, fscalars[s]));
                    const void *ma = form == OT_FORM_SV ? (const void *)sv : in_a[kd];
                    const void *mb = form == OT_FORM_VS ? (const void *)sv : in_b[kd];
                    FOR_SIZES(n, off) {
                        if (form != OT_FORM_VV && n > 9 && n != 33 && n != NMAX) continue;
                        run2(f, kd, form, ma, mb, n, off, got);
                        for (size_t i = 0; i < n; i++) {
                            double a = kget(ma, kd, form == OT_FORM_SV ? 0 : i);
                            double b = kget(mb, kd, form == OT_FORM_VS ? 0 : i);
                            if (ulp) {
                                double e = ulp_err(kd, kget(got, kd, i), ref_pow(a, b));
                                if (e > worst) worst = e;
                                if (!(e <= ulp_bound(OT_OP_EXP, kd, 0)))
                                    MISMATCH(&rep, "%s %s pow(%.9g, %.9g) = %.17g: %g ULP",
                                             ot__isa_name(k->isa), kdname[kd], a, b, kget(got, kd, i), e);
                                continue;
                            }
                            unsigned char w[8];
                            kset(w, kd, 0, kd == OT_KD_I32 ? ref_int_binary((ot_op)op, a, b)
                                                         : kround(kd, ref_binary((ot_op)op, a, b)));
                            if (!ksame(got + i * sz, w, kd, 0))
                                MISMATCH(&rep, "%s %s %s(%.9g, %.9g) form %d = %.17g, want %.17g"
                                         " (n %zu, off %zu)", ot__isa_name(k->isa), kdname[kd],
                                         ot_op_name((ot_op)op), a, b, form, kget(got, kd, i),
                                         kget(w, kd, 0), n, off);
                        }
                    }
                }
                /* In place on either operand (vector-vector form). */
                if (form == OT_FORM_VV) {
                    unsigned char *a = placed(in_a[kd], NMAX, 1, sz);
                    unsigned char *b = placed(in_b[kd], NMAX, 1, sz);
                    run2(f, kd, form, in_a[kd], in_b[kd], NMAX, 1, got);
                    f(a + sz, a + sz, b + sz, NMAX);
                    CHECK(memcmp(a + sz, got, NMAX * sz) == 0);
                    memcpy(a + sz, in_a[kd], NMAX * sz);
                    f(b + sz, a + sz, b + sz, NMAX);
                    CHECK(memcmp(b + sz, got, NMAX * sz) == 0);
                    free(a);
                    free(b);
                }
            }
            if (verbose() && ulp)
                fprintf(stderr, "    %-6s pow      %s u10: max %.3f ULP\n", ot__isa_name(k->isa), kdname[kd],
                        worst);
        }
    }
}

/* ---- fma ----------------------------------------------------------------------------------- */

/* fma (a*b + c) or, with neg, fnma (c - a*b): both against libm's fma. */
static void check_fma_kind(const ot_kernels *k, bool neg)
{
    static unsigned char in[3][2][NMAX * 8], got[NMAX * 8];
    for (int kd = 0; kd < 2; kd++) {
        for (int j = 0; j < 3; j++) fill(in[j][kd], kd, 41 + 3 * kd + j, -4, 4);
        /* c = -(a*b) rounded: the fused result is the product's rounding error. */
        for (size_t i = 0; i < NMAX; i += 3) {
            double a = kget(in[0][kd], kd, i), b = kget(in[1][kd], kd, i);
            kset(in[2][kd], kd, i, kd == OT_KD_F32 ? (double)-((float)a * (float)b) : -(a * b));
        }
    }
    for (int kd = 0; kd < 2; kd++) {
        for (int form = 0; form < 7; form++) {
            ot_k3 f = (neg ? k->fnma : k->fma)[kd][form];
            const char *name = neg ? "fnma" : "fma";
            if (!f) {
                test__fail(__FILE__, __LINE__, "%s: no %s %s form %d", ot__isa_name(k->isa), name, kdname[kd], form);
                continue;
            }
            report rep = {3};
            for (int s = 0; s < (form ? 4 : 1); s++) {
                unsigned char sv[8];
                kset(sv, kd, 0, kround(kd, fscalars[s * 2 + 1]));
                const void *m[3];
                for (int j = 0; j < 3; j++) m[j] = ((form >> j) & 1) ? sv : in[j][kd];
                FOR_SIZES(n, off) {
                    run3(f, kd, form, m, n, off, got);
                    for (size_t i = 0; i < n; i++) {
                        double v[3];
                        for (int j = 0; j < 3; j++)
                            v[j] = kget(m[j], kd, ((form >> j) & 1) ? 0 : i);
                        unsigned char w[8];
                        double a0 = neg ? -v[0] : v[0];
                        if (kd == OT_KD_F32)
                            kset(w, kd, 0, fmaf((float)a0, (float)v[1], (float)v[2]));
                        else
                            kset(w, kd, 0, fma(a0, v[1], v[2]));
                        if (!ksame(got + i * ksz(kd), w, kd, 0))
                            MISMATCH(&rep, "%s %s %s form %d (%.9g, %.9g, %.9g) = %.17g, want %.17g",
                                     ot__isa_name(k->isa), name, kdname[kd], form, v[0], v[1], v[2],
                                     kget(got, kd, i), kget(w, kd, 0));
                    }
                }
            }
        }
    }
}

static void check_fma_table(const ot_kernels *k)
{
    check_fma_kind(k, false);
    check_fma_kind(k, true);
}

/* ---- casts ---------------------------------------------------------------------------------- */

static void check_cast_table(const ot_kernels *k)
{
    static unsigned char in[3][NMAX * 8], got[NMAX * 8], want[NMAX * 8];
    for (int kd = 0; kd < 3; kd++) fill(in[kd], kd, 51 + kd, -3e9, 3e9);
    for (int from = 0; from < 3; from++) {
        for (int to = 0; to < 3; to++) {
            ot_k1 f = k->cast[from][to];
            if (!f) {
                test__fail(__FILE__, __LINE__, "%s: no cast %s -> %s", ot__isa_name(k->isa), kdname[from],
                           kdname[to]);
                continue;
            }
            for (size_t i = 0; i < NMAX; i++)
                kset(want, to, i, kround(to, kget(in[from], from, i)));
            report rep = {3};
            FOR_SIZES(n, off) {
                run1(f, from, to, in[from], n, off, got);
                for (size_t i = 0; i < n; i++)
                    if (!ksame(got, want, to, i))
                        MISMATCH(&rep, "%s cast %s -> %s of %.17g = %.17g, want %.17g (n %zu)",
                                 ot__isa_name(k->isa), kdname[from], kdname[to], kget(in[from], from, i),
                                 kget(got, to, i), kget(want, to, i), n);
            }
            if (ksz(from) == ksz(to)) {       /* in place */
                unsigned char *p = placed(in[from], NMAX, 1, ksz(from));
                f(p + ksz(from), p + ksz(from), NMAX);
                for (size_t i = 0; i < NMAX; i++)
                    if (!ksame(p + ksz(from), want, to, i))
                        MISMATCH(&rep, "%s cast %s -> %s in place, elem %zu", ot__isa_name(k->isa),
                                 kdname[from], kdname[to], i);
                free(p);
            }
        }
    }
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* ref.c's pick_line for max (want_max) or min; -inf / +inf when empty. */
static double ref_pick(const void *p, int kd, size_t n, bool want_max)
{
    if (n == 0) return want_max ? -INFINITY : INFINITY;
    size_t best = 0;
    for (size_t k = 1; k < n && !isnan(kget(p, kd, best)); k++) {
        double v = kget(p, kd, k), b = kget(p, kd, best);
        if (isnan(v) || (want_max ? v > b : v < b)) best = k;
    }
    return kget(p, kd, best);
}

static bool same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* Checks sum, max, min and acc_sum of kd over data[0..n) at offsets 0..3. */
static void check_reduce_data(const ot_kernels *k, int kd, const void *data, size_t n,
                              report *rep)
{
    size_t sz = ksz(kd);
    long double exact = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        exact += kget(data, kd, i);
        mag += fabsl((long double)kget(data, kd, i));
    }
    size_t m = n < 1024 ? n : 1024;
    double eps = kd == OT_KD_F32 ? 0x1p-24 : 0x1p-53;
    double bound = (double)(mag * (long double)(eps * (double)(m / 4 + 2) + 0x1p-50));
    double s0 = 0, mx0 = 0, mn0 = 0;
    for (size_t off = 0; off < 4; off++) {
        unsigned char *p = placed(data, n, off, sz);
        double s = k->sum[kd](p + off * sz, n);
        double mx = k->max[kd](p + off * sz, n), mn = k->min[kd](p + off * sz, n);
        if (off == 0) {
            s0 = s, mx0 = mx, mn0 = mn;
            bool finite = isfinite((double)exact) && isfinite((double)mag);
            if (finite ? !(fabsl(s - exact) <= bound) : !same_double(s, (double)exact))
                MISMATCH(rep, "%s sum %s n %zu = %.17g, want %.17Lg (bound %g)", ot__isa_name(k->isa),
                         kdname[kd], n, s, exact, bound);
            double wmx = ref_pick(data, kd, n, true), wmn = ref_pick(data, kd, n, false);
            if (!same_double(mx, wmx))
                MISMATCH(rep, "%s max %s n %zu = %.17g, want %.17g", ot__isa_name(k->isa), kdname[kd], n,
                         mx, wmx);
            if (!same_double(mn, wmn))
                MISMATCH(rep, "%s min %s n %zu = %.17g, want %.17g", ot__isa_name(k->isa), kdname[kd], n,
                         mn, wmn);
        } else if (!same_double(s, s0) || !same_double(mx, mx0) || !same_double(mn, mn0)) {
            MISMATCH(rep, "%s %s n %zu: reductions differ at offset %zu", ot__isa_name(k->isa), kdname[kd],
                     n, off);
        }
        /* acc_sum into an accumulator at an odd offset. */
        double *acc = malloc((n + 1) * sizeof *acc);
        for (size_t i = 0; i <= n; i++) acc[i] = 0.25 * (double)i;
        k->acc_sum[kd](acc + 1, p + off * sz, n);
        CHECK(acc[0] == 0);
        for (size_t i = 0; i < n; i++)
            if (!same_double(acc[i + 1], 0.25 * (double)(i + 1) + kget(data, kd, i)))
                MISMATCH(rep, "%s acc_sum %s n %zu elem %zu", ot__isa_name(k->isa), kdname[kd], n, i);
        free(acc);
        free(p);
    }
}

static void check_reduce_table(const ot_kernels *k)
{
    static unsigned char buf[NMAX * 8];
    for (int kd = 0; kd < 2; kd++) {
        report rep = {3};
        /* Moderate values, no specials. */
        rng_state = 61 + kd;
        for (size_t i = 0; i < NMAX; i++) kset(buf, kd, i, kround(kd, unif(-2, 3)));
        for (size_t n = 0; n <= 33; n++) check_reduce_data(k, kd, buf, n, &rep);
        check_reduce_data(k, kd, buf, NMAX, &rep);
        /* All non-positive with zeros of both signs: max is a zero. */
        for (size_t i = 0; i < NMAX; i++)
            kset(buf, kd, i, i % 7 == 3 ? 0.0 : i % 7 == 5 ? -0.0 : -(double)(i % 5) - 1);
        for (size_t n = 0; n <= 33; n += 3) check_reduce_data(k, kd, buf, n, &rep);
        check_reduce_data(k, kd, buf, NMAX, &rep);
        /* A NaN (of either sign) or an infinity at one position. */
        const double odd[] = {NAN, -NAN, INFINITY, -INFINITY};
        for (int j = 0; j < 4; j++) {
            for (size_t pos = 0; pos < 40; pos += 13) {
                rng_state = 71 + kd;
                for (size_t i = 0; i < NMAX; i++) kset(buf, kd, i, kround(kd, unif(-2, 3)));
                kset(buf, kd, pos, odd[j]);
                check_reduce_data(k, kd, buf, pos + 1, &rep);
                check_reduce_data(k, kd, buf, pos + 17, &rep);
                check_reduce_data(k, kd, buf, NMAX, &rep);
            }
        }
        /* inf - inf in the sum is NaN. */
        kset(buf, kd, 2, INFINITY);
        kset(buf, kd, 9, -INFINITY);
        CHECK(isnan(k->sum[kd](buf, 20)));
        /* Empty: sum 0, max -inf, min +inf. */
        CHECK(k->sum[kd](buf, 0) == 0);
        CHECK(k->max[kd](buf, 0) == -INFINITY);
        CHECK(k->min[kd](buf, 0) == INFINITY);
    }
}

/* The accuracy bound in one tile call: f32 sum of 2^20 uniform
 * [0, 1) values, relative error <= 1e-6 against the double sum. */
static void check_sum_accuracy(const ot_kernels *k)
{
    size_t n = (size_t)1 << 20;
    float *x = malloc(n * sizeof *x);
    rng_state = 99;
    double exact = 0;
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((rng() >> 40) * 0x1p-24);
        exact += x[i];
    }
    double s = k->sum[OT_KD_F32](x, n);
    CHECK(fabs(s - exact) <= 1e-6 * exact);
    if (verbose())
        fprintf(stderr, "    %-6s sum f32 of 2^20 uniform: rel err %.3g\n", ot__isa_name(k->isa),
                fabs(s - exact) / exact);
    /* Unaligned start: bitwise the same sum of the same values. */
    float *y = malloc((n + 1) * sizeof *y);
    memcpy(y + 1, x, n * sizeof *x);
    double s1 = k->sum[OT_KD_F32](y + 1, n);
    CHECK(same_double(s, s1));
    free(x);
    free(y);
}

/* ---- ULP sweeps over each function's domain ------------------------------------------ */

/* A random value of dtype kd where op's interesting range lies. */
static double sweep_value(ot_op op, int kd)
{
    bool f = kd == OT_KD_F32;
    uint64_t r = rng();
    double v;
    switch (op) {
    case OT_OP_EXP: v = f ? unif(-104, 89) : unif(-746, 710); break;
    case OT_OP_EXP2: v = f ? unif(-150, 128) : unif(-1075, 1024); break;
    case OT_OP_LOG: case OT_OP_LOG2: case OT_OP_SAFELOG:
        v = f ? ldexp(unif(1, 2), (int)(r % 278) - 150) : ldexp(unif(1, 2), (int)(r % 2100) - 1075);
        break;
    case OT_OP_SIG: v = f ? unif(-110, 110) : unif(-760, 760); break;
    case OT_OP_SIG2: v = f ? unif(-160, 160) : unif(-1100, 1100); break;
    case OT_OP_TANH: case OT_OP_TANH2: v = unif(-20, 20); break;
    case OT_OP_SIN: case OT_OP_COS:   /* moderate, large and huge arguments */
        v = r % 4 < 2 ? unif(-10, 10) : r % 4 == 2 ? unif(-1e4, 1e4)
                                                   : ldexp(unif(-1, 1), (int)(r % (f ? 127 : 1000)));
        break;
    default:   /* a newer op: every binade, positive only where its domain is */
        v = f ? ldexp(unif(1, 2), (int)(r % 278) - 150) : ldexp(unif(1, 2), (int)(r % 2100) - 1075);
        if (ot__op(op)->dom != OT__DOM_POS && (r & 0x100000)) v = -v;
        break;
    }
    return kround(kd, v);
}

static void check_ulp_sweep(const ot_kernels *k)
{
    enum { NS = 4096 };
    static unsigned char in[NS * 8], in2[NS * 8], got[NS * 8];
    static long double want[NS];
    for (int op = 0; op < OT_OP_COUNT; op++) {
        if (ot_op_kind((ot_op)op) != OT_KIND_UNARY || is_exact_unary((ot_op)op) || (ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM)) continue;
        for (int kd = 0; kd < 2; kd++) {
            rng_state = 1000 + 10 * (uint64_t)op + (uint64_t)kd;
            for (size_t i = 0; i < NS; i++) {
                kset(in, kd, i, sweep_value((ot_op)op, kd));
                want[i] = ref_trans((ot_op)op, kd, kget(in, kd, i));
            }
            for (int acc = 0; acc < 2; acc++) {
                double bound = ulp_bound((ot_op)op, kd, acc), worst = 0;
                report rep = {3};
                k->unary[acc][op][kd](got, in, NS);
                for (size_t i = 0; i < NS; i++) {
                    double e = ulp_err(kd, kget(got, kd, i), want[i]);
                    if (e > worst) worst = e;
                    if (!(e <= bound))
                        MISMATCH(&rep, "%s %s %s u%d(%.17g) = %.17g, want %.17Lg: %g ULP > %g",
                                 ot__isa_name(k->isa), kdname[kd], ot_op_name((ot_op)op), acc ? 35 : 10,
                                 kget(in, kd, i), kget(got, kd, i), want[i], e, bound);
                }
                if (verbose())
                    fprintf(stderr, "    sweep %-6s %-8s %s u%d: max %.3f ULP\n", ot__isa_name(k->isa),
                            ot_op_name((ot_op)op), kdname[kd], acc ? 35 : 10, worst);
            }
        }
    }
    /* pow: positive bases over a wide range with real exponents, negative
     * bases with integral exponents. */
    for (int kd = 0; kd < 2; kd++) {
        rng_state = 2000 + (uint64_t)kd;
        for (size_t i = 0; i < NS; i++) {
            uint64_t r = rng();
            double a = ldexp(unif(1, 2), (int)(r % 41) - 20), b = unif(-30, 30);
            if (r & 0x10000) a = -a, b = nearbyint(b);
            kset(in, kd, i, kround(kd, a));
            kset(in2, kd, i, kround(kd, b));
            want[i] = ref_pow(kget(in, kd, i), kget(in2, kd, i));
        }
        k->binary[OT_OP_POW][kd][OT_FORM_VV](got, in, in2, NS);
        double bound = ulp_bound(OT_OP_POW, kd, 0), worst = 0;
        report rep = {3};
        for (size_t i = 0; i < NS; i++) {
            double e = ulp_err(kd, kget(got, kd, i), want[i]);
            if (e > worst) worst = e;
            if (!(e <= bound))
                MISMATCH(&rep, "%s %s pow(%.17g, %.17g) = %.17g: %g ULP", ot__isa_name(k->isa), kdname[kd],
                         kget(in, kd, i), kget(in2, kd, i), kget(got, kd, i), e);
        }
        if (verbose())
            fprintf(stderr, "    sweep %-6s pow      %s u10: max %.3f ULP\n", ot__isa_name(k->isa), kdname[kd],
                    worst);
    }
}

/* ---- the cases --------------------------------------------------------------------------------- */

/* Runs fn on every table this CPU has; the scalar table always exists. */
static void each_table(void (*fn)(const ot_kernels *))
{
    int ran = 0;
    for (int i = 0; i < NISA; i++) {
        const ot_kernels *k = ot__kernels_for(ot__isa_parse(isas[i]));
        if (!k) continue;
        CHECK_STR(ot__isa_name(k->isa), isas[i]);
        fn(k);
        ran++;
    }
    CHECK(ran >= 1);
}

TEST(kernels_unary) { each_table(check_unary_table); }
TEST(kernels_ulp_sweep) { each_table(check_ulp_sweep); }
TEST(kernels_binary) { each_table(check_binary_table); }
TEST(kernels_fma) { each_table(check_fma_table); }
TEST(kernels_cast) { each_table(check_cast_table); }
/* tgather_b4: dst[r*ds + i] = src[i*ss + r], for every row count up to the
 * table's tgather_rows (8, or 16 with AVX-512) and lengths around the
 * register blocks. */
static void check_tgather_table(const ot_kernels *k)
{
    enum { SS = 19, DS = 40, MAXR = 16 };
    uint32_t src[40 * SS], dst[MAXR * DS];
    CHECK(k->tgather_rows == 8 || k->tgather_rows == 16);
    for (int i = 0; i < 40 * SS; i++) src[i] = 0x10000u + (uint32_t)i;
    for (int rows = 1; rows <= k->tgather_rows && rows <= MAXR; rows++)
        for (int n = 0; n <= 37; n += (n < 18 ? 1 : 19)) {
            for (int i = 0; i < MAXR * DS; i++) dst[i] = 0xdeadbeefu;
            k->tgather_b4(dst, DS, src, SS, n, rows);
            int bad = 0;
            for (int r = 0; r < MAXR; r++)
                for (int i = 0; i < DS; i++) {
                    uint32_t want = r < rows && i < n ? src[i * SS + r] : 0xdeadbeefu;
                    bad += dst[r * DS + i] != want;
                }
            if (bad)
                test__fail(__FILE__, __LINE__, "%s tgather rows %d n %d: %d wrong", ot__isa_name(k->isa), rows,
                           n, bad);
        }
}

TEST(kernels_tgather) { each_table(check_tgather_table); }

TEST(kernels_reduce)
{
    each_table(check_reduce_table);
    each_table(check_sum_accuracy);
}

/* Entries that must be NULL: non-unary ops in unary[], non-binary ops in
 * binary[]. */
static void check_table_shape(const ot_kernels *k)
{
    for (int op = 0; op < OT_OP_COUNT; op++) {
        for (int kd = 0; kd < 3; kd++) {
            if (ot_op_kind((ot_op)op) != OT_KIND_UNARY) {
                CHECK(k->unary[0][op][kd] == NULL);
                CHECK(k->unary[1][op][kd] == NULL);
            }
            if (ot_op_kind((ot_op)op) != OT_KIND_BINARY)
                for (int form = 0; form < 3; form++) CHECK(k->binary[op][kd][form] == NULL);
        }
    }
    for (int kd = 0; kd < 2; kd++) {
        CHECK(k->sum[kd] && k->max[kd] && k->min[kd] && k->acc_sum[kd]);
    }
}
TEST(kernels_table) { each_table(check_table_shape); }

/* A named ISA gives its table; one this CPU lacks is OT_EUNSUPPORTED with
 * NULL, the message naming where the name came from. */
TEST(kernels_select)
{
    const ot_kernels *best = ot__kernels_select(-1, "isa");
    CHECK(best != NULL);
    if (best) {
        /* The default prefers avx512, then avx2, sse2, neon, scalar. */
        const char *want = ot__kernels_for(ot__isa_parse("avx512")) ? "avx512"
                           : ot__kernels_for(ot__isa_parse("avx2")) ? "avx2"
                           : ot__kernels_for(ot__isa_parse("sse2")) ? "sse2"
                           : ot__kernels_for(ot__isa_parse("neon")) ? "neon" : "scalar";
        CHECK_STR(ot__isa_name(best->isa), want);
    }
    for (int i = 0; i < NISA; i++) {
        ot_clear_error();
        const ot_kernels *k = ot__kernels_select(ot__isa_parse(isas[i]), "OT_ISA");
        const ot_kernels *have = ot__kernels_for(ot__isa_parse(isas[i]));
        CHECK(k == have);
        if (k) {
            CHECK_STR(ot__isa_name(k->isa), isas[i]);
            CHECK_INT(ot_errcode(), OT_OK);
        } else {
            CHECK_ERR(OT_EUNSUPPORTED, "OT_ISA=", isas[i]);
        }
    }
    CHECK(ot__kernels_for(ot__isa_parse("scalar")) != NULL);
#if defined(__x86_64__) || defined(__i386__)
    if (!__builtin_cpu_supports("avx512f")) {
        CHECK(ot__kernels_select(ot__isa_parse("avx512"), "isa") == NULL);
        CHECK_ERR(OT_EUNSUPPORTED, "isa=avx512 but this CPU lacks avx512f");
    }
    CHECK(ot__kernels_select(ot__isa_parse("neon"), "isa") == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "isa=neon but this build has no neon kernels (not aarch64)");
#endif
#if defined(__aarch64__)
    CHECK(ot__kernels_for(ot__isa_parse("neon")) != NULL);
    CHECK(ot__kernels_select(ot__isa_parse("avx2"), "isa") == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "isa=avx2 but this build has no avx2 kernels (not x86)");
#endif
    CHECK(ot__kernels_for(ot__isa_parse("bogus")) == NULL);
    CHECK(ot__kernels_for(-1) == NULL);
}

/* The descriptor table (ot__isas, made from isa.h) agrees with the kernel
 * tables this build has (the isa_*.h facts are asserted at compile time in
 * tile.inc), and each of its names is one the isa option takes. */
TEST(kernels_isa_table)
{
    for (int i = 0; i < OT_ISA_COUNT; i++) {
        const ot_isa_desc *d = &ot__isas[i];
        CHECK_STR(d->name, isas[i]);
        CHECK_INT(ot__isa_parse(d->name), i);
        if (d->kernels) {
            CHECK_INT(d->kernels->isa, i);
            CHECK_INT(d->kernels->vbytes, d->vbytes);
#if defined(__x86_64__) && defined(__linux__)
            CHECK(ot__jit_available(d->kernels) == d->jit);
#endif
        }
        ot_clear_error();
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.isa = d->name});
        CHECK(be != NULL || ot_errcode() == OT_EUNSUPPORTED);
        ot_backend_free(be);
    }
    CHECK_INT(ot__isa_parse("bogus"), -1);
    CHECK_INT(ot__isa_parse(NULL), -1);
}

/* ---- every vector table against the scalar one ----------------------------------------------- */

/* The table's kernel and the scalar table's on the same special values
 * (NaN, infinities, signed zeros, denormals, the edges of each function),
 * each operand pair of fspecial once, at every length 1..35 (every tail of
 * 4-, 8- and 16-lane vectors) and at the whole array: exact ops and i32
 * bitwise equal (NaN against any NaN), SLEEF ops within their ULP bound of
 * each other's result doubled (each is within the bound of the truth). On
 * aarch64 under qemu this is NEON against scalar; on x86, SSE2, AVX2 and
 * AVX-512 against scalar. */
enum { NSPEC = sizeof fspecial / sizeof *fspecial, NPAIR = NSPEC * NSPEC };

/* a[i], b[i] run over every pair of special values of dtype kd. */
static void special_pairs(unsigned char *a, unsigned char *b, int kd)
{
    size_t ni = sizeof ispecial / sizeof *ispecial;
    for (size_t i = 0; i < NPAIR; i++) {
        size_t x = i / NSPEC, y = i % NSPEC;
        kset(a, kd, i, kd == OT_KD_I32 ? ispecial[x % ni] : kround(kd, fspecial[x]));
        kset(b, kd, i, kd == OT_KD_I32 ? ispecial[y % ni] : kround(kd, fspecial[y]));
    }
}

/* Compares got with the scalar table's want over n elements. */
static void match_scalar(const ot_kernels *k, const char *what, int kd, double bound,
                         const void *got, const void *want, const void *a, const void *b,
                         int form, size_t n, report *rep)
{
    for (size_t i = 0; i < n; i++) {
        size_t ia = form == OT_FORM_SV ? 0 : i, ib = form == OT_FORM_VS ? 0 : i;
        double g = kget(got, kd, i), w = kget(want, kd, i);
        bool ok = bound == 0 || kd == OT_KD_I32 ? ksame(got, want, kd, i)
                                                : ulp_err(kd, g, w) <= bound;
        if (!ok)
            MISMATCH(rep, "%s %s %s(%.9g, %.9g) = %.17g, scalar %.17g (n %zu)", ot__isa_name(k->isa),
                     kdname[kd], what, kget(a, kd, ia), b ? kget(b, kd, ib) : 0.0, g, w, n);
    }
}

static void check_vs_scalar(const ot_kernels *k)
{
    const ot_kernels *s = ot__kernels_for(ot__isa_parse("scalar"));
    static unsigned char a[NPAIR * 8], b[NPAIR * 8], got[NPAIR * 8], want[NPAIR * 8];
    if (k == s) return;
    for (int kd = 0; kd < 3; kd++) {
        special_pairs(a, b, kd);
        for (int op = 0; op < OT_OP_COUNT; op++) {
            const ot_opinfo *o = ot__op(op);
            bool un = o->kind == OT_KIND_UNARY, bin = o->kind == OT_KIND_BINARY;
            if (!(un || bin) || o->vec == OT__VEC_USER) continue;
            for (int v = 0; v < (un ? 2 : 3); v++) {   /* unary: accuracy; binary: form */
                ot_k1 f1 = un ? k->unary[v][op][kd] : NULL, s1 = un ? s->unary[v][op][kd] : NULL;
                ot_k2 f2 = bin ? k->binary[op][kd][v] : NULL, s2 = bin ? s->binary[op][kd][v] : NULL;
                CHECK((f1 == NULL) == (s1 == NULL) && (f2 == NULL) == (s2 == NULL));
                if (!(f1 && s1) && !(f2 && s2)) continue;
                double bound = o->exact ? 0 : 2 * ulp_bound(un ? (ot_op)op : OT_OP_EXP, kd, un ? v : 0);
                /* Scalar operand forms take b[0] or a[0]: a NaN, a zero. */
                int form = un ? OT_FORM_VV : v;
                const void *pa = form == OT_FORM_SV ? (const void *)(b + ksz(kd) * 13) : a;
                const void *pb = form == OT_FORM_VS ? (const void *)(a + ksz(kd)) : b;
                report rep = {3};
                for (size_t n = 1; n <= NPAIR; n = n < 35 ? n + 1 : n == 35 ? NPAIR : NPAIR + 1) {
                    if (f1) {
                        f1(got, pa, n);
                        s1(want, pa, n);
                    } else {
                        f2(got, pa, pb, n);
                        s2(want, pa, pb, n);
                    }
                    match_scalar(k, ot_op_name((ot_op)op), kd, bound, got, want, pa,
                                 f2 ? pb : NULL, form, n, &rep);
                }
            }
        }
    }
}

TEST(kernels_vector_tables_match_scalar_on_special_values) { each_table(check_vs_scalar); }

/* ---- the ends of the transcendentals' ranges -------------------------------------------- */

/* Inputs at the ends of each SLEEF row's range (f64, and f32 where they
 * fit): where the result overflows or turns subnormal, the largest and
 * smallest arguments, and the window below log(DBL_MAX) where SLEEF 3.5's
 * f64 exp gave inf (own_math.inc's f64_exp_top_u10). Every table, both slots,
 * in one call per function and dtype, against the long double oracle in
 * ulp_bound's budget; the class (inf, NaN, finite) must match. */
static const double range_ends[] = {
    709.78, 0x1.62e42fe102c83p+9, 0x1.62e42fe102c84p+9, 709.7827128933839,
    0x1.62e42fefa39efp+9, 0x1.62e42fefa39f0p+9, 709.79, 710.0, 1000.0, -708.39, -745.1,
    -745.13321910194122, -745.2, -1000.0, 1023.9999999999999, 1024.0, -1022.0, -1074.0,
    -1074.5, -1075.0, 88.72, 88.7228, 88.8, -87.33, -103.27, -103.98, -104.0, 127.99999,
    128.0, -126.0, -149.0, -149.5, -150.0, DBL_MAX, -DBL_MAX, DBL_MIN, 0x1p-1074, FLT_MAX,
    FLT_MIN, 0x1p-149, 1e22, 1e300, 19.0, 20.0, 40.0, -40.0, 1e-300, 1e-30, INFINITY,
    -INFINITY, NAN, 0.0, -0.0, 1.0};
enum { NENDS = sizeof range_ends / sizeof range_ends[0] };

static void check_range_ends(const ot_kernels *k)
{
    static const ot_op ops[] = {OT_OP_EXP, OT_OP_EXP2, OT_OP_EXPM1, OT_OP_LOG,
                                OT_OP_LOG2, OT_OP_SIN, OT_OP_COS, OT_OP_TANH};
    unsigned char in[NENDS * 8], got[NENDS * 8];
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int kd = 0; kd < 2; kd++)
            for (int acc = 0; acc < 2; acc++) {
                report rep = {3};
                double bound = ulp_bound(ops[o], kd, acc);
                for (size_t i = 0; i < NENDS; i++) kset(in, kd, i, kround(kd, range_ends[i]));
                k->unary[acc][ops[o]][kd](got, in, NENDS);
                for (size_t i = 0; i < NENDS; i++) {
                    long double want = ref_trans(ops[o], kd, kget(in, kd, i));
                    double g = kget(got, kd, i), e = ulp_err(kd, g, want);
                    if (!(e <= bound) || isinf(g) != isinf(kround(kd, (double)want)))
                        MISMATCH(&rep, "%s %s %s u%d(%.17g) = %.17g, want %.17Lg: %g ULP > %g",
                                 ot__isa_name(k->isa), kdname[kd], ot_op_name(ops[o]), acc ? 35 : 10,
                                 kget(in, kd, i), g, want, e, bound);
                }
            }
}

TEST(kernels_range_ends) { each_table(check_range_ends); }

/* f32 tanh u10 (tile.inc's own) on every table within 1 ULP of long double
 * tanh, and exact on its special values, on some 6,000 inputs: NaNs, +-inf,
 * +-0, denormals, FLT_MIN, the largest finite, 64 values each side of the
 * polynomial's cut 0.97 and of 9.01 (past it tanh rounds to 1) and 20 (2|x|
 * is capped there), and every 2^20th bit pattern from four offsets
 * (ulp-exhaustive measures all 2^32). */
static void check_tanh_sampled(const ot_kernels *k)
{
    enum { NS = 6000 };
    static uint32_t in[NS];
    static float got[NS];
    static const uint32_t fixed[] = {0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0,
                                     0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
                                     0xFF7FFFFF, 0x39000000, 0xB9000000};
    size_t n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) in[n++] = fixed[i];
    static const float edges[] = {0.97f, 9.01f, 20.0f};
    for (int e = 0; e < 3; e++)
        for (int d = -64; d < 64; d++) {
            uint32_t b;
            memcpy(&b, &edges[e], sizeof b);
            in[n++] = b + (uint32_t)d;
            in[n++] = (b + (uint32_t)d) | 0x80000000u;
        }
    for (uint32_t off = 0; off < 4 && n < NS; off++)
        for (uint64_t b = off * 0x3777u; b < (1ull << 32) && n < NS; b += 1u << 20) in[n++] = (uint32_t)b;
    k->unary[0][OT_OP_TANH][OT_KD_F32](got, in, n);
    report rep = {3};
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, &in[i], sizeof x);
        double e = ulp_err(OT_KD_F32, got[i], ref_trans(OT_OP_TANH, OT_KD_F32, x));
        bool zero_wrong = x == 0 && (got[i] != 0 || signbit(got[i]) != signbit(x));
        if (!(e <= 1.0) || zero_wrong)
            MISMATCH(&rep, "%s f32 tanh u10(%a) = %a: %g ULP", ot__isa_name(k->isa), (double)x,
                     (double)got[i], e);
    }
}
TEST(kernels_tanh_f32_sampled) { each_table(check_tanh_sampled); }
