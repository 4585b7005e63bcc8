/*
 * test_gemm_plan.c - how the cpu backend plans dots and in-place updates:
 * compound_dot as one GEMM call with beta and no temporary, a dot written
 * straight into its output, elementwise readers of a dot as epilogues on its
 * row blocks, and ot_assign_many updates written over their own leaves in
 * one kernel, and the size of the row panels those epilogues run on (the
 * backend's cache policy, at simulated cache sizes). Each case checks the
 * values against the ref backend and the plan through ot_stats and
 * ot_explain.
 */
#include "test.h"
#include "blas.h"  /* ot__run_dot_panels (white box) */
#include "cpu.h"   /* the panel policy (white box) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pair {
    ot_backend *be[2];   /* ref, cpu */
} pair;

/* The cpu backend plans its row blocks for a 2 MiB L2 and a 300 MiB L3
 * (a 1 MiB panel) whatever this machine reports, so that the blocks the
 * cases read in ot_explain are the same on every machine. */
static void pair_open(pair *p)
{
    static const char *const vars[2] = {"OT_L2_BYTES", "OT_L3_BYTES"}, *const sim[2] = {"2097152", "314572800"};
    char *saved[2];
    test__env_save(2, vars, saved, sim);
    p->be[0] = ot_backend_new("ref", NULL);
    p->be[1] = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    CHECK(p->be[0] && p->be[1]);
    test__env_restore(2, vars, saved);
}

static void pair_close(pair *p)
{
    ot_backend_free(p->be[0]);
    ot_backend_free(p->be[1]);
}

/* A tensor of shape (r, c) with reproducible values in [-1, 1). */
static ot_tensor *mat(ot_backend *be, int64_t r, int64_t c, ot_dtype dt, unsigned seed)
{
    int64_t len = r * c;
    double *h = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
    for (int64_t i = 0; i < r * c; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = (double)(seed >> 8 & 0xffff) / 32768.0 - 1.0;
    }
    ot_tensor *t64 = ot_array(be, OT_SHAPE(r, c), OT_F64, h);
    ot_tensor *t = ot_empty(be, OT_SHAPE(r, c), dt);
    CHECK_INT(ot_assign(t, ot_cast(t64, .dtype = dt)), 0);
    ot_tensor_free(t64);
    free(h);
    return t;
}

static uint64_t kernels_of(ot_backend *be, uint64_t *compiles)
{
    ot_stats s;
    ot_stats(be, &s);
    if (compiles) *compiles = s.compiles;
    return s.kernels;
}

static void check_same(ot_tensor *x, ot_tensor *y, double tol)
{
    ot_shape sh = ot_tensor_shape(x);
    int64_t n = 1;
    for (int d = 0; d < sh.ndim; d++) n *= sh.dims[d];
    double *hx = malloc(sizeof(double) * (size_t)n), *hy = malloc(sizeof(double) * (size_t)n);
    ot_tensor *cx = ot_empty(ot_tensor_backend(x), ot_tensor_shape(x), OT_F64);
    ot_tensor *cy = ot_empty(ot_tensor_backend(y), ot_tensor_shape(y), OT_F64);
    ot_assign(cx, ot_cast(x, .dtype = OT_F64));
    ot_assign(cy, ot_cast(y, .dtype = OT_F64));
    ot_get(cx, hx);
    ot_get(cy, hy);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!test__close(hx[i], hy[i], tol) && bad++ < 3)
            test__fail(__FILE__, __LINE__, "[%lld] %.17g vs %.17g", (long long)i, hx[i], hy[i]);
    ot_tensor_free(cx);
    ot_tensor_free(cy);
    free(hx);
    free(hy);
}

/* Checks each cpu result against its ref twin, then frees both: ref[i] and
 * cpu[i] for i < n. */
static void check_pairs(ot_tensor **ref, ot_tensor **cpu, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        check_same(ref[i], cpu[i], tol);
        ot_tensor_free(ref[i]);
        ot_tensor_free(cpu[i]);
    }
}

typedef ot_node *(*gemm_tree)(ot_tensor *a, ot_tensor *b, ot_tensor *c);
static ot_node *t_compound(ot_tensor *a, ot_tensor *b, ot_tensor *c)
{
    return ot_add(ot_mul(ot_dot(a, b), 0.7), ot_mul(c, 1.3));
}
static ot_node *t_compound_rev(ot_tensor *a, ot_tensor *b, ot_tensor *c)
{
    return ot_add(ot_mul(1.3, c), ot_mul(0.7, ot_dot(a, b)));
}
static ot_node *t_sgd(ot_tensor *a, ot_tensor *b, ot_tensor *c)
{
    return ot_sub(c, ot_mul(ot_dot(a, b), 0.01));
}
static ot_node *t_accumulate(ot_tensor *a, ot_tensor *b, ot_tensor *c)
{
    return ot_add(ot_dot(a, b), c);
}
static ot_node *t_scaled(ot_tensor *a, ot_tensor *b, ot_tensor *c)
{
    (void)c;
    return ot_neg(ot_dot(ot_T(a), ot_T(b)));
}

/* alpha*dot + beta*out into out (and its spellings) is one GEMM call: one
 * kernel, no temporary, nothing compiled the second time. */
TEST(gemm_compound_is_one_call)
{
    static const gemm_tree trees[] = {t_compound, t_compound_rev, t_sgd, t_accumulate, t_scaled};
    pair p;
    pair_open(&p);
    for (int dt = OT_F32; dt <= OT_F64; dt++) {
        for (size_t t = 0; t < sizeof trees / sizeof *trees; t++) {
            ot_tensor *c[2];
            for (int s = 0; s < 2; s++) {
                bool tr = trees[t] == t_scaled;
                ot_tensor *a = mat(p.be[s], tr ? 9 : 13, tr ? 13 : 9, dt, 1);
                ot_tensor *b = mat(p.be[s], tr ? 11 : 9, tr ? 9 : 11, dt, 2);
                c[s] = mat(p.be[s], 13, 11, dt, 3);
                uint64_t k0 = kernels_of(p.be[s], NULL), c0, c1;
                for (int rep = 0; rep < 2; rep++) {
                    ot_pool *pool = ot_pool_push();
                    kernels_of(p.be[s], rep ? &c0 : NULL);
                    CHECK_INT(ot_assign(c[s], trees[t](a, b, c[s])), 0);
                    kernels_of(p.be[s], rep ? &c1 : NULL);
                    ot_pool_pop(pool);
                }
                if (s == 1) {
                    CHECK_INT(kernels_of(p.be[s], NULL) - k0, 2);
                    CHECK_INT(c1 - c0, 0);
                }
                ot_tensor_free(a);
                ot_tensor_free(b);
            }
            check_same(c[0], c[1], dt == OT_F32 ? 1e-5 : 1e-13);
            ot_tensor_free(c[0]);
            ot_tensor_free(c[1]);
        }
    }
    pair_close(&p);
}

/* A zero beta is not BLAS's beta = 0: 0*NaN in out stays NaN, as on ref. */
TEST(gemm_zero_beta_keeps_nan)
{
    pair p;
    pair_open(&p);
    double res[2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *a = mat(p.be[s], 4, 3, OT_F64, 1), *b = mat(p.be[s], 3, 5, OT_F64, 2);
        ot_tensor *c = ot_full(p.be[s], OT_SHAPE(4, 5), OT_F64, NAN);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_assign(c, ot_add(ot_dot(a, b), ot_mul(c, 0.0))), 0);
        ot_pool_pop(pool);
        double h[20];
        ot_get(c, h);
        res[s] = h[7];
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_tensor_free(c);
    }
    CHECK(isnan(res[0]) && isnan(res[1]));
    pair_close(&p);
}

/* Output layouts BLAS cannot write (a transposed view) and outputs that an
 * operand overlaps go through a temporary, with the ref backend's values. */
TEST(gemm_unwritable_outputs)
{
    pair p;
    pair_open(&p);
    ot_tensor *r[2][2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *a = mat(p.be[s], 6, 6, OT_F32, 4), *b = mat(p.be[s], 6, 6, OT_F32, 5);
        ot_tensor *c = mat(p.be[s], 6, 6, OT_F32, 6);
        ot_tensor *ct = ot_transpose(c, NULL);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_assign(ct, ot_add(ot_dot(a, b), ct)), 0);
        CHECK_INT(ot_assign(a, ot_add(ot_mul(ot_dot(a, b), 0.5), a)), 0);
        ot_pool_pop(pool);
        r[s][0] = c;
        r[s][1] = a;
        ot_tensor_free(ct);
        ot_tensor_free(b);
    }
    check_pairs(r[0], r[1], 2, 1e-5);
    pair_close(&p);
}

/* The explain text of relu(dot + bias) (mode EPI_BLOCKS: ot_explain of the
 * tree) or of its assignment (EPI_OUT, and EPI_RESIDUAL: the output read
 * as the residual, relu(dot + out)), checked for what the mode expects. */
enum { EPI_BLOCKS, EPI_OUT, EPI_RESIDUAL };

static void check_epilogue_text(ot_tensor *o, ot_node *t, int64_t m, int mode)
{
    char *txt = mode == EPI_BLOCKS ? test__capture(ot_explain, t) : test__explain_many(1, &o, &t);
    if (mode == EPI_RESIDUAL) {   /* BLAS adds the dot to the output, relu runs over it */
        CHECK(txt && strstr(txt, "(gemm, beta: accumulates) <- leaf0 leaf1 -> out0") &&
              strstr(txt, "<- out0 -> out0"));
        free(txt);
        return;
    }
    CHECK(txt && strstr(txt, "epilogue of kernel 0"));
    if (mode == EPI_BLOCKS) {
        CHECK(txt && strstr(txt, m > 40 ? "per block of 220 of 1100 rows" : "of 40 rows"));
    } else {
        bool in_out = txt && strstr(txt, "(gemm) <- leaf0 leaf1 -> out0") &&
                      strstr(txt, "<- out0 leaf2 -> out0") && strstr(txt, "(0 bytes)");
        CHECK(in_out);
    }
    free(txt);
}

/* relu(dot + bias) (or + out) of m rows on both backends of p, the same. */
static void epilogue_pair(pair *p, int64_t m, int mode)
{
    ot_tensor *o[2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *a = mat(p->be[s], m, 33, OT_F32, 7), *w = mat(p->be[s], 33, 1030, OT_F32, 8);
        ot_tensor *bias = mat(p->be[s], 1, 1030, OT_F32, 9);
        o[s] = mode == EPI_BLOCKS ? ot_empty(p->be[s], OT_SHAPE(m, 1030), OT_F32)
                                  : mat(p->be[s], m, 1030, OT_F32, 10);
        ot_pool *pool = ot_pool_push();
        ot_node *t = ot_relu(ot_add(ot_dot(a, w), mode == EPI_RESIDUAL ? o[s] : bias));
        if (s == 1) check_epilogue_text(o[s], t, m, mode);
        CHECK_INT(ot_assign(o[s], t), 0);
        ot_pool_pop(pool);
        ot_tensor_free(a);
        ot_tensor_free(w);
        ot_tensor_free(bias);
    }
    check_same(o[0], o[1], 1e-5);
    ot_tensor_free(o[0]);
    ot_tensor_free(o[1]);
}

/* relu(dot + bias) runs its elementwise part as an epilogue on the dot's
 * rows, per block of rows once the result is large; explain says so
 * (EPI_BLOCKS). A dot whose one reader is the output's elementwise kernel
 * is written straight into the output, and that kernel runs over it in
 * place (no temporary: the result's bytes are touched once, as a
 * hand-written layer touches them), in one block and in several (EPI_OUT).
 * Where the output is also the leaf the sum reads (EPI_RESIDUAL), BLAS
 * adds the dot to it in place (beta 1), and relu runs over the output. */
TEST(gemm_epilogue_blocks_and_in_output)
{
    static const struct { int64_t m; int mode; } cases[] = {
        {40, EPI_BLOCKS}, {1100, EPI_BLOCKS}, {40, EPI_OUT}, {1100, EPI_OUT}, {40, EPI_RESIDUAL}};
    pair p;
    pair_open(&p);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        epilogue_pair(&p, cases[i].m, cases[i].mode);
    pair_close(&p);
}

/* An optimizer-style update written over its own leaves (w and v) is one
 * kernel reading w, v, g once and writing w and v once, as on ref. */
TEST(inplace_group_one_pass)
{
    pair p;
    pair_open(&p);
    enum { R = 37, C = 29 };
    ot_tensor *res[2][2];
    uint64_t bytes = 0;
    for (int s = 0; s < 2; s++) {
        ot_tensor *w = mat(p.be[s], R, C, OT_F32, 1), *v = mat(p.be[s], R, C, OT_F32, 2);
        ot_tensor *g = mat(p.be[s], R, C, OT_F32, 3);
        ot_pool *pool = ot_pool_push();
        ot_node *vn = ot_sub(ot_mul(v, 0.9), ot_mul(ot_add(g, ot_mul(w, 1e-4)), 0.1));
        ot_stats s0, s1;
        ot_stats(p.be[s], &s0);
        CHECK_INT(ot_assign_many(2, (ot_tensor *[]){w, v}, (ot_node *[]){ot_add(w, vn), vn}), 0);
        ot_stats(p.be[s], &s1);
        if (s == 1) {
            CHECK_INT(s1.kernels - s0.kernels, 1);
            bytes = s1.bytes_moved - s0.bytes_moved;
        }
        ot_pool_pop(pool);
        res[s][0] = w;
        res[s][1] = v;
        ot_tensor_free(g);
    }
    CHECK_INT(bytes, 5 * R * C * 4);
    check_pairs(res[0], res[1], 2, 1e-6);
    pair_close(&p);
}

/* When another output's kernel reads a leaf that a grouped output
 * overwrites, the group is broken up and every tree still sees the old
 * values. */
TEST(inplace_group_other_reader)
{
    pair p;
    pair_open(&p);
    ot_tensor *res[2][3];
    for (int s = 0; s < 2; s++) {
        ot_tensor *w = mat(p.be[s], 8, 9, OT_F64, 1), *v = mat(p.be[s], 8, 9, OT_F64, 2);
        ot_tensor *u = mat(p.be[s], 1, 9, OT_F64, 3);
        ot_pool *pool = ot_pool_push();
        ot_node *t[3] = {ot_mul(w, 2.0), ot_add(v, w), ot_sum(ot_mul(w, v), .axis = 0, .keepdims = true)};
        CHECK_INT(ot_assign_many(3, (ot_tensor *[]){w, v, u}, t), 0);
        ot_pool_pop(pool);
        res[s][0] = w;
        res[s][1] = v;
        res[s][2] = u;
    }
    check_pairs(res[0], res[1], 3, 1e-13);
    pair_close(&p);
}

/* Plain SGD on a linear layer: each parameter is the only output of its
 * shape and is written in place (no temporary and copy) because the kernels
 * that read it (the forward dot) run first; w -= 0.1*dot(x', delta) is one
 * GEMM accumulating into w (beta 1), with no pass of its own. */
TEST(inplace_single_outputs)
{
    pair p;
    pair_open(&p);
    enum { B = 16, R = 40, C = 24 };
    ot_tensor *res[2][2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *w = mat(p.be[s], R, C, OT_F32, 1), *b = mat(p.be[s], 1, C, OT_F32, 2);
        ot_tensor *x = mat(p.be[s], B, R, OT_F32, 3), *y = mat(p.be[s], B, C, OT_F32, 4);
        ot_pool *pool = ot_pool_push();
        ot_node *delta = ot_sub(ot_add(ot_dot(x, w), b), y);
        ot_node *gw = ot_dot(ot_T(x), delta), *gb = ot_sum(delta, .axis = 0, .keepdims = true);
        ot_tensor *outs[2] = {w, b};
        ot_node *trees[2] = {ot_sub(w, ot_mul(gw, 0.1)), ot_sub(b, ot_mul(gb, 0.1))};
        if (s == 1) {
            char *buf = test__explain_many(2, outs, trees);
            CHECK(buf != NULL);
            CHECK(buf && strstr(buf, "(gemm, alpha, beta: accumulates) <- leaf1 t1 -> out0\n") &&
                  strstr(buf, "-> out1 (direct)"));
            CHECK(buf && strstr(buf, "elementwise [960]: <-") == NULL);   /* no copy-out */
            free(buf);
        }
        CHECK_INT(ot_assign_many(2, outs, trees), 0);
        ot_pool_pop(pool);
        res[s][0] = w;
        res[s][1] = b;
        ot_tensor_free(x);
        ot_tensor_free(y);
    }
    check_pairs(res[0], res[1], 2, 1e-5);
    pair_close(&p);
}

/* batched_dot with a shared batch of 1 on either side, against ref. */
TEST(gemm_batched_shared)
{
    pair p;
    pair_open(&p);
    ot_tensor *res[2][2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *a = mat(p.be[s], 3 * 4, 5, OT_F64, 1), *b = mat(p.be[s], 5, 6, OT_F64, 2);
        ot_tensor *a3 = ot_reshape(a, OT_SHAPE(3, 4, 5)), *b3 = ot_reshape(b, OT_SHAPE(1, 5, 6));
        ot_pool *pool = ot_pool_push();
        res[s][0] = ot_eval(ot_batched_dot(a3, b3));
        res[s][1] = ot_eval(ot_batched_dot(ot_T(b3, .perm = {0, 2, 1}), ot_T(a3, .perm = {0, 2, 1})));
        ot_pool_pop(pool);
        CHECK(res[s][0] && res[s][1]);
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_tensor_free(a3);
        ot_tensor_free(b3);
    }
    check_pairs(res[0], res[1], 2, 1e-13);
    pair_close(&p);
}

/* An SGD-with-momentum step whose gradient is a dot, written in place: the
 * dot and the update run as one segment, per block of the dot's rows (the
 * update as its epilogue), and ot_explain_many shows that plan. */
TEST(gemm_epilogue_inplace_update)
{
    pair p;
    pair_open(&p);
    enum { B = 16, R = 1100, C = 300 };
    ot_tensor *res[2][2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *w = mat(p.be[s], R, C, OT_F32, 1), *v = mat(p.be[s], R, C, OT_F32, 2);
        ot_tensor *x = mat(p.be[s], B, R, OT_F32, 3), *d = mat(p.be[s], B, C, OT_F32, 4);
        ot_pool *pool = ot_pool_push();
        ot_node *g = ot_add(ot_dot(ot_T(x), d), ot_mul(w, 1e-4));
        ot_node *vn = ot_sub(ot_mul(v, 0.9), ot_mul(g, 0.1));
        ot_tensor *outs[2] = {w, v};
        ot_node *trees[2] = {ot_add(w, vn), vn};
        if (s == 1) {
            char *buf = test__explain_many(2, outs, trees);
            CHECK(buf != NULL);
            CHECK(buf && strstr(buf, "dot epilogue: kernels 0-1 run per block of 367 of 1100 rows"));
            CHECK(buf && strstr(buf, "epilogue of kernel 0"));
            free(buf);
        }
        ot_stats s0, s1;
        ot_stats(p.be[s], &s0);
        CHECK_INT(ot_assign_many(2, outs, trees), 0);
        ot_stats(p.be[s], &s1);
        if (s == 1) CHECK_INT(s1.kernels - s0.kernels, 2);
        ot_pool_pop(pool);
        res[s][0] = w;
        res[s][1] = v;
        ot_tensor_free(x);
        ot_tensor_free(d);
    }
    check_pairs(res[0], res[1], 2, 1e-5);
    pair_close(&p);
}

/* ot_sgd_step with momentum and weight decay whose gradient is a dot: BLAS
 * accumulates v + k*dot over v in place (beta 1), and one kernel finishes
 * w and v from there; values as the plain formula on ref. With v read by a
 * third output too, v is not overwritten early: the plain plan, the same
 * values. */
TEST(gemm_over_velocity)
{
    pair p;
    pair_open(&p);
    enum { B = 16, R = 300, C = 40 };
    const ot_sgd o = {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .grad_scale = 1};
    for (int third = 0; third < 2; third++) {
        ot_tensor *res[2][3];
        for (int s = 0; s < 2; s++) {
            ot_backend *be = p.be[s];
            ot_tensor *w = mat(be, R, C, OT_F32, 1), *v = mat(be, R, C, OT_F32, 2);
            ot_tensor *x = mat(be, B, R, OT_F32, 3), *d = mat(be, B, C, OT_F32, 4);
            res[s][2] = ot_empty(be, OT_SHAPE(R, C), OT_F32);
            ot_pool *pool = ot_pool_push();
            ot_node *g = ot_dot(ot_T(x), d);
            if (s == 0) {   /* the plain formula */
                ot_node *vn = ot_sub(ot_mul(0.9, v), ot_mul(0.05, ot_add(g, ot_mul(1e-3, w))));
                ot_tensor *outs[3] = {w, v, res[s][2]};
                ot_node *trees[3] = {ot_add(w, vn), vn, ot_mul(v, 2.0)};
                CHECK_INT(ot_assign_many(2 + third, outs, trees), 0);
            } else if (third) {   /* v also read by another output */
                ot_node *p2 = ot_add(v, ot_mul(-0.05 / 0.9, g));
                ot_node *vn = ot_sub(ot_mul(0.9, p2), ot_mul(0.05 * 1e-3, w));
                ot_tensor *outs[3] = {w, v, res[s][2]};
                ot_node *trees[3] = {ot_add(w, vn), vn, ot_mul(v, 2.0)};
                char *txt = test__explain_many(3, outs, trees);
                CHECK(txt && !strstr(txt, "accumulates"));
                free(txt);
                CHECK_INT(ot_assign_many(3, outs, trees), 0);
            } else {   /* ot_sgd_step's trees, explained, then the step */
                ot_node *p2 = ot_add(v, ot_mul(-0.05 / 0.9, g));
                ot_node *vn = ot_sub(ot_mul(0.9, p2), ot_mul(0.05 * 1e-3, w));
                char *txt = test__explain_many(2, (ot_tensor *[]){w, v}, (ot_node *[]){ot_add(w, vn), vn});
                CHECK(txt && strstr(txt, "(gemm, alpha, beta: accumulates) <- leaf2 leaf3 -> out1"));
                CHECK(txt && strstr(txt, "<- leaf0 out1 -> out0 (direct), out1 (direct)"));
                free(txt);
                uint64_t k0 = kernels_of(be, NULL);
                CHECK_INT(ot_sgd_step(&o, 1, &w, &g, &v), 0);
                CHECK_INT(kernels_of(be, NULL) - k0, 2);   /* the GEMM over v, the update */
            }
            ot_pool_pop(pool);
            res[s][0] = w;
            res[s][1] = v;
            if (!third) ot_tensor_free(res[s][2]);
            ot_tensor_free(x);
            ot_tensor_free(d);
        }
        check_pairs(res[0], res[1], 2 + third, 1e-5);
    }
    pair_close(&p);
}

/* ot_explain_many makes ot_assign_many's checks and writes nothing. */
TEST(explain_many_errors)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(3), OT_F32), *b = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *t = ot_add(a, 1.0f);
    CHECK_INT(ot_explain_many(1, (ot_tensor *[]){a}, (ot_node *[]){t}, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "FILE");
    CHECK_INT(ot_explain_many(1, (ot_tensor *[]){b}, (ot_node *[]){t}, stderr), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "explain_many", "(3,)", "(4,)");
    CHECK_INT(ot_explain_many(-1, NULL, NULL, stderr), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "negative");
    float h[3];
    ot_get(a, h);
    CHECK(h[0] == 0 && h[2] == 0);
    ot_pool_pop(pool);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

/* A sum over the rows of a dot's epilogue (neon's bsum, a bias gradient)
 * joins the segment right after the epilogue; values as on ref. */
TEST(gemm_bsum_joins_epilogue)
{
    pair p;
    pair_open(&p);
    ot_tensor *res[2][2];
    for (int s = 0; s < 2; s++) {
        ot_tensor *a = mat(p.be[s], 128, 64, OT_F64, 1), *b = mat(p.be[s], 64, 300, OT_F64, 2);
        ot_tensor *bias = mat(p.be[s], 1, 300, OT_F64, 3), *x = mat(p.be[s], 128, 50, OT_F64, 4);
        ot_tensor *outs[2] = {ot_empty(p.be[s], OT_SHAPE(50, 300), OT_F64),
                              ot_empty(p.be[s], OT_SHAPE(1, 300), OT_F64)};
        ot_pool *pool = ot_pool_push();
        ot_node *e = ot_relu(ot_add(ot_dot(a, b), bias));
        ot_node *trees[2] = {ot_dot(ot_T(x), e), ot_sum(e, .axis = 0, .keepdims = true)};
        if (s == 1) {
            char *buf = test__explain_many(2, outs, trees);
            CHECK(buf != NULL);
            CHECK(buf && strstr(buf, "dot epilogue: kernels 0-2"));
            CHECK(buf && strstr(buf, "(bsum of kernel 1's result, in cache)"));
            free(buf);
        }
        CHECK_INT(ot_assign_many(2, outs, trees), 0);
        ot_pool_pop(pool);
        res[s][0] = outs[0];
        res[s][1] = outs[1];
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_tensor_free(bias);
        ot_tensor_free(x);
    }
    check_pairs(res[0], res[1], 2, 1e-12);
    pair_close(&p);
}

/* An in-place group whose own kernel would read an output's leaf
 * transposed is split (through temporaries); one whose leaf only a dot reads
 * transposed (a kernel that runs first) stays one pass. Values as on ref. */
TEST(inplace_group_transposed_reads)
{
    pair p;
    pair_open(&p);
    ot_tensor *res[2][4];
    uint64_t kernels = 0;
    for (int s = 0; s < 2; s++) {
        ot_tensor *w = mat(p.be[s], 200, 200, OT_F64, 1), *v = mat(p.be[s], 200, 200, OT_F64, 2);
        ot_tensor *W = mat(p.be[s], 12, 7, OT_F64, 3), *V = mat(p.be[s], 12, 7, OT_F64, 4);
        ot_tensor *x = mat(p.be[s], 5, 7, OT_F64, 5);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_assign_many(2, (ot_tensor *[]){w, v},
                                 (ot_node *[]){ot_add(w, ot_mul(ot_T(w), 0.1)), ot_add(v, w)}), 0);
        ot_node *g = ot_dot(ot_T(ot_dot(x, ot_T(W))), x);
        ot_stats s0, s1;
        ot_stats(p.be[s], &s0);
        CHECK_INT(ot_assign_many(2, (ot_tensor *[]){W, V},
                                 (ot_node *[]){ot_sub(W, ot_mul(g, 0.1)), ot_add(ot_mul(V, 0.9), g)}), 0);
        ot_stats(p.be[s], &s1);
        if (s == 1) kernels = s1.kernels - s0.kernels;
        ot_pool_pop(pool);
        res[s][0] = w;
        res[s][1] = v;
        res[s][2] = W;
        res[s][3] = V;
        ot_tensor_free(x);
    }
    CHECK_INT(kernels, 3);   /* two dots, one update writing W and V */
    check_pairs(res[0], res[1], 4, 1e-12);
    pair_close(&p);
}

/* w -= 0.1 * dot(a, b) beside other outputs: the GEMM accumulates into w
 * only when nothing still to run reads w. Here another output reads w
 * (directly, or transposed), or the dot reads w itself; each must give
 * the old values to every reader, as the ref backend does. */
TEST(gemm_over_leaf_hazards)
{
    enum { N = 24 };
    for (int variant = 0; variant < 4; variant++) {
        pair p;
        pair_open(&p);
        ot_tensor *res[2][2];
        for (int s = 0; s < 2; s++) {
            ot_tensor *w = mat(p.be[s], N, N, OT_F32, 1), *v = mat(p.be[s], N, N, OT_F32, 2);
            ot_tensor *x = mat(p.be[s], N, N, OT_F32, 3);
            ot_pool *pool = ot_pool_push();
            ot_node *g = variant == 2 ? ot_dot(ot_T(w), x) : variant == 3 ? ot_dot(x, w) : ot_dot(ot_T(x), v);
            ot_node *other = variant == 0 ? ot_add(v, ot_mul(w, 2.0f))
                           : variant == 1 ? ot_add(v, ot_T(w)) : ot_mul(v, 0.5f);
            ot_tensor *outs[2] = {w, v};
            ot_node *trees[2] = {ot_sub(w, ot_mul(g, 0.1)), other};
            if (s == 1) {
                char *buf = test__explain_many(2, outs, trees);
                CHECK(buf && strstr(buf, "accumulates") == NULL);
                free(buf);
            }
            CHECK_INT(ot_assign_many(2, outs, trees), 0);
            ot_pool_pop(pool);
            res[s][0] = w;
            res[s][1] = v;
            ot_tensor_free(x);
        }
        check_pairs(res[0], res[1], 2, 1e-5);
        pair_close(&p);
    }
}

/* A GEMM panel's budget is half a core's L2, never more than half of the
 * last-level cache's share for one CPU (a VM may report its host's), in
 * [OT__PANEL_MIN, OT__PANEL_MAX]; an unknown L2 counts as 2 MiB. */
TEST(gemm_panel_policy)
{
    const size_t kib = 1024, mib = kib * kib;
    CHECK(ot__gemm_panel_bytes(2 * mib, 300 * mib, 2) == 1 * mib);   /* this Xeon VM */
    CHECK(ot__gemm_panel_bytes(2 * mib, 32 * mib, 2) == 1 * mib);
    CHECK(ot__gemm_panel_bytes(2 * mib, 8 * mib, 2) == 1 * mib);
    CHECK(ot__gemm_panel_bytes(2 * mib, 8 * mib, 8) == 512 * kib);   /* 1 MiB of L3 a CPU */
    CHECK(ot__gemm_panel_bytes(1 * mib, 32 * mib, 16) == 512 * kib);   /* Zen 4 */
    CHECK(ot__gemm_panel_bytes(256 * kib, 300 * mib, 2) == OT__PANEL_MIN);
    CHECK(ot__gemm_panel_bytes(0, 300 * mib, 2) == 1 * mib);           /* L2 unknown */
    CHECK(ot__gemm_panel_bytes(300 * mib, 300 * mib, 2) == OT__PANEL_MAX);   /* a VM's odd L2 */
    CHECK(ot__gemm_panel_bytes(2 * mib, 1 * mib, 1) == 512 * kib);   /* a small L3 bounds it */
    CHECK(ot__gemm_panel_bytes(2 * mib, 0, 2) == 1 * mib);             /* L3 unknown */
    CHECK(ot__gemm_panel_bytes(2 * mib, 300 * mib, 0) == 1 * mib);     /* CPUs unknown */
}

/* The plan's row panels follow the backend's budget at simulated
 * last-level caches (OT_L3_BYTES: 300, 32, 8 and 1 MiB): each budget
 * within the policy's bound, no larger for a smaller cache, the blocks in
 * ot_explain what the budget makes of a narrow result (8 bytes an element
 * counted, at least 256 rows, equal blocks), and the values right. */
TEST(gemm_panel_simulated_caches)
{
    const size_t mib = (size_t)1 << 20, sizes[] = {300 * mib, 32 * mib, 8 * mib, 1 * mib};
    const char *const var[1] = {"OT_L3_BYTES"};
    char *saved[1];
    test__env_save(1, var, saved, NULL);
    enum { M = 6000, K = 8, N = 40 };
    long cpus = ot__usable_cpus();
    size_t last = SIZE_MAX;
    ot_backend *ref = ot_backend_new("ref", NULL);
    for (int i = 0; i < 4; i++) {
        char v[32];
        snprintf(v, sizeof v, "%zu", sizes[i]);
        setenv("OT_L3_BYTES", v, 1);
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 2});
        CHECK(be != NULL);
        if (!be) break;
        size_t panel = ((const ot_cpu *)be->impl)->panel_bytes;
        size_t bound = ot__cache_share(sizes[i], cpus) / (size_t)(cpus > 0 ? cpus : 1) / 2;
        CHECK(panel >= OT__PANEL_MIN && panel <= OT__PANEL_MAX && panel <= last);
        CHECK(panel <= bound || panel == OT__PANEL_MIN);
        last = panel;
        int64_t blk = (int64_t)panel / (8 * N), nb;
        if (blk < 256) blk = 256;
        nb = M <= 2 * blk ? 1 : (M + blk - 1) / blk;
        blk = (M + nb - 1) / nb;
        ot_tensor *o[2];
        for (int s = 0; s < 2; s++) {
            ot_backend *b = s ? be : ref;
            ot_tensor *a = mat(b, M, K, OT_F32, 3), *w = mat(b, K, N, OT_F32, 4);
            ot_tensor *bias = mat(b, 1, N, OT_F32, 5);
            o[s] = ot_empty(b, OT_SHAPE(M, N), OT_F32);
            ot_pool *pool = ot_pool_push();
            ot_node *t = ot_tanh(ot_add(ot_dot(a, w), bias));
            if (s) {
                char want[64], *txt = test__explain_many(1, &o[s], &t);
                snprintf(want, sizeof want, "per block of %lld of %d rows", (long long)blk, M);
                CHECK(txt && strstr(txt, want));
                free(txt);
            }
            CHECK_INT(ot_assign(o[s], t), 0);
            ot_pool_pop(pool);
            ot_tensor_free(a);
            ot_tensor_free(w);
            ot_tensor_free(bias);
        }
        check_same(o[0], o[1], 1e-5);
        ot_tensor_free(o[0]);
        ot_tensor_free(o[1]);
        ot_backend_free(be);
    }
    ot_backend_free(ref);
    test__env_restore(1, var, saved);
}

/* What the panels' epilogue saw: each panel's rows, in order, complete. */
typedef struct panel_log {
    const float *c;            /* C as the GEMM writes it */
    bool reuse;
    int64_t n, k, next, calls;
    bool ok;
} panel_log;

/* Row i of A is all i, B is all 1: C[i, j] = i k, in the panel's buffer. */
static void panel_seen(void *ctx, int64_t r0, int64_t n)
{
    panel_log *g = ctx;
    g->ok = g->ok && r0 == g->next;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < g->n; j++)
            g->ok = g->ok && g->c[((g->reuse ? 0 : r0) + i) * g->n + j] == (float)((r0 + i) * g->k);
    g->next = r0 + n;
    g->calls++;
}

/* ot__run_dot_panels, the GEMM-with-epilogue interface that dot segments
 * (and convolutions) use: panels in order, each complete when its epilogue
 * runs, at its rows of C or in one reused panel buffer. */
TEST(gemm_run_dot_panels)
{
    enum { M = 10, K = 3, N = 5 };
    float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i / K);
    for (int i = 0; i < K * N; i++) b[i] = 1;
    ot_view va = {.space = OT_SPACE_LEAF, .dtype = OT_F32, .strides = {K, 1}};
    ot_view vb = {.space = OT_SPACE_LEAF, .dtype = OT_F32, .strides = {N, 1}};
    ot_view loads[2] = {va, vb};
    ot_kernel k = {.kind = OT_KER_DOT, .nload = 2, .loads = loads, .m = M, .n = N, .k = K,
                   .batch = 1, .alpha = {-1, 1}, .beta = {-1, 0}};
    k.store = (ot_view){.space = OT_SPACE_TEMP, .dtype = OT_F32, .strides = {N, 1}};
    char *base[2] = {(char *)a, (char *)b};
    static const int64_t rows[] = {4, 3, 10, 0};
    for (int reuse = 0; reuse < 2; reuse++)
        for (int i = 0; i < 4; i++) {
            panel_log g = {c, reuse, N, K, 0, 0, true};
            memset(c, 0xff, sizeof c);
            ot__run_dot_panels(&k, base, (char *)c, NULL, NULL,
                               &(ot__panels){rows[i], reuse, panel_seen, &g});
            int64_t step = rows[i] > 0 ? rows[i] : M;
            CHECK(g.ok && g.next == M && g.calls == (M + step - 1) / step);
        }
}
