/*
 * test_concat.c - issue 17 item 6: slices and reshapes of expressions,
 * concat, stack and split. Values against NumPy's rules (tensor views and
 * copies built by hand) and bitwise between ref and cpu (fused and not),
 * bad input, gradients against finite differences in f64 (alone and in an
 * LSTM-style gate split), ot_explain's views and in-place parts, and chains
 * 100,000 deep.
 */
#include "test.h"

#include <stdlib.h>

static ot_backend *backend(const char *name, int fusion) { return test__backend(name, fusion); }

/* A tensor of shape and dtype with small integer-valued data (exact in
 * every dtype), different per seed. */
static ot_tensor *data(ot_backend *be, ot_shape s, ot_dtype dt, int seed)
{
    return test__ints(be, s, dt, seed, 23, 11, 1.0);
}

/* t's values as doubles (caller frees). */
static double *values(const ot_tensor *t)
{
    ot_tensor *c = ot_empty(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);
    CHECK_INT(ot_assign(c, ot_tensor_node((ot_tensor *)t)), 0);
    int64_t n = ot_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    CHECK_INT(ot_get(c, v), 0);
    ot_tensor_free(c);
    return v;
}

/* The tree's value equals want's (shape, dtype and values). */
static void check_value(const char *what, ot_node *tree, const ot_tensor *want)
{
    ot_tensor *got = ot_eval(tree);
    if (!got) {
        test__fail(__FILE__, __LINE__, "%s: %s", what, ot_errmsg());
        ot_clear_error();
        return;
    }
    ot_shape gs = ot_tensor_shape(got), ws = ot_tensor_shape(want);
    bool same_shape = gs.ndim == ws.ndim;
    for (int d = 0; same_shape && d < gs.ndim; d++) same_shape = gs.dims[d] == ws.dims[d];
    if (!same_shape || ot_tensor_dtype(got) != ot_tensor_dtype(want)) {
        test__fail(__FILE__, __LINE__, "%s: shape or dtype differs", what);
    } else {
        double *g = values(got), *w = values(want);
        int64_t n = ot_tensor_numel(got);
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&g[i], &w[i], sizeof g[i]) != 0) {
                test__fail(__FILE__, __LINE__, "%s: [%lld] is %.17g, expected %.17g", what,
                           (long long)i, g[i], w[i]);
                break;
            }
        free(g);
        free(w);
    }
    ot_tensor_free(got);
}

static const char *const BACKENDS[] = {"ref", "cpu", "cpu"};
static const int FUSION[] = {OT_FUSION_ON, OT_FUSION_ON, OT_FUSION_OFF};
static const ot_dtype DTYPES[] = {OT_F32, OT_F64, OT_I32};

/* Index tuples of a (4, 5, 6) operand, NumPy's x[...] for each. */
#define R OT_RANGE
static const ot_index SLICES[][3] = {
    {R(1, 3), OT_ALL, OT_IDX(2)},
    {R(OT_NONE, OT_NONE, -1), OT_ALL, OT_ALL},
    {OT_IDX(-1), R(5, 0, -2), R(-1, OT_NONE, -3)},
    {R(3, 3), OT_ALL, OT_ALL},
    {OT_ALL, R(0, 5, 2), R(1, 100)},
    {R(-100, 2), OT_IDX(0), R(OT_NONE, OT_NONE, 4)},
};

TEST(concat_slice_of_expressions_is_numpy_basic_indexing)
{
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 3; t++) {
            ot_backend *be = backend(BACKENDS[b], FUSION[b]);
            ot_tensor *x = data(be, OT_SHAPE(4, 5, 6), DTYPES[t], 1);
            ot_tensor *w = data(be, OT_SHAPE(6, 6), DTYPES[t], 2);
            ot_pool *p = ot_pool_push();
            ot_node *e = ot_add(x, x);
            ot_tensor *ev = ot_eval(e), *xt = ot_transpose(x, (int[]){2, 1, 0});
            /* slices move below elementwise ops, broadcast operands included */
            ot_tensor *col = data(be, OT_SHAPE(5, 1), DTYPES[t], 4), *row = data(be, OT_SHAPE(6), DTYPES[t], 5);
            ot_node *bc = ot_sub(ot_mul(ot_neg(x), col), ot_add(row, 2));
            ot_tensor *bv = ot_eval(bc);
            for (size_t k = 0; k < sizeof SLICES / sizeof *SLICES; k++) {
                ot_tensor *v = ot_slice_n(ev, 3, SLICES[k]);
                check_value("slice of x + x", ot_slice_node_n(e, 3, SLICES[k], __FILE__, __LINE__), v);
                ot_tensor_free(v);
                v = ot_slice_n(bv, 3, SLICES[k]);
                check_value("slice of broadcasts", ot_slice_node_n(bc, 3, SLICES[k], __FILE__, __LINE__), v);
                ot_tensor_free(v);
                v = ot_slice_n(x, 3, SLICES[k]);
                check_value("slice of a leaf", ot_slice_node_n(ot_tensor_node(x), 3, SLICES[k],
                                                               __FILE__, __LINE__), v);
                ot_tensor_free(v);
            }
            /* a view as the operand, a slice of a slice, fewer indices */
            ot_tensor *v = ot_slice(xt, R(1, 6, 2), OT_IDX(3));
            check_value("slice of a view", ot_slice_node(ot_neg(ot_neg(xt)), R(1, 6, 2), OT_IDX(3)), v);
            ot_tensor_free(v);
            ot_tensor *v1 = ot_slice(ev, R(3, 0, -1)), *v2 = ot_slice(v1, OT_ALL, R(1, 4));
            check_value("slice of a slice", ot_slice_node(ot_slice_node(e, R(3, 0, -1)), OT_ALL, R(1, 4)), v2);
            ot_tensor_free(v2);
            ot_tensor_free(v1);
            if (DTYPES[t] != OT_I32) {   /* a slice of a dot's result */
                ot_node *d = ot_dot(ot_reshape_node(x, OT_SHAPE(20, 6)), w);
                ot_tensor *dv = ot_eval(d), *dc = ot_slice(dv, R(2, 19, 3), R(4, 1, -1));
                check_value("slice of a dot", ot_slice_node(d, R(2, 19, 3), R(4, 1, -1)), dc);
                ot_tensor_free(dc);
                ot_tensor_free(dv);
            }
            ot_pool_pop(p);
            ot_tensor_free(bv);
            ot_tensor_free(col);
            ot_tensor_free(row);
            ot_tensor_free(xt);
            ot_tensor_free(ev);
            ot_tensor_free(w);
            ot_tensor_free(x);
            ot_backend_free(be);
        }
}

TEST(concat_reshape_of_expressions_is_row_major)
{
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 3; t++) {
            ot_backend *be = backend(BACKENDS[b], FUSION[b]);
            ot_tensor *x = data(be, OT_SHAPE(4, 6), DTYPES[t], 3);
            ot_pool *p = ot_pool_push();
            ot_node *e = ot_sub(x, 1);
            ot_tensor *ev = ot_eval(e), *want = ot_reshape(ev, OT_SHAPE(3, 2, -1));
            check_value("reshape of x - 1", ot_reshape_node(e, OT_SHAPE(3, 2, -1)), want);
            ot_tensor_free(want);
            /* a transposed layout no strides reshape: copied, still row-major */
            ot_tensor *tv = ot_eval(ot_T(e)), *tw = ot_reshape(tv, OT_SHAPE(-1));
            check_value("reshape of a transpose", ot_reshape_node(ot_T(e), OT_SHAPE(-1)), tw);
            ot_tensor *xt = ot_transpose(x, NULL), *xc = ot_copy(xt), *xw = ot_reshape(xc, OT_SHAPE(24));
            check_value("reshape of a transposed leaf", ot_reshape_node(ot_T(x), OT_SHAPE(24)), xw);
            ot_tensor_free(xw);
            ot_tensor_free(xc);
            ot_tensor_free(xt);
            ot_tensor *sv = ot_slice(ev, R(0, 4, 2), R(5, OT_NONE, -2)), *sc = ot_copy(sv);
            ot_tensor *sw = ot_reshape(sc, OT_SHAPE(6));
            check_value("reshape of a strided slice",
                        ot_reshape_node(ot_slice_node(e, R(0, 4, 2), R(5, OT_NONE, -2)), OT_SHAPE(6)), sw);
            ot_tensor *sum = ot_eval(ot_sum(sw, 0));
            check_value("reshape, then a reduction",
                        ot_sum(ot_reshape_node(ot_slice_node(e, R(0, 4, 2), R(5, OT_NONE, -2)),
                                               OT_SHAPE(6)), 0), sum);
            ot_tensor_free(sum);
            ot_pool_pop(p);
            ot_tensor_free(sw);
            ot_tensor_free(sc);
            ot_tensor_free(sv);
            ot_tensor_free(tw);
            ot_tensor_free(tv);
            ot_tensor_free(ev);
            ot_tensor_free(x);
            ot_backend_free(be);
        }
}

/* want[..., at:at+len along axis, ...] = part, for a hand-made concat. */
static void put(ot_tensor *want, int axis, int64_t at, const ot_tensor *part)
{
    ot_index idx[OT_MAX_DIMS];
    int nd = ot_tensor_ndim(want);
    for (int d = 0; d < nd; d++) idx[d] = OT_ALL;
    idx[axis] = R(at, at + ot_tensor_shape(part).dims[axis]);
    ot_tensor *v = ot_slice_n(want, nd, idx);
    CHECK_INT(ot_assign(v, ot_tensor_node((ot_tensor *)part)), 0);
    ot_tensor_free(v);
}

TEST(concat_values_dtypes_views_and_empty_parts)
{
    for (int b = 0; b < 3; b++)
        for (int axis = 0; axis < 2; axis++) {
            ot_backend *be = backend(BACKENDS[b], FUSION[b]);
            int64_t len[4] = {3, 0, 2, 4};   /* sizes along the axis */
            ot_dtype dts[4] = {OT_F32, OT_F32, OT_I32, OT_F32};
            ot_tensor *parts[4], *vals[4];
            ot_pool *p = ot_pool_push();
            ot_node *nodes[4];
            for (int i = 0; i < 4; i++) {
                ot_shape s = axis ? OT_SHAPE(5, len[i]) : OT_SHAPE(len[i], 5);
                parts[i] = data(be, s, dts[i], i);
                nodes[i] = i == 3 ? ot_exp(ot_mul(parts[i], 0.25)) : ot_tensor_node(parts[i]);
                vals[i] = ot_eval(nodes[i]);
            }
            /* a broadcast view and a transposed view as parts too */
            ot_tensor *one = data(be, axis ? OT_SHAPE(5, 1) : OT_SHAPE(1, 5), OT_F32, 9);
            ot_tensor *bc = ot_broadcast_to(one, axis ? OT_SHAPE(5, 3) : OT_SHAPE(3, 5));
            ot_tensor *sq = data(be, OT_SHAPE(5, 5), OT_F32, 7), *tr = ot_transpose(sq, NULL);
            ot_node *all[6] = {nodes[0], nodes[1], nodes[2], nodes[3], ot_tensor_node(bc),
                               ot_tensor_node(tr)};
            ot_tensor *src[6] = {vals[0], vals[1], vals[2], vals[3], bc, tr};
            int64_t total = 3 + 0 + 2 + 4 + 3 + 5;
            ot_tensor *want = ot_empty(be, axis ? OT_SHAPE(5, total) : OT_SHAPE(total, 5), OT_F32);
            for (int i = 0, at = 0; i < 6; at += (int)ot_tensor_shape(src[i]).dims[axis], i++)
                put(want, axis, at, src[i]);
            check_value("concat at the root", ot_concat(6, all, axis - 2), want);
            ot_tensor *wn = ot_eval(ot_neg(ot_tensor_node(want)));
            check_value("concat inside a tree", ot_neg(ot_concat(6, all, axis)), wn);
            /* into an output directly: in place, and the same bits */
            ot_tensor *out = ot_empty(be, ot_tensor_shape(want), OT_F32);
            CHECK_INT(ot_assign(out, ot_concat(6, all, axis)), 0);
            check_value("concat assigned", ot_tensor_node(out), want);
            ot_pool_pop(p);
            ot_tensor *free_list[] = {out, wn, want, tr, sq, bc, one};
            for (size_t i = 0; i < sizeof free_list / sizeof *free_list; i++) ot_tensor_free(free_list[i]);
            for (int i = 0; i < 4; i++) {
                ot_tensor_free(parts[i]);
                ot_tensor_free(vals[i]);
            }
            ot_backend_free(be);
        }
}

TEST(concat_stack_and_split_match_numpy)
{
    for (int b = 0; b < 3; b++) {
        ot_backend *be = backend(BACKENDS[b], FUSION[b]);
        ot_tensor *x = data(be, OT_SHAPE(2, 3), OT_F64, 1), *y = data(be, OT_SHAPE(2, 3), OT_F64, 2);
        ot_pool *p = ot_pool_push();
        ot_node *parts[2] = {ot_tensor_node(x), ot_mul(y, 2.0)};
        ot_tensor *yy = ot_eval(parts[1]);
        for (int axis = -3; axis < 3; axis++) {   /* np.stack([x, 2y], axis) */
            int ax = axis < 0 ? axis + 3 : axis;
            ot_shape s = OT_SHAPE(2, 3);
            ot_shape ws = {.ndim = 3};
            for (int d = 0, j = 0; d < 3; d++) ws.dims[d] = d == ax ? 2 : s.dims[j++];
            ot_tensor *want = ot_empty(be, ws, OT_F64);
            ot_index idx[3] = {OT_ALL, OT_ALL, OT_ALL};
            for (int i = 0; i < 2; i++) {
                idx[ax] = OT_IDX(i);
                ot_tensor *v = ot_slice_n(want, 3, idx);
                CHECK_INT(ot_assign(v, ot_tensor_node(i ? yy : x)), 0);
                ot_tensor_free(v);
            }
            check_value("stack", ot_stack_nodes(2, parts, axis), want);
            ot_tensor_free(want);
        }
        /* split: equal parts and given sizes, each a slice */
        ot_node *c = ot_concat(2, parts, 1), *out[3];
        CHECK_INT(ot_split(c, 1, 3, NULL, out), 0);
        ot_tensor *cv = ot_eval(c);
        for (int i = 0; i < 3; i++) {
            ot_tensor *v = ot_slice(cv, OT_ALL, R(2 * i, 2 * i + 2));
            check_value("split equal", out[i], v);
            ot_tensor_free(v);
        }
        CHECK_INT(ot_split(c, -1, 3, ((int64_t[]){1, 0, 5}), out), 0);
        ot_tensor *v = ot_slice(cv, OT_ALL, R(1, 1));
        check_value("split empty part", out[1], v);
        ot_tensor_free(v);
        v = ot_slice(cv, OT_ALL, R(1, 6));
        check_value("split sized part", out[2], v);
        ot_tensor_free(v);
        /* the split parts concatenated again give the whole */
        check_value("concat of a split", ot_concat(3, out, 1), cv);
        ot_tensor_free(cv);
        ot_tensor_free(yy);
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be);
    }
}

/* A builder call that fails with code and a message holding each string. */
#define REFUSED(call, code, ...)                                              \
    do {                                                                      \
        CHECK((call) == NULL);                                                \
        CHECK_ERR((code), __VA_ARGS__);                                       \
        ot_clear_error();                                                     \
    } while (0)

TEST(concat_bad_input)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    ot_tensor *x = data(be, OT_SHAPE(2, 3), OT_F32, 1), *y = data(be, OT_SHAPE(2, 4), OT_F32, 2);
    ot_tensor *z = data(be, OT_SHAPE(2, 3, 1), OT_F32, 3);
    ot_pool *p = ot_pool_push();
    ot_node *xy[2] = {ot_tensor_node(x), ot_tensor_node(y)}, *out[3] = {NULL};
    ot_clear_error();
    ot_node *xz[2] = {ot_tensor_node(x), ot_tensor_node(z)}, *xx[2] = {xy[0], xy[0]};
    ot_node *x_null[2] = {xy[0], NULL}, *scalar[1] = {ot_const(1.0)};
    REFUSED(ot_concat(0, xy, 0), OT_EINVAL, "concat", "at least one part", "n = 0");
    REFUSED(ot_concat(2, NULL, 0), OT_ENULL, "parts is NULL");
    REFUSED(ot_concat(2, x_null, 0), OT_ENULL, "part 1 is NULL");
    REFUSED(ot_concat(2, xy, 0), OT_ESHAPE, "part 1 has shape (2,4)", "part 0 has shape (2,3)",
            "axis 0");
    REFUSED(ot_concat(2, xz, 0), OT_ESHAPE, "part 1 has shape (2,3,1)", "of 3 dimensions");
    REFUSED(ot_concat(2, xy, 2), OT_EINVAL, "axis 2 is out of bounds");
    REFUSED(ot_concat(1, scalar, 0), OT_ESHAPE, "zero-dimensional");
    REFUSED(ot_stack_nodes(2, xy, 0), OT_ESHAPE, "stack", "part 1 has shape (2,4)", "one shape");
    REFUSED(ot_stack_nodes(2, xx, 3), OT_EINVAL, "axis 3 is out of bounds");
    REFUSED(ot_slice_node(x, OT_IDX(2)), OT_EINVAL, "index 2 is out of bounds for axis 0 with size 2");
    REFUSED(ot_slice_node(x, OT_ALL, R(0, 3, 0)), OT_EINVAL, "step cannot be zero");
    REFUSED(ot_slice_node(x, OT_ALL, OT_ALL, OT_ALL), OT_EINVAL, "3 indices for an operand of 2");
    REFUSED(ot_slice_node((ot_node *)NULL, OT_ALL), OT_ENULL, "operand is NULL");
    REFUSED(ot_reshape_node(x, OT_SHAPE(4, 2)), OT_ESHAPE, "cannot reshape operand of shape (2,3)",
            "(4,2)");
    REFUSED(ot_reshape_node(x, OT_SHAPE(-1, -1)), OT_EINVAL, "second -1");
    /* a product past int64, a 0 after it: refused without the signed
     * overflow UBSan saw in the element count */
    REFUSED(ot_reshape_node(x, OT_SHAPE(INT64_MAX, INT64_MAX, 0)), OT_ESHAPE, "cannot reshape");
    REFUSED(ot_reshape_node(x, OT_SHAPE(INT64_MAX, 3, -1)), OT_ESHAPE, "cannot reshape");
    /* bindings through ot_build_at are checked as well */
    ot_args a = {.axis = OT_AXIS_ALL, .perm = {1, 1}, .shape = {2, {2, 3}}, .start = {1, 0}};
    REFUSED(ot_build_at(OT_OP_SLICE, xy[0], NULL, &a, __FILE__, __LINE__), OT_EINVAL,
            "reads outside operand shape (2,3)");
    /* split returns a code, and every out[i] NULL */
    CHECK_INT(ot_split(x, 1, 2, NULL, out), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "does not divide into 2 equal parts");
    CHECK(out[0] == NULL && out[1] == NULL);
    ot_clear_error();
    CHECK_INT(ot_split(x, 1, 2, ((int64_t[]){1, 1}), out), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "sizes sum to 2", "has 3");
    ot_clear_error();
    CHECK_INT(ot_split(x, 1, 2, ((int64_t[]){-1, 4}), out), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "size 0 is -1");
    ot_clear_error();
    CHECK_INT(ot_split(x, 5, 1, NULL, out), OT_EINVAL);
    CHECK_INT(ot_split(x, 0, 0, NULL, out), OT_EINVAL);
    CHECK_INT(ot_split(x, 0, 1, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_split((ot_node *)NULL, 0, 1, NULL, out), OT_ENULL);
    ot_clear_error();
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(z);
    ot_backend_free(be);
}

/* ---- gradients ------------------------------------------------------------ */

/* d sum(tree * r)/d x against central differences, in f64 on cpu. */
static void fd_check(const char *what, ot_node *tree, int n, ot_tensor *const xs[])
{
    if (!tree) {
        test__fail(__FILE__, __LINE__, "%s: %s", what, ot_errmsg());
        ot_clear_error();
        return;
    }
    ot_backend *be = ot_tensor_backend(xs[0]);
    ot_tensor *r = data(be, ot_node_shape(tree), OT_F64, 5);
    ot_node *loss = ot_sum(ot_mul(tree, r));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    ot_tensor *lv = ot_empty(be, OT_SHAPE(), OT_F64);
    for (int k = 0; k < n; k++) {
        int64_t m = ot_tensor_numel(xs[k]);
        double *g = malloc(sizeof *g * (size_t)(m ? m : 1)), *xv = malloc(sizeof *xv * (size_t)(m ? m : 1));
        CHECK_INT(ot_autodiff_grad_host(ad, xs[k], g), 0);
        CHECK_INT(ot_get(xs[k], xv), 0);
        for (int64_t i = 0; i < m; i++) {
            double v = xv[i], lp, lm, eps = 1e-6;
            xv[i] = v + eps;
            ot_set(xs[k], xv);
            ot_assign(lv, loss);
            ot_get(lv, &lp);
            xv[i] = v - eps;
            ot_set(xs[k], xv);
            ot_assign(lv, loss);
            ot_get(lv, &lm);
            xv[i] = v;
            ot_set(xs[k], xv);
            double num = (lp - lm) / (2 * eps);
            if (!(fabs(num - g[i]) <= 1e-6 + 1e-6 * fabs(num))) {
                test__fail(__FILE__, __LINE__, "%s: d/d input %d [%lld]: analytic %.10g, numeric %.10g",
                           what, k, (long long)i, g[i], num);
                break;
            }
        }
        free(g);
        free(xv);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(lv);
    ot_tensor_free(r);
}

TEST(concat_gradients_match_finite_differences)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    ot_tensor *x = data(be, OT_SHAPE(4, 5, 6), OT_F64, 1), *y = data(be, OT_SHAPE(4, 2, 6), OT_F64, 2);
    ot_pool *p = ot_pool_push();
    ot_node *sx = ot_tanh(ot_mul(x, 0.1)), *sy = ot_sin(y);
    for (size_t k = 0; k < sizeof SLICES / sizeof *SLICES; k++)
        fd_check("slice", ot_slice_node_n(sx, 3, SLICES[k], __FILE__, __LINE__), 1, &x);
    fd_check("slice of a leaf, steps", ot_slice_node(x, R(3, 0, -2), R(0, 5, 3)), 1, &x);
    fd_check("reshape", ot_exp(ot_reshape_node(ot_mul(sx, 0.5), OT_SHAPE(6, -1))), 1, &x);
    fd_check("reshape of a transpose", ot_reshape_node(ot_T(sx), OT_SHAPE(-1)), 1, &x);
    ot_node *xy[2] = {sx, sy};
    ot_tensor *both[2] = {x, y};
    fd_check("concat", ot_sqr(ot_concat(2, xy, 1)), 2, both);
    fd_check("concat, a part twice", ot_concat(3, ((ot_node *[]){sx, sy, sx}), -2), 2, both);
    ot_node *xx[2] = {sx, ot_mul(sx, sx)};
    fd_check("stack", ot_stack_nodes(2, xx, 1), 1, &x);
    ot_node *parts[3];
    CHECK_INT(ot_split(sx, 1, 3, ((int64_t[]){2, 1, 2}), parts), 0);
    fd_check("split", ot_add(ot_mul(parts[0], parts[2]), parts[1]), 1, &x);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* One LSTM step with a single (B, 4H) product split into four gates. */
static ot_node *lstm_step(ot_tensor *x, ot_tensor *h, ot_tensor *c, ot_tensor *w, ot_tensor *u)
{
    ot_node *z = ot_add(ot_dot(x, w), ot_dot(h, u)), *gate[4];
    if (ot_split(z, 1, 4, NULL, gate)) return NULL;
    ot_node *cn = ot_add(ot_mul(ot_sig(gate[1]), c), ot_mul(ot_sig(gate[0]), ot_tanh(gate[2])));
    return ot_mul(ot_sig(gate[3]), ot_tanh(cn));
}

TEST(concat_lstm_gate_split_gradients)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    enum { B = 3, I = 4, H = 5 };
    ot_tensor *x = data(be, OT_SHAPE(B, I), OT_F64, 1), *h = data(be, OT_SHAPE(B, H), OT_F64, 2);
    ot_tensor *c = data(be, OT_SHAPE(B, H), OT_F64, 3), *w = data(be, OT_SHAPE(I, 4 * H), OT_F64, 4);
    ot_tensor *u = data(be, OT_SHAPE(H, 4 * H), OT_F64, 6);
    ot_pool *p = ot_pool_push();
    for (int i = 0; i < 2; i++)   /* small weights: the gates stay away from saturation */
        ot_assign(i ? u : w, ot_mul(i ? u : w, 0.05));
    ot_tensor *ins[5] = {w, u, x, h, c};
    fd_check("lstm gates", lstm_step(x, h, c, w, u), 5, ins);
    ot_pool_pop(p);
    for (int i = 0; i < 5; i++) ot_tensor_free(ins[i]);
    ot_backend_free(be);
}

/* ---- plans ---------------------------------------------------------------- */

TEST(concat_explain_shows_views_and_in_place_parts)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    ot_tensor *x = data(be, OT_SHAPE(8, 4), OT_F32, 1), *w = data(be, OT_SHAPE(4, 16), OT_F32, 2);
    ot_tensor *out = ot_empty(be, OT_SHAPE(8, 12), OT_F32);
    ot_pool *p = ot_pool_push();
    /* a split of a dot: the dot's temporary read at four offsets, no copy */
    ot_node *g[4];
    CHECK_INT(ot_split(ot_dot(x, w), 1, 4, NULL, g), 0);
    ot_node *tree = ot_add(ot_mul(ot_sig(g[0]), ot_tanh(g[1])), ot_mul(ot_sig(g[2]), g[3]));
    ot_tensor *o4 = ot_empty(be, OT_SHAPE(8, 4), OT_F32);
    char *s = test__explain_many(1, &o4, &tree);
    ot_tensor_free(o4);
    CHECK(s && strstr(s, "plan: 2 kernels") && strstr(s, "dot 8x4 . 4x16") &&
          strstr(s, "<- t0 t0@4 t0@8 t0@12 ->"));
    if (s && !strstr(s, "t0@12")) fprintf(stderr, "%s", s);
    free(s);
    /* a concat assigned: each part written into its place of the output */
    ot_node *parts[3] = {ot_tensor_node(x), ot_exp(x), ot_mul(x, 2.0f)};
    ot_node *cat = ot_concat(3, parts, 1);
    s = test__explain_many(1, &out, &cat);
    CHECK(s && strstr(s, "0 temporaries") && strstr(s, "-> out0 ") && strstr(s, "-> out0@4 ") &&
          strstr(s, "-> out0@8 "));
    if (s && !strstr(s, "0 temporaries")) fprintf(stderr, "%s", s);
    free(s);
    /* GEMMs write their parts too: a concat of dots is no copy */
    ot_tensor *w2 = data(be, OT_SHAPE(4, 4), OT_F32, 3), *w3 = data(be, OT_SHAPE(4, 4), OT_F32, 4);
    ot_node *dots[3] = {ot_dot(x, w2), ot_neg(x), ot_dot(x, w3)};
    cat = ot_concat(3, dots, 1);
    s = test__explain_many(1, &out, &cat);
    CHECK(s && strstr(s, "0 temporaries") && strstr(s, "(gemm) <- leaf0 leaf1 -> out0\n") &&
          strstr(s, "(gemm) <- leaf0 leaf2 -> out0@8\n"));
    if (s && !strstr(s, "0 temporaries")) fprintf(stderr, "%s", s);
    free(s);
    ot_backend *rb = backend("ref", OT_FUSION_ON);
    ot_tensor *xr = data(rb, OT_SHAPE(8, 4), OT_F32, 1), *wr = data(rb, OT_SHAPE(4, 4), OT_F32, 3);
    ot_tensor *wr3 = data(rb, OT_SHAPE(4, 4), OT_F32, 4);
    ot_node *rparts[3] = {ot_dot(xr, wr), ot_neg(xr), ot_dot(xr, wr3)};
    ot_tensor *want = ot_eval(ot_concat(3, rparts, 1));
    CHECK_INT(ot_assign(out, cat), 0);
    double *got = values(out), *exp = values(want);
    for (int i = 0; i < 96; i++) CHECK_NEAR(got[i], exp[i], 1e-6);
    free(got);
    free(exp);
    ot_tensor_free(want);
    ot_tensor_free(xr);
    ot_tensor_free(wr);
    ot_tensor_free(wr3);
    ot_backend_free(rb);
    ot_tensor_free(w2);
    ot_tensor_free(w3);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(concat_deep_chains_do_not_recurse)
{
    enum { DEPTH = TEST_HEIGHT };
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(b ? "cpu" : "ref", OT_FUSION_ON);
        ot_tensor *x = data(be, OT_SHAPE(2), OT_F32, 1);
        ot_pool *p = ot_pool_push();
        /* a slice chain: the vector reversed DEPTH times (even: itself) */
        ot_node *s = ot_tensor_node(x);
        for (int i = 0; i < DEPTH && s; i++) s = ot_slice_node(s, R(OT_NONE, OT_NONE, -1));
        check_value("slice chain", s, x);
        /* a concat chain, one more element per node (cpu: ref copies n^2) */
        if (b) {
            ot_node *c = ot_tensor_node(x);
            ot_node *one = ot_slice_node(x, R(0, 1));
            for (int i = 0; i < DEPTH && c; i++) c = ot_concat(2, ((ot_node *[]){c, one}), 0);
            ot_tensor *v = ot_eval(c);
            CHECK(v != NULL);
            if (v) {
                float *all = malloc(sizeof *all * (DEPTH + 2)), x0[2];
                CHECK_INT(ot_tensor_numel(v), DEPTH + 2);
                CHECK_INT(ot_get(v, all), 0);
                CHECK_INT(ot_get(x, x0), 0);
                CHECK(all[0] == x0[0] && all[1] == x0[1] && all[DEPTH] == x0[0] &&
                      all[DEPTH + 1] == x0[0]);
                free(all);
            }
            ot_tensor_free(v);
        }
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_backend_free(be);
    }
}

/* A program plans layout ops like any node: a gate split of a dot, put back
 * together by a concat into the output, and its backprop, bitwise the same
 * trees run by ot_assign_many. */
TEST(concat_programs_plan_layout_ops)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    ot_program *prog = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(prog, "x", OT_SHAPE(4, 8), OT_F64);
    ot_tensor *w = ot_program_variable(prog, "w", OT_SHAPE(8, 12), OT_F64,
                                       OT_INIT_UNIFORM(-0.5, 0.5, 3));
    ot_tensor *out = ot_empty(be, OT_SHAPE(4, 12), OT_F64), *gw = ot_empty(be, OT_SHAPE(8, 12), OT_F64);
    ot_pool *p = ot_pool_push();
    ot_node *g[3], *tree = NULL;
    CHECK_INT(ot_split(ot_dot(x, w), 1, 3, NULL, g), 0);
    tree = ot_concat(3, ((ot_node *[]){ot_sig(g[0]), ot_tanh(g[1]), ot_slice_node(g[2], R(3, OT_NONE, -1))}), 1);
    ot_node *loss = ot_sum(ot_mul(tree, tree));
    CHECK_INT(ot_program_assign(prog, out, tree), 0);
    CHECK_INT(ot_program_backprop(prog, loss, 1, &w, &gw), 0);
    CHECK_INT(ot_program_compile(prog), 0);
    double host[32];
    for (int i = 0; i < 32; i++) host[i] = (i % 7) * 0.25 - 0.75;
    CHECK_INT(ot_program_run(prog, 1, &OT_BIND_DATA("x", host, sizeof host)), 0);
    /* the same trees by hand, x set to the same data */
    CHECK_INT(ot_set(x, host), 0);
    ot_tensor *o2 = ot_empty(be, OT_SHAPE(4, 12), OT_F64);
    CHECK_INT(ot_assign(o2, tree), 0);
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    ot_tensor *g2 = ot_autodiff_grad_tensor(ad, w);
    CHECK(g2 && memcmp(ot_tensor_data(o2), ot_tensor_data(out), 48 * sizeof(double)) == 0);
    CHECK(g2 && memcmp(ot_tensor_data(g2), ot_tensor_data(gw), 96 * sizeof(double)) == 0);
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    ot_tensor_free(g2);
    ot_tensor_free(o2);
    ot_program_free(prog);
    ot_tensor_free(out);
    ot_tensor_free(gw);
    ot_backend_free(be);
}

/* Assignments whose output is a leaf the tree reads through a slice: a
 * rotation and a reversal in place read the old values, as NumPy's
 * x[:] = np.concatenate([x[1:], x[:1]]) does. */
TEST(concat_in_place_over_a_leaf_reads_old_values)
{
    for (int b = 0; b < 3; b++) {
        ot_backend *be = backend(BACKENDS[b], FUSION[b]);
        ot_tensor *x = ot_array(be, OT_SHAPE(5), OT_F32, (float[]){1, 2, 3, 4, 5});
        ot_pool *p = ot_pool_push();
        ot_node *rot[2] = {ot_slice_node(x, R(1, OT_NONE)), ot_slice_node(x, R(0, 1))};
        CHECK_INT(ot_assign(x, ot_concat(2, rot, 0)), 0);
        float v[5];
        CHECK_INT(ot_get(x, v), 0);
        CHECK(v[0] == 2 && v[1] == 3 && v[2] == 4 && v[3] == 5 && v[4] == 1);
        CHECK_INT(ot_assign(x, ot_slice_node(x, R(OT_NONE, OT_NONE, -1))), 0);
        CHECK_INT(ot_get(x, v), 0);
        CHECK(v[0] == 1 && v[1] == 5 && v[2] == 4 && v[3] == 3 && v[4] == 2);
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_backend_free(be);
    }
}
