/* grid-stride over several loops (src/rewrite/rules/grid_stride.c, analyse_group) and block-reduce
 * (src/rewrite/rules/block_reduce.c): the reasons for "not applicable", and the reduce_sum and
 * histogram experts walked down (compiled at the end). Their golden cases (grid-stride/multi/,
 * block-reduce/) run in test_rules_golden.c. */
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
#include "rules_golden.h"

/* ---- the experts walked down, compiled together at the end ------------------------------------------- */

static golden_batch compiles;

static int teardown(void **state)
{
    (void)state;
    golden_batch_release(&compiles);
    return 0;
}

/* ---- not applicable, with the reason --------------------------------------------------------------- */

static void expect_not_applicable(const char *text, const char *transform, const char *site, bool remove,
                                  const char *reason)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, remove, remove ? NULL : "{}",
                                    &out, &note, &err);
    if (st != KL_ERR_NOT_APPLICABLE) fail_msg("%s@%s: status %d, wanted not applicable:\n%s", transform, site, st, out ? out : err.message);
    if (!strstr(err.message, reason)) fail_msg("%s@%s: the reason '%s' lacks '%s'", transform, site, err.message, reason);
    assert_true(kl_str_starts(err.message, "not applicable: "));
    free(out);
    free(note);
}

#define LAUNCH1 "extern \"C\" void launch(float *y, float *p, int n, cudaStream_t s) {\n  k<<<64, 256, 0, s>>>(y, p, n);\n}\n"

static void grid_stride_group_refuses(void **state)
{
    (void)state;
    /* the grid's size matters after the loop: one partial per block */
    const char *partials = "__global__ void k(float *y, float *p, int n) {\n"
                           "  float s = 0.f;\n"
                           "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = 1.f;\n"
                           "  if (threadIdx.x == 0) p[blockIdx.x] = s;\n}\n" LAUNCH1;
    expect_not_applicable(partials, "grid-stride", "k:3", true, "line 4 uses blockIdx outside the grid-stride loops");
    /* an unrolled loop without its remainder */
    const char *no_rem = "__global__ void k(float *y, float *p, int n) {\n"
                         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                         "  const int g = blockDim.x * gridDim.x;\n"
                         "  for (; i + g < n; i += 2 * g) { y[i] = 1.f; y[i + g] = 1.f; }\n}\n" LAUNCH1;
    expect_not_applicable(no_rem, "grid-stride", "k:4", true, "not followed by its remainder over i < n");
    /* a bound that no size parameter dominates */
    const char *loaded = "__global__ void k(float *y, float *p, int n) {\n"
                         "  const int m = (int)p[0];\n"
                         "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += blockDim.x * gridDim.x) y[i] = 1.f;\n"
                         "  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += blockDim.x * gridDim.x) y[j] = 2.f;\n}\n" LAUNCH1;
    expect_not_applicable(loaded, "grid-stride", "k:3", true, "cannot show that the loops from line 3 cover at most");
    /* a remainder over another bound */
    const char *other = "__global__ void k(float *y, float *p, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  const int g = blockDim.x * gridDim.x;\n"
                        "  for (; i + g < n; i += 2 * g) { y[i] = 1.f; y[i + g] = 1.f; }\n"
                        "  for (; i < n - 1; i += g) y[i] = 1.f;\n}\n" LAUNCH1;
    expect_not_applicable(other, "grid-stride", "k:4", true, "not followed by its remainder");
    /* the body carries a value between elements */
    const char *carry = "__global__ void k(float *y, float *p, int n) {\n"
                        "  float acc = 0.f;\n"
                        "  const int g = blockDim.x * gridDim.x;\n"
                        "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += g) { acc += y[i]; y[i] = acc; }\n}\n" LAUNCH1;
    expect_not_applicable(carry, "grid-stride", "k:4", true, "updates acc");
    /* a grid sized from n by 256-thread blocks would not cover n with a stride of 128 per block */
    const char *mism = "#define B 128\n__global__ void k(float *y, float *p, int n) {\n"
                       "  for (int i = blockIdx.x * B + threadIdx.x; i < n; i += B * gridDim.x) y[i] = 1.f;\n}\n" LAUNCH1;
    expect_not_applicable(mism, "grid-stride", "k:3", true, "steps blocks by 128, which is not the block size at line 6");
}

/* A partial sum added to by the loops (`acc += e`): removed only where it reaches memory by sums. */
#define LAUNCH_SUM "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n" \
                   "  k<<<64, 256, 0, s>>>(x, out, n);\n}\n"
#define PAIR_LOOP "  float acc = 0.f;\n" \
                  "  int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;\n" \
                  "  while (i < n) {\n    acc += x[i];\n    if (i + blockDim.x < n) acc += x[i + blockDim.x];\n" \
                  "    i += blockDim.x * 2 * gridDim.x;\n  }\n"

static void grid_stride_partial_sums(void **state)
{
    (void)state;
    /* summed by shuffles and added once per warp: one pair per thread, ceil(n / 512) blocks */
    const char *ok = "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                     "  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);\n"
                     "  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);\n}\n" LAUNCH_SUM;
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", ok, strlen(ok), NULL, "grid-stride", "k:4", true, NULL, &out, &note, &err);
    if (st != KL_OK) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "  if (i < n) {\n    acc += x[i];"));
    assert_non_null(strstr(out, "k<<<(n + 2 * 256 - 1) / (2 * 256), 256, 0, s>>>"));
    assert_null(strstr(out, "gridDim"));
    free(out);
    free(note);
    /* a square of the partial is no sum of the elements' squares */
    const char *square = "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                         "  atomicAdd(out, acc * acc);\n}\n" LAUNCH_SUM;
    expect_not_applicable(square, "grid-stride", "k:4", true, "line 9 uses the partial sum acc other than by a sum");
    /* through a local first: the product is found on what the partial flows into */
    const char *via = "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                      "  float t = acc;\n  atomicAdd(out, t * 2.f);\n}\n" LAUNCH_SUM;
    expect_not_applicable(via, "grid-stride", "k:4", true, "uses the partial sum t other than by a sum");
    /* a plain store of each thread's partial */
    const char *store = "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                        "  out[threadIdx.x] = acc;\n}\n" LAUNCH_SUM;
    expect_not_applicable(store, "grid-stride", "k:4", true, "line 9 stores to global memory other than by atomicAdd");
    /* one partial per block: the block count follows the grid */
    const char *per_block = "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                            "  if (threadIdx.x == 0) out[blockIdx.x] = acc;\n}\n" LAUNCH_SUM;
    expect_not_applicable(per_block, "grid-stride", "k:4", true, "line 9 stores one value per block");
    /* a helper that squares what it is given is no sum either */
    const char *helper = "__device__ float sq(float v) { return v * v; }\n"
                         "__global__ void k(const float *x, float *out, int n) {\n" PAIR_LOOP
                         "  atomicAdd(out, sq(acc));\n}\n" LAUNCH_SUM;
    expect_not_applicable(helper, "grid-stride", "k:5", true, "line 10 passes a partial sum to sq(acc)");
    /* a block coefficient that is no whole number of blocks */
    const char *odd = "__global__ void k(const float *x, float *out, int n) {\n"
                      "  float acc = 0.f;\n  int i = blockIdx.x * 384 + threadIdx.x;\n"
                      "  while (i < n) {\n    acc += x[i];\n    i += 384 * gridDim.x;\n  }\n"
                      "  atomicAdd(out, acc);\n}\n" LAUNCH_SUM;
    expect_not_applicable(odd, "grid-stride", "k:4", true, "steps blocks by 384, which is not the block size");
}

/* two-pass: what it refuses, with the reason. */
#define TP_K1 "__device__ float slots[64];\n" \
              "__global__ void k1(const float *x, int n) {\n" \
              "  float s = 0.f;\n" \
              "  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += 256 * gridDim.x) s += x[i];\n" \
              "  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);\n" \
              "  if (threadIdx.x == 0) slots[blockIdx.x] = s;\n}\n"
#define TP_K2 "__global__ void k2(float *out, int m) {\n" \
              "  float t = 0.f;\n  for (int b = 0; b < m; b++) t += slots[b];\n  out[0] = t;\n}\n"

/* two-pass with f32 partials of two kernels: a double accumulator stored to the slot by a one-thread
 * kernel before the second launch; the f32 slot itself where the names could not reach (a namespace)
 * or the store's launch has no statement of its own. */
static char *two_pass_out(const char *text, const char *site)
{
    char *o = NULL, *note = NULL;
    kl_error e = {0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, "two-pass", site, true, NULL, &o, &note, &e) != KL_OK)
        fail_msg("two-pass@%s: %s", site, e.message);
    free(note);
    return o;
}

static void two_pass_accumulators(void **state)
{
    (void)state;
    const char *top = TP_K1 TP_K2 "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                                  "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    char *o = two_pass_out(top, "k1:6");
    assert_non_null(strstr(o, "__device__ float slots[64];\n\n// two-pass removed: the blocks' sum, added up in double, "
                              "stored to slots[0] as f32\n__device__ double kl_total;\n"
                              "__global__ void kl_store_total() { slots[0] = (float)kl_total; }\n"));
    assert_non_null(strstr(o, "  if (threadIdx.x == 0) atomicAdd(&kl_total, (double)(s));\n"));
    assert_non_null(strstr(o, "  double *kl_sum = nullptr;\n  cudaGetSymbolAddress((void **)&kl_sum, kl_total);\n"
                              "  cudaMemsetAsync(kl_sum, 0, sizeof(double), s);\n  k1<<<64, 256, 0, s>>>(x, n);\n"
                              "  kl_store_total<<<1, 1, 0, s>>>();\n  k2<<<1, 1, 0, s>>>(out, 1);\n"));
    free(o);
    /* a name already taken: a fresh one */
    const char *taken = "__device__ int kl_total;\n" TP_K1 TP_K2
                        "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                        "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    o = two_pass_out(taken, "k1:7");
    assert_non_null(strstr(o, "atomicAdd(&kl_total2, (double)(s))"));
    free(o);
    /* the kernels in a namespace: the f32 slot */
    const char *ns = "namespace red {\n" TP_K1 TP_K2 "}\nusing namespace red;\n"
                     "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                     "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    o = two_pass_out(ns, "k1:7");
    assert_non_null(strstr(o, "atomicAdd(&slots[0], s)"));
    assert_null(strstr(o, "kl_total"));
    free(o);
    /* the second launch is the branch of an if without braces: the f32 slot */
    const char *branch = TP_K1 TP_K2 "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                                     "  k1<<<64, 256, 0, s>>>(x, n);\n  if (out) k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    o = two_pass_out(branch, "k1:6");
    assert_non_null(strstr(o, "atomicAdd(&slots[0], s)"));
    free(o);
}

static void two_pass_refuses(void **state)
{
    (void)state;
    /* the second launch is given another count than the first launch's grid */
    const char *count = TP_K1 TP_K2 "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                                    "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 32);\n}\n";
    expect_not_applicable(count, "two-pass", "k1:6", true, "passes 32 slots to k2, not the grid of the launch at line 14 (64)");
    /* the second kernel reads a slot besides its loop */
    const char *other = TP_K1 "__global__ void k2(float *out, int m) {\n"
                              "  float t = 0.f;\n  for (int b = 0; b < m; b++) t += slots[b];\n  out[0] = t + slots[1];\n}\n"
                              "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                              "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    expect_not_applicable(other, "two-pass", "k1:6", true, "line 11 uses slots besides the loop adding the slots");
    /* launched twice: the count of which launch */
    const char *twice = TP_K1 TP_K2 "extern \"C\" void launch(const float *x, float *out, int n, cudaStream_t s) {\n"
                                    "  k1<<<64, 256, 0, s>>>(x, n);\n  k1<<<64, 256, 0, s>>>(x, n);\n"
                                    "  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    expect_not_applicable(twice, "two-pass", "k1:6", true, "k1 is launched 2 times in the file");
    /* the same kernel over its own partials (the samples' reductions): its last launch must be one block
     * over the slots, given the first launch's grid */
#define SELF_K "__global__ void r(const float *in, float *part, int n) {\n" \
               "  float s = 0.f;\n" \
               "  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += 256 * gridDim.x) s += in[i];\n" \
               "  if (threadIdx.x == 0) part[blockIdx.x] = s;\n}\n" \
               "extern \"C\" void launch(const float *x, float *out, float *scratch, int n, cudaStream_t s) {\n"
    const char *self = SELF_K "  r<<<64, 256, 0, s>>>(x, scratch, n);\n  r<<<1, 256, 0, s>>>(scratch, out, 64);\n}\n";
    char *o = NULL, *note = NULL;
    kl_error e = {0};
    if (kl_rules_rewrite("t.cu", self, strlen(self), NULL, "two-pass", "r:4", true, NULL, &o, &note, &e) != KL_OK)
        fail_msg("%s", e.message);
    assert_non_null(strstr(o, "  if (threadIdx.x == 0) atomicAdd(&part[0], s);\n"));
    assert_non_null(strstr(o, "  cudaMemsetAsync(scratch, 0, sizeof(float), s);\n  r<<<64, 256, 0, s>>>(x, scratch, n);\n"
                              "  cudaMemsetAsync(out, 0, sizeof(float), s);\n  r<<<1, 256, 0, s>>>(scratch, out, 1);\n"));
    free(o);
    free(note);
    const char *two_blocks = SELF_K "  r<<<64, 256, 0, s>>>(x, scratch, n);\n  r<<<2, 256, 0, s>>>(scratch, out, 64);\n}\n";
    expect_not_applicable(two_blocks, "two-pass", "r:4", true, "the last launch of r (line 8) is not one block");
    const char *self_count = SELF_K "  r<<<64, 256, 0, s>>>(x, scratch, n);\n  r<<<1, 256, 0, s>>>(scratch, out, 32);\n}\n";
    expect_not_applicable(self_count, "two-pass", "r:4", true, "does not read the slots scratch over the first launches' grid (64)");
    /* slots that atomicAdd cannot add */
    const char *wide = "__device__ long long slots[64];\n"
                       "__global__ void k1(const long long *x, int n) {\n"
                       "  if (threadIdx.x == 0) slots[blockIdx.x] = x[blockIdx.x];\n}\n"
                       "__global__ void k2(long long *out, int m) {\n"
                       "  long long t = 0;\n  for (int b = 0; b < m; b++) t += slots[b];\n  out[0] = t;\n}\n"
                       "extern \"C\" void launch(const long long *x, long long *out, int n, cudaStream_t s) {\n"
                       "  k1<<<64, 256, 0, s>>>(x, n);\n  k2<<<1, 1, 0, s>>>(out, 64);\n}\n";
    expect_not_applicable(wide, "two-pass", "k1:3", true, "the slots of slots are long long, which atomicAdd does not add");
}

/* `while (cond) { …; i += G; }` read as a loop over one grid, and what it refuses. */
static void grid_stride_while_refuses(void **state)
{
    (void)state;
    /* the index goes on after the loop (a tail reads it): the loop is no element of its own */
    const char *after = "__global__ void k(float *y, float *p, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  while (i < n) {\n    y[i] = 1.f;\n    i += blockDim.x * gridDim.x;\n  }\n"
                        "  if (i == n) p[0] = 2.f;\n}\n" LAUNCH1;
    expect_not_applicable(after, "grid-stride", "k:3", true, "i is also used outside the loops (line 7)");
    /* a partial per block after the loop */
    const char *partials = "__global__ void k(float *y, float *p, int n) {\n"
                           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                           "  float s = 0.f;\n"
                           "  while (i < n) {\n    y[i] = 1.f;\n    i += blockDim.x * gridDim.x;\n  }\n"
                           "  if (threadIdx.x == 0) p[blockIdx.x] = s;\n}\n" LAUNCH1;
    expect_not_applicable(partials, "grid-stride", "k:4", true, "line 8 uses blockIdx outside the grid-stride loops");
    /* a body that steps the index besides its last statement */
    const char *twice = "__global__ void k(float *y, float *p, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  while (i < n) {\n    y[i] = 1.f;\n    i += 1;\n    i += blockDim.x * gridDim.x;\n  }\n}\n" LAUNCH1;
    expect_not_applicable(twice, "grid-stride", "k:3", true, "assigns");
    /* a tile of four loads a block apart, whole tiles only (no tail): one tile per thread, ceil(n / 1024)
     * blocks of 256; a partial tile is skipped as before */
    const char *tile = "__global__ void k(float *y, float *p, int n) {\n"
                       "  int i = blockIdx.x * 1024 + threadIdx.x;\n"
                       "  while (i + 768 < n) {\n    y[i] = 1.f; y[i + 256] = 1.f; y[i + 512] = 1.f; y[i + 768] = 1.f;\n"
                       "    i += gridDim.x * 1024;\n  }\n}\n" LAUNCH1;
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    if (kl_rules_rewrite("t.cu", tile, strlen(tile), NULL, "grid-stride", "k:3", true, NULL, &out, &note, &err) != KL_OK)
        fail_msg("%s", err.message);
    assert_non_null(strstr(out, "  if (i + 768 < n) {\n"));
    assert_null(strstr(out, "gridDim"));
    assert_non_null(strstr(out, "k<<<(n + 4 * 256 - 1) / (4 * 256), 256, 0, s>>>"));
    free(out);
    free(note);
    /* the offset is not a whole number of loads: a step of several grids is still refused */
    const char *two = "__global__ void k(float *y, float *p, int n) {\n"
                      "  int i = blockIdx.x * 1024 + threadIdx.x;\n"
                      "  while (i + 768 < n) {\n    y[i] = 1.f;\n    i += 2 * gridDim.x * 1024;\n  }\n}\n" LAUNCH1;
    expect_not_applicable(two, "grid-stride", "k:3", true, "not one grid of threads");
    /* after a tile loop the index may feed the tail of the last tile only */
    const char *tail_bad = "__global__ void k(float *y, float *p, int n) {\n"
                           "  int i = blockIdx.x * 512 + threadIdx.x;\n"
                           "  while (i + 256 < n) {\n    y[i] = 1.f; y[i + 256] = 1.f;\n    i += gridDim.x * 512;\n  }\n"
                           "  p[i % 7] = 1.f;\n}\n" LAUNCH1;
    expect_not_applicable(tail_bad, "grid-stride", "k:3", true, "not as the tail of its last tile");
}

static void block_reduce_refuses(void **state)
{
    (void)state;
    static const char helper[] =
        "__device__ float bsum(float v) {\n  __shared__ float t[256];\n  t[threadIdx.x] = v;\n  __syncthreads();\n"
        "  for (int s = 128; s > 0; s >>= 1) { if (threadIdx.x < s) t[threadIdx.x] += t[threadIdx.x + s]; __syncthreads(); }\n"
        "  float r = t[0];\n  __syncthreads();\n  return r;\n}\n";
    char text[2048];
    /* the partial is also stored per thread */
    kl_snprintf(text, sizeof text,
                "%s__global__ void k(float *y, float *p, int n) {\n"
                "  float s = 0.f;\n"
                "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += y[i];\n"
                "  y[threadIdx.x] = s;\n"
                "  const float t = bsum(s);\n"
                "  if (threadIdx.x == 0) atomicAdd(p, t);\n}\n" LAUNCH1,
                helper);
    expect_not_applicable(text, "block-reduce", "k:14", true, "line 13 uses the partial s otherwise");
    /* a partial of another type than the output */
    kl_snprintf(text, sizeof text,
                "%s__global__ void k(float *y, double *p, int n) {\n"
                "  float s = 0.f;\n"
                "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += y[i];\n"
                "  const float t = bsum(s);\n"
                "  if (threadIdx.x == 0) atomicAdd(p, t);\n}\n"
                "extern \"C\" void launch(float *y, double *p, int n, cudaStream_t s) {\n  k<<<64, 256, 0, s>>>(y, p, n);\n}\n",
                helper);
    /* (atomicAdd(double*, float) picks the double overload: not a block sum of this output) */
    char *json = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_list("t.cu", text, strlen(text), NULL, "block-reduce", &json, &err), KL_OK);
    assert_non_null(strstr(json, "the partial s is float, the output p holds double"));
    free(json);
    /* apply: an early return would leave threads out of the block sum */
    const char *ret = "__global__ void k(float *y, float *p, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i >= n) return;\n"
                      "  atomicAdd(p, y[i]);\n}\n" LAUNCH1;
    expect_not_applicable(ret, "block-reduce", "k:4:p", false, "a return at line 3");
    /* apply: the atomic's old value is used */
    const char *used = "__global__ void k(float *y, float *p, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  if (i < n) y[i] = atomicAdd(p, y[i]);\n}\n" LAUNCH1;
    expect_not_applicable(used, "block-reduce", "k:3:p", false, "is not a statement of its own");
    /* apply: a 2-D block */
    const char *twod = "__global__ void k(float *y, float *p, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  if (i < n) atomicAdd(p, y[i]);\n}\n"
                       "extern \"C\" void launch(float *y, float *p, int n, cudaStream_t s) {\n  k<<<64, dim3(32, 8), 0, s>>>(y, p, n);\n}\n";
    expect_not_applicable(twod, "block-reduce", "k:3:p", false, "the block at line 6 is not 1-D");
}

/* ---- the experts, walked down ------------------------------------------------------------------------ */

/* The present site of a transform in text whose features have no why_not (NULL when none); fails when
 * want_why is set and the site's why_not lacks it. */
static char *present_site(const char *text, const char *transform, const char *want_why)
{
    char *json = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_list("expert.cu", text, strlen(text), NULL, transform, &json, &err), KL_OK);
    json_t *arr = json_loads(json, 0, NULL);
    assert_non_null(arr);
    char *site = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), "present")) continue;
        const char *why = json_string_value(json_object_get(json_object_get(s, "features"), "why_not"));
        if (want_why) {
            if (!why || !strstr(why, want_why)) fail_msg("%s: the why_not '%s' lacks '%s'", transform, why ? why : "", want_why);
            continue;
        }
        if (!why && !site) site = kl_strdup(json_string_value(json_object_get(s, "site")));
    }
    json_decref(arr);
    free(json);
    return site;
}

static char *rewrite_at(const char *text, const char *transform, const char *site, bool remove)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("expert.cu", text, strlen(text), NULL, transform, site, remove, remove ? NULL : "{}",
                                    &out, &note, &err);
    if (st != KL_OK) fail_msg("%s %s@%s: %s", remove ? "removing" : "applying", transform, site, err.message);
    free(note);
    return out;
}

static char *remove_at(const char *text, const char *transform, const char *site)
{
    return rewrite_at(text, transform, site, true);
}

static char *read_task(const char *task, const char *file)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char path[1024];
    kl_snprintf(path, sizeof path, "%s/tasks/%s/%s", root, task, file);
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
    return text;
}

/* The sumsq expert's `while` loop over tiles of four float4 loads a block apart: seen, and refused
 * with the reason (the same one the listing gives). */
static void sumsq_expert_while(void **state)
{
    (void)state;
    char *text = read_task("../corpus/sumsq", "expert.cu");
    /* the tile loop and its tail are read; the store of one sum per block is what stops it */
    expect_not_applicable(text, "grid-stride", "sumsq_partials:84", true, "line 108 stores one value per block");
    free(text);
}

static void reduce_sum_expert(void **state)
{
    (void)state;
    char *text = read_task("reduce_sum", "expert.cu");
    /* the ticket needs the grid: grid-stride says so, block-reduce goes first */
    char *none = present_site(text, "grid-stride", "uses blockIdx outside the grid-stride loops");
    assert_null(none);
    char *site = present_site(text, "block-reduce", NULL);
    assert_non_null(site);
    char *v1 = remove_at(text, "block-reduce", site);
    free(site);
    assert_null(strstr(v1, "g_partials"));
    assert_null(strstr(v1, "block_sum(mine"));
    assert_non_null(strstr(v1, "cudaMemsetAsync(out, 0, sizeof(float), stream);"));
    assert_non_null(strstr(v1, "atomicAdd(out, x[j]);"));
    /* now the unrolled float4 loop, its remainder and the tail go to one element each */
    site = present_site(v1, "grid-stride", NULL);
    assert_non_null(site);
    char *v2 = remove_at(v1, "grid-stride", site);
    free(site);
    assert_null(strstr(v2, "i += UNROLL * stride"));
    assert_non_null(strstr(v2, "if (i < n4) {"));
    assert_non_null(strstr(v2, "if (j < (size_t)n) atomicAdd(out, x[j]);"));
    assert_non_null(strstr(v2, "<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>"));
    golden_batch_text(&compiles, "reduce_sum-v1", v1);
    golden_batch_text(&compiles, "reduce_sum-v2", v2);
    free(v1);
    free(v2);
    free(text);
}

static void histogram_expert(void **state)
{
    (void)state;
    char *text = read_task("histogram", "expert.cu");
    char *site = present_site(text, "grid-stride", NULL);
    assert_non_null(site);
    char *v1 = remove_at(text, "grid-stride", site);
    free(site);
    assert_null(strstr(v1, "UNROLL * stride"));
    assert_null(strstr(v1, "const size_t stride"));
    assert_non_null(strstr(v1, "if (i < n16) {"));
    assert_non_null(strstr(v1, "size_t j = n16 * VEC + gtid;"));
    assert_non_null(strstr(v1, "histogram_kernel<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>"));
    /* the privatized table still merges per block: nothing there depends on the grid */
    assert_non_null(strstr(v1, "atomicAdd(&bins[b], count)"));
    golden_batch_text(&compiles, "histogram-v1", v1);
    free(v1);
    free(text);
}

/* ---- a guarded body with statements after it (a privatized table merged at the end) ---------------- */

#define PRIV_HEAD                                                                                                  \
    "#define BLOCK 256\n"                                                                                          \
    "__global__ void h(const unsigned char *x, int *bins, int n) {\n"                                              \
    "  __shared__ int priv[256];\n"                                                                                \
    "  for (int b = threadIdx.x; b < 256; b += blockDim.x) priv[b] = 0;\n"                                         \
    "  __syncthreads();\n"                                                                                         \
    "  int i = blockIdx.x * BLOCK + threadIdx.x;\n"
#define PRIV_TAIL                                                                                                  \
    "  __syncthreads();\n"                                                                                         \
    "  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], priv[b]);\n"                        \
    "}\n"                                                                                                          \
    "extern \"C\" void launch(const unsigned char *x, int *bins, int n, cudaStream_t s) {\n"                      \
    "  h<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(x, bins, n);\n"                                                 \
    "}\n"

static void grid_stride_after_the_guard(void **state)
{
    (void)state;
    /* atomics into the block's table: many elements per thread give the same table */
    char *out = rewrite_at(PRIV_HEAD "  if (i < n) atomicAdd(&priv[x[i]], 1);\n" PRIV_TAIL, "grid-stride", "h:6", false);
    assert_non_null(strstr(out, "for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK * gridDim.x) atomicAdd(&priv[x[i]], 1);"));
    /* the merge after it is untouched, the grid capped */
    assert_non_null(strstr(out, "  __syncthreads();\n  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], priv[b]);"));
    assert_non_null(strstr(out, "kl_sms * 8"));
    golden_batch_text(&compiles, "privatized-grid-stride", out);
    free(out);
    /* a store every element of a thread shares, read after the guard: the last element would win */
    expect_not_applicable(PRIV_HEAD "  if (i < n) priv[threadIdx.x] = x[i];\n" PRIV_TAIL, "grid-stride", "h:6", false,
                          "stores to priv[threadIdx.x] (line 7), not at an index of i");
    /* the same as an accumulation is one */
    free(rewrite_at(PRIV_HEAD "  if (i < n) priv[threadIdx.x] += x[i];\n" PRIV_TAIL, "grid-stride", "h:6", false));
    /* the index read after the guard */
    expect_not_applicable(PRIV_HEAD "  if (i < n) atomicAdd(&priv[x[i]], 1);\n  if (i == 0) bins[0] += 0;\n" PRIV_TAIL,
                          "grid-stride", "h:6", false, "i is also used after the guarded body (line 8)");
    /* a call into the file: what it writes is not seen */
    const char *call = "__device__ void put(int *p, int v) { p[threadIdx.x] = v; }\n" PRIV_HEAD
                       "  if (i < n) put(priv, x[i]);\n" PRIV_TAIL;
    expect_not_applicable(call, "grid-stride", "h:7", false, "calls put() (line 8), defined in this file");
}

/* nvcc -arch=sm_90 -c on all of it, two at a time (a note without nvcc). */
static void compile_all(void **state)
{
    (void)state;
    golden_batch_compile(&compiles);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_stride_group_refuses),
        cmocka_unit_test(grid_stride_while_refuses),
        cmocka_unit_test(grid_stride_partial_sums),
        cmocka_unit_test(two_pass_refuses),
        cmocka_unit_test(two_pass_accumulators),
        cmocka_unit_test(block_reduce_refuses),
        cmocka_unit_test(sumsq_expert_while),
        cmocka_unit_test(reduce_sum_expert),
        cmocka_unit_test(histogram_expert),
        cmocka_unit_test(grid_stride_after_the_guard),
        cmocka_unit_test(compile_all),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
