/*
 * isa_avx2.h - the vector vocabulary of tile.inc for AVX2 + FMA: 8 floats,
 * 4 doubles or 8 int32 per register; masks are full-width lane masks.
 * Included only by k_avx2.c, which is built with -mavx2 -mfma.
 */
#include <immintrin.h>
#include <sleef.h>

#define OT_KISA avx2
#define OT_KW_F 8        /* lanes, for kernel names */
#define OT_KW_D 4
#define OT_KHAS_FMA 1
#if defined(__x86_64__)
#define OT_KVFN 1        /* vector functions for src/cpu/jit/jit.c */
#endif
#define VF_N 8
#define VD_N 4

typedef __m256 vf;
typedef __m256d vd;
typedef __m256i vi;
typedef __m256 mf;
typedef __m256d md;
typedef __m256i mi;

/* SLEEF names: SF(exp, u10) is Sleef_expf8_u10avx2. */
#define SF(f, acc) Sleef_##f##f8_##acc##avx2
#define SD(f, acc) Sleef_##f##d4_##acc##avx2

#define OT_KV static inline __attribute__((always_inline))

#include "kpin.h"

/* ---- f32 ---- */
OT_KV vf vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
OT_KV void vf_storeu(float *p, vf x) { _mm256_storeu_ps(p, x); }
OT_KV vf vf_set1(float x) { return _mm256_set1_ps(x); }
OT_KV vf vf_add(vf a, vf b) { return OT_KPIN2("vaddps", a, b); }
OT_KV vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
OT_KV vf vf_mul(vf a, vf b) { return OT_KPIN2("vmulps", a, b); }
OT_KV vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
OT_KV vf vf_sqrt(vf a) { return _mm256_sqrt_ps(a); }
OT_KV vf vf_fma(vf a, vf b, vf c) { return OT_KPIN3("vfmadd231ps", a, b, c); }
OT_KV vf vf_neg(vf a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
OT_KV vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
OT_KV vf vf_rint(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* Lane max/min for reductions; NaN handling is done by the caller. */
OT_KV vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
OT_KV vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
/* Ordered compares are false on NaN; ne is unordered (true on NaN). */
OT_KV mf vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
OT_KV mf vf_ne(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
OT_KV mf vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
OT_KV mf vf_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
OT_KV mf vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
OT_KV mf vf_ge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
OT_KV mf vf_unord(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
OT_KV mf mf_or(mf a, mf b) { return _mm256_or_ps(a, b); }
OT_KV int mf_any(mf m) { return _mm256_movemask_ps(m) != 0; }
/* m ? a : b, lane by lane. */
OT_KV vf vf_sel(mf m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
/* -|a|, and "a's sign bit set ? x : y" (blendv reads the sign bit itself). */
OT_KV vf vf_nabs(vf a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
OT_KV vf vf_signsel(vf a, vf x, vf y) { return _mm256_blendv_ps(y, x, a); }
/* m ? 1 : 0. */
OT_KV vf vf_one_if(mf m) { return _mm256_and_ps(m, _mm256_set1_ps(1.0f)); }
OT_KV vf vf_cvt_i32(vi a) { return _mm256_cvtepi32_ps(a); }
/* a with x's sign bit set where x has it (a's own sign bit clear). */
OT_KV vf vf_orsign(vf a, vf x) { return _mm256_or_ps(a, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); }
/* 2^k where t = 1.5 * 2^23 + k (|k| < 2^22, k in t's low mantissa bits):
 * t's bits shifted into the exponent field (the rest of t's shifts out),
 * plus 1.0's bits. f32_tanh_u10's scaling, exact, with no conversion. */
OT_KV vf vf_pow2_magic(vf t)
{
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23),
                                                _mm256_set1_epi32(0x3F800000)));
}

/* ---- f64 ---- */
OT_KV vd vd_loadu(const double *p) { return _mm256_loadu_pd(p); }
OT_KV void vd_storeu(double *p, vd x) { _mm256_storeu_pd(p, x); }
OT_KV vd vd_set1(double x) { return _mm256_set1_pd(x); }
OT_KV vd vd_add(vd a, vd b) { return OT_KPIN2("vaddpd", a, b); }
OT_KV vd vd_sub(vd a, vd b) { return _mm256_sub_pd(a, b); }
OT_KV vd vd_mul(vd a, vd b) { return OT_KPIN2("vmulpd", a, b); }
OT_KV vd vd_div(vd a, vd b) { return _mm256_div_pd(a, b); }
OT_KV vd vd_sqrt(vd a) { return _mm256_sqrt_pd(a); }
OT_KV vd vd_fma(vd a, vd b, vd c) { return OT_KPIN3("vfmadd231pd", a, b, c); }
OT_KV vd vd_neg(vd a) { return _mm256_xor_pd(a, _mm256_set1_pd(-0.0)); }
OT_KV vd vd_abs(vd a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
OT_KV vd vd_rint(vd a) { return _mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
OT_KV vd vd_max(vd a, vd b) { return _mm256_max_pd(a, b); }
OT_KV vd vd_min(vd a, vd b) { return _mm256_min_pd(a, b); }
OT_KV md vd_eq(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
OT_KV md vd_ne(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_NEQ_UQ); }
OT_KV md vd_lt(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
OT_KV md vd_le(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_LE_OQ); }
OT_KV md vd_gt(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
OT_KV md vd_ge(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
OT_KV md vd_unord(vd a, vd b) { return _mm256_cmp_pd(a, b, _CMP_UNORD_Q); }
OT_KV md md_or(md a, md b) { return _mm256_or_pd(a, b); }
OT_KV int md_any(md m) { return _mm256_movemask_pd(m) != 0; }
OT_KV vd vd_sel(md m, vd a, vd b) { return _mm256_blendv_pd(b, a, m); }
OT_KV vd vd_nabs(vd a) { return _mm256_or_pd(a, _mm256_set1_pd(-0.0)); }
OT_KV vd vd_signsel(vd a, vd x, vd y) { return _mm256_blendv_pd(y, x, a); }
OT_KV vd vd_one_if(md m) { return _mm256_and_pd(m, _mm256_set1_pd(1.0)); }
/* VD_N floats or int32 widened to doubles, and back (rounding to nearest;
 * the i32 store truncates and expects values already in range). */
OT_KV vd vd_load_f32(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
OT_KV void vd_store_f32(float *p, vd x) { _mm_storeu_ps(p, _mm256_cvtpd_ps(x)); }
OT_KV vd vd_load_i32(const int32_t *p) { return _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)p)); }
OT_KV void vd_store_i32(int32_t *p, vd x) { _mm_storeu_si128((__m128i *)p, _mm256_cvttpd_epi32(x)); }

/* ---- i32 (wrapping) ---- */
OT_KV vi vi_loadu(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
OT_KV void vi_storeu(int32_t *p, vi x) { _mm256_storeu_si256((__m256i *)p, x); }
OT_KV vi vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
OT_KV vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
OT_KV vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
OT_KV vi vi_mul(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
OT_KV vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
OT_KV vi vi_shr1(vi a) { return _mm256_srli_epi32(a, 1); }
OT_KV mi vi_eq(vi a, vi b) { return _mm256_cmpeq_epi32(a, b); }
OT_KV mi vi_gt(vi a, vi b) { return _mm256_cmpgt_epi32(a, b); }
OT_KV int mi_any(mi m) { return _mm256_movemask_epi8(m) != 0; }
OT_KV vi vi_sel(mi m, vi a, vi b) { return _mm256_blendv_epi8(b, a, m); }
