// idiom: a warp-tiled SGEMM (row-major C = A * B), 1-D block of NTHREADS threads; each warp owns a
// WM x WN piece of the BM x BN block tile, each lane an TM x TN register tile inside it. A is
// staged transposed in shared memory; loads go through float4 casts. The warp count is the
// layout: NTHREADS / 32 warps must cover (BM / WM) x (BN / WN) warp tiles.
#include <cuda_runtime.h>

#define BM 64
#define BN 64
#define BK 8
#define WM 32
#define WN 32
#define TM 4
#define TN 4
#define NTHREADS 128

__global__ void __launch_bounds__(NTHREADS) sgemm_warptile(int M, int N, int K, const float *A, const float *B, float *C)
{
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int warpRow = warp / (BN / WN);
    const int warpCol = warp % (BN / WN);
    const int laneRow = lane / (WN / TN);
    const int laneCol = lane % (WN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += (blockIdx.y * BM + warpRow * WM) * N + blockIdx.x * BN + warpCol * WN;
    const int aRow = threadIdx.x / (BK / 4), aCol = threadIdx.x % (BK / 4);
    const int bRow = threadIdx.x / (BN / 4), bCol = threadIdx.x % (BN / 4);
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int r = aRow; r < BM; r += NTHREADS / (BK / 4)) {
            float4 v = reinterpret_cast<const float4 *>(&A[r * K + aCol * 4])[0];
            As[aCol * 4 + 0][r] = v.x;
            As[aCol * 4 + 1][r] = v.y;
            As[aCol * 4 + 2][r] = v.z;
            As[aCol * 4 + 3][r] = v.w;
        }
        for (int r = bRow; r < BK; r += NTHREADS / (BN / 4))
            reinterpret_cast<float4 *>(&Bs[r][bCol * 4])[0] = reinterpret_cast<const float4 *>(&B[r * N + bCol * 4])[0];
        __syncthreads();
        A += BK;
        B += BK * N;
        #pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; i++) a[i] = As[k][warpRow * WM + laneRow * TM + i];
            #pragma unroll
            for (int j = 0; j < TN; j++) b[j] = Bs[k][warpCol * WN + laneCol * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; i++)
                #pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; i++)
        #pragma unroll
        for (int j = 0; j < TN; j++) C[(laneRow * TM + i) * N + laneCol * TN + j] = acc[i][j];
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    dim3 grid(N / BN, M / BM);
    sgemm_warptile<<<grid, NTHREADS, 0, stream>>>(M, N, K, A, B, C);
}
