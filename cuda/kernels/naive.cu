// Variant "naive": one thread per output pixel, image and mask both read from
// global memory. Every output reads K*K input pixels and K*K mask values
// through the caches; this is the baseline the other variants improve on.
//
// Launch: block (32, 8); grid (ceil(W / 32), ceil(H / 8), planes).
#include "conv_common.cuh"

template <int K>
__global__ void conv_naive(const float* __restrict__ input, const float* __restrict__ masks,
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
        const float* mask = masks + (long long)c * K * K;
        float acc = 0.0f;
        for (int i = 0; i < K; ++i) {
            const int iy = y + i - R;
            if (iy < 0 || iy >= height) continue;
            for (int j = 0; j < K; ++j) {
                const int ix = x + j - R;
                if (ix >= 0 && ix < width) acc += in[iy * width + ix] * mask[i * K + j];
            }
        }
        output[base + y * width + x] = acc;
    }
}

DSGD_INSTANTIATE_ALL_MASKS(conv_naive)
