// v2_warp: one warp (32 threads) per row. Over v1: the 32 lanes of a warp read 32 neighbouring
// floats at each step, so every load is one coalesced 128-byte transaction, and the row's dot
// product is summed across the lanes with the __shfl_xor_sync butterfly instead of by one thread
// alone. dweight still takes one global atomicAdd per element: N*C atomics in all.
#include "common.cuh"

extern "C" __global__ void rmsnorm_backward_v2(float* dinp, float* dweight, const float* dout,
                                               const float* inp, const float* weight,
                                               const float* rstd, int N, int C) {
    int lane = threadIdx.x % WARP_SIZE;
    long long row = (long long)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= N) return;
    const float* dout_row = dout + row * C;
    const float* inp_row = inp + row * C;
    float* dinp_row = dinp + row * C;
    const float r = rstd[row];

    float partial = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        partial += weight[c] * dout_row[c] * inp_row[c];
    }
    // every lane ends with the whole row's sum; rstd is factored out of the loop
    const float dnorm_norm_mean = warp_reduce_sum(partial) * r / C;

    for (int c = lane; c < C; c += WARP_SIZE) {
        float norm = inp_row[c] * r;
        float dnorm = weight[c] * dout_row[c];
        atomicAdd(&dweight[c], norm * dout_row[c]);
        dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
    }
}
