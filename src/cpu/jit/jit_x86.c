/*
 * jit_x86.c - the x86-64 encoder of generated code: VEX and EVEX prefixes,
 * ModRM/SIB memory operands, the general-purpose register moves, pushes,
 * jumps and the absolute call that the kernel generators (jit.c,
 * jit_regs.c, jit_math.c, jit_reduce.c) are written in. It knows
 * encodings only: what a register holds is jit_regs.c's business. Layer
 * cpu/jit: calls nothing outside jit*.c.
 */
#include "jit.h"

#if OT_JIT_X86

/* ---- the code buffer -------------------------------------------------------- */

/* Appends n bytes, growing the buffer; on failure c->oom, and nothing more
 * is written. */
void ot__x86_put(code *c, const void *p, size_t n)
{
    if (c->oom) return;
    if (c->n + n > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4096;
        while (cap < c->n + n) cap *= 2;
        uint8_t *b = ot__realloc(c->b, cap);
        if (!b) {
            c->oom = true;
            return;
        }
        c->b = b;
        c->cap = cap;
    }
    memcpy(c->b + c->n, p, n);
    c->n += n;
}

/* int3s up to the next 16 bytes, where each further entry point starts;
 * nothing once the code failed (n stays put then). */
void ot__x86_align16(code *c)
{
    while (c->n % 16 && !c->oom) ot__x86_put1(c, 0xCC);
}

void ot__x86_put1(code *c, uint8_t x) { ot__x86_put(c, &x, 1); }

void ot__x86_put4(code *c, int32_t x)
{
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    ot__x86_put(c, b, 4);
}

/* ---- encodings ------------------------------------------------------------ */

/* The prefix and opcode: three-byte VEX with length l (0: 128 bits or
 * scalar, 1: 256), or EVEX with L'L = 2 (512 bits) and mask's z, b and
 * aaa bits. map 1 = 0F, 2 = 0F38, 3 = 0F3A. VEX has registers 0-15, EVEX
 * 0-31: R' and V' extend reg and vvvv, and a register rm's bit 4 comes in
 * x's bit 3 (EVEX's X), as vrr passes it. */
void ot__x86_prefix_k(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                     int b, uint8_t op, uint8_t mask)
{
    uint8_t rxb = (uint8_t)((!(reg & 8)) << 7 | (!(x & 8)) << 6 | (!(b & 8)) << 5);
    if (evex) {
        ot__x86_put1(c, 0x62);
        ot__x86_put1(c, (uint8_t)(rxb | (!(reg & 16)) << 4 | map));
        ot__x86_put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | 1 << 2 | pp));
        ot__x86_put1(c, (uint8_t)(0x40 | (!(vvvv & 16)) << 3 | mask));
    } else {
        ot__x86_put1(c, 0xC4);
        ot__x86_put1(c, (uint8_t)(rxb | map));
        ot__x86_put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | l << 2 | pp));
    }
    ot__x86_put1(c, op);
}

void ot__x86_prefix(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                   int b, uint8_t op)
{
    ot__x86_prefix_k(c, evex, l, map, pp, w, reg, vvvv, x, b, op, 0);
}

/* A whole vector: 256-bit VEX or 512-bit EVEX, as the table. Packed
 * double ops take W = 1 under EVEX, where VEX ignores W, so callers pass
 * r->wig for those. */
static void vex(code *c, int map, int pp, int w, int reg, int vvvv, int x, int b, uint8_t op)
{
    ot__x86_prefix(c, c->evex, 1, map, pp, w, reg, vvvv, x, b, op);
}

/* ModRM and SIB for [base + index + disp32]: always SIB and disp32, which
 * encodes every base (rsp, rbp, r12 and r13 included) and is never scaled
 * by EVEX (only its disp8 is). */
void ot__x86_mem_operand(code *c, int reg, int base, int index, int32_t disp)
{
    ot__x86_put1(c, (uint8_t)(0x80 | (reg & 7) << 3 | 4));
    ot__x86_put1(c, (uint8_t)((index == NO_INDEX ? 4 : (index & 7)) << 3 | (base & 7)));
    ot__x86_put4(c, disp);
}

/* op reg, vvvv, rm (vector registers). */
void ot__x86_vrr(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm)
{
    vex(c, map, pp, w, reg, vvvv, rm >> 1 & 8, rm, op);
    ot__x86_put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

/* op reg, vvvv, [base + index + disp]. */
void ot__x86_vrm(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int base,
                int index, int32_t disp)
{
    vex(c, map, pp, w, reg, vvvv, index == NO_INDEX ? 0 : index, base, op);
    ot__x86_mem_operand(c, reg, base, index, disp);
}

/* EVEX forms whose writes are masked by k1-k7: lanes the mask clears
 * become zero (zeroing) or keep the destination's value. 512 bits; W1
 * for the packed-double forms. */
static uint8_t evex_mask(int k, bool zeroing) { return (uint8_t)((zeroing ? 0x80 : 0) | k); }

void ot__x86_vrr_k(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm, int k,
                  bool zeroing)
{
    ot__x86_prefix_k(c, true, 1, map, pp, w, reg, vvvv, rm >> 1 & 8, rm, op, evex_mask(k, zeroing));
    ot__x86_put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

void ot__x86_vrm_k(code *c, int map, int pp, int w, uint8_t op, int reg, int base, int index,
                   int32_t disp, int k, bool zeroing)
{
    ot__x86_prefix_k(c, true, 1, map, pp, w, reg, 0, index == NO_INDEX ? 0 : index, base, op,
                     evex_mask(k, zeroing));
    ot__x86_mem_operand(c, reg, base, index, disp);
}

/* The VEX forms at length l, W0, on either table: a reduction's last steps
 * work on halves of a vector and on scalars, which EVEX encodes only with
 * AVX-512VL, and VEX runs on every AVX-512 CPU. Map 0F. */
void ot__x86_xrr(code *c, int l, int pp, uint8_t op, int reg, int vvvv, int rm)
{
    ot__x86_prefix(c, false, l, 1, pp, 0, reg, vvvv, 0, rm, op);
    ot__x86_put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

void ot__x86_xrm(code *c, int l, int pp, uint8_t op, int reg, int base, int32_t disp)
{
    ot__x86_prefix(c, false, l, 1, pp, 0, reg, 0, 0, base, op);
    ot__x86_mem_operand(c, reg, base, NO_INDEX, disp);
}

/* op reg, [base + disp] (or op [base + disp], reg) on 64-bit registers. */
void ot__x86_gpr_mem(code *c, uint8_t op, int reg, int base, int32_t disp)
{
    ot__x86_put1(c, (uint8_t)(0x48 | (reg >> 3) << 2 | (base >> 3)));
    ot__x86_put1(c, op);
    ot__x86_mem_operand(c, reg, base, NO_INDEX, disp);
}

/* op rm, reg on 64-bit registers (mov 0x89, add 0x01, sub 0x29, cmp 0x39). */
void ot__x86_gpr_rr(code *c, uint8_t op, int rm, int reg)
{
    ot__x86_put1(c, (uint8_t)(0x48 | (reg >> 3) << 2 | (rm >> 3)));
    ot__x86_put1(c, op);
    ot__x86_put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

/* prefetcht0-2 (hint 1-3) [base + index + disp]: 0F 18 /hint, REX where
 * a register is r8-r15. */
void ot__x86_prefetch(code *c, int hint, int base, int index, int32_t disp)
{
    int x = index == NO_INDEX ? 0 : index >> 3;
    if (base >= 8 || x) ot__x86_put1(c, (uint8_t)(0x40 | x << 1 | base >> 3));
    ot__x86_put(c, (const uint8_t[]){0x0F, 0x18}, 2);
    ot__x86_mem_operand(c, hint, base, index, disp);
}

/* mov rax, [base + disp]: a pointer out of the in or out array. */
void ot__x86_load_ptr(code *c, int base, int32_t disp)
{
    ot__x86_gpr_mem(c, 0x8B, RAX, base, disp);
}

void ot__x86_push(code *c, int r)
{
    if (r >= 8) ot__x86_put1(c, 0x41);
    ot__x86_put1(c, (uint8_t)(0x50 + (r & 7)));
}

void ot__x86_pop(code *c, int r)
{
    if (r >= 8) ot__x86_put1(c, 0x41);
    ot__x86_put1(c, (uint8_t)(0x58 + (r & 7)));
}

/* mov dst, src (64-bit registers). */
void ot__x86_mov_rr(code *c, int dst, int src) { ot__x86_gpr_rr(c, 0x89, dst, src); }

static void jump_op(code *c, int cc)
{
    ot__x86_put1(c, 0x0F);
    ot__x86_put1(c, (uint8_t)(0x80 | cc));
}

size_t ot__x86_jump_fwd(code *c, int cc)
{
    jump_op(c, cc);
    size_t at = c->n;
    ot__x86_put4(c, 0);
    return at;
}

void ot__x86_land(code *c, size_t at)
{
    if (c->oom) return;
    int32_t rel = (int32_t)(c->n - (at + 4));
    memcpy(c->b + at, &rel, 4);
}

void ot__x86_jump_back(code *c, int cc, size_t to)
{
    jump_op(c, cc);
    ot__x86_put4(c, (int32_t)((int64_t)to - (int64_t)(c->n + 4)));
}

void ot__x86_call_abs(code *c, const void *fn)
{
    uint64_t a = (uint64_t)(uintptr_t)fn;
    ot__x86_put1(c, 0x48);
    ot__x86_put1(c, 0xB8);                       /* mov rax, imm64 */
    for (int i = 0; i < 8; i++) ot__x86_put1(c, (uint8_t)(a >> (8 * i)));
    ot__x86_put1(c, 0xFF);
    ot__x86_put1(c, 0xD0);                       /* call rax */
}

#endif /* OT_JIT_X86 */
