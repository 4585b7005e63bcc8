/*
 * jit_reduce.c - generated code for reductions (sum, mean, max, min over
 * rows or everything): the loop that folds the body's values into
 * accumulators tile by tile in tile.inc's order, the NaN notes of max and
 * min, and the loop invariants (vector pointers, broadcast scalars) that
 * elementwise code shares. Layer cpu/jit.
 */
#include "jit.h"

#if OT_JIT_X86

/* ---- reductions ------------------------------------------------------------- */

/*
 * A REDUCE kernel's code, red(in, out, nbytes, tile_bytes, acc), runs the
 * body over nbytes of one row, read and written in place, and folds the
 * result into *acc tile by tile (a tile is tile_bytes, exec's tile), the
 * way exec.c's interpreter folds what kt->sum, max or min return per tile.
 * For a span that ends within a vector, in[ninsn + v] and out[nout + q]
 * are zero-padded copies of the last part of each vector input and output
 * (exec copies the outputs' back; red_rows, over many rows, reads and
 * writes that part in place under a mask instead). It returns nonzero
 * where max or min met a NaN.
 *
 * Sums (and means) do the tile kernels' own arithmetic, so that they round
 * exactly as interpreted: within a tile four vector accumulators take the
 * vectors in turn (groups of four, then single vectors and the zero-padded
 * tail into the first); at the tile's end they are folded in tile.inc's
 * fixed order and the tile's sum is added to *acc in double. f32 thus
 * accumulates f32 lanes flushed into double every tile, which is at most
 * K_BLOCK elements: tile.inc's blocking, as accurate as the interpreter
 * and the same bits (but for which NaN a sum of two NaNs returns, which
 * depends on the order the C compiler gave tile.inc's lane additions).
 * Max and min take their extremes in any order, which changes nothing but
 * which NaN or which zero comes out; the code notes NaNs (note_nan), and
 * exec runs the interpreter on a span with a NaN or a zero extreme (ref's
 * rule: the first NaN, else the first zero).
 *
 * When the body calls a function, which clobbers every vector register,
 * the accumulators live in the frame (one load and store per vector beside
 * a call); else in registers 12-15, and the NaN notes in 8-11.
 */

/* K_MISC's scalars: the acc pointer, the end of the tile, *acc's value,
 * nbytes and tile_bytes; red_rows' rs and the rows left. */
enum { MISC_ACCP = 0, MISC_END = 8, MISC_ACC = 16, MISC_N = 24, MISC_TILE = 32, MISC_RS = 40,
       MISC_ROWS = 48 };
static int32_t misc(const regs *r, int at) { return ot__jit_konst(r, K_MISC) + at; }

/* The opcode of a reduction's step, packed or scalar: add, max or min. */
static uint8_t red_opcode(int red)
{
    return red == OT_OP_MAX ? 0x5F : red == OT_OP_MIN ? 0x5D : 0x58;
}

/* The upper half of vector s into the lower half of d: vextractf64x4
 * (EVEX) or vextractf128 (VEX). */
static void upper_half(code *c, int d, int s)
{
    ot__x86_prefix(c, c->evex, 1, 3, 1, c->evex, s, 0, 0, d, c->evex ? 0x1B : 0x19);
    ot__x86_put1(c, (uint8_t)(0xC0 | (s & 7) << 3 | (d & 7)));
    ot__x86_put1(c, 1);
}

/* The upper 128 bits of ymm s into xmm d, on either table. */
static void upper_128(code *c, int d, int s)
{
    ot__x86_prefix(c, false, 1, 3, 1, 0, s, 0, 0, d, 0x19);
    ot__x86_put1(c, (uint8_t)(0xC0 | (s & 7) << 3 | (d & 7)));
    ot__x86_put1(c, 1);
}

/* Folds the lanes of register 0 (doubles where dbl, else floats) into its
 * lane 0 by halves, register 1 the scratch: lane k takes lane k + half as
 * its second operand, tile.inc's lanes_sum order. */
static void fold_lanes(regs *r, uint8_t op, bool dbl)
{
    code *c = r->c;
    int pp = dbl ? 1 : 0;
    if (r->vbytes == 64) {
        upper_half(c, 1, 0);
        ot__x86_xrr(c, 1, pp, op, 0, 0, 1);
    }
    upper_128(c, 1, 0);
    ot__x86_xrr(c, 0, pp, op, 0, 0, 1);
    if (!dbl) {
        ot__x86_xrr(c, 0, 0, 0x12, 1, 0, 0);                                  /* vmovhlps */
        ot__x86_xrr(c, 0, 0, op, 0, 0, 1);
        ot__x86_xrr(c, 0, 2, 0x16, 1, 0, 0);                                  /* vmovshdup */
        ot__x86_xrr(c, 0, 2, op, 0, 0, 1);                                    /* ss */
    } else {
        ot__x86_xrr(c, 0, 1, 0x15, 1, 0, 0);                                  /* vunpckhpd */
        ot__x86_xrr(c, 0, 3, op, 0, 0, 1);                                    /* sd */
    }
}

/* An f32 tile sum as tile.inc folds it: each accumulator's lanes widened
 * to double, the lower and the upper half apart, added as (s0 + s1) +
 * (s2 + s3), then the upper half's sums added to the lower's; a vector of
 * doubles in register 0. */
static void widen_sum(regs *r)
{
    code *c = r->c;
    int dw = c->evex;   /* packed double: W1 under EVEX */
    for (int u = 0; u < 4; u++) {
        ot__x86_vrr(c, 1, 0, 0, 0x5A, u, 0, ACC_REG + u);                     /* vcvtps2pd */
        upper_half(c, 4 + u, ACC_REG + u);
        ot__x86_vrr(c, 1, 0, 0, 0x5A, 4 + u, 0, 4 + u);
    }
    for (int h = 0; h < 8; h += 4) {
        ot__x86_vrr(c, 1, 1, dw, 0x58, h, h, h + 1);
        ot__x86_vrr(c, 1, 1, dw, 0x58, h + 2, h + 2, h + 3);
        ot__x86_vrr(c, 1, 1, dw, 0x58, h, h, h + 2);
    }
    ot__x86_vrr(c, 1, 1, dw, 0x58, 0, 0, 4);
}

/* The end of a tile: its accumulators folded into one value, then into
 * *acc's slot (acc + x, or its max or min). */
static void emit_flush(regs *r)
{
    code *c = r->c;
    uint8_t op = red_opcode(r->red);
    for (int u = 0; u < 4 && r->calls; u++)
        ot__jit_vmov_load(r, ACC_REG + u, RSP, NO_INDEX, ot__jit_konst(r, K_ACC + u));
    if (r->red == OT_OP_SUM && !r->pp) {
        widen_sum(r);
    } else {
        ot__x86_vrr(c, 1, r->pp, r->wig, op, 0, ACC_REG, ACC_REG + 1);
        ot__x86_vrr(c, 1, r->pp, r->wig, op, 1, ACC_REG + 2, ACC_REG + 3);
        ot__x86_vrr(c, 1, r->pp, r->wig, op, 0, 0, 1);
    }
    bool dbl = r->pp || r->red == OT_OP_SUM;
    fold_lanes(r, op, dbl);
    if (!dbl) ot__x86_xrr(c, 0, 2, 0x5A, 0, 0, 0);                            /* vcvtss2sd */
    ot__x86_xrm(c, 0, 3, 0x10, 1, RSP, misc(r, MISC_ACC));                    /* vmovsd */
    ot__x86_xrr(c, 0, 3, op, 1, 1, 0);
    ot__x86_xrm(c, 0, 3, 0x11, 1, RSP, misc(r, MISC_ACC));
}

/* Whether the body (or pre) may read any of K_SIGN, K_ABS, K_ONE and K_FN: a
 * reduction called once per row of a few vectors saves making them where
 * not. The ops known to read none are listed (arithmetic, sqrt, sqr, fma,
 * relu, rint, minimum, maximum), so that an op left out costs the
 * constants, not a read of an unwritten frame. */
static bool reads_constants(const regs *r)
{
    for (int i = 0; i < r->j->ninsn; i++) {
        const ot_insn *in = &r->insns[i];
        int op = in->op;
        bool none = in->code == OT_I_LOAD || in->code == OT_I_PARAM ||
                    (in->code == OT_I_FMA && op == OT_OP_ADD) ||
                    (in->code == OT_I_BINARY &&
                     (op == OT_OP_ADD || op == OT_OP_SUB || op == OT_OP_MUL || op == OT_OP_DIV ||
                      op == OT_OP_MINIMUM || op == OT_OP_MAXIMUM)) ||
                    (in->code == OT_I_UNARY &&
                     (op == OT_OP_SQRT || op == OT_OP_SQR || op == OT_OP_RELU || op == OT_OP_RINT));
        if (ot__jit_in_body(r, i) && !none) return true;
    }
    for (int e = 0; e < NFNK; e++)
        if (r->fn_used[e]) return true;
    return false;
}

/* Every broadcast value the body (or pre) reads, broadcast once into its
 * slot: a vector load per use then, not a pointer load and a broadcast. */
void ot__jit_emit_splats(regs *r)
{
    r->npin = 0;   /* taken again: a row function's broadcasts change per row */
    for (int v = 0; v < r->j->ninsn; v++) {
        bool read = false;
        for (int i = 0; i < r->j->ninsn; i++)
            for (int o = 0; o < 3 && ot__jit_in_body(r, i); o++) read |= r->j->arg[i][o] == v;
        if (!read || ot__jit_in_body(r, v) || ot__jit_is_vector_load(r, v)) continue;
        ot__jit_fetch(r, v, 0);
        ot__jit_vmov_store(r, 0, RSP, NO_INDEX, ot__jit_slot(r, v));
        ot__jit_pin(r, v, 0);
    }
    r->splat = true;
}

/* Each tile's accumulators start at the identity: 0, or K_IDENT. */
static void acc_init(regs *r)
{
    int z = r->calls ? 0 : ACC_REG;
    if (r->red == OT_OP_SUM) ot__jit_zero_reg(r, z);
    else ot__jit_vmov_load(r, z, RSP, NO_INDEX, ot__jit_konst(r, K_IDENT));
    for (int u = 0; u < 4; u++) {
        if (r->calls) ot__jit_vmov_store(r, z, RSP, NO_INDEX, ot__jit_konst(r, K_ACC + u));
        else if (u) ot__jit_vmovaps(r, ACC_REG + u, z);
    }
}

/* Max and min note NaNs by summing what they reduce into note u (one add
 * per vector, cheaper than a compare and a merge): a note is NaN where a
 * NaN was met, or where +inf and -inf (or sums overflowing both ways)
 * met, which only sends a span to the interpreter needlessly. */
static void note_nan(regs *r, int t, unsigned keep, int u)
{
    if (!r->calls) {
        ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x58, NAN_REG + u, NAN_REG + u, t);
        return;
    }
    int n = ot__jit_take(r, keep);
    ot__jit_vmov_load(r, n, RSP, NO_INDEX, ot__jit_konst(r, K_NAN + u));
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x58, n, n, t);
    ot__jit_vmov_store(r, n, RSP, NO_INDEX, ot__jit_konst(r, K_NAN + u));
}

/* Folds this copy's result into accumulator u; in the tail, the lanes past
 * nbytes become the identity first (0, or K_DEAD's), as the tile kernels
 * pad their tails. */
static void accumulate(regs *r, int u)
{
    int g = ot__jit_use(r, r->j->out_val[0], 0);
    int t = g;
    if (r->pad) {
        t = ot__jit_take(r, 1u << g);
        ot__jit_bitwise_const(r, BIT_AND, t, g, K_LIVE);
        if (r->red != OT_OP_SUM) ot__jit_bitwise_const(r, BIT_OR, t, t, K_DEAD);
    }
    uint8_t op = red_opcode(r->red);
    if (r->calls) {
        int a = ot__jit_take(r, 1u << g | 1u << t);
        ot__jit_vmov_load(r, a, RSP, NO_INDEX, ot__jit_konst(r, K_ACC + u));
        ot__x86_vrr(r->c, 1, r->pp, r->wig, op, a, a, t);
        ot__jit_vmov_store(r, a, RSP, NO_INDEX, ot__jit_konst(r, K_ACC + u));
    } else {
        ot__x86_vrr(r->c, 1, r->pp, r->wig, op, ACC_REG + u, ACC_REG + u, t);
    }
    if (r->red != OT_OP_SUM) note_nan(r, t, 1u << g | 1u << t, u);
}

/* One copy of the body for the vector u vectors past rbx (pad: exec's
 * padded tail), its stores, and its fold into accumulator u. */
static void emit_copy(regs *r, int u, bool pad)
{
    r->disp = pad ? 0 : u * r->vbytes;
    r->pad = r->tail = pad;
    ot__jit_emit_body(r, false);
    accumulate(r, u);
}

/* Max and min: K_IDENT, and the NaN notes cleared. */
static void emit_identity(regs *r)
{
    ot__jit_all_ones(r, 0);
    if (r->red == OT_OP_MAX) {
        ot__jit_shift(r, 6, 0, r->pp ? 52 : 23);                              /* -inf */
    } else {
        ot__jit_shift(r, 6, 0, r->pp ? 53 : 24);                              /* +inf */
        ot__jit_shift(r, 2, 0, 1);
    }
    ot__jit_vmov_store(r, 0, RSP, NO_INDEX, ot__jit_konst(r, K_IDENT));
    ot__jit_zero_reg(r, 1);
    for (int u = 0; u < 4; u++) {
        if (r->calls) ot__jit_vmov_store(r, 1, RSP, NO_INDEX, ot__jit_konst(r, K_NAN + u));
        else ot__jit_vmovaps(r, NAN_REG + u, 1);
    }
}

/* eax: nonzero where the NaN notes, added up, have a NaN lane (0 for
 * sums); the upper half of a zmm folded onto the lower, since VEX's
 * compare and vmovmskps see 256 bits. */
static void emit_nan_flag(regs *r)
{
    code *c = r->c;
    if (r->red == OT_OP_SUM) {
        ot__x86_put(c, (const uint8_t[]){0x31, 0xC0}, 2);                     /* xor eax, eax */
        return;
    }
    for (int u = 0; u < 4 && r->calls; u++)
        ot__jit_vmov_load(r, NAN_REG + u, RSP, NO_INDEX, ot__jit_konst(r, K_NAN + u));
    ot__x86_vrr(c, 1, r->pp, r->wig, 0x58, 0, NAN_REG, NAN_REG + 1);
    ot__x86_vrr(c, 1, r->pp, r->wig, 0x58, 1, NAN_REG + 2, NAN_REG + 3);
    ot__x86_vrr(c, 1, r->pp, r->wig, 0x58, 0, 0, 1);
    if (r->vbytes == 64) {
        upper_half(c, 1, 0);
        ot__x86_xrr(c, 1, r->pp, 0x58, 0, 0, 1);
    }
    ot__x86_xrr(c, 1, r->pp, 0xC2, 0, 0, 0);                                  /* vcmpunordp{s,d} */
    ot__x86_put1(c, 3);
    ot__x86_xrr(c, 1, r->pp, 0x50, RAX, 0, 0);                               /* vmovmskp{s,d} eax */
}

/* For max and min, the identity in the lanes past the tail (K_DEAD =
 * ~K_LIVE & K_IDENT). */
static void emit_dead_mask(regs *r)
{
    if (r->red == OT_OP_SUM) return;
    ot__jit_vmov_load(r, 0, RSP, NO_INDEX, ot__jit_konst(r, K_LIVE));
    ot__jit_bitwise_const(r, BIT_ANDN, 0, 0, K_IDENT);
    ot__jit_vmov_store(r, 0, RSP, NO_INDEX, ot__jit_konst(r, K_DEAD));
}

/* The tail: its live lanes from its bytes (rcx), then the dead ones'. */
static void emit_tail_masks(regs *r)
{
    ot__jit_emit_live_mask(r, RCX);
    emit_dead_mask(r);
}

/* Pointers into registers (see ptr_gpr): the vector inputs', then the
 * outputs'. */
void ot__jit_emit_pointers(regs *r)
{
    int room = r->calls ? 2 : 9;
    for (int v = 0; v < r->j->ninsn && r->nptr < room; v++) {
        if (!ot__jit_is_vector_load(r, v)) continue;
        ot__x86_gpr_mem(r->c, 0x8B, ot__jit_ptr_gpr[r->nptr], R12, 8 * v);
        r->ptr_of[r->nptr++] = (int16_t)v;
    }
    for (int q = r->red >= 0; q < r->j->nout && r->nptr < room; q++) {
        if (!r->j->out_vector[q]) continue;
        ot__x86_gpr_mem(r->c, 0x8B, ot__jit_ptr_gpr[r->nptr], R13, 8 * q);
        r->ptr_of[r->nptr++] = (int16_t)(-1 - q);
    }
}

/* After a row of fn_rows or red_rows, rax holding rs: in[v] += rs[1 + v]
 * for each load, out[q] += rs[1 + ninsn + q] for each output from q0 on. */
void ot__jit_emit_row_steps(regs *r, int q0)
{
    code *c = r->c;
    const ot_jit *j = r->j;
    for (int v = 0; v < j->ninsn; v++) {
        if (j->body[v] || r->insns[v].code != OT_I_LOAD) continue;
        ot__x86_gpr_mem(c, 0x8B, RCX, RAX, 8 + 8 * v);                        /* mov rcx, [rax + 8 + 8v] */
        ot__x86_gpr_mem(c, 0x01, RCX, R12, 8 * v);                            /* add [r12 + 8v], rcx */
    }
    for (int q = q0; q < j->nout; q++) {
        ot__x86_gpr_mem(c, 0x8B, RCX, RAX, 8 + 8 * (j->ninsn + q));
        ot__x86_gpr_mem(c, 0x01, RCX, R13, 8 * q);                            /* add [r13 + 8q], rcx */
    }
}

/* Compares rbx + bytes with the end of the tile and jumps (forward) when
 * a loop has no room for a first turn. */
static size_t emit_room(regs *r, int32_t bytes)
{
    ot__x86_gpr_mem(r->c, 0x8D, RAX, RBX, bytes);                       /* lea rax, [rbx + bytes] */
    ot__x86_gpr_mem(r->c, 0x3B, RAX, RSP, misc(r, MISC_END));
    return ot__x86_jump_fwd(r->c, JA);
}

/* rbx += bytes, then the room check for the next turn (the loops test at
 * the bottom: one branch per turn). */
static void emit_step(regs *r, int32_t bytes)
{
    ot__x86_put(r->c, (const uint8_t[]){0x48, 0x81, 0xC3}, 3);                /* add rbx, bytes */
    ot__x86_put4(r->c, bytes);
    ot__x86_gpr_mem(r->c, 0x8D, RAX, RBX, bytes);
    ot__x86_gpr_mem(r->c, 0x3B, RAX, RSP, misc(r, MISC_END));
}

/* The row's tiles from rbx = 0 while rbx < nbytes (MISC_N), each running
 * groups of four copies, then single copies, then the tail, then the
 * flush into MISC_ACC. */
static void emit_tiles(regs *r)
{
    code *c = r->c;
    int32_t v = r->vbytes;
    ot__x86_put(c, (const uint8_t[]){0x31, 0xDB}, 2);                         /* xor ebx, ebx */
    ot__x86_gpr_mem(c, 0x8B, RAX, RSP, misc(r, MISC_N));
    ot__x86_put(c, (const uint8_t[]){0x48, 0x85, 0xC0}, 3);                   /* test rax, rax */
    size_t done = ot__x86_jump_fwd(c, JE);
    size_t tile = c->n;                                               /* end = min(rbx + tile, n) */
    ot__x86_mov_rr(c, RAX, RBX);
    ot__x86_gpr_mem(c, 0x03, RAX, RSP, misc(r, MISC_TILE));
    ot__x86_gpr_mem(c, 0x3B, RAX, RSP, misc(r, MISC_N));
    ot__x86_put(c, (const uint8_t[]){0x48, 0x0F, 0x47}, 3);                   /* cmova rax, n */
    ot__x86_mem_operand(c, RAX, RSP, NO_INDEX, misc(r, MISC_N));
    ot__x86_gpr_mem(c, 0x89, RAX, RSP, misc(r, MISC_END));
    acc_init(r);
    size_t to_single = emit_room(r, 4 * v);
    size_t group = c->n;
    for (int u = 0; u < 4; u++) emit_copy(r, u, false);
    emit_step(r, 4 * v);
    ot__x86_jump_back(c, JBE, group);
    ot__x86_land(c, to_single);
    size_t to_tail = emit_room(r, v);
    size_t single = c->n;
    emit_copy(r, 0, false);
    emit_step(r, v);
    ot__x86_jump_back(c, JBE, single);
    ot__x86_land(c, to_tail);
    ot__x86_gpr_mem(c, 0x8B, RCX, RSP, misc(r, MISC_END));
    ot__x86_gpr_rr(c, 0x29, RCX, RBX);                                        /* sub rcx, rbx */
    size_t to_flush = ot__x86_jump_fwd(c, JE);
    if (!r->mtail) emit_tail_masks(r);   /* a row function's are made once */
    emit_copy(r, 0, true);
    ot__x86_gpr_mem(c, 0x8B, RBX, RSP, misc(r, MISC_END));
    ot__x86_land(c, to_flush);
    emit_flush(r);
    ot__x86_gpr_mem(c, 0x3B, RBX, RSP, misc(r, MISC_N));
    ot__x86_jump_back(c, JB, tile);
    ot__x86_land(c, done);
}

/* The double at [MISC_ACCP] into MISC_ACC (load) or back (store). */
static void acc_move(regs *r, bool load)
{
    code *c = r->c;
    ot__x86_gpr_mem(c, 0x8B, RAX, RSP, misc(r, MISC_ACCP));
    if (load) {
        ot__x86_xrm(c, 0, 3, 0x10, 0, RAX, 0);                                /* vmovsd */
        ot__x86_xrm(c, 0, 3, 0x11, 0, RSP, misc(r, MISC_ACC));
    } else {
        ot__x86_xrm(c, 0, 3, 0x10, 0, RSP, misc(r, MISC_ACC));
        ot__x86_xrm(c, 0, 3, 0x11, 0, RAX, 0);
    }
}

/* The prologue and the arguments that live in the frame: nbytes, the
 * tile and acc (and, for red_rows, rs and its rows). */
static void emit_entry(regs *r, int frame, bool rows)
{
    code *c = r->c;
    ot__jit_emit_prologue(r, frame);
    ot__x86_gpr_mem(c, 0x89, R14, RSP, misc(r, MISC_N));
    ot__x86_gpr_mem(c, 0x89, RCX, RSP, misc(r, MISC_TILE));
    ot__x86_gpr_mem(c, 0x89, R8, RSP, misc(r, MISC_ACCP));
    if (!rows) return;
    ot__x86_gpr_mem(c, 0x89, R9, RSP, misc(r, MISC_RS));
    ot__x86_gpr_mem(c, 0x8B, RAX, R9, 0);                                     /* mov rax, [r9] */
    ot__x86_gpr_mem(c, 0x89, RAX, RSP, misc(r, MISC_ROWS));
}

/* red(in, out, nbytes, tile_bytes, acc): the row's tiles (emit_tiles),
 * the loop invariants first, then the flag of NaNs. */
void ot__jit_emit_reduce_function(regs *r, int frame)
{
    emit_entry(r, frame, false);
    acc_move(r, true);
    ot__jit_emit_pointers(r);
    if (reads_constants(r)) ot__jit_emit_constants(r);
    if (r->red != OT_OP_SUM) emit_identity(r);
    ot__jit_emit_splats(r);
    ot__jit_emit_pre(r);
    emit_tiles(r);
    acc_move(r, false);
    emit_nan_flag(r);
    ot__jit_emit_epilogue(r->c);
}

/* red_rows(in, out, nbytes, tile_bytes, acc, rs): red's loop once per row
 * of rs[0] > 0, each row's invariants (pointers, broadcasts, the ops before
 * the loop) taken again and its result folded into acc[row]; after a row,
 * in[v] += rs[1 + v] for each load and out[q] += rs[1 + ninsn + q] for
 * each further output. A row's last part of a vector is read and written
 * in place under a mask (mtail), which is the same for every row (tiles
 * are whole vectors but a row's last), so it is made once. Returns red's
 * flag of NaNs, over all the rows. */
void ot__jit_emit_reduce_rows_function(regs *r, int frame)
{
    code *c = r->c;
    r->nptr = 0;
    r->splat = false;
    r->npin = 0;
    r->mtail = true;
    emit_entry(r, frame, true);
    if (reads_constants(r)) ot__jit_emit_constants(r);
    if (r->red != OT_OP_SUM) emit_identity(r);
    ot__x86_gpr_mem(c, 0x8B, RCX, RSP, misc(r, MISC_N));
    ot__jit_emit_row_masks(r);
    emit_dead_mask(r);
    size_t row = c->n;
    acc_move(r, true);
    ot__jit_emit_pointers(r);
    ot__jit_emit_splats(r);
    ot__jit_emit_pre(r);
    emit_tiles(r);
    acc_move(r, false);
    ot__x86_gpr_mem(c, 0x83, 0, RSP, misc(r, MISC_ACCP));                     /* add qword [.], */
    ot__x86_put1(c, 8);                                                       /*     8 */
    ot__x86_gpr_mem(c, 0x8B, RAX, RSP, misc(r, MISC_RS));
    ot__jit_emit_row_steps(r, 1);
    ot__x86_gpr_mem(c, 0xFF, 1, RSP, misc(r, MISC_ROWS));                     /* dec qword [.] */
    ot__x86_jump_back(c, JNE, row);
    emit_nan_flag(r);
    ot__jit_emit_epilogue(c);
    r->mtail = false;
}

#endif /* OT_JIT_X86 */
