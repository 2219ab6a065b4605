// presets: a batched bf16 product, one batch per blockIdx.z, through per-batch pointer locals.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void bmm_bf16(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K)
{
    const int batch = blockIdx.z;
    const __nv_bfloat16 *Ab = A + (size_t)batch * M * K;
    const __nv_bfloat16 *Bb = B + (size_t)batch * K * N;
    float *Cb = C + (size_t)batch * M * N;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += __bfloat162float(Ab[row * K + k]) * __bfloat162float(Bb[k * N + col]);
        Cb[row * N + col] = acc;
    }
}

extern "C" void launch(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int batches, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16, batches);
    bmm_bf16<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
