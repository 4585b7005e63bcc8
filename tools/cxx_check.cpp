/*
 * cxx_check.cpp - built by tools/test.sh with g++ and clang++ (C++11,
 * -Wall -Wextra -Werror; clang++ also -pedantic) against the shared
 * library alone: every public header compiles as C++ and declares C
 * linkage, whichever header a program includes first (a sub-header first
 * here), so a C++ program links and runs. The macros build compound
 * literals and use _Generic, which C++ lacks: C++ calls the functions
 * (ot_shape_make for OT_SHAPE, the _at forms or the names in parentheses).
 */
#include "optree/norm.h"
#include "optree.h"

#include <cstdio>
#include <cstring>

int main()
{
    ot_backend *be = ot_backend_new("ref", NULL);
    const int64_t dims[2] = {2, 3};
    ot_tensor *x = (ot_ones)(be, ot_shape_make(2, dims), OT_F32);
    ot_tensor *y = (ot_empty)(be, ot_shape_make(2, dims), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_layer_norm_opts o;
    std::memset(&o, 0, sizeof o);
    o.dims = 1;
    o.eps = 1e-5;
    ot_node *ln = ot_layer_norm_at(ot_tensor_node(x), o, __FILE__, __LINE__);
    int rc = ot_assign_at(y, ot_build_at(OT_OP_ADD, ln, ot_tensor_node(x), NULL, __FILE__, __LINE__),
                          __FILE__, __LINE__);
    float v[6] = {0};
    if (!rc) rc = (ot_get)(y, v);
    ot_adam a = ot_adam_default(1e-3);
    bool ok = !rc && v[0] == 1 && v[5] == 1 && a.beta2 == 0.999 &&
              std::strcmp(ot_version(), OT_VERSION) == 0;
    std::printf("cxx_check: %s (rc %d, %g %g)\n", ok ? "ok" : "FAILED", rc, v[0], v[5]);
    (ot_pool_pop)(pool);
    ot_tensor_free(y);
    ot_tensor_free(x);
    ot_backend_free(be);
    return ok ? 0 : 1;
}
