template <int K, bool WEIGHT_IN_REGISTERS>
__device__ __forceinline__ float row_pass(const Place& p, const uint4* weight4, const uint4 (&w)[K],
                                          const uint4 (&g)[K], const uint4 (&x)[K], float r) {
    float dot = 0.0f;
    #pragma unroll
    for (int j = 0; j < K; j++) {
        const int chunk = p.chunk(j);  // this thread's j-th chunk: channels 8 * chunk .. 8 * chunk + 7
        if (chunk < p.chunks) {
            const uint4 wj = WEIGHT_IN_REGISTERS ? w[j] : __ldg(weight4 + chunk);
            float4 lo = sums(p, 0, chunk), hi = sums(p, 1, chunk);
            float s[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            #pragma unroll
            for (int k = 0; k < 8; k++) {
                const float gk = widen(g[j], k), xk = widen(x[j], k);
                dot += widen(wj, k) * gk * xk;
                s[k] += xk * r * gk;
            }
            sums(p, 0, chunk) = make_float4(s[0], s[1], s[2], s[3]);
            sums(p, 1, chunk) = make_float4(s[4], s[5], s[6], s[7]);
        }
    }
    return dot;
}
