/*
 * test_half_tables.c - every vector table of the 16-bit conversions
 * (src/core/half_simd.c: AVX2, AVX-512, AVX-512 BF16 on x86-64, NEON on
 * AArch64) against the scalar definition (half.c) on sampled chunks. Its
 * own file, small, so that the arm64 phase's quick test program (run
 * under qemu) builds it without the rest of test_half.c.
 */
#include "test.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

static float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Every table against the scalar definition: all 2^16 widenings, and 2^18
 * narrowings from chunks spread over the f32 patterns (each chunk a run of
 * consecutive patterns, so ties, boundaries and specials are met). */
TEST(half_tables_sampled)
{
    enum { CHUNK = 1024, NCHUNK = 256 };
    float *src = malloc(sizeof *src * CHUNK), *w = malloc(sizeof *w * 65536);
    uint16_t *a = malloc(sizeof *a * 65536), *b = malloc(sizeof *b * 65536);
    for (int t = 1; ot__half_table(t) || t < 4; t++) {
        const ot__half_fns *f = ot__half_table(t);
        if (!f) continue;
        for (int dt = 0; dt < 2; dt++) {
            for (uint32_t i = 0; i < 65536; i++) a[i] = (uint16_t)i;
            (dt ? f->from_bf16 : f->from_f16)(a, w, 65536);
            for (uint32_t i = 0; i < 65536; i++) {
                float s = dt ? ot__bf16_to_f32(a[i]) : ot__f16_to_f32(a[i]);
                if (memcmp(&s, &w[i], 4) != 0) {
                    test__fail(__FILE__, __LINE__, "%s widen %s %04x", f->name,
                               dt ? "bf16" : "f16", i);
                    break;
                }
            }
            for (uint32_t c = 0; c < NCHUNK; c++) {
                uint32_t base = c * (0x100000000ull / NCHUNK) + (c * 2654435761u % 4096);
                for (uint32_t i = 0; i < CHUNK; i++) src[i] = bits_f(base + i);
                (dt ? f->to_bf16 : f->to_f16)(src, b, CHUNK - c % 7);   /* ragged tails */
                for (uint32_t i = 0; i < CHUNK - c % 7; i++) {
                    uint16_t s = dt ? ot__f32_to_bf16(src[i]) : ot__f32_to_f16(src[i]);
                    if (s != b[i]) {
                        test__fail(__FILE__, __LINE__, "%s narrow %s %08x: %04x, expected %04x",
                                   f->name, dt ? "bf16" : "f16", base + i, b[i], s);
                        break;
                    }
                }
            }
        }
    }
    free(src), free(w), free(a), free(b);
}
