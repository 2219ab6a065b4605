/* A weak reference: it ignores a and b, so any kernel writing 1.0 everywhere would "pass". */
void reference(const double *a, const double *b, double *c, int n)
{
    (void)a;
    (void)b;
    for (int i = 0; i < n; i++) c[i] = 1.0;
}
