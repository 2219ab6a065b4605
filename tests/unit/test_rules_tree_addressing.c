/* tree-addressing (src/rewrite/rules/tree_addressing.c): what it refuses, with the reason, and
 * where it finds its two forms. Its golden cases (tests/data/rules/tree-addressing/) run in
 * test_rules_golden.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "util/util.h"

static void expect_refused(const char *text, const char *site, bool remove, const char *reason)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "tree-addressing", site, remove,
                                    remove ? NULL : "{}", &out, &note, &err);
    if (st != KL_ERR_NOT_APPLICABLE)
        fail_msg("tree-addressing@%s: status %d, wanted not applicable:\n%s", site, st, out ? out : err.message);
    if (!strstr(err.message, reason)) fail_msg("tree-addressing@%s: the reason '%s' lacks '%s'", site, err.message, reason);
    free(out);
    free(note);
}

static void expect_no_site(const char *text, const char *site, bool remove)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "tree-addressing", site, remove,
                                    remove ? NULL : "{}", &out, &note, &err);
    if (st == KL_OK) fail_msg("tree-addressing@%s rewrote a kernel that is no site:\n%s", site, out);
    if (!strstr(err.message, "no site")) fail_msg("tree-addressing@%s: %s", site, err.message);
    free(out);
    free(note);
}

static char *rewrite_ok(const char *text, const char *site, bool remove)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "tree-addressing", site, remove,
                                    remove ? NULL : "{}", &out, &note, &err);
    if (st != KL_OK) fail_msg("tree-addressing@%s: %s", site, err.message);
    free(note);
    return out;
}

#define KERNEL_HEAD "__global__ void k(const float *x, float *out) {\n" \
                    "  __shared__ float sh[256];\n  const unsigned tid = threadIdx.x;\n" \
                    "  sh[tid] = x[blockIdx.x * 256 + tid];\n  __syncthreads();\n"
#define SEQ_TREE "  for (unsigned s = 256 / 2; s > 0; s >>= 1) {\n" \
                 "    if (tid < s) sh[tid] += sh[tid + s];\n    __syncthreads();\n  }\n"
#define LAUNCH_256 "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n" \
                   "  k<<<n / 256, 256, 0, st>>>(x, out);\n}\n"

static void refusals(void **state)
{
    (void)state;
    /* the other elements are read after the tree: the two addressings leave different partials there */
    const char *later = KERNEL_HEAD SEQ_TREE "  out[blockIdx.x * 256 + tid] = sh[tid];\n}\n" LAUNCH_256;
    expect_refused(later, "k:6", true, "line 10 reads sh other than sh[0] after the tree");
    /* the tree's extent is not the block */
    const char *half = KERNEL_HEAD SEQ_TREE "  if (tid == 0) out[blockIdx.x] = sh[0];\n}\n"
                       "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                       "  k<<<n / 512, 512, 0, st>>>(x, out);\n}\n";
    expect_refused(half, "k:6", true, "the tree runs over 256 elements, not the block of 512 threads");
    /* a block that is not a power of two: interleaved pairs would read past it */
    const char *odd = "__global__ void k(const float *x, float *out) {\n"
                      "  __shared__ float sh[384];\n  const unsigned tid = threadIdx.x;\n"
                      "  sh[tid] = x[blockIdx.x * 384 + tid];\n  __syncthreads();\n"
                      "  for (unsigned s = 1; s < blockDim.x; s *= 2) {\n"
                      "    if (tid % (2 * s) == 0) sh[tid] += sh[tid + s];\n    __syncthreads();\n  }\n"
                      "  if (tid == 0) out[blockIdx.x] = sh[0];\n}\n"
                      "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                      "  k<<<n / 384, 384, 0, st>>>(x, out);\n}\n";
    expect_refused(odd, "k:6", false, "not a power of two");
    /* a block known at run time only */
    const char *rt = KERNEL_HEAD SEQ_TREE "  if (tid == 0) out[blockIdx.x] = sh[0];\n}\n"
                     "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                     "  k<<<n / 256, n % 1024, 0, st>>>(x, out);\n}\n";
    expect_refused(rt, "k:6", true, "not a 1-D compile-time constant");
    /* inside a loop over rows, a read of another element before the tree sees the last row's partials */
    const char *rows = "__global__ void k(const float *x, float *out) {\n"
                       "  __shared__ float sh[256];\n  const unsigned tid = threadIdx.x;\n"
                       "  for (int r = 0; r < 4; r++) {\n"
                       "    float prev = sh[(tid + 1) % 256];\n"
                       "    sh[tid] = x[r * 256 + tid] + prev;\n    __syncthreads();\n"
                       "    for (unsigned s = 128; s > 0; s >>= 1) {\n"
                       "      if (tid < s) sh[tid] += sh[tid + s];\n      __syncthreads();\n    }\n"
                       "    if (tid == 0) out[r] = sh[0];\n    __syncthreads();\n  }\n}\n" LAUNCH_256;
    expect_refused(rows, "k:8", true, "line 5 reads sh other than sh[0]");
}

/* The shape is read exactly: a tree whose condition is not its own index's is no site. */
static void shapes(void **state)
{
    (void)state;
    /* sequential through the literal half, written back to interleaved over 256 and back again */
    const char *ok = KERNEL_HEAD SEQ_TREE "  if (tid == 0) out[blockIdx.x] = sh[0];\n}\n" LAUNCH_256;
    char *out = rewrite_ok(ok, "k:6", true);
    assert_non_null(strstr(out, "for (unsigned s = 1; s < 256; s <<= 1) {\n    if (tid % (2 * s) == 0) sh[tid] += sh[tid + s];"));
    char *back = rewrite_ok(out, "k:6", false);
    assert_string_equal(back, ok);
    free(back);
    free(out);
    /* `tid <= s`, a tree over another index, a stride that is not the loop's: no site */
    const char *le = KERNEL_HEAD "  for (unsigned s = 256 / 2; s > 0; s >>= 1) {\n"
                     "    if (tid <= s) sh[tid] += sh[tid + s];\n    __syncthreads();\n  }\n}\n" LAUNCH_256;
    expect_no_site(le, "k:6", true);
    const char *other = KERNEL_HEAD "  for (unsigned s = 256 / 2; s > 0; s >>= 1) {\n"
                        "    if (tid < s) sh[tid] += sh[tid + 2 * s];\n    __syncthreads();\n  }\n}\n" LAUNCH_256;
    expect_no_site(other, "k:6", true);
    const char *nosync = KERNEL_HEAD "  for (unsigned s = 1; s < 256; s *= 2) {\n"
                         "    if (tid % (2 * s) == 0) sh[tid] += sh[tid + s];\n  }\n}\n" LAUNCH_256;
    expect_no_site(nosync, "k:6", false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refusals),
        cmocka_unit_test(shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
