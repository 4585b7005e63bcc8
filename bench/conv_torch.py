#!/usr/bin/python3
"""conv_torch.py - the PyTorch side of bench/w_conv.c's convolution rows.

Each argument is one row, "N,C,H,W,O,K,STRIDE,PAD,GROUPS,MODE" (MODE f:
the forward conv2d; e: relu(conv2d with a bias); b: its backward, the input and weight gradients of
aten's convolution_backward, as autograd calls it), f32, on one thread
(torch.set_num_threads(1)); oneDNN runs it where PyTorch was built with
it. Prints one line per row, the median milliseconds of RUNS calls after
two warm-ups; exits 3 when torch cannot be imported, so that w_conv.c
can say so instead.

    /usr/bin/python3 bench/conv_torch.py RUNS ROW...
"""
import statistics
import sys
import time

from torch_env import import_torch


def row_fn(torch, spec):
    n, c, h, w, o, k, s, p, g, mode = spec.split(",")
    n, c, h, w, o, k, s, p, g = map(int, (n, c, h, w, o, k, s, p, g))
    x = torch.rand(n, c, h, w) * 2 - 1
    wt = torch.rand(o, c // g, k, k) * 2 - 1
    if mode == "f":
        return lambda: torch.nn.functional.conv2d(x, wt, None, s, p, 1, g)
    if mode == "e":
        b = torch.rand(o) * 2 - 1
        return lambda: torch.relu(torch.nn.functional.conv2d(x, wt, b, s, p, 1, g))
    y = torch.nn.functional.conv2d(x, wt, None, s, p, 1, g)
    gy = torch.rand_like(y)
    return lambda: torch.ops.aten.convolution_backward(
        gy, x, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], g,
        [True, True, False])


def main():
    torch = import_torch()
    torch.manual_seed(0)
    runs = int(sys.argv[1])
    with torch.no_grad():
        for spec in sys.argv[2:]:
            fn = row_fn(torch, spec)
            times = []
            for k in range(runs + 2):
                t0 = time.perf_counter()
                fn()
                if k >= 2:
                    times.append(time.perf_counter() - t0)
            print("%.4f" % (1e3 * statistics.median(times)), flush=True)


if __name__ == "__main__":
    main()
