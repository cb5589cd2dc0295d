// Variant "register_blocked": the tiled kernel with several outputs per thread
// and vectorised memory accesses, the step the memory roofline calls for.
//
// A block of 32 x 8 threads computes a 128 x 32 output tile; each thread
// computes a 4-wide x 4-tall patch. Per input row the thread reads its window
// of 4 + K - 1 pixels once from shared memory into registers (as float4s)
// and applies it to every output row that uses that input row, so shared
// memory traffic per output drops from K*K floats to about
// (4+K-1)/4 * (4*NQ)/4 floats, and the inner loop is nearly all FFMAs with the
// mask operands coming from constant memory.
//
// Global memory: the input tile (with its halo) is fetched with 16-byte
// loads, 32 consecutive float4 per warp, starting at a column that is a
// multiple of 4 (the left halo is padded to LP = roundup(R, 4) columns), and
// outputs are written with 16-byte streaming stores (__stcs, evict-first, so
// the write stream does not push the input's halo rows out of L2). When the
// width is not a multiple of 4 or a pointer is not 16-byte aligned the same
// kernel takes a scalar path (a block-uniform branch).
//
// Bank conflicts: shared rows are float4 arrays; a warp's LDS.128 reads 32
// consecutive float4 (served as four conflict-free 128-byte phases) and its
// STS.128 writes 32 consecutive float4.
//
// Launch: block (32, 8); grid (ceil(W / 128), ceil(H / 32), planes).
#include "conv_common.cuh"

template <int K>
__global__ void __launch_bounds__(256, (K <= 7 ? 4 : (K <= 11 ? 2 : 1)))
conv_register_blocked(const float* __restrict__ input, const float* __restrict__ masks,
                      float* __restrict__ output, int batch, int channels,
                      int channel_begin, int channel_count, int height, int width)
{
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    constexpr int R = K / 2;
    constexpr int BX = 32, BY = 8, THREADS = BX * BY;
    constexpr int PX = 4, PY = 4;                // outputs per thread: PX wide, PY tall
    constexpr int TILE_W = BX * PX, TILE_H = BY * PY;
    constexpr int LP = (R + 3) / 4 * 4;          // left halo columns, padded to a float4
    constexpr int SHIFT = LP - R;                // first needed column within a float4
    constexpr int IN_H = TILE_H + K - 1;         // tile rows incl. halo
    constexpr int QW = (LP + TILE_W + R + 3) / 4;    // tile row length in float4
    constexpr int NQ = (SHIFT + PX + K - 2) / 4 + 1; // float4 per thread window
    constexpr int LOADS = (IN_H * QW + THREADS - 1) / THREADS;
    static_assert(BX - 1 + NQ <= QW, "the last thread's window must lie inside the tile row");
    __shared__ float4 tile[IN_H][QW];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * BX + tx;
    const int x_tile = blockIdx.x * TILE_W;
    const int y_tile = blockIdx.y * TILE_H;
    const bool vector_io = width % 4 == 0 && is_aligned16(input) && is_aligned16(output);
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        const float* in = input + base;
        float* out = output + base;

        // Shared cell tile[s][q] holds image row y_tile - R + s,
        // columns x_tile - LP + 4q .. +3, zeros outside the image.
#pragma unroll
        for (int k = 0; k < LOADS; ++k) {
            const int i = tid + k * THREADS;
            if (i < IN_H * QW) {
                const int s = i / QW, q = i % QW;
                const int gy = y_tile - R + s;
                const int gx = x_tile - LP + 4 * q;
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (gy >= 0 && gy < height) {
                    const float* row = in + gy * width;
                    if (vector_io) {
                        // gx is a multiple of 4 and so is width: the float4 is
                        // either wholly inside the row or wholly outside.
                        if (gx >= 0 && gx < width) v = *reinterpret_cast<const float4*>(row + gx);
                    } else {
                        if (gx >= 0 && gx < width) v.x = row[gx];
                        if (gx + 1 >= 0 && gx + 1 < width) v.y = row[gx + 1];
                        if (gx + 2 >= 0 && gx + 2 < width) v.z = row[gx + 2];
                        if (gx + 3 >= 0 && gx + 3 < width) v.w = row[gx + 3];
                    }
                }
                tile[s][q] = v;
            }
        }
        __syncthreads();

        const float* mask = c_masks + (c - channel_begin) * K * K;
        float acc[PY][PX];
#pragma unroll
        for (int oy = 0; oy < PY; ++oy)
#pragma unroll
            for (int ox = 0; ox < PX; ++ox) acc[oy][ox] = 0.0f;

        // Input row ty*PY + r of the tile feeds output rows oy = r - i for
        // mask rows i; window[m] is tile column 4*tx + m.
#pragma unroll
        for (int r = 0; r < PY + K - 1; ++r) {
            float window[4 * NQ];
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                const float4 v = tile[ty * PY + r][tx + q];
                window[4 * q + 0] = v.x;
                window[4 * q + 1] = v.y;
                window[4 * q + 2] = v.z;
                window[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int oy = 0; oy < PY; ++oy) {
                const int i = r - oy;
                if (i < 0 || i >= K) continue;
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    const float m = mask[i * K + j];
#pragma unroll
                    for (int ox = 0; ox < PX; ++ox)
                        acc[oy][ox] = fmaf(window[SHIFT + ox + j], m, acc[oy][ox]);
                }
            }
        }

        const int x = x_tile + tx * PX;
#pragma unroll
        for (int oy = 0; oy < PY; ++oy) {
            const int y = y_tile + ty * PY + oy;
            if (y >= height) break;
            float* row = out + y * width;
            if (vector_io) {
                if (x < width)
                    __stcs(reinterpret_cast<float4*>(row + x),
                           make_float4(acc[oy][0], acc[oy][1], acc[oy][2], acc[oy][3]));
            } else {
#pragma unroll
                for (int ox = 0; ox < PX; ++ox)
                    if (x + ox < width) row[x + ox] = acc[oy][ox];
            }
        }
        __syncthreads();  // the next plane overwrites the tile
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_register_blocked)
