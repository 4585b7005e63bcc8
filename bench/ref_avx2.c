/*
 * ref_avx2.c - the hand-written reference loops at AVX2: what a user tuning
 * by hand writes for a CPU without AVX-512 (or to compare with optree's
 * AVX2 kernels, OT_ISA=avx2). One pass over the data, 8 lanes, FMA, SLEEF's
 * 8-lane u10 functions, masked heads and tails (any length works), one
 * thread; every elementwise loop in both store modes. Also BENCH.md's
 * scalar W9 reference. This file alone is compiled with -mavx2 -mfma;
 * bench.c calls it only after checking the CPU at run time.
 */
#include "bench.h"

#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <stdint.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The first r (< 8) lanes on. */
ALWAYS_INLINE __m256i tail_mask(size_t r)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

ALWAYS_INLINE void put(float *p, __m256 v, store_mode sm)
{
    if (sm == STORE_STREAM) _mm256_stream_ps(p, v);
    else _mm256_storeu_ps(p, v);
}

/* Elements before p reaches a 32-byte boundary, at most n: streaming stores
 * need aligned addresses, so a streaming loop writes these first with
 * masked ordinary stores. Ordinary stores need no head. */
ALWAYS_INLINE size_t head(const float *p, size_t n, store_mode sm)
{
    if (sm != STORE_STREAM) return 0;
    size_t h = (size_t)(-(uintptr_t)p & 31) / sizeof(float);
    return h < n ? h : n;
}

ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

ALWAYS_INLINE float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* ---- W1-W4: elementwise maps --------------------------------------------- */

/* The per-vector bodies; k is a broadcast operand (W5's row sum). The map
 * driver is always inlined with a constant body and store mode, so each
 * reference is one straight loop with no calls but SLEEF's. */
typedef __m256 (*vec_fn)(__m256 a, __m256 b, __m256 c, __m256 k);

/* o[0, r) for r < 8: heads and tails. Lanes past r load as 0 and are never
 * stored. */
ALWAYS_INLINE void map3_part(float *o, const float *a, const float *b, const float *c, __m256 k,
                             size_t r, vec_fn f)
{
    __m256i m = tail_mask(r);
    _mm256_maskstore_ps(o, m, f(_mm256_maskload_ps(a, m), _mm256_maskload_ps(b, m),
                                _mm256_maskload_ps(c, m), k));
}

ALWAYS_INLINE void map3(float *o, const float *a, const float *b, const float *c, __m256 k,
                        size_t n, vec_fn f, store_mode sm)
{
    size_t i = head(o, n, sm);
    if (i) map3_part(o, a, b, c, k, i, f);
    for (; i + 8 <= n; i += 8)
        put(o + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), _mm256_loadu_ps(c + i), k),
            sm);
    if (i < n) map3_part(o + i, a + i, b + i, c + i, k, n - i, f);
}

ALWAYS_INLINE __m256 w1_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)k;
    return _mm256_fmadd_ps(a, b, c);
}

ALWAYS_INLINE __m256 w2_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)b, (void)c, (void)k;
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), a));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

ALWAYS_INLINE __m256 w3_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)c, (void)k;
    return Sleef_tanhf8_u10avx2(_mm256_fmadd_ps(a, b, _mm256_div_ps(a, b)));
}

ALWAYS_INLINE __m256 w4_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)k;
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 s = _mm256_sqrt_ps(_mm256_andnot_ps(sign, a));
    __m256 l = Sleef_logf8_u10avx2(_mm256_fmadd_ps(b, b, one));
    __m256 e = Sleef_expf8_u10avx2(_mm256_xor_ps(sign, c));
    return _mm256_fmadd_ps(e, half, _mm256_mul_ps(s, l));
}

/* Unused operands are passed as a: the loads are merged by the compiler. */
static void w1(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, c, _mm256_setzero_ps(), n, w1_vec, SM));
}

static void w2(float *o, const float *a, size_t n, store_mode sm)
{
    WITH_STORES(sm, map3(o, a, a, a, _mm256_setzero_ps(), n, w2_vec, SM));
}

static void w3(float *o, const float *a, const float *b, size_t n, store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, a, _mm256_setzero_ps(), n, w3_vec, SM));
}

static void w4(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm)
{
    WITH_STORES(sm, map3(o, a, b, c, _mm256_setzero_ps(), n, w4_vec, SM));
}

/* W8: 64 elements known at compile time, so the loop is eight straight
 * vectors with no head or tail. */
static void w8(float *o, const float *a, const float *b)
{
    map3(o, a, b, a, _mm256_setzero_ps(), 64, w3_vec, STORE_ORDINARY);
}

/* ---- W7: both gradients of W3 in one pass ------------------------------- */

/* u = a*b + a/b, t = tanh(u), d = 1 - t*t; d/da = d (b + 1/b) and
 * d/db = d (a - (a/b)/b). One division (r = 1/b) serves all three
 * quotients; a and b are read once and both gradients written. */
ALWAYS_INLINE void w7_vec(__m256 a, __m256 b, __m256 *ga, __m256 *gb)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 r = _mm256_div_ps(one, b);
    __m256 q = _mm256_mul_ps(a, r);
    __m256 t = Sleef_tanhf8_u10avx2(_mm256_fmadd_ps(a, b, q));
    __m256 d = _mm256_fnmadd_ps(t, t, one);
    *ga = _mm256_mul_ps(d, _mm256_add_ps(b, r));
    *gb = _mm256_mul_ps(d, _mm256_fnmadd_ps(q, r, a));
}

/* The first r (< 8) elements; masked-off lanes of b load as 0: harmless,
 * they are never stored. */
ALWAYS_INLINE void w7_part(float *ga, float *gb, const float *a, const float *b, size_t r)
{
    __m256i m = tail_mask(r);
    __m256 x, y;
    w7_vec(_mm256_maskload_ps(a, m), _mm256_maskload_ps(b, m), &x, &y);
    _mm256_maskstore_ps(ga, m, x);
    _mm256_maskstore_ps(gb, m, y);
}

ALWAYS_INLINE void w7_loop(float *ga, float *gb, const float *a, const float *b, size_t n,
                           store_mode sm)
{
    size_t i = head(ga, n, sm);
    if (i) w7_part(ga, gb, a, b, i);
    __m256 x, y;
    for (; i + 8 <= n; i += 8) {
        w7_vec(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), &x, &y);
        put(ga + i, x, sm);
        put(gb + i, y, sm);
    }
    if (i < n) w7_part(ga + i, gb + i, a + i, b + i, n - i);
}

static void w7(float *ga, float *gb, const float *a, const float *b, size_t n, store_mode sm)
{
    /* One head aligns both outputs only when they are equally misaligned. */
    if (((uintptr_t)ga ^ (uintptr_t)gb) & 31) sm = STORE_ORDINARY;
    WITH_STORES(sm, w7_loop(ga, gb, a, b, n, SM));
}

/* ---- W5: row softmax ----------------------------------------------------- */

/* Four accumulators: max has a latency of several cycles, and one chain
 * would make this pass latency-bound. */
static float row_max(const float *x, size_t n)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + j));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + j + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + j + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + j + 24));
    }
    for (; j + 8 <= n; j += 8)
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + j));
    if (j < n) {
        __m256i m = tail_mask(n - j);
        __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + j, m), _mm256_castsi256_ps(m));
        m1 = _mm256_max_ps(m1, v);
    }
    return hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

/* o = exp(x - mx), returning the sum of o; exp is computed once per element,
 * and o is written with ordinary stores: the rescale reads it from L1. */
static float row_exp_sum(float *o, const float *x, size_t n, float mx)
{
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 e0 = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        __m256 e1 = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm));
        _mm256_storeu_ps(o + j, e0);
        _mm256_storeu_ps(o + j + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; j + 8 <= n; j += 8) {
        __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(o + j, e);
        s0 = _mm256_add_ps(s0, e);
    }
    if (j < n) {
        __m256i m = tail_mask(n - j);
        __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_maskload_ps(x + j, m), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(o + j, m, e);
        s1 = _mm256_add_ps(s1, e);
    }
    return hsum8(_mm256_add_ps(s0, s1));
}

/* e / s. A division, not a multiplication by 1/s: the workload is e / sum,
 * and a correctly rounded quotient is what optree must produce too. */
ALWAYS_INLINE __m256 w5_scale_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)b, (void)c;
    return _mm256_div_ps(a, k);
}

/* Each row is rescaled right after its exp pass, while it is in L1. */
ALWAYS_INLINE void w5_rows(float *o, const float *x, size_t rows, size_t cols, store_mode sm)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *orow = o + r * cols;
        float s = row_exp_sum(orow, xr, cols, row_max(xr, cols));
        map3(orow, orow, orow, orow, _mm256_set1_ps(s), cols, w5_scale_vec, sm);
    }
}

static void w5(float *o, const float *x, size_t rows, size_t cols, store_mode sm)
{
    WITH_STORES(sm, w5_rows(o, x, rows, cols, SM));
}

/* ---- W9: transpose(X) * col + row ---------------------------------------- */

#define W9_BLOCK 32

/* The scalar body over out rows [i0, i1) and columns [j0, j1). */
static void w9_scalar_tile(float *o, const float *x, const float *col, const float *row,
                           size_t n, size_t i0, size_t i1, size_t j0, size_t j1)
{
    for (size_t i = i0; i < i1; i++) {
        float c = col[i];
        for (size_t j = j0; j < j1; j++)
            o[i * n + j] = x[j * n + i] * c + row[j];
    }
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* 32x32 blocks, so that the column walk over x touches a few cache lines
 * per block and uses them whole (BENCH.md's reference, scalar). */
void ref_w9_scalar(float *o, const float *x, const float *col, const float *row, size_t n)
{
    for (size_t ib = 0; ib < n; ib += W9_BLOCK)
        for (size_t jb = 0; jb < n; jb += W9_BLOCK)
            w9_scalar_tile(o, x, col, row, n, ib, min_sz(ib + W9_BLOCK, n), jb,
                           min_sz(jb + W9_BLOCK, n));
}

/* In-register transpose of an 8x8 tile of rows r[0..7]. */
ALWAYS_INLINE void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {
        __m256 lo = t[4 * k], hi = t[4 * k + 1], lo2 = t[4 * k + 2], hi2 = t[4 * k + 3];
        u[4 * k] = _mm256_shuffle_ps(lo, lo2, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 1] = _mm256_shuffle_ps(lo, lo2, _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * k + 2] = _mm256_shuffle_ps(hi, hi2, _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 3] = _mm256_shuffle_ps(hi, hi2, _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

/* Out rows [i0, i0+8), columns [j0, j0+8): read as 8 rows of x, transposed
 * in registers, then one FMA per out row. */
ALWAYS_INLINE void w9_tile8(float *o, const float *x, const float *col, const float *row,
                            size_t n, size_t i0, size_t j0, store_mode sm)
{
    __m256 r[8];
    for (int k = 0; k < 8; k++)
        r[k] = _mm256_loadu_ps(x + (j0 + k) * n + i0);
    transpose8(r);
    __m256 rw = _mm256_loadu_ps(row + j0);
    for (int c = 0; c < 8; c++)
        put(o + (i0 + c) * n + j0, _mm256_fmadd_ps(r[c], _mm256_broadcast_ss(col + i0 + c), rw),
            sm);
}

/* Strips of 256 output rows (columns of x), walked 16 rows of x at a time,
 * as two 8x8 tiles side by side: x is read 1 KiB of a row at a time (16
 * lines of one page: few TLB misses and prefetch streams), and each output
 * row of the strip gets one whole 64-byte line per step, which streaming
 * stores write without reading it first (half lines streamed took twice as
 * long). Measured on Zen 4 at 4096x4096: 10 ms streaming and 12-13 ms
 * ordinary, where 32x32 blocks took 15 and 22 ms. The edges left when n is
 * not a multiple of 8 go through the scalar body. */
#define W9_STRIP 256

ALWAYS_INLINE void w9_loop(float *o, const float *x, const float *col, const float *row,
                           size_t n, store_mode sm)
{
    size_t n8 = n & ~(size_t)7;
    for (size_t ib = 0; ib < n8; ib += W9_STRIP)
        for (size_t jb = 0; jb < n8; jb += 16)
            for (size_t i = ib; i < min_sz(ib + W9_STRIP, n8); i += 8)
                for (size_t j = jb; j < min_sz(jb + 16, n8); j += 8)
                    w9_tile8(o, x, col, row, n, i, j, sm);
    w9_scalar_tile(o, x, col, row, n, 0, n8, n8, n);
    w9_scalar_tile(o, x, col, row, n, n8, n, 0, n);
}

static void w9(float *o, const float *x, const float *col, const float *row, size_t n,
               store_mode sm)
{
    /* Streaming needs every tile row on a 32-byte boundary. */
    if (((uintptr_t)o & 31) || n % 8) sm = STORE_ORDINARY;
    WITH_STORES(sm, w9_loop(o, x, col, row, n, SM));
}

/* ---- LN, RMS: layer norm and RMS norm over rows ------------------------- */

/* As ref_avx512.c's: sum((x - m)^2) or sum(x - m) over a row. */
ALWAYS_INLINE float row_moment(const float *x, size_t n, float m, bool sq)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    size_t j = 0;
    for (; j + 32 <= n; j += 32)
        for (int u = 0; u < 4; u++) {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j + 8 * u), vm);
            s[u] = sq ? _mm256_fmadd_ps(d, d, s[u]) : _mm256_add_ps(s[u], d);
        }
    for (; j < n; j += 8) {
        __m256i k = n - j >= 8 ? _mm256_set1_epi32(-1) : tail_mask(n - j);
        __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + j, k), vm),
                                 _mm256_castsi256_ps(k));
        s[0] = sq ? _mm256_fmadd_ps(d, d, s[0]) : _mm256_add_ps(s[0], d);
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
}

ALWAYS_INLINE __m256 ln_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    __m256 m = _mm256_broadcastss_ps(_mm256_castps256_ps128(k));
    __m256 is = _mm256_permutevar8x32_ps(k, _mm256_set1_epi32(1));
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_sub_ps(a, m), is), b, c);
}

ALWAYS_INLINE __m256 rms_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)c;
    return _mm256_mul_ps(_mm256_mul_ps(a, k), b);
}

/* As ref_avx512.c's: sum(g w) and sum(g w (x - m)) over a row. */
ALWAYS_INLINE void row_gw_sums(const float *g, const float *w, const float *x, float m, size_t n,
                               float *s1, float *s2)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 b[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int u = 0; u < 2; u++) {
            size_t i = j + 8 * (size_t)u;
            __m256 gw = _mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(w + i));
            a[u] = _mm256_add_ps(a[u], gw);
            b[u] = _mm256_fmadd_ps(gw, _mm256_sub_ps(_mm256_loadu_ps(x + i), vm), b[u]);
        }
    for (; j < n; j += 8) {
        __m256i k = n - j >= 8 ? _mm256_set1_epi32(-1) : tail_mask(n - j);
        __m256 gw = _mm256_mul_ps(_mm256_maskload_ps(g + j, k), _mm256_maskload_ps(w + j, k));
        a[0] = _mm256_add_ps(a[0], gw);
        b[0] = _mm256_fmadd_ps(gw, _mm256_sub_ps(_mm256_maskload_ps(x + j, k), vm), b[0]);
    }
    *s1 = hsum8(_mm256_add_ps(a[0], a[1]));
    *s2 = hsum8(_mm256_add_ps(b[0], b[1]));
}

ALWAYS_INLINE __m256 lnb_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    __m256 m = _mm256_permutevar8x32_ps(k, _mm256_set1_epi32(0));
    __m256 r = _mm256_permutevar8x32_ps(k, _mm256_set1_epi32(1));
    __m256 A = _mm256_permutevar8x32_ps(k, _mm256_set1_epi32(2));
    __m256 C = _mm256_permutevar8x32_ps(k, _mm256_set1_epi32(3));
    __m256 t = _mm256_fnmadd_ps(_mm256_sub_ps(c, m), C, _mm256_fmsub_ps(a, b, A));
    return _mm256_mul_ps(t, r);
}

#define LN_SET1(v) _mm256_set1_ps(v)
#define LN_PAIR(m, is) _mm256_setr_ps(m, is, 0, 0, 0, 0, 0, 0)
#define LN_QUAD(m, r, a, c) _mm256_setr_ps(m, r, a, c, 0, 0, 0, 0)
#include "ref_ln.inc"

/* ---- W6: the epilogue after sgemm ---------------------------------------- */

ALWAYS_INLINE __m256 relu_vec(__m256 a, __m256 b, __m256 c, __m256 k)
{
    (void)c, (void)k;
    return _mm256_max_ps(_mm256_add_ps(a, b), _mm256_setzero_ps());
}

/* Row by row, in place: one read and one write of the GEMM's output, as the
 * pass after cblas_sgemm in a hand-written layer. */
static void bias_relu(float *o, const float *bias, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        map3(o + r * cols, o + r * cols, bias, bias, _mm256_setzero_ps(), cols, relu_vec,
             STORE_ORDINARY);
}

const ref_loops ref_loops_avx2 = {
    .isa = "AVX2 + FMA, SLEEF 8-lane u10",
    .w1 = w1, .w2 = w2, .w3 = w3, .w4 = w4, .w5 = w5, .w7 = w7, .w8 = w8, .w9 = w9,
    .bias_relu = bias_relu, .ln = ln, .lnb = lnb,
};
