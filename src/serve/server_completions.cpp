// The /v1/completions and /v1/chat/completions handler: each choice submitted to the engine, its
// outputs answered as one response or streamed as server-sent events.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/server_internal.h"
#include "tessera/core/error.h"
#include "tessera/serve/openai.h"
#include "tessera/serve/server.h"

namespace tessera::serve {

using namespace detail;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// A request the engine failed (a bug: requests are validated on submit) gets a 500, as vLLM's.
ApiError engine_failure(const std::string& what) {
  return ApiError(500, "the engine failed the request: " + what, "", "server_error");
}

// Where each choice of a request stands, beside what its response shows.
struct ChoiceProgress {
  int32_t last_token = -1;  // for the leading space of the next logprob token
  int64_t tokens = 0;       // generated so far
};

// Folds an output into its choice (accumulating for a response, replacing for a stream chunk);
// returns whether it finished the choice.
bool apply(CompletionState& s, std::vector<ChoiceProgress>& progress,
           const RequestChannel::Output& o, const tokenizers::Tokenizer& tokenizer,
           bool accumulate) {
  Choice& c = s.choices[o.choice];
  ChoiceProgress& p = progress[o.choice];
  const infer::RequestOutput& out = o.out;
  if (!accumulate) {
    for (const LogprobEntry& e : c.logprobs) c.text_offset += static_cast<int64_t>(e.token.size());
    c.text.clear();
    c.token_ids.clear();
    c.logprobs.clear();
  }
  c.text += out.text;
  c.token_ids.insert(c.token_ids.end(), out.new_tokens.begin(), out.new_tokens.end());
  for (const infer::TokenLogprob& t : out.logprobs) c.cumulative_logprob += t.logprob;
  if (s.logprobs) {
    const std::vector<LogprobEntry> e = logprob_entries(out.logprobs, tokenizer, p.last_token);
    c.logprobs.insert(c.logprobs.end(), e.begin(), e.end());
  }
  if (!out.new_tokens.empty()) p.last_token = out.new_tokens.back();
  if (o.choice == 0) s.cached_tokens = out.cached_tokens;  // the prompt counts once
  if (!out.prompt_logprobs.empty()) c.prompt_logprobs = out.prompt_logprobs;
  // A shutdown's Abort output counts no tokens: keep the count so far.
  s.completion_tokens += std::max<int64_t>(0, out.completion_tokens - p.tokens);
  p.tokens = std::max(p.tokens, out.completion_tokens);
  c.finish_reason = out.finish_reason;
  return out.finished();
}

// best_of: keeps the n choices with the highest cumulative logprob, renumbered 0..n-1 in that
// order, and counts only their tokens in usage (as vLLM does).
void keep_best(CompletionState& s, const std::vector<ChoiceProgress>& progress, size_t n) {
  std::vector<size_t> order(s.choices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return s.choices[a].cumulative_logprob > s.choices[b].cumulative_logprob;
  });
  std::vector<Choice> best;
  s.completion_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    best.push_back(std::move(s.choices[order[i]]));
    best.back().index = static_cast<int64_t>(i);
    s.completion_tokens += progress[order[i]].tokens;
  }
  s.choices = std::move(best);
}

}  // namespace

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  // Counts this request in flight until its response (or stream) is done.
  const bool over = ++in_flight > config.max_concurrent_requests;
  std::shared_ptr<void> slot(nullptr, [this](void*) { --in_flight; });
  if (refused(res, over)) return;
  CompletionRequest r;
  try {
    r = parse_request(ep, req.body, *tokenizer, limits);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  const size_t choices = static_cast<size_t>(r.best_of);
  auto channel = std::make_shared<RequestChannel>(choices);
  if (!submit(r, *channel, channel, res)) return;
  const int64_t id = channel->ids.front();
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.emplace(id, channel);
  }
  // Unregisters the request once its response (or stream) is done.
  std::shared_ptr<void> registered(nullptr, [this, id](void*) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(id);
  });
  metrics->count_tokens(static_cast<int64_t>(r.prompt.size()), 0);
  CompletionState state;
  state.id = (ep == Endpoint::Completions ? "cmpl-" : "chatcmpl-") + std::to_string(next_id++);
  state.created = unix_time();
  state.model = r.model;
  state.logprobs = r.logprobs >= 0;
  state.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  state.tool_choice = r.tool_choice;
  state.tool_name = r.tool_name;
  state.tool_format = r.tool_format;
  state.reasoning = r.reasoning;
  state.choices.resize(choices);
  for (size_t c = 0; c < choices; ++c) state.choices[c].index = static_cast<int64_t>(c);
  // The first token's text depends on the prompt's last one (a leading space after BOS).
  std::vector<ChoiceProgress> progress(
      choices, ChoiceProgress{.last_token = r.prompt.empty() ? -1 : r.prompt.back()});

  if (!r.stream) {
    // Each choice ends with exactly one finishing output (the engine's or a shutdown's Abort).
    std::string failure;
    for (size_t open = choices; open > 0;)
      for (const RequestChannel::Output& o : channel->take(kPollInterval)) {
        open -= apply(state, progress, o, *tokenizer, /*accumulate=*/true);
        if (!o.out.error.empty()) failure = o.out.error;
      }
    if (!failure.empty()) return send_error(res, engine_failure(failure));
    if (channel->cancelled_by_shutdown)
      return send_error(res, ApiError(503, "the server shut down before the request finished", "",
                                      "server_error", "shutting_down"));
    if (r.best_of > r.n) keep_best(state, progress, static_cast<size_t>(r.n));
    if (r.echo) echo_prompt(state, r, *tokenizer);
    for (Choice& c : state.choices) {
      extract_reasoning(state, c);
      extract_tool_calls(state, c);
    }
    return send_json(res, 200, response_json(ep, state));
  }

  res.set_header("Cache-Control", "no-cache");
  std::shared_ptr<infer::AsyncEngine> eng = engine;
  auto cancel = [channel, eng] {
    channel->cancelled = true;
    for (int64_t choice_id : channel->ids) eng->abort(choice_id);
  };
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, state, progress, ep, include_usage = r.include_usage, cancel, slot, registered,
       tok = tokenizer, first = std::vector<char>(choices, 1), open = choices,
       reasoning_streams = std::vector<ReasoningStream>(choices),
       tool_streams = std::vector<ToolCallStream>(choices)](size_t,
                                                            httplib::DataSink& sink) mutable {
        for (const RequestChannel::Output& o : channel->take(kPollInterval)) {
          if (!o.out.error.empty()) {  // an error event then [DONE], as vLLM streams one
            cancel();
            const std::string events = "data: " + error_json(engine_failure(o.out.error)) + "\n\n" +
                                       std::string(kStreamDone);
            if (!sink.write(events.data(), events.size())) return false;
            sink.done();
            return true;
          }
          // Calls of "required" are known only once their JSON array closes: sent whole.
          const bool whole = state.tool_choice == ToolChoice::Required;
          const bool done = apply(state, progress, o, *tok, /*accumulate=*/whole);
          if (whole && !done) continue;
          if (whole) extract_tool_calls(state, state.choices[o.choice]);
          Choice& c = state.choices[o.choice];
          if (state.reasoning) reasoning_streams[o.choice].advance(state, c, done);
          if (state.tool_choice == ToolChoice::Auto) tool_streams[o.choice].advance(state, c, done);
          if (!done && o.out.text.empty() && o.out.new_tokens.empty()) continue;
          std::string events = stream_event(ep, state, o.choice, first[o.choice]);
          first[o.choice] = 0;
          open -= done;
          if (open == 0) {
            if (include_usage) events += usage_event(ep, state);
            events += kStreamDone;
          }
          if (!sink.write(events.data(), events.size())) {
            cancel();
            return false;
          }
          if (open == 0) {
            sink.done();
            return true;
          }
        }
        if (!sink.is_writable()) {
          cancel();
          return false;
        }
        return true;
      },
      // httplib reports a stream cut by stop() as a success: what is unfinished is cancelled.
      [cancel, channel](bool success) {
        if (!success || !channel->all_done()) cancel();
      });
}

bool Server::Impl::submit(const CompletionRequest& r, RequestChannel& channel,
                          const std::shared_ptr<RequestChannel>& keep, httplib::Response& res) {
  try {
    // ids is read only by this thread until the request is registered in live.
    for (size_t c = 0; c < static_cast<size_t>(r.best_of); ++c)
      channel.ids.push_back(engine->submit(r.prompt, r.choice_params(static_cast<int64_t>(c)),
                                           [keep, c, m = metrics](const infer::RequestOutput& out) {
                                             return keep->push(c, out, *m);
                                           }));
    return true;
  } catch (const Error& e) {  // the engine's own validation
    for (int64_t id : channel.ids) engine->abort(id);
    send_error(res, ApiError(400, e.what()));
    return false;
  }
}

}  // namespace tessera::serve
