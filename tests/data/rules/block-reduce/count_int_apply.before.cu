// test: apply block-reduce@count_pos:9:count | remove block-reduce@count_pos:29
#include <cuda_runtime.h>

// counts the positive values: one atomic per hit, two statements
__global__ void count_pos(const float* x, int* count, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        if (x[i] > 0.0f)
            atomicAdd(&count[0], 1);
        if (x[i] > 100.0f) atomicAdd(&count[0], 1);
    }
}

extern "C" void launch(const float* x, int* count, int n, cudaStream_t stream)
{
    cudaMemsetAsync(count, 0, sizeof(int), stream);
    count_pos<<<264, dim3(512), 0, stream>>>(x, count, n);
}
