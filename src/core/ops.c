/*
 * ops.c - the op table (src/core/ops.def) as data: the public queries (names,
 * arity, kinds and flags) and the private rows of ops.h, each generated
 * from the table's row so that it stays the single source of truth; and
 * the registry of ops added at run time (ot_op_register), which the same
 * queries answer for from OT_OP_REGISTERED on.
 */
#include "internal.h"
#include "ops.h"

#include <pthread.h>

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
#define OPS_USER_OWN 0u
#define OPS_USER_SLEEF 0u
#define OPS_USER_ACC 0u
#define OPS_USER_WIDE 0u
#define OPS_USER_NONE 0u
#define OPS_USER_USER OT_FLAG_CUSTOM
#define OPS_FLAGS(rule, grad, vec) \
    (OPS_RULE_##rule | (OPS_GRAD_##grad ? 0u : OT_FLAG_NODIFF) | OPS_USER_##vec)
/* jit's SIG(base) names the base op: two initialisers, lowering and base. */
#define OPS_JIT_NONE OT__JIT_NONE, OT_OP_NONE
#define OPS_JIT_INLINE OT__JIT_INLINE, OT_OP_NONE
#define OPS_JIT_CALL OT__JIT_CALL, OT_OP_NONE
#define OPS_JIT_USER OT__JIT_USER, OT_OP_NONE
#define OPS_JIT_SIG(base) OT__JIT_SIG, OT_OP_##base
#define OPS_EXACT_NONE false
#define OPS_EXACT_OWN true
#define OPS_EXACT_SLEEF false
#define OPS_EXACT_ACC false
#define OPS_EXACT_WIDE true
#define OPS_EXACT_USER false
/* Elementwise ops have i32 kernels unless i32 operands give f64. */
#define OPS_EW_UNARY true
#define OPS_EW_BINARY true
#define OPS_EW_REDUCE false
#define OPS_EW_DOT false
#define OPS_EW_SHAPE false
#define OPS_EW_SPECIAL false
#define OPS_EW_COMPOSITE false
#define OPS_EW_CONV false
#define OPS_I32(kind, rule) (OPS_EW_##kind && OPS_RULE_##rule != OT_FLAG_FLOAT)
/* Column "attrs": ATTRS(AXIS, KEEPDIMS) lists OT__ATTR_AXIS,
 * OT__ATTR_KEEPDIMS, and the initialiser {ATTRS 0} ends it with
 * OT__ATTR_NONE; a row's "-" reads as {-0}, the empty list. */
#define OPS_A(x) OT__ATTR_##x,
#define OPS_ATTRS_1(a) OPS_A(a)
#define OPS_ATTRS_2(a, b) OPS_A(a) OPS_A(b)
#define OPS_ATTRS_3(a, b, c) OPS_A(a) OPS_A(b) OPS_A(c)
#define OPS_ATTRS_4(a, b, c, d) OPS_ATTRS_3(a, b, c) OPS_A(d)
#define OPS_ATTRS_5(a, b, c, d, e) OPS_ATTRS_4(a, b, c, d) OPS_A(e)
#define OPS_ATTRS_6(a, b, c, d, e, f) OPS_ATTRS_5(a, b, c, d, e) OPS_A(f)
#define OPS_ATTRS_7(a, b, c, d, e, f, g) OPS_ATTRS_6(a, b, c, d, e, f) OPS_A(g)
#define OPS_NARGS(...) OPS_NARGS_(__VA_ARGS__, 7, 6, 5, 4, 3, 2, 1, 0)
#define OPS_NARGS_(a, b, c, d, e, f, g, n, ...) n
#define OPS_CAT(a, b) OPS_CAT_(a, b)
#define OPS_CAT_(a, b) a##b
#define ATTRS(...) OPS_CAT(OPS_ATTRS_, OPS_NARGS(__VA_ARGS__))(__VA_ARGS__)

const ot_opinfo ot__op_table[OT_OP_COUNT] = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, VFN, U10, U35, JIT, GRAD, DX, DY, SYM, DOM, \
              DOC, ATTR, PEER)                                                               \
    [OT_OP_##E] = {.name = NM, .arity = AR, .kind = OT_KIND_##KIND,                          \
                   .flags = OPS_FLAGS(RULE, GRAD, VEC), .cost = OT__COST_##COST,                  \
                   .vec = OT__VEC_##VEC, .exact = OPS_EXACT_##VEC, .ulp = {#U10, #U35},      \
                   .i32 = OPS_I32(KIND, RULE), .jit = OPS_JIT_##JIT, .grad = OPS_GRAD_##GRAD, \
                   .dom = OT__DOM_##DOM, .sym = SYM, .attrs = {ATTR 0}},
#include "ops.def"
#undef OT_OP
};
#undef ATTRS

static bool known(ot_op op) { return op >= 0 && op < OT_OP_COUNT; }

/* ---- attributes ------------------------------------------------------------ */

#define ARG(nm, ty, m) .name = nm, .type = OT__AT_##ty, .off = offsetof(ot_args, m)
const ot__attr ot__attrs[OT__ATTR_COUNT] = {
    [OT__ATTR_INDEX] = {ARG("index", INDEX, start)},
    [OT__ATTR_PERM] = {ARG("perm", PERM, perm)},
    [OT__ATTR_SHAPE] = {ARG("shape", NODE_SHAPE, shape), .pp_only = true},
    [OT__ATTR_DEPTH] = {ARG("depth", I64, depth)},
    [OT__ATTR_AXIS] = {ARG("axis", INT, axis), .omit = true, .dflt = OT_AXIS_ALL, .none = true},
    [OT__ATTR_KEEPDIMS] = {ARG("keepdims", FLAG, keepdims), .omit = true},
    [OT__ATTR_DDOF] = {ARG("ddof", INT, ddof), .omit = true},
    [OT__ATTR_LO] = {ARG("lo", DOUBLE, lo)},
    [OT__ATTR_HI] = {ARG("hi", DOUBLE, hi)},
    [OT__ATTR_SEED] = {ARG("seed", U64, seed)},
    [OT__ATTR_DTYPE] = {ARG("dtype", DTYPE, dtype)},
    /* the default, f32, goes unsaid */
    [OT__ATTR_RDTYPE] = {ARG("dtype", NODE_DTYPE, dtype), .omit = true, .dflt = OT_F32,
                         .pp_only = true},
    [OT__ATTR_STRIDE] = {ARG("stride", WIN3, win.stride)},
    [OT__ATTR_PAD_LO] = {ARG("pad_lo", WIN3, win.pad_lo)},
    [OT__ATTR_PAD_HI] = {ARG("pad_hi", WIN3, win.pad_hi)},
    [OT__ATTR_DILATION] = {ARG("dilation", WIN3, win.dilation)},
    [OT__ATTR_GROUPS] = {ARG("groups", INT, win.groups), .omit = true, .dflt = 1},
    [OT__ATTR_OUTPAD] = {ARG("outpad", WIN3, win.outpad)},
    [OT__ATTR_KSIZE] = {ARG("ksize", WIN3, win.ksize)},
    [OT__ATTR_CEIL] = {ARG("ceil_mode", FLAG, win.ceil_mode), .omit = true},
    [OT__ATTR_EXCL] = {ARG("exclude_pad", FLAG, win.exclude_pad), .omit = true},
    [OT__ATTR_DIAG] = {ARG("k", INT, ddof), .omit = true},
    /* attention's, in members no attention node otherwise uses */
    [OT__ATTR_SCALE] = {ARG("scale", DOUBLE, lo)},
    [OT__ATTR_CAUSAL] = {ARG("causal", FLAG, keepdims), .omit = true},
    [OT__ATTR_SEQ_K] = {ARG("seq_k", I64, depth)},
    [OT__ATTR_DIM_V] = {ARG("dim_v", INT, ddof)},
    [OT__ATTR_MASK] = {ARG("mask", INT, win.groups), .omit = true},
    /* topk's flags, in members no topk node otherwise uses */
    [OT__ATTR_SMALLEST] = {ARG("smallest", FLAG, keepdims), .omit = true},
    [OT__ATTR_UNSORTED] = {ARG("unsorted", FLAG, win.ceil_mode), .omit = true},
};
#undef ARG

int ot__attr_lookup(const char *name)
{
    for (int id = OT__ATTR_NONE + 1; id < OT__ATTR_COUNT; id++)
        if (ot__attrs[id].type != OT__AT_INDEX && strcmp(ot__attrs[id].name, name) == 0) return id;
    return OT__ATTR_NONE;
}

bool ot__op_has_attr(int op, int id)
{
    if (!known((ot_op)op)) return false;
    for (const unsigned char *a = ot__op_table[op].attrs; *a; a++)
        if (*a == id) return true;
    return false;
}

const ot_opinfo *ot__op(int op) { return known((ot_op)op) ? &ot__op_table[op] : NULL; }
int ot__op_cost(int op) { return known((ot_op)op) ? ot__op_table[op].cost : OT__COST_CHEAP; }

/* ---- the registry --------------------------------------------------------- */

/* The one global mutable state of the library (docs/ARCHITECTURE.md):
 * append-only. Writers take the lock; an entry is complete before the
 * count that publishes it is stored (release), so readers, which load the
 * count (acquire) and read only entries below it, need no lock. Static, so
 * nothing is allocated and nothing is left to free at exit. */
static ot_custom registry[OT_MAX_REGISTERED_OPS];
static atomic_int nregistered;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

const ot_custom *ot__custom(int index)
{
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    return index >= 0 && index < n ? &registry[index] : NULL;
}

const ot_custom *ot__custom_of_op(int op)
{
    return op >= OT_OP_REGISTERED ? ot__custom(op - OT_OP_REGISTERED) : NULL;
}

const char *ot__op_display_name(int op, int custom)
{
    const ot_opinfo *o = ot__op(op);
    const ot_custom *u = o && o->vec == OT__VEC_USER ? ot__custom(custom) : NULL;
    return u ? u->name : o ? o->name : NULL;
}

int ot__node_op(const ot_node *n)
{
    return n->custom ? OT_OP_REGISTERED + n->custom->index : n->op;
}

/* A C identifier, [A-Za-z_][A-Za-z0-9_]*: ot_pp prints a node by its op's
 * name and ot_parse reads a function name as an identifier, so a name with
 * a leading digit ("9lives") would print text that does not parse back. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= OT_OP_NAME_MAX || (s[0] >= '0' && s[0] <= '9')) return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z')))
            return false;
    return true;
}

#define REG_FAIL(...) ot__err_set(OT_EINVAL, NULL, 0, "op_register", __VA_ARGS__)

/* Whether d's functions fit its arity and each vector function has its
 * dtype's scalar function; records why not. */
static bool functions_ok(const ot_op_def *d)
{
    bool un = d->arity == 1;
    bool f32 = un ? d->f32 != NULL : d->f32_xy != NULL, f64 = un ? d->f64 != NULL : d->f64_xy != NULL;
    if (un ? d->f32_xy || d->f64_xy : d->f32 || d->f64)
        return REG_FAIL("op '%s' has arity %d but sets %s", d->name, d->arity,
                        un ? "f32_xy or f64_xy (binary functions)" : "f32 or f64 (unary functions)"),
               false;
    if (!f32 && !f64)
        return REG_FAIL("op '%s' has no scalar function (NULL %s)", d->name,
                        un ? "f32 and f64" : "f32_xy and f64_xy"),
               false;
    if ((d->avx2_f32 || d->avx512_f32) && !f32)
        return REG_FAIL("op '%s' has an f32 vector function but no f32 scalar function", d->name),
               false;
    if ((d->avx2_f64 || d->avx512_f64) && !f64)
        return REG_FAIL("op '%s' has an f64 vector function but no f64 scalar function", d->name),
               false;
    return true;
}

/* Whether name is well formed and free, and the registry (n entries) has
 * room (under the lock); records why not. */
static bool name_free(const char *name, int n)
{
    if (!name || !name_ok(name))
        return REG_FAIL("op name %s%s%s is not 1 to %d characters of [A-Za-z0-9_] (not a "
                        "digit first)",
                        name ? "'" : "", name ? name : "NULL", name ? "'" : "",
                        OT_OP_NAME_MAX - 1),
               false;
    for (int i = 0; i < OT_OP_COUNT; i++)
        if (strcmp(ot__op_table[i].name, name) == 0)
            return REG_FAIL("op name '%s' is a built-in op's", name), false;
    for (int i = 0; i < n; i++)
        if (strcmp(registry[i].name, name) == 0)
            return REG_FAIL("op name '%s' is registered already (op %d)", name,
                            OT_OP_REGISTERED + i),
                   false;
    if (n == OT_MAX_REGISTERED_OPS)
        return REG_FAIL("cannot register '%s': %d ops are registered, the most there may be",
                        name, n),
               false;
    return true;
}

/* Checks d against the table and the registry (under the lock). */
static bool def_ok(const ot_op_def *d, int n)
{
    if (!name_free(d->name, n)) return false;
    if (d->arity != 1 && d->arity != 2)
        return REG_FAIL("op '%s' has arity %d; registered ops take 1 or 2 operands "
                        "(ot_op_register_structured takes any)", d->name, d->arity),
               false;
    return functions_ok(d);
}

ot_custom *ot__custom_reserve(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    int n = atomic_load_explicit(&nregistered, memory_order_relaxed);
    if (!name_free(name, n)) {
        pthread_mutex_unlock(&registry_lock);
        return NULL;
    }
    ot_custom *u = &registry[n];
    memset(u, 0, sizeof *u);
    memcpy(u->name, name, strlen(name) + 1);
    u->def.name = u->name;
    u->index = n;
    return u;
}

ot_op ot__custom_publish(ot_custom *u)
{
    atomic_store_explicit(&nregistered, u->index + 1, memory_order_release);
    pthread_mutex_unlock(&registry_lock);
    return (ot_op)(OT_OP_REGISTERED + u->index);
}

void ot__custom_unlock(void) { pthread_mutex_unlock(&registry_lock); }

ot_op ot_op_register(const ot_op_def *def)
{
    if (!def) {
        ot__err_set(OT_ENULL, NULL, 0, "op_register", "def is NULL");
        return OT_OP_NONE;
    }
    pthread_mutex_lock(&registry_lock);
    int n = atomic_load_explicit(&nregistered, memory_order_relaxed);
    bool ok = def_ok(def, n);
    if (ok) {
        ot_custom *u = &registry[n];
        u->def = *def;
        memcpy(u->name, def->name, strlen(def->name) + 1);
        u->def.name = u->name;
        u->index = n;
        u->row = def->arity == 1 ? OT_OP_CUSTOM1 : OT_OP_CUSTOM2;
        atomic_store_explicit(&nregistered, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&registry_lock);
    return ok ? (ot_op)(OT_OP_REGISTERED + n) : OT_OP_NONE;
}

/* ---- the public queries ---------------------------------------------------- */

ot_op ot_op_lookup(const char *name)
{
    if (!name) return OT_OP_NONE;
    for (int i = 0; i < OT_OP_COUNT; i++)
        if (strcmp(ot__op_table[i].name, name) == 0) return (ot_op)i;
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(registry[i].name, name) == 0) return (ot_op)(OT_OP_REGISTERED + i);
    return OT_OP_NONE;
}

const char *ot_op_name(ot_op op)
{
    if (known(op)) return ot__op_table[op].name;
    const ot_custom *u = ot__custom_of_op(op);
    return u ? u->name : NULL;
}

int ot_op_arity(ot_op op)
{
    if (known(op)) return ot__op_table[op].arity;
    const ot_custom *u = ot__custom_of_op(op);
    return u ? u->def.arity : -1;
}

int ot_op_kind(ot_op op)
{
    if (known(op)) return ot__op_table[op].kind;
    const ot_custom *u = ot__custom_of_op(op);
    return u ? ot__op_table[u->row].kind : 0;
}

unsigned ot_op_flags(ot_op op)
{
    if (known(op)) return ot__op_table[op].flags;
    const ot_custom *u = ot__custom_of_op(op);
    if (!u) return 0;
    bool grad = u->structured ? u->sdef.grad != NULL : u->def.grad != NULL;
    return (ot__op_table[u->row].flags & ~OT_FLAG_NODIFF) | (grad ? 0u : OT_FLAG_NODIFF);
}
