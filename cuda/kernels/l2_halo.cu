// Variant "l2_halo": the tiled kernel that keeps only the block's own pixels
// in shared memory (block = output tile = input tile, 32 x 16) and reads the
// halo cells straight from global memory, counting on the neighbouring
// blocks having just brought them into the L2 (and L1) cache. Loading is one
// pixel per thread with no halo logic; the price is a branch per mask tap.
//
// Launch: block (32, 16); grid (ceil(W / 32), ceil(H / 16), planes).
#include "conv_common.cuh"

template <int K>
__global__ void conv_l2_halo(const float* __restrict__ input, const float* __restrict__ masks,
                             float* __restrict__ output, int batch, int channels,
                             int channel_begin, int channel_count, int height, int width)
{
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    constexpr int R = K / 2;
    constexpr int TILE_W = 32, TILE_H = 16;
    __shared__ float tile[TILE_H][TILE_W];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x = blockIdx.x * TILE_W + tx;
    const int y = blockIdx.y * TILE_H + ty;
    const bool in_image = x < width && y < height;
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        const float* in = input + base;
        // Tile cells past the image's right or bottom edge hold zeros, which
        // is exactly the padding the outputs next to that edge need.
        tile[ty][tx] = in_image ? in[y * width + x] : 0.0f;
        __syncthreads();
        if (in_image) {
            const float* mask = c_masks + (c - channel_begin) * K * K;
            float acc = 0.0f;
            // Rows unrolled up to 9x9 only: fully unrolling the branchy 15x15 body
            // multiplies compile time by ten for a baseline kernel.
#pragma unroll(K <= 9 ? K : 1)
            for (int i = 0; i < K; ++i) {
                const int sy = ty + i - R;  // row in the tile
                const int iy = y + i - R;   // row in the image
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    const int sx = tx + j - R;
                    const int ix = x + j - R;
                    if (sy >= 0 && sy < TILE_H && sx >= 0 && sx < TILE_W)
                        acc += tile[sy][sx] * mask[i * K + j];
                    else if (iy >= 0 && iy < height && ix >= 0 && ix < width)
                        acc += in[iy * width + ix] * mask[i * K + j];
                }
            }
            output[base + y * width + x] = acc;
        }
        __syncthreads();  // the next plane overwrites the tile
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_l2_halo)
