// test: remove vectorize@row_sums:14 | apply vectorize@row_sums:15
// The expert style: float4 loads of a row under an alignment guard, the scalar loop in the else
// branch.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void row_sums(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* p = x + (size_t)row * cols;
    float s = 0.0f;
    // vectorize: float4 loads when the row is 16-byte aligned
    if (((uintptr_t)p & 15) == 0 && cols % 4 == 0) {
        for (int c4 = 0; c4 < cols / 4; c4++) {
            const float4 v = reinterpret_cast<const float4*>(p)[c4];
            s += v.x;
            s += v.y;
            s += v.z;
            s += v.w;
        }
    } else {
        for (int c = 0; c < cols; c++) s += p[c];
    }
    y[row] = s;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    row_sums<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols);
}
