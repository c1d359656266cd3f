#include "common.cuh"

// v1, written by you: one thread per row. Fill in the lines marked TODO (delete each TODO once done).
extern "C" __global__ void rmsnorm_backward_v1(float* dinp, float* dweight,
                                               const float* dout, const float* inp, const float* weight,
                                               const float* rstd, int N, int C) {
    long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* dout_row = dout + row * C;
    const float* inp_row = inp + row * C;
    float* dinp_row = dinp + row * C;
    const float r = rstd[row];

    // term 2 needs the row's mean of dnorm * norm, with dnorm = weight * dout and norm = inp * rstd
    float dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        dnorm_norm_mean += weight[c] * dout_row[c] * inp_row[c] * r;
    }
    dnorm_norm_mean /= C;

    for (int c = 0; c < C; c++) {
        float norm = inp_row[c] * r, dnorm = weight[c] * dout_row[c];
        atomicAdd(&dweight[c], norm * dout_row[c]);
        dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);
    }
}
