/*
 * tensor_at.c - the _at twins of the core functions that take no place of
 * their own (creation, data, transpose and broadcast views, names, axis
 * names, ot_parse): each runs the plain function under the caller's
 * file:line (OT__AT_TWIN), so that its errors name it as the builders' do.
 * The public headers make the plain names macros over these.
 */
#include "internal.h"

OT__AT_TWIN(ot_tensor *, ot_empty,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line),
        (be, shape, dtype))
OT__AT_TWIN(ot_tensor *, ot_zeros,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line),
        (be, shape, dtype))
OT__AT_TWIN(ot_tensor *, ot_ones,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line),
        (be, shape, dtype))
OT__AT_TWIN(ot_tensor *, ot_full,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, double value, const char *file, int line),
        (be, shape, dtype, value))
OT__AT_TWIN(ot_tensor *, ot_array,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data, const char *file,
         int line),
        (be, shape, dtype, data))
OT__AT_TWIN(ot_tensor *, ot_wrap,
        (ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr, const int64_t *strides,
         void (*free_fn)(void *user, void *ptr), void *user, const char *file, int line),
        (be, shape, dtype, ptr, strides, free_fn, user))
OT__AT_TWIN(ot_tensor *, ot_zeros_like, (const ot_tensor *t, const char *file, int line), (t))
OT__AT_TWIN(ot_tensor *, ot_copy, (const ot_tensor *t, const char *file, int line), (t))
OT__AT_TWIN(int, ot_fill, (ot_tensor *t, double value, const char *file, int line), (t, value))
OT__AT_TWIN(int, ot_get, (const ot_tensor *t, void *host, const char *file, int line), (t, host))
OT__AT_TWIN(int, ot_set, (ot_tensor *t, const void *host, const char *file, int line), (t, host))
OT__AT_TWIN(int, ot_get_raw,
        (const ot_tensor *t, void *host, const char *file, int line), (t, host))
OT__AT_TWIN(int, ot_set_raw,
        (ot_tensor *t, const void *host, const char *file, int line), (t, host))
OT__AT_TWIN(int, ot_get_n,
        (const ot_tensor *t, void *host, size_t nbytes, const char *file, int line),
        (t, host, nbytes))
OT__AT_TWIN(int, ot_set_n,
        (ot_tensor *t, const void *host, size_t nbytes, const char *file, int line),
        (t, host, nbytes))
OT__AT_TWIN(ot_tensor *, ot_transpose,
        (const ot_tensor *t, const int *perm, const char *file, int line),
        (t, perm))
OT__AT_TWIN(ot_tensor *, ot_broadcast_to,
        (const ot_tensor *t, ot_shape shape, const char *file, int line),
        (t, shape))
OT__AT_TWIN(ot_node *, ot_parse,
        (const char *expr, int n, const char *const names[], ot_node *const nodes[],
         const char *file, int line),
        (expr, n, names, nodes))
OT__AT_TWIN(int, ot_tensor_set_name,
        (ot_tensor *t, const char *name, const char *file, int line),
        (t, name))
OT__AT_TWIN(int, ot_node_set_name,
        (ot_node *n, const char *name, const char *file, int line),
        (n, name))
OT__AT_TWIN(int, ot_tensor_set_axes,
        (ot_tensor *t, const char *axes, const char *file, int line),
        (t, axes))
