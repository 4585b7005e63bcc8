/*
 * jit.c - generated code for elementwise register programs: each kernel
 * whose vector part is f32 or f64 arithmetic becomes one x86-64 loop over
 * vectors that keeps every value in a register (ymm, VEX-encoded, for the
 * AVX2 table; zmm, EVEX-encoded, for the AVX-512 one), so a chain of cheap
 * ops costs no pass over tile buffers (the interpreter in exec.c reads and
 * writes a buffer per op). add, sub, mul, div, fma, fnma, sqrt, sqr, neg
 * and abs are emitted inline, sig and sig2 as an exp call with the select
 * and divide inline; every other op calls the table's vector function
 * (vfn1/vfn2: SLEEF itself, or the tile kernels' own element functions),
 * so results are bitwise those of the interpreter of the same table, NaNs
 * included: add, mul and fma keep the operand order that the tile
 * kernels pin (isa_avx2.h), a first, and c - a*b is (-a)*b + c there too.
 *
 * The program's "prelude" (loads, parameters and scalar instructions) stays
 * with exec.c, which passes a pointer per value: a vector input is read at
 * the loop offset, a scalar one is broadcast. Outputs are stored at the end
 * of each iteration, after every load of it, so an output may be an input.
 * Registers are assigned in one pass with the farthest-last-use value
 * evicted; calls clobber every vector register, so live values are spilled to
 * stack slots around them. A plan's code lives in one mapping of its own,
 * written and then made executable (never both). Elsewhere than x86-64
 * Linux nothing is generated.
 */
#define _DEFAULT_SOURCE   /* MAP_ANONYMOUS */
#include "cpu.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- when to stream ---------------------------------------------------------- */

/* Streaming stores pay where a kernel is bound by memory: they save reading
 * each output line before writing it (a fifth of W1's traffic). Where the
 * arithmetic is the bound they cost: W3, W4 and W7 by hand ran 7-50%
 * slower with them on Zen 4 (issue 15), W1 19% faster. A kernel counts as
 * memory-bound when its work per element, in the op table's cost units
 * (1 cheap, 3 divide or root, 8 transcendental), is at most
 * STREAM_WORK_PER_BYTE per byte of vector it reads or writes. */
#define STREAM_WORK_PER_BYTE 0.5

static bool memory_bound(const ot_kernel *k)
{
    int work = 0, vectors = 1 + k->nxstore;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->scalar & 8) continue;
        if (in->code == OT_I_LOAD) vectors++;
        else if (in->code == OT_I_FMA) work += OT__COST_CHEAP;
        else if (in->code != OT_I_PARAM) work += ot__op_cost(in->op);
    }
    size_t es = k->result_kd == OT_KD_F64 ? 8 : 4;
    return (double)work <= STREAM_WORK_PER_BYTE * (double)(es * (size_t)vectors);
}

bool ot__jit_streams(const ot_kernel *k, size_t stream_bytes)
{
    if (!stream_bytes || k->kind != OT_KER_EW) return false;
    size_t n = k->result_kd == OT_KD_F64 ? 8 : 4;
    for (int d = 0; d < k->ndim; d++) n *= (size_t)k->dims[d];
    return n >= stream_bytes && memory_bound(k);
}

#if defined(__x86_64__) && defined(__linux__)
#include <sys/mman.h>

#define NREG 16
#define RAX 0
#define RSP 4
#define RBX 3
#define RBP 5
#define R12 12
#define R13 13
#define R14 14
#define R15 15
#define NO_INDEX (-1)

typedef struct code {
    uint8_t *b;
    size_t n, cap;
    bool oom;
    bool evex;                  /* 512-bit EVEX encodings, else 256-bit VEX */
} code;

/* What the register pass knows while it walks the body once. */
typedef struct regs {
    code *c;
    const ot_jit *j;
    const ot_insn *insns;
    int pp;                     /* VEX pp: 0 packed single, 1 packed double */
    int w;                      /* W for FMA: 0 single, 1 double */
    int wig;                    /* W for ops VEX ignores it on: EVEX wants w,
                                   VEX (and valgrind's decoder) 0 */
    int vbytes;                 /* bytes per vector register: 32 or 64 */
    bool tail;                  /* fn_tail: zero the lanes past nbytes before calls */
    int val_of[NREG];           /* value in each register, or -1 */
    int16_t *reg_of;            /* register of each value, or -1 */
    bool *spilled;              /* body values with a current stack copy */
    int16_t *last;              /* last body position reading each value */
} regs;

static void put(code *c, const void *p, size_t n)
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

static void put1(code *c, uint8_t x) { put(c, &x, 1); }

static void put4(code *c, int32_t x)
{
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    put(c, b, 4);
}

/* ---- encodings ------------------------------------------------------------ */

/* The prefix and opcode: three-byte VEX with L = 1 (256 bits), or EVEX with
 * L'L = 2 (512 bits), no mask and no broadcast. map 1 = 0F, 2 = 0F38,
 * 3 = 0F3A. Registers 0-15 only (EVEX's R' and V' stay clear). Packed
 * double ops take W = 1 under EVEX, where VEX ignores W, so callers pass
 * r->wig for those. */
static void vex(code *c, int map, int pp, int w, int reg, int vvvv, int x, int b, uint8_t op)
{
    uint8_t rxb = (uint8_t)((!(reg & 8)) << 7 | (!(x & 8)) << 6 | (!(b & 8)) << 5);
    if (c->evex) {
        put1(c, 0x62);
        put1(c, (uint8_t)(rxb | 1 << 4 | map));
        put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | 1 << 2 | pp));
        put1(c, 0x48);
    } else {
        put1(c, 0xC4);
        put1(c, (uint8_t)(rxb | map));
        put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | 1 << 2 | pp));
    }
    put1(c, op);
}

/* op reg, vvvv, rm (vector registers). */
static void vrr(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm)
{
    vex(c, map, pp, w, reg, vvvv, 0, rm, op);
    put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

/* op reg, vvvv, [base + index + disp]: always SIB and disp32, which
 * encodes every base (rsp, rbp, r12 and r13 included) and is never scaled
 * by EVEX (only its disp8 is). */
static void vrm(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int base,
                int index, int32_t disp)
{
    int x = index == NO_INDEX ? 0 : index;
    vex(c, map, pp, w, reg, vvvv, x, base, op);
    put1(c, (uint8_t)(0x80 | (reg & 7) << 3 | 4));
    put1(c, (uint8_t)((index == NO_INDEX ? 4 : (index & 7)) << 3 | (base & 7)));
    put4(c, disp);
}

/* mov rax, [base + disp]: a pointer out of the in or out array. */
static void load_ptr(code *c, int base, int32_t disp)
{
    put1(c, (uint8_t)(0x48 | (base >> 3)));
    put1(c, 0x8B);
    put1(c, (uint8_t)(0x80 | (RAX << 3) | 4));
    put1(c, (uint8_t)(4 << 3 | (base & 7)));
    put4(c, disp);
}

static void push(code *c, int r)
{
    if (r >= 8) put1(c, 0x41);
    put1(c, (uint8_t)(0x50 + (r & 7)));
}

static void pop(code *c, int r)
{
    if (r >= 8) put1(c, 0x41);
    put1(c, (uint8_t)(0x58 + (r & 7)));
}

/* mov dst, src (64-bit registers). */
static void mov_rr(code *c, int dst, int src)
{
    put1(c, (uint8_t)(0x48 | (src >> 3) << 2 | (dst >> 3)));
    put1(c, 0x89);
    put1(c, (uint8_t)(0xC0 | (src & 7) << 3 | (dst & 7)));
}

static void call_abs(code *c, const void *fn)
{
    uint64_t a = (uint64_t)(uintptr_t)fn;
    put1(c, 0x48);
    put1(c, 0xB8);                       /* mov rax, imm64 */
    for (int i = 0; i < 8; i++) put1(c, (uint8_t)(a >> (8 * i)));
    put1(c, 0xFF);
    put1(c, 0xD0);                       /* call rax */
}

/* The frame: the constants the body reads from memory (written once per
 * call, so that the loop spends no instructions making them), then a slot
 * per body value. */
/* -0.0, ~-0.0, 1.0 in every lane; K_LIVE (fn_tail only): all ones in the
 * lanes below nbytes, zero above. */
enum { K_SIGN, K_ABS, K_ONE, K_LIVE, NCONST };
static int32_t konst(const regs *r, int k) { return r->vbytes * k; }
static int32_t slot(const regs *r, int v) { return r->vbytes * (NCONST + (int32_t)v); }

static void vmov_load(regs *r, int reg, int base, int index, int32_t disp)
{
    vrm(r->c, 1, r->pp, r->wig, 0x10, reg, 0, base, index, disp);
}

static void vmov_store(regs *r, int reg, int base, int index, int32_t disp)
{
    vrm(r->c, 1, r->pp, r->wig, 0x11, reg, 0, base, index, disp);
}

/* vmovntps / vmovntpd [base + index + disp], reg: a store that bypasses
 * the caches (the address must be aligned to the vector). */
static void vmov_stream(regs *r, int reg, int base, int index, int32_t disp)
{
    vrm(r->c, 1, r->pp, r->wig, 0x2B, reg, 0, base, index, disp);
}

/* vbroadcastss / vbroadcastsd reg, [base + disp] (the double form is W0
 * under VEX, W1 under EVEX). */
static void vbroadcast(regs *r, int reg, int base, int32_t disp)
{
    vrm(r->c, 2, 1, r->wig, r->pp ? 0x19 : 0x18, reg, 0, base, NO_INDEX, disp);
}

static void vmovaps(regs *r, int dst, int src) { vrr(r->c, 1, 0, 0, 0x28, dst, 0, src); }

/* Bitwise d = a & k, a ^ k or a | k with constant k of the frame: the FP
 * forms under VEX, the AVX-512F integer forms under EVEX (the FP ones need
 * AVX-512DQ). */
enum { BIT_AND, BIT_XOR, BIT_OR };
static void bitwise_const(regs *r, int kind, int d, int a, int k)
{
    static const uint8_t fp[] = {0x54, 0x57, 0x56}, integer[] = {0xDB, 0xEF, 0xEB};
    if (r->c->evex) vrm(r->c, 1, 1, 0, integer[kind], d, a, RSP, NO_INDEX, konst(r, k));
    else vrm(r->c, 1, r->pp, 0, fp[kind], d, a, RSP, NO_INDEX, konst(r, k));
}

/* Every bit of reg set: vpcmpeqd reg, reg, reg (VEX), vpternlogd with
 * table 0xFF (EVEX, where compares write mask registers). The CPU knows
 * vpcmpeqd's result does not depend on reg, but not vpternlogd's: reg is
 * zeroed by vpxord first, or the constant would wait for reg's last
 * writer. */
static void all_ones(regs *r, int reg)
{
    if (r->c->evex) {
        vrr(r->c, 1, 1, 0, 0xEF, reg, reg, reg);
        vrr(r->c, 3, 1, 0, 0x25, reg, reg, reg);
        put1(r->c, 0xFF);
    } else {
        vrr(r->c, 1, 1, 0, 0x76, reg, reg, reg);
    }
}

/* Shifts every lane of reg in place by imm: ext 6 left, 2 right logical,
 * 4 right arithmetic; dwords for single, qwords for double. */
static void shift(regs *r, int ext, int reg, int imm)
{
    vrr(r->c, 1, 1, r->wig, r->pp && ext != 4 ? 0x73 : 0x72, ext, reg, reg);
    put1(r->c, (uint8_t)imm);
}

/* Fills the frame's constants, through registers 0-2: -0.0 is all ones
 * shifted left by 31 (or 63), its complement all ones shifted right by 1,
 * and 1.0 all ones shifted right, then left, to the exponent bits of one
 * (0x3F800000 or 0x3FF0000000000000). */
static void emit_constants(regs *r)
{
    all_ones(r, 0);
    shift(r, 6, 0, r->pp ? 63 : 31);
    vmov_store(r, 0, RSP, NO_INDEX, konst(r, K_SIGN));
    all_ones(r, 1);
    shift(r, 2, 1, 1);
    vmov_store(r, 1, RSP, NO_INDEX, konst(r, K_ABS));
    all_ones(r, 2);
    shift(r, 2, 2, r->pp ? 54 : 25);
    shift(r, 6, 2, r->pp ? 52 : 23);
    vmov_store(r, 2, RSP, NO_INDEX, konst(r, K_ONE));
}

/* K_LIVE from nbytes (r14), lane by lane: lane i is live when r14 > i * es. */
static void emit_live_mask(regs *r)
{
    int es = r->pp ? 8 : 4;
    for (int i = 0; i < r->vbytes / es; i++) {
        put(r->c, (const uint8_t[]){0x31, 0xC0}, 2);               /* xor eax, eax */
        put(r->c, (const uint8_t[]){0x49, 0x81, 0xFE}, 3);         /* cmp r14, imm32 */
        put4(r->c, i * es);
        put(r->c, (const uint8_t[]){0x0F, 0x97, 0xC0}, 3);         /* seta al */
        put(r->c, (const uint8_t[]){0x48, 0xF7, 0xD8}, 3);         /* neg rax */
        if (r->pp) put1(r->c, 0x48);
        put(r->c, (const uint8_t[]){0x89, 0x84, 0x24}, 3);         /* mov [rsp + disp32], */
        put4(r->c, konst(r, K_LIVE) + i * es);                     /*     eax or rax */
    }
}

/* ---- registers ------------------------------------------------------------ */

static bool is_vector_load(const regs *r, int v)
{
    const ot_insn *in = &r->insns[v];
    return in->code == OT_I_LOAD && !(in->scalar & 8);
}

static bool in_body(const regs *r, int v) { return r->j->body[v]; }

/* Brings value v into register reg: a stack slot for body values, the
 * input at the loop offset or a broadcast for prelude values. */
static void fetch(regs *r, int v, int reg)
{
    if (in_body(r, v)) {
        vmov_load(r, reg, RSP, NO_INDEX, slot(r, v));
        return;
    }
    load_ptr(r->c, R12, 8 * v);
    if (is_vector_load(r, v)) vmov_load(r, reg, RAX, RBX, 0);
    else vbroadcast(r, reg, RAX, 0);
}

static void bind(regs *r, int v, int reg)
{
    r->val_of[reg] = v;
    r->reg_of[v] = (int16_t)reg;
}

static void release(regs *r, int reg)
{
    if (r->val_of[reg] >= 0) r->reg_of[r->val_of[reg]] = -1;
    r->val_of[reg] = -1;
}

/* Makes sure a body value in reg survives losing it. */
static void save(regs *r, int reg)
{
    int v = r->val_of[reg];
    if (v >= 0 && in_body(r, v) && !r->spilled[v]) {
        vmov_store(r, reg, RSP, NO_INDEX, slot(r, v));
        r->spilled[v] = true;
    }
}

/* A free register, else the one whose value is read last; keep is a mask of
 * registers the current instruction already uses. */
static int take(regs *r, unsigned keep)
{
    int best = -1;
    for (int g = 0; g < NREG; g++) {
        if (keep >> g & 1) continue;
        if (r->val_of[g] < 0) return g;
        if (best < 0 || r->last[r->val_of[g]] > r->last[r->val_of[best]]) best = g;
    }
    save(r, best);
    release(r, best);
    return best;
}

static int use(regs *r, int v, unsigned keep)
{
    if (r->reg_of[v] >= 0) return r->reg_of[v];
    int g = take(r, keep);
    fetch(r, v, g);
    bind(r, v, g);
    return g;
}

/* Frees the registers of values whose last reader is position pos. */
static void retire(regs *r, int pos)
{
    for (int g = 0; g < NREG; g++)
        if (r->val_of[g] >= 0 && r->last[r->val_of[g]] <= pos) release(r, g);
}

/* ---- instructions ----------------------------------------------------------- */

/* The table's jit column (src/ops.def) of an op, OT__JIT_NONE if none. */
static int lowering(int op)
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
        fetch(r, v, reg);
        return;
    }
    if (r->last[v] > pos) save(r, g);
    if (g != reg) vmovaps(r, reg, g);
}

/* In fn_tail, zeroes the lanes past nbytes of reg, which holds value v,
 * where v is a vector (a broadcast scalar fills the tile kernels' padding
 * too). */
static bool zero_dead(const regs *r, int v)
{
    return r->tail && (in_body(r, v) || is_vector_load(r, v));
}

static void dead_lanes_zero(regs *r, int v, int reg)
{
    if (zero_dead(r, v)) bitwise_const(r, BIT_AND, reg, reg, K_LIVE);
}

/* A call: the callee clobbers every vector register, so values read later
 * are saved; the operands go to registers 0 and 1 (ymm or zmm), the result
 * comes back in register 0. */
static void emit_call(regs *r, int pos, const void *fn, int a, int b)
{
    for (int g = 0; g < NREG; g++) {
        int v = r->val_of[g];
        if (v >= 0 && v != a && v != b && r->last[v] > pos) save(r, g);
    }
    if (b >= 0 && r->reg_of[b] == 0) {   /* b sits where a goes: via the stack */
        save(r, 0);
        release(r, 0);
    }
    place(r, pos, a, 0);
    if (b >= 0) place(r, pos, b, 1);
    for (int g = 0; g < NREG; g++) release(r, g);
    dead_lanes_zero(r, a, 0);
    if (b >= 0) dead_lanes_zero(r, b, 1);
    call_abs(r->c, fn);
    bind(r, pos, 0);
}

/* sig and sig2 as the tile kernels compute them: e = exp(-|x|) by a call,
 * then (x < 0 ? e : 1) / (1 + e) inline, x's sign bit choosing: vblendvp
 * under VEX; under EVEX the sign spread over the lane by an arithmetic
 * shift, then vpternlogd's bit select (table 0xCA: a ? b : c). */
static void emit_sig(regs *r, int pos, const void *exp_fn, int x)
{
    int rx = use(r, x, 0);
    int nabs = take(r, 1u << rx);
    int from = rx;
    if (zero_dead(r, x)) {
        bitwise_const(r, BIT_AND, nabs, rx, K_LIVE);
        from = nabs;
    }
    bitwise_const(r, BIT_OR, nabs, from, K_SIGN);                       /* -|x| */
    for (int g = 0; g < NREG; g++) {
        int v = r->val_of[g];
        if (v >= 0 && (v == x || r->last[v] > pos)) save(r, g);
    }
    if (nabs != 0) vmovaps(r, 0, nabs);
    for (int g = 0; g < NREG; g++) release(r, g);
    call_abs(r->c, exp_fn);
    fetch(r, x, 1);
    vmov_load(r, 2, RSP, NO_INDEX, konst(r, K_ONE));
    vrr(r->c, 1, r->pp, r->wig, 0x58, 3, 2, 0);                           /* 1 + e */
    if (r->c->evex) {
        shift(r, 4, 1, r->pp ? 63 : 31);
        vrr(r->c, 3, 1, 0, 0x25, 1, 0, 2);                              /* vpternlogd */
        put1(r->c, 0xCA);
        vrr(r->c, 1, r->pp, r->wig, 0x5E, 0, 1, 3);
    } else {
        vrr(r->c, 3, 1, 0, r->pp ? 0x4B : 0x4A, 0, 2, 0);               /* vblendvp */
        put1(r->c, 1 << 4);                                             /* mask: ymm1 */
        vrr(r->c, 1, r->pp, r->wig, 0x5E, 0, 0, 3);
    }
    bind(r, pos, 0);
}

static void emit_unary(regs *r, int pos, int op, int a)
{
    int ra = use(r, a, 0);
    retire(r, pos);
    int d = r->val_of[ra] < 0 ? ra : take(r, 1u << ra);
    switch (op) {
    case OT_OP_NEG: bitwise_const(r, BIT_XOR, d, ra, K_SIGN); break;
    case OT_OP_ABS: bitwise_const(r, BIT_AND, d, ra, K_ABS); break;
    case OT_OP_SQRT: vrr(r->c, 1, r->pp, r->wig, 0x51, d, 0, ra); break;
    default: vrr(r->c, 1, r->pp, r->wig, 0x59, d, ra, ra); break;          /* sqr */
    }
    bind(r, pos, d);
}

static void emit_binary(regs *r, int pos, int op, int a, int b)
{
    int ra = use(r, a, 0);
    int rb = use(r, b, 1u << ra);
    retire(r, pos);
    int d = r->val_of[ra] < 0 ? ra : r->val_of[rb] < 0 ? rb : take(r, 1u << ra | 1u << rb);
    static const uint8_t opc[] = {[OT_OP_ADD] = 0x58, [OT_OP_MUL] = 0x59, [OT_OP_SUB] = 0x5C,
                                  [OT_OP_DIV] = 0x5E};
    vrr(r->c, 1, r->pp, r->wig, opc[op], d, ra, rb);
    bind(r, pos, d);
}

/* a*b + c, or c - a*b as (-a)*b + c: the tile kernels' own instructions
 * (vfnmadd231 is the same function, but emulators such as valgrind give
 * its exact zeros the other sign), into a register holding c. */
static void emit_fma(regs *r, int pos, bool sub, int a, int b, int cv)
{
    int ra = use(r, a, 0);
    int rb = use(r, b, 1u << ra);
    int rc = use(r, cv, 1u << ra | 1u << rb);
    unsigned keep = 1u << ra | 1u << rb | 1u << rc;
    retire(r, pos);
    int d = rc;
    if (r->val_of[rc] >= 0) {
        d = take(r, keep);
        vmovaps(r, d, rc);
    }
    int fa = ra;
    if (sub) {
        fa = take(r, keep | 1u << d);
        bitwise_const(r, BIT_XOR, fa, ra, K_SIGN);                      /* -a */
    }
    vrr(r->c, 2, 1, r->w, 0xB8, d, fa, rb);                             /* vfmadd231 */
    bind(r, pos, d);
}

static bool is_sig(const ot_insn *in)
{
    return in->code == OT_I_UNARY && lowering(in->op) == OT__JIT_SIG;
}

/* Whether a body insn calls a function (else it is all inline). */
static bool needs_call(const ot_insn *in)
{
    return (in->code == OT_I_UNARY || in->code == OT_I_BINARY) &&
           lowering(in->op) != OT__JIT_INLINE;
}

/* The function a body insn calls (sig and sig2: their base, exp or exp2),
 * NULL where it calls none or the table has none. */
static const void *callee(const ot_kernels *kt, int acc, const ot_insn *in)
{
    if (!needs_call(in)) return NULL;
    if (is_sig(in)) return kt->vfn1[acc][ot__op(in->op)->jit_base][in->kd];
    return in->code == OT_I_UNARY ? kt->vfn1[acc][in->op][in->kd] : kt->vfn2[in->op][in->kd];
}

static void emit_insn(regs *r, int pos, int acc)
{
    const ot_insn *in = &r->insns[pos];
    const int16_t *arg = r->j->arg[pos];
    const void *fn = callee(r->j->kt, acc, in);
    if (is_sig(in)) emit_sig(r, pos, fn, arg[0]);
    else if (fn) emit_call(r, pos, fn, arg[0], in->code == OT_I_BINARY ? arg[1] : -1);
    else if (in->code == OT_I_UNARY) emit_unary(r, pos, in->op, arg[0]);
    else if (in->code == OT_I_BINARY) emit_binary(r, pos, in->op, arg[0], arg[1]);
    else emit_fma(r, pos, in->op == OT_OP_SUB, arg[0], arg[1], arg[2]);
}

/* ---- the function ----------------------------------------------------------- */

/* fn(in, out, nbytes): rbx walks the byte offset 0, V, 2V, ... < nbytes (V
 * the vector's bytes); r12 holds in, r13 out, r14 nbytes; the frame below
 * rbp is V-aligned. With stream, outputs are written by non-temporal
 * stores, fenced before the return so that they are ordered before
 * whatever the caller does next (another thread reading them included). */
static void emit_function(regs *r, int acc, int frame, bool stream)
{
    code *c = r->c;
    const ot_jit *j = r->j;
    push(c, RBP);
    mov_rr(c, RBP, RSP);
    push(c, RBX);
    push(c, R12);
    push(c, R13);
    push(c, R14);
    push(c, R15);
    put(c, (const uint8_t[]){0x48, 0x81, 0xEC}, 3);            /* sub rsp, frame */
    put4(c, frame);
    put(c, (const uint8_t[]){0x48, 0x83, 0xE4, (uint8_t)-r->vbytes}, 4);    /* and rsp, -V */
    mov_rr(c, R12, 7);                                         /* rdi */
    mov_rr(c, R13, 6);                                         /* rsi */
    mov_rr(c, R14, 2);                                         /* rdx */
    emit_constants(r);
    if (r->tail) emit_live_mask(r);
    put(c, (const uint8_t[]){0x31, 0xDB}, 2);                  /* xor ebx, ebx */
    put(c, (const uint8_t[]){0x4D, 0x85, 0xF6}, 3);            /* test r14, r14 */
    put(c, (const uint8_t[]){0x0F, 0x84}, 2);                  /* jz done */
    size_t jz_at = c->n;
    put4(c, 0);
    size_t loop = c->n;
    for (int g = 0; g < NREG; g++) r->val_of[g] = -1;
    for (int v = 0; v < j->ninsn; v++) {
        r->reg_of[v] = -1;
        r->spilled[v] = false;
    }
    for (int pos = 0; pos < j->ninsn; pos++)
        if (j->body[pos]) emit_insn(r, pos, acc);
    for (int q = 0; q < j->nout; q++) {
        if (j->out_val[q] < 0 || !j->out_vector[q]) continue;
        bool again = false;   /* one value is one buffer: exec passes one address */
        for (int p = 0; p < q; p++) again |= j->out_vector[p] && j->out_val[p] == j->out_val[q];
        if (again) continue;
        int g = use(r, j->out_val[q], 0);
        load_ptr(c, R13, 8 * q);
        if (stream) vmov_stream(r, g, RAX, RBX, 0);
        else vmov_store(r, g, RAX, RBX, 0);
    }
    put(c, (const uint8_t[]){0x48, 0x83, 0xC3, (uint8_t)r->vbytes}, 4);     /* add rbx, V */
    put(c, (const uint8_t[]){0x4C, 0x39, 0xF3}, 3);            /* cmp rbx, r14 */
    put(c, (const uint8_t[]){0x0F, 0x82}, 2);                  /* jb loop */
    put4(c, (int32_t)((int64_t)loop - (int64_t)(c->n + 4)));
    if (!c->oom) {
        int32_t rel = (int32_t)(c->n - (jz_at + 4));
        memcpy(c->b + jz_at, &rel, 4);
    }
    if (stream) put(c, (const uint8_t[]){0x0F, 0xAE, 0xF8}, 3);  /* sfence */
    put(c, (const uint8_t[]){0xC5, 0xF8, 0x77}, 3);            /* vzeroupper */
    put(c, (const uint8_t[]){0x48, 0x8D, 0x65, 0xD8}, 4);      /* lea rsp, [rbp - 40] */
    pop(c, R15);
    pop(c, R14);
    pop(c, R13);
    pop(c, R12);
    pop(c, RBX);
    pop(c, RBP);
    put1(c, 0xC3);
}

/* ---- which kernels ------------------------------------------------------------ */

/* Fills j's value map: arg (the value each operand reads: buffers are
 * reused, values are instruction indices), body and the outputs. False
 * where the program has something generated code does not do. */
static bool map_values(ot_jit *j, const ot_kernel *k, int acc)
{
    int *writer = ot__malloc(sizeof *writer * (size_t)(k->nbuf > 0 ? k->nbuf : 1));
    int *writes = ot__calloc((size_t)(k->nbuf > 0 ? k->nbuf : 1), sizeof *writes);
    bool ok = writer && writes;
    int kd = -1;
    for (int b = 0; ok && b < k->nbuf; b++) writer[b] = -1;
    for (int i = 0; ok && i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        const int16_t ops[3] = {in->a, in->b, in->c};
        for (int o = 0; o < 3; o++) {
            j->arg[i][o] = -1;
            if (ops[o] < 0) continue;
            if (ops[o] >= k->nbuf || writer[ops[o]] < 0) ok = false;
            else j->arg[i][o] = (int16_t)writer[ops[o]];
        }
        bool body = in->code != OT_I_LOAD && in->code != OT_I_PARAM && !(in->scalar & 8);
        j->body[i] = body;
        if (body) {
            if (kd < 0) kd = in->kd;
            ok = ok && in->kd == kd && kd != OT_KD_I32 && in->code != OT_I_CAST;
            ok = ok && (!needs_call(in) || callee(j->kt, acc, in));
        }
        if (in->code == OT_I_LOAD && !(in->scalar & 8)) {
            const ot_view *v = &k->loads[in->arg];
            if (kd < 0) kd = ot__kd(v->dtype);
            ok = ok && ot__kd(v->dtype) == kd && v->dtype != OT_I32;
        }
        if (ok && in->dst >= 0 && in->dst < k->nbuf) {
            writer[in->dst] = i;
            writes[in->dst]++;
        } else {
            ok = false;
        }
    }
    /* Scalar operands are broadcast in the body's dtype. */
    for (int i = 0; ok && i < k->ninsn; i++)
        for (int o = 0; o < 3 && j->body[i]; o++) {
            int v = j->arg[i][o];
            const ot_insn *src = &k->insns[v >= 0 ? v : 0];
            int vkd = src->code == OT_I_LOAD ? ot__kd(k->loads[src->arg].dtype) : src->kd;
            if (v >= 0 && !j->body[v] && vkd != kd) ok = false;
        }
    /* A gathered load fills its own tile buffer before the loop runs: no
     * other instruction may write that buffer. */
    for (int i = 0; ok && i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code != OT_I_LOAD || (in->scalar & 8)) continue;
        bool strided = k->ndim > 0 && k->loads[in->arg].strides[k->ndim - 1] != 1;
        if (strided && writes[in->dst] > 1) ok = false;
    }
    j->nout = 1 + k->nxstore;
    for (int q = 0; ok && q < j->nout; q++) {
        int buf = q == 0 ? k->result : k->xstores[q - 1].result;
        bool scalar = q == 0 ? k->result_scalar : k->xstores[q - 1].scalar;
        j->out_val[q] = buf >= 0 && buf < k->nbuf ? (int16_t)writer[buf] : -1;
        ok = j->out_val[q] >= 0;
        j->out_vector[q] = ok && !scalar && (j->body[j->out_val[q]] ||
                                             !(k->insns[j->out_val[q]].scalar & 8));
    }
    j->kd = kd < 0 ? OT_KD_F32 : kd;
    free(writer);
    free(writes);
    return ok;
}

/* The last body position reading each value; outputs live to the end. */
static void last_uses(const ot_jit *j, int16_t *last)
{
    for (int v = 0; v < j->ninsn; v++) last[v] = -1;
    for (int i = 0; i < j->ninsn; i++)
        for (int o = 0; o < 3 && j->body[i]; o++)
            if (j->arg[i][o] >= 0) last[j->arg[i][o]] = (int16_t)i;
    for (int q = 0; q < j->nout; q++)
        if (j->out_val[q] >= 0) last[j->out_val[q]] = (int16_t)j->ninsn;
}

/* Code goes into one mapping per plan, written and then made executable,
 * so that a plan of thousands of kernels costs one mapping, not thousands. */
#define CODE_ALIGN 64

bool ot__jit_install(ot_jit *const *jits, int n, ot_jit_map *map)
{
    size_t total = 0, page = 4096;
    for (int i = 0; i < n; i++)
        if (jits[i]) total += (jits[i]->code_len + CODE_ALIGN - 1) / CODE_ALIGN * CODE_ALIGN;
    *map = (ot_jit_map){NULL, 0};
    if (total == 0) return true;
    size_t size = (total + page - 1) / page * page;
    if (ot__alloc_should_fail()) return false;
    char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (!jits[i]) continue;
        memcpy(m + at, jits[i]->code, jits[i]->code_len);
        at += (jits[i]->code_len + CODE_ALIGN - 1) / CODE_ALIGN * CODE_ALIGN;
    }
    if (mprotect(m, size, PROT_READ | PROT_EXEC) != 0) {
        munmap(m, size);
        return false;
    }
    at = 0;
    for (int i = 0; i < n; i++) {
        if (!jits[i]) continue;
        void *entry = m + at;
        memcpy(&jits[i]->fn, &entry, sizeof entry);   /* object to function pointer */
        if (jits[i]->stream_at) {
            entry = m + at + jits[i]->stream_at;
            memcpy(&jits[i]->fn_stream, &entry, sizeof entry);
        }
        jits[i]->fn_tail = jits[i]->fn;
        if (jits[i]->tail_at) {
            entry = m + at + jits[i]->tail_at;
            memcpy(&jits[i]->fn_tail, &entry, sizeof entry);
        }
        at += (jits[i]->code_len + CODE_ALIGN - 1) / CODE_ALIGN * CODE_ALIGN;
        free(jits[i]->code);
        jits[i]->code = NULL;
    }
    *map = (ot_jit_map){m, size};
    return true;
}

void ot__jit_unmap(ot_jit_map *map)
{
    if (map->base) munmap(map->base, map->bytes);
    *map = (ot_jit_map){NULL, 0};
}

/* One op alone is already one pass in the tile kernels: generated code
 * gains there only by streaming the output of an op that is bound by
 * memory, not by a call (sig alone measured 5-10% slower as code). */
static bool calls(const ot_jit *j, const ot_kernel *k)
{
    for (int i = 0; i < k->ninsn; i++)
        if (j->body[i] && needs_call(&k->insns[i])) return true;
    return false;
}

static bool worth_it(const ot_jit *j, const ot_kernel *k, bool stream)
{
    int nbody = 0;
    for (int i = 0; i < k->ninsn; i++) nbody += j->body[i];
    return nbody >= 2 || (nbody == 1 && stream && !calls(j, k));
}

bool ot__jit_available(const ot_kernels *kt)
{
    return kt->vfn1[0][OT_OP_EXP][0] && (kt->vbytes == 32 || kt->vbytes == 64);
}

ot_jit *ot__jit_build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream)
{
    /* Reductions stay with the interpreter: softmax's sum(exp(x - m)) ran
     * 2-7% slower as generated code (measured), elementwise kernels faster. */
    if (k->kind != OT_KER_EW || k->ninsn < 1 || k->ninsn > OT_JIT_MAX_INSN ||
        !ot__jit_available(kt))
        return NULL;
    ot_jit *j = ot__calloc(1, sizeof *j);
    code c = {0};
    regs r = {.c = &c, .j = j, .insns = k->insns};
    bool ok = j != NULL;
    if (ok) {
        j->kt = kt;
        j->ninsn = k->ninsn;
        j->arg = ot__malloc(sizeof *j->arg * (size_t)k->ninsn);
        j->body = ot__calloc((size_t)k->ninsn, sizeof *j->body);
        r.reg_of = ot__malloc(sizeof *r.reg_of * (size_t)k->ninsn);
        r.spilled = ot__malloc((size_t)k->ninsn);
        r.last = ot__malloc(sizeof *r.last * (size_t)k->ninsn);
        ok = j->arg && j->body && r.reg_of && r.spilled && r.last && map_values(j, k, acc) &&
             worth_it(j, k, stream);
    }
    if (ok) {
        r.pp = j->kd == OT_KD_F64;
        r.w = r.pp;
        r.vbytes = kt->vbytes;
        c.evex = kt->vbytes == 64;
        r.wig = c.evex ? r.w : 0;
        last_uses(j, r.last);
        emit_function(&r, acc, slot(&r, k->ninsn) + r.vbytes, false);
        if (stream) {
            while (c.n % 16) put1(&c, 0xCC);               /* int3 padding */
            j->stream_at = c.n;
            emit_function(&r, acc, slot(&r, k->ninsn) + r.vbytes, true);
        }
        if (calls(j, k)) {
            while (c.n % 16) put1(&c, 0xCC);
            j->tail_at = c.n;
            r.tail = true;
            emit_function(&r, acc, slot(&r, k->ninsn) + r.vbytes, false);
        }
        ok = !c.oom;
    }
    if (ok) {
        j->code = c.b;
        j->code_len = c.n;
    } else {
        free(c.b);
    }
    free(r.reg_of);
    free(r.spilled);
    free(r.last);
    if (!ok) {
        ot__jit_free(j);
        return NULL;
    }
    return j;
}

void ot__jit_free(ot_jit *j)
{
    if (!j) return;
    free(j->code);
    free(j->arg);
    free(j->body);
    free(j);
}

#else /* no generated code on this platform */

bool ot__jit_available(const ot_kernels *kt)
{
    (void)kt;
    return false;
}

ot_jit *ot__jit_build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream)
{
    (void)k, (void)kt, (void)acc, (void)stream;
    return NULL;
}

void ot__jit_free(ot_jit *j) { (void)j; }

bool ot__jit_install(ot_jit *const *jits, int n, ot_jit_map *map)
{
    (void)jits, (void)n;
    *map = (ot_jit_map){NULL, 0};
    return true;
}

void ot__jit_unmap(ot_jit_map *map) { (void)map; }

#endif
