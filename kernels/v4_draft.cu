// v4_draft: v4 as lesson 05 asks for it, the course's own answer to that exercise (it is not a rung
// of the ladder: lesson 05 shows it after the learner's check). v3's plan and shared-memory
// dweight, with bf16 tensors, fp32 arithmetic and each output rounded to bf16 once, moved 16 bytes
// a lane with the plain 128-bit load128 / store128 of common.cuh. Channel c of the block's dweight
// is kept at slot c, as v3 kept it. The shipped rung, kernels/v4_vec_bf16.cu, is what lesson 06
// makes of this draft.
#include "common.cuh"

extern "C" __global__ void rmsnorm_backward_v4(__nv_bfloat16* dinp, float* dweight_accum,
                                               const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                               const __nv_bfloat16* weight, const float* rstd,
                                               int N, int C) {
    extern __shared__ float dweight_shared[];  // C floats: the block's dweight
    zero_block_shared(dweight_shared, C);
    __syncthreads();  // no warp may add before every entry is zero
    const int lane = threadIdx.x % WARP_SIZE;
    for (long long row = first_row_of_warp(); row < N; row += warps_in_grid()) {
        const __nv_bfloat16* dout_row = dout + row * C;
        const __nv_bfloat16* inp_row = inp + row * C;
        __nv_bfloat16* dinp_row = dinp + row * C;
        const float r = rstd[row];
        // lane l takes channels 8l .. 8l + 7 of every 256: one 128-bit load of each tensor a step
        float partial = 0.0f;
        for (int c = lane * x128::size; c < C; c += WARP_SIZE * x128::size) {
            const x128 g = load128(dout_row + c), x = load128(inp_row + c);
            const x128 w = load128(weight + c);
            #pragma unroll
            for (int k = 0; k < x128::size; k++) {
                partial += (float)w[k] * (float)g[k] * (float)x[k];
            }
        }
        const float mean = warp_reduce_sum(partial) * r / C;  // of dnorm * norm over the row
        for (int c = lane * x128::size; c < C; c += WARP_SIZE * x128::size) {
            const x128 g = load128(dout_row + c), x = load128(inp_row + c);
            const x128 w = load128(weight + c);
            x128 d = load128(dinp_row + c);  // dinp += ...: the old values first
            #pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float norm = (float)x[k] * r;
                const float dnorm = (float)w[k] * (float)g[k];
                atomicAdd(&dweight_shared[c + k], norm * (float)g[k]);
                d[k] = __float2bfloat16((float)d[k] + r * (dnorm - norm * mean));
            }
            store128(dinp_row + c, d);
        }
    }
    __syncthreads();  // every warp has added its rows
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(&dweight_accum[c], dweight_shared[c]);
    }
}

// One thread per channel: dweight[c] += dweight_accum[c], rounded once to bf16.
extern "C" __global__ void add_dweight_v4(__nv_bfloat16* dweight, const float* dweight_accum,
                                          int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) dweight[c] = __float2bfloat16((float)dweight[c] + dweight_accum[c]);
}
