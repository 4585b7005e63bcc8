/*
 * program.c - staged execution: programs (placeholders, variables, steps
 * compiled once and run many times) and ot_sequential, assignments in order.
 *
 * A program's steps are ordinary trees kept with their outputs. Compiling
 * asks the cpu backend's front end (ot__plan_get) for each step's plan and
 * bindings once, and keeps copies of the bindings; which leaf pointers read
 * a placeholder is found by address (the placeholder's own buffer is never
 * handed to anyone else), so a run patches those pointers to the bound
 * memory and calls the executor, with one arena for every step. A symbol's
 * new size is a new specialisation: the steps rebuilt over placeholders of
 * that shape (ot__substitute; gradients derived again) and compiled, and
 * kept beside the others. The ref backend runs the same steps through its
 * assign, the placeholders' buffers pointing at the bound memory meanwhile.
 */
#include "cpu.h"

enum { STEP_ASSIGN, STEP_BACKPROP };
#define MAX_SYMBOLS 64             /* a run's set of bound symbols is one word */

/* A step as added. A backprop step keeps its loss and wrt too, so that a
 * specialisation derives its gradients again (their constants, such as a
 * mean's 1/count, depend on the shapes). */
typedef struct pstep {
    int kind, n;
    ot_tensor **outs;             /* retained */
    ot_node **trees;              /* retained */
    ot_node *loss;                /* STEP_BACKPROP: retained */
    ot_tensor **wrt;              /* STEP_BACKPROP: retained */
} pstep;

typedef struct placeholder {
    char *name;
    ot_shape shape;               /* with OT_SYM dims */
    ot_dtype dtype;
    int64_t esize;                /* bytes per element */
    ot_tensor *t;                 /* at the nominal sizes (owned) */
} placeholder;

/* A leaf pointer that reads placeholder ph, off bytes into it. */
typedef struct patch {
    int slot, ph;
    size_t off;
} patch;

/* A step compiled for one specialisation. */
typedef struct cstep {
    ot_node **trees;              /* the specialisation's (retained) */
    ot_plan *plan;                /* cpu: referenced */
    ot_binding bind;              /* cpu: leaf and param owned here */
    patch *patches;
    int npatch;
} cstep;

typedef struct spec {
    int64_t *sym;                 /* the symbols' sizes */
    ot_tensor **ph;               /* placeholders at those sizes */
    ot_tensor **nominal;          /* the program's own, for ot__substitute */
    cstep *steps;
    char *arena;
    size_t arena_bytes, separate_bytes;
    int kernels;
} spec;

struct ot_program {
    ot_backend *be;
    bool cpu;
    int nsym, nph, nvar, nstep, nspec;
    char **symname;
    int64_t *symnom;
    placeholder *ph;
    ot_tensor **var;
    pstep *steps;
    spec **specs;
    spec *cur;
    /* per run, allocated at compile: bound bases, the binding of each
     * placeholder, the symbols' sizes */
    char **base;
    uint64_t *bound;              /* the run that bound it last */
    int *bound_by;
    uint64_t runs;
    int64_t *symrun;
    /* the buffers steps write, each once, and the first step writing it */
    const ot_buffer **write;
    int *write_step;
    int nwrite;
    /* one call at a time (enter, leave), and where it came from */
    atomic_bool busy;
    ot__site at;
};

/* An error of the call in progress, at its caller's file:line. */
#define FAIL(p, code, ...) ot__err_set((code), (p)->at.file, (p)->at.line, (p)->at.fn, __VA_ARGS__)

/* ---- small helpers ------------------------------------------------------- */

static bool push(void **arr, int *n, size_t elem, const void *item)
{
    void *a = ot__realloc(*arr, elem * (size_t)(*n + 1));
    if (!a) return false;
    memcpy((char *)a + elem * (size_t)*n, item, elem);
    *arr = a;
    (*n)++;
    return true;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ot__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int nomem(const ot_program *p) { return FAIL(p, OT_ENOMEM, "out of memory"); }

/* Prefixes the error in the slot with the call's site, the step and where
 * its tree was built. */
static int step_error(const ot__site *at, int i, const ot_node *tree)
{
    char msg[512], from[256] = "";
    snprintf(msg, sizeof msg, "%s", ot_errmsg());
    if (tree && tree->file) snprintf(from, sizeof from, " (tree built at %s:%d)", tree->file, tree->line);
    int code = ot_errcode() ? ot_errcode() : OT_EINTERNAL;
    return ot__err_set(code, at->file, at->line, at->fn, "step %d%s: %s", i, from, msg);
}

/* Starts a call of fn on p from file:line. One call at a time: a second,
 * concurrent one (another thread's run) is OT_ESTATE instead of a race on
 * the bindings, the specialisations and the arena. One atomic exchange. */
static int enter(const ot_program *cp, const char *fn, const char *file, int line)
{
    if (!cp) return ot__err_set(OT_ENULL, file, line, fn, "program is NULL");
    ot_program *p = (ot_program *)cp;   /* busy and at change in a const call too */
    if (atomic_exchange_explicit(&p->busy, true, memory_order_acquire))
        return ot__err_set(OT_ESTATE, file, line, fn, "the program is in use by a call in "
                           "another thread (one call of a program at a time)");
    p->at = (ot__site){fn, file, line};
    return 0;
}

/* Ends the call enter started; returns rc. */
static int leave(const ot_program *cp, int rc)
{
    atomic_store_explicit(&((ot_program *)cp)->busy, false, memory_order_release);
    return rc;
}

/* ---- ot_sequential ---------------------------------------------------------- */

int ot_sequential_at(int n, const ot_step steps[], const char *file, int line)
{
    const ot__site at = {"sequential", file, line};
    if (n < 0) return ot__err_set(OT_EINVAL, file, line, at.fn, "negative count %d", n);
    if (n > 0 && !steps) return ot__err_set(OT_ENULL, file, line, at.fn, "steps is NULL");
    ot_backend *be;
    for (int i = 0; i < n; i++)
        if (ot__assign_check(at.fn, steps[i].n, steps[i].outs, steps[i].trees, &be))
            return step_error(&at, i, NULL);
    for (int i = 0; i < n; i++)   /* checked above: a step runs on its first output's backend */
        if (steps[i].n &&
            ot__assign_backend(steps[i].outs[0]->leaf.be, steps[i].n, steps[i].outs, steps[i].trees))
            return step_error(&at, i, NULL);
    return 0;
}

/* ---- building a program ------------------------------------------------------ */

ot_program *ot_program_new_at(ot_backend *be, const char *file, int line)
{
    if (!be) {
        ot__err_set(OT_ENULL, file, line, "program_new", "backend is NULL");
        return NULL;
    }
    ot_clear_error();
    ot_program *p = ot__calloc(1, sizeof *p);
    if (!p) {
        ot__err_set(OT_ENOMEM, file, line, "program_new", "out of memory");
        return NULL;
    }
    p->be = be;
    p->cpu = be->vt == &ot__cpu_vt;
    atomic_init(&p->busy, false);
    return p;
}

/* Common checks of the calls that add to a program. */
static int check_open(const ot_program *p)
{
    if (p->nspec) return FAIL(p, OT_ESTATE, "the program is compiled; nothing can be added to it");
    return 0;
}

static int check_name(const ot_program *p, const char *name)
{
    if (!name) return FAIL(p, OT_ENULL, "name is NULL");
    if (!*name) return FAIL(p, OT_EINVAL, "name is empty");
    return 0;
}

static int add_symbol(ot_program *p, const char *name, int64_t nominal)
{
    int rc = check_open(p);
    if (!rc) rc = check_name(p, name);
    if (rc) return rc;
    if (nominal < 0) return FAIL(p, OT_EINVAL, "symbol %s: negative size %lld", name, (long long)nominal);
    if (p->nsym == MAX_SYMBOLS) return FAIL(p, OT_EINVAL, "more than %d symbols", MAX_SYMBOLS);
    for (int i = 0; i < p->nsym; i++)
        if (strcmp(p->symname[i], name) == 0)
            return FAIL(p, OT_EINVAL, "a symbol named %s exists", name);
    ot_clear_error();
    char *d = dup_str(name);
    int n = p->nsym;
    if (!d || !push((void **)&p->symnom, &n, sizeof nominal, &nominal)) {
        free(d);
        return nomem(p);
    }
    if (!push((void **)&p->symname, &p->nsym, sizeof d, &d)) {
        free(d);
        return nomem(p);
    }
    return p->nsym - 1;
}

int ot_program_symbol_at(ot_program *p, const char *name, int64_t nominal, const char *file,
                         int line)
{
    int rc = enter(p, "program_symbol", file, line);
    return rc ? rc : leave(p, add_symbol(p, name, nominal));
}

/* shape with every symbol at its size in sym (checked: a known symbol). */
static int resolve_shape(const ot_program *p, const char *name, ot_shape *shape, const int64_t *sym)
{
    for (int d = 0; d < shape->ndim && d < OT_MAX_DIMS; d++) {
        int64_t v = shape->dims[d];
        if (v >= 0) continue;
        int64_t s = -1 - v;
        if (s >= p->nsym)
            return FAIL(p, OT_EINVAL, "%s: dim %d is symbol %lld, but the program has %d symbols",
                        name, d, (long long)s, p->nsym);
        shape->dims[d] = sym[s];
    }
    return 0;
}

static ot_tensor *add_placeholder(ot_program *p, const char *name, ot_shape shape, ot_dtype dtype)
{
    int rc = check_open(p);
    if (!rc) rc = check_name(p, name);
    for (int i = 0; !rc && i < p->nph; i++)
        if (strcmp(p->ph[i].name, name) == 0)
            rc = FAIL(p, OT_EINVAL, "a placeholder named %s exists", name);
    ot_shape nominal = shape;
    if (!rc) rc = resolve_shape(p, name, &nominal, p->symnom);
    if (rc) return NULL;
    ot_tensor *t = ot_empty(p->be, nominal, dtype);
    if (!t) return NULL;
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    placeholder ph = {dup_str(name), shape, dt, (int64_t)ot_dtype_size(dt), t};
    if (!ph.name || ot_tensor_set_name(t, name) || !push((void **)&p->ph, &p->nph, sizeof ph, &ph)) {
        free(ph.name);
        ot_tensor_free(t);
        nomem(p);
        return NULL;
    }
    return t;
}

ot_tensor *ot_program_placeholder_at(ot_program *p, const char *name, ot_shape shape,
                                     ot_dtype dtype, const char *file, int line)
{
    if (enter(p, "program_placeholder", file, line)) return NULL;
    ot_tensor *t = add_placeholder(p, name, shape, dtype);
    leave(p, 0);
    return t;
}

static ot_tensor *init_tensor(ot_backend *be, ot_shape shape, ot_dtype dtype, const ot_init *in)
{
    switch (in->kind) {
    case OT_INIT_ZEROS: return ot_zeros(be, shape, dtype);
    case OT_INIT_CONSTANT: return ot_full(be, shape, dtype, in->value);
    case OT_INIT_DATA: return ot_array(be, shape, dtype, in->data);
    default: break;
    }
    ot_tensor *t = ot_empty(be, shape, dtype);
    ot_pool *pool = t ? ot_pool_push() : NULL;
    if (!pool) {
        ot_tensor_free(t);
        return NULL;
    }
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    ot_node *u = ot_rand(shape, in->seed, dt == OT_F64 ? OT_F64 : OT_F32);
    int rc = ot_assign(t, ot_add(ot_mul(u, in->hi - in->lo), in->lo));
    ot_pool_pop(pool);
    if (rc) {
        ot_tensor_free(t);
        return NULL;
    }
    return t;
}

static int check_init(const ot_program *p, const ot_init *in)
{
    if (in->kind < OT_INIT_ZEROS || in->kind > OT_INIT_DATA)
        return FAIL(p, OT_EINVAL, "unknown initializer kind %d", in->kind);
    if (in->kind == OT_INIT_DATA && !in->data)
        return FAIL(p, OT_ENULL, "the initializer's data is NULL");
    if (in->kind == OT_INIT_UNIFORM && !(isfinite(in->lo) && isfinite(in->hi) && in->lo <= in->hi))
        return FAIL(p, OT_EINVAL, "uniform initializer bounds [%g, %g) are not finite with lo <= hi",
                    in->lo, in->hi);
    return 0;
}

static ot_tensor *add_variable(ot_program *p, const char *name, ot_shape shape, ot_dtype dtype,
                               const ot_init *init)
{
    int rc = check_open(p);
    if (!rc) rc = check_name(p, name);
    if (!rc) rc = check_init(p, init);
    char s1[OT__SHAPE_STRLEN];
    for (int d = 0; !rc && d < shape.ndim && d < OT_MAX_DIMS; d++)
        if (shape.dims[d] < 0)
            rc = FAIL(p, OT_EINVAL, "variable %s: shape %s: dim %d is negative (a variable's "
                      "shape has no symbols)", name, ot__shape_str(&shape, s1), d);
    if (rc) return NULL;
    ot_clear_error();
    ot_tensor *t = init_tensor(p->be, shape, dtype, init);
    if (!t) return NULL;
    if (dtype != OT_I32) t->buf->var = t;    /* trainable, as ngraph's variables */
    if (ot_tensor_set_name(t, name) || !push((void **)&p->var, &p->nvar, sizeof t, &t)) {
        ot_tensor_free(t);
        nomem(p);
        return NULL;
    }
    return t;
}

ot_tensor *ot_program_variable_at(ot_program *p, const char *name, ot_shape shape,
                                  ot_dtype dtype, ot_init init, const char *file, int line)
{
    if (enter(p, "program_variable", file, line)) return NULL;
    ot_tensor *t = add_variable(p, name, shape, dtype, &init);
    leave(p, 0);
    return t;
}

int ot_program_variables_at(const ot_program *p, int n, ot_tensor *out[], const char *file,
                            int line)
{
    int rc = enter(p, "program_variables", file, line);
    if (rc) return rc;
    if (n < 0) return leave(p, FAIL(p, OT_EINVAL, "negative count %d", n));
    if (n > 0 && !out) return leave(p, FAIL(p, OT_ENULL, "out is NULL"));
    for (int i = 0; i < n && i < p->nvar; i++) out[i] = p->var[i];
    return leave(p, p->nvar);
}

/* ---- steps --------------------------------------------------------------- */

static void pstep_free(pstep *s)
{
    for (int i = 0; i < s->n; i++) {
        if (s->outs) ot_release(s->outs[i] ? &s->outs[i]->leaf : NULL);
        if (s->trees) ot_release(s->trees[i]);
        if (s->wrt) ot_release(s->wrt[i] ? &s->wrt[i]->leaf : NULL);
    }
    ot_release(s->loss);
    free(s->outs);
    free(s->trees);
    free(s->wrt);
}

/* A copy of n tensors, each retained; NULL when out of memory. */
static ot_tensor **keep_tensors(ot_tensor *const t[], int n)
{
    ot_tensor **c = ot__malloc(sizeof *c * (size_t)n);
    for (int i = 0; c && i < n; i++) c[i] = (ot_tensor *)ot_retain(&t[i]->leaf);
    return c;
}

/* A step of n outputs and trees (and a backprop's loss and wrt), retained,
 * appended. A step without outputs does nothing and is not kept. */
static int add_step(ot_program *p, pstep s)
{
    if (s.n == 0) return 0;
    ot_tensor **outs = keep_tensors(s.outs, s.n);
    ot_node **trees = ot__malloc(sizeof *trees * (size_t)s.n);
    ot_tensor **wrt = s.wrt ? keep_tensors(s.wrt, s.n) : NULL;
    for (int i = 0; trees && i < s.n; i++) trees[i] = ot_retain(s.trees[i]);
    pstep k = {s.kind, s.n, outs, trees, s.loss ? ot_retain(s.loss) : NULL, wrt};
    if (outs && trees && (wrt || !s.wrt) && push((void **)&p->steps, &p->nstep, sizeof k, &k))
        return 0;
    k.n = 0;   /* what was retained is released by hand: the arrays are partial */
    for (int i = 0; i < s.n; i++) {
        if (outs) ot_release(&outs[i]->leaf);
        if (trees) ot_release(trees[i]);
        if (wrt) ot_release(&wrt[i]->leaf);
    }
    pstep_free(&k);
    return nomem(p);
}

/* A NULL tree or tensor handed in: the builder's error in the slot, if any
 * (a NULL tree is how a failed builder answers), or OT_ENULL naming what. */
static int null_arg(const ot_program *p, const char *what)
{
    return ot_errcode() ? ot_errcode() : FAIL(p, OT_ENULL, "%s is NULL", what);
}

/* NULLs first (a NULL tree keeps its builder's error), then the slot is
 * cleared; shapes and dtypes are checked at compile, step by step. */
static int check_step(const ot_program *p, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    int rc = check_open(p);
    if (rc) return rc;
    if (n < 0) return FAIL(p, OT_EINVAL, "negative count %d", n);
    if (n > 0 && (!outs || !trees)) return FAIL(p, OT_ENULL, "%s is NULL", outs ? "trees" : "outs");
    for (int i = 0; i < n; i++) {
        if (!trees[i]) return null_arg(p, "tree");
        if (!outs[i]) return FAIL(p, OT_ENULL, "output tensor %d is NULL", i);
    }
    if ((rc = ot__nodes_check(p->at.fn, p->at.file, p->at.line, "trees", n, trees))) return rc;
    ot_clear_error();
    return 0;
}

static int add_assign(ot_program *p, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    int rc = check_step(p, n, outs, trees);
    return rc ? rc : add_step(p, (pstep){STEP_ASSIGN, n, (ot_tensor **)outs, (ot_node **)trees, NULL, NULL});
}

int ot_program_assign_many_at(ot_program *p, int n, ot_tensor *const outs[],
                              ot_node *const trees[], const char *file, int line)
{
    int rc = enter(p, "program_assign_many", file, line);
    return rc ? rc : leave(p, add_assign(p, n, outs, trees));
}

int ot_program_assign_at(ot_program *p, ot_tensor *out, ot_node *tree, const char *file, int line)
{
    int rc = enter(p, "program_assign", file, line);
    return rc ? rc : leave(p, add_assign(p, 1, &out, &tree));
}

/* The gradients of loss w.r.t. wrt into trees (current pool). */
static int grad_trees(const ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                      ot_node **trees)
{
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    if (!ad) return ot_errcode();
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!wrt[i]) rc = FAIL(p, OT_ENULL, "wrt[%d] is NULL", i);
        else if (!(trees[i] = ot__autodiff_grad_tree(ad, wrt[i]))) rc = ot_errcode();
    }
    ot_autodiff_free(ad);
    return rc;
}

static int add_backprop(ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                        ot_tensor *const grads[])
{
    int rc = check_open(p);
    if (rc) return rc;
    if (!loss) return null_arg(p, "loss");
    if ((rc = ot__node_check(p->at.fn, p->at.file, p->at.line, "loss", loss))) return rc;
    if (n < 0) return FAIL(p, OT_EINVAL, "negative count %d", n);
    if (n > 0 && (!wrt || !grads)) return FAIL(p, OT_ENULL, "%s is NULL", wrt ? "grads" : "wrt");
    for (int i = 0; i < n; i++)
        if (!grads[i]) return FAIL(p, OT_ENULL, "grads[%d] is NULL", i);
    ot_clear_error();
    ot_node **trees = ot__calloc((size_t)(n ? n : 1), sizeof *trees);
    ot_pool *pool = trees ? ot_pool_push() : NULL;
    if (!pool) {
        free(trees);
        return nomem(p);
    }
    rc = grad_trees(p, loss, n, wrt, trees);
    if (!rc) rc = add_step(p, (pstep){STEP_BACKPROP, n, (ot_tensor **)grads, trees, loss, (ot_tensor **)wrt});
    ot_pool_pop(pool);
    free(trees);
    return rc;
}

int ot_program_backprop_at(ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                           ot_tensor *const grads[], const char *file, int line)
{
    int rc = enter(p, "program_backprop", file, line);
    return rc ? rc : leave(p, add_backprop(p, loss, n, wrt, grads));
}

static int add_sgd(ot_program *p, const ot_sgd *o, int n, ot_tensor *const w[],
                   ot_node *const g[], ot_tensor *const vel[])
{
    int rc = check_open(p);
    if (!rc) rc = ot__nodes_check(p->at.fn, p->at.file, p->at.line, "g", n, g);
    if (rc) return rc;
    size_t cap = n > 0 ? 2 * (size_t)n : 1;
    ot_tensor **outs = ot__calloc(cap, sizeof *outs);
    ot_node **trees = ot__calloc(cap, sizeof *trees);
    ot_pool *pool = outs && trees ? ot_pool_push() : NULL;
    int count = 0;
    if (!pool) rc = nomem(p);
    if (!rc) rc = ot__sgd_trees(&p->at, o, n, w, g, vel, outs, trees, &count);
    if (!rc) rc = add_step(p, (pstep){STEP_ASSIGN, count, outs, trees, NULL, NULL});
    if (pool) ot_pool_pop(pool);
    free(outs);
    free(trees);
    return rc;
}

int ot_program_sgd_at(ot_program *p, const ot_sgd *o, int n, ot_tensor *const w[],
                      ot_node *const g[], ot_tensor *const vel[], const char *file, int line)
{
    int rc = enter(p, "program_sgd", file, line);
    return rc ? rc : leave(p, add_sgd(p, o, n, w, g, vel));
}

/* Two steps: the program's own step count (a 0-d f64 tensor, t - 1 before
 * the first run) goes up by one, then Adam's update reads it. */
static int add_adam(ot_program *p, const ot_adam *opts, int n, ot_tensor *const w[],
                    ot_node *const g[], ot_tensor *const m[], ot_tensor *const v[])
{
    ot_adam o;
    int rc = check_open(p);
    if (!rc) rc = ot__adam_opts(&p->at, opts, &o);
    if (!rc) rc = ot__nodes_check(p->at.fn, p->at.file, p->at.line, "g", n, g);
    if (rc) return rc;
    size_t cap = n > 0 ? 3 * (size_t)n : 1;
    ot_tensor **outs = ot__calloc(cap, sizeof *outs);
    ot_node **trees = ot__calloc(cap, sizeof *trees);
    ot_tensor *count = ot_full(p->be, OT_SHAPE(), OT_F64, (double)o.t - 1);
    ot_pool *pool = outs && trees && count ? ot_pool_push() : NULL;
    int nout = 0;
    if (!pool) rc = ot_errcode() ? ot_errcode() : nomem(p);
    if (!rc) rc = ot__adam_trees(&p->at, &o, count, n, w, g, m, v, outs, trees, &nout);
    if (!rc && nout) {
        ot_node *next = ot_add(count, 1.0);
        rc = next ? add_step(p, (pstep){STEP_ASSIGN, 1, &count, &next, NULL, NULL}) : ot_errcode();
    }
    if (!rc) rc = add_step(p, (pstep){STEP_ASSIGN, nout, outs, trees, NULL, NULL});
    if (pool) ot_pool_pop(pool);
    ot_tensor_free(count);   /* the steps hold it */
    free(outs);
    free(trees);
    return rc;
}

int ot_program_adam_at(ot_program *p, const ot_adam *o, int n, ot_tensor *const w[],
                       ot_node *const g[], ot_tensor *const m[], ot_tensor *const v[],
                       const char *file, int line)
{
    int rc = enter(p, "program_adam", file, line);
    return rc ? rc : leave(p, add_adam(p, o, n, w, g, m, v));
}

/* ---- specialisations ------------------------------------------------------- */

static void spec_free(const ot_program *p, spec *s)
{
    if (!s) return;
    for (int i = 0; s->steps && i < p->nstep; i++) {
        cstep *c = &s->steps[i];
        for (int j = 0; c->trees && j < p->steps[i].n; j++) ot_release(c->trees[j]);
        free(c->trees);
        if (c->plan) ot__plan_release(c->plan);
        free(c->bind.leaf);
        free((double *)c->bind.param);
        free(c->patches);
    }
    for (int k = 0; s->ph && k < p->nph; k++)
        if (s->ph[k] != p->ph[k].t) ot_tensor_free(s->ph[k]);
    free(s->steps);
    free(s->ph);
    free(s->nominal);
    free(s->sym);
    free(s->arena);
    free(s);
}

/* A step's trees over this specialisation's placeholders, retained into
 * c->trees (the program's own when the sizes are the nominal ones). */
static int spec_trees(const ot_program *p, const spec *s, int i, cstep *c)
{
    const pstep *st = &p->steps[i];
    int rc = 0;
    bool nominal = true;
    for (int k = 0; k < p->nph; k++) nominal = nominal && s->ph[k] == p->ph[k].t;
    if (nominal) {
        for (int j = 0; j < st->n; j++) c->trees[j] = ot_retain(st->trees[j]);
        return 0;
    }
    ot_pool *pool = ot_pool_push();
    if (!pool) return nomem(p);
    ot_node *loss = st->loss;
    if (st->kind != STEP_BACKPROP) memcpy(c->trees, st->trees, sizeof *c->trees * (size_t)st->n);
    ot_node **src = st->kind == STEP_BACKPROP ? &loss : c->trees;
    int nsrc = st->kind == STEP_BACKPROP ? 1 : st->n;
    for (int j = 0; j < nsrc && !rc; j++)
        if (!(src[j] = ot__substitute(src[j], p->nph, s->nominal, s->ph)))
            rc = ot_errcode() ? ot_errcode() : OT_EINVAL;
    if (!rc && st->kind == STEP_BACKPROP) rc = grad_trees(p, loss, st->n, st->wrt, c->trees);
    for (int j = 0; j < st->n && !rc; j++) ot_retain(c->trees[j]);
    if (rc) memset(c->trees, 0, sizeof *c->trees * (size_t)st->n);
    ot_pool_pop(pool);
    return rc;
}

/* The placeholder (of s) whose buffer holds ptr, or -1; -2 for a nominal
 * placeholder s does not read (a view of a symbolic one). */
static int find_ph(const ot_program *p, const spec *s, const char *ptr, size_t *off)
{
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < p->nph; k++) {
            const ot_tensor *t = pass ? p->ph[k].t : s->ph[k];
            const char *d = t->buf->data;
            size_t n = t->buf->nbytes ? t->buf->nbytes : 1;
            if (ptr >= d && ptr < d + n) {
                *off = (size_t)(ptr - d);
                return pass ? -2 : k;
            }
        }
    return -1;
}

typedef struct plan_ctx {
    const ot_program *p;
    const spec *s;
    cstep *c;
} plan_ctx;

/* Plans trees (a step's, rewritten by the backend's rule sets where it has
 * any) into c: its plan, bindings copied, patches found. */
static int plan_trees(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                      void *ctx)
{
    const plan_ctx *x = ctx;
    const ot_program *p = x->p;
    const spec *s = x->s;
    cstep *c = x->c;
    ot_plan *plan;
    ot_walk *walk;
    ot_binding bind;
    int rc = ot__plan_get(be, n, outs, trees, &plan, &walk, &bind);
    if (rc) return rc;
    if (bind.borrowed) atomic_fetch_add(&plan->refs, 1);
    c->plan = plan;
    size_t nl = (size_t)plan->nleaves, np = (size_t)plan->nparams;
    c->bind.leaf = ot__malloc(sizeof(char *) * (nl ? nl : 1));
    double *param = ot__malloc(sizeof(double) * (np ? np : 1));
    c->bind.param = param;
    c->patches = ot__malloc(sizeof *c->patches * (nl ? nl : 1));
    c->bind.outs = outs;
    if (!c->bind.leaf || !param || !c->patches) {
        ot__walk_done(p->be, walk);
        return nomem(p);
    }
    if (nl) memcpy(c->bind.leaf, bind.leaf, sizeof(char *) * nl);
    if (np) memcpy(param, bind.param, sizeof(double) * np);
    ot__walk_done(p->be, walk);
    for (size_t j = 0; j < nl; j++) {
        size_t off;
        int k = find_ph(p, s, c->bind.leaf[j], &off);
        if (k == -2)
            return FAIL(p, OT_EUNSUPPORTED, "a tree reads a view "
                               "(slice, reshape) of a symbolic placeholder, which cannot be "
                               "specialised to another size; bind the view's shape instead");
        if (k >= 0) c->patches[c->npatch++] = (patch){(int)j, k, off};
    }
    return 0;
}

/* Plans step i for s, with the backend's rule sets applied first, as a
 * plain assignment of the step would have them (the rewritten trees die
 * after planning: the plan and the copied bindings do not refer to them). */
static int plan_step(const ot_program *p, const spec *s, int i, cstep *c)
{
    const pstep *st = &p->steps[i];
    plan_ctx x = {p, s, c};
    if (p->be->rewrite)
        return ot__rewrite_then(p->be, st->n, st->outs, c->trees, NULL, plan_trees, &x);
    return plan_trees(p->be, st->n, st->outs, c->trees, &x);
}

/* Checks and (cpu) plans step i of s. */
static int compile_step(const ot_program *p, spec *s, int i)
{
    const pstep *st = &p->steps[i];
    cstep *c = &s->steps[i];
    c->trees = ot__calloc((size_t)(st->n ? st->n : 1), sizeof *c->trees);
    if (!c->trees) return nomem(p);
    int rc = spec_trees(p, s, i, c);
    ot_backend *be;
    if (!rc) rc = ot__assign_check(p->at.fn, st->n, st->outs, c->trees, &be);
    for (int j = 0; j < st->n && !rc; j++) {
        if (be != p->be)
            rc = FAIL(p, OT_EBACKEND, "output %d is on another backend", j);
        for (int k = 0; k < p->nph && !rc; k++)
            if (st->outs[j]->buf == s->ph[k]->buf || st->outs[j]->buf == p->ph[k].t->buf)
                rc = FAIL(p, OT_EINVAL, "output %d writes placeholder %s; "
                                 "placeholders are inputs", j, p->ph[k].name);
    }
    if (!rc && p->cpu) rc = plan_step(p, s, i, c);
    if (rc) return step_error(&p->at, i, c->trees[0] ? c->trees[0] : st->trees[0]);
    size_t bytes = 0;
    if (p->cpu && !ot__plan_run_bytes(p->be, c->plan, &bytes))
        return step_error(&p->at, i, st->trees[0]);
    if (bytes > s->arena_bytes) s->arena_bytes = bytes;
    s->separate_bytes += bytes;
    s->kernels += p->cpu ? c->plan->nkernels : 0;
    return 0;
}

/* A specialisation at sizes sym: placeholders of those shapes, every step
 * compiled, the arena allocated. */
static int spec_new(ot_program *p, const int64_t *sym, spec **out)
{
    spec *s = ot__calloc(1, sizeof *s);
    if (!s) return nomem(p);
    s->sym = ot__calloc((size_t)(p->nsym ? p->nsym : 1), sizeof *s->sym);
    s->ph = ot__calloc((size_t)(p->nph ? p->nph : 1), sizeof *s->ph);
    s->nominal = ot__calloc((size_t)(p->nph ? p->nph : 1), sizeof *s->nominal);
    s->steps = ot__calloc((size_t)(p->nstep ? p->nstep : 1), sizeof *s->steps);
    int rc = s->sym && s->ph && s->nominal && s->steps ? 0 : nomem(p);
    for (int k = 0; k < p->nph && !rc; k++) s->nominal[k] = p->ph[k].t;
    if (!rc && p->nsym) memcpy(s->sym, sym, sizeof *sym * (size_t)p->nsym);
    for (int k = 0; k < p->nph && !rc; k++) {
        ot_shape shape = p->ph[k].shape;
        resolve_shape(p, p->ph[k].name, &shape, sym);
        s->ph[k] = ot__shape_eq(&shape, &p->ph[k].t->leaf.shape)
                       ? p->ph[k].t : ot_empty(p->be, shape, p->ph[k].dtype);
        if (!s->ph[k]) rc = ot_errcode();
        else if (s->ph[k] != p->ph[k].t) rc = ot_tensor_set_name(s->ph[k], p->ph[k].name);
    }
    for (int i = 0; i < p->nstep && !rc; i++) rc = compile_step(p, s, i);
    if (!rc && s->arena_bytes && !(s->arena = ot__data_alloc(s->arena_bytes)))
        rc = FAIL(p, OT_ENOMEM, "out of memory for the %zu-byte arena",
                         s->arena_bytes);
    if (!rc && !push((void **)&p->specs, &p->nspec, sizeof s, &s)) rc = nomem(p);
    if (rc) {
        spec_free(p, s);
        return rc;
    }
    *out = s;
    return 0;
}

/* The buffers that steps write, for the run's alias check. */
static int find_writes(ot_program *p)
{
    free(p->write);
    free(p->write_step);
    p->nwrite = 0;
    size_t cap = 1;
    for (int i = 0; i < p->nstep; i++) cap += (size_t)p->steps[i].n;
    p->write = ot__malloc(sizeof *p->write * cap);
    p->write_step = ot__malloc(sizeof *p->write_step * cap);
    if (!p->write || !p->write_step) return OT_ENOMEM;
    for (int i = 0; i < p->nstep; i++)
        for (int j = 0; j < p->steps[i].n; j++) {
            const ot_buffer *b = p->steps[i].outs[j]->buf;
            bool seen = false;
            for (int w = 0; w < p->nwrite && !seen; w++) seen = p->write[w] == b;
            if (seen) continue;
            p->write[p->nwrite] = b;
            p->write_step[p->nwrite++] = i;
        }
    return 0;
}

static int compile(ot_program *p)
{
    int rc = check_open(p);
    if (rc) return rc;
    ot_clear_error();
    size_t nph = (size_t)(p->nph ? p->nph : 1);
    if (!p->base) p->base = ot__calloc(nph, sizeof *p->base);
    if (!p->bound) p->bound = ot__calloc(nph, sizeof *p->bound);
    if (!p->bound_by) p->bound_by = ot__calloc(nph, sizeof *p->bound_by);
    if (!p->symrun) p->symrun = ot__calloc((size_t)(p->nsym ? p->nsym : 1), sizeof *p->symrun);
    if (!p->base || !p->bound || !p->bound_by || !p->symrun || find_writes(p)) return nomem(p);
    return spec_new(p, p->symnom, &p->cur);
}

int ot_program_compile_at(ot_program *p, const char *file, int line)
{
    int rc = enter(p, "program_compile", file, line);
    return rc ? rc : leave(p, compile(p));
}

/* ---- running ------------------------------------------------------------------ */

/* The placeholder named name, or -1; binding i is tried against
 * placeholder i first (bindings in creation order cost one compare). */
static int ph_index(const ot_program *p, int i, const char *name)
{
    if (i < p->nph && strcmp(p->ph[i].name, name) == 0) return i;
    for (int k = 0; k < p->nph; k++)
        if (strcmp(p->ph[k].name, name) == 0) return k;
    return -1;
}

/* Checks shape (bound to placeholder k) against its fixed dims, records
 * its symbols' sizes in p->symrun (which must agree with earlier bindings)
 * and its size in bytes; with strides (a tensor's), that they are
 * row-major contiguous. One pass: this runs per binding per run. */
static int check_dims(ot_program *p, int k, const ot_shape *shape, const int64_t *strides,
                      uint64_t *symset, size_t *nbytes)
{
    const placeholder *ph = &p->ph[k];
    char s1[OT__SHAPE_STRLEN];
    if (shape->ndim != ph->shape.ndim)
        return FAIL(p, OT_ESHAPE, "placeholder %s has %d dims; bound to shape %s",
                           ph->name, ph->shape.ndim, ot__shape_str(shape, s1));
    int64_t numel = 1;
    bool contiguous = true;
    for (int d = shape->ndim - 1; d >= 0; d--) {
        int64_t want = ph->shape.dims[d], got = shape->dims[d];
        if (got < 0)
            return FAIL(p, OT_ESHAPE, "placeholder %s: negative dim %d", ph->name, d);
        if (want >= 0 && want != got)
            return FAIL(p, OT_ESHAPE, "placeholder %s: dim %d is %lld, bound to "
                               "shape %s", ph->name, d, (long long)want, ot__shape_str(shape, s1));
        contiguous = contiguous && (!strides || got == 1 || strides[d] == numel);
        if (!ot__mul_i64(&numel, numel, got))
            return FAIL(p, OT_EOVERFLOW, "binding %s: size overflows", ph->name);
        if (want >= 0) continue;
        int64_t sy = -1 - want;
        uint64_t bit = (uint64_t)1 << sy;
        if ((*symset & bit) && p->symrun[sy] != got)
            return FAIL(p, OT_ESHAPE, "symbol %s bound two ways: %lld, and "
                               "%lld by placeholder %s", p->symname[sy],
                               (long long)p->symrun[sy], (long long)got, ph->name);
        *symset |= bit;
        p->symrun[sy] = got;
    }
    if (!contiguous && numel)
        return FAIL(p, OT_EINVAL, "binding %s: the tensor is not contiguous "
                           "(ot_copy it)", ph->name);
    if (!ot__mul_size(nbytes, (size_t)numel, (size_t)ph->esize))
        return FAIL(p, OT_EOVERFLOW, "binding %s: size overflows", ph->name);
    return 0;
}

/* Host data of fewer bytes than its shape needs (or of no stated size):
 * the run would read past the caller's buffer. */
static int short_data(const ot_program *p, const ot_bind *b, const ot_shape *shape, size_t need)
{
    char s1[OT__SHAPE_STRLEN];
    if (!b->nbytes)
        return FAIL(p, OT_EINVAL, "binding %s: host data of shape %s needs %zu bytes and the "
                    "binding gives no byte count (OT_BIND_DATA's nbytes)", b->name,
                    ot__shape_str(shape, s1), need);
    return FAIL(p, OT_EINVAL, "binding %s: host data of shape %s needs %zu bytes; the binding "
                "gives %zu", b->name, ot__shape_str(shape, s1), need, b->nbytes);
}

/* One binding checked: returns its placeholder's index, its base set in
 * p->base and its size in *nbytes, or a negative OT_E* code. */
static int check_bind(ot_program *p, int i, const ot_bind *b, uint64_t *symset, size_t *nbytes)
{
    if (!b->name) return FAIL(p, OT_ENULL, "binding %d: name is NULL", i);
    int k = ph_index(p, i, b->name);
    if (k < 0) return FAIL(p, OT_EINVAL, "binding %d: no placeholder named %s", i, b->name);
    if (p->bound[k] == p->runs)
        return FAIL(p, OT_EINVAL, "placeholder %s bound twice (bindings %d and %d)",
                           b->name, p->bound_by[k], i);
    if (!b->tensor == !b->data)
        return FAIL(p, b->tensor ? OT_EINVAL : OT_ENULL, "binding %d (%s): give a tensor or data, "
                    "not %s", i, b->name, b->tensor ? "both" : "neither");
    const placeholder *ph = &p->ph[k];
    const ot_tensor *t = b->tensor;
    const ot_shape *shape = b->has_shape ? &b->shape : &p->cur->ph[k]->leaf.shape;
    if (t) {
        if (t->leaf.be != p->be)
            return FAIL(p, OT_EBACKEND, "binding %s: the tensor is on another backend",
                               b->name);
        if (t->leaf.dtype != ph->dtype)
            return FAIL(p, OT_EDTYPE, "binding %s: a %s tensor for a %s placeholder",
                               b->name, ot_dtype_name((ot_dtype)t->leaf.dtype), ot_dtype_name(ph->dtype));
        shape = &t->leaf.shape;
    }
    int rc = check_dims(p, k, shape, t ? t->strides : NULL, symset, nbytes);
    if (!rc && !t && *nbytes > b->nbytes) rc = short_data(p, b, shape, *nbytes);
    if (rc) return rc;
    p->bound[k] = p->runs;
    p->bound_by[k] = i;
    p->base[k] = t ? (char *)t->buf->data + t->offset * ph->esize : (char *)b->data;
    return k;
}

/* Bound memory must not overlap a buffer a step writes: the plans assumed
 * their leaves and outputs apart. */
static int check_alias(const ot_program *p, int k, size_t nbytes)
{
    const char *lo = p->base[k], *hi = lo + nbytes;
    for (int i = 0; i < p->nwrite; i++) {
        const char *d = p->write[i]->data;
        if (nbytes && lo < d + p->write[i]->nbytes && d < hi)
            return FAIL(p, OT_EALIAS, "placeholder %s is bound "
                               "to memory that step %d writes", p->ph[k].name, p->write_step[i]);
    }
    return 0;
}

static int check_bindings(ot_program *p, int n, const ot_bind b[])
{
    if (n < 0) return FAIL(p, OT_EINVAL, "negative count %d", n);
    if (n > 0 && !b) return FAIL(p, OT_ENULL, "bindings is NULL");
    p->runs++;   /* a placeholder is bound in this run when p->bound says so */
    uint64_t symset = 0;
    if (p->nsym) memcpy(p->symrun, p->cur->sym, sizeof *p->symrun * (size_t)p->nsym);
    for (int i = 0; i < n; i++) {
        size_t nbytes = 0;
        int k = check_bind(p, i, &b[i], &symset, &nbytes);
        int rc = k < 0 ? k : check_alias(p, k, nbytes);
        if (rc) return rc;
    }
    for (int k = 0; n < p->nph && k < p->nph; k++)   /* n distinct names bound */
        if (p->bound[k] != p->runs)
            return FAIL(p, OT_EINVAL, "placeholder %s is not bound", p->ph[k].name);
    return 0;
}

/* The specialisation at p->symrun: the current one, one kept, or a new one. */
static int specialise(ot_program *p)
{
    size_t bytes = sizeof *p->symrun * (size_t)p->nsym;
    if (!p->nsym || memcmp(p->cur->sym, p->symrun, bytes) == 0) return 0;
    for (int i = 0; i < p->nspec; i++)
        if (memcmp(p->specs[i]->sym, p->symrun, bytes) == 0) {
            p->cur = p->specs[i];
            return 0;
        }
    return spec_new(p, p->symrun, &p->cur);
}

/* The ref backend: each step through its assign, the placeholders' buffers
 * pointing at the bound memory for the run. */
static int run_ref(ot_program *p)
{
    const spec *s = p->cur;
    int rc = 0;
    void *keep[64];
    void **old = p->nph <= 64 ? keep : ot__malloc(sizeof *old * (size_t)p->nph);
    if (!old) return nomem(p);
    for (int k = 0; k < p->nph; k++) {
        old[k] = s->ph[k]->buf->data;
        s->ph[k]->buf->data = p->base[k];
    }
    for (int i = 0; i < p->nstep && !rc; i++)
        rc = ot__assign_backend(p->be, p->steps[i].n, p->steps[i].outs, s->steps[i].trees);
    for (int k = 0; k < p->nph; k++) s->ph[k]->buf->data = old[k];
    if (old != keep) free(old);
    return rc;
}

/* The cpu backend: each step's plan with its leaf pointers patched to the
 * bound memory, every step in the one arena. */
static int run_cpu(ot_program *p)
{
    spec *s = p->cur;
    for (int i = 0; i < p->nstep; i++) {
        cstep *c = &s->steps[i];
        for (int j = 0; j < c->npatch; j++)
            c->bind.leaf[c->patches[j].slot] = p->base[c->patches[j].ph] + c->patches[j].off;
        int over = -1;
        if (c->plan->direct) ot__plan_run_direct(p->be, c->plan, &c->bind);
        else over = ot__plan_run_at(p->be, c->plan, &c->bind, s->arena);
        if (over >= 0) return ot__plan_overflow(c->plan, over, p->steps[i].n, s->steps[i].trees);
    }
    ot__stat_add(ot__stats_mine(&p->be->stats), OT__STAT_ASSIGNS, (uint64_t)p->nstep);
    return 0;
}

static int run(ot_program *p, int n, const ot_bind bindings[])
{
    if (!p->nspec) return FAIL(p, OT_ESTATE, "the program is not compiled (ot_program_compile)");
    ot_clear_error();
    int rc = check_bindings(p, n, bindings);
    if (!rc) rc = specialise(p);
    if (rc) return rc;
    return p->cpu ? run_cpu(p) : run_ref(p);
}

int ot_program_run_at(ot_program *p, int n, const ot_bind bindings[], const char *file, int line)
{
    int rc = enter(p, "program_run", file, line);
    return rc ? rc : leave(p, run(p, n, bindings));
}

/* ---- reporting and freeing ----------------------------------------------------- */

int ot_program_stats_at(const ot_program *p, ot_program_stats *out, const char *file, int line)
{
    int rc = enter(p, "program_stats", file, line);
    if (rc) return rc;
    if (!out) return leave(p, FAIL(p, OT_ENULL, "output is NULL"));
    if (!p->nspec) return leave(p, FAIL(p, OT_ESTATE, "the program is not compiled"));
    *out = (ot_program_stats){p->nstep, p->cur->kernels, p->nspec, p->cur->arena_bytes,
                              p->cur->separate_bytes};
    return leave(p, 0);
}

static int explain(const ot_program *p, FILE *f)
{
    if (!f) return FAIL(p, OT_ENULL, "FILE is NULL");
    if (!p->nspec) return FAIL(p, OT_ESTATE, "the program is not compiled");
    ot_clear_error();
    const spec *s = p->cur;
    int rc = 0;
    for (int i = 0; i < p->nstep && !rc; i++) {
        fprintf(f, "step %d (%d output%s):\n", i, p->steps[i].n, p->steps[i].n == 1 ? "" : "s");
        rc = p->cpu ? ot__plan_explain(s->steps[i].plan, f)
                    : ot_explain_many(p->steps[i].n, p->steps[i].outs, s->steps[i].trees, f);
    }
    if (!rc && p->cpu)
        fprintf(f, "program: %d steps, %d kernels; one arena of %zu bytes for every step "
                "(the steps' own arenas add up to %zu)\n", p->nstep, s->kernels, s->arena_bytes,
                s->separate_bytes);
    if ((rc && rc != OT_EIO) ) return rc;
    if (fflush(f) == EOF || ferror(f) || rc) return FAIL(p, OT_EIO, "write failed");
    return 0;
}

int ot_program_explain_at(const ot_program *p, FILE *f, const char *file, int line)
{
    int rc = enter(p, "program_explain", file, line);
    return rc ? rc : leave(p, explain(p, f));
}

/* ot_explain's choice for a program (a _Generic names a function). */
int (ot_program_explain)(const ot_program *p, FILE *f)
{
    return ot_program_explain_at(p, f, NULL, 0);
}

void ot_program_free(ot_program *p)
{
    if (!p) return;
    for (int i = 0; i < p->nspec; i++) spec_free(p, p->specs[i]);
    for (int i = 0; i < p->nstep; i++) pstep_free(&p->steps[i]);
    for (int k = 0; k < p->nph; k++) {
        free(p->ph[k].name);
        ot_tensor_free(p->ph[k].t);
    }
    for (int i = 0; i < p->nvar; i++) ot_tensor_free(p->var[i]);
    for (int i = 0; i < p->nsym; i++) free(p->symname[i]);
    free(p->specs);
    free(p->steps);
    free(p->ph);
    free(p->var);
    free(p->symname);
    free(p->symnom);
    free(p->base);
    free(p->bound);
    free(p->bound_by);
    free(p->symrun);
    free(p->write);
    free(p->write_step);
    free(p);
}
