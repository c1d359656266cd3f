// y = a * x for n4 float4 chunks (n4 * 4 floats). Each block of 256 threads covers 256 * UNROLL chunks;
// thread t of block b owns chunks base + k * blockDim.x for k = 0 .. UNROLL-1, so at every k a warp reads
// 32 neighbouring float4: 512 contiguous bytes.
#define UNROLL 4
extern "C" __global__ void scale_wide(float4* y, const float4* x, float a, int n4) {
    const int base = blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float4 v[UNROLL];
    #pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        int i = base + k * blockDim.x;
        if (i < n4) v[k] = x[i];
    }
    #pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        int i = base + k * blockDim.x;
        if (i < n4) {
            float4 t = v[k];
            y[i] = make_float4(a * t.x, a * t.y, a * t.z, a * t.w);
        }
    }
}
