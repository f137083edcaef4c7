// `tessera studio`: the web app that manages accelerators, models, services, chats, training runs
// and benchmarks (tessera/studio/studio.h), front end included in the binary.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "commands.h"
#include "tessera/io/atomic_file.h"
#include "tessera/studio/studio.h"

namespace tessera::cli {

namespace {

// The key from --api-key, else $TESSERA_STUDIO_KEY, else the one kept in data_dir/api_key
// (made on the first run, readable by its owner only).
std::string studio_key(const std::string& option, const std::string& data_dir, bool* made) {
  *made = false;
  if (!option.empty()) return option;
  if (const char* env = std::getenv("TESSERA_STUDIO_KEY"); env && *env) return env;
  const std::filesystem::path file = std::filesystem::path(data_dir) / "api_key";
  std::string key;
  if (std::ifstream in(file); in && std::getline(in, key) && !key.empty()) return key;
  std::random_device rd;
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) key += hex[rd() % 16];
  std::filesystem::create_directories(data_dir);
  io::write_file_atomic(file.string(), key + "\n", "studio", 0600);  // never readable by others
  *made = true;
  return key;
}

}  // namespace

Command add_studio_command(CLI::App& app) {
  auto o = std::make_shared<studio::StudioConfig>();
  o->data_dir = "studio-data";
  auto key = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "studio", "Web app: manage, serve, chat with and watch models, training runs and benchmarks");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->footer("\nExample:\n  tessera studio --port 8080   # then open http://127.0.0.1:8080");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--data-dir", o->data_dir,
                  "Folder for the database (studio.db), services' logs and the API key")
      ->capture_default_str();
  cmd->add_option("--api-key", *key,
                  "Key required to change anything (default: $TESSERA_STUDIO_KEY, else one made "
                  "on the first run and kept in <data-dir>/api_key)");
  return {cmd, [o, key]() {
            sigset_t stop_signals;
            sigemptyset(&stop_signals);
            sigaddset(&stop_signals, SIGINT);
            sigaddset(&stop_signals, SIGTERM);
            pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
            bool made = false;
            o->api_key = studio_key(*key, o->data_dir, &made);
            o->tessera_bin = std::filesystem::read_symlink("/proc/self/exe").string();
            studio::Studio studio(*o);
            const int port = studio.bind();
            std::fprintf(stderr, "studio: http://%s:%d (data in %s)\n", o->host.c_str(), port,
                         o->data_dir.c_str());
            if (made)
              std::fprintf(stderr, "studio: API key %s (kept in %s/api_key)\n", o->api_key.c_str(),
                           o->data_dir.c_str());
            std::thread watcher([&] {
              int sig = 0;
              sigwait(&stop_signals, &sig);
              // Services keep running: the next start adopts them. Also woken below once run()
              // has returned by itself, when stopping again is harmless.
              studio.stop();
            });
            studio.run();
            pthread_kill(watcher.native_handle(), SIGTERM);
            watcher.join();
            std::fprintf(stderr, "studio: stopped (services left running)\n");
            return 0;
          }};
}

}  // namespace tessera::cli
