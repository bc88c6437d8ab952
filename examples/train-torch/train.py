#!/usr/bin/env python3
"""A small character-level language model in PyTorch, written for vastrun's
examples. It does what most training scripts do, and nothing for vastrun:

  * reads text files (--data), trains a small MLP over the previous
    --context characters to predict the next one;
  * every --save-every iterations overwrites ONE checkpoint file in place
    (out/ckpt.pt, with torch.save) and prints a JSON line {"iter": N, ...};
  * at start, resumes from out/ckpt.pt when the file exists (model, optimizer,
    RNG state and iteration), so a resumed run continues the same stream.

vastrun needs no wrapper for it: train.checkpoint_file: out/ckpt.pt snapshots
each completed save, train.step_from: json:iter names its step, and restore
puts ckpt.pt back where this script looks. It flushes nothing (vastrun runs it
with PYTHONUNBUFFERED=1) and writes no resume proof: the agent sees it read
the restored ckpt.pt and go on from there. The one vastrun variable it reads
is optional: VASTRUN_RESULT (final metrics as JSON).
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--data", nargs="+", default=["input.txt"], help="text files to learn from")
p.add_argument("--out", default="out")
p.add_argument("--iters", type=int, default=600)
p.add_argument("--save-every", type=int, default=100)
p.add_argument("--context", type=int, default=8)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--hidden", type=int, default=128)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step (stands in for a bigger model)")
args = p.parse_args()

torch.set_num_threads(1)  # the same arithmetic on any machine
text = "".join(open(d, encoding="utf-8", errors="replace").read() for d in args.data)
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
data = torch.tensor([index[c] for c in text], dtype=torch.long)
split = int(len(data) * 0.9)
train_data, val_data = data[:split], data[split:]


class CharMLP(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.net = nn.Sequential(nn.Linear(16 * args.context, hidden), nn.Tanh(), nn.Linear(hidden, vocab))

    def forward(self, x):
        return self.net(self.embed(x).flatten(1))


def windows(source, ix):
    x = torch.stack([source[i:i + args.context] for i in ix])
    return x, source[ix + args.context]


def batch(source, gen):
    return windows(source, torch.randint(len(source) - args.context - 1, (args.batch,), generator=gen))


@torch.no_grad()
def val_loss(model):
    """Loss over every position of the validation text (deterministic)."""
    x, y = windows(val_data, torch.arange(len(val_data) - args.context - 1))
    return nn.functional.cross_entropy(model(x), y).item()


torch.manual_seed(args.seed)
model = CharMLP(len(chars), args.hidden)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
gen = torch.Generator().manual_seed(args.seed)
ckpt_path = os.path.join(args.out, "ckpt.pt")
start = 0
if os.path.exists(ckpt_path):
    ck = torch.load(ckpt_path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    gen.set_state(ck["generator"])
    start = ck["iter"]
    print(f"resuming from {ckpt_path} at iteration {start}")

t0 = time.time()
loss = None
for it in range(start + 1, args.iters + 1):
    x, y = batch(train_data, gen)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.step_delay:
        time.sleep(args.step_delay)
    if it % 50 == 0:
        print(f"iteration {it} train loss {loss.item():.4f} ({time.time() - t0:.1f}s)")
    if it % args.save_every == 0 or it == args.iters:
        os.makedirs(args.out, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "generator": gen.get_state(), "iter": it}, ckpt_path)
        print(json.dumps({"iter": it, "val_loss": round(val_loss(model), 6), "saved": ckpt_path}))

final = val_loss(model)
print(f"final val loss {final:.6f}")
result = os.environ.get("VASTRUN_RESULT")
if result:
    with open(result, "w") as f:
        json.dump({"final_val_loss": final, "iters": args.iters, "resumed_from": start}, f)
