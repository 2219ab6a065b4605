/* src/syntax: parsing CUDA files and the model over the tree (tests/data/cuda/ files),
 * and bad input of every kind (generated here, at run time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

/* ---- helpers ---------------------------------------------------------------------------- */

typedef struct parsed {
    kl_source *src;
    kl_model *m;
    const char *text;
    size_t len;
} parsed;

static char *data_path(const char *name)
{
    const char *dir = getenv("KL_TEST_DATA");
    assert_non_null(dir);
    char *cuda = kl_path_join(dir, "cuda");
    char *p = kl_path_join(cuda, name);
    free(cuda);
    return p;
}

/* Parse tests/data/cuda/<name>; every corpus file must parse completely. */
static parsed load(const char *name)
{
    parsed p = {0};
    kl_error err = {0};
    char *path = data_path(name);
    kl_status st = kl_source_parse_file(path, &p.src, &err);
    if (st != KL_OK) fail_msg("%s: %s", path, err.message);
    free(path);
    if (kl_source_partial(p.src)) {
        kl_span w;
        char msg[256];
        kl_source_error(p.src, 0, &w, msg, sizeof msg);
        fail_msg("%s:%u:%u: %s", name, w.line, w.column, msg);
    }
    assert_int_equal(kl_model_build(p.src, &p.m, &err), KL_OK);
    p.text = kl_source_text(p.src, &p.len);
    return p;
}

static parsed load_text(const char *text, size_t len)
{
    parsed p = {0};
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("<test>", text, len, &p.src, &err), KL_OK);
    assert_int_equal(kl_model_build(p.src, &p.m, &err), KL_OK);
    p.text = kl_source_text(p.src, &p.len);
    return p;
}

static void unload(parsed *p)
{
    kl_model_free(p->m);
    kl_source_free(p->src);
}

/* The span's text equals s. */
static void assert_span_text(const parsed *p, kl_span span, const char *s)
{
    char *t = kl_source_slice(p->src, span);
    assert_non_null(t);
    if (strcmp(t, s) != 0) fail_msg("span %u..%u is '%s', expected '%s'", span.start, span.end, t, s);
    free(t);
}

/* The span starts at the first occurrence of `needle` (after `after`, if given), and its
 * line:column is that offset's. */
static void assert_span_at(const parsed *p, kl_span span, const char *after, const char *needle)
{
    const char *from = after ? strstr(p->text, after) : p->text;
    assert_non_null(from);
    const char *at = strstr(from, needle);
    assert_non_null(at);
    assert_int_equal(span.start, (uint32_t)(at - p->text));
    unsigned line, col;
    kl_text_position(p->text, p->len, span.start, &line, &col);
    assert_int_equal(span.line, line);
    assert_int_equal(span.column, col);
}

/* The text is s, and its span slices s back out of the file. */
static void check_text(const parsed *p, kl_text t, const char *s)
{
    assert_non_null(t.text);
    assert_string_equal(t.text, s);
    assert_span_text(p, t.span, s);
}

static int fn_index(const parsed *p, const char *name, kl_function_kind kind)
{
    int i = kl_model_find_function(p->m, name, kind);
    if (i < 0) fail_msg("no %s function '%s'", kl_function_kind_name(kind), name);
    return i;
}

static const kl_function *fn(const parsed *p, const char *name, kl_function_kind kind)
{
    unsigned n;
    return &kl_model_functions(p->m, &n)[fn_index(p, name, kind)];
}

static unsigned count_kind(const parsed *p, kl_function_kind kind)
{
    unsigned n, c = 0;
    const kl_function *f = kl_model_functions(p->m, &n);
    for (unsigned i = 0; i < n; i++) c += f[i].kind == kind;
    return c;
}

/* Uses of a kind (and a name, if given) in function fi (-2: anywhere). */
static unsigned count_uses(const parsed *p, int fi, kl_use_kind kind, const char *name)
{
    unsigned n, c = 0;
    const kl_use *u = kl_model_uses(p->m, &n);
    for (unsigned i = 0; i < n; i++)
        if (u[i].kind == kind && (fi == -2 || u[i].function == fi) && (!name || !strcmp(u[i].name, name))) c++;
    return c;
}

/* The features of function fi as JSON, and one integer / boolean of it. */
static json_t *features(const parsed *p, int fi)
{
    json_t *f = kl_model_features(p->m, (unsigned)fi);
    assert_non_null(f);
    return f;
}
static long long feat_int(json_t *f, const char *key)
{
    json_t *v = json_object_get(f, key);
    if (!json_is_integer(v)) fail_msg("feature %s is not an integer", key);
    return (long long)json_integer_value(v);
}
static bool feat_bool(json_t *f, const char *key)
{
    json_t *v = json_object_get(f, key);
    if (!json_is_boolean(v)) fail_msg("feature %s is not a boolean", key);
    return json_is_true(v);
}

/* Every text and span of the model slices back to what it claims; loops, launches and
 * functions have the shape their spans say. Run on every corpus file. */
static void check_consistency(const parsed *p)
{
    unsigned n;
    const kl_function *fns = kl_model_functions(p->m, &n);
    unsigned nfn = n;
    for (unsigned i = 0; i < nfn; i++) {
        const kl_function *f = &fns[i];
        assert_span_text(p, f->name_span, f->name);
        assert_true(f->span.start <= f->name_span.start && f->name_span.end <= f->body_span.start);
        assert_int_equal(p->text[f->body_span.start], '{');
        assert_int_equal(p->text[f->body_span.end - 1], '}');
        for (unsigned k = 0; k < f->nlaunch_bounds; k++) check_text(p, f->launch_bounds[k], f->launch_bounds[k].text);
        if (f->nlaunch_bounds) {
            char *lb = kl_source_slice(p->src, f->launch_bounds_span);
            assert_true(kl_str_starts(lb, "__launch_bounds__"));
            free(lb);
        }
        for (unsigned k = 0; k < f->nparams; k++) {
            char *t = kl_source_slice(p->src, f->params[k].span);
            assert_non_null(strstr(t, f->params[k].name));
            free(t);
        }
    }
    const kl_launch *ls = kl_model_launches(p->m, &n);
    for (unsigned i = 0; i < n; i++) {
        char *c = kl_source_slice(p->src, ls[i].config_span);
        assert_true(kl_str_starts(c, "<<<") && kl_str_ends(c, ">>>"));
        free(c);
        char *whole = kl_source_slice(p->src, ls[i].span);
        assert_true(kl_str_starts(whole, ls[i].kernel));
        assert_true(kl_str_ends(whole, ")"));
        free(whole);
        const kl_text *cfg[4] = {&ls[i].grid, &ls[i].block, &ls[i].smem, &ls[i].stream};
        for (unsigned k = 0; k < 4; k++)
            if (cfg[k]->text) check_text(p, *cfg[k], cfg[k]->text);
        assert_non_null(ls[i].grid.text);
        assert_non_null(ls[i].block.text);
        for (unsigned k = 0; k < ls[i].nargs; k++) check_text(p, ls[i].args[k], ls[i].args[k].text);
        for (unsigned k = 0; k < ls[i].ntemplate_args; k++)
            check_text(p, ls[i].template_args[k], ls[i].template_args[k].text);
        /* the raw tree gives the call back from its span */
        TSNode node;
        assert_true(kl_source_node_at(p->src, ls[i].span, &node));
        assert_string_equal(ts_node_type(node), "call_expression");
    }
    const kl_loop *lp = kl_model_loops(p->m, &n);
    static const char *const keyword[] = {"for", "while", "do", "for"};
    for (unsigned i = 0; i < n; i++) {
        char *t = kl_source_slice(p->src, lp[i].span);
        assert_true(kl_str_starts(t, keyword[lp[i].kind]));
        free(t);
        if (lp[i].init.text) check_text(p, lp[i].init, lp[i].init.text);
        if (lp[i].cond.text) check_text(p, lp[i].cond, lp[i].cond.text);
        if (lp[i].step.text) check_text(p, lp[i].step, lp[i].step.text);
        if (lp[i].parent >= 0) {
            assert_true((unsigned)lp[i].parent < i);
            assert_int_equal(lp[i].depth, lp[lp[i].parent].depth + 1);
            assert_true(lp[lp[i].parent].span.start < lp[i].span.start && lp[i].span.end <= lp[lp[i].parent].span.end);
        } else {
            assert_int_equal(lp[i].depth, 1);
        }
        assert_true(lp[i].function >= 0 && (unsigned)lp[i].function < nfn);
        const kl_function *f = &fns[lp[i].function];
        assert_true(f->body_span.start < lp[i].span.start && lp[i].span.end <= f->body_span.end);
    }
    const kl_access *ac = kl_model_accesses(p->m, &n);
    for (unsigned i = 0; i < n; i++) {
        check_text(p, ac[i].base, ac[i].base.text);
        assert_true(ac[i].nindices >= 1);
        for (unsigned k = 0; k < ac[i].nindices; k++) check_text(p, ac[i].indices[k], ac[i].indices[k].text);
        char *t = kl_source_slice(p->src, ac[i].span);
        assert_true(kl_str_starts(t, ac[i].base.text) && kl_str_ends(t, "]"));
        free(t);
        if (ac[i].loop >= 0) {
            const kl_loop *l = &lp[ac[i].loop];
            assert_true(l->span.start <= ac[i].span.start && ac[i].span.end <= l->span.end);
        }
    }
    const kl_shared_decl *sh = kl_model_shared(p->m, &n);
    for (unsigned i = 0; i < n; i++) {
        assert_span_text(p, sh[i].name_span, sh[i].name);
        for (unsigned k = 0; k < sh[i].ndims; k++) check_text(p, sh[i].dims[k], sh[i].dims[k].text);
        char *t = kl_source_slice(p->src, sh[i].span);
        assert_non_null(strstr(t, "__shared__"));
        free(t);
    }
    const kl_pragma *pg = kl_model_pragmas(p->m, &n);
    for (unsigned i = 0; i < n; i++) {
        check_text(p, pg[i].text, pg[i].text.text);
        assert_true(kl_str_starts(pg[i].text.text, "#pragma"));
        if (pg[i].loop >= 0) assert_true(lp[pg[i].loop].span.start > pg[i].text.span.end);
    }
    /* the JSON document exists, and survives a round trip through text */
    json_t *doc = kl_model_json(p->m);
    assert_non_null(doc);
    char *s = json_dumps(doc, 0);
    assert_non_null(s);
    json_t *back = json_loads(s, 0, NULL);
    assert_non_null(back);
    assert_true(json_equal(doc, back));
    assert_int_equal(json_array_size(json_object_get(back, "functions")), nfn);
    json_decref(back);
    free(s);
    json_decref(doc);
}

/* ---- the corpus -------------------------------------------------------------------------- */

static void vector_add(void **state)
{
    (void)state;
    parsed p = load("vector_add.cu");
    check_consistency(&p);
    assert_int_equal(count_kind(&p, KL_FUNCTION_KERNEL), 1);
    int k = fn_index(&p, "vector_add", KL_FUNCTION_KERNEL);
    const kl_function *f = fn(&p, "vector_add", KL_FUNCTION_KERNEL);
    assert_span_at(&p, f->span, NULL, "__global__ void vector_add");
    assert_int_equal(f->nparams, 4);
    assert_string_equal(f->params[0].name, "a");
    assert_string_equal(f->params[0].elem_type, "float");
    assert_string_equal(f->params[0].type, "const float *");
    assert_true(f->params[0].is_const);
    assert_int_equal(f->params[0].pointer_depth, 1);
    assert_false(f->params[2].is_const);
    assert_int_equal(f->params[3].pointer_depth, 0);
    assert_int_equal(f->nlaunch_bounds, 0);
    assert_int_equal(f->index_dims, 1);

    int li = kl_model_launch_function(p.m);
    assert_true(li >= 0);
    unsigned n;
    const kl_function *fns = kl_model_functions(p.m, &n);
    assert_string_equal(fns[li].name, "launch");
    assert_true(fns[li].is_extern_c);
    assert_int_equal(fns[li].kind, KL_FUNCTION_HOST);
    assert_int_equal(fns[li].nparams, 5);
    assert_string_equal(fns[li].params[4].elem_type, "cudaStream_t");

    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(n, 1);
    assert_string_equal(l->kernel, "vector_add");
    assert_int_equal(l->kernel_function, k);
    assert_int_equal(l->function, li);
    check_text(&p, l->grid, "grid");
    check_text(&p, l->block, "block");
    check_text(&p, l->smem, "0");
    check_text(&p, l->stream, "stream");
    assert_span_text(&p, l->config_span, "<<<grid, block, 0, stream>>>");
    assert_int_equal(l->nargs, 4);
    check_text(&p, l->args[3], "n");

    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(n, 3);
    /* c[i] = a[i] + b[i]: the write comes first in the text */
    check_text(&p, a[0].base, "c");
    check_text(&p, a[0].indices[0], "i");
    assert_int_equal(a[0].mode, KL_ACCESS_WRITE);
    assert_int_equal(a[0].param, 2);
    assert_int_equal(a[1].mode, KL_ACCESS_READ);
    assert_int_equal(a[1].param, 0);
    assert_int_equal(a[0].loop, -1);
    assert_int_equal(a[0].function, k);
    unload(&p);
}

static void grid_stride_loop(void **state)
{
    (void)state;
    parsed p = load("grid_stride_saxpy.cu");
    check_consistency(&p);
    const kl_function *f = fn(&p, "saxpy", KL_FUNCTION_KERNEL);
    assert_string_equal(f->params[0].elem_type, "size_t");
    assert_true(f->params[2].is_restrict && f->params[2].is_const);
    assert_true(f->params[3].is_restrict && !f->params[3].is_const);
    unsigned n;
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, 1);
    assert_int_equal(lp->kind, KL_LOOP_FOR);
    assert_string_equal(lp->var, "i");
    check_text(&p, lp->init, "size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x");
    check_text(&p, lp->cond, "i < n");
    check_text(&p, lp->step, "i += (size_t)gridDim.x * blockDim.x");
    assert_true(lp->grid_stride);
    assert_int_equal(lp->depth, 1);
    assert_int_equal(lp->parent, -1);
    json_t *ft = features(&p, fn_index(&p, "saxpy", KL_FUNCTION_KERNEL));
    assert_true(feat_bool(ft, "has_grid_stride_loop"));
    assert_int_equal(feat_int(ft, "max_loop_depth"), 1);
    assert_int_equal(feat_int(ft, "restrict_pointer_params"), 2);
    assert_int_equal(feat_int(ft, "accesses_in_loops"), 3);
    json_decref(ft);
    const kl_launch *l = kl_model_launches(p.m, &n);
    check_text(&p, l->grid, "sms * 4");
    check_text(&p, l->args[0], "(size_t)n");
    unload(&p);
}

static void templates_and_helpers(void **state)
{
    (void)state;
    parsed p = load("template_reduce.cu");
    check_consistency(&p);
    const kl_function *k = fn(&p, "block_sum", KL_FUNCTION_KERNEL);
    assert_true(k->is_template);
    assert_int_equal(k->ntparams, 2);
    assert_string_equal(k->tparams[0].name, "BLOCK");
    assert_string_equal(k->tparams[0].kind, "int");
    assert_null(k->tparams[0].default_value);
    assert_string_equal(k->tparams[1].name, "T");
    assert_string_equal(k->tparams[1].kind, "typename");
    assert_string_equal(k->tparams[1].default_value, "float");
    assert_span_at(&p, k->span, "warp_sum(T v)", "template <int BLOCK");
    assert_int_equal(k->nlaunch_bounds, 1);
    check_text(&p, k->launch_bounds[0], "BLOCK");
    assert_span_text(&p, k->launch_bounds_span, "__launch_bounds__(BLOCK)");
    assert_string_equal(k->params[0].elem_type, "T");

    const kl_function *h = fn(&p, "warp_sum", KL_FUNCTION_DEVICE);
    assert_true(h->is_forceinline);
    assert_int_equal(h->ntparams, 1);

    unsigned n;
    const kl_shared_decl *s = kl_model_shared(p.m, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s->name, "partial");
    assert_string_equal(s->elem_type, "T");
    assert_int_equal(s->ndims, 1);
    check_text(&p, s->dims[0], "BLOCK / 32");
    assert_false(s->is_extern);

    /* the helper's loop carries the unroll pragma */
    const kl_loop *lp = kl_model_loops(p.m, &n);
    int hi = fn_index(&p, "warp_sum", KL_FUNCTION_DEVICE);
    unsigned found = 0;
    for (unsigned i = 0; i < n; i++)
        if (lp[i].function == hi) {
            found++;
            assert_true(lp[i].unroll);
            assert_null(lp[i].unroll_arg);
        }
    assert_int_equal(found, 1);

    /* the kernel's features include its helper's shuffles */
    int ki = fn_index(&p, "block_sum", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, ki, KL_USE_SHUFFLE, NULL), 0);
    assert_int_equal(count_uses(&p, ki, KL_USE_CALL, "warp_sum"), 2);
    json_t *ft = features(&p, ki);
    assert_true(feat_bool(ft, "uses_shuffle"));
    assert_true(feat_bool(ft, "uses_shared"));
    assert_true(feat_bool(ft, "uses_barrier"));
    assert_true(feat_bool(ft, "uses_atomics"));
    assert_true(feat_bool(ft, "has_launch_bounds"));
    assert_int_equal(feat_int(ft, "template_params"), 2);
    json_t *calls = json_object_get(ft, "calls");
    assert_int_equal(json_array_size(calls), 1);
    assert_string_equal(json_string_value(json_array_get(calls, 0)), "warp_sum");
    json_decref(ft);

    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(l->ntemplate_args, 2);
    check_text(&p, l->template_args[0], "256");
    check_text(&p, l->template_args[1], "float");
    assert_int_equal(l->kernel_function, ki);
    unload(&p);
}

static void launch_bounds(void **state)
{
    (void)state;
    parsed p = load("launch_bounds.cu");
    check_consistency(&p);
    const kl_function *a = fn(&p, "scale", KL_FUNCTION_KERNEL);
    assert_int_equal(a->nlaunch_bounds, 2);
    check_text(&p, a->launch_bounds[0], "256");
    check_text(&p, a->launch_bounds[1], "2");
    assert_span_text(&p, a->launch_bounds_span, "__launch_bounds__(256, 2)");
    const kl_function *b = fn(&p, "offset", KL_FUNCTION_KERNEL);
    assert_int_equal(b->nlaunch_bounds, 2);
    check_text(&p, b->launch_bounds[0], "THREADS");
    check_text(&p, b->launch_bounds[1], "MIN_BLOCKS");
    json_t *ft = features(&p, fn_index(&p, "offset", KL_FUNCTION_KERNEL));
    assert_string_equal(json_string_value(json_object_get(ft, "launch_bounds_max_threads")), "THREADS");
    assert_string_equal(json_string_value(json_object_get(ft, "launch_bounds_min_blocks")), "MIN_BLOCKS");
    json_decref(ft);
    unsigned n;
    kl_model_launches(p.m, &n);
    assert_int_equal(n, 2);
    unload(&p);
}

static void macros(void **state)
{
    (void)state;
    parsed p = load("macros.cu");
    check_consistency(&p);
    const kl_function *k = fn(&p, "transpose_naive", KL_FUNCTION_KERNEL);
    assert_int_equal(k->index_dims, 2); /* blockIdx.y */
    unsigned n;
    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(n, 2);
    check_text(&p, a[0].indices[0], "IDX(c, r, rows)");
    assert_int_equal(a[0].mode, KL_ACCESS_WRITE);
    check_text(&p, a[1].indices[0], "IDX(r, c, cols)");
    const kl_launch *l = kl_model_launches(p.m, &n);
    check_text(&p, l->block, "TILE");
    /* CUDA_CHECK(...) is a call to a macro, not a function of the file */
    assert_int_equal(count_uses(&p, -2, KL_USE_CALL, NULL), 0);
    unload(&p);
}

static void preprocessor_conditionals(void **state)
{
    (void)state;
    parsed p = load("preproc_conditionals.cu");
    check_consistency(&p);
    unsigned n;
    const kl_function *f = kl_model_functions(p.m, &n);
    int first = -1, second = -1;
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(f[i].name, "activate")) {
            if (first < 0) first = (int)i;
            else second = (int)i;
        }
    assert_true(first >= 0 && second > first);
    assert_string_equal(f[first].guard, "defined(USE_FAST_MATH)");
    assert_string_equal(f[second].guard, "!(defined(USE_FAST_MATH))");
    assert_int_equal(count_uses(&p, first, KL_USE_MATH_INTRINSIC, "__expf"), 1);
    assert_int_equal(count_uses(&p, second, KL_USE_MATH_INTRINSIC, NULL), 0);
    assert_string_equal(fn(&p, "clamp_hi", KL_FUNCTION_DEVICE)->guard, "defined(WITH_CLAMP)");
    assert_null(f[kl_model_launch_function(p.m)].guard);
    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(l->kernel_function, first);
    unload(&p);
}

static void inline_ptx(void **state)
{
    (void)state;
    parsed p = load("inline_ptx.cu");
    check_consistency(&p);
    int lane = fn_index(&p, "lane_id", KL_FUNCTION_DEVICE);
    int ld = fn_index(&p, "load_nc", KL_FUNCTION_DEVICE);
    int k = fn_index(&p, "copy_async", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, lane, KL_USE_ASM, "mov.u32"), 1);
    assert_int_equal(count_uses(&p, ld, KL_USE_ASM, "ld.global.nc.f32"), 1);
    assert_int_equal(count_uses(&p, ld, KL_USE_LOAD_INTRINSIC, "ld.global.nc.f32"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_ASM, NULL), 2);
    assert_int_equal(count_uses(&p, k, KL_USE_ASYNC_COPY, "cp.async.cg.shared.global"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_ASYNC_COPY, "cp.async.commit_group"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_ASYNC_COPY, "cp.async.wait_group"), 1);
    /* the asm use spans the whole statement */
    unsigned n;
    const kl_use *u = kl_model_uses(p.m, &n);
    for (unsigned i = 0; i < n; i++)
        if (u[i].kind == KL_USE_ASM) {
            char *t = kl_source_slice(p.src, u[i].span);
            assert_true(kl_str_starts(t, "asm"));
            free(t);
        }
    json_t *ft = features(&p, k);
    assert_true(feat_bool(ft, "uses_cp_async"));
    assert_true(feat_bool(ft, "uses_asm"));
    assert_true(feat_bool(ft, "uses_ldg")); /* through load_nc */
    assert_true(feat_bool(ft, "uses_vector_loads"));
    json_decref(ft);
    unload(&p);
}

static void vector_types(void **state)
{
    (void)state;
    parsed p = load("vector_types.cu");
    check_consistency(&p);
    int s4 = fn_index(&p, "scale4", KL_FUNCTION_KERNEL);
    /* float4 in two casts, one declaration and make_float4 */
    assert_int_equal(count_uses(&p, s4, KL_USE_VECTOR_TYPE, "float4"), 4);
    unsigned n, pointers = 0;
    const kl_use *u = kl_model_uses(p.m, &n);
    for (unsigned i = 0; i < n; i++)
        if (u[i].function == s4 && u[i].kind == KL_USE_VECTOR_TYPE && u[i].vector_pointer) pointers++;
    assert_int_equal(pointers, 2);
    int h2 = fn_index(&p, "add_half2", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, h2, KL_USE_VECTOR_TYPE, "half2"), 3);
    assert_int_equal(count_uses(&p, h2, KL_USE_MATH_INTRINSIC, "__hadd2"), 1);
    int bf = fn_index(&p, "mul_bf162", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, bf, KL_USE_VECTOR_TYPE, "__nv_bfloat162"), 2);
    json_t *ft = features(&p, s4);
    assert_true(feat_bool(ft, "uses_vector_types"));
    assert_true(feat_bool(ft, "uses_vector_loads"));
    json_decref(ft);
    /* a subscript of a cast keeps the cast as its base */
    const kl_access *a = kl_model_accesses(p.m, &n);
    check_text(&p, a[0].base, "reinterpret_cast<const float4 *>(x)");
    assert_int_equal(a[0].param, -1);
    unload(&p);
}

static void host_lambdas(void **state)
{
    (void)state;
    parsed p = load("host_lambda.cu");
    check_consistency(&p);
    unsigned n;
    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(n, 2);
    int host = kl_model_launch_function(p.m);
    for (unsigned i = 0; i < n; i++) {
        assert_true(l[i].in_lambda);
        assert_int_equal(l[i].function, host);
        assert_int_equal(l[i].kernel_function, fn_index(&p, "fill", KL_FUNCTION_KERNEL));
    }
    check_text(&p, l[0].template_args[0], "128");
    check_text(&p, l[0].grid, "dim3((n + 127) / 128)");
    check_text(&p, l[0].block, "dim3(128)");
    check_text(&p, l[1].template_args[0], "64");
    check_text(&p, l[1].args[1], "1.0f * r");
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, 1);
    assert_true(lp->in_lambda);
    assert_int_equal(lp->function, host);
    unload(&p);
}

static void dynamic_shared(void **state)
{
    (void)state;
    parsed p = load("dynamic_smem.cu");
    check_consistency(&p);
    unsigned n;
    const kl_shared_decl *s = kl_model_shared(p.m, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s->name, "smem");
    assert_string_equal(s->elem_type, "unsigned char");
    assert_true(s->is_extern);
    assert_string_equal(s->align, "16");
    assert_int_equal(s->ndims, 1);
    assert_string_equal(s->dims[0].text, "");
    assert_int_equal(p.text[s->dims[0].span.start], ']');
    assert_span_at(&p, s->span, "void row_stats(", "extern __shared__");
    const kl_launch *l = kl_model_launches(p.m, &n);
    check_text(&p, l->smem, "smem");
    json_t *ft = features(&p, fn_index(&p, "row_stats", KL_FUNCTION_KERNEL));
    assert_true(feat_bool(ft, "uses_dynamic_shared"));
    assert_int_equal(feat_int(ft, "barriers"), 2);
    json_decref(ft);
    /* vals[threadIdx.x] += vals[threadIdx.x + s]: a read-write, then a read */
    const kl_access *a = kl_model_accesses(p.m, &n);
    unsigned rw = 0;
    for (unsigned i = 0; i < n; i++)
        if (a[i].mode == KL_ACCESS_READ_WRITE) {
            rw++;
            check_text(&p, a[i].base, "vals");
            check_text(&p, a[i + 1].indices[0], "threadIdx.x + s");
        }
    assert_int_equal(rw, 1);
    unload(&p);
}

static void tiled_matmul_2d(void **state)
{
    (void)state;
    parsed p = load("matmul_tiled_2d.cu");
    check_consistency(&p);
    int k = fn_index(&p, "matmul", KL_FUNCTION_KERNEL);
    assert_int_equal(fn(&p, "matmul", KL_FUNCTION_KERNEL)->index_dims, 2);
    unsigned n;
    const kl_shared_decl *s = kl_model_shared(p.m, &n);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].name, "As");
    assert_int_equal(s[0].ndims, 2);
    check_text(&p, s[0].dims[0], "TILE");
    check_text(&p, s[0].dims[1], "TILE + 1");
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, 2);
    assert_int_equal(lp[1].parent, 0);
    assert_int_equal(lp[1].depth, 2);
    assert_true(lp[1].unroll);
    assert_false(lp[0].unroll);
    const kl_access *a = kl_model_accesses(p.m, &n);
    /* As[threadIdx.y][threadIdx.x] = … : one access, two indices, a write of shared As */
    check_text(&p, a[0].base, "As");
    assert_int_equal(a[0].nindices, 2);
    check_text(&p, a[0].indices[0], "threadIdx.y");
    check_text(&p, a[0].indices[1], "threadIdx.x");
    assert_int_equal(a[0].mode, KL_ACCESS_WRITE);
    assert_int_equal(a[0].shared, 0);
    assert_int_equal(a[0].loop, 0);
    assert_span_text(&p, a[0].span, "As[threadIdx.y][threadIdx.x]");
    unsigned inner = 0;
    for (unsigned i = 0; i < n; i++)
        if (a[i].loop == 1) {
            inner++;
            assert_true(a[i].shared >= 0);
        }
    assert_int_equal(inner, 2);
    json_t *ft = features(&p, k);
    assert_int_equal(feat_int(ft, "max_loop_depth"), 2);
    assert_true(feat_bool(ft, "has_unroll_pragma"));
    assert_int_equal(feat_int(ft, "shared_decls"), 2);
    assert_int_equal(feat_int(ft, "index_dims"), 2);
    json_decref(ft);
    const kl_launch *l = kl_model_launches(p.m, &n);
    check_text(&p, l->grid, "grid");
    check_text(&p, l->stream, "stream");
    unload(&p);
}

static void warp_shuffles(void **state)
{
    (void)state;
    parsed p = load("warp_shuffle.cu");
    check_consistency(&p);
    int k = fn_index(&p, "row_max", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, k, KL_USE_SHUFFLE, "__shfl_xor_sync"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_SHUFFLE, "__shfl_sync"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_WARP_VOTE, NULL), 2);
    assert_int_equal(fn(&p, "row_max", KL_FUNCTION_KERNEL)->nreturns, 1);
    /* the shuffle sits in the second loop */
    unsigned n;
    const kl_use *u = kl_model_uses(p.m, &n);
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(u[i].name, "__shfl_xor_sync")) assert_int_equal(u[i].loop, 1);
    json_t *ft = features(&p, k);
    assert_true(feat_bool(ft, "has_early_return"));
    assert_true(feat_bool(ft, "uses_warp_vote"));
    assert_int_equal(feat_int(ft, "shuffles"), 2);
    json_decref(ft);
    unload(&p);
}

static void wmma(void **state)
{
    (void)state;
    parsed p = load("wmma_gemm.cu");
    check_consistency(&p);
    int k = fn_index(&p, "wmma_gemm", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, k, KL_USE_MMA, "wmma::fragment"), 3);
    assert_int_equal(count_uses(&p, k, KL_USE_MMA, "wmma::mma_sync"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_MMA, "wmma::load_matrix_sync"), 2);
    json_t *ft = features(&p, k);
    assert_true(feat_bool(ft, "uses_mma"));
    json_decref(ft);
    unload(&p);
}

static void cooperative_groups(void **state)
{
    (void)state;
    parsed p = load("cooperative_groups.cu");
    check_consistency(&p);
    int k = fn_index(&p, "group_sum", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, k, KL_USE_BARRIER, "block.sync"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_BARRIER, "cg::sync"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_SHUFFLE, "tile.shfl_down"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_WARP_VOTE, "cg::reduce"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_COOP_GROUPS, "cg::this_thread_block"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_COOP_GROUPS, "cg::tiled_partition"), 1);
    assert_int_equal(count_uses(&p, k, KL_USE_ATOMIC, "atomicAdd"), 1);
    json_t *ft = features(&p, k);
    assert_true(feat_bool(ft, "uses_cooperative_groups"));
    assert_int_equal(feat_int(ft, "barriers"), 2);
    json_decref(ft);
    unload(&p);
}

static void atomics_and_do_while(void **state)
{
    (void)state;
    parsed p = load("atomics_histogram.cu");
    check_consistency(&p);
    int h = fn_index(&p, "histogram", KL_FUNCTION_KERNEL);
    int m = fn_index(&p, "atomic_max_float", KL_FUNCTION_DEVICE);
    assert_int_equal(count_uses(&p, h, KL_USE_ATOMIC, "atomicAdd"), 2);
    assert_int_equal(count_uses(&p, m, KL_USE_ATOMIC, "atomicCAS"), 1);
    unsigned n;
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(lp[0].kind, KL_LOOP_DO);
    assert_int_equal(lp[0].function, m);
    check_text(&p, lp[0].cond, "old != assumed");
    assert_true(lp[2].grid_stride);
    /* &local[data[i]] takes an address; data[i] inside it is a read */
    const kl_access *a = kl_model_accesses(p.m, &n);
    unsigned addr = 0;
    for (unsigned i = 0; i < n; i++)
        if (a[i].mode == KL_ACCESS_ADDRESS && !strcmp(a[i].base.text, "local")) {
            addr++;
            check_text(&p, a[i].indices[0], "data[i]");
            assert_int_equal(a[i].shared, 0);
            assert_int_equal(a[i + 1].mode, KL_ACCESS_READ);
            check_text(&p, a[i + 1].base, "data");
        }
    assert_int_equal(addr, 1);
    json_t *ft = features(&p, h);
    assert_int_equal(feat_int(ft, "atomics"), 3); /* two of its own, one in the helper */
    assert_true(feat_bool(ft, "uses_shared"));
    json_decref(ft);
    unload(&p);
}

static void device_helper_chain(void **state)
{
    (void)state;
    parsed p = load("device_helpers.cu");
    check_consistency(&p);
    const kl_function *cd = fn(&p, "ceil_div", KL_FUNCTION_DEVICE);
    assert_true(cd->is_host && cd->is_device && cd->is_inline);
    assert_true(fn(&p, "store_scaled", KL_FUNCTION_DEVICE)->is_noinline);
    assert_true(fn(&p, "square", KL_FUNCTION_DEVICE)->is_forceinline);
    const kl_function *k = fn(&p, "row_norms", KL_FUNCTION_KERNEL);
    assert_true(k->is_static);
    int ki = fn_index(&p, "row_norms", KL_FUNCTION_KERNEL);
    json_t *ft = features(&p, ki);
    json_t *calls = json_object_get(ft, "calls");
    assert_int_equal(json_array_size(calls), 3);
    bool has_square = false;
    for (size_t i = 0; i < json_array_size(calls); i++)
        if (!strcmp(json_string_value(json_array_get(calls, i)), "square")) has_square = true;
    assert_true(has_square);
    assert_int_equal(feat_int(ft, "loops"), 0); /* the loop is norm2's */
    json_decref(ft);
    /* launch() calls ceil_div in the configuration */
    assert_int_equal(count_uses(&p, kl_model_launch_function(p.m), KL_USE_CALL, "ceil_div"), 1);
    unload(&p);
}

static void while_and_early_return(void **state)
{
    (void)state;
    parsed p = load("while_early_return.cu");
    check_consistency(&p);
    const kl_function *k = fn(&p, "follow_chain", KL_FUNCTION_KERNEL);
    assert_int_equal(k->nreturns, 2);
    unsigned n;
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, 2);
    assert_int_equal(lp[0].kind, KL_LOOP_WHILE);
    check_text(&p, lp[0].cond, "cur >= 0 && steps < max_steps");
    assert_null(lp[0].init.text);
    assert_null(lp[0].step.text);
    assert_int_equal(lp[1].kind, KL_LOOP_DO);
    check_text(&p, lp[1].cond, "sum > 1.0f && ++tries < 8");
    json_t *ft = features(&p, fn_index(&p, "follow_chain", KL_FUNCTION_KERNEL));
    assert_true(feat_bool(ft, "has_while_loop"));
    assert_true(feat_bool(ft, "has_early_return"));
    assert_int_equal(feat_int(ft, "returns"), 2);
    json_decref(ft);
    unload(&p);
}

static void fast_math(void **state)
{
    (void)state;
    parsed p = load("softmax_fast_math.cu");
    check_consistency(&p);
    int s = fn_index(&p, "softmax_rows", KL_FUNCTION_KERNEL);
    int r = fn_index(&p, "rms_scale", KL_FUNCTION_KERNEL);
    assert_int_equal(count_uses(&p, s, KL_USE_MATH_INTRINSIC, "__expf"), 2);
    assert_int_equal(count_uses(&p, s, KL_USE_MATH_INTRINSIC, "__fdividef"), 1);
    assert_int_equal(count_uses(&p, r, KL_USE_MATH_INTRINSIC, "rsqrtf"), 1);
    unsigned n;
    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(n, 2);
    assert_int_equal(l[0].kernel_function, s);
    assert_int_equal(l[1].kernel_function, r);
    json_t *ft = features(&p, r);
    assert_int_equal(feat_int(ft, "shuffles"), 1); /* warp_sum's one, not warp_max's */
    json_decref(ft);
    unload(&p);
}

static void pragmas(void **state)
{
    (void)state;
    parsed p = load("pragmas_nested.cu");
    check_consistency(&p);
    unsigned n, nloops;
    const kl_pragma *pg = kl_model_pragmas(p.m, &n);
    const kl_loop *lp = kl_model_loops(p.m, &nloops);
    assert_int_equal(n, 4);
    assert_string_equal(pg[0].name, "nv_diag_suppress");
    check_text(&p, pg[0].text, "#pragma nv_diag_suppress 177");
    assert_int_equal(pg[0].loop, -1);
    assert_int_equal(pg[0].function, -1);
    assert_string_equal(pg[1].name, "unroll");
    assert_null(pg[1].arg);
    assert_int_equal(pg[1].loop, 0);
    /* the inner loop is the unbraced body of the outer one, behind its own pragma */
    assert_string_equal(pg[2].arg, "5");
    assert_int_equal(pg[2].loop, 1);
    assert_int_equal(lp[1].parent, 0);
    assert_string_equal(lp[1].unroll_arg, "5");
    /* comments between a pragma and its loop do not detach it */
    assert_string_equal(pg[3].name, "nounroll");
    assert_int_equal(pg[3].loop, 2);
    assert_false(lp[2].unroll);
    assert_int_equal(lp[2].npragmas, 1);
    assert_int_equal(pg[3].function, fn_index(&p, "stencil", KL_FUNCTION_KERNEL));
    unload(&p);
}

static void namespaces_and_default_stream(void **state)
{
    (void)state;
    parsed p = load("multi_stream.cu");
    check_consistency(&p);
    unsigned n;
    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(n, 3);
    assert_string_equal(l[0].kernel, "axpy");
    assert_string_equal(l[1].kernel, "ops::zero");
    assert_int_equal(l[1].kernel_function, fn_index(&p, "zero", KL_FUNCTION_KERNEL));
    assert_null(l[1].smem.text);
    assert_null(l[1].stream.text);
    const kl_function *run = fn(&p, "run_axpy", KL_FUNCTION_HOST);
    assert_true(run->is_static && run->is_template);
    assert_int_equal(l[0].function, fn_index(&p, "run_axpy", KL_FUNCTION_HOST));
    check_text(&p, l[0].template_args[0], "T");
    unload(&p);
}

/* Every .cu of the corpus parses completely and passes the consistency checks. */
static void every_corpus_file(void **state)
{
    (void)state;
    static const char *const files[] = {
        "atomics_histogram.cu", "cooperative_groups.cu", "device_helpers.cu", "dynamic_smem.cu",
        "grid_stride_saxpy.cu", "host_lambda.cu", "inline_ptx.cu", "launch_bounds.cu", "macros.cu",
        "matmul_tiled_2d.cu", "multi_stream.cu", "pragmas_nested.cu", "preproc_conditionals.cu",
        "softmax_fast_math.cu", "template_reduce.cu", "vector_add.cu", "vector_types.cu", "warp_shuffle.cu",
        "while_early_return.cu", "wmma_gemm.cu"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        parsed p = load(files[i]);
        check_consistency(&p);
        /* each file has a launch() and it launches a kernel of the file */
        int li = kl_model_launch_function(p.m);
        assert_true(li >= 0);
        unsigned n, resolved = 0;
        const kl_launch *l = kl_model_launches(p.m, &n);
        assert_true(n >= 1);
        for (unsigned k = 0; k < n; k++) resolved += l[k].kernel_function >= 0;
        assert_int_equal(resolved, n);
        unload(&p);
    }
}

/* ---- the grammar's blind spots ---------------------------------------------------------------- */

static void member_comparisons(void **state)
{
    (void)state;
    /* "threadIdx.x < n)" would be template arguments to the grammar */
    const char *t = "__global__ void k(float *v, int n, int s) {\n"
                    "  if (threadIdx.x < s) v[threadIdx.x] += v[threadIdx.x + s];\n"
                    "  for (int i = threadIdx.x; threadIdx.x < n && i < n; i++) v[i] = 0;\n"
                    "  float w = v[0] < 1 ? 1.f : 2.f;\n"
                    "  auto q = p->x < 2;\n"
                    "}\n";
    parsed p = load_text(t, strlen(t));
    assert_false(kl_source_partial(p.src));
    unsigned n;
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, 1);
    check_text(&p, lp->cond, "threadIdx.x < n && i < n");
    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(a[0].mode, KL_ACCESS_READ_WRITE);
    check_text(&p, a[1].indices[0], "threadIdx.x + s");
    unload(&p);
    /* a real template member call keeps its '<' */
    t = "void f() { auto a = obj.get<int>(); auto b = obj.template get<float>(); }\n";
    p = load_text(t, strlen(t));
    assert_false(kl_source_partial(p.src));
    unload(&p);
}

static void unknown_attributes_and_pragma_in_comment(void **state)
{
    (void)state;
    const char *t = "struct __align__(16) P { float a; };\n"
                    "__global__ void __cluster_dims__(2, 1, 1) k(const __grid_constant__ P p, float *y) {\n"
                    "  __shared__ __align__(8) float s[4];\n"
                    "  /*\n#pragma unroll\n  */\n"
                    "  for (int i = 0; i < 4; i++) s[i] = p.a;\n"
                    "  y[0] = s[0];\n"
                    "}\n";
    parsed p = load_text(t, strlen(t));
    assert_false(kl_source_partial(p.src));
    const kl_function *k = fn(&p, "k", KL_FUNCTION_KERNEL);
    assert_int_equal(k->nparams, 2);
    assert_string_equal(k->params[1].name, "y");
    unsigned n;
    const kl_shared_decl *s = kl_model_shared(p.m, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s->align, "8");
    kl_model_pragmas(p.m, &n);
    assert_int_equal(n, 0); /* the one in the comment is not a pragma */
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_false(lp->unroll);
    unload(&p);
}

static void asm_operands_and_calling_conventions(void **state)
{
    (void)state;
    const char *t = "#include <cupti.h>\n"
                    "static void CUPTIAPI on_buffer(unsigned char **buf, size_t *size) { *size = 0; }\n"
                    "__device__ void ld4(unsigned *r, unsigned addr, float2 &acc) {\n"
                    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
                    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"+f\"(acc.x)\n"
                    "               : \"r\"(addr));\n"
                    "  r[3] = r[0] < 1 ? 0u : r[3];\n"
                    "}\n";
    parsed p = load_text(t, strlen(t));
    if (kl_source_partial(p.src)) {
        kl_span w;
        char msg[256];
        kl_source_error(p.src, 0, &w, msg, sizeof msg);
        fail_msg("%u:%u: %s", w.line, w.column, msg);
    }
    assert_int_equal(fn(&p, "on_buffer", KL_FUNCTION_HOST)->nparams, 2);
    int d = fn_index(&p, "ld4", KL_FUNCTION_DEVICE);
    assert_int_equal(count_uses(&p, d, KL_USE_MMA, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), 1);
    assert_int_equal(count_uses(&p, d, KL_USE_ASM, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), 1);
    /* r[3] = r[0] < 1 ? 0u : r[3]: three accesses; the asm's own operands are not any */
    unsigned n;
    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(n, 3);
    check_text(&p, a[0].indices[0], "3");
    assert_int_equal(a[0].mode, KL_ACCESS_WRITE);
    unload(&p);
}

static void crlf_line_endings(void **state)
{
    (void)state;
    parsed lf = load("matmul_tiled_2d.cu");
    kl_strbuf sb = KL_STRBUF_INIT;
    for (size_t i = 0; i < lf.len; i++) {
        if (lf.text[i] == '\n') kl_strbuf_addc(&sb, '\r');
        kl_strbuf_addc(&sb, lf.text[i]);
    }
    parsed crlf = load_text(kl_strbuf_str(&sb), sb.len);
    assert_false(kl_source_partial(crlf.src));
    check_consistency(&crlf);
    unsigned a, b;
    kl_model_loops(lf.m, &a);
    kl_model_loops(crlf.m, &b);
    assert_int_equal(a, b);
    kl_model_accesses(lf.m, &a);
    kl_model_accesses(crlf.m, &b);
    assert_int_equal(a, b);
    kl_model_pragmas(lf.m, &a);
    kl_model_pragmas(crlf.m, &b);
    assert_int_equal(a, b);
    const kl_pragma *pg = kl_model_pragmas(crlf.m, &b);
    assert_string_equal(pg[0].text.text, "#pragma unroll"); /* no '\r' */
    kl_strbuf_release(&sb);
    unload(&crlf);
    unload(&lf);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void bad_empty(void **state)
{
    (void)state;
    parsed p = load_text("", 0);
    assert_false(kl_source_partial(p.src));
    assert_int_equal(kl_source_error_count(p.src), 0);
    unsigned n;
    assert_null(kl_model_functions(p.m, &n));
    assert_int_equal(n, 0);
    assert_int_equal(kl_model_launch_function(p.m), -1);
    assert_null(kl_model_features(p.m, 0));
    json_t *doc = kl_model_json(p.m);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "functions")), 0);
    json_decref(doc);
    unload(&p);
}

/* A deterministic byte stream (xorshift). */
static void fill_random(unsigned char *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        buf[i] = (unsigned char)(seed >> 24);
    }
}

static void bad_binary_garbage(void **state)
{
    (void)state;
    size_t n = 4096;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    fill_random(buf, n, 42);
    const unsigned char *nul = memchr(buf, 0, n);
    assert_non_null(nul); /* random bytes hold a NUL: refused as not text, with its place */
    unsigned line, col;
    kl_text_position((const char *)buf, n, (size_t)(nul - buf), &line, &col);
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("garbage.bin", (const char *)buf, n, &src, &err), KL_ERR_PARSE);
    assert_null(src);
    char where[64];
    snprintf(where, sizeof where, "garbage.bin:%u:%u:", line, col);
    assert_true(kl_str_starts(err.message, where));
    assert_non_null(strstr(err.message, "NUL"));

    /* without NUL bytes it is "text": parsed, flagged partial, every error described */
    for (size_t i = 0; i < n; i++)
        if (!buf[i]) buf[i] = 0x80;
    parsed p = load_text((const char *)buf, n);
    assert_true(kl_source_partial(p.src));
    assert_true(kl_source_error_count(p.src) >= 1);
    kl_span w;
    char msg[256];
    for (unsigned i = 0; kl_source_error(p.src, i, &w, msg, sizeof msg); i++) {
        assert_true(w.start <= w.end && w.end <= n);
        assert_int_equal(kl_utf8_valid_prefix(msg, strlen(msg)), strlen(msg));
        assert_true(strlen(msg) > 0);
    }
    json_t *doc = kl_model_json(p.m);
    assert_non_null(doc);
    char *s = json_dumps(doc, 0);
    assert_non_null(s);
    free(s);
    json_decref(doc);
    unload(&p);
    free(buf);
}

static void bad_unterminated_comment(void **state)
{
    (void)state;
    const char *t = "__global__ void k(float *x) {\n  x[0] = 1; /* never closed\n  x[1] = 2;\n}\n";
    parsed p = load_text(t, strlen(t));
    assert_true(kl_source_partial(p.src));
    kl_span w;
    char msg[256];
    assert_true(kl_source_error(p.src, 0, &w, msg, sizeof msg));
    assert_non_null(strstr(msg, "unterminated comment"));
    assert_span_at(&p, w, NULL, "/*");
    /* what came before it is still there */
    assert_int_equal(fn_index(&p, "k", KL_FUNCTION_KERNEL), 0);
    unload(&p);
}

static void bad_truncated_kernel(void **state)
{
    (void)state;
    parsed full = load("matmul_tiled_2d.cu");
    const char *cut = strstr(full.text, "__syncthreads();");
    assert_non_null(cut);
    parsed p = load_text(full.text, (size_t)(cut - full.text));
    assert_true(kl_source_partial(p.src));
    kl_span w;
    char msg[256];
    assert_true(kl_source_error(p.src, 0, &w, msg, sizeof msg));
    assert_true(kl_str_starts(msg, "missing") || kl_str_starts(msg, "unexpected"));
    assert_true(w.line >= 1 && w.column >= 1);
    unsigned n;
    kl_model_shared(p.m, &n);
    assert_int_equal(n, 2);
    unload(&p);
    unload(&full);
}

static void bad_nested_braces(void **state)
{
    (void)state;
    enum { DEPTH = 250 }; /* under KL_SOURCE_MAX_BRACKETS with the function's own brace */
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "__global__ void deep(float *x) {");
    for (int i = 0; i < DEPTH; i++) kl_strbuf_addc(&sb, '{');
    kl_strbuf_adds(&sb, "x[0] += 1;");
    for (int i = 0; i < DEPTH; i++) kl_strbuf_addc(&sb, '}');
    kl_strbuf_adds(&sb, "}\n");
    parsed p = load_text(kl_strbuf_str(&sb), sb.len);
    fn_index(&p, "deep", KL_FUNCTION_KERNEL);
    unsigned n;
    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(n, 1);
    assert_span_text(&p, a->span, "x[0]");
    json_t *doc = kl_model_json(p.m);
    assert_non_null(doc);
    json_decref(doc);
    unload(&p);

    /* and at file scope, where they make no sense */
    kl_strbuf_reset(&sb);
    for (int i = 0; i < DEPTH; i++) kl_strbuf_addc(&sb, '{');
    p = load_text(kl_strbuf_str(&sb), sb.len);
    assert_true(kl_source_partial(p.src));
    unload(&p);
    kl_strbuf_release(&sb);
}

static void bad_nested_loops(void **state)
{
    (void)state;
    enum { DEPTH = 250 };
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "__global__ void deep(float *x) {\n");
    for (int i = 0; i < DEPTH; i++) kl_strbuf_adds(&sb, "for (int i = 0; i < 2; i++) {");
    kl_strbuf_adds(&sb, "x[i] += 1;");
    for (int i = 0; i < DEPTH; i++) kl_strbuf_addc(&sb, '}');
    kl_strbuf_adds(&sb, "}\n");
    parsed p = load_text(kl_strbuf_str(&sb), sb.len);
    assert_false(kl_source_partial(p.src));
    unsigned n;
    const kl_loop *lp = kl_model_loops(p.m, &n);
    assert_int_equal(n, DEPTH);
    assert_int_equal(lp[n - 1].depth, DEPTH);
    assert_int_equal(lp[n - 1].parent, DEPTH - 2);
    const kl_access *a = kl_model_accesses(p.m, &n);
    assert_int_equal(a->loop, DEPTH - 1);
    json_t *ft = kl_model_features(p.m, 0);
    assert_int_equal(feat_int(ft, "max_loop_depth"), DEPTH);
    json_decref(ft);
    unload(&p);
    kl_strbuf_release(&sb);
}

/* ---- limits (docs/syntax.md, "Limits") ----------------------------------------------------------- */

/* text repeated n times between head and tail (new string) */
static char *repeat(const char *head, const char *unit, unsigned n, const char *tail, size_t *len)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, head);
    for (unsigned i = 0; i < n; i++) kl_strbuf_adds(&sb, unit);
    kl_strbuf_adds(&sb, tail);
    assert_false(sb.failed);
    return kl_strbuf_detach(&sb, len);
}

/* Inputs that crashed tree-sitter 0.20.7 (a node of more than 65,535 children), overflowed the
 * stack of a recursive walk, or took minutes or gigabytes: each is refused at once, naming the
 * place; the error is KL_ERR_TOO_LARGE. */
static void limits_refuse_what_would_crash(void **state)
{
    (void)state;
    static const struct {
        const char *head, *unit, *tail;
        unsigned n;
        const char *where, *what;
    } cases[] = {
        {"", "(", "", 65535, "t.cu:1:257:", "brackets nested more than 256 deep"},
        {"", "{", "", 70000, "t.cu:1:257:", "brackets nested more than 256 deep"},
        {"", "#if 1\n", "", 100000, "t.cu:65:1:", "#if/#ifdef/#ifndef nested more than 64 deep"},
        {"", "#if 1\n", "__global__ void k() {}\n", 20000, "t.cu:65:1:", "#if/#ifdef/#ifndef nested more than 64 deep"},
        {"", "a[", "", 100000, "t.cu:1:514:", "brackets nested more than 256 deep"},
        {"__global__ void k(int *a) { a[0] = 1", "+1", "; }\n", 100000, "t.cu:1:", "more than 32000 tokens"},
        {"__global__ void k(int *a) { a[0] = 1", "+1", "; }\n", 3000, "t.cu:1:", "nests more than 1000 levels deep"},
        {"__global__ void k(int *a) {", "for (int i = 0; i < 2; i++) ", "a[0] = 1; }\n", 2000, "t.cu:1:",
         "nests more than 1000 levels deep"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len;
        char *text = repeat(cases[k].head, cases[k].unit, cases[k].n, cases[k].tail, &len);
        kl_source *src = NULL;
        kl_error err = {0};
        double t0 = kl_now();
        kl_status st = kl_source_parse_text("t.cu", text, len, &src, &err);
        if (st != KL_ERR_TOO_LARGE || !strstr(err.message, cases[k].what) || !kl_str_starts(err.message, cases[k].where))
            fail_msg("case %zu: status %d, \"%s\"", k, st, err.message);
        assert_null(src);
        assert_true(kl_now() - t0 < 30);
        free(text);
    }
}

/* Just inside the limits, inputs built to make wide ERROR nodes or deep trees parse (with
 * errors, some of them) and free cleanly: the sanitizer build would see a double free. */
static void limits_inside_are_parsed_and_freed(void **state)
{
    (void)state;
    static const struct {
        const char *head, *unit, *tail;
        unsigned n;
    } cases[] = {
        {"((((((((((((((((((((((((((((((((", ";", "", 31000},
        {"{", "a;", "", 15000},
        {"#if 1\n#if 1\n#if 1\n", "}", "", 31000},
        {"", ")", "", 31990},
        {"int x = {", "1,", "};", 15900},
        {"{", "\"", "", 31000},
        {"", "template<", "", 10000},
        {"void f() {", "x(;)", "}", 7900},
        {"__global__ void k(int *a) { a[0] = 1", "+1", "; }\n", 900},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len;
        char *text = repeat(cases[k].head, cases[k].unit, cases[k].n, cases[k].tail, &len);
        kl_source *src = NULL;
        kl_error err = {0};
        if (kl_source_parse_text("t.cu", text, len, &src, &err) != KL_OK) fail_msg("case %zu: %s", k, err.message);
        kl_model *m = NULL;
        assert_int_equal(kl_model_build(src, &m, &err), KL_OK);
        json_decref(kl_model_json(m));
        kl_model_free(m);
        kl_source_free(src);
        free(text);
    }
}

static void bad_invalid_utf8(void **state)
{
    (void)state;
    /* bad bytes in a comment, a string and an identifier */
    const char t[] = "// caf\xc3 \xff\xfe\n"
                     "__global__ void k\xe9(float *x) { x[0] = 1; }\n"
                     "__global__ void g(float *x) { const char *s = \"\xc3\x28\"; x[0] = s[0]; }\n";
    parsed p = load_text(t, sizeof t - 1);
    kl_span w;
    char msg[256];
    for (unsigned i = 0; kl_source_error(p.src, i, &w, msg, sizeof msg); i++)
        assert_int_equal(kl_utf8_valid_prefix(msg, strlen(msg)), strlen(msg));
    fn_index(&p, "g", KL_FUNCTION_KERNEL);
    json_t *doc = kl_model_json(p.m);
    assert_non_null(doc);
    char *s = json_dumps(doc, 0);
    assert_non_null(s);
    assert_int_equal(kl_utf8_valid_prefix(s, strlen(s)), strlen(s));
    free(s);
    json_decref(doc);
    unload(&p);
}

static void bad_directory_and_missing(void **state)
{
    (void)state;
    kl_source *src = NULL;
    kl_error err = {0};
    const char *dir = getenv("KL_TEST_DATA");
    assert_int_equal(kl_source_parse_file(dir, &src, &err), KL_ERR_INVALID);
    assert_null(src);
    assert_non_null(strstr(err.message, dir));
    assert_non_null(strstr(err.message, "directory"));
    char *missing = data_path("no_such_kernel.cu");
    assert_int_equal(kl_source_parse_file(missing, &src, &err), KL_ERR_NOT_FOUND);
    assert_null(src);
    assert_non_null(strstr(err.message, missing));
    free(missing);
}

static void bad_too_large(void **state)
{
    (void)state;
    size_t n = KL_SOURCE_MAX + 1;
    char *big = calloc(n, 1); /* untouched pages: cheap */
    assert_non_null(big);
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("huge.cu", big, n, &src, &err), KL_ERR_TOO_LARGE);
    assert_null(src);
    assert_non_null(strstr(err.message, "huge.cu"));
    free(big);
}

static void bad_ten_megabytes(void **state)
{
    (void)state;
    /* vector_add.cu repeated, each copy with its own names: to just over 10 MiB (refused: more
     * than KL_SOURCE_MAX_TOKENS), and as many copies as stay under the limit (parsed whole) */
    parsed one = load("vector_add.cu");
    kl_strbuf sb = KL_STRBUF_INIT;
    unsigned copies = 0, under = 0;
    size_t under_len = 0;
    while (sb.len < ((size_t)10 << 20)) {
        for (const char *s = one.text; *s;) {
            const char *a = strstr(s, "vector_add"), *b = strstr(s, "launch(");
            const char *next = a && (!b || a < b) ? a : b;
            if (!next) {
                kl_strbuf_adds(&sb, s);
                break;
            }
            kl_strbuf_add(&sb, s, (size_t)(next - s));
            if (next == a) {
                kl_strbuf_addf(&sb, "vector_add_%u", copies);
                s = next + strlen("vector_add");
            } else {
                kl_strbuf_addf(&sb, "launch_%u(", copies);
                s = next + strlen("launch(");
            }
        }
        copies++;
        if (copies == 100) {
            under = copies;
            under_len = sb.len;
        }
    }
    assert_false(sb.failed);
    kl_source *big = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("big.cu", kl_strbuf_str(&sb), sb.len, &big, &err), KL_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "more than 32000 tokens"));
    assert_true(kl_str_starts(err.message, "big.cu:"));
    parsed p = load_text(kl_strbuf_str(&sb), under_len);
    assert_false(kl_source_partial(p.src));
    assert_int_equal(count_kind(&p, KL_FUNCTION_KERNEL), under);
    unsigned n;
    const kl_launch *l = kl_model_launches(p.m, &n);
    assert_int_equal(n, under);
    const kl_function *f = kl_model_functions(p.m, NULL);
    for (unsigned i = 0; i < n; i++) {
        assert_true(l[i].kernel_function >= 0);
        assert_string_equal(f[l[i].kernel_function].name, l[i].kernel);
    }
    kl_model_accesses(p.m, &n);
    assert_int_equal(n, 3 * under);
    /* the last copy's kernel is where its text is */
    char last[64];
    snprintf(last, sizeof last, "vector_add_%u", under - 1);
    const kl_function *lk = &f[fn_index(&p, last, KL_FUNCTION_KERNEL)];
    assert_span_text(&p, lk->name_span, last);
    unload(&p);
    unload(&one);
    kl_strbuf_release(&sb);
}

/* ---- API edges --------------------------------------------------------------------------------- */

static void api_edges(void **state)
{
    (void)state;
    kl_model_free(NULL);
    kl_source_free(NULL);
    assert_string_equal(kl_use_kind_name(KL_USE_SHUFFLE), "shuffle");
    assert_string_equal(kl_use_kind_name((kl_use_kind)99), "unknown");
    assert_string_equal(kl_loop_kind_name(KL_LOOP_DO), "do");
    assert_string_equal(kl_access_mode_name(KL_ACCESS_ADDRESS), "address");
    assert_string_equal(kl_function_kind_name(KL_FUNCTION_KERNEL), "kernel");
    parsed p = load("vector_add.cu");
    unsigned n;
    assert_null(kl_model_items_of(p.m, KL_ITEMS_LOOPS, 0, &n));
    assert_int_equal(n, 0);
    assert_null(kl_model_items_of(p.m, KL_ITEMS_USES, 999, &n));
    const unsigned *ix = kl_model_items_of(p.m, KL_ITEMS_ACCESSES, 0, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ix[0], 0);
    assert_int_equal(kl_model_find_function(p.m, "vector_add", KL_FUNCTION_DEVICE), -1);
    assert_true(kl_model_source(p.m) == p.src);
    /* a span past the end is clipped */
    kl_span past = {(uint32_t)p.len - 2, (uint32_t)p.len + 100, 1, 1};
    char *t = kl_source_slice(p.src, past);
    assert_int_equal(strlen(t), 2);
    free(t);
    unload(&p);
}

/* ---- incremental parses and walks ---------------------------------------------------------- */

/* Every node of a tree: its type, byte range and whether it is missing, one per line. */
static char *tree_dump(const kl_source *src)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    TSTreeCursor c = ts_tree_cursor_new(ts_tree_root_node(kl_source_tree(src)));
    for (;;) {
        TSNode x = ts_tree_cursor_current_node(&c);
        kl_strbuf_addf(&sb, "%s %u %u %d\n", ts_node_type(x), ts_node_start_byte(x), ts_node_end_byte(x),
                       (int)ts_node_is_missing(x));
        if (ts_tree_cursor_goto_first_child(&c)) continue;
        while (!ts_tree_cursor_goto_next_sibling(&c))
            if (!ts_tree_cursor_goto_parent(&c)) goto done;
    }
done:
    ts_tree_cursor_delete(&c);
    return kl_strbuf_detach(&sb, NULL);
}

/* What an edit puts in: statements, the constructs the grammar's text is blanked for (inline
 * asm operands, a member compared with <), and breakage (an open comment, a stray brace). */
static const char *const inserts[] = {
    "\n    int added = 3;\n",
    "x",
    "",
    "\n    asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane));\n",
    "\n    if (p.count < q.count && r.n > 2) { }\n",
    "/* an open comment",
    "}",
    "\n#define ADDED(i) ((i) * 2)\n",
    "\r\n",
};

/* A changed copy of a file parses incrementally into the tree a fresh parse gives: for every file
 * of tests/data/cuda and edits at seeded places (inserted, deleted, replaced text). */
static void an_edited_parse_gives_a_fresh_parse_s_tree(void **state)
{
    (void)state;
    static const char *const files[] = {"vector_add.cu", "macros.cu", "inline_ptx.cu", "template_reduce.cu",
                                        "matmul_tiled_2d.cu", "preproc_conditionals.cu", "warp_shuffle.cu",
                                        "cooperative_groups.cu", "host_lambda.cu", "wmma_gemm.cu"};
    uint64_t rng = 12345;
    unsigned edits = 0, with_errors = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        parsed base = load(files[f]);
        for (int k = 0; k < 24; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % (base.len + 1);
            size_t cut = k % 3 == 0 ? 0 : (size_t)(rng >> 20) % 40;
            if (at + cut > base.len) cut = base.len - at;
            const char *put = inserts[(rng >> 40) % (sizeof inserts / sizeof inserts[0])];
            kl_strbuf nb = KL_STRBUF_INIT;
            kl_strbuf_add(&nb, base.text, at);
            kl_strbuf_adds(&nb, put);
            kl_strbuf_add(&nb, base.text + at + cut, base.len - at - cut);
            kl_source *inc = NULL, *fresh = NULL;
            kl_error err = {0};
            kl_status a = kl_source_parse_edited(base.src, kl_strbuf_str(&nb), nb.len, &inc, &err);
            kl_status b = kl_source_parse_text("<fresh>", kl_strbuf_str(&nb), nb.len, &fresh, &err);
            assert_int_equal(a, b);
            if (a == KL_OK) {
                char *di = tree_dump(inc), *df = tree_dump(fresh);
                if (strcmp(di, df))
                    fail_msg("%s: %zu bytes at %zu replaced by \"%s\": the incremental tree differs", files[f], cut,
                             at, put);
                assert_int_equal(kl_source_error_count(inc), kl_source_error_count(fresh));
                assert_string_equal(kl_source_name(inc), kl_source_name(base.src));
                with_errors += kl_source_error_count(inc) > 0;
                edits++;
                free(di);
                free(df);
            }
            kl_source_free(inc);
            kl_source_free(fresh);
            kl_strbuf_release(&nb);
        }
        unload(&base);
    }
    assert_true(edits >= 200);
    assert_true(with_errors > 0); /* some edits broke the file, and were compared too */
}

/* A visitor that walks again from inside a walk, to a depth past the walks' pool of cursors. */
typedef struct nest {
    unsigned level, max, *counts;
} nest;

static bool count_node(TSNode n, void *user)
{
    (void)n;
    (*(unsigned *)user)++;
    return true;
}

static bool nest_node(TSNode n, void *user)
{
    nest *w = user;
    w->counts[w->level]++;
    if (w->level + 1 < w->max && w->counts[w->level] == 1) {
        nest inner = {w->level + 1, w->max, w->counts};
        kl_ast_walk(n, nest_node, &inner);
    }
    return true;
}

static void *walk_in_thread(void *arg)
{
    const kl_source *src = arg;
    unsigned *n = calloc(1, sizeof *n);
    for (int i = 0; i < 20; i++) kl_ast_walk(ts_tree_root_node(kl_source_tree(src)), count_node, n);
    return n;
}

static void walks_nest_and_run_in_threads(void **state)
{
    (void)state;
    parsed p = load("matmul_tiled_2d.cu");
    TSNode root = ts_tree_root_node(kl_source_tree(p.src));
    unsigned all = 0;
    kl_ast_walk(root, count_node, &all);
    assert_true(all > 100);
    /* the file, then its last declaration: the second time every level reuses a cursor */
    TSNode last = ts_node_named_child(root, ts_node_named_child_count(root) - 1);
    unsigned in_last = 0;
    kl_ast_walk(last, count_node, &in_last);
    assert_true(in_last > 10 && in_last < all);
    for (int round = 0; round < 2; round++) {
        unsigned counts[40] = {0};
        nest w = {0, 40, counts};
        kl_ast_walk(round ? last : root, nest_node, &w);
        /* every level walked all of it: the first node it met is where it started */
        for (unsigned l = 0; l < 40; l++) assert_int_equal(counts[l], round ? in_last : all);
    }
    unsigned again = 0;
    kl_ast_walk(root, count_node, &again);
    assert_int_equal(again, all);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, walk_in_thread, p.src), 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_int_equal(*(unsigned *)r, 20 * all);
        free(r);
    }
    unload(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_edited_parse_gives_a_fresh_parse_s_tree),
        cmocka_unit_test(walks_nest_and_run_in_threads),
        cmocka_unit_test(vector_add),
        cmocka_unit_test(grid_stride_loop),
        cmocka_unit_test(templates_and_helpers),
        cmocka_unit_test(launch_bounds),
        cmocka_unit_test(macros),
        cmocka_unit_test(preprocessor_conditionals),
        cmocka_unit_test(inline_ptx),
        cmocka_unit_test(vector_types),
        cmocka_unit_test(host_lambdas),
        cmocka_unit_test(dynamic_shared),
        cmocka_unit_test(tiled_matmul_2d),
        cmocka_unit_test(warp_shuffles),
        cmocka_unit_test(wmma),
        cmocka_unit_test(cooperative_groups),
        cmocka_unit_test(atomics_and_do_while),
        cmocka_unit_test(device_helper_chain),
        cmocka_unit_test(while_and_early_return),
        cmocka_unit_test(fast_math),
        cmocka_unit_test(pragmas),
        cmocka_unit_test(namespaces_and_default_stream),
        cmocka_unit_test(every_corpus_file),
        cmocka_unit_test(member_comparisons),
        cmocka_unit_test(unknown_attributes_and_pragma_in_comment),
        cmocka_unit_test(asm_operands_and_calling_conventions),
        cmocka_unit_test(crlf_line_endings),
        cmocka_unit_test(bad_empty),
        cmocka_unit_test(bad_binary_garbage),
        cmocka_unit_test(bad_unterminated_comment),
        cmocka_unit_test(bad_truncated_kernel),
        cmocka_unit_test(bad_nested_braces),
        cmocka_unit_test(bad_nested_loops),
        cmocka_unit_test(bad_invalid_utf8),
        cmocka_unit_test(bad_directory_and_missing),
        cmocka_unit_test(bad_too_large),
        cmocka_unit_test(bad_ten_megabytes),
        cmocka_unit_test(api_edges),
        cmocka_unit_test(limits_refuse_what_would_crash),
        cmocka_unit_test(limits_inside_are_parsed_and_freed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
