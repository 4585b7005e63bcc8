"""_autodiff.py - neon's Autodiff over ot_autodiff: gradients of an op-tree
as op-trees, as new tensors, as NumPy arrays, or written into buffers."""
import ctypes

from ._core import OpTreeNode, Tensor, node_of
from ._lib import lib, check, raise_error, raise_pending, site


def _tensors(tensors, what="wrt"):
    """The C tensors of a list of tensors (TypeError for a node or a
    number: a gradient is taken with respect to a tensor)."""
    out = []
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError("optree: autodiff: %s %r is not a tensor" % (what, t))
        out.append(t._t)
    return out


class Autodiff:
    """Autodiff(op_tree, be, next_error=None): reverse-mode gradients of
    op_tree; next_error None means ones of the tree's shape."""

    def __init__(self, op_tree, be=None, next_error=None):
        self.op_tree, self.be, self.next_error = op_tree, be, next_error
        self._ad = lib.ot_autodiff_new(node_of(op_tree),
                                       None if next_error is None else node_of(next_error))
        if not self._ad:
            raise_error(at=site())

    def __del__(self):
        try:
            lib.ot_autodiff_free(self._ad)
        except Exception:
            pass

    def get_grad_op_tree(self, tensors):
        """The gradient trees w.r.t. each tensor (computing nothing)."""
        out = []
        for t in _tensors(tensors):
            p = lib.ot_autodiff_grad(self._ad, t)
            if not p:
                raise_error(at=site())
            # The tree belongs to the current C pool: take a reference now.
            out.append(OpTreeNode(lib.ot_retain_at(p, None, 0), retained=True))
        return out

    def get_grad_tensor(self, tensors):
        """The gradients as new tensors."""
        at = site()
        out = []
        for t in _tensors(tensors):
            out.append(Tensor._own(lib.ot_autodiff_grad_tensor(self._ad, t), at))
            raise_pending()         # a registered op's kernel that raised
        return out

    def get_grad_asnumpyarray(self, tensors):
        """The gradients as NumPy arrays."""
        return [g.get() for g in self.get_grad_tensor(tensors)]

    def back_prop_grad(self, tensors, grad_buffers):
        """grad_buffers[i][:] = the gradient w.r.t. tensors[i], in one evaluation."""
        wrt, bufs = _tensors(tensors), _tensors(grad_buffers, "grad buffer")
        n = len(wrt)
        if len(bufs) != n:
            raise ValueError("optree: back_prop_grad: %d tensors and %d buffers" % (n, len(bufs)))
        check(lib.ot_autodiff_backprop(self._ad, n, (ctypes.c_void_p * max(n, 1))(*wrt),
                                       (ctypes.c_void_p * max(n, 1))(*bufs)), site())
        raise_pending()
