/*
 * parse.c - ot_parse: an expression string in the usual infix syntax into
 * an op-tree over named operands. Recursive descent with Python's
 * precedence; every op of the table (and every registered op) is a
 * function by its name, with positional and keyword attributes. Errors
 * name the column. Nesting is bounded, so no input can exhaust the stack.
 */
#include "internal.h"
#include "ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>

/* Deeper nesting than this is an error rather than a deep C recursion:
 * each level costs a few frames of the descent. Every recursive path of
 * the descent passes through unary() (an operand) or labelled(), and those
 * two count the depth, so no path escapes the bound. */
enum { MAX_DEPTH = 200, MAX_IDENT = OT_NAME_MAX + 1, MAX_ARGS = 16 };
/* An op's attribute names, comma-separated: at most OT__ATTRS_MAX names. */
enum { MAX_MEMBERS = OT__ATTRS_MAX * MAX_IDENT };

typedef struct parser {
    const char *src, *p;
    int n;
    const char *const *names;
    ot_node *const *nodes;
    int depth;
    bool failed;          /* an error is set: the first one stands */
    ot_node **defs;       /* ot_pp's shared nodes, %1 = ... */
    int ndef;
    int perm_n;           /* the entries of the call's perm written, or -1 */
} parser;

static int col(const parser *ps, const char *at) { return (int)(at - ps->src) + 1; }

/* Sets the error at column at, unless one is set already: the innermost
 * cause (a literal out of range) is kept over the message of a caller that
 * only saw its operand fail ("axis must be a number"). */
static ot_node *fail(parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ot_node *fail(parser *ps, const char *at, const char *fmt, ...)
{
    if (ps->failed) return NULL;
    ps->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ot__err_set(OT_EINVAL, NULL, 0, "parse", "col %d: %s", col(ps, at), msg);
    return NULL;
}

/* A builder's error, kept but placed at the column of its call. */
static ot_node *fail_build(parser *ps, const char *at)
{
    ps->failed = true;
    char msg[512];
    int code = ot_errcode() ? ot_errcode() : OT_EINVAL;
    snprintf(msg, sizeof msg, "%s", ot__site_strip(ot_errmsg()));
    ot__err_reword(code, NULL, 0, "parse", "col %d: %s", col(ps, at), msg);
    return NULL;
}

/* ---- lexing ------------------------------------------------------------------ */

static void skip_space(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

/* Consumes tok (after spaces) when it comes next; "*" never matches "**",
 * "<" never "<=" and so on. */
static bool accept(parser *ps, const char *tok)
{
    skip_space(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->p, tok, n) != 0) return false;
    char next = ps->p[n];
    if (n == 1 && ((tok[0] == '*' && next == '*') || (strchr("<>=", tok[0]) && next == '=')))
        return false;
    ps->p += n;
    return true;
}

static bool ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The bytes of the identifier s starts with (0: none). */
static size_t ident_len(const char *s)
{
    size_t k = ident_start(*s) ? 1 : 0;
    while (k && ident_char(s[k])) k++;
    return k;
}

/* Whether s is spelled as views are named after their tensor (names.c:
 * "x[2:5]", "m.T", "x.reshape(4,16)", "x[1:3].T"): an identifier, then
 * printable text starting with '.' or '['. ot_pp writes such a leaf by its
 * name, so the parse reads it verbatim (view_operand). */
static bool view_spelling(const char *s)
{
    size_t k = ident_len(s);
    if (!k || (s[k] != '.' && s[k] != '[')) return false;
    for (; s[k]; k++)
        if (s[k] < 0x20 || s[k] > 0x7e) return false;
    return true;
}

/* At an operand's start: the operand whose view name (view_spelling) the
 * text spells here, the longest one, not running on into an identifier;
 * else NULL, nothing consumed. */
static ot_node *view_operand(parser *ps)
{
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < ps->n; i++) {
        const char *s = ps->names[i];
        size_t len = strlen(s);
        if (len > best_len && strncmp(ps->p, s, len) == 0 && view_spelling(s) &&
            !(ident_char(s[len - 1]) && ident_char(ps->p[len]))) {
            best = i;
            best_len = len;
        }
    }
    if (best < 0) return NULL;
    ps->p += best_len;
    return ps->nodes[best];
}

/* An identifier into buf; false (nothing consumed) when none comes next. */
static bool ident(parser *ps, char *buf)
{
    skip_space(ps);
    if (!ident_start(*ps->p)) return false;
    const char *s = ps->p;
    while (ident_char(*ps->p)) ps->p++;
    size_t n = (size_t)(ps->p - s);
    if (n >= MAX_IDENT) {   /* cut, it matched the name of its first 63 bytes */
        fail(ps, s, "a name of %zu bytes is longer than OT_NAME_MAX (%d)", n, OT_NAME_MAX);
        return false;   /* nothing named: a label's would clear the error */
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

/* The f after a literal (ot_pp's mark of an f32 constant), when it ends
 * the literal. */
static bool f32_mark(parser *ps)
{
    if (*ps->p != 'f' || ident_char(ps->p[1])) return false;
    ps->p++;
    return true;
}

/* The value of the literal s..end as strtod (strtof with the f mark)
 * reads it in place, to its last digit however long: 1 followed by 200
 * zeros is 1e200 exactly, correctly rounded. 1 when read; -1 (error set)
 * when the value is beyond the type's range (inf is written inf) or
 * strtod stops elsewhere (an LC_NUMERIC with another decimal point): never
 * a misread value. A bare 0 is not handed to strtod, which would read
 * "0x1" as hex. */
static int literal_value(parser *ps, const char *s, const char *end, bool f32, double *v)
{
    if (end == s + 1 && *s == '0') {
        *v = 0;
        return 1;
    }
    char *stop;
    errno = 0;
    *v = f32 ? strtof(s, &stop) : strtod(s, &stop);
    const char *why = NULL;
    if (stop != end) why = "is not read as written (is the locale's decimal point '.'?)";
    else if (errno == ERANGE && isinf(*v)) why = f32 ? "is beyond f32's range" : "is beyond f64's range";
    if (!why) return 1;
    int shown = end - s > 40 ? 40 : (int)(end - s);
    fail(ps, s, "the literal %.*s%s %s", shown, s, end - s > shown ? "..." : "", why);
    return -1;
}

/* A number literal: digits with an optional fraction and exponent, or
 * inf/nan, and an optional f. *kind: LIT_INT when written without '.',
 * 'e', a name or f; LIT_F32 with the f; else LIT_F64. Returns 1 when one
 * was read, 0 (nothing consumed) when none comes next, -1 (error set)
 * when its value cannot be read (literal_value). */
enum { LIT_INT, LIT_F64, LIT_F32 };
static int number(parser *ps, double *v, int *kind)
{
    skip_space(ps);
    const char *s = ps->p, *q = s;
    bool nan = strncmp(q, "nan", 3) == 0;
    if ((nan || strncmp(q, "inf", 3) == 0) &&
        (!ident_char(q[3]) || (q[3] == 'f' && !ident_char(q[4])))) {
        ps->p += 3;
        *v = nan ? NAN : INFINITY;
        *kind = f32_mark(ps) ? LIT_F32 : LIT_F64;
        return 1;
    }
    while (isdigit((unsigned char)*q)) q++;
    bool digits = q > s, frac = *q == '.';
    if (frac) {
        q++;
        while (isdigit((unsigned char)*q)) q++;
        digits = digits || q > s + 1;
    }
    if (!digits) return 0;
    bool expo = false;
    if (*q == 'e' || *q == 'E') {
        const char *e = q + 1;
        if (*e == '+' || *e == '-') e++;
        if (isdigit((unsigned char)*e)) {
            while (isdigit((unsigned char)*e)) e++;
            q = e;
            expo = true;
        }
    }
    ps->p = q;
    *kind = f32_mark(ps) ? LIT_F32 : !frac && !expo ? LIT_INT : LIT_F64;
    return literal_value(ps, s, q, *kind == LIT_F32, v);
}

/* ---- did you mean ------------------------------------------------------------- */

/* Edit distance of two short strings (capped at 9). */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > MAX_IDENT || lb > MAX_IDENT) return 9;
    int row[MAX_IDENT + 1];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] < 9 ? row[lb] : 9;
}

/* custom1/custom2: rows that only a registered op's nodes use. */
static bool placeholder(ot_op op) { return op < OT_OP_COUNT && (ot_op_flags(op) & OT_FLAG_CUSTOM); }

/* The op name closest to name (within 2 edits), or NULL. */
static const char *closest_op(const char *name)
{
    const char *best = NULL;
    int bd = 3;
    for (int op = 0; op < OT_OP_COUNT; op++) {
        if (placeholder((ot_op)op)) continue;
        int d = distance(name, ot_op_name((ot_op)op));
        if (d < bd) {
            bd = d;
            best = ot_op_name((ot_op)op);
        }
    }
    for (int op = OT_OP_REGISTERED; ot_op_name((ot_op)op); op++) {
        int d = distance(name, ot_op_name((ot_op)op));
        if (d < bd) {
            bd = d;
            best = ot_op_name((ot_op)op);
        }
    }
    return best;
}

static const char *closest_name(const parser *ps, const char *name)
{
    const char *best = NULL;
    int bd = 3;
    for (int i = 0; i < ps->n; i++) {
        int d = distance(name, ps->names[i]);
        if (d < bd) {
            bd = d;
            best = ps->names[i];
        }
    }
    return best;
}

/* ---- attributes --------------------------------------------------------------- */

/* The names of the attributes op takes, in positional order after its
 * operands, comma-separated into buf (its column of the op table). */
static const char *attr_members(ot_op op, char buf[MAX_MEMBERS])
{
    const ot_custom *u = ot__custom_of_op(op);   /* a registered op: its row's */
    const ot_opinfo *o = ot__op(u ? u->row : op);
    buf[0] = '\0';
    for (const unsigned char *a = o ? o->attrs : (const unsigned char *)""; *a; a++)
        if (ot__attrs[*a].type != OT__AT_INDEX) {
            if (buf[0]) strcat(buf, ",");
            strcat(buf, ot__attrs[*a].name);
        }
    return buf;
}

/* The index of member m in the comma-separated list, or -1. */
static int member_index(const char *list, const char *m)
{
    size_t n = strlen(m);
    for (int i = 0; *list; i++) {
        const char *end = strchr(list, ',');
        size_t len = end ? (size_t)(end - list) : strlen(list);
        if (len == n && strncmp(list, m, n) == 0) return i;
        if (!end) break;
        list = end + 1;
    }
    return -1;
}

/* The i-th member of the list into buf. */
static void member_at(const char *list, int i, char *buf)
{
    for (; i > 0 && list; i--) {
        list = strchr(list, ',');
        if (list) list++;
    }
    size_t len = list ? strcspn(list, ",") : 0;
    memcpy(buf, list ? list : "", len);
    buf[len] = '\0';
}

static bool dtype_named(const char *s, ot_dtype *dt)
{
    static const struct { const char *name; ot_dtype dt; } known[] = {
        {"f32", OT_F32}, {"float32", OT_F32}, {"f64", OT_F64}, {"float64", OT_F64},
        {"i32", OT_I32}, {"int32", OT_I32}, {"f16", OT_F16}, {"float16", OT_F16},
        {"bf16", OT_BF16}, {"bfloat16", OT_BF16},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(s, known[i].name) == 0) {
            *dt = known[i].dt;
            return true;
        }
    return false;
}

/* A signed number literal (an attribute's value): 1, 0 or -1 as number(). */
static int signed_number(parser *ps, double *v)
{
    bool neg = accept(ps, "-");
    int kind, got = number(ps, v, &kind);
    if (got > 0 && neg) *v = -*v;
    return got;
}

static bool integral(double v, double lo, double hi) { return v == floor(v) && v >= lo && v <= hi; }

/* "(a, b, ...)" of integers into out (at most OT_MAX_DIMS); *n gets the
 * count. */
static bool int_tuple(parser *ps, int64_t *out, int *n)
{
    *n = 0;
    if (!accept(ps, "(")) return false;
    if (accept(ps, ")")) return true;
    do {
        double v;
        if (accept(ps, ")")) return true;   /* (2,) */
        if (*n >= OT_MAX_DIMS || signed_number(ps, &v) <= 0 || !integral(v, -1e15, 1e15))
            return false;
        out[(*n)++] = (int64_t)v;
    } while (accept(ps, ","));
    return accept(ps, ")");
}

/* A tuple attribute (perm, shape) into a. */
static ot_node *attr_tuple(parser *ps, const ot__attr *at, ot_args *a, const char *at_text)
{
    int64_t t[OT_MAX_DIMS];
    int n;
    if (!int_tuple(ps, t, &n))
        return fail(ps, at_text, "%s must be a tuple of at most %d integers", at->name, OT_MAX_DIMS);
    if (at->type == OT__AT_WIN3) {   /* the builder checks count and values */
        if (n > 3) return fail(ps, at_text, "%s has at most 3 entries", at->name);
        for (int i = 0; i < n; i++) ((int32_t *)((char *)a + at->off))[i] = (int32_t)t[i];
    } else if (at->type == OT__AT_PERM) {
        for (int i = 0; i < n; i++) a->perm[i] = (int)t[i];
        a->spec_ = ".perm = given";
        ps->perm_n = n;   /* build checks it against the operand's dims */
    } else {
        a->shape.ndim = n;
        for (int i = 0; i < n; i++) a->shape.dims[i] = t[i];
    }
    return (ot_node *)a;
}

/* Whether the next token is an integer literal: digits, maybe after a
 * minus, and no fraction, exponent or f32 mark. */
static bool plain_integer(parser *ps)
{
    skip_space(ps);
    const char *q = ps->p + (*ps->p == '-');
    if (!isdigit((unsigned char)*q)) return false;
    while (isdigit((unsigned char)*q)) q++;
    return *q != '.' && *q != 'e' && *q != 'E' && !ident_char(*q);
}

/* A 64-bit integer attribute (a seed, ...) of type t into p, read exactly:
 * through a double, a seed above 2^53 came back as another seed (ot_pp's
 * text of rand(seed=2^53 + 1) parsed as seed 2^53) and 2^64 - 1, which
 * ot_pp writes, was refused. */
static bool attr_int64(parser *ps, const ot__attr *t, char *p, const char *m, const char *at)
{
    bool neg = *ps->p == '-';
    char *end;
    errno = 0;
    unsigned long long u = strtoull(ps->p + neg, &end, 10);
    bool ok = errno != ERANGE && (t->type == OT__AT_U64 ? !neg || u == 0
                                  : u <= (neg ? (1ULL << 63) : (1ULL << 63) - 1));
    if (!ok) return fail(ps, at, "%s must be an integer in range", m), false;
    ps->p = end;
    if (t->type == OT__AT_U64) *(uint64_t *)p = (uint64_t)u;
    else *(int64_t *)p = neg ? (int64_t)(0 - (uint64_t)u) : (int64_t)u;   /* two's complement */
    return true;
}

/* The value of attribute m (ops.h's attribute table) into the ot_args
 * member the builder takes it from; at points at it. */
static ot_node *attr_value(parser *ps, const char *m, ot_args *a, const char *at)
{
    const ot__attr *t = &ot__attrs[ot__attr_lookup(m)];
    char *p = (char *)a + t->off, name[MAX_IDENT];
    double v;
    if (t->type == OT__AT_DTYPE || t->type == OT__AT_NODE_DTYPE) {
        if (ident(ps, name) && dtype_named(name, (ot_dtype *)p)) return (ot_node *)a;
        return fail(ps, at, "dtype must be f32, f64, i32, f16 or bf16");
    }
    if (t->type == OT__AT_PERM || t->type == OT__AT_NODE_SHAPE || t->type == OT__AT_WIN3)
        return attr_tuple(ps, t, a, at);
    if (t->type == OT__AT_FLAG && ident(ps, name)) {
        if (strcmp(name, "True") && strcmp(name, "true") && strcmp(name, "False") &&
            strcmp(name, "false"))
            return fail(ps, at, "%s must be 0, 1, True or False", m);
        *(bool *)p = name[0] == 'T' || name[0] == 't';
        return (ot_node *)a;
    }
    if ((t->type == OT__AT_U64 || t->type == OT__AT_I64) && plain_integer(ps))
        return attr_int64(ps, t, p, m, at) ? (ot_node *)a : NULL;
    if (signed_number(ps, &v) <= 0) return fail(ps, at, "%s must be a number", m);
    if (t->type == OT__AT_DOUBLE) {
        *(double *)p = v;
        return (ot_node *)a;
    }
    bool u64 = t->type == OT__AT_U64;
    if (!integral(v, u64 ? 0 : INT_MIN, u64 ? 0x1p63 : INT_MAX))
        return fail(ps, at, "%s must be an integer in range", m);
    switch (t->type) {
    case OT__AT_INT: *(int *)p = (int)v; break;
    case OT__AT_FLAG: *(bool *)p = v != 0; break;
    case OT__AT_I64: *(int64_t *)p = (int64_t)v; break;
    case OT__AT_U64: *(uint64_t *)p = (uint64_t)v; break;
    default:
        return fail(ps, at, "%s is not written as name=value (a slice's start is its index)", m);
    }
    return (ot_node *)a;
}

/* One bound of a range item, or OT_NONE when omitted. */
static bool index_bound(parser *ps, int64_t *v)
{
    double d;
    skip_space(ps);
    *v = OT_NONE;
    if (*ps->p == ':' || *ps->p == ',' || *ps->p == ']') return true;
    if (signed_number(ps, &d) <= 0 || !integral(d, -1e15, 1e15)) return false;
    *v = (int64_t)d;
    return true;
}

/* NumPy's basic index, "[1:3, ::-1, 2, :]", after the "[": into idx (at
 * most OT_MAX_DIMS items); *n gets the count. */
static ot_node *index_list(parser *ps, ot_index *idx, int *n, const char *at)
{
    *n = 0;
    if (accept(ps, "]")) return (ot_node *)idx;   /* [] of a 0-d operand, as x[()] */
    do {
        int64_t a, b = OT_NONE, st = OT_NONE;
        if (*n >= OT_MAX_DIMS) return fail(ps, ps->p, "more than %d indices", OT_MAX_DIMS);
        if (!index_bound(ps, &a)) return fail(ps, ps->p, "an index is an integer or a range a:b:step");
        if (!accept(ps, ":")) {
            if (a == OT_NONE) return fail(ps, ps->p, "empty index");
            idx[(*n)++] = OT_IDX(a);
            continue;
        }
        if (!index_bound(ps, &b)) return fail(ps, ps->p, "a range's stop is an integer");
        if (accept(ps, ":") && !index_bound(ps, &st))
            return fail(ps, ps->p, "a range's step is an integer");
        if (st == 0) return fail(ps, ps->p, "a range's step is not 0");
        idx[(*n)++] = a == OT_NONE && b == OT_NONE && st == OT_NONE
                          ? OT_ALL
                          : (ot_index){OT_INDEX_RANGE, a, b, st == OT_NONE ? 1 : st};
    } while (accept(ps, ","));
    if (!accept(ps, "]")) return fail(ps, ps->p, "expected ']' to close the index started at col %d",
                                      col(ps, at));
    return (ot_node *)idx;
}

/* x[...]: a slice node of any expression, after the "[". */
static ot_node *sliced(parser *ps, ot_node *x, const char *at)
{
    ot_index idx[OT_MAX_DIMS];
    int n;
    if (!x || !index_list(ps, idx, &n, at)) return NULL;
    ot_node *r = ot_slice_node_n(x, n, idx, NULL, 0);
    return r ? r : fail_build(ps, at);
}

/* ot_pp's "(slice x [2, 0:3, ::-1])": the slice node itself, its args
 * read from the index as ot_pp writes it (an integer drops its dim; a::s
 * with s < 0 runs to the start), not a NumPy index, which the builder may
 * move below elementwise ops. */
static ot_node *pp_slice(parser *ps, ot_node *x, const char *at)
{
    ot_index idx[OT_MAX_DIMS];
    int n;
    if (!x || !index_list(ps, idx, &n, at)) return NULL;
    if (n != x->shape.ndim) return fail(ps, at, "slice: %d indices for %d dims", n, x->shape.ndim);
    ot_args a = {.axis = OT_AXIS_ALL};
    a.shape.ndim = n;
    for (int d = 0; d < n; d++) {
        const ot_index *i = &idx[d];
        int64_t step = i->kind == OT_INDEX_ONE ? 0 : i->step, count = 0;
        if (i->kind == OT_INDEX_ALL) count = x->shape.dims[d];
        else if (i->kind == OT_INDEX_RANGE && i->stop == OT_NONE && step < 0)
            count = i->start / -step + 1;
        else if (i->kind == OT_INDEX_RANGE && i->start != OT_NONE && i->stop != OT_NONE)
            count = (i->stop - i->start) / step;
        else if (i->kind == OT_INDEX_RANGE)
            return fail(ps, at, "slice: index %d is not in ot_pp's form", d);
        if (step < INT_MIN || step > INT_MAX) return fail(ps, at, "slice: step out of range");
        a.start[d] = i->kind == OT_INDEX_ALL ? 0 : i->start;
        a.perm[d] = (int)step;
        a.shape.dims[d] = count;
    }
    ot_node *r = ot_build_at(OT_OP_SLICE, x, NULL, &a, NULL, 0);
    return r ? r : fail_build(ps, at);
}

/* ---- expressions -------------------------------------------------------------- */

static ot_node *expr(parser *ps);

static ot_node *build(parser *ps, ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                      const char *at)
{
    int perm_n = ps->perm_n;
    ps->perm_n = -1;   /* this call's, if any: an operand's call was built before */
    if (!a || (ot_op_arity(op) == 2 && !b)) return NULL;   /* already failed */
    if (perm_n >= 0 && perm_n != a->shape.ndim)   /* C's perm cannot say its length */
        return fail(ps, at, "%s: perm has %d entr%s; its operand has %d dims", ot_op_name(op),
                    perm_n, perm_n == 1 ? "y" : "ies", a->shape.ndim);
    ot_node *r = ot_build_at(op, a, b, args, NULL, 0);
    return r ? r : fail_build(ps, at);
}

/* One attribute of a call: name=value, or the next positional one. */
static ot_node *call_attr(parser *ps, ot_op op, int *positional, ot_args *a, unsigned *given)
{
    char buf[MAX_MEMBERS], name[MAX_IDENT];
    const char *members = attr_members(op, buf), *at;
    skip_space(ps);
    at = ps->p;
    const char *save = ps->p;
    if (ident(ps, name) && accept(ps, "=")) {
        int i = member_index(members, name);
        if (i < 0)
            return fail(ps, at, "%s takes no argument '%s'%s%s", ot_op_name(op), name,
                        *members ? "; it takes " : "", members);
        if (*given & (1u << i)) return fail(ps, at, "%s given twice", name);
        *given |= 1u << i;
        return attr_value(ps, name, a, at);
    }
    ps->p = save;
    member_at(members, *positional, name);
    if (!name[0])
        return fail(ps, at, "%s takes %d operand%s%s%s", ot_op_name(op), ot_op_arity(op),
                    ot_op_arity(op) == 1 ? "" : "s", *members ? " and then " : "", members);
    if (*given & (1u << *positional)) return fail(ps, at, "%s given twice", name);
    *given |= 1u << (*positional)++;
    return attr_value(ps, name, a, at);
}

/* The node of a call with k operands parsed. */
static ot_node *finish_call(parser *ps, ot_op op, ot_node *const operand[2], int k,
                            const ot_args *a, const char *at)
{
    int arity = ot_op_arity(op);
    if (k < arity)
        return fail(ps, at, "%s takes %d operand%s, not %d", ot_op_name(op), arity,
                    arity == 1 ? "" : "s", k);
    if (arity == 0) {
        ot_node *r = ot_build_at(op, NULL, NULL, a, NULL, 0);
        return r ? r : fail_build(ps, at);
    }
    return build(ps, op, operand[0], operand[1], a, at);
}

/* name(operands..., attributes...) after the name and "(": the op's
 * operands first, then its attributes, positional or by keyword. */
static ot_node *call(parser *ps, const char *fname, const char *at)
{
    ot_op op = ot_op_lookup(fname);
    if (op == OT_OP_NONE || placeholder(op)) {
        const char *near = closest_op(fname);
        return near ? fail(ps, at, "unknown function '%s'; did you mean '%s'?", fname, near)
                    : fail(ps, at, "unknown function '%s'", fname);
    }
    int arity = ot_op_arity(op), k = 0, positional = 0;
    ot_node *operand[2] = {NULL, NULL};
    ot_args a = {.axis = OT_AXIS_ALL};
    unsigned given = 0;
    bool closed = accept(ps, ")");
    while (!closed) {
        if (k < arity) {
            if (!(operand[k] = expr(ps))) return NULL;
            k++;
        } else if (!call_attr(ps, op, &positional, &a, &given)) {
            return NULL;
        }
        closed = accept(ps, ")");
        if (!closed && !accept(ps, ",")) return fail(ps, ps->p, "expected ',' or ')' in %s(...)", fname);
    }
    return finish_call(ps, op, operand, k, &a, at);
}

static ot_node *unary(parser *ps);

/* A literal's constant: an integer that fits is i32, an f-marked one f32,
 * anything else f64 (all weak). */
static ot_node *literal(double v, int kind)
{
    if (kind == LIT_INT && v >= INT32_MIN && v <= INT32_MAX) return ot_consti((int)v);
    return kind == LIT_F32 ? ot_constf((float)v) : ot_const(v);
}

/* ot_pp's prefix form, "(exp x)", "(minimum a b)", "(sum x axis=1
 * keepdims)": after "(", an op's name, then a space and something that is
 * not a binary operator (a minus written on a number is an operand). */
static bool prefix_next(parser *ps, ot_op *op)
{
    const char *save = ps->p;
    char name[MAX_IDENT];
    bool yes = false;
    if (ident(ps, name) && (*ps->p == ' ' || *ps->p == '\t')) {
        *op = ot_op_lookup(name);
        skip_space(ps);
        char c = *ps->p;
        yes = *op != OT_OP_NONE && !placeholder(*op) && !strchr(")+*/<>=!,", c) &&
              (c != '-' || (ps->p[1] != ' ' && ps->p[1] != '\t'));
    }
    ps->p = save;
    return yes;
}

/* The prefix form's operands and attributes (name=value, or keepdims
 * alone) up to ")", after "(" and the name. ot_pp writes every attribute
 * a node holds, so any of ot_args's members is taken here. */
static ot_node *prefix(parser *ps, ot_op op, const char *at)
{
    char name[MAX_IDENT], buf[MAX_MEMBERS];
    ident(ps, name);
    int arity = ot_op_arity(op), k = 0;
    ot_node *operand[2] = {NULL, NULL};
    ot_args a = {.axis = OT_AXIS_ALL};
    const char *members = attr_members(op, buf);
    while (!accept(ps, ")")) {
        skip_space(ps);
        const char *here = ps->p;
        if (ident(ps, name)) {
            int i = member_index(OT__ARGS_MEMBERS, name);
            if (i < 0 && ot__attr_lookup(name) != OT__ATTR_NONE) i = 0;   /* args.win's */
            bool takes = member_index(members, name) >= 0;
            if (i >= 0 && accept(ps, "=")) {
                /* one the op does not take, its builder would drop:
                 * (avg_pool x ksize=(3,) dilation=(2,)) pooled undilated */
                if (!takes && ot__attr_lookup(name) != OT__ATTR_NONE)
                    return fail(ps, here, "%s takes no argument '%s'%s%s", ot_op_name(op), name,
                                *members ? "; it takes " : "", members);
                if (!attr_value(ps, name, &a, here)) return NULL;
                continue;
            }
            const ot__attr *t = &ot__attrs[ot__attr_lookup(name)];
            if (i >= 0 && takes && t->type == OT__AT_FLAG) {   /* written bare: set */
                *(bool *)((char *)&a + t->off) = true;
                continue;
            }
            ps->p = here;
        }
        if (op == OT_OP_SLICE && k == 1 && accept(ps, "[")) {
            ot_node *r = pp_slice(ps, operand[0], here);
            return r && !accept(ps, ")") ? fail(ps, ps->p, "slice: expected ')'") : r;
        }
        if (k >= arity || !*ps->p)
            return fail(ps, here, "%s: expected ')'", ot_op_name(op));
        if (!(operand[k++] = unary(ps))) return NULL;
    }
    return finish_call(ps, op, operand, k, &a, at);
}

/* %k, a node ot_pp wrote once on a line "%k = ..." before. */
static ot_node *def_ref(parser *ps, const char *at)
{
    char *end;
    long k = strtol(ps->p + 1, &end, 10);
    if (end == ps->p + 1 || k < 1 || k > ps->ndef) return fail(ps, at, "no %%%ld defined", k);
    ps->p = end;
    return ps->defs[k - 1];
}

static ot_node *primary(parser *ps);

/* After an operand's name, ot_pp's note of its axis names, "x(N,C,H,W)":
 * skipped when it is exactly the operand's. True when there was one. */
static bool axes_label(parser *ps, const ot_node *n)
{
    const char *axes = ot_node_axes(n);
    size_t len = axes ? strlen(axes) : 0;
    if (!axes || ps->p[0] != '(' || strncmp(ps->p + 1, axes, len) != 0 || ps->p[len + 1] != ')')
        return false;
    ps->p += len + 2;
    return true;
}

/* ot_pp's label of a named node, "h1:(x + y)" or "lr:0.5", after the
 * name: it names what this parse built, never an operand handed in. */
static ot_node *labelled(parser *ps, const char *name, const char *at)
{
    ps->p++;
    if (++ps->depth > MAX_DEPTH) return fail(ps, at, "nested deeper than %d", MAX_DEPTH);
    ot_node *n = primary(ps);
    ps->depth--;
    for (int i = 0; n && i < ps->n; i++)
        if (n == ps->nodes[i]) return fail(ps, at, "a label names a node built here, not '%s'", ps->names[i]);
    for (int i = 0; n && i < ps->ndef; i++)
        if (n == ps->defs[i]) return fail(ps, at, "a label names a node built here, not %%%d", i + 1);
    if (n && (ot_node_set_name)(n, name)) return fail_build(ps, at);
    return n;
}

/* ot_pp's quoted label, 'dense/fc 1':(x + y), of a name that is no
 * identifier: a str literal (\\ \' and \xNN escapes, as ot_pp writes it)
 * right before the ':'. */
static ot_node *quoted_label(parser *ps, const char *at)
{
    char name[MAX_IDENT];
    size_t n = 0;
    const char *p = ps->p + 1;
    for (; *p && *p != '\''; p++) {
        char c = *p;
        if (c == '\\' && (p[1] == '\\' || p[1] == '\'')) c = *++p;
        else if (c == '\\' && p[1] == 'x' && isxdigit((unsigned char)p[2]) &&
                 isxdigit((unsigned char)p[3])) {
            char hex[3] = {p[2], p[3], '\0'};
            c = (char)strtol(hex, NULL, 16);
            p += 3;
        }
        if (n >= MAX_IDENT - 1)
            return fail(ps, at, "a quoted label is longer than OT_NAME_MAX (%d)", OT_NAME_MAX);
        name[n++] = c;
    }
    if (*p != '\'' || p[1] != ':') return fail(ps, at, "a quoted name is a label: 'name':(...)");
    name[n] = '\0';
    ps->p = p + 1;   /* at the ':', which labelled() steps over */
    return labelled(ps, name, at);
}

/* A number, a name, a call or a parenthesised expression. */
static ot_node *primary(parser *ps)
{
    skip_space(ps);
    const char *at = ps->p;
    if (*ps->p == '\'') return quoted_label(ps, at);
    double v;
    int kind, got = number(ps, &v, &kind);
    if (got) return got > 0 ? literal(v, kind) : NULL;
    ot_node *view = view_operand(ps);
    if (view) {
        axes_label(ps, view);
        return view;
    }
    char name[MAX_IDENT];
    if (ident(ps, name)) {
        if (*ps->p == ':') return labelled(ps, name, at);
        for (int i = 0; i < ps->n; i++)
            if (strcmp(ps->names[i], name) == 0 && axes_label(ps, ps->nodes[i])) return ps->nodes[i];
        if (*ps->p == '(') {   /* a call: no space before "(", which ot_pp's "(f x (y))" needs */
            ps->p++;
            return call(ps, name, at);
        }
        for (int i = 0; i < ps->n; i++)
            if (strcmp(ps->names[i], name) == 0) return ps->nodes[i];
        ot_op op = ot_op_lookup(name);
        if (op != OT_OP_NONE && !placeholder(op))
            return fail(ps, at, "'%s' is a function: write %s(...)", name, name);
        const char *near = closest_name(ps, name);
        return near ? fail(ps, at, "unknown name '%s'; did you mean '%s'?", name, near)
                    : fail(ps, at, "unknown name '%s'", name);
    }
    if (*ps->p == '%') return def_ref(ps, at);
    if (accept(ps, "(")) {
        ot_op op;
        if (prefix_next(ps, &op)) return prefix(ps, op, at);   /* its operands count depth */
        ot_node *e = expr(ps);
        if (e && !accept(ps, ")")) return fail(ps, ps->p, "expected ')'");
        return e;
    }
    if (!*ps->p) return fail(ps, at, "unexpected end of expression");
    return fail(ps, at, "unexpected '%c'", isprint((unsigned char)*at) ? *at : '?');
}

/* primary ** unary, right-associative and tighter than a unary minus on
 * its left (Python: -x**2 is -(x**2)). */
static ot_node *power(parser *ps)
{
    ot_node *x = primary(ps);
    while (x && *ps->p == '[') {   /* x[1:3, ::-1], no space before "[" (ot_pp's form has one) */
        const char *open = ps->p++;
        x = sliced(ps, x, open);
    }
    skip_space(ps);
    const char *at = ps->p;
    if (!x || !accept(ps, "**")) return x;
    return build(ps, OT_OP_POW, x, unary(ps), NULL, at);
}

/* A minus directly on a number literal is part of the constant (so -2
 * reads back as ot_pp prints a constant -2); elsewhere it is neg. */
static ot_node *signed_power(parser *ps)
{
    const char *at = ps->p;
    if (accept(ps, "+")) return unary(ps);
    if (!accept(ps, "-")) return power(ps);
    const char *save = ps->p;
    double v;
    int kind, got = number(ps, &v, &kind);
    if (got < 0) return NULL;
    if (got && !accept(ps, "**")) return literal(-v, kind);
    ps->p = save;
    return build(ps, OT_OP_NEG, unary(ps), NULL, NULL, at);
}

/* An operand: one level deeper, whatever it turns out to be (a sign, the
 * right side of **, a parenthesis, a call's operand or ot_pp's prefix
 * form all come back here). */
static ot_node *unary(parser *ps)
{
    skip_space(ps);
    if (++ps->depth > MAX_DEPTH) return fail(ps, ps->p, "nested deeper than %d", MAX_DEPTH);
    ot_node *r = signed_power(ps);
    ps->depth--;
    return r;
}

typedef struct binop {
    const char *tok;
    ot_op op;
} binop;

/* A left-associative level: next (tok next)*, the tokens tried in order
 * (longer before their prefixes). */
static ot_node *level(parser *ps, ot_node *(*next)(parser *), const binop *ops, int nops)
{
    ot_node *x = next(ps);
    while (x) {
        skip_space(ps);
        const char *at = ps->p;
        int i = 0;
        while (i < nops && !accept(ps, ops[i].tok)) i++;
        if (i == nops) break;
        x = build(ps, ops[i].op, x, next(ps), NULL, at);
    }
    return x;
}

static ot_node *term(parser *ps)
{
    static const binop ops[] = {{"*", OT_OP_MUL}, {"/", OT_OP_DIV}};
    return level(ps, unary, ops, 2);
}

static ot_node *additive(parser *ps)
{
    static const binop ops[] = {{"+", OT_OP_ADD}, {"-", OT_OP_SUB}};
    return level(ps, term, ops, 2);
}

static ot_node *expr(parser *ps)
{
    static const binop ops[] = {{"<=", OT_OP_LE}, {">=", OT_OP_GE}, {"==", OT_OP_EQ},
                                {"!=", OT_OP_NE}, {"<", OT_OP_LT},  {">", OT_OP_GT}};
    return level(ps, additive, ops, 6);
}

/* ot_pp's lines "%k = expr" (k = 1, 2, ... in order) before the
 * expression that uses them; false on an error. */
static bool definitions(parser *ps)
{
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        char *end;
        if (*at != '%') return true;
        long k = strtol(at + 1, &end, 10);
        ps->p = end;
        if (end == at + 1 || !accept(ps, "=")) {
            ps->p = at;
            return true;   /* a use, read by primary */
        }
        if (k != ps->ndef + 1) return fail(ps, at, "expected %%%d here", ps->ndef + 1) != NULL;
        ot_node **defs = ot__realloc(ps->defs, (size_t)(k) * sizeof *defs);
        if (!defs) return ot__err_set(OT_ENOMEM, NULL, 0, "parse", "out of memory") == 0;
        ps->defs = defs;
        if (!(defs[ps->ndef] = expr(ps))) return false;
        ps->ndef++;
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

bool ot__parse_spells_name(const char *s)
{
    size_t len = strlen(s);
    return len && ident_len(s) == len && strcmp(s, "inf") && strcmp(s, "nan") &&
           strcmp(s, "inff") && strcmp(s, "nanf");
}

/* The operands' names: identifiers the expression can spell (not inf or
 * nan, with or without the f32 mark f, which read as numbers), or views'
 * names (view_spelling), at most OT_NAME_MAX bytes, each once (a repeated
 * one silently lost to the first). 0, or OT_EINVAL (OT_ENOMEM). */
static int check_names(int n, const char *const names[])
{
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        size_t len = strlen(s);
        bool ok = len <= OT_NAME_MAX && (view_spelling(s) || ot__parse_spells_name(s));
        if (!ok)
            return ot__err_set(OT_EINVAL, NULL, 0, "parse", "names[%d] \"%.64s%s\" is not a name an "
                               "expression can spell (an identifier of at most %d bytes, not inf "
                               "or nan, or a view's name such as x[1:3] or m.T)", i, s,
                               len > 64 ? "..." : "", OT_NAME_MAX);
    }
    const char *const **sorted = n > 1 ? ot__malloc(sizeof *sorted * (size_t)n) : NULL;
    if (n > 1 && !sorted) return ot__err_set(OT_ENOMEM, NULL, 0, "parse", "out of memory");
    for (int i = 0; i < n && sorted; i++) sorted[i] = &names[i];
    if (sorted) qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    int rc = 0;
    for (int i = 1; sorted && i < n && !rc; i++)
        if (!strcmp(*sorted[i], *sorted[i - 1]))
            rc = ot__err_set(OT_EINVAL, NULL, 0, "parse", "names[%d] and names[%d] are both \"%s\"",
                             (int)(sorted[i - 1] - names), (int)(sorted[i] - names), *sorted[i]);
    free(sorted);
    return rc;
}

ot_node *(ot_parse)(const char *src, int n, const char *const names[], ot_node *const nodes[])
{
    if (!src) return (ot__err_set(OT_ENULL, NULL, 0, "parse", "expression is NULL"), NULL);
    if (n < 0 || (n > 0 && (!names || !nodes))) {
        ot__err_set(n < 0 ? OT_EINVAL : OT_ENULL, NULL, 0, "parse",
                    n < 0 ? "negative count %d" : "names or nodes is NULL with count %d", n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!names[i] || !nodes[i]) {
            ot__err_set(OT_ENULL, NULL, 0, "parse", "%s[%d] is NULL", names[i] ? "nodes" : "names", i);
            return NULL;
        }
    ot_clear_error();
    if (check_names(n, names)) return NULL;
    parser ps = {.src = src, .p = src, .n = n, .names = names, .nodes = nodes, .perm_n = -1};
    ot_node *r = definitions(&ps) ? expr(&ps) : NULL;
    if (ps.failed) r = NULL;
    skip_space(&ps);
    if (r && *ps.p) r = fail(&ps, ps.p, "unexpected '%c' after the expression",
                             isprint((unsigned char)*ps.p) ? *ps.p : '?');
    free(ps.defs);
    return r;
}
