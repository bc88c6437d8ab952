#!/usr/bin/env python3
"""A tiny, real training job for vastrun's checkpoint contract (docs/train.md).

It fits a linear regression y = Xw + b on data generated from the seed, by
full-batch gradient descent. Every VASTRUN_CHECKPOINT_EVERY steps it writes
checkpoint STEP to $VASTRUN_CHECKPOINT_DIR/STEP/ and marks it complete. When
VASTRUN_RESUME_STEP is set it continues from the restored checkpoint and
writes the step it resumed from to $VASTRUN_RESUME_PROOF. Because the data
come from the seed and the descent is deterministic, a resumed run ends with
exactly the same loss as an uninterrupted one.
"""
import json
import os
import random
import time

seed = int(os.environ.get("VASTRUN_SEED", "1"))
steps = int(os.environ.get("TRAIN_STEPS", "600"))
every = int(os.environ.get("VASTRUN_CHECKPOINT_EVERY", "100"))
ckpt_dir = os.environ.get("VASTRUN_CHECKPOINT_DIR", "checkpoints")
out_dir = os.environ.get("VASTRUN_OUTPUT_DIR", "outputs")
delay = float(os.environ.get("TRAIN_STEP_DELAY", "0"))
lr = 0.05

# The dataset: generated from the seed (its version is the generator's).
rng = random.Random(seed)
n, d = 256, 8
true_w = [rng.uniform(-2, 2) for _ in range(d)]
X = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(n)]
y = [sum(wi * xi for wi, xi in zip(true_w, x)) + 0.5 + rng.gauss(0, 0.1) for x in X]


def loss(w, b):
    return sum((sum(wi * xi for wi, xi in zip(w, x)) + b - t) ** 2 for x, t in zip(X, y)) / n


w, b, start = [0.0] * d, 0.0, 0
if os.environ.get("VASTRUN_RESUME_STEP"):
    with open(os.path.join(os.environ["VASTRUN_RESUME_DIR"], "state.json")) as f:
        state = json.load(f)
    w, b, start = state["w"], state["b"], state["step"]
    with open(os.environ["VASTRUN_RESUME_PROOF"], "w") as f:
        f.write(str(start))
    print(f"resumed from step {start}", flush=True)

metrics = open(os.environ["VASTRUN_METRICS"], "a") if os.environ.get("VASTRUN_METRICS") else None
for step in range(start + 1, steps + 1):
    gw, gb = [0.0] * d, 0.0
    for x, t in zip(X, y):
        err = sum(wi * xi for wi, xi in zip(w, x)) + b - t
        for i in range(d):
            gw[i] += 2 * err * x[i] / n
        gb += 2 * err / n
    w = [wi - lr * g for wi, g in zip(w, gw)]
    b -= lr * gb
    if step % every == 0:
        path = os.path.join(ckpt_dir, str(step))
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump({"step": step, "w": w, "b": b}, f)  # repr floats: exact round trip
        open(os.path.join(path, ".complete"), "w").close()
        print(f"step {step} loss {loss(w, b):.12f}", flush=True)
    if metrics and step % 10 == 0:  # JSON lines vastrun collects (docs/train.md)
        metrics.write(json.dumps({"step": step, "loss": loss(w, b), "total_steps": steps}) + "\n")
        metrics.flush()
    if delay:
        time.sleep(delay)  # stands in for a heavier step, so a run can be interrupted

final = loss(w, b)
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "model.json"), "w") as f:
    json.dump({"w": w, "b": b, "steps": steps, "seed": seed}, f)
result = os.environ.get("VASTRUN_RESULT")
if result:
    with open(result, "w") as f:
        json.dump({"final_loss": final, "steps": steps, "resumed_from": start}, f)
print(f"final loss {final!r}", flush=True)
