/*
 * report.c - optree-bench's output: a table per expression and
 * configuration with a closing line on the bandwidth reached and the
 * per-call time, CSV and JSON with every field, and a gnuplot plot of
 * throughput against size with the triad roofline and the cache sizes.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cfg_label(const run *r, int ci, char *buf, size_t n)
{
    const config *c = &r->cfg[ci];
    snprintf(buf, n, "%s %s, %d thread%s, %s, fusion %s, %s", c->backend,
             c->isa_used[0] ? c->isa_used : c->isa ? c->isa : "default ISA", c->threads,
             c->threads == 1 ? "" : "s", c->dtype == OT_F64 ? "f64" : "f32",
             c->fusion == OT_FUSION_OFF ? "off" : "on", c->accuracy == OT_ULP35 ? "u35" : "u10");
    return buf;
}

static double elems_per_s(const point *p) { return (double)p->n / p->median_s; }
static double gbs(const point *p) { return p->bytes / p->median_s / 1e9; }
static double gflops(const point *p) { return p->flops / p->median_s / 1e9; }
static double spread(const point *p) { return (p->p90_s - p->p10_s) / p->median_s; }

/* The point of expression 0 matching p's configuration and size. */
static const point *first_expr(const run *r, const point *p)
{
    for (int i = 0; i < r->npts; i++)
        if (r->pts[i].expr == 0 && r->pts[i].cfg == p->cfg && r->pts[i].n == p->n) return &r->pts[i];
    return NULL;
}

static void table_row(const run *r, const point *p, FILE *f)
{
    const limits *l = &r->lim[p->cfg];
    fprintf(f, "%12lld %10.3g %6.1f%% %11.0f %10.1f %12.0f %8.2f %6.0f%% %8.2f %6.1f%%",
            (long long)p->n, p->median_s, 100 * spread(p), p->median_s * 1e9,
            elems_per_s(p) / 1e6, p->bytes, gbs(p), l->triad_gbs > 0 ? 100 * gbs(p) / l->triad_gbs : 0,
            gflops(p), l->fma_gflops > 0 ? 100 * gflops(p) / l->fma_gflops : 0);
    if (p->expr == 1) {
        const point *q = first_expr(r, p);
        fprintf(f, " %7.2fx", q ? p->median_s / q->median_s : NAN);
    }
    if (r->peers)
        fprintf(f, " %8.2fx %8.2fx", p->numpy_s > 0 ? p->numpy_s / p->median_s : NAN,
                p->numexpr_s > 0 ? p->numexpr_s / p->median_s : NAN);
    fputc('\n', f);
}

/* The time of a call at a small size and how much of it is the per-call
 * overhead: the call less its elements at the best per-element time of
 * the block (when a larger size showed one). */
static void per_call(const run *r, const point *small, FILE *f)
{
    double best = INFINITY;
    for (int i = 0; i < r->npts; i++) {
        const point *p = &r->pts[i];
        if (p->expr == small->expr && p->cfg == small->cfg && p->n >= 64 * small->n)
            best = fmin(best, p->median_s / (double)p->n);
    }
    double t = small->median_s * 1e9;
    if (isfinite(best))
        fprintf(f, "  at n=%lld: %.0f ns per call, of which about %.0f ns is per-call overhead "
                   "(the rest: %lld elements at %.3f ns, the best per-element time above)\n",
                (long long)small->n, t, fmax(0, t - (double)small->n * best * 1e9),
                (long long)small->n, best * 1e9);
    else
        fprintf(f, "  at n=%lld: %.0f ns per call, %.2f ns per element (at this size mostly "
                   "per-call overhead; add a size of 1e6 to separate the two)\n",
                (long long)small->n, t, t / (double)small->n);
}

/* What the block shows at its ends: the bandwidth reached at the largest
 * size (is the expression at the memory limit?) and the time of a call at
 * the smallest (its fixed cost, when the size is small). */
static void block_summary(const run *r, const point *first, const point *last, FILE *f)
{
    const limits *l = &r->lim[last->cfg];
    int64_t cache[4];
    cache_sizes(cache);
    bool in_memory = cache[3] > 0 && last->bytes > 2.0 * (double)cache[3];
    if (l->triad_gbs > 0)
        fprintf(f, "  at n=%lld: %.1f GB/s, %.0f%% of the measured triad bandwidth (%.1f GB/s)%s\n",
                (long long)last->n, gbs(last), 100 * gbs(last) / l->triad_gbs, l->triad_gbs,
                !in_memory ? "; the data fit in the caches, which are faster than memory"
                : gbs(last) >= 0.8 * l->triad_gbs ? ": at the memory limit" : "");
    if (first->n <= 4096) per_call(r, first, f);
}

void report_table(const run *r, FILE *f)
{
    char label[128];
    if (r->gemm[0]) fprintf(f, "\n%s\n", r->gemm);
    for (int e = 0; e < r->nexpr; e++)
        for (int c = 0; c < r->ncfg; c++) {
            const point *first = NULL, *last = NULL;
            fprintf(f, "\n'%s'  [%s]  triad %.1f GB/s, FMA peak %.0f GFLOP/s\n", r->exprs[e],
                    cfg_label(r, c, label, sizeof label), r->lim[c].triad_gbs, r->lim[c].fma_gflops);
            fprintf(f, "%12s %10s %7s %11s %10s %12s %8s %7s %8s %7s%s%s\n", "n", "median s",
                    "spread", "ns/call", "Melem/s", "bytes/call", "GB/s", "%triad", "GFLOP/s",
                    "%peak", e == 1 ? "  vs 1st" : "", r->peers ? "    numpy  numexpr" : "");
            for (int i = 0; i < r->npts; i++) {
                const point *p = &r->pts[i];
                if (p->expr != e || p->cfg != c) continue;
                if (!first) first = p;
                last = p;
                table_row(r, p, f);
            }
            if (last) block_summary(r, first, last, f);
        }
    if (r->peers) fprintf(f, "\nnumpy, numexpr: their time over optree's (above 1: optree is faster)\n");
}

/* A peer's time, or an empty cell where it was not measured (no --peers,
 * or the peer could not run the expression), as JSON writes null. */
static void csv_peer(FILE *f, double v, const char *end)
{
    if (isfinite(v) && v != 0) fprintf(f, "%.6g", v);
    fputs(end, f);
}

/* A CSV field in quotes, a quote in it doubled (RFC 4180). */
static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) fputs(*s == '"' ? "\"\"" : (char[]){*s, 0}, f);
    fputc('"', f);
}

void report_csv(const run *r, FILE *f)
{
    fprintf(f, "expr,backend,isa,threads,dtype,fusion,accuracy,n,median_s,p10_s,p90_s,bytes,flops,"
               "elems_per_s,gb_per_s,gflop_per_s,triad_gb_per_s,fma_gflop_per_s,numpy_s,numexpr_s\n");
    for (int i = 0; i < r->npts; i++) {
        const point *p = &r->pts[i];
        const config *c = &r->cfg[p->cfg];
        csv_str(f, r->exprs[p->expr]);
        fprintf(f, ",%s,%s,%d,%s,%s,%s,%lld,%.6g,%.6g,%.6g,%.0f,%.0f,%.6g,%.6g,%.6g,%.4g,%.4g,",
                c->backend, c->isa_used, c->threads,
                c->dtype == OT_F64 ? "f64" : "f32", c->fusion == OT_FUSION_OFF ? "off" : "on",
                c->accuracy == OT_ULP35 ? "u35" : "u10", (long long)p->n, p->median_s, p->p10_s,
                p->p90_s, p->bytes, p->flops, elems_per_s(p), gbs(p), gflops(p),
                r->lim[p->cfg].triad_gbs, r->lim[p->cfg].fma_gflops);
        csv_peer(f, p->numpy_s, ",");
        csv_peer(f, p->numexpr_s, "\n");
    }
}

/* A JSON string: the expression may hold quotes or backslashes. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

/* NaN and zero peer times are null in JSON. */
static void json_num(FILE *f, const char *key, double v, bool last)
{
    if (isfinite(v) && v != 0) fprintf(f, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
    else fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

void report_json(const run *r, FILE *f)
{
    int64_t cache[4];
    cache_sizes(cache);
    fprintf(f, "{\"expressions\": [");
    for (int e = 0; e < r->nexpr; e++) {
        json_str(f, r->exprs[e]);
        fputs(e + 1 < r->nexpr ? ", " : "", f);
    }
    fprintf(f, "],\n \"caches\": {\"l1\": %lld, \"l2\": %lld, \"l3\": %lld},\n \"configs\": [\n",
            (long long)cache[1], (long long)cache[2], (long long)cache[3]);
    for (int c = 0; c < r->ncfg; c++) {
        const config *g = &r->cfg[c];
        fprintf(f, "  {\"backend\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"dtype\": \"%s\", "
                   "\"fusion\": \"%s\", \"accuracy\": \"%s\", \"triad_gb_per_s\": %.4g, "
                   "\"fma_gflop_per_s\": %.4g}%s\n",
                g->backend, g->isa_used, g->threads, g->dtype == OT_F64 ? "f64" : "f32",
                g->fusion == OT_FUSION_OFF ? "off" : "on", g->accuracy == OT_ULP35 ? "u35" : "u10",
                r->lim[c].triad_gbs, r->lim[c].fma_gflops, c + 1 < r->ncfg ? "," : "");
    }
    fprintf(f, " ],\n \"points\": [\n");
    for (int i = 0; i < r->npts; i++) {
        const point *p = &r->pts[i];
        fprintf(f, "  {\"expr\": %d, \"config\": %d, \"n\": %lld, ", p->expr, p->cfg, (long long)p->n);
        json_num(f, "median_s", p->median_s, false);
        json_num(f, "p10_s", p->p10_s, false);
        json_num(f, "p90_s", p->p90_s, false);
        fprintf(f, "\"bytes\": %.0f, \"flops\": %.0f, ", p->bytes, p->flops);
        json_num(f, "elems_per_s", elems_per_s(p), false);
        json_num(f, "gb_per_s", gbs(p), false);
        json_num(f, "gflop_per_s", gflops(p), false);
        json_num(f, "numpy_s", p->numpy_s, false);
        json_num(f, "numexpr_s", p->numexpr_s, true);
        fprintf(f, "}%s\n", i + 1 < r->npts ? "," : "");
    }
    fprintf(f, " ]\n}\n");
}

/* ---- the plot ------------------------------------------------------------------ */

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Bytes per element of a (expr, cfg) block at its largest size: what the
 * roofline and the cache lines are drawn from. */
static double bytes_per_elem(const run *r, int e, int c)
{
    double b = 0;
    for (int i = 0; i < r->npts; i++)
        if (r->pts[i].expr == e && r->pts[i].cfg == c) b = r->pts[i].bytes / (double)r->pts[i].n;
    return b;
}

/* A single-quoted gnuplot string: gnuplot substitutes neither backquotes
 * nor macros inside single quotes and has no escapes there but '' for a
 * quote; a control character (which would end the command) becomes a
 * space. Titles are drawn noenhanced, so no character is markup either. */
static void gp_str(FILE *g, const char *s)
{
    fputc('\'', g);
    for (; *s; s++)
        fputs(*s == '\'' ? "''" : (unsigned char)*s < 0x20 ? " " : (char[]){*s, 0}, g);
    fputc('\'', g);
}

/* The points as a datablock inside the script, one index per block. */
static void plot_data(const run *r, FILE *g)
{
    fprintf(g, "$data << EOD\n");
    for (int e = 0; e < r->nexpr; e++)
        for (int c = 0; c < r->ncfg; c++) {
            for (int i = 0; i < r->npts; i++)
                if (r->pts[i].expr == e && r->pts[i].cfg == c)
                    fprintf(g, "%lld %.6g\n", (long long)r->pts[i].n, elems_per_s(&r->pts[i]));
            fprintf(g, "\n\n");
        }
    fprintf(g, "EOD\n");
}

/* The script; the output file is the script's first argument (ARG1), so
 * the name never appears in the script's text. */
static void plot_script(const run *r, FILE *g, bool png)
{
    char label[128];
    int64_t cache[4];
    cache_sizes(cache);
    double bpe = bytes_per_elem(r, 0, 0);
    if (png) fprintf(g, "set terminal pngcairo size 960,600 font 'sans,11' noenhanced\n");
    else fprintf(g, "set terminal svg size 960,600 font 'sans,12' background '#ffffff' noenhanced\n");
    fprintf(g, "set output ARG1\nset logscale xy\nset grid\nset key top left\n"
               "set xlabel 'elements (n)'\nset ylabel 'elements per second'\n"
               "set title 'optree-bench: '.");
    gp_str(g, r->exprs[0]);
    fputc('\n', g);
    for (int lvl = 1; lvl <= 3 && bpe > 0; lvl++) {
        if (cache[lvl] <= 0) continue;
        double n = (double)cache[lvl] / bpe;
        fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lc rgb '#888888'\n", n, n);
        fprintf(g, "set label 'L%d (%lld KiB)' at %g, graph 0.04 left offset 0.5,0 tc rgb '#666666'\n",
                lvl, (long long)(cache[lvl] / 1024), n);
    }
    plot_data(r, g);
    fprintf(g, "plot ");
    int k = 0;
    for (int e = 0; e < r->nexpr; e++)
        for (int c = 0; c < r->ncfg; c++, k++) {
            fprintf(g, "%s$data index %d with linespoints lw 2 title ", k ? ", " : "", k);
            gp_str(g, r->nexpr > 1 ? r->exprs[e] : "");
            fputc('.', g);
            gp_str(g, r->nexpr > 1 && r->ncfg == 1 ? "" : cfg_label(r, c, label, sizeof label));
        }
    if (bpe > 0 && r->lim[0].triad_gbs > 0)
        fprintf(g, ", %g with lines dt 3 lw 2 lc rgb '#cc0000' title 'memory roofline (triad %.1f GB/s / %.0f bytes per element)'",
                r->lim[0].triad_gbs * 1e9 / bpe, r->lim[0].triad_gbs, bpe);
    fputc('\n', g);
}

/* Whether the plot can be written at path: a .svg or .png name in an
 * existing, writable directory (checked when the options are read: found
 * at the end, a bad name or directory cost the whole run its plot). */
int report_plot_check(const char *path)
{
    if (!has_suffix(path, ".svg") && !has_suffix(path, ".png")) {
        fprintf(stderr, "optree-bench: --plot wants a .svg or .png file, not '%s'\n", path);
        return -1;
    }
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) + 1 : 0;   /* the directory, "/" kept */
    char *dir = len ? malloc(len + 1) : NULL;
    if (dir) {
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    struct stat st;
    const char *d = dir ? dir : ".";
    int rc = (len && !dir) || stat(d, &st) != 0 || !S_ISDIR(st.st_mode) || access(d, W_OK) != 0;
    if (rc)
        fprintf(stderr, "optree-bench: --plot '%s': its directory '%s' is not a writable "
                        "directory\n", path, d);
    free(dir);
    return rc ? -1 : 0;
}

/* gnuplot runs from an argument vector, its script on a pipe and the file
 * name as the script's argument: no shell and no gnuplot text ever holds
 * the name, so no character of it is interpreted. */
int report_plot(const run *r, const char *path)
{
    if (!has_suffix(path, ".svg") && !has_suffix(path, ".png")) {
        fprintf(stderr, "optree-bench: --plot wants a .svg or .png file, not '%s'\n", path);
        return -1;
    }
    char *argv[] = {"gnuplot", "-c", "/dev/stdin", (char *)path, NULL};
    pid_t pid;
    /* A gnuplot that dies early must fail the plot, not kill us by SIGPIPE. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGPIPE, &ign, &old);
    FILE *g = spawn_pipe(argv, "w", &pid);
    int rc = -1;
    if (g) {
        plot_script(r, g, has_suffix(path, ".png"));
        bool written = fflush(g) == 0;
        rc = spawn_wait(g, pid) == 0 && written ? 0 : -1;
    }
    sigaction(SIGPIPE, &old, NULL);
    if (rc) fprintf(stderr, "optree-bench: gnuplot failed or is missing (make deps installs gnuplot-nox)\n");
    return rc;
}
