"""A demo training run on CPU: a small least-squares fit by gradient descent with numpy, one
line of progress per epoch, then exit 0. EPOCHS (default 20) and EPOCH_SECONDS (default 1)
set its length."""

import os
import time

import numpy as np

epochs = int(os.environ.get("EPOCHS", "20"))
pause = float(os.environ.get("EPOCH_SECONDS", "1"))
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 16))
w_true = rng.normal(size=16)
y = x @ w_true + rng.normal(scale=0.1, size=2048)
w = np.zeros(16)
for epoch in range(1, epochs + 1):
    grad = x.T @ (x @ w - y) / len(y)
    w -= 0.1 * grad
    loss = float(np.mean((x @ w - y) ** 2))
    print(f"epoch {epoch}/{epochs} loss {loss:.4f}", flush=True)
    time.sleep(pause)
print("done", flush=True)
