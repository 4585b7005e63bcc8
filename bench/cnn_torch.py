#!/usr/bin/python3
"""cnn_torch.py - W14's model step in PyTorch, for the bench's W14 row
(a reference only, never a dependency of the library).

One training step of examples/cnn.c's Fashion-MNIST network on a batch of
64 28x28 images, f32, one thread: conv 32 3x3 same - BatchNorm2d - ReLU -
MaxPool2d(2) - conv 64 3x3 same - BatchNorm2d - ReLU - MaxPool2d(2) -
linear 3136x256 - ReLU - linear 256x10, softmax cross-entropy, backward,
Adam (lr 1e-3), as a PyTorch user writes it (model.train()). It serves
bench/w_cnn.c: prints "ready" once built, then runs one step per line read
on stdin, answering each with its loss, until stdin closes (the bench times
the steps between its own, in the same process run); exits 3 when torch
cannot be imported, so that the bench can leave a note instead.
OPENBLAS_CORETYPE is SkylakeX unless the environment sets it, as in
mlp_torch.py (torch's linear layers run on the system OpenBLAS).

    /usr/bin/python3 bench/cnn_torch.py [SEED [WIDTH]]
"""
import sys

from torch_env import import_torch

B, SIDE, CLASSES, HIDDEN = 64, 28, 10, 256


def main():
    torch = import_torch()
    nn = torch.nn
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    torch.manual_seed(seed % (1 << 63))
    net = nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(2 * width * (SIDE // 4) ** 2, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.rand(B, 1, SIDE, SIDE)
    y = torch.randint(0, CLASSES, (B,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    print("ready", flush=True)
    for _ in sys.stdin:
        print("%.6f" % step(), flush=True)


if __name__ == "__main__":
    main()
