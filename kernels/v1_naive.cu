// v1_naive: the seed's CPU loops moved onto the GPU, one thread per row.
// Each thread walks its row twice (the reduction, then the gradients) and adds its row's
// contribution to every dweight[c] with a global atomicAdd: N atomics on each of C addresses.
// Neighbouring threads read addresses C floats apart, so no load is coalesced.
#include "common.cuh"

extern "C" __global__ void rmsnorm_backward_v1(float* dinp, float* dweight, const float* dout,
                                               const float* inp, const float* weight,
                                               const float* rstd, int N, int C) {
    long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* dout_row = dout + row * C;
    const float* inp_row = inp + row * C;
    float* dinp_row = dinp + row * C;
    const float r = rstd[row];

    float dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        dnorm_norm_mean += weight[c] * dout_row[c] * (inp_row[c] * r);
    }
    dnorm_norm_mean /= C;

    for (int c = 0; c < C; c++) {
        float norm = inp_row[c] * r;
        float dnorm = weight[c] * dout_row[c];
        atomicAdd(&dweight[c], norm * dout_row[c]);
        dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
    }
}
