// bmm, naive: one product per blockIdx.z; per-batch base pointers taken once (Ab, Bb, Cb), then
// one thread per element of C walking a row of A and a column of B with pointer increments.
#include <cuda_runtime.h>

#define BX 16
#define BY 16

__global__ void bmm_kernel(const float* A, const float* B, float* C, int M, int N, int K)
{
    const int b = blockIdx.z;
    const float* Ab = A + (size_t)b * M * K;
    const float* Bb = B + (size_t)b * K * N;
    float* Cb = C + (size_t)b * M * N;

    const int col = blockIdx.x * BX + threadIdx.x;
    const int row = blockIdx.y * BY + threadIdx.y;
    if (row >= M || col >= N) return;

    const float* ap = Ab + row * K;
    const float* bp = Bb + col;
    float s = 0.0f;
    for (int p = 0; p < K; ++p) {
        s += *ap * *bp;
        ap += 1;
        bp += N;
    }
    Cb[row * N + col] = s;
}

extern "C" void launch(const float* A, const float* B, float* C, int batch, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(BX, BY);
    dim3 grid((N + BX - 1) / BX, (M + BY - 1) / BY, batch);
    bmm_kernel<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
