"""torch.utils.data: Dataset, IterableDataset, samplers and a DataLoader with worker processes.

    loader = DataLoader(MyDataset(), batch_size=32, shuffle=True, num_workers=2)
    for x, y in loader: ...

A Python dataset is read by `num_workers` forked processes, each preparing whole batches
(`__getitem__` and `collate_fn` run in the worker) `prefetch_factor` batches ahead; batches come
back in sampler order. A worker's exception is raised in the main process with the worker's
traceback; a worker that dies ends the iteration with RuntimeError instead of a hang. With
num_workers=0 everything runs in the calling thread. Tessera's own C++ datasets (TensorDataset)
with the default collation use the C++ loader, which prefetches on a thread without the GIL.
"""
import collections.abc
import itertools
import multiprocessing
import queue
import random
import traceback

import numpy as np

from .. import _C
from .._C.data import (  # noqa: F401
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
)


class IterableDataset:
    """A stream of examples: subclass with __iter__. With workers, each worker iterates its own
    copy; shard it with get_worker_info() (id, num_workers) as with torch."""

    def __iter__(self):
        raise NotImplementedError("[IterableDataset] expected the subclass to define __iter__")


class WorkerInfo:
    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


_worker_info = None


def get_worker_info():
    """In a DataLoader worker: its WorkerInfo; in the main process: None."""
    return _worker_info


def default_collate(batch):
    """torch's default_collate: tensors and numpy arrays are stacked, numbers become a tensor
    (float64, int64 or bool), strings stay a list, and mappings and sequences are collated field
    by field."""
    import tessera

    elem = batch[0]
    if isinstance(elem, tessera.Tensor):
        return tessera.stack(list(batch))
    if isinstance(elem, np.ndarray):
        return tessera.from_numpy(np.stack(batch))
    if isinstance(elem, (bool, np.bool_)):
        return tessera.tensor(list(batch), dtype=tessera.bool)
    if isinstance(elem, (int, np.integer)):
        return tessera.tensor([int(b) for b in batch], dtype=tessera.int64)
    if isinstance(elem, (float, np.floating)):
        return tessera.tensor([float(b) for b in batch], dtype=tessera.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(f)) for f in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("[default_collate] expected each element in list of batch to be of equal size")
        return [default_collate(list(f)) for f in zip(*batch)]
    raise TypeError(
        f"[default_collate] expected tensors, numpy arrays, numbers, strings, dicts or lists, "
        f"got {type(elem).__name__}"
    )


class _WorkerError:
    """An exception raised in a worker, carried to the main process with its traceback."""

    def __init__(self, exc, where):
        self.type, self.where = type(exc), where
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self):
        message = f"Caught {self.type.__name__} in {self.where}.\nOriginal {self.text}"
        try:
            error = self.type(message)
        except Exception:  # an exception type that wants other constructor arguments
            error = RuntimeError(message)
        raise error


def _worker_loop(fetch, index_queue, result_queue, info, worker_init_fn):
    global _worker_info
    import tessera

    _worker_info = info
    tessera.manual_seed(info.seed)
    random.seed(info.seed)
    np.random.seed(info.seed % 2**32)
    _C.set_num_threads(1)  # workers run beside the main process's kernels
    try:
        if worker_init_fn is not None:
            worker_init_fn(info.id)
    except Exception as e:
        result_queue.put((None, _WorkerError(e, f"DataLoader worker process {info.id}")))
        return
    stream = None
    while True:
        task = index_queue.get()
        if task is None:
            return
        key, indices = task
        try:
            if indices is None:  # an IterableDataset: the worker's next batch
                if stream is None:
                    stream = fetch(None)
                batch = next(stream, None)
            else:
                batch = fetch(indices)
            result_queue.put((key, batch))
        except Exception as e:
            result_queue.put((key, _WorkerError(e, f"DataLoader worker process {info.id}")))


def pin_memory_batch(batch):
    """A batch with its tensors copied to page-locked memory (torch's pin_memory for
    DataLoader(pin_memory=True)), through mappings, namedtuples and sequences."""
    import tessera

    if isinstance(batch, tessera.Tensor):
        return batch.pin_memory()
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, collections.abc.Mapping):
        return {key: pin_memory_batch(value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(pin_memory_batch(b) for b in batch))
    if isinstance(batch, collections.abc.Sequence):
        return [pin_memory_batch(b) for b in batch]
    return batch


class DataLoader:
    """torch.utils.data.DataLoader. `seed` (or `generator`'s initial seed) fixes the shuffle order
    and the workers' seeds; the position of each epoch's order is set by set_epoch (automatic when
    iterating several times)."""

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=False,
        sampler=None,
        batch_sampler=None,
        num_workers=0,
        collate_fn=None,
        pin_memory=False,
        drop_last=False,
        timeout=0,
        worker_init_fn=None,
        generator=None,
        *,
        prefetch_factor=None,
        persistent_workers=False,
        seed=None,
        prefetch=2,
    ):
        if num_workers < 0:
            raise ValueError(f"[DataLoader] expected num_workers >= 0, got {num_workers}")
        if timeout < 0:
            raise ValueError(f"[DataLoader] expected timeout >= 0, got {timeout}")
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError("[DataLoader] prefetch_factor needs num_workers > 0")
        if persistent_workers and num_workers == 0:
            raise ValueError("[DataLoader] persistent_workers needs num_workers > 0")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError(
                "[DataLoader] batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last"
            )
        if sampler is not None and shuffle:
            raise ValueError("[DataLoader] sampler is mutually exclusive with shuffle")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.prefetch_factor = 2 if prefetch_factor is None else prefetch_factor
        self.persistent_workers, self.pin_memory = persistent_workers, pin_memory
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        if seed is None:
            seed = generator.initial_seed() if generator is not None else 0
        self.seed, self.epoch = seed, 0
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("[DataLoader] an IterableDataset takes no shuffle, sampler or batch_sampler")
        if not self._iterable and sampler is None and batch_sampler is None:
            sampler = RandomSampler(len(dataset), seed) if shuffle else SequentialSampler(len(dataset))
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._native = None
        if (
            type(dataset).__module__ == "tessera._C.data"  # a C++ dataset: no GIL needed to load
            and collate_fn is None
            and batch_sampler is None
            and (sampler is None or isinstance(sampler, Sampler))
        ):
            self._native = _C.data.DataLoader(
                dataset, batch_size, seed=seed, drop_last=drop_last, prefetch=prefetch, sampler=sampler
            )
        self._workers = None

    def __len__(self):
        if self._iterable:
            raise TypeError("[DataLoader] an IterableDataset has no length")
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch):
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        if self._native is not None:
            self._native.set_epoch(epoch)

    def _index_batches(self):
        if self.batch_sampler is not None:
            return (list(b) for b in self.batch_sampler)
        it = iter(self.sampler)
        batches = iter(lambda: list(itertools.islice(it, self.batch_size)), [])
        if self.drop_last:
            batches = (b for b in batches if len(b) == self.batch_size)
        return batches

    def _fetch(self, indices):
        if indices is None:  # a generator of an IterableDataset's collated batches
            return self._iterable_batches()
        return self.collate_fn([self.dataset[i] for i in indices])

    def _iterable_batches(self):
        it = iter(self.dataset)
        while True:
            chunk = list(itertools.islice(it, self.batch_size))
            if not chunk or (self.drop_last and len(chunk) < self.batch_size):
                return
            yield self.collate_fn(chunk)

    def __iter__(self):
        # pin_memory pins only where a GPU can use it, as torch (which warns and goes on).
        pin = self.pin_memory and _C.cuda.is_available()
        for batch in self._epoch_batches():
            yield pin_memory_batch(batch) if pin else batch
        self.set_epoch(self.epoch + 1)

    def _epoch_batches(self):
        if self._native is not None:
            yield from self._native_epoch()
        elif self.num_workers == 0:
            if self._iterable:
                yield from self._iterable_batches()
            else:
                for indices in self._index_batches():
                    yield self._fetch(indices)
        else:
            yield from self._worker_epoch()

    def _native_epoch(self):
        # The C++ loader's next epoch starts after a StopIteration; restart at our epoch.
        self._native.set_epoch(self.epoch)
        for batch in self._native:
            yield batch

    # Worker processes ----------------------------------------------------------------------

    def _start_workers(self):
        ctx = multiprocessing.get_context("fork")
        self._result_queue = ctx.Queue()
        self._index_queues, self._workers = [], []
        base_seed = self.seed * 1_000_003 + self.epoch * 7919
        for wid in range(self.num_workers):
            iq = ctx.Queue()
            info = WorkerInfo(wid, self.num_workers, base_seed + wid, self.dataset)
            w = ctx.Process(
                target=_worker_loop,
                args=(self._fetch, iq, self._result_queue, info, self.worker_init_fn),
                daemon=True,
            )
            w.start()
            self._index_queues.append(iq)
            self._workers.append(w)

    def _shutdown_workers(self):
        if not getattr(self, "_workers", None):
            return
        for iq in self._index_queues:
            try:
                iq.put(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
                w.join()
        for q in (*self._index_queues, self._result_queue):
            q.cancel_join_thread()
            q.close()
        self._workers = None

    def __del__(self):
        self._shutdown_workers()

    def _get_result(self):
        waited = 0.0
        while True:
            try:
                return self._result_queue.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
                dead = [w for w in self._workers if not w.is_alive()]
                if dead:
                    w = dead[0]
                    self._shutdown_workers()
                    raise RuntimeError(
                        f"[DataLoader] worker (pid {w.pid}) exited unexpectedly with exit code {w.exitcode}"
                    )
                if self.timeout and waited >= self.timeout:
                    self._shutdown_workers()
                    raise RuntimeError(f"[DataLoader] timed out after {self.timeout} s waiting for a batch")

    def _worker_epoch(self):
        if self._workers is None:
            self._start_workers()
        try:
            if self._iterable:
                yield from self._iterable_worker_epoch()
            else:
                yield from self._map_worker_epoch()
        finally:
            if not self.persistent_workers or self._iterable:
                self._shutdown_workers()

    def _map_worker_epoch(self):
        batches = enumerate(self._index_batches())
        sent, ready, next_key = 0, {}, 0
        limit = self.prefetch_factor * self.num_workers

        def send():
            nonlocal sent
            task = next(batches, None)
            if task is None:
                return False
            self._index_queues[task[0] % self.num_workers].put(task)
            sent += 1
            return True

        while sent < limit and send():
            pass
        while next_key < sent:
            while next_key not in ready:
                key, batch = self._get_result()
                if key is None and isinstance(batch, _WorkerError):
                    batch.reraise()
                ready[key] = batch
            batch = ready.pop(next_key)
            next_key += 1
            send()
            if isinstance(batch, _WorkerError):
                batch.reraise()
            yield batch

    def _iterable_worker_epoch(self):
        # Rounds of one batch per worker, yielded in worker order as torch's round robin; a
        # worker whose stream ended drops out.
        active = list(range(self.num_workers))
        while active:
            for wid in active:
                self._index_queues[wid].put((wid, None))
            round_batches = {}
            for _ in active:
                wid, batch = self._get_result()
                if isinstance(batch, _WorkerError):
                    batch.reraise()
                round_batches[wid] = batch
            for wid in list(active):
                if round_batches[wid] is None:
                    active.remove(wid)
                else:
                    yield round_batches[wid]
