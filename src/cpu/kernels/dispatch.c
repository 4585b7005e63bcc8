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
 * The ISAs themselves are data: ot__isas, made from isa.h's list, with
 * each one's CPU check and kernel table.
 *
 * Also checks a finished plan against the table it will run on
 * (ot__kernels_check), so that a table lacking an entry is an error and
 * never a call of NULL.
 */
#include "kernels.h"
#include "ops.h"

#include <string.h>

/* ---- the targets ------------------------------------------------------------ */

/* Whether this CPU runs each ISA, as __builtin_cpu_supports names it (the
 * ISAs of other architectures are not built and never asked). */
static bool runs_scalar(void) { return true; }
#if OT_KERNELS_X86
static bool runs_sse2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse2");
}
static bool runs_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static bool runs_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#define KT_sse2 &ot__kernels_sse2
#define KT_avx2 &ot__kernels_avx2
#define KT_avx512 &ot__kernels_avx512
#else
#define runs_sse2 NULL
#define runs_avx2 NULL
#define runs_avx512 NULL
#define KT_sse2 NULL
#define KT_avx2 NULL
#define KT_avx512 NULL
#endif
#if OT_KERNELS_ARM64
static bool runs_neon(void) { return true; }
#define KT_neon &ot__kernels_neon
#else
#define runs_neon NULL
#define KT_neon NULL
#endif
#define KT_scalar &ot__kernels_scalar

#define ISA_DESC(ID, nm, fma, vb, jit, nr, needs, arch) \
    [OT_ISA_##ID] = {#nm, needs, arch, runs_##nm, KT_##nm, fma, vb, jit, nr},
const ot_isa_desc ot__isas[OT_ISA_COUNT] = {OT__ISAS(ISA_DESC)};
#undef ISA_DESC

int ot__isa_parse(const char *name)
{
    for (int i = 0; name && i < OT_ISA_COUNT; i++)
        if (strcmp(name, ot__isa_name(i)) == 0) return i;
    return -1;
}

const ot_kernels *ot__kernels_for(int isa)
{
    if (isa < 0 || isa >= OT_ISA_COUNT) return NULL;
    const ot_isa_desc *d = &ot__isas[isa];
    return d->kernels && d->cpu_runs() ? d->kernels : NULL;
}

const ot_kernels *ot__kernels_select(int isa, const char *isa_from)
{
    if (isa >= 0) {
        const ot_isa_desc *d = &ot__isas[isa];
        const ot_kernels *k = ot__kernels_for(isa);
        if (!d->kernels)
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new",
                        "%s=%s but this build has no %s kernels (not %s)", isa_from, d->name,
                        d->name, d->arch);
        else if (!k)
            ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new", "%s=%s but this CPU lacks %s",
                        isa_from, d->name, d->needs);
        return k;
    }
    static const ot_isa best_first[] = {OT_ISA_AVX512, OT_ISA_AVX2, OT_ISA_SSE2, OT_ISA_NEON,
                                        OT_ISA_SCALAR};
    for (int i = 0; i < OT_ISA_COUNT; i++) {
        const ot_kernels *k = ot__kernels_for(best_first[i]);
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
                               in->kd < OT_KD_COUNT ? kd_name[in->kd] : "?",
                               ot__isa_name(kt->isa));
        }
    }
    return 0;
}
