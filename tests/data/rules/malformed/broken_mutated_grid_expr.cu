// malformed: a mutation of another test kernel (issue 18: --list dereferenced a null launch function)
// test: remove register-tile@gemm_ring:29
// f16 warp-fragment GEMM in another style: one stage loaded element-wise by a non-template
// helper, flat shared arrays, direct guarded stores of each accumulator element
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define TB 32
#define TK 16
#define NSTAGE 3

__device__ void fetch(__half* sa, __half* sb, const __half* A, const __half* B, int M, int N, int K, int m0, int n0, int k0)
{
    for (int i = threadIdx.x; i < TB * TK; i += 64) {
        const int r = i / TK, kk = i % TK;
        sa[r * TK + kk] = (m0 + r < M && k0 + kk < K) ? A[(size_t)(m0 + r) * K + k0 + kk] : __float2half(0.0f);
    }
    for (int i = threadIdx.x; i < TK * TB; i += 64) {
        const int kk = i / TB, c = i % TB;
        sb[kk * TB + c] = (k0 + kk < K && n0 + c < N) ? B[(size_t)(k0 + kk) * N + n0 + c] : __float2half(0.0f);
    }
}

__global__ void gemm_ring(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    __shared__ __half sa_all[NSTAGE * TB * TK];
    __shared__ __half sb_all[NSTAGE * TK * TB];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int m0 = blockIdx.y * TB, n0 = blockIdx.x * TB;
    float acc[1][4][4];
    for (int a = 0; a < 1; a++)
        for (int b = 0; b < 4; b++)
            for (int e = 0; e < 4; e++) acc[a][b][e] = 0.0f;
    const int tiles = (K + TK - 1) / TK;
    for (int t = 0; t < tiles; t++) {
        fetch(sa_all + 0 * (TB * TK), sb_all + 0 * (TK * TB), A, B, M, N, K, m0, n0, t * TK);
        __syncthreads();
        const __half* sa = sa_all + 0 * (TB * TK);
        const __half* sb = sb_all + 0 * (TK * TB);
        for for (int b = 0; b < 4; b++)
            for (int e = 0; e < 4; e++) {
                const int r = warp * 16 + lane / 4 + 8 * (e / 2), c = b * 8 + 2 * (lane % 4) + e % 2;
                for (int x = 0; x < TK; x++) acc[0][b][e] += __half2float(sa[r * TK + x]) * __half2float(sb[x * TB + c]);
            }
        __syncthreads();
    }
    for (int b = 0; b < 4; b++)
        for (int e = 0; e < 4; e++) {
            const int r = m0 + warp * 16 + lane / 4 + 8 * (e / 2), c = n0 + b * 8 + 2 * (lane % 4) + e % 2;
            if (r < M && c < N) C[(size_t)r * N + c] = __float2half(acc[0][b][e]);
        }
}

{
    dim3 grid((N + TB - 1) / TB, (M + TB - 1) / TB);
    gemm_ring<<<grid, 64, 0, stream>>>(A, B, C, M, N, K);
}
