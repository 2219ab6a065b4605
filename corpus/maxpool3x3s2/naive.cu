// maxpool3x3s2, naive: a linearized 1-D grid (64-bit flat index split into plane, row and
// column), the window walked with while loops that skip the padding.
#include <cuda_runtime.h>
#include <math.h>

__global__ void pool3x3_s2(const float* in, float* out, int planes, int h, int w, int oh, int ow)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)planes * oh * ow;
    if (i >= total) return;
    const int ox = (int)(i % ow);
    const long long t = i / ow;
    const int oy = (int)(t % oh);
    const int p = (int)(t / oh);
    const int y0 = oy * 2 - 1, x0 = ox * 2 - 1;
    float best = -INFINITY;
    int dy = 0;
    while (dy < 3) {
        const int y = y0 + dy;
        if (y >= 0 && y < h) {
            int dx = 0;
            while (dx < 3) {
                const int x = x0 + dx;
                if (x >= 0 && x < w) best = fmaxf(best, in[((long long)p * h + y) * w + x]);
                ++dx;
            }
        }
        ++dy;
    }
    out[i] = best;
}

extern "C" void launch(const float* in, float* out, int planes, int h, int w, cudaStream_t stream)
{
    const int oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
    const long long total = (long long)planes * oh * ow;
    const int threads = 256;
    pool3x3_s2<<<(unsigned)((total + threads - 1) / threads), threads, 0, stream>>>(in, out, planes, h, w, oh, ow);
}
