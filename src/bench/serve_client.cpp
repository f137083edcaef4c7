// The serve suite's streaming client: one /v1/completions request with "stream": true over
// cpp-httplib, its server-sent events parsed as they arrive and every chunk carrying tokens
// timestamped (what TTFT and ITL are computed from).
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "tessera/bench/serve.h"

namespace tessera::bench {

using Json = nlohmann::json;

void SseParser::feed(std::string_view bytes, std::vector<std::string>& events) {
  for (const char c : bytes) {
    // A line ends at \n, \r or \r\n (the SSE grammar); \r\n must not end two lines.
    if (c == '\n' && after_cr_) {
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c != '\n' && c != '\r') {
      line_.push_back(c);
      continue;
    }
    if (line_.empty()) {  // a blank line dispatches the event
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line_.rfind("data:", 0) == 0) {
      std::string_view value = std::string_view(line_).substr(5);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }  // comments (":...") and other fields (event:, id:, retry:) carry nothing we time
    line_.clear();
  }
}

namespace {

// Tokens a choice of a chunk carries: its token_ids, else one for non-empty text (a server that
// does not send ids streams one token per chunk, as vLLM's benchmark assumes).
int64_t choice_tokens(const Json& choice) {
  if (!choice.is_object()) return 0;
  if (auto ids = choice.find("token_ids"); ids != choice.end() && ids->is_array())
    return static_cast<int64_t>(ids->size());
  const Json* text = nullptr;
  if (auto t = choice.find("text"); t != choice.end()) text = &*t;
  if (auto d = choice.find("delta"); d != choice.end() && d->is_object() && d->contains("content"))
    text = &(*d)["content"];
  return text && text->is_string() && !text->get<std::string>().empty() ? 1 : 0;
}

}  // namespace

bool record_event(RequestRecord& record, std::string_view data, double t) {
  if (data == "[DONE]") return true;
  const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    record.error = "expected a JSON event, got " + std::string(data.substr(0, 200));
    return false;
  }
  if (j.contains("error")) {
    record.error = "the stream reported an error: " + j["error"].dump().substr(0, 300);
    return false;
  }
  int64_t tokens = 0;
  if (auto choices = j.find("choices"); choices != j.end() && choices->is_array())
    for (const Json& c : *choices) tokens += choice_tokens(c);
  if (tokens > 0) {
    record.token_times.push_back(t);
    record.output_tokens += tokens;
  }
  // The usage chunk comes last: its counts are the server's, replacing those counted.
  if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    record.prompt_tokens = usage->value("prompt_tokens", record.prompt_tokens);
    record.output_tokens = usage->value("completion_tokens", record.output_tokens);
  }
  return true;
}

RequestRecord send_request(const ClientOptions& client, const PlannedRequest& request,
                           std::chrono::steady_clock::time_point origin) {
  using Clock = std::chrono::steady_clock;
  const auto now = [origin] {
    return std::chrono::duration<double>(Clock::now() - origin).count();
  };
  RequestRecord record;
  record.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  httplib::Client http(client.url);
  if (!http.is_valid()) {
    record.error = "expected an http://host:port url, got \"" + client.url + "\"";
    record.send = now();
    return record;
  }
  const auto timeout = std::chrono::duration<double>(client.timeout);
  http.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  http.set_connection_timeout(10, 0);
  if (!client.api_key.empty()) http.set_bearer_token_auth(client.api_key);

  // vLLM's benchmark request: greedy, exactly output_len tokens, usage in the last chunk.
  Json body = {{"prompt", request.prompt}, {"max_tokens", request.output_len},
               {"temperature", 0.0},       {"ignore_eos", true},
               {"stream", true},           {"stream_options", {{"include_usage", true}}}};
  if (!client.model.empty()) body["model"] = client.model;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");

  int status = 0;
  std::string error_body;  // of a non-200 response, for the record's error
  SseParser parser;
  std::vector<std::string> events;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min<size_t>(n, 300 - std::min<size_t>(300, error_body.size())));
      return true;
    }
    const double t = now();
    events.clear();
    parser.feed(std::string_view(data, n), events);
    for (const std::string& e : events)
      if (!record_event(record, e, t)) return false;
    return true;
  };
  record.send = now();
  const httplib::Result res = http.send(req);
  if (!record.error.empty()) return record;
  if (!res) {
    record.error = "HTTP error: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    record.error = "HTTP " + std::to_string(res->status) + ": " + error_body;
  } else if (record.token_times.empty() || record.output_tokens == 0) {
    record.error = "the stream ended without tokens";
  } else {
    record.success = true;
  }
  return record;
}

}  // namespace tessera::bench
