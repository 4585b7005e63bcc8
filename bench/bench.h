/*
 * bench.h - declarations shared by the files of the benchmark (bench/): the
 * table of cases (workloads.c), the hand-written reference loops
 * (ref_avx512.c, ref_avx2.c) and the report writers (report.c). The suite
 * and its method are those of BENCH.md; the targets are issue 15's.
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

/* ---- reference loops (ref_avx512.c, ref_avx2.c: one thread) ------------- */

/* How a reference loop writes its output: ordinary stores, or streaming
 * (non-temporal) stores, which bypass the caches and save the read of each
 * output line before it is written. Which is faster depends on the loop's
 * work per byte and on the machine, so the bench times both and compares
 * optree with the faster. */
typedef enum { STORE_ORDINARY, STORE_STREAM, STORE_MODES } store_mode;

/* The reference loops of one ISA, as a hand-tuning user writes them: one
 * pass, the ISA's widest vectors, FMA, SLEEF u10 functions. Loops taking a
 * store_mode write their output that way. Streaming starts after a head of
 * ordinary stores up to the first aligned address and is fenced before the
 * loop returns; W7 and W9 store as usual where their outputs' alignment
 * rules it out (never with the bench's 64-byte aligned buffers). */
typedef struct ref_loops {
    const char *isa;            /* for the reports: "AVX-512 ..." */
    void (*w1)(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm);
    void (*w2)(float *o, const float *a, size_t n, store_mode sm);
    void (*w3)(float *o, const float *a, const float *b, size_t n, store_mode sm);
    void (*w4)(float *o, const float *a, const float *b, const float *c, size_t n,
               store_mode sm);
    /* Row softmax; sm applies to the final rescale pass. */
    void (*w5)(float *o, const float *x, size_t rows, size_t cols, store_mode sm);
    /* The gradients of tanh(a*b + a/b) w.r.t. a into ga and w.r.t. b into gb. */
    void (*w7)(float *ga, float *gb, const float *a, const float *b, size_t n, store_mode sm);
    /* W3 on exactly 64 elements (W8): the size is a constant of the loop. */
    void (*w8)(float *o, const float *a, const float *b);
    /* o (n x n) = transpose(x) * col[:, None] + row[None, :]. */
    void (*w9)(float *o, const float *x, const float *col, const float *row, size_t n,
               store_mode sm);
    /* o (rows x cols) = max(o + bias[None, :], 0) in place: the epilogue
     * pass after an sgemm. */
    void (*bias_relu)(float *o, const float *bias, size_t rows, size_t cols);
    /* Layer norm over each row of x (rows x cols): o = (x - mean) *
     * rsqrt(var + eps) * w + b, the variance centred; rms: o = x *
     * rsqrt(mean(x^2) + eps) * w (b unused). */
    void (*ln)(float *o, const float *x, const float *w, const float *b, size_t rows, size_t cols,
               float eps, bool rms, store_mode sm);
    /* LNB: layer norm's d/dx for weight w and incoming gradient g. */
    void (*lnb)(float *o, const float *x, const float *w, const float *g, size_t rows,
                size_t cols, float eps, store_mode sm);
} ref_loops;

extern const ref_loops ref_loops_avx512, ref_loops_avx2;

/* W9 as BENCH.md writes its reference: 32x32 blocks, scalar (ref_avx2.c). */
void ref_w9_scalar(float *o, const float *x, const float *col, const float *row, size_t n);

/* Runs `loop`, which names its store mode SM, with SM a compile-time
 * constant, so that each mode is its own straight loop (for the two ref
 * files, which include immintrin.h). Streaming stores are weakly ordered:
 * the fence makes them visible before the caller reads the output. */
#define WITH_STORES(sm, loop)                         \
    do {                                              \
        if ((sm) == STORE_STREAM) {                   \
            const store_mode SM = STORE_STREAM;       \
            loop;                                     \
            _mm_sfence();                             \
        } else {                                      \
            const store_mode SM = STORE_ORDINARY;     \
            loop;                                     \
        }                                             \
    } while (0)

/* ---- cases (workloads.c) ------------------------------------------------- */

/* One row of the suite. Several rows may share a BENCH.md id (an extra tree
 * or an extra reference for the same workload); --only selects by id. */
typedef struct bench_case {
    const char *id;
    const char *label;
    const char *ref_label;      /* what the reference loop is */
    double target;              /* fused/reference at most */
    /* Times per call in microseconds, not milliseconds (small calls). */
    bool us;
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
    /* The tree is built once per variant, in a pool that lives for the
     * case, and a timed call is ot_assign alone (W3p: the fixed cost of an
     * assignment, without building). */
    bool prebuilt;
    /* The reference loop, from the ISA's loops L: writes out_numel floats,
     * in store mode sm where it has one. */
    void (*ref)(const ref_loops *L, store_mode sm, const bench_data *d, float *out);
    /* Where set and true, the reference did not run (PyTorch not
     * importable): the row has no reference time, ratio or verdict. */
    bool (*ref_absent)(void);
    /* The reference has both store modes: both are timed, and the faster
     * is the reference. */
    bool both_stores;
    /* Results are compared relative to max(|reference|, err_floor); 0 means
     * relative everywhere. Where the math cancels (W7's 1 - tanh^2 and
     * a - a/b^2), values near zero carry absolute rounding error only. */
    double err_floor;
    /* Assignments per timed run (W8 and W3p time many small ones); 0 means
     * 1. The reference is run as many times per timed run. */
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
    /* When set, the case runs as a program (W8p, W10p): built and compiled
     * once per variant over the variant's tensors, with placeholders named
     * bench_in_names[i] for inputs i < *nbind; a timed call is one
     * ot_program_run binding those inputs in place. */
    ot_program *(*program)(ot_backend *be, ot_tensor *out, ot_tensor *const in[], int *nbind);
} bench_case;

extern const char *const bench_in_names[BENCH_MAX_IN];

extern const bench_case bench_cases[];
extern const int bench_ncases;

/* ---- shared helpers (bench.c) -------------------------------------------- */

/* splitmix64 on *state: a small seedable generator, ample for test data. */
uint64_t bench_rand(uint64_t *state);
/* n floats uniform in [lo, hi). */
void bench_fill_uniform(float *p, size_t n, float lo, float hi, uint64_t *state);
/* A new f32 tensor of shape s on be, uniform in [-1, 1); exits naming row
 * when it cannot be made. */
ot_tensor *bench_rand_tensor(ot_backend *be, ot_shape s, uint64_t *seed, const char *row);
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
/* W10p: W10's step (one ot_program_sgd of the gradient trees) as a program. */
ot_program *w10_program(ot_backend *be, ot_tensor *out, ot_tensor *const in[], int *nbind);
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

/* ---- W14: one training step of the Fashion-MNIST CNN (w_cnn.c) ----------- */

/* The row's reference line: PyTorch's, or why there is none. */
extern char w14_ref_label[];
void w14_shapes(bench_data *d, bool quick);
void w14_fill(bench_data *d, uint64_t seed);
int w14_step(ot_tensor *out, ot_tensor *const in[]);
int w14_collect(ot_tensor *out, ot_tensor *const in[]);
void w14_check(const bench_data *d, float *out);
void w14_ref(const ref_loops *L, store_mode sm, const bench_data *d, float *out);
bool w14_ref_absent(void);

/* ---- W16: one training step of examples/lm.c's model (w_lm.c) ------------ */

extern char w16_ref_label[];
void w16_shapes(bench_data *d, bool quick);
void w16_fill(bench_data *d, uint64_t seed);
int w16_step(ot_tensor *out, ot_tensor *const in[]);
int w16_collect(ot_tensor *out, ot_tensor *const in[]);
void w16_explain(FILE *f, ot_tensor *const in[]);
void w16_check(const bench_data *d, float *out);
void w16_ref(const ref_loops *L, store_mode sm, const bench_data *d, float *out);
bool w16_ref_absent(void);

/* ---- PyTorch reference steps over a pipe (torch_pipe.c) ------------------ */

typedef struct bench_torch {
    FILE *in, *out;    /* NULL: not running */
} bench_torch;
int bench_torch_start(bench_torch *p, const char *row, const char *script, const char *arg);
void bench_torch_step(bench_torch *p, const char *row);

/* ---- the driver's pieces (bench.c), shared with scaling.c ----------------- */

/* One optree configuration of a case: a backend and its tensors. */
typedef struct variant {
    ot_backend *be;
    ot_tensor *in[BENCH_MAX_IN];
    ot_tensor *out;
    ot_node *tree;              /* prebuilt cases: built once, assigned per call */
    ot_program *prog;           /* program cases: compiled once, run per call */
    int nbind;
    ot_bind bind[BENCH_MAX_IN];
} variant;

void *bench_xmalloc(size_t n);
double bench_median(double *v, int n);
ot_backend *bench_backend(const char *name, int threads, int fusion);
void bench_data_new(bench_data *d, const bench_case *c, bool quick, int case_index);
void bench_data_free(bench_data *d);
void bench_variant_new(variant *v, ot_backend *be, const bench_case *c, const bench_data *d);
void bench_variant_free(variant *v, int n_in);
/* OpenBLAS's threads for every call when > 0; else each variant's own. */
extern int bench_blas_threads;
/* Seconds per call of `calls` calls (OpenBLAS set to the backend's threads). */
double bench_time_optree(const bench_case *c, const variant *v, long calls);
/* One call from the case's starting state, its result left in v->out;
 * returns the kernels it ran (-1: not counted). */
long bench_counted_call(const bench_case *c, const bench_data *d, const variant *v);
/* Sleeps long enough for spinning BLAS threads to go to sleep. */
void bench_settle(void);

/* ---- thread scaling (scaling.c) ------------------------------------------ */

#define SCALING_MAX_COUNTS 8

/* The thread counts of a scaling run and what it runs on. */
typedef struct scaling_opts {
    int counts[SCALING_MAX_COUNTS], ncounts;
    int runs;
    bool quick;
    const char *backend;
    const char *out_dir;
} scaling_opts;

/* Parses "1,2,4" into o's counts (each in 1..OT_MAX_THREADS, increasing);
 * false when the list is malformed. */
bool scaling_parse_counts(scaling_opts *o, const char *list);
/* Times W2-W5, W6 and W10 at each count and the small-work cases at 1, 2
 * and 4 threads, checks every result's bits against one thread's, prints
 * the tables and writes them to out_dir/scaling.md; returns the number of
 * results that differ from one thread's bits. */
int scaling_run(const scaling_opts *o);

/* One measured (case, thread count): ms per call, and whether its bits
 * equal one thread's. */
typedef struct scaling_cell {
    int threads;
    double t;
    bool same_bits;
    bool blas_only;             /* differs only through OpenBLAS's threads */
} scaling_cell;

/* Speedup and parallel efficiency of cell x over the 1-thread cell one. */
double scaling_speedup(const scaling_cell *one, const scaling_cell *x);
double scaling_efficiency(const scaling_cell *one, const scaling_cell *x);
/* One markdown row of a case: threads (with " (oversubscribed)" past cpus),
 * time, speedup, efficiency and the bit check. */
void scaling_md_row(FILE *f, const char *id, const char *label, const scaling_cell *one,
                    const scaling_cell *x, int cpus);

/* ---- results and reports (report.c) -------------------------------------- */

/* One measured row. Times are medians: ms per assignment, or µs for cases
 * marked us; negative means not measured. err is the largest relative
 * error of any optree variant against the reference output (in each store
 * mode), negative when unchecked. */
typedef struct bench_row {
    const bench_case *c;
    char size[32];
    double fused, unfused, ref, fused2;
    double ratio;               /* the median of the runs' fused/ref ratios (-1: none) */
    /* For both_stores cases: the store_mode that won and the other mode's
     * time; else -1 and -1. */
    int ref_store;
    double ref_other;
    double err;
    bool wrong;                 /* err beyond the tolerance */
    /* Kernels one call runs (the backend's stats): fused, unfused; -1 when
     * not counted. */
    long kernels, kernels_unfused;
    /* The fused variant's first call, compile included (its plan is new). */
    double first;
} bench_row;

typedef struct bench_machine {
    char cpu[128];
    char isa[96];
    char date[40];
    const char *backend;
    const char *ref_isa;        /* the reference loops' ISA */
    int runs;
    bool quick;
    char gemm[512];             /* what runs dots and cblas (w_gemm.c) */
} bench_machine;

/* w_gemm.c: ot_explain's gemm line (settles the OpenBLAS core first);
 * --gemm: sgemm through optree against cblas_sgemm; --mlp DIR: the
 * Fashion-MNIST MLP's epochs (DIR: the gunzipped IDX files). */
void bench_gemm_line(char *buf, size_t size);
int bench_gemm(int runs);
int bench_mlp(const char *dir, int epochs);
/* The convolution rows (w_conv.c): W12, W13 and the 1x1, depthwise and
 * strided ones against PyTorch; also written to OUT_DIR/conv.md. */
int bench_conv(int runs, bool quick, const char *out_dir);
/* The attention rows (w_attn.c): W15 against PyTorch's plain attention,
 * with both sides' peak extra memory; also written to OUT_DIR/attn.md. */
int bench_attn(int runs, bool quick, const char *out_dir);
/* W17 (w_emb.c): an embedding table's SGD step at two table sizes
 * against PyTorch's sparse and dense nn.Embedding; also written to
 * OUT_DIR/emb.md. */
int bench_emb(int runs, bool quick, const char *out_dir);
/* Issue 36's 16-bit rows (w_half.c): W1h against f32 W1 and hand AVX-512
 * loops over f16/bf16, W3h, W4h and W10h against f32; also written to
 * OUT_DIR/half.md. */
int bench_half(int runs, bool quick, const char *out_dir);

/* "PASS", "MISS", "WRONG" (results off) or "n/a" (no reference). */
const char *bench_verdict(const bench_row *r);
double bench_ratio(const bench_row *r);
void report_text(FILE *f, const bench_machine *m, const bench_row *rows, int n);
void report_csv(FILE *f, const bench_row *rows, int n);
void report_md(FILE *f, const bench_machine *m, const bench_row *rows, int n);

#endif /* BENCH_H */
