/*
 * test_stream.c - which kernels write with streaming stores, and that the
 * column-blocked walk of a transposed input runs as generated code with
 * them: bitwise the interpreter's results at every ISA with generated code,
 * any thread count, rows aligned to the vector or not.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <math.h>
#include <stdlib.h>

static ot_backend *backend(const char *isa, int jit, int64_t stream_bytes, int threads)
{
    return ot_backend_new("cpu", &(ot_backend_opts){.isa = isa, .threads = threads,
                                                    .jit = jit ? OT_JIT_ON : OT_JIT_OFF,
                                                    .stream_bytes = stream_bytes});
}

/* seq's values, as the host computes them. */
static float seq_at(int64_t i, int salt) { return (float)((i * 37 + salt) % 101) * 0.03f - 1.2f; }

static ot_tensor *seq(ot_backend *be, int64_t r, int64_t c, int salt)
{
    float *v = malloc(sizeof *v * (size_t)(r * c));
    for (int64_t i = 0; i < r * c; i++) v[i] = seq_at(i, salt);
    ot_tensor *t = ot_array(be, OT_SHAPE(r, c), OT_F32, v);
    free(v);
    return t;
}

/* transpose(X) * col + row (W9's tree) on one backend; the caller frees. */
static float *w9(ot_backend *be, int64_t n, char **plan)
{
    ot_tensor *x = seq(be, n, n, 1), *col = seq(be, n, 1, 2), *row = seq(be, 1, n, 3);
    ot_tensor *xt = ot_transpose(x, NULL), *out = ot_empty(be, OT_SHAPE(n, n), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *t = ot_add(ot_mul(xt, col), row);
    if (plan) *plan = test__capture(ot_explain, t);
    float *got = malloc(sizeof *got * (size_t)(n * n));
    CHECK_INT(ot_assign(out, t), 0);
    CHECK_INT(ot_get(out, got), 0);
    ot_pool_pop(p);
    ot_tensor_free(out);
    ot_tensor_free(xt);
    ot_tensor_free(x);
    ot_tensor_free(col);
    ot_tensor_free(row);
    return got;
}

/* W9's result, element by element: fma(x[j][i], col[i], row[j]) rounds once,
 * as the fused kernel does. */
static bool matches_fma(const float *got, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            if (got[i * n + j] != fmaf(seq_at(j * n + i, 1), seq_at(i, 2), seq_at(j, 3))) return false;
    return true;
}

TEST(stream_transposed_reads_generated)
{
    static const char *const isa[] = {"avx2", "avx512"};
    static const int64_t sizes[] = {300, 257, 64};
    for (int i = 0; i < 2; i++) {
        ot_backend *interp = backend(isa[i], 0, OT_STREAM_NEVER, 1);
        if (!interp) continue;   /* the CPU lacks it */
        for (int s = 0; s < 3; s++) {
            int64_t n = sizes[s];
            float *want = w9(interp, n, NULL);
            CHECK(matches_fma(want, n));
            for (int threads = 1; threads <= 3; threads += 2) {
                ot_backend *be = backend(isa[i], 1, 1, threads);
                char *plan = NULL;
                float *got = w9(be, n, &plan);
                bool code = ot_backend_options(be).jit == OT_JIT_ON;
                CHECK(plan && (strstr(plan, "(column blocks) (generated code, streaming stores)") != NULL) == code);
                CHECK(memcmp(got, want, sizeof *got * (size_t)(n * n)) == 0);
                free(plan);
                free(got);
                ot_backend_free(be);
            }
            free(want);
        }
        ot_backend_free(interp);
    }
}

/* Streaming follows the work per byte: a cheap chain streams, a chain of
 * transcendental calls does not, whatever the output's size. */
TEST(stream_only_memory_bound)
{
    ot_backend *be = backend(NULL, 1, 1, 1);
    if (ot_backend_options(be).jit != OT_JIT_ON) {
        ot_backend_free(be);
        return;
    }
    ot_tensor *a = seq(be, 64, 64, 1), *b = seq(be, 64, 64, 2);
    ot_pool *p = ot_pool_push();
    char *cheap = test__capture(ot_explain, ot_add(ot_mul(a, b), ot_div(a, 3.0f)));
    char *calls = test__capture(ot_explain, ot_mul(ot_exp(a), ot_log(ot_abs(b))));
    CHECK(cheap && strstr(cheap, "streaming stores"));
    CHECK(calls && strstr(calls, "(generated code)") && !strstr(calls, "streaming"));
    free(cheap);
    free(calls);
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

/* A dot's epilogue writes with ordinary stores (plan_stream.c's
 * dot_epilogue): the next block's product writes its lines back. The same
 * chain outside a dot still streams, and the results are the same bits. */
TEST(stream_not_in_dot_epilogues)
{
    ot_backend *be = backend(NULL, 1, 1, 1), *plain = backend(NULL, 1, OT_STREAM_NEVER, 1);
    if (ot_backend_options(be).jit != OT_JIT_ON) {
        ot_backend_free(be);
        ot_backend_free(plain);
        return;
    }
    float got[2][256 * 96];
    for (int b = 0; b < 2; b++) {
        ot_backend *on = b ? plain : be;
        ot_tensor *a = seq(on, 256, 64, 1), *w = seq(on, 64, 96, 2), *g = seq(on, 256, 96, 3);
        ot_tensor *out = ot_empty(on, OT_SHAPE(256, 96), OT_F32);
        ot_pool *p = ot_pool_push();
        ot_node *t = ot_mul(ot_relu(ot_dot(a, w)), g);
        char *plan = test__capture(ot_explain, t);
        char *chain = test__capture(ot_explain, ot_mul(ot_relu(g), g));
        CHECK(plan && strstr(plan, "(epilogue of kernel 0, on its rows in cache) (generated code)\n"));
        if (!b) CHECK(chain && strstr(chain, "streaming stores"));
        CHECK_INT(ot_assign(out, t), 0);
        CHECK_INT(ot_get(out, got[b]), 0);
        free(plan);
        free(chain);
        ot_pool_pop(p);
        ot_tensor_free(out);
        ot_tensor_free(a);
        ot_tensor_free(w);
        ot_tensor_free(g);
    }
    CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0);
    ot_backend_free(be);
    ot_backend_free(plain);
}
