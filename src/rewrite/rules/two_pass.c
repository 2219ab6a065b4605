/* two-pass: a reduction finished in two launches, each block's result stored to its own slot
 * (`if (threadIdx.x == 0) G[blockIdx.x] = r;`) and a second kernel adding the slots up
 * (`for (b = …; b < nblocks; b += …) s += G[b];`, nblocks passed the first launch's grid), ->
 * one accumulator: every block adds its result to G[0] (`atomicAdd(&G[0], r)`), zeroed before the
 * first launch, and the second kernel is given 1 slot. The result is the same sum in another
 * order; the first kernel no longer depends on how many blocks it has (so a grid-stride loop in
 * it can be removed next), and the number of blocks is no longer bounded by G's size.
 * With two kernels and f32 partials the accumulator is a __device__ double instead, which a
 * one-thread kernel launched between the two writes to G[0] as f32: a float accumulator loses
 * accuracy with every block added to it, and the steps after this one multiply the blocks (one
 * element per thread: a million f32 atomics into one sum of 2^28 squares exceed a 1e-5 relative
 * tolerance — measured on the H200 — where the two-pass sum of a few hundred slots does not).
 * Remove only: the order of a two-pass sum is fixed (deterministic) and it needs no atomics; which
 * grid and slot array to write is the expert's choice, not a rewrite of one accumulator. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

/* A squeezed expression without a leading integer cast: `(int)grid` -> `grid`. */
static const char *uncast(const char *t)
{
    static const char *const casts[] = {"(int)", "(unsigned)", "(unsignedint)", "(longlong)", "(size_t)", NULL};
    for (const char *const *c = casts; *c; c++)
        if (!strncmp(t, *c, strlen(*c))) return t + strlen(*c);
    return t;
}

/* The index of the parameter named name of fn, or -1. */
/* The argument at k of a launch, or a null node. */
static TSNode launch_arg(const kl_launch_site *l, int k)
{
    if (k < 0 || (uint32_t)k >= ts_node_named_child_count(l->args)) return (TSNode){{0}, 0, 0};
    return ts_node_named_child(l->args, (uint32_t)k);
}

typedef struct tp_site {
    TSNode fn1, store, assign;  /* the first kernel, its `if (…) G[blockIdx.x] = r;`, the assignment */
    char g[64], value[256], type[64];
    bool device_array;          /* G is a __device__ array (else a pointer parameter of fn1) */
    int g_param;                /* not a __device__ array: G's index among fn1's parameters */
    unsigned l1, l2;            /* the launches (indices into the launch list) */
    char count_param[64];
    int count_index;            /* the second kernel's parameter given the first launch's grid */
    char k2[128];
    bool self;                  /* the kernel adds its own slots: launched for the partials, then once more
                                 * with one block over them (the CUDA samples' reductions) */
    TSNode first_top, final_top; /* self: the host's statements holding the first launch and the final one */
    char scratch[128], out[128];
    char why[300];
} tp_site;

typedef struct use_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode allowed[4];
    unsigned nallowed;
    unsigned line;
} use_scan;

static bool use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    if (u->line) return false;
    for (unsigned i = 0; i < u->nallowed; i++)
        if (ts_node_eq(n, u->allowed[i])) return false;
    if (rt_is(n, "identifier") && rt_text_is(u->ctx, n, u->name)) {
        TSNode p = ts_node_parent(n);
        /* its own declaration */
        if (rt_is(p, "array_declarator") || rt_is(p, "init_declarator") || rt_is(p, "pointer_declarator") ||
            rt_is(p, "parameter_declaration") || rt_is(p, "declaration"))
            return true;
        u->line = kl_ast_line(n);
    }
    return true;
}

/* The second kernel reads the slots only in `for (… b = S; b < M; …) acc += NAME[b];`, M a parameter.
 * The loop into *loop, M's parameter index into *pm. */
static bool reads_by_sum(const kl_rule_ctx *ctx, TSNode fn2, const char *name, TSNode *loop, int *pm, char *mname,
                         size_t msize, char *why, size_t wn)
{
    kl_affine_ctx *ax = NULL;
    if (kl_rules_affine(ctx, fn2, &ax, NULL) != KL_OK) {
        kl_snprintf(why, wn, "the second kernel cannot be analysed");
        return false;
    }
    bool ok = false;
    unsigned n = kl_affine_loop_count(ax);
    for (unsigned i = 0; i < n && !ok; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        if (L->kind != KL_LOOP_FOR || !L->var || !L->cmp || !L->bound || strcmp(L->cmp, "<")) continue;
        TSNode body = rt_field(L->node, "body");
        if (rt_is(body, "compound_statement")) {
            TSNode only = {{0}, 0, 0};
            unsigned cnt = 0;
            for (uint32_t k = 0; k < ts_node_named_child_count(body); k++)
                if (!rt_is(ts_node_named_child(body, k), "comment")) only = ts_node_named_child(body, k), cnt++;
            if (cnt != 1) continue;
            body = only;
        }
        if (!rt_is(body, "expression_statement")) continue;
        TSNode a = ts_node_named_child(body, 0);
        char op[8], rt[128], want[128];
        if (!rt_is(a, "assignment_expression")) continue;
        rt_text_unblank_to(ctx, rt_field(a, "operator"), op, sizeof op);
        rt_text_unblank_to(ctx, rt_field(a, "right"), rt, sizeof rt);
        kl_snprintf(want, sizeof want, "%s[%s]", name, L->var);
        if (strcmp(op, "+=") || strcmp(rt, want) || !rt_is(rt_field(a, "left"), "identifier")) continue;
        /* the count: a parameter of the kernel, never assigned */
        int k = kl_affine_param_index(ax, L->bound);
        if (k < 0 || kl_affine_assign_count(ax, L->bound) != 0) continue;
        /* the loop starts at a thread's own offset or 0, and steps forward */
        char st[64];
        kl_snprintf(st, sizeof st, "%s", L->start ? L->start : "");
        if (!L->step || L->step[0] == '-') continue;
        *loop = L->node;
        *pm = k;
        kl_snprintf(mname, msize, "%s", L->bound);
        ok = true;
    }
    kl_rules_affine_done(ctx, ax);
    if (!ok)
        kl_snprintf(why, wn, "the second kernel does not read %s only as `acc += %s[b]` in a loop over b < a count parameter",
                    name, name);
    return ok;
}

/* Is the condition `threadIdx.x == 0` (or `0 == threadIdx.x`, a local holding threadIdx.x)? */
static bool first_thread(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode c)
{
    c = kl_ast_unparen(c);
    if (rt_is(c, "condition_clause")) c = kl_ast_unparen(ts_node_named_child(c, 0));
    if (!rt_is(c, "binary_expression")) return false;
    char op[8], l[64], r[64];
    rt_text_unblank_to(ctx, rt_field(c, "operator"), op, sizeof op);
    rt_text_unblank_to(ctx, rt_field(c, "left"), l, sizeof l);
    rt_text_unblank_to(ctx, rt_field(c, "right"), r, sizeof r);
    if (strcmp(op, "==")) return false;
    TSNode x = !strcmp(r, "0") ? rt_field(c, "left") : !strcmp(l, "0") ? rt_field(c, "right") : (TSNode){{0}, 0, 0};
    if (ts_node_is_null(x)) return false;
    kl_affine af = {0};
    if (kl_affine_of(ax, x, &af) != KL_OK) return false;
    int64_t k = 0;
    bool ok = af.ok && af.nterms == 1 && kl_affine_coef_int(&af, "threadIdx.x", &k) && k == 1 && af.const_is_int &&
              af.const_int == 0;
    kl_affine_release(&af);
    return ok;
}

static bool atomic_type(const char *t)
{
    static const char *const ok[] = {"float", "double", "int", "unsigned", "unsigned int", NULL};
    for (const char *const *o = ok; *o; o++)
        if (!strcmp(t, *o)) return true;
    return false;
}

/* The element type of a declaration's specifiers (`__device__ float g[N]` -> float). */
static void elem_type(const kl_rule_ctx *ctx, TSNode decl, char *buf, size_t size)
{
    TSNode t = rt_field(decl, "type");
    char *tt = rt_text(ctx, t);
    kl_snprintf(buf, size, "%s", tt ? tt : "");
    free(tt);
}

static void analyse_self(const kl_rule_ctx *ctx, const kl_launch_sites *ls, const char *name, TSNode fn, int gp,
                         tp_site *s);

/* Analyse a kernel's per-block store, and the launches around it. */
static void analyse(const kl_rule_ctx *ctx, const kl_launch_sites *ls, const char *name, TSNode fn, kl_affine_ctx *ax,
                    TSNode st, tp_site *s)
{
    memset(s, 0, sizeof *s);
    s->fn1 = fn;
    s->store = st;
    TSNode cons = rt_field(st, "consequence");
    if (rt_is(cons, "compound_statement") && ts_node_named_child_count(cons) == 1) cons = ts_node_named_child(cons, 0);
    s->assign = ts_node_named_child(cons, 0);
    TSNode l = rt_field(s->assign, "left");
    rt_text_unblank_to(ctx, rt_field(l, "argument"), s->g, sizeof s->g);
    char *v = rt_text(ctx, rt_field(s->assign, "right"));
    kl_snprintf(s->value, sizeof s->value, "%s", v ? v : "");
    free(v);
    /* G: a __device__ array, or a pointer parameter */
    TSNode gd = {{0}, 0, 0};
    int gp = -1;
    if (rt_device_var(ctx->src, s->g, &gd)) {
        s->device_array = true;
        elem_type(ctx, gd, s->type, sizeof s->type);
    } else if ((gp = kl_affine_param_index(ax, s->g)) >= 0) {
        const kl_param_info *pi = kl_affine_param(ax, (unsigned)gp);
        s->g_param = gp;
        if (!pi->pointer) {
            kl_snprintf(s->why, sizeof s->why, "%s is not an array", s->g);
            return;
        }
        kl_snprintf(s->type, sizeof s->type, "%s", pi->elem ? pi->elem : "");
    } else {
        kl_snprintf(s->why, sizeof s->why, "%s is neither a __device__ array nor a pointer parameter of %s", s->g, name);
        return;
    }
    if (!atomic_type(s->type)) {
        kl_snprintf(s->why, sizeof s->why, "the slots of %s are %s, which atomicAdd does not add", s->g, s->type);
        return;
    }
    /* one launch of the kernel, followed in the same host function by a launch of the kernel that adds the slots */
    unsigned n1 = 0;
    for (unsigned i = 0; i < ls->count; i++)
        if (!strcmp(ls->items[i].kernel, name)) s->l1 = i, n1++;
    if (n1 > 1 && !s->device_array) {
        analyse_self(ctx, ls, name, fn, gp, s);
        return;
    }
    if (n1 != 1) {
        kl_snprintf(s->why, sizeof s->why, "%s is launched %u times in the file (one launch is followed)", name, n1);
        return;
    }
    const kl_launch_site *l1 = &ls->items[s->l1];
    char a1[128] = "";
    if (!s->device_array) rt_text_unblank_to(ctx, launch_arg(l1, gp), a1, sizeof a1);
    bool found = false;
    for (unsigned i = s->l1 + 1; i < ls->count && !found; i++) {
        const kl_launch_site *l2 = &ls->items[i];
        if (!ts_node_eq(l2->host_fn, l1->host_fn)) continue;
        TSNode fn2 = kl_ast_function_named(ctx->src, l2->kernel);
        if (ts_node_is_null(fn2)) continue;
        const char *gname = s->g;
        char pname[64] = "";
        if (s->device_array) {
            if (!rt_count_ident(ctx, kl_ast_function_body(fn2), s->g)) continue;
        } else {
            /* the parameter the first launch's array is passed to */
            TSNode ps = kl_ast_function_params(fn2);
            int k = 0;
            for (uint32_t p = 0; p < ts_node_named_child_count(ps) && !pname[0]; p++) {
                TSNode pd = ts_node_named_child(ps, p);
                if (!rt_is(pd, "parameter_declaration")) continue;
                char at[128];
                rt_text_unblank_to(ctx, launch_arg(l2, k), at, sizeof at);
                if (a1[0] && !strcmp(at, a1)) {
                    TSNode nm = kl_ast_declarator_name(rt_field(pd, "declarator"));
                    rt_text_unblank_to(ctx, nm, pname, sizeof pname);
                }
                k++;
            }
            if (!pname[0]) continue;
            gname = pname;
        }
        found = true;
        s->l2 = i;
        kl_snprintf(s->k2, sizeof s->k2, "%s", l2->kernel);
        if (!strcmp(l2->kernel, name)) {
            kl_snprintf(s->why, sizeof s->why,
                        "%s reads its own per-block results back in a second launch: its store is shared by both passes",
                        name);
            return;
        }
        unsigned n2 = 0;
        for (unsigned k = 0; k < ls->count; k++) n2 += !strcmp(ls->items[k].kernel, l2->kernel);
        if (n2 != 1) {
            kl_snprintf(s->why, sizeof s->why, "%s is launched %u times in the file (one launch is followed)", l2->kernel,
                        n2);
            return;
        }
        TSNode loop;
        if (!reads_by_sum(ctx, fn2, gname, &loop, &s->count_index, s->count_param, sizeof s->count_param, s->why,
                          sizeof s->why))
            return;
        /* nothing else in the second kernel uses the slots */
        use_scan u = {ctx, gname, {rt_field(loop, "body")}, 1, 0};
        kl_ast_walk(kl_ast_function_body(fn2), use_visit, &u);
        if (u.line) {
            kl_snprintf(s->why, sizeof s->why, "line %u uses %s besides the loop adding the slots", u.line, gname);
            return;
        }
        /* the count is the first launch's grid */
        char gt[160], ct[160];
        rt_text_unblank_to(ctx, l1->grid, gt, sizeof gt);
        rt_text_unblank_to(ctx, launch_arg(l2, s->count_index), ct, sizeof ct);
        if (strcmp(uncast(gt), uncast(ct))) {
            kl_snprintf(s->why, sizeof s->why,
                        "the launch at line %u passes %s slots to %s, not the grid of the launch at line %u (%s)",
                        kl_ast_line(l2->call), ct, l2->kernel, kl_ast_line(l1->call), gt);
            return;
        }
    }
    if (!found) {
        kl_snprintf(s->why, sizeof s->why, "no later launch of the host function reads the slots of %s", s->g);
        return;
    }
    /* the slots are written by the store only, in the whole file */
    if (s->device_array) {
        TSNode fn2 = kl_ast_function_named(ctx->src, ls->items[s->l2].kernel);
        use_scan u = {ctx, s->g, {s->assign, kl_ast_function_body(fn2)}, 2, 0};
        kl_ast_walk(kl_source_root(ctx->src), use_visit, &u);
        if (u.line) {
            kl_snprintf(s->why, sizeof s->why, "line %u uses %s besides the two kernels", u.line, s->g);
            return;
        }
    } else {
        use_scan u = {ctx, s->g, {s->assign}, 1, 0};
        kl_ast_walk(kl_ast_function_body(fn), use_visit, &u);
        if (u.line) {
            kl_snprintf(s->why, sizeof s->why, "line %u uses %s besides the store", u.line, s->g);
            return;
        }
    }
    /* the first launch is a statement of its own line: the zeroing goes before it */
    TSNode stmt = ts_node_parent(l1->call);
    if (!rt_is(stmt, "expression_statement") || !rt_is(ts_node_parent(stmt), "compound_statement")) {
        kl_snprintf(s->why, sizeof s->why, "the launch at line %u is not a statement of its own in a block",
                    kl_ast_line(l1->call));
        return;
    }
}

/* The statement of the host function's body that holds n. */
static TSNode host_top(TSNode host_fn, TSNode n)
{
    TSNode body = kl_ast_function_body(host_fn);
    while (!ts_node_is_null(n) && !ts_node_eq(ts_node_parent(n), body)) n = ts_node_parent(n);
    return n;
}

/* The samples' form: the kernel K(in, out, n) stores one sum per block into out; launch() runs it
 * for the partials (`K<<<G, …>>>(x, S, n)`, possibly in the branches of an if, the same G and S
 * each time), then once more with one block over them (`K<<<1, …>>>(S, OUT, G)`). With the store
 * an atomicAdd into out[0], the first launches add everything into S[0] (zeroed before them) and
 * the last one, given 1 element, adds S[0] into OUT[0] (zeroed before it). */
static void analyse_self(const kl_rule_ctx *ctx, const kl_launch_sites *ls, const char *name, TSNode fn, int gp,
                         tp_site *s)
{
    s->self = true;
    kl_snprintf(s->k2, sizeof s->k2, "%s", name);
    unsigned idx[16], n = 0;
    for (unsigned i = 0; i < ls->count && n < 16; i++)
        if (!strcmp(ls->items[i].kernel, name)) idx[n++] = i;
    const kl_launch_site *F = &ls->items[idx[n - 1]];
    char g0[160] = "", s0[128] = "", t[160];
    for (unsigned k = 0; k + 1 < n; k++) {
        const kl_launch_site *l = &ls->items[idx[k]];
        char gt[160], at[128];
        rt_text_unblank_to(ctx, l->grid, gt, sizeof gt);
        rt_text_unblank_to(ctx, launch_arg(l, gp), at, sizeof at);
        if (!ts_node_eq(l->host_fn, F->host_fn) || (k && (strcmp(gt, g0) || strcmp(at, s0)))) {
            kl_snprintf(s->why, sizeof s->why,
                        "the launches of %s before the last (line %u) do not all write the same slots over the same grid "
                        "in one host function",
                        name, kl_ast_line(F->call));
            return;
        }
        if (!k) {
            kl_snprintf(g0, sizeof g0, "%s", gt);
            kl_snprintf(s0, sizeof s0, "%s", at);
        }
    }
    rt_text_unblank_to(ctx, F->grid, t, sizeof t);
    char fo[128];
    rt_text_unblank_to(ctx, launch_arg(F, gp), fo, sizeof fo);
    if (strcmp(t, "1") || !strcmp(fo, s0)) {
        kl_snprintf(s->why, sizeof s->why,
                    "the last launch of %s (line %u) is not one block writing elsewhere than the slots %s", name,
                    kl_ast_line(F->call), s0);
        return;
    }
    /* the last launch reads the slots as its input and is given the first launches' grid as its count */
    int pin = -1, pn = -1;
    for (int k = 0; k < (int)ts_node_named_child_count(F->args); k++) {
        char at[160];
        rt_text_unblank_to(ctx, launch_arg(F, k), at, sizeof at);
        if (!strcmp(at, s0) && pin < 0) pin = k;
        else if (!strcmp(uncast(at), uncast(g0)) && pn < 0) pn = k;
    }
    if (pin < 0 || pn < 0) {
        kl_snprintf(s->why, sizeof s->why,
                    "the last launch of %s (line %u) does not read the slots %s over the first launches' grid (%s)", name,
                    kl_ast_line(F->call), s0, g0);
        return;
    }
    s->count_index = pn;
    TSNode ps = kl_ast_function_params(fn);
    for (uint32_t i = 0, k = 0; i < ts_node_named_child_count(ps); i++) {
        TSNode pd = ts_node_named_child(ps, i);
        if (!rt_is(pd, "parameter_declaration")) continue;
        if ((int)k++ == pn) rt_text_unblank_to(ctx, kl_ast_declarator_name(rt_field(pd, "declarator")), s->count_param,
                                    sizeof s->count_param);
    }
    s->l1 = idx[0];
    s->l2 = idx[n - 1];
    char *raw_s = rt_text(ctx, launch_arg(&ls->items[idx[0]], gp)), *raw_o = rt_text(ctx, launch_arg(F, gp));
    kl_snprintf(s->scratch, sizeof s->scratch, "%s", raw_s ? raw_s : s0);
    kl_snprintf(s->out, sizeof s->out, "%s", raw_o ? raw_o : fo);
    free(raw_s);
    free(raw_o);
    /* the slots' parameter is written by the store only */
    use_scan u = {ctx, s->g, {s->assign}, 1, 0};
    kl_ast_walk(kl_ast_function_body(fn), use_visit, &u);
    if (u.line) {
        kl_snprintf(s->why, sizeof s->why, "line %u uses %s besides the store", u.line, s->g);
        return;
    }
    s->first_top = host_top(F->host_fn, ls->items[idx[0]].call);
    s->final_top = host_top(F->host_fn, F->call);
    for (unsigned k = 0; k + 1 < n; k++)
        if (ts_node_eq(host_top(F->host_fn, ls->items[idx[k]].call), s->final_top) ||
            ts_node_start_byte(ls->items[idx[k]].call) > ts_node_start_byte(F->call))
            s->final_top = (TSNode){{0}, 0, 0};
    if (ts_node_is_null(s->first_top) || ts_node_is_null(s->final_top)) {
        kl_snprintf(s->why, sizeof s->why, "the last launch of %s (line %u) is not a statement after the others", name,
                    kl_ast_line(F->call));
        return;
    }
}

/* `if (threadIdx.x == 0) G[blockIdx.x] = r;` at the top level of the kernel. */
static bool per_block_store(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st)
{
    if (!rt_is(st, "if_statement") || !ts_node_is_null(rt_field(st, "alternative"))) return false;
    if (!first_thread(ctx, ax, rt_field(st, "condition"))) return false;
    TSNode cons = rt_field(st, "consequence");
    if (rt_is(cons, "compound_statement")) {
        if (ts_node_named_child_count(cons) != 1) return false;
        cons = ts_node_named_child(cons, 0);
    }
    if (!rt_is(cons, "expression_statement")) return false;
    TSNode a = ts_node_named_child(cons, 0);
    if (!rt_is(a, "assignment_expression")) return false;
    char op[8], idx[64];
    rt_text_unblank_to(ctx, rt_field(a, "operator"), op, sizeof op);
    TSNode l = rt_field(a, "left");
    if (strcmp(op, "=") || !rt_is(l, "subscript_expression") || !rt_is(rt_field(l, "argument"), "identifier")) return false;
    rt_text_unblank_to(ctx, kl_ast_subscript_index(l), idx, sizeof idx);
    return !strcmp(idx, "blockIdx.x");
}

typedef struct tp_run {
    kl_sites *out;
    const kl_site *site;
    kl_edits *edits;
    kl_error *err;
    bool found;
} tp_run;

/* Is n (a definition or declaration, or the template holding it) at the file's top level? */
static bool top_level(TSNode n)
{
    TSNode p = ts_node_parent(n);
    if (rt_is(p, "template_declaration")) p = ts_node_parent(p);
    return rt_is(p, "translation_unit");
}

/* Two kernels with f32 partials: the blocks add to a __device__ double (fresh name in acc) that a
 * one-thread kernel stores to G[0] just before the second kernel's launch: their definitions (after
 * G's declaration g_decl, or before the first kernel when G is a parameter) and that launch. */
static kl_status wide_edits(const kl_rule_ctx *ctx, const kl_launch_site *l1, const kl_launch_site *l2, const tp_site *s,
                            TSNode g_decl, const char *acc, const char *stream, kl_edits *out)
{
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    char store[64];
    rt_fresh_name(ctx, root, "kl_store_total", store, sizeof store);
    TSNode top = s->fn1;
    if (rt_is(ts_node_parent(top), "template_declaration")) top = ts_node_parent(top);
    uint32_t at = kl_ast_line_start(ctx->text, ts_node_start_byte(top));
    if (s->device_array && ts_node_end_byte(g_decl) < at) at = rt_line_end(ctx, ts_node_end_byte(g_decl));
    char *arg = NULL;
    if (!s->device_array) {
        arg = rt_text(ctx, launch_arg(l1, s->g_param));
        if (!arg) return KL_ERR_NOMEM;
    }
    kl_status st = s->device_array
                       ? kl_edits_addf(out, at, at,
                                       "\n// two-pass removed: the blocks' sum, added up in double, stored to %s[0] as f32\n"
                                       "__device__ double %s;\n__global__ void %s() { %s[0] = (float)%s; }\n",
                                       s->g, acc, store, s->g, acc)
                       : kl_edits_addf(out, at, at,
                                       "// two-pass removed: the blocks' sum, added up in double, stored to the slots' "
                                       "first element as f32\n__device__ double %s;\n"
                                       "__global__ void %s(float *slots) { slots[0] = (float)%s; }\n\n",
                                       acc, store, acc);
    TSNode stmt = ts_node_parent(l2->call);
    uint32_t before = kl_ast_line_start(ctx->text, ts_node_start_byte(stmt));
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
    if (st == KL_OK)
        st = kl_edits_addf(out, before, before, "%s%s<<<1, 1, 0, %s>>>(%s);\n", ind, store, stream, arg ? arg : "");
    free(arg);
    return st;
}

static kl_status rewrite(const kl_rule_ctx *ctx, const kl_launch_sites *ls, const tp_site *s, kl_edits *out)
{
    const kl_launch_site *l1 = &ls->items[s->l1], *l2 = &ls->items[s->l2];
    /* the store kernel's launch goes before the second launch's statement, which must be one; the
     * accumulator and that kernel at the file's top level, which the first kernel and G (when a
     * __device__ array) must be at too, so that every name reaches them unqualified */
    TSNode g_decl = {{0}, 0, 0};
    bool wide = !s->self && !strcmp(s->type, "float") &&
                rt_is(ts_node_parent(ts_node_parent(l2->call)), "compound_statement") && top_level(s->fn1) &&
                (!s->device_array || (rt_device_var(ctx->src, s->g, &g_decl) && top_level(g_decl)));
    char acc[64] = "";
    if (wide) rt_fresh_name(ctx, ts_tree_root_node(kl_source_tree(ctx->src)), "kl_total", acc, sizeof acc);
    kl_status st = wide ? kl_edits_addf(out, ts_node_start_byte(s->assign), ts_node_end_byte(s->assign),
                                        "atomicAdd(&%s, (double)(%s))", acc, s->value)
                        : kl_edits_addf(out, ts_node_start_byte(s->assign), ts_node_end_byte(s->assign),
                                        "atomicAdd(&%s[0], %s)", s->g, s->value);
    TSNode cnt = launch_arg(l2, s->count_index);
    if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(cnt), ts_node_end_byte(cnt), "1");
    char *stream = ts_node_is_null(l1->stream) ? kl_strdup("0") : rt_text(ctx, l1->stream);
    if (s->self) {
        /* zero the slots' first element before the first pass, the output's before the last */
        char ind[64];
        const char *outs[2] = {s->scratch, s->out};
        TSNode tops[2] = {s->first_top, s->final_top};
        for (unsigned k = 0; k < 2 && st == KL_OK && stream; k++) {
            uint32_t at = kl_ast_line_start(ctx->text, ts_node_start_byte(tops[k]));
            kl_rules_indent(ctx, ts_node_start_byte(tops[k]), ind, sizeof ind);
            st = kl_edits_addf(out, at, at, "%scudaMemsetAsync(%s, 0, sizeof(%s), %s);\n", ind, outs[k], s->type, stream);
        }
        free(stream);
        return stream ? st : KL_ERR_NOMEM;
    }
    TSNode stmt = ts_node_parent(l1->call);
    uint32_t at = kl_ast_line_start(ctx->text, ts_node_start_byte(stmt));
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
    if (!stream) return KL_ERR_NOMEM;
    if (st == KL_OK && (s->device_array || wide)) {
        char var[64];
        rt_fresh_name(ctx, l1->host_fn, "kl_sum", var, sizeof var);
        const char *type = wide ? "double" : s->type, *sym = wide ? acc : s->g;
        st = kl_edits_addf(out, at, at,
                           "%s%s *%s = nullptr;\n%scudaGetSymbolAddress((void **)&%s, %s);\n"
                           "%scudaMemsetAsync(%s, 0, sizeof(%s), %s);\n",
                           ind, type, var, ind, var, sym, ind, var, type, stream);
    } else if (st == KL_OK) {
        char *arg = rt_text(ctx, launch_arg(l1, s->g_param));
        st = arg ? kl_edits_addf(out, at, at, "%scudaMemsetAsync(%s, 0, sizeof(%s), %s);\n", ind, arg, s->type, stream)
                 : KL_ERR_NOMEM;
        free(arg);
    }
    if (st == KL_OK && wide) st = wide_edits(ctx, l1, l2, s, g_decl, acc, stream, out);
    free(stream);
    return st;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    tp_run *r = user;
    TSNode body = kl_ast_function_body(fn);
    kl_launch_sites ls;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) return KL_ERR_NOMEM;
    kl_status st = KL_OK;
    for (uint32_t i = 0; i < ts_node_named_child_count(body) && st == KL_OK; i++) {
        TSNode s0 = ts_node_named_child(body, i);
        if (!per_block_store(ctx, ax, s0)) continue;
        tp_site s;
        analyse(ctx, &ls, name, fn, ax, s0, &s);
        char id[256];
        kl_site_id(id, sizeof id, name, s0, NULL);
        if (r->site) {
            if (strcmp(id, r->site->id)) continue;
            r->found = true;
            if (s.why[0]) st = kl_rule_not_applicable(r->err, "%s", s.why);
            else if (rewrite(ctx, &ls, &s, r->edits) != KL_OK) st = kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
            break;
        }
        json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:b}", "partials", s.g, "dtype", s.type, "combine", s.k2, "count",
                              s.count_param, "device_array", s.device_array);
        if (!f) {
            st = KL_ERR_NOMEM;
            break;
        }
        if (s.why[0]) json_object_set_new(f, "why_not", json_string(s.why));
        char note[400];
        if (s.why[0]) kl_snprintf(note, sizeof note, "%s", s.why);
        else
            kl_snprintf(note, sizeof note, "one result per block in %s[blockIdx.x], added up by %s over %s slots", s.g,
                        s.k2, s.count_param);
        st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(s0), name, f, NULL, note);
    }
    kl_launch_sites_release(&ls);
    return st;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    tp_run r = {out, NULL, NULL, err, false};
    return kl_rules_each_function(ctx, "__global__", visit, &r, err);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    tp_run r = {NULL, site, out, err, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, &r, err);
    if (st == KL_OK && !r.found) return kl_rule_not_applicable(err, "no per-block store at %s", site->id);
    return st;
}

const kl_rule kl_rule_two_pass = {
    "two-pass",
    "a sum finished in two launches (one slot per block, a second kernel adding the slots) <- one accumulator "
    "every block adds to",
    NULL, 0, find, remove_site, NULL,
};
