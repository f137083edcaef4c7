#pragma once
// TESSERA_HD marks functions shared by host code and CUDA kernels (the scalar functors, the
// 16-bit float types); it is empty outside nvcc.
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif
