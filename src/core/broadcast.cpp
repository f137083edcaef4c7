#include "tessera/core/broadcast.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera {

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TESSERA_CHECK(da == db || da == 1 || db == 1, ValueError, "[", op,
                  "] expected shapes that broadcast, got ", a, " and ", b);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tessera
