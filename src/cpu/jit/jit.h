/*
 * jit.h - what the files of generated code (layer cpu/jit: jit.c,
 * jit_x86.c, jit_regs.c, jit_math.c, jit_reduce.c) share and nothing else
 * includes: the code buffer, the register pass's state (regs), the frame's
 * layout, the SLEEF constants' names and each file's entry points. The
 * entry points the cpu backend calls (ot__jit_build ...) are in cpu.h.
 * Code is generated on x86-64 Linux only (OT_JIT_X86).
 */
#ifndef OT_JIT_H
#define OT_JIT_H

#include "cpu.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#define OT_JIT_X86 1
#else
#define OT_JIT_X86 0
#endif

#if OT_JIT_X86

/* General-purpose registers by number; NREG vector registers for values. */
#define NREG 16
#define RAX 0
#define RCX 1
#define RSP 4
#define RBX 3
#define RBP 5
#define R8 8
#define R9 9
#define R12 12
#define R13 13
#define R14 14
#define R15 15
#define NO_INDEX (-1)

/* The code being written: bytes, and whether writing it failed. */
typedef struct code {
    uint8_t *b;
    size_t n, cap;
    bool oom;                   /* out of memory, or of registers (take): no code */
    bool evex;                  /* 512-bit EVEX encodings, else 256-bit VEX */
} code;

/* The f32 constants of SLEEF 3.5's expf, logf u10 and logf and tanhf u35,
 * of the library's own tanhf u10 (H_: own_math.inc's f32_tanh_u10), expf
 * (X_, H_ and E_ ones: f32_exp_u10) and logf u10 (N_: f32_log_u10), and
 * the integers of bf16's rounding (B_: jit_half.c), in
 * fn_bits; the frame's K_FN vectors; F_ONE names K_ONE among them. */
enum { E_RLN2, E_L2U, E_L2L, E_C0, E_C1, E_C2, E_C3, E_C4, E_C5, E_LO, E_INF,
       L_4_3, L_LN2HI, L_M1, L_FLTMIN, L_2P64, L_FF,
       L_BIASD, L_BIASN, L_QNAN, L_NINF, H_P0, H_P1, H_P2, H_P3, H_P4, H_P5, H_P6, H_Q0, H_Q1,
       H_Q2, H_Q3, H_Q4, H_CUT, H_CAP, H_MAGIC, T_BIG, T_TWO,
       M_P0, M_P1, M_P2, M_P3, M_128LN2, M_FIX, S_FLOOR, X_HI, X_M64, X_BIAS,
       B_LSB, B_RND, B_QUIET, N_P0, N_P1, N_P2, N_P3, N_P4, N_P5, N_P6, N_P7, N_SQRTH, N_2P23,
       N_M23, N_LN2HI, N_LN2LO, N_MHALF, N_FIX, NFNK,
       F_ONE = NFNK };

/* The zmm registers past the allocator's (16-31) that hold K_FN constants. */
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
    bool pad;                   /* this copy is the tail: exec's padded copy, or */
    bool mtail;                 /* in a row function, the row's own memory under
                                   the live lanes' mask (masked_load, _store) */
    int red;                    /* a reduction's OT_OP_SUM (mean too), OT_OP_MAX or
                                   OT_OP_MIN; -1 for elementwise code */
    unsigned fns;               /* bit f: the body has inline function f (FN_EXP
                                   ...; K_FN holds their constants) */
    bool fn_used[NFNK];         /* the body reads K_FN constant e (more of
                                   them than a uint64_t has bits) */
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
    int16_t pin_v[NCREG];       /* EVEX code that calls nothing: values read
                                   in every turn (broadcasts, pre's) kept in
                                   the zmm past the constants' too, pin_v[i]
                                   in pin_first + i; npin of them */
    int8_t npin, pin_first;
    int val_of[NREG];           /* value in each register, or -1 */
    int16_t *reg_of;            /* register of each value, or -1 */
    bool *spilled;              /* body values with a current stack copy */
    int16_t *last;              /* last body position reading each value */
    const uint8_t *half_in;     /* 16-bit code (jit_half.c): per insn, the
                                   dtype (OT_F16, OT_BF16) a vector load reads;
                                   NULL: loads and stores of the body's dtype */
    int half_out;               /* with half_in: the output's 16-bit dtype */
} regs;

/* EVEX's embedded broadcast: a memory operand of one 4-byte element read
 * into every lane (one load where a whole zmm is two on Zen 4). */
#define EVEX_BCST 0x10

/* Conditional jumps (jcc rel32), cc the condition. A jump forward returns
 * where its rel32 goes, for land() to fill in once the target is reached. */
enum { JB = 2, JE = 4, JNE = 5, JBE = 6, JA = 7 };

/* The frame: the constants the body reads from memory (written once per
 * call, so that the loop spends no instructions making them), then a slot
 * per body value. */
/* -0.0, ~-0.0, 1.0 in every lane; K_LIVE (fn_tail and a reduction's tail):
 * all ones in the lanes below nbytes, zero above; K_KMASK, under EVEX in a
 * row function's masked tail, K_LIVE's lanes as the bits of a k mask (its
 * first word). A reduction's: K_IDENT
 * its identity (max -inf, min +inf) in every lane and K_DEAD in the lanes
 * past the tail; when the body calls, four accumulators and four NaN notes
 * (see note_nan); K_MISC, two vectors of scalars (MISC_*); K_FN, the
 * inline functions' constants (fn_bits), those the body reads. */
enum { K_SIGN, K_ABS, K_ONE, K_LIVE, K_KMASK, K_IDENT, K_DEAD, K_ACC, K_NAN = K_ACC + 4,
       K_MISC = K_NAN + 4, K_FN = K_MISC + 2, NCONST = K_FN + NFNK };

enum { BIT_AND, BIT_XOR, BIT_OR, BIT_ANDN };

/* A select's or compare's steps (jit_math.c): x's result in a register of
 * t[], which it returns. */
typedef int (*unary_steps_fn)(regs *r, int x, const int t[]);

/* The inline functions a body insn may be (jit.c's inline_fn): FN_CALL,
 * none (it is inline ops or a call); the library's own and SLEEF's
 * functions emitted step for step (jit_math.c). */
enum { FN_CALL, FN_EXP, FN_TANH, FN_LOG, FN_SAFELOG, FN_LOG35, FN_TANH35, FN_SAFELOG35, NFN };

/* A reduction that calls nothing keeps its four accumulators in registers
 * 12-15 and max's and min's NaN notes in 8-11 (jit_reduce.c). */
enum { ACC_REG = 12, NAN_REG = 8 };

/* ---- jit_x86.c: the encoder */
void ot__x86_put(code *c, const void *p, size_t n);
void ot__x86_put1(code *c, uint8_t x);
void ot__x86_align16(code *c);
void ot__x86_put4(code *c, int32_t x);
void ot__x86_prefix_k(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                      int b, uint8_t op, uint8_t mask);
void ot__x86_prefix(code *c, bool evex, int l, int map, int pp, int w, int reg, int vvvv, int x,
                    int b, uint8_t op);
void ot__x86_mem_operand(code *c, int reg, int base, int index, int32_t disp);
void ot__x86_vrr(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm);
void ot__x86_vrm(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int base,
                 int index, int32_t disp);
void ot__x86_vrr_k(code *c, int map, int pp, int w, uint8_t op, int reg, int vvvv, int rm, int k,
                   bool zeroing);
void ot__x86_vrm_k(code *c, int map, int pp, int w, uint8_t op, int reg, int base, int index,
                   int32_t disp, int k, bool zeroing);
void ot__x86_xrr(code *c, int l, int pp, uint8_t op, int reg, int vvvv, int rm);
void ot__x86_xrm(code *c, int l, int pp, uint8_t op, int reg, int base, int32_t disp);
void ot__x86_gpr_mem(code *c, uint8_t op, int reg, int base, int32_t disp);
void ot__x86_gpr_rr(code *c, uint8_t op, int rm, int reg);
void ot__x86_load_ptr(code *c, int base, int32_t disp);
void ot__x86_prefetch(code *c, int hint, int base, int index, int32_t disp);
void ot__x86_push(code *c, int r);
void ot__x86_pop(code *c, int r);
void ot__x86_mov_rr(code *c, int dst, int src);
size_t ot__x86_jump_fwd(code *c, int cc);
void ot__x86_land(code *c, size_t at);
void ot__x86_jump_back(code *c, int cc, size_t to);
void ot__x86_call_abs(code *c, const void *fn);

/* ---- jit_regs.c: the frame and the registers */
int32_t ot__jit_konst(const regs *r, int k);
int32_t ot__jit_slot(const regs *r, int v);
void ot__jit_vmov_load(regs *r, int reg, int base, int index, int32_t disp);
void ot__jit_vmov_store(regs *r, int reg, int base, int index, int32_t disp);
void ot__jit_vmov_stream(regs *r, int reg, int base, int index, int32_t disp);
void ot__jit_vmovaps(regs *r, int dst, int src);
void ot__jit_bitwise_const(regs *r, int kind, int d, int a, int k);
void ot__jit_zero_reg(regs *r, int reg);
void ot__jit_all_ones(regs *r, int reg);
void ot__jit_shift_to(regs *r, int ext, int dst, int src, int imm);
void ot__jit_shift(regs *r, int ext, int reg, int imm);
void ot__jit_emit_constants(regs *r);
void ot__jit_emit_live_mask(regs *r, int n);
/* A row function's masks, made once a call: rcx, a row's bytes on entry,
 * becomes its last part's (rcx & (V - 1)), then K_LIVE from it and, under
 * EVEX, K_KMASK (through vector 0 and k2, which nothing holds then). */
void ot__jit_emit_row_masks(regs *r);
void ot__jit_masked_load(regs *r, int reg, int base, int index, int32_t disp);
void ot__jit_masked_store(regs *r, int g, int base, int index, int32_t disp);
bool ot__jit_is_vector_load(const regs *r, int v);
bool ot__jit_in_body(const regs *r, int v);
int ot__jit_ptr_reg(const regs *r, int v);
void ot__jit_fetch(regs *r, int v, int reg);
void ot__jit_bind(regs *r, int v, int reg);
void ot__jit_release(regs *r, int reg);
void ot__jit_save(regs *r, int reg);
int ot__jit_take(regs *r, unsigned keep);
int ot__jit_use(regs *r, int v, unsigned keep);
void ot__jit_retire(regs *r, int pos);
int ot__jit_lowering(int op);
bool ot__jit_zero_dead(const regs *r, int v);
void ot__jit_emit_call(regs *r, int pos, const void *fn, int a, int b);
void ot__jit_scratch(regs *r, unsigned keep, int t[], int n);
void ot__jit_vrc(regs *r, int map, int pp, uint8_t op, int reg, int vvvv, int e);
void ot__jit_vrc_k(regs *r, int map, int pp, uint8_t op, int reg, int vvvv, int e, int k);
void ot__jit_load_const(regs *r, int reg, int e, bool k);
extern const int ot__jit_ptr_gpr[9];

/* ---- jit_math.c: the math steps and selects */
void ot__jit_place_constants(regs *r);
int ot__jit_exp_steps(regs *r, int x, const int t[5]);
int ot__jit_log_steps(regs *r, int x, const int t[5]);
int ot__jit_log35_steps(regs *r, int x, const int t[7]);
int ot__jit_tanh_steps(regs *r, int x, const int t[6]);
int ot__jit_tanh35_steps(regs *r, int x, const int t[8]);
void ot__jit_emit_sig(regs *r, int pos, const void *exp_fn, int x);
void ot__jit_emit_unary_steps(regs *r, int pos, int a, unary_steps_fn fn, int n, bool floor);
void ot__jit_emit_unary(regs *r, int pos, int op, int a);
void ot__jit_emit_binary(regs *r, int pos, int op, int a, int b);
void ot__jit_emit_rsqrt_bcast(regs *r, int pos, int a);
void ot__jit_emit_pre(regs *r);
void ot__jit_emit_fma(regs *r, int pos, bool sub, int a, int b, int cv);
extern const uint32_t ot__jit_fn_bits[NFNK];

/* ---- jit_reduce.c: reductions and loop invariants */
void ot__jit_emit_splats(regs *r);
/* jit_regs.c: keeps loop-invariant value v, in register reg, in a zmm of
 * its own too (EVEX code that calls nothing, while one is free), which
 * fetch then copies instead of loading its slot. */
void ot__jit_pin(regs *r, int v, int reg);
void ot__jit_emit_pointers(regs *r);
void ot__jit_emit_reduce_function(regs *r, int frame);
void ot__jit_emit_reduce_rows_function(regs *r, int frame);
void ot__jit_emit_row_steps(regs *r, int q0);

/* ---- jit_half.c: 16-bit loads and stores */
void ot__jit_half_load(regs *r, int reg, int dt, int base, int index);
void ot__jit_half_store(regs *r, int g, int base, int index, bool stream);
bool ot__jit_half_fits(const ot_kernels *kt, const uint8_t *load_dt, int ninsn, int out_dt);
int ot__jit_half_bf16_insn(int set);

/* ---- jit.c: the lowering of a kernel */
void ot__jit_emit_insn(regs *r, int pos);
void ot__jit_emit_prologue(regs *r, int frame);
void ot__jit_emit_epilogue(code *c);
void ot__jit_reset_regs(regs *r);
void ot__jit_emit_stores(regs *r, bool stream);
/* One copy of the body at rbx + disp (or the tail, as r->pad and mtail
 * say): registers reset, its prefetches, its insns and its stores. */
void ot__jit_emit_body(regs *r, bool stream);
void ot__jit_emit_prefetches(regs *r);

#endif /* OT_JIT_X86 */
#endif /* OT_JIT_H */
