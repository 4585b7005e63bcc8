/*
 * internal.h - private structures and helpers shared by the files of src/.
 * Never installed. Non-static internal functions are named ot__*.
 */
#ifndef OT_INTERNAL_H
#define OT_INTERNAL_H

#include "optree.h"
#include "stats.h"
#include "half.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static_assert(OT_MAX_DIMS == 8, "shape code assumes 8 dims");

/* Internal invariant checks: on in debug builds only. User input is never
 * checked with this; it gets a status. */
#ifdef OT_DEBUG
#define OT_ASSERT(x) assert(x)
#else
#define OT_ASSERT(x) ((void)0)
#endif

/* ---- allocation (alloc.c) ------------------------------------------------ */

/* Every allocation of the library goes through these (free stays free), so
 * that a test can fail the Nth one: ot__alloc_fail_at(n) arms a countdown on
 * the calling thread (0 disarms it), ot__alloc_count() counts this thread's
 * allocations since then. The jit's mmap asks ot__alloc_should_fail too. */
void *ot__malloc(size_t n);
void *ot__calloc(size_t n, size_t size);
void *ot__realloc(void *p, size_t n);
void *ot__aligned_alloc(size_t align, size_t n);
/* Memory for tensor data (64-byte aligned; large buffers in huge pages). */
void *ot__data_alloc(size_t n);
bool ot__alloc_should_fail(void);
void ot__alloc_fail_at(long n);
long ot__alloc_count(void);
/* Allocations that failed on this thread, injected or real, ever: a result
 * built while this moved may have fallen back from an optimisation, so it
 * is not worth keeping (the plan cache compares it before and after). */
unsigned long ot__alloc_failures(void);

/* ---- nodes --------------------------------------------------------------- */

/* What a backend keeps on a tree's root between assignments of that tree
 * (plan_key.c: the plan and its bindings), dropped with the node. */
typedef struct ot_memo {
    void (*drop)(struct ot_memo *m);
} ot_memo;

struct ot_custom;
/* A node's name and metadata (names.c); never part of its identity. */
typedef struct ot__annot ot__annot;

struct ot_node {
    atomic_long refs;     /* the shared count (node_pool.c's "refcounts"):
                             references any thread may drop, plus
                             OT__NODE_OWNED while the owner's count below
                             is in use */
    long local;           /* the owner's count: references taken on the
                             owner thread that only it drops (node_pool.c) */
    _Atomic uint64_t owner;  /* the thread whose count 'local' is (an id of
                                ot__node_alloc's), 0 when none */
    uint8_t local_ops;    /* which operand references (OT__OP_*) this node's
                             owner counted in the operand's 'local' */
    uint8_t kind;         /* OT_NODE_LEAF / CONST / OP */
    uint8_t dtype;        /* ot_dtype */
    bool weak;            /* dtype came only from constants */
    int8_t op;            /* ot_op for OT_NODE_OP, else OT_OP_NONE */
    int8_t tag;           /* composite op that this node is the root of */
    bool digest_ok;       /* digest is set: a leaf of a backend, a constant,
                             or an op node built over nodes with digests */
    bool args_set;        /* args members besides axis may be nonzero: set by
                             ot__node_set_args, and ot__node_alloc's reuse
                             clears args only then */
    int line;
    int died_line;        /* OT_NODE_DEAD: where the last reference was
                             dropped (died_fn at died_file:died_line) */
    const char *file;
    const char *died_fn, *died_file;
    ot_backend *be;       /* backend of the first leaf below, or NULL */
    ot_shape shape;
    ot_node *a, *b;       /* operands (retained), NULL when absent */
    ot_node *tag_a, *tag_b; /* a composite's own operands (retained) */
    const struct ot_custom *custom;  /* op custom1/custom2: the registered op
                                        (ops.h; lives as long as the process) */
    double value;         /* OT_NODE_CONST */
    ot_node *next_dead;   /* worklist link while being destroyed; once
                             dead, the link of the thread's queue of dead
                             nodes (node_pool.c) */
    _Atomic(ot_memo *) memo;  /* set once, by the first assignment of this
                                 root that can be memoised */
    ot__annot *annot;     /* name and metadata, NULL when none (names.c);
                             freed with the node */
    const struct ot__axes *axes;  /* names of the dims (axes.c, interned), or
                                     NULL: unnamed, the common case */
    uint64_t digest[2];   /* 128 bits of the tree below, set when it is built
                             (ot__node_digest): equal for trees that compile
                             to the same plan with the same bindings */
    /* Last, and kept out of the header's lines: 312 of a node's 552 bytes,
     * and an elementwise node sets only its axis (ot__node_alloc). */
    ot_args args;         /* attributes in force, spec_ NULL, axis normalised
                             (0..ndim-1 of the operand, or OT_AXIS_ALL) */
};

/* Dead nodes (node_pool.c; optree.h's "Dead nodes"): a node whose last
 * reference was dropped keeps kind OT_NODE_DEAD, its op, shape, dtype and
 * build site, and the site that killed it, while it is among the last
 * OT_DEAD_NODES_KEPT released on its thread. Every entry point checks each
 * node it is handed (a live root holds its whole tree, so roots and builder
 * operands suffice) with ot__node_check: one load and compare when live. */
static inline bool ot__node_dead(const ot_node *n) { return n && n->kind == OT_NODE_DEAD; }
/* "<what> is a dead node (add (4,) float32, built at f.c:3): ... by
 * ot_pool_pop at f.c:9" into buf (OT__DEAD_STRLEN chars), for messages. */
#define OT__DEAD_STRLEN 1024
const char *ot__dead_str(const char *what, const ot_node *n, char *buf);
/* Records OT_ESTATE for fn called at file:line (replacing the slot) with
 * that text; returns the code. */
int ot__dead_err(const char *fn, const char *file, int line, const char *what, const ot_node *n);
static inline int ot__node_check(const char *fn, const char *file, int line, const char *what,
                                 const ot_node *n)
{
    return ot__node_dead(n) ? ot__dead_err(fn, file, line, what, n) : 0;
}
/* The same over nodes[0..n-1], naming the first dead one "<array>[i]"
 * (NULL entries and a NULL array are left to the caller's checks). */
int ot__nodes_check(const char *fn, const char *file, int line, const char *array, int n,
                    ot_node *const nodes[]);
/* Nodes released on this thread, ever (the fuzzer compares two readings
 * with OT_DEAD_NODES_KEPT to know which dead nodes it may still touch). */
uint64_t ot__nodes_released(void);

/* Adds a node to the innermost pool of this thread, which takes over one
 * shared reference the caller holds (ot_retain's, or a tensor leaf's
 * creator's). On allocation failure that reference is dropped and
 * OT_ENOMEM recorded; returns n or NULL. */
ot_node *ot__pool_adopt(ot_node *n);
/* The same for a node just made by ot__node_alloc on this thread: the pool
 * takes over its creator's reference, which is in its owner's count. */
ot_node *ot__pool_adopt_new(ot_node *n);
/* mean(x, axis, keepdims) as var and std expand it (node.c): exact for
 * constant data on every backend; autodiff's var/std rules use it too. */
ot_node *ot__mean_refined(ot_node *x, int axis, const char *file, int line);
/* parse.c: whether ot_parse reads s as a name: an identifier, not inf or
 * nan (with or without the f32 mark f), which read as numbers. */
bool ot__parse_spells_name(const char *s);
/* A zeroed node, kind/op/tag set to "none" values, owned by this thread
 * with its creator's one reference in the owner count (so it goes to a
 * pool by ot__pool_adopt_new, never ot__pool_adopt). */
ot_node *ot__node_alloc(void);
/* Sets a node's args (n->args = *a): the only way to write them but their
 * axis, so that ot__node_alloc knows which dead nodes' args need zeroing. */
static inline void ot__node_set_args(ot_node *n, const ot_args *a)
{
    n->args = *a;
    n->args_set = true;
}
/* The shared count's flag: an owner's count is in use (node_pool.c). */
#define OT__NODE_OWNED ((long)1 << (sizeof(long) * 8 - 2))
/* The operand references of a node, as local_ops names them. */
enum { OT__OP_A = 1, OT__OP_B = 2, OT__OP_TAG_A = 4, OT__OP_TAG_B = 8 };
/* A new shared reference to a node known to be live (ot_retain's). */
static inline ot_node *ot__node_hold(ot_node *n)
{
    if (n) atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
    return n;
}
/* A reference to n counted in its owner count (this thread owns n). Only a
 * tensor's leaf has an owner count of 0 while it lives (an op node's is
 * its creator's reference until it dies or escapes): the count goes into
 * use again, the flag set while the caller's own reference to the leaf
 * keeps the shared count above 0. */
static inline void ot__node_take_local(ot_node *n)
{
    if (n->local++ == 0) atomic_fetch_or_explicit(&n->refs, OT__NODE_OWNED, memory_order_relaxed);
}
/* n's references, both counts (on n's owner thread, or with no owner
 * count in use): for tests. */
long ot__node_refs(const ot_node *n);
/* This thread's id as an owner of nodes (node_pool.c's "refcounts"). */
uint64_t ot__thread_id(void);
/* The reference parent takes on its operand op (slot: OT__OP_*), parent
 * being owned by this thread (new from ot__node_alloc, in this thread's
 * pool): counted in op's owner count when this thread owns op too (then
 * both have this thread's id), else in op's shared count; returns op.
 * Inline, as every build takes one per operand (node_pool.c's
 * "refcounts" explains both counts). */
static inline ot_node *ot__node_hold_operand(ot_node *parent, ot_node *op, int slot)
{
    if (!op) return NULL;
    if (atomic_load_explicit(&op->owner, memory_order_relaxed) ==
        atomic_load_explicit(&parent->owner, memory_order_relaxed)) {
        ot__node_take_local(op);
        parent->local_ops |= (uint8_t)slot;
    } else {
        atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
    }
    return op;
}
/* Whether n is new: only its creator's reference is held. */
bool ot__node_fresh(const ot_node *n);
/* Sets n's digest from what the plan key reads of it (its identity words,
 * a constant's value, a leaf's serial) and its operands' digests; none when
 * an operand has none. Called once a node is complete, before it is
 * shared (node.c, tensor.c). */
void ot__node_digest(ot_node *n);

/* ---- names and metadata (names.c) ---------------------------------------- */

/* 0, or OT_EINVAL for fn when name (NULL: none) is longer than
 * OT_NAME_MAX or holds a control character. */
int ot__name_check(const char *fn, const char *name);

void ot__annot_free(ot__annot *a);
/* Gives dst (an op or constant) src's name and metadata, for a node
 * rebuilt in src's place (ot_substitute); 0 or the error recorded. */
int ot__annot_copy(ot_node *dst, const ot_node *src);
/* src's name and metadata deep-copied onto dst, which has none, leaving
 * the error slot as it is (a builder's step: ot__annot_copy goes through
 * the setters, which clear it); 0 or OT_ENOMEM (recorded). */
int ot__annot_dup(ot_node *dst, const ot_node *src);
/* " 'h1'" for a named node (a long name cut, ending "..."), else "": for
 * messages naming an operand. buf holds OT__QNAME_LEN chars. */
#define OT__QNAME_LEN 64
/* Entry i (< ot_node_meta_count) of n's metadata, leaving the error slot
 * alone (the printers'). */
void ot__meta_entry(const ot_node *n, int i, const char **key, const char **value);
const char *ot__qname(const ot_node *n, char buf[OT__QNAME_LEN]);
/* A new view v of base named after base's name, when it has one: the index
 * ("x[:, 1]"), the permutation ("x.T", "x.transpose(1,0,2)"), or the
 * method over v's shape ("x.reshape(4,16)", "x.broadcast_to(3,4)"). v is
 * returned; out of memory it is freed and NULL returned with OT_ENOMEM. */
ot_tensor *ot__name_slice(ot_tensor *v, const ot_tensor *base, int n, const ot_index *idx);
ot_tensor *ot__name_transpose(ot_tensor *v, const ot_tensor *base, const int *perm);
ot_tensor *ot__name_shaped(ot_tensor *v, const ot_tensor *base, const char *method);

/* ---- tensors ------------------------------------------------------------- */

typedef struct ot_buffer {
    atomic_long refs;
    size_t nbytes;
    void *data;           /* 64-byte aligned, unless wrapped (ot_wrap) */
    struct ot_tensor *var;  /* the trainable tensor over this memory, or NULL
                               (variables.c; cleared when it is destroyed) */
    const void *placeholder_of;   /* the program whose placeholder this is
                                     (program.c), compared, never read */
    struct ot_buffer *grad_of;    /* autodiff.c: the memory whose gradient
                                     through views this buffer holds, values
                                     of the moment it was asked, not a tree
                                     (held: one reference), or NULL */
    void (*free_fn)(void *user, void *ptr);   /* a wrapped buffer's */
    void *user, *wrapped;  /* wrapped: the caller's pointer; NULL if ours */
} ot_buffer;

struct ot_tensor {
    ot_node leaf;         /* first member: a tensor is its own leaf node.
                             leaf.refs counts the creator plus every parent
                             node; dtype, shape and be live here. */
    ot_buffer *buf;
    int64_t strides[OT_MAX_DIMS];  /* in elements; may be 0 or negative */
    int64_t offset;                /* in elements, from buf->data */
    char *name;
    bool readonly;                 /* a broadcast view */
    uint64_t serial;               /* unique among its backend's tensors, never
                                      reused: the digest's name for the view */
};

static inline ot_tensor *ot__leaf_tensor(const ot_node *n)
{
    return (ot_tensor *)n;    /* valid only for kind == OT_NODE_LEAF */
}
/* Called by ot_release when a leaf's refcount reaches zero. */
/* A view of t's buffer; shape and strides beyond ndim must be zero so that
 * views compare equal field by field. Read-only-ness is inherited. NULL
 * with OT_ENOMEM when the struct cannot be allocated. */
ot_tensor *ot__view_new(const ot_tensor *t, const ot_shape *shape, const int64_t *strides,
                        int64_t offset, const char *fn);
/* Row-major strides (in elements) of a new tensor of shape s; false when
 * its size in bytes (isz per element) overflows. Zero-size shapes are
 * checked too: their other dims still multiply into strides. */
bool ot__contiguous_strides(const ot_shape *s, size_t isz, int64_t *strides);
void ot__tensor_destroy(ot_tensor *t);

/* The one view equality: a and b read the same elements in the same order
 * (same buffer, offset, dtype and shape; strides equal on every dim of size
 * > 1, since a size-1 dim's stride addresses nothing). Used by the plan key,
 * the stack and the overlap test. */
bool ot__same_view(const ot_tensor *a, const ot_tensor *b);
/* One NumPy index of dim d of shape (view.c): the first index, the count
 * (-1 for an index, its dim dropped) and the step, or an error recorded by
 * fail (ot__err or ot__err_set) against file:line. ot_slice and
 * ot_slice_node share it. */
/* Strides that read a view of shape os and strides ostrides (numel > 0)
 * in shape ns without a copy (view.c; ot_reshape's rule): 0, or nonzero
 * when that needs a copy or a stride overflows. */
int ot__reshape_strides(const ot_shape *os, const int64_t *ostrides, const ot_shape *ns,
                        int64_t *out);
typedef int ot__fail_fn(int code, const char *file, int line, const char *op, const char *fmt, ...);
int ot__index_resolve(ot_index ix, int d, const ot_shape *shape, ot__fail_fn *fail,
                      const char *file, int line, int64_t *first, int64_t *count, int64_t *step);
/* The same rule as words, for hashing views (ot__node_ident's leaves by
 * view): buffer, offset, shape and the strides of dims of size > 1; with
 * the dtype, equal exactly when ot__same_view. Returns the count, at most
 * 2 + 2 * OT_MAX_DIMS. */
int ot__view_ident(const ot_tensor *t, int64_t *w);
/* Memory overlap of two views, after ATen's MemoryOverlap: zero-size views
 * never overlap; same buffer, offset, shape and strides is FULL; disjoint
 * byte ranges, or views no index pair of which meets (interleaved
 * x[0::2], x[1::2]; a bounded exact search), are NONE; anything else is
 * PARTIAL (conservative). */
enum { OT_OVERLAP_NONE = 0, OT_OVERLAP_FULL = 1, OT_OVERLAP_PARTIAL = 2 };
int ot__overlap(const ot_tensor *a, const ot_tensor *b);
/* True when two distinct indices of t address one element (stride 0 on a
 * dim of size > 1, or overlapping strides); *dim gets the culprit dim. */
bool ot__internal_overlap(const ot_tensor *t, int *dim);

/* Whether dt is one of the 16-bit storage dtypes (half.h), which every
 * layer routes through the conversions. */
static inline bool ot__is_half(int dt) { return dt == OT_F16 || dt == OT_BF16; }

/* Element load/store in a dtype. Stores into OT_I32 truncate toward zero,
 * map NaN to 0 and saturate out-of-range values (never undefined); into
 * OT_F16/OT_BF16 they round once to nearest even (half.h). */
static inline double ot__load(const void *p, ot_dtype dt)
{
    switch (dt) {
    case OT_F32: return *(const float *)p;
    case OT_F64: return *(const double *)p;
    case OT_F16: return ot__f16_to_f32(*(const uint16_t *)p);
    case OT_BF16: return ot__bf16_to_f32(*(const uint16_t *)p);
    default: return *(const int32_t *)p;
    }
}
static inline int32_t ot__to_i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}
static inline void ot__store(void *p, ot_dtype dt, double v)
{
    switch (dt) {
    case OT_F32: *(float *)p = (float)v; break;
    case OT_F64: *(double *)p = v; break;
    case OT_F16: *(uint16_t *)p = ot__f64_to_f16(v); break;
    case OT_BF16: *(uint16_t *)p = ot__f64_to_bf16(v); break;
    default: *(int32_t *)p = ot__to_i32(v); break;
    }
}

/* An exact sum of integers (int32 sums and means, issue 31): hi * 2^62 + lo
 * with |lo| < 2^62, so that no sum of int32 values over any tensor wraps
 * (a plain int64 would after 2^32 elements of 2^31). Terms must be below
 * 2^62 in magnitude. Both backends add and read it the same way, so an
 * int32 sum fits or overflows on both alike. */
typedef struct ot__wide {
    int64_t hi, lo;
} ot__wide;
#define OT__WIDE_UNIT ((int64_t)1 << 62)
static inline void ot__wide_add(ot__wide *w, int64_t t)
{
    w->lo += t;   /* |lo| + |t| < 2^63 */
    if (w->lo >= OT__WIDE_UNIT) {
        w->lo -= OT__WIDE_UNIT;
        w->hi++;
    } else if (w->lo <= -OT__WIDE_UNIT) {
        w->lo += OT__WIDE_UNIT;
        w->hi--;
    }
}
static inline void ot__wide_merge(ot__wide *w, ot__wide x)
{
    w->hi += x.hi;
    ot__wide_add(w, x.lo);
}
/* The sum as an int64 when it is one (|hi| <= 1 always fits), else false. */
static inline bool ot__wide_int64(ot__wide w, int64_t *v)
{
    if (w.hi < -1 || w.hi > 1) return false;
    *v = w.lo + w.hi * OT__WIDE_UNIT;
    return true;
}
/* The sum as an int32 value, or false when it does not fit int32. */
static inline bool ot__wide_int32(ot__wide w, int32_t *v)
{
    int64_t s;
    if (!ot__wide_int64(w, &s) || s < INT32_MIN || s > INT32_MAX) return false;
    *v = (int32_t)s;
    return true;
}
/* The sum rounded to double: once, where it fits int64 (any int32 sum of
 * fewer than 2^32 elements). */
static inline double ot__wide_double(ot__wide w)
{
    int64_t s;
    return ot__wide_int64(w, &s) ? (double)s : (double)w.hi * (double)OT__WIDE_UNIT + (double)w.lo;
}
/* Records "int32 sum ... does not fit" for a sum node n: its operand's
 * shape, the axis and n's file:line. Returns OT_EOVERFLOW. */
int ot__int_sum_overflow(const ot_node *n);


/* ---- sizes and shapes ---------------------------------------------------- */

/* Checked size arithmetic: false on overflow. Every size goes through here. */
static inline bool ot__mul_size(size_t *r, size_t a, size_t b)
{
    return !__builtin_mul_overflow(a, b, r);
}
/* Checked element arithmetic for strides and offsets: false on overflow. */
static inline bool ot__mul_i64(int64_t *r, int64_t a, int64_t b)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool ot__add_i64(int64_t *r, int64_t a, int64_t b)
{
    return !__builtin_add_overflow(a, b, r);
}
static inline bool ot__add_size(size_t *r, size_t a, size_t b)
{
    return !__builtin_add_overflow(a, b, r);
}
/* Validates a shape for a tensor or node of dtype (or 0 to skip the byte
 * size): ndim in [0, 8], dims >= 0, numel * itemsize fits in PTRDIFF_MAX.
 * On failure records the error for op at file:line and returns the code. */
int ot__shape_check(const ot_shape *s, ot_dtype dtype, const char *op,
                    const char *file, int line);
/* What ot__shape_check finds wrong, described into msg, not recorded (for
 * a caller that names more than the op: a loader, its file); the code or 0. */
int ot__shape_problem(const ot_shape *s, ot_dtype dtype, char *msg, size_t len);
/* Product of dims (the shape must have passed ot__shape_check). */
int64_t ot__numel(const ot_shape *s);
bool ot__shape_eq(const ot_shape *a, const ot_shape *b);
/* NumPy broadcasting of a and b into *out. On failure returns false and sets
 * *bad_dim to the offending dim of the result (counted from the left). */
bool ot__broadcast(const ot_shape *a, const ot_shape *b, ot_shape *out, int *bad_dim);
/* "(3,4)", "(3,)", "()" into buf, which must hold OT__SHAPE_STRLEN chars. */
#define OT__SHAPE_STRLEN 192
const char *ot__shape_str(const ot_shape *s, char *buf);

/* ---- errors -------------------------------------------------------------- */

/* Records an error for a builder: kept only when the slot is empty (the first
 * error of an expression wins). Message: "file:line: op: <fmt>" (file and op
 * parts omitted when NULL). Calls the handler. Returns code. */
int ot__err(int code, const char *file, int line, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same, but replaces whatever the slot held (for functions that work). */
int ot__err_set(int code, const char *file, int line, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* For a function that does work and was handed a NULL tree or tensor:
 * returns the code already in the slot, or records OT_ENULL naming what. */
int ot__err_null(const char *fn, const char *what);
/* The same, for an error already recorded (and handed to the handler)
 * that a caller rewords with its place, name or context: the slot takes
 * the new message and the handler is not called again, so it sees each
 * error once, as first recorded. */
int ot__err_reword(int code, const char *file, int line, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* For a function that failed with code in a call it made for its caller
 * (an optimizer step's assign_many, a model's savez): the slot's message
 * recorded again under the caller's file:line and op, the inner one kept
 * ("m.c:6: model_save: savez: cannot open ..."); an error already the
 * caller's, at its place, stays as it is; returns code. */
int ot__err_relabel(int code, const char *file, int line, const char *op);
/* The slot's error, when it names no place (one found while evaluating,
 * deep in a backend or on a worker thread), recorded again under the
 * caller's file:line; errors that name a place keep it. Only on failure:
 * an assignment pays nothing for it. */
void ot__err_place(const char *file, int line);
/* The caller's file:line for a public function without one of its own
 * (tensor_at.c's _at entry points): errors recorded while it runs without
 * a place take it. enter returns the place before, which leave restores;
 * file NULL keeps an outer call's place. */
typedef struct ot__callsite {
    const char *file;
    int line;
} ot__callsite;
ot__callsite ot__site_enter(const char *file, int line);
void ot__site_leave(ot__callsite outer);
/* Whether a public call's place is set (errors without one take it). */
bool ot__site_placed(void);
/* msg without the call site's "file:line: " in front, for a function that
 * puts an inner error inside its own message (ot_parse's "col 5: ..."),
 * which the site then prefixes once. */
const char *ot__site_strip(const char *msg);
/* name_at(params, file, line): (name)(args) run under the caller's place
 * (tensor_at.c, and io.c and autodiff.c at their ends, define every twin
 * so, and nothing else). */
#define OT__AT_TWIN(ret, name, params, args)                                  \
    ret name##_at params                                                      \
    {                                                                         \
        ot__callsite outer = ot__site_enter(file, line);                      \
        ret r = (name) args;                                                  \
        ot__site_leave(outer);                                                \
        return r;                                                             \
    }

/* ---- backends ------------------------------------------------------------ */

/* A step a backend has prepared to run many times (a program's): what the
 * front end reads and, between runs, repoints. The backend fills it in
 * prepare and frees what it holds in release. */
typedef struct ot__prepared {
    void *impl;                /* the backend's own (cpu: its plan, referenced) */
    char **leaf;               /* base pointer of each leaf the step reads
                                  (element 0 of its view); a run reads them
                                  anew, so a caller may repoint them */
    const double *param;       /* the constants bound */
    ot_tensor *const *outs;    /* the outputs */
    int nleaf;
    int kernels;               /* what ot_program_stats reports */
    size_t arena_bytes;        /* the scratch a run needs */
} ot__prepared;

/* What a backend is to the rest of the library: every call from above goes
 * through these slots, so no file outside a backend's own knows which one
 * it holds. The optional slots are NULL where a backend has no use for them;
 * backend.c and program.c then take a generic path. */
typedef struct ot_backend_vt {
    const char *name;
    bool cpu_opts;                     /* honours the cpu-only options (isa,
                                          jit, stream_bytes); false: backend.c
                                          reports them as not in force */
    int (*init)(ot_backend *be);       /* sets up impl; may be NULL */
    /* Evaluates every tree before writing any output. Called after the
     * common checks of backend.c: no NULLs, every tree broadcasts to its
     * output, dtypes allowed, outputs writable and mutually disjoint. */
    int (*assign_many)(ot_backend *be, int n, ot_tensor *const outs[],
                       ot_node *const trees[]);
    void (*destroy)(ot_backend *be);   /* frees impl; may be NULL */
    /* ot_explain's text for n checked (and rewritten) trees into outs
     * (NULL: fresh outputs), written to f; OT_EIO alone for a failed write.
     * NULL: the backend cannot explain (OT_EUNSUPPORTED). */
    int (*explain)(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                   FILE *f);
    /* Programs. prepare readies n checked trees into outs for many runs
     * into *s; run runs it (the leaf pointers as they are now) in an arena of
     * s->arena_bytes, its errors naming trees; explain_prepared writes its
     * ot_explain text; release frees it (a zeroed one
     * too: a step whose preparing failed). All four NULL: a program runs its
     * steps through assign_many (backend.c's generic path). */
    int (*prepare)(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                   ot__prepared *s);
    int (*run)(ot_backend *be, const ot__prepared *s, char *arena, int n,
               ot_node *const trees[]);
    int (*explain_prepared)(const ot__prepared *s, FILE *f);
    void (*release)(ot__prepared *s);
} ot_backend_vt;


struct ot_backend {
    const ot_backend_vt *vt;
    ot_backend_opts opts;     /* in force: defaults and overrides filled in */
    const char *isa_from;     /* where opts.isa was set, for messages:
                                 "isa" or "OT_ISA" */
    size_t l3_bytes;          /* OT_L3_BYTES: the last-level cache to plan
                                 for; 0: the machine's */
    size_t l2_bytes;          /* OT_L2_BYTES: a core's L2, likewise */
    const char *blas_core;    /* OT_BLAS_CORE: "keep", "auto" or an OpenBLAS
                                 core name (src/cpu/blas_core.c) */
    ot__stat_counters stats;   /* stats.c */
    void *impl;
    _Atomic(struct ot_ad_memo *) ad_memo;  /* autodiff.c: memoised objects */
    struct ot__rewrite *rewrite;   /* rewrite.c: the rule sets in force; NULL
                                      (the default) when none */
    atomic_uint_fast64_t serials;  /* the last tensor serial handed out */
    atomic_int_fast64_t holds;     /* the creator's handle until
                                      ot_backend_free, one per tensor struct
                                      made on it, one per program: the last
                                      drop tears it down (ot__backend_drop) */
    atomic_bool freed;             /* ot_backend_free was called */
    void (*teardown)(struct ot_backend *);   /* backend.c's, for the last
                                                drop (core cannot call it) */
    atomic_uint_fast64_t sr_count; /* assignments under opts.stochastic_round
                                      so far: each one's stream of bits */
};
/* A backend outlives ot_backend_free while tensors or programs made on it
 * do (tensor.c): using one then is an error, never a read of freed
 * memory. hold and drop count them; the last drop calls be->teardown. */
void ot__backend_hold(ot_backend *be);
void ot__backend_drop(ot_backend *be);
/* OT_EBACKEND set, naming fn, the caller's site and what is on be, when
 * ot_backend_free freed be; else 0. Inline: every assignment asks. */
int ot__backend_gone_err(const ot_backend *be, const char *fn, const char *file, int line,
                         const char *what);
static inline int ot__backend_gone(const ot_backend *be, const char *fn, const char *file,
                                   int line, const char *what)
{
    if (!be || !atomic_load_explicit(&be->freed, memory_order_relaxed)) return 0;
    return ot__backend_gone_err(be, fn, file, line, what);
}
/* The backend name and options in force (config.c): opts checked, defaults
 * and environment overrides applied; -1 with the error set when any is bad.
 * *isa_from tells where opts->isa came from, for messages; *rewrite gets
 * the rule sets in force (NULL: t_stack_new is this with n = 1. */
ot_stack *ot__stack_new_many(int n, const ot_node *const roots[], int roots_out[]);
/* ot_substitute of n leaves at once (old[i] by new_t[i]) without its shape
 * check: new_t[i] may have another shape, the nodes above being rebuilt by
 * their builders (which check it), after every leaf is replaced. */
ot_node *ot__substitute(ot_node *tree, int n, ot_tensor *const old[], ot_tensor *const new_t[]);
/* Layouts that follow their operand's size (layout.c). A library builder
 * that merges axes to reduce over them (layer norm's, batch norm's) or
 * flattens (attention's pack) means "these axes merged", not the nominal
 * shape; a slice's OT_ALL dim means the whole dim. The nodes record that
 * in members their op's identity does not read (ops.def's attrs), so a
 * rebuild over an operand of another size (ot__substitute: a program's
 * specialisation to another batch) derives the shape, where the nominal
 * one failed (a reshape) or read part of the operand (a slice):
 * - reshape: args.start[i] = 1 + the group of operand axis i, args.perm[j]
 *   = 1 + the group of result axis j, groups of consecutive axes in both,
 *   each group's sizes of one product; all 0 for a caller's fixed shape;
 * - slice: bit d of args.depth, operand dim d taken whole.
 * ot__reshape_join_at: x with each axis d (d >= 1) whose bit is set in
 * join merged into axis d - 1 (x itself when no bit is). */
ot_node *ot__reshape_join_at(ot_node *x, unsigned join, const char *file, int line);
/* y, of shape `to` joined by join, reshaped back to `to` (y itself when
 * no axis is joined). */
ot_node *ot__reshape_unjoin_at(ot_node *y, const ot_shape *to, unsigned join, const char *file,
                               int line);
/* args (n's, for a rebuild of n over operand a) with the recorded shape
 * derived from a's shape; other args are left as they are. */
void ot__layout_follow(const ot_node *n, const ot_node *a, ot_args *args);

/* ---- axis names (axes.c) ------------------------------------------------ */

/* The names of a node's dims: one per dim, [A-Za-z_][A-Za-z0-9_]*, at most
 * OT__AXIS_NAME_MAX - 1 chars, no duplicates. Interned for the life of the
 * process, so equal sets are one pointer and nodes never own them. */
#define OT__AXIS_NAME_MAX 32
typedef struct ot__axes {
    int ndim;
    uint8_t off[OT_MAX_DIMS], len[OT_MAX_DIMS];   /* each name within text */
    char text[OT_MAX_DIMS * OT__AXIS_NAME_MAX];    /* "N,C,H,W" */
} ot__axes;
/* The names of n's result from its operands' (a node just built, at least
 * one operand named): set on n. 0, or OT_ENOMEM with the error set. */
int ot__axes_infer(ot_node *n);
/* a op b for two operands named differently: each brought by name into the
 * result's layout (a's names, then b's others in b's order), by views of
 * tensors or transposes of expressions; *out gets the result's names. */
int ot__axes_align(const char *op, const char *file, int line, ot_node **a, ot_node **b,
                   const ot__axes **out);
/* ot_build_at with operands broadcast by position whatever their names
 * (node.c): autodiff's gradient nodes, whose operands the forward tree
 * has aligned already; by name, g(C) * x(N,C) came out (C,N), and the
 * gradient summed over the wrong axis. */
ot_node *ot__build_positional(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                              const char *file, int line);
/* Assignment by name: a tree named otherwise than its named output is
 * brought into the output's order (as ot__axes_align brings an operand),
 * *tree replaced; OT_EINVAL for a name the output lacks, OT_ESHAPE for a
 * length that neither matches nor is 1. Either side unnamed: positions, as
 * NumPy, *tree untouched. */
int ot__axes_fit(const char *fn, const char *file, int line, const struct ot_tensor *out,
                 ot_node **tree);
/* A view v of t named from t's: v's dim i is t's dim src[i] (v's rank of
 * them). Unnamed t: nothing. Returns v, or NULL (v freed) on OT_ENOMEM. */
ot_tensor *ot__axes_view(ot_tensor *v, const ot_tensor *t, const int *src);

/* ---- windowed ops (conv_shape.c) ------------------------------------------ */

/* The spatial dims of a conv, conv_transpose or conv_wgrad node (args.win's
 * entries in use): all but its first two. */
static inline int ot__win_dims(const ot_node *n) { return n->shape.ndim - 2; }
/* Whether option array v (3 entries, option `member` of op) sets an entry
 * past x's spatial dims (an error recorded then): only its first entry
 * may be set alone when it `spreads` to every dim ({2} is 2 in each). */
bool ot__win_extra(const char *op, const char *member, const int *v, bool spreads, const ot_node *x,
                   const char *file, int line);
/* op (OT_OP_CONV...) of a and b with geometry win, checked as any build. */
ot_node *ot__conv_build(ot_op op, ot_node *a, ot_node *b, const ot_window *win, const char *file,
                        int line);
/* One spatial dim's output size: conv's (floor; for a dilated kernel known
 * to fit the padded input), conv_transpose's (false when it overflows). */
int64_t ot__conv_out_size(int64_t in, int64_t k, int stride, int dil, int lo, int hi);
bool ot__conv_transpose_size(int64_t in, int64_t k, int stride, int dil, int lo, int hi,
                             int outpad, int64_t *out);

/* Every windowed op as one loop: for batch n, group, S channel o and S
 * position p, X channel c and kernel position q, with X position i = p *
 * stride + q * dilation - pad_lo (skipped outside X):
 *   conv            S[n, o, p]  = sum X[n, c, i] W[o, c, q]   (X, W -> S)
 *   conv_transpose  X[n, c, i] += S[n, o, p] W[o, c, q]       (S, W -> X)
 *   conv_wgrad      W[o, c, q] += S[n, o, p] X[n, c, i]       (X, S -> W)
 * X is (N, groups * xc, xp...), S (N, groups * sc, sp...), W (groups *
 * sc, xc, k...); channels o and c of a group g are g * sc + o, g * xc + c.
 * Spatial dims past the node's are 1 (stride and dilation 1, no pad). */
typedef struct ot__conv_geom {
    int64_t n, groups, sc, xc;
    int64_t sp[3], xp[3], k[3];
    int64_t stride[3], dil[3], lo[3];
} ot__conv_geom;
void ot__conv_geom_of(const ot_node *node, ot__conv_geom *g);
/* The gradient of windowed node n with respect to operand `which` (0: a,
 * 1: b), g being the gradient of n (of n's shape): a windowed node too,
 * so gradients of gradients are built alike. */
ot_node *ot__conv_grad(const ot_node *n, ot_node *g, int which, const char *file, int line);
/* x, and *g in place, as one dtype, for a gradient rule whose op wants its
 * operands alike: where they differ (mixed precision: a 16-bit operand
 * under an f32 gradient, or the reverse), both as the wider, f64 over
 * anything, else f32 (to which a 16-bit value widens exactly). x itself
 * where they agree or *g is NULL; NULL where a cast fails (its error set). */
ot_node *ot__alike(const ot_node *x, ot_node **g, const char *file, int line);

/* ---- pooling (pool_shape.c) ------------------------------------------------ */

static inline bool ot__is_pool(int op) { return op >= OT_OP_MAX_POOL && op <= OT_OP_AVG_POOL_GRAD; }
/* A pooling node's loop: each of n * c planes of input X (in...) and
 * output Y (out...); window p of Y covers X positions p * stride + q *
 * dil - lo for q < k, the ones outside X being padding. The forward ops
 * and max_pool_take read X-shaped operands into Y; the gradients read
 * Y-shaped ones into X. Spatial dims past the node's are 1 (k 1, stride
 * 1, no pad). excl: avg divides by the window's count of X elements;
 * else by its taps before the padded input's end (in + hi), PyTorch's. */
typedef struct ot__pool_geom {
    int op;
    int64_t n, c;
    int64_t in[3], out[3], k[3], stride[3], dil[3], lo[3], hi[3];
    bool excl;
} ot__pool_geom;
void ot__pool_geom_of(const ot_node *node, ot__pool_geom *g);
/* avg_pool's divisor for window p (per dim: p[d]), as above. */
double ot__pool_divisor(const ot__pool_geom *g, const int64_t *p);
/* The gradient of pooling node n with respect to operand `which` (0: a,
 * 1: b), g being the gradient of n: a pooling node, or NULL where it is
 * zero (max_pool_grad and max_pool_take are flat in x). */
ot_node *ot__pool_grad(const ot_node *n, ot_node *g, int which, const char *file, int line);

/* ---- indexing (index_shape.c) ---------------------------------------------- */

static inline bool ot__is_index(int op) { return op >= OT_OP_TAKE && op <= OT_OP_SCATTER_ALONG; }
/* An indexing node's loop. take and scatter_add view the indexed operand
 * (take's a, scatter_add's result) as (outer, size, inner) and the other
 * as (outer, count, inner), count the indices' number (b, in row-major
 * order); cumsum views a and its result as (outer, size, inner). select broadcasts a (the condition) and b to out; tril and triu
 * mask a's last two axes by diagonal diag. */
typedef struct ot__index_geom {
    int op, axis;
    int64_t outer, size, count, inner, diag;
    ot_shape a, b, out;
} ot__index_geom;
void ot__index_geom_of(const ot_node *n, ot__index_geom *g);
/* Index v wrapped once (NumPy: -size <= v < size), or -1 when outside. */
static inline int64_t ot__index_wrap(int64_t v, int64_t size)
{
    if (v < 0) v += size;
    return v >= 0 && v < size ? v : -1;
}
/* Sets the error for index v, the pos-th (row-major) of g's indices, and
 * returns OT_EINVAL: both backends' message. */
int ot__index_fail(const ot__index_geom *g, int64_t v, int64_t pos);
/* The gradient of indexing node n in operand `which` (0: a, 1: b), g of
 * n's shape: an indexing node, or NULL where there is none (indices, a
 * select's condition). */
ot_node *ot__index_grad(const ot_node *n, ot_node *g, int which, const char *file, int line);
/* ---- top-k and along-axis indexing (topk_shape.c) --------------------------- */

/* topk, take_along and scatter_along: indexing ops (ot__is_index) with
 * ot__index_geom's (outer, size, inner) frame on the line-indexed operand
 * (topk's and take_along's a, scatter_along's result) and (outer, count,
 * inner) on the other and the indices (count: k); diag holds topk's mode
 * (OT__TOPK_SMALLEST | OT__TOPK_UNSORTED). */
static inline bool ot__is_topk(int op) { return op >= OT_OP_TOPK && op <= OT_OP_SCATTER_ALONG; }
enum { OT__TOPK_SMALLEST = 1, OT__TOPK_UNSORTED = 2 };
void ot__topk_geom_of(const ot_node *n, ot__index_geom *g);
/* Whether element (a, ia) ranks before (b, ib) in topk's order: the
 * larger (smaller when !largest) first, NaN above every number (so first
 * when largest, last when smallest), equal values (+0 and -0 too) by
 * position, the lower first: a stable sort's order. Both backends rank
 * with this one rule. */
static inline bool ot__topk_before(double a, int64_t ia, double b, int64_t ib, bool largest)
{
    bool na = a != a, nb = b != b;
    if (na || nb) return na && nb ? ia < ib : largest ? na : nb;
    if (a != b) return largest ? a > b : a < b;
    return ia < ib;
}
/* The gradient of topk node n in operand which, as ot__index_grad. */
ot_node *ot__topk_grad(const ot_node *n, ot_node *g, int which, const char *file, int line);

/* ---- attention (attn_shape.c) ---------------------------------------------- */

static inline bool ot__is_attn(int op) { return op == OT_OP_ATTENTION || op == OT_OP_ATTENTION_GRAD; }
/* An attention node's loop (optree/attention.h; ops.def's rows): per
 * (batch, head), q (sq x d), k (sk x d), v (sk x dv) and the mask of dims
 * mdim (each 1, broadcast, or its full size) at element offsets koff,
 * voff and moff of the flat pack operand (b). attention reads q as a,
 * attention_grad reads x = [q | o, lse | do, dlse] (d + 2 (dv + 1)
 * columns) as a. A query row sees key j when the mask allows it and, if
 * causal, j <= i (top-left aligned). */
typedef struct ot__attn_geom {
    int op;
    int64_t b, h, sq, sk, d, dv;
    int64_t mdim[4];
    bool mask, causal;
    double scale;
    int64_t koff, voff, moff, npack;
} ot__attn_geom;
void ot__attn_geom_of(const ot_node *node, ot__attn_geom *g);
/* args (attention node n's, for a rebuild over operands a and b) with
 * seq_k derived from the new pack b, when a's and b's sizes give one: a
 * program specialised to another sequence length rebuilds the node over
 * a longer or shorter pack, whose seq_k the recorded attribute no longer
 * is (ot__layout_follow's counterpart). */
void ot__attn_follow(const ot_node *n, const ot_node *a, const ot_node *b, ot_args *args);
/* Whether a row's stored logsumexp (in a dtype of epsilon eps) is too large
 * for exp(s - lse) to be its P: lse = max + log(sum) keeps log(sum) only to
 * lse's ulp, which at a max of -1e9 (a row a large finite mask hides) is
 * 64, and every key's P came out 1 where the softmax gives 1/n. From an
 * ulp of 2^-12 on, both backends' backwards renormalise the row. */
static inline bool ot__attn_lse_lossy(double lse, double eps)
{
    return isfinite(lse) && fabs(lse) * eps >= 0x1p-12;
}
/* The gradients of attention node n (pack = n->b) given g, n's gradient:
 * *dq (q's shape) and *dpack (pack's), views of one attention_grad node;
 * false with the error set. */
bool ot__attn_grads(const ot_node *n, ot_node *g, ot_node **dq, ot_node **dpack, const char *file,
                    int line);

/* ---- the post-order walk and node identity ---------------------------- */

/* walk.h: the one walker over node DAGs (walk.c) and ot__node_ident. */
#include "walk.h"

/* ---- random numbers ------------------------------------------------------ */

/* The uniform [0, 1) draw of element idx of a rand node with attribute seed,
 * on a backend with seed be_seed: Philox-2x32-10 keyed by both seeds. OT_F32
 * draws have 24 random bits and OT_F64 draws 53, so each is exact in its
 * dtype and never rounds up to 1. */
double ot__rand_uniform(uint64_t be_seed, uint64_t seed, uint64_t idx, ot_dtype dt);

/* ---- small shared helpers ------------------------------------------------ */

/* memset(p, 0, n) through a size the compiler cannot see: GCC inlines a
 * constant-size clear of a few hundred bytes as rep stos, whose start-up
 * cost was a fifth of W8's time (nodes, build protos, run contexts); the C
 * library's memset uses vector stores. */
static const volatile size_t ot__opaque_zero = 0;
static inline void ot__clear(void *p, size_t n) { memset(p, 0, n + ot__opaque_zero); }

/* Shortest text that reads back as v (Python's repr: 1.0, 0.1, inf, nan). */
void ot__fmt_double(char *buf, size_t n, double v);

/* The format NumPy's array2string (floatmode 'maxprec', the default) picks
 * for the values an array print shows; print.c. Start it, pass every value
 * shown to _see while _next_pass asks for another pass, then _str writes
 * each value, every one the same width. */
typedef struct ot__numfmt {
    int kind;                  /* integer, positional or scientific */
    bool f32;
    uint8_t half;              /* OT_F16 or OT_BF16: digits read back in it */
    int precision;             /* digits after the point, at most (positional)
                                  or exactly (scientific) */
    int pad_left, pad_right, exp_size, width;
    int pass;
    double max_abs, min_abs;   /* over the finite non-zero values */
    bool finite, neg_inf, non_finite;
} ot__numfmt;
enum { OT__NUMFMT_STRLEN = 64 };
void ot__numfmt_start(ot__numfmt *f, ot_dtype dt, int precision);
void ot__numfmt_see(ot__numfmt *f, double v);
bool ot__numfmt_next_pass(ot__numfmt *f);
int ot__numfmt_str(const ot__numfmt *f, double v, char buf[OT__NUMFMT_STRLEN]);

#endif /* OT_INTERNAL_H */
