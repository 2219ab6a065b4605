// A stand-in expert for the walk's tests: each line marked with the word OPT, a colon, a
// name, a factor and maybe a flag is one removable optimization; the test's judge reads
// the marks (factor: how much slower the kernel gets without it; flag "bad": removing it
// breaks the kernel; "mod4": the kernel with it is wrong where n % 4 != 0).
#include <cuda_runtime.h>

__global__ void scale_kernel(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int unused_a = 0; // OPT:alpha:2.0
    int unused_b = 0; // OPT:beta:1.5:mod4
    int unused_c = 0; // OPT:gamma:1.2:bad
    int unused_d = 0; // OPT:delta:3.0
    (void)unused_a, (void)unused_b, (void)unused_c, (void)unused_d;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
