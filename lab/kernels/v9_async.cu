// lab/kernels/v9_async.cu: an experiment past v7 (issue 16), not a rung of the course.
//
// v8 staged rows through shared memory with one bulk copy per row and tensor, and lost to v7 where rows
// are short (C <= 2048). This variant stages them with per-thread asynchronous copies (cp.async, 16 bytes
// each, LDGSTS in the SASS) instead: each thread copies exactly the chunks it will later read, so
// `cp.async.wait_group` alone says they have landed. No mbarrier, no leader thread, no barrier between
// the warps of a row group except the dot product's exchange (and none at all when a row is one warp).
//  1. Each row group owns a ring of `stages` row slots; stages - 1 rows are in flight while one is worked
//     on, in both modes, whatever the registers hold.
//  2. The dweight sums (K x 8 fp32) and weight (K x 4 words) live in registers; the row is read from shared
//     memory twice (pass 1 and pass 2), so only one chunk's values are in registers at a time.
//  3. Pass 1 multiplies dout * inp once per value and uses it for both the dot product and dweight.
//  4. Blocks of V9_BLOCK threads, one block an SM (__launch_bounds__(V9_BLOCK, 1)): the registers a thread
//     has are 65536 / V9_BLOCK, so a larger block is more warps with fewer chunks each.
//  5. One partial row per block (the groups' sums added in group order), summed by v7's reduce_dweight_v7.
#include "frozen/v7_fast.cu"  // v7 as this experiment builds on it, frozen (lab/README.md)

#if !defined(V9_BLOCK) || !defined(V9_MAX_K)
#error "V9_BLOCK and V9_MAX_K must be defined by the build (lab/v9_async.py)"
#endif

namespace v9 {

constexpr int BLOCK = V9_BLOCK;
constexpr int WARPS = BLOCK / WARP_SIZE;
constexpr int MAX_K = V9_MAX_K;  // the largest K built: more chunks a thread than its registers hold would spill
#ifndef V9_WEIGHT_F32
#define V9_WEIGHT_F32 0
#endif
// weight held widened (K x 8 fp32 registers, no widening in the row loop) or packed (K x 4 words)
constexpr bool WEIGHT_F32 = V9_WEIGHT_F32 != 0;
#ifndef V9_RSTD
#define V9_RSTD 1
#endif
// where row i's rstd is loaded: 0 at the row, just before the wait (v7 at ac0ce65); 1 a row ahead, at the
// top of row i - 1 (this experiment as first measured); 2 a row ahead, after row i - 1's dot product
// (v7 from d502316)
constexpr int RSTD_AT = V9_RSTD;
static_assert(RSTD_AT >= 0 && RSTD_AT <= 2, "V9_RSTD is 0, 1 or 2");

#ifdef V9_STAMPS
// %globaltimer (ns) per block, thread 0's view (lab/v9_stamps.py): [0] entry, [1] its first row's copies
// landed, [2] the row loop done, [3] the partial row written; the final sum's blocks: entry and exit
__device__ unsigned long long v9_stamps[V9_STAMPS][4];
__device__ unsigned long long v9_reduce_stamps[V9_STAMPS][2];
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__shared__ unsigned long long first_row_ns;
#define V9_STAMP(k) \
    do { \
        if (threadIdx.x == 0 && blockIdx.x < V9_STAMPS) v9::v9_stamps[blockIdx.x][k] = v9::global_ns(); \
    } while (0)
#else
#define V9_STAMP(k) \
    do { \
    } while (0)
#endif

__shared__ float warp_dots[2][WARPS];  // each warp's part of its row's dot product (two buffers alternate)

// The copy helpers are v7's (kernels/v7_fast.cu, item 11, which took this experiment's kernel as its staged
// path): cp.async.cg of 16 bytes, commit, and a wait for at most `pending` groups in flight.
using v7::staged::commit;
using v7::staged::copy16;
using v7::staged::wait_pending;
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// K: 16-byte chunks a thread; ACC: dinp += (dinp is staged too). A block is groups row groups of G
// threads; thread t of a group owns chunks t, t + G, ..., t + (K-1) G of each of its group's rows.
template <int K, bool ACC>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int G, int stages) {
    V9_STAMP(0);
    extern __shared__ __align__(128) unsigned char staged[];
    constexpr int TENSORS = ACC ? 3 : 2;
    const int chunks = C / 8;
    const int groups = blockDim.x / G, group = threadIdx.x / G, t = threadIdx.x - group * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps_in_group = G / WARP_SIZE, first_warp = group * warps_in_group;
    const size_t part_bytes = (size_t)G * K * 16;  // one tensor's row in a slot
    const size_t slot_bytes = TENSORS * part_bytes;
    unsigned char* ring = staged + (size_t)group * stages * slot_bytes;
    const float inv_C = 1.0f / (float)C;

    const uint4* weight4 = reinterpret_cast<const uint4*>(weight);
    uint4 w[K];
    float wf[WEIGHT_F32 ? K : 1][8];
    float sum[K][8];
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int c = t + j * G;
        w[j] = c < chunks ? __ldg(weight4 + c) : make_uint4(0u, 0u, 0u, 0u);
        #pragma unroll
        for (int e = 0; e < 8; e++) {
            sum[j][e] = 0.0f;
            if (WEIGHT_F32) wf[WEIGHT_F32 ? j : 0][e] = v7::widen(w[j], e);
        }
    }
    auto weight_at = [&](int j, int e) { return WEIGHT_F32 ? wf[WEIGHT_F32 ? j : 0][e] : v7::widen(w[j], e); };

    // the group's i-th row, dealt round-robin over the grid as in v7
    const long long stride = (long long)gridDim.x * groups;
    const long long row0 = (long long)group * gridDim.x + blockIdx.x;
    const unsigned ring_address = shared_address(ring) + t * 16;
    auto issue = [&](long long row, int s) {  // this thread's chunks of the row into slot s
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
        commit();  // a group, even empty, for every row index: wait_group counts rows
    };
    for (int s = 0; s < stages - 1; s++) issue(row0 + s * stride, s);

    float r_next = RSTD_AT != 0 && row0 < N ? __ldg(rstd + row0) : 0.0f;
    int buffer = 0;
    #pragma unroll 1
    for (long long i = 0;; i++) {
        const long long row = row0 + i * stride;
        if (row >= N) break;
        const int s = (int)(i % stages);
        // the slot of row i - 1 was read by this thread only, and its values used: refill it
        issue(row + (long long)(stages - 1) * stride, (int)((i + stages - 1) % stages));
        const float r = RSTD_AT == 0 ? __ldg(rstd + row) : r_next;
        if (RSTD_AT == 1 && row + stride < N) r_next = __ldg(rstd + row + stride);
        wait_pending(stages - 1);  // row i's copies (this thread's) have landed
#ifdef V9_STAMPS
        if (i == 0 && threadIdx.x == 0) v9::first_row_ns = v9::global_ns();  // (to shared: no spill in the loop)
#endif
        const unsigned char* slot = ring + (size_t)s * slot_bytes;
        const uint4* g_row = reinterpret_cast<const uint4*>(slot);
        const uint4* x_row = reinterpret_cast<const uint4*>(slot + part_bytes);
        const uint4* d_row = reinterpret_cast<const uint4*>(slot + 2 * part_bytes);

        float dot = 0.0f;
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int c = t + j * G;
            if (c < chunks) {
                const uint4 g = g_row[c], x = x_row[c];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float gx = v7::widen(g, e) * v7::widen(x, e);
                    dot = fmaf(weight_at(j, e), gx, dot);
                    sum[j][e] = fmaf(r, gx, sum[j][e]);
                }
            }
        }
        dot = warp_reduce_sum(dot);
        if (RSTD_AT == 2 && row + stride < N) r_next = __ldg(rstd + row + stride);
        if (warps_in_group > 1) {
            if (lane == 0) warp_dots[buffer][warp] = dot;
            v7::named_barrier(1 + group, G);
            dot = 0.0f;
            for (int q = 0; q < warps_in_group; q++) dot += warp_dots[buffer][first_warp + q];
            buffer ^= 1;
        }
        const float scale_inp = dot * r * r * r * inv_C;
        uint4* dinp_row = reinterpret_cast<uint4*>(dinp + (size_t)row * C);
        #pragma unroll
        for (int j = 0; j < K; j++) {
            const int c = t + j * G;
            if (c < chunks) {
                const uint4 g = g_row[c], x = x_row[c];
                uint4 d = make_uint4(0u, 0u, 0u, 0u);
                if (ACC) d = d_row[c];
                float out[8];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float v = fmaf(weight_at(j, e) * v7::widen(g, e), r, -v7::widen(x, e) * scale_inp);
                    out[e] = ACC ? v7::widen(d, e) + v : v;
                }
                __stcs(dinp_row + c, make_uint4(v7::pack(out[0], out[1]), v7::pack(out[2], out[3]),
                                                v7::pack(out[4], out[5]), v7::pack(out[6], out[7])));
            }
        }
    }
    wait_pending(0);  // the empty groups at the end; nothing of the ring is read after this
    V9_STAMP(2);

    // the groups' sums, added in group order, one partial row per block; the ring is free to hold them
    __syncthreads();
    float* group_sums = reinterpret_cast<float*>(staged);  // groups x C fp32
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int c = t + j * G;
        if (c < chunks) {
            float4* at = reinterpret_cast<float4*>(group_sums + (size_t)group * C + (size_t)c * 8);
            at[0] = make_float4(sum[j][0], sum[j][1], sum[j][2], sum[j][3]);
            at[1] = make_float4(sum[j][4], sum[j][5], sum[j][6], sum[j][7]);
        }
    }
    __syncthreads();
    float4* mine = reinterpret_cast<float4*>(partials + (size_t)blockIdx.x * C);
    const float4* sums4 = reinterpret_cast<const float4*>(group_sums);
    for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {
        float4 a = sums4[q];
        for (int i = 1; i < groups; i++) v7::add4(a, sums4[(size_t)i * (C / 4) + q]);
        __stcg(mine + q, a);
    }
    V9_STAMP(3);
#ifdef V9_STAMPS
    if (threadIdx.x == 0 && blockIdx.x < V9_STAMPS) v9_stamps[blockIdx.x][1] = first_row_ns;
#endif
}

}  // namespace v9

#ifdef V9_STAMPS
// v7's final sum, stamped at entry and, after every thread is done, at exit
extern "C" __global__ void __launch_bounds__(v7::MAX_BLOCK) reduce_dweight_v9(__nv_bfloat16* dweight,
                                                                               const float* partials, int parts,
                                                                               int C, int slices) {
    if (threadIdx.x == 0 && blockIdx.x < V9_STAMPS) v9::v9_reduce_stamps[blockIdx.x][0] = v9::global_ns();
    __shared__ float4 red[v7::MAX_BLOCK];
    v7::reduce_slice(dweight, partials, parts, C, blockIdx.x, slices, red);
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x < V9_STAMPS) v9::v9_reduce_stamps[blockIdx.x][1] = v9::global_ns();
}
#endif

extern "C" __global__ void __launch_bounds__(v9::BLOCK, 1)
v9_async(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
         const __nv_bfloat16* weight, const float* rstd, int N, int C, int G, int K, int stages, int accumulate) {
    if (accumulate) {
        switch (K) {
            case 1: return v9::backward<1, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 2: if (2 <= v9::MAX_K) return v9::backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 3: if (3 <= v9::MAX_K) return v9::backward<3, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 4: if (4 <= v9::MAX_K) return v9::backward<4, true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
        }
    } else {
        switch (K) {
            case 1: return v9::backward<1, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 2: if (2 <= v9::MAX_K) return v9::backward<2, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 3: if (3 <= v9::MAX_K) return v9::backward<3, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            case 4: if (4 <= v9::MAX_K) return v9::backward<4, false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
        }
    }
    __trap();  // the plan passes K = 1..4
}
