// gemv_t, naive: one thread per output column, already a grid-stride loop over the columns and
// already __restrict__; the thread walks down its column (a warp's loads are coalesced).
#include <cuda_runtime.h>

__global__ void gemv_t_kernel(const float* __restrict__ weight, const float* __restrict__ v, float* __restrict__ out,
                              int K, int N)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < N; j += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < K; i++) s += weight[(size_t)i * N + j] * v[i];
        out[j] = s;
    }
}

extern "C" void launch(const float* weight, const float* v, float* out, int K, int N, cudaStream_t stream)
{
    const int block = 256;
    int grid = (N + block - 1) / block;
    if (grid > 1024) grid = 1024;
    gemv_t_kernel<<<grid, block, 0, stream>>>(weight, v, out, K, N);
}
