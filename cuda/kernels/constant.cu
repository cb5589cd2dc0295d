// Variant "constant": as "naive", but the mask lives in __constant__ memory.
// All threads of a warp read the same mask element at the same time, which the
// constant cache serves as one broadcast; the image is still read from global
// memory, K*K loads per output (mostly L1/L2 hits).
//
// Launch: block (32, 8); grid (ceil(W / 32), ceil(H / 8), planes).
#include "conv_common.cuh"

template <int K>
__global__ void conv_constant(const float* __restrict__ input, const float* __restrict__ masks,
                              float* __restrict__ output, int batch, int channels,
                              int channel_begin, int channel_count, int height, int width)
{
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    constexpr int R = K / 2;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        if (x >= width || y >= height) continue;
        const float* in = input + base;
        const float* mask = c_masks + (c - channel_begin) * K * K;
        float acc = 0.0f;
        // Rows unrolled up to 9x9 only: fully unrolling the branchy 15x15 body
        // multiplies compile time by ten for a baseline kernel.
#pragma unroll(K <= 9 ? K : 1)
        for (int i = 0; i < K; ++i) {
            const int iy = y + i - R;
            if (iy < 0 || iy >= height) continue;
#pragma unroll
            for (int j = 0; j < K; ++j) {
                const int ix = x + j - R;
                if (ix >= 0 && ix < width) acc += in[iy * width + ix] * mask[i * K + j];
            }
        }
        output[base + y * width + x] = acc;
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_constant)
