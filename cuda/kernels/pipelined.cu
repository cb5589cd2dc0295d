// Variant "pipelined": register_blocked's 4 x 4 patches, with the loads of
// the next tile in flight while the block computes the current one.
//
// Why: register_blocked loads a tile, waits for it, computes, stores; a
// block's loads never overlap its own arithmetic, so the memory system sees
// gaps unless enough other blocks fill them. Here each block walks down a
// strip of the image, 128 columns wide and STRIP_TILES tiles of 32 rows
// tall, and keeps the strip's rows in a ring of RING = 2 * 32 + K - 1
// shared rows: while it computes tile t from the 32 + K - 1 rows it needs,
// asynchronous copies (cp.async, async_copy.cuh) bring the 32 new rows of
// tile t + 1 into the other slots. Each input row is read from global memory
// once per strip; the vertical halo rows are not fetched twice as they are
// by register_blocked (K - 1 extra rows per 32), only once per strip.
//
// Ring slot of strip row s (image row y_strip - R + s) is s % RING. While
// tile t (rows s = 32t .. 32t + 31 + 2R) is read, tile t + 1's copies write
// rows 32t + 32 + 2R .. 32t + 63 + 2R: RING = 64 + 2R slots keep the two sets
// apart, and the barrier after computing tile t keeps tile t + 2's copies
// from overwriting rows still being read.
//
// Width not a multiple of 4, or misaligned pointers: the cells are loaded
// synchronously through load_cell (the same scalar path as register_blocked).
//
// Launch: block (32, 8); grid (ceil(W / 128), ceil(ceil(H / 32) / STRIP_TILES), planes).
#include "async_copy.cuh"
#include "register_patch.cuh"

// Tiles of 32 rows per block, down a strip: the loader's launch plan
// (tiledconv.py, Variant.strip_tiles) must use the same number.
#define DSGD_PIPELINED_STRIP_TILES 8

// Shared rows in the ring: two tiles' new rows and one halo (see above).
template <int K>
__host__ __device__ constexpr int ring_rows() { return 2 * PatchTile<K>::TILE_H + K - 1; }

template <int K>
__device__ __forceinline__ void stage_rows(float4 (*ring)[PatchTile<K>::QW], const float* in,
                                           int first_row, int rows, int y_strip, int x_tile,
                                           int height, int width, bool vector_io)
{
    using G = PatchTile<K>;
    constexpr int RING = ring_rows<K>();
    const int tid = threadIdx.y * G::BX + threadIdx.x;
    for (int i = tid; i < rows * G::QW; i += G::THREADS) {
        const int s = first_row + i / G::QW, q = i % G::QW;
        const int gy = y_strip - G::R + s, gx = x_tile - G::LP + 4 * q;
        float4* cell = &ring[s % RING][q];
        if (vector_io) {
            const bool inside = gy >= 0 && gy < height && gx >= 0 && gx < width;
            copy16_async(cell, reinterpret_cast<const float4*>(
                                   inside ? in + (long long)gy * width + gx : in), inside);
        } else {
            *cell = load_cell(in, gy, gx, height, width, false);
        }
    }
}

template <int K>
__global__ void __launch_bounds__(256, (K <= 7 ? 4 : (K <= 11 ? 2 : 1)))
conv_pipelined(const float* __restrict__ input, const float* __restrict__ masks,
               float* __restrict__ output, int batch, int channels,
               int channel_begin, int channel_count, int height, int width)
{
    using G = PatchTile<K>;
    constexpr int RING = ring_rows<K>();
    constexpr int STRIP_TILES = DSGD_PIPELINED_STRIP_TILES;
    __shared__ float4 ring[RING][G::QW];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x_tile = blockIdx.x * G::TILE_W;
    const int tiles_y = (height + G::TILE_H - 1) / G::TILE_H;
    const int t_begin = blockIdx.y * STRIP_TILES;
    const int t_count = tiles_y - t_begin < STRIP_TILES ? tiles_y - t_begin : STRIP_TILES;
    const int y_strip = t_begin * G::TILE_H;
    const bool vector_io = vector_io_ok(input, output, width);
    const int planes = batch * channel_count;
    for (int z = blockIdx.z; z < planes; z += gridDim.z) {
        int c;
        const long long base = plane_offset(z, channels, channel_begin, channel_count,
                                            height, width, &c);
        const float* in = input + base;
        const float* mask = c_masks + (c - channel_begin) * K * K;

        stage_rows<K>(ring, in, 0, G::IN_H, y_strip, x_tile, height, width, vector_io);
        commit_copies();
        for (int t = 0; t < t_count; ++t) {
            if (t + 1 < t_count)
                stage_rows<K>(ring, in, (t + 1) * G::TILE_H + K - 1, G::TILE_H, y_strip, x_tile,
                              height, width, vector_io);
            commit_copies();  // possibly empty: keeps "all but the newest group" = tile t
            wait_copies<1>();
            __syncthreads();

            const int first = t * G::TILE_H + ty * G::PY;
            float acc[G::PY][G::PX];
            accumulate_patch<K>([&](int r) { return ring[(first + r) % RING]; }, tx, mask, acc);
            store_patch<K>(output + base, height, width, x_tile + tx * G::PX,
                           y_strip + t * G::TILE_H + ty * G::PY, acc, vector_io);
            __syncthreads();  // tile t + 2's copies overwrite the slots just read
        }
        wait_copies<0>();
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_pipelined)
