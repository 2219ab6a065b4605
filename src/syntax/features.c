/*
 * The static features of a function: counts and flags that skill preconditions test
 * (docs/syntax.md, "Features"). Uses — barriers, shuffles, atomics, … — and shared
 * declarations are counted over the function and every function of the file it calls,
 * directly or not; loops, pragmas, subscripts and returns over its own body only.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/syntax_int.h"
#include "util/util.h"

typedef struct totals {
    unsigned uses[KL_USE_KIND_COUNT];
    unsigned shared, dynamic_shared;
    bool vector_pointer;
} totals;

/* Add the uses and shared declarations of every function reachable from f by calls.
 * seen: scratch of n_functions bytes, zeroed by the caller; stack: n_functions entries. */
static void add_reachable(const kl_model *m, unsigned f, unsigned char *seen, unsigned *stack, totals *t,
                          json_t *calls)
{
    unsigned nfn, nuses, nshared;
    const kl_function *fns = kl_model_functions(m, &nfn);
    const kl_use *uses = kl_model_uses(m, &nuses);
    const kl_shared_decl *shared = kl_model_shared(m, &nshared);
    unsigned top = 0;
    stack[top++] = f;
    seen[f] = 1;
    while (top) {
        unsigned g = stack[--top];
        unsigned n;
        const unsigned *ix = kl_model_items_of(m, KL_ITEMS_USES, g, &n);
        for (unsigned i = 0; i < n; i++) {
            const kl_use *u = &uses[ix[i]];
            if (u->kind == KL_USE_CALL) {
                if (u->target >= 0 && (unsigned)u->target < nfn && !seen[u->target]) {
                    seen[u->target] = 1;
                    stack[top++] = (unsigned)u->target;
                    if (calls) json_array_append_new(calls, json_string(fns[u->target].name));
                }
                continue;
            }
            t->uses[u->kind]++;
            if (u->kind == KL_USE_VECTOR_TYPE && u->vector_pointer) t->vector_pointer = true;
        }
        ix = kl_model_items_of(m, KL_ITEMS_SHARED, g, &n);
        for (unsigned i = 0; i < n; i++) {
            t->shared++;
            if (shared[ix[i]].is_extern) t->dynamic_shared++;
        }
    }
}

static json_t *text_or_null(const char *s)
{
    if (!s) return json_null();
    size_t n = strlen(s);
    if (kl_utf8_valid_prefix(s, n) == n) return json_string(s);
    return json_string("?");
}

json_t *kl_features_with(const kl_model *m, unsigned f, unsigned char *seen, unsigned *stack)
{
    unsigned nfn, nloops, nacc, npragmas, nlaunch;
    const kl_function *fns = kl_model_functions(m, &nfn);
    if (f >= nfn) return NULL;
    const kl_function *fn = &fns[f];
    const kl_loop *loops = kl_model_loops(m, &nloops);
    const kl_access *acc = kl_model_accesses(m, &nacc);
    const kl_pragma *pragmas = kl_model_pragmas(m, &npragmas);
    const kl_launch *launches = kl_model_launches(m, &nlaunch);

    json_t *o = json_object();
    json_t *calls = json_array();
    if (!o || !calls) {
        json_decref(o);
        json_decref(calls);
        return NULL;
    }
    totals t;
    memset(&t, 0, sizeof t);
    add_reachable(m, f, seen, stack, &t, calls);

    unsigned ptrs = 0, const_ptrs = 0, restrict_ptrs = 0;
    for (unsigned i = 0; i < fn->nparams; i++) {
        const kl_param *p = &fn->params[i];
        if (!p->pointer_depth) continue;
        ptrs++;
        if (p->is_const) const_ptrs++;
        if (p->is_restrict) restrict_ptrs++;
    }
    unsigned n;
    const unsigned *ix = kl_model_items_of(m, KL_ITEMS_LOOPS, f, &n);
    unsigned max_depth = 0, unrolled = 0;
    bool grid_stride = false, while_loop = false;
    for (unsigned i = 0; i < n; i++) {
        const kl_loop *lp = &loops[ix[i]];
        if (lp->depth > max_depth) max_depth = lp->depth;
        if (lp->unroll) unrolled++;
        if (lp->grid_stride) grid_stride = true;
        if (lp->kind == KL_LOOP_WHILE || lp->kind == KL_LOOP_DO) while_loop = true;
    }
    unsigned nloops_own = n;
    ix = kl_model_items_of(m, KL_ITEMS_PRAGMAS, f, &n);
    unsigned unroll_pragmas = 0;
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(pragmas[ix[i]].name, "unroll")) unroll_pragmas++;
    ix = kl_model_items_of(m, KL_ITEMS_ACCESSES, f, &n);
    unsigned shared_acc = 0, param_acc = 0, writes = 0, in_loops = 0;
    for (unsigned i = 0; i < n; i++) {
        const kl_access *a = &acc[ix[i]];
        if (a->shared >= 0) shared_acc++;
        if (a->param >= 0) param_acc++;
        if (a->mode == KL_ACCESS_WRITE || a->mode == KL_ACCESS_READ_WRITE) writes++;
        if (a->loop >= 0) in_loops++;
    }
    unsigned naccesses = n;
    unsigned sites = 0;
    for (unsigned i = 0; i < nlaunch; i++)
        if (launches[i].kernel_function == (int)f) sites++;

#define SET(key, value) json_object_set_new(o, key, value)
    SET("name", text_or_null(fn->name));
    SET("kind", json_string(kl_function_kind_name(fn->kind)));
    SET("params", json_integer(fn->nparams));
    SET("pointer_params", json_integer(ptrs));
    SET("const_pointer_params", json_integer(const_ptrs));
    SET("restrict_pointer_params", json_integer(restrict_ptrs));
    SET("template_params", json_integer(fn->ntparams));
    SET("has_launch_bounds", json_boolean(fn->nlaunch_bounds > 0));
    SET("launch_bounds_max_threads", text_or_null(fn->nlaunch_bounds > 0 ? fn->launch_bounds[0].text : NULL));
    SET("launch_bounds_min_blocks", text_or_null(fn->nlaunch_bounds > 1 ? fn->launch_bounds[1].text : NULL));
    SET("uses_shared", json_boolean(t.shared > 0));
    SET("shared_decls", json_integer(t.shared));
    SET("uses_dynamic_shared", json_boolean(t.dynamic_shared > 0));
    SET("uses_barrier", json_boolean(t.uses[KL_USE_BARRIER] > 0));
    SET("barriers", json_integer(t.uses[KL_USE_BARRIER]));
    SET("uses_shuffle", json_boolean(t.uses[KL_USE_SHUFFLE] > 0));
    SET("shuffles", json_integer(t.uses[KL_USE_SHUFFLE]));
    SET("uses_warp_vote", json_boolean(t.uses[KL_USE_WARP_VOTE] > 0));
    SET("uses_atomics", json_boolean(t.uses[KL_USE_ATOMIC] > 0));
    SET("atomics", json_integer(t.uses[KL_USE_ATOMIC]));
    SET("uses_vector_types", json_boolean(t.uses[KL_USE_VECTOR_TYPE] > 0));
    SET("uses_vector_loads", json_boolean(t.vector_pointer));
    SET("uses_asm", json_boolean(t.uses[KL_USE_ASM] > 0));
    SET("uses_cp_async", json_boolean(t.uses[KL_USE_ASYNC_COPY] > 0));
    SET("uses_mma", json_boolean(t.uses[KL_USE_MMA] > 0));
    SET("uses_math_intrinsics", json_boolean(t.uses[KL_USE_MATH_INTRINSIC] > 0));
    SET("uses_ldg", json_boolean(t.uses[KL_USE_LOAD_INTRINSIC] > 0));
    SET("uses_cooperative_groups", json_boolean(t.uses[KL_USE_COOP_GROUPS] > 0));
    SET("uses_fence", json_boolean(t.uses[KL_USE_FENCE] > 0));
    SET("loops", json_integer(nloops_own));
    SET("max_loop_depth", json_integer(max_depth));
    SET("has_unroll_pragma", json_boolean(unroll_pragmas > 0));
    SET("unroll_pragmas", json_integer(unroll_pragmas));
    SET("unrolled_loops", json_integer(unrolled));
    SET("has_grid_stride_loop", json_boolean(grid_stride));
    SET("has_while_loop", json_boolean(while_loop));
    SET("accesses", json_integer(naccesses));
    SET("accesses_in_loops", json_integer(in_loops));
    SET("shared_accesses", json_integer(shared_acc));
    SET("param_accesses", json_integer(param_acc));
    SET("writes", json_integer(writes));
    SET("index_dims", json_integer(fn->index_dims));
    SET("returns", json_integer(fn->nreturns));
    SET("has_early_return", json_boolean(fn->kind == KL_FUNCTION_KERNEL && fn->nreturns > 0));
    SET("calls", calls);
    SET("launch_sites", json_integer(sites));
#undef SET
    return o;
}

json_t *kl_model_features(const kl_model *m, unsigned f)
{
    unsigned nfn;
    kl_model_functions(m, &nfn);
    if (f >= nfn) return NULL;
    unsigned char *seen = calloc(nfn, 1);
    unsigned *stack = malloc(nfn * sizeof *stack);
    json_t *o = (seen && stack) ? kl_features_with(m, f, seen, stack) : NULL;
    free(seen);
    free(stack);
    return o;
}
