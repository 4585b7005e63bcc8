/*
 * node.c - op-tree nodes: the builder (shape, broadcast, dtype and axis
 * checks), composite expansion, refcounts, the per-thread pools and the
 * per-thread queue of dead nodes that makes a use of a released node an
 * error (optree.h's "Dead nodes").
 *
 * Nothing here knows about execution. Every check that can be made from
 * shapes and dtypes is made here, when the node is built, so that an error
 * points at the user's line rather than at a later ot_assign.
 */
#include "internal.h"
#include "ops.h"

#include <float.h>
#include <stdarg.h>

#include <stdio.h>

/* ---- shapes -------------------------------------------------------------- */

const char *ot__shape_str(const ot_shape *s, char *buf)
{
    size_t n = 0;
    int nd = s->ndim < 0 ? 0 : (s->ndim > OT_MAX_DIMS ? OT_MAX_DIMS : s->ndim);
    buf[n++] = '(';
    for (int i = 0; i < nd; i++)
        n += (size_t)snprintf(buf + n, OT__SHAPE_STRLEN - n, i ? ",%lld" : "%lld",
                              (long long)s->dims[i]);
    if (nd == 1) buf[n++] = ',';
    buf[n++] = ')';
    buf[n] = '\0';
    return buf;
}

/* Describes what is wrong with a shape into msg; returns the code or 0. */
static int shape_problem(const ot_shape *s, ot_dtype dtype, char *msg, size_t len)
{
    if (s->ndim < 0 || s->ndim > OT_MAX_DIMS) {
        snprintf(msg, len, "%d dimensions requested, at most %d are supported", s->ndim,
                 OT_MAX_DIMS);
        return OT_EINVAL;
    }
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] < 0) {
            snprintf(msg, len, "negative dimension %lld at axis %d", (long long)s->dims[i], i);
            return OT_EINVAL;
        }
    }
    /* Zero dims are skipped so that (0, 2^40, 2^40) still counts as too big. */
    size_t n = dtype ? ot_dtype_size(dtype) : 1;
    bool over = false;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] != 0 && (!ot__mul_size(&n, n, (size_t)s->dims[i]) || n > (size_t)PTRDIFF_MAX))
            over = true;
    }
        if (over) {
        char b[OT__SHAPE_STRLEN];
        snprintf(msg, len, "tensor too big: shape %s of %s overflows the address space",
                 ot__shape_str(s, b), dtype ? ot_dtype_name(dtype) : "elements");
        return OT_EOVERFLOW;
    }
    return 0;
}

int ot__shape_check(const ot_shape *s, ot_dtype dtype, const char *op,
                    const char *file, int line)
{
    char msg[256];
    int code = shape_problem(s, dtype, msg, sizeof msg);
    return code ? ot__err_set(code, file, line, op, "%s", msg) : 0;
}

int64_t ot__numel(const ot_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

bool ot__shape_eq(const ot_shape *a, const ot_shape *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

bool ot__broadcast(const ot_shape *a, const ot_shape *b, ot_shape *out, int *bad_dim)
{
    if (ot__shape_eq(a, b)) {   /* the common case, on every binary build */
        *out = *a;
        return true;
    }
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    ot_shape r = {.ndim = nd};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            if (bad_dim) *bad_dim = i;
            return false;
        }
        r.dims[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

/* ---- released nodes ------------------------------------------------------ */

/* A node whose last reference is dropped is not handed out again at once:
 * it joins this thread's queue of dead nodes, oldest first, marked
 * OT_NODE_DEAD with the site that released it, so that a stale pointer to
 * it (a node used after its pool was popped) reads as dead, an error naming
 * both sites, rather than as whatever node took its memory. The newest
 * OT_DEAD_NODES_KEPT stay in the queue; only older ones are reused by the
 * builders (NODE_REUSE of them at most: a tree per assignment is the common
 * pattern, and this keeps it allocation-free) or freed. Under
 * AddressSanitizer none is reused, so that ASan sees every use of a node
 * that has left the queue. */
#if defined(__SANITIZE_ADDRESS__)
#define NODE_REUSE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NODE_REUSE 0
#endif
#endif
#ifndef NODE_REUSE
#define NODE_REUSE 256
#endif
static _Thread_local ot_node *dead_oldest, *dead_newest;
static _Thread_local size_t dead_count;
static _Thread_local uint64_t released;

/* Where a release happens, recorded on the nodes it kills. */
typedef struct release_site {
    const char *fn, *file;
    int line;
} release_site;

uint64_t ot__nodes_released(void) { return released; }

static ot_node *dead_take(void)
{
    ot_node *n = dead_oldest;
    dead_oldest = n->next_dead;
    if (!dead_oldest) dead_newest = NULL;
    dead_count--;
    return n;
}

/* n has no references left: its operands, memo and annotations are gone
 * (ot_release); what a message says of it stays. */
static void node_bury(ot_node *n, const release_site *at)
{
    n->kind = OT_NODE_DEAD;
    n->a = n->b = n->tag_a = n->tag_b = NULL;
    n->annot = NULL;
    atomic_store_explicit(&n->memo, NULL, memory_order_relaxed);
    n->died_fn = at->fn;
    n->died_file = at->file;
    n->died_line = at->line;
    n->next_dead = NULL;
    if (dead_newest) dead_newest->next_dead = n;
    else dead_oldest = n;
    dead_newest = n;
    released++;
    if (++dead_count > OT_DEAD_NODES_KEPT + NODE_REUSE) free(dead_take());
}

ot_node *ot__node_alloc(void)
{
    ot_node *n;
    if (dead_count > OT_DEAD_NODES_KEPT) {   /* never under ASan: see NODE_REUSE */
        n = dead_take();
        /* The next one to reuse died OT_DEAD_NODES_KEPT releases ago, and its
         * lines have left L1 (a LIFO cache reused hot nodes): fetch them
         * while this build goes on (W8: 581 ns a call, 610 without, 588
         * with the LIFO cache; CPU time, best of 5). */
        for (size_t i = 0; dead_oldest && i < sizeof *n; i += 64)
            __builtin_prefetch((const char *)dead_oldest + i, 1);
        ot__clear(n, sizeof *n);
    } else {
        n = ot__calloc(1, sizeof *n);
    }
    if (!n) return NULL;
    atomic_init(&n->refs, 1);
    n->op = OT_OP_NONE;
    n->tag = OT_OP_NONE;
    return n;
}

const char *ot__dead_str(const char *what, const ot_node *n, char *buf)
{
    char sh[OT__SHAPE_STRLEN], built[300] = "", died[300] = "";
    if (n->file) snprintf(built, sizeof built, ", built at %s:%d", n->file, n->line);
    if (n->died_file) snprintf(died, sizeof died, " at %s:%d", n->died_file, n->died_line);
    snprintf(buf, OT__DEAD_STRLEN,
             "%s is a dead node (%s %s %s%s): its last reference was dropped by %s%s; a node "
             "lives while its pool, a parent or an ot_retain holds it",
             what, n->op == OT_OP_NONE ? "constant" : ot_op_name((ot_op)ot__node_op(n)),
             ot__shape_str(&n->shape, sh), ot_dtype_name((ot_dtype)n->dtype), built,
             n->died_fn, died);
    return buf;
}

int ot__dead_err(const char *fn, const char *file, int line, const char *what, const ot_node *n)
{
    char msg[OT__DEAD_STRLEN];
    return ot__err_set(OT_ESTATE, file, line, fn, "%s", ot__dead_str(what, n, msg));
}

int ot__nodes_check(const char *fn, const char *file, int line, const char *array, int n,
                    ot_node *const nodes[])
{
    for (int i = 0; nodes && i < n; i++) {
        if (!ot__node_dead(nodes[i])) continue;
        char what[64];
        snprintf(what, sizeof what, "%s[%d]", array, i);
        return ot__dead_err(fn, file, line, what, nodes[i]);
    }
    return 0;
}

/* ---- refcounts ----------------------------------------------------------- */

/* A new reference to a node known to be live (the builders' operands). */
static ot_node *hold(ot_node *n)
{
    if (n) atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
    return n;
}

/* Queues n for destruction when this drops its last reference. */
static void drop(ot_node *n, ot_node **dead)
{
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) {
        n->next_dead = *dead;
        *dead = n;
    }
}

/* Iterative: releasing the root of a 100,000-deep tree must not recurse. */
static void release(ot_node *n, const release_site *at)
{
    ot_node *dead = NULL;
    drop(n, &dead);
    while (dead) {
        ot_node *d = dead;
        dead = d->next_dead;
        if (d->kind == OT_NODE_LEAF) {
            ot__tensor_destroy(ot__leaf_tensor(d));
            continue;
        }
        drop(d->a, &dead);
        drop(d->b, &dead);
        drop(d->tag_a, &dead);
        drop(d->tag_b, &dead);
        ot_memo *m = atomic_load_explicit(&d->memo, memory_order_acquire);
        if (m) m->drop(m);
        if (d->annot) ot__annot_free(d->annot);
        node_bury(d, at);
    }
}

ot_node *ot_retain_at(ot_node *n, const char *file, int line)
{
    if (ot__node_check("retain", file, line, "the node", n)) return NULL;
    return hold(n);
}

ot_node *(ot_retain)(ot_node *n) { return ot_retain_at(n, NULL, 0); }

/* A dead node is refused rather than released again: its count is already
 * zero, and a second burial would queue it twice. */
void ot_release_at(ot_node *n, const char *file, int line)
{
    if (ot__node_check("release", file, line, "the node", n)) return;
    release(n, &(release_site){"ot_release", file, line});
}

void (ot_release)(ot_node *n) { ot_release_at(n, NULL, 0); }

/* ---- digests ------------------------------------------------------------- */

/* Two 64-bit lanes, each an xor of words multiplied by its own odd
 * constants, finished by a multiply and shifts: the words are independent
 * multiplies, not one chain (a chain of a multiply per word cost 13 ns a
 * node, a sixth of W8). Operands enter through their digests, which are
 * already mixed, lane by lane, so the lanes stay independent; the plan
 * cache trusts a match of both (plan_key.c), whose odds for two trees that
 * differ are near 2^-128 per pair. */
#define DIGEST_K(i) (0x9e3779b97f4a7c15ULL * (2 * (uint64_t)(i) + 1) | 1)

static inline uint64_t digest_final(uint64_t h)
{
    h = (h ^ h >> 32) * 0xff51afd7ed558ccdULL;
    return h ^ h >> 29;
}

static inline uint64_t digest_rot(uint64_t x) { return x << 32 | x >> 32; }

void ot__node_digest(ot_node *n)
{
    uint64_t head = n->kind | (uint64_t)(uint8_t)n->op << 8 | (uint64_t)n->dtype << 16 |
                    (uint64_t)n->weak << 24;
    uint64_t x0 = head * DIGEST_K(0), x1 = head * DIGEST_K(1);
    n->digest_ok = false;
    if (n->kind == OT_NODE_LEAF) {
        uint64_t serial = ot__leaf_tensor(n)->serial;
        if (!serial) return;
        x0 ^= serial * DIGEST_K(2);
        x1 ^= digest_rot(serial) * DIGEST_K(3);
    } else if (n->kind == OT_NODE_CONST) {
        uint64_t bits;
        memcpy(&bits, &n->value, sizeof bits);
        x0 ^= bits * DIGEST_K(2);
        x1 ^= digest_rot(bits) * DIGEST_K(3);
    } else {
        int kind = ot__op_table[n->op].kind;
        if (n->custom || (kind != OT_KIND_UNARY && kind != OT_KIND_BINARY)) {
            int64_t w[OT__IDENT_MAX];
            int nw = ot__op_ident(n, w);
            for (int i = 0; i < nw; i++) {
                x0 = digest_final(x0 ^ (uint64_t)w[i] * DIGEST_K(4));
                x1 = digest_final(x1 ^ digest_rot((uint64_t)w[i]) * DIGEST_K(5));
            }
        }
        const ot_node *operand[2] = {n->a, n->b};
        for (int k = 0; k < 2; k++) {
            const ot_node *o = operand[k];
            if (o && !o->digest_ok) return;
            x0 ^= (o ? o->digest[0] : DIGEST_K(6)) * DIGEST_K(7 + 2 * k);
            x1 ^= (o ? o->digest[1] : DIGEST_K(6)) * DIGEST_K(8 + 2 * k);
        }
    }
    n->digest[0] = digest_final(x0);
    n->digest[1] = digest_final(x1);
    n->digest_ok = true;
}

/* ---- pools --------------------------------------------------------------- */

struct ot_pool {
    ot_pool *parent;
    ot_node **items;
    size_t n, cap;
};

static _Thread_local ot_pool *pool_top;
static _Thread_local ot_pool default_pool;
/* The last popped pool, kept with its item array for the next push: a pool
 * per assignment is the common pattern, and this makes it allocation-free.
 * ot_pool_drain frees it. */
static _Thread_local ot_pool *spare_pool;

/* Releases every node of p, keeping its item array. */
static void pool_empty(ot_pool *p, const release_site *at)
{
    for (size_t i = p->n; i-- > 0;)
        release(p->items[i], at);
    p->n = 0;
}

ot_pool *ot_pool_push(void)
{
    ot_pool *p = spare_pool;
    spare_pool = NULL;
    if (!p) p = ot__calloc(1, sizeof *p);
    if (!p) {
        ot__err_set(OT_ENOMEM, NULL, 0, "pool_push", "out of memory");
        return NULL;
    }
    p->parent = pool_top;
    pool_top = p;
    return p;
}

int ot_pool_pop_at(ot_pool *p, const char *file, int line)
{
    if (!p) return ot__err_null("pool_pop", "pool");
    ot_pool *q = pool_top;
    while (q && q != p) q = q->parent;
    if (!q)
        return ot__err_set(OT_ESTATE, file, line, "pool_pop",
                           "pool %p is not on this thread's pool stack", (void *)p);
    const release_site at = {"ot_pool_pop", file, line};
    ot_pool *stop = p->parent;
    while (pool_top != stop) {
        ot_pool *top = pool_top;
        pool_top = top->parent;
        pool_empty(top, &at);
        if (!spare_pool) {
            spare_pool = top;
            continue;
        }
        free(top->items);
        free(top);
    }
    return 0;
}

int (ot_pool_pop)(ot_pool *p) { return ot_pool_pop_at(p, NULL, 0); }

size_t ot_pool_default_nodes(void) { return default_pool.n; }

/* Nodes that die here are freed with the rest of the dead at once: the
 * thread may be about to exit, and a queue left behind would leak. */
void ot_pool_drain(void)
{
    pool_empty(&default_pool, &(release_site){"ot_pool_drain", NULL, 0});
    free(default_pool.items);
    default_pool = (ot_pool){0};
    if (spare_pool) {
        free(spare_pool->items);
        free(spare_pool);
        spare_pool = NULL;
    }
    while (dead_oldest) free(dead_take());
}

ot_node *ot__pool_adopt(ot_node *n)
{
    ot_pool *p = pool_top ? pool_top : &default_pool;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64, bytes;
        ot_node **items = NULL;
        if (ot__mul_size(&bytes, cap, sizeof *items)) items = ot__realloc(p->items, bytes);
        if (!items) {
            ot_release(n);
            ot__err(OT_ENOMEM, NULL, 0, NULL, "out of memory adding a node to its pool");
            return NULL;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->n++] = n;
    return n;
}

/* ---- constants ----------------------------------------------------------- */

static ot_node *new_const(double v, ot_dtype dt)
{
    ot_node *n = ot__node_alloc();
    if (!n) {
        ot__err(OT_ENOMEM, NULL, 0, "const", "out of memory");
        return NULL;
    }
    n->kind = OT_NODE_CONST;
    n->dtype = (uint8_t)dt;
    n->weak = true;
    n->value = v;
    ot__node_digest(n);
    return ot__pool_adopt(n);
}

ot_node *ot_const(double value) { return new_const(value, OT_F64); }
ot_node *ot_constf(float value) { return new_const(value, OT_F32); }
ot_node *ot_consti(int value) { return new_const(value, OT_I32); }

/* ---- dtype promotion ------------------------------------------------------ */

static bool is_float(ot_dtype d) { return d == OT_F32 || d == OT_F64; }
static bool valid_dtype(int d) { return d == OT_F32 || d == OT_F64 || d == OT_I32; }

/* Tensors: f32 with f64 gives f64; i32 with a float gives the float. */
static ot_dtype promote_strong(ot_dtype a, ot_dtype b)
{
    if (a == b) return a;
    if (a == OT_F64 || b == OT_F64) return OT_F64;
    return OT_F32;
}

/* A weak (constant-only) operand keeps the strong one's dtype, except that a
 * float constant lifts an integer tensor to f64, as NumPy does. */
static ot_dtype promote_weak(ot_dtype strong, ot_dtype weak)
{
    if (is_float(strong) || !is_float(weak)) return strong;
    return OT_F64;
}

static ot_dtype promote(const ot_node *a, const ot_node *b, bool *weak)
{
    *weak = a->weak && b->weak;
    if (a->weak == b->weak) return promote_strong(a->dtype, b->dtype);
    return a->weak ? promote_weak(b->dtype, a->dtype) : promote_weak(a->dtype, b->dtype);
}

static ot_dtype apply_flags(ot_op op, ot_dtype d)
{
    unsigned f = ot__flags_of(op);
    if (f & OT_FLAG_INDEX) return OT_I32;
    if ((f & OT_FLAG_FLOAT) && d == OT_I32) return OT_F64;
    return d;
}

/* ---- the builder --------------------------------------------------------- */

/* What a node will be, worked out before it is allocated. */
typedef struct proto {
    ot_shape shape;
    ot_dtype dtype;
    ot_dtype common;      /* binary ops: the operands' promoted dtype */
    bool weak;
    bool perm_given;      /* args.perm as written, even all zero */
    const ot__axes *named;   /* the result's names when aligned by name */
    ot_args args;
} proto;

typedef struct site {
    ot_op op;                 /* a registered op's own number, for messages */
    const char *file;
    int line;
    const ot_custom *custom;  /* the registered op, or NULL */
    ot_node *a, *b;           /* the operands as given: named in messages,
                                 b read by concat's inference */
} site;

/* Records a builder's error (the first of an expression wins), followed by
 * the names of the operands that have one: "...; operand 2 is 'h1'". */
static int fail(const site *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(const site *st, int code, const char *fmt, ...)
{
    if (ot_errcode()) return code;
    char msg[400], qa[OT__QNAME_LEN], qb[OT__QNAME_LEN], names[2 * OT__QNAME_LEN + 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *na = st->a ? ot__qname(st->a, qa) : "", *nb = st->b ? ot__qname(st->b, qb) : "";
    names[0] = '\0';
    if (ot_op_arity(st->op) < 2 && *na)
        snprintf(names, sizeof names, "; the operand is%s", na);
    else if (*na && *nb)
        snprintf(names, sizeof names, "; operand 1 is%s, operand 2 is%s", na, nb);
    else if (*na || *nb)
        snprintf(names, sizeof names, "; operand %d is%s", *na ? 1 : 2, *na ? na : nb);
    return ot__err(code, st->file, st->line, ot_op_name(st->op), "%s%s", msg, names);
}
#define FAIL(st, code, ...) fail((st), (code), __VA_ARGS__)

/* The end of the initializer that starts at p: the next comma (or the end)
 * outside brackets and literals. */
static const char *initializer_end(const char *p)
{
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"' || *p == '\'') {
            char quote = *p;
            for (p++; *p && *p != quote; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) return p;
        } else if (*p == '(' || *p == '[' || *p == '{') {
            depth++;
        } else if (*p == ')' || *p == ']' || *p == '}') {
            depth--;
        } else if (*p == ',' && depth == 0) {
            return p;
        }
    }
    return p;
}

static bool ident_char(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Position of the name [p, p + n) in the comma-separated list, or -1. */
static int member_index(const char *members, const char *p, size_t n)
{
    int i = 0;
    for (const char *m = members; *m; i++) {
        const char *e = strchr(m, ',');
        size_t len = e ? (size_t)(e - m) : strlen(m);
        if (len == n && strncmp(m, p, n) == 0) return i;
        if (!e) break;
        m = e + 1;
    }
    return -1;
}

/* Aggregate members (perm, shape) come last in every options struct, so
 * counting whole members decides exactly whether a scalar member was set. */
bool ot_spec_sets(const char *spec, const char *members, const char *member)
{
    if (!spec || !members || !member) return false;
    int want = member_index(members, member, strlen(member));
    if (want < 0) return false;
    int cur = -1;   /* spec_ (not in members), which the macro designates first */
    for (const char *p = spec; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        const char *end = initializer_end(p);
        if (p == end) {   /* a trailing comma */
            if (!*end) break;
            p = end + 1;
            continue;
        }
        const char *name = p + 1;   /* C allows ". axis = 1" */
        while (*name == ' ' || *name == '\t' || *name == '\n') name++;
        if (p[0] == '.' && ident_char(*name) && !(*name >= '0' && *name <= '9')) {
            const char *q = name;
            while (ident_char(*q)) q++;
            cur = member_index(members, name, (size_t)(q - name));
        } else {
            cur++;
        }
        if (cur == want) return true;
        p = *end ? end + 1 : end;
    }
    return false;
}

/* Into a zeroed p: filled in place, since ot_args is large and every node
 * build passes here. */
static void normalise_args(proto *p, const ot_args *args)
{
    ot_args *a = &p->args;
    if (!args) {
        a->axis = OT_AXIS_ALL;
        return;
    }
    *a = *args;
    if (a->spec_) {
        if (!ot_spec_sets(a->spec_, OT__ARGS_MEMBERS, "axis")) a->axis = OT_AXIS_ALL;
        p->perm_given = ot_spec_sets(a->spec_, OT__ARGS_MEMBERS, "perm");
    }
    a->spec_ = NULL;
}

/* Maps a possibly negative axis into [0, ndim); OT_AXIS_ALL passes. shape
 * is the operand's, for the message. */
static int norm_axis(const site *st, int axis, int ndim, const ot_shape *shape, int *out)
{
    if (axis == OT_AXIS_ALL) {
        *out = OT_AXIS_ALL;
        return 0;
    }
    if (axis < -ndim || axis >= ndim) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EINVAL, "axis %d is out of bounds for tensor of dimension %d "
                    "(operand shape %s)", axis, ndim, ot__shape_str(shape, s));
    }
    *out = axis < 0 ? axis + ndim : axis;
    return 0;
}

static int infer_elementwise(const site *st, ot_node *a, ot_node *b, proto *p)
{
    if (!b) {
        p->shape = a->shape;
        p->dtype = apply_flags(st->op, a->dtype);
        p->weak = a->weak;
        return 0;
    }
    int bad = 0;
    if (!ot__broadcast(&a->shape, &b->shape, &p->shape, &bad)) {
        char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
        int nd = a->shape.ndim > b->shape.ndim ? a->shape.ndim : b->shape.ndim;
        int ia = bad - (nd - a->shape.ndim), ib = bad - (nd - b->shape.ndim);
        return FAIL(st, OT_ESHAPE, "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb), bad,
                    (long long)a->shape.dims[ia], (long long)b->shape.dims[ib]);
    }
    p->common = promote(a, b, &p->weak);
    p->dtype = apply_flags(st->op, p->common);
    return 0;
}

static int infer_reduce(const site *st, ot_node *a, proto *p)
{
    int axis = OT_AXIS_ALL;
    int rc = norm_axis(st, p->args.axis, a->shape.ndim, &a->shape, &axis);
    if (rc) return rc;
    p->args.axis = axis;
    int64_t extent = axis == OT_AXIS_ALL ? ot__numel(&a->shape) : a->shape.dims[axis];
    bool needs_identity = st->op == OT_OP_MAX || st->op == OT_OP_MIN ||
                          st->op == OT_OP_ARGMAX || st->op == OT_OP_ARGMIN;
    if (needs_identity && extent == 0) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EEMPTY, "zero-size reduction over %s of shape %s has no identity",
                    axis == OT_AXIS_ALL ? "all axes" : "an axis", ot__shape_str(&a->shape, s));
    }
    /* The result is OT_I32: an index that does not fit would be saturated
     * into a wrong answer that looks right, so refuse to build it. */
    if ((ot_op_flags(st->op) & OT_FLAG_INDEX) && extent > (int64_t)INT32_MAX + 1) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EOVERFLOW, "%lld elements along %s of shape %s: indices beyond "
                    "%d do not fit the int32 result; reduce along a smaller axis",
                    (long long)extent, axis == OT_AXIS_ALL ? "all axes" : "the axis",
                    ot__shape_str(&a->shape, s), INT32_MAX);
    }
    ot_shape r = {.ndim = 0};
    for (int i = 0; i < a->shape.ndim; i++) {
        bool reduced = axis == OT_AXIS_ALL || axis == i;
        if (!reduced) r.dims[r.ndim++] = a->shape.dims[i];
        else if (p->args.keepdims) r.dims[r.ndim++] = 1;
    }
    p->shape = r;
    p->dtype = apply_flags(st->op, a->dtype);
    p->weak = a->weak;
    return 0;
}

/* batched_dot: (B, M, K) . (B, K, N) -> (B, M, N); a batch of 1 is shared. */
static int infer_batched(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    const int64_t *da = a->shape.dims, *db = b->shape.dims;
    if (a->shape.ndim != 3 || b->shape.ndim != 3)
        return FAIL(st, OT_EINVAL, "operands must be 3-D (batch, rows, cols), got shapes %s and %s",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    if (da[0] != db[0] && da[0] != 1 && db[0] != 1)
        return FAIL(st, OT_ESHAPE, "batch dims of %s and %s differ: %lld != %lld (nor is one 1)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)da[0], (long long)db[0]);
    if (da[2] != db[1])
        return FAIL(st, OT_ESHAPE, "shapes %s and %s not aligned: %lld (dim 2) != %lld (dim 1)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)da[2], (long long)db[1]);
    p->shape = (ot_shape){.ndim = 3, .dims = {da[0] == 1 ? db[0] : da[0], da[1], db[2]}};
    return 0;
}

/* dot: NumPy's, for 1-D and 2-D operands. */
static int infer_matrix(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int ra = a->shape.ndim, rb = b->shape.ndim;
    if (ra < 1 || ra > 2 || rb < 1 || rb > 2)
        return FAIL(st, OT_EINVAL, "operands must be 1-D or 2-D, got shapes %s and %s",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    int ka = ra - 1, kb = 0;  /* contract a's last dim with b's first */
    if (a->shape.dims[ka] != b->shape.dims[kb])
        return FAIL(st, OT_ESHAPE, "shapes %s and %s not aligned: %lld (dim %d) != %lld (dim %d)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)a->shape.dims[ka], ka, (long long)b->shape.dims[kb], kb);
    p->shape.ndim = 0;
    if (ra == 2) p->shape.dims[p->shape.ndim++] = a->shape.dims[0];
    if (rb == 2) p->shape.dims[p->shape.ndim++] = b->shape.dims[1];
    return 0;
}

/* Whether every dim of s fits BLAS's int sizes (a larger one would be cut). */
static bool dims_fit_int(const ot_shape *s)
{
    for (int d = 0; d < s->ndim; d++)
        if (s->dims[d] > INT32_MAX) return false;
    return true;
}

static int infer_dot(const site *st, ot_node *a, ot_node *b, proto *p)
{
    int rc = st->op == OT_OP_BATCHED_DOT ? infer_batched(st, a, b, p) : infer_matrix(st, a, b, p);
    if (rc) return rc;
    p->dtype = promote(a, b, &p->weak);
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (p->dtype == OT_I32)
        return FAIL(st, OT_EDTYPE, "int32 operands of shapes %s and %s are not supported (BLAS "
                    "has no integer product); cast them to a float dtype",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    if (!dims_fit_int(&a->shape) || !dims_fit_int(&b->shape))
        return FAIL(st, OT_EOVERFLOW, "operands of shapes %s and %s have a dim beyond "
                        "INT32_MAX, the largest size BLAS takes",
                        ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    return 0;
}

static int infer_transpose(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    int nd = a->shape.ndim;
    bool all_zero = !p->perm_given;
    for (int i = 0; i < OT_MAX_DIMS; i++)
        if (p->args.perm[i]) all_zero = false;
    bool seen[OT_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        int src = all_zero ? nd - 1 - i : p->args.perm[i];
        if (src < 0 || src >= nd || seen[src])
            return FAIL(st, OT_EINVAL, "perm is not a permutation of %d dims (entry %d is %d; "
                        "operand shape %s)", nd, i, src, ot__shape_str(&a->shape, sa));
        seen[src] = true;
        p->args.perm[i] = src;
        p->shape.dims[i] = a->shape.dims[src];
    }
    for (int i = nd; i < OT_MAX_DIMS; i++)
        if (p->args.perm[i])
            return FAIL(st, OT_EINVAL, "perm has entries beyond the %d dims of operand shape %s",
                        nd, ot__shape_str(&a->shape, sa));
    p->shape.ndim = nd;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* A slice as args (layout.c's ot_slice_node_n writes them from NumPy
 * indices): per operand dim d, start[d] and perm[d] (the step; 0 for an
 * index, which drops the dim) and shape.dims[d] (the count). Every element
 * read must lie inside the operand. */
static int infer_slice(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    ot_args *g = &p->args;
    int nd = a->shape.ndim;
    p->shape.ndim = 0;
    for (int d = 0; d < nd; d++) {
        int64_t dim = a->shape.dims[d], first = g->start[d], step = g->perm[d];
        int64_t count = step ? g->shape.dims[d] : 1;
        int64_t span, last = -1;
        bool fits = count >= 0 && count <= dim && ot__mul_i64(&span, count > 0 ? count - 1 : 0, step) &&
                    ot__add_i64(&last, first, span);
        if (!fits || (count > 0 && (first < 0 || first >= dim || last < 0 || last >= dim)))
            return FAIL(st, OT_EINVAL, "slice of axis %d (start %lld, step %d, count %lld) "
                        "reads outside operand shape %s", d, (long long)first, (int)step,
                        (long long)count, ot__shape_str(&a->shape, sa));
        if (count == 0) g->start[d] = 0;   /* one form for every empty range */
        if (step && count <= 1) g->perm[d] = 1;
        if (step) p->shape.dims[p->shape.ndim++] = count;
        g->shape.dims[d] = step ? count : 0;
    }
    for (int d = nd; d < OT_MAX_DIMS; d++) g->start[d] = g->perm[d] = 0, g->shape.dims[d] = 0;
    g->shape.ndim = nd;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* args.shape in row-major order, one dim -1 standing for what is left. */
static int infer_reshape(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    ot_shape s = p->args.shape;
    if (s.ndim < 0 || s.ndim > OT_MAX_DIMS)
        return FAIL(st, OT_EINVAL, "shape has %d dims, at most %d are supported (operand shape %s)",
                    s.ndim, OT_MAX_DIMS, ot__shape_str(&a->shape, sa));
    int64_t known = 1, numel = ot__numel(&a->shape);
    int unknown = -1;
    for (int d = 0; d < s.ndim; d++) {
        if (s.dims[d] == -1 && unknown < 0) unknown = d;
        else if (s.dims[d] < 0)
            return FAIL(st, OT_EINVAL, "shape %s has a negative dim or a second -1 (operand shape %s)",
                        ot__shape_str(&s, sb), ot__shape_str(&a->shape, sa));
        else if (!ot__mul_i64(&known, known, s.dims[d])) known = -1;
    }
    if (unknown >= 0 && known > 0 && numel % known == 0) s.dims[unknown] = numel / known;
    if ((unknown >= 0 && s.dims[unknown] < 0) || ot__numel(&s) != numel || known < 0)
        return FAIL(st, OT_ESHAPE, "cannot reshape operand of shape %s (size %lld) into shape %s",
                    ot__shape_str(&a->shape, sa), (long long)numel, ot__shape_str(&p->args.shape, sb));
    p->shape = p->args.shape = s;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* Two parts joined along args.axis: one rank (at least 1), the same dims
 * but on the axis, dtypes promoted as a binary op's. */
static int infer_concat(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int nd = a->shape.ndim, axis = 0;   /* set by norm_axis; gcc -O3 cannot see it */
    if (nd == 0 || b->shape.ndim != nd)
        return FAIL(st, OT_ESHAPE, "parts of shapes %s and %s: concatenation needs parts of one "
                    "rank, at least 1", ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    int rc = norm_axis(st, p->args.axis == OT_AXIS_ALL ? 0 : p->args.axis, nd, &a->shape, &axis);
    if (rc) return rc;
    for (int d = 0; d < nd; d++)
        if (d != axis && a->shape.dims[d] != b->shape.dims[d])
            return FAIL(st, OT_ESHAPE, "parts of shapes %s and %s differ on axis %d; only the "
                        "concatenation axis %d may differ", ot__shape_str(&a->shape, sa),
                        ot__shape_str(&b->shape, sb), d, axis);
    p->args.axis = axis;
    p->shape = a->shape;
    if (!ot__add_i64(&p->shape.dims[axis], a->shape.dims[axis], b->shape.dims[axis]))
        return FAIL(st, OT_EOVERFLOW, "parts of shapes %s and %s overflow axis %d",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb), axis);
    p->dtype = promote(a, b, &p->weak);
    return 0;
}

static int infer_onehot(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    if (p->args.depth <= 0)
        return FAIL(st, OT_EINVAL, "depth must be positive, got %lld (indices of shape %s)",
                    (long long)p->args.depth, ot__shape_str(&a->shape, sa));
    /* Class indices are int32 (argmax's results, or i32 tensors). */
    if (p->args.depth > INT32_MAX)
        return FAIL(st, OT_EOVERFLOW, "depth %lld exceeds the int32 index range (at most %d; "
                    "indices of shape %s)", (long long)p->args.depth, INT32_MAX,
                    ot__shape_str(&a->shape, sa));
    int nd = a->shape.ndim + 1;
    if (nd > OT_MAX_DIMS)
        return FAIL(st, OT_EINVAL, "the result would have %d dimensions, at most %d are "
                    "supported (indices of shape %s)", nd, OT_MAX_DIMS,
                    ot__shape_str(&a->shape, sa));
    int axis = p->args.axis == OT_AXIS_ALL ? nd - 1 : p->args.axis;
    int rc = norm_axis(st, axis, nd, &a->shape, &axis);
    if (rc) return rc;
    p->args.axis = axis;
    p->shape.ndim = nd;
    for (int i = 0, j = 0; i < nd; i++)
        p->shape.dims[i] = i == axis ? p->args.depth : a->shape.dims[j++];
    if (p->args.dtype && !valid_dtype(p->args.dtype))
        return FAIL(st, OT_EDTYPE, "unknown dtype %d (indices of shape %s)", (int)p->args.dtype,
                    ot__shape_str(&a->shape, sa));
    p->dtype = p->args.dtype ? p->args.dtype : OT_F32;
    p->args.dtype = p->dtype;
    return 0;
}

static int infer_special(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    switch (st->op) {
    case OT_OP_CAST:
        if (!valid_dtype(p->args.dtype))
            return FAIL(st, OT_EDTYPE, "cannot cast to unknown dtype %d (operand shape %s)",
                        (int)p->args.dtype, ot__shape_str(&a->shape, sa));
        p->shape = a->shape;
        p->dtype = p->args.dtype;
        return 0;
    case OT_OP_ONEHOT:
        return infer_onehot(st, a, p);
    case OT_OP_KEEP:
        p->shape = a->shape;
        p->dtype = a->dtype;
        p->weak = a->weak;
        return 0;
    case OT_OP_CONCAT:
        return infer_concat(st, a, st->b, p);
    default: /* OT_OP_RAND */
        if (p->args.dtype == OT_I32 || (p->args.dtype && !valid_dtype(p->args.dtype)))
            return FAIL(st, OT_EDTYPE, "draws are float32 or float64, not %s",
                        ot_dtype_name(p->args.dtype) ? ot_dtype_name(p->args.dtype) : "unknown");
        p->dtype = p->args.dtype ? p->args.dtype : OT_F32;
        p->args.dtype = p->dtype;
        p->shape = p->args.shape;
        return 0;
    }
}

/* NumPy (NEP 50): a Python scalar meeting an array takes the array's dtype
 * before the op, so x_f32 == 0.1 compares with float32(0.1). A constant is
 * rounded here; a weak expression of constants gets a cast. */
static ot_node *coerce_weak(const site *st, ot_node *w, ot_dtype dt)
{
    if (w->dtype == dt) return w;
    if (w->kind == OT_NODE_CONST) {
        union { float f; double d; int32_t i; } v;
        ot__store(&v, dt, w->value);
        return new_const(ot__load(&v, dt), dt);
    }
    ot_args c = {.axis = OT_AXIS_ALL, .dtype = dt};
    return ot_build_at(OT_OP_CAST, w, NULL, &c, st->file, st->line);
}

/* A new op node in the current pool, args NULL meaning the defaults (a
 * zeroed ot_args with axis OT_AXIS_ALL, which a fresh node already holds
 * but for the axis). */
static ot_node *op_node(const site *st, ot_node *a, ot_node *b, const ot_shape *shape,
                        ot_dtype dtype, bool weak, const ot_args *args)
{
    ot_node *n = ot__node_alloc();
    if (!n) {
        FAIL(st, OT_ENOMEM, "out of memory");
        return NULL;
    }
    n->kind = OT_NODE_OP;
    n->op = (int8_t)(st->custom ? st->custom->row : st->op);
    n->custom = st->custom;
    n->dtype = (uint8_t)dtype;
    n->weak = weak;
    /* The dims in use: the node is zeroed, and a 72-byte copy of an operand
     * built a moment ago waited on its stores (a third of a plain build). */
    n->shape.ndim = shape->ndim;
    for (int d = 0; d < shape->ndim; d++) n->shape.dims[d] = shape->dims[d];
    if (args) n->args = *args;
    else n->args.axis = OT_AXIS_ALL;
    n->file = st->file;
    n->line = st->line;
    n->a = hold(a);
    n->b = hold(b);
    n->be = a && a->be ? a->be : (b ? b->be : NULL);
    ot__node_digest(n);
    return ot__pool_adopt(n);
}

static ot_node *make_node(const site *st, ot_node *a, ot_node *b, const proto *p)
{
    ot_node *n = op_node(st, a, b, &p->shape, p->dtype, p->weak, &p->args);
    if (n && p->named) n->axes = p->named;
    else if (n && ((a && a->axes) || (b && b->axes)) && ot__axes_infer(n))
        return NULL;
    return n;
}

static ot_node *build_composite(const site *st, ot_node *a, ot_node *b, const ot_args *args);

/* A tree runs on the backend of its leaves (be, the first leaf's); leaves
 * of two backends would be read as one backend's memory, silently. */
static int mixed_backends(const site *st, const ot_backend *x, const ot_backend *y)
{
    const char *nx = ot_backend_name(x), *ny = ot_backend_name(y);
    if (strcmp(nx, ny) == 0)
        return FAIL(st, OT_EBACKEND, "operands read tensors of two different '%s' backends", nx);
    return FAIL(st, OT_EBACKEND, "operand 1 reads tensors of backend '%s', operand 2 of backend '%s'",
                nx, ny);
}

static int dead_operand(const site *st, int i, const ot_node *x)
{
    char msg[OT__DEAD_STRLEN];
    return FAIL(st, OT_ESTATE, "%s", ot__dead_str(i == 1 ? "operand 1" : "operand 2", x, msg));
}

static int check_operands(const site *st, ot_node *a, ot_node *b)
{
    if (ot__node_dead(a)) return dead_operand(st, 1, a);
    if (ot__node_dead(b)) return dead_operand(st, 2, b);
    int arity = ot__arity_of(st->op);
    /* Naming the good operand's shape tells which call of several is meant. */
    char sh[OT__SHAPE_STRLEN];
    if (arity == 2 && !a && b)
        return FAIL(st, OT_ENULL, "operand 1 is NULL (operand 2 is %s %s)",
                    ot__shape_str(&b->shape, sh), ot_dtype_name((ot_dtype)b->dtype));
    if (arity == 2 && a && !b)
        return FAIL(st, OT_ENULL, "operand 2 is NULL (operand 1 is %s %s)",
                    ot__shape_str(&a->shape, sh), ot_dtype_name((ot_dtype)a->dtype));
    if (arity >= 1 && !a) return FAIL(st, OT_ENULL, "operand 1 is NULL");
    if (arity == 2 && !b) return FAIL(st, OT_ENULL, "operand 2 is NULL");
    if ((arity < 2 && b) || (arity < 1 && a))
        return FAIL(st, OT_EINVAL, "takes %d operand%s", arity, arity == 1 ? "" : "s");
    if (a && b && a->be && b->be && a->be != b->be) return mixed_backends(st, a->be, b->be);
    return 0;
}

/* Every result shape passes the checks of a created tensor: operands that
 * are fine alone can broadcast or multiply into a result too big to
 * address, and rand and onehot take their dims from arguments. */
static int check_result(const site *st, const ot_node *a, const ot_node *b, const proto *p)
{
    char msg[256], sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int code = shape_problem(&p->shape, p->dtype, msg, sizeof msg);
    if (!code) return 0;
    if (!a) return FAIL(st, code, "%s", msg);
    if (!b) return FAIL(st, code, "%s (operand %s)", msg, ot__shape_str(&a->shape, sa));
    return FAIL(st, code, "%s (operands %s and %s)", msg, ot__shape_str(&a->shape, sa),
                ot__shape_str(&b->shape, sb));
}

/* The common build, an elementwise op without arguments on operands of one
 * shape and dtype, neither a weak constant: the general inference's result
 * is the operand's shape and the op's dtype rule, and the only check left
 * is the size, when the rule widens the dtype (i32 to f64). W8 builds four
 * such nodes per call, and the general path cost ~160 instructions each. */
static bool is_plain(const site *st, int kind, const ot_node *a, const ot_node *b, ot_dtype *dt)
{
    if (kind != OT_KIND_UNARY && kind != OT_KIND_BINARY) return false;
    if (a->weak || (b && (b->weak || b->dtype != a->dtype || !ot__shape_eq(&a->shape, &b->shape))))
        return false;
    if (a->axes || (b && b->axes)) return false;   /* names: ot__axes_infer, or align */
    *dt = apply_flags(st->op, (ot_dtype)a->dtype);
    char msg[256];   /* only a widening (to f64) can make the size too big */
    return *dt != OT_F64 || a->dtype == OT_F64 ||
           !shape_problem(&a->shape, *dt, msg, sizeof msg);   /* else the general path reports it */
}

ot_node *ot_build_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                     const char *file, int line)
{
    bool builtin = op >= 0 && op < OT_OP_COUNT;
    site st = {op, file, line, builtin ? NULL : ot__custom_of_op(op), a, b};
    if (!builtin && !st.custom) {
        ot__err(OT_EINVAL, file, line, "build", "unknown op %d", (int)op);
        return NULL;
    }
    if (check_operands(&st, a, b)) return NULL;
    /* custom1 and custom2 stand for registered ops, and build nothing:
     * operands are checked as for any op first. */
    bool placeholder = builtin && (ot__flags_of(op) & OT_FLAG_CUSTOM);
    int kind = ot__kind_of(op);
    ot_dtype plain_dt;
    if (!args && !placeholder && is_plain(&st, kind, a, b, &plain_dt))
        return op_node(&st, a, b, &a->shape, plain_dt, false, NULL);
    proto p;
    ot__clear(&p, sizeof p);
    normalise_args(&p, args);
    int rc = 0;
    switch (kind) {
    case OT_KIND_UNARY: rc = infer_elementwise(&st, a, NULL, &p); break;
    case OT_KIND_BINARY:
        if (a->axes && b->axes && a->axes != b->axes &&
            ot__axes_align(ot_op_name(op), file, line, &a, &b, &p.named))
            return NULL;
        rc = infer_elementwise(&st, a, b, &p);
        if (!rc && a->weak != b->weak) {
            ot_node **w = a->weak ? &a : &b;
            if (!(*w = coerce_weak(&st, *w, p.common))) return NULL;
        }
        break;
    case OT_KIND_REDUCE: rc = infer_reduce(&st, a, &p); break;
    case OT_KIND_DOT: rc = infer_dot(&st, a, b, &p); break;
    case OT_KIND_SHAPE:
        rc = op == OT_OP_SLICE     ? infer_slice(&st, a, &p)
             : op == OT_OP_RESHAPE ? infer_reshape(&st, a, &p)
                                   : infer_transpose(&st, a, &p);
        break;
    case OT_KIND_SPECIAL: rc = infer_special(&st, a, &p); break;
    default: return build_composite(&st, a, b, &p.args);
    }
    if (!rc) rc = check_result(&st, a, b, &p);
    if (!rc && placeholder)
        rc = FAIL(&st, OT_EINVAL, "stands for ops registered with ot_op_register: build with "
                                  "ot_apply and the op it returned");
    return rc ? NULL : make_node(&st, a, b, &p);
}

/* ---- composites ---------------------------------------------------------- */

/* Builder shorthands that carry the composite's call site, so an error inside
 * an expansion still points at the user's line. */
static ot_node *B(const site *st, ot_op op, ot_node *a, ot_node *b)
{
    return ot_build_at(op, a, b, NULL, st->file, st->line);
}
static ot_node *R(const site *st, ot_op op, ot_node *a, int axis, bool keepdims)
{
    ot_args r = {.axis = axis, .keepdims = keepdims};
    return ot_build_at(op, a, NULL, &r, st->file, st->line);
}

static int64_t reduced_count(const ot_node *x, int axis)
{
    return axis == OT_AXIS_ALL ? ot__numel(&x->shape) : x->shape.dims[axis];
}

/* The mean of x along axis (keepdims) as m1 + mean(x - m1), m1 the plain
 * mean: exact for constant data (x - m1 is exact, its mean's error is of
 * order n^2 eps^2 and vanishes in the addition), where a plain sum's
 * rounding leaves var and std of constant data tiny but nonzero on one
 * backend and 0 on another, and a function singular at std = 0 (log, 1/x)
 * finite on one and inf or NaN on the other. */
ot_node *ot__mean_refined(ot_node *x, int axis, const char *file, int line)
{
    ot_args r = {.axis = axis, .keepdims = true};
    ot_node *m1 = ot_build_at(OT_OP_MEAN, x, NULL, &r, file, line);
    ot_node *dx = ot_build_at(OT_OP_SUB, x, m1, NULL, file, line);
    return ot_build_at(OT_OP_ADD, m1, ot_build_at(OT_OP_MEAN, dx, NULL, &r, file, line), NULL,
                       file, line);
}

static ot_node *expand_var(const site *st, ot_node *x, const ot_args *g)
{
    ot_node *m = ot__mean_refined(x, g->axis, st->file, st->line);
    ot_node *ss = R(st, OT_OP_SUM, B(st, OT_OP_SQR, B(st, OT_OP_SUB, x, m), NULL), g->axis,
                    g->keepdims);
    if (!ss) return NULL;
    int64_t dof = reduced_count(x, g->axis) - g->ddof;  /* NumPy: max(n - ddof, 0) */
    return B(st, OT_OP_DIV, ss, ot_const((double)(dof > 0 ? dof : 0)));
}

static ot_node *expand_softmax(const site *st, ot_node *x, const ot_args *g, bool log_form)
{
    ot_node *shifted = B(st, OT_OP_SUB, x, R(st, OT_OP_MAX, x, g->axis, true));
    if (!shifted) return NULL;
    if (log_form) {
        ot_node *lse = B(st, OT_OP_LOG, R(st, OT_OP_SUM, B(st, OT_OP_EXP, shifted, NULL),
                                           g->axis, true), NULL);
        return B(st, OT_OP_SUB, shifted, lse);
    }
    ot_node *e = B(st, OT_OP_EXP, shifted, NULL);
    return B(st, OT_OP_DIV, e, R(st, OT_OP_SUM, e, g->axis, true));
}

/* log p for cross_entropy: of a softmax, its stable log form, exact for
 * logits of +-1000 (safelog would cap the loss at 50); floored at -FLT_MAX
 * so that a target of 0 times the log of a zero probability stays 0. Any
 * other p goes through safelog. */
static ot_node *log_probs(const site *st, ot_node *p)
{
    if (p->tag != OT_OP_SOFTMAX) return B(st, OT_OP_SAFELOG, p, NULL);
    return B(st, OT_OP_MAXIMUM, expand_softmax(st, p->tag_a, &p->args, true), ot_const(-FLT_MAX));
}

static ot_node *expand(const site *st, ot_node *a, ot_node *b, const ot_args *g)
{
    switch (st->op) {
    case OT_OP_VAR: return expand_var(st, a, g);
    case OT_OP_STD: return B(st, OT_OP_SQRT, expand_var(st, a, g), NULL);
    case OT_OP_CLIP:
        return B(st, OT_OP_MINIMUM, B(st, OT_OP_MAXIMUM, a, ot_const(g->lo)), ot_const(g->hi));
    case OT_OP_SOFTMAX: return expand_softmax(st, a, g, false);
    case OT_OP_LOGSOFTMAX: return expand_softmax(st, a, g, true);
    case OT_OP_CROSS_ENTROPY:
        return B(st, OT_OP_NEG, R(st, OT_OP_SUM, B(st, OT_OP_MUL, b, log_probs(st, a)), g->axis,
                                  g->keepdims), NULL);
    default: /* OT_OP_SQUARED_L2 */
        return R(st, OT_OP_SUM, B(st, OT_OP_SQR, a, NULL), g->axis, g->keepdims);
    }
}

/* Expands a composite into ordinary ops and tags the root, which also keeps
 * the composite's own operands and attributes for autodiff and printing. */
static ot_node *build_composite(const site *st, ot_node *a, ot_node *b, const ot_args *args)
{
    ot_args g = *args;
    if (st->op != OT_OP_CLIP) {
        int ndim = a->shape.ndim;
        ot_shape shape = a->shape;
        if (st->op == OT_OP_CROSS_ENTROPY) {
            ot_shape s;
            if (!ot__broadcast(&a->shape, &b->shape, &s, NULL)) {
                char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
                FAIL(st, OT_ESHAPE, "shapes %s and %s cannot be broadcast",
                     ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
                return NULL;
            }
            ndim = s.ndim;
            shape = s;
        }
        if (norm_axis(st, g.axis, ndim, &shape, &g.axis)) return NULL;
    }
    ot_node *root = expand(st, a, b, &g);
    if (!root) return NULL;
    /* The root is new and not yet visible to anyone else, so it may still be
     * annotated; a root shared with another tree would be a bug. */
    OT_ASSERT(atomic_load(&root->refs) == 1);
    root->tag = (int8_t)st->op;
    root->tag_a = hold(a);
    root->tag_b = hold(b);
    if (ot_op_kind(root->op) != OT_KIND_REDUCE) root->args = g;
    else root->args.ddof = g.ddof;
    ot__node_digest(root);   /* its args changed */
    return root;
}

/* ---- accessors ----------------------------------------------------------- */

int ot_node_kind(const ot_node *n) { return n ? n->kind : 0; }
ot_op ot_node_op(const ot_node *n) { return n ? (ot_op)ot__node_op(n) : OT_OP_NONE; }
ot_op ot_node_tag(const ot_node *n) { return n ? (ot_op)n->tag : OT_OP_NONE; }
ot_dtype ot_node_dtype(const ot_node *n) { return n ? (ot_dtype)n->dtype : OT_DTYPE_DEFAULT; }
double ot_node_value(const ot_node *n) { return n ? n->value : 0.0; }
const char *ot_node_file(const ot_node *n) { return n ? n->file : NULL; }
int ot_node_line(const ot_node *n) { return n ? n->line : 0; }

ot_shape ot_node_shape(const ot_node *n)
{
    ot_shape s = {0};
    return n ? n->shape : s;
}

ot_node *ot_node_child(const ot_node *n, int i)
{
    if (!n) return NULL;
    return i == 0 ? n->a : i == 1 ? n->b : NULL;
}

ot_tensor *ot_node_tensor(const ot_node *n)
{
    return n && n->kind == OT_NODE_LEAF ? ot__leaf_tensor(n) : NULL;
}

ot_args ot_node_args(const ot_node *n)
{
    ot_args a = {.axis = OT_AXIS_ALL};
    return n ? n->args : a;
}
