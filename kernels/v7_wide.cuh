// v7_wide.cuh: v7's rows wider than one block, split over a thread-block cluster (NOTES.md, v7_fast
// item 10). Included by v7_fast.cu after the helpers it shares (namespace v7): not on its own.
#pragma once

// ---- 10. Rows wider than one block: split over a thread-block cluster (sm_90 and newer) --------
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
namespace v7 {
namespace wide {

constexpr int K = 4;           // 16-byte chunks a thread, as in the widest row one block holds
// row slots in the ring (the plan fills what shared memory has, at least 2)
constexpr int MAX_STAGES = 8;
constexpr int MAX_CLUSTER = 4;

// Declared here, once, not in backward: each template instance would get its own copy.
// one mbarrier per row slot: its copies' bytes have landed
__shared__ unsigned long long landed[MAX_STAGES];
__shared__ float warp_dots[MAX_BLOCK / WARP_SIZE];  // each warp's part of the row's dot product
// each block's part, written into every block of the cluster
__shared__ float block_dots[2][MAX_CLUSTER];

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}
// The one arrival of a slot's phase, saying how many bytes its copies will bring.
__device__ __forceinline__ void mbarrier_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(bar)), "r"(bytes) : "memory");
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
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(shared_address(destination)), "l"(source), "r"(bytes), "r"(shared_address(bar))
        : "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster; what was written before is seen after (release /
// acquire).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// v into the same shared-memory place of block `rank` of this cluster (distributed shared memory)
__device__ __forceinline__ void store_in_block(float* here, unsigned rank, float v) {
    unsigned there;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(there) : "r"(shared_address(here)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(there), "f"(v) : "memory");
}

// CL blocks a row; block `rank` owns chunks [rank * per_rank, +per_rank) of every row (the last
// rank may own fewer). Cluster c takes rows c, c + clusters, ...; thread t holds chunks t, t + G, t
// + 2G, t + 3G of its block's part (G = blockDim.x), their weight and their dweight sums, in
// registers.
template <int CL, bool ACCUMULATE>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials,
                                         const __nv_bfloat16* dout,
                                         const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                         const float* rstd, int N, int C, int stages) {
    // `stages` slots: a row's dout, inp (and dinp) parts, one after another
    extern __shared__ float4 ring4[];
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
    // the mbarriers are ready, and every block of the cluster has started: its shared memory exists
    cluster_sync();

    auto issue = [&](long long row, int s) {  // thread 0: the row's copies into slot s
        mbarrier_expect(&landed[s], (unsigned)(TENSORS * mine * 16));
        unsigned char* slot = ring + s * slot_bytes;
        const size_t offset = (size_t)row * C + (size_t)first * 8;
        bulk_copy(slot, dout + offset, (unsigned)mine * 16, &landed[s]);
        bulk_copy(slot + part_bytes, inp + offset, (unsigned)mine * 16, &landed[s]);
        if (ACCUMULATE) bulk_copy(slot + 2 * part_bytes, dinp + offset, (unsigned)mine * 16,
                                  &landed[s]);
    };
    if (t == 0) {
        for (int s = 0; s < stages; s++) {
            const long long row = cluster + (long long)s * clusters;
            if (row < N) issue(row, s);
        }
    }
    float r_next = cluster < N ? __ldg(rstd + cluster) : 0.0f;
    // block_dots alternate, so a peer's store for the next row cannot meet a read of this one
    int buffer = 0;
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
        const uint4* d_part =
            reinterpret_cast<const uint4*>(ring + s * slot_bytes + 2 * part_bytes);

        float dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            for_each_value(g_part, x_part, t + k * G, mine, [&](int e, float dout, float inp) {
                dot += widen(w[k], e) * dout * inp;
                sum[k][e] += inp * r * dout;
            });
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
        // in rank order: the same sum in every block
        for (int q = 0; q < CL; q++) dot += block_dots[buffer][q];
        buffer ^= 1;

        const float scale_inp = dot * r * r * r * inv_C;
        uint4* dinp_part = reinterpret_cast<uint4*>(dinp + (size_t)row * C) + first;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = t + k * G;
            if (c < mine) {
                store_dinp_chunk<ACCUMULATE>(dinp_part, g_part, x_part, d_part, c,
                                             [&](int e, const uint4& g, const uint4& x) {
                    return widen(w[k], e) * widen(g, e) * r - widen(x, e) * scale_inp;
                });
            }
        }
        // slot s and warp_dots are read: thread 0 refills the slot with the row `stages` ahead
        __syncthreads();
        if (t == 0 && row + (long long)stages * clusters < N) {
            issue(row + (long long)stages * clusters, s);
        }
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
rmsnorm_backward_v7_wide2(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                          const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                          int N, int C, int stages, int overwrite) {
    using v7::wide::backward;
    if (overwrite) backward<2, false>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
    else backward<2, true>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
}
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(v7::MAX_BLOCK, 1)
rmsnorm_backward_v7_wide4(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                          const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                          int N, int C, int stages, int overwrite) {
    using v7::wide::backward;
    if (overwrite) backward<4, false>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
    else backward<4, true>(dinp, partials, dout, inp, weight, rstd, N, C, stages);
}
#endif  // sm_90 and newer
