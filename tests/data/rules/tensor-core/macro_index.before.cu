// test: apply tensor-core@mgemm:16 | remove tensor-core@mgemm:28
// Indices through a macro and a helper, float(...) conversions, a #define block size: the
// round trip comes back in the canonical scalar form (a site to apply again).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define TILE 16
#define IDX(r, c, ld) ((r) * (ld) + (c))
__device__ __forceinline__ int at(int r, int c, int ld) { return r * ld + c; }

__global__ void mgemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    int r = blockIdx.y * TILE + threadIdx.y, c = blockIdx.x * TILE + threadIdx.x;
    if (r < M && c < N) {
        float acc = 0;
        for (int kk = 0; kk < K; kk++) acc += float(A[IDX(r, kk, K)]) * float(B[at(kk, c, N)]);
        C[IDX(r, c, N)] = __float2bfloat16(acc);
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    mgemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
