// test: apply row-parallel@row_stats:8 unit=block threads=128 | remove row-parallel@row_stats:9
// Per-row minimum and count of positives over a templated element type, with a while loop.
#include <cuda_runtime.h>

template <typename T>
__global__ void row_stats(const T* x, T* lo, int* pos, int rows, int cols)
{
    int r = blockIdx.x * 64 + threadIdx.x;
    if (r < rows) {
        const T* xr = x + (size_t)r * cols;
        T m = xr[0];
        int n = 0;
        int c = 0;
        while (c < cols) {
            T v = xr[c];
            m = min(m, v);
            if (v > T(0)) n++;
            c++;
        }
        lo[r] = m;
        pos[r] = n;
    }
}

extern "C" void launch(const float* x, float* lo, int* pos, int rows, int cols, cudaStream_t stream)
{
    row_stats<float><<<(rows + 63) / 64, 64, 0, stream>>>(x, lo, pos, rows, cols);
}
