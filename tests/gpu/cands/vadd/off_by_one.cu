// vadd, wrong: pairs of elements per thread, and the last element of an odd n is forgotten.
#include <cuda_runtime.h>

__global__ void vadd_pairs(const float *a, const float *b, float *c, int n)
{
    int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 1 < n) {
        c[i] = a[i] + b[i];
        c[i + 1] = a[i + 1] + b[i + 1];
    }
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    vadd_pairs<<<(n / 2 + 255) / 256 + 1, 256, 0, stream>>>(a, b, c, n);
}
