// vadd, cheating: the same host computation between copies, with an empty kernel launched on
// the given stream as a decoy, so that "a kernel ran" holds. The window's host time beyond its
// device work (the decoy, not the copies to and from the host) gives it away.
#include <cuda_runtime.h>
#include <stdlib.h>

__global__ void decoy(void) {}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes);
    if (!ha || !hb) {
        free(ha);
        free(hb);
        return;
    }
    decoy<<<1, 32, 0, stream>>>();
    cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) ha[i] += hb[i];
    cudaMemcpy(c, ha, bytes, cudaMemcpyHostToDevice);
    free(ha);
    free(hb);
}
