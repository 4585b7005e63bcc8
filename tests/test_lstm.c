/*
 * test_lstm.c - a recurrence trained through the public API (issue 15's W11
 * at test size: an LSTM unrolled over its steps, ot_autodiff for backprop
 * through time, ot_sgd_step on views of one weight tensor), and the plan it
 * needs: a sum of dots (a weight's gradient summed over the steps) is one
 * running sum that BLAS accumulates into, not an elementwise kernel reading
 * every term, all of them stored and alive until it runs (which made W11
 * slower fused than unfused). Values are checked against the ref backend
 * and the unfused cpu backend; the plan through ot_explain_many. And a
 * training loop, which builds a new tree per step, keeps no dead trees in
 * the autodiff memo.
 */
#include "test.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- helpers ---------------------------------------------------------------- */

/* A new f32 tensor of shape sh filled with reproducible values in
 * [-scale, scale). */
static ot_tensor *filled(ot_backend *be, ot_shape sh, double scale, unsigned seed)
{
    int64_t n = 1;
    for (int d = 0; d < sh.ndim; d++) n *= sh.dims[d];
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = (float)(scale * ((double)(seed >> 8 & 0xffff) / 32768.0 - 1.0));
    }
    ot_tensor *t = ot_array(be, sh, OT_F32, h);
    CHECK(t != NULL);
    free(h);
    return t;
}

/* x and y agree element for element within tol (test__close). */
static void check_same(ot_tensor *x, ot_tensor *y, double tol)
{
    int64_t n = ot_tensor_numel(x);
    CHECK_INT(n, ot_tensor_numel(y));
    float *hx = malloc(sizeof(float) * (size_t)n), *hy = malloc(sizeof(float) * (size_t)n);
    CHECK_INT(ot_get(x, hx), 0);
    CHECK_INT(ot_get(y, hy), 0);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!test__close(hx[i], hy[i], tol) && bad++ < 3)
            test__fail(__FILE__, __LINE__, "[%lld] %.9g vs %.9g", (long long)i, hx[i], hy[i]);
    free(hx);
    free(hy);
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* The arena bytes of an explained plan ("N temporaries (B bytes)"), or -1. */
static long arena_bytes(const char *text)
{
    const char *p = text ? strstr(text, "temporaries (") : NULL;
    return p ? strtol(p + strlen("temporaries ("), NULL, 10) : -1;
}

static ot_backend *cpu_backend(void)
{
    return ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
}

/* ---- sums of dots ------------------------------------------------------------- */

enum { NTERM = 12, SM = 16, SK = 8, SN = 24 };

/* The terms' operands and w, on one backend. */
typedef struct dot_sum {
    ot_tensor *a[NTERM], *b[NTERM], *w;
} dot_sum;

static void dot_sum_new(dot_sum *s, ot_backend *be)
{
    for (int t = 0; t < NTERM; t++) {
        s->a[t] = filled(be, OT_SHAPE(SM, SK), 1, 10u + (unsigned)t);
        s->b[t] = filled(be, OT_SHAPE(SK, SN), 1, 50u + (unsigned)t);
    }
    s->w = filled(be, OT_SHAPE(SM, SN), 1, 99);
}

static void dot_sum_free(dot_sum *s)
{
    for (int t = 0; t < NTERM; t++) {
        ot_tensor_free(s->a[t]);
        ot_tensor_free(s->b[t]);
    }
    ot_tensor_free(s->w);
}

/* w - 0.1 sum of the terms, the sum spelt every way autodiff and users
 * spell one: s + d, d + s, s - d and d - s. */
static ot_node *dot_sum_update(const dot_sum *s)
{
    ot_node *sum = NULL;
    for (int t = 0; t < NTERM; t++) {
        ot_node *d = ot_dot(s->a[t], s->b[t]);
        switch (sum ? t % 4 : -1) {
        case 0: sum = ot_add(sum, d); break;
        case 1: sum = ot_add(d, sum); break;
        case 2: sum = ot_sub(sum, d); break;
        case 3: sum = ot_sub(d, sum); break;
        default: sum = d; break;
        }
    }
    return ot_sub(s->w, ot_mul(0.1, sum));
}

/* Written in place over w with the other outputs of a step, as ot_sgd_step
 * writes it: the fused plan accumulates the NTERM dots into one running sum
 * (NTERM - 1 GEMM calls with beta), so its arena holds one term, not all of
 * them; unfused, every dot has a kernel and a temporary of its own. */
TEST(dot_sum_accumulates_in_blas)
{
    static const ot_backend_opts cpu = {.threads = 1};
    static const ot_backend_opts unf = {.threads = 1, .fusion = OT_FUSION_OFF};
    ot_backend *be[3] = {ot_backend_new("ref", NULL), ot_backend_new("cpu", &cpu),
                         ot_backend_new("cpu", &unf)};
    dot_sum s[3];
    for (int v = 0; v < 3; v++) {
        CHECK(be[v] != NULL);
        dot_sum_new(&s[v], be[v]);
        ot_pool *pool = ot_pool_push();
        ot_node *tree = dot_sum_update(&s[v]);
        if (v > 0) {
            char *txt = test__explain_many(1, &s[v].w, &tree);
            CHECK(txt != NULL);
            CHECK_INT(count_of(txt, "beta: accumulates"), v == 1 ? NTERM - 1 : 0);
            if (v == 1) CHECK_INT(arena_bytes(txt), SM * SN * (long)sizeof(float));
            free(txt);
        }
        CHECK_INT(ot_assign_many(1, &s[v].w, &tree), 0);
        ot_pool_pop(pool);
    }
    check_same(s[0].w, s[1].w, 1e-5);
    check_same(s[0].w, s[2].w, 1e-5);
    for (int v = 0; v < 3; v++) {
        dot_sum_free(&s[v]);
        ot_backend_free(be[v]);
    }
}

/* The last dot of a running sum heads the segment of its epilogue on
 * blocks of rows (it adds to the rows the earlier terms wrote, so they stay
 * in place, not in a one-block buffer); the first dot, whose result the
 * later ones accumulate into, gets no epilogue that would run too early. */
TEST(dot_sum_epilogue_blocks)
{
    ot_backend *be[2] = {ot_backend_new("ref", NULL), cpu_backend()};
    ot_tensor *o[2];
    for (int v = 0; v < 2; v++) {
        CHECK(be[v] != NULL);
        ot_tensor *a[3], *b[3], *bias = filled(be[v], OT_SHAPE(1, 1030), 1, 9);
        for (int t = 0; t < 3; t++) {
            a[t] = filled(be[v], OT_SHAPE(1100, 16), 1, 20u + (unsigned)t);
            b[t] = filled(be[v], OT_SHAPE(16, 1030), 1, 30u + (unsigned)t);
        }
        o[v] = ot_empty(be[v], OT_SHAPE(1100, 1030), OT_F32);
        ot_pool *pool = ot_pool_push();
        ot_node *sum = ot_add(ot_add(ot_dot(a[0], b[0]), ot_dot(a[1], b[1])), ot_dot(a[2], b[2]));
        ot_node *tree = ot_relu(ot_add(sum, bias));
        if (v == 1) {
            char *txt = test__capture(ot_explain, tree);
            CHECK_INT(count_of(txt, "beta: accumulates"), 2);
            CHECK(txt && strstr(txt, "epilogue of kernel 2, on its rows in cache"));
            CHECK(txt && strstr(txt, "per block of 220 of 1100 rows"));
            free(txt);
        }
        CHECK_INT(ot_assign(o[v], tree), 0);
        ot_pool_pop(pool);
        for (int t = 0; t < 3; t++) {
            ot_tensor_free(a[t]);
            ot_tensor_free(b[t]);
        }
        ot_tensor_free(bias);
    }
    check_same(o[0], o[1], 1e-5);
    for (int v = 0; v < 2; v++) {
        ot_tensor_free(o[v]);
        ot_backend_free(be[v]);
    }
}

/* ---- an LSTM training step -------------------------------------------------- */

enum { LT = 6, LB = 4, LI = 5, LH = 8, NPARAM = 12 };
#define LR 0.1

/* The sequence (T, B, I), targets (T, B, H), h0, c0 (B, H), the weights
 * (I + H, 4H) as PyTorch's [W_ih; W_hh]^T in gate order i, f, g, o, and
 * the bias (4H); the views the step reads: each step's input and target,
 * and each gate's block of the input weights, hidden weights and bias
 * (the parameters w[0..11]). */
typedef struct lstm {
    ot_tensor *x, *y, *h0, *c0, *wt, *bias;
    ot_tensor *xs[LT], *ys[LT], *w[NPARAM];
} lstm;

static void lstm_new(lstm *m, ot_backend *be)
{
    m->x = filled(be, OT_SHAPE(LT, LB, LI), 1, 1);
    m->y = filled(be, OT_SHAPE(LT, LB, LH), 1, 2);
    m->h0 = filled(be, OT_SHAPE(LB, LH), 0.5, 3);
    m->c0 = filled(be, OT_SHAPE(LB, LH), 0.5, 4);
    m->wt = filled(be, OT_SHAPE(LI + LH, 4 * LH), 0.35, 5);
    m->bias = filled(be, OT_SHAPE(4 * LH), 0.35, 6);
    for (int t = 0; t < LT; t++) {
        m->xs[t] = ot_slice(m->x, OT_IDX(t));
        m->ys[t] = ot_slice(m->y, OT_IDX(t));
        CHECK(m->xs[t] && m->ys[t]);
    }
    for (int g = 0; g < 4; g++) {
        ot_index cols = OT_RANGE(g * LH, (g + 1) * LH);
        m->w[g] = ot_slice(m->wt, OT_RANGE(0, LI), cols);
        m->w[4 + g] = ot_slice(m->wt, OT_RANGE(LI, LI + LH), cols);
        m->w[8 + g] = ot_slice(m->bias, cols);
        CHECK(m->w[g] && m->w[4 + g] && m->w[8 + g]);
    }
}

static void lstm_free(lstm *m)
{
    for (int t = 0; t < LT; t++) {
        ot_tensor_free(m->xs[t]);
        ot_tensor_free(m->ys[t]);
    }
    for (int i = 0; i < NPARAM; i++) ot_tensor_free(m->w[i]);
    ot_tensor *own[] = {m->x, m->y, m->h0, m->c0, m->wt, m->bias};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) ot_tensor_free(own[i]);
}

/* 0.5/B sum over the steps of |h_t - y_t|^2, the recurrence unrolled. */
static ot_node *lstm_loss(const lstm *m)
{
    ot_node *h = ot_tensor_node(m->h0), *c = ot_tensor_node(m->c0), *loss = NULL;
    for (int t = 0; t < LT; t++) {
        ot_node *z[4];
        for (int g = 0; g < 4; g++)
            z[g] = ot_add(ot_add(ot_dot(m->xs[t], m->w[g]), ot_dot(h, m->w[4 + g])), m->w[8 + g]);
        c = ot_add(ot_mul(ot_sig(z[1]), c), ot_mul(ot_sig(z[0]), ot_tanh(z[2])));
        h = ot_mul(ot_sig(z[3]), ot_tanh(c));
        ot_node *e = ot_sub(h, m->ys[t]);
        ot_node *term = ot_sum(ot_mul(e, e));
        loss = loss ? ot_add(loss, term) : term;
    }
    return ot_mul(loss, 0.5 / LB);
}

/* One SGD step of every parameter view; when explain is set, the fused
 * plan's text of the same update (w - lr g, one ot_assign_many) first. */
static void lstm_step(lstm *m, char **explain)
{
    ot_pool *pool = ot_pool_push();
    ot_autodiff *ad = ot_autodiff_new(lstm_loss(m), NULL);
    CHECK(ad != NULL);
    ot_node *g[NPARAM], *trees[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        g[i] = ot_autodiff_grad(ad, m->w[i]);
        CHECK(g[i] != NULL);
        trees[i] = ot_sub(m->w[i], ot_mul(LR, g[i]));
    }
    if (explain) *explain = test__explain_many(NPARAM, m->w, trees);
    CHECK_INT(ot_sgd_step(&(ot_sgd){.lr = LR, .grad_scale = 1}, NPARAM, m->w, g, NULL), 0);
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
}

/* One step on ref, fused cpu (1 and 2 threads) and unfused cpu gives the
 * same weights. Fused, every weight view's gradient (a sum of LT dots, one
 * per step) is a running sum of LT - 1 accumulating GEMM calls, and the
 * plan's arena is smaller than unfused's (it held every term before). */
TEST(lstm_step_fused_matches_unfused_and_ref)
{
    static const ot_backend_opts opts[] = {
        {.threads = 1}, {.threads = 2}, {.threads = 1, .fusion = OT_FUSION_OFF}};
    ot_backend *be[4] = {ot_backend_new("ref", NULL)};
    lstm m[4];
    char *txt[4] = {0};
    for (int v = 0; v < 4; v++) {
        if (v > 0) be[v] = ot_backend_new("cpu", &opts[v - 1]);
        CHECK(be[v] != NULL);
        lstm_new(&m[v], be[v]);
        lstm_step(&m[v], v > 0 ? &txt[v] : NULL);
    }
    CHECK(txt[1] && txt[3]);
    CHECK(count_of(txt[1], "beta: accumulates") >= 8 * (LT - 1));
    CHECK_INT(count_of(txt[3], "beta: accumulates"), 0);
    CHECK(arena_bytes(txt[1]) > 0 && arena_bytes(txt[1]) < arena_bytes(txt[3]));
    for (int v = 1; v < 4; v++) {
        check_same(m[0].wt, m[v].wt, 1e-5);
        check_same(m[0].bias, m[v].bias, 1e-5);
    }
    for (int v = 0; v < 4; v++) {
        free(txt[v]);
        lstm_free(&m[v]);
        ot_backend_free(be[v]);
    }
}

/* A reduction joining a dot's segment (neon's bsum) that also reads a
 * running sum waits for the sum's last term: here the sum's first dot runs
 * before the segment and its second, which reads the epilogue's result,
 * after it. */
TEST(dot_sum_bsum_waits_for_the_sum)
{
    ot_backend *be[2] = {ot_backend_new("ref", NULL), cpu_backend()};
    ot_tensor *o[2];
    for (int v = 0; v < 2; v++) {
        CHECK(be[v] != NULL);
        ot_tensor *a1 = filled(be[v], OT_SHAPE(40, 6), 1, 1);
        ot_tensor *b1 = filled(be[v], OT_SHAPE(6, 24), 1, 2);
        ot_tensor *a3 = filled(be[v], OT_SHAPE(40, 7), 1, 3);
        ot_tensor *b3 = filled(be[v], OT_SHAPE(7, 24), 1, 4);
        ot_tensor *w2 = filled(be[v], OT_SHAPE(24, 24), 1, 5);
        ot_tensor *c = filled(be[v], OT_SHAPE(24), 1, 6);
        o[v] = ot_empty(be[v], OT_SHAPE(24), OT_F32);
        ot_pool *pool = ot_pool_push();
        ot_node *y = ot_relu(ot_add(ot_dot(a3, b3), c));
        ot_node *sum = ot_add(ot_dot(a1, b1), ot_dot(y, w2));
        ot_node *tree = ot_sum(ot_mul(sum, y), .axis = 0);
        if (v == 1) {
            char *txt = test__capture(ot_explain, tree);
            CHECK_INT(count_of(txt, "beta: accumulates"), 1);
            free(txt);
        }
        CHECK_INT(ot_assign(o[v], tree), 0);
        ot_pool_pop(pool);
        ot_tensor *own[] = {a1, b1, a3, b3, w2, c};
        for (size_t i = 0; i < sizeof own / sizeof *own; i++) ot_tensor_free(own[i]);
    }
    check_same(o[0], o[1], 1e-4);
    for (int v = 0; v < 2; v++) {
        ot_tensor_free(o[v]);
        ot_backend_free(be[v]);
    }
}

/* Step after step, the trees of earlier steps die: the autodiff memo keeps
 * its objects for lookups, but one whose tree nothing else holds can never
 * be looked up again and lets its tree go at the next ot_autodiff_new. The
 * parameters' leaves are then read by the newest step's tree alone (they
 * were read by the last 64 steps' trees, 64 trees in memory). */
TEST(lstm_steps_keep_no_dead_trees)
{
    ot_backend *be = cpu_backend();
    CHECK(be != NULL);
    lstm m;
    lstm_new(&m, be);
    long refs[4];
    for (int k = 0; k < 4; k++) {
        lstm_step(&m, NULL);
        refs[k] = ot__node_refs(&m.w[0]->leaf);
    }
    CHECK(refs[0] > 1);
    CHECK_INT(refs[3], refs[1]);
    lstm_free(&m);
    ot_backend_free(be);
}
