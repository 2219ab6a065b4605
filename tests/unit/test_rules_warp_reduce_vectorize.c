/* warp-reduce and vectorize (src/rewrite/rules/warp_reduce.c, vectorize.c): the built-in experts'
 * sites removed (the results compiled), and the reasons given where the transforms do not apply.
 * Their golden cases run in test_rules_golden.c. */
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

/* ---- golden files -------------------------------------------------------------------------------- */

/* ---- warp-reduce ------------------------------------------------------------------------------------- */

/* softmax, layernorm and reduce_sum reduce with shuffles in a __device__ helper: each site is
 * found, removable, and the result compiles. */
static void warp_reduce_removes_from_experts(void **state)
{
    (void)state;
    static const char *const tasks[] = {"softmax", "layernorm", "reduce_sum"};
    static const char *const ops[] = {"merge", "+", "+"};
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-d-wr", &dir, &err), KL_OK);
    char *paths[3];
    for (int t = 0; t < 3; t++) {
        char *text = read_task_file(tasks[t], "expert.cu");
        json_t *sites = sites_of(text, "warp-reduce");
        const char *id = site_where(sites, "present", true);
        if (!id) fail_msg("%s/expert.cu: no removable warp-reduce site", tasks[t]);
        size_t i;
        json_t *s;
        json_array_foreach(sites, i, s) if (!strcmp(json_string_value(json_object_get(s, "site")), id))
            assert_string_equal(json_string_value(json_object_get(json_object_get(s, "features"), "op")), ops[t]);
        op o = {.remove = true};
        kl_snprintf(o.name, sizeof o.name, "warp-reduce");
        kl_snprintf(o.site, sizeof o.site, "%s", id);
        char *got = rewrite_op("expert.cu", text, &o, &err);
        if (!got) fail_msg("%s: %s", tasks[t], err.message);
        assert_null(strstr(got, "__shfl_xor_sync"));
        assert_non_null(strstr(got, "for (int s = blockDim.x / 2; s > 0; s >>= 1)"));
        /* removed, the tree is a site to apply the shuffles again */
        json_t *back = sites_of(got, "warp-reduce");
        assert_non_null(site_where(back, "applicable", true));
        json_decref(back);
        char name[64];
        kl_snprintf(name, sizeof name, "%s.cu", tasks[t]);
        paths[t] = write_temp(dir, name, got);
        free(got);
        json_decref(sites);
        free(text);
    }
    golden_nvcc_compile_all(paths, 3);
    for (int t = 0; t < 3; t++) free(paths[t]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

static const char *warp_per_row =
    "__global__ void row_sum(const float* x, float* y, int cols) {\n"
    "    const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "    float v = 0.0f;\n"
    "    for (int c = lane; c < cols; c += 32) v += x[(size_t)row * cols + c];\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);\n"
    "    if (lane == 0) y[row] = v;\n"
    "}\n"
    "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s) {\n"
    "    row_sum<<<rows / 4, 128, 0, s>>>(x, y, cols);\n"
    "}\n";

/* A tree whose block size is only known at run time, or is not a power of two. */
#define TREE_FMT \
    "__global__ void block_sum(const float* x, float* y) {\n" \
    "    __shared__ float sh[1024];\n" \
    "    sh[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];\n" \
    "    __syncthreads();\n" \
    "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n" \
    "        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];\n" \
    "        __syncthreads();\n" \
    "    }\n" \
    "    if (threadIdx.x == 0) y[blockIdx.x] = sh[0];\n" \
    "}\n" \
    "extern \"C\" void launch(const float* x, float* y, int n, int threads, cudaStream_t s) {\n" \
    "    block_sum<<<n / %s, %s, 0, s>>>(x, y);\n" \
    "}\n"

/* warp-reduce then block-size: the hand-off written from the tree's start (BLOCK / 2) follows the
 * new thread count; when it was written for the 256 threads seen (`kl_warp[8]`, `< 8`), a block of
 * 512 reduced only the first 8 warps' partials (corpus/sumsq's skills run, 2026-12-04). */
static const char *macro_tree =
    "#define BLOCK 256\n"
    "__global__ void block_max(const float* x, float* y) {\n"
    "    __shared__ float sh[BLOCK];\n"
    "    sh[threadIdx.x] = x[blockIdx.x * BLOCK + threadIdx.x];\n"
    "    __syncthreads();\n"
    "    for (int s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (threadIdx.x == 0) y[blockIdx.x] = sh[0];\n"
    "}\n"
    "extern \"C\" void launch(const float* x, float* y, int n, cudaStream_t s) {\n"
    "    block_max<<<n / BLOCK, BLOCK, 0, s>>>(x, y);\n"
    "}\n";

static void warp_reduce_then_block_size(void **state)
{
    (void)state;
    json_t *s = sites_of(macro_tree, "warp-reduce");
    const char *id = site_where(s, "applicable", true);
    assert_non_null(id);
    op o = {.remove = false};
    kl_snprintf(o.name, sizeof o.name, "warp-reduce");
    kl_snprintf(o.site, sizeof o.site, "%s", id);
    kl_snprintf(o.params, sizeof o.params, "{}");
    kl_error err = {0};
    char *shuffled = rewrite_op("t.cu", macro_tree, &o, &err);
    if (!shuffled) fail_msg("%s", err.message);
    json_decref(s);
    assert_non_null(strstr(shuffled, "kl_v = kl_warp[threadIdx.x < BLOCK / 32 ? threadIdx.x : 0];"));
    assert_non_null(strstr(shuffled, "for (int o = BLOCK / 64; o > 0; o >>= 1)"));
    /* block-size still applies, and nothing in the hand-off is left at 256 threads' numbers */
    s = sites_of(shuffled, "block-size");
    id = site_where(s, "applicable", true);
    assert_non_null(id);
    kl_snprintf(o.name, sizeof o.name, "block-size");
    kl_snprintf(o.site, sizeof o.site, "%s", id);
    kl_snprintf(o.params, sizeof o.params, "{\"threads\":\"512\"}");
    char *bigger = rewrite_op("t.cu", shuffled, &o, &err);
    if (!bigger) fail_msg("%s", err.message);
    assert_non_null(strstr(bigger, "#define BLOCK 512"));
    assert_non_null(strstr(bigger, "BLOCK / 32 ? threadIdx.x : 0"));
    assert_null(strstr(bigger, "< 8"));
    json_decref(s);
    free(shuffled);
    free(bigger);
}

static void warp_reduce_says_why_not(void **state)
{
    (void)state;
    /* a warp per row: the shuffles reduce within a warp, there is no block reduction to undo */
    json_t *s = sites_of(warp_per_row, "warp-reduce");
    const char *id = site_where(s, "present", false);
    assert_non_null(id);
    expect_not_applicable(warp_per_row, "warp-reduce", id, true, "warp-level reduction");
    json_decref(s);

    char text[2048];
    /* the block size is a run-time value */
    kl_snprintf(text, sizeof text, TREE_FMT, "threads", "threads");
    s = sites_of(text, "warp-reduce");
    id = site_where(s, "applicable", false);
    assert_non_null(id);
    expect_not_applicable(text, "warp-reduce", id, false, "not a 1-D compile-time constant");
    json_decref(s);
    /* a 2-D block: the lanes of threadIdx.x are not the block's threads */
    kl_snprintf(text, sizeof text, TREE_FMT, "256", "dim3(32, 8)");
    s = sites_of(text, "warp-reduce");
    id = site_where(s, "applicable", false);
    assert_non_null(id);
    expect_not_applicable(text, "warp-reduce", id, false, "not a 1-D compile-time constant");
    json_decref(s);
    /* 96 threads: the tree would need a power of two */
    kl_snprintf(text, sizeof text, TREE_FMT, "96", "96");
    s = sites_of(text, "warp-reduce");
    id = site_where(s, "applicable", false);
    assert_non_null(id);
    expect_not_applicable(text, "warp-reduce", id, false, "not a power of two");
    json_decref(s);
    /* 256 threads: applicable, and the shuffles come out with the shared stage of 8 partials */
    kl_snprintf(text, sizeof text, TREE_FMT, "256", "256");
    s = sites_of(text, "warp-reduce");
    id = site_where(s, "applicable", true);
    assert_non_null(id);
    op o = {.remove = false};
    kl_snprintf(o.name, sizeof o.name, "warp-reduce");
    kl_snprintf(o.site, sizeof o.site, "%s", id);
    kl_snprintf(o.params, sizeof o.params, "{\"shuffle\":\"down\"}");
    kl_error err = {0};
    char *got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_non_null(strstr(got, "__shfl_down_sync(0xffffffff, kl_v, o)"));
    /* the hand-off is sized for any block and counts the warps from the tree's own start
     * (blockDim.x / 2), not from the 256 threads of this launch: a later block size keeps it right */
    assert_non_null(strstr(got, "__shared__ float kl_warp[32];"));
    assert_non_null(strstr(got, "kl_v = kl_warp[threadIdx.x < blockDim.x / 32 ? threadIdx.x : 0];"));
    assert_non_null(strstr(got, "for (int o = blockDim.x / 64; o > 0; o >>= 1)"));
    assert_null(strstr(got, "8"));
    assert_non_null(strstr(got, "if (threadIdx.x == 0) sh[0] = kl_v;"));
    free(got);
    /* an unknown shuffle kind is refused before anything runs */
    kl_snprintf(o.params, sizeof o.params, "{\"shuffle\":\"up\"}");
    char *out = NULL, *note = NULL;
    assert_int_equal(kl_rules_rewrite("t.cu", text, strlen(text), NULL, "warp-reduce", id, false, o.params, &out, &note, &err),
                     KL_ERR_INVALID);
    json_decref(s);
}

/* Helpers called as members: `S::f(v)` and `obj.f(v)` reach the one __device__ function of that
 * name; with two of one name the call is not followed (no site). A loop over the partials that
 * starts from a value other than the operation's identity keeps it: `r = 1.0f + v`. %s: the warp
 * step's call, %s: the start of the loop over the partials. */
#define MEMBER_FMT                                                                                              \
    "struct WarpOps {\n"                                                                                    \
    "    static __device__ float Reduce(float v)\n"                                                         \
    "    {\n"                                                                                               \
    "        for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);\n" \
    "        return v;\n"                                                                                   \
    "    }\n"                                                                                               \
    "};\n"                                                                                                  \
    "struct Scale {\n"                                                                                      \
    "    __device__ float %s(float v) { return 2.0f * v; }\n"                                               \
    "};\n"                                                                                                  \
    "__global__ void k(const float* x, float* y)\n"                                                         \
    "{\n"                                                                                                   \
    "    __shared__ float part[8];\n"                                                                       \
    "    float v = x[blockIdx.x * 256 + threadIdx.x];\n"                                                    \
    "    v = %s(v);\n"                                                                                      \
    "    if (threadIdx.x %% 32 == 0) part[threadIdx.x / 32] = v;\n"                                         \
    "    __syncthreads();\n"                                                                                \
    "    float r = %s;\n"                                                                                   \
    "    for (int w = 0; w < 8; w++) r += part[w];\n"                                                       \
    "    if (threadIdx.x == 0) y[blockIdx.x] = r;\n"                                                        \
    "}\n"                                                                                                   \
    "extern \"C\" void launch(const float* x, float* y, int blocks, cudaStream_t s)\n"                     \
    "{\n"                                                                                                   \
    "    k<<<blocks, 256, 0, s>>>(x, y);\n"                                                                 \
    "}\n"

static void warp_reduce_member_helpers(void **state)
{
    (void)state;
    char text[4096];
    kl_error err = {0};
    /* two functions named Reduce: which one `Scale().Reduce(v)` reaches is not followed */
    kl_snprintf(text, sizeof text, MEMBER_FMT, "Reduce", "Scale().Reduce", "0.0f");
    json_t *s = sites_of(text, "warp-reduce");
    size_t i;
    json_t *site;
    json_array_foreach(s, i, site) {
        const char *id = json_string_value(json_object_get(site, "site"));
        if (!strncmp(id, "k:", 2)) fail_msg("a site in k through a call of an ambiguous name: %s", id);
    }
    json_decref(s);
    /* the static member through its qualified name, the loop from 1.0f: present, and the start kept */
    kl_snprintf(text, sizeof text, MEMBER_FMT, "Twice", "WarpOps::Reduce", "1.0f");
    s = sites_of(text, "warp-reduce");
    const char *id = site_where(s, "present", true);
    assert_non_null(id);
    assert_string_equal(id, "k:15");
    op o = {.remove = true};
    kl_snprintf(o.name, sizeof o.name, "warp-reduce");
    kl_snprintf(o.site, sizeof o.site, "%s", id);
    char *got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_non_null(strstr(got, "    float r = 1.0f + v;\n"));
    assert_null(strstr(got, "part["));
    free(got);
    json_decref(s);
    /* from 0.0f, the identity: the block's sum alone */
    kl_snprintf(text, sizeof text, MEMBER_FMT, "Twice", "WarpOps::Reduce", "0.0f");
    s = sites_of(text, "warp-reduce");
    kl_snprintf(o.site, sizeof o.site, "%s", site_where(s, "present", true));
    got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_non_null(strstr(got, "    float r = v;\n"));
    free(got);
    json_decref(s);
}

/* ---- vectorize ------------------------------------------------------------------------------------------ */

/* Every float4 site of the f32 experts is removable, and the naive row loops of softmax,
 * layernorm and sgemm are sites to apply; the first result of each file is compiled. */
static void vectorize_experts_and_naives(void **state)
{
    (void)state;
    static const char *const experts[] = {"softmax", "layernorm", "reduce_sum", "sgemm"};
    static const char *const naives[] = {"softmax", "layernorm", "sgemm"};
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-d-vec", &dir, &err), KL_OK);
    char *paths[32];
    unsigned np = 0;
    for (int pass = 0; pass < 2; pass++) {
        unsigned nt = pass == 0 ? 4 : 3;
        for (unsigned t = 0; t < nt; t++) {
            const char *task = pass == 0 ? experts[t] : naives[t];
            char *text = read_task_file(task, pass == 0 ? "expert.cu" : "naive.cu");
            json_t *sites = sites_of(text, "vectorize");
            size_t i;
            json_t *s;
            unsigned found = 0;
            json_array_foreach(sites, i, s) {
                const char *dir_s = json_string_value(json_object_get(s, "direction"));
                if (strcmp(dir_s, pass == 0 ? "present" : "applicable")) continue;
                if (json_object_get(json_object_get(s, "features"), "why_not")) continue;
                op o = {.remove = pass == 0};
                kl_snprintf(o.name, sizeof o.name, "vectorize");
                kl_snprintf(o.site, sizeof o.site, "%s", json_string_value(json_object_get(s, "site")));
                kl_snprintf(o.params, sizeof o.params, "{}");
                char *got = rewrite_op(task, text, &o, &err);
                if (!got) fail_msg("%s %s: %s", task, o.site, err.message);
                if (pass == 1) assert_non_null(strstr(got, "reinterpret_cast<const float4*>"));
                char name[128];
                kl_snprintf(name, sizeof name, "%s_%s_%u.cu", pass == 0 ? "expert" : "naive", task, found);
                /* every site is rewritten; the first of each file is compiled (the test's time) */
                if (found == 0 && np < 32) paths[np++] = write_temp(dir, name, got);
                free(got);
                found++;
            }
            if (!found) fail_msg("%s/%s: no %s vectorize site", task, pass == 0 ? "expert.cu" : "naive.cu",
                                 pass == 0 ? "removable" : "applicable");
            json_decref(sites);
            free(text);
        }
    }
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

static const char *vec_reasons =
    "template <typename T>\n"
    "__global__ void scale(const T* x, T* y, int n) {\n"
    "    for (int i = 0; i < n; i++) y[i] = x[i] * (T)2;\n"
    "}\n"
    "__global__ void shifted(const float* x, float* y, int n) {\n"
    "    for (int i = 0; i < n - 1; i++) y[i] = x[i + 1] - x[i];\n"
    "}\n"
    "__global__ void early(const float* __restrict__ x, float* __restrict__ y, int n) {\n"
    "    for (int i = 0; i < n; i++) { if (x[i] < 0.0f) break; y[i] = x[i]; }\n"
    "}\n"
    "__global__ void alias(const float* x, float* y, int n) {\n"
    "    for (int i = 0; i < n; i++) y[i] = x[i] + 1.0f;\n"
    "}\n"
    "__global__ void masked(const float* __restrict__ x, float* __restrict__ y, const int* m, int n) {\n"
    "    float s = 0.0f;\n"
    "    for (int i = 0; i < n; i++) if (m[i]) s += x[i];\n"
    "    y[0] = s;\n"
    "}\n"
    "__global__ void gs_write(const float* x, float* y, int n) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i];\n"
    "}\n"
    "__global__ void gs_next(const float* x, float* y, int n) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n - 1; i += blockDim.x * gridDim.x) atomicAdd(y, x[i + 1]);\n"
    "}\n"
    "__global__ void gs_bound(const float* x, float* y, int n) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { atomicAdd(y, x[i]); n--; }\n"
    "}\n"
    "__global__ void gs_half(const double* x, double* y, int n) {\n"
    "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) atomicAdd(y, x[i]);\n"
    "}\n";

/* The cast form: a `const float4 *v` parameter cast at the launch from another argument. %s: the
 * kernel's vector parameter, %s: a statement of the kernel, %s: the launch's argument for v. */
#define CAST_FMT                                                                                   \
    "__global__ void k(const float* x, %s, int off, int n4, float* out)\n"                         \
    "{\n"                                                                                          \
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                                   \
    "    %s\n"                                                                                     \
    "    if (i < n4) { const float4 q = v[i]; out[i] = q.x + q.y + q.z + q.w; }\n"                \
    "}\n"                                                                                          \
    "extern \"C\" void launch(const float* x, float* out, int n, cudaStream_t s)\n"              \
    "{\n"                                                                                          \
    "    const int off = 1, n4 = (n - 1) / 4;\n"                                                   \
    "    k<<<(n4 + 127) / 128, 128, 0, s>>>(x, %s, off, n4, out);\n"                               \
    "}\n"

static void vectorize_cast_says_why_not(void **state)
{
    (void)state;
    char text[2048];
    /* the standard shape: v[i] becomes x[off + 4 * i] … */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "", "reinterpret_cast<const float4*>(x + off)");
    json_t *s = sites_of(text, "vectorize");
    assert_string_equal(site_where(s, "present", true), "k:1:v");
    op o = {.remove = true};
    kl_snprintf(o.name, sizeof o.name, "vectorize");
    kl_snprintf(o.site, sizeof o.site, "k:1:v");
    kl_error err = {0};
    char *got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_non_null(strstr(got, "const float4 q = make_float4(x[off + 4 * i], x[off + 4 * i + 1], x[off + 4 * i + 2], "
                                "x[off + 4 * i + 3]);"));
    /* removed, nothing is read through v any more: no site */
    json_t *back = sites_of(got, "vectorize");
    assert_null(site_where(back, "present", true));
    assert_null(site_where(back, "present", false));
    json_decref(back);
    free(got);
    json_decref(s);
    /* the kernel changes the offset: the vectors no longer sit where the cast put them */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "off = 0;", "reinterpret_cast<const float4*>(x + off)");
    expect_not_applicable(text, "vectorize", "k:1:v", true, "line 4 changes off");
    /* it bumps the base: read on the canonical form (the bump folded into x's subscripts), and the
     * result is that form, not edits naming x after the bump in the text as written (canon.c) */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "x += 1; out[0] = x[0];",
                "reinterpret_cast<const float4*>(x + off)");
    got = rewrite_op("t.cu", text, &o, &err);
    if (!got) fail_msg("%s", err.message);
    assert_null(strstr(got, "x += 1"));
    assert_non_null(strstr(got, "make_float4(x[off + 4 * i]"));
    free(got);
    /* a pointer to non-const: writes through it are not followed */
    kl_snprintf(text, sizeof text, CAST_FMT, "float4* v", "", "reinterpret_cast<float4*>(out)");
    expect_not_applicable(text, "vectorize", "k:1:v", true, "not a pointer to const");
    /* an offset the launch does not pass */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "", "reinterpret_cast<const float4*>(x + n)");
    expect_not_applicable(text, "vectorize", "k:1:v", true, "does not pass as an argument of its own");
    /* v used otherwise than read as v[e] */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "const float4* w = v + 1; (void)w;",
                "reinterpret_cast<const float4*>(x + off)");
    expect_not_applicable(text, "vectorize", "k:1:v", true, "line 4 uses v otherwise than reading v[e]");
    /* a float4 buffer of its own (no cast at the launch): not this form, no site */
    kl_snprintf(text, sizeof text, CAST_FMT, "const float4* v", "", "(const float4*)0 + 0");
    s = sites_of(text, "vectorize");
    assert_null(site_where(s, "present", true));
    assert_null(site_where(s, "present", false));
    json_decref(s);
}

static void vectorize_says_why_not(void **state)
{
    (void)state;
    static const struct {
        const char *site, *why;
    } cases[] = {
        {"scale:3", "not f32"},
        {"shifted:6", "more than one index"},
        {"early:9", "break"},
        {"alias:12", "may alias"},
        {"masked:16", "conditional"},
        /* grid-stride loops: only reads of const arrays at i, an invariant bound */
        {"gs_write:20", "'y' is not a const pointer parameter"},
        {"gs_next:23", "other than as the index"},
        {"gs_bound:26", "assigns 'n'"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_not_applicable(vec_reasons, "vectorize", cases[i].site, false, cases[i].why);
    /* width 8 is for bytes in grid-stride loops: a unit-stride f32 loop refuses it */
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    const char *ok = "__global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {\n"
                     "    for (int i = 0; i < n; i++) y[i] = x[i];\n}\n";
    assert_int_equal(kl_rules_rewrite("t.cu", ok, strlen(ok), NULL, "vectorize", "k:2", false, "{\"width\":\"8\"}", &out,
                                      &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_int_equal(kl_rules_rewrite("t.cu", ok, strlen(ok), NULL, "vectorize", "k:2", false, "{\"width\":\"3\"}", &out,
                                      &note, &err),
                     KL_ERR_INVALID);
    assert_int_equal(kl_rules_rewrite("t.cu", ok, strlen(ok), NULL, "vectorize", "k:2", false, "{\"width\":\"2\"}", &out,
                                      &note, &err),
                     KL_OK);
    assert_non_null(strstr(out, "for (; i + 1 < n; i += 2)"));
    assert_non_null(strstr(out, "((uintptr_t)&x[i] & 7) == 0"));
    assert_non_null(strstr(out, "for (; i < n; i++) y[i] = x[i];"));
    free(out);
    free(note);
    /* doubles come two to a vector */
    assert_int_equal(kl_rules_rewrite("t.cu", vec_reasons, strlen(vec_reasons), NULL, "vectorize", "gs_half:29", false,
                                      "{\"width\":\"4\"}", &out, &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_non_null(strstr(err.message, "no 4-element vector of 'double'"));
    assert_int_equal(kl_rules_rewrite("t.cu", vec_reasons, strlen(vec_reasons), NULL, "vectorize", "gs_half:29", false,
                                      "{\"width\":\"2\"}", &out, &note, &err),
                     KL_OK);
    assert_non_null(strstr(out, "const double2 x_v = reinterpret_cast<const double2*>(x)[v];"));
    free(out);
    free(note);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warp_reduce_says_why_not),
        cmocka_unit_test(warp_reduce_then_block_size),
        cmocka_unit_test(warp_reduce_removes_from_experts),
        cmocka_unit_test(warp_reduce_member_helpers),
        cmocka_unit_test(vectorize_says_why_not),
        cmocka_unit_test(vectorize_cast_says_why_not),
        cmocka_unit_test(vectorize_experts_and_naives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
