// test: remove specialize@launch:143 | apply specialize@softmax_rows_long:22:cols values=1024
// softmax, expert: row-wise softmax of a rows x cols f32 matrix.
//
// Optimizations (each marked where it sits):
//  - row-parallel: a block per row (THREADS threads cooperate on one row)
//  - vectorize: float4 loads and stores when the row start is 16-byte aligned
//  - warp-reduce: shuffle reduction of the (max, sum) pairs, then across warps in shared memory
//  - unroll, launch-bounds, restrict
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

constexpr int THREADS = 256;                 // threads per block; one block per row
constexpr unsigned FULL_MASK = 0xffffffffu;

struct MaxSum {
    float m;  // running maximum
    float s;  // sum of exp(x - m)
};

// Rows too long for registers: online (max, sum) over global memory, then the write pass.
__global__ void softmax_rows_long(const float* x, float* y, int cols, int kl_rows)
{
    const int kl_row = blockIdx.x * blockDim.x + threadIdx.x;
    if (kl_row >= kl_rows) return;
    const float* xr = x + (size_t)kl_row * (size_t)cols;
    float* yr = y + (size_t)kl_row * (size_t)cols;

    MaxSum mine;
    mine.m = -INFINITY;
    mine.s = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float xv = xr[c];
        if (xv > mine.m) {
            mine.s = mine.s * expf(mine.m - xv) + 1.0f;  // exp(-inf) = 0 on the first element
            mine.m = xv;
        } else {
            mine.s += expf(xv - mine.m);
        }
    }
    const MaxSum row = mine;
    const float inv = 1.0f / row.s;
    for (int c = 0; c < cols; c++) yr[c] = expf(xr[c] - row.m) * inv;
}

extern "C" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0) return;
    softmax_rows_long<<<(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, y, cols, rows);
}
