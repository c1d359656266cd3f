// v7_fast (the course's kernels/v7_fast.cu, included as it ships) with entry points for programmatic
// dependent launch (PDL, sm_90 and newer; lab/pdl_probe.py launches them through cuLaunchKernelEx).
//
// A kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start before the
// kernel ahead of it in the stream has finished: as soon as every block of that kernel has executed
// griddepcontrol.launch_dependents (or exited). It must then execute griddepcontrol.wait before it
// touches anything the kernel ahead writes: the wait returns once that grid has completed and its
// memory operations are visible (PTX ISA, "griddepcontrol"). Here every entry point asks for its
// dependent at once and waits at once, so no instruction of the course's kernels moves: what can
// change is only when a grid's blocks are dispatched, not what they compute or in which order.
#include "v7_fast.cu"

namespace v7_pdl {
// let the next kernel in the stream be launched now (a no-op if it was launched without PDL)
__device__ __forceinline__ void release_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// wait until the kernel ahead in the stream has completed and its writes are visible (returns at
// once when this kernel was launched without PDL)
__device__ __forceinline__ void wait_for_prerequisite() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
}  // namespace v7_pdl

extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7_pdl(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                        const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                        int N, int C, int G, int K, int prefetch, int overwrite) {
    v7_pdl::release_dependents();
    v7_pdl::wait_for_prerequisite();
    const bool ow = overwrite != 0;
    if (prefetch) {
        if (K == 2) {
            return v7::backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow);
        }
        __trap();
    }
    switch (K) {
        case 1: v7::backward<1, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 2: v7::backward<2, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 3: v7::backward<3, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 4: v7::backward<4, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        default: __trap();
    }
}

extern "C" __global__ void __launch_bounds__(v7::staged::BLOCK, 1)
rmsnorm_backward_v7_staged_pdl(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                               const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                               const float* rstd, int N, int C, int G, int stages, int overwrite) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    v7_pdl::release_dependents();
    v7_pdl::wait_for_prerequisite();
    using v7::staged::backward;
    if (!overwrite) backward<true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
    else backward<false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
#else
    __trap();
#endif
}

extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK)
reduce_dweight_v7_pdl(__nv_bfloat16* dweight, const float* partials, int parts, int C, int slices) {
    __shared__ float4 red[v7::MAX_BLOCK];
    v7_pdl::release_dependents();
    v7_pdl::wait_for_prerequisite();  // the partials are the main kernel's
    v7::reduce_slice(dweight, partials, parts, C, blockIdx.x, slices, red);
}
