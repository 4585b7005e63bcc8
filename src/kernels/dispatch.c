/*
 * dispatch.c - picks the tile-kernel table for this CPU. Built with the
 * baseline flags: it only asks the CPU (through libgcc's CPUID cache) and
 * never runs a wide instruction itself.
 *
 * Default order: avx512 > avx2 > sse2 > scalar. Measured on AMD Zen 4
 * (EPYC, 2026-11-23, one thread, same process): the AVX-512 table with its
 * generated code ran W2-W4 and W7 at 0.62-0.70 of the AVX2 hand loops,
 * where the AVX2 table gave 1.08-1.20 (SLEEF's 16-lane functions do the
 * work of two 8-lane calls in far fewer instructions), and W5 at 0.92
 * against 1.20-1.24. OT_ISA=avx2 keeps the AVX2 table.
 */
#include "kernels.h"

#include <string.h>

/* What the CPU must have for each ISA, as __builtin_cpu_supports names. */
static bool cpu_runs(const char *isa)
{
#if OT_KERNELS_X86
    __builtin_cpu_init();
    if (strcmp(isa, "sse2") == 0) return __builtin_cpu_supports("sse2");
    if (strcmp(isa, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f");
#endif
    return strcmp(isa, "scalar") == 0;
}

static const ot_kernels *table_named(const char *isa)
{
    if (strcmp(isa, "scalar") == 0) return &ot__kernels_scalar;
#if OT_KERNELS_X86
    if (strcmp(isa, "sse2") == 0) return &ot__kernels_sse2;
    if (strcmp(isa, "avx2") == 0) return &ot__kernels_avx2;
    if (strcmp(isa, "avx512") == 0) return &ot__kernels_avx512;
#endif
    return NULL;
}

const ot_kernels *ot__kernels_for(const char *isa)
{
    if (!isa) return NULL;
    const ot_kernels *k = table_named(isa);
    return k && cpu_runs(isa) ? k : NULL;
}

const ot_kernels *ot__kernels_select(const char *isa, const char *isa_from)
{
    static const char *const known[] = {"scalar", "sse2", "avx2", "avx512"};
    static const char *const needs[] = {"nothing", "sse2", "avx2 and fma", "avx512f"};
    if (isa) {
        const ot_kernels *k = ot__kernels_for(isa);
        int i = 0;
        while (i < 3 && strcmp(isa, known[i]) != 0) i++;
        if (!k && !table_named(isa))
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new",
                        "%s=%s but this build has no %s kernels (not x86)", isa_from, isa, isa);
        else if (!k)
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new", "%s=%s but this CPU lacks %s",
                        isa_from, isa, needs[i]);
        return k;
    }
    static const char *const order[] = {"avx512", "avx2", "sse2", "scalar"};
    for (int i = 0; i < 4; i++) {
        const ot_kernels *k = ot__kernels_for(order[i]);
        if (k) return k;
    }
    return &ot__kernels_scalar;
}
