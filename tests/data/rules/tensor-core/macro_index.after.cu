// test: apply tensor-core@mgemm:16 | remove tensor-core@mgemm:28
// Indices through a macro and a helper, float(...) conversions, a #define block size: the
// round trip comes back in the canonical scalar form (a site to apply again).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>

#define TILE 16
#define IDX(r, c, ld) ((r) * (ld) + (c))
__device__ __forceinline__ int at(int r, int c, int ld) { return r * ld + c; }

__global__ void mgemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    // tensor-core: wmma 16x16x16 fragments of bf16, f32 accumulators: 2 x 2 warps, each 1 x 1 fragments
    constexpr int KL_FM = 1, KL_FN = 1, KL_WARPS_M = 2, KL_WARPS_N = 2;
    constexpr int KL_BM = 32, KL_BN = 32, KL_BK = 16, KL_THREADS = 128;
    static_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, "a warp per 16 x 16 piece of C");
    __shared__ __align__(32) __nv_bfloat16 kl_as[KL_BM][KL_BK + 8];
    __shared__ __align__(32) __nv_bfloat16 kl_bs[KL_BK][KL_BN + 8];
    __shared__ __align__(32) float kl_cs[KL_BM][KL_BN + 4];
    const int kl_warp = threadIdx.x / 32;
    const int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp % KL_WARPS_N * 16 * KL_FN;
    const int kl_m0 = (int)blockIdx.y * KL_BM;
    const int kl_n0 = (int)blockIdx.x * KL_BN;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);
    for (int kl_k0 = 0; kl_k0 < K; kl_k0 += KL_BK) {
        for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BK; kl_e += KL_THREADS) {
            const int r = kl_m0 + kl_e / KL_BK;
            const int kk = kl_k0 + kl_e % KL_BK;
            kl_as[kl_e / KL_BK][kl_e % KL_BK] = (r < M && kk < K) ? A[IDX(r, kk, K)] : __nv_bfloat16(0.0f);
        }
        for (int kl_e = threadIdx.x; kl_e < KL_BK * KL_BN; kl_e += KL_THREADS) {
            const int kk = kl_k0 + kl_e / KL_BN;
            const int c = kl_n0 + kl_e % KL_BN;
            kl_bs[kl_e / KL_BN][kl_e % KL_BN] = (kk < K && c < N) ? B[at(kk, c, N)] : __nv_bfloat16(0.0f);
        }
        __syncthreads();
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fa[KL_FM];
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fb[KL_FN];
        for (int kl_i = 0; kl_i < KL_FM; kl_i++)
            nvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][0], KL_BK + 8);
        for (int kl_j = 0; kl_j < KL_FN; kl_j++)
            nvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[0][kl_wn + 16 * kl_j], KL_BN + 8);
        for (int kl_i = 0; kl_i < KL_FM; kl_i++)
            for (int kl_j = 0; kl_j < KL_FN; kl_j++)
                nvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);
        __syncthreads();
    }
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++)
            nvcuda::wmma::store_matrix_sync(&kl_cs[kl_wm + 16 * kl_i][kl_wn + 16 * kl_j], kl_acc[kl_i][kl_j], KL_BN + 4, nvcuda::wmma::mem_row_major);
    __syncthreads();
    for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BN; kl_e += KL_THREADS) {
        const int r = kl_m0 + kl_e / KL_BN;
        const int c = kl_n0 + kl_e % KL_BN;
        if (r < M && c < N) {
            float acc = kl_cs[kl_e / KL_BN][kl_e % KL_BN];
            C[IDX(r, c, N)] = __float2bfloat16(acc);
        }
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(128);
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    mgemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
