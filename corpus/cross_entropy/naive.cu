// cross_entropy, naive: one thread per sample. A row is wrapped in a small view struct with an
// operator[]; helper device functions compute its max and its log-sum-exp with while loops.
#include <cuda_runtime.h>
#include <stdint.h>

struct RowView {
    const float* data;
    int length;
    __device__ float operator[](int i) const { return data[i]; }
};

__device__ float row_max(const RowView& r)
{
    float m = r[0];
    int i = 1;
    while (i < r.length) {
        m = fmaxf(m, r[i]);
        ++i;
    }
    return m;
}

__device__ float row_logsumexp(const RowView& r)
{
    const float m = row_max(r);
    float s = 0.0f;
    int i = 0;
    while (i < r.length) {
        s += expf(r[i] - m);
        ++i;
    }
    return m + logf(s);
}

__global__ void xent_forward(const float* logits, const int32_t* target, float* loss, int batch, int classes)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < batch) {
        const RowView row{logits + (size_t)b * classes, classes};
        loss[b] = row_logsumexp(row) - row[target[b]];
    }
}

extern "C" void launch(const float* logits, const int32_t* target, float* loss, int batch, int classes,
                       cudaStream_t stream)
{
    xent_forward<<<(batch + 255) / 256, 256, 0, stream>>>(logits, target, loss, batch, classes);
}
