// v6_last_block: the seed's rmsnorm_backward_kernel10, one kernel for everything.
// Over v5: instead of a second kernel, every block writes its partials, then takes a ticket from a
// global counter with atomicInc; the block that draws the last ticket knows all others are done and
// sums the partials itself. What the seed leaves implicit, made right here:
//  * __threadfence() between writing the partials and taking the ticket, so the last block cannot
//    read a partial that is not yet visible, and __ldcg (L2, not L1) to read them;
//  * atomicInc(counter, gridDim.x - 1) wraps to 0 on the last ticket: no host reset between launches;
//  * row offsets in 64 bits (row * C overflows int once N*C >= 2^31);
//  * the row loop is uniform across the block, so every thread reaches every __syncthreads;
//  * the unused dnorm_mean is gone. The shared memory (2 * rounded_C + ...) and the scratch stride
//    (2 * C) are still the seed's, twice what RMSNorm needs: v7 halves them.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(512, 2)
rmsnorm_backward_v6(__nv_bfloat16* dinp, __nv_bfloat16* dweight, float* scratch, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd, int N, int C) {
    extern __shared__ float shared[];
    const int warps = blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const int step = WARP_SIZE * x128::size;
    const int iterations_C = ceil_div(C, step);
    const int rounded_C = iterations_C * step;
    float* dweight_shared = shared + rounded_C;  // the first rounded_C floats were layernorm's dbias
    float* staging = shared + 2 * rounded_C + f128::size * blockDim.x - 2 * WARP_SIZE * f128::size;

    for (int i = threadIdx.x * f128::size; i < rounded_C; i += blockDim.x * f128::size) {
        store128(dweight_shared + i, f128::zeros());
    }
    __syncthreads();

    for (long long first = (long long)blockIdx.x * warps; first < N; first += (long long)gridDim.x * warps) {
        const long long row = first + warp;
        const bool active = row < N;
        const __nv_bfloat16* dout_row = dout + row * C;
        const __nv_bfloat16* inp_row = inp + row * C;
        __nv_bfloat16* dinp_row = dinp + row * C;
        float r = 0.0f, dnorm_norm_mean = 0.0f;
        if (active) {
            r = rstd[row];
            float partial = 0.0f;
            for (int i = lane * x128::size; i < C; i += step) {
                x128 g = load128(dout_row + i), x = load128(inp_row + i), w = load128(weight + i);
                #pragma unroll
                for (int k = 0; k < x128::size; k++) partial += (float)w[k] * (float)g[k] * (float)x[k];
            }
            dnorm_norm_mean = warp_reduce_sum(partial) / C * r;
        }

        for (int it = 0; it < iterations_C; it++) {
            const int global_index = lane * x128::size + it * step;
            x128 g = x128::zeros(), x = x128::zeros(), d = x128::zeros(), w = x128::zeros();
            if (active && global_index < C) {
                g = load128cs(dout_row + global_index);
                x = load128cs(inp_row + global_index);
                d = load128(dinp_row + global_index);
                w = load128(weight + global_index);
            }
            for (int o = 0; o < x128::size / f128::size; ++o) {
                f128 dweight_f;
                for (int i = 0; i < f128::size; ++i) {
                    const int k = o * f128::size + i;
                    float norm = (float)x[k] * r;
                    dweight_f[i] = norm * (float)g[k];
                    float dval = (float)w[k] * (float)g[k] - norm * dnorm_norm_mean;
                    d[k] = __float2bfloat16((float)d[k] + dval * r);
                }
                if (warp != 0) store128(staging + threadIdx.x * f128::size, dweight_f);
                __syncthreads();
                if (warp == 0) {
                    for (int j = 1; j < warps; j++) {
                        f128 other = load128(staging + f128::size * (threadIdx.x + j * WARP_SIZE));
                        for (int i = 0; i < f128::size; ++i) dweight_f[i] += other[i];
                    }
                }
                __syncthreads();
                if (warp == 0) {
                    f128 old = load128(dweight_shared + global_index + f128::size * o);
                    for (int i = 0; i < f128::size; ++i) dweight_f[i] += old[i];
                    store128(dweight_shared + global_index + f128::size * o, dweight_f);
                }
            }
            if (active && global_index < C) store128cg(dinp_row + global_index, d);
        }
    }
    __syncthreads();

    unsigned int* ticket_counter = (unsigned int*)scratch;
    float* scratch_dweight = scratch + 32 + C;  // one cache line for the counter; the seed's layout
    for (int i = threadIdx.x * f128::size; i < C; i += blockDim.x * f128::size) {
        store128(scratch_dweight + i + 2 * (size_t)C * blockIdx.x, load128(dweight_shared + i));
    }
    // make this block's partials visible to every other block before announcing that they are done
    __threadfence();
    __syncthreads();
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicInc(ticket_counter, gridDim.x - 1);
    __syncthreads();
    if (ticket != gridDim.x - 1) return;

    // the last block: sum all blocks' partials (still one block; v7 spreads this out)
    for (int i = threadIdx.x * f128::size; i < C; i += blockDim.x * f128::size) {
        f128 accum = f128::zeros();
        for (int b = 0; b < gridDim.x; b++) {
            const float* p = scratch_dweight + i + 2 * (size_t)C * b;
            float4 v = __ldcg(reinterpret_cast<const float4*>(p));  // from L2: L1 may hold stale lines
            accum[0] += v.x; accum[1] += v.y; accum[2] += v.z; accum[3] += v.w;
        }
        store128(dweight_shared + i, accum);
    }
    __syncthreads();
    for (int it = warp; it < iterations_C; it += warps) {
        const int global_index = lane * x128::size + it * step;
        if (global_index >= C) break;
        x128 dw = load128(dweight + global_index);
        for (int o = 0; o < x128::size / f128::size; ++o) {
            f128 s = load128(dweight_shared + global_index + o * f128::size);
            for (int i = 0; i < f128::size; ++i) {
                const int k = o * f128::size + i;
                dw[k] = __float2bfloat16(s[i] + (float)dw[k]);
            }
        }
        store128(dweight + global_index, dw);
    }
}
