// test: apply block-size@relu:14:threads threads=512 | apply block-size@relu:14:threads threads=128
#include <cuda_runtime.h>

__global__ void relu(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    while (i < n) {
        x[i] = fmaxf(x[i], 0.0f);
        i += blockDim.x * gridDim.x;
    }
}
extern "C" void launch(float *x, int n, cudaStream_t stream)
{
    int threads = 128;
    int blocks = (n + threads - 1) / threads;
    relu<<<blocks, threads, 0, stream>>>(x, n);
}
