// v7_fast: past the seed, toward the copy bandwidth.
// Over v6, what each change is for (kernels/NOTES.md has the prediction for each):
//  1. No __syncthreads in the row loop. A thread owns fixed columns of the row (K 16-byte chunks,
//     strided so that each warp reads 512 contiguous bytes per chunk) and adds its rows' norm * dout
//     into its own slice of shared memory, which no other thread touches until the end. v6 paid two
//     __syncthreads per 256 channels per row to stage dweight through shared memory.
//  2. One row at a time per "row group" of G threads (G = 32 * ceil(C / (8 * K * 32))), several row
//     groups per block. Every load of the row (dout, inp, and dinp unless overwriting) is issued
//     before the first is used: K * 48 bytes in flight per thread, and weight's K chunks are loaded
//     once per kernel, not once per row. The row's dot product is a warp butterfly and, when G > 32,
//     one exchange through shared memory synchronised with a named barrier (bar.sync id, G) that
//     only the group's warps wait on; its two slot buffers alternate, so one barrier per row is enough.
//     bf16 pairs stay packed in 32-bit registers and are widened with a shift or a mask.
//  3. Rows are dealt round-robin over the whole grid (row = k * grid * groups + group * grid + block),
//     so the last, partial round is spread over every SM instead of the first few blocks.
//  4. An overwrite mode (dinp = instead of +=) that skips the read of dinp: 3 tensors move, not 4.
//  5. At the end the groups' slices are added in group order, and each block writes C fp32 partials
//     (v6: 2 * C, and twice the shared memory).
//  6. The final sum over blocks is spread over many blocks, not one (the seed's TODO): every block
//     takes a ticket (atomicInc, as in v6); the last R to arrive each wait until all have arrived and
//     then sum one slice of the columns. Or, with reducers == 0, a second kernel does the same slices.
//     Every column is summed in the same order either way: partial rows b = p, p + P, ... for each of
//     the P = blockDim / 32 warps, then the warps' sums in warp order. Deterministic, bitwise.
//  7. 64-bit row offsets; streaming hints (ld.global.cs / st.global.cs) on the row tensors.
//  8. Prefetch (accumulate mode, 1024 <= C <= 8192, K = 2): the next row's dout and inp are loaded
//     before this row is reduced and written, so a group's loads never stop at the dot product's exchange.
//     Two rows fit in the registers only if weight is reread from L1 in each pass (it is 16 bytes a chunk,
//     always cached) and dinp, needed only after the exchange, is loaded at the start of its own row.
//  9. The final sum issues all of a warp's partial rows' loads at once (REDUCE_BATCH), then adds them in
//     row order: one L2 round trip instead of three, on the critical path after the last block arrives.
// The waiting blocks cannot deadlock: the plan keeps R <= grid / 2, so while they wait, at least as many
// slots are free as blocks that have yet to start. A wait that lasts 10 s traps (a launch error),
// rather than hanging the GPU, if that promise is ever broken.
#include "common.cuh"

namespace v7 {

constexpr int MAX_BLOCK = 512;              // every main kernel is compiled for blocks of up to 512
constexpr int QUADS_PER_PASS = WARP_SIZE;   // final sum: a warp reads 32 float4 = 512 B of a partial row
constexpr int REDUCE_BATCH = 9;          // final sum: 16 warps x 9 cover 132 partial rows in one round
constexpr int SCRATCH_HEADER = 32;          // floats before the partials: the ticket counter, one line
constexpr unsigned long long SPIN_LIMIT_NS = 10ull * 1000 * 1000 * 1000;

// Wait at barrier `id` (1..15; 0 is __syncthreads) until `threads` threads (a multiple of 32) arrive.
// barrier.sync, not bar.sync (= barrier.sync.aligned): it does not require the warp to be converged.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* address) {
    unsigned value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
    return value;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void add4(float4& s, const float4 v) {
    s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
}

// Eight bf16 values as four 32-bit words, as a 128-bit load leaves them: value 2i is the low half of
// word i, value 2i+1 the high half. Widening to fp32 is a shift or a mask (bf16 is fp32's top half).
// Kept as words, not as __nv_bfloat16[8], so the compiler never splits them into 8 registers.
__device__ __forceinline__ unsigned word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ float widen(const uint4& v, int k) {  // k is a compile-time constant
    const unsigned u = word(v, k / 2);
    return __uint_as_float(k % 2 == 0 ? u << 16 : u & 0xffff0000u);
}
__device__ __forceinline__ unsigned pack(float low, float high) {  // round to nearest even, as __float2bfloat16
    __nv_bfloat162 p = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<unsigned*>(&p);
}

// An empty asm that claims to change v, so the compiler cannot keep v's values widened to fp32 (8
// registers per chunk instead of 4) across it: weight's out of the row loop, dout's and inp's across
// the dot product's exchange. It emits no instruction; without it K = 4 spills (ptxas -v).
__device__ __forceinline__ void opaque(uint4& v) {
    asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}

// Sum the blocks' partials for quads [begin, end) of slice `slice` and add them into dweight.
// `red` holds blockDim.x float4. With wait_counter, thread 0 first waits until the ticket counter has
// come back to 0 (every block has written its partials); the dweight loads are issued before the wait.
__device__ void reduce_slice(__nv_bfloat16* dweight, const float* partials, int parts, int C, int slice,
                             int slices, float4* red, const unsigned* wait_counter) {
    const int quads = C / 4;
    const int per = ceil_div(ceil_div(quads, QUADS_PER_PASS), slices) * QUADS_PER_PASS;
    const int begin = slice * per;
    const int end = min(begin + per, quads);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int warps = blockDim.x / WARP_SIZE;
    for (int base = begin; base < end; base += QUADS_PER_PASS) {
        const int q = base + lane;
        const bool mine = q < end;
        uint2 old = make_uint2(0u, 0u);  // 4 bf16 of dweight
        if (warp == 0 && mine) old = *reinterpret_cast<const uint2*>(dweight + 4 * (size_t)q);
        if (wait_counter != nullptr && base == begin) {
            if (threadIdx.x == 0) {
                const unsigned long long start = global_timer_ns();
                while (load_acquire(wait_counter) != 0u) {
                    __nanosleep(64);
                    if (global_timer_ns() - start > SPIN_LIMIT_NS) __trap();
                }
                __threadfence();
            }
            __syncthreads();
        }
        // this warp's partial rows b = warp, warp + warps, ...: BATCH loads in flight, then added in row order
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (mine) {
            const float4* column = reinterpret_cast<const float4*>(partials) + q;
            for (int first = warp; first < parts; first += REDUCE_BATCH * warps) {
                float4 v[REDUCE_BATCH];
                #pragma unroll
                for (int i = 0; i < REDUCE_BATCH; i++) {
                    const int b = first + i * warps;
                    v[i] = b < parts ? __ldcg(column + (size_t)b * quads) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                #pragma unroll
                for (int i = 0; i < REDUCE_BATCH; i++) add4(s, v[i]);
            }
        }
        red[threadIdx.x] = s;
        __syncthreads();
        if (warp == 0 && mine) {
            float4 total = red[lane];
            for (int i = 1; i < warps; i++) add4(total, red[i * WARP_SIZE + lane]);
            __nv_bfloat162 lo = *reinterpret_cast<__nv_bfloat162*>(&old.x);
            __nv_bfloat162 hi = *reinterpret_cast<__nv_bfloat162*>(&old.y);
            const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
            lo = __floats2bfloat162_rn(a.x + total.x, a.y + total.y);
            hi = __floats2bfloat162_rn(b.x + total.z, b.y + total.w);
            uint2 out;
            out.x = *reinterpret_cast<unsigned*>(&lo);
            out.y = *reinterpret_cast<unsigned*>(&hi);
            *reinterpret_cast<uint2*>(dweight + 4 * (size_t)q) = out;
        }
        __syncthreads();  // red is reused by the next pass
    }
}

// The main kernel, for K chunks of 8 channels per thread. G = threads per row group (multiple of 32,
// blockDim.x a multiple of G, at most 15 groups per block when G > 32).
template <int K, bool PREFETCH>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, __nv_bfloat16* dweight, float* scratch,
                                         const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                         const __nv_bfloat16* weight, const float* rstd, int N, int C, int G,
                                         bool overwrite, int reducers) {
    extern __shared__ float4 shared4[];  // the groups' dweight at the end, then the final sum's staging
    __shared__ float slots[2][MAX_BLOCK / WARP_SIZE];  // each warp's part of the row's dot product
    __shared__ unsigned ticket;

    const int groups = blockDim.x / G;
    const int group = threadIdx.x / G;
    const int t = threadIdx.x - group * G;  // thread within its row group
    const int lane = threadIdx.x % WARP_SIZE;
    const int warps_in_group = G / WARP_SIZE;
    const int first_slot = group * warps_in_group;
    const int chunks = C / 8;  // 16-byte chunks of a row
    const float inv_C = 1.0f / (float)C;

    // this thread's columns: chunks t, t + G, ..., t + (K-1) G, each of 8 channels. Their dweight sums
    // live in the group's slice of shared memory, which only this thread touches until the end (no
    // barrier): float4 `half` of chunk c at region[half * chunks + c], so a warp's accesses are
    // contiguous. Registers would do too, but 8 fp32 per chunk are what pushes K = 4 into spilling.
    float4* region = shared4 + (size_t)group * (C / 4);
    const uint4* weight4 = reinterpret_cast<const uint4*>(weight);
#ifdef V7_WEIGHT_L1
    constexpr bool WEIGHT_IN_REGISTERS = false;
#else
    constexpr bool WEIGHT_IN_REGISTERS = !PREFETCH;  // else from L1 in each pass: registers for the next row
#endif
    uint4 w[K];
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = t + j * G;
        w[j] = make_uint4(0u, 0u, 0u, 0u);
        if (chunk < chunks) {
            if (WEIGHT_IN_REGISTERS) w[j] = __ldg(weight4 + chunk);
            region[chunk] = region[chunks + chunk] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }

    const long long stride = (long long)gridDim.x * groups;
    int buffer = 0;
    // a row's dout and inp: 2 * K independent 16-byte loads per thread, and its rstd
    auto load_row = [&](long long row, uint4 (&g)[K], uint4 (&x)[K], float& r) {
        const uint4* dout_row = reinterpret_cast<const uint4*>(dout + (size_t)row * C);
        const uint4* inp_row = reinterpret_cast<const uint4*>(inp + (size_t)row * C);
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int chunk = t + j * G;
            g[j] = x[j] = make_uint4(0u, 0u, 0u, 0u);
            if (chunk < chunks) {
                g[j] = __ldcs(dout_row + chunk);
                x[j] = __ldcs(inp_row + chunk);
            }
        }
        r = __ldg(rstd + row);
    };
    long long row = (long long)group * gridDim.x + blockIdx.x;
    uint4 g[K], x[K];
    float r = 0.0f;
    if (PREFETCH && row < N) load_row(row, g, x, r);
    #pragma unroll 1  // one row (with PREFETCH, also the next row's dout and inp) in registers at a time
    for (; row < N; row += stride) {
        if (!PREFETCH) load_row(row, g, x, r);
        uint4* dinp_row = reinterpret_cast<uint4*>(dinp + (size_t)row * C);
        uint4 d[K];  // dinp is needed only after the dot product: its loads fly during pass 1 and the exchange
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int chunk = t + j * G;
            d[j] = make_uint4(0u, 0u, 0u, 0u);
            if (!overwrite && chunk < chunks) d[j] = __ldcs(dinp_row + chunk);
        }
        uint4 gn[K], xn[K];
        float rn = 0.0f;
        if (PREFETCH && row + stride < N) load_row(row + stride, gn, xn, rn);  // flies during this row
        if (WEIGHT_IN_REGISTERS) {
            #pragma unroll
            for (int j = 0; j < K; j++) opaque(w[j]);  // widen weight here, in every row (see opaque)
        }

        // pass 1 over the registers: the row's sum of weight * dout * inp, and dweight += norm * dout
        float dot = 0.0f;
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int chunk = t + j * G;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
            uint4 wj = w[j];
            if (chunk < chunks) {
                if (!WEIGHT_IN_REGISTERS) wj = __ldg(weight4 + chunk);
                a = region[chunk];
                b = region[chunks + chunk];
            }
            float sum[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            #pragma unroll
            for (int k = 0; k < 8; k++) {
                const float dout_k = widen(g[j], k), inp_k = widen(x[j], k);
                dot += widen(wj, k) * dout_k * inp_k;
                sum[k] += inp_k * r * dout_k;
            }
            if (chunk < chunks) {
                region[chunk] = make_float4(sum[0], sum[1], sum[2], sum[3]);
                region[chunks + chunk] = make_float4(sum[4], sum[5], sum[6], sum[7]);
            }
        }
        // the dot product: lanes, then the group's warps in a fixed order
        dot = warp_reduce_sum(dot);
        if (warps_in_group > 1) {
            if (lane == 0) slots[buffer][first_slot + t / WARP_SIZE] = dot;
            named_barrier(1 + group, G);
            dot = 0.0f;
            for (int i = 0; i < warps_in_group; i++) dot += slots[buffer][first_slot + i];
            buffer ^= 1;  // the next row writes the other buffer: no second barrier needed
        }
        // dinp = rstd * (weight * dout - norm * mean(dnorm * norm)), with norm = inp * rstd and
        // mean(dnorm * norm) = dot * rstd / C, so the inp term is inp * dot * rstd^3 / C
        const float scale_inp = dot * r * r * r * inv_C;

        // pass 2: dinp. dout, inp and weight are widened again rather than kept as 24 fp32 registers
        // per chunk across the exchange above (opaque hides that they are the same values)
        #pragma unroll
        for (int j = 0; j < K; j++) {
            opaque(g[j]);
            opaque(x[j]);
            const int chunk = t + j * G;
            if (chunk < chunks) {
                uint4 wj = w[j];
                if (WEIGHT_IN_REGISTERS) opaque(wj); else wj = __ldg(weight4 + chunk);
                float out[8];
                #pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float dval = widen(wj, k) * widen(g[j], k) * r - widen(x[j], k) * scale_inp;
                    out[k] = overwrite ? dval : widen(d[j], k) + dval;
                }
                __stcs(dinp_row + chunk, make_uint4(pack(out[0], out[1]), pack(out[2], out[3]),
                                                    pack(out[4], out[5]), pack(out[6], out[7])));
            }
        }
        if (PREFETCH) {
            #pragma unroll
            for (int j = 0; j < K; j++) {
                g[j] = gn[j];
                x[j] = xn[j];
            }
            r = rn;
        }
    }

    // the block's dweight: the groups' slices added in group order, written once as C fp32 partials
    __syncthreads();
    float* partials = scratch + SCRATCH_HEADER;
    float4* mine = reinterpret_cast<float4*>(partials + (size_t)blockIdx.x * C);
    for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {  // q: columns 4q .. 4q + 3
        const int at = (q % 2) * chunks + q / 2;
        float4 s = shared4[at];
        for (int i = 1; i < groups; i++) add4(s, shared4[(size_t)i * (C / 4) + at]);
        __stcg(mine + q, s);
    }
    if (reducers == 0) return;  // a second kernel sums the partials

    // publish the partials, then take a ticket; the last `reducers` blocks to arrive sum the columns
    unsigned* counter = reinterpret_cast<unsigned*>(scratch);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicInc(counter, gridDim.x - 1);  // the last ticket wraps it to 0
    __syncthreads();
    const int first_reducer = (int)gridDim.x - reducers;
    if ((int)ticket < first_reducer) return;
    reduce_slice(dweight, partials, gridDim.x, C, (int)ticket - first_reducer, reducers, shared4, counter);
}

}  // namespace v7

// Knobs for the experiments of tools/v7_explore.py (kernels/NOTES.md has what they measured); the
// defaults are the course's build: one 512-thread block of up to 128 registers per SM, K up to 4.
#ifndef V7_BLOCKS_PER_SM
#define V7_BLOCKS_PER_SM 1
#endif
#ifndef V7_K_LIMIT
#define V7_K_LIMIT 4
#endif

// One entry point; K (chunks per thread) and prefetch are chosen by the plan from C and the mode and
// switched on here. Registers are allocated for the largest case (K = 4, or K = 2 holding two rows: about
// 128; __launch_bounds__(512, 1) allows exactly that).
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK, V7_BLOCKS_PER_SM)
rmsnorm_backward_v7(__nv_bfloat16* dinp, __nv_bfloat16* dweight, float* scratch, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd, int N, int C, int G,
                    int K, int prefetch, int overwrite, int reducers) {
    const bool ow = overwrite != 0;
    if (prefetch) {
#if V7_K_LIMIT >= 2 && V7_BLOCKS_PER_SM == 1
        if (K == 2) return v7::backward<2, true>(dinp, dweight, scratch, dout, inp, weight, rstd, N, C, G, ow, reducers);
#endif
        __trap();  // the plan prefetches only with K = 2
    }
    switch (K) {
        case 1: v7::backward<1, false>(dinp, dweight, scratch, dout, inp, weight, rstd, N, C, G, ow, reducers); break;
#if V7_K_LIMIT >= 2
        case 2: v7::backward<2, false>(dinp, dweight, scratch, dout, inp, weight, rstd, N, C, G, ow, reducers); break;
#endif
#if V7_K_LIMIT >= 3
        case 3: v7::backward<3, false>(dinp, dweight, scratch, dout, inp, weight, rstd, N, C, G, ow, reducers); break;
#endif
#if V7_K_LIMIT >= 4
        case 4: v7::backward<4, false>(dinp, dweight, scratch, dout, inp, weight, rstd, N, C, G, ow, reducers); break;
#endif
        default: __trap();
    }
}

// The same slices as the fused path, as a kernel of its own: block j sums slice j of `slices`.
// Launch it with the main kernel's block size, so the order of every sum is the same.
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK) reduce_dweight_v7(__nv_bfloat16* dweight,
                                                                               const float* scratch, int parts,
                                                                               int C, int slices) {
    __shared__ float4 red[v7::MAX_BLOCK];
    v7::reduce_slice(dweight, scratch + v7::SCRATCH_HEADER, parts, C, blockIdx.x, slices, red, nullptr);
}
