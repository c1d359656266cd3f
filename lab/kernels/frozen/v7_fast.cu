// v7_fast: past the seed, toward the copy bandwidth.
// Over v6, what each change is for (results/NOTES.md has the prediction for each):
//  1. No __syncthreads in the row loop. A thread owns fixed columns of the row (K 16-byte chunks,
//     strided so that each warp reads 512 contiguous bytes per chunk) and adds its rows' norm * dout
//     into its own slice of shared memory, which no other thread touches until the end. v6 paid four
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
//  6. The final sum over blocks is spread over many blocks, not one (the seed's TODO): a second kernel,
//     reduce_dweight_v7, launched after this one on the same stream, gives each of its blocks one slice
//     of the columns. Every column is summed in the same order: partial rows b = p, p + P, ... for each
//     of the P = blockDim / 32 warps, then the warps' sums in warp order. Deterministic, bitwise.
//     No block ever waits for another. (An earlier v7 let the last blocks to finish wait for the rest
//     and then sum; a launch that is not cooperative promises no co-residency, and beside another
//     stream's kernel holding most SMs that wait lasted until the other kernel ended: results/NOTES.md.)
//  7. 64-bit row offsets; streaming hints (ld.global.cs / st.global.cs) on the row tensors.
//  8. Prefetch (accumulate mode, 1024 <= C <= 8192, K = 2): the next row's dout and inp are loaded
//     before this row is reduced and written, so a group's loads never stop at the dot product's exchange.
//     Two rows fit in the registers only if weight is reread from L1 in each pass (it is 16 bytes a chunk,
//     always cached) and dinp, needed only after the exchange, is loaded at the start of its own row.
//  9. The final sum issues all of a warp's partial rows' loads at once (REDUCE_BATCH), then adds them in
//     row order: one L2 round trip instead of three, on the critical path after the last block arrives.
// 10. A row wider than one block's registers hold (C > 16384, up to 65536; sm_90 and newer) is split by
//     columns over a thread-block cluster of 2 or 4 blocks (rmsnorm_backward_v7_wide2 / _wide4, at the
//     end of this file). Its rows come into shared memory by bulk copies (cp.async.bulk) into a ring of
//     `stages` row slots, an mbarrier per slot, so several rows are in flight whatever the registers
//     hold; the row's dot product is added over the cluster through distributed shared memory, one
//     cluster barrier per row. A cluster's blocks are launched together by the hardware, so no block
//     waits for one that may not be resident. One partial row per cluster; the same final sum.
// 11. Rows of 1024 <= C <= 16384 are staged in shared memory by asynchronous copies (cp.async, 16 bytes
//     a thread; rmsnorm_backward_v7_staged, after the final sum). Each thread copies exactly the chunks it will
//     read, so cp.async.wait_group alone says they have landed: each row group keeps a ring of `stages`
//     row slots, `stages` - 1 rows in flight while it works on one, in both modes, whatever the registers
//     hold. With the rows out of the registers, a thread holds K = 2 chunks, its dweight sums (16 fp32)
//     and weight widened once (16 fp32) in 64 registers: blocks of 1024 threads, 32 warps an SM instead
//     of 16. Pass 1 forms dout * inp once per value for both the dot product and dweight. (results/NOTES.md,
//     "v9": 92-97 % of the same-bytes ceiling where the register path had 84-96 %.)
#include "common.cuh"

// Numbers the Python plan (rmsnorm_lessons/core/ladder/v7_fast.py, DEFINES) must agree on, passed as -D flags.
#ifndef V7_MAX_BLOCK
#error "V7_MAX_BLOCK must be defined by the build (rmsnorm_lessons/core/ladder/v7_fast.py)"
#endif
#ifndef V7_QUADS_PER_PASS
#error "V7_QUADS_PER_PASS must be defined by the build (rmsnorm_lessons/core/ladder/v7_fast.py)"
#endif
#ifndef V7_REDUCE_BATCH
#error "V7_REDUCE_BATCH must be defined by the build (rmsnorm_lessons/core/ladder/v7_fast.py)"
#endif
#ifndef V7_STAGED_BLOCK
#error "V7_STAGED_BLOCK must be defined by the build (rmsnorm_lessons/core/ladder/v7_fast.py)"
#endif

namespace v7 {

constexpr int MAX_BLOCK = V7_MAX_BLOCK;            // every main kernel is compiled for blocks of up to 512
constexpr int QUADS_PER_PASS = V7_QUADS_PER_PASS;  // final sum: a warp reads 32 float4 = 512 B of a partial row
constexpr int REDUCE_BATCH = V7_REDUCE_BATCH;      // final sum: 16 warps x 9 cover 132 partial rows in one round
static_assert(MAX_BLOCK % WARP_SIZE == 0 && MAX_BLOCK <= 1024, "V7_MAX_BLOCK: whole warps, at most 1024 threads");
static_assert(QUADS_PER_PASS == WARP_SIZE, "V7_QUADS_PER_PASS: reduce_slice gives each lane one float4 per pass");
static_assert(REDUCE_BATCH >= 1, "V7_REDUCE_BATCH: at least one load in flight");

// Wait at barrier `id` (1..15; 0 is __syncthreads) until `threads` threads (a multiple of 32) arrive.
// barrier.sync, not bar.sync (= barrier.sync.aligned): it does not require the warp to be converged.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
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
// `red` holds blockDim.x float4.
__device__ void reduce_slice(__nv_bfloat16* dweight, const float* partials, int parts, int C, int slice,
                             int slices, float4* red) {
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

// Where a thread works. A block is `groups` row groups of G threads (G a multiple of 32, blockDim.x a
// multiple of G). This thread is thread t of row group `group`, lane `lane` of its warp; its columns are
// the 16-byte chunks t, t + G, ..., t + (K-1) G of every row its group is dealt (8 channels each; a row
// has `chunks` of them).
struct Place {
    int G, groups, group, t, lane;
    int warps_in_group, first_slot;  // the group's warps, and the first of their slots in the exchange
    int chunks;
    size_t slice;  // the group's dweight sums start at float4 `slice` of the dynamic shared memory
    __device__ __forceinline__ int chunk(int j) const { return t + j * G; }  // this thread's chunk j
};
__device__ __forceinline__ Place place(int G, int C) {
    Place p;
    p.G = G;
    p.groups = blockDim.x / G;
    p.group = threadIdx.x / G;
    p.t = threadIdx.x - p.group * G;
    p.lane = threadIdx.x % WARP_SIZE;
    p.warps_in_group = G / WARP_SIZE;
    p.first_slot = p.group * p.warps_in_group;
    p.chunks = C / 8;
    p.slice = (size_t)p.group * (C / 4);
    return p;
}

// This thread's dweight sums for one of its chunks: `half` 0 holds the chunk's channels 0..3, `half` 1
// channels 4..7. They live in the group's slice of shared memory, which only this thread touches until
// the end (no barrier), at slice + half * chunks + chunk, so a warp's accesses are contiguous. Registers
// would do too, but 8 fp32 per chunk are what pushes K = 4 into spilling.
// (Indexed from the shared array itself, not through a float4* slice pointer: with a pointer the
// compiler hoists the 2K addresses out of the row loop and K = 4 spills.)
__device__ __forceinline__ float4& sums(const Place& p, int half, int chunk) {
    extern __shared__ float4 shared4[];
    return shared4[p.slice + (half * p.chunks + chunk)];
}

// Before the first row: this thread's dweight sums start at zero and, unless it is reread from L1 in
// each pass, weight's K chunks go into registers: loaded once per kernel, not once per row.
template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ void init_columns(const Place& p, const uint4* weight4, uint4 (&w)[K]) {
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        w[j] = make_uint4(0u, 0u, 0u, 0u);
        if (chunk < p.chunks) {
            if (WEIGHT_IN_REGISTERS) w[j] = __ldg(weight4 + chunk);
            sums(p, 0, chunk) = sums(p, 1, chunk) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

// A row's dout and inp: 2 * K independent 16-byte loads per thread, and its rstd.
template <int K>
__device__ __forceinline__ void load_row(const Place& p, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                         const float* rstd, int C, long long row, uint4 (&g)[K], uint4 (&x)[K],
                                         float& r) {
    const uint4* dout_row = reinterpret_cast<const uint4*>(dout + (size_t)row * C);
    const uint4* inp_row = reinterpret_cast<const uint4*>(inp + (size_t)row * C);
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        g[j] = x[j] = make_uint4(0u, 0u, 0u, 0u);
        if (chunk < p.chunks) {
            g[j] = __ldcs(dout_row + chunk);
            x[j] = __ldcs(inp_row + chunk);
        }
    }
    r = __ldg(rstd + row);
}

// A row's dinp (zeros when overwriting). It is needed only after the dot product: its loads fly during
// pass 1 and the exchange.
template <int K>
__device__ __forceinline__ void load_dinp(const Place& p, const uint4* dinp_row, bool overwrite, uint4 (&d)[K]) {
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        d[j] = make_uint4(0u, 0u, 0u, 0u);
        if (!overwrite && chunk < p.chunks) d[j] = __ldcs(dinp_row + chunk);
    }
}

// Pass 1 over the registers: this thread's part of the row's sum of weight * dout * inp (returned), and
// dweight += norm * dout (norm = inp * rstd) into its sums.
template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ float row_pass(const Place& p, const uint4* weight4, const uint4 (&w)[K],
                                          const uint4 (&g)[K], const uint4 (&x)[K], float r) {
    float dot = 0.0f;
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        uint4 wj = w[j];
        if (chunk < p.chunks) {
            if (!WEIGHT_IN_REGISTERS) wj = __ldg(weight4 + chunk);
            a = sums(p, 0, chunk);
            b = sums(p, 1, chunk);
        }
        float sum[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            const float dout_k = widen(g[j], k), inp_k = widen(x[j], k);
            dot += widen(wj, k) * dout_k * inp_k;
            sum[k] += inp_k * r * dout_k;
        }
        if (chunk < p.chunks) {
            sums(p, 0, chunk) = make_float4(sum[0], sum[1], sum[2], sum[3]);
            sums(p, 1, chunk) = make_float4(sum[4], sum[5], sum[6], sum[7]);
        }
    }
    return dot;
}

// The row's dot product from the threads' parts: lanes (a warp butterfly), then, when the row group has
// more than one warp, the group's warps in a fixed order, through `slots` in shared memory after a named
// barrier (bar.sync id, G) that only the group's warps wait on. Its two slot buffers alternate, so one
// barrier per row is enough.
__device__ __forceinline__ float exchange(const Place& p, float dot, float (&slots)[2][MAX_BLOCK / WARP_SIZE],
                                          int& buffer) {
    dot = warp_reduce_sum(dot);
    if (p.warps_in_group > 1) {
        if (p.lane == 0) slots[buffer][p.first_slot + p.t / WARP_SIZE] = dot;
        named_barrier(1 + p.group, p.G);
        dot = 0.0f;
        for (int i = 0; i < p.warps_in_group; i++) dot += slots[buffer][p.first_slot + i];
        buffer ^= 1;  // the next row writes the other buffer: no second barrier needed
    }
    return dot;
}

// Pass 2: dinp = (or +=) weight * dout * rstd - inp * scale_inp, 16 bytes a store. dout, inp and weight
// are widened again rather than kept as 24 fp32 registers per chunk across the exchange (opaque hides
// that they are the same values).
template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ void write_dinp(const Place& p, uint4* dinp_row, const uint4* weight4, const uint4 (&w)[K],
                                           uint4 (&g)[K], uint4 (&x)[K], const uint4 (&d)[K], float r,
                                           float scale_inp, bool overwrite) {
    #pragma unroll
    for (int j = 0; j < K; j++) {
        opaque(g[j]);
        opaque(x[j]);
        const int chunk = p.chunk(j);
        if (chunk < p.chunks) {
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
}

// After the last row, the block's dweight: the groups' slices added in group order, written once as C
// fp32 partials, row blockIdx.x of `partials`.
__device__ __forceinline__ void block_partials(const Place& p, const float4* shared4, float* partials, int C) {
    __syncthreads();
    float4* mine = reinterpret_cast<float4*>(partials + (size_t)blockIdx.x * C);
    for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {  // q: columns 4q .. 4q + 3
        const int at = (q % 2) * p.chunks + q / 2;
        float4 s = shared4[at];
        for (int i = 1; i < p.groups; i++) add4(s, shared4[(size_t)i * (C / 4) + at]);
        __stcg(mine + q, s);
    }
}

// The main kernel, for K chunks of 8 channels per thread. G = threads per row group (multiple of 32,
// blockDim.x a multiple of G, at most 15 groups per block when G > 32). PREFETCH: the next row's dout
// and inp are loaded while this row is finished.
template <int K, bool PREFETCH>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials,
                                         const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                         const __nv_bfloat16* weight, const float* rstd, int N, int C, int G,
                                         bool overwrite) {
    extern __shared__ float4 shared4[];  // the groups' dweight sums (see sums)
    __shared__ float slots[2][MAX_BLOCK / WARP_SIZE];  // each warp's part of the row's dot product
    constexpr bool WEIGHT_IN_REGISTERS = !PREFETCH;  // else from L1 in each pass: registers for the next row

    const Place p = place(G, C);
    const float inv_C = 1.0f / (float)C;
    const uint4* weight4 = reinterpret_cast<const uint4*>(weight);
    uint4 w[K];
    init_columns<K, WEIGHT_IN_REGISTERS>(p, weight4, w);

    const long long stride = (long long)gridDim.x * p.groups;
    int buffer = 0;  // the exchange's slot buffer for the next row
    long long row = (long long)p.group * gridDim.x + blockIdx.x;
    uint4 g[K], x[K];
    float r = 0.0f;
    if (PREFETCH && row < N) load_row(p, dout, inp, rstd, C, row, g, x, r);
    #pragma unroll 1  // one row (with PREFETCH, also the next row's dout and inp) in registers at a time
    for (; row < N; row += stride) {
        if (!PREFETCH) load_row(p, dout, inp, rstd, C, row, g, x, r);
        uint4* dinp_row = reinterpret_cast<uint4*>(dinp + (size_t)row * C);
        uint4 d[K];
        load_dinp(p, dinp_row, overwrite, d);
        uint4 gn[K], xn[K];
        float rn = 0.0f;
        if (PREFETCH && row + stride < N) {
            load_row(p, dout, inp, rstd, C, row + stride, gn, xn, rn);  // flies during this row
        }
        if (WEIGHT_IN_REGISTERS) {
            #pragma unroll
            for (int j = 0; j < K; j++) opaque(w[j]);  // widen weight here, in every row (see opaque)
        }

        float dot = row_pass<K, WEIGHT_IN_REGISTERS>(p, weight4, w, g, x, r);
        dot = exchange(p, dot, slots, buffer);
        // dinp = rstd * (weight * dout - norm * mean(dnorm * norm)), with norm = inp * rstd and
        // mean(dnorm * norm) = dot * rstd / C, so the inp term is inp * dot * rstd^3 / C
        const float scale_inp = dot * r * r * r * inv_C;
        write_dinp<K, WEIGHT_IN_REGISTERS>(p, dinp_row, weight4, w, g, x, d, r, scale_inp, overwrite);

        if (PREFETCH) {
            #pragma unroll
            for (int j = 0; j < K; j++) {
                g[j] = gn[j];
                x[j] = xn[j];
            }
            r = rn;
        }
    }

    block_partials(p, shared4, partials, C);  // reduce_dweight_v7, launched next, sums them
}

}  // namespace v7

// One entry point; K (chunks per thread) and prefetch are chosen by the plan from C and the mode and
// switched on here. Registers are allocated for the largest case (K = 4, or K = 2 holding two rows: about
// 128; __launch_bounds__(512, 1) allows exactly that): one 512-thread block per SM, the course's build.
// (Other launch bounds, and weight reread from L1, were measured by lab/v7_explore.py: results/NOTES.md.)
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd, int N, int C, int G,
                    int K, int prefetch, int overwrite) {
    const bool ow = overwrite != 0;
    if (prefetch) {
        if (K == 2) return v7::backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow);
        __trap();  // the plan prefetches only with K = 2
    }
    switch (K) {
        case 1: v7::backward<1, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 2: v7::backward<2, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 3: v7::backward<3, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        case 4: v7::backward<4, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow); break;
        default: __trap();
    }
}

// The final sum: block j adds slice j of `slices` of the columns of the `parts` partial rows into dweight.
// Launched with the main kernel's block size (MAX_BLOCK), so the order of every sum is fixed.
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK) reduce_dweight_v7(__nv_bfloat16* dweight,
                                                                               const float* partials, int parts,
                                                                               int C, int slices) {
    __shared__ float4 red[v7::MAX_BLOCK];
    v7::reduce_slice(dweight, partials, parts, C, blockIdx.x, slices, red);
}


// ---- 11. Rows staged in shared memory by cp.async (1024 <= C <= 16384) --------------------------------
namespace v7 {
namespace staged {

constexpr int BLOCK = V7_STAGED_BLOCK;  // __launch_bounds__(BLOCK, 1): 65536 / 1024 = 64 registers a thread
constexpr int K = 2;                    // 16-byte chunks a thread: what 64 registers hold with weight widened
constexpr int MAX_STAGES = 8;           // row slots a group's ring has at most (wait_pending's 0..7)
static_assert(BLOCK % WARP_SIZE == 0 && BLOCK <= 1024, "V7_STAGED_BLOCK: whole warps, at most 1024 threads");
static_assert(MAX_STAGES - 1 <= 7, "wait_pending waits with at most 7 groups pending");

__shared__ float warp_dots[2][BLOCK / WARP_SIZE];  // each warp's part of its row's dot product, two buffers

// 16 bytes from global memory into shared memory at `destination` (a shared-memory address), bypassing L1
__device__ __forceinline__ void copy16(unsigned destination, const void* source) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(destination), "l"(source) : "memory");
}
// the copies this thread issued since the last commit become one group
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_group() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// wait until at most `pending` of this thread's groups are still in flight (its operand is an immediate)
__device__ __forceinline__ void wait_pending(int pending) {
    switch (pending) {
        case 0: wait_group<0>(); break;
        case 1: wait_group<1>(); break;
        case 2: wait_group<2>(); break;
        case 3: wait_group<3>(); break;
        case 4: wait_group<4>(); break;
        case 5: wait_group<5>(); break;
        case 6: wait_group<6>(); break;
        default: wait_group<7>(); break;
    }
}

// A block is `groups` row groups of G threads; thread t of a group owns chunks t and t + G of each of its
// group's rows, dealt round-robin over the grid as in the register path. ACC: dinp += (dinp staged too).
template <bool ACC>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int G, int stages) {
    extern __shared__ __align__(128) unsigned char staged_rows[];
    constexpr int TENSORS = ACC ? 3 : 2;
    const int chunks = C / 8;
    const int groups = blockDim.x / G, group = threadIdx.x / G, t = threadIdx.x - group * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps_in_group = G / WARP_SIZE, first_warp = group * warps_in_group;
    const size_t part_bytes = (size_t)G * K * 16;  // one tensor's row in a slot
    const size_t slot_bytes = TENSORS * part_bytes;
    unsigned char* ring = staged_rows + (size_t)group * stages * slot_bytes;
    const float inv_C = 1.0f / (float)C;

    uint4 packed[K];
    float w[K][8], sum[K][8];
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int c = t + j * G;
        packed[j] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(weight) + c) : make_uint4(0u, 0u, 0u, 0u);
        #pragma unroll
        for (int e = 0; e < 8; e++) {
            sum[j][e] = 0.0f;
            w[j][e] = widen(packed[j], e);
        }
    }

    const long long stride = (long long)gridDim.x * groups;
    const long long first_row = (long long)group * gridDim.x + blockIdx.x;
    // this thread's chunks of `row` into slot s, and a commit even when there is no such row: the groups
    // then count rows, so "row i has landed" is "at most stages - 1 groups pending"
    const unsigned ring_address = static_cast<unsigned>(__cvta_generic_to_shared(ring)) + t * 16;
    auto issue = [&](long long row, int s) {
        if (row < N) {
            const unsigned slot = ring_address + (unsigned)(s * slot_bytes);
            const size_t offset = (size_t)row * C * 2 + (size_t)t * 16;  // bytes
            const char* g = reinterpret_cast<const char*>(dout) + offset;
            const char* x = reinterpret_cast<const char*>(inp) + offset;
            const char* d = reinterpret_cast<const char*>(dinp) + offset;
            #pragma unroll
            for (int j = 0; j < K; j++) {
                if (t + j * G < chunks) {
                    const unsigned at = slot + j * G * 16;
                    copy16(at, g + j * G * 16);
                    copy16(at + (unsigned)part_bytes, x + j * G * 16);
                    if (ACC) copy16(at + 2 * (unsigned)part_bytes, d + j * G * 16);
                }
            }
        }
        commit();
    };
    for (int s = 0; s < stages - 1; s++) issue(first_row + s * stride, s);

    // rstd is loaded a row ahead, after the row's dot product: loaded at its row, the load was issued after
    // the row's copies had landed, and its whole latency stood between one row and the next. (Loaded at the
    // top of the row instead, r_next lives through pass 1, and sm_80 spills 4 bytes at 64 registers.)
    float r_next = first_row < N ? __ldg(rstd + first_row) : 0.0f;
    int buffer = 0;
    #pragma unroll 1
    for (int i = 0;; i++) {
        const long long row = first_row + i * stride;
        if (row >= N) break;
        const int s = i % stages;
        // the slot row i - 1 used: this thread alone read it, and used what it read, so it can be refilled
        issue(row + (stages - 1) * stride, (i + stages - 1) % stages);
        const float r = r_next;
        wait_pending(stages - 1);
        const unsigned char* slot = ring + (size_t)s * slot_bytes;
        const uint4* g_row = reinterpret_cast<const uint4*>(slot);
        const uint4* x_row = reinterpret_cast<const uint4*>(slot + part_bytes);
        const uint4* d_row = reinterpret_cast<const uint4*>(slot + 2 * part_bytes);

        float dot = 0.0f;  // pass 1: the dot product and dweight, from shared memory
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int c = t + j * G;
            if (c < chunks) {
                const uint4 g = g_row[c], x = x_row[c];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float gx = widen(g, e) * widen(x, e);
                    dot = fmaf(w[j][e], gx, dot);
                    sum[j][e] = fmaf(r, gx, sum[j][e]);
                }
            }
        }
        dot = warp_reduce_sum(dot);
        if (row + stride < N) r_next = __ldg(rstd + row + stride);
        if (warps_in_group > 1) {  // the group's warps in a fixed order, after the group's own barrier
            if (lane == 0) warp_dots[buffer][warp] = dot;
            named_barrier(1 + group, G);
            dot = 0.0f;
            for (int q = 0; q < warps_in_group; q++) dot += warp_dots[buffer][first_warp + q];
            buffer ^= 1;  // the next row writes the other buffer: one barrier a row is enough
        }
        const float scale_inp = dot * r * r * r * inv_C;
        uint4* dinp_row = reinterpret_cast<uint4*>(dinp + (size_t)row * C);
        #pragma unroll
        for (int j = 0; j < K; j++) {  // pass 2: dinp, reading the row from shared memory again
            const int c = t + j * G;
            if (c < chunks) {
                const uint4 g = g_row[c], x = x_row[c];
                uint4 d = make_uint4(0u, 0u, 0u, 0u);
                if (ACC) d = d_row[c];
                float out[8];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float v = fmaf(w[j][e] * widen(g, e), r, -widen(x, e) * scale_inp);
                    out[e] = ACC ? widen(d, e) + v : v;
                }
                __stcs(dinp_row + c, make_uint4(pack(out[0], out[1]), pack(out[2], out[3]), pack(out[4], out[5]),
                                                pack(out[6], out[7])));
            }
        }
    }
    wait_pending(0);  // the empty groups of the last rows: the ring is quiet before it is reused

    // the groups' sums added in group order, one partial row per block, staged where the ring was
    // (the plan gives the ring at least groups * C * 4 bytes). The thread's place is read again here, not
    // kept from the start: at 64 registers a thread, keeping one more address across the loop spills it.
    unsigned tid, threads;
    asm volatile("mov.u32 %0, %%tid.x;\n\tmov.u32 %1, %%ntid.x;" : "=r"(tid), "=r"(threads));
    const int me = (int)tid / G, col = (int)tid - me * G, all_groups = (int)threads / G;
    __syncthreads();
    float* group_sums = reinterpret_cast<float*>(staged_rows);
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int c = col + j * G;
        if (c < chunks) {
            float4* at = reinterpret_cast<float4*>(group_sums + (size_t)me * C + (size_t)c * 8);
            at[0] = make_float4(sum[j][0], sum[j][1], sum[j][2], sum[j][3]);
            at[1] = make_float4(sum[j][4], sum[j][5], sum[j][6], sum[j][7]);
        }
    }
    __syncthreads();
    float4* mine = reinterpret_cast<float4*>(partials + (size_t)blockIdx.x * C);
    const float4* sums4 = reinterpret_cast<const float4*>(group_sums);
    for (int q = (int)tid; q < C / 4; q += (int)threads) {
        float4 a = sums4[q];
        for (int i = 1; i < all_groups; i++) add4(a, sums4[(size_t)i * (C / 4) + q]);
        __stcg(mine + q, a);
    }
}

}  // namespace staged
}  // namespace v7

extern "C" __global__ void __launch_bounds__(v7::staged::BLOCK, 1)
rmsnorm_backward_v7_staged(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                           const __nv_bfloat16* weight, const float* rstd, int N, int C, int G, int stages,
                           int overwrite) {
    if (!overwrite) v7::staged::backward<true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
    else v7::staged::backward<false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
}


// ---- 10. Rows wider than one block: split over a thread-block cluster (sm_90 and newer) ----------------
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
namespace v7 {
namespace wide {

constexpr int K = 4;           // 16-byte chunks a thread, as in the widest row one block holds
constexpr int MAX_STAGES = 8;  // row slots in the ring (the plan fills what shared memory has, at least 2)
constexpr int MAX_CLUSTER = 4;

// Declared here, once, not in backward: each template instance would get its own copy.
__shared__ unsigned long long landed[MAX_STAGES];  // one mbarrier per row slot: its copies' bytes have landed
__shared__ float warp_dots[MAX_BLOCK / WARP_SIZE];  // each warp's part of the row's dot product
__shared__ float block_dots[2][MAX_CLUSTER];        // each block's part, written into every block of the cluster

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}
// The one arrival of a slot's phase, saying how many bytes its copies will bring.
__device__ __forceinline__ void mbarrier_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred done;\n"
        "WAIT:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
        "@!done bra WAIT;\n}" ::"r"(shared_address(bar)),
        "r"(parity)
        : "memory");
}
// `bytes` (a multiple of 16) from global memory into this block's shared memory by the copy engine;
// the mbarrier counts them as they land.
__device__ __forceinline__ void bulk_copy(void* destination, const void* source, unsigned bytes,
                                          unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_address(destination)),
                 "l"(source), "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster; what was written before is seen after (release / acquire).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// v into the same shared-memory place of block `rank` of this cluster (distributed shared memory)
__device__ __forceinline__ void store_in_block(float* here, unsigned rank, float v) {
    unsigned there;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(there) : "r"(shared_address(here)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(there), "f"(v) : "memory");
}

// CL blocks a row; block `rank` owns chunks [rank * per_rank, +per_rank) of every row (the last rank may
// own fewer). Cluster c takes rows c, c + clusters, ...; thread t holds chunks t, t + G, t + 2G, t + 3G of
// its block's part (G = blockDim.x), their weight and their dweight sums, in registers.
template <int CL, bool ACCUMULATE>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int stages) {
    extern __shared__ float4 ring4[];  // `stages` slots: a row's dout, inp (and dinp) parts, one after another
    unsigned char* ring = reinterpret_cast<unsigned char*>(ring4);
    constexpr int TENSORS = ACCUMULATE ? 3 : 2;
    const int rank = (int)cluster_rank();
    const int cluster = blockIdx.x / CL, clusters = gridDim.x / CL;
    const int chunks = C / 8;
    const int per_rank = ceil_div(chunks, CL);
    const int first = rank * per_rank;
    const int mine = min(per_rank, chunks - first);
    const int G = blockDim.x, t = threadIdx.x, lane = t % WARP_SIZE;
    const size_t part_bytes = (size_t)per_rank * 16;
    const size_t slot_bytes = TENSORS * part_bytes;
    const float inv_C = 1.0f / (float)C;

    if (t == 0) {
        for (int s = 0; s < stages; s++) mbarrier_init(&landed[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    const uint4* weight4 = reinterpret_cast<const uint4*>(weight) + first;
    uint4 w[K];
    float sum[K][8];
    #pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = t + k * G;
        w[k] = c < mine ? __ldg(weight4 + c) : make_uint4(0u, 0u, 0u, 0u);
        #pragma unroll
        for (int e = 0; e < 8; e++) sum[k][e] = 0.0f;
    }
    cluster_sync();  // the mbarriers are ready, and every block of the cluster has started: its shared memory exists

    auto issue = [&](long long row, int s) {  // thread 0: the row's copies into slot s
        mbarrier_expect(&landed[s], (unsigned)(TENSORS * mine * 16));
        unsigned char* slot = ring + s * slot_bytes;
        const size_t offset = (size_t)row * C + (size_t)first * 8;
        bulk_copy(slot, dout + offset, (unsigned)mine * 16, &landed[s]);
        bulk_copy(slot + part_bytes, inp + offset, (unsigned)mine * 16, &landed[s]);
        if (ACCUMULATE) bulk_copy(slot + 2 * part_bytes, dinp + offset, (unsigned)mine * 16, &landed[s]);
    };
    if (t == 0) {
        for (int s = 0; s < stages; s++) {
            const long long row = cluster + (long long)s * clusters;
            if (row < N) issue(row, s);
        }
    }
    float r_next = cluster < N ? __ldg(rstd + cluster) : 0.0f;
    int buffer = 0;  // block_dots alternate, so a peer's store for the next row cannot meet a read of this one
    #pragma unroll 1
    for (long long j = 0;; j++) {
        const long long row = cluster + j * clusters;
        if (row >= N) break;  // the same for every block of the cluster
        const int s = (int)(j % stages);
        const float r = r_next;
        if (row + clusters < N) r_next = __ldg(rstd + row + clusters);
        mbarrier_wait(&landed[s], (unsigned)((j / stages) & 1));
        const uint4* g_part = reinterpret_cast<const uint4*>(ring + s * slot_bytes);
        const uint4* x_part = reinterpret_cast<const uint4*>(ring + s * slot_bytes + part_bytes);
        const uint4* d_part = reinterpret_cast<const uint4*>(ring + s * slot_bytes + 2 * part_bytes);

        float dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = t + k * G;
            if (c < mine) {
                const uint4 g = g_part[c], x = x_part[c];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float dout_e = widen(g, e), inp_e = widen(x, e);
                    dot += widen(w[k], e) * dout_e * inp_e;
                    sum[k][e] += inp_e * r * dout_e;
                }
            }
        }
        dot = warp_reduce_sum(dot);
        if (lane == 0) warp_dots[t / WARP_SIZE] = dot;
        __syncthreads();
        if (t == 0) {  // the block's part in warp order, sent to every block of the cluster
            float part = 0.0f;
            for (int i = 0; i < G / WARP_SIZE; i++) part += warp_dots[i];
            #pragma unroll
            for (int q = 0; q < CL; q++) store_in_block(&block_dots[buffer][rank], q, part);
        }
        cluster_sync();
        dot = 0.0f;
        #pragma unroll
        for (int q = 0; q < CL; q++) dot += block_dots[buffer][q];  // in rank order: the same sum in every block
        buffer ^= 1;

        const float scale_inp = dot * r * r * r * inv_C;
        uint4* dinp_part = reinterpret_cast<uint4*>(dinp + (size_t)row * C) + first;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = t + k * G;
            if (c < mine) {
                const uint4 g = g_part[c], x = x_part[c];
                uint4 d = make_uint4(0u, 0u, 0u, 0u);
                if (ACCUMULATE) d = d_part[c];
                float out[8];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float v = widen(w[k], e) * widen(g, e) * r - widen(x, e) * scale_inp;
                    out[e] = ACCUMULATE ? widen(d, e) + v : v;
                }
                __stcs(dinp_part + c, make_uint4(pack(out[0], out[1]), pack(out[2], out[3]), pack(out[4], out[5]),
                                                 pack(out[6], out[7])));
            }
        }
        __syncthreads();  // slot s and warp_dots are read: thread 0 refills the slot with the row `stages` ahead
        if (t == 0 && row + (long long)stages * clusters < N) issue(row + (long long)stages * clusters, s);
    }

    // this block's columns of the cluster's partial row: the sums straight from registers
    float4* out = reinterpret_cast<float4*>(partials + (size_t)cluster * C + (size_t)first * 8);
    #pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = t + k * G;
        if (c < mine) {
            __stcg(out + 2 * c, make_float4(sum[k][0], sum[k][1], sum[k][2], sum[k][3]));
            __stcg(out + 2 * c + 1, make_float4(sum[k][4], sum[k][5], sum[k][6], sum[k][7]));
        }
    }
}

}  // namespace wide
}  // namespace v7

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7_wide2(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                          const __nv_bfloat16* weight, const float* rstd, int N, int C, int stages, int overwrite) {
    if (overwrite) v7::wide::backward<2, false>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
    else v7::wide::backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
}
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7_wide4(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                          const __nv_bfloat16* weight, const float* rstd, int N, int C, int stages, int overwrite) {
    if (overwrite) v7::wide::backward<4, false>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
    else v7::wide::backward<4, true>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
}
#endif  // sm_90 and newer
