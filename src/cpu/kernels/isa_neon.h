/*
 * isa_neon.h - the vector vocabulary of tile.inc for ARMv8 Advanced SIMD
 * (NEON), the AArch64 baseline: 4 floats, 2 doubles or 4 int32 per 128-bit
 * register; masks are full-width lane masks (all ones or all zeros), as
 * NEON's compares produce. FMA is vfmaq (one rounding), transcendentals are
 * SLEEF's advsimd functions. Included only by k_neon.c, built with the
 * baseline flags (NEON needs none on AArch64).
 */
#include <arm_neon.h>
#include <sleef.h>

#define OT_KISA neon
#define OT_KW_F 4
#define OT_KW_D 2
#define OT_KHAS_FMA 1
#define VF_N 4
#define VD_N 2

typedef float32x4_t vf;
typedef float64x2_t vd;
typedef int32x4_t vi;
typedef uint32x4_t mf;
typedef uint64x2_t md;
typedef uint32x4_t mi;

/* SLEEF names: SF(exp, u10) is Sleef_expf4_u10advsimd. */
#define SF(f, acc) Sleef_##f##f4_##acc##advsimd
#define SD(f, acc) Sleef_##f##d2_##acc##advsimd

#define OT_KV static inline __attribute__((always_inline))

/* ---- f32 ---- */
OT_KV vf vf_loadu(const float *p) { return vld1q_f32(p); }
OT_KV void vf_storeu(float *p, vf x) { vst1q_f32(p, x); }
OT_KV vf vf_set1(float x) { return vdupq_n_f32(x); }
OT_KV vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
OT_KV vf vf_sub(vf a, vf b) { return vsubq_f32(a, b); }
OT_KV vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
OT_KV vf vf_div(vf a, vf b) { return vdivq_f32(a, b); }
OT_KV vf vf_sqrt(vf a) { return vsqrtq_f32(a); }
OT_KV vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
OT_KV vf vf_neg(vf a) { return vnegq_f32(a); }
OT_KV vf vf_abs(vf a) { return vabsq_f32(a); }
/* frintn: to nearest, ties to even, as nearbyintf in the default mode. */
OT_KV vf vf_rint(vf a) { return vrndnq_f32(a); }
/* Lane max/min for reductions; NaN handling is done by the caller. */
OT_KV vf vf_max(vf a, vf b) { return vmaxq_f32(a, b); }
OT_KV vf vf_min(vf a, vf b) { return vminq_f32(a, b); }
/* Ordered compares are false on NaN; ne is unordered (true on NaN). */
OT_KV mf vf_eq(vf a, vf b) { return vceqq_f32(a, b); }
OT_KV mf vf_ne(vf a, vf b) { return vmvnq_u32(vceqq_f32(a, b)); }
OT_KV mf vf_lt(vf a, vf b) { return vcltq_f32(a, b); }
OT_KV mf vf_le(vf a, vf b) { return vcleq_f32(a, b); }
OT_KV mf vf_gt(vf a, vf b) { return vcgtq_f32(a, b); }
OT_KV mf vf_ge(vf a, vf b) { return vcgeq_f32(a, b); }
OT_KV mf vf_unord(vf a, vf b) { return vmvnq_u32(vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b))); }
OT_KV mf mf_or(mf a, mf b) { return vorrq_u32(a, b); }
OT_KV int mf_any(mf m) { return vmaxvq_u32(m) != 0; }
OT_KV vf vf_sel(mf m, vf a, vf b) { return vbslq_f32(m, a, b); }
/* -|a|, and "a's sign bit set ? x : y" (the sign bit spread over the lane
 * by an arithmetic shift), as the scalar table's signbit. */
OT_KV vf vf_nabs(vf a) { return vnegq_f32(vabsq_f32(a)); }
OT_KV vf vf_signsel(vf a, vf x, vf y)
{
    return vbslq_f32(vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_f32(a), 31)), x, y);
}
OT_KV vf vf_one_if(mf m) { return vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(vdupq_n_f32(1.0f)))); }
OT_KV vf vf_cvt_i32(vi a) { return vcvtq_f32_s32(a); }
/* a with x's sign bit set where x has it (a's own sign bit clear). */
OT_KV vf vf_orsign(vf a, vf x)
{
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u))));
}
/* 2^k where t = 1.5 * 2^23 + k (|k| < 2^22, k in t's low mantissa bits):
 * t's bits shifted into the exponent field (the rest of t's shifts out),
 * plus 1.0's bits. f32_tanh_u10's scaling, exact, with no conversion. */
OT_KV vf vf_pow2_magic(vf t)
{
    return vreinterpretq_f32_u32(vaddq_u32(vshlq_n_u32(vreinterpretq_u32_f32(t), 23), vdupq_n_u32(0x3F800000)));
}

/* ---- f64 ---- */
OT_KV md md_not(md m) { return vreinterpretq_u64_u32(vmvnq_u32(vreinterpretq_u32_u64(m))); }
OT_KV vd vd_loadu(const double *p) { return vld1q_f64(p); }
OT_KV void vd_storeu(double *p, vd x) { vst1q_f64(p, x); }
OT_KV vd vd_set1(double x) { return vdupq_n_f64(x); }
OT_KV vd vd_add(vd a, vd b) { return vaddq_f64(a, b); }
OT_KV vd vd_sub(vd a, vd b) { return vsubq_f64(a, b); }
OT_KV vd vd_mul(vd a, vd b) { return vmulq_f64(a, b); }
OT_KV vd vd_div(vd a, vd b) { return vdivq_f64(a, b); }
OT_KV vd vd_sqrt(vd a) { return vsqrtq_f64(a); }
OT_KV vd vd_fma(vd a, vd b, vd c) { return vfmaq_f64(c, a, b); }
OT_KV vd vd_neg(vd a) { return vnegq_f64(a); }
OT_KV vd vd_abs(vd a) { return vabsq_f64(a); }
OT_KV vd vd_rint(vd a) { return vrndnq_f64(a); }
OT_KV vd vd_max(vd a, vd b) { return vmaxq_f64(a, b); }
OT_KV vd vd_min(vd a, vd b) { return vminq_f64(a, b); }
OT_KV md vd_eq(vd a, vd b) { return vceqq_f64(a, b); }
OT_KV md vd_ne(vd a, vd b) { return md_not(vceqq_f64(a, b)); }
OT_KV md vd_lt(vd a, vd b) { return vcltq_f64(a, b); }
OT_KV md vd_le(vd a, vd b) { return vcleq_f64(a, b); }
OT_KV md vd_gt(vd a, vd b) { return vcgtq_f64(a, b); }
OT_KV md vd_ge(vd a, vd b) { return vcgeq_f64(a, b); }
OT_KV md vd_unord(vd a, vd b) { return md_not(vandq_u64(vceqq_f64(a, a), vceqq_f64(b, b))); }
OT_KV md md_or(md a, md b) { return vorrq_u64(a, b); }
OT_KV int md_any(md m) { return vmaxvq_u32(vreinterpretq_u32_u64(m)) != 0; }
OT_KV vd vd_sel(md m, vd a, vd b) { return vbslq_f64(m, a, b); }
OT_KV vd vd_nabs(vd a) { return vnegq_f64(vabsq_f64(a)); }
OT_KV vd vd_signsel(vd a, vd x, vd y)
{
    return vbslq_f64(vreinterpretq_u64_s64(vshrq_n_s64(vreinterpretq_s64_f64(a), 63)), x, y);
}
OT_KV vd vd_one_if(md m) { return vreinterpretq_f64_u64(vandq_u64(m, vreinterpretq_u64_f64(vdupq_n_f64(1.0)))); }
/* Two floats or int32 (8 bytes, any alignment) widened, and back; the
 * narrowing rounds to nearest, the int conversion truncates (its input is
 * already clamped to the int32 range by tile.inc). */
OT_KV vd vd_load_f32(const float *p) { return vcvt_f64_f32(vld1_f32(p)); }
OT_KV void vd_store_f32(float *p, vd x) { vst1_f32(p, vcvt_f32_f64(x)); }
OT_KV vd vd_load_i32(const int32_t *p) { return vcvtq_f64_s64(vmovl_s32(vld1_s32(p))); }
OT_KV void vd_store_i32(int32_t *p, vd x) { vst1_s32(p, vmovn_s64(vcvtq_s64_f64(x))); }

/* ---- i32 (wrapping: NEON's integer lanes wrap) ---- */
OT_KV vi vi_loadu(const int32_t *p) { return vld1q_s32(p); }
OT_KV void vi_storeu(int32_t *p, vi x) { vst1q_s32(p, x); }
OT_KV vi vi_set1(int32_t x) { return vdupq_n_s32(x); }
OT_KV vi vi_add(vi a, vi b) { return vaddq_s32(a, b); }
OT_KV vi vi_sub(vi a, vi b) { return vsubq_s32(a, b); }
OT_KV vi vi_mul(vi a, vi b) { return vmulq_s32(a, b); }
OT_KV vi vi_and(vi a, vi b) { return vandq_s32(a, b); }
OT_KV vi vi_shr1(vi a) { return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(a), 1)); }
OT_KV mi vi_eq(vi a, vi b) { return vceqq_s32(a, b); }
OT_KV mi vi_gt(vi a, vi b) { return vcgtq_s32(a, b); }
OT_KV int mi_any(mi m) { return vmaxvq_u32(m) != 0; }
OT_KV vi vi_sel(mi m, vi a, vi b) { return vbslq_s32(m, a, b); }
