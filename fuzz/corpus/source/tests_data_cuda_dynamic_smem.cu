// dynamic_smem: extern __shared__ memory sized at launch, aligned, carved into two
// arrays, with the attribute raised before the launch.
#include <cuda_runtime.h>

__global__ void row_stats(const float *__restrict__ x, float *__restrict__ mean, int cols)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *vals = reinterpret_cast<float *>(smem);
    float *sums = vals + blockDim.x;
    const float *row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    vals[threadIdx.x] = acc;
    sums[threadIdx.x] = 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) vals[threadIdx.x] += vals[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) mean[blockIdx.x] = vals[0] / cols;
}

extern "C" void launch(const float *x, float *mean, int rows, int cols, cudaStream_t stream)
{
    int threads = 256;
    size_t smem = 2 * threads * sizeof(float);
    cudaFuncSetAttribute(row_stats, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    row_stats<<<rows, threads, smem, stream>>>(x, mean, cols);
}
