"""torch.utils counterparts: checkpoint."""
from . import checkpoint  # noqa: F401
