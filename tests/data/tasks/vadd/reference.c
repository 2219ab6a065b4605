/* c = a + b in float64: the truth for the vadd task. */
void reference(const double *a, const double *b, double *c, int n)
{
    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
}
