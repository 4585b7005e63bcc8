/*
 * mlp.c - training a multilayer perceptron with optree's ot_model.
 *
 * The data set is made here, from a fixed seed: 10 classes of noisy 2-D
 * points on a 10-armed spiral (30,000 points, radius 0.1 to 1, Gaussian
 * noise of 0.015). Each arm winds once around the centre, so every class
 * surrounds the others: no straight line separates one class from the
 * rest, and a linear classifier (softmax regression on the two
 * coordinates) does no better than chance. The program trains one first
 * and prints its held-out accuracy (about 10%). The MLP, 2 -> 128 -> 128
 * -> 10 with ReLU, then reaches about 99% in 20 epochs, a few seconds on
 * one core.
 *
 * What it shows: a model is layers (ot_model_linear), a loss (softmax
 * cross-entropy against one-hot targets) and an optimizer (Adam, its step
 * size decayed by a cosine over the run); ot_model_fit shuffles, batches
 * (128 rows), holds out the last 20% (6,000 points, never trained on) and
 * prints one line per epoch; training runs as one compiled program, so
 * after the first step every step only binds the batch. The backend's
 * counters (ot_stats) at the end show how few plans that took.
 * examples/model.c adds early stopping, predict and saving; the loop this
 * replaces, written by hand with ot_autodiff and ot_adam_step, is in
 * README's "Training" section.
 *
 * It exits non-zero unless the held-out accuracy is above 95%. It runs on
 * the "cpu" backend (OT_BACKEND=ref runs the same program on the reference
 * backend). With OT_EXAMPLE_SMALL=1 it trains on 512 points for 2 epochs
 * and skips the accuracy requirement (that is how the test suite runs it
 * under valgrind). OT_COMPUTE_DTYPE=bf16 (or f16) trains in mixed
 * precision (ot_model_compute_dtype: f32 weights, 16-bit activations and
 * gradients; f16 with dynamic loss scaling). Uses only include/optree.h
 * and frees everything it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CLASSES = 10, BATCH = 128, HIDDEN = 128 };

/* ---------------------------------------------------------------- data */

/* splitmix64: a tiny seeded generator, so the data set is the same on
 * every run and every machine. */
static uint64_t rng_state = 0x5eed0f0eU;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }
static double rng_normal(void)
{
    /* Box-Muller; 1 - u keeps log away from 0. */
    double u = 1.0 - rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* n points, with one-hot labels: class k lies on the arm at angle 2*pi*k/10 + 5.5*t (t in [0, 1)
 * along the arm, radius 0.1 + 0.9*t), plus Gaussian noise. */
static void make_spirals(int n, float *xy, float *onehot)
{
    memset(onehot, 0, sizeof *onehot * (size_t)n * CLASSES);
    for (int i = 0; i < n; i++) {
        int k = (int)(rng_next() % CLASSES);
        double t = rng_uniform();
        double r = 0.1 + 0.9 * t;
        double a = 6.283185307179586 * k / CLASSES + 6.283185307179586 * t;
        xy[2 * i] = (float)(r * cos(a) + 0.015 * rng_normal());
        xy[2 * i + 1] = (float)(r * sin(a) + 0.015 * rng_normal());
        onehot[i * CLASSES + k] = 1;
    }
}

/* ---------------------------------------------------------------- model */

/* A model of dense layers of the given widths (ReLU between them, logits
 * out) under softmax cross-entropy and Adam at lr, fitted on (x, y);
 * returns the held-out accuracy, or -1 with the error set. */
static double fit(ot_backend *be, int layers, const int *width, double lr, int epochs,
                  bool quiet, ot_dtype compute, ot_tensor *x, ot_tensor *y)
{
    ot_model *m = ot_model_new(be, width[0]);
    int rc = m ? ot_model_compute_dtype(m, compute) : ot_errcode();
    for (int i = 0; i < layers && !rc; i++)
        rc = ot_model_linear(m, width[i + 1], i + 1 < layers ? OT_ACT_RELU : OT_ACT_NONE,
                             (uint64_t)i + 1);
    if (!rc) rc = ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);
    if (!rc) rc = ot_model_adam(m, &(ot_adam){.lr = lr, .beta1 = 0.9, .beta2 = 0.999,
                                              .eps = 1e-8, .grad_scale = 1, .t = 1});
    ot_fit_result r = {0};
    if (!rc)
        rc = ot_model_fit(m, x, y,
                          &(ot_fit_opts){.epochs = epochs, .batch = BATCH, .seed = 42,
                                         .validation_split = 0.2, .quiet = quiet,
                                         .lr_schedule = OT_LR_COSINE},
                          &r);
    ot_model_free(m);
    return rc ? -1 : r.val_accuracy;
}

int main(void)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    bool small = small_env && strcmp(small_env, "0") != 0 && small_env[0] != '\0';
    int n = small ? 512 : 30000, epochs = small ? 2 : 20;
    const char *cd = getenv("OT_COMPUTE_DTYPE");
    ot_dtype compute = !cd || !*cd || !strcmp(cd, "f32") ? OT_F32
                       : !strcmp(cd, "bf16") ? OT_BF16 : !strcmp(cd, "f16") ? OT_F16 : OT_I32;
    if (compute == OT_I32) {
        fprintf(stderr, "mlp: OT_COMPUTE_DTYPE=%s is not f32, bf16 or f16\n", cd);
        return 1;
    }

    /* "cpu" by default; OT_BACKEND=ref (or cpu) replaces the name. */
    /* One thread: a batch of 128 rows is too little work to share out. */
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    float *xy = malloc(sizeof *xy * 2 * (size_t)n);
    float *onehot = malloc(sizeof *onehot * CLASSES * (size_t)n);
    ot_tensor *x = NULL, *y = NULL;
    if (be && xy && onehot) {
        make_spirals(n, xy, onehot);
        x = ot_array(be, OT_SHAPE(n, 2), OT_F32, xy);
        y = ot_array(be, OT_SHAPE(n, CLASSES), OT_F32, onehot);
    }
    double acc = -1;
    if (x && y) {
        printf("mlp: %d training and %d held-out points, 10-arm spirals; backend %s, "
               "compute dtype %s\n", n - n / 5, n / 5, ot_backend_name(be), ot_dtype_name(compute));
        /* A linear classifier first: how far no hidden layer gets. */
        acc = fit(be, 1, (const int[]){2, CLASSES}, 0.05, small ? 1 : 3, true, compute, x, y);
        if (acc >= 0) printf("linear classifier: held-out accuracy %.2f%%\n", 100 * acc);
        if (acc >= 0)
            acc = fit(be, 3, (const int[]){2, HIDDEN, HIDDEN, CLASSES}, 0.01, epochs, false, compute,
                      x, y);
        if (acc >= 0) printf("mlp: held-out accuracy %.2f%%\n", 100 * acc);
    }
    ot_stats st;
    if (acc >= 0 && ot_stats(be, &st) == 0)
        printf("backend %s: %llu evaluations, %llu plans compiled, %llu plan-cache hits\n",
               ot_backend_name(be), (unsigned long long)st.assigns,
               (unsigned long long)st.compiles, (unsigned long long)st.cache_hits);
    if (acc < 0) fprintf(stderr, "mlp: %s\n", ot_errmsg());
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
    ot_pool_drain();
    free(xy);
    free(onehot);

    if (acc < 0) return 1;
    if (!small && !(acc > 0.95)) {
        printf("mlp: FAILED: held-out accuracy %.2f%% is not above 95%%\n", 100 * acc);
        return 1;
    }
    return 0;
}
