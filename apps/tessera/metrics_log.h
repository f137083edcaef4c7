#pragma once
// metrics.jsonl: one JSON object per line, e.g.
//   {"step":12,"train_loss":2.71,"lr":0.0006,"grad_norm":0.9,"ms":41.2,"tok_per_s":49700}
//   {"step":50,"val_loss":2.48}
// appended and flushed as training goes, so a crash loses at most the line being written.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::cli {

class MetricsLog {
 public:
  // A fresh run (resume_step empty) starts an empty file. A resumed run keeps the records with
  // step <= *resume_step and drops later ones (the steps after its checkpoint are run again);
  // the file is rewritten atomically. RuntimeError when it cannot be written.
  MetricsLog(std::string path, std::optional<int64_t> resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends one record as a line and flushes it; RuntimeError when it cannot (a full disk).
  void write(const nlohmann::json& record);
  // Every record in the file, oldest first (those kept on resume, then those written).
  const std::vector<nlohmann::json>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<nlohmann::json> records_;
};

}  // namespace tessera::cli
