/* The rules catalog: row-parallel (src/rewrite/rules/row_parallel.c). Golden cases (run by test_rules_golden.c) in
 * tests/data/rules/row-parallel/<case>.before.cu, whose first line says what to do
 * (`// test: apply row-parallel@k:9 unit=block threads=256 | remove row-parallel@k:10`): the result
 * must equal <case>.after.cu byte for byte (KL_UPDATE_GOLDEN=1 rewrites them), the reverse must give
 * back the original or at least bring the site back the other way, and every .after.cu must compile
 * with `nvcc -arch=sm_90 -c` (skipped with a note without nvcc). Also: the naive softmax and
 * layernorm are spread over warps, the experts' long-row kernels lose their block per row, and the
 * reasons given where the transform does not apply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"
#include "rules_golden.h"
#include "rules_helpers.h"

/* ---- row-parallel ---------------------------------------------------------------------------------- */

static char *run_op(const char *text, bool remove, const char *site, const char *params)
{
    op o = {.remove = remove};
    kl_snprintf(o.name, sizeof o.name, "row-parallel");
    kl_snprintf(o.site, sizeof o.site, "%s", site);
    kl_snprintf(o.params, sizeof o.params, "%s", params ? params : "{}");
    kl_error err = {0};
    char *got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("row-parallel %s@%s: %s", remove ? "remove" : "apply", site, err.message);
    return got;
}

/* The naive softmax and layernorm: a warp per row (and a block per row), back again exactly. */
static void row_parallel_naives(void **state)
{
    (void)state;
    static const char *const tasks[] = {"softmax", "layernorm"};
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-rp-naive", &dir, &err), KL_OK);
    char *paths[4];
    unsigned np = 0;
    for (int t = 0; t < 2; t++) {
        char *text = read_task_file(tasks[t], "naive.cu");
        json_t *sites = sites_of(text, "row-parallel");
        const char *id = site_where(sites, "applicable", true);
        if (!id) fail_msg("%s/naive.cu: no applicable row-parallel site", tasks[t]);
        for (int unit = 0; unit < 2; unit++) {
            char *got = run_op(text, false, id, unit ? "{\"unit\":\"block\",\"threads\":\"256\"}" : NULL);
            if (unit == 0) {
                assert_non_null(strstr(got, "__shfl_xor_sync(0xffffffff, sum, kl_o)"));
                assert_non_null(strstr(got, "for (int c = kl_lane; c < cols; c += 32)"));
                assert_non_null(strstr(got, "<<<grid * 32, BLOCK"));
            } else {
                assert_non_null(strstr(got, "__shared__ float kl_part[8];"));
                assert_non_null(strstr(got, "c += 256)"));
                assert_non_null(strstr(got, "<<<grid * BLOCK, 256"));
            }
            /* back: the present site removes to the original text */
            json_t *back = sites_of(got, "row-parallel");
            const char *pid = site_where(back, "present", true);
            assert_non_null(pid);
            char *again = run_op(got, true, pid, NULL);
            assert_string_equal(again, text);
            free(again);
            json_decref(back);
            char name[64];
            kl_snprintf(name, sizeof name, "%s_%d.cu", tasks[t], unit);
            paths[np++] = write_temp(dir, name, got);
            free(got);
        }
        json_decref(sites);
        free(text);
    }
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

/* The experts' long-row kernels (a block per row, block_sum / block_reduce helpers) become a thread
 * per row; the register-resident kernels are no site (no lane-strided loop). */
static void row_parallel_experts(void **state)
{
    (void)state;
    static const char *const tasks[] = {"softmax", "layernorm"};
    static const char *const kernels[] = {"softmax_rows_long", "layernorm_rows_long"};
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-rp-expert", &dir, &err), KL_OK);
    char *paths[2];
    for (int t = 0; t < 2; t++) {
        char *text = read_task_file(tasks[t], "expert.cu");
        json_t *sites = sites_of(text, "row-parallel");
        const char *id = site_where(sites, "present", true);
        if (!id) fail_msg("%s/expert.cu: no removable row-parallel site", tasks[t]);
        assert_true(kl_str_starts(id, kernels[t]));
        char *got = run_op(text, true, id, NULL);
        assert_non_null(strstr(got, "if (kl_row >= kl_rows) return;"));
        assert_non_null(strstr(got, "for (int c = 0; c < cols; c++)"));
        assert_non_null(strstr(got, "(rows + THREADS - 1) / THREADS, THREADS, 0, stream>>>"));
        assert_non_null(strstr(got, ", cols, rows);"));
        /* nothing of the block per row is left in that kernel: it is a site to apply again */
        json_t *back = sites_of(got, "row-parallel");
        /* layernorm's sums can be spread again; softmax's online (max, sum) update is no reduction
         * the transform recognises, and it says so */
        assert_non_null(site_where(back, "applicable", t == 1));
        json_decref(back);
        char name[64];
        kl_snprintf(name, sizeof name, "%s.cu", tasks[t]);
        paths[t] = write_temp(dir, name, got);
        free(got);
        json_decref(sites);
        free(text);
    }
    golden_nvcc_compile_all(paths, 2);
    for (int t = 0; t < 2; t++) free(paths[t]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

#define ROW_FMT \
    "__global__ void k(const float* x, float* y, int rows, int cols) {\n" \
    "    int row = blockIdx.x * 128 + threadIdx.x;\n" \
    "    if (row < rows) {\n" \
    "        %s\n" \
    "    }\n" \
    "}\n" \
    "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s) {\n" \
    "    k<<<(rows + 127) / 128, 128, 0, s>>>(x, y, rows, cols);\n" \
    "}\n"

static void row_parallel_says_why_not(void **state)
{
    (void)state;
    static const struct {
        const char *body, *why;
    } cases[] = {
        /* a prefix sum: the running value is stored per element */
        {"float a = 0.0f; for (int c = 0; c < cols; c++) { a += x[row * cols + c]; y[row * cols + c] = a; }",
         "loop-carried dependence"},
        {"float m = 0.0f; for (int c = 0; c < cols; c++) { if (x[c] < 0.0f) break; m += x[c]; } y[row] = m;",
         "break"},
        {"float s = x[row]; for (int c = 1; c < cols; c++) s += x[row * cols + c]; y[row] = s;", "does not start at 0"},
        {"float p = 1.0f; for (int c = 0; c < cols; c++) p *= x[row * cols + c]; y[row] = p;", "not a reduction"},
        {"for (int c = 0; c < cols; c++) y[row * cols + c] = x[c]; "
         "for (int c = 1; c < cols; c++) y[row * cols + c] += y[row * cols + c - 1];",
         "another lane may read"},
        {"for (int c = 0; c < cols; c++) y[row] = x[row * cols + c];", "does not move with c"},
        {"if (cols > 4) { float s = 0.0f; for (int c = 0; c < cols; c++) s += x[c]; y[row] = s; }", "inside a condition"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        kl_snprintf(text, sizeof text, ROW_FMT, cases[i].body);
        json_t *s = sites_of(text, "row-parallel");
        const char *id = site_where(s, "applicable", false);
        if (!id) fail_msg("case %u: no applicable site with a reason:\n%s", i, text);
        expect_not_applicable(text, "row-parallel", id, false, cases[i].why);
        json_decref(s);
    }
    /* a block that is not a multiple of 32: warps would straddle rows */
    const char *odd = "__global__ void k(const float* x, float* y, int rows, int cols) {\n"
                      "    int row = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "    if (row >= rows) return;\n"
                      "    float s = 0.0f;\n"
                      "    for (int c = 0; c < cols; c++) s += x[row * cols + c];\n"
                      "    y[row] = s;\n"
                      "}\n"
                      "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s) {\n"
                      "    k<<<(rows + 99) / 100, 100, 0, s>>>(x, y, rows, cols);\n"
                      "}\n";
    expect_not_applicable(odd, "row-parallel", "k:2", false, "not a multiple of 32");
    /* threads belongs to unit=block */
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_rewrite("t.cu", odd, strlen(odd), NULL, "row-parallel", "k:2", false,
                                      "{\"unit\":\"block\",\"threads\":\"96\"}", &out, &note, &err),
                     KL_ERR_INVALID);
    /* the reduce_sum expert is a grid-wide reduction, not rows: it says why */
    char *rs = read_task_file("reduce_sum", "expert.cu");
    json_t *s = sites_of(rs, "row-parallel");
    const char *id = site_where(s, "present", false);
    assert_non_null(id);
    expect_not_applicable(rs, "row-parallel", id, true, "threadIdx");
    json_decref(s);
    free(rs);
}

/* A block-reduction helper called as a struct's member (the sumsq expert's `BlockSumT(temp).Sum(s)`)
 * is a combine, replaced by its argument; a call of a __device__ function that cooperates otherwise
 * (here a shuffle loop two calls down) is refused, not left to run with one thread per row. */
#define HELPER_FMT                                                                                \
    "__device__ float lanes(float v)\n"                                                          \
    "{\n"                                                                                        \
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);\n"           \
    "    return v;\n"                                                                            \
    "}\n"                                                                                        \
    "__device__ float twice(float v) { return lanes(v) * 2.0f; }\n"                              \
    "struct Red {\n"                                                                             \
    "    float* part;\n"                                                                         \
    "    __device__ explicit Red(float* p) : part(p) {}\n"                                       \
    "    __device__ float Sum(float v)\n"                                                        \
    "    {\n"                                                                                    \
    "        part[threadIdx.x] = v;\n"                                                           \
    "        __syncthreads();\n"                                                                 \
    "        for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"                                   \
    "            if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];\n"             \
    "            __syncthreads();\n"                                                             \
    "        }\n"                                                                                \
    "        return part[0];\n"                                                                  \
    "    }\n"                                                                                    \
    "};\n"                                                                                       \
    "__global__ void k(const float* x, float* y, int cols)\n"                                    \
    "{\n"                                                                                        \
    "    __shared__ float part[256];\n"                                                          \
    "    float s = 0.0f;\n"                                                                      \
    "    for (int c = threadIdx.x; c < cols; c += 256) s += x[blockIdx.x * cols + c];\n"        \
    "    const float total = %s;\n"                                                              \
    "    if (threadIdx.x == 0) y[blockIdx.x] = total;\n"                                         \
    "}\n"                                                                                        \
    "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t st)\n" \
    "{\n"                                                                                        \
    "    k<<<rows, 256, 0, st>>>(x, y, cols);\n"                                                 \
    "}\n"

static void row_parallel_member_helpers(void **state)
{
    (void)state;
    char text[4096];
    kl_snprintf(text, sizeof text, HELPER_FMT, "Red(part).Sum(s)");
    json_t *s = sites_of(text, "row-parallel");
    const char *id = site_where(s, "present", true);
    assert_non_null(id);
    op o = {.remove = true};
    kl_snprintf(o.name, sizeof o.name, "row-parallel");
    kl_snprintf(o.site, sizeof o.site, "%s", id);
    kl_error err = {0};
    char *got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_non_null(strstr(got, "    const float total = s;\n"));
    assert_non_null(strstr(got, "for (int c = 0; c < cols; c++)"));
    free(got);
    json_decref(s);
    /* twice(s) shuffles through lanes(): refused, naming the call */
    kl_snprintf(text, sizeof text, HELPER_FMT, "twice(s)");
    s = sites_of(text, "row-parallel");
    id = site_where(s, "present", false);
    assert_non_null(id);
    expect_not_applicable(text, "row-parallel", id, true, "calls twice, a __device__ function of the file that");
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(row_parallel_says_why_not),
        cmocka_unit_test(row_parallel_naives),
        cmocka_unit_test(row_parallel_experts),
        cmocka_unit_test(row_parallel_member_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
