/*
 * w_cnn.c - W14 of issue 34: one training step of examples/cnn.c's
 * Fashion-MNIST network (conv 32 3x3 same - BN - ReLU - max pool 2 - conv
 * 64 - BN - ReLU - max pool 2 - linear 256 - ReLU - linear 10; softmax
 * cross-entropy, backprop, Adam) on a batch of 64, as the demo runs it:
 * ot_model_fit's compiled program, one step per call (a fit of one epoch
 * over the 64 rows, in order). Each variant's backend has its own model,
 * made from the same seeds at its first call and freed by collect.
 *
 * The reference is the same step in PyTorch (bench/cnn_torch.py, one
 * thread), timed in this process run over a pipe (torch_pipe.c). Without
 * torch the reference times nothing and the label says so. The step's
 * numbers are checked in tests/test_model_cnn.c
 * and by the demo's accuracy; here only that the loss is finite (collect
 * writes 0 then, 1 otherwise).
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { W14_B = 64, W14_PIX = 28 * 28, W14_C = 10, W14_MODELS = 4 };
enum { IN_X, IN_Y, IN_COUNT };

#define W14_REF "PyTorch 1.13 step (bench/cnn_torch.py), 1 thread"
char w14_ref_label[160] = W14_REF;

/* The model of each variant's backend. */
static struct {
    ot_backend *be;
    ot_model *m;
    double loss;
} models[W14_MODELS];

/* The PyTorch server (bench/cnn_torch.py). */
static bench_torch torch;

void w14_shapes(bench_data *d, bool quick)
{
    (void)quick;
    d->n_in = IN_COUNT;
    d->in_shape[IN_X] = OT_SHAPE(W14_B, W14_PIX);
    d->in_shape[IN_Y] = OT_SHAPE(W14_B, W14_C);
    d->out_shape = OT_SHAPE(1);
}

/* Pixels uniform in [0, 1), labels uniform over the classes, one-hot. */
void w14_fill(bench_data *d, uint64_t seed)
{
    bench_fill_uniform(d->in[IN_X], (size_t)W14_B * W14_PIX, 0, 1, &seed);
    memset(d->in[IN_Y], 0, sizeof(float) * W14_B * W14_C);
    for (int r = 0; r < W14_B; r++) d->in[IN_Y][r * W14_C + (int)(bench_rand(&seed) % W14_C)] = 1;
    if (!torch.in) {
        char arg[32];
        snprintf(arg, sizeof arg, "%llu", (unsigned long long)seed);
        if (bench_torch_start(&torch, "W14", "bench/cnn_torch.py", arg) != 0)
            snprintf(w14_ref_label, sizeof w14_ref_label,
                     W14_REF ": torch not importable, not measured");
    }
}

/* examples/cnn.c's network and optimizer. */
static ot_model *w14_model(ot_backend *be)
{
    ot_model *m = ot_model_new(be, W14_PIX);
    int rc = m ? ot_model_input_shape(m, 3, (int64_t[]){1, 28, 28}) : -1;
    for (int k = 0; k < 2 && !rc; k++) {
        rc = ot_model_conv(m, 32 << k, 3, OT_ACT_NONE, 1 + (uint64_t)k, .padding = OT_PAD_SAME);
        if (!rc) rc = ot_model_batch_norm(m, OT_ACT_RELU, 0.1, 1e-5);
        if (!rc) rc = ot_model_max_pool(m, .kernel = {2});
    }
    if (!rc) rc = ot_model_linear(m, 256, OT_ACT_RELU, 3);
    if (!rc) rc = ot_model_linear(m, W14_C, OT_ACT_NONE, 4);
    if (!rc) rc = ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);
    if (!rc) rc = ot_model_adam(m, &(ot_adam){.lr = 1e-3});
    if (rc) bench_die("W14: building the model: %s", ot_errmsg());
    return m;
}

/* The slot of be's model, made at the first call. */
static int slot_of(ot_backend *be)
{
    for (int i = 0; i < W14_MODELS; i++)
        if (models[i].be == be) return i;
    for (int i = 0; i < W14_MODELS; i++)
        if (!models[i].be) {
            models[i].be = be;
            models[i].m = w14_model(be);
            return i;
        }
    bench_die("W14: more than %d backends", W14_MODELS);
}

int w14_step(ot_tensor *out, ot_tensor *const in[])
{
    (void)out;
    int i = slot_of(ot_tensor_backend(in[IN_X]));
    ot_fit_result r;
    int rc = ot_model_fit(models[i].m, in[IN_X], in[IN_Y],
                          &(ot_fit_opts){.epochs = 1, .batch = W14_B, .no_shuffle = true,
                                         .quiet = true}, &r);
    models[i].loss = r.loss;
    return rc;
}

/* 0 when the last step's loss was finite (Adam's first steps at lr 1e-3
 * move the 3136x256 layer far: the loss on one batch rises to about 10
 * before it falls, in PyTorch too); the variant's model is done. */
int w14_collect(ot_tensor *out, ot_tensor *const in[])
{
    int i = slot_of(ot_tensor_backend(in[IN_X]));
    double l = models[i].loss;
    float bad = isfinite(l) && l >= 0 ? 0.0f : 1.0f;
    ot_model_free(models[i].m);
    models[i].m = NULL;
    models[i].be = NULL;
    return ot_set(out, &bad);
}

void w14_check(const bench_data *d, float *out)
{
    (void)d;
    out[0] = 0;
}

/* One PyTorch step. */
bool w14_ref_absent(void) { return !torch.in; }

void w14_ref(const ref_loops *L, store_mode sm, const bench_data *d, float *out)
{
    (void)L, (void)sm, (void)d;
    out[0] = 0;
    bench_torch_step(&torch, "W14");
}
