// test: apply warp-reduce@tile_sums:13 shuffle=xor | remove warp-reduce@tile_sums:15
// The textbook tree over a 2-D grid (blockIdx.y picks the row), size_t indices.
#include <cuda_runtime.h>

__global__ void tile_sums(const float* x, float* partial, int rows, int cols)
{
    __shared__ float sdata[256];
    unsigned int tid = threadIdx.x;
    size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    sdata[tid] = (col < (size_t)cols) ? x[row * cols + col] : 0.0f;
    __syncthreads();
    {
        float kl_v = sdata[tid];
        for (int o = 16; o > 0; o >>= 1) kl_v += __shfl_xor_sync(0xffffffff, kl_v, o);
        __shared__ float kl_warp[32];
        if (threadIdx.x % 32 == 0) kl_warp[threadIdx.x / 32] = kl_v;
        __syncthreads();
        if (threadIdx.x < 32) {
            kl_v = kl_warp[threadIdx.x < blockDim.x / 32 ? threadIdx.x : 0];
            for (int o = blockDim.x / 64; o > 0; o >>= 1) kl_v += __shfl_xor_sync(0xffffffff, kl_v, o);
            if (threadIdx.x == 0) sdata[0] = kl_v;
        }
        __syncthreads();
    }
    if (tid == 0) partial[row * gridDim.x + blockIdx.x] = sdata[0];
}

extern "C" void launch(const float* x, float* partial, int rows, int cols, cudaStream_t stream)
{
    dim3 grid((cols + 255) / 256, rows);
    tile_sums<<<grid, 256, 0, stream>>>(x, partial, rows, cols);
}
