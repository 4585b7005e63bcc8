/*
 * bench.h - declarations shared by the files of the benchmark (bench/): the
 * table of cases (workloads.c), the hand-written reference loops
 * (ref_avx2.c) and the report writers (report.c). The suite, its method and
 * its targets are those of BENCH.md.
 */
#ifndef BENCH_H
#define BENCH_H

#include <optree.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <stdint.h>

#define BENCH_MAX_IN 10

/* The host side of one case: its float32 inputs and output shape. */
typedef struct bench_data {
    int n_in;
    ot_shape in_shape[BENCH_MAX_IN];
    float *in[BENCH_MAX_IN];
    ot_shape out_shape;
    size_t out_numel;
    /* A case's own working memory (one malloc block, set by its fill hook,
     * freed with the data): W10's GEMM-floor buffers. */
    void *scratch;
} bench_data;

/* How a case is judged: fused/reference against a ratio, or the fused time
 * per call against an absolute number of microseconds (W8). */
typedef enum { TARGET_RATIO, TARGET_US } target_kind;

/* One row of the suite. Several rows may share a BENCH.md id (an extra tree
 * or an extra reference for the same workload); --only selects by id. */
typedef struct bench_case {
    const char *id;
    const char *label;
    const char *ref_label;      /* what the reference loop is */
    target_kind kind;
    double target;
    /* Fills n_in, in_shape and out_shape; quick picks smoke-test sizes. */
    void (*shapes)(bench_data *d, bool quick);
    /* The tree reads input 0 through ot_transpose(in0, NULL), a view. */
    bool transpose_in0;
    /* Builds the tree in the current pool from the leaf tensors. */
    ot_node *(*tree)(ot_tensor *const in[]);
    /* When set, what a timed call runs instead of ot_assign(out, tree(in)),
     * in the current pool: for cases with several outputs, which it writes
     * into views of out (W7: the two gradients as the rows of out). */
    int (*assign)(ot_tensor *out, ot_tensor *const in[]);
    /* The reference loop: writes out_numel floats. It is timed for
     * TARGET_RATIO cases and used only to check results for TARGET_US. */
    void (*ref)(const bench_data *d, float *out);
    /* Results are compared relative to max(|reference|, err_floor); 0 means
     * relative everywhere. Where the math cancels (W7's 1 - tanh^2 and
     * a - a/b^2), values near zero carry absolute rounding error only. */
    double err_floor;
    /* Assignments per timed run (W8 times many small ones); 0 means 1. The
     * reference is run as many times per timed run. */
    long calls, quick_calls;

    /* ---- optional hooks, for cases beyond one stateless tree (W6, W10) ---- */
    /* Fills the inputs (allocated by the driver from in_shape) with the case's
     * own data, drawing from the seed; NULL: uniform in [0.5, 2.0). */
    void (*fill)(bench_data *d, uint64_t seed);
    /* Set for stateful cases, whose assign updates its inputs in place (W10:
     * a training step moves the weights and velocities). Results are then
     * checked by restoring every input from the host data, running assign
     * once and writing what it updated into out with collect. */
    int (*collect)(ot_tensor *out, ot_tensor *const in[]);
    /* The expected output, when the timed reference computes something else
     * (W10 times the step's GEMM calls alone; this runs the whole step). */
    void (*check_ref)(const bench_data *d, float *out);
    /* --explain: prints the plan of one call to f; NULL: ot_explain of tree. */
    void (*explain)(FILE *f, ot_tensor *const in[]);
    /* The size column, when out_shape does not describe the case. */
    const char *size;
    /* The verdict also needs unfused/fused > 1 (W10). */
    bool beat_unfused;
} bench_case;

extern const bench_case bench_cases[];
extern const int bench_ncases;

/* ---- reference loops (ref_avx2.c: AVX2+FMA, SLEEF u10, one thread) ------- */

void ref_w1(float *o, const float *a, const float *b, const float *c, size_t n);
void ref_w2(float *o, const float *a, size_t n);
void ref_w3(float *o, const float *a, const float *b, size_t n);
void ref_w4(float *o, const float *a, const float *b, const float *c, size_t n);
void ref_w5(float *o, const float *x, size_t rows, size_t cols);
/* The gradients of tanh(a*b + a/b) w.r.t. a into ga and w.r.t. b into gb. */
void ref_w7(float *ga, float *gb, const float *a, const float *b, size_t n);
/* o (n x n) = transpose(x) * col[:, None] + row[None, :]. */
void ref_w9_scalar(float *o, const float *x, const float *col, const float *row, size_t n);
void ref_w9_avx2(float *o, const float *x, const float *col, const float *row, size_t n);
/* o (rows x cols) = max(o + bias[None, :], 0) in place: the epilogue pass
 * after an sgemm. */
void ref_bias_relu(float *o, const float *bias, size_t rows, size_t cols);

/* ---- shared helpers (bench.c) -------------------------------------------- */

/* splitmix64 on *state: a small seedable generator, ample for test data. */
uint64_t bench_rand(uint64_t *state);
/* n floats uniform in [lo, hi). */
void bench_fill_uniform(float *p, size_t n, float lo, float hi, uint64_t *state);
/* Exits with a message (for setup failures: OOM, a library error). */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* ---- W10: one training step of an MLP (w_train.c) ------------------------- */

void w10_shapes(bench_data *d, bool quick);
void w10_fill(bench_data *d, uint64_t seed);
int w10_step(ot_tensor *out, ot_tensor *const in[]);      /* plain SGD */
int w10m_step(ot_tensor *out, ot_tensor *const in[]);     /* momentum, decay */
int w10_collect(ot_tensor *out, ot_tensor *const in[]);
void w10_gemm_floor(const bench_data *d, float *out);
void w10_ref_step(const bench_data *d, float *out);
void w10m_ref_step(const bench_data *d, float *out);
void w10_explain(FILE *f, ot_tensor *const in[]);
void w10m_explain(FILE *f, ot_tensor *const in[]);

/* ---- W11: one training step of an LSTM (w_lstm.c) ------------------------ */

/* The row's reference line, with PyTorch's median when it was measured. */
extern char w11_ref_label[];
void w11_shapes(bench_data *d, bool quick);
void w11_fill(bench_data *d, uint64_t seed);
int w11_step(ot_tensor *out, ot_tensor *const in[]);
int w11_collect(ot_tensor *out, ot_tensor *const in[]);
void w11_ref_step(const bench_data *d, float *out);
void w11_explain(FILE *f, ot_tensor *const in[]);

/* ---- results and reports (report.c) -------------------------------------- */

/* One measured row. Times are medians: ms per assignment for TARGET_RATIO
 * cases, µs per assignment for TARGET_US ones; negative means not measured.
 * err is the largest relative error of any optree variant against the
 * reference output, negative when unchecked. */
typedef struct bench_row {
    const bench_case *c;
    char size[32];
    double fused, unfused, ref, fused2;
    double err;
    bool wrong;                 /* err beyond the tolerance */
    /* Kernels one call runs (the backend's stats): fused, unfused; -1 when
     * not counted. */
    long kernels, kernels_unfused;
} bench_row;

typedef struct bench_machine {
    char cpu[128];
    char isa[96];
    char date[40];
    const char *backend;
    int runs;
    bool quick;
} bench_machine;

/* "PASS", "MISS", "WRONG" (results off) or "n/a" (no reference). */
const char *bench_verdict(const bench_row *r);
void report_text(FILE *f, const bench_machine *m, const bench_row *rows, int n);
void report_csv(FILE *f, const bench_row *rows, int n);
void report_md(FILE *f, const bench_machine *m, const bench_row *rows, int n);

#endif /* BENCH_H */
