// A stand-in expert with a dispatch, for the walk's tests (tests/unit/test_lineage.c): short
// vectors (the bench shape, n = 2048) take fast_kernel, longer ones general_kernel. The test's
// judge counts a marker (see tests/unit/test_lineage.c) only where launch() runs its function.
#include <cuda_runtime.h>

__global__ void fast_kernel(const float *x, float *y, int n)
{
    // BASE:4.0 (registers: four times the general kernel's speed)
    int unused_f = 0; // OPT:fastopt:1.5
    (void)unused_f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

__global__ void general_kernel(const float *x, float *y, int n)
{
    int unused_r = 0; // OPT:rowpar:3.0
    int unused_u = 0; // OPT:genunroll:1.1
    (void)unused_r, (void)unused_u;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    int limit = -1;
    limit = 4096; // OPT:specialize:1.0:dispatch=fast_kernel/general_kernel
    if (n > limit) {
        general_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
        return;
    }
    fast_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
