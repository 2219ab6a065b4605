// test: apply tensor-core@hgemm_f16:12 warps_m=4 warps_n=1 bk=32 vector_loads=1 | remove tensor-core@hgemm_f16:23
// An f16 GEMM with an early return, a 32-deep k tile and 16-byte tile loads.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <mma.h>

__global__ void hgemm_f16(const __half* A, const __half* B, __half* C, int M, int N, int K, float alpha)
{
    // tensor-core: wmma 16x16x16 fragments of f16, f32 accumulators: 4 x 1 warps, each 1 x 1 fragments
    constexpr int KL_FM = 1, KL_FN = 1, KL_WARPS_M = 4, KL_WARPS_N = 1;
    constexpr int KL_BM = 64, KL_BN = 16, KL_BK = 32, KL_THREADS = 128;
    static_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, "a warp per 16 x 16 piece of C");
    __shared__ __align__(32) __half kl_as[KL_BM][KL_BK + 8];
    __shared__ __align__(32) __half kl_bs[KL_BK][KL_BN + 8];
    __shared__ __align__(32) float kl_cs[KL_BM][KL_BN + 4];
    const int kl_warp = threadIdx.x / 32;
    const int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp % KL_WARPS_N * 16 * KL_FN;
    const int kl_m0 = (int)blockIdx.y * KL_BM;
    const int kl_n0 = (int)blockIdx.x * KL_BN;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);
    for (int kl_k0 = 0; kl_k0 < K; kl_k0 += KL_BK) {
        for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BK / 8; kl_e += KL_THREADS) {
            const int kl_r = kl_e / (KL_BK / 8), kl_c = kl_e % (KL_BK / 8) * 8;
            const int row = kl_m0 + kl_r;
            const int k = kl_k0 + kl_c;
            if (row < M && k + 7 < K && reinterpret_cast<unsigned long long>(&A[row * K + k]) % 16 == 0) {
                *reinterpret_cast<uint4*>(&kl_as[kl_r][kl_c]) = *reinterpret_cast<const uint4*>(&A[row * K + k]);
            } else {
                for (int kl_q = 0; kl_q < 8; kl_q++) {
                    const int k = kl_k0 + kl_c + kl_q;
                    kl_as[kl_r][kl_c + kl_q] = (row < M && k < K) ? A[row * K + k] : __half(0.0f);
                }
            }
        }
        for (int kl_e = threadIdx.x; kl_e < KL_BK * KL_BN / 8; kl_e += KL_THREADS) {
            const int kl_r = kl_e / (KL_BN / 8), kl_c = kl_e % (KL_BN / 8) * 8;
            const int k = kl_k0 + kl_r;
            const int col = kl_n0 + kl_c;
            if (k < K && col + 7 < N && reinterpret_cast<unsigned long long>(&B[k * N + col]) % 16 == 0) {
                *reinterpret_cast<uint4*>(&kl_bs[kl_r][kl_c]) = *reinterpret_cast<const uint4*>(&B[k * N + col]);
            } else {
                for (int kl_q = 0; kl_q < 8; kl_q++) {
                    const int col = kl_n0 + kl_c + kl_q;
                    kl_bs[kl_r][kl_c + kl_q] = (k < K && col < N) ? B[k * N + col] : __half(0.0f);
                }
            }
        }
        __syncthreads();
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> kl_fa[KL_FM];
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> kl_fb[KL_FN];
        for (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16) {
            for (int kl_i = 0; kl_i < KL_FM; kl_i++)
                nvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][kl_kk], KL_BK + 8);
            for (int kl_j = 0; kl_j < KL_FN; kl_j++)
                nvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[kl_kk][kl_wn + 16 * kl_j], KL_BN + 8);
            for (int kl_i = 0; kl_i < KL_FM; kl_i++)
                for (int kl_j = 0; kl_j < KL_FN; kl_j++)
                    nvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);
        }
        __syncthreads();
    }
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++)
            nvcuda::wmma::store_matrix_sync(&kl_cs[kl_wm + 16 * kl_i][kl_wn + 16 * kl_j], kl_acc[kl_i][kl_j], KL_BN + 4, nvcuda::wmma::mem_row_major);
    __syncthreads();
    for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BN; kl_e += KL_THREADS) {
        const int row = kl_m0 + kl_e / KL_BN;
        const int col = kl_n0 + kl_e % KL_BN;
        if (row >= M || col >= N) continue;
        float acc = kl_cs[kl_e / KL_BN][kl_e % KL_BN];
        C[row * N + col] = __float2half(alpha * acc);
    }
}

void run(const __half* A, const __half* B, __half* C, int M, int N, int K, cudaStream_t s)
{
    hgemm_f16<<<dim3((N + 15) / 16, (M + 63) / 64), 128, 0, s>>>(A, B, C, M, N, K, 2.0f);
}
