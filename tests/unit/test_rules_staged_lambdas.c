/* The rules catalog on tiles staged through registers by lambdas, the idiom of warp-tiled SGEMMs
 * such as corpus/matmul/expert.cu (issue 17): smem-tile's lambda form (src/rewrite/rules/smem_tile_lambda.c),
 * its refusals, and the expert taken through double-buffer, vectorize and smem-tile. Golden cases:
 * tests/data/rules/smem-tile/remove_lambda_*, tests/data/rules/double-buffer/staged_*. */
#include "rules_tile_test.h"

/* Tiles staged through registers by lambdas (smem_tile_lambda.c): a text of tests/data/rules/smem-tile with
 * `from` replaced by `to`. */
static char *lambda_variant(const char *file, const char *from, const char *to)
{
    char rel[256];
    kl_snprintf(rel, sizeof rel, strchr(file, '/') ? "rules/%s" : "rules/smem-tile/%s", file);
    char *t = read_data_file(rel);
    size_t off = 0, n = strlen(from);
    while (t[off] && strncmp(t + off, from, n)) off++;
    if (!t[off]) fail_msg("no '%s' in %s", from, file);
    kl_strbuf b = KL_STRBUF_INIT;
    kl_strbuf_add(&b, t, off);
    kl_strbuf_adds(&b, to);
    kl_strbuf_adds(&b, t + off + strlen(from));
    char *r = kl_strbuf_detach(&b, NULL);
    free(t);
    return r;
}

static void smem_tile_lambda_says_why_not(void **state)
{
    (void)state;
    const char *wt = "remove_lambda_warptile.before.cu";
    /* a tile read before the stash writes it */
    char *t = lambda_variant(wt, "        fetch(s * BK);\n", "        acc[0][0][0][0] += sa[0][0];\n        fetch(s * BK);\n");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "sa is read at line 58 before stash");
    free(t);
    /* a pointer the elements read moves between the fetch and the compute */
    t = lambda_variant(wt, "        stash(0);\n        __syncthreads();\n", "        stash(0);\n        __syncthreads();\n        pa += 0;\n");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "pa, which sa's elements read, is assigned at line 61");
    free(t);
    /* a value that depends on the thread, not on the element's coordinates */
    t = lambda_variant(wt, "pa[(size_t)r * K + c] : 0.0f;", "pa[(size_t)r * K + c] : 0.0f + t;");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "is not a function of its tile coordinates alone");
    free(t);
    /* the fetch called before the loop too (a prologue) */
    t = lambda_variant(wt, "    const int slices = DIV_UP(K, BK);\n", "    const int slices = DIV_UP(K, BK);\n    fetch(0);\n");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "is called outside the loop at line 57 (a prologue: remove double-buffer first)");
    free(t);
    /* two writes of one tile disagree: the y slot of A stored from the z register */
    t = lambda_variant("remove_lambda_float4.before.cu", "As[kq + 1][r] = ga[v].y;", "As[kq + 1][r] = ga[v].z;");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "the writes of As at lines 47 and 48 give different elements at the same coordinates");
    free(t);
    /* a tile written in the compute */
    t = lambda_variant("remove_lambda_float4.before.cu", "            const float4 b = LD4(Bs[kk][tx * 4]);\n",
                       "            const float4 b = LD4(Bs[kk][tx * 4]);\n            Bs[kk][0] = 0.0f;\n");
    tile_expect_not_applicable(t, "smem-tile", true, NULL, "Bs at line 65 is written or aliased in the loop");
    free(t);
}

/* corpus/matmul/expert.cu (a warp-tiled SGEMM of the style corpus): its tiles are a staged-through-lambdas
 * site, refused while they have two stages and while the fetch has its float4 branch; once double-buffer
 * and vectorize are gone, the tiles become functions read from global memory, no shared memory is left,
 * and the result compiles. */
static void smem_tile_lambda_matmul_expert(void **state)
{
    (void)state;
    char *text = read_data_file("../../corpus/matmul/expert.cu");
    const char *why = NULL;
    json_t *s = tile_sites(text, "smem-tile");
    assert_non_null(tile_site(s, "present", &why));
    assert_non_null(why);
    assert_non_null(strstr(why, "remove double-buffer first"));
    json_decref(s);
    kl_error err = {0};
    s = tile_sites(text, "double-buffer");
    char *cur = tile_rewrite(text, "double-buffer", tile_site(s, "present", NULL), true, NULL, &err);
    if (!cur) fail_msg("%s", err.message);
    json_decref(s);
    s = tile_sites(cur, "smem-tile");
    const char *id = tile_site(s, "present", &why);
    assert_non_null(id);
    assert_non_null(why);
    assert_non_null(strstr(why, "under a condition at line"));
    assert_non_null(strstr(why, "remove vectorize first"));
    json_decref(s);
    for (int round = 0; round < 4; round++) {
        s = tile_sites(cur, "vectorize");
        const char *v = tile_site(s, "present", NULL);
        char *next = v ? tile_rewrite(cur, "vectorize", v, true, NULL, &err) : NULL;
        json_decref(s);
        if (!next) break;
        free(cur);
        cur = next;
    }
    s = tile_sites(cur, "smem-tile");
    why = NULL;
    id = tile_site(s, "present", &why);
    assert_non_null(id);
    assert_null(why);
    char *out = tile_rewrite(cur, "smem-tile", id, true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    json_decref(s);
    assert_null(strstr(out, "__shared__"));
    assert_null(strstr(out, "a_stage"));
    assert_null(strstr(out, "__syncthreads"));
    assert_null(strstr(out, "stash"));
    assert_non_null(strstr(out, "auto As = [&](int k0, int kl_p, int kl_q) -> float { return (block_m0 + kl_q < m) && k0 + kl_p + 0 < k ? "
                                "(a_tile + (size_t)kl_q * k + kl_p)[0] : 0.f; };"));
    assert_non_null(strstr(out, "auto Bs = [&](int k0, int kl_p, int kl_q) -> float { return (k0 + kl_p < k) && block_n0 + kl_q + 0 < n ? "
                                "(b_tile + (size_t)kl_p * n + kl_q)[0] : 0.f; };"));
    /* the float4 reads of the fragments: each lane read where it is used, the float4 local gone */
    assert_non_null(strstr(out, "a_frag[wm][1] = As(s * BK, kk, warp_m * WM + wm * (LANES_M * TM) + lane_m * TM + 1);"));
    assert_null(strstr(out, "const float4 v"));
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-st-lambda", &dir, &err), KL_OK);
    char *p = kl_path_join(dir, "matmul_no_tiles.cu");
    assert_int_equal(kl_file_write(p, out, strlen(out), &err), KL_OK);
    golden_nvcc_compile_all(&p, 1);
    free(p);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(out);
    free(cur);
    free(text);
}

/* register-tile's split form (register_tile_split.c) on our warp-tiled GEMM once its tiles are gone: the
 * reasons it gives where a split would change what the kernel computes. */
static void register_tile_split_says_why_not(void **state)
{
    (void)state;
    const char *wt = "register-tile/remove_split_warptile.before.cu";
    /* threads that share memory */
    char *t = lambda_variant(wt, "    float acc[WMI][WNI][TM][TN];\n", "    __shared__ float spare[4];\n    float acc[WMI][WNI][TM][TN];\n");
    tile_expect_not_applicable(t, "register-tile", true, NULL, "wt_gemm uses __shared__: its threads share work");
    free(t);
    /* an element of the accumulator read outside a loop over its dimension */
    t = lambda_variant(wt, "    const int slices = DIV_UP(K, BK);\n", "    acc[1][0][0][0] += 1.0f;\n    const int slices = DIV_UP(K, BK);\n");
    tile_expect_not_applicable(t, "register-tile", true, NULL,
                               "acc at line 35 is not indexed along its dimension 1 (extent 2) by a loop `for (V = 0; V < 2; ++V)`");
    free(t);
    /* a loop over the dimension carrying a value from one iteration to the next */
    t = lambda_variant(wt, "    for (int x = 0; x < WMI; ++x)\n        for (int i = 0; i < TM; ++i) {\n",
                       "    float total = 0.0f;\n    for (int x = 0; x < WMI; ++x)\n        for (int i = 0; i < TM; ++i) {\n            total += acc[x][0][i][0];\n");
    tile_expect_not_applicable(t, "register-tile", true, NULL, "line 54 writes state that outlives an iteration of the loop over x at line 52");
    free(t);
    /* an accumulator declared with its values */
    t = lambda_variant("register-tile/remove_split_float4.before.cu", "float acc[4][4] = {};", "float acc[4][4] = {{1.0f}};");
    tile_expect_not_applicable(t, "register-tile", true, NULL, "acc (line 24) is declared with its elements' initial values");
    free(t);
    /* no grid axis left: the kernel uses y and z */
    t = lambda_variant(wt, "    const int bm = blockIdx.y * BM", "    const int bm = blockIdx.z * 0 + blockIdx.y * BM");
    tile_expect_not_applicable(t, "register-tile", true, NULL, "wt_gemm uses blockIdx.y and blockIdx.z: no grid axis left");
    free(t);
}

static unsigned count_of(const char *text, const char *what)
{
    unsigned n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* The split's lanes: the dimension of the tile that moves the output store by one element (j in
 * `C[… + j] = acc[i][j]`) goes to consecutive threads, and threadIdx.x everywhere else is the thread that
 * held those outputs before; where the threads cannot be renumbered the shares stay with the blocks. */
static void register_tile_split_lanes(void **state)
{
    (void)state;
    kl_error err = {0};
    const char *f4 = "register-tile/remove_split_float4.before.cu";
    char *t = lambda_variant(f4, "", "");
    char *out = tile_rewrite(t, "register-tile", "sgemm_tiles:24", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "const int kl_s2 = (int)(threadIdx.x % 4);"));
    assert_non_null(strstr(out, "const unsigned kl_t = threadIdx.x / 4 + (int)(blockIdx.z / 4 % 4) * 64;"));
    assert_non_null(strstr(out, "const int tid = kl_t;"));
    /* nowhere else: the two declarations and the comment naming it */
    assert_int_equal(count_of(out, "threadIdx.x"), 3);
    /* the other dimension stays with the blocks */
    assert_non_null(strstr(out, "const int kl_s = (int)(blockIdx.z / 1 % 4);"));
    free(out);
    free(t);
    /* a helper outside the kernel reads threadIdx.x: renumbering the kernel's uses would miss it */
    t = lambda_variant(f4, "template <int BM,", "__device__ int lane_of() { return threadIdx.x % 32; }\n\ntemplate <int BM,");
    out = tile_rewrite(t, "register-tile", "sgemm_tiles:26", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "const int kl_s2 = (int)(blockIdx.z / 4 % 4);"));
    assert_null(strstr(out, "kl_t"));
    free(out);
    free(t);
    /* a warp-level operation: a warp would hold other threads */
    t = lambda_variant(f4, "    const int tid = threadIdx.x;\n", "    const int tid = threadIdx.x + 0 * (int)__activemask();\n");
    out = tile_rewrite(t, "register-tile", "sgemm_tiles:24", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "const int kl_s2 = (int)(blockIdx.z / 4 % 4);"));
    assert_null(strstr(out, "kl_t"));
    free(out);
    free(t);
    /* the stored index names j twice: no dimension moves it by one element for certain */
    t = lambda_variant(f4, "N + n0 + tx * 4 + j] = acc[i][j];", "N + n0 + tx * 4 + j + (j - j)] = acc[i][j];");
    out = tile_rewrite(t, "register-tile", "sgemm_tiles:24", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "kl_t"));
    free(out);
    free(t);
}

/* The split's last step: the one output's tests as early returns, and the loads' tests of the same row
 * and column dropped — only where the thread's one store is its only write to memory and the tests read
 * values that stay the same. */
static void register_tile_split_exit(void **state)
{
    (void)state;
    kl_error err = {0};
    const char *fold = "register-tile/remove_split_fold.before.cu";
    static const char exit_line[] = "    if (!(r0 + kl_s < m && c0 + kl_s2 < n)) return;\n";
    static const char unguarded[] = "af[0] = a[(size_t)(r0 + i) * k + p];";
    char *t = lambda_variant(fold, "", "");
    char *out = tile_rewrite(t, "register-tile", "gemm_frag:17", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, exit_line));
    assert_non_null(strstr(out, unguarded));
    /* the helper's test stays: a __device__ function may have other callers */
    assert_non_null(strstr(out, "return col < n ? b[(size_t)p * n + col] : 0.f;"));
    free(out);
    free(t);
    /* a second write to memory: a thread that returned early would skip it */
    t = lambda_variant(fold, "    for (int p = 0; p < k; ++p) {\n", "    if (k < 0) c[0] = 0.f;\n    for (int p = 0; p < k; ++p) {\n");
    out = tile_rewrite(t, "register-tile", "gemm_frag:17", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "return;"));
    assert_non_null(strstr(out, "af[0] = r0 + i < m ? a["));
    free(out);
    free(t);
    /* an effect besides the store: output, and a helper of the file that writes memory */
    t = lambda_variant(fold, "    for (int p = 0; p < k; ++p) {\n", "    if (k < 0) printf(\"k\\n\");\n    for (int p = 0; p < k; ++p) {\n");
    out = tile_rewrite(t, "register-tile", "gemm_frag:17", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "return;"));
    free(out);
    free(t);
    t = lambda_variant(fold, "__global__ void gemm_frag(",
                       "__device__ void touch(float* p) { p[0] = 0.f; }\n\n__global__ void gemm_frag(");
    char *t2 = NULL;
    {
        const char *at = strstr(t, "    for (int p = 0; p < k; ++p) {\n");
        assert_non_null(at);
        kl_strbuf b = KL_STRBUF_INIT;
        kl_strbuf_add(&b, t, (size_t)(at - t));
        kl_strbuf_adds(&b, "    if (k < 0) touch(c);\n");
        kl_strbuf_adds(&b, at);
        t2 = kl_strbuf_detach(&b, NULL);
    }
    out = tile_rewrite(t2, "register-tile", "gemm_frag:19", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "return;"));
    free(out);
    free(t2);
    free(t);
    /* a row that changes after it is set: the test at the store reads another value than the top would */
    t = lambda_variant(fold, "    const int r0 = (blockIdx.y * blockDim.y + threadIdx.y) * 2;\n",
                       "    int r0 = (blockIdx.y * blockDim.y + threadIdx.y) * 2;\n    r0 += k > 0 ? 0 : 1;\n");
    out = tile_rewrite(t, "register-tile", "gemm_frag:18", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "return;"));
    assert_non_null(strstr(out, "af[0] = r0 + i < m ? a["));
    free(out);
    free(t);
    /* a load at another row than the stored one keeps its test */
    t = lambda_variant(fold, "af[i] = r0 + i < m ? a[(size_t)(r0 + i) * k + p] : 0.f;",
                       "af[i] = r0 + i + 1 < m ? a[(size_t)(r0 + i) * k + p] : 0.f;");
    out = tile_rewrite(t, "register-tile", "gemm_frag:17", true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "return;"));
    assert_non_null(strstr(out, "af[0] = r0 + i + 1 < m ? a["));
    free(out);
    free(t);
}

/* corpus/matmul/expert.cu walked down by the catalog's removals alone: double-buffer, vectorize, smem-tile, then
 * register-tile once (WM_ITERS, WN_ITERS, TM, TN split in turn): one output per thread on 2 x 2 x 4 x 4 times
 * the blocks, no #pragma unroll left above the one-iteration loops, and it compiles. */
static void register_tile_split_matmul_expert(void **state)
{
    (void)state;
    char *cur = read_data_file("../../corpus/matmul/expert.cu");
    kl_error err = {0};
    static const char *const steps[] = {"double-buffer", "vectorize", "vectorize", "vectorize", "smem-tile", "register-tile"};
    for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        json_t *s = tile_sites(cur, steps[i]);
        const char *why = NULL;
        const char *id = tile_site(s, "present", &why);
        if (!id && !strcmp(steps[i], "vectorize")) {
            json_decref(s);
            continue;
        }
        if (!id || why) fail_msg("step %u: %s: %s", i, steps[i], why ? why : "no present site");
        char *next = tile_rewrite(cur, steps[i], id, true, NULL, &err);
        if (!next) fail_msg("step %u: %s@%s: %s", i, steps[i], id, err.message);
        json_decref(s);
        free(cur);
        cur = next;
    }
    json_t *s = tile_sites(cur, "register-tile");
    assert_null(tile_site(s, "present", NULL));
    json_decref(s);
    assert_non_null(strstr(cur, "    float acc[1][1][1][1];\n"));
    assert_non_null(strstr(cur, "float a_frag[1][1], b_frag[1][1];"));
    /* the fragment's four element stores (a float4's removal) folded into one load at this block's share */
    assert_non_null(strstr(cur, "a_frag[0][0] = As(s * BK, kk, warp_m * WM + wm * (LANES_M * TM) + lane_m * TM + kl_s3);"));
    assert_null(strstr(cur, "if (kl_s3 == "));
    /* the column within the lane tile (the store's contiguous dimension) from consecutive threads, the
     * thread that held it before from the block's share */
    assert_non_null(strstr(cur, "const int kl_s4 = (int)(threadIdx.x % 4);"));
    assert_non_null(strstr(cur, "const unsigned kl_t = threadIdx.x / 4 + (int)(blockIdx.y / 16 % 4) * 64;"));
    assert_non_null(strstr(cur, "const int tid = kl_t;"));
    /* the one output's tests first, and the element functions' tests of its row and column gone (k's kept) */
    assert_non_null(strstr(cur, "    if ((block_m0 + warp_m * WM + kl_s * (LANES_M * TM) + lane_m * TM + kl_s3) >= m) return;\n"
                                "    if (!((block_n0 + warp_n * WN + kl_s2 * (LANES_N * TN) + lane_n * TN) + kl_s4 < n)) return;\n"));
    assert_non_null(strstr(cur, "auto As = [&](int k0, int kl_p, int kl_q) -> float { return k0 + kl_p + 0 < k ? "
                                "(a_tile + (size_t)kl_q * k + kl_p)[0] : 0.f; };"));
    assert_non_null(strstr(cur, "auto Bs = [&](int k0, int kl_p, int kl_q) -> float { return k0 + kl_p < k ? "
                                "(b_tile + (size_t)kl_p * n + kl_q)[0] : 0.f; };"));
    assert_non_null(strstr(cur, "<<<dim3((unsigned)blocks, 2 * 2 * 4 * 4), THREADS, 0, stream>>>"));
    assert_null(strstr(cur, "__shared__"));
    assert_null(strstr(cur, "#pragma unroll\n    for (int wm = kl_s;"));
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-rt-split", &dir, &err), KL_OK);
    char *p = kl_path_join(dir, "matmul_one_output.cu");
    assert_int_equal(kl_file_write(p, cur, strlen(cur), &err), KL_OK);
    golden_nvcc_compile_all(&p, 1);
    free(p);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(cur);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smem_tile_lambda_says_why_not),
        cmocka_unit_test(smem_tile_lambda_matmul_expert),
        cmocka_unit_test(register_tile_split_says_why_not),
        cmocka_unit_test(register_tile_split_lanes),
        cmocka_unit_test(register_tile_split_exit),
        cmocka_unit_test(register_tile_split_matmul_expert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
