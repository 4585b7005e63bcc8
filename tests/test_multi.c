/*
 * test_multi.c - multi-output elementwise kernels on the cpu backend:
 * ot_assign_many of trees over one space runs as one pass that reads each
 * input once and computes shared subtrees once. Each case checks the
 * result against the ref backend and the pass count through ot_stats.
 */
#include "test.h"

#include <float.h>
#include <stdlib.h>

enum { N = 1037 };   /* not a multiple of any vector width */

typedef struct side {
    ot_backend *be;
    ot_tensor *a, *b, *o[4];
} side;

static void side_new(side *s, const char *name, ot_dtype dt, int threads)
{
    ot_backend_opts o = {.threads = threads};
    s->be = ot_backend_new(name, &o);
    CHECK(s->be != NULL);
    double ha[N], hb[N];
    for (int i = 0; i < N; i++) {
        ha[i] = 0.5 + 0.0013 * i;
        hb[i] = 2.0 - 0.0011 * i;
    }
    ot_tensor *a = ot_array(s->be, OT_SHAPE(N), OT_F64, ha);
    ot_tensor *b = ot_array(s->be, OT_SHAPE(N), OT_F64, hb);
    s->a = ot_empty(s->be, OT_SHAPE(N), dt);
    s->b = ot_empty(s->be, OT_SHAPE(N), dt);
    CHECK_INT(ot_assign(s->a, ot_cast(a, .dtype = dt)), 0);
    CHECK_INT(ot_assign(s->b, ot_cast(b, .dtype = dt)), 0);
    ot_tensor_free(a);
    ot_tensor_free(b);
    for (int i = 0; i < 4; i++) s->o[i] = ot_empty(s->be, OT_SHAPE(N), dt);
}

static void side_free(side *s)
{
    ot_tensor_free(s->a);
    ot_tensor_free(s->b);
    for (int i = 0; i < 4; i++) ot_tensor_free(s->o[i]);
    ot_backend_free(s->be);
}

typedef void (*trees_fn)(const side *s, ot_node *t[]);

/* The gradients of tanh(a*b + a/b) with respect to a and b (W7). */
static void w7_trees(const side *s, ot_node *t[])
{
    ot_node *th = ot_tanh(ot_add(ot_mul(s->a, s->b), ot_div(s->a, s->b)));
    ot_node *d = ot_sub(1.0, ot_mul(th, th));
    t[0] = ot_mul(d, ot_add(s->b, ot_div(1.0, s->b)));
    t[1] = ot_mul(d, ot_sub(s->a, ot_div(s->a, ot_mul(s->b, s->b))));
}

/* Outputs that are a leaf, a constant, the same tree twice and a tree. */
static void plain_trees(const side *s, ot_node *t[])
{
    ot_node *e = ot_exp(ot_neg(s->a));
    t[0] = e;
    t[1] = ot_tensor_node(s->b);
    t[2] = e;
    t[3] = ot_add(e, 2.0);
}

/* Runs n trees into the first n outputs; returns the kernels it ran. */
static uint64_t run(const side *s, trees_fn fn, int n)
{
    ot_pool *p = ot_pool_push();
    ot_node *t[4];
    fn(s, t);
    ot_stats s0, s1;
    ot_stats(s->be, &s0);
    CHECK_INT(ot_assign_many(n, (ot_tensor *const *)s->o, t), 0);
    ot_stats(s->be, &s1);
    ot_pool_pop(p);
    return s1.kernels - s0.kernels;
}

static void outs_close(const side *x, const side *y, int n, double tol)
{
    double *gx = malloc(sizeof(double) * N), *gy = malloc(sizeof(double) * N);
    for (int i = 0; i < n; i++) {
        ot_tensor *cx = ot_empty(x->be, OT_SHAPE(N), OT_F64), *cy = ot_empty(y->be, OT_SHAPE(N), OT_F64);
        CHECK_INT(ot_assign(cx, ot_cast(x->o[i], .dtype = OT_F64)), 0);
        CHECK_INT(ot_assign(cy, ot_cast(y->o[i], .dtype = OT_F64)), 0);
        CHECK_INT(ot_get(cx, gx), 0);
        CHECK_INT(ot_get(cy, gy), 0);
        int bad = 0;
        for (int j = 0; j < N; j++) bad += !test__close(gx[j], gy[j], tol);
        CHECK_INT(bad, 0);
        ot_tensor_free(cx);
        ot_tensor_free(cy);
    }
    free(gx);
    free(gy);
}

TEST(multi_w7_one_pass)
{
    for (int dt = OT_F32; dt <= OT_F64; dt++) {
        side cpu, ref;
        side_new(&cpu, "cpu", (ot_dtype)dt, 1);
        side_new(&ref, "ref", (ot_dtype)dt, 1);
        CHECK_INT(run(&cpu, w7_trees, 2), 1);
        ot_stats st;
        ot_stats(cpu.be, &st);
        run(&ref, w7_trees, 2);
        /* 1 - t*t cancels where tanh is near 1: f32 keeps ~1e-4 there. */
        outs_close(&cpu, &ref, 2, dt == OT_F64 ? 1e-12 : 1e-4);
        side_free(&cpu);
        side_free(&ref);
    }
}

TEST(multi_bytes_read_once)
{
    side cpu;
    side_new(&cpu, "cpu", OT_F32, 1);
    ot_stats s0, s1;
    ot_stats(cpu.be, &s0);
    run(&cpu, w7_trees, 2);
    ot_stats(cpu.be, &s1);
    /* a and b read once, two outputs written once. */
    CHECK_INT(s1.bytes_moved - s0.bytes_moved, 4 * N * 4);
    side_free(&cpu);
}

TEST(multi_leaf_const_and_repeated_outputs)
{
    side cpu, ref;
    side_new(&cpu, "cpu", OT_F32, 1);
    side_new(&ref, "ref", OT_F32, 1);
    /* The leaf output is a plain copy and not grouped; the rest share one
     * pass, the repeated tree stored twice. */
    CHECK_INT(run(&cpu, plain_trees, 4), 2);
    run(&ref, plain_trees, 4);
    outs_close(&cpu, &ref, 4, 4 * FLT_EPSILON);
    side_free(&cpu);
    side_free(&ref);
}

TEST(multi_threads_bitwise)
{
    side one, three;
    side_new(&one, "cpu", OT_F32, 1);
    side_new(&three, "cpu", OT_F32, 3);
    run(&one, w7_trees, 2);
    run(&three, w7_trees, 2);
    outs_close(&one, &three, 2, 0);
    side_free(&one);
    side_free(&three);
}

/* An output that is also an input goes through the per-output path, which
 * keeps the old values for every tree. */
TEST(multi_output_aliases_input)
{
    ot_backend *be[2] = {ot_backend_new("cpu", NULL), ot_backend_new("ref", NULL)};
    double got[2][2][8];
    for (int k = 0; k < 2; k++) {
        double h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        ot_tensor *x = ot_array(be[k], OT_SHAPE(8), OT_F64, h);
        ot_tensor *y = ot_empty(be[k], OT_SHAPE(8), OT_F64);
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign_many(2, (ot_tensor *[]){x, y},
                                 (ot_node *[]){ot_mul(x, 2.0), ot_add(x, 1.0)}), 0);
        ot_pool_pop(p);
        CHECK_INT(ot_get(x, got[k][0]), 0);
        CHECK_INT(ot_get(y, got[k][1]), 0);
        for (int i = 0; i < 8; i++) {
            CHECK(got[k][0][i] == 2 * h[i]);
            CHECK(got[k][1][i] == h[i] + 1);
        }
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be[k]);
    }
}

/* Outputs of different shapes or dtypes: same-shaped ones share a pass. */
TEST(multi_mixed_shapes_and_dtypes)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *a = ot_full(be, OT_SHAPE(3, 5), OT_F32, 1.5);
    ot_tensor *o1 = ot_empty(be, OT_SHAPE(3, 5), OT_F64), *o2 = ot_empty(be, OT_SHAPE(3, 5), OT_F32);
    ot_tensor *o3 = ot_empty(be, OT_SHAPE(5), OT_F32);
    ot_tensor *o4base = ot_empty(be, OT_SHAPE(5, 3), OT_F32);
    ot_tensor *o4 = ot_transpose(o4base, NULL);
    ot_pool *p = ot_pool_push();
    ot_stats s0, s1;
    ot_stats(be, &s0);
    ot_node *e = ot_exp(a);
    CHECK_INT(ot_assign_many(4, (ot_tensor *[]){o1, o2, o3, o4},
                             (ot_node *[]){ot_mul(e, 2.0), ot_sqrt(a), ot_sum(e, .axis = 0),
                                           ot_neg(e)}), 0);
    ot_stats(be, &s1);
    ot_pool_pop(p);
    CHECK_INT(s1.kernels - s0.kernels, 3);
    double v1[15];
    float v2[15], v3[5], v4[15];
    CHECK_INT(ot_get(o1, v1), 0);
    CHECK_INT(ot_get(o2, v2), 0);
    CHECK_INT(ot_get(o3, v3), 0);
    CHECK_INT(ot_get(o4, v4), 0);
    double ex = (double)expf(1.5f);
    for (int i = 0; i < 15; i++) {
        CHECK(test__close(v1[i], 2 * ex, 1e-6));
        CHECK(test__close(v2[i], sqrt(1.5), 1e-6));
        CHECK(test__close(v4[i], -ex, 1e-6));
    }
    for (int i = 0; i < 5; i++) CHECK(test__close(v3[i], 3 * ex, 1e-6));
    ot_tensor_free(a);
    ot_tensor_free(o1);
    ot_tensor_free(o2);
    ot_tensor_free(o3);
    ot_tensor_free(o4);
    ot_tensor_free(o4base);
    ot_backend_free(be);
}

/* Backprop of tanh(a*b + a/b): both gradients come out of one kernel that
 * reads a and b once (issue: one pass over shared inputs). */
TEST(multi_backprop_one_pass)
{
    side cpu, ref;
    side_new(&cpu, "cpu", OT_F64, 1);
    side_new(&ref, "ref", OT_F64, 1);
    side *s[2] = {&cpu, &ref};
    for (int k = 0; k < 2; k++) {
        ot_pool *p = ot_pool_push();
        ot_node *f = ot_tanh(ot_add(ot_mul(s[k]->a, s[k]->b), ot_div(s[k]->a, s[k]->b)));
        ot_autodiff *ad = ot_autodiff_new(f, NULL);
        CHECK(ad != NULL);
        ot_stats s0, s1;
        ot_stats(s[k]->be, &s0);
        CHECK_INT(ot_autodiff_backprop(ad, 2, (ot_tensor *[]){s[k]->a, s[k]->b}, s[k]->o), 0);
        ot_stats(s[k]->be, &s1);
        if (k == 0) {
            CHECK_INT(s1.kernels - s0.kernels, 1);
            CHECK_INT(s1.bytes_moved - s0.bytes_moved, 4 * N * 8);
        }
        ot_autodiff_free(ad);
        ot_pool_pop(p);
    }
    outs_close(&cpu, &ref, 2, 1e-12);
    side_free(&cpu);
    side_free(&ref);
}
