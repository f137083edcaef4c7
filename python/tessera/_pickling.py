"""Tensors pickle (as torch's do), so they cross process boundaries: DataLoader workers,
multiprocessing queues, copy.deepcopy. A tensor travels as a numpy array (bfloat16 as float32,
which holds every bfloat16 value exactly) with its dtype, device and requires_grad."""
import copyreg

from . import _C


def _rebuild_tensor(array, dtype, device, requires_grad):
    t = _C.from_numpy(array).to(dtype)
    if str(device) != "cpu":
        t = t.to(device)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _reduce_tensor(t):
    data = t.detach().to("cpu")
    if data.dtype == _C.bfloat16:
        data = data.float()
    # A copy: numpy() shares the tensor's memory, and copy.deepcopy rebuilds from this very array.
    return _rebuild_tensor, (data.contiguous().numpy().copy(), t.dtype, str(t.device), t.requires_grad)


copyreg.pickle(_C.Tensor, _reduce_tensor)
