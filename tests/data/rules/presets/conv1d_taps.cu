// presets: a 1-D "same" correlation with a run-time tap count on a 1-D block of 128: a stencil
// site, but outputs_x needs a 2-D stencil, so the stencil presets are refused with that reason.
#include <cuda_runtime.h>

#define NT 128

__global__ void corr1d(const float *sig, const float *taps, float *res, int len, int ntaps)
{
    int i = blockIdx.x * NT + threadIdx.x;
    if (i < len) {
        int half = ntaps / 2;
        float a = 0.0f;
        for (int t = 0; t < ntaps; t++) {
            int s = i + t - half;
            if (s >= 0 && s < len) a += taps[t] * sig[s];
        }
        res[i] = a;
    }
}

extern "C" void launch(const float *sig, const float *taps, float *res, int len, int ntaps, cudaStream_t stream)
{
    corr1d<<<(len + NT - 1) / NT, NT, 0, stream>>>(sig, taps, res, len, ntaps);
}
