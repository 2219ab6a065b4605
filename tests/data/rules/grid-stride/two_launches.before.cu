// test: apply grid-stride@k:6 waves=16 | remove grid-stride@k:6
#include <cuda_runtime.h>
// two launches in different blocks: the SM query goes to the top of launch()
__global__ void k(float *y, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.f;
}
extern "C" void launch(float *y, int n, cudaStream_t s) {
  if (n > 1000) {
    k<<<(n + 255) / 256, 256, 0, s>>>(y, n);
  } else {
    k<<<(n + 127) / 128, 128, 0, s>>>(y, n);
  }
}
