#include "common.cuh"

// v2, written by you: one warp per row. Fill in the TODOs: the lanes' columns and the butterfly.
extern "C" __global__ void rmsnorm_backward_v2(float* dinp, float* dweight,
                                               const float* dout, const float* inp, const float* weight,
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
    for (int off = 16; off > 0; off /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, off);
    const float dnorm_norm_mean = partial * r / C;  // rstd factored out of the loop above

    for (int c = lane; c < C; c += WARP_SIZE) {
        float norm = inp_row[c] * r;
        float dnorm = weight[c] * dout_row[c];
        atomicAdd(&dweight[c], norm * dout_row[c]);
        dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
    }
}
