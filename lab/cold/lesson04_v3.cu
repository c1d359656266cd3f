#include "common.cuh"

// v3, written by you: each block sums its rows' dweight in shared memory, then adds it to global memory once.
// Fill in the TODOs: zeroing, the shared-memory atomic, the block's global adds, and the barriers between.
extern "C" __global__ void rmsnorm_backward_v3(float* dinp, float* dweight,
                                               const float* dout, const float* inp, const float* weight,
                                               const float* rstd, int N, int C) {
    extern __shared__ float dweight_shared[];  // C floats, sized at launch (the plan's shared memory)
    for (int c = threadIdx.x; c < C; c += blockDim.x) dweight_shared[c] = 0.0f;
    __syncthreads();

    int lane = threadIdx.x % WARP_SIZE;
    int warps_per_block = blockDim.x / WARP_SIZE;
    long long warps_in_grid = (long long)gridDim.x * warps_per_block;
    for (long long row = (long long)blockIdx.x * warps_per_block + threadIdx.x / WARP_SIZE; row < N;
         row += warps_in_grid) {
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
            atomicAdd(&dweight_shared[c], norm * dout_row[c]);
            dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dweight[c], dweight_shared[c]);
}
