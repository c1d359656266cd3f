// Lab variants of v4_vec_bf16 (kernels/v4_vec_bf16.cu): only where a block stages its dweight sums in
// shared memory changes. lab/v4_layout.py builds this file once per variant with -DV4_STAGING=<n>.
//   0 interleaved: column c at c (v4 as shipped). A lane's 8 columns are c = 8 * lane + k, so for one k
//     the 32 lanes hit banks (8 * lane + k) % 32: 4 banks, 8 lanes each, an 8-way conflict per atomic.
//   1 planar: column c = 8 * q + k (q: the 128-bit chunk) at k * (C / 8) + q. For one k, lanes hit
//     consecutive chunks q, so 32 banks: no conflict. Same atomics (CAS loops on sm_90), same count.
//   2 warp-private planar: each warp adds into its own C floats with a plain load and store (no atomic:
//     a column belongs to one lane of the warp), then the block adds its warps' rows in warp order.
//     Shared memory is warps * C * 4 bytes.
#include "common.cuh"

#ifndef V4_STAGING
#error "V4_STAGING must be defined (0 interleaved, 1 planar, 2 warp-private planar)"
#endif

__device__ __forceinline__ int staged(int c, int C) {
#if V4_STAGING == 0
    return c;
#else
    return (c % x128::size) * (C / x128::size) + c / x128::size;
#endif
}

extern "C" __global__ void rmsnorm_backward_v4lab(__nv_bfloat16* dinp, float* dweight_accum,
                                                  const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                                  const __nv_bfloat16* weight, const float* rstd, int N, int C) {
    extern __shared__ float dweight_shared[];
    const int warps_per_block = blockDim.x / WARP_SIZE;
#if V4_STAGING == 2
    const int staged_floats = warps_per_block * C;
    float* mine = dweight_shared + (threadIdx.x / WARP_SIZE) * C;
#else
    const int staged_floats = C;
#endif
    for (int i = threadIdx.x; i < staged_floats; i += blockDim.x) dweight_shared[i] = 0.0f;
    __syncthreads();

    int lane = threadIdx.x % WARP_SIZE;
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
                float norm = (float)x[k] * r;
                float dnorm = (float)w[k] * (float)g[k];
#if V4_STAGING == 2
                mine[staged(c + k, C)] += norm * (float)g[k];
#else
                atomicAdd(&dweight_shared[staged(c + k, C)], norm * (float)g[k]);
#endif
                d[k] = __float2bfloat16((float)d[k] + r * (dnorm - norm * dnorm_norm_mean));
            }
            store128cg(dinp_row + c, d);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int at = staged(c, C);
        float s = dweight_shared[at];
#if V4_STAGING == 2
        for (int w = 1; w < warps_per_block; w++) s += dweight_shared[w * C + at];
#endif
        atomicAdd(&dweight_accum[c], s);
    }
}

extern "C" __global__ void add_dweight_v4lab(__nv_bfloat16* dweight, const float* dweight_accum, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) dweight[c] = __float2bfloat16((float)dweight[c] + dweight_accum[c]);
}
