/*
 * isa_avx512.h - the vector vocabulary of tile.inc for AVX-512F: 16 floats,
 * 8 doubles or 16 int32 per register; masks are k registers. Only
 * AVX-512F instructions are used (no DQ/BW/VL), so any AVX-512 CPU runs it.
 * Included only by k_avx512.c, built with -mavx512f -mavx2 -mfma.
 */
#include <immintrin.h>
#include <sleef.h>

#define OT_KISA avx512
#define OT_KW_F 16
#define OT_KW_D 8
#define OT_KHAS_FMA 1
#if defined(__x86_64__)
#define OT_KVFN 1        /* vector functions for src/cpu/jit/jit.c */
#endif
#define VF_N 16
#define VD_N 8

typedef __m512 vf;
typedef __m512d vd;
typedef __m512i vi;
typedef __mmask16 mf;
typedef __mmask8 md;
typedef __mmask16 mi;

#define SF(f, acc) Sleef_##f##f16_##acc##avx512f
#define SD(f, acc) Sleef_##f##d8_##acc##avx512f

#define OT_KV static inline __attribute__((always_inline))

#include "kpin.h"

/* ---- f32 ---- */
OT_KV vf vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
OT_KV void vf_storeu(float *p, vf x) { _mm512_storeu_ps(p, x); }
OT_KV vf vf_set1(float x) { return _mm512_set1_ps(x); }
OT_KV vf vf_add(vf a, vf b) { return OT_KPIN2("vaddps", a, b); }
OT_KV vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
OT_KV vf vf_mul(vf a, vf b) { return OT_KPIN2("vmulps", a, b); }
OT_KV vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
OT_KV vf vf_sqrt(vf a) { return _mm512_sqrt_ps(a); }
OT_KV vf vf_fma(vf a, vf b, vf c) { return OT_KPIN3("vfmadd231ps", a, b, c); }
/* Sign-bit flips through the integer unit: _mm512_xor_ps needs AVX-512DQ. */
OT_KV vf vf_neg(vf a)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a),
                                                _mm512_set1_epi32(INT32_MIN)));
}
OT_KV vf vf_abs(vf a) { return _mm512_abs_ps(a); }
OT_KV vf vf_rint(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
OT_KV vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
OT_KV vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
OT_KV mf vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
OT_KV mf vf_ne(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
OT_KV mf vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
OT_KV mf vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
OT_KV mf vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
OT_KV mf vf_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
OT_KV mf vf_unord(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
OT_KV mf mf_or(mf a, mf b) { return (mf)(a | b); }
OT_KV int mf_any(mf m) { return m != 0; }
OT_KV vf vf_sel(mf m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
/* -|a|, and "a's sign bit set ? x : y" (an integer compare: no DQ needed). */
OT_KV vf vf_nabs(vf a)
{
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
}
OT_KV vf vf_signsel(vf a, vf x, vf y)
{
    return _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(_mm512_castps_si512(a), _mm512_setzero_si512()), y, x);
}
OT_KV vf vf_one_if(mf m) { return _mm512_maskz_mov_ps(m, _mm512_set1_ps(1.0f)); }
OT_KV vf vf_cvt_i32(vi a) { return _mm512_cvtepi32_ps(a); }
/* a with x's sign bit set where x has it (a's own sign bit clear). */
OT_KV vf vf_orsign(vf a, vf x)
{
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a),
                                               _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
}
/* 2^k where t = 1.5 * 2^23 + k (|k| < 2^22, k in t's low mantissa bits):
 * t's bits shifted into the exponent field (the rest of t's shifts out),
 * plus 1.0's bits. f32_tanh_u10's scaling, exact, with no conversion. */
OT_KV vf vf_pow2_magic(vf t)
{
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(t), 23),
                                                _mm512_set1_epi32(0x3F800000)));
}

/* ---- f64 ---- */
OT_KV vd vd_loadu(const double *p) { return _mm512_loadu_pd(p); }
OT_KV void vd_storeu(double *p, vd x) { _mm512_storeu_pd(p, x); }
OT_KV vd vd_set1(double x) { return _mm512_set1_pd(x); }
OT_KV vd vd_add(vd a, vd b) { return OT_KPIN2("vaddpd", a, b); }
OT_KV vd vd_sub(vd a, vd b) { return _mm512_sub_pd(a, b); }
OT_KV vd vd_mul(vd a, vd b) { return OT_KPIN2("vmulpd", a, b); }
OT_KV vd vd_div(vd a, vd b) { return _mm512_div_pd(a, b); }
OT_KV vd vd_sqrt(vd a) { return _mm512_sqrt_pd(a); }
OT_KV vd vd_fma(vd a, vd b, vd c) { return OT_KPIN3("vfmadd231pd", a, b, c); }
OT_KV vd vd_neg(vd a)
{
    return _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(a),
                                                _mm512_set1_epi64(INT64_MIN)));
}
OT_KV vd vd_abs(vd a) { return _mm512_abs_pd(a); }
OT_KV vd vd_rint(vd a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
OT_KV vd vd_max(vd a, vd b) { return _mm512_max_pd(a, b); }
OT_KV vd vd_min(vd a, vd b) { return _mm512_min_pd(a, b); }
OT_KV md vd_eq(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
OT_KV md vd_ne(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_NEQ_UQ); }
OT_KV md vd_lt(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
OT_KV md vd_le(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_LE_OQ); }
OT_KV md vd_gt(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
OT_KV md vd_ge(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
OT_KV md vd_unord(vd a, vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q); }
OT_KV md md_or(md a, md b) { return (md)(a | b); }
OT_KV int md_any(md m) { return m != 0; }
OT_KV vd vd_sel(md m, vd a, vd b) { return _mm512_mask_blend_pd(m, b, a); }
OT_KV vd vd_nabs(vd a)
{
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(a), _mm512_set1_epi64(INT64_MIN)));
}
OT_KV vd vd_signsel(vd a, vd x, vd y)
{
    return _mm512_mask_blend_pd(_mm512_cmplt_epi64_mask(_mm512_castpd_si512(a), _mm512_setzero_si512()), y, x);
}
OT_KV vd vd_one_if(md m) { return _mm512_maskz_mov_pd(m, _mm512_set1_pd(1.0)); }
OT_KV vd vd_load_f32(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
OT_KV void vd_store_f32(float *p, vd x) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(x)); }
OT_KV vd vd_load_i32(const int32_t *p) { return _mm512_cvtepi32_pd(_mm256_loadu_si256((const __m256i *)p)); }
OT_KV void vd_store_i32(int32_t *p, vd x) { _mm256_storeu_si256((__m256i *)p, _mm512_cvttpd_epi32(x)); }

/* ---- i32 (wrapping) ---- */
OT_KV vi vi_loadu(const int32_t *p) { return _mm512_loadu_si512(p); }
OT_KV void vi_storeu(int32_t *p, vi x) { _mm512_storeu_si512(p, x); }
OT_KV vi vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
OT_KV vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
OT_KV vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
OT_KV vi vi_mul(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
OT_KV vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
OT_KV vi vi_shr1(vi a) { return _mm512_srli_epi32(a, 1); }
OT_KV mi vi_eq(vi a, vi b) { return _mm512_cmpeq_epi32_mask(a, b); }
OT_KV mi vi_gt(vi a, vi b) { return _mm512_cmpgt_epi32_mask(a, b); }
OT_KV int mi_any(mi m) { return m != 0; }
OT_KV vi vi_sel(mi m, vi a, vi b) { return _mm512_mask_blend_epi32(m, b, a); }
