// rgb_threshold, naive: the interleaved bytes are read as uchar3 pixels through a cast; one
// thread per pixel on a 2-D grid of 16 x 16 blocks; the kernel takes (width, height), the
// other way round from launch().
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void rgb_to_mask(const uchar3* rgb, unsigned char* mask, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const uchar3 px = rgb[y * width + x];
    const unsigned gray = (77u * px.x + 150u * px.y + 29u * px.z + 128u) >> 8;
    mask[y * width + x] = gray >= 128u ? 255 : 0;
}

extern "C" void launch(const uint8_t* rgb, uint8_t* mask, int height, int width, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((width + block.x - 1) / block.x, (height + block.y - 1) / block.y);
    rgb_to_mask<<<grid, block, 0, stream>>>(reinterpret_cast<const uchar3*>(rgb), mask, width, height);
}
