// tessera._C.llm: the LLM engine API (llm/llm.h) and its tokenizer. The engine works on its own
// thread: every call that waits for it releases the GIL, and what its thread calls into Python
// (a stream's wake-up function) takes the GIL itself.
#include "tessera/llm/llm.h"

#include <map>

#include "bind.h"
#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"

namespace tessera::python {

namespace {

// Objects whose destruction joins or waits for the engine thread, which may be waiting for the
// GIL in a wake-up call, are deleted with the GIL released.
struct DeleteWithoutGil {
  template <class T>
  void operator()(T* p) const {
    py::gil_scoped_release release;
    delete p;
  }
};
template <class T>
using Unlocked = std::unique_ptr<T, DeleteWithoutGil>;

// A Python callable run from the engine thread; dropped under the GIL wherever it goes.
struct PyWaker {
  py::object fn;
  explicit PyWaker(py::object f) : fn(std::move(f)) {}
  ~PyWaker() {
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
  void operator()() const {
    py::gil_scoped_acquire gil;
    try {
      fn();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("tessera.llm stream wake-up");
    }
  }
};

std::vector<std::string> stop_strings(py::handle stop) {
  if (stop.is_none()) return {};
  if (py::isinstance<py::str>(stop)) return {stop.cast<std::string>()};
  try {
    return stop.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw TypeError("[SamplingParams] expected stop to be None, a str or a list of str, got " +
                    std::string(py::str(py::type::handle_of(stop).attr("__name__"))));
  }
}

py::dict stats_dict(const infer::EngineStats& s) {
  py::dict d;
  d["num_waiting"] = s.num_waiting;
  d["num_running"] = s.num_running;
  d["blocks_used"] = s.blocks_used;
  d["blocks_total"] = s.blocks_total;
  d["num_preemptions"] = s.num_preemptions;
  d["num_steps"] = s.num_steps;
  d["prefix_cache_queries"] = s.prefix_cache_queries;
  d["prefix_cache_hits"] = s.prefix_cache_hits;
  d["spec_num_drafts"] = s.spec_num_drafts;
  d["spec_draft_tokens"] = s.spec_draft_tokens;
  d["spec_accepted_tokens"] = s.spec_accepted_tokens;
  return d;
}

std::string finish_reason(infer::FinishReason r) {
  return std::string(infer::finish_reason_name(r));
}

void bind_tokenizer(py::module_& m) {
  using tokenizers::Tokenizer;
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(
      m, "Tokenizer", "A model's tokenizer (encode / decode), as LLM.get_tokenizer() returns it.")
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_bos") = false,
           py::arg("add_eos") = false)
      .def(
          "decode",
          // A lone byte token is not UTF-8: U+FFFD, as Hugging Face tokenizers decode it.
          [](const Tokenizer& t, const std::vector<int32_t>& ids) {
            return py::bytes(t.decode(ids)).attr("decode")("utf-8", "replace");
          },
          py::arg("token_ids"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_id)
      .def_property_readonly("name", [](const Tokenizer& t) { return std::string(t.name()); })
      .def("__len__", &Tokenizer::vocab_size);
}

// vLLM's StructuredOutputsParams (GuidedDecodingParams before 0.10.2): json (a schema as a dict
// or a JSON string), json_object=True, regex, grammar (GBNF) or choice (a list of texts), and
// disable_any_whitespace (compact JSON); compiled once, here.
struct StructuredOutputs {
  std::shared_ptr<const infer::JsonGrammar> grammar;
  std::string kind;  // "json", "json_object", "regex", "grammar" or "choice", for repr
};

// The grammar of exactly one constraint; ValueError otherwise.
StructuredOutputs structured_outputs(const py::object& json, bool object, const py::object& regex,
                                     const py::object& choice, const py::object& grammar) {
  if (!json.is_none() + object + !regex.is_none() + !grammar.is_none() + !choice.is_none() != 1)
    throw ValueError(
        "[StructuredOutputsParams] expected exactly one of json, json_object=True, "
        "regex, grammar and choice");
  if (!grammar.is_none())
    return StructuredOutputs{infer::JsonGrammar::grammar(grammar.cast<std::string>()), "grammar"};
  if (object) return StructuredOutputs{infer::JsonGrammar::any_object(), "json_object"};
  if (!regex.is_none())
    return StructuredOutputs{infer::JsonGrammar::regex(regex.cast<std::string>()), "regex"};
  if (!choice.is_none())
    return StructuredOutputs{infer::JsonGrammar::choice(choice.cast<std::vector<std::string>>()),
                             "choice"};
  const std::string text =
      py::isinstance<py::str>(json)
          ? json.cast<std::string>()
          : py::module_::import("json").attr("dumps")(json).cast<std::string>();
  return StructuredOutputs{infer::JsonGrammar::from_schema_text(text), "json"};
}

void bind_structured_outputs(py::module_& m) {
  py::class_<StructuredOutputs>(
      m, "StructuredOutputsParams",
      "vLLM's StructuredOutputsParams: json (a JSON Schema, dict or str), json_object=True, regex "
      "(the whole text matches it), grammar (GBNF: the whole text is its root rule) or choice (a "
      "list of str); disable_any_whitespace=True makes JSON compact (no whitespace between "
      "tokens).")
      .def(py::init([](py::object json, std::optional<bool> json_object, py::object regex,
                       py::object choice, py::object grammar, bool disable_any_whitespace) {
             StructuredOutputs so =
                 structured_outputs(json, json_object.value_or(false), regex, choice, grammar);
             if (disable_any_whitespace)
               so.grammar = infer::JsonGrammar::without_whitespace(so.grammar);
             return so;
           }),
           py::kw_only(), py::arg("json") = py::none(), py::arg("json_object") = py::none(),
           py::arg("regex") = py::none(), py::arg("choice") = py::none(),
           py::arg("grammar") = py::none(), py::arg("disable_any_whitespace") = false)
      .def("__repr__",
           [](const StructuredOutputs& s) { return "StructuredOutputsParams(" + s.kind + ")"; });
}

void bind_sampling_params(py::module_& m) {
  using llm::SamplingParams;
  py::class_<SamplingParams>(m, "SamplingParams",
                             "vLLM's SamplingParams (validated on construction: ValueError "
                             "naming the field).")
      .def(py::init([](int64_t n, double temperature, double top_p, int64_t top_k, double min_p,
                       double repetition_penalty, double presence_penalty, double frequency_penalty,
                       int64_t max_tokens, py::handle stop,
                       std::optional<std::vector<int32_t>> stop_token_ids, bool ignore_eos,
                       std::optional<int64_t> seed, std::optional<int64_t> logprobs,
                       std::optional<int64_t> prompt_logprobs,
                       std::optional<std::map<int32_t, float>> logit_bias,
                       std::optional<StructuredOutputs> structured_outputs,
                       std::optional<StructuredOutputs> guided_decoding, int64_t min_tokens,
                       bool include_stop_str_in_output) {
             SamplingParams p;
             p.min_tokens = min_tokens;
             p.include_stop_str_in_output = include_stop_str_in_output;
             p.n = n;
             p.temperature = temperature;
             p.top_p = top_p;
             p.top_k = top_k;
             p.min_p = min_p;
             p.repetition_penalty = repetition_penalty;
             p.presence_penalty = presence_penalty;
             p.frequency_penalty = frequency_penalty;
             p.max_tokens = max_tokens;
             p.stop = stop_strings(stop);
             p.stop_token_ids = stop_token_ids.value_or(std::vector<int32_t>{});
             p.ignore_eos = ignore_eos;
             p.seed = seed;
             p.logprobs = logprobs;
             p.prompt_logprobs = prompt_logprobs;
             if (logit_bias) p.logit_bias.assign(logit_bias->begin(), logit_bias->end());
             if (structured_outputs && guided_decoding)
               throw ValueError(
                   "[SamplingParams] expected structured_outputs or guided_decoding, not both");
             if (auto& so = structured_outputs ? structured_outputs : guided_decoding)
               p.json_grammar = so->grammar;
             p.validate();
             return p;
           }),
           py::kw_only(), py::arg("n") = 1, py::arg("temperature") = 1.0, py::arg("top_p") = 1.0,
           py::arg("top_k") = 0, py::arg("min_p") = 0.0, py::arg("repetition_penalty") = 1.0,
           py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0,
           py::arg("max_tokens") = 16, py::arg("stop") = py::none(),
           py::arg("stop_token_ids") = py::none(), py::arg("ignore_eos") = false,
           py::arg("seed") = py::none(), py::arg("logprobs") = py::none(),
           py::arg("prompt_logprobs") = py::none(), py::arg("logit_bias") = py::none(),
           py::arg("structured_outputs") = py::none(), py::arg("guided_decoding") = py::none(),
           py::arg("min_tokens") = 0, py::arg("include_stop_str_in_output") = false)
      .def_readonly("n", &SamplingParams::n)
      .def_readonly("temperature", &SamplingParams::temperature)
      .def_readonly("top_p", &SamplingParams::top_p)
      .def_readonly("top_k", &SamplingParams::top_k)
      .def_readonly("min_p", &SamplingParams::min_p)
      .def_readonly("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readonly("presence_penalty", &SamplingParams::presence_penalty)
      .def_readonly("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readonly("max_tokens", &SamplingParams::max_tokens)
      .def_readonly("min_tokens", &SamplingParams::min_tokens)
      .def_readonly("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_readonly("stop", &SamplingParams::stop)
      .def_readonly("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readonly("ignore_eos", &SamplingParams::ignore_eos)
      .def_readonly("seed", &SamplingParams::seed)
      .def_readonly("logprobs", &SamplingParams::logprobs)
      .def_readonly("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_property_readonly("logit_bias",
                             [](const SamplingParams& p) {
                               return std::map<int32_t, float>(p.logit_bias.begin(),
                                                               p.logit_bias.end());
                             })
      .def("__repr__", [](const SamplingParams& p) {
        return detail::str("SamplingParams(n=", p.n, ", temperature=", p.temperature,
                           ", top_p=", p.top_p, ", top_k=", p.top_k, ", min_p=", p.min_p,
                           ", max_tokens=", p.max_tokens, ", stop=", p.stop.size(),
                           " strings, ignore_eos=", p.ignore_eos ? "True" : "False",
                           ", seed=", p.seed ? std::to_string(*p.seed) : "None", ")");
      });
}

// Logprobs as [(token, logprob, [(id, logprob) of the top k])].
py::list logprob_list(const std::vector<infer::TokenLogprob>& logprobs) {
  py::list lps;
  for (const infer::TokenLogprob& lp : logprobs)
    lps.append(py::make_tuple(lp.token, lp.logprob, lp.top));
  return lps;
}

// A sequence's (index, token ids, text, finish reason, logprobs, prompt logprobs) as a tuple;
// prompt logprobs are empty but on a request's first sequence when it asked for them.
py::tuple sequence_tuple(int64_t index, const std::vector<int32_t>& ids, const std::string& text,
                         infer::FinishReason reason,
                         const std::vector<infer::TokenLogprob>& logprobs,
                         const std::vector<infer::TokenLogprob>& prompt_logprobs) {
  return py::make_tuple(
      index, ids, py::bytes(text).attr("decode")("utf-8", "replace"),
      reason == infer::FinishReason::None ? py::object(py::none()) : py::str(finish_reason(reason)),
      logprob_list(logprobs), logprob_list(prompt_logprobs));
}

void bind_stream(py::module_& m) {
  using llm::RequestStream;
  py::class_<RequestStream, Unlocked<RequestStream>>(
      m, "RequestStream", "One request's sequences in flight (LLM.submit).")
      .def(
          "take",
          [](RequestStream& s) {
            py::list out;
            for (const RequestStream::Delta& d : s.take()) {
              // vLLM raises for a request its engine failed; "abort" would read as a cancel.
              TESSERA_CHECK(d.output.error.empty(), RuntimeError, "[LLM] sequence ", d.index,
                            " failed in the engine: ", d.output.error);
              out.append(sequence_tuple(d.index, d.output.new_tokens, d.output.text,
                                        d.output.finish_reason, d.output.logprobs,
                                        d.output.prompt_logprobs));
            }
            return out;
          },
          "The (index, new token ids, new text, finish reason or None, logprobs, prompt "
          "logprobs) outputs queued since the last call.")
      .def_property_readonly("finished", &RequestStream::finished)
      .def("abort", &RequestStream::abort, py::call_guard<py::gil_scoped_release>(),
           "Aborts the unfinished sequences (their KV blocks are freed).")
      .def("close", &RequestStream::close, py::call_guard<py::gil_scoped_release>(),
           "Aborts what is unfinished and waits until the engine thread calls on_output no "
           "more.")
      .def_property_readonly("request_ids", &RequestStream::request_ids);
}

void bind_llm(py::module_& m) {
  using llm::LLM;
  py::class_<LLM, Unlocked<LLM>>(m, "LLM", "The engine behind tessera.llm.LLM (llm/llm.h).")
      .def(py::init([](const std::string& model, const std::string& tokenizer,
                       const std::string& data_dir, const std::string& device, int64_t max_num_seqs,
                       int64_t num_blocks, int64_t block_size, int64_t max_num_batched_tokens,
                       uint64_t seed, bool enable_prefix_caching, const std::string& kv_cache_dtype,
                       const std::string& dtype, const std::string& quantization,
                       int64_t kv_cache_memory_bytes, const std::string& speculative_config,
                       const std::string& hf_overrides, int64_t max_model_len,
                       const std::string& chat_template) {
             llm::LLMConfig c;
             c.model = model;
             c.config_overrides = hf_overrides;
             c.chat_template = chat_template;
             c.engine.max_model_len = max_model_len;
             c.tokenizer = tokenizer;
             c.data_dir = data_dir;
             c.device = device;
             c.engine.max_num_seqs = max_num_seqs;
             c.engine.num_blocks = num_blocks;
             c.engine.kv_cache_memory_bytes = kv_cache_memory_bytes;
             c.engine.block_size = block_size;
             c.engine.max_num_batched_tokens = std::max(max_num_batched_tokens, max_num_seqs);
             c.engine.seed = seed;
             c.engine.enable_prefix_caching = enable_prefix_caching;
             c.engine.kv_cache_dtype =
                 infer::inference_dtype_from_name(kv_cache_dtype, "LLM", "a KV cache dtype");
             c.engine.weight_dtype = infer::weight_dtype_from_names(dtype, quantization, "LLM");
             c.engine.speculative = infer::SpeculativeConfig::parse(speculative_config, "LLM");
             py::gil_scoped_release release;
             return Unlocked<LLM>(new LLM(c));
           }),
           py::arg("model"), py::arg("tokenizer") = "", py::arg("data_dir") = "",
           py::arg("device") = "cpu", py::arg("max_num_seqs") = 32, py::arg("num_blocks") = 0,
           py::arg("block_size") = 16, py::arg("max_num_batched_tokens") = 2048,
           py::arg("seed") = 0, py::arg("enable_prefix_caching") = true,
           py::arg("kv_cache_dtype") = "auto", py::arg("dtype") = "auto",
           py::arg("quantization") = "none", py::arg("kv_cache_memory_bytes") = 0,
           py::arg("speculative_config") = "", py::arg("hf_overrides") = "",
           py::arg("max_model_len") = 0, py::arg("chat_template") = "")
      .def_property_readonly("tokenizer", &LLM::shared_tokenizer)
      .def_property_readonly("source", [](const LLM& l) { return l.model().source; })
      .def_property_readonly("max_model_len", [](const LLM& l) { return l.max_model_len(); })
      .def("stats", [](const LLM& l) { return stats_dict(l.stats()); })
      .def("encode", &LLM::encode, py::arg("prompt"))
      .def("lora", &LLM::lora, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
           "The engine id of a PEFT LoRA adapter folder, loaded on its first use.")
      .def("encode_chat", &LLM::encode_chat, py::arg("request_json"),
           "Token ids of a chat request's messages (JSON), as the server's chat endpoint.")
      .def(
          "submit",
          [](LLM& l, std::vector<int32_t> prompt, const llm::SamplingParams& params,
             py::object on_output, int32_t lora_id) {
            std::function<void()> wake;
            if (!on_output.is_none()) {
              auto waker = std::make_shared<PyWaker>(std::move(on_output));
              wake = [waker] { (*waker)(); };
            }
            py::gil_scoped_release release;
            return Unlocked<llm::RequestStream>(
                l.submit(std::move(prompt), params, std::move(wake), lora_id).release());
          },
          py::arg("prompt_token_ids"), py::arg("params"), py::arg("on_output") = py::none(),
          py::arg("lora_id") = 0,
          "Submits one request; on_output() is called from the engine thread after each "
          "output (quick: e.g. loop.call_soon_threadsafe).")
      .def(
          "generate",
          [](LLM& l, const std::vector<std::vector<int32_t>>& prompts,
             const std::vector<llm::SamplingParams>& params, const std::vector<int32_t>& lora_ids) {
            // Ctrl-C reaches Python while the engine works: polled under the GIL.
            bool interrupted = false;
            auto check = [&] {
              py::gil_scoped_acquire gil;
              interrupted = PyErr_CheckSignals() != 0;
              return interrupted;
            };
            std::vector<std::vector<llm::Sequence>> results;
            {
              py::gil_scoped_release release;
              results = l.generate(prompts, params, check, lora_ids);
            }
            if (interrupted) throw py::error_already_set();
            py::list out;
            for (size_t i = 0; i < results.size(); ++i) {
              const auto& seqs = results[i];
              py::list each;
              for (size_t j = 0; j < seqs.size(); ++j) {
                TESSERA_CHECK(seqs[j].error.empty(), RuntimeError, "[LLM.generate] sequence ", j,
                              " of prompt ", i, " failed in the engine: ", seqs[j].error);
                each.append(sequence_tuple(static_cast<int64_t>(j), seqs[j].token_ids, seqs[j].text,
                                           seqs[j].finish_reason, seqs[j].logprobs,
                                           seqs[j].prompt_logprobs));
              }
              out.append(each);
            }
            return out;
          },
          py::arg("prompts"), py::arg("params"), py::arg("lora_ids") = std::vector<int32_t>{},
          "Every prompt's sequences as [(index, token ids, text, finish reason, logprobs, prompt "
          "logprobs)], all submitted at once; the GIL is released while the engine works.");
}

}  // namespace

void init_llm(py::module_& m) {
  py::module_ l = m.def_submodule("llm", "The LLM engine API (tessera.llm is built on it).");
  bind_tokenizer(l);
  bind_structured_outputs(l);
  bind_sampling_params(l);
  bind_stream(l);
  bind_llm(l);
}

}  // namespace tessera::python
