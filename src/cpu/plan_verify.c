/*
 * plan_verify.c - the compiler's invariants, checked between passes.
 *
 * Built only with -DOT_VERIFY_PLANS (tools/test.sh's sanitizer build); the
 * calls in compile.c compile to nothing otherwise. Each check returns 0, or
 * records OT_EINTERNAL naming the broken invariant and returns it: a plan
 * that breaks one is never run, and nothing aborts.
 *
 * After the walk: entries are post-order (an op's operands come before it),
 * each node once, leaf slots and param indices in range, roots valid.
 * After fusion: canonical indices are valid and idempotent, an entry's
 * canon is of its own kind and op, every canonical leaf and materialised
 * op value has storage, and a GEMM root names an unmaterialised dot.
 * After the kernels are built, again after scheduling and after the arena:
 * every view's index is in range for its space, every instruction reads
 * buffers written earlier in its kernel and its load or param in range,
 * every temporary is written by an earlier kernel than any reading it, an
 * output that a BLAS call writes is written by no other kernel, segments
 * cover runs of kernels in order starting at a dot, and the arena bytes of
 * temporaries alive at once do not overlap and lie within the arena.
 */
#include "plan.h"

#ifdef OT_VERIFY_PLANS
#include <stdarg.h>

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ot__err_set(OT_EINTERNAL, NULL, 0, "compile", "plan verifier: %s", msg);
}

/* ---- the walk and fusion ---------------------------------------------------- */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const ot_node *const *)a, y = (uintptr_t)*(const ot_node *const *)b;
    return (x > y) - (x < y);
}

/* Each node once: sorted, no two neighbours are equal. */
static int nodes_distinct(const ot_walk *w)
{
    const ot_node **nodes = ot__malloc(sizeof *nodes * (size_t)(w->n ? w->n : 1));
    if (!nodes) return OT_ENOMEM;
    for (int i = 0; i < w->n; i++) nodes[i] = w->e[i].node;
    qsort(nodes, (size_t)w->n, sizeof *nodes, cmp_ptr);
    int rc = 0;
    for (int i = 1; i < w->n && !rc; i++)
        if (nodes[i] == nodes[i - 1]) rc = fail("a node has two entries");
    free(nodes);
    return rc;
}

int ot__verify_walk(const ot_walk *w, int nout)
{
    for (int i = 0; i < w->n; i++) {
        const ent *e = &w->e[i];
        switch (e->kind) {
        case OT_NODE_LEAF:
            if (e->slot < 0 || e->slot >= w->nleaf) return fail("entry %d: leaf slot %d", i, e->slot);
            break;
        case OT_NODE_CONST:
            if (e->slot < 0 || e->slot >= w->nparam) return fail("entry %d: param %d", i, e->slot);
            break;
        case OT_NODE_OP:
            if (e->a >= i || e->b >= i || (e->b >= 0 && e->a < 0))
                return fail("entry %d: operands %d, %d not before it", i, e->a, e->b);
            break;
        default: return fail("entry %d: kind %d", i, e->kind);
        }
    }
    for (int r = 0; r < nout; r++)
        if (w->root[r] < 0 || w->root[r] >= w->n) return fail("root %d: entry %d", r, w->root[r]);
    return nodes_distinct(w);
}

static int check_canon(const compiler *c, int i)
{
    const ent *e = &c->w->e[i];
    int k = c->ci[i].canon;
    if (k < 0 || k > i || c->ci[k].canon != k) return fail("entry %d: canon %d", i, k);
    const ent *ek = &c->w->e[k];
    if (ek->kind != e->kind || ek->op != e->op || ek->dtype != e->dtype ||
        (e->kind == OT_NODE_LEAF && ek->slot != e->slot))
        return fail("entry %d merged into a different entry %d", i, k);
    return 0;
}

/* A storage's index is in range for its space. */
static bool storage_ok(const compiler *c, const storage *s)
{
    if (!s->has) return false;
    switch (s->space) {
    case OT_SPACE_LEAF: return s->index >= 0 && s->index < c->w->nleaf;
    case OT_SPACE_TEMP: return s->index >= 0 && s->index < c->plan->ntemps;
    case OT_SPACE_OUT: return s->index >= 0 && s->index < c->nout;   /* a concat in place */
    default: return false;
    }
}

int ot__verify_fused(const compiler *c)
{
    for (int i = 0; i < c->w->n; i++) {
        int rc = check_canon(c, i);
        if (rc) return rc;
        if (c->ci[i].canon != i) continue;
        bool leaf = c->w->e[i].kind == OT_NODE_LEAF;
        bool stored = is_op(c, i) && c->ci[i].mat && kind_of(c, i) != OT_KIND_SHAPE;
        if ((leaf || stored) && !storage_ok(c, &c->ci[i].st))
            return fail("entry %d is materialised without storage", i);
    }
    for (int r = 0; r < c->nout; r++) {
        int d = c->groot[r].dot;
        if (d >= 0 && (d >= c->w->n || c->ci[d].canon != d || !is_op(c, d) ||
                       (kind_of(c, d) != OT_KIND_DOT && c->w->e[d].op != OT_OP_SCATTER_ADD) ||
                       c->ci[d].mat))
            return fail("output %d: GEMM root %d is not an unmaterialised dot or scatter_add", r, d);
    }
    return 0;
}

/* ---- kernels ---------------------------------------------------------------- */

static bool view_ok(const ot_plan *p, const ot_view *v)
{
    int n = v->space == OT_SPACE_LEAF ? p->nleaves : v->space == OT_SPACE_TEMP ? p->ntemps
          : v->space == OT_SPACE_OUT ? p->nout : 0;
    return v->index >= 0 && v->index < n &&
           (v->dtype == OT_F32 || v->dtype == OT_F64 || v->dtype == OT_I32);
}

/* Calls f on every view of k: loads (which >= 0), the store (-1) and the
 * further outputs (-2 - x). */
#define EACH_VIEW(k, v, which)                                                          \
    for (int which = -1 - (k)->nxstore; which < (k)->nload; which++)                     \
        for (const ot_view *v = which >= 0 ? &(k)->loads[which] : which == -1 ? &(k)->store \
                                                                  : &(k)->xstores[-2 - which].view; \
             v; v = NULL)

/* A buffer operand: in range and written by an earlier instruction. */
static bool reads_ok(const ot_kernel *k, const bool *written, int b)
{
    return b >= 0 && b < k->nbuf && written[b];
}

static int check_insn(const ot_plan *p, const ot_kernel *k, int kid, int i, bool *written)
{
    const ot_insn *in = &k->insns[i];
    int nin = in->code == OT_I_FMA ? 3 : in->code == OT_I_BINARY ? 2
            : in->code == OT_I_UNARY || in->code == OT_I_CAST ? 1 : 0;
    if (in->code > OT_I_CAST) return fail("kernel %d insn %d: code %d", kid, i, in->code);
    if (in->code == OT_I_LOAD && (in->arg < 0 || in->arg >= k->nload))
        return fail("kernel %d insn %d: load %d of %d", kid, i, in->arg, k->nload);
    if (in->code == OT_I_PARAM && (in->arg < 0 || in->arg >= p->nparams))
        return fail("kernel %d insn %d: param %d of %d", kid, i, in->arg, p->nparams);
    const int16_t ops[3] = {in->a, in->b, in->c};
    for (int o = 0; o < nin; o++)
        if (!reads_ok(k, written, ops[o]))
            return fail("kernel %d insn %d reads buffer %d before it is written", kid, i, ops[o]);
    if (in->dst < 0 || in->dst >= k->nbuf)
        return fail("kernel %d insn %d: buffer %d of %d", kid, i, in->dst, k->nbuf);
    written[in->dst] = true;
    return 0;
}

static int check_program(const ot_plan *p, const ot_kernel *k, int kid)
{
    if (k->nbuf < 0 || k->nxstore < 0 || k->nxstore > OT_MAX_XSTORES)
        return fail("kernel %d: %d buffers, %d further outputs", kid, k->nbuf, k->nxstore);
    bool *written = ot__calloc((size_t)(k->nbuf ? k->nbuf : 1), sizeof *written);
    if (!written) return OT_ENOMEM;
    int rc = 0;
    for (int i = 0; i < k->ninsn && !rc; i++) rc = check_insn(p, k, kid, i, written);
    if (!rc && !reads_ok(k, written, k->result))
        rc = fail("kernel %d: result buffer %d is never written", kid, k->result);
    for (int x = 0; x < k->nxstore && !rc; x++)
        if (!reads_ok(k, written, k->xstores[x].result))
            rc = fail("kernel %d: output %d's buffer is never written", kid, x + 1);
    free(written);
    return rc;
}

static int check_kernel(const ot_plan *p, const ot_kernel *k, int kid)
{
    if (k->kind < OT_KER_EW || k->kind > OT_KER_ATTN || k->ndim < 0 || k->ndim > OT_MAX_DIMS)
        return fail("kernel %d: kind %d over %d dims", kid, k->kind, k->ndim);
    if (k->nload < 0 || (k->nload > 0 && !k->loads) || (k->nxstore > 0 && !k->xstores))
        return fail("kernel %d: views missing", kid);
    EACH_VIEW(k, v, which)
        if (!view_ok(p, v)) return fail("kernel %d: view %d: space %d index %d", kid, which, v->space, v->index);
    if (k->kind == OT_KER_REDUCE && (k->red_axis < -1 || k->red_axis >= k->ndim))
        return fail("kernel %d: reduces dim %d of %d", kid, k->red_axis, k->ndim);
    return k->kind == OT_KER_EW || k->kind == OT_KER_REDUCE ? check_program(p, k, kid) : 0;
}

/* A dot with a beta (C = alpha*A.B + beta*C: a running sum of dots, or an
 * optimizer's update over w) reads the C it writes. */
static bool accumulates(const ot_kernel *k)
{
    return k->kind == OT_KER_DOT && (k->beta.param >= 0 || k->beta.mul != 0);
}

static bool view_reach(const ot_kernel *k, int which, int64_t *lo, int64_t *hi);

/* The kernels that write each temporary, ascending, as one array:
 * writers of t are by[first[t]] .. by[first[t + 1] - 1]. */
typedef struct temp_writers { int *first, *by; } temp_writers;

static int writers_index(const ot_plan *p, temp_writers *tw)
{
    size_t nt = (size_t)p->ntemps, nw = 0;
    for (int j = 0; j < p->nkernels; j++)
        EACH_VIEW(&p->kernels[j], o, which) nw += which < 0 && o->space == OT_SPACE_TEMP;
    tw->first = ot__calloc(nt + 2, sizeof *tw->first);
    tw->by = ot__calloc(nw ? nw : 1, sizeof *tw->by);
    if (!tw->first || !tw->by) return OT_ENOMEM;
    for (int j = 0; j < p->nkernels; j++)
        EACH_VIEW(&p->kernels[j], o, which)
            if (which < 0 && o->space == OT_SPACE_TEMP) tw->first[o->index + 2]++;
    for (size_t t = 0; t < nt; t++) tw->first[t + 2] += tw->first[t + 1];
    for (int j = 0; j < p->nkernels; j++)
        EACH_VIEW(&p->kernels[j], o, which)
            if (which < 0 && o->space == OT_SPACE_TEMP) tw->by[tw->first[o->index + 1]++] = j;
    return 0;
}

/* Whether a kernel after i writes elements lo..hi of temporary t. */
static int late_writer(const ot_plan *p, const temp_writers *tw, int i, int t, int64_t lo, int64_t hi)
{
    for (int x = tw->first[t]; x < tw->first[t + 1]; x++) {
        int j = tw->by[x];
        int64_t wlo, whi;
        if (j <= i) continue;
        EACH_VIEW(&p->kernels[j], o, which)
            if (which < 0 && o->space == OT_SPACE_TEMP && o->index == t &&
                view_reach(&p->kernels[j], which, &wlo, &whi) && wlo <= hi && lo <= whi)
                return j;
    }
    return -1;
}

/* No kernel writes elements of a temporary that an earlier kernel read:
 * a temporary written in parts (a concat's) is read only after its last
 * part, and a kernel moved earlier (a dot's epilogue or bsum) never passes
 * a writer of what it reads. Element ranges are a view's reach. Writers
 * are indexed per temporary first: a 40,000-kernel unfused chain took
 * minutes when every read scanned every later kernel. */
static int check_late_writers(const ot_plan *p)
{
    temp_writers tw = {0};
    int rc = writers_index(p, &tw);
    for (int i = 0; i < p->nkernels && !rc; i++) {
        const ot_kernel *r = &p->kernels[i];
        for (int l = 0; l < r->nload && !rc; l++) {
            const ot_view *v = &r->loads[l];
            int64_t lo, hi;
            if (v->space != OT_SPACE_TEMP || !view_reach(r, l, &lo, &hi)) continue;
            int j = late_writer(p, &tw, i, v->index, lo, hi);
            if (j >= 0)
                rc = fail("kernel %d reads temporary %d before kernel %d writes part of it", i,
                          v->index, j);
        }
    }
    free(tw.first);
    free(tw.by);
    return rc;
}

/* Temporaries are written before they are read, in kernel order. */
static int check_temp_order(const ot_plan *p)
{
    bool *written = ot__calloc((size_t)(p->ntemps ? p->ntemps : 1), sizeof *written);
    if (!written) return OT_ENOMEM;
    int rc = 0;
    for (int i = 0; i < p->nkernels && !rc; i++) {
        const ot_kernel *k = &p->kernels[i];
        for (int l = 0; l < k->nload && !rc; l++)
            if (k->loads[l].space == OT_SPACE_TEMP && !written[k->loads[l].index])
                rc = fail("kernel %d reads temporary %d before any kernel writes it", i, k->loads[l].index);
        if (!rc && accumulates(k) && k->store.space == OT_SPACE_TEMP && !written[k->store.index])
            rc = fail("kernel %d accumulates into temporary %d before any kernel writes it", i,
                      k->store.index);
        EACH_VIEW(k, v, which)
            if (which < 0 && v->space == OT_SPACE_TEMP) written[v->index] = true;
    }
    free(written);
    return rc ? rc : check_late_writers(p);
}


/* Store which (-1: the store, else an extra store) of k, and its dims in
 * *dims (a dot's are its m, n and batch, in dot_dims). */
static const ot_view *store_dims(const ot_kernel *k, int which, int64_t dot_dims[3],
                                 const int64_t **dims, int *nd)
{
    dot_dims[0] = k->m, dot_dims[1] = k->n, dot_dims[2] = k->batch;
    *dims = k->kind == OT_KER_DOT ? dot_dims : k->dims;
    *nd = k->kind == OT_KER_DOT ? 3 : k->ndim;
    return which == -1 ? &k->store : &k->xstores[-2 - which].view;
}

/* The columns [c[0], c[1]] a store touches within rows of row_stride
 * elements: false unless every dim but one of unit stride steps by whole
 * rows (any number of them: a batched dot's batches too) and that one
 * stays inside a row. An element's column is then its offset mod the row
 * stride, so two stores of apart columns share no element. */
static bool row_columns(const ot_kernel *k, int which, int64_t row_stride, int64_t c[2])
{
    int64_t dot_dims[3];
    const int64_t *dims;
    int nd;
    const ot_view *v = store_dims(k, which, dot_dims, &dims, &nd);
    int64_t width = 1;
    bool column = false;
    if (row_stride <= 0) return false;
    for (int d = 0; d < nd; d++) {
        if (dims[d] <= 1) continue;
        if (v->strides[d] == 1 && !column) {
            width = dims[d];
            column = true;
        } else if (v->strides[d] % row_stride != 0) {
            return false;
        }
    }
    c[0] = (v->offset % row_stride + row_stride) % row_stride;
    c[1] = c[0] + width - 1;
    return c[1] < row_stride;
}

/* The smallest stride other than 1 of a dim of more than one element of
 * store which, or of *least where smaller; dims of one element have no
 * meaningful stride (a dot's m of 1: concat(batched_dot(a, b), x) on its
 * last axis puts the dot's batches a row apart, and its strides[0] is not
 * the row). */
static void least_row_stride(const ot_kernel *k, int which, int64_t *least)
{
    int64_t dot_dims[3];
    const int64_t *dims;
    int nd;
    const ot_view *v = store_dims(k, which, dot_dims, &dims, &nd);
    for (int d = 0; d < nd; d++) {
        int64_t s = v->strides[d] < 0 ? -v->strides[d] : v->strides[d];
        if (dims[d] > 1 && s > 1 && (*least == 0 || s < *least)) *least = s;
    }
}

/* A store's dims of more than one element as (stride, length), into d[]
 * by stride, largest first; -1 where a stride is not positive. */
typedef struct box_dim {
    int64_t stride, len;
} box_dim;

static int box_dims(const ot_kernel *k, int which, box_dim d[], int64_t *offset)
{
    int64_t dot_dims[3];
    const int64_t *dims;
    int nd, n = 0;
    const ot_view *v = store_dims(k, which, dot_dims, &dims, &nd);
    for (int i = 0; i < nd; i++) {
        if (dims[i] <= 1) continue;
        if (v->strides[i] <= 0) return -1;
        int j = n++;
        for (; j > 0 && d[j - 1].stride < v->strides[i]; j--) d[j] = d[j - 1];
        d[j] = (box_dim){v->strides[i], dims[i]};
    }
    *offset = v->offset;
    return n;
}

/* Adds stride s to the radices r[0..*n) (largest first, no repeats). */
static void radix_add(int64_t r[], int *n, int64_t s)
{
    int j = 0;
    while (j < *n && r[j] > s) j++;
    if (j < *n && r[j] == s) return;
    for (int i = (*n)++; i > j; i--) r[i] = r[i - 1];
    r[j] = s;
}

/* A store's coordinates in the mixed radix r[0..n) (r[n - 1] == 1): the
 * first of each, c[], and how many, e[]; false unless the store is a box
 * there (each stride a radix, each coordinate from one dim, none carrying
 * into the next). Then its elements are exactly the box's. A dim longer
 * than its digit's range whole digits of it span the next ones (a kernel
 * merges contiguous dims: the rows of a concat's part as one dim). */
static bool box_in(const box_dim d[], int nd, int64_t offset, const int64_t r[], int n,
                   int64_t c[], int64_t e[])
{
    if (offset < 0) return false;
    for (int i = 0; i < n; i++) {
        if (i && r[i - 1] % r[i] != 0) return false;
        c[i] = offset / r[i];
        offset %= r[i];
        e[i] = 1;
    }
    for (int k = 0, i = 0; k < nd; k++) {
        while (r[i] != d[k].stride) i++;   /* every stride is a radix */
        int64_t len = d[k].len;
        for (int j = i;; j--) {
            if (e[j] != 1) return false;
            int64_t range = j ? r[j - 1] / r[j] : INT64_MAX;
            if (c[j] + len <= range) {
                e[j] = len;
                break;
            }
            if (c[j] != 0 || len % range != 0) return false;
            e[j] = range;
            len /= range;
        }
    }
    return true;
}

/* Whether two stores are boxes of one mixed radix apart in a coordinate:
 * the parts of a concat on any axis (concat(x, batched_dot(a, b)) on axis
 * 1 interleaves the two by rows; fuzz seed 6161 tree 490). */
static bool boxes_apart(const ot_kernel *a, int wa, const ot_kernel *b, int wb)
{
    box_dim da[OT_MAX_DIMS], db[OT_MAX_DIMS];
    int64_t oa, ob, r[2 * OT_MAX_DIMS + 1], ca[2 * OT_MAX_DIMS + 1], ea[2 * OT_MAX_DIMS + 1],
        cb[2 * OT_MAX_DIMS + 1], eb[2 * OT_MAX_DIMS + 1];
    int na = box_dims(a, wa, da, &oa), nb = box_dims(b, wb, db, &ob), n = 0;
    if (na < 0 || nb < 0) return false;
    for (int i = 0; i < na; i++) radix_add(r, &n, da[i].stride);
    for (int i = 0; i < nb; i++) radix_add(r, &n, db[i].stride);
    radix_add(r, &n, 1);
    if (!box_in(da, na, oa, r, n, ca, ea) || !box_in(db, nb, ob, r, n, cb, eb)) return false;
    for (int i = 0; i < n; i++)
        if (ca[i] + ea[i] <= cb[i] || cb[i] + eb[i] <= ca[i]) return true;
    return false;
}

/* Whether two stores (which < 0) of one base touch no element in common:
 * their ranges are apart, or they take apart columns of the same rows, or
 * apart boxes (the parts of a concat written in place). */
static bool stores_apart(const ot_kernel *a, int wa, const ot_kernel *b, int wb)
{
    int64_t alo, ahi, blo, bhi, ca[2], cb[2], s = 0;
    if (!view_reach(a, wa, &alo, &ahi) || !view_reach(b, wb, &blo, &bhi)) return true;   /* empty */
    if (ahi < blo || bhi < alo) return true;
    least_row_stride(a, wa, &s);
    least_row_stride(b, wb, &s);
    if (row_columns(a, wa, s, ca) && row_columns(b, wb, s, cb) && (ca[1] < cb[0] || cb[1] < ca[0]))
        return true;
    return boxes_apart(a, wa, b, wb);
}

/* Whether kernel k reads output o: a later kernel that does updates what
 * it reads in place (1/x over a concat kept in the output), in kernel
 * order. */
static bool reads_output(const ot_kernel *k, int o)
{
    for (int l = 0; l < k->nload; l++)
        if (k->loads[l].space == OT_SPACE_OUT && k->loads[l].index == o) return true;
    return false;
}

/* An output that a BLAS call writes has no other writer of the same
 * elements, but for a later kernel reading it (an in-place update): exec.c
 * would run the two in an order the plan does not fix (a group kernel
 * writing it too found no storage for the dot to load). */
static int check_blas_outputs(const ot_plan *p)
{
    for (int d = 0; d < p->nkernels; d++) {
        const ot_kernel *dk = &p->kernels[d];
        if (dk->kind != OT_KER_DOT || dk->store.space != OT_SPACE_OUT) continue;
        for (int i = 0; i < p->nkernels; i++) {
            const ot_kernel *k = &p->kernels[i];
            if (i > d && reads_output(k, dk->store.index)) continue;
            EACH_VIEW(k, v, which)
                if (i != d && which < 0 && v->space == OT_SPACE_OUT && v->index == dk->store.index &&
                    !stores_apart(dk, -1, k, which))
                    return fail("output %d is written by BLAS (kernel %d) and kernel %d", v->index, d, i);
        }
    }
    return 0;
}

static int check_segments(const ot_plan *p)
{
    int next = 0;
    for (int s = 0; s < p->nseg; s++) {
        const ot_segment *sg = &p->segs[s];
        if (sg->first < next || sg->count < 2 || sg->first + sg->count > p->nkernels)
            return fail("segment %d: kernels %d+%d out of order or range", s, sg->first, sg->count);
        const ot_kernel *d = &p->kernels[sg->first];
        if (d->kind == OT_KER_CONV) {   /* blocks of the result, exec_conv.c's */
            if (sg->count != 2 || sg->block_temp >= 0)
                return fail("segment %d: a convolution with %d kernels, blocking temp %d", s,
                            sg->count, sg->block_temp);
            next = sg->first + sg->count;
            continue;
        }
        if (d->kind != OT_KER_DOT || (sg->block_temp >= 0 && (d->store.space != OT_SPACE_TEMP ||
                                                            d->store.index != sg->block_temp)))
            return fail("segment %d does not start with the dot whose result it blocks", s);
        if (sg->row_block <= 0 || sg->row_block > sg->rows)
            return fail("segment %d: blocks of %lld of %lld rows", s, (long long)sg->row_block,
                        (long long)sg->rows);
        next = sg->first + sg->count;
    }
    if (p->row_block > 0 && p->nseg > 0) return fail("row blocks and segments together");
    return 0;
}

/* ---- the arena ---------------------------------------------------------------- */

/* The elements a view reaches from its base over dims: [*lo, *hi]; false
 * when it reaches none (a dim of 0). */
static bool reach(const ot_view *v, const int64_t *dims, int nd, int64_t *lo, int64_t *hi)
{
    *lo = *hi = v->offset;
    for (int d = 0; d < nd; d++) {
        if (dims[d] == 0) return false;
        int64_t s = v->strides[d] * (dims[d] - 1);
        if (s < 0) *lo += s;
        else *hi += s;
    }
    return true;
}

/* The shape of a CONV kernel's view `which` (-1: the store) from its
 * geometry (internal.h's X, S, W): conv reads X, W into S; conv_transpose
 * S, W into X; conv_wgrad X, S into W. All have the node's rank. */
static int conv_dims(const ot_kernel *k, int which, int64_t *dims)
{
    const ot__conv_geom *g = &k->conv;
    enum { X, S, W } role[3][3] = {{X, W, S}, {S, W, X}, {X, S, W}};
    int r = role[k->conv_op == OT_OP_CONV ? 0 : k->conv_op == OT_OP_CONV_TRANSPOSE ? 1 : 2]
                [which < 0 ? 2 : which];
    int nd = k->shape.ndim;
    dims[0] = r == W ? g->groups * g->sc : g->n;
    dims[1] = r == X ? g->groups * g->xc : r == S ? g->groups * g->sc : g->xc;
    for (int d = 2; d < nd; d++)
        dims[d] = r == X ? g->xp[d - 2] : r == S ? g->sp[d - 2] : g->k[d - 2];
    return nd;
}

/* The shape of a POOL kernel's view `which` (-1: the store): input-shaped
 * (internal.h's X) or output-shaped (Y) by the op's role for it. */
static int pool_dims(const ot_kernel *k, int which, int64_t *dims)
{
    const ot__pool_geom *g = &k->pool;
    int op = g->op;
    bool back = op == OT_OP_MAX_POOL_GRAD || op == OT_OP_AVG_POOL_GRAD;
    bool x = which < 0 ? back : which == 0 ? op != OT_OP_AVG_POOL_GRAD : op == OT_OP_MAX_POOL_TAKE;
    int nd = k->shape.ndim;
    dims[0] = g->n;
    dims[1] = g->c;
    for (int d = 2; d < nd; d++) dims[d] = x ? g->in[d - 2] : g->out[d - 2];
    return nd;
}

/* The element range view `which` of kernel k touches. A DOT's views are
 * rows x cols x batch (A: m x k, B: k x n, C: m x n); RAND and ONEHOT write
 * their shape contiguously; CONV's are its operands' shapes. */
static bool view_reach(const ot_kernel *k, int which, int64_t *lo, int64_t *hi)
{
    const ot_view *v = which >= 0 ? &k->loads[which] : which == -1 ? &k->store
                     : &k->xstores[-2 - which].view;
    if (k->kind == OT_KER_DOT) {
        int64_t dims[3] = {which == 1 ? k->k : k->m, which == 0 ? k->k : k->n, k->batch};
        return reach(v, dims, 3, lo, hi);
    }
    if (k->kind == OT_KER_CONV && which >= -1) {
        int64_t dims[OT_MAX_DIMS];
        int nd = conv_dims(k, which, dims);
        return reach(v, dims, nd, lo, hi);
    }
    if (k->kind == OT_KER_POOL && which >= -1) {
        int64_t dims[OT_MAX_DIMS];
        int nd = pool_dims(k, which, dims);
        return reach(v, dims, nd, lo, hi);
    }
    if (k->kind == OT_KER_INDEX && which >= -1) {   /* each view its operand's shape */
        const ot__index_geom *g = &k->index;
        const ot_shape *s = which == -1 ? &g->out : which == 0 ? &g->a : &g->b;
        return reach(v, s->dims, s->ndim, lo, hi);
    }
    if ((k->kind == OT_KER_STRUCT || k->kind == OT_KER_ATTN) && which >= 0)   /* each load its own shape */
        return reach(v, k->load_shapes[which].dims, k->load_shapes[which].ndim, lo, hi);
    if (which == -1 && (k->kind == OT_KER_RAND || k->kind == OT_KER_ONEHOT)) {
        int64_t n = ot__numel(&k->shape);
        *lo = 0;
        *hi = n - 1;
        return n > 0;
    }
    return reach(v, k->dims, k->ndim, lo, hi);
}

/* Per temporary: the bytes it spans from its offset, the steps of its life
 * and, in a row-blocked plan, its bytes per plan row. */
typedef struct life { int64_t lo, hi, row; int born, dies; } life;

/* The step of each kernel: its own, but a segment of several blocks is one
 * step (a segment of one block runs its kernels one after the other). */
static void kernel_steps(const ot_plan *p, int *step)
{
    for (int i = 0; i < p->nkernels; i++) step[i] = i;
    for (int s = 0; s < p->nseg; s++)
        for (int i = p->segs[s].first; i < p->segs[s].first + p->segs[s].count; i++)
            if (p->segs[s].row_block < p->segs[s].rows || p->kernels[p->segs[s].first].kind == OT_KER_CONV)
                step[i] = p->segs[s].first;
}

/* A view's bytes from one plan row to the next (row-blocked plans). */
static int64_t row_bytes(const ot_plan *p, const ot_kernel *k, const ot_view *v)
{
    int64_t rows = k->kind == OT_KER_DOT ? k->m : k->ndim ? k->dims[0] : 1;
    return v->strides[0] * (rows / p->rows) * (int64_t)ot_dtype_size((ot_dtype)v->dtype);
}

static void temp_lives(const ot_plan *p, const int *step, life *lf)
{
    for (int t = 0; t < p->ntemps; t++) lf[t] = (life){INT64_MAX, INT64_MIN, 0, -1, -1};
    for (int i = 0; i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        EACH_VIEW(k, v, which) {
            int64_t lo, hi;
            if (v->space != OT_SPACE_TEMP || !view_reach(k, which, &lo, &hi)) continue;
            life *l = &lf[v->index];
            int64_t es = (int64_t)ot_dtype_size((ot_dtype)v->dtype);
            l->lo = lo * es < l->lo ? lo * es : l->lo;
            l->hi = (hi + 1) * es > l->hi ? (hi + 1) * es : l->hi;
            if (l->born < 0) {
                l->born = step[i];
                l->row = p->row_block > 0 ? row_bytes(p, k, v) : 0;
            }
            l->dies = step[i];
        }
    }
    /* A segment's dot writes one block of rows at a time into its temp. */
    for (int s = 0; s < p->nseg; s++) {
        const ot_segment *sg = &p->segs[s];
        if (sg->block_temp < 0) continue;
        const ot_view *st = &p->kernels[sg->first].store;
        lf[sg->block_temp].lo = 0;
        lf[sg->block_temp].hi = sg->row_block * st->strides[0] * (int64_t)ot_dtype_size((ot_dtype)st->dtype);
    }
}

/* A temp_local temporary's views reach no further than its rows, laid one
 * after the other (so a block of them is [0, row_block * row) from the
 * block's first row); its span is then that block in the R_LOCAL region. */
static int local_spans(const ot_plan *p, life *lf)
{
    for (int t = 0; t < p->ntemps; t++) {
        if (!ot__temp_local(p, t) || lf[t].born < 0) continue;
        if (p->row_block <= 0 || p->row_serial || lf[t].row <= 0 || lf[t].lo < 0 ||
            lf[t].hi > p->rows * lf[t].row)
            return fail("temporary %d holds one row block, but its views reach bytes %lld-%lld "
                        "of %lld rows of %lld bytes", t, (long long)lf[t].lo, (long long)lf[t].hi,
                        (long long)p->rows, (long long)lf[t].row);
        lf[t].lo = 0;
        lf[t].hi = p->row_block * lf[t].row;
    }
    return 0;
}

static int64_t first_byte(const ot_plan *p, const life *lf, int t) { return (int64_t)p->temp_offset[t] + lf[t].lo; }
static int64_t end_byte(const ot_plan *p, const life *lf, int t) { return (int64_t)p->temp_offset[t] + lf[t].hi; }

static int meets(const ot_plan *p, const life *lf, int t, int u)
{
    if (first_byte(p, lf, t) >= end_byte(p, lf, u) || first_byte(p, lf, u) >= end_byte(p, lf, t))
        return 0;
    return fail("temporaries %d (kernels %d-%d) and %d (kernels %d-%d) are alive together in the "
                "same arena bytes", u, lf[u].born, lf[u].dies, t, lf[t].born, lf[t].dies);
}

/* Temporaries alive at one step have disjoint bytes: a sweep over the
 * steps in which each temporary, when born, is checked against those alive
 * then. by_birth lists the temporaries in order of birth. */
static int check_lives(const ot_plan *p, const life *lf, const int *by_birth, int n, int *live)
{
    int nlive = 0, rc = 0;
    for (int j = 0; j < n && !rc; j++) {
        int t = by_birth[j], kept = 0;
        for (int i = 0; i < nlive; i++)
            if (lf[live[i]].dies >= lf[t].born) live[kept++] = live[i];
        nlive = kept;
        for (int i = 0; i < nlive && !rc; i++) rc = meets(p, lf, t, live[i]);
        live[nlive++] = t;
    }
    return rc;
}

/* A row-blocked plan of several blocks runs them on several threads at
 * once, so two temporaries may share bytes only when a block of one is the
 * same bytes as that block of the other: same span and bytes per row. */
typedef struct span { int64_t first, end, row; } span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->first != y->first) return (x->first > y->first) - (x->first < y->first);
    if (x->end != y->end) return (x->end > y->end) - (x->end < y->end);
    return (x->row > y->row) - (x->row < y->row);
}

static int check_row_blocks(const span *sp, int n)
{
    int64_t before = INT64_MIN;   /* the furthest end of the spans sorted before this one's */
    for (int j = 0; j < n; j++) {
        bool same = j > 0 && cmp_span(&sp[j - 1], &sp[j]) == 0;
        if (!same && sp[j].first < before)
            return fail("row-blocked plan: temporaries share arena bytes with different row layouts");
        if (j + 1 < n && cmp_span(&sp[j], &sp[j + 1]) == 0) continue;
        before = sp[j].end > before ? sp[j].end : before;
    }
    return 0;
}

/* The temporaries of group g (1: temp_local, in each thread's R_LOCAL
 * region; 0: in the arena), by_birth in birth order: within the memory,
 * and those alive together disjoint. */
static int check_group(const ot_plan *p, const life *lf, const int *by_birth, int n, int g,
                       int *idx, span *sp)
{
    int m = 0, rc = 0;
    size_t bytes = g ? p->local_bytes : p->arena_bytes;
    for (int j = 0; j < n && !rc; j++) {
        int t = by_birth[j];
        if (ot__temp_local(p, t) != g) continue;
        idx[m] = t;
        sp[m++] = (span){first_byte(p, lf, t), end_byte(p, lf, t), lf[t].row};
        if (first_byte(p, lf, t) < 0 || end_byte(p, lf, t) > (int64_t)bytes)
            rc = fail("temporary %d spans bytes %lld-%lld of %s of %zu", t,
                      (long long)first_byte(p, lf, t), (long long)end_byte(p, lf, t),
                      g ? "a thread's row block" : "an arena", bytes);
    }
    if (!rc) rc = check_lives(p, lf, idx, m, idx + p->ntemps);
    /* Threads run blocks of the arena's temporaries at once. */
    if (!rc && !g && p->row_block > 0 && p->row_block < p->rows) {
        qsort(sp, (size_t)m, sizeof *sp, cmp_span);
        rc = check_row_blocks(sp, m);
    }
    return rc;
}

static int check_arena_spans(const ot_plan *p, life *lf, int *idx, span *sp)
{
    int n = 0, rc = local_spans(p, lf);
    /* Counting sort by birth step (steps are kernel indices). */
    int *count = ot__calloc((size_t)p->nkernels + 1, sizeof *count);
    int *by_birth = ot__malloc(sizeof *by_birth * (size_t)(p->ntemps ? p->ntemps : 1));
    if (!count || !by_birth) rc = OT_ENOMEM;
    for (int t = 0; !rc && t < p->ntemps; t++)
        if (lf[t].born >= 0) count[lf[t].born + 1]++;   /* unborn: kept in an output, or unused */
    for (int s = 0; !rc && s < p->nkernels; s++) count[s + 1] += count[s];
    for (int t = 0; !rc && t < p->ntemps; t++) {
        if (lf[t].born < 0) continue;
        by_birth[count[lf[t].born]++] = t;
        n++;
    }
    for (int g = 0; g < 2 && !rc; g++) rc = check_group(p, lf, by_birth, n, g, idx, sp);
    free(count);
    free(by_birth);
    return rc;
}

static int check_arena(const ot_plan *p)
{
    size_t nt = (size_t)(p->ntemps ? p->ntemps : 1);
    life *lf = ot__malloc(sizeof *lf * nt);
    int *step = ot__malloc(sizeof *step * (size_t)(p->nkernels ? p->nkernels : 1));
    int *idx = ot__malloc(sizeof *idx * 2 * nt);
    span *sp = ot__malloc(sizeof *sp * nt);
    int rc = lf && step && idx && sp ? 0 : OT_ENOMEM;
    if (!rc) {
        kernel_steps(p, step);
        temp_lives(p, step, lf);
        rc = check_arena_spans(p, lf, idx, sp);
    }
    free(lf);
    free(step);
    free(idx);
    free(sp);
    return rc;
}

int ot__verify_plan(const ot_plan *p, int stage)
{
    for (int i = 0; i < p->nkernels; i++) {
        int rc = check_kernel(p, &p->kernels[i], i);
        if (rc) return rc;
    }
    int rc = check_temp_order(p);
    if (!rc) rc = check_blas_outputs(p);
    if (!rc && stage >= OT_VERIFY_SCHEDULED) rc = check_segments(p);
    if (!rc && stage >= OT_VERIFY_LAID_OUT) rc = check_arena(p);
    return rc;
}

#endif /* OT_VERIFY_PLANS */
