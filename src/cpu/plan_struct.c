/*
 * plan_struct.c - structured registered ops (ot_op_register_structured) on
 * the cpu backend: each node is a kernel of its own, as a dot is. Its
 * operands are read in place where they lie contiguous in memory already
 * (a leaf, a stored value); any other is computed, or copied, into a
 * contiguous temporary by an elementwise kernel first, so fusion stops at
 * the op. The op's kernel writes a contiguous result: the node's storage,
 * or a temporary copied into it where that storage is strided (a view
 * output, a part of a concat). The kernel runs once over the whole tensors,
 * on the calling thread.
 */
#include "plan.h"
#include "ops.h"

/* Whether strides lay shape s out row-major (dims of size 1 aside). */
static bool row_major(const int64_t *strides, const ot_shape *s)
{
    int64_t want = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (s->dims[d] == 1) continue;
        if (s->dims[d] == 0) return true;   /* nothing to read */
        if (strides[d] != want) return false;
        want *= s->dims[d];
    }
    return true;
}

static ot_view view_of(const storage *s)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index, .offset = s->offset};
    memcpy(v.strides, s->strides, sizeof v.strides);
    return v;
}

/* Operand o as a contiguous view in dtype dt, copied (or computed) into a
 * temporary where it is not one already. */
static bool operand_view(compiler *c, prog *g, int o, ot_dtype dt, ot_view *v)
{
    const ot_shape *sh = &node_of(c, o)->shape;
    storage s = c->ci[o].st;
    bool stored = s.has && s.dtype == dt && (!is_op(c, o) || c->ci[o].mat ||
                                             kind_of(c, o) == OT_KIND_SHAPE);
    if (!stored || !row_major(s.strides, sh)) {
        ot__fuse_temp_storage(c, &s, sh, dt);
        if (c->oom) return false;
        bool computed = is_ew(c, o) && !c->ci[o].mat;
        if (!ot__build_ew_kernel(c, g, o, computed, sh, ot__emit_view_of(&s, sh->ndim, sh->dims)))
            return false;
    }
    *v = view_of(&s);
    return true;
}

/* The op's own kernel over loads into storage out. */
static bool op_kernel(compiler *c, int e, const ot_view *loads, ot_shape *shapes, const storage *out)
{
    const ot_node *n = node_of(c, e);
    int na = n->custom->def.arity;
    ot_kernel *k = ot__build_new_kernel(c, OT_KER_STRUCT);
    if (!k) {
        free(shapes);
        return false;
    }
    k->custom = n->custom;
    k->load_shapes = shapes;
    k->axis = n->args.axis;
    k->shape = n->shape;
    k->ndim = n->shape.ndim;   /* for ot_explain and the verifier: the result's */
    memcpy(k->dims, n->shape.dims, sizeof k->dims);
    k->store = view_of(out);
    if (na && !(k->loads = ot__malloc(sizeof *k->loads * (size_t)na))) return !(c->oom = true);
    k->nload = na;
    for (int i = 0; i < na; i++) k->loads[i] = loads[i];
    return true;
}

bool ot__build_struct_kernel(compiler *c, prog *g, int e, const storage *dst_in)
{
    const storage target = *dst_in, *dst = &target;   /* dst_in may be e's own, changed below */
    const ot_node *n = node_of(c, e);
    int na = n->custom->def.arity;
    ot_dtype dt = (ot_dtype)n->dtype;
    ot_view loads[OT_STRUCT_MAX_ARITY + 1];
    ot_shape *shapes = ot__malloc(sizeof *shapes * (size_t)(na ? na : 1));
    if (!shapes) return !(c->oom = true);
    for (int i = 0; i < na; i++) {
        int o = canon_operand(c, e, i);
        shapes[i] = node_of(c, o)->shape;
        if (!operand_view(c, g, o, dt, &loads[i])) {
            free(shapes);
            return false;
        }
    }
    storage out = *dst;
    bool direct = row_major(dst->strides, &n->shape);
    if (!direct) {
        ot__fuse_temp_storage(c, &out, &n->shape, dt);
        if (c->oom) {
            free(shapes);
            return false;
        }
    }
    if (!op_kernel(c, e, loads, shapes, &out)) return false;
    if (direct) return true;
    /* the result copied from its temporary into dst, reading e as stored
     * there for the copy's sake */
    storage kept = c->ci[e].st;
    c->ci[e].st = out;
    bool ok = ot__build_ew_kernel(c, g, e, false, &n->shape,
                                  ot__emit_view_of(dst, n->shape.ndim, n->shape.dims));
    c->ci[e].st = kept;
    return ok;
}

void ot__run_struct(const ot_kernel *k, char *const *base, char *dst)
{
    void *in[OT_STRUCT_MAX_ARITY + 1];
    for (int i = 0; i < k->nload; i++) in[i] = base[i];
    ot_args args = {.axis = k->axis};
    ot__struct_run(k->custom, ot__kd((ot_dtype)k->store.dtype), k->nload, in, k->load_shapes, dst,
                   &k->shape, &args);
}
