// Just enough of CUDA C++ to run this folder's kernels on a CPU, for testing
// their indexing, halo and boundary logic where no GPU is present.
//
// Each block runs as blockDim.x * y * z cooperative fibers (ucontext) on one
// OS thread; __syncthreads() switches back to a scheduler that resumes every
// thread once all of them have reached the barrier. Blocks run one after the
// other, so a `static` array serves as the block's __shared__ memory.
//
// What this does NOT model: warps, memory ordering between blocks, caches,
// alignment faults, timing. It checks that the kernels compute the right
// numbers for a given launch configuration, not that they are fast.
#ifndef DSGD_CUDA_EMULATION_H
#define DSGD_CUDA_EMULATION_H

#include <cmath>
#include <cstddef>
#include <cstdint>

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

namespace emu {
inline uint3 thread_idx{0, 0, 0};
inline uint3 block_idx{0, 0, 0};
inline dim3 block_dim;
inline dim3 grid_dim;
void syncthreads();  // defined in emulator.cpp
}  // namespace emu

#define threadIdx (::emu::thread_idx)
#define blockIdx (::emu::block_idx)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__
#define __restrict__ __restrict

inline void __syncthreads() { emu::syncthreads(); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }

#endif  // DSGD_CUDA_EMULATION_H
