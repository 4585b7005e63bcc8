/*
 * test_tblock.c - the cpu backend's transposed blocks (src/cpu/exec_tblock.c):
 * elementwise kernels reading transposed views, on shapes that are not
 * multiples of the 16x16 (AVX-512) or 8x8 (AVX2) blocks, single rows and
 * columns, rows of 64- and 32-column blocks with and without a tail
 * (100: 64 + 32 + 4; 96: 64 + 32), several strips, negative strides, broadcasts, two transposed
 * operands, a called function and a batch dim; generated code with and
 * without streaming stores bitwise against the interpreter, and all of
 * them against the ref backend, on each ISA with generated code here.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { INTERP, JIT, STREAM, NMODE };

/* A cpu backend under OT_ISA=isa in a mode, or the ref backend (isa NULL). */
static ot_backend *tb_backend(const char *isa, int mode)
{
    if (!isa) return ot_backend_new("ref", NULL);
    setenv("OT_ISA", isa, 1);
    if (mode == INTERP) setenv("OT_JIT", "0", 1);
    if (mode == STREAM) setenv("OT_STREAM_BYTES", "1", 1);
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    unsetenv("OT_ISA");
    unsetenv("OT_JIT");
    unsetenv("OT_STREAM_BYTES");
    return be;
}

/* x0, x1: (b, c, r); x2: (b, r, 1), a column; x3: (c), a row. */
typedef ot_node *(*tb_tree)(ot_tensor *const *x);

static ot_node *t_w9(ot_tensor *const *x)   /* W9's transpose(X)*col + row */
{
    return ot_add(ot_mul(ot_T(x[0], {0, 2, 1}), x[2]), x[3]);
}
static ot_node *t_two(ot_tensor *const *x)   /* two transposed operands */
{
    return ot_sub(ot_T(x[0], {0, 2, 1}), ot_mul(ot_T(x[1], {0, 2, 1}), 0.5));
}
static ot_node *t_call(ot_tensor *const *x)   /* a function the code calls */
{
    return ot_sig(ot_add(ot_T(x[1], {0, 2, 1}), x[3]));
}
static ot_node *t_neg_inner(ot_tensor *const *x)   /* x's c reversed: a negative inner stride */
{
    ot_tensor *v = ot_slice(x[0], OT_ALL, OT_RANGE(OT_NONE, OT_NONE, -1));
    ot_node *n = ot_mul(ot_T(v, {0, 2, 1}), x[2]);
    ot_tensor_free(v);
    return n;
}
static ot_node *t_neg_outer(ot_tensor *const *x)   /* x's r reversed: not a blocked view */
{
    ot_tensor *v = ot_slice(x[1], OT_ALL, OT_ALL, OT_RANGE(OT_NONE, OT_NONE, -1));
    ot_node *n = ot_add(ot_T(v, {0, 2, 1}), ot_T(x[0], {0, 2, 1}));
    ot_tensor_free(v);
    return n;
}

static ot_tensor *tb_input(ot_backend *be, ot_shape s, int seed)
{
    int64_t m = 1;
    for (int d = 0; d < s.ndim; d++) m *= s.dims[d];
    float *h = malloc(sizeof *h * (size_t)m);
    for (int64_t e = 0; e < m; e++) h[e] = (float)((e * 37 + seed * 11) % 101) * 0.0625f - 3.0f;
    ot_tensor *t = ot_array(be, s, OT_F32, h);
    free(h);
    return t;
}

/* tree on backend be into a fresh (b, r, c) output, read back into res. */
static void tb_run(ot_backend *be, int64_t b, int64_t r, int64_t c, tb_tree tree, float *res)
{
    ot_tensor *x[4] = {tb_input(be, OT_SHAPE(b, c, r), 1), tb_input(be, OT_SHAPE(b, c, r), 2),
                       tb_input(be, OT_SHAPE(b, r, 1), 3), tb_input(be, OT_SHAPE(c), 4)};
    ot_tensor *o = ot_empty(be, OT_SHAPE(b, r, c), OT_F32);
    ot_pool *p = ot_pool_push();
    int rc = ot_assign(o, tree(x));
    ot_pool_pop(p);
    if (rc) test__fail(__FILE__, __LINE__, "assign: %s", ot_errmsg());
    else ot_get(o, res);
    ot_tensor_free(o);
    for (int i = 0; i < 4; i++) ot_tensor_free(x[i]);
}

static void tb_compare(const char *isa, ot_backend *const *be, ot_backend *ref, const char *what,
                       int64_t b, int64_t r, int64_t c, tb_tree tree)
{
    size_t n = (size_t)(b * r * c);
    float *res[NMODE + 1];
    for (int m = 0; m <= NMODE; m++) {
        res[m] = malloc(sizeof(float) * n);
        tb_run(m < NMODE ? be[m] : ref, b, r, c, tree, res[m]);
    }
    for (int m = JIT; m < NMODE; m++)
        if (memcmp(res[INTERP], res[m], sizeof(float) * n))
            test__fail(__FILE__, __LINE__, "OT_ISA=%s: %s %lldx%lldx%lld: %s and interpreter differ",
                       isa, what, (long long)b, (long long)r, (long long)c,
                       m == JIT ? "generated code" : "streaming stores");
    for (size_t e = 0; e < n; e++)
        if (!(fabsf(res[INTERP][e] - res[NMODE][e]) <= 1e-5f * (1.0f + fabsf(res[NMODE][e])))) {
            test__fail(__FILE__, __LINE__, "OT_ISA=%s: %s %lldx%lldx%lld: element %zu is %g, ref %g",
                       isa, what, (long long)b, (long long)r, (long long)c, e,
                       (double)res[INTERP][e], (double)res[NMODE][e]);
            break;
        }
    for (int m = 0; m <= NMODE; m++) free(res[m]);
}

TEST(tblock_transposed_operands_match_interpreter_and_ref)
{
    static const char *const isas[] = {"avx2", "avx512"};
    static const int64_t shapes[][3] = {{1, 1, 40},   {1, 40, 1},   {1, 17, 33}, {1, 16, 16},
                                        {1, 300, 40}, {1, 33, 300}, {2, 37, 45}, {3, 9, 64},
                                        {1, 130, 100}, {2, 20, 96}};
    static const struct {
        const char *what;
        tb_tree tree;
    } trees[] = {{"transpose(X)*col + row", t_w9}, {"two transposed", t_two},
                 {"sig, called", t_call},          {"negative inner stride", t_neg_inner},
                 {"negative outer stride", t_neg_outer}};
    ot_backend *ref = tb_backend(NULL, 0);
    CHECK(ref != NULL);
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        const ot_kernels *kt = ot__kernels_for(ot__isa_parse(isas[i]));
        if (!kt || !ot__jit_available(kt)) continue;   /* no generated code here */
        ot_backend *be[NMODE];
        for (int m = 0; m < NMODE; m++) be[m] = tb_backend(isas[i], m);
        for (int m = 0; m < NMODE; m++) CHECK(be[m] != NULL);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes && be[0] && be[1] && be[2]; s++)
            for (size_t t = 0; t < sizeof trees / sizeof *trees; t++)
                tb_compare(isas[i], be, ref, trees[t].what, shapes[s][0], shapes[s][1],
                           shapes[s][2], trees[t].tree);
        for (int m = 0; m < NMODE; m++) ot_backend_free(be[m]);
    }
    ot_backend_free(ref);
}
