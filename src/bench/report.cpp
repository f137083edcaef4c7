#include "tessera/bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "tessera/bench/format.h"

namespace tessera::bench {
namespace {

// One row: the figures measured at the same params (framework aside), by column.
struct Row {
  nlohmann::json params;
  std::map<std::string, const Figure*> cells;
};

// A table: rows whose columns are the same figures, e.g. comm's time, algbw and busbw.
struct Table {
  std::vector<std::string> param_keys;
  std::vector<std::string> columns;  // "time" or "time (tessera)"
  std::vector<Row> rows;
};

std::string column_of(const Figure& f) {
  const auto fw = f.params.find("framework");
  return fw != f.params.end() && fw->is_string() ? f.name + " (" + fw->get<std::string>() + ")"
                                                 : f.name;
}

std::string param_cell(const nlohmann::json& v, const std::string& key) {
  if (v.is_null()) return "";
  if (v.is_number() && (key == "bytes" || key.ends_with("_bytes")))
    return format_bytes(v.get<double>());
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The median, with the samples' half-spread when there are several: "212.4 GFLOP/s ±3%".
std::string value_cell(const Figure* f) {
  if (!f || f->samples.empty()) return "";
  std::string s = format_value(f->median(), f->unit);
  if (f->samples.size() > 1 && f->median() != 0) {
    char buf[24];
    std::snprintf(buf, sizeof buf, " ±%.0f%%",
                  50.0 * (f->max() - f->min()) / std::abs(f->median()));
    s += buf;
  }
  return s;
}

// Tessera over PyTorch for each figure measured by both, > 1 when Tessera is better.
std::string ratio_cell(const Row& row, const std::string& name) {
  const auto t = row.cells.find(name + " (tessera)"), p = row.cells.find(name + " (pytorch)");
  if (t == row.cells.end() || p == row.cells.end()) return "";
  const double a = t->second->median(), b = p->second->median();
  if (a <= 0 || b <= 0) return "";
  char buf[24];
  std::snprintf(buf, sizeof buf, "%.2fx", t->second->better == Better::Higher ? a / b : b / a);
  return buf;
}

// Where the figure named like column (framework aside) first appears.
size_t first_seen(const Result& r, const std::string& column) {
  const std::string name = column.substr(0, column.find(" ("));
  for (size_t i = 0; i < r.figures.size(); ++i)
    if (r.figures[i].name == name) return i;
  return r.figures.size();
}

std::vector<Table> tables_of(const Result& r) {
  std::vector<Row> rows;
  std::map<std::string, size_t> row_index;
  for (const auto& f : r.figures) {
    nlohmann::json params = f.params;
    params.erase("framework");
    const std::string key = params.dump();  // json objects keep keys sorted: a stable key
    if (!row_index.count(key)) row_index[key] = rows.size(), rows.push_back({params, {}});
    rows[row_index[key]].cells[column_of(f)] = &f;
  }
  std::vector<Table> tables;
  std::map<std::string, size_t> table_index;
  for (const auto& row : rows) {
    std::vector<std::string> columns, keys;
    for (const auto& f : r.figures)  // columns in the order figures were added
      if (row.cells.count(column_of(f)) && row.cells.at(column_of(f)) == &f)
        columns.push_back(column_of(f));
    // A figure's frameworks side by side: columns grouped by name, in first-seen order.
    std::stable_sort(columns.begin(), columns.end(),
                     [&](const std::string& a, const std::string& b) {
                       return first_seen(r, a) < first_seen(r, b);
                     });
    for (const auto& [k, v] : row.params.items()) keys.push_back(k);
    std::string signature;
    for (const auto& s : keys) signature += s + ",";
    signature += "|";
    for (const auto& s : columns) signature += s + ",";
    if (!table_index.count(signature))
      table_index[signature] = tables.size(), tables.push_back({keys, columns, {}});
    tables[table_index[signature]].rows.push_back(row);
  }
  return tables;
}

}  // namespace

std::string markdown_report(const Result& r) {
  std::string out = "## " + r.suite + "\n\n";
  out += "- Machine: " + r.machine.summary() + "\n";
  out += "- Commit " + short_commit(r.commit) + ", " + r.date + "\n";
  out += "- Command: `" + r.command + "`\n";
  for (const auto& t : tables_of(r)) {
    // Figures of both frameworks get a ratio column after the pair.
    std::vector<std::string> ratio_after;
    std::string header = "\n|", rule = "|";
    for (const auto& k : t.param_keys) header += " " + k + " |", rule += "---|";
    for (const auto& c : t.columns) {
      header += " " + c + " |", rule += "---|";
      if (c.ends_with(" (pytorch)")) {
        const std::string name = c.substr(0, c.size() - 10);
        header += " " + name + ": Tessera / PyTorch |", rule += "---|";
      }
    }
    out += header + "\n" + rule + "\n";
    for (const auto& row : t.rows) {
      std::string line = "|";
      for (const auto& k : t.param_keys) line += " " + param_cell(row.params[k], k) + " |";
      for (const auto& c : t.columns) {
        const auto it = row.cells.find(c);
        line += " " + value_cell(it == row.cells.end() ? nullptr : it->second) + " |";
        if (c.ends_with(" (pytorch)"))
          line += " " + ratio_cell(row, c.substr(0, c.size() - 10)) + " |";
      }
      out += line + "\n";
    }
  }
  // Each figure's definition once.
  std::map<std::string, std::string> definitions;
  for (const auto& f : r.figures)
    if (!f.definition.empty()) definitions.emplace(column_of(f), f.definition);
  if (!definitions.empty()) out += "\n";
  for (const auto& [name, d] : definitions) out += "- " + name + ": " + d + "\n";
  return out + "\n";
}

}  // namespace tessera::bench
