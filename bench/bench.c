/*
 * bench.c - the benchmark driver (`make bench`): runs the cases of
 * workloads.c as BENCH.md prescribes and writes the table, bench/results.csv
 * and bench/results.md.
 *
 *     build/bench/bench [--quick] [--only W1,W5] [--runs N] [--backend ref|cpu]
 *                       [--out DIR] [--explain] [--scaling] [--threads 1,2,4,8,16]
 *
 * Each case is timed in these variants: optree fused (threads 1), optree
 * with fusion off (threads 1), the reference loop (one thread; in both store
 * modes, ordinary and streaming, where it has them) and optree fused with
 * threads 2. After one warm-up run of each, the variants are timed in turn,
 * run after run, so that drift on a shared machine hits them alike; each
 * figure is the median, and the faster store mode's median is the
 * reference. The reference loops are AVX-512 where the CPU has it, AVX2
 * where it does not or where OT_ISA=avx2 makes optree use AVX2 (so that the
 * comparison stays like with like). Every optree result is checked against
 * the reference loop's output in each store mode (or the case's check_ref),
 * and one more call of each optree variant counts the kernels it runs.
 * --explain prints the plan of one call of each case to stderr. A full run
 * (no --only) ends with the thread-scaling tables of scaling.c, at the
 * counts of --threads; --scaling runs those tables alone. --gemm and
 * --mlp DIR run w_gemm.c's comparisons alone; --conv w_conv.c's rows alone (a full run ends with them). The header names the GEMM
 * (OpenBLAS core) that runs optree's dots and the cblas references.
 * --half runs w_half.c's 16-bit rows (W1h, W3h, W4h, W10h) alone.
 */
#define _DEFAULT_SOURCE   /* madvise */
#include "bench.h"

#include <cblas.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

/* Beyond this relative error a result is wrong, not merely rounded
 * differently: u10 chains and reordered f32 sums stay far below it. */
#define MAX_REL_ERR 1e-4

enum { V_FUSED, V_UNFUSED, V_FUSED2, V_COUNT };

typedef struct options {
    bool quick;
    const char *only;
    int runs;
    const char *backend;
    const char *out_dir;
    bool explain;
    bool scaling_only;
    scaling_opts scaling;
    bool gemm;          /* --gemm */
    const char *mlp;    /* --mlp DIR */
    bool conv;          /* --conv */
    bool attn;          /* --attn */
    bool emb;           /* --emb or --only W17 */
    bool half;          /* --half: W1h, W3h, W4h, W10h */
} options;

const char *const bench_in_names[BENCH_MAX_IN] = {"in0", "in1", "in2", "in3", "in4",
                                                  "in5", "in6", "in7", "in8", "in9"};

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

#define die bench_die

/* 64-byte aligned, as optree's buffers are: the hand loops get the same
 * alignment, and streaming stores whole cache lines from the first vector. */
void *bench_xmalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

/* The hand loops' data in the pages optree gives its tensors (src/core/alloc.c:
 * from 4 MiB on, whole 2 MiB pages advised as huge), so that a ratio
 * compares the loops and not the page size: on 4 KiB pages W1 ran 12-30%
 * slower. */
static void *data_alloc(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    if (n < 2 * huge) return bench_xmalloc(n);
    size_t cap = (n + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, cap);
    if (!p) die("out of memory (%zu bytes)", n);
    madvise(p, cap, MADV_HUGEPAGE);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- options and machine ------------------------------------------------- */

static void usage(void)
{
    die("usage: bench [--quick] [--only W1,W5] [--runs N] [--backend ref|cpu] [--out DIR] "
        "[--explain] [--scaling] [--threads 1,2,4,8,16 (increasing, from 1)] [--gemm] "
        "[--mlp DIR] [--conv] [--attn] [--emb] [--half]");
}

static options parse_args(int argc, char **argv)
{
    options o = {false, NULL, 9, "cpu", "bench", false, false, {.ncounts = 0}, false, NULL, false, false, false, false};
    scaling_parse_counts(&o.scaling, "1,2,4,8,16");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--quick") == 0) o.quick = true;
        else if (strcmp(a, "--only") == 0 && has_val) o.only = argv[++i];
        else if (strcmp(a, "--runs") == 0 && has_val) o.runs = atoi(argv[++i]);
        else if (strcmp(a, "--backend") == 0 && has_val) o.backend = argv[++i];
        else if (strcmp(a, "--out") == 0 && has_val) o.out_dir = argv[++i];
        else if (strcmp(a, "--explain") == 0) o.explain = true;
        else if (strcmp(a, "--scaling") == 0) o.scaling_only = true;
        else if (strcmp(a, "--gemm") == 0) o.gemm = true;
        else if (strcmp(a, "--mlp") == 0 && has_val) o.mlp = argv[++i];
        else if (strcmp(a, "--conv") == 0) o.conv = true;
        else if (strcmp(a, "--attn") == 0) o.attn = true;
        else if (strcmp(a, "--emb") == 0) o.emb = true;
        else if (strcmp(a, "--half") == 0) o.half = true;
        else if (strcmp(a, "--threads") == 0 && has_val) {
            if (!scaling_parse_counts(&o.scaling, argv[++i])) usage();
        }
        else usage();
    }
    if (o.runs < 1) usage();
    if (o.runs < 7) fprintf(stderr, "bench: note: BENCH.md asks for at least 7 runs\n");
    o.scaling.runs = o.runs;
    o.scaling.quick = o.quick;
    o.scaling.backend = o.backend;
    o.scaling.out_dir = o.out_dir;
    return o;
}

/* Whether id is in the comma-separated list (no list selects all). */
static bool selected(const char *only, const char *id)
{
    if (!only) return true;
    size_t n = strlen(id);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, id, n) == 0) return true;
        p += len + (e != NULL);
    }
    return false;
}

static void cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(buf, size, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = '\0';
            break;
        }
    }
    fclose(f);
}

/* The reference loops for this run: AVX-512 (F, DQ, VL) where the CPU has
 * it, unless OT_ISA names a narrower ISA for optree: then AVX2, since
 * optree's kernels are then that narrow too (OT_ISA=avx2) and nothing
 * narrower is written by hand. NULL when the CPU lacks AVX2+FMA. */
static const ref_loops *pick_refs(void)
{
    const char *isa = getenv("OT_ISA");
    bool may512 = !isa || !*isa || strcmp(isa, "avx512") == 0;
    if (may512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return &ref_loops_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &ref_loops_avx2;
    return NULL;
}

static bench_machine machine(const options *o, const ref_loops *refs)
{
    bool have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bench_machine m = {.backend = o->backend, .runs = o->runs, .quick = o->quick,
                       .ref_isa = refs ? refs->isa : "none (the CPU lacks AVX2+FMA)"};
    cpu_model(m.cpu, sizeof m.cpu);
    bench_gemm_line(m.gemm, sizeof m.gemm);
    const char *isa = getenv("OT_ISA");
    if (isa && *isa)
        snprintf(m.isa, sizeof m.isa, "OT_ISA=%s", isa);
    else
        snprintf(m.isa, sizeof m.isa, "auto (CPU: avx2+fma %s, avx512f %s)",
                 have_avx2 ? "yes" : "no", __builtin_cpu_supports("avx512f") ? "yes" : "no");
    time_t t = time(NULL);
    strftime(m.date, sizeof m.date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    return m;
}

/* ---- backends and data --------------------------------------------------- */

ot_backend *bench_backend(const char *name, int threads, int fusion)
{
    ot_backend_opts opts = {.threads = threads, .fusion = fusion};
    ot_backend *be = ot_backend_new(name, &opts);
    if (!be) die("ot_backend_new(\"%s\"): %s", name, ot_errmsg());
    return be;
}

static size_t numel(ot_shape s)
{
    size_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= (size_t)s.dims[i];
    return n;
}

uint64_t bench_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

void bench_fill_uniform(float *p, size_t n, float lo, float hi, uint64_t *state)
{
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)(bench_rand(state) >> 40) * 0x1p-24f;
}

ot_tensor *bench_rand_tensor(ot_backend *be, ot_shape s, uint64_t *seed, const char *row)
{
    size_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= (size_t)s.dims[d];
    float *buf = bench_xmalloc(n * sizeof *buf + 4);
    bench_fill_uniform(buf, n, -1, 1, seed);
    ot_tensor *t = ot_array(be, s, OT_F32, buf);
    free(buf);
    if (!t) bench_die("%s: %s", row, ot_errmsg());
    return t;
}

void bench_data_new(bench_data *d, const bench_case *c, bool quick, int case_index)
{
    *d = (bench_data){0};
    c->shapes(d, quick);
    uint64_t seed = 1000u * (uint64_t)case_index;
    for (int i = 0; i < d->n_in; i++) {
        size_t n = numel(d->in_shape[i]);
        d->in[i] = data_alloc((n ? n : 1) * sizeof(float));
        /* Uniform in [0.5, 2.0): never zero, so a/b and log stay finite. */
        uint64_t s = seed + (uint64_t)i + 1;
        if (!c->fill) bench_fill_uniform(d->in[i], n, 0.5f, 2.0f, &s);
    }
    if (c->fill) c->fill(d, seed);
    d->out_numel = numel(d->out_shape);
}

void bench_data_free(bench_data *d)
{
    for (int i = 0; i < d->n_in; i++)
        free(d->in[i]);
    free(d->scratch);
}

void bench_variant_new(variant *v, ot_backend *be, const bench_case *c, const bench_data *d)
{
    *v = (variant){.be = be};   /* nbind, prog and tree stay 0 where the case has none */
    for (int i = 0; i < d->n_in; i++) {
        v->in[i] = ot_array(be, d->in_shape[i], OT_F32, d->in[i]);
        if (!v->in[i]) die("%s: ot_array: %s", c->id, ot_errmsg());
    }
    if (c->transpose_in0) {
        ot_tensor *t = ot_transpose(v->in[0], NULL);
        if (!t) die("%s: ot_transpose: %s", c->id, ot_errmsg());
        ot_tensor_free(v->in[0]);
        v->in[0] = t;
    }
    v->out = ot_empty(be, d->out_shape, OT_F32);
    if (!v->out) die("%s: ot_empty: %s", c->id, ot_errmsg());
    v->tree = c->prebuilt ? c->tree(v->in) : NULL;
    if (c->prebuilt && !v->tree) die("%s: building the tree: %s", c->id, ot_errmsg());
    v->prog = c->program ? c->program(be, v->out, v->in, &v->nbind) : NULL;
    if (c->program && !v->prog) die("%s: building the program: %s", c->id, ot_errmsg());
    for (int i = 0; i < v->nbind; i++) v->bind[i] = OT_BIND_TENSOR(bench_in_names[i], v->in[i]);
}

void bench_variant_free(variant *v, int n_in)
{
    ot_program_free(v->prog);
    for (int i = 0; i < n_in; i++)
        ot_tensor_free(v->in[i]);
    ot_tensor_free(v->out);
}

/* ---- timing -------------------------------------------------------------- */

/* One complete user call: push a pool, build the tree, assign it, pop the
 * pool; for a prebuilt tree, ot_assign alone. */
static int one_call(const bench_case *c, const variant *v)
{
    if (v->tree) return ot_assign(v->out, v->tree);
    if (v->prog) return ot_program_run(v->prog, v->nbind, v->bind);
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot_errcode();
    int rc = c->assign ? c->assign(v->out, v->in) : ot_assign(v->out, c->tree(v->in));
    ot_pool_pop(pool);
    return rc;
}

int bench_blas_threads;

/* Seconds per call. */
double bench_time_optree(const bench_case *c, const variant *v, long calls)
{
    /* OpenBLAS's threads are process-wide, the host program's to set (the
     * library never changes them): each variant's dots get its threads. */
    int blas = bench_blas_threads > 0 ? bench_blas_threads : ot_backend_options(v->be).threads;
    openblas_set_num_threads(blas);
    double t0 = now_s();
    for (long k = 0; k < calls; k++)
        if (one_call(c, v) != 0)
            die("%s: ot_assign on %s: %s", c->id, ot_backend_name(v->be), ot_errmsg());
    return (now_s() - t0) / (double)calls;
}

static double time_ref(const bench_case *c, const ref_loops *L, store_mode sm,
                       const bench_data *d, float *out, long calls)
{
    double t0 = now_s();
    for (long k = 0; k < calls; k++)
        c->ref(L, sm, d, out);
    return (now_s() - t0) / (double)calls;
}

/* ---- checking ------------------------------------------------------------ */

static double max_rel_err(const float *got, const float *want, size_t n, double floor)
{
    double worst = 0;
    if (floor < 1e-30) floor = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double w = fabs((double)want[i]);
        double rel = fabs((double)got[i] - want[i]) / (w > floor ? w : floor);
        if (!(rel <= worst)) worst = rel;   /* a NaN counts as the worst */
    }
    return worst;
}

/* One more call of a variant, as the last timed ones ran, returning how
 * many kernels it ran (-1 when the backend does not count them). A stateful
 * case's inputs are first restored from the host data, and what the call
 * updated is collected into out, so that every variant is checked on one
 * step from the same state. */
long bench_counted_call(const bench_case *c, const bench_data *d, const variant *v)
{
    if (c->collect)
        for (int i = 0; i < d->n_in; i++)
            if (ot_set(v->in[i], d->in[i]) != 0) die("%s: ot_set: %s", c->id, ot_errmsg());
    ot_stats s0, s1;
    bool counted = ot_stats(v->be, &s0) == 0;
    bench_time_optree(c, v, 1);
    counted = ot_stats(v->be, &s1) == 0 && counted;
    if (c->collect) {
        ot_pool *pool = ot_pool_push();
        if (!pool || c->collect(v->out, v->in) != 0) die("%s: collect: %s", c->id, ot_errmsg());
        ot_pool_pop(pool);
    }
    return counted ? (long)(s1.kernels - s0.kernels) : -1;
}

/* The largest error of the optree variants against the reference output
 * (made by the reference loop named ref). */
static double check_variants(const bench_case *c, const variant vs[], const float *want,
                             size_t n, const char *ref)
{
    static const char *const names[V_COUNT] = {"fused", "unfused", "fused 2T"};
    float *got = bench_xmalloc(n * sizeof *got);
    double worst = 0;
    for (int k = 0; k < V_COUNT; k++) {
        if (ot_get(vs[k].out, got) != 0) die("%s: ot_get: %s", c->id, ot_errmsg());
        double e = max_rel_err(got, want, n, c->err_floor);
        if (!(e <= MAX_REL_ERR))
            fprintf(stderr, "bench: %s (%s) WRONG: max relative error %.3g vs the reference%s\n",
                    c->id, names[k], e, ref);
        if (!(e <= worst)) worst = e;
    }
    free(got);
    return worst;
}

/* ---- one case ------------------------------------------------------------ */

static void size_text(char *buf, size_t size, ot_shape s)
{
    int64_t n = s.dims[0];
    if (s.ndim == 2)
        snprintf(buf, size, "%lldx%lld", (long long)n, (long long)s.dims[1]);
    else if (n > 1 && (n & (n - 1)) == 0 && n >= 1024)
        snprintf(buf, size, "2^%d", __builtin_ctzll((unsigned long long)n));
    else
        snprintf(buf, size, "%lld", (long long)n);
}

/* Medians in seconds per assignment: t[V_*] for the optree variants,
 * t[V_COUNT + sm] for the reference loop in store mode sm (-1 when it is
 * not timed). */
typedef struct medians {
    double t[V_COUNT + STORE_MODES];
    double q[STORE_MODES];   /* the median of the runs' fused/ref ratios, per store mode */
} medians;

/* Lets threads that spin after multi-threaded work (OpenBLAS's workers
 * poll with sched_yield for a while) go to sleep: on 2 vCPUs sharing one
 * core, a spinning worker takes half of the core from the next timing. */
void bench_settle(void)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* How many store modes of a case's reference are timed and checked: none
 * without reference loops, both where the loop has both. */
static int ref_modes(const bench_case *c, const ref_loops *L)
{
    return !L ? 0 : c->both_stores ? STORE_MODES : 1;
}

/* One round of the single-thread variants and the reference's store
 * modes into t[*][r] (r < 0: the warm-up), the reference first on odd
 * rounds. Each timing follows one untimed call of the same variant, so
 * that every side starts from the caches and memory state it leaves
 * itself (as a loop calling it does), not from what ran before it: the
 * reference's streaming mode always followed its ordinary mode over the
 * same inputs, while optree's fused variant followed the unfused one or
 * the other side. That order alone put W1's generated code at 1.03-1.06x
 * and, minutes later, 1.22x the hand loop in one harness; the same code
 * on the same buffers read 0.98-1.02x in a rotating order and 1.01-1.03x
 * with each side timed after itself (2026-12-02, the Zen 5 VM). */
static void time_round(const bench_case *c, const bench_data *d, const variant vs[],
                       const ref_loops *L, float *ref_out, long calls, int r, double *t[])
{
    int nref = ref_modes(c, L);
    for (int side = 0; side < 2; side++) {
        if ((side == 0) == (r % 2 != 0)) {
            for (int sm = 0; sm < nref; sm++) {
                time_ref(c, L, (store_mode)sm, d, ref_out, 1);   /* untimed */
                double s = time_ref(c, L, (store_mode)sm, d, ref_out, calls);
                if (r >= 0) t[V_COUNT + sm][r] = s;
            }
            continue;
        }
        for (int k = 0; k < V_COUNT; k++) {
            if (k == V_FUSED2) continue;
            bench_time_optree(c, &vs[k], 1);   /* untimed */
            double s = bench_time_optree(c, &vs[k], calls);
            if (r >= 0) t[k][r] = s;
        }
    }
}

/* One warm-up of every variant, then `runs` rounds of the single-thread
 * variants and the reference's store modes, interleaved (their ratios are
 * the claims), then the multi-threaded variant's runs on their own. The
 * claim is the median of the rounds' fused/ref ratios: a neighbour that
 * slows one round slows both sides of it, so a ratio moves less than
 * either median does on a shared machine (W4 read 1.11 and 0.93 minutes
 * apart as a ratio of medians). */
static medians time_case(const bench_case *c, const bench_data *d, const variant vs[],
                         const ref_loops *L, float *ref_out, long calls, int runs)
{
    int nref = ref_modes(c, L);
    double *t[V_COUNT + STORE_MODES];
    for (int k = 0; k < V_COUNT + STORE_MODES; k++)
        t[k] = bench_xmalloc((size_t)runs * sizeof(double));
    for (int r = -1; r < runs; r++) time_round(c, d, vs, L, ref_out, calls, r, t);
    medians m = {.q = {-1, -1}};
    double *q = bench_xmalloc((size_t)runs * sizeof(double));
    for (int sm = 0; sm < nref; sm++) {
        for (int r = 0; r < runs; r++) q[r] = t[V_FUSED][r] / t[V_COUNT + sm][r];
        m.q[sm] = bench_median(q, runs);
    }
    free(q);
    for (int r = -1; r < runs; r++) {
        double s = bench_time_optree(c, &vs[V_FUSED2], calls);
        if (r >= 0) t[V_FUSED2][r] = s;
    }
    bench_settle();
    for (int k = 0; k < V_COUNT + STORE_MODES; k++) {
        m.t[k] = k < V_COUNT + nref ? bench_median(t[k], runs) : -1;
        free(t[k]);
    }
    return m;
}

/* The reference's figures: the faster store mode's median, which mode that
 * was and the other's median (for cases with both). */
static void pick_ref(bench_row *row, const medians *m, int nref, double unit)
{
    const double *t = m->t + V_COUNT;
    if (nref == 0) return;
    int best = nref == STORE_MODES && t[STORE_STREAM] < t[STORE_ORDINARY];
    row->ref = unit * t[best];
    row->ratio = m->q[best];
    if (nref < STORE_MODES) return;
    row->ref_store = best;
    row->ref_other = unit * t[!best];
}

/* Checks every optree variant against the reference output in each store
 * mode timed (or the case's check_ref): the modes differ only in how they
 * store, and a wrong head or tail in either shows here. */
static void check_case(bench_row *row, const bench_case *c, const bench_data *d,
                       const variant vs[], const ref_loops *L, float *ref_out)
{
    static const char *const mode[STORE_MODES] = {"", " (streaming stores)"};
    /* A check_ref computes the expected output on its own, once. */
    int nref = c->check_ref ? 1 : ref_modes(c, L);
    double worst = 0;
    for (int sm = 0; sm < nref; sm++) {
        if (c->check_ref) c->check_ref(d, ref_out);
        else c->ref(L, (store_mode)sm, d, ref_out);
        double e = check_variants(c, vs, ref_out, d->out_numel, mode[sm]);
        if (!(e <= worst)) worst = e;
    }
    row->err = worst;
    row->wrong = !(worst <= MAX_REL_ERR);
}

static bench_row run_case(const bench_case *c, int index, ot_backend *const bes[V_COUNT],
                          const options *o, const ref_loops *L)
{
    bench_data d;
    bench_data_new(&d, c, o->quick, index);
    /* Prebuilt trees live in this pool until the case is done. */
    ot_pool *case_pool = c->prebuilt ? ot_pool_push() : NULL;
    if (c->prebuilt && !case_pool) die("%s: ot_pool_push: %s", c->id, ot_errmsg());
    variant vs[V_COUNT];
    for (int k = 0; k < V_COUNT; k++)
        bench_variant_new(&vs[k], bes[k], c, &d);
    float *ref_out = data_alloc(d.out_numel * sizeof *ref_out);
    double first = bench_time_optree(c, &vs[V_FUSED], 1);
    if (o->explain) {
        fprintf(stderr, "bench: %s: the plan of one call (fused backend):\n", c->id);
        ot_pool *pool = ot_pool_push();
        int rc = c->explain ? (c->explain(stderr, vs[V_FUSED].in), 0)
                 : c->tree  ? ot_explain(c->tree(vs[V_FUSED].in), stderr)
                            : (fputs("  (ot_model_fit's own plans: no one tree to show)\n", stderr), 0);
        if (!pool || rc != 0) die("%s: ot_explain: %s", c->id, ot_errmsg());
        ot_pool_pop(pool);
    }
    long calls = o->quick ? c->quick_calls : c->calls;
    medians m = time_case(c, &d, vs, L, ref_out, calls > 0 ? calls : 1, o->runs);

    double unit = c->us ? 1e6 : 1e3;
    bench_row row = {.c = c, .ref = -1, .ratio = -1, .ref_store = -1, .ref_other = -1, .err = -1};
    if (c->size) snprintf(row.size, sizeof row.size, "%s", c->size);
    else size_text(row.size, sizeof row.size, d.out_shape);
    row.fused = unit * m.t[V_FUSED];
    row.first = unit * first;
    row.unfused = unit * m.t[V_UNFUSED];
    row.fused2 = unit * m.t[V_FUSED2];
    pick_ref(&row, &m, ref_modes(c, L), unit);
    if (c->ref_absent && c->ref_absent()) row.ref = row.ratio = -1;   /* a time of nothing */
    long kernels[V_COUNT];
    for (int k = 0; k < V_COUNT; k++)
        kernels[k] = bench_counted_call(c, &d, &vs[k]);
    row.kernels = kernels[V_FUSED];
    row.kernels_unfused = kernels[V_UNFUSED];
    if (L) check_case(&row, c, &d, vs, L, ref_out);

    free(ref_out);
    if (case_pool) ot_pool_pop(case_pool);
    for (int k = 0; k < V_COUNT; k++)
        bench_variant_free(&vs[k], d.n_in);
    bench_data_free(&d);
    return row;
}

/* ---- main ---------------------------------------------------------------- */

static FILE *open_out(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) die("cannot write %s", path);
    return f;
}

static void write_reports(const options *o, const bench_machine *m, const bench_row *rows,
                          int n)
{
    FILE *csv = open_out(o->out_dir, "results.csv");
    report_csv(csv, rows, n);
    FILE *md = open_out(o->out_dir, "results.md");
    report_md(md, m, rows, n);
    if (fclose(csv) != 0 || fclose(md) != 0) die("writing the results in %s failed", o->out_dir);
    printf("\nMarkdown for README.md (also in %s/results.md):\n\n", o->out_dir);
    report_md(stdout, m, rows, n);
}

/* The output directory is checked before anything is measured: found
 * missing at the end, a whole run's figures were lost. */
static void check_out_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK) != 0)
        die("--out %s: not a writable directory (the results go there)", dir);
}

int main(int argc, char **argv)
{
    options o = parse_args(argc, argv);
    const char *forced = getenv("OT_FUSION");
    if (forced && strcmp(forced, "0") == 0)
        fprintf(stderr, "bench: warning: OT_FUSION=0 is set: the fused column is unfused too\n");
    if (o.gemm) return bench_gemm(o.runs);
    if (o.mlp) return bench_mlp(o.mlp, 2);
    check_out_dir(o.out_dir);   /* every mode below writes there */
    if (o.scaling_only) return scaling_run(&o.scaling) ? 1 : 0;
    if (o.conv) return bench_conv(o.runs, o.quick, o.out_dir);
    if (o.attn) return bench_attn(o.runs, o.quick, o.out_dir);
    if (o.emb || (o.only && strcmp(o.only, "W17") == 0)) return bench_emb(o.runs, o.quick, o.out_dir);
    if (o.half) return bench_half(o.runs, o.quick, o.out_dir);
    const ref_loops *refs = pick_refs();
    if (!refs)
        fprintf(stderr, "bench: note: this CPU lacks AVX2+FMA: no reference loops, "
                        "results unchecked\n");

    ot_backend *bes[V_COUNT] = {
        [V_FUSED] = bench_backend(o.backend, 1, OT_FUSION_DEFAULT),
        [V_UNFUSED] = bench_backend(o.backend, 1, OT_FUSION_OFF),
        [V_FUSED2] = bench_backend(o.backend, 2, OT_FUSION_DEFAULT),
    };
    bench_machine m = machine(&o, refs);
    bench_row *rows = bench_xmalloc((size_t)bench_ncases * sizeof *rows);
    int n = 0;
    for (int i = 0; i < bench_ncases; i++) {
        if (!selected(o.only, bench_cases[i].id)) continue;
        fprintf(stderr, "bench: %s %s ...\n", bench_cases[i].id, bench_cases[i].label);
        rows[n++] = run_case(&bench_cases[i], i, bes, &o, refs);
    }
    if (n == 0) die("--only %s selects no case", o.only);

    report_text(stdout, &m, rows, n);
    write_reports(&o, &m, rows, n);
    bool wrong = false;
    for (int i = 0; i < n; i++)
        wrong |= rows[i].wrong;
    free(rows);
    for (int k = 0; k < V_COUNT; k++)
        ot_backend_free(bes[k]);
    if (wrong) fprintf(stderr, "bench: FAILED: some results disagree with the reference\n");
    bool differ = !o.only && scaling_run(&o.scaling) != 0;
    if (!o.only) bench_conv(o.runs, o.quick, o.out_dir);
    return wrong || differ ? 1 : 0;
}
