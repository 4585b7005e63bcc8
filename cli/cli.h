/*
 * cli.h - optree-bench's shared types: the configurations it times, one
 * measured point, the machine's limits, and the functions of its files
 * (main.c: options and the timing loop; limits.c: triad bandwidth and FMA
 * peak, measured once and cached; report.c: table, CSV, JSON and plot;
 * peers.c: NumPy and numexpr through Debian's python3; spawn.c: helper
 * programs run with no shell).
 */
#ifndef OT_CLI_H
#define OT_CLI_H

#include "optree.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

enum { MAX_LIST = 16, MAX_SIZES = 64, MAX_EXPRS = 2 };

/* One way of running an expression. */
typedef struct config {
    const char *backend;  /* "cpu" or "ref" */
    const char *isa;      /* NULL: the widest the CPU runs */
    int threads;
    ot_dtype dtype;
    int fusion;           /* OT_FUSION_ON / OT_FUSION_OFF */
    int accuracy;         /* OT_ULP10 / OT_ULP35 */
    char isa_used[16];    /* the ISA in force, once the backend is made */
} config;

/* One expression at one size in one configuration. */
typedef struct point {
    int expr, cfg;
    int64_t n;
    double median_s, p10_s, p90_s;   /* seconds per call */
    double bytes, flops;             /* per call, from the backend's counters */
    double numpy_s, numexpr_s;       /* peers' seconds per call; 0: not run */
} point;

/* What the machine can do, for the fractions. */
typedef struct limits {
    double triad_gbs;     /* STREAM-style a = b + s*c, best store mode */
    double fma_gflops;    /* all threads' FMA peak in the dtype */
    bool cached;          /* read from the cache file */
} limits;

typedef struct run {
    const char *exprs[MAX_EXPRS];
    int nexpr;
    config cfg[MAX_LIST * 4];
    int ncfg;
    int64_t sizes[MAX_SIZES];
    int nsize;
    int64_t cols;         /* > 0: inputs are (n/cols, cols) */
    int repeat;
    bool explain, peers, quiet, remeasure, csv, json;
    const char *plot;
    point *pts;
    int npts;
    limits *lim;          /* per configuration */
    char gemm[512];       /* ot_explain's gemm line (cpu backends), or "" */
} run;

/* limits.c */
int limits_get(int threads, ot_dtype dtype, bool remeasure, limits *out);
/* Data cache sizes in bytes by level (1..3; 0 where unknown), from sysfs. */
void cache_sizes(int64_t size[4]);

/* report.c */
void report_table(const run *r, FILE *f);
void report_csv(const run *r, FILE *f);
void report_json(const run *r, FILE *f);
int report_plot(const run *r, const char *path);
/* 0 when --plot path can be written; else -1, the reason on stderr. */
int report_plot_check(const char *path);
const char *cfg_label(const run *r, int cfg, char *buf, size_t n);

/* peers.c */
int peers_time(run *r);

/* spawn.c */
FILE *spawn_pipe(char *const argv[], const char *mode, pid_t *pid);
int spawn_wait(FILE *f, pid_t pid);

#endif
