#pragma once
// A studio on a free port over a fresh data folder, and a JSON client for its API.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tessera/studio/studio.h"
#include "testing/shared_data.h"

namespace tessera::studio::testing {

using Json = nlohmann::json;
constexpr const char* kKey = "test-key";

inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera_studio_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct Reply {
  int status = -1;
  Json body;
};

class TestStudio {
 public:
  explicit TestStudio(const std::string& data_dir) {
    StudioConfig c;
    c.port = 0;
    c.data_dir = data_dir;
    c.api_key = kKey;
    c.tessera_bin = ::tessera::testing::tessera_cli();
    studio = std::make_unique<Studio>(c);
    port = studio->bind();
    thread = std::thread([this] { studio->run(); });
  }
  ~TestStudio() {
    studio->stop();
    thread.join();
  }

  Reply call(const std::string& method, const std::string& path, const Json& body = nullptr,
             const std::string& key = kKey) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(180, 0);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    const std::string text = body.is_null()     ? ""
                             : body.is_string() ? body.get<std::string>()
                                                : body.dump();
    httplib::Result r = method == "GET"      ? c.Get(path.c_str(), h)
                        : method == "DELETE" ? c.Delete(path.c_str(), h)
                        : method == "PATCH"  ? c.Patch(path.c_str(), h, text, "application/json")
                                             : c.Post(path.c_str(), h, text, "application/json");
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.body = Json::parse(r->body, nullptr, false);
    return out;
  }
  Reply get(const std::string& path) const { return call("GET", path); }
  Reply post(const std::string& path, const Json& body = Json::object()) const {
    return call("POST", path, body);
  }

  std::unique_ptr<Studio> studio;
  int port = 0;
  std::thread thread;
};

// The error message of a reply (empty when it is not an error body).
inline std::string error_of(const Reply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"].value("message", "") : "";
}

}  // namespace tessera::studio::testing
