// v5_two_pass: the same result on every run.
// v3/v4 add floats with atomics, in whatever order the hardware serves them; float addition is not
// associative, so dweight's last bits change from run to run. v5 fixes the order of every sum:
// 1. inside a block, for each 256-channel step, warps 1.. stage their contributions in shared
//    memory and warp 0 adds them in warp order into the block's dweight (no shared atomics);
// 2. each block writes its C sums to its own row of a scratch buffer (no global atomics);
// 3. a second kernel sums the scratch rows, block 0 first, and adds the result into dweight.
// The row loop runs the same number of times in every warp of a block (idle warps contribute
// zeros), because __syncthreads inside it must be reached by all threads of the block.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(512, 2)
rmsnorm_backward_v5(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                    int N, int C) {
    extern __shared__ float shared[];
    const int warps = blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int step = WARP_SIZE * x128::size;  // channels a warp covers per iteration: 256
    const int rounded_C = ceil_div(C, step) * step;
    float* dweight_shared = shared;  // rounded_C floats
    // staging for warps 1..warps-1, four floats per lane; shifted so thread 32 lands at its start
    float* staging = shared + rounded_C - WARP_SIZE * f128::size;

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
            dnorm_norm_mean = warp_reduce_sum(partial) * r / C;
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
    float* my_partials = partials + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x * f128::size; c < C; c += blockDim.x * f128::size) {
        store128(my_partials + c, load128(dweight_shared + c));
    }
}

// One thread per channel sums the blocks' partials in block order, then adds once into bf16
// dweight.
extern "C" __global__ void reduce_dweight_v5(__nv_bfloat16* dweight, const float* partials,
                                             int blocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    #pragma unroll 8
    for (int b = 0; b < blocks; b++) sum += partials[(size_t)b * C + c];
    dweight[c] = __float2bfloat16((float)dweight[c] + sum);
}
