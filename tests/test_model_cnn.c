/*
 * test_model_cnn.c - ot_model's image layers (src/front/model_cnn.c): the
 * input shape, conv and pooling layers' output shapes and parameters, their
 * errors at the adding call, a small conv network that learns (loss falls)
 * on synthetic images in well under a second, predict against the forward
 * tree written by hand, and the parameters' round trip through .npz.
 */
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { IMG = 8, NIMG = 256, CLS = 2 };

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* 8x8 images, one channel: a vertical bar (class 0) or a horizontal bar
 * (class 1) at a random place, over noise; one-hot targets. */
static void bars(ot_backend *be, ot_tensor **x, ot_tensor **y)
{
    static float hx[NIMG * IMG * IMG], hy[NIMG * CLS];
    uint64_t s = 11;
    memset(hy, 0, sizeof hy);
    for (int r = 0; r < NIMG; r++) {
        int c = (int)(next(&s) % CLS), at = 1 + (int)(next(&s) % (IMG - 2));
        float *img = hx + r * IMG * IMG;
        for (int i = 0; i < IMG * IMG; i++) img[i] = 0.3f * (float)(next(&s) % 1000) / 1000;
        for (int k = 0; k < IMG; k++) img[c ? at * IMG + k : k * IMG + at] += 1;
        hy[r * CLS + c] = 1;
    }
    *x = ot_array(be, OT_SHAPE(NIMG, IMG * IMG), OT_F32, hx);
    *y = ot_array(be, OT_SHAPE(NIMG, CLS), OT_F32, hy);
}

/* conv(4, 3x3, same)-BN-ReLU-max pool 2 - conv(4, 3x3, pad 1)-ReLU - avg
 * pool 2 - linear(2) over 8x8 images: (4, 8, 8), (4, 4, 4), (4, 2, 2). */
static ot_model *small_cnn(ot_backend *be)
{
    ot_model *m = ot_model_new(be, IMG * IMG);
    CHECK(m != NULL);
    CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){1, IMG, IMG}), 0);
    CHECK_INT(ot_model_conv(m, 4, 3, OT_ACT_NONE, 1, .padding = OT_PAD_SAME), 0);
    CHECK_INT(ot_model_batch_norm(m, OT_ACT_RELU, 0.1, 1e-5), 0);
    CHECK_INT(ot_model_max_pool(m, .kernel = {2}), 0);
    CHECK_INT(ot_model_conv(m, 4, 3, OT_ACT_RELU, 2, .pad = 1), 0);
    CHECK_INT(ot_model_avg_pool(m, .kernel = {2}, .stride = {2}), 0);
    CHECK_INT(ot_model_linear(m, CLS, OT_ACT_NONE, 3), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    CHECK_INT(ot_model_adam(m, &(ot_adam){.lr = 0.01}), 0);
    return m;
}

static void check_shape(const ot_tensor *t, ot_shape want)
{
    ot_shape s = ot_tensor_shape(t);
    CHECK_INT(s.ndim, want.ndim);
    for (int d = 0; d < want.ndim && d < s.ndim; d++) CHECK_INT(s.dims[d], want.dims[d]);
}

TEST(model_cnn_layer_shapes_and_parameters)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_model *m = small_cnn(be);
    ot_tensor *p[8];
    CHECK_INT(ot_model_parameters(m, 8, p), 8);
    check_shape(p[0], OT_SHAPE(4, 1, 3, 3));   /* conv 1 */
    check_shape(p[1], OT_SHAPE(4));
    check_shape(p[2], OT_SHAPE(4));            /* batch norm: per channel */
    check_shape(p[4], OT_SHAPE(4, 4, 3, 3));   /* conv 2 */
    check_shape(p[6], OT_SHAPE(4 * 2 * 2, CLS));   /* flattened (4, 2, 2) */
    check_shape(p[7], OT_SHAPE(CLS));
    ot_tensor *x = ot_zeros(be, OT_SHAPE(3, 1, IMG, IMG), OT_F32);
    ot_tensor *out = ot_model_predict(m, x);   /* x in the input shape */
    CHECK(out != NULL);
    check_shape(out, OT_SHAPE(3, CLS));
    ot_tensor_free(out);
    ot_tensor_free(x);
    ot_model_free(m);
    ot_backend_free(be);
}

TEST(model_cnn_errors_at_the_adding_call)
{
    char at[128];
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_model *m = ot_model_new(be, 64);
    int line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 4, 3, OT_ACT_NONE, 1), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_conv", "shape (64,)", "ot_model_input_shape");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_max_pool(m, .kernel = {2}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_max_pool", "shape (64,)");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){2, 4, 4}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_input_shape", "(2,4,4)", "64 inputs");
    CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){4, 4, 4}), 0);
    line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 8, 3, OT_ACT_NONE, 1, .groups = 3), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "conv");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 8, 5, OT_ACT_NONE, 1), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "conv");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 0, 3, OT_ACT_NONE, 1), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "model_conv", "out_channels and kernel");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 8, 3, OT_ACT_NONE, 1, .stride = {-1}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "conv");
    line = __LINE__ + 1;
    CHECK(ot_model_avg_pool(m, .kernel = {5}) < 0);
    CHECK_ERR(ot_errcode(), TEST_SITE(at, line), "avg_pool");
    line = __LINE__ + 1;
    CHECK(ot_model_max_pool(m) < 0);   /* no kernel */
    CHECK_ERR(ot_errcode(), TEST_SITE(at, line), "max_pool");
    ot_tensor *p[1];
    CHECK_INT(ot_model_parameters(m, 1, p), 0);   /* nothing was added */
    CHECK_INT(ot_model_linear(m, 3, OT_ACT_NONE, 1), 0);
    line = __LINE__ + 1;
    CHECK_INT(ot_model_input_shape(m, 1, (int64_t[]){64}), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, TEST_SITE(at, line), "model_input_shape", "before any layer");
    line = __LINE__ + 1;
    CHECK_INT(ot_model_conv(m, 4, 3, OT_ACT_NONE, 1), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_conv", "shape (3,)");
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 4, 4, 5), OT_F32);
    line = __LINE__ + 1;
    CHECK(ot_model_predict(m, x) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "model_predict", "(rows, 64) or (rows, 4, 4, 4)");
    ot_tensor_free(x);
    ot_model_free(m);
    ot_backend_free(be);
}

/* The loss of the model on (x, y), by predict. */
static double ce_loss(const ot_model *m, ot_tensor *x, ot_tensor *y)
{
    ot_tensor *out = ot_model_predict(m, x);
    CHECK(out != NULL);
    ot_tensor *l = ot_eval(ot_mean(ot_cross_entropy(ot_softmax(out, .axis = 1), y, .axis = 1)));
    float v = NAN;
    CHECK(l != NULL && ot_get(l, &v) == 0);
    ot_tensor_free(l);
    ot_tensor_free(out);
    return v;
}

TEST(model_cnn_trains_and_round_trips)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x, *y;
    bars(be, &x, &y);
    ot_model *m = small_cnn(be);
    double before = ce_loss(m, x, y);
    ot_fit_result r;
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 4, .batch = 32, .seed = 1,
                                                   .quiet = true}, &r), 0);
    double after = ce_loss(m, x, y);
    CHECK(after < 0.5 * before);
    CHECK(r.accuracy > 0.9);
    /* save, scramble by more training, load: predict as before, bit for bit */
    char path[] = "/tmp/ot_cnn_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_INT(ot_model_save(m, path), 0);
    ot_tensor *p0 = ot_model_predict(m, x);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 1, .batch = 32, .quiet = true}, NULL), 0);
    CHECK_INT(ot_model_load(m, path), 0);
    ot_tensor *p1 = ot_model_predict(m, x);
    static float h0[NIMG * CLS], h1[NIMG * CLS];
    CHECK(p0 && p1 && ot_get(p0, h0) == 0 && ot_get(p1, h1) == 0);
    CHECK(memcmp(h0, h1, sizeof h0) == 0);
    /* a model of another shape refuses the file, naming the entry */
    ot_model *other = ot_model_new(be, IMG * IMG);
    CHECK_INT(ot_model_input_shape(other, 3, (int64_t[]){1, IMG, IMG}), 0);
    CHECK_INT(ot_model_conv(other, 5, 3, OT_ACT_NONE, 1, .padding = OT_PAD_SAME), 0);
    CHECK(ot_model_load(other, path) < 0);
    remove(path);
    ot_model_free(other);
    ot_tensor_free(p0);
    ot_tensor_free(p1);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* predict is the forward tree as a user writes it with ot_conv, ot_max_pool,
 * a reshape and ot_dot, bit for bit (the same trees), at rows in one chunk. */
TEST(model_cnn_predict_is_the_forward_tree)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_tensor *x, *y;
    bars(be, &x, &y);
    ot_model *m = ot_model_new(be, IMG * IMG);
    CHECK_INT(ot_model_input_shape(m, 3, (int64_t[]){1, IMG, IMG}), 0);
    CHECK_INT(ot_model_conv(m, 3, 3, OT_ACT_TANH, 5, .stride = {1}, .pad = 1), 0);
    CHECK_INT(ot_model_max_pool(m, .kernel = {2}), 0);
    CHECK_INT(ot_model_linear(m, CLS, OT_ACT_NONE, 6), 0);
    ot_tensor *p[4];
    CHECK_INT(ot_model_parameters(m, 4, p), 4);
    CHECK_INT(ot_assign(p[1], ot_rand(OT_SHAPE(3), .seed = 2)), 0);   /* a nonzero bias */
    ot_tensor *got = ot_model_predict(m, x);
    ot_node *h = ot_reshape_node(x, OT_SHAPE(NIMG, 1, IMG, IMG));
    h = ot_tanh(ot_add(ot_conv(h, p[0], .pad = 1), ot_reshape_node(p[1], OT_SHAPE(3, 1, 1))));
    h = ot_reshape_node(ot_max_pool(h, .kernel = {2}), OT_SHAPE(NIMG, -1));
    ot_tensor *want = ot_eval(ot_add(ot_dot(h, p[2]), p[3]));
    static float a[NIMG * CLS], b[NIMG * CLS];
    CHECK(got && want && ot_get(got, a) == 0 && ot_get(want, b) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    ot_tensor_free(got);
    ot_tensor_free(want);
    ot_model_free(m);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}
