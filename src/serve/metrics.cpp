#include "tessera/serve/metrics.h"

#include <sstream>

namespace tessera::serve {

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::ostringstream os;
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    os << name << "_bucket{le=\"" << kBounds[i] << "\"} " << cumulative << "\n";
  }
  os << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
  os << name << "_sum " << sum_ << "\n" << name << "_count " << count_ << "\n";
  return os.str();
}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  generation_tokens_ += generated;
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_time_between_tokens(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  tbt_.observe(seconds);
}

std::string Metrics::render(const infer::EngineStats& stats) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  auto header = [&](const char* name, const char* type, const char* help) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  header("tessera_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_)
    os << "tessera_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second
       << "\"} " << n << "\n";
  header("tessera_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
  os << "tessera_prompt_tokens_total " << prompt_tokens_ << "\n";
  header("tessera_generation_tokens_total", "counter", "Tokens generated.");
  os << "tessera_generation_tokens_total " << generation_tokens_ << "\n";
  header("tessera_time_to_first_token_seconds", "histogram",
         "Time from a request's arrival to its first generated token.");
  os << ttft_.render("tessera_time_to_first_token_seconds");
  header("tessera_time_between_tokens_seconds", "histogram",
         "Time between consecutive generated tokens of a request.");
  os << tbt_.render("tessera_time_between_tokens_seconds");
  header("tessera_requests_waiting", "gauge", "Requests queued for admission.");
  os << "tessera_requests_waiting " << stats.num_waiting << "\n";
  header("tessera_requests_running", "gauge", "Requests in the running batch.");
  os << "tessera_requests_running " << stats.num_running << "\n";
  header("tessera_kv_blocks_used", "gauge", "KV cache blocks in use.");
  os << "tessera_kv_blocks_used " << stats.blocks_used << "\n";
  header("tessera_kv_blocks_total", "gauge", "KV cache blocks in the pool.");
  os << "tessera_kv_blocks_total " << stats.blocks_total << "\n";
  header("tessera_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.");
  os << "tessera_preemptions_total " << stats.num_preemptions << "\n";
  // vLLM's prefix_cache_queries / prefix_cache_hits: their ratio is the hit rate.
  header("tessera_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.");
  os << "tessera_prefix_cache_queries_total " << stats.prefix_cache_queries << "\n";
  header("tessera_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  os << "tessera_prefix_cache_hits_total " << stats.prefix_cache_hits << "\n";
  // vLLM's spec_decode counters: accepted / draft tokens is the acceptance rate, and
  // 1 + accepted / drafts the tokens a sequence's speculative step brings on average.
  header("tessera_spec_decode_num_drafts_total", "counter",
         "Sequence steps that ran speculative draft tokens.");
  os << "tessera_spec_decode_num_drafts_total " << stats.spec_num_drafts << "\n";
  header("tessera_spec_decode_num_draft_tokens_total", "counter", "Draft tokens run.");
  os << "tessera_spec_decode_num_draft_tokens_total " << stats.spec_draft_tokens << "\n";
  header("tessera_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.");
  os << "tessera_spec_decode_num_accepted_tokens_total " << stats.spec_accepted_tokens << "\n";
  header("tessera_engine_steps_total", "counter", "Engine steps run.");
  os << "tessera_engine_steps_total " << stats.num_steps << "\n";
  return os.str();
}

}  // namespace tessera::serve
