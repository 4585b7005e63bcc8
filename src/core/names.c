/*
 * names.c - names and metadata on nodes (ot_node_set_name, ot_node_set_meta,
 * ot_named), the names views take from their base ("x[:, 1]", "x.T",
 * "x.reshape(4,16)"), and the quoted name messages use for an operand.
 *
 * A node's annotations live out of line, in one struct allocated when the
 * first is set (ot_node.annot), so a node without any costs one NULL
 * pointer and nothing on the paths that build, plan and run trees. They
 * are not part of a node's value: ot__node_ident (walk.h), and so the plan
 * key, CSE, the stack and the root memo, never read them, and a tree named
 * differently shares its plan. A leaf's name is its tensor's (t->name), so
 * ot_tensor_set_name and ot_node_set_name are one thing there; a leaf's
 * metadata is on its node like any other's.
 */
#include "internal.h"

typedef struct meta_entry {
    char *key, *value;
} meta_entry;

struct ot__annot {
    char *name;            /* an op or constant's; a leaf's is t->name */
    meta_entry *meta;      /* in the order keys were first set */
    int n, cap;
};

static char *dup_str(const char *s)
{
    size_t len = strlen(s) + 1;
    char *c = ot__malloc(len);
    if (c) memcpy(c, s, len);
    return c;
}

void ot__annot_free(ot__annot *a)
{
    if (!a) return;
    for (int i = 0; i < a->n; i++) {
        free(a->meta[i].key);
        free(a->meta[i].value);
    }
    free(a->meta);
    free(a->name);
    free(a);
}

/* n's annotations, made empty when it has none; NULL when out of memory. */
static ot__annot *annot_get(ot_node *n)
{
    if (!n->annot) n->annot = ot__calloc(1, sizeof *n->annot);
    return n->annot;
}

/* Keeps "no annotations" as a NULL pointer, so such a node stays free. */
static void annot_trim(ot_node *n)
{
    ot__annot *a = n->annot;
    if (a && !a->name && a->n == 0) {
        ot__annot_free(a);
        n->annot = NULL;
    }
}

static int out_of_memory(const char *fn)
{
    return ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
}

/* ---- names --------------------------------------------------------------- */

/* Names n for the public function fn (node_set_name, or named: the
 * errors name the function called). */
static int set_node_name(const char *fn, ot_node *n, const char *name)
{
    if (ot__node_dead(n)) return ot__dead_err(fn, NULL, 0, "the node", n);
    ot_clear_error();
    if (name && !*name) name = NULL;
    int rc = ot__name_check(fn, name);
    if (rc) return rc;
    if (n->kind == OT_NODE_LEAF) return (ot_tensor_set_name)(ot__leaf_tensor(n), name);
    char *copy = NULL;
    if (name && !(copy = dup_str(name))) return out_of_memory(fn);
    if (!name && !n->annot) return 0;
    ot__annot *a = annot_get(n);
    if (!a) {
        free(copy);
        return out_of_memory(fn);
    }
    free(a->name);
    a->name = copy;
    annot_trim(n);
    return 0;
}

int (ot_node_set_name)(ot_node *n, const char *name)
{
    if (!n) return ot__err_null("node_set_name", "node");
    return set_node_name("node_set_name", n, name);
}

const char *ot_node_name(const ot_node *n)
{
    if (!n) return NULL;
    if (n->kind == OT_NODE_LEAF) return ot__leaf_tensor(n)->name;
    return n->annot ? n->annot->name : NULL;
}

ot_node *ot_named(ot_node *n, const char *name)
{
    if (!n) {
        ot__err_null("named", "node");
        return NULL;
    }
    return set_node_name("named", n, name) ? NULL : n;
}

/* ---- metadata ------------------------------------------------------------ */

/* A name or key of at most max bytes and no control character (which
 * would break the printers' lines), else OT_EINVAL for fn. */
static int text_check(const char *fn, const char *what, const char *text, size_t max,
                      const char *max_name)
{
    size_t len = strlen(text);
    if (len > max)
        return ot__err_set(OT_EINVAL, NULL, 0, fn, "%s of %zu bytes is longer than %s (%zu)",
                           what, len, max_name, max);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
            return ot__err_set(OT_EINVAL, NULL, 0, fn, "%s has a control character (byte 0x%02x at %zu)",
                               what, (unsigned char)text[i], i);
    return 0;
}

int ot__name_check(const char *fn, const char *name)
{
    return name ? text_check(fn, "name", name, OT_NAME_MAX, "OT_NAME_MAX") : 0;
}

static int key_check(const char *key)
{
    if (!key) return ot__err_set(OT_ENULL, NULL, 0, "node_set_meta", "key is NULL");
    if (!*key) return ot__err_set(OT_EINVAL, NULL, 0, "node_set_meta", "key is empty");
    return text_check("node_set_meta", "key", key, OT_META_KEY_MAX, "OT_META_KEY_MAX");
}

/* The entry of key, or -1. */
static int meta_find(const ot__annot *a, const char *key)
{
    for (int i = 0; a && i < a->n; i++)
        if (strcmp(a->meta[i].key, key) == 0) return i;
    return -1;
}

static void meta_remove(ot_node *n, int i)
{
    ot__annot *a = n->annot;
    free(a->meta[i].key);
    free(a->meta[i].value);
    memmove(a->meta + i, a->meta + i + 1, (size_t)(a->n - i - 1) * sizeof *a->meta);
    a->n--;
    annot_trim(n);
}

/* Appends key = value (both copies, taken over) to n's entries. */
static bool meta_append(ot_node *n, char *key, char *value)
{
    ot__annot *a = annot_get(n);
    if (!a) return false;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 4;
        meta_entry *m = ot__realloc(a->meta, (size_t)cap * sizeof *m);
        if (!m) return false;
        a->meta = m;
        a->cap = cap;
    }
    a->meta[a->n++] = (meta_entry){key, value};
    return true;
}

int ot_node_set_meta(ot_node *n, const char *key, const char *value)
{
    if (!n) return ot__err_null("node_set_meta", "node");
    if (ot__node_dead(n)) return ot__dead_err("node_set_meta", NULL, 0, "the node", n);
    ot_clear_error();
    int rc = key_check(key);
    if (rc) return rc;
    int i = meta_find(n->annot, key);
    if (!value) {
        if (i >= 0) meta_remove(n, i);
        return 0;
    }
    if (i < 0 && n->annot && n->annot->n >= OT_META_MAX)
        return ot__err_set(OT_EINVAL, NULL, 0, "node_set_meta",
                           "the node has %d metadata entries already, at most OT_META_MAX; "
                           "adding '%s' would exceed it", OT_META_MAX, key);
    char *v = dup_str(value), *k = i < 0 && v ? dup_str(key) : NULL;
    if (!v || (i < 0 && (!k || !meta_append(n, k, v)))) {
        free(v);
        free(k);
        annot_trim(n);
        return out_of_memory("node_set_meta");
    }
    if (i >= 0) {
        free(n->annot->meta[i].value);
        n->annot->meta[i].value = v;
    }
    return 0;
}

const char *ot_node_meta(const ot_node *n, const char *key)
{
    int i = n && key ? meta_find(n->annot, key) : -1;
    return i >= 0 ? n->annot->meta[i].value : NULL;
}

int ot_node_meta_count(const ot_node *n)
{
    return n && n->annot ? n->annot->n : 0;
}

int ot_node_meta_at(const ot_node *n, int i, const char **key, const char **value)
{
    if (!n) return ot__err_null("node_meta_at", "node");
    int count = ot_node_meta_count(n);
    if (i < 0 || i >= count)
        return ot__err_set(OT_EINVAL, NULL, 0, "node_meta_at",
                           "entry %d is out of range: the node has %d", i, count);
    ot_clear_error();
    ot__meta_entry(n, i, key, value);
    return 0;
}

void ot__meta_entry(const ot_node *n, int i, const char **key, const char **value)
{
    if (key) *key = n->annot->meta[i].key;
    if (value) *value = n->annot->meta[i].value;
}

int ot__annot_copy(ot_node *dst, const ot_node *src)
{
    const char *name = ot_node_name(src);
    if (name && src->kind != OT_NODE_LEAF && (ot_node_set_name)(dst, name)) return ot_errcode();
    for (int i = 0; i < ot_node_meta_count(src); i++) {
        const meta_entry *e = &src->annot->meta[i];
        if (ot_node_set_meta(dst, e->key, e->value)) return ot_errcode();
    }
    return 0;
}

int ot__annot_dup(ot_node *dst, const ot_node *src)
{
    const ot__annot *a = src->annot;
    if (!a || dst->annot) return 0;
    ot__annot *c = ot__calloc(1, sizeof *c);
    bool ok = c && (!a->name || (c->name = dup_str(a->name)));
    if (ok && a->n) {
        c->meta = ot__calloc((size_t)a->n, sizeof *c->meta);
        ok = c->meta != NULL;
        c->cap = ok ? a->n : 0;
        for (int i = 0; ok && i < a->n; i++, c->n++)   /* counts a half-made entry: freed */
            ok = (c->meta[i].key = dup_str(a->meta[i].key)) &&
                 (c->meta[i].value = dup_str(a->meta[i].value));
    }
    if (!ok) {
        ot__annot_free(c);
        return ot__err_set(OT_ENOMEM, NULL, 0, "const", "out of memory");
    }
    dst->annot = c;
    return 0;
}

/* ---- in messages --------------------------------------------------------- */

const char *ot__qname(const ot_node *n, char buf[OT__QNAME_LEN])
{
    const char *name = ot_node_name(n);
    if (!name) return "";
    int keep = OT__QNAME_LEN - 8;   /* room for " ''", "..." and the NUL */
    if ((int)strlen(name) <= keep) snprintf(buf, OT__QNAME_LEN, " '%s'", name);
    else snprintf(buf, OT__QNAME_LEN, " '%.*s...'", keep, name);
    return buf;
}

/* ---- names of views ------------------------------------------------------ */

/* What a view's name appends to its base's: an index of up to 8 dims of
 * three int64 bounds each fits. */
#define SUFFIX_LEN 640

/* v (a new view of the named base) named base's name followed by suffix.
 * Out of memory, v is freed and NULL returned with OT_ENOMEM for fn. */
static ot_tensor *view_named(ot_tensor *v, const ot_tensor *base, const char *suffix,
                             const char *fn)
{
    size_t lb = strlen(base->name), ls = strlen(suffix);
    if (lb + ls > OT_NAME_MAX) return v;   /* unnamed: a name stays within OT_NAME_MAX */
    char *name = ot__malloc(lb + ls + 1);
    if (!name) {
        ot_tensor_free(v);
        ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory naming the view");
        return NULL;
    }
    memcpy(name, base->name, lb);
    memcpy(name + lb, suffix, ls + 1);
    v->name = name;
    return v;
}

/* One bound of a range: nothing when omitted. */
static size_t put_bound(char *buf, size_t len, int64_t v)
{
    return v == OT_NONE ? 0 : (size_t)snprintf(buf, len, "%lld", (long long)v);
}

/* NumPy's text of the indices: "[2:5]", "[::-1]", "[:, 1]"; no index at all
 * is "[...]". */
static const char *slice_suffix(char buf[SUFFIX_LEN], int n, const ot_index *idx)
{
    size_t k = 0, len = SUFFIX_LEN - 2;   /* room for the ']' */
    buf[k++] = '[';
    if (n == 0) k += (size_t)snprintf(buf + k, len - k, "...");
    for (int i = 0; i < n && k < len; i++) {
        const ot_index *x = &idx[i];
        if (i) k += (size_t)snprintf(buf + k, len - k, ", ");
        if (x->kind == OT_INDEX_ONE) {
            k += (size_t)snprintf(buf + k, len - k, "%lld", (long long)x->start);
            continue;
        }
        bool range = x->kind == OT_INDEX_RANGE;
        if (range) k += put_bound(buf + k, len - k, x->start);
        k += (size_t)snprintf(buf + k, len - k, ":");
        if (range) k += put_bound(buf + k, len - k, x->stop);
        if (range && x->step != 1)
            k += (size_t)snprintf(buf + k, len - k, ":%lld", (long long)x->step);
    }
    snprintf(buf + (k < len ? k : len), 2, "]");
    return buf;
}

ot_tensor *ot__name_slice(ot_tensor *v, const ot_tensor *base, int n, const ot_index *idx)
{
    char buf[SUFFIX_LEN];
    return v && base->name ? view_named(v, base, slice_suffix(buf, n, idx), "slice") : v;
}

ot_tensor *ot__name_transpose(ot_tensor *v, const ot_tensor *base, const int *perm)
{
    if (!v || !base->name) return v;
    int nd = v->leaf.shape.ndim;
    bool reversed = true;
    int64_t p[OT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        p[i] = perm[i];
        reversed = reversed && perm[i] == nd - 1 - i;
    }
    char buf[SUFFIX_LEN], s[OT__SHAPE_STRLEN];
    ot_shape ps = ot_shape_make(nd, p);
    snprintf(buf, sizeof buf, ".transpose%s", ot__shape_str(&ps, s));
    return view_named(v, base, reversed ? ".T" : buf, "transpose");
}

ot_tensor *ot__name_shaped(ot_tensor *v, const ot_tensor *base, const char *method)
{
    if (!v || !base->name) return v;
    char buf[SUFFIX_LEN], s[OT__SHAPE_STRLEN];
    snprintf(buf, sizeof buf, ".%s%s", method, ot__shape_str(&v->leaf.shape, s));
    return view_named(v, base, buf, method);
}
