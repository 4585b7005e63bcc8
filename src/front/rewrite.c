/*
 * rewrite.c - rewrite rules: the registry of named rule sets
 * (ot_rule_set_register), the library's own set "fuse" (and
 * rules_conv_bn.c's "conv_bn", listed with it), the sets a
 * backend applies (ot_backend_opts.rewrite, OT_REWRITE; config.c reads the
 * variable) and the engine that matches rules over trees and builds the
 * rewritten trees before they are planned (ot__rewrite_then, ot_rewrite).
 *
 * The registry is global mutable state, kept small on purpose: append-only
 * under a mutex, an entry never changes or goes once in, so a backend keeps
 * pointers to its sets and reads them without a lock.
 *
 * The engine never changes a node: a rewritten tree is new nodes over the
 * old ones, in the caller's pool. It walks with walk.c's walker (a
 * composite is one node), so no tree is walked by recursion. A backend
 * without rule sets never gets here: backend.c tests one pointer.
 */
#include "front.h"

#include <ctype.h>
#include <pthread.h>

/* ---- the library's rule set "fuse" -------------------------------------- */

/* One value read twice: the same node, or leaves over the same view. */
static bool same_value(const ot_node *a, const ot_node *b)
{
    return a == b || (a->kind == OT_NODE_LEAF && b->kind == OT_NODE_LEAF &&
                      ot__same_view(ot__leaf_tensor(a), ot__leaf_tensor(b)));
}

static bool is_op(const ot_node *n, ot_op op)
{
    return n && n->kind == OT_NODE_OP && n->op == op && n->tag == OT_OP_NONE;
}

static bool is_one(const ot_node *n) { return n->kind == OT_NODE_CONST && n->value == 1.0; }

/* x when d is 1 + exp(-x) (either order of the sum), else NULL. */
static const ot_node *one_plus_exp_neg(const ot_node *d)
{
    if (!is_op(d, OT_OP_ADD)) return NULL;
    const ot_node *e = is_one(d->a) ? d->b : is_one(d->b) ? d->a : NULL;
    return e && is_op(e, OT_OP_EXP) && is_op(e->a, OT_OP_NEG) ? e->a->a : NULL;
}

/* silu, x * sig(x), in the form the kernels run best: one sig (inline in
 * generated code) and one product, x first. Spellings that fire: sig(x) * x
 * and x / (1 + exp(-x)); x * sig(x) itself is the form and does not. */
static bool silu_select(const ot_node *n, void *user)
{
    (void)user;
    if (is_op(n, OT_OP_MUL)) return is_op(n->a, OT_OP_SIG) && same_value(n->a->a, n->b);
    if (!is_op(n, OT_OP_DIV)) return false;
    const ot_node *x = one_plus_exp_neg(n->b);
    /* int32 x: -x wraps at INT32_MIN, which the tree as written keeps */
    return x && same_value(x, n->a) && x->dtype != OT_I32;
}

/* Each member takes the one operand of the pattern below it. */
static bool silu_input(const ot_node *n, const ot_node *in, void *user)
{
    (void)user;
    switch (n->op) {
    case OT_OP_MUL: return in == n->a;
    case OT_OP_DIV: return in == n->b;
    case OT_OP_ADD: return is_op(in, OT_OP_EXP);
    case OT_OP_EXP: return is_op(in, OT_OP_NEG);
    default: return false;
    }
}

static ot_node *silu_create(const ot_rewrite_match *m, void *user)
{
    (void)user;
    const ot_node *root = m->nodes[m->nnodes - 1];
    ot_node *x = ot_rewrite_input(m, root->op == OT_OP_MUL ? root->b : root->a);
    return ot_build_at(OT_OP_MUL, x, ot_build_at(OT_OP_SIG, x, NULL, NULL, root->file, root->line),
                       NULL, root->file, root->line);
}

/* log(softmax(x, axis)) -> logsoftmax(x, axis): (x - max) - log(sum(exp(x -
 * max))), finite where the softmax underflows to 0 and its log is -inf. */
static bool logsoftmax_select(const ot_node *n, void *user)
{
    (void)user;
    return is_op(n, OT_OP_LOG) && n->a->tag == OT_OP_SOFTMAX;
}

static bool logsoftmax_input(const ot_node *n, const ot_node *in, void *user)
{
    (void)user;
    return is_op(n, OT_OP_LOG) && in->tag == OT_OP_SOFTMAX;
}

static ot_node *logsoftmax_create(const ot_rewrite_match *m, void *user)
{
    (void)user;
    const ot_node *softmax = m->nodes[0], *root = m->nodes[1];
    ot_args a = {.axis = ot_node_args(softmax).axis};
    return ot_build_at(OT_OP_LOGSOFTMAX, ot_rewrite_input(m, ot_rewrite_operand(softmax, 0)),
                       NULL, &a, root->file, root->line);
}

/* sum(x * x, axis, keepdims) -> squared_l2(x, axis, keepdims): the same
 * arithmetic (sqr is x * x), tagged, so autodiff takes 2 x g at once. */
static bool squared_l2_select(const ot_node *n, void *user)
{
    (void)user;
    return is_op(n, OT_OP_SUM) && is_op(n->a, OT_OP_MUL) && same_value(n->a->a, n->a->b);
}

static bool squared_l2_input(const ot_node *n, const ot_node *in, void *user)
{
    (void)user;
    return is_op(n, OT_OP_SUM) && in == n->a;
}

static ot_node *squared_l2_create(const ot_rewrite_match *m, void *user)
{
    (void)user;
    const ot_node *mul = m->nodes[0], *root = m->nodes[1];
    ot_args a = {.axis = root->args.axis, .keepdims = root->args.keepdims};
    return ot_build_at(OT_OP_SQUARED_L2, ot_rewrite_input(m, mul->a), NULL, &a, root->file,
                       root->line);
}

static const ot_rewrite_rule fuse_rules[] = {
    {.name = "silu", .select = silu_select, .select_input = silu_input, .create = silu_create},
    {.name = "logsoftmax", .select = logsoftmax_select, .select_input = logsoftmax_input,
     .create = logsoftmax_create},
    {.name = "squared_l2", .select = squared_l2_select, .select_input = squared_l2_input,
     .create = squared_l2_create},
};
static const ot_rule_set fuse_set = {"fuse", 3, fuse_rules};

/* The library's sets, known by name before any registration. */
static const ot_rule_set *const builtin[] = {&fuse_set, &ot__conv_bn_set};
enum { NBUILTIN = sizeof builtin / sizeof builtin[0] };

/* ---- the registry --------------------------------------------------------- */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const ot_rule_set **registry;   /* the sets registered, after builtin's */
static int nregistry, registry_cap;

/* The set named by the len characters at name; the caller holds the lock. */
static const ot_rule_set *find_set(const char *name, size_t len)
{
    for (int i = -NBUILTIN; i < nregistry; i++) {
        const ot_rule_set *s = i < 0 ? builtin[i + NBUILTIN] : registry[i];
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0) return s;
    }
    return NULL;
}

/* The registered names, comma-separated, for messages. */
static void set_names(char *buf, size_t n)
{
    size_t used = 0;
    pthread_mutex_lock(&registry_lock);
    for (int i = -NBUILTIN; i < nregistry && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s", i == -NBUILTIN ? "" : ", ",
                         i < 0 ? builtin[i + NBUILTIN]->name : registry[i]->name);
        used += k > 0 ? (size_t)k : 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

static char *copy_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = ot__malloc(n);
    return c ? memcpy(c, s, n) : NULL;
}

static void free_set(ot_rule_set *s)
{
    if (!s) return;
    for (int i = 0; s->rules && i < s->nrules; i++) free((char *)s->rules[i].name);
    free((ot_rewrite_rule *)s->rules);
    free((char *)s->name);
    free(s);
}

/* The library's copy of set: its name, rules and rule names. */
static ot_rule_set *copy_set(const ot_rule_set *set)
{
    ot_rule_set *s = ot__calloc(1, sizeof *s);
    ot_rewrite_rule *r = s ? ot__calloc((size_t)set->nrules, sizeof *r) : NULL;
    if (!r) {
        free(s);
        return NULL;
    }
    s->rules = r;
    s->nrules = set->nrules;
    bool ok = (s->name = copy_str(set->name)) != NULL;
    for (int i = 0; i < set->nrules; i++) {
        r[i] = set->rules[i];
        ok = ok && (r[i].name = copy_str(set->rules[i].name)) != NULL;
        if (!ok) r[i].name = NULL;
    }
    if (!ok) free_set(s);
    return ok ? s : NULL;
}

static int check_set(const ot_rule_set *set, const char *fn)
{
    if (!set->name) return ot__err_set(OT_ENULL, NULL, 0, fn, "the set's name is NULL");
    const char *bad = !*set->name ? "is empty" : NULL;
    for (const char *c = set->name; *c && !bad; c++)
        if (*c == ',' || isspace((unsigned char)*c)) bad = "has a comma or a space";
    if (bad) return ot__err_set(OT_EINVAL, NULL, 0, fn, "rule set name \"%s\" %s", set->name, bad);
    if (set->nrules < 1)
        return ot__err_set(OT_EINVAL, NULL, 0, fn, "rule set \"%s\" has %d rules", set->name,
                           set->nrules);
    if (!set->rules)
        return ot__err_set(OT_ENULL, NULL, 0, fn, "rule set \"%s\": rules is NULL", set->name);
    for (int i = 0; i < set->nrules; i++) {
        const ot_rewrite_rule *r = &set->rules[i];
        const char *what = !r->name ? "name" : !r->select ? "select" : !r->create ? "create" : NULL;
        if (what)
            return ot__err_set(OT_ENULL, NULL, 0, fn, "rule set \"%s\": rule %d (%s) has no %s",
                               set->name, i, r->name ? r->name : "unnamed", what);
    }
    return 0;
}

int ot_rule_set_register(const ot_rule_set *set)
{
    const char *fn = "rule_set_register";
    if (!set) return ot__err_set(OT_ENULL, NULL, 0, fn, "rule set is NULL");
    ot_clear_error();
    int rc = check_set(set, fn);
    if (rc) return rc;
    ot_rule_set *copy = copy_set(set);
    if (!copy) return ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
    pthread_mutex_lock(&registry_lock);
    rc = find_set(set->name, strlen(set->name)) ? OT_EINVAL : 0;
    if (!rc && nregistry == registry_cap) {
        int cap = registry_cap ? 2 * registry_cap : 8;
        const ot_rule_set **r = ot__realloc(registry, (size_t)cap * sizeof *r);
        if (r) {
            registry = r;
            registry_cap = cap;
        } else {
            rc = OT_ENOMEM;
        }
    }
    if (!rc) registry[nregistry++] = copy;
    pthread_mutex_unlock(&registry_lock);
    if (!rc) return 0;
    free_set(copy);
    if (rc == OT_ENOMEM) return ot__err_set(rc, NULL, 0, fn, "out of memory");
    return ot__err_set(rc, NULL, 0, fn,
                       "a rule set named \"%s\" is registered already (registrations are "
                       "permanent)", set->name);
}

/* ---- the sets in force ---------------------------------------------------- */

struct ot__rewrite {
    char *list;                  /* the names as given, the library's copy */
    int n;
    const ot_rule_set *sets[];
};

void ot__rewrite_free(struct ot__rewrite *rw)
{
    if (!rw) return;
    free(rw->list);
    free(rw);
}

const char *ot__rewrite_list(const struct ot__rewrite *rw) { return rw ? rw->list : NULL; }

/* Looks up each name of the list into rw->sets. */
static int resolve(struct ot__rewrite *rw, const char *var, const char *fn)
{
    for (const char *p = rw->list;; p++) {
        p += strspn(p, " \t");   /* "fuse, conv_bn": spaces around names, as axis lists */
        size_t len = strcspn(p, ","), name = len;
        while (name && (p[name - 1] == ' ' || p[name - 1] == '\t')) name--;
        pthread_mutex_lock(&registry_lock);
        const ot_rule_set *s = find_set(p, name);
        pthread_mutex_unlock(&registry_lock);
        if (!s) {
            char known[256];
            set_names(known, sizeof known);
            return ot__err_set(OT_EINVAL, NULL, 0, fn,
                               "%s=%s: no rule set named \"%.*s\" (registered: %s)", var,
                               rw->list, (int)name, p, known);
        }
        for (int i = 0; i < rw->n; i++)
            if (rw->sets[i] == s)
                return ot__err_set(OT_EINVAL, NULL, 0, fn, "%s=%s names \"%s\" twice", var,
                                   rw->list, s->name);
        rw->sets[rw->n++] = s;
        p += len;
        if (!*p) return 0;
    }
}

/* The sets list names; *out NULL for NULL or "". */
static int configure(const char *list, const char *var, const char *fn, struct ot__rewrite **out)
{
    *out = NULL;
    if (!list || !*list) return 0;
    size_t n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    struct ot__rewrite *rw = ot__calloc(1, sizeof *rw + n * sizeof rw->sets[0]);
    if (!rw || !(rw->list = copy_str(list))) {
        free(rw);
        return ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
    }
    int rc = resolve(rw, var, fn);
    if (rc) {
        ot__rewrite_free(rw);
        return rc;
    }
    *out = rw;
    return 0;
}

int ot__rewrite_config(const char *list, const char *var, struct ot__rewrite **out)
{
    return configure(list, var, "backend_new", out);
}

/* ---- one pass of one rule --------------------------------------------------- */

typedef struct match {
    int first, count;            /* its members: pass.member[first .. first + count) */
} match;

/* The nodes of the trees (walk order, operands first), who reads each, and
 * the matches found; every array is indexed by the walk's node index. */
typedef struct pass {
    const ot_rewrite_rule *rule;
    const char *set;
    FILE *log;
    int fired;
    int n;                       /* nodes walked */
    size_t cap;
    const ot_node **node;
    int (*operand)[2];
    int *use_start, *use;        /* the readers of node i: use[use_start[i] .. use_start[i + 1]) */
    int *claim;                  /* the match holding node i, or -1 */
    int *mark;                   /* while a match grows: its seed + 1 */
    int *root_of;                /* the match whose root node i is, or -1 */
    int *member;                 /* members of the matches, each match's in order */
    int nmember;
    match *matches;
    int nmatches;
    ot_node **out;               /* node i as rewritten */
    const ot_node **scratch;     /* a match's nodes, then its inputs as read */
    ot_node **inputs;
} pass;

static int record(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    pass *p = w->ctx;
    if ((size_t)index == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        const ot_node **node = ot__realloc(p->node, cap * sizeof *node);
        if (node) p->node = node;
        int(*op)[2] = node ? ot__realloc(p->operand, cap * sizeof *op) : NULL;
        if (!op) return OT_ENOMEM;
        p->operand = op;
        p->cap = cap;
    }
    p->node[index] = n;
    p->operand[index][0] = operand[0];
    p->operand[index][1] = operand[1];
    return 0;
}

static void *alloc_n(size_t n, size_t elem)
{
    size_t bytes;
    return ot__mul_size(&bytes, n ? n : 1, elem) ? ot__malloc(bytes) : NULL;
}

/* Every per-node array, and the readers of each node (an operand read
 * twice, as in x * x, lists its reader once). */
static bool index_uses(pass *p)
{
    size_t n = (size_t)p->n;
    p->use_start = ot__calloc(n + 1, sizeof *p->use_start);
    p->use = alloc_n(2 * n, sizeof *p->use);
    p->claim = alloc_n(n, sizeof *p->claim);
    p->mark = ot__calloc(n ? n : 1, sizeof *p->mark);
    p->root_of = alloc_n(n, sizeof *p->root_of);
    p->member = alloc_n(n, sizeof *p->member);
    p->matches = alloc_n(n, sizeof *p->matches);
    p->out = alloc_n(n, sizeof *p->out);
    p->scratch = alloc_n(2 * n, sizeof *p->scratch);
    p->inputs = alloc_n(2 * n, sizeof *p->inputs);
    if (!p->use_start || !p->use || !p->claim || !p->mark || !p->root_of || !p->member ||
        !p->matches || !p->out || !p->scratch || !p->inputs)
        return false;
    for (int j = 0; j < p->n; j++)
        for (int k = 0; k < 2; k++) {
            int o = p->operand[j][k];
            if (o >= 0 && !(k == 1 && o == p->operand[j][0])) p->use_start[o + 1]++;
        }
    for (int i = 0; i < p->n; i++) p->use_start[i + 1] += p->use_start[i];
    for (int i = 0; i < p->n; i++) p->claim[i] = p->use_start[i];   /* fill cursors */
    for (int j = 0; j < p->n; j++)
        for (int k = 0; k < 2; k++) {
            int o = p->operand[j][k];
            if (o >= 0 && !(k == 1 && o == p->operand[j][0])) p->use[p->claim[o]++] = j;
        }
    for (int i = 0; i < p->n; i++) p->claim[i] = p->root_of[i] = -1;
    return true;
}

static void pass_free(pass *p)
{
    free(p->node);
    free(p->operand);
    free(p->use_start);
    free(p->use);
    free(p->claim);
    free(p->mark);
    free(p->root_of);
    free(p->member);
    free(p->matches);
    free(p->out);
    free(p->scratch);
    free(p->inputs);
}

/* Whether node i may join the match growing from seed (stamp seed + 1). */
static bool may_join(const pass *p, int i, int stamp)
{
    return i >= 0 && p->node[i]->kind == OT_NODE_OP && p->claim[i] < 0 && p->mark[i] != stamp;
}

/* Grows a match from seed, as MXNet's selector does: each member offers its
 * operands to select_input and its readers to select_output. Returns the
 * count of members, in p->member from p->nmember on. */
static int grow(pass *p, int seed)
{
    const ot_rewrite_rule *r = p->rule;
    int *set = p->member + p->nmember, ns = 0, stamp = seed + 1;
    p->mark[seed] = stamp;
    set[ns++] = seed;
    for (int q = 0; q < ns; q++) {
        int j = set[q];
        for (int k = 0; k < 2 && r->select_input; k++) {
            int o = p->operand[j][k];
            if (may_join(p, o, stamp) && r->select_input(p->node[j], p->node[o], r->user)) {
                p->mark[o] = stamp;
                set[ns++] = o;
            }
        }
        for (int u = p->use_start[j]; u < p->use_start[j + 1] && r->select_output; u++) {
            int c = p->use[u];
            if (may_join(p, c, stamp) && r->select_output(p->node[j], p->node[c], r->user)) {
                p->mark[c] = stamp;
                set[ns++] = c;
            }
        }
    }
    return ns;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Whether the members (sorted) have one root: one member that no member
 * reads. Every member is then below it, and it has the largest index. */
static bool one_root(const pass *p, const int *set, int ns)
{
    int stamp = p->mark[set[0]], roots = 0;
    for (int q = 0; q < ns; q++) {
        bool read = false;
        for (int u = p->use_start[set[q]]; u < p->use_start[set[q] + 1]; u++)
            read = read || p->mark[p->use[u]] == stamp;
        roots += !read;
    }
    return roots == 1;
}

/* The matches, seeds tried in walk order; a node joins one match at most. */
static void find_matches(pass *p)
{
    const ot_rewrite_rule *r = p->rule;
    for (int i = 0; i < p->n; i++) {
        if (!may_join(p, i, i + 1) || !r->select(p->node[i], r->user)) continue;
        int *set = p->member + p->nmember, ns = grow(p, i);
        qsort(set, (size_t)ns, sizeof *set, cmp_int);
        if (!one_root(p, set, ns)) continue;
        for (int q = 0; q < ns; q++) p->scratch[q] = p->node[set[q]];
        if (r->filter && !r->filter(ns, p->scratch, r->user)) continue;
        for (int q = 0; q < ns; q++) p->claim[set[q]] = p->nmatches;
        p->root_of[set[ns - 1]] = p->nmatches;
        p->matches[p->nmatches++] = (match){p->nmember, ns};
        p->nmember += ns;
    }
}

/* ---- building the rewritten trees ------------------------------------------- */

/* Node i over its operands as rewritten: itself when they are unchanged
 * (untouched subtrees stay shared), else rebuilt like ot_substitute does,
 * a composite's root as its composite. */
static ot_node *rebuild(pass *p, int i)
{
    const ot_node *n = p->node[i];
    if (n->kind != OT_NODE_OP) return (ot_node *)n;
    ot_node *x[2];
    bool same = true;
    for (int k = 0; k < 2; k++) {
        x[k] = p->operand[i][k] >= 0 ? p->out[p->operand[i][k]] : NULL;
        same = same && x[k] == ot_rewrite_operand(n, k);
    }
    if (same) return (ot_node *)n;
    /* a registered op's node holds its placeholder row: ot__node_op is the op */
    ot_op op = (ot_op)(n->tag != OT_OP_NONE ? n->tag : ot__node_op(n));
    ot_node *r = ot_build_at(op, x[0], x[1], &n->args, n->file, n->line);
    /* The rebuilt node stands for n: it keeps n's name and metadata. */
    if (r && n->annot && ot__annot_copy(r, n)) return NULL;
    return r;
}

/* A create may itself rewrite (ot_rewrite, or an assignment through a
 * backend with rule sets), but one that rewrites a tree its own rule fires
 * on again would recurse until the stack overflows: creates nest at most
 * MAX_NEST deep on a thread. Past that the innermost is refused, and every
 * create around it fails with that error too, whatever it does with the
 * NULL its rewrite got. */
enum { MAX_NEST = 16 };
static _Thread_local struct {
    int depth;                   /* creates running on this thread */
    const char *rule, *set;      /* the refused one, until the outermost returns */
    const char *file;
    int line;
} nest;

static void nest_error(void)
{
    ot__err_set(OT_ESTATE, nest.file, nest.line, "rewrite",
                "rule \"%s\" (set \"%s\") was to run inside %d nested creates: a create that "
                "rewrites (ot_rewrite, or an assignment through a backend with rule sets) a tree "
                "its rule fires on again never ends",
                nest.rule, nest.set, MAX_NEST);
}

/* The rule's create of m, or NULL with *refused when the nesting bound was
 * hit here or inside it (the error set). */
static ot_node *nested_create(const pass *p, const ot_rewrite_match *m, const ot_node *root,
                              bool *refused)
{
    if (nest.depth == MAX_NEST) {
        nest.rule = p->rule->name;
        nest.set = p->set;
        nest.file = root->file;
        nest.line = root->line;
        nest_error();
        *refused = true;
        return NULL;
    }
    nest.depth++;
    ot_node *r = p->rule->create(m, p->rule->user);
    nest.depth--;
    *refused = nest.rule != NULL;
    if (*refused && ot_errcode() != OT_ESTATE) nest_error();   /* the create cleared it */
    if (nest.depth == 0) nest.rule = NULL;
    return *refused ? NULL : r;
}

/* The replacement the rule builds, checked against the root it replaces. */
static ot_node *replace(pass *p, const match *mt)
{
    const int *set = p->member + mt->first;
    const ot_node *root = p->node[set[mt->count - 1]];
    const ot_node **nodes = p->scratch, **read = p->scratch + mt->count;
    int nin = 0, id = p->claim[set[0]];
    for (int q = 0; q < mt->count; q++) {
        nodes[q] = p->node[set[q]];
        for (int k = 0; k < 2; k++) {
            int o = p->operand[set[q]][k];
            if (o < 0 || p->claim[o] == id) continue;
            bool seen = false;
            for (int t = 0; t < nin; t++) seen = seen || read[t] == p->node[o];
            if (seen) continue;
            read[nin] = p->node[o];
            p->inputs[nin++] = p->out[o];
        }
    }
    ot_rewrite_match m = {p->rule->name, p->set, mt->count, nodes, nin, p->inputs, read};
    bool refused;
    ot_node *r = nested_create(p, &m, root, &refused);
    if (refused) return NULL;
    char why[OT__SHAPE_STRLEN * 2 + 64] = "", sr[OT__SHAPE_STRLEN], sn[OT__SHAPE_STRLEN];
    int code = 0;
    if (!r) {
        code = ot_errcode() ? ot_errcode() : OT_EINVAL;   /* out of memory stays so */
        snprintf(why, sizeof why, "built no replacement%s%s", ot_errcode() ? ": " : "",
                 ot_errmsg());
    } else if (!ot__shape_eq(&r->shape, &root->shape) || r->dtype != root->dtype) {
        code = r->dtype != root->dtype ? OT_EDTYPE : OT_ESHAPE;
        snprintf(why, sizeof why, "replaced a %s %s node by a %s %s tree",
                 ot__shape_str(&root->shape, sn), ot_dtype_name((ot_dtype)root->dtype),
                 ot__shape_str(&r->shape, sr), ot_dtype_name((ot_dtype)r->dtype));
    }
    if (code && !r && ot_errcode()) {   /* a builder's error, handed to the handler already */
        ot__err_reword(code, root->file, root->line, "rewrite", "rule \"%s\" (set \"%s\") %s",
                       p->rule->name, p->set, why);
        return NULL;
    }
    if (code) {
        ot__err_set(code, root->file, root->line, "rewrite", "rule \"%s\" (set \"%s\") %s",
                    p->rule->name, p->set, why);
        return NULL;
    }
    p->fired++;
    if (p->log)
        fprintf(p->log, "rewrite: %s (set '%s') at %s:%d\n", p->rule->name, p->set,
                root->file ? root->file : "?", root->line);
    return r;
}

/* One rule over the trees cur (replaced by their rewrites): walk, match,
 * then rebuild in walk order, so every operand is ready before its reader. */
static int one_pass(const ot_rewrite_rule *rule, const char *set, int n, ot_node *cur[],
                    FILE *log, int *fired)
{
    pass p = {.rule = rule, .set = set, .log = log};
    ot__walker w = {.visit = record, .ctx = &p, .composites = true};
    int *root = alloc_n((size_t)n, sizeof *root), rc = root ? 0 : OT_ENOMEM;
    for (int t = 0; t < n && rc >= 0; t++) rc = root[t] = ot__walker_run(&w, cur[t]);
    p.n = w.count;
    ot__walker_free(&w);
    if (rc >= 0) rc = index_uses(&p) ? 0 : OT_ENOMEM;
    if (rc == 0) find_matches(&p);
    for (int i = 0; rc == 0 && p.nmatches > 0 && i < p.n; i++) {
        p.out[i] = p.root_of[i] >= 0 ? replace(&p, &p.matches[p.root_of[i]]) : rebuild(&p, i);
        if (!p.out[i]) rc = ot_errcode() ? ot_errcode() : OT_EINVAL;
    }
    for (int t = 0; rc == 0 && p.nmatches > 0 && t < n; t++) cur[t] = p.out[root[t]];
    *fired += p.fired;
    pass_free(&p);
    free(root);
    if (rc == OT_ENOMEM && !ot_errcode()) ot__err_set(rc, NULL, 0, "rewrite", "out of memory");
    return rc;
}

/* Every rule of every set in force, in order, over trees into cur. */
static int rewrite_all(const struct ot__rewrite *rw, int n, ot_node *const trees[],
                       ot_node *cur[], FILE *log)
{
    int rc = 0, fired = 0;
    for (int t = 0; t < n; t++) cur[t] = trees[t];
    for (int s = 0; s < rw->n && !rc; s++)
        for (int k = 0; k < rw->sets[s]->nrules && !rc; k++)
            rc = one_pass(&rw->sets[s]->rules[k], rw->sets[s]->name, n, cur, log, &fired);
    if (!rc && log && !fired) fprintf(log, "rewrite: nothing fired (sets %s)\n", rw->list);
    return rc;
}

int ot__rewrite_then(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                     FILE *log, ot__rewritten_fn *then, void *ctx)
{
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot_errcode();
    ot_node **cur = alloc_n((size_t)n, sizeof *cur);
    int rc = cur ? rewrite_all(be->rewrite, n, trees, cur, log)
                 : ot__err_set(OT_ENOMEM, NULL, 0, "rewrite", "out of memory");
    if (!rc) rc = then(be, n, outs, cur, ctx);
    free(cur);
    ot_pool_pop(pool);
    return rc;
}

/* ---- the public helpers ------------------------------------------------------ */

ot_node *ot_rewrite(ot_node *tree, const char *sets)
{
    if (!tree) {
        ot__err(OT_ENULL, NULL, 0, "rewrite", "tree is NULL");
        return NULL;
    }
    if (ot__node_check("rewrite", NULL, 0, "the tree", tree)) return NULL;
    struct ot__rewrite *rw;
    if (configure(sets, "sets", "rewrite", &rw)) return NULL;
    ot_node *out = tree;
    int rc = rw ? rewrite_all(rw, 1, &tree, &out, NULL) : 0;
    ot__rewrite_free(rw);
    return rc ? NULL : out;
}

ot_node *ot_rewrite_input(const ot_rewrite_match *m, const ot_node *read)
{
    for (int i = 0; m && i < m->ninputs; i++)
        if (m->input_nodes[i] == read) return m->inputs[i];
    return NULL;
}

ot_node *ot_rewrite_operand(const ot_node *n, int i)
{
    if (!n || n->kind != OT_NODE_OP || i < 0 || i > 1) return NULL;
    if (n->tag != OT_OP_NONE) return i ? n->tag_b : n->tag_a;
    return i ? n->b : n->a;
}
