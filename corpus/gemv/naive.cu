// gemv, naive: one thread per row of the matrix; the row is walked with two pointers in a
// while loop (no index variable), the product accumulated in a register.
#include <cuda_runtime.h>

__global__ void gemv_rowwise(const float* mat, const float* vec, float* res, int nrows, int ncols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= nrows) return;
    const float* p = mat + (size_t)r * ncols;
    const float* const end = p + ncols;
    const float* v = vec;
    float acc = 0.0f;
    while (p != end) {
        acc += (*p++) * (*v++);
    }
    res[r] = acc;
}

extern "C" void launch(const float* mat, const float* vec, float* res, int nrows, int ncols, cudaStream_t stream)
{
    const int threads = 128;
    gemv_rowwise<<<(nrows + threads - 1) / threads, threads, 0, stream>>>(mat, vec, res, nrows, ncols);
}
