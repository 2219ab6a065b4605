// test: apply restrict@col_sum:6 ldg=1 | remove restrict@col_sum:6
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// column sums of a bf16 matrix into f32, one thread per element, with atomics
__global__ void col_sum(const __nv_bfloat16 *__restrict__ x, float *__restrict__ sums, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (c < cols && r < rows) atomicAdd(&sums[c], __bfloat162float(__ldg(&x[(size_t)r * cols + c])));
}

extern "C" void launch(const __nv_bfloat16 *x, float *sums, int rows, int cols, cudaStream_t stream)
{
    cudaMemsetAsync(sums, 0, cols * sizeof(float), stream);
    dim3 grid((cols + 127) / 128, rows);
    col_sum<<<grid, 128, 0, stream>>>(x, sums, rows, cols);
}
