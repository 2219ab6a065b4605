// vadd, broken: block 0 waits forever for a flag nobody sets.
#include <cuda_runtime.h>

__global__ void vadd_hang(const float *a, const float *b, float *c, int n, int *flag)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 0)
        while (*(volatile int *)flag == 0) {}
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    static int *flag;
    if (!flag) {
        cudaMalloc(&flag, sizeof(int));
        cudaMemset(flag, 0, sizeof(int));
    }
    vadd_hang<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n, flag);
}
