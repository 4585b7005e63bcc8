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
 *
 * On aarch64: neon > scalar. Advanced SIMD is part of every AArch64 CPU
 * that Linux runs on, so the NEON table needs no check.
 *
 * Also checks a finished plan against the table it will run on
 * (ot__kernels_check), so that a table lacking an entry is an error and
 * never a call of NULL.
 */
#include "kernels.h"
#include "ops.h"

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
#if OT_KERNELS_ARM64
    if (strcmp(isa, "neon") == 0) return true;
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
#if OT_KERNELS_ARM64
    if (strcmp(isa, "neon") == 0) return &ot__kernels_neon;
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
    static const char *const known[] = {"scalar", "sse2", "avx2", "avx512", "neon"};
    static const char *const needs[] = {"nothing", "sse2", "avx2 and fma", "avx512f", "neon"};
    if (isa) {
        const ot_kernels *k = ot__kernels_for(isa);
        int i = 0;
        while (i < 4 && strcmp(isa, known[i]) != 0) i++;
        if (!k && !table_named(isa))
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new",
                        "%s=%s but this build has no %s kernels (not %s)", isa_from, isa, isa,
                        i == 4 ? "aarch64" : "x86");
        else if (!k)
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new", "%s=%s but this CPU lacks %s",
                        isa_from, isa, needs[i]);
        return k;
    }
    static const char *const order[] = {"avx512", "avx2", "sse2", "neon", "scalar"};
    for (int i = 0; i < 5; i++) {
        const ot_kernels *k = ot__kernels_for(order[i]);
        if (k) return k;
    }
    return &ot__kernels_scalar;
}

/* ---- the plan against the table -------------------------------------------- */

static const char *const kd_name[OT_KD_COUNT] = {"f32", "f64", "i32"};

const ot_custom *ot__custom_insn(const ot_insn *in)
{
    bool un = in->code == OT_I_UNARY && in->op == OT_OP_CUSTOM1;
    return un || (in->code == OT_I_BINARY && in->op == OT_OP_CUSTOM2) ? ot__custom(in->arg) : NULL;
}

/* Whether kt has the entry insn runs on; *what names it for the message. */
static bool has_entry(const ot_kernels *kt, int acc, const ot_insn *in, const char **what)
{
    bool float_kd = in->kd < 2;
    const ot_custom *u = ot__custom_insn(in);
    if (u) {
        *what = u->name;
        return float_kd && ot__custom_has(u, in->kd);
    }
    switch (in->code) {
    case OT_I_UNARY:
        *what = ot_op_name((ot_op)in->op);
        return *what && in->kd < OT_KD_COUNT && kt->unary[acc][in->op][in->kd];
    case OT_I_BINARY:
        *what = ot_op_name((ot_op)in->op);
        if (!*what || in->kd >= OT_KD_COUNT) return false;
        /* Every form, since which one runs depends on the tile. */
        for (int f = 0; f < 3; f++)
            if (!kt->binary[in->op][in->kd][f]) return false;
        return true;
    case OT_I_FMA:
        *what = in->op == OT_OP_SUB ? "fnma" : "fma";
        for (int f = 0; float_kd && f < 7; f++)
            if (!(in->op == OT_OP_SUB ? kt->fnma : kt->fma)[in->kd][f]) return false;
        return float_kd;
    case OT_I_CAST:
        *what = "cast";
        return in->kd < OT_KD_COUNT && in->kd_from < OT_KD_COUNT && kt->cast[in->kd_from][in->kd];
    default:
        return true;   /* loads and parameters need no kernel */
    }
}

int ot__kernels_check(const ot_plan *p, const ot_kernels *kt, int acc)
{
    for (int i = 0; i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        for (int j = 0; j < k->ninsn; j++) {
            const ot_insn *in = &k->insns[j];
            const char *what = NULL;
            if (has_entry(kt, acc, in, &what)) continue;
            if (ot__custom_insn(in))
                return ot__err_set(OT_EUNSUPPORTED, NULL, 0, "assign",
                                   "registered op '%s' has no %s function", what,
                                   in->kd < OT_KD_COUNT ? kd_name[in->kd] : "?");
            return ot__err_set(OT_EUNSUPPORTED, NULL, 0, "assign",
                               "op '%s' has no %s kernel on isa '%s'", what ? what : "?",
                               in->kd < OT_KD_COUNT ? kd_name[in->kd] : "?", kt->isa);
        }
    }
    return 0;
}
