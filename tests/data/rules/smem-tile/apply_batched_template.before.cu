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
    for (int k = 0; k < K; k++) {
        sum += a[IDX(i, k, K)] * bb[IDX(k, j, N)];
    }
    C[(size_t)b * M * N + IDX(i, j, N)] = sum;
}

extern "C" void launch(const float* A, const float* B, float* C, int batch, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid(N / TILE, M / TILE, batch);
    bmm<float><<<grid, dim3(TILE, TILE), 0, stream>>>(A, B, C, M, N, K);
}
