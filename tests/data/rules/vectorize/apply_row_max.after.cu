#include <stdint.h>
// test: apply vectorize@row_max:14 | remove vectorize@row_max:17
// One thread per row (naive softmax style): a local row pointer, an int index, a reduction into
// a scalar that the vector loop keeps in the same order.
#include <cuda_runtime.h>

#define BLOCK 128

__global__ void row_max(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float m = -INFINITY;
    {
        int c = 0;
        if (((uintptr_t)&xr[c] & 15) == 0) {
            for (; c + 3 < cols; c += 4) {
                const float4 kl_xr = *reinterpret_cast<const float4*>(&xr[c]);
                {
                    m = fmaxf(m, kl_xr.x);
                }
                {
                    m = fmaxf(m, kl_xr.y);
                }
                {
                    m = fmaxf(m, kl_xr.z);
                }
                {
                    m = fmaxf(m, kl_xr.w);
                }
            }
        }
        for (; c < cols; c++) {
            m = fmaxf(m, xr[c]);
        }
    }
    y[row] = m;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    row_max<<<(rows + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, rows, cols);
}
