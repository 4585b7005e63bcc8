/*
 * test_keep.c - issue 17's items 8 and 9: ot_keep (bitwise the tree without
 * it, on ref and cpu, fused and not; one more kernel; gradients through it;
 * printed), the default pool's size (ot_pool_default_nodes, ot_stats), and
 * the errors for trees that mix backends, with the same-kind narrowing of an
 * f64 tree into an f32 output that stays allowed.
 */
#include "test.h"

#include <pthread.h>
#include <stdlib.h>

enum { N = 4099 };   /* more than a tile, with a tail */

static ot_backend *backend(const char *name, int fusion) { return test__backend(name, fusion); }

static ot_tensor *ramp(ot_backend *be, ot_dtype dt, double scale)
{
    ot_tensor *t = ot_empty(be, OT_SHAPE(N), dt);
    double *v = malloc(sizeof *v * N);
    for (int i = 0; i < N; i++) v[i] = scale * ((i * 37 % 101) - 50) / 17.0;
    ot_tensor *s = ot_array(be, OT_SHAPE(N), OT_F64, v);
    CHECK_INT(ot_assign(t, ot_tensor_node(s)), 0);
    ot_tensor_free(s);
    free(v);
    return t;
}

/* tanh(a*b + c) * exp(-(a*b + c)) + a/b, with the shared a*b + c kept or not. */
static ot_node *tree(ot_tensor *a, ot_tensor *b, ot_tensor *c, bool keep)
{
    ot_node *s = ot_add(ot_mul(a, b), c);
    if (keep) s = ot_keep(s);
    return ot_add(ot_mul(ot_tanh(s), ot_exp(ot_neg(s))), ot_div(a, ot_add(ot_abs(b), 1.0)));
}

/* Pops p, frees the n tensors of ts, then their backend. */
static void finish(ot_pool *p, ot_backend *be, int n, ot_tensor *const ts[])
{
    ot_pool_pop(p);
    for (int i = 0; i < n; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
}

static bool same_bits(const ot_tensor *x, const ot_tensor *y, size_t n)
{
    return memcmp(ot_tensor_data(x), ot_tensor_data(y), n) == 0;
}

static void check_identity(const char *name, int fusion, ot_dtype dt)
{
    ot_backend *be = backend(name, fusion);
    ot_tensor *a = ramp(be, dt, 1), *b = ramp(be, dt, 0.5), *c = ramp(be, dt, -0.25);
    ot_tensor *y0 = ot_empty(be, OT_SHAPE(N), dt), *y1 = ot_empty(be, OT_SHAPE(N), dt);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(y0, tree(a, b, c, false)), 0);
    CHECK_INT(ot_assign(y1, tree(a, b, c, true)), 0);
    CHECK(same_bits(y0, y1, (size_t)N * ot_dtype_size(dt)));
    /* keep as the root, over a leaf and over a dot. */
    CHECK_INT(ot_assign(y1, ot_keep(ot_keep(a))), 0);
    CHECK(same_bits(a, y1, (size_t)N * ot_dtype_size(dt)));
    ot_tensor *m = ot_reshape(a, OT_SHAPE(1, N)), *d0 = ot_empty(be, OT_SHAPE(1, 1), dt),
              *d1 = ot_empty(be, OT_SHAPE(1, 1), dt);
    ot_node *dt_ = ot_T(m);
    CHECK_INT(ot_assign(d0, ot_dot(m, dt_)), 0);
    CHECK_INT(ot_assign(d1, ot_keep(ot_dot(m, ot_keep(dt_)))), 0);
    CHECK(same_bits(d0, d1, ot_dtype_size(dt)));
    /* In place, and over a weak constant: y0 = a*2 + 2a, then a = keep(a*2) + 2a. */
    ot_tensor *a2 = ot_copy(a);
    CHECK_INT(ot_assign(y0, ot_add(ot_mul(a, 2.0), ot_mul(2.0, a))), 0);
    CHECK_INT(ot_assign(a2, ot_add(ot_keep(ot_mul(a2, 2.0)), ot_mul(ot_keep(2.0), a2))), 0);
    CHECK(same_bits(y0, a2, (size_t)N * ot_dtype_size(dt)));
    ot_tensor_free(a2);
    ot_pool_pop(p);
    ot_tensor_free(m), ot_tensor_free(d0), ot_tensor_free(d1);
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(c);
    ot_tensor_free(y0), ot_tensor_free(y1);
    ot_backend_free(be);
}

TEST(keep_is_bitwise_the_identity)
{
    check_identity("ref", OT_FUSION_DEFAULT, OT_F32);
    check_identity("ref", OT_FUSION_DEFAULT, OT_F64);
    check_identity("cpu", OT_FUSION_ON, OT_F32);
    check_identity("cpu", OT_FUSION_ON, OT_F64);
    check_identity("cpu", OT_FUSION_OFF, OT_F32);
}

TEST(keep_cpu_matches_ref)
{
    ot_backend *r = backend("ref", 0), *cpu = backend("cpu", OT_FUSION_ON);
    ot_tensor *ra = ramp(r, OT_F64, 1), *rb = ramp(r, OT_F64, 0.5), *rc = ramp(r, OT_F64, -0.25);
    ot_tensor *ca = ramp(cpu, OT_F64, 1), *cb = ramp(cpu, OT_F64, 0.5), *cc = ramp(cpu, OT_F64, -0.25);
    ot_pool *p = ot_pool_push();
    ot_tensor *yr = ot_eval(tree(ra, rb, rc, true)), *yc = ot_eval(tree(ca, cb, cc, true));
    CHECK(yr && yc);
    const double *vr = ot_tensor_data(yr), *vc = ot_tensor_data(yc);
    for (int i = 0; i < N; i += 97) CHECK_NEAR(vc[i], vr[i], 1e-14);
    ot_pool_pop(p);
    ot_tensor_free(yr), ot_tensor_free(yc);
    ot_tensor_free(ra), ot_tensor_free(rb), ot_tensor_free(rc);
    ot_tensor_free(ca), ot_tensor_free(cb), ot_tensor_free(cc);
    ot_backend_free(r), ot_backend_free(cpu);
}

/* The cut shows: one kernel more, and a temporary named by ot_explain. */
TEST(keep_cuts_a_fused_region)
{
    ot_backend *be = backend("cpu", OT_FUSION_ON);
    ot_tensor *a = ramp(be, OT_F32, 1), *b = ramp(be, OT_F32, 0.5), *y = ot_empty(be, OT_SHAPE(N), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *plain = ot_exp(ot_mul(ot_add(a, b), 2.0f));
    ot_node *kept = ot_exp(ot_mul(ot_keep(ot_add(a, b)), 2.0f));
    ot_stats s0, s1, s2;
    ot_stats(be, &s0);
    CHECK_INT(ot_assign(y, plain), 0);
    ot_stats(be, &s1);
    CHECK_INT(ot_assign(y, kept), 0);
    ot_stats(be, &s2);
    CHECK_INT(s1.kernels - s0.kernels, 1);
    CHECK_INT(s2.kernels - s1.kernels, 2);
    char *e0 = test__explain_many(1, &y, &plain), *e1 = test__explain_many(1, &y, &kept);
    CHECK(e0 && e1);
    CHECK(e0 && strstr(e0, "1 kernel, 0 temporaries"));
    CHECK(e1 && strstr(e1, "2 kernels, 1 temporary"));
    free(e0), free(e1);
    finish(p, be, 3, (ot_tensor *[]){a, b, y});
}

/* d/da sum(tanh(sin(a) * a)), with and without keeps, the same bits. */
static void check_gradient(const char *name)
{
    ot_backend *be = backend(name, OT_FUSION_DEFAULT);
    ot_tensor *a = ramp(be, OT_F64, 0.1), *g0 = ot_empty(be, OT_SHAPE(N), OT_F64),
              *g1 = ot_empty(be, OT_SHAPE(N), OT_F64);
    ot_pool *p = ot_pool_push();
    ot_node *f0 = ot_sum(ot_tanh(ot_mul(ot_sin(a), a)));
    ot_node *f1 = ot_sum(ot_tanh(ot_keep(ot_mul(ot_keep(ot_sin(a)), a))));
    ot_autodiff *d0 = ot_autodiff_new(f0, NULL), *d1 = ot_autodiff_new(f1, NULL);
    CHECK(d0 && d1);
    CHECK_INT(ot_assign(g0, ot_autodiff_grad(d0, a)), 0);
    CHECK_INT(ot_assign(g1, ot_autodiff_grad(d1, a)), 0);
    CHECK(same_bits(g0, g1, sizeof(double) * N));
    ot_autodiff_free(d0), ot_autodiff_free(d1);
    finish(p, be, 3, (ot_tensor *[]){a, g0, g1});
}

TEST(keep_passes_gradients_through)
{
    check_gradient("ref");
    check_gradient("cpu");
}

TEST(keep_prints_and_checks_its_operand)
{
    ot_backend *be = backend("ref", 0);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor_set_name(a, "a");
    ot_pool *p = ot_pool_push();
    ot_node *k = ot_keep(ot_exp(a));
    CHECK(k != NULL);
    CHECK_INT(ot_node_op(k), OT_OP_KEEP);
    CHECK_INT(ot_node_dtype(k), OT_F32);
    CHECK_STR(ot_op_name(OT_OP_KEEP), "keep");
    CHECK_INT(ot_op_lookup("keep"), OT_OP_KEEP);
    char *pp = test__capture(ot_pp, k), *pr = test__capture(ot_print, k);
    CHECK(pp && strstr(pp, "(keep (exp a))"));
    CHECK(pr && strstr(pr, "'op': 'keep'") && !strstr(pr, "seed"));
    free(pp), free(pr);
    /* A weak constant stays weak through keep: keep(2) * a is f32. */
    CHECK_INT(ot_node_dtype(ot_mul(ot_keep(2.0), a)), OT_F32);
    ot_clear_error();
    CHECK(ot_keep((ot_node *)NULL) == NULL);
    CHECK_ERR(OT_ENULL, "keep", "operand 1 is NULL");
    ot_clear_error();
    CHECK(ot_build_at(OT_OP_KEEP, ot_tensor_node(a), ot_tensor_node(a), NULL, "k.c", 7) == NULL);
    CHECK_ERR(OT_EINVAL, "keep", "takes 1 operand", "k.c:7");
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_backend_free(be);
}

/* ---- the default pool ----------------------------------------------------- */

static void *other_thread(void *arg)
{
    (void)arg;
    return (void *)(uintptr_t)ot_pool_default_nodes();
}

TEST(default_pool_size_is_reported)
{
    ot_backend *be = backend("ref", 0);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_pool_drain();
    CHECK_INT(ot_pool_default_nodes(), 0);
    ot_node *n = ot_add(ot_exp(a), ot_sin(a));
    CHECK(n != NULL);
    CHECK_INT(ot_pool_default_nodes(), 3);
    ot_stats s;
    CHECK_INT(ot_stats(be, &s), 0);
    CHECK_INT(s.default_pool_nodes, 3);
    ot_pool *p = ot_pool_push();
    CHECK(ot_neg(n) != NULL);   /* goes to p */
    CHECK_INT(ot_pool_default_nodes(), 3);
    ot_pool_pop(p);
    pthread_t t;
    void *seen = (void *)1;
    CHECK_INT(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, &seen);
    CHECK(seen == NULL);   /* thread-local: the other thread's is empty */
    ot_pool_drain();
    CHECK_INT(ot_pool_default_nodes(), 0);
    CHECK_INT(ot_stats(be, &s), 0);
    CHECK_INT(s.default_pool_nodes, 0);
    ot_tensor_free(a);
    ot_backend_free(be);
}

/* ---- mixing rules --------------------------------------------------------- */

TEST(mixing_backends_is_an_error)
{
    ot_backend *r = backend("ref", 0), *c1 = backend("cpu", 0), *c2 = backend("cpu", 0);
    ot_tensor *x = ot_ones(r, OT_SHAPE(4), OT_F32), *y = ot_ones(c1, OT_SHAPE(4), OT_F32),
              *z = ot_ones(c2, OT_SHAPE(4), OT_F32), *out = ot_empty(c1, OT_SHAPE(4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_add(ot_exp(x), y) == NULL);
    CHECK_ERR(OT_EBACKEND, "add", "'ref'", "'cpu'", "test_keep.c:");
    ot_clear_error();
    CHECK(ot_mul(y, z) == NULL);
    CHECK_ERR(OT_EBACKEND, "two different 'cpu' backends");
    /* Deep below: the first meeting is the node that fails. */
    ot_clear_error();
    ot_node *deep = ot_sub(ot_sin(ot_neg(y)), ot_sqr(ot_neg(x)));
    CHECK(deep == NULL);
    CHECK_ERR(OT_EBACKEND, "sub");
    /* Into an output of another backend. */
    CHECK_INT(ot_assign(out, ot_exp(x)), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "tree 0 reads tensors of backend 'ref'", "output is on backend 'cpu'",
              "test_keep.c:");
    CHECK_INT(ot_assign(out, ot_exp(z)), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "another backend named 'cpu'");
    CHECK_INT(ot_assign(out, ot_tensor_node(x)), OT_EBACKEND);
    /* Constants only go anywhere, and one backend's trees still run. */
    CHECK_INT(ot_assign(out, ot_add(ot_const(1.0), 2.0)), 0);
    CHECK_INT(ot_assign(out, ot_add(y, 2.0)), 0);
    CHECK_NEAR(((const float *)ot_tensor_data(out))[3], 3.0, 0);
    ot_pool_pop(p);
    ot_tensor_free(x), ot_tensor_free(y), ot_tensor_free(z), ot_tensor_free(out);
    ot_backend_free(r), ot_backend_free(c1), ot_backend_free(c2);
}

/* NumPy's same-kind casting: narrowing within floats rounds to nearest, as
 * np.add(a, b, out=f32) does; a float tree into i32 stays an error. */
TEST(assign_narrows_within_a_kind)
{
    const char *names[] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        ot_backend *be = backend(names[k], 0);
        double v = 1.0 + 0x1p-30;   /* not a float: rounds to 1.0f */
        ot_tensor *x = ot_full(be, OT_SHAPE(5), OT_F64, v), *o = ot_empty(be, OT_SHAPE(5), OT_F32),
                  *i = ot_empty(be, OT_SHAPE(5), OT_I32);
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(o, ot_mul(x, 3.0)), 0);
        CHECK(((const float *)ot_tensor_data(o))[4] == (float)(v * 3.0));
        CHECK_INT(ot_assign(i, ot_tensor_node(x)), OT_EDTYPE);
        CHECK_INT(ot_assign(i, ot_cast(x, OT_I32)), 0);
        ot_pool_pop(p);
        ot_tensor_free(x), ot_tensor_free(o), ot_tensor_free(i);
        ot_backend_free(be);
    }
}
