// box3_u8, naive: the radius is a template parameter (launch() instantiates R = 1); one thread
// per pixel on a 2-D grid, the clamped neighbourhood summed in an int.
#include <cuda_runtime.h>
#include <stdint.h>

template <int R>
__global__ void box_filter_u8(const uint8_t* in, uint8_t* out, int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows || c >= cols) return;
    constexpr int AREA = (2 * R + 1) * (2 * R + 1);
    int sum = 0;
    for (int dr = -R; dr <= R; ++dr) {
        const int rr = min(max(r + dr, 0), rows - 1);
        for (int dc = -R; dc <= R; ++dc) {
            const int cc = min(max(c + dc, 0), cols - 1);
            sum += in[rr * cols + cc];
        }
    }
    out[r * cols + c] = (uint8_t)((sum + AREA / 2) / AREA);
}

extern "C" void launch(const uint8_t* in, uint8_t* out, int rows, int cols, cudaStream_t stream)
{
    const dim3 block(16, 16);
    const dim3 grid((cols + 15) / 16, (rows + 15) / 16);
    box_filter_u8<1><<<grid, block, 0, stream>>>(in, out, rows, cols);
}
