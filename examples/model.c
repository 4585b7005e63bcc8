/*
 * model.c - a classifier trained with ot_model: layers, a loss, an
 * optimizer, ot_model_fit and ot_model_predict, with no training loop of
 * one's own.
 *
 * The data (made here from a fixed seed): 3 classes of noisy points on
 * three concentric rings of radius 0.3, 0.6 and 0.9. No straight line
 * separates a ring from the others, so the model needs its hidden layers.
 * It is a 2 -> 64 -> 64 -> 3 ReLU MLP under softmax cross-entropy and
 * Adam; fit holds out the last 20% of the rows, prints one line per epoch
 * (loss, accuracy, validation loss and accuracy, samples/s) and stops early
 * when the validation loss has not improved for 3 epochs. predict then
 * classifies new points.
 *
 * It exits non-zero unless the validation accuracy is above 90%
 * (OT_EXAMPLE_SMALL=1 trains 2 epochs on fewer points and skips that, as
 * the test suite runs it under valgrind). Uses only include/optree.h and
 * frees everything it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CLASSES = 3 };

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return (double)(*s >> 11) * 0x1p-53;
}

/* n points, x (n, 2) and one-hot y (n, 3), on rings of radius 0.3(c + 1)
 * with a triangular spread. */
static void rings(float *x, float *y, int n, uint64_t seed)
{
    memset(y, 0, sizeof *y * (size_t)n * CLASSES);
    for (int i = 0; i < n; i++) {
        int c = (int)(urand(&seed) * CLASSES);
        double a = 6.283185307179586 * urand(&seed);
        double r = 0.3 * (c + 1) + 0.16 * (urand(&seed) + urand(&seed) - 1);
        x[2 * i] = (float)(r * cos(a));
        x[2 * i + 1] = (float)(r * sin(a));
        y[i * CLASSES + c] = 1;
    }
}

int main(void)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    bool small = small_env && *small_env && strcmp(small_env, "0") != 0;
    int n = small ? 600 : 6000;
    float *hx = malloc(sizeof *hx * (size_t)n * 2), *hy = malloc(sizeof *hy * (size_t)n * CLASSES);
    ot_backend *be = ot_backend_new("cpu", NULL);
    if (!hx || !hy || !be) return 1;
    rings(hx, hy, n, 11);
    ot_tensor *x = ot_array(be, OT_SHAPE(n, 2), OT_F32, hx);
    ot_tensor *y = ot_array(be, OT_SHAPE(n, CLASSES), OT_F32, hy);

    ot_model *m = ot_model_new(be, 2);
    int rc = m && x && y ? 0 : ot_errcode();
    if (!rc) rc = ot_model_linear(m, 64, OT_ACT_RELU, 1);
    if (!rc) rc = ot_model_linear(m, 64, OT_ACT_RELU, 2);
    if (!rc) rc = ot_model_linear(m, CLASSES, OT_ACT_NONE, 3);
    if (!rc) rc = ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);
    if (!rc) rc = ot_model_adam(m, &(ot_adam){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
                                              .eps = 1e-8, .grad_scale = 1, .t = 1});
    ot_fit_result r = {0};
    if (!rc)
        rc = ot_model_fit(m, x, y,
                          &(ot_fit_opts){.epochs = small ? 2 : 30, .batch = 64, .seed = 5,
                                         .validation_split = 0.2, .patience = 3},
                          &r);
    if (!rc) printf("stopped after %d epochs (best: %d); validation accuracy %.1f%%\n",
                    r.epochs_run, r.best_epoch, 100 * r.val_accuracy);

    /* Three new points, one on each ring: predict gives logits, whose
     * largest entry is the class. */
    float probe[6] = {0.3f, 0, 0, -0.6f, 0.9f * 0.7071f, 0.9f * 0.7071f};
    ot_tensor *px = rc ? NULL : ot_array(be, OT_SHAPE(3, 2), OT_F32, probe);
    ot_tensor *logits = px ? ot_model_predict(m, px) : NULL;
    float z[3 * CLASSES];
    if (!rc && (!logits || ot_get(logits, z) != 0)) rc = ot_errcode();
    for (int i = 0; i < 3 && !rc; i++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (z[i * CLASSES + c] > z[i * CLASSES + best]) best = c;
        printf("point (%+.2f, %+.2f): ring %d\n", probe[2 * i], probe[2 * i + 1], best);
    }
    if (rc) fprintf(stderr, "model: %s\n", ot_errmsg());
    bool good = !rc && (small || r.val_accuracy > 0.9);
    ot_tensor_free(logits);
    ot_tensor_free(px);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
    ot_pool_drain();
    free(hx);
    free(hy);
    return good ? 0 : 1;
}
