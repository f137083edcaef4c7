#include "metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"

namespace tessera::cli {

MetricsLog::MetricsLog(std::string path, std::optional<int64_t> resume_step)
    : path_(std::move(path)) {
  std::string kept;
  if (resume_step) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      // A line cut short by a crash, or written by someone else, is dropped rather than fatal.
      nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer())
        continue;
      if (record["step"].get<int64_t>() > *resume_step) continue;
      kept += line + "\n";
      records_.push_back(std::move(record));
    }
  }
  io::write_file_atomic(path_, kept, "train");
  file_ = std::fopen(path_.c_str(), "a");
  TESSERA_CHECK(file_ != nullptr, RuntimeError, "[train] expected a writable metrics file, got '",
                path_, "'");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  // A full disk stops the run here, clearly, rather than training on with its log going nowhere.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw RuntimeError(tessera::detail::str("[train] expected to append to '", path_, "', got ",
                                            std::strerror(errno)));
  records_.push_back(record);
}

}  // namespace tessera::cli
