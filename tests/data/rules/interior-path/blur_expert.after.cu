// blur, expert: k x k cross-correlation of an h x w f32 image, zero padding, same-size output.
//
// Optimizations (each marked where it sits):
//  - register-tile: OUT_X x OUT_Y = 4 x 8 outputs per thread; each input row of OUT_X + K - 1
//    values is read once (as float4s) and feeds up to K x OUT_X of them
//  - vectorize: 16-byte loads of the input rows and 16-byte stores of the output (when w % 4 == 0
//    and both pointers are 16-byte aligned; element-wise guarded accesses otherwise)
//  - no shared memory: neighbouring threads' row loads overlap, and L1 serves the overlap
//  - interior blocks: a block whose rows and columns (with the halo) lie inside the image takes
//    a path with no bounds test at all; the blocks along the edges take the tested path
//  - filter in constant memory: FFMA reads it as an operand at a compile-time offset
//  - the filter size as a template parameter (K = 1, 3, 5, 7) so every loop unrolls and
//    every index is a constant; other k use a plain kernel that reads the filter from global
//  - unroll, launch-bounds, restrict
// The filter is copied to constant memory on the stream before the kernel, so launches
// with different filters must not run concurrently (the gate launches on one stream).
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int BX = 64;                        // threads across
constexpr int BY = 2;                         // threads down
constexpr int THREADS = BX * BY;
constexpr int OUT_X = 4;                      // outputs per thread across (one float4)
constexpr int OUT_Y = 8;                      // outputs per thread down
constexpr int TILE_W = BX * OUT_X;            // output tile per block
constexpr int TILE_H = BY * OUT_Y;
constexpr int MAX_CONST_K = 7;                // largest filter served from constant memory
constexpr int HALO = 4;                       // columns read each side: one float4 (K / 2 <= 3)
constexpr int NV = OUT_X + 2 * HALO;          // values of an input row a thread reads
static_assert(OUT_X == 4 && MAX_CONST_K / 2 < HALO, "one float4 per thread and row, one each side");

__constant__ float c_filt[MAX_CONST_K * MAX_CONST_K];

// One thread's OUT_Y x OUT_X outputs at rows y0.., columns x..x+3. EDGE: every access is tested
// against the image; otherwise none is. VEC: rows are read and written as float4s.
template <int K, bool VEC, bool EDGE>
__device__ __forceinline__ void blur_rows(const float* __restrict__ img, float* __restrict__ out, int h, int w,
                                          int x, int y0)
{
    constexpr int R = K / 2;
    // register-tile: OUT_Y x OUT_X outputs per thread
    float acc[OUT_Y][OUT_X];
#pragma unroll
    for (int o = 0; o < OUT_Y; o++)
#pragma unroll
        for (int c = 0; c < OUT_X; c++) acc[o][c] = 0.0f;
    // Input row ir (relative to this thread's first output row) meets filter row ir - o of output o.
#pragma unroll
    for (int ir = 0; ir < OUT_Y + K - 1; ir++) {
        const int gy = y0 + ir - R;
        const bool row_in = !EDGE || (gy >= 0 && gy < h);
        const float* src = img + (size_t)(row_in ? gy : 0) * w + x - HALO;
        float v[NV];
        if (VEC) {
            // vectorize: 16-byte loads, the row's float4 left of x, at x and right of it
#pragma unroll
            for (int q = 0; q < NV / 4; q++) {
                const int gx = x - HALO + 4 * q;
                float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (!EDGE || (row_in && gx >= 0 && gx < w)) t = __ldg(reinterpret_cast<const float4*>(src) + q);
                v[4 * q + 0] = t.x;
                v[4 * q + 1] = t.y;
                v[4 * q + 2] = t.z;
                v[4 * q + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < NV; e++) {
                const int gx = x - HALO + e;
                v[e] = !EDGE || (row_in && gx >= 0 && gx < w) ? src[e] : 0.0f;
            }
        }
#pragma unroll
        for (int o = 0; o < OUT_Y; o++) {
            const int i = ir - o;
            if (i >= 0 && i < K) {
#pragma unroll
                for (int j = 0; j < K; j++) {
                    const float f = c_filt[i * K + j];
#pragma unroll
                    for (int c = 0; c < OUT_X; c++) acc[o][c] += f * v[HALO - R + c + j];
                }
            }
        }
    }

#pragma unroll
    for (int o = 0; o < OUT_Y; o++) {
        const int gy = y0 + o;
        if (EDGE && gy >= h) break;
        float* row = out + (size_t)gy * w;
        if (VEC) {
            // vectorize: float4 stores
            *reinterpret_cast<float4*>(row + x) = make_float4(acc[o][0], acc[o][1], acc[o][2], acc[o][3]);
        } else {
#pragma unroll
            for (int c = 0; c < OUT_X; c++)
                if (!EDGE || x + c < w) row[x + c] = acc[o][c];
        }
    }
}

// VEC: w % 4 == 0 and both pointers 16-byte aligned, so every row is read and written as float4s
template <int K, bool VEC>
// launch-bounds
__global__ void __launch_bounds__(THREADS)
blur_reg(const float* __restrict__ img, float* __restrict__ out, int h, int w)  // restrict
{
    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
    const int x = x0 + threadIdx.x * OUT_X, y = y0 + threadIdx.y * OUT_Y;
    if (x < w)
        blur_rows<K, VEC, true>(img, out, h, w, x, y);
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
static void launch_reg(const float* img, const float* filt, float* out, int h, int w, cudaStream_t stream)
{
    // filter in constant memory, copied on the stream
    cudaMemcpyToSymbolAsync(c_filt, filt, K * K * sizeof(float), 0, cudaMemcpyDeviceToDevice, stream);
    const dim3 grid((w + TILE_W - 1) / TILE_W, (h + TILE_H - 1) / TILE_H);
    if (w % 4 == 0 && (uintptr_t)img % 16 == 0 && (uintptr_t)out % 16 == 0)
        blur_reg<K, true><<<grid, dim3(BX, BY), 0, stream>>>(img, out, h, w);
    else
        blur_reg<K, false><<<grid, dim3(BX, BY), 0, stream>>>(img, out, h, w);
}

extern "C" void launch(const float* img, const float* filt, float* out, int h, int w, int k, cudaStream_t stream)
{
    if (h <= 0 || w <= 0 || k <= 0) return;
    switch (k) {
    case 1: launch_reg<1>(img, filt, out, h, w, stream); break;
    case 3: launch_reg<3>(img, filt, out, h, w, stream); break;
    case 5: launch_reg<5>(img, filt, out, h, w, stream); break;
    case 7: launch_reg<7>(img, filt, out, h, w, stream); break;
    default: {
        const dim3 grid((w + GX - 1) / GX, (h + GY - 1) / GY);
        blur_generic<<<grid, dim3(GX, GY), 0, stream>>>(img, filt, out, h, w, k);
    }
    }
}
