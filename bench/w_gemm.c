/*
 * w_gemm.c - the benchmark's GEMM side: the line naming the GEMM that
 * runs optree's dots and the cblas references (the bench's header), sgemm
 * through optree against cblas_sgemm (--gemm), and one epoch of a
 * 784-256-128-10 MLP on Fashion-MNIST with ot_model (--mlp DIR; PyTorch's
 * side is bench/mlp_torch.py, `make bench-mlp` runs both).
 *
 * The cblas references here and in W6, W10 and W11 call the same
 * process-wide OpenBLAS as optree, so they run on the core optree's first
 * cpu backend chose (src/cpu/blas_core.c): bench_gemm_line makes one
 * before any reference runs.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <cblas.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ot_explain's "gemm:" line for a dot on a fresh cpu backend (which, the
 * first in the process, settles the OpenBLAS core), without its indent. */
void bench_gemm_line(char *buf, size_t size)
{
    snprintf(buf, size, "unknown (%s)", "no cpu backend");
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    if (!be) return;
    ot_tensor *a = ot_full(be, OT_SHAPE(4, 4), OT_F32, 1.0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ot_pool *p = ot_pool_push();
    if (f && a) ot_explain(ot_dot(a, a), f);
    ot_pool_pop(p);
    if (f) fclose(f);
    const char *line = text ? strstr(text, "gemm: ") : NULL;
    if (line) snprintf(buf, size, "%.*s", (int)strcspn(line + 6, "\n"), line + 6);
    free(text);
    ot_tensor_free(a);
    ot_backend_free(be);
}

static void fill(float *p, size_t n, uint64_t seed)
{
    bench_fill_uniform(p, n, -1.0f, 1.0f, &seed);
}

/* optree's ot_dot (prebuilt, assigned) and cblas_sgemm at n^3 on one
 * thread, interleaved run after run (which goes first alternates, so that
 * neither always runs on a cache the other warmed); each one's median,
 * and the median of the runs' ratios, which drift on a shared machine
 * moves least. */
static void gemm_pair(ot_backend *be, int n, int runs)
{
    size_t nn = (size_t)n * (size_t)n;
    float *a = bench_xmalloc(nn * sizeof *a), *b = bench_xmalloc(nn * sizeof *b);
    float *c = bench_xmalloc(nn * sizeof *c);
    fill(a, nn, 1);
    fill(b, nn, 2);
    ot_tensor *ta = ot_array(be, OT_SHAPE(n, n), OT_F32, a);
    ot_tensor *tb = ot_array(be, OT_SHAPE(n, n), OT_F32, b);
    ot_tensor *tc = ot_empty(be, OT_SHAPE(n, n), OT_F32);
    ot_node *t = ta && tb && tc ? ot_dot(ta, tb) : NULL;   /* the default pool's */
    if (!t) bench_die("--gemm: %s", ot_errmsg());
    int calls = n <= 256 ? 50 : 3;
    double *to = bench_xmalloc(sizeof *to * (size_t)runs);
    double *tr = bench_xmalloc(sizeof *tr * (size_t)runs);
    double *q = bench_xmalloc(sizeof *q * (size_t)runs);
    for (int r = -1; r < runs; r++) {   /* r = -1: the warm-up; odd runs time cblas first */
        double secs[2];
        for (int side = 0; side < 2; side++) {
            bool blas = (side == 0) == (r % 2 != 0);
            double t0 = now();
            for (int k = 0; k < calls; k++)
                if (blas)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b,
                                n, 0, c, n);
                else if (ot_assign(tc, t) != 0)
                    bench_die("--gemm: %s", ot_errmsg());
            secs[blas] = (now() - t0) / calls;
        }
        if (r >= 0) {
            to[r] = secs[0];
            tr[r] = secs[1];
            q[r] = secs[1] / secs[0];
        }
    }
    double mo = bench_median(to, runs), mr = bench_median(tr, runs), flop = 2.0 * n * n * (double)n;
    printf("sgemm %d^3, 1 thread, medians of %d: optree %.3f ms (%.1f GFLOP/s), cblas_sgemm "
           "%.3f ms (%.1f GFLOP/s): optree at %.2fx cblas's speed (median of the runs' ratios)\n",
           n, runs, 1e3 * mo, flop / mo * 1e-9, 1e3 * mr, flop / mr * 1e-9, bench_median(q, runs));
    ot_tensor_free(ta);
    ot_tensor_free(tb);
    ot_tensor_free(tc);
    free(a);
    free(b);
    free(c);
    free(to);
    free(tr);
    free(q);
}

int bench_gemm(int runs)
{
    char line[512];
    bench_gemm_line(line, sizeof line);
    printf("gemm: %s\n", line);
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    openblas_set_num_threads(1);
    gemm_pair(be, 256, runs);
    gemm_pair(be, 1024, runs);
    ot_backend_free(be);
    return 0;
}

/* ---- the Fashion-MNIST MLP ----------------------------------------------- */

/* An IDX file of dir (gunzipped): its bytes past the header of `skip`. */
static unsigned char *idx_read(const char *dir, const char *name, size_t skip, size_t want)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    unsigned char *buf = bench_xmalloc(want);
    if (!f || fseek(f, (long)skip, SEEK_SET) != 0 || fread(buf, 1, want, f) != want)
        bench_die("--mlp: cannot read %zu bytes of %s", want, path);
    fclose(f);
    return buf;
}

enum { MLP_ROWS = 60000, MLP_IN = 784, MLP_CLASSES = 10 };

/* The model of bench/mlp_torch.py: 784-256-128-10, ReLU, softmax
 * cross-entropy, Adam (lr 1e-3), batch 128, shuffled, the whole training
 * set; each epoch timed by the wall clock around ot_model_fit. */
int bench_mlp(const char *dir, int epochs)
{
    unsigned char *px = idx_read(dir, "train-images-idx3-ubyte", 16, (size_t)MLP_ROWS * MLP_IN);
    unsigned char *lb = idx_read(dir, "train-labels-idx1-ubyte", 8, MLP_ROWS);
    float *x = bench_xmalloc(sizeof *x * (size_t)MLP_ROWS * MLP_IN);
    float *y = calloc((size_t)MLP_ROWS * MLP_CLASSES, sizeof *y);
    if (!y) bench_die("--mlp: out of memory");
    for (size_t i = 0; i < (size_t)MLP_ROWS * MLP_IN; i++) x[i] = (float)px[i] / 255.0f;
    for (size_t i = 0; i < MLP_ROWS; i++) y[i * MLP_CLASSES + lb[i]] = 1;
    char line[512];
    bench_gemm_line(line, sizeof line);
    printf("gemm: %s\n", line);
    openblas_set_num_threads(1);
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    ot_tensor *tx = ot_array(be, OT_SHAPE(MLP_ROWS, MLP_IN), OT_F32, x);
    ot_tensor *ty = ot_array(be, OT_SHAPE(MLP_ROWS, MLP_CLASSES), OT_F32, y);
    ot_model *m = ot_model_new(be, MLP_IN);
    int rc = m && tx && ty ? 0 : -1;
    static const int width[] = {256, 128, MLP_CLASSES};
    for (int i = 0; i < 3 && !rc; i++)
        rc = ot_model_linear(m, width[i], i < 2 ? OT_ACT_RELU : OT_ACT_NONE, (uint64_t)i + 1);
    if (!rc) rc = ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);
    if (!rc)
        rc = ot_model_adam(m, &(ot_adam){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                         .grad_scale = 1, .t = 1});
    for (int e = 0; e < epochs && !rc; e++) {
        ot_fit_result r = {0};
        double t0 = now();
        rc = ot_model_fit(m, tx, ty,
                          &(ot_fit_opts){.epochs = 1, .batch = 128, .seed = 42 + (uint64_t)e,
                                         .quiet = true},
                          &r);
        if (!rc)
            printf("optree epoch %d: %.3f s, loss %.4f, accuracy %.4f\n", e + 1, now() - t0,
                   r.loss, r.accuracy);
    }
    if (rc) bench_die("--mlp: %s", ot_errmsg());
    ot_model_free(m);
    ot_tensor_free(tx);
    ot_tensor_free(ty);
    ot_backend_free(be);
    free(px);
    free(lb);
    free(x);
    free(y);
    return 0;
}
