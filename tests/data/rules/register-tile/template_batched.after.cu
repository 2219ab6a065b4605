// test: apply register-tile@bgemm:17 TM=4 TN=2 | remove register-tile@bgemm:16
// batched GEMM (one matrix per blockIdx.z), templated on the element type
#include <cuda_runtime.h>

#define TILE 32

template <typename T>
__global__ void bgemm(const T* A, const T* B, T* C, int M, int N, int K)
{
    __shared__ T As[4 * TILE][TILE];
    __shared__ T Bs[TILE][2 * TILE];
    const T* Ab = A + (size_t)blockIdx.z * M * K;
    const T* Bb = B + (size_t)blockIdx.z * K * N;
    int row = (blockIdx.y * 4) * TILE + threadIdx.y;
    int col = (blockIdx.x * 2) * TILE + threadIdx.x;
    T acc[4][2];
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 2; kl_j++) {
            acc[kl_i][kl_j] = 0;
        }
    }
    for (int k0 = 0; k0 < K; k0 += TILE) {
        #pragma unroll
        for (int kl_i = 0; kl_i < 4; kl_i++) {
            As[(threadIdx.y + kl_i * TILE)][threadIdx.x] = ((row + kl_i * TILE) < M && k0 + threadIdx.x < K) ? Ab[(row + kl_i * TILE) * K + k0 + threadIdx.x] : T(0);
        }
        #pragma unroll
        for (int kl_j = 0; kl_j < 2; kl_j++) {
            Bs[threadIdx.y][(threadIdx.x + kl_j * TILE)] = (k0 + threadIdx.y < K && (col + kl_j * TILE) < N) ? Bb[(k0 + threadIdx.y) * N + (col + kl_j * TILE)] : T(0);
        }
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            T kl_a[4];
            T kl_b[2];
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++) kl_a[kl_i] = As[(threadIdx.y + kl_i * TILE)][kk];
            #pragma unroll
            for (int kl_j = 0; kl_j < 2; kl_j++) kl_b[kl_j] = Bs[kk][(threadIdx.x + kl_j * TILE)];
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < 2; kl_j++) acc[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 2; kl_j++) {
            if ((row + kl_i * TILE) < M && (col + kl_j * TILE) < N) C[(size_t)blockIdx.z * M * N + (row + kl_i * TILE) * N + (col + kl_j * TILE)] = acc[kl_i][kl_j];
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid(((N + TILE - 1) / TILE + 1) / 2, ((M + TILE - 1) / TILE + 3) / 4, 4);
    bgemm<float><<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
