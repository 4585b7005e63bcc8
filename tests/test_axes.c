/*
 * test_axes.c - issue 17 item 2, named axes: naming tensors, names through
 * views and builders, reductions, softmax and dot by name (bitwise the
 * positional trees, on ref and cpu), alignment by name in broadcasting,
 * the errors, gradients against finite differences in f64, and trees
 * without names printing and planning exactly as before.
 */
#include "test.h"
#include "internal.h"   /* the allocation-failure seam */

#include <stdlib.h>

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = 2});
    CHECK(be != NULL);
    return be;
}

/* A tensor of shape with deterministic values in [-1, 1), named axes. */
/* p and q hold the same values (to rounding) and p has the axis names. */
static void same_values(ot_node *p, ot_node *q, const char *axes)
{
    CHECK(p && q);
    if (!p || !q) return;
    CHECK_STR(ot_node_axes(p), axes);
    ot_tensor *a = ot_eval(p), *b = ot_eval(q);
    CHECK(a && b && ot_tensor_numel(a) == ot_tensor_numel(b));
    int64_t n = a && b ? ot_tensor_numel(a) : 0;
    double *va = malloc(sizeof *va * (size_t)(n + 1)), *vb = malloc(sizeof *vb * (size_t)(n + 1));
    if (n && ot_get(a, va) == 0 && ot_get(b, vb) == 0)
        for (int64_t i = 0; i < n; i++) CHECK_NEAR(va[i], vb[i], 1e-12);
    free(va);
    free(vb);
    ot_tensor_free(a);
    ot_tensor_free(b);
}

static ot_tensor *data(ot_backend *be, ot_shape s, const char *axes, unsigned seed)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (double)(seed >> 8 & 0xffff) / 32768.0 - 1.0;
    }
    ot_tensor *t = ot_array(be, s, OT_F64, v);
    free(v);
    CHECK(t != NULL);
    if (axes) CHECK_INT(ot_tensor_set_axes(t, axes), 0);
    return t;
}

/* Both trees evaluated: same shape and the same bits. */
static void check_bitwise(ot_node *x, ot_node *y)
{
    CHECK(x != NULL && y != NULL);
    if (!x || !y) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return;
    }
    ot_tensor *a = ot_eval(x), *b = ot_eval(y);
    CHECK(a && b);
    if (a && b) {
        ot_shape sa = ot_tensor_shape(a), sb = ot_tensor_shape(b);
        CHECK_INT(sa.ndim, sb.ndim);
        CHECK(memcmp(sa.dims, sb.dims, sizeof sa.dims) == 0);
        CHECK(memcmp(ot_tensor_data(a), ot_tensor_data(b),
                     (size_t)ot_tensor_numel(a) * ot_dtype_size(ot_tensor_dtype(a))) == 0);
    }
    ot_tensor_free(a);
    ot_tensor_free(b);
}

TEST(axes_name_tensors)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3, 4, 5), OT_F32);
    CHECK(ot_tensor_axes(x) == NULL);
    CHECK_INT(ot_tensor_set_axes(x, "N, C,H ,W"), 0);
    CHECK_STR(ot_tensor_axes(x), "N,C,H,W");
    CHECK_INT(ot_axis_of(x, "H"), 2);
    CHECK_INT(ot_axis_of(x, "Q"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "axis_of", "no axis 'Q' in (N,C,H,W)");
    /* interned: equal sets are one string */
    ot_tensor *y = ot_zeros(be, OT_SHAPE(2, 3, 4, 5), OT_F32);
    CHECK_INT(ot_tensor_set_axes(y, "N,C,H,W"), 0);
    CHECK(ot_tensor_axes(x) == ot_tensor_axes(y));
    CHECK_INT(ot_tensor_set_axes(y, "N,C,C,W"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "tensor_set_axes", "axis 'C' is named twice");
    CHECK_INT(ot_tensor_set_axes(y, "N,C,1H,W"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "bad axis name '1H'");
    CHECK_INT(ot_tensor_set_axes(y, "N,C,H-W"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "bad axis name 'H-W'");
    CHECK_INT(ot_tensor_set_axes(y, "N,,H,W"), OT_EINVAL);
    CHECK_INT(ot_tensor_set_axes(y, "a_very_long_axis_name_of_32_chars,C,H,W"), OT_EINVAL);
    CHECK_INT(ot_tensor_set_axes(y, "N,C,H"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "'N,C,H' names 3 axes, the tensor has 4 (shape (2,3,4,5))");
    CHECK_STR(ot_tensor_axes(y), "N,C,H,W");   /* failures leave the names */
    CHECK_INT(ot_tensor_set_axes(y, ""), 0);
    CHECK(ot_tensor_axes(y) == NULL);
    CHECK_INT(ot_tensor_set_axes(x, NULL), 0);
    CHECK(ot_tensor_axes(x) == NULL);
    CHECK_INT(ot_axis_of(x, "N"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "has no axis names");
    CHECK_INT(ot_tensor_set_axes(NULL, "N"), OT_ENULL);
    CHECK_INT(ot_axis_of((ot_node *)NULL, "N"), OT_ENULL);
    CHECK_INT(ot_axis_of(y, NULL), OT_ENULL);
    CHECK(ot_tensor_axes(NULL) == NULL && ot_node_axes(NULL) == NULL);
    ot_tensor *s = ot_zeros(be, OT_SHAPE(), OT_F32);
    CHECK_INT(ot_tensor_set_axes(s, "N"), OT_EINVAL);
    CHECK_INT(ot_tensor_set_axes(s, ""), 0);
    ot_tensor_free(s);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(axes_follow_views)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3, 4, 5), OT_F32);
    CHECK_INT(ot_tensor_set_axes(x, "N,C,H,W"), 0);
    ot_tensor *t = ot_transpose(x, (int[]){0, 2, 3, 1});
    CHECK_STR(ot_tensor_axes(t), "N,H,W,C");
    ot_tensor *r = ot_transpose(x, NULL);
    CHECK_STR(ot_tensor_axes(r), "W,H,C,N");
    ot_tensor *s = ot_slice(x, OT_IDX(1), OT_ALL, OT_RANGE(1, 3), OT_IDX(0));
    CHECK_STR(ot_tensor_axes(s), "C,H");
    ot_tensor *s2 = ot_slice(x, OT_ALL);
    CHECK_STR(ot_tensor_axes(s2), "N,C,H,W");
    ot_tensor *same = ot_reshape(x, OT_SHAPE(2, 3, 4, -1));
    CHECK_STR(ot_tensor_axes(same), "N,C,H,W");
    ot_tensor *flat = ot_reshape(x, OT_SHAPE(6, 20));
    CHECK(ot_tensor_axes(flat) == NULL);
    ot_tensor *b1 = ot_broadcast_to(s, OT_SHAPE(3, 2));
    CHECK_STR(ot_tensor_axes(b1), "C,H");
    ot_tensor *b2 = ot_broadcast_to(s, OT_SHAPE(7, 3, 2));
    CHECK(ot_tensor_axes(b2) == NULL);
    ot_tensor *c = ot_copy(t);
    CHECK_STR(ot_tensor_axes(c), "N,H,W,C");
    ot_tensor *all[] = {t, r, s, s2, same, flat, b1, b2, c, x};
    for (int i = 0; i < 10; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(axes_follow_builders)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = data(be, OT_SHAPE(2, 3, 4), "N,C,L", 1);
    ot_tensor *w = data(be, OT_SHAPE(4, 6), "L,K", 2);
    ot_tensor *u = data(be, OT_SHAPE(2, 3, 4), NULL, 3);
    ot_pool *p = ot_pool_push();
    CHECK_STR(ot_node_axes(ot_exp(x)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_add(x, u)), "N,C,L");   /* one side named: positional */
    CHECK_STR(ot_node_axes(ot_mul(u, x)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_mul(x, 2.0)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_cast(x, OT_F32)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_keep(x)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_sum(x, 1)), "N,L");
    CHECK_STR(ot_node_axes(ot_sum(x, 1, true)), "N,C,L");
    CHECK(ot_node_axes(ot_sum(x)) == NULL);
    CHECK_STR(ot_node_axes(ot_sum(x, .keepdims = true)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_argmax(x, 2)), "N,C");
    CHECK_STR(ot_node_axes(ot_T(x, {2, 0, 1})), "L,N,C");
    CHECK_STR(ot_node_axes(ot_softmax(x, 1)), "N,C,L");
    CHECK_STR(ot_node_axes(ot_var(x, 0)), "C,L");
    CHECK_STR(ot_node_axes(ot_dot(ot_sum(x, 0), w)), "C,K");
    CHECK(ot_node_axes(ot_dot(ot_sum(x, 0), ot_T(ot_sum(x, 0)))) == NULL);   /* (C,C) */
    CHECK(ot_node_axes(ot_onehot(ot_argmax(x, 2), 5)) == NULL);
    CHECK(ot_node_axes(ot_add(ot_sum(x, 0), u)) == NULL);   /* rank 3 from unnamed u */
    CHECK(ot_node_axes(ot_exp(u)) == NULL);
    ot_tensor *m = data(be, OT_SHAPE(2, 3, 4), "B,M,L", 30), *n = data(be, OT_SHAPE(2, 4, 5), "B,L,N", 31);
    ot_tensor *o = data(be, OT_SHAPE(2, 4, 5), "X,L,N", 32);
    CHECK_STR(ot_node_axes(ot_batched_dot(m, n)), "B,M,N");
    CHECK(ot_node_axes(ot_batched_dot(m, o)) == NULL);   /* two batch names */
    ot_tensor *un = data(be, OT_SHAPE(2, 4, 5), NULL, 33);
    CHECK(ot_node_axes(ot_batched_dot(m, un)) == NULL);   /* a dim without a name */
    ot_pool_pop(p);
    ot_tensor *all[] = {x, w, u, m, n, o, un};
    for (int i = 0; i < 7; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

static void reduce_by_name(const char *bname)
{
    ot_backend *be = backend(bname);
    ot_tensor *x = data(be, OT_SHAPE(3, 4, 5, 6), "N,C,H,W", 4);
    ot_pool *p = ot_pool_push();
    ot_node *s = ot_sum(x, .axes = "C,W");
    CHECK_STR(ot_node_axes(s), "N,H");
    check_bitwise(s, ot_sum(ot_sum(x, 3), 1));
    ot_node *k = ot_sum(x, .axes = "W,C", .keepdims = true);
    CHECK_STR(ot_node_axes(k), "N,C,H,W");
    check_bitwise(k, ot_sum(ot_sum(x, 3, true), 1, true));
    check_bitwise(ot_max(x, .axes = "H"), ot_max(x, 2));
    check_bitwise(ot_min(x, .axes = "N,C,H,W"), ot_min(ot_min(ot_min(ot_min(x, 3), 2), 1), 0));
    check_bitwise(ot_mean(x, .axes = "H,N"), ot_mean(ot_mean(x, 2), 0));
    check_bitwise(ot_argmin(x, .axes = "C"), ot_argmin(x, 1));
    check_bitwise(ot_var(x, .axes = "H", .ddof = 1), ot_var(x, 2, 1));
    check_bitwise(ot_squared_l2(x, .axes = "W"), ot_squared_l2(x, 3));
    check_bitwise(ot_softmax(x, .axes = "C"), ot_softmax(x, 1));
    check_bitwise(ot_logsoftmax(x, .axes = "W"), ot_logsoftmax(x, 3));
    CHECK_STR(ot_node_axes(ot_softmax(x, .axes = "C")), "N,C,H,W");
    /* names through an expression */
    ot_node *e = ot_tanh(ot_T(x, {3, 2, 1, 0}));
    check_bitwise(ot_sum(e, .axes = "N,C"), ot_sum(ot_sum(e, 3), 2));
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(axes_reduce_and_softmax_by_name)
{
    reduce_by_name("ref");
    reduce_by_name("cpu");
}

/* w (C,H,W,K) . x (N,C,H,W) over C,H,W: (K,N), bitwise the dot of the
 * reshaped views by hand. */
static void dot_by_name(const char *bname)
{
    ot_backend *be = backend(bname);
    ot_tensor *w = data(be, OT_SHAPE(4, 2, 3, 5), "C,H,W,K", 5);
    ot_tensor *x = data(be, OT_SHAPE(6, 4, 2, 3), "N,C,H,W", 6);
    ot_tensor *w2 = ot_reshape(w, OT_SHAPE(24, 5)), *x2 = ot_reshape(x, OT_SHAPE(6, 24));
    ot_tensor *w2t = ot_transpose(w2, NULL), *x2t = ot_transpose(x2, NULL);
    ot_pool *p = ot_pool_push();
    ot_node *d = ot_dot_axes(w, x, "C,H,W");
    CHECK_STR(ot_node_axes(d), "K,N");
    check_bitwise(d, ot_dot(w2t, x2t));
    check_bitwise(ot_dot_axes(w, x, NULL), ot_dot(w2t, x2t));   /* every shared name */
    check_bitwise(ot_dot_axes(w, x, "W,C,H"), ot_dot(w2t, x2t));
    d = ot_dot_axes(x, w, "C,H,W");
    CHECK_STR(ot_node_axes(d), "N,K");
    check_bitwise(d, ot_dot(x2, w2));
    /* expressions, one contracted axis: transposes only */
    ot_tensor *a = data(be, OT_SHAPE(3, 4), "I,J", 7), *b = data(be, OT_SHAPE(5, 4), "K,J", 8);
    ot_node *ea = ot_tanh(a), *eb = ot_exp(b);
    d = ot_dot_axes(ea, eb, "J");
    CHECK_STR(ot_node_axes(d), "I,K");
    check_bitwise(d, ot_dot(ot_tanh(a), ot_T(ot_exp(b))));
    d = ot_dot_axes(eb, ea, "J");
    CHECK_STR(ot_node_axes(d), "K,I");
    check_bitwise(d, ot_dot(ot_exp(b), ot_T(ot_tanh(a))));
    /* no free axis on one side: a vector */
    ot_tensor *v = data(be, OT_SHAPE(4), "J", 9);
    d = ot_dot_axes(v, ea, "J");
    CHECK_STR(ot_node_axes(d), "I");
    check_bitwise(d, ot_dot(v, ot_T(ot_tanh(a))));
    d = ot_dot_axes(v, v, "J");
    CHECK(d && ot_node_axes(d) == NULL && ot_node_shape(d).ndim == 0);
    ot_pool_pop(p);
    ot_tensor *all[] = {w, x, w2, x2, w2t, x2t, a, b, v};
    for (int i = 0; i < 9; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(axes_dot_by_name)
{
    dot_by_name("ref");
    dot_by_name("cpu");
}

static void align_by_name(const char *bname)
{
    ot_backend *be = backend(bname);
    ot_tensor *x = data(be, OT_SHAPE(2, 3, 4, 5), "N,C,H,W", 10);
    ot_tensor *bias = data(be, OT_SHAPE(3), "C", 11);
    ot_tensor *col = ot_reshape(bias, OT_SHAPE(3, 1, 1));
    ot_tensor *y = data(be, OT_SHAPE(5, 2, 4, 3), "W,N,H,C", 12);
    ot_tensor *yt = ot_transpose(y, (int[]){1, 3, 2, 0});
    ot_tensor *m = data(be, OT_SHAPE(2, 3), "N,C", 13), *k = data(be, OT_SHAPE(3, 4), "C,K", 14);
    ot_tensor *m3 = ot_reshape(m, OT_SHAPE(2, 3, 1));
    ot_pool *p = ot_pool_push();
    /* a tensor that lacks dims in the middle: a view */
    ot_node *s = ot_add(x, bias);
    CHECK_STR(ot_node_axes(s), "N,C,H,W");
    check_bitwise(s, ot_add(x, col));
    /* b's names, then x's others */
    ot_tensor *col4 = ot_reshape(bias, OT_SHAPE(3, 1, 1, 1));
    ot_tensor *xt = ot_transpose(x, (int[]){1, 0, 2, 3});
    check_bitwise(ot_mul(bias, x), ot_mul(col4, xt));
    CHECK_STR(ot_node_axes(ot_mul(bias, x)), "C,N,H,W");
    /* an expression that does: a product with ones and a transpose */
    s = ot_sub(x, ot_neg(bias));
    check_bitwise(s, ot_sub(x, ot_neg(col)));
    /* the same names in another order: a transpose */
    s = ot_add(x, y);
    CHECK_STR(ot_node_axes(s), "N,C,H,W");
    check_bitwise(s, ot_add(x, yt));
    check_bitwise(ot_add(ot_exp(x), ot_exp(y)), ot_add(ot_exp(x), ot_exp(yt)));
    /* leading names only: NumPy's rule, nothing moves */
    ot_tensor *hw = data(be, OT_SHAPE(4, 5), "H,W", 15);
    check_bitwise(ot_add(x, ot_exp(hw)), ot_add(x, ot_exp(ot_tensor_node(hw))));
    /* names each side lacks: an outer sum */
    s = ot_add(m, k);
    CHECK_STR(ot_node_axes(s), "N,C,K");
    CHECK_INT(ot_node_shape(s).ndim, 3);
    check_bitwise(s, ot_add(m3, k));
    s = ot_add(ot_tanh(m), k);
    check_bitwise(s, ot_add(ot_tanh(m3), k));
    /* size-1 dims broadcast against a name's length */
    ot_tensor *c1 = data(be, OT_SHAPE(1, 4), "C,K", 16);
    check_bitwise(ot_add(m, c1), ot_add(m3, c1));
    ot_pool_pop(p);
    ot_tensor *all[] = {x, bias, col, y, yt, m, k, m3, hw, c1, col4, xt};
    for (int i = 0; i < 12; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(axes_align_by_name)
{
    align_by_name("ref");
    align_by_name("cpu");
}

/* out's values equal expected's (same shape, near in f64). */
static void same_tensor(ot_tensor *out, ot_node *expected)
{
    ot_tensor *e = ot_eval(expected);
    CHECK(e != NULL);
    if (!e) return;
    int64_t n = ot_tensor_numel(out);
    CHECK(n == ot_tensor_numel(e));
    double *a = malloc(sizeof *a * (size_t)(n + 1)), *b = malloc(sizeof *b * (size_t)(n + 1));
    if (n == ot_tensor_numel(e) && ot_get(out, a) == 0 && ot_get(e, b) == 0)
        for (int64_t i = 0; i < n; i++) CHECK_NEAR(a[i], b[i], 1e-12);
    free(a);
    free(b);
    ot_tensor_free(e);
}

/* An assignment into a named output takes the value by name, as a binary
 * op aligns its operands: a (N,C) value into a (C,N) output is transposed,
 * even square; names the value lacks broadcast; a name the output lacks or
 * a length that conflicts is an error. Either side unnamed: positions. The
 * same through ot_assign_many, ot_sequential and a program's steps. */
static void assign_by_name(const char *bn)
{
    ot_backend *be = backend(bn);
    ot_tensor *x = data(be, OT_SHAPE(3, 3), "N,C", 41), *y = data(be, OT_SHAPE(2, 3), "N,C", 42);
    ot_tensor *c = data(be, OT_SHAPE(3), "C", 43);
    ot_tensor *o = ot_empty(be, OT_SHAPE(3, 3), OT_F64), *o2 = ot_empty(be, OT_SHAPE(3, 2), OT_F64);
    ot_tensor *plain = ot_empty(be, OT_SHAPE(3, 3), OT_F64), *ab = ot_empty(be, OT_SHAPE(3, 3), OT_F64);
    CHECK_INT(ot_tensor_set_axes(o, "C,N"), 0);
    CHECK_INT(ot_tensor_set_axes(o2, "C,N"), 0);
    CHECK_INT(ot_tensor_set_axes(ab, "A,B"), 0);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(o, x), 0);   /* a tensor: by a view */
    same_tensor(o, ot_T(x));
    CHECK_INT(ot_assign(o, ot_exp(x)), 0);   /* an expression: by a transpose */
    same_tensor(o, ot_exp(ot_T(x)));
    CHECK_INT(ot_assign(o2, ot_mul(y, 2.0)), 0);
    same_tensor(o2, ot_mul(ot_T(y), 2.0));
    CHECK_INT(ot_assign(o, ot_neg(c)), 0);   /* (C) into (C,N): c[:, None] */
    ot_tensor *col = ot_reshape(c, OT_SHAPE(3, 1)), *cb = ot_broadcast_to(col, OT_SHAPE(3, 3));
    same_tensor(o, ot_neg(cb));
    CHECK_INT(ot_assign(plain, x), 0);   /* an unnamed output: positions */
    same_tensor(plain, ot_tensor_node(x));
    ot_clear_error();
    CHECK_INT(ot_assign(ab, x), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "test_axes.c:", "assign: the value's axis 'N' (of (N,C)) is not an axis "
              "of the output (A,B)");
    ot_clear_error();
    CHECK_INT(ot_assign(o2, ot_T(y)), 0);   /* unnamed value: positions */
    CHECK_INT(ot_assign(o, y), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "assign: axis 'N' has length 2 in the value (N,C) and 3 in the output (C,N)");
    ot_tensor *outs[] = {o, plain};
    ot_node *trees[] = {ot_sin(x), ot_sin(x)};
    CHECK_INT(ot_assign_many(2, outs, trees), 0);
    same_tensor(o, ot_sin(ot_T(x)));
    same_tensor(plain, ot_sin(x));
    FILE *sink = fopen("/dev/null", "w");
    CHECK(sink != NULL);
    if (sink) CHECK_INT(ot_explain_many(2, outs, trees, sink), 0);
    if (sink) fclose(sink);
    ot_step steps[] = {{1, (ot_tensor *[]){o}, (ot_node *[]){ot_cos(x)}},
                       {1, (ot_tensor *[]){plain}, (ot_node *[]){ot_add(ot_cos(x), 1.0)}}};
    CHECK_INT(ot_sequential(2, steps), 0);
    same_tensor(o, ot_cos(ot_T(x)));
    same_tensor(plain, ot_add(ot_cos(x), 1.0));
    ot_step bad[] = {{1, (ot_tensor *[]){ab}, (ot_node *[]){ot_cos(x)}}};
    CHECK_INT(ot_sequential(1, bad), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "sequential: step 0", "is not an axis of the output (A,B)");
    ot_program *pr = ot_program_new(be);
    ot_tensor *ph = ot_program_placeholder(pr, "x", OT_SHAPE(3, 3), OT_F64);
    CHECK(ph != NULL && ot_tensor_set_axes(ph, "N,C") == 0);
    CHECK_INT(ot_program_assign(pr, ab, ph), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "program_assign", "is not an axis of the output (A,B)");
    CHECK_INT(ot_program_assign(pr, o, ot_tanh(ph)), 0);
    CHECK_INT(ot_program_compile(pr), 0);
    CHECK_INT(ot_program_run(pr, 1, (ot_bind[]){OT_BIND_TENSOR("x", x)}), 0);
    same_tensor(o, ot_tanh(ot_T(x)));
    ot_program_free(pr);
    ot_pool_pop(p);
    ot_tensor *all[] = {x, y, c, o, o2, plain, ab, col, cb};
    for (int i = 0; i < 9; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(axes_assign_by_name)
{
    assign_by_name("ref");
    assign_by_name("cpu");
}

/* The nodes that lay a value out by name die with the assignment: a tree
 * built once and assigned every step leaves nothing in the default pool
 * (nor in a pushed one), through ot_assign and ot_sequential. */
TEST(axes_assign_by_name_leaves_no_nodes)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = data(be, OT_SHAPE(2, 3, 4), "N,C,K", 51);
    ot_tensor *o = ot_empty(be, OT_SHAPE(4, 3, 2), OT_F64);
    CHECK_INT(ot_tensor_set_axes(o, "K,C,N"), 0);
    ot_node *t = ot_retain(ot_mul(x, 2.0));
    size_t before = ot_pool_default_nodes();
    for (int i = 0; i < 50; i++) CHECK_INT(ot_assign(o, t), 0);
    ot_step step = {1, (ot_tensor *[]){o}, (ot_node *[]){t}};
    for (int i = 0; i < 50; i++) CHECK_INT(ot_sequential(1, &step), 0);
    CHECK(ot_pool_default_nodes() == before);
    ot_release(t);
    ot_tensor_free(x);
    ot_tensor_free(o);
    ot_backend_free(be);
}

/* ot_autodiff_backprop writes each gradient in its wrt's layout, by
 * position, whatever names the gradient's tree carries: a buffer gets the
 * same values whether an unrelated operand is named or not. A buffer named
 * otherwise than its wrt would contradict that: refused. */
TEST(axes_backprop_writes_gradients_by_position)
{
    ot_backend *be = backend("cpu");
    ot_tensor *w = data(be, OT_SHAPE(2, 2), "N,C", 52);
    ot_tensor *k = data(be, OT_SHAPE(2, 2), NULL, 53), *kn = data(be, OT_SHAPE(2, 2), "N,C", 53);
    ot_tensor *g1 = ot_empty(be, OT_SHAPE(2, 2), OT_F64), *g2 = ot_empty(be, OT_SHAPE(2, 2), OT_F64);
    CHECK_INT(ot_tensor_set_axes(g2, "N,C"), 0);   /* g1 unnamed */
    ot_pool *p = ot_pool_push();
    ot_autodiff *a1 = ot_autodiff_new(ot_sum(ot_mul(w, k)), NULL);
    ot_autodiff *a2 = ot_autodiff_new(ot_sum(ot_mul(w, kn)), NULL);
    CHECK_INT(ot_autodiff_backprop(a1, 1, &w, &g1), 0);
    CHECK_INT(ot_autodiff_backprop(a2, 1, &w, &g2), 0);
    double v1[4], v2[4], kv[4];
    CHECK_INT(ot_get(g1, v1), 0);
    CHECK_INT(ot_get(g2, v2), 0);
    CHECK_INT(ot_get(k, kv), 0);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(v1[i], kv[i], 0);
        CHECK_NEAR(v2[i], kv[i], 0);
    }
    ot_tensor *gn = ot_empty(be, OT_SHAPE(2, 2), OT_F64);   /* named otherwise than w */
    CHECK_INT(ot_tensor_set_axes(gn, "C,N"), 0);
    CHECK_INT(ot_autodiff_backprop(a2, 1, &w, &gn), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "gradient buffer 0 is named (C,N) and its wrt (N,C)");
    ot_tensor_free(gn);
    ot_autodiff_free(a1);
    ot_autodiff_free(a2);
    ot_pool_pop(p);
    ot_tensor *all[] = {w, k, kn, g1, g2};
    for (int i = 0; i < 5; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* Gradients of trees whose named operands broadcast as they would by
 * position are the unnamed trees' gradients: a gradient keeping a narrow
 * operand's names (w of C) meets a wide one (x of N,C) in a rule, and was
 * aligned with it by name into (C,N), summing the wrong axis (a square x:
 * a wrong answer; another shape: a broadcast error). */
TEST(axes_gradients_match_unnamed)
{
    static const int64_t rows[] = {3, 2};
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 2; r++) {
            ot_backend *be = backend(b ? "cpu" : "ref");
            ot_shape xs = OT_SHAPE(rows[r], 3);
            ot_tensor *x = data(be, xs, "N,C", 61), *xu = data(be, xs, NULL, 61);
            ot_tensor *y = data(be, OT_SHAPE(3), "C", 62), *yu = data(be, OT_SHAPE(3), NULL, 62);
            ot_tensor *w = data(be, OT_SHAPE(3), "C", 63), *wu = data(be, OT_SHAPE(3), NULL, 63);
            ot_pool *p = ot_pool_push();
            ot_node *named[3] = {ot_sum(ot_mul(ot_mul(x, y), w)), ot_sum(ot_mul(ot_mul(x, w), w)),
                                 ot_sum(ot_exp(ot_sub(ot_mul(w, x), ot_div(x, ot_add(y, 3.0)))))};
            ot_node *plain[3] = {ot_sum(ot_mul(ot_mul(xu, yu), wu)), ot_sum(ot_mul(ot_mul(xu, wu), wu)),
                                 ot_sum(ot_exp(ot_sub(ot_mul(wu, xu), ot_div(xu, ot_add(yu, 3.0)))))};
            for (int t = 0; t < 3; t++) {
                ot_autodiff *an = ot_autodiff_new(named[t], NULL), *au = ot_autodiff_new(plain[t], NULL);
                ot_tensor *wrt[2][3] = {{x, y, w}, {xu, yu, wu}};
                for (int k = 0; k < 3; k++) {
                    double gn[9] = {0}, gu[9] = {0};
                    CHECK_INT(ot_autodiff_grad_host(an, wrt[0][k], gn), 0);
                    CHECK_INT(ot_autodiff_grad_host(au, wrt[1][k], gu), 0);
                    for (int i = 0; i < 9; i++) CHECK_NEAR(gn[i], gu[i], 1e-12);
                }
                ot_autodiff_free(an);
                ot_autodiff_free(au);
            }
            ot_pool_pop(p);
            ot_tensor *all[] = {x, xu, y, yu, w, wu};
            for (int i = 0; i < 6; i++) ot_tensor_free(all[i]);
            ot_backend_free(be);
        }
}

/* Layout ops on nodes name their result as the tensor views do: a slice
 * keeps the names of the dims it does not index away, a reshape keeps
 * them only when no dim changes, a transpose permutes them. The names were
 * taken from the slice's steps (a step of -1 read outside them, and y[::-1]
 * * z of axes W became an outer product: 1000 for 200, gradients 100). */
TEST(axes_slices_and_reshapes_of_nodes)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(b ? "cpu" : "ref");
        ot_tensor *y = data(be, OT_SHAPE(4), "W", 71), *z = data(be, OT_SHAPE(4), "W", 72);
        ot_tensor *x = data(be, OT_SHAPE(2, 3, 4), "N,C,W", 73), *x2 = data(be, OT_SHAPE(2, 3), "N,C", 74);
        ot_pool *p = ot_pool_push();
        double yv[4], zv[4], want = 0, got, g[4];
        CHECK_INT(ot_get(y, yv), 0);
        CHECK_INT(ot_get(z, zv), 0);
        for (int i = 0; i < 4; i++) want += yv[3 - i] * zv[i];
        ot_node *f = ot_sum(ot_mul(ot_slice_node(y, OT_RANGE(OT_NONE, OT_NONE, -1)), z));
        ot_tensor *o = ot_eval(f);
        CHECK(o != NULL);
        CHECK_INT(ot_get(o, &got), 0);
        CHECK_NEAR(got, want, 1e-12);
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        CHECK_INT(ot_autodiff_grad_host(ad, y, g), 0);
        for (int i = 0; i < 4; i++) CHECK_NEAR(g[i], zv[3 - i], 1e-12);
        ot_autodiff_free(ad);
        ot_tensor_free(o);
        CHECK_STR(ot_node_axes(ot_slice_node(x, OT_ALL, OT_IDX(1))), "N,W");
        CHECK_STR(ot_node_axes(ot_slice_node(x, OT_RANGE(0, 1))), "N,C,W");
        CHECK_STR(ot_node_axes(ot_slice_node(x2, OT_ALL, OT_RANGE(OT_NONE, OT_NONE, 2))), "N,C");
        CHECK(ot_node_axes(ot_reshape_node(x2, OT_SHAPE(6))) == NULL);
        CHECK_STR(ot_node_axes(ot_reshape_node(x2, OT_SHAPE(2, 3))), "N,C");
        CHECK_STR(ot_node_axes(ot_T(x2)), "C,N");
        /* a reduction by name over the slice: over N, not W */
        ot_tensor *s = ot_eval(ot_sum(ot_slice_node(x, OT_ALL, OT_IDX(1)), .axes = "N"));
        double xv[24], sv[4];
        CHECK(s != NULL);
        CHECK_INT(ot_get(x, xv), 0);
        CHECK_INT(ot_get(s, sv), 0);
        for (int w = 0; w < 4; w++) CHECK_NEAR(sv[w], xv[4 + w] + xv[12 + 4 + w], 1e-12);
        ot_tensor_free(s);
        ot_pool_pop(p);
        ot_tensor *all[] = {y, z, x, x2};
        for (int i = 0; i < 4; i++) ot_tensor_free(all[i]);
        ot_backend_free(be);
    }
}

TEST(axes_errors_name_the_axes)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = data(be, OT_SHAPE(2, 3, 4, 5), "N,C,H,W", 17);
    ot_tensor *u = data(be, OT_SHAPE(2, 3), NULL, 18);
    ot_tensor *c4 = data(be, OT_SHAPE(4), "C", 19);
    ot_tensor *w = data(be, OT_SHAPE(3, 4, 6), "C,H,K", 20);
    ot_tensor *w5 = data(be, OT_SHAPE(3, 7, 5, 6), "C,H,W,K", 21);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_sum(x, .axes = "C,Q") == NULL);
    CHECK_ERR(OT_EINVAL, "sum: no axis 'Q' in (N,C,H,W)", "test_axes.c:");
    ot_clear_error();
    CHECK(ot_sum(x, .axes = "C,C") == NULL);
    CHECK_ERR(OT_EINVAL, "sum", "axis 'C' is named twice");
    ot_clear_error();
    CHECK(ot_sum(x, .axis = 1, .axes = "C") == NULL);
    CHECK_ERR(OT_EINVAL, "give .axis or .axes, not both");
    ot_clear_error();
    CHECK(ot_sum(u, .axes = "N") == NULL);
    CHECK_ERR(OT_EINVAL, "sum", "(shape (2,3)) has no axis names");
    ot_clear_error();
    CHECK(ot_softmax(x, .axes = "C,H") == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "softmax", "one axis", "'C,H' of (N,C,H,W)");
    ot_clear_error();
    CHECK(ot_argmax(x, .axes = "C,H") == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "argmax");
    ot_clear_error();
    CHECK(ot_build_axes_at(OT_OP_EXP, ot_tensor_node(x), NULL, NULL, "C", "f.c", 3) == NULL);
    CHECK_ERR(OT_EINVAL, "exp", "takes no axes", "f.c:3");
    ot_clear_error();
    CHECK(ot_sum((ot_node *)NULL, .axes = "C") == NULL);
    CHECK_ERR(OT_ENULL, "sum");
    /* alignment: one name, two lengths */
    ot_clear_error();
    CHECK(ot_add(x, c4) == NULL);
    CHECK_ERR(OT_ESHAPE, "add: axis 'C' has length 3 in operand 1 (N,C,H,W) and 4 in operand 2 (C)");
    /* dot */
    ot_clear_error();
    CHECK(ot_dot_axes(w, x, "C,K") == NULL);
    CHECK_ERR(OT_EINVAL, "dot_axes", "axis 'K' is not in operand 2 (N,C,H,W)");
    ot_clear_error();
    CHECK(ot_dot_axes(w, x, "C,Q") == NULL);
    CHECK_ERR(OT_EINVAL, "axis 'Q' is not in operand 1 (C,H,K)");
    ot_clear_error();
    CHECK(ot_dot_axes(w, x, "C") == NULL);
    CHECK_ERR(OT_EINVAL, "axis 'H' is in both operands", "not contracted");
    ot_clear_error();
    CHECK(ot_dot_axes(w5, x, "C,H,W") == NULL);
    CHECK_ERR(OT_ESHAPE, "axis 'H' has length 7 in operand 1 (C,H,W,K) and 4 in operand 2");
    ot_clear_error();
    CHECK(ot_dot_axes(u, x, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "operand 1 (shape (2,3)) has no axis names");
    ot_clear_error();
    CHECK(ot_dot_axes(c4, w, NULL) == NULL);
    CHECK_ERR(OT_ESHAPE, "axis 'C' has length 4");
    ot_clear_error();
    /* expressions and several free axes: reshapes of expressions, the same
     * values as the dot of the evaluated operand (a tensor, viewed) */
    ot_tensor *ex = ot_eval(ot_exp(x));
    CHECK_INT(ot_tensor_set_axes(ex, "N,C,H,W"), 0);
    same_values(ot_dot_axes(w, ot_exp(x), "C,H"), ot_dot_axes(w, ex, "C,H"), "K,N,W");
    ot_tensor *v = data(be, OT_SHAPE(3, 4), "C,H", 22);
    ot_tensor *ev = ot_eval(ot_exp(v));
    CHECK_INT(ot_tensor_set_axes(ev, "C,H"), 0);
    same_values(ot_dot_axes(ot_exp(v), w, "C,H"), ot_dot_axes(ev, w, "C,H"), "K");
    ot_tensor_free(ex);
    ot_tensor_free(ev);
    ot_clear_error();
    CHECK(ot_dot_axes(v, ot_tensor_node(u), NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "operand 2 (shape (2,3)) has no axis names");
    ot_tensor *z = data(be, OT_SHAPE(2), "Z", 23);
    ot_clear_error();
    CHECK(ot_dot_axes(v, z, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "no axes to contract");
    ot_clear_error();
    CHECK(ot_dot_axes(v, (ot_node *)NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "dot_axes", "operand 2 is NULL");
    ot_pool_pop(p);
    ot_tensor *all[] = {x, u, c4, w, w5, v, z};
    for (int i = 0; i < 7; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* The largest |autodiff - central difference| of cost w.r.t. t. */
static double fd_worst(ot_node *cost, ot_tensor *t)
{
    int64_t n = ot_tensor_numel(t);
    double *h = malloc(sizeof *h * (size_t)n), *g = malloc(sizeof *g * (size_t)n), worst = 0;
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    CHECK(ad != NULL);
    CHECK_INT(ot_autodiff_grad_host(ad, t, g), 0);
    ot_autodiff_free(ad);
    CHECK_INT(ot_get(t, h), 0);
    for (int64_t i = 0; i < n; i++) {
        double x0 = h[i], e = 1e-6, f[2];
        for (int s = 0; s < 2; s++) {
            h[i] = x0 + (s ? -e : e);
            ot_set(t, h);
            ot_tensor *r = ot_eval(cost);
            ot_get(r, &f[s]);
            ot_tensor_free(r);
        }
        h[i] = x0;
        ot_set(t, h);
        double d = fabs(g[i] - (f[0] - f[1]) / (2 * e));
        if (!(d <= worst)) worst = d;
    }
    free(h);
    free(g);
    return worst;
}

static void gradients(const char *bname)
{
    ot_backend *be = backend(bname);
    ot_tensor *w = data(be, OT_SHAPE(3, 2, 2, 4), "C,H,W,K", 24);
    ot_tensor *x = data(be, OT_SHAPE(5, 3, 2, 2), "N,C,H,W", 25);
    ot_tensor *b = data(be, OT_SHAPE(3), "C", 26);
    ot_tensor *t = data(be, OT_SHAPE(4, 5), "K,N", 27);
    ot_pool *p = ot_pool_push();
    /* dot over C,H,W; a bias aligned by name; reductions over name sets */
    ot_node *xb = ot_tanh(ot_add(x, b));
    ot_node *y = ot_tanh(ot_dot_axes(w, x, "C,H,W"));
    ot_node *cost = ot_add(ot_sum(ot_sqr(ot_sub(y, t)), .axes = "K,N"),
                           ot_sum(ot_mean(ot_mul(xb, xb), .axes = "H,W"), .axes = "N,C"));
    /* an expression aligned by name into the middle: a product with ones */
    cost = ot_add(cost, ot_sum(ot_mul(ot_tanh(x), ot_exp(b))));
    CHECK(cost != NULL);
    CHECK(fd_worst(cost, w) < 1e-7);
    CHECK(fd_worst(cost, x) < 1e-7);
    CHECK(fd_worst(cost, b) < 1e-7);
    /* b read through a view with size-1 dims inserted: still a tree (a
     * program's backprop can use it), not the scatter's tensor */
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    ot_node *gb = ot_autodiff_grad(ad, b);
    CHECK(gb && ot_node_kind(gb) == OT_NODE_OP);
    ot_autodiff_free(ad);
    /* softmax by name, and a dot of expressions */
    ot_node *sm = ot_logsoftmax(ot_dot_axes(ot_exp(ot_sum(w, .axes = "H,W")), ot_tanh(t), "K"),
                                .axes = "C");
    ot_node *c2 = ot_sum(ot_mul(sm, ot_sum(x, .axes = "H,W", .keepdims = false)));
    CHECK(c2 != NULL);
    CHECK_STR(ot_node_axes(sm), "C,N");
    CHECK(fd_worst(c2, w) < 1e-7);
    CHECK(fd_worst(c2, t) < 1e-7);
    ot_pool_pop(p);
    ot_tensor *all[] = {w, x, b, t};
    for (int i = 0; i < 4; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(axes_gradients_match_differences)
{
    gradients("ref");
    gradients("cpu");
}

/* Names never change a plan, and a tree without them prints as before. */
TEST(axes_leave_unnamed_trees_alone)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = data(be, OT_SHAPE(4, 3), NULL, 28), *b = data(be, OT_SHAPE(3), NULL, 29);
    ot_tensor_set_name(x, "x");
    ot_tensor_set_name(b, "b");
    ot_pool *p = ot_pool_push();
    ot_node *f = ot_sum(ot_tanh(ot_add(x, b)), 1);
    char *pp = test__capture(ot_pp, f), *pr = test__capture(ot_print, f);
    char *ex = test__capture(ot_explain, f);
    CHECK_STR(pp, "(sum (tanh (x + b)) axis=1)");
    CHECK(pr && !strstr(pr, "x("));
    CHECK_INT(ot_tensor_set_axes(x, "N,C"), 0);
    CHECK_INT(ot_tensor_set_axes(b, "C"), 0);
    ot_node *g = ot_sum(ot_tanh(ot_add(x, b)), .axes = "C");
    char *pp2 = test__capture(ot_pp, g), *ex2 = test__capture(ot_explain, g);
    CHECK_STR(pp2, "(sum (tanh (x(N,C) + b(C))) axis=1)");
    CHECK_STR(ex2, ex);
    CHECK_INT(ot_tensor_set_axes(x, NULL), 0);
    CHECK_INT(ot_tensor_set_axes(b, NULL), 0);
    char *pp3 = test__capture(ot_pp, f);
    CHECK_STR(pp3, pp);
    free(pp), free(pr), free(ex), free(pp2), free(ex2), free(pp3);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(b);
    ot_backend_free(be);
}

/* The gradient w.r.t. a tensor read through views that only permute its
 * dims and insert size-1 ones (what alignment by name makes) is a tree. */
TEST(axes_gradient_through_inserted_dims_is_a_tree)
{
    ot_backend *be = backend("ref");
    ot_tensor *w = data(be, OT_SHAPE(3, 4), NULL, 34), *s = data(be, OT_SHAPE(), NULL, 35);
    ot_tensor *v1 = ot_reshape(w, OT_SHAPE(1, 3, 1, 4)), *wt = ot_transpose(w, NULL);
    ot_tensor *v2 = ot_reshape(wt, OT_SHAPE(4, 1, 3)), *s2 = ot_reshape(s, OT_SHAPE(1, 1));
    ot_pool *p = ot_pool_push();
    ot_node *cost = ot_add(ot_sum(ot_mul(ot_tanh(v1), s2)), ot_sum(ot_sqr(ot_mul(v2, wt))));
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    ot_node *gw = ot_autodiff_grad(ad, w), *gs = ot_autodiff_grad(ad, s);
    CHECK(gw && ot_node_kind(gw) == OT_NODE_OP);
    CHECK(gs && ot_node_kind(gs) == OT_NODE_OP && ot_node_shape(gs).ndim == 0);
    ot_autodiff_free(ad);
    CHECK(fd_worst(cost, w) < 1e-7);
    CHECK(fd_worst(cost, s) < 1e-7);
    ot_pool_pop(p);
    ot_tensor *all[] = {w, s, v1, wt, v2, s2};
    for (int i = 0; i < 6; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* Every allocation of naming, aligning and building by name failed in
 * turn: OT_ENOMEM or a right result, never a crash or a leak (ASan). */
TEST(axes_allocation_failures)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = data(be, OT_SHAPE(2, 3, 4), NULL, 36), *b = data(be, OT_SHAPE(3), NULL, 37);
    ot_tensor *w = data(be, OT_SHAPE(3, 4, 5), NULL, 38);
    for (int n = 1; n < 10000; n++) {
        char xa[64], ba[64], wa[64], la[64];   /* names not interned yet */
        snprintf(xa, sizeof xa, "N,C%d,L%d", n, n);
        snprintf(la, sizeof la, "L%d", n);
        snprintf(ba, sizeof ba, "C%d", n);
        snprintf(wa, sizeof wa, "C%d,L%d,K", n, n);
        unsigned long before = ot__alloc_failures();
        ot_pool *p = ot_pool_push();
        ot__alloc_fail_at(n);
        int rc = ot_tensor_set_axes(x, xa);
        if (!rc) rc = ot_tensor_set_axes(b, ba);
        if (!rc) rc = ot_tensor_set_axes(w, wa);
        ot_node *t[4] = {NULL};
        if (!rc) {
            t[0] = ot_add(x, b);
            t[1] = ot_add(ot_exp(b), x);
            t[2] = ot_dot_axes(w, x, NULL);
            t[3] = ot_sum(t[1], .axes = la);
        }
        ot__alloc_fail_at(0);
        bool failed = ot__alloc_failures() != before;
        CHECK(!rc || rc == OT_ENOMEM);
        for (int i = 0; i < 4 && !rc; i++) {
            CHECK(t[i] || ot_errcode() == OT_ENOMEM);
            if (!t[i] && ot_errcode() != OT_ENOMEM) fprintf(stderr, "n=%d t%d: %s\n", n, i, ot_errmsg());
        }
        if (!failed) CHECK(!rc && t[0] && t[1] && t[2] && t[3]);
        ot_pool_pop(p);
        if (p == NULL || !failed) break;
    }
    ot_tensor_free(x);
    ot_tensor_free(b);
    ot_tensor_free(w);
    ot_backend_free(be);
}
