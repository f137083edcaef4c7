#pragma once
// OrderedDict: a string-keyed map that iterates in insertion order (like Python's dict). Module
// registries, state dicts and optimizer options use it so names keep PyTorch's ordering.
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::nn {

template <class V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  using iterator = typename std::vector<Item>::iterator;
  using const_iterator = typename std::vector<Item>::const_iterator;

  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (const Item& item : items) insert(item.first, item.second);
  }

  // Adds key at the end; throws ValueError if it is already present.
  V& insert(std::string key, V value) {
    TESSERA_CHECK(!contains(key), ValueError, "[OrderedDict] expected a new key, got '", key,
                  "' twice");
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().second;
  }
  // Sets key's value, appending it when absent (keeps its position when present).
  V& insert_or_assign(const std::string& key, V value) {
    if (V* v = find(key)) return *v = std::move(value);
    return insert(key, std::move(value));
  }
  // Removes key if present; returns whether it was. O(n): the index is rebuilt.
  bool erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }

  V* find(const std::string& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  // The value of key; throws IndexError naming the key when absent.
  V& at(const std::string& key) { return *checked(key); }
  const V& at(const std::string& key) const {
    return *const_cast<OrderedDict*>(this)->checked(key);
  }
  V& operator[](const std::string& key) { return at(key); }
  const V& operator[](const std::string& key) const { return at(key); }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const Item& item(size_t i) const { return items_.at(i); }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const Item& item : items_) out.push_back(item.first);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(items_.size());
    for (const Item& item : items_) out.push_back(item.second);
    return out;
  }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  V* checked(const std::string& key) {
    V* v = find(key);
    TESSERA_CHECK(v != nullptr, IndexError, "[OrderedDict] expected a key in the dict, got '", key,
                  "'");
    return v;
  }

  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

// Name -> tensor, in registration order: what Module::state_dict() returns.
using TensorDict = OrderedDict<Tensor>;

}  // namespace tessera::nn
