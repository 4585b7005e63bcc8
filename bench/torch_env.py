"""torch_env.py - how the bench's PyTorch references start (cnn_torch.py,
lm_torch.py, conv_torch.py, attn_torch.py): OpenBLAS on its SkylakeX core
and one thread unless the environment says otherwise (torch's linear layers run on the system
OpenBLAS, which picks a narrow core on CPUs it does not know), torch on one
thread, and exit status 3 when torch cannot be imported, which the bench
reads as "no reference"."""
import os
import sys


def import_torch():
    os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import torch
    except ImportError:
        sys.exit(3)
    torch.set_num_threads(1)
    return torch
