// test: remove smem-tile@sgemm_tiles:43:put
// float4 staging of our own: load() fills float4 registers element by element (zeros outside),
// put() writes A transposed lane by lane (As[kq + 0..3][r]) and B with a float4 store macro; the
// compute reads four rows of A and four columns of B with a float4 read macro; one stage, a
// padded A tile, template tile sizes, #pragma unroll
#include <cuda_runtime.h>

#define LD4(x) (*reinterpret_cast<const float4*>(&(x)))
#define ST4(x, v) (*reinterpret_cast<float4*>(&(x)) = (v))

template <int BM, int BN, int BK, int NT>
__global__ void sgemm_tiles(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,
                            int K)
{
    constexpr int AV = BM * BK / 4 / NT, BV = BK * BN / 4 / NT;
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int ty = tid / (BN / 4), tx = tid % (BN / 4);
    float4 ga[AV], gb[BV];

    auto load = [&](int k0) {
#pragma unroll
        for (int v = 0; v < AV; ++v) {
            const int r = (tid + v * NT) / (BK / 4), kq = (tid + v * NT) % (BK / 4) * 4;
            const bool in = m0 + r < M;
            ga[v].x = in && k0 + kq + 0 < K ? A[(size_t)(m0 + r) * K + k0 + kq + 0] : 0.0f;
            ga[v].y = in && k0 + kq + 1 < K ? A[(size_t)(m0 + r) * K + k0 + kq + 1] : 0.0f;
            ga[v].z = in && k0 + kq + 2 < K ? A[(size_t)(m0 + r) * K + k0 + kq + 2] : 0.0f;
            ga[v].w = in && k0 + kq + 3 < K ? A[(size_t)(m0 + r) * K + k0 + kq + 3] : 0.0f;
        }
#pragma unroll
        for (int v = 0; v < BV; ++v) {
            const int kr = (tid + v * NT) / (BN / 4), c = (tid + v * NT) % (BN / 4) * 4;
            const bool in = k0 + kr < K;
            gb[v].x = in && n0 + c + 0 < N ? B[(size_t)(k0 + kr) * N + n0 + c + 0] : 0.0f;
            gb[v].y = in && n0 + c + 1 < N ? B[(size_t)(k0 + kr) * N + n0 + c + 1] : 0.0f;
            gb[v].z = in && n0 + c + 2 < N ? B[(size_t)(k0 + kr) * N + n0 + c + 2] : 0.0f;
            gb[v].w = in && n0 + c + 3 < N ? B[(size_t)(k0 + kr) * N + n0 + c + 3] : 0.0f;
        }
    };
    auto put = [&]() {
#pragma unroll
        for (int v = 0; v < AV; ++v) {
            const int r = (tid + v * NT) / (BK / 4), kq = (tid + v * NT) % (BK / 4) * 4;
            As[kq + 0][r] = ga[v].x;
            As[kq + 1][r] = ga[v].y;
            As[kq + 2][r] = ga[v].z;
            As[kq + 3][r] = ga[v].w;
        }
#pragma unroll
        for (int v = 0; v < BV; ++v) ST4(Bs[(tid + v * NT) / (BN / 4)][(tid + v * NT) % (BN / 4) * 4], gb[v]);
    };

    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load(k0);
        put();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a = LD4(As[kk][ty * 4]);
            const float4 b = LD4(Bs[kk][tx * 4]);
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            if (m0 + ty * 4 + i < M && n0 + tx * 4 + j < N) C[(size_t)(m0 + ty * 4 + i) * N + n0 + tx * 4 + j] = acc[i][j];
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 grid((N + 63) / 64, (M + 63) / 64);
    sgemm_tiles<64, 64, 16, 256><<<grid, 256, 0, stream>>>(A, B, C, M, N, K);
}
