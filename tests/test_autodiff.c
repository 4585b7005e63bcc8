/*
 * test_autodiff.c - unit tests of autodiff (src/front/autodiff.c): a gradient
 * check of every differentiable op and composite, driven from the op table
 * (f64 central differences on random shapes with broadcasting and views,
 * both operands, constants on either side; an f32 directional check), zero
 * gradients of the non-differentiable ops, the tie rule, the cases of neon's
 * guide and tests with their expected values, views and the two-views rule,
 * the stable composite forms, DAGs (height 100,000, a diamond of depth 40),
 * second order, neon's dynamic trees, the memo, backprop and the errors.
 * Most cases run on the ref and the cpu backend.
 */
#include "test.h"
#include "internal.h"
#include "ops.h"

#include <stdlib.h>

/* ---- fixture ------------------------------------------------------------- */

#define MAX_KEEP 1024

static struct {
    ot_backend *be;
    ot_pool *pool;
    ot_tensor *ts[MAX_KEEP];
    int n;
    uint64_t rng;
} F;

static void fx_begin(const char *backend)
{
    memset(&F, 0, sizeof F);
    unsetenv("OT_BACKEND");
    F.be = ot_backend_new(backend, NULL);
    CHECK(F.be != NULL);
    F.pool = ot_pool_push();
    F.rng = 12345;
}

static void fx_end(void)
{
    ot_pool_pop(F.pool);
    for (int i = 0; i < F.n; i++) ot_tensor_free(F.ts[i]);
    ot_backend_free(F.be);
}

static ot_tensor *keep(ot_tensor *t)
{
    CHECK(t != NULL);
    if (t && F.n < MAX_KEEP) F.ts[F.n++] = t;
    return t;
}

/* splitmix64, uniform in [0, 1). */
static double urand(void)
{
    uint64_t z = (F.rng += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static int irand(int n) { return (int)(urand() * n); }

/* ---- element access through any view ------------------------------------- */

static char *elem(const ot_tensor *t, int64_t i)
{
    int nd = ot_tensor_ndim(t);
    char *p = ot_tensor_data(t);
    for (int d = nd - 1; d >= 0; d--) {
        int64_t n = ot_tensor_dim(t, d);
        p += (i % n) * ot_tensor_stride(t, d) * (int64_t)ot_dtype_size(ot_tensor_dtype(t));
        i /= n;
    }
    return p;
}

static double getv(const ot_tensor *t, int64_t i)
{
    return ot__load(elem(t, i), ot_tensor_dtype(t));
}

static void setv(ot_tensor *t, int64_t i, double v)
{
    ot__store(elem(t, i), ot_tensor_dtype(t), v);
}

/* ---- operands ------------------------------------------------------------ */

/* Value domains: what an op's operand needs for a clean finite difference. */
enum {
    D_ANY,       /* [-2, 2] */
    D_POS,       /* [0.5, 2] */
    D_NONZERO,   /* +-[0.5, 2] */
    D_GRID,      /* multiples of 0.1 plus 0.05 per operand: never a tie or 0 */
    D_DISTINCT,  /* distinct values 0.1 apart: no ties inside a reduction */
    D_PROB       /* [0.05, 1] */
};

static double draw(int dom, int operand)
{
    switch (dom) {
    case D_POS: return 0.5 + 1.5 * urand();
    case D_NONZERO: return (urand() < 0.5 ? -1 : 1) * (0.5 + 1.5 * urand());
    case D_GRID: return 0.1 * (irand(21) - 10) + 0.05 * operand + 0.025;
    case D_PROB: return 0.05 + 0.95 * urand();
    default: return 4 * urand() - 2;
    }
}

static void fill(ot_tensor *t, int dom, int operand)
{
    int64_t n = ot_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) setv(t, i, draw(dom, operand));
    if (dom != D_DISTINCT) return;
    for (int64_t i = 0; i < n; i++) setv(t, i, 0.1 * (double)(i - n / 2) + 0.03);
    for (int64_t i = n - 1; i > 0; i--) {   /* shuffle */
        int64_t j = irand((int)i + 1);
        double a = getv(t, i), b = getv(t, j);
        setv(t, i, b);
        setv(t, j, a);
    }
}

/* A tensor of shape s and dtype dt, randomly contiguous, a transposed view
 * of a buffer of the reversed shape, or a stepped slice (every other row of
 * a buffer twice as tall). */
static ot_tensor *operand(ot_shape s, ot_dtype dt, int dom, int idx)
{
    int kind = irand(3);
    ot_tensor *t;
    if (kind == 1 && s.ndim >= 2) {
        ot_shape r = s;
        for (int i = 0; i < s.ndim; i++) r.dims[i] = s.dims[s.ndim - 1 - i];
        t = keep(ot_transpose(keep(ot_zeros(F.be, r, dt)), NULL));
    } else if (kind == 2 && s.ndim >= 1) {
        ot_shape r = s;
        r.dims[0] *= 2;
        t = keep(ot_slice(keep(ot_zeros(F.be, r, dt)), OT_RANGE(0, OT_NONE, 2)));
    } else {
        t = keep(ot_zeros(F.be, s, dt));
    }
    if (t) fill(t, dom, idx);
    return t;
}

static ot_shape rand_shape(int min_nd)
{
    ot_shape s = {.ndim = min_nd + irand(4 - min_nd)};
    for (int i = 0; i < s.ndim; i++) s.dims[i] = 1 + irand(4);
    return s;
}

/* A shape that broadcasts against s: some leading dims dropped, some set to 1. */
static ot_shape broadcast_partner(ot_shape s)
{
    ot_shape p = {.ndim = s.ndim - irand(s.ndim + 1)};
    for (int i = 0; i < p.ndim; i++) {
        int64_t d = s.dims[s.ndim - p.ndim + i];
        p.dims[i] = irand(3) == 0 ? 1 : d;
    }
    return p;
}

/* ---- the gradient checker ------------------------------------------------ */

/* A case: a tree over n inputs, next_error R of the tree's shape. */
typedef struct gcase {
    const char *what;
    ot_node *tree;
    ot_tensor *in[3];
    int n;
} gcase;

/* sum(tree * R), the tree evaluated afresh. */
static double loss(ot_node *tree, const double *r)
{
    ot_tensor *out = ot_eval(tree);
    if (!out) {
        test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
        return NAN;
    }
    double s = 0;
    for (int64_t i = 0; i < ot_tensor_numel(out); i++) s += getv(out, i) * r[i];
    ot_tensor_free(out);
    return s;
}

/* The analytic gradients of the case with next_error R, into g[k] (malloc'd). */
static bool analytic(const gcase *c, const double *r, double *g[3])
{
    ot_shape s = ot_node_shape(c->tree);
    ot_dtype dt = ot_node_dtype(c->tree);
    ot_tensor *ne = ot_empty(F.be, s, dt);
    for (int64_t i = 0; i < ot__numel(&s); i++) setv(ne, i, r[i]);
    ot_autodiff *ad = ot_autodiff_new(c->tree, ot_tensor_node(ne));
    bool ok = ad != NULL;
    if (!ok) test__fail(__FILE__, __LINE__, "%s: autodiff_new: %s", c->what, ot_errmsg());
    for (int k = 0; k < c->n; k++) {
        int64_t n = ot_tensor_numel(c->in[k]);
        g[k] = calloc((size_t)(n ? n : 1), sizeof(double));
        ot_tensor *gt = ok ? ot_autodiff_grad_tensor(ad, c->in[k]) : NULL;
        if (ok && !gt) test__fail(__FILE__, __LINE__, "%s: grad: %s", c->what, ot_errmsg());
        for (int64_t i = 0; gt && i < n; i++) g[k][i] = getv(gt, i);
        if (gt) CHECK_INT(ot_tensor_dtype(gt), ot_tensor_dtype(c->in[k]));
        ok = ok && gt;
        ot_tensor_free(gt);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(ne);
    return ok;
}

static double *rand_vec(int64_t n)
{
    double *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    for (int64_t i = 0; i < n; i++) r[i] = 2 * urand() - 1;
    return r;
}

/* Full-Jacobian check in f64: central differences, eps 1e-6, atol 1e-5,
 * rtol 1e-3, every element of every input (perturbed through its view). */
static void gradcheck(const gcase *c)
{
    if (!c->tree) {
        test__fail(__FILE__, __LINE__, "%s: no tree: %s", c->what, ot_errmsg());
        ot_clear_error();
        return;
    }
    ot_shape s = ot_node_shape(c->tree);
    double *r = rand_vec(ot__numel(&s)), *g[3] = {0};
    if (analytic(c, r, g)) {
        for (int k = 0; k < c->n; k++) {
            ot_tensor *x = c->in[k];
            int bad = 0;
            for (int64_t i = 0; i < ot_tensor_numel(x) && bad < 3; i++) {
                double v = getv(x, i), eps = 1e-6;
                setv(x, i, v + eps);
                double lp = loss(c->tree, r);
                setv(x, i, v - eps);
                double lm = loss(c->tree, r);
                setv(x, i, v);
                double num = (lp - lm) / (2 * eps);
                if (!(fabs(num - g[k][i]) <= 1e-5 + 1e-3 * fabs(num))) {
                    test__fail(__FILE__, __LINE__, "%s (%s): d/d input %d [%lld]: analytic %.10g, "
                               "numeric %.10g", c->what, ot_backend_name(F.be), k, (long long)i,
                               g[k][i], num);
                    bad++;
                }
            }
        }
    }
    for (int k = 0; k < 3; k++) free(g[k]);
    free(r);
}

/* Directional check in f32: (L(x + eps v) - L(x - eps v)) / 2 eps against
 * sum_k <grad_k, v_k>, eps 1e-3, tolerance 2e-3 (relative, floor 1). */
static void dircheck(const gcase *c)
{
    if (!c->tree) {
        test__fail(__FILE__, __LINE__, "%s: no tree: %s", c->what, ot_errmsg());
        ot_clear_error();
        return;
    }
    ot_shape s = ot_node_shape(c->tree);
    double *r = rand_vec(ot__numel(&s)), *g[3] = {0}, *v[3] = {0}, *x0[3] = {0};
    const double eps = 1e-3;
    if (analytic(c, r, g)) {
        double dir = 0;
        for (int k = 0; k < c->n; k++) {
            int64_t n = ot_tensor_numel(c->in[k]);
            v[k] = rand_vec(n);
            x0[k] = malloc((size_t)(n ? n : 1) * sizeof(double));
            for (int64_t i = 0; i < n; i++) {
                x0[k][i] = getv(c->in[k], i);
                dir += g[k][i] * v[k][i];
            }
        }
        double l[2];
        for (int side = 0; side < 2; side++) {
            for (int k = 0; k < c->n; k++)
                for (int64_t i = 0; i < ot_tensor_numel(c->in[k]); i++)
                    setv(c->in[k], i, x0[k][i] + (side ? -eps : eps) * v[k][i]);
            l[side] = loss(c->tree, r);
        }
        for (int k = 0; k < c->n; k++)
            for (int64_t i = 0; i < ot_tensor_numel(c->in[k]); i++) setv(c->in[k], i, x0[k][i]);
        double num = (l[0] - l[1]) / (2 * eps);
        if (!(fabs(num - dir) <= 2e-3 * fmax(1.0, fabs(dir))))
            test__fail(__FILE__, __LINE__, "%s (%s, f32): directional derivative %.8g, numeric %.8g",
                       c->what, ot_backend_name(F.be), dir, num);
    }
    for (int k = 0; k < 3; k++) {
        free(g[k]);
        free(v[k]);
        free(x0[k]);
    }
    free(r);
}

/* ---- cases from the op table --------------------------------------------- */

/* Operand domains from the op table's dom column (where the op is smooth). */
static int unary_domain(ot_op op)
{
    switch (ot__op(op)->dom) {
    case OT__DOM_POS: return D_POS;
    case OT__DOM_NONZERO: return D_NONZERO;
    case OT__DOM_KINK: return D_GRID;
    default: return D_ANY;
    }
}

/* POS constrains x (pow's base), NONZERO y (the divisor), KINK both. */
static void binary_domains(ot_op op, int dom[2])
{
    int d = ot__op(op)->dom;
    dom[0] = d == OT__DOM_POS ? D_POS : d == OT__DOM_KINK ? D_GRID : D_ANY;
    dom[1] = d == OT__DOM_NONZERO ? D_NONZERO : d == OT__DOM_KINK ? D_GRID : D_ANY;
}

/* A random axis of an ndim operand (negative sometimes), or all. */
static int rand_axis(int ndim)
{
    int r = irand(ndim + 1);
    if (r == ndim) return OT_AXIS_ALL;
    return irand(2) ? r : r - ndim;
}

static gcase unary_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 1};
    c.in[0] = operand(rand_shape(0), dt, unary_domain(op), 0);
    c.tree = ot_build(op, ot_tensor_node(c.in[0]), NULL, NULL);
    return c;
}

/* Both operands tensors (either one broadcast), or a constant on one side. */
static gcase binary_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op)};
    int dom[2];
    binary_domains(op, dom);
    ot_shape sa = rand_shape(0), sb = broadcast_partner(sa);
    if (irand(2)) {
        ot_shape t = sa;
        sa = sb;
        sb = t;
    }
    int form = irand(4);   /* 0, 1: both tensors; 2: constant b; 3: constant a */
    ot_node *a, *b;
    if (form == 3) {
        a = ot_const(draw(dom[0], 0));
    } else {
        c.in[c.n++] = operand(sa, dt, dom[0], 0);
        a = ot_tensor_node(c.in[c.n - 1]);
    }
    if (form == 2) {
        b = ot_const(op == OT_OP_POW ? 3.0 : draw(dom[1], 1));
    } else {
        c.in[c.n++] = operand(sb, dt, dom[1], 1);
        b = ot_tensor_node(c.in[c.n - 1]);
    }
    c.tree = ot_build(op, a, b, NULL);
    return c;
}

static gcase reduce_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 1};
    bool extremum = op == OT_OP_MAX || op == OT_OP_MIN;
    c.in[0] = operand(rand_shape(1), dt, extremum ? D_DISTINCT : D_ANY, 0);
    ot_args a = {.axis = rand_axis(ot_tensor_ndim(c.in[0])), .keepdims = irand(2)};
    c.tree = ot_build(op, ot_tensor_node(c.in[0]), NULL, &a);
    return c;
}

/* 1-D and 2-D operands in every combination. */
static gcase dot_case(ot_dtype dt)
{
    gcase c = {.what = "dot", .n = 2};
    int m = 1 + irand(4), k = 1 + irand(4), n = 1 + irand(4), form = irand(4);
    ot_shape sa = form & 1 ? OT_SHAPE(m, k) : OT_SHAPE(k);
    ot_shape sb = form & 2 ? OT_SHAPE(k, n) : OT_SHAPE(k);
    c.in[0] = operand(sa, dt, D_ANY, 0);
    c.in[1] = operand(sb, dt, D_ANY, 1);
    c.tree = ot_build(OT_OP_DOT, ot_tensor_node(c.in[0]), ot_tensor_node(c.in[1]), NULL);
    return c;
}

/* conv, conv_transpose, conv_wgrad, 1-D, of a small random geometry
 * (tests/test_conv.c goes through every option). */
static gcase conv_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 2};
    int g = 1 + irand(2), s = 1 + irand(2), dil = 1 + irand(2), lo = irand(2), hi = irand(2);
    ot_args a = {.axis = OT_AXIS_ALL, .win = {.stride = {s}, .dilation = {dil}, .pad_lo = {lo},
                                              .pad_hi = {hi}, .ksize = {2}, .groups = g}};
    int64_t in = op == OT_OP_CONV_TRANSPOSE ? 3 : 5, p = (in + lo + hi - dil - 1) / s + 1;
    c.in[0] = operand(OT_SHAPE(2, 2 * g, in), dt, D_ANY, 0);
    c.in[1] = operand(op == OT_OP_CONV_WGRAD ? OT_SHAPE(2, 2 * g, p) : OT_SHAPE(2 * g, 2, 2), dt,
                      D_ANY, 1);
    c.tree = ot_build(op, ot_tensor_node(c.in[0]), ot_tensor_node(c.in[1]), &a);
    return c;
}

/* The pooling ops, 1-D, of a small random geometry (tests/test_pooling.c
 * goes through every option): x (2, 2, 6); the gradients' dy of the
 * forward op's output shape. */
static gcase pool_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = op == OT_OP_MAX_POOL_GRAD || op == OT_OP_MAX_POOL_TAKE ? 2 : 1};
    bool avg = op == OT_OP_AVG_POOL || op == OT_OP_AVG_POOL_GRAD;
    int k = 2 + irand(2);
    ot_args a = {.axis = OT_AXIS_ALL, .shape = OT_SHAPE(2, 2, 6),
                 .win = {.ksize = {k}, .stride = {1 + irand(2)}, .dilation = {avg ? 1 : 1 + irand(2)},
                         .pad_lo = {irand(2)}, .pad_hi = {irand(2)}, .ceil_mode = irand(2),
                         .exclude_pad = avg && irand(2)}};
    ot_tensor *x0 = keep(ot_zeros(F.be, a.shape, dt));
    ot_node *fwd = ot_build(avg ? OT_OP_AVG_POOL : OT_OP_MAX_POOL, ot_tensor_node(x0), NULL, &a);
    ot_shape out = fwd ? ot_node_shape(fwd) : a.shape;
    bool first_x = op != OT_OP_AVG_POOL_GRAD;
    c.in[0] = operand(first_x ? a.shape : out, dt, D_ANY, 0);
    if (c.n == 2) c.in[1] = operand(op == OT_OP_MAX_POOL_GRAD ? out : a.shape, dt, D_ANY, 1);
    c.tree = ot_build(op, ot_tensor_node(c.in[0]), c.n == 2 ? ot_tensor_node(c.in[1]) : NULL, &a);
    return c;
}

/* An int32 index tensor (kept) of a random shape of rank 0 to 2, values
 * in [-n, n): negative and repeated indices alike. */
static ot_tensor *index_tensor(int64_t n)
{
    ot_shape s = {.ndim = irand(3)};
    for (int i = 0; i < s.ndim; i++) s.dims[i] = 1 + irand(3);
    ot_tensor *t = keep(ot_zeros(F.be, s, OT_I32));
    int32_t v[9];
    for (int i = 0; i < 9; i++) v[i] = (int32_t)(irand(2 * (int)n) - n);
    if (t) ot_set(t, v);
    return t;
}

/* The indexing ops (tests/test_index.c goes through them): take and
 * scatter_add along a random axis at random indices, select under a fixed
 * 0/1 condition broadcast with the operand, tril and triu at k in -2..2,
 * cumsum along a random axis. */
static gcase index_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 1};
    ot_shape s = rand_shape(op == OT_OP_SELECT ? 0 : op == OT_OP_TRIL || op == OT_OP_TRIU ? 2 : 1);
    int axis = s.ndim ? irand(s.ndim) : 0;
    if (op == OT_OP_TAKE || op == OT_OP_SCATTER_ADD) {
        ot_tensor *i = index_tensor(s.dims[axis]);
        c.in[0] = operand(s, dt, D_ANY, 0);
        ot_node *t = ot_take(c.in[0], i, axis);
        if (op == OT_OP_SCATTER_ADD && t) {
            c.in[0] = operand(ot_node_shape(t), dt, D_ANY, 0);
            t = ot_scatter_add(c.in[0], i, axis, s.dims[axis]);
        }
        c.tree = t;
    } else if (op == OT_OP_SELECT) {
        ot_tensor *m = keep(ot_zeros(F.be, broadcast_partner(s), OT_F64));
        fill(m, D_GRID, 1);
        c.in[0] = operand(s, dt, D_ANY, 0);
        c.tree = ot_build(op, ot_gt(m, 0.0), ot_tensor_node(c.in[0]), NULL);
    } else {
        c.in[0] = operand(s, dt, D_ANY, 0);
        ot_args a = {.axis = op == OT_OP_CUMSUM ? axis : OT_AXIS_ALL, .ddof = irand(5) - 2};
        c.tree = ot_build(op, ot_tensor_node(c.in[0]), NULL, &a);
    }
    return c;
}

/* Top-k (tests/test_topk.c goes through it): topk as ot_topk's values
 * (its int32 node alone has no gradient) with a random k, axis and mode;
 * take_along and scatter_along at random indices (negative and repeated)
 * of a random count along a random axis. */
static gcase topk_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 1};
    ot_shape s = rand_shape(1), is = s;
    int axis = irand(s.ndim), n = (int)s.dims[axis];
    c.in[0] = operand(s, dt, D_ANY, 0);
    if (op == OT_OP_TOPK) {
        c.tree = ot_topk(c.in[0], irand(n + 1), .axis = axis, .largest = irand(2), .sorted = irand(2));
        return c;
    }
    is.dims[axis] = irand(4);
    ot_tensor *i = keep(ot_zeros(F.be, is, OT_I32));
    int64_t m = 1;
    for (int d = 0; d < is.ndim; d++) m *= is.dims[d];
    int32_t *v = malloc(sizeof *v * (size_t)(m ? m : 1));
    for (int64_t e = 0; e < m; e++) v[e] = (int32_t)(irand(2 * n) - n);
    if (i) ot_set(i, v);
    free(v);
    if (op == OT_OP_TAKE_ALONG) {
        c.tree = ot_take_along(c.in[0], i, axis);
        return c;
    }
    c.in[0] = operand(is, dt, D_ANY, 0);
    c.tree = ot_scatter_add_along(c.in[0], i, axis, n);
    return c;
}

/* The raw attention node (q, pack) of a small random geometry, its
 * logsumexp column included, so the check covers the gradients of q, k, v,
 * the mask (every broadcast code) and the lse column (tests/attn_check.py
 * goes through the public builder against NumPy). */
static gcase attn_case(ot_dtype dt)
{
    gcase c = {.what = "attention", .n = 2};
    int64_t b = 1 + irand(2), h = 1 + irand(2), sq = 1 + irand(4), sk = 1 + irand(4);
    int64_t d = 1 + irand(3), dv = 1 + irand(3), full[4] = {b, h, sq, sk}, nm = 1;
    int code = irand(2) ? 0 : 16 + irand(16);
    for (int i = 0; i < 4 && code; i++) nm *= code & (1 << i) ? full[i] : 1;
    ot_args a = {.axis = OT_AXIS_ALL, .lo = 0.7, .keepdims = irand(2), .depth = sk,
                 .ddof = (int)dv, .win = {.groups = code}};
    c.in[0] = operand(OT_SHAPE(b, h, sq, d), dt, D_ANY, 0);
    c.in[1] = operand(OT_SHAPE(b * h * sk * (d + dv) + (code ? nm : 0)), dt, D_ANY, 1);
    c.tree = ot_build(OT_OP_ATTENTION, ot_tensor_node(c.in[0]), ot_tensor_node(c.in[1]), &a);
    return c;
}

/* A transpose of an expression (x * 1.5), reversed or permuted. */
static gcase transpose_case(ot_dtype dt)
{
    gcase c = {.what = "transpose", .n = 1};
    c.in[0] = operand(OT_SHAPE(2, 3, 4), dt, D_ANY, 0);
    ot_args a = {.axis = OT_AXIS_ALL};
    if (irand(2)) {
        a.perm[0] = 2;
        a.perm[1] = 0;
        a.perm[2] = 1;
    }
    c.tree = ot_build(OT_OP_TRANSPOSE, ot_mul(c.in[0], 1.5), NULL, &a);
    return c;
}

/* Layout ops: a random NumPy slice, a reshape to the dims reversed, and a
 * concat of three parts (one of them twice) along a random axis. */
static gcase slice_case(ot_dtype dt)
{
    gcase c = {.what = "slice", .n = 1};
    ot_shape s = rand_shape(1);
    c.in[0] = operand(s, dt, D_ANY, 0);
    ot_index idx[OT_MAX_DIMS];
    for (int d = 0; d < s.ndim; d++) {
        int k = irand(3), step = (1 + irand(2)) * (irand(2) ? 1 : -1);
        idx[d] = k == 0 ? OT_ALL : k == 1 ? OT_IDX(irand((int)s.dims[d]))
                                          : OT_RANGE(irand(4) - 2, irand(5) - 1, step);
    }
    c.tree = ot_slice_node_n(ot_mul(c.in[0], 1.5), s.ndim, idx, __FILE__, __LINE__);
    return c;
}

static gcase reshape_case(ot_dtype dt)
{
    gcase c = {.what = "reshape", .n = 1};
    ot_shape s = rand_shape(0), r = s;
    c.in[0] = operand(s, dt, D_ANY, 0);
    for (int i = 0; i < s.ndim; i++) r.dims[i] = s.dims[s.ndim - 1 - i];
    c.tree = ot_reshape_node(ot_mul(c.in[0], 1.5), r);
    return c;
}

static gcase concat_case(ot_dtype dt)
{
    gcase c = {.what = "concat", .n = 2};
    ot_shape s = rand_shape(1), t = s;
    int axis = irand(s.ndim);
    t.dims[axis] = irand(3);
    c.in[0] = operand(s, dt, D_ANY, 0);
    c.in[1] = operand(t, dt, D_ANY, 1);
    ot_node *parts[3] = {ot_mul(c.in[0], 1.5), ot_tensor_node(c.in[1]), ot_tensor_node(c.in[0])};
    c.tree = ot_concat(3, parts, irand(2) ? axis : axis - s.ndim);
    return c;
}

static gcase cast_case(ot_dtype dt)
{
    gcase c = {.what = "cast", .n = 1};
    c.in[0] = operand(rand_shape(0), dt, D_ANY, 0);
    c.tree = ot_mul(ot_cast(c.in[0], .dtype = OT_F64), 2.0);
    return c;
}

/* keep(x) passes g through: checked inside a product, so x's gradient is
 * not just the incoming ones. */
static gcase keep_case(ot_dtype dt)
{
    gcase c = {.what = "keep", .n = 1};
    c.in[0] = operand(rand_shape(0), dt, D_ANY, 0);
    c.tree = ot_mul(ot_keep(ot_sin(c.in[0])), c.in[0]);
    return c;
}

static gcase composite_case(ot_op op, ot_dtype dt)
{
    gcase c = {.what = ot_op_name(op), .n = 1};
    ot_shape s = rand_shape(1);
    if (op == OT_OP_VAR || op == OT_OP_STD) /* a spread along every axis */
        for (int i = 0; i < s.ndim; i++) s.dims[i] = 2 + irand(3);
    int dom = op == OT_OP_CLIP ? D_GRID : op == OT_OP_CROSS_ENTROPY ? D_PROB : D_ANY;
    c.in[0] = operand(s, dt, dom, 0);
    ot_args a = {.axis = rand_axis(s.ndim), .keepdims = irand(2), .lo = -0.5, .hi = 0.5};
    if (op == OT_OP_VAR || op == OT_OP_STD) a.ddof = irand(2);
    ot_node *b = NULL;
    if (op == OT_OP_CROSS_ENTROPY) {
        c.in[c.n++] = operand(broadcast_partner(s), dt, D_ANY, 1);
        b = ot_tensor_node(c.in[1]);
    }
    c.tree = ot_build(op, ot_tensor_node(c.in[0]), b, &a);
    return c;
}

/* The case for op, or what == NULL for ops without a gradient. */
static gcase op_case(ot_op op, ot_dtype dt)
{
    gcase none = {0};
    /* attention_grad's rule refuses (autodiff_attention_second_order_refused) */
    if (ot_op_flags(op) & OT_FLAG_NODIFF || op == OT_OP_ATTENTION_GRAD) return none;
    switch (ot_op_kind(op)) {
    case OT_KIND_UNARY: return unary_case(op, dt);
    case OT_KIND_BINARY: return binary_case(op, dt);
    case OT_KIND_REDUCE: return reduce_case(op, dt);
    case OT_KIND_DOT: return dot_case(dt);
    case OT_KIND_CONV:
        if (op >= OT_OP_TAKE && op <= OT_OP_CUMSUM) return index_case(op, dt);
        if (op >= OT_OP_TOPK && op <= OT_OP_SCATTER_ALONG) return topk_case(op, dt);
        if (op == OT_OP_ATTENTION) return attn_case(dt);
        return op >= OT_OP_MAX_POOL && op <= OT_OP_AVG_POOL_GRAD ? pool_case(op, dt) : conv_case(op, dt);
    case OT_KIND_SHAPE:
        return op == OT_OP_SLICE ? slice_case(dt) : op == OT_OP_RESHAPE ? reshape_case(dt)
                                                                        : transpose_case(dt);
    case OT_KIND_SPECIAL:
        return op == OT_OP_CAST ? cast_case(dt) : op == OT_OP_KEEP ? keep_case(dt)
             : op == OT_OP_CONCAT ? concat_case(dt) : none;
    default: return composite_case(op, dt);
    }
}

#define TRIALS 4

static void check_all_ops(bool f32)
{
    int covered = 0;
    for (int op = 0; op < OT_OP_COUNT; op++) {
        if ((ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM)) continue;   /* placeholders of registered ops: test_custom_op.c */
        for (int t = 0; t < TRIALS; t++) {
            ot_pool *p = ot_pool_push();
            F.rng = 1000u * (uint64_t)op + (uint64_t)t + 1;
            gcase c = op_case((ot_op)op, f32 ? OT_F32 : OT_F64);
            if (c.what) {
                if (f32) dircheck(&c);
                else gradcheck(&c);
                covered += t == 0;
            }
            ot_pool_pop(p);
        }
    }
    int nodiff = 0;
    for (int op = 0; op < OT_OP_COUNT; op++)
        nodiff += (ot_op_flags((ot_op)op) & (OT_FLAG_NODIFF | OT_FLAG_CUSTOM)) != 0;
    /* Every op but rand, onehot, the flagged ones and attention_grad (whose
     * rule refuses) is checked. */
    CHECK_INT(covered, OT_OP_COUNT - nodiff - 1);
}

TEST(autodiff_gradcheck_f64_ref)
{
    fx_begin("ref");
    check_all_ops(false);
    fx_end();
}

TEST(autodiff_gradcheck_f64_cpu)
{
    fx_begin("cpu");
    check_all_ops(false);
    fx_end();
}

TEST(autodiff_dircheck_f32_ref)
{
    fx_begin("ref");
    check_all_ops(true);
    fx_end();
}

TEST(autodiff_dircheck_f32_cpu)
{
    fx_begin("cpu");
    check_all_ops(true);
    fx_end();
}

/* ---- helpers for value checks -------------------------------------------- */

/* The gradient of ad w.r.t. x against want (row-major), within tol. */
static void check_grad(const char *file, int line, ot_autodiff *ad, ot_tensor *x,
                       const double *want, double tol)
{
    ot_tensor *g = ot_autodiff_grad_tensor(ad, x);
    if (!g) {
        test__fail(file, line, "grad_tensor: %s", ot_errmsg());
        return;
    }
    for (int64_t i = 0; i < ot_tensor_numel(g); i++)
        if (!test__close(getv(g, i), want[i], tol))
            test__fail(file, line, "grad[%lld] == %.10g, expected %.10g", (long long)i,
                       getv(g, i), want[i]);
    ot_tensor_free(g);
}
#define CHECK_GRAD(ad, x, tol, ...)                                           \
    check_grad(__FILE__, __LINE__, (ad), (x), (const double[]){__VA_ARGS__}, (tol))

static ot_tensor *arr(ot_shape s, ot_dtype dt, const double *v)
{
    ot_tensor *t = keep(ot_empty(F.be, s, dt));
    for (int64_t i = 0; t && i < ot_tensor_numel(t); i++) setv(t, i, v[i]);
    return t;
}
#define ARR(shape, dt, ...) arr((shape), (dt), (const double[]){__VA_ARGS__})

static const char *backends[] = {"ref", "cpu"};

/* A second derivative through attention is refused, naming the op: the
 * backward's node has no rule of its own (never a silent zero). */
TEST(autodiff_attention_second_order_refused)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *q = keep(ot_zeros(F.be, OT_SHAPE(1, 1, 3, 2), OT_F64));
        ot_tensor *k = keep(ot_full(F.be, OT_SHAPE(1, 1, 3, 2), OT_F64, 0.5));
        ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_attention(q, k, k)), NULL);
        CHECK(ad != NULL);
        ot_node *dq = ad ? ot_autodiff_grad(ad, q) : NULL;
        CHECK(dq != NULL);
        ot_autodiff *ad2 = dq ? ot_autodiff_new(ot_sum(ot_mul(dq, dq)), NULL) : NULL;
        CHECK(ad2 == NULL);
        CHECK_INT(ot_errcode(), OT_EUNSUPPORTED);
        CHECK(strstr(ot_errmsg(), "attention_grad") != NULL);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- non-differentiable ops and ties ------------------------------------- */

/* Each flagged op, applied to x, added to 2 * sum(x): the gradient is 2. */
TEST(autodiff_nodiff_ops_contribute_zero)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(2, 3), OT_F64, 0.5, -1.5, 2.5, 0.25, -0.75, 1.0);
        ot_tensor *y = ARR(OT_SHAPE(3), OT_F64, 0.5, 0.5, -2);
        int n = 0;
        for (int op = 0; op < OT_OP_COUNT; op++) {
            if (!(ot_op_flags((ot_op)op) & OT_FLAG_NODIFF)) continue;
            ot_args a = {.axis = 1, .depth = 3, .shape = OT_SHAPE(2, 3)};
            ot_node *xn = ot_tensor_node(x);
            ot_node *nd = op == OT_OP_ONEHOT ? ot_build((ot_op)op, ot_cast(x, .dtype = OT_I32), NULL, &a)
                        : op == OT_OP_RAND ? ot_build((ot_op)op, NULL, NULL, &a)
                        : ot_build((ot_op)op, xn, ot_op_arity((ot_op)op) == 2 ? ot_tensor_node(y) : NULL, &a);
            ot_node *f = ot_add(ot_sum(ot_mul(x, 2.0)), ot_sum(ot_cast(nd, .dtype = OT_F64)));
            ot_autodiff *ad = ot_autodiff_new(f, NULL);
            CHECK(ad != NULL);
            if (!ad) {
                test__fail(__FILE__, __LINE__, "%s: %s", ot_op_name((ot_op)op), ot_errmsg());
                continue;
            }
            CHECK_GRAD(ad, x, 1e-15, 2, 2, 2, 2, 2, 2);
            CHECK_GRAD(ad, y, 0, 0, 0, 0);
            ot_autodiff_free(ad);
            n++;
        }
        CHECK_INT(n, 13);
        fx_end();
    }
}

/* Ties share the gradient equally: max/min reductions among all tied
 * elements, maximum/minimum half each; clip passes it on [lo, hi]. */
TEST(autodiff_ties)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(2, 4), OT_F32, 1, 3, 3, 2, 5, 5, 5, 0);
        ot_tensor *y = ARR(OT_SHAPE(2, 4), OT_F32, 1, 4, 3, 1, 1, 6, 4, 0);
        ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_max(x, .axis = 1)), NULL);
        CHECK_GRAD(ad, x, 1e-7, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_min(x), NULL);
        CHECK_GRAD(ad, x, 1e-7, 0, 0, 0, 0, 0, 0, 0, 1);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_sum(ot_min(y, .axis = 0, .keepdims = true)), NULL);
        CHECK_GRAD(ad, y, 1e-7, 0.5, 1, 1, 0, 0.5, 0, 0, 1);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_maximum(x, y), NULL);
        CHECK_GRAD(ad, x, 1e-7, 0.5, 0, 0.5, 1, 1, 0, 1, 0.5);
        CHECK_GRAD(ad, y, 1e-7, 0.5, 1, 0.5, 0, 0, 1, 0, 0.5);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_minimum(x, y), NULL);
        CHECK_GRAD(ad, x, 1e-7, 0.5, 1, 0.5, 0, 0, 1, 0, 0.5);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_clip(x, 2, 3), NULL);
        CHECK_GRAD(ad, x, 1e-7, 0, 1, 1, 1, 0, 0, 0, 0);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- neon's guide and tests ---------------------------------------------- */

TEST(autodiff_guide_x0x0_plus_x0x1)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x0 = ARR(OT_SHAPE(2, 2), OT_F32, 1, 2, 3, 4);
        ot_tensor *x1 = ARR(OT_SHAPE(2, 2), OT_F32, 0.5, -1, 2, 0);
        ot_autodiff *ad = ot_autodiff_new(ot_add(ot_mul(x0, x0), ot_mul(x0, x1)), NULL);
        CHECK_GRAD(ad, x0, 1e-6, 2.5, 3, 8, 8);   /* 2*x0 + x1 */
        CHECK_GRAD(ad, x1, 1e-6, 1, 2, 3, 4);     /* x0 */
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* A broadcast operand of add/sub gets the gradient summed over the
 * broadcast even when the incoming gradient is smaller than the node: the
 * seed of ones, or what a sum or mean over all axes passes down. */
TEST(autodiff_broadcast_add_small_gradient)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *a = ARR(OT_SHAPE(2, 3), OT_F64, 1, 2, 3, 4, 5, 6);
        ot_tensor *b = ARR(OT_SHAPE(3), OT_F64, 0.5, -1, 2);
        ot_autodiff *ad = ot_autodiff_new(ot_add(a, b), NULL);
        CHECK_GRAD(ad, b, 1e-12, 2, 2, 2);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_sum(ot_sub(a, b)), NULL);
        CHECK_GRAD(ad, b, 1e-12, -2, -2, -2);
        CHECK_GRAD(ad, a, 1e-12, 1, 1, 1, 1, 1, 1);
        ot_autodiff_free(ad);
        ad = ot_autodiff_new(ot_mean(ot_add(b, a)), NULL);
        CHECK_GRAD(ad, b, 1e-12, 1.0 / 3, 1.0 / 3, 1.0 / 3);
        ot_autodiff_free(ad);
        fx_end();
    }
}

TEST(autodiff_guide_tanh)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        double a[4] = {0.5, 1, 1.5, 2}, b[4] = {2, 0.75, -1, 1.25}, ga[4], gb[4];
        for (int i = 0; i < 4; i++) {
            double t = tanh(a[i] * b[i] + a[i] / b[i]), d = 1 - t * t;
            ga[i] = d * (b[i] + 1 / b[i]);
            gb[i] = d * (a[i] - a[i] / (b[i] * b[i]));
        }
        ot_tensor *x0 = arr(OT_SHAPE(4), OT_F64, a), *x1 = arr(OT_SHAPE(4), OT_F64, b);
        ot_autodiff *ad = ot_autodiff_new(ot_tanh(ot_add(ot_mul(x0, x1), ot_div(x0, x1))), NULL);
        check_grad(__FILE__, __LINE__, ad, x0, ga, 1e-14);
        check_grad(__FILE__, __LINE__, ad, x1, gb, 1e-14);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* neon's test: 3x3 constants 1, 2, 3, 5 give -3, -4, -1 and 75. */
TEST(autodiff_guide_constants_3x3)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x[4];
        const double v[4] = {1, 2, 3, 5}, want[4] = {-3, -4, -1, 75};
        for (int i = 0; i < 4; i++) x[i] = keep(ot_full(F.be, OT_SHAPE(3, 3), OT_F32, v[i]));
        ot_node *f = ot_add(ot_sub(ot_add(ot_sub(ot_mul(x[0], x[0]), ot_mul(x[1], x[0])),
                                          ot_mul(x[0], x[2])),
                                   ot_mul(ot_mul(x[2], x[1]), x[0])),
                            ot_mul(ot_mul(x[3], x[3]), x[3]));
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        for (int i = 0; i < 4; i++) {
            double w[9];
            for (int k = 0; k < 9; k++) w[k] = want[i];
            check_grad(__FILE__, __LINE__, ad, x[i], w, 1e-6);
        }
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ((x - mean(x,1)) / sqrt(var(x,1) + 1e-6)) * g + b, x (10,64), g and b
 * (10,1), a random next_error: a full gradient check, and the closed forms
 * sum(e, 1) for b and sum(e * xhat, 1) for g. */
TEST(autodiff_guide_batchnorm)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = operand(OT_SHAPE(10, 64), OT_F64, D_ANY, 0);
        ot_tensor *g = operand(OT_SHAPE(10, 1), OT_F64, D_POS, 1);
        ot_tensor *b = operand(OT_SHAPE(10, 1), OT_F64, D_ANY, 2);
        ot_node *xhat = ot_div(ot_sub(x, ot_mean(x, .axis = 1, .keepdims = true)),
                               ot_sqrt(ot_add(ot_var(x, .axis = 1, .keepdims = true), 1e-6)));
        gcase c = {.what = "batchnorm", .tree = ot_add(ot_mul(xhat, g), b),
                   .in = {x, g, b}, .n = 3};
        gradcheck(&c);

        ot_tensor *e = keep(ot_empty(F.be, OT_SHAPE(10, 64), OT_F64));
        fill(e, D_ANY, 0);
        ot_autodiff *ad = ot_autodiff_new(c.tree, ot_tensor_node(e));
        ot_tensor *xh = keep(ot_eval(xhat));
        double wg[10] = {0}, wb[10] = {0};
        for (int i = 0; i < 640; i++) {
            wb[i / 64] += getv(e, i);
            wg[i / 64] += getv(e, i) * getv(xh, i);
        }
        check_grad(__FILE__, __LINE__, ad, b, wb, 1e-12);
        check_grad(__FILE__, __LINE__, ad, g, wg, 1e-12);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* neon got x0.T * x1 w.r.t. x0 wrong (x1, not x1.T). Transposed views and
 * transposed expressions, mixed. */
TEST(autodiff_guide_transposes)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x0 = ARR(OT_SHAPE(2, 3), OT_F64, 1, 2, 3, 4, 5, 6);
        ot_tensor *x1 = ARR(OT_SHAPE(3, 2), OT_F64, 10, 20, 30, 40, 50, 60);
        ot_tensor *x0t = keep(ot_transpose(x0, NULL));
        ot_autodiff *ad = ot_autodiff_new(ot_mul(x0t, x1), NULL);
        CHECK_GRAD(ad, x0, 0, 10, 30, 50, 20, 40, 60);   /* x1.T */
        CHECK_GRAD(ad, x0t, 0, 10, 20, 30, 40, 50, 60);  /* x1, in x0t's layout */
        CHECK_GRAD(ad, x1, 0, 1, 4, 2, 5, 3, 6);
        ot_autodiff_free(ad);
        /* x0t*x1 + T(x0*x0)*x1: x1.T + 2*x0*x1.T w.r.t. x0. */
        ad = ot_autodiff_new(ot_add(ot_mul(x0t, x1), ot_mul(ot_T(ot_mul(x0, x0)), x1)), NULL);
        CHECK_GRAD(ad, x0, 1e-15, 30, 150, 350, 180, 440, 780);
        ot_autodiff_free(ad);
        /* T(x0t * 2) is x0 * 2 again: the gradient w.r.t. x1.T's view. */
        ot_tensor *x1t = keep(ot_transpose(x1, NULL));
        ad = ot_autodiff_new(ot_sum(ot_mul(ot_T(ot_mul(x0t, 2.0)), x1t)), NULL);
        CHECK_GRAD(ad, x0, 0, 20, 60, 100, 40, 80, 120);
        CHECK_GRAD(ad, x1, 0, 2, 8, 4, 10, 6, 12);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- views --------------------------------------------------------------- */

/* Two views of one buffer: disjoint slices are independent variables; a
 * tensor and its transpose both used sum into either's layout; a slice of a
 * tensor the tree also reads whole adds into its rows (tests/
 * test_variables.c checks such gradients against finite differences). */
TEST(autodiff_two_views_rule)
{
    fx_begin("ref");
    ot_tensor *x = ARR(OT_SHAPE(4, 2), OT_F64, 1, 2, 3, 4, 5, 6, 7, 8);
    ot_tensor_set_name(x, "x");
    ot_tensor *top = keep(ot_slice(x, OT_RANGE(0, 2))), *bot = keep(ot_slice(x, OT_RANGE(2, 4)));
    ot_autodiff *ad = ot_autodiff_new(ot_mul(top, bot), NULL);
    CHECK_GRAD(ad, top, 0, 5, 6, 7, 8);
    CHECK_GRAD(ad, bot, 0, 1, 2, 3, 4);
    ot_autodiff_free(ad);

    ot_tensor *xt = keep(ot_transpose(x, NULL));
    ot_tensor *c = ARR(OT_SHAPE(4, 2), OT_F64, 1, 1, 2, 2, 3, 3, 4, 4);
    ot_tensor *d = ARR(OT_SHAPE(2, 4), OT_F64, 10, 20, 30, 40, 50, 60, 70, 80);
    ad = ot_autodiff_new(ot_add(ot_sum(ot_mul(x, c)), ot_sum(ot_mul(xt, d))), NULL);
    CHECK_GRAD(ad, x, 0, 11, 51, 22, 62, 33, 73, 44, 84);    /* c + d.T */
    CHECK_GRAD(ad, xt, 0, 11, 22, 33, 44, 51, 62, 73, 84);   /* (c + d.T).T */
    ot_autodiff_free(ad);

    ad = ot_autodiff_new(ot_add(ot_sum(x), ot_sum(top)), NULL);
    CHECK_GRAD(ad, x, 0, 2, 2, 2, 2, 1, 1, 1, 1);
    CHECK_GRAD(ad, top, 0, 2, 2, 2, 2);   /* x reads top's elements too */
    ot_autodiff_free(ad);
    fx_end();
}

/* Stepped, reversed and indexed views get gradients in their own layout,
 * and the tensor they view gets each one added back where it reads. */
TEST(autodiff_view_leaves_own_layout)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(3, 4), OT_F32, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
        ot_tensor *s = keep(ot_slice(x, OT_RANGE(0, 2), OT_RANGE(OT_NONE, OT_NONE, -2)));
        ot_tensor *r = keep(ot_slice(x, OT_IDX(2)));   /* (4,), disjoint from s (2,2) */
        ot_tensor *w = ARR(OT_SHAPE(4), OT_F32, 1, -1, 2, -2);
        ot_autodiff *ad = ot_autodiff_new(ot_add(ot_sum(ot_mul(ot_sqr(s), 3.0f)),
                                                 ot_sum(ot_mul(r, w))), NULL);
        CHECK_GRAD(ad, s, 1e-6, 18, 6, 42, 30);   /* 6 s */
        CHECK_GRAD(ad, r, 0, 1, -1, 2, -2);
        CHECK_GRAD(ad, x, 1e-6, 0, 6, 0, 18, 0, 30, 0, 42, 1, -1, 2, -2);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- composites ---------------------------------------------------------- */

static char *pp_of(const ot_node *n) { return test__capture(ot_pp, n); }

/* cross_entropy(softmax(x), y) w.r.t. x is built as softmax(x) - y;
 * logsoftmax's gradient takes no log; both match the values. */
TEST(autodiff_stable_composites)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(2, 3), OT_F64, 1, 2, 3, -1, 0, 800);
        ot_tensor *y = ARR(OT_SHAPE(2, 3), OT_F64, 0, 0, 1, 0.5, 0.5, 0);
        ot_tensor_set_name(x, "x");
        ot_tensor_set_name(y, "y");
        ot_node *sm = ot_softmax(x, .axis = 1);
        ot_autodiff *ad = ot_autodiff_new(ot_cross_entropy(sm, y, .axis = 1), NULL);
        ot_node *g = ot_autodiff_grad(ad, x);
        char *s = pp_of(g);
        CHECK(s && strstr(s, "softmax") && strstr(s, "- y") && !strstr(s, "log"));
        free(s);
        ot_tensor *sv = keep(ot_eval(sm));
        double want[6];
        for (int i = 0; i < 6; i++) want[i] = getv(sv, i) - getv(y, i);
        check_grad(__FILE__, __LINE__, ad, x, want, 1e-12);   /* finite at x = 800 */
        ot_autodiff_free(ad);

        ad = ot_autodiff_new(ot_logsoftmax(x, .axis = 1), NULL);
        s = pp_of(ot_autodiff_grad(ad, x));
        CHECK(s && strstr(s, "(exp (logsoftmax x") && !strstr(s, "(log ") && !strstr(s, "safelog"));
        free(s);
        for (int i = 0; i < 6; i++) want[i] = 1 - 3 * getv(sv, i);
        check_grad(__FILE__, __LINE__, ad, x, want, 1e-12);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* The f64 check of cross_entropy over a softmax (targets summing to 1). */
TEST(autodiff_gradcheck_softmax_cross_entropy)
{
    fx_begin("ref");
    ot_tensor *x = operand(OT_SHAPE(3, 4), OT_F64, D_ANY, 0);
    ot_tensor *y = keep(ot_zeros(F.be, OT_SHAPE(3, 4), OT_F64));
    setv(y, 1, 1);
    setv(y, 4, 0.25);
    setv(y, 7, 0.75);
    setv(y, 10, 1);
    gcase c = {.what = "ce(softmax)", .n = 1, .in = {x},
               .tree = ot_cross_entropy(ot_softmax(x, .axis = 1), y, .axis = 1)};
    gradcheck(&c);
    fx_end();
}

/* ---- DAGs ---------------------------------------------------------------- */

#define DEPTH TEST_HEIGHT

/* A chain of 100,000 ops: the sweep, the gradient tree and its release are
 * iterative. d/dx of x * 1.00001^k ... as a chain of multiplications. */
TEST(autodiff_height_100000)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(2), OT_F64, 1, 2);
        ot_node *f = ot_tensor_node(x);
        for (int i = 0; i < DEPTH; i++) f = i % 2 ? ot_mul(f, 1.00001) : ot_add(f, 0.5);
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        CHECK(ad != NULL);
        double w = pow(1.00001, DEPTH / 2);
        CHECK_GRAD(ad, x, 1e-9, w, w);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* v' = sin(v) * cos(v), 40 times: each level reads the one below twice, so
 * a walk by paths would take 2^40 steps. */
TEST(autodiff_diamond_depth_40)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(3), OT_F64, 0.3, 0.7, -1.1);
        ot_node *f = ot_tensor_node(x);
        for (int i = 0; i < 40; i++) f = ot_mul(ot_sin(f), ot_cos(f));
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        double want[3];
        for (int k = 0; k < 3; k++) {
            double v = getv(x, k), d = 1;
            for (int i = 0; i < 40; i++) {
                d *= cos(2 * v);
                v = sin(v) * cos(v);
            }
            want[k] = d;
        }
        check_grad(__FILE__, __LINE__, ad, x, want, 1e-12);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* One gradient node per shared subtree: u = x*y used three times. */
TEST(autodiff_shared_subtree)
{
    fx_begin("cpu");
    ot_tensor *x = ARR(OT_SHAPE(2), OT_F32, 2, 3), *y = ARR(OT_SHAPE(2), OT_F32, 5, 7);
    ot_node *u = ot_mul(x, y);
    ot_autodiff *ad = ot_autodiff_new(ot_add(ot_mul(u, u), ot_exp(ot_mul(u, 0.0f))), NULL);
    CHECK_GRAD(ad, x, 1e-6, 2 * 10 * 5, 2 * 21 * 7);   /* 2 u y */
    CHECK_GRAD(ad, y, 1e-6, 2 * 10 * 2, 2 * 21 * 3);
    ot_autodiff_free(ad);
    fx_end();
}

/* A row mean that two broadcasts use (x - m, x * m) gets one sum of their
 * contributions, not a sum each: sum((x - m)^2 + x m) has gradient 2x,
 * and its tree one reduction besides the mean's broadcast back (layer
 * norm's d/dx took a pass over x more for the second). */
TEST(autodiff_sums_a_broadcast_once)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(2, 3), OT_F64, 1, 2, 3, 4, 5, 9);
        ot_node *m = ot_mean(x, .axis = 1, .keepdims = true);
        ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_add(ot_sqr(ot_sub(x, m)), ot_mul(x, m))), NULL);
        CHECK_GRAD(ad, x, 1e-12, 2, 4, 6, 8, 10, 18);
        char *text = test__capture(ot_print, ot_autodiff_grad(ad, x));
        int sums = 0;
        for (const char *p = text; p && (p = strstr(p, "'op': 'sum'")); p++) sums++;
        CHECK_INT(sums, 1);
        free(text);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- second order -------------------------------------------------------- */

/* Hessian-vector products: sum(x^3) has H = diag(6x), so H v = 6 x v; the
 * quadratic form x.(A x) has H = A + A^T. */
TEST(autodiff_second_order_hvp)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x = ARR(OT_SHAPE(3), OT_F64, 1, -2, 0.5);
        ot_tensor *v = ARR(OT_SHAPE(3), OT_F64, 0.25, 1, -3);
        ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(ot_mul(x, x), x)), NULL);
        ot_node *g = ot_autodiff_grad(ad, x);
        ot_autodiff *ad2 = ot_autodiff_new(ot_sum(ot_mul(g, v)), NULL);
        CHECK_GRAD(ad2, x, 1e-14, 6 * 0.25, 6 * -2.0, 6 * 0.5 * -3);
        CHECK_GRAD(ad2, v, 1e-14, 3, 12, 0.75);   /* the gradient itself */
        ot_autodiff_free(ad2);
        ot_autodiff_free(ad);

        ot_tensor *A = ARR(OT_SHAPE(3, 3), OT_F64, 1, 2, 3, 4, 5, 6, 7, 8, 10);
        ad = ot_autodiff_new(ot_dot(x, ot_dot(A, x)), NULL);
        g = ot_autodiff_grad(ad, x);
        ad2 = ot_autodiff_new(ot_dot(g, v), NULL);
        /* (A + A^T) v with A + A^T = [[2,6,10],[6,10,14],[10,14,20]]. */
        CHECK_GRAD(ad2, x, 1e-14, 2 * 0.25 + 6 - 30, 6 * 0.25 + 10 - 42, 10 * 0.25 + 14 - 60);
        ot_autodiff_free(ad2);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* ---- neon's dynamic trees ------------------------------------------------ */

/* The guide's example: the tree grows in a loop while a value read back with
 * ot_get stays small, and a value picks sig or tanh. The gradient of
 * whatever was built is then checked numerically (examples/dynamic.c runs
 * the same logic). */
static ot_node *dynamic_tree(ot_tensor *x0, ot_tensor *x1, int *steps, bool *used_sig)
{
    ot_node *f = ot_add(ot_mul(x0, x1), 0.5);
    *steps = 0;
    for (;;) {
        double s;
        ot_tensor *t = ot_eval(ot_sum(ot_abs(f)));
        ot_get(t, &s);
        ot_tensor_free(t);
        if (s > 20 || *steps == 10) break;
        f = ot_add(ot_mul(f, x1), x0);
        (*steps)++;
    }
    double m;
    ot_tensor *t = ot_eval(ot_mean(f));
    ot_get(t, &m);
    ot_tensor_free(t);
    *used_sig = m > 0;
    return *used_sig ? ot_sig(f) : ot_tanh(f);
}

TEST(autodiff_dynamic_tree)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *x0 = ARR(OT_SHAPE(2, 2), OT_F64, 1, 2, 3, 4);
        ot_tensor *x1 = ARR(OT_SHAPE(2, 2), OT_F64, 0.5, 1, -0.5, 1.5);
        int steps;
        bool sig;
        gcase c = {.what = "dynamic", .in = {x0, x1}, .n = 2,
                   .tree = dynamic_tree(x0, x1, &steps, &sig)};
        CHECK_INT(steps, 1);
        CHECK(sig);
        gradcheck(&c);
        ot_tensor *y1 = ARR(OT_SHAPE(2, 2), OT_F64, -1, -1, -1, -1);
        c.tree = dynamic_tree(x0, y1, &steps, &sig);
        c.in[1] = y1;
        CHECK(!sig);
        gradcheck(&c);
        fx_end();
    }
}

/* ---- the object: memo, backprop, grad forms ------------------------------ */

TEST(autodiff_memo)
{
    fx_begin("ref");
    ot_tensor *x = ARR(OT_SHAPE(2), OT_F32, 1, 2);
    ot_tensor *e = ARR(OT_SHAPE(2), OT_F32, 3, 4);
    ot_node *f = ot_retain(ot_mul(x, x));
    long refs0 = atomic_load(&f->refs);
    ot_autodiff *a = ot_autodiff_new(f, NULL), *b = ot_autodiff_new(f, NULL);
    ot_autodiff *c = ot_autodiff_new(f, ot_tensor_node(e));
    CHECK(a != NULL && a == b);
    CHECK(c != NULL && c != a);
    CHECK_GRAD(c, x, 0, 6, 16);
    ot_autodiff_free(a);
    ot_autodiff_free(b);
    ot_autodiff_free(c);
    /* The memo holds its objects, and they hold the tree... */
    CHECK_INT(atomic_load(&f->refs), refs0 + 2);
    CHECK(ot_autodiff_new(f, NULL) == a);
    ot_autodiff_free(a);
    /* ...for a bounded number of keys: 64 newer ones evict both. */
    for (int i = 0; i < 64; i++) {
        ot_pool *p = ot_pool_push();
        ot_autodiff_free(ot_autodiff_new(ot_add(x, (double)i), NULL));
        ot_pool_pop(p);
    }
    CHECK_INT(atomic_load(&f->refs), refs0);
    ot_release(f);
    fx_end();
}

TEST(autodiff_backprop_and_forms)
{
    for (int bi = 0; bi < 2; bi++) {
        fx_begin(backends[bi]);
        ot_tensor *a = ARR(OT_SHAPE(2, 3), OT_F32, 0.5, 1, 1.5, 2, 0.75, 1.25);
        ot_tensor *b = ARR(OT_SHAPE(3), OT_F32, 1.5, 0.5, 2);
        ot_tensor *ga = keep(ot_empty(F.be, OT_SHAPE(2, 3), OT_F32));
        ot_tensor *gb = keep(ot_empty(F.be, OT_SHAPE(3), OT_F32));
        ot_autodiff *ad = ot_autodiff_new(ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b))), NULL);
        CHECK_INT(ot_autodiff_backprop(ad, 2, (ot_tensor *[]){a, b}, (ot_tensor *[]){ga, gb}), 0);
        float ha[6], hb[3], va[6], vb[3];
        CHECK_INT(ot_autodiff_grad_host(ad, a, ha), 0);
        CHECK_INT(ot_autodiff_grad_host(ad, b, hb), 0);
        ot_get(ga, va);
        ot_get(gb, vb);
        for (int i = 0; i < 6; i++) CHECK_NEAR(va[i], ha[i], 1e-6);
        for (int i = 0; i < 3; i++) CHECK_NEAR(vb[i], hb[i], 1e-6);
        for (int i = 0; i < 3; i++) {   /* b is broadcast: summed over rows */
            double want = 0;
            for (int r = 0; r < 2; r++) {
                double x = getv(a, 3 * r + i), y = getv(b, i), t = tanh(x * y + x / y);
                want += (1 - t * t) * (x - x / (y * y));
            }
            CHECK_NEAR(hb[i], want, 1e-5);
        }
        /* A gradient tree prints, explains, and a missing leaf gets zeros. */
        ot_node *g = ot_autodiff_grad(ad, a);
        char *s = pp_of(g);
        CHECK(s && strstr(s, "tanh"));
        free(s);
        s = test__capture(ot_explain, g);
        CHECK(s && *s);
        free(s);
        ot_tensor *z = ARR(OT_SHAPE(2), OT_F64, 1, 2);
        ot_tensor *gz = ot_autodiff_grad_tensor(ad, z);
        CHECK(gz && ot_tensor_dtype(gz) == OT_F64 && getv(gz, 0) == 0 && getv(gz, 1) == 0);
        ot_tensor_free(gz);
        CHECK_INT(ot_autodiff_backprop(ad, 0, NULL, NULL), 0);
        ot_autodiff_free(ad);
        fx_end();
    }
}

/* Gradients keep their tensor's dtype; integer tensors get zeros. */
TEST(autodiff_dtypes)
{
    fx_begin("cpu");
    ot_tensor *x = ARR(OT_SHAPE(2), OT_F32, 1, 2);
    ot_tensor *y = ARR(OT_SHAPE(2), OT_F64, 3, 4);
    ot_tensor *i = ARR(OT_SHAPE(2), OT_I32, 5, 6);
    ot_autodiff *ad = ot_autodiff_new(ot_mul(ot_mul(x, y), i), NULL);
    ot_tensor *gx = keep(ot_autodiff_grad_tensor(ad, x));
    ot_tensor *gi = keep(ot_autodiff_grad_tensor(ad, i));
    CHECK(gx && ot_tensor_dtype(gx) == OT_F32 && getv(gx, 1) == 24);
    CHECK(gi && ot_tensor_dtype(gi) == OT_I32 && getv(gi, 0) == 0);
    ot_autodiff_free(ad);
    ad = ot_autodiff_new(ot_mul(ot_cast(x, .dtype = OT_F64), y), NULL);
    CHECK_GRAD(ad, x, 0, 3, 4);
    ot_autodiff_free(ad);
    ad = ot_autodiff_new(ot_add(x, 1.0), NULL);   /* a weak constant gradient */
    CHECK_GRAD(ad, x, 0, 1, 1);
    ot_autodiff_free(ad);
    fx_end();
}

/* ---- errors -------------------------------------------------------------- */

TEST(autodiff_errors)
{
    fx_begin("ref");
    ot_tensor *x = ARR(OT_SHAPE(2, 3), OT_F32, 1, 2, 3, 4, 5, 6);
    ot_tensor *e = ARR(OT_SHAPE(3), OT_F32, 1, 2, 3);
    CHECK(ot_autodiff_new(NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "autodiff_new", "tree");
    CHECK(ot_autodiff_new(ot_exp(x), ot_tensor_node(e)) == NULL);
    CHECK_ERR(OT_ESHAPE, "next_error", "(3,)", "(2,3)");
    CHECK(ot_autodiff_new(ot_add(ot_const(1), ot_const(2)), NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "autodiff_new", "no tensor leaf");
    /* A NULL tree (a failed build) keeps the builder's error. */
    ot_node *bad = ot_mul(x, ARR(OT_SHAPE(4), OT_F32, 1, 2, 3, 4));
    CHECK(bad == NULL);
    CHECK(ot_autodiff_new(bad, NULL) == NULL);
    CHECK_ERR(OT_ESHAPE, "mul");
    /* A gradient buffer on another backend: the backprop's line, not the
     * line that built the loss. */
    ot_backend *cpu = ot_backend_new("cpu", NULL);
    ot_tensor *gx = ot_empty(cpu, OT_SHAPE(2, 3), OT_F32);
    ot_autodiff *ab = ot_autodiff_new(ot_sum(ot_mul(x, x)), NULL);
    char site[128];
    int line = __LINE__ + 1;
    CHECK_INT(ot_autodiff_backprop(ab, 1, &x, &gx), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, TEST_SITE(site, line), "autodiff_backprop: tree 0 reads tensors of backend 'ref'");
    ot_autodiff_free(ab);
    ot_tensor_free(gx);
    ot_backend_free(cpu);

    /* An op without a rule (as a future custom op would be): a node whose
     * op the table does not know, built at a known line. */
    ot_node *n = ot__node_alloc();
    n->kind = OT_NODE_OP;
    n->op = 99;
    n->dtype = OT_F32;
    n->shape = x->leaf.shape;
    n->a = ot_retain(ot_tensor_node(x));
    n->be = F.be;
    n->file = "layer.c";
    n->line = 42;
    ot__pool_adopt_new(n);
    CHECK(ot_autodiff_new(ot_exp(n), NULL) == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "layer.c:42", "no gradient rule", "op 99");

    ot_autodiff *ad = ot_autodiff_new(ot_exp(x), NULL);
    CHECK(ot_autodiff_grad(NULL, x) == NULL);
    CHECK_ERR(OT_ENULL, "autodiff_grad");
    CHECK(ot_autodiff_grad(ad, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "wrt");
    CHECK(ot_autodiff_grad_tensor(ad, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "wrt");
    CHECK_INT(ot_autodiff_grad_host(ad, x, NULL), OT_ENULL);
    ot_clear_error();
    CHECK_INT(ot_autodiff_backprop(ad, -1, NULL, NULL), OT_EINVAL);
    ot_clear_error();
    CHECK_INT(ot_autodiff_backprop(NULL, 1, NULL, NULL), OT_ENULL);
    ot_clear_error();
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, NULL), OT_ENULL);
    ot_clear_error();
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){e}), OT_ESHAPE);
    ot_clear_error();
    ot_autodiff_free(ad);
    ot_autodiff_free(NULL);
    fx_end();
}
