/* The index analysis's polynomial view (src/syntax/affine.h: kl_affine_poly_of and the questions
 * on a kl_poly): strides, what an opaque value reads, products of indices, the global thread
 * index, and the locals, macros and helpers it sees through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "util/util.h"

static const char *kernel_text =
    "#define BS 256\n"
    "#define TILE (2 * blockDim.x)\n"
    "#define AT(r, c) ((r) * n + (c))\n"
    "__device__ int lane_of(int t) { return t % 32; }\n"
    "template <int W>\n"
    "__global__ void k(const float *x, float *y, int n) {\n"
    "  int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  int lin = threadIdx.x + 4 * threadIdx.y;\n"
    "  int sym = threadIdx.x * n;\n"
    "  int sq = threadIdx.x * threadIdx.x;\n"
    "  int txy = threadIdx.x * threadIdx.y;\n"
    "  int rem = (threadIdx.x + n) % 32;\n"
    "  int lane = lane_of(threadIdx.x);\n"
    "  int flat = AT(row, col);\n"
    "  int gone = threadIdx.x - threadIdx.x;\n"
    "  int load = (int)x[threadIdx.x];\n"
    "  int moved = threadIdx.x;\n"
    "  moved += 1;\n"
    "  int via = moved * 4;\n"
    "  int g_dim = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  int g_const = BS * blockIdx.x + threadIdx.x;\n"
    "  int g_half = (BS / 2) * blockIdx.x + threadIdx.x;\n"
    "  int g_tmpl = threadIdx.x + blockIdx.x * W;\n"
    "  int g_tile = TILE * blockIdx.x + threadIdx.x;\n"
    "  int g_pair = blockIdx.x * blockDim.x * 2 + threadIdx.x;\n"
    "  int no_dimy = blockIdx.x * blockDim.y + threadIdx.x;\n"
    "  int no_extra = blockIdx.x * blockDim.x + threadIdx.x + 1;\n"
    "  int s_two = blockDim.x * gridDim.x * 2;\n"
    "  int s_const = gridDim.x * BS;\n"
    "  int s_other = gridDim.x * 100;\n"
    "  y[flat + lin + sym + sq + txy + rem + lane + gone + load + via] = 0.f;\n"
    "  y[g_dim + g_const + g_half + g_tmpl + g_tile + g_pair + no_dimy + no_extra + s_two + s_const + s_other] = 0.f;\n"
    "}\n";

typedef struct fixture {
    kl_source *src;
    TSNode fn;
    kl_affine_ctx *ax;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    if (!f || kl_source_parse_text("p.cu", kernel_text, strlen(kernel_text), &f->src, &err) != KL_OK) return -1;
    TSNode k[2];
    if (kl_ast_functions(f->src, "__global__", k, 2) != 1) return -1;
    f->fn = k[0];
    if (kl_affine_ctx_new(f->src, f->fn, &f->ax, &err) != KL_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kl_affine_ctx_free(f->ax);
    kl_source_free(f->src);
    free(f);
    return 0;
}

/* The polynomial of local `name`'s initializer. */
static const kl_poly *poly_of(fixture *f, const char *name)
{
    TSNode init = kl_ast_local_init(f->src, f->fn, name);
    assert_false(ts_node_is_null(init));
    const kl_poly *p = NULL;
    assert_int_equal(kl_affine_poly_of(f->ax, init, &p), KL_OK);
    assert_non_null(p);
    return p;
}

static void poly_strides_along_each_index(void **state)
{
    fixture *f = *state;
    int64_t k = 0;
    const kl_poly *lin = poly_of(f, "lin");
    assert_int_equal(kl_poly_stride(lin, "threadIdx.x", &k), KL_STRIDE_UNIT);
    assert_int_equal(k, 1);
    assert_int_equal(kl_poly_stride(lin, "threadIdx.y", &k), KL_STRIDE_CONST);
    assert_int_equal(k, 4);
    assert_int_equal(kl_poly_stride(lin, "threadIdx.z", NULL), KL_STRIDE_ABSENT);
    assert_int_equal(kl_poly_stride(poly_of(f, "sym"), "threadIdx.x", NULL), KL_STRIDE_SYMBOLIC);
    /* through a local and a function-like macro: row*n + col */
    const kl_poly *flat = poly_of(f, "flat");
    assert_int_equal(kl_poly_stride(flat, "threadIdx.x", NULL), KL_STRIDE_UNIT);
    assert_int_equal(kl_poly_stride(flat, "threadIdx.y", NULL), KL_STRIDE_SYMBOLIC);
    assert_int_equal(kl_poly_stride(flat, "blockIdx.x", NULL), KL_STRIDE_SYMBOLIC);
    assert_true(kl_poly_depends(flat, "n"));
    /* reads that cancel: no stride, still a read */
    const kl_poly *gone = poly_of(f, "gone");
    assert_false(gone->opaque);
    assert_int_equal(gone->n, 0);
    assert_true(kl_poly_depends(gone, "threadIdx.x"));
    assert_int_equal(kl_poly_stride(gone, "threadIdx.x", NULL), KL_STRIDE_ABSENT);
}

static void poly_products_of_indices(void **state)
{
    fixture *f = *state;
    /* not affine, but a polynomial: the affine form refuses what the polynomial keeps */
    TSNode init = kl_ast_local_init(f->src, f->fn, "txy");
    kl_affine a;
    assert_int_equal(kl_affine_of(f->ax, init, &a), KL_OK);
    assert_false(a.ok);
    kl_affine_release(&a);
    const kl_poly *txy = poly_of(f, "txy");
    assert_false(txy->opaque);
    assert_int_equal(txy->n, 1);
    assert_int_equal(txy->m[0].nf, 2);
    assert_string_equal(txy->m[0].f[0], "threadIdx.x");
    assert_string_equal(txy->m[0].f[1], "threadIdx.y");
    assert_int_equal(kl_poly_stride(txy, "threadIdx.x", NULL), KL_STRIDE_SYMBOLIC);
    /* a square moves by more than a stride */
    assert_int_equal(kl_poly_stride(poly_of(f, "sq"), "threadIdx.x", NULL), KL_STRIDE_OPAQUE);
    /* blockIdx.x * blockDim.x * 2: one monomial of two factors, coefficient 2 */
    const kl_poly *pair = poly_of(f, "g_pair");
    assert_int_equal(pair->n, 2);
    const kl_poly_mono *m = pair->m[0].nf == 2 ? &pair->m[0] : &pair->m[1];
    assert_int_equal(m->coef, 2);
    assert_string_equal(m->f[0], "blockDim.x");
    assert_string_equal(m->f[1], "blockIdx.x");
}

static void poly_opaque_keeps_what_it_reads(void **state)
{
    fixture *f = *state;
    const kl_poly *rem = poly_of(f, "rem");
    assert_true(rem->opaque);
    assert_int_equal(rem->ndeps, 2);
    assert_string_equal(rem->deps[0], "n");
    assert_string_equal(rem->deps[1], "threadIdx.x");
    assert_int_equal(kl_poly_stride(rem, "threadIdx.x", NULL), KL_STRIDE_OPAQUE);
    assert_int_equal(kl_poly_stride(rem, "threadIdx.y", NULL), KL_STRIDE_ABSENT);
    assert_true(kl_poly_depends(rem, "threadIdx")); /* a builtin alone: any of its fields */
    assert_false(kl_poly_depends(rem, "blockIdx"));
    /* through a __device__ helper returning a % */
    const kl_poly *lane = poly_of(f, "lane");
    assert_true(lane->opaque);
    assert_true(kl_poly_depends(lane, "threadIdx.x"));
    /* a load reads its pointer and its index; the cast passes */
    const kl_poly *load = poly_of(f, "load");
    assert_true(load->opaque);
    assert_true(kl_poly_depends(load, "x"));
    assert_true(kl_poly_depends(load, "threadIdx.x"));
    /* a local assigned twice is a name of its own: 4*moved, not 4*threadIdx.x + 4 */
    const kl_poly *via = poly_of(f, "via");
    assert_false(via->opaque);
    assert_int_equal(kl_poly_stride(via, "moved", NULL), KL_STRIDE_CONST);
    assert_false(kl_poly_depends(via, "threadIdx.x"));
}

static void poly_grid_index_forms(void **state)
{
    fixture *f = *state;
    kl_grid_index g;
    assert_true(kl_poly_grid_index(poly_of(f, "g_dim"), &g));
    assert_int_equal(g.coef, 1);
    assert_string_equal(g.sym, "blockDim.x");
    /* a macro's value, and a constant expression of it */
    assert_true(kl_poly_grid_index(poly_of(f, "g_const"), &g));
    assert_int_equal(g.coef, 256);
    assert_null(g.sym);
    assert_int_equal(kl_poly_grid_multiple(poly_of(f, "s_const"), &g), 1);
    assert_int_equal(kl_poly_grid_multiple(poly_of(f, "s_other"), &g), 0);
    assert_int_equal(kl_poly_grid_multiple(poly_of(f, "s_two"), &g), 0);
    assert_true(kl_poly_grid_index(poly_of(f, "g_half"), &g));
    assert_int_equal(g.coef, 128);
    /* a template parameter, the addends in another order */
    assert_true(kl_poly_grid_index(poly_of(f, "g_tmpl"), &g));
    assert_int_equal(g.coef, 1);
    assert_string_equal(g.sym, "W");
    /* an invariant macro seen through: TILE is 2*blockDim.x here, "TILE" in the affine form */
    assert_true(kl_poly_grid_index(poly_of(f, "g_tile"), &g));
    assert_int_equal(g.coef, 2);
    assert_string_equal(g.sym, "blockDim.x");
    assert_int_equal(kl_poly_grid_multiple(poly_of(f, "s_two"), &g), 1);
    kl_affine a;
    assert_int_equal(kl_affine_of(f->ax, kl_ast_local_init(f->src, f->fn, "g_tile"), &a), KL_OK);
    assert_string_equal(kl_affine_coef(&a, "blockIdx.x"), "TILE");
    kl_affine_release(&a);
    assert_true(kl_poly_grid_index(poly_of(f, "g_pair"), &g));
    assert_int_equal(g.coef, 2);
    assert_int_equal(kl_poly_grid_multiple(poly_of(f, "s_two"), &g), 1);
    /* not the global thread index */
    assert_false(kl_poly_grid_index(poly_of(f, "no_dimy"), &g));
    assert_false(kl_poly_grid_index(poly_of(f, "no_extra"), &g));
    assert_false(kl_poly_grid_index(poly_of(f, "rem"), &g));
}

static void poly_sums(void **state)
{
    fixture *f = *state;
    /* (blockIdx.x*blockDim.x + threadIdx.x + 1) - 1 is the global thread index again */
    const kl_poly *one = poly_of(f, "no_extra");
    const kl_poly *dim = poly_of(f, "g_dim");
    const kl_poly *d = kl_affine_poly_add(f->ax, one, dim, -1);
    assert_non_null(d);
    assert_int_equal(d->n, 1);
    assert_int_equal(d->m[0].nf, 0);
    assert_int_equal(d->m[0].coef, 1);
    const kl_poly *s = kl_affine_poly_add(f->ax, dim, poly_of(f, "rem"), 1);
    assert_true(s->opaque);
    assert_true(kl_poly_depends(s, "n"));
    assert_true(kl_poly_depends(s, "blockDim.x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(poly_strides_along_each_index, setup, teardown),
        cmocka_unit_test_setup_teardown(poly_products_of_indices, setup, teardown),
        cmocka_unit_test_setup_teardown(poly_opaque_keeps_what_it_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(poly_grid_index_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(poly_sums, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
