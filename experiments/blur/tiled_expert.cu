// blur, expert: k x k cross-correlation of an h x w f32 image, zero padding, same-size output.
//
// Optimizations (each marked where it sits):
//  - smem-tile: the block's TILE_H x TILE_W output tile plus a (K-1) halo staged in shared
//    memory once, loaded row by row (coalesced, no index division)
//  - register-tile: OUT_Y x OUT_X outputs per thread; each input row of OUT_X + K - 1 values
//    is read from shared memory once (as float4) and feeds up to K x OUT_X of them
//  - vectorize: float4 shared-memory reads of the input rows and float4 stores of the output
//    (when w % 4 == 0 and out is 16-byte aligned; scalar guarded stores otherwise)
//  - filter in constant memory: FFMA reads it as an operand at a compile-time offset
//  - the filter size as a template parameter (K = 1, 3, 5, 7) so every loop unrolls and
//    every index is a constant; other k use a plain kernel that reads the filter from global
//  - unroll, launch-bounds, restrict
// The filter is copied to constant memory on the stream before the kernel, so launches
// with different filters must not run concurrently (the gate launches on one stream).
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int BX = 32;                        // threads across
constexpr int BY = 8;                         // threads down
constexpr int THREADS = BX * BY;
constexpr int OUT_X = 8;                      // outputs per thread across (two float4)
static_assert(OUT_X % 4 == 0, "whole float4s across");
constexpr int OUT_Y = 2;                      // outputs per thread down
constexpr int TILE_W = BX * OUT_X;            // output tile per block
constexpr int TILE_H = BY * OUT_Y;
constexpr int MAX_CONST_K = 7;                // largest filter served from constant memory

__constant__ float c_filt[MAX_CONST_K * MAX_CONST_K];

__host__ __device__ constexpr int round4(int v) { return (v + 3) / 4 * 4; }

template <int K>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
blur_tiled(const float* __restrict__ img, float* __restrict__ out, int h, int w, bool vec_store)  // restrict
{
    constexpr int R = K / 2;
    constexpr int NV = round4(OUT_X + K - 1);              // input values a thread reads per row
    constexpr int SW = (TILE_W - OUT_X + NV) > round4(TILE_W + K - 1) ? (TILE_W - OUT_X + NV)
                                                                         : round4(TILE_W + K - 1);
    constexpr int SH = TILE_H + K - 1;
    // smem-tile: output tile plus halo, rows 16-byte aligned
    __shared__ __align__(16) float tile[SH][SW];

    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
    for (int sy = threadIdx.y; sy < SH; sy += BY) {
        const int gy = y0 + sy - R;
        const bool row_in = gy >= 0 && gy < h;
        const float* src = img + (size_t)(row_in ? gy : 0) * w;
        for (int sx = threadIdx.x; sx < SW; sx += BX) {
            const int gx = x0 + sx - R;
            tile[sy][sx] = (row_in && gx >= 0 && gx < w) ? src[gx] : 0.0f;
        }
    }
    __syncthreads();

    // register-tile: OUT_Y x OUT_X outputs per thread
    float acc[OUT_Y][OUT_X];
#pragma unroll
    for (int o = 0; o < OUT_Y; o++)
#pragma unroll
        for (int c = 0; c < OUT_X; c++) acc[o][c] = 0.0f;
    const int cx = threadIdx.x * OUT_X, oy0 = threadIdx.y * OUT_Y;
    // Input row ir (relative to this thread's first output row) meets filter row ir - o of output o.
#pragma unroll
    for (int ir = 0; ir < OUT_Y + K - 1; ir++) {
        float v[NV];
        // vectorize: float4 shared-memory reads
#pragma unroll
        for (int q = 0; q < NV / 4; q++) {
            const float4 t = *reinterpret_cast<const float4*>(&tile[oy0 + ir][cx + 4 * q]);
            v[4 * q + 0] = t.x;
            v[4 * q + 1] = t.y;
            v[4 * q + 2] = t.z;
            v[4 * q + 3] = t.w;
        }
#pragma unroll
        for (int o = 0; o < OUT_Y; o++) {
            const int i = ir - o;
            if (i >= 0 && i < K) {
#pragma unroll
                for (int j = 0; j < K; j++) {
                    const float f = c_filt[i * K + j];
#pragma unroll
                    for (int c = 0; c < OUT_X; c++) acc[o][c] += f * v[c + j];
                }
            }
        }
    }

    const int gx = x0 + cx;
#pragma unroll
    for (int o = 0; o < OUT_Y; o++) {
        const int gy = y0 + oy0 + o;
        if (gy >= h) break;
        float* row = out + (size_t)gy * w;
        if (vec_store && gx + OUT_X <= w) {
            // vectorize: float4 stores
#pragma unroll
            for (int q = 0; q < OUT_X / 4; q++)
                *reinterpret_cast<float4*>(row + gx + 4 * q) =
                    make_float4(acc[o][4 * q], acc[o][4 * q + 1], acc[o][4 * q + 2], acc[o][4 * q + 3]);
        } else {
#pragma unroll
            for (int c = 0; c < OUT_X; c++)
                if (gx + c < w) row[gx + c] = acc[o][c];
        }
    }
}

// Any other k: one output per thread, image and filter from global memory (through L1/L2).
constexpr int GX = 32, GY = 8;
__global__ void __launch_bounds__(GX * GY)
blur_generic(const float* __restrict__ img, const float* __restrict__ filt, float* __restrict__ out, int h, int w,
             int k)
{
    const int x = blockIdx.x * GX + threadIdx.x;
    const int y = blockIdx.y * GY + threadIdx.y;
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
    const bool vec_store = w % 4 == 0 && (uintptr_t)out % 16 == 0;
    blur_tiled<K><<<grid, dim3(BX, BY), 0, stream>>>(img, out, h, w, vec_store);
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
        const dim3 grid((w + GX - 1) / GX, (h + GY - 1) / GY);
        blur_generic<<<grid, dim3(GX, GY), 0, stream>>>(img, filt, out, h, w, k);
    }
    }
}
