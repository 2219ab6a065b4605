/* The rules catalog: row-cache (src/rewrite/rules/row_cache.c). Golden cases (run by
 * test_rules_golden.c) in tests/data/rules/row-cache/. Here: what makes a group of loops a site,
 * and the reasons given where the cache would change what the kernel computes — each one listed as
 * refused with the reason that --apply gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"
#include "rules_helpers.h"

/* A block of 128 threads per row: a sum pass (line 7) and a write pass (line 10) over row `x`; PRE
 * and MID are statements put before and between them, BODY1 the first pass's body. */
#define ROWS_FMT                                                                                         \
    "__global__ void rows(const float* x, float* y, int n, int cols)\n"                                  \
    "{\n"                                                                                                \
    "    const float* xr = x + blockIdx.x * cols;\n"                                                     \
    "    float* yr = y + blockIdx.x * cols;\n"                                                           \
    "    float s = 0.0f; %s\n"                                                                           \
    "    __shared__ float t[1];\n"                                                                       \
    "    for (int c = threadIdx.x; c < cols; c += 128) { %s }\n"                                         \
    "    if (threadIdx.x == 0) t[0] = s;\n"                                                              \
    "    __syncthreads(); %s\n"                                                                          \
    "    for (int c = threadIdx.x; c < cols; c += 128) yr[c] = xr[c] / t[0];\n"                          \
    "}\n"                                                                                                \
    "extern \"C\" void launch(const float* x, float* y, int n, int cols, cudaStream_t st)\n"             \
    "{\n"                                                                                                \
    "    rows<<<n, 128, 0, st>>>(x, y, n, cols);\n"                                                      \
    "}\n"

/* The site rows:7 is listed; with want NULL it applies and the write pass reads the registers, else
 * it is listed as refused and --apply says want. */
static void expect(const char *pre, const char *body, const char *mid, const char *want)
{
    char text[4096];
    kl_snprintf(text, sizeof text, ROWS_FMT, pre, body, mid);
    json_t *sites = sites_of(text, "row-cache");
    size_t i;
    json_t *s;
    const json_t *site = NULL;
    json_array_foreach(sites, i, s) {
        if (!strcmp(json_string_value(json_object_get(s, "site")), "rows:7")) site = s;
    }
    if (!site) fail_msg("no row-cache site rows:7 in:\n%s", text);
    const char *dir = json_string_value(json_object_get(site, "direction"));
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "row-cache", "rows:7", false, "{\"items\": \"16\"}",
                                    &out, &note, &err);
    if (!want) {
        assert_string_equal(dir, "applicable");
        if (st != KL_OK) fail_msg("row-cache refused: %s\n%s", err.message, text);
        assert_non_null(strstr(out, "float kl_rc[16];"));
        assert_non_null(strstr(out, "(cols) <= 16 * 128"));
        assert_non_null(strstr(out, "kl_rc[kl_k] = xr[c];"));
        assert_non_null(strstr(out, "yr[c] = kl_rc[kl_k] / t[0];"));
        /* the loops as written stay for rows longer than the cache */
        assert_non_null(strstr(out, "} else {"));
        assert_non_null(strstr(out, "yr[c] = xr[c] / t[0];"));
    } else {
        /* listed as refused, and for the reason --apply gives */
        if (strcmp(dir, "refused")) fail_msg("listed %s, not refused (%s):\n%s", dir, want, text);
        if (st != KL_ERR_NOT_APPLICABLE) fail_msg("expected a refusal (%s), got %d: %s", want, st, err.message);
        if (!strstr(err.message, want)) fail_msg("the reason '%s' does not say '%s'", err.message, want);
        const char *why = json_string_value(json_object_get(site, "reason"));
        if (!why || !strstr(why, want)) fail_msg("the listing's reason '%s' does not say '%s'", why ? why : "", want);
    }
    free(out);
    free(note);
    json_decref(sites);
}

static void row_cache_applies(void **state)
{
    (void)state;
    expect("", "s += xr[c];", "", NULL);
    expect("", "if (xr[c] > 0.0f) s += xr[c]; else continue;", "", NULL); /* continue is the next k */
}

static void row_cache_refuses_what_it_would_change(void **state)
{
    (void)state;
    expect("", "s += xr[c]; if (s > 1e30f) break;", "", "has a break");
    expect("", "s += xr[c]; __syncwarp();", "", "a barrier or a warp collective");
    expect("", "s += xr[c]; c += 0;", "", "an assignment to the loop variable");
    expect("", "s += xr[c]; y[c + 1] = 0.0f;", "", "between the reads the cache merges");
    expect("", "s += xr[c];", "y[0] = s;", "between the reads the cache merges");
    expect("", "s += xr[c];", "cols = cols - 1;", "'cols' (read by the loop at line 7) is assigned");
    expect("", "s += xr[c]; ((float*)x)[c] = 0.0f;", "", "goes where the analysis cannot follow");
    expect("", "s += xr[c]; atomicAdd(&y[0], 1.0f);", "", "goes where the analysis cannot follow");
}

/* Not a site: a row read once, loops of other forms, a thread's own loop (stride 1). */
static void row_cache_what_is_no_site(void **state)
{
    (void)state;
    static const char *const texts[] = {
        /* one read pass */
        "__global__ void k(const float* x, float* y, int n)\n{\n    float s = 0;\n"
        "    for (int c = threadIdx.x; c < n; c += 128) s += x[c];\n"
        "    for (int c = threadIdx.x; c < n; c += 128) y[c] = s;\n}\n",
        /* two passes with different strides */
        "__global__ void k(const float* x, float* y, int n)\n{\n    float s = 0;\n"
        "    for (int c = threadIdx.x; c < n; c += 128) s += x[c];\n"
        "    for (int c = threadIdx.x; c < n; c += 256) y[c] = x[c] + s;\n}\n",
        /* a thread's own row */
        "__global__ void k(const float* x, float* y, int n)\n{\n    float s = 0;\n    const float* r = x + threadIdx.x * n;\n"
        "    for (int c = 0; c < n; c++) s += r[c];\n"
        "    for (int c = 0; c < n; c++) y[threadIdx.x * n + c] = r[c] / s;\n}\n",
        /* blockDim.x with launches of two widths */
        "__global__ void k(const float* x, float* y, int n)\n{\n    float s = 0;\n"
        "    for (int c = threadIdx.x; c < n; c += blockDim.x) s += x[c];\n"
        "    for (int c = threadIdx.x; c < n; c += blockDim.x) y[c] = x[c] / s;\n}\n"
        "void go(const float* x, float* y, int n) { k<<<1, 128>>>(x, y, n); k<<<1, 256>>>(x, y, n); }\n",
    };
    for (unsigned i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        json_t *s = sites_of(texts[i], "row-cache");
        if (json_array_size(s)) fail_msg("a row-cache site in case %u:\n%s", i, texts[i]);
        json_decref(s);
    }
    /* and with blockDim.x of one width, the same kernel is a site */
    const char *one = "__global__ void k(const float* x, float* y, int n)\n{\n    float s = 0;\n"
                      "    for (int c = threadIdx.x; c < n; c += blockDim.x) s += x[c];\n"
                      "    for (int c = threadIdx.x; c < n; c += blockDim.x) y[c] = x[c] / s;\n}\n"
                      "void go(const float* x, float* y, int n) { k<<<1, dim3(64, 1)>>>(x, y, n); }\n";
    json_t *s = sites_of(one, "row-cache");
    assert_int_equal(json_array_size(s), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(s, 0), "features"), "stride")), 64);
    json_decref(s);
}

/* Others' idioms: the stride through a local (`const int stride = blockDim.x;`, the launch's block a
 * local dim3), the row indexed in place and written to another buffer at the whole-matrix subscript:
 * refused while that buffer may alias the row, applied when it is __restrict__. */
static void row_cache_reads_other_idioms(void **state)
{
    (void)state;
    static const char fmt[] =
        "#define THREADS 128\n"
        "__global__ void k(const float* x, float* %s y, int n)\n"
        "{\n"
        "    const int tid = threadIdx.x;\n"
        "    const int stride = blockDim.x;\n"
        "    const float* row = x + (size_t)blockIdx.x * n;\n"
        "    float s = 0.f;\n"
        "    for (int i = tid; i < n; i += stride) s += row[i];\n"
        "    for (int i = tid; i < n; i += stride) y[(size_t)blockIdx.x * n + i] = row[i] / s;\n"
        "}\n"
        "void go(const float* x, float* y, int r, int n) { dim3 block(THREADS); k<<<r, block>>>(x, y, n); }\n";
    char text[2048];
    kl_snprintf(text, sizeof text, fmt, "");
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_rewrite("t.cu", text, strlen(text), NULL, "row-cache", "k:8", false, NULL, &out, &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_non_null(strstr(err.message, "may alias it"));
    kl_snprintf(text, sizeof text, fmt, "__restrict__");
    json_t *sites = sites_of(text, "row-cache");
    assert_int_equal(json_array_size(sites), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(sites, 0), "direction")), "applicable");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(sites, 0), "features"), "stride")), 128);
    json_decref(sites);
    err = (kl_error){0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, "row-cache", "k:8", false, NULL, &out, &note, &err) != KL_OK)
        fail_msg("refused: %s", err.message);
    assert_non_null(strstr(out, "(n) <= 32 * 128"));
    assert_non_null(strstr(out, "y[(size_t)blockIdx.x * n + i] = kl_rc[kl_k] / s;"));
    free(out);
    free(note);
}

/* The catalog does not take a register cache out: remove says so. */
static void row_cache_is_forward_only(void **state)
{
    (void)state;
    char text[4096];
    kl_snprintf(text, sizeof text, ROWS_FMT, "", "s += xr[c];", "");
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_rewrite("t.cu", text, strlen(text), NULL, "row-cache", "rows:7", true, NULL, &out, &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_null(out);
    free(note);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(row_cache_applies),
        cmocka_unit_test(row_cache_refuses_what_it_would_change),
        cmocka_unit_test(row_cache_what_is_no_site),
        cmocka_unit_test(row_cache_reads_other_idioms),
        cmocka_unit_test(row_cache_is_forward_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
