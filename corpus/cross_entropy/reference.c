/* cross_entropy reference: loss[b] = logsumexp(logits[b]) - logits[b][target[b]], with the row
 * maximum subtracted inside the logarithm; float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *logits, const int32_t *target, double *loss, int batch, int classes)
{
    for (int64_t b = 0; b < batch; b++) {
        const double *l = logits + b * classes;
        double mx = -INFINITY;
        for (int64_t c = 0; c < classes; c++) mx = l[c] > mx ? l[c] : mx;
        double s = 0.0;
        for (int64_t c = 0; c < classes; c++) s += exp(l[c] - mx);
        loss[b] = mx + log(s) - l[target[b]];
    }
}
