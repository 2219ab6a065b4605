// maxpool2x2, naive: a 3-D grid, blockIdx.z is the channel; one thread per output element
// reads its 2 x 2 window from global memory.
#include <cuda_runtime.h>

__global__ void maxpool2x2_nchw(const float* x, float* y, int H, int W)
{
    const int OH = H / 2, OW = W / 2;
    const int ox = blockIdx.x * blockDim.x + threadIdx.x;
    const int oy = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = blockIdx.z;
    if (ox >= OW || oy >= OH) return;
    const float* plane = x + (size_t)c * H * W;
    const float a = plane[(2 * oy) * W + 2 * ox];
    const float b = plane[(2 * oy) * W + 2 * ox + 1];
    const float d = plane[(2 * oy + 1) * W + 2 * ox];
    const float e = plane[(2 * oy + 1) * W + 2 * ox + 1];
    y[((size_t)c * OH + oy) * OW + ox] = fmaxf(fmaxf(a, b), fmaxf(d, e));
}

extern "C" void launch(const float* x, float* y, int channels, int height, int width, cudaStream_t stream)
{
    const dim3 block(16, 16);
    const dim3 grid((width / 2 + 15) / 16, (height / 2 + 15) / 16, channels);
    maxpool2x2_nchw<<<grid, block, 0, stream>>>(x, y, height, width);
}
