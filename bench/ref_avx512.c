/*
 * ref_avx512.c - the hand-written reference loops at AVX-512 (F, DQ, VL):
 * what a user tuning by hand on such a CPU writes. One pass over the data,
 * 16 lanes, FMA, SLEEF's 16-lane u10 functions, masked heads and tails (any
 * length works), one thread; every elementwise loop in both store modes.
 * This file alone is compiled with -mavx512f -mavx512dq -mavx512vl -mfma
 * -mavx2; bench.c calls it only after checking the CPU at run time.
 */
#include "bench.h"

#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <stdint.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The first r (<= 16) lanes on. */
ALWAYS_INLINE __mmask16 lanes(size_t r) { return (__mmask16)((1u << r) - 1); }

ALWAYS_INLINE void put(float *p, __m512 v, store_mode sm)
{
    if (sm == STORE_STREAM) _mm512_stream_ps(p, v);
    else _mm512_storeu_ps(p, v);
}

/* Elements before p reaches a 64-byte boundary, at most n: streaming stores
 * need aligned addresses, so a streaming loop writes these first with
 * masked ordinary stores. Ordinary stores need no head. */
ALWAYS_INLINE size_t head(const float *p, size_t n, store_mode sm)
{
    if (sm != STORE_STREAM) return 0;
    size_t h = (size_t)(-(uintptr_t)p & 63) / sizeof(float);
    return h < n ? h : n;
}

/* ---- W1-W4: elementwise maps --------------------------------------------- */

/* The per-vector bodies; k is a broadcast operand (W5's row sum). The map
 * driver is always inlined with a constant body and store mode, so each
 * reference is one straight loop with no calls but SLEEF's. */
typedef __m512 (*vec_fn)(__m512 a, __m512 b, __m512 c, __m512 k);

/* o[0, r) for r <= 16: heads and tails. Lanes past r load as 0 and are
 * never stored. */
ALWAYS_INLINE void map3_part(float *o, const float *a, const float *b, const float *c, __m512 k,
                             size_t r, vec_fn f)
{
    __mmask16 m = lanes(r);
    _mm512_mask_storeu_ps(o, m, f(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, b),
                                  _mm512_maskz_loadu_ps(m, c), k));
}

ALWAYS_INLINE void map3(float *o, const float *a, const float *b, const float *c, __m512 k,
                        size_t n, vec_fn f, store_mode sm)
{
    size_t i = head(o, n, sm);
    if (i) map3_part(o, a, b, c, k, i, f);
    for (; i + 16 <= n; i += 16)
        put(o + i, f(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), _mm512_loadu_ps(c + i), k),
            sm);
    if (i < n) map3_part(o + i, a + i, b + i, c + i, k, n - i, f);
}

ALWAYS_INLINE __m512 w1_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)k;
    return _mm512_fmadd_ps(a, b, c);
}

ALWAYS_INLINE __m512 w2_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)b, (void)c, (void)k;
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_setzero_ps(), a));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

ALWAYS_INLINE __m512 w3_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)c, (void)k;
    return Sleef_tanhf16_u10avx512f(_mm512_fmadd_ps(a, b, _mm512_div_ps(a, b)));
}

ALWAYS_INLINE __m512 w4_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)k;
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 s = _mm512_sqrt_ps(_mm512_andnot_ps(sign, a));
    __m512 l = Sleef_logf16_u10avx512f(_mm512_fmadd_ps(b, b, one));
    __m512 e = Sleef_expf16_u10avx512f(_mm512_xor_ps(sign, c));
    return _mm512_fmadd_ps(e, half, _mm512_mul_ps(s, l));
}

/* Unused operands are passed as a: the loads are merged by the compiler. */
static void w1(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, c, _mm512_setzero_ps(), n, w1_vec, SM));
}

static void w2(float *o, const float *a, size_t n, store_mode sm)
{
    WITH_STORES(sm, map3(o, a, a, a, _mm512_setzero_ps(), n, w2_vec, SM));
}

static void w3(float *o, const float *a, const float *b, size_t n, store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, a, _mm512_setzero_ps(), n, w3_vec, SM));
}

static void w4(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, c, _mm512_setzero_ps(), n, w4_vec, SM));
}

/* W8: 64 elements known at compile time, so the loop is four straight
 * vectors with no head or tail. */
static void w8(float *o, const float *a, const float *b)
{
    map3(o, a, b, a, _mm512_setzero_ps(), 64, w3_vec, STORE_ORDINARY);
}

/* ---- W7: both gradients of W3 in one pass ------------------------------- */

/* u = a*b + a/b, t = tanh(u), d = 1 - t*t; d/da = d (b + 1/b) and
 * d/db = d (a - (a/b)/b). One division (r = 1/b) serves all three
 * quotients; a and b are read once and both gradients written. */
ALWAYS_INLINE void w7_vec(__m512 a, __m512 b, __m512 *ga, __m512 *gb)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 r = _mm512_div_ps(one, b);
    __m512 q = _mm512_mul_ps(a, r);
    __m512 t = Sleef_tanhf16_u10avx512f(_mm512_fmadd_ps(a, b, q));
    __m512 d = _mm512_fnmadd_ps(t, t, one);
    *ga = _mm512_mul_ps(d, _mm512_add_ps(b, r));
    *gb = _mm512_mul_ps(d, _mm512_fnmadd_ps(q, r, a));
}

/* The first r (<= 16) elements; masked-off lanes of b load as 0: harmless,
 * they are never stored. */
ALWAYS_INLINE void w7_part(float *ga, float *gb, const float *a, const float *b, size_t r)
{
    __mmask16 m = lanes(r);
    __m512 x, y;
    w7_vec(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, b), &x, &y);
    _mm512_mask_storeu_ps(ga, m, x);
    _mm512_mask_storeu_ps(gb, m, y);
}

ALWAYS_INLINE void w7_loop(float *ga, float *gb, const float *a, const float *b, size_t n,
                           store_mode sm)
{
    size_t i = head(ga, n, sm);
    if (i) w7_part(ga, gb, a, b, i);
    __m512 x, y;
    for (; i + 16 <= n; i += 16) {
        w7_vec(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), &x, &y);
        put(ga + i, x, sm);
        put(gb + i, y, sm);
    }
    if (i < n) w7_part(ga + i, gb + i, a + i, b + i, n - i);
}

static void w7(float *ga, float *gb, const float *a, const float *b, size_t n, store_mode sm)
{
    /* One head aligns both outputs only when they are equally misaligned. */
    if (((uintptr_t)ga ^ (uintptr_t)gb) & 63) sm = STORE_ORDINARY;
    WITH_STORES(sm, w7_loop(ga, gb, a, b, n, SM));
}

/* ---- W5: row softmax ----------------------------------------------------- */

/* Four accumulators: max has a latency of several cycles, and one chain
 * would make this pass latency-bound. */
static float row_max(const float *x, size_t n)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    size_t j = 0;
    for (; j + 64 <= n; j += 64) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + j + 16));
        m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + j + 32));
        m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + j + 48));
    }
    for (; j + 16 <= n; j += 16)
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
    if (j < n) {
        __mmask16 m = lanes(n - j);
        m1 = _mm512_mask_max_ps(m1, m, m1, _mm512_maskz_loadu_ps(m, x + j));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

/* o = exp(x - mx), returning the sum of o; exp is computed once per element,
 * and o is written with ordinary stores: the rescale reads it from L1. */
static float row_exp_sum(float *o, const float *x, size_t n, float mx)
{
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 e0 = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
        __m512 e1 = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm));
        _mm512_storeu_ps(o + j, e0);
        _mm512_storeu_ps(o + j + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j + 16 <= n; j += 16) {
        __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
        _mm512_storeu_ps(o + j, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (j < n) {
        __mmask16 m = lanes(n - j);
        __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm));
        _mm512_mask_storeu_ps(o + j, m, e);
        s1 = _mm512_mask_add_ps(s1, m, s1, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* e / s. A division, not a multiplication by 1/s: the workload is e / sum,
 * and a correctly rounded quotient is what optree must produce too. */
ALWAYS_INLINE __m512 w5_scale_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)b, (void)c;
    return _mm512_div_ps(a, k);
}

/* Each row is rescaled right after its exp pass, while it is in L1. */
ALWAYS_INLINE void w5_rows(float *o, const float *x, size_t rows, size_t cols, store_mode sm)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *orow = o + r * cols;
        float s = row_exp_sum(orow, xr, cols, row_max(xr, cols));
        map3(orow, orow, orow, orow, _mm512_set1_ps(s), cols, w5_scale_vec, sm);
    }
}

static void w5(float *o, const float *x, size_t rows, size_t cols, store_mode sm)
{
    WITH_STORES(sm, w5_rows(o, x, rows, cols, SM));
}

/* ---- W9: transpose(X) * col + row ---------------------------------------- */

/* Strips of 256 output rows (columns of x), walked 16 rows of x at a time:
 * x is read 1 KiB of a row at a time (16 lines of one page: few TLB misses
 * and prefetch streams), and each output row of the strip gets one whole
 * 64-byte line per step, which a streaming store writes without reading it
 * first. Measured on Zen 4 at 4096x4096: 9-10 ms streaming and 12-13 ms
 * ordinary, where 64x64 square blocks took 19 and 24 ms. */
#define W9_STRIP 256

/* In-register transpose of the 16x16 tile in r[0..15]. After the unpacks
 * and shuffles, lane block L of u[4k+j] holds column 4L+j of rows 4k..4k+3;
 * two rounds of 128-bit block shuffles gather the four row groups. */
ALWAYS_INLINE void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);     /* blocks 0, 2 */
        __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);     /* blocks 1, 3 */
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

/* Out rows [i0, i0+16), columns [j0, j0+16): read as 16 rows of x,
 * transposed in registers, then one FMA per out row. */
ALWAYS_INLINE void w9_tile(float *o, const float *x, const float *col, const float *row,
                           size_t n, size_t i0, size_t j0, store_mode sm)
{
    __m512 r[16];
    for (int k = 0; k < 16; k++)
        r[k] = _mm512_loadu_ps(x + (j0 + k) * n + i0);
    transpose16(r);
    __m512 rw = _mm512_loadu_ps(row + j0);
    for (int c = 0; c < 16; c++)
        put(o + (i0 + c) * n + j0, _mm512_fmadd_ps(r[c], _mm512_set1_ps(col[i0 + c]), rw), sm);
}

/* The scalar body over out rows [i0, i1) and columns [j0, j1): the edges
 * left when n is not a multiple of 16. */
static void w9_edge(float *o, const float *x, const float *col, const float *row, size_t n,
                    size_t i0, size_t i1, size_t j0, size_t j1)
{
    for (size_t i = i0; i < i1; i++)
        for (size_t j = j0; j < j1; j++)
            o[i * n + j] = x[j * n + i] * col[i] + row[j];
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

ALWAYS_INLINE void w9_loop(float *o, const float *x, const float *col, const float *row,
                           size_t n, store_mode sm)
{
    size_t n16 = n & ~(size_t)15;
    for (size_t ib = 0; ib < n16; ib += W9_STRIP)
        for (size_t j = 0; j < n16; j += 16)
            for (size_t i = ib; i < min_sz(ib + W9_STRIP, n16); i += 16)
                w9_tile(o, x, col, row, n, i, j, sm);
    w9_edge(o, x, col, row, n, 0, n16, n16, n);
    w9_edge(o, x, col, row, n, n16, n, 0, n);
}

static void w9(float *o, const float *x, const float *col, const float *row, size_t n,
               store_mode sm)
{
    /* Streaming needs every tile row on a 64-byte boundary. */
    if (((uintptr_t)o & 63) || n % 16) sm = STORE_ORDINARY;
    WITH_STORES(sm, w9_loop(o, x, col, row, n, SM));
}

/* ---- LN, RMS: layer norm and RMS norm over rows ------------------------- */

/* sum((x - m)^2) over a row, four accumulators (m = 0: the sum of squares;
 * sq false: the plain sum). */
ALWAYS_INLINE float row_moment(const float *x, size_t n, float m, bool sq)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    size_t j = 0;
    for (; j + 64 <= n; j += 64)
        for (int u = 0; u < 4; u++) {
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j + 16 * u), vm);
            s[u] = sq ? _mm512_fmadd_ps(d, d, s[u]) : _mm512_add_ps(s[u], d);
        }
    for (; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : lanes(n - j);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + j), vm);
        s[0] = sq ? _mm512_fmadd_ps(d, d, s[0]) : _mm512_add_ps(s[0], d);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
}

/* (x - mean) * invstd * w + b, k holding mean in lane 0 and invstd in lane 1
 * (the broadcasts are loop-invariant: hoisted). */
ALWAYS_INLINE __m512 ln_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    __m512 m = _mm512_broadcastss_ps(_mm512_castps512_ps128(k));
    __m512 is = _mm512_permutexvar_ps(_mm512_set1_epi32(1), k);
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(a, m), is), b, c);
}

ALWAYS_INLINE __m512 rms_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)c;
    return _mm512_mul_ps(_mm512_mul_ps(a, k), b);
}

/* LNB: sum(g w) into *s1 and sum(g w (x - m)) into *s2 over a row, two
 * accumulators each (one read of g, w and x from L1). */
ALWAYS_INLINE void row_gw_sums(const float *g, const float *w, const float *x, float m, size_t n,
                               float *s1, float *s2)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 b[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    size_t j = 0;
    for (; j + 32 <= n; j += 32)
        for (int u = 0; u < 2; u++) {
            size_t i = j + 16 * (size_t)u;
            __m512 gw = _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(w + i));
            a[u] = _mm512_add_ps(a[u], gw);
            b[u] = _mm512_fmadd_ps(gw, _mm512_sub_ps(_mm512_loadu_ps(x + i), vm), b[u]);
        }
    for (; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : lanes(n - j);
        __m512 gw = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + j), _mm512_maskz_loadu_ps(k, w + j));
        a[0] = _mm512_add_ps(a[0], gw);
        b[0] = _mm512_fmadd_ps(gw, _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + j), vm), b[0]);
    }
    *s1 = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
    *s2 = _mm512_reduce_add_ps(_mm512_add_ps(b[0], b[1]));
}

/* LNB's epilogue: r (g w - A - (x - m) C), a = g, b = w, c = x, k holding
 * m, r, A, C in lanes 0-3 (C = mean(g w (x - m)) r^2). */
ALWAYS_INLINE __m512 lnb_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    __m512 m = _mm512_permutexvar_ps(_mm512_set1_epi32(0), k);
    __m512 r = _mm512_permutexvar_ps(_mm512_set1_epi32(1), k);
    __m512 A = _mm512_permutexvar_ps(_mm512_set1_epi32(2), k);
    __m512 C = _mm512_permutexvar_ps(_mm512_set1_epi32(3), k);
    __m512 t = _mm512_fnmadd_ps(_mm512_sub_ps(c, m), C, _mm512_fmsub_ps(a, b, A));
    return _mm512_mul_ps(t, r);
}

#define LN_SET1(v) _mm512_set1_ps(v)
#define LN_PAIR(m, is) _mm512_setr4_ps(m, is, 0, 0)
#define LN_QUAD(m, r, a, c) _mm512_setr4_ps(m, r, a, c)
#include "ref_ln.inc"

/* ---- W6: the epilogue after sgemm ---------------------------------------- */

ALWAYS_INLINE __m512 relu_vec(__m512 a, __m512 b, __m512 c, __m512 k)
{
    (void)c, (void)k;
    return _mm512_max_ps(_mm512_add_ps(a, b), _mm512_setzero_ps());
}

/* Row by row, in place: one read and one write of the GEMM's output, as the
 * pass after cblas_sgemm in a hand-written layer. */
static void bias_relu(float *o, const float *bias, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        map3(o + r * cols, o + r * cols, bias, bias, _mm512_setzero_ps(), cols, relu_vec,
             STORE_ORDINARY);
}

const ref_loops ref_loops_avx512 = {
    .isa = "AVX-512 (F, DQ, VL) + FMA, SLEEF 16-lane u10",
    .w1 = w1, .w2 = w2, .w3 = w3, .w4 = w4, .w5 = w5, .w7 = w7, .w8 = w8, .w9 = w9,
    .bias_relu = bias_relu, .ln = ln, .lnb = lnb,
};
