/*
 * ops.h - the private view of the op table (src/core/ops.def): what the library
 * and its tests ask about an op beyond the public ot_op_name/arity/kind/
 * flags. One row per op, filled by ops.c from the table, so that a query
 * never needs a switch over ops.
 */
#ifndef OT_OPS_H
#define OT_OPS_H

#include <stdbool.h>

/* Column "cost": one element in units of an add. */
enum { OT__COST_CHEAP = 1, OT__COST_DIVROOT = 3, OT__COST_TRANS = 8 };
/* Column "vec": how the tile kernels compute the op. */
enum { OT__VEC_NONE, OT__VEC_OWN, OT__VEC_SLEEF, OT__VEC_ACC, OT__VEC_WIDE, OT__VEC_USER };
/* Column "jit": how generated code computes it. */
enum { OT__JIT_NONE, OT__JIT_INLINE, OT__JIT_CALL, OT__JIT_SIG, OT__JIT_USER };
/* Column "dom": where the op is finite and smooth. */
enum { OT__DOM_ANY, OT__DOM_POS, OT__DOM_NONZERO, OT__DOM_KINK };

/* ---- op attributes (column "attrs") ----------------------------------- */

/* The attributes ops take, in the order every printer writes them (so
 * onehot prints depth before axis, var axis, keepdims, then ddof). An op's
 * own column lists its attributes in the parser's positional order. */
typedef enum ot__attr_id {
    OT__ATTR_NONE,      /* ends an op's list */
    OT__ATTR_INDEX,     /* slice: start, step and count of each operand dim */
    OT__ATTR_PERM,      /* transpose */
    OT__ATTR_SHAPE,     /* reshape, rand: the node's shape */
    OT__ATTR_DEPTH,     /* onehot */
    OT__ATTR_AXIS,      /* reductions, concat, onehot, composites */
    OT__ATTR_KEEPDIMS,  /* reductions */
    OT__ATTR_DDOF,      /* var, std */
    OT__ATTR_LO,        /* clip */
    OT__ATTR_HI,        /* clip */
    OT__ATTR_SEED,      /* rand */
    OT__ATTR_DTYPE,     /* cast: the target */
    OT__ATTR_RDTYPE,    /* onehot, rand: the node's dtype, f32 unless given */
    OT__ATTR_STRIDE,    /* windows (conv...): args.win, per spatial dim */
    OT__ATTR_PAD_LO,
    OT__ATTR_PAD_HI,
    OT__ATTR_DILATION,
    OT__ATTR_GROUPS,
    OT__ATTR_OUTPAD,    /* conv_transpose */
    OT__ATTR_KSIZE,     /* conv_wgrad; pooling: the window */
    OT__ATTR_CEIL,      /* pooling: ceil_mode */
    OT__ATTR_EXCL,      /* avg pooling: exclude_pad */
    OT__ATTR_DIAG,      /* tril, triu: the diagonal k (in args.ddof) */
    OT__ATTR_SCALE,     /* attention: the scores' factor (args.lo) */
    OT__ATTR_CAUSAL,    /* attention: causal (args.keepdims) */
    OT__ATTR_SEQ_K,     /* attention: keys (args.depth) */
    OT__ATTR_DIM_V,     /* attention: v's dim (args.ddof) */
    OT__ATTR_MASK,      /* attention: the mask's code (args.win.groups) */
    OT__ATTR_SMALLEST,  /* topk: the k smallest (args.keepdims) */
    OT__ATTR_UNSORTED,  /* topk: in position order (args.win.ceil_mode) */
    OT__ATTR_COUNT
} ot__attr_id;
#define OT__ATTRS_MAX 7   /* the most attributes one op takes */

/* How an attribute's value is held, which decides how it prints, parses
 * and counts in a node's identity (walk.h). */
typedef enum ot__attr_type {
    OT__AT_NONE,        /* OT__ATTR_NONE's: no attribute */
    OT__AT_INT,         /* an int member of ot_args */
    OT__AT_FLAG,        /* a bool member: written bare ("keepdims") when set */
    OT__AT_I64,         /* an int64_t member */
    OT__AT_U64,         /* a uint64_t member */
    OT__AT_DOUBLE,      /* a double member, printed shortest round-trip */
    OT__AT_DTYPE,       /* an ot_dtype member */
    OT__AT_NODE_DTYPE,  /* the node's dtype (parsed into ot_args.dtype) */
    OT__AT_NODE_SHAPE,  /* the node's shape (parsed into ot_args.shape) */
    OT__AT_PERM,        /* transpose's perm (ot_args.perm; all zero reverses) */
    OT__AT_INDEX,       /* slice's index ("[1:3, ::2]"): never parsed by name */
    OT__AT_WIN3         /* an int32_t[3] of args.win, a tuple of the node's
                           spatial dims (ot__win_dims) */
} ot__attr_type;

typedef struct ot__attr {
    const char *name;   /* as printed and parsed (an index only prints) */
    int type;           /* ot__attr_type */
    size_t off;         /* the ot_args member the builder takes it from */
    bool omit;          /* left unprinted when it equals dflt */
    int64_t dflt;
    bool none;          /* the tuple form writes dflt as None (an axis) */
    bool pp_only;       /* the node's own shape or dtype: only ot_pp (which
                           shows neither) writes it */
} ot__attr;

/* The attribute table, by ot__attr_id. */
extern const ot__attr ot__attrs[OT__ATTR_COUNT];
/* The attribute named name, as parsed (not an index: the subscript
 * syntax writes it), or OT__ATTR_NONE. */
int ot__attr_lookup(const char *name);
/* Whether op (a row of the table) takes attribute id. */
bool ot__op_has_attr(int op, int id);

typedef struct ot_opinfo {
    const char *name;
    int arity, kind;
    unsigned flags;          /* the public flags, from the dtype rule and grad */
    int cost;                /* OT__COST_* */
    int vec;                 /* OT__VEC_* */
    bool exact;              /* OWN and WIDE: ref's value rounded to the dtype */
    bool i32;                /* elementwise with i32 kernels (rule not FLOAT) */
    const char *ulp[2];      /* columns u10 and u35: the SLEEF accuracy
                                used at OT_ULP10 and OT_ULP35, or "-" */
    int jit;                 /* OT__JIT_* */
    int jit_base;            /* SIG: the op whose vector function it calls */
    bool grad;               /* autodiff has a rule (else OT_FLAG_NODIFF) */
    int dom;                 /* OT__DOM_* */
    const char *sym;         /* infix symbol, or NULL */
    unsigned char attrs[OT__ATTRS_MAX + 1]; /* ot__attr_id, positional order,
                                               OT__ATTR_NONE after the last */
} ot_opinfo;

/* The row of op, or NULL when op is not one. */
const ot_opinfo *ot__op(int op);
/* The table itself, for callers on every node's path (the builder): the
 * row of a built-in op, 0 <= op < OT_OP_COUNT, without a call. */
extern const ot_opinfo ot__op_table[OT_OP_COUNT];
/* ot_op_kind, ot_op_flags and ot_op_arity, inline for a built-in op (the
 * builder asks for each on every node); a registered op's through ops.c. */
static inline int ot__kind_of(int op)
{
    return op >= 0 && op < OT_OP_COUNT ? ot__op_table[op].kind : ot_op_kind((ot_op)op);
}
static inline unsigned ot__flags_of(int op)
{
    return op >= 0 && op < OT_OP_COUNT ? ot__op_table[op].flags : ot_op_flags((ot_op)op);
}
static inline int ot__arity_of(int op)
{
    return op >= 0 && op < OT_OP_COUNT ? ot__op_table[op].arity : ot_op_arity((ot_op)op);
}
/* The cost column of op (1 for an unknown op). */
int ot__op_cost(int op);

/* ---- ops registered at run time (ot_op_register) ---------------------- */

/* A registered op, as the registry keeps it: entries are written once,
 * under the registry's lock, before the count that publishes them, and
 * never change or go away, so a node, a plan or a kernel may point at one
 * (or name it by index) for as long as the process lives. */
typedef struct ot_custom {
    ot_op_def def;            /* the user's, def.name pointing at name */
    char name[OT_OP_NAME_MAX];
    int index;                /* in the registry: op number OT_OP_REGISTERED + index */
    int row;                  /* its placeholder: OT_OP_CUSTOM1, OT_OP_CUSTOM2 or,
                                 structured, OT_OP_CUSTOM_STRUCT */
    bool structured;          /* registered by ot_op_register_structured: sdef
                                 holds it (def: its name and arity alone) */
    ot_struct_def sdef;
} ot_custom;

/* The registered op of index, or of public op number op; NULL when none. */
const ot_custom *ot__custom(int index);
const ot_custom *ot__custom_of_op(int op);
/* Its scalar function for kernel dtype kd (0: f32, 1: f64), or NULL. */
static inline bool ot__custom_has(const ot_custom *u, int kd)
{
    if (u->def.arity == 1) return kd == 0 ? u->def.f32 != NULL : u->def.f64 != NULL;
    return kd == 0 ? u->def.f32_xy != NULL : u->def.f64_xy != NULL;
}
/* Its vector function for vbytes-wide registers (32: AVX2, 64: AVX-512)
 * and kernel dtype kd, or NULL. */
static inline ot_vfn ot__custom_vfn(const ot_custom *u, int vbytes, int kd)
{
    if (vbytes == 32) return kd == 0 ? u->def.avx2_f32 : u->def.avx2_f64;
    if (vbytes == 64) return kd == 0 ? u->def.avx512_f32 : u->def.avx512_f64;
    return NULL;
}
/* Structured ops (ops_struct.c). The registry's slot for a new entry,
 * under its lock, and its publication (ops.c): ot__custom_reserve returns
 * NULL with OT_EINVAL recorded when name is bad or taken or the registry
 * is full; ot__custom_publish makes the filled entry visible and returns
 * its op number. ot__custom_unlock ends a reservation without one. */
ot_custom *ot__custom_reserve(const char *name);
ot_op ot__custom_publish(ot_custom *u);
void ot__custom_unlock(void);
/* Whether u has a kernel for kernel dtype kd (0: f32, 1: f64). */
static inline bool ot__struct_has(const ot_custom *u, int kd)
{
    return kd == 0 ? u->sdef.f32 != NULL : u->sdef.f64 != NULL;
}
/* Runs structured op u's kernel of kernel dtype kd (it has one) over n
 * contiguous operands in[i] of shapes shapes[i] into out (shape out_shape),
 * with the node's args; nothing for an empty output. */
void ot__struct_run(const ot_custom *u, int kd, int n, void *const in[], const ot_shape shapes[],
                    void *out, const ot_shape *out_shape, const ot_args *args);

/* The name of an op as printed: a registered op's (custom: the node's or
 * instruction's registry index, used for the placeholder rows), else the
 * table's. */
const char *ot__op_display_name(int op, int custom);
/* The public op number of a node: its registered op's, else its own. */
int ot__node_op(const ot_node *n);

/* ref.c: the reference formula of an elementwise op (unary or binary), in
 * double; NULL for any other op. */
typedef double (*ot__ref1)(double x);
typedef double (*ot__ref2)(double x, double y);
ot__ref1 ot__ref_fn1(int op);
ot__ref2 ot__ref_fn2(int op);

/* autodiff.c: whether op (or a composite tag) has a gradient rule. */
bool ot__autodiff_has_rule(int op);

#endif /* OT_OPS_H */
