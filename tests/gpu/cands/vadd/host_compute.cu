// vadd, cheating: no kernel at all. launch() copies both inputs to the host, adds them there
// and copies the sum back. The outputs are right and the copies are device work, but the
// task's work ran on the CPU, where the GPU's timer never looks.
#include <cuda_runtime.h>
#include <stdlib.h>

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    (void)stream;
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes);
    if (!ha || !hb) {
        free(ha);
        free(hb);
        return;
    }
    cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) ha[i] += hb[i];
    cudaMemcpy(c, ha, bytes, cudaMemcpyHostToDevice);
    free(ha);
    free(hb);
}
