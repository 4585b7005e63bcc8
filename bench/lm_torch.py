#!/usr/bin/python3
"""lm_torch.py - examples/lm.c's language model in PyTorch (a reference only,
never a dependency of the library).

The same character-level decoder as examples/lm.c, written as a PyTorch user
writes it: token and learned position embeddings, 2 pre-norm blocks of
causal 4-head self-attention (softmax(q k^T / sqrt(dh) + mask) v, no biases
on q, k, v, o) and a ReLU MLP (128 -> 512 -> 128, with biases), a final
layer norm and a linear layer to the vocabulary; cross-entropy, Adam (lr
3e-3, 5% linear warm-up, then a cosine to 0). The same text (every plain
file of /usr/share/games/fortunes in name order, bytes, the vocabulary in
order of first appearance, the last tenth held out) and the same batches:
the window offsets come from the example's 64-bit LCG, so both models see
the same characters in the same order. With --init FILE (an .npz the example
wrote: `build/examples/lm STEPS DIR FILE`) the model starts from the
example's own initial numbers; without, from the same distributions.

    /usr/bin/python3 bench/lm_torch.py [STEPS [DIR]]     train; print the
        validation loss (bits/char) at the example's ten points
    /usr/bin/python3 bench/lm_torch.py [--init FILE] --compare BITS [STEPS [DIR]]
        train, then exit 1 unless the final validation loss is within 0.05
        bits/char of BITS (the example's)
    /usr/bin/python3 bench/lm_torch.py --serve [VOCAB]
        for the bench's W16 row: prints "ready", then runs one training step
        on a fixed batch of random characters (VOCAB of them, default 114:
        the demo's) per line read on stdin, answering with its loss

One thread, OpenBLAS's SkylakeX core unless the environment sets another, and
exit status 3 without torch (torch_env.py).
"""
import math
import os
import sys

from torch_env import import_torch

B, T, D, H, L, F = 32, 128, 128, 4, 2, 512
LR = 3e-3
MASK64 = (1 << 64) - 1


def load_text(path):
    names = sorted(n for n in os.listdir(path)
                   if not n.startswith(".") and not n.endswith(".dat")
                   and not n.endswith(".u8") and n != "off")
    data = bytearray()
    for n in names:
        full = os.path.join(path, n)
        if os.path.isfile(full):
            with open(full, "rb") as f:
                data += f.read()
    order, ids = {}, bytearray(len(data))
    for i, b in enumerate(data):
        if b not in order:
            order[b] = len(order)
        ids[i] = order[b]
    return bytes(ids), len(order)


class Lcg:
    """examples/lm.c's generator: s = s*a + c mod 2^64, the top 31 bits."""

    def __init__(self, seed):
        self.s = seed

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) & MASK64
        return self.s >> 33


def batch(torch, ids, lo, hi, gen):
    rows_x, rows_y = [], []
    for _ in range(B):
        at = lo + gen.next() % (hi - lo - T - 1)
        rows_x.append(ids[at:at + T])
        rows_y.append(ids[at + 1:at + T + 1])
    x = torch.tensor([list(r) for r in rows_x], dtype=torch.long)
    y = torch.tensor([list(r) for r in rows_y], dtype=torch.long)
    return x, y


def build(torch, vocab):
    nn = torch.nn

    def uniform(shape, bound):
        return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

    def linear(i, o):
        return uniform((i, o), 1 / math.sqrt(i))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.wq, self.wk, self.wv, self.wo = (linear(D, D) for _ in range(4))
            self.w1, self.w2 = linear(D, F), linear(F, D)
            self.b1, self.b2 = nn.Parameter(torch.zeros(F)), nn.Parameter(torch.zeros(D))

        def forward(self, h, mask):
            a, n = self.ln1(h), h.shape[0]
            q, k, v = ((a @ w).view(n, T, H, D // H).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            s = q @ k.transpose(-1, -2) / math.sqrt(D // H) + mask
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(n, T, D)
            h = h + o @ self.wo
            return h + torch.relu(self.ln2(h) @ self.w1 + self.b1) @ self.w2 + self.b2

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = uniform((vocab, D), 0.05), uniform((T, D), 0.05)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(D)
            self.wout, self.bout = linear(D, vocab), nn.Parameter(torch.zeros(vocab))
            self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

        def forward(self, x):
            h = self.tok[x] + self.pos
            for blk in self.blocks:
                h = blk(h, self.mask)
            return self.lnf(h) @ self.wout + self.bout

    return Model()


def schedule(step, steps):
    warm = max(steps // 20, 1)
    if step < warm:
        return (step + 1.0) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / (steps - warm)))


def validate(torch, model, ids, ntrain):
    gen, total = Lcg(12345), 0.0
    with torch.no_grad():
        for _ in range(16):
            x, y = batch(torch, ids, ntrain, len(ids), gen)
            logits = model(x)
            total += torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                       y.view(-1)).item()
    return total / 16 / math.log(2)


def load_init(torch, model, path):
    """The example's initial parameters, by its variable names."""
    import numpy
    arrays = numpy.load(path)
    named = {"tok": model.tok, "pos": model.pos, "lnfw": model.lnf.weight,
             "lnfb": model.lnf.bias, "wout": model.wout, "bout": model.bout}
    for i, b in enumerate(model.blocks):
        for key, p in (("ln1w", b.ln1.weight), ("ln1b", b.ln1.bias), ("wq", b.wq),
                       ("wk", b.wk), ("wv", b.wv), ("wo", b.wo), ("ln2w", b.ln2.weight),
                       ("ln2b", b.ln2.bias), ("w1", b.w1), ("b1", b.b1), ("w2", b.w2),
                       ("b2", b.b2)):
            named["%s%d" % (key, i)] = p
    if sorted(named) != sorted(arrays.files):
        sys.exit("lm_torch: %s holds %s, not this model's parameters" % (path, arrays.files))
    with torch.no_grad():
        for name, p in named.items():
            p.copy_(torch.from_numpy(arrays[name]))


def train(torch, steps, path, init):
    ids, vocab = load_text(path)
    ntrain = len(ids) - len(ids) // 10
    torch.manual_seed(0)
    model = build(torch, vocab)
    if init:
        load_init(torch, model, init)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen, every, val = Lcg(1), max(steps // 10, 1), float("nan")
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = LR * schedule(s, steps)
        x, y = batch(torch, ids, 0, ntrain, gen)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (s + 1) % every == 0 or s + 1 == steps:
            val = validate(torch, model, ids, ntrain)
            print("step %4d: validation %.3f bits/char" % (s + 1, val), flush=True)
    return val


def serve(torch, vocab):
    torch.manual_seed(0)
    model = build(torch, vocab)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = torch.randint(0, vocab, (B, T)), torch.randint(0, vocab, (B, T))
    print("ready", flush=True)
    for _ in sys.stdin:
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("%.6f" % loss.item(), flush=True)


def main():
    torch = import_torch()
    args = sys.argv[1:]
    if args[:1] == ["--serve"]:
        serve(torch, int(args[1]) if len(args) > 1 else 114)
        return
    target, init = None, None
    if args[:1] == ["--init"]:
        init, args = args[1], args[2:]
    if args[:1] == ["--compare"]:
        target, args = float(args[1]), args[2:]
    steps = int(args[0]) if args else 600
    val = train(torch, steps, args[1] if len(args) > 1 else "/usr/share/games/fortunes", init)
    print("lm_torch: validation %.3f bits/char after %d steps" % (val, steps))
    if target is not None:
        ok = abs(val - target) <= 0.05
        print("lm_torch: optree's %.3f, difference %.3f: %s"
              % (target, val - target, "within 0.05" if ok else "NOT within 0.05"))
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
