/*
 * backend.c - backend objects (made with the options config.c resolves, stats) and the
 * public entry points of execution: ot_assign, ot_assign_many and ot_eval
 * (ot_assign_at and ot_eval_at, which the macros call, give the call's
 * file:line to every message of the checks).
 * The checks every backend relies on (NULLs, shapes, dtypes, writable and
 * disjoint outputs) are made here once; backends only evaluate. Also the
 * registry of backends by name: the library's own (the rows of
 * backends.def, each known here only by its vtable object) and those
 * registered at run time.
 */
#include "front.h"

#include <pthread.h>
#include <stdio.h>

typedef struct backend_entry {
    const char *name;
    const ot_backend_vt *vt;
} backend_entry;

#define MAX_REGISTERED 8

/* The library's backends, then those registered (ot__backend_register),
 * under a lock: registration and ot_backend_new may run on two threads. */
static struct {
    pthread_mutex_t lock;
    backend_entry extra[MAX_REGISTERED];
    int nextra;
} registry = {PTHREAD_MUTEX_INITIALIZER, {{NULL, NULL}}, 0};

/* Each built-in backend's vtable, named by backends.def's rule. */
#define OT_BACKEND(nm) extern const ot_backend_vt ot__##nm##_vt;
#include "backends.def"
#undef OT_BACKEND

static const backend_entry builtin[] = {
#define OT_BACKEND(nm) {#nm, &ot__##nm##_vt},
#include "backends.def"
#undef OT_BACKEND
};

/* "ref, cpu": the built-in names for the unknown-name message. */
#define OT_BACKEND(nm) ", " #nm
static const char builtin_names[] = ""
#include "backends.def"
    ;
#undef OT_BACKEND
#define BUILTIN_NAMES (builtin_names + 2)

/* The entry named name, or NULL; with the registry locked. */
static const backend_entry *find_locked(const char *name)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (strcmp(builtin[i].name, name) == 0) return &builtin[i];
    for (int i = 0; i < registry.nextra; i++)
        if (strcmp(registry.extra[i].name, name) == 0) return &registry.extra[i];
    return NULL;
}

int ot__backend_register(const char *name, const ot_backend_vt *vt)
{
    if (!name || !vt) return ot__err_null("backend_register", name ? "vtable" : "name");
    pthread_mutex_lock(&registry.lock);
    const backend_entry *e = find_locked(name);
    int rc = 0;
    if (e && e->vt != vt)
        rc = ot__err_set(OT_EINVAL, NULL, 0, "backend_register",
                         "a backend named \"%s\" exists", name);
    else if (!e && registry.nextra == MAX_REGISTERED)
        rc = ot__err_set(OT_EINVAL, NULL, 0, "backend_register",
                         "more than %d registered backends", MAX_REGISTERED);
    else if (!e)
        registry.extra[registry.nextra++] = (backend_entry){name, vt};
    pthread_mutex_unlock(&registry.lock);
    return rc;
}

static const backend_entry *find_backend(const char *name)
{
    pthread_mutex_lock(&registry.lock);
    const backend_entry *e = find_locked(name);
    pthread_mutex_unlock(&registry.lock);
    return e;
}

/* The last drop of a backend (ot__backend_drop): the creator has freed it
 * and no tensor or program made on it is left. */
static void backend_teardown(ot_backend *be)
{
    ot__autodiff_memo_free(be);
    if (be->vt->destroy) be->vt->destroy(be);
    ot__rewrite_free(be->rewrite);
    ot__stats_free(&be->stats);
    free(be);
}

ot_backend *ot_backend_new(const char *name, const ot_backend_opts *opts)
{
    ot_backend_opts o = opts ? *opts : (ot_backend_opts){0};
    const char *isa_from;
    struct ot__rewrite *rw;
    size_t caches[2];
    const char *blas_core;
    if (ot__config_resolve(&name, &o, &isa_from, &rw, caches, &blas_core)) return NULL;
    const backend_entry *e = find_backend(name);
    ot_backend *be = NULL;
    if (!e)
        ot__err_set(OT_EBACKEND, NULL, 0, "backend_new", "unknown backend \"%s\" (known: %s)",
                    name, BUILTIN_NAMES);
    else if (!(be = ot__calloc(1, sizeof *be)))
        ot__err_set(OT_ENOMEM, NULL, 0, "backend_new", "out of memory");
    if (!be) {
        ot__rewrite_free(rw);
        return NULL;
    }
    be->vt = e->vt;
    if (!e->vt->cpu_opts) ot__config_not_cpu(&o);
    be->opts = o;
    be->isa_from = isa_from;
    be->l2_bytes = caches[0];
    be->l3_bytes = caches[1];
    be->blas_core = blas_core;
    be->rewrite = rw;
    be->teardown = backend_teardown;
    atomic_init(&be->holds, 1);
    atomic_init(&be->freed, false);
    ot__stats_init(&be->stats);
    if (be->vt->init && be->vt->init(be) != 0) {
        ot__rewrite_free(rw);
        ot__stats_free(&be->stats);
        free(be);
        return NULL;
    }
    return be;
}

void ot_backend_free(ot_backend *be)
{
    if (!be) return;
    if (atomic_exchange(&be->freed, true)) {   /* tensors still hold it */
        ot__err_set(OT_EBACKEND, NULL, 0, "backend_free", "backend '%s' was freed already",
                    be->vt->name);
        return;
    }
    ot__autodiff_memo_close(be);   /* its objects' trees may hold tensors */
    ot__backend_drop(be);
}

const char *ot_backend_name(const ot_backend *be) { return be ? be->vt->name : NULL; }

ot_backend_opts ot_backend_options(const ot_backend *be)
{
    ot_backend_opts o = {0};
    return be ? be->opts : o;
}

int ot_stats_get(const ot_backend *be, ot_stats *out)
{
    if (!be) return ot__err_null("stats", "backend");
    if (!out) return ot__err_null("stats", "output");
    const ot__stat_counters *c = &be->stats;
    out->assigns = ot__stats_sum(c, OT__STAT_ASSIGNS);
    out->nodes = ot__stats_sum(c, OT__STAT_NODES);
    out->compiles = ot__stats_sum(c, OT__STAT_COMPILES);
    out->cache_hits = ot__stats_sum(c, OT__STAT_CACHE_HITS);
    out->kernels = ot__stats_sum(c, OT__STAT_KERNELS);
    out->bytes_moved = ot__stats_sum(c, OT__STAT_BYTES);
    out->elem_ops = ot__stats_sum(c, OT__STAT_ELEM_OPS);
    out->default_pool_nodes = ot_pool_default_nodes();
    return 0;
}

/* ---- execution entry points ---------------------------------------------- */

/* Where an assignment was called (ot_assign_at), for its messages; file
 * NULL when unknown. */
typedef struct call_site {
    const char *file;
    int line;
} call_site;

/* Whether tree i can be written into out, with the error when not; the
 * names in the messages are worked out only then (they cost more than the
 * checks on every assignment). */
static int check_output(const char *fn, call_site at, int i, const ot_tensor *out,
                        const ot_node *tree)
{
    char so[OT__SHAPE_STRLEN], st[OT__SHAPE_STRLEN], qt[OT__QNAME_LEN], qo[OT__QNAME_LEN];
#define TNAME ot__qname(tree, qt)
#define ONAME ot__qname(&out->leaf, qo)
    int dim = 0;
    ot_shape b;
    if (!ot__shape_eq(&tree->shape, &out->leaf.shape) &&
        (!ot__broadcast(&tree->shape, &out->leaf.shape, &b, NULL) ||
         !ot__shape_eq(&b, &out->leaf.shape)))
        return ot__err_set(OT_ESHAPE, at.file, at.line, fn,
                           "tree %d%s of shape %s cannot be written into an output%s of shape %s",
                           i, TNAME, ot__shape_str(&tree->shape, st), ONAME,
                           ot__shape_str(&out->leaf.shape, so));
    /* Without a place of its own (a plain function), the error names where
     * the tree was built, unless a public call's place is set (a gradient
     * buffer of ot_autodiff_backprop: its caller's line, not the loss's). */
    bool own = tree->be && tree->be != out->leaf.be && (at.file || ot__site_placed());
    if (tree->be && tree->be != out->leaf.be)
        return ot__err_set(OT_EBACKEND, own ? at.file : tree->file, own ? at.line : tree->line, fn,
                           "tree %d%s reads tensors of backend '%s' but its output%s is on %s '%s'",
                           i, TNAME, ot_backend_name(tree->be), ONAME,
                           strcmp(ot_backend_name(tree->be), ot_backend_name(out->leaf.be))
                               ? "backend" : "another backend named",
                           ot_backend_name(out->leaf.be));
    if (out->leaf.dtype == OT_I32 && tree->dtype != OT_I32 && !tree->weak)
        return ot__err_set(OT_EDTYPE, at.file, at.line, fn,
                           "cannot write a %s tree%s into an int32 output%s; ot_cast it first",
                           ot_dtype_name(tree->dtype), TNAME, ONAME);
    if (ot__internal_overlap(out, &dim))
        return ot__err_set(OT_EALIAS, at.file, at.line, fn,
                           "written-to tensor%s has overlapping elements (stride %lld at dim %d)",
                           ONAME, (long long)out->strides[dim], dim);
    if (out->readonly)
        return ot__err_set(OT_EALIAS, at.file, at.line, fn,
                           "written-to tensor%s is a read-only broadcast view", ONAME);
#undef TNAME
#undef ONAME
    return 0;
}

/* ot__err_null naming the caller: a NULL tree keeps its builder's error. */
static int null_at(const char *fn, call_site at, const char *what)
{
    if (ot_errcode()) return ot_errcode();
    return ot__err_set(OT_ENULL, at.file, at.line, fn, "%s is NULL", what);
}

/* Each tree of fit (n, a copy of the caller's) laid out by its output's
 * axis names (ot__axes_fit); done before the shapes are compared, since a
 * transpose by name changes the tree's shape. */
static int fit_names(const char *fn, call_site at, int n, ot_tensor *const outs[], ot_node **fit)
{
    for (int i = 0; i < n; i++) {
        int rc = ot__axes_fit(fn, at.file, at.line, outs[i], &fit[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Checks trees against outs; fit (n pointers, or NULL) gets their copies,
 * laid out by name, which are checked and run in their place. */
static int assign_check_at(const char *fn, call_site at, int n, ot_tensor *const outs[],
                           ot_node *const trees[], ot_node **fit, bool live, ot_backend **be_out)
{
    *be_out = NULL;
    if (n < 0) return ot__err_set(OT_EINVAL, at.file, at.line, fn, "negative count %d", n);
    if (n > 0 && (!outs || !trees)) return null_at(fn, at, outs ? "trees" : "outs");
    for (int i = 0; i < n; i++) {
        if (!trees[i]) return null_at(fn, at, "tree");
        if (!outs[i])
            return ot__err_set(OT_ENULL, at.file, at.line, fn, "output tensor %d is NULL", i);
    }
    int rc = n == 1 ? ot__node_check(fn, at.file, at.line, "the tree", trees[0])
                    : ot__nodes_check(fn, at.file, at.line, "trees", n, trees);
    if (rc) return rc;
    ot_clear_error();
    if (n == 0) return 0;
    if (live && (rc = ot__backend_gone(outs[0]->leaf.be, fn, at.file, at.line, "output 0")))
        return rc;
    if (fit) {
        for (int i = 0; i < n; i++) fit[i] = trees[i];
        if ((rc = fit_names(fn, at, n, outs, fit))) return rc;
        trees = fit;
    }
    ot_backend *be = outs[0]->leaf.be;
    for (int i = 0; i < n; i++) {
        rc = check_output(fn, at, i, outs[i], trees[i]);
        if (rc) return rc;
        if (outs[i]->leaf.be != be)
            return ot__err_set(OT_EBACKEND, at.file, at.line, fn,
                               "outputs 0 and %d are on different backends", i);
        for (int j = 0; j < i; j++)
            if (ot__overlap(outs[i], outs[j]) != OT_OVERLAP_NONE)
                return ot__err_set(OT_EALIAS, at.file, at.line, fn, "outputs %d and %d overlap",
                                   j, i);
    }
    *be_out = be;
    return 0;
}

int ot__assign_check(const char *fn, int n, ot_tensor *const outs[], ot_node *const trees[],
                        ot_node **fit, ot_backend **be_out)
{
    return assign_check_at(fn, (call_site){NULL, 0}, n, outs, trees, fit, true, be_out);
}

int ot__assign_fit(const char *fn, const char *file, int line, int n, ot_tensor *const outs[],
                   ot_node *const trees[], ot_node **fit)
{
    for (int i = 0; i < n; i++) fit[i] = trees[i];
    return fit_names(fn, (call_site){file, line}, n, outs, fit);
}

static int assign_rewritten(ot_backend *be, int n, ot_tensor *const outs[],
                            ot_node *const trees[], void *ctx)
{
    (void)ctx;
    return be->vt->assign_many(be, n, outs, trees);
}

static int assign_now(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    if (be->rewrite) return ot__rewrite_then(be, n, outs, trees, NULL, assign_rewritten, NULL);
    return be->vt->assign_many(be, n, outs, trees);
}

/* A backend made with stochastic_round rounds this assignment's 16-bit
 * stores stochastically, its bits the stream of (seed, its count), unless
 * the call (ot_assign_sr) set a stream already. */
int ot__assign_backend(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    uint64_t key;
    if (!be->opts.stochastic_round || ot__half_sr_get(&key)) return assign_now(be, n, outs, trees);
    uint64_t count = atomic_fetch_add_explicit(&be->sr_count, 1, memory_order_relaxed);
    ot__half_sr_set(true, ot__sr_key(be->opts.seed, count));
    int rc = assign_now(be, n, outs, trees);
    ot__half_sr_set(false, 0);
    return rc;
}

/* ot__assign_backend for the caller at: an error found while evaluating
 * (an index out of range) is placed at the assignment's line. */
static int run_at(call_site at, ot_backend *be, int n, ot_tensor *const outs[],
                  ot_node *const trees[])
{
    int rc = ot__assign_backend(be, n, outs, trees);
    if (rc) ot__err_place(at.file, at.line);
    return rc;
}

/* Whether some tree and its output both have axis names (NULLs are left
 * to the checks): only then may a tree need laying out by name. */
static bool names_meet(int n, ot_tensor *const outs[], ot_node *const trees[])
{
    for (int i = 0; outs && trees && i < n; i++)
        if (outs[i] && trees[i] && outs[i]->leaf.axes && trees[i]->axes) return true;
    return false;
}

/* assign_checked where names meet: the trees laid out by name into a copy
 * (on the stack for a few), in a pool that dies with the call. Apart, so
 * that the plain path keeps no array on its stack (W8 times it). */
static int assign_fitted(const char *fn, call_site at, int n, ot_tensor *const outs[],
                         ot_node *const trees[])
{
    ot_backend *be;
    ot_node *few[4], **fit = n <= 4 ? few : ot__malloc(sizeof *fit * (size_t)n);
    ot_pool *pool = fit ? ot_pool_push() : NULL;
    if (!pool) {
        if (fit != few) free(fit);
        return ot__err_set(OT_ENOMEM, at.file, at.line, fn, "out of memory");
    }
    int rc = assign_check_at(fn, at, n, outs, trees, fit, true, &be);
    if (!rc && be) rc = run_at(at, be, n, outs, fit);
    ot_pool_pop(pool);
    if (fit != few) free(fit);
    return rc;
}

/* n trees into outs: checked, then run. */
static int assign_checked(const char *fn, call_site at, int n, ot_tensor *const outs[],
                          ot_node *const trees[])
{
    if (names_meet(n, outs, trees)) return assign_fitted(fn, at, n, outs, trees);
    ot_backend *be;
    int rc = assign_check_at(fn, at, n, outs, trees, NULL, true, &be);
    return rc || !be ? rc : run_at(at, be, n, outs, trees);
}

int ot_assign_at(ot_tensor *out, ot_node *tree, const char *file, int line)
{
    if (!tree)
        return ot_errcode() ? ot_errcode()
                            : ot__err_set(OT_ENULL, file, line, "assign", "tree is NULL");
    if (!out) return ot__err_set(OT_ENULL, file, line, "assign", "output tensor is NULL");
    call_site at = {file, line};
    if (out->leaf.axes && tree->axes) return assign_fitted("assign", at, 1, &out, &tree);
    ot_backend *be;   /* assign_checked's plain path, spelt out: W8 times it */
    int rc = assign_check_at("assign", at, 1, &out, &tree, NULL, true, &be);
    return rc || !be ? rc : run_at(at, be, 1, &out, &tree);
}

int ot_assign_sr_at(ot_tensor *out, ot_node *tree, uint64_t seed, const char *file, int line)
{
    uint64_t old = 0;
    bool was = ot__half_sr_get(&old);
    ot__half_sr_set(true, ot__sr_key(seed, 0));
    int rc = ot_assign_at(out, tree, file, line);
    ot__half_sr_set(was, old);
    return rc;
}

int ot_assign_node(ot_tensor *out, ot_node *tree)
{
    return ot_assign_at(out, tree, NULL, 0);
}

int ot__assign_by_position(const char *fn, int n, ot_tensor *const outs[],
                           ot_node *const trees[])
{
    ot_backend *be;
    int rc = assign_check_at(fn, (call_site){NULL, 0}, n, outs, trees, NULL, true, &be);
    return rc || !be ? rc : ot__assign_backend(be, n, outs, trees);
}

int ot_assign_many_at(int n, ot_tensor *const outs[], ot_node *const trees[], const char *file,
                      int line)
{
    return assign_checked("assign_many", (call_site){file, line}, n, outs, trees);
}

int (ot_assign_many)(int n, ot_tensor *const outs[], ot_node *const trees[])
{
    return ot_assign_many_at(n, outs, trees, NULL, 0);
}

ot_tensor *ot_eval_at(ot_node *tree, const char *file, int line)
{
    if (!tree) {
        if (!ot_errcode()) ot__err_set(OT_ENULL, file, line, "eval", "tree is NULL");
        return NULL;
    }
    if (ot__node_check("eval", file, line, "the tree", tree) ||
        ot__backend_gone(tree->be, "eval", file, line, "the tree"))
        return NULL;
    if (!tree->be) {
        ot__err_set(OT_EBACKEND, file, line, "eval",
                    "the tree%s has no tensor leaf to take a backend from",
                    ot__qname(tree, (char[OT__QNAME_LEN]){0}));
        return NULL;
    }
    ot_tensor *t = ot_empty_at(tree->be, tree->shape, (ot_dtype)tree->dtype, file, line);
    if (!t) {   /* out of memory, named as the eval's */
        ot__err_relabel(ot_errcode() ? ot_errcode() : OT_ENOMEM, file, line, "eval");
        return NULL;
    }
    if (ot_assign_at(t, tree, file, line) != 0) {
        ot_tensor_free(t);
        return NULL;
    }
    return t;
}

ot_tensor *(ot_eval)(ot_node *tree)
{
    return ot_eval_at(tree, NULL, 0);
}

/* The backend's account of how it evaluates n trees into outs (NULL:
 * fresh outputs): the plan it runs, the order of its nodes. */
static int explain_trees(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                         void *ctx)
{
    if (!be->vt->explain)
        return ot__err_set(OT_EUNSUPPORTED, NULL, 0, "explain",
                           "backend '%s' cannot explain its evaluation", be->vt->name);
    int rc = be->vt->explain(be, n, outs, trees, ctx);
    /* a backend reports a failed write by its code alone */
    return rc == OT_EIO ? ot__err_set(OT_EIO, NULL, 0, "explain", "write failed") : rc;
}

/* The rewrites that fire, then the plan of the rewritten trees. */
static int explain_plan(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                        FILE *f)
{
    if (be->rewrite) return ot__rewrite_then(be, n, outs, trees, f, explain_trees, f);
    return explain_trees(be, n, outs, trees, f);
}

/* The plan's text has reached f only once flushed (a full disk fails
 * there), and a failed write is reported as fn's, whichever writer below
 * noticed it. */
static int explain_end(const char *fn, FILE *f, int rc)
{
    if (rc && rc != OT_EIO) return rc;
    if (fflush(f) == EOF || ferror(f) || rc)
        return ot__err_set(OT_EIO, NULL, 0, fn, "write failed");
    return 0;
}

static int explain_many(int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f)
{
    if (!f) return ot__err_set(OT_ENULL, NULL, 0, "explain_many", "FILE is NULL");
    ot_backend *be;
    ot_node **fit = n > 0 ? ot__malloc(sizeof *fit * (size_t)n) : NULL;
    ot_pool *pool = fit ? ot_pool_push() : NULL;   /* for the layout by name */
    if (n > 0 && !pool) {
        free(fit);
        return ot__err_set(OT_ENOMEM, NULL, 0, "explain_many", "out of memory");
    }
    /* as assign_many; reading, it works after ot_backend_free */
    int rc = assign_check_at("explain_many", (call_site){NULL, 0}, n, outs, trees, fit, false, &be);
    if (!rc && be) rc = explain_end("explain_many", f, explain_plan(be, n, outs, fit, f));
    if (pool) ot_pool_pop(pool);
    free(fit);
    return rc;
}

int (ot_explain_many)(int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f)
{
    return ot_explain_many_at(n, outs, trees, f, NULL, 0);
}

/* The checks' errors name the caller through the thread's call site. */
int ot_explain_many_at(int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f,
                       const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = explain_many(n, outs, trees, f);
    ot__site_leave(outer);
    return rc;
}

int (ot_explain)(const ot_node *tree, FILE *f)
{
    if (!tree) return ot__err_null("explain", "tree");
    if (!f) return ot__err_set(OT_ENULL, NULL, 0, "explain", "FILE is NULL");
    if (ot__node_dead(tree)) return ot__dead_err("explain", NULL, 0, "the tree", tree);
    ot_backend *be = tree->be;
    if (!be)
        return ot__err_set(OT_EBACKEND, NULL, 0, "explain",
                           "the tree has no tensor leaf to take a backend from");
    ot_clear_error();
    ot_node *root = (ot_node *)tree;   /* plans only read the tree */
    return explain_end("explain", f, explain_plan(be, 1, NULL, &root, f));
}
