/*
 * fuzz.c - the property-based differential fuzzer (see fuzz.h).
 *
 * A tree is a small IR (fz_ir): leaves (host data plus a view recipe),
 * constants and op nodes, children before parents. Generation is driven by
 * the op table alone: any op in 0..OT_OP_COUNT-1 with generic attributes,
 * kept when ot_build_at accepts it, so an op added later is fuzzed as is.
 * The IR is instantiated on each backend (fz_inst) and the results compared:
 * ref is the oracle, cpu configurations must agree within a tolerance that
 * grows with the tree's sensitivity (ref re-run on inputs perturbed by a few
 * ulps), and bitwise where the README promises it (thread counts, generated
 * code vs the interpreter). Gradients are checked against ref and against
 * central differences in f64.
 *
 * f16/bf16 (FUZZ_HALF, forward and many trees only): leaves, cast targets
 * and outputs may be 16-bit. cpu computes a 16-bit node in f32 and rounds
 * only at a cast to f16/bf16 and at a 16-bit output (docs/half.md), ref in
 * double with the same roundings; so the oracle treats a 16-bit node as an
 * f32 one (noise of f32's size, round32 rounds it to f32), and a 16-bit
 * output's value may differ by the one rounding: 1 unit of the 16-bit
 * dtype relative (2^-10 for f16, 2^-7 for bf16), plus 2^-24 absolute (an
 * f16 subnormal's unit), plus what the noisy variants show (a cast inside
 * the tree that rounds the other way, and what follows from that). Each tree runs in a forked child when asked,
 * so a crash of the library is a finding, not the end of the run.
 */
#define _DEFAULT_SOURCE
#include "fuzz.h"

#include "optree.h"
#include "internal.h"   /* ot__nodes_released: which dead nodes are still checkable */
#include "../examples/custom_ops.h"
#include "../examples/cumsum_op.h"
#include "replace.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FZ_MAXN 48
#define NCFG 33          /* cpu configurations, see cfg_name */
#define FZ_MAXL 16
#define FZ_LEAF (-2)
#define FZ_CONST (-3)

enum { V_NONE, V_SLICE, V_T, V_BCAST, V_RESHAPE };
enum { OUT_FRESH, OUT_STRIDED, OUT_BCAST, OUT_LEAF, OUT_SAME };

/* What went wrong; a shrink keeps a candidate only when it fails the same way. */
enum {
    FK_OK, FK_CRASH, FK_RC, FK_VALUE, FK_THREADS, FK_JIT, FK_ELEMOPS, FK_GRAD_RC, FK_GRAD, FK_FD,
    FK_PARSE, FK_REBUILD, FK_PROGRAM, FK_SAVE, FK_DEAD, FK_COUNT
};
static const char *const fail_names[FK_COUNT] = {
    "ok", "crash", "error-code mismatch", "forward value", "threads bitwise",
    "jit bitwise", "elem_ops", "grad error-code mismatch", "grad value", "finite difference",
    "ot_pp/ot_parse round trip", "rebuilt tree", "program bitwise", "save/load", "dead node"};
static const char *const fail_area[FK_COUNT] = {
    "-", "compile/exec", "compile/exec", "kernels", "compile/exec", "jit", "compile/exec",
    "autodiff", "autodiff", "autodiff", "print/parse", "plan cache", "program", "io", "pools"};

typedef struct fz_leaf {
    ot_dtype dtype;
    ot_shape base;
    double *data;           /* numel(base) values */
    int view;
    int nidx;
    ot_index idx[OT_MAX_DIMS];
    int perm[OT_MAX_DIMS];
    ot_shape to;
} fz_leaf;

typedef struct fz_node {
    int op;                 /* ot_op, FZ_LEAF or FZ_CONST */
    int a, b;
    ot_args args;
    int leaf;
    double cval;
    int ckind;              /* 0 ot_const, 1 ot_constf, 2 ot_consti */
} fz_node;

typedef struct fz_ir {
    int nn, nl;
    fz_node n[FZ_MAXN];
    fz_leaf l[FZ_MAXL];
    int mode;               /* FUZZ_FORWARD, FUZZ_GRAD or FUZZ_MANY */
    int nroots;
    int roots[3];
    int out_kind[3], out_leaf[3];
    ot_dtype out_dtype[3];
    int ne;                 /* grad: next_error leaf, or -1 for ones */
    int ncfg;
    int cfg[NCFG];          /* cpu configurations to run */
    uint64_t pops_seed;     /* check_pops' draws: pools, pops, uses */
} fz_ir;

/* ---- random numbers ------------------------------------------------------ */

typedef struct rng { uint64_t s; } rng;
static uint64_t next_u64(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int rnd(rng *r, int n) { return n <= 0 ? 0 : (int)(next_u64(r) % (uint64_t)n); }
static double unif(rng *r) { return (double)(next_u64(r) >> 11) * 0x1.0p-53; }
static int chance(rng *r, int pct) { return rnd(r, 100) < pct; }

/* ---- configurations ------------------------------------------------------ */

/* cpu configuration c < 32: isa (c/4)%4, jit (c/2)%2, threads 1 or 3 (c%2),
 * and from 16 on accuracy OT_ULP35 with streaming stores for every output;
 * FUSION_OFF (32) is the unfused plan. */
#define FUSION_OFF 32
#define CFG_ISA(c) isas[((c) / 4) % 4]
#define CFG_JIT(c) (((c) / 2) % 2)
#define CFG_THREADS(c) ((c) % 2 ? 3 : 1)
#define CFG_FAST(c) ((c) >= 16 && (c) < FUSION_OFF)
/* On aarch64 the second slot is the NEON table (the x86 ones are absent). */
#if defined(__aarch64__)
static const char *const isas[4] = {"scalar", "neon", "avx2", "avx512"};
#else
static const char *const isas[4] = {"scalar", "sse2", "avx2", "avx512"};
#endif
static ot_backend *cfg_be[NCFG];
static int cfg_state[NCFG];  /* 0 untried, 1 ok, -1 unavailable */
static ot_backend *ref_be;

static void cfg_name(int c, char *buf, size_t n)
{
    if (c == FUSION_OFF) snprintf(buf, n, "cpu fusion=off");
    else snprintf(buf, n, "cpu OT_ISA=%s OT_JIT=%d threads=%d%s", CFG_ISA(c), CFG_JIT(c),
                  CFG_THREADS(c), CFG_FAST(c) ? " accuracy=ULP35 OT_STREAM_BYTES=64" : "");
}

static ot_backend *cfg_backend(int c)
{
    if (cfg_state[c]) return cfg_be[c];
    ot_backend_opts o = {.threads = 1};
    if (c == FUSION_OFF) {
        o.fusion = OT_FUSION_OFF;
    } else {
        setenv("OT_ISA", CFG_ISA(c), 1);
        setenv("OT_JIT", CFG_JIT(c) ? "1" : "0", 1);
        if (CFG_FAST(c)) setenv("OT_STREAM_BYTES", "64", 1);
        o.threads = CFG_THREADS(c);
        o.accuracy = CFG_FAST(c) ? OT_ULP35 : OT_ULP10;
    }
    cfg_be[c] = ot_backend_new("cpu", &o);
    unsetenv("OT_ISA");
    unsetenv("OT_JIT");
    unsetenv("OT_STREAM_BYTES");
    ot_clear_error();
    cfg_state[c] = cfg_be[c] ? 1 : -1;
    return cfg_be[c];
}

static void backends_free(void)
{
    for (int c = 0; c < NCFG; c++) {
        ot_backend_free(cfg_be[c]);
        cfg_be[c] = NULL;
        cfg_state[c] = 0;
    }
    ot_backend_free(ref_be);
    ref_be = NULL;
}

/* ---- the IR -------------------------------------------------------------- */

static int64_t numel(const ot_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

static void ir_free(fz_ir *ir)
{
    for (int i = 0; i < ir->nl; i++) free(ir->l[i].data);
    ir->nl = 0;
}

static void ir_copy(fz_ir *dst, const fz_ir *src)
{
    *dst = *src;
    for (int i = 0; i < src->nl; i++) {
        size_t bytes = (size_t)numel(&src->l[i].base) * sizeof(double);
        dst->l[i].data = malloc(bytes ? bytes : 1);
        memcpy(dst->l[i].data, src->l[i].data, bytes);
    }
}

/* An instance of the IR on one backend. */
typedef struct fz_inst {
    ot_tensor *base[FZ_MAXL], *view[FZ_MAXL];
    ot_node *node[FZ_MAXN];
    ot_pool *pool;
} fz_inst;

static int is_half(ot_dtype d) { return d == OT_F16 || d == OT_BF16; }

/* Host data of dtype dt (f16/bf16: floats, which ot_array rounds). */
static void *to_host(const double *d, int64_t n, ot_dtype dt)
{
    size_t es = is_half(dt) ? sizeof(float) : ot_dtype_size(dt);
    char *h = malloc((size_t)(n ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) {
        if (dt == OT_F32 || is_half(dt)) ((float *)h)[i] = (float)d[i];
        else if (dt == OT_F64) ((double *)h)[i] = d[i];
        else ((int32_t *)h)[i] = (int32_t)d[i];
    }
    return h;
}

/* The values of t, row-major, as doubles (malloc'd); NULL on error. */
static double *get_values(const ot_tensor *t, int64_t *n)
{
    *n = ot_tensor_numel(t);
    ot_dtype dt = ot_tensor_dtype(t);
    void *h = malloc((size_t)(*n ? *n : 1) * 8);
    double *d = malloc((size_t)(*n ? *n : 1) * sizeof(double));
    if (ot_get(t, h) != 0) {
        free(h);
        free(d);
        return NULL;
    }
    for (int64_t i = 0; i < *n; i++)
        d[i] = dt == OT_F32 || is_half(dt) ? ((float *)h)[i] : dt == OT_F64 ? ((double *)h)[i]
                                                                  : ((int32_t *)h)[i];
    free(h);
    return d;
}

static ot_tensor *make_view(ot_tensor *b, const fz_leaf *l)
{
    switch (l->view) {
    case V_SLICE: return ot_slice_n(b, l->nidx, l->idx);
    case V_T: return ot_transpose(b, l->perm);
    case V_BCAST: return ot_broadcast_to(b, l->to);
    case V_RESHAPE: return ot_reshape(b, l->to);
    default: return NULL;
    }
}

static int leaf_inst(ot_backend *be, const fz_leaf *l, const double *data, fz_inst *in, int i)
{
    void *h = to_host(data ? data : l->data, numel(&l->base), l->dtype);
    in->base[i] = ot_array(be, l->base, l->dtype, h);
    free(h);
    if (!in->base[i]) return ot_errcode();
    in->view[i] = l->view == V_NONE ? in->base[i] : make_view(in->base[i], l);
    return in->view[i] ? 0 : ot_errcode();
}

static void inst_free(fz_inst *in, int nl)
{
    if (in->pool) ot_pool_pop(in->pool);
    in->pool = NULL;
    for (int i = 0; i < nl; i++) {
        if (in->view[i] && in->view[i] != in->base[i]) ot_tensor_free(in->view[i]);
        ot_tensor_free(in->base[i]);
        in->view[i] = in->base[i] = NULL;
    }
}

static ot_node *const_node(const fz_node *n)
{
    return n->ckind == 1 ? ot_constf((float)n->cval)
         : n->ckind == 2 ? ot_consti((int)n->cval) : ot_const(n->cval);
}

/* Builds node k of the IR from its (already built) children. */
static ot_node *node_build(const fz_ir *ir, fz_inst *in, int k)
{
    const fz_node *n = &ir->n[k];
    if (n->op == FZ_LEAF) return ot_tensor_node(in->view[n->leaf]);
    if (n->op == FZ_CONST) return const_node(n);
    return ot_build_at((ot_op)n->op, n->a >= 0 ? in->node[n->a] : NULL,
                       n->b >= 0 ? in->node[n->b] : NULL, &n->args, "fuzz", k);
}

/* Set while building the f32-rounding variant of ref (an alternative oracle
 * for f32 trees, where ref's double intermediates and the cpu backend's f32
 * ones legitimately part: tanh(12.25) is 1 in f32, so log of it is 0 and
 * not a tiny negative number whose sqrt is NaN). */
static int round32;
/* Nonzero while building a noisy variant of ref (see inst_build): draw
 * noise_draw - 1 of NOISE_DRAWS, sized for accuracy OT_ULP35 (noise_fast) or
 * OT_ULP10. */
static int noise_draw, noise_fast;

/* The noisy variants of ref stand for every result the checked backend may
 * give within its accuracy: each node of the tree off by up to its error
 * bound in ulps of the node's dtype (ref's own double rounding included).
 * Draws 0..11 push every node to the edge of its bound, each node up or down
 * by bit (draw / 2) of its index, flipped in odd draws: so a node alone, and
 * any two nodes in opposite directions, reach both edges (a compare of two
 * computed values flips either way). Draws 12..23 are uniform per element
 * (sums of terms of both signs; and a value chaotic in its input, sin of
 * 4.7e7 where an ulp is 4, takes a dozen unrelated values, so that an
 * argmin over it may pick each candidate). Draw 24 rounds every node to a
 * grid of twice the bound: a value within the bound of an integer or of
 * another node's value becomes equal to it (onehot, eq of a tanh that the
 * backend rounds to 1 and ref to 1 - 2^-24). Draw 25 rounds only the operands of step-like ops
 * (compares, rint, sgn, onehot, casts, minimum/maximum, pow's exponent) to
 * that grid: draw 24's rounding of every node upstream can move a value off
 * the integer it lands on exactly (log(exp(1)) is 1 in double, not after
 * exp is rounded to 21 bits). It rounds each operand as the step-like op
 * reads it, leaves included (exp2(log2(x)) == x). Draws 26 and 27 move only
 * the dots and sums, all up or all down, by their bound relative to the dot
 * or sum of their operands' magnitudes: elsewhere the noise of the
 * operands (log(exp2(y) (1 + e)) + log(exp2(-y) (1 + e)) is 2e, not 0) gives
 * terms that cancel on ref a sign of their own in each element, where BLAS
 * gives them one sign throughout. Draw 28 snaps the dots and sums alone to
 * multiples of that bound, so terms that nearly cancel can cancel exactly
 * (1.9e-22 - 0.5 + 0.5 is 0 with fma accumulation, and its reciprocal
 * inf). Draw 29 is draw 25 with minimum,
 * maximum, max and min counted as step-like too (ties); apart, as rounding
 * maximum(exp(x), 1)'s operands moves safelog of it off the 1 it lands on.
 * Draws 30 and 31 move every node up (down) except where its operands are
 * integers: libraries are exact there (exp2(0) is 1, log2(1) is 0) and
 * inexact elsewhere, so exp2(log2(x)) == x holds for x = 1 and not for
 * x = 3 in one tensor, which no draw moving every element alike gives.
 * Draw 32 moves a node onto the integer it lies within its bound of and
 * leaves every other node as ref has it: f32 log(expf(1)) may be exactly 1
 * (0.51 ulp off), so that a log of it is 0 and an eq against 0 is 1, where
 * draw 24's rounding of exp first moves log's operand off e. */
#define NOISE_DRAWS 33
#define DRAW_UNIFORM 12   /* the uniform draws: DRAW_UNIFORM..DRAW_GRID_ALL - 1 */
#define DRAW_GRID_ALL 24
#define DRAW_GRID_AT_STEPS 25
#define DRAW_DOTS_UP 26
#define DRAW_DOTS_DOWN 27
#define DRAW_DOTS_SNAP 28
#define DRAW_GRID_AT_TIES 29
#define DRAW_INEXACT_UP 30
#define DRAW_INEXACT_DOWN 31
#define DRAW_SNAP_INTEGERS 32

static double noise_bound(ot_dtype dt)
{
    if (dt == OT_F32) return noise_fast ? 0x1p-21 : 0x1p-22;
    return noise_fast ? 0x1p-49 : 0x1p-50;
}

static ot_node *bin(int op, ot_node *a, ot_node *b)
{
    return ot_build_at((ot_op)op, a, b, &(ot_args){.axis = OT_AXIS_ALL}, NULL, 0);
}

static bool uniform_draw(int d) { return d >= DRAW_UNIFORM && d < DRAW_GRID_ALL; }

/* Values drawn uniformly from [-1, 1], one per element of shape, from seed. */
static ot_node *uniform_pm1(const ot_shape *shape, uint64_t seed)
{
    ot_args ra = {.axis = OT_AXIS_ALL, .dtype = OT_F64, .shape = *shape, .seed = seed};
    ot_node *u = ot_build_at(OT_OP_RAND, NULL, NULL, &ra, NULL, 0);
    return bin(OT_OP_SUB, bin(OT_OP_MUL, u, ot_const(2)), ot_const(1));
}

/* w clipped to +-2^900: grid and snap_to_integer work on that, then put
 * back what the clip took (v - w is +0 where w is finite). */
static ot_node *clip_huge(ot_node *w)
{
    return ot_build_at(OT_OP_CLIP, w, NULL,
                       &(ot_args){.axis = OT_AXIS_ALL, .lo = -0x1p900, .hi = 0x1p900}, NULL, 0);
}

/* w rounded to -log2(eps) bits. Veltkamp's split: c - (c - w) is w rounded
 * to 53 - k bits, c = w (2^k + 1), so w moves by at most eps relative. It is
 * done on w clipped to +-2^900 and the clipped part put back: on inf or near
 * overflow c - (c - w) is inf - inf, NaN (1/0 would not be inf); subtracting
 * v - w (+0 when finite) keeps -0. */
static ot_node *grid(ot_node *w, double eps)
{
    int bits = -(int)log2(eps);
    ot_node *v = clip_huge(w);
    ot_node *c = bin(OT_OP_MUL, v, ot_const(ldexp(1, 53 - bits) + 1));
    return bin(OT_OP_SUB, bin(OT_OP_SUB, c, bin(OT_OP_SUB, c, v)), bin(OT_OP_SUB, v, w));
}

/* w moved onto rint(w) where it lies within eps of it relative to w, else w.
 * Done on w clipped as in grid (rint(inf) - inf is NaN); v - (v - r) is r
 * exactly there (Sterbenz) and keeps -0, and subtracting v - w puts back
 * what the clip took. */
static ot_node *snap_to_integer(ot_node *w, double eps)
{
    ot_node *v = clip_huge(w);
    ot_node *off = bin(OT_OP_SUB, v, ot_rint(v));
    ot_node *near = bin(OT_OP_LE, ot_abs(off), bin(OT_OP_MUL, ot_abs(v), ot_const(eps)));
    return bin(OT_OP_SUB, bin(OT_OP_SUB, v, bin(OT_OP_MUL, near, off)), bin(OT_OP_SUB, v, w));
}

/* w with the noise of draw noise_draw - 1. inexact: 1 where an operand of
 * the node is not an integer, else 0 (draws 30 and 31). mag: for a dot, the
 * dot of its operands' magnitudes, for a sum, mean or average pool (or its
 * gradient) that of its operand's
 * (-2 log 2 + 3 log 2 - log 2 is 0 or 1e-16 as the sum is ordered), else
 * NULL. A dot's error is relative to that, not to its value: terms that
 * cancel to 0 on ref leave a few ulps of a term on BLAS, whose fma keeps a
 * product unrounded (3 * -1.779 + -3 * -1.779 is 0 or -1e-7; log2 of it -inf
 * or NaN). */
static ot_node *noisy(ot_node *w, ot_node *inexact, ot_node *mag, ot_dtype dt, const ot_shape *shape,
                      int idx)
{
    int d = noise_draw - 1;
    double eps = noise_bound(dt);
    if (d == DRAW_GRID_ALL) return grid(w, eps);
    if (d == DRAW_SNAP_INTEGERS) return snap_to_integer(w, eps);
    if (d == DRAW_INEXACT_UP || d == DRAW_INEXACT_DOWN) {
        ot_node *e = bin(OT_OP_MUL, inexact, ot_const(d == DRAW_INEXACT_UP ? eps : -eps));
        return bin(OT_OP_MUL, w, bin(OT_OP_ADD, ot_const(1), e));
    }
    if (d == DRAW_GRID_AT_STEPS || d == DRAW_GRID_AT_TIES || (d >= DRAW_DOTS_UP && !mag)) return w;
    if (d == DRAW_DOTS_SNAP) {
        /* + 0: a sum that cancels exactly is +0 (x + -x), while rint keeps
         * the sign of the residue it snaps (rint(-1e-17) is -0). */
        ot_node *q = bin(OT_OP_ADD, bin(OT_OP_MUL, mag, ot_const(eps)), ot_const(1e-300));
        return bin(OT_OP_ADD, bin(OT_OP_MUL, ot_rint(bin(OT_OP_DIV, w, q)), q), ot_const(0));
    }
    ot_node *e;
    if (d >= DRAW_DOTS_UP) e = ot_const(d == DRAW_DOTS_UP ? eps : -eps);
    else if (d < DRAW_UNIFORM) e = ot_const(((idx >> (d / 2)) ^ d) & 1 ? -eps : eps);
    else e = bin(OT_OP_MUL, uniform_pm1(shape, (uint64_t)d * 100000 + (uint64_t)idx), ot_const(eps));
    ot_node *r = bin(OT_OP_MUL, w, bin(OT_OP_ADD, ot_const(1), e));
    return mag ? bin(OT_OP_ADD, r, bin(OT_OP_MUL, e, mag)) : r;
}

/* n, rounded to f32 (round32) and with noise (noise_draw) as asked; dt is
 * the dtype of n in the tree as built, before its inputs were wrapped (ref's
 * double inputs make n itself f64, but its error bound is in ulps of dt);
 * inexact and mag as for noisy. */
static ot_node *wrap(ot_node *n, ot_node *inexact, ot_node *mag, ot_dtype dt, int idx)
{
    if (is_half(dt)) dt = OT_F32;   /* cpu computes it in f32 */
    if (dt != OT_F32 && dt != OT_F64) return n;
    ot_args c = {.axis = OT_AXIS_ALL, .dtype = OT_F64};
    ot_node *w = ot_build_at(OT_OP_CAST, n, NULL, &c, NULL, 0);
    if (noise_draw) {
        ot_shape sh = ot_node_shape(n);
        w = noisy(w, inexact, mag, dt, &sh, idx);
    }
    c.dtype = round32 ? dt : OT_F64;
    w = ot_build_at(OT_OP_CAST, w, NULL, &c, NULL, 0);
    ot_clear_error();
    return w ? w : n;
}

/* |x| capped at 1e150, so that a dot of magnitudes has no inf * 0 (a NaN
 * that would hide the -inf of log2(0) * 2 + x * 0) and does not overflow. */
static ot_node *magnitude(ot_node *x)
{
    return ot_build_at(OT_OP_CLIP, ot_abs(x), NULL, &(ot_args){.axis = OT_AXIS_ALL, .lo = 0, .hi = 1e150},
                       NULL, 0);
}

/* Whether the draw rounds operand k (0 or 1) of op as the op reads it: an
 * op whose result jumps where that operand crosses a value, so that a
 * rounding there decides which side it lands on. */
static int rounds_operand(int op, int k)
{
    int d = noise_draw - 1;
    if (d != DRAW_GRID_AT_STEPS && d != DRAW_GRID_AT_TIES) return 0;
    if (op == OT_OP_POW) return k == 1;
    int ties = op == OT_OP_MINIMUM || op == OT_OP_MAXIMUM || op == OT_OP_MAX || op == OT_OP_MIN;
    return (ot_op_flags((ot_op)op) & OT_FLAG_NODIFF) || op == OT_OP_CAST || (ties && d == DRAW_GRID_AT_TIES);
}

/* 1 where x or y (y may be NULL) is not an integer, else 0: for
 * elementwise ops, whose operands have the result's shape or broadcast to it. */
static ot_node *inexact_at(ot_node *x, ot_node *y)
{
    ot_node *m = x ? bin(OT_OP_NE, x, ot_rint(x)) : ot_const(1);
    return y ? bin(OT_OP_MAXIMUM, m, bin(OT_OP_NE, y, ot_rint(y))) : m;
}

/* Operand x (of dtype dt in the tree as built) rounded to its grid. */
static ot_node *grid_operand(ot_node *x, ot_dtype dt)
{
    if (is_half(dt)) dt = OT_F32;
    if (!x || (dt != OT_F32 && dt != OT_F64)) return x;
    ot_node *w = ot_build_at(OT_OP_CAST, x, NULL, &(ot_args){.axis = OT_AXIS_ALL, .dtype = OT_F64}, NULL, 0);
    return w ? grid(w, noise_bound(dt)) : x;
}

static int is_float(ot_dtype d);

/* sin or cos y of a computed x where x's own rounding (its dtype dt's
 * noise bound) exceeds 0.1: there the phase is lost, an ulp of x moving y
 * anywhere in [-1, 1] (cos(expm1(94)^2): ref's expm1 is 0.64 ulp off,
 * SLEEF's 0.36, and the cosines 0.83 and 0.0087; seed 9191 tree 233), so
 * the draws mark the element as one no backend's value decides: NaN, which
 * an output shows as such, except in the uniform draws, which put
 * a value drawn from [-1, 1] there, so that a compare reading it takes
 * both results across them (sin(exp(18.56)) <= 0, exp's f32 result 130
 * off: seed 551202 tree 38860, --modes half). idx is y's node index. */
static ot_node *lost_phase(ot_node *y, ot_node *x, ot_dtype dt, int idx)
{
    if (is_half(dt)) dt = OT_F32;
    if (dt != OT_F32 && dt != OT_F64) return y;
    ot_node *lost = bin(OT_OP_GT, bin(OT_OP_MUL, ot_abs(x), ot_const(noise_bound(dt))), ot_const(0.1));
    int d = noise_draw - 1;
    ot_node *r;
    if (uniform_draw(d)) {
        ot_shape sh = ot_node_shape(y);
        ot_node *u = uniform_pm1(&sh, (uint64_t)d * 100000 + (uint64_t)idx + 50000);
        /* maximum(u or -inf, y or -inf): y where kept, bit for bit (y +
         * -0 is y, -0 included), u where lost (lost is 0 or 1). */
        ot_node *kept = bin(OT_OP_SUB, ot_const(1), lost);
        ot_node *uu = bin(OT_OP_ADD, u, ot_neg(bin(OT_OP_DIV, kept, lost)));
        ot_node *yy = bin(OT_OP_ADD, y, ot_neg(bin(OT_OP_DIV, lost, kept)));
        r = bin(OT_OP_MAXIMUM, uu, yy);
    } else {
        ot_node *nan = lost ? ot_sqrt(ot_neg(lost)) : NULL;   /* NaN where lost, -0 elsewhere */
        r = nan ? bin(OT_OP_ADD, y, nan) : NULL;
    }
    ot_clear_error();
    return r ? r : y;
}

/* x as f64 where it is floating point (ref computes in double anyway). */
static ot_node *as_f64(ot_node *x)
{
    ot_dtype dt = ot_node_dtype(x);
    if (!is_float(dt) || dt == OT_F64) return x;
    return ot_build_at(OT_OP_CAST, x, NULL, &(ot_args){.axis = OT_AXIS_ALL, .dtype = OT_F64}, NULL, 0);
}

/* The tree rebuilt op by op from its expansion (composites included, so
 * their inner nodes are rounded too), each op node passed through wrap. */
static ot_node *transform(ot_node *root)
{
    ot_stack *st = ot_stack_new(root);
    if (!st) {
        ot_clear_error();
        return root;
    }
    int len = ot_stack_len(st);
    ot_node **m = calloc((size_t)len, sizeof *m), *r = root;
    for (int i = 0; i < len; i++) {
        const ot_stack_item *it = ot_stack_at(st, i);
        if (it->kind != OT_NODE_OP) {
            m[i] = (ot_node *)it->node;
            continue;
        }
        ot_args a = ot_node_args(it->node);
        ot_node *x = it->a >= 0 ? m[it->a] : NULL, *y = it->b >= 0 ? m[it->b] : NULL;
        if (x && rounds_operand(it->op, 0)) x = grid_operand(x, ot_node_dtype(ot_stack_at(st, it->a)->node));
        if (y && rounds_operand(it->op, 1)) y = grid_operand(y, ot_node_dtype(ot_stack_at(st, it->b)->node));
        m[i] = ot_build_at(it->op, x, y, &a, NULL, 0);
        if (!m[i] && x && y) {   /* an op whose operands must be alike: a
                                    16-bit leaf beside a wrapped (f64) node */
            ot_clear_error();
            m[i] = ot_build_at(it->op, as_f64(x), as_f64(y), &a, NULL, 0);
        }
        if (!m[i]) break;
        if (noise_draw && (it->op == OT_OP_SIN || it->op == OT_OP_COS) &&
            ot_stack_at(st, it->a)->kind == OT_NODE_OP)   /* a leaf is exact */
            m[i] = lost_phase(m[i], x, ot_node_dtype(ot_stack_at(st, it->a)->node), i);
        ot_node *mag = NULL;
        if (noise_draw && (it->op == OT_OP_DOT || it->op == OT_OP_BATCHED_DOT))
            mag = ot_build_at(it->op, magnitude(m[it->a]), magnitude(m[it->b]), &a, NULL, 0);
        /* Average pooling and its gradient sum terms of both signs too:
         * cpu adds the g/k of each window in f32, ref in double (6e-8/3 -
         * 1/3 + 1/3 is 2^-25 against 2.0e-8, whose log2 is -25 against
         * -25.58: seed 881202 tree 57513, --modes half). */
        if (noise_draw && (it->op == OT_OP_SUM || it->op == OT_OP_MEAN || it->op == OT_OP_CUMSUM ||
                           it->op == OT_OP_AVG_POOL || it->op == OT_OP_AVG_POOL_GRAD))
            mag = ot_build_at(it->op, magnitude(m[it->a]), NULL, &a, NULL, 0);
        /* Scatters sum the values sent to one place, as a sum does: cpu in
         * f32 in order (70144 + 0.0056 - 70144 is 0.0078 there, seed 9001
         * tree 129651), ref in double. */
        if (noise_draw && (it->op == OT_OP_SCATTER_ADD || it->op == OT_OP_SCATTER_ALONG))
            mag = ot_build_at(it->op, magnitude(m[it->a]), m[it->b], &a, NULL, 0);
        ot_node *inexact = NULL;
        if (noise_draw - 1 == DRAW_INEXACT_UP || noise_draw - 1 == DRAW_INEXACT_DOWN) {
            int k = ot_op_kind(it->op);
            inexact = k == OT_KIND_UNARY || k == OT_KIND_BINARY ? inexact_at(x, y) : ot_const(1);
        }
        m[i] = wrap(m[i], inexact, mag, ot_node_dtype(it->node), i);
    }
    if (len > 0 && m[len - 1]) r = m[len - 1];
    free(m);
    ot_stack_free(st);
    ot_clear_error();
    return r;
}

/* Every leaf and node of ir on be (pert: leaf data to use instead, or NULL).
 * 0, or the first error code. */
static int inst_build(ot_backend *be, const fz_ir *ir, double *const *pert, fz_inst *in)
{
    memset(in, 0, sizeof *in);
    for (int i = 0; i < ir->nl; i++) {
        int rc = leaf_inst(be, &ir->l[i], pert ? pert[i] : NULL, in, i);
        if (rc) return rc;
    }
    in->pool = ot_pool_push();
    for (int k = 0; k < ir->nn; k++) {
        in->node[k] = node_build(ir, in, k);
        if (!in->node[k]) return ot_errcode() ? ot_errcode() : OT_EINVAL;
    }
    for (int i = 0; (round32 || noise_draw) && i < ir->nroots; i++)
        in->node[ir->roots[i]] = transform(in->node[ir->roots[i]]);
    return 0;
}

/* ---- generation ---------------------------------------------------------- */

static int64_t draw_dim(rng *r, int big)
{
    static const int64_t odd[] = {17, 33, 65, 9, 31};
    if (big) return chance(r, 50) ? 65 : 600 + rnd(r, 200);
    int p = rnd(r, 100);
    if (p < 3) return 0;
    if (p < 10) return odd[rnd(r, 5)];
    return 1 + rnd(r, 5);
}

static ot_shape draw_shape(rng *r, int big)
{
    ot_shape s = {.ndim = big ? 2 : rnd(r, 100) < 10 ? 0 : 1 + rnd(r, rnd(r, 100) < 10 ? 4 : 3)};
    int64_t total = 1;
    for (int i = 0; i < s.ndim; i++) {
        s.dims[i] = big ? (i == 0 ? 65 : 520 + rnd(r, 100)) : draw_dim(r, 0);
        if (total * s.dims[i] > 4096) s.dims[i] = 1 + rnd(r, 3);
        total *= s.dims[i] ? s.dims[i] : 1;
    }
    return s;
}

static double draw_value(rng *r, ot_dtype dt, int smooth)
{
    /* f16's edges: past 65504 (inf once stored), subnormals, the largest */
    static const double edge[] = {70000, -7e4, 6e-8, -3e-6, 65504, 1e-40};
    if (smooth) return (unif(r) * 4 - 2) * (dt == OT_I32 ? 2 : 1);
    if (is_half(dt) && chance(r, 5)) return edge[rnd(r, 6)];
    int p = rnd(r, 100);
    double v;
    if (p < 35) v = rnd(r, 7) - 3;
    else if (p < 85) v = unif(r) * 4 - 2;
    else if (p < 92) v = unif(r) * 0.01;
    else if (p < 96) v = (unif(r) - 0.5) * 200;
    else if (p < 98) v = (unif(r) - 0.5) * 2e4;
    else v = rnd(r, 3) == 0 ? NAN : rnd(r, 2) ? INFINITY : -INFINITY;
    if (dt == OT_I32) v = isfinite(v) ? trunc(fmax(fmin(v, 1e6), -1e6)) : 0;
    return v;
}

/* Nonzero while drawing a tree of a FUZZ_HALF run. */
static int fz_half;

static ot_dtype draw_dtype(rng *r)
{
    if (fz_half && chance(r, 35)) return rnd(r, 2) ? OT_F16 : OT_BF16;
    int p = rnd(r, 100);
    return p < 55 ? OT_F32 : p < 85 ? OT_F64 : OT_I32;
}

/* A leaf whose view has shape s: the base and the view recipe drawn to fit. */
static int add_leaf(fz_ir *ir, rng *r, ot_shape s, ot_dtype dt, int smooth, int big)
{
    if (ir->nl >= FZ_MAXL) return -1;
    fz_leaf *l = &ir->l[ir->nl];
    memset(l, 0, sizeof *l);
    l->dtype = dt;
    l->base = s;
    int p = big ? 100 : rnd(r, 100);
    if (p < 45 || s.ndim == 0) {
        l->view = V_NONE;
    } else if (p < 65) {
        l->view = V_SLICE;
        l->nidx = s.ndim;
        for (int i = 0; i < s.ndim; i++) {
            int64_t d = s.dims[i];
            int q = rnd(r, 4);
            if (q == 0) {
                l->idx[i] = OT_ALL;
            } else if (q == 1) {  /* reversed */
                l->idx[i] = (ot_index){OT_INDEX_RANGE, OT_NONE, OT_NONE, -1};
            } else {              /* a step over a larger base */
                int64_t step = 1 + rnd(r, 3), off = rnd(r, 3);
                l->base.dims[i] = off + d * step + rnd(r, 2);
                if (q == 3 && d > 0) {
                    int64_t start = off + (d - 1) * step;
                    l->idx[i] = (ot_index){OT_INDEX_RANGE, start, start - d * step < 0 ? OT_NONE
                                           : start - d * step, -step};
                } else {
                    l->idx[i] = (ot_index){OT_INDEX_RANGE, off, off + d * step, step};
                }
            }
        }
        if (chance(r, 25) && l->base.ndim < OT_MAX_DIMS) {  /* an integer index drops a dim */
            for (int i = l->base.ndim; i > 0; i--) l->base.dims[i] = l->base.dims[i - 1];
            for (int i = l->nidx; i > 0; i--) l->idx[i] = l->idx[i - 1];
            l->base.dims[0] = 2 + rnd(r, 2);
            l->base.ndim++;
            l->nidx++;
            l->idx[0] = OT_IDX(rnd(r, 2) ? -1 : 1);
        }
    } else if (p < 80) {
        l->view = V_T;
        for (int i = 0; i < s.ndim; i++) l->perm[i] = i;
        for (int i = s.ndim - 1; i > 0; i--) {
            int j = rnd(r, i + 1), t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
        /* view dim i is base dim perm[i] */
        for (int i = 0; i < s.ndim; i++) l->base.dims[l->perm[i]] = s.dims[i];
    } else if (p < 90) {
        l->view = V_BCAST;
        l->to = s;
        int drop = rnd(r, s.ndim + 1);
        l->base.ndim = s.ndim - drop;
        for (int i = 0; i < l->base.ndim; i++) {
            l->base.dims[i] = s.dims[i + drop];
            if (chance(r, 40)) l->base.dims[i] = 1;
        }
    } else {
        l->view = V_RESHAPE;
        l->to = s;
        int64_t n = numel(&s);
        if (n > 0 && n % 2 == 0 && chance(r, 50)) l->base = (ot_shape){.ndim = 2, .dims = {2, n / 2}};
        else l->base = (ot_shape){.ndim = 1, .dims = {n}};
    }
    int64_t n = numel(&l->base);
    l->data = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) l->data[i] = draw_value(r, dt, smooth);
    if (!smooth && chance(r, 20)) /* positive, for log and sqrt */
        for (int64_t i = 0; i < n; i++) l->data[i] = fabs(l->data[i]);
    return ir->nl++;
}

static int add_node(fz_ir *ir, int op, int a, int b, const ot_args *args)
{
    if (ir->nn >= FZ_MAXN) return -1;
    fz_node *n = &ir->n[ir->nn];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->a = a;
    n->b = b;
    if (args) n->args = *args;
    n->leaf = -1;
    return ir->nn++;
}

static int add_leaf_node(fz_ir *ir, rng *r, ot_shape s, ot_dtype dt, int smooth, int big)
{
    if (ir->nn >= FZ_MAXN) return -1;
    int l = add_leaf(ir, r, s, dt, smooth, big);
    if (l < 0) return -1;
    int k = add_node(ir, FZ_LEAF, -1, -1, NULL);
    if (k >= 0) ir->n[k].leaf = l;
    return k;
}

static int add_const(fz_ir *ir, rng *r, int smooth)
{
    int k = add_node(ir, FZ_CONST, -1, -1, NULL);
    if (k < 0) return -1;
    ir->n[k].ckind = rnd(r, 3);
    ir->n[k].cval = ir->n[k].ckind == 2 ? rnd(r, 5) - 2 : smooth ? unif(r) * 2 - 1
                  : (rnd(r, 9) - 4) * 0.5;
    return k;
}

static void draw_args(rng *r, int nd, ot_args *a)
{
    memset(a, 0, sizeof *a);
    a->axis = chance(r, 25) ? OT_AXIS_ALL : rnd(r, 2 * nd + 3) - nd - 1;
    a->keepdims = rnd(r, 2);
    a->ddof = rnd(r, 3);
    static const double bounds[] = {-1, 0, 0.5, 1, 2, -0.25};
    a->lo = bounds[rnd(r, 6)];
    a->hi = chance(r, 85) ? a->lo + bounds[rnd(r, 6)] + 1.5 : bounds[rnd(r, 6)];
    a->dtype = (ot_dtype)(1 + rnd(r, fz_half ? 5 : 3));
    a->depth = 1 + rnd(r, 5);
    a->seed = (uint64_t)rnd(r, 1000);
    if (chance(r, 60) && nd > 0) {
        for (int i = 0; i < nd; i++) a->perm[i] = i;
        for (int i = nd - 1; i > 0; i--) {
            int j = rnd(r, i + 1), t = a->perm[i];
            a->perm[i] = a->perm[j];
            a->perm[j] = t;
        }
    }
    a->shape = draw_shape(r, 0);
}

/* Valid args of a layout op over an operand of shape s: a NumPy slice
 * (indices, ranges with steps of either sign, empty ranges), or a reshape
 * (flattened, dims reversed, a 1 put in front, or one dim as -1). */
static void draw_slice(rng *r, ot_shape s, ot_args *a)
{
    for (int d = 0; d < s.ndim; d++) {
        int64_t dim = s.dims[d];
        int k = rnd(r, 4);
        a->shape.dims[d] = 0;
        if (k == 0 && dim > 0) {   /* an index */
            a->start[d] = rnd(r, (int)dim);
            a->perm[d] = 0;
            continue;
        }
        int step = k == 1 ? 1 : (1 + rnd(r, 3)) * (chance(r, 50) ? 1 : -1);
        int64_t count = dim ? rnd(r, (int)dim + 1) : 0;
        int64_t span = count ? (count - 1) * (step < 0 ? -step : step) : 0;
        if (span >= dim) count = 1, span = 0;
        int64_t lo = dim - span > 0 ? rnd(r, (int)(dim - span)) : 0;
        a->start[d] = step > 0 ? lo : lo + span;
        a->perm[d] = step;
        a->shape.dims[d] = dim ? count : 0;
    }
    a->shape.ndim = s.ndim;
}

static void draw_reshape(rng *r, ot_shape s, ot_args *a)
{
    ot_shape t = s;
    int k = rnd(r, 4);
    if (k == 0) t = (ot_shape){.ndim = 1, .dims = {numel(&s)}};
    else if (k == 1)
        for (int i = 0; i < s.ndim; i++) t.dims[i] = s.dims[s.ndim - 1 - i];
    else if (k == 2 && s.ndim < 4) {
        t.ndim = s.ndim + 1;
        t.dims[0] = 1;
        for (int i = 0; i < s.ndim; i++) t.dims[i + 1] = s.dims[i];
    }
    if (t.ndim > 0 && numel(&t) > 0 && chance(r, 40)) t.dims[rnd(r, t.ndim)] = -1;
    a->shape = t;
}

/* A shape that broadcasts against s. */
static ot_shape bcast_partner(rng *r, ot_shape s)
{
    ot_shape t = s;
    int p = rnd(r, 4);
    if (p == 0 && s.ndim > 0) {  /* a suffix */
        int drop = 1 + rnd(r, s.ndim);
        t.ndim = s.ndim - drop;
        for (int i = 0; i < t.ndim; i++) t.dims[i] = s.dims[i + drop];
    } else if (p == 1) {
        for (int i = 0; i < t.ndim; i++)
            if (chance(r, 50)) t.dims[i] = 1;
    } else if (p == 2 && s.ndim < 4) {  /* one more leading dim */
        for (int i = t.ndim; i > 0; i--) t.dims[i] = t.dims[i - 1];
        t.dims[0] = 1 + rnd(r, 3);
        t.ndim++;
    }
    return t;
}

static int is_float(ot_dtype d) { return d == OT_F32 || d == OT_F64 || is_half(d); }

static int is_pool(int op) { return op >= OT_OP_MAX_POOL && op <= OT_OP_AVG_POOL_GRAD; }

/* A pooling op's operands and window (optree/pool.h): x is operand a when
 * it is 3-D to 5-D float with spatial dims, else a new leaf; the window
 * fits x (kernel at most the dim, padding at most kernel / 2, a dilation
 * of 2 where it fits). The gradient ops get a leaf of the pooled shape
 * (dy) or x's (max_pool_take's g); avg_pool_grad's x is only its shape.
 * Returns the node of x or -1; *b the second operand. */
static int pool_draw(fz_ir *ir, rng *r, int op, int a, ot_shape sa, ot_dtype da, int smooth,
                     ot_args *w, int *b)
{
    bool avg = op == OT_OP_AVG_POOL || op == OT_OP_AVG_POOL_GRAD, ok = sa.ndim >= 3 && sa.ndim <= 5;
    for (int d = 2; ok && d < sa.ndim; d++) ok = sa.dims[d] > 0;
    if (!ok || !is_float(da) || chance(r, 25)) {
        sa = (ot_shape){.ndim = 3 + rnd(r, 3), .dims = {rnd(r, 3), 1 + rnd(r, 3)}};
        for (int d = 2; d < sa.ndim; d++) sa.dims[d] = 1 + rnd(r, sa.ndim == 5 ? 4 : 7);
        da = is_float(da) ? da : smooth ? OT_F64 : OT_F32;
        a = -2;
    }
    memset(&w->win, 0, sizeof w->win);
    ot_shape out = sa;
    for (int d = 0; d < sa.ndim - 2; d++) {
        int64_t in = sa.dims[2 + d];
        int k = 1 + rnd(r, in < 3 ? (int)in : 3), lo = rnd(r, k / 2 + 1), hi = rnd(r, k / 2 + 1);
        int dil = !avg && chance(r, 25) && 2 * (k - 1) + 1 <= in + lo + hi ? 2 : 1;
        w->win.ksize[d] = k;
        w->win.stride[d] = 1 + rnd(r, 3);
        w->win.dilation[d] = dil;
        w->win.pad_lo[d] = lo;
        w->win.pad_hi[d] = hi;
    }
    w->win.ceil_mode = chance(r, 30);
    w->win.exclude_pad = avg && chance(r, 40);
    for (int d = 0; d < sa.ndim - 2; d++) {   /* PyTorch's output size (pool.h) */
        const ot_window *g = &w->win;
        int64_t room = sa.dims[2 + d] + g->pad_lo[d] + g->pad_hi[d] - g->dilation[d] * (g->ksize[d] - 1) - 1;
        int64_t o = (g->ceil_mode ? (room + g->stride[d] - 1) / g->stride[d] : room / g->stride[d]) + 1;
        if (g->ceil_mode && (o - 1) * g->stride[d] >= sa.dims[2 + d] + g->pad_lo[d]) o--;
        out.dims[2 + d] = o;
    }
    w->shape = sa;
    if (op == OT_OP_AVG_POOL_GRAD) return add_leaf_node(ir, r, out, da, smooth, 0);
    if (a == -2) a = add_leaf_node(ir, r, sa, da, smooth, 0);
    if (op == OT_OP_MAX_POOL_GRAD || op == OT_OP_MAX_POOL_TAKE)
        *b = add_leaf_node(ir, r, op == OT_OP_MAX_POOL_GRAD ? out : sa, da, smooth, 0);
    return a;
}

static int is_index_op(int op) { return op == OT_OP_TAKE || op == OT_OP_SCATTER_ADD; }

/* An int32 index leaf of shape s, every value of its base in [-n, n)
 * (NumPy's range), or, rarely, one out of it (both backends must then
 * refuse the assignment alike). */
static int index_leaf(fz_ir *ir, rng *r, ot_shape s, int64_t n)
{
    int k = add_leaf_node(ir, r, s, OT_I32, 0, 0);
    if (k < 0) return -1;
    fz_leaf *l = &ir->l[ir->n[k].leaf];
    int64_t count = numel(&l->base);
    for (int64_t i = 0; i < count; i++) l->data[i] = n ? (double)(rnd(r, 2 * (int)n) - n) : 0;
    if (count && chance(r, 3)) l->data[rnd(r, (int)count)] = n + rnd(r, 3);
    return k;
}

/* take's and scatter_add's operands (optree/index.h): a is the value when
 * it has a dim, else a new leaf; b an index leaf. take indexes a random
 * axis of a with indices of rank 0 to 2; scatter_add reads a's dims at
 * the axis as the indices' shape into an axis of size 1 to 4. */
static int index_draw(fz_ir *ir, rng *r, int op, int a, ot_shape sa, ot_dtype da, int smooth,
                      ot_args *w, int *b)
{
    if (a < 0 || sa.ndim == 0 || sa.ndim > 5 || chance(r, 20)) {
        sa = draw_shape(r, 0);
        if (sa.ndim == 0) sa = (ot_shape){.ndim = 1, .dims = {1 + rnd(r, 4)}};
        a = add_leaf_node(ir, r, sa, smooth ? OT_F64 : da, smooth, 0);
    }
    if (op == OT_OP_TAKE) {
        int axis = rnd(r, sa.ndim);
        ot_shape is = {.ndim = rnd(r, 3)};
        for (int d = 0; d < is.ndim; d++) is.dims[d] = rnd(r, 4);
        w->axis = chance(r, 30) ? axis - sa.ndim : axis;
        *b = index_leaf(ir, r, is, sa.dims[axis]);
        return a;
    }
    int axis = rnd(r, sa.ndim + 1), ni = rnd(r, sa.ndim - axis + 1);
    if (sa.ndim - ni + 1 < 1) ni = sa.ndim;
    ot_shape is = {.ndim = ni};
    for (int d = 0; d < ni; d++) is.dims[d] = sa.dims[axis + d];
    w->axis = axis;
    w->depth = 1 + rnd(r, 4);
    *b = index_leaf(ir, r, is, w->depth);
    return a;
}

static int is_along(int op) { return op >= OT_OP_TOPK && op <= OT_OP_SCATTER_ALONG; }

/* topk's, take_along's and scatter_along's operands (optree/topk.h): a
 * is the value when it has a dim, else a new leaf, lines along a random
 * axis. topk takes a random k and mode and, half the time, becomes the
 * values (*op take_along of the topk node); take_along reads an index
 * leaf of a's shape but a count of 0 to 3 along the axis; scatter_along
 * adds a at an index leaf of its shape into an axis of size 1 to 4. */
static int along_draw(fz_ir *ir, rng *r, int *op, int a, ot_shape sa, ot_dtype da, int smooth,
                      ot_args *w, int *b)
{
    if (a < 0 || sa.ndim == 0 || sa.ndim > 5 || chance(r, 20)) {
        sa = draw_shape(r, 0);
        if (sa.ndim == 0) sa = (ot_shape){.ndim = 1, .dims = {1 + rnd(r, 4)}};
        a = add_leaf_node(ir, r, sa, smooth ? OT_F64 : da, smooth, 0);
    }
    int axis = rnd(r, sa.ndim);
    int64_t n = sa.dims[axis];
    w->axis = chance(r, 30) ? axis - sa.ndim : axis;
    if (*op == OT_OP_TOPK) {
        w->ddof = rnd(r, (int)n + 1);
        w->keepdims = chance(r, 30);
        w->win.ceil_mode = chance(r, 30);
        if (a >= 0 && chance(r, 50)) {
            *b = add_node(ir, OT_OP_TOPK, a, -1, w);
            *op = OT_OP_TAKE_ALONG;
        }
        return a;
    }
    ot_shape is = sa;
    if (*op == OT_OP_TAKE_ALONG) {
        is.dims[axis] = n ? rnd(r, 4) : 0;
        *b = index_leaf(ir, r, is, n);
        return a;
    }
    w->depth = 1 + rnd(r, 4);
    *b = index_leaf(ir, r, is, w->depth);
    return a;
}

static int is_attn(int op) { return op == OT_OP_ATTENTION || op == OT_OP_ATTENTION_GRAD; }

/* An attention node's operands and attributes (ops.def's rows): q (or
 * attention_grad's x, dim + 2 (dim_v + 1) columns) of operand a's shape
 * when it is 4-D float and wide enough, and the pack (1-D, of the size the
 * attributes give: seq_k, dim_v, a mask of any broadcast code), both new
 * leaves of finite values: where NaN and inf reach differs between the
 * backends (BLAS multiplies a hidden key's P of 0 by inf; the fused kernel
 * never reads the tiles causality hides). Other ops read its result.
 * Returns the node of a or -1; *b the pack. */
static int attn_draw(fz_ir *ir, rng *r, int op, int a, ot_shape sa, ot_dtype da, int smooth,
                     ot_args *w, int *b)
{
    int64_t dv = rnd(r, 4), extra = op == OT_OP_ATTENTION_GRAD ? 2 * (dv + 1) : 0;
    (void)smooth;   /* finite leaves always (below) */
    if (sa.ndim != 4 || !is_float(da) || sa.dims[3] < extra + 1 || chance(r, 30)) {
        sa = (ot_shape){.ndim = 4, .dims = {rnd(r, 3), 1 + rnd(r, 2), 1 + rnd(r, 6), extra + 1 + rnd(r, 5)}};
        da = is_float(da) ? da : smooth ? OT_F64 : OT_F32;
        a = -2;
    }
    int64_t sk = rnd(r, 7), d = sa.dims[3] - extra, full[4] = {sa.dims[0], sa.dims[1], sa.dims[2], sk};
    int code = chance(r, 50) ? 0 : 16 + rnd(r, 16);
    int64_t nm = code ? 1 : 0;
    for (int i = 0; i < 4 && code; i++) nm *= code & (1 << i) ? full[i] : 1;
    w->lo = chance(r, 50) ? 0.5 : 1.25;
    w->keepdims = chance(r, 50);
    w->depth = sk;
    w->ddof = (int)dv;
    w->win.groups = code;
    a = add_leaf_node(ir, r, sa, da, 1, 0);
    *b = add_leaf_node(ir, r, (ot_shape){.ndim = 1, .dims = {full[0] * full[1] * sk * (d + dv) + nm}},
                       da, 1, 0);
    return a;
}

/* Registered ops stand in where the table's placeholder rows (custom1,
 * custom2) are drawn, so that ops added at run time are fuzzed like the
 * built-ins: the examples' GELU and Huber (vector functions, so generated
 * code calls them) and softsign (scalar only: the tile interpreter calls
 * it per element; no gradient). Found by name if registered already. */
static ot_op fz_user[2][2];
static int fz_nuser[2];
/* The structured ops (ot_op_register_structured) that stand in for the
 * placeholder row custom_struct: cumsum and its reverse, examples/cumsum_op.h. */
static ot_op fz_struct[2] = {OT_OP_NONE, OT_OP_NONE};

static void add_user_op(ot_op_def d)
{
    ot_op op = ot_op_lookup(d.name);
    if (op == OT_OP_NONE) op = ot_op_register(&d);
    ot_clear_error();
    int k = d.arity - 1;
    if (op != OT_OP_NONE && fz_nuser[k] < 2) fz_user[k][fz_nuser[k]++] = op;
}

static void register_user_ops(void)
{
    if (fz_nuser[0] + fz_nuser[1]) return;
    add_user_op(gelu_def());
    add_user_op(softsign_def());
    add_user_op(huber_def());
    if (!cumsum_register(&fz_struct[0], &fz_struct[1])) fz_struct[0] = fz_struct[1] = OT_OP_NONE;
    ot_clear_error();
}

/* A registered op for placeholder row op, or -1 where none is registered. */
static int user_op(rng *r, int op)
{
    if (op == OT_OP_CUSTOM_STRUCT) return fz_struct[0] == OT_OP_NONE ? -1 : (int)fz_struct[rnd(r, 2)];
    int k = ot_op_arity((ot_op)op) - 1;
    return fz_nuser[k] ? (int)fz_user[k][rnd(r, fz_nuser[k])] : -1;
}

/* Frees the leaves from nl on (their tensors and data), dropping them. */
static void drop_leaves(fz_inst *in, fz_ir *ir, int nl)
{
    for (int li = nl; li < ir->nl; li++) {
        if (in->view[li] != in->base[li]) ot_tensor_free(in->view[li]);
        ot_tensor_free(in->base[li]);
        in->view[li] = in->base[li] = NULL;
        free(ir->l[li].data);
    }
    ir->nl = nl;
}

/* ir's node whose built node (in->node) is n, or -1. */
static int ir_node_of(const fz_ir *ir, const fz_inst *in, const ot_node *n)
{
    for (int j = 0; j < ir->nn; j++)
        if (in->node[j] == n) return j;
    return -1;
}

/* Layer norm or RMS norm (optree/norm.h) of node a over its last `dims`
 * axes, weight and bias new leaves or absent: the builder's own tree on
 * ref, added to ir op by op (its eps a new constant). The node, or -1
 * (the caller drops the nodes and leaves added). eps >= 1e-5
 * (no 0 * inf rows), and well away from 0 in gradient trees, where a
 * near-constant row's 1/std would leave finite differences nothing. */
static int norm_draw(fz_ir *ir, rng *r, fz_inst *in, int a, int smooth)
{
    ot_shape sa = ot_node_shape(in->node[a]), ws = {.ndim = 1 + rnd(r, sa.ndim)};
    ot_dtype dt = ot_node_dtype(in->node[a]);
    for (int d = 0; d < ws.ndim; d++) ws.dims[d] = sa.dims[sa.ndim - ws.ndim + d];
    int rms = chance(r, 50), lw[2] = {-1, -1};
    for (int i = 0; i < 2 - rms; i++) {
        if (chance(r, 30)) continue;
        int k = add_leaf_node(ir, r, ws, dt, smooth, 0);
        if (k < 0 || leaf_inst(ref_be, &ir->l[ir->n[k].leaf], NULL, in, ir->n[k].leaf)) return -1;
        in->node[k] = node_build(ir, in, k);
        lw[i] = ir->n[k].leaf;
    }
    double eps = smooth ? 0.5 : (double[]){1e-5, 1e-3, 0.5}[rnd(r, 3)];
    ot_tensor *w = lw[0] >= 0 ? in->view[lw[0]] : NULL, *b = lw[1] >= 0 ? in->view[lw[1]] : NULL;
    ot_node *y = rms ? ot_rms_norm(in->node[a], ws.ndim, w, eps)
                     : ot_layer_norm(in->node[a], ws.ndim, w, b, eps);
    ot_stack *st = y ? ot_stack_new(y) : NULL;
    int len = st ? ot_stack_len(st) : 0, *map = calloc((size_t)(len ? len : 1), sizeof *map);
    int k = -1;
    for (int i = 0; i < len && map; i++) {
        const ot_stack_item *it = ot_stack_at(st, i);
        map[i] = k = ir_node_of(ir, in, it->node);
        if (k >= 0) continue;
        if (it->kind == OT_NODE_CONST) {
            if ((k = map[i] = add_node(ir, FZ_CONST, -1, -1, NULL)) >= 0) ir->n[k].cval = it->value;
        } else if (it->kind == OT_NODE_OP) {
            ot_args args = ot_node_args(it->node);
            k = map[i] = add_node(ir, it->op, it->a >= 0 ? map[it->a] : -1,
                                  it->b >= 0 ? map[it->b] : -1, &args);
        }
        if (k < 0 || !(in->node[k] = node_build(ir, in, k))) break;
    }
    if (k < 0 || !in->node[k]) k = -1;   /* the caller drops what was added */
    free(map);
    ot_stack_free(st);
    return k;
}

/* norm_draw over node a where it is a float node of rank >= 1; on failure
 * ir is as it was. */
static int norm_try(fz_ir *ir, rng *r, fz_inst *in, int a, int smooth)
{
    int save_nl = ir->nl, save_nn = ir->nn;
    ot_node *x = in->node[a];
    int k = x && ot_node_shape(x).ndim && is_float(ot_node_dtype(x)) ? norm_draw(ir, r, in, a, smooth)
                                                                     : -1;
    if (k < 0) {
        ot_clear_error();
        drop_leaves(in, ir, save_nl);
        ir->nn = save_nn;
    }
    return k;
}

/* Draws a tree into ir (empty), checking each node with the builder on ref. */
static void generate(fz_ir *ir, rng *r, int mode)
{
    memset(ir, 0, sizeof *ir);
    ir->mode = mode;
    ir->ne = -1;
    int smooth = mode == FUZZ_GRAD;
    int big = !smooth && chance(r, 3);
    fz_inst in;
    memset(&in, 0, sizeof in);
    in.pool = ot_pool_push();
    int avail[FZ_MAXN], navail = 0;
    int nleaves = 1 + rnd(r, 3);
    for (int i = 0; i < nleaves; i++) {
        ot_dtype dt = smooth ? (chance(r, 60) ? OT_F64 : OT_F32) : draw_dtype(r);
        int k = add_leaf_node(ir, r, draw_shape(r, big), dt, smooth, big);
        int li = ir->n[k].leaf;
        if (leaf_inst(ref_be, &ir->l[li], NULL, &in, li) == 0) in.node[k] = node_build(ir, &in, k);
        avail[navail++] = k;
    }
    int target = 1 + rnd(r, 12);
    for (int tries = 0, ops = 0; ops < target && tries < 300 && ir->nn < FZ_MAXN - 4; tries++) {
        int op = rnd(r, OT_OP_COUNT);
        if (chance(r, 4)) {   /* layer or RMS norm: composites, the builder's own trees */
            int k = norm_try(ir, r, &in, avail[chance(r, 60) ? navail - 1 : rnd(r, navail)], smooth);
            if (k >= 0) avail[navail++] = k, ops++;
            continue;
        }
        if ((ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM) && (op = user_op(r, op)) < 0) continue;
        int arity = ot_op_arity((ot_op)op), kind = ot_op_kind((ot_op)op);
        if (smooth && (ot_op_flags((ot_op)op) & OT_FLAG_NODIFF) && chance(r, 70)) continue;
        int save_nn = ir->nn, save_nl = ir->nl;
        for (int j = save_nn; j < FZ_MAXN; j++) in.node[j] = NULL;
        int a = -1, b = -1, ce_axis = -12345, concat_axis = 0;
        ot_args pool_args = {.axis = OT_AXIS_ALL};
        if (arity >= 1) a = avail[chance(r, 60) ? navail - 1 : rnd(r, navail)];
        ot_shape sa = a >= 0 && in.node[a] ? ot_node_shape(in.node[a]) : (ot_shape){0};
        ot_dtype da = a >= 0 && in.node[a] ? ot_node_dtype(in.node[a]) : OT_F32;
        if (!is_float(da) && !chance(r, 30)) da = smooth ? OT_F64 : OT_F32;
        if (kind == OT_KIND_DOT) {
            int batched = op == OT_OP_BATCHED_DOT;
            int want = batched ? 3 : 1 + rnd(r, 2);
            if (sa.ndim != want || (batched ? false : sa.ndim > 2) || !is_float(da) || chance(r, 20)) {
                ot_shape s = {.ndim = want};
                for (int i = 0; i < want; i++) s.dims[i] = draw_dim(r, 0) % 9;
                a = add_leaf_node(ir, r, s, is_float(da) ? da : OT_F32, smooth, 0);
                sa = s;
            }
            ot_shape sb;
            if (batched) {
                sb = (ot_shape){.ndim = 3, .dims = {chance(r, 20) ? 1 : sa.dims[0], sa.dims[2],
                                                   1 + rnd(r, 5)}};
                if (chance(r, 15)) sb.dims[0] = 1;
            } else {
                sb.ndim = 1 + rnd(r, 2);
                sb.dims[0] = sa.dims[sa.ndim - 1];
                sb.dims[1] = chance(r, 10) ? 17 : 1 + rnd(r, 5);
            }
            b = add_leaf_node(ir, r, sb, chance(r, 70) ? da : (chance(r, 50) ? OT_F32 : OT_F64),
                              smooth, 0);
            if (chance(r, 50) && navail > 1) {  /* a computed operand on the right instead */
                int c = avail[rnd(r, navail)];
                if (in.node[c]) {
                    ot_shape sc = ot_node_shape(in.node[c]);
                    if (!batched && sc.ndim >= 1 && sc.ndim <= 2) {
                        ot_shape s = {.ndim = 1 + rnd(r, 2)};
                        s.dims[s.ndim - 1] = sc.dims[0];
                        if (s.ndim == 2) s.dims[0] = 1 + rnd(r, 4);
                        for (int li = save_nl; li < ir->nl; li++) free(ir->l[li].data);
                        ir->nn = save_nn;
                        ir->nl = save_nl;
                        a = add_leaf_node(ir, r, s, is_float(da) ? da : OT_F32, smooth, 0);
                        b = c;
                    }
                }
            }
        } else if (is_pool(op)) {
            a = pool_draw(ir, r, op, a, sa, da, smooth, &pool_args, &b);
            if (a >= 0 && ot_op_arity((ot_op)op) == 2 && b < 0) a = -1;
        } else if (is_index_op(op)) {
            a = index_draw(ir, r, op, a, sa, da, smooth, &pool_args, &b);
        } else if (is_along(op)) {
            a = along_draw(ir, r, &op, a, sa, da, smooth, &pool_args, &b);
        } else if (is_attn(op)) {
            a = attn_draw(ir, r, op, a, sa, da, smooth, &pool_args, &b);
            if (b < 0) a = -1;
        } else if (op == OT_OP_CONCAT) {   /* a part of s's dims but on the axis */
            concat_axis = sa.ndim ? rnd(r, sa.ndim) : 0;
            ot_shape sb = sa;
            if (sa.ndim) sb.dims[concat_axis] = rnd(r, 4);
            b = chance(r, 30) ? a : add_leaf_node(ir, r, sb, smooth ? (chance(r, 60) ? OT_F64 : OT_F32)
                                                                   : draw_dtype(r), smooth, big);
            if (chance(r, 50)) { int t = a; a = b; b = t; }
        } else if (arity == 2) {
            int p = rnd(r, 100);
            if (p < 20) b = add_const(ir, r, smooth);
            else if (p < 55 || navail < 2)
                b = add_leaf_node(ir, r, bcast_partner(r, sa),
                                  smooth ? (chance(r, 60) ? OT_F64 : OT_F32) : draw_dtype(r), smooth, big);
            else b = avail[rnd(r, navail)];
            if (chance(r, 50)) { int t = a; a = b; b = t; }
            if (op == OT_OP_CROSS_ENTROPY && chance(r, 50) && a >= 0 && in.node[a] && ir->nn < FZ_MAXN - 4) {
                /* cross_entropy(softmax(x), t): its gradient assumes targets that
                 * sum to 1 along the axis (documented), so t is a softmax too */
                ot_shape ps = ot_node_shape(in.node[a]);
                ot_args sm;
                draw_args(r, ps.ndim, &sm);
                a = add_node(ir, OT_OP_SOFTMAX, a, -1, &sm);
                int tl = add_leaf_node(ir, r, ps, chance(r, 50) ? OT_F32 : OT_F64, smooth, big);
                b = tl >= 0 ? add_node(ir, OT_OP_SOFTMAX, tl, -1, &sm) : -1;
                ce_axis = sm.axis;
            }
        }
        if (a < 0 && arity >= 1) {
            for (int li = save_nl; li < ir->nl; li++) free(ir->l[li].data);
            ir->nn = save_nn;
            ir->nl = save_nl;
            continue;
        }
        ot_args args;
        draw_args(r, a >= 0 && in.node[a] ? ot_node_shape(in.node[a]).ndim : 0, &args);
        if (ce_axis != -12345) args.axis = ce_axis;
        if (is_pool(op)) {
            args.win = pool_args.win;
            args.shape = pool_args.shape;
        }
        if (is_index_op(op)) {
            args.axis = pool_args.axis;
            args.depth = pool_args.depth;
        }
        if (op == OT_OP_TRIL || op == OT_OP_TRIU) args.ddof = rnd(r, 5) - 2;
        if (is_along(op)) {   /* topk's k and flags live in these members (ops.c) */
            args.axis = pool_args.axis;
            args.depth = pool_args.depth;
            args.ddof = pool_args.ddof;
            args.keepdims = pool_args.keepdims;
            args.win.ceil_mode = pool_args.win.ceil_mode;
        }
        if (is_attn(op)) {   /* attention's attributes live in these members (ops.c) */
            args.lo = pool_args.lo;
            args.keepdims = pool_args.keepdims;
            args.depth = pool_args.depth;
            args.ddof = pool_args.ddof;
            args.win = pool_args.win;
        }
        if (op >= OT_OP_COUNT && kind == OT_KIND_SPECIAL && args.axis == OT_AXIS_ALL && sa.ndim)
            args.axis = rnd(r, sa.ndim);   /* a structured op's scan needs an axis */
        if (op == OT_OP_SLICE && a >= 0 && in.node[a]) draw_slice(r, ot_node_shape(in.node[a]), &args);
        if (op == OT_OP_RESHAPE && a >= 0 && in.node[a]) draw_reshape(r, ot_node_shape(in.node[a]), &args);
        if (op == OT_OP_CONCAT)
            args.axis = chance(r, 50) || a < 0 || !in.node[a] ? concat_axis
                      : concat_axis - ot_node_shape(in.node[a]).ndim;
        if (op == OT_OP_ONEHOT && chance(r, 60) && a >= 0)
            a = add_node(ir, OT_OP_CAST, a, -1, &(ot_args){.axis = OT_AXIS_ALL, .dtype = OT_I32});
        if (op == OT_OP_RAND && smooth) args.dtype = OT_F64;
        int k = a >= 0 || b >= 0 || arity == 0 ? add_node(ir, op, a, b, &args) : -1;
        int ok = k >= 0;
        for (int j = save_nn; ok && j < ir->nn; j++) {
            if (ir->n[j].op == FZ_LEAF) {
                int li = ir->n[j].leaf;
                if (leaf_inst(ref_be, &ir->l[li], NULL, &in, li) != 0) { ok = 0; break; }
            }
            in.node[j] = node_build(ir, &in, j);
            if (!in.node[j]) ok = 0;
        }
        /* a tree whose ref evaluation fails at run time is kept for the error check */
        if (!ok) {
            ot_clear_error();
            drop_leaves(&in, ir, save_nl);
            ir->nn = save_nn;
            continue;
        }
        if (smooth && !is_float(ot_node_dtype(in.node[k]))) {
            /* a float tree for gradients: cast integer results back */
            int c = add_node(ir, OT_OP_CAST, k, -1, &(ot_args){.axis = OT_AXIS_ALL, .dtype = OT_F64});
            if (c >= 0) { in.node[c] = node_build(ir, &in, c); k = c; }
        }
        avail[navail++] = k;
        ops++;
    }
    ir->nroots = 1;
    ir->roots[0] = avail[navail - 1];
    if (mode == FUZZ_MANY && navail > 1) {
        ir->nroots = 2 + rnd(r, 2);
        for (int i = 1; i < ir->nroots; i++) ir->roots[i] = avail[rnd(r, navail - 1)];
    }
    for (int i = 0; i < ir->nroots; i++) {
        ot_node *root = in.node[ir->roots[i]];
        ir->out_dtype[i] = chance(r, 85) ? ot_node_dtype(root) : draw_dtype(r);
        int p = rnd(r, 100);
        ir->out_kind[i] = mode == FUZZ_GRAD || p < 55 ? OUT_FRESH : p < 75 ? OUT_STRIDED
                        : p < 85 ? OUT_BCAST : OUT_LEAF;
        if (i > 0 && chance(r, 4)) ir->out_kind[i] = OUT_SAME;
        if (ir->out_kind[i] == OUT_LEAF) {
            ir->out_kind[i] = OUT_FRESH;
            ot_shape rs = ot_node_shape(root);
            for (int li = 0; li < ir->nl; li++) {
                ot_shape ls = ir->l[li].view == V_NONE ? ir->l[li].base
                            : in.view[li] ? ot_tensor_shape(in.view[li]) : (ot_shape){.ndim = -1};
                if (ir->l[li].view == V_BCAST || ls.ndim != rs.ndim) continue;
                if (memcmp(ls.dims, rs.dims, sizeof ls.dims) != 0) continue;
                int used = 0;
                for (int j = 0; j < i; j++) used |= ir->out_kind[j] == OUT_LEAF && ir->out_leaf[j] == li;
                if (used) continue;
                ir->out_kind[i] = OUT_LEAF;
                ir->out_leaf[i] = li;
                ir->out_dtype[i] = ir->l[li].dtype;
                break;
            }
        }
    }
    if (mode == FUZZ_GRAD && chance(r, 50)) {
        ot_node *root = in.node[ir->roots[0]];
        ir->ne = add_leaf(ir, r, ot_node_shape(root), ot_node_dtype(root), 1, 0);
    }
    for (int li = 0; li < FZ_MAXL; li++) {
        if (in.view[li] && in.view[li] != in.base[li]) ot_tensor_free(in.view[li]);
        ot_tensor_free(in.base[li]);
    }
    ot_pool_pop(in.pool);
    ot_clear_error();
}

/* ---- running and comparing ----------------------------------------------- */

/* What one backend produced for the tree: outputs (whole output buffers, so
 * elements a strided output must not touch are compared too) or gradients. */
typedef struct fz_res {
    int rc;
    int nv;
    double *v[FZ_MAXL];
    int64_t n[FZ_MAXL];
    ot_dtype dt[FZ_MAXL];
    uint64_t elem_ops;
    int64_t out_numel;
    int64_t rebuilt_at;   /* cpu: the first element where the same tree,
                             built again over the same leaves and assigned
                             again (a digest-table hit), differs; -1 none */
    int64_t program_at;   /* cpu: the first element where the same trees run
                             as a one-step program differ; -1 none */
    int program_rc;       /* that program's first error code, or 0 */
} fz_res;

static void res_free(fz_res *o)
{
    for (int i = 0; i < o->nv; i++) free(o->v[i]);
    memset(o, 0, sizeof *o);
}

/* Failure report filled by the checks (in the child when forked). */
typedef struct fz_fail {
    int kind;
    int cfg[2];
    char msg[1024];
} fz_fail;

static void fail_set(fz_fail *f, int kind, int c0, int c1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void fail_set(fz_fail *f, int kind, int c0, int c1, const char *fmt, ...)
{
    if (f->kind) return;
    f->kind = kind;
    f->cfg[0] = c0;
    f->cfg[1] = c1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
}

static const double SENTINEL = 7777.25;

/* The first element where w and v differ in their bits (any NaN matching
 * any NaN), or -1. */
static int64_t first_difference(const double *w, const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&w[i], &v[i], sizeof *w) != 0 && !(isnan(w[i]) && isnan(v[i]))) return i;
    return -1;
}

/* Builds the trees again over the same leaves, as a caller rebuilding a
 * tree per call does, and assigns root 0 again into out: on the cpu
 * backend the digest table then serves the first assignment's plan and
 * bindings without a walk. The first element (of whole, out's base) that
 * differs from the first assignment's values v, or -1. Only where the
 * first assignment left its inputs unchanged (the output is not a leaf). */
static int64_t rebuilt_differs(const fz_ir *ir, fz_inst *in, ot_tensor *out, ot_tensor *whole,
                               const double *v, int64_t n)
{
    ot_pool *pool = ot_pool_push();
    if (!pool) return -1;
    for (int k = 0; k < ir->nn; k++) in->node[k] = node_build(ir, in, k);
    int64_t at = -1, m = 0;
    double *w = NULL;
    if (ot_assign_node(out, in->node[ir->roots[0]]) != 0) at = 0;
    else if ((w = get_values(whole, &m)) && m == n) at = first_difference(w, v, n);
    free(w);
    ot_pool_pop(pool);
    return at;
}

/* The trees run again as one step of a program (compiled, run with no
 * bindings) into outputs reset to SENTINEL: ot_program_run promises
 * ot_assign_many's bits. Sets o->program_at (the first element of an
 * output that differs from o's values, 0 where the program fails) and
 * o->program_rc. Not where an output is a leaf: the first run changed
 * what the trees read. */
static void program_differs(ot_backend *be, const fz_ir *ir, ot_tensor *const outs[],
                            ot_node *const trees[], ot_tensor *const whole[], fz_res *o)
{
    for (int i = 0; i < ir->nroots; i++)
        if (ir->out_kind[i] == OUT_LEAF || ir->out_kind[i] == OUT_SAME) return;
    for (int k = 0; k < o->nv; k++)
        if (ot_fill(whole[k], SENTINEL) != 0) return;
    ot_program *p = ot_program_new(be);
    int rc = !p ? ot_errcode()
                : ir->mode == FUZZ_MANY ? ot_program_assign_many(p, ir->nroots, outs, trees)
                                        : ot_program_assign_node(p, outs[0], trees[0]);
    if (!rc) rc = ot_program_compile(p);
    if (!rc) rc = ot_program_run(p, 0, NULL);
    o->program_rc = rc;
    o->program_at = rc ? 0 : -1;
    for (int k = 0; !rc && k < o->nv && o->program_at < 0; k++) {
        int64_t m = 0;
        double *w = get_values(whole[k], &m);
        o->program_at = !w || m != o->n[k] ? 0 : first_difference(w, o->v[k], m);
        free(w);
    }
    ot_program_free(p);
    ot_clear_error();
}

static void run_forward_on(ot_backend *be, const fz_ir *ir, double *const *pert, fz_res *o)
{
    memset(o, 0, sizeof *o);
    o->rebuilt_at = -1;
    o->program_at = -1;
    fz_inst in;
    o->rc = inst_build(be, ir, pert, &in);
    ot_tensor *outs[3] = {0}, *obase[3] = {0};
    ot_node *trees[3];
    for (int i = 0; !o->rc && i < ir->nroots; i++) {
        ot_node *root = in.node[ir->roots[i]];
        ot_shape rs = ot_node_shape(root), bs = rs;
        trees[i] = root;
        switch (ir->out_kind[i]) {
        case OUT_STRIDED: {
            ot_index idx[OT_MAX_DIMS];
            for (int d = 0; d < rs.ndim; d++) {
                bs.dims[d] = rs.dims[d] * 2 + 1;
                idx[d] = d % 2 ? (ot_index){OT_INDEX_RANGE, 1, OT_NONE, 2}
                               : (ot_index){OT_INDEX_RANGE, -2, OT_NONE, -2};
            }
            obase[i] = ot_full(be, bs, ir->out_dtype[i], SENTINEL);
            outs[i] = obase[i] ? ot_slice_n(obase[i], rs.ndim, idx) : NULL;
            break;
        }
        case OUT_BCAST:
            if (bs.ndim < OT_MAX_DIMS) {
                for (int d = bs.ndim; d > 0; d--) bs.dims[d] = bs.dims[d - 1];
                bs.dims[0] = 2;
                bs.ndim++;
            }
            outs[i] = obase[i] = ot_full(be, bs, ir->out_dtype[i], SENTINEL);
            break;
        case OUT_LEAF:
            outs[i] = in.view[ir->out_leaf[i]];
            break;
        case OUT_SAME:  /* overlapping outputs: OT_EALIAS everywhere */
            outs[i] = outs[0];
            break;
        default:
            outs[i] = obase[i] = ot_full(be, rs, ir->out_dtype[i], SENTINEL);
        }
        if (!outs[i]) o->rc = ot_errcode() ? ot_errcode() : OT_EINVAL;
    }
    if (!o->rc) {
        ot_stats s0, s1;
        ot_stats_get(be, &s0);
        o->rc = ir->mode == FUZZ_MANY ? ot_assign_many(ir->nroots, outs, trees)
                                      : ot_assign_node(outs[0], trees[0]);
        ot_stats_get(be, &s1);
        o->elem_ops = s1.elem_ops - s0.elem_ops;
    }
    ot_tensor *wholes[3] = {0};
    for (int i = 0; i < ir->nroots; i++) {
        if (!o->rc) {
            int j = ir->out_kind[i] == OUT_SAME ? 0 : i;
            ot_tensor *whole = ir->out_kind[j] == OUT_LEAF ? in.base[ir->out_leaf[j]] : obase[j];
            wholes[o->nv] = whole;
            o->v[o->nv] = get_values(whole, &o->n[o->nv]);
            o->dt[o->nv] = ot_tensor_dtype(whole);
            o->out_numel += o->n[o->nv];
            o->nv++;
        }
    }
    if (!o->rc && o->nv && ir->mode != FUZZ_MANY && ir->out_kind[0] != OUT_LEAF &&
        ir->out_kind[0] != OUT_SAME && !round32 && !noise_draw &&
        strcmp(ot_backend_name(be), "cpu") == 0)
        o->rebuilt_at = rebuilt_differs(ir, &in, outs[0], obase[0], o->v[0], o->n[0]);
    if (!o->rc && o->nv == ir->nroots && !round32 && !noise_draw && !pert &&
        strcmp(ot_backend_name(be), "cpu") == 0)
        program_differs(be, ir, outs, trees, wholes, o);
    for (int i = 0; i < ir->nroots; i++) {  /* after every read: outputs may be shared */
        if (outs[i] && outs[i] != obase[i] && ir->out_kind[i] != OUT_LEAF &&
            ir->out_kind[i] != OUT_SAME)
            ot_tensor_free(outs[i]);
        ot_tensor_free(obase[i]);
    }
    inst_free(&in, ir->nl);
    ot_clear_error();
}

static void run_grad_on(ot_backend *be, const fz_ir *ir, double *const *pert, fz_res *o)
{
    memset(o, 0, sizeof *o);
    fz_inst in;
    /* the variants of ref round or perturb the gradient trees themselves */
    int r32 = round32, ns = noise_draw;
    round32 = noise_draw = 0;
    o->rc = inst_build(be, ir, pert, &in);
    round32 = r32;
    noise_draw = ns;
    ot_autodiff *ad = NULL;
    if (!o->rc) {
        ot_node *ne = ir->ne >= 0 ? ot_tensor_node(in.view[ir->ne]) : NULL;
        ad = ot_autodiff_new(in.node[ir->roots[0]], ne);
        if (!ad) o->rc = ot_errcode() ? ot_errcode() : OT_EINVAL;
    }
    ot_tensor *wrt[FZ_MAXL], *g[FZ_MAXL];
    int nw = 0;
    for (int i = 0; !o->rc && i < ir->nl; i++) {
        if (i == ir->ne) continue;
        wrt[nw] = in.view[i];
        g[nw] = ot_full(be, ot_tensor_shape(in.view[i]), ot_tensor_dtype(in.view[i]), SENTINEL);
        nw++;
    }
    if (!o->rc && !r32 && !ns) o->rc = ot_autodiff_backprop(ad, nw, wrt, g);
    for (int i = 0; !o->rc && (r32 || ns) && i < nw; i++) {
        ot_node *gt = ot_autodiff_grad(ad, wrt[i]);
        o->rc = gt ? ot_assign_node(g[i], transform(gt)) : ot_errcode();
    }
    for (int i = 0; i < nw; i++) {
        if (!o->rc) {
            o->v[o->nv] = get_values(g[i], &o->n[o->nv]);
            o->dt[o->nv] = ot_tensor_dtype(g[i]);
            o->nv++;
        }
        ot_tensor_free(g[i]);
    }
    ot_autodiff_free(ad);
    inst_free(&in, ir->nl);
    ot_clear_error();
}

/* Leaf data with every float element scaled by (1 + u delta), u in [-1, 1]:
 * ref on it shows how much the tree amplifies rounding-sized changes. */
static double **perturbed(const fz_ir *ir, rng *r)
{
    double **p = calloc(FZ_MAXL, sizeof *p);
    for (int i = 0; i < ir->nl; i++) {
        int64_t n = numel(&ir->l[i].base);
        p[i] = malloc((size_t)(n ? n : 1) * sizeof(double));
        double delta = ir->l[i].dtype == OT_F32 ? 1e-6 : ir->l[i].dtype == OT_F64 ? 1e-13 : 0;
        for (int64_t j = 0; j < n; j++)
            p[i][j] = ir->l[i].data[j] * (1 + delta * (2 * unif(r) - 1));
    }
    return p;
}

static void pert_free(double **p)
{
    for (int i = 0; i < FZ_MAXL; i++) free(p[i]);
    free(p);
}

/* Index of the first element of c that is not close to ref r (p1, p2: ref
 * on perturbed inputs), or -1. */
/* How coarse the floats some of the tree is computed in: 0 (f64 only),
 * LOWP_F32, or LOWP_F16 or LOWP_BF16 where a leaf or cast is 16-bit (bf16,
 * the coarser, first). Ref computes in double and rounds only at the output
 * and at its 16-bit casts, so f32 trees get f32 tolerances throughout, and
 * 16-bit ones one 16-bit rounding even into an f64 output (a 16-bit cast
 * inside rounds a value computed in f32 on cpu and in double on ref, and
 * the two may round to neighbours: seed 3030 tree 24161, --modes half). */
enum { LOWP_F32 = 1, LOWP_F16, LOWP_BF16 };
static int lowp_of(ot_dtype d)
{
    return d == OT_BF16 ? LOWP_BF16 : d == OT_F16 ? LOWP_F16 : d == OT_F32 ? LOWP_F32 : 0;
}

static int low_precision(const fz_ir *ir)
{
    int lowp = 0;
    for (int i = 0; i < ir->nl; i++)
        if (lowp_of(ir->l[i].dtype) > lowp) lowp = lowp_of(ir->l[i].dtype);
    for (int k = 0; k < ir->nn; k++) {
        if (ir->n[k].op >= 0 && lowp_of(ir->n[k].args.dtype) > lowp)
            lowp = lowp_of(ir->n[k].args.dtype);
        if (ir->n[k].op == FZ_CONST && ir->n[k].ckind == 1 && lowp < LOWP_F32) lowp = LOWP_F32;
    }
    return lowp;
}

/* For a dot or a conv, the same op over its operands' magnitudes: a bound
 * on every partial sum the cpu backend forms in f32 (ref sums in double, so
 * f32 terms near FLT_MAX give ref inf where cpu meets inf + -inf, NaN);
 * for the examples' GELU, x / (1 + exp(-2u)), its exponential, which the
 * op's f32 function overflows where its f64 one does not (gelu(-10.06) in
 * bf16: ref -2.9e-38, cpu -0); else the node itself. */
static ot_node *partial_bound(const fz_ir *ir, const fz_inst *in, int k)
{
    int op = ir->n[k].op;
    if (op >= 0 && ir->n[k].a >= 0 && op == (int)ot_op_lookup("gelu")) {
        ot_node *x = in->node[ir->n[k].a];
        ot_node *u = ot_mul(GELU_C, ot_add(x, ot_mul(GELU_A, ot_mul(x, ot_mul(x, x)))));
        ot_node *e = ot_exp(ot_mul(-2.0, u));
        return e ? e : in->node[k];
    }
    bool sums = op == OT_OP_DOT || op == OT_OP_BATCHED_DOT || op == OT_OP_CONV ||
                op == OT_OP_CONV_TRANSPOSE;
    if (!sums || ir->n[k].a < 0 || ir->n[k].b < 0) return in->node[k];
    ot_args a = ot_node_args(in->node[k]);
    ot_node *m = ot_build_at(op, ot_abs(in->node[ir->n[k].a]), ot_abs(in->node[ir->n[k].b]), &a,
                             NULL, 0);
    return m ? m : in->node[k];
}

/* Whether node n's values, computed by ref in double, stay in f32's normal
 * range (or are 0 or not finite). */
static bool in_f32_range(ot_node *n)
{
    ot_tensor *t = ot_eval(ot_build_at(OT_OP_CAST, n, NULL,
                                       &(ot_args){.axis = OT_AXIS_ALL, .dtype = OT_F64}, NULL, 0));
    int64_t cnt = 0;
    double *v = t ? get_values(t, &cnt) : NULL;
    bool ok = true;
    for (int64_t i = 0; v && i < cnt; i++)
        if (isfinite(v[i]) && (fabs(v[i]) > FLT_MAX || (v[i] != 0 && fabs(v[i]) < FLT_MIN))) ok = false;
    free(v);
    ot_tensor_free(t);
    return ok;
}

/* False when a node of an f32 tree leaves f32's normal range in ref's
 * double arithmetic (exp(100), exp(-100)), or a dot's or conv's partial
 * sums may (partial_bound): ref rounds only at the output, so there the
 * cpu backend's f32 overflow or underflow is not an error. */
static int f32_range_ok(const fz_ir *ir)
{
    fz_inst in;
    int ok = 1;
    if (inst_build(ref_be, ir, NULL, &in) == 0) {
        for (int k = 0; ok && k < ir->nn; k++) {
            ot_dtype d = ir->n[k].op < 0 ? OT_I32 : ot_node_dtype(in.node[k]);
            if (d != OT_F32 && !is_half(d)) continue;   /* cpu computes 16 bits in f32 */
            ot_node *bound = partial_bound(ir, &in, k);
            ok = in_f32_range(in.node[k]) && (bound == in.node[k] || in_f32_range(bound));
        }
    }
    inst_free(&in, ir->nl);
    ot_clear_error();
    return ok;
}

static int64_t compare(const fz_res *r, const fz_res *const *pert, int npert, const fz_res *alt,
                       const fz_res *c, int lowp, int *which, double *tol_out)
{
    for (int k = 0; k < r->nv; k++) {
        if (c->n[k] != r->n[k]) { *which = k; return 0; }
        double scale = 1;
        for (int64_t i = 0; i < r->n[k]; i++)
            if (isfinite(r->v[k][i]) && r->v[k][i] != SENTINEL) scale = fmax(scale, fabs(r->v[k][i]));
        int f32 = lowp || r->dt[k] == OT_F32;
        double rtol = f32 ? 1e-4 : 1e-9, atol = (f32 ? 1e-5 : 1e-11) * scale;
        int half = is_half(r->dt[k]) ? lowp_of(r->dt[k]) : lowp > LOWP_F32 ? lowp : 0;
        if (half) {   /* one rounding to 16 bits apart (see the top) */
            rtol = half == LOWP_F16 ? 0x1p-10 : 0x1p-7;
            atol = 1e-5 * scale + 0x1p-24;
        }
        for (int64_t i = 0; i < r->n[k]; i++) {
            double x = c->v[k][i], y = r->v[k][i];
            double z = alt && alt->nv > k && alt->n[k] == r->n[k] ? alt->v[k][i] : NAN;
            if (alt && (x == z || (isnan(x) && isnan(z)) || fabs(x - z) <= 1e-4 * fmax(1, fabs(z))))
                continue;
            int stable = 1;
            double sens = 0;
            for (int j = 0; j < npert; j++) {
                const fz_res *p = pert[j];
                double q = p->nv > k && p->n[k] == r->n[k] ? p->v[k][i] : y;
                stable &= isnan(q) == isnan(y) && isinf(q) == isinf(y) && (!isinf(y) || q == y);
                if (isfinite(q) && isfinite(y)) sens = fmax(sens, fabs(q - y));
            }
            if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) {
                if (!stable) continue;
                if (isnan(x) != isnan(y) || (!isnan(x) && x != y)) goto bad;
                continue;
            }
            if (!stable) continue;
            double tol = atol + rtol * fabs(y) + 8 * sens;
            *tol_out = tol;
            if (fabs(x - y) <= tol) continue;
        bad:
            *which = k;
            return i;
        }
    }
    return -1;
}

static int bitwise_equal(const fz_res *a, const fz_res *b, int *which, int64_t *at)
{
    for (int k = 0; k < a->nv && k < b->nv; k++) {
        int64_t i = first_difference(a->v[k], b->v[k], a->n[k] < b->n[k] ? a->n[k] : b->n[k]);
        if (i >= 0) {
            *which = k;
            *at = i;
            return 0;
        }
    }
    return 1;
}

/* ref's answer and what it takes to judge another backend's against it:
 * ref on perturbed inputs, and (made on the first disagreement) ref with
 * noise on every node and ref rounding every f32 node. */
typedef void (*runner)(ot_backend *, const fz_ir *, double *const *, fz_res *);
typedef struct oracle {
    runner run;
    fz_res r, p[2], noise[2][NOISE_DRAWS], rr;  /* noise: for OT_ULP10, OT_ULP35 */
    int have_noise[2], have_rr;
} oracle;

static void oracle_init(oracle *o, runner run, const fz_ir *ir)
{
    memset(o, 0, sizeof *o);
    o->run = run;
    rng pr = {0x5eed};
    run(ref_be, ir, NULL, &o->r);
    for (int j = 0; j < 2; j++) {
        double **q = perturbed(ir, &pr);
        run(ref_be, ir, q, &o->p[j]);
        pert_free(q);
    }
}

static void oracle_free(oracle *o)
{
    res_free(&o->r);
    for (int j = 0; j < 2; j++) res_free(&o->p[j]);
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < NOISE_DRAWS; j++) res_free(&o->noise[a][j]);
    res_free(&o->rr);
}

/* The first element of c, computed at accuracy OT_ULP35 (fast) or OT_ULP10,
 * that ref does not explain, or -1. */
static int64_t judge(oracle *o, const fz_ir *ir, const fz_res *c, int fast, int *which, double *tol)
{
    int lowp = low_precision(ir);
    const fz_res *pp[2 + NOISE_DRAWS] = {&o->p[0], &o->p[1]};
    int64_t at = compare(&o->r, pp, 2, NULL, c, lowp, which, tol);
    if (at < 0) return at;
    if (!o->have_noise[fast]) {
        o->have_noise[fast] = 1;
        noise_fast = fast;
        for (int j = 0; j < NOISE_DRAWS; j++) {
            noise_draw = j + 1;
            o->run(ref_be, ir, NULL, &o->noise[fast][j]);
        }
        noise_draw = 0;
    }
    if (lowp && !o->have_rr) {
        o->have_rr = 1;
        round32 = 1;
        o->run(ref_be, ir, NULL, &o->rr);
        round32 = 0;
    }
    for (int j = 0; j < NOISE_DRAWS; j++) pp[2 + j] = &o->noise[fast][j];
    at = compare(&o->r, pp, 2 + NOISE_DRAWS, lowp ? &o->rr : NULL, c, lowp, which, tol);
    if (at >= 0 && lowp && !f32_range_ok(ir)) at = -1;
    return at;
}

static void check_forward(const fz_ir *ir, fz_fail *f)
{
    oracle o;
    oracle_init(&o, run_forward_on, ir);
    fz_res cr[NCFG];
    const fz_res *r = &o.r;
    int have[NCFG] = {0};
    char nm[96];
    for (int j = 0; j < ir->ncfg; j++) {
        int c = ir->cfg[j];
        ot_backend *be = cfg_backend(c);
        if (!be || have[c]) continue;
        run_forward_on(be, ir, NULL, &cr[c]);
        have[c] = 1;
        cfg_name(c, nm, sizeof nm);
        if (cr[c].rc != r->rc) {
            fail_set(f, FK_RC, c, -1, "%s returns %d (%s), ref %d (%s)", nm, cr[c].rc,
                     ot_strerror(cr[c].rc), r->rc, ot_strerror(r->rc));
            continue;
        }
        if (r->rc) continue;
        int which = 0;
        double tol = 0;
        int64_t at = judge(&o, ir, &cr[c], CFG_FAST(c), &which, &tol);
        if (at >= 0)
            fail_set(f, FK_VALUE, c, -1, "%s: output %d element %" PRId64 " is %.17g, ref %.17g (tol %.3g)",
                     nm, which, at, cr[c].v[which][at], r->v[which][at], tol);
        if (cr[c].rebuilt_at >= 0)
            fail_set(f, FK_REBUILD, c, -1, "%s: the tree rebuilt and assigned again differs at "
                     "element %" PRId64, nm, cr[c].rebuilt_at);
        if (cr[c].program_rc)
            fail_set(f, FK_PROGRAM, c, -1, "%s: the trees run as a program fail: %d (%s)", nm,
                     cr[c].program_rc, ot_strerror(cr[c].program_rc));
        else if (cr[c].program_at >= 0)
            fail_set(f, FK_PROGRAM, c, -1,
                     "%s: the trees run as a program differ at element %" PRId64, nm,
                     cr[c].program_at);
    }
    for (int c = 0; c < FUSION_OFF; c++) {
        if (!have[c] || cr[c].rc) continue;
        int which = 0;
        int64_t at = 0;
        int t = c ^ 1, jt = c ^ 2;
        if ((c & 1) == 0 && have[t] && !cr[t].rc && !bitwise_equal(&cr[c], &cr[t], &which, &at)) {
            cfg_name(t, nm, sizeof nm);
            fail_set(f, FK_THREADS, c, t, "%s vs threads=1: output %d element %" PRId64 ": %a vs %a",
                     nm, which, at, cr[t].v[which][at], cr[c].v[which][at]);
        }
        if ((c & 2) == 0 && have[jt] && !cr[jt].rc && !bitwise_equal(&cr[c], &cr[jt], &which, &at)) {
            cfg_name(jt, nm, sizeof nm);
            fail_set(f, FK_JIT, c, jt, "%s vs OT_JIT=0: output %d element %" PRId64 ": %a vs %a",
                     nm, which, at, cr[jt].v[which][at], cr[c].v[which][at]);
        }
        const fz_res *u = &cr[FUSION_OFF];
        if (have[FUSION_OFF] && !u->rc && u->elem_ops &&
            cr[c].elem_ops > 3 * u->elem_ops + 64 * (uint64_t)cr[c].out_numel) {
            cfg_name(c, nm, sizeof nm);
            fail_set(f, FK_ELEMOPS, c, FUSION_OFF, "%s does %" PRIu64 " elem_ops, fusion off %" PRIu64,
                     nm, cr[c].elem_ops, u->elem_ops);
        }
    }
    for (int c = 0; c < NCFG; c++)
        if (have[c]) res_free(&cr[c]);
    oracle_free(&o);
}

/* The IR with every f32 in f64: for central differences. */
static void to_f64(fz_ir *ir)
{
    for (int i = 0; i < ir->nl; i++)
        if (ir->l[i].dtype == OT_F32) ir->l[i].dtype = OT_F64;
    for (int k = 0; k < ir->nn; k++) {
        if (ir->n[k].args.dtype == OT_F32) ir->n[k].args.dtype = OT_F64;
        if (ir->n[k].op == FZ_CONST && ir->n[k].ckind == 1) ir->n[k].ckind = 0;
    }
}

static double objective(fz_inst *in, const fz_ir *ir, ot_tensor *out, const double *ne, double *mag)
{
    if (ot_assign_node(out, in->node[ir->roots[0]]) != 0) return NAN;
    int64_t n;
    double *v = get_values(out, &n), s = 0, m = 0;
    if (!v) return NAN;
    for (int64_t i = 0; i < n; i++) {
        s += v[i] * (ne ? ne[i] : 1);
        m += fabs(v[i] * (ne ? ne[i] : 1));
    }
    free(v);
    if (mag) *mag = m;
    return s;
}

/* The central difference of the objective in element bi of leaf li at step
 * h (lp, lm: the objective at x + h and x - h); the element is put back. */
static double central(fz_inst *in, const fz_ir *ir, ot_tensor *out, const double *ne, int li,
                      double *data, int64_t bi, double h, double *lp, double *lm)
{
    double x = data[bi];
    data[bi] = x + h;
    ot_set(in->base[li], data);
    *lp = objective(in, ir, out, ne, NULL);
    data[bi] = x - h;
    ot_set(in->base[li], data);
    *lm = objective(in, ir, out, ne, NULL);
    data[bi] = x;
    ot_set(in->base[li], data);
    return (*lp - *lm) / (2 * h);
}

/* Whether normalising along axis a and along axis b of shape s is the same
 * (OT_AXIS_ALL is axis k when every other dim is 1). */
static int same_axis(ot_shape s, int a, int b)
{
    if (a >= 0 && a != OT_AXIS_ALL) a = a < s.ndim ? a : a - s.ndim;
    if (b >= 0 && b != OT_AXIS_ALL) b = b < s.ndim ? b : b - s.ndim;
    if (a < 0 && a != OT_AXIS_ALL) a += s.ndim;
    if (b < 0 && b != OT_AXIS_ALL) b += s.ndim;
    if (a == b) return 1;
    int k = a == OT_AXIS_ALL ? b : b == OT_AXIS_ALL ? a : -1;
    if (k < 0) return 0;
    for (int i = 0; i < s.ndim; i++)
        if (i != k && s.dims[i] != 1) return 0;
    return 1;
}

/* Whether some sin or cos of the tree reads an argument of 1e15 or more in
 * magnitude, where an ulp of f64 is a sizable part of its period: the
 * objective is then a step function of the leaves at any difference step,
 * differences of its steps can even agree (cos(cross_entropy(...)) of
 * 6e38: -0.065 at two steps, against a true slope of -3e40), and the
 * gradient is right only as calculus (cpu-vs-ref still covers it). */
static bool periodic_of_huge(const fz_ir *ir, const fz_inst *in)
{
    bool huge = false;
    for (int k = 0; k < ir->nn && !huge; k++) {
        const fz_node *n = &ir->n[k];
        if (n->op != OT_OP_SIN && n->op != OT_OP_COS) continue;
        ot_node *arg = in->node[n->a];
        ot_tensor *t = ot_empty(ref_be, ot_node_shape(arg), OT_F64);
        int64_t m = 0;
        double *v = t && ot_assign_node(t, arg) == 0 ? get_values(t, &m) : NULL;
        for (int64_t i = 0; v && i < m; i++) huge |= fabs(v[i]) >= 1e15;
        free(v);
        ot_tensor_free(t);
    }
    ot_clear_error();
    return huge;
}

/* Whether a softmax of the tree has an element within 1e-8 of 1, or a
 * logsoftmax one within 1e-8 of 0: one logit dominates its row, and the
 * element (x - lse, or 1 - the others' tiny share) moves with the other
 * logits by less than an ulp of f64. A node downstream that magnifies it
 * (sqrt(t / logsoftmax(x)): 3e5 at -4.5e-12) then takes a share of the
 * gradient that no difference of the objective can see, at any step
 * (seed 62 tree 54176: 0.0097 at three steps, against a true 0.0051 that
 * ref's gradient gives); cpu-vs-ref still covers the gradient. */
static bool saturated_softmax(const fz_ir *ir, const fz_inst *in)
{
    bool saturated = false;
    for (int k = 0; k < ir->nn && !saturated; k++) {
        int op = ir->n[k].op;
        if (op != OT_OP_SOFTMAX && op != OT_OP_LOGSOFTMAX) continue;
        double at = op == OT_OP_SOFTMAX ? 1 : 0;
        ot_tensor *t = ot_empty(ref_be, ot_node_shape(in->node[k]), OT_F64);
        int64_t m = 0;
        double *v = t && ot_assign_node(t, in->node[k]) == 0 ? get_values(t, &m) : NULL;
        for (int64_t i = 0; v && i < m; i++) saturated |= fabs(v[i] - at) < 1e-8;
        free(v);
        ot_tensor_free(t);
    }
    ot_clear_error();
    return saturated;
}

static void check_fd(const fz_ir *ir0, fz_fail *f)
{
    fz_ir ir;
    ir_copy(&ir, ir0);
    to_f64(&ir);
    fz_res g;
    run_grad_on(ref_be, &ir, NULL, &g);
    fz_inst in;
    if (g.rc || inst_build(ref_be, &ir, NULL, &in) != 0) {
        if (!g.rc) inst_free(&in, ir.nl);
        res_free(&g);
        ir_free(&ir);
        ot_clear_error();
        return;
    }
    /* an integer-valued node or a non-differentiable op (rint, compares)
     * makes the tree a step function: its gradient is zero by definition,
     * while differences of dense steps are not; and the
     * gradient of cross_entropy(softmax(x), t) is documented for targets
     * that sum to 1 (a shrunk tree may lose the softmax that made them) */
    int steps = 0;
    for (int k = 0; k < ir.nn; k++) {
        const fz_node *n = &ir.n[k];
        steps |= n->op >= 0 && (ot_node_dtype(in.node[k]) == OT_I32 ||
                                (ot_op_flags((ot_op)n->op) & OT_FLAG_NODIFF));
        if (n->op == OT_OP_CROSS_ENTROPY && ir.n[n->a].op == OT_OP_SOFTMAX)
            steps |= ir.n[n->b].op != OT_OP_SOFTMAX ||
                     !same_axis(ot_node_shape(in.node[n->b]), ot_node_args(in.node[n->b]).axis,
                                ot_node_args(in.node[k]).axis);
    }
    steps |= periodic_of_huge(&ir, &in) || saturated_softmax(&ir, &in);
    ot_node *root = in.node[ir.roots[0]];
    ot_tensor *out = ot_empty(ref_be, ot_node_shape(root), OT_F64);
    double *ne = NULL;
    int64_t nne = 0;
    if (ir.ne >= 0) ne = get_values(in.view[ir.ne], &nne);
    double mag = 0, f0 = objective(&in, &ir, out, ne, &mag);
    int gi = 0, probes = 0;
    for (int li = 0; li < ir.nl && !f->kind && !steps; li++) {
        if (li == ir.ne) continue;
        int k = gi++;
        if (ir.l[li].dtype != OT_F64 || ir.l[li].view == V_BCAST || k >= g.nv) continue;
        /* which base element each view element is */
        int64_t nb = numel(&ir.l[li].base), nv;
        double *ids = malloc((size_t)(nb ? nb : 1) * sizeof(double));
        for (int64_t j = 0; j < nb; j++) ids[j] = (double)j;
        fz_leaf idl = ir.l[li];
        idl.data = ids;
        fz_inst tmp;
        memset(&tmp, 0, sizeof tmp);
        double *map = NULL;
        if (leaf_inst(ref_be, &idl, NULL, &tmp, 0) == 0) map = get_values(tmp.view[0], &nv);
        inst_free(&tmp, 1);
        double *data = malloc((size_t)(nb ? nb : 1) * sizeof(double));
        memcpy(data, ir.l[li].data, (size_t)nb * sizeof(double));
        for (int64_t e = 0; map && e < nv && e < g.n[k] && probes < 150 && !f->kind; e++, probes++) {
            int64_t bi = (int64_t)map[e];
            double x = data[bi], est[2], side[2];
            /* steps of 1 and more average over a period of sin or cos: both
             * estimates agree on a mean slope that is not f'(x) (sin at
             * -1.4e185); the cpu-vs-ref gradient check still covers x */
            if (fabs(x) >= 1e6) continue;
            double h = 1e-6 * fmax(1, fabs(x)), lp, lm;
            est[0] = central(&in, &ir, out, ne, li, data, bi, h, &lp, &lm);
            side[0] = (f0 - lm) / h;
            side[1] = (lp - f0) / h;
            est[1] = central(&in, &ir, out, ne, li, data, bi, h / 10, &lp, &lm);
            double gv = g.v[k][e];
            if (!isfinite(est[0]) || !isfinite(est[1]) || !isfinite(gv)) continue;
            /* the objective did not move at either step: f64 cannot resolve
             * the slope here (recip(logsoftmax([0, -34]))[0]: the sum 1 +
             * e^-34 is 1 + 8 ulp whatever x0 does), so the difference says
             * nothing; the cpu-vs-ref gradient check still covers it */
            if (est[0] == 0 && est[1] == 0) continue;
            /* a kink at x (a tie of minimum or max, std of constant data, abs
             * at 0): the one-sided slopes differ, the gradient there is a
             * convention (header: ties share, std's is 0), and a piecewise
             * linear f gives the same central difference at every step */
            if (fabs(side[0] - side[1]) > 1e-3 * (1 + fabs(side[0]) + fabs(side[1]))) continue;
            if (fabs(est[0] - est[1]) > 1e-4 * (1 + fabs(est[0]))) continue;  /* not smooth here */
            /* the two steps' disagreement bounds the differences' own
             * rounding: f64 resolves a change of a sum of 1,300 terms of 1541
             * over a step of 1e-6 to about 3% (seed 6802 tree 23197: std's
             * slope -0.002889, differences -0.002859 and -0.002938) */
            double tol = 1e-5 + 1e-3 * fmax(fabs(gv), fabs(est[0])) + 1e-8 * mag / fmax(1, fabs(x)) +
                         fabs(est[0] - est[1]);
            /* f64 resolves the objective's change only to whole ulps of an
             * intermediate (1/logsoftmax where one logit dominates: 1 + 5e-7
             * moves by 20 and 2 ulps at the two steps, where 19.6 and 1.96
             * are exact, and both differences are 2% off together); a step
             * in an irrational ratio to the others cannot agree by chance */
            if (fabs(gv - est[0]) > tol) {
                double e3 = central(&in, &ir, out, ne, li, data, bi, h / (1.5 + sqrt(1.25)), &lp, &lm);
                if (fabs(e3 - est[0]) > 1e-4 * (1 + fabs(est[0]))) continue;
            }
            if (fabs(gv - est[0]) > tol)
                fail_set(f, FK_FD, -1, -1, "gradient w.r.t. leaf %d element %" PRId64
                         " is %.10g, central difference %.10g (ref, f64)", li, e, gv, est[0]);
        }
        free(data);
        free(map);
        free(ids);
    }
    free(ne);
    ot_tensor_free(out);
    inst_free(&in, ir.nl);
    res_free(&g);
    ir_free(&ir);
    ot_clear_error();
}

static void check_grad(const fz_ir *ir, fz_fail *f)
{
    oracle o;
    oracle_init(&o, run_grad_on, ir);
    const fz_res *r = &o.r;
    fz_res c;
    char nm[96];
    for (int j = 0; j < ir->ncfg && !f->kind; j++) {
        int cf = ir->cfg[j];
        ot_backend *be = cfg_backend(cf);
        if (!be) continue;
        run_grad_on(be, ir, NULL, &c);
        cfg_name(cf, nm, sizeof nm);
        if (c.rc != r->rc) {
            fail_set(f, FK_GRAD_RC, cf, -1, "backprop on %s returns %d (%s), ref %d (%s)", nm, c.rc,
                     ot_strerror(c.rc), r->rc, ot_strerror(r->rc));
        } else if (!r->rc) {
            int which = 0;
            double tol = 0;
            int64_t at = judge(&o, ir, &c, CFG_FAST(cf), &which, &tol);
            if (at >= 0)
                fail_set(f, FK_GRAD, cf, -1, "%s: gradient %d element %" PRId64 " is %.17g, ref %.17g (tol %.3g)",
                         nm, which, at, c.v[which][at], r->v[which][at], tol);
        }
        res_free(&c);
    }
    oracle_free(&o);
    if (!f->kind) check_fd(ir, f);
}

bool fuzz_same_tree(ot_node *p, ot_node *q)
{
    ot_node *pair = p && q ? ot_add(ot_cast(p, .dtype = OT_F64), ot_cast(q, .dtype = OT_F64)) : NULL;
    ot_stack *s = pair ? ot_stack_new(pair) : NULL;
    const ot_stack_item *top = s ? ot_stack_at(s, ot_stack_len(s) - 1) : NULL;
    bool same = top && top->a == top->b;
    ot_stack_free(s);
    return same;
}

/* What ot_pp writes of each root, its leaves named t0, t1, ..., reads
 * back through ot_parse as the same tree. */
static void check_parse(const fz_ir *ir, fz_fail *f)
{
    fz_inst in;
    char nm[FZ_MAXL][16];   /* room for "t%d" of any int: the sanitizer builds warn */
    const char *names[FZ_MAXL];
    ot_node *leaves[FZ_MAXL];
    if (inst_build(ref_be, ir, NULL, &in) == 0) {
        for (int i = 0; i < ir->nl; i++) {
            snprintf(nm[i], sizeof nm[i], "t%d", i);
            ot_tensor_set_name(in.view[i], nm[i]);
            names[i] = nm[i];
            leaves[i] = ot_tensor_node(in.view[i]);
        }
        for (int r = 0; r < ir->nroots && !f->kind; r++) {
            char *text = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&text, &len);
            ot_node *root = in.node[ir->roots[r]];
            if (m) {
                ot_pp(root, m);
                fclose(m);
            }
            ot_node *back = text ? ot_parse(text, ir->nl, names, leaves) : NULL;
            if (text && !fuzz_same_tree(back, root))
                fail_set(f, FK_PARSE, -1, -1, "root %d: ot_pp wrote '%.600s', which parses to %s", r,
                         text, back ? "another tree" : ot_errmsg());
            free(text);
        }
    }
    inst_free(&in, ir->nl);
    ot_clear_error();
}

/* ---- save/load round trips with failed writes ------------------------------ */

/* A hash of the tree (its sizes and first leaf's values): the draws of
 * check_save, so that tree i always draws the same. */
static uint64_t tree_hash(const fz_ir *ir)
{
    uint64_t h = 1469598103934665603u ^ (uint64_t)ir->nn << 8 ^ (uint64_t)ir->nl;
    int64_t n = ir->nl ? numel(&ir->l[0].base) : 0;
    for (int64_t i = 0; i < n && i < 16; i++) {
        uint64_t bits;
        memcpy(&bits, &ir->l[0].data[i], sizeof bits);
        h = (h ^ bits) * 1099511628211u;
    }
    return h;
}

/* Saves ts[0..n) as kind k: 0 .npy (ts[0] alone), 1 .npz, 2 compressed. */
static int save_as(int k, const char *path, int n, const ot_tensor *const ts[])
{
    static const char *const names[] = {"r", "t0", "t1", "t2"};
    return k == 0 ? ot_save(path, ts[0])
         : k == 1 ? ot_savez(path, n, names, ts) : ot_savez_compressed(path, n, names, ts);
}

/* Whether the file at path holds exactly ts[0..n) (kind k), bit for bit. */
static bool holds(int k, ot_backend *be, const char *path, int n, const ot_tensor *const ts[])
{
    ot_tensor *got[4] = {0};
    bool same = k == 0 ? (got[0] = ot_load(be, path)) != NULL
                       : ot_loadz(be, path, n, NULL, got) == n;
    for (int i = 0; i < (k == 0 ? 1 : n) && same; i++) {
        int64_t na, nb;
        double *a = get_values(got[i], &na), *b = get_values(ts[i], &nb);
        ot_shape sa = ot_tensor_shape(got[i]), sb = ot_tensor_shape(ts[i]);
        same = a && b && na == nb && sa.ndim == sb.ndim &&
               ot_tensor_dtype(got[i]) == ot_tensor_dtype(ts[i]) &&
               !memcmp(sa.dims, sb.dims, (size_t)sa.ndim * sizeof *sa.dims) && !memcmp(a, b, (size_t)na * sizeof *a);
        free(a);
        free(b);
    }
    for (int i = 0; i < 4; i++) ot_tensor_free(got[i]);
    return same;
}

/* The number of entries in dir (. and .. aside). */
static int dir_count(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* One save of the tree's leaves over an older file with the writers' k-th
 * system call failing, then one that succeeds: after the failure the old
 * file must be whole and alone in its directory, after the success it must
 * hold the new tensors. */
static void save_round_trip(const char *dir, int n, const ot_tensor *const ts[],
                            const ot_tensor *const old[], uint64_t h, fz_fail *f)
{
    static const int errs[] = {ENOSPC, EIO, EDQUOT};
    char path[512];
    int kind = (int)(h % 3);
    long at = 1 + (long)(h / 3 % 9);
    snprintf(path, sizeof path, "%s/p", dir);
    if (save_as(kind, path, n, old) != 0) {
        fail_set(f, FK_SAVE, -1, -1, "saving the old file (kind %d) fails: %s", kind, ot_errmsg());
        return;
    }
    ot__replace_fail_at(at, errs[h / 27 % 3]);
    int rc = save_as(kind, path, n, ts);
    ot__replace_fail_at(0, 0);
    if (rc != 0 && rc != OT_EIO)
        fail_set(f, FK_SAVE, -1, -1, "kind %d, call %ld failed: %d (%s), not OT_EIO", kind, at, rc,
                 ot_errmsg());
    else if (rc != 0 && (!holds(kind, ref_be, path, n, old) || dir_count(dir) != 1))
        fail_set(f, FK_SAVE, -1, -1, "kind %d, call %ld failed: the old file is %s", kind, at,
                 dir_count(dir) != 1 ? "not alone (a temporary left)" : "damaged");
    else if (rc == 0 && !holds(kind, ref_be, path, n, ts))
        fail_set(f, FK_SAVE, -1, -1, "kind %d: the save outran call %ld but holds other values",
                 kind, at);
    if (f->kind) return;
    if (save_as(kind, path, n, ts) != 0 || !holds(kind, ref_be, path, n, ts) || dir_count(dir) != 1)
        fail_set(f, FK_SAVE, -1, -1, "kind %d: a save and load do not round-trip: %s", kind,
                 ot_errmsg());
}

/* The tree's first root (evaluated on ref) and up to three leaves (views
 * as they are) through save_round_trip, over a file of small zero
 * tensors. In /dev/shm where there is one: every save fsyncs, which costs
 * ~10 ms on a disk and nothing on tmpfs. */
static void check_save(const fz_ir *ir, fz_fail *f)
{
    fz_inst in;
    char dir[] = "/dev/shm/ot_fuzz_saveXXXXXX";
    if (access("/dev/shm", W_OK) != 0) memcpy(dir, "/tmp/ot_fuzz_saveXXXXXX", sizeof "/tmp/ot_fuzz_saveXXXXXX");
    if (inst_build(ref_be, ir, NULL, &in) != 0 || !mkdtemp(dir)) {
        inst_free(&in, ir->nl);
        ot_clear_error();
        return;
    }
    const ot_tensor *ts[4], *old[4];
    ot_tensor *made[5] = {0};
    int n = 0;
    made[4] = ot_eval(in.node[ir->roots[0]]);
    if (made[4]) ts[n++] = made[4];
    for (int i = 0; i < ir->nl && n < 4; i++) ts[n++] = in.view[i];
    for (int i = 0; i < n; i++) old[i] = made[i] = ot_zeros(ref_be, OT_SHAPE(i + 1), OT_F64);
    if (n > 0) save_round_trip(dir, n, ts, old, tree_hash(ir), f);
    char path[512];
    snprintf(path, sizeof path, "%s/p", dir);
    unlink(path);
    rmdir(dir);
    for (int i = 0; i < 5; i++) ot_tensor_free(made[i]);
    inst_free(&in, ir->nl);
    ot_clear_error();
}

static void check_pops(const fz_ir *ir, fz_fail *f);

static void check_tree(const fz_ir *ir, fz_fail *f)
{
    if (!ref_be) ref_be = ot_backend_new("ref", NULL);
    if (ir->mode == FUZZ_GRAD) {
        check_grad(ir, f);
    } else {
        check_forward(ir, f);
        if (!f->kind) check_parse(ir, f);
        if (!f->kind) check_save(ir, f);
    }
    if (!f->kind) check_pops(ir, f);
    ot_pool_drain();
}

/* ---- dead nodes: pools popped at random points --------------------------- */

/* The tree is built node by node into a stack of pools that is pushed and
 * popped at random points, with nodes retained and released at random, and
 * between builds a random built node is used (built on, evaluated,
 * printed, retained, released). Whether a node lives is known from a model
 * where it can be (its pool not popped, or retained here: live; neither,
 * and no possibly live parent in the tree: dead); where it cannot (a parent
 * may hold it) ot_node_kind says, and every use must agree: a dead node
 * fails with OT_ESTATE naming where it was built (the fuzzer builds at
 * "fuzz":index) and where it died, never a crash or rc 0; a live one works,
 * its values bitwise those of the same node of an intact build on ref. A
 * node is touched only while it is among the last OT_DEAD_NODES_KEPT
 * released (ot__nodes_released): after that its memory may be reused. */

#define POPS_DEPTH 4

typedef struct pops {
    const fz_ir *ir;
    fz_fail *f;
    rng r;
    fz_inst ref;                  /* the intact build: the oracle */
    ot_node *node[FZ_MAXN];       /* this build's nodes (NULL: not built) */
    int home[FZ_MAXN];            /* the serial of the pool it was built in */
    int held[FZ_MAXN];            /* references this check holds */
    bool doomed[FZ_MAXN];         /* stamp set: it may have died since */
    uint64_t stamp[FZ_MAXN];      /* ot__nodes_released() before that */
    ot_pool *pool[POPS_DEPTH];
    int serial[POPS_DEPTH];       /* each pool's, unique in the check */
    int depth, pushes;            /* pools on the stack, and ever pushed */
    FILE *sink;
} pops;

static bool pops_owned(const pops *p, int k)
{
    if (!p->node[k]) return false;
    for (int i = 0; i < p->depth; i++)
        if (p->serial[i] == p->home[k]) return true;
    return p->held[k] > 0;
}

static void pops_push(pops *p)
{
    p->serial[p->depth] = ++p->pushes;
    p->pool[p->depth++] = ot_pool_push();
}

/* Whether node k may be alive: owned, or read by a node that may be. */
static void pops_maybe(const pops *p, bool *maybe)
{
    for (int k = p->ir->nn - 1; k >= 0; k--) maybe[k] = pops_owned(p, k);
    for (int k = p->ir->nn - 1; k >= 0; k--) {
        const fz_node *n = &p->ir->n[k];
        if (!maybe[k] || n->op < 0) continue;
        if (n->a >= 0) maybe[n->a] = true;
        if (n->b >= 0) maybe[n->b] = true;
    }
}

/* After a pop or release: nodes no longer owned may die from now on. */
static void pops_stamp(pops *p, uint64_t before)
{
    for (int k = 0; k < p->ir->nn; k++)
        if (p->node[k] && !pops_owned(p, k) && !p->doomed[k]) {
            p->doomed[k] = true;
            p->stamp[k] = before;
        }
}

static bool pops_touchable(const pops *p, int k)
{
    if (!p->node[k] || p->ir->n[k].op == FZ_LEAF) return false;
    return pops_owned(p, k) || ot__nodes_released() - p->stamp[k] < OT_DEAD_NODES_KEPT;
}

/* Node k as the model and ot_node_kind see it: 1 live, 0 dead, -1 a
 * contradiction (reported). */
static int pops_state(pops *p, int k, const char *when)
{
    bool maybe[FZ_MAXN];
    pops_maybe(p, maybe);
    bool dead = ot_node_kind(p->node[k]) == OT_NODE_DEAD;
    if ((dead && pops_owned(p, k)) || (!dead && !maybe[k])) {
        fail_set(p->f, FK_DEAD, -1, -1, "%s: node %d is %s but %s", when, k,
                 dead ? "dead" : "alive", dead ? "its pool is live or it is retained"
                                               : "nothing can hold it");
        return -1;
    }
    return !dead;
}

/* The error a use of dead node k must leave: OT_ESTATE naming both sites. */
static void pops_expect_dead(pops *p, int k, const char *use, bool failed)
{
    char built[32];
    snprintf(built, sizeof built, "built at fuzz:%d", k);
    const char *m = ot_errmsg();
    bool named = strstr(m, "is a dead node") && strstr(m, "dropped by ot_") &&
                 (p->ir->n[k].op == FZ_CONST || strstr(m, built));
    if (!failed || ot_errcode() != OT_ESTATE || !named)
        fail_set(p->f, FK_DEAD, -1, -1, "%s of dead node %d: %s, error %d '%.300s'", use, k,
                 failed ? "failed" : "succeeded", ot_errcode(), m);
    ot_clear_error();
}

/* Evaluates node k of this build and of the intact one: same code, and
 * bitwise the same values. */
static void pops_eval(pops *p, int k)
{
    ot_tensor *t = ot_eval(p->node[k]);
    int rc = t ? 0 : ot_errcode();
    ot_clear_error();
    ot_tensor *u = ot_eval(p->ref.node[k]);
    int want = u ? 0 : ot_errcode();
    ot_clear_error();
    int64_t n = 0, m = 0;
    double *v = t ? get_values(t, &n) : NULL, *w = u ? get_values(u, &m) : NULL;
    if (rc != want || n != m || (v && w && memcmp(v, w, (size_t)n * sizeof *v) != 0))
        fail_set(p->f, FK_DEAD, -1, -1, "eval of live node %d: rc %d, intact build rc %d%s", k,
                 rc, want, rc == want ? ", values differ" : "");
    free(v);
    free(w);
    ot_tensor_free(t);
    ot_tensor_free(u);
}

/* ot_assign of node k into a fresh tensor of its shape: 0 or the code. */
static int pops_assign(ot_node *n)
{
    ot_tensor *out = ot_empty(ref_be, ot_node_shape(n), ot_node_dtype(n));
    int rc = out ? ot_assign(out, n) : -1000;
    ot_tensor_free(out);
    return rc;
}

/* One use of node k, live or dead. */
static void pops_use(pops *p, int k)
{
    int live = pops_state(p, k, "use");
    if (live < 0) return;
    ot_node *n = p->node[k];
    switch (rnd(&p->r, 6)) {
    case 0:
        if (live) pops_eval(p, k);
        else pops_expect_dead(p, k, "ot_eval", ot_eval(n) == NULL);
        break;
    case 1: {
        /* In a pool of its own, popped at once: a cast left in the
         * innermost pool would hold n there, a holder the model does not
         * know (seed 909 tree 9206: n retained, cast, released, then "alive
         * but nothing can hold it"). */
        ot_pool *own = ot_pool_push();
        ot_node *c = ot_cast(n, .dtype = OT_F64);
        if (!live) pops_expect_dead(p, k, "a builder", c == NULL);
        else if (!c) fail_set(p->f, FK_DEAD, -1, -1, "cast of live node %d: %s", k, ot_errmsg());
        ot_pool_pop(own);
        break;
    }
    case 2: {
        int rc = ot_pp(n, p->sink);
        if (!live) pops_expect_dead(p, k, "ot_pp", rc != 0);
        else if (rc) fail_set(p->f, FK_DEAD, -1, -1, "ot_pp of live node %d: %s", k, ot_errmsg());
        break;
    }
    case 3:
        if (!live) {
            pops_expect_dead(p, k, "ot_retain", ot_retain(n) == NULL);
        } else if (ot_retain(n) == n) {
            p->held[k]++;
        }
        break;
    case 4:
        if (!live) {
            ot_release(n);
            pops_expect_dead(p, k, "ot_release", true);
        }
        break;
    default:
        if (!live) pops_expect_dead(p, k, "ot_assign", pops_assign(n) != 0);
    }
}

/* Builds node k in the innermost pool; a dead operand makes it fail. */
static void pops_build(pops *p, int k)
{
    const fz_node *n = &p->ir->n[k];
    int dead_operand = -1;
    bool missing = false;
    for (int i = 0; n->op >= 0 && i < 2; i++) {
        int o = i ? n->b : n->a;
        if (o < 0 || p->ir->n[o].op == FZ_LEAF) continue;
        if (!pops_touchable(p, o)) return;   /* dead long ago, or never built */
        int live = pops_state(p, o, "build");
        if (live < 0) return;
        if (!live && dead_operand < 0) dead_operand = o;   /* operand 1 is named first */
    }
    for (int i = 0; n->op >= 0 && i < 2; i++) {
        int o = i ? n->b : n->a;
        if (o >= 0 && !p->node[o]) missing = true;
    }
    fz_inst view = {0};
    memcpy(view.view, p->ref.view, sizeof view.view);
    memcpy(view.node, p->node, sizeof view.node);
    p->node[k] = node_build(p->ir, &view, k);
    p->home[k] = p->serial[p->depth - 1];
    if (dead_operand >= 0 && !missing) pops_expect_dead(p, dead_operand, "a build", !p->node[k]);
    else if (!missing && !p->node[k])
        fail_set(p->f, FK_DEAD, -1, -1, "build of node %d over live operands: %s", k, ot_errmsg());
    else if (missing && p->node[k])
        fail_set(p->f, FK_DEAD, -1, -1, "build of node %d over a NULL operand succeeded", k);
    ot_clear_error();
}

static void pops_pop(pops *p, int level)
{
    uint64_t before = ot__nodes_released();
    ot_pool_pop(p->pool[level]);
    p->depth = level;
    pops_stamp(p, before);
}

static void pops_release(pops *p, int k)
{
    uint64_t before = ot__nodes_released();
    ot_release(p->node[k]);
    p->held[k]--;
    pops_stamp(p, before);
}

/* A random event between two builds. */
static void pops_event(pops *p)
{
    int e = rnd(&p->r, 100), k = rnd(&p->r, p->ir->nn);
    if (e < 20 && p->depth < POPS_DEPTH) {
        pops_push(p);
    } else if (e < 35 && p->depth > 1) {
        pops_pop(p, 1 + rnd(&p->r, p->depth - 1));
    } else if (e < 45 && p->held[k] > 0) {
        pops_release(p, k);
    } else if (e < 80 && pops_touchable(p, k)) {
        pops_use(p, k);
    }
}

static void check_pops(const fz_ir *ir, fz_fail *f)
{
    pops *p = calloc(1, sizeof *p);
    p->ir = ir;
    p->f = f;
    p->r.s = ir->pops_seed;
    p->sink = fopen("/dev/null", "w");
    if (inst_build(ref_be, ir, NULL, &p->ref) == 0 && p->sink) {
        pops_push(p);
        for (int k = 0; k < ir->nn && !f->kind; k++) {
            for (int e = rnd(&p->r, 4); e > 0 && !f->kind; e--) pops_event(p);
            pops_build(p, k);
        }
        for (int k = 0; k < ir->nn; k++)   /* let go: then everything dies */
            while (p->held[k] > 0 && !f->kind) pops_release(p, k);
        if (p->depth) pops_pop(p, 0);
        for (int k = 0; k < ir->nn && !f->kind; k++)
            if (pops_touchable(p, k) && pops_state(p, k, "at the end") == 0)
                pops_expect_dead(p, k, "ot_assign", pops_assign(p->node[k]) != 0);
    }
    for (int k = 0; k < ir->nn; k++)
        while (p->held[k] > 0) pops_release(p, k);
    if (p->depth) ot_pool_pop(p->pool[0]);
    inst_free(&p->ref, ir->nl);
    if (p->sink) fclose(p->sink);
    free(p);
    ot_clear_error();
}

/* ---- isolation ----------------------------------------------------------- */

/* Runs job(ctx, res, in_child), in a forked child when do_fork (its
 * stderr to /dev/null when quiet), where res is `size` bytes of memory the
 * child shares with this process, copied into res at the end. Returns the
 * child's wait status; 0 where the job ran here (no fork asked, or the
 * shared memory or the fork failed). */
static int isolate(void (*job)(const void *ctx, void *res, int in_child), const void *ctx,
                   void *res, size_t size, int do_fork, int quiet)
{
    void *sh = do_fork ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                       : MAP_FAILED;
    if (sh == MAP_FAILED) {
        job(ctx, res, 0);
        return 0;
    }
    memcpy(sh, res, size);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (quiet) {
            FILE *devnull = freopen("/dev/null", "w", stderr);
            (void)devnull;
        }
        job(ctx, sh, 1);
        _exit(0);
    }
    int st = 0;
    if (pid < 0) job(ctx, sh, 0);
    else while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    memcpy(res, sh, size);
    munmap(sh, size);
    return st;
}

/* A job's end: a child that died (status st) without reporting a failure
 * crashed. */
static void check_exit(fz_fail *f, int st)
{
    if (f->kind || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) return;
    f->kind = FK_CRASH;
    f->cfg[0] = f->cfg[1] = -1;
    if (WIFSIGNALED(st))
        snprintf(f->msg, sizeof f->msg, "killed by signal %d (%s)%s", WTERMSIG(st),
                 strsignal(WTERMSIG(st)), WTERMSIG(st) == SIGALRM ? ": a hang (60 s)" : "");
    else
        snprintf(f->msg, sizeof f->msg, "exit status %d (a sanitizer report?)", WEXITSTATUS(st));
}

static void tree_job(const void *ir, void *f, int in_child)
{
    if (in_child) alarm(60);
    check_tree(ir, f);
}

/* Checks ir, in a forked child when asked (a crash or a hang is a failure). */
static void run_isolated(const fz_ir *ir, fz_fail *f, int do_fork, int quiet)
{
    memset(f, 0, sizeof *f);
    check_exit(f, isolate(tree_job, ir, f, sizeof *f, do_fork, quiet));
}

/* ---- drawing a tree ------------------------------------------------------ */

static void draw_tree(uint64_t seed, int64_t i, int modes, int all_configs, fz_ir *ir)
{
    rng r = {seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)i * 0xd1b54a32d192ed03ull)};
    next_u64(&r);
    int mode;
    do {
        int p = rnd(&r, 100);
        mode = p < 60 ? FUZZ_FORWARD : p < 85 ? FUZZ_GRAD : FUZZ_MANY;
    } while (!(modes & mode));
    fz_half = (modes & FUZZ_HALF) && mode != FUZZ_GRAD;
    generate(ir, &r, mode);
    fz_half = 0;
    ir->ncfg = 0;
    if (all_configs) {
        for (int c = 0; c < NCFG; c++) ir->cfg[ir->ncfg++] = c;
    } else if (mode == FUZZ_GRAD) {
        ir->cfg[ir->ncfg++] = rnd(&r, 32);
        ir->cfg[ir->ncfg++] = FUSION_OFF;
    } else {
        int base = rnd(&r, 8) * 4;  /* an ISA and accuracy: JIT x threads */
        for (int c = 0; c < 4; c++) ir->cfg[ir->ncfg++] = base + c;
        ir->cfg[ir->ncfg++] = FUSION_OFF;
    }
    ir->pops_seed = next_u64(&r);   /* last: the draws above stay as they were */
}

/* ---- shrinking ----------------------------------------------------------- */

/* Drops nodes and leaves the roots do not reach, renumbering the rest. */
static void ir_gc(fz_ir *ir)
{
    int keep[FZ_MAXN] = {0}, lkeep[FZ_MAXL] = {0}, nmap[FZ_MAXN], lmap[FZ_MAXL];
    for (int i = 0; i < ir->nroots; i++) keep[ir->roots[i]] = 1;
    for (int k = ir->nn - 1; k >= 0; k--) {
        if (!keep[k]) continue;
        if (ir->n[k].a >= 0) keep[ir->n[k].a] = 1;
        if (ir->n[k].b >= 0) keep[ir->n[k].b] = 1;
        if (ir->n[k].op == FZ_LEAF) lkeep[ir->n[k].leaf] = 1;
    }
    if (ir->ne >= 0) lkeep[ir->ne] = 1;
    for (int i = 0; i < ir->nroots; i++)
        if (ir->out_kind[i] == OUT_LEAF) lkeep[ir->out_leaf[i]] = 1;
    int nl = 0;
    for (int i = 0; i < ir->nl; i++) {
        if (!lkeep[i]) {
            free(ir->l[i].data);
            continue;
        }
        lmap[i] = nl;
        ir->l[nl++] = ir->l[i];
    }
    ir->nl = nl;
    int nn = 0;
    for (int k = 0; k < ir->nn; k++) {
        if (!keep[k]) continue;
        nmap[k] = nn;
        fz_node n = ir->n[k];
        if (n.a >= 0) n.a = nmap[n.a];
        if (n.b >= 0) n.b = nmap[n.b];
        if (n.op == FZ_LEAF) n.leaf = lmap[n.leaf];
        ir->n[nn++] = n;
    }
    ir->nn = nn;
    for (int i = 0; i < ir->nroots; i++) {
        ir->roots[i] = nmap[ir->roots[i]];
        if (ir->out_kind[i] == OUT_LEAF) ir->out_leaf[i] = lmap[ir->out_leaf[i]];
    }
    if (ir->ne >= 0) ir->ne = lmap[ir->ne];
}

typedef struct shrinker {
    int kind, fork, budget;
    fz_ir *ir;
} shrinker;

/* Keeps cand (consumed) when it still fails the same way. */
static int try_cand(shrinker *s, fz_ir *cand)
{
    if (s->budget-- <= 0) {
        ir_free(cand);
        return 0;
    }
    ir_gc(cand);
    fz_fail f;
    run_isolated(cand, &f, s->fork, 1);
    if (f.kind == s->kind) {
        ir_free(s->ir);
        *s->ir = *cand;
        return 1;
    }
    ir_free(cand);
    return 0;
}

/* Node k's value on ref, as a plain leaf in cand. */
static int value_leaf(fz_ir *cand, int k)
{
    if (cand->nl >= FZ_MAXL) return 0;
    fz_inst in;
    int ok = 0;
    if (inst_build(ref_be, cand, NULL, &in) == 0) {
        ot_tensor *t = ot_eval(in.node[k]);
        int64_t n;
        double *v = t ? get_values(t, &n) : NULL;
        if (v) {
            fz_leaf *l = &cand->l[cand->nl];
            memset(l, 0, sizeof *l);
            l->dtype = ot_tensor_dtype(t);
            l->base = ot_tensor_shape(t);
            l->data = v;
            cand->n[k] = (fz_node){.op = FZ_LEAF, .a = -1, .b = -1, .leaf = cand->nl++};
            ok = 1;
        }
        ot_tensor_free(t);
    }
    inst_free(&in, cand->nl - ok);
    ot_clear_error();
    return ok;
}

/* Keeps elements start .. start+len-1 along dim d of a plain leaf. */
static void sub_block(fz_leaf *l, int d, int64_t start, int64_t len)
{
    int64_t outer = 1, inner = 1, D = l->base.dims[d];
    for (int i = 0; i < d; i++) outer *= l->base.dims[i];
    for (int i = d + 1; i < l->base.ndim; i++) inner *= l->base.dims[i];
    int64_t n = outer * len * inner;
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t o = 0; o < outer; o++)
        memcpy(v + o * len * inner, l->data + (o * D + start) * inner, (size_t)(len * inner) * sizeof(double));
    free(l->data);
    l->data = v;
    l->base.dims[d] = len;
}

static void shrink(fz_ir *ir, int kind, int do_fork, int budget)
{
    shrinker s = {kind, do_fork, budget, ir};
    fz_ir c;
    for (int progress = 1; progress && s.budget > 0;) {
        progress = 0;
        for (int j = ir->ncfg - 1; j >= 0 && ir->ncfg > 1; j--) {
            ir_copy(&c, ir);
            memmove(&c.cfg[j], &c.cfg[j + 1], (size_t)(c.ncfg - j - 1) * sizeof c.cfg[0]);
            c.ncfg--;
            progress |= try_cand(&s, &c);
        }
        for (int i = ir->nroots - 1; i >= 1; i--) {
            ir_copy(&c, ir);
            memmove(&c.roots[i], &c.roots[i + 1], (size_t)(c.nroots - i - 1) * sizeof(int));
            memmove(&c.out_kind[i], &c.out_kind[i + 1], (size_t)(c.nroots - i - 1) * sizeof(int));
            memmove(&c.out_leaf[i], &c.out_leaf[i + 1], (size_t)(c.nroots - i - 1) * sizeof(int));
            memmove(&c.out_dtype[i], &c.out_dtype[i + 1], (size_t)(c.nroots - i - 1) * sizeof(ot_dtype));
            c.nroots--;
            progress |= try_cand(&s, &c);
        }
        for (int k = ir->nn - 1; k >= 0; k--) {
            if (k >= ir->nn || ir->n[k].op < 0) continue;
            for (int side = 0; side < 2; side++) {
                int ch = side ? ir->n[k].b : ir->n[k].a;
                if (ch < 0) continue;
                ir_copy(&c, ir);
                c.n[k] = c.n[ch];
                if (try_cand(&s, &c)) { progress = 1; break; }
            }
            if (k >= ir->nn || ir->n[k].op < 0) continue;
            ir_copy(&c, ir);
            if (value_leaf(&c, k)) progress |= try_cand(&s, &c);
            else ir_free(&c);
        }
        for (int i = 0; i < ir->nroots; i++) {
            if (ir->out_kind[i] == OUT_FRESH && ir->out_dtype[i] == OT_DTYPE_DEFAULT) continue;
            if (ir->out_kind[i] != OUT_FRESH) {
                ir_copy(&c, ir);
                c.out_kind[i] = OUT_FRESH;
                progress |= try_cand(&s, &c);
            }
        }
        if (ir->ne >= 0) {
            ir_copy(&c, ir);
            c.ne = -1;
            progress |= try_cand(&s, &c);
        }
        for (int li = 0; li < ir->nl; li++) {
            if (ir->l[li].view != V_NONE) {  /* the view's values in a plain leaf */
                ir_copy(&c, ir);
                fz_inst tmp;
                memset(&tmp, 0, sizeof tmp);
                int64_t n;
                double *v = NULL;
                if (leaf_inst(ref_be, &c.l[li], NULL, &tmp, 0) == 0) v = get_values(tmp.view[0], &n);
                ot_shape vs = tmp.view[0] ? ot_tensor_shape(tmp.view[0]) : (ot_shape){0};
                inst_free(&tmp, 1);
                if (v) {
                    free(c.l[li].data);
                    c.l[li].data = v;
                    c.l[li].base = vs;
                    c.l[li].view = V_NONE;
                    progress |= try_cand(&s, &c);
                } else {
                    ir_free(&c);
                }
            }
            int64_t n = numel(&ir->l[li].base);
            static const double simple[] = {0, 1, -1, 2};
            for (int form = 0; form < 3; form++) {  /* every element simpler at once */
                ir_copy(&c, ir);
                int changed = 0;
                for (int64_t e = 0; e < n; e++) {
                    double x = c.l[li].data[e], y = form == 0 ? 0 : form == 1 ? 1 : round(x * 4) / 4;
                    changed |= x != y && !(isnan(x) && isnan(y));
                    c.l[li].data[e] = y;
                }
                if (changed && try_cand(&s, &c)) { progress = 1; break; }
                if (!changed) ir_free(&c);
            }
            for (int64_t e = 0; e < n && n <= 64; e++) {
                for (int q = 0; q < 4; q++) {
                    double x = ir->l[li].data[e];
                    if (x == simple[q] || (q > 0 && fabs(x) < 2 && x == round(x))) break;
                    ir_copy(&c, ir);
                    c.l[li].data[e] = simple[q];
                    if (try_cand(&s, &c)) { progress = 1; break; }
                }
            }
        }
        for (int k = 0; k < ir->nn; k++) {  /* attributes the op does not need */
            if (ir->n[k].op < 0) continue;
            for (int field = 0; field < 9; field++) {
                ir_copy(&c, ir);
                ot_args *a = &c.n[k].args, z;
                memset(&z, 0, sizeof z);
                int changed = 1;
                switch (field) {
                case 0: changed = a->keepdims; a->keepdims = 0; break;
                case 1: changed = a->dtype != 0; a->dtype = 0; break;
                case 2: changed = a->depth != 0; a->depth = 0; break;
                case 3: changed = a->seed != 0; a->seed = 0; break;
                case 4: changed = a->ddof != 0; a->ddof = 0; break;
                case 5: changed = a->lo != 0 || a->hi != 0; a->lo = a->hi = 0; break;
                case 6: changed = memcmp(a->perm, z.perm, sizeof z.perm) != 0;
                        memset(a->perm, 0, sizeof a->perm); break;
                case 7: changed = a->shape.ndim != 0; a->shape = z.shape; break;
                default: changed = a->axis != OT_AXIS_ALL; a->axis = OT_AXIS_ALL; break;
                }
                if (changed) progress |= try_cand(&s, &c);
                else ir_free(&c);
            }
        }
        for (int li = 0; li < ir->nl; li++) {  /* smaller leaves: one dim halved, in every plain leaf */
            if (ir->l[li].view != V_NONE) continue;
            for (int d = 0; d < ir->l[li].base.ndim; d++) {
                int64_t D = ir->l[li].base.dims[d];
                if (D < 2) continue;
                for (int half = 0; half < 3; half++) {
                    ir_copy(&c, ir);
                    for (int lj = 0; lj < c.nl; lj++) {
                        fz_leaf *l = &c.l[lj];
                        if (l->view != V_NONE || l->base.ndim <= d || l->base.dims[d] != D) continue;
                        int64_t len = half == 2 ? 1 : D / 2, start = half == 1 ? D - len : 0;
                        sub_block(l, d, start, len);
                    }
                    if (try_cand(&s, &c)) { progress = 1; break; }
                }
                if (d >= ir->l[li].base.ndim || ir->l[li].view != V_NONE) break;
            }
        }
        for (int k = 0; k < ir->nn; k++) {
            if (ir->n[k].op != FZ_CONST || ir->n[k].cval == 0 || ir->n[k].cval == 1) continue;
            ir_copy(&c, ir);
            c.n[k].cval = 1;
            progress |= try_cand(&s, &c);
        }
    }
}

/* ---- reporting ----------------------------------------------------------- */

static const char *dt_enum(ot_dtype d)
{
    return d == OT_F32 ? "OT_F32" : d == OT_F64 ? "OT_F64" : d == OT_I32 ? "OT_I32" : d == OT_F16 ? "OT_F16"
         : d == OT_BF16 ? "OT_BF16" : "OT_DTYPE_DEFAULT";
}
/* The C type of a leaf's host data: ot_array takes a 16-bit float's as
 * float (to_host), so a reproducer writes those as float too (it wrote
 * int32_t, which turned -inf into INT_MIN: seed 3030 tree 12527). */
static const char *dt_ctype(ot_dtype d)
{
    return d == OT_F32 || is_half(d) ? "float" : d == OT_F64 ? "double" : "int32_t";
}

static void put_shape(FILE *o, ot_shape s)
{
    fputs("OT_SHAPE(", o);
    for (int i = 0; i < s.ndim; i++) fprintf(o, "%s%lld", i ? ", " : "", (long long)s.dims[i]);
    fputc(')', o);
}

static void put_num(FILE *o, double v, ot_dtype dt)
{
    if (isnan(v)) fputs("NAN", o);
    else if (isinf(v)) fputs(v > 0 ? "INFINITY" : "-INFINITY", o);
    else if (dt == OT_I32) fprintf(o, "%d", (int)v);
    else if (dt == OT_F32 || is_half(dt)) {
        char b[48];
        snprintf(b, sizeof b, "%.9g", (float)v);
        fprintf(o, "%s%sf", b, strpbrk(b, ".e") ? "" : ".0");
    }
    else fprintf(o, "%.17g", v);
}

static void put_idx(FILE *o, int64_t v)
{
    if (v == OT_NONE) fputs("OT_NONE", o);
    else fprintf(o, "%lld", (long long)v);
}

/* ", .win = {...}": the window of conv, pooling and attention (whose
 * geometry it carries), every member that is set; nothing when none is. */
static void put_win(FILE *o, const ot_window *w)
{
    static const char *const names[6] = {"stride", "dilation", "pad_lo", "pad_hi", "outpad", "ksize"};
    const int32_t *v[6] = {w->stride, w->dilation, w->pad_lo, w->pad_hi, w->outpad, w->ksize};
    bool any = w->groups || w->ceil_mode || w->exclude_pad;
    for (int i = 0; i < 6; i++) any |= v[i][0] || v[i][1] || v[i][2];
    if (!any) return;
    fprintf(o, ", .win = {.groups = %d", w->groups);
    for (int i = 0; i < 6; i++)
        if (v[i][0] || v[i][1] || v[i][2])
            fprintf(o, ", .%s = {%d, %d, %d}", names[i], (int)v[i][0], (int)v[i][1], (int)v[i][2]);
    if (w->ceil_mode) fputs(", .ceil_mode = true", o);
    if (w->exclude_pad) fputs(", .exclude_pad = true", o);
    fputc('}', o);
}

static void put_args(FILE *o, const ot_args *a)
{
    fprintf(o, "&(ot_args){.axis = ");
    if (a->axis == OT_AXIS_ALL) fputs("OT_AXIS_ALL", o);
    else fprintf(o, "%d", a->axis);
    if (a->keepdims) fputs(", .keepdims = true", o);
    if (a->dtype) fprintf(o, ", .dtype = %s", dt_enum(a->dtype));
    if (a->depth) fprintf(o, ", .depth = %lld", (long long)a->depth);
    if (a->seed) fprintf(o, ", .seed = %llu", (unsigned long long)a->seed);
    if (a->ddof) fprintf(o, ", .ddof = %d", a->ddof);
    if (a->lo != 0) fprintf(o, ", .lo = %.17g", a->lo);
    if (a->hi != 0) fprintf(o, ", .hi = %.17g", a->hi);
    int any = 0;
    for (int i = 0; i < OT_MAX_DIMS; i++) any |= a->perm[i];
    if (any) {
        fputs(", .perm = {", o);
        for (int i = 0; i < OT_MAX_DIMS; i++) fprintf(o, "%s%d", i ? ", " : "", a->perm[i]);
        fputc('}', o);
    }
    if (a->shape.ndim) {
        fputs(", .shape = ", o);
        put_shape(o, a->shape);
    }
    any = 0;
    for (int i = 0; i < OT_MAX_DIMS; i++) any |= a->start[i] != 0;
    if (any) {
        fputs(", .start = {", o);
        for (int i = 0; i < OT_MAX_DIMS; i++) fprintf(o, "%s%lld", i ? ", " : "", (long long)a->start[i]);
        fputc('}', o);
    }
    put_win(o, &a->win);
    fputc('}', o);
}

/* Whether the tree has a registered op (its reproducer registers them). */
static bool uses_user_ops(const fz_ir *ir)
{
    for (int k = 0; k < ir->nn; k++)
        if (ir->n[k].op >= OT_OP_COUNT) return true;
    return false;
}

static void op_enum(char *buf, size_t n, int op)
{
    snprintf(buf, n, "OT_OP_%s", ot_op_name((ot_op)op));
    for (char *p = buf; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
}

/* The body of run(): builds the tree on be, assigns or backprops, prints. */
static void put_body(FILE *o, const fz_ir *ir)
{
    for (int i = 0; i < ir->nl; i++) {
        const fz_leaf *l = &ir->l[i];
        int64_t n = numel(&l->base);
        fprintf(o, "    ot_tensor *b%d = ot_array(be, ", i);
        put_shape(o, l->base);
        fprintf(o, ", %s, (%s[]){", dt_enum(l->dtype), dt_ctype(l->dtype));
        for (int64_t e = 0; e < n; e++) {
            if (e) fputs(e % 8 ? ", " : ",\n        ", o);
            put_num(o, l->data[e], l->dtype);
        }
        if (!n) fputc('0', o);
        fputs("});\n", o);
        fprintf(o, "    ot_tensor *t%d = ", i);
        switch (l->view) {
        case V_SLICE:
            /* in parentheses: ot_slice_n is a macro, whose arguments a
             * compound literal's commas would split */
            fprintf(o, "ot_slice_n(b%d, %d, ((ot_index[]){", i, l->nidx);
            for (int d = 0; d < l->nidx; d++) {
                fprintf(o, "%s{%d, ", d ? ", " : "", l->idx[d].kind);
                put_idx(o, l->idx[d].start);
                fputs(", ", o);
                put_idx(o, l->idx[d].stop);
                fprintf(o, ", %lld}", (long long)l->idx[d].step);
            }
            fputs("}));\n", o);
            break;
        case V_T:
            fprintf(o, "ot_transpose(b%d, (int[]){", i);
            for (int d = 0; d < l->base.ndim; d++) fprintf(o, "%s%d", d ? ", " : "", l->perm[d]);
            fputs("});\n", o);
            break;
        case V_BCAST:
        case V_RESHAPE:
            fprintf(o, "%s(b%d, ", l->view == V_BCAST ? "ot_broadcast_to" : "ot_reshape", i);
            put_shape(o, l->to);
            fputs(");\n", o);
            break;
        default: fprintf(o, "b%d;\n", i);
        }
        fprintf(o, "    ot_tensor_set_name(t%d, \"t%d\");\n", i, i);
    }
    char name[64];
    for (int k = 0; k < ir->nn; k++) {
        const fz_node *n = &ir->n[k];
        fprintf(o, "    ot_node *n%d = ", k);
        if (n->op == FZ_LEAF) {
            fprintf(o, "ot_tensor_node(t%d);\n", n->leaf);
        } else if (n->op == FZ_CONST) {
            fprintf(o, "%s(", n->ckind == 1 ? "ot_constf" : n->ckind == 2 ? "ot_consti" : "ot_const");
            put_num(o, n->cval, n->ckind == 1 ? OT_F32 : n->ckind == 2 ? OT_I32 : OT_F64);
            fputs(");\n", o);
        } else {
            if (n->op >= OT_OP_COUNT)
                snprintf(name, sizeof name, "ot_op_lookup(\"%s\")", ot_op_name((ot_op)n->op));
            else
                op_enum(name, sizeof name, n->op);
            fprintf(o, "ot_build(%s, ", name);
            if (n->a >= 0) fprintf(o, "n%d, ", n->a); else fputs("NULL, ", o);
            if (n->b >= 0) fprintf(o, "n%d, ", n->b); else fputs("NULL, ", o);
            fputc('(', o);  /* the braces of .perm hold commas the macro would split */
            put_args(o, &n->args);
            fputs("));\n", o);
        }
    }
    fprintf(o, "    if (!n%d) { printf(\"build: %%s\\n\", ot_errmsg()); return; }\n", ir->roots[0]);
    if (ir->mode == FUZZ_GRAD) {
        int nw = 0;
        fprintf(o, "    ot_autodiff *ad = ot_autodiff_new(n%d, ", ir->roots[0]);
        if (ir->ne >= 0) fprintf(o, "ot_tensor_node(t%d));\n", ir->ne); else fputs("NULL);\n", o);
        fputs("    if (!ad) { printf(\"autodiff: %s\\n\", ot_errmsg()); return; }\n", o);
        fputs("    ot_tensor *wrt[] = {", o);
        for (int i = 0; i < ir->nl; i++)
            if (i != ir->ne) fprintf(o, "%st%d", nw++ ? ", " : "", i);
        fputs("};\n    ot_tensor *g[] = {", o);
        for (int i = 0, j = 0; i < ir->nl; i++)
            if (i != ir->ne) fprintf(o, "%sot_zeros_like(t%d)", j++ ? ", " : "", i);
        fprintf(o, "};\n    int rc = ot_autodiff_backprop(ad, %d, wrt, g);\n", nw);
        fputs("    printf(\"backprop: %d %s\\n\", rc, ot_errmsg());\n", o);
        fprintf(o, "    for (int i = 0; !rc && i < %d; i++) show(\"grad\", g[i]);\n", nw);
        fputs("    ot_autodiff_free(ad);\n", o);
    } else {
        fputs("    ot_tensor *outs[3], *whole[3];\n    ot_node *trees[3];\n", o);
        for (int i = 0; i < ir->nroots; i++) {
            fprintf(o, "    trees[%d] = n%d;\n", i, ir->roots[i]);
            switch (ir->out_kind[i]) {
            case OUT_LEAF:
                fprintf(o, "    outs[%d] = t%d; whole[%d] = b%d;  /* in place */\n", i,
                        ir->out_leaf[i], i, ir->out_leaf[i]);
                break;
            case OUT_SAME:
                fprintf(o, "    outs[%d] = outs[0]; whole[%d] = whole[0];  /* overlapping outputs */\n", i, i);
                break;
            case OUT_STRIDED:
                fprintf(o, "    {   /* a strided view of a larger buffer (dims 2d+1, odd dims [1::2], even [-2::-2]) */\n"
                           "        ot_shape s = ot_node_shape(n%d), bs = s;\n"
                           "        ot_index idx[OT_MAX_DIMS];\n"
                           "        for (int d = 0; d < s.ndim; d++) {\n"
                           "            bs.dims[d] = 2 * s.dims[d] + 1;\n"
                           "            idx[d] = d %% 2 ? (ot_index){OT_INDEX_RANGE, 1, OT_NONE, 2}\n"
                           "                           : (ot_index){OT_INDEX_RANGE, -2, OT_NONE, -2};\n"
                           "        }\n"
                           "        whole[%d] = ot_full(be, bs, %s, 7777.25);\n"
                           "        outs[%d] = ot_slice_n(whole[%d], s.ndim, idx);\n    }\n",
                        ir->roots[i], i, dt_enum(ir->out_dtype[i]), i, i);
                break;
            case OUT_BCAST:
                fprintf(o, "    {   /* the tree broadcast along a new leading dim of 2 */\n"
                           "        ot_shape s = ot_node_shape(n%d), bs = s;\n"
                           "        bs.ndim++;\n        bs.dims[0] = 2;\n"
                           "        for (int d = 0; d < s.ndim; d++) bs.dims[d + 1] = s.dims[d];\n"
                           "        outs[%d] = whole[%d] = ot_full(be, bs, %s, 7777.25);\n    }\n",
                        ir->roots[i], i, i, dt_enum(ir->out_dtype[i]));
                break;
            default:
                fprintf(o, "    outs[%d] = whole[%d] = ot_full(be, ot_node_shape(n%d), %s, 7777.25);\n",
                        i, i, ir->roots[i], dt_enum(ir->out_dtype[i]));
            }
        }
        if (ir->mode == FUZZ_MANY)
            fprintf(o, "    int rc = ot_assign_many(%d, outs, trees);\n", ir->nroots);
        else
            fputs("    int rc = ot_assign_node(outs[0], trees[0]);\n", o);
        fputs("    printf(\"assign: %d %s\\n\", rc, ot_errmsg());\n", o);
        fprintf(o, "    for (int i = 0; !rc && i < %d; i++) show(\"out\", whole[i]);\n", ir->nroots);
    }
}

static void put_snippet(FILE *o, const fz_ir *ir, const fz_fail *f, uint64_t seed, int64_t idx)
{
    fprintf(o, "/* optree fuzz finding: seed %llu tree %lld (make fuzz SEED=%llu FIRST=%lld N=1)\n"
               " * %s: %s\n * area guess: %s\n",
            (unsigned long long)seed, (long long)idx, (unsigned long long)seed, (long long)idx,
            fail_names[f->kind], f->msg, fail_area[f->kind]);
    fz_inst in;
    if (inst_build(ref_be, ir, NULL, &in) == 0) {
        for (int i = 0; i < ir->nl; i++) {
            char nm[16];
            snprintf(nm, sizeof nm, "t%d", i);
            ot_tensor_set_name(in.view[i], nm);
        }
        for (int i = 0; i < ir->nroots; i++) {
            fputs(" * tree: ", o);
            ot_pp(in.node[ir->roots[i]], o);
            fputc('\n', o);
        }
    }
    inst_free(&in, ir->nl);
    ot_clear_error();
    fputs(" * Expected: every backend below prints the same values as ref (within rounding;\n"
          " * bitwise between thread counts and between OT_JIT=0 and 1) and the same return codes.\n"
          " * cc -std=c11 -Iinclude -I. this.c build/liboptree.a -lsleef -lopenblas -lm -lpthread\n */\n"
          "#define _POSIX_C_SOURCE 200809L\n#include \"optree.h\"\n", o);
    if (uses_user_ops(ir)) fputs("#include \"examples/custom_ops.h\"\n#include \"examples/cumsum_op.h\"\n", o);
    fputs("\n"
          "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n"
          "static void show(const char *what, const ot_tensor *t)\n{\n"
          "    int64_t n = ot_tensor_numel(t);\n"
          "    ot_tensor *d = ot_copy(t);\n"
          "    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);\n"
          "    ot_tensor *w = ot_empty(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);\n"
          "    ot_assign(w, ot_cast(d, .dtype = OT_F64));\n"
          "    ot_get(w, v);\n"
          "    printf(\"%s:\", what);\n"
          "    for (int64_t i = 0; i < n; i++) printf(\" %.17g\", v[i]);\n"
          "    printf(\"\\n\");\n"
          "    free(v);\n    ot_tensor_free(w);\n    ot_tensor_free(d);\n}\n\n"
          "static void run(ot_backend *be, const char *name)\n{\n"
          "    printf(\"== %s\\n\", name);\n", o);
    put_body(o, ir);
    fputs("}\n\nint main(void)\n{\n    setvbuf(stdout, NULL, _IONBF, 0);\n    ot_pool_push();\n", o);
    if (uses_user_ops(ir))
        fputs("    ot_op_def user[3] = {gelu_def(), softsign_def(), huber_def()};\n"
              "    for (int i = 0; i < 3; i++) ot_op_register(&user[i]);\n"
              "    ot_op cumsum, rcumsum;\n"
              "    cumsum_register(&cumsum, &rcumsum);\n", o);
    fputs("    run(ot_backend_new(\"ref\", NULL), \"ref\");\n", o);
    char nm[96];
    for (int j = 0; j < ir->ncfg; j++) {
        int c = ir->cfg[j];
        cfg_name(c, nm, sizeof nm);
        if (c == FUSION_OFF) {
            fputs("    run(ot_backend_new(\"cpu\", &(ot_backend_opts){.threads = 1, .fusion = OT_FUSION_OFF}),", o);
        } else {
            fprintf(o, "    setenv(\"OT_ISA\", \"%s\", 1);\n    setenv(\"OT_JIT\", \"%d\", 1);\n",
                    CFG_ISA(c), CFG_JIT(c));
            if (CFG_FAST(c)) fputs("    setenv(\"OT_STREAM_BYTES\", \"64\", 1);\n", o);
            else fputs("    unsetenv(\"OT_STREAM_BYTES\");\n", o);
            fprintf(o, "    run(ot_backend_new(\"cpu\", &(ot_backend_opts){.threads = %d%s}),",
                    CFG_THREADS(c), CFG_FAST(c) ? ", .accuracy = OT_ULP35" : "");
        }
        fprintf(o, " \"%s\");\n", nm);
    }
    fputs("    return 0;\n}\n", o);
}

/* What a shrunk failure is about: its kind and the ops left, sorted, so one
 * bug found many times is written out a few times only. */
static void signature(const fz_ir *ir, const fz_fail *f, char *buf, size_t n)
{
    int count[OT_OP_COUNT] = {0};
    for (int k = 0; k < ir->nn; k++) {
        int op = ir->n[k].op;   /* a registered op counts as its placeholder row */
        if (op >= OT_OP_COUNT)
            op = ot_op_kind((ot_op)op) == OT_KIND_SPECIAL ? OT_OP_CUSTOM_STRUCT
               : ot_op_arity((ot_op)op) == 1            ? OT_OP_CUSTOM1
                                                        : OT_OP_CUSTOM2;
        if (op >= 0) count[op]++;
    }
    size_t len = (size_t)snprintf(buf, n, "%s%s", fail_names[f->kind],
                                  f->kind == FK_CRASH ? strchr(f->msg, '(') ? strchr(f->msg, '(') : "" : "");
    for (int op = 0; op < OT_OP_COUNT && len < n; op++)
        if (count[op]) len += (size_t)snprintf(buf + len, n - len, " %s", ot_op_name((ot_op)op));
}

static int seen_before(const char *dir, const char *sig)
{
    char path[1024], line[4096];
    snprintf(path, sizeof path, "%s/INDEX.txt", dir);
    FILE *fp = fopen(path, "r");
    int seen = 0;
    while (fp && fgets(line, sizeof line, fp)) {
        char *tab = strrchr(line, '\t');
        if (tab && !strncmp(tab + 1, sig, strlen(sig)) && tab[1 + strlen(sig)] == '\n') seen++;
    }
    if (fp) fclose(fp);
    return seen;
}

static void report(const fuzz_opts *o, const fz_ir *ir, const fz_fail *f, int64_t idx)
{
    char sig[512];
    signature(ir, f, sig, sizeof sig);
    if (o->findings && seen_before(o->findings, sig) >= 2) {
        fprintf(stderr, "fuzz: seed %llu tree %lld: seen before: %s\n", (unsigned long long)o->seed,
                (long long)idx, sig);
        return;
    }
    put_snippet(stderr, ir, f, o->seed, idx);
    if (!o->findings) return;
    mkdir(o->findings, 0777);
    char path[1024];
    snprintf(path, sizeof path, "%s/%llu-%lld.c", o->findings, (unsigned long long)o->seed,
             (long long)idx);
    FILE *fp = fopen(path, "w");
    if (fp) {
        put_snippet(fp, ir, f, o->seed, idx);
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/INDEX.txt", o->findings);
    fp = fopen(path, "a");
    if (fp) {
        fprintf(fp, "%llu-%lld.c\t%s\t%s\t%d nodes\t%s\t%s\n", (unsigned long long)o->seed,
                (long long)idx, fail_area[f->kind], fail_names[f->kind], ir->nn, f->msg, sig);
        fclose(fp);
    }
}

static void print_tree(const fz_ir *ir, int64_t idx)
{
    fz_inst in;
    fprintf(stderr, "tree %lld (%s, %d nodes, %d leaves):", (long long)idx,
            ir->mode == FUZZ_GRAD ? "grad" : ir->mode == FUZZ_MANY ? "many" : "forward", ir->nn, ir->nl);
    if (inst_build(ref_be, ir, NULL, &in) == 0)
        for (int i = 0; i < ir->nroots; i++) {
            fputc(' ', stderr);
            ot_pp(in.node[ir->roots[i]], stderr);
        }
    fputc('\n', stderr);
    inst_free(&in, ir->nl);
    ot_clear_error();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Trees a forked child checks one after another: a fork per tree cost
 * most of a run's time on VMs where page faults are dear (the child's
 * page tables copied, every page it touches faulted in again). */
enum { FZ_BATCH = 32 };

/* What a batch's child leaves for its parent: the tree it was checking,
 * and that tree's failure. */
typedef struct {
    int64_t at;
    fz_fail f;
} fz_batch;

/* Checks trees [first, end) in order up to the first that fails, each
 * within 60 s in a child, b->at ending at that tree (its failure in b->f)
 * or at end. */
static void check_trees(const fuzz_opts *o, int64_t first, int64_t end, fz_batch *b, int in_child)
{
    for (b->at = first; b->at < end; b->at++) {
        fz_ir ir;
        draw_tree(o->seed, b->at, o->modes ? o->modes : FUZZ_ALL, o->all_configs, &ir);
        if (o->verbose > 1) print_tree(&ir, b->at);
        if (in_child) alarm(60);
        if (b->at + 1 == o->crash_at) abort();
        check_tree(&ir, &b->f);
        ir_free(&ir);
        if (b->f.kind) return;
    }
}

typedef struct {
    const fuzz_opts *o;
    int64_t first, end;
} fz_span;

static void batch_job(const void *span, void *b, int in_child)
{
    const fz_span *sp = span;
    check_trees(sp->o, sp->first, sp->end, b, in_child);
}

/* Checks trees [first, end) in one forked child when o->fork (a crash or
 * a hang is the failure of the tree being checked). Returns the first
 * failing tree's index, its failure in *f, or end when all passed. */
static int64_t run_batch(const fuzz_opts *o, int64_t first, int64_t end, fz_fail *f)
{
    fz_batch b;
    memset(&b, 0, sizeof b);
    fz_span sp = {o, first, end};
    int st = isolate(batch_job, &sp, &b, sizeof b, o->fork, 0);
    *f = b.f;
    check_exit(f, st);
    return b.at;
}

int fuzz_run(const fuzz_opts *o, fuzz_result *res)
{
    memset(res, 0, sizeof *res);
    res->first_failed = -1;
    register_user_ops();
    ref_be = ot_backend_new("ref", NULL);
    if (!ref_be) return -1;
    int reported = 0, max_report = o->max_report ? o->max_report : 10;
    double t0 = now_s(), last = t0;
    int64_t end = o->first + o->n, batch = o->verbose > 1 ? 1 : FZ_BATCH;
    for (int64_t i = o->first; i < end;) {
        fz_fail f;
        int64_t stop = end - i < batch ? end : i + batch, bad = run_batch(o, i, stop, &f);
        res->passed += bad - i;
        i = bad;
        if (bad < stop) {
            i = bad + 1;
            fz_ir ir;
            draw_tree(o->seed, bad, o->modes ? o->modes : FUZZ_ALL, o->all_configs, &ir);
            if (!res->failed++) res->first_failed = bad;
            fprintf(stderr, "fuzz: seed %llu tree %lld: %s: %s\n", (unsigned long long)o->seed,
                    (long long)bad, fail_names[f.kind], f.msg);
            if (reported++ < max_report) {
                int kind = f.kind;
                if (o->shrink) shrink(&ir, kind, o->fork, o->fork ? 400 : 150);
                run_isolated(&ir, &f, o->fork, 1);
                if (f.kind != kind) {  /* flaky: report what the first run saw */
                    f.kind = kind;
                    snprintf(f.msg, sizeof f.msg, "(did not reproduce after shrinking)");
                }
                report(o, &ir, &f, bad);
            }
            ir_free(&ir);
        }
        double t = now_s();
        if (o->verbose && t - last > 10) {
            last = t;
            fprintf(stderr, "fuzz: %lld trees, %lld failed, %.1f trees/s\n",
                    (long long)(res->passed + res->failed), (long long)res->failed,
                    (double)(res->passed + res->failed) / (t - t0));
        }
    }
    backends_free();
    ot_pool_drain();
    return 0;
}

int fuzz_pp_roundtrip(ot_node *const *trees, int n, int nin, const char *const *names,
                      ot_node *const *in)
{
    for (int k = 0; k < n; k++) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (!m) return k;
        ot_pp(trees[k], m);
        fclose(m);
        ot_node *back = ot_parse(text, nin, names, in);
        free(text);
        if (!back || !fuzz_same_tree(back, trees[k])) return k;
    }
    return -1;
}
