// lab/kernels/v8_tma.cu: an experiment past v7 (issue 16), not a rung of the course yet.
//
// What changes against v7, and why (results/NOTES.md has the prediction):
//  1. The rows come in through shared memory, not registers: each row group's first thread issues one
//     bulk copy (cp.async.bulk, the TMA's 1-D form) per tensor of the group's next rows into the group's
//     ring of `stages` row slots, and an mbarrier per slot says when its bytes have landed. Up to
//     stages - 1 rows a group are in flight while one is worked on, whatever the registers hold, in both
//     modes (v7: K * 48 bytes per thread, and the next row only in accumulate mode at 1024 <= C <= 8192).
//     (A first version shared one ring of tiles among the block's groups, refilled after a __syncthreads
//     per tile: results/NOTES.md has why it was slower.)
//  2. A thread's dweight sums live in registers (K * 8 fp32): the rows no longer do.
//  3. A row wider than one block's 512 threads x 4 chunks (C > 16384) is split across a thread-block
//     cluster of CL blocks: each block owns a contiguous range of the row's chunks, and the row's dot
//     product is added over the cluster through distributed shared memory with one cluster barrier per
//     row. A cluster's blocks are resident together by construction, so no block waits on one that may
//     not have started (the co-tenant rule of v7 holds).
//  4. One partial row of C fp32 per cluster (v7: per block), summed by v7's reduce_dweight_v7.
#include "frozen/v7_fast.cu"  // v7 as this experiment builds on it, frozen (lab/README.md)

namespace v8 {

constexpr int BLOCK = 512;
constexpr int MAX_STAGES = 8;
constexpr int MAX_CLUSTER = 8;
constexpr int MAX_GROUPS = 16;  // row groups a block: 16 warps of one, or up to 15 named barriers

// Declared once here, not in backward: each of its template instances would get its own copy.
__shared__ unsigned long long landed[MAX_GROUPS * MAX_STAGES];  // one mbarrier per row slot
__shared__ float slots[BLOCK / WARP_SIZE];                     // each warp's part of its row's dot product
__shared__ float cluster_slots[2][MAX_CLUSTER];                // each block's part, in every block of the cluster

// The copy, mbarrier and cluster helpers are v7's (kernels/v7_fast.cu, item 10, which took them from here);
// only the evict-first copy of the first run stays this file's own.
using v7::wide::cluster_rank;
using v7::wide::cluster_sync;
using v7::wide::mbarrier_expect;
using v7::wide::mbarrier_init;
using v7::wide::mbarrier_wait;
using v7::wide::shared_address;
using v7::wide::store_in_block;

template <bool EVICT_FIRST>
__device__ __forceinline__ void bulk_copy(void* destination, const void* source, unsigned bytes,
                                          unsigned long long* bar) {
    if (!EVICT_FIRST) return v7::wide::bulk_copy(destination, source, bytes, bar);
    asm volatile(
        "{\n\t.reg .b64 policy;\n\t"
        "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
        "policy;\n}" ::"r"(shared_address(destination)),
        "l"(source), "r"(bytes), "r"(shared_address(bar))
        : "memory");
}

// K: 16-byte chunks per thread; ACC: dinp += (dinp staged too); CL: blocks per cluster (one row split
// over them); EVICT_FIRST: the copies ask L2 to evict the rows first.
// Each row group owns a ring of `stages` row slots and one mbarrier per slot: its first thread issues the
// copies of the group's next rows, the group waits on the slot of the row it works on, and after the
// row the group's own barrier (not the block's) frees the slot for the row `stages` ahead. The groups of
// a block never wait for each other, so one group's gaps (its dot product, its stores) are filled by the
// others' copies in flight.
template <int K, bool ACC, int CL, bool EVICT_FIRST>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int G, int stages) {
    extern __shared__ __align__(128) unsigned char staged[];
    constexpr int TENSORS = ACC ? 3 : 2;  // staged per row: dout, inp (, dinp)

    const int rank = CL > 1 ? (int)cluster_rank() : 0;
    const int cluster = blockIdx.x / CL, clusters = gridDim.x / CL;
    const int chunks = C / 8;
    const int per_rank = ceil_div(chunks, CL);
    const int first = rank * per_rank;                       // this block's first chunk of a row
    const int mine = max(0, min(per_rank, chunks - first));  // chunks of a row this block owns
    const int groups = blockDim.x / G, group = threadIdx.x / G, t = threadIdx.x - group * G;
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t row_bytes = (size_t)per_rank * 16;
    const size_t slot_bytes = (size_t)TENSORS * row_bytes;
    unsigned char* ring = staged + (size_t)group * stages * slot_bytes;
    unsigned long long* ring_landed = landed + group * MAX_STAGES;
    const float inv_C = 1.0f / (float)C;
    const bool leader = t == 0;

    if (leader) {
        for (int s = 0; s < stages; s++) mbarrier_init(&ring_landed[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    // the group's j-th row: rows are dealt in tiles of `groups`, tile i to cluster i % clusters
    auto row_of = [&](long long j) { return (cluster + j * clusters) * groups + group; };
    auto issue = [&](long long row, int s) {  // the leader: the row's copies into slot s
        mbarrier_expect(&ring_landed[s], (unsigned)(TENSORS * mine * 16));
        unsigned char* slot = ring + s * slot_bytes;
        const size_t offset = (size_t)row * C + (size_t)first * 8;
        bulk_copy<EVICT_FIRST>(slot, dout + offset, (unsigned)mine * 16, &ring_landed[s]);
        bulk_copy<EVICT_FIRST>(slot + row_bytes, inp + offset, (unsigned)mine * 16, &ring_landed[s]);
        if (ACC) bulk_copy<EVICT_FIRST>(slot + 2 * row_bytes, dinp + offset, (unsigned)mine * 16, &ring_landed[s]);
    };

    const uint4* weight4 = reinterpret_cast<const uint4*>(weight) + first;
    uint4 w[K];
    float sum[K][8];
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int c = t + j * G;
        w[j] = c < mine ? __ldg(weight4 + c) : make_uint4(0u, 0u, 0u, 0u);
        #pragma unroll
        for (int k = 0; k < 8; k++) sum[j][k] = 0.0f;
    }
    if (CL > 1) cluster_sync();  // every block of the cluster has started before the first remote store

    if (leader) {
        for (int s = 0; s < stages; s++) {
            const long long row = row_of(s);
            if (row < N) issue(row, s);
        }
    }
    float r_next = row_of(0) < N ? __ldg(rstd + row_of(0)) : 0.0f;
    int buffer = 0;
    #pragma unroll 1
    for (long long j = 0;; j++) {
        const long long row = row_of(j);
        if (row >= N) break;  // the same for the whole group (and with CL > 1, for the cluster)
        const int s = (int)(j % stages);
        const float r = r_next;
        {
            const long long next = row_of(j + 1);
            if (next < N) r_next = __ldg(rstd + next);
        }
        mbarrier_wait(&ring_landed[s], (unsigned)((j / stages) & 1));
        const unsigned char* slot = ring + s * slot_bytes;
        const uint4* g_row = reinterpret_cast<const uint4*>(slot);
        const uint4* x_row = reinterpret_cast<const uint4*>(slot + row_bytes);
        const uint4* d_row = reinterpret_cast<const uint4*>(slot + 2 * row_bytes);
        float dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = t + k * G;
            if (c < mine) {
                const uint4 g = g_row[c], x = x_row[c];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float dout_e = v7::widen(g, e), inp_e = v7::widen(x, e);
                    dot += v7::widen(w[k], e) * dout_e * inp_e;
                    sum[k][e] += inp_e * r * dout_e;
                }
            }
        }
        dot = warp_reduce_sum(dot);
        if (G > WARP_SIZE) {
            const int warps = G / WARP_SIZE, first_slot = group * warps;
            if (lane == 0) slots[first_slot + t / WARP_SIZE] = dot;
            v7::named_barrier(1 + group, G);
            dot = 0.0f;
            for (int i = 0; i < warps; i++) dot += slots[first_slot + i];
        }
        if (CL > 1) {
            if (threadIdx.x == 0) {
                #pragma unroll
                for (int q = 0; q < CL; q++) store_in_block(&cluster_slots[buffer][rank], q, dot);
            }
            cluster_sync();
            dot = 0.0f;
            #pragma unroll
            for (int q = 0; q < CL; q++) dot += cluster_slots[buffer][q];
            buffer ^= 1;
        }
        const float scale_inp = dot * r * r * r * inv_C;
        uint4* dinp_row = reinterpret_cast<uint4*>(dinp + (size_t)row * C) + first;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = t + k * G;
            if (c < mine) {
                const uint4 g = g_row[c], x = x_row[c];
                uint4 d = make_uint4(0u, 0u, 0u, 0u);
                if (ACC) d = d_row[c];
                float out[8];
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float v = v7::widen(w[k], e) * v7::widen(g, e) * r - v7::widen(x, e) * scale_inp;
                    out[e] = ACC ? v7::widen(d, e) + v : v;
                }
                __stcs(dinp_row + c, make_uint4(v7::pack(out[0], out[1]), v7::pack(out[2], out[3]),
                                                v7::pack(out[4], out[5]), v7::pack(out[6], out[7])));
            }
        }
        // the group has read slot s (and the exchange's slots): the leader may refill it
        if (G > WARP_SIZE) v7::named_barrier(1 + group, G); else __syncwarp();
        if (leader) {
            const long long later = row_of(j + stages);
            if (later < N) issue(later, s);
        }
    }
    __syncthreads();  // every group is done with the ring: it holds the groups' sums now

    // the block's dweight: groups' sums added in group order, one partial row per cluster (this block's
    // columns of it)
    float4* red = reinterpret_cast<float4*>(staged);  // groups x per_rank chunks x 2 float4
    #pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = t + k * G;
        if (c < mine) {
            red[((size_t)group * per_rank + c) * 2] = make_float4(sum[k][0], sum[k][1], sum[k][2], sum[k][3]);
            red[((size_t)group * per_rank + c) * 2 + 1] = make_float4(sum[k][4], sum[k][5], sum[k][6], sum[k][7]);
        }
    }
    __syncthreads();
    float4* out = reinterpret_cast<float4*>(partials + (size_t)cluster * C + (size_t)first * 8);
    for (int q = threadIdx.x; q < mine * 2; q += blockDim.x) {
        float4 s = red[q];
        for (int i = 1; i < groups; i++) v7::add4(s, red[(size_t)i * per_rank * 2 + q]);
        __stcg(out + q, s);
    }
    if (CL > 1) cluster_sync();  // no block leaves while a peer may still store into its shared memory
}

template <int CL, bool EVICT_FIRST>
__device__ __forceinline__ void dispatch(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int G, int K, int stages, int accumulate) {
    if (CL > 1) {  // a split row takes 2 or 4 chunks a thread
        if (K == 2) {
            if (accumulate) backward<2, true, CL, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            else backward<2, false, CL, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
        } else if (K == 4) {
            if (accumulate) backward<4, true, CL, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
            else backward<4, false, CL, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
        } else {
            __trap();
        }
        return;
    }
#define V8_CASE(KK)                                                                                           \
    case KK:                                                                                                  \
        if (accumulate) backward<KK, true, 1, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages); \
        else backward<KK, false, 1, EVICT_FIRST>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);   \
        break;
    switch (K) {
        V8_CASE(1)
        V8_CASE(2)
        V8_CASE(3)
        V8_CASE(4)
        default: __trap();
    }
#undef V8_CASE
}

}  // namespace v8

#ifndef V8_EVICT_FIRST
#define V8_EVICT_FIRST 0
#endif

#define V8_ARGS                                                                                                \
    __nv_bfloat16 *dinp, float *partials, const __nv_bfloat16 *dout, const __nv_bfloat16 *inp,                 \
        const __nv_bfloat16 *weight, const float *rstd, int N, int C, int G, int K, int stages, int accumulate
#define V8_PASS dinp, partials, dout, inp, weight, rstd, N, C, G, K, stages, accumulate

extern "C" __global__ void __launch_bounds__(v8::BLOCK, 1) v8_cluster1(V8_ARGS) {
    v8::dispatch<1, V8_EVICT_FIRST>(V8_PASS);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(v8::BLOCK, 1) v8_cluster2(V8_ARGS) {
    v8::dispatch<2, V8_EVICT_FIRST>(V8_PASS);
}
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(v8::BLOCK, 1) v8_cluster4(V8_ARGS) {
    v8::dispatch<4, V8_EVICT_FIRST>(V8_PASS);
}
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(v8::BLOCK, 1) v8_cluster8(V8_ARGS) {
    v8::dispatch<8, V8_EVICT_FIRST>(V8_PASS);
}
