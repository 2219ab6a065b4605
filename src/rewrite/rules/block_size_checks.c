/* block-size's checks of code that depends on the thread count (docs/rules.md, "block-size"): the
 * file constants followed from a block size (names), the 2-D loops compared before and after a
 * change, and the 1-D layouts — warp indices, per-warp addresses, loops over the block — that a
 * new thread count would break. block_size.c asks them through block_size.h. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/block_size.h"
#include "rewrite/rules/row_step.h"
#include "rewrite/rules/rules_tree.h"
#include "util/util.h"

bool block_size__names_has(const bs_names *ns, const char *name)
{
    for (unsigned i = 0; i < ns->n; i++)
        if (!strcmp(ns->v[i], name)) return true;
    return false;
}

void block_size__names_add(bs_names *ns, const char *name)
{
    if (name[0] && ns->n < BS2_NAMES && !block_size__names_has(ns, name) && strlen(name) < sizeof ns->v[0])
        kl_snprintf(ns->v[ns->n++], sizeof ns->v[0], "%s", name);
}

/* The first of the names the text mentions, or NULL. */
const char *block_size__names_in_text(const bs_names *ns, const char *t)
{
    for (unsigned i = 0; t && i < ns->n; i++)
        if (block_size__text_mentions(t, ns->v[i])) return ns->v[i];
    return NULL;
}

/* The same for a node: the name into buf ("" when none). */
bool block_size__names_in(const kl_source *src, const bs_names *ns, TSNode n, char *buf, size_t size)
{
    char *t = kl_node_text(src, n);
    const char *hit = block_size__names_in_text(ns, t);
    kl_snprintf(buf, size, "%s", hit ? hit : "");
    free(t);
    return hit != NULL;
}

/* Constants whose definitions mention a name of ns join it, until none does: the
 * `const`/`constexpr` declarations and #defines directly under `scope`. */
void block_size__names_close(const kl_source *src, TSNode scope, bs_names *ns)
{
    for (int changed = 1, round = 0; changed && round < 16; round++) {
        changed = 0;
        uint32_t c = ts_node_named_child_count(scope);
        for (uint32_t i = 0; i < c; i++) {
            TSNode d = ts_node_named_child(scope, i);
            char *name = NULL;
            TSNode value = {0};
            if (rt_is(d, "preproc_def")) {
                name = kl_node_text(src, ts_node_child_by_field_name(d, "name", 4));
                value = ts_node_child_by_field_name(d, "value", 5);
                if (name && !ts_node_is_null(value) && !block_size__names_has(ns, name)) {
                    char buf[128];
                    if (block_size__names_in(src, ns, value, buf, sizeof buf)) block_size__names_add(ns, name), changed = 1;
                }
                free(name);
                continue;
            }
            if (!rt_is(d, "declaration")) continue;
            char *dt = kl_node_text(src, d);
            bool konst = dt && (block_size__text_mentions(dt, "const") || block_size__text_mentions(dt, "constexpr"));
            free(dt);
            if (!konst) continue;
            uint32_t dc = ts_node_named_child_count(d);
            for (uint32_t k = 0; k < dc; k++) {
                TSNode x = ts_node_named_child(d, k);
                if (!rt_is(x, "init_declarator")) continue;
                TSNode nm = ts_node_child_by_field_name(x, "declarator", 10);
                value = ts_node_child_by_field_name(x, "value", 5);
                if (!rt_is(nm, "identifier") || ts_node_is_null(value)) continue;
                name = kl_node_text(src, nm);
                char buf[128];
                if (name && !block_size__names_has(ns, name) && block_size__names_in(src, ns, value, buf, sizeof buf)) {
                    block_size__names_add(ns, name);
                    changed = 1;
                }
                free(name);
            }
        }
    }
}

/* A register array sized by, or a template argument naming, a followed constant (block_size.h). */
bool block_size__find_width(TSNode n, void *user)
{
    bs_width_scan *w = user;
    if (!ts_node_is_null(w->hit)) return false;
    if (rt_is(n, "declaration")) {
        char *t = kl_node_text(w->src, n);
        bool shared = t && strstr(t, "__shared__");
        free(t);
        return !shared; /* shared arrays follow the block: they are the tile */
    }
    if (rt_is(n, "array_declarator")) {
        TSNode size = ts_node_child_by_field_name(n, "size", 4);
        if (!ts_node_is_null(size) && block_size__names_in(w->src, w->ns, size, w->name, sizeof w->name)) {
            w->hit = n;
            w->what = "sizes the register array";
        }
    } else if (rt_is(n, "template_argument_list")) {
        if (block_size__names_in(w->src, w->ns, n, w->name, sizeof w->name)) {
            w->hit = n;
            w->what = "is a template argument";
        }
        return false;
    }
    return true;
}

typedef struct node_list {
    TSNode *v;
    unsigned n, cap;
    bool oom;
} node_list;

static bool collect_for(TSNode n, void *user)
{
    node_list *L = user;
    if (!rt_is(n, "for_statement")) return true;
    if (L->n == L->cap) {
        unsigned cap = L->cap ? 2 * L->cap : 16;
        TSNode *nv = realloc(L->v, cap * sizeof *nv);
        if (!nv) {
            L->oom = true;
            return false;
        }
        L->v = nv;
        L->cap = cap;
    }
    L->v[L->n++] = n;
    return true;
}

typedef struct decl_find {
    const kl_source *src;
    const char *name;
    TSNode value;
} decl_find;

static bool find_local_init(TSNode n, void *user)
{
    decl_find *f = user;
    if (!ts_node_is_null(f->value)) return false;
    if (!rt_is(n, "init_declarator")) return true;
    TSNode nm = ts_node_child_by_field_name(n, "declarator", 10);
    if (rt_is(nm, "identifier") && kl_node_text_is(f->src, nm, f->name))
        f->value = ts_node_child_by_field_name(n, "value", 5);
    return true;
}

/* Which thread index an expression is: 0, 1, 2 for threadIdx.x/y/z (also through a local
 * `const int ty = threadIdx.y`), -1 otherwise. */
static int thread_dim(const kl_source *src, TSNode body, TSNode e, int depth)
{
    e = kl_ast_unparen(e);
    if (rt_is(e, "field_expression")) {
        static const char *const idx[] = {"threadIdx.x", "threadIdx.y", "threadIdx.z"};
        for (int k = 0; k < 3; k++)
            if (kl_node_text_is(src, e, idx[k])) return k;
        return -1;
    }
    if (!rt_is(e, "identifier") || depth > 3) return -1;
    char *name = kl_node_text(src, e);
    if (!name) return -1;
    decl_find f = {.src = src, .name = name};
    kl_ast_walk(body, find_local_init, &f);
    free(name);
    return ts_node_is_null(f.value) ? -1 : thread_dim(src, body, f.value, depth + 1);
}


/* The loop of the old kernel (with its twin in the changed file): a loop stepping by a block extent
 * must still cover its range (see the rules above). why is set when it would not. */
static void check_loop(const kl_source *src, TSNode fn, TSNode loop, const kl_source *nsrc, TSNode nfn, TSNode nloop,
                       const bs_group2 *g, const int64_t ext_new[2], char *why, size_t size)
{
    TSNode up = kl_ast_unparen(ts_node_child_by_field_name(loop, "update", 6));
    if (!rt_is(up, "assignment_expression")) return;
    if (!kl_node_text_is(src, ts_node_child_by_field_name(up, "operator", 8), "+=")) return;
    TSNode step = kl_ast_unparen(ts_node_child_by_field_name(up, "right", 5));
    int sdim = -1;
    bool both = false;
    if (rt_is(step, "identifier")) {
        for (int k = 1; k >= 0; k--)
            if (g->d[k].name[0] && kl_node_text_is(src, step, g->d[k].name)) sdim = k;
        both = sdim == 0 && !strcmp(g->d[0].name, g->d[1].name);
    } else if (kl_node_text_is(src, step, "blockDim.x")) {
        sdim = 0;
    } else if (kl_node_text_is(src, step, "blockDim.y")) {
        sdim = 1;
    }
    if (sdim < 0) return;
    char *var = kl_node_text(src, ts_node_child_by_field_name(up, "left", 4));
    char *st = kl_node_text(src, step);
    if (!var || !st) goto done;
    /* the start: `int v = S` or `v = S` */
    TSNode start = kl_loop_start(loop);
    TSNode body = kl_ast_function_body(fn);
    int tdim = ts_node_is_null(start) ? -1 : thread_dim(src, body, start, 0);
    char *stext = ts_node_is_null(start) ? NULL : kl_node_text(src, start);
    if ((tdim < 0 || tdim > 1) && !ts_node_is_null(start)) {
        /* `for (j = 0; j < TILE; j += BLOCK_ROWS)` over rows `threadIdx.y + j` (row_step.c) */
        int64_t ext_old[2] = {g->d[0].value, g->d[1].value};
        if (kl_row_step_check(src, fn, loop, nsrc, nloop, nfn, var, st, both ? -1 : sdim, ext_old, ext_new, why, size)) {
            free(stext);
            goto done;
        }
    }
    if (tdim < 0 || tdim > 1) {
        kl_snprintf(why, size,
                    "the loop at line %u steps %s by %s from %s, not threadIdx.x or threadIdx.y: whether the block "
                    "still covers its range cannot be checked",
                    kl_ast_line(loop), var, st, stext ? stext : "an unknown start");
        free(stext);
        goto done;
    }
    free(stext);
    if (both) sdim = tdim;
    int64_t step_new = ext_new[sdim], step_old = g->d[sdim].value;
    if (tdim != sdim) {
        kl_snprintf(why, size,
                    "the loop at line %u starts at threadIdx.%c but steps by %s, the block's %c extent: it covers its "
                    "range only while the two extents agree",
                    kl_ast_line(loop), "xy"[tdim], st, "xy"[sdim]);
        goto done;
    }
    TSNode lb = kl_loop_bound(src, loop, var), nlb = kl_loop_bound(nsrc, nloop, var);
    char *lbody = kl_node_text(src, ts_node_child_by_field_name(loop, "body", 4));
    bool sync = lbody && strstr(lbody, "__syncthreads");
    free(lbody);
    int64_t bo = 0, bn = 0;
    bool known = !ts_node_is_null(lb) && !ts_node_is_null(nlb) && kl_const_eval(src, fn, lb, false, &bo, NULL, 0) &&
                 kl_const_eval(nsrc, nfn, nlb, false, &bn, NULL, 0);
    char *bt = ts_node_is_null(lb) ? NULL : kl_node_text(src, lb);
    if (known && step_old > 0 && step_new > 0) {
        bool even_old = bo % step_old == 0, even_new = bn % step_new == 0;
        if ((even_old || sync) && !even_new)
            kl_snprintf(why, size,
                        "the loop at line %u runs %s / %s times per thread (%lld / %lld); with a %lldx%lld block %lld "
                        "is not a multiple of %lld and the threads would run it unequally often",
                        kl_ast_line(loop), bt ? bt : "its bound", st, (long long)bo, (long long)step_old,
                        (long long)ext_new[0], (long long)ext_new[1], (long long)bn, (long long)step_new);
    } else if (sync) {
        kl_snprintf(why, size,
                    "the loop at line %u holds __syncthreads() and its bound (%s) is not a compile-time constant: "
                    "every thread must run it equally often",
                    kl_ast_line(loop), bt ? bt : "none");
    }
    free(bt);
done:
    free(var);
    free(st);
}

/* ---- the 1-D checks: code whose layout follows the thread count ----------------------------------
 * Beyond literals equal to the size (check_group), a 1-D block cannot change where the kernel
 *  - sizes a register array or names a template argument by the block's constant, or by a
 *    constant derived from it (`constexpr int ITEMS = N / THREADS;`): widths that do not follow;
 *  - places data by warp: a warp index (`threadIdx.x / 32`, `>> 5`, `/ warpSize`, or a local
 *    holding one, and what is computed from it) in the address of a pointer parameter — a warp
 *    tiling, whose warps cover the block's tile only at the count they were written for;
 *  - steps a loop by the block's constant (or one derived from it, or blockDim.x) from anything
 *    but the thread index (`for (r = threadIdx.x / 8; r < BM; r += THREADS / 8)`), or from the
 *    thread index over a compile-time range the new count does not divide, with a barrier inside. */

typedef struct warp_vars {
    const kl_source *src;
    TSNode body;
    bs_names ns;          /* locals holding a warp index or derived from one */
    bool grew;
} warp_vars;

/* Is e a warp index: threadIdx.x (or a local copy of it) divided by 32 or warpSize, or shifted by 5? */
static bool warp_index(const kl_source *src, TSNode body, TSNode e)
{
    e = kl_ast_unparen(e);
    if (!rt_is(e, "binary_expression")) return false;
    char *op = kl_node_text(src, ts_node_child_by_field_name(e, "operator", 8));
    TSNode l = ts_node_child_by_field_name(e, "left", 4), r = kl_ast_unparen(ts_node_child_by_field_name(e, "right", 5));
    int64_t v = 0;
    bool div = op && !strcmp(op, "/") &&
               ((rt_is(r, "number_literal") && block_size__number(src, r, &v) && v == 32) ||
                kl_node_text_is(src, r, "warpSize"));
    bool shr = op && !strcmp(op, ">>") && rt_is(r, "number_literal") && block_size__number(src, r, &v) && v == 5;
    free(op);
    if (!div && !shr) return false;
    l = kl_ast_unparen(l);
    if (rt_is(l, "cast_expression")) l = kl_ast_unparen(ts_node_child_by_field_name(l, "value", 5));
    return thread_dim(src, body, l, 0) == 0;
}

typedef struct warp_expr_scan {
    const kl_source *src;
    TSNode body;
    const bs_names *ns;
    bool hit;
} warp_expr_scan;

static bool find_warp_expr(TSNode n, void *user)
{
    warp_expr_scan *w = user;
    if (w->hit) return false;
    if (warp_index(w->src, w->body, n)) w->hit = true;
    else if (rt_is(n, "identifier") && w->ns->n) {
        char *t = kl_node_text(w->src, n);
        w->hit = t && block_size__names_has(w->ns, t);
        free(t);
    }
    return !w->hit;
}

/* Does n hold a warp index, directly or through a name of ns? */
static bool holds_warp(const kl_source *src, TSNode body, const bs_names *ns, TSNode n)
{
    warp_expr_scan w = {src, body, ns, false};
    kl_ast_walk(n, find_warp_expr, &w);
    return w.hit;
}

static bool collect_warp_vars(TSNode n, void *user)
{
    warp_vars *w = user;
    TSNode nm = {0}, v = {0};
    if (rt_is(n, "init_declarator")) {
        nm = kl_ast_declarator_name(ts_node_child_by_field_name(n, "declarator", 10));
        v = ts_node_child_by_field_name(n, "value", 5);
    } else if (rt_is(n, "assignment_expression")) {
        nm = ts_node_child_by_field_name(n, "left", 4);
        v = ts_node_child_by_field_name(n, "right", 5);
    }
    if (!rt_is(nm, "identifier") || ts_node_is_null(v)) return true;
    char *name = kl_node_text(w->src, nm);
    if (name && !block_size__names_has(&w->ns, name) && holds_warp(w->src, w->body, &w->ns, v)) {
        block_size__names_add(&w->ns, name);
        w->grew = true;
    }
    free(name);
    return true;
}

typedef struct addr_scan {
    const kl_source *src;
    TSNode body;
    const bs_names *warps;
    const bs_names *ptrs;
    TSNode hit;
} addr_scan;

/* A subscript of a pointer parameter, or an update of one (`C += …`), whose index holds a warp index. */
static bool find_warp_addr(TSNode n, void *user)
{
    addr_scan *a = user;
    if (!ts_node_is_null(a->hit)) return false;
    TSNode base = {0}, idx = {0};
    if (rt_is(n, "subscript_expression")) {
        base = kl_ast_unparen(ts_node_child_by_field_name(n, "argument", 8));
        idx = ts_node_child_by_field_name(n, "indices", 7);
        if (ts_node_is_null(idx)) idx = ts_node_child_by_field_name(n, "index", 5);
    } else if (rt_is(n, "assignment_expression")) {
        base = kl_ast_unparen(ts_node_child_by_field_name(n, "left", 4));
        idx = ts_node_child_by_field_name(n, "right", 5);
    } else if (rt_is(n, "binary_expression")) {
        /* p + i */
        TSNode l = kl_ast_unparen(ts_node_child_by_field_name(n, "left", 4));
        if (rt_is(l, "identifier")) base = l, idx = ts_node_child_by_field_name(n, "right", 5);
    }
    if (!rt_is(base, "identifier") || ts_node_is_null(idx)) return true;
    char *t = kl_node_text(a->src, base);
    bool ptr = t && block_size__names_has(a->ptrs, t);
    free(t);
    if (ptr && holds_warp(a->src, a->body, a->warps, idx)) a->hit = n;
    return true;
}

/* The pointer parameters of fn, by name. */
static void pointer_params(const kl_source *src, TSNode fn, bs_names *ns)
{
    TSNode ps = kl_ast_function_params(fn);
    uint32_t c = ts_node_named_child_count(ps);
    for (uint32_t i = 0; i < c; i++) {
        TSNode pd = ts_node_named_child(ps, i);
        TSNode d = ts_node_child_by_field_name(pd, "declarator", 10);
        bool ptr = false;
        for (TSNode x = d; !ts_node_is_null(x); x = ts_node_child_by_field_name(x, "declarator", 10))
            if (rt_is(x, "pointer_declarator") || rt_is(x, "array_declarator")) ptr = true;
        TSNode nm = kl_ast_declarator_name(d);
        char *t = ptr && !ts_node_is_null(nm) ? kl_node_text(src, nm) : NULL;
        if (t) block_size__names_add(ns, t);
        free(t);
    }
}

static bool has_barrier(const kl_source *src, TSNode n)
{
    char *t = kl_node_text(src, n);
    bool yes = t && strstr(t, "__syncthreads");
    free(t);
    return yes;
}

/* A loop stepping by the thread count: see the rules above. */
static void check_loop_1d(const kl_source *src, TSNode fn, TSNode loop, const bs_names *ns, int64_t old, int64_t nb,
                          char *why, size_t size)
{
    TSNode up = kl_ast_unparen(ts_node_child_by_field_name(loop, "update", 6));
    if (!rt_is(up, "assignment_expression") ||
        !kl_node_text_is(src, ts_node_child_by_field_name(up, "operator", 8), "+="))
        return;
    TSNode step = kl_ast_unparen(ts_node_child_by_field_name(up, "right", 5));
    char *st = kl_node_text(src, step);
    bool by_block = st && (!strcmp(st, "blockDim.x") || (rt_is(step, "identifier") && block_size__names_has(ns, st)) ||
                           (ns->n && block_size__names_in_text(ns, st)));
    char *var = kl_node_text(src, ts_node_child_by_field_name(up, "left", 4));
    if (!by_block || !var) goto done;
    TSNode body = kl_ast_function_body(fn);
    TSNode init = ts_node_child_by_field_name(loop, "initializer", 11), start = {0};
    if (rt_is(init, "declaration")) {
        TSNode d = ts_node_named_child(init, ts_node_named_child_count(init) - 1);
        start = ts_node_child_by_field_name(d, "value", 5);
    } else if (rt_is(init, "assignment_expression")) {
        start = ts_node_child_by_field_name(init, "right", 5);
    }
    if (ts_node_is_null(start) && ts_node_is_null(init)) {
        /* `for (; …)`: the variable's initializer before the loop */
        decl_find f = {.src = src, .name = var};
        kl_ast_walk(body, find_local_init, &f);
        start = f.value;
    }
    bool from_tid = !ts_node_is_null(start) && thread_dim(src, body, start, 0) == 0;
    if (!from_tid && !ts_node_is_null(start)) {
        /* `blockIdx.x * THREADS + threadIdx.x`: consecutive threads start on consecutive elements */
        kl_affine_ctx *ax = NULL;
        kl_affine af = {0};
        int64_t k = 0;
        if (kl_affine_ctx_new(src, fn, &ax, NULL) == KL_OK && kl_affine_of(ax, start, &af) == KL_OK)
            from_tid = af.ok && kl_affine_coef_int(&af, "threadIdx.x", &k) && k == 1;
        kl_affine_release(&af);
        kl_affine_ctx_free(ax);
    }
    if (!from_tid) {
        char *t = kl_node_text(src, start);
        kl_snprintf(why, size,
                    "the loop at line %u steps %s by %s from %s, not from threadIdx.x: the rows each thread covers "
                    "are laid out for %lld threads",
                    kl_ast_line(loop), var, st, t ? t : "?", (long long)old);
        free(t);
        goto done;
    }
    TSNode bound = kl_loop_bound(src, loop, var);
    int64_t b = 0;
    if (!ts_node_is_null(bound) && kl_const_eval(src, fn, bound, false, &b, NULL, 0) && b % old == 0 && b % nb != 0 &&
        has_barrier(src, ts_node_child_by_field_name(loop, "body", 4)))
        kl_snprintf(why, size,
                    "the loop at line %u over %s < %lld holds __syncthreads(): with %lld threads some would run it "
                    "once more than others",
                    kl_ast_line(loop), var, (long long)b, (long long)nb);
done:
    free(st);
    free(var);
}

void block_size__depends_1d(const kl_source *src, TSNode fn, const bs_group *g, int64_t nb, char *why, size_t size)
{
    TSNode body = kl_ast_function_body(fn);
    bs_names ns;
    memset(&ns, 0, sizeof ns);
    if (g->name[0]) {
        block_size__names_add(&ns, g->name);
        block_size__names_close(src, kl_source_root(src), &ns);
        block_size__names_close(src, body, &ns);
    }
    /* widths */
    if (ns.n) {
        bs_width_scan w = {src, &ns, {{0}, 0, 0}, "", NULL};
        kl_ast_walk(body, block_size__find_width, &w);
        if (!ts_node_is_null(w.hit)) {
            kl_snprintf(why, size, "%s %s at line %u: a width that does not follow the block size", w.name, w.what,
                        kl_ast_line(w.hit));
            return;
        }
    }
    /* warp tiling */
    warp_vars wv;
    memset(&wv, 0, sizeof wv);
    wv.src = src;
    wv.body = body;
    for (int round = 0; round < 8; round++) {
        wv.grew = false;
        kl_ast_walk(body, collect_warp_vars, &wv);
        if (!wv.grew) break;
    }
    bs_names ptrs;
    memset(&ptrs, 0, sizeof ptrs);
    pointer_params(src, fn, &ptrs);
    addr_scan as = {src, body, &wv.ns, &ptrs, {{0}, 0, 0}};
    if (ptrs.n) kl_ast_walk(body, find_warp_addr, &as);
    if (!ts_node_is_null(as.hit)) {
        kl_snprintf(why, size,
                    "the address at line %u is placed by the warp index (a warp tiling of the block's %lld threads): "
                    "its warps cover the tile only at that count",
                    kl_ast_line(as.hit), (long long)g->value);
        return;
    }
    /* loops stepping by the thread count */
    node_list loops = {0};
    kl_ast_walk(body, collect_for, &loops);
    for (unsigned i = 0; i < loops.n && !why[0]; i++) check_loop_1d(src, fn, loops.v[i], &ns, g->value, nb, why, size);
    free(loops.v);
}

/* The kernels named `kernel` in a file (templates included), up to max. */
unsigned block_size__kernels_named(const kl_source *src, const char *kernel, TSNode *out, unsigned max)
{
    TSNode fns[256];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 256), n = 0;
    if (nf > 256) nf = 256;
    for (unsigned f = 0; f < nf; f++) {
        char *name = kl_ast_function_name(src, fns[f]);
        if (name && !strcmp(name, kernel) && n < max) out[n++] = fns[f];
        free(name);
    }
    return n;
}

/* After the change: the loops of each launched kernel, old against new. */
kl_status block_size__check_loops(bs_state *s, const bs_group2 *g, const kl_edits *e, const int64_t ext_new[2], char *why,
                             size_t size)
{
    const kl_source *src = s->ctx->src;
    char *text = NULL;
    kl_error err = {0};
    kl_status st = kl_edits_apply(e, s->ctx->text, s->ctx->len, &text, &err);
    if (st != KL_OK) {
        if (st != KL_ERR_NOMEM) kl_snprintf(why, size, "the change does not apply: %s", err.message);
        return st == KL_ERR_NOMEM ? st : KL_OK;
    }
    kl_source *nsrc = NULL;
    st = kl_source_parse_text("block-size", text, strlen(text), &nsrc, &err);
    free(text);
    if (st != KL_OK) {
        if (st != KL_ERR_NOMEM) kl_snprintf(why, size, "the changed file does not parse: %s", err.message);
        return st == KL_ERR_NOMEM ? st : KL_OK;
    }
    for (unsigned k = 0; k < g->nlaunch && !why[0]; k++) {
        const char *kernel = s->ls.items[g->launches[k]].kernel;
        bool seen = false;
        for (unsigned j = 0; j < k; j++) seen |= !strcmp(s->ls.items[g->launches[j]].kernel, kernel);
        if (seen) continue;
        TSNode of[8], nf[8];
        unsigned no = block_size__kernels_named(src, kernel, of, 8), nn = block_size__kernels_named(nsrc, kernel, nf, 8);
        if (no != nn) {
            kl_snprintf(why, size, "the changed file does not define %s as the original does", kernel);
            break;
        }
        for (unsigned f = 0; f < no && !why[0]; f++) {
            node_list lo = {0}, ln = {0};
            kl_ast_walk(kl_ast_function_body(of[f]), collect_for, &lo);
            kl_ast_walk(kl_ast_function_body(nf[f]), collect_for, &ln);
            if (lo.oom || ln.oom) st = KL_ERR_NOMEM;
            else if (lo.n != ln.n)
                kl_snprintf(why, size, "the changed %s does not have the loops of the original", kernel);
            for (unsigned i = 0; st == KL_OK && !why[0] && i < lo.n; i++)
                check_loop(src, of[f], lo.v[i], nsrc, nf[f], ln.v[i], g, ext_new, why, size);
            free(lo.v);
            free(ln.v);
        }
    }
    kl_source_free(nsrc);
    return st;
}

/* The grid's extents list (dim3(gx, gy) or a local `dim3 grid(gx, gy)`), or null. */
