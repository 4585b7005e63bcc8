"""_autodiff.py - neon's Autodiff over ot_autodiff: gradients of an op-tree
as op-trees, as new tensors, as NumPy arrays, or written into buffers."""
import ctypes

from ._core import OpTreeNode, Tensor, node_of
from ._lib import lib, check, raise_error


class Autodiff:
    """Autodiff(op_tree, be, next_error=None): reverse-mode gradients of
    op_tree; next_error None means ones of the tree's shape."""

    def __init__(self, op_tree, be=None, next_error=None):
        self.op_tree, self.be, self.next_error = op_tree, be, next_error
        self._ad = lib.ot_autodiff_new(node_of(op_tree),
                                       None if next_error is None else node_of(next_error))
        if not self._ad:
            raise_error()

    def __del__(self):
        try:
            lib.ot_autodiff_free(self._ad)
        except Exception:
            pass

    def get_grad_op_tree(self, tensors):
        """The gradient trees w.r.t. each tensor (computing nothing)."""
        out = []
        for t in tensors:
            p = lib.ot_autodiff_grad(self._ad, t._t)
            if not p:
                raise_error()
            # The tree belongs to the current C pool: take a reference now.
            out.append(OpTreeNode(lib.ot_retain_at(p, None, 0), retained=True))
        return out

    def get_grad_tensor(self, tensors):
        """The gradients as new tensors."""
        return [Tensor._own(lib.ot_autodiff_grad_tensor(self._ad, t._t)) for t in tensors]

    def get_grad_asnumpyarray(self, tensors):
        """The gradients as NumPy arrays."""
        return [g.get() for g in self.get_grad_tensor(tensors)]

    def back_prop_grad(self, tensors, grad_buffers):
        """grad_buffers[i][:] = the gradient w.r.t. tensors[i], in one evaluation."""
        n = len(tensors)
        wrt = (ctypes.c_void_p * n)(*[t._t for t in tensors])
        bufs = (ctypes.c_void_p * n)(*[g._t for g in grad_buffers])
        check(lib.ot_autodiff_backprop(self._ad, n, wrt, bufs))
