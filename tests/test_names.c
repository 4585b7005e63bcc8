/*
 * test_names.c - names and metadata on nodes (names.c): setting, reading and
 * clearing them, their limits and bad input, the printed forms with and
 * without them (byte for byte), that they never change a plan, the messages
 * that name operands and carry the line of the ot_assign call, the names
 * views take from their base, ot_substitute, and allocation failures.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "internal.h"

#include <stdlib.h>

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = 1});
    CHECK(be != NULL);
    return be;
}

static ot_tensor *tensor(ot_backend *be, ot_shape s, const char *name)
{
    ot_tensor *t = ot_zeros(be, s, OT_F32);
    CHECK(t != NULL);
    if (name) CHECK_INT(ot_tensor_set_name(t, name), 0);
    return t;
}

/* Checks that fn writes exactly want for n. */
#define CHECK_OUT(fn, n, want)                                                \
    do {                                                                      \
        char *got_ = test__capture((fn), (n));                                \
        CHECK_STR(got_, (want));                                              \
        free(got_);                                                           \
    } while (0)

static int stack_print_tree(const ot_node *n, FILE *f)
{
    ot_stack *s = ot_stack_new(n);
    int rc = ot_stack_print(s, f);
    ot_stack_free(s);
    return rc;
}

TEST(names_set_get_clear)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(2), "x");
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_add(x, x);
    CHECK(ot_node_name(h) == NULL);
    char buf[8] = "h1";
    CHECK_INT(ot_node_set_name(h, buf), 0);
    buf[1] = '9';   /* copied */
    CHECK_STR(ot_node_name(h), "h1");
    CHECK_INT(ot_node_set_name(h, "hidden"), 0);
    CHECK_STR(ot_node_name(h), "hidden");
    CHECK_INT(ot_node_set_name(h, ot_node_name(h)), 0);   /* renaming to itself */
    CHECK_STR(ot_node_name(h), "hidden");
    CHECK_INT(ot_node_set_name(h, NULL), 0);
    CHECK(ot_node_name(h) == NULL);
    CHECK_INT(ot_node_set_name(h, NULL), 0);               /* clearing nothing */
    CHECK_INT(ot_node_set_name(h, "h"), 0);
    CHECK_INT(ot_node_set_name(h, ""), 0);
    CHECK(ot_node_name(h) == NULL);
    /* ot_named names inside an expression. */
    ot_node *g = ot_mul(ot_named(ot_exp(x), "e"), 2.0f);
    CHECK(g && ot_node_name(ot_node_child(g, 0)) && !strcmp(ot_node_name(ot_node_child(g, 0)), "e"));
    /* Constants take names too. */
    ot_node *c = ot_named(ot_constf(0.5f), "lr");
    CHECK_STR(ot_node_name(c), "lr");
    /* A leaf's name is its tensor's, both ways. */
    ot_node *leaf = ot_tensor_node(x);
    CHECK_STR(ot_node_name(leaf), "x");
    CHECK_INT(ot_node_set_name(leaf, "w"), 0);
    CHECK_STR(ot_tensor_name(x), "w");
    CHECK_INT(ot_tensor_set_name(x, "x"), 0);
    CHECK_STR(ot_node_name(leaf), "x");
    CHECK_INT(ot_node_set_name(leaf, ""), 0);
    CHECK(ot_tensor_name(x) == NULL);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(names_metadata)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(2), "x");
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_add(x, x);
    CHECK_INT(ot_node_meta_count(h), 0);
    CHECK(ot_node_meta(h, "layer") == NULL);
    CHECK_INT(ot_node_set_meta(h, "layer", "1"), 0);
    CHECK_INT(ot_node_set_meta(h, "device", "cpu"), 0);
    CHECK_INT(ot_node_set_meta(h, "note", ""), 0);   /* an empty value is a value */
    CHECK_INT(ot_node_meta_count(h), 3);
    CHECK_STR(ot_node_meta(h, "layer"), "1");
    CHECK_STR(ot_node_meta(h, "note"), "");
    /* Replacing keeps the entry's place. */
    CHECK_INT(ot_node_set_meta(h, "layer", "2"), 0);
    const char *k = NULL, *v = NULL;
    CHECK_INT(ot_node_meta_at(h, 0, &k, &v), 0);
    CHECK_STR(k, "layer");
    CHECK_STR(v, "2");
    CHECK_INT(ot_node_meta_at(h, 1, &k, NULL), 0);
    CHECK_STR(k, "device");
    CHECK_INT(ot_node_meta_at(h, 2, NULL, &v), 0);
    CHECK_STR(v, "");
    /* Removing moves the later ones down; removing a missing key is nothing. */
    CHECK_INT(ot_node_set_meta(h, "layer", NULL), 0);
    CHECK_INT(ot_node_set_meta(h, "absent", NULL), 0);
    CHECK_INT(ot_node_meta_count(h), 2);
    CHECK_INT(ot_node_meta_at(h, 0, &k, &v), 0);
    CHECK_STR(k, "device");
    CHECK(ot_node_meta(h, "layer") == NULL);
    CHECK_INT(ot_node_meta_at(h, 2, &k, &v), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "node_meta_at: entry 2 is out of range: the node has 2");
    CHECK_INT(ot_node_meta_at(h, -1, &k, &v), OT_EINVAL);
    /* Names and metadata are independent. */
    CHECK_INT(ot_node_set_name(h, "h"), 0);
    CHECK_INT(ot_node_set_meta(h, "device", NULL), 0);
    CHECK_INT(ot_node_set_meta(h, "note", NULL), 0);
    CHECK_INT(ot_node_meta_count(h), 0);
    CHECK_STR(ot_node_name(h), "h");
    /* Leaves carry metadata on their node. */
    CHECK_INT(ot_node_set_meta(ot_tensor_node(x), "trainable", "yes"), 0);
    CHECK_STR(ot_node_meta(ot_tensor_node(x), "trainable"), "yes");
    /* The count is capped; replacing at the cap is fine. */
    char key[16];
    for (int i = 0; i < OT_META_MAX; i++) {
        snprintf(key, sizeof key, "k%d", i);
        CHECK_INT(ot_node_set_meta(h, key, "v"), 0);
    }
    CHECK_INT(ot_node_set_meta(h, "one_more", "v"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "node_set_meta:", "OT_META_MAX", "'one_more'");
    CHECK_INT(ot_node_set_meta(h, "k0", "w"), 0);
    CHECK_STR(ot_node_meta(h, "k0"), "w");
    CHECK_INT(ot_node_meta_count(h), OT_META_MAX);
    ot_pool_pop(p);
    ot_tensor_free(x);   /* its metadata goes with it */
    ot_backend_free(be);
}

TEST(names_bad_input)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(2), "x");
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_neg(x);
    /* NULL nodes. */
    CHECK_INT(ot_node_set_name(NULL, "a"), OT_ENULL);
    CHECK_ERR(OT_ENULL, "node_set_name: node is NULL");
    ot_clear_error();
    CHECK_INT(ot_node_set_meta(NULL, "k", "v"), OT_ENULL);
    CHECK_ERR(OT_ENULL, "node_set_meta: node is NULL");
    ot_clear_error();
    CHECK_INT(ot_node_meta_at(NULL, 0, NULL, NULL), OT_ENULL);
    CHECK(ot_node_name(NULL) == NULL);
    CHECK(ot_node_meta(NULL, "k") == NULL);
    CHECK(ot_node_meta(h, NULL) == NULL);
    CHECK_INT(ot_node_meta_count(NULL), 0);
    /* ot_named passes a failed build's NULL on, keeping its message. */
    ot_clear_error();
    CHECK(ot_named(ot_add(x, (ot_node *)NULL), "h") == NULL);
    CHECK_ERR(OT_ENULL, "add: operand 2 is NULL");
    ot_clear_error();
    CHECK(ot_named(NULL, "h") == NULL);
    CHECK_ERR(OT_ENULL, "named: node is NULL");
    /* Names: at most OT_NAME_MAX bytes, for leaves too. */
    char longname[OT_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_INT(ot_node_set_name(h, "kept"), 0);
    CHECK_INT(ot_node_set_name(h, longname), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "node_set_name: name of 257 bytes is longer than OT_NAME_MAX (256)");
    CHECK_STR(ot_node_name(h), "kept");
    CHECK(ot_named(h, longname) == NULL);
    CHECK_INT(ot_node_set_name(ot_tensor_node(x), longname), OT_EINVAL);
    CHECK_STR(ot_tensor_name(x), "x");
    /* ot_tensor_set_name keeps the same rule (it took any length), and
     * neither takes a control character, which broke ot_pp's lines */
    CHECK_INT(ot_tensor_set_name(x, longname), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "tensor_set_name: name of 257 bytes is longer than OT_NAME_MAX (256)");
    CHECK_STR(ot_tensor_name(x), "x");
    CHECK_INT(ot_tensor_set_name(x, "a\nb"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "tensor_set_name: name has a control character (byte 0x0a at 1)");
    CHECK_INT(ot_node_set_name(h, "tab\there"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "node_set_name: name has a control character (byte 0x09 at 3)");
    CHECK_STR(ot_node_name(h), "kept");
    CHECK_INT(ot_tensor_set_name(x, "x (f32) {1}"), 0);   /* printable is fine */
    CHECK_INT(ot_tensor_set_name(x, "x"), 0);
    longname[OT_NAME_MAX] = '\0';
    CHECK_INT(ot_node_set_name(h, longname), 0);
    CHECK_INT((int)strlen(ot_node_name(h)), OT_NAME_MAX);
    /* Keys: present, not empty, not too long, no control characters. */
    CHECK_INT(ot_node_set_meta(h, NULL, "v"), OT_ENULL);
    CHECK_ERR(OT_ENULL, "node_set_meta: key is NULL");
    CHECK_INT(ot_node_set_meta(h, "", "v"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "node_set_meta: key is empty");
    CHECK_INT(ot_node_set_meta(h, "", NULL), OT_EINVAL);
    char longkey[OT_META_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    CHECK_INT(ot_node_set_meta(h, longkey, "v"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "key of 65 bytes is longer than OT_META_KEY_MAX (64)");
    longkey[OT_META_KEY_MAX] = '\0';
    CHECK_INT(ot_node_set_meta(h, longkey, "v"), 0);
    CHECK_INT(ot_node_set_meta(h, "a\nb", "v"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "key has a control character (byte 0x0a at 1)");
    CHECK_INT(ot_node_meta_count(h), 1);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(names_printed_forms)
{
    ot_backend *be = backend("ref");
    ot_tensor *x0 = tensor(be, OT_SHAPE(2, 2), "x0");
    ot_tensor *x1 = tensor(be, OT_SHAPE(2, 2), "x1");
    ot_pool *p = ot_pool_push();
    /* Unnamed trees print as before. */
    ot_node *h = ot_add(x0, x1);
    ot_node *f = ot_mul(h, x0);
    CHECK_OUT(ot_pp, f, "((x0 + x1) * x0)");
    CHECK_OUT(ot_print, f, "({'shape': (2, 2), 'op': 'mul'}, ({'shape': (2, 2), 'op': 'add'}, "
                           "x0, x1), x0)");
    /* Named. */
    CHECK_INT(ot_node_set_name(h, "h1"), 0);
    CHECK_OUT(ot_pp, f, "(h1:(x0 + x1) * x0)");
    CHECK_OUT(ot_pp, h, "h1:(x0 + x1)");
    CHECK_OUT(ot_print, f, "({'shape': (2, 2), 'op': 'mul'}, ({'shape': (2, 2), 'op': 'add', "
                           "'name': 'h1'}, x0, x1), x0)");
    CHECK_INT(ot_node_set_meta(h, "layer", "1"), 0);
    CHECK_INT(ot_node_set_meta(h, "it's", "a\\b"), 0);
    CHECK_OUT(ot_print, h, "({'shape': (2, 2), 'op': 'add', 'name': 'h1', 'meta': {'layer': '1', "
                           "'it\\'s': 'a\\\\b'}}, x0, x1)");
    CHECK_INT(ot_node_set_meta(h, "it's", NULL), 0);
    /* Shared: written once as a numbered line, its name with it. */
    CHECK_OUT(ot_pp, ot_mul(h, h), "%1 = h1:(x0 + x1)\n(%1 * %1)");
    /* Reductions, composites and constants. */
    CHECK_OUT(ot_pp, ot_named(ot_sum(h, .axis = 1), "s"), "s:(sum h1:(x0 + x1) axis=1)");
    CHECK_OUT(ot_pp, ot_named(ot_softmax(x0, .axis = 1), "p"), "p:(softmax x0 axis=1)");
    CHECK_OUT(ot_pp, ot_mul(x0, ot_named(ot_constf(0.5f), "lr")), "(x0 * lr:0.5)");
    CHECK_OUT(ot_print, ot_mul(x0, ot_named(ot_constf(0.5f), "lr")),
              "({'shape': (2, 2), 'op': 'mul'}, x0, 0.5)");
    /* Graphviz: "name: op", a line per metadata entry. */
    CHECK_OUT(ot_graphviz, ot_mul(h, ot_named(ot_constf(0.5f), "lr")),
              "digraph optree {\n"
              "  n0 [shape=box, label=\"x0\\n(2, 2) float32\"];\n"
              "  n1 [shape=box, label=\"x1\\n(2, 2) float32\"];\n"
              "  n2 [shape=ellipse, label=\"h1: add\\n(2, 2) float32\\nlayer=1\"];\n"
              "  n0 -> n2;\n"
              "  n1 -> n2;\n"
              "  n3 [shape=plaintext, label=\"lr: 0.5\\n() float32\"];\n"
              "  n4 [shape=ellipse, label=\"mul\\n(2, 2) float32\"];\n"
              "  n2 -> n4;\n"
              "  n3 -> n4;\n"
              "}\n");
    CHECK_INT(ot_node_set_meta(ot_tensor_node(x0), "k\"", "v"), 0);
    CHECK_OUT(ot_graphviz, ot_named(ot_sum(x0, .axis = 1), "row\"s"),
              "digraph optree {\n"
              "  n0 [shape=box, label=\"x0\\n(2, 2) float32\\nk\\\"=v\"];\n"
              "  n1 [shape=ellipse, label=\"row\\\"s: sum axis=1\\n(2,) float32\"];\n"
              "  n0 -> n1;\n"
              "}\n");
    CHECK_INT(ot_node_set_meta(ot_tensor_node(x0), "k\"", NULL), 0);
    /* The stack's listing. */
    CHECK_OUT(stack_print_tree, ot_mul(h, ot_named(ot_constf(0.5f), "lr")),
              "0: leaf x0 (2, 2) float32\n"
              "1: leaf x1 (2, 2) float32\n"
              "2: h1: add (2, 2) float32 <- 0 1\n"
              "3: lr: const 0.5 float32\n"
              "4: mul (2, 2) float32 <- 2 3\n");
    ot_pool_pop(p);
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_backend_free(be);
}

/* The same computation, nodes named by tag (NULL: unnamed). */
static ot_node *named_tree(ot_tensor *a, ot_tensor *b, const char *tag)
{
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "%s_h", tag ? tag : "");
    snprintf(n2, sizeof n2, "%s_g", tag ? tag : "");
    ot_node *h = ot_tanh(ot_mul(a, b)), *g = ot_tanh(ot_mul(a, b));
    if (tag) {
        ot_node_set_name(h, n1);
        ot_node_set_name(g, n2);
        ot_node_set_meta(h, "tag", tag);
    }
    return ot_add(h, ot_sum(g, .axis = 1, .keepdims = true));
}

TEST(names_never_change_plans)
{
    ot_backend *be = backend("cpu");
    float av[12], bv[12];
    for (int i = 0; i < 12; i++) av[i] = 0.1f * (float)i, bv[i] = 1.0f - 0.05f * (float)i;
    ot_tensor *a = ot_array(be, OT_SHAPE(3, 4), OT_F32, av);
    ot_tensor *b = ot_array(be, OT_SHAPE(3, 4), OT_F32, bv);
    ot_tensor *o1 = ot_empty(be, OT_SHAPE(3, 4), OT_F32), *o2 = ot_empty(be, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_stats s0, s1, s2;
    CHECK_INT(ot_assign(o1, named_tree(a, b, NULL)), 0);
    CHECK_INT(ot_stats_get(be, &s0), 0);
    /* Named differently: the cached plan, no compile, the same bits. */
    CHECK_INT(ot_assign(o2, named_tree(a, b, "first")), 0);
    CHECK_INT(ot_stats_get(be, &s1), 0);
    CHECK_INT(s1.compiles - s0.compiles, 0);
    CHECK_INT(s1.cache_hits - s0.cache_hits, 1);
    CHECK_INT(ot_assign(o2, named_tree(a, b, "second")), 0);
    CHECK_INT(ot_stats_get(be, &s2), 0);
    CHECK_INT(s2.compiles - s1.compiles, 0);
    CHECK_INT(s2.cache_hits - s1.cache_hits, 1);
    /* CSE: h and g, equal but named apart, are computed once, as unnamed. */
    CHECK_INT(s2.kernels - s1.kernels, s1.kernels - s0.kernels);
    CHECK_INT(s2.elem_ops - s1.elem_ops, s1.elem_ops - s0.elem_ops);
    float g1[12], g2[12];
    CHECK_INT(ot_get(o1, g1), 0);
    CHECK_INT(ot_get(o2, g2), 0);
    CHECK(memcmp(g1, g2, sizeof g1) == 0);
    /* The stack shares them too (the first node's name shows). */
    ot_node *t = named_tree(a, b, "third");
    ot_stack *st = ot_stack_new(t);
    ot_stack *su = ot_stack_new(named_tree(a, b, NULL));
    CHECK(st && su && ot_stack_len(st) == ot_stack_len(su));
    ot_stack_free(st);
    ot_stack_free(su);
    /* Naming a tree's root after a first assignment keeps its memo. */
    CHECK_INT(ot_assign(o2, t), 0);
    CHECK_INT(ot_assign(o2, t), 0);
    CHECK_INT(ot_stats_get(be, &s1), 0);
    CHECK_INT(ot_node_set_name(t, "root"), 0);
    CHECK_INT(ot_assign(o2, t), 0);
    CHECK_INT(ot_stats_get(be, &s2), 0);
    CHECK_INT(s2.compiles - s1.compiles, 0);
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(o1);
    ot_tensor_free(o2);
    ot_backend_free(be);
}

TEST(names_in_builder_errors)
{
    ot_backend *be = backend("ref");
    ot_tensor *a = tensor(be, OT_SHAPE(3, 4), "a");
    ot_tensor *u = tensor(be, OT_SHAPE(5, 4), NULL);
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_named(ot_exp(u), "h1");
    ot_clear_error();
    CHECK(ot_add(a, h) == NULL);
    CHECK_ERR(OT_ESHAPE, "add: shapes (3,4) and (5,4) cannot be broadcast (dim 0: 3 vs 5); "
                         "operand 1 is 'a', operand 2 is 'h1'");
    ot_clear_error();
    CHECK(ot_add(ot_exp(a), h) == NULL);
    CHECK_ERR(OT_ESHAPE, "(dim 0: 3 vs 5); operand 2 is 'h1'");
    /* Unnamed operands: the message as it always was. */
    ot_clear_error();
    CHECK(ot_add(ot_exp(a), u) == NULL);
    CHECK(strstr(ot_errmsg(), "operand 1 is") == NULL);
    CHECK(strstr(ot_errmsg(), "is 'a'") == NULL);
    CHECK_ERR(OT_ESHAPE, "add: shapes (3,4) and (5,4) cannot be broadcast (dim 0: 3 vs 5)");
    /* One operand. */
    ot_clear_error();
    CHECK(ot_sum(h, .axis = 2) == NULL);
    CHECK_ERR(OT_EINVAL, "sum: axis 2 is out of bounds", "; the operand is 'h1'");
    ot_clear_error();
    CHECK(ot_dot(a, h) == NULL);
    CHECK_ERR(OT_ESHAPE, "dot: shapes (3,4) and (5,4) not aligned", "operand 1 is 'a', operand 2 is 'h1'");
    ot_clear_error();
    CHECK(ot_softmax(h, .axis = 3) == NULL);
    CHECK_ERR(OT_EINVAL, "softmax: axis 3", "; the operand is 'h1'");
    /* The error names the line of the builder call. */
    ot_clear_error();
    int line = __LINE__ + 1;
    CHECK(ot_mul(h, a) == NULL);
    char where[64];
    snprintf(where, sizeof where, "test_names.c:%d: mul: ", line);
    CHECK_ERR(OT_ESHAPE, where, "operand 1 is 'h1', operand 2 is 'a'");
    /* A long name is cut. */
    char longname[200];
    memset(longname, 'z', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_INT(ot_node_set_name(h, longname), 0);
    ot_clear_error();
    CHECK(ot_add(a, h) == NULL);
    CHECK(strlen(ot_errmsg()) < 300);
    CHECK_ERR(OT_ESHAPE, "operand 2 is 'zzzzzzzzzz", "zzz...'");
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_tensor_free(u);
    ot_backend_free(be);
}

TEST(names_assign_errors_carry_the_call_line)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(3, 4), "x");
    ot_tensor *y = tensor(be, OT_SHAPE(5), "y");
    ot_tensor *i = ot_zeros(be, OT_SHAPE(3, 4), OT_I32);
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_named(ot_exp(x), "h1");
    char want[160];
    int line = __LINE__ + 1;
    CHECK_INT(ot_assign(y, h), OT_ESHAPE);
    snprintf(want, sizeof want, "test_names.c:%d: assign: tree 0 'h1' of shape (3,4) cannot be "
             "written into an output 'y' of shape (5,)", line);
    CHECK_ERR(OT_ESHAPE, want);
    line = __LINE__ + 1;
    CHECK_INT(ot_assign(i, h), OT_EDTYPE);
    snprintf(want, sizeof want, "test_names.c:%d: assign: cannot write a float32 tree 'h1' into "
             "an int32 output; ot_cast it first", line);
    CHECK_ERR(OT_EDTYPE, want);
    /* A read-only view, named after its base. */
    ot_tensor *bv = ot_broadcast_to(y, OT_SHAPE(2, 5));
    line = __LINE__ + 1;
    CHECK_INT(ot_assign(bv, 1.0f), OT_EALIAS);
    snprintf(want, sizeof want, "test_names.c:%d: assign: written-to tensor 'y.broadcast_to(2,5)' "
             "has overlapping elements (stride 0 at dim 0)", line);
    CHECK_ERR(OT_EALIAS, want);
    ot_tensor_free(bv);
    /* A NULL tree: the builder's message stays; with none, the call's. */
    ot_clear_error();
    CHECK_INT(ot_assign(y, ot_add(h, (ot_node *)NULL)), OT_ENULL);
    CHECK_ERR(OT_ENULL, "add: operand 2 is NULL (operand 1 is (3,4) float32); operand 1 is 'h1'");
    ot_clear_error();
    CHECK_INT(ot_assign_at(y, NULL, "model.c", 88), OT_ENULL);
    CHECK_ERR(OT_ENULL, "model.c:88: assign: tree is NULL");
    CHECK_INT(ot_assign_at(NULL, h, "model.c", 89), OT_ENULL);
    CHECK_ERR(OT_ENULL, "model.c:89: assign: output tensor is NULL");
    /* ot_assign_node is unchanged: no place. */
    CHECK_INT(ot_assign_node(y, h), OT_ESHAPE);
    CHECK(strncmp(ot_errmsg(), "assign: ", 8) == 0);
    CHECK_ERR(OT_ESHAPE, "assign: tree 0 'h1' of shape (3,4)");
    /* ot_eval too. */
    line = __LINE__ + 1;
    CHECK(ot_eval(ot_named(ot_add(ot_const(1.0), 2.0), "c")) == NULL);
    snprintf(want, sizeof want, "test_names.c:%d: eval: the tree 'c' has no tensor leaf", line);
    CHECK_ERR(OT_EBACKEND, want);
    ot_clear_error();
    CHECK(ot_eval_at(NULL, "m.c", 3) == NULL);
    CHECK_ERR(OT_ENULL, "m.c:3: eval: tree is NULL");
    /* Successful calls are unaffected. */
    ot_tensor *e = ot_eval(h);
    CHECK(e != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_tensor_free(e);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(i);
    ot_backend_free(be);
}

/* Checks that v is named want (NULL: unnamed), then frees it. */
static void check_view(ot_tensor *v, const char *want)
{
    CHECK(v != NULL);
    if (want) CHECK_STR(ot_tensor_name(v), want);
    else CHECK(ot_tensor_name(v) == NULL);
    ot_tensor_free(v);
}

TEST(names_of_views)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(8, 4), "x");
    ot_tensor *u = tensor(be, OT_SHAPE(8, 4), NULL);
    ot_tensor *c = tensor(be, OT_SHAPE(2, 3, 4), "c");
    check_view(ot_slice(x, OT_RANGE(2, 5)), "x[2:5]");
    check_view(ot_slice(x, OT_RANGE(OT_NONE, OT_NONE, -1)), "x[::-1]");
    check_view(ot_slice(x, OT_ALL, OT_IDX(1)), "x[:, 1]");
    check_view(ot_slice(x, OT_IDX(1)), "x[1]");
    check_view(ot_slice(x, OT_IDX(-1), OT_RANGE(1, OT_NONE)), "x[-1, 1:]");
    check_view(ot_slice(x, OT_RANGE(-3, OT_NONE), OT_RANGE(OT_NONE, 3, 2)), "x[-3:, :3:2]");
    check_view(ot_slice(x, OT_RANGE(1, 8, 2)), "x[1:8:2]");
    check_view(ot_slice_n(x, 0, NULL), "x[...]");
    check_view(ot_transpose(x, NULL), "x.T");
    check_view(ot_transpose(x, (int[]){1, 0}), "x.T");
    check_view(ot_transpose(c, (int[]){1, 0, 2}), "c.transpose(1,0,2)");
    check_view(ot_transpose(c, NULL), "c.T");
    check_view(ot_reshape(x, OT_SHAPE(4, 8)), "x.reshape(4,8)");
    check_view(ot_reshape(x, OT_SHAPE(-1)), "x.reshape(32,)");
    check_view(ot_broadcast_to(x, OT_SHAPE(2, 8, 4)), "x.broadcast_to(2,8,4)");
    check_view(ot_slice(u, OT_IDX(0)), NULL);
    check_view(ot_transpose(u, NULL), NULL);
    check_view(ot_reshape(u, OT_SHAPE(32)), NULL);
    /* Views of views chain; a renamed view is the user's. */
    ot_tensor *t = ot_transpose(x, NULL);
    check_view(ot_slice(t, OT_IDX(0)), "x.T[0]");
    CHECK_INT(ot_tensor_set_name(t, "xt"), 0);
    check_view(ot_slice(t, OT_IDX(0)), "xt[0]");
    ot_tensor_free(t);
    /* Failed views set no name and leak nothing. */
    CHECK(ot_slice(x, OT_IDX(9)) == NULL);
    CHECK(ot_reshape(x, OT_SHAPE(5, 5)) == NULL);
    /* Wherever tensor names appear. */
    ot_pool *p = ot_pool_push();
    ot_tensor *col = ot_slice(x, OT_ALL, OT_IDX(1));
    CHECK_OUT(ot_pp, ot_add(col, 1.0f), "(x[:, 1] + 1.0)");
    ot_clear_error();
    ot_tensor *row = ot_slice(c, OT_IDX(0));
    CHECK(ot_add(col, row) == NULL);
    CHECK_ERR(OT_ESHAPE, "operand 1 is 'x[:, 1]', operand 2 is 'c[0]'");
    ot_pool_pop(p);
    /* A name near OT_NAME_MAX: its views' would pass it (a caller sizing a
     * buffer by it, and set_name refusing the library's own names): they
     * are unnamed. */
    char longest[OT_NAME_MAX + 1];
    memset(longest, 'q', OT_NAME_MAX);
    longest[OT_NAME_MAX] = '\0';
    CHECK_INT(ot_tensor_set_name(u, longest), 0);
    ot_tensor *ur = ot_reshape(u, OT_SHAPE(32));
    CHECK(ur != NULL && ot_tensor_name(ur) == NULL);
    ot_tensor_free(ur);
    ot_tensor_free(col);
    ot_tensor_free(row);
    ot_tensor_free(x);
    ot_tensor_free(u);
    ot_tensor_free(c);
    ot_backend_free(be);
}

TEST(names_survive_substitute)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(2), "x");
    ot_tensor *y = tensor(be, OT_SHAPE(2), "y");
    ot_tensor *z = tensor(be, OT_SHAPE(2), "z");
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_named(ot_mul(x, z), "h1");
    ot_node_set_meta(h, "layer", "3");
    ot_node *k = ot_named(ot_exp(z), "k");
    ot_node *s = ot_named(ot_softmax(h), "p");
    ot_node *f = ot_named(ot_add(s, k), "f");
    ot_node *g = ot_substitute(f, x, y);
    CHECK(g != NULL && g != f);
    CHECK_OUT(ot_pp, g, "f:(p:(softmax h1:(y * z)) + k:(exp z))");
    CHECK(ot_node_child(g, 1) == k);   /* untouched: the same node */
    /* The rebuilt h keeps its metadata. */
    ot_stack *st = ot_stack_new(g);
    int found = 0;
    for (int i = 0; i < ot_stack_len(st); i++) {
        const ot_node *n = ot_stack_at(st, i)->node;
        if (ot_node_name(n) && !strcmp(ot_node_name(n), "h1") && n != h) {
            found = 1;
            CHECK_STR(ot_node_meta(n, "layer"), "3");
        }
    }
    CHECK(found);
    ot_stack_free(st);
    CHECK_OUT(ot_pp, ot_substitute(f, z, x), "f:(p:(softmax h1:(x * x)) + k:(exp x))");
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(z);
    ot_backend_free(be);
}

/* Every allocation failure of naming and annotating is OT_ENOMEM, leaves
 * what was set before it, and leaks nothing (ASan, valgrind). */
TEST(names_allocation_failures)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(4, 4), "x");
    ot_tensor *y = tensor(be, OT_SHAPE(4, 4), "y");
    ot_pool *p = ot_pool_push();
    ot_node *h = ot_neg(x);
    bool done = false;
    for (long n = 1; n < 100 && !done; n++) {
        ot_node *c = ot_neg(x);
        ot__alloc_fail_at(n);
        int rc = ot_node_set_name(c, "h"), set = 0;
        char key[16];
        for (; set < 6 && rc == 0; set += rc == 0) {
            snprintf(key, sizeof key, "k%d", set);
            rc = ot_node_set_meta(c, key, "value");
        }
        ot_tensor *v = rc ? NULL : ot_slice(x, OT_IDX(1));
        if (!rc && !v) rc = ot_errcode();
        ot_node *g = rc ? NULL : ot_substitute(ot_named(ot_add(c, h), "g"), x, y);
        if (!rc && !g) rc = ot_errcode();
        ot__alloc_fail_at(0);
        CHECK(rc == 0 || rc == OT_ENOMEM);
        CHECK_INT(ot_node_meta_count(c), set);
        if (v) CHECK_STR(ot_tensor_name(v), "x[1]");
        ot_tensor_free(v);
        if (rc) continue;
        CHECK_STR(ot_node_name(c), "h");
        CHECK_OUT(ot_pp, g, "g:(h:(neg y) + (neg y))");
        done = true;
    }
    CHECK(done);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* A weak constant that meets a tensor of another dtype is rounded into a
 * new constant, which keeps its name and metadata (a * lr with lr =
 * ot_named(ot_const(0.5), "lr") printed no lr, and ot_parse of ot_pp's
 * "(x * lr:0.5)" came back unnamed); copying them leaves an earlier error
 * in the slot, as builders do, and each allocation may fail (OT_ENOMEM,
 * nothing leaked). */
TEST(names_kept_by_a_weak_constant_that_takes_a_dtype)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = tensor(be, OT_SHAPE(4), "x");
    ot_pool *p = ot_pool_push();
    ot_node *lr = ot_named(ot_const(0.5), "lr");
    CHECK_INT(ot_node_set_meta(lr, "role", "step size"), 0);
    CHECK(ot_add(x, (ot_node *)NULL) == NULL);   /* an earlier error, which stays */
    ot_node *t = ot_mul(x, lr);
    CHECK(t != NULL);
    CHECK_INT(ot_errcode(), OT_ENULL);
    const ot_node *c = t ? ot_node_child(t, 1) : NULL;
    CHECK(c && c != lr && ot_node_dtype(c) == OT_F32);
    CHECK_STR(ot_node_name(c), "lr");
    CHECK_STR(c ? ot_node_meta(c, "role") : NULL, "step size");
    CHECK_OUT(ot_pp, t, "(x * lr:0.5)");
    ot_node *back = ot_parse("(x * lr:0.5)", 1, (const char *[]){"x"},
                             (ot_node *[]){ot_tensor_node(x)});
    CHECK(back && ot_node_name(ot_node_child(back, 1)) &&
          strcmp(ot_node_name(ot_node_child(back, 1)), "lr") == 0);
    bool done = false;
    for (long n = 1; n < 20 && !done; n++) {
        ot_clear_error();
        ot__alloc_fail_at(n);
        ot_node *m = ot_mul(x, lr);
        ot__alloc_fail_at(0);
        if (!m) {
            CHECK_INT(ot_errcode(), OT_ENOMEM);
            continue;
        }
        CHECK_STR(ot_node_name(ot_node_child(m, 1)), "lr");
        done = true;
    }
    CHECK(done);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}
