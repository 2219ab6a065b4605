// hist16_rows, naive: one thread per pixel over a linearized grid (unsigned indices); each adds
// one to its row's bin in global memory with atomicAdd; the counts are zeroed first.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void row_hist16(const unsigned char* img, int* hist, unsigned rows, unsigned cols)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        const unsigned r = i / cols;
        atomicAdd(&hist[r * 16u + (img[i] >> 4)], 1);
    }
}

extern "C" void launch(const uint8_t* img, int32_t* hist, int rows, int cols, cudaStream_t stream)
{
    cudaMemsetAsync(hist, 0, (size_t)rows * 16 * sizeof(int32_t), stream);
    const unsigned n = (unsigned)rows * (unsigned)cols;
    row_hist16<<<(n + 255) / 256, 256, 0, stream>>>(img, hist, (unsigned)rows, (unsigned)cols);
}
