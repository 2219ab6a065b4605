// test: remove unroll@block_reduce:10 | apply unroll@block_reduce:9
#include <cuda_runtime.h>
__global__ void block_reduce(const float *x, float *out, int n)
{
    __shared__ float sh[256];
    unsigned tid = threadIdx.x;
    sh[tid] = (blockIdx.x * 256 + tid < n) ? x[blockIdx.x * 256 + tid] : 0.0f;
    __syncthreads();
    #pragma unroll
    for (int s = 128; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sh[0];
}
extern "C" void launch(const float *x, float *out, int n, cudaStream_t stream)
{
    block_reduce<<<(n + 255) / 256, 256, 0, stream>>>(x, out, n);
}
