// test: apply restrict@saxpy:4 ldg=1 | remove restrict@saxpy:4
#include <cuda_runtime.h>

__global__ void saxpy(const float *__restrict__ x, const float *__restrict__ y, float *__restrict__ out, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * __ldg(&x[i]) + __ldg(&y[i]);
}

extern "C" void launch(const float *x, const float *y, float *out, float a, int n, cudaStream_t stream)
{
    saxpy<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, a, n);
}
