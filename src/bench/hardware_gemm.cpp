// GEMM peak through oneDNN's matmul primitive, as the library's own GEMMs run it.
#include <chrono>
#include <dnnl.hpp>

#include "tessera/bench/hardware.h"
#include "tessera/core/error.h"

namespace tessera::bench {
namespace {

using dt = dnnl::memory::data_type;

struct GemmTypes {
  dt a, b, c;
};

GemmTypes types_of(const std::string& dtype) {
  if (dtype == "fp32") return {dt::f32, dt::f32, dt::f32};
  if (dtype == "bf16") return {dt::bf16, dt::bf16, dt::f32};
  if (dtype == "fp16") return {dt::f16, dt::f16, dt::f32};
  if (dtype == "int8") return {dt::u8, dt::s8, dt::s32};
  throw ValueError(
      detail::str("[bench.gemm] expected a dtype fp32, bf16, fp16 or int8, got ", dtype));
}

}  // namespace

double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * m * n * k; }

std::vector<double> time_gemm(const std::string& dtype, int64_t size, int repetitions) {
  const GemmTypes t = types_of(dtype);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::dims dims{size, size};
  using tag = dnnl::memory::format_tag;
  // The weights in the layout oneDNN prefers (blocked where it has such kernels, as a packed
  // model keeps them): the figure is the kernel's peak, not the cost of re-packing per call.
  // Where that choice is only a reference kernel, plain row-major weights may still have a JIT
  // one, which is what the library's GEMMs run. (On AVX2 neither has one for bf16: the library
  // converts bf16 GEMMs to float32 there, and the suite reports no bf16 peak.)
  dnnl::matmul::primitive_desc pd;
  bool found = false;
  for (tag weights : {tag::any, tag::ab}) {
    try {
      pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc({dims, t.a, tag::ab}, {dims, t.b, weights}, {dims, t.c, tag::ab}),
          engine);
    } catch (const dnnl::error&) {
      continue;  // no implementation of this dtype for these layouts
    }
    found = std::string(pd.impl_info_str()).find("ref") == std::string::npos;
    if (found) break;
  }
  if (!found) return {};  // only a reference kernel: not a peak worth reporting
  dnnl::memory a(pd.src_desc(), engine), b(pd.weights_desc(), engine), c(pd.dst_desc(), engine);
  // Small values: int8 and fp16 stay in range, and denormals cost nothing extra.
  for (auto* m : {&a, &b}) {
    auto* p = static_cast<unsigned char*>(m->get_data_handle());
    for (size_t i = 0; i < m->get_desc().get_size(); ++i)
      p[i] = static_cast<unsigned char>(i % 7 == 0);
  }
  dnnl::matmul mm(pd);
  auto call = [&] {
    mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  };
  call();  // JIT and first touch
  call();
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

}  // namespace tessera::bench
