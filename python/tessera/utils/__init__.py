"""torch.utils counterparts: checkpoint and data."""
from . import checkpoint, data  # noqa: F401
