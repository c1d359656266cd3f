// v7_staged.cuh: v7's rows of 1024 <= C <= 16384 staged in shared memory by cp.async (NOTES.md,
// v7_fast item 11). Included by v7_fast.cu after the helpers it shares (namespace v7): not on its
// own.
#pragma once

// ---- 11. Rows staged in shared memory by cp.async (1024 <= C <= 16384) --------------------------
namespace v7 {
namespace staged {

// __launch_bounds__(BLOCK, 1): 65536 / 1024 = 64 registers a thread
constexpr int BLOCK = V7_STAGED_BLOCK;
// 16-byte chunks a thread: what 64 registers hold with weight widened
constexpr int K = 2;
// row slots a group's ring has at most (wait_pending's 0..7)
constexpr int MAX_STAGES = 8;
static_assert(BLOCK % WARP_SIZE == 0 && BLOCK <= 1024,
              "V7_STAGED_BLOCK: whole warps, at most 1024 threads");
static_assert(MAX_STAGES - 1 <= 7, "wait_pending waits with at most 7 groups pending");

// each warp's part of its row's dot product, two buffers
__shared__ float warp_dots[2][BLOCK / WARP_SIZE];

// 16 bytes from global memory into shared memory at `destination` (a shared-memory address),
// bypassing L1
__device__ __forceinline__ void copy16(unsigned destination, const void* source) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(destination),
                 "l"(source) : "memory");
}
// the copies this thread issued since the last commit become one group
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// wait until at most `pending` of this thread's groups are still in flight (its operand is an
// immediate)
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

// A block is `groups` row groups of G threads; thread t of a group owns chunks t and t + G of each
// of its group's rows, dealt round-robin over the grid as in the register path. ACC: dinp += (dinp
// staged too).
template <bool ACC>
__device__ __forceinline__ void backward(__nv_bfloat16* dinp, float* partials,
                                         const __nv_bfloat16* dout,
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
        packed[j] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(weight) + c) : make_uint4(0u,
                0u, 0u, 0u);
        #pragma unroll
        for (int e = 0; e < 8; e++) {
            sum[j][e] = 0.0f;
            w[j][e] = widen(packed[j], e);
        }
    }

    const long long stride = (long long)gridDim.x * groups;
    const long long first_row = (long long)group * gridDim.x + blockIdx.x;
    // this thread's chunks of `row` into slot s, and a commit even when there is no such row: the
    // groups then count rows, so "row i has landed" is "at most stages - 1 groups pending"
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

    // rstd is loaded a row ahead, after the row's dot product: loaded at its row, the load was
    // issued after the row's copies had landed, and its whole latency stood between one row and the
    // next. (Loaded at the top of the row instead, r_next lives through pass 1, and sm_80 spills 4
    // bytes at 64 registers.)
    float r_next = first_row < N ? __ldg(rstd + first_row) : 0.0f;
    int buffer = 0;
    #pragma unroll 1
    for (int i = 0;; i++) {
        const long long row = first_row + i * stride;
        if (row >= N) break;
        const int s = i % stages;
        // the slot row i - 1 used: this thread alone read it, and used what it read, so it can be
        // refilled
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
            for_each_value(g_row, x_row, t + j * G, chunks, [&](int e, float dout, float inp) {
                const float gx = dout * inp;
                dot = fmaf(w[j][e], gx, dot);
                sum[j][e] = fmaf(r, gx, sum[j][e]);
            });
        }
        dot = warp_reduce_sum(dot);
        if (row + stride < N) r_next = __ldg(rstd + row + stride);
        // the group's warps in a fixed order, after the group's own barrier
        if (warps_in_group > 1) {
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
                store_dinp_chunk<ACC>(dinp_row, g_row, x_row, d_row, c,
                                      [&](int e, const uint4& g, const uint4& x) {
                    return fmaf(w[j][e] * widen(g, e), r, -widen(x, e) * scale_inp);
                });
            }
        }
    }
    wait_pending(0);  // the empty groups of the last rows: the ring is quiet before it is reused

    // the groups' sums added in group order, one partial row per block, staged where the ring was
    // (the plan gives the ring at least groups * C * 4 bytes). The thread's place is read again
    // here, not kept from the start: at 64 registers a thread, keeping one more address across the
    // loop spills it.
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
rmsnorm_backward_v7_staged(__nv_bfloat16* dinp, float* partials, const __nv_bfloat16* dout,
                           const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* rstd,
                           int N, int C, int G, int stages, int overwrite) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    using v7::staged::backward;
    if (!overwrite) backward<true>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
    else backward<false>(dinp, partials, dout, inp, weight, rstd, N, C, G, stages);
#else
    __trap();  // cp.async needs sm_80: the plan takes the register path below it
#endif
}
