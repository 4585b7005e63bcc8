/*
 * w_lstm.c - W11 of issue 15: one training step of an LSTM (T = 20 steps,
 * batch 32, input and hidden 128, f32) as a user writes it with optree's
 * public API today: the recurrence unrolled into one tree, the loss,
 * ot_autodiff for backprop through time and ot_sgd_step for the update.
 * There is no concat or split of nodes yet, so the gates are views: the
 * weights are one (I + H, 4H) tensor laid out as [W_ih; W_hh]^T in
 * PyTorch's gate order (i, f, g, o), and every gate reads the column block
 * of the input rows and of the hidden rows through ot_slice; the gradient
 * of each view is a parameter of the step. The reference is the same step
 * hand-written in C (cblas_sgemm for the products, plain loops with expf
 * and tanhf for the gates, explicit BPTT), timed and used to check. When
 * PyTorch is importable, bench/w11_torch.py times the same model step and
 * its median goes into the row's reference line.
 */
#include "bench.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes: time steps, batch, input size, hidden size. */
enum { W11_T = 20, W11_B = 32, W11_I = 128, W11_H = 128, W11_G = 4 * W11_H };

/* The inputs: the sequence (T, B, I), the targets (T, B, H), the initial
 * state h0 and c0 (B, H), the weights (I + H, 4H) and the bias (4H). */
enum { IN_X, IN_Y, IN_H0, IN_C0, IN_W, IN_BIAS, IN_COUNT };

/* Loss: 0.5 * sum over steps of |h_t - y_t|^2, averaged over the batch;
 * plain SGD at lr 1 (Zaremba et al.'s PTB LSTM). The update is then about
 * 30% of a weight on average, so comparing the new weights (to 1e-4)
 * checks the gradients to about 3e-4. */
#define W11_LR 1.0
#define W11_NPARAM (2 * 4 + 4)

#define W11_REF "hand-written C step: cblas_sgemm + loops, explicit BPTT (1 thread)"
char w11_ref_label[192] = W11_REF;

void w11_shapes(bench_data *d, bool quick)
{
    (void)quick;   /* the step is small already: --quick only runs fewer */
    d->n_in = IN_COUNT;
    d->in_shape[IN_X] = OT_SHAPE(W11_T, W11_B, W11_I);
    d->in_shape[IN_Y] = OT_SHAPE(W11_T, W11_B, W11_H);
    d->in_shape[IN_H0] = d->in_shape[IN_C0] = OT_SHAPE(W11_B, W11_H);
    d->in_shape[IN_W] = OT_SHAPE(W11_I + W11_H, W11_G);
    d->in_shape[IN_BIAS] = OT_SHAPE(W11_G);
    /* What collect writes: the new weights, then the new bias, flat. */
    d->out_shape = OT_SHAPE((int64_t)(W11_I + W11_H) * W11_G + W11_G);
}

/* ---- the hand-written step's memory -------------------------------------- */

/* Per step: the four activated gates (B, 4H), c_t and tanh(c_t); h_t and
 * c_t for t = -1..T-1 (index t + 1); the pre-activation gradients of all
 * steps, flat (T * B, 4H), for the weight products after the sweep; dh, dc;
 * the weight gradient. h is flat too: its first T blocks are the inputs of
 * the hidden product, (T * B, H). */
enum { W11_BH = W11_B * W11_H, W11_BG = W11_B * W11_G };
typedef struct w11_scratch {
    float gates[W11_T][W11_BG];
    float c[W11_T + 1][W11_BH];
    float tc[W11_T][W11_BH];
    float h[(W11_T + 1) * W11_BH];
    float dz[W11_T * W11_BG];
    float dh[W11_BH], dc[W11_BH];
    float dw[(W11_I + W11_H) * W11_G], db[W11_G];
} w11_scratch;

static void run_torch(uint64_t seed);

/* x and y uniform in [-1, 1); weights and bias uniform in +-1/sqrt(H)
 * (PyTorch's nn.LSTM init); h0 = c0 = 0, PyTorch's default state. */
void w11_fill(bench_data *d, uint64_t seed)
{
    float s = 1 / sqrtf(W11_H);
    bench_fill_uniform(d->in[IN_X], (size_t)W11_T * W11_B * W11_I, -1, 1, &seed);
    bench_fill_uniform(d->in[IN_Y], (size_t)W11_T * W11_B * W11_H, -1, 1, &seed);
    memset(d->in[IN_H0], 0, sizeof(float) * W11_B * W11_H);
    memset(d->in[IN_C0], 0, sizeof(float) * W11_B * W11_H);
    bench_fill_uniform(d->in[IN_W], (size_t)(W11_I + W11_H) * W11_G, -s, s, &seed);
    bench_fill_uniform(d->in[IN_BIAS], W11_G, -s, s, &seed);
    d->scratch = malloc(sizeof(w11_scratch));
    if (!d->scratch) bench_die("W11: out of memory");
    /* Touch it now, so that the first timed call does not fault it in. */
    memset(d->scratch, 0, sizeof(w11_scratch));
    run_torch(seed);
}

/* ---- the optree step ----------------------------------------------------- */

/* The views one step reads: each time step's input and target, and each
 * gate's block of the input weights, the hidden weights and the bias. The
 * parameters are w[0..11]: wx[0..3], wh[0..3], b[0..3]. */
typedef struct w11_views {
    ot_tensor *x[W11_T], *y[W11_T];
    ot_tensor *w[W11_NPARAM];
} w11_views;

static void views_free(w11_views *v)
{
    for (int t = 0; t < W11_T; t++) {
        ot_tensor_free(v->x[t]);
        ot_tensor_free(v->y[t]);
    }
    for (int i = 0; i < W11_NPARAM; i++)
        ot_tensor_free(v->w[i]);
}

/* 0 or the error code; on error every view made is freed. */
static int views_new(w11_views *v, ot_tensor *const in[])
{
    *v = (w11_views){0};
    bool ok = true;
    for (int t = 0; t < W11_T; t++) {
        ok = (v->x[t] = ot_slice(in[IN_X], OT_IDX(t))) != NULL && ok;
        ok = (v->y[t] = ot_slice(in[IN_Y], OT_IDX(t))) != NULL && ok;
    }
    for (int g = 0; g < 4; g++) {
        ot_index cols = OT_RANGE(g * W11_H, (g + 1) * W11_H);
        ok = (v->w[g] = ot_slice(in[IN_W], OT_RANGE(0, W11_I), cols)) != NULL && ok;
        ok = (v->w[4 + g] = ot_slice(in[IN_W], OT_RANGE(W11_I, W11_I + W11_H), cols)) != NULL && ok;
        ok = (v->w[8 + g] = ot_slice(in[IN_BIAS], cols)) != NULL && ok;
    }
    if (ok) return 0;
    int rc = ot_errcode();
    views_free(v);
    return rc;
}

/* The loss of the unrolled recurrence:
 *     z_g = x_t Wx_g + h Wh_g + b_g          for g in i, f, g, o
 *     c = sig(z_f) c + sig(z_i) tanh(z_g);   h = sig(z_o) tanh(c)
 *     loss = 0.5/B sum_t |h - y_t|^2 */
static ot_node *w11_loss(const w11_views *v, ot_tensor *const in[])
{
    ot_node *h = ot_tensor_node(in[IN_H0]), *c = ot_tensor_node(in[IN_C0]), *loss = NULL;
    for (int t = 0; t < W11_T; t++) {
        ot_node *z[4];
        for (int g = 0; g < 4; g++)
            z[g] = ot_add(ot_add(ot_dot(v->x[t], v->w[g]), ot_dot(h, v->w[4 + g])), v->w[8 + g]);
        c = ot_add(ot_mul(ot_sig(z[1]), c), ot_mul(ot_sig(z[0]), ot_tanh(z[2])));
        h = ot_mul(ot_sig(z[3]), ot_tanh(c));
        ot_node *e = ot_sub(h, v->y[t]);
        ot_node *term = ot_sum(ot_mul(e, e));
        loss = loss ? ot_add(loss, term) : term;
    }
    return ot_mul(loss, 0.5 / W11_B);
}

/* The gradient trees of every parameter view into g; 0 or the error. */
static int w11_grads(const w11_views *v, ot_tensor *const in[], ot_autodiff **ad,
                     ot_node *g[W11_NPARAM])
{
    *ad = ot_autodiff_new(w11_loss(v, in), NULL);
    if (!*ad) return ot_errcode();
    bool ok = true;
    for (int i = 0; i < W11_NPARAM; i++)
        ok = (g[i] = ot_autodiff_grad(*ad, v->w[i])) != NULL && ok;
    return ok ? 0 : ot_errcode();
}

/* One step, in the current pool: forward, BPTT and the SGD update of the
 * weight and bias views in place. out is not written (collect reads it). */
int w11_step(ot_tensor *out, ot_tensor *const in[])
{
    (void)out;
    static const ot_sgd sgd = {.lr = W11_LR, .grad_scale = 1};
    w11_views v;
    int rc = views_new(&v, in);
    if (rc != 0) return rc;
    ot_autodiff *ad = NULL;
    ot_node *g[W11_NPARAM];
    rc = w11_grads(&v, in, &ad, g);
    if (rc == 0) rc = ot_sgd_step(&sgd, W11_NPARAM, v.w, g, NULL);
    ot_autodiff_free(ad);
    views_free(&v);
    return rc;
}

/* The new weights, then the new bias, flat into out. */
int w11_collect(ot_tensor *out, ot_tensor *const in[])
{
    int64_t nw = ot_tensor_numel(in[IN_W]);
    ot_tensor *ow = ot_slice(out, OT_RANGE(0, nw));
    ot_tensor *ob = ot_slice(out, OT_RANGE(nw, nw + W11_G));
    ot_tensor *oww = ow ? ot_reshape(ow, ot_tensor_shape(in[IN_W])) : NULL;
    int rc = oww && ob ? ot_assign(oww, in[IN_W]) : ot_errcode();
    if (rc == 0) rc = ot_assign(ob, in[IN_BIAS]);
    ot_tensor_free(oww);
    ot_tensor_free(ow);
    ot_tensor_free(ob);
    return rc;
}

/* The whole step as ot_sgd_step runs it (one ot_assign_many of w - lr g). */
void w11_explain(FILE *f, ot_tensor *const in[])
{
    w11_views v;
    if (views_new(&v, in) != 0) bench_die("W11: ot_slice: %s", ot_errmsg());
    ot_autodiff *ad = NULL;
    ot_node *g[W11_NPARAM], *trees[W11_NPARAM];
    if (w11_grads(&v, in, &ad, g) != 0) bench_die("W11: autodiff: %s", ot_errmsg());
    for (int i = 0; i < W11_NPARAM; i++)
        trees[i] = ot_sub(v.w[i], ot_mul(W11_LR, g[i]));
    fputs("-- the whole step (ot_sgd_step's ot_assign_many):\n", f);
    if (ot_explain_many(W11_NPARAM, v.w, trees, f) != 0)
        bench_die("W11: ot_explain_many: %s", ot_errmsg());
    ot_autodiff_free(ad);
    views_free(&v);
}

/* ---- the hand-written step ----------------------------------------------- */

static const enum CBLAS_ORDER R = CblasRowMajor;
static const enum CBLAS_TRANSPOSE N = CblasNoTrans, T = CblasTrans;

static float sigf(float x) { return 1 / (1 + expf(-x)); }

/* z (B, 4H) = h W_hh^T + z, bias and input product already in z; then the
 * gates in place and the new cell and hidden state. */
static void ref_cell(w11_scratch *s, const float *w, int t)
{
    float *z = s->gates[t];
    cblas_sgemm(R, N, N, W11_B, W11_G, W11_H, 1, s->h + t * W11_BH, W11_H, w + W11_I * W11_G,
                W11_G, 1, z, W11_G);
    for (int r = 0; r < W11_B; r++) {
        float *zr = z + r * W11_G;
        for (int j = 0; j < W11_H; j++) {
            float i = sigf(zr[j]), f = sigf(zr[W11_H + j]);
            float g = tanhf(zr[2 * W11_H + j]), o = sigf(zr[3 * W11_H + j]);
            zr[j] = i, zr[W11_H + j] = f, zr[2 * W11_H + j] = g, zr[3 * W11_H + j] = o;
            int k = r * W11_H + j;
            float c = f * s->c[t][k] + i * g, tc = tanhf(c);
            s->c[t + 1][k] = c, s->tc[t][k] = tc, s->h[(t + 1) * W11_BH + k] = o * tc;
        }
    }
}

/* Forward: every step's input product in one sgemm, with the bias, then the
 * recurrence. */
static void ref_forward(w11_scratch *s, float *const in[])
{
    const float *w = in[IN_W];
    for (int t = 0; t < W11_T; t++)
        for (int r = 0; r < W11_B; r++)
            memcpy(s->gates[t] + r * W11_G, in[IN_BIAS], sizeof(float) * W11_G);
    cblas_sgemm(R, N, N, W11_T * W11_B, W11_G, W11_I, 1, in[IN_X], W11_I, w, W11_G, 1,
                s->gates[0], W11_G);
    memcpy(s->h, in[IN_H0], sizeof(float) * W11_BH);
    memcpy(s->c[0], in[IN_C0], sizeof s->c[0]);
    for (int t = 0; t < W11_T; t++)
        ref_cell(s, w, t);
}

/* One step back: dh already holds the gradient reaching h_t (its loss term
 * and the step after); writes dz[t] and the dh, dc reaching step t - 1. */
static void ref_cell_back(w11_scratch *s, const float *w, const float *y, int t)
{
    float *dz = s->dz + t * W11_BG;
    for (int r = 0; r < W11_B; r++) {
        const float *gr = s->gates[t] + r * W11_G;
        float *dzr = dz + r * W11_G;
        for (int j = 0; j < W11_H; j++) {
            int k = r * W11_H + j;
            float i = gr[j], f = gr[W11_H + j], g = gr[2 * W11_H + j], o = gr[3 * W11_H + j];
            float tc = s->tc[t][k];
            float dh = s->dh[k] + (s->h[(t + 1) * W11_BH + k] - y[k]) / W11_B;
            float dc = s->dc[k] + dh * o * (1 - tc * tc);
            dzr[j] = dc * g * i * (1 - i);
            dzr[W11_H + j] = dc * s->c[t][k] * f * (1 - f);
            dzr[2 * W11_H + j] = dc * i * (1 - g * g);
            dzr[3 * W11_H + j] = dh * tc * o * (1 - o);
            s->dc[k] = dc * f;
        }
    }
    /* dh reaching h_{t-1} = dz W_hh */
    cblas_sgemm(R, N, T, W11_B, W11_H, W11_G, 1, dz, W11_G, w + W11_I * W11_G, W11_G, 0, s->dh,
                W11_H);
}

/* Backward through time, then the weight gradients in two products over all
 * steps: dW_ih = X^T dZ, dW_hh = H_prev^T dZ (h_{-1..T-2} are contiguous). */
static void ref_backward(w11_scratch *s, float *const in[])
{
    const float *w = in[IN_W];
    memset(s->dh, 0, sizeof s->dh);
    memset(s->dc, 0, sizeof s->dc);
    for (int t = W11_T - 1; t >= 0; t--)
        ref_cell_back(s, w, in[IN_Y] + (size_t)t * W11_B * W11_H, t);
    cblas_sgemm(R, T, N, W11_I, W11_G, W11_T * W11_B, 1, in[IN_X], W11_I, s->dz, W11_G, 0,
                s->dw, W11_G);
    cblas_sgemm(R, T, N, W11_H, W11_G, W11_T * W11_B, 1, s->h, W11_H, s->dz, W11_G, 0,
                s->dw + W11_I * W11_G, W11_G);
    for (int j = 0; j < W11_G; j++) {
        float sum = 0;
        for (int r = 0; r < W11_T * W11_B; r++)
            sum += s->dz[r * W11_G + j];
        s->db[j] = sum;
    }
}

/* The whole step, writing what w11_collect writes: W - lr dW, b - lr db. */
void w11_ref_step(const bench_data *d, float *out)
{
    w11_scratch *s = d->scratch;
    openblas_set_num_threads(1);
    ref_forward(s, d->in);
    ref_backward(s, d->in);
    size_t nw = (size_t)(W11_I + W11_H) * W11_G;
    for (size_t i = 0; i < nw; i++)
        out[i] = d->in[IN_W][i] - (float)W11_LR * s->dw[i];
    for (int j = 0; j < W11_G; j++)
        out[nw + j] = d->in[IN_BIAS][j] - (float)W11_LR * s->db[j];
}

/* ---- PyTorch ------------------------------------------------------------- */

/* Runs bench/w11_torch.py (from the repository root, as make bench runs)
 * and writes its median into the row's reference line; a missing PyTorch
 * or script leaves a note there instead. */
static void run_torch(uint64_t seed)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/w11_torch.py %llu 2>/dev/null",
             (unsigned long long)seed);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    if (p) {
        if (fscanf(p, "%lf", &ms) != 1) ms = -1;
        pclose(p);
    }
    if (ms > 0) {
        snprintf(w11_ref_label, sizeof w11_ref_label,
                 W11_REF "; PyTorch nn.LSTM step, 1 thread: %.2f ms", ms);
        fprintf(stderr, "bench: W11: PyTorch (bench/w11_torch.py, 1 thread): %.2f ms\n", ms);
    } else {
        snprintf(w11_ref_label, sizeof w11_ref_label, W11_REF "; PyTorch: not measured");
        fprintf(stderr, "bench: W11: note: PyTorch not importable (or bench/w11_torch.py "
                        "not found): no PyTorch figure\n");
    }
}
