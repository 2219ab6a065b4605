// test: apply smem-tile@dense_bias:16 | remove smem-tile@dense_bias:17 exact
// a dense layer with a bias: out = in * wt + bias, one output per thread of a 16 x 16 block; the
// accumulator starts from the bias, read between the early return and the loop over k
#include <cuda_runtime.h>

#define TS 16

__global__ void dense_bias(const float *in, const float *wt, const float *bias, float *out, int rows, int k,
                           int cols)
{
    int r = blockIdx.y * TS + threadIdx.y;
    int c = blockIdx.x * TS + threadIdx.x;
    if (r >= rows || c >= cols)
        return;
    float sum = bias[c];
    for (int e = 0; e < k; e++) {
        sum += in[r * k + e] * wt[e * cols + c];
    }
    out[r * cols + c] = sum;
}

extern "C" void launch(const float *in, const float *wt, const float *bias, float *out, int rows, int k, int cols,
                       cudaStream_t stream)
{
    dim3 block(TS, TS);
    dim3 grid((cols + TS - 1) / TS, (rows + TS - 1) / TS);
    dense_bias<<<grid, block, 0, stream>>>(in, wt, bias, out, rows, k, cols);
}
