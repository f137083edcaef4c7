"""tessera.llm (vLLM's LLM, SamplingParams and AsyncLLM over the C++ engine) on llama2.c's
stories260K: greedy output equal to a float64 numpy decode of the model file written here and to
`tessera generate`; batched equal to single; stop strings, lengths, seeds, n > 1, chat, errors;
the GIL released while the engine works; async streams that add up to the offline result,
interleave, and free their KV blocks when cancelled or aborted; LoRA adapters (LoRARequest)
decoding as a numpy model of the merged weights."""
import _thread
import asyncio
import json
import os
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.llm import LLM, AsyncLLM, RequestOutput, SamplingParams


def shared_data(name):
    """$TESSERA_SHARED_DATA/name, else ../shared/data beside the repository (as the C++ tests)."""
    root = os.environ.get("TESSERA_SHARED_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return base / name


MODEL = shared_data("stories260K.bin")
TOKENIZER = shared_data("stories260K_idtok.bin")
pytestmark = pytest.mark.skipif(not (MODEL.exists() and TOKENIZER.exists()),
                                reason=f"shared test data missing: {MODEL}, {TOKENIZER}")
END_IDS = (1, 2)  # llama2.c's BOS and EOS both end a story
# stories260K_idtok.bin spells a token as its bytes or "{id}": text prompts become byte tokens
# (which the model rarely saw), so most prompts here are token ids after BOS.
PROMPTS = ["Once upon a time", [1, 461, 430], [1, 309, 295, 446], [1, 306, 473, 283, 330]]
GREEDY = dict(temperature=0.0, max_tokens=48)


@pytest.fixture(scope="module")
def llm():
    return LLM(model=str(MODEL), tokenizer=str(TOKENIZER), max_num_seqs=8, seed=0)


# --- the reference: llama2.c's forward in float64 numpy, the whole sequence each step ---------

def load_llama2c(path):
    data = Path(path).read_bytes()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("7i", data[:28])
    shared, vocab = vocab > 0, abs(vocab)
    flat = np.frombuffer(data, dtype=np.float32, offset=28)
    hs = dim // heads
    offset = 0

    def take(*shape):
        nonlocal offset
        n = int(np.prod(shape))
        a = flat[offset:offset + n].reshape(shape).astype(np.float64)
        offset += n
        return a

    w = dict(emb=take(vocab, dim), rms_att=take(layers, dim), wq=take(layers, dim, dim),
             wk=take(layers, kv_heads * hs, dim), wv=take(layers, kv_heads * hs, dim),
             wo=take(layers, dim, dim), rms_ffn=take(layers, dim),
             w1=take(layers, hidden, dim), w2=take(layers, dim, hidden),
             w3=take(layers, hidden, dim), rms_final=take(dim))
    take(seq_len, hs)  # llama2.c's stored RoPE tables (recomputed below)
    w["cls"] = w["emb"] if shared else take(vocab, dim)
    w.update(layers=layers, heads=heads, kv_heads=kv_heads, hs=hs)
    return w


def last_logits(w, ids):
    T, H, KV, hs = len(ids), w["heads"], w["kv_heads"], w["hs"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g  # noqa: E731
    angle = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, hs, 2) / hs)[None]
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]

    def rope(q):  # rotates the pairs (2i, 2i + 1) of every head
        out = np.empty_like(q)
        out[..., 0::2] = q[..., 0::2] * cos - q[..., 1::2] * sin
        out[..., 1::2] = q[..., 0::2] * sin + q[..., 1::2] * cos
        return out

    x = w["emb"][ids]
    causal = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(w["layers"]):
        h = rms(x, w["rms_att"][l])
        q = rope((h @ w["wq"][l].T).reshape(T, H, hs))
        k = np.repeat(rope((h @ w["wk"][l].T).reshape(T, KV, hs)), H // KV, axis=1)
        v = np.repeat((h @ w["wv"][l].T).reshape(T, KV, hs), H // KV, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hs)
        att[:, causal] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", att, v).reshape(T, -1) @ w["wo"][l].T
        h = rms(x, w["rms_ffn"][l])
        gate = h @ w["w1"][l].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ w["w3"][l].T)) @ w["w2"][l].T
    return rms(x[-1], w["rms_final"]) @ w["cls"].T


def greedy_reference(w, prompt, max_tokens):
    """The greedy tokens and each step's log_softmax."""
    ids, out, logprobs = list(prompt), [], []
    while len(out) < max_tokens:
        logits = last_logits(w, ids)
        logprobs.append(logits - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
        out.append(int(np.argmax(logits)))
        ids.append(out[-1])
        if out[-1] in END_IDS:
            break
    return out, logprobs


# --- offline generation -------------------------------------------------------------------------

def test_greedy_equals_a_numpy_decode_of_the_model_file(llm):
    w = load_llama2c(MODEL)
    outs = llm.generate(PROMPTS[:3], SamplingParams(**GREEDY))
    assert outs[0].prompt == PROMPTS[0] and outs[1].prompt is None
    for prompt, out in zip(PROMPTS, outs):
        assert isinstance(out, RequestOutput) and out.finished
        assert out.prompt_token_ids[0] == 1  # BOS, as `tessera generate` encodes text
        ref, logprobs = greedy_reference(w, out.prompt_token_ids, GREEDY["max_tokens"])
        got = out.outputs[0]
        assert got.token_ids == ref, prompt
        assert got.finish_reason == ("stop" if ref[-1] in END_IDS else "length")
        assert got.index == 0 and len(got.text) > 20 and got.logprobs is None
        want = sum(lp[t] for lp, t in zip(logprobs, ref))
        assert got.cumulative_logprob == pytest.approx(want, rel=1e-4)


def test_logprobs_are_the_models_log_softmax_with_the_top_k(llm):
    w = load_llama2c(MODEL)
    out = llm.generate([PROMPTS[3]], SamplingParams(temperature=0, max_tokens=6,
                                                    logprobs=3))[0].outputs[0]
    ref, logprobs = greedy_reference(w, PROMPTS[3], 6)
    assert out.token_ids == ref and len(out.logprobs) == len(ref)
    tok = llm.get_tokenizer()
    for token, entry, lp in zip(ref, out.logprobs, logprobs):
        top = [int(t) for t in np.argsort(-lp, kind="stable")[:3]]
        assert list(entry) == top and entry[token].rank == 1  # greedy: the best one
        for rank, t in enumerate(top, 1):
            assert entry[t].rank == rank and entry[t].decoded_token == tok.decode([t])
            assert entry[t].logprob == pytest.approx(lp[t], abs=1e-4)
    assert out.cumulative_logprob == pytest.approx(
        sum(e[t].logprob for e, t in zip(out.logprobs, ref)))


def test_greedy_text_equals_tessera_generate(llm):
    cli = Path(tessera.__file__).resolve().parents[2] / "bin" / "tessera"
    if not cli.exists():
        pytest.skip(f"the tessera CLI is not built: {cli}")
    out = llm.generate(PROMPTS[0], SamplingParams(**GREEDY))[0].outputs[0]
    printed = subprocess.run(
        [str(cli), "generate", "--model", str(MODEL), "--tokenizer", str(TOKENIZER), "--prompt",
         PROMPTS[0], "--temperature", "0", "--max-new-tokens", str(GREEDY["max_tokens"])],
        check=True, capture_output=True, text=True).stdout
    assert printed == PROMPTS[0] + out.text + "\n"


def test_batched_prompts_equal_single_prompts_in_order(llm):
    for params in (SamplingParams(**GREEDY), SamplingParams(temperature=0.9, top_p=0.9,
                                                            max_tokens=32, seed=11)):
        batch = llm.generate(PROMPTS, params)
        assert [o.prompt_token_ids for o in batch[1:]] == PROMPTS[1:]
        for prompt, got in zip(PROMPTS, batch):
            alone = llm.generate([prompt], params)[0]
            assert got.outputs[0].token_ids == alone.outputs[0].token_ids
            assert got.outputs[0].text == alone.outputs[0].text


def test_prefix_caching_reuses_a_shared_prompt_and_keeps_the_output():
    # A 40-token prompt is two full blocks of 16 and 8 more: the second time, the two blocks come
    # from the cache, and the text is that of an engine without the cache.
    prompt = [1] + [int(t) for t in np.random.default_rng(5).integers(3, 512, 39)]
    outputs = {}
    for caching in (False, True):
        engine = LLM(model=str(MODEL), tokenizer=str(TOKENIZER), enable_prefix_caching=caching)
        first = engine.generate([prompt], SamplingParams(**GREEDY))[0].outputs[0].token_ids
        second = engine.generate([prompt], SamplingParams(**GREEDY))[0].outputs[0].token_ids
        assert first == second
        outputs[caching] = first
        assert engine.stats()["prefix_cache_hits"] == (32 if caching else 0)
        assert engine.stats()["prefix_cache_queries"] == (2 * len(prompt) if caching else 0)
    assert outputs[True] == outputs[False]


def test_speculative_decoding_keeps_every_output_and_counts_its_drafts(llm):
    # vLLM's ngram speculative_config: the same tokens, logprobs and finish reasons as without,
    # greedy and seeded; the engine's stats count what it drafted and what was accepted.
    spec = LLM(model=str(MODEL), tokenizer=str(TOKENIZER), max_num_seqs=8, seed=0,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                   "prompt_lookup_max": 3, "prompt_lookup_min": 1,
                                   "adaptive": False})
    for params in (SamplingParams(temperature=0.0, max_tokens=120, logprobs=2),
                   SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=120,
                                  frequency_penalty=0.3)):
        want = llm.generate(PROMPTS, params)
        got = spec.generate(PROMPTS, params)
        for w, g in zip(want, got):
            assert g.outputs[0].token_ids == w.outputs[0].token_ids
            assert g.outputs[0].text == w.outputs[0].text
            assert g.outputs[0].finish_reason == w.outputs[0].finish_reason
            assert g.outputs[0].cumulative_logprob == w.outputs[0].cumulative_logprob
    stats = spec.stats()
    assert 0 < stats["spec_accepted_tokens"] <= stats["spec_draft_tokens"]
    assert stats["spec_num_drafts"] > 0
    assert llm.stats()["spec_draft_tokens"] == 0
    with pytest.raises(ValueError, match="ngram"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER),
            speculative_config={"method": "eagle", "num_speculative_tokens": 2})


def check_prompt_logprobs(got, prompt, k, w, tok):
    """vLLM's prompt_logprobs: None, then per token the numpy model's log_softmax at the position
    before it, for it and the top k."""
    assert len(got) == len(prompt) and got[0] is None
    for i in range(1, len(prompt)):
        logits = last_logits(w, prompt[:i])
        lp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        entry = got[i]
        assert entry[prompt[i]].logprob == pytest.approx(lp[prompt[i]], abs=1e-4)
        top = [int(t) for t in np.argsort(-lp, kind="stable")[:k]]
        assert [t for t, e in entry.items() if e.rank is not None] == top
        for rank, t in enumerate(top, 1):
            assert entry[t].rank == rank and entry[t].decoded_token == tok.decode([t])
            assert entry[t].logprob == pytest.approx(lp[t], abs=1e-4)


def test_prompt_logprobs_score_the_prompt_as_vllm(llm):
    # What lm-evaluation-harness's vllm backend sends to score a continuation: max_tokens 1 and
    # prompt_logprobs. Computed once per request (n = 2 here), and None unless asked.
    w = load_llama2c(MODEL)
    prompt = PROMPTS[3]
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1, n=2,
                                                prompt_logprobs=2))[0]
    check_prompt_logprobs(out.prompt_logprobs, prompt, 2, w, llm.get_tokenizer())
    assert llm.generate([prompt], SamplingParams(max_tokens=1))[0].prompt_logprobs is None
    one = llm.generate([[1]], SamplingParams(max_tokens=1, prompt_logprobs=0))[0]
    assert one.prompt_logprobs == [None]
    with pytest.raises(ValueError, match="prompt_logprobs None or >= 0"):
        SamplingParams(prompt_logprobs=-1)


def check_greedy_follows_the_model(engine, w, share):
    """Every greedy token's logprob within share x the logits' scale of the numpy model w's, and
    each its best token up to that."""
    out = engine.generate([PROMPTS[3]], SamplingParams(temperature=0, max_tokens=16,
                                                       logprobs=1))[0].outputs[0]
    assert len(out.token_ids) > 4
    ids = list(PROMPTS[3])
    for token, entry in zip(out.token_ids, out.logprobs):
        logits = last_logits(w, ids)
        lp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        tol = share * np.abs(logits).max()
        assert entry[token].logprob == pytest.approx(lp[token], abs=tol)
        assert lp[token] >= lp.max() - tol
        ids.append(token)


def test_bfloat16_kv_cache_follows_the_model_within_its_rounding():
    # Keys and values are rounded to bfloat16 as they are stored: within bfloat16's relative
    # precision (2^-8) of the logits' scale (up to ~14 here; the largest miss is 0.03, and the
    # float32 cache agrees to 1e-4).
    check_greedy_follows_the_model(
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), kv_cache_dtype="bfloat16"),
        load_llama2c(MODEL), 2 ** -8)
    with pytest.raises(ValueError, match="KV cache dtype of auto, float32 or bfloat16"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), kv_cache_dtype="fp8")


def test_kv_cache_memory_sizes_the_cache_in_bytes():
    # stories260K: K and V of 5 layers x 4 KV heads x 8 dims per token, 16 tokens a block.
    block = 16 * 2 * 5 * 4 * 8 * 4
    for kv_cache_dtype, blocks in (("auto", 3), ("bfloat16", 6)):
        engine = LLM(model=str(MODEL), tokenizer=str(TOKENIZER), kv_cache_dtype=kv_cache_dtype,
                     kv_cache_memory_bytes=3 * block + 100)
        assert engine.stats()["blocks_total"] == blocks
    with pytest.raises(ValueError, match="not with num_blocks"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), num_blocks=4, kv_cache_memory_bytes=block)


def test_min_tokens_and_included_stop_strings(llm):
    prompt = [[1, 461, 430]]
    free = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12,
                                               ignore_eos=True))[0].outputs[0]
    first = free.token_ids[0]
    held = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12,
                                               stop_token_ids=[first], min_tokens=3))[0].outputs[0]
    assert len(held.token_ids) >= 4 and first not in held.token_ids[:3]
    stop = free.text[5:8]
    kept = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True,
                                               stop=[stop], include_stop_str_in_output=True))
    assert kept[0].outputs[0].text == free.text[:free.text.index(stop) + 3]
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=2, min_tokens=3)


def test_max_model_len_caps_sequences_and_hf_overrides_need_a_config():
    engine = LLM(model=str(MODEL), tokenizer=str(TOKENIZER), max_model_len=40)
    assert engine._engine.max_model_len == 40
    out = engine.generate([[1, 461, 430]], SamplingParams(temperature=0.0, max_tokens=100,
                                                          ignore_eos=True)).pop().outputs[0]
    assert len(out.token_ids) <= 37 and (len(out.token_ids) == 37) == (out.finish_reason == "length")
    with pytest.raises(ValueError, match="prompt of 1 to 39 tokens"):
        engine.generate([[1] * 40])
    with pytest.raises(ValueError, match=r"max_model_len in \[0, 512\]"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), max_model_len=513)
    # A llama2.c file has no config to override (Hugging Face folders and Tessera runs do: the
    # C++ tests load them with overrides).
    with pytest.raises(ValueError, match="a model with a config to apply overrides to"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), hf_overrides={"max_seq_len": 64})


def test_bfloat16_weights_follow_the_model_within_their_rounding():
    # The CPU runner's linear weights rounded to bfloat16 once (the arithmetic stays float32):
    # within 1% of the logits' scale (their 2^-9 rounding compounds over 5 layers and the
    # lm_head; the largest miss here is 0.06 of ~14).
    for dtype in ("bfloat16", tessera.bfloat16):
        check_greedy_follows_the_model(
            LLM(model=str(MODEL), tokenizer=str(TOKENIZER), dtype=dtype), load_llama2c(MODEL), 0.01)
    with pytest.raises(ValueError, match="dtype of auto, float32 or bfloat16"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), dtype="float16")


def int8_weights(w):
    """w with every linear matrix (the classifier too, not the embedding lookup) replaced by its
    per-row int8 quantization, computed in float32 as the runner does: s = max |row| / 127,
    q = round-half-even(row / s) clamped to +-127, row' = q s."""
    def quantize(m):
        m32 = m.astype(np.float32)
        s = np.abs(m32).max(-1, keepdims=True) / np.float32(127)
        s[s == 0] = 1
        return np.clip(np.rint(m32 / s), -127, 127).astype(np.float64) * s.astype(np.float64)

    q = dict(w)
    for name in ("wq", "wk", "wv", "wo", "w1", "w2", "w3", "cls"):
        q[name] = quantize(w[name])
    return q


def test_int8_weights_equal_a_numpy_model_of_the_quantized_weights():
    # Per-channel int8 is the float32 forward of the dequantized weights: it agrees with numpy's
    # (float64) to 1e-4 of the logits' scale. Against the unquantized model it misses by up to
    # 0.4 here (this 64-wide model's rows are coarse at 8 bits) and even changes the greedy path,
    # which is why the oracle quantizes.
    check_greedy_follows_the_model(
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), quantization="int8"),
        int8_weights(load_llama2c(MODEL)), 1e-4)
    with pytest.raises(ValueError, match="expected a quantization of none or int8"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), quantization="awq")


def test_prompt_forms_and_per_prompt_params(llm):
    ids = llm.generate("The little dog", SamplingParams(**GREEDY))[0]
    assert ids.prompt == "The little dog"
    tokens = ids.prompt_token_ids
    for form in ([tokens], {"prompt_token_ids": tokens}, [{"prompt_token_ids": tokens}]):
        again = llm.generate(form, SamplingParams(**GREEDY))
        assert len(again) == 1 and again[0].prompt is None
        assert again[0].outputs[0].token_ids == ids.outputs[0].token_ids
    short, long = llm.generate([tokens, tokens], [SamplingParams(temperature=0, max_tokens=3),
                                                  SamplingParams(temperature=0, max_tokens=9)])
    assert len(short.outputs[0].token_ids) == 3 and short.outputs[0].finish_reason == "length"
    assert long.outputs[0].token_ids[:3] == short.outputs[0].token_ids


def test_stop_strings_and_max_tokens_set_the_finish_reason(llm):
    greedy = llm.generate([PROMPTS[1]], SamplingParams(**GREEDY))[0].outputs[0]
    full = greedy.text
    stop = llm.get_tokenizer().decode(greedy.token_ids[5:6])  # a token from the middle
    for spec in (stop, [stop, "zzzz"]):
        out = llm.generate([PROMPTS[1]], SamplingParams(**GREEDY, stop=spec))[0].outputs[0]
        assert out.finish_reason == "stop"
        assert out.text == full[:full.index(stop)]  # the stop string itself is not returned
    out = llm.generate([PROMPTS[1]], SamplingParams(temperature=0, max_tokens=5))[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 5
    assert out.token_ids == greedy.token_ids[:5] and full.startswith(out.text)
    # A sampled story that ends (EOS or a new story's BOS), then the same seed ignoring the end.
    for seed in range(20):
        params = SamplingParams(temperature=1.0, max_tokens=400, seed=seed)
        end = llm.generate([[1]], params)[0].outputs[0]
        if end.finish_reason == "stop":
            break
    assert end.finish_reason == "stop" and end.token_ids[-1] in END_IDS
    n = len(end.token_ids)
    ignored = llm.generate([[1]], SamplingParams(temperature=1.0, max_tokens=n + 5, seed=seed,
                                                 ignore_eos=True))[0].outputs[0]
    assert ignored.finish_reason == "length" and ignored.token_ids[:n] == end.token_ids


def test_seeds_reproduce_and_differ(llm):
    def sample(seed):
        params = SamplingParams(temperature=1.0, max_tokens=40, seed=seed, ignore_eos=True)
        return llm.generate(PROMPTS[0], params)[0].outputs[0].token_ids

    assert sample(7) == sample(7) and len(sample(7)) == 40
    assert sample(7) != sample(8)
    assert sample(None) != sample(None)  # the engine draws a seed per request


def test_n_sequences_use_seed_plus_index(llm):
    params = SamplingParams(n=2, temperature=1.0, max_tokens=30, seed=3, ignore_eos=True)
    out = llm.generate(PROMPTS[1], params)[0]
    assert [o.index for o in out.outputs] == [0, 1]
    first, second = (o.token_ids for o in out.outputs)
    assert first != second
    for seed, want in ((3, first), (4, second)):
        one = SamplingParams(temperature=1.0, max_tokens=30, seed=seed, ignore_eos=True)
        assert llm.generate(PROMPTS[1], one)[0].outputs[0].token_ids == want


@pytest.mark.parametrize("kwargs,field", [
    (dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"), (dict(top_k=-2), "top_k"), (dict(n=0), "n >= 1"),
    (dict(max_tokens=0), "max_tokens"), (dict(min_p=1.5), "min_p"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(presence_penalty=2.5), "presence_penalty"),
    (dict(frequency_penalty=-3.0), "frequency_penalty"), (dict(stop=[""]), "stop"),
    (dict(stop_token_ids=[-1]), "stop_token_ids"), (dict(logprobs=-1), "logprobs")])
def test_bad_sampling_params_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_other_bad_arguments(llm):
    with pytest.raises(TypeError, match="stop"):
        SamplingParams(stop=5)
    with pytest.raises(ValueError, match=r"\[LLM\] expected --tokenizer"):
        LLM(model=str(MODEL))  # llama2.c files record no tokenizer
    with pytest.raises(ValueError, match="one per prompt"):
        llm.generate(PROMPTS[:3], [SamplingParams(), SamplingParams()])
    with pytest.raises(ValueError, match="token ids in"):
        llm.generate([[1, 100000]])
    with pytest.raises(ValueError, match="prompt of 1 to"):
        llm.generate([[1] * 600])
    with pytest.raises(ValueError, match="unknown message role"):
        llm.chat([{"role": "narrator", "content": "Hi"}])
    assert llm.stats()["num_running"] == 0 and llm.stats()["blocks_used"] == 0


def test_sampling_params_defaults_are_vllms():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.max_tokens) == (1, 1.0, 1.0, 0,
                                                                              0.0, 16)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.0, 0.0, 0.0)
    assert p.stop == [] and p.stop_token_ids == [] and not p.ignore_eos and p.seed is None
    assert p.logprobs is None
    assert SamplingParams(stop="x", top_k=-1).stop == ["x"]
    assert tessera.LLM is LLM and tessera.SamplingParams is SamplingParams


def test_chat_uses_the_plain_template(llm):
    messages = [{"role": "system", "content": "Tell a story."},
                {"role": "user", "content": "A cat"}]
    got = llm.chat(messages, SamplingParams(**GREEDY))[0]
    want = llm.generate("system: Tell a story.\nuser: A cat\nassistant:",
                        SamplingParams(**GREEDY))[0]
    assert got.prompt_token_ids == want.prompt_token_ids
    assert got.outputs[0].token_ids == want.outputs[0].token_ids
    assert len(llm.chat([messages, messages[1:]], SamplingParams(max_tokens=2))) == 2


def test_chat_takes_a_template_file_and_the_servers_chat_options(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text(
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if tools %}tools: {{ tools | length }}\n{% endif %}"
        "{% if add_generation_prompt %}[assistant]{% if brief %} briefly{% endif %}{% endif %}")
    llm = LLM(model=str(MODEL), tokenizer=str(TOKENIZER), max_num_seqs=2,
              chat_template=str(template))
    tok = llm.get_tokenizer()
    messages = [{"role": "user", "content": "A cat"}]

    def prompt(conversation, **options):
        return llm.chat(conversation, SamplingParams(max_tokens=1), **options)[0].prompt_token_ids

    assert prompt(messages) == tok.encode("[user] A cat\n[assistant]")
    assert prompt(messages, chat_template_kwargs={"brief": True}) == tok.encode(
        "[user] A cat\n[assistant] briefly")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert prompt(messages, tools=tools) == tok.encode("[user] A cat\ntools: 1\n[assistant]")
    reply = messages + [{"role": "assistant", "content": "It sat"}]
    assert prompt(reply, add_generation_prompt=False, continue_final_message=True) == tok.encode(
        "[user] A cat\n[assistant] It sat")
    with pytest.raises(ValueError, match=r"\[LLM.chat\] 'continue_final_message' needs"):
        llm.chat(reply, continue_final_message=True)
    with pytest.raises(ValueError, match="expected a readable file"):
        LLM(model=str(MODEL), tokenizer=str(TOKENIZER), chat_template=str(tmp_path / "none"))


def test_tokenizer_encodes_and_decodes(llm):
    tok = llm.get_tokenizer()
    assert tok.vocab_size == 512 and len(tok) == 512
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    ids = tok.encode("Once upon a time")
    assert tok.encode("Once upon a time", add_bos=True) == [1] + ids
    assert tok.decode(ids) == " Once upon a time"  # SentencePiece's prefix space, as llama2.c
    assert tok.decode([3 + 0x84]) == "\ufffd"  # a lone continuation byte is no character
    assert tok.decode([3 + 0xE2, 3 + 0x80, 3 + 0x94]) == "\u2014"


def test_generate_releases_the_gil(llm):
    stamps, running = [], threading.Event()

    def tick():  # notes the time about every millisecond it gets to run
        running.wait()
        last = 0.0
        while running.is_set():
            now = time.perf_counter()
            if now - last > 0.001:
                stamps.append(now)
                last = now

    thread = threading.Thread(target=tick)
    thread.start()
    running.set()
    # Calls until they have lasted 0.3 s in all, however fast this machine decodes.
    calls = []
    while sum(end - start for start, end in calls) < 0.3:
        start = time.perf_counter()
        llm.generate(PROMPTS * 2, SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
        calls.append((start, time.perf_counter()))
    running.clear()
    thread.join()
    # A thread starved by a held GIL notes nothing between the first and last tenth of a call.
    inner = [(a + 0.1 * (b - a), b - 0.1 * (b - a)) for a, b in calls]
    inside = sum(any(lo < t < hi for lo, hi in inner) for t in stamps)
    assert inside > 50, (calls, inside)


def test_ctrl_c_interrupts_generate_and_frees_blocks(llm):
    timer = threading.Timer(0.1, _thread.interrupt_main)  # as a SIGINT would, mid-generate
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(PROMPTS * 16, SamplingParams(temperature=0, max_tokens=480, ignore_eos=True))
    timer.join()
    assert time.perf_counter() - start < 0.6  # the whole batch takes a second or more
    stats = llm.stats()
    assert stats["blocks_used"] == 0 and stats["num_running"] == 0 and stats["num_waiting"] == 0


# --- async streaming ----------------------------------------------------------------------------

def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def engine(llm):
    return AsyncLLM(llm=llm)


def test_stream_deltas_add_up_to_the_offline_result(llm, engine):
    # Long enough that the loop wakes many times even on a loaded machine (outputs that
    # arrive while it is busy come together in one delta).
    params = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)
    want = llm.generate(PROMPTS[2], params)[0].outputs[0]

    async def collect(kind):
        return [o async for o in engine.generate(PROMPTS[2], params, output_kind=kind)]

    deltas = run(collect("delta"))
    assert len(deltas) > 3 and deltas[-1].finished and not deltas[0].finished
    assert "".join(d.outputs[0].text for d in deltas) == want.text
    assert sum((d.outputs[0].token_ids for d in deltas), []) == want.token_ids
    assert deltas[-1].outputs[0].finish_reason == want.finish_reason
    cumulative = run(collect("cumulative"))
    texts = [c.outputs[0].text for c in cumulative]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])) and texts[-1] == want.text
    assert cumulative[-1].outputs[0].token_ids == want.token_ids
    assert cumulative[-1].outputs[0].cumulative_logprob == pytest.approx(want.cumulative_logprob)
    assert deltas[-1].outputs[0].cumulative_logprob == pytest.approx(want.cumulative_logprob)


def test_stream_carries_prompt_logprobs(llm, engine):
    w = load_llama2c(MODEL)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, prompt_logprobs=1)

    async def collect(kind):
        return [o async for o in engine.generate(PROMPTS[3], params, output_kind=kind)]

    deltas = run(collect("delta"))
    assert deltas[0].prompt_logprobs is not None
    assert all(d.prompt_logprobs is None for d in deltas[1:])  # in their first output only
    check_prompt_logprobs(deltas[0].prompt_logprobs, PROMPTS[3], 1, w, llm.get_tokenizer())
    cumulative = run(collect("cumulative"))
    assert all(c.prompt_logprobs == deltas[0].prompt_logprobs for c in cumulative)


def test_concurrent_streams_interleave_in_one_loop(engine):
    order = []

    async def consume(name, prompt):
        params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
        async for out in engine.generate(prompt, params, request_id=name):
            order.append(name)
        return out

    async def main():
        return await asyncio.gather(*(consume(n, p) for n, p in zip("abc", PROMPTS)))

    outs = run(main())
    assert [o.request_id for o in outs] == ["a", "b", "c"]
    assert all(o.finished and o.outputs[0].finish_reason == "length" for o in outs)
    for name in "abc":  # every stream yields before every other has ended
        first = order.index(name)
        assert all(first < len(order) - 1 - order[::-1].index(other) for other in "abc")


def test_cancelling_the_consumer_aborts_and_frees_blocks(engine):
    seen = {}

    async def consume():
        params = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
        async for out in engine.generate(PROMPTS[0], params, request_id="cancelled"):
            seen["blocks"] = engine.stats()["blocks_used"]
            seen["outputs"] = seen.get("outputs", 0) + 1

    async def main():
        task = asyncio.create_task(consume())
        while seen.get("outputs", 0) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return engine.stats()

    stats = run(main())
    assert seen["blocks"] > 0
    assert stats["blocks_used"] == 0 and stats["num_running"] == 0 and stats["num_waiting"] == 0


def test_abort_ends_the_stream_and_frees_blocks(engine):
    async def main():
        params = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
        outs = []
        async for out in engine.generate(PROMPTS[1], params, request_id="aborted"):
            outs.append(out)
            if len(outs) == 2:
                engine.abort("aborted")
        return outs

    outs = run(main())
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    assert len(outs) <= 4  # at most an output already queued before the abort
    assert engine.stats()["blocks_used"] == 0 and engine.stats()["num_running"] == 0


def test_structured_outputs_json_schema_holds_for_every_sample(llm):
    import json
    from tessera.llm import GuidedDecodingParams, StructuredOutputsParams
    schema = {"type": "object", "required": ["ok", "n"],
              "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}}
    for so in (dict(structured_outputs=StructuredOutputsParams(json=schema)),
               dict(guided_decoding=GuidedDecodingParams(json=json.dumps(schema)))):
        params = SamplingParams(temperature=0.8, seed=3, n=3, max_tokens=200, **so)
        for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
            assert seq.finish_reason == "stop", seq.text
            value = json.loads(seq.text)
            assert set(value) == {"ok", "n"}, seq.text
            assert type(value["ok"]) is bool and type(value["n"]) is int
    anything = SamplingParams(temperature=0, max_tokens=200,
                              structured_outputs=StructuredOutputsParams(json_object=True))
    seq = llm.generate([PROMPTS[2]], anything)[0].outputs[0]
    assert seq.finish_reason != "stop" or isinstance(json.loads(seq.text), dict)
    with pytest.raises(ValueError, match="lookahead is not supported .* at #/pattern"):
        StructuredOutputsParams(json={"type": "string", "pattern": "a(?=b)"})
    with pytest.raises(ValueError, match="exactly one of json, json_object=True, regex, grammar"):
        StructuredOutputsParams()
    choices = ["yes", "no", "not sure"]
    params = SamplingParams(temperature=1.0, seed=5, n=4, max_tokens=50,
                            structured_outputs=StructuredOutputsParams(choice=choices))
    for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
        assert seq.text in choices and seq.finish_reason == "stop", seq.text


def test_structured_outputs_numbers_and_tuples_hold_for_every_sample(llm):
    import json
    from decimal import Decimal
    from tessera.llm import StructuredOutputsParams
    # What pydantic writes for confloat(ge=0, le=1, multiple_of=0.1) and Tuple[int, str].
    schema = {"type": "object", "required": ["p", "pair"], "properties": {
        "p": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.1},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 5}],
                 "minItems": 2, "maxItems": 2}}}
    params = SamplingParams(temperature=1.0, seed=9, n=4, max_tokens=200,
                            structured_outputs=StructuredOutputsParams(json=schema))
    for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
        assert seq.finish_reason == "stop", seq.text
        value = json.loads(seq.text, parse_float=Decimal)
        assert 0 <= value["p"] <= 1 and value["p"] % Decimal("0.1") == 0, seq.text
        assert type(value["pair"][0]) is int and type(value["pair"][1]) is str, seq.text


def test_structured_outputs_disable_any_whitespace_gives_compact_json(llm):
    import json
    from tessera.llm import StructuredOutputsParams
    schema = {"type": "object", "required": ["ok", "n"],
              "properties": {"ok": {"type": "boolean"}, "n": {"type": "array",
                                                          "items": {"type": "integer"}}}}
    params = SamplingParams(temperature=1.0, seed=4, n=3, max_tokens=200,
                            structured_outputs=StructuredOutputsParams(
                                json=schema, disable_any_whitespace=True))
    for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
        if seq.finish_reason == "stop":
            json.loads(seq.text)
        assert not any(c in seq.text for c in " \n\t\r"), repr(seq.text)


def test_structured_outputs_regex_holds_for_every_sample(llm):
    import re
    from tessera.llm import GuidedDecodingParams, StructuredOutputsParams
    expression = r"(Tom|Lily) (is|was) \d{1,2} years old\."
    for so in (dict(structured_outputs=StructuredOutputsParams(regex=expression)),
               dict(guided_decoding=GuidedDecodingParams(regex=expression))):
        params = SamplingParams(temperature=1.0, seed=7, n=3, max_tokens=60, **so)
        for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
            assert seq.finish_reason == "stop" and re.fullmatch(expression, seq.text), seq.text
    with pytest.raises(ValueError, match=r"\[Regex\] backreferences are not supported"):
        StructuredOutputsParams(regex=r"(a)\1")


def test_structured_outputs_grammar_holds_for_every_sample(llm):
    import re
    from tessera.llm import StructuredOutputsParams
    gbnf = """
root ::= sentence (" " sentence){0,2}
sentence ::= name " " verb "."
name ::= "Tom" | "Lily" | "the " ("dog" | "cat")
verb ::= "ran" | "slept" | "smiled"
"""
    sentence = r"(Tom|Lily|the (dog|cat)) (ran|slept|smiled)\."
    params = SamplingParams(temperature=1.0, seed=11, n=4, max_tokens=80,
                            structured_outputs=StructuredOutputsParams(grammar=gbnf))
    for seq in llm.generate([PROMPTS[1]], params)[0].outputs:
        assert re.fullmatch(f"{sentence}( {sentence}){{0,2}}", seq.text), seq.text
    with pytest.raises(ValueError, match="rule 'x' is used but not defined"):
        StructuredOutputsParams(grammar="root ::= x")


def test_logit_bias_forces_and_bans_tokens(llm):
    forced = llm.generate([PROMPTS[1]], SamplingParams(temperature=0, max_tokens=3,
                                                       logit_bias={77: 100.0}))[0].outputs[0]
    assert forced.token_ids == [77, 77, 77]
    free = llm.generate([PROMPTS[1]], SamplingParams(**GREEDY))[0].outputs[0]
    banned = llm.generate([PROMPTS[1]], SamplingParams(
        temperature=0, max_tokens=3, logit_bias={free.token_ids[0]: -100.0}))[0].outputs[0]
    assert banned.token_ids[0] != free.token_ids[0]
    assert SamplingParams(logit_bias={5: -1.5}).logit_bias == {5: -1.5}
    with pytest.raises(ValueError, match=r"logit_bias values in \[-100, 100\]"):
        SamplingParams(logit_bias={5: 101.0})


# --- LoRA adapters (vLLM's LoRARequest) ----------------------------------------------------------

def write_adapter(folder, w, targets, r=4, alpha=8.0, seed=0):
    """A random PEFT adapter of stories260K in folder; returns the numpy weights with it merged.
    targets: {module: (block, llama2.c weight)}; q_proj and k_proj are left out (the importer
    permutes their rows for half-split RoPE)."""
    rng = np.random.default_rng(seed)
    merged = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in w.items()}
    tensors = {}
    for layer in range(w["layers"]):
        for name, (block, key) in targets.items():
            out, inp = w[key][layer].shape
            a = (rng.standard_normal((r, inp)) * 0.1).astype(np.float32)
            b = (rng.standard_normal((out, r)) * 0.1).astype(np.float32)
            prefix = f"base_model.model.model.layers.{layer}.{block}.{name}"
            tensors[prefix + ".lora_A.weight"], tensors[prefix + ".lora_B.weight"] = a, b
            merged[key][layer] += alpha / r * (b.astype(np.float64) @ a.astype(np.float64))
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        blob = t.tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_model.safetensors").write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": list(targets)}))
    return merged


def test_lora_request_decodes_as_the_merged_weights_beside_the_base(llm, tmp_path):
    from tessera.llm import LoRARequest

    w = load_llama2c(MODEL)
    merged = write_adapter(tmp_path / "tales", w,
                           {"v_proj": ("self_attn", "wv"), "o_proj": ("self_attn", "wo"),
                            "up_proj": ("mlp", "w3"), "down_proj": ("mlp", "w2")})
    tales = LoRARequest("tales", 1, str(tmp_path / "tales"))
    params = SamplingParams(**GREEDY)
    prompts = PROMPTS[1:3]
    adapted = llm.generate(prompts, params, lora_request=tales)
    for out in adapted:
        ref, _ = greedy_reference(merged, out.prompt_token_ids, GREEDY["max_tokens"])
        assert out.outputs[0].token_ids == ref
    base = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in base] != [o.outputs[0].token_ids for o in adapted]
    # One request per model in one batch; the adapter is loaded once.
    mixed = llm.generate(prompts, params, lora_request=[tales, None])
    assert mixed[0].outputs[0].token_ids == adapted[0].outputs[0].token_ids
    assert mixed[1].outputs[0].token_ids == base[1].outputs[0].token_ids

    async def stream():
        engine = AsyncLLM(llm=llm)
        tokens = []
        async for out in engine.generate(prompts[0], params, lora_request=tales):
            tokens += out.outputs[0].token_ids
        return tokens

    assert asyncio.run(stream()) == adapted[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="adapter_config.json"):
        llm.generate(prompts, params, lora_request=LoRARequest("none", 2, str(tmp_path / "no")))
    with pytest.raises(TypeError, match="LoRARequest"):
        llm.generate(prompts, params, lora_request="tales")
    assert llm.stats()["blocks_used"] == 0
