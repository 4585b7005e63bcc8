# neon_backend_page.py - the Python examples of neon's backend guide
# ("neon backend", ../shared/seeds/003_74e06172fa89b0c3.txt in the project's
# seed documents: Nervana's neon documentation, docs/backends.html), in the
# page's order, as the page writes them. The only edits, each marked
# "# edit:": the import lines (neon.backends -> optree), the backend names
# 'nervanagpu' -> 'cpu', and the page's two Python 2 print statements
# written as calls. tests/py/run_tests.py runs each section (a "# ---"
# line starts one), gives the fragments of "Op-Tree Creation" the tensors
# and nodes their text takes for granted, and checks what they print and
# compute against what the page states.

# --- directly calling the backend
from optree import gen_backend  # edit: from neon.backends import gen_backend
be = gen_backend(backend='mkl')

from optree import Tensor  # edit: from neon.backends.backend import Tensor
myTensor = be.zeros((100, 100))

import numpy as np
# initialize a numpy array of zeros
array_of_zeros = np.zeros((100, 100))
# 1. array of zeros with the shape like the input array
myTensor = be.zeros_like(array_of_zeros)
# 2. initialize a tensor with same values as the input array
myTensor = be.array(array_of_zeros)
# 3. initialize an empty Tensor, then set elements to zero
myTensor = be.empty((100, 100))
myTensor[:] = 0
# 4. initialize an empty Tensor, then fill the elements to zero
myTensor = be.empty((100, 100))
myTensor.fill(0.0)
# 5. deep copy another Tensor
yourTensor = be.zeros((100, 100))
myTensor = yourTensor.copy(yourTensor)

myNumpyArray = myTensor.get()

f = 1/(1+be.exp(-1*myTensor))

fval = be.empty((100, 100)) # allocate space for output
fval[:] = f # execute the op-tree

# --- op-trees: a minimal example
from optree import gen_backend  # edit: from neon.backends import gen_backend
be = gen_backend('cpu')
x0 = be.ones((2, 2), name='x0')
x1 = be.ones((2, 2), name='x1')
f = x0 + x1               # op-tree creation
f_val = be.empty((2, 2))  # output buffer allocation
f_val[:] = f              # execution
print(f)                  # print the op-tree tuple
print(f_val.get())        # get the device tensor

# --- op-tree creation: operator overload
# f are OpTreeNode in the following example
f = x1 + x2 # Tensor + Tensor
f = x1 + t1 # Tensor + OpTreeNode
f = t1 + t2 # OpTreeNode + OpTreeNode

# --- op-tree creation: backend functions
f = ng.mean(x) # f is an optree

# --- op-tree creation: OpTreeNode.build()
OpTreeNode.build("add", a, b) # binary ops
OpTreeNode.build("sqrt", a, None, out=out_buffer) # unary ops

# --- op-tree creation: OpTreeNode's init function
OpTreeNode(op_dict, a, b)

# --- op-tree execution
f_val[:] = f

OpTreeNode.build("assign", f_val, f)

OpTreeNode.build("assign", f_val, f).execute()

# --- autodiff: example 0
from optree import gen_backend, Autodiff  # edit: from neon.backends import gen_backend, Autodiff
import numpy as np
be = gen_backend('cpu')  # edit: gen_backend('nervanagpu')
x0 = be.array(np.ones((3, 3)) * 1., name='x0')
x1 = be.array(np.ones((3, 3)) * 2., name='x1')
print('# example 0')  # edit: print '# example 0'
f = x0 * x0 + x0 * x1

ad = Autodiff(op_tree=f, be=be, next_error=None)
print(ad.get_grad_asnumpyarray([x0, x1])) # result is [2 * x0 + x1, x0]  # edit: print ...

# --- autodiff: a forward-propagation op-tree
# fprop optree
# - different from theano, we need explicit tensors to build the optree
f = be.tanh((x0 * x1) + (x0 / x1))
# Create Autodiff object
# - the object will be memoized and reused, so it's safe to call Autodiff on
#   the same optree multiple times
# - when next_error is None, it will be set to be.ones() of the output shape,
#   in neon, next_error is set to the next layer's back prop error
ad = Autodiff(op_tree=f, be=be, next_error=None)

# print gradient optree
# - in the printed result, the unnamed tensor is ones() of the output shape
[x0_grad_op_tree, x1_grad_op_tree] = ad.get_grad_op_tree([x0, x1])
print(OpTreeNode.pp(x0_grad_op_tree))
print(OpTreeNode.pp(x1_grad_op_tree))

# --- autodiff: a dynamically generated op-tree
x0 = be.array(np.random.randint(10, size=(3, 3)), name='x0')
def my_loop(x):
    y = be.zeros(OpTreeNode.shape(x), name='tensor-zero')
    for _ in range(x.get()[0, 0]):
        y = y + x
    return y
def my_condition(x):
    if x.get()[0, 0] % 2 == 0:
        return be.sig(x)
    else:
        return be.tanh(x)
f = my_loop(x0) + my_condition(x0)
ad = Autodiff(f, be)
x0_grad_tree = ad.get_grad_op_tree([x0])[0]
print(x0.get())
print(OpTreeNode.pp(f))
print(OpTreeNode.pp(x0_grad_tree))
