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
    static __shared__ float red[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / 32) ? red[lane] : -INFINITY;
    if (warp == 0) v = warp_max(v);
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
