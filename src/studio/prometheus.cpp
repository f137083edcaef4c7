// Prometheus text exposition -> the JSON the services page charts.
#include <sstream>

#include "api.h"

namespace tessera::studio {

Json parse_prometheus(const std::string& text) {
  Json out = Json::object();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string name = line.substr(0, space), labels;
    double value = 0.0;
    try {
      value = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      continue;  // "+Inf"/"NaN" samples are not charted
    }
    if (const size_t brace = name.find('{'); brace != std::string::npos) {
      labels = name.substr(brace);
      name.resize(brace);
    }
    if (name.ends_with("_bucket")) {
      const size_t le = labels.find("le=\"");
      if (le == std::string::npos) continue;
      const std::string bound = labels.substr(le + 4, labels.find('"', le + 4) - le - 4);
      out[name.substr(0, name.size() - 7)][bound] = value;
    } else {
      out[name] =
          out.contains(name) && out[name].is_number() ? out[name].get<double>() + value : value;
    }
  }
  return out;
}

}  // namespace tessera::studio
