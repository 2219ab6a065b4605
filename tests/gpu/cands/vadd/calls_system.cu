// vadd, hostile: right sums, and a call to system() on the first launch. The object check
// refuses the import before the kernel ever runs (also under `gate --compile-only`).
#include <cuda_runtime.h>
#include <stdlib.h>

__global__ void vadd_plain(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    static int once;
    if (!once++) (void)system("true");
    vadd_plain<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n);
}
