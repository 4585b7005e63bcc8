/*
 * print.c - every text form: of a tree, neon's tuple form (ot_print), infix
 * (ot_pp) and Graphviz DOT (ot_graphviz); of a post-order stack, the listing
 * of ot_stack_print (stack.c builds the stack, this only reads its items);
 * and the float repr they share (ot__fmt_double).
 *
 * Trees may be 100,000 nodes deep, so every walk keeps its stack on the heap
 * instead of recursing. Trees are DAGs: ot_print and ot_pp write an op node
 * used more than once a single time, as a line "%1 = <expr>" ahead of the
 * expression that uses it as %1 (leaves and constants repeat), so the output
 * stays linear in the distinct nodes; an unshared tree is one expression.
 * ot_print and ot_pp write no trailing newline (like Python's repr, the
 * caller ends the line); ot_graphviz and ot_stack_print write whole lines.
 * All four return 0, OT_ENULL for a NULL FILE (a NULL tree or stack returns
 * the code already in the error slot, as every function that does work),
 * OT_ENOMEM, or OT_EIO when a write to f or its flush fails.
 */
#include "internal.h"

#include <float.h>
#include <inttypes.h>

/* ---- numbers ------------------------------------------------------------- */

static bool reads_back(const char *text, double v, bool f32)
{
    return f32 ? strtof(text, NULL) == (float)v : strtod(text, NULL) == v;
}

/* Python's repr: the fewest significant digits that read back as v (as a
 * float when f32, so 0.1f prints 0.1), laid out positionally for decimal
 * exponents -4..15 and as d.ddde+XX otherwise. */
static void fmt_repr(char *buf, size_t n, double v, bool f32)
{
    if (isnan(v) || isinf(v)) {
        snprintf(buf, n, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int p = 1; p <= (f32 ? 9 : 17); p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (reads_back(e, v, f32)) break;
    }
    /* e is [-]d[.ddd]e(+|-)XX; the shortest digits never end in 0 (except
     * for zero itself), because dropping that 0 reads back the same. */
    const char *s = e + (e[0] == '-');
    char digits[24];
    int nd = 0;
    for (; *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int x = atoi(s + 1);

    char out[64];
    int k = 0;
    if (e[0] == '-') out[k++] = '-';
    if (x < -4 || x >= 16) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", x < 0 ? '-' : '+', abs(x));
    } else if (x < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -x - 1; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
        out[k] = '\0';
    } else {
        for (int i = 0; i <= x; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd <= x + 1) out[k++] = '0';
        for (int i = x + 1; i < nd; i++) out[k++] = digits[i];
        out[k] = '\0';
    }
    snprintf(buf, n, "%s", out);
}

void ot__fmt_double(char *buf, size_t n, double v)
{
    fmt_repr(buf, n, v, false);
}

/* A constant's text: an integer for OT_I32; for OT_F32 (ot_constf) the
 * shortest float repr, since its value was a float literal. */
static void const_text(const ot_node *n, char *buf, size_t len)
{
    double v = n->value;
    if (n->dtype == OT_I32) {
        snprintf(buf, len, "%lld", (long long)v);
        return;
    }
    bool exact_f32 = n->dtype == OT_F32 && isfinite(v) && fabs(v) <= FLT_MAX &&
                     (double)(float)v == v;
    fmt_repr(buf, len, v, exact_f32);
}

/* ---- pieces shared by the forms ------------------------------------------ */

static const char *const op_symbol[OT_OP_COUNT] = {
#define OT__OP_SYM(e, name, arity, kind, sym, flags, ref) [OT_OP_##e] = sym,
    OT_OP_LIST(OT__OP_SYM)
#undef OT__OP_SYM
};

static const char *op_name(int op) { return ot_op_name((ot_op)op); }
static bool is_tagged(const ot_node *n) { return n->tag != OT_OP_NONE; }

/* A leaf's name (tensor-0x<address> when it has none) or a constant's value. */
static void print_atom(FILE *f, const ot_node *n)
{
    const ot_tensor *t = ot__leaf_tensor(n);
    if (n->kind == OT_NODE_CONST) {
        char buf[64];
        const_text(n, buf, sizeof buf);
        fputs(buf, f);
    } else if (t->name) {
        fputs(t->name, f);
    } else {
        fprintf(f, "tensor-0x%" PRIxPTR, (uintptr_t)t);
    }
}

/* A Python tuple: (2, 2), (3,), (). */
static void print_py_tuple(FILE *f, const int64_t *v, int n)
{
    fputc('(', f);
    for (int i = 0; i < n; i++) fprintf(f, i ? ", %lld" : "%lld", (long long)v[i]);
    fputs(n == 1 ? ",)" : ")", f);
}

/* The compact form of ot_pp: (3,4), (3,), (). */
static void print_dims(FILE *f, const int64_t *v, int n)
{
    char buf[OT__SHAPE_STRLEN];
    ot_shape s = ot_shape_make(n, v);
    fputs(ot__shape_str(&s, buf), f);
}

/* A transpose's perm widened to dims, for the tuple writers above. */
static int64_t *perm_dims(const ot_node *n, int64_t out[OT_MAX_DIMS])
{
    for (int i = 0; i < n->shape.ndim; i++) out[i] = n->args.perm[i];
    return out;
}

/* ---- the iterative walk -------------------------------------------------- */

/* How a form writes an op node: open, then before each operand sep(k), the
 * operand itself, then close. operands() fills ops and returns their count;
 * a NULL operand prints as missing ("None" in the tuple form). */
typedef struct form {
    const char *fn;
    int (*operands)(const ot_node *n, const ot_node *ops[2]);
    void (*open)(FILE *f, const ot_node *n);
    void (*sep)(FILE *f, const ot_node *n, int k);
    void (*close)(FILE *f, const ot_node *n);
    const char *missing;
} form;

typedef struct frame {
    const ot_node *n;
    int next;            /* the operand to write next */
} frame;

typedef struct frames {
    frame *v;
    size_t len, cap;
} frames;

static bool frames_push(frames *s, const ot_node *n)
{
    if (s->len == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        frame *v = ot__realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->len++] = (frame){n, 0};
    return true;
}

/* Checks the arguments of a printing function, whose subject (a tree or a
 * stack) is named what, and clears the error slot. */
static int print_begin(const char *fn, const void *subject, const char *what, FILE *f)
{
    if (!subject) return ot__err_null(fn, what);
    if (!f) return ot__err_set(OT_ENULL, NULL, 0, fn, "FILE is NULL");
    ot_clear_error();
    return 0;
}

/* Buffered writes fail only at the flush (a full disk, /dev/full), so a
 * printer has succeeded only once its output is flushed. */
static int print_end(const char *fn, FILE *f)
{
    if (fflush(f) == EOF || ferror(f))
        return ot__err_set(OT_EIO, NULL, 0, fn, "write failed");
    return 0;
}

static int out_of_memory(const char *fn)
{
    return ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
}

/* The op nodes of a tree as a form reaches them: each gets a dense index
 * when first met, a count of its uses, and a name (%1, %2, ...) when used
 * more than once, so that it is written once and referred to afterwards. */
typedef struct dag {
    ot__ptrmap idx;
    const ot_node **node;  /* by index */
    int *uses, *name;      /* by index; name 0: written in place */
    int *post;             /* indices in post-order, operands first */
    size_t len, cap, npost;
} dag;

static void dag_free(dag *d)
{
    ot__ptrmap_free(&d->idx);
    free(d->node);
    free(d->uses);
    free(d->name);
    free(d->post);
}

static bool dag_add(dag *d, const ot_node *n)
{
    if (d->len == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        const ot_node **node = ot__realloc(d->node, cap * sizeof *node);
        if (node) d->node = node;
        int *uses = node ? ot__realloc(d->uses, cap * sizeof *uses) : NULL;
        if (uses) d->uses = uses;
        int *name = uses ? ot__realloc(d->name, cap * sizeof *name) : NULL;
        if (name) d->name = name;
        int *post = name ? ot__realloc(d->post, cap * sizeof *post) : NULL;
        if (!post) return false;
        d->post = post;
        d->cap = cap;
    }
    if (!ot__ptrmap_put(&d->idx, n, (int)d->len)) return false;
    d->node[d->len] = n;
    d->uses[d->len] = 1;
    d->name[d->len] = 0;
    d->len++;
    return true;
}

static bool is_op(const ot_node *n) { return n && n->kind == OT_NODE_OP; }

/* Counts the uses of every op node under tree, following the form's
 * operands, each distinct node visited once. */
static bool dag_build(dag *d, frames *st, const form *fm, const ot_node *tree)
{
    if (!is_op(tree)) return true;
    if (!dag_add(d, tree) || !frames_push(st, tree)) return false;
    while (st->len > 0) {
        frame *top = &st->v[st->len - 1];
        const ot_node *ops[2];
        int nops = fm->operands(top->n, ops);
        if (top->next == nops) {
            d->post[d->npost++] = ot__ptrmap_get(&d->idx, top->n);
            st->len--;
            continue;
        }
        const ot_node *c = ops[top->next++];
        if (!is_op(c)) continue;
        int k = ot__ptrmap_get(&d->idx, c);
        if (k >= 0) d->uses[k]++;
        else if (!dag_add(d, c) || !frames_push(st, c)) return false;
    }
    return true;
}

/* The name of n when it is a shared op node, else 0. */
static int dag_name(const dag *d, const ot_node *n)
{
    int k = is_op(n) ? ot__ptrmap_get(&d->idx, n) : -1;
    return k < 0 ? 0 : d->name[k];
}

/* Writes one expression, depth first with the stack on the heap; an
 * operand that is a named node is written as its name. */
static bool write_expr(const form *fm, const dag *d, frames *st, const ot_node *expr, FILE *f)
{
    st->len = 0;
    if (!frames_push(st, expr)) return false;
    while (st->len > 0 && !ferror(f)) {
        frame *top = &st->v[st->len - 1];
        const ot_node *n = top->n;
        int name = st->len > 1 ? dag_name(d, n) : 0;
        if (!is_op(n) || name) {
            if (name) fprintf(f, "%%%d", name);
            else if (n) print_atom(f, n);
            else fputs(fm->missing, f);
            st->len--;
            continue;
        }
        const ot_node *ops[2];
        int nops = fm->operands(n, ops);
        if (top->next == 0) fm->open(f, n);
        if (top->next == nops) {
            fm->close(f, n);
            st->len--;
            continue;
        }
        fm->sep(f, n, top->next);
        if (!frames_push(st, ops[top->next++])) return false;
    }
    return true;
}

/* Writes a tree in a form. An op node used more than once is written once,
 * on its own line "%k = <expr>" before its first use (operands first), and
 * as %k wherever it is used, so output is linear in the distinct nodes; a
 * tree without shared op nodes prints as one expression. */
static int walk(const form *fm, const ot_node *tree, FILE *f)
{
    int rc = print_begin(fm->fn, tree, "tree", f);
    if (rc) return rc;
    frames st = {0};
    dag d = {0};
    bool ok = dag_build(&d, &st, fm, tree);
    int names = 0;
    for (size_t i = 0; ok && i < d.npost && !ferror(f); i++) {
        int k = d.post[i];
        if (d.uses[k] < 2) continue;
        fprintf(f, "%%%d = ", ++names);
        ok = write_expr(fm, &d, &st, d.node[k], f);
        fputc('\n', f);
        d.name[k] = names;
    }
    ok = ok && write_expr(fm, &d, &st, tree, f);
    free(st.v);
    dag_free(&d);
    return ok ? print_end(fm->fn, f) : out_of_memory(fm->fn);
}

/* ---- ot_print: neon's tuple form ----------------------------------------- */

static int tuple_operands(const ot_node *n, const ot_node *ops[2])
{
    ops[0] = n->a;
    ops[1] = n->b;
    return 2;
}

/* The attributes of n's own op as dict entries after 'op'. */
static void tuple_attrs(FILE *f, const ot_node *n)
{
    const ot_args *g = &n->args;
    int64_t perm[OT_MAX_DIMS];
    switch (ot_op_kind((ot_op)n->op)) {
    case OT_KIND_REDUCE:
        if (g->axis == OT_AXIS_ALL) fputs(", 'axis': None", f);
        else fprintf(f, ", 'axis': %d", g->axis);
        if (g->keepdims) fputs(", 'keepdims': True", f);
        break;
    case OT_KIND_SHAPE:
        fputs(", 'perm': ", f);
        print_py_tuple(f, perm_dims(n, perm), n->shape.ndim);
        break;
    case OT_KIND_SPECIAL:
        if (n->op == OT_OP_CAST) fprintf(f, ", 'dtype': '%s'", ot_dtype_name(g->dtype));
        else if (n->op == OT_OP_ONEHOT)
            fprintf(f, ", 'depth': %lld, 'axis': %d", (long long)g->depth, g->axis);
        else fprintf(f, ", 'seed': %llu", (unsigned long long)g->seed);
        break;
    default:
        break;
    }
}

static void tuple_open(FILE *f, const ot_node *n)
{
    fputs("({'shape': ", f);
    print_py_tuple(f, n->shape.dims, n->shape.ndim);
    fprintf(f, ", 'op': '%s'", op_name(n->op));
    tuple_attrs(f, n);
    fputc('}', f);
}

static void tuple_sep(FILE *f, const ot_node *n, int k)
{
    (void)n;
    (void)k;
    fputs(", ", f);
}

static void tuple_close(FILE *f, const ot_node *n)
{
    (void)n;
    fputc(')', f);
}

static const form tuple_form = {"ot_print", tuple_operands, tuple_open, tuple_sep,
                                tuple_close, "None"};

int ot_print(const ot_node *tree, FILE *f)
{
    return walk(&tuple_form, tree, f);
}

/* ---- ot_pp: infix -------------------------------------------------------- */

/* A composite root prints as the composite, over its own operands. */
static int pp_op(const ot_node *n) { return is_tagged(n) ? n->tag : n->op; }

static int pp_operands(const ot_node *n, const ot_node *ops[2])
{
    const ot_node *a = is_tagged(n) ? n->tag_a : n->a;
    const ot_node *b = is_tagged(n) ? n->tag_b : n->b;
    int k = 0;
    if (a) ops[k++] = a;
    if (b) ops[k++] = b;
    return k;
}

static void pp_open(FILE *f, const ot_node *n)
{
    fputc('(', f);
    if (!op_symbol[pp_op(n)]) fputs(op_name(pp_op(n)), f);
}

static void pp_sep(FILE *f, const ot_node *n, int k)
{
    const char *sym = op_symbol[pp_op(n)];
    if (!sym) fputc(' ', f);
    else if (k > 0) fprintf(f, " %s ", sym);
}

static void pp_reduce_attrs(FILE *f, const ot_args *g)
{
    if (g->axis != OT_AXIS_ALL) fprintf(f, " axis=%d", g->axis);
    if (g->keepdims) fputs(" keepdims", f);
}

static void pp_composite_attrs(FILE *f, const ot_node *n)
{
    const ot_args *g = &n->args;
    if (n->tag == OT_OP_CLIP) {
        char lo[40], hi[40];
        ot__fmt_double(lo, sizeof lo, g->lo);
        ot__fmt_double(hi, sizeof hi, g->hi);
        fprintf(f, " lo=%s hi=%s", lo, hi);
        return;
    }
    pp_reduce_attrs(f, g);
    if (g->ddof) fprintf(f, " ddof=%d", g->ddof);
}

/* The two ways op attributes are written. ATTRS_PP is ot_pp's (and the
 * labels of ot_graphviz): compact dims, and rand shows its shape, since the
 * infix form shows no shapes otherwise. ATTRS_LISTING is ot_stack_print's:
 * its line goes on with the item's shape as a Python tuple, so perm is such
 * a tuple too and rand leaves its shape to that. */
typedef enum attr_style { ATTRS_PP, ATTRS_LISTING } attr_style;

/* The attributes of n's own op: " axis=1 keepdims", " perm=(1,0)". */
static void op_attrs(FILE *f, const ot_node *n, attr_style style)
{
    const ot_args *g = &n->args;
    int64_t perm[OT_MAX_DIMS];
    switch (ot_op_kind((ot_op)n->op)) {
    case OT_KIND_REDUCE:
        pp_reduce_attrs(f, g);
        break;
    case OT_KIND_SHAPE:
        fputs(" perm=", f);
        if (style == ATTRS_PP) print_dims(f, perm_dims(n, perm), n->shape.ndim);
        else print_py_tuple(f, perm_dims(n, perm), n->shape.ndim);
        break;
    case OT_KIND_SPECIAL:
        if (n->op == OT_OP_CAST) fprintf(f, " dtype=%s", ot_dtype_name(g->dtype));
        else if (n->op == OT_OP_ONEHOT)
            fprintf(f, " depth=%lld axis=%d", (long long)g->depth, g->axis);
        else {
            if (style == ATTRS_PP) {
                fputs(" shape=", f);
                print_dims(f, n->shape.dims, n->shape.ndim);
            }
            fprintf(f, " seed=%llu", (unsigned long long)g->seed);
        }
        break;
    default:
        break;
    }
}

static void pp_close(FILE *f, const ot_node *n)
{
    if (is_tagged(n)) pp_composite_attrs(f, n);
    else op_attrs(f, n, ATTRS_PP);
    fputc(')', f);
}

static const form pp_form = {"ot_pp", pp_operands, pp_open, pp_sep, pp_close, ""};

int ot_pp(const ot_node *tree, FILE *f)
{
    return walk(&pp_form, tree, f);
}

/* ---- ot_graphviz --------------------------------------------------------- */

/* Writes s inside a DOT string, escaping what DOT would read as syntax. */
static void dot_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

/* One DOT node: what it is (leaf name, constant value, or op with its
 * attributes and composite tag), then its shape and dtype. */
static void dot_node(FILE *f, const ot_node *n, int id)
{
    static const char *const box[] = {[OT_NODE_LEAF] = "box", [OT_NODE_CONST] = "plaintext",
                                       [OT_NODE_OP] = "ellipse"};
    fprintf(f, "  n%d [shape=%s, label=\"", id, box[n->kind]);
    if (n->kind == OT_NODE_LEAF && ot__leaf_tensor(n)->name) {
        dot_escaped(f, ot__leaf_tensor(n)->name);
    } else if (n->kind != OT_NODE_OP) {
        print_atom(f, n);
    } else {
        fputs(op_name(n->op), f);
        op_attrs(f, n, ATTRS_PP);
        if (is_tagged(n)) fprintf(f, " [%s]", op_name(n->tag));
    }
    fputs("\\n", f);
    print_py_tuple(f, n->shape.dims, n->shape.ndim);
    fprintf(f, " %s\"];\n", ot_dtype_name((ot_dtype)n->dtype));
}

/* Gives n the next DOT id (dense from 0; a shared subtree is written once,
 * so a DAG costs linear time) and writes it and the edges from its
 * operands, which already have ids. */
static bool dot_emit(FILE *f, ot__ptrmap *ids, const ot_node *n)
{
    int id = (int)ids->len;
    if (!ot__ptrmap_put(ids, n, id)) return false;
    dot_node(f, n, id);
    if (n->kind != OT_NODE_OP) return true;
    if (n->a) fprintf(f, "  n%d -> n%d;\n", ot__ptrmap_get(ids, n->a), id);
    if (n->b) fprintf(f, "  n%d -> n%d;\n", ot__ptrmap_get(ids, n->b), id);
    return true;
}

int ot_graphviz(const ot_node *tree, FILE *f)
{
    int rc = print_begin("ot_graphviz", tree, "tree", f);
    if (rc) return rc;
    frames st = {0};
    ot__ptrmap ids = {0};
    bool ok = frames_push(&st, tree);
    fputs("digraph optree {\n", f);
    while (ok && st.len > 0 && !ferror(f)) {
        frame *top = &st.v[st.len - 1];
        const ot_node *n = top->n;
        if (n->kind == OT_NODE_OP && top->next < 2) {
            const ot_node *child = top->next++ == 0 ? n->a : n->b;
            if (child && ot__ptrmap_get(&ids, child) < 0) ok = frames_push(&st, child);
            continue;
        }
        st.len--;
        ok = dot_emit(f, &ids, n);
    }
    fputs("}\n", f);
    free(st.v);
    ot__ptrmap_free(&ids);
    return ok ? print_end("ot_graphviz", f) : out_of_memory("ot_graphviz");
}

/* ---- ot_stack_print ------------------------------------------------------ */

/* Item i on one line: "0: leaf x0 (2, 2) float32", "1: const 0.5 float32",
 * "2: add (2, 2) float32 <- 0 1", "3: sum axis=1 (2,) float32 <- 2". */
static void stack_line(FILE *f, int i, const ot_stack_item *it)
{
    const ot_node *n = it->node;
    fprintf(f, "%d: ", i);
    if (it->kind == OT_NODE_OP) {
        fputs(op_name(it->op), f);
        op_attrs(f, n, ATTRS_LISTING);
    } else {
        fputs(it->kind == OT_NODE_LEAF ? "leaf " : "const ", f);
        print_atom(f, n);
    }
    if (it->kind != OT_NODE_CONST) {
        fputc(' ', f);
        print_py_tuple(f, n->shape.dims, n->shape.ndim);
    }
    fprintf(f, " %s", ot_dtype_name((ot_dtype)n->dtype));
    if (it->a >= 0) fprintf(f, " <- %d", it->a);
    if (it->b >= 0) fprintf(f, " %d", it->b);
    fputc('\n', f);
}

int ot_stack_print(const ot_stack *s, FILE *f)
{
    int rc = print_begin("ot_stack_print", s, "stack", f);
    if (rc) return rc;
    for (int i = 0; i < ot_stack_len(s) && !ferror(f); i++)
        stack_line(f, i, ot_stack_at(s, i));
    return print_end("ot_stack_print", f);
}
