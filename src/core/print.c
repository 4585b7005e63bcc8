/*
 * print.c - every text form: of a tree, neon's tuple form (ot_print), infix
 * (ot_pp) and Graphviz DOT (ot_graphviz); of a post-order stack, the listing
 * of ot_stack_print (stack.c builds the stack, this only reads its items);
 * and the float repr they share (ot__fmt_double).
 *
 * Trees may be 100,000 nodes deep, so every walk is walk.c's walker, whose
 * stack is on the heap. Trees are DAGs: ot_print and ot_pp write an op node
 * used more than once a single time, as a line "%1 = <expr>" ahead of the
 * expression that uses it as %1 (leaves and constants repeat), so the output
 * stays linear in the distinct nodes; an unshared tree is one expression
 * (for ot_pp, one under 64 levels tall: walk).
 * ot_print and ot_pp write no trailing newline (like Python's repr, the
 * caller ends the line); ot_graphviz and ot_stack_print write whole lines.
 * All four return 0, OT_ENULL for a NULL FILE (a NULL tree or stack returns
 * the code already in the error slot, as every function that does work),
 * OT_ENOMEM, or OT_EIO when a write to f or its flush fails.
 */
#include "internal.h"
#include "ops.h"

#include <float.h>
#include <inttypes.h>

/* ---- numbers ------------------------------------------------------------- */

static bool reads_back(const char *text, double v, bool f32)
{
    return f32 ? strtof(text, NULL) == (float)v : strtod(text, NULL) == v;
}

/* The same in a 16-bit dtype (v is one of its values), as NumPy prints f16. */
static bool reads_back_half(const char *text, double v, int half)
{
    double r = strtod(text, NULL);
    return half == OT_F16 ? ot__f64_to_f16(r) == ot__f64_to_f16(v)
                          : ot__f64_to_bf16(r) == ot__f64_to_bf16(v);
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

/* ---- NumPy's array print ------------------------------------------------- */

/* NumPy's FloatingFormat (arrayprint.py) with its defaults, floatmode
 * 'maxprec', sign '-', suppress off: precision counts digits after the
 * point. Scientific for the whole array when a finite non-zero |value| is
 * >= 1e8 or < 1e-4 or the largest is over 1000 times the smallest, else
 * positional. Each value is Dragon4's unique digits: the fewest that read
 * back as the value, cut at precision digits (rounding the exact value),
 * trailing zeros dropped but the point kept (1.). Positional values line
 * up on the point, padded with spaces on both sides; scientific ones share
 * the longest mantissa (more digits of the exact value) and exponent. */
enum { FMT_INT, FMT_POS, FMT_SCI };

/* v's unique digits, at most prec after the point ("%#.*f" or "%#.*e"
 * form, trailing zeros of the fraction dropped); returns the length. */
static int unique_digits(char *buf, size_t n, double v, int prec, bool sci,
                         const ot__numfmt *f)
{
    const char *fmt = sci ? "%#.*e" : "%#.*f";
    for (int k = 0; k <= prec; k++) {
        snprintf(buf, n, fmt, k, v);
        if (f->half ? reads_back_half(buf, v, f->half) : reads_back(buf, v, f->f32)) break;
    }
    char *point = strchr(buf, '.'), *e = strchr(buf, 'e'), *end = e ? e : buf + strlen(buf);
    char *cut = end;
    while (cut > point + 1 && cut[-1] == '0') cut--;
    memmove(cut, end, strlen(end) + 1);
    return (int)strlen(buf);
}

void ot__numfmt_start(ot__numfmt *f, ot_dtype dt, int precision)
{
    *f = (ot__numfmt){.kind = dt == OT_I32 ? FMT_INT : FMT_POS, .f32 = dt == OT_F32,
                      .half = (uint8_t)(ot__is_half(dt) ? dt : 0),
                      .precision = precision, .exp_size = -1};
}

/* Pass 0 takes the range (and an integer's width); pass 1 the lengths of
 * the parts of each finite value's digits in the chosen layout. */
void ot__numfmt_see(ot__numfmt *f, double v)
{
    char buf[OT__NUMFMT_STRLEN];
    if (f->kind == FMT_INT) {
        int n = snprintf(buf, sizeof buf, "%d", (int)v);
        f->width = n > f->width ? n : f->width;
    } else if (!isfinite(v)) {
        f->non_finite = true;
        f->neg_inf = f->neg_inf || v < 0;
    } else if (f->pass == 0) {
        double a = fabs(v);
        if (a != 0) {
            f->max_abs = !f->finite || a > f->max_abs ? a : f->max_abs;
            f->min_abs = !f->finite || a < f->min_abs ? a : f->min_abs;
            f->finite = true;
        }
    } else {
        unique_digits(buf, sizeof buf, v, f->precision, f->kind == FMT_SCI, f);
        char *point = strchr(buf, '.'), *e = strchr(buf, 'e');
        int left = (int)(point - buf), frac = (int)((e ? e : point + strlen(point)) - point - 1);
        f->pad_left = left > f->pad_left ? left : f->pad_left;
        f->pad_right = frac > f->pad_right ? frac : f->pad_right;
        if (e) f->exp_size = (int)strlen(e + 2) > f->exp_size ? (int)strlen(e + 2) : f->exp_size;
    }
}

/* The layout from the range after pass 0 (the ratio in float for f32, as
 * NumPy divides two float32 scalars); the widths after pass 1. */
bool ot__numfmt_next_pass(ot__numfmt *f)
{
    if (f->kind == FMT_INT) return false;
    if (f->pass++ == 0) {
        double ratio = f->f32 ? (double)((float)f->max_abs / (float)f->min_abs)
                              : f->max_abs / f->min_abs;
        if (f->finite && (f->max_abs >= 1e8 || f->min_abs < 0.0001 || ratio > 1000.))
            f->kind = FMT_SCI;
        return true;   /* the values with no non-zero finite one still set the pads */
    }
    if (f->kind == FMT_SCI) {
        f->precision = f->pad_right;   /* every mantissa gets the longest fraction */
        f->pad_right = f->exp_size + 2 + f->precision;
    }
    if (f->non_finite) {
        int offset = f->pad_right + 1, nan_need = 3 - offset, inf_need = 3 + f->neg_inf - offset;
        if (nan_need > f->pad_left) f->pad_left = nan_need;
        if (inf_need > f->pad_left) f->pad_left = inf_need;
    }
    f->width = f->pad_left + f->pad_right + 1;
    return false;
}

int ot__numfmt_str(const ot__numfmt *f, double v, char buf[OT__NUMFMT_STRLEN])
{
    if (f->kind == FMT_INT) return snprintf(buf, OT__NUMFMT_STRLEN, "%*d", f->width, (int)v);
    if (!isfinite(v))
        return snprintf(buf, OT__NUMFMT_STRLEN, "%*s", f->width, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    char d[OT__NUMFMT_STRLEN];
    if (f->kind == FMT_POS) {
        unique_digits(d, sizeof d, v, f->precision, false, f);
        int left = (int)(strchr(d, '.') - d), frac = (int)strlen(strchr(d, '.') + 1);
        return snprintf(buf, OT__NUMFMT_STRLEN, "%*s%s%*s", f->pad_left - left, "", d,
                        f->pad_right - frac, "");
    }
    /* NumPy's min_digits: the digits past the unique ones are the exact
     * value's, so each mantissa is the value rounded to precision digits */
    snprintf(d, sizeof d, "%#.*e", f->precision, v);
    char *e = strchr(d, 'e');
    int left = (int)(strchr(d, '.') - d);
    return snprintf(buf, OT__NUMFMT_STRLEN, "%*s%.*se%c%0*d", f->pad_left - left, "",
                    (int)(e - d), d, e[1], f->exp_size, atoi(e + 2));
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
/* An op node's own name: a registered op's (ot_op_register), else its op's. */
static const char *node_name(const ot_node *n) { return op_name(ot__node_op(n)); }
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
    if (n->kind == OT_NODE_LEAF && n->axes) fprintf(f, "(%s)", n->axes->text);
}

/* "h1" followed by sep, for an op or constant node with a name (a leaf's
 * name is the atom itself). */
static void print_label(FILE *f, const ot_node *n, const char *sep)
{
    const char *name = n->kind != OT_NODE_LEAF ? ot_node_name(n) : NULL;
    if (name) fprintf(f, "%s%s", name, sep);
}

/* A Python str literal: 'h1', quotes, backslashes and control characters
 * escaped. */
static void print_py_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('\'', f);
}

/* ot_pp's label of a named op or constant node, "h1:": an identifier as
 * it is, any other name (a space, '/', a digit first, inf or nan, which
 * ot_parse reads as numbers) as a quoted str literal, 'dense/fc 1':, which
 * ot_parse reads back (written bare, such a name made ot_pp's text
 * unreadable to ot_parse, which read "dense/fc 1:(x + y)" as a division). */
static void print_pp_label(FILE *f, const ot_node *n)
{
    const char *name = n->kind != OT_NODE_LEAF ? ot_node_name(n) : NULL;
    if (!name) return;
    if (ot__parse_spells_name(name)) fputs(name, f);
    else print_py_str(f, name);
    fputc(':', f);
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

/* A window attribute (int32_t[3] of args.win) widened over the node's
 * spatial dims, for the tuple writers above. */
static int64_t *win_dims(const ot_node *n, const char *p, int64_t out[3], int *count)
{
    *count = ot__win_dims(n);
    for (int i = 0; i < *count; i++) out[i] = ((const int32_t *)p)[i];
    return out;
}

/* A slice's indices as NumPy writes them: [1:3, :, 2, ::-1]. */
static void print_index(FILE *f, const ot_node *n)
{
    const ot_args *g = &n->args;
    fputc('[', f);
    for (int d = 0; d < n->a->shape.ndim; d++) {
        int64_t first = g->start[d], step = g->perm[d], count = g->shape.dims[d];
        int64_t stop = first + count * step;
        if (d) fputs(", ", f);
        if (!step) fprintf(f, "%lld", (long long)first);
        else if (first == 0 && step == 1 && count == n->a->shape.dims[d]) fputc(':', f);
        else if (stop < 0) fprintf(f, "%lld::%lld", (long long)first, (long long)step);
        else if (step == 1) fprintf(f, "%lld:%lld", (long long)first, (long long)stop);
        else fprintf(f, "%lld:%lld:%lld", (long long)first, (long long)stop, (long long)step);
    }
    fputc(']', f);
}

/* ---- the walks ----------------------------------------------------------- */

/* How a form writes an op node: open, then before each operand sep(k), the
 * operand itself, then close. A NULL operand prints as missing, or not at
 * all (nor its sep) when missing is NULL. */
typedef struct form {
    const char *fn;
    bool composites;     /* a composite root writes as the composite, over its
                            own operands (walk.c's composites) */
    bool labels;         /* a named constant writes as "lr:0.5" */
    bool f32_marks;      /* an f32 constant whose parent is not f32 (or that
                            is the root) writes as "0.1f", so that ot_parse
                            reads it back as ot_constf: anywhere else a
                            literal takes its parent's dtype anyway */
    void (*open)(FILE *f, const ot_node *n);
    void (*sep)(FILE *f, const ot_node *n, int k);
    void (*close)(FILE *f, const ot_node *n);
    const char *missing;
} form;

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

/* The nodes of a tree as a form reaches them, numbered by the walker: each
 * op node's count of uses, and a name (%1, %2, ...) when used more than
 * once, so that it is written once and referred to afterwards. */
typedef struct dag {
    ot__walker walker;
    const ot_node **node;  /* by index */
    int *uses, *name;      /* by index; name 0: written in place */
    size_t cap;
} dag;

static void dag_free(dag *d)
{
    ot__walker_free(&d->walker);
    free(d->node);
    free(d->uses);
    free(d->name);
}

static bool dag_grow(dag *d, size_t need)
{
    if (need <= d->cap) return true;
    size_t cap = d->cap ? 2 * d->cap : 64;
    const ot_node **node = ot__realloc(d->node, cap * sizeof *node);
    if (node) d->node = node;
    int *uses = node ? ot__realloc(d->uses, cap * sizeof *uses) : NULL;
    if (uses) d->uses = uses;
    int *name = uses ? ot__realloc(d->name, cap * sizeof *name) : NULL;
    if (!name) return false;
    d->name = name;
    d->cap = cap;
    return true;
}

static bool is_op(const ot_node *n) { return n && n->kind == OT_NODE_OP; }

/* Counts the uses of each op node by the op nodes above it. */
static int dag_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    dag *d = w->ctx;
    if (!dag_grow(d, (size_t)index + 1)) return OT_ENOMEM;
    d->node[index] = n;
    d->uses[index] = 0;
    d->name[index] = 0;
    for (int k = 0; k < 2; k++)
        if (operand[k] >= 0 && is_op(ot__walker_operand(w, n, k))) d->uses[operand[k]]++;
    return 0;
}

/* The name of n when it is a shared op node, else 0. */
static int dag_name(const dag *d, const ot_node *n)
{
    int k = is_op(n) ? ot__walker_index(&d->walker, n) : -1;
    return k < 0 ? 0 : d->name[k];
}

/* Whether an f32 constant, operand slot of parent (NULL at the root),
 * must say so: read back as a plain literal it is f64 and weak, which
 * becomes f32 only beside a strongly f32 operand of a binary op (and a
 * composite's operands feed ops not shown). */
static bool f32_unsaid(const ot_node *n, const ot_node *parent, int slot)
{
    if (n->kind != OT_NODE_CONST || n->dtype != OT_F32) return false;
    if (!parent || is_tagged(parent) || ot_op_kind(ot__node_op(parent)) != OT_KIND_BINARY)
        return true;
    const ot_node *other = slot ? parent->a : parent->b;
    return !other || other->dtype != OT_F32 || other->weak;
}

/* An atom as fm writes it in operand slot of parent (NULL at the root):
 * named constants labelled where fm labels; for ot_parse's sake, f32
 * constants marked where f32_unsaid, and a negative base of ** in
 * parentheses (-1.0 ** x reads as -(1.0 ** x)). */
static void write_atom(const form *fm, const ot_node *n, const ot_node *parent, int slot, FILE *f)
{
    bool wrap = fm->f32_marks && parent && !is_tagged(parent) && parent->op == OT_OP_POW &&
                slot == 0 && n->kind == OT_NODE_CONST && signbit(n->value);
    if (fm->labels && n->kind == OT_NODE_CONST) print_pp_label(f, n);
    if (wrap) fputc('(', f);
    print_atom(f, n);
    if (fm->f32_marks && f32_unsaid(n, parent, slot)) fputc('f', f);
    if (wrap) fputc(')', f);
}

/* One expression being written: the walker walks every path, and the hooks
 * cut it at named nodes and atoms, which are written where they are met. */
typedef struct expr {
    const form *fm;
    const dag *d;
    const ot_node *top;
    FILE *f;
    const ot_node *parent;   /* of the operand about to be entered */
    int slot;                /* its operand index */
} expr;

static int expr_enter(ot__walker *w, const ot_node *n)
{
    const expr *x = w->ctx;
    if (ferror(x->f)) return OT_EIO;
    int name = n != x->top ? dag_name(x->d, n) : 0;
    if (name) fprintf(x->f, "%%%d", name);
    else if (!is_op(n)) write_atom(x->fm, n, x->parent, x->slot, x->f);
    else x->fm->open(x->f, n);
    return !name && is_op(n);
}

static int expr_between(ot__walker *w, const ot_node *n, int k, const ot_node *operand)
{
    expr *x = w->ctx;
    x->parent = n;
    x->slot = k;
    if (operand || x->fm->missing) x->fm->sep(x->f, n, k);
    if (!operand && x->fm->missing) fputs(x->fm->missing, x->f);
    return 0;
}

static int expr_close(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index;
    (void)operand;
    const expr *x = w->ctx;
    x->fm->close(x->f, n);
    return 0;
}

/* Writes one expression; an operand that is a named node is written as its
 * name. False when out of memory (a failed write stops it early, for
 * print_end to report). */
static bool write_expr(const form *fm, const dag *d, const ot_node *top, FILE *f)
{
    if (!is_op(top)) {
        write_atom(fm, top, NULL, 0, f);
        return true;
    }
    expr x = {fm, d, top, f, NULL, 0};
    ot__walker w = {.visit = expr_close, .enter = expr_enter, .between = expr_between,
                    .ctx = &x, .composites = fm->composites, .every_path = true};
    int rc = ot__walker_run(&w, top);
    ot__walker_free(&w);
    return rc != OT_ENOMEM;
}

/* Nesting ot_pp lets one expression reach before it names a node on its
 * own line: ot_parse reads 200 levels of parentheses and calls (parse.c's
 * MAX_DEPTH), and a level of the tree is at most two of them. */
#define PP_MAX_HEIGHT 64

/* The levels of op nodes node k's expression nests, its named operands
 * (written as %j) counting none. */
static int expr_height(const dag *d, const int *height, int k)
{
    const ot_node *n = d->node[k];
    int h = 0;
    for (int j = 0; is_op(n) && j < 2; j++) {
        const ot_node *o = ot__walker_operand(&d->walker, n, j);
        int i = o && is_op(o) ? ot__walker_index(&d->walker, o) : -1;
        if (i >= 0 && !d->name[i] && height[i] > h) h = height[i];
    }
    return is_op(n) ? h + 1 : 0;
}

/* Writes a tree in a form. An op node used more than once is written once,
 * on its own line "%k = <expr>" before its first use (operands first), and
 * as %k wherever it is used, so output is linear in the distinct nodes; a
 * tree without shared op nodes prints as one expression. For ot_parse
 * (forms with f32 marks, ot_pp's) a node whose expression would nest
 * PP_MAX_HEIGHT levels is named so too: a sum of 201 terms was written as
 * 201 nested parentheses, which ot_parse refused ("nested deeper than
 * 200"), so ot_parse(ot_pp(t)) failed for a tall tree. */
static int walk(const form *fm, const ot_node *tree, FILE *f)
{
    int rc = print_begin(fm->fn, tree, "tree", f);
    if (!rc) rc = ot__node_check(fm->fn, NULL, 0, "the tree", tree);
    if (rc) return rc;
    dag d = {.walker = {.visit = dag_visit, .composites = fm->composites}};
    d.walker.ctx = &d;
    int root = ot__walker_run(&d.walker, tree);
    bool ok = root >= 0;
    if (ok) d.uses[root]++;   /* the caller's */
    int names = 0, *height = ok ? ot__calloc((size_t)d.walker.count + 1, sizeof *height) : NULL;
    ok = ok && height;
    for (int k = 0; ok && k < d.walker.count && !ferror(f); k++) {
        height[k] = expr_height(&d, height, k);
        bool tall = fm->f32_marks && height[k] >= PP_MAX_HEIGHT && k != root;
        if (d.uses[k] < 2 && !tall) continue;
        fprintf(f, "%%%d = ", ++names);
        ok = write_expr(fm, &d, d.node[k], f);
        fputc('\n', f);
        d.name[k] = names;
    }
    ok = ok && write_expr(fm, &d, tree, f);
    free(height);
    dag_free(&d);
    return ok ? print_end(fm->fn, f) : out_of_memory(fm->fn);
}

/* ---- op attributes --------------------------------------------------------- */

/* The three ways op attributes are written, all from ops.h's attribute
 * table. ATTRS_PP is ot_pp's (and the labels of ot_graphviz): " axis=1
 * keepdims", compact dims, and the node's own shape and dtype where an op
 * sets them, since the infix form shows neither otherwise. ATTRS_LISTING
 * is ot_stack_print's: its line goes on with the item's shape and dtype,
 * and a perm is a Python tuple as that shape is. ATTRS_TUPLE is ot_print's
 * dict entries after 'op': ", 'axis': None, 'keepdims': True". */
typedef enum attr_style { ATTRS_PP, ATTRS_LISTING, ATTRS_TUPLE } attr_style;

/* The value of an attribute held as a number (or a dtype), widened, to
 * compare with its default. */
static int64_t attr_number(const ot_node *n, const ot__attr *at)
{
    const char *p = (const char *)&n->args + at->off;
    switch (at->type) {
    case OT__AT_INT: return *(const int *)p;
    case OT__AT_FLAG: return *(const bool *)p;
    case OT__AT_I64: return *(const int64_t *)p;
    case OT__AT_U64: return (int64_t) * (const uint64_t *)p;
    case OT__AT_DTYPE: return *(const ot_dtype *)p;
    default: return n->dtype;   /* OT__AT_NODE_DTYPE */
    }
}

/* The value of attribute at of n, after its name. */
static void attr_value(FILE *f, const ot_node *n, const ot__attr *at, attr_style style)
{
    const char *p = (const char *)&n->args + at->off;
    int64_t perm[OT_MAX_DIMS];
    int nw;
    char num[40];
    const char *quote = style == ATTRS_TUPLE ? "'" : "";
    switch (at->type) {
    case OT__AT_INT: fprintf(f, "%d", *(const int *)p); break;
    case OT__AT_FLAG: fputs(style == ATTRS_TUPLE ? "True" : "", f); break;
    case OT__AT_I64: fprintf(f, "%lld", (long long)*(const int64_t *)p); break;
    case OT__AT_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case OT__AT_DOUBLE:
        ot__fmt_double(num, sizeof num, *(const double *)p);
        fputs(num, f);
        break;
    case OT__AT_DTYPE:
    case OT__AT_NODE_DTYPE:
        fprintf(f, "%s%s%s", quote, ot_dtype_name((ot_dtype)attr_number(n, at)), quote);
        break;
    case OT__AT_NODE_SHAPE: print_dims(f, n->shape.dims, n->shape.ndim); break;
    case OT__AT_PERM:
        if (style == ATTRS_PP) print_dims(f, perm_dims(n, perm), n->shape.ndim);
        else print_py_tuple(f, perm_dims(n, perm), n->shape.ndim);
        break;
    case OT__AT_WIN3:
        win_dims(n, p, perm, &nw);
        if (style == ATTRS_PP) print_dims(f, perm, nw);
        else print_py_tuple(f, perm, nw);
        break;
    default:   /* OT__AT_INDEX */
        fputs(quote, f);
        print_index(f, n);
        fputs(quote, f);
        break;
    }
}

/* One attribute: " name=value" (a flag bare, an index alone) or, in the
 * tuple form, ", 'name': value". A default the table omits goes unsaid,
 * except the tuple form's None. */
static void write_attr(FILE *f, const ot_node *n, const ot__attr *at, attr_style style)
{
    if (at->pp_only && style != ATTRS_PP) return;
    bool dflt = at->omit && attr_number(n, at) == at->dflt;
    if (dflt && !(at->none && style == ATTRS_TUPLE)) return;
    if (style == ATTRS_TUPLE) fprintf(f, ", '%s': ", at->name);
    else if (at->type == OT__AT_FLAG) fprintf(f, " %s", at->name);
    else if (at->type == OT__AT_INDEX) fputc(' ', f);
    else fprintf(f, " %s=", at->name);
    if (dflt) fputs("None", f);
    else attr_value(f, n, at, style);
}

/* The attributes of op (n's own, or its composite tag's) in the table's
 * order. */
static void op_attrs(FILE *f, const ot_node *n, int op, attr_style style)
{
    for (int id = OT__ATTR_NONE + 1; id < OT__ATTR_COUNT; id++)
        if (ot__op_has_attr(op, id)) write_attr(f, n, &ot__attrs[id], style);
}

/* ---- ot_print: neon's tuple form ----------------------------------------- */

/* A node's name and metadata as dict entries: , 'name': 'h1', 'meta':
 * {'k': 'v'}. */
static void tuple_annots(FILE *f, const ot_node *n)
{
    const char *name = ot_node_name(n), *key, *value;
    if (name) {
        fputs(", 'name': ", f);
        print_py_str(f, name);
    }
    int count = ot_node_meta_count(n);
    for (int i = 0; i < count; i++) {
        ot__meta_entry(n, i, &key, &value);
        fputs(i ? ", " : ", 'meta': {", f);
        print_py_str(f, key);
        fputs(": ", f);
        print_py_str(f, value);
    }
    if (count) fputc('}', f);
}

static void tuple_open(FILE *f, const ot_node *n)
{
    fputs("({'shape': ", f);
    print_py_tuple(f, n->shape.dims, n->shape.ndim);
    fprintf(f, ", 'op': '%s'", node_name(n));
    op_attrs(f, n, n->op, ATTRS_TUPLE);
    tuple_annots(f, n);
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

static const form tuple_form = {"ot_print", false, false, false, tuple_open, tuple_sep, tuple_close,
                                "None"};

int ot_print(const ot_node *tree, FILE *f)
{
    return walk(&tuple_form, tree, f);
}

/* ---- ot_pp: infix -------------------------------------------------------- */

/* A composite root prints as the composite, over its own operands. */
static int pp_op(const ot_node *n) { return is_tagged(n) ? n->tag : n->op; }

static void pp_open(FILE *f, const ot_node *n)
{
    print_pp_label(f, n);
    fputc('(', f);
    if (!op_symbol[pp_op(n)]) fputs(is_tagged(n) ? op_name(n->tag) : node_name(n), f);
}

static void pp_sep(FILE *f, const ot_node *n, int k)
{
    const char *sym = op_symbol[pp_op(n)];
    if (!sym) fputc(' ', f);
    else if (k > 0) fprintf(f, " %s ", sym);
}

static void pp_close(FILE *f, const ot_node *n)
{
    op_attrs(f, n, pp_op(n), ATTRS_PP);
    fputc(')', f);
}

static const form pp_form = {"ot_pp", true, true, true, pp_open, pp_sep, pp_close, NULL};

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
 * attributes and composite tag, after the name of a named one), then its
 * shape and dtype, then a line per metadata entry. */
static void dot_node(FILE *f, const ot_node *n, int id)
{
    static const char *const box[] = {[OT_NODE_LEAF] = "box", [OT_NODE_CONST] = "plaintext",
                                       [OT_NODE_OP] = "ellipse"};
    const char *name = ot_node_name(n), *key, *value;
    fprintf(f, "  n%d [shape=%s, label=\"", id, box[n->kind]);
    if (name) {
        dot_escaped(f, name);
        if (n->kind == OT_NODE_LEAF && n->axes) fprintf(f, "(%s)", n->axes->text);
        if (n->kind != OT_NODE_LEAF) fputs(": ", f);
    }
    if (n->kind == OT_NODE_CONST || (n->kind == OT_NODE_LEAF && !name)) {
        print_atom(f, n);
    } else if (n->kind == OT_NODE_OP) {
        fputs(node_name(n), f);
        op_attrs(f, n, n->op, ATTRS_PP);
        if (is_tagged(n)) fprintf(f, " [%s]", op_name(n->tag));
    }
    fputs("\\n", f);
    print_py_tuple(f, n->shape.dims, n->shape.ndim);
    fprintf(f, " %s", ot_dtype_name((ot_dtype)n->dtype));
    for (int i = 0; i < ot_node_meta_count(n); i++) {
        ot__meta_entry(n, i, &key, &value);
        fputs("\\n", f);
        dot_escaped(f, key);
        fputc('=', f);
        dot_escaped(f, value);
    }
    fputs("\"];\n", f);
}

/* Writes n with its walk index as DOT id (dense from 0; a shared subtree is
 * written once, so a DAG costs linear time) and the edges from its
 * operands, written before it. */
static int dot_visit(ot__walker *w, const ot_node *n, int id, const int operand[2])
{
    FILE *f = w->ctx;
    if (ferror(f)) return OT_EIO;
    dot_node(f, n, id);
    for (int k = 0; k < 2; k++)
        if (operand[k] >= 0) fprintf(f, "  n%d -> n%d;\n", operand[k], id);
    return 0;
}

int ot_graphviz(const ot_node *tree, FILE *f)
{
    int rc = print_begin("ot_graphviz", tree, "tree", f);
    if (!rc) rc = ot__node_check("ot_graphviz", NULL, 0, "the tree", tree);
    if (rc) return rc;
    ot__walker w = {.visit = dot_visit, .ctx = f};
    fputs("digraph optree {\n", f);
    rc = ot__walker_run(&w, tree);
    fputs("}\n", f);
    ot__walker_free(&w);
    return rc == OT_ENOMEM ? out_of_memory("ot_graphviz") : print_end("ot_graphviz", f);
}

/* ---- ot_stack_print ------------------------------------------------------ */

/* Item i on one line: "0: leaf x0 (2, 2) float32", "1: const 0.5 float32",
 * "2: add (2, 2) float32 <- 0 1", "3: sum axis=1 (2,) float32 <- 2". */
static void stack_line(FILE *f, int i, const ot_stack_item *it)
{
    const ot_node *n = it->node;
    fprintf(f, "%d: ", i);
    print_label(f, n, ": ");
    if (it->kind == OT_NODE_OP) {
        fputs(node_name(n), f);
        op_attrs(f, n, n->op, ATTRS_LISTING);
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
