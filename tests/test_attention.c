/*
 * test_attention.c - issue 35: ot_attention (optree/attention.h). Values
 * by hand (uniform scores, causality, a fully masked row: zeros and zero
 * gradients, no NaN; a row a large finite mask hides: still a softmax), the cpu kernel in f32 at seq 2048 (4096: make
 * check-attn-long) against the plain formula in double on sampled rows
 * (output and d/dq), build-time errors
 * naming shapes and the caller's line, ot_pp read back by ot_parse, and
 * ot_explain. Finite differences of the node are test_autodiff.c's;
 * random shapes against NumPy are tests/attn_check.py's.
 */
#include "test.h"
#include "fuzz.h"

#include <math.h>
#include <stdlib.h>

/* The values of node n as f64 (count into *count), or NULL with the
 * failure recorded. */
static double *values(ot_backend *be, ot_node *n, int64_t *count)
{
    ot_tensor *t = n ? ot_empty(be, ot_node_shape(n), OT_F64) : NULL;
    *count = t ? ot_tensor_numel(t) : 0;
    double *v = malloc(sizeof *v * (size_t)(*count ? *count : 1));
    int rc = t ? ot_assign(t, n) : -1;
    if (rc) test__fail(__FILE__, __LINE__, "no value: %s", ot_errmsg()), ot_clear_error();
    else CHECK_INT(ot_get(t, v), 0);
    ot_tensor_free(t);
    if (rc) free(v);
    return rc ? NULL : v;
}

static void expect(ot_backend *be, ot_node *n, const double *want, int len, const char *what)
{
    int64_t count;
    double *v = values(be, n, &count);
    if (!v) return;
    CHECK_INT(count, len);
    for (int i = 0; i < len && i < count; i++)
        if (!(fabs(v[i] - want[i]) <= 2e-6 * (1 + fabs(want[i])))) {
            test__fail(__FILE__, __LINE__, "%s on %s [%d]: %g, expected %g", what,
                       ot_backend_name(be), i, v[i], want[i]);
            break;
        }
    free(v);
}

static ot_tensor *filled(ot_backend *be, ot_shape s, ot_dtype dt, const double *v)
{
    ot_tensor *t = ot_empty(be, s, OT_F64), *u = ot_empty(be, s, dt);
    ot_set(t, v);
    ot_assign(u, ot_tensor_node(t));
    ot_tensor_free(t);
    return u;
}

/* q = 0: every score equal, so a row is the mean of the keys it sees;
 * causal: row i the mean of v[0..i]; a mask of -inf over row 1 (every key)
 * gives zeros there, and zero gradients into q, k and v from that row. */
TEST(attention_values_by_hand)
{
    const char *names[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(names[b], OT_FUSION_ON);
        ot_pool *p = ot_pool_push();
        ot_tensor *q = ot_zeros(be, OT_SHAPE(1, 1, 3, 2), OT_F32);
        ot_tensor *k = filled(be, OT_SHAPE(1, 1, 3, 2), OT_F32, (double[]){1, 2, 3, 4, 5, 6});
        ot_tensor *v = filled(be, OT_SHAPE(1, 1, 3, 1), OT_F32, (double[]){2, 4, 9});
        ot_tensor *m = filled(be, OT_SHAPE(3, 1), OT_F32, (double[]){0, -INFINITY, 0});
        expect(be, ot_attention(q, k, v), (double[]){5, 5, 5}, 3, "plain");
        expect(be, ot_attention(q, k, v, .causal = true), (double[]){2, 3, 5}, 3, "causal");
        ot_node *o = ot_attention(q, k, v, .mask = ot_tensor_node(m), .causal = true);
        expect(be, o, (double[]){2, 0, 5}, 3, "masked row");
        ot_autodiff *ad = ot_autodiff_new(ot_sum(o), NULL);
        CHECK(ad != NULL);
        /* row 0 sees v0 alone, row 1 nothing, row 2 all three (p = 1/3);
         * dq: row 2's dS = p (v - 5) = (-1, -1/3, 4/3) through k, scaled */
        double dq2 = 14.0 / 3 / sqrt(2.0);
        expect(be, ot_autodiff_grad(ad, v), (double[]){4.0 / 3, 1.0 / 3, 1.0 / 3}, 3, "d/dv");
        expect(be, ot_autodiff_grad(ad, k), (double[]){0, 0, 0, 0, 0, 0}, 6, "d/dk");
        expect(be, ot_autodiff_grad(ad, q), (double[]){0, 0, 0, 0, dq2, dq2}, 6, "d/dq");
        ot_autodiff_free(ad);
        ot_tensor *tensors[] = {q, k, v, m};
        for (int i = 0; i < 4; i++) ot_tensor_free(tensors[i]);
        ot_pool_pop(p);
        ot_backend_free(be);
    }
}

/* A row every key of which a large finite mask hides (-1e9 or -FLT_MAX in
 * f32, -1e308 in f64: padding masked the PyTorch way) is still a softmax:
 * with q = 0 every row, that one too, is the mean of v, and its gradients
 * are the other rows'. Its logsumexp (the mask plus log 3) rounds to the
 * mask, and exp(s - lse) gave every key a weight of 1: ref's output was
 * the sum of v, and cpu's gradients were 3 times too large. */
TEST(attention_row_masked_by_a_large_finite_value)
{
    static const struct { ot_dtype dt; double m; } cases[] = {
        {OT_F32, -1e9}, {OT_F32, -3.4028234663852886e38}, {OT_F64, -1e308}};
    const char *names[] = {"ref", "cpu"};
    double dq = 14.0 / 3 / sqrt(2.0), a = -1, c = -1.0 / 3, e = 4.0 / 3;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int b = 0; b < 2; b++) {
            ot_backend *be = test__backend(names[b], OT_FUSION_ON);
            ot_pool *p = ot_pool_push();
            ot_dtype dt = cases[t].dt;
            double m = cases[t].m;
            ot_tensor *q = ot_zeros(be, OT_SHAPE(1, 1, 3, 2), dt);
            ot_tensor *k = filled(be, OT_SHAPE(1, 1, 3, 2), dt, (double[]){1, 2, 3, 4, 5, 6});
            ot_tensor *v = filled(be, OT_SHAPE(1, 1, 3, 1), dt, (double[]){2, 4, 9});
            ot_tensor *mk = filled(be, OT_SHAPE(3, 3), dt, (double[]){0, 0, 0, m, m, m, 0, 0, 0});
            ot_node *o = ot_attention(q, k, v, .mask = ot_tensor_node(mk));
            char what[64];
            snprintf(what, sizeof what, "%s mask %g", ot_dtype_name(dt), m);
            expect(be, o, (double[]){5, 5, 5}, 3, what);
            ot_autodiff *ad = ot_autodiff_new(ot_sum(o), NULL);
            CHECK(ad != NULL);
            expect(be, ot_autodiff_grad(ad, v), (double[]){1, 1, 1}, 3, what);
            expect(be, ot_autodiff_grad(ad, q), (double[]){dq, dq, dq, dq, dq, dq}, 6, what);
            expect(be, ot_autodiff_grad(ad, mk), (double[]){a, c, e, a, c, e, a, c, e}, 9, what);
            ot_autodiff_free(ad);
            ot_tensor *tensors[] = {q, k, v, mk};
            for (int i = 0; i < 4; i++) ot_tensor_free(tensors[i]);
            ot_pool_pop(p);
            ot_backend_free(be);
        }
}

/* Row i of softmax(q k^T scale) v and of d sum(o r) / dq, causal, in
 * double from the f32 inputs (n keys, dim d). */
static void plain_row(const float *q, const float *k, const float *v, const float *r, int64_t n,
                      int d, int64_t i, double *o, double *dq)
{
    double scale = 1 / sqrt((double)d), m = -INFINITY, sum = 0;
    double *p = malloc(sizeof *p * (size_t)n), *dp = malloc(sizeof *dp * (size_t)n);
    for (int64_t j = 0; j <= i; j++) {
        double s = 0;
        for (int c = 0; c < d; c++) s += (double)q[i * d + c] * k[j * d + c];
        p[j] = s * scale;
        if (p[j] > m) m = p[j];
    }
    for (int64_t j = 0; j <= i; j++) sum += p[j] = exp(p[j] - m);
    double dsum = 0;
    for (int c = 0; c < d; c++) o[c] = dq[c] = 0;
    for (int64_t j = 0; j <= i; j++) {
        p[j] /= sum;
        dp[j] = 0;
        for (int c = 0; c < d; c++) o[c] += p[j] * v[j * d + c], dp[j] += (double)r[i * d + c] * v[j * d + c];
        dsum += p[j] * dp[j];
    }
    for (int64_t j = 0; j <= i; j++)
        for (int c = 0; c < d; c++) dq[c] += scale * p[j] * (dp[j] - dsum) * k[j * d + c];
    free(p);
    free(dp);
}

/* An infinite upstream gradient (the log of a zero output) on a causal
 * query that sees key 0 alone: the keys it never saw get zero gradients
 * in k and v on cpu (f32 and f64) as on ref, where the tiles' P of 0 times
 * inf made NaN; key 0's own may be inf or NaN alike. */
TEST(attention_infinite_upstream_spares_hidden_keys)
{
    const double qv[2] = {0.5, -1}, kv[6] = {1, 2, -1, 0.5, 0.25, 1}, vv[6] = {0.5, 1, -2, 1, 3, -1};
    const double up[2] = {INFINITY, 1};
    double *want[2] = {NULL, NULL};
    int64_t count[2];
    for (int pass = 0; pass < 3; pass++) {
        ot_backend *be = ot_backend_new(pass ? "cpu" : "ref", &(ot_backend_opts){.threads = 1});
        ot_dtype dt = pass == 1 ? OT_F32 : OT_F64;
        ot_pool *pool = ot_pool_push();
        ot_tensor *q = filled(be, OT_SHAPE(1, 1, 1, 2), dt, qv), *k = filled(be, OT_SHAPE(1, 1, 3, 2), dt, kv);
        ot_tensor *v = filled(be, OT_SHAPE(1, 1, 3, 2), dt, vv), *g = filled(be, OT_SHAPE(1, 1, 1, 2), dt, up);
        ot_autodiff *ad = ot_autodiff_new(ot_attention(q, k, v, .causal = true), ot_tensor_node(g));
        for (int w = 0; w < 2; w++) {
            double *got = values(be, ot_autodiff_grad(ad, w ? v : k), &count[w]);
            CHECK(got && count[w] == 6);
            for (int x = 2; got && x < 6; x++) CHECK(got[x] == 0);   /* keys 1 and 2 */
            for (int x = 0; got && want[w] && x < 2; x++)
                CHECK(isnan(got[x]) == isnan(want[w][x]) && (isnan(got[x]) || got[x] == want[w][x] ||
                                                               fabs(got[x] - want[w][x]) < 1e-5));
            if (!pass) want[w] = got;
            else free(got);
        }
        ot_autodiff_free(ad);
        ot_pool_pop(pool);
        ot_tensor_free(q), ot_tensor_free(k), ot_tensor_free(v), ot_tensor_free(g);
        ot_backend_free(be);
    }
    free(want[0]), free(want[1]);
}

/* The documented tolerance: f32 results within 2e-5 * (1 + |want|) of the
 * plain formula in double (one head, dim 64, causal), at seq 2048 (about
 * 0.3 s of CPU); make check-attn-long runs it at seq 4096 (OT_ATTN_SEQ). */
TEST(attention_cpu_f32_long_seq_matches_the_plain_formula)
{
    enum { D = 64 };
    const char *env = getenv("OT_ATTN_SEQ");
    int64_t S = env && atoi(env) > 0 ? atoi(env) : 2048;
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_pool *p = ot_pool_push();
    ot_tensor *t[4];
    float *host[4];
    uint64_t x = 12345;
    for (int i = 0; i < 4; i++) {
        host[i] = malloc(sizeof(float) * (size_t)(S * D));
        for (int64_t j = 0; j < S * D; j++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            host[i][j] = (float)((double)(x >> 11) / 9007199254740992.0 * 2 - 1);
        }
        t[i] = ot_empty(be, OT_SHAPE(1, 1, S, D), OT_F32);
        ot_set(t[i], host[i]);
    }
    ot_node *o = ot_attention(t[0], t[1], t[2], .causal = true);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(o, ot_tensor_node(t[3]))), NULL);
    ot_tensor *got_o = ot_empty(be, OT_SHAPE(1, 1, S, D), OT_F32);
    ot_tensor *got_dq = ot_empty(be, OT_SHAPE(1, 1, S, D), OT_F32);
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){got_o, got_dq},
                             (ot_node *[]){o, ad ? ot_autodiff_grad(ad, t[0]) : NULL}), 0);
    float *go = malloc(sizeof(float) * (size_t)(S * D)), *gdq = malloc(sizeof(float) * (size_t)(S * D));
    ot_get(got_o, go);
    ot_get(got_dq, gdq);
    double worst[2] = {0, 0}, want_o[D], want_dq[D];
    for (int64_t i = 0; i < S; i += (i < 200 ? 1 : 257)) {
        plain_row(host[0], host[1], host[2], host[3], S, D, i, want_o, want_dq);
        for (int c = 0; c < D; c++) {
            double e0 = fabs(go[i * D + c] - want_o[c]) / (1 + fabs(want_o[c]));
            double e1 = fabs(gdq[i * D + c] - want_dq[c]) / (1 + fabs(want_dq[c]));
            worst[0] = e0 > worst[0] ? e0 : worst[0];
            worst[1] = e1 > worst[1] ? e1 : worst[1];
        }
    }
    printf("  cpu f32 seq %lld: worst relative error o %.2e, dq %.2e\n", (long long)S, worst[0],
           worst[1]);
    CHECK(worst[0] < 2e-5 && worst[1] < 2e-5);
    ot_autodiff_free(ad);
    for (int i = 0; i < 4; i++) ot_tensor_free(t[i]), free(host[i]);
    ot_tensor_free(got_o);
    ot_tensor_free(got_dq);
    free(go);
    free(gdq);
    ot_pool_pop(p);
    ot_backend_free(be);
}

TEST(attention_bad_input_is_a_build_error)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *q = ot_zeros(be, OT_SHAPE(2, 3, 5, 4), OT_F32), *k = ot_zeros(be, OT_SHAPE(2, 3, 6, 4), OT_F32);
    ot_tensor *v = ot_zeros(be, OT_SHAPE(2, 3, 6, 7), OT_F32), *q3 = ot_zeros(be, OT_SHAPE(3, 5, 4), OT_F32);
    ot_tensor *k8 = ot_zeros(be, OT_SHAPE(2, 3, 6, 8), OT_F32), *v5 = ot_zeros(be, OT_SHAPE(2, 3, 5, 7), OT_F32);
    ot_tensor *h2 = ot_zeros(be, OT_SHAPE(2, 2, 6, 4), OT_F32), *vd = ot_zeros(be, OT_SHAPE(2, 3, 6, 7), OT_F64);
    ot_tensor *m = ot_zeros(be, OT_SHAPE(5, 5), OT_F32), *m5 = ot_zeros(be, OT_SHAPE(1, 1, 1, 2, 6), OT_F32);
    char site[64];
    ot_pool *p = ot_pool_push();
    int line = __LINE__ + 1;
    CHECK(ot_attention(q3, k, v) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "attention:", "(3,5,4)", "must be 4-D");
    ot_clear_error();
    CHECK(ot_attention(q, h2, v) == NULL);
    CHECK_ERR(OT_ESHAPE, "(2,2,6,4)", "batch and heads");
    ot_clear_error();
    CHECK(ot_attention(q, k8, v) == NULL);
    CHECK_ERR(OT_ESHAPE, "q (2,3,5,4) and k (2,3,6,8) must agree in dim");
    ot_clear_error();
    CHECK(ot_attention(q, k, v5) == NULL);
    CHECK_ERR(OT_ESHAPE, "k (2,3,6,4) and v (2,3,5,7) must agree in seq");
    ot_clear_error();
    CHECK(ot_attention(q, k, vd) == NULL);
    CHECK_ERR(OT_EDTYPE, "v is float64");
    ot_clear_error();
    CHECK(ot_attention(q, k, v, .mask = ot_tensor_node(m)) == NULL);
    CHECK_ERR(OT_ESHAPE, "mask (5,5) is not broadcastable to the scores (2,3,5,6)");
    ot_clear_error();
    CHECK(ot_attention(q, k, v, .mask = ot_tensor_node(m5)) == NULL);
    CHECK_ERR(OT_ESHAPE, "more than 4 dims");
    ot_clear_error();
    CHECK(ot_attention(q, k, (ot_node *)NULL) == NULL);
    CHECK_ERR(OT_ENULL, "v is NULL");
    ot_clear_error();
    /* a scale of inf or NaN gave rows of NaN, or (-inf) zeros, quietly */
    const double bad_scale[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        CHECK(ot_attention(q, k, v, .scale = bad_scale[i]) == NULL);
        CHECK_ERR(OT_EINVAL, "attention:", "must be finite", "q (2,3,5,4)");
        ot_clear_error();
    }
    /* a hand-built node whose pack disagrees with its attributes */
    ot_args a = {.axis = OT_AXIS_ALL, .depth = 5, .ddof = 7};
    CHECK(ot_build(OT_OP_ATTENTION, ot_tensor_node(q), ot_reshape_node(v, OT_SHAPE(252)), &a) == NULL);
    CHECK_ERR(OT_ESHAPE, "the pack (252,) must hold k, v and the mask: 330 elements");
    ot_clear_error();
    CHECK(ot_attention(q, k, v, .causal = true) != NULL);
    ot_pool_pop(p);
    ot_tensor *all[] = {q, k, v, q3, k8, v5, h2, vd, m, m5};
    for (int i = 0; i < 10; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

TEST(attention_prints_parses_and_explains)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    const char *names[] = {"q", "k", "v", "m"};
    ot_tensor *t[4];
    ot_node *in[4];
    ot_shape shapes[4] = {OT_SHAPE(2, 2, 5, 3), OT_SHAPE(2, 2, 6, 3), OT_SHAPE(2, 2, 6, 4),
                          OT_SHAPE(2, 1, 5, 6)};
    for (int i = 0; i < 4; i++) {
        t[i] = ot_zeros(be, shapes[i], OT_F32);
        ot_tensor_set_name(t[i], names[i]);
        in[i] = ot_tensor_node(t[i]);
    }
    ot_pool *p = ot_pool_push();
    ot_node *o = ot_attention(in[0], in[1], in[2], .mask = in[3], .causal = true, .scale = 0.5);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_sqr(o)), NULL);
    ot_node *trees[] = {o, ot_autodiff_grad(ad, t[0]), ot_autodiff_grad(ad, t[1]),
                        ot_autodiff_grad(ad, t[3])};
    /* the gradients read autodiff's unnamed zeros (the lse column's), so
     * only the forward is read back */
    CHECK_INT(fuzz_pp_roundtrip(trees, 1, 4, names, in), -1);
    char *e = test__capture(ot_explain, trees[0]);
    CHECK(e && strstr(e, "attention attention [2x2x5x3 . 6 keys, dim 3/4] (flash forward, online "
                         "softmax: tiles 64x128, sgemm, causal, mask)"));
    free(e);
    e = test__capture(ot_explain, trees[1]);
    CHECK(e && strstr(e, "flash backward, P recomputed"));
    free(e);
    e = test__capture(ot_pp, o);
    CHECK(e && strstr(e, "(attention q (concat (concat (reshape k shape=(72,)) (reshape v "
                         "shape=(96,)) axis=0) (reshape m shape=(60,)) axis=0) scale=0.5 causal "
                         "seq_k=6 dim_v=4 mask=29) [:, :, :, 0:4]"));
    free(e);
    e = test__capture(ot_pp, trees[3]);
    CHECK(e && strstr(e, "(attention_grad (concat (concat q"));
    free(e);
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    for (int i = 0; i < 4; i++) ot_tensor_free(t[i]);
    ot_backend_free(be);
}
