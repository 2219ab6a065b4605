// test: remove const-mem@fir_at:11:taps
// 1-D FIR filter of n samples with up to 64 taps, zero outside; the taps in constant memory, read
// through a __device__ helper; the copy and the launch in a host helper, the kind cudaMemcpyDefault
#include <cuda_runtime.h>

#define MAX_TAPS 64
__constant__ float taps[MAX_TAPS];

__device__ __forceinline__ float fir_at(const float* __restrict__ x, int n, int i, int t, int w)
{
    return i + t - w / 2 >= 0 && i + t - w / 2 < n ? taps[t] * x[i + t - w / 2] : 0.0f;
}

__global__ void __launch_bounds__(256) fir(const float* __restrict__ x, float* __restrict__ y, int n, int w)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int t = 0; t < w; t++) s += fir_at(x, n, i, t, w);
        y[i] = s;
    }
}

static void run(const float* x, const float* w, float* y, int n, int ntaps, cudaStream_t stream)
{
    // copy the taps, then filter
    cudaMemcpyToSymbolAsync(taps, w, ntaps * sizeof(float), 0, cudaMemcpyDefault, stream);
    fir<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n, ntaps);
}

extern "C" void launch(const float* x, const float* w, float* y, int n, int ntaps, cudaStream_t stream)
{
    if (n <= 0 || ntaps <= 0 || ntaps > MAX_TAPS) return;
    run(x, w, y, n, ntaps, stream);
}
