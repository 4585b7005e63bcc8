/*
 * isa_scalar.h - the vector vocabulary of tile.inc with one lane: plain C
 * on float, double and int32_t, masks are ints. The portable fallback: it
 * builds on any architecture and uses SLEEF's scalar functions. Integer
 * arithmetic goes through uint32_t so that it wraps instead of overflowing.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sleef.h>

#define OT_KISA scalar
#define OT_KW_F 1
#define OT_KW_D 1
#define OT_KHAS_FMA 0
#define VF_N 1
#define VD_N 1

typedef float vf;
typedef double vd;
typedef int32_t vi;
typedef int mf;
typedef int md;
typedef int mi;

#define SF(f, acc) Sleef_##f##f_##acc
#define SD(f, acc) Sleef_##f##_##acc

#define OT_KV static inline __attribute__((always_inline))

/* ---- f32 ---- */
OT_KV vf vf_loadu(const float *p) { return *p; }
OT_KV void vf_storeu(float *p, vf x) { *p = x; }
OT_KV vf vf_set1(float x) { return x; }
OT_KV vf vf_add(vf a, vf b) { return a + b; }
OT_KV vf vf_sub(vf a, vf b) { return a - b; }
OT_KV vf vf_mul(vf a, vf b) { return a * b; }
OT_KV vf vf_div(vf a, vf b) { return a / b; }
OT_KV vf vf_sqrt(vf a) { return sqrtf(a); }
OT_KV vf vf_neg(vf a) { return -a; }
OT_KV vf vf_abs(vf a) { return fabsf(a); }
OT_KV vf vf_rint(vf a) { return nearbyintf(a); }
OT_KV vf vf_max(vf a, vf b) { return a > b ? a : b; }
OT_KV vf vf_min(vf a, vf b) { return a < b ? a : b; }
OT_KV mf vf_eq(vf a, vf b) { return a == b; }
OT_KV mf vf_ne(vf a, vf b) { return a != b; }
OT_KV mf vf_lt(vf a, vf b) { return a < b; }
OT_KV mf vf_le(vf a, vf b) { return a <= b; }
OT_KV mf vf_gt(vf a, vf b) { return a > b; }
OT_KV mf vf_ge(vf a, vf b) { return a >= b; }
OT_KV mf vf_unord(vf a, vf b) { return isnan(a) || isnan(b); }
OT_KV mf mf_or(mf a, mf b) { return a | b; }
OT_KV int mf_any(mf m) { return m; }
OT_KV vf vf_sel(mf m, vf a, vf b) { return m ? a : b; }
/* -|a|, and "a's sign bit set ? x : y". */
OT_KV vf vf_nabs(vf a) { return -fabsf(a); }
OT_KV vf vf_signsel(vf a, vf x, vf y) { return signbit(a) ? x : y; }
OT_KV vf vf_one_if(mf m) { return m ? 1.0f : 0.0f; }
OT_KV vf vf_cvt_i32(vi a) { return (float)a; }
/* a with x's sign bit set where x has it (a's own sign bit clear). */
OT_KV vf vf_orsign(vf a, vf x) { return copysignf(a, x); }
/* 2^k where t = 1.5 * 2^23 + k (|k| < 2^22, k in t's low mantissa bits):
 * t's bits shifted into the exponent field (the rest of t's shifts out),
 * plus 1.0's bits. f32_tanh_u10's scaling, exact, with no conversion. */
OT_KV vf vf_pow2_magic(vf t)
{
    uint32_t b;
    memcpy(&b, &t, sizeof b);
    b = (b << 23) + 0x3F800000u;
    memcpy(&t, &b, sizeof t);
    return t;
}

/* ---- f64 ---- */
OT_KV vd vd_loadu(const double *p) { return *p; }
OT_KV void vd_storeu(double *p, vd x) { *p = x; }
OT_KV vd vd_set1(double x) { return x; }
OT_KV vd vd_add(vd a, vd b) { return a + b; }
OT_KV vd vd_sub(vd a, vd b) { return a - b; }
OT_KV vd vd_mul(vd a, vd b) { return a * b; }
OT_KV vd vd_div(vd a, vd b) { return a / b; }
OT_KV vd vd_sqrt(vd a) { return sqrt(a); }
OT_KV vd vd_neg(vd a) { return -a; }
OT_KV vd vd_abs(vd a) { return fabs(a); }
OT_KV vd vd_rint(vd a) { return nearbyint(a); }
OT_KV vd vd_max(vd a, vd b) { return a > b ? a : b; }
OT_KV vd vd_min(vd a, vd b) { return a < b ? a : b; }
OT_KV md vd_eq(vd a, vd b) { return a == b; }
OT_KV md vd_ne(vd a, vd b) { return a != b; }
OT_KV md vd_lt(vd a, vd b) { return a < b; }
OT_KV md vd_le(vd a, vd b) { return a <= b; }
OT_KV md vd_gt(vd a, vd b) { return a > b; }
OT_KV md vd_ge(vd a, vd b) { return a >= b; }
OT_KV md vd_unord(vd a, vd b) { return isnan(a) || isnan(b); }
OT_KV md md_or(md a, md b) { return a | b; }
OT_KV int md_any(md m) { return m; }
OT_KV vd vd_sel(md m, vd a, vd b) { return m ? a : b; }
OT_KV vd vd_nabs(vd a) { return -fabs(a); }
OT_KV vd vd_signsel(vd a, vd x, vd y) { return signbit(a) ? x : y; }
OT_KV vd vd_one_if(md m) { return m ? 1.0 : 0.0; }
OT_KV vd vd_load_f32(const float *p) { return *p; }
OT_KV void vd_store_f32(float *p, vd x) { *p = (float)x; }
OT_KV vd vd_load_i32(const int32_t *p) { return *p; }
OT_KV void vd_store_i32(int32_t *p, vd x) { *p = (int32_t)x; }

/* ---- i32 (wrapping) ---- */
OT_KV vi vi_loadu(const int32_t *p) { return *p; }
OT_KV void vi_storeu(int32_t *p, vi x) { *p = x; }
OT_KV vi vi_set1(int32_t x) { return x; }
OT_KV vi vi_add(vi a, vi b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
OT_KV vi vi_sub(vi a, vi b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
OT_KV vi vi_mul(vi a, vi b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
OT_KV vi vi_and(vi a, vi b) { return a & b; }
OT_KV vi vi_shr1(vi a) { return (int32_t)((uint32_t)a >> 1); }
OT_KV mi vi_eq(vi a, vi b) { return a == b; }
OT_KV mi vi_gt(vi a, vi b) { return a > b; }
OT_KV int mi_any(mi m) { return m; }
OT_KV vi vi_sel(mi m, vi a, vi b) { return m ? a : b; }
