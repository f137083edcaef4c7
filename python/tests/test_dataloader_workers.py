"""tessera.utils.data.DataLoader with worker processes for Python datasets, checked against
torch.utils.data.DataLoader on the same dataset: same batches in the same order, worker seeds,
errors carried with their traceback, a dead worker reported instead of a hang, and tensors that
pickle."""
import copy
import os
import pickle
import time

import numpy as np
import pytest

import tessera
from tessera.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

torch = pytest.importorskip("torch")


class Pairs(Dataset):
    """Example i: (a float vector, a dict with an int label and a numpy array)."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        x = [float(i), float(i) / 2, -float(i)]
        return tessera.tensor(x), {"label": i * 3, "arr": np.full(2, i, dtype=np.int32)}


class TorchPairs(torch.utils.data.Dataset):
    def __len__(self):
        return 23

    def __getitem__(self, i):
        x = [float(i), float(i) / 2, -float(i)]
        return torch.tensor(x), {"label": i * 3, "arr": np.full(2, i, dtype=np.int32)}


def flat(batches):
    return [(b[0].tolist(), b[1]["label"].tolist(), b[1]["arr"].tolist()) for b in batches]


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_equal_torch_in_order(num_workers, drop_last):
    ours = list(DataLoader(Pairs(), batch_size=4, num_workers=num_workers, drop_last=drop_last))
    ref = list(torch.utils.data.DataLoader(TorchPairs(), batch_size=4, num_workers=num_workers, drop_last=drop_last))
    assert flat(ours) == flat(ref)
    assert len(ours) == len(DataLoader(Pairs(), batch_size=4, drop_last=drop_last))
    assert ours[0][1]["label"].dtype == tessera.int64 and ours[0][1]["arr"].dtype == tessera.int32


def test_shuffled_epochs_are_permutations_that_differ_and_repeat_with_the_seed():
    loader = DataLoader(Pairs(), batch_size=5, shuffle=True, num_workers=2, seed=4, persistent_workers=True)
    epochs = [[l for b in loader for l in b[1]["label"].tolist()] for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == [3 * i for i in range(23)]
    assert epochs[0] != epochs[1]
    again = DataLoader(Pairs(), batch_size=5, shuffle=True, num_workers=0, seed=4)
    assert [l for b in again for l in b[1]["label"].tolist()] == epochs[0]


INIT = {}


def mark_worker(wid):
    INIT["wid"] = wid


class WhoLoads(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return info.id, os.getpid(), tessera.rand(1).item(), INIT.get("wid", -1)


def test_workers_run_in_other_processes_with_distinct_seeds_and_init_fn():
    assert get_worker_info() is None
    loader = DataLoader(WhoLoads(), batch_size=2, num_workers=2, worker_init_fn=mark_worker)
    batches = list(loader)
    ids = [b[0].tolist() for b in batches]
    assert ids == [[0, 0], [1, 1], [0, 0], [1, 1]]  # batch k goes to worker k % 2
    pids = {p for b in batches for p in b[1].tolist()}
    assert len(pids) == 2 and os.getpid() not in pids
    draws = [x for b in batches for x in b[2].tolist()]
    assert len(set(draws)) == len(draws)  # tessera's generator seeded per worker
    assert [b[3].tolist() for b in batches] == ids and "wid" not in INIT  # ran in each worker


class Failing(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            raise KeyError(f"item {i} is missing")
        return tessera.tensor([float(i)])


def test_a_worker_exception_is_raised_here_with_its_traceback():
    loader = DataLoader(Failing(), batch_size=2, num_workers=2)
    it = iter(loader)
    assert next(it).reshape(-1).tolist() == [0.0, 1.0]
    with pytest.raises(KeyError, match=r"(?s)Caught KeyError in DataLoader worker process 1.*item 3 is missing"):
        next(it)


class Dies(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            os._exit(3)
        return tessera.tensor([float(i)])


def test_a_dead_worker_ends_iteration_with_an_error_instead_of_a_hang():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker \(pid \d+\) exited unexpectedly with exit code 3"):
        list(DataLoader(Dies(), batch_size=1, num_workers=2))
    assert time.monotonic() - start < 30


class Slow(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        time.sleep(30)
        return tessera.tensor([0.0])


def test_timeout():
    with pytest.raises(RuntimeError, match="timed out after 1 s"):
        list(DataLoader(Slow(), num_workers=1, timeout=1))


class Counting(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        wid, n = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(wid, 10, n))


def test_iterable_dataset_shards_by_worker_info():
    assert [b.tolist() for b in DataLoader(Counting(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    got = [b.tolist() for b in DataLoader(Counting(), batch_size=2, num_workers=2)]
    ref = [b.tolist() for b in torch.utils.data.DataLoader(TorchCounting(), batch_size=2, num_workers=2)]
    assert got == ref


class TorchCounting(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, n = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(wid, 10, n))


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Pairs(), num_workers=-1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(Pairs(), batch_sampler=[[0, 1]], batch_size=2)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(Pairs(), prefetch_factor=4)
    with pytest.raises(TypeError, match="default_collate"):
        list(DataLoader(ObjectDataset(), batch_size=2))


class ObjectDataset(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return object()


def test_tensors_pickle_with_dtype_device_and_requires_grad():
    for t in (tessera.randn(3, 2).T, tessera.arange(5).to(tessera.int32), tessera.randn(4).to(tessera.bfloat16)):
        back = pickle.loads(pickle.dumps(t))
        assert back.dtype == t.dtype and back.shape == t.shape and back.tolist() == t.tolist()
    w = tessera.ones(2, requires_grad=True)
    assert pickle.loads(pickle.dumps(w)).requires_grad and copy.deepcopy(w).tolist() == [1.0, 1.0]
