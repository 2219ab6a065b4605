// test: remove double-buffer@gemm_ring:44
// f16 warp-fragment GEMM in another style: a 3-deep ring of __pipeline_memcpy_async copies
// (4 bytes each, zero-filled), a non-template load helper, __pipeline_wait_prior, stage
// pointers computed inline, loop variable t
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#define TB 32
#define TK 16
#define NSTAGE 3

__device__ void fetch(__half* sa, __half* sb, const __half* A, const __half* B, int M, int N, int K, int m0, int n0, int k0)
{
    for (int i = threadIdx.x; i < TB * TK; i += 64) {
        const int r = i / TK, kk = i % TK;
        const bool ok = m0 + r < M && k0 + kk < K;
        __pipeline_memcpy_async(&sa[r * TK + kk], ok ? &A[(size_t)(m0 + r) * K + k0 + kk] : A, sizeof(__half),
                                ok ? 0 : sizeof(__half));
    }
    for (int i = threadIdx.x; i < TK * TB; i += 64) {
        const int kk = i / TB, c = i % TB;
        const bool ok = k0 + kk < K && n0 + c < N;
        __pipeline_memcpy_async(&sb[kk * TB + c], ok ? &B[(size_t)(k0 + kk) * N + n0 + c] : B, sizeof(__half),
                                ok ? 0 : sizeof(__half));
    }
}

__global__ void gemm_ring(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    __shared__ __half sa_all[NSTAGE * TB * TK];
    __shared__ __half sb_all[NSTAGE * TK * TB];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int m0 = blockIdx.y * TB, n0 = blockIdx.x * TB;
    float acc[1][4][4];
    for (int a = 0; a < 1; a++)
        for (int b = 0; b < 4; b++)
            for (int e = 0; e < 4; e++) acc[a][b][e] = 0.0f;
    const int tiles = (K + TK - 1) / TK;
    for (int s = 0; s < NSTAGE - 1; s++) {
        if (s < tiles) fetch(sa_all + s * (TB * TK), sb_all + s * (TK * TB), A, B, M, N, K, m0, n0, s * TK);
        __pipeline_commit();
    }
    for (int t = 0; t < tiles; t++) {
        __pipeline_wait_prior(NSTAGE - 2);
        __syncthreads();
        const int ahead = t + NSTAGE - 1;
        if (ahead < tiles) fetch(sa_all + (ahead % NSTAGE) * (TB * TK), sb_all + (ahead % NSTAGE) * (TK * TB), A, B, M, N, K, m0, n0, ahead * TK);
        __pipeline_commit();
        const __half* sa = sa_all + (t % NSTAGE) * (TB * TK);
        const __half* sb = sb_all + (t % NSTAGE) * (TK * TB);
        for (int b = 0; b < 4; b++)
            for (int e = 0; e < 4; e++) {
                const int r = warp * 16 + lane / 4 + 8 * (e / 2), c = b * 8 + 2 * (lane % 4) + e % 2;
                for (int x = 0; x < TK; x++) acc[0][b][e] += __half2float(sa[r * TK + x]) * __half2float(sb[x * TB + c]);
            }
    }
    for (int b = 0; b < 4; b++)
        for (int e = 0; e < 4; e++) {
            const int r = m0 + warp * 16 + lane / 4 + 8 * (e / 2), c = n0 + b * 8 + 2 * (lane % 4) + e % 2;
            if (r < M && c < N) C[(size_t)r * N + c] = __float2half(acc[0][b][e]);
        }
}

extern "C" void launch(const __half* A, const __half* B, __half* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid((N + TB - 1) / TB, (M + TB - 1) / TB);
    gemm_ring<<<grid, 64, 0, stream>>>(A, B, C, M, N, K);
}
