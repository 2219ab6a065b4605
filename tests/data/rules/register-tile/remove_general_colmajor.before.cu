// test: remove register-tile@gemm_cm:9
// column-major operands (A is K x M, C is N x M), a 1-D block, early skips and a size_t store
#include <cuda_runtime.h>

constexpr int TB = 32, TKK = 8, TT = 2;

__global__ void gemm_cm(const float* At, const float* B, float* Ct, int m, int n, int k)
{
    float acc[TT][TT];
    __shared__ float a_s[TKK][TB];
    __shared__ float b_s[TKK][TB];
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int j = 0; j < TT; j++) acc[i][j] = 0.f;
    const int tx = threadIdx.x % (TB / TT), ty = threadIdx.x / (TB / TT);
    for (int kb = 0; kb < k; kb += TKK) {
        for (int e = threadIdx.x; e < TKK * TB; e += blockDim.x) {
            const int kr = kb + e / TB, mr = blockIdx.y * TB + e % TB;
            a_s[e / TB][e % TB] = kr < k && mr < m ? At[kr * m + mr] : 0.0f;
            const int nc = blockIdx.x * TB + e % TB;
            b_s[e / TB][e % TB] = kr < k && nc < n ? B[kr * n + nc] : 0.0f;
        }
        __syncthreads();
        for (int q = 0; q < TKK; q++) {
            float a[TT], b[TT];
            for (int i = 0; i < TT; i++) a[i] = a_s[q][ty * TT + i];
            for (int j = 0; j < TT; j++) b[j] = b_s[q][tx * TT + j];
            for (int i = 0; i < TT; i++)
                for (int j = 0; j < TT; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < TT; i++) {
        const int mr = blockIdx.y * TB + ty * TT + i;
        if (mr >= m) break;
        for (int j = 0; j < TT; j++) {
            const int nc = blockIdx.x * TB + tx * TT + j;
            if (nc >= n) continue;
            Ct[(size_t)nc * m + mr] = acc[i][j];
        }
    }
}

extern "C" void launch(const float* At, const float* B, float* Ct, int m, int n, int k, cudaStream_t stream)
{
    const dim3 grid((n + TB - 1) / TB, (m + TB - 1) / TB);
    gemm_cm<<<grid, (TB / TT) * (TB / TT), 0, stream>>>(At, B, Ct, m, n, k);
}
