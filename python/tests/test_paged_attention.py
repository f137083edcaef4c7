"""tessera.ops' KV-cache attention ops (infinicore.ops names) against plain PyTorch 1.13
(paged_reference.py: gather the blocks, causal mask aligned bottom-right, softmax).

Block tables are drawn from a shuffled pool (non-contiguous), sequences share their first block
when both fill it, and every cache slot no sequence attends to holds NaN, so a kernel that read
one would fail. float32 and bfloat16 run the engine's kernel (over bfloat16 caches as they are);
float64, float16 and ALiBi the composite."""
import math

import numpy as np
import pytest
import torch

import tessera
from paged_reference import ref_attend, ref_paged, ref_paged_caching
from tessera import ops

TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 2e-2}
TESSERA_DTYPE = {torch.float32: tessera.float32, torch.float64: tessera.float64,
                 torch.bfloat16: tessera.bfloat16}


def tt(x):
    """A torch tensor as a tessera tensor (a copy)."""
    x = x.detach().clone()
    if x.dtype == torch.bfloat16:
        return tessera.from_dlpack(x)
    return tessera.from_numpy(x.numpy())


def th(x):
    """A tessera tensor as a torch tensor (a copy)."""
    return torch.from_dlpack(x.detach()).clone()


def assert_close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(th(got).double(), want.double(), rtol=tol, atol=tol)


def paged_setup(lens, nkv, d, bs, dtype, seed):
    """Caches [num_blocks, nkv, d, bs] of random values (NaN where no sequence reads) and int32
    block tables [S, max_blocks] scattered over a shuffled pool."""
    g = torch.Generator().manual_seed(seed)
    nblks = [-(-n // bs) for n in lens]
    nb = sum(nblks) + 3
    pool = torch.randperm(nb, generator=g).tolist()
    tables = torch.zeros(len(lens), max(nblks), dtype=torch.int32)
    for s, n in enumerate(nblks):
        tables[s, :n] = torch.tensor(pool[:n], dtype=torch.int32)
        pool = pool[n:]
        # Share sequence 0's first block when both sequences fill it (a common prefix).
        if s > 0 and lens[0] >= bs and lens[s] >= bs and s % 2 == 1:
            tables[s, 0] = tables[0, 0]
    read = torch.zeros(nb, bs, dtype=torch.bool)
    for s, n in enumerate(lens):
        for p in range(n):
            read[tables[s, p // bs], p % bs] = True
    kc = torch.randn(nb, nkv, d, bs, generator=g).to(dtype)
    vc = torch.randn(nb, nkv, d, bs, generator=g).to(dtype)
    for c in (kc, vc):
        c.permute(0, 3, 1, 2)[~read] = float("nan")
    return kc, vc, tables


# ---- paged_caching ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
def test_paged_caching_writes_tokens_at_their_slots(dtype, slot_dtype):
    nb, nkv, d, bs, ntok = 5, 2, 8, 16, 21
    g = torch.Generator().manual_seed(1)
    slots = torch.randperm(nb * bs, generator=g)[:ntok]
    slots[7] = -1  # skipped
    k = torch.randn(ntok, nkv, d, generator=g).to(dtype)
    v = torch.randn(ntok, nkv, d, generator=g).to(dtype)
    kc0 = torch.randn(nb, nkv, d, bs, generator=g).to(dtype)
    vc0 = torch.randn(nb, nkv, d, bs, generator=g).to(dtype)
    kc, vc = tt(kc0), tt(vc0)
    out = ops.paged_caching(tt(k), tt(v), kc, vc, tt(slots.to(slot_dtype)))
    for got, want in zip((kc, vc), ref_paged_caching(k, v, kc0, vc0, slots)):
        assert torch.equal(th(got), want)
    assert all(torch.equal(th(a), th(b)) for a, b in zip(out, (kc, vc)))  # returns the caches


# ---- paged_attention (decode) ----

DECODE = [
    # (hq, nkv, d, bs, lens)
    (4, 2, 16, 16, [1, 15, 16, 17, 32, 37]),
    (8, 1, 64, 32, [33, 1, 64, 31]),
    (3, 3, 12, 16, [48, 2, 20]),
    (6, 2, 128, 16, [70, 16]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(DECODE)))
def test_paged_attention_decode_matches_torch(dtype, case):
    hq, nkv, d, bs, lens = DECODE[case]
    kc, vc, tables = paged_setup(lens, nkv, d, bs, dtype, seed=10 + case)
    q = torch.randn(len(lens), hq, d).to(dtype)
    # int64 tables and lengths are accepted too.
    index = torch.int64 if case % 2 else torch.int32
    got = ops.paged_attention(tt(q), tt(kc), tt(vc), tt(tables.to(index)),
                              tt(torch.tensor(lens, dtype=index)))
    assert got.shape == (len(lens), hq, d) and got.dtype == TESSERA_DTYPE[dtype]
    want = ref_paged(q, kc, vc, tables, lens, list(range(len(lens) + 1)), 1 / math.sqrt(d))
    assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_paged_attention_scale_and_alibi(dtype):
    hq, nkv, d, bs, lens = 4, 2, 16, 16, [5, 17, 40]
    kc, vc, tables = paged_setup(lens, nkv, d, bs, dtype, seed=3)
    q = torch.randn(len(lens), hq, d).to(dtype)
    slopes = torch.tensor([2.0 ** -(h + 1) for h in range(hq)], dtype=dtype)
    args = (tt(q), tt(kc), tt(vc), tt(tables), tt(torch.tensor(lens, dtype=torch.int32)))
    starts = list(range(len(lens) + 1))
    got = ops.paged_attention(*args, scale=0.3)
    assert_close(got, ref_paged(q, kc, vc, tables, lens, starts, 0.3), dtype)
    got = ops.paged_attention(*args, tt(slopes), 0.3)  # infinicore's positional order
    assert_close(got, ref_paged(q, kc, vc, tables, lens, starts, 0.3, slopes), dtype)


# ---- paged_attention_prefill ----

PREFILL = [
    # (hq, nkv, d, bs, history_lens, query lens)
    (4, 2, 16, 16, [0, 16, 5, 31, 0], [1, 3, 16, 17, 40]),
    (8, 1, 32, 32, [32, 0], [32, 33]),
    (2, 2, 12, 16, [7], [1]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(PREFILL)))
def test_paged_attention_prefill_matches_torch(dtype, case):
    hq, nkv, d, bs, history, qlens = PREFILL[case]
    lens = [h + n for h, n in zip(history, qlens)]
    kc, vc, tables = paged_setup(lens, nkv, d, bs, dtype, seed=20 + case)
    cu = [0] + np.cumsum(qlens).tolist()
    q = torch.randn(cu[-1], hq, d).to(dtype)
    got = ops.paged_attention_prefill(tt(q), tt(kc), tt(vc), tt(tables),
                                      tt(torch.tensor(history, dtype=torch.int32)),
                                      tt(torch.tensor(cu, dtype=torch.int32)))
    assert got.shape == (cu[-1], hq, d)
    assert_close(got, ref_paged(q, kc, vc, tables, lens, cu, 1 / math.sqrt(d)), dtype)


def test_paged_attention_prefill_alibi():
    hq, nkv, d, bs, history, qlens = 4, 2, 16, 16, [0, 20], [18, 3]
    lens = [h + n for h, n in zip(history, qlens)]
    kc, vc, tables = paged_setup(lens, nkv, d, bs, torch.float32, seed=5)
    cu = [0, 18, 21]
    q = torch.randn(cu[-1], hq, d)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    got = ops.paged_attention_prefill(tt(q), tt(kc), tt(vc), tt(tables),
                                      tt(torch.tensor(history, dtype=torch.int64)),
                                      tt(torch.tensor(cu, dtype=torch.int64)),
                                      alibi_slopes=tt(slopes))
    want = ref_paged(q, kc, vc, tables, lens, cu, 1 / math.sqrt(d), slopes)
    assert_close(got, want, torch.float32)


def test_prefill_then_decode_through_paged_caching():
    """InfiniCore's serving loop: cache a prompt, prefill it, then cache and attend one token at a
    time; every step equals full causal attention over the tokens so far."""
    hq, nkv, d, bs, prompt, steps = 4, 2, 16, 16, 14, 5
    nb = 4
    kc = tessera.zeros(nb, nkv, d, bs)
    vc = tessera.zeros(nb, nkv, d, bs)
    table = torch.tensor([[3, 1]], dtype=torch.int32)  # positions 0..15 in block 3, then 1
    n = prompt + steps
    q, k, v = (torch.randn(n, h, d) for h in (hq, nkv, nkv))
    slots = torch.tensor([int(table[0, p // bs]) * bs + p % bs for p in range(n)])

    ops.paged_caching(tt(k[:prompt]), tt(v[:prompt]), kc, vc, tt(slots[:prompt]))
    got = ops.paged_attention_prefill(tt(q[:prompt]), kc, vc, tt(table),
                                      tt(torch.tensor([0], dtype=torch.int32)),
                                      tt(torch.tensor([0, prompt], dtype=torch.int32)))
    want = ref_attend(q[:prompt], k[:prompt].transpose(0, 1), v[:prompt].transpose(0, 1),
                      1 / math.sqrt(d))
    assert_close(got, want, torch.float32)
    for p in range(prompt, n):  # crosses into the second block at 16
        ops.paged_caching(tt(k[p:p + 1]), tt(v[p:p + 1]), kc, vc, tt(slots[p:p + 1]))
        got = ops.paged_attention(tt(q[p:p + 1]), kc, vc, tt(table),
                                  tt(torch.tensor([p + 1], dtype=torch.int32)))
        want = ref_attend(q[p:p + 1], k[:p + 1].transpose(0, 1), v[:p + 1].transpose(0, 1),
                          1 / math.sqrt(d))
        assert_close(got, want, torch.float32)


# ---- attention with a contiguous cache ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_attention_with_contiguous_cache_over_steps(dtype):
    hq, nkv, d, capacity = 6, 2, 16, 12
    kc = tt(torch.zeros(nkv, capacity, d, dtype=dtype))
    vc = tt(torch.zeros(nkv, capacity, d, dtype=dtype))
    ks, vs = [], []
    pos = 0
    for t in (5, 1, 1, 3):  # a prompt, two decode steps, a chunk
        q = torch.randn(hq, t, d).to(dtype)
        k, v = torch.randn(nkv, t, d).to(dtype), torch.randn(nkv, t, d).to(dtype)
        ks.append(k)
        vs.append(v)
        got = ops.attention(tt(q), tt(k), tt(v), kc, vc, pos)
        assert got.shape == (t, hq, d)
        k_all, v_all = torch.cat(ks, 1), torch.cat(vs, 1)
        assert_close(got, ref_attend(q.transpose(0, 1), k_all, v_all, 1 / math.sqrt(d)), dtype)
        pos += t
        assert torch.equal(th(kc)[:, :pos], k_all) and torch.equal(th(vc)[:, :pos], v_all)


# ---- forward only, typed errors ----


def test_ops_are_forward_only_and_registered_as_such():
    registry = {name: diff for name, _, _, diff in tessera.ops_registry()}
    for name in ("paged_caching", "paged_attention", "paged_attention_prefill", "attention"):
        assert registry[name] is False, name
        assert callable(getattr(tessera.ops, name))
    kc, vc, tables = paged_setup([3], 1, 16, 16, torch.float32, seed=0)
    q = tessera.randn(1, 2, 16, requires_grad=True)
    out = ops.paged_attention(q, tt(kc), tt(vc), tt(tables), tt(torch.tensor([3])))
    assert out.requires_grad is False and out.grad_fn is None


def i32(*values):
    return tt(torch.tensor(values, dtype=torch.int32))


def test_bad_inputs_raise_typed_errors_naming_the_op():
    kc, vc = tessera.zeros(4, 2, 8, 16), tessera.zeros(4, 2, 8, 16)
    tables = tt(torch.tensor([[0, 1]], dtype=torch.int32))
    q = tessera.zeros(1, 4, 8)
    k = tessera.zeros(2, 2, 8)
    slots = tt(torch.tensor([0, 1]))

    with pytest.raises(IndexError, match=r"^\[paged_caching\] expected slots in \[-1, 64\)"):
        ops.paged_caching(k, k, kc, vc, tt(torch.tensor([0, 64])))
    with pytest.raises(TypeError, match=r"^\[paged_caching\] expected k to be a float32"):
        ops.paged_caching(k.double(), k.double(), kc, vc, slots)
    with pytest.raises(TypeError, match=r"^\[paged_caching\] expected slot_mapping"):
        ops.paged_caching(k, k, kc, vc, tessera.zeros(2))
    with pytest.raises(ValueError, match=r"^\[paged_caching\] expected k and v \[N, 2, 8\]"):
        ops.paged_caching(tessera.zeros(2, 3, 8), tessera.zeros(2, 3, 8), kc, vc, slots)
    with pytest.raises(ValueError, match=r"^\[paged_caching\] expected a block size"):
        ops.paged_caching(k, k, tessera.zeros(4, 2, 8, 8), tessera.zeros(4, 2, 8, 8), slots)

    with pytest.raises(ValueError, match=r"^\[paged_attention\] expected q \[N, Hq, 8\] with Hq"):
        ops.paged_attention(tessera.zeros(1, 3, 8), kc, vc, tables, i32(4))
    with pytest.raises(IndexError, match=r"^\[paged_attention\] expected blocks in \[0, 4\)"):
        ops.paged_attention(q, kc, vc, tt(torch.tensor([[7, 1]], dtype=torch.int32)), i32(4))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] .*table's 32 positions, got 33"):
        ops.paged_attention(q, kc, vc, tables, i32(33))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] expected q \[S, Hq, D\]"):
        ops.paged_attention(q, kc, vc, tables, i32(4, 4))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] expected block_tables to be an int"):
        ops.paged_attention(q, kc, vc, tessera.zeros(1, 2), i32(4))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] expected q to be a float32"):
        ops.paged_attention(q.double(), kc, vc, tables, i32(4))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] expected alibi_slopes \[4\]"):
        ops.paged_attention(q, kc, vc, tables, i32(4), alibi_slopes=tessera.zeros(2))

    with pytest.raises(ValueError, match=r"^\[paged_attention_prefill\] expected query_start "
                                         r"\(cu_seqlens_q\) to run from 0 to 1"):
        ops.paged_attention_prefill(q, kc, vc, tables, i32(0), i32(0, 2))
    with pytest.raises(ValueError, match=r"^\[paged_attention_prefill\] expected history_lens "
                                         r"\[S\] and cu_seqlens_q \[S \+ 1\]"):
        ops.paged_attention_prefill(q, kc, vc, tables, i32(0), i32(0))
    with pytest.raises(ValueError,
                       match=r"^\[paged_attention_prefill\] expected history_lens >= 0"):
        ops.paged_attention_prefill(q, kc, vc, tables, i32(-1), i32(0, 1))
    with pytest.raises(ValueError, match=r"^\[paged_attention_prefill\] .*table's 32 positions"):
        ops.paged_attention_prefill(q, kc, vc, tables, i32(32), i32(0, 1))

    ck, cv = tessera.zeros(2, 6, 8), tessera.zeros(2, 6, 8)
    with pytest.raises(IndexError, match=r"^\[attention\] expected 0 <= pos and pos \+ 2 <= the "
                                         r"cache's 6 positions, got pos 5"):
        ops.attention(tessera.zeros(4, 2, 8), k.reshape(2, 2, 8), k.reshape(2, 2, 8), ck, cv, 5)
    with pytest.raises(ValueError, match=r"^\[attention\] expected q \[Hq, T, D\]"):
        ops.attention(tessera.zeros(3, 2, 8), tessera.zeros(2, 2, 8), tessera.zeros(2, 2, 8),
                      ck, cv, 0)
    with pytest.raises(TypeError, match=r"^\[attention\] expected q, k, v, k_cache and v_cache "
                                        r"of one dtype"):
        ops.attention(tessera.zeros(4, 2, 8), tessera.zeros(2, 2, 8).double(),
                      tessera.zeros(2, 2, 8), ck, cv, 0)
