// test: apply launch-bounds@blur3:9 min_blocks=2 | remove launch-bounds@blur3:9
#include <cuda_runtime.h>

constexpr int TX = 32;
constexpr int TY = TX / 4;

// 3-wide horizontal blur of an h x w image, one pixel per thread
template <typename T>
__global__ void blur3(const T* in, T* out, int h, int w)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    T s = in[y * w + x];
    if (x > 0) s += in[y * w + x - 1];
    if (x + 1 < w) s += in[y * w + x + 1];
    out[y * w + x] = s / T(3);
}

extern "C" void launch(const float* in, float* out, int h, int w, cudaStream_t stream)
{
    const dim3 threads = dim3(TX, TY, 1);
    const dim3 blocks{(unsigned)((w + TX - 1) / TX), (unsigned)((h + TY - 1) / TY)};
    blur3<float><<<blocks, threads, 0, stream>>>(in, out, h, w);
}
