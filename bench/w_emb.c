/*
 * w_emb.c - W17 of issue 35 (bench --only W17, or --emb): an embedding
 * table's training step, forward + backward + SGD, f32, one thread: y =
 * embedding(w, ids) (one assignment, as a model's forward), then w = w -
 * lr * scatter_add(dy, ids) (one assignment: the table's gradient is the
 * rows' gradient dy added at the ids, and the step writes the table in
 * place), for a V x 512 table and 8,192 ids uniform in [0, R): V = R =
 * 50,000; V = R = 500,000 (--quick: 100,000); and V = 500,000 with the
 * first table's R = 50,000 (the same rows touched in a table 10x the
 * size: what the table's size alone costs). The fused cpu backend adds dy into
 * the rows looked up alone (the in-place INDEX kernel: "in place: indexed
 * rows only"); OT_FUSION=0 builds the dense V x 512 gradient first, as
 * PyTorch's default dense nn.Embedding does. What the row shows: the fused
 * step's time does not grow with V (the ratio of the two tables' medians,
 * measured in this one process), against PyTorch 1.13's
 * nn.Embedding(sparse=True) + SGD (bench/emb_torch.py, run from here
 * first) and its dense one. The machine may be shared: read the ratios.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { IDS = 8192, DIM = 512, NROWS = 3 };
static const int64_t ROWS[NROWS] = {50000, 500000, 500000}, REACH[NROWS] = {50000, 500000, 50000};
static const int64_t QUICK_ROWS = 100000;
static const double LR = 1e-4;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* PyTorch's median ms per table, sparse and dense; -1 where it did not run. */
static void run_torch(int runs, const int64_t *rows, const int64_t *reach, double sparse[NROWS],
                      double dense[NROWS])
{
    char cmd[512];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/emb_torch.py %d %d %d", runs,
                       IDS, DIM);
    for (int i = 0; i < NROWS; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %lld,%lld", (long long)rows[i],
                        (long long)reach[i]);
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 2>/dev/null");
    FILE *p = popen(cmd, "r");
    for (int i = 0; i < NROWS; i++)
        if (!p || fscanf(p, "%lf %lf", &sparse[i], &dense[i]) != 2) sparse[i] = dense[i] = -1;
    if (p) pclose(p);
}

/* The median seconds of a step on backend be for a table of `rows` rows
 * looked up at ids in [0, reach); *inplace: whether the update's plan runs
 * in place. */
static double time_step(ot_backend *be, int64_t rows, int64_t reach, int runs, bool *inplace)
{
    uint64_t seed = 17;
    ot_tensor *w = bench_rand_tensor(be, OT_SHAPE(rows, DIM), &seed, "W17");
    ot_tensor *dy = bench_rand_tensor(be, OT_SHAPE(IDS, DIM), &seed, "W17");
    ot_tensor *y = ot_empty(be, OT_SHAPE(IDS, DIM), OT_F32);
    int32_t *h = bench_xmalloc(sizeof *h * IDS);
    for (int j = 0; j < IDS; j++) h[j] = (int32_t)(bench_rand(&seed) % (uint64_t)reach);
    ot_tensor *ids = ot_array(be, OT_SHAPE(IDS), OT_I32, h);
    free(h);
    if (!y || !ids) bench_die("W17: %s", ot_errmsg());
    ot_pool *pool = ot_pool_push();
    ot_node *fwd = ot_embedding(w, ids);
    ot_node *upd = ot_sub(w, ot_mul(LR, ot_scatter_add(dy, ids, 0, rows)));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) ot_explain_many(1, &w, &upd, f), fclose(f);
    *inplace = text && strstr(text, "in place: indexed rows only");
    free(text);
    double *t = bench_xmalloc(sizeof *t * (size_t)runs);
    for (int k = -1; k < runs; k++) {   /* k = -1: the first call (plans) */
        double t0 = now();
        if (ot_assign(y, fwd) != 0 || ot_assign(w, upd) != 0) bench_die("W17: %s", ot_errmsg());
        if (k >= 0) t[k] = now() - t0;
    }
    double m = bench_median(t, runs);
    free(t);
    ot_pool_pop(pool);
    ot_tensor_free(w);
    ot_tensor_free(dy);
    ot_tensor_free(y);
    ot_tensor_free(ids);
    return m;
}

static void put(FILE *const outs[2], const char *fmt, const char *a, const char *b)
{
    for (int o = 0; o < 2; o++)
        if (outs[o]) fprintf(outs[o], fmt, a, b);
}

int bench_emb(int runs, bool quick, const char *out_dir)
{
    int64_t rows[NROWS] = {ROWS[0], quick ? QUICK_ROWS : ROWS[1], quick ? QUICK_ROWS : ROWS[2]};
    int64_t reach[NROWS] = {REACH[0], quick ? QUICK_ROWS : REACH[1], REACH[2]};
    double ts[NROWS], td[NROWS], fused[NROWS], dense[NROWS];
    bool inplace[NROWS], dense_inplace;
    run_torch(runs, rows, reach, ts, td);
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    ot_backend *unf = bench_backend("cpu", 1, OT_FUSION_OFF);
    for (int i = 0; i < NROWS; i++) {
        fprintf(stderr, "bench: W17 table %lld x %d, ids < %lld ...\n", (long long)rows[i], DIM,
                (long long)reach[i]);
        fused[i] = time_step(be, rows[i], reach[i], runs, &inplace[i]);
        dense[i] = time_step(unf, rows[i], reach[i], runs, &dense_inplace);
    }
    ot_backend_free(be);
    ot_backend_free(unf);
    char path[512];
    snprintf(path, sizeof path, "%s/emb.md", out_dir);
    FILE *md = fopen(path, "w");
    FILE *outs[2] = {stdout, md};
    char head[256];
    snprintf(head, sizeof head, "%d ids, %d columns, f32, 1 thread, medians of %d", IDS, DIM,
             runs);
    put(outs, "\nEmbedding (issue 35) W17: forward + backward + SGD step, %s; PyTorch %s "
              "(the machine may be loaded: read the ratios)\n\n"
              "| table rows | ids in | optree ms | OT_FUSION=0 ms | PyTorch sparse ms | PyTorch dense ms "
              "| optree/PyTorch sparse | in place |\n|---|---|---|---|---|---|---|---|\n",
        head, ts[0] > 0 ? "1.13 nn.Embedding + SGD (bench/emb_torch.py)" : "not importable");
    for (int i = 0; i < NROWS; i++) {
        char line[512], tq[32] = "n/a";
        if (ts[i] > 0) snprintf(tq, sizeof tq, "%.2fx", 1e3 * fused[i] / ts[i]);
        snprintf(line, sizeof line, "| %lld | [0, %lld) | %.2f | %.2f | %.2f | %.2f | %s | %s |\n",
                 (long long)rows[i], (long long)reach[i], 1e3 * fused[i], 1e3 * dense[i], ts[i], td[i], tq,
                 inplace[i] ? "yes" : "no");
        put(outs, "%s%s", line, "");
    }
    for (int i = 1; i < NROWS; i++) {
        char a[160], b[160] = "";
        snprintf(a, sizeof a, "\nTime at %lld rows, ids < %lld, over time at 50000: %.2fx (optree), "
                 "%.2fx (OT_FUSION=0)", (long long)rows[i], (long long)reach[i],
                 fused[i] / fused[0], dense[i] / dense[0]);
        if (ts[0] > 0 && td[0] > 0)
            snprintf(b, sizeof b, ", %.2fx (PyTorch sparse), %.2fx (PyTorch dense)",
                     ts[i] / ts[0], td[i] / td[0]);
        put(outs, "%s%s", a, b);
    }
    put(outs, "%s%s\n", "\n", "");
    if (md) fclose(md);
    return inplace[0] && inplace[1] && inplace[2] ? 0 : 1;
}
