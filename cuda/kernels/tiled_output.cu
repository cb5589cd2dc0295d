// Variant "tiled_output": shared-memory tiling with blocks the size of the
// OUTPUT tile (32 x 16 threads, one output each). The (32+K-1) x (16+K-1)
// input tile with its halo is larger than the block, so the threads load it
// in a strided loop over the tile's cells; then every thread computes.
//
// Bank conflicts: consecutive loop indices are consecutive shared addresses,
// and in the compute loop a warp reads 32 consecutive floats of one row.
//
// Launch: block (32, 16); grid (ceil(W / 32), ceil(H / 16), planes).
#include "conv_common.cuh"

template <int K>
__global__ void conv_tiled_output(const float* __restrict__ input, const float* __restrict__ masks,
                                  float* __restrict__ output, int batch, int channels,
                                  int channel_begin, int channel_count, int height, int width)
{
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    constexpr int R = K / 2;
    constexpr int TILE_W = 32, TILE_H = 16;
    constexpr int IN_W = TILE_W + K - 1, IN_H = TILE_H + K - 1;
    constexpr int THREADS = TILE_W * TILE_H;
    __shared__ float tile[IN_H][IN_W];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TILE_W + tx;
    const int x0 = blockIdx.x * TILE_W - R;  // image column of tile column 0
    const int y0 = blockIdx.y * TILE_H - R;  // image row of tile row 0
    const int x = blockIdx.x * TILE_W + tx;  // output pixel of this thread
    const int y = blockIdx.y * TILE_H + ty;
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        const float* in = input + base;
        for (int i = tid; i < IN_H * IN_W; i += THREADS) {
            const int gy = y0 + i / IN_W;
            const int gx = x0 + i % IN_W;
            const bool inside = gx >= 0 && gx < width && gy >= 0 && gy < height;
            tile[i / IN_W][i % IN_W] = inside ? in[gy * width + gx] : 0.0f;
        }
        __syncthreads();
        if (x < width && y < height) {
            const float* mask = c_masks + (c - channel_begin) * K * K;
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < K; ++i) {
#pragma unroll
                for (int j = 0; j < K; ++j) acc += tile[ty + i][tx + j] * mask[i * K + j];
            }
            output[base + y * width + x] = acc;
        }
        __syncthreads();  // the next plane overwrites the tile
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_tiled_output)
