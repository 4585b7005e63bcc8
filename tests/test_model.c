/*
 * test_model.c - ot_model (src/front/model.c): fitting a small classifier on both
 * backends (accuracy, validation figures, the progress line), regression
 * under MSE and a custom loss, early stopping, predict against the forward
 * tree built by hand, and every bad argument an error that leaves the
 * parameters untouched.
 */
#define _POSIX_C_SOURCE 200809L   /* open_memstream */
#include "test.h"
#include "internal.h"   /* ot__alloc_fail_at, the allocation seam */
#include "replace.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ROWS = 512, CLS = 4 };

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, NULL);
    CHECK(be != NULL);
    return be;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* Four noisy clusters at the corners of a square, one-hot targets. */
static void clusters(ot_backend *be, ot_tensor **x, ot_tensor **y)
{
    float hx[ROWS * 2], hy[ROWS * CLS] = {0};
    uint64_t s = 7;
    for (int r = 0; r < ROWS; r++) {
        int c = (int)(next(&s) % CLS);
        hx[2 * r] = (c & 1 ? 1.0f : -1.0f) + 0.3f * ((float)(next(&s) % 1000) / 1000 - 0.5f);
        hx[2 * r + 1] = (c & 2 ? 1.0f : -1.0f) + 0.3f * ((float)(next(&s) % 1000) / 1000 - 0.5f);
        hy[r * CLS + c] = 1;
    }
    *x = ot_array(be, OT_SHAPE(ROWS, 2), OT_F32, hx);
    *y = ot_array(be, OT_SHAPE(ROWS, CLS), OT_F32, hy);
}

static ot_model *classifier(ot_backend *be)
{
    ot_model *m = ot_model_new(be, 2);
    CHECK(m != NULL);
    CHECK_INT(ot_model_linear(m, 16, OT_ACT_RELU, 1), 0);
    CHECK_INT(ot_model_linear(m, CLS, OT_ACT_NONE, 2), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.02, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                          .grad_scale = 1, .t = 1}),
              0);
    return m;
}

TEST(model_fit_classifier_both_backends)
{
    static const char *const names[] = {"ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(names[bi]);
        ot_tensor *x, *y;
        clusters(be, &x, &y);
        ot_model *m = classifier(be);
        char *text = NULL;
        size_t len = 0;
        FILE *log = open_memstream(&text, &len);
        ot_fit_result r;
        CHECK_INT(ot_model_fit(m, x, y,
                               &(ot_fit_opts){.epochs = 15, .batch = 32, .seed = 3,
                                              .validation_split = 0.25, .log = log},
                               &r),
                  0);
        fclose(log);
        CHECK_INT(r.epochs_run, 15);
        CHECK(r.accuracy > 0.95 && r.val_accuracy > 0.95 && r.val_loss < 0.3);
        CHECK(strstr(text, "epoch 1/15: loss ") && strstr(text, "val_accuracy") &&
              strstr(text, "samples/s"));
        free(text);
        /* predict: the logits, argmax = the class of each training row */
        ot_tensor *out = ot_model_predict(m, x);
        CHECK(out != NULL);
        ot_shape s = ot_tensor_shape(out);
        CHECK(s.ndim == 2 && s.dims[0] == ROWS && s.dims[1] == CLS);
        ot_tensor_free(out);
        ot_model_free(m);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_backend_free(be);
    }
}

/* predict is the forward tree, act(x.W + b) per layer, bitwise. */
TEST(model_predict_is_the_forward_tree)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be);
    ot_tensor *p[4];
    CHECK_INT(ot_model_parameters(m, 4, p), 4);
    ot_tensor *got = ot_model_predict(m, x), *want = ot_empty(be, OT_SHAPE(ROWS, CLS), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_assign(want, ot_add(ot_dot(ot_relu(ot_add(ot_dot(x, p[0]), p[1])), p[2]), p[3])), 0);
    ot_pool_pop(pool);
    float a[ROWS * CLS], b[ROWS * CLS];
    ot_get(got, a);
    ot_get(want, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* the parameters are trainable: ot_variables of that tree lists them */
    ot_tensor *vars[5] = {0};
    pool = ot_pool_push();
    CHECK_INT(ot_variables(ot_add(ot_dot(ot_relu(ot_add(ot_dot(x, p[0]), p[1])), p[2]), p[3]), 5, vars), 4);
    ot_pool_pop(pool);
    for (int i = 0; i < 4; i++) CHECK(ot_tensor_trainable(p[i]));
    ot_tensor_free(got);
    ot_tensor_free(want);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

static ot_node *mean_abs(ot_node *out, ot_node *target, void *user)
{
    (void)user;
    return ot_mean(ot_abs(ot_sub(out, target)));
}

/* y = 2x - 1 under MSE (SGD with momentum) and under a custom L1 loss. */
TEST(model_regression_mse_and_custom_loss)
{
    ot_backend *be = backend("cpu");
    float hx[256], hy[256];
    for (int i = 0; i < 256; i++) {
        hx[i] = (float)i / 128 - 1;
        hy[i] = 2 * hx[i] - 1;
    }
    ot_tensor *x = ot_array(be, OT_SHAPE(256, 1), OT_F32, hx);
    ot_tensor *y = ot_array(be, OT_SHAPE(256, 1), OT_F32, hy);
    for (int k = 0; k < 2; k++) {
        ot_model *m = ot_model_new(be, 1);
        CHECK_INT(ot_model_linear(m, 1, OT_ACT_NONE, 5), 0);
        if (k == 0) {
            CHECK_INT(ot_model_loss(m, OT_LOSS_MSE, NULL, NULL), 0);
            CHECK_INT(ot_model_sgd(m, &(ot_sgd){.lr = 0.1, .momentum = 0.5}), 0);
        } else {
            CHECK_INT(ot_model_loss(m, OT_LOSS_CUSTOM, mean_abs, NULL), 0);
            CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.05, .beta1 = 0.9, .beta2 = 0.999,
                                                  .eps = 1e-8, .grad_scale = 1, .t = 1}),
                      0);
        }
        ot_fit_result r;
        CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 40, .batch = 16, .seed = 1,
                                                       .quiet = true},
                               &r),
                  0);
        CHECK(r.loss < (k == 0 ? 1e-4 : 0.05));
        CHECK(isnan(r.accuracy) && isnan(r.val_loss));   /* one output, no split */
        ot_model_free(m);
    }
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* An lr that is 0 in f32 (lr 0 itself means the default) and rows in
 * order: the loss never improves, so patience 2 stops after epoch 3, the
 * best being epoch 1. */
TEST(model_early_stopping)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be);
    CHECK_INT(ot_model_sgd(m, &(ot_sgd){.lr = 1e-300}), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);
    ot_fit_result r;
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 20, .batch = 64, .no_shuffle = true,
                                                   .patience = 2, .monitor = OT_MONITOR_LOSS,
                                                   .log = log},
                           &r),
              0);
    fclose(log);
    CHECK_INT(r.epochs_run, 3);
    CHECK_INT(r.best_epoch, 1);
    CHECK(strstr(text, "early stop") != NULL);
    free(text);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

static void params_bits(ot_model *m, float *out)
{
    ot_tensor *p[4];
    ot_model_parameters(m, 4, p);
    for (int i = 0; i < 4; i++) {
        ot_get(p[i], out);
        out += ot_tensor_numel(p[i]);
    }
}

/* A cosine schedule over two steps (scale 1, then 1/2) trains as two fits
 * of one step each at lr and lr/2 on the same batches: to rounding, not
 * bits, since a constant lr may be folded into the GEMM's alpha (the
 * product then rounds once) and a scheduled one is read at run time. */
TEST(model_cosine_schedule)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *a = classifier(be), *b = classifier(be);
    const double lr = 0.05;
    CHECK_INT(ot_model_sgd(a, &(ot_sgd){.lr = lr}), 0);
    ot_tensor *x2 = ot_slice(x, OT_RANGE(0, 128)), *y2 = ot_slice(y, OT_RANGE(0, 128));
    CHECK_INT(ot_model_fit(a, x2, y2, &(ot_fit_opts){.batch = 64, .no_shuffle = true,
                                                     .quiet = true, .lr_schedule = OT_LR_COSINE},
                           NULL),
              0);
    for (int k = 0; k < 2; k++) {
        ot_tensor *xk = ot_slice(x, OT_RANGE(64 * k, 64 * k + 64));
        ot_tensor *yk = ot_slice(y, OT_RANGE(64 * k, 64 * k + 64));
        CHECK_INT(ot_model_sgd(b, &(ot_sgd){.lr = k ? lr / 2 : lr}), 0);
        CHECK_INT(ot_model_fit(b, xk, yk, &(ot_fit_opts){.batch = 64, .quiet = true}, NULL), 0);
        ot_tensor_free(xk);
        ot_tensor_free(yk);
    }
    float pa[2 * 16 + 16 + 16 * CLS + CLS], pb[sizeof pa / sizeof *pa];
    params_bits(a, pa);
    params_bits(b, pb);
    for (size_t i = 0; i < sizeof pa / sizeof *pa; i++) CHECK_NEAR(pa[i], pb[i], 1e-6);
    ot_tensor_free(x2);
    ot_tensor_free(y2);
    ot_model_free(a);
    ot_model_free(b);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* Every bad argument fails before a step runs: the parameters keep their
 * bits. */
TEST(model_bad_input_leaves_parameters)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_tensor *y3 = ot_zeros(be, OT_SHAPE(ROWS, 3), OT_F32);
    ot_tensor *yshort = ot_zeros(be, OT_SHAPE(ROWS - 1, CLS), OT_F32);
    ot_tensor *x64 = ot_zeros(be, OT_SHAPE(ROWS, 2), OT_F64);
    ot_model *m = classifier(be);
    float before[2 * 16 + 16 + 16 * CLS + CLS], after[sizeof before / sizeof *before];
    params_bits(m, before);
    const ot_fit_opts ok = {.epochs = 1, .batch = 32, .quiet = true};
    CHECK_INT(ot_model_fit(m, x, y3, &ok, NULL), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "model_fit", "y has shape (512,3); must be (rows, 4)");
    CHECK_INT(ot_model_fit(m, x, yshort, &ok, NULL), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "x has shape (512,2) and y (511,4)", "rows");
    CHECK_INT(ot_model_fit(m, x64, y, &ok, NULL), OT_EDTYPE);
    CHECK_INT(ot_model_fit(m, NULL, y, &ok, NULL), OT_ENULL);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = -1}, NULL), OT_EINVAL);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.validation_split = 1.0}, NULL), OT_EINVAL);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = ROWS + 1}, NULL), OT_EINVAL);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.patience = 2, .quiet = true}, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "validation_split > 0");
    /* a split of no row (512 * 0.001 rounds down to 0) trained on every
     * row and printed val_loss nan as if it validated */
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.validation_split = 0.001, .quiet = true},
                           NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "model_fit", "validation_split 0.001 of 512 rows holds no row");
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.lr_schedule = 7, .quiet = true}, NULL),
              OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "lr_schedule must be OT_LR_CONSTANT or OT_LR_COSINE, not 7");
    params_bits(m, after);
    CHECK(memcmp(before, after, sizeof before) == 0);
    /* a model without a loss, or without layers */
    ot_model *bare = ot_model_new(be, 2);
    CHECK_INT(ot_model_fit(bare, x, y, &ok, NULL), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "no layers");
    CHECK_INT(ot_model_linear(bare, CLS, OT_ACT_NONE, 1), 0);
    CHECK_INT(ot_model_fit(bare, x, y, &ok, NULL), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "no loss");
    CHECK(ot_model_predict(bare, y) == NULL);   /* 4 columns for a 2-input model */
    CHECK_ERR(OT_ESHAPE, "model_predict");
    /* bad building */
    CHECK(ot_model_new(NULL, 2) == NULL);
    CHECK(ot_model_new(be, 0) == NULL);
    CHECK_INT(ot_model_linear(bare, 0, OT_ACT_NONE, 1), OT_EINVAL);
    CHECK_INT(ot_model_linear(bare, 3, (ot_activation)99, 1), OT_EINVAL);
    CHECK_INT(ot_model_loss(bare, 99, NULL, NULL), OT_EINVAL);
    CHECK_INT(ot_model_loss(bare, OT_LOSS_CUSTOM, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_model_loss(bare, OT_LOSS_MSE, mean_abs, NULL), OT_EINVAL);
    CHECK_INT(ot_model_sgd(bare, &(ot_sgd){.lr = -1}), OT_EINVAL);
    CHECK_INT(ot_model_adam(bare, &(ot_adam){.eps = -1}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "model_adam", "eps must be finite and > 0, not -1");
    ot_adam scheduled = ot_adam_default(0.1);
    scheduled.lr_scale = ot_zeros(be, OT_SHAPE(), OT_F64);
    CHECK_INT(ot_model_adam(bare, &scheduled), OT_EINVAL);
    ot_tensor_free(scheduled.lr_scale);
    CHECK_ERR(OT_EINVAL, "model_adam", "lr_scale must be NULL");
    CHECK_INT(ot_model_sgd(NULL, &(ot_sgd){.lr = 1}), OT_ENULL);
    ot_model_free(bare);
    ot_model_free(NULL);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(y3);
    ot_tensor_free(yshort);
    ot_tensor_free(x64);
    ot_backend_free(be);
}

/* Saved, then loaded into a fresh model of the same layers: the same
 * predictions, bit for bit. A truncated file, or one of other shapes, is
 * an error that leaves the model's parameters as they were. */
TEST(model_save_load_round_trip_and_bad_files)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 2, .batch = 32, .quiet = true}, NULL), 0);
    char path[] = "/tmp/ot_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_INT(ot_model_save(m, path), 0);
    ot_model *fresh = ot_model_new(be, 2);
    CHECK_INT(ot_model_linear(fresh, 16, OT_ACT_RELU, 9), 0);
    CHECK_INT(ot_model_linear(fresh, CLS, OT_ACT_NONE, 9), 0);
    CHECK_INT(ot_model_load(fresh, path), 0);
    ot_tensor *a = ot_model_predict(m, x), *b = ot_model_predict(fresh, x);
    float ha[ROWS * CLS], hb[ROWS * CLS];
    ot_get(a, ha);
    ot_get(b, hb);
    CHECK(memcmp(ha, hb, sizeof ha) == 0);
    ot_tensor_free(a);
    ot_tensor_free(b);
    /* another architecture: 8 hidden units */
    ot_model *other = ot_model_new(be, 2);
    CHECK_INT(ot_model_linear(other, 8, OT_ACT_RELU, 1), 0);
    CHECK_INT(ot_model_linear(other, CLS, OT_ACT_NONE, 2), 0);
    float before[2 * 8 + 8 + 8 * CLS + CLS], after[sizeof before / sizeof *before];
    ot_tensor *p[4];
    ot_model_parameters(other, 4, p);
    for (int i = 0, at = 0; i < 4; at += (int)ot_tensor_numel(p[i]), i++) ot_get(p[i], before + at);
    CHECK_INT(ot_model_load(other, path), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "model_load", "'w0'");
    /* the right shapes in float64 (np.savez of NumPy's default dtype) is
     * a dtype error, not a shape error (it was OT_ESHAPE) */
    {
        ot_tensor *q[4], *q64[4];
        ot_model_parameters(fresh, 4, q);
        for (int i = 0; i < 4; i++) {
            q64[i] = ot_empty(be, ot_tensor_shape(q[i]), OT_F64);
            CHECK(q64[i] && ot_assign(q64[i], ot_cast(q[i], OT_F64)) == 0);
        }
        char p64[] = "/tmp/ot_model64_XXXXXX";
        int fd64 = mkstemp(p64);
        CHECK(fd64 >= 0);
        close(fd64);
        CHECK_INT(ot_savez(p64, 4, (const char *[]){"w0", "b0", "w1", "b1"},
                           (const ot_tensor *const *)q64), 0);
        float keep[2 * 16];
        ot_get_n(q[0], keep, sizeof keep);
        CHECK_INT(ot_model_load(fresh, p64), OT_EDTYPE);
        CHECK_ERR(OT_EDTYPE, "model_load", "'w0' is float64 of shape (2,16); the model's is float32 (2,16)");
        float again[2 * 16];
        ot_get_n(q[0], again, sizeof again);
        CHECK(memcmp(keep, again, sizeof keep) == 0);
        unlink(p64);
        for (int i = 0; i < 4; i++) ot_tensor_free(q64[i]);
    }
    /* a truncated file */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK_INT(ftruncate(fileno(f), 100), 0);
    fclose(f);
    CHECK(ot_model_load(other, path) < 0);
    CHECK(ot_model_load(fresh, path) < 0);
    for (int i = 0, at = 0; i < 4; at += (int)ot_tensor_numel(p[i]), i++) ot_get(p[i], after + at);
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK_INT(ot_model_load(other, "/nonexistent/dir/params.npz"), OT_EIO);
    /* the npz layer's errors name the caller's line and the model call
     * (they read "loadz: ..." alone; found by a misuse probe) */
    CHECK_ERR(OT_EIO, "test_model.c:", "model_load: loadz: cannot open '/nonexistent/dir/params.npz'");
    CHECK_INT(ot_model_save(m, "/nonexistent/dir/params.npz"), OT_EIO);
    CHECK_ERR(OT_EIO, "test_model.c:", "model_save: savez: cannot open");
    CHECK_INT(ot_model_save(NULL, path), OT_ENULL);
    CHECK_INT(ot_model_load(other, NULL), OT_ENULL);
    unlink(path);
    ot_model_free(other);
    ot_model_free(fresh);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- issue 31: zero optimizer options, errors at the call site ------------- */

/* (ot_adam){.lr = 1e-3} was refused ("eps must be > 0, not 0"): zero fields
 * are the defaults, so it trains exactly as ot_adam_default(1e-3) does. */
TEST(model_adam_zero_fields_are_defaults)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    float bits[2][2 * 16 + 16 + 16 * CLS + CLS];
    for (int k = 0; k < 2; k++) {
        ot_model *m = classifier(be);
        ot_adam def = ot_adam_default(1e-3);
        CHECK_INT(ot_model_adam(m, k ? &def : &(ot_adam){.lr = 1e-3}), 0);
        CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 2, .batch = 64, .quiet = true},
                               NULL),
                  0);
        params_bits(m, bits[k]);
        ot_model_free(m);
    }
    CHECK(memcmp(bits[0], bits[1], sizeof bits[0]) == 0);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(model_errors_name_the_call_site_and_shapes)
{
    char at[128];
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_tensor *x3 = ot_zeros(be, OT_SHAPE(ROWS, 3), OT_F32);
    ot_model *m = classifier(be);
    int line = __LINE__ + 1;
    CHECK_INT(ot_model_fit(m, x3, y, NULL, NULL), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_fit", "x has shape (512,3); must be (rows, 2)");
    line = __LINE__ + 1;
    CHECK(ot_model_predict(m, x3) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_predict", "shape (512,3)", "(rows, 2)");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_linear(m, 0, OT_ACT_NONE, 1), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_linear", "units must be >= 1");
    /* A layer whose tensors cannot be made: each failing allocation in
     * turn, the error named as the call's, not as an inner zeros' */
    for (long n = 1;; n++) {
        ot_model *mm = ot_model_new(be, 2);
        CHECK(mm != NULL);
        ot__alloc_fail_at(n);
        line = __LINE__ + 1;
        int rc = ot_model_linear(mm, 3, OT_ACT_NONE, 1);
        ot__alloc_fail_at(0);
        ot_model_free(mm);
        if (rc == 0) break;
        CHECK_INT(rc, OT_ENOMEM);
        CHECK_ERR(OT_ENOMEM, TEST_SITE(at, line), "model_linear");
        if (n > 200) break;
    }
    line = __LINE__ + 1;
    CHECK_INT(ot_model_sgd(m, &(ot_sgd){.momentum = -1}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_sgd", "momentum must be finite and >= 0");
    line = __LINE__ + 1;
    CHECK(ot_model_new(be, 0) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_new", "inputs must be >= 1");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_parameters(NULL, 0, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, TEST_SITE(at, line), "model_parameters");
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(x3);
    ot_backend_free(be);
}

/* The parameters, all of them, into h (sizeof h >= their bytes). */
static void params_of(const ot_model *m, float *h)
{
    ot_tensor *p[4];
    CHECK_INT(ot_model_parameters(m, 4, p), 4);
    for (int i = 0, at = 0; i < 4; at += (int)ot_tensor_numel(p[i]), i++)
        CHECK_INT(ot_get(p[i], h + at), 0);
}

/* A save that fails at any of its system calls (injected ENOSPC) leaves
 * the previous save loadable, parameters bit for bit, and no temporary
 * beside it; a compressed .npz (numpy.savez_compressed's format) loads
 * too. The code before this fix truncated the old file first. */
TEST(model_save_failure_keeps_old_file)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be), *back = classifier(be);
    char dir[] = "/tmp/ot_model_XXXXXX", path[64], cmd[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/params.npz", dir);
    CHECK_INT(ot_model_save(m, path), 0);
    float saved[2 * 16 + 16 + 16 * CLS + CLS], now[sizeof saved / sizeof *saved];
    params_of(m, saved);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 1, .batch = 32, .quiet = true}, NULL), 0);
    int failures = 0;
    for (long at = 1;; at++) {
        ot__replace_fail_at(at, ENOSPC);
        int rc = ot_model_save(m, path);
        ot__replace_fail_at(0, 0);
        if (rc == 0)
            break;
        failures++;
        CHECK_ERR(OT_EIO, "params.npz", strerror(ENOSPC));
        CHECK_INT(ot_model_load(back, path), 0);
        params_of(back, now);
        CHECK(memcmp(now, saved, sizeof saved) == 0);
    }
    CHECK(failures >= 5);
    /* the successful save holds the trained parameters */
    params_of(m, saved);
    CHECK_INT(ot_model_load(back, path), 0);
    params_of(back, now);
    CHECK(memcmp(now, saved, sizeof saved) == 0);
    /* deflated entries, as numpy.savez_compressed writes them */
    ot_tensor *p[4];
    ot_model_parameters(m, 4, p);
    CHECK_INT(ot_savez_compressed(path, 4, (const char *[]){"w0", "b0", "w1", "b1"},
                                  (const ot_tensor *const *)p), 0);
    ot_model *fresh = classifier(be);
    CHECK_INT(ot_model_load(fresh, path), 0);
    params_of(fresh, now);
    CHECK(memcmp(now, saved, sizeof saved) == 0);
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) = 1 && rm -r '%s'", dir, dir);
    CHECK_INT(system(cmd), 0);
    ot_model_free(fresh);
    ot_model_free(back);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* A real write failure, no hook: a model too big for the file size limit
 * (SIGXFSZ ignored: EFBIG) saved over a small one's file fails, and the
 * small model's file still loads. The code before this fix removed it. */
TEST(model_save_over_file_size_limit_keeps_old_file)
{
    ot_backend *be = backend("cpu");
    ot_model *tiny = ot_model_new(be, 2), *wide = ot_model_new(be, 2);
    CHECK_INT(ot_model_linear(tiny, 3, OT_ACT_RELU, 1), 0);
    CHECK_INT(ot_model_linear(wide, 4096, OT_ACT_RELU, 1), 0);
    char dir[] = "/tmp/ot_model_XXXXXX", path[64], cmd[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/params.npz", dir);
    CHECK_INT(ot_model_save(tiny, path), 0);
    struct rlimit was, lim;
    signal(SIGXFSZ, SIG_IGN);
    CHECK_INT(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = (struct rlimit){4096, was.rlim_max};
    CHECK_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
    CHECK_INT(ot_model_save(wide, path), OT_EIO);
    CHECK_INT(setrlimit(RLIMIT_FSIZE, &was), 0);
    CHECK_ERR(OT_EIO, "params.npz", strerror(EFBIG));
    CHECK_INT(ot_model_load(tiny, path), 0);
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) = 1 && rm -r '%s'", dir, dir);
    CHECK_INT(system(cmd), 0);
    ot_model_free(tiny);
    ot_model_free(wide);
    ot_backend_free(be);
}

/* Every allocation of ot_model_fit (its copies of the data and batches
 * included: they went around the allocation seam) fails in turn: each fit
 * returns an error and leaks nothing (ASan checks), and the first fit that
 * gets all its memory succeeds. */
TEST(model_fit_allocation_failures)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x, *y;
    clusters(be, &x, &y);
    ot_model *m = classifier(be);
    const ot_fit_opts o = {.epochs = 1, .batch = 64, .quiet = true};
    long n = 1;
    for (;; n++) {
        ot__alloc_fail_at(n);
        int rc = ot_model_fit(m, x, y, &o, NULL);
        ot__alloc_fail_at(0);
        if (rc == 0 || n >= 100000) break;
    }
    CHECK(n > 5 && n < 100000);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* predict refuses x on another backend, naming the caller (it failed
 * deep in the forward pass, naming a line of model.c). */
TEST(model_predict_refuses_another_backend)
{
    ot_backend *be = ot_backend_new("cpu", NULL), *ref = ot_backend_new("ref", NULL);
    ot_model *m = ot_model_new(be, 4);
    CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, 1), 0);
    ot_tensor *x = ot_zeros(ref, OT_SHAPE(3, 4), OT_F32);
    char site[256];
    int line = __LINE__ + 1;
    CHECK(ot_model_predict(m, x) == NULL);
    CHECK_ERR(OT_EBACKEND, TEST_SITE(site, line), "model_predict: x is on backend 'ref', the "
              "model on backend 'cpu'");
    ot_tensor_free(x);
    ot_model_free(m);
    ot_backend_free(ref);
    ot_backend_free(be);
}

/* A linear 3->2 layer (weights from seed) under MSE. */
static ot_model *linear_mse(ot_backend *be, uint64_t seed)
{
    ot_model *m = ot_model_new(be, 3);
    CHECK(m != NULL);
    CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, seed), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_MSE, NULL, NULL), 0);
    return m;
}

/* Adam in double over a linear 3->2 layer (w row-major (3, 2), then b)
 * under MSE, on rows [r, r + n) of x (8, 3) and y (8, 2): step t. */
static void ref_adam_step(double p[8], double mo[8], double v[8], const float *x, const float *y,
                          int r, int n, int64_t t)
{
    double g[8] = {0};
    for (int i = r; i < r + n; i++)
        for (int o = 0; o < 2; o++) {
            double out = p[6 + o];
            for (int k = 0; k < 3; k++) out += x[3 * i + k] * p[2 * k + o];
            double d = 2 * (out - y[2 * i + o]) / (2.0 * n);   /* d mean / d out */
            for (int k = 0; k < 3; k++) g[2 * k + o] += x[3 * i + k] * d;
            g[6 + o] += d;
        }
    double alpha = 0.1 * sqrt(1 - pow(0.999, (double)t)) / (1 - pow(0.9, (double)t));
    for (int j = 0; j < 8; j++) {
        mo[j] = 0.9 * mo[j] + 0.1 * g[j];
        v[j] = 0.999 * v[j] + 0.001 * g[j] * g[j];
        p[j] -= alpha * mo[j] / (sqrt(v[j]) + 1e-8);
    }
}

/* fit(batch 4) then fit(batch 2) rebuilds the training program; Adam's t
 * goes on (1, 2, then 3 to 6) with the moments, as a reference Adam in
 * double has it, also when ot_model_adam sets the same options between
 * the fits or after a rebuild for a new loss. The code before this fix
 * started each program at t = 1 over the old moments. */
TEST(model_adam_t_goes_on_across_fits)
{
    static const char *const names[] = {"ref", "cpu"};
    float hx[24], hy[16];
    uint64_t s = 11;
    for (int i = 0; i < 24; i++) hx[i] = (float)(next(&s) % 1000) / 500 - 1;
    for (int i = 0; i < 16; i++) hy[i] = (float)(next(&s) % 1000) / 250 - 2;
    for (int bi = 0; bi < 2; bi++) {
        for (int k = 0; k < 3; k++) {
            ot_backend *be = backend(names[bi]);
            ot_tensor *x = ot_array(be, OT_SHAPE(8, 3), OT_F32, hx);
            ot_tensor *y = ot_array(be, OT_SHAPE(8, 2), OT_F32, hy);
            ot_model *m = linear_mse(be, 4);
            CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.1}), 0);
            ot_tensor *p[2];
            float got[8];
            double want[8], mo[8] = {0}, v[8] = {0};
            CHECK_INT(ot_model_parameters(m, 2, p), 2);
            CHECK_INT(ot_get(p[0], got), 0);
            CHECK_INT(ot_get(p[1], got + 6), 0);
            for (int j = 0; j < 8; j++) want[j] = got[j];
            int64_t t = 1;
            for (int r = 0; r < 8; r += 4) ref_adam_step(want, mo, v, hx, hy, r, 4, t++);
            for (int r = 0; r < 8; r += 2) ref_adam_step(want, mo, v, hx, hy, r, 2, t++);
            CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .no_shuffle = true,
                                                           .quiet = true}, NULL), 0);
            if (k == 1) CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.1}), 0);
            if (k == 2) CHECK_INT(ot_model_loss(m, OT_LOSS_MSE, NULL, NULL), 0);
            CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 2, .no_shuffle = true,
                                                           .quiet = true}, NULL), 0);
            CHECK_INT(ot_get(p[0], got), 0);
            CHECK_INT(ot_get(p[1], got + 6), 0);
            for (int j = 0; j < 8; j++) CHECK_NEAR(got[j], want[j], 1e-5);
            ot_model_free(m);
            ot_tensor_free(x);
            ot_tensor_free(y);
            ot_backend_free(be);
        }
    }
}

/* A fit after ot_backend_free of the model's backend is an error of the
 * fit, at its caller, whether the program is run again (the same batch)
 * or made anew (another batch): the code before this fix named
 * program_run or program_new, calls the caller never made. */
TEST(model_fit_after_backend_free_names_the_fit)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_zeros(be, OT_SHAPE(8, 3), OT_F32), *y = ot_zeros(be, OT_SHAPE(8, 2), OT_F32);
    ot_model *m = linear_mse(be, 1);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .quiet = true}, NULL), 0);
    ot_backend_free(be);
    char site[256];
    for (int batch = 4; batch >= 2; batch -= 2) {
        int line = __LINE__ + 1;
        CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = batch, .quiet = true}, NULL),
                  OT_EBACKEND);
        CHECK_ERR(OT_EBACKEND, TEST_SITE(site, line), "model_fit: the model is on backend 'cpu', "
                  "which ot_backend_free has freed");
        CHECK(strstr(ot_errmsg(), "program") == NULL);
    }
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
}

/* Every allocation of a first fit failed in turn: the error is the fit's,
 * at its caller, whichever inner call (program_new, program_adam,
 * program_compile, autodiff_new, empty, ...) failed; the code before this
 * fix named that call, most often with no place. */
TEST(model_fit_allocation_failures_name_the_fit)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_zeros(be, OT_SHAPE(8, 3), OT_F32), *y = ot_zeros(be, OT_SHAPE(8, 2), OT_F32);
    char site[256], want[300];
    long n = 1;
    for (; n < 100000; n++) {
        ot_model *m = linear_mse(be, 1);
        ot__alloc_fail_at(n);
        int line = __LINE__ + 1;
        int rc = ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .quiet = true}, NULL);
        ot__alloc_fail_at(0);
        ot_model_free(m);
        if (rc == 0) break;
        snprintf(want, sizeof want, "%smodel_fit: ", TEST_SITE(site, line));
        const char *msg = ot_errmsg();   /* the fit's, named once */
        if (strncmp(msg, want, strlen(want)) != 0 || strstr(msg + strlen(want), "model_fit"))
            test__fail(__FILE__, __LINE__, "allocation %ld: \"%s\" is not the fit's", n, msg);
    }
    CHECK(n > 5 && n < 100000);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* One step of m's optimizer on x, y (4 rows, one batch). */
static void one_step(ot_model *m, ot_tensor *x, ot_tensor *y)
{
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .no_shuffle = true, .quiet = true},
                           NULL), 0);
}

/* b's parameters := a's. */
static void copy_params(ot_model *a, ot_model *b)
{
    ot_tensor *pa[2], *pb[2];
    CHECK_INT(ot_model_parameters(a, 2, pa), 2);
    CHECK_INT(ot_model_parameters(b, 2, pb), 2);
    for (int i = 0; i < 2; i++) CHECK_INT(ot_assign(pb[i], pa[i]), 0);
}

/* Whether a's and b's parameters agree. */
static void same_params(ot_model *a, ot_model *b)
{
    ot_tensor *pa[2], *pb[2];
    float ga[8], gb[8];
    CHECK_INT(ot_model_parameters(a, 2, pa), 2);
    CHECK_INT(ot_model_parameters(b, 2, pb), 2);
    CHECK_INT(ot_get(pa[0], ga), 0);
    CHECK_INT(ot_get(pa[1], ga + 6), 0);
    CHECK_INT(ot_get(pb[0], gb), 0);
    CHECK_INT(ot_get(pb[1], gb + 6), 0);
    for (int j = 0; j < 8; j++) CHECK_NEAR(ga[j], gb[j], 1e-6);
}

/* SGD's velocity and Adam's first moment share the model's m: a switch
 * between the two starts the new one's state afresh (the old code fed
 * Adam's moment to SGD as its velocity, and the velocity to Adam as its
 * moment: a probe). Adam -> SGD with momentum steps as plain SGD from a
 * zero velocity does; SGD -> Adam as a fresh Adam at t = 1 does. */
TEST(model_optimizer_switch_starts_state_afresh)
{
    const char *names[2] = {"ref", "cpu"};
    float xh[12], yh[8];
    for (int k = 0; k < 12; k++) xh[k] = (float)sin(k * 1.3 + 0.2);
    for (int k = 0; k < 8; k++) yh[k] = (float)cos(k * 0.7);
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(names[b]);
        ot_tensor *x = ot_array(be, OT_SHAPE(4, 3), OT_F32, xh);
        ot_tensor *y = ot_array(be, OT_SHAPE(4, 2), OT_F32, yh);
        ot_model *a = linear_mse(be, 5), *p = linear_mse(be, 5), *q = linear_mse(be, 5);
        CHECK_INT(ot_model_adam(a, &(ot_adam){.lr = 0.05}), 0);
        one_step(a, x, y);
        copy_params(a, p);
        CHECK_INT(ot_model_sgd(a, &(ot_sgd){.lr = 0.1, .momentum = 0.5}), 0);
        CHECK_INT(ot_model_sgd(p, &(ot_sgd){.lr = 0.1}), 0);
        one_step(a, x, y);
        one_step(p, x, y);
        same_params(a, p);
        copy_params(a, q);   /* a now holds a velocity */
        CHECK_INT(ot_model_adam(a, &(ot_adam){.lr = 0.05}), 0);
        CHECK_INT(ot_model_adam(q, &(ot_adam){.lr = 0.05}), 0);
        one_step(a, x, y);
        one_step(q, x, y);
        same_params(a, q);
        ot_model_free(a), ot_model_free(p), ot_model_free(q);
        ot_tensor_free(x), ot_tensor_free(y);
        ot_backend_free(be);
    }
}
