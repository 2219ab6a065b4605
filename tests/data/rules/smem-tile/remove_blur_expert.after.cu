// test: remove smem-tile@blur_tiled:43:tile
// blur, expert: k x k cross-correlation of an h x w f32 image, zero padding, same-size output.
//
// Optimizations (each marked where it sits):
//  - smem-tile: the block's TILE_H x TILE_W output tile plus a (K-1) halo staged in shared
//    memory once; every input pixel is then read from shared memory K*K times at most
//  - filter in constant memory: FFMA reads it as an operand (c[][]) at a compile-time offset
//  - register-tile: OUT_Y x 1 outputs per thread, down a column, so each row of K inputs
//    loaded from shared memory feeds up to OUT_Y outputs
//  - the filter size as a template parameter (K = 1, 3, 5, 7) so every loop unrolls and
//    every index is a constant; other k use a plain kernel that reads the filter from global
//  - unroll, launch-bounds, restrict
// The filter is copied to constant memory on the stream before the kernel, so launches
// with different filters must not run concurrently (the gate launches on one stream).
#include <cuda_runtime.h>

constexpr int BX = 32;                        // threads across; one output column each
constexpr int BY = 8;                         // threads down
constexpr int THREADS = BX * BY;
constexpr int OUT_Y = 8;                      // outputs per thread, down a column
constexpr int TILE_W = BX;                    // output tile per block
constexpr int TILE_H = BY * OUT_Y;
constexpr int MAX_CONST_K = 7;                // largest filter served from constant memory

__constant__ float c_filt[MAX_CONST_K * MAX_CONST_K];

template <int K>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
blur_tiled(const float* __restrict__ img, float* __restrict__ out, int h, int w)  // restrict
{
    constexpr int R = K / 2;
    constexpr int SW = TILE_W + K - 1;        // staged tile, halo included
    constexpr int SH = TILE_H + K - 1;
    constexpr int LOAD_ITERS = (SH * SW + THREADS - 1) / THREADS;

    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
    const int tid = threadIdx.y * BX + threadIdx.x;
    // unroll
    // smem-tile removed: 'tile' reads global memory where the tile was loaded from it
    auto tile = [&](int sy, int sx) -> float {
        const int gy = y0 + sy - R, gx = x0 + sx - R;
        return (gy >= 0 && gy < h && gx >= 0 && gx < w) ? img[(size_t)gy * w + gx] : 0.0f;
    };

    // register-tile: OUT_Y x 1 outputs per thread
    float acc[OUT_Y];
#pragma unroll
    for (int o = 0; o < OUT_Y; o++) acc[o] = 0.0f;
    const int tx = threadIdx.x, oy0 = threadIdx.y * OUT_Y;
    // Input row ir (relative to this thread's first output row) meets filter row ir - o of output o.
#pragma unroll
    for (int ir = 0; ir < OUT_Y + K - 1; ir++) {
        float v[K];
#pragma unroll
        for (int j = 0; j < K; j++) v[j] = tile(oy0 + ir, tx + j);
#pragma unroll
        for (int o = 0; o < OUT_Y; o++) {
            const int i = ir - o;
            if (i >= 0 && i < K) {
#pragma unroll
                for (int j = 0; j < K; j++) acc[o] += c_filt[i * K + j] * v[j];
            }
        }
    }

    const int gx = x0 + tx;
#pragma unroll
    for (int o = 0; o < OUT_Y; o++) {
        const int gy = y0 + oy0 + o;
        if (gy < h && gx < w) out[(size_t)gy * w + gx] = acc[o];
    }
}

// Any other k: one output per thread, image and filter from global memory (through L1/L2).
__global__ void __launch_bounds__(THREADS)
blur_generic(const float* __restrict__ img, const float* __restrict__ filt, float* __restrict__ out, int h, int w,
             int k)
{
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y = blockIdx.y * BY + threadIdx.y;
    if (x >= w || y >= h) return;
    const int r = k / 2;
    float acc = 0.0f;
    for (int i = 0; i < k; i++) {
        const int yy = y + i - r;
        if (yy < 0 || yy >= h) continue;
        for (int j = 0; j < k; j++) {
            const int xx = x + j - r;
            if (xx >= 0 && xx < w) acc += filt[i * k + j] * img[(size_t)yy * w + xx];
        }
    }
    out[(size_t)y * w + x] = acc;
}

template <int K>
static void launch_tiled(const float* img, const float* filt, float* out, int h, int w, cudaStream_t stream)
{
    // filter in constant memory, copied on the stream
    cudaMemcpyToSymbolAsync(c_filt, filt, K * K * sizeof(float), 0, cudaMemcpyDeviceToDevice, stream);
    const dim3 grid((w + TILE_W - 1) / TILE_W, (h + TILE_H - 1) / TILE_H);
    blur_tiled<K><<<grid, dim3(BX, BY), 0, stream>>>(img, out, h, w);
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, int k, cudaStream_t stream)
{
    if (h <= 0 || w <= 0 || k <= 0) return;
    switch (k) {
    case 1: launch_tiled<1>(img, filt, out, h, w, stream); break;
    case 3: launch_tiled<3>(img, filt, out, h, w, stream); break;
    case 5: launch_tiled<5>(img, filt, out, h, w, stream); break;
    case 7: launch_tiled<7>(img, filt, out, h, w, stream); break;
    default: {
        const dim3 grid((w + BX - 1) / BX, (h + BY - 1) / BY);
        blur_generic<<<grid, dim3(BX, BY), 0, stream>>>(img, filt, out, h, w, k);
    }
    }
}
