/* y = 2 x in float64. */
void reference(const double *x, double *y, int n)
{
    for (int i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
