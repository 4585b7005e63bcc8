#!/usr/bin/python3
"""emb_torch.py - the PyTorch side of bench/w_emb.c's W17 rows.

Each argument after RUNS, IDS and DIM is a table, "V,R": one training
step of an embedding table (V x DIM, f32) looked up at IDS ids uniform in
[0, R) (torch.randint), the rows' gradient dy given: y = emb(ids),
y.backward(dy), SGD's step (lr 1e-4), the gradient zeroed, for
nn.Embedding(sparse=True) (a sparse gradient: the step touches the rows
looked up) and the default dense one (a V x DIM gradient), one thread.
Prints one line per table: the median milliseconds of RUNS steps after one
warm-up, sparse then dense; exits 3 when torch cannot be imported, so that
w_emb.c can say so.

    /usr/bin/python3 bench/emb_torch.py RUNS IDS DIM V,R...
"""
import statistics
import sys
import time

from torch_env import import_torch


def step_ms(torch, rows, reach, n, dim, runs, sparse):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(rows, dim, sparse=sparse)
    opt = torch.optim.SGD(emb.parameters(), lr=1e-4)
    ids = torch.randint(0, reach, (n,))
    dy = torch.rand(n, dim) * 2 - 1
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        emb(ids).backward(dy)
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    torch = import_torch()
    runs, n, dim = (int(a) for a in sys.argv[1:4])
    for spec in sys.argv[4:]:
        rows, reach = map(int, spec.split(','))
        sparse = step_ms(torch, rows, reach, n, dim, runs, True)
        dense = step_ms(torch, rows, reach, n, dim, runs, False)
        print('%.4f %.4f' % (sparse, dense), flush=True)


if __name__ == '__main__':
    main()
