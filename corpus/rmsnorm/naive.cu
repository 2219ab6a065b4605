// rmsnorm, naive: one block per row; threads stride over the row by blockDim.x, their partial
// sums of squares meet in dynamic shared memory and are added by a halving tree (blockDim.x
// must be a power of two); then every thread scales its elements.
#include <cuda_runtime.h>

__global__ void rmsnorm_kernel(const float* x, const float* weight, float* y, int hidden, float eps)
{
    extern __shared__ float partial[];
    const float* row = x + (size_t)blockIdx.x * hidden;
    float* out = y + (size_t)blockIdx.x * hidden;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += row[i] * row[i];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = row[i] * inv_rms * weight[i];
}

extern "C" void launch(const float* x, const float* weight, float* y, int tokens, int hidden, cudaStream_t stream)
{
    const int threads = 256;
    rmsnorm_kernel<<<tokens, threads, threads * sizeof(float), stream>>>(x, weight, y, hidden, 1e-6f);
}
