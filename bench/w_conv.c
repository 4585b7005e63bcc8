/*
 * w_conv.c - the convolution rows of issue 34 (bench --conv, and a full
 * run's last table): W12, 3x3 conv forward at the four ResNet-18 stage
 * shapes (batch 8, stride 1, pad 1, f32); W13, the same layers' backward
 * (input and weight gradients, one ot_assign_many); and a 1x1, a depthwise
 * 3x3 (MobileNet shapes), a stride-2 3x3 forward and a 3x3 forward with
 * its bias and ReLU (fused into the conv as its epilogue). The reference is
 * PyTorch (bench/conv_torch.py, 1 thread) run from here in the same
 * process tree; without PyTorch the rows say so and are not misses.
 *
 * Each row reports optree's median time, its GFLOP/s and their share of
 * this core's FMA peak (measured), the ratio to PyTorch and the algorithm and im2col tile that
 * ot_explain names. Both sides run on one thread; the machine may be
 * shared, so the ratio of medians is what to read.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <cblas.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct conv_row {
    const char *id, *label;
    int n, c, h, w, o, k, s, p, g;
    bool back;
    bool epi;   /* relu(conv + bias) */
} conv_row;

static const conv_row ROWS[] = {
    {"W12", "3x3 conv fwd, 64ch 56x56", 8, 64, 56, 56, 64, 3, 1, 1, 1, false, false},
    {"W12", "3x3 conv fwd, 128ch 28x28", 8, 128, 28, 28, 128, 3, 1, 1, 1, false, false},
    {"W12", "3x3 conv fwd, 256ch 14x14", 8, 256, 14, 14, 256, 3, 1, 1, 1, false, false},
    {"W12", "3x3 conv fwd, 512ch 7x7", 8, 512, 7, 7, 512, 3, 1, 1, 1, false, false},
    {"W13", "3x3 conv bwd (dx, dw), 64ch 56x56", 8, 64, 56, 56, 64, 3, 1, 1, 1, true, false},
    {"W13", "3x3 conv bwd (dx, dw), 128ch 28x28", 8, 128, 28, 28, 128, 3, 1, 1, 1, true, false},
    {"W13", "3x3 conv bwd (dx, dw), 256ch 14x14", 8, 256, 14, 14, 256, 3, 1, 1, 1, true, false},
    {"W13", "3x3 conv bwd (dx, dw), 512ch 7x7", 8, 512, 7, 7, 512, 3, 1, 1, 1, true, false},
    {"C1", "1x1 conv fwd, 256ch 14x14", 8, 256, 14, 14, 256, 1, 1, 0, 1, false, false},
    {"Cdw", "depthwise 3x3 fwd, 32ch 112x112", 8, 32, 112, 112, 32, 3, 1, 1, 32, false, false},
    {"Cdw", "depthwise 3x3 fwd, 256ch 28x28", 8, 256, 28, 28, 256, 3, 1, 1, 256, false, false},
    {"Cs2", "3x3 conv fwd stride 2, 64->128ch 56x56", 8, 64, 56, 56, 128, 3, 2, 1, 1, false, false},
    {"Cbr", "3x3 conv+bias+relu fwd, 64ch 56x56", 8, 64, 56, 56, 64, 3, 1, 1, 1, false, true},
};
enum { NROWS = (int)(sizeof ROWS / sizeof ROWS[0]) };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int out_size(const conv_row *r) { return (r->h + 2 * r->p - r->k) / r->s + 1; }

/* Multiply-adds times two of one call (a backward is two products). */
static double flops(const conv_row *r)
{
    int ho = out_size(r);
    double f = 2.0 * r->n * r->o * (r->c / r->g) * r->k * r->k * ho * ho;
    return r->back ? 2 * f : f;
}

/* ---- the FMA peak ------------------------------------------------------- */

/* One core's nominal f32 FMA rate: the clock /proc/cpuinfo gives (a VM
 * shows its nominal one) times the vector lanes, 2 flops per FMA and 2 FMA
 * ports (an assumption: Xeons from Skylake-SP Gold on have two). 0:
 * unknown. */
static double nominal_peak(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0 && sscanf(strchr(line, ':') + 1, "%lf", &mhz) == 1)
            break;
    if (f) fclose(f);
    int lanes = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx2") ? 8 : 4;
    return mhz * 1e-3 * lanes * 2 * 2;
}

/* One core's f32 FMA peak as the library measures it (ot_explain's gemm
 * line: independent FMA chains on the widest vectors, the best of short
 * runs), *how "measured"; else the nominal rate, *how "nominal". The
 * nominal clock misleads: on a Zen 5 VM it gave 134 GFLOP/s where the
 * measurement gives 234, and rows ran at 184% of it. */
static double fma_peak(const char **how)
{
    char gemm[512];
    bench_gemm_line(gemm, sizeof gemm);
    const char *at = strstr(gemm, "% of the FMA peak (");
    double peak = 0;
    if (at && sscanf(at + strlen("% of the FMA peak ("), "%lf", &peak) == 1 && peak > 0) {
        *how = "measured";
        return peak;
    }
    *how = "nominal";
    return nominal_peak();
}

/* ---- PyTorch ------------------------------------------------------------- */

/* Runs bench/conv_torch.py on every row: ms[i] its median, -1 where
 * PyTorch did not run. */
static void run_torch(int runs, double ms[NROWS])
{
    char cmd[2048];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/conv_torch.py %d", runs);
    for (int i = 0; i < NROWS; i++) {
        const conv_row *r = &ROWS[i];
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %d,%d,%d,%d,%d,%d,%d,%d,%d,%c",
                        r->n, r->c, r->h, r->w, r->o, r->k, r->s, r->p, r->g,
                        r->back ? 'b' : r->epi ? 'e' : 'f');
    }
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 2>/dev/null");
    FILE *p = popen(cmd, "r");
    for (int i = 0; i < NROWS; i++)
        if (!p || fscanf(p, "%lf", &ms[i]) != 1) ms[i] = -1;
    if (p) pclose(p);
}

/* ---- optree -------------------------------------------------------------- */

typedef struct conv_run {
    ot_tensor *x, *w, *gy, *y, *gx, *gw, *b;
    ot_node *tree[2];
    ot_tensor *out[2];
    int nout;
} conv_run;

/* The row's tensors and trees, in the current pool. */
static void run_new(conv_run *cr, ot_backend *be, const conv_row *r)
{
    uint64_t seed = 7;
    int ho = out_size(r);
    *cr = (conv_run){0};
    cr->x = bench_rand_tensor(be, OT_SHAPE(r->n, r->c, r->h, r->w), &seed, "conv");
    cr->w = bench_rand_tensor(be, OT_SHAPE(r->o, r->c / r->g, r->k, r->k), &seed, "conv");
    ot_node *y = ot_conv(cr->x, cr->w, .stride = {r->s}, .pad = r->p, .groups = r->g);
    if (r->epi) {
        cr->b = bench_rand_tensor(be, OT_SHAPE(1, r->o, 1, 1), &seed, "conv");
        y = ot_relu(ot_add(y, cr->b));
    }
    if (!r->back) {
        cr->y = ot_empty(be, OT_SHAPE(r->n, r->o, ho, ho), OT_F32);
        cr->tree[0] = y;
        cr->out[0] = cr->y;
        cr->nout = 1;
        return;
    }
    cr->gy = bench_rand_tensor(be, OT_SHAPE(r->n, r->o, ho, ho), &seed, "conv");
    ot_autodiff *ad = ot_autodiff_new(y, ot_tensor_node(cr->gy));
    if (!ad) bench_die("conv: %s", ot_errmsg());
    cr->tree[0] = ot_autodiff_grad(ad, cr->x);
    cr->tree[1] = ot_autodiff_grad(ad, cr->w);
    ot_autodiff_free(ad);
    cr->gx = ot_empty(be, OT_SHAPE(r->n, r->c, r->h, r->w), OT_F32);
    cr->gw = ot_empty(be, OT_SHAPE(r->o, r->c / r->g, r->k, r->k), OT_F32);
    cr->out[0] = cr->gx;
    cr->out[1] = cr->gw;
    cr->nout = 2;
}

static void run_free(conv_run *cr)
{
    ot_tensor *t[] = {cr->x, cr->w, cr->gy, cr->y, cr->gx, cr->gw, cr->b};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) ot_tensor_free(t[i]);
}

/* The length of a up to the ")" that closes the "(" before it (names
 * such as "winograd F(2x2,3x3)" hold parentheses) or the line's end. */
static int closing(const char *a)
{
    int n = 0, depth = 0;
    for (; a[n] && a[n] != '\n'; n++) {
        if (a[n] == '(') depth++;
        else if (a[n] == ')' && depth-- == 0) break;
    }
    return n;
}

/* The algorithms and tiles ot_explain names for the run's kernels, "; "
 * between them (the text after "conv [...] (" up to ")"). */
static void explain_algos(const conv_run *cr, char *buf, size_t size)
{
    char *text = NULL;
    size_t len = 0, used = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) bench_die("conv: out of memory");
    ot_explain_many(cr->nout, cr->out, cr->tree, f);
    fclose(f);
    buf[0] = 0;
    for (const char *s = text; s && (s = strstr(s, "conv conv")) != NULL; s++) {
        const char *a = strstr(s, "] (");
        if (!a) break;
        a += 3;
        int n = closing(a);
        used += (size_t)snprintf(buf + used, size - used, "%s%.*s", used ? "; " : "", n, a);
        if (used >= size) break;
        s = a;
    }
    free(text);
}

static double time_row(const conv_run *cr, int runs)
{
    double *t = bench_xmalloc(sizeof *t * (size_t)runs);
    for (int k = -1; k < runs; k++) {   /* k = -1: the warm-up (plans, arenas) */
        double t0 = now();
        if (ot_assign_many(cr->nout, cr->out, cr->tree) != 0) bench_die("conv: %s", ot_errmsg());
        if (k >= 0) t[k] = now() - t0;
    }
    double m = bench_median(t, runs);
    free(t);
    return m;
}

int bench_conv(int runs, bool quick, const char *out_dir)
{
    if (quick && runs > 3) runs = 3;
    openblas_set_num_threads(1);
    const char *how;
    double peak = fma_peak(&how), torch_ms[NROWS];
    run_torch(runs, torch_ms);
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    char path[512];
    snprintf(path, sizeof path, "%s/conv.md", out_dir);
    FILE *md = fopen(path, "w");
    FILE *outs[2] = {stdout, md};
    for (int o = 0; o < 2; o++) {
        if (!outs[o]) continue;
        fprintf(outs[o], "\nConvolution (issue 34), batch 8, f32, 1 thread; FMA peak of one core "
                         "(%s): %.1f GFLOP/s; PyTorch %s, medians of %d\n\n"
                         "| id | case | optree ms | GFLOP/s | of peak | PyTorch ms | optree/PyTorch "
                         "| target | verdict | algorithm (ot_explain) |\n"
                         "|---|---|---|---|---|---|---|---|---|---|\n",
                how, peak, torch_ms[0] > 0 ? "1.13 (bench/conv_torch.py, 1 thread)" : "not importable",
                runs);
    }
    for (int i = 0; i < NROWS; i++) {
        const conv_row *r = &ROWS[i];
        fprintf(stderr, "bench: %s %s ...\n", r->id, r->label);
        ot_pool *pool = ot_pool_push();
        conv_run cr;
        run_new(&cr, be, r);
        char algo[512];
        explain_algos(&cr, algo, sizeof algo);
        double s = time_row(&cr, runs), g = flops(r) / s * 1e-9;
        ot_pool_pop(pool);
        run_free(&cr);
        char tms[32] = "n/a", ratio[32] = "n/a";
        const char *verdict = "no reference";
        if (torch_ms[i] > 0) {
            double q = 1e3 * s / torch_ms[i];
            snprintf(tms, sizeof tms, "%.2f", torch_ms[i]);
            snprintf(ratio, sizeof ratio, "%.2fx", q);
            verdict = q <= 1.0 ? "ok" : "MISS";
        }
        for (int o = 0; o < 2; o++)
            if (outs[o])
                fprintf(outs[o], "| %s | %s | %.2f | %.1f | %.0f%% | %s | %s | %s | %s | %s |\n",
                        r->id, r->label, 1e3 * s, g, peak > 0 ? 100 * g / peak : 0.0, tms, ratio,
                        r->id[0] == 'W' ? "1.0x" : "-", r->id[0] == 'W' ? verdict : "-", algo);
    }
    if (md) fclose(md);
    ot_backend_free(be);
    return 0;
}
