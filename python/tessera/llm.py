"""vLLM's offline and async engine API over Tessera's continuous-batching engine (llm/llm.h).

    from tessera.llm import LLM, SamplingParams
    llm = LLM(model="stories260K.bin", tokenizer="stories260K_idtok.bin")
    for out in llm.generate(["Once upon a time", "The dog"], SamplingParams(temperature=0)):
        print(out.outputs[0].text)

The engine runs on its own thread; generate() waits for it with the GIL released. AsyncLLM
streams a request's outputs into an asyncio event loop.
"""
import atexit
import dataclasses
import itertools
import json
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import _C

SamplingParams = _C.llm.SamplingParams
StructuredOutputsParams = _C.llm.StructuredOutputsParams
GuidedDecodingParams = StructuredOutputsParams  # vLLM's name before 0.10.2
Tokenizer = _C.llm.Tokenizer


@dataclass
class LoRARequest:
    """A LoRA adapter to run a request through (vLLM's LoRARequest): lora_path is a PEFT adapter
    folder (adapter_config.json and adapter_model.safetensors, as `tessera train --lora-rank`
    writes); it is loaded on its first use and batched with the base model's requests."""

    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class Logprob:
    """A token's raw logprob (log_softmax of the model's logits, before temperature and the
    sampling filters), its rank among the top alternatives (None when outside them) and text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One generated sequence of a request (vLLM's CompletionOutput)."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float] = None  # the sum of the tokens' raw logprobs
    # With SamplingParams(logprobs=k): per token {token id: Logprob} of it and the top k.
    logprobs: Optional[List[Dict[int, Logprob]]] = None
    finish_reason: Optional[str] = None  # "stop", "length", "abort"; None while running

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """A prompt with its n sequences (vLLM's RequestOutput)."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput] = field(default_factory=list)
    finished: bool = False
    # With SamplingParams(prompt_logprobs=k): None for the first prompt token, then per token
    # {token id: Logprob} of it and the top k (computed once per request, whatever n is).
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = None


def _logprobs(entries, tokenizer):
    """vLLM's per-token {id: Logprob} from the engine's (token, logprob, top) entries."""
    out = []
    for token, logprob, top in entries:
        ranked = {t: Logprob(lp, rank, tokenizer.decode([t])) for rank, (t, lp) in
                  enumerate(top, 1)}
        if token not in ranked:
            ranked[token] = Logprob(logprob, None, tokenizer.decode([token]))
        out.append(ranked)
    return out


def _prompt_logprobs(entries, params, tokenizer):
    """vLLM's prompt_logprobs (None first) from the engine's entries, or None unless asked."""
    if params.prompt_logprobs is None:
        return None
    return [None] + _logprobs(entries, tokenizer)


def _completion(seq, params, tokenizer):
    index, token_ids, text, reason, entries, _ = seq
    return CompletionOutput(index=index, text=text, token_ids=list(token_ids),
                            cumulative_logprob=sum(e[1] for e in entries),
                            logprobs=None if params.logprobs is None else
                            _logprobs(entries, tokenizer), finish_reason=reason)


class LLM:
    """A model file (anything `tessera generate` loads) with its tokenizer and an engine.

    model: a llama2.c .bin, an llm.c GPT-2 .bin, a .safetensors file or Hugging Face folder, a
    Tessera training run or checkpoint. tokenizer: a tokenizer path or name (default: the one
    the model records). The engine computes in float32.
    enable_prefix_caching: keep computed KV blocks for later prompts that start with the same
    tokens (vLLM's automatic prefix caching; stats() counts prefix_cache_queries and _hits).
    kv_cache_dtype: "auto" (float32) or "bfloat16", which halves the KV cache's memory and what
    decode attention reads per token (keys and values rounded to bfloat16 as they are stored).
    dtype: None, "auto" or float32, or "bfloat16" (tessera.bfloat16): the CPU runner keeps the
    linear layers' weights in bfloat16 (rounded once), halving what a decode step reads.
    quantization: None or "int8": those weights quantized per output channel (a quarter of the
    bytes). The arithmetic stays float32 either way. kv_cache_memory_bytes: the KV cache's size
    instead of num_blocks (a bfloat16 cache holds twice the blocks).
    speculative_config: None, or vLLM's dict {"method": "ngram", "num_speculative_tokens": k,
    "prompt_lookup_max": n, "prompt_lookup_min": m}: each decoding request proposes the k tokens
    that followed the last recurrence of its last n..m tokens (in its own text, or in recent
    outputs of other requests: "history_tokens", default 65536) and checks them in the same
    forward. Outputs stay exactly those without; stats() counts spec_draft_tokens and
    spec_accepted_tokens.
    enable_lora: accepted for vLLM's signature; any request may name a LoRARequest (CPU models),
    whose adapter is loaded on its first use.
    hf_overrides: a dict merged into the model's config before it is built (vLLM's), e.g.
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings":
    32768}}. max_model_len: the longest sequence, prompt and output (None: the model's context).
    chat_template: chat()'s template, a Jinja file or a tokenizer_config.json (`tessera serve
    --chat-template`; None: the model folder's, else the plain template).
    """

    def __init__(self, model, tokenizer=None, *, max_num_seqs=32, num_blocks=0, block_size=16,
                 max_num_batched_tokens=2048, seed=0, dtype=None, device="cpu", data_dir=None,
                 enable_prefix_caching=True, kv_cache_dtype="auto", quantization=None,
                 kv_cache_memory_bytes=0, speculative_config=None, enable_lora=False,
                 hf_overrides=None, max_model_len=None, chat_template=None):
        for name, value in (("auto", None), ("float32", _C.float32), ("bfloat16", _C.bfloat16)):
            if dtype is value or (value is not None and dtype == value):
                dtype = name
        if not isinstance(dtype, str):
            raise ValueError(f"[LLM] expected dtype None, 'auto', 'float32' or 'bfloat16', got "
                             f"{dtype!r}")
        self._engine = _C.llm.LLM(str(model), str(tokenizer or ""), str(data_dir or ""),
                                  str(device), max_num_seqs, num_blocks, block_size,
                                  max_num_batched_tokens, seed, bool(enable_prefix_caching),
                                  str(kv_cache_dtype), dtype, str(quantization or "none"),
                                  int(kv_cache_memory_bytes),
                                  "" if speculative_config is None else
                                  json.dumps(speculative_config),
                                  "" if hf_overrides is None else json.dumps(hf_overrides),
                                  int(max_model_len or 0), str(chat_template or ""))
        self._ids = itertools.count()

    def get_tokenizer(self) -> Tokenizer:
        return self._engine.tokenizer

    def stats(self) -> dict:
        """The engine's scheduler and KV cache figures (blocks_used, blocks_total, ...)."""
        return self._engine.stats()

    def _prompt(self, prompt):
        """(text or None, token ids) of a str, a token id list or {"prompt_token_ids": [...]}."""
        if isinstance(prompt, str):
            return prompt, self._engine.encode(prompt)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return prompt.get("prompt"), list(prompt["prompt_token_ids"])
            if "prompt" in prompt:
                return prompt["prompt"], self._engine.encode(prompt["prompt"])
            raise ValueError("[LLM.generate] expected a prompt dict with 'prompt' or "
                             f"'prompt_token_ids', got keys {sorted(prompt)}")
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return None, list(prompt)
        raise TypeError("[LLM.generate] expected a prompt str, a list of token ids or a dict, "
                        f"got {type(prompt).__name__}")

    def _prompts(self, prompts):
        single = isinstance(prompts, (str, dict)) or (
            isinstance(prompts, (list, tuple)) and len(prompts) > 0
            and all(isinstance(t, int) for t in prompts))
        return [self._prompt(p) for p in ([prompts] if single else prompts)]

    def _lora_id(self, lora_request) -> int:
        """The engine's id of a LoRARequest's adapter (0 for None)."""
        if lora_request is None:
            return 0
        if not isinstance(lora_request, LoRARequest):
            raise TypeError("[LLM] expected lora_request a LoRARequest or None, got "
                            f"{type(lora_request).__name__}")
        return self._engine.lora(str(lora_request.lora_path))

    def generate(self, prompts, sampling_params=None, use_tqdm=False,
                 lora_request=None) -> List[RequestOutput]:
        """Completions of every prompt, in order. All are submitted at once (the engine batches
        them); sampling_params: one SamplingParams for all, or a list with one per prompt;
        lora_request: None, a LoRARequest for all, or a list with one (or None) per prompt.
        use_tqdm is accepted for vLLM's signature; no progress bar is drawn."""
        parsed = self._prompts(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) \
            else [sampling_params]
        loras = [self._lora_id(r) for r in (lora_request if isinstance(lora_request, (list, tuple))
                                            else [lora_request])]
        results = self._engine.generate([ids for _, ids in parsed], params, loras)
        tok = self._engine.tokenizer
        return [RequestOutput(request_id=str(next(self._ids)), prompt=text, prompt_token_ids=ids,
                              outputs=[_completion(s, params[i % len(params)], tok)
                                       for s in seqs], finished=True,
                              prompt_logprobs=_prompt_logprobs(seqs[0][5],
                                                               params[i % len(params)], tok))
                for i, ((text, ids), seqs) in enumerate(zip(parsed, results))]

    def chat(self, messages, sampling_params=None, use_tqdm=False, lora_request=None, *,
             add_generation_prompt=True, continue_final_message=False, tools=None,
             chat_template_kwargs=None) -> List[RequestOutput]:
        """Replies to a conversation ([{"role": ..., "content": ...}]) or a list of them. The
        prompt is the server's for a chat request with the same fields: the model's chat
        template (its folder's tokenizer_config.json, or LLM(chat_template=file)) with tools
        and chat_template_kwargs, else the plain one ("<role>: <content>\\n" per message, then
        "assistant:"); continue_final_message (with add_generation_prompt=False) goes on
        writing the last, assistant's, message."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        options = {"add_generation_prompt": add_generation_prompt,
                   "continue_final_message": continue_final_message,
                   "tools": tools, "chat_template_kwargs": chat_template_kwargs}
        prompts = [{"prompt_token_ids": self._engine.encode_chat(
            json.dumps({"messages": conv, **options}))} for conv in conversations]
        return self.generate(prompts, sampling_params, use_tqdm, lora_request)


_async_engines = weakref.WeakSet()


@atexit.register
def _close_streams():
    """Streams still open at exit (generators never finished) stop calling into Python before
    the interpreter goes away."""
    for engine in list(_async_engines):
        for stream in list(engine._streams.values()):
            stream.close()


class AsyncLLM:
    """vLLM's AsyncLLMEngine: generate() is an async generator of a request's outputs as the
    engine produces them. The engine's thread wakes the event loop through
    loop.call_soon_threadsafe; the loop itself never waits for the engine. Cancelling the
    consuming task, or abort(request_id), aborts the request and frees its KV blocks.

        engine = AsyncLLM(model="stories260K.bin", tokenizer="stories260K_idtok.bin")
        async for out in engine.generate("Once", SamplingParams(max_tokens=32)):
            print(out.outputs[0].text, end="")
    """

    def __init__(self, model=None, *, llm: Optional[LLM] = None, **kwargs):
        self.llm = llm if llm is not None else LLM(model, **kwargs)
        self._streams = {}
        _async_engines.add(self)

    def get_tokenizer(self) -> Tokenizer:
        return self.llm.get_tokenizer()

    def stats(self) -> dict:
        return self.llm.stats()

    def abort(self, request_id: str) -> None:
        """Aborts a request in flight: its stream ends with finish_reason "abort"."""
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.abort()

    async def generate(self, prompt, sampling_params=None, request_id=None, *,
                       output_kind="delta", lora_request=None):
        """Yields RequestOutputs as tokens arrive: output_kind "delta" (each holds the new text
        and token ids since the last) or "cumulative" (everything so far, vLLM's default)."""
        import asyncio  # here: `import tessera` stays free of asyncio's import time

        if output_kind not in ("delta", "cumulative"):
            raise ValueError(f"[AsyncLLM.generate] expected output_kind 'delta' or "
                             f"'cumulative', got {output_kind!r}")
        text, ids = self.llm._prompt(prompt)
        params = sampling_params if sampling_params is not None else SamplingParams()
        request_id = str(next(self.llm._ids)) if request_id is None else str(request_id)
        if request_id in self._streams:
            raise ValueError(f"[AsyncLLM.generate] request_id {request_id!r} is already running")
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake():  # on the engine thread
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:  # the loop has closed
                pass

        stream = self.llm._engine.submit(ids, params, wake, self.llm._lora_id(lora_request))
        self._streams[request_id] = stream
        outputs = [CompletionOutput(index=i, text="", token_ids=[], cumulative_logprob=0.0,
                                    logprobs=None if params.logprobs is None else [])
                   for i in range(params.n)]
        tok = self.llm._engine.tokenizer
        # Once the engine sent them: in every output ("cumulative"), else in that one output.
        prompt_logprobs = None
        try:
            while True:
                await ready.wait()
                ready.clear()
                finished = stream.finished  # before take(): then take() holds the last outputs
                deltas = stream.take()
                if not deltas and not finished:
                    continue  # a wake-up for outputs an earlier take() already had
                if output_kind == "delta":
                    outputs = [dataclasses.replace(o, text="", token_ids=[], logprobs=None if
                                                   o.logprobs is None else []) for o in outputs]
                fresh = None
                for index, new_ids, new_text, reason, entries, prompt_entries in deltas:
                    # The request's first output (of sequence 0) carries them.
                    if index == 0 and params.prompt_logprobs is not None and \
                            prompt_logprobs is None:
                        fresh = prompt_logprobs = _prompt_logprobs(prompt_entries, params, tok)
                    o = outputs[index]
                    o.token_ids = o.token_ids + list(new_ids)
                    o.text += new_text
                    o.finish_reason = reason
                    o.cumulative_logprob += sum(e[1] for e in entries)
                    if o.logprobs is not None:
                        o.logprobs = o.logprobs + _logprobs(entries, tok)
                yield RequestOutput(request_id=request_id, prompt=text, prompt_token_ids=ids,
                                    outputs=[dataclasses.replace(o) for o in outputs],
                                    finished=finished,
                                    prompt_logprobs=fresh if output_kind == "delta"
                                    else prompt_logprobs)
                if finished:
                    return
        finally:
            # Reached on completion, cancellation, or a consumer that stopped iterating; after
            # close() the engine thread no longer calls wake().
            self._streams.pop(request_id, None)
            stream.close()
