// `tessera serve`: the OpenAI-compatible HTTP server over the continuous-batching engine.
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/infer/async_engine.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/llm/model_files.h"
#include "tessera/serve/server.h"

namespace tessera::cli {

using namespace llm;  // model files and their tokenizers

Command add_serve_command(CLI::App& app) {
  struct Options {
    std::string model, tokenizer, data_dir, host = "127.0.0.1", api_key;
    std::vector<std::string> model_names;
    std::string chat_template;
    bool auto_tool_choice = false;
    std::string tool_call_parser, reasoning_parser;
    std::string generation_config = "auto";
    std::string device = "cpu";
    int port = 8000, threads = 0;
    int64_t max_batch = 32, kv_blocks = 0, block_size = 16, max_batched_tokens = 2048;
    uint64_t kv_cache_memory = 0;
    int64_t max_concurrent = 64;
    size_t max_body_bytes = size_t{1} << 20;
    double shutdown_grace = 30.0;
    uint64_t seed = 0;
    bool prefix_caching = true;
    std::string kv_cache_dtype = "auto", dtype = "auto", quantization = "none";
    std::string speculative_config, hf_overrides;
    int64_t max_model_len = 0;
    std::vector<std::string> lora_modules;  // name=path
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (continuous batching)");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->footer(
      "\nEndpoints: POST /v1/completions, POST /v1/chat/completions (\"stream\": true for "
      "server-sent events), GET /v1/models, /health, /metrics.\nExample:\n"
      "  tessera serve --model stories260K.bin --tokenizer stories260K_idtok.bin --port 8000\n"
      "  curl localhost:8000/v1/completions -d '{\"prompt\": \"Once\", \"max_tokens\": 50}'");
  cmd->add_option("--model", o->model,
                  "A training run folder, a checkpoint folder, a .safetensors file with "
                  "config.json beside it, an llm.c GPT-2 .bin or a llama2.c model file")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer (default: the one the model was trained with)");
  cmd->add_option("--data-dir", o->data_dir, "Folder holding gpt2/encoder.json and vocab.bpe");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 routes (default: open)");
  cmd->add_option("--served-model-name,--model-name", o->model_names,
                  "A name /v1/models lists and requests' \"model\" must use; repeat for aliases "
                  "(default: the model file's name without its extension)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--chat-template", o->chat_template,
                  "A Jinja chat template file (or a tokenizer_config.json) for chat requests "
                  "(default: the model folder's tokenizer_config.json chat_template, else the "
                  "plain \"<role>: <content>\" template)");
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "How the model marks its thinking: deepseek_r1 (DeepSeek-R1 and its distills) or "
                  "qwen3 (Qwen3, QwQ); chat replies then carry it as reasoning_content apart from "
                  "the content (default: it stays in the content)");
  cmd->add_option(
         "--generation-config", o->generation_config,
         "Where request defaults come from: auto (the model folder's "
         "generation_config.json: its temperature, top_p, top_k, min_p, "
         "repetition_penalty and max_new_tokens for requests that set none, its "
         "eos_token_id ending replies), vllm (none of it), or a folder holding such a file")
      ->capture_default_str();
  CLI::Option* parser = cmd->add_option(
      "--tool-call-parser", o->tool_call_parser,
      "The model's tool-call format for --enable-auto-tool-choice: hermes (Qwen2.5, Qwen3, "
      "Hermes), llama3_json (Llama 3.1-3.3), mistral (Mistral, Mixtral, NeMo) or pythonic "
      "(Llama 3.2 1B/3B, Llama 4)");
  cmd->add_flag("--enable-auto-tool-choice", o->auto_tool_choice,
                "Let chat requests with tools leave tool_choice \"auto\" (its default): the model "
                "decides whether to call, and its calls come back as tool_calls")
      ->needs(parser);
  parser->needs("--enable-auto-tool-choice");
  add_hf_overrides_option(cmd, o->hf_overrides);
  cmd->add_option("--max-model-len", o->max_model_len,
                  "The longest sequence, prompt and reply (default: the model's context; a "
                  "long-context model's full length may need more cache than it is worth)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-batch", o->max_batch, "Sequences decoded together at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-blocks", o->kv_blocks,
                  "KV cache blocks of --block-size tokens (0: room for --max-batch full contexts)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", o->kv_cache_memory,
                  "The KV cache's size instead of --kv-blocks, e.g. 2GiB (a bfloat16 cache holds "
                  "twice the blocks of a float32 one)")
      ->transform(CLI::AsSizeValue(false))
      ->excludes("--kv-blocks");
  cmd->add_option("--block-size", o->block_size, "Tokens per KV cache block (a multiple of 16)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens,
                  "Tokens per engine step (long prompts are prefilled in chunks of this)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-concurrent", o->max_concurrent, "Requests in flight (more get 429)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (more get 413)")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", o->shutdown_grace,
                  "Seconds SIGTERM/SIGINT lets requests in flight finish before cancelling them "
                  "(a second signal cancels them at once)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed for requests that bring none")->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->prefix_caching,
                "Keep computed KV blocks for later prompts that start with the same tokens "
                "(on by default)");
  add_weight_dtype_options(cmd, o->dtype, o->quantization);
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype,
                  "What the KV cache stores: auto (float32, the compute dtype) or bfloat16 (half "
                  "the memory per token, and what decode attention reads)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding as vLLM's JSON, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, "
                  "\"prompt_lookup_min\": 2}': drafts looked up in each request's own text, "
                  "verified in the same forward (outputs unchanged; default: off)");
  cmd->add_option("--lora-modules", o->lora_modules,
                  "A LoRA adapter served beside the base model as NAME=PATH (a PEFT adapter "
                  "folder, e.g. a `train --lora-rank` run's adapter/); requests naming NAME as "
                  "their model run through it, batched with the others; repeat for more")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--threads", o->threads, "CPU threads (0: OpenMP's default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", o->device,
                  "cpu, cuda or cuda:N: where the model and its KV cache live and the forward "
                  "runs (tokens are drawn there too, except with penalties or logprobs)")
      ->capture_default_str();
  return {cmd, [o]() {
            // SIGINT / SIGTERM stop the server from a watcher thread (sigwait), not from a
            // signal handler: blocked here, before any thread (OpenMP's, the engine's, the
            // HTTP workers) is started, so every thread inherits the mask.
            sigset_t stop_signals;
            sigemptyset(&stop_signals);
            sigaddset(&stop_signals, SIGINT);
            sigaddset(&stop_signals, SIGTERM);
            pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
            if (o->threads > 0) omp_set_num_threads(o->threads);
            const Device device = device_option(o->device, "serve");
            // Checked before the model loads: a typo fails at once.
            const infer::SpeculativeConfig speculative =
                infer::SpeculativeConfig::parse(o->speculative_config, "serve");
            infer::GenerationConfig generation;  // "vllm": none
            if (o->generation_config != "auto" && o->generation_config != "vllm") {
              const std::filesystem::path folder(o->generation_config);
              TESSERA_CHECK(std::filesystem::exists(folder / "generation_config.json"), ValueError,
                            "[serve] expected --generation-config auto, vllm or a folder holding "
                            "generation_config.json, got '",
                            o->generation_config, "'");
              generation = infer::read_generation_config(folder);
            }
            std::optional<serve::ReasoningFormat> reasoning_parser;
            if (!o->reasoning_parser.empty())
              reasoning_parser = serve::reasoning_format(o->reasoning_parser);
            std::optional<serve::ToolCallFormat> tool_call_parser;
            if (o->auto_tool_choice)
              tool_call_parser = serve::tool_call_format(o->tool_call_parser);
            infer::LoadOptions load_options;
            load_options.config_overrides = o->hf_overrides;
            LoadedModel loaded = load_model(o->model, load_options);
            loaded.model->to(device);
            std::shared_ptr<tokenizers::Tokenizer> tokenizer =
                model_tokenizer(loaded, o->tokenizer, o->data_dir, "serve");

            infer::EngineConfig ec;
            ec.block_size = o->block_size;
            ec.num_blocks = o->kv_blocks;
            ec.kv_cache_memory_bytes = static_cast<int64_t>(o->kv_cache_memory);
            ec.max_num_seqs = o->max_batch;
            ec.max_model_len = o->max_model_len;
            ec.max_num_batched_tokens = std::max(o->max_batched_tokens, o->max_batch);
            ec.seed = o->seed;
            ec.enable_prefix_caching = o->prefix_caching;
            ec.kv_cache_dtype =
                infer::inference_dtype_from_name(o->kv_cache_dtype, "serve", "a KV cache dtype");
            ec.weight_dtype = infer::weight_dtype_from_names(o->dtype, o->quantization, "serve");
            ec.speculative = speculative;
            auto base_engine = std::make_unique<infer::Engine>(*loaded.model, ec, tokenizer);
            serve::ServerConfig sc;
            for (const std::string& module : o->lora_modules) {
              const size_t eq = module.find('=');
              TESSERA_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < module.size(), ValueError,
                            "[serve] expected --lora-modules NAME=PATH, got '", module, "'");
              const std::string path = module.substr(eq + 1);
              const int32_t id = base_engine->add_lora(io::load_lora_adapter(path));
              sc.lora_modules.push_back({module.substr(0, eq), path, id});
            }
            auto engine = std::make_shared<infer::AsyncEngine>(std::move(base_engine));
            sc.host = o->host;
            sc.port = o->port;
            sc.api_key = o->api_key;
            sc.model_names = o->model_names;
            if (sc.model_names.empty())
              sc.model_names = {std::filesystem::path(loaded.source).stem().string()};
            sc.max_body_bytes = o->max_body_bytes;
            sc.chat_template = serve::load_chat_template(o->chat_template, loaded.folder());
            sc.max_concurrent_requests = o->max_concurrent;
            sc.tool_call_parser = tool_call_parser;
            sc.reasoning_parser = reasoning_parser;
            sc.generation_config = o->generation_config == "auto" ? loaded.generation : generation;
            if (const std::string d = sc.generation_config.describe_sampling(); !d.empty())
              std::fprintf(stderr,
                           "tessera serve: request defaults from generation_config.json: %s\n",
                           d.c_str());

            serve::Server server(engine, sc);
            const int port = server.bind();
            // The first signal drains (new requests get 503, those in flight finish within the
            // grace, then are cancelled); a second cancels them at once.
            std::mutex drain_mutex;
            std::thread drainer;
            serve::ShutdownSummary summary;
            std::atomic<bool> served{false};
            std::thread watcher([&] {
              for (int received = 0;; ++received) {
                int sig = 0;
                sigwait(&stop_signals, &sig);
                if (served) return;  // woken by the main thread below
                if (received > 0) {
                  server.shutdown(std::chrono::milliseconds(0));
                  continue;
                }
                std::fprintf(stderr,
                             "serve: %s: finishing %lld requests in flight (up to %g s; signal "
                             "again to cancel them now)\n",
                             strsignal(sig), static_cast<long long>(server.in_flight()),
                             o->shutdown_grace);
                std::lock_guard<std::mutex> lock(drain_mutex);
                drainer = std::thread([&] {
                  summary = server.shutdown(
                      std::chrono::milliseconds(static_cast<int64_t>(o->shutdown_grace * 1000.0)));
                });
              }
            });
            const infer::EngineStats stats = engine->stats();
            std::string extras;
            if (ec.speculative.enabled())
              extras += detail::str(", up to ", ec.speculative.num_speculative_tokens,
                                    " prompt-lookup drafts",
                                    ec.speculative.adaptive ? " (adaptive)" : "");
            for (const serve::LoraModule& m : sc.lora_modules)
              extras += detail::str(", LoRA '", m.name, "' from ", m.path);
            std::fprintf(
                stderr,
                "serve: %s as '%s' on http://%s:%d (%s, batch %lld, %lld KV blocks of %lld%s)\n",
                loaded.source.c_str(), sc.model_names.front().c_str(), sc.host.c_str(), port,
                device.str().c_str(), static_cast<long long>(ec.max_num_seqs),
                static_cast<long long>(stats.blocks_total), static_cast<long long>(ec.block_size),
                extras.c_str());
            server.run();
            served = true;
            pthread_kill(watcher.native_handle(), SIGTERM);  // blocked: only its sigwait sees it
            watcher.join();
            {
              std::lock_guard<std::mutex> lock(drain_mutex);
              if (drainer.joinable()) drainer.join();
            }
            std::fprintf(stderr,
                         "serve: stopped in %.2f s (%lld requests in flight at the signal, %lld "
                         "cancelled)\n",
                         summary.seconds, static_cast<long long>(summary.in_flight),
                         static_cast<long long>(summary.cancelled));
            return 0;
          }};
}

}  // namespace tessera::cli
