// The studio with a real model (llama2.c's stories260K from the shared data; skipped without):
// models read by the library's loader, `tessera serve` children started, stopped, restarted and
// adopted by a restarted studio, a hung one shown unresponsive, chat streamed through a service,
// and the stop button cancelling the request in the engine (the service's /metrics shows nothing
// running afterwards; that test chats with a larger model trained for a step on tinyshakespeare);
// a training run followed while `tessera train` writes it.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "studio_harness.h"
#include "tessera/studio/process.h"

namespace tessera::studio {
namespace {

using testing::error_of;
using testing::Json;
using testing::TestStudio;

#define STORIES_OR_SKIP(model, tokenizer)                \
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin"); \
  TESSERA_SHARED_DATA_OR_SKIP(tokenizer, "stories260K_idtok.bin")

Json add_model(const TestStudio& s, const std::string& model, const std::string& tokenizer = "",
               const std::string& name = "stories") {
  Json body = {{"path", model}, {"name", name}};
  if (!tokenizer.empty()) body["tokenizer"] = tokenizer;
  auto r = s.post("/api/models", body);
  EXPECT_EQ(r.status, 201) << r.body;
  return r.body;
}

// A run folder of `tessera train` (one step on text): a 19M-parameter character-level LLaMA that
// decodes a few hundred tokens/s here, where stories260K writes 10,000/s. A stop pressed at the
// first token must land before the answer ends, on any machine and under a loaded ctest -j.
std::string slow_model(const std::string& dir, const std::string& text) {
  const std::string out = dir + "/slow_model";
  const std::string cmd =
      ::tessera::testing::tessera_cli() +
      " train --model llama --n-layer 6 --n-embd 512 --n-head 8 --seq-len 512"
      " --batch-size 1 --max-steps 1 --eval-steps 1 --sample-tokens 0 --data '" +
      text + "' --out '" + out + "' > '" + dir + "/slow_model.log' 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

// A started service of the model (args: extra `tessera serve` options).
Json started_service(const TestStudio& s, const Json& model, const Json& args = Json::array()) {
  auto svc = s.post("/api/services", {{"name", "svc"}, {"model_id", model["id"]}, {"args", args}});
  EXPECT_EQ(svc.status, 201) << svc.body;
  auto started = s.post("/api/services/" + svc.body["id"].dump() + "/start");
  EXPECT_EQ(started.status, 200) << started.body;
  EXPECT_EQ(started.body["state"], "running");
  return started.body;
}

struct ChatStream {
  std::vector<Json> events;
  Json done;  // the final event's message
};

// Streams a chat (message: {"content", "settings"}); on_first runs once, at the first delta (the
// test presses stop there).
ChatStream chat(const TestStudio& s, int64_t conversation, const Json& message,
                const std::function<void()>& on_first = {}) {
  httplib::Client c("127.0.0.1", s.port);
  c.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/api/conversations/" + std::to_string(conversation) + "/chat";
  req.body = message.dump();
  req.set_header("Authorization", std::string("Bearer ") + testing::kKey);
  req.set_header("Content-Type", "application/json");
  ChatStream out;
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const Json e = Json::parse(buffer.substr(6, end - 6), nullptr, false);
      buffer.erase(0, end + 2);
      if (e.contains("done"))
        out.done = e["message"];
      else
        out.events.push_back(e);
      if (out.events.size() == 1 && on_first && !e.contains("done")) on_first();
    }
    return true;
  };
  auto res = c.send(req);
  EXPECT_TRUE(res) << httplib::to_string(res.error());
  if (res) EXPECT_EQ(res->status, 200);
  return out;
}

double metric(const TestStudio& s, int64_t service, const std::string& name) {
  auto r = s.get("/api/services/" + std::to_string(service) + "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  return r.body.value(name, -1.0);
}

TEST(StudioServices, ModelsAreReadByTheLibraryLoader) {
  STORIES_OR_SKIP(model, tokenizer);
  TestStudio s(testing::fresh_dir("models"));
  const Json m = add_model(s, model, tokenizer);
  EXPECT_EQ(m["format"], "llama2.c");
  EXPECT_EQ(m["arch"], "llama");
  EXPECT_EQ(m["parameters"], 260032);
  EXPECT_EQ(m["memory_bytes"], 260032 * 4);
  EXPECT_EQ(m["kv_bytes_per_token"], 2 * 5 * 4 * (64 / 8) * 4);  // K and V, layers, KV heads, dim
  EXPECT_EQ(m["context_length"], 512);
  EXPECT_EQ(m["config"]["n_layers"], 5);
  auto dup = s.post("/api/models", {{"path", model}, {"name", "stories"}});
  EXPECT_EQ(dup.status, 409) << dup.body;
  auto bad_tok = s.post("/api/models", {{"path", model}, {"tokenizer", "/no/tok.bin"}});
  EXPECT_EQ(bad_tok.status, 400);
  EXPECT_EQ(s.get("/api/models").body.size(), 1u);
  EXPECT_EQ(s.call("DELETE", "/api/models/" + m["id"].dump()).status, 200);
}

TEST(StudioServices, StartStopRestartAndAStudioRestartAdoptsTheChild) {
  STORIES_OR_SKIP(model, tokenizer);
  const std::string dir = testing::fresh_dir("services");
  int64_t id = 0;
  int pid = 0;
  {
    TestStudio s(dir);
    const Json svc = started_service(s, add_model(s, model, tokenizer));
    id = svc["id"];
    pid = static_cast<int>(svc["pid"].get<int64_t>());
    EXPECT_TRUE(process_alive(pid));
    EXPECT_EQ(svc["health"], "ok");
    // A hung server: its process lives on, but /health gets no answer.
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    const Json hung = s.get("/api/services/" + std::to_string(id)).body;
    ::kill(pid, SIGCONT);
    EXPECT_EQ(hung["state"], "running");
    EXPECT_EQ(hung["health"], "unresponsive");
    EXPECT_EQ(s.get("/api/services/" + std::to_string(id)).body["health"], "ok");
    EXPECT_EQ(metric(s, id, "tessera_requests_running"), 0.0);
    EXPECT_NE(s.get("/api/services/" + std::to_string(id) + "/logs")
                  .body["log"]
                  .get<std::string>()
                  .find("serve: "),
              std::string::npos);
    auto del_model = s.call("DELETE", "/api/models/" + svc["model_id"].dump());
    EXPECT_EQ(del_model.status, 409) << del_model.body;  // a service uses it
  }
  {
    TestStudio s(dir);  // the studio restarted: the child kept running and is adopted
    const Json svc = s.get("/api/services/" + std::to_string(id)).body;
    EXPECT_EQ(svc["state"], "running");
    EXPECT_EQ(svc["pid"], pid);
    EXPECT_EQ(metric(s, id, "tessera_requests_running"), 0.0);
    const Json restarted = s.post("/api/services/" + std::to_string(id) + "/restart").body;
    EXPECT_EQ(restarted["state"], "running");
    EXPECT_NE(restarted["pid"], pid);
    EXPECT_FALSE(process_alive(pid));
    pid = static_cast<int>(restarted["pid"].get<int64_t>());
    const Json stopped = s.post("/api/services/" + std::to_string(id) + "/stop").body;
    EXPECT_EQ(stopped["state"], "stopped");
    EXPECT_TRUE(stopped["health"].is_null());
    EXPECT_FALSE(process_alive(pid));
    EXPECT_EQ(s.get("/api/services/" + std::to_string(id) + "/metrics").status, 409);
  }
  {
    TestStudio s(dir);  // stopped on purpose: a restart leaves it stopped
    EXPECT_EQ(s.get("/api/services/" + std::to_string(id)).body["state"], "stopped");
    EXPECT_EQ(s.call("DELETE", "/api/services/" + std::to_string(id)).status, 200);
  }
}

TEST(StudioServices, ChatStreamsAndTheStopButtonCancelsTheRequestInTheEngine) {
  TESSERA_SHARED_DATA_OR_SKIP(text, "tinyshakespeare.txt");
  const std::string dir = testing::fresh_dir("chat");
  TestStudio s(dir);
  const Json model = add_model(s, slow_model(dir, text), "", "slow");
  // The studio's own serve flags cannot be overridden (serve keeps an option's last value: a
  // --host would expose the key-less serve API beyond the loopback).
  for (const char* arg : {"--host=0.0.0.0", "--port", "--model=/x", "--api-key=k"})
    EXPECT_EQ(s.post("/api/services", {{"name", "bad"}, {"model_id", model["id"]}, {"args", {arg}}})
                  .status,
              400)
        << arg;
  const Json svc = started_service(s, model);
  const int64_t sid = svc["id"];
  auto conv =
      s.post("/api/conversations", {{"title", "t"},
                                    {"service_id", sid},
                                    {"settings", {{"temperature", 0}, {"max_tokens", 80}}}});
  ASSERT_EQ(conv.status, 201) << conv.body;
  const int64_t cid = conv.body["id"];

  // A short answer runs to its end, with its speed figures; the settings it was asked with stay
  // with the conversation.
  const ChatStream full =
      chat(s, cid, {{"content", "Once upon a time"}, {"settings", {{"max_tokens", 8}}}});
  const Json kept = s.get("/api/conversations/" + std::to_string(cid)).body["settings"];
  EXPECT_EQ(kept, (Json{{"temperature", 0}, {"max_tokens", 8}})) << kept;
  ASSERT_FALSE(full.done.is_null());
  EXPECT_EQ(full.done["role"], "assistant");
  EXPECT_FALSE(full.done["content"].get<std::string>().empty());
  EXPECT_EQ(full.done["stats"]["finish_reason"], "length");
  EXPECT_EQ(full.done["stats"]["tokens"], static_cast<int64_t>(full.events.size()));
  EXPECT_GT(full.done["stats"]["ttft_s"].get<double>(), 0.0);
  EXPECT_GT(full.done["stats"]["tokens_per_s"].get<double>(), 0.0);

  // A reply held to a regular expression (the service's structured output): the Shakespeare
  // characters spell it, and the request ends where the expression does.
  const ChatStream held =
      chat(s, cid,
           {{"content", "Well?"},
            {"settings", {{"output", "regex"}, {"output_spec", "(yes|no), lord"}}}});
  ASSERT_FALSE(held.done.is_null());
  EXPECT_EQ(held.done["stats"]["finish_reason"], "stop") << held.done.dump();
  const std::string answer = held.done["content"].get<std::string>();
  EXPECT_TRUE(answer == "yes, lord" || answer == "no, lord") << answer;

  // A long one is stopped at its first token.
  const int64_t max_tokens = 400;
  ASSERT_EQ(s.call("PATCH", "/api/conversations/" + std::to_string(cid),
                   Json{{"settings",
                         {{"temperature", 1.0}, {"max_tokens", max_tokens}, {"ignore_eos", true}}}})
                .status,
            200);
  std::atomic<bool> stopped{false};
  std::atomic<int> deleting{0};
  const ChatStream cut = chat(s, cid, {{"content", "Tell a long story"}}, [&] {
    deleting = s.call("DELETE", "/api/conversations/" + std::to_string(cid)).status;
    stopped = s.post("/api/conversations/" + std::to_string(cid) + "/stop").body["stopped"];
  });
  EXPECT_TRUE(stopped);
  EXPECT_EQ(deleting, 409) << "a conversation whose reply streams is not deleted";
  ASSERT_FALSE(cut.done.is_null());
  EXPECT_EQ(cut.done["stats"]["finish_reason"], "cancelled");
  EXPECT_LT(cut.done["stats"]["tokens"].get<int64_t>(), max_tokens);
  // The engine dropped the request: nothing running, and no more tokens generated.
  double running = -1;
  for (int i = 0; i < 50 && running != 0.0; ++i) {
    running = metric(s, sid, "tessera_requests_running");
    if (running != 0.0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(running, 0.0);
  // A step already running when the abort landed may still add its token (AsyncEngine::abort);
  // after it, nothing more may come.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double generated = metric(s, sid, "tessera_generation_tokens_total");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(metric(s, sid, "tessera_generation_tokens_total"), generated);
  EXPECT_LT(generated, 8 + max_tokens);

  // Server-side history: the three exchanges, in order.
  const Json history = s.get("/api/conversations/" + std::to_string(cid)).body["messages"];
  ASSERT_EQ(history.size(), 6u);
  EXPECT_EQ(history[0]["role"], "user");
  EXPECT_EQ(history[5]["stats"]["finish_reason"], "cancelled");
  EXPECT_EQ(s.post("/api/services/" + std::to_string(sid) + "/stop").status, 200);
}

// A service started with a reasoning parser: its thinking arrives as "reasoning" events and is
// kept apart from the answer in the stored message. stories260K never closes a thought, so under
// deepseek_r1 (whose template opens it) everything it writes is thinking.
TEST(StudioServices, AReasoningServicesThinkingIsKeptApartFromItsAnswer) {
  STORIES_OR_SKIP(model, tokenizer);
  TestStudio s(testing::fresh_dir("reasoning"));
  const Json svc =
      started_service(s, add_model(s, model, tokenizer), {"--reasoning-parser=deepseek_r1"});
  auto conv =
      s.post("/api/conversations",
             {{"service_id", svc["id"]},
              {"settings", {{"temperature", 0}, {"max_tokens", 12}, {"ignore_eos", true}}}});
  ASSERT_EQ(conv.status, 201) << conv.body;
  const int64_t cid = conv.body["id"];
  const ChatStream reply = chat(s, cid, {{"content", "Once upon a time"}});
  ASSERT_FALSE(reply.done.is_null());
  std::string thought;
  for (const Json& e : reply.events) thought += e.value("reasoning", "");
  EXPECT_FALSE(thought.empty());
  EXPECT_EQ(reply.done["reasoning"], thought);
  EXPECT_EQ(reply.done["content"], "");
  EXPECT_EQ(reply.done["stats"]["tokens"], 12);
  const Json history = s.get("/api/conversations/" + std::to_string(cid)).body["messages"];
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1]["reasoning"], thought);
  EXPECT_EQ(history[0]["reasoning"], "") << "the user's message has none";
  EXPECT_EQ(s.post("/api/services/" + svc["id"].dump() + "/stop").status, 200);
}

TEST(StudioServices, ARunIsFollowedWhileTesseraTrainWritesIt) {
  TESSERA_SHARED_DATA_OR_SKIP(text, "tinyshakespeare.txt");
  const std::string dir = testing::fresh_dir("live_run");
  TestStudio s(dir);
  const std::string out = dir + "/run";
  // A tiny GPT-2 that would train for a million steps, evaluated and sampled every 10.
  std::vector<std::string> argv = {
      ::tessera::testing::tessera_cli(), "train", "--data", text, "--out", out};
  std::istringstream options(
      "--model gpt2 --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --batch-size 4 --max-steps "
      "1000000 --eval-every 10 --eval-steps 1 --sample-every 10 --sample-tokens 8");
  for (std::string word; options >> word;) argv.push_back(word);
  const int pid = spawn_process(argv, dir + "/train.log");
  struct StopTrainer {  // also when an assertion ends the test early
    int pid;
    ~StopTrainer() { stop_process(pid, std::chrono::seconds(10)); }
  } stop_trainer{pid};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(out + "/config.json") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto run = s.post("/api/runs", {{"path", out}, {"name", "live"}});
  ASSERT_EQ(run.status, 201) << run.body;
  const std::string url = "/api/runs/" + run.body["id"].dump();
  EXPECT_EQ(s.get(url).body["config"]["arch"], "gpt2");

  // Read as the page does, each time only what was written since, while the trainer writes
  // (lines are often caught half-written).
  std::vector<int64_t> train_steps;
  int64_t after = 0, val_losses = 0, reads = 0;
  Json samples;
  while ((train_steps.size() < 100 || samples.empty()) &&
         std::chrono::steady_clock::now() < deadline) {
    const Json r = s.get(url + "?after=" + std::to_string(after)).body;
    for (const Json& m : r["metrics"]) {
      if (m.contains("train_loss")) train_steps.push_back(m["step"]);
      val_losses += m.contains("val_loss");
    }
    after = r["next"];
    samples = r["samples"];
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(process_alive(pid));  // followed while it is written, not afterwards
  ASSERT_GE(train_steps.size(), 100u) << tail_file(dir + "/train.log", 2000);
  EXPECT_GE(reads, 2);                             // it was read before it was done
  for (size_t i = 0; i < train_steps.size(); ++i)  // every step once: none lost, none repeated
    ASSERT_EQ(train_steps[i], static_cast<int64_t>(i) + 1) << i;
  EXPECT_GE(val_losses, 3);
  ASSERT_FALSE(samples.empty());
  EXPECT_EQ(samples[0]["step"], 10);
}

}  // namespace
}  // namespace tessera::studio
