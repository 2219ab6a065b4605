// vadd, broken contract: works on a stream of its own and never joins it back into `stream`;
// the kernel first spins ~2 ms so its output is not there when `stream` alone is synchronized.
#include <cuda_runtime.h>

__global__ void vadd_late(const float *a, const float *b, float *c, int n)
{
    long long start = clock64();
    while (clock64() - start < 4000000) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    static cudaStream_t mine;
    if (!mine) cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking);
    (void)stream;
    vadd_late<<<(n + 255) / 256, 256, 0, mine>>>(a, b, c, n);
}
