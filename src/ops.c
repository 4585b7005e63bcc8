/*
 * ops.c - the op table (src/ops.def) as data: the public queries (names,
 * arity, kinds and flags) and the private rows of ops.h, each generated
 * from the table's row so that it stays the single source of truth.
 */
#include "internal.h"
#include "ops.h"

/* The public flags: the dtype rule's, and OT_FLAG_NODIFF where the op has
 * no gradient rule. */
#define OPS_RULE_SAME 0u
#define OPS_RULE_FLOAT OT_FLAG_FLOAT
#define OPS_RULE_COMPARE OT_FLAG_COMPARE
#define OPS_RULE_INDEX OT_FLAG_INDEX
#define OPS_GRAD_NONE false
#define OPS_GRAD_UN true
#define OPS_GRAD_BIN true
#define OPS_GRAD_FN true
#define OPS_FLAGS(rule, grad) (OPS_RULE_##rule | (OPS_GRAD_##grad ? 0u : OT_FLAG_NODIFF))
/* jit's SIG(base) names the base op: two initialisers, lowering and base. */
#define OPS_JIT_NONE OT__JIT_NONE, OT_OP_NONE
#define OPS_JIT_INLINE OT__JIT_INLINE, OT_OP_NONE
#define OPS_JIT_CALL OT__JIT_CALL, OT_OP_NONE
#define OPS_JIT_SIG(base) OT__JIT_SIG, OT_OP_##base
#define OPS_EXACT_NONE false
#define OPS_EXACT_OWN true
#define OPS_EXACT_SLEEF false
#define OPS_EXACT_ACC false
#define OPS_EXACT_WIDE true
/* Elementwise ops have i32 kernels unless i32 operands give f64. */
#define OPS_EW_UNARY true
#define OPS_EW_BINARY true
#define OPS_EW_REDUCE false
#define OPS_EW_DOT false
#define OPS_EW_SHAPE false
#define OPS_EW_SPECIAL false
#define OPS_EW_COMPOSITE false
#define OPS_I32(kind, rule) (OPS_EW_##kind && OPS_RULE_##rule != OT_FLAG_FLOAT)

static const ot_opinfo ops[OT_OP_COUNT] = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, VFN, U10, U35, JIT, GRAD, DX, DY, SYM, DOM, \
              DOC)                                                                           \
    [OT_OP_##E] = {.name = NM, .arity = AR, .kind = OT_KIND_##KIND,                          \
                   .flags = OPS_FLAGS(RULE, GRAD), .cost = OT__COST_##COST,                  \
                   .vec = OT__VEC_##VEC, .exact = OPS_EXACT_##VEC, .ulp = {#U10, #U35},      \
                   .i32 = OPS_I32(KIND, RULE), .jit = OPS_JIT_##JIT, .grad = OPS_GRAD_##GRAD, \
                   .dom = OT__DOM_##DOM, .sym = SYM},
#include "ops.def"
#undef OT_OP
};

static bool known(ot_op op) { return op >= 0 && op < OT_OP_COUNT; }

const ot_opinfo *ot__op(int op) { return known((ot_op)op) ? &ops[op] : NULL; }
int ot__op_cost(int op) { return known((ot_op)op) ? ops[op].cost : OT__COST_CHEAP; }

ot_op ot_op_lookup(const char *name)
{
    if (!name) return OT_OP_NONE;
    for (int i = 0; i < OT_OP_COUNT; i++)
        if (strcmp(ops[i].name, name) == 0) return (ot_op)i;
    return OT_OP_NONE;
}

const char *ot_op_name(ot_op op) { return known(op) ? ops[op].name : NULL; }
int ot_op_arity(ot_op op) { return known(op) ? ops[op].arity : -1; }
int ot_op_kind(ot_op op) { return known(op) ? ops[op].kind : 0; }
unsigned ot_op_flags(ot_op op) { return known(op) ? ops[op].flags : 0; }
