// test: apply vectorize@classify:7 width=4 | remove vectorize@classify:9
// A body that declares a local: each of the four copies keeps its own braces (uchar4 loads).
#define BLOCK 128

__global__ void classify(const unsigned char* pixels, int* dark, int* bright, int count, int lo, int hi)
{
    // vectorize: 4 elements per load of 'pixels' (uchar4); the loop below does the last count % 4, or all when an address is not aligned
    const int nv = (reinterpret_cast<unsigned long long>(pixels) % 4 == 0) ? count / 4 : 0;
    for (int v2 = BLOCK * blockIdx.x + threadIdx.x; v2 < nv; v2 += BLOCK * gridDim.x) {
        const uchar4 pixels_v = reinterpret_cast<const uchar4*>(pixels)[v2];
        {
            const int v = pixels_v.x;
            if (v < lo) atomicAdd(dark, 1);
            else if (v > hi) atomicAdd(bright, 1);
        }
        {
            const int v = pixels_v.y;
            if (v < lo) atomicAdd(dark, 1);
            else if (v > hi) atomicAdd(bright, 1);
        }
        {
            const int v = pixels_v.z;
            if (v < lo) atomicAdd(dark, 1);
            else if (v > hi) atomicAdd(bright, 1);
        }
        {
            const int v = pixels_v.w;
            if (v < lo) atomicAdd(dark, 1);
            else if (v > hi) atomicAdd(bright, 1);
        }
    }
    for (int p = BLOCK * blockIdx.x + threadIdx.x + nv * 4; p < count; p += BLOCK * gridDim.x) {
        const int v = pixels[p];
        if (v < lo) atomicAdd(dark, 1);
        else if (v > hi) atomicAdd(bright, 1);
    }
}
