// RMSNorm forward, fp32, one warp per row: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) +
// eps). It exists to produce the rstd that every backward kernel of the course reads.
#include "common.cuh"

extern "C" __global__ void rmsnorm_forward(float* out, float* rstd, const float* inp,
                                           const float* weight, int N, int C, float eps) {
    int lane = threadIdx.x % WARP_SIZE;
    long long row = (long long)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= N) return;
    const float* x = inp + row * C;

    float sum_squares = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) sum_squares += x[c] * x[c];
    sum_squares = warp_reduce_sum(sum_squares);
    float s = rsqrtf(sum_squares / C + eps);

    float* o = out + row * C;
    for (int c = lane; c < C; c += WARP_SIZE) o[c] = x[c] * s * weight[c];
    if (lane == 0) rstd[row] = s;
}
