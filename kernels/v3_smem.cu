// v3_smem: dweight summed per block in shared memory. Over v2: a fixed grid of blocks walks all
// rows (a grid-stride loop), and each block adds its rows' dweight contributions into a C-float
// array in shared memory with shared-memory atomics: on chip, and a warp's 32 lanes hit 32
// different banks (on sm_90 a float atomicAdd on shared memory compiles to a compare-and-swap loop,
// ATOMS.CAST.SPIN). Only at the end does the block add its C sums to global memory: one global
// atomic per block and channel instead of one per row and channel.
#include "common.cuh"

extern "C" __global__ void rmsnorm_backward_v3(float* dinp, float* dweight, const float* dout,
                                               const float* inp, const float* weight,
                                               const float* rstd, int N, int C) {
    extern __shared__ float dweight_shared[];  // C floats, sized at launch
    zero_block_shared(dweight_shared, C);
    __syncthreads();  // no warp may add before every entry is zero

    int lane = threadIdx.x % WARP_SIZE;
    const long long stride = warps_in_grid();
    for (long long row = first_row_of_warp(); row < N; row += stride) {
        const float* dout_row = dout + row * C;
        const float* inp_row = inp + row * C;
        float* dinp_row = dinp + row * C;
        const float r = rstd[row];

        float partial = 0.0f;
        for (int c = lane; c < C; c += WARP_SIZE) partial += weight[c] * dout_row[c] * inp_row[c];
        const float dnorm_norm_mean = warp_reduce_sum(partial) * r / C;

        for (int c = lane; c < C; c += WARP_SIZE) {
            float norm = inp_row[c] * r;
            float dnorm = weight[c] * dout_row[c];
            atomicAdd(&dweight_shared[c], norm * dout_row[c]);  // lanes hit 32 different banks
            dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dweight[c], dweight_shared[c]);
}
