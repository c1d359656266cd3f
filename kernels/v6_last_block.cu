// v6_last_block: the seed's rmsnorm_backward_kernel10, one kernel for everything.
// Over v5: instead of a second kernel, every block writes its partials, then takes a ticket from a
// global counter with atomicInc; the block that draws the last ticket knows all others are done and
// sums the partials itself. What the seed leaves implicit, made right here:
//  * __threadfence() between writing the partials and taking the ticket (release), and in the last
//    block between seeing its ticket and reading the partials (acquire), so it reads every partial;
//  * atomicInc(counter, gridDim.x - 1) wraps to 0 on the last ticket: no host reset between
//    launches;
//  * row offsets in 64 bits (row * C overflows int once N*C >= 2^31);
//  * the unused dnorm_mean is gone. The shared memory (2 * rounded_C + ...) and the scratch stride
//    (2 * C) are still the seed's, twice what RMSNorm needs: v7 halves them.
// The row pass (dinp and the block's dweight sums) is v5's, in bf16_row_pass.cuh, with the seed's
// rounding order for dnorm_norm_mean (/ C * r).
#include "bf16_row_pass.cuh"

#ifndef V6_SCRATCH_HEADER
// the build defines it (rmsnorm_lessons/core/ladder/v6_last_block.py)
#error "V6_SCRATCH_HEADER must be defined by the build"
#endif

extern "C" __global__ void __launch_bounds__(512, 2)
rmsnorm_backward_v6(__nv_bfloat16* dinp, __nv_bfloat16* dweight, float* scratch,
                    const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                    const __nv_bfloat16* weight, const float* rstd, int N, int C) {
    extern __shared__ float shared[];
    const int step = WARP_SIZE * x128::size;  // channels a warp covers per iteration: 256
    const int rounded_C = ceil_div(C, step) * step;
    // rounded_C floats; the first rounded_C were layernorm's dbias. __restrict__ (no other pointer
    // reaches these floats) is a hint: without it ptxas spills 4 bytes on sm_90 at 64 registers.
    float* __restrict__ dweight_shared = shared + rounded_C;
    // staging for warps 1..warps-1, four floats per lane; shifted so thread 32 lands at its start
    // (the seed reserves 2 * (blockDim.x - 32) * 4 floats after dweight_shared: staging is their
    // second half)
    float* staging = shared + 2 * rounded_C + f128::size * blockDim.x - 2 * WARP_SIZE * f128::size;

    block_dweight_rows<true>(dweight_shared, staging, dinp, dout, inp, weight, rstd, N, C);
    // scratch: a header of V6_SCRATCH_HEADER floats (the ticket counter, alone in its cache line),
    // then the seed's layout: block b's C sums at partials + 2 * C * b (the C floats before each
    // were layernorm's dbias)
    unsigned int* ticket_counter = (unsigned int*)scratch;
    float* partials = scratch + V6_SCRATCH_HEADER + C;
    float* my_partials = partials + 2 * (size_t)C * blockIdx.x;
    store_block_partials(my_partials, dweight_shared, C);
    // release: make this block's partials visible to every other block before announcing that they
    // are done
    __threadfence();
    __syncthreads();
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) {
        // the last ticket wraps the counter to 0
        ticket = atomicInc(ticket_counter, gridDim.x - 1);
        // acquire: the last ticket alone does not order this block's reads after the others' writes
        // (PTX ISA memory consistency model, release/acquire patterns): this fence pairs with
        // theirs (fence-fence synchronization), and the __syncthreads below extends it to the whole
        // block
        if (ticket == gridDim.x - 1) __threadfence();
    }
    __syncthreads();
    if (ticket != gridDim.x - 1) return;
    const int warps = blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;

    // the last block: v5's second kernel, four channels a thread (one block here; v7 spreads it
    // out): sums the blocks' partials in block order, then adds once into bf16 dweight
    for (int c = threadIdx.x * f128::size; c < C; c += blockDim.x * f128::size) {
        f128 sum = f128::zeros();
        for (int b = 0; b < gridDim.x; b++) {
            const float* p = partials + c + 2 * (size_t)C * b;
            // from L2 (a cache hint; the fences order)
            float4 v = __ldcg(reinterpret_cast<const float4*>(p));
            sum[0] += v.x; sum[1] += v.y; sum[2] += v.z; sum[3] += v.w;
        }
        store128(dweight_shared + c, sum);
    }
    __syncthreads();
    for (int base = warp * step; base < C; base += warps * step) {
        const int c = base + lane * x128::size;
        if (c >= C) break;
        x128 dw = load128(dweight + c);
        #pragma unroll
        for (int half = 0; half < x128::size / f128::size; half++) {
            f128 sum = load128(dweight_shared + c + half * f128::size);
            #pragma unroll
            for (int i = 0; i < f128::size; i++) {
                const int k = half * f128::size + i;
                dw[k] = __float2bfloat16(sum[i] + (float)dw[k]);
            }
        }
        store128(dweight + c, dw);
    }
}
