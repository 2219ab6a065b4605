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
    // smem-tile: TS x TS tiles of in and wt in shared memory
    __shared__ float ins[TS][TS];
    __shared__ float wts[TS][TS];
    float sum = (r >= rows || c >= cols) ? 0.0f : bias[c];
    for (int e0 = 0; e0 < k; e0 += TS) {
        ins[threadIdx.y][threadIdx.x] = r < rows && e0 + threadIdx.x < k ? in[r * k + (e0 + threadIdx.x)] : 0.0f;
        wts[threadIdx.y][threadIdx.x] = e0 + threadIdx.y < k && c < cols ? wt[(e0 + threadIdx.y) * cols + c] : 0.0f;
        __syncthreads();
        for (int ee = 0; ee < TS; ee++) {
            sum += ins[threadIdx.y][ee] * wts[ee][threadIdx.x];
        }
        __syncthreads();
    }
    if (r >= rows || c >= cols)
        return;
    out[r * cols + c] = sum;
}

extern "C" void launch(const float *in, const float *wt, const float *bias, float *out, int rows, int k, int cols,
                       cudaStream_t stream)
{
    dim3 block(TS, TS);
    dim3 grid((cols + TS - 1) / TS, (rows + TS - 1) / TS);
    dense_bias<<<grid, block, 0, stream>>>(in, wt, bias, out, rows, k, cols);
}
