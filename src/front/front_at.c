/*
 * front_at.c - the _at twins of the front layer's functions that take no
 * place of their own (.npy/.npz files, autodiff): each runs the plain
 * function under the caller's file:line (OT__AT_TWIN), so that its
 * errors name it. The public headers make the plain names macros over
 * these; tensor_at.c does the same for the core's.
 */
#include "front.h"

OT__AT_TWIN(int, ot_save, (const char *path, const ot_tensor *t, const char *file, int line), (path, t))
OT__AT_TWIN(ot_tensor *, ot_load,
        (ot_backend *be, const char *path, const char *file, int line),
        (be, path))
OT__AT_TWIN(int, ot_savez,
        (const char *path, int n, const char *const names[], const ot_tensor *const tensors[],
         const char *file, int line),
        (path, n, names, tensors))
OT__AT_TWIN(int, ot_savez_compressed,
        (const char *path, int n, const char *const names[], const ot_tensor *const tensors[],
         const char *file, int line),
        (path, n, names, tensors))
OT__AT_TWIN(int, ot_loadz,
        (ot_backend *be, const char *path, int n, const char *const names[], ot_tensor *out[],
         const char *file, int line),
        (be, path, n, names, out))
OT__AT_TWIN(ot_autodiff *, ot_autodiff_new,
        (ot_node *tree, ot_node *next_error, const char *file, int line),
        (tree, next_error))
OT__AT_TWIN(ot_node *, ot_autodiff_grad,
        (ot_autodiff *ad, ot_tensor *wrt, const char *file, int line),
        (ad, wrt))
OT__AT_TWIN(int, ot_autodiff_backprop,
        (ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_tensor *const grads[],
         const char *file, int line),
        (ad, n, wrt, grads))
OT__AT_TWIN(ot_tensor *, ot_autodiff_grad_tensor,
        (ot_autodiff *ad, ot_tensor *wrt, const char *file, int line),
        (ad, wrt))
OT__AT_TWIN(int, ot_autodiff_grad_host,
        (ot_autodiff *ad, ot_tensor *wrt, void *host, const char *file, int line),
        (ad, wrt, host))
