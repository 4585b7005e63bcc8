/*
 * jit_regs.c - the frame and the register allocation of generated code:
 * the frame's constant vectors and value slots, vector loads, stores and
 * broadcasts, and the one-pass allocator (fetch, bind, take, use, retire)
 * that evicts the value read farthest ahead and spills live values around
 * a call (emit_call), which clobbers every vector register. Layer cpu/jit.
 */
#include "jit.h"

#if OT_JIT_X86

/* ---- the frame -------------------------------------------------------------- */

/* Byte offsets below the frame's base: constant k (jit.h's K_*), value v's
 * slot, and K_FN constant e (F_ONE: K_ONE). */
int32_t ot__jit_konst(const regs *r, int k) { return r->vbytes * k; }
int32_t ot__jit_slot(const regs *r, int v) { return r->vbytes * (NCONST + (int32_t)v); }
static int32_t fk(const regs *r, int e)
{
    return e == F_ONE ? ot__jit_konst(r, K_ONE) : ot__jit_konst(r, K_FN + e);
}

void ot__jit_vmov_load(regs *r, int reg, int base, int index, int32_t disp)
{
    ot__x86_vrm(r->c, 1, r->pp, r->wig, 0x10, reg, 0, base, index, disp);
}

void ot__jit_vmov_store(regs *r, int reg, int base, int index, int32_t disp)
{
    ot__x86_vrm(r->c, 1, r->pp, r->wig, 0x11, reg, 0, base, index, disp);
}

/* vmovntps / vmovntpd [base + index + disp], reg: a store that bypasses
 * the caches (the address must be aligned to the vector). */
void ot__jit_vmov_stream(regs *r, int reg, int base, int index, int32_t disp)
{
    ot__x86_vrm(r->c, 1, r->pp, r->wig, 0x2B, reg, 0, base, index, disp);
}

/* vbroadcastss / vbroadcastsd reg, [base + disp] (the double form is W0
 * under VEX, W1 under EVEX). */
static void vbroadcast(regs *r, int reg, int base, int32_t disp)
{
    ot__x86_vrm(r->c, 2, 1, r->wig, r->pp ? 0x19 : 0x18, reg, 0, base, NO_INDEX, disp);
}

void ot__jit_vmovaps(regs *r, int dst, int src) { ot__x86_vrr(r->c, 1, 0, 0, 0x28, dst, 0, src); }

/* Bitwise d = a & k, a ^ k, a | k or ~a & k with constant k of the frame:
 * the FP forms under VEX, the AVX-512F integer forms under EVEX (the FP
 * ones need AVX-512DQ). */
void ot__jit_bitwise_const(regs *r, int kind, int d, int a, int k)
{
    static const uint8_t fp[] = {0x54, 0x57, 0x56, 0x55}, integer[] = {0xDB, 0xEF, 0xEB, 0xDF};
    int32_t at = ot__jit_konst(r, k);
    if (r->c->evex) ot__x86_vrm(r->c, 1, 1, 0, integer[kind], d, a, RSP, NO_INDEX, at);
    else ot__x86_vrm(r->c, 1, r->pp, 0, fp[kind], d, a, RSP, NO_INDEX, at);
}

/* Every bit of reg clear: vxorps (VEX), vpxord (EVEX, whose vxorps needs
 * AVX-512DQ). The CPU knows the result does not depend on reg. */
void ot__jit_zero_reg(regs *r, int reg)
{
    if (r->c->evex) ot__x86_vrr(r->c, 1, 1, 0, 0xEF, reg, reg, reg);
    else ot__x86_vrr(r->c, 1, 0, 0, 0x57, reg, reg, reg);
}

/* Every bit of reg set: vpcmpeqd reg, reg, reg (VEX), vpternlogd with
 * table 0xFF (EVEX, where compares write mask registers). The CPU knows
 * vpcmpeqd's result does not depend on reg, but not vpternlogd's: reg is
 * zeroed first, or the constant would wait for reg's last writer. */
void ot__jit_all_ones(regs *r, int reg)
{
    if (r->c->evex) {
        ot__jit_zero_reg(r, reg);
        ot__x86_vrr(r->c, 3, 1, 0, 0x25, reg, reg, reg);
        ot__x86_put1(r->c, 0xFF);
    } else {
        ot__x86_vrr(r->c, 1, 1, 0, 0x76, reg, reg, reg);
    }
}

/* Shifts every lane of reg in place by imm: ext 6 left, 2 right logical,
 * 4 right arithmetic; dwords for single, qwords for double. */
void ot__jit_shift_to(regs *r, int ext, int dst, int src, int imm)
{
    ot__x86_vrr(r->c, 1, 1, r->wig, r->pp && ext != 4 ? 0x73 : 0x72, ext, dst, src);
    ot__x86_put1(r->c, (uint8_t)imm);
}

void ot__jit_shift(regs *r, int ext, int reg, int imm) { ot__jit_shift_to(r, ext, reg, reg, imm); }

/* Fills the frame's constants, through registers 0-2: -0.0 is all ones
 * shifted left by 31 (or 63), its complement all ones shifted right by 1,
 * and 1.0 all ones shifted right, then left, to the exponent bits of one
 * (0x3F800000 or 0x3FF0000000000000). */
void ot__jit_emit_constants(regs *r)
{
    ot__jit_all_ones(r, 0);
    ot__jit_shift(r, 6, 0, r->pp ? 63 : 31);
    ot__jit_vmov_store(r, 0, RSP, NO_INDEX, ot__jit_konst(r, K_SIGN));
    ot__jit_all_ones(r, 1);
    ot__jit_shift(r, 2, 1, 1);
    ot__jit_vmov_store(r, 1, RSP, NO_INDEX, ot__jit_konst(r, K_ABS));
    ot__jit_all_ones(r, 2);
    ot__jit_shift(r, 2, 2, r->pp ? 54 : 25);
    ot__jit_shift(r, 6, 2, r->pp ? 52 : 23);
    ot__jit_vmov_store(r, 2, RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    for (int e = 0; e < NFNK; e++) {
        if (!r->fn_used[e]) continue;
        ot__x86_put(r->c, (const uint8_t[]){0xC7, 0x84, 0x24}, 3);   /* mov dword [rsp + disp32], */
        ot__x86_put4(r->c, fk(r, e));
        ot__x86_put4(r->c, (int32_t)ot__jit_fn_bits[e]);                           /*     imm32 */
        if (r->c->evex) continue;                                  /* read by broadcast */
        vbroadcast(r, 0, RSP, fk(r, e));
        ot__jit_vmov_store(r, 0, RSP, NO_INDEX, fk(r, e));
    }
    for (int e = 0; e <= NFNK; e++)
        if (r->creg[e]) vbroadcast(r, r->creg[e], RSP, fk(r, e));
}

/* kmovw k2, [rsp + disp] (load) or kmovw [rsp + disp], k2. */
static void kmov_k2(regs *r, bool load, int32_t disp)
{
    ot__x86_prefix(r->c, false, 0, 1, 0, 0, 2, 0, 0, RSP, load ? 0x90 : 0x91);
    ot__x86_mem_operand(r->c, 2, RSP, NO_INDEX, disp);
}

/* K_LIVE from the tail's bytes in register n (r14 in fn_tail), lane by
 * lane: lane i is live when n > i * es. */
void ot__jit_emit_live_mask(regs *r, int n)
{
    int es = r->pp ? 8 : 4;
    int in_es = r->half_in ? 2 : es;   /* 16-bit code: nbytes counts 2 bytes a lane */
    for (int i = 0; i < r->vbytes / es; i++) {
        ot__x86_put(r->c, (const uint8_t[]){0x31, 0xC0}, 2);               /* xor eax, eax */
        ot__x86_put1(r->c, (uint8_t)(0x48 | (n >> 3)));                    /* cmp n, imm32 */
        ot__x86_put1(r->c, 0x81);
        ot__x86_put1(r->c, (uint8_t)(0xF8 | (n & 7)));
        ot__x86_put4(r->c, i * in_es);
        ot__x86_put(r->c, (const uint8_t[]){0x0F, 0x97, 0xC0}, 3);         /* seta al */
        ot__x86_put(r->c, (const uint8_t[]){0x48, 0xF7, 0xD8}, 3);         /* neg rax */
        if (r->pp) ot__x86_put1(r->c, 0x48);
        ot__x86_put(r->c, (const uint8_t[]){0x89, 0x84, 0x24}, 3);         /* mov [rsp + disp32], */
        ot__x86_put4(r->c, ot__jit_konst(r, K_LIVE) + i * es);                  /*     eax or rax */
    }
}

void ot__jit_emit_row_masks(regs *r)
{
    ot__x86_put(r->c, (const uint8_t[]){0x48, 0x83, 0xE1, (uint8_t)(r->vbytes - 1)}, 4);   /* and rcx */
    ot__jit_emit_live_mask(r, RCX);
    if (!r->c->evex) return;
    ot__jit_vmov_load(r, 0, RSP, NO_INDEX, ot__jit_konst(r, K_LIVE));
    ot__x86_vrr(r->c, 2, 1, r->wig, 0x27, 2, 0, 0);                   /* vptestm{d,q} k2, v0, v0 */
    kmov_k2(r, false, ot__jit_konst(r, K_KMASK));
}

/* A masked tail's reads and writes (mtail): only the live lanes of the
 * vector at [base + index + disp] are touched, and the others fault on
 * nothing, so a row may end where its buffer does; a load's dead lanes
 * read as zero, as exec's padded copies do. EVEX: vmovup{s,d} under k2,
 * taken from K_KMASK each time (a call clobbers the k registers); VEX:
 * vmaskmovp{s,d}, the mask K_LIVE in a register (the load's own). */
void ot__jit_masked_load(regs *r, int reg, int base, int index, int32_t disp)
{
    if (r->c->evex) {
        kmov_k2(r, true, ot__jit_konst(r, K_KMASK));
        ot__x86_vrm_k(r->c, 1, r->pp, r->wig, 0x10, reg, base, index, disp, 2, true);
        return;
    }
    ot__jit_vmov_load(r, reg, RSP, NO_INDEX, ot__jit_konst(r, K_LIVE));
    ot__x86_vrm(r->c, 2, 1, 0, r->pp ? 0x2D : 0x2C, reg, reg, base, index, disp);
}

void ot__jit_masked_store(regs *r, int g, int base, int index, int32_t disp)
{
    if (r->c->evex) {
        kmov_k2(r, true, ot__jit_konst(r, K_KMASK));
        ot__x86_vrm_k(r->c, 1, r->pp, r->wig, 0x11, g, base, index, disp, 2, false);
        return;
    }
    int m = ot__jit_take(r, 1u << g);
    ot__jit_vmov_load(r, m, RSP, NO_INDEX, ot__jit_konst(r, K_LIVE));
    ot__x86_vrm(r->c, 2, 1, 0, r->pp ? 0x2F : 0x2E, g, m, base, index, disp);
}

/* ---- registers ------------------------------------------------------------ */

bool ot__jit_is_vector_load(const regs *r, int v)
{
    const ot_insn *in = &r->insns[v];
    return in->code == OT_I_LOAD && !(in->scalar & 8);
}

/* Whether the code computes value v (in its loop, or before it: pre). */
bool ot__jit_in_body(const regs *r, int v) { return ot__jit_computes(r->j, v); }

/* Registers a loop keeps its first vector inputs' and outputs' pointers
 * in, rather than loading each from in[] or out[] per vector: r14 and r15,
 * which calls preserve (a reduction keeps nbytes and the tile in its frame;
 * an elementwise loop keeps nbytes in r14 and starts at r15), then where
 * the body calls nothing the caller-saved ones (rax is scratch, rcx the
 * tail's length). */
const int ot__jit_ptr_gpr[9] = {R14, R15, 7, 6, 2, 8, 9, 10, 11};   /* ... rdi rsi rdx r8-r11 */

/* The register holding input v's (or output -1 - v's) pointer, or -1. */
int ot__jit_ptr_reg(const regs *r, int v)
{
    for (int i = 0; i < r->nptr; i++)
        if (r->ptr_of[i] == v) return ot__jit_ptr_gpr[i];
    return -1;
}

/* The zmm past the K_FN constants' holding value v (ot__jit_pin), or 0. */
static int pinned(const regs *r, int v)
{
    for (int i = 0; i < r->npin; i++)
        if (r->pin_v[i] == v) return r->pin_first + i;
    return 0;
}

void ot__jit_pin(regs *r, int v, int reg)
{
    if (!r->c->evex || r->calls || pinned(r, v)) return;
    if (!r->npin) {   /* the first free zmm after the constants' */
        r->pin_first = 16;
        for (int e = 0; e <= NFNK; e++)
            if (r->creg[e] >= r->pin_first) r->pin_first = (int8_t)(r->creg[e] + 1);
    }
    if (r->pin_first + r->npin >= 32) return;
    ot__jit_vmovaps(r, r->pin_first + r->npin, reg);
    r->pin_v[r->npin++] = (int16_t)v;
}

/* Brings value v into register reg: a stack slot for body values, the
 * input at this copy's offset (or in exec's padded tail) or a broadcast
 * for prelude values; a copy of its zmm where pinned. A broadcast and a
 * pre value read from the frame in every turn took a load port each: layer
 * norm's gradient loaded 4 of them beside its 3 inputs, per vector. */
void ot__jit_fetch(regs *r, int v, int reg)
{
    int pin = pinned(r, v);
    if (pin) {
        ot__jit_vmovaps(r, reg, pin);
        return;
    }
    if (ot__jit_in_body(r, v)) {
        ot__jit_vmov_load(r, reg, RSP, NO_INDEX, ot__jit_slot(r, v));
        return;
    }
    bool vec = ot__jit_is_vector_load(r, v);
    if (!vec && r->splat) {
        ot__jit_vmov_load(r, reg, RSP, NO_INDEX, ot__jit_slot(r, v));
        return;
    }
    bool padded = vec && r->pad && !r->mtail;   /* exec's copy, at in[ninsn + v] */
    int base = vec && !padded ? ot__jit_ptr_reg(r, v) : -1;
    if (base < 0) ot__x86_load_ptr(r->c, R12, 8 * (padded ? r->j->ninsn + v : v));
    if (base < 0) base = RAX;
    if (vec && r->half_in) ot__jit_half_load(r, reg, r->half_in[v], base, RBX);
    else if (vec && r->pad && r->mtail) ot__jit_masked_load(r, reg, base, RBX, r->disp);
    else if (vec) ot__jit_vmov_load(r, reg, base, padded ? NO_INDEX : RBX, r->disp);
    else vbroadcast(r, reg, RAX, 0);
}

void ot__jit_bind(regs *r, int v, int reg)
{
    r->val_of[reg] = v;
    r->reg_of[v] = (int16_t)reg;
}

void ot__jit_release(regs *r, int reg)
{
    if (r->val_of[reg] >= 0) r->reg_of[r->val_of[reg]] = -1;
    r->val_of[reg] = -1;
}

/* Makes sure a body value in reg survives losing it. */
void ot__jit_save(regs *r, int reg)
{
    int v = r->val_of[reg];
    if (v >= 0 && ot__jit_in_body(r, v) && !r->spilled[v]) {
        ot__jit_vmov_store(r, reg, RSP, NO_INDEX, ot__jit_slot(r, v));
        r->spilled[v] = true;
    }
}

/* A free register, else the one whose value is read last; keep is a mask of
 * registers the current instruction already uses. */
int ot__jit_take(regs *r, unsigned keep)
{
    int best = -1;
    for (int g = 0; g < r->nreg; g++) {
        if (keep >> g & 1) continue;
        if (r->val_of[g] < 0) return g;
        if (best < 0 || r->last[r->val_of[g]] > r->last[r->val_of[best]]) best = g;
    }
    if (best < 0) {             /* every register kept: no code (the interpreter runs) */
        r->c->oom = true;
        return 0;
    }
    ot__jit_save(r, best);
    ot__jit_release(r, best);
    return best;
}

int ot__jit_use(regs *r, int v, unsigned keep)
{
    if (r->reg_of[v] >= 0) return r->reg_of[v];
    int g = ot__jit_take(r, keep);
    ot__jit_fetch(r, v, g);
    ot__jit_bind(r, v, g);
    return g;
}

/* Frees the registers of values whose last reader is position pos. */
void ot__jit_retire(regs *r, int pos)
{
    for (int g = 0; g < NREG; g++)
        if (r->val_of[g] >= 0 && r->last[r->val_of[g]] <= pos) ot__jit_release(r, g);
}

/* ---- instructions ----------------------------------------------------------- */

/* The table's jit column (src/core/ops.def) of an op, OT__JIT_NONE if none. */
int ot__jit_lowering(int op)
{
    const ot_opinfo *o = ot__op(op);
    return o ? o->jit : OT__JIT_NONE;
}

/* Puts value v into register reg for a call, saving v first when it is
 * still read after position pos. */
static void place(regs *r, int pos, int v, int reg)
{
    int g = r->reg_of[v];
    if (g < 0) {
        ot__jit_fetch(r, v, reg);
        return;
    }
    if (r->last[v] > pos) ot__jit_save(r, g);
    if (g != reg) ot__jit_vmovaps(r, reg, g);
}

/* In fn_tail, zeroes the lanes past nbytes of reg, which holds value v,
 * where v is a vector (a broadcast scalar, pre's too, fills the tile
 * kernels' padding). */
bool ot__jit_zero_dead(const regs *r, int v)
{
    return r->tail && (r->j->body[v] || ot__jit_is_vector_load(r, v));
}

static void dead_lanes_zero(regs *r, int v, int reg)
{
    if (ot__jit_zero_dead(r, v)) ot__jit_bitwise_const(r, BIT_AND, reg, reg, K_LIVE);
}

/* A call: the callee clobbers every vector register, so values read later
 * are saved; the operands go to registers 0 and 1 (ymm or zmm), the result
 * comes back in register 0. */
void ot__jit_emit_call(regs *r, int pos, const void *fn, int a, int b)
{
    for (int g = 0; g < NREG; g++) {
        int v = r->val_of[g];
        if (v >= 0 && v != a && v != b && r->last[v] > pos) ot__jit_save(r, g);
    }
    if (b >= 0 && r->reg_of[b] == 0) {   /* b sits where a goes: via the stack */
        ot__jit_save(r, 0);
        ot__jit_release(r, 0);
    }
    place(r, pos, a, 0);
    if (b >= 0) place(r, pos, b, 1);
    for (int g = 0; g < NREG; g++) ot__jit_release(r, g);
    dead_lanes_zero(r, a, 0);
    if (b >= 0) dead_lanes_zero(r, b, 1);
    ot__x86_call_abs(r->c, fn);
    ot__jit_bind(r, pos, 0);
}

/* n registers for an inline sequence's temporaries, none in keep. */
void ot__jit_scratch(regs *r, unsigned keep, int t[], int n)
{
    for (int i = 0; i < n; i++) {
        t[i] = ot__jit_take(r, keep);
        keep |= 1u << t[i];
    }
}

/* op reg, vvvv, K_FN constant e in every lane: its register (creg), else
 * an embedded broadcast under EVEX, the frame's whole vector under VEX. */
void ot__jit_vrc(regs *r, int map, int pp, uint8_t op, int reg, int vvvv, int e)
{
    ot__jit_vrc_k(r, map, pp, op, reg, vvvv, e, 0);
}

/* The same with its write masked by k1-k7 where k (EVEX only): the lanes
 * the mask clears keep reg's value. */
void ot__jit_vrc_k(regs *r, int map, int pp, uint8_t op, int reg, int vvvv, int e, int k)
{
    int32_t disp = fk(r, e);
    if (r->creg[e]) {
        if (k) ot__x86_vrr_k(r->c, map, pp, 0, op, reg, vvvv, r->creg[e], k, false);
        else ot__x86_vrr(r->c, map, pp, 0, op, reg, vvvv, r->creg[e]);
        return;
    }
    if (!r->c->evex) {
        ot__x86_vrm(r->c, map, pp, 0, op, reg, vvvv, RSP, NO_INDEX, disp);
        return;
    }
    ot__x86_prefix_k(r->c, true, 1, map, pp, 0, reg, vvvv, 0, RSP, op, (uint8_t)(EVEX_BCST | k));
    ot__x86_mem_operand(r->c, reg, RSP, NO_INDEX, disp);
}

/* reg = K_FN constant e (vbroadcastss under EVEX), masked by k1 when k. */
void ot__jit_load_const(regs *r, int reg, int e, bool k)
{
    int32_t disp = fk(r, e);
    if (r->creg[e]) ot__x86_vrr_k(r->c, 1, 0, 0, 0x28, reg, 0, r->creg[e], k ? 1 : 0, false);   /* vmovaps */
    else if (!r->c->evex) ot__jit_vmov_load(r, reg, RSP, NO_INDEX, disp);
    else if (k) ot__x86_vrm_k(r->c, 2, 1, 0, 0x18, reg, RSP, NO_INDEX, disp, 1, false);
    else vbroadcast(r, reg, RSP, disp);
}

#endif /* OT_JIT_X86 */
