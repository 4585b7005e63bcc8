/*
 * test_conv_epi.c - fused convolution epilogues (src/cpu/exec_conv.c,
 * plan_sched.c): a conv or conv_transpose followed by elementwise work
 * (bias, batch norm's scale and shift, residual, scalars, activations)
 * equals the same tree on the cpu backend without fusion, on random shapes
 * and options for every algorithm (im2col + gemm, 1x1, direct depthwise,
 * transposed); ot_explain shows the epilogue where it is fused, and a
 * result with a second reader is left unfused.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

static uint32_t next(uint32_t *r)
{
    *r = *r * 1664525u + 1013904223u;
    return *r >> 8;
}

/* A tensor of shape s, dtype dt, values in [-1, 1) from seed, on be. */
static ot_tensor *rnd(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed)
{
    return test__uniform(be, s, dt, seed, -1, 1);
}

/* One case: the convolution's geometry and which epilogue follows it. */
typedef struct tcase {
    int nsp, n, ci, co, k, groups, stride, pad, size, epi;
    bool transpose;
    ot_dtype dt;
} tcase;

enum { EPI_BIAS_RELU, EPI_BN, EPI_RESIDUAL, EPI_SCALARS, EPI_BN_OP, EPI_COUNT };

static tcase random_case(uint32_t *r)
{
    tcase c = {.nsp = 1 + (int)(next(r) % 3), .n = 1 + (int)(next(r) % 2),
               .groups = 1 + (int)(next(r) % 2), .epi = (int)(next(r) % EPI_COUNT),
               .transpose = next(r) % 4 == 0, .dt = next(r) % 2 ? OT_F32 : OT_F64};
    c.ci = c.groups * (1 + (int)(next(r) % 3));
    int kind = (int)(next(r) % 4);   /* 0 depthwise, 1 1x1, else general */
    c.co = kind == 0 ? c.ci : c.groups * (1 + (int)(next(r) % 4));
    c.k = kind == 1 ? 1 : 1 + (int)(next(r) % 3);
    c.stride = kind == 1 ? 1 : 1 + (int)(next(r) % 2);
    c.pad = kind == 1 ? 0 : (int)(next(r) % 2);
    c.size = c.k + (int)(next(r) % (c.nsp == 3 ? 3 : 9));
    return c;
}

/* The case's tree on be (tensors from seed, into t[]; NULL ends it). */
static ot_node *case_tree(ot_backend *be, const tcase *c, uint32_t seed, ot_tensor **t)
{
    ot_shape xs = {.ndim = 2 + c->nsp, .dims = {c->n, c->transpose ? c->co : c->ci}};
    ot_shape ws = {.ndim = 2 + c->nsp, .dims = {c->co, c->ci / c->groups}};
    for (int d = 0; d < c->nsp; d++) {
        xs.dims[2 + d] = c->size + d;
        ws.dims[2 + d] = c->k;
    }
    t[0] = rnd(be, xs, c->dt, seed);
    t[1] = rnd(be, ws, c->dt, seed + 1);
    ot_conv_opts o = {.stride = {c->stride}, .pad = c->pad, .groups = c->groups};
    ot_node *y = c->transpose ? ot_conv_transpose_at(ot_tensor_node(t[0]), ot_tensor_node(t[1]), &o,
                                                     __FILE__, __LINE__)
                              : ot_conv_at(ot_tensor_node(t[0]), ot_tensor_node(t[1]), &o, __FILE__,
                                           __LINE__);
    ot_shape yshape = ot_node_shape(y);
    const ot_shape *ys = &yshape;
    ot_shape chan = {.ndim = ys->ndim, .dims = {1, ys->dims[1]}};
    for (int d = 2; d < chan.ndim; d++) chan.dims[d] = 1;
    int64_t C = ys->dims[1];
    switch (c->epi) {
    case EPI_BIAS_RELU:
        t[2] = rnd(be, chan, c->dt, seed + 2);
        return ot_relu(ot_add(y, t[2]));
    case EPI_BN:   /* the inference batch norm's x * scale + shift, then tanh */
        t[2] = rnd(be, chan, c->dt, seed + 2);
        t[3] = rnd(be, chan, c->dt, seed + 3);
        return ot_tanh(ot_add(ot_mul(y, t[2]), t[3]));
    case EPI_RESIDUAL:
        t[2] = rnd(be, *ys, c->dt, seed + 2);
        return ot_relu(ot_add(y, t[2]));
    case EPI_SCALARS:
        return ot_sig(ot_add(ot_mul(y, 0.5), 1.0));
    default:
        t[2] = rnd(be, OT_SHAPE(C), c->dt, seed + 2);
        t[3] = rnd(be, OT_SHAPE(C), c->dt, seed + 3);
        CHECK_INT(ot_assign(t[3], ot_add(ot_abs(t[3]), 0.5)), 0);   /* a variance */
        return ot_relu(ot_batch_norm(y, .running_mean = t[2], .running_var = t[3], .eps = 1e-5));
    }
}

/* The case's result on backend be, as doubles. */
static double *run_case(ot_backend *be, const tcase *c, uint32_t seed, int64_t *n, char **explain)
{
    ot_tensor *t[5] = {NULL};
    ot_node *tree = case_tree(be, c, seed, t);
    ot_tensor *out = ot_empty(be, ot_node_shape(tree), c->dt);
    if (explain) {
        size_t len;
        FILE *f = open_memstream(explain, &len);
        CHECK_INT(ot_explain_many(1, &out, &tree, f), 0);
        fclose(f);
    }
    if (ot_assign(out, tree) != 0) test__fail(__FILE__, __LINE__, "assign: %s", ot_errmsg());
    *n = ot_tensor_numel(out);
    double *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    ot_tensor *d = ot_eval(ot_cast(out, OT_F64));
    ot_get(d, v);
    ot_tensor_free(d);
    ot_tensor_free(out);
    for (int i = 0; i < 5; i++) ot_tensor_free(t[i]);
    return v;
}

TEST(conv_epilogue_random)
{
    ot_backend *fused = ot_backend_new("cpu", NULL);
    ot_backend *plain = ot_backend_new("cpu", &(ot_backend_opts){.fusion = OT_FUSION_OFF});
    uint32_t r = 34;
    int fusedn = 0;
    for (int it = 0; it < 60; it++) {
        tcase c = random_case(&r);
        int64_t na, nb;
        char *text = NULL;
        double *a = run_case(fused, &c, 1000u + (uint32_t)it, &na, &text);
        double *b = run_case(plain, &c, 1000u + (uint32_t)it, &nb, NULL);
        CHECK_INT(na, nb);
        double tol = c.dt == OT_F32 ? 1e-5 : 1e-12;
        for (int64_t i = 0; i < na && na == nb; i++)
            if (!test__close(a[i], b[i], tol)) {
                test__fail(__FILE__, __LINE__, "case %d (epi %d, nsp %d, transpose %d): [%lld] %g vs %g",
                           it, c.epi, c.nsp, c.transpose, (long long)i, a[i], b[i]);
                break;
            }
        fusedn += text && strstr(text, "conv epilogue") != NULL;
        free(text);
        free(a);
        free(b);
    }
    CHECK(fusedn >= 55);   /* all 60 when written */
    ot_backend_free(fused);
    ot_backend_free(plain);
}

/* What explain shows, and a result read twice stays whole. */
TEST(conv_epilogue_explain)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x = rnd(be, OT_SHAPE(2, 8, 12, 12), OT_F32, 1);
    ot_tensor *w = rnd(be, OT_SHAPE(16, 8, 3, 3), OT_F32, 2);
    ot_tensor *b = rnd(be, OT_SHAPE(1, 16, 1, 1), OT_F32, 3);
    ot_tensor *out = ot_empty(be, OT_SHAPE(2, 16, 12, 12), OT_F32);
    ot_node *y = ot_conv(x, w, .pad = 1);
    char *text = test__explain_many(1, &out, &(ot_node *){ot_relu(ot_add(y, b))});
    CHECK(text && strstr(text, "conv epilogue: kernel 1 runs on each block of kernel 0's result"));
    CHECK(text && strstr(text, "(epilogue of kernel 0, on its blocks in cache)"));
    if (text && !strstr(text, "conv epilogue")) fputs(text, stderr);
    free(text);
    text = test__explain_many(1, &out, &(ot_node *){ot_add(ot_relu(ot_add(y, b)), ot_sum(y))});   /* y read twice */
    CHECK(text && !strstr(text, "conv epilogue"));
    free(text);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(b);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* A Winograd conv's epilogue runs on the whole result, and explain says so
 * (its transform tiles span images: nothing is handed over in cache). */
TEST(conv_epilogue_explain_winograd)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x = rnd(be, OT_SHAPE(2, 16, 12, 12), OT_F32, 1);
    ot_tensor *w = rnd(be, OT_SHAPE(16, 16, 3, 3), OT_F32, 2);
    ot_tensor *out = ot_empty(be, OT_SHAPE(2, 16, 12, 12), OT_F32);
    char *text = test__explain_many(1, &out, &(ot_node *){ot_relu(ot_conv(x, w, .pad = 1))});
    bool wino = text && strstr(text, "winograd");   /* OT_WINOGRAD=0 turns it off */
    CHECK(text && (!wino || strstr(text, "runs on kernel 0's whole result after it")));
    CHECK(text && (!wino || strstr(text, "(epilogue of kernel 0, on its whole result)")));
    CHECK(text && (wino || strstr(text, "(epilogue of kernel 0, on its blocks in cache)")));
    free(text);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* An epilogue whose rows are whole vectors over the whole result, but not
 * over one block of it: a block of rows of 2 positions ran the code over
 * 2 elements as whole vectors, and the last block wrote past the output
 * (fuzz seed 6802 tree 25038, heap corruption). The output is the front of
 * a larger buffer, whose tail must keep its sentinel; the values are the
 * unfused backend's. */
static void short_rows_case(ot_backend *be, ot_dtype dt, double *got)
{
    ot_tensor *x = rnd(be, OT_SHAPE(3, 8, 2), dt, 1), *w = rnd(be, OT_SHAPE(8, 8, 1), dt, 2);
    ot_tensor *r = rnd(be, OT_SHAPE(8, 2), dt, 3);   /* broadcast: the epilogue is 3 rows of 16 */
    ot_tensor *buf = ot_full(be, OT_SHAPE(48 + 64), dt, 7.0);
    ot_tensor *front = ot_slice(buf, OT_RANGE(0, 48)), *out = ot_reshape(front, OT_SHAPE(3, 8, 2));
    ot_tensor *g64 = ot_empty(be, OT_SHAPE(48 + 64), OT_F64);
    ot_pool *pool = ot_pool_push();
    ot_node *tree = ot_relu(ot_add(ot_conv(x, w), r));   /* blocks of 2 */
    char *text = test__explain_many(1, &out, &tree);
    bool fused = ot_backend_options(be).fusion != OT_FUSION_OFF;
    CHECK(text && (!fused || strstr(text, "on its blocks in cache")));
    free(text);
    CHECK_INT(ot_assign(out, tree), 0);
    CHECK_INT(ot_assign(g64, ot_cast(buf, OT_F64)), 0);
    ot_pool_pop(pool);
    ot_get(g64, got);
    ot_tensor *t[] = {g64, out, front, buf, r, w, x};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) ot_tensor_free(t[i]);
}

TEST(conv_epilogue_rows_shorter_than_a_vector)
{
    for (int d = 0; d < 2; d++) {
        ot_dtype dt = d ? OT_F64 : OT_F32;
        ot_backend *be = ot_backend_new("cpu", NULL), *plain = test__backend("cpu", OT_FUSION_OFF);
        double got[48 + 64], want[48 + 64];
        short_rows_case(be, dt, got);
        short_rows_case(plain, dt, want);
        for (int i = 0; i < 48 + 64; i++)
            if (!(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])))) {
                test__fail(__FILE__, __LINE__, "%s [%d]: %g, expected %g", ot_dtype_name(dt), i,
                           got[i], want[i]);
                break;
            }
        ot_backend_free(plain);
        ot_backend_free(be);
    }
}
