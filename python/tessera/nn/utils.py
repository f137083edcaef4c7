"""torch.nn.utils' gradient clipping, implemented in tessera.optim."""
from ..optim import clip_grad_norm_, grad_norm  # noqa: F401
