/*
 * program.c - staged execution: programs (placeholders, variables, steps
 * compiled once and run many times) and ot_sequential, assignments in order.
 * This file builds a program (its steps and what they read); program_run.c
 * compiles and runs it; sequential.c runs ot_sequential's steps, sharing
 * the values they have in common.
 *
 * A program's steps are ordinary trees kept with their outputs. Compiling
 * asks a backend that prepares steps (vt->prepare: cpu, its plan and a
 * copy of its bindings) for each step once; which leaf pointers read a
 * placeholder is found by address (the placeholder's own buffer is never
 * handed to anyone else), so a run patches those pointers to the bound
 * memory and calls vt->run per step, with one arena for every step. A
 * symbol's new size is a new specialisation: the steps rebuilt over
 * placeholders of that shape (ot__substitute; gradients derived again) and
 * compiled, and kept beside the others. A backend that does not prepare
 * steps (ref) runs the same steps through its assign, the placeholders'
 * buffers pointing at the bound memory meanwhile.
 */
#include "program.h"

/* ---- small helpers ------------------------------------------------------- */

bool ot__prog_push(void **arr, int *n, size_t elem, const void *item)
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

const char *ot__prog_unsited(const ot__site *at, const char *msg)
{
    char pre[320];
    for (int with_file = at->file ? 1 : 0; with_file >= 0; with_file--) {
        int n = with_file ? snprintf(pre, sizeof pre, "%s:%d: %s: ", at->file, at->line, at->fn)
                          : snprintf(pre, sizeof pre, "%s: ", at->fn);
        if (n > 0 && (size_t)n < sizeof pre && strncmp(msg, pre, (size_t)n) == 0) return msg + n;
    }
    return msg;
}

/* Prefixes the error in the slot with the call's site, the step and where
 * its tree was built. */
int ot__prog_step_error(const ot__site *at, int i, const ot_node *tree)
{
    char msg[512], from[256] = "";
    snprintf(msg, sizeof msg, "%s", ot__prog_unsited(at, ot_errmsg()));
    if (tree && tree->file) snprintf(from, sizeof from, " (tree built at %s:%d)", tree->file, tree->line);
    int code = ot_errcode() ? ot_errcode() : OT_EINTERNAL;
    return ot__err_reword(code, at->file, at->line, at->fn, "step %d%s: %s", i, from, msg);
}

/* ---- ot_sequential ---------------------------------------------------------- */

/* One block for n steps and, after them, their trees (a step's count
 * below 0 counts none: the checks refuse it). */
static ot_step *fit_block(int n, const ot_step steps[])
{
    size_t trees = 0;
    for (int i = 0; i < n; i++) trees += steps[i].n > 0 ? (size_t)steps[i].n : 0;
    return n > 0 ? ot__malloc(sizeof(ot_step) * (size_t)n + sizeof(ot_node *) * trees) : NULL;
}

/* Checks each step as ot_assign would (its trees laid out by name into
 * fit's block), then runs them; *failed as ot__sequential_run's, or -2
 * with the error made when a check fails. */
static int fit_and_run(const ot__site *at, int n, const ot_step steps[], ot_step *fit,
                       int *failed)
{
    ot_node **trees = fit ? (ot_node **)(fit + n) : NULL;
    for (int i = 0; i < n; i++) {
        ot_backend *be;
        if (ot__assign_check(at->fn, steps[i].n, steps[i].outs, steps[i].trees, trees, &be)) {
            *failed = -2;
            return ot__prog_step_error(at, i, NULL);
        }
        fit[i] = (ot_step){steps[i].n, steps[i].outs, trees};
        trees += steps[i].n;
    }
    return ot__sequential_run(n, fit, failed);
}

int ot_sequential_at(int n, const ot_step steps[], const char *file, int line)
{
    const ot__site at = {"sequential", file, line};
    if (n < 0) return ot__err_set(OT_EINVAL, file, line, at.fn, "negative count %d", n);
    if (n > 0 && !steps) return ot__err_set(OT_ENULL, file, line, at.fn, "steps is NULL");
    ot_step *fit = fit_block(n, steps);
    ot_pool *pool = fit ? ot_pool_push() : NULL;   /* the layouts by name die with the call */
    if (n > 0 && !pool) {
        free(fit);
        return ot__err_set(OT_ENOMEM, file, line, at.fn, "out of memory");
    }
    int failed, rc = fit_and_run(&at, n, steps, fit, &failed);
    if (pool) ot_pool_pop(pool);
    free(fit);
    if (rc && failed == -2) return rc;   /* a step's check, its error made already */
    char msg[512];
    if (rc && failed < 0) {   /* planning failed: no step ran */
        snprintf(msg, sizeof msg, "%s", ot_errmsg());
        return ot__err_reword(rc, file, line, at.fn, "%s", msg);
    }
    return rc ? ot__prog_step_error(&at, failed, NULL) : 0;
}

/* ---- building a program ------------------------------------------------------ */

ot_program *ot_program_new_at(ot_backend *be, const char *file, int line)
{
    if (!be) {
        ot__err_set(OT_ENULL, file, line, "program_new", "backend is NULL");
        return NULL;
    }
    if (ot__backend_gone(be, "program_new", file, line, "the program")) return NULL;
    ot_clear_error();
    ot_program *p = ot__calloc(1, sizeof *p);
    if (!p) {
        ot__err_set(OT_ENOMEM, file, line, "program_new", "out of memory");
        return NULL;
    }
    ot__backend_hold(be);   /* its prepared plans are the backend's */
    p->be = be;
    p->prepared = be->vt->prepare != NULL;
    atomic_init(&p->busy, false);
    return p;
}

void ot__program_unprepared(ot_program *p) { p->prepared = false; }

/* Common checks of the calls that add to a program. */
int ot__prog_check_open(const ot_program *p)
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
    int rc = ot__prog_check_open(p);
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
    if (!d || !ot__prog_push((void **)&p->symnom, &n, sizeof nominal, &nominal)) {
        free(d);
        return nomem(p);
    }
    if (!ot__prog_push((void **)&p->symname, &p->nsym, sizeof d, &d)) {
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
int ot__prog_resolve_shape(const ot_program *p, const char *name, ot_shape *shape,
                           const int64_t *sym)
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

/* A tensor the call could not make (a bad dtype, a size too big): the
 * error, placed at the caller already, named as the call's; NULL. */
static ot_tensor *made_none(const ot_program *p)
{
    ot__err_relabel(ot_errcode() ? ot_errcode() : OT_ENOMEM, p->at.file, p->at.line, p->at.fn);
    return NULL;
}

static ot_tensor *add_placeholder(ot_program *p, const char *name, ot_shape shape, ot_dtype dtype)
{
    int rc = ot__prog_check_open(p);
    if (!rc) rc = check_name(p, name);
    for (int i = 0; !rc && i < p->nph; i++)
        if (strcmp(p->ph[i].name, name) == 0)
            rc = FAIL(p, OT_EINVAL, "a placeholder named %s exists", name);
    ot_shape nominal = shape;
    if (!rc) rc = ot__prog_resolve_shape(p, name, &nominal, p->symnom);
    if (rc) return NULL;
    ot_tensor *t = ot_zeros_at(p->be, nominal, dtype, p->at.file, p->at.line);
    if (!t) return made_none(p);
    t->buf->placeholder_of = p;
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    placeholder ph = {dup_str(name), shape, dt, (int64_t)ot_dtype_size(dt), t};
    if (!ph.name || (ot_tensor_set_name)(t, name) ||
        !ot__prog_push((void **)&p->ph, &p->nph, sizeof ph, &ph)) {
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
    if (enter_live(p, "program_placeholder", file, line)) return NULL;
    ot_tensor *t = add_placeholder(p, name, shape, dtype);
    leave(p, 0);
    return t;
}

static ot_tensor *init_tensor(ot_backend *be, ot_shape shape, ot_dtype dtype, const ot_init *in)
{
    switch (in->kind) {
    case OT_INIT_ZEROS: return (ot_zeros)(be, shape, dtype);
    case OT_INIT_CONSTANT: return (ot_full)(be, shape, dtype, in->value);
    case OT_INIT_DATA: return (ot_array)(be, shape, dtype, in->data);
    default: break;
    }
    ot_tensor *t = (ot_empty)(be, shape, dtype);
    ot_pool *pool = t ? ot_pool_push() : NULL;
    if (!pool) {
        ot_tensor_free(t);
        return NULL;
    }
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    /* built with no place of their own: the caller's (add_variable's site) */
    ot_args r = {.axis = OT_AXIS_ALL, .dtype = dt == OT_F64 ? OT_F64 : OT_F32, .seed = in->seed,
                 .shape = shape};
    ot_node *u = ot_build_at(OT_OP_RAND, NULL, NULL, &r, NULL, 0);
    ot_node *v = ot_build_at(OT_OP_MUL, u, ot_const(in->hi - in->lo), NULL, NULL, 0);
    int rc = ot_assign_at(t, ot_build_at(OT_OP_ADD, v, ot_const(in->lo), NULL, NULL, 0), NULL, 0);
    ot_pool_pop(pool);
    if (rc) {
        ot_tensor_free(t);
        return NULL;
    }
    return t;
}

static int check_init(const ot_program *p, const ot_init *in, ot_dtype dtype)
{
    if (in->kind < OT_INIT_ZEROS || in->kind > OT_INIT_DATA)
        return FAIL(p, OT_EINVAL, "unknown initializer kind %d", in->kind);
    if (in->kind == OT_INIT_DATA && !in->data)
        return FAIL(p, OT_ENULL, "the initializer's data is NULL");
    if (in->kind == OT_INIT_UNIFORM && !(isfinite(in->lo) && isfinite(in->hi) && in->lo <= in->hi))
        return FAIL(p, OT_EINVAL, "uniform initializer bounds [%g, %g) are not finite with lo <= hi",
                    in->lo, in->hi);
    if (in->kind == OT_INIT_UNIFORM && dtype == OT_I32)
        return FAIL(p, OT_EDTYPE, "a uniform initializer draws floats; an int32 variable takes "
                    "zeros, a constant or data");
    return 0;
}

static ot_tensor *add_variable(ot_program *p, const char *name, ot_shape shape, ot_dtype dtype,
                               const ot_init *init)
{
    int rc = ot__prog_check_open(p);
    if (!rc) rc = check_name(p, name);
    if (!rc) rc = check_init(p, init, dtype);
    char s1[OT__SHAPE_STRLEN];
    for (int d = 0; !rc && d < shape.ndim && d < OT_MAX_DIMS; d++)
        if (shape.dims[d] < 0)
            rc = FAIL(p, OT_EINVAL, "variable %s: shape %s: dim %d is negative (a variable's "
                      "shape has no symbols)", name, ot__shape_str(&shape, s1), d);
    if (rc) return NULL;
    ot_clear_error();
    ot__callsite outer = ot__site_enter(p->at.file, p->at.line);
    ot_tensor *t = init_tensor(p->be, shape, dtype, init);
    ot__site_leave(outer);
    if (!t) return made_none(p);
    if (dtype != OT_I32) t->buf->var = t;    /* trainable, as ngraph's variables */
    if (ot_tensor_set_name(t, name) || !ot__prog_push((void **)&p->var, &p->nvar, sizeof t, &t)) {
        ot_tensor_free(t);
        nomem(p);
        return NULL;
    }
    return t;
}

ot_tensor *ot_program_variable_at(ot_program *p, const char *name, ot_shape shape,
                                  ot_dtype dtype, ot_init init, const char *file, int line)
{
    if (enter_live(p, "program_variable", file, line)) return NULL;
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
/* A leaf over another program's placeholder: OT_EINVAL from the walk. */
static int visit_foreign(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)operand;
    if (n->kind != OT_NODE_LEAF) return index;
    const ot_buffer *b = ot__leaf_tensor(n)->buf;
    return b && b->placeholder_of && b->placeholder_of != w->ctx ? OT_EINVAL : index;
}

/* Refuses trees (n, then loss) that read a placeholder of another program:
 * its binding belongs to that program's runs, so this one would read its
 * idle memory. */
static int foreign_placeholder(const ot_program *p, int n, ot_node *const trees[],
                               const ot_node *loss)
{
    ot__walker w = {.visit = visit_foreign, .ctx = (void *)p};
    int rc = 0;
    for (int i = 0; i <= n && rc >= 0; i++) {
        const ot_node *root = i < n ? trees[i] : loss;
        if (root) rc = ot__walker_run(&w, root);
    }
    ot__walker_free(&w);
    if (rc == OT_EINVAL)
        return FAIL(p, OT_EINVAL, "a tree reads a placeholder of another program; a program's "
                    "trees read its own placeholders");
    return rc < 0 ? nomem(p) : 0;
}

static int add_step(ot_program *p, pstep s)
{
    if (s.n == 0) return 0;
    int rc = foreign_placeholder(p, s.n, s.trees, s.loss);
    if (rc) return rc;
    ot_tensor **outs = keep_tensors(s.outs, s.n);
    ot_node **trees = ot__malloc(sizeof *trees * (size_t)s.n);
    ot_tensor **wrt = s.wrt ? keep_tensors(s.wrt, s.n) : NULL;
    for (int i = 0; trees && i < s.n; i++) trees[i] = ot_retain(s.trees[i]);
    pstep k = {s.kind, s.n, outs, trees, s.loss ? ot_retain(s.loss) : NULL, wrt};
    if (outs && trees && (wrt || !s.wrt) &&
        ot__prog_push((void **)&p->steps, &p->nstep, sizeof k, &k))
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
    int rc = ot__prog_check_open(p);
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

/* The step keeps the trees laid out by their outputs' axis names, as
 * ot_assign would run them (ot__assign_fit). */
static int add_assign(ot_program *p, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    int rc = check_step(p, n, outs, trees);
    if (rc || n == 0) return rc;
    ot_node **fit = ot__malloc(sizeof *fit * (size_t)n);
    if (!fit) return nomem(p);
    ot_pool *pool = ot_pool_push();   /* the step retains what it keeps */
    rc = pool ? ot__assign_fit(p->at.fn, p->at.file, p->at.line, n, outs, trees, fit) : nomem(p);
    if (!rc) rc = add_step(p, (pstep){STEP_ASSIGN, n, (ot_tensor **)outs, fit, NULL, NULL});
    if (pool) ot_pool_pop(pool);
    free(fit);
    return rc;
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

/* The gradients of loss w.r.t. wrt into trees (current pool). The
 * autodiff calls know no caller: their errors are relabelled with the
 * program call's file:line and name, as an optimizer step's are. */
int ot__prog_grad_trees(const ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                      ot_node **trees)
{
    ot_autodiff *ad = (ot_autodiff_new)(loss, NULL);
    if (!ad) return ot__err_relabel(ot_errcode(), p->at.file, p->at.line, p->at.fn);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!wrt[i]) rc = FAIL(p, OT_ENULL, "wrt[%d] is NULL", i);
        else if (!(trees[i] = ot__autodiff_grad_tree(ad, wrt[i])))
            rc = ot__err_relabel(ot_errcode(), p->at.file, p->at.line, p->at.fn);
    }
    ot_autodiff_free(ad);
    return rc;
}

static int add_backprop(ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                        ot_tensor *const grads[])
{
    int rc = ot__prog_check_open(p);
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
    rc = ot__prog_grad_trees(p, loss, n, wrt, trees);
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
    int rc = ot__prog_check_open(p);
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
    int rc = ot__prog_check_open(p);
    if (!rc) rc = ot__adam_opts(&p->at, opts, &o);
    if (!rc) rc = ot__nodes_check(p->at.fn, p->at.file, p->at.line, "g", n, g);
    if (rc) return rc;
    size_t cap = n > 0 ? 3 * (size_t)n : 1;
    ot_tensor **outs = ot__calloc(cap, sizeof *outs);
    ot_node **trees = ot__calloc(cap, sizeof *trees);
    ot_tensor *count = (ot_full)(p->be, OT_SHAPE(), OT_F64, (double)o.t - 1);
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

void ot_program_free(ot_program *p)
{
    if (!p) return;
    for (int i = 0; i < p->nspec; i++) ot__prog_spec_free(p, p->specs[i]);
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
    free(p->last);
    free(p->symrun);
    free(p->write);
    free(p->write_step);
    ot_backend *be = p->be;
    free(p);
    ot__backend_drop(be);
}
