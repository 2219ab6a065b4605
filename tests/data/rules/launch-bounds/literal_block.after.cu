// test: apply launch-bounds@negate:3 min_blocks=4 | remove launch-bounds@negate:3
#include <cuda_runtime.h>
__global__ void __launch_bounds__(512, 4) negate(float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] = -x[i];
}
extern "C" void launch(float *x, int n, cudaStream_t stream)
{
    int threads = 512;
    negate<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, n);
}
