// The 4 x 4 output patch per thread shared by "register_blocked" and
// "pipelined": the tile geometry, the load of one float4 cell of the input,
// the multiply-adds of a patch from rows of a shared-memory tile, and the
// store of a patch.
//
// A block of 32 x 8 threads computes a 128 x 32 output tile; thread (tx, ty)
// computes the 4-wide x 4-tall patch at tile column 4 * tx, tile row 4 * ty.
// Shared rows are arrays of QW float4: row cell q holds image columns
// x_tile - LP + 4q .. +3, the left halo padded to LP = roundup(R, 4) columns
// so that every float4 starts on a 16-byte boundary of the image row.
#ifndef DSGD_REGISTER_PATCH_CUH
#define DSGD_REGISTER_PATCH_CUH

#include "conv_common.cuh"

template <int K>
struct PatchTile {
    static_assert(K % 2 == 1 && K <= DSGD_MAX_MASK, "mask side must be odd and <= 15");
    static constexpr int R = K / 2;
    static constexpr int BX = 32, BY = 8, THREADS = BX * BY;
    static constexpr int PX = 4, PY = 4;                 // outputs per thread: PX wide, PY tall
    static constexpr int TILE_W = BX * PX, TILE_H = BY * PY;
    static constexpr int LP = (R + 3) / 4 * 4;           // left halo columns, padded to a float4
    static constexpr int SHIFT = LP - R;                 // first needed column within a float4
    static constexpr int IN_H = TILE_H + K - 1;          // tile rows incl. halo
    static constexpr int QW = (LP + TILE_W + R + 3) / 4; // tile row length in float4
    static constexpr int NQ = (SHIFT + PX + K - 2) / 4 + 1;  // float4 per thread window
    static_assert(BX - 1 + NQ <= QW, "the last thread's window must lie inside the tile row");
};

// True when the plane can be read and written as float4: the row length is a
// multiple of 4 and both pointers are 16-byte aligned. Otherwise the kernels
// take their scalar path (a block-uniform branch).
__device__ __forceinline__ bool vector_io_ok(const float* input, const float* output, int width)
{
    return width % 4 == 0 && is_aligned16(input) && is_aligned16(output);
}

// The four pixels (gy, gx .. gx + 3) of the plane, zeros outside the image.
// With vector_io, gx is a multiple of 4 and so is the width: the float4 is
// wholly inside the row or wholly outside, and is read with one 16-byte load.
__device__ __forceinline__ float4 load_cell(const float* in, int gy, int gx, int height,
                                            int width, bool vector_io)
{
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (gy < 0 || gy >= height) return v;
    const float* row = in + (long long)gy * width;
    if (vector_io) {
        if (gx >= 0 && gx < width) v = *reinterpret_cast<const float4*>(row + gx);
    } else {
        if (gx >= 0 && gx < width) v.x = row[gx];
        if (gx + 1 >= 0 && gx + 1 < width) v.y = row[gx + 1];
        if (gx + 2 >= 0 && gx + 2 < width) v.z = row[gx + 2];
        if (gx + 3 >= 0 && gx + 3 < width) v.w = row[gx + 3];
    }
    return v;
}

// acc[oy][ox] = sum_{i,j} in(4ty + oy + i - R, 4tx + ox + j - R) * mask[i][j].
// row(r), r = 0 .. PY + K - 2, is the shared row (QW float4) holding the
// r-th input row of this thread's window. Per input row the thread reads its
// window of 4 + K - 1 pixels once (NQ float4) and applies it to every output
// row that uses that input row, so the inner loop is nearly all FFMAs, their
// mask operands coming from constant memory.
template <int K, class Row>
__device__ __forceinline__ void accumulate_patch(Row row, int tx, const float* mask,
                                                 float (&acc)[PatchTile<K>::PY][PatchTile<K>::PX])
{
    using G = PatchTile<K>;
#pragma unroll
    for (int oy = 0; oy < G::PY; ++oy)
#pragma unroll
        for (int ox = 0; ox < G::PX; ++ox) acc[oy][ox] = 0.0f;
#pragma unroll
    for (int r = 0; r < G::PY + K - 1; ++r) {
        const float4* cells = row(r);
        float window[4 * G::NQ];
#pragma unroll
        for (int q = 0; q < G::NQ; ++q) {
            const float4 v = cells[tx + q];
            window[4 * q + 0] = v.x;
            window[4 * q + 1] = v.y;
            window[4 * q + 2] = v.z;
            window[4 * q + 3] = v.w;
        }
#pragma unroll
        for (int oy = 0; oy < G::PY; ++oy) {
            const int i = r - oy;
            if (i < 0 || i >= K) continue;
#pragma unroll
            for (int j = 0; j < K; ++j) {
                const float m = mask[i * K + j];
#pragma unroll
                for (int ox = 0; ox < G::PX; ++ox)
                    acc[oy][ox] = fmaf(window[G::SHIFT + ox + j], m, acc[oy][ox]);
            }
        }
    }
}

// Writes the patch whose top-left output is (y, x), skipping outputs past the
// right or bottom edge. float4 stores are streaming (__stcs, evict-first), so
// the write stream does not push the input's halo rows out of L2.
template <int K>
__device__ __forceinline__ void store_patch(float* out, int height, int width, int x, int y,
                                            const float (&acc)[PatchTile<K>::PY][PatchTile<K>::PX],
                                            bool vector_io)
{
#pragma unroll
    for (int oy = 0; oy < PatchTile<K>::PY; ++oy) {
        if (y + oy >= height) break;
        float* row = out + (long long)(y + oy) * width;
        if (vector_io) {
            if (x < width)
                __stcs(reinterpret_cast<float4*>(row + x),
                       make_float4(acc[oy][0], acc[oy][1], acc[oy][2], acc[oy][3]));
        } else {
#pragma unroll
            for (int ox = 0; ox < PatchTile<K>::PX; ++ox)
                if (x + ox < width) row[x + ox] = acc[oy][ox];
        }
    }
}

#endif  // DSGD_REGISTER_PATCH_CUH
