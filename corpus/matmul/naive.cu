// matmul, naive: a linearized 1-D grid over the elements of c (a 64-bit flat index split into
// row and column); one thread per element, the dot product read from global memory.
#include <cuda_runtime.h>

__global__ void matmul_naive(const float* a, const float* b, float* c, int m, int n, int k)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)m * n) return;
    const int row = (int)(idx / n);
    const int col = (int)(idx % n);
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += a[(size_t)row * k + p] * b[(size_t)p * n + col];
    c[idx] = acc;
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    const long long total = (long long)m * n;
    const int threads = 256;
    matmul_naive<<<(unsigned)((total + threads - 1) / threads), threads, 0, stream>>>(a, b, c, m, n, k);
}
