/*
 * ops.c - queries over the op table (OT_OP_LIST in optree.h): names, arity,
 * kinds and flags, generated from the X-macro so the table stays the single
 * source of truth.
 */
#include "internal.h"

typedef struct op_info {
    const char *name;
    int arity;
    int kind;
    unsigned flags;
} op_info;

static const op_info ops[OT_OP_COUNT] = {
#define OT__OP_INFO(e, name, arity, kind, sym, flags, ref) [OT_OP_##e] = {name, arity, kind, flags},
    OT_OP_LIST(OT__OP_INFO)
#undef OT__OP_INFO
};

static bool known(ot_op op) { return op >= 0 && op < OT_OP_COUNT; }

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
