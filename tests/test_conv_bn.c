/*
 * test_conv_bn.c - the library's rule set "conv_bn" (src/front/rules_conv_bn.c):
 * the folded tree against the tree as written on random convolutions (1-D
 * to 3-D, groups, strides, padding, dilation, with and without the conv's
 * bias and the batch norm's weight and bias) in f64 (1e-12) and f32 on ref
 * and cpu; the trees it must leave alone (Filter); its ot_explain lines,
 * the option and OT_REWRITE; gradients; folded values following the
 * tensors; and the errors around it.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

/* ---- helpers ---------------------------------------------------------------- */

static uint32_t rng_next(uint32_t *r)
{
    *r = *r * 1664525u + 1013904223u;
    return *r >> 8;
}

/* A tensor of shape s and dtype dt with values in [lo, hi), from seed. */
static ot_tensor *rnd(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed, double lo, double hi)
{
    return test__uniform(be, s, dt, seed, lo, hi);
}

/* tree's values as doubles (a new array of *n), on the backend of its leaves. */
static double *values(ot_node *tree, int64_t *n)
{
    ot_tensor *t = tree ? ot_eval(ot_cast(tree, OT_F64)) : NULL;
    CHECK(t != NULL);
    if (!t) return NULL;
    *n = ot_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    ot_get(t, v);
    ot_tensor_free(t);
    return v;
}

/* The largest |a - b| / max(1, |a|, |b|) of two trees' values. */
static double rel_diff(ot_node *a, ot_node *b)
{
    int64_t na = 0, nb = -1;
    double *va = values(a, &na), *vb = values(b, &nb), worst = 0;
    CHECK_INT(na, nb);
    for (int64_t i = 0; va && vb && i < na && na == nb; i++) {
        double m = fmax(1, fmax(fabs(va[i]), fabs(vb[i])));
        worst = fmax(worst, isnan(va[i]) || isnan(vb[i]) ? INFINITY : fabs(va[i] - vb[i]) / m);
    }
    free(va);
    free(vb);
    return worst;
}

/* One convolution and its batch norm's parameters. */
typedef struct layer {
    int nsp, n, ci, co, k, groups, stride, pad, dilation, size;
    bool conv_bias, bn_weight, bn_bias;
    double eps;
} layer;

typedef struct built {
    ot_tensor *t[8];   /* x, w, bias, mean, var, gamma, beta (NULL when absent) */
} built;

static void built_free(built *b)
{
    for (int i = 0; i < 8; i++) ot_tensor_free(b->t[i]);
}

/* bn(conv(x, w) [+ bias]) in inference mode, its tensors into *b. */
static ot_node *conv_bn_tree(ot_backend *be, ot_dtype dt, const layer *L, uint32_t seed, built *b)
{
    ot_shape xs = {.ndim = 2 + L->nsp, .dims = {L->n, L->ci}};
    ot_shape ws = {.ndim = 2 + L->nsp, .dims = {L->co, L->ci / L->groups}};
    for (int d = 0; d < L->nsp; d++) {
        xs.dims[2 + d] = L->size - d;   /* unequal dims */
        ws.dims[2 + d] = L->k;
    }
    memset(b, 0, sizeof *b);
    b->t[0] = rnd(be, xs, dt, seed, -1, 1);
    b->t[1] = rnd(be, ws, dt, seed + 1, -0.5, 0.5);
    ot_shape c = OT_SHAPE(L->co);
    if (L->conv_bias) b->t[2] = rnd(be, c, dt, seed + 2, -1, 1);
    b->t[3] = rnd(be, c, dt, seed + 3, -1, 1);
    b->t[4] = rnd(be, c, dt, seed + 4, 0.25, 2);
    if (L->bn_weight) b->t[5] = rnd(be, c, dt, seed + 5, -2, 2);
    if (L->bn_bias) b->t[6] = rnd(be, c, dt, seed + 6, -1, 1);
    ot_conv_opts o = {.stride = {L->stride}, .dilation = {L->dilation}, .pad = L->pad,
                      .groups = L->groups};
    ot_node *y = ot_conv_at(ot_tensor_node(b->t[0]), ot_tensor_node(b->t[1]), &o, __FILE__,
                            __LINE__);
    if (b->t[2]) {
        ot_shape bs = {.ndim = xs.ndim, .dims = {1, L->co}};
        for (int d = 2; d < bs.ndim; d++) bs.dims[d] = 1;
        y = ot_add(y, ot_reshape_node(b->t[2], bs));
    }
    return ot_batch_norm(y, .running_mean = b->t[3], .running_var = b->t[4], .weight = b->t[5],
                         .bias = b->t[6], .eps = L->eps);
}

/* A random layer whose conv is valid: an input at least the dilated kernel. */
static layer random_layer(uint32_t *r, int nsp)
{
    layer L = {.nsp = nsp, .n = 1 + (int)(rng_next(r) % 2), .groups = 1 + (int)(rng_next(r) % 3)};
    L.ci = L.groups * (1 + (int)(rng_next(r) % 2));
    L.co = rng_next(r) % 4 == 0 ? L.ci : L.groups * (1 + (int)(rng_next(r) % 3));   /* depthwise */
    L.k = 1 + (int)(rng_next(r) % 3);
    L.stride = 1 + (int)(rng_next(r) % 2);
    L.dilation = 1 + (int)(rng_next(r) % 2);
    L.pad = (int)(rng_next(r) % 3);
    L.size = L.dilation * (L.k - 1) + 1 + nsp + (int)(rng_next(r) % (nsp == 3 ? 2 : 5));
    L.conv_bias = rng_next(r) % 2, L.bn_weight = rng_next(r) % 3 != 0,
    L.bn_bias = rng_next(r) % 3 != 0;
    static const double eps[] = {1e-5, 1e-3, 0.1, 0};
    L.eps = eps[rng_next(r) % 4];
    return L;
}

/* Random layers on ref and cpu in dtype dt: each folds (the rewritten tree
 * is new, one conv under one add at its root) and agrees within tol. */
static void fold_matches(ot_dtype dt, double tol, uint32_t seed)
{
    const char *names[] = {"ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = test__backend(names[bi], 1);
        uint32_t r = seed;
        double worst = 0;
        for (int i = 0; i < 18 && be; i++) {
            layer L = random_layer(&r, 1 + i % 3);
            ot_pool *pool = ot_pool_push();
            built b;
            ot_node *y = conv_bn_tree(be, dt, &L, r, &b), *f = ot_rewrite(y, "conv_bn");
            CHECK(y && f && f != y);
            if (f && f != y) {
                CHECK_INT(ot_node_op(f), OT_OP_ADD);
                CHECK_INT(ot_node_op(ot_node_child(f, 0)), OT_OP_CONV);
                double d = rel_diff(y, f);
                worst = fmax(worst, d);
                if (d > tol)
                    test__fail(__FILE__, __LINE__, "%s %s layer %d (%d-D, groups %d, stride %d, "
                               "pad %d, dilation %d): relative difference %g > %g", names[bi],
                               ot_dtype_name(dt), i, L.nsp, L.groups, L.stride, L.pad, L.dilation,
                               d, tol);
            }
            ot_pool_pop(pool);
            built_free(&b);
        }
        printf("  %s %s: worst relative difference %.3g\n", names[bi], ot_dtype_name(dt), worst);
        ot_backend_free(be);
    }
}

/* ---- values --------------------------------------------------------------------- */

TEST(conv_bn_fold_f64)
{
    fold_matches(OT_F64, 1e-12, 101);
}

TEST(conv_bn_fold_f32)
{
    fold_matches(OT_F32, 2e-5, 202);
}

/* Two conv + BN + relu layers in a row: both fold, and a backend with the
 * set names both firings in ot_explain and gives the values of the tree as
 * written on one without. */
typedef struct two {
    built b;
    ot_tensor *w2, *m2, *v2, *out;
} two;

static ot_node *two_layers(ot_backend *be, two *t)
{
    layer L = {.nsp = 2, .n = 2, .ci = 3, .co = 3, .k = 3, .groups = 1, .stride = 1, .pad = 1,
               .dilation = 1, .size = 6, .conv_bias = true, .bn_weight = true, .bn_bias = true,
               .eps = 1e-5};
    ot_node *y1 = ot_relu(conv_bn_tree(be, OT_F64, &L, 7, &t->b));
    t->w2 = rnd(be, OT_SHAPE(3, 3, 3, 3), OT_F64, 8, -0.5, 0.5);
    t->m2 = rnd(be, OT_SHAPE(3), OT_F64, 9, -1, 1);
    t->v2 = rnd(be, OT_SHAPE(3), OT_F64, 10, 0.5, 2);
    ot_node *y2 = ot_relu(ot_batch_norm(ot_conv(y1, t->w2, .pad = 1), .running_mean = t->m2,
                                        .running_var = t->v2));
    t->out = ot_empty(be, ot_node_shape(y2), OT_F64);
    CHECK_INT(ot_assign(t->out, y2), 0);
    return y2;
}

static void two_free(two *t)
{
    built_free(&t->b);
    ot_tensor *ts[] = {t->w2, t->m2, t->v2, t->out};
    for (int i = 0; i < 4; i++) ot_tensor_free(ts[i]);
}

static int count(const char *text, const char *sub)
{
    int n = 0;
    for (const char *p = text ? strstr(text, sub) : NULL; p; p = strstr(p + 1, sub)) n++;
    return n;
}

TEST(conv_bn_two_layers)
{
    ot_backend *off = test__backend("cpu", 1);
    ot_backend *on = ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "conv_bn", .threads = 2});
    CHECK(off && on);
    ot_pool *pool = ot_pool_push();
    two a, f;
    ot_node *ya = two_layers(off, &a), *yf = two_layers(on, &f);
    char *text = test__capture(ot_explain, yf);
    CHECK_INT(count(text, "rewrite: conv_bn (set 'conv_bn') at tests/test_conv_bn.c:"), 2);
    free(text);
    text = test__capture(ot_explain, ya);
    CHECK(text && !strstr(text, "rewrite:"));
    free(text);
    CHECK(rel_diff(ot_tensor_node(a.out), ot_tensor_node(f.out)) <= 1e-12);
    ot_node *r = ot_rewrite(ya, "conv_bn");
    CHECK(r && r != ya && rel_diff(ya, r) <= 1e-12);
    ot_pool_pop(pool);
    two_free(&a);
    two_free(&f);
    ot_backend_free(off);
    ot_backend_free(on);
}

/* The same tree after the rule set saw it: nothing fired. */
static void untouched(ot_node *tree, const char *what)
{
    char *before = test__capture(ot_print, tree);
    ot_node *r = ot_rewrite(tree, "conv_bn");
    char *after = test__capture(ot_print, tree);
    if (!tree || r != tree)
        test__fail(__FILE__, __LINE__, "%s was rewritten (%s)", what, ot_errmsg());
    CHECK_STR(after, before);
    free(before);
    free(after);
}

/* Filter's cases, and what the selector refuses: nothing changes. */
TEST(conv_bn_filter)
{
    ot_backend *be = test__backend("ref", 1);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = rnd(be, OT_SHAPE(2, 3, 5, 5), OT_F32, 1, -1, 1);
    ot_tensor *x1 = rnd(be, OT_SHAPE(4, 3, 6), OT_F32, 2, -1, 1);
    ot_tensor *w = rnd(be, OT_SHAPE(4, 3, 3, 3), OT_F32, 3, -1, 1);
    ot_tensor *w1 = rnd(be, OT_SHAPE(4, 3, 3), OT_F32, 4, -1, 1);
    ot_tensor *wt = rnd(be, OT_SHAPE(3, 4, 3, 3), OT_F32, 5, -1, 1);
    ot_tensor *m = rnd(be, OT_SHAPE(4), OT_F32, 6, -1, 1);
    ot_tensor *v = rnd(be, OT_SHAPE(4), OT_F32, 7, 1, 2);
    ot_tensor *h = rnd(be, OT_SHAPE(3), OT_F32, 8, 1, 2);   /* the conv's H, 3 */
    ot_tensor *m64 = rnd(be, OT_SHAPE(1, 4, 1, 1), OT_F64, 9, -1, 1);
    ot_tensor *one = rnd(be, OT_SHAPE(1, 1, 1, 1), OT_F32, 10, 1, 2);
    ot_node *c = ot_conv(x, w), *c1 = ot_conv(x1, w1), *upd[2];
    ot_node *m4 = ot_reshape_node(m, OT_SHAPE(1, 4, 1, 1));
    ot_node *v4 = ot_reshape_node(v, OT_SHAPE(1, 4, 1, 1));
    ot_node *inv = ot_rsqrt(ot_add(v4, 1e-5));

    untouched(ot_relu(c), "a conv alone");
    untouched(ot_add(c, m4), "a conv and its bias, no batch norm");
    untouched(ot_sub(c, m4), "a conv less a mean, no normalising product");
    untouched(ot_batch_norm(c, .running_mean = m, .running_var = v, .training = true,
                            .updates = upd),
              "a training batch norm (2-D)");
    untouched(ot_batch_norm(c1, .running_mean = m, .running_var = v, .training = true,
                            .updates = upd),
              "a training batch norm (1-D)");
    untouched(ot_batch_norm(c, .running_mean = h, .running_var = h, .axis = 2),
              "a batch norm along another axis");
    untouched(ot_mul(ot_sub(c, ot_mul(m4, 2.0)), inv), "a mean that is no tensor");
    untouched(ot_mul(ot_sub(c, m4), ot_rsqrt(ot_add(ot_mul(v4, 1.0), 1e-5))),
              "a variance that is no tensor");
    untouched(ot_mul(ot_sub(c, m4), ot_rsqrt(ot_add(v4, m4))), "eps that is no constant");
    untouched(ot_mul(ot_sub(c, ot_mean(c, .axis = 0, .keepdims = true)), inv),
              "a mean of the conv's own output");
    untouched(ot_mul(ot_sub(c, one), inv), "one mean for every channel");
    untouched(ot_mul(ot_sub(c, m64), ot_cast(inv, OT_F64)), "statistics of another dtype");
    untouched(ot_batch_norm(ot_conv_transpose(x, wt), .running_mean = m, .running_var = v),
              "a transposed conv");
    untouched(ot_batch_norm(ot_relu(c), .running_mean = m, .running_var = v),
              "a batch norm after something else");
    untouched(ot_add(ot_batch_norm(c, .running_mean = m, .running_var = v),
                     ot_batch_norm(c, .running_mean = v, .running_var = v)),
              "a conv read by two batch norms (two roots)");
    CHECK(ot_errcode() == OT_OK);
    ot_pool_pop(pool);
    ot_tensor *ts[] = {x, x1, w, w1, wt, m, v, h, m64, one};
    for (int i = 0; i < 10; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
}

/* What folds beyond ot_batch_norm's own tree: statistics as (C, 1, 1)
 * tensors, the product's factors swapped, the conv's output or the
 * normalised value read elsewhere too (they stay, the root is replaced). */
TEST(conv_bn_other_spellings)
{
    ot_backend *be = test__backend("cpu", 1);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = rnd(be, OT_SHAPE(2, 4, 3, 6, 5), OT_F64, 1, -1, 1);
    ot_tensor *w = rnd(be, OT_SHAPE(6, 2, 2, 3, 1), OT_F64, 2, -1, 1);
    ot_tensor *m = rnd(be, OT_SHAPE(6, 1, 1, 1), OT_F64, 3, -1, 1);
    ot_tensor *v = rnd(be, OT_SHAPE(6, 1, 1, 1), OT_F64, 4, 0.5, 2);
    ot_tensor *g = rnd(be, OT_SHAPE(1, 6, 1, 1, 1), OT_F64, 5, -1, 1);
    ot_node *c = ot_conv(x, w, .groups = 2, .stride = {1, 2, 1}, .pad_lo = {1, 0, 2},
                         .pad_hi = {0, 1, 0});
    ot_node *d = ot_sub(c, m);
    ot_node *bn = ot_add(ot_mul(g, ot_mul(ot_rsqrt(ot_add(1e-3, v)), d)), g);
    ot_node *trees[] = {bn, ot_add(ot_relu(bn), c), ot_mul(bn, d)};
    for (int i = 0; i < 3; i++) {
        ot_node *r = ot_rewrite(trees[i], "conv_bn");
        CHECK(r && r != trees[i]);
        double diff = rel_diff(trees[i], r);
        if (diff > 1e-12)
            test__fail(__FILE__, __LINE__, "tree %d: relative difference %g", i, diff);
    }
    ot_pool_pop(pool);
    ot_tensor *ts[] = {x, w, m, v, g};
    for (int i = 0; i < 5; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
}

/* The lines ot_explain prints, the option, OT_REWRITE, and the set next to
 * "fuse". */
TEST(conv_bn_messages)
{
    unsetenv("OT_REWRITE");
    ot_backend *on = ot_backend_new("ref", &(ot_backend_opts){.rewrite = "conv_bn"});
    CHECK(on != NULL);
    if (!on) return;
    CHECK_STR(ot_backend_options(on).rewrite, "conv_bn");
    ot_pool *pool = ot_pool_push();
    layer L = {.nsp = 1, .n = 1, .ci = 2, .co = 2, .k = 2, .groups = 1, .stride = 1,
               .dilation = 1, .size = 4, .eps = 1e-5};
    built b;
    ot_node *y = conv_bn_tree(on, OT_F32, &L, 3, &b);
    char *text = test__capture(ot_explain, y), want[64];
    snprintf(want, sizeof want, "rewrite: conv_bn (set 'conv_bn') at %s:%d\n", ot_node_file(y),
             ot_node_line(y));
    CHECK(text && strncmp(text, want, strlen(want)) == 0);
    free(text);
    text = test__capture(ot_explain, ot_relu(ot_tensor_node(b.t[0])));
    CHECK(text && strncmp(text, "rewrite: nothing fired (sets conv_bn)\n", 38) == 0);
    free(text);
    setenv("OT_REWRITE", "fuse,conv_bn", 1);
    ot_backend *env = ot_backend_new("cpu", NULL);
    unsetenv("OT_REWRITE");
    CHECK(env && strcmp(ot_backend_options(env).rewrite, "fuse,conv_bn") == 0);
    ot_pool_pop(pool);
    built_free(&b);
    ot_backend_free(env);
    ot_backend_free(on);
}

static bool never(const ot_node *n, void *user)
{
    (void)n, (void)user;
    return false;
}

static ot_node *nothing(const ot_rewrite_match *m, void *user)
{
    (void)m, (void)user;
    return NULL;
}

TEST(conv_bn_errors)
{
    unsetenv("OT_REWRITE");
    static const ot_rewrite_rule rules[] = {{.name = "again", .select = never, .create = nothing}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"conv_bn", 1, rules}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "\"conv_bn\" is registered already");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.rewrite = "conv-bn"}) == NULL);
    CHECK_ERR(OT_EINVAL, "no rule set named \"conv-bn\"", "registered: fuse, conv_bn");
    CHECK(ot_rewrite(NULL, "conv_bn") == NULL);
    CHECK_ERR(OT_ENULL, "tree is NULL");
    ot_backend *be = test__backend("ref", 1);
    ot_tensor *x = rnd(be, OT_SHAPE(1, 2, 4), OT_F32, 1, -1, 1);
    ot_pool *pool = ot_pool_push();
    CHECK(ot_rewrite(ot_relu(x), "conv_bn,conv_bn") == NULL);
    CHECK_ERR(OT_EINVAL, "names \"conv_bn\" twice");
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Gradients through a backend with the set equal those without: the
 * forward values inside the gradient trees fold, nothing else changes. */
TEST(conv_bn_gradients)
{
    ot_backend *bes[2] = {test__backend("cpu", 1),
                          ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "conv_bn"})};
    layer L = {.nsp = 2, .n = 2, .ci = 2, .co = 4, .k = 3, .groups = 2, .stride = 2, .pad = 1,
               .dilation = 1, .size = 7, .conv_bias = true, .bn_weight = true, .bn_bias = true,
               .eps = 1e-3};
    built b[2];
    ot_tensor *grads[2][4], *ge[2];
    ot_pool *pool = ot_pool_push();
    for (int k = 0; k < 2; k++) {
        ot_node *y = ot_relu(conv_bn_tree(bes[k], OT_F64, &L, 11, &b[k]));
        ge[k] = rnd(bes[k], ot_node_shape(y), OT_F64, 12, -1, 1);
        ot_autodiff *ad = ot_autodiff_new(y, ot_tensor_node(ge[k]));
        CHECK(ad != NULL);
        ot_tensor *wrt[4] = {b[k].t[0], b[k].t[1], b[k].t[3], b[k].t[5]};   /* x, w, mean, gamma */
        for (int i = 0; i < 4; i++)
            grads[k][i] = ot_empty(bes[k], ot_tensor_shape(wrt[i]), OT_F64);
        CHECK_INT(ot_autodiff_backprop(ad, 4, wrt, grads[k]), 0);
        ot_autodiff_free(ad);
    }
    for (int i = 0; i < 4; i++) {
        double d = rel_diff(ot_tensor_node(grads[0][i]), ot_tensor_node(grads[1][i]));
        if (d > 1e-12) test__fail(__FILE__, __LINE__, "gradient %d: relative difference %g", i, d);
    }
    ot_pool_pop(pool);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) ot_tensor_free(grads[k][i]);
        ot_tensor_free(ge[k]);
        built_free(&b[k]);
        ot_backend_free(bes[k]);
    }
}

/* The folded weights are a tree over the tensors, not values taken once:
 * after the statistics change, the same tree (its plan cached) gives the
 * new values. */
TEST(conv_bn_follows_tensors)
{
    ot_backend *bes[2] = {test__backend("cpu", 1),
                          ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "conv_bn"})};
    layer L = {.nsp = 3, .n = 1, .ci = 2, .co = 3, .k = 2, .groups = 1, .stride = 1, .pad = 0,
               .dilation = 1, .size = 4, .bn_weight = true, .eps = 1e-5};
    built b[2];
    ot_tensor *out[2];
    ot_pool *pool = ot_pool_push();
    ot_node *y[2];
    for (int k = 0; k < 2; k++) {
        y[k] = conv_bn_tree(bes[k], OT_F32, &L, 21, &b[k]);
        out[k] = ot_empty(bes[k], ot_node_shape(y[k]), OT_F32);
    }
    for (int round = 0; round < 2; round++) {
        float mean[3] = {0.5f * (float)round, -1, 2}, gamma[3] = {1, (float)round + 2, -3};
        for (int k = 0; k < 2; k++) {
            if (round) {
                CHECK_INT(ot_set(b[k].t[3], mean), 0);
                CHECK_INT(ot_set(b[k].t[5], gamma), 0);
            }
            CHECK_INT(ot_assign(out[k], y[k]), 0);
        }
        CHECK(rel_diff(ot_tensor_node(out[0]), ot_tensor_node(out[1])) <= 2e-6);
    }
    ot_pool_pop(pool);
    for (int k = 0; k < 2; k++) {
        ot_tensor_free(out[k]);
        built_free(&b[k]);
        ot_backend_free(bes[k]);
    }
}
