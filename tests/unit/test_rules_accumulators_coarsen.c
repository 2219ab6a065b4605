/* accumulators (src/rewrite/rules/accumulators.c) and coarsen (coarsen.c): what they refuse, with
 * the reason, and what is no site. Their golden cases (tests/data/rules/accumulators/, coarsen/) run
 * in test_rules_golden.c; two-pass's refusals are in test_rules_grid_stride_block_reduce.c. */
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

static kl_status run(const char *text, const char *site, char **out, kl_error *err)
{
    char *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "accumulators", site, true, NULL, out, &note, err);
    free(note);
    return st;
}

static void expect_refused(const char *text, const char *site, const char *reason)
{
    char *out = NULL;
    kl_error err = {0};
    kl_status st = run(text, site, &out, &err);
    if (st != KL_ERR_NOT_APPLICABLE) fail_msg("accumulators@%s: status %d:\n%s", site, st, out ? out : err.message);
    if (!strstr(err.message, reason)) fail_msg("accumulators@%s: the reason '%s' lacks '%s'", site, err.message, reason);
    free(out);
}

#define HEAD "__global__ void k(const float *x, float *out, int n) {\n" \
             "  float acc[4];\n  for (int u = 0; u < 4; ++u) acc[u] = 0.f;\n" \
             "  for (int i = threadIdx.x; i + 768 < n; i += 1024)\n" \
             "    for (int u = 0; u < 4; ++u) acc[u] += x[i + 256 * u];\n"
#define FOLD "  float s = 0.f;\n  for (int u = 0; u < 4; ++u) s += acc[u];\n"
#define TAIL "  atomicAdd(out, s);\n}\n"

static void refusals(void **state)
{
    (void)state;
    /* one accumulator read on its own: one sum would not hold it */
    expect_refused(HEAD FOLD "  out[1] = acc[2];\n" TAIL, "k:2:acc", "line 8 uses acc otherwise than `acc[e] += x`");
    /* a product into an accumulator */
    expect_refused(HEAD "  acc[0] *= 2.f;\n" FOLD TAIL, "k:2:acc", "line 6 uses acc otherwise");
    /* zeroed in part only */
    const char *partial = "__global__ void k(const float *x, float *out, int n) {\n"
                          "  float acc[2];\n  acc[0] = 0.f;\n"
                          "  for (int i = threadIdx.x; i < n; i += 256) acc[i & 1] += x[i];\n"
                          "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    expect_refused(partial, "k:2:acc", "acc is not zeroed element by element");
    /* added to before the zeroing */
    const char *early = "__global__ void k(const float *x, float *out, int n) {\n"
                        "  float acc[2];\n  acc[1] += x[0];\n"
                        "  for (int u = 0; u < 2; ++u) acc[u] = 0.f;\n"
                        "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    expect_refused(early, "k:2:acc", "acc is added to before it is zeroed");
}

/* Without a fold over the whole array there are no partial sums: no site. The fold reads the sum. */
static void sites(void **state)
{
    (void)state;
    char *out = NULL;
    kl_error err = {0};
    const char *nofold = HEAD "  atomicAdd(out, acc[0] + acc[1] + acc[2] + acc[3]);\n}\n";
    assert_int_not_equal(run(nofold, "k:2:acc", &out, &err), KL_OK);
    assert_non_null(strstr(err.message, "no site"));
    free(out);
    out = NULL;
    const char *half = HEAD "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    assert_int_not_equal(run(half, "k:2:acc", &out, &err), KL_OK);
    free(out);
    out = NULL;
    assert_int_equal(run(HEAD FOLD TAIL, "k:2:acc", &out, &err), KL_OK);
    assert_non_null(strstr(out, "  float acc = 0.f;\n  for (int i = threadIdx.x; i + 768 < n; i += 1024)\n"
                                "    for (int u = 0; u < 4; ++u) acc += x[i + 256 * u];\n  float s = 0.f;\n  s += acc;\n"));
    free(out);
}

static void coarsen_expect(const char *text, const char *site, const char *reason)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "coarsen", site, true, NULL, &out, &note, &err);
    if (!reason) {
        if (st != KL_OK) fail_msg("coarsen@%s: %s", site, err.message);
    } else {
        if (st == KL_OK) fail_msg("coarsen@%s rewrote:\n%s", site, out);
        if (!strstr(err.message, reason)) fail_msg("coarsen@%s: the reason '%s' lacks '%s'", site, err.message, reason);
    }
    free(out);
    free(note);
}

#define PAIR "__global__ void k(const float *x, float *out, int n) {\n" \
             "  float s = 0.f;\n  int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;\n" \
             "  if (i < n) {\n    s += x[i];\n    if (i + blockDim.x < n) s += x[i + blockDim.x];\n  }\n"
#define PAIR_LAUNCH "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n" \
                    "  k<<<(n + 2 * 256 - 1) / (2 * 256), 256, 0, st>>>(x, out, n);\n}\n"

static void coarsen_refusals(void **state)
{
    (void)state;
    coarsen_expect(PAIR "  atomicAdd(out, s);\n}\n" PAIR_LAUNCH, "k:3", NULL);
    /* each thread's partial stored as it is: the number of threads changes what is stored */
    coarsen_expect(PAIR "  out[threadIdx.x] = s;\n}\n" PAIR_LAUNCH, "k:3", "stores to global memory other than by atomicAdd");
    /* a partial per block */
    coarsen_expect(PAIR "  if (threadIdx.x == 0) out[blockIdx.x] = s;\n}\n" PAIR_LAUNCH, "k:3",
                   "uses blockIdx outside the grid-stride loops' headers");
    /* the index read again after its guard */
    coarsen_expect(PAIR "  if (i == 0) atomicAdd(out, s);\n}\n" PAIR_LAUNCH, "k:3", "i is also used outside its guard (line 8)");
    /* the second element is not the first one's statement a block on: no site */
    coarsen_expect(PAIR_LAUNCH, "k:3", "no site");
    const char *other = "__global__ void k(const float *x, float *out, int n) {\n"
                        "  float s = 0.f;\n  int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;\n"
                        "  if (i < n) {\n    s += x[i];\n    if (i + blockDim.x < n) s += 2.f * x[i + blockDim.x];\n  }\n"
                        "  atomicAdd(out, s);\n}\n" PAIR_LAUNCH;
    coarsen_expect(other, "k:3", "no site");
    /* a constant coefficient that is not twice the launch's block */
    const char *cst = "__global__ void k(const float *x, float *out, int n) {\n"
                      "  float s = 0.f;\n  int i = blockIdx.x * 256 * 2 + threadIdx.x;\n"
                      "  if (i < n) {\n    s += x[i];\n    if (i + 256 < n) s += x[i + 256];\n  }\n"
                      "  atomicAdd(out, s);\n}\n"
                      "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                      "  k<<<(n + 2 * 128 - 1) / (2 * 128), 128, 0, st>>>(x, out, n);\n}\n";
    coarsen_expect(cst, "k:3", "the index steps blocks by 512, which is not 2 times the block at line 11");
    /* a running maximum is no sum: refused by the body checks */
    const char *mx = "__global__ void k(const float *x, unsigned *out, int n) {\n"
                     "  float m = 0.f;\n  int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;\n"
                     "  if (i < n) {\n    m = fmaxf(m, x[i]);\n    if (i + blockDim.x < n) m = fmaxf(m, x[i + blockDim.x]);\n  }\n"
                     "  atomicMax(out, __float_as_uint(m));\n}\n"
                     "extern \"C\" void launch(const float *x, unsigned *out, int n, cudaStream_t st) {\n"
                     "  k<<<(n + 2 * 256 - 1) / (2 * 256), 256, 0, st>>>(x, out, n);\n}\n";
    coarsen_expect(mx, "k:3", "the body updates m (line 5), declared before it");
}

/* The count form: ITEMS elements a block apart per thread, counted by a constexpr. */
#define ITEMS_HEAD "constexpr int ITEMS = 4;\n" \
                   "__global__ void k(const float *x, float *out, int n) {\n" \
                   "  float s = 0.f;\n  const int base = blockIdx.x * (256 * ITEMS) + threadIdx.x;\n"
#define ITEMS_LOOP "  for (int u = 0; u < ITEMS; ++u)\n    if (base + u * 256 < n) s += x[base + u * 256];\n"
#define ITEMS_LAUNCH "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n" \
                     "  k<<<(n + 256 * ITEMS - 1) / (256 * ITEMS), 256, 0, st>>>(x, out, n);\n}\n"

static void coarsen_count_refusals(void **state)
{
    (void)state;
    /* the count as a tile of 256 * ITEMS (a product with the block), the loop's bound, u * 256 */
    coarsen_expect(ITEMS_HEAD ITEMS_LOOP "  atomicAdd(out, s);\n}\n" ITEMS_LAUNCH, "k:5:ITEMS", NULL);
    /* the count used for something else than elements a block apart */
    coarsen_expect(ITEMS_HEAD ITEMS_LOOP "  atomicAdd(out, s * ITEMS);\n}\n" ITEMS_LAUNCH, "k:5:ITEMS",
                   "line 7 uses ITEMS other than as a count of elements a block apart");
    /* the loop's variable as an offset of other than the block */
    coarsen_expect(ITEMS_HEAD "  for (int u = 0; u < ITEMS; ++u)\n    if (base + u * 128 < n) s += x[base + u * 128];\n"
                              "  atomicAdd(out, s);\n}\n" ITEMS_LAUNCH,
                   "k:5:ITEMS", "line 6 uses u other than as an offset of u times the block");
    /* each thread's partial stored as it is */
    coarsen_expect(ITEMS_HEAD ITEMS_LOOP "  out[base] = s;\n}\n" ITEMS_LAUNCH, "k:5:ITEMS",
                   "stores to global memory other than by atomicAdd");
    /* a helper reading the same count would keep its value */
    coarsen_expect("constexpr int ITEMS = 4;\n__device__ float first(const float *x) { return x[ITEMS]; }\n"
                   "__global__ void k(const float *x, float *out, int n) {\n"
                   "  float s = 0.f;\n  const int base = blockIdx.x * (256 * ITEMS) + threadIdx.x;\n" ITEMS_LOOP
                   "  atomicAdd(out, s + first(x));\n}\n" ITEMS_LAUNCH,
                   "k:6:ITEMS", "ITEMS is also used by first, which would keep 4");
}

/* The vector form: four consecutive elements gathered into a float4 and summed. */
#define VEC_HEAD "__global__ void k(const float *x, float *out, int groups, int n) {\n" \
                 "  float s = 0.f;\n" \
                 "  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {\n" \
                 "    const float4 v = make_float4(x[4 * g], x[4 * g + 1], x[4 * g + 2], x[4 * g + 3]);\n"
#define VEC_LAUNCH "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n" \
                   "  k<<<(n / 4 + 255) / 256, 256, 0, st>>>(x, out, n / 4, n);\n}\n"

static void coarsen_vector_refusals(void **state)
{
    (void)state;
    /* an inline sum of the components' squares, and a function returning one */
    coarsen_expect(VEC_HEAD "    s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;\n  }\n  atomicAdd(out, s);\n}\n" VEC_LAUNCH,
                   "k:4:x", NULL);
    coarsen_expect("__device__ float sq(const float4 &q) { return q.x * q.x + q.y * q.y + (q.z * q.z + q.w * q.w); }\n" VEC_HEAD
                   "    s += sq(v);\n  }\n  atomicAdd(out, s);\n}\n" VEC_LAUNCH,
                   "k:5:x", NULL);
    /* the terms differ by more than the component */
    coarsen_expect(VEC_HEAD "    s += v.x + v.y + v.z + 2.f * v.w;\n  }\n  atomicAdd(out, s);\n}\n" VEC_LAUNCH, "k:4:x",
                   "line 5 uses the vector other than by a sum over its components");
    /* a component read alone */
    coarsen_expect(VEC_HEAD "    s += v.x;\n  }\n  atomicAdd(out, s);\n}\n" VEC_LAUNCH, "k:4:x",
                   "line 5 uses the vector other than by a sum over its components");
    /* the sum stored per item (four elements pooled into one output): no sum reaches memory */
    coarsen_expect(VEC_HEAD "    out[g] = v.x + v.y + v.z + v.w;\n  }\n}\n" VEC_LAUNCH, "k:4:x",
                   "line 5 uses the vector's components other than in a sum added to a local");
    /* the item count used in arithmetic (the tail's start) would change meaning */
    coarsen_expect(VEC_HEAD "    s += v.x + v.y + v.z + v.w;\n  }\n"
                   "  if (blockIdx.x == 0 && threadIdx.x < n - 4 * groups) s += x[4 * groups + threadIdx.x];\n"
                   "  atomicAdd(out, s);\n}\n" VEC_LAUNCH,
                   "k:4:x", "line 7 uses the item count groups other than in a comparison");
    /* each thread's partial stored as it is */
    coarsen_expect(VEC_HEAD "    s += v.x + v.y + v.z + v.w;\n  }\n  out[threadIdx.x] = s;\n}\n" VEC_LAUNCH, "k:4:x",
                   "stores to global memory other than by atomicAdd");
    /* the vector declared beside another one, whose type would change with it */
    coarsen_expect("__global__ void k(const float *x, float *out, int groups, int n) {\n  float s = 0.f;\n"
                   "  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {\n"
                   "    float4 v, w = make_float4(1.f, 2.f, 3.f, 4.f);\n"
                   "    v = make_float4(x[4 * g], x[4 * g + 1], x[4 * g + 2], x[4 * g + 3]);\n"
                   "    s += v.x + v.y + v.z + v.w + w.x;\n  }\n  atomicAdd(out, s);\n}\n" VEC_LAUNCH,
                   "k:5:x", "line 5 stores the gather to something not a local float4 declared alone");
    /* registers gathered (elements of a local array's row), not a named array's elements: no site */
    coarsen_expect("__global__ void k(const float *x, float *out, int groups) {\n  float s = 0.f, r[2][4] = {};\n"
                   "  int g = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "  if (g < groups) {\n    r[1][0] = x[g];\n"
                   "    float4 v = make_float4(r[1][4 * 0], r[1][4 * 0 + 1], r[1][4 * 0 + 2], r[1][4 * 0 + 3]);\n"
                   "    s += v.x + v.y + v.z + v.w;\n  }\n  atomicAdd(out, s);\n}\n"
                   "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                   "  k<<<(n + 255) / 256, 256, 0, st>>>(x, out, n);\n}\n",
                   "k:6:r[1]", "no site");
    /* not consecutive: a gather of every other element is no site */
    coarsen_expect("__global__ void k(const float *x, float *out, int groups) {\n  float s = 0.f;\n"
                   "  int g = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "  if (g < groups) {\n    float4 v = make_float4(x[4 * g], x[4 * g + 2], x[4 * g + 4], x[4 * g + 6]);\n"
                   "    s += v.x + v.y + v.z + v.w;\n  }\n  atomicAdd(out, s);\n}\n"
                   "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t st) {\n"
                   "  k<<<(n / 8 + 255) / 256, 256, 0, st>>>(x, out, n / 8);\n}\n",
                   "k:5:x", "no site");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refusals),
        cmocka_unit_test(sites),
        cmocka_unit_test(coarsen_refusals),
        cmocka_unit_test(coarsen_count_refusals),
        cmocka_unit_test(coarsen_vector_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
