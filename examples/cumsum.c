/*
 * cumsum.c - a structured op registered at run time: cumsum along an axis.
 *
 * examples/cumsum_op.h registers "cumsum" (np.cumsum) and "rcumsum" (the
 * same scan from the end) with ot_op_register_structured: a shape rule,
 * f32 and f64 kernels over whole tensors, and gradient rules that build
 * each other (the gradient of a cumsum is the reverse cumsum of g). The
 * program
 *   - evaluates cumsum(tanh(x) * 2, axis=1) on the cpu backend and on the
 *     ref backend, and against a float64 loop (np.cumsum's definition);
 *   - prints the tree, parses its text back by name (the same values) and
 *     explains its plan: the tanh kernel, then cumsum's own kernel
 *     (fusion stops at it);
 *   - checks d/dx sum(cumsum(x) * w) against central differences;
 *   - shows a shape rule's error naming the op and this file's line.
 * Exits non-zero on a mismatch. Frees everything it creates.
 */
#include "optree.h"
#include "cumsum_op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { R = 3, C = 5 };

static double fill(int i) { return sin(0.7 * i + 0.3); }

/* The float64 reference of cumsum(tanh(x) * 2, axis=1). */
static void reference(const double *x, double *y)
{
    for (int r = 0; r < R; r++) {
        double acc = 0;
        for (int c = 0; c < C; c++) y[r * C + c] = acc += tanh(x[r * C + c]) * 2;
    }
}

static double worst(const double *a, const double *b, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i]));
    return e;
}

/* sum(cumsum(x, axis=1) * w) at x, on backend be. */
static double loss_at(ot_backend *be, ot_op cumsum, const double *xv, ot_tensor *w)
{
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_array(be, OT_SHAPE(R, C), OT_F64, xv);
    ot_node *cs = ot_apply_struct(cumsum, 1, (ot_node *[]){ot_tensor_node(x)}, &(ot_args){.axis = 1});
    ot_tensor *t = ot_eval(ot_sum(ot_mul(cs, w)));
    double v = NAN;
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    return v;
}

static int check_gradient(ot_backend *be, ot_op cumsum, const double *xv)
{
    double wv[R * C], g[R * C], xp[R * C];
    for (int i = 0; i < R * C; i++) wv[i] = cos(1.3 * i);
    ot_tensor *w = ot_array(be, OT_SHAPE(R, C), OT_F64, wv);
    ot_tensor *x = ot_array(be, OT_SHAPE(R, C), OT_F64, xv);
    ot_pool *pool = ot_pool_push();
    ot_node *cs = ot_apply_struct(cumsum, 1, (ot_node *[]){ot_tensor_node(x)}, &(ot_args){.axis = 1});
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(cs, w)), NULL);
    int rc = ad ? ot_autodiff_grad_host(ad, x, g) : -1;
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    double err = rc ? INFINITY : 0, h = 1e-6;
    for (int i = 0; i < R * C && !rc; i++) {
        for (int j = 0; j < R * C; j++) xp[j] = xv[j];
        xp[i] = xv[i] + h;
        double up = loss_at(be, cumsum, xp, w);
        xp[i] = xv[i] - h;
        double fd = (up - loss_at(be, cumsum, xp, w)) / (2 * h);
        err = fmax(err, fabs(fd - g[i]));
    }
    printf("gradient vs central differences: max error %.2e\n", err);
    ot_tensor_free(x);
    ot_tensor_free(w);
    return err < 1e-6 ? 0 : 1;
}

/* Whether two trees of R x C values evaluate to the same values, bit for bit. */
static bool same_values(ot_node *a, ot_node *b)
{
    double va[R * C], vb[R * C];
    ot_tensor *ta = ot_eval(a), *tb = b ? ot_eval(b) : NULL;
    bool same = ta && tb && !ot_get(ta, va) && !ot_get(tb, vb) && memcmp(va, vb, sizeof va) == 0;
    ot_tensor_free(ta);
    ot_tensor_free(tb);
    return same;
}

static int run(ot_backend *cpu, ot_backend *ref, ot_op cumsum)
{
    double xv[R * C], want[R * C], got[2][R * C];
    for (int i = 0; i < R * C; i++) xv[i] = fill(i);
    reference(xv, want);
    ot_backend *bes[2] = {cpu, ref};
    int bad = 0;
    for (int b = 0; b < 2; b++) {
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ot_array(bes[b], OT_SHAPE(R, C), OT_F64, xv);
        ot_tensor_set_name(x, "x");
        ot_node *y = ot_apply_struct(cumsum, 1, (ot_node *[]){ot_mul(ot_tanh(x), 2.0)},
                                     &(ot_args){.axis = 1});
        ot_tensor *t = ot_eval(y);
        if (!t || ot_get(t, got[b])) bad = 1;
        if (b == 0) {
            ot_pp(y, stdout);
            ot_node *back = ot_parse("cumsum(tanh(x) * 2, axis=1)", 1, (const char *[]){"x"},
                                     (ot_node *[]){ot_tensor_node(x)});
            printf("\nparsed back: ");
            if (back) ot_pp(back, stdout);
            bool same = same_values(back, y);
            printf(", %s\n", same ? "the same values" : "DIFFERENT");
            bad |= !same;
            ot_explain(y, stdout);
        }
        ot_tensor_free(t);
        ot_pool_pop(pool);
        ot_tensor_free(x);
    }
    double e_cpu = worst(got[0], want, R * C), e_ref = worst(got[1], want, R * C);
    printf("cumsum vs float64 loop: cpu %.2e, ref %.2e\n", e_cpu, e_ref);
    return bad || e_cpu > 1e-12 || e_ref > 1e-12;
}

int main(void)
{
    ot_op cumsum, rcumsum;
    if (!cumsum_register(&cumsum, &rcumsum)) {
        fprintf(stderr, "register: %s\n", ot_errmsg());
        return 1;
    }
    ot_backend *cpu = ot_backend_new("cpu", NULL), *ref = ot_backend_new("ref", NULL);
    int bad = !cpu || !ref || run(cpu, ref, cumsum) || check_gradient(cpu, cumsum, (double[R * C]){0});
    /* a shape rule's error: a scalar has no axis to scan */
    ot_pool *pool = ot_pool_push();
    ot_node *s = ot_apply_struct(cumsum, 1, (ot_node *[]){ot_const(1.0)}, &(ot_args){.axis = 0});
    printf("bad input: %s\n", s ? "built?" : ot_errmsg());
    bad |= s != NULL;
    ot_pool_pop(pool);
    ot_backend_free(cpu);
    ot_backend_free(ref);
    printf("%s\n", bad ? "FAILED" : "ok");
    return bad;
}
