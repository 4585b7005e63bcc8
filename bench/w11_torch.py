#!/usr/bin/python3
"""w11_torch.py - W11's model step in PyTorch, for the bench's W11 row.

One training step of nn.LSTM(128, 128) on a sequence of T = 20 steps, batch
32, f32, on one thread: forward, the loss 0.5/B * sum over steps of
|h_t - y_t|^2 (bench/w_lstm.c's), backward through time, plain SGD at
lr 1, as a PyTorch user writes it. Prints the median milliseconds per
step on stdout and nothing else; exits 3 when torch cannot be imported, so
that bench/w_lstm.c can leave a note instead.

    /usr/bin/python3 bench/w11_torch.py [SEED [RUNS]]
"""
import statistics
import sys
import time

T, B, I, H = 20, 32, 128, 128
LR = 1.0


def main():
    try:
        import torch
    except ImportError:
        sys.exit(3)
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    torch.set_num_threads(1)
    torch.manual_seed(seed % (1 << 63))
    lstm = torch.nn.LSTM(I, H)
    opt = torch.optim.SGD(lstm.parameters(), lr=LR)
    x = torch.rand(T, B, I) * 2 - 1
    y = torch.rand(T, B, H) * 2 - 1

    def step():
        opt.zero_grad(set_to_none=True)
        out, _ = lstm(x)
        loss = 0.5 / B * ((out - y) ** 2).sum()
        loss.backward()
        opt.step()

    times = []
    for k in range(runs + 3):   # three warm-up steps first
        t0 = time.perf_counter()
        step()
        if k >= 3:
            times.append(time.perf_counter() - t0)
    print("%.4f" % (1e3 * statistics.median(times)))


if __name__ == "__main__":
    main()
