// Variant "tiled_input": shared-memory tiling with blocks the size of the
// INPUT tile. Each of the 32 x 32 threads loads one input pixel (or a zero
// outside the image) into shared memory; after a barrier the inner
// (32 - (K-1))^2 threads each compute one output from shared memory while the
// K-1 rim of threads, which only loaded halo cells, stays idle. Simple loads,
// wasted compute threads: for K = 15 only 18^2 / 32^2 = 32% of threads compute.
//
// Bank conflicts: a warp is one tile row (32 consecutive floats), so every
// shared access of a warp touches 32 distinct banks.
//
// Launch: block (32, 32); grid (ceil(W / T), ceil(H / T), planes), T = 33 - K.
#include "conv_common.cuh"

template <int K>
__global__ void conv_tiled_input(const float* __restrict__ input, const float* __restrict__ masks,
                                 float* __restrict__ output, int batch, int channels,
                                 int channel_begin, int channel_count, int height, int width)
{
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    constexpr int R = K / 2;
    constexpr int IN_TILE = 32;
    constexpr int OUT_TILE = IN_TILE - (K - 1);
    __shared__ float tile[IN_TILE][IN_TILE];

    const int tx = threadIdx.x, ty = threadIdx.y;
    // The input pixel this thread loads; for the inner threads it is also the
    // output pixel they compute.
    const int x = blockIdx.x * OUT_TILE + tx - R;
    const int y = blockIdx.y * OUT_TILE + ty - R;
    const bool in_image = x >= 0 && x < width && y >= 0 && y < height;
    const bool computes = tx >= R && tx < R + OUT_TILE && ty >= R && ty < R + OUT_TILE && in_image;
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        tile[ty][tx] = in_image ? input[base + y * width + x] : 0.0f;
        __syncthreads();
        if (computes) {
            const float* mask = c_masks + (c - channel_begin) * K * K;
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < K; ++i) {
#pragma unroll
                for (int j = 0; j < K; ++j)
                    acc += tile[ty - R + i][tx - R + j] * mask[i * K + j];
            }
            output[base + y * width + x] = acc;
        }
        __syncthreads();  // the next plane overwrites the tile
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_tiled_input)
