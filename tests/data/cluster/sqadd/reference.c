/* sqadd: z = x*x + y, in float64. */
void reference(const double *x, const double *y, double *z, int n)
{
    for (int i = 0; i < n; i++) z[i] = x[i] * x[i] + y[i];
}
