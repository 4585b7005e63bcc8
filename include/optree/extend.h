/*
 * optree/extend.h - extending and transforming trees: custom ops
 * registered at run time, rewrite rules, parsing expressions, the
 * post-order stack and substitution of leaves.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_EXTEND_H
#define OPTREE_EXTEND_H

/* ------------------------------------------------------------------------ */
/* Custom ops                                                                */
/* ------------------------------------------------------------------------ */

/* An elementwise op added at run time, without editing the library. It
 * gets an op number of its own (OT_OP_REGISTERED and up) that ot_op_name,
 * ot_op_lookup, ot_op_arity, ot_op_kind, ot_op_flags and ot_node_op know;
 * its nodes fuse into the cpu backend's kernels like a built-in op's (the
 * vector function is called from inside the fused loop, in generated code
 * too), print by its name, and differentiate through its gradient builder.
 *
 *     static float gelu_f32(float x) { ... }
 *     static __m256 gelu_avx2(__m256 x) { ... }   // target("avx2,fma")
 *     ot_op gelu = ot_op_register(&(ot_op_def){
 *         .name = "gelu", .arity = 1, .f32 = gelu_f32, .f64 = gelu_f64,
 *         .avx2_f32 = (ot_vfn)gelu_avx2, .grad = gelu_grad});
 *     ot_assign(out, ot_apply(gelu, ot_mul(x, 2.0f)));
 *
 * Shapes and dtypes are those of a built-in elementwise op (NumPy
 * broadcasting for two operands, dtype promotion; i32 operands give f64).
 * The scalar function of a dtype is required for that dtype: the ref
 * backend, the scalar and SSE2 kernels and ISAs without a vector function
 * call it; using the op on a dtype without one is OT_EUNSUPPORTED at
 * assignment. The ref backend uses f64 where given (it computes in double),
 * else f32. Vector functions are optional: with one for the ISA's width
 * (AVX2: __m256 / __m256d; AVX-512: __m512 / __m512d, by value, as
 * `__m256 f(__m256 x)` or `__m256 f(__m256 x, __m256 y)`, the System V
 * vector calling convention) the op runs a vector at a time, and generated
 * code calls it; without one the kernel runs on the tile interpreter,
 * calling the scalar function per element. A vector function must be
 * lane-wise (a lane's result depends on that lane alone) and may be called
 * on zero-padded lanes past the end of the data; every function must be
 * pure and callable from any thread. On one ISA, fused, unfused and
 * interpreted results are bitwise equal.
 *
 * The registry lives as long as the process: ops cannot be unregistered,
 * and registration is thread-safe. */
typedef void (*ot_vfn)(void);   /* a vector function, cast to this type */
/* The gradient of a registered op: the contribution to operand `which`
 * (0: x, 1: y; y is NULL for a unary op), as a tree built from the operand
 * nodes, the op's own node `out` and its incoming gradient g, with the
 * ordinary builders. It may have out's shape or any shape that broadcasts
 * to it; autodiff sums it back to the operand's shape. NULL with an error
 * set fails the differentiation. */
typedef ot_node *(*ot_grad_fn)(ot_node *x, ot_node *y, ot_node *out, ot_node *g, int which,
                               void *user);
typedef struct ot_op_def {
    const char *name;               /* copied; [A-Za-z_][A-Za-z0-9_]* (as ot_parse
                                       reads a name), < OT_OP_NAME_MAX chars,
                                       no built-in's or registered op's name */
    int arity;                      /* 1 or 2 */
    float (*f32)(float x);          /* unary ops: at least one of these */
    double (*f64)(double x);
    float (*f32_xy)(float x, float y);     /* binary ops: at least one */
    double (*f64_xy)(double x, double y);
    ot_vfn avx2_f32, avx2_f64;      /* optional, each only with the scalar */
    ot_vfn avx512_f32, avx512_f64;  /* function of its dtype */
    ot_grad_fn grad;                /* NULL: not differentiable (zero gradient,
                                       OT_FLAG_NODIFF) */
    void *user;                     /* passed to grad */
} ot_op_def;

#define OT_FLAG_CUSTOM 16u          /* a registered op, or the table's
                                       placeholder row of such ops (custom1,
                                       custom2: built only through them) */
#define OT_OP_REGISTERED 1024       /* the first registered op's number */
#define OT_MAX_REGISTERED_OPS 256
#define OT_OP_NAME_MAX 32

/* Registers def (copied): its op number, or OT_OP_NONE with OT_EINVAL for a
 * bad definition (no name, a name in use, an arity not 1 or 2, no scalar
 * function or one of the other arity, a vector function without its
 * dtype's scalar function, a full registry) and OT_ENULL for a NULL def. */
ot_op ot_op_register(const ot_op_def *def);
/* A node of a registered op: ot_apply(op, x) for a unary op, ot_apply2(op,
 * x, y) for a binary one (ot_build_at takes registered ops too). Operands
 * as for the built-in builders: nodes, tensors or numbers. */
#define ot_apply(op, x) OT__UN((op), x)
#define ot_apply2(op, x, y) OT__BIN((op), x, y)

/* A structured op added at run time: any shape rule, a kernel over whole
 * tensors, a gradient rule, 0 to OT_STRUCT_MAX_ARITY operands (cumsum, a
 * 1-D convolution, a scan). It gets an op number as an elementwise
 * registered op does, and the same queries know it (ot_op_kind: SPECIAL,
 * ot_op_flags: OT_FLAG_FLOAT | OT_FLAG_CUSTOM, OT_FLAG_NODIFF without a
 * gradient rule). Its nodes print and parse by its name with their axis
 * (cumsum(x, axis=1)), count in node identity and digests (the plan cache)
 * and run in programs and ot_explain.
 *
 *     ot_op cumsum = ot_op_register_structured(&(ot_struct_def){
 *         .name = "cumsum", .arity = 1, .shape = cumsum_shape,
 *         .f32 = cumsum_f32, .f64 = cumsum_f64, .grad = cumsum_grad});
 *     ot_node *y = ot_apply_struct(cumsum, 1, (ot_node *[]){x}, &(ot_args){.axis = 1});
 *
 * Parameters: the node's args.axis is the op's one parameter (it prints,
 * parses and counts in identity; OT_AXIS_ALL when not given); the other
 * members of ot_args are cleared before the shape rule sees them.
 * The shape rule gets the operands' shapes and dtypes and the args (it may
 * normalise args->axis, e.g. a negative axis, which the node then keeps)
 * and sets the result's shape and dtype (f32 or f64); on bad input it
 * returns OT_ESHAPE, OT_EDTYPE or OT_EINVAL with a message in msg, which
 * the builder records as "<op>: <msg>" with the caller's file:line.
 * Operands of another dtype than the result's are cast to it (cast nodes in
 * the tree), so a kernel sees every operand in its own dtype.
 * The kernel of a dtype is called once per evaluation with contiguous
 * row-major operands and a contiguous output (shapes and strides in
 * ot_struct_tensor), never with an empty output; it must be pure and
 * callable from any thread. The cpu backend runs it as a kernel of its own
 * (operands computed into memory first; fusion stops at it, as at a dot);
 * the ref backend, which computes in double, calls the f64 kernel (an f32
 * node of an op without one: the f32 kernel, on values rounded to f32). A
 * result dtype without its kernel is OT_EUNSUPPORTED when the node is built.
 * The gradient rule builds operand `which`'s contribution from the operands,
 * the node out, its incoming gradient g (out's shape) and the args, with
 * the ordinary builders (other registered ops too): a tree of the operand's
 * shape, or one that broadcasts to out's shape and is summed back. */
#define OT_STRUCT_MAX_ARITY 2
typedef struct ot_struct_tensor {
    void *data;                       /* contiguous; NULL when empty */
    ot_dtype dtype;                   /* the result's dtype */
    ot_shape shape;
    int64_t strides[OT_MAX_DIMS];     /* in elements, row-major */
} ot_struct_tensor;
typedef struct ot_struct_call {
    int n;                            /* operands */
    const ot_struct_tensor *in;       /* in[0..n-1], read only */
    const ot_struct_tensor *out;      /* written whole */
    const ot_args *args;              /* the node's (args->axis) */
    void *user;                       /* the def's */
} ot_struct_call;
typedef int (*ot_struct_shape_fn)(int n, const ot_shape in_shapes[], const ot_dtype in_dtypes[],
                                  ot_args *args, ot_shape *out_shape, ot_dtype *out_dtype,
                                  char *msg, size_t msg_len, void *user);
typedef void (*ot_struct_kernel_fn)(const ot_struct_call *call);
typedef ot_node *(*ot_struct_grad_fn)(int n, ot_node *const in[], ot_node *out, ot_node *g,
                                      int which, const ot_args *args, void *user);
typedef struct ot_struct_def {
    const char *name;                 /* as ot_op_def's */
    int arity;                        /* 0 .. OT_STRUCT_MAX_ARITY */
    ot_struct_shape_fn shape;         /* required */
    ot_struct_kernel_fn f32, f64;     /* at least one; the result's dtype picks */
    ot_struct_grad_fn grad;           /* NULL: not differentiable (OT_FLAG_NODIFF) */
    void *user;                       /* passed to each function */
} ot_struct_def;

/* Registers def (copied): its op number, or OT_OP_NONE with OT_ENULL for a
 * NULL def or shape rule and OT_EINVAL for a bad name, an arity out of
 * range, no kernel or a full registry (the registry is ot_op_register's). */
ot_op ot_op_register_structured(const ot_struct_def *def);
/* A node of registered op `op` over in[0..n-1] (n its arity; in may be
 * NULL when n is 0) with args (NULL: axis OT_AXIS_ALL): the builder's
 * checks, then the op's shape rule. NULL with the error set on failure. */
ot_node *ot_apply_struct_at(ot_op op, int n, ot_node *const in[], const ot_args *args,
                            const char *file, int line);
/* ot_apply_struct(op, n, in, args); variadic so that a compound literal
 * with commas, (ot_node *[]){x, y}, may be written in place. */
#define ot_apply_struct(op, n, ...) ot_apply_struct_at((op), (n), __VA_ARGS__, __FILE__, __LINE__)
/* ------------------------------------------------------------------------ */
/* Rewrite rules                                                             */
/* ------------------------------------------------------------------------ */

/* A rule rewrites a pattern of a tree before it is planned, after MXNet's
 * subgraph API: a selector grows a match from one node (SubgraphSelector's
 * Select, SelectInput, SelectOutput, Filter) and a builder returns the tree
 * that replaces it (SubgraphProperty's CreateSubgraphNode). Rules are
 * grouped into named rule sets; a backend applies the sets its options name
 * (ot_backend_opts.rewrite, or OT_REWRITE=name1,name2) to every tree it
 * assigns or explains, and ot_explain prints each firing as
 * "rewrite: <rule> (set '<set>') at <file>:<line>" (the matched root's).
 * The user's trees are never changed: rewritten trees are new nodes.
 *
 * Matching, one pass per rule (sets in the order listed, rules in the
 * order registered), over the trees as the previous pass left them:
 *   - seeds are tried operands first (post-order); a node is in at most
 *     one match per pass;
 *   - select(n) starts a match at op node n; select_input(n, in) adds op
 *     operand in of member n, select_output(n, out) adds a node out that
 *     reads member n (both optional: NULL adds nothing); leaves and
 *     constants are never members. A composite (softmax, ...) is one node
 *     whose operands are its own (ot_rewrite_operand); its expansion is
 *     not matched;
 *   - the match must have one root, a member no other member reads (else it
 *     is dropped), and filter (optional) may reject it;
 *   - create(m) returns the replacement of the root, a tree of the root's
 *     shape and dtype built over m->inputs. Members other than the root
 *     stay where something outside the match reads them.
 * A create that returns NULL, or a tree of another shape or dtype, makes the
 * assignment fail (OT_EINVAL, OT_ESHAPE, OT_EDTYPE naming rule, set and the
 * root's file:line) before anything is written. Callbacks run on the
 * assigning thread, possibly on several threads at once. A create may
 * itself rewrite (ot_rewrite, or an assignment through a backend with rule
 * sets), 16 creates deep at most per thread: past that (a create that
 * rewrites a tree its rule fires on again) every create in the chain fails
 * with OT_ESTATE naming the innermost rule, set and file:line. */
typedef struct ot_rewrite_match {
    const char *rule, *set;        /* the names */
    int nnodes;
    const ot_node *const *nodes;   /* the members, operands first; the root,
                                      which is replaced, last */
    int ninputs;
    ot_node *const *inputs;        /* the values entering the match, in the
                                      order members read them (each once),
                                      as earlier passes rewrote them: build
                                      the replacement over these */
    const ot_node *const *input_nodes; /* the same values as the members
                                      read them (ot_rewrite_input maps) */
} ot_rewrite_match;

typedef struct ot_rewrite_rule {
    const char *name;              /* for ot_explain; copied */
    bool (*select)(const ot_node *n, void *user);                    /* required */
    bool (*select_input)(const ot_node *n, const ot_node *input, void *user);
    bool (*select_output)(const ot_node *n, const ot_node *output, void *user);
    bool (*filter)(int nnodes, const ot_node *const nodes[], void *user);
    ot_node *(*create)(const ot_rewrite_match *m, void *user);      /* required */
    void *user;                    /* passed to each callback; not copied */
} ot_rewrite_rule;

typedef struct ot_rule_set {
    const char *name;              /* no commas, not empty */
    int nrules;
    const ot_rewrite_rule *rules;
} ot_rule_set;

/* Registers a rule set under its name, for every backend made after it.
 * The set, its name and its rules' names are copied; user pointers are
 * kept. Registrations are permanent (the registry is append-only and
 * thread-safe). OT_ENULL for a NULL set, name, rules, rule name, select or
 * create; OT_EINVAL for an empty name or one with a comma or space, no
 * rules, or a name registered already ("fuse" is the library's: silu's
 * spellings sig(x) * x and x / (1 + exp(-x)) as x * sig(x), the form the
 * kernels run in one pass; log(softmax(x, axis)) as logsoftmax(x, axis),
 * finite where the softmax underflows; sum(x * x, axis) as
 * squared_l2(x, axis), the same values, with autodiff's 2 x g; "conv_bn"
 * is the library's too: an inference ot_batch_norm over an ot_conv's output,
 * the conv's bias add included, folded into one conv over the weights
 * W * scale plus a bias, scale = weight * rsqrt(running_var + eps), the
 * folded weights a tree over the same tensors). */
int ot_rule_set_register(const ot_rule_set *set);
/* tree rewritten by the named rule sets (comma-separated, as the option),
 * as a backend would before planning it: a builder (NULL on error, keeping
 * the first), owned by the current pool. tree itself when nothing fires. */
ot_node *ot_rewrite(ot_node *tree, const char *sets);
/* In create: the rewritten input for a value a member reads, given as the
 * member read it (an ot_rewrite_operand of a member); NULL when it is not
 * one of m's inputs. */
ot_node *ot_rewrite_input(const ot_rewrite_match *m, const ot_node *read);
/* Operand i (0 or 1) of n as rewrites see it: a composite's own operand
 * for a composite's root (softmax(x) reads x), else ot_node_child's. */
ot_node *ot_rewrite_operand(const ot_node *n, int i);
/* ------------------------------------------------------------------------ */
/* Parsing expressions                                                       */
/* ------------------------------------------------------------------------ */

/* ot_parse("tanh(a*b + a/b)", 2, (const char *[]){"a", "b"}, (ot_node *[]){a, b})
 * builds the tree over the named operands (tensors through ot_tensor_node,
 * or any nodes) in the current pool, as the builders would. The syntax is
 * Python's for numbers (1, 2.5, 1e-3, inf, nan), names, + - * / ** (right
 * associative, tighter than a unary minus on its left), unary - and +,
 * < <= > >= == != (lowest, left associative) and parentheses. Every op of
 * the table and every registered op is a function by its name, operands
 * first, then its attributes positionally or by keyword, in the order of
 * the C builders' options: sum(x, 1), sum(x, axis=1, keepdims=1),
 * var(x, axis=0, ddof=1), clip(x, 0, 6), cast(x, f64), onehot(y, 10),
 * transpose(x, perm=(1, 0)), rand(shape=(3, 4), seed=7). An integer literal
 * is an i32 constant, any other number f64 (both weak, as in C). A minus
 * written on a literal is part of the constant (-2, not neg(2)). A literal
 * of any length is read whole, correctly rounded (1 followed by 200 zeros
 * is 1e200); one beyond its type's range (1e400, 1e39f) is an error at its
 * column: write inf. A name may also be a view's as views of a named
 * tensor are named ("x[2:5]", "m.T", "x.reshape(4,16)", "x[1:3].T"): the
 * text spells it verbatim where an operand starts, the longest such name
 * first, so ot_pp's text of a tree over such views reads back as the same
 * tree when the views' names are handed in.
 *
 * Errors (OT_EINVAL, or the builder's code) say where:
 * "parse: col 6: unknown function 'tanhh'; did you mean 'tanh'?". NULL on
 * error. Nesting deeper than 200 levels (parentheses, calls, signs, the
 * right operand of each ** in a chain, labels) is an error, never a deep
 * recursion. */
ot_node *ot_parse(const char *expr, int n, const char *const names[], ot_node *const nodes[]);
/* Each ..._at below is its function with the caller's file:line, which
 * its errors name; the plain name is a macro over it (optree.h). */
ot_node *ot_parse_at(const char *expr, int n, const char *const names[],
                   ot_node *const nodes[], const char *file, int line);
#define ot_parse(...) ot_parse_at(__VA_ARGS__, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* The post-order stack and substitution                                     */
/* ------------------------------------------------------------------------ */

/* The items of a tree in postfix order, operands before their op, with
 * shared subtrees listed once: identical nodes, and structurally equal
 * subtrees (same op, attributes and operands; leaves over the same memory
 * with the same view; equal constants of one dtype). */
typedef struct ot_stack ot_stack;
typedef struct ot_stack_item {
    int kind;             /* OT_NODE_LEAF, OT_NODE_CONST or OT_NODE_OP */
    ot_op op;             /* for OT_NODE_OP */
    const ot_node *node;  /* the first node seen for this item */
    ot_tensor *tensor;    /* for OT_NODE_LEAF */
    double value;         /* for OT_NODE_CONST */
    int a, b;             /* operand item indices, or -1 */
    int uses;             /* how many items (and the root) read this one */
} ot_stack_item;
/* The stack retains its tree until ot_stack_free: the items' nodes and
 * tensors stay valid though the pool that built them is popped. */
ot_stack *ot_stack_new(const ot_node *tree);
void ot_stack_free(ot_stack *s);
int ot_stack_len(const ot_stack *s);
const ot_stack_item *ot_stack_at(const ot_stack *s, int i);
/* One line per item: index, kind, op and attributes, operand indices. */
int ot_stack_print(const ot_stack *s, FILE *f);

/* A new tree equal to tree with every leaf over old replaced by new_t. new_t
 * must have old's shape; dtypes are promoted afresh. tree is unchanged. */
ot_node *ot_substitute(ot_node *tree, ot_tensor *old, ot_tensor *new_t);

#endif /* OPTREE_EXTEND_H */
