// malformed-free but unusual: a launch inside a lambda at file scope, with no enclosing function
#include <cuda_runtime.h>

__global__ void scale(float *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= 2.0f;
}

auto run_scale = [](dim3 block, float *a, int n) { scale<<<(n + 255) / 256, block>>>(a, n); };

extern "C" void launch(float *a, int n, cudaStream_t stream)
{
    (void)stream;
    run_scale(dim3(256), a, n);
}
