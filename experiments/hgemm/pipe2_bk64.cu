// hgemm experiment (not a task file): the kernel `rules_sequences.py` writes for hgemm with
// `tensor-core warps_m=4 warps_n=2 frags_m=2 frags_n=2 bk=64 vector_loads=1`, changed by hand into a
// two-stage cp.async ring (the 16-byte tile copies issued one k tile ahead, dynamic shared memory).
// What a double-buffer transform on the wmma form would have to write; measured in docs/rules.md.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>

#define BLOCK 16

__global__ void __launch_bounds__(256) hgemm_naive(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    // tensor-core: wmma 16x16x16 fragments of bf16, f32 accumulators: 4 x 2 warps, each 2 x 2 fragments
    constexpr int KL_FM = 2, KL_FN = 2, KL_WARPS_M = 4, KL_WARPS_N = 2;
    constexpr int KL_BM = 128, KL_BN = 64, KL_BK = 64, KL_THREADS = 256;
    static_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, "a warp per 32 x 32 piece of C");
    constexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * 2, KL_CB = KL_BM * (KL_BN + 4) * 4;
    extern __shared__ __align__(128) unsigned char kl_smem[];
    auto kl_as0 = reinterpret_cast<__nv_bfloat16 (*)[KL_BK + 8]>(kl_smem);
    auto kl_bs0 = reinterpret_cast<__nv_bfloat16 (*)[KL_BN + 8]>(kl_smem + KL_BM * (KL_BK + 8) * 2);
    auto kl_as1 = reinterpret_cast<__nv_bfloat16 (*)[KL_BK + 8]>(kl_smem + KL_AB);
    auto kl_bs1 = reinterpret_cast<__nv_bfloat16 (*)[KL_BN + 8]>(kl_smem + KL_AB + KL_BM * (KL_BK + 8) * 2);
    auto kl_cs = reinterpret_cast<float (*)[KL_BN + 4]>(kl_smem);
    const int kl_warp = threadIdx.x / 32;
    const int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp % KL_WARPS_N * 16 * KL_FN;
    const int kl_m0 = (int)blockIdx.y * KL_BM;
    const int kl_n0 = (int)blockIdx.x * KL_BN;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);
    auto kl_load = [&](int kl_st, int kl_k0) {
        auto kl_as = kl_st ? kl_as1 : kl_as0;
        auto kl_bs = kl_st ? kl_bs1 : kl_bs0;
        for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BK / 8; kl_e += KL_THREADS) {
            const int kl_r = kl_e / (KL_BK / 8), kl_c = kl_e % (KL_BK / 8) * 8;
            const int row = kl_m0 + kl_r;
            const int k = kl_k0 + kl_c;
            if (row < M && k + 7 < K && reinterpret_cast<unsigned long long>(&A[row * K + k]) % 16 == 0) {
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(&kl_as[kl_r][kl_c])), "l"(&A[row * K + k]));
            } else {
                for (int kl_q = 0; kl_q < 8; kl_q++) {
                    const int k = kl_k0 + kl_c + kl_q;
                    kl_as[kl_r][kl_c + kl_q] = (row < M && k < K) ? A[row * K + k] : __nv_bfloat16(0.0f);
                }
            }
        }
        for (int kl_e = threadIdx.x; kl_e < KL_BK * KL_BN / 8; kl_e += KL_THREADS) {
            const int kl_r = kl_e / (KL_BN / 8), kl_c = kl_e % (KL_BN / 8) * 8;
            const int k = kl_k0 + kl_r;
            const int col = kl_n0 + kl_c;
            if (k < K && col + 7 < N && reinterpret_cast<unsigned long long>(&B[k * N + col]) % 16 == 0) {
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(&kl_bs[kl_r][kl_c])), "l"(&B[k * N + col]));
            } else {
                for (int kl_q = 0; kl_q < 8; kl_q++) {
                    const int col = kl_n0 + kl_c + kl_q;
                    kl_bs[kl_r][kl_c + kl_q] = (k < K && col < N) ? B[k * N + col] : __nv_bfloat16(0.0f);
                }
            }
        }
    };
    kl_load(0, 0);
    asm volatile("cp.async.commit_group;\n");
    for (int kl_k0 = 0, kl_st = 0; kl_k0 < K; kl_k0 += KL_BK, kl_st ^= 1) {
        if (kl_k0 + KL_BK < K) kl_load(kl_st ^ 1, kl_k0 + KL_BK);
        asm volatile("cp.async.commit_group;\n");
        asm volatile("cp.async.wait_group 1;\n");
        auto kl_as = kl_st ? kl_as1 : kl_as0;
        auto kl_bs = kl_st ? kl_bs1 : kl_bs0;
        __syncthreads();
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fa[KL_FM];
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fb[KL_FN];
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
        if (row < M && col < N) {
            float acc = kl_cs[kl_e / KL_BN][kl_e % KL_BN];
            C[row * N + col] = __float2bfloat16(acc);
        }
    }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(256);
    dim3 grid((N + 63) / 64, (M + 127) / 128);
    constexpr int AB = (128 * (64 + 8) + 64 * (64 + 8)) * 2, CB = 128 * (64 + 4) * 4;
    constexpr int SM = 2 * AB > CB ? 2 * AB : CB;
    cudaFuncSetAttribute(hgemm_naive, cudaFuncAttributeMaxDynamicSharedMemorySize, SM);
    hgemm_naive<<<grid, block, SM, stream>>>(A, B, C, M, N, K);
}
