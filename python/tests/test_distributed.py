"""tessera.distributed, DistributedDataParallel and ZeroRedundancyOptimizer from Python.

Runs under mpirun (ctest python.distributed_np2: 2 ranks) and alone (world size 1, in
python.unit). Every rank rebuilds every other rank's inputs and checks its result against a
serial reference, so the same tests hold at any world size. All ranks run the same tests in the
same order: a test that fails on one rank makes its peers' next collective time out
(TESSERA_DIST_TIMEOUT) instead of hanging.
"""
import datetime
import gc
import time

import numpy as np
import pytest

import tessera
import tessera.distributed as dist
from tessera import nn, optim
from tessera.distributed.optim import ZeroRedundancyOptimizer
from tessera.nn.parallel import DistributedDataParallel as DDP

needs_mpi = pytest.mark.skipif(not dist.is_available(), reason="a build without MPI")
TIMEOUT = datetime.timedelta(seconds=60)


@pytest.fixture(scope="module", autouse=True)
def world():
    if dist.is_available():
        dist.init_process_group("mpi", timeout=TIMEOUT)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_size():
    return dist.get_rank(), dist.get_world_size()


def values(r, n, dtype):
    """Rank r's input: small integers, exact in every dtype (sums included)."""
    return tessera.tensor([float((r * 3 + i) % 7) for i in range(n)]).to(dtype)


def numpy_of(t):
    return np.array(t.to(tessera.float64).tolist())


def serial(n, dtype, world):
    """Every rank's input, stacked: the serial reference reduces it."""
    return np.stack([numpy_of(values(r, n, dtype)) for r in range(world)])


REDUCE = {
    dist.ReduceOp.SUM: lambda a: a.sum(0),
    dist.ReduceOp.AVG: lambda a: a.mean(0),
    dist.ReduceOp.MAX: lambda a: a.max(0),
    dist.ReduceOp.MIN: lambda a: a.min(0),
}
DTYPES = [tessera.float32, tessera.float64, tessera.bfloat16, tessera.int32, tessera.int64]


def test_without_mpi_init_raises():
    if dist.is_available():
        pytest.skip("this build has MPI")
    with pytest.raises(RuntimeError, match="MPI"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()


@needs_mpi
def test_rank_size_and_init_arguments():
    import os

    rank, size = rank_size()
    assert size == int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) and 0 <= rank < size
    assert dist.is_initialized() and dist.get_backend() == "mpi"
    assert dist._get_default_group().timeout == TIMEOUT
    with pytest.raises(RuntimeError, match="second"):
        dist.init_process_group("mpi")
    dist.destroy_process_group()
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="backend 'mpi'"):
        dist.init_process_group("nccl")
    with pytest.raises(ValueError, match="world_size"):
        dist.init_process_group("mpi", world_size=size + 1)
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group("mpi", timeout="soon")
    dist.destroy_process_group()
    dist.init_process_group("mpi", timeout=2.5, world_size=size, rank=rank)  # seconds
    assert dist._get_default_group().timeout == datetime.timedelta(seconds=2.5)
    dist.destroy_process_group()
    dist.init_process_group("mpi", timeout=TIMEOUT)


@needs_mpi
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(REDUCE), ids=lambda op: op.name)
def test_all_reduce(dtype, op):
    rank, size = rank_size()
    if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
        with pytest.raises(TypeError, match=r"\[all_reduce\] expected a floating dtype"):
            dist.all_reduce(values(rank, 7, dtype), op=op)
        return
    t = values(rank, 7, dtype)
    assert dist.all_reduce(t, op=op) is None
    assert t.dtype == dtype
    np.testing.assert_allclose(numpy_of(t), REDUCE[op](serial(7, dtype, size)), rtol=1e-2)


@needs_mpi
@pytest.mark.parametrize("dtype", [tessera.float32, tessera.int64], ids=str)
def test_all_gather(dtype):
    rank, size = rank_size()
    want = serial(5, dtype, size)
    outs = [tessera.zeros(5, dtype=dtype) for _ in range(size)]
    dist.all_gather(outs, values(rank, 5, dtype))
    np.testing.assert_array_equal(np.stack([numpy_of(o) for o in outs]), want)

    flat = tessera.zeros(size * 5, dtype=dtype)
    dist.all_gather_into_tensor(flat, values(rank, 5, dtype))
    np.testing.assert_array_equal(numpy_of(flat), want.reshape(-1))
    stacked = tessera.zeros(size, 5, dtype=dtype)  # any shape with size * numel elements
    dist.all_gather_into_tensor(stacked, values(rank, 5, dtype))
    np.testing.assert_array_equal(numpy_of(stacked).reshape(size, 5), want)

    with pytest.raises(ValueError, match="tensor_list of"):
        dist.all_gather(outs + [tessera.zeros(5, dtype=dtype)], values(rank, 5, dtype))
    with pytest.raises(ValueError, match="shape"):
        dist.all_gather([tessera.zeros(4, dtype=dtype)] * size, values(rank, 5, dtype))


@needs_mpi
@pytest.mark.parametrize("op", [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX])
def test_reduce_scatter_tensor(op):
    rank, size = rank_size()
    n = 3
    out = tessera.zeros(n)
    dist.reduce_scatter_tensor(out, values(rank, size * n, tessera.float32), op=op)
    want = REDUCE[op](serial(size * n, tessera.float32, size))[rank * n:(rank + 1) * n]
    np.testing.assert_allclose(numpy_of(out), want, rtol=1e-6)


@needs_mpi
def test_broadcast_from_every_rank():
    rank, size = rank_size()
    for src in range(size):
        t = values(rank, 6, tessera.float64)
        dist.broadcast(t, src=src)
        np.testing.assert_array_equal(numpy_of(t), serial(6, tessera.float64, size)[src])
    with pytest.raises(IndexError, match=r"\[broadcast\] expected root"):
        dist.broadcast(tessera.zeros(1), src=size)


@needs_mpi
def test_send_recv_ring():
    rank, size = rank_size()
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    got = tessera.zeros(4, dtype=tessera.int64)
    pending = dist.irecv(got, src=prev, tag=3)  # posted first: the ring cannot deadlock
    dist.send(values(rank, 4, tessera.int64), dst=nxt, tag=3)
    pending.wait()
    np.testing.assert_array_equal(numpy_of(got), serial(4, tessera.int64, size)[prev])
    # Blocking recv against an isend; recv returns the sender, as torch's.
    sent = dist.isend(values(rank, 2, tessera.float32), dst=nxt, tag=4)
    got = tessera.zeros(2)
    assert dist.recv(got, src=prev, tag=4) == prev
    assert sent.wait() is True
    np.testing.assert_array_equal(numpy_of(got), serial(2, tessera.float32, size)[prev])


@needs_mpi
def test_async_handles():
    rank, size = rank_size()
    ts = [values(rank, 1000, tessera.float32) for _ in range(3)]
    works = [dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True) for t in ts]
    outs = [tessera.zeros(1000) for _ in range(size)]
    gather = dist.all_gather(outs, values(rank, 1000, tessera.float32), async_op=True)
    barrier = dist.barrier(async_op=True)
    assert all(isinstance(w, dist.Work) for w in works + [gather, barrier])
    deadline = time.monotonic() + 30
    while not works[0].is_completed():  # polling alone drives the operation to completion
        assert time.monotonic() < deadline
    assert works[0].is_completed()
    for w in works + [gather, barrier]:
        assert w.wait() is True and w.is_completed()
    want = serial(1000, tessera.float32, size)
    for t in ts:
        np.testing.assert_allclose(numpy_of(t), want.sum(0))
    # The list form copies into tensor_list once the handle reports completion.
    np.testing.assert_array_equal(np.stack([numpy_of(o) for o in outs]), want)
    assert dist.barrier() is None


@needs_mpi
def test_new_group():
    rank, size = rank_size()
    last = size - 1
    solo = dist.new_group([last])  # every rank calls it; the others are not members
    if rank == last:
        assert dist.get_world_size(solo) == 1 and dist.get_rank(solo) == 0
        t = tessera.ones(3)
        dist.all_reduce(t, group=solo)
        assert t.tolist() == [1.0, 1.0, 1.0]
        dist.broadcast(t, src=last, group=solo)  # src is a job rank, as torch's
        with pytest.raises(ValueError, match="rank of the group"):
            dist.broadcast(t, src=(last + 1) % size if size > 1 else 5, group=solo)
    else:
        assert solo is dist.GroupMember.NON_GROUP_MEMBER
        assert dist.get_rank(solo) == -1 and dist.get_world_size(solo) == -1
        assert dist.all_reduce(tessera.ones(3), group=solo) is None  # a no-op, as torch's

    everyone = dist.new_group(list(reversed(range(size))))  # sorted, as torch does
    assert dist.get_world_size(everyone) == size and dist.get_rank(everyone) == rank
    t = values(rank, 4, tessera.float32)
    dist.broadcast(t, src=last, group=everyone)
    np.testing.assert_array_equal(numpy_of(t), serial(4, tessera.float32, size)[last])
    dist.barrier()


@needs_mpi
def test_timeout_raises_distributed_error():
    rank, _ = rank_size()
    group = dist.new_group(timeout=0.3)
    assert group.timeout == datetime.timedelta(seconds=0.3)
    got = tessera.zeros(2)
    work = dist.irecv(got, src=rank, group=group, tag=77)  # from itself; nothing sent yet
    with pytest.raises(dist.DistributedError, match="recv") as info:
        work.wait()
    assert isinstance(info.value, RuntimeError)
    # The receive stays posted: a later message on the group would pair with it, so the group is
    # refused from now on (as NCCL aborts its communicator); other groups go on.
    del work
    with pytest.raises(dist.DistributedError, match="failed after a timeout in recv"):
        dist.send(tessera.ones(2), dst=rank, group=group, tag=77)
    dist.barrier()


# ---- DistributedDataParallel ----


def loss_of(out):
    return (out * out).mean()


def batch(r, n=6, features=4):
    """Rank r's micro-batch (the same on every rank that rebuilds it)."""
    tessera.manual_seed(1000 + r)
    return tessera.randn(n, features)


def local_grads(make_module, state, x):
    """The gradients of an unwrapped copy with the same weights on input x."""
    ref = make_module()
    ref.load_state_dict(state)
    loss_of(ref(x)).backward()
    return {k: p.grad.numpy().copy() for k, p in ref.named_parameters()}


def averaged(make_module, state, inputs_of_rank, size):
    """The mean over ranks of each rank's local gradients (summed over its inputs)."""
    total = None
    for r in range(size):
        g = {}
        for x in inputs_of_rank(r):
            for k, v in local_grads(make_module, state, x).items():
                g[k] = g.get(k, 0) + v
        total = g if total is None else {k: total[k] + g[k] for k in g}
    return {k: v / size for k, v in total.items()}


def module_grads(module):
    return {k: p.grad.numpy() for k, p in module.named_parameters()}


def assert_grads_equal(got, want):
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


class MLP(nn.Module):
    """A Python-defined module: DDP calls its Python forward."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(tessera.relu(self.fc1(x)))


def state_of(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


@needs_mpi
@pytest.mark.parametrize("make_module", [lambda: nn.Linear(4, 3), MLP], ids=["Linear", "MLP"])
@pytest.mark.parametrize("as_view", [False, True], ids=["copy", "bucket_view"])
def test_ddp_gradients_are_the_average_of_local_gradients(make_module, as_view):
    rank, size = rank_size()
    tessera.manual_seed(rank)  # different weights on every rank: DDP broadcasts rank 0's
    # Tiny buckets: every parameter travels in its own all-reduce.
    ddp = DDP(make_module(), bucket_cap_mb=1e-6, first_bucket_cap_mb=1e-6,
              gradient_as_bucket_view=as_view)
    assert ddp.gradient_as_bucket_view is as_view and not ddp.find_unused_parameters
    assert len(ddp._bucket_parameter_names()) == len(ddp.module.parameters())
    state = state_of(ddp.module)
    for name, p in ddp.module.named_parameters():  # rank 0's weights everywhere
        gathered = [tessera.zeros(*p.shape) for _ in range(size)]
        dist.all_gather(gathered, p.detach().contiguous())
        for g in gathered:
            np.testing.assert_array_equal(g.numpy(), p.detach().numpy(), err_msg=name)
    for step in range(2):  # the second runs on the buckets rebuilt in arrival order
        ddp.zero_grad()
        loss_of(ddp(batch(10 * step + rank))).backward()
        want = averaged(make_module, state, lambda r: [batch(10 * step + r)], size)
        assert_grads_equal(module_grads(ddp.module), want)


@needs_mpi
def test_ddp_no_sync_accumulates_locally():
    rank, size = rank_size()
    ddp = DDP(MLP())
    state = state_of(ddp.module)
    with ddp.no_sync():
        assert not ddp.require_backward_grad_sync
        loss_of(ddp(batch(rank))).backward()
    assert ddp.require_backward_grad_sync
    assert_grads_equal(module_grads(ddp.module), local_grads(MLP, state, batch(rank)))
    loss_of(ddp(batch(50 + rank))).backward()  # reduces what both backward passes accumulated
    want = averaged(MLP, state, lambda r: [batch(r), batch(50 + r)], size)
    assert_grads_equal(module_grads(ddp.module), want)


def train_both(ddp, opt, ref, ref_opt, steps=3):
    """Steps ddp on each rank's micro-batches and ref on all of them at once; the parameters
    must stay equal. Equal micro-batches and a mean loss: the mean of the ranks' gradients is
    the gradient on the concatenated batch."""
    rank, size = rank_size()
    for step in range(steps):
        opt.zero_grad()
        loss_of(ddp(batch(10 * step + rank))).backward()
        opt.step()
        ref_opt.zero_grad()
        loss_of(ref(tessera.cat([batch(10 * step + r) for r in range(size)]))).backward()
        ref_opt.step()
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@needs_mpi
def test_ddp_training_matches_one_process_on_the_whole_batch():
    tessera.manual_seed(7)
    ref = MLP()
    ddp = DDP(MLP())
    ref.load_state_dict(state_of(ddp.module))
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ref_opt = optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    train_both(ddp, opt, ref, ref_opt)


def make_ddp_of_temporary_module():
    return DDP(MLP())  # nothing else refers to the MLP


@needs_mpi
def test_ddp_keeps_the_module_and_reads_as_a_module():
    ddp = make_ddp_of_temporary_module()
    gc.collect()
    assert isinstance(ddp.module, MLP) and isinstance(ddp, nn.Module)
    assert ddp(tessera.ones(2, 4)).shape == (2, 3)  # the Python forward is still there
    assert list(ddp.state_dict())[0] == "module.fc1.weight"  # torch's names
    assert "DistributedDataParallel" in repr(ddp) and ddp.process_group is not None
    assert len(ddp.parameters()) == 4


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 3)
        self.unused = nn.Linear(4, 3)

    def forward(self, x):
        return self.used(x)


@needs_mpi
def test_ddp_unused_parameters():
    rank, _ = rank_size()
    strict = DDP(WithUnused())
    with pytest.raises(RuntimeError, match="'unused.weight'.*find_unused_parameters"):
        loss_of(strict(batch(rank))).backward()
    ddp = DDP(WithUnused(), find_unused_parameters=True)
    loss_of(ddp(batch(rank))).backward()
    assert not ddp.module.unused.weight.grad.numpy().any()  # reduced as zeros
    assert ddp.module.used.weight.grad.numpy().any()


@needs_mpi
def test_ddp_needs_the_default_group():
    dist.destroy_process_group()
    try:
        with pytest.raises(RuntimeError, match="init_process_group"):
            DDP(nn.Linear(2, 2))
    finally:
        dist.init_process_group("mpi", timeout=TIMEOUT)


# ---- ZeroRedundancyOptimizer ----


@needs_mpi
@pytest.mark.parametrize("stage", [1, 2])
def test_zero_matches_the_unsharded_optimizer(stage):
    tessera.manual_seed(3)
    ref = MLP()
    ddp = DDP(MLP(), reduce_scatter=stage == 2)
    ref.load_state_dict(state_of(ddp.module))
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optim.AdamW, ddp=ddp, lr=0.01,
                                  weight_decay=0.1)
    assert opt.stage == stage and opt.param_groups[0]["lr"] == 0.01
    total = tessera.zeros(1, dtype=tessera.int64) + opt.shard_numel
    dist.all_reduce(total)  # the shards cover every parameter element once
    assert total.item() == sum(p.numel() for p in ddp.parameters())
    ref_opt = optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.1)
    train_both(ddp, opt, ref, ref_opt)
    with pytest.raises(TypeError, match="SGD, Adam or AdamW"):
        ZeroRedundancyOptimizer(ddp.parameters(), lambda params, **kw: MLP(), ddp=ddp)


# ---- PyTorch parity ----


@needs_mpi
def test_collectives_match_torch_gloo():
    """The same numbers through torch.distributed (gloo) and tessera.distributed (MPI)."""
    import os
    import shutil
    import tempfile

    torch = pytest.importorskip("torch")
    tdist = torch.distributed
    if not tdist.is_available() or not tdist.is_gloo_available():
        pytest.skip("torch without gloo")
    rank, size = rank_size()
    # Rank 0 names torch's rendezvous file; the others learn the name through tessera.
    folder = tempfile.mkdtemp(prefix="tessera_gloo_") if rank == 0 else ""
    name = tessera.tensor(list(folder.encode().ljust(200, b"\0")), dtype=tessera.uint8)
    dist.broadcast(name, src=0)
    folder = bytes(name.tolist()).rstrip(b"\0").decode()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    tdist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                             world_size=size, timeout=TIMEOUT)
    try:
        x = np.random.RandomState(rank).randn(257).astype(np.float32)
        pairs = [(dist.ReduceOp.SUM, tdist.ReduceOp.SUM), (dist.ReduceOp.MAX, tdist.ReduceOp.MAX),
                 (dist.ReduceOp.MIN, tdist.ReduceOp.MIN)]
        for op, torch_op in pairs:
            ours, theirs = tessera.from_numpy(x.copy()), torch.from_numpy(x.copy())
            dist.all_reduce(ours, op=op)
            tdist.all_reduce(theirs, op=torch_op)
            # Beyond 2 ranks the two libraries may add in different orders.
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=op.name)
        ours = tessera.from_numpy(x.copy())
        dist.all_reduce(ours, op=dist.ReduceOp.AVG)  # gloo has no AVG: its sum over the ranks
        theirs = torch.from_numpy(x.copy())
        tdist.all_reduce(theirs)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy() / size, rtol=1e-5, atol=1e-6)

        ours, theirs = tessera.zeros(size * 257), torch.zeros(size * 257)
        dist.all_gather_into_tensor(ours, tessera.from_numpy(x.copy()))
        tdist.all_gather(list(theirs.chunk(size)), torch.from_numpy(x.copy()))
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    finally:
        tdist.destroy_process_group()
        dist.barrier()
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


# ---- model parallelism (tessera.distributed.tensor_parallel and .pipeline) ----

from tessera.distributed import pipeline, tensor_parallel as tp  # noqa: E402


@needs_mpi
def test_tensor_parallel_mlp_equals_the_whole_one():
    rank, size = rank_size()
    group = dist._get_default_group()
    tessera.manual_seed(3)
    fc, proj = nn.Linear(8, 4 * size), nn.Linear(4 * size, 8)
    x = tessera.randn(2, 3, 8)
    want = tessera.nn.functional.gelu(proj(fc(x)))
    want.sum().backward()  # the whole model's gradients, to compare slices with
    col = tp.ColumnParallelLinear(fc.weight.detach(), fc.bias.detach(), group)
    row = tp.RowParallelLinear(proj.weight.detach(), proj.bias.detach(), group)
    assert tuple(col.weight.shape) == (4, 8) and tuple(row.weight.shape) == (8, 4)
    got = tessera.nn.functional.gelu(row(col(x)))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    got.sum().backward()
    rows = slice(4 * rank, 4 * rank + 4)
    np.testing.assert_allclose(col.weight.grad.numpy(), fc.weight.grad.numpy()[rows], rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(row.weight.grad.numpy(), proj.weight.grad.numpy()[:, rows],
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(row.bias.grad.numpy(), proj.bias.grad.numpy(), rtol=1e-5)


@needs_mpi
def test_vocab_parallel_cross_entropy_equals_the_plain_one():
    rank, size = rank_size()
    group = dist._get_default_group()
    tessera.manual_seed(4)
    vocab = 11  # padded to 12 at 2 ranks
    local = -(-vocab // size)
    logits = tessera.randn(6, vocab, dtype=tessera.float64)
    target = tessera.tensor([0, 3, -1, 10, 5, 7])
    want = tessera.nn.functional.cross_entropy(logits, target, ignore_index=-1,
                                               label_smoothing=0.1)
    padded = tessera.cat([logits, tessera.zeros(6, local * size - vocab, dtype=tessera.float64)], 1)
    mine = padded[:, local * rank:local * (rank + 1)].contiguous()
    got = tp.vocab_parallel_cross_entropy(mine, target, group, vocab, ignore_index=-1,
                                          label_smoothing=0.1)
    assert abs(got.item() - want.item()) <= 1e-12 * abs(want.item())


@needs_mpi
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_of_linear_stages_equals_the_serial_chain(schedule):
    rank, size = rank_size()
    group = dist._get_default_group()
    tessera.manual_seed(5)
    layers = [nn.Linear(6, 6) for _ in range(size)]  # stage r holds layer r
    xs = [tessera.randn(2, 6) for _ in range(4)]
    ys = [tessera.randn(2, 6) for _ in range(4)]

    def chain(x, stages):
        for layer in stages:
            x = tessera.tanh(layer(x))
        return x

    serial = sum(((chain(x, layers) - y) ** 2).mean() for x, y in zip(xs, ys)) / 4
    serial.backward()
    want_grad = layers[rank].weight.grad.numpy().copy()
    for layer in layers:
        layer.zero_grad()
    pp = pipeline.PipelineExecutor(group, schedule)
    assert pipeline.make_pipeline_schedule(schedule, size, 4, 1, rank)[0] == ("F", 0, 0)

    def forward(chunk, micro, x):
        h = chain(xs[micro] if x is None else x, [layers[rank]])
        return ((h - ys[micro]) ** 2).mean() if pp.stage == pp.stages - 1 else h

    loss_sum = pp.run(4, forward)
    assert abs(loss_sum / 4 - serial.item()) <= 1e-6 * abs(serial.item())
    np.testing.assert_allclose(layers[rank].weight.grad.numpy(), want_grad, rtol=1e-5, atol=1e-7)
