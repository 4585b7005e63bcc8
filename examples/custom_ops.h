/*
 * custom_ops.h - the ops examples/custom_op.c registers (ot_op_register),
 * which tests/test_custom_op.c tests too: GELU with scalar, AVX2 and
 * AVX-512 functions, a Huber cost with the same, softsign with scalar
 * functions only, and their gradient builders. Header-only (static inline,
 * so a program that uses some of them does not warn about the rest).
 *
 * GELU in its tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x +
 * 0.044715 x^3), is computed as x / (1 + exp(-2u)), the same function
 * without tanh. The vector functions carry their own exp (range reduction
 * by ln 2 and a Taylor polynomial, +inf past the overflow threshold as
 * libm's), as a user's would; they are lane-wise, as a registered op's
 * vector function must be. The fuzzer draws these ops too, against the f64
 * scalar functions on ref, so they agree on NaN, +-inf and overflow.
 */
#ifndef OT_CUSTOM_OPS_H
#define OT_CUSTOM_OPS_H

#include "optree.h"

#include <math.h>

#define GELU_C 0.7978845608028654   /* sqrt(2/pi) */
#define GELU_A 0.044715

/* GELU(-inf) is its limit, -0 (the quotient would be -inf/inf). */
static inline float gelu_f32(float x)
{
    float u = (float)GELU_C * (x + (float)GELU_A * x * x * x);
    return x == -INFINITY ? -0.0f : x / (1.0f + expf(-2.0f * u));
}

static inline double gelu_f64(double x)
{
    double u = GELU_C * (x + GELU_A * x * x * x);
    return x == -INFINITY ? -0.0 : x / (1.0 + exp(-2.0 * u));
}

/* d/dx of x s(2u), s the logistic function: s + x s (1 - s) 2u'. */
static inline ot_node *gelu_grad(ot_node *x, ot_node *y, ot_node *out, ot_node *g, int which, void *user)
{
    (void)y, (void)out, (void)which, (void)user;
    ot_node *x2 = ot_mul(x, x);
    ot_node *s = ot_sig(ot_mul(2 * GELU_C, ot_add(x, ot_mul(GELU_A, ot_mul(x2, x)))));
    ot_node *du = ot_mul(2 * GELU_C, ot_add(1.0, ot_mul(3 * GELU_A, x2)));
    return ot_mul(g, ot_add(s, ot_mul(ot_mul(x, ot_mul(s, ot_sub(1.0, s))), du)));
}

/* Huber's cost of prediction p against target t (delta 1): d^2 / 2 where
 * |d| <= 1, |d| - 1/2 beyond, d = p - t. */
static inline float huber_f32(float p, float t)
{
    float d = p - t, a = fabsf(d);
    return a <= 1.0f ? 0.5f * d * d : a - 0.5f;
}

static inline double huber_f64(double p, double t)
{
    double d = p - t, a = fabs(d);
    return a <= 1.0 ? 0.5 * d * d : a - 0.5;
}

/* d/dp = clip(d, -1, 1), d/dt = -d/dp. */
static inline ot_node *huber_grad(ot_node *p, ot_node *t, ot_node *out, ot_node *g, int which,
                           void *user)
{
    (void)out, (void)user;
    ot_node *c = ot_mul(g, ot_minimum(ot_maximum(ot_sub(p, t), -1.0), 1.0));
    return which == 0 ? c : ot_neg(c);
}

/* x / (1 + |x|): scalar functions only, so it runs on the tile interpreter. */
static inline float softsign_f32(float x) { return x / (1.0f + fabsf(x)); }
static inline double softsign_f64(double x) { return x / (1.0 + fabs(x)); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The vector functions, once per width: P is the intrinsics' prefix, V
 * the vector type, VI its integer type, T and S the element's names; the
 * names that differ between the widths are given below as macros. */
#define CUSTOM_EXP_F32(P, V, VI)                                                   \
    CUSTOM_TARGET                                                                  \
    static inline V P##exp_f32(V x)                                                \
    {                                                                              \
        V x0 = x;                                                                  \
        x = P##min_ps(P##max_ps(x, P##set1_ps(-104.0f)), P##set1_ps(88.7228391f)); \
        V k = P##round_ps_(P##mul_ps(x, P##set1_ps(1.44269504f)));                 \
        V r = P##sub_ps(P##sub_ps(x, P##mul_ps(k, P##set1_ps(0.693145751953125f))), \
                        P##mul_ps(k, P##set1_ps(1.428606765330187e-06f)));         \
        V p = P##set1_ps(1.0f / 720);                                              \
        static const float c[] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}; \
        for (int i = 0; i < 6; i++) p = P##add_ps(P##mul_ps(p, r), P##set1_ps(c[i])); \
        /* 2^k as 2^h 2^(k - h), h = k/2 rounded: k runs from -150 to 128, \
         * past what one exponent field holds (a clamp at 88 gave exp(88) \
         * for every x up to ln FLT_MAX, half the true value). */             \
        V kh = P##round_ps_(P##mul_ps(k, P##set1_ps(0.5f)));                       \
        VI e1 = P##slli_epi32(P##add_epi32(P##cvtps_epi32(kh), P##set1_epi32(127)), 23); \
        VI e2 = P##slli_epi32(                                                     \
            P##add_epi32(P##cvtps_epi32(P##sub_ps(k, kh)), P##set1_epi32(127)), 23);   \
        V y = P##mul_ps(P##mul_ps(p, P##castsi_ps(e1)), P##castsi_ps(e2));         \
        return P##blend_ps_(y, P##set1_ps(INFINITY),                               \
                            P##gt_ps_(x0, P##set1_ps(88.7228391f)));   /* ln FLT_MAX */ \
    }
#define CUSTOM_EXP_F64(P, V, VI)                                                   \
    CUSTOM_TARGET                                                                  \
    static inline V P##exp_f64(V x)                                                \
    {                                                                              \
        V x0 = x;                                                                  \
        x = P##min_pd(P##max_pd(x, P##set1_pd(-746.0)), P##set1_pd(709.782712893384)); \
        V k = P##round_pd_(P##mul_pd(x, P##set1_pd(1.4426950408889634)));          \
        V r = P##sub_pd(P##sub_pd(x, P##mul_pd(k, P##set1_pd(0.6931471803691238))), \
                        P##mul_pd(k, P##set1_pd(1.9082149292705877e-10)));         \
        V p = P##set1_pd(1.0 / 479001600);                                         \
        double f = 479001600;                                                      \
        for (int i = 11; i >= 0; i--) {                                            \
            f /= i + 1;                                                            \
            p = P##add_pd(P##mul_pd(p, r), P##set1_pd(1.0 / f));                   \
        }                                                                          \
        V kh = P##round_pd_(P##mul_pd(k, P##set1_pd(0.5)));   /* as the f32 one */ \
        VI e1 = P##slli_epi64(P##add_epi64(P##cvtpd_epi64_(kh), P##set1_epi64x(1023)), 52); \
        VI e2 = P##slli_epi64(                                                     \
            P##add_epi64(P##cvtpd_epi64_(P##sub_pd(k, kh)), P##set1_epi64x(1023)), 52); \
        V y = P##mul_pd(P##mul_pd(p, P##castsi_pd(e1)), P##castsi_pd(e2));         \
        return P##blend_pd_(y, P##set1_pd(INFINITY),                               \
                            P##gt_pd_(x0, P##set1_pd(709.782712893384)));   /* ln DBL_MAX */ \
    }

#define CUSTOM_GELU(P, V, T, S)                                                    \
    CUSTOM_TARGET                                                                  \
    static inline V P##gelu_##T(V x)                                               \
    {                                                                              \
        V u = P##mul_##S(P##set1_##S(GELU_C),                                      \
                         P##add_##S(x, P##mul_##S(P##set1_##S(GELU_A),             \
                                                  P##mul_##S(x, P##mul_##S(x, x))))); \
        V e = P##exp_##T(P##mul_##S(P##set1_##S(-2.0), u));                        \
        V q = P##div_##S(x, P##add_##S(P##set1_##S(1.0), e));                      \
        return P##blend_##S##_(q, P##set1_##S(-0.0), P##eq_##S##_(x, P##set1_##S(-INFINITY))); \
    }
#define CUSTOM_HUBER(P, V, T, S)                                                \
    CUSTOM_TARGET                                                                  \
    static inline V P##huber_##T(V p, V t)                                         \
    {                                                                              \
        V d = P##sub_##S(p, t), a = P##andnot_##S##_(P##set1_##S(-0.0), d);        \
        V q = P##mul_##S(P##set1_##S(0.5), P##mul_##S(d, d));                      \
        return P##blend_##S##_(P##sub_##S(a, P##set1_##S(0.5)), q,                 \
                               P##le_##S##_(a, P##set1_##S(1.0)));                 \
    }

/* AVX2: the pieces that differ from AVX-512's names. */
#define _mm256_round_ps_(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define _mm256_round_pd_(x) _mm256_round_pd((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define _mm256_cvtpd_epi64_(k) \
    _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k))
#define _mm256_castsi_ps _mm256_castsi256_ps
#define _mm256_castsi_pd _mm256_castsi256_pd
#define _mm256_andnot_ps_ _mm256_andnot_ps
#define _mm256_andnot_pd_ _mm256_andnot_pd
#define _mm256_blend_ps_(a, b, m) _mm256_blendv_ps((a), (b), (m))
#define _mm256_blend_pd_(a, b, m) _mm256_blendv_pd((a), (b), (m))
#define _mm256_le_ps_(a, b) _mm256_cmp_ps((a), (b), _CMP_LE_OQ)
#define _mm256_le_pd_(a, b) _mm256_cmp_pd((a), (b), _CMP_LE_OQ)
#define _mm256_gt_ps_(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define _mm256_gt_pd_(a, b) _mm256_cmp_pd((a), (b), _CMP_GT_OQ)
#define _mm256_eq_ps_(a, b) _mm256_cmp_ps((a), (b), _CMP_EQ_OQ)
#define _mm256_eq_pd_(a, b) _mm256_cmp_pd((a), (b), _CMP_EQ_OQ)

/* The ISA as a function attribute, which gcc and clang both honour (clang
 * ignores #pragma GCC target). */
#define CUSTOM_TARGET __attribute__((target("avx2,fma")))
CUSTOM_EXP_F32(_mm256_, __m256, __m256i)
CUSTOM_EXP_F64(_mm256_, __m256d, __m256i)
CUSTOM_GELU(_mm256_, __m256, f32, ps)
CUSTOM_GELU(_mm256_, __m256d, f64, pd)
CUSTOM_HUBER(_mm256_, __m256, f32, ps)
CUSTOM_HUBER(_mm256_, __m256d, f64, pd)

/* AVX-512: masks instead of blends. */
#define _mm512_round_ps_(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define _mm512_round_pd_(x) _mm512_roundscale_pd((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define _mm512_cvtpd_epi64_(k) _mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(k))
#define _mm512_andnot_ps_(a, b) \
    _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define _mm512_andnot_pd_(a, b) \
    _mm512_castsi512_pd(_mm512_andnot_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)))
#define _mm512_blend_ps_(a, b, m) _mm512_mask_blend_ps((m), (a), (b))
#define _mm512_blend_pd_(a, b, m) _mm512_mask_blend_pd((m), (a), (b))
#define _mm512_le_ps_(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LE_OQ)
#define _mm512_le_pd_(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_LE_OQ)
#define _mm512_gt_ps_(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ)
#define _mm512_gt_pd_(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_GT_OQ)
#define _mm512_eq_ps_(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_EQ_OQ)
#define _mm512_eq_pd_(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_EQ_OQ)
#define _mm512_set1_epi64x _mm512_set1_epi64
#define _mm512_castsi_ps _mm512_castsi512_ps
#define _mm512_castsi_pd _mm512_castsi512_pd

#undef CUSTOM_TARGET
#define CUSTOM_TARGET __attribute__((target("avx512f")))
CUSTOM_EXP_F32(_mm512_, __m512, __m512i)
CUSTOM_EXP_F64(_mm512_, __m512d, __m512i)
CUSTOM_GELU(_mm512_, __m512, f32, ps)
CUSTOM_GELU(_mm512_, __m512d, f64, pd)
CUSTOM_HUBER(_mm512_, __m512, f32, ps)
CUSTOM_HUBER(_mm512_, __m512d, f64, pd)
#undef CUSTOM_TARGET
#define CUSTOM_VFN(f) ((ot_vfn)(f))
#else
#define CUSTOM_VFN(f) NULL
#endif

/* The definitions, ready for ot_op_register. */
static inline ot_op_def gelu_def(void)
{
    return (ot_op_def){.name = "gelu", .arity = 1, .f32 = gelu_f32, .f64 = gelu_f64,
                       .avx2_f32 = CUSTOM_VFN(_mm256_gelu_f32),
                       .avx2_f64 = CUSTOM_VFN(_mm256_gelu_f64),
                       .avx512_f32 = CUSTOM_VFN(_mm512_gelu_f32),
                       .avx512_f64 = CUSTOM_VFN(_mm512_gelu_f64), .grad = gelu_grad};
}

static inline ot_op_def huber_def(void)
{
    return (ot_op_def){.name = "huber", .arity = 2, .f32_xy = huber_f32, .f64_xy = huber_f64,
                       .avx2_f32 = CUSTOM_VFN(_mm256_huber_f32),
                       .avx2_f64 = CUSTOM_VFN(_mm256_huber_f64),
                       .avx512_f32 = CUSTOM_VFN(_mm512_huber_f32),
                       .avx512_f64 = CUSTOM_VFN(_mm512_huber_f64), .grad = huber_grad};
}

static inline ot_op_def softsign_def(void)
{
    return (ot_op_def){.name = "softsign", .arity = 1, .f32 = softsign_f32, .f64 = softsign_f64};
}

#endif /* OT_CUSTOM_OPS_H */
