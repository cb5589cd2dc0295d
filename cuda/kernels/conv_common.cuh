// Shared definitions for the 2-D convolution kernels in this folder.
//
// Every kernel computes a "same" zero-padded 2-D cross-correlation (what
// torch.nn.functional.conv2d computes) of fp32 planes with an odd K x K mask:
//
//   out[y][x] = sum_{i,j < K} in[y + i - K/2][x + j - K/2] * mask[i][j]
//
// with in[...] = 0 outside the image. The input is a stack of planes laid out
// as (batch, channels, height, width), row-major and contiguous; plane
// (n, c) is convolved with mask c (depthwise). A single-channel image is the
// case batch = channels = 1.
//
// All kernels share one signature so that one loader (tiledconv.py) and one
// CPU emulator can launch any of them:
//
//   input, masks, output        device pointers; masks holds channels * K * K
//                               floats and is read only by the kernels that
//                               keep the mask in global memory
//   batch, channels             the 4-D shape's first two extents
//   channel_begin, channel_count
//                               the channels this launch covers; kernels with
//                               the mask in constant memory find mask
//                               (c - channel_begin) in c_masks, because
//                               64 KiB of constant memory cannot hold every
//                               channel's mask when there are many channels
//   height, width               plane size in pixels; height * width < 2^31
//
// Grid z walks the batch * channel_count planes of the launch with a
// grid-stride loop, so any number of planes fits in gridDim.z <= 65535.
//
// This file must stay compilable by nvcc, by NVRTC (no standard headers) and
// by a host C++ compiler through cpu_emulation/cuda_emulation.h.
#ifndef DSGD_CONV_COMMON_CUH
#define DSGD_CONV_COMMON_CUH

// Largest supported mask side (odd sides 1, 3, ..., 15).
#define DSGD_MAX_MASK 15
// 16384 floats = 64 KiB, all the constant memory a module may declare.
#define DSGD_CONSTANT_MASK_FLOATS 16384

// Masks of the channels of the current launch, channel after channel, each
// K * K floats row-major. Filled by the loader before each launch.
__constant__ float c_masks[DSGD_CONSTANT_MASK_FLOATS];

// Element offset of plane z of this launch within the 4-D tensor, and its
// channel. 64-bit: a batch of large images passes 2^31 elements.
__device__ __forceinline__ long long plane_offset(int z, int channels, int channel_begin,
                                                  int channel_count, int height, int width,
                                                  int* channel)
{
    const int n = z / channel_count;
    const int c = channel_begin + z % channel_count;
    *channel = c;
    return ((long long)n * channels + c) * height * width;
}

// True when p is 16-byte aligned, so that float4 accesses through it are legal.
__device__ __forceinline__ bool is_aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// Explicit instantiations for every supported mask size, so that
// `nvcc -cubin` emits all of them. NVRTC (__CUDACC_RTC__) instantiates only
// the sizes the loader asks for through name expressions.
#define DSGD_CONV_SIGNATURE \
    (const float*, const float*, float*, int, int, int, int, int, int)
#ifndef __CUDACC_RTC__
#define DSGD_INSTANTIATE_ALL_MASKS(kernel)                         \
    template __global__ void kernel<1> DSGD_CONV_SIGNATURE;        \
    template __global__ void kernel<3> DSGD_CONV_SIGNATURE;        \
    template __global__ void kernel<5> DSGD_CONV_SIGNATURE;        \
    template __global__ void kernel<7> DSGD_CONV_SIGNATURE;        \
    template __global__ void kernel<9> DSGD_CONV_SIGNATURE;        \
    template __global__ void kernel<11> DSGD_CONV_SIGNATURE;       \
    template __global__ void kernel<13> DSGD_CONV_SIGNATURE;       \
    template __global__ void kernel<15> DSGD_CONV_SIGNATURE;
#else
#define DSGD_INSTANTIATE_ALL_MASKS(kernel)
#endif

#endif  // DSGD_CONV_COMMON_CUH
