/*
 * test_variables.c - trainable tensors and ot_variables (src/front/variables.c),
 * and gradients w.r.t. a tensor the tree reads through views
 * (src/front/autodiff.c): checked against central finite differences in f64 on
 * "ref" and "cpu" (a 4-D w read through a (16, 4) reshape, stepped and
 * overlapping slices, a transpose next to a slice, a broadcast), and every
 * bad input.
 */
#include "test.h"
#include "front.h"   /* ot__autodiff_grad_tree, the programs' variant */

#include <stdlib.h>

static const char *const backends[] = {"ref", "cpu"};

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = 2});
    CHECK(be != NULL);
    return be;
}

static void fill(double *h, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        h[i] = -1.0 + 2.0 * (double)(seed >> 40) / (double)(1u << 24);
    }
}

static double value(ot_node *f)
{
    double v = NAN;
    ot_tensor *t = ot_eval(f);
    CHECK(t && ot_get(t, &v) == 0);
    ot_tensor_free(t);
    return v;
}

/* ot_autodiff_grad of f w.r.t. w against central differences of f. */
static void check_fd(ot_node *f, ot_tensor *w)
{
    int64_t n = ot_tensor_numel(w);
    double *h = malloc(sizeof *h * (size_t)n), *g = malloc(sizeof *g * (size_t)n);
    CHECK(ot_get(w, h) == 0);
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad && ot_autodiff_grad_host(ad, w, g) == 0);
    ot_autodiff_free(ad);
    const double e = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double x = h[i];
        h[i] = x + e;
        ot_set(w, h);
        double up = value(f);
        h[i] = x - e;
        ot_set(w, h);
        double down = value(f);
        h[i] = x;
        ot_set(w, h);
        double fd = (up - down) / (2 * e);
        if (!test__close(g[i], fd, 1e-6))
            test__fail(__FILE__, __LINE__, "element %lld: autodiff %.12g, differences %.12g",
                       (long long)i, g[i], fd);
    }
    free(h);
    free(g);
}

static ot_tensor *random_f64(ot_backend *be, ot_shape s, uint64_t seed)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    double *h = malloc(sizeof *h * (size_t)n);
    fill(h, n, seed);
    ot_tensor *t = ot_array(be, s, OT_F64, h);
    free(h);
    return t;
}

/* The seed's deriv example: w (C, H, W, N) = (4, 2, 2, 4) contracted with
 * x over C, H, W as a dot of x (5, 16) and w seen as (16, 4). */
TEST(grad_through_reshape_4d)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b]);
        ot_pool *pool = ot_pool_push();
        ot_tensor *w = random_f64(be, OT_SHAPE(4, 2, 2, 4), 1);
        ot_tensor *x = random_f64(be, OT_SHAPE(5, 16), 2);
        ot_tensor *w2 = ot_reshape(w, OT_SHAPE(16, 4));
        check_fd(ot_sum(ot_tanh(ot_dot(x, w2))), w);
        ot_tensor_free(w2);
        ot_tensor_free(x);
        ot_tensor_free(w);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

TEST(grad_through_slices)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b]);
        ot_pool *pool = ot_pool_push();
        ot_tensor *w = random_f64(be, OT_SHAPE(6, 5), 3);
        /* stepped, negative-stepped, and two overlapping row ranges */
        ot_tensor *s1 = ot_slice(w, OT_RANGE(0, 6, 2), OT_RANGE(1, 5, 2));
        ot_tensor *s2 = ot_slice(w, OT_RANGE(1, 5, 3), OT_RANGE(OT_NONE, OT_NONE, -1));
        ot_tensor *a = ot_slice(w, OT_RANGE(0, 4)), *c = ot_slice(w, OT_RANGE(2, 6));
        check_fd(ot_add(ot_add(ot_sum(ot_sin(s1)), ot_sum(ot_sqr(s2))), ot_sum(ot_mul(a, c))), w);
        /* w itself, its transpose and a row of it, all in one tree */
        ot_tensor *sq = ot_slice(w, OT_RANGE(0, 5)), *t = ot_transpose(sq, NULL);
        ot_tensor *row = ot_slice(w, OT_IDX(5));
        check_fd(ot_add(ot_sum(ot_mul(sq, ot_exp(t))), ot_sum(ot_mul(row, w))), w);
        ot_tensor *v[] = {s1, s2, a, c, sq, t, row, w};
        for (int i = 0; i < 8; i++) ot_tensor_free(v[i]);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

TEST(grad_through_broadcast)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b]);
        ot_pool *pool = ot_pool_push();
        ot_tensor *w = random_f64(be, OT_SHAPE(4), 4);
        ot_tensor *x = random_f64(be, OT_SHAPE(3, 4), 5);
        ot_tensor *bw = ot_broadcast_to(w, OT_SHAPE(3, 4));
        ot_tensor *part = ot_slice(w, OT_RANGE(1, 3));
        check_fd(ot_add(ot_sum(ot_sin(ot_mul(bw, x))), ot_sum(ot_sqr(part))), w);
        /* a broadcast view's own elements alias: no gradient maps back */
        ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(part, 2.0)), NULL);
        CHECK(ad && ot_autodiff_grad(ad, bw) == NULL);
        CHECK_INT(ot_errcode(), OT_EUNSUPPORTED);
        CHECK(strstr(ot_errmsg(), "broadcast") != NULL);
        ot_autodiff_free(ad);
        ot_tensor_free(part);
        ot_tensor_free(bw);
        ot_tensor_free(x);
        ot_tensor_free(w);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

/* The scatter is computed when asked: the same values as a gradient
 * assigned leaf by leaf into views of a zero tensor by hand, bit for bit. */
TEST(grad_through_views_bitwise_by_hand)
{
    ot_backend *be = backend("cpu");
    ot_pool *pool = ot_pool_push();
    ot_tensor *w = random_f64(be, OT_SHAPE(6), 6);
    ot_tensor *a = ot_slice(w, OT_RANGE(0, 4)), *c = ot_slice(w, OT_RANGE(2, 6));
    ot_node *f = ot_sum(ot_add(ot_sin(a), ot_sqr(c)));
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    ot_tensor *g = ot_autodiff_grad_tensor(ad, w);
    ot_tensor *acc = ot_zeros(be, OT_SHAPE(6), OT_F64);
    ot_tensor *ha = ot_slice(acc, OT_RANGE(0, 4)), *hc = ot_slice(acc, OT_RANGE(2, 6));
    /* each leaf's own gradient, from a tree that reads it alone */
    ot_autodiff *ga = ot_autodiff_new(ot_sum(ot_sin(a)), NULL);
    ot_autodiff *gc = ot_autodiff_new(ot_sum(ot_sqr(c)), NULL);
    CHECK(ot_assign(ha, ot_add(ha, ot_autodiff_grad(ga, a))) == 0);
    CHECK(ot_assign(hc, ot_add(hc, ot_autodiff_grad(gc, c))) == 0);
    ot_autodiff_free(ga);
    ot_autodiff_free(gc);
    double x[6], y[6];
    CHECK(g && ot_get(g, x) == 0 && ot_get(acc, y) == 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    ot_autodiff_free(ad);
    ot_tensor *v[] = {w, a, c, g, acc, ha, hc};
    for (int i = 0; i < 7; i++) ot_tensor_free(v[i]);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* Programs evaluate a gradient later: a scatter done when asked would be
 * stale there, so their variant refuses it with the reason. */
TEST(grad_tree_only_refuses_scatter)
{
    ot_backend *be = backend("ref");
    ot_pool *pool = ot_pool_push();
    ot_tensor *w = random_f64(be, OT_SHAPE(2, 3), 7);
    ot_tensor *r = ot_reshape(w, OT_SHAPE(3, 2)), *t = ot_transpose(w, NULL);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_sqr(r)), NULL);
    CHECK(ad && ot__autodiff_grad_tree(ad, w) == NULL);
    CHECK_INT(ot_errcode(), OT_EUNSUPPORTED);
    CHECK(strstr(ot_errmsg(), "no scatter") != NULL);
    ot_autodiff_free(ad);
    ad = ot_autodiff_new(ot_sum(ot_sqr(t)), NULL);   /* a transpose stays a tree */
    CHECK(ad && ot__autodiff_grad_tree(ad, w) != NULL);
    ot_autodiff_free(ad);
    ot_tensor_free(t);
    ot_tensor_free(r);
    ot_tensor_free(w);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* A gradient through a slice view is a tensor of the moment's values, not
 * a tree: differentiating a tree that reads it w.r.t. the same tensor
 * again (a Hessian-vector product) gave zeros, silently. It is refused,
 * while its use as a value, and derivatives w.r.t. other tensors, stay. */
TEST(grad_through_views_twice_refused)
{
    ot_backend *be = backend("ref");
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = random_f64(be, OT_SHAPE(6), 11), *w = random_f64(be, OT_SHAPE(6), 12);
    ot_tensor *v = ot_slice(x, OT_RANGE(1, 5));
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_sin(v)), NULL);
    ot_node *g = ot_autodiff_grad(ad, x);
    CHECK(g != NULL);
    ot_autodiff *ad2 = ot_autodiff_new(ot_sum(ot_mul(g, w)), NULL);
    CHECK(ad2 && ot_autodiff_grad(ad2, x) == NULL);
    CHECK_INT(ot_errcode(), OT_EUNSUPPORTED);
    CHECK(strstr(ot_errmsg(), "cannot be differentiated") != NULL);
    double gw[6], gx[6], xs[6];
    CHECK(ot_autodiff_grad_host(ad2, w, gw) == 0);   /* w.r.t. w: g's values */
    CHECK(ot_autodiff_grad_host(ad, x, gx) == 0 && ot_get(x, xs) == 0);
    for (int i = 0; i < 6; i++) CHECK(gw[i] == gx[i] && gx[i] == (i >= 1 && i < 5 ? cos(xs[i]) : 0));
    ot_autodiff_free(ad2);
    ot_autodiff_free(ad);
    ot_tensor_free(v);
    ot_tensor_free(w);
    ot_tensor_free(x);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* ---- trainable tensors ---------------------------------------------------- */

TEST(variables_order_dedup_views)
{
    ot_backend *be = backend("ref");
    ot_pool *pool = ot_pool_push();
    ot_tensor *w1 = ot_zeros(be, OT_SHAPE(4, 4), OT_F32), *w2 = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 4), OT_F32);
    CHECK(ot_tensor_set_trainable(w1, true) == 0 && ot_tensor_set_trainable(w2, true) == 0);
    CHECK(ot_tensor_set_trainable(w1, true) == 0);          /* again: no-op */
    ot_tensor *r = ot_reshape(w1, OT_SHAPE(2, 8)), *t = ot_transpose(w1, NULL);
    CHECK(ot_tensor_trainable(r) && ot_tensor_trainable(t) && !ot_tensor_trainable(x));
    /* w2 is read first; w1 only through views, twice */
    ot_node *f = ot_add(ot_add(ot_sum(w2), ot_sum(ot_dot(x, t))), ot_sum(r));
    ot_tensor *out[3] = {NULL, NULL, NULL};
    CHECK_INT(ot_variables(f, 0, NULL), 2);
    CHECK_INT(ot_variables(f, 1, out), 2);
    CHECK(out[0] == w2 && out[1] == NULL);
    CHECK_INT(ot_variables(f, 3, out), 2);
    CHECK(out[0] == w2 && out[1] == w1);
    CHECK_INT(ot_variables(ot_sum(x), 3, out), 0);
    CHECK(ot_tensor_set_trainable(w2, false) == 0 && !ot_tensor_trainable(w2));
    CHECK_INT(ot_variables(f, 3, out), 1);
    CHECK(out[0] == w1);
    ot_tensor *v[] = {w1, w2, x, r, t};
    for (int i = 0; i < 5; i++) ot_tensor_free(v[i]);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

TEST(variables_bad_input)
{
    ot_backend *be = backend("ref");
    ot_pool *pool = ot_pool_push();
    ot_tensor *w = ot_zeros(be, OT_SHAPE(4), OT_F32), *i = ot_zeros(be, OT_SHAPE(4), OT_I32);
    ot_tensor *b = ot_broadcast_to(w, OT_SHAPE(2, 4)), *s = ot_slice(w, OT_RANGE(0, 2));
    CHECK_INT(ot_tensor_set_trainable(NULL, true), OT_ENULL);
    CHECK(!ot_tensor_trainable(NULL));
    CHECK_INT(ot_tensor_set_trainable(i, true), OT_EDTYPE);
    CHECK_INT(ot_tensor_set_trainable(b, true), OT_EINVAL);
    CHECK(ot_tensor_set_trainable(w, true) == 0);
    CHECK_INT(ot_tensor_set_trainable(s, true), OT_EINVAL);   /* one variable per buffer */
    CHECK(strstr(ot_errmsg(), "one tensor per buffer") != NULL);
    CHECK(ot_tensor_set_trainable(s, false) == 0 && ot_tensor_trainable(w)); /* not its mark */
    CHECK_INT(ot_variables(NULL, 0, NULL), OT_ENULL);
    CHECK_INT(ot_variables(ot_sum(w), -1, NULL), OT_EINVAL);
    CHECK_INT(ot_variables(ot_sum(w), 1, NULL), OT_ENULL);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(w), NULL);
    ot_node *g[1];
    CHECK_INT(ot_autodiff_grads(NULL, 1, &w, g), OT_ENULL);
    CHECK_INT(ot_autodiff_grads(ad, -1, &w, g), OT_EINVAL);
    CHECK_INT(ot_autodiff_grads(ad, 1, NULL, g), OT_ENULL);
    CHECK_INT(ot_autodiff_grads(ad, 1, &w, NULL), OT_ENULL);
    ot_tensor *nul = NULL;
    CHECK_INT(ot_autodiff_grads(ad, 1, &nul, g), OT_ENULL);
    CHECK(g[0] == NULL);
    ot_autodiff_free(ad);
    /* a slice of the buffer beside the marked part is not the variable */
    ot_tensor *big = ot_zeros(be, OT_SHAPE(8), OT_F32);
    ot_tensor *lo = ot_slice(big, OT_RANGE(0, 4)), *hi = ot_slice(big, OT_RANGE(4, 8));
    CHECK(ot_tensor_set_trainable(lo, true) == 0);
    CHECK(ot_tensor_trainable(lo) && !ot_tensor_trainable(hi) && ot_tensor_trainable(big));
    CHECK_INT(ot_variables(ot_sum(hi), 0, NULL), 0);
    ot_tensor_free(hi);
    ot_tensor_free(lo);
    ot_tensor_free(big);
    ot_tensor_free(s);
    ot_tensor_free(w);
    /* freeing the marked tensor while a view lives unmarks the memory */
    ot_tensor *w3 = ot_zeros(be, OT_SHAPE(4), OT_F32), *s3 = ot_slice(w3, OT_RANGE(1, 3));
    CHECK(ot_tensor_set_trainable(w3, true) == 0 && ot_tensor_trainable(s3));
    ot_tensor_free(w3);
    CHECK(!ot_tensor_trainable(s3));
    CHECK_INT(ot_variables(ot_sum(s3), 0, NULL), 0);
    ot_tensor_free(s3);
    ot_tensor_free(b);
    ot_tensor_free(i);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* ot_variables -> ot_autodiff_grads -> ot_sgd_step, against the same step
 * written with plain ot_assign, on both backends. */
TEST(variables_sgd_step_matches_assign)
{
    for (int bk = 0; bk < 2; bk++) {
        ot_backend *be = backend(backends[bk]);
        ot_pool *pool = ot_pool_push();
        ot_tensor *w = random_f64(be, OT_SHAPE(2, 2, 4), 8), *x = random_f64(be, OT_SHAPE(3, 4), 9);
        ot_tensor *ref = ot_eval(ot_tensor_node(w));
        CHECK(ot_tensor_set_trainable(w, true) == 0);
        ot_tensor *w2 = ot_reshape(w, OT_SHAPE(4, 4));
        ot_node *f = ot_sum(ot_sqr(ot_dot(x, w2)));
        ot_tensor *vars[2];
        ot_node *g[2];
        CHECK_INT(ot_variables(f, 2, vars), 1);
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        CHECK(ot_autodiff_grads(ad, 1, vars, g) == 0);
        ot_tensor *gt = ot_autodiff_grad_tensor(ad, w);
        CHECK(ot_sgd_step(&(ot_sgd){.lr = 0.1}, 1, vars, g, NULL) == 0);
        CHECK(ot_assign(ref, ot_sub(ref, ot_mul(gt, 0.1))) == 0);
        double a[16], b[16];
        CHECK(ot_get(w, a) == 0 && ot_get(ref, b) == 0);
        CHECK(memcmp(a, b, sizeof a) == 0);
        ot_autodiff_free(ad);
        ot_tensor *v[] = {w, x, ref, w2, gt};
        for (int i = 0; i < 5; i++) ot_tensor_free(v[i]);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

/* Program variables start trainable; a program's backprop of a variable
 * read through a reshape is refused (its steps run later). */
TEST(variables_program_default)
{
    ot_backend *be = backend("ref");
    ot_pool *pool = ot_pool_push();
    ot_program *p = ot_program_new(be);
    ot_tensor *w = ot_program_variable(p, "w", OT_SHAPE(2, 3), OT_F32, OT_INIT_UNIFORM(-1, 1, 1));
    CHECK(w && ot_tensor_trainable(w));
    ot_tensor *r = ot_reshape(w, OT_SHAPE(3, 2)), *out[1];
    ot_node *loss = ot_sum(ot_sqr(r));
    CHECK_INT(ot_variables(loss, 1, out), 1);
    CHECK(out[0] == w);
    ot_tensor *gw = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
    int line = __LINE__ + 1;
    CHECK_INT(ot_program_backprop(p, loss, 1, &w, &gw), OT_EUNSUPPORTED);
    CHECK(strstr(ot_errmsg(), "ask for the gradient of that view") != NULL);
    /* the caller's place and call, not only the inner autodiff_grad */
    char want[96];
    snprintf(want, sizeof want, "test_variables.c:%d: program_backprop: ", line);
    CHECK(strstr(ot_errmsg(), want) != NULL);
    ot_tensor_free(gw);
    ot_tensor_free(r);
    ot_program_free(p);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* Every allocation of a scatter and of ot_variables failing in turn: an
 * error or the right answer, never a crash or a leak (ASan checks). */
TEST(grad_through_views_allocation_failures)
{
    ot_backend *be = backend("cpu");
    ot_tensor *w = random_f64(be, OT_SHAPE(6), 10);
    ot_tensor *a = ot_slice(w, OT_RANGE(0, 4)), *c = ot_slice(w, OT_RANGE(2, 6));
    CHECK(ot_tensor_set_trainable(w, true) == 0);
    double want[6], got[6];
    ot_pool *pool = ot_pool_push();
    ot_node *f = ot_sum(ot_mul(a, c));
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad && ot_autodiff_grad_host(ad, w, want) == 0);
    for (long n = 1; n < 200; n++) {
        ot__alloc_fail_at(n);
        int rc = ot_autodiff_grad_host(ad, w, got);
        ot_tensor *out[1];
        int nv = ot_variables(f, 1, out);
        ot__alloc_fail_at(0);
        CHECK(rc == 0 || rc == OT_ENOMEM);
        CHECK(nv == 1 || nv == OT_ENOMEM);
        if (rc == 0) CHECK(memcmp(want, got, sizeof want) == 0);
    }
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    ot_tensor_free(c);
    ot_tensor_free(a);
    ot_tensor_free(w);
    ot_backend_free(be);
}
