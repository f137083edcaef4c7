"""Op cases for views, shape and indexing ops, the nn functional ops and InfiniCore's set. Ops
that torch 1.13 lacks (rms_norm, rope, scaled_dot_product_attention, ...) get a reference
composed of torch ops."""
import torch
import torch.nn.functional as TF

from optable import Case, I, In, K, M, P, R
from paged_reference import ref_attend, ref_paged, ref_paged_caching

# ---- torch references for ops torch 1.13 does not have ----


def rms_norm_ref(x, w=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def rope_ref(x, cos, sin, interleaved=False):
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    if interleaved:  # pairs (x[2i], x[2i+1])
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    half = x.shape[-1] // 2  # pairs (x[i], x[i + D/2])
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def rope_tables_ref(seq_len, head_dim, theta=10000.0, dtype=torch.float32):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta ** (-2 * i / head_dim)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def sdpa_ref(q, k, v, mask=None, is_causal=False, scale=None):
    groups = q.shape[1] // k.shape[1]  # GQA: each KV head serves `groups` query heads
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if is_causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    return torch.softmax(scores, -1) @ v


def causal_softmax_ref(x):
    # InfiniCore's reference: hide j > i + (S - T), the causal mask aligned bottom-right.
    hidden = torch.ones_like(x).tril(diagonal=-1).flip(dims=[-2, -1]) == 1
    return torch.softmax(x.masked_fill(hidden, float("-inf")), dim=-1)


def random_sample_ref(logits, random_val, topp, topk, temperature):
    # InfiniCore's reference: sort, softmax, cumulative sums, then a left-sided search.
    def row(x):
        if topp <= 0 or topk == 1 or temperature == 0:
            return torch.argmax(x)
        vals, idx = torch.sort(x.double(), descending=True)
        cum = torch.cumsum(torch.softmax((vals - vals[0]) / temperature, 0), 0)
        k = x.numel() if topk == 0 else min(topk, x.numel())
        threshold = min(cum[k - 1].item(), topp * cum[-1].item()) * random_val
        return idx[min(int(torch.searchsorted(cum, threshold)), x.numel() - 1)]

    return torch.stack([row(r) for r in logits]) if logits.dim() == 2 else row(logits)


# ---- cases ----


def view_cases():
    return [
        Case("view", [R(3, 4)], lambda m, x: x.view(2, 6)),
        Case("view", [R(3, 4)], lambda m, x: m.reshape(x, (-1,)).view((4, 3)), label="tuple_shape"),
        Case("reshape", [R(4, 3, nc=True)], lambda m, x: x.reshape(2, 6), label="nc_copies"),
        Case("permute", [R(2, 3, 4)], lambda m, x: x.permute(2, 0, 1) * 2),
        Case("transpose", [R(2, 3, 4)], lambda m, x: m.transpose(x, 0, 2) * 2),
        Case("narrow", [R(5, 4)], lambda m, x: m.narrow(x, 0, 1, 3) * 2),
        Case(
            "slice",
            [R(4, 6)],
            lambda m, x: m.slice(x, 1, 1, None, 2) * 2,
            ref=lambda t, x: x[:, 1::2] * 2,
        ),
        Case("slice", [R(4, 6)], lambda m, x: x[1:-1, ::3] * 2, label="getitem"),
        Case("select", [R(4, 6)], lambda m, x: m.select(x, 1, -2) * 2),
        Case("select", [R(4, 6)], lambda m, x: x[2] * 2, label="getitem"),
        Case("expand", [R(3, 1)], lambda m, x: x.expand(3, 4) * 2),
        Case("expand", [R(4)], lambda m, x: x.expand(2, -1) * 2, label="new_dim"),
        Case("squeeze", [R(3, 1, 4)], lambda m, x: m.squeeze(x) * 2),
        Case("squeeze", [R(3, 1, 4)], lambda m, x: x.squeeze(1) * 2, label="dim"),
        Case("unsqueeze", [R(3, 4)], lambda m, x: m.unsqueeze(x, -1) * 2),
        Case("unsqueeze", [R(3, 4)], lambda m, x: x[:, None] * 2, label="getitem_none"),
        Case("flatten", [R(2, 3, 4)], lambda m, x: m.flatten(x, 1) * 2),
        Case("unflatten", [R(2, 12)], lambda m, x: x.unflatten(1, (3, 4)) * 2),
        Case("as_strided", [R(4, 5)], lambda m, x: m.as_strided(x, (3, 3), (5, 1), 1) * 2),
        Case(
            "rearrange",
            [R(2, 3, 8)],
            lambda m, x: m.rearrange(x, "b t (h d) -> b h t d", h=2),
            ref=lambda t, x: x.reshape(2, 3, 2, 4).permute(0, 2, 1, 3),
        ),
        Case(
            "rearrange",
            [R(2, 3, 4, 5, nc=True)],
            lambda m, x: m.rearrange(x, "b h t d -> b t (h d)"),
            ref=lambda t, x: x.permute(0, 2, 1, 3).reshape(2, 4, 15),
            label="merge_nc",
        ),
        Case(
            "rearrange",
            [R(2, 3, 1, 6)],
            lambda m, x: x.rearrange("... 1 (a b) -> ... b a", b=3),
            ref=lambda t, x: x.reshape(2, 3, 2, 3).transpose(-1, -2),
            label="ellipsis_unit",
        ),
    ]


def shape_cases():
    return [
        Case("cat", [R(2, 3), R(4, 3, nc=True)], lambda m, a, b: m.cat([a, b], 0)),
        Case("cat", [R(2, 3), R(2, 1)], lambda m, a, b: m.cat((a, b), dim=1), label="dim1"),
        Case("stack", [R(2, 3), R(2, 3)], lambda m, a, b: m.stack([a, b], dim=1)),
        Case("split", [R(5, 3)], lambda m, x: m.split(x, 2)),
        Case("split", [R(2, 6)], lambda m, x: x.split([1, 2, 3], dim=1), label="sections"),
        Case("chunk", [R(2, 7)], lambda m, x: m.chunk(x, 3, dim=1)),
        Case("repeat", [R(2, 3)], lambda m, x: x.repeat(2, 1, 3)),
        Case("tril", [R(4, 5)], lambda m, x: m.tril(x)),
        Case("tril", [R(2, 4, 4)], lambda m, x: x.tril(-1), label="batched_k"),
        Case("triu", [R(4, 5)], lambda m, x: m.triu(x, 1)),
        Case("flip", [R(3, 4)], lambda m, x: m.flip(x, (0, 1))),
        Case("roll", [R(3, 4)], lambda m, x: m.roll(x, (1, -1), (0, 1))),
        Case("roll", [R(3, 4)], lambda m, x: m.roll(x, 2), label="flat"),
    ]


def indexing_cases():
    return [
        Case("index_select", [R(5, 3), I((4,), 5)], lambda m, x, i: m.index_select(x, 0, i)),
        Case("gather", [R(3, 5), I((3, 4), 5)], lambda m, x, i: m.gather(x, 1, i)),
        Case(
            "scatter",
            [R(3, 5), In((3, 4), "perm", high=5), R(3, 4)],
            lambda m, x, i, s: m.scatter(x, 1, i, s),
        ),
        Case(
            "scatter",
            [R(3, 5), In((3, 4), "perm", high=5)],
            lambda m, x, i: x.scatter(1, i, value=0.5),
            label="value",
        ),
        Case(
            "scatter_add",
            [R(3, 5), I((3, 6), 5), R(3, 6)],
            lambda m, x, i, s: m.scatter_add(x, 1, i, s),
        ),
        Case(
            "index_add",
            [R(5, 3), I((4,), 5), R(4, 3)],
            lambda m, x, i, s: m.index_add(x, 0, i, s, alpha=2),
        ),
        Case("masked_fill", [R(3, 4), M(4)], lambda m, x, k: m.masked_fill(x, k, -1.5)),
        Case("masked_select", [R(3, 4), M(3, 4)], lambda m, x, k: m.masked_select(x, k)),
        Case("masked_select", [R(3, 4), M(3, 4)], lambda m, x, k: x[k], label="getitem_mask"),
        Case(
            "take_along_dim", [R(3, 5), I((3, 2), 5)], lambda m, x, i: m.take_along_dim(x, i, dim=1)
        ),
        Case(
            "one_hot",
            [I((4,), 5)],
            lambda m, i: m.nn.functional.one_hot(i, 6),
            dtypes=(),
            grad=False,
        ),
        Case("embedding", [R(6, 3), I((2, 4), 6)], lambda m, w, i: m.nn.functional.embedding(i, w)),
        Case(
            "embedding",
            [R(6, 3), I((5,), 6)],
            lambda m, w, i: m.nn.functional.embedding(i, w, padding_idx=0),
            label="padding_idx",
        ),
        Case(
            "index_select",
            [R(5, 3), I((2, 3), 5)],
            lambda m, x, i: x[i] * 1,
            label="getitem_tensor",
        ),
    ]


def nn_cases():
    return [
        Case("softmax", [R(3, 5)], lambda m, x: m.softmax(x, dim=1)),
        Case("softmax", [R(2, 4, 3, nc=True)], lambda m, x: x.softmax(1), label="middle_dim_nc"),
        Case("log_softmax", [R(3, 5)], lambda m, x: m.nn.functional.log_softmax(x, dim=-1)),
        Case("log_softmax", [R(5, 3)], lambda m, x: m.log_softmax(x * 30, 0), label="large_dim0"),
        Case(
            "layer_norm",
            [R(4, 8), R(8), R(8)],
            lambda m, x, w, b: m.nn.functional.layer_norm(x, (8,), w, b),
        ),
        Case(
            "layer_norm",
            [R(2, 3, 6, nc=True)],
            lambda m, x: m.nn.functional.layer_norm(x, [6], eps=1e-3),
            label="plain_nc",
        ),
        Case(
            "rms_norm",
            [R(4, 8), R(8)],
            lambda m, x, w: m.nn.functional.rms_norm(x, w),
            ref=lambda t, *a: rms_norm_ref(*a),
        ),
        Case(
            "rms_norm",
            [R(3, 4, 6, nc=True)],
            lambda m, x: m.rms_norm(x, eps=1e-4),
            ref=lambda t, x: rms_norm_ref(x, eps=1e-4),
            label="plain_nc",
        ),
        Case(
            "add_rms_norm",
            [R(4, 6), R(4, 6), R(6)],
            lambda m, x, r, w: m.nn.functional.add_rms_norm(x, r, w),
            ref=lambda t, x, r, w: (x + r, rms_norm_ref(x + r, w)),
        ),
        Case(
            "dropout",
            [R(3, 4)],
            lambda m, x: m.nn.functional.dropout(x, 0.5, training=False),
            label="eval",
        ),
        Case(
            "cross_entropy",
            [R(5, 7), I((5,), 7)],
            lambda m, x, t: m.nn.functional.cross_entropy(x, t),
        ),
        Case(
            "cross_entropy",
            [R(6, 4), I((6,), 4), P(4, grad=False)],
            lambda m, x, t, w: m.nn.functional.cross_entropy(
                x, t, weight=w, reduction="sum", label_smoothing=0.1
            ),
            label="weight_sum_smoothing",
        ),
        Case(
            "cross_entropy",
            [R(2, 3, 4), I((2, 4), 3)],
            lambda m, x, t: m.nn.functional.cross_entropy(x, t, reduction="none"),
            label="spatial",
        ),
        Case(
            "cross_entropy",
            [R(4, 5), R(4, 5)],
            lambda m, x, p: m.nn.functional.cross_entropy(x, m.softmax(p, 1)),
            label="probabilities",
        ),
        Case(
            "nll_loss",
            [R(5, 4), I((5,), 4)],
            lambda m, x, t: m.nn.functional.nll_loss(m.log_softmax(x, 1), t),
        ),
        Case(
            "nll_loss",
            [R(5, 4), I((5,), 4), P(4, grad=False)],
            lambda m, x, t, w: m.nn.functional.nll_loss(x, t, weight=w, ignore_index=2),
            label="weight_ignore",
        ),
        Case("mse_loss", [R(3, 4), R(3, 4)], lambda m, x, y: m.nn.functional.mse_loss(x, y)),
        Case(
            "mse_loss",
            [R(3, 4), R(4)],
            lambda m, x, y: m.nn.functional.mse_loss(x, y.expand(3, 4), reduction="sum"),
            label="sum",
        ),
        Case(
            "scaled_dot_product_attention",
            [R(2, 2, 3, 4), R(2, 2, 5, 4), R(2, 2, 5, 4)],
            lambda m, q, k, v: m.nn.functional.scaled_dot_product_attention(q, k, v),
            ref=lambda t, *a: sdpa_ref(*a),
        ),
        Case(
            "scaled_dot_product_attention",
            [R(1, 4, 4, 8), R(1, 2, 4, 8), R(1, 2, 4, 8)],
            lambda m, q, k, v: m.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ),
            ref=lambda t, q, k, v: sdpa_ref(q, k, v, is_causal=True),
            label="gqa_causal",
        ),
        Case(
            "scaled_dot_product_attention",
            [R(1, 2, 3, 4), R(1, 2, 3, 4), R(1, 2, 3, 4), M(3, 3)],
            lambda m, q, k, v, mask: m.nn.functional.scaled_dot_product_attention(
                q, k, v, mask | m.eye(3, dtype=m.bool), scale=0.3
            ),
            ref=lambda t, q, k, v, mask: sdpa_ref(
                q, k, v, mask | t.eye(3, dtype=t.bool), scale=0.3
            ),
            label="bool_mask_scale",
        ),
        Case(
            "rope",
            [R(2, 3, 8), K(3, 4), K(3, 4)],
            lambda m, x, c, s: m.nn.functional.rope(x, c, s),
            ref=lambda t, *a: rope_ref(*a),
        ),
        Case(
            "rope",
            [R(1, 2, 3, 6), K(3, 3), K(3, 3)],
            lambda m, x, c, s: m.rope(x, c, s, interleaved=True),
            ref=lambda t, x, c, s: rope_ref(x, c, s, True),
            label="interleaved",
        ),
        Case(
            "rope_tables",
            [],
            lambda m: m.nn.functional.rope_tables(5, 8, 500.0, m.float64),
            ref=lambda t: rope_tables_ref(5, 8, 500.0, t.float64),
            dtypes=(),
            grad=False,
        ),
        Case(
            "linear_gelu",
            [R(2, 3, 4), R(5, 4), R(5)],
            lambda m, x, w, b: m.nn.functional.linear_gelu(x, w, b, approximate="tanh"),
            ref=lambda t, x, w, b: TF.gelu(TF.linear(x, w, b), approximate="tanh"),
        ),
        Case(
            "swiglu",
            [R(3, 4), R(3, 4)],
            lambda m, g, u: m.nn.functional.swiglu(g, u),
            ref=lambda t, g, u: TF.silu(g) * u,
        ),
        Case(
            "causal_softmax",
            [R(2, 4, 4)],
            lambda m, x: m.nn.functional.causal_softmax(x),
            ref=lambda t, *a: causal_softmax_ref(*a),
        ),
        Case(
            "causal_softmax",
            [R(2, 3, 5, nc=True)],
            lambda m, x: x.causal_softmax(),
            ref=lambda t, *a: causal_softmax_ref(*a),
            label="with_cache_nc",
        ),
        Case(
            "random_sample",
            [K(4, 32)],
            lambda m, x: m.nn.functional.random_sample(x, 0.8, 0.8, 3, 0.5),
            ref=lambda t, x: random_sample_ref(x, 0.8, 0.8, 3, 0.5),
            grad=False,
            bf16=False,
        ),
        Case(
            "random_sample",
            [K(64)],
            lambda m, x: m.random_sample(x, 0.37, 0.9, 0, 1.3),
            ref=lambda t, x: random_sample_ref(x, 0.37, 0.9, 0, 1.3),
            grad=False,
            bf16=False,
            label="nucleus_1d",
        ),
        Case(
            "random_sample",
            [K(3, 16)],
            lambda m, x: x.random_sample(0.5, 1.0, 1, 1.0),
            ref=lambda t, x: random_sample_ref(x, 0.5, 1.0, 1, 1.0),
            grad=False,
            label="greedy",
        ),
    ]


def kv_cache_cases():
    # tessera.ops' KV-cache attention (infinicore.ops); caches [num_blocks, nkv, d, block_size].
    # Scattered tables; sequences 1 and 2 share block 2. Forward only.
    tables, lens = [[5, 0], [2, 7], [2, 6]], [1, 17, 32]
    history, cu = [0, 16, 5], [0, 3, 4, 24]

    def i32(m, values):
        return m.tensor(values, dtype=m.int32)

    def paged(q, kc, vc, lens, starts):
        table = torch.tensor(tables, dtype=torch.int32)
        return ref_paged(q, kc, vc, table, lens, starts, q.shape[-1] ** -0.5).to(q.dtype)

    def attention_ref(t, q, k, v, kc, vc):
        k_all, v_all = torch.cat([kc[:, :2], k], 1), torch.cat([vc[:, :2], v], 1)
        return ref_attend(q.transpose(0, 1), k_all, v_all, 8 ** -0.5).to(q.dtype)

    slots = [17, 3, -1, 63, 32]
    return [
        Case(
            "paged_caching",
            [K(5, 2, 16), K(5, 2, 16), K(4, 2, 16, 16), K(4, 2, 16, 16)],
            lambda m, k, v, kc, vc: m.ops.paged_caching(
                k, v, kc.clone(), vc.clone(), m.tensor(slots)
            ),
            ref=lambda t, k, v, kc, vc: ref_paged_caching(k, v, kc, vc, t.tensor(slots)),
            grad=False,
        ),
        Case(
            "paged_attention",
            [K(3, 4, 16), K(8, 2, 16, 16), K(8, 2, 16, 16)],
            lambda m, q, kc, vc: m.ops.paged_attention(
                q, kc, vc, i32(m, tables), i32(m, lens)
            ),
            ref=lambda t, q, kc, vc: paged(q, kc, vc, lens, [0, 1, 2, 3]),
            grad=False,
        ),
        Case(
            "paged_attention_prefill",
            [K(24, 4, 16), K(8, 2, 16, 16), K(8, 2, 16, 16)],
            lambda m, q, kc, vc: m.ops.paged_attention_prefill(
                q, kc, vc, i32(m, tables), i32(m, history), i32(m, cu)
            ),
            ref=lambda t, q, kc, vc: paged(q, kc, vc, [3, 17, 25], cu),
            grad=False,
        ),
        Case(
            "attention",
            [K(4, 3, 8), K(2, 3, 8), K(2, 3, 8), K(2, 8, 8), K(2, 8, 8)],
            lambda m, q, k, v, kc, vc: m.ops.attention(q, k, v, kc.clone(), vc.clone(), 2),
            ref=attention_ref,
            grad=False,
        ),
    ]


CASES = view_cases() + shape_cases() + indexing_cases() + nn_cases() + kv_cache_cases()
