// grid_stride_saxpy: a grid-stride loop with size_t indices and a fixed-size grid.
#include <cstddef>
#include <cuda_runtime.h>

__global__ void saxpy(size_t n, float alpha, const float *__restrict__ x, float *__restrict__ y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        y[i] = alpha * x[i] + y[i];
    }
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    int sms = 132;
    saxpy<<<sms * 4, 256, 0, stream>>>((size_t)n, 2.0f, x, y);
}
