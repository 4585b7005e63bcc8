/*
 * tour.c - the neon backend guide, in C: what `make demo` runs.
 *
 * Walks through optree's core idioms with the reference backend: tensors,
 * lazy op-trees and their two printed forms, assignment, the logistic
 * function with constants, a column view as an output, a reduction along an
 * axis, weak constants, and the error message of a bad broadcast. Each step
 * checks its result; the program exits 0 only if every step behaved as
 * expected. OT_BACKEND=cpu ./tour runs the same steps on another backend.
 *
 * It uses only include/optree.h, frees everything it creates, and runs clean
 * under valgrind.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#endif
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

/* Records a step that did not behave as the guide says it should. */
static void expect(int ok, const char *what)
{
    if (!ok) {
        failures++;
        printf("  !! unexpected: %s\n", what);
        if (ot_errcode() != 0) printf("  !! last error: %s\n", ot_errmsg());
    }
}

static void section(const char *title)
{
    printf("\n== %s\n", title);
}

/* What ot_print or ot_pp writes for n, as a malloc'd string without a
 * trailing newline (NULL when printing failed). */
static char *render(int (*fn)(const ot_node *, FILE *), const ot_node *n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int rc = fn(n, f);
    if (fclose(f) != 0 || rc != 0) {
        free(buf);
        return NULL;
    }
    while (len > 0 && buf[len - 1] == '\n') buf[--len] = '\0';
    return buf;
}

/* Prints and checks one of the two printed forms of a tree. */
static void show(const char *label, int (*fn)(const ot_node *, FILE *),
                 const ot_node *n, const char *want)
{
    char *s = render(fn, n);
    printf("  %s %s\n", label, s ? s : "(print failed)");
    expect(s != NULL, "printing a tree returns 0");
    if (s && want) expect(strcmp(s, want) == 0, want);
    free(s);
}

/* Reads a tensor of up to 16 f32 values back to the host and compares. */
static void expect_values(const ot_tensor *t, const float *want, int n,
                          const char *what)
{
    float got[16];
    int ok = n <= 16 && ot_tensor_numel(t) == n && ot_get(t, got) == 0;
    for (int i = 0; ok && i < n; i++)
        ok = fabsf(got[i] - want[i]) <= 1e-6f * fmaxf(1.0f, fabsf(want[i]));
    expect(ok, what);
}

int main(void)
{
    /* Nodes built from here on belong to this pool; popping it frees them. */
    ot_pool *pool = ot_pool_push();
    expect(pool != NULL, "ot_pool_push");

    section("1. A backend (be = gen_backend('ref')) and two named 2x2 tensors");
    /* OT_BACKEND in the environment replaces "ref". */
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        printf("  cannot create the backend: %s\n", ot_errmsg());
        ot_pool_pop(pool);
        return 1;
    }
    printf("  backend: %s\n", ot_backend_name(be));
    ot_tensor *x0 = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){1, 2, 3, 4});
    ot_tensor *x1 = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){5, 6, 7, 8});
    ot_tensor *y = ot_empty(be, OT_SHAPE(2, 2), OT_F32);
    ot_tensor *s = ot_empty(be, OT_SHAPE(2), OT_F32);
    expect(x0 && x1 && y && s, "creating tensors");
    ot_tensor_set_name(x0, "x0");
    ot_tensor_set_name(x1, "x1");
    printf("  x0 =\n");
    expect(ot_tensor_print(x0, stdout) == 0, "ot_tensor_print(x0)");
    printf("  x1 =\n");
    expect(ot_tensor_print(x1, stdout) == 0, "ot_tensor_print(x1)");

    section("2. f = x0 + x1 builds an op-tree; nothing is computed yet");
    ot_node *f = ot_add(x0, x1);
    expect(f != NULL, "building x0 + x1");
    show("print(f):", ot_print, f, "({'shape': (2, 2), 'op': 'add'}, x0, x1)");
    show("pp(f):   ", ot_pp, f, NULL);

    section("3. y[:] = f (ot_assign) computes the tree into y");
    expect(ot_assign(y, f) == 0, "ot_assign(y, x0 + x1)");
    printf("  y =\n");
    expect(ot_tensor_print(y, stdout) == 0, "ot_tensor_print(y)");
    expect_values(y, (float[]){6, 8, 10, 12}, 4, "y == x0 + x1");

    section("4. The logistic function 1 / (1 + exp(-x)), constants included");
    ot_node *sig = ot_div(1.0f, ot_add(1.0f, ot_exp(ot_neg(x0))));
    show("pp:", ot_pp, sig, NULL);
    expect(ot_assign(y, sig) == 0, "ot_assign(y, logistic(x0))");
    printf("  y =\n");
    ot_tensor_print(y, stdout);
    float want_sig[4];
    for (int i = 0; i < 4; i++) want_sig[i] = 1.0f / (1.0f + expf(-(float)(i + 1)));
    expect_values(y, want_sig, 4, "y == 1 / (1 + exp(-x0))");

    section("5. Weak constants: x0 * 0.5 stays float32");
    ot_node *half = ot_mul(x0, 0.5);
    printf("  dtype of x0 * 0.5: %s\n", ot_dtype_name(ot_node_dtype(half)));
    expect(ot_node_dtype(half) == OT_F32, "x0 * 0.5 is float32");

    section("6. A column view as the output: y[:, 1] = x0[:, 0] * 10");
    expect(ot_assign(y, f) == 0, "y[:] = x0 + x1 again");
    ot_tensor *ycol = ot_slice(y, OT_ALL, OT_IDX(1));   /* shares y's buffer */
    ot_tensor *xcol = ot_slice(x0, OT_ALL, OT_IDX(0));
    expect(ycol && xcol && ot_tensor_ndim(ycol) == 1 && ot_tensor_dim(ycol, 0) == 2,
           "y[:, 1] is a 1-d view of 2 elements");
    expect(ot_assign(ycol, ot_mul(xcol, 10.0f)) == 0, "ot_assign(y[:, 1], x0[:, 0] * 10)");
    printf("  y =\n");
    ot_tensor_print(y, stdout);
    expect_values(y, (float[]){6, 10, 10, 30}, 4, "only column 1 of y changed");

    section("7. A reduction along an axis: s[:] = be.sum(x0, axis=1)");
    ot_node *rs = ot_sum(x0, .axis = 1);
    show("pp:", ot_pp, rs, NULL);
    expect(ot_assign(s, rs) == 0, "ot_assign(s, sum(x0, axis=1))");
    printf("  s =\n");
    ot_tensor_print(s, stdout);
    expect_values(s, (float[]){3, 7}, 2, "s == row sums of x0");

    section("8. Errors: a bad broadcast, checked where the tree is built");
    ot_tensor *a = ot_zeros(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_zeros(be, OT_SHAPE(5, 4), OT_F32);
    ot_tensor *out = ot_empty(be, OT_SHAPE(3, 4), OT_F32);
    ot_clear_error();
    ot_node *bad = ot_mul(a, b);
    printf("  ot_mul((3,4), (5,4)) returned %s\n", bad ? "a node" : "NULL");
    printf("  ot_errcode(): %d (%s)\n", ot_errcode(), ot_strerror(ot_errcode()));
    printf("  ot_errmsg():  %s\n", ot_errmsg());
    expect(bad == NULL, "a bad broadcast gives NULL");
    expect(ot_errcode() == OT_ESHAPE, "a bad broadcast is OT_ESHAPE");
    expect(strstr(ot_errmsg(), "tour.c:") != NULL && strstr(ot_errmsg(), "mul") != NULL,
           "the message names the caller's file and the op");
    /* NULL propagates: the whole expression is checked once, at assignment,
     * and the first message is kept. */
    int rc = ot_assign(out, ot_exp(ot_add(bad, 1.0f)));
    printf("  ot_assign(out, exp(bad + 1)) returned %d (%s)\n", rc, ot_strerror(rc));
    printf("  ot_errmsg():  %s\n", ot_errmsg());
    expect(rc == OT_ESHAPE, "assigning a NULL tree returns the first error");
    ot_clear_error();

    section("9. Cleaning up: pop the pool, free tensors, then the backend");
    expect(ot_pool_pop(pool) == 0, "ot_pool_pop");
    ot_tensor_free(ycol);
    ot_tensor_free(xcol);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(out);
    ot_tensor_free(s);
    ot_tensor_free(y);
    ot_tensor_free(x1);
    ot_tensor_free(x0);
    ot_backend_free(be);

    if (failures) {
        printf("\ntour: %d step(s) did not behave as expected\n", failures);
        return 1;
    }
    printf("\ntour: every step behaved as expected\n");
    return 0;
}
