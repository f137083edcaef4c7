// The studio's REST API without a model: authentication, validation errors, and CRUD of
// accelerators, benchmarks (with the hardware figures attached), training runs read live, and
// conversations with their export.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "studio_harness.h"

namespace tessera::studio {
namespace {

using testing::error_of;
using testing::Json;
using testing::TestStudio;

Json fixture(const std::string& name) {
  std::ifstream in(::tessera::testing::tests_dir() / "studio" / "fixtures" / name);
  return Json::parse(in);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(StudioApi, ChangesNeedTheKeyReadsDoNot) {
  TestStudio s(testing::fresh_dir("auth"));
  EXPECT_EQ(s.get("/api/overview").status, 200);
  const Json acc = {{"brand", "NVIDIA"}, {"model", "H100"}};
  auto none = s.call("POST", "/api/accelerators", acc, "");
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(contains(error_of(none), "expected 'Authorization: Bearer")) << none.body;
  EXPECT_EQ(s.call("POST", "/api/accelerators", acc, "wrong").status, 401);
  EXPECT_EQ(s.call("DELETE", "/api/runs/1", nullptr, "").status, 401);
  EXPECT_EQ(s.get("/api/accelerators").body.size(), 0u);  // nothing was created
  EXPECT_EQ(s.call("POST", "/api/login", Json{{"api_key", "wrong"}}, "").status, 401);
  EXPECT_EQ(s.call("POST", "/api/login", Json{{"api_key", testing::kKey}}, "").status, 200);
}

// A SIGTERM while the studio starts (before its accept loop) was lost and it served on.
TEST(StudioApi, StopBeforeRunEndsRun) {
  StudioConfig c;
  c.port = 0;
  c.data_dir = testing::fresh_dir("stop_early");
  c.api_key = testing::kKey;
  Studio studio(c);
  studio.bind();
  studio.stop();
  std::thread runner([&] { studio.run(); });
  runner.join();  // hangs without the fix: the test times out
}

// A service that takes the request and sends nothing (a long prefill, a hung child) held the chat
// and its worker for the 600 s read timeout, and the stop button could not end it.
TEST(StudioApi, TheStopButtonEndsAChatWhoseServiceSendsNothing) {
  TestStudio s(testing::fresh_dir("silent"));
  // A listening socket nobody accepts on: connections complete, no answer ever comes.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  Database& db = s.studio->db();
  const int64_t model = db.insert(
      "INSERT INTO models (name, path, format, arch, parameters, dtype, memory_bytes) "
      "VALUES ('m', '/m', 'llama2c', 'llama', 1, 'float32', 4)",
      Json::array());
  const int64_t service = db.insert(
      "INSERT INTO services (name, model_id, port, pid, state) VALUES ('silent', ?, ?, ?, "
      "'running')",
      {model, ntohs(addr.sin_port), ::getpid()});
  const Json conv = s.post("/api/conversations", {{"title", "t"}, {"service_id", service}}).body;
  const std::string path = "/api/conversations/" + std::to_string(conv["id"].get<int64_t>());

  testing::Reply chat;
  std::thread chatting([&] { chat = s.post(path + "/chat", {{"content", "hello"}}); });
  const int upstream = ::accept(fd, nullptr, nullptr);  // the studio has sent its request
  EXPECT_GE(upstream, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto pressed = std::chrono::steady_clock::now();
  EXPECT_TRUE(s.post(path + "/stop").body.value("stopped", false));
  chatting.join();
  EXPECT_LT(std::chrono::steady_clock::now() - pressed, std::chrono::seconds(10));
  EXPECT_EQ(chat.status, 200);
  const Json messages = s.get(path).body["messages"];
  ASSERT_EQ(messages.size(), 2u) << messages;
  EXPECT_EQ(messages[1]["stats"]["finish_reason"], "cancelled") << messages;
  if (upstream >= 0) ::close(upstream);
  ::close(fd);
}

// DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 read the studio's
// conversations (reads need no key). Loopback names with any port still reach it.
TEST(StudioApi, ALoopbackStudioAnswersOnlyLoopbackHostNames) {
  TestStudio s(testing::fresh_dir("host"));
  httplib::Client c("127.0.0.1", s.port);
  auto get_as = [&](const std::string& host) {
    httplib::Result r = c.Get("/api/conversations", {{"Host", host}});
    return r ? r->status : -1;
  };
  EXPECT_EQ(get_as("evil.example:" + std::to_string(s.port)), 403);
  EXPECT_EQ(get_as("evil.example"), 403);
  EXPECT_EQ(get_as("127.0.0.1.evil.example"), 403);
  EXPECT_EQ(get_as("localhost:" + std::to_string(s.port)), 200);
  EXPECT_EQ(get_as("127.0.0.1"), 200);
  EXPECT_EQ(get_as("[::1]:8080"), 200);
  httplib::Result refused = c.Get("/", {{"Host", "evil.example"}});
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->body.find("expected a request to localhost"), std::string::npos)
      << refused->body;
}

TEST(StudioApi, BadInputGetsClearJsonErrors) {
  TestStudio s(testing::fresh_dir("bad"));
  auto not_json = s.call("POST", "/api/accelerators", Json("{oops"));
  EXPECT_EQ(not_json.status, 400);
  EXPECT_TRUE(contains(error_of(not_json), "expected a JSON object body")) << not_json.body;
  auto missing = s.post("/api/accelerators", {{"brand", "AMD"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_TRUE(contains(error_of(missing), "expected 'model' to be a non-empty string"));
  auto negative =
      s.post("/api/accelerators", {{"brand", "AMD"}, {"model", "MI300X"}, {"memory_bytes", -1}});
  EXPECT_EQ(negative.status, 400);
  EXPECT_TRUE(contains(error_of(negative), "'memory_bytes' to be an integer")) << negative.body;
  auto compute = s.post("/api/accelerators",
                        {{"brand", "AMD"}, {"model", "MI300X"}, {"compute", {{"fp16", "fast"}}}});
  EXPECT_EQ(compute.status, 400);
  EXPECT_TRUE(contains(error_of(compute), "compute.fp16")) << compute.body;
  EXPECT_EQ(s.get("/api/models/42").status, 404);
  EXPECT_TRUE(contains(error_of(s.get("/api/models/42")), "expected an existing id, got 42"));
  EXPECT_EQ(s.get("/api/models/99999999999999999999999").status, 404);  // not an int64
  EXPECT_EQ(s.get("/api/no/such/route").status, 404);
  auto model = s.post("/api/models", {{"path", "/no/such/model.bin"}});
  EXPECT_EQ(model.status, 400);
  EXPECT_TRUE(contains(error_of(model), "expected an existing model file")) << model.body;
  auto service = s.post("/api/services", {{"name", "x"}, {"model_id", 7}});
  EXPECT_EQ(service.status, 404);
  auto settings = s.post("/api/conversations", {{"settings", {{"temprature", 1}}}});
  EXPECT_EQ(settings.status, 400);
  EXPECT_TRUE(contains(error_of(settings), "got 'temprature'")) << settings.body;
  auto output = s.post("/api/conversations", {{"settings", {{"output", "yaml"}}}});
  EXPECT_EQ(output.status, 400);
  EXPECT_TRUE(contains(error_of(output), "settings.output to be one of text, json_object"))
      << output.body;
  auto schema = s.post("/api/conversations",
                       {{"settings", {{"output", "json_schema"}, {"output_spec", "{nope"}}}});
  EXPECT_EQ(schema.status, 400);
  EXPECT_TRUE(contains(error_of(schema), "settings.output_spec to be a JSON Schema"))
      << schema.body;
  auto run = s.post("/api/runs", {{"path", "/no/such/run"}});
  EXPECT_EQ(run.status, 400);
  EXPECT_EQ(s.get("/api/runs/1?after=x").status, 404);  // no run 1: checked first
  // A field of the wrong JSON type is the client's error (nlohmann's type_error was a 500).
  EXPECT_EQ(s.call("POST", "/api/login", Json{{"api_key", 1}}, "").status, 400);
}

TEST(StudioApi, AcceleratorsShowTheirMeasuredHardwareFigures) {
  TestStudio s(testing::fresh_dir("acc"));
  auto acc = s.post("/api/accelerators", {{"brand", "Intel"},
                                          {"model", "Test CPU 9000"},
                                          {"memory_bytes", 8000000000},
                                          {"compute", {{"fp32", 1e12}}}});
  ASSERT_EQ(acc.status, 201) << acc.body;
  EXPECT_EQ(acc.body["compute"]["fp32"], 1e12);
  auto bench = s.post("/api/benchmarks", fixture("bench_hardware.json"));
  ASSERT_EQ(bench.status, 201) << bench.body;
  const Json list = s.get("/api/accelerators").body;
  ASSERT_EQ(list.size(), 1u);
  const Json& m = list[0]["measured"];
  EXPECT_EQ(m["gemm"]["fp32"], 2.0e11);
  EXPECT_EQ(m["stream"]["triad"], 1.05e10);
  EXPECT_EQ(m["latency"]["64"], 8.5e-8);
  EXPECT_EQ(m["benchmark_id"], bench.body["id"]);
  EXPECT_EQ(s.post("/api/accelerators/detect").status, 200);
  EXPECT_EQ(s.get("/api/accelerators").body.size(), 2u);
  EXPECT_EQ(s.post("/api/accelerators/detect").status, 200);  // once only
  EXPECT_EQ(s.get("/api/accelerators").body.size(), 2u);
  EXPECT_EQ(s.call("DELETE", "/api/accelerators/" + acc.body["id"].dump()).status, 200);
  EXPECT_EQ(s.get("/api/accelerators").body.size(), 1u);
}

TEST(StudioApi, BenchmarksAreValidatedListedAndCompared) {
  TestStudio s(testing::fresh_dir("bench"));
  Json a = fixture("bench_hardware.json");
  Json bad = a;
  bad["figures"][1].erase("median");
  auto rejected = s.post("/api/benchmarks", bad);
  EXPECT_EQ(rejected.status, 400);
  EXPECT_TRUE(contains(error_of(rejected), "expected figures[1].median to be a number"))
      << rejected.body;
  Json wrong_format = a;
  wrong_format["format"] = "other/2";
  EXPECT_EQ(s.post("/api/benchmarks", wrong_format).status, 400);

  Json b = a;
  b["date"] = "2026-11-24T10:00:00Z";
  b["figures"][0]["median"] = 3.0e11;  // gemm faster
  b["figures"][2]["median"] = 1.0e-7;  // latency worse
  b["figures"].push_back({{"name", "gemm"},
                          {"unit", "FLOP/s"},
                          {"better", "higher"},
                          {"params", {{"dtype", "bf16"}}},
                          {"samples", {1.0}},
                          {"median", 1.0}});
  const int64_t ia = s.post("/api/benchmarks", a).body["id"];
  const int64_t ib = s.post("/api/benchmarks", b).body["id"];
  const Json list = s.get("/api/benchmarks").body;
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["id"], ib);  // newest first
  EXPECT_EQ(list[0]["figures"], 4);
  EXPECT_EQ(s.get("/api/benchmarks/" + std::to_string(ia)).body["body"]["suite"], "hardware");

  const Json cmp =
      s.get("/api/benchmarks/compare?a=" + std::to_string(ia) + "&b=" + std::to_string(ib)).body;
  ASSERT_EQ(cmp["figures"].size(), 4u) << cmp;
  EXPECT_DOUBLE_EQ(cmp["figures"][0]["ratio"].get<double>(), 1.5);
  EXPECT_EQ(cmp["figures"][0]["improved"], true);
  EXPECT_EQ(cmp["figures"][2]["improved"], false);  // lower is better, and it rose
  EXPECT_TRUE(cmp["figures"][3]["a"].is_null());
  EXPECT_EQ(s.get("/api/benchmarks/compare?a=1").status, 400);
  EXPECT_EQ(s.get("/api/benchmarks/compare?a=1&b=99").status, 404);
}

TEST(StudioApi, TrainingRunsAreReadWhileTheyAreWritten) {
  TestStudio s(testing::fresh_dir("runs"));
  const std::string dir = testing::fresh_dir("runs_folder");
  std::ofstream(dir + "/config.json") << R"({"arch": "gpt2", "train": {"lr": 0.001}})";
  {
    std::ofstream m(dir + "/metrics.jsonl");
    m << R"({"step":1,"train_loss":4.2,"lr":0.001,"tok_per_s":1000})"
      << "\n"
      << R"({"step":2,"train_loss":3.9,"lr":0.001,"tok_per_s":1100})"
      << "\n"
      << R"({"step":3,"train_lo)";  // the trainer is halfway through this line
  }
  std::ofstream(dir + "/samples.jsonl") << R"({"step":2,"text":"Once upon a time"})"
                                        << "\n";
  auto run = s.post("/api/runs", {{"path", dir}, {"name", "tiny"}});
  ASSERT_EQ(run.status, 201) << run.body;
  EXPECT_EQ(s.post("/api/runs", {{"path", dir}}).status, 409);  // registered once
  const std::string url = "/api/runs/" + run.body["id"].dump();
  Json r = s.get(url).body;
  EXPECT_EQ(r["name"], "tiny");
  EXPECT_EQ(r["config"]["arch"], "gpt2");
  ASSERT_EQ(r["metrics"].size(), 2u);
  EXPECT_EQ(r["metrics"][1]["train_loss"], 3.9);
  EXPECT_EQ(r["next"], 2);
  EXPECT_EQ(r["samples"][0]["text"], "Once upon a time");
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "ss\":3.7}\n";  // the line completes
  r = s.get(url + "?after=2").body;
  ASSERT_EQ(r["metrics"].size(), 1u);
  EXPECT_EQ(r["metrics"][0]["train_loss"], 3.7);
  EXPECT_EQ(r["next"], 3);
  EXPECT_EQ(s.get(url + "?after=-1").status, 400);
  EXPECT_EQ(s.call("DELETE", url).status, 200);
  EXPECT_EQ(s.get(url).status, 404);
}

TEST(StudioApi, ConversationsAreKeptAndExported) {
  TestStudio s(testing::fresh_dir("conv"));
  auto c = s.post("/api/conversations",
                  {{"title", "hello"}, {"settings", {{"temperature", 0.5}, {"max_tokens", 64}}}});
  ASSERT_EQ(c.status, 201) << c.body;
  const std::string url = "/api/conversations/" + c.body["id"].dump();
  EXPECT_EQ(c.body["settings"]["temperature"], 0.5);
  auto renamed = s.call("PATCH", url, Json{{"title", "renamed"}});
  EXPECT_EQ(renamed.status, 200);
  EXPECT_EQ(renamed.body["title"], "renamed");
  // Chat needs a service.
  auto chat = s.post(url + "/chat", {{"content", "hi"}});
  EXPECT_EQ(chat.status, 409);
  EXPECT_TRUE(contains(error_of(chat), "expected the conversation to have a service"));
  EXPECT_EQ(s.post(url + "/chat", {{"content", ""}}).status, 400);
  EXPECT_EQ(s.post(url + "/stop").body["stopped"], false);
  const Json exported = s.get(url + "/export").body;
  EXPECT_EQ(exported["format"], "tessera-studio-conversation/1");
  EXPECT_EQ(exported["conversation"]["title"], "renamed");
  EXPECT_EQ(s.get("/api/conversations").body.size(), 1u);
  EXPECT_EQ(s.call("DELETE", url).status, 200);
  EXPECT_EQ(s.get("/api/conversations").body.size(), 0u);
}

TEST(StudioApi, ServesTheFrontEnd) {
  TestStudio s(testing::fresh_dir("static"));
  httplib::Client c("127.0.0.1", s.port);
  auto index = c.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_TRUE(contains(index->body, "Tessera Studio"));
  EXPECT_TRUE(contains(index->get_header_value("Content-Type"), "text/html"));
  EXPECT_EQ(c.Get("/services")->status, 200);           // a client route: index.html
  EXPECT_EQ(c.Get("/assets/missing.js")->status, 404);  // a missing file is not index.html
}

}  // namespace
}  // namespace tessera::studio
