// test: apply block-size@tree_sum:24 threads=256 | apply block-size@tree_sum:24 threads=128
// The block size written twice at the launch: as the template argument the kernel sizes its shared
// array and its tree with, and as the launch's block. Both change together.
#include <cuda_runtime.h>

template <typename T, unsigned int blockSize>
__global__ void tree_sum(const T* __restrict__ x, T* __restrict__ out, unsigned int n)
{
    __shared__ T buf[blockSize];
    const unsigned int t = threadIdx.x;
    const unsigned int i = blockIdx.x * blockSize + t;
    buf[t] = i < n ? x[i] : T(0);
    __syncthreads();
    for (unsigned int h = blockSize / 2; h > 0; h >>= 1) {
        if (t < h) buf[t] += buf[t + h];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, buf[0]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    tree_sum<float, 256><<<(n + 255) / 256, 256, 0, stream>>>(x, out, (unsigned)n);
}
