// test: remove unroll@dot8:10 | apply unroll@dot8:8 factor=8
#include <cuda_runtime.h>
__global__ void dot8(const float *__restrict__ a, const float *__restrict__ b, float *out, int n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i * 8 + 7 >= (size_t)n) return;
    float s = 0.f;
    for (int k = 0; k < 8; k++) s += a[i * 8 + k] * b[i * 8 + k];
    out[i] = s;
}
extern "C" void launch(const float *a, const float *b, float *out, int n, cudaStream_t stream)
{
    dot8<<<(n / 8 + 127) / 128, 128, 0, stream>>>(a, b, out, n);
}
