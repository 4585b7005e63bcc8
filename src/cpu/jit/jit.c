/*
 * jit.c - generated code for register programs: each elementwise kernel
 * whose vector part is f32 or f64 arithmetic becomes one x86-64 loop over
 * vectors that keeps every value in a register (ymm, VEX-encoded, for the
 * AVX2 table; zmm, EVEX-encoded, for the AVX-512 one), so a chain of cheap
 * ops costs no pass over tile buffers (the interpreter in exec.c reads and
 * writes a buffer per op). Reductions (sum, mean, max, min over rows or
 * everything) get a loop that also folds the values into accumulators;
 * see "reductions" below. add, sub, mul, div, fma, fnma, sqrt, sqr, neg,
 * abs, the selects and compares (relu, recip, rint, finite, sgn, eq ...
 * ge, minimum, maximum) are emitted inline, f32 exp, log, safelog and tanh
 * too (SLEEF 3.5's steps at either accuracy, see exp_steps), sig and sig2
 * as their exp with the select and divide inline; every other op calls the table's vector function
 * (vfn1/vfn2: SLEEF itself, or the tile kernels' own element functions),
 * so results are bitwise those of the interpreter of the same table, NaNs
 * included: add, mul and fma keep the operand order that the tile
 * kernels pin (isa_avx2.h), a first, and c - a*b is (-a)*b + c there too.
 *
 * The program's "prelude" (loads, parameters and scalar instructions) stays
 * with exec.c, which passes a pointer per value: a vector input is read at
 * the loop offset, a scalar one is broadcast once before the loop into a
 * stack slot, and vector pointers are loaded into registers there too. Outputs are stored at the end
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

/* Whether k reads the memory it writes (softmax's divide rescales its
 * output in place): those lines are in the cache already, and streaming
 * them out was 30% slower (W5). exec.c checks leaves written in place at
 * run time. */
static bool reads_own_output(const ot_kernel *k)
{
    for (int l = 0; l < k->nload; l++)
        if (k->loads[l].space == k->store.space && k->loads[l].index == k->store.index)
            return true;
    return false;
}

/* The bytes one run of k moves, its loads and stores counted at the
 * result's width: what has to fit in the cache for its output to stay
 * there. */
static size_t moved_bytes(const ot_kernel *k)
{
    size_t n = (k->result_kd == OT_KD_F64 ? 8 : 4) * (size_t)(1 + k->nxstore);
    for (int i = 0; i < k->ninsn; i++)
        if (k->insns[i].code == OT_I_LOAD && !(k->insns[i].scalar & 8)) n += k->result_kd == OT_KD_F64 ? 8 : 4;
    for (int d = 0; d < k->ndim; d++) n *= (size_t)k->dims[d];
    return n;
}

/* Streams when the data a kernel moves, not its output alone, passes the
 * threshold: a*b + c over 4M f32 writes 16 MB but moves 64 MB, more than a
 * 32 MB last-level cache holds, and ordinary stores then ran it at 70% of
 * the streamed rate (optree-bench, 2e6..5e6 elements). */
bool ot__jit_streams(const ot_kernel *k, size_t stream_bytes)
{
    if (!stream_bytes || k->kind != OT_KER_EW || reads_own_output(k)) return false;
    return moved_bytes(k) >= stream_bytes && memory_bound(k);
}

#if defined(__x86_64__) && defined(__linux__)
#include <sys/mman.h>

#define NREG 16
#define RAX 0
#define RCX 1
#define RSP 4
#define RBX 3
#define RBP 5
#define R8 8
#define R12 12
#define R13 13
#define R14 14
#define R15 15
#define NO_INDEX (-1)

typedef struct code {
    uint8_t *b;
    size_t n, cap;
    bool oom;                   /* out of memory, or of registers (take): no code */
    bool evex;                  /* 512-bit EVEX encodings, else 256-bit VEX */
} code;

/* The f32 constants of SLEEF 3.5's expf, logf and tanhf u10 and logf and
 * tanhf u35 (fn_bits), the frame's K_FN vectors; F_ONE names K_ONE among
 * them. */
enum { E_RLN2, E_L2U, E_L2L, E_C0, E_C1, E_C2, E_C3, E_C4, E_C5, E_LO, E_HI, E_INF,
       L_4_3, L_128, L_LN2HI, L_LN2LO, L_M1, L_P0, L_P1, L_P2, L_FIX, L_FLTMIN, L_2P64, L_FF,
       L_BIASD, L_BIASN, L_QNAN, L_NINF, T_P0, T_P1, T_P2, T_P3, T_P4, T_BIG, T_TWO,
       M_P0, M_P1, M_P2, M_P3, M_128LN2, M_FIX, S_FLOOR, NFNK,
       F_ONE = NFNK };

/* expf: 1/ln 2; ln 2 in two parts, negated (Cody and Waite); the reduced
 * argument's polynomial from its highest coefficient to 1/2; the bounds
 * below which the result is 0 (-104) and above which it is inf (100); inf.
 * logf: 4/3 (the mantissa's range is [3/4, 3/2)); 128, the exponent of
 * inf; ln 2 in two parts; -1; the polynomial in the square of (m-1)/(m+1);
 * vfixupimmps's table for 0, negatives, inf and NaN (AVX-512); for AVX2,
 * the smallest normal, 2^64 for scaling denormals, the exponent mask, the
 * exponent biases for both, the NaN and -inf. tanhf: its exp's polynomial
 * (with expf's 1/ln 2, ln 2 and 1/2) and the bound past which it is +-1;
 * tanhf u35's 2 (its expm1 takes expf's polynomial, its 1 and -1 logf's).
 * logf u35: its polynomial in y^2 (then 2), 128 ln 2 (e ln 2 where
 * vgetexpps gives e = inf) and its vfixupimmps table. safelog's floor,
 * exp(-50) in f32 (tile.inc's K_EXPM50). */
static const uint32_t fn_bits[NFNK] = {
    0x3FB8AA3B, 0xBF317200, 0xB5BFBE8E, 0x39502BDA, 0x3AB696C9, 0x3C0888A6, 0x3D2AAA7A,
    0x3E2AAAAB, 0x3F000000, 0xC2D00000, 0x42C80000, 0x7F800000,
    0x3FAAAAAB, 0x43000000, 0x3F317218, 0xB102E308, 0xBF800000, 0x3E9AFF5C, 0x3ECC99CA,
    0x3F2AAADA, 0x02530400, 0x00800000, 0x5F800000, 0x000000FF, 0xFFFFFF41, 0xFFFFFF81,
    0x7FC00000, 0xFF800000, 0x394FB7FF, 0x3AB6BF7C, 0x3C08890D, 0x3D2AAA5C, 0x3E2AAAAA,
    0x410AA123, 0x40000000, 0x3E750690, 0x3E920364, 0x3ECCCD92, 0x3F2AAAAB, 0x42B17218,
    0x00500000, 0x1B692BEB};

/* The constants each inline function reads, in the order that they get
 * the registers zmm16-31 (the rest are read from the frame); AVX2's log
 * reads log_vex_consts too. */
static const int8_t exp_consts[] = {E_C1, E_C2, E_C3, E_C4, E_C5, E_L2L, E_RLN2, E_L2U, E_C0,
                                    F_ONE, E_LO, E_HI, E_INF};
static const int8_t log_consts[] = {L_P1, L_P2, L_LN2LO, L_4_3, L_M1, L_LN2HI, L_P0, L_FIX,
                                    L_128, F_ONE, E_INF};
static const int8_t log_vex_consts[] = {L_FLTMIN, L_2P64, L_FF, L_BIASD, L_BIASN, L_QNAN, L_NINF};
static const int8_t tanh_consts[] = {T_P1, T_P2, T_P3, T_P4, E_C5, E_RLN2, E_L2U, E_L2L, T_P0,
                                     F_ONE, T_BIG};
static const int8_t log35_consts[] = {M_P1, M_P2, M_P3, T_TWO, L_M1, F_ONE, L_LN2HI, L_4_3,
                                      M_P0, M_128LN2, M_FIX, E_INF};
static const int8_t safelog_consts[] = {S_FLOOR};
static const int8_t tanh35_consts[] = {E_C1, E_C3, E_C5, E_L2U, E_L2L, E_RLN2, E_C0, E_C2, E_C4,
                                       F_ONE, L_M1, T_TWO, T_BIG};
#define NCREG 16

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
    int nreg;                   /* the allocator hands out registers below this */
    int32_t disp;               /* bytes from the loop offset to this copy's vector */
    bool pad;                   /* this copy reads and writes exec's padded tail */
    int red;                    /* a reduction's OT_OP_SUM (mean too), OT_OP_MAX or
                                   OT_OP_MIN; -1 for elementwise code */
    unsigned fns;               /* bit f: the body has inline function f (FN_EXP
                                   ...; K_FN holds their constants) */
    uint64_t fn_used;           /* bit e: the body reads K_FN constant e */
    int8_t creg[NFNK + 1];      /* EVEX code that calls nothing: the zmm
                                   (16-31, past the allocator's) holding
                                   each K_FN constant, or 0: the frame */
    bool calls;                 /* the body calls a function, which clobbers every
                                   vector register and the caller-saved GPRs: a
                                   reduction's accumulators then live in the
                                   frame, and only r14 and r15 keep pointers */
    int16_t ptr_of[9];          /* what ptr_gpr[i] points at: vector input v, or
                                   output q as -1 - q */
    int nptr;
    bool splat;                 /* broadcast values wait in their slots */
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

/* The prefix and opcode: three-byte VEX with length l (0: 128 bits or
 * scalar, 1: 256), or EVEX with L'L = 2 (512 bits) and mask's z, b and
 * aaa bits. map 1 = 0F, 2 = 0F38, 3 = 0F3A. VEX has registers 0-15, EVEX
 * 0-31: R' and V' extend reg and vvvv, and a register rm's bit 4 comes in
 * x's bit 3 (EVEX's X), as vrr passes it. */
static void prefix_k(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                     int b, uint8_t op, uint8_t mask)
{
    uint8_t rxb = (uint8_t)((!(reg & 8)) << 7 | (!(x & 8)) << 6 | (!(b & 8)) << 5);
    if (evex) {
        put1(c, 0x62);
        put1(c, (uint8_t)(rxb | (!(reg & 16)) << 4 | map));
        put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | 1 << 2 | pp));
        put1(c, (uint8_t)(0x40 | (!(vvvv & 16)) << 3 | mask));
    } else {
        put1(c, 0xC4);
        put1(c, (uint8_t)(rxb | map));
        put1(c, (uint8_t)(w << 7 | (~vvvv & 15) << 3 | l << 2 | pp));
    }
    put1(c, op);
}

static void prefix(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                   int b, uint8_t op)
{
    prefix_k(c, evex, l, map, pp, w, reg, vvvv, x, b, op, 0);
}

/* A whole vector: 256-bit VEX or 512-bit EVEX, as the table. Packed
 * double ops take W = 1 under EVEX, where VEX ignores W, so callers pass
 * r->wig for those. */
static void vex(code *c, int map, int pp, int w, int reg, int vvvv, int x, int b, uint8_t op)
{
    prefix(c, c->evex, 1, map, pp, w, reg, vvvv, x, b, op);
}

/* ModRM and SIB for [base + index + disp32]: always SIB and disp32, which
 * encodes every base (rsp, rbp, r12 and r13 included) and is never scaled
 * by EVEX (only its disp8 is). */
static void mem_operand(code *c, int reg, int base, int index, int32_t disp)
{
    put1(c, (uint8_t)(0x80 | (reg & 7) << 3 | 4));
    put1(c, (uint8_t)((index == NO_INDEX ? 4 : (index & 7)) << 3 | (base & 7)));
    put4(c, disp);
}

/* op reg, vvvv, rm (vector registers). */
static void vrr(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm)
{
    vex(c, map, pp, w, reg, vvvv, rm >> 1 & 8, rm, op);
    put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

/* op reg, vvvv, [base + index + disp]. */
static void vrm(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int base,
                int index, int32_t disp)
{
    vex(c, map, pp, w, reg, vvvv, index == NO_INDEX ? 0 : index, base, op);
    mem_operand(c, reg, base, index, disp);
}

/* EVEX forms whose writes are masked by k1-k7: lanes the mask clears
 * become zero (zeroing) or keep the destination's value. 512 bits; W1
 * for the packed-double forms. */
static uint8_t evex_mask(int k, bool zeroing) { return (uint8_t)((zeroing ? 0x80 : 0) | k); }

/* EVEX's embedded broadcast: a memory operand of one 4-byte element read
 * into every lane (one load where a whole zmm is two on Zen 4). */
#define EVEX_BCST 0x10

static void vrr_k(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm, int k,
                  bool zeroing)
{
    prefix_k(c, true, 1, map, pp, w, reg, vvvv, rm >> 1 & 8, rm, op, evex_mask(k, zeroing));
    put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

static void vrm_k(code *c, int map, int pp, int w, uint8_t op, int reg, int base, int32_t disp,
                  int k, bool zeroing)
{
    prefix_k(c, true, 1, map, pp, w, reg, 0, 0, base, op, evex_mask(k, zeroing));
    mem_operand(c, reg, base, NO_INDEX, disp);
}

/* The VEX forms at length l, W0, on either table: a reduction's last steps
 * work on halves of a vector and on scalars, which EVEX encodes only with
 * AVX-512VL, and VEX runs on every AVX-512 CPU. Map 0F. */
static void xrr(code *c, int l, int pp, uint8_t op, int reg, int vvvv, int rm)
{
    prefix(c, false, l, 1, pp, 0, reg, vvvv, 0, rm, op);
    put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

static void xrm(code *c, int l, int pp, uint8_t op, int reg, int base, int32_t disp)
{
    prefix(c, false, l, 1, pp, 0, reg, 0, 0, base, op);
    mem_operand(c, reg, base, NO_INDEX, disp);
}

/* op reg, [base + disp] (or op [base + disp], reg) on 64-bit registers. */
static void gpr_mem(code *c, uint8_t op, int reg, int base, int32_t disp)
{
    put1(c, (uint8_t)(0x48 | (reg >> 3) << 2 | (base >> 3)));
    put1(c, op);
    mem_operand(c, reg, base, NO_INDEX, disp);
}

/* op rm, reg on 64-bit registers (mov 0x89, add 0x01, sub 0x29, cmp 0x39). */
static void gpr_rr(code *c, uint8_t op, int rm, int reg)
{
    put1(c, (uint8_t)(0x48 | (reg >> 3) << 2 | (rm >> 3)));
    put1(c, op);
    put1(c, (uint8_t)(0xC0 | (reg & 7) << 3 | (rm & 7)));
}

/* mov rax, [base + disp]: a pointer out of the in or out array. */
static void load_ptr(code *c, int base, int32_t disp) { gpr_mem(c, 0x8B, RAX, base, disp); }

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
static void mov_rr(code *c, int dst, int src) { gpr_rr(c, 0x89, dst, src); }

/* Conditional jumps (jcc rel32), cc the condition. A jump forward returns
 * where its rel32 goes, for land() to fill in once the target is reached. */
enum { JB = 2, JE = 4, JBE = 6, JA = 7 };

static void jump_op(code *c, int cc)
{
    put1(c, 0x0F);
    put1(c, (uint8_t)(0x80 | cc));
}

static size_t jump_fwd(code *c, int cc)
{
    jump_op(c, cc);
    size_t at = c->n;
    put4(c, 0);
    return at;
}

static void land(code *c, size_t at)
{
    if (c->oom) return;
    int32_t rel = (int32_t)(c->n - (at + 4));
    memcpy(c->b + at, &rel, 4);
}

static void jump_back(code *c, int cc, size_t to)
{
    jump_op(c, cc);
    put4(c, (int32_t)((int64_t)to - (int64_t)(c->n + 4)));
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
/* -0.0, ~-0.0, 1.0 in every lane; K_LIVE (fn_tail and a reduction's tail):
 * all ones in the lanes below nbytes, zero above. A reduction's: K_IDENT
 * its identity (max -inf, min +inf) in every lane and K_DEAD in the lanes
 * past the tail; when the body calls, four accumulators and four NaN notes
 * (see note_nan); K_MISC, two vectors of scalars (MISC_*); K_FN, the
 * inline functions' constants (fn_bits), those the body reads. */
enum { K_SIGN, K_ABS, K_ONE, K_LIVE, K_IDENT, K_DEAD, K_ACC, K_NAN = K_ACC + 4, K_MISC = K_NAN + 4,
       K_FN = K_MISC + 2, NCONST = K_FN + NFNK };
static int32_t konst(const regs *r, int k) { return r->vbytes * k; }
static int32_t slot(const regs *r, int v) { return r->vbytes * (NCONST + (int32_t)v); }
static int32_t fk(const regs *r, int e) { return e == F_ONE ? konst(r, K_ONE) : konst(r, K_FN + e); }

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

/* Bitwise d = a & k, a ^ k, a | k or ~a & k with constant k of the frame:
 * the FP forms under VEX, the AVX-512F integer forms under EVEX (the FP
 * ones need AVX-512DQ). */
enum { BIT_AND, BIT_XOR, BIT_OR, BIT_ANDN };
static void bitwise_const(regs *r, int kind, int d, int a, int k)
{
    static const uint8_t fp[] = {0x54, 0x57, 0x56, 0x55}, integer[] = {0xDB, 0xEF, 0xEB, 0xDF};
    if (r->c->evex) vrm(r->c, 1, 1, 0, integer[kind], d, a, RSP, NO_INDEX, konst(r, k));
    else vrm(r->c, 1, r->pp, 0, fp[kind], d, a, RSP, NO_INDEX, konst(r, k));
}

/* Every bit of reg clear: vxorps (VEX), vpxord (EVEX, whose vxorps needs
 * AVX-512DQ). The CPU knows the result does not depend on reg. */
static void zero_reg(regs *r, int reg)
{
    if (r->c->evex) vrr(r->c, 1, 1, 0, 0xEF, reg, reg, reg);
    else vrr(r->c, 1, 0, 0, 0x57, reg, reg, reg);
}

/* Every bit of reg set: vpcmpeqd reg, reg, reg (VEX), vpternlogd with
 * table 0xFF (EVEX, where compares write mask registers). The CPU knows
 * vpcmpeqd's result does not depend on reg, but not vpternlogd's: reg is
 * zeroed first, or the constant would wait for reg's last writer. */
static void all_ones(regs *r, int reg)
{
    if (r->c->evex) {
        zero_reg(r, reg);
        vrr(r->c, 3, 1, 0, 0x25, reg, reg, reg);
        put1(r->c, 0xFF);
    } else {
        vrr(r->c, 1, 1, 0, 0x76, reg, reg, reg);
    }
}

/* Shifts every lane of reg in place by imm: ext 6 left, 2 right logical,
 * 4 right arithmetic; dwords for single, qwords for double. */
static void shift_to(regs *r, int ext, int dst, int src, int imm)
{
    vrr(r->c, 1, 1, r->wig, r->pp && ext != 4 ? 0x73 : 0x72, ext, dst, src);
    put1(r->c, (uint8_t)imm);
}

static void shift(regs *r, int ext, int reg, int imm) { shift_to(r, ext, reg, reg, imm); }

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
    for (int e = 0; e < NFNK; e++) {
        if (!(r->fn_used >> e & 1)) continue;
        put(r->c, (const uint8_t[]){0xC7, 0x84, 0x24}, 3);       /* mov dword [rsp + disp32], */
        put4(r->c, fk(r, e));
        put4(r->c, (int32_t)fn_bits[e]);                           /*     imm32 */
        if (r->c->evex) continue;                                  /* read by broadcast */
        vbroadcast(r, 0, RSP, fk(r, e));
        vmov_store(r, 0, RSP, NO_INDEX, fk(r, e));
    }
    for (int e = 0; e <= NFNK; e++)
        if (r->creg[e]) vbroadcast(r, r->creg[e], RSP, fk(r, e));
}

/* K_LIVE from the tail's bytes in register n (r14 in fn_tail), lane by
 * lane: lane i is live when n > i * es. */
static void emit_live_mask(regs *r, int n)
{
    int es = r->pp ? 8 : 4;
    for (int i = 0; i < r->vbytes / es; i++) {
        put(r->c, (const uint8_t[]){0x31, 0xC0}, 2);               /* xor eax, eax */
        put1(r->c, (uint8_t)(0x48 | (n >> 3)));                    /* cmp n, imm32 */
        put1(r->c, 0x81);
        put1(r->c, (uint8_t)(0xF8 | (n & 7)));
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

/* Registers a loop keeps its first vector inputs' and outputs' pointers
 * in, rather than loading each from in[] or out[] per vector: r14 and r15,
 * which calls preserve (a reduction keeps nbytes and the tile in its frame;
 * an elementwise loop keeps nbytes in r14 and starts at r15), then where
 * the body calls nothing the caller-saved ones (rax is scratch, rcx the
 * tail's length). */
static const int ptr_gpr[9] = {R14, R15, 7, 6, 2, 8, 9, 10, 11};   /* ... rdi rsi rdx r8-r11 */

/* The register holding input v's (or output -1 - v's) pointer, or -1. */
static int ptr_reg(const regs *r, int v)
{
    for (int i = 0; i < r->nptr; i++)
        if (r->ptr_of[i] == v) return ptr_gpr[i];
    return -1;
}

/* Brings value v into register reg: a stack slot for body values, the
 * input at this copy's offset (or in exec's padded tail) or a broadcast
 * for prelude values. */
static void fetch(regs *r, int v, int reg)
{
    if (in_body(r, v)) {
        vmov_load(r, reg, RSP, NO_INDEX, slot(r, v));
        return;
    }
    bool vec = is_vector_load(r, v);
    if (!vec && r->splat) {
        vmov_load(r, reg, RSP, NO_INDEX, slot(r, v));
        return;
    }
    int base = vec && !r->pad ? ptr_reg(r, v) : -1;
    if (base >= 0) {
        vmov_load(r, reg, base, RBX, r->disp);
        return;
    }
    load_ptr(r->c, R12, 8 * (vec && r->pad ? r->j->ninsn + v : v));
    if (vec) vmov_load(r, reg, RAX, r->pad ? NO_INDEX : RBX, r->disp);
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
    for (int g = 0; g < r->nreg; g++) {
        if (keep >> g & 1) continue;
        if (r->val_of[g] < 0) return g;
        if (best < 0 || r->last[r->val_of[g]] > r->last[r->val_of[best]]) best = g;
    }
    if (best < 0) {             /* every register kept: no code (the interpreter runs) */
        r->c->oom = true;
        return 0;
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

/* n registers for an inline sequence's temporaries, none in keep. */
static void scratch(regs *r, unsigned keep, int t[], int n)
{
    for (int i = 0; i < n; i++) {
        t[i] = take(r, keep);
        keep |= 1u << t[i];
    }
}

/* op reg, vvvv, K_FN constant e in every lane: its register (creg), else
 * an embedded broadcast under EVEX, the frame's whole vector under VEX. */
static void vrc(regs *r, int map, int pp, uint8_t op, int reg, int vvvv, int e)
{
    int32_t disp = fk(r, e);
    if (r->creg[e]) {
        vrr(r->c, map, pp, 0, op, reg, vvvv, r->creg[e]);
        return;
    }
    if (!r->c->evex) {
        vrm(r->c, map, pp, 0, op, reg, vvvv, RSP, NO_INDEX, disp);
        return;
    }
    prefix_k(r->c, true, 1, map, pp, 0, reg, vvvv, 0, RSP, op, EVEX_BCST);
    mem_operand(r->c, reg, RSP, NO_INDEX, disp);
}

/* reg = K_FN constant e (vbroadcastss under EVEX), masked by k1 when k. */
static void load_const(regs *r, int reg, int e, bool k)
{
    int32_t disp = fk(r, e);
    if (r->creg[e]) vrr_k(r->c, 1, 0, 0, 0x28, reg, 0, r->creg[e], k ? 1 : 0, false); /* vmovaps */
    else if (!r->c->evex) vmov_load(r, reg, RSP, NO_INDEX, disp);
    else if (k) vrm_k(r->c, 2, 1, 0, 0x18, reg, RSP, disp, 1, false);
    else vbroadcast(r, reg, RSP, disp);
}

/* exp of register x into t[0] (x is kept), t[1..3] clobbered: SLEEF 3.5's
 * expf u10 step for step, each rounding and operand order as its AVX-512
 * and AVX2 builds have them, so that the bits are the table's own (NaN
 * payloads included: tests/test_jit.c compares every f32). q = rint(x /
 * ln 2); s = x - q ln 2 in two parts; u = 1 + s + s^2 p(s); the result is
 * u 2^(q/2) 2^(q - q/2), then 0 below -104 and inf above 100. Inline, the
 * loop calls nothing: no spills around a call, constants stay in
 * registers or the frame, and W2 ran 9% faster than the same loop calling SLEEF. */
static int exp_steps(regs *r, int x, const int t[4])
{
    code *c = r->c;
    int q = t[0], f = t[1], s = t[2], u = t[3];
    vrc(r, 1, 0, 0x59, q, x, E_RLN2);                                 /* x / ln 2 */
    vrr(c, 1, 1, 0, 0x5B, q, 0, q);                                   /* vcvtps2dq */
    vrr(c, 1, 0, 0, 0x5B, f, 0, q);                                   /* vcvtdq2ps */
    load_const(r, s, E_L2U, false);
    vrr(c, 2, 1, 0, 0xA8, s, f, x);                                   /* f*s + x */
    vrc(r, 2, 1, 0xB8, s, f, E_L2L);                                  /* f*L2L + s */
    load_const(r, f, E_C0, false);
    for (int e = E_C1; e <= E_C5; e++) vrc(r, 2, 1, 0xA8, f, s, e);   /* s*f + c */
    vrr(c, 1, 0, 0, 0x59, u, s, s);
    vrr(c, 2, 1, 0, 0xA8, u, f, s);                                   /* f*s^2 + s */
    vrc(r, 1, 0, 0x58, u, u, F_ONE);
    shift_to(r, 4, f, q, 1);                                          /* m = q >> 1 */
    shift_to(r, 6, s, f, 23);
    vrc(r, 1, 1, 0xFE, s, s, F_ONE);                                  /* 2^m: + 1.0's bits */
    vrr(c, 1, 0, 0, 0x59, u, u, s);
    vrr(c, 1, 1, 0, 0xFA, q, q, f);                                   /* q - m */
    shift_to(r, 6, q, q, 23);
    vrc(r, 1, 1, 0xFE, q, q, F_ONE);
    if (c->evex) {
        vrc(r, 1, 0, 0xC2, 1, x, E_LO);                               /* k1 = !(x < -104) */
        put1(c, 5);
        vrr_k(c, 1, 0, 0, 0x59, q, u, q, 1, true);                    /* u 2^(q-m), else 0 */
        vrc(r, 1, 0, 0xC2, 1, x, E_HI);                               /* k1 = x > 100 */
        put1(c, 0x0E);
        load_const(r, q, E_INF, true);                                /* inf there */
    } else {
        vrc(r, 1, 0, 0xC2, f, x, E_LO);                               /* x < -104 */
        put1(c, 1);
        vrr(c, 1, 0, 0, 0x59, q, u, q);
        vrr(c, 1, 0, 0, 0x55, q, f, q);                               /* andn: 0 there */
        vrc(r, 1, 0, 0xC2, f, x, E_HI);                               /* x > 100 */
        put1(c, 0x0E);
        vrc(r, 3, 1, 0x4A, q, q, E_INF);                              /* vblendvps: inf */
        put1(c, (uint8_t)(f << 4));
    }
    return q;
}

/* dst = a op b for add (0x58), mul (0x59), sub (0x5C), div (0x5E): f32. */
static void arith(regs *r, uint8_t op, int dst, int a, int b) { vrr(r->c, 1, 0, 0, op, dst, a, b); }

/* FMA forms on f32 registers: 213 dst = vvvv*dst + rm, 231 dst =
 * vvvv*rm + dst; the opcodes name fmadd, fmsub and fnmadd of each. */
enum { FMADD213 = 0xA8, FMSUB213 = 0xAA, FNMADD213 = 0xAC, FMADD231 = 0xB8, FNMADD231 = 0xBC };
static void fma3(regs *r, uint8_t op, int dst, int vvvv, int rm) { vrr(r->c, 2, 1, 0, op, dst, vvvv, rm); }

/* The body both builds share: m in [3/4, 3/2) (or m scaled) and e with
 * e ln 2 = (hi, lo) given, log = e ln 2 + 2 atanh((m-1)/(m+1)), in
 * double-float steps. t: m in t[1], hi in t[3], lo in t[2] on entry
 * (named as SLEEF's AVX-512 build has them); the result in t[0]. */
static void log_tail(regs *r, const int t[9])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C, DIV = 0x5E };
    int z1 = t[0], z2 = t[1], z3 = t[2], z4 = t[3], z5 = t[4], z6 = t[5], z7 = t[6], z8 = t[7],
        z9 = t[8];
    load_const(r, z1, L_M1, false);
    load_const(r, z5, F_ONE, false);
    arith(r, ADD, z6, z2, z1);                                        /* m - 1 */
    arith(r, ADD, z7, z6, z5);
    arith(r, SUB, z8, z6, z7);
    arith(r, SUB, z8, z1, z8);
    arith(r, SUB, z7, z2, z7);
    arith(r, ADD, z7, z7, z8);                                        /* (z6, z7): m - 1 */
    arith(r, ADD, z8, z2, z5);                                        /* m + 1 */
    arith(r, ADD, z1, z8, z1);
    arith(r, SUB, z9, z8, z1);
    arith(r, SUB, z9, z5, z9);
    arith(r, SUB, z1, z2, z1);
    arith(r, ADD, z1, z1, z9);                                        /* (z8, z1): m + 1 */
    arith(r, DIV, z2, z5, z8);
    arith(r, MUL, z9, z6, z2);                                        /* x = (m-1)/(m+1) */
    fma3(r, FMSUB213, z6, z2, z9);
    fma3(r, FNMADD213, z8, z2, z5);
    fma3(r, FNMADD231, z8, z2, z1);
    fma3(r, FMADD231, z6, z2, z7);
    fma3(r, FMADD231, z6, z9, z8);                                    /* (z9, z6): x */
    arith(r, MUL, z1, z9, z9);                                        /* x^2 */
    load_const(r, z2, L_P0, false);
    vrc(r, 2, 1, FMADD213, z2, z1, L_P1);
    vrc(r, 2, 1, FMADD213, z2, z1, L_P2);
    arith(r, ADD, z5, z9, z9);
    arith(r, ADD, z6, z6, z6);                                        /* (z5, z6): 2x */
    arith(r, ADD, z7, z4, z5);
    arith(r, SUB, z4, z4, z7);
    arith(r, ADD, z4, z5, z4);
    arith(r, ADD, z3, z3, z4);
    arith(r, ADD, z3, z6, z3);                                        /* (z7, z3): e ln 2 + 2x */
    arith(r, MUL, z1, z9, z1);
    arith(r, MUL, z1, z1, z2);                                        /* x^3 p(x^2) */
    arith(r, ADD, z2, z7, z1);
    arith(r, SUB, z4, z7, z2);
    arith(r, ADD, z1, z1, z4);
    arith(r, ADD, z1, z3, z1);
    arith(r, ADD, z1, z2, z1);
}

/* AVX2's logf (u10 and u35 alike) up to e and m: x < FLT_MIN scaled by
 * 2^64 into d, e (an int, its bias 127 or 127 + 64) in t[0] and m in
 * [3/4, 3/2) in t[1], both from d's bits; t[2], t[4], t[5] clobbered. */
static void log_vex_split(regs *r, int x, int d, const int t[6])
{
    code *c = r->c;
    vrc(r, 1, 0, 0xC2, t[0], x, L_FLTMIN);                            /* x < FLT_MIN */
    put1(c, 1);
    vrc(r, 1, 0, 0x59, t[1], x, L_2P64);
    vrr(c, 3, 1, 0, 0x4A, d, x, t[1]);                                /* d: x, denormals scaled */
    put1(c, (uint8_t)(t[0] << 4));
    vrc(r, 1, 0, 0x59, t[1], d, L_4_3);
    shift_to(r, 2, t[1], t[1], 23);
    vrc(r, 1, 1, 0xDB, t[1], t[1], L_FF);                             /* biased exponent */
    shift_to(r, 6, t[2], t[1], 23);
    vrr(c, 1, 1, 0, 0xFA, t[2], d, t[2]);
    load_const(r, t[4], L_BIASD, false);
    load_const(r, t[5], L_BIASN, false);
    vrr(c, 3, 1, 0, 0x4A, t[0], t[5], t[4]);                          /* the bias */
    put1(c, (uint8_t)(t[0] << 4));
    vrr(c, 1, 1, 0, 0xFE, t[0], t[1], t[0]);                          /* e */
    vrc(r, 1, 1, 0xFE, t[1], t[2], F_ONE);                            /* m */
}

/* AVX2's logf's last selects on res: inf for d = inf, NaN below 0 and for
 * NaN, -inf for 0 (d: the argument as log_vex_split scaled it; m and z
 * clobbered). */
static void log_vex_specials(regs *r, int res, int d, int m, int z)
{
    code *c = r->c;
    vrc(r, 1, 0, 0xC2, m, d, E_INF);                                  /* d == inf */
    put1(c, 0);
    vrc(r, 3, 1, 0x4A, res, res, E_INF);
    put1(c, (uint8_t)(m << 4));
    zero_reg(r, z);
    vrr(c, 1, 0, 0, 0xC2, m, z, d);                                   /* !(0 <= d): NaN */
    put1(c, 6);
    vrc(r, 3, 1, 0x4A, res, res, L_QNAN);
    put1(c, (uint8_t)(m << 4));
    vrr(c, 1, 0, 0, 0xC2, m, d, z);                                   /* d == 0: -inf */
    put1(c, 0);
    vrc(r, 3, 1, 0x4A, res, res, L_NINF);
    put1(c, (uint8_t)(m << 4));
}

/* log of register x into t[0] (x kept, t[1..9] clobbered): SLEEF 3.5's
 * logf u10 as each build has it. AVX-512 takes e and m by vgetexpps and
 * vgetmantps (denormals included) and mends 0, negatives, inf and NaN by
 * vfixupimmps; AVX2 scales denormals by 2^64, takes e and m from the bits
 * and mends those cases by compares and blends. Calling nothing, as exp. */
static int log_steps(regs *r, int x, const int t[10])
{
    code *c = r->c;
    int z1 = t[0], z2 = t[1], z3 = t[2], z4 = t[3];
    if (c->evex) {
        vrc(r, 1, 0, 0x59, z1, x, L_4_3);
        vrr(c, 2, 1, 0, 0x42, z1, 0, z1);                             /* vgetexpps: e */
        vrc(r, 1, 0, 0xC2, 1, z1, E_INF);                             /* k1 = e == inf */
        put1(c, 0);
        load_const(r, z1, L_128, true);
        vrr(c, 3, 1, 0, 0x26, z2, 0, x);                              /* vgetmantps: m */
        put1(c, 0x0B);
        load_const(r, z3, L_LN2HI, false);
        arith(r, 0x59, z4, z1, z3);
        fma3(r, FMSUB213, z3, z1, z4);
        vrc(r, 2, 1, FMADD231, z3, z1, L_LN2LO);                      /* (z4, z3): e ln 2 */
        log_tail(r, t);
        vrc(r, 3, 1, 0x54, z1, x, L_FIX);                             /* vfixupimmps */
        put1(c, 0);
        return z1;
    }
    int d = t[9];
    log_vex_split(r, x, d, t);
    vrr(c, 1, 0, 0, 0x5B, t[4], 0, t[0]);                             /* vcvtdq2ps */
    load_const(r, t[5], L_LN2HI, false);
    arith(r, 0x59, t[3], t[4], t[5]);
    fma3(r, FMSUB213, t[5], t[4], t[3]);
    load_const(r, t[2], L_LN2LO, false);
    fma3(r, FMADD213, t[2], t[4], t[5]);                              /* (t3, t2): e ln 2 */
    log_tail(r, t);
    log_vex_specials(r, t[0], d, t[1], t[2]);
    return t[0];
}

/* log of register x at u35 into t[0] (x kept, t[1..3] clobbered, and
 * t[4..6] by AVX2): SLEEF 3.5's logf u35, e ln 2 + y p(y^2) with
 * y = (m-1)/(m+1) in plain f32, e and m as logf u10 takes them (AVX-512
 * patches e ln 2 where vgetexpps gives e = inf before it fixes up). */
static int log35_steps(regs *r, int x, const int t[7])
{
    enum { ADD = 0x58, MUL = 0x59, DIV = 0x5E };
    code *c = r->c;
    int e = t[0], m = t[1], y = t[2], p = t[3], d = t[6];
    if (c->evex) {
        vrc(r, 1, 0, MUL, e, x, L_4_3);
        vrr(c, 2, 1, 0, 0x42, e, 0, e);                               /* vgetexpps: e */
        vrc(r, 1, 0, 0xC2, 1, e, E_INF);                              /* k1 = e == inf */
        put1(c, 0);
        vrr(c, 3, 1, 0, 0x26, m, 0, x);                               /* vgetmantps: m */
        put1(c, 0x0B);
    } else {
        log_vex_split(r, x, d, t);
        vrr(c, 1, 0, 0, 0x5B, e, 0, e);                               /* vcvtdq2ps */
    }
    vrc(r, 1, 0, ADD, y, m, L_M1);
    vrc(r, 1, 0, ADD, m, m, F_ONE);
    arith(r, DIV, y, y, m);                                           /* y */
    arith(r, MUL, m, y, y);
    load_const(r, p, M_P0, false);
    for (int k = M_P1; k <= M_P3; k++) vrc(r, 2, 1, FMADD213, p, m, k);
    vrc(r, 2, 1, FMADD213, p, m, T_TWO);
    vrc(r, 1, 0, MUL, e, e, L_LN2HI);                                 /* e ln 2 */
    if (c->evex) load_const(r, e, M_128LN2, true);
    fma3(r, FMADD231, e, y, p);
    if (c->evex) {
        vrc(r, 3, 1, 0x54, e, x, M_FIX);                              /* vfixupimmps */
        put1(c, 0);
        return e;
    }
    log_vex_specials(r, e, d, m, y);
    return e;
}

/* safelog's argument: maximum(x, exp(-50)) into y as tile.inc's safelog
 * takes it (x below the floor becomes the floor; NaN fails the compare
 * and stays); log's steps (u10 or u35) then run on y. m: VEX's mask. */
static int safelog_clamp(regs *r, int x, int y, int m)
{
    code *c = r->c;
    if (c->evex) {
        vrc(r, 1, 0, 0xC2, 1, x, S_FLOOR);                            /* k1 = x < floor */
        put1(c, 0x11);
        vmovaps(r, y, x);
        load_const(r, y, S_FLOOR, true);
        return y;
    }
    vrc(r, 1, 0, 0xC2, m, x, S_FLOOR);
    put1(c, 0x11);
    vrc(r, 3, 1, 0x4A, y, x, S_FLOOR);                                /* vblendvps */
    put1(c, (uint8_t)(m << 4));
    return y;
}

/* Knuth's two-sum, given s = a + b: b becomes the rounding error of s
 * (b - (s - a)) + (a - (s - (s - a))); bb and tmp are clobbered (tmp may
 * be s, when s is no longer needed), a is kept. */
static void two_sum_err(regs *r, int s, int a, int b, int bb, int tmp)
{
    arith(r, 0x5C, bb, s, a);
    arith(r, 0x5C, tmp, s, bb);
    arith(r, 0x5C, tmp, a, tmp);
    arith(r, 0x5C, b, b, bb);
    arith(r, 0x58, b, b, tmp);
}

/* (hi, lo) = (xh, xl) * y in double-float: hi rounded, lo its error (by
 * FMA) plus xl * y. */
static void df_mul(regs *r, int hi, int lo, int xh, int xl, int y)
{
    arith(r, 0x59, hi, xh, y);
    vmovaps(r, lo, y);
    fma3(r, FMSUB213, lo, xh, hi);
    fma3(r, FMADD231, lo, xl, y);
}

/* tanh of register x (x kept, t[0..14] clobbered): SLEEF 3.5's tanhf
 * u10, (e^|x| - e^-|x|) / (e^|x| + e^-|x|) in double-float steps, each
 * step the builds' own in their order (both do the same arithmetic; only
 * the last selects differ), in three parts below. */

/* e = e^|x| as a double-float (t[4], t[2]): |x| in t[0], 0 in t[1] (both
 * kept); SLEEF's exp of a double-float argument: Cody-Waite reduction by
 * q = rint(|x| / ln 2), a degree-5 polynomial in double-float, the split
 * 2^q scaling. Its underflow select (argument below -104) is left out:
 * the argument is |x|. */
static void tanh_exp(regs *r, int x, const int t[15])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C };
    code *c = r->c;
    bitwise_const(r, BIT_AND, t[0], x, K_ABS);
    zero_reg(r, t[1]);
    arith(r, ADD, t[2], t[0], t[1]);
    vrc(r, 1, 0, MUL, t[2], t[2], E_RLN2);
    vrr(c, 1, 1, 0, 0x5B, t[2], 0, t[2]);
    vrr(c, 1, 0, 0, 0x5B, t[3], 0, t[2]);
    vrc(r, 1, 0, MUL, t[4], t[3], E_L2U);
    arith(r, ADD, t[5], t[4], t[0]);
    two_sum_err(r, t[5], t[0], t[4], t[6], t[7]);
    arith(r, ADD, t[4], t[4], t[1]);
    vrc(r, 1, 0, MUL, t[3], t[3], E_L2L);
    arith(r, ADD, t[6], t[3], t[5]);
    two_sum_err(r, t[6], t[5], t[3], t[7], t[8]);
    arith(r, ADD, t[3], t[4], t[3]);
    load_const(r, t[4], T_P0, false);
    vrc(r, 2, 1, FMADD213, t[4], t[6], T_P1);
    vrc(r, 2, 1, FMADD213, t[4], t[6], T_P2);
    vrc(r, 2, 1, FMADD213, t[4], t[6], T_P3);
    df_mul(r, t[5], t[7], t[6], t[3], t[4]);
    load_const(r, t[4], T_P4, false);
    arith(r, ADD, t[8], t[5], t[4]);
    two_sum_err(r, t[8], t[5], t[4], t[9], t[10]);
    arith(r, ADD, t[4], t[7], t[4]);
    df_mul(r, t[5], t[7], t[6], t[3], t[8]);
    fma3(r, FMADD231, t[7], t[6], t[4]);
    load_const(r, t[4], E_C5, false);
    arith(r, ADD, t[8], t[5], t[4]);
    arith(r, MUL, t[9], t[6], t[6]);
    arith(r, ADD, t[10], t[6], t[6]);
    arith(r, MUL, t[11], t[9], t[8]);
    arith(r, ADD, t[12], t[6], t[11]);
    arith(r, SUB, t[13], t[12], t[6]);
    arith(r, SUB, t[14], t[12], t[13]);
    arith(r, SUB, t[14], t[6], t[14]);
    fma3(r, FMSUB213, t[6], t[6], t[9]);
    fma3(r, FMADD231, t[6], t[3], t[10]);
    vmovaps(r, t[10], t[8]);
    fma3(r, FMSUB213, t[10], t[9], t[11]);
    fma3(r, FMADD231, t[10], t[8], t[6]);
    two_sum_err(r, t[8], t[5], t[4], t[6], t[8]);
    arith(r, ADD, t[4], t[7], t[4]);
    fma3(r, FMADD231, t[10], t[9], t[4]);
    arith(r, SUB, t[4], t[11], t[13]);
    arith(r, ADD, t[4], t[4], t[14]);
    arith(r, ADD, t[3], t[3], t[10]);
    load_const(r, t[5], F_ONE, false);
    arith(r, ADD, t[3], t[4], t[3]);
    arith(r, ADD, t[4], t[12], t[5]);
    arith(r, SUB, t[6], t[5], t[4]);
    arith(r, ADD, t[6], t[12], t[6]);
    arith(r, ADD, t[3], t[6], t[3]);
    shift_to(r, 4, t[6], t[2], 1);
    load_const(r, t[7], F_ONE, false);
    shift_to(r, 6, t[8], t[6], 23);
    vrr(c, 1, 1, 0, 0xFE, t[8], t[8], t[7]);
    arith(r, MUL, t[4], t[4], t[8]);
    vrr(c, 1, 1, 0, 0xFA, t[2], t[2], t[6]);
    shift_to(r, 6, t[2], t[2], 23);
    vrr(c, 1, 1, 0, 0xFE, t[2], t[2], t[7]);
    arith(r, MUL, t[4], t[4], t[2]);
    arith(r, MUL, t[3], t[3], t[8]);
    arith(r, MUL, t[2], t[3], t[2]);
}

/* (e - 1/e) / (e + 1/e) in double-float: two divides, each refined by
 * FMA; the sum (hi, lo) in (t[4], t[10]). */
static void tanh_ratio(regs *r, const int t[15])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C, DIV = 0x5E };
    arith(r, DIV, t[3], t[5], t[4]);
    vmovaps(r, t[6], t[3]);
    fma3(r, FNMADD213, t[6], t[4], t[5]);
    fma3(r, FNMADD231, t[6], t[2], t[3]);
    arith(r, MUL, t[6], t[3], t[6]);
    bitwise_const(r, BIT_XOR, t[8], t[3], K_SIGN);
    bitwise_const(r, BIT_XOR, t[9], t[6], K_SIGN);
    arith(r, ADD, t[10], t[4], t[8]);
    arith(r, SUB, t[11], t[4], t[10]);
    arith(r, ADD, t[8], t[11], t[8]);
    arith(r, ADD, t[8], t[2], t[8]);
    arith(r, ADD, t[8], t[8], t[9]);
    arith(r, ADD, t[9], t[4], t[3]);
    arith(r, SUB, t[4], t[4], t[9]);
    arith(r, ADD, t[3], t[3], t[4]);
    arith(r, ADD, t[2], t[3], t[2]);
    arith(r, ADD, t[2], t[2], t[6]);
    arith(r, DIV, t[3], t[5], t[9]);
    arith(r, MUL, t[4], t[3], t[10]);
    fma3(r, FMSUB213, t[10], t[3], t[4]);
    fma3(r, FNMADD213, t[9], t[3], t[5]);
    fma3(r, FNMADD231, t[9], t[3], t[2]);
    fma3(r, FMADD231, t[10], t[3], t[8]);
    fma3(r, FMADD231, t[10], t[4], t[9]);
}

/* tanhf's last selects (u10 and u35 alike) on res: 1 where ax = |x| >
 * 8.66 or res is NaN, x's sign, NaN for NaN (m1 and m2 clobbered). */
static void tanh_finish(regs *r, int res, int x, int ax, int m1, int m2)
{
    code *c = r->c;
    if (c->evex) {
        vrr(c, 1, 0, 0, 0xC2, 1, res, res);                           /* k1 = isnan(res) */
        put1(c, 3);
        load_const(r, res, F_ONE, true);
        vrc(r, 1, 0, 0xC2, 1, ax, T_BIG);                             /* k1 = |x| > 8.66 */
        put1(c, 0x0E);
        load_const(r, res, F_ONE, true);
        bitwise_const(r, BIT_AND, m1, x, K_SIGN);
        vrr(c, 1, 1, 0, 0xEF, res, res, m1);                          /* vpxord: x's sign */
        vrr(c, 1, 0, 0, 0xC2, 1, x, x);                               /* k1 = isnan(x) */
        put1(c, 3);
        all_ones(r, m2);
        vrr_k(c, 1, 0, 0, 0x28, res, 0, m2, 1, false);
        return;
    }
    vrc(r, 1, 0, 0xC2, m1, ax, T_BIG);                                /* |x| > 8.66 */
    put1(c, 0x0E);
    vrr(c, 1, 0, 0, 0xC2, m2, res, res);                              /* isnan(res) */
    put1(c, 3);
    vrr(c, 1, 0, 0, 0x56, m1, m1, m2);                                /* vorps */
    vrc(r, 3, 1, 0x4A, res, res, F_ONE);                              /* vblendvps: 1 */
    put1(c, (uint8_t)(m1 << 4));
    bitwise_const(r, BIT_AND, m2, x, K_SIGN);
    vrr(c, 1, 0, 0, 0x57, res, res, m2);                              /* vxorps: x's sign */
    vrr(c, 1, 0, 0, 0xC2, m2, x, x);                                  /* isnan(x) */
    put1(c, 3);
    vrr(c, 1, 0, 0, 0x56, res, res, m2);
}

/* The result into the returned register: hi + lo, then tanh_finish. */
static int tanh_steps(regs *r, int x, const int t[15])
{
    tanh_exp(r, x, t);
    tanh_ratio(r, t);
    arith(r, 0x58, t[11], t[4], t[10]);
    tanh_finish(r, t[11], x, t[0], t[2], t[3]);
    return t[11];
}

/* tanh of register x at u35 into the returned register (x kept, t[0..7]
 * clobbered): SLEEF 3.5's tanhf u35, d / (d + 2) with d = expm1(2|x|),
 * each step as its AVX-512 and AVX2 builds order them (they differ only in
 * the selects). expm1 is expf's reduction and polynomial (Estrin's order
 * here, not Horner's) scaled by 2^q minus 1, or the polynomial alone where
 * q = 0; then tanh_finish (the ratio is NaN where |x| = inf). */
static int tanh35_steps(regs *r, int x, const int t[8])
{
    enum { ADD = 0x58, MUL = 0x59, DIV = 0x5E };
    code *c = r->c;
    int ax = t[0], s = t[1], q = t[2], f = t[3], s4 = t[4], p01 = t[5], p23 = t[6], u = t[7];
    bitwise_const(r, BIT_AND, ax, x, K_ABS);
    arith(r, ADD, s, ax, ax);                                         /* d = 2|x| */
    vrc(r, 1, 0, MUL, q, s, E_RLN2);
    vrr(c, 1, 1, 0, 0x5B, q, 0, q);                                   /* vcvtps2dq */
    vrr(c, 1, 0, 0, 0x5B, f, 0, q);                                   /* vcvtdq2ps */
    vrc(r, 2, 1, FMADD231, s, f, E_L2U);                              /* s = d - q ln 2 */
    vrc(r, 2, 1, FMADD231, s, f, E_L2L);
    arith(r, MUL, f, s, s);                                           /* s^2 */
    arith(r, MUL, s4, f, f);
    load_const(r, p01, E_C0, false);
    vrc(r, 2, 1, FMADD213, p01, s, E_C1);
    load_const(r, p23, E_C2, false);
    vrc(r, 2, 1, FMADD213, p23, s, E_C3);
    load_const(r, u, E_C4, false);
    vrc(r, 2, 1, FMADD213, u, s, E_C5);
    fma3(r, FMADD231, u, f, p23);
    fma3(r, FMADD231, u, s4, p01);
    fma3(r, FMADD213, u, f, s);                                       /* u = s + s^2 p(s) */
    vrc(r, 1, 0, ADD, s, u, F_ONE);
    shift_to(r, 4, f, q, 1);                                          /* m = q >> 1 */
    shift_to(r, 6, s4, f, 23);
    vrc(r, 1, 1, 0xFE, s4, s4, F_ONE);                                /* 2^m */
    arith(r, MUL, s, s, s4);
    vrr(c, 1, 1, 0, 0xFA, f, q, f);                                   /* q - m */
    shift_to(r, 6, f, f, 23);
    vrc(r, 1, 1, 0xFE, f, f, F_ONE);
    arith(r, MUL, s, s, f);
    vrc(r, 1, 0, ADD, s, s, L_M1);                                    /* d = (1 + u) 2^q - 1 */
    if (c->evex) {
        vrr(c, 2, 2, 0, 0x27, 1, q, q);                               /* vptestnmd: k1 = q == 0 */
        vrr_k(c, 1, 0, 0, 0x28, s, 0, u, 1, false);                   /* d = u there */
    } else {
        zero_reg(r, s4);
        vrr(c, 1, 1, 0, 0x76, s4, q, s4);                             /* vpcmpeqd: q == 0 */
        vrr(c, 3, 1, 0, 0x4A, s, s, u);                               /* vblendvps */
        put1(c, (uint8_t)(s4 << 4));
    }
    vrc(r, 1, 0, ADD, f, s, T_TWO);
    arith(r, DIV, s, s, f);                                           /* d / (d + 2) */
    tanh_finish(r, s, x, ax, q, f);
    return s;
}

/* sig whose exp is inline: e = exp(nabs), nabs = -|x| in register nabs,
 * then emit_sig's blend and divide, in registers the allocator gives. */
static void emit_sig_inline(regs *r, int pos, int rx, int nabs)
{
    code *c = r->c;
    int t[4];
    scratch(r, 1u << rx | 1u << nabs, t, 4);
    exp_steps(r, nabs, t);
    int e = t[0], one = t[1], den = t[2], sel = t[3];
    load_const(r, one, F_ONE, false);
    vrr(c, 1, 0, 0, 0x58, den, one, e);                               /* 1 + e */
    if (c->evex) {
        shift_to(r, 4, sel, rx, 31);
        vrr(c, 3, 1, 0, 0x25, sel, e, one);                           /* vpternlogd */
        put1(c, 0xCA);
    } else {
        vrr(c, 3, 1, 0, 0x4A, sel, one, e);                           /* vblendvps */
        put1(c, (uint8_t)(rx << 4));
    }
    vrr(c, 1, 0, 0, 0x5E, e, sel, den);
    retire(r, pos);
    bind(r, pos, e);
}

/* sig and sig2 as the tile kernels compute them: e = exp(-|x|) by a call
 * (or inline: emit_sig_inline),
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
    if (!exp_fn) {
        emit_sig_inline(r, pos, rx, nabs);
        return;
    }
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

/* ---- selects and compares ----------------------------------------------------- */

/* relu, recip, rint, finite, sgn, the compares, minimum and maximum as the
 * tile kernels' element functions compute them (tile.inc's K_FLOAT_OPS over
 * isa_avx2.h and isa_avx512.h): the same compares, blends and constants, so
 * the bits are theirs (selects move operand bits, compares give 1 or +0).
 * Each writes a fresh register of t[] and returns it, the operands kept. A
 * compare lands in vector register m under VEX and in k1 under EVEX. */
typedef int (*unary_steps_fn)(regs *r, int x, const int t[]);

enum { CMP_EQ = 0x00, CMP_UNORD = 0x03, CMP_NEQ_U = 0x04, CMP_NLT_U = 0x15, CMP_LT = 0x11,
       CMP_LE = 0x12, CMP_GE = 0x1D, CMP_GT = 0x1E };

static void compare(regs *r, int m, int a, int b, int pred)
{
    vrr(r->c, 1, r->pp, r->wig, 0xC2, r->c->evex ? 1 : m, a, b);
    put1(r->c, (uint8_t)pred);
}

/* d = 1 where mask m (k1) is set, else +0. */
static void one_if(regs *r, int d, int m)
{
    if (r->c->evex) vrm_k(r->c, 1, r->pp, r->wig, 0x10, d, RSP, konst(r, K_ONE), 1, true);
    else bitwise_const(r, BIT_AND, d, m, K_ONE);
}

/* d = mask m (k1) ? a : b. */
static void blend(regs *r, int d, int b, int a, int m)
{
    if (r->c->evex) {
        vrr_k(r->c, 2, 1, r->wig, 0x65, d, b, a, 1, false);             /* vblendmps/pd */
        return;
    }
    vrr(r->c, 3, 1, 0, r->pp ? 0x4B : 0x4A, d, b, a);                   /* vblendvps/pd */
    put1(r->c, (uint8_t)(m << 4));
}

/* x < 0 ? +0 : x (NaN and -0 stay). */
static int relu_steps(regs *r, int x, const int t[])
{
    zero_reg(r, t[0]);
    if (r->c->evex) {
        compare(r, 0, x, t[0], CMP_NLT_U);
        vrr_k(r->c, 1, r->pp, r->wig, 0x28, t[1], 0, x, 1, true);       /* x where !(x < 0) */
        return t[1];
    }
    compare(r, t[0], x, t[0], CMP_LT);
    vrr(r->c, 1, r->pp, 0, 0x55, t[1], t[0], x);                        /* vandnps */
    return t[1];
}

static int recip_steps(regs *r, int x, const int t[])
{
    vmov_load(r, t[0], RSP, NO_INDEX, konst(r, K_ONE));
    vrr(r->c, 1, r->pp, r->wig, 0x5E, t[0], t[0], x);
    return t[0];
}

/* vroundps / vrndscaleps to nearest, even on ties (imm 8: no exceptions). */
static int rint_steps(regs *r, int x, const int t[])
{
    vrr(r->c, 3, 1, r->wig, r->pp ? 0x09 : 0x08, t[0], 0, x);
    put1(r->c, 8);
    return t[0];
}

/* 1 where |x| < inf: the same set as x - x == 0 (inf - inf and NaN are
 * NaN), which needs no constant for inf in either dtype. */
static int finite_steps(regs *r, int x, const int t[])
{
    vrr(r->c, 1, r->pp, r->wig, 0x5C, t[0], x, x);
    zero_reg(r, t[1]);
    compare(r, t[0], t[0], t[1], CMP_EQ);
    one_if(r, t[0], t[0]);
    return t[0];
}

/* x > 0 ? 1 : x < 0 ? -1 : x + 0. */
static int sgn_steps(regs *r, int x, const int t[])
{
    int z = t[0], s = t[1], m = t[2], c = t[3];
    zero_reg(r, z);
    vrr(r->c, 1, r->pp, r->wig, 0x58, s, x, z);                         /* x + 0 */
    vmov_load(r, c, RSP, NO_INDEX, konst(r, K_ONE));
    bitwise_const(r, BIT_OR, c, c, K_SIGN);                             /* -1 */
    compare(r, m, x, z, CMP_LT);
    blend(r, s, s, c, m);
    vmov_load(r, c, RSP, NO_INDEX, konst(r, K_ONE));
    compare(r, m, x, z, CMP_GT);
    blend(r, s, s, c, m);
    return s;
}

/* 1 or +0 by the ordered compares (ne is unordered: true on NaN). */
static int compare_steps(regs *r, int op, int a, int b, const int t[])
{
    static const uint8_t pred[] = {[OT_OP_EQ] = CMP_EQ, [OT_OP_NE] = CMP_NEQ_U, [OT_OP_LT] = CMP_LT,
                                   [OT_OP_LE] = CMP_LE, [OT_OP_GT] = CMP_GT, [OT_OP_GE] = CMP_GE};
    compare(r, t[0], a, b, pred[op]);
    one_if(r, t[0], t[0]);
    return t[0];
}

/* minimum: (a <= b || isnan(a)) ? a : b; maximum the same with >=. */
static int extremum_steps(regs *r, int op, int a, int b, const int t[])
{
    int pred = op == OT_OP_MINIMUM ? CMP_LE : CMP_GE;
    if (r->c->evex) {
        compare(r, 0, a, b, pred);
        blend(r, t[0], b, a, 0);
        compare(r, 0, a, a, CMP_UNORD);
        vrr_k(r->c, 1, r->pp, r->wig, 0x28, t[0], 0, a, 1, false);      /* a where NaN */
        return t[0];
    }
    compare(r, t[0], a, b, pred);
    compare(r, t[1], a, a, CMP_UNORD);
    vrr(r->c, 1, r->pp, 0, 0x56, t[0], t[0], t[1]);                     /* vorps */
    blend(r, t[1], b, a, t[0]);
    return t[1];
}

/* The unary ops above: the steps and the scratch registers they take. */
static bool unary_steps(int op, unary_steps_fn *fn, int *n)
{
    switch (op) {
    case OT_OP_RELU: *fn = relu_steps, *n = 2; return true;
    case OT_OP_RECIP: *fn = recip_steps, *n = 1; return true;
    case OT_OP_RINT: *fn = rint_steps, *n = 1; return true;
    case OT_OP_FINITE: *fn = finite_steps, *n = 2; return true;
    case OT_OP_SGN: *fn = sgn_steps, *n = 4; return true;
    default: return false;
    }
}

/* fn of value a at body position pos, in n scratch registers; with floor,
 * in one more, fn runs on a clamped to safelog's floor. */
static void emit_unary_steps(regs *r, int pos, int a, unary_steps_fn fn, int n, bool floor)
{
    int ra = use(r, a, 0);
    int t[16];
    scratch(r, 1u << ra, t, n + floor);
    int res = fn(r, floor ? safelog_clamp(r, ra, t[n], t[0]) : ra, t);
    retire(r, pos);
    bind(r, pos, res);
}

static void emit_binary_steps(regs *r, int pos, int op, int a, int b)
{
    int ra = use(r, a, 0);
    int rb = use(r, b, 1u << ra);
    int t[2];
    bool ext = op == OT_OP_MINIMUM || op == OT_OP_MAXIMUM;
    scratch(r, 1u << ra | 1u << rb, t, ext && !r->c->evex ? 2 : 1);
    int res = ext ? extremum_steps(r, op, ra, rb, t) : compare_steps(r, op, ra, rb, t);
    retire(r, pos);
    bind(r, pos, res);
}

static void emit_unary(regs *r, int pos, int op, int a)
{
    unary_steps_fn fn;
    int n;
    if (unary_steps(op, &fn, &n)) {
        emit_unary_steps(r, pos, a, fn, n, false);
        return;
    }
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
    if (op != OT_OP_ADD && op != OT_OP_SUB && op != OT_OP_MUL && op != OT_OP_DIV) {
        emit_binary_steps(r, pos, op, a, b);
        return;
    }
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

/* The SLEEF function insn in is, or (sig) calls, where j's table lets it
 * be emitted inline: f32 exp (one set of steps serves both accuracies),
 * log and tanh (their u10 and u35 steps differ; see exp_steps, log_steps,
 * tanh_steps, log35_steps, tanh35_steps) and safelog (log's steps on its
 * clamped argument). u10's log and tanh take 10 and 15 registers, and a
 * reduction keeps its accumulators in 4 or 8 of the 16: where they do not
 * fit, the reduction is built again calling them (calls_log_tanh). */
enum { FN_CALL, FN_EXP, FN_LOG, FN_TANH, FN_LOG35, FN_TANH35, FN_SAFELOG, FN_SAFELOG35, NFN };
static int inline_fn(const ot_jit *j, const ot_insn *in)
{
    if (!j->kt->inline_sleef || in->code != OT_I_UNARY || in->kd != OT_KD_F32) return FN_CALL;
    if ((is_sig(in) ? ot__op(in->op)->jit_base : in->op) == OT_OP_EXP) return FN_EXP;
    if (j->reduce && j->calls_log_tanh) return FN_CALL;
    if (in->op == OT_OP_TANH) return j->acc == 0 ? FN_TANH : FN_TANH35;
    if (in->op == OT_OP_LOG) return j->acc == 0 ? FN_LOG : FN_LOG35;
    if (in->op == OT_OP_SAFELOG) return j->acc == 0 ? FN_SAFELOG : FN_SAFELOG35;
    return FN_CALL;
}

/* Whether a body insn calls a function (else it is all inline). */
static bool needs_call(const ot_jit *j, const ot_insn *in)
{
    return (in->code == OT_I_UNARY || in->code == OT_I_BINARY) &&
           lowering(in->op) != OT__JIT_INLINE && inline_fn(j, in) == FN_CALL;
}

/* The function a body insn calls (sig and sig2: their base, exp or exp2;
 * a registered op: its vector function for the table's width), NULL where
 * it calls none or there is none. */
static const void *callee(const ot_jit *j, const ot_insn *in)
{
    const ot_kernels *kt = j->kt;
    int acc = j->acc;
    if (!needs_call(j, in)) return NULL;
    const ot_custom *u = ot__custom_insn(in);
    if (u) return (const void *)ot__custom_vfn(u, kt->vbytes, in->kd);   /* NULL: no code */
    if (is_sig(in)) return kt->vfn1[acc][ot__op(in->op)->jit_base][in->kd];
    return in->code == OT_I_UNARY ? kt->vfn1[acc][in->op][in->kd] : kt->vfn2[in->op][in->kd];
}

/* Inline function fn (FN_EXP ...) of value a at body position pos, in
 * as many scratch registers as its steps take (safelog: log's, on its
 * clamped argument). */
static void emit_inline_fn(regs *r, int pos, int fn, int a)
{
    static const unary_steps_fn steps[NFN] = {[FN_EXP] = exp_steps, [FN_LOG] = log_steps,
                                              [FN_TANH] = tanh_steps, [FN_LOG35] = log35_steps,
                                              [FN_TANH35] = tanh35_steps};
    static const int ntemp[NFN] = {[FN_EXP] = 4, [FN_LOG] = 9, [FN_TANH] = 15, [FN_LOG35] = 4,
                                   [FN_TANH35] = 8};
    static const int ntemp_vex[NFN] = {[FN_LOG] = 10, [FN_LOG35] = 7};
    bool floor = fn == FN_SAFELOG || fn == FN_SAFELOG35;
    int base = fn == FN_SAFELOG ? FN_LOG : fn == FN_SAFELOG35 ? FN_LOG35 : fn;
    int n = !r->c->evex && ntemp_vex[base] ? ntemp_vex[base] : ntemp[base];
    emit_unary_steps(r, pos, a, steps[base], n, floor);
}

static void emit_insn(regs *r, int pos)
{
    const ot_insn *in = &r->insns[pos];
    const int16_t *arg = r->j->arg[pos];
    const void *fn = callee(r->j, in);
    int inl = inline_fn(r->j, in);
    if (is_sig(in)) emit_sig(r, pos, fn, arg[0]);
    else if (fn) emit_call(r, pos, fn, arg[0], in->code == OT_I_BINARY ? arg[1] : -1);
    else if (inl != FN_CALL) emit_inline_fn(r, pos, inl, arg[0]);
    else if (in->code == OT_I_UNARY) emit_unary(r, pos, in->op, arg[0]);
    else if (in->code == OT_I_BINARY) emit_binary(r, pos, in->op, arg[0], arg[1]);
    else emit_fma(r, pos, in->op == OT_OP_SUB, arg[0], arg[1], arg[2]);
}

/* ---- the function ----------------------------------------------------------- */

/* The frame below rbp is V-aligned; r12 holds in, r13 out, r14 nbytes,
 * rbx the byte offset that the loop walks. */
static void emit_prologue(regs *r, int frame)
{
    code *c = r->c;
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
}

static void emit_epilogue(code *c)
{
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

/* Forgets what the registers held: a new iteration (or copy) of the body. */
static void reset_regs(regs *r)
{
    for (int g = 0; g < NREG; g++) r->val_of[g] = -1;
    for (int v = 0; v < r->j->ninsn; v++) {
        r->reg_of[v] = -1;
        r->spilled[v] = false;
    }
}

/* Stores the outputs at this copy's offset (or into the tail's pads), each
 * value once: exec passes one address per buffer. A reduction's result,
 * output 0, is folded instead. */
static void emit_stores(regs *r, bool stream)
{
    const ot_jit *j = r->j;
    int first = r->red >= 0;
    for (int q = first; q < j->nout; q++) {
        if (j->out_val[q] < 0 || !j->out_vector[q]) continue;
        bool again = false;
        for (int p = first; p < q; p++) again |= j->out_vector[p] && j->out_val[p] == j->out_val[q];
        if (again) continue;
        int g = use(r, j->out_val[q], 0);
        int base = r->pad ? -1 : ptr_reg(r, -1 - q);
        if (base < 0) load_ptr(r->c, R13, 8 * (r->pad ? j->nout + q : q));
        int index = r->pad ? NO_INDEX : RBX;
        if (stream) vmov_stream(r, g, base < 0 ? RAX : base, index, r->disp);
        else vmov_store(r, g, base < 0 ? RAX : base, index, r->disp);
    }
}

/* fn(in, out, nbytes): rbx walks the byte offset 0, V, 2V, ... < nbytes (V
 * the vector's bytes). With stream, outputs are written by non-temporal
 * stores, not fenced: exec.c fences once after a chunk's last tile (an
 * sfence per call waited for the write-combining buffers to drain 16384
 * times in W9). */
static void emit_pointers(regs *r);
static void emit_splats(regs *r);

/* Before an elementwise loop, the loop's invariants: vector pointers in
 * registers (r14 holds nbytes here, so from r15 on; r15 alone where the body
 * calls a function, which may clobber the others) and every broadcast
 * value in its slot, so that a vector input costs one load per turn, not a
 * pointer load and a load, and a scalar one load, not two (W9's fma:
 * 12 instructions a turn -> 7). */
static void emit_invariants(regs *r)
{
    r->ptr_of[0] = INT16_MIN;   /* r14 */
    r->nptr = 1;
    emit_pointers(r);
    emit_splats(r);
}

static void emit_function(regs *r, int frame, bool stream)
{
    code *c = r->c;
    const ot_jit *j = r->j;
    emit_prologue(r, frame);
    emit_constants(r);
    if (r->tail) emit_live_mask(r, R14);
    emit_invariants(r);
    put(c, (const uint8_t[]){0x31, 0xDB}, 2);                  /* xor ebx, ebx */
    put(c, (const uint8_t[]){0x4D, 0x85, 0xF6}, 3);            /* test r14, r14 */
    size_t done = jump_fwd(c, JE);
    size_t loop = c->n;
    reset_regs(r);
    for (int pos = 0; pos < j->ninsn; pos++)
        if (j->body[pos]) emit_insn(r, pos);
    emit_stores(r, stream);
    put(c, (const uint8_t[]){0x48, 0x83, 0xC3, (uint8_t)r->vbytes}, 4);     /* add rbx, V */
    gpr_rr(c, 0x39, RBX, R14);                                 /* cmp rbx, r14 */
    jump_back(c, JB, loop);
    land(c, done);
    emit_epilogue(c);
    r->nptr = 0;
    r->splat = false;
}

/* ---- reductions ------------------------------------------------------------- */

/*
 * A REDUCE kernel's code, red(in, out, nbytes, tile_bytes, acc), runs the
 * body over nbytes of one row, read and written in place, and folds the
 * result into *acc tile by tile (a tile is tile_bytes, exec's tile), the
 * way exec.c's interpreter folds what kt->sum, max or min return per tile.
 * For a span that ends within a vector, in[ninsn + v] and out[nout + q]
 * are zero-padded copies of the last part of each vector input and output
 * (exec copies the outputs' back). It returns nonzero where max or min met
 * a NaN.
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
enum { ACC_REG = 12, NAN_REG = 8 };

/* K_MISC's scalars: the acc pointer, the end of the tile, *acc's value,
 * nbytes and tile_bytes. */
enum { MISC_ACCP = 0, MISC_END = 8, MISC_ACC = 16, MISC_N = 24, MISC_TILE = 32 };
static int32_t misc(const regs *r, int at) { return konst(r, K_MISC) + at; }

/* The opcode of a reduction's step, packed or scalar: add, max or min. */
static uint8_t red_opcode(int red)
{
    return red == OT_OP_MAX ? 0x5F : red == OT_OP_MIN ? 0x5D : 0x58;
}

/* The upper half of vector s into the lower half of d: vextractf64x4
 * (EVEX) or vextractf128 (VEX). */
static void upper_half(code *c, int d, int s)
{
    prefix(c, c->evex, 1, 3, 1, c->evex, s, 0, 0, d, c->evex ? 0x1B : 0x19);
    put1(c, (uint8_t)(0xC0 | (s & 7) << 3 | (d & 7)));
    put1(c, 1);
}

/* The upper 128 bits of ymm s into xmm d, on either table. */
static void upper_128(code *c, int d, int s)
{
    prefix(c, false, 1, 3, 1, 0, s, 0, 0, d, 0x19);
    put1(c, (uint8_t)(0xC0 | (s & 7) << 3 | (d & 7)));
    put1(c, 1);
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
        xrr(c, 1, pp, op, 0, 0, 1);
    }
    upper_128(c, 1, 0);
    xrr(c, 0, pp, op, 0, 0, 1);
    if (!dbl) {
        xrr(c, 0, 0, 0x12, 1, 0, 0);                                  /* vmovhlps */
        xrr(c, 0, 0, op, 0, 0, 1);
        xrr(c, 0, 2, 0x16, 1, 0, 0);                                  /* vmovshdup */
        xrr(c, 0, 2, op, 0, 0, 1);                                    /* ss */
    } else {
        xrr(c, 0, 1, 0x15, 1, 0, 0);                                  /* vunpckhpd */
        xrr(c, 0, 3, op, 0, 0, 1);                                    /* sd */
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
        vrr(c, 1, 0, 0, 0x5A, u, 0, ACC_REG + u);                     /* vcvtps2pd */
        upper_half(c, 4 + u, ACC_REG + u);
        vrr(c, 1, 0, 0, 0x5A, 4 + u, 0, 4 + u);
    }
    for (int h = 0; h < 8; h += 4) {
        vrr(c, 1, 1, dw, 0x58, h, h, h + 1);
        vrr(c, 1, 1, dw, 0x58, h + 2, h + 2, h + 3);
        vrr(c, 1, 1, dw, 0x58, h, h, h + 2);
    }
    vrr(c, 1, 1, dw, 0x58, 0, 0, 4);
}

/* The end of a tile: its accumulators folded into one value, then into
 * *acc's slot (acc + x, or its max or min). */
static void emit_flush(regs *r)
{
    code *c = r->c;
    uint8_t op = red_opcode(r->red);
    for (int u = 0; u < 4 && r->calls; u++)
        vmov_load(r, ACC_REG + u, RSP, NO_INDEX, konst(r, K_ACC + u));
    if (r->red == OT_OP_SUM && !r->pp) {
        widen_sum(r);
    } else {
        vrr(c, 1, r->pp, r->wig, op, 0, ACC_REG, ACC_REG + 1);
        vrr(c, 1, r->pp, r->wig, op, 1, ACC_REG + 2, ACC_REG + 3);
        vrr(c, 1, r->pp, r->wig, op, 0, 0, 1);
    }
    bool dbl = r->pp || r->red == OT_OP_SUM;
    fold_lanes(r, op, dbl);
    if (!dbl) xrr(c, 0, 2, 0x5A, 0, 0, 0);                            /* vcvtss2sd */
    xrm(c, 0, 3, 0x10, 1, RSP, misc(r, MISC_ACC));                    /* vmovsd */
    xrr(c, 0, 3, op, 1, 1, 0);
    xrm(c, 0, 3, 0x11, 1, RSP, misc(r, MISC_ACC));
}

/* Whether the body may read any of K_SIGN, K_ABS, K_ONE and K_FN: a
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
        if (r->j->body[i] && !none) return true;
    }
    return r->fn_used != 0;
}

/* Every broadcast value the body reads, broadcast once into its slot: a
 * vector load per use then, not a pointer load and a broadcast. */
static void emit_splats(regs *r)
{
    for (int v = 0; v < r->j->ninsn; v++) {
        bool read = false;
        for (int i = 0; i < r->j->ninsn; i++)
            for (int o = 0; o < 3 && r->j->body[i]; o++) read |= r->j->arg[i][o] == v;
        if (!read || in_body(r, v) || is_vector_load(r, v)) continue;
        fetch(r, v, 0);
        vmov_store(r, 0, RSP, NO_INDEX, slot(r, v));
    }
    r->splat = true;
}

/* Each tile's accumulators start at the identity: 0, or K_IDENT. */
static void acc_init(regs *r)
{
    int z = r->calls ? 0 : ACC_REG;
    if (r->red == OT_OP_SUM) zero_reg(r, z);
    else vmov_load(r, z, RSP, NO_INDEX, konst(r, K_IDENT));
    for (int u = 0; u < 4; u++) {
        if (r->calls) vmov_store(r, z, RSP, NO_INDEX, konst(r, K_ACC + u));
        else if (u) vmovaps(r, ACC_REG + u, z);
    }
}

/* Max and min note NaNs by summing what they reduce into note u (one add
 * per vector, cheaper than a compare and a merge): a note is NaN where a
 * NaN was met, or where +inf and -inf (or sums overflowing both ways)
 * met, which only sends a span to the interpreter needlessly. */
static void note_nan(regs *r, int t, unsigned keep, int u)
{
    if (!r->calls) {
        vrr(r->c, 1, r->pp, r->wig, 0x58, NAN_REG + u, NAN_REG + u, t);
        return;
    }
    int n = take(r, keep);
    vmov_load(r, n, RSP, NO_INDEX, konst(r, K_NAN + u));
    vrr(r->c, 1, r->pp, r->wig, 0x58, n, n, t);
    vmov_store(r, n, RSP, NO_INDEX, konst(r, K_NAN + u));
}

/* Folds this copy's result into accumulator u; in the tail, the lanes past
 * nbytes become the identity first (0, or K_DEAD's), as the tile kernels
 * pad their tails. */
static void accumulate(regs *r, int u)
{
    int g = use(r, r->j->out_val[0], 0);
    int t = g;
    if (r->pad) {
        t = take(r, 1u << g);
        bitwise_const(r, BIT_AND, t, g, K_LIVE);
        if (r->red != OT_OP_SUM) bitwise_const(r, BIT_OR, t, t, K_DEAD);
    }
    uint8_t op = red_opcode(r->red);
    if (r->calls) {
        int a = take(r, 1u << g | 1u << t);
        vmov_load(r, a, RSP, NO_INDEX, konst(r, K_ACC + u));
        vrr(r->c, 1, r->pp, r->wig, op, a, a, t);
        vmov_store(r, a, RSP, NO_INDEX, konst(r, K_ACC + u));
    } else {
        vrr(r->c, 1, r->pp, r->wig, op, ACC_REG + u, ACC_REG + u, t);
    }
    if (r->red != OT_OP_SUM) note_nan(r, t, 1u << g | 1u << t, u);
}

/* One copy of the body for the vector u vectors past rbx (pad: exec's
 * padded tail), its stores, and its fold into accumulator u. */
static void emit_copy(regs *r, int u, bool pad)
{
    r->disp = pad ? 0 : u * r->vbytes;
    r->pad = r->tail = pad;
    reset_regs(r);
    for (int pos = 0; pos < r->j->ninsn; pos++)
        if (r->j->body[pos]) emit_insn(r, pos);
    emit_stores(r, false);
    accumulate(r, u);
}

/* Max and min: K_IDENT, and the NaN notes cleared. */
static void emit_identity(regs *r)
{
    all_ones(r, 0);
    if (r->red == OT_OP_MAX) {
        shift(r, 6, 0, r->pp ? 52 : 23);                              /* -inf */
    } else {
        shift(r, 6, 0, r->pp ? 53 : 24);                              /* +inf */
        shift(r, 2, 0, 1);
    }
    vmov_store(r, 0, RSP, NO_INDEX, konst(r, K_IDENT));
    zero_reg(r, 1);
    for (int u = 0; u < 4; u++) {
        if (r->calls) vmov_store(r, 1, RSP, NO_INDEX, konst(r, K_NAN + u));
        else vmovaps(r, NAN_REG + u, 1);
    }
}

/* eax: nonzero where the NaN notes, added up, have a NaN lane (0 for
 * sums); the upper half of a zmm folded onto the lower, since VEX's
 * compare and vmovmskps see 256 bits. */
static void emit_nan_flag(regs *r)
{
    code *c = r->c;
    if (r->red == OT_OP_SUM) {
        put(c, (const uint8_t[]){0x31, 0xC0}, 2);                     /* xor eax, eax */
        return;
    }
    for (int u = 0; u < 4 && r->calls; u++)
        vmov_load(r, NAN_REG + u, RSP, NO_INDEX, konst(r, K_NAN + u));
    vrr(c, 1, r->pp, r->wig, 0x58, 0, NAN_REG, NAN_REG + 1);
    vrr(c, 1, r->pp, r->wig, 0x58, 1, NAN_REG + 2, NAN_REG + 3);
    vrr(c, 1, r->pp, r->wig, 0x58, 0, 0, 1);
    if (r->vbytes == 64) {
        upper_half(c, 1, 0);
        xrr(c, 1, r->pp, 0x58, 0, 0, 1);
    }
    xrr(c, 1, r->pp, 0xC2, 0, 0, 0);                                  /* vcmpunordp{s,d} */
    put1(c, 3);
    xrr(c, 1, r->pp, 0x50, RAX, 0, 0);                                /* vmovmskp{s,d} eax */
}

/* The tail: its live lanes from its bytes (rcx), then for max and min the
 * identity in the others (K_DEAD = ~K_LIVE & K_IDENT). */
static void emit_tail_masks(regs *r)
{
    emit_live_mask(r, RCX);
    if (r->red == OT_OP_SUM) return;
    vmov_load(r, 0, RSP, NO_INDEX, konst(r, K_LIVE));
    bitwise_const(r, BIT_ANDN, 0, 0, K_IDENT);
    vmov_store(r, 0, RSP, NO_INDEX, konst(r, K_DEAD));
}

/* Pointers into registers (see ptr_gpr): the vector inputs', then the
 * outputs'. */
static void emit_pointers(regs *r)
{
    int room = r->calls ? 2 : 9;
    for (int v = 0; v < r->j->ninsn && r->nptr < room; v++) {
        if (!is_vector_load(r, v)) continue;
        gpr_mem(r->c, 0x8B, ptr_gpr[r->nptr], R12, 8 * v);
        r->ptr_of[r->nptr++] = (int16_t)v;
    }
    for (int q = r->red >= 0; q < r->j->nout && r->nptr < room; q++) {
        if (!r->j->out_vector[q]) continue;
        gpr_mem(r->c, 0x8B, ptr_gpr[r->nptr], R13, 8 * q);
        r->ptr_of[r->nptr++] = (int16_t)(-1 - q);
    }
}

/* Compares rbx + bytes with the end of the tile and jumps (forward) when
 * a loop has no room for a first turn. */
static size_t emit_room(regs *r, int32_t bytes)
{
    gpr_mem(r->c, 0x8D, RAX, RBX, bytes);                             /* lea rax, [rbx + bytes] */
    gpr_mem(r->c, 0x3B, RAX, RSP, misc(r, MISC_END));
    return jump_fwd(r->c, JA);
}

/* rbx += bytes, then the room check for the next turn (the loops test at
 * the bottom: one branch per turn). */
static void emit_step(regs *r, int32_t bytes)
{
    put(r->c, (const uint8_t[]){0x48, 0x81, 0xC3}, 3);                /* add rbx, bytes */
    put4(r->c, bytes);
    gpr_mem(r->c, 0x8D, RAX, RBX, bytes);
    gpr_mem(r->c, 0x3B, RAX, RSP, misc(r, MISC_END));
}

/* red(in, out, nbytes, tile_bytes, acc): tiles from rbx = 0 while rbx <
 * nbytes, each running groups of four copies, then single copies, then
 * the tail, then the flush. */
static void emit_reduce_function(regs *r, int frame)
{
    code *c = r->c;
    int32_t v = r->vbytes;
    emit_prologue(r, frame);
    gpr_mem(c, 0x89, R14, RSP, misc(r, MISC_N));
    gpr_mem(c, 0x89, RCX, RSP, misc(r, MISC_TILE));
    gpr_mem(c, 0x89, R8, RSP, misc(r, MISC_ACCP));
    xrm(c, 0, 3, 0x10, 0, R8, 0);                                     /* vmovsd xmm0, [r8] */
    xrm(c, 0, 3, 0x11, 0, RSP, misc(r, MISC_ACC));
    emit_pointers(r);
    if (reads_constants(r)) emit_constants(r);
    if (r->red != OT_OP_SUM) emit_identity(r);
    emit_splats(r);
    put(c, (const uint8_t[]){0x31, 0xDB}, 2);                         /* xor ebx, ebx */
    gpr_mem(c, 0x8B, RAX, RSP, misc(r, MISC_N));
    put(c, (const uint8_t[]){0x48, 0x85, 0xC0}, 3);                   /* test rax, rax */
    size_t done = jump_fwd(c, JE);
    size_t tile = c->n;                                               /* end = min(rbx + tile, n) */
    mov_rr(c, RAX, RBX);
    gpr_mem(c, 0x03, RAX, RSP, misc(r, MISC_TILE));
    gpr_mem(c, 0x3B, RAX, RSP, misc(r, MISC_N));
    put(c, (const uint8_t[]){0x48, 0x0F, 0x47}, 3);                   /* cmova rax, n */
    mem_operand(c, RAX, RSP, NO_INDEX, misc(r, MISC_N));
    gpr_mem(c, 0x89, RAX, RSP, misc(r, MISC_END));
    acc_init(r);
    size_t to_single = emit_room(r, 4 * v);
    size_t group = c->n;
    for (int u = 0; u < 4; u++) emit_copy(r, u, false);
    emit_step(r, 4 * v);
    jump_back(c, JBE, group);
    land(c, to_single);
    size_t to_tail = emit_room(r, v);
    size_t single = c->n;
    emit_copy(r, 0, false);
    emit_step(r, v);
    jump_back(c, JBE, single);
    land(c, to_tail);
    gpr_mem(c, 0x8B, RCX, RSP, misc(r, MISC_END));
    gpr_rr(c, 0x29, RCX, RBX);                                        /* sub rcx, rbx */
    size_t to_flush = jump_fwd(c, JE);
    emit_tail_masks(r);
    emit_copy(r, 0, true);
    gpr_mem(c, 0x8B, RBX, RSP, misc(r, MISC_END));
    land(c, to_flush);
    emit_flush(r);
    gpr_mem(c, 0x3B, RBX, RSP, misc(r, MISC_N));
    jump_back(c, JB, tile);
    land(c, done);
    gpr_mem(c, 0x8B, RAX, RSP, misc(r, MISC_ACCP));
    xrm(c, 0, 3, 0x10, 0, RSP, misc(r, MISC_ACC));
    xrm(c, 0, 3, 0x11, 0, RAX, 0);
    emit_nan_flag(r);
    emit_epilogue(c);
}

/* ---- which kernels ------------------------------------------------------------ */

/* Fills j's value map: arg (the value each operand reads: buffers are
 * reused, values are instruction indices), body and the outputs. False
 * where the program has something generated code does not do. */
static bool map_values(ot_jit *j, const ot_kernel *k)
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
            ok = ok && (!needs_call(j, in) || callee(j, in));
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
        if (jits[i]->reduce) memcpy(&jits[i]->red, &entry, sizeof entry);
        else memcpy(&jits[i]->fn, &entry, sizeof entry);   /* object to function pointer */
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
 * memory, not by a call (sig alone measured 5-10% slower as code), or
 * where exp is inline (exp alone over 2^24 f32: 4.8 against 5.1 ms). */
static bool calls(const ot_jit *j, const ot_kernel *k)
{
    for (int i = 0; i < k->ninsn; i++)
        if (j->body[i] && needs_call(j, &k->insns[i])) return true;
    return false;
}

/* Bit f of the inline functions (FN_EXP ...) k's body computes. */
static unsigned inline_fns(const ot_jit *j, const ot_kernel *k)
{
    unsigned fns = 0;
    for (int i = 0; i < k->ninsn; i++)
        if (j->body[i]) fns |= 1u << inline_fn(j, &k->insns[i]);
    return fns & ~(1u << FN_CALL);
}

/* The constants the inline functions read (fn_used: only those are
 * written per call), and registers zmm16-31 for them in exp_consts',
 * log_consts' then tanh_consts' order where EVEX code calls nothing (a
 * call clobbers them): the rest stay in the frame. */
static void place_constants(regs *r)
{
    const int8_t *lists[7] = {exp_consts, log_consts, tanh_consts, log35_consts, tanh35_consts,
                              safelog_consts, log_vex_consts};
    const int sizes[7] = {sizeof exp_consts, sizeof log_consts, sizeof tanh_consts,
                          sizeof log35_consts, sizeof tanh35_consts, sizeof safelog_consts,
                          sizeof log_vex_consts};
    unsigned f = r->fns;
    bool log10 = f & (1u << FN_LOG | 1u << FN_SAFELOG);
    bool log35 = f & (1u << FN_LOG35 | 1u << FN_SAFELOG35);
    const bool used[7] = {f >> FN_EXP & 1, log10, f >> FN_TANH & 1, log35, f >> FN_TANH35 & 1,
                          f & (1u << FN_SAFELOG | 1u << FN_SAFELOG35),
                          (log10 || log35) && !r->c->evex};
    bool regs = r->c->evex && !r->calls;
    int next = 16;
    r->fn_used = 0;
    memset(r->creg, 0, sizeof r->creg);
    for (int f = 0; f < 7; f++)
        for (int i = 0; i < sizes[f] && used[f]; i++) {
            int e = lists[f][i];
            if (e < NFNK) r->fn_used |= (uint64_t)1 << e;
            if (regs && !r->creg[e] && next < 16 + NCREG) r->creg[e] = (int8_t)next++;
        }
}

static bool worth_it(const ot_jit *j, const ot_kernel *k, bool stream)
{
    int nbody = 0;
    for (int i = 0; i < k->ninsn; i++) nbody += j->body[i];
    return nbody >= 2 ||
           (nbody == 1 && ((stream && !calls(j, k)) || (inline_fns(j, k) >> FN_EXP & 1)));
}

bool ot__jit_available(const ot_kernels *kt)
{
    return kt->vfn1[0][OT_OP_EXP][0] && (kt->vbytes == 32 || kt->vbytes == 64);
}

/* The reductions generated code does, by kind alone: sum, mean, max and
 * min of floats over the innermost dim or everything. Columns, arg* and
 * i32 stay with the interpreter. */
static bool reduces(const ot_kernel *k)
{
    int op = k->red_op;
    return k->kind == OT_KER_REDUCE && k->ndim > 0 &&
           (k->red_axis == k->ndim - 1 || k->red_axis == -1) &&
           (op == OT_OP_SUM || op == OT_OP_MEAN || op == OT_OP_MAX || op == OT_OP_MIN);
}

/* Whether a reduction's program suits its code, which runs a whole span
 * of a row in place: a vector result of the body's dtype, every vector
 * load contiguous along the row, every further output written in place.
 * Max and min have no further output, since exec runs the interpreter
 * again on a span with a NaN or a zero extreme (an output written in
 * place may be one of the inputs). */
static bool reduce_fits(const ot_jit *j, const ot_kernel *k)
{
    bool ok = j->out_vector[0] && j->kd == k->result_kd;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code == OT_I_LOAD && !(in->scalar & 8))
            ok = ok && k->loads[in->arg].strides[k->ndim - 1] == 1;
    }
    for (int x = 0; x < k->nxstore; x++) ok = ok && k->xstores[x].direct;
    return ok && (k->nxstore == 0 || k->red_op == OT_OP_SUM || k->red_op == OT_OP_MEAN);
}

/* ot__jit_build's attempt with log and tanh inline or (calls_log_tanh)
 * called; *retry: a reduction whose inline log or tanh did not fit. */
static ot_jit *build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream,
                     bool calls_log_tanh, bool *retry)
{
    ot_jit *j = ot__calloc(1, sizeof *j);
    code c = {0};
    regs r = {.c = &c, .j = j, .insns = k->insns, .nreg = NREG, .red = -1};
    bool ok = j != NULL, reduce = k->kind == OT_KER_REDUCE;
    stream = stream && !reduce;
    if (ok) {
        j->kt = kt;
        j->acc = acc;
        j->reduce = reduce;
        j->calls_log_tanh = calls_log_tanh;
        j->ninsn = k->ninsn;
        j->arg = ot__malloc(sizeof *j->arg * (size_t)k->ninsn);
        j->body = ot__calloc((size_t)k->ninsn, sizeof *j->body);
        r.reg_of = ot__malloc(sizeof *r.reg_of * (size_t)k->ninsn);
        r.spilled = ot__malloc((size_t)k->ninsn);
        r.last = ot__malloc(sizeof *r.last * (size_t)k->ninsn);
        ok = j->arg && j->body && r.reg_of && r.spilled && r.last && map_values(j, k) &&
             (reduce ? reduce_fits(j, k) : worth_it(j, k, stream));
    }
    if (ok) {
        r.pp = j->kd == OT_KD_F64;
        r.w = r.pp;
        r.vbytes = kt->vbytes;
        c.evex = kt->vbytes == 64;
        r.wig = c.evex ? r.w : 0;
        r.calls = calls(j, k);
        r.fns = inline_fns(j, k);
        place_constants(&r);
        last_uses(j, r.last);
    }
    if (ok && reduce) {
        /* Reductions gain what the interpreter spends per tile and per op
         * (measured on softmax's max and sum(exp(x - m))), so every one
         * that fits gets code, a single load included. */
        j->reduce = true;
        r.red = k->red_op == OT_OP_MEAN ? OT_OP_SUM : k->red_op;
        r.nreg = r.calls ? NREG : r.red == OT_OP_SUM ? ACC_REG : NAN_REG;
        emit_reduce_function(&r, slot(&r, k->ninsn) + r.vbytes);
        ok = !c.oom;
        *retry = !ok && (r.fns & ~(1u << FN_EXP));
    } else if (ok) {
        emit_function(&r, slot(&r, k->ninsn) + r.vbytes, false);
        if (stream) {
            while (c.n % 16) put1(&c, 0xCC);               /* int3 padding */
            j->stream_at = c.n;
            emit_function(&r, slot(&r, k->ninsn) + r.vbytes, true);
        }
        if (r.calls) {
            while (c.n % 16) put1(&c, 0xCC);
            j->tail_at = c.n;
            r.tail = true;
            emit_function(&r, slot(&r, k->ninsn) + r.vbytes, false);
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

ot_jit *ot__jit_build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream)
{
    if ((k->kind != OT_KER_EW && !reduces(k)) || k->ninsn < 1 || k->ninsn > OT_JIT_MAX_INSN ||
        !ot__jit_available(kt))
        return NULL;
    bool retry = false;
    ot_jit *j = build(k, kt, acc, stream, false, &retry);
    return j || !retry ? j : build(k, kt, acc, stream, true, &retry);
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
