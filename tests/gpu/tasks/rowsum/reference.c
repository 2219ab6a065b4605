/* rowsum reference: y[r] = sum over c of x[r][c], in float64. */
void reference(const double *x, double *y, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++) s += x[(long)r * cols + c];
        y[r] = s;
    }
}
