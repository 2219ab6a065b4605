// test: remove warp-reduce@block_max:16 | apply warp-reduce@block_max:17
// Two helpers: warp_max is the shuffle loop alone; block_max stages the partials and lets the
// first warp reduce them again; the kernel is a template on the element type.
#include <cuda_runtime.h>

__device__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ float block_max(float v)
{
    __shared__ float kl_red[128];
    kl_red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) kl_red[threadIdx.x] = fmaxf(kl_red[threadIdx.x], kl_red[threadIdx.x + s]);
        __syncthreads();
    }
    v = kl_red[0];
    __syncthreads();
    return v;
}

template <typename T>
__global__ void row_max(const T* x, T* y, int rows, int cols)
{
    const int row = blockIdx.x;
    float m = -INFINITY;
    int c = threadIdx.x;
    while (c < cols) {
        m = fmaxf(m, (float)x[(size_t)row * cols + c]);
        c += blockDim.x;
    }
    m = block_max(m);
    if (threadIdx.x == 0) y[row] = (T)m;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    row_max<float><<<rows, 128, 0, stream>>>(x, y, rows, cols);
}
