// test: apply smem-tile@bmm:19 | remove smem-tile@bmm:22
// Batched GEMM: a template on the element type, the batch from blockIdx.z, row-major indexing
// through a macro, local pointers to the batch's matrices, an unguarded kernel (the launch
// covers C exactly: M and N are multiples of the block) whose K is any size.
#include <cuda_runtime.h>

#define TILE 16
#define IDX(r, c, ld) ((r) * (ld) + (c))

template <typename T>
__global__ void bmm(const T* A, const T* B, T* C, int M, int N, int K)
{
    const int b = blockIdx.z;
    const T* a = A + (size_t)b * M * K;
    const T* bb = B + (size_t)b * K * N;
    const int i = blockIdx.y * TILE + threadIdx.y;
    const int j = blockIdx.x * TILE + threadIdx.x;
    T sum = 0;
    // smem-tile: TILE x TILE tiles of a and bb in shared memory
    __shared__ T as[TILE][TILE];
    __shared__ T bbs[TILE][TILE];
    for (int k0 = 0; k0 < K; k0 += TILE) {
        as[threadIdx.y][threadIdx.x] = k0 + threadIdx.x < K ? a[IDX(i, (k0 + threadIdx.x), K)] : T(0.0f);
        bbs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < K ? bb[IDX((k0 + threadIdx.y), j, N)] : T(0.0f);
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++) {
            sum += as[threadIdx.y][kk] * bbs[kk][threadIdx.x];
        }
        __syncthreads();
    }
    C[(size_t)b * M * N + IDX(i, j, N)] = sum;
}

extern "C" void launch(const float* A, const float* B, float* C, int batch, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid(N / TILE, M / TILE, batch);
    bmm<float><<<grid, dim3(TILE, TILE), 0, stream>>>(A, B, C, M, N, K);
}
