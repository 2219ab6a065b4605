// conv1d, naive: one thread per output sample, taps and signal read from global memory, the
// padding handled by a bounds test per tap.
#include <cuda_runtime.h>

__global__ void conv1d_same(const float* signal, const float* taps, float* result, int len, int ntaps)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    const int half = ntaps / 2;
    float acc = 0.0f;
    for (int t = 0; t < ntaps; ++t) {
        const int j = i + t - half;
        if (j >= 0 && j < len) acc += taps[t] * signal[j];
    }
    result[i] = acc;
}

extern "C" void launch(const float* signal, const float* taps, float* result, int len, int ntaps, cudaStream_t stream)
{
    const int threads = 512;
    conv1d_same<<<(len + threads - 1) / threads, threads, 0, stream>>>(signal, taps, result, len, ntaps);
}
