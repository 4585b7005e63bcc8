/*
 * test_model_reg.c - ot_model's regularisation (src/front/model_reg.c and
 * model.c's fit): the dropout layer's masks (seen through the gradient of a
 * linear layer behind it), its identity in predict and validation, its
 * errors; ot_fit_opts.augment (called once per step on a copy of the
 * batch, reproducible seeds, its failure); Adam's decoupled weight decay
 * in a model (dense and conv weights only). Tiny models: milliseconds.
 */
#include "test.h"

#include <math.h>
#include <string.h>

enum { FEAT = 400, ROWS = 64 };

/* The mean of the model's output: its gradient with respect to a linear
 * layer's W (FEAT, 1) is the mean over rows of what enters the layer. */
static ot_node *mean_out(ot_node *out, ot_node *y, void *user)
{
    (void)y;
    (void)user;
    return ot_mean(out);
}

/* inputs FEAT -> dropout(rate) (none when rate < 0) -> linear(1), plain
 * SGD lr 1, so one step writes W - mean over rows of the masked input. */
static ot_model *drop_model(ot_backend *be, double rate)
{
    ot_model *m = ot_model_new(be, FEAT);
    if (rate >= 0) CHECK_INT(ot_model_dropout(m, rate), 0);
    CHECK_INT(ot_model_linear(m, 1, OT_ACT_NONE, 5), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_CUSTOM, mean_out, NULL), 0);
    CHECK_INT(ot_model_sgd(m, &(ot_sgd){.lr = 1}), 0);
    return m;
}

/* W after minus W before, for one step on a batch of ROWS rows of ones. */
static void one_step(ot_model *m, ot_tensor *x, ot_tensor *y, uint64_t seed, float *moved)
{
    ot_tensor *p[2];
    float before[FEAT];
    CHECK_INT(ot_model_parameters(m, 2, p), 2);
    CHECK_INT(ot_get(p[0], before), 0);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = ROWS, .seed = seed, .quiet = true},
                           NULL), 0);
    CHECK_INT(ot_get(p[0], moved), 0);
    for (int j = 0; j < FEAT; j++) moved[j] = before[j] - moved[j];
}

TEST(model_dropout_masks)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x = ot_full(be, OT_SHAPE(ROWS, FEAT), OT_F32, 1.0);
    ot_tensor *y = ot_zeros(be, OT_SHAPE(ROWS, 1), OT_F32);
    static float g[FEAT], g2[FEAT];
    /* rate 0.25: each value is 0 or 4/3, so a column's mean over the rows
     * is a multiple of (4/3)/ROWS; over all values it is about 1 (the
     * expectation kept), and rows differ (some columns are not 0 or 4/3). */
    ot_model *m = drop_model(be, 0.25);
    one_step(m, x, y, 1, g);
    double sum = 0;
    int between = 0;
    for (int j = 0; j < FEAT; j++) {
        double k = g[j] * ROWS * 0.75;
        CHECK_NEAR(k, rint(k), 1e-3);
        between += g[j] > 0.01f && g[j] < 1.3f;
        sum += g[j];
    }
    CHECK_NEAR(sum / FEAT, 1, 0.03);   /* 25,600 draws: sd 0.0036 */
    CHECK(between > FEAT / 2);
    /* the same seed draws the same masks, another seed others */
    ot_model *again = drop_model(be, 0.25);
    one_step(again, x, y, 1, g2);
    CHECK(memcmp(g, g2, sizeof g) == 0);
    one_step(again, x, y, 2, g2);
    CHECK(memcmp(g, g2, sizeof g) != 0);
    /* a new mask each step: two steps of one fit move W by other than
     * twice the first step's mask mean */
    ot_model *two = drop_model(be, 0.25);
    ot_tensor *p[2];
    float w0[FEAT], w2[FEAT];
    CHECK_INT(ot_model_parameters(two, 2, p), 2);
    CHECK_INT(ot_get(p[0], w0), 0);
    CHECK_INT(ot_model_fit(two, x, y, &(ot_fit_opts){.epochs = 2, .batch = ROWS, .seed = 1,
                                                     .quiet = true}, NULL), 0);
    CHECK_INT(ot_get(p[0], w2), 0);
    int same = 0;
    for (int j = 0; j < FEAT; j++) same += fabsf(w0[j] - w2[j] - 2 * g[j]) < 1e-4f;
    CHECK(same < FEAT / 2);
    ot_model_free(two);
    /* rate 0: every value passes, as without the layer */
    ot_model *zero = drop_model(be, 0);
    one_step(zero, x, y, 1, g);
    for (int j = 0; j < FEAT; j++) CHECK_NEAR(g[j], 1, 1e-6);
    ot_model_free(zero);
    ot_model_free(again);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* predict and validation pass values through: the same numbers as the
 * model without the layer (same seed, so the same weights). */
TEST(model_dropout_identity_outside_training)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x = ot_full(be, OT_SHAPE(ROWS, FEAT), OT_F32, 0.5);
    ot_tensor *y = ot_zeros(be, OT_SHAPE(ROWS, 1), OT_F32);
    ot_model *m = drop_model(be, 0.5), *plain = drop_model(be, -1);
    ot_tensor *a = ot_model_predict(m, x), *b = ot_model_predict(plain, x);
    static float ha[ROWS], hb[ROWS];
    CHECK(a && b && ot_get(a, ha) == 0 && ot_get(b, hb) == 0);
    CHECK(memcmp(ha, hb, sizeof ha) == 0);
    ot_fit_result r;
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 16, .validation_split = 0.5,
                                                   .quiet = true}, &r), 0);
    ot_tensor *after = ot_model_predict(m, x);
    CHECK(after && ot_get(after, ha) == 0);
    CHECK_NEAR(r.val_loss, ha[ROWS - 1], 1e-6);   /* rows of equal values */
    ot_tensor_free(after);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_model_free(plain);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(model_dropout_errors)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_model *m = ot_model_new(be, 4);
    CHECK_INT(ot_model_dropout(NULL, 0.5), OT_ENULL);
    char at[128];
    int line = __LINE__ + 1;
    CHECK_INT(ot_model_dropout(m, 1.0), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_dropout", "rate must be in [0, 1), not 1");
    CHECK_INT(ot_model_dropout(m, -0.1), OT_EINVAL);
    CHECK_INT(ot_model_dropout(m, NAN), OT_EINVAL);
    /* after a conv: the mask has the sample's shape */
    CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){1, 2, 2}), 0);
    CHECK_INT(ot_model_conv(m, 2, 1, OT_ACT_NONE, 1), 0);
    CHECK_INT(ot_model_dropout(m, 0.5), 0);
    CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, 2), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    ot_tensor *x = ot_full(be, OT_SHAPE(8, 4), OT_F32, 1.0);
    ot_tensor *y = ot_full(be, OT_SHAPE(8, 2), OT_F32, 0.5);
    ot_tensor *p[4];
    CHECK_INT(ot_model_parameters(m, 4, p), 4);   /* conv W, b; linear W, b */
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .quiet = true}, NULL), 0);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_model_free(m);
    ot_backend_free(be);
}

/* ---- augment -------------------------------------------------------------- */

typedef struct seen {
    int calls, fail_at;
    int64_t rows;
    uint64_t seeds[8];
    ot_shape sample;
} seen;

/* Zeroes the batch (so a dense layer's W gets no gradient) and records
 * the call; returns 7 at call fail_at. */
static int zero_batch(float *x, int64_t rows, const ot_shape *sample, uint64_t seed, void *user)
{
    seen *s = user;
    if (s->calls < 8) s->seeds[s->calls] = seed;
    s->calls++;
    s->rows = rows;
    s->sample = *sample;
    memset(x, 0, sizeof *x * (size_t)(rows * 3));
    return s->calls == s->fail_at ? 7 : 0;
}

/* inputs (1, 3) -> linear(2), softmax cross-entropy, Adam. */
static ot_model *aug_model(ot_backend *be, double weight_decay)
{
    ot_model *m = ot_model_new(be, 3);
    CHECK_INT(ot_model_input_shape(m, 2, (int64_t[]){1, 3}), 0);
    CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, 9), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.01, .weight_decay = weight_decay}), 0);
    return m;
}

static void aug_data(ot_backend *be, ot_tensor **x, ot_tensor **y, float *hx)
{
    float hy[64 * 2];
    for (int i = 0; i < 64 * 3; i++) hx[i] = (float)(i % 7) - 3;
    /* two classes, 1 in 3 rows of class 1: every batch has a gradient */
    for (int r = 0; r < 64; r++) hy[2 * r] = 1 - (hy[2 * r + 1] = (float)(r % 3 == 0));
    *x = ot_array(be, OT_SHAPE(64, 3), OT_F32, hx);
    *y = ot_array(be, OT_SHAPE(64, 2), OT_F32, hy);
}

TEST(model_fit_augment)
{
    char at[128];
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x, *y, *p[2];
    static float hx[64 * 3], got[64 * 3];
    aug_data(be, &x, &y, hx);
    ot_model *m = aug_model(be, 0);
    float w0[6], w1[6], b1[2];
    CHECK_INT(ot_model_parameters(m, 2, p), 2);
    CHECK_INT(ot_get(p[0], w0), 0);
    seen s = {0};
    /* 48 training rows: 3 steps of 16 an epoch, 2 epochs; the 16
     * validation rows are never augmented */
    ot_fit_opts o = {.epochs = 2, .batch = 16, .validation_split = 0.25, .seed = 3,
                     .quiet = true, .augment = zero_batch, .augment_user = &s};
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), 0);
    CHECK_INT(s.calls, 6);
    CHECK_INT(s.rows, 16);
    CHECK_INT(s.sample.ndim, 2);
    CHECK_INT(s.sample.dims[1], 3);
    for (int i = 1; i < 6; i++) CHECK(s.seeds[i] != s.seeds[0]);
    CHECK_INT(ot_get(p[0], w1), 0);   /* zero inputs: W had no gradient */
    CHECK(memcmp(w0, w1, sizeof w0) == 0);
    CHECK_INT(ot_get(p[1], b1), 0);
    CHECK(b1[0] != 0);                /* but b trained */
    CHECK_INT(ot_get(x, got), 0);     /* fit's x is untouched */
    CHECK(memcmp(hx, got, sizeof got) == 0);
    uint64_t first = s.seeds[0];      /* the same seed, the same draws */
    s = (seen){0};
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), 0);
    CHECK(s.seeds[0] == first);
    /* a callback's failure stops the fit at that step */
    s = (seen){.fail_at = 2};
    int line = __LINE__ + 1;
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_fit", "augment callback returned 7 at step 2");
    CHECK_INT(s.calls, 2);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- weight decay ---------------------------------------------------------- */

/* AdamW in a model: with the inputs zeroed by augment, a dense W has no
 * gradient and only decays, by (1 - lr*weight_decay) a step, while b (not
 * decayed, and independent of W when the inputs are 0) trains exactly as
 * without decay; batch norm's scale (no gradient behind a zero input
 * either) is not decayed. */
TEST(model_adam_weight_decay)
{
    char at[128];
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x, *y, *p[4], *q[2];
    static float hx[64 * 3];
    aug_data(be, &x, &y, hx);
    ot_model *m = aug_model(be, 0.5), *plain = aug_model(be, 0);
    float w0[6], w1[6], b1[2], b2[2];
    CHECK_INT(ot_model_parameters(m, 2, p), 2);
    CHECK_INT(ot_model_parameters(plain, 2, q), 2);
    CHECK_INT(ot_get(p[0], w0), 0);
    seen s = {0};
    ot_fit_opts o = {.epochs = 2, .batch = 16, .quiet = true, .augment = zero_batch,
                     .augment_user = &s};
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), 0);
    CHECK_INT(ot_model_fit(plain, x, y, &o, NULL), 0);
    CHECK_INT(ot_get(p[0], w1), 0);
    for (int i = 0; i < 6; i++) CHECK_NEAR(w1[i], w0[i] * pow(1 - 0.01 * 0.5, 8), 1e-6);
    CHECK_INT(ot_get(p[1], b1), 0);
    CHECK_INT(ot_get(q[1], b2), 0);
    CHECK(memcmp(b1, b2, sizeof b1) == 0);
    /* batch norm's scale stays 1 */
    ot_model *bn = ot_model_new(be, 3);
    CHECK_INT(ot_model_linear(bn, 4, OT_ACT_NONE, 1), 0);
    CHECK_INT(ot_model_batch_norm(bn, OT_ACT_NONE, 0.1, 1e-5), 0);
    CHECK_INT(ot_model_linear(bn, 2, OT_ACT_NONE, 2), 0);
    CHECK_INT(ot_model_loss(bn, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    CHECK_INT(ot_model_adam(bn, &(ot_adam){.lr = 0.01, .weight_decay = 0.5}), 0);
    CHECK_INT(ot_model_fit(bn, x, y, &o, NULL), 0);
    float gamma[4];
    CHECK_INT(ot_model_parameters(bn, 4, p), 6);
    CHECK_INT(ot_get(p[2], gamma), 0);
    for (int i = 0; i < 4; i++) CHECK_INT(gamma[i] == 1.0f, 1);
    int line = __LINE__ + 1;
    CHECK_INT(ot_model_adam(bn, &(ot_adam){.weight_decay = -1}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_adam", "weight_decay");
    ot_model_free(bn);
    ot_model_free(plain);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}
