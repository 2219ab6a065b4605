// vector_add: the simplest kernel file; one thread per element, one launch.
#include <cuda_runtime.h>

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    int block = 256;
    int grid = (n + block - 1) / block;
    vector_add<<<grid, block, 0, stream>>>(a, b, c, n);
}
