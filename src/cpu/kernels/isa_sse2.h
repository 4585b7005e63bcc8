/*
 * isa_sse2.h - the vector vocabulary of tile.inc for SSE2, the x86-64
 * baseline: 4 floats, 2 doubles or 4 int32 per register; masks are
 * full-width lane masks. SSE2 lacks blends, rounding, 32-bit multiplies and
 * FMA; the first three are built from SSE2 operations below, and tile.inc
 * calls libm's fmaf/fma when OT_KHAS_FMA is 0 (rounding once, like FMA).
 * Included only by k_sse2.c, built with the baseline flags.
 */
#include <immintrin.h>
#include <sleef.h>

#define OT_KISA sse2
#define OT_KW_F 4
#define OT_KW_D 2
#define OT_KHAS_FMA 0
#define VF_N 4
#define VD_N 2

typedef __m128 vf;
typedef __m128d vd;
typedef __m128i vi;
typedef __m128 mf;
typedef __m128d md;
typedef __m128i mi;

#define SF(f, acc) Sleef_##f##f4_##acc##sse2
#define SD(f, acc) Sleef_##f##d2_##acc##sse2

#define OT_KV static inline __attribute__((always_inline))

/* ---- f32 ---- */
OT_KV vf vf_loadu(const float *p) { return _mm_loadu_ps(p); }
OT_KV void vf_storeu(float *p, vf x) { _mm_storeu_ps(p, x); }
OT_KV vf vf_set1(float x) { return _mm_set1_ps(x); }
OT_KV vf vf_add(vf a, vf b) { return _mm_add_ps(a, b); }
OT_KV vf vf_sub(vf a, vf b) { return _mm_sub_ps(a, b); }
OT_KV vf vf_mul(vf a, vf b) { return _mm_mul_ps(a, b); }
OT_KV vf vf_div(vf a, vf b) { return _mm_div_ps(a, b); }
OT_KV vf vf_sqrt(vf a) { return _mm_sqrt_ps(a); }
OT_KV vf vf_neg(vf a) { return _mm_xor_ps(a, _mm_set1_ps(-0.0f)); }
OT_KV vf vf_abs(vf a) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), a); }
OT_KV vf vf_max(vf a, vf b) { return _mm_max_ps(a, b); }
OT_KV vf vf_min(vf a, vf b) { return _mm_min_ps(a, b); }
OT_KV mf vf_eq(vf a, vf b) { return _mm_cmpeq_ps(a, b); }
OT_KV mf vf_ne(vf a, vf b) { return _mm_cmpneq_ps(a, b); }
OT_KV mf vf_lt(vf a, vf b) { return _mm_cmplt_ps(a, b); }
OT_KV mf vf_le(vf a, vf b) { return _mm_cmple_ps(a, b); }
OT_KV mf vf_gt(vf a, vf b) { return _mm_cmpgt_ps(a, b); }
OT_KV mf vf_ge(vf a, vf b) { return _mm_cmpge_ps(a, b); }
OT_KV mf vf_unord(vf a, vf b) { return _mm_cmpunord_ps(a, b); }
OT_KV mf mf_or(mf a, mf b) { return _mm_or_ps(a, b); }
OT_KV int mf_any(mf m) { return _mm_movemask_ps(m) != 0; }
OT_KV vf vf_sel(mf m, vf a, vf b) { return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)); }
/* -|a|, and "a < 0 ? x : y" (differs from a sign-bit select only at -0
 * and NaN, where sig gives the same either way). */
OT_KV vf vf_nabs(vf a) { return _mm_or_ps(a, _mm_set1_ps(-0.0f)); }
OT_KV vf vf_signsel(vf a, vf x, vf y) { return vf_sel(_mm_cmplt_ps(a, _mm_setzero_ps()), x, y); }
OT_KV vf vf_one_if(mf m) { return _mm_and_ps(m, _mm_set1_ps(1.0f)); }
OT_KV vf vf_cvt_i32(vi a) { return _mm_cvtepi32_ps(a); }
/* a with x's sign bit set where x has it (a's own sign bit clear). */
OT_KV vf vf_orsign(vf a, vf x) { return _mm_or_ps(a, _mm_and_ps(x, _mm_set1_ps(-0.0f))); }
/* 2^k where t = 1.5 * 2^23 + k (|k| < 2^22, k in t's low mantissa bits):
 * t's bits shifted into the exponent field (the rest of t's shifts out),
 * plus 1.0's bits. f32_tanh_u10's scaling, exact, with no conversion. */
OT_KV vf vf_pow2_magic(vf t)
{
    return _mm_castsi128_ps(_mm_add_epi32(_mm_slli_epi32(_mm_castps_si128(t), 23), _mm_set1_epi32(0x3F800000)));
}
/* Round half to even without SSE4.1: below 2^23 in magnitude, adding and
 * subtracting 2^23 rounds to an integer in the current (nearest) mode; the
 * sign is put back so that -0.3 gives -0. Larger values and NaN are
 * already integral (or NaN) and pass through. */
OT_KV vf vf_rint(vf a)
{
    const vf big = _mm_set1_ps(0x1p23f), sign = _mm_set1_ps(-0.0f);
    vf ax = _mm_andnot_ps(sign, a);
    vf t = _mm_sub_ps(_mm_add_ps(ax, big), big);
    t = _mm_or_ps(t, _mm_and_ps(a, sign));
    return vf_sel(_mm_cmplt_ps(ax, big), t, a);
}

/* ---- f64 ---- */
OT_KV vd vd_loadu(const double *p) { return _mm_loadu_pd(p); }
OT_KV void vd_storeu(double *p, vd x) { _mm_storeu_pd(p, x); }
OT_KV vd vd_set1(double x) { return _mm_set1_pd(x); }
OT_KV vd vd_add(vd a, vd b) { return _mm_add_pd(a, b); }
OT_KV vd vd_sub(vd a, vd b) { return _mm_sub_pd(a, b); }
OT_KV vd vd_mul(vd a, vd b) { return _mm_mul_pd(a, b); }
OT_KV vd vd_div(vd a, vd b) { return _mm_div_pd(a, b); }
OT_KV vd vd_sqrt(vd a) { return _mm_sqrt_pd(a); }
OT_KV vd vd_neg(vd a) { return _mm_xor_pd(a, _mm_set1_pd(-0.0)); }
OT_KV vd vd_abs(vd a) { return _mm_andnot_pd(_mm_set1_pd(-0.0), a); }
OT_KV vd vd_max(vd a, vd b) { return _mm_max_pd(a, b); }
OT_KV vd vd_min(vd a, vd b) { return _mm_min_pd(a, b); }
OT_KV md vd_eq(vd a, vd b) { return _mm_cmpeq_pd(a, b); }
OT_KV md vd_ne(vd a, vd b) { return _mm_cmpneq_pd(a, b); }
OT_KV md vd_lt(vd a, vd b) { return _mm_cmplt_pd(a, b); }
OT_KV md vd_le(vd a, vd b) { return _mm_cmple_pd(a, b); }
OT_KV md vd_gt(vd a, vd b) { return _mm_cmpgt_pd(a, b); }
OT_KV md vd_ge(vd a, vd b) { return _mm_cmpge_pd(a, b); }
OT_KV md vd_unord(vd a, vd b) { return _mm_cmpunord_pd(a, b); }
OT_KV md md_or(md a, md b) { return _mm_or_pd(a, b); }
OT_KV int md_any(md m) { return _mm_movemask_pd(m) != 0; }
OT_KV vd vd_sel(md m, vd a, vd b) { return _mm_or_pd(_mm_and_pd(m, a), _mm_andnot_pd(m, b)); }
OT_KV vd vd_nabs(vd a) { return _mm_or_pd(a, _mm_set1_pd(-0.0)); }
OT_KV vd vd_signsel(vd a, vd x, vd y) { return vd_sel(_mm_cmplt_pd(a, _mm_setzero_pd()), x, y); }
OT_KV vd vd_one_if(md m) { return _mm_and_pd(m, _mm_set1_pd(1.0)); }
OT_KV vd vd_rint(vd a)
{
    const vd big = _mm_set1_pd(0x1p52), sign = _mm_set1_pd(-0.0);
    vd ax = _mm_andnot_pd(sign, a);
    vd t = _mm_sub_pd(_mm_add_pd(ax, big), big);
    t = _mm_or_pd(t, _mm_and_pd(a, sign));
    return vd_sel(_mm_cmplt_pd(ax, big), t, a);
}
/* Two floats or int32 (8 bytes, any alignment) widened, and back. */
OT_KV vd vd_load_f32(const float *p)
{
    return _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)p)));
}
OT_KV void vd_store_f32(float *p, vd x)
{
    _mm_storel_epi64((__m128i *)p, _mm_castps_si128(_mm_cvtpd_ps(x)));
}
OT_KV vd vd_load_i32(const int32_t *p) { return _mm_cvtepi32_pd(_mm_loadl_epi64((const __m128i *)p)); }
OT_KV void vd_store_i32(int32_t *p, vd x) { _mm_storel_epi64((__m128i *)p, _mm_cvttpd_epi32(x)); }

/* ---- i32 (wrapping) ---- */
OT_KV vi vi_loadu(const int32_t *p) { return _mm_loadu_si128((const __m128i *)p); }
OT_KV void vi_storeu(int32_t *p, vi x) { _mm_storeu_si128((__m128i *)p, x); }
OT_KV vi vi_set1(int32_t x) { return _mm_set1_epi32(x); }
OT_KV vi vi_add(vi a, vi b) { return _mm_add_epi32(a, b); }
OT_KV vi vi_sub(vi a, vi b) { return _mm_sub_epi32(a, b); }
/* The low 32 bits of each product from two 32x32->64 multiplies (even and
 * odd lanes), since pmulld is SSE4.1. */
OT_KV vi vi_mul(vi a, vi b)
{
    vi even = _mm_mul_epu32(a, b);
    vi odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), _mm_srli_epi64(b, 32));
    return _mm_unpacklo_epi32(_mm_shuffle_epi32(even, _MM_SHUFFLE(0, 0, 2, 0)),
                              _mm_shuffle_epi32(odd, _MM_SHUFFLE(0, 0, 2, 0)));
}
OT_KV vi vi_and(vi a, vi b) { return _mm_and_si128(a, b); }
OT_KV vi vi_shr1(vi a) { return _mm_srli_epi32(a, 1); }
OT_KV mi vi_eq(vi a, vi b) { return _mm_cmpeq_epi32(a, b); }
OT_KV mi vi_gt(vi a, vi b) { return _mm_cmpgt_epi32(a, b); }
OT_KV int mi_any(mi m) { return _mm_movemask_epi8(m) != 0; }
OT_KV vi vi_sel(mi m, vi a, vi b) { return _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b)); }
