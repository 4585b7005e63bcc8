/*
 * half_sr.c - stochastic rounding into f16 and bf16 (issue 36, after
 * neon's backend `stochastic_round`): a value rounds up to the next
 * representable one with probability equal to the fraction of the gap it
 * has covered, so the rounding is unbiased on average. The random bits of
 * element i are a hash of (key, i) - counter-based, no generator state -
 * so the bits do not depend on the order elements are written in or on
 * how many threads write them. Also the rounding in force on the calling
 * thread, which the front sets around one assignment.
 *
 * The rounding is done on the bit pattern of the magnitude (the usual
 * form: add random bits below the kept ones, then truncate), so NaN stays
 * NaN (as round to nearest makes it), infinities and values that are
 * exact stay, and a finite value past the largest finite rounds to
 * infinity with the probability of its distance beyond the largest finite
 * over one unit (as if infinity were the next value).
 */
#include "half.h"

#include <string.h>

#include "optree.h"

static uint32_t fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ot__sr_key(uint64_t seed, uint64_t stream)
{
    return mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ull));
}

/* Two rounds of MurmurHash3's finaliser, each a bijection of 32 bits: for
 * one key the first 2^32 indices get distinct bits. Not cryptographic; the
 * rounding needs only that the bits are uniform and independent of the
 * value rounded. */
uint32_t ot__sr_bits(uint64_t key, uint64_t i)
{
    uint32_t h = fmix32((uint32_t)i ^ (uint32_t)key);
    return fmix32(h ^ (uint32_t)(key >> 32) ^ (uint32_t)(i >> 32) * 0x9e3779b1u);
}

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

uint16_t ot__f32_to_bf16_sr(float f, uint32_t r)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) >= 0x7f800000u)   /* NaN as nearest; inf stays */
        return ot__f32_to_bf16(f);
    /* the sign bit is untouched: a carry out of the magnitude's 31 bits
     * cannot happen below 0x7f800000 + 0xffff */
    return (uint16_t)((x + (r >> 16)) >> 16);
}

uint16_t ot__f32_to_f16_sr(float f, uint32_t r)
{
    uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u || ax >= 0x47800000u)   /* NaN; 65536 and up give inf */
        return ot__f32_to_f16(f);
    if (ax >= 0x38800000u)   /* normal in f16: rebias, add 13 random bits, truncate */
        return (uint16_t)(sign | ((ax - 0x38000000u + (r >> 19)) >> 13));
    /* subnormal in f16: q units of 2^-24 and the fraction frac / 2^32 of
     * one more (the fraction's bits past 32 are dropped: a bias below
     * 2^-32 units), up when r + frac carries, as the additions above do */
    int e = (int)(ax >> 23), s = 126 - (e ? e : 1);
    uint32_t m = (ax & 0x7fffffu) | (e ? 0x800000u : 0);
    uint32_t q = s < 32 ? m >> s : 0;
    uint32_t frac = s <= 32 ? (uint32_t)((uint64_t)m << (32 - s)) : s < 56 ? m >> (s - 32) : 0;
    return (uint16_t)(sign | (q + ((uint64_t)r + frac > 0xffffffffu)));
}

/* Rounded to f32 to odd first (as the nearest rounding does), which keeps
 * 13 or more bits of the fraction past the 16-bit dtype's last. */
uint16_t ot__f64_to_half_sr(int dt, double d, uint32_t r)
{
    uint16_t h = dt == OT_BF16 ? ot__f64_to_bf16(d) : ot__f64_to_f16(d);
    float f = dt == OT_BF16 ? ot__bf16_to_f32(h) : ot__f16_to_f32(h);
    if ((double)f == d || d != d) return h;   /* exact (or NaN): no rounding */
    float o = ot__f32_odd(d);
    return dt == OT_BF16 ? ot__f32_to_bf16_sr(o, r) : ot__f32_to_f16_sr(o, r);
}

static void narrow_sr_scalar(int dt, const float *src, uint16_t *dst, size_t n, uint64_t key,
                             uint64_t first)
{
    if (dt == OT_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = ot__f32_to_bf16_sr(src[i], ot__sr_bits(key, first + i));
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = ot__f32_to_f16_sr(src[i], ot__sr_bits(key, first + i));
}

/* ---- AVX2: 8 elements at a time, the same bits as the scalar code ---------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define T_AVX2 __attribute__((target("avx2")))

T_AVX2 static __m256i v_fmix32(__m256i h)
{
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0x85ebca6bu));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0xc2b2ae35u));
    return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

/* ot__sr_bits of indices at..at+7, whose top 32 bits are all hi. */
T_AVX2 static __m256i v_bits(uint64_t key, uint64_t at)
{
    uint32_t lo = (uint32_t)at, hi = (uint32_t)(at >> 32);
    __m256i i = _mm256_add_epi32(_mm256_set1_epi32((int)lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i h = v_fmix32(_mm256_xor_si256(i, _mm256_set1_epi32((int)(uint32_t)key)));
    uint32_t k1 = (uint32_t)(key >> 32) ^ hi * 0x9e3779b1u;
    return v_fmix32(_mm256_xor_si256(h, _mm256_set1_epi32((int)k1)));
}

#define V1(c) _mm256_set1_epi32((int)(c))

T_AVX2 static __m256i v_bf16(__m256i x, __m256i r)
{
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, V1(0x7fffffffu)), V1(0x7f800000u));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), V1(0x40));
    __m256i s = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_srli_epi32(r, 16)), 16);
    return _mm256_blendv_epi8(s, q, nan);
}

/* f16's subnormal range: q + a carry out of r + frac (ot__f32_to_f16_sr);
 * shifts of 32 or more give 0, as the scalar code's cases do. */
T_AVX2 static __m256i v_f16_sub(__m256i ax, __m256i r)
{
    __m256i e = _mm256_srli_epi32(ax, 23), has = _mm256_cmpgt_epi32(e, _mm256_setzero_si256());
    __m256i s = _mm256_sub_epi32(V1(126), _mm256_max_epi32(e, V1(1)));
    __m256i m = _mm256_or_si256(_mm256_and_si256(ax, V1(0x7fffffu)), _mm256_and_si256(has, V1(0x800000u)));
    __m256i q = _mm256_srlv_epi32(m, s);
    __m256i frac = _mm256_or_si256(_mm256_sllv_epi32(m, _mm256_sub_epi32(V1(32), s)),
                                   _mm256_srlv_epi32(m, _mm256_sub_epi32(s, V1(32))));
    __m256i sum = _mm256_add_epi32(r, frac), b = V1(0x80000000u);
    __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(r, b), _mm256_xor_si256(sum, b));
    return _mm256_sub_epi32(q, carry);
}

T_AVX2 static __m256i v_f16(__m256i x, __m256i r)
{
    __m256i ax = _mm256_and_si256(x, V1(0x7fffffffu));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16), V1(0x8000u));
    __m256i nan = _mm256_cmpgt_epi32(ax, V1(0x7f800000u));
    __m256i big = _mm256_cmpgt_epi32(ax, V1(0x477fffffu));
    __m256i normal = _mm256_cmpgt_epi32(ax, V1(0x387fffffu));
    __m256i v = _mm256_srli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ax, V1(0x38000000u)),
                                                   _mm256_srli_epi32(r, 19)), 13);
    v = _mm256_blendv_epi8(v_f16_sub(ax, r), v, normal);
    v = _mm256_blendv_epi8(v, V1(0x7c00u), big);
    __m256i qn = _mm256_or_si256(V1(0x7e00u), _mm256_and_si256(_mm256_srli_epi32(ax, 13), V1(0x3ffu)));
    return _mm256_or_si256(sign, _mm256_blendv_epi8(v, qn, nan));
}

T_AVX2 static size_t narrow_sr_avx2(int dt, const float *src, uint16_t *dst, size_t n, uint64_t key,
                                    uint64_t first)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t at = first + i;
        if ((at >> 32) != ((at + 7) >> 32)) break;   /* the scalar code takes the rest */
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i)), r = v_bits(key, at);
        __m256i h = dt == OT_BF16 ? v_bf16(x, r) : v_f16(x, r);
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        _mm_storeu_si128((__m128i *)(dst + i), p);
    }
    return i;
}

static bool have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static size_t narrow_sr_avx2(int dt, const float *src, uint16_t *dst, size_t n, uint64_t key,
                             uint64_t first)
{
    (void)dt, (void)src, (void)dst, (void)n, (void)key, (void)first;
    return 0;
}
static bool have_avx2(void) { return false; }
#endif

void ot__half_narrow_sr_with(bool vector, int dt, const float *src, uint16_t *dst, size_t n,
                             uint64_t key, uint64_t first)
{
    size_t done = vector && have_avx2() ? narrow_sr_avx2(dt, src, dst, n, key, first) : 0;
    narrow_sr_scalar(dt, src + done, dst + done, n - done, key, first + done);
}

void ot__half_narrow_sr(int dt, const float *src, uint16_t *dst, size_t n, uint64_t key,
                        uint64_t first)
{
    ot__half_narrow_sr_with(true, dt, src, dst, n, key, first);
}

/* ---- the rounding in force on this thread ---------------------------------- */

static _Thread_local struct {
    bool on;
    uint64_t key;
} current;

bool ot__half_sr_get(uint64_t *key)
{
    if (current.on) *key = current.key;
    return current.on;
}

bool ot__half_sr_set(bool on, uint64_t key)
{
    bool was = current.on;
    current.on = on;
    current.key = key;
    return was;
}
