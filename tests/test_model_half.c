/*
 * test_model_half.c - mixed-precision training (issue 36): ot_model with a
 * bf16 or f16 compute dtype trains (its loss falls, it classifies), with a
 * batch norm layer too; f16's loss scaler skips a step whose gradients
 * overflow (the parameters unchanged), halves its scale, and doubles it
 * after growth_interval good steps; bad dtypes and scales are errors.
 */
#include "test.h"

#include <math.h>
#include <stdlib.h>

enum { ROWS = 256, CLS = 4 };

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* Four noisy clusters at the corners of a square, one-hot targets. */
static void clusters(ot_backend *be, ot_tensor **x, ot_tensor **y)
{
    float hx[ROWS * 2], hy[ROWS * CLS] = {0};
    uint64_t s = 11;
    for (int r = 0; r < ROWS; r++) {
        int c = (int)(next(&s) % CLS);
        hx[2 * r] = (c & 1 ? 1.0f : -1.0f) + 0.4f * ((float)(next(&s) % 1000) / 1000 - 0.5f);
        hx[2 * r + 1] = (c & 2 ? 1.0f : -1.0f) + 0.4f * ((float)(next(&s) % 1000) / 1000 - 0.5f);
        hy[r * CLS + c] = 1;
    }
    *x = ot_array(be, OT_SHAPE(ROWS, 2), OT_F32, hx);
    *y = ot_array(be, OT_SHAPE(ROWS, CLS), OT_F32, hy);
}

static ot_model *classifier(ot_backend *be, ot_dtype dt, bool bn)
{
    ot_model *m = ot_model_new(be, 2);
    CHECK(m != NULL);
    CHECK_INT(ot_model_linear(m, 16, bn ? OT_ACT_NONE : OT_ACT_RELU, 1), 0);
    if (bn) CHECK_INT(ot_model_batch_norm(m, OT_ACT_RELU, 0.1, 1e-5), 0);
    CHECK_INT(ot_model_linear(m, CLS, OT_ACT_NONE, 2), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.02}), 0);
    CHECK_INT(ot_model_compute_dtype(m, dt), 0);
    return m;
}

TEST(model_half_trains)
{
    static const char *const names[] = {"cpu", "ref"};
    static const ot_dtype dts[] = {OT_BF16, OT_F16};
    for (int bi = 0; bi < 2; bi++) {
        unsetenv("OT_BACKEND");
        ot_backend *be = ot_backend_new(names[bi], NULL);
        ot_tensor *x, *y;
        clusters(be, &x, &y);
        for (int d = 0; d < 2; d++) {
            ot_model *m = classifier(be, dts[d], bi == 0 && d == 1);
            ot_fit_result r1, r2;
            ot_fit_opts o = {.epochs = 1, .batch = 32, .seed = 3, .quiet = true};
            CHECK_INT(ot_model_fit(m, x, y, &o, &r1), 0);
            o.epochs = 6;
            CHECK_INT(ot_model_fit(m, x, y, &o, &r2), 0);
            CHECK(r2.loss < r1.loss && r2.loss < 0.3 && r2.accuracy > 0.95);
            ot_tensor *out = ot_model_predict(m, x);   /* f32 logits */
            CHECK(out && ot_tensor_dtype(out) == OT_F32);
            ot_loss_scale ls;
            CHECK_INT(ot_model_loss_scale(m, NULL, &ls), 0);
            CHECK(ls.skipped == 0 && ls.scale == 65536);   /* bf16: unscaled; f16: 56 good steps */
            ot_tensor_free(out);
            ot_model_free(m);
        }
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be);
    }
}

static void first_weight(ot_model *m, float w[32])
{
    ot_tensor *p[4];
    CHECK_INT(ot_model_parameters(m, 4, p), 4);
    CHECK_INT(ot_get(p[0], w), 0);   /* (2, 16) */
}

TEST(model_half_loss_scale_skips_and_grows)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be, OT_F16, false);
    float w0[32], w1[32];
    first_weight(m, w0);
    /* 2^64 times the loss: its gradients overflow f16 at the output layer */
    CHECK_INT(ot_model_loss_scale(m, &(ot_loss_scale){.scale = 0x1p64}, NULL), 0);
    ot_fit_opts o = {.epochs = 1, .batch = ROWS, .seed = 3, .quiet = true};
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), 0);
    ot_loss_scale ls;
    CHECK_INT(ot_model_loss_scale(m, NULL, &ls), 0);
    CHECK(ls.skipped == 1 && ls.scale == 0x1p63);
    first_weight(m, w1);
    CHECK(memcmp(w0, w1, sizeof w0) == 0);   /* the step was skipped */
    /* a safe scale grows after each 2 good steps: 4 steps, 2 doublings */
    CHECK_INT(ot_model_loss_scale(m, &(ot_loss_scale){.scale = 256, .growth_interval = 2}, NULL),
              0);
    o.batch = ROWS / 4;
    CHECK_INT(ot_model_fit(m, x, y, &o, NULL), 0);
    CHECK_INT(ot_model_loss_scale(m, NULL, &ls), 0);
    CHECK(ls.skipped == 1 && ls.scale == 1024 && ls.growth_interval == 2);
    first_weight(m, w1);
    CHECK(memcmp(w0, w1, sizeof w0) != 0);
    /* errors */
    CHECK_INT(ot_model_compute_dtype(m, OT_I32), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "compute dtype must be float32, bfloat16 or float16");
    CHECK_INT(ot_model_loss_scale(m, &(ot_loss_scale){.scale = -1}, NULL), OT_EINVAL);
    CHECK_INT(ot_model_loss_scale(m, &(ot_loss_scale){.growth_interval = -1}, NULL), OT_EINVAL);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* Conv, batch norm, max pooling and dropout in mixed precision: the
 * pool's input is 16-bit while the gradient reaching it through dropout's
 * f32 mask is f32, which max_pool_grad once refused (its operands must be
 * alike). */
TEST(model_half_conv_pool_trains)
{
    static const char *const names[] = {"cpu", "ref"};
    static const ot_dtype dts[] = {OT_BF16, OT_F16};
    enum { N = 32, S = 6 };
    float hx[N * S * S], hy[N * 2] = {0};
    uint64_t s = 5;
    for (int i = 0; i < N; i++) {   /* class 1: the bright spot is in the left half */
        int c = (int)(next(&s) % 2);
        for (int p = 0; p < S * S; p++) hx[i * S * S + p] = (float)(next(&s) % 100) / 400;
        hx[i * S * S + (int)(next(&s) % S) * S + (c ? 1 : 4)] += 2;
        hy[i * 2 + c] = 1;
    }
    for (int bi = 0; bi < 2; bi++) {
        unsetenv("OT_BACKEND");
        ot_backend *be = ot_backend_new(names[bi], NULL);
        ot_tensor *x = ot_array(be, OT_SHAPE(N, S * S), OT_F32, hx);
        ot_tensor *y = ot_array(be, OT_SHAPE(N, 2), OT_F32, hy);
        for (int d = 0; d < 2; d++) {
            ot_model *m = ot_model_new(be, S * S);
            CHECK_INT(ot_model_compute_dtype(m, dts[d]), 0);
            CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){1, S, S}), 0);
            CHECK_INT(ot_model_conv(m, 4, 3, OT_ACT_NONE, 1, .padding = OT_PAD_SAME), 0);
            CHECK_INT(ot_model_batch_norm(m, OT_ACT_RELU, 0.1, 1e-5), 0);
            CHECK_INT(ot_model_max_pool(m, .kernel = {2}), 0);
            CHECK_INT(ot_model_dropout(m, 0.25), 0);   /* its f32 mask: an f32 gradient */
            CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, 2), 0);
            CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
            CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.02}), 0);
            ot_fit_result r1, r2;
            ot_fit_opts o = {.epochs = 1, .batch = 16, .seed = 3, .quiet = true};
            CHECK_INT(ot_model_fit(m, x, y, &o, &r1), 0);
            o.epochs = 8;
            CHECK_INT(ot_model_fit(m, x, y, &o, &r2), 0);
            CHECK(r2.loss < r1.loss);
            ot_model_free(m);
        }
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be);
    }
}
