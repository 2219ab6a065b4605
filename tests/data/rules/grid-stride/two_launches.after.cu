// test: apply grid-stride@k:6 waves=16 | remove grid-stride@k:6
#include <cuda_runtime.h>
// two launches in different blocks: the SM query goes to the top of launch()
__global__ void k(float *y, int n)
{
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = 1.f;
}
extern "C" void launch(float *y, int n, cudaStream_t s) {
  int kl_dev = 0, kl_sms = 0;
  cudaGetDevice(&kl_dev);
  cudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);
  if (n > 1000) {
    k<<<((n + 255) / 256 < kl_sms * 16 ? (n + 255) / 256 : kl_sms * 16), 256, 0, s>>>(y, n);
  } else {
    k<<<((n + 127) / 128 < kl_sms * 16 ? (n + 127) / 128 : kl_sms * 16), 128, 0, s>>>(y, n);
  }
}
