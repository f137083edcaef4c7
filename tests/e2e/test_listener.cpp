// serve::Listener: a stop() at any point of startup ends run() (httplib's own stop() is lost
// before its accept loop runs), a server not stopped answers, and a taken port is a clear error.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/serve/listener.h"

namespace tessera::serve {
namespace {

TEST(Listener, StopAtAnyPointOfStartupEndsRun) {
  for (int i = 0; i < 16; ++i) {
    httplib::Server http;
    Listener listener(http, "[test]");
    if (i == 0) listener.stop();  // before the socket exists
    if (i != 1) listener.bind("127.0.0.1", 0);
    if (i == 2) listener.stop();  // bound, not yet serving
    std::thread runner([&] { listener.run("127.0.0.1", 0); });
    std::this_thread::sleep_for(std::chrono::microseconds(i * i * 100));
    listener.stop();
    runner.join();  // hangs without the fix: the test times out
    EXPECT_FALSE(http.is_running());
  }
}

TEST(Listener, ServesUntilStoppedOnTheBoundPort) {
  httplib::Server http;
  http.Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  Listener listener(http, "[test]");
  const int port = listener.bind("127.0.0.1", 0);
  ASSERT_GT(port, 0);
  EXPECT_EQ(listener.bind("127.0.0.1", 0), port);  // bound once
  std::thread runner([&] { listener.run("127.0.0.1", 0); });
  httplib::Client client("127.0.0.1", port);
  std::string body;
  for (int tries = 0; tries < 100 && body.empty(); ++tries) {
    if (httplib::Result r = client.Get("/ping"))
      body = r->body;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(body, "pong");
  listener.stop();
  runner.join();
}

TEST(Listener, ATakenPortIsAClearError) {
  httplib::Server first_http, second_http;
  Listener first(first_http, "[first]"), second(second_http, "[second]");
  const int port = first.bind("127.0.0.1", 0);
  try {
    second.bind("127.0.0.1", port);
    FAIL() << "bound a port already taken";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("[second] expected to listen on 127.0.0.1:" +
                                         std::to_string(port)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::serve
