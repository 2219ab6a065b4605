// idiom: a naive batched GEMM, one output per thread, the batch on blockIdx.z and per-batch
// pointer locals (const float *Ab = A + b * M * K), a bias + ReLU epilogue.
#include <cuda_runtime.h>

__global__ void bgemm_bias_relu(const float *A, const float *B, const float *bias, float *C, int M, int N, int K)
{
    const int b = blockIdx.z;
    const float *Ab = A + (size_t)b * M * K;
    const float *Bb = B + (size_t)b * K * N;
    float *Cb = C + (size_t)b * M * N;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += Ab[row * K + k] * Bb[k * N + col];
        acc += bias[col];
        Cb[row * N + col] = acc > 0.0f ? acc : 0.0f;
    }
}

extern "C" void launch(const float *A, const float *B, const float *bias, float *C, int batch, int M, int N, int K,
                       cudaStream_t stream)
{
    dim3 threads(16, 16);
    dim3 blocks((N + threads.x - 1) / threads.x, (M + threads.y - 1) / threads.y, batch);
    bgemm_bias_relu<<<blocks, threads, 0, stream>>>(A, B, bias, C, M, N, K);
}
