/* corpus/: the style corpus. Every task folder loads and validates, checks tiny and odd shapes,
 * has a naive kernel, cost expressions that evaluate everywhere, a reference that compiles as
 * plain C11 without warnings; and every task's float64 reference agrees, on a small input, with
 * the same quantity computed here by a second, independent formula (another loop order, a
 * padded copy instead of clamped indices, a scatter instead of a gather, an identity of the
 * operation). Inputs are multiples of 1/4 (exact in f32 and bf16), so the formulas can only
 * differ by double rounding. No GPU needed; the kernels' own checks are tests/cli/test_corpus*.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/task.h"
#include "util/util.h"

static char *g_cache; /* reference objects, one temporary folder for the whole run */

static char *corpus_path(const char *name)
{
    const char *src = getenv("KL_SOURCE_DIR");
    assert_non_null(src);
    char *corpus = kl_path_join(src, "corpus");
    char *p = name ? kl_path_join(corpus, name) : kl_strdup(corpus);
    free(corpus);
    return p;
}

/* ---- the folder as a whole ------------------------------------------------------------------ */

/* The task folders of corpus/ (those holding a task.json), sorted; *n set. New array of new strings. */
static char **list_tasks(unsigned *n)
{
    char *root = corpus_path(NULL);
    DIR *d = opendir(root);
    if (!d) fail_msg("cannot open %s", root);
    char **names = NULL;
    unsigned count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *dir = kl_path_join(root, e->d_name);
        char *tj = kl_path_join(dir, "task.json");
        if (kl_file_exists(tj)) {
            names = realloc(names, (count + 1) * sizeof *names);
            assert_non_null(names);
            names[count++] = kl_strdup(e->d_name);
        }
        free(tj);
        free(dir);
    }
    closedir(d);
    free(root);
    for (unsigned i = 1; i < count; i++)
        for (unsigned j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    *n = count;
    return names;
}

static void free_names(char **names, unsigned n)
{
    for (unsigned i = 0; i < n; i++) free(names[i]);
    free(names);
}

static kl_task *load_task(const char *name)
{
    char *dir = corpus_path(name);
    kl_task *t = NULL;
    kl_error err = {0};
    if (kl_task_load(dir, &t, &err) != KL_OK) fail_msg("%s: %s", dir, err.message);
    free(dir);
    return t;
}

static void corpus_has_24_tasks_that_validate(void **state)
{
    (void)state;
    unsigned n = 0;
    char **names = list_tasks(&n);
    if (n < 24) fail_msg("corpus/ holds %u tasks, the corpus needs at least 24", n);
    unsigned experts = 0;
    for (unsigned i = 0; i < n; i++) {
        kl_task *t = load_task(names[i]);
        if (strcmp(t->name, names[i])) fail_msg("corpus/%s: task.json names it \"%s\"", names[i], t->name);
        if (!t->naive || strcmp(t->naive, "naive.cu")) fail_msg("%s: no naive.cu", names[i]);
        if (t->expert) experts++;
        if (!t->cost_flops || !t->cost_bytes) fail_msg("%s: cost.flops and cost.bytes are needed", names[i]);
        if (t->nchecks < 8) fail_msg("%s: %u check shapes, at least 8 expected", names[i], t->nchecks);
        kl_error err = {0};
        for (unsigned s = 0; s <= t->nchecks; s++) {
            const kl_shape *shape = s == t->nchecks ? &t->bench : &t->checks[s];
            for (unsigned a = 0; a < t->nargs; a++) {
                if (t->args[a].dtype == KL_DTYPE_NONE) continue;
                int64_t count = 0;
                if (kl_task_arg_count(t, shape, a, &count, &err) != KL_OK)
                    fail_msg("%s %s %s: %s", names[i], shape->label, t->args[a].name, err.message);
                assert_true(count > 0);
            }
            int64_t flops = -1, bytes = -1;
            assert_int_equal(kl_task_eval(t, shape, t->cost_flops, &flops, &err), KL_OK);
            assert_int_equal(kl_task_eval(t, shape, t->cost_bytes, &bytes, &err), KL_OK);
            assert_true(flops >= 0 && bytes > 0);
        }
        kl_task_free(t);
    }
    if (experts < 2) fail_msg("%u corpus tasks carry an expert, 2 expected (matmul, sumsq)", experts);
    free_names(names, n);
}

/* Tiny: a check shape with every size at most 3. Odd: a size above 256 that is odd. Large: a
 * check shape with a tensor of at least 2^16 elements. Every bench tensor fits in 1 GiB (the
 * reduction's 2^28 floats). */
static void corpus_checks_tiny_odd_and_large_shapes(void **state)
{
    (void)state;
    unsigned n = 0;
    char **names = list_tasks(&n);
    for (unsigned i = 0; i < n; i++) {
        kl_task *t = load_task(names[i]);
        bool tiny = false, odd = false, large = false;
        kl_error err = {0};
        for (unsigned s = 0; s < t->nchecks; s++) {
            bool small = true;
            for (unsigned z = 0; z < t->nsizes; z++) {
                const int64_t v = t->checks[s].values[z];
                if (v > 3) small = false;
                if (v > 256 && v % 2 == 1) odd = true;
            }
            if (small) tiny = true;
            for (unsigned a = 0; a < t->nargs; a++) {
                int64_t count = 0;
                if (t->args[a].dtype != KL_DTYPE_NONE && kl_task_arg_count(t, &t->checks[s], a, &count, &err) == KL_OK &&
                    count >= 65536)
                    large = true;
            }
        }
        for (unsigned a = 0; a < t->nargs; a++) {
            int64_t count = 0;
            if (t->args[a].dtype == KL_DTYPE_NONE) continue;
            assert_int_equal(kl_task_arg_count(t, &t->bench, a, &count, &err), KL_OK);
            if ((uint64_t)count * kl_dtype_size(t->args[a].dtype) > (1ull << 30))
                fail_msg("%s: bench tensor %s is over 1 GiB", names[i], t->args[a].name);
        }
        if (!tiny) fail_msg("%s: no check shape with every size at most 3", names[i]);
        if (!odd) fail_msg("%s: no check shape with an odd size above 256", names[i]);
        if (!large) fail_msg("%s: no check shape with a tensor of 65536 elements or more", names[i]);
        kl_task_free(t);
    }
    free_names(names, n);
}

static void corpus_references_compile_as_c11(void **state)
{
    (void)state;
    unsigned n = 0;
    char **names = list_tasks(&n);
    const char *cc = getenv("CC");
    if (!cc || !cc[0]) cc = "cc";
    char *obj = kl_path_join(g_cache, "reference-c11.o");
    for (unsigned i = 0; i < n; i++) {
        char *dir = corpus_path(names[i]);
        char *src = kl_path_join(dir, "reference.c");
        const char *argv[] = {cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-c", src, "-o", obj, NULL};
        kl_child c;
        kl_child_init(&c);
        c.argv = argv;
        c.merge_stderr = true;
        c.timeout_s = 120;
        kl_error err = {0};
        if (kl_child_run(&c, &err) != KL_OK) fail_msg("%s: %s", src, err.message);
        if (c.exit_code != 0) fail_msg("%s does not compile cleanly as C11:\n%s", src, kl_strbuf_str(&c.out));
        kl_child_release(&c);
        free(src);
        free(dir);
    }
    free(obj);
    free_names(names, n);
}

/* ---- references against independent formulas ----------------------------------------------- */

/* Deterministic inputs: multiples of 1/4 in [lo, hi). */
static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double draw(double lo, double hi)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    const int steps = (int)((hi - lo) * 4);
    return lo + (double)(int)(g_rng % (uint64_t)steps) / 4.0;
}
static float *floats(int64_t n, double lo, double hi)
{
    float *p = malloc((size_t)n * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)draw(lo, hi);
    return p;
}
static double *as_doubles(const float *f, int64_t n)
{
    double *d = malloc((size_t)n * sizeof *d);
    assert_non_null(d);
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

/* Run corpus task `name`'s reference at the sizes given (in the task's size order) on args (host
 * data in each argument's dtype, NULL for outputs and scalars); returns the output argument
 * `out_arg` as doubles (new array). */
static double *run_reference(const char *name, const int64_t *sizes, void **args, unsigned out_arg)
{
    kl_task *t = load_task(name);
    kl_error err = {0};
    kl_shape shape = {"unit", (int64_t *)sizes};
    kl_reference *ref = NULL;
    if (kl_reference_load(t, g_cache, &ref, &err) != KL_OK) fail_msg("%s: %s", name, err.message);
    double *outs[16] = {0};
    assert_true(t->nargs <= 16);
    if (kl_reference_run(ref, t, &shape, args, outs, &err) != KL_OK) fail_msg("%s: %s", name, err.message);
    assert_non_null(outs[out_arg]);
    double *out = outs[out_arg];
    for (unsigned i = 0; i < t->nargs; i++)
        if (i != out_arg) free(outs[i]);
    kl_reference_free(ref);
    kl_task_free(t);
    return out;
}

static void expect_close(const char *what, const double *got, const double *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const double tol = 1e-12 * (1.0 + fabs(want[i]));
        if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("%s: element %lld is %.17g, the independent formula gives %.17g", what, (long long)i, got[i],
                     want[i]);
    }
}

/* c = A * B for row-major A (m x k), B (k x n), as a sum of rank-one updates (p outermost). */
static void outer_products(const double *A, const double *B, double *C, int m, int n, int k)
{
    for (int i = 0; i < m * n; i++) C[i] = 0;
    for (int p = 0; p < k; p++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) C[i * n + j] += A[i * k + p] * B[p * n + j];
}
static double *transposed(const double *X, int rows, int cols)
{
    double *T = malloc((size_t)rows * cols * sizeof *T);
    assert_non_null(T);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) T[c * rows + r] = X[r * cols + c];
    return T;
}

static void ref_gemms(void **state)
{
    (void)state;
    const int m = 3, n = 4, k = 5;
    float *a = floats(m * k, -2, 2), *bt = floats(n * k, -2, 2), *b = floats(k * n, -2, 2);
    double *A = as_doubles(a, m * k), *Bt = as_doubles(bt, n * k), *B = as_doubles(b, k * n);
    double want[64], *got;
    /* gemm_nt: a (m x k) times bt^T, bt is n x k */
    double *BtT = transposed(Bt, n, k);
    outer_products(A, BtT, want, m, n, k);
    got = run_reference("gemm_nt", (int64_t[]){m, n, k}, (void *[]){a, bt, NULL, NULL, NULL, NULL}, 2);
    expect_close("gemm_nt", got, want, m * n);
    free(got);
    /* gemm_tn: lhs is K x M; out = lhs^T rhs. Use a^T as lhs (k x m) so lhs^T = A. */
    double *At = transposed(A, m, k);
    float *lhs = malloc(sizeof(float) * m * k);
    for (int i = 0; i < m * k; i++) lhs[i] = (float)At[i];
    outer_products(A, B, want, m, n, k);
    got = run_reference("gemm_tn", (int64_t[]){m, n, k}, (void *[]){lhs, b, NULL, NULL, NULL, NULL}, 2);
    expect_close("gemm_tn", got, want, m * n);
    free(got);
    /* matmul */
    got = run_reference("matmul", (int64_t[]){m, n, k}, (void *[]){a, b, NULL, NULL, NULL, NULL}, 2);
    expect_close("matmul", got, want, m * n);
    free(got);
    /* linear_relu: max(x w + bias, 0), x tokens x d_in = A, w d_in x d_out = B */
    float *bias = floats(n, -6, 6);
    for (int i = 0; i < m * n; i++) want[i] = fmax(want[i] + bias[i % n], 0.0);
    got = run_reference("linear_relu", (int64_t[]){m, k, n}, (void *[]){a, b, bias, NULL, NULL, NULL, NULL}, 3);
    expect_close("linear_relu", got, want, m * n);
    int zeros = 0;
    for (int i = 0; i < m * n; i++) zeros += got[i] == 0.0;
    if (zeros == 0 || zeros == m * n) fail_msg("linear_relu: the test input should give some zeros and some positives");
    free(got);
    /* bmm: two batches, each checked as its own product */
    const int batch = 2;
    float *ba = floats(batch * m * k, -2, 2), *bb = floats(batch * k * n, -2, 2);
    double *BA = as_doubles(ba, batch * m * k), *BB = as_doubles(bb, batch * k * n);
    got = run_reference("bmm", (int64_t[]){batch, m, n, k}, (void *[]){ba, bb, NULL, NULL, NULL, NULL, NULL}, 2);
    for (int q = 0; q < batch; q++) {
        outer_products(BA + q * m * k, BB + q * k * n, want, m, n, k);
        expect_close("bmm", got + q * m * n, want, m * n);
    }
    free(got);
    /* bf16_gemm_nt: the inputs as bf16 patterns (multiples of 1/4 below 4 are exact in bf16) */
    uint16_t *ha = malloc(2 * m * k), *hb = malloc(2 * n * k);
    for (int i = 0; i < m * k; i++) {
        uint32_t u;
        memcpy(&u, &a[i], 4);
        ha[i] = (uint16_t)(u >> 16);
    }
    for (int i = 0; i < n * k; i++) {
        uint32_t u;
        memcpy(&u, &bt[i], 4);
        hb[i] = (uint16_t)(u >> 16);
    }
    outer_products(A, BtT, want, m, n, k);
    got = run_reference("bf16_gemm_nt", (int64_t[]){m, n, k}, (void *[]){ha, hb, NULL, NULL, NULL, NULL}, 2);
    expect_close("bf16_gemm_nt", got, want, m * n);
    free(got);
    /* gemv: mat (m x k) times vec (k); gemv_t: weight (k x m)^T times v (k) */
    float *vec = floats(k, -2, 2);
    double *V = as_doubles(vec, k);
    outer_products(A, V, want, m, 1, k);
    got = run_reference("gemv", (int64_t[]){m, k}, (void *[]){a, vec, NULL, NULL, NULL}, 2);
    expect_close("gemv", got, want, m);
    free(got);
    got = run_reference("gemv_t", (int64_t[]){k, m}, (void *[]){lhs, vec, NULL, NULL, NULL}, 2);
    expect_close("gemv_t", got, want, m);
    free(got);
    free(ha), free(hb), free(vec), free(V), free(ba), free(bb), free(BA), free(BB), free(bias), free(lhs), free(At);
    free(BtT), free(a), free(bt), free(b), free(A), free(Bt), free(B);
}

static void ref_rows(void **state)
{
    (void)state;
    const int rows = 3, cols = 5;
    float *x = floats(rows * cols, -3, 3);
    double want[64], *got;
    /* log_softmax: x - log(sum exp x), no max subtracted; and exp(y) sums to 1 */
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += exp(x[r * cols + c]);
        for (int c = 0; c < cols; c++) want[r * cols + c] = x[r * cols + c] - log(s);
    }
    got = run_reference("log_softmax", (int64_t[]){rows, cols}, (void *[]){x, NULL, NULL, NULL}, 1);
    expect_close("log_softmax", got, want, rows * cols);
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += exp(got[r * cols + c]);
        if (fabs(s - 1.0) > 1e-12) fail_msg("log_softmax: row %d: exp of the outputs sums to %.17g", r, s);
    }
    free(got);
    /* softmax_warp: exp(x) / sum exp(x) */
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += exp(x[r * cols + c]);
        for (int c = 0; c < cols; c++) want[r * cols + c] = exp(x[r * cols + c]) / s;
    }
    got = run_reference("softmax_warp", (int64_t[]){rows, cols}, (void *[]){x, NULL, NULL, NULL}, 1);
    expect_close("softmax_warp", got, want, rows * cols);
    free(got);
    /* cross_entropy: -log(softmax(x)[t]) */
    int32_t target[3] = {4, 0, 2};
    for (int r = 0; r < rows; r++) want[r] = -log(want[r * cols + target[r]]);
    got = run_reference("cross_entropy", (int64_t[]){rows, cols}, (void *[]){x, target, NULL, NULL, NULL}, 2);
    expect_close("cross_entropy", got, want, rows);
    free(got);
    /* rmsnorm: x * w * (mean of squares + 1e-6)^(-1/2) */
    float *w = floats(cols, 0.5, 1.5);
    for (int r = 0; r < rows; r++) {
        double ms = 0;
        for (int c = 0; c < cols; c++) ms += (double)x[r * cols + c] * x[r * cols + c] / cols;
        for (int c = 0; c < cols; c++) want[r * cols + c] = x[r * cols + c] * w[c] * pow(ms + 1e-6, -0.5);
    }
    got = run_reference("rmsnorm", (int64_t[]){rows, cols}, (void *[]){x, w, NULL, NULL, NULL}, 2);
    expect_close("rmsnorm", got, want, rows * cols);
    free(got);
    /* argmax_rows, with ties: the largest value first, then the first index holding it */
    float ties[15] = {1, 3, 3, 0, 2, /**/ -1, -1, -1, -1, -1, /**/ 0, 0, 0, 0, 0.25f};
    for (int r = 0; r < rows; r++) {
        double best = -INFINITY;
        for (int c = 0; c < cols; c++) best = fmax(best, ties[r * cols + c]);
        int first = cols;
        for (int c = cols - 1; c >= 0; c--)
            if (ties[r * cols + c] == best) first = c;
        want[r] = first;
    }
    got = run_reference("argmax_rows", (int64_t[]){rows, cols}, (void *[]){ties, NULL, NULL, NULL}, 1);
    expect_close("argmax_rows", got, want, rows);
    if (got[0] != 1 || got[1] != 0) fail_msg("argmax_rows: ties must resolve to the first index");
    free(got);
    /* col_mean: each column of the transposed matrix averaged as a row */
    double *X = as_doubles(x, rows * cols), *XT = transposed(X, rows, cols);
    for (int c = 0; c < cols; c++) {
        double s = 0;
        for (int r = 0; r < rows; r++) s += XT[c * rows + r];
        want[c] = s / rows;
    }
    got = run_reference("col_mean", (int64_t[]){rows, cols}, (void *[]){x, NULL, NULL, NULL}, 1);
    expect_close("col_mean", got, want, cols);
    free(got);
    /* bias_add, axpb_rows */
    float *bias = floats(cols, -1, 1), *scale = floats(rows, -2, 2);
    for (int i = 0; i < rows * cols; i++) want[i] = x[i] + bias[i % cols];
    got = run_reference("bias_add", (int64_t[]){rows, cols}, (void *[]){x, bias, NULL, NULL, NULL}, 2);
    expect_close("bias_add", got, want, rows * cols);
    free(got);
    for (int i = 0; i < rows * cols; i++) want[i] = scale[i / cols] * x[i] + bias[i % cols];
    got = run_reference("axpb_rows", (int64_t[]){rows, cols}, (void *[]){x, scale, bias, NULL, NULL, NULL}, 3);
    expect_close("axpb_rows", got, want, rows * cols);
    free(got);
    /* transpose_tiled: walk the output, find each element's source */
    for (int o = 0; o < rows * cols; o++) want[o] = x[(o % rows) * cols + o / rows];
    got = run_reference("transpose_tiled", (int64_t[]){rows, cols}, (void *[]){x, NULL, NULL, NULL}, 1);
    expect_close("transpose_tiled", got, want, rows * cols);
    free(got);
    free(x), free(w), free(X), free(XT), free(bias), free(scale);
}

/* A copy of X (rows x cols) with a border of width 1 that repeats the nearest edge cell. */
static double *replicate_pad(const double *X, int rows, int cols)
{
    const int pc = cols + 2;
    double *P = malloc((size_t)(rows + 2) * pc * sizeof *P);
    assert_non_null(P);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) P[(r + 1) * pc + c + 1] = X[r * cols + c];
        P[(r + 1) * pc] = X[r * cols];
        P[(r + 1) * pc + cols + 1] = X[r * cols + cols - 1];
    }
    memcpy(P, P + pc, pc * sizeof *P);
    memcpy(P + (rows + 1) * pc, P + rows * pc, pc * sizeof *P);
    return P;
}

static void ref_stencils_and_pools(void **state)
{
    (void)state;
    const int ny = 3, nx = 4;
    float *u = floats(ny * nx, -4, 4);
    double *U = as_doubles(u, ny * nx), *P = replicate_pad(U, ny, nx), want[256], *got;
    const int pc = nx + 2;
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) {
            const double *p = P + (i + 1) * pc + j + 1;
            want[i * nx + j] = (4 * p[0] + p[-pc] + p[pc] + p[-1] + p[1]) / 8;
        }
    got = run_reference("stencil5_clamp", (int64_t[]){ny, nx}, (void *[]){u, NULL, NULL, NULL}, 1);
    expect_close("stencil5_clamp", got, want, ny * nx);
    free(got);
    /* gauss3x3_clamp: separable, [1 2 1] / 4 along rows of the padded copy, then along columns */
    double H[5 * 6];
    for (int r = 0; r < ny + 2; r++)
        for (int j = 0; j < nx; j++) H[r * nx + j] = (P[r * pc + j] + 2 * P[r * pc + j + 1] + P[r * pc + j + 2]) / 4;
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) want[i * nx + j] = (H[i * nx + j] + 2 * H[(i + 1) * nx + j] + H[(i + 2) * nx + j]) / 4;
    got = run_reference("gauss3x3_clamp", (int64_t[]){ny, nx}, (void *[]){u, NULL, NULL, NULL}, 1);
    expect_close("gauss3x3_clamp", got, want, ny * nx);
    free(got);
    /* maxpool2x2 as a scatter: every input cell raises the output cell it falls in */
    const int ch = 2, h = 5, w = 7, oh = h / 2, ow = w / 2;
    float *x = floats(ch * h * w, -4, 4);
    for (int i = 0; i < ch * oh * ow; i++) want[i] = -INFINITY;
    for (int c = 0; c < ch; c++)
        for (int y = 0; y < h; y++)
            for (int q = 0; q < w; q++)
                if (y / 2 < oh && q / 2 < ow) {
                    double *o = &want[(c * oh + y / 2) * ow + q / 2];
                    *o = fmax(*o, x[(c * h + y) * w + q]);
                }
    got = run_reference("maxpool2x2", (int64_t[]){ch, h, w}, (void *[]){x, NULL, NULL, NULL, NULL}, 1);
    expect_close("maxpool2x2", got, want, ch * oh * ow);
    free(got);
    /* maxpool3x3s2 as a scatter: input (y, q) belongs to outputs i with |y - 2i| <= 1 */
    const int oh3 = (h - 1) / 2 + 1, ow3 = (w - 1) / 2 + 1;
    for (int i = 0; i < ch * oh3 * ow3; i++) want[i] = -INFINITY;
    for (int c = 0; c < ch; c++)
        for (int y = 0; y < h; y++)
            for (int q = 0; q < w; q++)
                for (int i = 0; i < oh3; i++)
                    for (int j = 0; j < ow3; j++)
                        if (abs(y - 2 * i) <= 1 && abs(q - 2 * j) <= 1) {
                            double *o = &want[(c * oh3 + i) * ow3 + j];
                            *o = fmax(*o, x[(c * h + y) * w + q]);
                        }
    got = run_reference("maxpool3x3s2", (int64_t[]){ch, h, w}, (void *[]){x, NULL, NULL, NULL, NULL}, 1);
    expect_close("maxpool3x3s2", got, want, ch * oh3 * ow3);
    free(got);
    free(x), free(u), free(U), free(P);
}

static void ref_bytes(void **state)
{
    (void)state;
    const int h = 3, w = 4;
    uint8_t rgb[3 * 3 * 4], img[3 * 20], in[12];
    for (int i = 0; i < 3 * h * w; i++) rgb[i] = (uint8_t)draw(0, 256);
    for (int i = 0; i < 3 * 20; i++) img[i] = (uint8_t)draw(0, 256);
    for (int i = 0; i < h * w; i++) in[i] = (uint8_t)draw(0, 256);
    double want[64], *got;
    /* rgb_threshold: luma by floating-point rounding instead of the shift */
    int ones = 0;
    for (int i = 0; i < h * w; i++) {
        const double luma = floor((77.0 * rgb[3 * i] + 150.0 * rgb[3 * i + 1] + 29.0 * rgb[3 * i + 2]) / 256.0 + 0.5);
        want[i] = luma >= 128 ? 255 : 0;
        ones += luma >= 128;
    }
    got = run_reference("rgb_threshold", (int64_t[]){h, w}, (void *[]){rgb, NULL, NULL, NULL}, 1);
    expect_close("rgb_threshold", got, want, h * w);
    if (ones == 0 || ones == h * w) fail_msg("rgb_threshold: the test image should cross the threshold");
    free(got);
    /* hist16_rows: each bin counted by a range test */
    for (int r = 0; r < 3; r++)
        for (int b = 0; b < 16; b++) {
            int count = 0;
            for (int c = 0; c < 20; c++) count += img[r * 20 + c] >= 16 * b && img[r * 20 + c] < 16 * (b + 1);
            want[r * 16 + b] = count;
        }
    got = run_reference("hist16_rows", (int64_t[]){3, 20}, (void *[]){img, NULL, NULL, NULL}, 1);
    expect_close("hist16_rows", got, want, 3 * 16);
    free(got);
    /* box3_u8: the padded copy, the mean rounded to nearest */
    double IN[12];
    for (int i = 0; i < h * w; i++) IN[i] = in[i];
    double *P = replicate_pad(IN, h, w);
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++) {
            double s = 0;
            for (int di = 0; di < 3; di++)
                for (int dj = 0; dj < 3; dj++) s += P[(i + di) * (w + 2) + j + dj];
            want[i * w + j] = floor(s / 9 + 0.5);
        }
    got = run_reference("box3_u8", (int64_t[]){h, w}, (void *[]){in, NULL, NULL, NULL}, 1);
    expect_close("box3_u8", got, want, h * w);
    free(got);
    free(P);
}

static void ref_convolutions_and_scalars(void **state)
{
    (void)state;
    const int len = 6;
    float *sig = floats(len, -2, 2), *taps = floats(4, -1, 1);
    double want[64], *got;
    /* conv1d: the signal copied into a zero-padded buffer, then plain dot products */
    for (int nt = 1; nt <= 4; nt++) {
        double padded[6 + 8] = {0};
        const int half = nt / 2;
        for (int i = 0; i < len; i++) padded[i + 4] = sig[i];
        for (int i = 0; i < len; i++) {
            double s = 0;
            for (int t = 0; t < nt; t++) s += taps[t] * padded[i + t - half + 4];
            want[i] = s;
        }
        got = run_reference("conv1d", (int64_t[]){len, nt}, (void *[]){sig, taps, NULL, NULL, NULL}, 2);
        expect_close("conv1d", got, want, len);
        free(got);
    }
    /* conv1d_causal_dw: each channel left-padded with kw - 1 zeros */
    const int ch = 2, kw = 3;
    float *x = floats(ch * len, -2, 2), *w = floats(ch * kw, -1, 1);
    for (int c = 0; c < ch; c++) {
        double padded[6 + 2] = {0};
        for (int t = 0; t < len; t++) padded[t + kw - 1] = x[c * len + t];
        for (int t = 0; t < len; t++) {
            double s = 0;
            for (int j = 0; j < kw; j++) s += w[c * kw + j] * padded[t + j];
            want[c * len + t] = s;
        }
    }
    got = run_reference("conv1d_causal_dw", (int64_t[]){ch, len, kw}, (void *[]){x, w, NULL, NULL, NULL, NULL}, 2);
    expect_close("conv1d_causal_dw", got, want, ch * len);
    free(got);
    /* dot: polarisation, sum of ((x + y)^2 - (x - y)^2) / 4; sumsq: n mean^2 + sum (x - mean)^2 */
    float *y = floats(len, -8, 8);
    double d = 0, mean = 0, dev = 0;
    for (int i = 0; i < len; i++) d += ((sig[i] + y[i]) * (sig[i] + y[i]) - (sig[i] - y[i]) * (sig[i] - y[i])) / 4;
    got = run_reference("dot", (int64_t[]){len}, (void *[]){sig, y, NULL, NULL}, 2);
    expect_close("dot", got, &d, 1);
    free(got);
    for (int i = 0; i < len; i++) mean += (double)y[i] / len;
    for (int i = 0; i < len; i++) dev += (y[i] - mean) * (y[i] - mean);
    const double ss = len * mean * mean + dev;
    got = run_reference("sumsq", (int64_t[]){len}, (void *[]){y, NULL, NULL}, 1);
    expect_close("sumsq", got, &ss, 1);
    free(got);
    free(sig), free(taps), free(x), free(w), free(y);
}

/* Every task of the corpus is covered by one of the reference tests above. */
static void every_reference_is_cross_checked(void **state)
{
    (void)state;
    static const char *const covered[] = {
        "gemm_nt", "gemm_tn", "matmul", "linear_relu", "bmm", "bf16_gemm_nt", "gemv", "gemv_t", "log_softmax",
        "softmax_warp", "cross_entropy", "rmsnorm", "argmax_rows", "col_mean", "bias_add", "axpb_rows",
        "transpose_tiled", "stencil5_clamp", "gauss3x3_clamp", "maxpool2x2", "maxpool3x3s2", "rgb_threshold",
        "hist16_rows", "box3_u8", "conv1d", "conv1d_causal_dw", "dot", "sumsq"};
    unsigned n = 0;
    char **names = list_tasks(&n);
    for (unsigned i = 0; i < n; i++) {
        bool found = false;
        for (size_t c = 0; c < sizeof covered / sizeof covered[0]; c++) found |= !strcmp(covered[c], names[i]);
        if (!found) fail_msg("corpus/%s: no independent check of its reference in tests/unit/test_corpus.c", names[i]);
    }
    free_names(names, n);
}

static int setup(void **state)
{
    (void)state;
    kl_error err = {0};
    return kl_tempdir("corpus-ref", &g_cache, &err) == KL_OK ? 0 : -1;
}
static int teardown(void **state)
{
    (void)state;
    kl_error err = {0};
    kl_remove_tree(g_cache, &err);
    free(g_cache);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(corpus_has_24_tasks_that_validate),
        cmocka_unit_test(corpus_checks_tiny_odd_and_large_shapes),
        cmocka_unit_test(corpus_references_compile_as_c11),
        cmocka_unit_test(ref_gemms),
        cmocka_unit_test(ref_rows),
        cmocka_unit_test(ref_stencils_and_pools),
        cmocka_unit_test(ref_bytes),
        cmocka_unit_test(ref_convolutions_and_scalars),
        cmocka_unit_test(every_reference_is_cross_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
