// test: apply unroll@poly:13 factor=2 | remove unroll@poly:14
#include <cuda_runtime.h>
#define DEG 6
__device__ __forceinline__ int flat(int r, int c, int ld) { return r * ld + c; }
__global__ void poly(const float *coef, const float *x, float *y, int rows, int ld)
{
    int r = blockIdx.x;
    int j = threadIdx.x;
    if (r >= rows) return;
    while (j < ld) {
        float v = x[flat(r, j, ld)];
        float acc = 0.0f;
        #pragma unroll 2
        for (int d = DEG - 1; d >= 0; --d) acc = acc * v + coef[d];
        y[flat(r, j, ld)] = acc;
        j += blockDim.x;
    }
}
extern "C" void launch(const float *coef, const float *x, float *y, int rows, int ld, cudaStream_t stream)
{
    poly<<<rows, 128, 0, stream>>>(coef, x, y, rows, ld);
}
