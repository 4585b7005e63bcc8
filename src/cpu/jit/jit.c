/*
 * jit.c - generated code for register programs: each elementwise kernel
 * whose vector part is f32 or f64 arithmetic becomes one x86-64 loop over
 * vectors that keeps every value in a register (ymm, VEX-encoded, for the
 * AVX2 table; zmm, EVEX-encoded, for the AVX-512 one), so a chain of cheap
 * ops costs no pass over tile buffers (the interpreter in exec.c reads and
 * writes a buffer per op). Reductions (sum, mean, max, min over rows or
 * everything) get a loop that also folds the values into accumulators
 * (jit_reduce.c). add, sub, mul, div, fma, fnma, sqrt, sqr, neg,
 * abs, the selects and compares (relu, recip, rint, finite, sgn, eq ...
 * ge, minimum, maximum) are emitted inline, f32 exp, log, safelog and tanh
 * too (exp and u10's log, safelog and tanh the library's own, u35's
 * SLEEF 3.5's, step for step; see jit_math.c), f64
 * sig and sig2 as their exp with the select and divide inline; every other op
 * (f32 sig too: the library's own, own_math.inc)
 * calls the table's vector function (vfn1/vfn2: SLEEF itself, or the tile kernels' own element functions),
 * so results are bitwise those of the interpreter of the same table, NaNs
 * included: add, mul and fma keep the operand order that the tile
 * kernels pin (isa_avx2.h), a first, and c - a*b is (-a)*b + c there too.
 *
 * The program's "prelude" (loads, parameters and the scalar instructions
 * the code does not compute) stays with exec.c, which passes a pointer per
 * value: a vector input is read at the loop offset, a scalar one is
 * broadcast once before the loop into a stack slot, and vector pointers
 * are loaded into registers there too. Scalar instructions whose lanes are
 * computed alone (choose_pre: a row's rsqrt(mean + eps)) are computed by
 * the code itself once per call, before its loop, on those broadcasts:
 * exec's prelude ran them through the tile kernels on one element, about
 * 700 instructions a row of a layer norm.
 * Outputs are stored at the end of each iteration, after every load of it,
 * so an output may be an input. Registers are assigned in one pass with
 * the farthest-last-use value evicted; calls clobber every vector register,
 * so live values are spilled to stack slots around them (jit_regs.c). A
 * plan's code lives in one mapping of its own, written and then made
 * executable (never both). Elsewhere than x86-64 Linux nothing is
 * generated.
 *
 * This file owns the lowering of a kernel: which kernels get code and
 * which ops are inline or called (map_values, worth_it), each body
 * instruction's emission (emit_insn), the elementwise loop
 * (emit_function), the build and the mapping. Whether a kernel streams its
 * output is the scheduler's decision (plan_sched.c), which it obeys. The
 * encoder is jit_x86.c, the frame and registers jit_regs.c, the math
 * steps jit_math.c, reductions jit_reduce.c; layer cpu/jit (jit*.c) calls
 * only core and cpu/kernels.
 */
#define _DEFAULT_SOURCE   /* MAP_ANONYMOUS */
#include "jit.h"

#if OT_JIT_X86
#include <sys/mman.h>

/* sig and sig2 emitted as their base's call with the blend and divide
 * inline; f32 sig is not: it calls the table's own f32 sig (own_math.inc),
 * whose correction step the blend and divide alone would lose. */
static bool is_sig(const ot_insn *in)
{
    return in->code == OT_I_UNARY && ot__jit_lowering(in->op) == OT__JIT_SIG &&
           !(in->op == OT_OP_SIG && in->kd == OT_KD_F32);
}

/* The function insn in is, or (sig) calls, where it can be emitted
 * inline: f32 exp (the library's own, one set of steps for both
 * accuracies), and tanh, log and safelog u10 (the library's own; safelog:
 * log's steps on its clamped argument) whatever the SLEEF version; where
 * j's table lets SLEEF's be, log, safelog and tanh u35 (see tanh35_steps,
 * log35_steps). A reduction keeps its accumulators in 4 or 8 of the 16
 * registers: where the inline steps do not fit, the reduction is built
 * again calling them (calls_log_tanh). */
static int inline_fn(const ot_jit *j, const ot_insn *in)
{
    if (in->code != OT_I_UNARY || in->kd != OT_KD_F32) return FN_CALL;
    if ((is_sig(in) ? ot__op(in->op)->jit_base : in->op) == OT_OP_EXP) return FN_EXP;  /* own */
    bool fn = in->op == OT_OP_TANH || in->op == OT_OP_LOG || in->op == OT_OP_SAFELOG;
    bool own = fn && j->acc == 0;                             /* the library's, whatever SLEEF */
    if (!fn || (!own && !j->kt->inline_sleef)) return FN_CALL;
    if (j->reduce && j->calls_log_tanh) return FN_CALL;
    if (in->op == OT_OP_TANH) return own ? FN_TANH : FN_TANH35;
    if (in->op == OT_OP_LOG) return own ? FN_LOG : FN_LOG35;
    return own ? FN_SAFELOG : FN_SAFELOG35;
}

/* Whether a body insn calls a function (else it is all inline). */
static bool needs_call(const ot_jit *j, const ot_insn *in)
{
    return (in->code == OT_I_UNARY || in->code == OT_I_BINARY) &&
           ot__jit_lowering(in->op) != OT__JIT_INLINE && inline_fn(j, in) == FN_CALL;
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
    static const unary_steps_fn steps[NFN] = {[FN_EXP] = ot__jit_exp_steps,
                                              [FN_TANH] = ot__jit_tanh_steps,
                                              [FN_LOG] = ot__jit_log_steps,
                                              [FN_LOG35] = ot__jit_log35_steps,
                                              [FN_TANH35] = ot__jit_tanh35_steps};
    static const int ntemp[NFN] = {[FN_EXP] = 5, [FN_TANH] = 6, [FN_LOG] = 5, [FN_LOG35] = 4,
                                   [FN_TANH35] = 8};
    static const int ntemp_vex[NFN] = {[FN_LOG35] = 7};
    bool floor = fn == FN_SAFELOG || fn == FN_SAFELOG35;
    int base = fn == FN_SAFELOG ? FN_LOG : fn == FN_SAFELOG35 ? FN_LOG35 : fn;
    int n = !r->c->evex && ntemp_vex[base] ? ntemp_vex[base] : ntemp[base];
    ot__jit_emit_unary_steps(r, pos, a, steps[base], n, floor);
}

/* A cast to the dtype a value has (the kernel's copy of a load into a
 * buffer of its own, a store's): the value itself, copied to a register of
 * its own when the operand is read again. */
static void emit_same_dtype(regs *r, int pos, int a)
{
    int ra = ot__jit_use(r, a, 0);
    ot__jit_retire(r, pos);
    int d = r->val_of[ra] < 0 ? ra : ot__jit_take(r, 1u << ra);
    if (d != ra) ot__jit_vmovaps(r, d, ra);
    ot__jit_bind(r, pos, d);
}

void ot__jit_emit_insn(regs *r, int pos)
{
    const ot_insn *in = &r->insns[pos];
    const int16_t *arg = r->j->arg[pos];
    const void *fn = callee(r->j, in);
    int inl = inline_fn(r->j, in);
    if (is_sig(in)) ot__jit_emit_sig(r, pos, fn, arg[0]);
    else if (fn) ot__jit_emit_call(r, pos, fn, arg[0], in->code == OT_I_BINARY ? arg[1] : -1);
    else if (inl != FN_CALL) emit_inline_fn(r, pos, inl, arg[0]);
    else if (in->code == OT_I_CAST) emit_same_dtype(r, pos, arg[0]);
    else if (in->code == OT_I_UNARY) ot__jit_emit_unary(r, pos, in->op, arg[0]);
    else if (in->code == OT_I_BINARY) ot__jit_emit_binary(r, pos, in->op, arg[0], arg[1]);
    else ot__jit_emit_fma(r, pos, in->op == OT_OP_SUB, arg[0], arg[1], arg[2]);
}

/* ---- the function ----------------------------------------------------------- */

/* The frame below rbp is V-aligned; r12 holds in, r13 out, r14 nbytes,
 * rbx the byte offset that the loop walks. */
void ot__jit_emit_prologue(regs *r, int frame)
{
    code *c = r->c;
    ot__x86_push(c, RBP);
    ot__x86_mov_rr(c, RBP, RSP);
    ot__x86_push(c, RBX);
    ot__x86_push(c, R12);
    ot__x86_push(c, R13);
    ot__x86_push(c, R14);
    ot__x86_push(c, R15);
    ot__x86_put(c, (const uint8_t[]){0x48, 0x81, 0xEC}, 3);            /* sub rsp, frame */
    ot__x86_put4(c, frame);
    ot__x86_put(c, (const uint8_t[]){0x48, 0x83, 0xE4, (uint8_t)-r->vbytes}, 4);   /* and rsp, -V */
    ot__x86_mov_rr(c, R12, 7);                                         /* rdi */
    ot__x86_mov_rr(c, R13, 6);                                         /* rsi */
    ot__x86_mov_rr(c, R14, 2);                                         /* rdx */
}

void ot__jit_emit_epilogue(code *c)
{
    ot__x86_put(c, (const uint8_t[]){0xC5, 0xF8, 0x77}, 3);            /* vzeroupper */
    ot__x86_put(c, (const uint8_t[]){0x48, 0x8D, 0x65, 0xD8}, 4);      /* lea rsp, [rbp - 40] */
    ot__x86_pop(c, R15);
    ot__x86_pop(c, R14);
    ot__x86_pop(c, R13);
    ot__x86_pop(c, R12);
    ot__x86_pop(c, RBX);
    ot__x86_pop(c, RBP);
    ot__x86_put1(c, 0xC3);
}

/* Forgets what the registers held: a new iteration (or copy) of the body. */
void ot__jit_reset_regs(regs *r)
{
    for (int g = 0; g < NREG; g++) r->val_of[g] = -1;
    for (int v = 0; v < r->j->ninsn; v++) {
        r->reg_of[v] = -1;
        r->spilled[v] = r->j->pre[v];   /* in its slot from emit_pre on */
    }
}

/* Stores the outputs at this copy's offset (or into the tail's pads), each
 * value once: exec passes one address per buffer. A reduction's result,
 * output 0, is folded instead. */
void ot__jit_emit_stores(regs *r, bool stream)
{
    const ot_jit *j = r->j;
    int first = r->red >= 0;
    for (int q = first; q < j->nout; q++) {
        if (j->out_val[q] < 0 || !j->out_vector[q]) continue;
        bool again = false;
        for (int p = first; p < q; p++) again |= j->out_vector[p] && j->out_val[p] == j->out_val[q];
        if (again) continue;
        int g = ot__jit_use(r, j->out_val[q], 0);
        bool padded = r->pad && !r->mtail;   /* exec's copy, at out[nout + q] */
        int base = padded ? -1 : ot__jit_ptr_reg(r, -1 - q);
        if (base < 0) ot__x86_load_ptr(r->c, R13, 8 * (padded ? j->nout + q : q));
        if (base < 0) base = RAX;
        int index = padded ? NO_INDEX : RBX;
        if (r->half_in) ot__jit_half_store(r, g, base, index, stream);
        else if (r->pad && r->mtail) ot__jit_masked_store(r, g, base, index, r->disp);
        else if (stream) ot__jit_vmov_stream(r, g, base, index, r->disp);
        else ot__jit_vmov_store(r, g, base, index, r->disp);
    }
}

/* The kernel's prefetches for this copy (ot__sched_prefetches): a
 * prefetcht1 at pf_bytes past the copy's vector of each such load, once
 * per 64-byte line (AVX2's odd copies skip), none in the padded tail. */
void ot__jit_emit_prefetches(regs *r)
{
    if (r->pad || r->half_in || r->disp % 64) return;
    for (int p = 0; p < r->j->npf; p++) {
        int v = r->j->pf_val[p], base = ot__jit_ptr_reg(r, v);
        if (base < 0) {
            ot__x86_load_ptr(r->c, R12, 8 * v);
            base = RAX;
        }
        ot__x86_prefetch(r->c, 2, base, RBX, r->disp + r->j->pf_bytes[p]);
    }
}

/* The scalar ops the code computes (pre), once per call, each from its
 * operands' slots into its own: inline, calling nothing, so the pointers,
 * constants and a reduction's accumulators in registers stay (the
 * allocator hands out none of those). */
void ot__jit_emit_pre(regs *r)
{
    ot__jit_reset_regs(r);
    for (int pos = 0; pos < r->j->ninsn; pos++) {
        const ot_insn *in = &r->insns[pos];
        if (!r->j->pre[pos]) continue;
        if (in->code == OT_I_UNARY && in->op == OT_OP_RSQRT)
            ot__jit_emit_rsqrt_bcast(r, pos, r->j->arg[pos][0]);
        else ot__jit_emit_insn(r, pos);
        ot__jit_vmov_store(r, r->reg_of[pos], RSP, NO_INDEX, ot__jit_slot(r, pos));
        ot__jit_pin(r, pos, r->reg_of[pos]);
        for (int g = 0; g < NREG; g++) ot__jit_release(r, g);
    }
}

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
    ot__jit_emit_pointers(r);
    ot__jit_emit_splats(r);
    ot__jit_emit_pre(r);
}

/* fn(in, out, nbytes): rbx walks the byte offset 0, V, 2V, ... < nbytes (V
 * the vector's bytes). With stream, outputs are written by non-temporal
 * stores, not fenced: exec.c fences once after a chunk's last tile (an
 * sfence per call waited for the write-combining buffers to drain 16384
 * times in W9). */
void ot__jit_emit_body(regs *r, bool stream)
{
    ot__jit_reset_regs(r);
    ot__jit_emit_prefetches(r);
    for (int pos = 0; pos < r->j->ninsn; pos++)
        if (r->j->body[pos]) ot__jit_emit_insn(r, pos);
    ot__jit_emit_stores(r, stream);
}

/* The loop over vectors while rbx < r14, rbx starting at 0, at least one
 * turn. */
static void emit_loop(regs *r, bool stream)
{
    code *c = r->c;
    ot__x86_put(c, (const uint8_t[]){0x31, 0xDB}, 2);                  /* xor ebx, ebx */
    size_t loop = c->n;
    ot__jit_emit_body(r, stream);
    int step = r->half_in ? r->vbytes / 2 : r->vbytes;   /* 16-bit code: 2 bytes a lane */
    ot__x86_put(c, (const uint8_t[]){0x48, 0x83, 0xC3, (uint8_t)step}, 4);          /* add rbx, V */
    ot__x86_gpr_rr(c, 0x39, RBX, R14);                                 /* cmp rbx, r14 */
    ot__x86_jump_back(c, JB, loop);
}

static void emit_function(regs *r, int frame, bool stream)
{
    code *c = r->c;
    ot__jit_emit_prologue(r, frame);
    ot__jit_emit_constants(r);
    if (r->tail) ot__jit_emit_live_mask(r, R14);
    emit_invariants(r);
    ot__x86_put(c, (const uint8_t[]){0x4D, 0x85, 0xF6}, 3);            /* test r14, r14 */
    size_t done = ot__x86_jump_fwd(c, JE);
    emit_loop(r, stream);
    ot__x86_land(c, done);
    ot__jit_emit_epilogue(c);
    r->nptr = 0;
    r->splat = false;
    r->npin = 0;
}

/* A row's last part of a vector, at rbx: the body once more, read and
 * written in place under the live lanes' mask. */
static void emit_masked_tail(regs *r)
{
    r->disp = 0;
    r->pad = r->tail = r->mtail = true;
    ot__jit_emit_body(r, false);
    r->pad = r->tail = r->mtail = false;
}

/* fn_rows(in, out, nbytes, rs): the loop of emit_function once per row
 * over its whole vectors, then its last part of one (emit_masked_tail),
 * the invariants (pointers, broadcasts) taken again for each row, since
 * every input steps: rs, the rows left and the tail's bytes are kept at
 * `at` in the frame, the tail's mask made once; after a row, in[v] +=
 * rs[1 + v] for each load, out[q] += rs[1 + ninsn + q], through rcx (the
 * pointer registers are loaded again anyway). */
static void emit_rows_function(regs *r, int frame, int32_t at, bool stream)
{
    code *c = r->c;
    ot__jit_emit_prologue(r, frame);
    ot__x86_gpr_mem(c, 0x89, RCX, RSP, at);                            /* mov [rsp + at], rcx */
    ot__x86_gpr_mem(c, 0x8B, RAX, RCX, 0);                             /* mov rax, [rcx] */
    ot__x86_gpr_mem(c, 0x89, RAX, RSP, at + 8);                        /* mov [rsp + at + 8], rax */
    ot__jit_emit_constants(r);
    ot__x86_mov_rr(c, RCX, R14);
    ot__jit_emit_row_masks(r);
    ot__x86_gpr_mem(c, 0x89, RCX, RSP, at + 16);
    ot__x86_put(c, (const uint8_t[]){0x49, 0x83, 0xE6, (uint8_t)-r->vbytes}, 4);  /* and r14, -V */
    size_t row = c->n;
    emit_invariants(r);
    ot__x86_put(c, (const uint8_t[]){0x31, 0xDB}, 2);   /* rbx = 0: a row shorter than a vector */
    ot__x86_put(c, (const uint8_t[]){0x4D, 0x85, 0xF6}, 3);            /* test r14, r14 */
    size_t to_tail = ot__x86_jump_fwd(c, JE);
    emit_loop(r, stream);
    ot__x86_land(c, to_tail);
    ot__x86_gpr_mem(c, 0x83, 7, RSP, at + 16);                         /* cmp qword [.], */
    ot__x86_put1(c, 0);                                                /*     0 */
    size_t no_tail = ot__x86_jump_fwd(c, JE);
    emit_masked_tail(r);
    ot__x86_land(c, no_tail);
    ot__x86_gpr_mem(c, 0x8B, RAX, RSP, at);                            /* mov rax, [rsp + at] */
    ot__jit_emit_row_steps(r, 0);
    ot__x86_gpr_mem(c, 0xFF, 1, RSP, at + 8);                          /* dec qword [rsp + at + 8] */
    ot__x86_jump_back(c, JNE, row);
    ot__jit_emit_epilogue(c);
    r->nptr = 0;
    r->splat = false;
    r->npin = 0;
}

/* The fn_rows and (with stream) fn_rows_stream of a column-blocked kernel
 * or a row kernel (runs_rows), their frame one vector and two words past
 * emit_function's. */
static void emit_rows_functions(regs *r, ot_jit *j, bool stream)
{
    int32_t at = ot__jit_slot(r, j->ninsn + 1);
    int frame = at + r->vbytes;
    for (int s = 0; s <= (int)stream; s++) {
        ot__x86_align16(r->c);
        *(s ? &j->rows_stream_at : &j->rows_at) = r->c->n;
        emit_rows_function(r, frame, at, s);
    }
}

/* ---- which kernels ------------------------------------------------------------ */

/* Maps instruction i's operands to the values they read (writer: the
 * instruction that last wrote each buffer) and notes whether it is in the
 * body; *kd takes the dtype of the first vector value. False where i has
 * an operand nothing wrote, or a dtype or op generated code does not do. */
static bool map_insn(ot_jit *j, const ot_kernel *k, int i, int *writer, int *kd)
{
    const ot_insn *in = &k->insns[i];
    const int16_t ops[3] = {in->a, in->b, in->c};
    bool ok = true;
    for (int o = 0; o < 3; o++) {
        j->arg[i][o] = -1;
        if (ops[o] < 0) continue;
        if (ops[o] >= k->nbuf || writer[ops[o]] < 0) ok = false;
        else j->arg[i][o] = (int16_t)writer[ops[o]];
    }
    bool body = in->code != OT_I_LOAD && in->code != OT_I_PARAM && !(in->scalar & 8);
    j->body[i] = body;
    if (body) {
        if (*kd < 0) *kd = in->kd;
        ok = ok && in->kd == *kd && *kd != OT_KD_I32 &&
             (in->code != OT_I_CAST || in->kd_from == in->kd);   /* a copy, not a conversion */
        ok = ok && (!needs_call(j, in) || callee(j, in));
    }
    if (in->code == OT_I_LOAD && !(in->scalar & 8)) {
        const ot_view *v = &k->loads[in->arg];
        if (*kd < 0) *kd = ot__kd(v->dtype);
        ok = ok && ot__kd(v->dtype) == *kd && v->dtype != OT_I32;
    }
    return ok;
}

/* Whether every scalar operand of the body has the body's dtype kd: they
 * are broadcast in it. */
static bool scalars_fit(const ot_jit *j, const ot_kernel *k, int kd)
{
    for (int i = 0; i < k->ninsn; i++)
        for (int o = 0; o < 3 && j->body[i]; o++) {
            int v = j->arg[i][o];
            const ot_insn *src = &k->insns[v >= 0 ? v : 0];
            int vkd = src->code == OT_I_LOAD ? ot__kd(k->loads[src->arg].dtype) : src->kd;
            if (v >= 0 && !j->body[v] && vkd != kd) return false;
        }
    return true;
}

/* A gathered load fills its own tile buffer before the loop runs: no
 * other instruction may write that buffer (writes: per buffer, how many
 * instructions write it). */
static bool gathers_fit(const ot_kernel *k, const int *writes)
{
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code != OT_I_LOAD || (in->scalar & 8)) continue;
        bool strided = k->ndim > 0 && k->loads[in->arg].strides[k->ndim - 1] != 1;
        if (strided && writes[in->dst] > 1) return false;
    }
    return true;
}

/* The value each of j's nout outputs stores (its buffer's last writer)
 * and whether it is a vector; false where an output has no value. */
static bool map_outputs(ot_jit *j, const ot_kernel *k, const int *writer)
{
    bool ok = true;
    for (int q = 0; ok && q < j->nout; q++) {
        int buf = q == 0 ? k->result : k->xstores[q - 1].result;
        bool scalar = q == 0 ? k->result_scalar : k->xstores[q - 1].scalar;
        j->out_val[q] = buf >= 0 && buf < k->nbuf ? (int16_t)writer[buf] : -1;
        ok = j->out_val[q] >= 0;
        j->out_vector[q] = ok && !scalar && (j->body[j->out_val[q]] ||
                                             !(k->insns[j->out_val[q]].scalar & 8));
    }
    return ok;
}

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
        ok = map_insn(j, k, i, writer, &kd) && in->dst >= 0 && in->dst < k->nbuf;
        if (ok) {
            writer[in->dst] = i;
            writes[in->dst]++;
        }
    }
    j->nout = 1 + k->nxstore;
    ok = ok && scalars_fit(j, k, kd) && gathers_fit(k, writes) && map_outputs(j, k, writer);
    j->kd = kd < 0 ? OT_KD_F32 : kd;
    free(writer);
    free(writes);
    return ok;
}

/* Whether scalar insn i can be one of the ops the code computes before its
 * loop (pre): arithmetic of the body's dtype emitted inline (rsqrt too,
 * which a body cannot have in f32: see ot__jit_emit_rsqrt_bcast), on
 * operands the code has as broadcasts of that dtype. Such an op computes
 * each lane alone, so its value equals exec's run of the tile kernel on
 * one element in a zero-padded vector; nothing is called (a call would
 * clobber the pointers and constants in registers, and SLEEF's sin and
 * cos are not lane by lane: see fn_tail), and the inline functions (exp,
 * log, tanh) would need constants the body may not have. */
static bool hoistable(const ot_jit *j, const ot_kernel *k, int i)
{
    const ot_insn *in = &k->insns[i];
    bool op = in->code == OT_I_UNARY || in->code == OT_I_BINARY || in->code == OT_I_FMA;
    if (!op || !(in->scalar & 8) || in->kd != j->kd || is_sig(in) ||
        inline_fn(j, in) != FN_CALL || ot__custom_insn(in))
        return false;
    if (needs_call(j, in) && !(in->code == OT_I_UNARY && in->op == OT_OP_RSQRT)) return false;
    for (int o = 0; o < 3; o++) {
        int v = j->arg[i][o];
        if (v < 0) continue;
        const ot_insn *src = &k->insns[v];
        int dt = src->code == OT_I_LOAD ? k->loads[src->arg].dtype : ot__kd_dtype(src->kd);
        if (j->body[v] || ot__kd((ot_dtype)dt) != j->kd) return false;
    }
    return true;
}

/* Marks the scalar ops the code computes (pre): each hoistable one that no
 * op left to exec's prelude reads and that no output stores as a scalar
 * (exec copies those from its prelude's values). */
static void choose_pre(ot_jit *j, const ot_kernel *k)
{
    for (int i = 0; i < k->ninsn; i++) j->pre[i] = !j->body[i] && hoistable(j, k, i);
    for (int q = 0; q < j->nout; q++)
        if (j->out_val[q] >= 0 && !j->out_vector[q]) j->pre[j->out_val[q]] = false;
    for (int i = k->ninsn - 1; i >= 0; i--)
        for (int o = 0; o < 3 && !j->body[i] && !j->pre[i]; o++)
            if (j->arg[i][o] >= 0) j->pre[j->arg[i][o]] = false;
}

/* The last position (in the body, or the ops before it) reading each
 * value; outputs live to the end. */
static void last_uses(const ot_jit *j, int16_t *last)
{
    for (int v = 0; v < j->ninsn; v++) last[v] = -1;
    for (int i = 0; i < j->ninsn; i++)
        for (int o = 0; o < 3 && (j->body[i] || j->pre[i]); o++)
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
        if (jits[i]->rows_at) {
            entry = m + at + jits[i]->rows_at;
            memcpy(&jits[i]->fn_rows, &entry, sizeof entry);
        }
        if (jits[i]->rows_stream_at) {
            entry = m + at + jits[i]->rows_stream_at;
            memcpy(&jits[i]->fn_rows_stream, &entry, sizeof entry);
        }
        if (jits[i]->red_rows_at) {
            entry = m + at + jits[i]->red_rows_at;
            memcpy(&jits[i]->red_rows, &entry, sizeof entry);
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
 * memory, not by a call (sig alone measured 5-10% slower as code), where
 * exp is inline (exp alone over 2^24 f32: 4.8 against 5.1 ms), or over
 * rows, inline, which exec then runs a run of rows per call where the
 * interpreter pays its prelude per row (softmax's last divide). */
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

/* Whether exec may run k a run of whole rows per call (exec_rows.c), for
 * which it needs fn_rows: elementwise over rows, its one output in place,
 * rows of any length (a masked tail ends each). */
static bool runs_rows(const ot_kernel *k)
{
    return k->kind == OT_KER_EW && k->ndim >= 2 && k->direct_store && !k->nxstore;
}

static bool worth_it(const ot_jit *j, const ot_kernel *k, bool stream)
{
    int nbody = 0;
    for (int i = 0; i < k->ninsn; i++) nbody += j->body[i];
    bool inl = !calls(j, k);
    return nbody >= 2 || (nbody == 1 && ((stream && inl) || (inline_fns(j, k) >> FN_EXP & 1))) ||
           (nbody <= 1 && runs_rows(k) && inl);
}

bool ot__jit_available(const ot_kernels *kt)
{
    return kt->vfn1[0][OT_OP_EXP][0] && ot__isas[kt->isa].jit;
}

/* The reductions generated code does, by kind alone: sum, mean, max and
 * min of floats over the innermost dim or everything. Columns (but for
 * column_sum's body), arg* and i32 stay with the interpreter. */
static bool reduces(const ot_kernel *k)
{
    int op = k->red_op;
    return k->kind == OT_KER_REDUCE && k->ndim > 0 &&
           (k->red_axis == k->ndim - 1 || k->red_axis == -1) &&
           (op == OT_OP_SUM || op == OT_OP_MEAN || op == OT_OP_MAX || op == OT_OP_MIN);
}

/* A sum or mean down a column (over any dim but the innermost) gets the
 * elementwise code of its body, the values to sum its first output:
 * exec_reduce.c's column walk adds them up tile by tile as it adds the
 * interpreter's, so the sums are the same bits. The MLP step's bias
 * gradient, relu'(z) * g summed over the batch with relu'(z) * g kept for
 * the weight gradient, ran interpreted at 2.5x an elementwise kernel's
 * time (128x512, Zen 5). */
static bool column_sum(const ot_kernel *k)
{
    return k->kind == OT_KER_REDUCE && k->ndim >= 2 && k->red_axis >= 0 &&
           k->red_axis < k->ndim - 1 && (k->red_op == OT_OP_SUM || k->red_op == OT_OP_MEAN) &&
           !k->result_scalar && k->result_kd != OT_KD_I32;
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

/* Whether the 16-bit code suits k: one vector output of an f32 body, every
 * vector load of a 16-bit dtype or f32 (load_dt), no column blocks, a
 * table that converts them (jit_half.c). */
static bool half_fits(const ot_jit *j, const ot_kernel *k, const ot_kernels *kt,
                      const uint8_t *load_dt, int out_dt)
{
    bool ok = j->kd == OT_KD_F32 && j->nout == 1 && j->out_vector[0] && !k->col_blocked &&
              (ot__is_half(out_dt) || out_dt == OT_F32) &&
              ot__jit_half_fits(kt, load_dt, k->ninsn, out_dt);
    for (int i = 0; i < k->ninsn && ok; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code == OT_I_LOAD && !(in->scalar & 8))
            ok = ot__is_half(load_dt[i]) || load_dt[i] == OT_F32;
    }
    return ok;
}

/* Whether exec may run k's rows a run at a time (exec_reduce.c), for
 * which it needs red_rows: a reduction over the rows of several. */
static bool folds_rows(const ot_kernel *k)
{
    return k->ndim >= 2 && k->red_axis == k->ndim - 1;
}

/* A reduction's red (and red_rows). Reductions gain what the interpreter
 * spends per tile and per op (measured on softmax's max and
 * sum(exp(x - m))), so every one that fits gets code, a single load
 * included. */
static void emit_reduction(regs *r, ot_jit *j, const ot_kernel *k)
{
    int32_t frame = ot__jit_slot(r, k->ninsn) + r->vbytes;
    j->reduce = true;
    r->red = k->red_op == OT_OP_MEAN ? OT_OP_SUM : k->red_op;
    r->nreg = r->calls ? NREG : r->red == OT_OP_SUM ? ACC_REG : NAN_REG;
    ot__jit_emit_reduce_function(r, frame);
    if (!folds_rows(k)) return;
    ot__x86_align16(r->c);
    j->red_rows_at = r->c->n;
    ot__jit_emit_reduce_rows_function(r, frame);
}

/* An elementwise kernel's fn and what it needs besides: fn_stream, the
 * rows functions (not for 16-bit code) and fn_tail where they apply. */
static void emit_elementwise(regs *r, ot_jit *j, const ot_kernel *k, bool stream)
{
    int32_t frame = ot__jit_slot(r, k->ninsn) + r->vbytes;
    code *c = r->c;
    emit_function(r, frame, false);
    if (stream) {
        ot__x86_align16(c);
        j->stream_at = c->n;
        emit_function(r, frame, true);
    }
    if ((k->col_blocked || runs_rows(k)) && !r->half_in) emit_rows_functions(r, j, stream);
    if (r->calls) {
        ot__x86_align16(c);
        j->tail_at = c->n;
        r->tail = true;
        emit_function(r, frame, false);
    }
}

/* k's prefetches as the values its code loads (16-bit code has none). */
static void note_prefetches(ot_jit *j, const ot_kernel *k)
{
    for (int p = 0; p < k->npf; p++)
        for (int v = 0; v < k->ninsn; v++) {
            const ot_insn *in = &k->insns[v];
            if (in->code != OT_I_LOAD || (in->scalar & 8) || in->arg != k->pf_load[p]) continue;
            j->pf_val[j->npf] = (int16_t)v;
            j->pf_bytes[j->npf++] = k->pf_bytes[p];
            break;
        }
}

/* ot__jit_build's attempt with log and tanh inline or (calls_log_tanh)
 * called; *retry: a reduction whose inline log or tanh did not fit. */
/* half_in: the 16-bit code of ot__jit_build_half, its output half_out. */
static ot_jit *build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream,
                     bool calls_log_tanh, bool *retry, const uint8_t *half_in, int half_out)
{
    ot_jit *j = ot__calloc(1, sizeof *j);
    code c = {0};
    regs r = {.c = &c, .j = j, .insns = k->insns, .nreg = NREG, .red = -1, .half_in = half_in,
              .half_out = half_out};
    bool ok = j != NULL, reduce = k->kind == OT_KER_REDUCE && !column_sum(k);
    stream = stream && !reduce;
    if (ok) {
        j->kt = kt;
        j->acc = acc;
        j->reduce = reduce;
        j->calls_log_tanh = calls_log_tanh;
        j->ninsn = k->ninsn;
        j->arg = ot__malloc(sizeof *j->arg * (size_t)k->ninsn);
        j->body = ot__calloc((size_t)k->ninsn, sizeof *j->body);
        j->pre = ot__calloc((size_t)k->ninsn, sizeof *j->pre);
        r.reg_of = ot__malloc(sizeof *r.reg_of * (size_t)k->ninsn);
        r.spilled = ot__malloc((size_t)k->ninsn);
        r.last = ot__malloc(sizeof *r.last * (size_t)k->ninsn);
        ok = j->arg && j->body && j->pre && r.reg_of && r.spilled && r.last && map_values(j, k) &&
             (half_in ? half_fits(j, k, kt, half_in, half_out)
                      : reduce ? reduce_fits(j, k) : worth_it(j, k, stream));
    }
    if (ok && !half_in) choose_pre(j, k);   /* see hoistable */
    if (ok && !half_in) note_prefetches(j, k);
    if (ok) {
        r.pp = j->kd == OT_KD_F64;
        r.w = r.pp;
        r.vbytes = kt->vbytes;
        c.evex = kt->vbytes == 64;
        r.wig = c.evex ? r.w : 0;
        r.calls = calls(j, k);
        r.fns = inline_fns(j, k);
        ot__jit_place_constants(&r);
        if (half_out == OT_BF16)
            r.fn_used[B_LSB] = r.fn_used[B_RND] = r.fn_used[B_QUIET] = true;
        last_uses(j, r.last);
    }
    if (ok && reduce) {
        emit_reduction(&r, j, k);
        ok = !c.oom;
        *retry = !ok && (r.fns & ~(1u << FN_EXP));
    } else if (ok) {
        emit_elementwise(&r, j, k, stream);
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
    if ((k->kind != OT_KER_EW && !reduces(k) && !column_sum(k)) || k->ninsn < 1 ||
        k->ninsn > OT_JIT_MAX_INSN || !ot__jit_available(kt))
        return NULL;
    bool retry = false;
    ot_jit *j = build(k, kt, acc, stream, false, &retry, NULL, 0);
    return j || !retry ? j : build(k, kt, acc, stream, true, &retry, NULL, 0);
}

ot_jit *ot__jit_build_half(const ot_kernel *k, const ot_kernels *kt, int acc,
                           const uint8_t *load_dt, int out_dt)
{
    if (k->kind != OT_KER_EW || k->ninsn < 1 || k->ninsn > OT_JIT_MAX_INSN ||
        !ot__jit_available(kt))
        return NULL;
    bool retry = false;
    return build(k, kt, acc, true, false, &retry, load_dt, out_dt);
}

void ot__jit_free(ot_jit *j)
{
    if (!j) return;
    free(j->code);
    free(j->arg);
    free(j->body);
    free(j->pre);
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

ot_jit *ot__jit_build_half(const ot_kernel *k, const ot_kernels *kt, int acc,
                           const uint8_t *load_dt, int out_dt)
{
    (void)k, (void)kt, (void)acc, (void)load_dt, (void)out_dt;
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

#endif /* OT_JIT_X86 */
