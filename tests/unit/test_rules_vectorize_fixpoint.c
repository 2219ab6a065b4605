/* vectorize on its own output (src/rewrite/rules/vectorize.c): a loop that is the scalar fallback
 * of a vector path (the remainder loop after a float4 loop, the else branch of an alignment
 * guard: what vectorize writes, and the same idiom written by hand) is no site. Listed refused, with
 * the vector path's line in the reason. The property: applying vectorize again and again, always at
 * the first applicable site, stops within as many applications as the original has loops, on
 * kernels in several styles (pointer locals, macros, templates, 2-D indexing, grid-, block- and
 * lane-strided loops, hand-written guards and tails), the built-in tasks' kernels and the style
 * corpus. Every fixpoint of the kernels written here compiles (nvcc -cubin, batched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/task.h"
#include "rules_golden.h"

static golden_batch compiles;

/* ---- kernels of this test, in styles unlike the suite's ------------------------------------------ */

typedef struct kernel {
    const char *name, *text;
    unsigned min_applied; /* at least this many applications (the loops vectorize must take) */
} kernel;

static const kernel kernels[] = {
    {"pointer_locals",
     "#include <cuda_runtime.h>\n"
     "// one thread per row, three passes, pointer locals, size_t offsets\n"
     "__global__ void rows3(const float* __restrict__ in, float* __restrict__ out, int nrows, int ncols)\n"
     "{\n"
     "    const int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (r >= nrows) return;\n"
     "    const float* src = in + (size_t)r * ncols;\n"
     "    float* dst = out + (size_t)r * ncols;\n"
     "    float lo = 3.0e38f;\n"
     "    for (int j = 0; j < ncols; ++j) {\n"
     "        lo = fminf(lo, src[j]);\n"
     "    }\n"
     "    float acc = 0.f;\n"
     "    for (int j = 0; j < ncols; ++j)\n"
     "        acc += src[j] - lo;\n"
     "    for (int j = 0; j < ncols; ++j) {\n"
     "        dst[j] = (src[j] - lo) / (acc + 1.0f);\n"
     "    }\n"
     "}\n"
     "extern \"C\" void launch(const float* in, float* out, int nrows, int ncols, cudaStream_t s)\n"
     "{\n"
     "    rows3<<<(nrows + 127) / 128, 128, 0, s>>>(in, out, nrows, ncols);\n"
     "}\n",
     3},
    {"macro_2d",
     "#include <cuda_runtime.h>\n"
     "#define AT(m, i, j) m[(i) * ld + (j)]\n"
     "__global__ void scale_shift(const float* __restrict__ a, float* __restrict__ b, int m, int n, int ld,\n"
     "                            float alpha, float beta)\n"
     "{\n"
     "    int i = blockIdx.x;\n"
     "    if (i >= m) return;\n"
     "    for (int j = 0; j < n; j++) {\n"
     "        AT(b, i, j) = alpha * AT(a, i, j) + beta;\n"
     "    }\n"
     "}\n"
     "extern \"C\" void launch(const float* a, float* b, int m, int n, cudaStream_t s)\n"
     "{\n"
     "    scale_shift<<<m, 1, 0, s>>>(a, b, m, n, n, 2.0f, 1.0f);\n"
     "}\n",
     1},
    {"template_nested",
     "#include <cuda_runtime.h>\n"
     "template <int ROWS_PER_THREAD>\n"
     "__global__ void colsum_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)\n"
     "{\n"
     "    int r0 = (blockIdx.x * blockDim.x + threadIdx.x) * ROWS_PER_THREAD;\n"
     "    for (int rr = 0; rr < ROWS_PER_THREAD; rr++) {\n"
     "        int r = r0 + rr;\n"
     "        if (r >= rows) break;\n"
     "        float s = 0.0f;\n"
     "        for (int c = 0; c < cols; c++) s += x[r * cols + c] * x[r * cols + c];\n"
     "        y[r] = s;\n"
     "    }\n"
     "}\n"
     "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s)\n"
     "{\n"
     "    colsum_rows<2><<<(rows + 255) / 256, 128, 0, s>>>(x, y, rows, cols);\n"
     "}\n",
     1},
    {"hand_guard_else",
     "#include <cuda_runtime.h>\n"
     "#include <stdint.h>\n"
     "// written by hand: a float4 path when the rows are aligned, else the scalar loop\n"
     "__global__ void relu_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)\n"
     "{\n"
     "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (r >= rows) return;\n"
     "    const float* xr = x + (size_t)r * cols;\n"
     "    float* yr = y + (size_t)r * cols;\n"
     "    if ((((uintptr_t)xr | (uintptr_t)yr) & 15) == 0 && cols % 4 == 0) {\n"
     "        for (int c = 0; c < cols / 4; c++) {\n"
     "            float4 v = reinterpret_cast<const float4*>(xr)[c];\n"
     "            v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);\n"
     "            reinterpret_cast<float4*>(yr)[c] = v;\n"
     "        }\n"
     "    } else {\n"
     "        for (int c = 0; c < cols; c++) yr[c] = fmaxf(xr[c], 0.f);\n"
     "    }\n"
     "}\n"
     "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s)\n"
     "{\n"
     "    relu_rows<<<(rows + 127) / 128, 128, 0, s>>>(x, y, rows, cols);\n"
     "}\n",
     0},
    {"hand_tail",
     "#include <cuda_runtime.h>\n"
     "// written by hand: float4 over the first n4 * 4 elements, a scalar grid-stride remainder\n"
     "__global__ void axpy4(const float* __restrict__ x, float* __restrict__ y, float a, int n)\n"
     "{\n"
     "    const int t = blockIdx.x * blockDim.x + threadIdx.x, stride = blockDim.x * gridDim.x;\n"
     "    const int n4 = n / 4;\n"
     "    for (int i = t; i < n4; i += stride) {\n"
     "        float4 xv = reinterpret_cast<const float4*>(x)[i];\n"
     "        float4 yv = reinterpret_cast<float4*>(y)[i];\n"
     "        yv.x += a * xv.x; yv.y += a * xv.y; yv.z += a * xv.z; yv.w += a * xv.w;\n"
     "        reinterpret_cast<float4*>(y)[i] = yv;\n"
     "    }\n"
     "    for (int i = n4 * 4 + t; i < n; i += stride) y[i] += a * x[i];\n"
     "}\n"
     "extern \"C\" void launch(const float* x, float* y, int n, cudaStream_t s)\n"
     "{\n"
     "    axpy4<<<256, 256, 0, s>>>(x, y, 2.0f, n);\n"
     "}\n",
     0},
    {"grid_stride_sum",
     "#include <cuda_runtime.h>\n"
     "__global__ void sumsq(const float* __restrict__ v, float* out, long n)\n"
     "{\n"
     "    float acc = 0.0f;\n"
     "    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)blockDim.x * gridDim.x)\n"
     "        acc += v[i] * v[i];\n"
     "    atomicAdd(out, acc);\n"
     "}\n"
     "extern \"C\" void launch(const float* v, float* out, long n, cudaStream_t s)\n"
     "{\n"
     "    sumsq<<<264, 256, 0, s>>>(v, out, n);\n"
     "}\n",
     0},
    {"warp_per_row",
     "#include <cuda_runtime.h>\n"
     "// a warp per row: lane-strided loops, a max and a sum reduced with shuffles\n"
     "__global__ void softmax_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)\n"
     "{\n"
     "    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;\n"
     "    const int lane = threadIdx.x & 31;\n"
     "    if (warp >= rows) return;\n"
     "    const float* row = x + (size_t)warp * cols;\n"
     "    float* out = y + (size_t)warp * cols;\n"
     "    float m = -INFINITY;\n"
     "    for (int c = lane; c < cols; c += 32) m = fmaxf(m, row[c]);\n"
     "    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));\n"
     "    float s = 0.f;\n"
     "    for (int c = lane; c < cols; c += 32) s += __expf(row[c] - m);\n"
     "    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
     "    const float inv = 1.f / s;\n"
     "    for (int c = lane; c < cols; c += 32) out[c] = __expf(row[c] - m) * inv;\n"
     "}\n"
     "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t s)\n"
     "{\n"
     "    softmax_warp<<<(rows + 7) / 8, 256, 0, s>>>(x, y, rows, cols);\n"
     "}\n",
     3},
    {"block_per_row_index",
     "#include <cuda_runtime.h>\n"
     "#define THREADS 256\n"
     "// a block per row, index arithmetic (no pointer locals), a block-strided sum of squares\n"
     "__global__ void rmsnorm_block(const float* __restrict__ x, const float* __restrict__ w,\n"
     "                              float* __restrict__ y, int rows, int cols, float eps)\n"
     "{\n"
     "    __shared__ float part[THREADS];\n"
     "    const int r = blockIdx.x;\n"
     "    float ss = 0.f;\n"
     "    for (int c = threadIdx.x; c < cols; c += blockDim.x) {\n"
     "        const float v = x[r * cols + c];\n"
     "        ss += v * v;\n"
     "    }\n"
     "    part[threadIdx.x] = ss;\n"
     "    __syncthreads();\n"
     "    for (int k = THREADS / 2; k > 0; k >>= 1) {\n"
     "        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];\n"
     "        __syncthreads();\n"
     "    }\n"
     "    const float scale = rsqrtf(part[0] / cols + eps);\n"
     "    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = x[r * cols + c] * scale * w[c];\n"
     "}\n"
     "extern \"C\" void launch(const float* x, const float* w, float* y, int rows, int cols, cudaStream_t s)\n"
     "{\n"
     "    rmsnorm_block<<<rows, THREADS, 0, s>>>(x, w, y, rows, cols, 1e-6f);\n"
     "}\n",
     2},
};

/* ---- the walk to the fixpoint -------------------------------------------------------------------- */

/* Loops written in text (`for (`, `while (`, `do {`): an upper bound of the sites vectorize may take. */
static unsigned loops_in(const char *text)
{
    unsigned n = 0;
    const char *words[] = {"for (", "for(", "while (", "while(", NULL};
    for (unsigned w = 0; words[w]; w++)
        for (const char *p = strstr(text, words[w]); p; p = strstr(p + 1, words[w]))
            if (p == text || !((p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') || p[-1] == '_')) n++;
    return n;
}

/* The vectorize sites of text (owned JSON array). */
static json_t *list_sites(const char *name, const char *text, const kl_task *task)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list(name, text, strlen(text), task, "vectorize", &json, &err) != KL_OK)
        fail_msg("%s: listing the vectorize sites: %s", name, err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* Apply vectorize at the first applicable site until none is left; the number applied, the final
 * text in *final (new string). Fails when it takes more applications than the original has loops. */
static unsigned walk_to_fixpoint(const char *name, const char *text, const kl_task *task, char **final)
{
    unsigned limit = loops_in(text), applied = 0;
    char *cur = kl_strdup(text);
    for (;;) {
        json_t *sites = list_sites(name, cur, task);
        json_t *pick = NULL;
        size_t i;
        json_t *s;
        json_array_foreach(sites, i, s) {
            if (!strcmp(json_string_value(json_object_get(s, "direction")), "applicable")) {
                pick = s;
                break;
            }
        }
        if (!pick) {
            json_decref(sites);
            break;
        }
        if (applied == limit)
            fail_msg("%s: vectorize is still offered (%s) after %u applications, as many as the original has loops:\n%s",
                     name, json_string_value(json_object_get(pick, "site")), applied, cur);
        json_t *with = json_object_get(pick, "applies_with");
        char *params = with ? json_dumps(with, JSON_COMPACT) : NULL;
        char *out = NULL, *note = NULL;
        kl_error err = {0};
        if (kl_rules_rewrite(name, cur, strlen(cur), task, "vectorize", json_string_value(json_object_get(pick, "site")),
                             false, params, &out, &note, &err) != KL_OK)
            fail_msg("%s: vectorize@%s listed applicable, then refused: %s", name,
                     json_string_value(json_object_get(pick, "site")), err.message);
        if (!strcmp(out, cur)) fail_msg("%s: vectorize@%s changed nothing", name, json_string_value(json_object_get(pick, "site")));
        free(params);
        free(note);
        free(cur);
        cur = out;
        applied++;
        json_decref(sites);
    }
    *final = cur;
    return applied;
}

/* Every refused vectorize site of text whose reason names a scalar fallback: how many. */
static unsigned fallbacks_refused(const char *name, const char *text, const kl_task *task)
{
    json_t *sites = list_sites(name, text, task);
    unsigned n = 0;
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        const char *dir = json_string_value(json_object_get(s, "direction"));
        const char *why = json_string_value(json_object_get(s, "reason"));
        if (!strcmp(dir, "refused") && why && strstr(why, "the scalar fallback of the ") && strstr(why, " at line ")) n++;
    }
    json_decref(sites);
    return n;
}

static void own_kernels_reach_a_fixpoint(void **state)
{
    (void)state;
    for (unsigned k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        char *final = NULL, name[96];
        kl_snprintf(name, sizeof name, "%s.cu", kernels[k].name);
        unsigned n = walk_to_fixpoint(name, kernels[k].text, NULL, &final);
        if (n < kernels[k].min_applied)
            fail_msg("%s: %u applications, at least %u expected:\n%s", name, n, kernels[k].min_applied, final);
        /* what was vectorized left its scalar path, which is listed refused for that reason */
        if (n > 0 && fallbacks_refused(name, final, NULL) < n)
            fail_msg("%s: %u loops vectorized, fewer scalar fallbacks refused:\n%s", name, n, final);
        if (n > 0) golden_batch_text(&compiles, name, final);
        free(final);
    }
}

/* The hand-written idioms: the scalar loop beside the float4 path is refused, naming the path's line. */
static void hand_written_fallbacks_are_refused(void **state)
{
    (void)state;
    static const struct {
        unsigned k;
        const char *site, *line;
    } want[] = {{3, "relu_rows:17", "at line 10"}, {4, "axpy4:13", "at line 7"}};
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kernel *kn = &kernels[want[i].k];
        json_t *sites = list_sites(kn->name, kn->text, NULL);
        size_t j;
        json_t *s;
        bool found = false;
        json_array_foreach(sites, j, s) {
            if (strcmp(json_string_value(json_object_get(s, "site")), want[i].site)) continue;
            found = true;
            assert_string_equal(json_string_value(json_object_get(s, "direction")), "refused");
            const char *why = json_string_value(json_object_get(s, "reason"));
            if (!strstr(why, "the scalar fallback of the float4 path") || !strstr(why, want[i].line))
                fail_msg("%s: the reason '%s' does not name the float4 path %s", want[i].site, why, want[i].line);
        }
        if (!found) fail_msg("%s: the scalar loop %s is not listed", kn->name, want[i].site);
        json_decref(sites);
    }
}

/* ---- the built-in tasks and the style corpus ----------------------------------------------------- */

static void folder_kernels(const char *root, const char *rel, const char *file)
{
    char *dir = kl_path_join(root, rel);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    unsigned tried = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *td = kl_path_join(dir, e->d_name);
        char *path = kl_path_join(td, file);
        if (kl_file_exists(path)) {
            char *text = NULL;
            size_t len;
            kl_error err = {0};
            kl_task *task = NULL;
            if (kl_file_read(path, 0, &text, &len, &err) != KL_OK) fail_msg("%s: %s", path, err.message);
            if (kl_task_load(td, &task, &err) != KL_OK) task = NULL; /* without it: the aliasing refusals */
            char *final = NULL;
            walk_to_fixpoint(path, text, task, &final);
            free(final);
            kl_task_free(task);
            free(text);
            tried++;
        }
        free(path);
        free(td);
    }
    closedir(d);
    free(dir);
    assert_true(tried > 0);
}

static void tasks_and_corpus_reach_a_fixpoint(void **state)
{
    (void)state;
    const char *src = getenv("KL_SOURCE_DIR");
    assert_non_null(src);
    folder_kernels(src, "tasks", "naive.cu");
    folder_kernels(src, "tasks", "expert.cu");
    folder_kernels(src, "corpus", "naive.cu");
}

static void fixpoints_compile(void **state)
{
    (void)state;
    assert_true(compiles.n > 0);
    golden_batch_compile(&compiles);
}

static int teardown(void **state)
{
    (void)state;
    golden_batch_release(&compiles);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(own_kernels_reach_a_fixpoint),
        cmocka_unit_test(hand_written_fallbacks_are_refused),
        cmocka_unit_test(tasks_and_corpus_reach_a_fixpoint),
        cmocka_unit_test(fixpoints_compile),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
