/*
 * main.c - optree-bench: times an expression (ot_parse's syntax) over sizes
 * and configurations (backend, ISA, threads, dtype, fusion, accuracy),
 * optionally against a second expression interleaved in the same process
 * and against NumPy and numexpr, and reports medians, spread, throughput,
 * bytes moved and the fraction of the machine's measured limits. This file
 * holds the options and the timing loop; cli.h lists the others.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_NAMES = 16, NAME_LEN = 64 };

static const char usage[] =
    "usage: optree-bench EXPR [options]\n"
    "  EXPR               an expression over inputs named freely, in ot_parse's syntax:\n"
    "                     'tanh(a*b + a/b)', 'sum(exp(x - max(x, axis=1, keepdims=1)), axis=1)'\n"
    "  --n SIZES          element counts: 1e6, a list 64,1e4,1e6, or a range 1e3..1e8\n"
    "                     (1, 2 and 5 per decade); default 1e3..1e7\n"
    "  --cols K           inputs are (n/K, K) matrices instead of vectors\n"
    "  --dtype LIST       f32,f64 (default f32)\n"
    "  --threads LIST     1,2,4 (default 1)\n"
    "  --isa LIST         scalar,sse2,avx2,avx512,neon (default: the widest this CPU runs)\n"
    "  --backend LIST     cpu,ref (default cpu)\n"
    "  --fusion LIST      on,off (default on)\n"
    "  --accuracy LIST    u10,u35 (default u10)\n"
    "  --repeat R         samples per point (default 15); the median is reported\n"
    "  --compare EXPR2    a second expression, timed interleaved with the first\n"
    "  --peers            also time NumPy and numexpr (Debian's python3), as ratios\n"
    "  --explain          print each expression's plan first\n"
    "  --csv | --json     output format (default: a table)\n"
    "  --plot FILE        throughput against size with the bandwidth roofline and the\n"
    "                     cache sizes, as .svg or .png (needs gnuplot)\n"
    "  --remeasure        measure the machine's limits again (they are cached)\n"
    "  --quiet            no progress on stderr\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *fmt, const char *arg)
{
    fprintf(stderr, "optree-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

/* ---- options --------------------------------------------------------------- */

/* "1e6", "4096", "2.5e3": a positive count, or -1. */
static int64_t count_of(const char *s, const char **end)
{
    char *e;
    double v = strtod(s, &e);
    *end = e;
    if (e == s || !(v >= 1) || v > 1e12 || v != floor(v)) return -1;
    return (int64_t)v;
}

/* a, then 1, 2 and 5 times each power of ten between, then b. */
static int add_range(run *r, int64_t a, int64_t b)
{
    if (a > b || r->nsize >= MAX_SIZES) return -1;
    r->sizes[r->nsize++] = a;
    for (double dec = pow(10, floor(log10((double)a))); dec <= (double)b; dec *= 10)
        for (int m = 0; m < 3; m++) {
            int64_t v = (int64_t)llround(dec * (m == 0 ? 1 : m == 1 ? 2 : 5));
            if (v <= a || v >= b) continue;
            if (r->nsize >= MAX_SIZES) return -1;
            r->sizes[r->nsize++] = v;
        }
    if (r->nsize >= MAX_SIZES) return -1;
    r->sizes[r->nsize++] = b;
    return 0;
}

static int cmp_size(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* Sizes sorted, each once. */
static int parse_sizes(run *r, const char *s)
{
    r->nsize = 0;
    while (*s) {
        const char *e;
        int64_t a = count_of(s, &e), b = a;
        if (a < 0) return -1;
        if (strncmp(e, "..", 2) == 0 && (b = count_of(e + 2, &e)) < 0) return -1;
        if (add_range(r, a, b)) return -1;
        if (*e == ',') e++;
        else if (*e) return -1;
        s = e;
    }
    qsort(r->sizes, (size_t)r->nsize, sizeof *r->sizes, cmp_size);
    int k = 0;
    for (int i = 0; i < r->nsize; i++)
        if (!k || r->sizes[k - 1] != r->sizes[i]) r->sizes[k++] = r->sizes[i];
    r->nsize = k;
    return k ? 0 : -1;
}

/* A comma-separated list into items (pointers into s, which strtok cuts):
 * 1 to MAX_LIST items, else -1 with s untouched, for the message. An
 * empty list ("--backend ,") made no configuration, so the run measured
 * nothing and exited 0, and items past MAX_LIST were dropped unsaid. */
static int split_list(char *s, char **items)
{
    int n = 0;
    for (const char *p = s; *p; n++) {
        p += strspn(p, ",");
        if (!*p) break;
        p += strcspn(p, ",");
    }
    if (n < 1 || n > MAX_LIST) return -1;
    n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) items[n++] = tok;
    return n;
}

typedef struct axes {
    char *backend[MAX_LIST], *isa[MAX_LIST], *dtype[MAX_LIST], *fusion[MAX_LIST], *acc[MAX_LIST];
    int threads[MAX_LIST];
    int nb, ni, nd, nf, na, nt;
} axes;

static int config_value(const char *what, const char *v, config *c)
{
    if (strcmp(what, "dtype") == 0) {
        if (strcmp(v, "f32") == 0) c->dtype = OT_F32;
        else if (strcmp(v, "f64") == 0) c->dtype = OT_F64;
        else return -1;
    } else if (strcmp(what, "fusion") == 0) {
        if (strcmp(v, "on") == 0) c->fusion = OT_FUSION_ON;
        else if (strcmp(v, "off") == 0) c->fusion = OT_FUSION_OFF;
        else return -1;
    } else if (strcmp(what, "accuracy") == 0) {
        if (strcmp(v, "u10") == 0) c->accuracy = OT_ULP10;
        else if (strcmp(v, "u35") == 0) c->accuracy = OT_ULP35;
        else return -1;
    }
    return 0;
}

/* Every combination of the lists, backend outermost. */
static int configs(run *r, const axes *ax)
{
    r->ncfg = 0;
    for (int b = 0; b < ax->nb; b++)
        for (int i = 0; i < ax->ni; i++)
            for (int t = 0; t < ax->nt; t++)
                for (int d = 0; d < ax->nd; d++)
                    for (int f = 0; f < ax->nf; f++)
                        for (int a = 0; a < ax->na; a++) {
                            if (r->ncfg >= (int)(sizeof r->cfg / sizeof *r->cfg)) return -1;
                            config c = {.backend = ax->backend[b],
                                        .isa = strcmp(ax->isa[i], "default") ? ax->isa[i] : NULL,
                                        .threads = ax->threads[t]};
                            if (config_value("dtype", ax->dtype[d], &c) ||
                                config_value("fusion", ax->fusion[f], &c) ||
                                config_value("accuracy", ax->acc[a], &c))
                                return -1;
                            r->cfg[r->ncfg++] = c;
                        }
    return 0;
}

static int parse_threads(axes *ax, char *s)
{
    char *items[MAX_LIST];
    ax->nt = split_list(s, items);
    if (ax->nt < 0) return -1;
    for (int i = 0; i < ax->nt; i++) {
        char *e;
        long v = strtol(items[i], &e, 10);
        if (*e || v < 1 || v > 256) return -1;
        ax->threads[i] = (int)v;
    }
    return ax->nt ? 0 : -1;
}

static bool takes_value(const char *o)
{
    static const char *const opts[] = {"--n", "--cols", "--repeat", "--compare", "--plot",
                                       "--threads", "--backend", "--isa", "--dtype", "--fusion",
                                       "--accuracy"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        if (strcmp(o, opts[i]) == 0) return true;
    return false;
}

/* The options without a value; false when o is none of them. */
static bool flag_option(const char *o, run *r)
{
    if (strcmp(o, "--explain") == 0) r->explain = true;
    else if (strcmp(o, "--peers") == 0) r->peers = true;
    else if (strcmp(o, "--quiet") == 0) r->quiet = true;
    else if (strcmp(o, "--remeasure") == 0) r->remeasure = true;
    else if (strcmp(o, "--csv") == 0) r->csv = true;
    else if (strcmp(o, "--json") == 0) r->json = true;
    else return false;
    return true;
}

/* Option o (one that takes_value) with its value v; die's code when v is bad. */
static int value_option(const char *o, char *v, run *r, axes *ax, const char **compare)
{
    if (strcmp(o, "--n") == 0) {
        if (parse_sizes(r, v)) return die("bad --n '%s' (1e6, 64,1e4 or 1e3..1e8)", v);
    } else if (strcmp(o, "--cols") == 0) {
        const char *e;
        if ((r->cols = count_of(v, &e)) < 0 || *e) return die("bad --cols '%s'", v);
    } else if (strcmp(o, "--repeat") == 0) {
        const char *e;
        int64_t k = count_of(v, &e);
        if (k < 1 || k > 10000 || *e) return die("bad --repeat '%s'", v);
        r->repeat = (int)k;
    } else if (strcmp(o, "--compare") == 0) {
        *compare = v;
    } else if (strcmp(o, "--plot") == 0) {
        if (report_plot_check(v)) return 2;   /* before the run, not after it */
        r->plot = v;
    } else if (strcmp(o, "--threads") == 0) {
        if (parse_threads(ax, v)) return die("bad --threads '%s' (1 to 16 counts of 1..256)", v);
    } else {
        int *n = &ax->na;   /* --accuracy */
        char **items = ax->acc;
        if (strcmp(o, "--backend") == 0) n = &ax->nb, items = ax->backend;
        else if (strcmp(o, "--isa") == 0) n = &ax->ni, items = ax->isa;
        else if (strcmp(o, "--dtype") == 0) n = &ax->nd, items = ax->dtype;
        else if (strcmp(o, "--fusion") == 0) n = &ax->nf, items = ax->fusion;
        if ((*n = split_list(v, items)) < 0) {
            fprintf(stderr, "optree-bench: bad %s '%s' (1 to %d values, comma-separated)\n", o, v,
                    MAX_LIST);
            return 2;
        }
    }
    return 0;
}

static int parse_args(int argc, char **argv, run *r)
{
    static char def_b[] = "cpu", def_i[] = "default", def_d[] = "f32", def_f[] = "on",
                def_a[] = "u10";
    axes ax = {.backend = {def_b}, .isa = {def_i}, .dtype = {def_d}, .fusion = {def_f},
               .acc = {def_a}, .threads = {1}, .nb = 1, .ni = 1, .nd = 1, .nf = 1, .na = 1, .nt = 1};
    const char *compare = NULL;
    r->repeat = 15;
    if (parse_sizes(r, "1e3..1e7")) return 2;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            fputs(usage, stdout);
            exit(0);
        } else if (o[0] != '-' || (o[1] && isdigit((unsigned char)o[1]))) {
            if (r->exprs[0]) return die("more than one expression (use --compare): '%s'", o);
            r->exprs[0] = o;
        } else if (!flag_option(o, r)) {
            if (!takes_value(o)) return die("unknown option '%s' (--help lists them)", o);
            if (!v) return die("%s needs a value", o);
            int rc = value_option(o, v, r, &ax, &compare);
            if (rc) return rc;
            i++;
        }
    }
    r->exprs[1] = compare;
    r->nexpr = compare ? 2 : 1;
    if (!r->exprs[0]) return die("%s", "no expression given (optree-bench 'tanh(a*b + a/b)')");
    if (configs(r, &ax)) return die("%s", "bad --dtype, --fusion or --accuracy value, or too many configurations");
    if (r->csv && r->json) return die("%s", "--csv and --json both given");
    return 0;
}

/* ---- operands ---------------------------------------------------------------- */

static bool reserved(const char *s)
{
    static const char *const words[] = {"inf", "nan", "True", "False", "true", "false", "f32",
                                        "f64", "i32", "float32", "float64", "int32"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strcmp(s, words[i]) == 0) return true;
    return false;
}

/* The input names of an expression: identifiers that are not calls,
 * keywords of a call (name=), or the parser's reserved words. */
static int input_names(const char *e, char names[][NAME_LEN])
{
    int n = 0;
    for (const char *p = e; *p;) {
        if (!(isalpha((unsigned char)*p) || *p == '_') || (p > e && (isalnum((unsigned char)p[-1]) || p[-1] == '.'))) {
            p++;
            continue;
        }
        const char *s = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        const char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        size_t len = (size_t)(p - s);
        if (*q == '(' || (*q == '=' && q[1] != '=') || len >= NAME_LEN) continue;
        char w[NAME_LEN];
        memcpy(w, s, len);
        w[len] = '\0';
        bool seen = reserved(w);
        for (int i = 0; i < n && !seen; i++) seen = strcmp(names[i], w) == 0;
        if (!seen && n < MAX_NAMES) snprintf(names[n++], NAME_LEN, "%s", w);
    }
    return n;
}

/* One expression prepared at one size: inputs in [0.5, 1.5), so that log,
 * sqrt and division see ordinary values. */
typedef struct prepared {
    ot_tensor *in[MAX_NAMES], *out;
    int nin;
    ot_node *tree;
    ot_pool *pool;
} prepared;

static void prepared_free(prepared *p)
{
    if (p->pool) ot_pool_pop(p->pool);
    for (int i = 0; i < p->nin; i++) ot_tensor_free(p->in[i]);
    ot_tensor_free(p->out);
    memset(p, 0, sizeof *p);
}

static int prepare(ot_backend *be, const run *r, const char *expr, int64_t n, ot_dtype dt,
                   prepared *p)
{
    char names[MAX_NAMES][NAME_LEN];
    const char *np[MAX_NAMES];
    ot_node *nodes[MAX_NAMES];
    memset(p, 0, sizeof *p);
    p->nin = input_names(expr, names);
    ot_shape s = r->cols > 0 ? OT_SHAPE(n / r->cols > 0 ? n / r->cols : 1, r->cols) : OT_SHAPE(n);
    for (int i = 0; i < p->nin; i++) {
        ot_pool *tmp = ot_pool_push();
        p->in[i] = ot_empty(be, s, dt);
        int rc = p->in[i] ? ot_assign(p->in[i], ot_add(ot_rand(s, (uint64_t)i + 1, dt), 0.5)) : -1;
        ot_pool_pop(tmp);
        if (rc) return -1;
        np[i] = names[i];
        nodes[i] = ot_tensor_node(p->in[i]);
    }
    p->pool = ot_pool_push();
    p->tree = ot_parse(expr, p->nin, np, nodes);
    if (!p->tree) return -1;
    p->out = ot_empty(be, ot_node_shape(p->tree), ot_node_dtype(p->tree));
    return p->out && ot_assign(p->out, p->tree) == 0 ? 0 : -1;
}

/* ---- timing ------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Calls per sample: enough for about 2 ms, so that the clock's resolution
 * and a call's fixed cost are both visible but not dominant. */
static int64_t calls_per_sample(prepared *p)
{
    int64_t k = 1;
    for (;;) {
        double t0 = now();
        for (int64_t i = 0; i < k; i++) ot_assign(p->out, p->tree);
        double dt = now() - t0;
        if (dt > 2e-3 || k >= ((int64_t)1 << 24)) return k;
        k = dt > 0 ? (int64_t)fmax(2.0 * (double)k, ceil((double)k * 2.5e-3 / dt)) : 2 * k;
    }
}

/* Bytes and flops of one call, from the backend's counters. */
static void counters(ot_backend *be, prepared *p, point *pt)
{
    ot_stats a, b;
    ot_stats(be, &a);
    ot_assign(p->out, p->tree);
    ot_stats(be, &b);
    pt->bytes = (double)(b.bytes_moved - a.bytes_moved);
    pt->flops = (double)(b.elem_ops - a.elem_ops);
}

/* repeat samples of each expression, interleaved so that a drift of the
 * machine's speed hits both alike. */
static void sample(const run *r, prepared *p, const int64_t *k, point *pts)
{
    double *t[MAX_EXPRS];
    for (int e = 0; e < r->nexpr; e++) t[e] = calloc((size_t)r->repeat, sizeof(double));
    for (int s = 0; s < r->repeat; s++)
        for (int e = 0; e < r->nexpr; e++) {
            double t0 = now();
            for (int64_t i = 0; i < k[e]; i++) ot_assign(p[e].out, p[e].tree);
            t[e][s] = (now() - t0) / (double)k[e];
        }
    for (int e = 0; e < r->nexpr; e++) {
        qsort(t[e], (size_t)r->repeat, sizeof(double), cmp_double);
        pts[e].median_s = t[e][r->repeat / 2];
        pts[e].p10_s = t[e][r->repeat / 10];
        pts[e].p90_s = t[e][r->repeat - 1 - r->repeat / 10];
        free(t[e]);
    }
}

static ot_backend *backend_for(const config *c)
{
    ot_backend_opts o = {.threads = c->threads, .isa = c->isa, .fusion = c->fusion,
                         .accuracy = c->accuracy};
    return ot_backend_new(c->backend, &o);
}

static void progress(const run *r, int done, int total, const config *c, int64_t n)
{
    if (r->quiet || !isatty(2)) return;
    fprintf(stderr, "\roptree-bench: %d/%d  %s%s%s %d thread%s  n=%lld      ", done, total,
            c->backend, c->isa ? " " : "", c->isa ? c->isa : "", c->threads,
            c->threads == 1 ? "" : "s", (long long)n);
    if (done == total) fputs("\n", stderr);
}

static int explain(const run *r, ot_backend *be, const config *c, char *label)
{
    for (int e = 0; e < r->nexpr; e++) {
        prepared p;
        int rc = prepare(be, r, r->exprs[e], r->sizes[0], c->dtype, &p);
        if (!rc) {
            printf("plan of '%s' (%s, n=%lld):\n", r->exprs[e], label, (long long)r->sizes[0]);
            ot_explain(p.tree, stdout);
        }
        prepared_free(&p);
        if (rc) return rc;
    }
    return 0;
}

/* The GEMM that runs the cpu backend's dots (OpenBLAS core, its rate
 * against the FMA peak): the "gemm:" line of a dot's plan. */
static void gemm_line(run *r, ot_backend *be)
{
    char *text = NULL;
    size_t len = 0;
    if (r->gemm[0]) return;   /* one line: the core is the process's */
    FILE *f = open_memstream(&text, &len);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_full(be, OT_SHAPE(2, 2), OT_F32, 1.0);
    int rc = f && x ? ot_explain(ot_dot(x, x), f) : -1;
    ot_pool_pop(pool);
    ot_tensor_free(x);
    if (f) fclose(f);
    const char *at = rc == 0 && text ? strstr(text, "gemm: ") : NULL;
    if (at) snprintf(r->gemm, sizeof r->gemm, "%.*s", (int)strcspn(at, "\n"), at);
    free(text);
    ot_clear_error();
}

/* Every size of one configuration. */
static int time_config(run *r, int ci, int *done)
{
    config *c = &r->cfg[ci];
    ot_backend *be = backend_for(c);
    if (!be) return -1;
    const char *isa = ot_backend_options(be).isa;
    snprintf(r->cfg[ci].isa_used, sizeof r->cfg[ci].isa_used, "%s", isa ? isa : "-");
    if (strcmp(c->backend, "cpu") == 0) gemm_line(r, be);
    char label[128];
    cfg_label(r, ci, label, sizeof label);
    int rc = r->explain ? explain(r, be, c, label) : 0;
    for (int si = 0; si < r->nsize && !rc; si++) {
        prepared p[MAX_EXPRS];
        int64_t k[MAX_EXPRS];
        point *pts = &r->pts[r->npts];
        progress(r, (*done)++, r->ncfg * r->nsize, c, r->sizes[si]);
        int made = 0;
        for (int e = 0; e < r->nexpr && !rc; e++, made++) {
            rc = prepare(be, r, r->exprs[e], r->sizes[si], c->dtype, &p[e]);
            if (!rc) {
                pts[e] = (point){.expr = e, .cfg = ci, .n = r->sizes[si]};
                counters(be, &p[e], &pts[e]);
                k[e] = calls_per_sample(&p[e]);
            }
        }
        if (!rc) {
            sample(r, p, k, pts);
            r->npts += r->nexpr;
        }
        for (int e = 0; e < made; e++) prepared_free(&p[e]);
    }
    progress(r, *done, r->ncfg * r->nsize, c, r->sizes[r->nsize - 1]);
    ot_backend_free(be);
    return rc;
}

int main(int argc, char **argv)
{
    run r = {0};
    int rc = parse_args(argc, argv, &r);
    if (rc) return rc;
    r.pts = calloc((size_t)(r.ncfg * r.nsize * r.nexpr), sizeof *r.pts);
    r.lim = calloc((size_t)r.ncfg, sizeof *r.lim);
    if (!r.pts || !r.lim) return die("%s", "out of memory");
    for (int c = 0; c < r.ncfg; c++) {
        int same = 0;
        while (same < c && r.cfg[same].threads != r.cfg[c].threads) same++;
        if (limits_get(r.cfg[c].threads, r.cfg[c].dtype, r.remeasure && same == c, &r.lim[c]))
            fprintf(stderr, "optree-bench: could not measure the memory bandwidth\n");
    }
    int done = 0;
    for (int c = 0; c < r.ncfg && !rc; c++) rc = time_config(&r, c, &done);
    if (rc) {
        fprintf(stderr, "optree-bench: %s\n", ot_errmsg());
        rc = 1;
    }
    if (!rc && r.peers && peers_time(&r))
        fprintf(stderr, "optree-bench: peers not timed (python3 with NumPy not found)\n");
    if (!rc) {
        if (r.csv) report_csv(&r, stdout);
        else if (r.json) report_json(&r, stdout);
        else report_table(&r, stdout);
        if (r.plot && report_plot(&r, r.plot)) rc = 1;
    }
    free(r.pts);
    free(r.lim);
    ot_pool_drain();
    return rc;
}
