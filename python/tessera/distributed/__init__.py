"""Collectives among processes, shaped like torch.distributed, on the C++ process groups
(tessera._C.distributed; the MPI backend, for CPU tensors).

    # mpirun -np 2 python3 train.py
    import tessera
    import tessera.distributed as dist

    dist.init_process_group("mpi")
    t = tessera.ones(4) * dist.get_rank()
    dist.all_reduce(t)                                 # the sum over the ranks, on every rank
    model = tessera.nn.parallel.DistributedDataParallel(model)

As in torch, src and dst are ranks of the whole job, also with a group; new_group(ranks)
returns GroupMember.NON_GROUP_MEMBER on the ranks it leaves out, and collectives on that do
nothing. Every wait has the group's deadline (init_process_group's timeout, else
TESSERA_DIST_TIMEOUT seconds or 10 minutes); past it, DistributedError names the operation.
"""
import atexit

from .._C import distributed as _C_dist
from .._C.distributed import (  # noqa: F401
    DistributedError,
    ProcessGroup,
    ReduceOp,
    Work,
    is_available,
)
from . import optim, pipeline, tensor_parallel  # noqa: F401


class GroupMember:
    """torch's markers: WORLD (None) means the default group; NON_GROUP_MEMBER is what
    new_group returns on ranks outside the new group."""

    WORLD = None
    NON_GROUP_MEMBER = object()


_world = None  # the default group, set by init_process_group
_finalize_registered = False


def is_initialized():
    """Whether init_process_group made the default group (and destroy_process_group did not
    drop it)."""
    return _world is not None


def init_process_group(backend="mpi", timeout=None, world_size=-1, rank=-1):
    """Makes the default group of every process of the job. Only the "mpi" backend exists;
    timeout (a datetime.timedelta or seconds) bounds every wait. world_size and rank, when
    given, must agree with the launcher's."""
    global _world, _finalize_registered
    if _world is not None:
        raise RuntimeError("[init_process_group] expected one call, got a second one while the "
                           "default group exists (call destroy_process_group() first)")
    if str(backend).lower() != "mpi":
        raise ValueError(f"[init_process_group] expected backend 'mpi', got {backend!r}")
    if not is_available():
        raise RuntimeError("[init_process_group] expected a build with MPI, got one without "
                           "(tessera_dist is built only when CMake finds MPI: install "
                           "libopenmpi-dev and rebuild)")
    world = _C_dist.world()
    if world_size not in (-1, world.size()) or rank not in (-1, world.rank()):
        raise ValueError(f"[init_process_group] expected world_size {world.size()} and rank "
                         f"{world.rank()} (the launcher's), got {world_size} and {rank}")
    world.timeout = _C_dist.default_timeout() if timeout is None else timeout
    if not _finalize_registered:  # MPI must be finalised before the process exits
        atexit.register(_C_dist.finalize)
        _finalize_registered = True
    _world = world


def destroy_process_group(group=None):
    """Drops the default group (group None); afterwards init_process_group may be called
    again. Subgroups are released once nothing refers to them."""
    global _world
    if group is None or group is _world:
        _world = None


def _get_default_group():
    if _world is None:
        raise RuntimeError("[distributed] expected the default process group, got none: call "
                           "tessera.distributed.init_process_group() first")
    return _world


def _resolve(group):
    """The ProcessGroup for a group argument, or None on ranks outside it."""
    if group is None:
        return _get_default_group()
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    return group


def _group_rank(group, global_rank, op):
    """A job rank as a rank of group (what the C++ groups take)."""
    ranks = getattr(group, "_global_ranks", None)
    if ranks is None:
        return global_rank
    if global_rank not in ranks:
        raise ValueError(f"[{op}] expected a rank of the group {ranks}, got {global_rank}")
    return ranks.index(global_rank)


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def get_rank(group=None):
    """This process's rank in group (the default group when None); -1 outside the group."""
    pg = _resolve(group)
    return -1 if pg is None else pg.rank()


def get_world_size(group=None):
    """The number of ranks of group (the default group when None); -1 outside the group."""
    pg = _resolve(group)
    return -1 if pg is None else pg.size()


def get_backend(group=None):
    _resolve(group)
    return "mpi"


def new_group(ranks=None, timeout=None):
    """A group of the given job ranks (all when None). Every rank of the job calls it; the ranks
    left out get GroupMember.NON_GROUP_MEMBER. timeout: as init_process_group's (the default
    group's when None)."""
    world = _get_default_group()
    ranks = list(range(world.size())) if ranks is None else sorted(int(r) for r in ranks)
    pg = world.new_group(ranks)
    if pg is None:
        return GroupMember.NON_GROUP_MEMBER
    pg._global_ranks = ranks
    if timeout is not None:
        pg.timeout = timeout
    return pg


def barrier(group=None, async_op=False):
    """Returns once every rank of the group has entered it."""
    pg = _resolve(group)
    return None if pg is None else _finish(pg.barrier(), async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces tensor over the group in place; every rank ends with the result."""
    pg = _resolve(group)
    return None if pg is None else _finish(pg.all_reduce(tensor, op), async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Rank r's tensor into tensor_list[r] on every rank."""
    pg = _resolve(group)
    return None if pg is None else _finish(pg.all_gather(list(tensor_list), tensor), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's input into output, rank-major (world_size * input.numel() elements)."""
    pg = _resolve(group)
    return None if pg is None else _finish(pg.all_gather(output_tensor, input_tensor), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces input (world_size * output.numel() elements) over the group; rank r keeps block r
    of the result in output."""
    pg = _resolve(group)
    return None if pg is None else _finish(pg.reduce_scatter(output, input, op), async_op)


def broadcast(tensor, src, group=None, async_op=False):
    """Copies rank src's tensor into tensor on every rank of the group."""
    pg = _resolve(group)
    if pg is None:
        return None
    return _finish(pg.broadcast(tensor, _group_rank(pg, src, "broadcast")), async_op)


def isend(tensor, dst, group=None, tag=0):
    """Sends tensor to rank dst, which posts a recv with the same tag; returns a Work."""
    pg = _resolve(group)
    return None if pg is None else pg.send(tensor, _group_rank(pg, dst, "send"), tag)


def irecv(tensor, src, group=None, tag=0):
    """Receives into tensor what rank src sends with the same tag; returns a Work."""
    pg = _resolve(group)
    return None if pg is None else pg.recv(tensor, _group_rank(pg, src, "recv"), tag)


def send(tensor, dst, group=None, tag=0):
    """isend, then waits for it."""
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def recv(tensor, src, group=None, tag=0):
    """irecv, then waits for it; returns src (torch returns the sender's rank)."""
    work = irecv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    return src
