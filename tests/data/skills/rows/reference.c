/* log(sum(exp(v))) of each row, in float64: the truth for the lse_rows test task. */
#include <math.h>
void reference(const double *v, double *out, int batch, int width)
{
    for (int r = 0; r < batch; r++) {
        double m = v[(long)r * width];
        for (int c = 1; c < width; c++) m = fmax(m, v[(long)r * width + c]);
        double s = 0;
        for (int c = 0; c < width; c++) s += exp(v[(long)r * width + c] - m);
        out[r] = m + log(s);
    }
}
