/* log_softmax reference: per row, lse = max + log(sum exp(x - max)), output = x - lse; float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *input, double *output, int outer, int dim)
{
    for (int64_t r = 0; r < outer; r++) {
        const double *in = input + r * dim;
        double *out = output + r * dim;
        double mx = -INFINITY;
        for (int64_t i = 0; i < dim; i++) mx = in[i] > mx ? in[i] : mx;
        double s = 0.0;
        for (int64_t i = 0; i < dim; i++) s += exp(in[i] - mx);
        const double lse = mx + log(s);
        for (int64_t i = 0; i < dim; i++) out[i] = in[i] - lse;
    }
}
