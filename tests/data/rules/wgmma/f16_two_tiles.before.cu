// test: remove wgmma@gemm_f16:85
// A variant of the wgmma form in another style: f16, one warpgroup of 128 threads owning a 128 x 128
// tile (two 64-row wgmma tiles, FRAG_M = 2), one stage of static shared tiles filled element by
// element, the B descriptor written inside the call, its own names.
#include <cuda_fp16.h>
#include <stdint.h>

constexpr int TM = 128, TN = 128, TK = 64;
constexpr int NT = 128;                        // one warpgroup
constexpr int FM = TM / 64, FN = TN / 8;

__device__ __forceinline__ uint64_t make_desc(uint32_t start, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((start & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
           (uint64_t)1 << 62;
}
__device__ __forceinline__ void proxy_fence()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wg_arrive()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// d += A * B for one m64n128k16 tile of the warpgroup: A (64 x 16) and B (16 x 128) read from
// shared memory through their descriptors, B N-major.
__device__ __forceinline__ void mma64x128(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(desc_a), "l"(desc_b), "r"(1));
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
        proxy_fence();
        __syncthreads();
        const uint32_t a0 = (uint32_t)__cvta_generic_to_shared(sa), b0 = (uint32_t)__cvta_generic_to_shared(sb);
        wg_arrive();
        for (int s = 0; s < TK / 16; s++) {
            for (int i = 0; i < FM; i++)
                mma64x128(c[i], make_desc(a0 + i * 64 * 128 + s * 32, 16, 1024), make_desc(b0 + s * 16 * 128, TK * 128, 1024));
        }
        wg_commit();
        wg_wait0();
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
