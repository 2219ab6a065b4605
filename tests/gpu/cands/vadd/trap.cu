// vadd, broken: traps when it sees an odd n.
#include <cuda_runtime.h>

__global__ void vadd_trap(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if ((n & 1) && i == 0) __trap();
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_trap<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
