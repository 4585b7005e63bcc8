/*
 * scaling.c - the thread-scaling tables of the benchmark (`make bench`, or
 * `bench --scaling` alone): W2-W5, W6 and W10 at each thread count asked
 * for (1, 2, 4, 8, 16 by default), with speedup and parallel efficiency
 * over one thread, and the small-work table: calls too small to split,
 * which must cost no more at 2 or 4 threads than at 1. Every result's bits
 * are compared with one thread's; a difference is printed loudly and makes
 * the bench fail, since the executor promises the same bits for any number
 * of threads. Counts beyond the machine's online CPUs still run, flagged
 * as oversubscribed.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const scaled_ids[] = {"W2", "W3", "W4", "W5", "W6", "W10"};

/* The small-work cases: element counts, and the thread counts they run at. */
static const int64_t small_sizes[] = {64, 1000, 10000, 32768, 100000, 300000};
static const int small_counts[] = {1, 2, 4};
#define NSMALL_COUNTS 3

bool scaling_parse_counts(scaling_opts *o, const char *list)
{
    o->ncounts = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > OT_MAX_THREADS || o->ncounts == SCALING_MAX_COUNTS ||
            (o->ncounts && v <= o->counts[o->ncounts - 1]) || (*end && *end != ','))
            return false;
        o->counts[o->ncounts++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return o->ncounts > 0 && o->counts[0] == 1;
}

double scaling_speedup(const scaling_cell *one, const scaling_cell *x)
{
    return x->t > 0 ? one->t / x->t : 0;
}

double scaling_efficiency(const scaling_cell *one, const scaling_cell *x)
{
    return scaling_speedup(one, x) / x->threads;
}

void scaling_md_row(FILE *f, const char *id, const char *label, const scaling_cell *one,
                    const scaling_cell *x, int cpus)
{
    fprintf(f, "| %s | %s | %d%s | %.3f | %.2f | %.0f%% | %s |\n", id, label, x->threads,
            x->threads > cpus ? " (oversubscribed)" : "", x->t, scaling_speedup(one, x),
            100 * scaling_efficiency(one, x), x->same_bits ? "same" : x->blas_only ? "same with OpenBLAS on 1 thread" : "DIFFERENT");
}

static bool scaled(const char *id)
{
    for (size_t i = 0; i < sizeof scaled_ids / sizeof scaled_ids[0]; i++)
        if (strcmp(id, scaled_ids[i]) == 0) return true;
    return false;
}

/* Whether got's bits equal want's; says where they first differ. */
static bool same_bits(const char *what, int threads, const float *got, const float *want,
                      size_t n)
{
    if (memcmp(got, want, n * sizeof *got) == 0) return true;
    size_t i = 0;
    while (i < n && memcmp(&got[i], &want[i], sizeof *got) == 0) i++;
    fprintf(stderr,
            "bench: %s at %d threads: RESULT DIFFERS from 1 thread's bits: element %zu is "
            "%.9g, not %.9g\n",
            what, threads, i, (double)got[i], (double)want[i]);
    return false;
}

/* The output of one call of v from the case's starting state, into buf,
 * with OpenBLAS on `blas` threads (0: the variant's). */
static void result_of(const bench_case *c, const bench_data *d, const variant *v, float *buf,
                      int blas)
{
    bench_blas_threads = blas;
    bench_counted_call(c, d, v);
    bench_blas_threads = 0;
    if (ot_get(v->out, buf) != 0) bench_die("%s: ot_get: %s", c->id, ot_errmsg());
}

/* Whether variant k's bits equal one thread's (want). Where they differ
 * with OpenBLAS on k's threads, it is run again with OpenBLAS on one
 * thread: equal bits then put the difference in OpenBLAS's threaded GEMM,
 * which the host sets (optree never changes it), and the cell says so
 * without failing the run. */
static bool check_count(const bench_case *c, const bench_data *d, const variant *v, int threads,
                        float *got, const float *want, bool *blas_only)
{
    result_of(c, d, v, got, 0);
    *blas_only = false;
    if (same_bits(c->id, threads, got, want, d->out_numel)) return true;
    result_of(c, d, v, got, 1);
    *blas_only = memcmp(got, want, d->out_numel * sizeof *got) == 0;
    fprintf(stderr, "bench: %s at %d threads: %s\n", c->id, threads,
            *blas_only ? "the same bits with OpenBLAS on 1 thread: OpenBLAS's threaded GEMM "
                         "sums in another order"
                       : "STILL DIFFERENT with OpenBLAS on 1 thread: optree's own threads");
    return false;
}

/* Times case c at every count (runs interleaved, each count in turn) into
 * cells; returns how many counts gave other bits than one thread. */
static int scale_case(const scaling_opts *o, const bench_case *c, int index,
                      ot_backend *const bes[], scaling_cell cells[])
{
    bench_data d;
    bench_data_new(&d, c, o->quick, index);
    ot_pool *case_pool = c->prebuilt ? ot_pool_push() : NULL;
    variant vs[SCALING_MAX_COUNTS];
    double *t = bench_xmalloc((size_t)(o->ncounts * o->runs) * sizeof *t);
    for (int k = 0; k < o->ncounts; k++) bench_variant_new(&vs[k], bes[k], c, &d);
    long calls = o->quick ? c->quick_calls : c->calls;
    if (calls < 1) calls = 1;
    for (int r = -1; r < o->runs; r++)
        for (int k = 0; k < o->ncounts; k++) {
            double s = bench_time_optree(c, &vs[k], calls);
            if (r >= 0) t[k * o->runs + r] = s;
        }
    bench_settle();
    float *want = bench_xmalloc(d.out_numel * sizeof *want);
    float *got = bench_xmalloc(d.out_numel * sizeof *got);
    result_of(c, &d, &vs[0], want, 1);
    int differ = 0;
    for (int k = 0; k < o->ncounts; k++) {
        bool blas_only = false;
        bool same = !k || check_count(c, &d, &vs[k], o->counts[k], got, want, &blas_only);
        cells[k] = (scaling_cell){o->counts[k], 1e3 * bench_median(&t[k * o->runs], o->runs),
                                  same, blas_only};
        differ += !cells[k].same_bits && !blas_only;
    }
    free(want);
    free(got);
    free(t);
    if (case_pool) ot_pool_pop(case_pool);
    for (int k = 0; k < o->ncounts; k++) bench_variant_free(&vs[k], d.n_in);
    bench_data_free(&d);
    return differ;
}

/* ---- small work ----------------------------------------------------------- */

typedef struct small_case {
    const char *label;
    ot_node *(*tree)(ot_tensor *a, ot_tensor *b);
    bool scalar_out;
} small_case;

static ot_node *small_w1(ot_tensor *a, ot_tensor *b) { return ot_add(ot_mul(a, b), b); }

static ot_node *small_w3(ot_tensor *a, ot_tensor *b)
{
    return ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b)));
}

static ot_node *small_sum(ot_tensor *a, ot_tensor *b) { return ot_sum(ot_mul(a, b)); }

/* What the driver's timer and messages see of a small case. */
static const bench_case small_bench_case = {.id = "small work"};

static const small_case small_cases[] = {
    {"a*b + b", small_w1, false},
    {"tanh(a*b + a/b) (W3)", small_w3, false},
    {"sum(a*b)", small_sum, true},
};

/* One small case at n elements: us per ot_assign of a prebuilt tree at
 * each of small_counts, into us[]; returns the counts whose bits differ. */
static int small_case_run(const scaling_opts *o, const small_case *sc, int64_t n,
                          ot_backend *const bes[], double us[])
{
    float *host = bench_xmalloc(2 * (size_t)n * sizeof *host);
    uint64_t seed = 77;
    bench_fill_uniform(host, 2 * (size_t)n, 0.5f, 2.0f, &seed);
    ot_pool *pool = ot_pool_push();
    ot_tensor *a[NSMALL_COUNTS], *b[NSMALL_COUNTS], *out[NSMALL_COUNTS];
    ot_node *tree[NSMALL_COUNTS];
    for (int k = 0; k < NSMALL_COUNTS; k++) {
        a[k] = ot_array(bes[k], OT_SHAPE(n), OT_F32, host);
        b[k] = ot_array(bes[k], OT_SHAPE(n), OT_F32, host + n);
        out[k] = ot_empty(bes[k], sc->scalar_out ? OT_SHAPE() : OT_SHAPE(n), OT_F32);
        tree[k] = a[k] && b[k] && out[k] ? sc->tree(a[k], b[k]) : NULL;
        if (!tree[k]) bench_die("small work: %s", ot_errmsg());
    }
    long calls = n < 1000 ? 20000 : (long)(4000000 / n) + 4;
    if (o->quick) calls = calls / 10 + 1;
    double *t = bench_xmalloc((size_t)(NSMALL_COUNTS * o->runs) * sizeof *t);
    for (int r = -1; r < o->runs; r++)
        for (int k = 0; k < NSMALL_COUNTS; k++) {
            variant v = {.be = bes[k], .out = out[k], .tree = tree[k]};
            double s = bench_time_optree(&small_bench_case, &v, calls);
            if (r >= 0) t[k * o->runs + r] = s;
        }
    size_t m = sc->scalar_out ? 1 : (size_t)n;
    float *want = bench_xmalloc(m * sizeof *want), *got = bench_xmalloc(m * sizeof *got);
    int differ = 0;
    for (int k = 0; k < NSMALL_COUNTS; k++) {
        us[k] = 1e6 * bench_median(&t[k * o->runs], o->runs);
        if (ot_get(out[k], k ? got : want) != 0) bench_die("small work: %s", ot_errmsg());
        differ += k && !same_bits(sc->label, small_counts[k], got, want, m);
    }
    for (int k = 0; k < NSMALL_COUNTS; k++) {
        ot_tensor_free(a[k]);
        ot_tensor_free(b[k]);
        ot_tensor_free(out[k]);
    }
    ot_pool_pop(pool);
    free(want);
    free(got);
    free(t);
    free(host);
    return differ;
}

static int small_work(FILE *md, const scaling_opts *o)
{
    ot_backend *bes[NSMALL_COUNTS];
    for (int k = 0; k < NSMALL_COUNTS; k++)
        bes[k] = bench_backend(o->backend, small_counts[k], OT_FUSION_DEFAULT);
    const char *head = "\nSmall work: us per ot_assign of a prebuilt tree (medians of %d runs); "
                       "2T/1T and 4T/1T above 1 mean threads cost time\n\n"
                       "| tree | elements | 1 thread | 2 threads | 4 threads | 2T/1T | 4T/1T |\n"
                       "|------|---------:|---------:|----------:|----------:|------:|------:|\n";
    printf(head, o->runs);
    fprintf(md, head, o->runs);
    int differ = 0;
    for (int i = 0; i < bench_ncases; i++) {   /* W8: a whole call, tree built and freed */
        if (strcmp(bench_cases[i].id, "W8") != 0) continue;
        scaling_opts o3 = *o;
        o3.ncounts = NSMALL_COUNTS;
        memcpy(o3.counts, small_counts, sizeof small_counts);
        scaling_cell cells[NSMALL_COUNTS];
        differ += scale_case(&o3, &bench_cases[i], i, bes, cells);
        for (FILE *f = stdout; f; f = f == stdout ? md : NULL)
            fprintf(f, "| W8: push, build, assign, pop | 64 | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                    1e3 * cells[0].t, 1e3 * cells[1].t, 1e3 * cells[2].t,
                    cells[1].t / cells[0].t, cells[2].t / cells[0].t);
    }
    for (size_t i = 0; i < sizeof small_cases / sizeof small_cases[0]; i++)
        for (size_t j = 0; j < sizeof small_sizes / sizeof small_sizes[0]; j++) {
            double us[NSMALL_COUNTS];
            differ += small_case_run(o, &small_cases[i], small_sizes[j], bes, us);
            for (FILE *f = stdout; f; f = f == stdout ? md : NULL)
                fprintf(f, "| %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                        small_cases[i].label, (long long)small_sizes[j], us[0], us[1], us[2],
                        us[1] / us[0], us[2] / us[0]);
            fflush(stdout);
        }
    for (int k = 0; k < NSMALL_COUNTS; k++) ot_backend_free(bes[k]);
    return differ;
}

/* ---- the run -------------------------------------------------------------- */

static FILE *open_md(const scaling_opts *o)
{
    char path[512];
    snprintf(path, sizeof path, "%s/scaling.md", o->out_dir);
    FILE *f = fopen(path, "w");
    if (!f) bench_die("cannot write %s", path);
    return f;
}

int scaling_run(const scaling_opts *o)
{
    int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    ot_backend *bes[SCALING_MAX_COUNTS];
    for (int k = 0; k < o->ncounts; k++)
        bes[k] = bench_backend(o->backend, o->counts[k], OT_FUSION_DEFAULT);
    FILE *md = open_md(o);
    const char *head = "\nThread scaling: ms per call, medians of %d runs (thread counts "
                       "interleaved in each run), %d online CPUs%s\n\n"
                       "| id | workload | threads | ms | speedup | efficiency | bits vs 1 thread |\n"
                       "|----|----------|--------:|---:|--------:|-----------:|------------------|\n";
    const char *quick = o->quick ? "; --quick sizes: a smoke test, not a measurement" : "";
    printf(head, o->runs, cpus, quick);
    fprintf(md, head, o->runs, cpus, quick);
    int differ = 0;
    for (int i = 0; i < bench_ncases; i++) {
        const bench_case *c = &bench_cases[i];
        if (!scaled(c->id)) continue;
        fprintf(stderr, "bench: scaling %s %s ...\n", c->id, c->label);
        scaling_cell cells[SCALING_MAX_COUNTS];
        differ += scale_case(o, c, i, bes, cells);
        for (int k = 0; k < o->ncounts; k++) {
            scaling_md_row(stdout, c->id, c->label, &cells[0], &cells[k], cpus);
            scaling_md_row(md, c->id, c->label, &cells[0], &cells[k], cpus);
        }
        fflush(stdout);
    }
    for (int k = 0; k < o->ncounts; k++) ot_backend_free(bes[k]);
    differ += small_work(md, o);
    if (fclose(md) != 0) bench_die("writing %s/scaling.md failed", o->out_dir);
    if (differ)
        fprintf(stderr, "bench: FAILED: %d results differ from one thread's bits\n", differ);
    return differ;
}
