/*
 * ops.h - the private view of the op table (src/ops.def): what the library
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
enum { OT__VEC_NONE, OT__VEC_OWN, OT__VEC_SLEEF, OT__VEC_ACC, OT__VEC_WIDE };
/* Column "jit": how generated code computes it. */
enum { OT__JIT_NONE, OT__JIT_INLINE, OT__JIT_CALL, OT__JIT_SIG };
/* Column "dom": where the op is finite and smooth. */
enum { OT__DOM_ANY, OT__DOM_POS, OT__DOM_NONZERO, OT__DOM_KINK };

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
} ot_opinfo;

/* The row of op, or NULL when op is not one. */
const ot_opinfo *ot__op(int op);
/* The cost column of op (1 for an unknown op). */
int ot__op_cost(int op);

/* ref.c: the reference formula of an elementwise op (unary or binary), in
 * double; NULL for any other op. */
typedef double (*ot__ref1)(double x);
typedef double (*ot__ref2)(double x, double y);
ot__ref1 ot__ref_fn1(int op);
ot__ref2 ot__ref_fn2(int op);

/* autodiff.c: whether op (or a composite tag) has a gradient rule. */
bool ot__autodiff_has_rule(int op);

#endif /* OT_OPS_H */
