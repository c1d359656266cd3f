// v7_fast: past the seed, toward the copy bandwidth. Three kernel families share the helpers below:
//  - rmsnorm_backward_v7 (this file): a row held in registers, K 16-byte chunks a thread, one row
//    at a time per row group of G threads, rows dealt round-robin over the whole grid;
//  - rmsnorm_backward_v7_staged (v7_staged.cuh): rows of 1024 <= C <= 16384 staged in shared
//    memory by cp.async, a ring of row slots per row group;
//  - rmsnorm_backward_v7_wide2 / _wide4 (v7_wide.cuh, sm_90 and newer): a row wider than one
//    block's registers hold, split over a thread-block cluster, its rows brought in by bulk copies.
// Each writes one fp32 partial row of dweight per block (or cluster); reduce_dweight_v7 (this file)
// sums them in a fixed order. kernels/NOTES.md lists what each design choice is for, numbered 1-11
// as in the comments here, with what was predicted and measured.
#include "common.cuh"

// Numbers the Python plan (rmsnorm_lessons/core/ladder/v7_fast.py, DEFINES) must agree on, passed
// as -D flags.
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

// every main kernel is compiled for blocks of up to 512
constexpr int MAX_BLOCK = V7_MAX_BLOCK;
// final sum: a warp reads 32 float4 = 512 B of a partial row
constexpr int QUADS_PER_PASS = V7_QUADS_PER_PASS;
// final sum: 16 warps x 9 cover 132 partial rows in one round
constexpr int REDUCE_BATCH = V7_REDUCE_BATCH;
static_assert(MAX_BLOCK % WARP_SIZE == 0 && MAX_BLOCK <= 1024,
              "V7_MAX_BLOCK: whole warps, at most 1024 threads");
static_assert(QUADS_PER_PASS == WARP_SIZE,
              "V7_QUADS_PER_PASS: reduce_slice gives each lane one float4 per pass");
static_assert(REDUCE_BATCH >= 1, "V7_REDUCE_BATCH: at least one load in flight");

// Wait at barrier `id` (1..15; 0 is __syncthreads) until `threads` threads (a multiple of 32)
// arrive. barrier.sync, not bar.sync (= barrier.sync.aligned): it does not require the warp to be
// converged.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}


__device__ __forceinline__ void add4(float4& s, const float4 v) {
    s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
}

// Eight bf16 values as four 32-bit words, as a 128-bit load leaves them: value 2i is the low half
// of word i, value 2i+1 the high half. Widening to fp32 is a shift or a mask (bf16 is fp32's top
// half). Kept as words, not as __nv_bfloat16[8], so the compiler never splits them into 8
// registers.
__device__ __forceinline__ unsigned word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ float widen(const uint4& v, int k) {  // k is a compile-time constant
    const unsigned u = word(v, k / 2);
    return __uint_as_float(k % 2 == 0 ? u << 16 : u & 0xffff0000u);
}
// round to nearest even, as __float2bfloat16
__device__ __forceinline__ unsigned pack(float low, float high) {
    __nv_bfloat162 p = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<unsigned*>(&p);
}

// Pass 1 over chunk c of a row staged in shared memory (v7_staged.cuh, v7_wide.cuh), if c < chunks:
// add(e, dout, inp) for each of its 8 channels e, the values widened to fp32.
template <class Add>
__device__ __forceinline__ void for_each_value(const uint4* g_row, const uint4* x_row, int c,
                                               int chunks, Add add) {
    if (c < chunks) {
        const uint4 g = g_row[c], x = x_row[c];
        #pragma unroll
        for (int e = 0; e < 8; e++) add(e, widen(g, e), widen(x, e));
    }
}

// Pass 2 of a row staged in shared memory (v7_staged.cuh, v7_wide.cuh) for chunk c: dinp[c] =
// value(e, g, x) for its 8 channels e, plus dinp's own where ACC (dinp +=), one streaming store.
template <bool ACC, class Value>
__device__ __forceinline__ void store_dinp_chunk(uint4* dinp, const uint4* g_row,
                                                 const uint4* x_row, const uint4* d_row, int c,
                                                 Value value) {
    const uint4 g = g_row[c], x = x_row[c];
    uint4 d = make_uint4(0u, 0u, 0u, 0u);
    if (ACC) d = d_row[c];
    float out[8];
    #pragma unroll
    for (int e = 0; e < 8; e++) {
        const float v = value(e, g, x);
        out[e] = ACC ? widen(d, e) + v : v;
    }
    __stcs(dinp + c, make_uint4(pack(out[0], out[1]), pack(out[2], out[3]), pack(out[4], out[5]),
                                pack(out[6], out[7])));
}

// An empty asm that claims to change v, so the compiler cannot keep v's values widened to fp32 (8
// registers per chunk instead of 4) across it: weight's out of the row loop, dout's and inp's
// across the dot product's exchange. It emits no instruction; without it K = 4 spills (ptxas -v).
__device__ __forceinline__ void opaque(uint4& v) {
    asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}

// Sum the blocks' partials for quads [begin, end) of slice `slice` and add them into dweight.
// `red` holds blockDim.x float4.
__device__ void reduce_slice(__nv_bfloat16* dweight, const float* partials, int parts, int C,
                             int slice, int slices, float4* red) {
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
        // this warp's partial rows b = warp, warp + warps, ...: BATCH loads in flight, then added
        // in row order
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (mine) {
            const float4* column = reinterpret_cast<const float4*>(partials) + q;
            for (int first = warp; first < parts; first += REDUCE_BATCH * warps) {
                float4 v[REDUCE_BATCH];
                #pragma unroll
                for (int i = 0; i < REDUCE_BATCH; i++) {
                    const int b = first + i * warps;
                    v[i] = b < parts ? __ldcg(column + (size_t)b * quads)
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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

// Where a thread works. A block is `groups` row groups of G threads (G a multiple of 32, blockDim.x
// a multiple of G). This thread is thread t of row group `group`, lane `lane` of its warp; its
// columns are the 16-byte chunks t, t + G, ..., t + (K-1) G of every row its group is dealt (8
// channels each; a row has `chunks` of them).
struct Place {
    int G, groups, group, t, lane;
    // the group's warps, and the first of their slots in the exchange
    int warps_in_group, first_slot;
    int chunks;
    size_t slice;  // the group's dweight sums start at float4 `slice` of the dynamic shared memory
    // this thread's chunk j
    __device__ __forceinline__ int chunk(int j) const { return t + j * G; }
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

// This thread's dweight sums for one of its chunks: `half` 0 holds the chunk's channels 0..3,
// `half` 1 channels 4..7. They live in the group's slice of shared memory, which only this thread
// touches until the end (no barrier), at slice + half * chunks + chunk, so a warp's accesses are
// contiguous. Registers would do too, but 8 fp32 per chunk are what pushes K = 4 into spilling.
// (Indexed from the shared array itself, not through a float4* slice pointer: with a pointer the
// compiler hoists the 2K addresses out of the row loop and K = 4 spills.)
__device__ __forceinline__ float4& sums(const Place& p, int half, int chunk) {
    extern __shared__ float4 shared4[];
    return shared4[p.slice + (half * p.chunks + chunk)];
}

// Before the first row: this thread's dweight sums start at zero and, unless it is reread from L1
// in each pass, weight's K chunks go into registers: loaded once per kernel, not once per row.
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
__device__ __forceinline__ void load_row(const Place& p, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const float* rstd, int C,
                                         long long row, uint4 (&g)[K], uint4 (&x)[K], float& r) {
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

// A row's dinp (zeros when overwriting). It is needed only after the dot product: its loads fly
// during pass 1 and the exchange.
template <int K>
__device__ __forceinline__ void load_dinp(const Place& p, const uint4* dinp_row, bool overwrite,
                                          uint4 (&d)[K]) {
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        d[j] = make_uint4(0u, 0u, 0u, 0u);
        if (!overwrite && chunk < p.chunks) d[j] = __ldcs(dinp_row + chunk);
    }
}

// Pass 1 over the registers: this thread's part of the row's sum of weight * dout * inp (returned),
// and dweight += norm * dout (norm = inp * rstd) into its sums.
template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ float row_pass(const Place& p, const uint4* weight4, const uint4 (&w)[K],
                                          const uint4 (&g)[K], const uint4 (&x)[K], float r) {
    float dot = 0.0f;
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (chunk < p.chunks) { a = sums(p, 0, chunk); b = sums(p, 1, chunk); }
        uint4 wj = w[j];
        if (!WEIGHT_IN_REGISTERS && chunk < p.chunks) wj = __ldg(weight4 + chunk);
        float sum[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            const float dout_k = widen(g[j], k), inp_k = widen(x[j], k);
            dot += widen(wj, k) * dout_k * inp_k;
            sum[k] += inp_k * r * dout_k;
        }
        a = make_float4(sum[0], sum[1], sum[2], sum[3]);
        b = make_float4(sum[4], sum[5], sum[6], sum[7]);
        if (chunk < p.chunks) { sums(p, 0, chunk) = a; sums(p, 1, chunk) = b; }
    }
    return dot;
}

// The row's dot product from the threads' parts: lanes (a warp butterfly), then, when the row group
// has more than one warp, the group's warps in a fixed order, through `slots` in shared memory
// after a named barrier (bar.sync id, G) that only the group's warps wait on. Its two slot buffers
// alternate, so one barrier per row is enough.
__device__ __forceinline__ float exchange(const Place& p, float dot,
                                          float (&slots)[2][MAX_BLOCK / WARP_SIZE],
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

// Pass 2: dinp = (or +=) weight * dout * rstd - inp * scale_inp, 16 bytes a store. dout, inp and
// weight are widened again rather than kept as 24 fp32 registers per chunk across the exchange
// (opaque hides that they are the same values).
template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ void write_dinp(const Place& p, uint4* dinp_row, const uint4* weight4,
                                           const uint4 (&w)[K], uint4 (&g)[K], uint4 (&x)[K],
                                           const uint4 (&d)[K], float r, float scale_inp,
                                           bool overwrite) {
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

// After the last row, the block's dweight: the groups' slices added in group order, written once as
// C fp32 partials, row blockIdx.x of `partials`.
__device__ __forceinline__ void block_partials(const Place& p, const float4* shared4,
                                               float* partials, int C) {
    __syncthreads();
    float4* mine = reinterpret_cast<float4*>(partials + (size_t)blockIdx.x * C);
    for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {  // q: columns 4q .. 4q + 3
        const int at = (q % 2) * p.chunks + q / 2;
        float4 s = shared4[at];
        for (int i = 1; i < p.groups; i++) add4(s, shared4[(size_t)i * (C / 4) + at]);
        __stcg(mine + q, s);
    }
}

// The main kernel, for K chunks of 8 channels per thread. G = threads per row group (multiple of
// 32, blockDim.x a multiple of G, at most 15 groups per block when G > 32). PREFETCH: the next
// row's dout and inp are loaded while this row is finished.
template <int K, bool PREFETCH>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials,
                                         const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                         const __nv_bfloat16* weight, const float* rstd, int N,
                                         int C, int G, bool overwrite) {
    extern __shared__ float4 shared4[];  // the groups' dweight sums (see sums)
    __shared__ float slots[2][MAX_BLOCK / WARP_SIZE];  // each warp's part of the row's dot product
    // else from L1 in each pass: registers for the next row
    constexpr bool WEIGHT_IN_REGISTERS = !PREFETCH;

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
    // one row (with PREFETCH, also the next row's dout and inp) in registers at a time
    #pragma unroll 1
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
            // widen weight here, in every row (see opaque)
            for (int j = 0; j < K; j++) opaque(w[j]);
        }

        float dot = row_pass<K, WEIGHT_IN_REGISTERS>(p, weight4, w, g, x, r);
        dot = exchange(p, dot, slots, buffer);
        // dinp = rstd * (weight * dout - norm * mean(dnorm * norm)), with norm = inp * rstd and
        // mean(dnorm * norm) = dot * rstd / C, so the inp term is inp * dot * rstd^3 / C
        const float scale_inp = dot * r * r * r * inv_C;
        write_dinp<K, WEIGHT_IN_REGISTERS>(p, dinp_row, weight4, w, g, x, d, r, scale_inp,
                                           overwrite);

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

// One entry point; K (chunks per thread) and prefetch are chosen by the plan from C and the mode
// and switched on here. Registers are allocated for the largest case (K = 4, or K = 2 holding two
// rows: about 128; __launch_bounds__(512, 1) allows exactly that): one 512-thread block per SM, the
// course's build. (Other launch bounds, and weight reread from L1, were measured by
// lab/v7_explore.py: results/NOTES.md.)
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                    const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                    int N, int C, int G, int K, int prefetch, int overwrite) {
    const bool ow = overwrite != 0;
    if (prefetch) {
        if (K == 2) {
            return v7::backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, ow);
        }
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

// The final sum: block j adds slice j of `slices` of the columns of the `parts` partial rows into
// dweight. Launched with the main kernel's block size (MAX_BLOCK), so the order of every sum is
// fixed.
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK)
reduce_dweight_v7(__nv_bfloat16* dweight, const float* partials, int parts, int C, int slices) {
    __shared__ float4 red[v7::MAX_BLOCK];
    v7::reduce_slice(dweight, partials, parts, C, blockIdx.x, slices, red);
}

#include "v7_staged.cuh"
#include "v7_wide.cuh"
