#pragma once
// What the studio records about files on disk: a model file (through the library's own loader,
// so anything `tessera serve` can load can be registered, and nothing else), a training run's
// folder (metrics.jsonl, config.json, samples) and a `tessera bench` result (tessera-bench/1).
// Bad input throws ValueError "[studio.<what>] expected ..., got ...".
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::studio {

// A model's header facts: {"format": "tessera" | "safetensors" | "llm.c" | "llama2.c",
// "arch", "parameters", "dtype" (of the file), "memory_bytes" (the float32 weights `tessera
// serve` holds), "config" (the architecture), "tokenizer" (the one recorded with it, or "")}.
nlohmann::json inspect_model(const std::string& path);

// A run folder as the studio shows it: {"path", "config" (config.json, or null), "metrics"
// (metrics.jsonl records from line `after` on; a partly written last line is left for the next
// read), "next" (the line to ask from next time), "samples" (samples.jsonl: [{"step", "text"}]),
// "checkpoints" (folder names)}. ValueError when path is not a folder.
nlohmann::json read_run(const std::string& path, int64_t after = 0);

// Checks a bench result's shape (format tessera-bench/1, suite, machine, figures with name,
// unit, better, params, samples, median); returns it unchanged, ValueError naming the field.
const nlohmann::json& validate_bench(const nlohmann::json& bench);
// The figures of a and b matched by name + params: [{"name", "params", "unit", "better", "a",
// "b", "ratio" (b / a medians), "improved" (bool, by "better")}]; unmatched figures have null
// on the side that lacks them.
nlohmann::json compare_bench(const nlohmann::json& a, const nlohmann::json& b);
// The hardware figures an accelerator card shows: gemm by dtype (the best size), stream by
// kernel, latency by bytes: {"gemm": {"fp32": median FLOP/s}, "stream": {"triad": B/s}, "latency": {"64": s}}.
nlohmann::json hardware_summary(const nlohmann::json& bench);

}  // namespace tessera::studio
