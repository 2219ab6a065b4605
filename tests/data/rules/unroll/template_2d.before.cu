// test: apply unroll@tile_sum:12 | remove unroll@tile_sum:13
#include <cuda_runtime.h>
constexpr int TILE = 4;
template <typename T>
__global__ void tile_sum(const T *in, T *out, size_t rows, size_t cols)
{
    size_t r = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows || c * TILE >= cols) return;
    T s = 0;
    // four neighbours along the row
    for (int k = 0; k < TILE; k++) {
        s += in[r * cols + c * TILE + k];
    }
    out[r * (cols / TILE) + c] = s;
}
extern "C" void launch(const float *in, float *out, int rows, int cols, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((cols / TILE + 15) / 16, (rows + 15) / 16);
    tile_sum<float><<<grid, block, 0, stream>>>(in, out, rows, cols);
}
