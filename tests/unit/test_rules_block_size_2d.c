/* block-size on 2-D blocks (src/rewrite/rules/block_size.c): the golden cases are in
 * tests/data/rules/block-size/2d_*.before.cu (test_rules_golden.c). Here: the reasons given where a
 * 2-D block cannot move, the parameters, the built-in tasks (which 2-D sites each expert and naive
 * kernel has, and that removing them gives the 16x16 form, compiled with nvcc), and the backend
 * proposing the removal on the transpose expert. */
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

static kl_status rewrite_src(const char *text, const char *site, bool remove, const char *params, char **out,
                             kl_error *err)
{
    char *note = NULL;
    *out = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "block-size", site, remove, params, out, &note, err);
    free(note);
    return st;
}

static void expect_not_applicable(const char *text, const char *site, bool remove, const char *params,
                                  const char *reason)
{
    char *out = NULL;
    kl_error err = {0};
    kl_status st = rewrite_src(text, site, remove, params, &out, &err);
    if (st != KL_ERR_NOT_APPLICABLE)
        fail_msg("block-size@%s: expected not applicable (%s), got %d: %s\n%s", site, reason, (int)st, err.message,
                 out ? out : "");
    if (!strstr(err.message, reason)) fail_msg("block-size@%s: the reason '%s' lacks '%s'", site, err.message, reason);
    assert_null(out);
}

/* The block-size sites of a text, as a JSON array (json_decref). */
static json_t *sites_of(const char *name, const char *text)
{
    char *json = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_list(name, text, strlen(text), NULL, "block-size", &json, &err), KL_OK);
    json_t *arr = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(arr);
    return arr;
}

static const json_t *site_of(const json_t *arr, const char *id, const char *dir)
{
    size_t i;
    json_t *s;
    json_array_foreach((json_t *)arr, i, s) {
        if (!strcmp(json_string_value(json_object_get(s, "site")), id) &&
            !strcmp(json_string_value(json_object_get(s, "direction")), dir))
            return s;
    }
    return NULL;
}

/* ---- not applicable --------------------------------------------------------------------------------- */

static void refuses_2d(void **state)
{
    (void)state;
    /* warp-level code: its warps are rows only while blockDim.x is a multiple of 32 */
    const char *warp = "constexpr int BX = 32, BY = 8;\n"
                       "__global__ void rowsum(const float *x, float *y, int w) {\n"
                       "  float v = x[(blockIdx.y * BY + threadIdx.y) * w + blockIdx.x * BX + threadIdx.x];\n"
                       "  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);\n"
                       "  if (threadIdx.x == 0) y[blockIdx.y * BY + threadIdx.y] = v;\n}\n"
                       "extern \"C\" void launch(const float *x, float *y, int h, int w, cudaStream_t s) {\n"
                       "  rowsum<<<dim3(w / BX, h / BY), dim3(BX, BY), 0, s>>>(x, y, w);\n}\n";
    expect_not_applicable(warp, "rowsum:1:BXxBY", true, NULL, "warp-level code at line 4 (__shfl_down_sync)");
    /* … while 32 -> 64 keeps whole warps across: allowed */
    char *out = NULL;
    kl_error err = {0};
    assert_int_equal(rewrite_src(warp, "rowsum:1:BXxBY", false, "{\"bx\": \"64\", \"by\": \"8\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "constexpr int BX = 64, BY = 8;"));
    free(out);
    /* a loop starting at threadIdx.x that steps by the y extent */
    const char *cross = "constexpr int TILE = 32, ROWS = 8;\n"
                        "__global__ void k(const float *x, float *y, int n) {\n"
                        "  for (int r = threadIdx.x; r < TILE; r += ROWS) y[blockIdx.x * TILE + r] = x[r];\n}\n"
                        "extern \"C\" void launch(const float *x, float *y, int n, cudaStream_t s) {\n"
                        "  dim3 block(TILE, ROWS);\n  k<<<n / TILE, block, 0, s>>>(x, y, n);\n}\n";
    expect_not_applicable(cross, "k:1:TILExROWS", true, NULL,
                          "the loop at line 3 starts at threadIdx.x but steps by ROWS, the block's y extent");
    /* a loop whose constant bound is a multiple of its step, and would not be */
    const char *uneven = "constexpr int BX = 32, BY = 8, TILE_H = 40;\n"
                         "__global__ void k(const float *x, float *y, int w) {\n"
                         "  __shared__ float t[TILE_H][BX];\n"
                         "  for (int r = threadIdx.y; r < TILE_H; r += BY) t[r][threadIdx.x] = x[(blockIdx.y * TILE_H + r) * w + threadIdx.x];\n"
                         "  __syncthreads();\n"
                         "  for (int r = threadIdx.y; r < TILE_H; r += BY) y[(blockIdx.y * TILE_H + r) * w + threadIdx.x] = 2.f * t[r][threadIdx.x];\n}\n"
                         "extern \"C\" void launch(const float *x, float *y, int h, cudaStream_t s) {\n"
                         "  k<<<dim3(1, h / TILE_H), dim3(BX, BY), 0, s>>>(x, y, BX);\n}\n";
    expect_not_applicable(uneven, "k:1:BXxBY", true, NULL,
                          "the loop at line 4 runs TILE_H / BY times per thread (40 / 8); with a 16x16 block 40 is not a multiple of 16");
    /* … but 32x8 -> 64x8 keeps it even: allowed */
    assert_int_equal(rewrite_src(uneven, "k:1:BXxBY", false, "{\"bx\": \"64\", \"by\": \"8\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "constexpr int BX = 64, BY = 8, TILE_H = 40;"));
    free(out);
    /* __syncthreads() in a loop with a bound that is not a compile-time constant */
    const char *sync = "#define BX 16\n#define BY 16\n"
                       "__global__ void k(float *y, int n) {\n"
                       "  __shared__ float t[BY][BX];\n"
                       "  for (int r = threadIdx.y; r < n; r += BY) {\n"
                       "    t[threadIdx.y][threadIdx.x] = y[r * BX + threadIdx.x];\n    __syncthreads();\n"
                       "    y[r * BX + threadIdx.x] = t[BY - 1 - threadIdx.y][threadIdx.x];\n    __syncthreads();\n  }\n}\n"
                       "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<1, dim3(BX, BY), 0, s>>>(y, n);\n}\n";
    expect_not_applicable(sync, "k:1:BXxBY", false, "{\"bx\": \"32\", \"by\": \"8\"}",
                          "the loop at line 5 holds __syncthreads() and its bound (n) is not a compile-time constant");
    /* rows of a tile, `for (j = 0; j < TILE; j += ROWS)` over threadIdx.y + j: any ROWS dividing TILE */
    const char *rows = "#define TILE 32\n#define ROWS 8\n"
                       "__global__ void k(float *o, const float *in, int n) {\n"
                       "  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;\n"
                       "  for (int j = 0; j < TILE; j += ROWS) o[(y + j) * n + x] = 2.f * in[(y + j) * n + x];\n}\n"
                       "extern \"C\" void launch(const float *in, float *o, int n, cudaStream_t s) {\n"
                       "  k<<<dim3(n / TILE, n / TILE), dim3(TILE, ROWS), 0, s>>>(o, in, n);\n}\n";
    assert_int_equal(rewrite_src(rows, "k:1:TILExROWS", true, NULL, &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define TILE 16\n#define ROWS 16\n"));
    free(out);
    expect_not_applicable(rows, "k:1:TILExROWS", false, "{\"bx\": \"16\", \"by\": \"32\"}",
                          "with a 16x32 block 16 rows are not a multiple of 32");
    /* … but not when the body reads j, or the thread's row, on its own */
    const char *rows_j = "#define TILE 32\n#define ROWS 8\n"
                         "__global__ void k(float *o, const float *in, int n) {\n"
                         "  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;\n"
                         "  for (int j = 0; j < TILE; j += ROWS) o[(y + j) * n + x] = in[(y + j) * n + x] + j;\n}\n"
                         "extern \"C\" void launch(const float *in, float *o, int n, cudaStream_t s) {\n"
                         "  k<<<dim3(n / TILE, n / TILE), dim3(TILE, ROWS), 0, s>>>(o, in, n);\n}\n";
    expect_not_applicable(rows_j, "k:1:TILExROWS", true, NULL,
                          "line 5 uses the loop variable other than added to the thread's row (j)");
    const char *rows_y = "#define TILE 32\n#define ROWS 8\n"
                         "__global__ void k(float *o, const float *in, int n) {\n"
                         "  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;\n"
                         "  for (int j = 0; j < TILE; j += ROWS) o[(y + j) * n + x] = in[y * n + x + j];\n}\n"
                         "extern \"C\" void launch(const float *in, float *o, int n, cudaStream_t s) {\n"
                         "  k<<<dim3(n / TILE, n / TILE), dim3(TILE, ROWS), 0, s>>>(o, in, n);\n}\n";
    expect_not_applicable(rows_y, "k:1:TILExROWS", true, NULL,
                          "reads the thread index other than added to the loop variable (y)");
    /* a loop stepping by an extent from a start that is no thread index */
    const char *start = "constexpr int BX = 32, BY = 8;\n"
                        "__global__ void k(float *y, int n) {\n"
                        "  for (int r = 2 * threadIdx.y; r < n; r += BY) y[r * BX + threadIdx.x] = 0.f;\n}\n"
                        "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<1, dim3(BX, BY), 0, s>>>(y, n);\n}\n";
    expect_not_applicable(start, "k:1:BXxBY", true, NULL, "steps r by BY from 2 * threadIdx.y, not threadIdx.x or threadIdx.y");
    /* a register array sized by an extent */
    const char *regs = "constexpr int BX = 32, BY = 8;\n"
                       "__global__ void k(const float *x, float *y, int w) {\n"
                       "  float acc[BY];\n"
                       "  for (int i = 0; i < BY; i++) acc[i] = x[i * w + blockIdx.x * BX + threadIdx.x];\n"
                       "  float s = 0.f;\n  for (int i = 0; i < BY; i++) s += acc[i];\n"
                       "  y[blockIdx.x * BX + threadIdx.x] = s;\n}\n"
                       "extern \"C\" void launch(const float *x, float *y, int w, cudaStream_t s) {\n"
                       "  k<<<w / BX, dim3(BX, BY), 0, s>>>(x, y, w);\n}\n";
    expect_not_applicable(regs, "k:1:BXxBY", true, NULL, "BY sizes the register array at line 3 of k");
    /* a template argument derived from an extent */
    const char *tmpl = "constexpr int BX = 32, BY = 8;\nconstexpr int W4 = BX / 4;\n"
                       "template <int N> __device__ float first(const float *p) { return p[N - 1]; }\n"
                       "__global__ void k(const float *x, float *y) {\n"
                       "  y[threadIdx.y * BX + threadIdx.x] = first<W4>(x);\n}\n"
                       "extern \"C\" void launch(const float *x, float *y, cudaStream_t s) {\n  k<<<1, dim3(BX, BY), 0, s>>>(x, y);\n}\n";
    expect_not_applicable(tmpl, "k:1:BXxBY", true, NULL, "W4 is a template argument at line 5 of k");
    /* a static_assert on an extent */
    const char *sa = "constexpr int BX = 32, BY = 8;\nstatic_assert(BX % 32 == 0, \"whole warps across\");\n"
                     "__global__ void k(float *y) { y[(blockIdx.y * BY + threadIdx.y) * 1024 + blockIdx.x * BX + threadIdx.x] = 0.f; }\n"
                     "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                     "  k<<<dim3(1024 / BX, n / BY), dim3(BX, BY), 0, s>>>(y);\n}\n";
    expect_not_applicable(sa, "k:1:BXxBY", true, NULL, "the static_assert at line 2 tests BX");
    /* literals of the old shape in the kernel */
    const char *lit = "__global__ void k(float *y, int w) {\n"
                      "  __shared__ float t[8][32];\n"
                      "  t[threadIdx.y][threadIdx.x] = y[threadIdx.y * w + threadIdx.x];\n  __syncthreads();\n"
                      "  y[threadIdx.y * w + threadIdx.x] = t[7 - threadIdx.y][31 - threadIdx.x];\n}\n"
                      "extern \"C\" void launch(float *y, int w, cudaStream_t s) {\n"
                      "  dim3 block(32, 8);\n  k<<<1, block, 0, s>>>(y, w);\n}\n";
    expect_not_applicable(lit, "k:9:32x8", true, NULL, "k hard-codes 32 at line 2, an assumption about the 32x8 block");
    /* an extent derived from other constants */
    const char *derived = "constexpr int W = 16;\nconstexpr int BX = 2 * W, BY = 8;\n"
                          "__global__ void k(float *y) { y[(blockIdx.y * BY + threadIdx.y) * 1024 + blockIdx.x * BX + threadIdx.x] = 0.f; }\n"
                          "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                          "  k<<<dim3(1024 / BX, n / BY), dim3(BX, BY), 0, s>>>(y);\n}\n";
    expect_not_applicable(derived, "k:2:BXxBY", false, "{\"bx\": \"16\", \"by\": \"16\"}",
                          "BX is derived from other constants (2 * W)");
    /* an extent that is an expression: the site exists, with no blanks in its id */
    const char *expr = "#define W 16\n__global__ void k(float *y) { y[threadIdx.y * blockDim.x + threadIdx.x] = 0.f; }\n"
                       "extern \"C\" void launch(float *y, cudaStream_t s) {\n  k<<<1, dim3(W * 2, 8), 0, s>>>(y);\n}\n";
    expect_not_applicable(expr, "k:4:W*2x8", false, "{\"bx\": \"16\", \"by\": \"16\"}",
                          "the block extent W * 2 at line 4 is an expression, not one constant");
    /* another kernel uses an extent with a block of its own */
    const char *shared = "#define BX 32\n#define BY 8\n"
                         "__global__ void a(float *y) { y[(blockIdx.y * BY + threadIdx.y) * 1024 + blockIdx.x * BX + threadIdx.x] = 0.f; }\n"
                         "__global__ void b(float *y) { y[blockIdx.x * BX + threadIdx.x] = 1.f; }\n"
                         "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n"
                         "  a<<<dim3(1024 / BX, n / BY), dim3(BX, BY), 0, s>>>(y);\n  b<<<n / BX, BX, 0, s>>>(y);\n}\n";
    expect_not_applicable(shared, "a:1:BXxBY", true, NULL, "b uses BX but its launch at line 7 has another block");
    /* one constant for both extents: only a square block */
    const char *square = "#define BLOCK 16\n"
                         "__global__ void k(float *y, int w) { y[(blockIdx.y * BLOCK + threadIdx.y) * w + blockIdx.x * BLOCK + threadIdx.x] = 0.f; }\n"
                         "extern \"C\" void launch(float *y, int h, int w, cudaStream_t s) {\n"
                         "  dim3 block(BLOCK, BLOCK);\n  k<<<dim3(w / BLOCK, h / BLOCK), block, 0, s>>>(y, w);\n}\n";
    expect_not_applicable(square, "k:1:BLOCKxBLOCK", false, "{\"bx\": \"32\", \"by\": \"8\"}",
                          "the block is BLOCK x BLOCK (line 1): one constant cannot give a 32x8 block");
    /* the same shape as asked */
    expect_not_applicable(square, "k:1:BLOCKxBLOCK", false, "{\"bx\": \"16\", \"by\": \"16\"}", "already 16x16");
    /* a 16x16 block has nothing to remove */
    json_t *arr = sites_of("t.cu", square);
    assert_null(site_of(arr, "k:1:BLOCKxBLOCK", "present"));
    assert_non_null(site_of(arr, "k:1:BLOCKxBLOCK", "applicable"));
    json_decref(arr);
}

/* ---- parameters ------------------------------------------------------------------------------------- */

static void params_2d(void **state)
{
    (void)state;
    const char *def = "#define BX 16\n#define BY 16\n"
                      "__global__ void k(float *y, int w) { y[(blockIdx.y * BY + threadIdx.y) * w + blockIdx.x * BX + threadIdx.x] = 0.f; }\n"
                      "extern \"C\" void launch(float *y, int h, int w, cudaStream_t s) {\n"
                      "  k<<<dim3((w + BX - 1) / BX, (h + BY - 1) / BY), dim3(BX, BY), 0, s>>>(y, w);\n}\n";
    char *out = NULL;
    kl_error err = {0};
    /* no parameters: the default 32x8 */
    assert_int_equal(rewrite_src(def, "k:1:BXxBY", false, NULL, &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define BX 32\n#define BY 8\n"));
    free(out);
    /* threads alone picks a shape: 128 -> 16x8, 1024 -> 32x32 */
    assert_int_equal(rewrite_src(def, "k:1:BXxBY", false, "{\"threads\": \"128\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define BX 16\n#define BY 8\n"));
    free(out);
    assert_int_equal(rewrite_src(def, "k:1:BXxBY", false, "{\"threads\": \"1024\"}", &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define BX 32\n#define BY 32\n"));
    free(out);
    /* more than 1024 threads; a value off the list */
    assert_int_equal(rewrite_src(def, "k:1:BXxBY", false, "{\"bx\": \"64\", \"by\": \"32\"}", &out, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "more than 1024 threads"));
    assert_int_equal(rewrite_src(def, "k:1:BXxBY", false, "{\"bx\": \"24\"}", &out, &err), KL_ERR_INVALID);
    /* bx/by on a 1-D block */
    const char *one = "#define B 128\n__global__ void k(float *y) { y[blockIdx.x * B + threadIdx.x] = 0.f; }\n"
                      "extern \"C\" void launch(float *y, int n, cudaStream_t s) {\n  k<<<n / B, B, 0, s>>>(y);\n}\n";
    assert_int_equal(rewrite_src(one, "k:1:B", false, "{\"bx\": \"32\", \"by\": \"8\"}", &out, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "bx and by are for a 2-D block"));
    assert_null(out);
    /* the present site's features and params */
    const char *lit = "__global__ void k(float *y, int w) { y[(blockIdx.y * blockDim.y + threadIdx.y) * w + blockIdx.x * blockDim.x + threadIdx.x] = 0.f; }\n"
                      "extern \"C\" void launch(float *y, int h, int w, cudaStream_t s) {\n"
                      "  k<<<dim3((w + 63) / 64, (h + 3) / 4), dim3(64, 4), 0, s>>>(y, w);\n}\n";
    json_t *arr = sites_of("t.cu", lit);
    const json_t *p = site_of(arr, "k:3:64x4", "present");
    assert_non_null(p);
    const json_t *f = json_object_get(p, "features");
    assert_int_equal(json_integer_value(json_object_get(f, "bx")), 64);
    assert_int_equal(json_integer_value(json_object_get(f, "by")), 4);
    assert_int_equal(json_integer_value(json_object_get(f, "threads")), 256);
    assert_true(json_is_null(json_object_get(f, "constant_x")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(p, "params"), "bx")), "64");
    json_decref(arr);
    /* removing it rewrites the literal grid per extent */
    assert_int_equal(rewrite_src(lit, "k:3:64x4", true, NULL, &out, &err), KL_OK);
    assert_non_null(strstr(out, "k<<<dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16), 0, s>>>"));
    free(out);
}

/* ---- the built-in tasks ----------------------------------------------------------------------------- */

typedef struct want2d {
    const char *task, *kernel, *cx, *cy;
    const char *after[2]; /* text the removal must give */
} want2d;

static void tasks_2d(void **state)
{
    (void)state;
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    static const char *const tasks[] = {"blur", "hgemm", "histogram", "layernorm", "reduce_sum", "sgemm", "softmax",
                                        "transpose"};
    /* the 2-D sites the experts have: the transpose tile and blur's two warp-free kernels */
    static const want2d want[] = {
        {"transpose", "transpose_tiled", "TILE", "BLOCK_ROWS",
         {"constexpr int TILE = 16; ", "constexpr int BLOCK_ROWS = 16; "}},
        {"blur", "blur_reg", "BX", "BY", {"constexpr int BX = 16; ", "constexpr int BY = 16; "}},
        {"blur", "blur_generic", "GX", "GY", {"constexpr int GX = 16, GY = 16;", NULL}},
    };
    unsigned found = 0, naive2d = 0;
    char *dir = NULL, *paths[16];
    unsigned np = 0;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-bs2d", &dir, &err), KL_OK);
    for (unsigned t = 0; t < sizeof tasks / sizeof *tasks; t++) {
        for (int which = 0; which < 2; which++) {
            char path[1200];
            kl_snprintf(path, sizeof path, "%s/tasks/%s/%s", root, tasks[t], which ? "expert.cu" : "naive.cu");
            char *text = NULL;
            size_t len;
            assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
            json_t *arr = sites_of(path, text);
            size_t i;
            json_t *s;
            json_array_foreach(arr, i, s) {
                const json_t *f = json_object_get(s, "features");
                if (!json_object_get(f, "bx")) continue; /* a 1-D site */
                const char *id = json_string_value(json_object_get(s, "site"));
                const char *d = json_string_value(json_object_get(s, "direction"));
                if (!which) {
                    /* the naive 2-D kernels are 16x16 already: applicable only */
                    if (strcmp(d, "applicable")) fail_msg("%s: %s site %s in a naive kernel", path, d, id);
                    assert_int_equal(json_integer_value(json_object_get(f, "bx")), 16);
                    assert_int_equal(json_integer_value(json_object_get(f, "by")), 16);
                    if (!json_object_get(f, "why_not")) naive2d++;
                    continue;
                }
                if (strcmp(d, "present")) continue;
                const char *kernel = json_string_value(json_object_get(s, "kernel"));
                const want2d *w = NULL;
                for (unsigned k = 0; k < sizeof want / sizeof *want; k++)
                    if (!strcmp(want[k].task, tasks[t]) && !strcmp(want[k].kernel, kernel)) w = &want[k];
                if (!w) fail_msg("%s: an unexpected 2-D site %s", path, id);
                if (json_object_get(f, "why_not"))
                    fail_msg("%s: %s: %s", path, id, json_string_value(json_object_get(f, "why_not")));
                assert_string_equal(json_string_value(json_object_get(f, "constant_x")), w->cx);
                assert_string_equal(json_string_value(json_object_get(f, "constant_y")), w->cy);
                char *out = NULL;
                if (rewrite_src(text, id, true, NULL, &out, &err) != KL_OK) fail_msg("%s: removing %s: %s", path, id, err.message);
                for (int k = 0; k < 2; k++)
                    if (w->after[k] && !strstr(out, w->after[k])) fail_msg("%s: removing %s lacks '%s':\n%s", path, id, w->after[k], out);
                /* the result is 16x16 and has nothing more to remove there */
                json_t *again = sites_of(path, out);
                assert_null(site_of(again, id, "present"));
                json_decref(again);
                char name[64];
                kl_snprintf(name, sizeof name, "%s-%s.cu", tasks[t], kernel);
                paths[np] = kl_path_join(dir, name);
                assert_int_equal(kl_file_write(paths[np], out, strlen(out), &err), KL_OK);
                np++;
                found++;
                free(out);
            }
            json_decref(arr);
            free(text);
        }
    }
    assert_int_equal(found, 3);
    assert_int_equal(naive2d, 4); /* transpose, blur, sgemm, hgemm */
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

/* The transpose root of the walk: removing the block shape gives one element per thread, 16x16. */
static void transpose_root(void **state)
{
    (void)state;
    const char *data = getenv("KL_TEST_DATA");
    assert_non_null(data);
    char path[1200];
    kl_snprintf(path, sizeof path, "%s/rules/block-size/2d_transpose_root.before.cu", data);
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
    char *out = NULL;
    assert_int_equal(rewrite_src(text, "transpose_tiled:15:TILExBLOCK_ROWS", true, NULL, &out, &err), KL_OK);
    /* TILE / BLOCK_ROWS == 1: the loop runs once per thread; grid and block follow TILE */
    assert_non_null(strstr(out, "constexpr int TILE = 16; "));
    assert_non_null(strstr(out, "constexpr int BLOCK_ROWS = 16; "));
    assert_non_null(strstr(out, "for (int r = ty; r < TILE; r += BLOCK_ROWS)"));
    assert_non_null(strstr(out, "const dim3 block(TILE, BLOCK_ROWS);"));
    json_t *arr = sites_of(path, out);
    const json_t *a = site_of(arr, "transpose_tiled:15:TILExBLOCK_ROWS", "applicable");
    assert_non_null(a);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "features"), "bx")), 16);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "features"), "by")), 16);
    assert_null(site_of(arr, "transpose_tiled:15:TILExBLOCK_ROWS", "present"));
    json_decref(arr);
    free(out);
    free(text);
}

/* coalesce's rows_per_thread writes loops over tile rows stepping by a rows constant from 0 (the
 * blog style): block-size reads them, removal to 16x16, and moves the rows only to a divisor. */
static void coalesce_rows_meet(void **state)
{
    (void)state;
    const char *data = getenv("KL_TEST_DATA");
    assert_non_null(data);
    char path[1200];
    kl_snprintf(path, sizeof path, "%s/rules/coalesce/staged_rows_per_thread.after.cu", data);
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
    json_t *arr = sites_of(path, text);
    assert_non_null(site_of(arr, "transpose_naive:4:BLOCKxBLOCK_ROWS", "present"));
    json_decref(arr);
    char *out = NULL;
    assert_int_equal(rewrite_src(text, "transpose_naive:4:BLOCKxBLOCK_ROWS", true, NULL, &out, &err), KL_OK);
    assert_non_null(strstr(out, "#define BLOCK 16\n#define BLOCK_ROWS 16\n"));
    free(out);
    assert_int_equal(rewrite_src(text, "transpose_naive:4:BLOCKxBLOCK_ROWS", false, "{\"bx\": \"32\", \"by\": \"8\"}", &out,
                                 &err),
                     KL_OK);
    assert_non_null(strstr(out, "#define BLOCK 32\n#define BLOCK_ROWS 8\n"));
    free(out);
    expect_not_applicable(text, "transpose_naive:4:BLOCKxBLOCK_ROWS", false, "{\"bx\": \"8\", \"by\": \"16\"}",
                          "8 rows are not a multiple of 16");
    free(text);
}

/* The backend proposes the removal on the transpose expert. */
static void backend_2d(void **state)
{
    (void)state;
    const char *root = getenv("KL_SOURCE_DIR");
    char path[1024];
    kl_snprintf(path, sizeof path, "%s/tasks/transpose/expert.cu", root);
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
    bool seen = false;
    for (unsigned i = 0; i < c.count; i++)
        if (!strcmp(c.items[i].transform, "block-size"))
            seen = strstr(c.items[i].source, "constexpr int TILE = 16; ") &&
                   strstr(c.items[i].source, "constexpr int BLOCK_ROWS = 16; ");
    assert_true(seen);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refuses_2d),
        cmocka_unit_test(params_2d),
        cmocka_unit_test(tasks_2d),
        cmocka_unit_test(transpose_root),
        cmocka_unit_test(coalesce_rows_meet),
        cmocka_unit_test(backend_2d),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
