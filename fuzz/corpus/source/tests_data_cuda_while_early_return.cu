// while_early_return: early returns, a while loop over a linked list of indices,
// break and continue, and a do-while retry loop.
#include <cuda_runtime.h>

__global__ void follow_chain(const int *__restrict__ next, const float *__restrict__ w, float *__restrict__ out,
                             int n, int max_steps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (next[i] < 0) {
        out[i] = 0.0f;
        return;
    }
    float sum = 0.0f;
    int cur = i, steps = 0;
    while (cur >= 0 && steps < max_steps) {
        if (w[cur] < 0.0f) {
            cur = next[cur];
            ++steps;
            continue;
        }
        sum += w[cur];
        if (sum > 1.0e6f) break;
        cur = next[cur];
        ++steps;
    }
    int tries = 0;
    do {
        sum *= 0.5f;
    } while (sum > 1.0f && ++tries < 8);
    out[i] = sum;
}

extern "C" void launch(const int *next, const float *w, float *out, int n, int max_steps, cudaStream_t stream)
{
    follow_chain<<<(n + 255) / 256, 256, 0, stream>>>(next, w, out, n, max_steps);
}
