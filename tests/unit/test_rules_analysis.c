/* The rules catalog's shared machinery: the index analysis and the one constant evaluator
 * (src/syntax/affine.c), the catalog and the `rules` backend (src/rewrite/rules/catalog.c), the
 * check every result passes. The golden cases of every transform are test_rules_golden.c. */
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
#include "syntax/affine.h"
#include "util/util.h"
#include "rules_golden.h"

/* ---- the analysis ------------------------------------------------------------------------- */

static const char *kernel_text =
    "#define IDX(r, c, ld) ((r) * (ld) + (c))\n"
    "#define TILE 16\n"
    "__device__ __forceinline__ size_t at(size_t r, size_t c, size_t ld) { return r * ld + c; }\n"
    "__global__ void gemm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
    "  int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (row >= M || col >= N) return;\n"
    "  float acc = 0.f;\n"
    "  for (int k = 0; k < K; ++k) acc += A[IDX(row, k, K)] * B[at(k, col, N)];\n"
    "  C[row * N + col] = acc;\n"
    "  size_t j = threadIdx.x;\n"
    "  while (j < N) { C[j] = C[j % M]; j += blockDim.x; }\n"
    "  __shared__ float sh[TILE][TILE + 1];\n"
    "  sh[threadIdx.y][threadIdx.x] = 0.f;\n"
    "  for (int s = 128; s > 0; s >>= 1) sh[0][s] += 1;\n"
    "}\n";

static const kl_ax_access *access_of(kl_affine_ctx *ax, const char *array, unsigned nth)
{
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (!strcmp(a->array, array) && nth-- == 0) return a;
    }
    return NULL;
}

static void affine_sees_through_macros_helpers_locals(void **state)
{
    (void)state;
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("t.cu", kernel_text, strlen(kernel_text), &src, &err), KL_OK);
    TSNode k[4];
    assert_int_equal(kl_ast_functions(src, "__global__", k, 4), 1);
    kl_affine_ctx *ax = NULL;
    assert_int_equal(kl_affine_ctx_new(src, k[0], &ax, &err), KL_OK);

    /* A[IDX(row, k, K)]: macro + once-assigned local; varies with k, threadIdx.x absent */
    const kl_ax_access *a = access_of(ax, "A", 0);
    assert_non_null(a);
    assert_true(a->flat.ok);
    assert_string_equal(kl_affine_coef(&a->flat, "k"), "1");
    assert_string_equal(kl_affine_coef(&a->flat, "threadIdx.y"), "K");
    assert_string_equal(kl_affine_coef(&a->flat, "blockIdx.y"), "K*blockDim.y");
    assert_null(kl_affine_coef(&a->flat, "threadIdx.x"));
    assert_true(a->tx_known);
    assert_int_equal(a->tx_stride, 0); /* a broadcast across the warp */
    assert_true(a->varies_mask & 1u);

    /* B[at(k, col, N)]: a __device__ helper; coalesced across threadIdx.x */
    const kl_ax_access *b = access_of(ax, "B", 0);
    assert_true(b->flat.ok);
    assert_string_equal(kl_affine_coef(&b->flat, "k"), "N");
    assert_true(b->tx_known);
    assert_int_equal(b->tx_stride, 1);

    /* C[j] in a while loop: j is the loop's variable, starting at threadIdx.x */
    const kl_ax_access *cj = access_of(ax, "C", 1);
    assert_true(cj->flat.ok);
    assert_string_equal(kl_affine_coef(&cj->flat, "j"), "1");
    assert_int_equal(cj->tx_stride, 1);
    /* C[j % M]: not affine, and says why */
    const kl_ax_access *cm = access_of(ax, "C", 2);
    assert_false(cm->flat.ok);
    assert_non_null(strstr(cm->flat.why, "%"));

    /* sh[threadIdx.y][threadIdx.x] of a [16][17] array: linearised with the padded row */
    const kl_ax_access *s = access_of(ax, "sh", 0);
    assert_true(s->flat.ok);
    assert_string_equal(kl_affine_coef(&s->flat, "threadIdx.y"), "17");

    /* loops: k (runtime bound), j (while), s (shift, 8 trips) */
    assert_int_equal(kl_affine_loop_count(ax), 3);
    const kl_ax_loop *L0 = kl_affine_loop(ax, 0), *L1 = kl_affine_loop(ax, 1), *L2 = kl_affine_loop(ax, 2);
    assert_string_equal(L0->var, "k");
    assert_false(L0->trip_known);
    assert_string_equal(L1->var, "j");
    assert_int_equal(L1->kind, KL_LOOP_WHILE);
    assert_string_equal(L2->var, "s");
    assert_true(L2->trip_known);
    assert_int_equal(L2->trip, 8);
    kl_affine_ctx_free(ax);
    kl_source_free(src);
}

/* A member of a struct passed by value (`d.n` of `Dims d`) is the same for every thread: a symbol
 * in the index, as a size parameter is; not when the kernel writes it, nor through a pointer. */
/* The catalog's memo: one analysis per function while the source is open (the same one for each
 * ask, another for another function, and equal to an analysis made anew); without a memo each
 * ask makes its own. */
static void rules_affine_is_made_once_per_function(void **state)
{
    (void)state;
    static const char two[] = "__device__ float twice(float v) { return 2.f * v; }\n"
                              "__global__ void k(float *y, int n) {\n"
                              "  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i * 2] = twice(y[i]);\n"
                              "}\n";
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("t.cu", two, strlen(two), &src, &err), KL_OK);
    TSNode g[2], d[2];
    assert_int_equal(kl_ast_functions(src, "__global__", g, 2), 1);
    assert_int_equal(kl_ast_functions(src, "__device__", d, 2), 1);
    kl_rules_memo *memo = kl_rules_memo_new();
    assert_non_null(memo);
    kl_rule_ctx with = {src, kl_source_text(src, NULL), strlen(two), NULL, memo};
    kl_rule_ctx without = with;
    without.memo = NULL;

    kl_affine_ctx *a1 = NULL, *a2 = NULL, *b = NULL, *fresh = NULL;
    assert_int_equal(kl_rules_affine(&with, g[0], &a1, &err), KL_OK);
    assert_int_equal(kl_rules_affine(&with, d[0], &b, &err), KL_OK);
    assert_int_equal(kl_rules_affine(&with, g[0], &a2, &err), KL_OK);
    assert_ptr_equal(a1, a2);
    assert_ptr_not_equal(a1, b);
    assert_true(ts_node_eq(kl_affine_ctx_function(a1), g[0]));
    assert_true(ts_node_eq(kl_affine_ctx_function(b), d[0]));
    kl_rules_affine_done(&with, a1);
    kl_rules_affine_done(&with, a2);
    kl_rules_affine_done(&with, b);

    assert_int_equal(kl_rules_affine(&without, g[0], &fresh, &err), KL_OK);
    assert_ptr_not_equal(fresh, a1);
    assert_int_equal(kl_affine_access_count(fresh), kl_affine_access_count(a1));
    for (unsigned i = 0; i < kl_affine_access_count(fresh); i++) {
        const kl_ax_access *x = kl_affine_access(fresh, i), *y = kl_affine_access(a1, i);
        assert_string_equal(x->array, y->array);
        assert_int_equal(x->tx_known, y->tx_known);
        assert_int_equal(x->tx_stride, y->tx_stride);
    }
    kl_rules_affine_done(&without, fresh);
    kl_rules_memo_free(memo); /* frees a1 and b */
    kl_source_free(src);
}

static void affine_reads_members_of_a_struct_parameter(void **state)
{
    (void)state;
    const char *t = "struct Dims { int n, m; };\n"
                    "__global__ void k(const float *w, float *y, Dims d, Dims e, const Dims *p) {\n"
                    "  int o = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  float acc = 0.f;\n"
                    "  for (int i = 0; i < d.m; ++i) acc += w[(size_t)i * d.n + o];\n"
                    "  e.n = 3;\n"
                    "  y[o * e.n] = w[o * p->n] + acc;\n"
                    "}\n";
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("m.cu", t, strlen(t), &src, &err), KL_OK);
    TSNode k[2];
    assert_int_equal(kl_ast_functions(src, "__global__", k, 2), 1);
    kl_affine_ctx *ax = NULL;
    assert_int_equal(kl_affine_ctx_new(src, k[0], &ax, &err), KL_OK);
    const kl_ax_access *a = access_of(ax, "w", 0);
    assert_non_null(a);
    assert_true(a->flat.ok);
    assert_string_equal(kl_affine_coef(&a->flat, "i"), "d.n");
    assert_string_equal(kl_affine_coef(&a->flat, "threadIdx.x"), "1");
    const kl_ax_access *ye = access_of(ax, "y", 0);
    assert_non_null(ye);
    assert_false(ye->flat.ok); /* e.n is written in the kernel */
    assert_non_null(strstr(ye->flat.why, "e.n"));
    const kl_ax_access *wp = access_of(ax, "w", 1);
    assert_non_null(wp);
    assert_false(wp->flat.ok); /* p->n: read through a pointer */
    kl_affine_ctx_free(ax);
    kl_source_free(src);
}

static void const_eval_reads_macros_and_dim3(void **state)
{
    (void)state;
    const char *t = "#define B 32\nconstexpr int W = B * 4;\n"
                    "void launch(void) { dim3 blk(B, 8); int th = W / 2; k<<<1, blk>>>(); k<<<1, th>>>(); }\n";
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("c.cu", t, strlen(t), &src, &err), KL_OK);
    kl_launch_sites ls;
    assert_int_equal(kl_ast_launches(src, &ls, &err), KL_OK);
    assert_int_equal(ls.count, 2);
    int64_t v = 0;
    char why[128];
    /* blk is a dim3 local: its initializer is the argument list */
    TSNode fn = ls.items[0].host_fn;
    assert_true(kl_const_eval(src, fn, ls.items[1].block, true, &v, why, sizeof why));
    assert_int_equal(v, 64);
    assert_false(kl_const_eval(src, fn, ls.items[0].grid, false, &v, why, sizeof why) && v != 1);
    kl_launch_sites_release(&ls);
    kl_source_free(src);
}

/* The evaluator remembers a name's value by scope (syntax/memo.h): asked again, a name gives the
 * same value, and a name that is no constant is refused at each use with that use's line. */
static void const_eval_remembers_by_scope(void **state)
{
    (void)state;
    const char *t = "constexpr int A = 8;\n"
                    "void launch(int n) {\n"
                    "  k<<<1, A>>>();\n"
                    "  k<<<1, Q>>>();\n"
                    "  k<<<1, Q * 2>>>();\n"
                    "  int m = n; k<<<1, m>>>();\n"
                    "}\n";
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("m.cu", t, strlen(t), &src, &err), KL_OK);
    kl_launch_sites ls;
    assert_int_equal(kl_ast_launches(src, &ls, &err), KL_OK);
    assert_int_equal(ls.count, 4);
    TSNode fn = ls.items[0].host_fn;
    int64_t v = 0;
    char why[200];
    for (int round = 0; round < 2; round++) {
        assert_false(kl_const_eval(src, fn, ls.items[1].block, false, &v, why, sizeof why));
        assert_non_null(strstr(why, "unknown name, line 4"));
        assert_false(kl_const_eval(src, fn, ls.items[2].block, false, &v, why, sizeof why));
        assert_non_null(strstr(why, "unknown name, line 5"));
        /* a local assigned from a parameter: a run-time value */
        assert_false(kl_const_eval(src, fn, ls.items[3].block, false, &v, why, sizeof why));
        assert_non_null(strstr(why, "'n'"));
        v = 0;
        assert_true(kl_const_eval(src, fn, ls.items[0].block, false, &v, why, sizeof why));
        assert_int_equal(v, 8);
    }
    kl_launch_sites_release(&ls);
    kl_source_free(src);
}

/* `dim3 b(BLOCK, BLOCK)` reads as a function declaration (its arguments look like types); a
 * local dim3 of constants is a compile-time block size unless it is changed before the launch. */
static void const_eval_dim3_locals(void **state)
{
    (void)state;
    const char *t = "#define BLOCK 16\nconstexpr int ROWS = 4;\n"
                    "void launch(int n) {\n"
                    "  dim3 a(BLOCK, BLOCK); k<<<1, a>>>();\n"
                    "  const dim3 b = dim3(BLOCK, ROWS, 2); k<<<1, b>>>();\n"
                    "  dim3 c{32, ROWS}; k<<<1, c>>>();\n"
                    "  dim3 d(BLOCK, BLOCK); d.x = 64; k<<<1, d>>>();\n"
                    "  dim3 e(n, BLOCK); k<<<1, e>>>();\n"
                    "}\n";
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("d.cu", t, strlen(t), &src, &err), KL_OK);
    kl_launch_sites ls;
    assert_int_equal(kl_ast_launches(src, &ls, &err), KL_OK);
    assert_int_equal(ls.count, 5);
    TSNode fn = ls.items[0].host_fn;
    int64_t v = 0;
    char why[200];
    assert_true(kl_const_eval(src, fn, ls.items[0].block, true, &v, why, sizeof why));
    assert_int_equal(v, 256);
    assert_true(kl_const_eval(src, fn, ls.items[1].block, true, &v, why, sizeof why));
    assert_int_equal(v, 128);
    assert_true(kl_const_eval(src, fn, ls.items[2].block, true, &v, why, sizeof why));
    assert_int_equal(v, 128);
    /* a dim3 is not a number */
    assert_false(kl_const_eval(src, fn, ls.items[0].block, false, &v, why, sizeof why));
    /* changed by `d.x = 64` */
    assert_false(kl_const_eval(src, fn, ls.items[3].block, true, &v, why, sizeof why));
    assert_non_null(strstr(why, "assigned more than once"));
    /* a run-time extent */
    assert_false(kl_const_eval(src, fn, ls.items[4].block, true, &v, why, sizeof why));
    assert_non_null(strstr(why, "'n'"));
    kl_launch_sites_release(&ls);
    kl_source_free(src);
}

/* ---- the catalog and the backend ------------------------------------------------------------ */

static const char *saxpy =
    "#define BLOCK 256\n"
    "__global__ void saxpy(const float *x, float *y, float a, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * expf(x[i]) + y[i];\n"
    "}\n"
    "extern \"C\" void launch(const float *x, float *y, float a, int n, cudaStream_t stream) {\n"
    "    saxpy<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, a, n);\n"
    "}\n";

static void backend_simplify_and_apply(void **state)
{
    (void)state;
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = saxpy;
    req.source_name = "saxpy.cu";
    req.transform = "launch-bounds";
    kl_candidates c;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_true(c.count >= 1);
    assert_string_equal(c.items[0].transform, "launch-bounds");
    assert_non_null(strstr(c.items[0].source, "__launch_bounds__(BLOCK)"));
    /* backward from the result: the bounds come out again, giving back the original */
    kl_rewrite_request back = {0};
    back.kind = KL_REQ_SIMPLIFY;
    back.source = c.items[0].source;
    back.source_name = "saxpy.cu";
    kl_candidates s;
    assert_int_equal(kl_rewriter_propose(rw, &back, &s, &err), KL_OK);
    bool found = false;
    for (unsigned i = 0; i < s.count; i++)
        if (!strcmp(s.items[i].transform, "launch-bounds") && !strcmp(s.items[i].source, saxpy)) found = true;
    assert_true(found);
    kl_candidates_free(&s);
    kl_candidates_free(&c);

    /* a skill card names the transform and its params */
    req.transform = NULL;
    req.skill_json = "{\"transform\": \"launch-bounds\", \"params\": {\"min_blocks\": \"2\"}}";
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_non_null(strstr(c.items[0].source, "__launch_bounds__(BLOCK, 2)"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
}

static void rewrite_errors_name_the_problem(void **state)
{
    (void)state;
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    size_t n = strlen(saxpy);
    assert_int_equal(kl_rules_rewrite("s.cu", saxpy, n, NULL, "no-such", "x:1", false, NULL, &out, &note, &err),
                     KL_ERR_NOT_FOUND);
    assert_int_equal(kl_rules_rewrite("s.cu", saxpy, n, NULL, "unroll", "saxpy:99", false, NULL, &out, &note, &err),
                     KL_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "saxpy:99"));
    assert_int_equal(kl_rules_rewrite("s.cu", saxpy, n, NULL, "launch-bounds", "saxpy:2", false,
                                      "{\"min_blocks\": \"3\"}", &out, &note, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "min_blocks=3"));
    assert_int_equal(kl_rules_rewrite("s.cu", saxpy, n, NULL, "launch-bounds", "saxpy:2", true, NULL, &out, &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_null(out);
}

static void check_refuses_broken_results(void **state)
{
    (void)state;
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("s.cu", saxpy, strlen(saxpy), &src, &err), KL_OK);
    const char *broken = "__global__ void saxpy(const float *x) { if (x { }\n";
    assert_int_not_equal(kl_rules_check(src, broken, strlen(broken), &err), KL_OK);
    const char *lost = "__global__ void saxpy(const float *x) { }\n";
    assert_int_equal(kl_rules_check(src, lost, strlen(lost), &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "launch"));
    assert_int_equal(kl_rules_check(src, saxpy, strlen(saxpy), &err), KL_OK);
    kl_source_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(affine_sees_through_macros_helpers_locals),
        cmocka_unit_test(affine_reads_members_of_a_struct_parameter),
        cmocka_unit_test(rules_affine_is_made_once_per_function),
        cmocka_unit_test(const_eval_reads_macros_and_dim3),
        cmocka_unit_test(const_eval_remembers_by_scope),
        cmocka_unit_test(backend_simplify_and_apply),
        cmocka_unit_test(rewrite_errors_name_the_problem),
        cmocka_unit_test(check_refuses_broken_results),
        cmocka_unit_test(const_eval_dim3_locals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
