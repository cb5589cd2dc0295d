// Variant "register_blocked": the tiled kernel with several outputs per thread
// and vectorised memory accesses, the step the memory roofline calls for.
//
// A block of 32 x 8 threads computes a 128 x 32 output tile; each thread
// computes a 4-wide x 4-tall patch (register_patch.cuh). Per input row the
// thread reads its window of 4 + K - 1 pixels once from shared memory into
// registers (as float4s) and applies it to every output row that uses that
// input row, so shared memory traffic per output drops from K*K floats to
// about (4+K-1)/4 * (4*NQ)/4 floats, and the inner loop is nearly all FFMAs
// with the mask operands coming from constant memory.
//
// Global memory: the input tile (with its halo) is fetched with 16-byte
// loads, 32 consecutive float4 per warp, starting at a column that is a
// multiple of 4 (the left halo is padded to LP = roundup(R, 4) columns), and
// outputs are written with 16-byte streaming stores. When the width is not a
// multiple of 4 or a pointer is not 16-byte aligned the same kernel takes a
// scalar path (a block-uniform branch).
//
// Bank conflicts: shared rows are float4 arrays; a warp's LDS.128 reads 32
// consecutive float4 (served as four conflict-free 128-byte phases) and its
// STS.128 writes 32 consecutive float4.
//
// Each block loads its tile, waits, computes, stores: the loads of one block
// do not overlap its own arithmetic, only other blocks' ("pipelined" does).
//
// Launch: block (32, 8); grid (ceil(W / 128), ceil(H / 32), planes).
#include "register_patch.cuh"

template <int K>
__global__ void __launch_bounds__(256, (K <= 7 ? 4 : (K <= 11 ? 2 : 1)))
conv_register_blocked(const float* __restrict__ input, const float* __restrict__ masks,
                      float* __restrict__ output, int batch, int channels,
                      int channel_begin, int channel_count, int height, int width)
{
    using G = PatchTile<K>;
    constexpr int LOADS = (G::IN_H * G::QW + G::THREADS - 1) / G::THREADS;
    __shared__ float4 tile[G::IN_H][G::QW];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * G::BX + tx;
    const int x_tile = blockIdx.x * G::TILE_W;
    const int y_tile = blockIdx.y * G::TILE_H;
    const bool vector_io = vector_io_ok(input, output, width);
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        const float* in = input + base;

        // Shared cell tile[s][q] holds image row y_tile - R + s,
        // columns x_tile - LP + 4q .. +3, zeros outside the image.
#pragma unroll
        for (int k = 0; k < LOADS; ++k) {
            const int i = tid + k * G::THREADS;
            if (i < G::IN_H * G::QW) {
                const int s = i / G::QW, q = i % G::QW;
                tile[s][q] = load_cell(in, y_tile - G::R + s, x_tile - G::LP + 4 * q,
                                       height, width, vector_io);
            }
        }
        __syncthreads();

        float acc[G::PY][G::PX];
        accumulate_patch<K>([&](int r) { return tile[ty * G::PY + r]; }, tx,
                            c_masks + (c - channel_begin) * K * K, acc);
        store_patch<K>(output + base, height, width, x_tile + tx * G::PX, y_tile + ty * G::PY,
                       acc, vector_io);
        __syncthreads();  // the next plane overwrites the tile
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_register_blocked)
