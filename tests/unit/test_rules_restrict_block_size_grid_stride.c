/* restrict, block-size (1-D) and grid-stride (src/rewrite/rules/restrict.c, block_size.c,
 * grid_stride.c): the reasons for "not applicable"; the built-in tasks (the marked sites of the
 * experts are found and removable, the naive kernels have places to apply); the backend proposing
 * them. Their golden cases run in test_rules_golden.c. */
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

/* ---- helpers ------------------------------------------------------------------------------------ */


static kl_status rewrite_src(const char *text, const char *transform, const char *site, bool remove,
                             const char *params, char **out, kl_error *err)
{
    char *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, remove, params, out, &note, err);
    free(note);
    return st;
}

/* ---- not applicable, with the reason ------------------------------------------------------------- */

static void expect_not_applicable(const char *text, const char *transform, const char *site, bool remove,
                                  const char *params, const char *reason)
{
    char *out = NULL;
    kl_error err = {0};
    kl_status st = rewrite_src(text, transform, site, remove, params, &out, &err);
    if (st != KL_ERR_NOT_APPLICABLE)
        fail_msg("%s@%s: expected not applicable (%s), got %d: %s\n%s", transform, site, reason, (int)st, err.message,
                 out ? out : "");
    if (!strstr(err.message, reason)) fail_msg("%s@%s: the reason '%s' lacks '%s'", transform, site, err.message, reason);
    assert_null(out);
}

static void restrict_refuses(void **state)
{
    (void)state;
    /* the same tensor passed twice: not distinct */
    const char *twice = "__global__ void add(const float *a, const float *b, float *c, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  if (i < n) c[i] = a[i] + b[i];\n}\n"
                        "extern \"C\" void launch(const float *a, float *c, int n, cudaStream_t s) {\n"
                        "  add<<<(n + 255) / 256, 256, 0, s>>>(a, a + 0, c, n);\n}\n";
    expect_not_applicable(twice, "restrict", "add:1", false, NULL, "passes a to two pointer parameters");
    /* a pointer handed to a function the file does not define */
    const char *escape = "extern __device__ void sink(float *p, int i);\n"
                         "__global__ void k(const float *x, float *y, int n) {\n"
                         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                         "  if (i < n) { y[i] = x[i]; sink(y, i); }\n}\n"
                         "extern \"C\" void launch(const float *x, float *y, int n, cudaStream_t s) {\n"
                         "  k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);\n}\n";
    expect_not_applicable(escape, "restrict", "k:2", false, NULL, "y escapes to sink()");
    /* ldg=1 on a kernel whose only loads are of a template type, launched with two types (the
     * canonical form binds nothing) */
    const char *tmpl = "struct P { float a, b; };\n"
                       "template <typename T> __global__ void cp(const T *x, T *y, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  if (i < n) y[i] = x[i];\n}\n"
                       "extern \"C\" void launch(const float *x, float *y, int n, cudaStream_t s) {\n"
                       "  cp<float><<<(n + 255) / 256, 256, 0, s>>>(x, y, n);\n"
                       "  cp<P><<<(n + 255) / 256, 256, 0, s>>>((const P *)x, (P *)y, n / 2);\n}\n";
    expect_not_applicable(tmpl, "restrict", "cp:2", false, "{\"ldg\": \"1\"}", "no read-only load of a type __ldg");
    /* launched with float alone, T is float in the canonical form: __ldg applies, on the text as written */
    const char *one = "template <typename T> __global__ void cp(const T *x, T *y, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i < n) y[i] = x[i];\n}\n"
                      "extern \"C\" void launch(const float *x, float *y, int n, cudaStream_t s) {\n"
                      "  cp<float><<<(n + 255) / 256, 256, 0, s>>>(x, y, n);\n}\n";
    char *out = NULL;
    kl_error err = {0};
    assert_int_equal(rewrite_src(one, "restrict", "cp:1", false, "{\"ldg\": \"1\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "template <typename T> __global__ void cp(const T *__restrict__ x, T *__restrict__ y"));
    assert_non_null(strstr(out, "y[i] = __ldg(&x[i]);"));
    free(out);
    /* without ldg the template kernel takes __restrict__, and a written pointer stays non-const */
    assert_int_equal(rewrite_src(tmpl, "restrict", "cp:2", false, NULL, &out, &err), KL_OK);
    assert_non_null(strstr(out, "const T *__restrict__ x, T *__restrict__ y"));
    free(out);
    /* removing from a kernel without it: no such site */
    assert_int_equal(rewrite_src(tmpl, "restrict", "cp:2", true, NULL, &out, &err), KL_ERR_NOT_APPLICABLE);
}

static void block_size_refuses(void **state)
{
    (void)state;
    const char *lit = "#define BLOCK 256\n"
                      "__global__ void k(const float *x, float *y, int n) {\n"
                      "  __shared__ float s[256];\n"
                      "  int i = blockIdx.x * BLOCK + threadIdx.x;\n"
                      "  s[threadIdx.x] = i < n ? x[i] : 0.f;\n  __syncthreads();\n"
                      "  if (i < n) y[i] = s[255 - threadIdx.x];\n}\n"
                      "extern \"C\" void launch(const float *x, float *y, int n, cudaStream_t s) {\n"
                      "  k<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(x, y, n);\n}\n";
    expect_not_applicable(lit, "block-size", "k:1:BLOCK", false, "{\"threads\": \"512\"}", "hard-codes 256 at line 3");
    const char *two_d = "__global__ void k(float *y, int n) { y[threadIdx.y * 32 + threadIdx.x] = 0.f; }\n"
                        "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                        "  dim3 b(32, 8);\n  k<<<1, b, 0, s>>>(y, n);\n}\n";
    /* a 2-D block is a site of its own (tests/unit/test_rules_block_size_2d.c): here the kernel hard-codes its width */
    expect_not_applicable(two_d, "block-size", "k:4:32x8", false, "{\"bx\": \"16\", \"by\": \"16\"}",
                          "hard-codes 32 at line 1");
    const char *three_d = "__global__ void k(float *y, int n) { y[threadIdx.z * 64 + threadIdx.y * 8 + threadIdx.x] = 0.f; }\n"
                          "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                          "  dim3 b(8, 8, 2);\n  k<<<1, b, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(three_d, "block-size", "k:4", false, "{\"threads\": \"256\"}", "2-D or 3-D");
    const char *runtime = "__global__ void k(float *y, int n) { y[threadIdx.x] = 0.f; }\n"
                          "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                          "  k<<<1, n, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(runtime, "block-size", "k:3", false, "{\"threads\": \"128\"}", "not a compile-time constant");
    const char *derived = "#define TM 4\nconstexpr int THREADS = 64 * TM;\n"
                          "__global__ void k(float *y) { y[blockIdx.x * THREADS + threadIdx.x] = 0.f; }\n"
                          "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                          "  k<<<n / THREADS, THREADS, 0, s>>>(y);\n}\n";
    expect_not_applicable(derived, "block-size", "k:2:THREADS", false, "{\"threads\": \"128\"}", "derived from other");
    /* the same size: nothing to change */
    const char *same = "#define B 256\n__global__ void k(float *y) { y[blockIdx.x * B + threadIdx.x] = 0.f; }\n"
                       "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<n / B, B, 0, s>>>(y);\n}\n";
    expect_not_applicable(same, "block-size", "k:1:B", false, "{\"threads\": \"256\"}", "already 256");
    /* a template argument equal to the block size that would not follow it (another constant) */
    const char *targ = "#define BS 128\n#define THREADS 128\n"
                       "template <unsigned int blockSize> __global__ void k(float *y) {\n"
                       "  __shared__ float s[blockSize];\n  s[threadIdx.x] = y[threadIdx.x];\n"
                       "  __syncthreads();\n  y[blockIdx.x * blockSize + threadIdx.x] = s[blockSize - 1 - threadIdx.x];\n}\n"
                       "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                       "  k<BS><<<n / THREADS, THREADS, 0, s>>>(y);\n}\n";
    expect_not_applicable(targ, "block-size", "k:2:THREADS", false, "{\"threads\": \"256\"}",
                          "the launch at line 10 passes blockSize = BS to k, which the kernel reads, and it equals the "
                          "block size (128)");
    /* the same through the constant itself: it follows */
    const char *follows = "#define THREADS 128\n"
                          "template <unsigned int blockSize> __global__ void k(float *y) {\n"
                          "  __shared__ float s[blockSize];\n  s[threadIdx.x] = y[threadIdx.x];\n"
                          "  __syncthreads();\n  y[blockIdx.x * blockSize + threadIdx.x] = s[blockSize - 1 - threadIdx.x];\n}\n"
                          "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                          "  k<THREADS><<<n / THREADS, THREADS, 0, s>>>(y);\n}\n";
    char *fo = NULL, *fnote = NULL;
    kl_error ferr = {0};
    assert_int_equal(kl_rules_rewrite("t.cu", follows, strlen(follows), NULL, "block-size", "k:1:THREADS", false,
                                      "{\"threads\": \"256\"}", &fo, &fnote, &ferr),
                     KL_OK);
    assert_non_null(strstr(fo, "#define THREADS 256"));
    assert_non_null(strstr(fo, "k<THREADS><<<n / THREADS, THREADS, 0, s>>>(y);"));
    free(fo);
    free(fnote);
    char *out = NULL;
    kl_error err = {0};
    assert_int_equal(rewrite_src(same, "block-size", "k:1:B", false, "{\"threads\": \"1024\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define B 1024\n"));
    free(out);
}

static void grid_stride_refuses(void **state)
{
    (void)state;
    const char *sync = "__global__ void k(float *y, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  if (i < n) { y[i] = 1.f; __syncthreads(); }\n}\n"
                       "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(sync, "grid-stride", "k:2", false, NULL, "__syncthreads() at line 3");
    const char *ret = "__global__ void k(float *y, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i < n) { if (y[i] < 0.f) return; y[i] = 1.f; }\n}\n"
                      "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(ret, "grid-stride", "k:2", false, NULL, "a return at line 3");
    const char *carry = "__global__ void k(float *y, int n) {\n"
                        "  float acc = 0.f;\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  if (i < n) { acc += y[i]; y[i] = acc; }\n}\n"
                        "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(carry, "grid-stride", "k:3", false, NULL, "updates acc");
    const char *mismatch = "#define B 128\n__global__ void k(float *y, int n) {\n"
                           "  int i = blockIdx.x * B + threadIdx.x;\n"
                           "  if (i < n) y[i] = 1.f;\n}\n"
                           "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(mismatch, "grid-stride", "k:3", false, NULL, "not the block size at line 7");
    /* a 2-D index is no site at all */
    const char *two_d = "__global__ void k(float *y, int w, int h) {\n"
                        "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
                        "  int i = r * w + x;\n  if (i < w * h) y[i] = 1.f;\n}\n"
                        "extern \"C\" void launch(float *y, int w, int h, cudaStream_t s) {\n"
                        "  k<<<dim3(w / 16, h / 16), dim3(16, 16), 0, s>>>(y, w, h);\n}\n";
    char *json = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_list("t.cu", two_d, strlen(two_d), NULL, "grid-stride", &json, &err), KL_OK);
    json_t *arr = json_loads(json, 0, NULL);
    assert_non_null(arr);
    assert_int_equal(json_array_size(arr), 0);
    json_decref(arr);
    free(json);
    /* a loop that steps several elements at a time is found, but not removed */
    const char *unrolled = "__global__ void k(float *y, int n) {\n"
                           "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 2 * blockDim.x * gridDim.x) y[i] = 1.f;\n}\n"
                           "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<64, 256, 0, s>>>(y, n);\n}\n";
    expect_not_applicable(unrolled, "grid-stride", "k:2", true, NULL, "steps by i += 2 * blockDim.x * gridDim.x");
}

/* ---- the built-in tasks ---------------------------------------------------------------------------- */

static bool has_marker(const char *text, const char *marker)
{
    char want[64];
    kl_snprintf(want, sizeof want, "// %s", marker);
    for (const char *p = strstr(text, want); p; p = strstr(p + 1, want)) {
        char c = p[strlen(want)];
        if (c == '\n' || c == ':' || c == ' ' || c == '\r') return true;
    }
    return false;
}

static void tasks_sites(void **state)
{
    (void)state;
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char tdir[1024];
    kl_snprintf(tdir, sizeof tdir, "%s/tasks", root);
    DIR *d = opendir(tdir);
    assert_non_null(d);
    static const char *const mine[] = {"restrict", "block-size", "grid-stride"};
    unsigned experts = 0, removed = 0, naive_sites[3] = {0};
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        for (int which = 0; which < 2; which++) {
            char path[1400];
            kl_snprintf(path, sizeof path, "%s/%s/%s", tdir, e->d_name, which ? "expert.cu" : "naive.cu");
            if (!kl_file_exists(path)) continue;
            char *text = NULL;
            size_t len;
            kl_error err = {0};
            assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
            if (which) experts++;
            for (int t = 0; t < 3; t++) {
                char *json = NULL;
                assert_int_equal(kl_rules_list(path, text, len, NULL, mine[t], &json, &err), KL_OK);
                json_t *arr = json_loads(json, 0, NULL);
                assert_non_null(arr);
                size_t i;
                json_t *s;
                bool present = false;
                json_array_foreach(arr, i, s) {
                    const char *dir = json_string_value(json_object_get(s, "direction"));
                    bool why = json_object_get(json_object_get(s, "features"), "why_not") != NULL;
                    /* recognized: removable, or found and refused with a reason */
                    if (!strcmp(dir, "present") || (!strcmp(dir, "refused") &&
                                                    !strcmp(json_string_value(json_object_get(s, "refused")), "remove")))
                        present = true;
                    if (!which && !strcmp(dir, "applicable") && !why) naive_sites[t]++;
                    if (which && !strcmp(dir, "present") && !why) {
                        /* removing it gives a file that parses back (the catalog checks) */
                        char *out = NULL;
                        kl_status st = rewrite_src(text, mine[t], json_string_value(json_object_get(s, "site")), true,
                                                   NULL, &out, &err);
                        if (st != KL_OK) fail_msg("%s: removing %s@%s: %s", path, mine[t],
                                                  json_string_value(json_object_get(s, "site")), err.message);
                        free(out);
                        removed++;
                    }
                }
                if (which && has_marker(text, mine[t]) && !present)
                    fail_msg("%s is marked '// %s' but no present site was found:\n%s", path, mine[t], json);
                json_decref(arr);
                free(json);
            }
            free(text);
        }
    }
    closedir(d);
    assert_true(experts >= 8);
    assert_true(removed >= 10);
    /* every naive kernel takes restrict; the 1-D ones take block-size and grid-stride */
    assert_true(naive_sites[0] >= 8);
    assert_true(naive_sites[1] >= 4);
    assert_true(naive_sites[2] >= 4);
}

/* The backend: simplifying an expert proposes the removals of all three. */
static void backend_proposes(void **state)
{
    (void)state;
    const char *root = getenv("KL_SOURCE_DIR");
    char path[1024];
    kl_snprintf(path, sizeof path, "%s/tasks/reduce_sum/expert.cu", root);
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
    kl_rewriter *rw = NULL;
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_SIMPLIFY;
    req.source = text;
    req.source_name = "expert.cu";
    kl_candidates c;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    bool restrict_seen = false, block_seen = false;
    for (unsigned i = 0; i < c.count; i++) {
        if (!strcmp(c.items[i].transform, "restrict")) restrict_seen = !strstr(c.items[i].source, "__restrict__");
        if (!strcmp(c.items[i].transform, "block-size"))
            block_seen = strstr(c.items[i].source, "constexpr int THREADS = 256;") != NULL;
    }
    assert_true(restrict_seen);
    assert_true(block_seen);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restrict_refuses),
        cmocka_unit_test(block_size_refuses),
        cmocka_unit_test(grid_stride_refuses),
        cmocka_unit_test(tasks_sites),
        cmocka_unit_test(backend_proposes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
