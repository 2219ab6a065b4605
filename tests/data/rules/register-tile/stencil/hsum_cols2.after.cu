// test: remove register-tile@hsum5:18:COLS
// horizontal 5-tap sum (weights in a parameter), zero outside; each thread computes COLS adjacent outputs
// of a row from one window of COLS + 4 values, a 1-D grid over the row and blockIdx.y over the rows
#include <cuda_runtime.h>

#define COLS 1
#define THREADS 128

__global__ void hsum5(const float* __restrict__ in, const float* __restrict__ wt, float* __restrict__ out, int w)
{
    const int row = blockIdx.y;
    const int x0 = (blockIdx.x * THREADS + threadIdx.x) * COLS;
    float win[COLS + 4];
    for (int e = 0; e < COLS + 4; e++) {
        const int xx = x0 + e - 2;
        win[e] = xx >= 0 && xx < w ? in[(size_t)row * w + xx] : 0.0f;
    }
    for (int c = 0; c < COLS; c++) {
        float s = 0.0f;
        for (int t = 0; t < 5; t++) s += wt[t] * win[c + t];
        if (x0 + c < w) out[(size_t)row * w + x0 + c] = s;
    }
}

extern "C" void launch(const float* in, const float* wt, float* out, int h, int w, cudaStream_t stream)
{
    hsum5<<<dim3((w + THREADS * COLS - 1) / (THREADS * COLS), h), THREADS, 0, stream>>>(in, wt, out, w);
}
