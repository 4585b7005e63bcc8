/*
 * tensor_at.c - the _at twins of the tensor functions that take no place
 * of their own (creation, data, transpose and broadcast views): each runs
 * the plain function under the caller's file:line (ot__site_enter), so
 * that its errors name it as the builders' do. optree.h makes the plain
 * names macros over these.
 */
#include "internal.h"

ot_tensor *ot_empty_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_empty)(be, shape, dtype);
    ot__site_leave(outer);
    return t;
}

ot_tensor *ot_zeros_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_zeros)(be, shape, dtype);
    ot__site_leave(outer);
    return t;
}

ot_tensor *ot_ones_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_ones)(be, shape, dtype);
    ot__site_leave(outer);
    return t;
}

ot_tensor *ot_full_at(ot_backend *be, ot_shape shape, ot_dtype dtype, double value,
                      const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_full)(be, shape, dtype, value);
    ot__site_leave(outer);
    return t;
}

ot_tensor *ot_array_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data,
                       const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_array)(be, shape, dtype, data);
    ot__site_leave(outer);
    return t;
}

ot_tensor *ot_zeros_like_at(const ot_tensor *t, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *z = (ot_zeros_like)(t);
    ot__site_leave(outer);
    return z;
}

ot_tensor *ot_copy_at(const ot_tensor *t, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *c = (ot_copy)(t);
    ot__site_leave(outer);
    return c;
}

ot_tensor *ot_wrap_at(ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr,
                      const int64_t *strides, void (*free_fn)(void *user, void *ptr),
                      void *user, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *t = (ot_wrap)(be, shape, dtype, ptr, strides, free_fn, user);
    ot__site_leave(outer);
    return t;
}

/* ---- data ---------------------------------------------------------------- */

int ot_fill_at(ot_tensor *t, double value, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_fill)(t, value);
    ot__site_leave(outer);
    return rc;
}

int ot_get_at(const ot_tensor *t, void *host, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_get)(t, host);
    ot__site_leave(outer);
    return rc;
}

int ot_set_at(ot_tensor *t, const void *host, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_set)(t, host);
    ot__site_leave(outer);
    return rc;
}

int ot_get_raw_at(const ot_tensor *t, void *host, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_get_raw)(t, host);
    ot__site_leave(outer);
    return rc;
}

int ot_set_raw_at(ot_tensor *t, const void *host, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_set_raw)(t, host);
    ot__site_leave(outer);
    return rc;
}

int ot_get_n_at(const ot_tensor *t, void *host, size_t nbytes, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_get_n)(t, host, nbytes);
    ot__site_leave(outer);
    return rc;
}

int ot_set_n_at(ot_tensor *t, const void *host, size_t nbytes, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    int rc = (ot_set_n)(t, host, nbytes);
    ot__site_leave(outer);
    return rc;
}

/* ---- views ----------------------------------------------------------------- */

ot_tensor *ot_transpose_at(const ot_tensor *t, const int *perm, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *v = (ot_transpose)(t, perm);
    ot__site_leave(outer);
    return v;
}

ot_tensor *ot_broadcast_to_at(const ot_tensor *t, ot_shape shape, const char *file, int line)
{
    ot__callsite outer = ot__site_enter(file, line);
    ot_tensor *v = (ot_broadcast_to)(t, shape);
    ot__site_leave(outer);
    return v;
}
