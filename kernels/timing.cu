// Keeps the GPU busy for a while so that the host can queue the launches being timed behind it:
// without it, a short kernel's CUDA-event time would include the host's launch overhead.
#include "common.cuh"

extern "C" __global__ void gpu_sleep(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
