// test: remove register-tile@mm4x4:12
// a 4 x 4 register tile written another way: a 2-D block, row-major tiles filled by strided loops,
// each thread's outputs contiguous, the store guarded in place
#include <cuda_runtime.h>

#define BT 64
#define KT 16
#define R 4

__global__ void mm4x4(const float* A, const float* B, float* C, int M, int N, int K)
{
    float c[R][R];
    __shared__ float sa[BT][KT];
    __shared__ float sb[KT][BT];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++) c[i][j] = 0.0f;
    const int bm = blockIdx.y * BT, bn = blockIdx.x * BT;
    const int t = threadIdx.y * 16 + threadIdx.x;
    for (int k0 = 0; k0 < K; k0 += KT) {
        for (int l = t; l < BT * KT; l += 256) {
            const int r = l / KT, kk = l % KT;
            sa[r][kk] = (bm + r < M && k0 + kk < K) ? A[(bm + r) * K + (k0 + kk)] : 0.0f;
        }
        for (int l = t; l < KT * BT; l += 256) {
            const int kk = l / BT, cc = l % BT;
            sb[kk][cc] = (k0 + kk < K && bn + cc < N) ? B[(k0 + kk) * N + bn + cc] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < KT; k++)
            for (int i = 0; i < R; i++)
                for (int j = 0; j < R; j++) c[i][j] += sa[threadIdx.y * R + i][k] * sb[k][threadIdx.x * R + j];
        __syncthreads();
    }
    for (int i = 0; i < R; i++) {
        const int row = bm + threadIdx.y * R + i;
        for (int j = 0; j < R; j++) {
            const int col = bn + threadIdx.x * R + j;
            if (row < M && col < N) C[row * N + col] = c[i][j];
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + BT - 1) / BT, (M + BT - 1) / BT);
    mm4x4<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
