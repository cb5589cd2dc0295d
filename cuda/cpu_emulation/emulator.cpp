// CPU emulator for the kernels in ../kernels, built as a shared library and
// driven from Python (tiledconv_cpu.py) with the same launch plan the GPU
// loader uses. See cuda_emulation.h for what it models.
#include "cuda_emulation.h"

#include <ucontext.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../kernels/naive.cu"
#include "../kernels/constant.cu"
#include "../kernels/tiled_input.cu"
#include "../kernels/tiled_output.cu"
#include "../kernels/l2_halo.cu"
#include "../kernels/register_blocked.cu"
#include "../kernels/pipelined.cu"

namespace emu {

struct Fiber {
    ucontext_t context;
    uint3 index;
    bool done;
};

constexpr std::size_t kStackBytes = 64 * 1024;
static ucontext_t g_scheduler;
static std::vector<Fiber> g_fibers;
static std::vector<char> g_stacks;
static Fiber* g_current = nullptr;
static std::function<void()> g_body;
static std::string g_error;

void syncthreads() { swapcontext(&g_current->context, &g_scheduler); }

static void fiber_main()
{
    g_body();
    g_current->done = true;  // returning resumes g_scheduler through uc_link
}

// Runs one block to completion; false (and g_error set) on a barrier that
// not every thread reaches.
static bool run_block()
{
    const unsigned n = block_dim.x * block_dim.y * block_dim.z;
    g_fibers.resize(n);
    if (g_stacks.size() < n * kStackBytes) g_stacks.resize(n * kStackBytes);
    for (unsigned t = 0; t < n; ++t) {
        Fiber& f = g_fibers[t];
        f.index = uint3{t % block_dim.x, (t / block_dim.x) % block_dim.y,
                        t / (block_dim.x * block_dim.y)};
        f.done = false;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = g_stacks.data() + t * kStackBytes;
        f.context.uc_stack.ss_size = kStackBytes;
        f.context.uc_link = &g_scheduler;
        makecontext(&f.context, fiber_main, 0);
    }
    for (;;) {  // one pass = every live thread runs up to its next barrier or its end
        unsigned finished = 0;
        for (Fiber& f : g_fibers) {
            if (!f.done) {
                thread_idx = f.index;
                g_current = &f;
                swapcontext(&g_scheduler, &f.context);
            }
            finished += f.done;
        }
        if (finished == n) return true;
        if (finished > 0) {
            g_error = "__syncthreads() not reached by every thread of block (" +
                      std::to_string(block_idx.x) + "," + std::to_string(block_idx.y) + "," +
                      std::to_string(block_idx.z) + ")";
            return false;
        }
    }
}

}  // namespace emu

using Kernel = void (*)(const float*, const float*, float*, int, int, int, int, int, int);

struct Entry {
    const char* name;
    int mask_size;
    Kernel kernel;
};

#define DSGD_ENTRY(kernel, k) {#kernel, k, &kernel<k>},
#define DSGD_ENTRIES(kernel)                                                             \
    DSGD_ENTRY(kernel, 1) DSGD_ENTRY(kernel, 3) DSGD_ENTRY(kernel, 5) DSGD_ENTRY(kernel, 7) \
    DSGD_ENTRY(kernel, 9) DSGD_ENTRY(kernel, 11) DSGD_ENTRY(kernel, 13) DSGD_ENTRY(kernel, 15)

static const Entry kKernels[] = {
    DSGD_ENTRIES(conv_naive) DSGD_ENTRIES(conv_constant) DSGD_ENTRIES(conv_tiled_input)
    DSGD_ENTRIES(conv_tiled_output) DSGD_ENTRIES(conv_l2_halo) DSGD_ENTRIES(conv_register_blocked)
    DSGD_ENTRIES(conv_pipelined)
};

extern "C" {

const char* emu_last_error() { return emu::g_error.c_str(); }

// Copies count floats into the emulated c_masks; -1 if they do not fit.
int emu_set_constant_masks(const float* src, int count)
{
    if (count < 0 || count > DSGD_CONSTANT_MASK_FLOATS) {
        emu::g_error = "constant mask copy of " + std::to_string(count) + " floats does not fit";
        return -1;
    }
    std::memcpy(c_masks, src, sizeof(float) * count);
    return 0;
}

// Launches kernel `name`<mask_size> on grid x block; 0 on success, -1 with
// emu_last_error() set otherwise.
int emu_launch(const char* name, int mask_size, const unsigned* grid, const unsigned* block,
               const float* input, const float* masks, float* output, int batch, int channels,
               int channel_begin, int channel_count, int height, int width)
{
    Kernel kernel = nullptr;
    for (const Entry& e : kKernels)
        if (std::strcmp(e.name, name) == 0 && e.mask_size == mask_size) kernel = e.kernel;
    if (!kernel) {
        emu::g_error = std::string("no kernel ") + name + "<" + std::to_string(mask_size) + ">";
        return -1;
    }
    emu::grid_dim = dim3{grid[0], grid[1], grid[2]};
    emu::block_dim = dim3{block[0], block[1], block[2]};
    emu::g_body = [=] {
        kernel(input, masks, output, batch, channels, channel_begin, channel_count, height, width);
    };
    for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
            for (unsigned x = 0; x < grid[0]; ++x) {
                emu::block_idx = uint3{x, y, z};
                if (!emu::run_block()) return -1;
            }
    return 0;
}

}  // extern "C"
