"""Trains a small MLP classifier on two interleaved spirals with tessera.nn and tessera.optim,
then hands its predictions to PyTorch through DLPack (zero-copy) to score them.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/mlp_tessera.py

Exits non-zero when the model does not learn the task (accuracy below 90%).
"""
import math
import sys

import tessera
import tessera.nn.functional as F


def spirals(n_per_class, seed=0):
    """Points on two interleaved spirals with a little noise, labelled 0 and 1."""
    gen = tessera.Generator(seed)
    t = tessera.rand(n_per_class, 1, generator=gen) * 3 * math.pi + 0.5
    arms = []
    for label, phase in ((0, 0.0), (1, math.pi)):
        xy = tessera.cat([t * tessera.cos(t + phase), t * tessera.sin(t + phase)], 1) / 10
        xy = xy + tessera.randn(n_per_class, 2, generator=gen) * 0.02
        arms.append((xy, tessera.full((n_per_class,), label)))
    return tessera.cat([a[0] for a in arms]), tessera.cat([a[1] for a in arms])


class MLP(tessera.nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = tessera.nn.Sequential(
            tessera.nn.Linear(2, hidden),
            tessera.nn.GELU(),
            tessera.nn.Linear(hidden, hidden),
            tessera.nn.GELU(),
        )
        self.head = tessera.nn.Linear(hidden, 2)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    tessera.manual_seed(0)
    x, y = spirals(200)
    loader = tessera.data.DataLoader(tessera.data.TensorDataset(x, y), batch_size=100, shuffle=True)
    model = MLP()
    opt = tessera.optim.AdamW(model.parameters(), lr=2e-2, weight_decay=1e-4)
    sched = tessera.optim.lr_scheduler.WarmupCosineLR(opt, warmup_steps=20, max_steps=240)

    for epoch in range(60):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            tessera.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
        if epoch % 10 == 0 or epoch == 59:
            print(f"epoch {epoch:3d}  loss {loss:.4f}  lr {sched.get_last_lr()[0]:.5f}")

    with tessera.no_grad():
        logits = model(x)
    # torch sees the same memory: no copy is made in either direction.
    import torch

    torch_logits = torch.from_dlpack(logits)
    torch_labels = torch.from_dlpack(y)
    accuracy = (torch_logits.argmax(1) == torch_labels).float().mean().item()
    print(f"accuracy (scored by torch {torch.__version__}): {accuracy:.3f}")
    return 0 if accuracy >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
