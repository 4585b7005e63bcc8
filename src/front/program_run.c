/*
 * program_run.c - a program compiled (every step prepared by a backend
 * that prepares steps, per specialisation: one per set of symbol sizes
 * bound), its bindings checked per run, and the run itself: the prepared
 * steps through the backend's vtable, or each step through its assign on a
 * backend that does not prepare steps. Also its stats and explain text.
 * program.c builds the program.
 */
#include "program.h"

/* ---- specialisations ------------------------------------------------------- */

/* The trees of every step, in step order, and their count. */
static size_t ntrees(const ot_program *p)
{
    size_t n = 0;
    for (int i = 0; i < p->nstep; i++) n += (size_t)p->steps[i].n;
    return n;
}

void ot__prog_spec_free(const ot_program *p, spec *s)
{
    if (!s) return;
    for (int i = 0; i < s->nsteps; i++) {
        cstep *c = &s->steps[i];
        for (int j = 0; c->trees && j < c->n; j++) ot_release(c->trees[j]);
        free(c->trees);
        free(c->outs);
        if (p->prepared) p->be->vt->release(&c->prep);
        free(c->patches);
    }
    for (size_t j = 0, n = ntrees(p); s->trees && j < n; j++) ot_release(s->trees[j]);
    for (int k = 0; k < s->ntmp; k++) ot_tensor_free(s->tmps[k]);
    for (int k = 0; s->ph && k < p->nph; k++)
        if (s->ph[k] != p->ph[k].t) ot_tensor_free(s->ph[k]);
    free(s->trees);
    free(s->tmps);
    free(s->steps);
    free(s->ph);
    free(s->nominal);
    free(s->sym);
    free(s->arena);
    free(s);
}

/* Step i's trees over this specialisation's placeholders, retained into
 * trees (the program's own when the sizes are the nominal ones). */
typedef struct stale_ctx {
    const ot_program *p;
    const spec *s;
    bool views_only;   /* the step's own trees: the placeholders themselves
                          are substituted, their views cannot be */
} stale_ctx;

/* A leaf over a placeholder's nominal memory where the specialisation has
 * another tensor for it: a view, which substitution cannot follow. */
static int visit_stale(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)operand;
    const stale_ctx *x = w->ctx;
    if (n->kind != OT_NODE_LEAF) return index;
    const ot_tensor *t = ot__leaf_tensor(n);
    for (int k = 0; k < x->p->nph; k++)
        if (x->s->ph[k] != x->p->ph[k].t && t->buf == x->p->ph[k].t->buf &&
            !(x->views_only && t == x->p->ph[k].t))
            return OT_EUNSUPPORTED;
    return index;
}

/* Refuses a specialisation's trees that still read a placeholder's
 * nominal memory (every backend: ref read its zeros, the cpu refused at
 * planning); 0 or the error. */
static int stale_views(const ot_program *p, const spec *s, int n, ot_node *const trees[],
                       bool views_only)
{
    stale_ctx x = {p, s, views_only};
    ot__walker w = {.visit = visit_stale, .ctx = &x};
    int rc = 0;
    for (int j = 0; j < n && rc >= 0; j++) rc = ot__walker_run(&w, trees[j]);
    ot__walker_free(&w);
    if (rc == OT_EUNSUPPORTED)
        return FAIL(p, OT_EUNSUPPORTED, "a tree reads a view (slice, reshape) of a symbolic "
                    "placeholder, which cannot be specialised to another size; bind the view's "
                    "shape instead");
    return rc < 0 ? nomem(p) : 0;
}

/* A node that batch norm marked (OT__META_TWO_VALUES) holding fewer than
 * 2 values at this specialisation's sizes: the run would divide by n - 1
 * = 0 into the running variance. */
static int visit_two_values(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)operand;
    if (ot__numel(&n->shape) >= 2 || !ot_node_meta(n, OT__META_TWO_VALUES)) return index;
    *(const ot_node **)w->ctx = n;
    return OT_EINVAL;
}

/* Refuses a specialisation where a batch norm's channel holds one value
 * (the builder refused that shape, but saw the nominal sizes only). */
static int too_few_values(const ot_program *p, int n, ot_node *const trees[])
{
    const ot_node *bad = NULL;
    ot__walker w = {.visit = visit_two_values, .ctx = &bad};
    int rc = 0;
    for (int j = 0; j < n && rc >= 0; j++) rc = ot__walker_run(&w, trees[j]);
    ot__walker_free(&w);
    if (bad) {
        char sh[OT__SHAPE_STRLEN];
        return FAIL(p, OT_EINVAL, "the batch_norm built at %s:%d needs more than 1 value per "
                    "channel in training (the unbiased variance divides by n - 1); at these "
                    "sizes a channel holds %s", bad->file ? bad->file : "?", bad->line,
                    ot__shape_str(&bad->shape, sh));
    }
    return rc < 0 ? nomem(p) : 0;
}

static int spec_trees(const ot_program *p, const spec *s, int i, ot_node **trees)
{
    const pstep *st = &p->steps[i];
    int rc = 0;
    bool nominal = true;
    for (int k = 0; k < p->nph; k++) nominal = nominal && s->ph[k] == p->ph[k].t;
    if (nominal) {
        for (int j = 0; j < st->n; j++) trees[j] = ot_retain(st->trees[j]);
        return 0;
    }
    ot_pool *pool = ot_pool_push();
    if (!pool) return nomem(p);
    ot_node *loss = st->loss;
    if (st->kind != STEP_BACKPROP) memcpy(trees, st->trees, sizeof *trees * (size_t)st->n);
    ot_node **src = st->kind == STEP_BACKPROP ? &loss : trees;
    int nsrc = st->kind == STEP_BACKPROP ? 1 : st->n;
    /* first, so that a view's error is the same whatever size is bound
     * (substituting could fail on the view's shape before) */
    rc = stale_views(p, s, nsrc, src, true);
    for (int j = 0; j < nsrc && !rc; j++)
        if (!(src[j] = ot__substitute(src[j], p->nph, s->nominal, s->ph)))
            rc = ot_errcode() ? ot_errcode() : OT_EINVAL;
    if (!rc && st->kind == STEP_BACKPROP)
        rc = ot__prog_grad_trees(p, loss, st->n, st->wrt, trees);
    if (!rc) rc = stale_views(p, s, st->n, trees, false);
    if (!rc) rc = too_few_values(p, st->n, trees);
    for (int j = 0; j < st->n && !rc; j++) ot_retain(trees[j]);
    if (rc) memset(trees, 0, sizeof *trees * (size_t)st->n);
    ot_pool_pop(pool);
    return rc;
}

/* The placeholder (of s) whose buffer holds ptr, or -1. */
static int find_ph(const ot_program *p, const spec *s, const char *ptr, size_t *off)
{
    for (int k = 0; k < p->nph; k++) {
        const char *d = s->ph[k]->buf->data;
        size_t n = s->ph[k]->buf->nbytes ? s->ph[k]->buf->nbytes : 1;
        if (ptr >= d && ptr < d + n) {
            *off = (size_t)(ptr - d);
            return k;
        }
    }
    return -1;
}

typedef struct plan_ctx {
    const ot_program *p;
    spec *s;
    cstep *c;
} plan_ctx;

/* Prepares trees (a step's, rewritten by the backend's rule sets where it
 * has any) into c, and finds the leaf pointers that read placeholders. */
static int plan_trees(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                      void *ctx)
{
    const plan_ctx *x = ctx;
    const ot_program *p = x->p;
    cstep *c = x->c;
    int rc = be->vt->prepare(be, n, outs, trees, &c->prep);
    if (rc) return rc;
    c->patches = ot__malloc(sizeof *c->patches * (size_t)(c->prep.nleaf ? c->prep.nleaf : 1));
    if (!c->patches) return nomem(p);
    for (int j = 0; j < c->prep.nleaf; j++) {
        size_t off;
        int k = find_ph(p, x->s, c->prep.leaf[j], &off);   /* stale views: check_step's */
        if (k >= 0) c->patches[c->npatch++] = (patch){j, k, off};
    }
    return 0;
}

/* Checks step i of s, its trees (over s's placeholders) into trees. */
static int check_step(const ot_program *p, spec *s, int i, ot_node **trees)
{
    const pstep *st = &p->steps[i];
    int rc = spec_trees(p, s, i, trees);
    ot_backend *be;
    if (!rc) rc = ot__assign_check(p->at.fn, st->n, st->outs, trees, NULL, &be);
    for (int j = 0; j < st->n && !rc; j++) {
        if (be != p->be)
            rc = FAIL(p, OT_EBACKEND, "output %d is on another backend", j);
        for (int k = 0; k < p->nph && !rc; k++)
            if (st->outs[j]->buf == s->ph[k]->buf || st->outs[j]->buf == p->ph[k].t->buf)
                rc = FAIL(p, OT_EINVAL, "output %d writes placeholder %s; "
                                 "placeholders are inputs", j, p->ph[k].name);
    }
    if (rc) return ot__prog_step_error(&p->at, i, trees[0] ? trees[0] : st->trees[0]);
    return 0;
}

/* ot__rewrite_then's end for a backend that does not prepare steps: the
 * rewritten trees (retained) replace the step's, which runs them as they
 * are. Rewriting at each run instead let a failing rule pass the compile
 * and fail every run. */
static int keep_final(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                      void *ctx)
{
    (void)be, (void)outs;
    cstep *c = ctx;
    for (int j = 0; j < n; j++) {
        ot_node *t = ot_retain(trees[j]);
        (ot_release)(c->trees[j]);
        c->trees[j] = t;
    }
    c->final = true;
    return 0;
}

/* ot__share_steps' sink at compile: each assignment of a run, in order,
 * kept as a cstep (its trees retained: the plan builds them in pools it
 * pops) and prepared where the backend prepares steps, with the rule sets
 * applied first unless they were (the rewritten trees die after
 * preparing: what the backend prepared does not refer to them). */
static int keep_cstep(void *ctx, ot_backend *fin, int step, bool wave, int n,
                      ot_tensor *const outs[], ot_node *const trees[])
{
    plan_ctx *x = ctx;
    const ot_program *p = x->p;
    spec *s = (spec *)x->s;
    cstep c = {step, wave, fin != NULL, n, ot__malloc(sizeof *outs * (size_t)n),
               ot__malloc(sizeof *trees * (size_t)n), {0}, NULL, 0};
    if (!c.outs || !c.trees || !ot__prog_push((void **)&s->steps, &s->nsteps, sizeof c, &c)) {
        free(c.outs);
        free(c.trees);
        return nomem(p);
    }
    x->c = &s->steps[s->nsteps - 1];
    memcpy(x->c->outs, outs, sizeof *outs * (size_t)n);
    for (int j = 0; j < n; j++) x->c->trees[j] = ot_retain(trees[j]);
    if (!p->prepared)
        return fin || !p->be->rewrite
                   ? 0
                   : ot__rewrite_then(p->be, n, x->c->outs, x->c->trees, NULL, keep_final, x->c);
    int rc = fin || !p->be->rewrite
                 ? plan_trees(p->be, n, x->c->outs, x->c->trees, x)
                 : ot__rewrite_then(p->be, n, x->c->outs, x->c->trees, NULL, plan_trees, x);
    if (rc) return rc;
    size_t bytes = x->c->prep.arena_bytes;
    if (bytes > s->arena_bytes) s->arena_bytes = bytes;
    s->separate_bytes += bytes;
    s->kernels += x->c->prep.kernels;
    return 0;
}

/* Every step of s checked, then planned over the values they share
 * (ot__share_steps, as ot_sequential plans them: a run computes each
 * shared value once) into s->steps, the temporaries kept in s->tmps. */
static int compile_steps(const ot_program *p, spec *s)
{
    ot_step *st = ot__malloc(sizeof *st * (size_t)(p->nstep ? p->nstep : 1));
    s->trees = ot__calloc(ntrees(p) + 1, sizeof *s->trees);
    int rc = st && s->trees ? 0 : nomem(p);
    for (int i = 0, at = 0; i < p->nstep && !rc; at += p->steps[i++].n) {
        st[i] = (ot_step){p->steps[i].n, p->steps[i].outs, s->trees + at};
        rc = check_step(p, s, i, s->trees + at);
    }
    plan_ctx x = {p, s, NULL};
    ot__share_sink sink = {.emit = keep_cstep, .ctx = &x, .keep = true};
    int failed = -1;
    bool checked = !rc;   /* a step's check failed: its error is made */
    if (!rc) rc = ot__share_steps(p->nstep, st, &sink, &failed);
    s->tmps = sink.tmps;
    s->ntmp = sink.ntmp;
    if (rc && checked && failed >= 0) rc = ot__prog_step_error(&p->at, failed, st[failed].trees[0]);
    else if (rc && checked) {   /* planning failed: the message, placed once */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ot__prog_unsited(&p->at, ot_errmsg()));
        rc = ot__err_reword(rc, p->at.file, p->at.line, p->at.fn, "%s", msg);
    }
    free(st);
    return rc;
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
    int rc = s->sym && s->ph && s->nominal ? 0 : nomem(p);
    for (int k = 0; k < p->nph && !rc; k++) s->nominal[k] = p->ph[k].t;
    if (!rc && p->nsym) memcpy(s->sym, sym, sizeof *sym * (size_t)p->nsym);
    for (int k = 0; k < p->nph && !rc; k++) {
        ot_shape shape = p->ph[k].shape;
        ot__prog_resolve_shape(p, p->ph[k].name, &shape, sym);
        s->ph[k] = ot__shape_eq(&shape, &p->ph[k].t->leaf.shape)
                       ? p->ph[k].t : (ot_empty)(p->be, shape, p->ph[k].dtype);
        if (!s->ph[k]) rc = ot_errcode();
        else if (s->ph[k] != p->ph[k].t) rc = (ot_tensor_set_name)(s->ph[k], p->ph[k].name);
    }
    if (!rc) rc = compile_steps(p, s);
    if (!rc && s->arena_bytes && !(s->arena = ot__data_alloc(s->arena_bytes)))
        rc = FAIL(p, OT_ENOMEM, "out of memory for the %zu-byte arena",
                         s->arena_bytes);
    if (!rc && !ot__prog_push((void **)&p->specs, &p->nspec, sizeof s, &s)) rc = nomem(p);
    if (rc) {
        ot__prog_spec_free(p, s);
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
    int rc = ot__prog_check_open(p);
    if (rc) return rc;
    ot_clear_error();
    size_t nph = (size_t)(p->nph ? p->nph : 1);
    if (!p->base) p->base = ot__calloc(nph, sizeof *p->base);
    if (!p->bound) p->bound = ot__calloc(nph, sizeof *p->bound);
    if (!p->bound_by) p->bound_by = ot__calloc(nph, sizeof *p->bound_by);
    if (!p->symrun) p->symrun = ot__calloc((size_t)(p->nsym ? p->nsym : 1), sizeof *p->symrun);
    if (!p->last) p->last = ot__calloc(nph, sizeof *p->last);
    p->nlast = -1;
    if (!p->base || !p->bound || !p->bound_by || !p->symrun || !p->last || find_writes(p))
        return nomem(p);
    return spec_new(p, p->symnom, &p->cur);
}

int ot_program_compile_at(ot_program *p, const char *file, int line)
{
    int rc = enter_live(p, "program_compile", file, line);
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

/* Checks the bindings, and records them in p->last (the run sets
 * p->nlast once it has specialised). */
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
        const ot_tensor *t = b[i].tensor;   /* i < nph: k is a placeholder bound once */
        p->last[i] = (last_bind){t, t ? t->serial : 0, k};
    }
    for (int k = 0; n < p->nph && k < p->nph; k++)   /* n distinct names bound */
        if (p->bound[k] != p->runs)
            return FAIL(p, OT_EINVAL, "placeholder %s is not bound", p->ph[k].name);
    return 0;
}

/* Whether b binds the tensors of the last run, in its order, to the same
 * names: then every check of check_bindings holds as it did (a tensor's
 * backend, dtype, view and memory never change, nor do the placeholders
 * and the buffers the steps write), p->base and the specialisation are
 * the last run's, and only the names are compared again (the caller's
 * strings may have changed). W8p: a third of a run outside its kernel. */
static bool same_bindings(const ot_program *p, int n, const ot_bind b[])
{
    if (n != p->nlast || (n && !b)) return false;
    for (int i = 0; i < n; i++) {
        const last_bind *l = &p->last[i];
        const ot_tensor *t = b[i].tensor;
        if (!t || t != l->t || b[i].data || !b[i].name || t->serial != l->serial ||
            strcmp(b[i].name, p->ph[l->k].name) != 0)
            return false;
    }
    return true;
}

/* Frees the specialisation run least recently, other than the current
 * one, when more than OT_PROG_SPECS_KEPT are kept. */
static void forget_oldest(ot_program *p)
{
    if (p->nspec <= OT_PROG_SPECS_KEPT) return;
    int old = -1;
    for (int i = 0; i < p->nspec; i++)
        if (p->specs[i] != p->cur && (old < 0 || p->specs[i]->used < p->specs[old]->used)) old = i;
    ot__prog_spec_free(p, p->specs[old]);
    p->specs[old] = p->specs[--p->nspec];
}

/* The specialisation at p->symrun: the current one, one kept, or a new one
 * (the oldest then forgotten past OT_PROG_SPECS_KEPT). */
static int specialise(ot_program *p)
{
    size_t bytes = sizeof *p->symrun * (size_t)p->nsym;
    int rc = 0;
    if (!p->nsym || memcmp(p->cur->sym, p->symrun, bytes) == 0) {
        p->cur->used = p->runs;
        return 0;
    }
    int i = 0;
    while (i < p->nspec && memcmp(p->specs[i]->sym, p->symrun, bytes) != 0) i++;
    if (i < p->nspec) p->cur = p->specs[i];
    else rc = spec_new(p, p->symrun, &p->cur);
    if (rc) return rc;
    p->cur->used = p->runs;
    forget_oldest(p);
    return 0;
}

/* A run's checks: those of the last run's bindings again, or all of them
 * and the specialisation for the sizes bound; p->last remembers bindings
 * of tensors only, and no failed run. */
static int bind_run(ot_program *p, int n, const ot_bind b[])
{
    if (same_bindings(p, n, b)) return 0;
    p->nlast = -1;
    int rc = check_bindings(p, n, b);
    if (!rc) rc = specialise(p);
    if (rc) return rc;
    bool tensors = true;
    for (int i = 0; i < n; i++) tensors = tensors && p->last[i].t;
    p->nlast = tensors ? n : -1;
    return 0;
}

/* A backend that does not prepare steps (ref): each step through its
 * assign, the placeholders' buffers pointing at the bound memory for the
 * run. */
static int run_assign(ot_program *p)
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
    for (int i = 0; i < s->nsteps && !rc; i++) {
        const cstep *c = &s->steps[i];
        rc = c->final ? p->be->vt->assign_many(p->be, c->n, c->outs, c->trees)
                      : ot__assign_backend(p->be, c->n, c->outs, c->trees);
        if (rc) rc = ot__prog_step_error(&p->at, c->step, c->trees[0]);
    }
    for (int k = 0; k < p->nph; k++) s->ph[k]->buf->data = old[k];
    if (old != keep) free(old);
    return rc;
}

/* A backend that prepares steps (cpu): each step as prepared, its leaf
 * pointers patched to the bound memory, every step in the one arena; one
 * call through the vtable per step. */
static int run_prepared(ot_program *p)
{
    spec *s = p->cur;
    int (*run_step)(ot_backend *, const ot__prepared *, char *, int, ot_node *const[]) =
        p->be->vt->run;
    for (int i = 0; i < s->nsteps; i++) {
        cstep *c = &s->steps[i];
        for (int j = 0; j < c->npatch; j++)
            c->prep.leaf[c->patches[j].slot] = p->base[c->patches[j].ph] + c->patches[j].off;
        int rc = run_step(p->be, &c->prep, s->arena, c->n, c->trees);
        if (rc) return ot__prog_step_error(&p->at, c->step, c->trees[0]);   /* found running: placed */
    }
    ot__stat_add(ot__stats_mine(&p->be->stats), OT__STAT_ASSIGNS, (uint64_t)s->nsteps);
    return 0;
}

static int run(ot_program *p, int n, const ot_bind bindings[])
{
    if (!p->nspec) return FAIL(p, OT_ESTATE, "the program is not compiled (ot_program_compile)");
    ot_clear_error();
    int rc = bind_run(p, n, bindings);
    if (rc) return rc;
    return p->prepared ? run_prepared(p) : run_assign(p);
}

int ot_program_run_at(ot_program *p, int n, const ot_bind bindings[], const char *file, int line)
{
    int rc = enter_live(p, "program_run", file, line);
    return rc ? rc : leave(p, run(p, n, bindings));
}

/* Placeholder i bound to ts[i], in creation order: the bindings a named
 * run takes, with the placeholders' own names, so the checks and the
 * last-run shortcut are ot_program_run's. */
static int run_tensors(ot_program *p, int n, ot_tensor *const ts[])
{
    if (n < 0 || n > p->nph)
        return FAIL(p, OT_EINVAL, "%d tensors for %d placeholders", n, p->nph);
    if (n && !ts) return FAIL(p, OT_ENULL, "tensors is NULL");
    ot_bind keep[16];
    ot_bind *b = n <= 16 ? keep : ot__malloc(sizeof *b * (size_t)n);
    if (!b) return nomem(p);
    for (int i = 0; i < n; i++) b[i] = (ot_bind){.name = p->ph[i].name, .tensor = ts[i]};
    int rc = run(p, n, n ? b : NULL);
    if (b != keep) free(b);
    return rc;
}

int ot_program_run_tensors_at(ot_program *p, int n, ot_tensor *const tensors[], const char *file,
                              int line)
{
    int rc = enter_live(p, "program_run", file, line);
    return rc ? rc : leave(p, run_tensors(p, n, tensors));
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
    for (int i = 0; i < s->nsteps && !rc; i++) {
        const cstep *c = &s->steps[i];
        if (c->wave)
            fprintf(f, "step %d: %d value%s computed once, kept for later steps:\n", c->step,
                    c->n, c->n == 1 ? "" : "s");
        else
            fprintf(f, "step %d (%d output%s):\n", c->step, c->n, c->n == 1 ? "" : "s");
        rc = p->prepared ? p->be->vt->explain_prepared(&c->prep, f)
                         : (ot_explain_many)(c->n, c->outs, c->trees, f);
    }
    if (!rc && p->prepared)
        fprintf(f, "program: %d steps, %d kernels; one arena of %zu bytes for every step "
                "(the steps' own arenas add up to %zu)\n", p->nstep, s->kernels, s->arena_bytes,
                s->separate_bytes);
    if (!rc && s->ntmp)
        fprintf(f, "program: %d value%s shared across steps, computed once per run\n", s->ntmp,
                s->ntmp == 1 ? "" : "s");
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
