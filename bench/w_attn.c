/*
 * w_attn.c - the attention rows of issue 35 (bench --attn): W15, attention
 * forward and backward (one ot_assign_many of o, dq, dk, dv given do),
 * batch 4, 8 heads, head dim 64, causal, f32, one thread, at seq 256, 1024
 * and 4096 (--quick: not 4096), against PyTorch 1.13's plain softmax(q k^T s + mask) v with
 * autograd (bench/attn_torch.py, run from here in the same process tree).
 * Each side's peak extra memory is that of its first call: VmHWM after
 * resetting it (/proc/self/clear_refs), less VmRSS before, so inputs and
 * the library's code are not counted, outputs and temporaries are.
 * The machine may be shared: the ratio of medians is what to read.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <cblas.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 4, H = 8, D = 64, NROWS = 3 };
static const int SEQ[NROWS] = {256, 1024, 4096};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) v = atol(line + n);
    if (f) fclose(f);
    return v;
}

static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

/* PyTorch's median ms and peak MiB per row, -1 where it did not run. */
static void run_torch(int runs, int nrows, double ms[NROWS], double mib[NROWS])
{
    char cmd[512];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/attn_torch.py %d", runs);
    for (int i = 0; i < nrows; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %d,%d,%d,%d", B, H, SEQ[i], D);
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 2>/dev/null");
    FILE *p = popen(cmd, "r");
    for (int i = 0; i < NROWS; i++)
        if (i >= nrows || !p || fscanf(p, "%lf %lf", &ms[i], &mib[i]) != 2) ms[i] = mib[i] = -1;
    if (p) pclose(p);
}

/* One row: optree's median seconds, its first call's peak extra MiB and
 * the kernel line ot_explain gives the forward. */
static double time_row(ot_backend *be, int s, int runs, double *mib, char *algo, size_t size)
{
    uint64_t seed = 7;
    ot_shape sh = OT_SHAPE(B, H, s, D);
    ot_tensor *in[4], *out[4];
    for (int i = 0; i < 4; i++) in[i] = bench_rand_tensor(be, sh, &seed, "attn");
    for (int i = 0; i < 4; i++)
        out[i] = bench_rand_tensor(be, sh, &seed, "attn");   /* touched: not counted */
    ot_pool *pool = ot_pool_push();
    ot_node *o = ot_attention(in[0], in[1], in[2], .causal = true);
    ot_autodiff *ad = ot_autodiff_new(o, ot_tensor_node(in[3]));
    if (!ad) bench_die("attn: %s", ot_errmsg());
    ot_node *trees[4] = {o, ot_autodiff_grad(ad, in[0]), ot_autodiff_grad(ad, in[1]),
                         ot_autodiff_grad(ad, in[2])};
    ot_autodiff_free(ad);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ot_explain_many(4, out, trees, f);
    fclose(f);
    const char *a = text ? strstr(text, "(flash forward") : NULL;
    snprintf(algo, size, "%.*s", a ? (int)strcspn(a + 1, ")") : 0, a ? a + 1 : "");
    free(text);
    double *t = bench_xmalloc(sizeof *t * (size_t)runs);
    reset_peak();
    long rss = status_kib("VmRSS:");
    for (int k = -1; k < runs; k++) {   /* k = -1: the first call (plans, arenas) */
        double t0 = now();
        if (ot_assign_many(4, out, trees) != 0) bench_die("attn: %s", ot_errmsg());
        if (k == -1) *mib = (double)(status_kib("VmHWM:") - rss) / 1024;
        else t[k] = now() - t0;
    }
    double m = bench_median(t, runs);
    free(t);
    ot_pool_pop(pool);
    for (int i = 0; i < 4; i++) ot_tensor_free(in[i]), ot_tensor_free(out[i]);
    return m;
}

int bench_attn(int runs, bool quick, const char *out_dir)
{
    openblas_set_num_threads(1);
    int nrows = quick ? NROWS - 1 : NROWS;   /* --quick: no seq 4096 */
    double torch_ms[NROWS], torch_mib[NROWS];
    run_torch(runs, nrows, torch_ms, torch_mib);
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    char path[512];
    snprintf(path, sizeof path, "%s/attn.md", out_dir);
    FILE *md = fopen(path, "w");
    FILE *outs[2] = {stdout, md};
    for (int o = 0; o < 2; o++)
        if (outs[o])
            fprintf(outs[o], "\nAttention (issue 35) W15: forward + backward, batch %d, %d heads, "
                             "head dim %d, causal, f32, 1 thread; PyTorch %s, medians of %d "
                             "(the machine may be loaded: read the ratios)\n\n"
                             "| seq | optree ms | PyTorch ms | optree/PyTorch | target | verdict "
                             "| optree peak extra MiB | PyTorch peak extra MiB | kernel |\n"
                             "|---|---|---|---|---|---|---|---|---|\n",
                    B, H, D, torch_ms[0] > 0 ? "1.13 plain (bench/attn_torch.py)" : "not importable",
                    runs);
    for (int i = 0; i < nrows; i++) {
        fprintf(stderr, "bench: W15 seq %d ...\n", SEQ[i]);
        double mib = 0;
        char algo[256], tms[32] = "n/a", ratio[32] = "n/a", tmib[32] = "n/a";
        double s = time_row(be, SEQ[i], runs, &mib, algo, sizeof algo);
        const char *verdict = "no reference";
        if (torch_ms[i] > 0) {
            double q = 1e3 * s / torch_ms[i];
            snprintf(tms, sizeof tms, "%.1f", torch_ms[i]);
            snprintf(ratio, sizeof ratio, "%.2fx", q);
            snprintf(tmib, sizeof tmib, "%.0f", torch_mib[i]);
            verdict = q <= 1.0 ? "ok" : "MISS";
        }
        for (int o = 0; o < 2; o++)
            if (outs[o])
                fprintf(outs[o], "| %d | %.1f | %s | %s | 1.0x | %s | %.0f | %s | %s |\n", SEQ[i],
                        1e3 * s, tms, ratio, verdict, mib, tmib, algo);
    }
    if (md) fclose(md);
    ot_backend_free(be);
    return 0;
}
