#include "tessera/runtime/threads.h"

#include <omp.h>

#include "tessera/core/error.h"

namespace tessera {

void set_num_threads(int n) {
  TESSERA_CHECK(n >= 1, ValueError, "[set_num_threads] expected n >= 1, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace tessera
