// conv1d_causal_dw, naive: the filter width is a template parameter for the common widths
// (3 and 4, picked by a switch in launch()) with a runtime-width kernel for the rest; blockIdx.y
// is the channel, one thread per output time step, everything from global memory.
#include <cuda_runtime.h>

template <int KW>
__global__ void causal_dwconv_fixed(const float* x, const float* w, float* y, int length)
{
    const int ch = blockIdx.y;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= length) return;
    const float* xc = x + (size_t)ch * length;
    const float* wc = w + ch * KW;
    float acc = 0.0f;
    for (int j = 0; j < KW; ++j) {
        const int src = t - (KW - 1) + j;
        if (src >= 0) acc += wc[j] * xc[src];
    }
    y[(size_t)ch * length + t] = acc;
}

__global__ void causal_dwconv_any(const float* x, const float* w, float* y, int length, int kw)
{
    const int ch = blockIdx.y;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= length) return;
    const float* xc = x + (size_t)ch * length;
    const float* wc = w + (size_t)ch * kw;
    float acc = 0.0f;
    for (int j = 0; j < kw; ++j) {
        const int src = t - (kw - 1) + j;
        if (src >= 0) acc += wc[j] * xc[src];
    }
    y[(size_t)ch * length + t] = acc;
}

extern "C" void launch(const float* x, const float* w, float* y, int channels, int length, int kw,
                       cudaStream_t stream)
{
    const dim3 block(256);
    const dim3 grid((length + 255) / 256, channels);
    switch (kw) {
    case 3: causal_dwconv_fixed<3><<<grid, block, 0, stream>>>(x, w, y, length); break;
    case 4: causal_dwconv_fixed<4><<<grid, block, 0, stream>>>(x, w, y, length); break;
    default: causal_dwconv_any<<<grid, block, 0, stream>>>(x, w, y, length, kw); break;
    }
}
