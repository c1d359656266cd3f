// v5_two_pass: the same result on every run.
// v3/v4 add floats with atomics, in whatever order the hardware serves them; float addition is not
// associative, so dweight's last bits change from run to run. v5 fixes the order of every sum:
// 1. inside a block, for each 256-channel step, warps 1.. stage their contributions in shared
//    memory and warp 0 adds them in warp order into the block's dweight (no shared atomics);
// 2. each block writes its C sums to its own row of a scratch buffer (no global atomics);
// 3. a second kernel sums the scratch rows, block 0 first, and adds the result into dweight.
// Steps 1 and 2 are the row pass in bf16_row_pass.cuh, which v6 shares.
#include "bf16_row_pass.cuh"

extern "C" __global__ void __launch_bounds__(512, 2)
rmsnorm_backward_v5(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                    int N, int C) {
    extern __shared__ float shared[];
    const int step = WARP_SIZE * x128::size;  // channels a warp covers per iteration: 256
    const int rounded_C = ceil_div(C, step) * step;
    float* dweight_shared = shared;  // rounded_C floats
    // staging for warps 1..warps-1, four floats per lane; shifted so thread 32 lands at its start
    float* staging = shared + rounded_C - WARP_SIZE * f128::size;

    block_dweight_rows<false>(dweight_shared, staging, dinp, dout, inp, weight, rstd, N, C);
    store_block_partials(partials + (size_t)blockIdx.x * C, dweight_shared, C);
}

// One thread per channel sums the blocks' partials in block order, then adds once into bf16
// dweight.
extern "C" __global__ void reduce_dweight_v5(__nv_bfloat16* dweight, const float* partials,
                                             int blocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    #pragma unroll 8
    for (int b = 0; b < blocks; b++) sum += partials[(size_t)b * C + c];
    dweight[c] = __float2bfloat16((float)dweight[c] + sum);
}
