/*
 * test_dot.c - dot and batched_dot on both backends,
 * and the gradients and numerics of what is built on them.
 *
 * The oracle is a host loop in long double: for every case it gives the
 * exact value of alpha*op(A)op(B) + beta*C0 per element and the netlib
 * (sblat3/dblat3 SMMCH) scale gamma = |alpha| sum_l |a_il||b_lj| + |beta||c0|.
 * A result passes when every element's error ratio |got - exact| / (eps *
 * gamma) (just |got - exact| / eps where gamma is 0) is below 16, eps being
 * FLT_EPSILON or DBL_EPSILON; NaN must be NaN where the host loop gives NaN
 * and an infinity the same infinity (IEEE: inf*0 is NaN, inf - inf is NaN).
 * The ref backend is checked against the host loop; every cpu configuration
 * against the host loop and against the ref backend (the same ratio, with
 * ref's value in place of the exact one).
 *
 * Cases:
 *   dot_gemm_sizes_f32/_f64   every (m, n, k) in {0,1,2,3,7,31,63,64,65}^3
 *                             with all four transpose combinations, the
 *                             transposes made as views (ot_transpose), as
 *                             ot_T of a leaf and as ot_T of an expression
 *   dot_gemm_views            every pair of operand layouts (stepped,
 *                             reversed, column-stepped, padded leading dim,
 *                             transposed stepped, stride-0 broadcast, an
 *                             expression) over a covering set of sizes
 *   dot_vector_ranks          1-D.1-D, 2-D.1-D, 1-D.2-D with vector views
 *   dot_mixed_dtypes          f32 . f64 gives f64
 *   dot_alpha_beta            out = alpha*dot + beta*out in every spelling
 *                             (alpha in {0, 1, 0.7}, beta in {0, 1, 1.3}),
 *                             outputs that are views, vs ref and the host
 *   dot_alpha_beta_constants  one plan, many (alpha, beta): constants are
 *                             plan parameters (cache hits with new values)
 *   dot_alpha_beta_other_c    the same shapes of tree where C is not the
 *                             output (another tensor, out's transpose): no
 *                             GEMM-with-beta shortcut may change the value
 *   dot_error_ratio           the netlib ratio on data spanning 2^-12..2^12,
 *                             and long inner dims (k up to 1000)
 *   dot_k0_and_empty          K = 0 gives zeros (beta*c with beta), M or N = 0
 *                             an empty result and no error
 *   dot_nan_inf               NaN rows/columns, inf*0, inf-inf, as IEEE
 *   dot_compound_nan          NaN/inf in C with beta = 0, NaN in A with
 *                             alpha = 0: as the ref backend (0*NaN is NaN)
 *   dot_alias_output          outputs aliasing operands (and C)
 *   dot_epilogue              elementwise trees over dot results (bias, relu,
 *                             tanh, reductions, two dots, batched, broadcast
 *                             into a bigger output), several row blocks, vs ref
 *   batched_dot_shapes        (B,M,K).(B,K,N) with B in {1,3} on either side,
 *                             transposed last two axes (view, ot_T of a leaf
 *                             and of an expression), other views
 *   batched_dot_alpha_beta    alpha*batched_dot + beta*out
 *   batched_dot_errors        2-D operands, mismatched K, mismatched batch,
 *                             int32, NULL operands: codes and messages
 *   dot_grad_ranks            f64 central differences through dot, every
 *                             rank combination, transposed operands
 *   batched_dot_grad          both operands, shared (batch 1) operands
 *   softmax_xent_grad         cross_entropy(softmax(x)) with one-hot (onehot)
 *                             and probability targets
 *   mlp_grad                  a 2-layer network w.r.t. W1, b1, W2, b2 (and x),
 *                             and the cpu gradients against the ref ones
 *   softmax_stability         logits of +-1000: softmax, logsoftmax,
 *                             cross_entropy and gradients, exact values
 *
 * Every case runs on the ref backend and the cpu backend (several thread
 * counts and the unfused mode where cheap); gradient checks run on both.
 */
#include "test.h"

#include <cblas.h>

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Environment, backends, random numbers                                    */
/* ======================================================================== */

static void env_clean(void)
{
    unsetenv("OT_BACKEND");
    unsetenv("OT_FUSION");
}

static ot_backend *be_new(const char *file, int line, const char *name, int threads, int fusion)
{
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = threads, .fusion = fusion});
    if (!be)
        test__fail(file, line, "ot_backend_new(\"%s\", threads %d fusion %d): %s", name, threads,
                   fusion, ot_errmsg());
    return be;
}
#define BE(name, threads, fusion) be_new(__FILE__, __LINE__, (name), (threads), (fusion))

/* A set of backends: [0] is ref, the rest cpu configurations. */
typedef struct beset {
    int n;
    ot_backend *be[6];
    char name[6][48];
} beset;

enum { CPU_DEFAULT = 1, CPU_T1 = 2, CPU_T3 = 4, CPU_UNFUSED = 8 };

static void beset_open(beset *s, unsigned which)
{
    memset(s, 0, sizeof *s);
    env_clean();
    s->be[0] = BE("ref", 0, 0);
    snprintf(s->name[0], sizeof s->name[0], "ref");
    s->n = 1;
    static const struct { unsigned bit; int threads, fusion; const char *name; } cf[] = {
        {CPU_DEFAULT, 0, 0, "cpu"},
        {CPU_T1, 1, 0, "cpu threads=1"},
        {CPU_T3, 3, 0, "cpu threads=3"},
        {CPU_UNFUSED, 1, OT_FUSION_OFF, "cpu unfused"},
    };
    for (size_t i = 0; i < sizeof cf / sizeof cf[0]; i++) {
        if (!(which & cf[i].bit)) continue;
        ot_backend *be = BE("cpu", cf[i].threads, cf[i].fusion);
        if (!be) continue;
        s->be[s->n] = be;
        snprintf(s->name[s->n], sizeof s->name[s->n], "%s", cf[i].name);
        s->n++;
    }
}

static void beset_close(beset *s)
{
    ot_pool_drain();
    for (int i = 0; i < s->n; i++) ot_backend_free(s->be[i]);
}

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s; }

/* splitmix64, uniform in [0, 1). */
static double urand(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static int irand(int n) { return (int)(urand() * n); }

static double round_to(ot_dtype dt, double v) { return dt == OT_F32 ? (double)(float)v : v; }

/* Uniform [-1, 1], rounded to dt. */
static void gen_vals(double *v, int64_t n, ot_dtype dt)
{
    for (int64_t i = 0; i < n; i++) v[i] = round_to(dt, 2 * urand() - 1);
}

static double *dalloc(int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) abort();
    return p;
}

static long double *ldalloc(int64_t n)
{
    long double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) abort();
    return p;
}

/* ======================================================================== */
/* Tensors: a per-case arena, element access through any view               */
/* ======================================================================== */

#define ARENA_MAX 512
static ot_tensor *arena[ARENA_MAX];
static int narena;

static ot_tensor *keep_at(const char *file, int line, ot_tensor *t)
{
    if (!t) test__fail(file, line, "tensor creation failed: %d %s", ot_errcode(), ot_errmsg());
    else if (narena < ARENA_MAX) arena[narena++] = t;
    else test__fail(file, line, "test arena full");
    return t;
}
#define KEEP(t) keep_at(__FILE__, __LINE__, (t))

static void arena_release(void)
{
    while (narena) ot_tensor_free(arena[--narena]);
}

static int64_t shape_numel(ot_shape s)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    return n;
}

/* The address of element i (row-major logical index) of any view. */
static char *eptr(const ot_tensor *t, int64_t i)
{
    int nd = ot_tensor_ndim(t);
    char *p = ot_tensor_data(t);
    int64_t es = (int64_t)ot_dtype_size(ot_tensor_dtype(t));
    for (int d = nd - 1; d >= 0; d--) {
        int64_t n = ot_tensor_dim(t, d);
        p += (i % n) * ot_tensor_stride(t, d) * es;
        i /= n;
    }
    return p;
}

static double getv(const ot_tensor *t, int64_t i)
{
    const char *p = eptr(t, i);
    switch (ot_tensor_dtype(t)) {
    case OT_F32: { float f; memcpy(&f, p, sizeof f); return f; }
    case OT_F64: { double d; memcpy(&d, p, sizeof d); return d; }
    default: { int32_t k; memcpy(&k, p, sizeof k); return k; }
    }
}

static void setv(ot_tensor *t, int64_t i, double v)
{
    char *p = eptr(t, i);
    switch (ot_tensor_dtype(t)) {
    case OT_F32: { float f = (float)v; memcpy(p, &f, sizeof f); break; }
    case OT_F64: memcpy(p, &v, sizeof v); break;
    default: { int32_t k = (int32_t)v; memcpy(p, &k, sizeof k); break; }
    }
}

/* t[...] = sign * v (row-major logical values), through ot_set. */
static void write_vals(ot_tensor *t, const double *v, double sign)
{
    int64_t n = ot_tensor_numel(t);
    size_t es = ot_dtype_size(ot_tensor_dtype(t));
    char *h = malloc((size_t)(n > 0 ? n : 1) * es);
    if (!h) abort();
    for (int64_t i = 0; i < n; i++) {
        double x = sign * v[i];
        if (ot_tensor_dtype(t) == OT_F32) ((float *)h)[i] = (float)x;
        else if (ot_tensor_dtype(t) == OT_F64) ((double *)h)[i] = x;
        else ((int32_t *)h)[i] = (int32_t)x;
    }
    if (ot_set(t, h) != 0) test__fail(__FILE__, __LINE__, "ot_set: %s", ot_errmsg());
    free(h);
}

/* Every element of t (any view) as doubles, through ot_get. */
static double *read_vals(const ot_tensor *t)
{
    int64_t n = ot_tensor_numel(t);
    double *v = dalloc(n);
    if (ot_tensor_dtype(t) == OT_F32) {
        float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
        if (!f) abort();
        if (ot_get(t, f) != 0) {
            test__fail(__FILE__, __LINE__, "ot_get: %s", ot_errmsg());
            for (int64_t i = 0; i < n; i++) f[i] = NAN;
        }
        for (int64_t i = 0; i < n; i++) v[i] = f[i];
        free(f);
    } else if (ot_get(t, v) != 0) {
        test__fail(__FILE__, __LINE__, "ot_get: %s", ot_errmsg());
        for (int64_t i = 0; i < n; i++) v[i] = NAN;
    }
    return v;
}

/* ======================================================================== */
/* Operands in every layout                                                 */
/* ======================================================================== */

/* How a logical operand (1-D, 2-D or 3-D; dims d) is laid out. Transposes
 * swap the last two dims. Every layout holds the same logical values v. */
enum {
    M_CONTIG,   /* a contiguous tensor */
    M_TVIEW,    /* ot_transpose of a tensor of the swapped shape (a view) */
    M_TLEAF,    /* ot_T of a leaf of the swapped shape (an expression) */
    M_TNEG,     /* ot_T(ot_neg(leaf)): a transpose of a computed value */
    M_NEG,      /* ot_neg(leaf): a computed, untransposed operand */
    M_ROWSTEP,  /* [1::2] of a base 2*d0+1 long in dim 0 */
    M_REV,      /* [::-1, ::-1, ...]: every stride negative */
    M_COLSTEP,  /* [..., ::2] of a base twice as wide: inner stride 2 */
    M_COLREV2,  /* [..., -1::-2]: inner stride -2 */
    M_PADDED,   /* [..., 1, :] of a base with an extra dim of 3 before the
                   last (a leading dim 3x the row; for 1-D, [:, 1] of (n, 3)) */
    M_TSTEP,    /* a transposed view of a column-stepped view: no unit stride */
    M_BCAST0,   /* ot_broadcast_to from size 1 in dim 0 (stride 0) */
    M_BCASTL,   /* ot_broadcast_to from size 1 in the last dim (stride 0) */
    M_NMODES
};
static const char *const mode_name[M_NMODES] = {
    "contig", "T-view", "T(leaf)", "T(neg)", "neg", "rowstep", "rev", "colstep",
    "colrev2", "padded", "T(colstep)", "bcast0", "bcastL"};

static bool mode_is_transpose(int m) { return m == M_TVIEW || m == M_TLEAF || m == M_TNEG || m == M_TSTEP; }

typedef struct opnd {
    int nd;
    int64_t d[3];
    int mode;
    double *v;    /* logical values, row-major, exact in the dtype */
} opnd;

static ot_shape opnd_shape(const opnd *o)
{
    ot_shape s = {.ndim = o->nd};
    for (int i = 0; i < o->nd; i++) s.dims[i] = o->d[i];
    return s;
}

static int64_t opnd_numel(const opnd *o)
{
    ot_shape s = opnd_shape(o);
    return shape_numel(s);
}

/* Broadcast layouts repeat values: make v agree with the layout. */
static void opnd_constrain(opnd *o)
{
    int64_t n = opnd_numel(o);
    if (o->mode == M_BCAST0 && o->d[0] > 0) {
        int64_t inner = n / o->d[0];
        for (int64_t i = 0; i < n; i++) o->v[i] = o->v[i % inner];
    } else if (o->mode == M_BCASTL && o->d[o->nd - 1] > 0) {
        int64_t dl = o->d[o->nd - 1];
        for (int64_t i = 0; i < n; i++) o->v[i] = o->v[i - i % dl];
    }
}

static void opnd_init(opnd *o, ot_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, int mode)
{
    *o = (opnd){.nd = nd, .d = {d0, d1, d2}, .mode = mode};
    if (nd < 2 && mode_is_transpose(mode)) o->mode = M_CONTIG;
    int64_t n = opnd_numel(o);
    o->v = dalloc(n);
    gen_vals(o->v, n, dt);
    opnd_constrain(o);
}

static ot_index idx_all(void) { return OT_ALL; }

/* The operand on be, as a node owned by the current pool (tensors go to the
 * arena). */
static ot_node *opnd_build(ot_backend *be, ot_dtype dt, const opnd *o)
{
    int nd = o->nd, last = nd - 1;
    ot_shape s = opnd_shape(o), bs = s;
    int64_t n = shape_numel(s);
    ot_index ix[4];
    for (int i = 0; i < 4; i++) ix[i] = idx_all();
    ot_tensor *base, *view;
    int perm[3] = {0, 2, 1};
    switch (o->mode) {
    case M_CONTIG:
    case M_NEG:
        base = KEEP(ot_empty(be, s, dt));
        if (!base) return NULL;
        write_vals(base, o->v, o->mode == M_NEG ? -1 : 1);
        return o->mode == M_NEG ? ot_neg(base) : ot_tensor_node(base);
    case M_TVIEW:
    case M_TLEAF:
    case M_TNEG: {
        bs.dims[last] = s.dims[last - 1];
        bs.dims[last - 1] = s.dims[last];
        base = KEEP(ot_empty(be, bs, dt));
        if (!base) return NULL;
        /* a 2-D view with NULL (reverse), a 3-D one with {0, 2, 1} */
        view = KEEP(ot_transpose(base, nd == 3 ? perm : NULL));
        if (!view) return NULL;
        write_vals(view, o->v, o->mode == M_TNEG ? -1 : 1);
        if (o->mode == M_TVIEW) return ot_tensor_node(view);
        ot_node *x = o->mode == M_TNEG ? ot_neg(base) : ot_tensor_node(base);
        return nd == 3 ? ot_T(x, .perm = {0, 2, 1}) : ot_T(x);
    }
    case M_TSTEP: {
        bs.dims[last] = 2 * s.dims[last - 1];
        bs.dims[last - 1] = s.dims[last];
        base = KEEP(ot_empty(be, bs, dt));
        if (!base) return NULL;
        ix[last] = OT_RANGE(0, OT_NONE, 2);
        ot_tensor *st = KEEP(ot_slice_n(base, nd, ix));
        if (!st) return NULL;
        view = KEEP(ot_transpose(st, nd == 3 ? perm : NULL));
        if (!view) return NULL;
        write_vals(view, o->v, 1);
        return ot_tensor_node(view);
    }
    case M_ROWSTEP:
    case M_REV:
    case M_COLSTEP:
    case M_COLREV2: {
        if (o->mode == M_ROWSTEP) {
            bs.dims[0] = 2 * s.dims[0] + 1;
            ix[0] = OT_RANGE(1, OT_NONE, 2);
        } else if (o->mode == M_REV) {
            for (int i = 0; i < nd; i++) ix[i] = OT_RANGE(OT_NONE, OT_NONE, -1);
        } else {
            bs.dims[last] = 2 * s.dims[last];
            ix[last] = o->mode == M_COLSTEP ? OT_RANGE(0, OT_NONE, 2) : OT_RANGE(-1, OT_NONE, -2);
        }
        base = KEEP(ot_empty(be, bs, dt));
        if (!base) return NULL;
        view = KEEP(ot_slice_n(base, nd, ix));
        if (!view) return NULL;
        write_vals(view, o->v, 1);
        return ot_tensor_node(view);
    }
    case M_PADDED: {
        int pos = nd == 1 ? 1 : last;   /* where the extra dim of 3 goes */
        bs.ndim = nd + 1;
        for (int i = nd; i > pos; i--) bs.dims[i] = bs.dims[i - 1];
        bs.dims[pos] = 3;
        ix[pos] = OT_IDX(1);
        base = KEEP(ot_empty(be, bs, dt));
        if (!base) return NULL;
        view = KEEP(ot_slice_n(base, nd + 1, ix));
        if (!view) return NULL;
        write_vals(view, o->v, 1);
        return ot_tensor_node(view);
    }
    case M_BCAST0:
    case M_BCASTL: {
        int bd = o->mode == M_BCAST0 ? 0 : last;
        bs.dims[bd] = 1;
        base = KEEP(ot_empty(be, bs, dt));
        if (!base) return NULL;
        int64_t nb = shape_numel(bs), step = o->mode == M_BCASTL ? s.dims[last] : 1;
        for (int64_t j = 0; j < nb; j++) setv(base, j, n ? o->v[j * step] : 0.0);
        view = KEEP(ot_broadcast_to(base, s));
        if (!view) return NULL;
        return ot_tensor_node(view);
    }
    }
    return NULL;
}

/* ======================================================================== */
/* The host oracle and the netlib ratio                                     */
/* ======================================================================== */

/* A problem: batch, m, k, n with a, b as (ba, m, k) and (bb, k, n) arrays
 * (1-D a is (1, k), 1-D b is (k, 1): the same row-major layout), a batch of
 * 1 shared. exact = alpha*a.b + beta*c (c may be NULL: no beta term; cT:
 * c is read transposed, square m = n). */
typedef struct prob {
    int64_t batch, ba, bb, m, k, n;
    const double *a, *b, *c;
    bool cT;
    double alpha, beta;
} prob;

static void host_oracle(const prob *p, long double *exact, double *gamma)
{
    for (int64_t q = 0; q < p->batch; q++) {
        const double *a = p->a + (p->ba == 1 ? 0 : q) * p->m * p->k;
        const double *b = p->b + (p->bb == 1 ? 0 : q) * p->k * p->n;
        for (int64_t i = 0; i < p->m; i++)
            for (int64_t j = 0; j < p->n; j++) {
                long double s = 0, g = 0;
                for (int64_t l = 0; l < p->k; l++) {
                    s += (long double)a[i * p->k + l] * b[l * p->n + j];
                    g += fabsl((long double)a[i * p->k + l] * b[l * p->n + j]);
                }
                int64_t o = (q * p->m + i) * p->n + j;
                long double e = (long double)p->alpha * s;
                long double gg = fabsl((long double)p->alpha) * g;
                if (p->c) {
                    double c0 = p->c[p->cT ? (q * p->m + j) * p->n + i : o];
                    e += (long double)p->beta * c0;
                    gg += fabsl((long double)p->beta * c0);
                }
                exact[o] = e;
                gamma[o] = (double)gg;
            }
    }
}

static int nmsgs;   /* failure messages printed in this case (capped) */
#define MAX_MSGS 12

/* Checks got[] against want[] by the netlib ratio; records a failure
 * (described by what) and returns false on the first bad element. */
static bool ratio_ok(const char *file, int line, const char *what, const double *got,
                     const long double *want, const double *gamma, int64_t n, double eps)
{
    for (int64_t i = 0; i < n; i++) {
        long double w = want[i];
        double g = got[i];
        bool bad;
        double ratio = 0;
        if (isnan(w)) bad = !isnan(g);
        else if (isinf(w)) bad = !(isinf(g) && (g > 0) == (w > 0));
        else if (!isfinite(g)) bad = true;
        else {
            ratio = (double)(fabsl((long double)g - w) / eps);
            if (gamma[i] > 0) ratio /= gamma[i];
            bad = !(ratio < 16);
        }
        if (bad) {
            if (nmsgs++ < MAX_MSGS)
                test__fail(file, line, "%s: element %lld: got %.9g, want %.9Lg (ratio %.3g, "
                           "gamma %.3g)", what, (long long)i, g, w, ratio, gamma[i]);
            else if (nmsgs == MAX_MSGS + 1)
                test__fail(file, line, "(further failures not shown)");
            return false;
        }
    }
    return true;
}

static double eps_of(ot_dtype dt) { return dt == OT_F32 ? FLT_EPSILON : DBL_EPSILON; }

/* ======================================================================== */
/* The case runner                                                          */
/* ======================================================================== */

/* How the tree uses the dot D = dot(a, b), the output O and a third tensor X. */
enum {
    F_PLAIN,     /* O = D */
    F_AB,        /* O = D*alpha + O*beta */
    F_AB_SWAP,   /* O = beta*O + alpha*D (constants first, terms swapped) */
    F_DPC,       /* O = D + O (alpha = beta = 1) */
    F_CPD,       /* O = O + D */
    F_DPBC,      /* O = D + O*beta (alpha = 1) */
    F_CMD,       /* O = O - D*alpha (an SGD-like update) */
    F_NEGD,      /* O = -D + O*beta (alpha = -1) */
    F_OTHER,     /* O = D*alpha + X*beta, X another tensor holding C0 */
    F_TRANS,     /* O = D*alpha + transpose(O)*beta (square O) */
    F_NFORMS
};
static const char *const form_name[F_NFORMS] = {
    "O = D", "O = D*alpha + O*beta", "O = beta*O + alpha*D", "O = D + O", "O = O + D",
    "O = D + O*beta", "O = O - D*alpha", "O = -D + O*beta",
    "O = D*alpha + X*beta", "O = D*alpha + O^T*beta"};

/* Output layouts. */
enum { O_CONTIG, O_ROWSTEP, O_COLSTEP, O_TVIEW, O_REV, O_PADDED, O_NOUTS };
static const char *const out_name[O_NOUTS] = {"contig", "rowstep", "colstep", "T-view", "rev",
                                              "padded"};

typedef struct dcase {
    ot_dtype dt;
    bool batched;
    opnd a, b;
    int form;
    double alpha, beta;   /* as written; rounded to dt like a weak constant */
    int out;
} dcase;

#define SENT 777.25

/* The output tensor of shape s in layout kind, filled with the sentinel
 * (outside the view too); its base goes to *basep. */
static ot_tensor *make_out(ot_backend *be, ot_dtype dt, ot_shape s, int kind, ot_tensor **basep)
{
    int nd = s.ndim;
    if (nd == 0 || (nd == 1 && kind == O_TVIEW)) kind = O_CONTIG;
    ot_shape bs = s;
    ot_index ix[4];
    for (int i = 0; i < 4; i++) ix[i] = idx_all();
    int last = nd - 1;
    ot_tensor *base, *view;
    int perm[3] = {0, 2, 1};
    switch (kind) {
    case O_TVIEW:
        bs.dims[last] = s.dims[last - 1];
        bs.dims[last - 1] = s.dims[last];
        base = KEEP(ot_full(be, bs, dt, SENT));
        view = base ? KEEP(ot_transpose(base, nd == 3 ? perm : NULL)) : NULL;
        break;
    case O_ROWSTEP:
        bs.dims[0] = 2 * s.dims[0] + 1;
        ix[0] = OT_RANGE(1, OT_NONE, 2);
        base = KEEP(ot_full(be, bs, dt, SENT));
        view = base ? KEEP(ot_slice_n(base, nd, ix)) : NULL;
        break;
    case O_COLSTEP:
        bs.dims[last] = 2 * s.dims[last];
        ix[last] = OT_RANGE(1, OT_NONE, 2);
        base = KEEP(ot_full(be, bs, dt, SENT));
        view = base ? KEEP(ot_slice_n(base, nd, ix)) : NULL;
        break;
    case O_REV:
        for (int i = 0; i < nd; i++) ix[i] = OT_RANGE(OT_NONE, OT_NONE, -1);
        base = KEEP(ot_full(be, bs, dt, SENT));
        view = base ? KEEP(ot_slice_n(base, nd, ix)) : NULL;
        break;
    case O_PADDED: {
        int pos = nd == 1 ? 1 : last;
        bs.ndim = nd + 1;
        for (int i = nd; i > pos; i--) bs.dims[i] = bs.dims[i - 1];
        bs.dims[pos] = 3;
        ix[pos] = OT_IDX(2);
        base = KEEP(ot_full(be, bs, dt, SENT));
        view = base ? KEEP(ot_slice_n(base, nd + 1, ix)) : NULL;
        break;
    }
    default:
        base = view = KEEP(ot_full(be, s, dt, SENT));
        break;
    }
    *basep = base;
    return view;
}

static void describe(char *buf, size_t len, const dcase *c, const char *bename)
{
    char sa[64], sb[64];
    int p = 0;
    p += snprintf(sa + p, sizeof sa - (size_t)p, "(");
    for (int i = 0; i < c->a.nd; i++)
        p += snprintf(sa + p, sizeof sa - (size_t)p, i ? ",%lld" : "%lld", (long long)c->a.d[i]);
    snprintf(sa + p, sizeof sa - (size_t)p, ")");
    p = 0;
    p += snprintf(sb + p, sizeof sb - (size_t)p, "(");
    for (int i = 0; i < c->b.nd; i++)
        p += snprintf(sb + p, sizeof sb - (size_t)p, i ? ",%lld" : "%lld", (long long)c->b.d[i]);
    snprintf(sb + p, sizeof sb - (size_t)p, ")");
    snprintf(buf, len, "%s %s %s%s %s . %s%s, %s (alpha %g beta %g), out %s", bename,
             c->dt == OT_F32 ? "f32" : "f64", c->batched ? "batched_dot " : "dot ", sa,
             mode_name[c->a.mode], sb, mode_name[c->b.mode], form_name[c->form], c->alpha,
             c->beta, out_name[c->out]);
}

/* Runs case c on every backend of s: checks ref against the host oracle,
 * each cpu configuration against the oracle and against ref, that the
 * output view's surroundings (and X) stay untouched, and the rc. Returns
 * false when any check failed. */
static bool run_case(const char *file, int line, const beset *s, dcase *c)
{
    const opnd *A = &c->a, *B = &c->b;
    prob p = {.a = A->v, .b = B->v};
    ot_shape rs = {.ndim = 0};
    if (c->batched) {
        p.ba = A->d[0];
        p.bb = B->d[0];
        p.batch = p.ba == 1 ? p.bb : p.ba;
        p.m = A->d[1];
        p.k = A->d[2];
        p.n = B->d[2];
        rs = OT_SHAPE(p.batch, p.m, p.n);
    } else {
        p.batch = p.ba = p.bb = 1;
        p.m = A->nd == 2 ? A->d[0] : 1;
        p.k = A->nd == 2 ? A->d[1] : A->d[0];
        p.n = B->nd == 2 ? B->d[1] : 1;
        if (A->nd == 2) rs.dims[rs.ndim++] = p.m;
        if (B->nd == 2) rs.dims[rs.ndim++] = p.n;
    }
    int64_t nout = shape_numel(rs);
    bool has_c = c->form != F_PLAIN;
    double alpha = round_to(c->dt, c->alpha), beta = round_to(c->dt, c->beta);
    switch (c->form) {
    case F_PLAIN: alpha = 1; beta = 0; break;
    case F_DPC: case F_CPD: alpha = beta = 1; break;
    case F_DPBC: alpha = 1; break;
    case F_CMD: alpha = -alpha; beta = 1; break;
    case F_NEGD: alpha = -1; break;
    default: break;
    }
    double *c0 = dalloc(nout);
    gen_vals(c0, nout, c->dt);
    p.alpha = alpha;
    p.beta = beta;
    p.c = has_c ? c0 : NULL;
    p.cT = c->form == F_TRANS;
    long double *exact = ldalloc(nout), *refv = ldalloc(nout);
    double *gamma = dalloc(nout);
    host_oracle(&p, exact, gamma);
    bool ok = true;
    double eps = eps_of(c->dt);
    char what[320];
    for (int bi = 0; bi < s->n; bi++) {
        ot_backend *be = s->be[bi];
        describe(what, sizeof what, c, s->name[bi]);
        ot_pool *pool = ot_pool_push();
        ot_node *na = opnd_build(be, c->dt, A), *nb = opnd_build(be, c->dt, B);
        ot_node *d = c->batched ? ot_batched_dot(na, nb) : ot_dot(na, nb);
        ot_tensor *base = NULL, *out = make_out(be, c->dt, rs, c->out, &base), *x = NULL;
        if (out && has_c && c->form != F_OTHER) write_vals(out, c0, 1);
        if (c->form == F_OTHER) {
            x = KEEP(ot_empty(be, rs, c->dt));
            if (x) write_vals(x, c0, 1);
        }
        ot_node *tree = NULL;
        ot_node *on = out ? ot_tensor_node(out) : NULL;
        switch (c->form) {
        case F_PLAIN: tree = d; break;
        case F_AB: tree = ot_add(ot_mul(d, c->alpha), ot_mul(on, c->beta)); break;
        case F_AB_SWAP: tree = ot_add(ot_mul(c->beta, on), ot_mul(c->alpha, d)); break;
        case F_DPC: tree = ot_add(d, on); break;
        case F_CPD: tree = ot_add(on, d); break;
        case F_DPBC: tree = ot_add(d, ot_mul(on, c->beta)); break;
        case F_CMD: tree = ot_sub(on, ot_mul(d, c->alpha)); break;
        case F_NEGD: tree = ot_add(ot_neg(d), ot_mul(on, c->beta)); break;
        case F_OTHER: tree = ot_add(ot_mul(d, c->alpha), ot_mul(x ? ot_tensor_node(x) : NULL, c->beta)); break;
        case F_TRANS: {
            ot_tensor *ot = out ? KEEP(ot_transpose(out, NULL)) : NULL;
            tree = ot_add(ot_mul(d, c->alpha), ot_mul(ot ? ot_tensor_node(ot) : NULL, c->beta));
            break;
        }
        }
        double *before = base ? read_vals(base) : NULL;
        int64_t nbase = base ? ot_tensor_numel(base) : 0;
        int rc = out ? ot_assign(out, tree) : -1;
        if (rc != 0) {
            if (nmsgs++ < MAX_MSGS)
                test__fail(file, line, "%s: assign: %d %s", what, rc, ot_errmsg());
            ok = false;
        } else {
            if (ot_errcode() != 0) {
                if (nmsgs++ < MAX_MSGS)
                    test__fail(file, line, "%s: assign returned 0 with error %d set", what,
                               ot_errcode());
                ok = false;
            }
            double *got = read_vals(out);
            if (!ratio_ok(file, line, what, got, exact, gamma, nout, eps)) ok = false;
            if (bi == 0) {
                for (int64_t i = 0; i < nout; i++) refv[i] = got[i];
            } else {
                char w2[360];
                snprintf(w2, sizeof w2, "%s, against ref", what);
                if (!ratio_ok(file, line, w2, got, refv, gamma, nout, eps)) ok = false;
            }
            free(got);
            double *after = read_vals(base);
            /* outside the view the base holds the sentinel before and after */
            int64_t s1 = 0;
            for (int64_t i = 0; i < nbase; i++) s1 += before[i] == SENT && after[i] == SENT;
            if (s1 != nbase - nout) {
                if (nmsgs++ < MAX_MSGS)
                    test__fail(file, line, "%s: %lld elements outside the output view were "
                               "overwritten", what, (long long)(nbase - nout - s1));
                ok = false;
            }
            free(after);
            if (x) {
                double *xv = read_vals(x);
                for (int64_t i = 0; i < nout; i++)
                    if (xv[i] != c0[i]) {
                        if (nmsgs++ < MAX_MSGS)
                            test__fail(file, line, "%s: X was written", what);
                        ok = false;
                        break;
                    }
                free(xv);
            }
        }
        free(before);
        ot_clear_error();
        ot_pool_pop(pool);
        arena_release();
        if (nmsgs > 3 * MAX_MSGS) break;
    }
    free(c0);
    free(exact);
    free(refv);
    free(gamma);
    return ok;
}

static void case_free(dcase *c)
{
    free(c->a.v);
    free(c->b.v);
}

static const int64_t SIZES[] = {0, 1, 2, 3, 7, 31, 63, 64, 65};
#define NSIZES 9

/* ======================================================================== */
/* 1. GEMM correctness                                                      */
/* ======================================================================== */

/* Every (m, n, k) with every transpose combination; transposes rotate among
 * view, ot_T(leaf) and ot_T(neg(leaf)). */
static void gemm_sizes(ot_dtype dt)
{
    beset s;
    beset_open(&s, CPU_DEFAULT);
    rng_seed(dt == OT_F32 ? 101 : 202);
    nmsgs = 0;
    static const int tmodes[3] = {M_TVIEW, M_TLEAF, M_TNEG};
    int rot = 0;
    for (int im = 0; im < NSIZES; im++)
        for (int in = 0; in < NSIZES; in++)
            for (int ik = 0; ik < NSIZES; ik++)
                for (int tc = 0; tc < 4; tc++) {
                    int64_t m = SIZES[im], n = SIZES[in], k = SIZES[ik];
                    dcase c = {.dt = dt, .form = F_PLAIN};
                    int ma = tc & 1 ? tmodes[rot++ % 3] : M_CONTIG;
                    int mb = tc & 2 ? tmodes[rot++ % 3] : M_CONTIG;
                    opnd_init(&c.a, dt, 2, m, k, 0, ma);
                    opnd_init(&c.b, dt, 2, k, n, 0, mb);
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                    if (nmsgs > 3 * MAX_MSGS) goto done;
                }
done:
    beset_close(&s);
}

TEST(dot_gemm_sizes_f32) { gemm_sizes(OT_F32); }
TEST(dot_gemm_sizes_f64) { gemm_sizes(OT_F64); }

/* Covering triples: every size in every position (m, n, k) at least once,
 * plus a few mid-size ones. */
static const int64_t COVER[][3] = {
    {0, 3, 31}, {1, 7, 63}, {2, 31, 64}, {3, 63, 65}, {7, 64, 0}, {31, 65, 1},
    {63, 0, 2}, {64, 1, 3}, {65, 2, 7}, {7, 7, 7}, {33, 17, 65}, {5, 64, 9},
};
#define NCOVER ((int)(sizeof COVER / sizeof COVER[0]))

/* Every pair of 2-D layouts over the covering sizes. */
TEST(dot_gemm_views)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3);
    nmsgs = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(303 + (uint64_t)dti);
        for (int ma = 0; ma < M_NMODES; ma++)
            for (int mb = 0; mb < M_NMODES; mb++) {
                /* each pair on three covering triples, rotating */
                for (int r = 0; r < 3; r++) {
                    const int64_t *t = COVER[(ma * 5 + mb * 3 + r * 4) % NCOVER];
                    dcase c = {.dt = dt, .form = F_PLAIN};
                    opnd_init(&c.a, dt, 2, t[0], t[2], 0, ma);
                    opnd_init(&c.b, dt, 2, t[2], t[1], 0, mb);
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
            }
    }
    beset_close(&s);
}

/* 1-D . 1-D, 2-D . 1-D and 1-D . 2-D: every size in every place, vector
 * operands in every 1-D layout, matrices plain and transposed. */
TEST(dot_vector_ranks)
{
    static const int vmodes[] = {M_CONTIG, M_NEG, M_ROWSTEP, M_REV, M_COLREV2, M_PADDED,
                                 M_BCAST0};
    static const int mmodes[] = {M_CONTIG, M_TVIEW, M_TLEAF, M_TNEG, M_COLSTEP, M_BCASTL};
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3);
    nmsgs = 0;
    int rot = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(404 + (uint64_t)dti);
        for (int form = 0; form < 3; form++)
            for (int i1 = 0; i1 < NSIZES; i1++)
                for (int i2 = 0; i2 < NSIZES; i2++) {
                    if (form == 0 && i2 > 0) break;       /* 1-D . 1-D: one size */
                    int64_t k = SIZES[i1], mn = SIZES[i2];
                    dcase c = {.dt = dt, .form = F_PLAIN};
                    int vm = vmodes[rot % 7], mm = mmodes[rot % 6];
                    rot++;
                    if (form == 0) {
                        opnd_init(&c.a, dt, 1, k, 0, 0, vm);
                        opnd_init(&c.b, dt, 1, k, 0, 0, vmodes[(rot + 3) % 7]);
                    } else if (form == 1) {
                        opnd_init(&c.a, dt, 2, mn, k, 0, mm);
                        opnd_init(&c.b, dt, 1, k, 0, 0, vm);
                    } else {
                        opnd_init(&c.a, dt, 1, k, 0, 0, vm);
                        opnd_init(&c.b, dt, 2, k, mn, 0, mm);
                    }
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
    }
    beset_close(&s);
}

/* f32 . f64 promotes to f64: the f32 operand is converted exactly. */
/* OpenBLAS's thread count is process-wide and the host program's: dots on
 * backends of 1 and 2 threads leave what the host set alone. */
TEST(dot_leaves_blas_threads_alone)
{
    int before = openblas_get_num_threads();
    openblas_set_num_threads(1);
    for (int threads = 1; threads <= 2; threads++) {
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads});
        ot_tensor *a = ot_ones(be, OT_SHAPE(64, 64), OT_F32), *c = ot_empty(be, OT_SHAPE(64, 64), OT_F32);
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(c, ot_dot(a, a)), 0);
        ot_pool_pop(p);
        static float v[64 * 64];
        CHECK_INT(ot_get(c, v), 0);
        CHECK(v[0] == 64.0f && v[64 * 64 - 1] == 64.0f);
        CHECK_INT(openblas_get_num_threads(), 1);
        ot_tensor_free(a);
        ot_tensor_free(c);
        ot_backend_free(be);
    }
    openblas_set_num_threads(before);
}

TEST(dot_mixed_dtypes)
{
    beset s;
    beset_open(&s, CPU_DEFAULT);
    rng_seed(505);
    static const int64_t sz[][3] = {{3, 4, 5}, {33, 65, 17}, {1, 64, 1}};
    for (int bi = 0; bi < s.n; bi++) {
        for (int i = 0; i < 3; i++) {
            for (int sw = 0; sw < 2; sw++) {
                int64_t m = sz[i][0], k = sz[i][1], n = sz[i][2];
                ot_pool *pool = ot_pool_push();
                double *av = dalloc(m * k), *bv = dalloc(k * n);
                gen_vals(av, m * k, OT_F32);
                gen_vals(bv, k * n, OT_F32);   /* exact in f32 too */
                ot_tensor *a = KEEP(ot_empty(s.be[bi], OT_SHAPE(m, k), sw ? OT_F64 : OT_F32));
                ot_tensor *b = KEEP(ot_empty(s.be[bi], OT_SHAPE(k, n), sw ? OT_F32 : OT_F64));
                write_vals(a, av, 1);
                write_vals(b, bv, 1);
                ot_node *d = ot_dot(a, b);
                CHECK(d && ot_node_dtype(d) == OT_F64);
                ot_tensor *r = ot_eval(d);
                CHECK(r != NULL);
                if (r) {
                    CHECK_INT(ot_tensor_dtype(r), OT_F64);
                    prob p = {.batch = 1, .ba = 1, .bb = 1, .m = m, .k = k, .n = n, .a = av,
                              .b = bv, .alpha = 1};
                    long double *ex = ldalloc(m * n);
                    double *g = dalloc(m * n), *got = read_vals(r);
                    host_oracle(&p, ex, g);
                    ratio_ok(__FILE__, __LINE__, s.name[bi], got, ex, g, m * n, DBL_EPSILON);
                    free(ex);
                    free(g);
                    free(got);
                    ot_tensor_free(r);
                }
                free(av);
                free(bv);
                ot_pool_pop(pool);
                arena_release();
            }
        }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 2. alpha, beta: compound assignments                                     */
/* ======================================================================== */

static const double ALPHAS[] = {0, 1, 0.7};
static const double BETAS[] = {0, 1, 1.3};

/* Every spelling of alpha*dot + beta*out for alpha in {0, 1, 0.7} and beta in
 * {0, 1, 1.3}, on the covering sizes, every transpose combination (rotating),
 * outputs contiguous and in views; against the host and ref. */
TEST(dot_alpha_beta)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T1 | CPU_T3 | CPU_UNFUSED);
    nmsgs = 0;
    static const int tmodes[4] = {M_CONTIG, M_TVIEW, M_TLEAF, M_TNEG};
    int rot = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(606 + (uint64_t)dti);
        for (int ia = 0; ia < 3; ia++)
            for (int ib = 0; ib < 3; ib++)
                for (int form = F_AB; form <= F_NEGD; form++) {
                    /* the spellings that fix alpha or beta run once per value */
                    if ((form == F_DPC || form == F_CPD) && (ia || ib)) continue;
                    if (form == F_DPBC && ia) continue;
                    if (form == F_CMD && ib) continue;
                    if (form == F_NEGD && ia) continue;
                    for (int ci = 0; ci < NCOVER; ci += 2) {
                        const int64_t *t = COVER[(ci + ia + 3 * ib + form) % NCOVER];
                        dcase c = {.dt = dt, .form = form, .alpha = ALPHAS[ia], .beta = BETAS[ib],
                                   .out = (rot / 3) % O_NOUTS};
                        opnd_init(&c.a, dt, 2, t[0], t[2], 0, tmodes[rot % 4]);
                        opnd_init(&c.b, dt, 2, t[2], t[1], 0, tmodes[(rot / 4) % 4]);
                        rot++;
                        run_case(__FILE__, __LINE__, &s, &c);
                        case_free(&c);
                    }
                }
        /* vector results (2-D . 1-D and 1-D . 2-D) into contiguous and stepped
         * outputs, and 1-D . 1-D into a 0-d output */
        for (int ia = 0; ia < 3; ia++)
            for (int ib = 0; ib < 3; ib++)
                for (int r = 0; r < 3; r++) {
                    const int64_t *t = COVER[(ia * 3 + ib + r) % NCOVER];
                    dcase c = {.dt = dt, .form = F_AB, .alpha = ALPHAS[ia], .beta = BETAS[ib],
                               .out = r == 1 ? O_ROWSTEP : O_CONTIG};
                    if (r == 2) {
                        opnd_init(&c.a, dt, 1, t[2], 0, 0, M_REV);
                        opnd_init(&c.b, dt, 1, t[2], 0, 0, ia == 1 ? M_ROWSTEP : M_CONTIG);
                    } else if (r) {
                        opnd_init(&c.a, dt, 1, t[2], 0, 0, M_CONTIG);
                        opnd_init(&c.b, dt, 2, t[2], t[1], 0, tmodes[ia % 4]);
                    } else {
                        opnd_init(&c.a, dt, 2, t[0], t[2], 0, tmodes[ib % 4]);
                        opnd_init(&c.b, dt, 1, t[2], 0, 0, M_REV);
                    }
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
    }
    beset_close(&s);
}

/* One shape, one layout, many (alpha, beta): the constants are plan
 * parameters, so later assignments hit the plan cache with new values. */
TEST(dot_alpha_beta_constants)
{
    beset s;
    beset_open(&s, CPU_DEFAULT);
    nmsgs = 0;
    static const double ab[][2] = {{0.7, 1.3}, {-2.5, 0.5}, {1.3, -1}, {0.7, 1.3}, {3, 1},
                                   {1, 3}, {0.25, 0.75}, {-1, -1}};
    static const int64_t big[][3] = {{33, 17, 65}, {600, 8, 512}};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(1901 + (uint64_t)dti);
        for (int form = F_AB; form <= F_AB_SWAP; form++)
            for (int out = 0; out < 3; out++)
                for (int i = 0; i < 8; i++) {
                    /* out 2: a large product (several GEMM row blocks), fewer values */
                    if (out == 2 && i % 3) continue;
                    const int64_t *z = big[out == 2];
                    dcase c = {.dt = dt, .form = form, .alpha = ab[i][0], .beta = ab[i][1],
                               .out = out == 1 ? O_ROWSTEP : O_CONTIG};
                    opnd_init(&c.a, dt, 2, z[0], z[1], 0, M_TVIEW);
                    opnd_init(&c.b, dt, 2, z[1], z[2], 0, M_CONTIG);
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
    }
    beset_close(&s);
}

/* The same trees where the beta term is not the output itself: another
 * tensor X (which must stay unchanged), or the output read transposed. */
TEST(dot_alpha_beta_other_c)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3 | CPU_UNFUSED);
    nmsgs = 0;
    static const int64_t sq[] = {1, 2, 7, 31, 65};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(707 + (uint64_t)dti);
        for (int ia = 0; ia < 3; ia++)
            for (int ib = 0; ib < 3; ib++)
                for (int si = 0; si < 5; si++) {
                    int64_t n = sq[si], k = sq[(si + ia + ib) % 5];
                    for (int form = F_OTHER; form <= F_TRANS; form++) {
                        dcase c = {.dt = dt, .form = form, .alpha = ALPHAS[ia], .beta = BETAS[ib],
                                   .out = form == F_TRANS ? O_CONTIG : (si + ia) % O_NOUTS};
                        opnd_init(&c.a, dt, 2, n, k, 0, (si + ib) % 2 ? M_TVIEW : M_CONTIG);
                        opnd_init(&c.b, dt, 2, k, n, 0, (si + ia) % 2 ? M_TLEAF : M_CONTIG);
                        run_case(__FILE__, __LINE__, &s, &c);
                        case_free(&c);
                    }
                }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 3. The error ratio on hard data                                          */
/* ======================================================================== */

/* Values with magnitudes across 2^-12..2^12 and both signs (heavy
 * cancellation), long inner dims; plain and with alpha/beta. */
TEST(dot_error_ratio)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3);
    nmsgs = 0;
    static const int64_t sz[][3] = {{1, 1, 1000}, {5, 3, 1000}, {17, 9, 513}, {64, 65, 257},
                                    {2, 200, 300}, {65, 1, 999}};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(808 + (uint64_t)dti);
        for (int i = 0; i < 6; i++)
            for (int form = 0; form < 2; form++) {
                dcase c = {.dt = dt, .form = form ? F_AB : F_PLAIN, .alpha = 0.7, .beta = 1.3,
                           .out = O_CONTIG};
                opnd_init(&c.a, dt, 2, sz[i][0], sz[i][2], 0, i % 2 ? M_TVIEW : M_CONTIG);
                opnd_init(&c.b, dt, 2, sz[i][2], sz[i][1], 0, i % 3 ? M_CONTIG : M_TLEAF);
                int64_t na = opnd_numel(&c.a), nb = opnd_numel(&c.b);
                for (int64_t j = 0; j < na; j++)
                    c.a.v[j] = round_to(dt, c.a.v[j] * ldexp(1.0, irand(25) - 12));
                for (int64_t j = 0; j < nb; j++)
                    c.b.v[j] = round_to(dt, c.b.v[j] * ldexp(1.0, irand(25) - 12));
                run_case(__FILE__, __LINE__, &s, &c);
                case_free(&c);
            }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 4. K = 0 and empty results                                               */
/* ======================================================================== */

TEST(dot_k0_and_empty)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_UNFUSED);
    nmsgs = 0;
    rng_seed(909);
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        static const int64_t mn[][2] = {{1, 1}, {3, 5}, {65, 7}, {64, 64}};
        /* K = 0: zeros (the output is prefilled with the sentinel), and
         * beta*c with alpha/beta */
        for (int i = 0; i < 4; i++)
            for (int ib = 0; ib < 3; ib++)
                for (int form = 0; form < 2; form++) {
                    dcase c = {.dt = dt, .form = form ? F_AB : F_PLAIN, .alpha = 0.7,
                               .beta = BETAS[ib], .out = (i + ib) % O_NOUTS};
                    opnd_init(&c.a, dt, 2, mn[i][0], 0, 0, ib == 1 ? M_TVIEW : M_CONTIG);
                    opnd_init(&c.b, dt, 2, 0, mn[i][1], 0, ib == 2 ? M_TLEAF : M_CONTIG);
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
        /* vectors and batches with K = 0 */
        for (int r = 0; r < 4; r++) {
            dcase c = {.dt = dt, .form = F_PLAIN};
            opnd_init(&c.a, dt, r == 1 ? 2 : r == 3 ? 3 : 1, r == 3 ? 2 : (r == 1 ? 4 : 0),
                      r == 3 ? 3 : 0, 0, M_CONTIG);
            if (r == 3) {
                c.batched = true;
                opnd_init(&c.b, dt, 3, 2, 0, 5, M_CONTIG);
            } else {
                opnd_init(&c.b, dt, r == 2 ? 2 : 1, 0, 6, 0, M_CONTIG);
            }
            run_case(__FILE__, __LINE__, &s, &c);
            case_free(&c);
        }
        /* M or N = 0: an empty result, rc 0, no error; also through ot_eval */
        static const int64_t z[][3] = {{0, 5, 3}, {4, 0, 3}, {0, 0, 3}, {0, 0, 0}, {0, 65, 64}};
        for (int i = 0; i < 5; i++)
            for (int form = 0; form < 2; form++) {
                dcase c = {.dt = dt, .form = form ? F_AB : F_PLAIN, .alpha = 0.7, .beta = 1.3};
                opnd_init(&c.a, dt, 2, z[i][0], z[i][2], 0, M_CONTIG);
                opnd_init(&c.b, dt, 2, z[i][2], z[i][1], 0, form ? M_TVIEW : M_CONTIG);
                run_case(__FILE__, __LINE__, &s, &c);
                case_free(&c);
            }
        for (int bi = 0; bi < s.n; bi++) {
            ot_pool *pool = ot_pool_push();
            ot_tensor *a = KEEP(ot_zeros(s.be[bi], OT_SHAPE(0, 4), dt));
            ot_tensor *b = KEEP(ot_zeros(s.be[bi], OT_SHAPE(4, 3), dt));
            ot_tensor *a3 = KEEP(ot_zeros(s.be[bi], OT_SHAPE(2, 3, 4), dt));
            ot_tensor *b3 = KEEP(ot_zeros(s.be[bi], OT_SHAPE(2, 4, 0), dt));
            ot_clear_error();
            ot_tensor *r = ot_eval(ot_dot(a, b));
            CHECK(r != NULL);
            CHECK_INT(ot_errcode(), 0);
            if (r) {
                CHECK_INT(ot_tensor_ndim(r), 2);
                CHECK_INT(ot_tensor_dim(r, 0), 0);
                CHECK_INT(ot_tensor_dim(r, 1), 3);
                ot_tensor_free(r);
            }
            r = ot_eval(ot_batched_dot(a3, b3));
            CHECK(r != NULL);
            CHECK_INT(ot_errcode(), 0);
            if (r) {
                CHECK_INT(ot_tensor_numel(r), 0);
                CHECK_INT(ot_tensor_dim(r, 1), 3);
                ot_tensor_free(r);
            }
            ot_clear_error();
            ot_pool_pop(pool);
            arena_release();
        }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 5. NaN and infinities                                                    */
/* ======================================================================== */

/* Puts specials into a case: a NaN in a row of A (a NaN row of the result),
 * +inf in B next to a 0 in A (inf*0: NaN), -inf elsewhere (an infinite
 * column, NaN where it meets the +inf), a NaN in B (a NaN column). */
static void put_specials(dcase *c, int variant)
{
    opnd *A = &c->a, *B = &c->b;
    int64_t m, k, n;
    if (c->batched) {
        m = A->d[1]; k = A->d[2]; n = B->d[2];
    } else {
        m = A->nd == 2 ? A->d[0] : 1;
        k = A->nd == 2 ? A->d[1] : A->d[0];
        n = B->nd == 2 ? B->d[1] : 1;
    }
    if (!m || !k || !n) return;
    int64_t na = opnd_numel(A) / (m * k), nb = opnd_numel(B) / (k * n);  /* batches */
    for (int64_t q = 0; q < na; q++) {
        double *a = A->v + q * m * k;
        int64_t i = irand((int)m), l = irand((int)k);
        if (variant & 1) a[i * k + l] = NAN;
        if (variant & 2) a[irand((int)m) * k + irand((int)k)] = 0;
    }
    for (int64_t q = 0; q < nb; q++) {
        double *b = B->v + q * k * n;
        int64_t l = irand((int)k), j = irand((int)n);
        if (variant & 2) {
            b[l * n + j] = INFINITY;
            /* zero a whole column l of A somewhere, so inf meets 0 */
            for (int64_t qa = 0; qa < na; qa++) A->v[qa * m * k + irand((int)m) * k + l] = 0;
        }
        if (variant & 4) b[irand((int)k) * n + irand((int)n)] = -INFINITY;
        if (variant & 8) b[irand((int)k) * n + irand((int)n)] = NAN;
    }
    opnd_constrain(A);
    opnd_constrain(B);
}

TEST(dot_nan_inf)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3);
    nmsgs = 0;
    static const int64_t sz[][3] = {{1, 1, 1}, {2, 3, 1}, {1, 7, 5}, {7, 1, 9}, {3, 3, 3},
                                    {31, 7, 64}, {64, 65, 63}, {65, 2, 31}, {5, 64, 65}};
    static const int modes[] = {M_CONTIG, M_TVIEW, M_TLEAF, M_COLSTEP, M_REV, M_TNEG};
    int rot = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(1001 + (uint64_t)dti);
        for (int i = 0; i < 9; i++)
            for (int variant = 1; variant < 16; variant++) {
                int rank = variant % 4;   /* 0: 2-D.2-D, 1: 2-D.1-D, 2: 1-D.2-D, 3: 1-D.1-D */
                if (i >= 6 && rank) rank = 0;
                dcase c = {.dt = dt, .form = F_PLAIN};
                int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2];
                int ma = modes[rot % 6], mb = modes[(rot / 6) % 6];
                rot++;
                if (rank == 0 || rank == 1) opnd_init(&c.a, dt, 2, m, k, 0, ma);
                else opnd_init(&c.a, dt, 1, k, 0, 0, ma);
                if (rank == 0 || rank == 2) opnd_init(&c.b, dt, 2, k, n, 0, mb);
                else opnd_init(&c.b, dt, 1, k, 0, 0, mb);
                put_specials(&c, variant);
                run_case(__FILE__, __LINE__, &s, &c);
                case_free(&c);
            }
        /* batched */
        for (int i = 0; i < 6; i++)
            for (int variant = 1; variant < 16; variant += 3) {
                dcase c = {.dt = dt, .form = F_PLAIN, .batched = true};
                int64_t m = sz[i + 3][0], n = sz[i + 3][1], k = sz[i + 3][2];
                opnd_init(&c.a, dt, 3, i % 3 == 1 ? 1 : 3, m, k, i % 2 ? M_TVIEW : M_CONTIG);
                opnd_init(&c.b, dt, 3, i % 3 == 2 ? 1 : 3, k, n, i % 2 ? M_CONTIG : M_TLEAF);
                put_specials(&c, variant);
                run_case(__FILE__, __LINE__, &s, &c);
                case_free(&c);
            }
    }
    beset_close(&s);
}

/* 0*NaN is NaN: with beta = 0 a NaN or inf in C gives NaN (the ref backend
 * evaluates O*0), with alpha = 0 a NaN in A or inf in B gives NaN. A
 * GEMM-with-beta shortcut must keep these (BLAS skips C when beta is 0 and
 * the product when alpha is 0). */
TEST(dot_compound_nan)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T1 | CPU_UNFUSED);
    nmsgs = 0;
    rng_seed(1101);
    static const int64_t sz[][3] = {{3, 4, 5}, {33, 65, 17}, {64, 64, 64}};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        for (int i = 0; i < 3; i++)
            for (int ia = 0; ia < 3; ia++)
                for (int ib = 0; ib < 3; ib++)
                    for (int v = 0; v < 2; v++) {
                        int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2];
                        dcase c = {.dt = dt, .form = F_AB, .alpha = ALPHAS[ia], .beta = BETAS[ib],
                                   .out = v ? O_ROWSTEP : O_CONTIG};
                        opnd_init(&c.a, dt, 2, m, k, 0, v ? M_TVIEW : M_CONTIG);
                        opnd_init(&c.b, dt, 2, k, n, 0, M_CONTIG);
                        put_specials(&c, v ? 3 : 9);
                        run_case(__FILE__, __LINE__, &s, &c);
                        case_free(&c);
                    }
        /* NaN and inf in C itself: run_case draws C, so do these by hand */
        for (int bi = 0; bi < s.n; bi++)
            for (int ib = 0; ib < 3; ib++) {
                ot_pool *pool = ot_pool_push();
                int64_t m = 33, n = 17, k = 9;
                ot_tensor *a = KEEP(ot_empty(s.be[bi], OT_SHAPE(m, k), dt));
                ot_tensor *b = KEEP(ot_empty(s.be[bi], OT_SHAPE(k, n), dt));
                ot_tensor *o = KEEP(ot_empty(s.be[bi], OT_SHAPE(m, n), dt));
                double *av = dalloc(m * k), *bv = dalloc(k * n), *cv = dalloc(m * n);
                gen_vals(av, m * k, dt);
                gen_vals(bv, k * n, dt);
                gen_vals(cv, m * n, dt);
                cv[5] = NAN;
                cv[40] = INFINITY;
                cv[m * n - 1] = -INFINITY;
                write_vals(a, av, 1);
                write_vals(b, bv, 1);
                write_vals(o, cv, 1);
                double beta = BETAS[ib];
                int rc = ot_assign(o, ot_add(ot_mul(ot_dot(a, b), 0.7), ot_mul(o, beta)));
                CHECK_INT(rc, 0);
                double *got = read_vals(o);
                static const int64_t at[] = {5, 40, 33 * 17 - 1};
                for (int j = 0; j < 3; j++) {
                    double want = cv[at[j]] * beta;   /* NaN*b, inf*0 = NaN, inf*1.3 = inf */
                    bool same = isnan(want) ? isnan(got[at[j]]) : got[at[j]] == want;
                    if (!same)
                        test__fail(__FILE__, __LINE__, "%s %s: c[%lld] = %g, beta %g: got %g, "
                                   "want %g", s.name[bi], dt == OT_F32 ? "f32" : "f64",
                                   (long long)at[j], cv[at[j]], beta, got[at[j]], want);
                }
                free(got);
                free(av);
                free(bv);
                free(cv);
                ot_pool_pop(pool);
                arena_release();
            }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 6. Outputs aliasing operands                                             */
/* ======================================================================== */

/* Fills t (any view) with values from the seed: the same on every backend. */
static void seq_fill(ot_tensor *t, uint64_t seed)
{
    uint64_t save = rng_state;
    rng_seed(seed);
    int64_t n = ot_tensor_numel(t);
    double *v = dalloc(n);
    for (int64_t i = 0; i < n; i++) v[i] = 2 * urand() - 1;
    write_vals(t, v, 1);
    free(v);
    rng_state = save;
}

static ot_tensor *seq_tensor(ot_backend *be, ot_shape s, ot_dtype dt, uint64_t seed)
{
    ot_tensor *t = KEEP(ot_empty(be, s, dt));
    if (t) seq_fill(t, seed);
    return t;
}

static double *cat_vals(int n, ot_tensor *const ts[], int64_t *len)
{
    int64_t tot = 0;
    for (int i = 0; i < n; i++) tot += ot_tensor_numel(ts[i]);
    double *v = dalloc(tot);
    int64_t o = 0;
    for (int i = 0; i < n; i++) {
        double *x = read_vals(ts[i]);
        memcpy(v + o, x, (size_t)ot_tensor_numel(ts[i]) * sizeof *v);
        o += ot_tensor_numel(ts[i]);
        free(x);
    }
    *len = tot;
    return v;
}

#define NALIAS 14
static const char *const alias_name[NALIAS] = {
    "a = dot(a, b)", "b = dot(a, b)", "c = dot(c, c)", "a^T(view) = dot(a, b)",
    "a = dot(a, b)*0.7 + a*1.3", "b = dot(a, b) + b", "v = dot(A, v)", "v = dot(v, A)",
    "A[0, :] = dot(A[0, :], A)", "a = dot(T(a), a)", "A3 = batched_dot(A3, B3)",
    "B3 = batched_dot(A3, B3)*0.7 + B3", "a = dot(a^T view, b)*0.7 + a*1.3",
    "a[:, 0] = dot(a, v) + a[:, 0]"};

/* Scenario sc at size n on be: the values of every tensor afterwards. */
static double *alias_run(ot_backend *be, int sc, int64_t n, ot_dtype dt, int64_t *len, int *rc)
{
    ot_tensor *a = seq_tensor(be, OT_SHAPE(n, n), dt, 1), *b = seq_tensor(be, OT_SHAPE(n, n), dt, 2);
    ot_tensor *v = seq_tensor(be, OT_SHAPE(n), dt, 3);
    ot_tensor *a3 = seq_tensor(be, OT_SHAPE(2, n, n), dt, 4);
    ot_tensor *b3 = seq_tensor(be, OT_SHAPE(2, n, n), dt, 5);
    switch (sc) {
    case 0: *rc = ot_assign(a, ot_dot(a, b)); break;
    case 1: *rc = ot_assign(b, ot_dot(a, b)); break;
    case 2: *rc = ot_assign(a, ot_dot(a, a)); break;
    case 3: *rc = ot_assign(KEEP(ot_transpose(a, NULL)), ot_dot(a, b)); break;
    case 4: *rc = ot_assign(a, ot_add(ot_mul(ot_dot(a, b), 0.7), ot_mul(a, 1.3))); break;
    case 5: *rc = ot_assign(b, ot_add(ot_dot(a, b), b)); break;
    case 6: *rc = ot_assign(v, ot_dot(a, v)); break;
    case 7: *rc = ot_assign(v, ot_dot(v, a)); break;
    case 8: {
        ot_tensor *row = KEEP(ot_slice(a, OT_IDX(0)));
        *rc = ot_assign(row, ot_dot(row, a));
        break;
    }
    case 9: *rc = ot_assign(a, ot_dot(ot_T(a), a)); break;
    case 10: *rc = ot_assign(a3, ot_batched_dot(a3, b3)); break;
    case 11:
        *rc = ot_assign(b3, ot_add(ot_mul(ot_batched_dot(a3, b3), 0.7), b3));
        break;
    case 12: {
        ot_tensor *at = KEEP(ot_transpose(a, NULL));
        *rc = ot_assign(a, ot_add(ot_mul(ot_dot(at, b), 0.7), ot_mul(a, 1.3)));
        break;
    }
    case 13: {
        ot_tensor *col = KEEP(ot_slice(a, OT_ALL, OT_IDX(0)));
        *rc = ot_assign(col, ot_add(ot_dot(a, v), col));
        break;
    }
    }
    return cat_vals(5, (ot_tensor *[]){a, b, v, a3, b3}, len);
}

TEST(dot_alias_output)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T1 | CPU_T3 | CPU_UNFUSED);
    static const int64_t sizes[] = {1, 7, 33, 65};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        double tol = dti ? 1e-12 : 2e-5;
        for (int sc = 0; sc < NALIAS; sc++)
            for (int si = 0; si < 4; si++) {
                int64_t n = sizes[si], nw = 0;
                int rc = 0;
                ot_pool *pool = ot_pool_push();
                double *want = alias_run(s.be[0], sc, n, dt, &nw, &rc);
                if (rc)
                    test__fail(__FILE__, __LINE__, "%s n=%lld on ref: %d %s", alias_name[sc],
                               (long long)n, rc, ot_errmsg());
                ot_clear_error();
                ot_pool_pop(pool);
                arena_release();
                for (int bi = 1; bi < s.n && !rc; bi++) {
                    int64_t ng = 0;
                    int rc2 = 0;
                    pool = ot_pool_push();
                    double *got = alias_run(s.be[bi], sc, n, dt, &ng, &rc2);
                    if (rc2) {
                        test__fail(__FILE__, __LINE__, "%s %s n=%lld on %s: %d %s", alias_name[sc],
                                   dti ? "f64" : "f32", (long long)n, s.name[bi], rc2, ot_errmsg());
                    } else {
                        int64_t bad = 0, first = -1;
                        for (int64_t i = 0; i < nw; i++)
                            if (!test__close(got[i], want[i], tol)) {
                                if (first < 0) first = i;
                                bad++;
                            }
                        if (bad)
                            test__fail(__FILE__, __LINE__, "%s %s n=%lld on %s: %lld of %lld "
                                       "values differ from ref; first [%lld]: got %.9g want %.9g",
                                       alias_name[sc], dti ? "f64" : "f32", (long long)n,
                                       s.name[bi], (long long)bad, (long long)nw, (long long)first,
                                       got[first], want[first]);
                    }
                    free(got);
                    ot_clear_error();
                    ot_pool_pop(pool);
                    arena_release();
                }
                free(want);
            }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 7. Epilogues over dot results                                            */
/* ======================================================================== */

#define NEPI 12
static const char *const epi_name[NEPI] = {
    "relu(dot + b)", "tanh(dot*0.5 + bcol)", "dot + dot", "sig(dot) * y", "sum(dot + b, axis=1)",
    "exp(dot*0.1) into a view", "max(dot, axis=0)", "dot(relu(dot + b), W2) + b2",
    "relu(batched_dot(x3, w[None]) + b)", "out(2, m, n) = dot*0.5 + out; then out = relu(dot + b)",
    "assign_many {relu(dot + b), dot*2 - y}", "relu(dot + b) into a transposed view"};

static double *epi_run(ot_backend *be, int e, int64_t m, int64_t k, int64_t n, ot_dtype dt,
                       int64_t *len, int *rc)
{
    ot_tensor *x = seq_tensor(be, OT_SHAPE(m, k), dt, 11), *w = seq_tensor(be, OT_SHAPE(k, n), dt, 12);
    ot_tensor *x2 = seq_tensor(be, OT_SHAPE(m, 3), dt, 13), *w2 = seq_tensor(be, OT_SHAPE(3, n), dt, 14);
    ot_tensor *b = seq_tensor(be, OT_SHAPE(n), dt, 15), *bc = seq_tensor(be, OT_SHAPE(m, 1), dt, 16);
    ot_tensor *y = seq_tensor(be, OT_SHAPE(m, n), dt, 17);
    ot_tensor *w3 = seq_tensor(be, OT_SHAPE(n, 5), dt, 18), *b3 = seq_tensor(be, OT_SHAPE(5), dt, 19);
    ot_tensor *out = NULL;
    ot_node *d = ot_dot(x, w);
    switch (e) {
    case 0:
        out = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        *rc = ot_assign(out, ot_relu(ot_add(d, b)));
        break;
    case 1:
        out = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        *rc = ot_assign(out, ot_tanh(ot_add(ot_mul(d, 0.5), bc)));
        break;
    case 2:
        out = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        *rc = ot_assign(out, ot_add(d, ot_dot(x2, w2)));
        break;
    case 3:
        out = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        *rc = ot_assign(out, ot_mul(ot_sig(d), y));
        break;
    case 4:
        out = KEEP(ot_empty(be, OT_SHAPE(m), dt));
        *rc = ot_assign(out, ot_sum(ot_add(d, b), .axis = 1));
        break;
    case 5: {
        ot_tensor *base = KEEP(ot_zeros(be, OT_SHAPE(2 * m + 1, n), dt));
        out = KEEP(ot_slice(base, OT_RANGE(-2, OT_NONE, -2), OT_ALL));
        *rc = ot_assign(out, ot_exp(ot_mul(d, 0.1)));
        out = base;
        break;
    }
    case 6:
        out = KEEP(ot_empty(be, OT_SHAPE(n), dt));
        *rc = ot_assign(out, ot_max(d, .axis = 0));
        break;
    case 7:
        out = KEEP(ot_empty(be, OT_SHAPE(m, 5), dt));
        *rc = ot_assign(out, ot_add(ot_dot(ot_relu(ot_add(d, b)), w3), b3));
        break;
    case 9:
        out = seq_tensor(be, OT_SHAPE(2, m, n), dt, 21);   /* the tree broadcasts to out */
        *rc = ot_assign(out, ot_add(ot_mul(d, 0.5), out));
        if (!*rc) *rc = ot_assign(out, ot_relu(ot_add(d, b)));   /* broadcast into out */
        break;
    case 10: {
        ot_tensor *o2 = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        out = KEEP(ot_empty(be, OT_SHAPE(m, n), dt));
        *rc = ot_assign_many(2, (ot_tensor *[]){out, o2},
                             (ot_node *[]){ot_relu(ot_add(d, b)), ot_sub(ot_mul(d, 2.0), y)});
        return cat_vals(2, (ot_tensor *[]){out, o2}, len);
    }
    case 11: {
        ot_tensor *base = KEEP(ot_empty(be, OT_SHAPE(n, m), dt));
        out = KEEP(ot_transpose(base, NULL));
        *rc = ot_assign(out, ot_relu(ot_add(d, b)));
        break;
    }
    case 8: {
        ot_tensor *x3 = seq_tensor(be, OT_SHAPE(2, m, k), dt, 20);
        ot_tensor *w1 = KEEP(ot_reshape(w, OT_SHAPE(1, k, n)));
        out = KEEP(ot_empty(be, OT_SHAPE(2, m, n), dt));
        *rc = ot_assign(out, ot_relu(ot_add(ot_batched_dot(x3, w1), b)));
        break;
    }
    }
    return cat_vals(1, &out, len);
}

/* Whether the cpu configuration bi (of 1..n-1) checks the case salt: all
 * do, but under ASan (where each fresh page of a run costs most) one, in
 * turn, so that each still checks a share of the cases. */
static bool epi_config_runs(int bi, int n, int salt)
{
#if defined(__SANITIZE_ADDRESS__)
    return bi == 1 + salt % (n - 1);
#else
    (void)bi, (void)n, (void)salt;
    return true;
#endif
}

TEST(dot_epilogue)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T1 | CPU_T3 | CPU_UNFUSED);
    /* the last size makes several row blocks (GEMM blocks of 256 rows) */
    static const int64_t sz[][3] = {{1, 1, 1}, {7, 3, 5}, {65, 31, 63}, {130, 17, 70}, {3, 64, 129},
                                    {600, 8, 512}};
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        for (int e = 0; e < NEPI; e++)
            for (int si = 0; si < 6; si++) {
                int64_t m = sz[si][0], k = sz[si][1], n = sz[si][2], nw = 0;
                int rc = 0;
                ot_pool *pool = ot_pool_push();
                double *want = epi_run(s.be[0], e, m, k, n, dt, &nw, &rc);
                if (rc)
                    test__fail(__FILE__, __LINE__, "%s on ref: %d %s", epi_name[e], rc, ot_errmsg());
                ot_clear_error();
                ot_pool_pop(pool);
                arena_release();
                for (int bi = 1; bi < s.n && !rc; bi++) {
                    if (!epi_config_runs(bi, s.n, dti + e + si)) continue;
                    int64_t ng = 0;
                    int rc2 = 0;
                    pool = ot_pool_push();
                    double *got = epi_run(s.be[bi], e, m, k, n, dt, &ng, &rc2);
                    if (rc2) {
                        test__fail(__FILE__, __LINE__, "%s %s (%lld,%lld,%lld) on %s: %d %s",
                                   epi_name[e], dti ? "f64" : "f32", (long long)m, (long long)k,
                                   (long long)n, s.name[bi], rc2, ot_errmsg());
                    } else {
                        /* |terms| up to k (values in [-1, 1]), a few ops after */
                        double tol = (dti ? 4e-15 : 2e-6) * (double)(k + 8);
                        int64_t bad = 0, first = -1;
                        for (int64_t i = 0; i < nw; i++)
                            if (!test__close(got[i], want[i], tol)) {
                                if (first < 0) first = i;
                                bad++;
                            }
                        if (bad)
                            test__fail(__FILE__, __LINE__, "%s %s (%lld,%lld,%lld) on %s: %lld of "
                                       "%lld values differ from ref; first [%lld]: got %.9g "
                                       "want %.9g", epi_name[e], dti ? "f64" : "f32",
                                       (long long)m, (long long)k, (long long)n, s.name[bi],
                                       (long long)bad, (long long)nw, (long long)first, got[first],
                                       want[first]);
                    }
                    free(got);
                    ot_clear_error();
                    ot_pool_pop(pool);
                    arena_release();
                }
                free(want);
            }
    }
    beset_close(&s);
}

/* ======================================================================== */
/* 8. batched_dot                                                           */
/* ======================================================================== */

/* Batches (1, 1), (3, 3), (1, 3), (3, 1) over covering sizes, transposed
 * last two axes as views, ot_T(leaf, .perm) and ot_T(neg), other views. */
TEST(batched_dot_shapes)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3);
    nmsgs = 0;
    static const int64_t bat[][2] = {{1, 1}, {3, 3}, {1, 3}, {3, 1}};
    static const int modes[] = {M_CONTIG, M_TVIEW, M_TLEAF, M_TNEG, M_ROWSTEP, M_REV,
                                M_COLSTEP, M_PADDED, M_TSTEP, M_BCAST0, M_NEG};
    int rot = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(1201 + (uint64_t)dti);
        for (int bi = 0; bi < 4; bi++)
            for (int ci = 0; ci < NCOVER; ci++)
                for (int tc = 0; tc < 2; tc++) {
                    const int64_t *t = COVER[ci];
                    dcase c = {.dt = dt, .form = F_PLAIN, .batched = true};
                    int ma = tc ? modes[rot % 11] : ((ci & 1) ? M_TVIEW : M_CONTIG);
                    int mb = tc ? modes[(rot / 11 + rot) % 11] : ((ci & 2) ? M_TLEAF : M_CONTIG);
                    rot++;
                    opnd_init(&c.a, dt, 3, bat[bi][0], t[0], t[2], ma);
                    opnd_init(&c.b, dt, 3, bat[bi][1], t[2], t[1], mb);
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                    if (nmsgs > 3 * MAX_MSGS) goto done;
                }
    }
done:
    beset_close(&s);
}

/* alpha*batched_dot + beta*out, outputs in views. */
TEST(batched_dot_alpha_beta)
{
    beset s;
    beset_open(&s, CPU_DEFAULT | CPU_T3 | CPU_UNFUSED);
    nmsgs = 0;
    static const int64_t bat[][2] = {{3, 3}, {1, 3}, {3, 1}};
    int rot = 0;
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F64 : OT_F32;
        rng_seed(1301 + (uint64_t)dti);
        for (int ia = 0; ia < 3; ia++)
            for (int ib = 0; ib < 3; ib++)
                for (int r = 0; r < 3; r++) {
                    const int64_t *t = COVER[(ia * 3 + ib + r * 5) % NCOVER];
                    dcase c = {.dt = dt, .form = r == 2 ? F_DPBC : F_AB, .batched = true,
                               .alpha = ALPHAS[ia], .beta = BETAS[ib], .out = rot % O_NOUTS};
                    opnd_init(&c.a, dt, 3, bat[r][0], t[0], t[2], rot % 2 ? M_TVIEW : M_CONTIG);
                    opnd_init(&c.b, dt, 3, bat[r][1], t[2], t[1], rot % 3 ? M_CONTIG : M_TLEAF);
                    rot++;
                    run_case(__FILE__, __LINE__, &s, &c);
                    case_free(&c);
                }
    }
    beset_close(&s);
}

TEST(batched_dot_errors)
{
    env_clean();
    ot_backend *be = BE("ref", 0, 0);
    ot_backend *cpu = BE("cpu", 0, 0);
    if (!be || !cpu) return;
    ot_pool *pool = ot_pool_push();
    ot_tensor *a2 = KEEP(ot_zeros(be, OT_SHAPE(3, 4), OT_F32));
    ot_tensor *b2 = KEEP(ot_zeros(be, OT_SHAPE(4, 5), OT_F32));
    ot_tensor *a3 = KEEP(ot_zeros(be, OT_SHAPE(2, 3, 4), OT_F32));
    ot_tensor *b3 = KEEP(ot_zeros(be, OT_SHAPE(2, 4, 5), OT_F32));
    ot_tensor *bk = KEEP(ot_zeros(be, OT_SHAPE(2, 5, 6), OT_F32));
    ot_tensor *bb = KEEP(ot_zeros(be, OT_SHAPE(3, 4, 5), OT_F32));
    ot_tensor *a4 = KEEP(ot_zeros(be, OT_SHAPE(1, 2, 3, 4), OT_F32));
    ot_tensor *i3 = KEEP(ot_zeros(be, OT_SHAPE(2, 3, 4), OT_I32));
    ot_tensor *j3 = KEEP(ot_zeros(be, OT_SHAPE(2, 4, 5), OT_I32));
    ot_tensor *out = KEEP(ot_zeros(be, OT_SHAPE(2, 3, 5), OT_F32));
    ot_tensor *bad_out = KEEP(ot_zeros(be, OT_SHAPE(2, 5, 3), OT_F32));

    ot_clear_error();
    CHECK(ot_batched_dot(a2, b2) == NULL);
    CHECK_ERR(OT_EINVAL, "batched_dot", "3-D", "(3,4)", "(4,5)", "test_dot.c:");
    CHECK(ot_batched_dot(a3, b2) == NULL);
    CHECK_ERR(OT_EINVAL, "batched_dot", "(2,3,4)", "(4,5)");
    CHECK(ot_batched_dot(a2, b3) == NULL);
    CHECK_ERR(OT_EINVAL, "batched_dot", "(3,4)", "(2,4,5)");
    CHECK(ot_batched_dot(a4, b3) == NULL);
    CHECK_ERR(OT_EINVAL, "batched_dot", "(1,2,3,4)");
    /* mismatched K */
    CHECK(ot_batched_dot(a3, bk) == NULL);
    CHECK_ERR(OT_ESHAPE, "batched_dot", "(2,3,4)", "(2,5,6)", "not aligned");
    /* mismatched batch, neither 1 */
    CHECK(ot_batched_dot(a3, bb) == NULL);
    CHECK_ERR(OT_ESHAPE, "batched_dot", "(2,3,4)", "(3,4,5)", "batch");
    CHECK(ot_batched_dot(bb, KEEP(ot_zeros(be, OT_SHAPE(2, 5, 2), OT_F32))) == NULL);
    CHECK_ERR(OT_ESHAPE, "batched_dot", "batch");
    /* int32 */
    CHECK(ot_batched_dot(i3, j3) == NULL);
    CHECK_ERR(OT_EDTYPE, "batched_dot", "int32");
    /* a NULL operand keeps the first message; ot_assign returns its code */
    ot_node *bad = ot_batched_dot(a3, bb);
    CHECK(bad == NULL);
    CHECK(ot_add(bad, 1.0f) == NULL);
    CHECK_INT(ot_assign(out, ot_add(bad, 1.0f)), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "batched_dot", "(3,4,5)");
    /* the result's shape must fit the output */
    ot_node *good = ot_batched_dot(a3, b3);
    CHECK(good != NULL);
    if (good) {
        ot_shape rs = ot_node_shape(good);
        CHECK_INT(rs.ndim, 3);
        CHECK_INT(rs.dims[0], 2);
        CHECK_INT(rs.dims[1], 3);
        CHECK_INT(rs.dims[2], 5);
        CHECK_INT(ot_node_op(good), OT_OP_BATCHED_DOT);
        CHECK_STR(ot_op_name(OT_OP_BATCHED_DOT), "batched_dot");
        CHECK_INT(ot_op_lookup("batched_dot"), OT_OP_BATCHED_DOT);
        CHECK_INT(ot_assign(bad_out, good), OT_ESHAPE);
        ot_clear_error();
        CHECK_INT(ot_assign(out, good), 0);
    }
    /* the broadcast batch gives the other side's batch */
    ot_tensor *a1 = KEEP(ot_zeros(be, OT_SHAPE(1, 3, 4), OT_F64));
    ot_node *g1 = ot_batched_dot(a1, bb);
    CHECK(g1 != NULL);
    if (g1) {
        CHECK_INT(ot_node_shape(g1).dims[0], 3);
        CHECK_INT(ot_node_dtype(g1), OT_F64);   /* f64 with f32 */
    }
    /* the same errors on the cpu backend's tensors, and through ot_build */
    ot_tensor *c2 = KEEP(ot_zeros(cpu, OT_SHAPE(3, 4), OT_F64));
    ot_tensor *c3 = KEEP(ot_zeros(cpu, OT_SHAPE(2, 4, 5), OT_F64));
    CHECK(ot_build(OT_OP_BATCHED_DOT, ot_tensor_node(c2), ot_tensor_node(c3), NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "batched_dot", "(3,4)");
    /* dot's own rank rule: 3-D operands belong to batched_dot */
    CHECK(ot_dot(a3, b3) == NULL);
    CHECK_ERR(OT_EINVAL, "dot", "(2,3,4)");
    ot_pool_pop(pool);
    arena_release();
    ot_backend_free(be);
    ot_backend_free(cpu);
}

/* ======================================================================== */
/* 9. Gradients (f64 central differences)                                   */
/* ======================================================================== */

/* sum(tree * R), evaluated afresh. */
static double loss_of(ot_node *tree, const double *r)
{
    ot_tensor *out = ot_eval(tree);
    if (!out) {
        test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
        ot_clear_error();
        return NAN;
    }
    double *v = read_vals(out), s = 0;
    for (int64_t i = 0; i < ot_tensor_numel(out); i++) s += v[i] * r[i];
    free(v);
    ot_tensor_free(out);
    return s;
}

/* Full-Jacobian check with a random next_error R: central differences, eps
 * 1e-6, |numeric - analytic| <= 1e-5 + 1e-3 |numeric|, every element of
 * every input, perturbed through its view. The analytic gradients go to
 * grads[k] (malloc'd) when grads is not NULL. */
static void gradcheck_at(const char *file, int line, const char *what, ot_node *tree, int n,
                         ot_tensor *const in[], double **grads)
{
    if (!tree) {
        test__fail(file, line, "%s: no tree: %s", what, ot_errmsg());
        ot_clear_error();
        return;
    }
    const char *bn = ot_backend_name(ot_tensor_backend(in[0]));
    ot_shape s = ot_node_shape(tree);
    int64_t nr = shape_numel(s);
    double *r = dalloc(nr);
    for (int64_t i = 0; i < nr; i++) r[i] = 2 * urand() - 1;
    ot_tensor *ne = ot_empty(ot_tensor_backend(in[0]), s, ot_node_dtype(tree));
    if (ne) write_vals(ne, r, 1);
    ot_autodiff *ad = ne ? ot_autodiff_new(tree, ot_tensor_node(ne)) : NULL;
    if (!ad) test__fail(file, line, "%s (%s): autodiff_new: %s", what, bn, ot_errmsg());
    for (int k = 0; k < n && ad; k++) {
        ot_tensor *gt = ot_autodiff_grad_tensor(ad, in[k]);
        if (!gt) {
            test__fail(file, line, "%s (%s): grad of input %d: %s", what, bn, k, ot_errmsg());
            ot_clear_error();
            continue;
        }
        int64_t ni = ot_tensor_numel(in[k]);
        CHECK_INT(ot_tensor_numel(gt), ni);
        double *g = read_vals(gt);
        ot_tensor_free(gt);
        int bad = 0;
        for (int64_t i = 0; i < ni && bad < 3; i++) {
            double v = getv(in[k], i), h = 1e-6;
            setv(in[k], i, v + h);
            double lp = loss_of(tree, r);
            setv(in[k], i, v - h);
            double lm = loss_of(tree, r);
            setv(in[k], i, v);
            double num = (lp - lm) / (2 * h);
            if (!(fabs(num - g[i]) <= 1e-5 + 1e-3 * fabs(num))) {
                test__fail(file, line, "%s (%s): d/d input %d [%lld]: analytic %.10g, numeric "
                           "%.10g", what, bn, k, (long long)i, g[i], num);
                bad++;
            }
        }
        if (grads) grads[k] = g;
        else free(g);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(ne);
    free(r);
}
#define GRADCHECK(what, tree, n, ...) \
    gradcheck_at(__FILE__, __LINE__, (what), (tree), (n), (ot_tensor *[]){__VA_ARGS__}, NULL)

static const char *const BACKENDS[] = {"ref", "cpu"};

/* A tensor with random values in [-2, 2] (f64), contiguous or transposed. */
static ot_tensor *grad_input(ot_backend *be, ot_shape s, bool transposed)
{
    ot_tensor *t;
    if (transposed && s.ndim >= 2) {
        ot_shape r = s;
        int l = s.ndim - 1;
        r.dims[l] = s.dims[l - 1];
        r.dims[l - 1] = s.dims[l];
        ot_tensor *base = KEEP(ot_empty(be, r, OT_F64));
        t = base ? KEEP(ot_transpose(base, s.ndim == 3 ? (int[]){0, 2, 1} : NULL)) : NULL;
    } else {
        t = KEEP(ot_empty(be, s, OT_F64));
    }
    if (t)
        for (int64_t i = 0; i < ot_tensor_numel(t); i++) setv(t, i, 4 * urand() - 2);
    return t;
}

TEST(dot_grad_ranks)
{
    for (int bi = 0; bi < 2; bi++) {
        env_clean();
        ot_backend *be = BE(BACKENDS[bi], 0, 0);
        if (!be) continue;
        rng_seed(1401);
        ot_pool *pool = ot_pool_push();
        static const int64_t sz[][3] = {{1, 1, 1}, {3, 4, 2}, {2, 5, 3}, {4, 1, 6}};
        for (int i = 0; i < 4; i++)
            for (int form = 0; form < 4; form++)
                for (int tr = 0; tr < 3; tr++) {
                    int64_t m = sz[i][0], k = sz[i][1], n = sz[i][2];
                    bool a2 = form & 1, b2 = form & 2;
                    ot_tensor *a = grad_input(be, a2 ? OT_SHAPE(m, k) : OT_SHAPE(k), tr == 1);
                    ot_tensor *b = grad_input(be, b2 ? OT_SHAPE(k, n) : OT_SHAPE(k), tr == 2);
                    char what[96];
                    snprintf(what, sizeof what, "dot %dD.%dD (%lld,%lld,%lld) %s", a2 ? 2 : 1,
                             b2 ? 2 : 1, (long long)m, (long long)k, (long long)n,
                             tr == 1 ? "a transposed" : tr == 2 ? "b transposed" : "");
                    GRADCHECK(what, ot_dot(a, b), 2, a, b);
                }
        /* through ot_T of an expression and a compound form */
        ot_tensor *a = grad_input(be, OT_SHAPE(3, 4), false), *b = grad_input(be, OT_SHAPE(3, 5), false);
        ot_tensor *c = grad_input(be, OT_SHAPE(4, 5), false);
        GRADCHECK("dot(T(a*1.5), b)", ot_dot(ot_T(ot_mul(a, 1.5)), b), 2, a, b);
        GRADCHECK("dot(T(a), b)*0.7 + c*1.3",
                  ot_add(ot_mul(ot_dot(ot_T(a), b), 0.7), ot_mul(c, 1.3)), 3, a, b, c);
        GRADCHECK("dot(T(a), a)", ot_dot(ot_T(a), a), 1, a);
        ot_pool_pop(pool);
        arena_release();
        ot_pool_drain();
        ot_backend_free(be);
    }
}

TEST(batched_dot_grad)
{
    for (int bi = 0; bi < 2; bi++) {
        env_clean();
        ot_backend *be = BE(BACKENDS[bi], 0, 0);
        if (!be) continue;
        rng_seed(1501);
        ot_pool *pool = ot_pool_push();
        static const int64_t bat[][2] = {{3, 3}, {1, 3}, {3, 1}, {1, 1}};
        for (int i = 0; i < 4; i++)
            for (int tr = 0; tr < 3; tr++) {
                int64_t m = 2 + i % 2, k = 3, n = 1 + tr;
                ot_tensor *a = grad_input(be, OT_SHAPE(bat[i][0], m, k), tr == 1);
                ot_tensor *b = grad_input(be, OT_SHAPE(bat[i][1], k, n), tr == 2);
                char what[96];
                snprintf(what, sizeof what, "batched_dot batches (%lld, %lld)%s",
                         (long long)bat[i][0], (long long)bat[i][1],
                         tr == 1 ? " a transposed" : tr == 2 ? " b transposed" : "");
                GRADCHECK(what, ot_batched_dot(a, b), 2, a, b);
            }
        ot_tensor *a = grad_input(be, OT_SHAPE(2, 4, 3), false);
        ot_tensor *b = grad_input(be, OT_SHAPE(1, 4, 2), false);
        GRADCHECK("batched_dot(T(a, perm 021), b)", ot_batched_dot(ot_T(a, .perm = {0, 2, 1}), b),
                  2, a, b);
        GRADCHECK("tanh(batched_dot(T(a), b))",
                  ot_tanh(ot_batched_dot(ot_T(ot_mul(a, 0.5), .perm = {0, 2, 1}), b)), 2, a, b);
        ot_pool_pop(pool);
        arena_release();
        ot_pool_drain();
        ot_backend_free(be);
    }
}

/* Targets: one-hot from indices (ot_onehot), or probabilities (rows sum to 1). */
static ot_tensor *prob_targets(ot_backend *be, int64_t n, int64_t c, ot_dtype dt)
{
    ot_tensor *t = KEEP(ot_empty(be, OT_SHAPE(n, c), dt));
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) {
        double w[16], s = 0;
        for (int64_t j = 0; j < c; j++) s += (w[j] = 0.1 + urand());
        for (int64_t j = 0; j < c; j++) setv(t, i * c + j, w[j] / s);
    }
    return t;
}

static ot_node *onehot_targets(ot_backend *be, int64_t n, int64_t c, ot_dtype dt)
{
    ot_tensor *idx = KEEP(ot_empty(be, OT_SHAPE(n), OT_I32));
    if (!idx) return NULL;
    for (int64_t i = 0; i < n; i++) setv(idx, i, irand((int)c));
    return ot_onehot(idx, .depth = c, .dtype = dt);
}

TEST(softmax_xent_grad)
{
    for (int bi = 0; bi < 2; bi++) {
        env_clean();
        ot_backend *be = BE(BACKENDS[bi], 0, 0);
        if (!be) continue;
        rng_seed(1601);
        ot_pool *pool = ot_pool_push();
        static const int64_t sz[][2] = {{1, 2}, {4, 3}, {3, 7}};
        for (int i = 0; i < 3; i++) {
            int64_t n = sz[i][0], c = sz[i][1];
            ot_tensor *x = grad_input(be, OT_SHAPE(n, c), i == 2);
            ot_node *t1 = onehot_targets(be, n, c, OT_F64);
            GRADCHECK("cross_entropy(softmax(x), onehot)",
                      ot_cross_entropy(ot_softmax(x, .axis = 1), t1, .axis = 1), 1, x);
            ot_tensor *t2 = prob_targets(be, n, c, OT_F64);
            GRADCHECK("cross_entropy(softmax(x), probabilities) w.r.t. x and t",
                      ot_cross_entropy(ot_softmax(x, .axis = 1), t2, .axis = 1), 2, x, t2);
            GRADCHECK("mean(cross_entropy(softmax(x), onehot))",
                      ot_mean(ot_cross_entropy(ot_softmax(x, .axis = 1), t1, .axis = 1)), 1, x);
            GRADCHECK("softmax(x)", ot_softmax(x, .axis = 1), 1, x);
            GRADCHECK("logsoftmax(x)", ot_logsoftmax(x, .axis = 1), 1, x);
        }
        ot_pool_pop(pool);
        arena_release();
        ot_pool_drain();
        ot_backend_free(be);
    }
}

/* The network: loss = cross_entropy(softmax(relu(x.W1 + b1).W2 + b2)). */
static ot_node *mlp(ot_tensor *x, ot_tensor *w1, ot_tensor *b1, ot_tensor *w2, ot_tensor *b2,
                    ot_node *t)
{
    ot_node *h = ot_relu(ot_add(ot_dot(x, w1), b1));
    ot_node *logits = ot_add(ot_dot(h, w2), b2);
    return ot_cross_entropy(ot_softmax(logits, .axis = 1), t, .axis = 1);
}

TEST(mlp_grad)
{
    enum { N = 5, D = 4, H = 6, C = 3 };
    double *g[2][4] = {{0}};
    for (int bi = 0; bi < 2; bi++) {
        env_clean();
        ot_backend *be = BE(BACKENDS[bi], 0, 0);
        if (!be) continue;
        rng_seed(1701);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = NULL, *w1 = NULL, *b1 = NULL;
        /* keep every hidden pre-activation away from relu's kink */
        for (int tries = 0; tries < 50; tries++) {
            x = grad_input(be, OT_SHAPE(N, D), false);
            w1 = grad_input(be, OT_SHAPE(D, H), false);
            b1 = grad_input(be, OT_SHAPE(H), false);
            ot_tensor *pre = ot_eval(ot_add(ot_dot(x, w1), b1));
            double mn = INFINITY;
            for (int64_t i = 0; pre && i < N * H; i++) mn = fmin(mn, fabs(getv(pre, i)));
            ot_tensor_free(pre);
            if (mn > 1e-3) break;
        }
        ot_tensor *w2 = grad_input(be, OT_SHAPE(H, C), true);   /* a transposed view */
        ot_tensor *b2 = grad_input(be, OT_SHAPE(C), false);
        ot_node *t1 = onehot_targets(be, N, C, OT_F64);
        ot_tensor *t2 = prob_targets(be, N, C, OT_F64);
        ot_node *l1 = mlp(x, w1, b1, w2, b2, t1);
        gradcheck_at(__FILE__, __LINE__, "mlp, one-hot targets", l1, 4,
                     (ot_tensor *[]){w1, b1, w2, b2}, g[bi]);
        GRADCHECK("mlp, probability targets, w.r.t. x too", mlp(x, w1, b1, w2, b2, ot_tensor_node(t2)),
                  5, w1, b1, w2, b2, x);
        GRADCHECK("sum(mlp)", ot_sum(mlp(x, w1, b1, w2, b2, t1)), 4, w1, b1, w2, b2);
        /* one backprop pass gives the same gradients as each grad alone */
        ot_autodiff *ad = ot_autodiff_new(ot_sum(l1), NULL);
        CHECK(ad != NULL);
        if (ad) {
            ot_tensor *ws[4] = {w1, b1, w2, b2}, *gs[4];
            for (int k = 0; k < 4; k++) gs[k] = KEEP(ot_zeros(be, ot_tensor_shape(ws[k]), OT_F64));
            CHECK_INT(ot_autodiff_backprop(ad, 4, ws, gs), 0);
            for (int k = 0; k < 4; k++) {
                ot_tensor *one = ot_autodiff_grad_tensor(ad, ws[k]);
                CHECK(one != NULL);
                for (int64_t i = 0; one && i < ot_tensor_numel(one); i++)
                    CHECK_NEAR(getv(gs[k], i), getv(one, i), 1e-13);
                ot_tensor_free(one);
            }
            ot_autodiff_free(ad);
        }
        ot_pool_pop(pool);
        arena_release();
        ot_pool_drain();
        ot_backend_free(be);
    }
    /* the cpu gradients against the ref ones (same data: same seed) */
    static const int64_t nel[4] = {D * H, H, H * C, C};
    for (int k = 0; k < 4; k++) {
        for (int64_t i = 0; g[0][k] && g[1][k] && i < nel[k]; i++)
            CHECK_NEAR(g[1][k][i], g[0][k][i], 1e-12);
        free(g[0][k]);
        free(g[1][k]);
    }
}

/* ======================================================================== */
/* 10. Stability at +-1000                                                  */
/* ======================================================================== */

/* Over an empty axis, softmax and logsoftmax are empty, as PyTorch's (the
 * max they shift by has no identity there), and so are their gradients;
 * over a non-empty axis of an empty tensor, too. */
TEST(softmax_over_an_empty_axis)
{
    static const char *const names[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = ot_backend_new(names[b], NULL);
        ot_tensor *x = ot_zeros(be, OT_SHAPE(0, 3), OT_F32), *o = ot_empty(be, OT_SHAPE(0, 3), OT_F32);
        ot_pool *p = ot_pool_push();
        for (int axis = 0; axis < 2; axis++) {
            CHECK_INT(ot_assign(o, ot_softmax(x, .axis = axis)), 0);
            CHECK_INT(ot_assign(o, ot_logsoftmax(x, .axis = axis)), 0);
            ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_logsoftmax(x, .axis = axis)), NULL);
            CHECK_INT(ot_assign(o, ot_autodiff_grad(ad, x)), 0);
            ot_autodiff_free(ad);
        }
        CHECK(ot_softmax(x, .axis = 2) == NULL);   /* out of range still is an error */
        CHECK_ERR(OT_EINVAL, "axis");
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(o);
        ot_backend_free(be);
    }
}

TEST(softmax_stability)
{
    enum { R = 5, K = 3 };
    static const double X[R][K] = {
        {1000, -1000, 0}, {-1000, -1000, -1000}, {1000, 1000, -1000}, {-1000, 1000, 999},
        {0, 0, 0}};
    static const int IDX[R] = {1, 0, 2, 2, 1};
    static const double TP[R][K] = {
        {0.25, 0.5, 0.25}, {0, 0, 1}, {0.5, 0.5, 0}, {0.125, 0.375, 0.5}, {1, 0, 0}};
    /* exact values, in long double: softmax, logsoftmax */
    long double sm[R][K], ls[R][K];
    for (int i = 0; i < R; i++) {
        long double m = fmaxl(fmaxl(X[i][0], X[i][1]), X[i][2]), s = 0;
        for (int j = 0; j < K; j++) s += expl(X[i][j] - m);
        for (int j = 0; j < K; j++) {
            ls[i][j] = X[i][j] - m - logl(s);
            sm[i][j] = expl(ls[i][j]);
        }
    }
    /* hand-checked anchors of the formulas above */
    CHECK(sm[0][0] == 1 && ls[0][1] == -2000 && ls[0][2] == -1000);
    CHECK_NEAR((double)ls[1][0], -log(3.0), 1e-15);
    CHECK_NEAR((double)ls[2][2], -2000 - log(2.0), 1e-15);
    CHECK_NEAR((double)sm[3][2], exp(-1.0) / (1 + exp(-1.0)), 1e-15);
    double rn[R][K], rr[R];
    rng_seed(1801);
    for (int i = 0; i < R; i++) {
        rr[i] = 2 * urand() - 1;
        for (int j = 0; j < K; j++) rn[i][j] = 2 * urand() - 1;
    }
    for (int bi = 0; bi < 2; bi++)
        for (int dti = 0; dti < 2; dti++) {
            ot_dtype dt = dti ? OT_F64 : OT_F32;
            double tol = dti ? 1e-13 : 3e-6;
            const char *dn = dti ? "f64" : "f32";
            env_clean();
            ot_backend *be = BE(BACKENDS[bi], 0, 0);
            if (!be) continue;
            ot_pool *pool = ot_pool_push();
            ot_tensor *x = KEEP(ot_array(be, OT_SHAPE(R, K), dt,
                                         dti ? (const void *)X : (const void *)(float[R][K]){
                                             {1000, -1000, 0}, {-1000, -1000, -1000},
                                             {1000, 1000, -1000}, {-1000, 1000, 999}, {0, 0, 0}}));
            ot_tensor *idx = KEEP(ot_array(be, OT_SHAPE(R), OT_I32, IDX));
            ot_tensor *tp = KEEP(ot_empty(be, OT_SHAPE(R, K), dt));
            ot_tensor *ne = KEEP(ot_empty(be, OT_SHAPE(R, K), dt));
            ot_tensor *ner = KEEP(ot_empty(be, OT_SHAPE(R), dt));
            write_vals(tp, &TP[0][0], 1);
            write_vals(ne, &rn[0][0], 1);
            write_vals(ner, rr, 1);
            ot_node *t1 = ot_onehot(idx, .depth = K, .dtype = dt);
            ot_node *s = ot_softmax(x, .axis = 1), *l = ot_logsoftmax(x, .axis = 1);
            ot_node *ce1 = ot_cross_entropy(ot_softmax(x, .axis = 1), t1, .axis = 1);
            ot_node *ce2 = ot_cross_entropy(ot_softmax(x, .axis = 1), tp, .axis = 1);
            /* forward */
            ot_tensor *vs = ot_eval(s), *vl = ot_eval(l), *v1 = ot_eval(ce1), *v2 = ot_eval(ce2);
            CHECK(vs && vl && v1 && v2);
            for (int i = 0; vs && vl && v1 && v2 && i < R; i++) {
                /* cross_entropy of a softmax takes log p as logsoftmax:
                 * the exact loss, 2000 for a class 2000 below the max */
                long double c1 = 0, c2 = 0;
                for (int j = 0; j < K; j++) {
                    c1 -= (j == IDX[i]) * ls[i][j];
                    c2 -= TP[i][j] * ls[i][j];
                }
                for (int j = 0; j < K; j++) {
                    double gs = getv(vs, i * K + j), gl = getv(vl, i * K + j);
                    if (!isfinite(gs) || !isfinite(gl) || !test__close(gs, (double)sm[i][j], tol) ||
                        !test__close(gl, (double)ls[i][j], tol))
                        test__fail(__FILE__, __LINE__, "%s %s row %d col %d: softmax %.9g (want "
                                   "%.9Lg), logsoftmax %.9g (want %.9Lg)", BACKENDS[bi], dn, i,
                                   j, gs, sm[i][j], gl, ls[i][j]);
                }
                double g1 = getv(v1, i), g2 = getv(v2, i);
                if (!isfinite(g1) || !test__close(g1, (double)c1, tol) || !isfinite(g2) ||
                    !test__close(g2, (double)c2, tol))
                    test__fail(__FILE__, __LINE__, "%s %s row %d: cross_entropy one-hot %.9g "
                               "(want %.9Lg), probabilities %.9g (want %.9Lg)", BACKENDS[bi], dn,
                               i, g1, c1, g2, c2);
            }
            ot_tensor_free(vs);
            ot_tensor_free(vl);
            ot_tensor_free(v1);
            ot_tensor_free(v2);
            /* gradients with next_error rn (softmax, logsoftmax) and rr (ce) */
            struct { const char *name; ot_node *tree; ot_tensor *ne; int kind; } gc[] = {
                {"softmax", s, ne, 0}, {"logsoftmax", l, ne, 1},
                {"cross_entropy(softmax, onehot)", ce1, ner, 2},
                {"cross_entropy(softmax, probabilities)", ce2, ner, 3}};
            for (int q = 0; q < 4; q++) {
                ot_autodiff *ad = ot_autodiff_new(gc[q].tree, ot_tensor_node(gc[q].ne));
                ot_tensor *g = ad ? ot_autodiff_grad_tensor(ad, x) : NULL;
                if (!g) {
                    test__fail(__FILE__, __LINE__, "%s %s grad of %s: %s", BACKENDS[bi], dn,
                               gc[q].name, ot_errmsg());
                    ot_clear_error();
                }
                for (int i = 0; g && i < R; i++) {
                    long double sr = 0, rs = 0;
                    for (int j = 0; j < K; j++) {
                        sr += sm[i][j] * round_to(dt, rn[i][j]);
                        rs += round_to(dt, rn[i][j]);
                    }
                    for (int j = 0; j < K; j++) {
                        long double r = round_to(dt, rn[i][j]), want;
                        long double t = q == 2 ? (j == IDX[i]) : TP[i][j];
                        if (q == 0) want = sm[i][j] * (r - sr);
                        else if (q == 1) want = r - sm[i][j] * rs;
                        else want = round_to(dt, rr[i]) * (sm[i][j] - t);
                        double got = getv(g, i * K + j);
                        if (!isfinite(got) || !test__close(got, (double)want, tol))
                            test__fail(__FILE__, __LINE__, "%s %s d %s / dx[%d][%d] = %.9g, want "
                                       "%.9Lg", BACKENDS[bi], dn, gc[q].name, i, j, got, want);
                    }
                }
                ot_tensor_free(g);
                ot_autodiff_free(ad);
            }
            ot_pool_pop(pool);
            arena_release();
            ot_pool_drain();
            ot_backend_free(be);
        }
}
