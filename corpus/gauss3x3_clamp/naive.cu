// gauss3x3_clamp: already a grid-stride loop over the linearized image (size_t indices) and
// already __restrict__; each pixel reads its nine clamped neighbours from global memory.
#include <cuda_runtime.h>

__global__ void gauss3x3(const float* __restrict__ src, float* __restrict__ dst, int height, int width)
{
    const size_t total = (size_t)height * width;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        const int yy = (int)(idx / width);
        const int xx = (int)(idx % width);
        float acc = 0.0f;
        for (int dy = -1; dy <= 1; ++dy) {
            const int sy = min(max(yy + dy, 0), height - 1);
            for (int dx = -1; dx <= 1; ++dx) {
                const int sx = min(max(xx + dx, 0), width - 1);
                const float wgt = (float)((2 - abs(dy)) * (2 - abs(dx)));
                acc += wgt * src[(size_t)sy * width + sx];
            }
        }
        dst[idx] = acc * (1.0f / 16.0f);
    }
}

extern "C" void launch(const float* src, float* dst, int height, int width, cudaStream_t stream)
{
    gauss3x3<<<2048, 256, 0, stream>>>(src, dst, height, width);
}
