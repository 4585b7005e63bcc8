/*
 * program.c - a training step written once as a program, run per batch.
 *
 * The data: 4 classes of noisy 2-D points around the corners of a square
 * (made here from a fixed seed). The model: an MLP 2 -> 32 -> 4 with ReLU,
 * trained by SGD with momentum on the mean cross-entropy.
 *
 * What it shows:
 *   - placeholders for the batch, x and its one-hot labels y, whose first
 *     dim is a symbol ("batch"): the last batch of an epoch is smaller, and
 *     the program is specialised to that size once, then reused;
 *   - variables with initializers (uniform weights, zero biases), listed by
 *     ot_program_variables;
 *   - three steps in order: the loss into a scalar, the gradients into
 *     their tensors (ot_program_backprop), the update (ot_program_sgd),
 *     which reads the gradients the step before wrote;
 *   - ot_program_compile once, then ot_program_run per batch, binding host
 *     memory in place (no copy, no tree built, no plan looked up);
 *   - ot_program_stats_get: the one arena shared by every step, against
 *     what the steps would keep each on its own (--explain prints each
 *     step's plan too);
 *   - ot_sequential, the same ordering without a program: the accuracy is
 *     computed as logits into z, then argmax of z, in one call.
 *
 * It prints the mean loss per epoch and the accuracy at the end, and exits
 * non-zero unless the accuracy is above 90% (OT_EXAMPLE_SMALL=1 trains for
 * one epoch on fewer points and skips that requirement). Uses only
 * include/optree.h and frees everything it creates.
 */
#include <optree.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 2, HID = 32, CLS = 4, BATCH = 64 };

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return (double)(*s >> 11) * 0x1p-53;
}

/* n points: class k around corner k of the square [-1, 1]^2. */
static void make_data(float *x, float *y, int *label, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        int k = (int)(urand(&seed) * CLS) % CLS;
        label[i] = k;
        x[i * IN] = (float)((k & 1 ? 1 : -1) + 1.8 * (urand(&seed) - 0.5));
        x[i * IN + 1] = (float)((k & 2 ? 1 : -1) + 1.8 * (urand(&seed) - 0.5));
        for (int c = 0; c < CLS; c++) y[i * CLS + c] = c == k;
    }
}

static int fail(const char *what)
{
    fprintf(stderr, "program: %s: %s\n", what, ot_errmsg());
    return 1;
}

/* The model's logits for x. */
static ot_node *logits(ot_tensor *x, ot_tensor *const w[4])
{
    ot_node *h = ot_relu(ot_add(ot_dot(x, w[0]), w[1]));
    return ot_add(ot_dot(h, w[2]), w[3]);
}

/* The program: loss, gradients, update. */
static int build(ot_program *p, ot_tensor *w[4], ot_tensor *g[4], ot_tensor *vel[4],
                 ot_tensor *loss)
{
    int batch = ot_program_symbol(p, "batch", BATCH);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(batch), IN), OT_F32);
    ot_tensor *y = ot_program_placeholder(p, "y", OT_SHAPE(OT_SYM(batch), CLS), OT_F32);
    double s1 = 1 / sqrt(IN), s2 = 1 / sqrt(HID);
    w[0] = ot_program_variable(p, "W1", OT_SHAPE(IN, HID), OT_F32, OT_INIT_UNIFORM(-s1, s1, 1));
    w[1] = ot_program_variable(p, "b1", OT_SHAPE(HID), OT_F32, OT_INIT_ZERO);
    w[2] = ot_program_variable(p, "W2", OT_SHAPE(HID, CLS), OT_F32, OT_INIT_UNIFORM(-s2, s2, 2));
    w[3] = ot_program_variable(p, "b2", OT_SHAPE(CLS), OT_F32, OT_INIT_ZERO);
    if (!x || !y || !w[0] || !w[1] || !w[2] || !w[3]) return -1;
    ot_pool *pool = ot_pool_push();
    ot_node *l = ot_mean(ot_cross_entropy(ot_softmax(logits(x, w), .axis = 1), y, .axis = 1));
    ot_node *gn[4];
    for (int i = 0; i < 4; i++) gn[i] = ot_tensor_node(g[i]);
    int rc = ot_program_assign(p, loss, l);
    if (!rc) rc = ot_program_backprop(p, l, 4, w, g);
    if (!rc) rc = ot_program_sgd(p, &(ot_sgd){.lr = 0.1, .momentum = 0.9}, 4, w, gn, vel);
    ot_pool_pop(pool);
    return rc ? rc : ot_program_compile(p);
}

/* The share of points whose largest logit is their class, in two steps of
 * one ot_sequential call: the logits into z, then the argmax of z. Both
 * trees are built before the call; the second reads z as the first step
 * wrote it (ngraph's control dependencies, without a program). */
static double accuracy(ot_backend *be, ot_tensor *const w[4], const float *x, const int *label, int n)
{
    ot_tensor *tx = ot_array(be, OT_SHAPE(n, IN), OT_F32, x);
    ot_tensor *z = ot_empty(be, OT_SHAPE(n, CLS), OT_F32);
    ot_tensor *pred = ot_empty(be, OT_SHAPE(n), OT_I32);
    ot_pool *pool = ot_pool_push();
    int rc = -1;
    if (tx && z && pred) {
        ot_node *zt = logits(tx, w), *pt = ot_argmax(z, 1);
        ot_step steps[2] = {{1, &z, &zt}, {1, &pred, &pt}};
        rc = ot_sequential(2, steps);
    }
    ot_pool_pop(pool);
    int32_t *hp = malloc(sizeof *hp * (size_t)n);
    int right = 0;
    if (!rc && hp && ot_get(pred, hp) == 0)
        for (int i = 0; i < n; i++) right += hp[i] == label[i];
    free(hp);
    ot_tensor_free(tx);
    ot_tensor_free(z);
    ot_tensor_free(pred);
    return rc ? -1 : (double)right / n;
}

int main(int argc, char **argv)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    bool small = small_env && *small_env && strcmp(small_env, "0") != 0;
    int n = small ? 200 : 3000, epochs = small ? 1 : 8;   /* n % BATCH != 0 */
    float *x = malloc(sizeof *x * (size_t)n * IN), *y = malloc(sizeof *y * (size_t)n * CLS);
    int *label = malloc(sizeof *label * (size_t)n);
    ot_backend *be = ot_backend_new("cpu", NULL);
    if (!x || !y || !label || !be) return fail("setup");
    make_data(x, y, label, n, 42);

    ot_tensor *w[4], *g[4], *vel[4];
    const ot_shape shapes[4] = {OT_SHAPE(IN, HID), OT_SHAPE(HID), OT_SHAPE(HID, CLS), OT_SHAPE(CLS)};
    for (int i = 0; i < 4; i++) {
        g[i] = ot_zeros(be, shapes[i], OT_F32);
        vel[i] = ot_zeros(be, shapes[i], OT_F32);
    }
    ot_tensor *loss = ot_zeros(be, OT_SHAPE(), OT_F32);
    ot_program *p = ot_program_new(be);
    int status = 0;
    if (!p || build(p, w, g, vel, loss) != 0) status = fail("building the program");
    for (int e = 0; e < epochs && !status; e++) {
        double sum = 0;
        int batches = 0;
        for (int at = 0; at < n && !status; at += BATCH, batches++) {
            int b = n - at < BATCH ? n - at : BATCH;
            size_t xb = sizeof *x * (size_t)(b * IN), yb = sizeof *y * (size_t)(b * CLS);
            ot_bind bind[2] = {OT_BIND_DATA_SHAPE("x", x + (size_t)at * IN, OT_SHAPE(b, IN), xb),
                               OT_BIND_DATA_SHAPE("y", y + (size_t)at * CLS, OT_SHAPE(b, CLS), yb)};
            float l;
            if (ot_program_run(p, 2, bind) != 0 || ot_get(loss, &l) != 0) status = fail("run");
            else sum += l;
        }
        if (!status) printf("epoch %d: mean loss %.4f\n", e + 1, sum / batches);
    }
    ot_tensor *vars[4];
    ot_program_stats st;
    if (!status && (ot_program_variables(p, 4, vars) != 4 || ot_program_stats_get(p, &st) != 0))
        status = fail("stats");
    if (!status) {
        printf("%d variables (%s, %s, %s, %s); %d steps, %d kernels per run\n", 4,
               ot_tensor_name(vars[0]), ot_tensor_name(vars[1]), ot_tensor_name(vars[2]),
               ot_tensor_name(vars[3]), st.steps, st.kernels);
        printf("%d batch sizes compiled; one arena of %zu bytes (the steps' own: %zu)\n",
               st.specializations, st.arena_bytes, st.separate_bytes);
        if (argc > 1 && strcmp(argv[1], "--explain") == 0 && ot_program_explain(p, stdout) != 0)
            status = fail("explain");
    }
    double acc = status ? -1 : accuracy(be, w, x, label, n);
    if (!status) printf("accuracy %.1f%%\n", 100 * acc);
    if (!status && !small && !(acc > 0.9)) status = 1;
    ot_program_free(p);
    for (int i = 0; i < 4; i++) {
        ot_tensor_free(g[i]);
        ot_tensor_free(vel[i]);
    }
    ot_tensor_free(loss);
    ot_backend_free(be);
    ot_pool_drain();
    free(x);
    free(y);
    free(label);
    return status;
}
