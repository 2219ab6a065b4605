// test: remove interior-path@box5_guarded:40
// 5 x 5 box filter, zero outside; the helper takes the edge flag as an argument (not a template one)
// and every thread is guarded by the caller.
#include <cuda_runtime.h>

constexpr int TX = 32, TY = 4;
constexpr int RAD = 2;

__device__ __forceinline__ float box_at(const float* img, int w, int h, int x, int y, bool edge)
{
    float s = 0.0f;
    for (int dy = -RAD; dy <= RAD; dy++) {
        const int yy = y + dy;
        if (edge && (yy < 0 || yy >= h)) continue;
        for (int dx = -RAD; dx <= RAD; dx++) {
            const int xx = x + dx;
            if (!edge || (xx >= 0 && xx < w)) s += img[yy * w + xx];
        }
    }
    return s;
}

__global__ void box5(const float* img, float* out, int w, int h)
{
    const int bx = blockIdx.x * TX, by = blockIdx.y * TY;
    const int x = bx + threadIdx.x, y = by + threadIdx.y;
    const bool interior = bx >= RAD && by >= RAD && bx + TX + RAD <= w && by + TY + RAD <= h;
    float s;
    if (interior) s = box_at(img, w, h, x, y, false);
    else s = box_at(img, w, h, x, y, true);
    if (x < w && y < h) out[y * w + x] = s * (1.0f / 25.0f);
}

__global__ void box5_guarded(const float* img, float* out, int w, int h)
{
    const int bx = blockIdx.x * TX, by = blockIdx.y * TY;
    const int x = bx + threadIdx.x, y = by + threadIdx.y;
    if (y < h && x < w)
        out[y * w + x] = box_at(img, w, h, x, y, true) * (1.0f / 25.0f);
}

extern "C" void launch(const float* img, float* out, int h, int w, cudaStream_t stream)
{
    const dim3 grid((w + TX - 1) / TX, (h + TY - 1) / TY);
    if (w > 4096)
        box5<<<grid, dim3(TX, TY), 0, stream>>>(img, out, w, h);
    else
        box5_guarded<<<grid, dim3(TX, TY), 0, stream>>>(img, out, w, h);
}
