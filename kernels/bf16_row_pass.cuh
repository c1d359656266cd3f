// bf16_row_pass.cuh: the row pass of v5_two_pass and v6_last_block. Each warp takes one bf16 row at
// a time, adds its dinp, and the block sums its rows' dweight contributions in shared memory in a
// fixed order: for each 256-channel step, warps 1.. stage theirs and warp 0 adds them in warp order
// (no shared atomics). v6 differs from v5 only in where dweight_shared and staging sit and in the
// rounding order of dnorm_norm_mean (the seed's), hence the template parameter.
#pragma once
#include "common.cuh"

// Zeroes dweight_shared (rounded_C floats), runs the block's rows, and returns once every thread of
// the block has added its contributions. staging holds four floats per lane of warps 1.., at
// staging + threadIdx.x * 4 (so it starts 32 * 4 floats before the space it needs).
// The row loop runs the same number of times in every warp of a block (idle warps contribute
// zeros), because __syncthreads inside it must be reached by all threads of the block.
template <bool seed_rounding>
__device__ __forceinline__ void block_dweight_rows(float* dweight_shared, float* staging,
                                                   __nv_bfloat16* dinp, const __nv_bfloat16* dout,
                                                   const __nv_bfloat16* inp,
                                                   const __nv_bfloat16* weight, const float* rstd,
                                                   int N, int C) {
    const int warps = blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int step = WARP_SIZE * x128::size;  // channels a warp covers per iteration: 256
    const int rounded_C = ceil_div(C, step) * step;

    for (int c = threadIdx.x * f128::size; c < rounded_C; c += blockDim.x * f128::size) {
        store128(dweight_shared + c, f128::zeros());
    }
    __syncthreads();

    for (long long first = (long long)blockIdx.x * warps; first < N;
         first += (long long)gridDim.x * warps) {
        const long long row = first + warp;
        const bool active = row < N;  // warp-uniform
        const __nv_bfloat16* dout_row = dout + row * C;
        const __nv_bfloat16* inp_row = inp + row * C;
        __nv_bfloat16* dinp_row = dinp + row * C;
        float r = 0.0f, dnorm_norm_mean = 0.0f;
        if (active) {
            r = rstd[row];
            float partial = 0.0f;
            for (int c = lane * x128::size; c < C; c += step) {
                x128 g = load128(dout_row + c), x = load128(inp_row + c), w = load128(weight + c);
                #pragma unroll
                for (int k = 0; k < x128::size; k++) {
                    partial += (float)w[k] * (float)g[k] * (float)x[k];
                }
            }
            const float sum = warp_reduce_sum(partial);
            dnorm_norm_mean = seed_rounding ? sum / C * r : sum * r / C;
        }

        for (int base = 0; base < C; base += step) {
            const int c = base + lane * x128::size;
            x128 g = x128::zeros(), x = x128::zeros(), w = x128::zeros(), d = x128::zeros();
            if (active && c < C) {
                g = load128cs(dout_row + c);
                x = load128cs(inp_row + c);
                w = load128(weight + c);
                d = load128(dinp_row + c);
            }
            #pragma unroll
            for (int half = 0; half < x128::size / f128::size; half++) {
                f128 contrib;
                #pragma unroll
                for (int i = 0; i < f128::size; i++) {
                    const int k = half * f128::size + i;
                    float norm = (float)x[k] * r;
                    contrib[i] = norm * (float)g[k];
                    const float dnorm = (float)w[k] * (float)g[k];
                    d[k] = __float2bfloat16((float)d[k] + r * (dnorm - norm * dnorm_norm_mean));
                }
                if (warp != 0) store128(staging + threadIdx.x * f128::size, contrib);
                __syncthreads();
                if (warp == 0) {
                    for (int j = 1; j < warps; j++) {  // always in the same order
                        f128 other = load128(staging + (j * WARP_SIZE + lane) * f128::size);
                        #pragma unroll
                        for (int i = 0; i < f128::size; i++) contrib[i] += other[i];
                    }
                    float* mine = dweight_shared + c + half * f128::size;
                    f128 sum = load128(mine);
                    #pragma unroll
                    for (int i = 0; i < f128::size; i++) sum[i] += contrib[i];
                    store128(mine, sum);
                }
                __syncthreads();
            }
            if (active && c < C) store128cg(dinp_row + c, d);
        }
    }
    __syncthreads();
}

// The block's C sums, from dweight_shared to its own row of partials.
__device__ __forceinline__ void store_block_partials(float* my_partials,
                                                     const float* dweight_shared, int C) {
    for (int c = threadIdx.x * f128::size; c < C; c += blockDim.x * f128::size) {
        store128(my_partials + c, load128(dweight_shared + c));
    }
}
