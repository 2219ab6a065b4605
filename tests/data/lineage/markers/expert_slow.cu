// A stand-in expert for the bisection test (tests/unit/test_lineage.c): one marked line whose
// optimization is slower than the simpler kernel below n = 5000 ("slowbelow=5000").
#include <cuda_runtime.h>

__global__ void scale_kernel(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int unused_a = 0; // OPT:alpha:2.0:slowbelow=5000
    int unused_b = 0;
    int unused_c = 0;
    int unused_d = 0;
    (void)unused_a, (void)unused_b, (void)unused_c, (void)unused_d;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
