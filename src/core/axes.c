/*
 * axes.c - named axes (after ngraph's make_axis): the interned name sets
 * nodes point at, naming tensors, the names of a built node's result,
 * alignment of two named operands by name, and the builders that take
 * names: reductions and softmax along named axes, dot over named axes.
 *
 * A name set is interned once for the life of the process (an append-only
 * table under a mutex, like the op registry), so a node carries one
 * pointer, equal sets compare as pointers, and an unnamed node (NULL) costs
 * nothing on the build path.
 */
#include "internal.h"

#include <ctype.h>
#include <pthread.h>

/* ---- parsing and interning ------------------------------------------------- */

typedef struct names {
    int n;
    char s[OT_MAX_DIMS][OT__AXIS_NAME_MAX];
} names;

static bool valid_name(const char *p, size_t len)
{
    if (len == 0 || len >= OT__AXIS_NAME_MAX || isdigit((unsigned char)p[0])) return false;
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)p[i]) || p[i] == '_')) return false;
    return true;
}

/* "N, C,H" into out: names checked, none repeated. A message for fn into
 * the error slot (ot__err: the first error wins) and its code on failure. */
static int parse(const char *fn, const char *file, int line, const char *text, names *out)
{
    out->n = 0;
    for (const char *p = text;;) {
        while (*p == ' ') p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ') e++;
        size_t len = (size_t)(e - p);
        const char *q = e;
        while (*q == ' ') q++;
        if ((*q && *q != ',') || !valid_name(p, len))
            return ot__err(OT_EINVAL, file, line, fn, "bad axis name '%.*s' in '%s' (names are "
                           "[A-Za-z_][A-Za-z0-9_]*, at most %d chars, comma-separated)",
                           (int)(q - p + (*q && *q != ',')), p, text, OT__AXIS_NAME_MAX - 1);
        if (out->n == OT_MAX_DIMS)
            return ot__err(OT_EINVAL, file, line, fn, "more than %d axis names in '%s'",
                           OT_MAX_DIMS, text);
        for (int i = 0; i < out->n; i++)
            if (strlen(out->s[i]) == len && !memcmp(out->s[i], p, len))
                return ot__err(OT_EINVAL, file, line, fn, "axis '%.*s' is named twice in '%s'",
                               (int)len, p, text);
        memcpy(out->s[out->n], p, len);
        out->s[out->n++][len] = '\0';
        if (!*q) return 0;
        p = q + 1;
    }
}

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static ot__axes **interned;   /* every set ever made; never freed */
static size_t ninterned, cap_interned;

/* The one interned set of these names; NULL for none, or with OT_ENOMEM
 * recorded (*failed set). */
static const ot__axes *intern(const names *nm, bool *failed)
{
    if (nm->n == 0) return NULL;
    ot__axes key;
    ot__clear(&key, sizeof key);
    key.ndim = nm->n;
    size_t at = 0;
    for (int i = 0; i < nm->n; i++) {
        size_t len = strlen(nm->s[i]);
        if (i) key.text[at++] = ',';
        key.off[i] = (uint8_t)at;
        key.len[i] = (uint8_t)len;
        memcpy(key.text + at, nm->s[i], len);
        at += len;
    }
    pthread_mutex_lock(&intern_lock);
    ot__axes *r = NULL;
    for (size_t i = 0; i < ninterned && !r; i++)
        if (!strcmp(interned[i]->text, key.text)) r = interned[i];
    if (!r && ninterned == cap_interned) {
        size_t cap = cap_interned ? 2 * cap_interned : 16;
        ot__axes **grown = ot__realloc(interned, cap * sizeof *grown);
        if (grown) interned = grown, cap_interned = cap;
    }
    if (!r && ninterned < cap_interned && (r = ot__malloc(sizeof *r))) {
        *r = key;
        interned[ninterned++] = r;
    }
    pthread_mutex_unlock(&intern_lock);
    if (!r) {
        *failed = true;
        ot__err(OT_ENOMEM, NULL, 0, "axes", "out of memory interning axis names (%s)", key.text);
    }
    return r;
}

/* Dim i's name into s (OT__AXIS_NAME_MAX chars), which it returns. */
static char *name_of(const ot__axes *ax, int i, char *s)
{
    memcpy(s, ax->text + ax->off[i], ax->len[i]);
    s[ax->len[i]] = '\0';
    return s;
}

static int find(const ot__axes *ax, const char *s)
{
    size_t len = strlen(s);
    for (int i = 0; ax && i < ax->ndim; i++)
        if (ax->len[i] == len && !memcmp(ax->text + ax->off[i], s, len)) return i;
    return -1;
}

static void put(names *nm, const ot__axes *ax, int i)
{
    name_of(ax, i, nm->s[nm->n++]);
}

/* The set of the names picked (dim idx[i] of src[i]); none (NULL) when a
 * source is unnamed or two names repeat, as in dot(x(N,C), w(C,N)). */
static int pick(int n, const ot__axes *const src[], const int idx[], const ot__axes **out)
{
    names nm = {0};
    *out = NULL;
    for (int i = 0; i < n; i++) {
        if (!src[i]) return 0;
        put(&nm, src[i], idx[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(nm.s[j], nm.s[i])) return 0;
    }
    bool failed = false;
    *out = intern(&nm, &failed);
    return failed ? OT_ENOMEM : 0;
}

/* ---- naming tensors -------------------------------------------------------- */

int (ot_tensor_set_axes)(ot_tensor *t, const char *axes)
{
    if (!t) return ot__err_null("tensor_set_axes", "tensor");
    ot_clear_error();
    if (!axes || !*axes) {
        t->leaf.axes = NULL;
        return 0;
    }
    names nm;
    int rc = parse("tensor_set_axes", NULL, 0, axes, &nm);
    if (rc) return rc;
    char s[OT__SHAPE_STRLEN];
    if (nm.n != t->leaf.shape.ndim)
        return ot__err_set(OT_EINVAL, NULL, 0, "tensor_set_axes", "'%s' names %d axes, the "
                           "tensor has %d (shape %s)", axes, nm.n, t->leaf.shape.ndim,
                           ot__shape_str(&t->leaf.shape, s));
    bool failed = false;
    const ot__axes *ax = intern(&nm, &failed);
    if (failed) return OT_ENOMEM;
    t->leaf.axes = ax;
    return 0;
}

ot_tensor *ot__axes_view(ot_tensor *v, const ot_tensor *t, const int *src)
{
    const ot__axes *ax = t->leaf.axes, *from[OT_MAX_DIMS];
    if (!v || !ax) return v;
    for (int i = 0; i < v->leaf.shape.ndim; i++) from[i] = ax;
    if (!pick(v->leaf.shape.ndim, from, src, &v->leaf.axes)) return v;
    ot_tensor_free(v);
    return NULL;
}

const char *ot_node_axes(const ot_node *n) { return n && n->axes ? n->axes->text : NULL; }
const char *ot_tensor_axes(const ot_tensor *t) { return t ? ot_node_axes(&t->leaf) : NULL; }

/* "operand (shape (2,3)) has no axis names" and the like, for fn. */
static int no_names(const char *fn, const char *file, int line, const char *what, const ot_node *n)
{
    char s[OT__SHAPE_STRLEN];
    return ot__err(OT_EINVAL, file, line, fn, "%s (shape %s) has no axis names; name a tensor's "
                   "with ot_tensor_set_axes", what, ot__shape_str(&n->shape, s));
}

static int unknown(const char *fn, const char *file, int line, const char *name,
                   const ot__axes *ax)
{
    return ot__err(OT_EINVAL, file, line, fn, "no axis '%s' in (%s)", name, ax->text);
}

int ot_axis_of_node(const ot_node *n, const char *name)
{
    if (!n || !name) return ot__err_null("axis_of", n ? "name" : "node");
    ot_clear_error();
    if (!n->axes) return no_names("axis_of", NULL, 0, "the node", n);
    int i = find(n->axes, name);
    return i >= 0 ? i : unknown("axis_of", NULL, 0, name, n->axes);
}

/* ---- the names of a built node -------------------------------------------- */

static int infer_reduce(ot_node *n)
{
    const ot__axes *ax = n->a->axes;
    int axis = n->args.axis, idx[OT_MAX_DIMS], k = 0;
    const ot__axes *src[OT_MAX_DIMS];
    if (n->args.keepdims || !ax) {
        n->axes = ax;
        return 0;
    }
    for (int i = 0; i < ax->ndim; i++)
        if (axis != OT_AXIS_ALL && i != axis) src[k] = ax, idx[k++] = i;
    return pick(k, src, idx, &n->axes);
}

/* A layout op's names: a transpose permutes them (perm), a slice keeps
 * those of the dims it does not index away (perm holds each operand dim's
 * step there, 0 for an index: taken for names, a step of -1 or 2 read
 * outside the names and a step of 1 repeated one), a reshape keeps them
 * only when it changes no dim. */
static int infer_layout(ot_node *n)
{
    const ot__axes *ax = n->a->axes, *src[OT_MAX_DIMS];
    int idx[OT_MAX_DIMS], k = 0;
    if (!ax) {
        n->axes = NULL;
        return 0;
    }
    if (n->op == OT_OP_RESHAPE) {
        n->axes = ot__shape_eq(&n->shape, &n->a->shape) ? ax : NULL;
        return 0;
    }
    for (int d = 0; d < n->a->shape.ndim; d++) {
        if (n->op == OT_OP_SLICE && !n->args.perm[d]) continue;
        int from = n->op == OT_OP_SLICE ? d : n->args.perm[k];
        if (from < 0 || from >= ax->ndim) {   /* never for a node built right: unnamed */
            n->axes = NULL;
            return 0;
        }
        src[k] = ax, idx[k++] = from;
    }
    return pick(k, src, idx, &n->axes);
}

static int infer_dot(ot_node *n)
{
    const ot_node *a = n->a, *b = n->b;
    const ot__axes *src[3];
    int idx[3], k = 0;
    if (n->op == OT_OP_BATCHED_DOT) {
        char s[OT__AXIS_NAME_MAX];
        bool clash = a->axes && b->axes && find(b->axes, name_of(a->axes, 0, s)) != 0;
        src[k] = clash ? NULL : a->axes ? a->axes : b->axes, idx[k++] = 0;
        src[k] = a->axes, idx[k++] = 1;
        src[k] = b->axes, idx[k++] = 2;
    } else {
        if (a->shape.ndim == 2) src[k] = a->axes, idx[k++] = 0;
        if (b->shape.ndim == 2) src[k] = b->axes, idx[k++] = 1;
    }
    return pick(k, src, idx, &n->axes);
}

int ot__axes_infer(ot_node *n)
{
    const ot_node *a = n->a, *b = n->b;
    int nd = n->shape.ndim, rc = 0;
    switch (ot_op_kind((ot_op)n->op)) {
    case OT_KIND_REDUCE: rc = infer_reduce(n); break;
    case OT_KIND_DOT: rc = infer_dot(n); break;
    case OT_KIND_SHAPE: rc = infer_layout(n); break;
    default:
        if (n->op == OT_OP_ONEHOT || n->op == OT_OP_RAND) n->axes = NULL;
        else if (a && a->axes && a->axes->ndim == nd) n->axes = a->axes;
        else if (b && b->axes && b->axes->ndim == nd) n->axes = b->axes;
        else n->axes = NULL;
    }
    return rc;
}

/* ---- alignment by name ----------------------------------------------------- */

/* A view v made for a tree, named (NULL: unnamed) unless the view has a
 * name already (names.c names views of a named tensor, "w.T.reshape(..)"),
 * and adopted by the current pool; NULL with OT_ENOMEM, v freed. Not
 * ot_tensor_set_name, which clears the error slot: a builder keeps the
 * expression's first error. */
static ot_node *adopt_view(ot_tensor *v, const char *name)
{
    if (!v) return NULL;
    if (name && !v->name) {
        size_t n = strlen(name) + 1;
        if (!(v->name = ot__malloc(n))) {
            ot_tensor_free(v);
            ot__err(OT_ENOMEM, NULL, 0, "axes", "cannot allocate %zu bytes for a name", n);
            return NULL;
        }
        memcpy(v->name, name, n);
    }
    return ot__pool_adopt(&v->leaf);
}

/* ones of shape, read-only and one element of memory: x * ones inserts
 * leading size-1 dims into an expression, bit for bit. */
static ot_node *ones_view(ot_backend *be, ot_shape shape, ot_dtype dt)
{
    ot_tensor *one = (ot_ones)(be, OT_SHAPE(), dt);
    ot_tensor *v = one ? (ot_broadcast_to)(one, shape) : NULL;
    ot_tensor_free(one);
    return adopt_view(v, "ones");
}

static ot_node *transpose_node(ot_node *x, const int *perm, const char *file, int line)
{
    ot_args t = {.axis = OT_AXIS_ALL};
    memcpy(t.perm, perm, sizeof t.perm);
    return ot_build_at(OT_OP_TRANSPOSE, x, NULL, &t, file, line);
}

/* x laid out as the names of R from its first one on: its dims in R's
 * order, size 1 for names of R it lacks after its first (those before are
 * NumPy's leading dims). A tensor by views, an expression by a transpose,
 * after a product with ones for the size-1 dims it must gain. */
static ot_node *bring(ot_node *x, const ot__axes *R, const char *file, int line)
{
    const ot__axes *X = x->axes;
    int where[OT_MAX_DIMS], first = R->ndim;   /* where[j]: x's dim named R's j */
    for (int j = 0; j < R->ndim; j++) where[j] = -1;
    for (int i = 0; i < X->ndim; i++) {
        char s[OT__AXIS_NAME_MAX];
        int j = find(R, name_of(X, i, s));
        where[j] = i;
        if (j < first) first = j;
    }
    int perm[OT_MAX_DIMS] = {0}, k = 0, missing = 0;
    bool moved = false;
    ot_shape target = {.ndim = R->ndim - first};
    for (int j = first; j < R->ndim; j++) {
        if (where[j] < 0) {
            missing++;
            target.dims[j - first] = 1;
            continue;
        }
        moved |= where[j] != k;
        target.dims[j - first] = x->shape.dims[where[j]];
        perm[k++] = where[j];
    }
    if (!moved && !missing) return x;
    /* A tensor by views, unless it is a program's placeholder: a view of
     * one cannot follow it to another size, a transpose node can. */
    if (x->kind == OT_NODE_LEAF && !ot__leaf_tensor(x)->buf->placeholder_of) {
        ot_tensor *t = ot__leaf_tensor(x);
        ot_tensor *v = (ot_transpose)(t, perm), *r = v && missing ? ot_reshape(v, target) : v;
        if (r != v) ot_tensor_free(v);
        return adopt_view(r, t->name);
    }
    if (!missing) return transpose_node(x, perm, file, line);
    /* x * ones(1, ..., 1, x's dims): the size-1 dims lead, then move */
    ot_shape s = {.ndim = missing + X->ndim};
    for (int i = 0; i < s.ndim; i++) s.dims[i] = i < missing ? 1 : x->shape.dims[i - missing];
    ot_node *y = ot_build_at(OT_OP_MUL, x, ones_view(x->be, s, (ot_dtype)x->dtype), NULL, file,
                             line);
    int full[OT_MAX_DIMS] = {0}, ones = 0;
    for (int j = first; j < R->ndim; j++)
        full[j - first] = where[j] < 0 ? ones++ : missing + where[j];
    return y ? transpose_node(y, full, file, line) : NULL;
}

int ot__axes_align(const char *op, const char *file, int line, ot_node **a, ot_node **b,
                   const ot__axes **out)
{
    const ot__axes *A = (*a)->axes, *B = (*b)->axes;
    names r = {0};
    for (int i = 0; i < A->ndim; i++) put(&r, A, i);
    for (int j = 0; j < B->ndim; j++) {
        char s[OT__AXIS_NAME_MAX];
        int i = find(A, name_of(B, j, s));
        if (i < 0 && r.n == OT_MAX_DIMS)
            return ot__err(OT_EINVAL, file, line, op, "aligning (%s) with (%s) by name gives more "
                           "than %d axes", A->text, B->text, OT_MAX_DIMS);
        if (i < 0) {
            put(&r, B, j);
            continue;
        }
        int64_t la = (*a)->shape.dims[i], lb = (*b)->shape.dims[j];
        if (la != lb && la != 1 && lb != 1)
            return ot__err(OT_ESHAPE, file, line, op, "axis '%s' has length %lld in operand 1 "
                           "(%s) and %lld in operand 2 (%s)", s, (long long)la, A->text,
                           (long long)lb, B->text);
    }
    bool failed = false;
    const ot__axes *R = intern(&r, &failed);
    if (failed) return OT_ENOMEM;
    ot_node *na = bring(*a, R, file, line), *nb = na ? bring(*b, R, file, line) : NULL;
    if (!nb) return ot_errcode() ? ot_errcode() : OT_ENOMEM;
    *a = na, *b = nb, *out = R;
    return 0;
}

int ot__axes_fit(const char *fn, const char *file, int line, const ot_tensor *out,
                 ot_node **tree)
{
    const ot__axes *O = out->leaf.axes, *T = (*tree)->axes;
    if (!O || !T || O == T) return 0;
    for (int j = 0; j < T->ndim; j++) {
        char s[OT__AXIS_NAME_MAX];
        int i = find(O, name_of(T, j, s));
        if (i < 0)
            return ot__err(OT_EINVAL, file, line, fn, "the value's axis '%s' (of (%s)) is not an "
                           "axis of the output (%s)", s, T->text, O->text);
        int64_t lt = (*tree)->shape.dims[j], lo = out->leaf.shape.dims[i];
        if (lt != lo && lt != 1)
            return ot__err(OT_ESHAPE, file, line, fn, "axis '%s' has length %lld in the value (%s) "
                           "and %lld in the output (%s)", s, (long long)lt, T->text,
                           (long long)lo, O->text);
    }
    ot_node *x = bring(*tree, O, file, line);
    if (!x) return ot_errcode() ? ot_errcode() : OT_ENOMEM;
    *tree = x;
    return 0;
}

/* ---- reductions and softmax by name ---------------------------------------- */

/* The ops that take an axis; those that may take several at once (one
 * reduction per axis: the same values as NumPy's tuple of axes, up to the
 * order of the additions). */
static bool takes_axis(ot_op op, bool *several)
{
    *several = op == OT_OP_SUM || op == OT_OP_MEAN || op == OT_OP_MAX || op == OT_OP_MIN;
    return *several || op == OT_OP_ARGMAX || op == OT_OP_ARGMIN || op == OT_OP_VAR ||
           op == OT_OP_STD || op == OT_OP_SOFTMAX || op == OT_OP_LOGSOFTMAX ||
           op == OT_OP_CROSS_ENTROPY || op == OT_OP_SQUARED_L2;
}

/* The positions of the names of list in x, highest first. */
static int resolve(const char *fn, const char *file, int line, const ot_node *x, const char *list,
                   const char *what, int idx[], int *n)
{
    if (!x->axes) return no_names(fn, file, line, what, x);
    names nm;
    int rc = parse(fn, file, line, list, &nm);
    for (int i = 0; i < nm.n && !rc; i++) {
        int at = find(x->axes, nm.s[i]), j = i;
        if (at < 0) return unknown(fn, file, line, nm.s[i], x->axes);
        for (; j > 0 && idx[j - 1] < at; j--) idx[j] = idx[j - 1];
        idx[j] = at;
    }
    *n = nm.n;
    return rc;
}

ot_node *ot_build_axes_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                          const char *axes, const char *file, int line)
{
    const char *fn = ot_op_name(op) ? ot_op_name(op) : "build";
    bool several;
    int idx[OT_MAX_DIMS], n = 0;
    if (!takes_axis(op, &several)) {
        ot__err(OT_EINVAL, file, line, fn, "takes no axes (given '%s')", axes ? axes : "NULL");
        return NULL;
    }
    if (!a || !axes) {
        ot__err(OT_ENULL, file, line, fn, a ? "axes is NULL" : "operand 1 is NULL");
        return NULL;
    }
    if (args && args->axis != OT_AXIS_ALL) {
        ot__err(OT_EINVAL, file, line, fn, "give .axis or .axes, not both (axis %d, axes '%s')",
                args->axis, axes);
        return NULL;
    }
    if (resolve(fn, file, line, a, axes, "the operand", idx, &n)) return NULL;
    if (n > 1 && !several) {
        ot__err(OT_EUNSUPPORTED, file, line, fn, "takes one axis, not several ('%s' of (%s))",
                axes, a->axes->text);
        return NULL;
    }
    ot_args r = args ? *args : (ot_args){0};
    r.spec_ = NULL;
    ot_node *x = a;
    for (int i = 0; i < n && x; i++) {
        r.axis = idx[i];
        x = ot_build_at(op, x, b, &r, file, line);
    }
    return x;
}

/* ---- dot over named axes --------------------------------------------------- */

/* One operand of a named dot: its free names and the contracted ones, in
 * the order the 2-D product reads them. */
typedef struct side {
    ot_node *x;
    int free[OT_MAX_DIMS], nfree;   /* positions in x */
    int64_t pfree, pk;              /* products of the free and contracted dims */
} side;

static void split(side *s, const int k[], int nk)
{
    s->nfree = 0;
    s->pfree = s->pk = 1;
    for (int i = 0; i < s->x->shape.ndim; i++) {
        bool c = false;
        for (int j = 0; j < nk; j++) c |= k[j] == i;
        if (c) s->pk *= s->x->shape.dims[i];
        else s->free[s->nfree++] = i, s->pfree *= s->x->shape.dims[i];
    }
}

/* s's operand as a matrix (free, contracted) when kfirst is false, else
 * (contracted, free), a free side of no dims giving a vector. k: the
 * contracted dims, in the order both sides use. */
static ot_node *as_matrix(const char *file, int line, const side *s, const int k[], int nk,
                          bool kfirst)
{
    int perm[OT_MAX_DIMS] = {0}, p = 0;
    for (int i = 0; i < s->nfree && !kfirst; i++) perm[p++] = s->free[i];
    for (int i = 0; i < nk; i++) perm[p++] = k[i];
    for (int i = 0; i < s->nfree && kfirst; i++) perm[p++] = s->free[i];
    bool moved = false;
    for (int i = 0; i < p; i++) moved |= perm[i] != i;
    ot_shape m = s->nfree ? (kfirst ? OT_SHAPE(s->pk, s->pfree) : OT_SHAPE(s->pfree, s->pk))
                          : OT_SHAPE(s->pk);
    bool reshaped = m.ndim != s->x->shape.ndim;
    if (s->x->kind == OT_NODE_LEAF) {
        /* a view when the strides allow one; else the nodes below */
        ot_tensor *t = ot__leaf_tensor(s->x);
        ot_tensor *v = (ot_transpose)(t, perm), *r = v && reshaped ? ot_reshape(v, m) : v;
        if (r != v) ot_tensor_free(v);
        if (r) return adopt_view(r, t->name);
        if (ot_errcode() != OT_EINVAL) return NULL;
        ot_clear_error();
    }
    ot_node *y = moved ? transpose_node(s->x, perm, file, line) : s->x;
    return y && reshaped ? ot_reshape_node_at(y, m, file, line) : y;
}

/* The checks of a named dot: the names of list (NULL: every shared name)
 * in both, of one length, and no shared name left free. ka/kb get the
 * positions of the contracted axes in a and b, in one order: a tensor's
 * memory order where one is a tensor, so that its view reshapes. */
static int contracted(const char *fn, const char *file, int line, const ot_node *a,
                      const ot_node *b, const char *list, int ka[], int kb[], int *nk)
{
    names nm = {0};
    if (list) {
        int rc = parse(fn, file, line, list, &nm);
        if (rc) return rc;
    } else {
        for (int i = 0; i < a->axes->ndim; i++) {
            put(&nm, a->axes, i);
            if (find(b->axes, nm.s[nm.n - 1]) < 0) nm.n--;
        }
    }
    if (nm.n == 0)
        return ot__err(OT_EINVAL, file, line, fn, "no axes to contract: (%s) and (%s) share "
                       "none", a->axes->text, b->axes->text);
    for (int i = 0; i < nm.n; i++) {
        ka[i] = find(a->axes, nm.s[i]), kb[i] = find(b->axes, nm.s[i]);
        if (ka[i] < 0 || kb[i] < 0)
            return ot__err(OT_EINVAL, file, line, fn, "axis '%s' is not in operand %d (%s) "
                           "(operand %d has (%s))", nm.s[i], ka[i] < 0 ? 1 : 2,
                           (ka[i] < 0 ? a : b)->axes->text, ka[i] < 0 ? 2 : 1,
                           (ka[i] < 0 ? b : a)->axes->text);
        if (a->shape.dims[ka[i]] != b->shape.dims[kb[i]])
            return ot__err(OT_ESHAPE, file, line, fn, "axis '%s' has length %lld in operand 1 "
                           "(%s) and %lld in operand 2 (%s)", nm.s[i],
                           (long long)a->shape.dims[ka[i]], a->axes->text,
                           (long long)b->shape.dims[kb[i]], b->axes->text);
    }
    for (int i = 0; i < a->axes->ndim; i++) {
        char one[OT__AXIS_NAME_MAX];
        name_of(a->axes, i, one);
        bool listed = false;
        for (int j = 0; j < nm.n; j++) listed |= !strcmp(nm.s[j], one);
        if (!listed && find(b->axes, one) >= 0)
            return ot__err(OT_EINVAL, file, line, fn, "axis '%s' is in both operands, (%s) and "
                           "(%s), but not contracted: name it in the axes, or rename one",
                           one, a->axes->text, b->axes->text);
    }
    /* Memory order of the tensor operand: strides from the largest down. */
    const ot_node *t = a->kind == OT_NODE_LEAF ? a : b->kind == OT_NODE_LEAF ? b : NULL;
    const int *kt = t == a ? ka : kb;
    for (int i = 1; t && i < nm.n; i++)
        for (int j = i; j > 0; j--) {
            const int64_t *st = ot__leaf_tensor(t)->strides;
            if (st[kt[j - 1]] >= st[kt[j]]) break;
            int sa = ka[j], sb = kb[j];
            ka[j] = ka[j - 1], kb[j] = kb[j - 1];
            ka[j - 1] = sa, kb[j - 1] = sb;
        }
    *nk = nm.n;
    return 0;
}

ot_node *ot_dot_axes_at(ot_node *w, ot_node *x, const char *axes, const char *file, int line)
{
    const char *fn = "dot_axes";
    if (!w || !x) {
        ot__err(OT_ENULL, file, line, fn, "operand %d is NULL", w ? 2 : 1);
        return NULL;
    }
    if (!w->axes || !x->axes) {
        no_names(fn, file, line, w->axes ? "operand 2" : "operand 1", w->axes ? x : w);
        return NULL;
    }
    int kw[OT_MAX_DIMS], kx[OT_MAX_DIMS], nk = 0;
    if (contracted(fn, file, line, w, x, axes, kw, kx, &nk)) return NULL;
    side sw = {.x = w}, sx = {.x = x};
    split(&sw, kw, nk);
    split(&sx, kx, nk);
    ot_node *mw = as_matrix(file, line, &sw, kw, nk, false);
    ot_node *mx = mw ? as_matrix(file, line, &sx, kx, nk, true) : NULL;
    ot_node *d = mx ? ot_build_at(OT_OP_DOT, mw, mx, NULL, file, line) : NULL;
    if (!d) return NULL;
    /* the result's dims: w's free axes, then x's (a (Pw, Px) product
     * reshaped back to them when either side keeps several) */
    const ot__axes *src[OT_MAX_DIMS];
    int idx[OT_MAX_DIMS], k = 0;
    ot_shape out = {0};
    for (int i = 0; i < sw.nfree; i++, k++)
        src[k] = w->axes, idx[k] = sw.free[i], out.dims[k] = w->shape.dims[sw.free[i]];
    for (int i = 0; i < sx.nfree; i++, k++)
        src[k] = x->axes, idx[k] = sx.free[i], out.dims[k] = x->shape.dims[sx.free[i]];
    out.ndim = k;
    if (k != d->shape.ndim && !(d = ot_reshape_node_at(d, out, file, line))) return NULL;
    return pick(k, src, idx, &d->axes) ? NULL : d;
}
