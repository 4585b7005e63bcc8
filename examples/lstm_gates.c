/*
 * lstm_gates.c - one LSTM step with its four gates from a single (B, 4H)
 * product: z = x.W + h.U + b, split into i, f, g, o with ot_split. The
 * usual optree way (tests/test_lstm.c) keeps four weight matrices and makes
 * eight products per step; here there are two GEMMs, and the split reads
 * views of their result (ot_explain shows t0@H, t0@2H, ...: no copy).
 * The check: the same step through the four column blocks of W and U as
 * separate weights, which must agree to rounding, and the gradient of a
 * loss with respect to W in W's own (I, 4H) shape.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 8, I = 16, H = 32 };

static ot_tensor *uniform(ot_backend *be, ot_shape s, double scale, unsigned seed)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)(scale * ((seed >> 8) / 8388608.0 - 1.0));
    }
    ot_tensor *t = ot_array(be, s, OT_F32, v);
    free(v);
    return t;
}

/* The two checks' host loops, each a function of its own: GCC 12 for
 * aarch64 crashed vectorising them inside main (internal compiler error in
 * vect_transform_reduction, make test-arm64). */
static double max_abs_diff(const float *a, const float *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static double sum_squares(const float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    return s;
}

/* c' = sig(f) c + sig(i) tanh(g), h' = sig(o) tanh(c'), from the gates. */
static ot_node *cell(ot_node *const gate[4], ot_tensor *c, ot_node **c_next)
{
    *c_next = ot_add(ot_mul(ot_sig(gate[1]), c), ot_mul(ot_sig(gate[0]), ot_tanh(gate[2])));
    return ot_mul(ot_sig(gate[3]), ot_tanh(*c_next));
}

int main(void)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    if (!be) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    ot_tensor *x = uniform(be, OT_SHAPE(B, I), 1.0, 1), *h = uniform(be, OT_SHAPE(B, H), 1.0, 2);
    ot_tensor *c = uniform(be, OT_SHAPE(B, H), 1.0, 3), *w = uniform(be, OT_SHAPE(I, 4 * H), 0.2, 4);
    ot_tensor *u = uniform(be, OT_SHAPE(H, 4 * H), 0.2, 5), *b = uniform(be, OT_SHAPE(4 * H), 0.1, 6);
    ot_tensor *h1 = ot_empty(be, OT_SHAPE(B, H), OT_F32), *h2 = ot_empty(be, OT_SHAPE(B, H), OT_F32);
    ot_tensor *gw = ot_empty(be, OT_SHAPE(I, 4 * H), OT_F32);
    ot_tensor *wk[4], *uk[4], *bk[4];
    ot_pool *pool = ot_pool_push();

    /* One (B, 4H) pre-activation, split into the four gates. */
    ot_node *gate[4], *c1, *c2;
    ot_split(ot_add(ot_add(ot_dot(x, w), ot_dot(h, u)), b), 1, 4, NULL, gate);
    ot_node *step = cell(gate, c, &c1);
    int rc = ot_assign(h1, step);
    printf("one product, split: %s\n", rc ? ot_errmsg() : "ok");
    ot_explain(step, stdout);

    /* The four-weights way: each gate from its own column block. */
    ot_node *gate4[4];
    for (int k = 0; k < 4; k++) {
        wk[k] = ot_slice(w, OT_ALL, OT_RANGE(k * H, (k + 1) * H));
        uk[k] = ot_slice(u, OT_ALL, OT_RANGE(k * H, (k + 1) * H));
        bk[k] = ot_slice(b, OT_RANGE(k * H, (k + 1) * H));
        gate4[k] = ot_add(ot_add(ot_dot(x, wk[k]), ot_dot(h, uk[k])), bk[k]);
    }
    rc = rc ? rc : ot_assign(h2, cell(gate4, c, &c2));
    float v1[B * H], v2[B * H];
    double worst = 0;
    if (!rc && !ot_get(h1, v1) && !ot_get(h2, v2)) worst = max_abs_diff(v1, v2, B * H);
    printf("h' from one product vs four: max |difference| %.3g (%s)\n", worst,
           !rc && worst < 1e-5 ? "agree" : "DIFFER");

    /* d sum(h'^2)/dW, in W's own shape: the split's gradient is a concat. */
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_sqr(step)), NULL);
    ot_node *dw = ot_autodiff_grad(ad, w);
    rc = rc ? rc : ot_assign(gw, dw);
    float g[I * 4 * H];
    double norm = 0;
    if (!rc && !ot_get(gw, g)) norm = sum_squares(g, I * 4 * H);
    printf("|dL/dW| = %.6g over shape (%d, %d)\n", sqrt(norm), I, 4 * H);
    ot_autodiff_free(ad);

    ot_pool_pop(pool);
    for (int k = 0; k < 4; k++) {
        ot_tensor_free(wk[k]);
        ot_tensor_free(uk[k]);
        ot_tensor_free(bk[k]);
    }
    ot_tensor *all[] = {x, h, c, w, u, b, h1, h2, gw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
    return rc || worst >= 1e-5 ? 1 : 0;
}
