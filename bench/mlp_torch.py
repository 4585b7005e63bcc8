#!/usr/bin/python3
"""mlp_torch.py - PyTorch's side of `make bench-mlp` (a reference only,
never a dependency of the library).

The model of bench/w_gemm.c's --mlp: 784-256-128-10 with ReLU, softmax
cross-entropy, Adam (lr 1e-3), batch 128 of the shuffled 60,000 Fashion-MNIST
training images (pixels / 255), on one thread (torch.set_num_threads(1)).
Prints one line per epoch with its wall-clock seconds.

OPENBLAS_CORETYPE is set to CORE (default SkylakeX) before torch is
imported unless the environment sets it (and OPENBLAS_NUM_THREADS to 1): Debian's torch runs its linear
layers on the system OpenBLAS, which does not know every CPU model, and the
comparison is with PyTorch at its best core, as a user tuning by hand sets it.

    /usr/bin/python3 bench/mlp_torch.py DIR [EPOCHS [CORE]]
"""
import os
import sys
import time

import numpy as np


def idx(path, skip):
    with open(path, 'rb') as f:
        return np.frombuffer(f.read()[skip:], dtype=np.uint8)


def main():
    d = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.environ.setdefault('OPENBLAS_CORETYPE', sys.argv[3] if len(sys.argv) > 3 else 'SkylakeX')
    # OpenBLAS's own threads are not torch's: one thread means both.
    os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x = torch.from_numpy(idx(os.path.join(d, 'train-images-idx3-ubyte'), 16)
                         .reshape(-1, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(idx(os.path.join(d, 'train-labels-idx1-ubyte'), 8).astype(np.int64))
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0] // 128 * 128
    print('torch %s, OPENBLAS_CORETYPE=%s, 1 thread' % (torch.__version__,
                                                       os.environ['OPENBLAS_CORETYPE']))
    for e in range(epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(x.shape[0])
        total = 0.0
        for i in range(0, n, 128):
            b = perm[i:i + 128]
            opt.zero_grad()
            loss = loss_fn(model(x[b]), y[b])
            loss.backward()
            opt.step()
            total += loss.item()
        print('torch epoch %d: %.3f s, loss %.4f' % (e + 1, time.perf_counter() - t0,
                                                    total / (n // 128)))


if __name__ == '__main__':
    main()
