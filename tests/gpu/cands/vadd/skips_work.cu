// vadd, cheating: launches nothing at all.
#include <cuda_runtime.h>

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    (void)a, (void)b, (void)c, (void)n, (void)stream;
}
