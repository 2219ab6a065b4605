// test: apply register-tile@bgemm:17 TM=4 TN=2 | remove register-tile@bgemm:16
// batched GEMM (one matrix per blockIdx.z), templated on the element type
#include <cuda_runtime.h>

#define TILE 32

template <typename T>
__global__ void bgemm(const T* A, const T* B, T* C, int M, int N, int K)
{
    __shared__ T As[TILE][TILE];
    __shared__ T Bs[TILE][TILE];
    const T* Ab = A + (size_t)blockIdx.z * M * K;
    const T* Bb = B + (size_t)blockIdx.z * K * N;
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    T acc = 0;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? Ab[row * K + k0 + threadIdx.x] : T(0);
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? Bb[(k0 + threadIdx.y) * N + col] : T(0);
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)blockIdx.z * M * N + row * N + col] = acc;
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE, 4);
    bgemm<float><<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
