// test: apply tensor-core@gemm:12 warps_m=2 warps_n=2 frags_m=4 frags_n=4 bk=32 stages=3 | remove tensor-core@gemm:79
// A bf16 GEMM with 128 x 128 block tiles, 64 x 64 per warp, and a ring of three 32-deep k tiles filled by cp.async.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>

__global__ void gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K)
{
    // tensor-core: wmma 16x16x16 fragments of bf16, f32 accumulators: 2 x 2 warps, each 4 x 4 fragments; a ring of 3 k tiles filled by cp.async
    constexpr int KL_FM = 4, KL_FN = 4, KL_WARPS_M = 2, KL_WARPS_N = 2;
    constexpr int KL_BM = 128, KL_BN = 128, KL_BK = 32, KL_THREADS = 128, KL_STAGES = 3;
    static_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, "a warp per 64 x 64 piece of C");
    constexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * 2;  // bytes of one stage
    // the ring of stages during the k loop, a 16 x 16 f32 tile per warp after it (56832 bytes, given at launch)
    extern __shared__ __align__(128) unsigned char kl_smem[];
    auto kl_cs = reinterpret_cast<float (*)[16][20]>(kl_smem);
    const int kl_warp = threadIdx.x / 32, kl_lane = threadIdx.x % 32;
    const int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp % KL_WARPS_N * 16 * KL_FN;
    const int kl_m0 = (int)blockIdx.y * KL_BM;
    const int kl_n0 = (int)blockIdx.x * KL_BN;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);
    // every row of A and of B 16-byte aligned? (the indices are affine: two rows tell)
    auto kl_a_at = [&](int row, int k) { return reinterpret_cast<unsigned long long>(&A[row * K + k]); };
    auto kl_b_at = [&](int k, int col) { return reinterpret_cast<unsigned long long>(&B[k * N + col]); };
    const bool kl_aligned = (kl_a_at(kl_m0, 0) | kl_a_at(kl_m0 + 1, 0) | kl_b_at(0, kl_n0) | kl_b_at(1, kl_n0)) % 16 == 0;
    auto kl_load = [&](int kl_st, int kl_k0) {
        auto kl_as = reinterpret_cast<__nv_bfloat16 (*)[KL_BK + 8]>(kl_smem + kl_st * KL_AB);
        auto kl_bs = reinterpret_cast<__nv_bfloat16 (*)[KL_BN + 8]>(kl_smem + kl_st * KL_AB + KL_BM * (KL_BK + 8) * 2);
        if (kl_aligned && kl_m0 + KL_BM <= M && kl_n0 + KL_BN <= N && kl_k0 + KL_BK <= K) {
            #pragma unroll
            for (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BK / 8; kl_e += KL_THREADS) {
                const int kl_r = kl_e / (KL_BK / 8), kl_c = kl_e % (KL_BK / 8) * 8;
                const int row = kl_m0 + kl_r;
                const int k = kl_k0 + kl_c;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(&kl_as[kl_r][kl_c])), "l"(&A[row * K + k]));
            }
            #pragma unroll
            for (int kl_e = threadIdx.x; kl_e < KL_BK * KL_BN / 8; kl_e += KL_THREADS) {
                const int kl_r = kl_e / (KL_BN / 8), kl_c = kl_e % (KL_BN / 8) * 8;
                const int k = kl_k0 + kl_r;
                const int col = kl_n0 + kl_c;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(&kl_bs[kl_r][kl_c])), "l"(&B[k * N + col]));
            }
            return;
        }
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
    for (int kl_s = 0; kl_s < KL_STAGES - 1; kl_s++) {
        if ((int)kl_s * KL_BK < K) kl_load(kl_s, (int)kl_s * KL_BK);
        asm volatile("cp.async.commit_group;\n");
    }
    for (int kl_k0 = 0, kl_it = 0; kl_k0 < K; kl_k0 += KL_BK, kl_it++) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(KL_STAGES - 2));  // this tile's copies are done
        __syncthreads();
        if (kl_k0 + (KL_STAGES - 1) * KL_BK < K) kl_load((kl_it + KL_STAGES - 1) % KL_STAGES, kl_k0 + (KL_STAGES - 1) * KL_BK);
        asm volatile("cp.async.commit_group;\n");
        auto kl_as = reinterpret_cast<__nv_bfloat16 (*)[KL_BK + 8]>(kl_smem + kl_it % KL_STAGES * KL_AB);
        auto kl_bs = reinterpret_cast<__nv_bfloat16 (*)[KL_BN + 8]>(kl_smem + kl_it % KL_STAGES * KL_AB + KL_BM * (KL_BK + 8) * 2);
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fa[KL_FM];
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> kl_fb[KL_FN];
        #pragma unroll
        for (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16) {
            #pragma unroll
            for (int kl_i = 0; kl_i < KL_FM; kl_i++)
                nvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][kl_kk], KL_BK + 8);
            #pragma unroll
            for (int kl_j = 0; kl_j < KL_FN; kl_j++)
                nvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[kl_kk][kl_wn + 16 * kl_j], KL_BN + 8);
            #pragma unroll
            for (int kl_i = 0; kl_i < KL_FM; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < KL_FN; kl_j++)
                    nvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);
        }
    }
    asm volatile("cp.async.wait_group 0;\n");
    __syncthreads();
    for (int kl_i = 0; kl_i < KL_FM; kl_i++)
        for (int kl_j = 0; kl_j < KL_FN; kl_j++) {
            nvcuda::wmma::store_matrix_sync(&kl_cs[kl_warp][0][0], kl_acc[kl_i][kl_j], 20, nvcuda::wmma::mem_row_major);
            __syncwarp();
            for (int kl_e = kl_lane; kl_e < 256; kl_e += 32) {
                const int row = kl_m0 + kl_wm + 16 * kl_i + kl_e / 16;
                const int col = kl_n0 + kl_wn + 16 * kl_j + kl_e % 16;
                if (row < M && col < N) {
                    float acc = kl_cs[kl_warp][kl_e / 16][kl_e % 16];
                    C[row * N + col] = __float2bfloat16(acc);
                }
            }
            __syncwarp();
        }
}

extern "C" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 block(128);
    dim3 grid((N + 127) / 128, (M + 127) / 128);
    cudaFuncSetAttribute(gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, 56832);
    gemm<<<grid, block, 56832, stream>>>(A, B, C, M, N, K);
}
