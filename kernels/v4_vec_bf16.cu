// v4_vec_bf16: bf16 storage, fp32 arithmetic, 128-bit loads and stores, cache hints. Over v3:
// tensors are bf16 (half the bytes of fp32), and each lane moves 8 of them with one 128-bit
// instruction (Packed128), so a warp covers 256 channels per step with 4x fewer instructions. dout
// and inp are read for the last time in the second loop, so they are loaded as streaming (__ldcs);
// dinp is stored with __stcg (st.global.cg; lesson 06 times each hint). All arithmetic is fp32.
// bf16 has no cheap float atomics, so the per-block sums go to an fp32 accumulator with global
// atomics, and a tiny second kernel adds the accumulator into the bf16 dweight. The block stages
// its dweight sums in shared memory channel-planar (staged() below): a lane adds 8 channels per
// step, and v3's layout (channel c at c) would put the 32 lanes on 4 banks.
#include "common.cuh"

#ifndef V4_INTERLEAVED
#define V4_INTERLEAVED 0
#endif

// The shared-memory slot of channel c = 8q + k (q: its 128-bit chunk, k: its place in the chunk).
// Planar (the default): slot k * (C / 8) + q. For one k the 32 lanes of a warp hold 32 consecutive
// chunks q, so they hit 32 consecutive words: 32 banks, no conflict. -DV4_INTERLEAVED=1 (how v4
// first shipped; lesson 06 times both): slot c. For one k, lane l hits bank (8l + k) % 32: 4 banks
// with 8 lanes each, an 8-way conflict on every shared access of the loop.
__host__ __device__ __forceinline__ int staged(int c, int C) {
#if V4_INTERLEAVED
    return c;
#else
    return (c % x128::size) * (C / x128::size) + c / x128::size;
#endif
}

extern "C" __global__ void rmsnorm_backward_v4(__nv_bfloat16* dinp, float* dweight_accum,
                                               const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                               const __nv_bfloat16* weight, const float* rstd,
                                               int N, int C) {
    extern __shared__ float dweight_shared[];
    zero_block_shared(dweight_shared, C);
    __syncthreads();  // no warp may add before every entry is zero

    int lane = threadIdx.x % WARP_SIZE;
    const long long stride = warps_in_grid();
    for (long long row = first_row_of_warp(); row < N; row += stride) {
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
                float norm = (float)x[k] * r;
                float dnorm = (float)w[k] * (float)g[k];
                atomicAdd(&dweight_shared[staged(c + k, C)], norm * (float)g[k]);
                d[k] = __float2bfloat16((float)d[k] + r * (dnorm - norm * dnorm_norm_mean));
            }
            store128cg(dinp_row + c, d);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(&dweight_accum[c], dweight_shared[staged(c, C)]);
    }
}

// dweight (bf16) += the fp32 sums of all blocks, rounded once.
extern "C" __global__ void add_dweight_v4(__nv_bfloat16* dweight, const float* dweight_accum,
                                          int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) dweight[c] = __float2bfloat16((float)dweight[c] + dweight_accum[c]);
}
