/*
 * link_check.c - built by tools/test.sh against the shared library alone:
 * a program using the public header's option macros (positional, designated)
 * must link and run, so every symbol they expand to is exported.
 */
#include "optree.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *y = ot_empty(be, OT_SHAPE(2), OT_F32);
    float v[2] = {0, 0};
    int rc = ot_assign(y, ot_add(ot_sum(x, 1), ot_mean(x, .axis = 1)));
    if (!rc) rc = ot_get(y, v);
    int ok = !rc && v[0] == 4 && v[1] == 4 && strcmp(ot_version(), OT_VERSION) == 0;
    printf("link_check: %s (rc %d, %g %g)\n", ok ? "ok" : "FAILED", rc, v[0], v[1]);
    ot_tensor_free(y);
    ot_tensor_free(x);
    ot_backend_free(be);
    ot_pool_pop(pool);
    return ok ? 0 : 1;
}
