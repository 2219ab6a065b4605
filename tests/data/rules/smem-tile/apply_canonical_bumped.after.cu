// test: apply smem-tile@gemm_walk:16 | remove smem-tile@gemm_walk:18
// a naive GEMM walking its operands with pointers: a row pointer bumped by one, a column pointer
// bumped by the leading dimension, once per iteration (read through the canonical form)
#include <cuda_runtime.h>

#define TS 16

__global__ void gemm_walk(const float *a, const float *b, float *c, int m, int n, int kdim, int lda, int ldb, int ldc)
{
    int i = blockIdx.y * TS + threadIdx.y;
    int j = blockIdx.x * TS + threadIdx.x;
    // smem-tile: TS x TS tiles of a and b in shared memory
    __shared__ float as[TS][TS];
    __shared__ float bs[TS][TS];
    const float *arow = a + (size_t)i * lda;
    const float *bcol = &b[j];
    float acc = 0.0f;
    for (int p0 = 0; p0 < kdim; p0 += TS) {
        as[threadIdx.y][threadIdx.x] = i < m && p0 + threadIdx.x < kdim ? a[(((size_t)i * lda) + (p0 + threadIdx.x)) + (0)] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = p0 + threadIdx.y < kdim && j < n ? b[(j + (p0 + threadIdx.y) * ldb) + (0)] : 0.0f;
        __syncthreads();
        for (int pp = 0; pp < TS; pp++) {
            acc += as[threadIdx.y][pp] * bs[pp][threadIdx.x];


        }
        __syncthreads();
    }
    if (i < m && j < n) {
        c[(size_t)i * ldc + j] = acc;
    }
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    gemm_walk<<<dim3((N + TS - 1) / TS, (M + TS - 1) / TS), dim3(TS, TS), 0, stream>>>(A, B, C, M, N, K, K, N, N);
}
