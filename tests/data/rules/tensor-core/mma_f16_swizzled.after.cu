// test: remove tensor-core@gemm_f16:68
// A variant of the ldmatrix + mma.sync form in another style: f16, one stage of static shared tiles,
// an XOR-swizzled A tile (the 8-element chunk of row r is chunk ^ ((r >> 2) & 1)), a padded B tile
// read through `&Bs[...]`, `lane = threadIdx.x & 31`, braced loops, f32 C. Two warps, 32 x 16 per block.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define BS_LD 24

__global__ void gemm_f16(const __half* A, const __half* B, float* C, int M, int N, int K)
{
    __shared__ __align__(16) __half As[32 * 16];
    __shared__ __align__(16) __half Bs[16 * BS_LD];
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    const int bm = blockIdx.y * 32, bn = blockIdx.x * 16;
    float acc[1][2][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = threadIdx.x; e < 32 * 16; e += 64) {
            const int r = e / 16, k = e % 16;
            As[r * 16 + (((k >> 3) ^ ((r >> 2) & 1)) << 3) + (k & 7)] =
                (bm + r < M && k0 + k < K) ? A[(size_t)(bm + r) * K + k0 + k] : __float2half(0.0f);
        }
        for (int e = threadIdx.x; e < 16 * 16; e += 64) {
            const int k = e / 16, n = e % 16;
            Bs[k * BS_LD + n] = (k0 + k < K && bn + n < N) ? B[(size_t)(k0 + k) * N + bn + n] : __float2half(0.0f);
        }
        __syncthreads();
        {
            // tensor-core removed: scalar f32 FMAs over the same shared tiles; each lane computes the m16n8k16
            // accumulator elements it held (element e: row lane / 4 + 8 * (e / 2), col 2 * (lane % 4) + e % 2 of the
            // 16 x 8 tile), reading A and B where its ldmatrix lanes read them
            for (int i = 0; i < 1; ++i)
                for (int j = 0; j < 2; ++j)
                    for (int kl_e = 0; kl_e < 4; kl_e++) {
                        const int kl_r = lane / 4 + 8 * (kl_e / 2), kl_c = 2 * (lane % 4) + kl_e % 2;
                        for (int kl_x = 0; kl_x < 16; kl_x++)
                            acc[i][j][kl_e] += __half2float(As[(wid * 16 + i * 16 + kl_r) * 16 + ((kl_x / 8) ^ (((wid * 16 + i * 16 + kl_r) >> 2) & 1)) * 8 + kl_x % 8]) *
                                __half2float((&Bs[kl_x * BS_LD + (j / 2) * 16 + (j % 2) * 8])[kl_c]);
                    }
        }
        __syncthreads();
    }
    // acc[0][j][e]: row lane / 4 + 8 * (e / 2), col j * 8 + 2 * (lane % 4) + e % 2 of the warp's 16 x 16 piece
    for (int j = 0; j < 2; j++) {
        for (int e = 0; e < 4; e++) {
            const int r = bm + wid * 16 + lane / 4 + 8 * (e / 2), c = bn + j * 8 + 2 * (lane % 4) + e % 2;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[0][j][e];
        }
    }
}

extern "C" void launch(const __half* A, const __half* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    if (M <= 0 || N <= 0) return;
    gemm_f16<<<dim3((N + 15) / 16, (M + 31) / 32), 64, 0, stream>>>(A, B, C, M, N, K);
}
