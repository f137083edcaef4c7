"""Plain PyTorch 1.13 references for tessera.ops' KV-cache attention ops: gather a sequence's
blocks through its table, build the causal mask (bottom-right aligned), softmax; in float64."""
import torch


def gather(cache, table, length):
    """Positions 0..length-1 of a sequence from a cache [num_blocks, nkv, d, block_size] as
    [nkv, length, d]."""
    nkv, d, bs = cache.shape[1:]
    nblk = -(-length // bs)
    blocks = cache[table[:nblk].long()]  # [nblk, nkv, d, bs]
    return blocks.permute(1, 0, 3, 2).reshape(nkv, nblk * bs, d)[:, :length]


def ref_attend(q, k, v, scale, alibi=None):
    """q [T, hq, d] as the last T of the L positions of k, v [nkv, L, d]; returns [T, hq, d]."""
    T, hq, _ = q.shape
    nkv, L, _ = k.shape
    k = k.double().repeat_interleave(hq // nkv, 0)
    v = v.double().repeat_interleave(hq // nkv, 0)
    s = torch.einsum("thd,hld->htl", q.double(), k) * scale
    pos, j = torch.arange(T) + (L - T), torch.arange(L)
    if alibi is not None:
        s = s + alibi.double()[:, None, None] * (j[None, :] - pos[:, None])
    s = s.masked_fill(j[None, :] > pos[:, None], float("-inf"))
    return torch.einsum("htl,hld->thd", torch.softmax(s, -1), v)


def ref_paged(q, kc, vc, tables, lens, starts, scale, alibi=None):
    """Sequence s owns query rows starts[s]..starts[s+1], the last of its lens[s] positions."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for s, length in enumerate(lens):
        a, b = starts[s], starts[s + 1]
        if a < b:
            out[a:b] = ref_attend(q[a:b], gather(kc, tables[s], length),
                                  gather(vc, tables[s], length), scale, alibi)
    return out


def ref_paged_caching(k, v, k_cache, v_cache, slots):
    """Copies of the caches with token n written at slot slots[n] (-1 skips it)."""
    out = []
    for new, cache in ((k, k_cache), (v, v_cache)):
        nb, nkv, d, bs = cache.shape
        # Slot-major copy [num_blocks * bs, nkv, d], written, then back to the cache layout.
        flat = cache.permute(0, 3, 1, 2).reshape(nb * bs, nkv, d).clone()
        keep = slots >= 0
        flat[slots[keep].long()] = new[keep]
        out.append(flat.reshape(nb, bs, nkv, d).permute(0, 2, 3, 1).contiguous())
    return out
