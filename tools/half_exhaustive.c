/*
 * half_exhaustive.c - `make half-exhaustive`: every vector table of f16/bf16
 * conversions (src/core/half_simd.c) against the scalar definition
 * (half.c) on all 2^32 f32 inputs narrowed and all 2^16 inputs widened.
 * On an x86 CPU with F16C the AVX2 table narrows f16 by the vcvtps2ph
 * instruction, and with AVX512_BF16 the last table narrows bf16 by
 * vcvtneps2bf16, so the scalar definition is checked against the hardware
 * too. Minutes; not part of make test (tests/test_half.c samples chunks).
 * Prints one line per table and dtype; exits 1 on any difference.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = 1 << 16 };

/* Narrowing of every f32 pattern by table f (bf16 when bf), against the
 * scalar function; returns the number of differences (the first few shown). */
static uint64_t narrow_all(const ot__half_fns *f, bool bf, float *src, uint16_t *dst)
{
    uint64_t bad = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t x = (uint32_t)(base + i);
            memcpy(&src[i], &x, 4);
        }
        (bf ? f->to_bf16 : f->to_f16)(src, dst, CHUNK);
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint16_t want = bf ? ot__f32_to_bf16(src[i]) : ot__f32_to_f16(src[i]);
            if (dst[i] != want && bad++ < 5)
                printf("  %s %s: %08llx gives %04x, the definition %04x\n", f->name,
                       bf ? "bf16" : "f16", (unsigned long long)(base + i), dst[i], want);
        }
    }
    return bad;
}

static uint64_t widen_all(const ot__half_fns *f, bool bf, uint16_t *src, float *dst)
{
    uint64_t bad = 0;
    for (uint32_t i = 0; i < 65536; i++) src[i] = (uint16_t)i;
    (bf ? f->from_bf16 : f->from_f16)(src, dst, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float want = bf ? ot__bf16_to_f32(src[i]) : ot__f16_to_f32(src[i]);
        if (memcmp(&want, &dst[i], 4) != 0 && bad++ < 5)
            printf("  %s widen %s: %04x differs\n", f->name, bf ? "bf16" : "f16", i);
    }
    return bad;
}

int main(void)
{
    float *fbuf = malloc(sizeof *fbuf * CHUNK);
    uint16_t *hbuf = malloc(sizeof *hbuf * CHUNK);
    if (!fbuf || !hbuf) return 2;
    int fails = 0, tables = 0;
    for (int t = 1; t < 8; t++) {
        const ot__half_fns *f = ot__half_table(t);
        if (!f) continue;
        tables++;
        for (int bf = 0; bf < 2; bf++) {
            uint64_t n = narrow_all(f, bf, fbuf, hbuf), w = widen_all(f, bf, hbuf, fbuf);
            printf("%-10s %-4s narrow 2^32: %llu differ; widen 2^16: %llu differ\n", f->name,
                   bf ? "bf16" : "f16", (unsigned long long)n, (unsigned long long)w);
            fails += n || w;
        }
    }
    printf("%d vector tables on this CPU checked: %s\n", tables, fails ? "FAILED" : "all agree");
    free(fbuf);
    free(hbuf);
    return fails ? 1 : 0;
}
