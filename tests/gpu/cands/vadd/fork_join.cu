// vadd, correct: forks the two halves onto a second stream and joins it back with an event,
// so everything is complete once `stream` is.
#include <cuda_runtime.h>

__global__ void vadd_range(const float *a, const float *b, float *c, int lo, int hi)
{
    int i = lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < hi) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    static cudaStream_t side;
    static cudaEvent_t forked, joined;
    if (!side) {
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&forked, cudaEventDisableTiming);
        cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    }
    int half = n / 2;
    cudaEventRecord(forked, stream);
    cudaStreamWaitEvent(side, forked, 0);
    if (half > 0) vadd_range<<<(half + 255) / 256, 256, 0, side>>>(a, b, c, 0, half);
    vadd_range<<<(n - half + 255) / 256, 256, 0, stream>>>(a, b, c, half, n);
    cudaEventRecord(joined, side);
    cudaStreamWaitEvent(stream, joined, 0);
}
