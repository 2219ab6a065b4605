// test: apply vectorize@classify:7 width=4 | remove vectorize@classify:9
// A body that declares a local: each of the four copies keeps its own braces (uchar4 loads).
#define BLOCK 128

__global__ void classify(const unsigned char* pixels, int* dark, int* bright, int count, int lo, int hi)
{
    for (int p = BLOCK * blockIdx.x + threadIdx.x; p < count; p += BLOCK * gridDim.x) {
        const int v = pixels[p];
        if (v < lo) atomicAdd(dark, 1);
        else if (v > hi) atomicAdd(bright, 1);
    }
}
