#include "common.cuh"

// v4, written by you: bf16 in memory, fp32 in registers, 8 values per 128-bit load or store (x128),
// and the block's dweight staged channel-planar in shared memory.
// Fill in the TODOs: staged() and the second loop; the first loop shows the loads.

// The shared-memory slot of channel c = 8q + k (q: its 128-bit chunk, k: its place in the chunk).
__device__ __forceinline__ int staged(int c, int C) {
    return (c % 8) * (C / 8) + c / 8;
}

extern "C" __global__ void rmsnorm_backward_v4(__nv_bfloat16* dinp, float* dweight_accum,
                                               const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                               const __nv_bfloat16* weight, const float* rstd, int N, int C) {
    extern __shared__ float dweight_shared[];
    for (int c = threadIdx.x; c < C; c += blockDim.x) dweight_shared[c] = 0.0f;
    __syncthreads();

    int lane = threadIdx.x % WARP_SIZE;
    int warps_per_block = blockDim.x / WARP_SIZE;
    long long warps_in_grid = (long long)gridDim.x * warps_per_block;
    for (long long row = (long long)blockIdx.x * warps_per_block + threadIdx.x / WARP_SIZE; row < N;
         row += warps_in_grid) {
        const __nv_bfloat16* dout_row = dout + row * C;
        const __nv_bfloat16* inp_row = inp + row * C;
        __nv_bfloat16* dinp_row = dinp + row * C;
        const float r = rstd[row];

        float partial = 0.0f;
        for (int c = lane * x128::size; c < C; c += WARP_SIZE * x128::size) {
            x128 g = load128(dout_row + c), x = load128(inp_row + c), w = load128(weight + c);
            #pragma unroll
            for (int k = 0; k < x128::size; k++) partial += (float)w[k] * (float)g[k] * (float)x[k];
        }
        const float dnorm_norm_mean = warp_reduce_sum(partial) * r / C;

        for (int c = lane * x128::size; c < C; c += WARP_SIZE * x128::size) {
            x128 g = load128cs(dout_row + c), x = load128cs(inp_row + c);
            x128 w = load128(weight + c), d = load128(dinp_row + c);
            #pragma unroll
            for (int k = 0; k < x128::size; k++) {
                const float norm = (float)x[k] * r;
                const float dnorm = (float)w[k] * (float)g[k];
                atomicAdd(&dweight_shared[staged(c + k, C)], norm * (float)g[k]);
                d[k] = __float2bfloat16((float)d[k] + dnorm * r - norm * dnorm_norm_mean * r);
            }
            store128cg(dinp_row + c, d);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dweight_accum[c], dweight_shared[staged(c, C)]);
}

// dweight (bf16) += the fp32 sums of all blocks, rounded once.
extern "C" __global__ void add_dweight_v4(__nv_bfloat16* dweight, const float* dweight_accum, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) dweight[c] = __float2bfloat16((float)dweight[c] + dweight_accum[c]);
}
