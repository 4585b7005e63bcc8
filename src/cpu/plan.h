/*
 * plan.h - what the passes of the cpu backend's compiler share (never
 * included outside them): the walk's entries, the compiler's per-entry
 * facts, a register program under construction, and each pass's entry
 * points. The passes run in this order, each file with its contract at the
 * top; compile.c is the driver:
 *
 *   plan_key.c    trees -> entries in post-order, the key, the plan cache
 *   plan_fuse.c   CSE, what is materialised (cost model), GEMM roots, storage
 *   plan_build.c  the kernels, through plan_emit.c's register programs
 *   plan_sched.c  dot segments, temporaries kept in outputs, arena, row blocks,
 *                 which kernels stream their output
 *   plan_verify.c (with -DOT_VERIFY_PLANS) the invariants between passes
 *
 * A pass file includes this header only, never another pass's file.
 */
#ifndef OT_PLAN_H
#define OT_PLAN_H

#include "cpu.h"

/* ---- the walk (plan_key.c) ------------------------------------------------ */

typedef struct ent {
    uint8_t kind;              /* OT_NODE_* */
    int8_t op;
    uint8_t dtype;
    int32_t a, b;              /* operand entries, -1 when absent */
    int32_t slot;              /* leaf slot or param index */
    bool one;                  /* a constant equal to 1 */
    bool zero;                 /* a constant equal to 0 */
    const ot_node *node;
} ent;

struct ot_walk {
    ent *e;
    int n, cap;
    ot__walker walker;         /* numbers nodes: its index is the entry */
    const ot_tensor **leaf;    /* one per slot: the first view seen */
    char **leafptr;
    int nleaf, leafcap;
    double *param;
    int nparam, paramcap;
    uint8_t *key;
    size_t klen, kcap;
    int *root;                 /* entry of each tree */
    int rootcap, leafptrcap;
    uint64_t hash;
    uint64_t start_ns;         /* when a full walk began: a miss's compile time counts it */
};

/* ---- small helpers --------------------------------------------------------- */

static inline bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    size_t bytes;
    if (!ot__mul_size(&bytes, (size_t)c, elem)) return false;
    void *q = ot__realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- the compiler's state ---------------------------------------------------- */

/* Where a materialised entry's values live, as a strided view. */
typedef struct storage {
    bool has;
    uint8_t space;
    int32_t index;
    uint8_t dtype;
    ot_shape shape;
    int64_t strides[OT_MAX_DIMS];
    int64_t offset;            /* elements from the base (views of slices) */
} storage;

/* Output i is dot * alpha + out * beta, computed by one BLAS call writing
 * the output (neon's compound_dot); beta NONE for a plain dot. */
typedef struct gemm_root {
    int dot;                   /* the dot's entry, or -1 */
    ot_scale alpha, beta;
} gemm_root;

typedef struct cinfo {
    int canon;                 /* the entry this one merged into */
    int uses;                  /* readers among canonical entries and roots */
    bool mat;                  /* materialised: computed by its own kernel */
    int need, size;            /* register need and region size estimates */
    bool in_parent;            /* a concat stored in its one reader's storage
                                  (a concat), which so copies nothing */
    storage st;
    gemm_root over_out;        /* dot > 0: an add stored in an output by one
                                  BLAS call (ot__fuse_mark_direct_roots);
                                  0 is none, as no dot is entry 0 (its
                                  operands come first) */
} cinfo;

typedef struct compiler {
    ot_backend *be;
    const ot_kernels *k;
    const ot_walk *w;
    ot_tensor *const *outs;
    ot_node *const *trees;
    int nout;
    cinfo *ci;
    ot_plan *plan;
    int kcap, tcap;
    bool fused;
    bool oom;
    gemm_root *groot;          /* per output: written by one BLAS call? */
    int *kernel_at;            /* while kernels are built: per entry, the
                                  first entry whose kernel reads it */
} compiler;


static inline const ot_node *node_of(const compiler *c, int e) { return c->w->e[e].node; }
static inline int kind_of(const compiler *c, int e) { return ot_op_kind((ot_op)c->w->e[e].op); }
static inline bool is_op(const compiler *c, int e) { return c->w->e[e].kind == OT_NODE_OP; }
static inline bool is_ew(const compiler *c, int e)
{
    if (!is_op(c, e)) return false;
    int k = kind_of(c, e);
    int op = c->w->e[e].op;
    return k == OT_KIND_UNARY || k == OT_KIND_BINARY || op == OT_OP_CAST || op == OT_OP_KEEP;
}

static inline int canon_of(const compiler *c, int e) { return e >= 0 ? c->ci[e].canon : -1; }

static inline int canon_operand(const compiler *c, int e, int which)
{
    return canon_of(c, which == 0 ? c->w->e[e].a : c->w->e[e].b);
}

static inline void contiguous(storage *s)
{
    int64_t st = 1;
    for (int i = s->shape.ndim - 1; i >= 0; i--) {
        s->strides[i] = st;
        st *= s->shape.dims[i] ? s->shape.dims[i] : 1;
    }
}

static const ot_scale ONE = {-1, 1}, NONE = {-1, 0};

/* ---- register programs (plan_emit.c) ------------------------------------------ */

/* Builds one register program: values are SSA, then mapped onto buffers. */
typedef struct value {
    uint8_t kd;
    bool scalar;
    int last_use;              /* insn index, or INT_MAX for the result */
    int buf;
} value;

typedef struct prog {
    compiler *c;
    ot_kernel *k;
    int *val;                  /* entry -> value, -1 when not yet emitted */
    int *stamp;                /* entry -> kernel id that marked it */
    int id;
    value *v;
    int nv, vcap;
    ot_insn *ins;
    int nins, icap;
    int *fused;                /* entry -> id of the kernel folding it into an fma */
    int *region;               /* the entries of the current region, sorted */
    int nregion, regioncap;
    int *dfs;                  /* the marking walk's stack */
    int dfscap;
    int xval[OT_MAX_XSTORES];  /* the values of the kernel's further outputs */
} prog;

/* Marks value v as used by the instruction being emitted. Static: a plain
 * C99 inline has no external definition, so a build that does not inline
 * every call (gcc -O0, clang -O1) would fail to link. */
static inline int ot__emit_use(prog *g, int v)
{
    if (v >= 0) g->v[v].last_use = g->nins;
    return v;
}

static inline bool same_strides(const ot_view *a, const ot_view *b, int nd)
{
    if (a->offset != b->offset) return false;   /* walks of one base, shifted */
    for (int i = 0; i < nd; i++)
        if (a->strides[i] != b->strides[i]) return false;
    return true;
}

static inline ot_shape out_shape(const compiler *c, int i)
{
    return c->outs ? c->outs[i]->leaf.shape : c->trees[i]->shape;
}

/* ---- entry points of the passes ---------------------------------------------- */

/* plan_key.c, below the driver: the plan of n trees into outs (see
 * ot__plan_get) from a root's memo, the digest table or the cache, with
 * *walk and *bind filled; *plan NULL on a miss, *walk then holding the
 * walk to compile. ot__plan_keep keeps a freshly compiled plan p of walk w
 * in the cache (a reference of its own) and the memos. */
int ot__plan_find(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                  ot_plan **plan, ot_walk **walk, ot_binding *bind);
void ot__plan_keep(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                   ot_walk *w, ot_plan *p);
/* compile.c: the plan for a walk into *plan, or OT_ENOMEM, or
 * OT_EINTERNAL (recorded) when the verifier finds a pass broke an
 * invariant; a kernel's ot_explain line; its bytes and arithmetic added to
 * the plan's stats. */
int ot__plan_compile(ot_backend *be, const ot_walk *w, int n, ot_tensor *const outs[],
                     ot_node *const trees[], ot_plan **plan);
char *ot__plan_describe(const ot_kernel *k);
void ot__plan_count_work(ot_plan *p, const ot_kernel *k);

/* plan_fuse.c, in the order compile runs them. */
bool ot__fuse_merge_common(compiler *c);
void ot__fuse_count_uses(compiler *c);
void ot__fuse_choose_materialised(compiler *c);
bool ot__fuse_bound_recompute(compiler *c);
void ot__fuse_mark_direct_roots(compiler *c);
void ot__fuse_assign_storage(compiler *c);
/* A new contiguous temporary for a value of shape and dtype. */
void ot__fuse_temp_storage(compiler *c, storage *s, const ot_shape *shape, ot_dtype dt);
/* Whether output i overlaps no leaf but, optionally, the leaf `own`. */
bool ot__fuse_out_alone(const compiler *c, int i, int own);
/* The part of storage s from `at`, len long, along axis (a concat's part). */
storage ot__fuse_part_of(const storage *s, int axis, int64_t at, int64_t len);

/* plan_build.c: whether output q's kernel reads leaf j itself: its root's
 * elementwise region (values not stored by kernels of their own, transposes
 * of leaves included) reaches the leaf. stack has room for 2n + 1 entries. */
bool ot__build_region_reads(const compiler *c, int q, int j, int *stack);

/* plan_emit.c */
/* A storage seen from an iteration space (right-aligned broadcast). */
ot_view ot__emit_view_of(const storage *s, int ndim, const int64_t *dims);
int ot__emit_insn(prog *g, ot_insn in, uint8_t kd, bool scalar);
int ot__emit_cast_to(prog *g, int v, uint8_t kd);
int ot__emit_load(prog *g, int load);
/* Emits the region of roots; root (or -1) is the one root that may be read
 * from storage rather than computed (!root_computed). */
void ot__emit_roots(prog *g, const int *roots, int nroots, int root, bool root_computed,
                    int *pinned);
/* Emits the region of one root; returns its value. */
int ot__emit_region(prog *g, int root, bool root_computed, int *pinned);
/* Drops dims of size 1 and merges neighbours every view walks as one; the
 * pinned (reduced) dim stays, its new index returned through *pinned. */
bool ot__emit_coalesce(ot_kernel *k, int *pinned);
/* Allocates buffers and copies the program into g->k (result: its value). */
bool ot__emit_finish_program(prog *g, int result);
void ot__emit_reset_prog(prog *g, ot_kernel *k);
/* The value to store, as a freshly computed buffer in the store's dtype. */
int ot__emit_store_value(prog *g, int v);

/* plan_build.c */
bool ot__build_kernels(compiler *c);
/* Output i as a storage (its own view; contiguous for ot_eval's outputs). */
storage ot__build_out_storage(const compiler *c, int i);
/* Whether BLAS can write a dot's result straight into storage dst. */
bool ot__build_blas_writable(const storage *dst, const ot_node *d);

/* plan_build.c's kernel builders, for plan_struct.c: a new kernel of a
 * kind (NULL out of memory), and an elementwise kernel computing entry
 * root (or copying its stored value) over space into the view store. */
ot_kernel *ot__build_new_kernel(compiler *c, int kind);
bool ot__build_ew_kernel(compiler *c, prog *g, int root, bool computed, const ot_shape *space,
                         ot_view store);
/* plan_struct.c: the kernels of structured registered op entry e into dst:
 * its operands copied (or computed) into contiguous temporaries where they
 * are not contiguous in memory already, the op's own kernel, and a copy
 * into dst where dst is not contiguous. */
bool ot__build_struct_kernel(compiler *c, prog *g, int e, const storage *dst);

/* plan_sched.c, in the order compile runs them. */
bool ot__sched_choose_dot_segments(compiler *c);
void ot__sched_temps_into_outputs(compiler *c);
void ot__sched_choose_row_blocks(compiler *c);
bool ot__sched_layout_arena(ot_plan *p);
/* Whether k's output should be written with streaming stores: the bytes
 * it moves reach stream_bytes (0: never) and it is bound by memory, not by
 * arithmetic. compile.c hands the answer to jit.c, which obeys it. */
bool ot__sched_streams(const ot_kernel *k, size_t stream_bytes);
/* The same for kernel k of plan p, row blocks chosen. */
bool ot__sched_streams_in(const ot_plan *p, const ot_kernel *k, size_t stream_bytes);
/* The segment (index into p->segs) holding kernel k, or -1 (segments are
 * disjoint and in order: a binary search). */
int ot__sched_segment_of(const ot_plan *p, int k);
/* The same for kernel k of plan p that will run per row block, before
 * the blocks are chosen (p->prefetch set). */
bool ot__sched_streams_blocked(const ot_plan *p, const ot_kernel *k, size_t stream_bytes);
/* Whether a kernel of p will prefetch, should p run per row block. */
bool ot__sched_prefetching(const ot_plan *p);
/* The loads each kernel of a row-blocked plan prefetches a block ahead
 * (ot_kernel's pf_*), blocks being taken by slots threads in turn. */
void ot__sched_prefetches(ot_plan *p, int slots);

/* plan_verify.c, built with -DOT_VERIFY_PLANS only: each check returns 0,
 * or records OT_EINTERNAL naming the broken invariant and returns it
 * (OT_ENOMEM when it cannot allocate). ot__verify_plan checks the kernels
 * at a stage: as built, scheduled (segments too) or laid out (the arena). */
enum { OT_VERIFY_BUILT, OT_VERIFY_SCHEDULED, OT_VERIFY_LAID_OUT };
int ot__verify_walk(const ot_walk *w, int nout);
int ot__verify_fused(const compiler *c);
int ot__verify_plan(const ot_plan *p, int stage);
#ifdef OT_VERIFY_PLANS
#define OT_VERIFY(check) (check)
#else
#define OT_VERIFY(check) 0
#endif

#endif /* OT_PLAN_H */
