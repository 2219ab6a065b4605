// argmax_rows, naive: one block of THREADS threads per row. Each thread scans a strided slice of
// the row, then (value, index) pairs are combined in shared memory by a halving tree that keeps
// the larger value and, on equal values, the smaller index.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 128

__global__ void argmax_rows_kernel(const float* data, int32_t* index, int n_rows, int n_cols)
{
    __shared__ float best_val[THREADS];
    __shared__ int best_idx[THREADS];
    const int t = threadIdx.x;
    const float* row = data + (size_t)blockIdx.x * n_cols;

    float bv = -INFINITY;
    int bi = n_cols;  // no element seen yet
    for (int c = t; c < n_cols; c += THREADS) {
        const float v = row[c];
        if (bi == n_cols || v > bv) {
            bv = v;
            bi = c;
        }
    }
    best_val[t] = bv;
    best_idx[t] = bi;
    __syncthreads();

    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            const float ov = best_val[t + s];
            const int oi = best_idx[t + s];
            const bool other_seen = oi < n_cols, mine_seen = best_idx[t] < n_cols;
            if (other_seen && (!mine_seen || ov > best_val[t] || (ov == best_val[t] && oi < best_idx[t]))) {
                best_val[t] = ov;
                best_idx[t] = oi;
            }
        }
        __syncthreads();
    }
    if (t == 0) index[blockIdx.x] = best_idx[0];
}

extern "C" void launch(const float* data, int32_t* index, int n_rows, int n_cols, cudaStream_t stream)
{
    argmax_rows_kernel<<<n_rows, THREADS, 0, stream>>>(data, index, n_rows, n_cols);
}
