/*
 * test_oom.c - allocation-failure injection: every allocation of a set of
 * representative programs is made to fail in turn (ot__alloc_fail_at, the
 * seam of src/core/alloc.c), on the cpu backend (default ISA, so generated code;
 * OT_ISA=sse2; fusion off) and on ref. Each failed run must return
 * OT_ENOMEM with the outputs untouched, or succeed with the right values (an
 * allocation the library can do without, such as generated code); the next
 * run must succeed. Under ASan each case is checked for leaks.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "internal.h"

#include <stdlib.h>

/* The runner checks each case for leaks when it ends; OT_OOM_LEAKS=1 checks
 * after every injected failure instead, to name the allocation that leaks
 * (a heap scan each time: minutes rather than seconds under ASan). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static int leaked(void)
{
    const char *each = getenv("OT_OOM_LEAKS");
    return each && atoi(each) ? __lsan_do_recoverable_leak_check() : 0;
}
#else
static int leaked(void) { return 0; }
#endif

#define NT 8
#define NVIEWS 19
#define R 23
#define C 19

typedef struct config {
    const char *backend;
    const char *isa;      /* OT_ISA, or NULL for the default */
    int fusion;
} config;

/* The second configuration is a narrower table than the default: SSE2 on
 * x86, the scalar one elsewhere (aarch64's default is NEON). */
#if defined(__x86_64__) || defined(__i386__)
#define NARROW_ISA "sse2"
#else
#define NARROW_ISA "scalar"
#endif
static const config configs[] = {{"cpu", NULL, OT_FUSION_DEFAULT}, {"cpu", NARROW_ISA, OT_FUSION_DEFAULT},
                                 {"cpu", NULL, OT_FUSION_OFF}, {"ref", NULL, OT_FUSION_DEFAULT}};

/* A program's world: tensors t[0..nout-1] are its outputs, text what it
 * printed, tree a tree built before the failures are armed. */
typedef struct fx {
    ot_backend *be;
    ot_tensor *t[NT];
    int nout;
    ot_node *tree;
    char *text;
    size_t textlen;
    ot_tensor *views[NVIEWS];     /* views of the inputs, made unarmed */
} fx;

typedef struct program {
    const char *name;
    int plan_cache;               /* backend option */
    void (*setup)(fx *);          /* unarmed */
    int (*run)(fx *);             /* armed: returns 0 or an OT_E* code */
    bool cpu_only;                /* what it exercises is the cpu backend's alone */
} program;

/* Deterministic values in about [-1, 1]. */
static ot_tensor *input(ot_backend *be, int64_t r, int64_t c, int seed)
{
    int64_t n = r * c;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)sin(0.37 * (double)(i + 1) * (seed + 1));
    ot_tensor *t = ot_array(be, OT_SHAPE(r, c), OT_F32, v);
    free(v);
    return t;
}

/* ---- the programs -------------------------------------------------------- */

/* Two fused outputs in one ot_assign_many. */
static void fused_setup(fx *f)
{
    f->nout = 2;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[2] = input(f->be, R, C, 1);
    f->t[3] = input(f->be, R, C, 2);
    f->t[4] = input(f->be, 1, C, 3);
}

static int fused_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *a = ot_tensor_node(f->t[2]), *b = ot_tensor_node(f->t[3]);
    ot_node *s = ot_div(1.0f, ot_add(1.0f, ot_exp(ot_neg(ot_add(a, b)))));
    ot_node *t0 = ot_sub(ot_mul(s, 2.0f), ot_sum(ot_mul(a, b), .axis = 1, .keepdims = true));
    ot_node *t1 = ot_add(ot_div(ot_exp(a), ot_add(1.0f, ot_mul(b, b))), f->t[4]);
    int rc = ot_assign_many(2, f->t, (ot_node *[]){t0, t1});
    ot_pool_pop(p);
    return rc;
}

/* ot_eval into a new tensor, copied into the output. */
static void eval_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[2] = input(f->be, R, C, 4);
}

static int eval_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_tensor *e = ot_eval(ot_tanh(ot_mul(f->t[2], 3.0f)));
    int rc = e ? 0 : ot_errcode();
    if (!rc) {
        ot_pool *q = ot_pool_push();
        rc = q ? ot_assign(f->t[0], e) : ot_errcode();
        if (q) ot_pool_pop(q);
    }
    ot_tensor_free(e);
    ot_pool_pop(p);
    return rc;
}

/* Gradients through a dot, w.r.t. three tensors, in one backprop. The tree
 * is built before arming, so a broken memoised object would show on the
 * retry. */
static void backprop_setup(fx *f)
{
    f->nout = 3;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(8, 6), OT_F32);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(6, 5), OT_F32);
    f->t[2] = ot_zeros(f->be, OT_SHAPE(8, 1), OT_F32);
    f->t[3] = input(f->be, 8, 6, 5);
    f->t[4] = input(f->be, 6, 5, 6);
    f->t[5] = input(f->be, 8, 1, 7);
    f->tree = ot_retain(ot_sum(ot_tanh(ot_add(ot_dot(f->t[3], f->t[4]), f->t[5]))));
}

static int backprop_run(fx *f)
{
    ot_autodiff *ad = ot_autodiff_new(f->tree, NULL);
    if (!ad) return ot_errcode();
    int rc = ot_autodiff_backprop(ad, 3, (ot_tensor *[]){f->t[3], f->t[4], f->t[5]}, f->t);
    ot_autodiff_free(ad);
    return rc;
}

/* An Adam step on a least-squares loss, its gradient fused into the update. */
static void adam_setup(fx *f)
{
    f->nout = 3;
    f->t[0] = input(f->be, 6, 1, 8);                    /* w */
    f->t[1] = ot_zeros(f->be, OT_SHAPE(6, 1), OT_F32);  /* m */
    f->t[2] = ot_zeros(f->be, OT_SHAPE(6, 1), OT_F32);  /* v */
    f->t[3] = input(f->be, 9, 6, 9);                    /* X */
    f->t[4] = input(f->be, 9, 1, 10);                   /* y */
}

static int adam_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *loss = ot_squared_l2(ot_sub(ot_dot(f->t[3], f->t[0]), f->t[4]));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    int rc = ad ? 0 : ot_errcode();
    if (!rc) {
        ot_node *g = ot_autodiff_grad(ad, f->t[0]);
        ot_adam o = ot_adam_default(0.1);
        rc = ot_adam_step(&o, 1, &f->t[0], &g, &f->t[1], &f->t[2]);
    }
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    return rc;
}

/* ot_explain of a tree with a dot and a fused epilogue. */
static void explain_setup(fx *f)
{
    f->t[2] = input(f->be, 8, 6, 11);
    f->t[3] = input(f->be, 6, 5, 12);
    /* Named, so that the text does not hold addresses. */
    ot_tensor_set_name(f->t[2], "w");
    ot_tensor_set_name(f->t[3], "x");
}

typedef int (*print_fn)(const ot_node *, FILE *);

static int print_into(fx *f, ot_node *tree, const print_fn *fns, int n)
{
    free(f->text);
    f->text = NULL;
    FILE *out = open_memstream(&f->text, &f->textlen);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = fns[i](tree, out);
    fclose(out);
    return rc;
}

static int explain_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *t = ot_tanh(ot_add(ot_dot(f->t[2], f->t[3]), ot_sum(f->t[3], .axis = 0)));
    int rc = print_into(f, t, (print_fn[]){ot_explain}, 1);
    ot_pool_pop(p);
    return rc;
}

static int stack_print(const ot_node *tree, FILE *out)
{
    ot_stack *s = ot_stack_new(tree);
    if (!s) return ot_errcode();
    int rc = ot_stack_print(s, out);
    ot_stack_free(s);
    return rc;
}

static int print_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *x = ot_mul(f->t[2], f->t[2]);
    ot_node *t = ot_softmax(ot_add(ot_dot(f->t[2], f->t[3]), ot_sum(x, .axis = 1, .keepdims = true)),
                            .axis = 1);
    int rc = print_into(f, t, (print_fn[]){ot_print, ot_pp, ot_graphviz, stack_print}, 4);
    ot_pool_pop(p);
    return rc;
}

/* A backend with two plan-cache entries, both taken before arming: the
 * armed assignment compiles a third plan and evicts one. */
static void evict_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[2] = input(f->be, R, C, 13);
    ot_pool *p = ot_pool_push();
    ot_assign(f->t[1], ot_exp(f->t[2]));
    ot_assign(f->t[1], ot_mul(ot_neg(f->t[2]), f->t[2]));
    ot_pool_pop(p);
}

static int evict_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    int rc = ot_assign(f->t[0], ot_sqrt(ot_add(ot_abs(f->t[2]), 1.0f)));
    ot_pool_pop(p);
    return rc;
}

/* A large elementwise assignment: the cpu backend runs it as generated code
 * (on a CPU with AVX2 or AVX-512), whose installation can fail too. */
static void jit_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(64, 1000), OT_F32);
    f->t[2] = input(f->be, 64, 1000, 14);
    f->t[3] = input(f->be, 1, 1000, 15);
}

static int jit_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *x = ot_add(ot_mul(f->t[2], f->t[3]), 0.5f);
    int rc = ot_assign(f->t[0], ot_maximum(ot_tanh(x), ot_mul(x, x)));
    ot_pool_pop(p);
    return rc;
}

/* Views and copies: a transposed copy, a slice, a reshape, a broadcast,
 * their assignment, and the values printed. */
static void views_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(C, 5), OT_F32);
    f->t[2] = input(f->be, R, C, 16);
}

static int views_run(fx *f)
{
    ot_tensor *tr = ot_transpose(f->t[2], NULL);
    ot_tensor *cp = tr ? ot_copy(tr) : NULL;
    ot_tensor *sl = cp ? ot_slice(cp, OT_ALL, OT_RANGE(2, 12, 2)) : NULL;
    ot_tensor *first = sl ? ot_slice(sl, OT_IDX(0)) : NULL;
    ot_tensor *row = first ? ot_reshape(first, OT_SHAPE(1, 5)) : NULL;
    ot_tensor *bc = row ? ot_broadcast_to(row, OT_SHAPE(C, 5)) : NULL;
    int rc = bc ? ot_tensor_set_name(bc, "row") : ot_errcode();
    ot_pool *p = rc ? NULL : ot_pool_push();
    if (!rc && !p) rc = ot_errcode();
    if (!rc) rc = ot_assign(f->t[0], ot_add(sl, ot_mul(bc, 2.0f)));
    if (p) ot_pool_pop(p);
    if (!rc) {
        free(f->text);
        f->text = NULL;
        FILE *out = open_memstream(&f->text, &f->textlen);
        rc = ot_tensor_print(bc, out);
        fclose(out);
    }
    ot_tensor_free(bc);
    ot_tensor_free(row);
    ot_tensor_free(first);
    ot_tensor_free(sl);
    ot_tensor_free(cp);
    ot_tensor_free(tr);
    return rc;
}

/* Reductions: over everything (per-chunk partials), along a transposed
 * view's columns (gathered rows), an argmax, and a mean, in one assign. */
static void reduce_setup(fx *f)
{
    f->nout = 4;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(), OT_F32);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(1, R), OT_F32);
    f->t[2] = ot_zeros(f->be, OT_SHAPE(C), OT_I32);
    f->t[3] = ot_zeros(f->be, OT_SHAPE(R, 1), OT_F32);
    f->t[4] = input(f->be, R, C, 17);
    f->t[5] = ot_transpose(f->t[4], NULL);
}

static int reduce_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *x = ot_tensor_node(f->t[4]), *xt = ot_tensor_node(f->t[5]);
    ot_node *trees[4] = {ot_sum(ot_mul(x, x)), ot_max(ot_exp(xt), .axis = 0, .keepdims = true),
                         ot_argmax(x, .axis = 0), ot_mean(ot_abs(x), .axis = 1, .keepdims = true)};
    int rc = ot_assign_many(4, f->t, trees);
    ot_pool_pop(p);
    return rc;
}

/* A Hessian-vector product: the gradient of sum(grad * v), as a tensor. */
static void hvp_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(6, 5), OT_F32);
    f->t[2] = input(f->be, 6, 5, 18);
    f->t[3] = input(f->be, 6, 5, 19);
}

static int hvp_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *loss = ot_sum(ot_mul(ot_tanh(f->t[2]), ot_softmax(f->t[2], .axis = 1)));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    ot_autodiff *ad2 = NULL;
    ot_tensor *h = NULL;
    int rc = ad ? 0 : ot_errcode();
    if (!rc) {
        ad2 = ot_autodiff_new(ot_sum(ot_mul(ot_autodiff_grad(ad, f->t[2]), f->t[3])), NULL);
        rc = ad2 ? 0 : ot_errcode();
    }
    if (!rc) {
        h = ot_autodiff_grad_tensor(ad2, f->t[2]);
        rc = h ? 0 : ot_errcode();
    }
    ot_pool *q = rc ? NULL : ot_pool_push();
    if (!rc && !q) rc = ot_errcode();
    if (!rc) rc = ot_assign(f->t[0], h);
    if (q) ot_pool_pop(q);
    ot_tensor_free(h);
    ot_autodiff_free(ad2);
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    return rc;
}

/* SGD with momentum on two parameters, clipped by their global norm. */
static void sgd_setup(fx *f)
{
    f->nout = 4;
    f->t[0] = input(f->be, 4, 3, 20);
    f->t[1] = input(f->be, 3, 1, 21);
    f->t[2] = ot_zeros(f->be, OT_SHAPE(4, 3), OT_F32);
    f->t[3] = ot_zeros(f->be, OT_SHAPE(3, 1), OT_F32);
    f->t[4] = input(f->be, 7, 4, 22);
}

static int sgd_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *loss = ot_mean(ot_tanh(ot_dot(ot_dot(f->t[4], f->t[0]), f->t[1])));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    int rc = ad ? 0 : ot_errcode();
    double scale = 0;
    ot_node *g[2] = {NULL, NULL};
    if (!rc) {
        g[0] = ot_autodiff_grad(ad, f->t[0]);
        g[1] = ot_autodiff_grad(ad, f->t[1]);
        rc = ot_clip_global_norm(2, g, 0.01, &scale, NULL);
    }
    if (!rc) {
        ot_sgd o = {.lr = 0.5, .momentum = 0.9, .weight_decay = 0.01, .grad_scale = scale};
        rc = ot_sgd_step(&o, 2, f->t, g, &f->t[2]);
    }
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    return rc;
}

/* ot_explain_many of an output that is also an input, then the same
 * assignment, on a backend without fusion. */
static void alias_setup(fx *f)
{
    f->nout = 2;
    f->t[0] = input(f->be, R, C, 23);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    ot_tensor_set_name(f->t[0], "a");
    ot_tensor_set_name(f->t[1], "b");
}

static int alias_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *a = ot_tensor_node(f->t[0]);
    ot_node *trees[2] = {ot_add(ot_neg(ot_neg(a)), 1.0f),
                         ot_mul(ot_sum(a, .axis = 0, .keepdims = true), a)};
    free(f->text);
    f->text = NULL;
    FILE *out = open_memstream(&f->text, &f->textlen);
    int rc = ot_explain_many(2, f->t, trees, out);
    fclose(out);
    if (!rc) rc = ot_assign_many(2, f->t, trees);
    ot_pool_pop(p);
    return rc;
}

/* A tree with a leaf substituted, flattened into its stack. */
static int substitute_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *t = ot_add(ot_mul(f->t[2], f->t[2]), ot_exp(f->t[2]));
    ot_node *s = ot_substitute(t, f->t[2], f->t[4]);
    int rc = s ? 0 : ot_errcode();
    if (!rc) rc = print_into(f, s, (print_fn[]){stack_print}, 1);
    if (!rc) rc = ot_assign(f->t[0], s);
    ot_pool_pop(p);
    return rc;
}

static void substitute_setup(fx *f)
{
    f->nout = 1;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(R, C), OT_F32);
    f->t[2] = input(f->be, R, C, 24);
    f->t[4] = input(f->be, R, C, 25);
    ot_tensor_set_name(f->t[2], "x");
    ot_tensor_set_name(f->t[4], "y");
}

/* Kernels that need the most of a run's reserved memory, on 2 threads:
 * partials of a sum over everything, a column reduction of a transposed
 * input (gathered rows, accumulators), a dot with an operand BLAS cannot
 * read in place (packed) and its epilogue, and a kernel of 18 loads (more
 * than fit on the stack). Large enough to run in parallel. */
#define WR 200
#define WC 180
static void wide_setup(fx *f)
{
    f->nout = 4;
    f->t[0] = ot_zeros(f->be, OT_SHAPE(), OT_F32);
    f->t[1] = ot_zeros(f->be, OT_SHAPE(1, WR), OT_F32);
    f->t[2] = ot_zeros(f->be, OT_SHAPE(WR, 7), OT_F32);
    f->t[3] = ot_zeros(f->be, OT_SHAPE(WR - 18, WC), OT_F32);
    f->t[4] = input(f->be, WR, WC, 26);
    f->t[5] = input(f->be, WC / 2, 7, 27);
    f->views[0] = ot_slice(f->t[4], OT_ALL, OT_RANGE(0, WC, 2));
    for (int i = 0; i < 18; i++) f->views[1 + i] = ot_slice(f->t[4], OT_RANGE(i, WR - 18 + i), OT_ALL);
}

static int wide_run(fx *f)
{
    ot_pool *p = ot_pool_push();
    if (!p) return ot_errcode();
    ot_node *x = ot_tensor_node(f->t[4]), *many = ot_tensor_node(f->views[1]);
    for (int i = 1; i < 18; i++) many = ot_add(many, ot_mul(f->views[1 + i], (float)i));
    ot_node *trees[4] = {ot_sum(ot_mul(x, x)), ot_max(ot_exp(ot_T(x)), .axis = 0, .keepdims = true),
                         ot_tanh(ot_dot(f->views[0], f->t[5])), many};
    int rc = ot_assign_many(4, f->t, trees);
    ot_pool_pop(p);
    return rc;
}

/* ---- the loop ------------------------------------------------------------ */

/* Host copies of a program's outputs and text. */
typedef struct snap {
    void *data[NT];
    size_t bytes[NT];
    char *text;
} snap;

static snap take(const fx *f)
{
    snap s = {{0}, {0}, NULL};
    for (int i = 0; i < f->nout; i++) {
        s.bytes[i] = (size_t)ot_tensor_numel(f->t[i]) * ot_dtype_size(ot_tensor_dtype(f->t[i]));
        s.data[i] = malloc(s.bytes[i] ? s.bytes[i] : 1);
        ot_get(f->t[i], s.data[i]);
    }
    if (f->text) s.text = strdup(f->text);
    /* ot_explain's compile time differs between two compiles of one plan */
    for (char *at = s.text; at && (at = strstr(at, "\n  compiled ")) != NULL;)
        memmove(at + 1, strchr(at + 1, '\n') + 1, strlen(strchr(at + 1, '\n') + 1) + 1);
    return s;
}

static void drop(snap *s)
{
    for (int i = 0; i < NT; i++) free(s->data[i]);
    free(s->text);
}

/* Whether f's outputs (and, with text, its text) are bitwise s's. */
static bool same(const fx *f, const snap *s, bool text)
{
    snap now = take(f);
    bool eq = true;
    for (int i = 0; i < f->nout; i++) eq = eq && memcmp(now.data[i], s->data[i], s->bytes[i]) == 0;
    if (text) eq = eq && now.text && s->text && strcmp(now.text, s->text) == 0;
    drop(&now);
    return eq;
}

static void fx_open(fx *f, const program *p, const config *c)
{
    memset(f, 0, sizeof *f);
    if (c->isa) setenv("OT_ISA", c->isa, 1);
    else unsetenv("OT_ISA");
    ot_backend_opts o = {.threads = 2, .plan_cache = p->plan_cache, .fusion = c->fusion};
    f->be = ot_backend_new(c->backend, &o);
    if (!f->be) {
        test__fail(__FILE__, __LINE__, "%s on %s: ot_backend_new: %s", p->name, c->backend,
                   ot_errmsg());
        return;
    }
    p->setup(f);
    /* Start with no memory kept for reuse, so that every run allocates. */
    ot_pool_drain();
}

static void fx_close(fx *f)
{
    ot_release(f->tree);
    for (int i = 0; i < NVIEWS; i++) ot_tensor_free(f->views[i]);
    for (int i = 0; i < NT; i++) ot_tensor_free(f->t[i]);
    ot_backend_free(f->be);
    free(f->text);
    ot_pool_drain();
}

/* Fails the Nth allocation of p, for every N up to the count of an unarmed
 * run, on every configuration. */
static void oom_loop(const program *p)
{
    for (size_t ci = 0; ci < sizeof configs / sizeof *configs; ci++) {
        const config *c = &configs[ci];
        if (p->cpu_only && strcmp(c->backend, "cpu") != 0) continue;
#if defined(__SANITIZE_ADDRESS__)
        /* Left to the plain unit phase under ASan, where each failure
         * costs most: the narrow table (its allocations are the default's
         * less the generated code's, which the unfused run also skips) and
         * a cpu-only program's unfused run (620 failures of kernels that
         * reserve little: its point is the fused kernels' run memory). */
        if (c->isa || (p->cpu_only && c->fusion == OT_FUSION_OFF)) continue;
#endif
        const char *isa = c->fusion == OT_FUSION_OFF ? "unfused" : c->isa ? c->isa : "default";
        fx f;
        fx_open(&f, p, c);
        if (!f.be) continue;
        ot__alloc_fail_at(0);
        int rc = p->run(&f);
        long count = ot__alloc_count();
        if (rc != 0)
            test__fail(__FILE__, __LINE__, "%s on %s/%s: unarmed run: %s", p->name, c->backend,
                       isa, ot_errmsg());
        snap gold = take(&f);
        fx_close(&f);
        if (count == 0)
            test__fail(__FILE__, __LINE__, "%s on %s/%s: no allocation", p->name, c->backend, isa);
        int enomem = 0;
        for (long n = 1; n <= count; n++) {
            fx_open(&f, p, c);
            if (!f.be) break;
            snap before = take(&f);
            ot_clear_error();
            ot__alloc_fail_at(n);
            rc = p->run(&f);
            ot__alloc_fail_at(0);
            if (rc != 0) {
                enomem++;
                if (rc != OT_ENOMEM || ot_errcode() != OT_ENOMEM)
                    test__fail(__FILE__, __LINE__, "%s on %s/%s, allocation %ld failed: rc %d, "
                               "errcode %d, \"%s\"", p->name, c->backend, isa, n, rc,
                               ot_errcode(), ot_errmsg());
                if (!same(&f, &before, false))
                    test__fail(__FILE__, __LINE__, "%s on %s/%s, allocation %ld failed: "
                               "outputs written", p->name, c->backend, isa, n);
            } else {
                /* Values only: a plan that fell back from generated code or a
                 * fused group is explained as it is (the retry's is checked). */
                if (!same(&f, &gold, false))
                    test__fail(__FILE__, __LINE__, "%s on %s/%s, allocation %ld failed: "
                               "success with wrong results", p->name, c->backend, isa, n);
                /* Back to the inputs of the retry (an optimizer step moves on). */
                for (int i = 0; i < f.nout; i++) ot_set(f.t[i], before.data[i]);
            }
            rc = p->run(&f);
            if (rc != 0 || !same(&f, &gold, gold.text != NULL))
                test__fail(__FILE__, __LINE__, "%s on %s/%s, after allocation %ld failed: the "
                           "next run gives rc %d (%s) or wrong results", p->name, c->backend,
                           isa, n, rc, ot_errmsg());
            drop(&before);
            fx_close(&f);
            if (leaked())
                test__fail(__FILE__, __LINE__, "%s on %s/%s, allocation %ld failed: leak",
                           p->name, c->backend, isa, n);
        }
        if (enomem == 0)
            test__fail(__FILE__, __LINE__, "%s on %s/%s: no failure reported", p->name,
                       c->backend, isa);
        drop(&gold);
    }
}

static const program fused = {"fused assign", 0, fused_setup, fused_run, false};
static const program eval = {"eval", 0, eval_setup, eval_run, false};
static const program backprop = {"backprop with dot", 0, backprop_setup, backprop_run, false};
static const program adam = {"adam step", 0, adam_setup, adam_run, false};
static const program explain = {"explain", 0, explain_setup, explain_run, false};
static const program print = {"print", 0, explain_setup, print_run, false};
static const program evict = {"plan-cache eviction", 2, evict_setup, evict_run, false};
static const program views = {"views", 0, views_setup, views_run, false};
static const program reduce = {"reductions", 0, reduce_setup, reduce_run, false};
static const program hvp = {"hessian-vector product", 0, hvp_setup, hvp_run, false};
static const program sgd = {"sgd step", 0, sgd_setup, sgd_run, false};
static const program alias = {"explain_many, aliased output", 0, alias_setup, alias_run, false};
static const program subst = {"substitute", 0, substitute_setup, substitute_run, false};
static const program jit = {"generated code", 0, jit_setup, jit_run, false};
/* ref reserves no run memory: 18 s under ASan on a Zen 5 VM (its buffers
 * fresh pages, each fault dear there) for nothing this program is about. */
static const program wide = {"run memory", 0, wide_setup, wide_run, true};

TEST(oom_fused_assign) { oom_loop(&fused); }
TEST(oom_eval) { oom_loop(&eval); }
TEST(oom_backprop_dot) { oom_loop(&backprop); }
TEST(oom_adam_step) { oom_loop(&adam); }
TEST(oom_explain) { oom_loop(&explain); }
TEST(oom_print) { oom_loop(&print); }
TEST(oom_plan_cache_eviction) { oom_loop(&evict); }
TEST(oom_generated_code) { oom_loop(&jit); }
TEST(oom_views) { oom_loop(&views); }
TEST(oom_reductions) { oom_loop(&reduce); }
TEST(oom_hessian_vector) { oom_loop(&hvp); }
TEST(oom_sgd_step) { oom_loop(&sgd); }
TEST(oom_explain_many_aliased) { oom_loop(&alias); }
TEST(oom_substitute) { oom_loop(&subst); }
TEST(oom_run_memory) { oom_loop(&wide); }

/* Defect 12: the seed gradient (the constant 1) failing to allocate gave a
 * success with zero gradients, which backprop wrote and the memo kept. Every
 * failed allocation of ot_autodiff_new must now be an OT_ENOMEM, and a later
 * call on the same tree must give the real gradient. */
TEST(defect12_autodiff_enomem_not_zero_gradients)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, -2, 3});
    ot_node *f = ot_retain(ot_sum(ot_mul(x, x)));
    ot_pool_drain();
    ot__alloc_fail_at(0);
    ot_autodiff_free(ot_autodiff_new(f, NULL));
    long count = ot__alloc_count();
    CHECK(count > 0);
    for (long n = 1; n <= count; n++) {
        ot_backend *b2 = ot_backend_new("ref", NULL);
        ot_tensor *y = ot_array(b2, OT_SHAPE(3), OT_F32, (float[]){1, -2, 3});
        ot_node *g = ot_retain(ot_sum(ot_mul(y, y)));
        ot_pool_drain();
        ot__alloc_fail_at(n);
        ot_autodiff *ad = ot_autodiff_new(g, NULL);
        ot__alloc_fail_at(0);
        float grad[3] = {0, 0, 0};
        if (!ad) {
            CHECK_INT(ot_errcode(), OT_ENOMEM);
            ad = ot_autodiff_new(g, NULL);
        }
        CHECK(ad != NULL);
        CHECK_INT(ot_autodiff_grad_host(ad, y, grad), 0);
        CHECK(grad[0] == 2 && grad[1] == -4 && grad[2] == 6);
        ot_autodiff_free(ad);
        ot_release(g);
        ot_tensor_free(y);
        ot_backend_free(b2);
        ot_pool_drain();
    }
    ot_release(f);
    ot_tensor_free(x);
    ot_backend_free(be);
}
