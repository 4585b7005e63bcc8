/*
 * test_index_inplace.c - issue 35's W17: the cpu backend adds a
 * scatter_add into the tensor it updates in place, touching only the
 * indexed rows (t[:] = index_add(t, ids, src), w - lr*scatter_add(g, ids),
 * gw += scatter_add(...)). The explain text names the in-place kernel; its
 * values equal ref's and the unfused cpu path's exactly (small integer
 * values and a power-of-two rate keep every sum exact), with repeated and
 * negative ids, views and both float dtypes; an out-of-range id writes
 * nothing; an SGD step of a program on an embedding table equals the
 * unfused step.
 */
#include "test.h"

#include <stdlib.h>
#include <string.h>

enum { V = 7, D = 3, N = 6 };
static const int32_t IDS[N] = {1, 5, 1, -1, 1, 0};   /* 1 thrice, -1 is row 6 */

/* Tensor t's values as doubles (n of them). */
static void values(ot_tensor *t, double *out, int64_t n)
{
    ot_tensor *d = ot_empty(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);
    CHECK(d && ot_assign(d, ot_tensor_node(t)) == 0 && ot_get(d, out) == 0 &&
          ot_tensor_numel(d) == n);
    ot_tensor_free(d);
}

/* The update of case `kind` over table t (of rows `rows` along `axis`). */
static ot_node *update(int kind, ot_tensor *t, ot_tensor *ids, ot_tensor *src, int axis, int64_t rows)
{
    switch (kind) {
    case 0: return ot_index_add(t, ids, src, axis);                                  /* t + s */
    case 1: return ot_sub(t, ot_mul(0.25, ot_scatter_add(src, ids, axis, rows)));   /* SGD */
    default: return ot_add(ot_scatter_add(ot_neg(src), ids, axis, rows), t);         /* s + t */
    }
}

/* The table after one update of `kind` on backend `name` (fusion), dtype
 * dt, along axis 0 of a (V, D) table or, with `view`, axis 1 of a
 * transposed view of a (V, 2D) base's every other column; *inplace: whether
 * the plan says it runs in place. */
static void run(const char *name, int fusion, ot_dtype dt, int kind, bool view, double *out,
                bool *inplace)
{
    ot_backend *be = test__backend(name, fusion);
    ot_tensor *base = test__ints(be, view ? OT_SHAPE(V, 2 * D) : OT_SHAPE(V, D), dt, 1, 9, 4, 1.0);
    ot_tensor *cols = view ? ot_slice(base, OT_ALL, OT_RANGE(OT_NONE, OT_NONE, 2)) : NULL;
    ot_tensor *t = view ? ot_transpose(cols, (const int[]){1, 0}) : base;
    ot_tensor *ids = ot_array(be, OT_SHAPE(N), OT_I32, IDS);
    int axis = view ? 1 : 0;
    ot_tensor *src = test__ints(be, view ? OT_SHAPE(D, N) : OT_SHAPE(N, D), dt, 2, 11, 5, 1.0);
    ot_pool *p = ot_pool_push();
    ot_node *tree = update(kind, t, ids, src, axis, V);
    char *e = test__explain_many(1, &t, &tree);
    *inplace = e && strstr(e, "in place: indexed rows only");
    free(e);
    CHECK_INT(ot_assign(t, tree), 0);
    ot_pool_pop(p);
    values(t, out, V * D);
    if (view) {
        ot_tensor_free(t);
        ot_tensor_free(cols);
    }
    ot_tensor_free(base);
    ot_tensor_free(ids);
    ot_tensor_free(src);
    ot_backend_free(be);
}

TEST(index_inplace_taken_and_exact)
{
    const ot_dtype dts[] = {OT_F32, OT_F64};
    for (int d = 0; d < 2; d++)
        for (int kind = 0; kind < 3; kind++)
            for (int view = 0; view < 2; view++) {
                double want[V * D], fused[V * D], plain[V * D];
                bool in_ref, in_fused, in_plain;
                run("ref", OT_FUSION_ON, dts[d], kind, view, want, &in_ref);
                run("cpu", OT_FUSION_ON, dts[d], kind, view, fused, &in_fused);
                run("cpu", OT_FUSION_OFF, dts[d], kind, view, plain, &in_plain);
                CHECK(in_fused && !in_plain);
                CHECK(memcmp(want, fused, sizeof want) == 0);
                CHECK(memcmp(want, plain, sizeof want) == 0);
            }
}

/* Another tree reading the table, or the table as the source: the dense
 * path (the in-place one would read rows it has already updated). */
TEST(index_inplace_not_taken_when_unsafe)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *t = test__ints(be, OT_SHAPE(V, D), OT_F32, 1, 9, 4, 1.0);
    ot_tensor *u = ot_zeros(be, OT_SHAPE(V, D), OT_F32);
    ot_tensor *ids = ot_array(be, OT_SHAPE(V), OT_I32, (const int32_t[]){1, 1, 0, 2, 3, 4, 5});
    ot_pool *p = ot_pool_push();
    ot_node *self = ot_index_add(t, ids, t, 0);   /* source = the table */
    char *e = test__explain_many(1, &t, &self);
    CHECK(e && !strstr(e, "in place: indexed"));
    free(e);
    ot_tensor *outs[2] = {t, u};
    ot_node *trees[2] = {ot_index_add(t, ids, u, 0), ot_mul(t, 2.0)};   /* u reads t */
    e = test__explain_many(2, outs, trees);
    CHECK(e && !strstr(e, "in place: indexed"));
    free(e);
    ot_pool_pop(p);
    ot_tensor_free(t);
    ot_tensor_free(u);
    ot_tensor_free(ids);
    ot_backend_free(be);
}

/* An id out of range: an error of the assignment, the table untouched. */
TEST(index_inplace_out_of_range_writes_nothing)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *t = test__ints(be, OT_SHAPE(V, D), OT_F64, 1, 9, 4, 1.0);
    ot_tensor *ids = ot_array(be, OT_SHAPE(3), OT_I32, (const int32_t[]){1, V, 2});
    ot_tensor *src = ot_ones(be, OT_SHAPE(3, D), OT_F64);
    double before[V * D], after[V * D];
    values(t, before, V * D);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(t, ot_index_add(t, ids, src, 0)), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "index 7 at position (1,)", "[-7, 7)");
    ot_clear_error();
    ot_pool_pop(p);
    values(t, after, V * D);
    CHECK(memcmp(before, after, sizeof before) == 0);
    ot_tensor_free(t);
    ot_tensor_free(ids);
    ot_tensor_free(src);
    ot_backend_free(be);
}

/* A program's SGD step on an embedding table, the gradient tree given
 * straight to ot_program_sgd: the step runs in place and equals the same
 * step unfused. Loss sum((take(w, ids) * c)^2) with small integers. */
static void program_step(int fusion, double *out, bool *inplace)
{
    ot_backend *be = test__backend("cpu", fusion);
    ot_program *p = ot_program_new(be);
    ot_tensor *ids = ot_program_placeholder(p, "ids", OT_SHAPE(N), OT_I32);
    float h[V * D];
    for (int i = 0; i < V * D; i++) h[i] = (float)(i % 5 - 2);
    ot_tensor *w = ot_program_variable(p, "w", OT_SHAPE(V, D), OT_F32, OT_INIT_HOST(h));
    ot_pool *pool = ot_pool_push();
    ot_node *y = ot_mul(ot_embedding(w, ids), 0.5);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_sqr(y)), NULL);
    ot_node *g = ot_autodiff_grad(ad, w);
    CHECK_INT(ot_program_sgd(p, &(ot_sgd){.lr = 0.25}, 1, &w, &g, NULL), 0);
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f && ot_program_explain(p, f) == 0);
    if (f) fclose(f);
    *inplace = buf && strstr(buf, "in place: indexed rows only");
    free(buf);
    for (int run = 0; run < 2; run++)
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("ids", IDS, sizeof IDS)), 0);
    values(w, out, V * D);
    ot_program_free(p);
    ot_backend_free(be);
}

TEST(index_inplace_program_sgd_step)
{
    double fused[V * D], plain[V * D];
    bool in_fused, in_plain;
    program_step(OT_FUSION_ON, fused, &in_fused);
    program_step(OT_FUSION_OFF, plain, &in_plain);
    CHECK(in_fused && !in_plain);
    CHECK(memcmp(fused, plain, sizeof fused) == 0);
}
