#!/usr/bin/python3
"""attn_torch.py - the PyTorch side of bench/w_attn.c's W15 rows.

Each argument is one row, "B,H,S,D": the plain attention a user writes in
PyTorch 1.13 (no fused kernel there), softmax(q @ k^T * s + mask) @ v with
a causal additive mask (-inf above the diagonal, built once outside the
timing), forward and autograd backward (o.backward(do)), f32, one thread
(torch.set_num_threads(1)). Prints one line per row: the median
milliseconds of RUNS calls after one warm-up, and the peak extra memory of
the first call in MiB (VmHWM after resetting it through
/proc/self/clear_refs, less VmRSS before); exits 3 when torch cannot be
imported, so that w_attn.c can say so.

    /usr/bin/python3 bench/attn_torch.py RUNS ROW...
"""
import math
import statistics
import sys
import time

from torch_env import import_torch


def status_kib(key):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def main():
    torch = import_torch()
    torch.manual_seed(0)
    runs = int(sys.argv[1])
    for spec in sys.argv[2:]:
        b, h, s, d = map(int, spec.split(','))
        q, k, v = (torch.rand(b, h, s, d) * 2 - 1 for _ in range(3))
        for t in (q, k, v):
            t.requires_grad_(True)
        do = torch.rand(b, h, s, d) * 2 - 1
        mask = torch.full((s, s), float('-inf')).triu(1)
        scale = 1 / math.sqrt(d)

        def step():
            o = torch.softmax(q @ k.transpose(-1, -2) * scale + mask, dim=-1) @ v
            o.backward(do)
            for t in (q, k, v):
                t.grad = None

        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        rss = status_kib('VmRSS:')
        times = []
        for i in range(runs + 1):
            t0 = time.perf_counter()
            step()
            if i == 0:
                peak = status_kib('VmHWM:') - rss
            else:
                times.append(time.perf_counter() - t0)
        print('%.4f %.1f' % (1e3 * statistics.median(times), peak / 1024), flush=True)


if __name__ == '__main__':
    main()
