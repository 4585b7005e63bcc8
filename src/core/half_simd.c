/*
 * half_simd.c - the vector tables of f16/bf16 conversions (half.h): AVX2
 * with F16C, AVX-512F, and AVX-512 with the BF16 extension's
 * vcvtneps2bf16 on x86-64; NEON on AArch64 (FCVTN/FCVTL for f16, integers
 * for bf16: BFCVT is ARMv8.6 and not tested here). Each function is compiled for its own target (a function
 * attribute), so the library builds without -m flags and picks a table at
 * run time from what the CPU has. bf16 narrows by integer rounding (add
 * 0x7fff and the kept lowest bit, shift) where there is no instruction;
 * vcvtneps2bf16 flushes subnormal inputs to zero, so those lanes (rare)
 * blocks take the integer rounding (right for every lane). Every table must give the scalar
 * definition's bits (half.c): tests/test_half.c checks samples,
 * `make half-exhaustive` every input. ot__half_narrow_stream narrows a
 * piece at a time into an aligned buffer in L1 and streams that out.
 */
#include "half.h"

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define T_AVX2 __attribute__((target("avx2,f16c")))
#define T_512 __attribute__((target("avx512f,avx2,f16c")))
#define T_BF16 __attribute__((target("avx512f,avx512bf16,avx512vl,avx2,f16c")))

/* ---- AVX2 + F16C ---------------------------------------------------------- */

T_AVX2 static void a2_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = ot__f32_to_f16(src[i]);
}

T_AVX2 static void a2_from_f16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = ot__f16_to_f32(src[i]);
}

/* 8 f32 bit patterns rounded to bf16 in the low 16 bits of each lane. */
T_AVX2 static __m256i a2_bf16_lanes(__m256i x)
{
    __m256i one = _mm256_set1_epi32(1);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

T_AVX2 static void a2_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = a2_bf16_lanes(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i hi = a2_bf16_lanes(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus works per 128-bit lane: reorder the quarters after */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++) dst[i] = ot__f32_to_bf16(src[i]);
}

T_AVX2 static void a2_from_bf16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++) dst[i] = ot__bf16_to_f32(src[i]);
}

/* ---- AVX-512F --------------------------------------------------------------- */

T_512 static void a5_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = ot__f32_to_f16(src[i]);
}

T_512 static void a5_from_f16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = ot__f16_to_f32(src[i]);
}

T_512 static __m512i a5_bf16_lanes(__m512i x)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(ax, _mm512_set1_epi32(0x7f800000));
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(r, nan, q);
}

T_512 static void a5_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtepi32_epi16(a5_bf16_lanes(_mm512_loadu_si512(src + i))));
    for (; i < n; i++) dst[i] = ot__f32_to_bf16(src[i]);
}

T_512 static void a5_from_bf16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++) dst[i] = ot__bf16_to_f32(src[i]);
}

/* ---- AVX-512 BF16 ------------------------------------------------------------ */

T_BF16 static void bf_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x7fffff);
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(src + i);
        __m256i r = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
        /* a subnormal input: the instruction flushes it, the definition
         * rounds it */
        __mmask16 sub = _mm512_testn_epi32_mask(x, expo) & _mm512_test_epi32_mask(x, mant);
        if (sub)
            r = _mm512_cvtepi32_epi16(a5_bf16_lanes(x));
        _mm256_storeu_si256((__m256i *)(dst + i), r);
    }
    for (; i < n; i++) dst[i] = ot__f32_to_bf16(src[i]);
}

static const ot__half_fns avx2_fns = {"avx2", a2_to_f16, a2_from_f16, a2_to_bf16, a2_from_bf16};
static const ot__half_fns avx512_fns = {"avx512", a5_to_f16, a5_from_f16, a5_to_bf16,
                                        a5_from_bf16};
static const ot__half_fns bf16_fns = {"avx512bf16", a5_to_f16, a5_from_f16, bf_to_bf16,
                                      a5_from_bf16};

/* F16C (CPUID 1, ECX bit 29) and AVX512_BF16 (CPUID 7.1, EAX bit 5) from
 * CPUID itself: not every compiler's __builtin_cpu_supports knows them; the
 * others say too whether the OS saves the registers. */
static bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit)
{
    unsigned r[4] = {0};
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1;
}

const ot__half_fns *ot__half_simd(int i);
const ot__half_fns *ot__half_simd(int i)
{
    __builtin_cpu_init();
    bool a2 = __builtin_cpu_supports("avx2") && cpuid_bit(1, 0, 2, 29);
    bool a5 = a2 && __builtin_cpu_supports("avx512f");
    switch (i) {
    case 1: return a2 ? &avx2_fns : NULL;
    case 2: return a5 ? &avx512_fns : NULL;
    case 3:
        return a5 && __builtin_cpu_supports("avx512vl") && cpuid_bit(7, 1, 0, 5) ? &bf16_fns
                                                                                 : NULL;
    default: return NULL;
    }
}

/* Streaming stores need 16-byte-aligned addresses: the head up to dst's
 * next 64-byte line is narrowed in place, the body a piece at a time into
 * tmp (in L1) and streamed out, the ragged tail stored plainly. */
void ot__half_narrow_stream(int dt, const float *src, uint16_t *dst, size_t n)
{
    _Alignas(64) uint16_t tmp[512];
    size_t i = (size_t)(-(uintptr_t)dst & 63) / sizeof *dst;
    if (i > n) i = n;
    ot__half_narrow(dt, src, dst, i);
    while (n - i >= 8) {
        size_t k = n - i < 512 ? (n - i) & ~(size_t)7 : 512;
        ot__half_narrow(dt, src + i, tmp, k);
        for (size_t j = 0; j < k; j += 8)
            _mm_stream_si128((__m128i *)(dst + i + j), _mm_load_si128((const __m128i *)(tmp + j)));
        i += k;
    }
    ot__half_narrow(dt, src + i, dst + i, n - i);
    _mm_sfence();
}

#elif defined(__aarch64__)
#include <arm_neon.h>

/* ---- NEON (every AArch64 CPU) ---------------------------------------------- */

/* f16 by FCVTN/FCVTL: round to nearest even under the default FPCR, NaN
 * made quiet with its top payload bits, as the definition does. */
static void ne_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) dst[i] = ot__f32_to_f16(src[i]);
}

static void ne_from_f16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    for (; i < n; i++) dst[i] = ot__f16_to_f32(src[i]);
}

/* bf16 by integers: (x + 0x7fff + lowest kept bit) >> 16, a NaN quieted. */
static void ne_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(src + i));
        uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
        uint32x4_t r = vshrq_n_u32(vaddq_u32(x, vaddq_u32(vdupq_n_u32(0x7fff), lsb)), 16);
        uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
        uint32x4_t q = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40));
        vst1_u16(dst + i, vmovn_u32(vbslq_u32(nan, q, r)));
    }
    for (; i < n; i++) dst[i] = ot__f32_to_bf16(src[i]);
}

static void ne_from_bf16(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(src + i), 16)));
    for (; i < n; i++) dst[i] = ot__bf16_to_f32(src[i]);
}

static const ot__half_fns neon_fns = {"neon", ne_to_f16, ne_from_f16, ne_to_bf16, ne_from_bf16};

void ot__half_narrow_stream(int dt, const float *src, uint16_t *dst, size_t n)
{
    ot__half_narrow(dt, src, dst, n);
}

const ot__half_fns *ot__half_simd(int i);
const ot__half_fns *ot__half_simd(int i)
{
    return i == 1 ? &neon_fns : NULL;
}

#else

void ot__half_narrow_stream(int dt, const float *src, uint16_t *dst, size_t n)
{
    ot__half_narrow(dt, src, dst, n);
}

const ot__half_fns *ot__half_simd(int i);
const ot__half_fns *ot__half_simd(int i)
{
    (void)i;
    return NULL;
}

#endif
