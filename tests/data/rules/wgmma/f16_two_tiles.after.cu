// test: remove wgmma@gemm_f16:85
// A variant of the wgmma form in another style: f16, one warpgroup of 128 threads owning a 128 x 128
// tile (two 64-row wgmma tiles, FRAG_M = 2), one stage of static shared tiles filled element by
// element, the B descriptor written inside the call, its own names.
#include <cuda_fp16.h>
#include <stdint.h>

constexpr int TM = 128, TN = 128, TK = 64;
constexpr int NT = 128;                        // one warpgroup
constexpr int FM = TM / 64, FN = TN / 8;



// wgmma removed: its tiles read by per-warp mma.sync. kl_sw128: the element at byte offset off (as the
// descriptor lays the tile out, before the swizzle) past the descriptor's start address; the 128-byte
// swizzle XORs bits 4-6 of the shared address with bits 7-9.
__device__ __forceinline__ const __half* kl_sw128(uint32_t start, uint32_t off)
{
    const uint32_t a = start + off;
    return reinterpret_cast<const __half*>(__cvta_shared_to_generic(a ^ (a >> 3 & 0x70)));
}
// ldmatrix: four 8 x 8 matrices of 16-bit elements, row addresses from lanes 8 m .. 8 m + 7
__device__ __forceinline__ void kl_ldmatrix_x4(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void kl_ldmatrix_x4_trans(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p)));
}
// mma.sync m16n8k16: d += a * b (f16 inputs, f32 accumulators)
__device__ __forceinline__ void kl_mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(NT) gemm_f16(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    __shared__ __align__(1024) __half sa[TM * TK];   // 128-byte swizzled rows of 64 k
    __shared__ __align__(1024) __half sb[TK * TN];   // 64-column segments of TK k-rows
    const int lane = threadIdx.x & 31;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    float c[FM][FN][4];
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++)
            for (int e = 0; e < 4; e++) c[i][j][e] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int x = threadIdx.x; x < TM * TK; x += NT) {
            const int r = x / TK, k = x % TK;
            const int at = r * 64 + ((k / 8) ^ (r % 8)) * 8 + k % 8;
            sa[at] = (m0 + r < M && k0 + k < K) ? A[(size_t)(m0 + r) * K + k0 + k] : __float2half(0.0f);
        }
        for (int x = threadIdx.x; x < TK * TN; x += NT) {
            const int k = x / TN, n = x % TN;
            const int at = (n / 64) * (TK * 64) + k * 64 + (((n % 64) / 8) ^ (k % 8)) * 8 + n % 8;
            sb[at] = (k0 + k < K && n0 + n < N) ? B[(size_t)(k0 + k) * N + n0 + n] : __float2half(0.0f);
        }
        __syncthreads();
        const uint32_t a0 = (uint32_t)__cvta_generic_to_shared(sa), b0 = (uint32_t)__cvta_generic_to_shared(sb);
        for (int s = 0; s < TK / 16; s++) {
            uint32_t kl_af[FM][4];
            uint32_t kl_bf[FN][2];
            for (int i = 0; i < FM; i++) {
                const int kl_ar = 16 * (threadIdx.x / 32 % 4) + lane % 16;
                const int kl_ak = lane / 16 * 8;
                kl_ldmatrix_x4(kl_af[i], kl_sw128(a0 + i * 64 * 128 + s * 32, kl_ar / 8 * (1024) + kl_ar % 8 * 128 + kl_ak * 2));
            }
            for (int kl_nj = 0; kl_nj < FN / 2; kl_nj++) {
                const int kl_bk = lane % 16;
                const int kl_bn = kl_nj * 16 + lane / 16 * 8;
                uint32_t kl_b[4];
                kl_ldmatrix_x4_trans(kl_b, kl_sw128(b0 + s * 16 * 128, kl_bn / 64 * (TK * 128) + kl_bk / 8 * (1024) + kl_bk % 8 * 128 + kl_bn % 64 * 2));
                kl_bf[2 * kl_nj][0] = kl_b[0];
                kl_bf[2 * kl_nj][1] = kl_b[1];
                kl_bf[2 * kl_nj + 1][0] = kl_b[2];
                kl_bf[2 * kl_nj + 1][1] = kl_b[3];
            }
            // tensor-core: mma.sync m16n8k16 (wgmma removed): warp w of the warpgroup multiplies rows 16 w to
            // 16 w + 15 of each 64-row tile into the same accumulators
            for (int i = 0; i < FM; i++)
                for (int kl_ni = 0; kl_ni < FN; kl_ni++) kl_mma_f16(c[i][kl_ni], kl_af[i], kl_bf[kl_ni][0], kl_bf[kl_ni][1]);
        }
        __syncthreads();
    }
    const int w = threadIdx.x / 32;
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++)
            for (int e = 0; e < 4; e++) {
                const int r = m0 + i * 64 + w * 16 + lane / 4 + 8 * (e / 2), col = n0 + j * 8 + 2 * (lane % 4) + e % 2;
                if (r < M && col < N) C[(size_t)r * N + col] = __float2half(c[i][j][e]);
            }
}

extern "C" void launch(const __half* A, const __half* B, __half* C, int M, int N, int K, cudaStream_t stream)
{
    if (M <= 0 || N <= 0) return;
    gemm_f16<<<dim3((N + TN - 1) / TN, (M + TM - 1) / TM), NT, 0, stream>>>(A, B, C, M, N, K);
}
