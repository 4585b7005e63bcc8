/*
 * jit_half.c - 16-bit memory in generated code (issue 36): an elementwise
 * kernel whose vector inputs are f16/bf16 and whose output is f16/bf16
 * widens each input as it loads it and narrows its result as it stores it,
 * so that memory sees two bytes per element each way, as a hand-written
 * loop's would, and the arithmetic is the f32 kernel's. The loop offset
 * then counts 16-bit bytes (jit.c halves its step). Layer cpu/jit.
 *
 * Loads: f16 by vcvtph2ps (AVX-512F; F16C under VEX), bf16 by vpmovzxwd
 * and a 16-bit left shift (exact). Stores round to nearest even, bitwise
 * as src/core/half.c: f16 by vcvtps2ph with imm8 0 (round to nearest
 * even whatever MXCSR says; NaN made quiet with its top payload bits, as
 * the definition does), bf16 (EVEX only) by integers: (x + 0x7FFF +
 * ((x >> 16) & 1)) >> 16, and for a NaN (x >> 16) | 0x40 under the mask
 * of an unordered compare, packed by vpmovdw; or, where the CPU has
 * AVX512_BF16, by vcvtneps2bf16, which flushes subnormal inputs to zero,
 * so a vector that holds one (vfpclassps) branches to the integers' way.
 * f32 inputs and outputs may join them, addressed at twice the offset
 * (SIB scale 2).
 */
#include "jit.h"

#include <stdatomic.h>

#if OT_JIT_X86

const ot__half_fns *ot__half_simd(int i);

/* vmovntdq [base + index], t: t's low 256 bits (EVEX code, a zmm of
 * floats narrowed) or 128 (VEX), always VEX-encoded (t below 16). */
static void stream_half(regs *r, int t, int base, int index)
{
    ot__x86_prefix(r->c, false, r->c->evex, 1, 1, 0, t, 0, index == NO_INDEX ? 0 : index, base,
                   0xE7);
    ot__x86_mem_operand(r->c, t, base, index, 0);
}

/* op reg, [base + index * 2]: an f32 vector where the loop offset counts
 * 16-bit bytes (vmovups 0x10, vmovups store 0x11, vmovntps 0x2B). */
static void f32_mem(regs *r, uint8_t op, int reg, int base, int index)
{
    ot__x86_prefix(r->c, r->c->evex, 1, 1, 0, 0, reg, 0, index, base, op);
    ot__x86_put1(r->c, (uint8_t)(0x80 | (reg & 7) << 3 | 4));             /* [sib + disp32] */
    ot__x86_put1(r->c, (uint8_t)(1 << 6 | (index & 7) << 3 | (base & 7)));  /* scale 2 */
    ot__x86_put4(r->c, 0);
}

void ot__jit_half_load(regs *r, int reg, int dt, int base, int index)
{
    if (dt == OT_F32) {
        f32_mem(r, 0x10, reg, base, index);
        return;
    }
    if (dt == OT_F16) {
        ot__x86_vrm(r->c, 2, 1, 0, 0x13, reg, 0, base, index, 0);       /* vcvtph2ps */
        return;
    }
    ot__x86_vrm(r->c, 2, 1, 0, 0x33, reg, 0, base, index, 0);           /* vpmovzxwd */
    ot__jit_shift(r, 6, reg, 16);                                       /* vpslld 16 */
}

/* bf16 of the f32 lanes of g into t (dwords, each below 2^16). */
static void bf16_round(regs *r, int g, int t)
{
    code *c = r->c;
    ot__jit_shift_to(r, 2, t, g, 16);                                   /* vpsrld t, g, 16 */
    ot__jit_vrc(r, 1, 1, 0xDB, t, t, B_LSB);                            /* vpandd t, 1 */
    ot__x86_vrr(c, 1, 1, 0, 0xFE, t, t, g);                             /* vpaddd t, g */
    ot__jit_vrc(r, 1, 1, 0xFE, t, t, B_RND);                            /* vpaddd t, 0x7FFF */
    ot__jit_shift(r, 2, t, 16);                                         /* vpsrld t, 16 */
    ot__x86_vrr(c, 1, 0, 0, 0xC2, 1, g, g);                             /* vcmpps k1, g, g, */
    ot__x86_put1(c, 3);                                                 /*     unordered */
    ot__x86_vrr_k(c, 1, 1, 0, 0x72, 2, t, g, 1, false);                 /* vpsrld t{k1}, g, 16 */
    ot__x86_put1(c, 16);
    ot__x86_prefix_k(c, true, 1, 1, 1, 0, t, t, 0, RSP, 0xEB, EVEX_BCST | 1);   /* vpord t{k1}, */
    ot__x86_mem_operand(c, t, RSP, NO_INDEX, ot__jit_konst(r, K_FN + B_QUIET)); /*   0x40 */
}

void ot__jit_half_store(regs *r, int g, int base, int index, bool stream)
{
    code *c = r->c;
    if (r->half_out == OT_F32) {
        f32_mem(r, stream ? 0x2B : 0x11, g, base, index);
        return;
    }
    if (r->half_out == OT_F16 && !stream) {
        ot__x86_vrm(c, 3, 1, 0, 0x1D, g, 0, base, index, 0);            /* vcvtps2ph [m], g, 0 */
        ot__x86_put1(c, 0);
        return;
    }
    int t = ot__jit_take(r, 1u << g);
    if (r->half_out == OT_F16) {
        ot__x86_vrr(c, 3, 1, 0, 0x1D, g, 0, t);                         /* vcvtps2ph t, g, 0 */
        ot__x86_put1(c, 0);
        stream_half(r, t, base, index);
        return;
    }
    if (!ot__jit_half_bf16_insn(-1)) {
        bf16_round(r, g, t);
        if (!stream) {
            ot__x86_vrm(c, 2, 2, 0, 0x33, t, 0, base, index, 0);        /* vpmovdw [m], t */
            return;
        }
        ot__x86_vrr(c, 2, 2, 0, 0x33, t, 0, t);                         /* vpmovdw t, t */
        stream_half(r, t, base, index);
        return;
    }
    ot__x86_vrr(c, 2, 2, 0, 0x72, t, 0, g);                             /* vcvtneps2bf16 t, g */
    ot__x86_vrr(c, 3, 1, 0, 0x66, 1, 0, g);                             /* vfpclassps k1, g, */
    ot__x86_put1(c, 0x20);                                              /*     subnormal */
    ot__x86_put(c, (const uint8_t[]){0xC5, 0xF8, 0x98, 0xC9}, 4);       /* kortestw k1, k1 */
    size_t done = ot__x86_jump_fwd(c, JE);
    bf16_round(r, g, t);                                                /* a subnormal lane: */
    ot__x86_vrr(c, 2, 2, 0, 0x33, t, 0, t);                             /* the integers' way */
    ot__x86_land(c, done);
    if (stream) {
        stream_half(r, t, base, index);
        return;
    }
    ot__x86_prefix(c, false, 1, 1, 2, 0, t, 0, index == NO_INDEX ? 0 : index, base, 0x7F);
    ot__x86_mem_operand(c, t, base, index, 0);                          /* vmovdqu [m], ymm t */
}

/* Whether bf16 stores use vcvtneps2bf16 (AVX512_BF16; a vector holding a
 * subnormal takes the integers' way, since the instruction flushes those
 * to zero): the CPU's answer, or set (0 or 1) for a test of the other way;
 * -1 asks. */
int ot__jit_half_bf16_insn(int set)
{
    static atomic_int mode = -1;
    if (set >= 0) atomic_store(&mode, set);
    int m = atomic_load(&mode);
    if (m < 0) {
        __builtin_cpu_init();
        m = ot__half_simd(3) != NULL && __builtin_cpu_supports("avx512dq");
        atomic_store(&mode, m);
    }
    return m;
}

/* Whether this table's code can read load_dt's 16-bit inputs and write
 * out_dt: EVEX code both dtypes, VEX code f16 alone, with F16C. */
bool ot__jit_half_fits(const ot_kernels *kt, const uint8_t *load_dt, int ninsn, int out_dt)
{
    bool evex = kt->vbytes == 64, f16 = out_dt == OT_F16;
    for (int i = 0; i < ninsn && load_dt; i++) f16 |= load_dt[i] == OT_F16;
    if (!evex && out_dt == OT_BF16) return false;
    return !f16 || evex || ot__half_simd(1) != NULL;
}

#else

int ot__jit_half_bf16_insn(int set);
int ot__jit_half_bf16_insn(int set)
{
    (void)set;
    return 0;
}

#endif /* OT_JIT_X86 */
