// Asynchronous 16-byte copies from global to shared memory (cp.async, sm_80
// and newer), with zero fill, and the waits that complete them. On older
// GPUs and in the CPU emulator (no __CUDA_ARCH__) they are plain synchronous
// copies, which keeps every kernel's results the same, only not overlapped.
//
// Use: each thread issues its copies, then commit_copies() closes a group;
// wait_copies<N>() waits until at most N of the thread's newest groups are
// still in flight. A __syncthreads() after the wait makes every thread's
// copies visible to the whole block.
#ifndef DSGD_ASYNC_COPY_CUH
#define DSGD_ASYNC_COPY_CUH

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DSGD_HAVE_CP_ASYNC 1
#else
#define DSGD_HAVE_CP_ASYNC 0
#endif

// dst = inside ? *src : zeros, 16 bytes, both 16-byte aligned. With inside
// false nothing is read from src (cp.async's source size 0 fills zeros).
__device__ __forceinline__ void copy16_async(float4* dst, const float4* src, bool inside)
{
#if DSGD_HAVE_CP_ASYNC
    const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(shared), "l"(src), "r"(inside ? 16 : 0) : "memory");
#else
    *dst = inside ? *src : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
}

__device__ __forceinline__ void commit_copies()
{
#if DSGD_HAVE_CP_ASYNC
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void wait_copies()
{
#if DSGD_HAVE_CP_ASYNC
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

#endif  // DSGD_ASYNC_COPY_CUH
