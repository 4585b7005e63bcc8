/*
 * half.c - f16 and bf16 conversions as bit manipulation: the definition of
 * rounding every vector version (half_simd.c) is checked against, the
 * scalar table, and the choice of table at run time.
 */
#include "half.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "optree.h"

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Rounds m >> shift to nearest, ties to even (shift 1..31). */
static uint32_t shift_rne(uint32_t m, int shift)
{
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t ot__f32_to_f16(float f)
{
    uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u)   /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)  /* 65520 and up (the tie above 65504) round to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u)  /* normal in f16: rebias the exponent by 127 - 15 */
        return (uint16_t)(sign | (shift_rne(ax - 0x38000000u, 13)));
    if (ax <= 0x33000000u)  /* up to 2^-25, the tie with 0, which is even */
        return sign;
    /* subnormal in f16: units of 2^-24 from the significand 1.m * 2^(e-127) */
    int e = (int)(ax >> 23);
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | shift_rne(m, 126 - e));
}

float ot__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    if (e == 0) {   /* m * 2^-24, exact in f32 */
        float v = (float)m * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t ot__f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    /* ties to even; a carry into the exponent is the right rounding, up to
     * inf, which stays inf */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

float ot__bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* d rounded to f32 toward an odd last bit when inexact: rounding that once
 * more to 8 or 11 bits gives d correctly rounded (f32 has more than 2 bits
 * beyond either). Infinities from overflow stay: both 16-bit dtypes
 * overflow below FLT_MAX. */
float ot__f32_odd(double d)
{
    float f = (float)d;
    if ((double)f == d || isinf(f) || isnan(f))
        return f;
    uint32_t x = f32_bits(f);
    if (x & 1)
        return f;
    bool away = fabs((double)f) > fabs(d);
    return bits_f32(away ? x - 1 : x + 1);
}

uint16_t ot__f64_to_f16(double d) { return ot__f32_to_f16(ot__f32_odd(d)); }
uint16_t ot__f64_to_bf16(double d) { return ot__f32_to_bf16(ot__f32_odd(d)); }

static atomic_bool seen;

bool ot__half_seen(void) { return atomic_load_explicit(&seen, memory_order_relaxed); }

void ot__half_note(int dt)
{
    if ((dt == OT_F16 || dt == OT_BF16) && !ot__half_seen())
        atomic_store_explicit(&seen, true, memory_order_relaxed);
}

/* ---- the scalar table ----------------------------------------------------- */

static void sc_to_f16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ot__f32_to_f16(src[i]);
}
static void sc_from_f16(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ot__f16_to_f32(src[i]);
}
static void sc_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ot__f32_to_bf16(src[i]);
}
static void sc_from_bf16(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ot__bf16_to_f32(src[i]);
}

static const ot__half_fns scalar_fns = {"scalar", sc_to_f16, sc_from_f16, sc_to_bf16,
                                        sc_from_bf16};

/* half_simd.c: table i >= 1 where this CPU has it. */
const ot__half_fns *ot__half_simd(int i);

const ot__half_fns *ot__half_table(int i)
{
    return i == 0 ? &scalar_fns : i > 0 ? ot__half_simd(i) : NULL;
}

const ot__half_fns *ot__half_best(void)
{
    static _Atomic(const ot__half_fns *) best;
    const ot__half_fns *b = atomic_load_explicit(&best, memory_order_acquire);
    if (b)
        return b;
    b = &scalar_fns;
    for (int i = 1; i < 8; i++)   /* the last table this CPU has; any race writes the same */
        if (ot__half_simd(i))
            b = ot__half_simd(i);
    atomic_store_explicit(&best, b, memory_order_release);
    return b;
}

void ot__half_narrow(int dt, const float *src, uint16_t *dst, size_t n)
{
    const ot__half_fns *t = ot__half_best();
    (dt == OT_BF16 ? t->to_bf16 : t->to_f16)(src, dst, n);
}

void ot__half_widen(int dt, const uint16_t *src, float *dst, size_t n)
{
    const ot__half_fns *t = ot__half_best();
    (dt == OT_BF16 ? t->from_bf16 : t->from_f16)(src, dst, n);
}
