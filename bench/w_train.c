/*
 * w_train.c - W10 of BENCH.md: one training step of an MLP 784-512-10 on a
 * batch of 128, as a user writes it with optree: the forward tree
 * (dot, bias, relu, dot, bias), the mean softmax cross-entropy against
 * one-hot labels, ot_autodiff on the loss, and ot_sgd_step fed the
 * gradient trees themselves, so that the update can fuse with the backward
 * pass. W10 is BENCH.md's step, plain SGD (w -= lr g: each weight's
 * update runs as the epilogue of its gradient's GEMM, over w in place);
 * W10m is the same step with momentum and weight decay, whose velocities
 * add a read and a write of every weight. Their reference is the "GEMM floor": the five cblas_sgemm
 * calls a step needs, with the same shapes and transposes, on one thread.
 * The results are checked against the same step written in plain C.
 */
#include "bench.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes: batch, inputs, hidden units, classes. */
enum { W10_B = 128, W10_I = 784, W10_H = 512, W10_C = 10 };

/* The inputs of the case, in order: the batch and its labels, then the four
 * parameters and their four velocities (in the parameters' order). */
enum { IN_X, IN_Y, IN_W1, IN_B1, IN_W2, IN_B2, IN_V1, IN_VB1, IN_V2, IN_VB2, IN_COUNT };
#define W10_NPARAM 4

/* W10: plain SGD, no velocities. W10m: neon's GradientDescentMomentum with
 * a small weight decay. */
#define W10_LR 0.01
static const ot_sgd W10_SGD = {.lr = W10_LR, .grad_scale = 1};
static const ot_sgd W10M_SGD = {.lr = W10_LR, .momentum = 0.9, .weight_decay = 1e-4, .grad_scale = 1};

/* Whether an optimizer keeps velocities. */
static bool has_vel(const ot_sgd *o) { return o->momentum != 0; }

static size_t numel_of(ot_shape s)
{
    size_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= (size_t)s.dims[i];
    return n;
}

void w10_shapes(bench_data *d, bool quick)
{
    (void)quick;   /* the step is small already: --quick only runs fewer */
    d->n_in = IN_COUNT;
    d->in_shape[IN_X] = OT_SHAPE(W10_B, W10_I);
    d->in_shape[IN_Y] = OT_SHAPE(W10_B, W10_C);
    d->in_shape[IN_W1] = d->in_shape[IN_V1] = OT_SHAPE(W10_I, W10_H);
    d->in_shape[IN_B1] = d->in_shape[IN_VB1] = OT_SHAPE(W10_H);
    d->in_shape[IN_W2] = d->in_shape[IN_V2] = OT_SHAPE(W10_H, W10_C);
    d->in_shape[IN_B2] = d->in_shape[IN_VB2] = OT_SHAPE(W10_C);
    /* What collect writes: every parameter, then every velocity (as
     * -v/lr), flat. */
    size_t n = 0;
    for (int i = IN_W1; i < IN_COUNT; i++)
        n += numel_of(d->in_shape[i]);
    d->out_shape = OT_SHAPE((int64_t)n);
}

/* The GEMM floor's buffers, one block: h, z (as d2), dW2, d1, dW1. */
#define W10_SCRATCH                                                            \
    ((size_t)W10_B * W10_H + (size_t)W10_B * W10_C + (size_t)W10_H * W10_C +   \
     (size_t)W10_B * W10_H + (size_t)W10_I * W10_H)

/* Inputs like MNIST pixels, uniform in [0, 1); labels uniform over the
 * classes, one-hot; weights and biases uniform in +-1/sqrt(fan_in)
 * (PyTorch's nn.Linear init); velocities zero, as before a first step. */
void w10_fill(bench_data *d, uint64_t seed)
{
    bench_fill_uniform(d->in[IN_X], (size_t)W10_B * W10_I, 0, 1, &seed);
    memset(d->in[IN_Y], 0, sizeof(float) * W10_B * W10_C);
    for (int r = 0; r < W10_B; r++)
        d->in[IN_Y][r * W10_C + (int)(bench_rand(&seed) % W10_C)] = 1;
    float s1 = 1 / sqrtf(W10_I), s2 = 1 / sqrtf(W10_H);
    bench_fill_uniform(d->in[IN_W1], (size_t)W10_I * W10_H, -s1, s1, &seed);
    bench_fill_uniform(d->in[IN_B1], W10_H, -s1, s1, &seed);
    bench_fill_uniform(d->in[IN_W2], (size_t)W10_H * W10_C, -s2, s2, &seed);
    bench_fill_uniform(d->in[IN_B2], W10_C, -s2, s2, &seed);
    for (int i = IN_V1; i < IN_COUNT; i++)
        memset(d->in[i], 0, numel_of(d->in_shape[i]) * sizeof(float));
    d->scratch = malloc(W10_SCRATCH * sizeof(float));
    if (!d->scratch) bench_die("W10: out of memory");
    /* Touch it now, so that the first timed call does not fault it in. */
    memset(d->scratch, 0, W10_SCRATCH * sizeof(float));
}

/* ---- the optree step ----------------------------------------------------- */

/* mean over the batch of cross_entropy(softmax(relu(x W1 + b1) W2 + b2), y). */
static ot_node *w10_loss(ot_tensor *const in[])
{
    ot_node *h = ot_relu(ot_add(ot_dot(in[IN_X], in[IN_W1]), in[IN_B1]));
    ot_node *z = ot_add(ot_dot(h, in[IN_W2]), in[IN_B2]);
    return ot_mean(ot_cross_entropy(ot_softmax(z, .axis = 1), in[IN_Y], .axis = 1));
}

/* One step, in the current pool: the gradient trees of the loss go straight
 * into the update, which writes the parameters (and velocities) in place.
 * out is not written (collect reads the step's results). */
static int step_with(const ot_sgd *o, ot_tensor *const in[])
{
    ot_autodiff *ad = ot_autodiff_new(w10_loss(in), NULL);
    if (!ad) return ot_errcode();
    ot_node *g[W10_NPARAM];
    bool ok = true;
    for (int i = 0; i < W10_NPARAM; i++)
        ok = (g[i] = ot_autodiff_grad(ad, in[IN_W1 + i])) != NULL && ok;
    ot_tensor *const *vel = has_vel(o) ? in + IN_V1 : NULL;
    int rc = ok ? ot_sgd_step(o, W10_NPARAM, in + IN_W1, g, vel) : ot_errcode();
    ot_autodiff_free(ad);
    return rc;
}

ot_program *w10_program(ot_backend *be, ot_tensor *out, ot_tensor *const in[], int *nbind)
{
    (void)out;
    ot_program *p = ot_program_new(be);
    ot_tensor *leaf[IN_COUNT];
    memcpy(leaf, in, sizeof leaf);
    for (int i = IN_X; p && i <= IN_Y; i++)
        leaf[i] = ot_program_placeholder(p, bench_in_names[i], ot_tensor_shape(in[i]), OT_F32);
    ot_pool *pool = p && leaf[IN_X] && leaf[IN_Y] ? ot_pool_push() : NULL;
    ot_autodiff *ad = pool ? ot_autodiff_new(w10_loss(leaf), NULL) : NULL;
    ot_node *g[W10_NPARAM];
    bool ok = ad != NULL;
    for (int i = 0; ok && i < W10_NPARAM; i++) ok = (g[i] = ot_autodiff_grad(ad, in[IN_W1 + i])) != NULL;
    ok = ok && ot_program_sgd(p, &W10_SGD, W10_NPARAM, in + IN_W1, g, NULL) == 0;
    ot_autodiff_free(ad);
    if (pool) ot_pool_pop(pool);
    if (!ok || ot_program_compile(p) != 0) {
        ot_program_free(p);
        return NULL;
    }
    *nbind = 2;
    return p;
}

int w10_step(ot_tensor *out, ot_tensor *const in[])
{
    (void)out;
    return step_with(&W10_SGD, in);
}

int w10m_step(ot_tensor *out, ot_tensor *const in[])
{
    (void)out;
    return step_with(&W10M_SGD, in);
}

/* Writes the parameters, then the velocities as -v/lr, flat into out. A
 * first step from v = 0 makes -v/lr = g + weight_decay w, the descent
 * direction: a velocity itself (about 1e-5) would hide its errors below
 * the check's floor. Without velocities they stay 0. */
int w10_collect(ot_tensor *out, ot_tensor *const in[])
{
    int64_t off = 0;
    for (int i = IN_W1; i < IN_COUNT; i++) {
        int64_t n = ot_tensor_numel(in[i]);
        ot_tensor *flat = ot_slice(out, OT_RANGE(off, off + n));
        ot_tensor *view = flat ? ot_reshape(flat, ot_tensor_shape(in[i])) : NULL;
        ot_node *val = i < IN_V1 ? ot_tensor_node(in[i]) : ot_div(in[i], -W10_LR);
        int rc = view ? ot_assign(view, val) : ot_errcode();
        ot_tensor_free(view);
        ot_tensor_free(flat);
        if (rc != 0) return rc;
        off += n;
    }
    return 0;
}

/* The forward tree, each gradient tree, and the whole step (the trees
 * ot_sgd_step builds, as one ot_assign_many) as ot_explain shows them. */
static void explain_with(const ot_sgd *o, FILE *f, ot_tensor *const in[])
{
    static const char *const names[W10_NPARAM] = {"W1", "b1", "W2", "b2"};
    ot_node *loss = w10_loss(in);
    fputs("-- the loss (forward):\n", f);
    if (ot_explain(loss, f) != 0) bench_die("W10: ot_explain: %s", ot_errmsg());
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    if (!ad) bench_die("W10: ot_autodiff_new: %s", ot_errmsg());
    for (int i = 0; i < W10_NPARAM; i++) {
        fprintf(f, "-- the gradient w.r.t. %s:\n", names[i]);
        ot_node *g = ot_autodiff_grad(ad, in[IN_W1 + i]);
        if (!g || ot_explain(g, f) != 0) bench_die("W10: grad %s: %s", names[i], ot_errmsg());
    }
    ot_tensor *outs[2 * W10_NPARAM];
    ot_node *trees[2 * W10_NPARAM];
    int n = 0;
    for (int i = 0; i < W10_NPARAM; i++) {
        ot_tensor *w = in[IN_W1 + i], *v = in[IN_V1 + i];
        ot_node *g = ot_autodiff_grad(ad, w);
        if (!has_vel(o)) {
            outs[n] = w;
            trees[n++] = ot_sub(w, ot_mul(o->lr, g));
            continue;
        }
        /* ot_sgd_step's form: m*(v - (lr/m) g) - lr*wd*w */
        ot_node *p = ot_add(v, ot_mul(g, -o->lr / o->momentum));
        ot_node *vn = ot_sub(ot_mul(p, o->momentum), ot_mul(w, o->lr * o->weight_decay));
        outs[n] = w;
        trees[n++] = ot_add(w, vn);
        outs[n] = v;
        trees[n++] = vn;
    }
    fputs("-- the whole step (ot_sgd_step's ot_assign_many):\n", f);
    if (ot_explain_many(n, outs, trees, f) != 0) bench_die("W10: ot_explain_many: %s", ot_errmsg());
    ot_autodiff_free(ad);
}

void w10_explain(FILE *f, ot_tensor *const in[]) { explain_with(&W10_SGD, f, in); }
void w10m_explain(FILE *f, ot_tensor *const in[]) { explain_with(&W10M_SGD, f, in); }

/* ---- the references ------------------------------------------------------ */

/* The GEMM floor: the five products of a step, with its shapes and
 * transposes, chained through the same buffers as a step chains them (z
 * stands in for d2 = softmax - y). Row-major, beta = 0, one thread. */
void w10_gemm_floor(const bench_data *d, float *out)
{
    (void)out;
    const float *x = d->in[IN_X], *w1 = d->in[IN_W1], *w2 = d->in[IN_W2];
    float *h = d->scratch, *z = h + W10_B * W10_H, *dw2 = z + W10_B * W10_C;
    float *d1 = dw2 + W10_H * W10_C, *dw1 = d1 + W10_B * W10_H;
    const enum CBLAS_ORDER R = CblasRowMajor;
    const enum CBLAS_TRANSPOSE N = CblasNoTrans, T = CblasTrans;
    openblas_set_num_threads(1);
    /* forward: h = x W1 (128x784 . 784x512), z = h W2 (128x512 . 512x10) */
    cblas_sgemm(R, N, N, W10_B, W10_H, W10_I, 1, x, W10_I, w1, W10_H, 0, h, W10_H);
    cblas_sgemm(R, N, N, W10_B, W10_C, W10_H, 1, h, W10_H, w2, W10_C, 0, z, W10_C);
    /* backward: dW2 = h^T d2 (512x128 . 128x10), d1 = d2 W2^T (128x10 . 10x512),
     * dW1 = x^T d1 (784x128 . 128x512) */
    cblas_sgemm(R, T, N, W10_H, W10_C, W10_B, 1, h, W10_H, z, W10_C, 0, dw2, W10_C);
    cblas_sgemm(R, N, T, W10_B, W10_H, W10_C, 1, z, W10_C, w2, W10_C, 0, d1, W10_H);
    cblas_sgemm(R, T, N, W10_I, W10_H, W10_B, 1, x, W10_I, d1, W10_H, 0, dw1, W10_H);
}

/* v = momentum v - lr (g + weight_decay w); w = w + v, into the out slots
 * of the parameter (wo) and its velocity (vo), which holds -v/lr as
 * w10_collect writes it; without velocities v stays as it is. */
static void sgd_ref(const ot_sgd *o, float *wo, float *vo, const float *w, const float *g,
                    const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double vn = o->momentum * v[i] - o->lr * (o->grad_scale * g[i] + o->weight_decay * w[i]);
        vo[i] = (float)(-(has_vel(o) ? vn : v[i]) / o->lr);
        wo[i] = w[i] + (float)vn;
    }
}

/* The whole step in plain C (OpenBLAS for the products, sums in double),
 * writing what w10_collect writes: the new parameters, then the new
 * velocities. Not timed: it checks every variant's first step. */
static void ref_step_with(const ot_sgd *o, const bench_data *d, float *out)
{
    float *const *in = d->in;
    const float *x = in[IN_X], *y = in[IN_Y];
    float *h = malloc(sizeof(float) * W10_B * W10_H), *d2 = malloc(sizeof(float) * W10_B * W10_C);
    float *d1 = malloc(sizeof(float) * W10_B * W10_H), *dw1 = malloc(sizeof(float) * W10_I * W10_H);
    float dw2[W10_H * W10_C], db1[W10_H], db2[W10_C];
    if (!h || !d2 || !d1 || !dw1) bench_die("W10: out of memory");
    const enum CBLAS_ORDER R = CblasRowMajor;
    const enum CBLAS_TRANSPOSE N = CblasNoTrans, T = CblasTrans;
    openblas_set_num_threads(1);

    /* h = relu(x W1 + b1); z = h W2 + b2 (into d2) */
    cblas_sgemm(R, N, N, W10_B, W10_H, W10_I, 1, x, W10_I, in[IN_W1], W10_H, 0, h, W10_H);
    for (int r = 0; r < W10_B; r++)
        for (int j = 0; j < W10_H; j++) {
            float v = h[r * W10_H + j] + in[IN_B1][j];
            h[r * W10_H + j] = v > 0 ? v : 0;
        }
    cblas_sgemm(R, N, N, W10_B, W10_C, W10_H, 1, h, W10_H, in[IN_W2], W10_C, 0, d2, W10_C);
    /* d2 = (softmax(z) - y) / batch: the gradient of the mean cross-entropy */
    for (int r = 0; r < W10_B; r++) {
        double z[W10_C], mx = -INFINITY, sum = 0;
        for (int j = 0; j < W10_C; j++) {
            z[j] = (double)d2[r * W10_C + j] + in[IN_B2][j];
            if (z[j] > mx) mx = z[j];
        }
        for (int j = 0; j < W10_C; j++)
            sum += z[j] = exp(z[j] - mx);
        for (int j = 0; j < W10_C; j++)
            d2[r * W10_C + j] = (float)((z[j] / sum - y[r * W10_C + j]) / W10_B);
    }
    /* dW2 = h^T d2, db2 = column sums of d2 */
    cblas_sgemm(R, T, N, W10_H, W10_C, W10_B, 1, h, W10_H, d2, W10_C, 0, dw2, W10_C);
    for (int j = 0; j < W10_C; j++) {
        double s = 0;
        for (int r = 0; r < W10_B; r++)
            s += d2[r * W10_C + j];
        db2[j] = (float)s;
    }
    /* d1 = (d2 W2^T) * (h > 0); dW1 = x^T d1; db1 = column sums of d1 */
    cblas_sgemm(R, N, T, W10_B, W10_H, W10_C, 1, d2, W10_C, in[IN_W2], W10_C, 0, d1, W10_H);
    for (int i = 0; i < W10_B * W10_H; i++)
        if (!(h[i] > 0)) d1[i] = 0;
    cblas_sgemm(R, T, N, W10_I, W10_H, W10_B, 1, x, W10_I, d1, W10_H, 0, dw1, W10_H);
    for (int j = 0; j < W10_H; j++) {
        double s = 0;
        for (int r = 0; r < W10_B; r++)
            s += d1[r * W10_H + j];
        db1[j] = (float)s;
    }

    /* the update, laid out as w10_collect writes it */
    const float *grads[W10_NPARAM] = {dw1, db1, dw2, db2};
    size_t n[W10_NPARAM], total = 0;
    for (int i = 0; i < W10_NPARAM; i++)
        total += n[i] = numel_of(d->in_shape[IN_W1 + i]);
    for (size_t i = 0, off = 0; i < W10_NPARAM; off += n[i], i++)
        sgd_ref(o, out + off, out + total + off, in[IN_W1 + i], grads[i], in[IN_V1 + i], n[i]);
    free(h);
    free(d2);
    free(d1);
    free(dw1);
}

void w10_ref_step(const bench_data *d, float *out) { ref_step_with(&W10_SGD, d, out); }
void w10m_ref_step(const bench_data *d, float *out) { ref_step_with(&W10M_SGD, d, out); }
