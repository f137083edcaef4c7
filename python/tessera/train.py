"""The library training step (C++ train::Trainer): accumulation, autocast, loss scaling,
clipping, optimizer and scheduler step.

    trainer = tessera.train.Trainer(model, lambda x, y: F.cross_entropy(model(x), y), opt,
                                    grad_accum=2, autocast_dtype=tessera.bfloat16)
    result = trainer.step(lambda: (x, y))   # {"loss": ..., "grad_norm": ..., "lr": ...}
"""
from ._C.train import Trainer  # noqa: F401
