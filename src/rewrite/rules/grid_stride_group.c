/* grid-stride, several loops over one grid (grid_stride.h): an expert's loops, for or while, proven
 * to run at most once per thread once the grid is sized from a size parameter, and removed. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/grid_stride.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

/* ---- several loops over one grid (remove only) -----------------------------------------------------
 * An expert's loops: an unrolled main loop `for (; i + K*G < B; i += U*G)` followed by its remainder
 * `for (; i < B; i += G)` over an index declared before them, and/or loops that declare their index
 * `for (T j = S + <index>; j < B; j += G)`, all stepping by G = the grid's thread count. Removal sizes
 * the grid from a size parameter N with N >= B - S for every loop (N >= 0 assumed: a size): then G >= N,
 * every loop runs at most once per thread, and a main loop (K >= 1) never runs. */

/* The operator of a binary expression, read from the text between its operands. */
static void binary_op(const kl_source *src, TSNode n, char *op, size_t size)
{
    TSNode l = ts_node_child_by_field_name(n, "left", 4), r = ts_node_child_by_field_name(n, "right", 5);
    const char *t = kl_source_text(src, NULL);
    size_t k = 0;
    op[0] = '\0';
    if (ts_node_is_null(l) || ts_node_is_null(r)) return;
    for (uint32_t i = ts_node_end_byte(l); i < ts_node_start_byte(r) && k + 1 < size; i++)
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\n') op[k++] = t[i];
    op[k] = '\0';
}

/* A cast to an integer type at least as wide as int. */
static bool int_cast(const kl_source *src, TSNode cast)
{
    char *t = kl_node_text(src, ts_node_child_by_field_name(cast, "type", 4));
    bool ok = t && !strstr(t, "char") && !strstr(t, "short") && !strstr(t, "*") &&
              (strstr(t, "int") || strstr(t, "size_t") || strstr(t, "long") || strstr(t, "unsigned"));
    free(t);
    return ok;
}

/* The value of a local declared at the top level of the function with an initializer and never
 * assigned again; a null node otherwise. */
static TSNode local_value(const kl_source *src, kl_affine_ctx *ax, TSNode fbody, const char *name)
{
    TSNode none = {0};
    if (kl_affine_assign_count(ax, name) != 1) return none;
    uint32_t c = ts_node_named_child_count(fbody);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(fbody, i);
        if (!rt_is(d, "declaration")) continue;
        uint32_t dc = ts_node_named_child_count(d);
        for (uint32_t k = 0; k < dc; k++) {
            TSNode id = ts_node_named_child(d, k);
            if (!rt_is(id, "init_declarator")) continue;
            TSNode nm = ts_node_child_by_field_name(id, "declarator", 10);
            if (rt_is(nm, "identifier") && kl_node_text_is(src, nm, name))
                return ts_node_child_by_field_name(id, "value", 5);
        }
    }
    return none;
}

typedef struct gs_prove {
    const kl_source *src;
    kl_affine_ctx *ax;
    TSNode fbody;
    const char *n;          /* the size parameter, assumed >= 0 */
} gs_prove;

/* 0 <= e <= n */
static bool le_size(const gs_prove *p, TSNode e, int depth)
{
    if (depth > 8) return false;
    e = kl_ast_unparen(e);
    if (rt_is(e, "cast_expression"))
        return int_cast(p->src, e) && le_size(p, ts_node_child_by_field_name(e, "value", 5), depth + 1);
    if (rt_is(e, "identifier")) {
        if (kl_node_text_is(p->src, e, p->n)) return true;
        char *name = kl_node_text(p->src, e);
        TSNode v = name ? local_value(p->src, p->ax, p->fbody, name) : (TSNode){0};
        free(name);
        return !ts_node_is_null(v) && le_size(p, v, depth + 1);
    }
    if (rt_is(e, "number_literal")) {
        int64_t v;
        return kl_const_eval(p->src, kl_affine_ctx_function(p->ax), e, false, &v, NULL, 0) && v == 0;
    }
    if (rt_is(e, "conditional_expression"))
        return le_size(p, ts_node_child_by_field_name(e, "consequence", 11), depth + 1) &&
               le_size(p, ts_node_child_by_field_name(e, "alternative", 11), depth + 1);
    if (rt_is(e, "binary_expression")) {
        char op[4];
        binary_op(p->src, e, op, sizeof op);
        int64_t v;
        TSNode r = ts_node_child_by_field_name(e, "right", 5);
        if ((!strcmp(op, "/") || !strcmp(op, ">>")) &&
            kl_const_eval(p->src, kl_affine_ctx_function(p->ax), r, false, &v, NULL, 0) && v >= (op[0] == '/' ? 1 : 0))
            return le_size(p, ts_node_child_by_field_name(e, "left", 4), depth + 1);
    }
    return false;
}

/* e >= 0 */
static bool nonneg(const gs_prove *p, TSNode e, int depth)
{
    if (depth > 8) return false;
    e = kl_ast_unparen(e);
    int64_t v;
    if (kl_const_eval(p->src, kl_affine_ctx_function(p->ax), e, false, &v, NULL, 0)) return v >= 0;
    if (le_size(p, e, depth)) return true;
    if (rt_is(e, "cast_expression"))
        return int_cast(p->src, e) && nonneg(p, ts_node_child_by_field_name(e, "value", 5), depth + 1);
    if (rt_is(e, "identifier")) {
        char *name = kl_node_text(p->src, e);
        TSNode val = name ? local_value(p->src, p->ax, p->fbody, name) : (TSNode){0};
        free(name);
        return !ts_node_is_null(val) && nonneg(p, val, depth + 1);
    }
    if (rt_is(e, "conditional_expression"))
        return nonneg(p, ts_node_child_by_field_name(e, "consequence", 11), depth + 1) &&
               nonneg(p, ts_node_child_by_field_name(e, "alternative", 11), depth + 1);
    if (rt_is(e, "binary_expression")) {
        char op[4];
        binary_op(p->src, e, op, sizeof op);
        if (!strcmp(op, "+") || !strcmp(op, "*") || !strcmp(op, "/") || !strcmp(op, ">>"))
            return nonneg(p, ts_node_child_by_field_name(e, "left", 4), depth + 1) &&
                   nonneg(p, ts_node_child_by_field_name(e, "right", 5), depth + 1);
    }
    return false;
}

/* Does p read a thread or block index? */
static bool reads_index(const kl_poly *p) { return kl_poly_depends(p, "threadIdx") || kl_poly_depends(p, "blockIdx"); }

/* Does p read a thread or block index or the grid's width? */
static bool reads_index_or_grid(const kl_poly *p) { return reads_index(p) || kl_poly_depends(p, "gridDim.x"); }

/* The addends of a sum (through parentheses), at most max; false when there are more. */
static bool addends(const kl_source *src, TSNode e, TSNode *out, unsigned *n, unsigned max)
{
    e = kl_ast_unparen(e);
    char op[4] = "";
    if (rt_is(e, "binary_expression")) binary_op(src, e, op, sizeof op);
    if (!strcmp(op, "+"))
        return addends(src, ts_node_child_by_field_name(e, "left", 4), out, n, max) &&
               addends(src, ts_node_child_by_field_name(e, "right", 5), out, n, max);
    if (*n == max) return false;
    out[(*n)++] = e;
    return true;
}

/* value = start + C*blockIdx.x + threadIdx.x (in any order; C an integer, or m*blockDim.x: with m >= 2
 * a block covers m blocks of elements per step, the pair form `i = blockIdx.x * blockDim.x * 2 +
 * threadIdx.x` of two loads a block apart): C into g and the start (an addend free of thread and block
 * indexes; a null node when there is none). The addends that hold the indexes must sum to exactly the
 * global thread index. False too when memory runs out (*oom set). */
static bool split_index(const kl_source *src, kl_affine_ctx *ax, TSNode value, kl_grid_index *g, TSNode *start,
                        bool *oom)
{
    TSNode ad[8];
    unsigned n = 0;
    *start = (TSNode){0};
    if (!addends(src, value, ad, &n, 8)) return false;
    static const kl_poly zero = {0};
    const kl_poly *sum = &zero;
    unsigned nstart = 0;
    for (unsigned i = 0; i < n; i++) {
        const kl_poly *p;
        if (kl_affine_poly_of(ax, ad[i], &p) != KL_OK) {
            *oom = true;
            return false;
        }
        if (!reads_index_or_grid(p)) {
            /* the start: one addend (more would need their sum) */
            if (nstart++) return false;
            *start = ad[i];
            continue;
        }
        if (p->opaque) return false;
        for (unsigned t = 0; t < p->n; t++)
            if (!kl_poly_mono_has(&p->m[t], "threadIdx") && !kl_poly_mono_has(&p->m[t], "blockIdx")) return false;
        if (!(sum = kl_affine_poly_add(ax, sum, p, 1))) {
            *oom = true;
            return false;
        }
    }
    return kl_poly_grid_index(sum, g) && (!g->sym || !strcmp(g->sym, "blockDim.x"));
}

/* Do the block sizes of two grid indexes have the same factor (none, or blockDim.x)? */
static bool same_grid_form(const kl_grid_index *a, const kl_grid_index *b)
{
    return (!a->sym && !b->sym) || (a->sym && b->sym && !strcmp(a->sym, b->sym));
}

/* ---- partial sums: where a loop's `s += e` goes after the loops --------------------------------------
 * A loop that runs once per thread instead of many leaves each thread's partial sum over fewer elements
 * (and more threads). The result is the same only when the partials reach memory by sums: every use of
 * a partial (and of what is computed from it) outside the loops is `+`, an assignment or `+=` into a local
 * or an array (which then carries it), a shuffle's value, atomicAdd's value, a return, or the argument of
 * a helper of the file whose body passes the same check; and nothing of the kernel is stored to global
 * memory except by atomicAdd (a store per block, `out[blockIdx.x] = s`, is refused before: its count
 * follows the grid). */

typedef struct gs_flow {
    const kl_source *src;
    TSNode fn;              /* the function checked */
    char *names[24];        /* the tainted names */
    uint32_t sa[24], sb[24]; /* where each is in scope: a local declared in a block, from its declaration to
                              * the block's end (another variable of the same name elsewhere is not it) */
    unsigned n;
    const uint32_t *ra, *rb;  /* the loops: uses inside them are the loops' own */
    unsigned nr;
    char why[300];
    int depth;              /* helper nesting */
} gs_flow;

static bool flow_add_scoped(gs_flow *f, TSNode id, uint32_t a, uint32_t b);

static bool flow_add(gs_flow *f, TSNode id) { return flow_add_scoped(f, id, 0, UINT32_MAX); }

/* A name declared at id: in scope from its declaration to the end of its block. */
static bool flow_add_decl(gs_flow *f, TSNode id)
{
    TSNode blk = id;
    while (!ts_node_is_null(blk) && !rt_is(blk, "compound_statement")) blk = ts_node_parent(blk);
    return flow_add_scoped(f, id, ts_node_start_byte(id), ts_node_is_null(blk) ? UINT32_MAX : ts_node_end_byte(blk));
}

static bool flow_add_scoped(gs_flow *f, TSNode id, uint32_t sa, uint32_t sb)
{
    char *t = kl_node_text(f->src, id);
    if (!t) return false;
    for (unsigned i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], t)) {
            free(t);
            return false;
        }
    if (f->n == 24) {
        free(t);
        kl_snprintf(f->why, sizeof f->why, "too many values computed from the partial sums to follow");
        return false;
    }
    f->sa[f->n] = sa;
    f->sb[f->n] = sb;
    f->names[f->n++] = t;
    return true;
}

/* The identifier an lvalue stores into: `a[i]`, `a.f`, `*p`, `(a)` down to a; a null node otherwise. */
static TSNode lvalue_base(TSNode l)
{
    for (int d = 0; d < 8; d++) {
        l = kl_ast_unparen(l);
        if (rt_is(l, "identifier")) return l;
        if (rt_is(l, "subscript_expression") || rt_is(l, "field_expression")) l = ts_node_child_by_field_name(l, "argument", 8);
        else if (rt_is(l, "pointer_expression")) l = ts_node_child_by_field_name(l, "argument", 8);
        else break;
    }
    return (TSNode){0};
}

static bool flow_helper(gs_flow *f, TSNode call, uint32_t argi);

/* One use of a tainted name: its context up to the statement. New names may be tainted (*grew). */
static void flow_use(gs_flow *f, TSNode id, bool *grew)
{
    TSNode n = id;
    for (int d = 0; d < 16 && !f->why[0]; d++) {
        TSNode p = ts_node_parent(n);
        const char *pt = ts_node_type(p);
        if (rt_is(p, "parenthesized_expression") || rt_is(p, "cast_expression")) {
            n = p;
            continue;
        }
        if (rt_is(p, "binary_expression")) {
            char op[4];
            binary_op(f->src, p, op, sizeof op);
            if (strcmp(op, "+")) break;
            n = p;
            continue;
        }
        if (rt_is(p, "conditional_expression") &&
            !ts_node_eq(ts_node_child_by_field_name(p, "condition", 9), n)) {
            n = p;
            continue;
        }
        if ((rt_is(p, "subscript_expression") || rt_is(p, "field_expression")) &&
            ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n)) {
            n = p; /* an element of a carrying array, a member of a carrying struct (`temp.warp_sums`) */
            continue;
        }
        if (rt_is(p, "assignment_expression")) {
            char op[4];
            binary_op(f->src, p, op, sizeof op);
            TSNode l = ts_node_child_by_field_name(p, "left", 4);
            if (ts_node_eq(l, n)) return; /* stored into: `s += e`, `s = e` */
            if (strcmp(op, "=") && strcmp(op, "+=")) break;
            TSNode b = lvalue_base(l);
            if (ts_node_is_null(b)) break;
            if (flow_add(f, b)) *grew = true;
            return;
        }
        if (rt_is(p, "init_declarator")) {
            TSNode b = kl_ast_declarator_name(ts_node_child_by_field_name(p, "declarator", 10));
            if (ts_node_is_null(b)) break;
            if (flow_add_decl(f, b)) *grew = true;
            return;
        }
        if (rt_is(p, "return_statement") || rt_is(p, "expression_statement")) return;
        if (rt_is(p, "argument_list")) {
            TSNode call = ts_node_parent(p);
            char *fname = kl_node_text(f->src, ts_node_child_by_field_name(call, "function", 8));
            uint32_t argi = 0;
            for (uint32_t a = 0; a < ts_node_named_child_count(p); a++)
                if (ts_node_eq(ts_node_named_child(p, a), n)) argi = a;
            bool shfl = fname && kl_str_starts(fname, "__shfl") && argi == 1;
            bool atomic = fname && !strcmp(fname, "atomicAdd") && argi == 1;
            free(fname);
            if (atomic) return;
            if (shfl || flow_helper(f, call, argi)) {
                n = call;
                continue;
            }
            if (!f->why[0]) {
                char *ct = kl_node_text(f->src, call);
                kl_snprintf(f->why, sizeof f->why, "line %u passes a partial sum to %.80s%s", kl_ast_line(call),
                            ct ? ct : "?", ct && strlen(ct) > 80 ? "…" : "");
                free(ct);
            }
            return;
        }
        (void)pt;
        break;
    }
    if (!f->why[0]) {
        TSNode st = n;
        while (!ts_node_is_null(ts_node_parent(st)) && !rt_is(ts_node_parent(st), "compound_statement"))
            st = ts_node_parent(st);
        char *t = kl_node_text(f->src, id);
        kl_snprintf(f->why, sizeof f->why,
                    "line %u uses the partial sum %s other than by a sum (+, +=, =, a shuffle, atomicAdd): one element "
                    "per thread would change what it computes",
                    kl_ast_line(ts_node_parent(n)), t ? t : "?");
        free(t);
    }
}

typedef struct flow_scan {
    gs_flow *f;
    bool grew;
} flow_scan;

static bool flow_visit(TSNode n, void *user)
{
    flow_scan *fs = user;
    gs_flow *f = fs->f;
    if (f->why[0]) return false;
    uint32_t a = ts_node_start_byte(n);
    for (unsigned r = 0; r < f->nr; r++)
        if (a >= f->ra[r] && ts_node_end_byte(n) <= f->rb[r]) return false;
    if (!rt_is(n, "identifier")) return true;
    for (unsigned i = 0; i < f->n; i++)
        if (a >= f->sa[i] && a < f->sb[i] && kl_node_text_is(f->src, n, f->names[i])) {
            TSNode p = ts_node_parent(n);
            /* the declaration of the name itself */
            if (rt_is(p, "init_declarator") && ts_node_eq(ts_node_child_by_field_name(p, "declarator", 10), n)) break;
            if (rt_is(p, "array_declarator") || rt_is(p, "pointer_declarator") || rt_is(p, "declaration")) break;
            flow_use(f, n, &fs->grew);
            break;
        }
    return true;
}

/* Every use of the tainted names in f->fn outside the loops, to a fixed point. */
static void flow_check(gs_flow *f)
{
    for (int round = 0; round < 8 && !f->why[0]; round++) {
        flow_scan fs = {f, false};
        kl_ast_walk(kl_ast_function_body(f->fn), flow_visit, &fs);
        if (!fs.grew) return;
    }
}

typedef struct helper_store {
    const kl_source *src;
    TSNode params;
    unsigned line;
} helper_store;

static bool helper_store_visit(TSNode n, void *user)
{
    helper_store *h = user;
    if (h->line) return false;
    if (!rt_is(n, "assignment_expression") && !rt_is(n, "update_expression")) return true;
    TSNode l = ts_node_child_by_field_name(n, rt_is(n, "assignment_expression") ? "left" : "argument",
                                           rt_is(n, "assignment_expression") ? 4 : 8);
    TSNode b = lvalue_base(l);
    if (ts_node_is_null(b)) return true;
    char *name = kl_node_text(h->src, b);
    bool global = name && rt_device_var(h->src, name, NULL);
    for (uint32_t i = 0; name && !global && i < ts_node_named_child_count(h->params); i++) {
        TSNode pd = ts_node_named_child(h->params, i);
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(pd, "declarator", 10));
        if (!ts_node_is_null(nm) && kl_node_text_is(h->src, nm, name) && !ts_node_eq(kl_ast_unparen(l), b))
            global = grid_stride__has_text(h->src, pd, "*");
    }
    free(name);
    if (global) h->line = kl_ast_line(n);
    return true;
}

/* A call to a function of the file: its body, with the parameter at argi tainted, must pass. */
static bool flow_helper(gs_flow *f, TSNode call, uint32_t argi)
{
    if (f->depth >= 2) return false;
    TSNode fnode = ts_node_child_by_field_name(call, "function", 8);
    while (rt_is(fnode, "field_expression") || rt_is(fnode, "qualified_identifier") || rt_is(fnode, "template_function")) {
        TSNode nx = rt_is(fnode, "field_expression")      ? ts_node_child_by_field_name(fnode, "field", 5)
                    : rt_is(fnode, "qualified_identifier") ? ts_node_child_by_field_name(fnode, "name", 4)
                                                           : ts_node_child_by_field_name(fnode, "name", 4);
        if (ts_node_eq(nx, fnode) || ts_node_is_null(nx)) break;
        fnode = nx;
    }
    char *name = kl_node_text(f->src, fnode);
    TSNode h = name ? kl_ast_function_named(f->src, name) : (TSNode){0};
    free(name);
    if (ts_node_is_null(h)) return false;
    TSNode ps = kl_ast_function_params(h);
    uint32_t k = 0;
    TSNode pd = {0};
    for (uint32_t i = 0; i < ts_node_named_child_count(ps); i++) {
        TSNode q = ts_node_named_child(ps, i);
        if (!rt_is(q, "parameter_declaration")) continue;
        if (k++ == argi) pd = q;
    }
    TSNode pn = kl_ast_declarator_name(ts_node_child_by_field_name(pd, "declarator", 10));
    if (ts_node_is_null(pn)) return false;
    gs_flow sub = {.src = f->src, .fn = h, .depth = f->depth + 1};
    flow_add(&sub, pn);
    flow_check(&sub);
    bool ok = !sub.why[0];
    /* the helper's own stores must not reach global memory either: none through its pointer
     * parameters or into a __device__ variable */
    helper_store hs = {f->src, ps, 0};
    kl_ast_walk(kl_ast_function_body(h), helper_store_visit, &hs);
    if (hs.line) ok = false;
    for (unsigned i = 0; i < sub.n; i++) free(sub.names[i]);
    return ok;
}

typedef struct acc_read_scan {
    const kl_source *src;
    const char *name;
    unsigned line;          /* the first use that is not the left of `+=` */
} acc_read_scan;

static bool acc_read_visit(TSNode n, void *user)
{
    acc_read_scan *a = user;
    if (a->line) return false;
    if (!rt_is(n, "identifier") || !kl_node_text_is(a->src, n, a->name)) return true;
    TSNode p = ts_node_parent(n);
    if (rt_is(p, "subscript_expression") && ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n)) {
        n = p; /* an element: `acc[u] += e` */
        p = ts_node_parent(p);
    }
    char op[4] = "";
    if (rt_is(p, "assignment_expression")) binary_op(a->src, p, op, sizeof op);
    if (!(ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n) && !strcmp(op, "+="))) a->line = kl_ast_line(n);
    return true;
}

typedef struct gstore_scan {
    const kl_source *src;
    kl_affine_ctx *ax;
    const uint32_t *ra, *rb;
    unsigned nr;
    unsigned line;
    bool per_block;         /* the store's place depends on blockIdx */
} gstore_scan;

/* A plain store to a pointer parameter or a __device__ variable of the file, outside the loops. */
static bool gstore_visit(TSNode n, void *user)
{
    gstore_scan *g = user;
    if (g->line) return false;
    for (unsigned r = 0; r < g->nr; r++)
        if (ts_node_start_byte(n) >= g->ra[r] && ts_node_end_byte(n) <= g->rb[r]) return false;
    if (!rt_is(n, "assignment_expression") && !rt_is(n, "update_expression")) return true;
    TSNode l = ts_node_child_by_field_name(n, rt_is(n, "assignment_expression") ? "left" : "argument",
                                           rt_is(n, "assignment_expression") ? 4 : 8);
    l = kl_ast_unparen(l);
    if (rt_is(l, "identifier")) {
        /* a scalar __device__ variable of the file */
        char *name = kl_node_text(g->src, l);
        bool global = name && rt_device_var(g->src, name, NULL);
        free(name);
        if (global) g->line = kl_ast_line(n);
        return true;
    }
    TSNode b = lvalue_base(l);
    if (ts_node_is_null(b)) return true;
    char *name = kl_node_text(g->src, b);
    int pi = name ? kl_affine_param_index(g->ax, name) : -1;
    bool global = pi >= 0 && kl_affine_param(g->ax, (unsigned)pi)->pointer;
    if (!global && name) global = rt_device_var(g->src, name, NULL);
    free(name);
    if (global) {
        g->line = kl_ast_line(n);
        g->per_block = grid_stride__has_text(g->src, l, "blockIdx");
    }
    return true;
}

static TSNode block_decl_of(const kl_source *src, TSNode fbody, TSNode stmt, const char *name, TSNode *value);

/* The declaration `T name = value;` before stmt in its block, or, for a loop in a branch of a
 * top-level `if`, before that if at the top level (a null node when none). */
static TSNode top_decl_of(const kl_source *src, TSNode fbody, TSNode stmt, const char *name, TSNode *value)
{
    TSNode block = ts_node_parent(stmt);
    if (!ts_node_eq(block, fbody)) {
        TSNode d = block_decl_of(src, block, stmt, name, value);
        if (!ts_node_is_null(d)) return d;
        TSNode top = stmt;
        while (!ts_node_is_null(ts_node_parent(top)) && !ts_node_eq(ts_node_parent(top), fbody)) top = ts_node_parent(top);
        stmt = top;
    }
    return block_decl_of(src, fbody, stmt, name, value);
}

static TSNode block_decl_of(const kl_source *src, TSNode fbody, TSNode stmt, const char *name, TSNode *value)
{
    TSNode found = {0};
    uint32_t c = ts_node_named_child_count(fbody);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(fbody, i);
        if (ts_node_start_byte(d) >= ts_node_start_byte(stmt)) break;
        if (!rt_is(d, "declaration") || ts_node_named_child_count(d) > 3) continue;
        TSNode id = ts_node_child_by_field_name(d, "declarator", 10);
        if (!rt_is(id, "init_declarator")) continue;
        TSNode nm = ts_node_child_by_field_name(id, "declarator", 10);
        if (rt_is(nm, "identifier") && kl_node_text_is(src, nm, name)) {
            found = d;
            *value = ts_node_child_by_field_name(id, "value", 5);
        }
    }
    return found;
}

/* After a tile loop (`while (i + K < B) { …; i += G; }`), the index may be read by the tail of the
 * thread's last tile only: `T j = i + c;` (c free of threads and blocks) with j read in `j < B` and
 * under an `if` testing it, or `i + c < B` itself. Whatever grid ran the loop, the tail then covers
 * what is left of the tile where the index stopped, and nothing when the index passed B. */
typedef struct tail_scan {
    const kl_source *src;
    const char *var;
    TSNode bound;
    const uint32_t *ra, *rb;
    unsigned nr;
    uint32_t skip_a, skip_b;
    unsigned line;          /* the first use that is not such a tail */
} tail_scan;

/* `x < B` with B the loop's bound (as written). */
static bool below_bound(const tail_scan *t, TSNode cmp, TSNode x)
{
    cmp = kl_ast_unparen(cmp);
    if (!rt_is(cmp, "binary_expression")) return false;
    char op[4];
    binary_op(t->src, cmp, op, sizeof op);
    char *b0 = kl_node_text(t->src, t->bound), *b1 = kl_node_text(t->src, ts_node_child_by_field_name(cmp, "right", 5));
    bool ok = !strcmp(op, "<") && b0 && b1 && !strcmp(b0, b1) &&
              ts_node_eq(kl_ast_unparen(ts_node_child_by_field_name(cmp, "left", 4)), kl_ast_unparen(x));
    free(b0);
    free(b1);
    return ok;
}

/* Every use of name in scope: `name < B` as an if's condition, or inside that if's consequence. */
static bool guarded_uses(const tail_scan *t, TSNode scope, const char *name, TSNode decl)
{
    typedef struct { TSNode n[32]; unsigned k; } ids;
    ids found = {{{{0}, 0, 0}}, 0};
    /* collect the identifiers */
    TSNode stack[256];
    unsigned sp = 0;
    stack[sp++] = scope;
    while (sp) {
        TSNode n = stack[--sp];
        if (ts_node_eq(n, decl)) continue;
        if (rt_is(n, "identifier") && kl_node_text_is(t->src, n, name)) {
            if (found.k == 32) return false;
            found.n[found.k++] = n;
        }
        for (uint32_t c = ts_node_named_child_count(n); c-- > 0 && sp < 256;) stack[sp++] = ts_node_named_child(n, c);
    }
    for (unsigned k = 0; k < found.k; k++) {
        bool ok = false;
        for (TSNode p = ts_node_parent(found.n[k]); !ts_node_is_null(p) && !ok; p = ts_node_parent(p)) {
            if (ts_node_eq(p, scope)) break;
            if (!rt_is(p, "if_statement")) continue;
            TSNode c = kl_ast_unparen(rt_field(p, "condition"));
            if (rt_is(c, "condition_clause")) c = kl_ast_unparen(ts_node_named_child(c, 0));
            TSNode cmp_l = kl_ast_unparen(rt_field(c, "left"));
            if (!rt_is(cmp_l, "identifier") || !kl_node_text_is(t->src, cmp_l, name) || !below_bound(t, c, cmp_l)) continue;
            /* the use is the condition's own, or under the consequence */
            TSNode cons = rt_field(p, "consequence");
            ok = ts_node_eq(found.n[k], cmp_l) ||
                 (ts_node_start_byte(found.n[k]) >= ts_node_start_byte(cons) &&
                  ts_node_end_byte(found.n[k]) <= ts_node_end_byte(cons));
        }
        if (!ok) return false;
    }
    return true;
}

static bool tail_visit(TSNode n, void *user)
{
    tail_scan *t = user;
    if (t->line) return false;
    uint32_t a = ts_node_start_byte(n);
    if (a >= t->skip_a && a < t->skip_b) return false;
    for (unsigned i = 0; i < t->nr; i++)
        if (a >= t->ra[i] && a < t->rb[i]) return false;
    if (!rt_is(n, "identifier") || !kl_node_text_is(t->src, n, t->var)) return true;
    /* i + c (c free of threads and blocks) */
    TSNode p = ts_node_parent(n), sum = n;
    if (rt_is(p, "binary_expression")) {
        char op[4];
        binary_op(t->src, p, op, sizeof op);
        TSNode other = ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n) ? ts_node_child_by_field_name(p, "right", 5)
                                                                                : ts_node_child_by_field_name(p, "left", 4);
        if (!strcmp(op, "+") && !grid_stride__has_text(t->src, other, "threadIdx") &&
            !grid_stride__has_text(t->src, other, "blockIdx") && !grid_stride__has_text(t->src, other, "gridDim"))
            sum = p;
    }
    TSNode q = ts_node_parent(sum);
    bool ok = false;
    if (rt_is(q, "init_declarator") && ts_node_eq(rt_field(q, "value"), sum)) {
        /* const T j = i + c; then j only under `if (j < B)` in the enclosing block */
        TSNode decl = ts_node_parent(q), nm = kl_ast_declarator_name(rt_field(q, "declarator"));
        char *name = kl_node_text(t->src, nm);
        ok = name && rt_is(decl, "declaration") && guarded_uses(t, ts_node_parent(decl), name, decl);
        free(name);
    } else if (rt_is(q, "binary_expression") && below_bound(t, q, sum)) {
        ok = rt_is(ts_node_parent(q), "condition_clause") || rt_is(ts_node_parent(q), "parenthesized_expression");
    }
    if (!ok) t->line = kl_ast_line(n);
    return false;
}

void grid_stride__partials_by_sums(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, char *const *names,
                                   unsigned n, const uint32_t *ra, const uint32_t *rb, unsigned nr, char *why,
                                   size_t size)
{
    const kl_source *src = ctx->src;
    gstore_scan gsc = {src, ax, ra, rb, nr, 0, false};
    kl_ast_walk(kl_ast_function_body(fn), gstore_visit, &gsc);
    gs_flow fl = {.src = src, .fn = fn, .ra = ra, .rb = rb, .nr = nr};
    for (unsigned a = 0; a < n && a < 24; a++) {
        fl.sa[fl.n] = 0, fl.sb[fl.n] = UINT32_MAX;
        fl.names[fl.n++] = kl_strdup(names[a]);
    }
    if (gsc.line && gsc.per_block)
        kl_snprintf(why, size,
                    "the loops add to %s, and line %u stores one value per block (indexed by blockIdx): a grid "
                    "sized to cover the elements changes how many partial sums there are, and nothing shows the "
                    "array holds them",
                    names[0], gsc.line);
    else if (gsc.line)
        kl_snprintf(why, size,
                    "the loops add to %s, and line %u stores to global memory other than by atomicAdd: one "
                    "element per thread changes the partial sums it may store",
                    names[0], gsc.line);
    else {
        flow_check(&fl);
        if (fl.why[0]) kl_snprintf(why, size, "%s", fl.why);
    }
    for (unsigned a = 0; a < fl.n; a++) free(fl.names[a]);
}

typedef struct gs_loopinfo {
    TSNode stmt, body, cond, decl, start, bound;  /* decl: the index's declaration (before, or in the for) */
    TSNode step;            /* a while loop: the statement stepping its index, the body's last */
    char *var;
    long long u, k;         /* steps u grids; the condition is var + k grids < bound */
    bool declares;          /* the for declares its index */
    bool tile;              /* a while over whole tiles: var + K < bound, K >= 0 not a multiple of the grid */
    bool keep;              /* a while whose index is read after it: its step stays (the if leaves the index
                             * where the loop, run at most once, left it) */
} gs_loopinfo;

/* Fills k's group fields and returns GS_OK, or says why (GS_FORM: not this shape; GS_PROOF: the shape,
 * but not provably one element per thread). */
int grid_stride__analyse_group(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, const TSNode *loops, unsigned nl,
                         grid_stride__kernel *k, char *why, size_t size)
{
    const kl_source *src = ctx->src;
    TSNode fbody = kl_ast_function_body(fn);
    if (nl > GS_MAXLOOPS) {
        kl_snprintf(why, size, "%u grid-stride loops in the kernel", nl);
        return GS_FORM;
    }
    gs_loopinfo li[GS_MAXLOOPS];
    memset(li, 0, sizeof li);
    kl_grid_index g = {0};
    bool oom = false;
    int level = GS_OK;
    for (unsigned i = 0; i < nl && level == GS_OK; i++) {
        gs_loopinfo *L = &li[i];
        TSNode s = loops[i];
        unsigned line = kl_ast_line(s);
        L->stmt = s;
        L->body = ts_node_child_by_field_name(s, "body", 4);
        TSNode init = ts_node_child_by_field_name(s, "initializer", 11);
        TSNode cond = kl_ast_unparen(grid_stride__loop_cond(s));
        TSNode upd = ts_node_child_by_field_name(s, "update", 6);
        if (rt_is(s, "while_statement")) L->step = grid_stride__while_step(s, &upd);
        L->cond = cond;
        /* the condition: var < B or var + P < B */
        char op[4] = "";
        if (rt_is(cond, "binary_expression")) binary_op(src, cond, op, sizeof op);
        TSNode lhs = rt_is(cond, "binary_expression") ? kl_ast_unparen(ts_node_child_by_field_name(cond, "left", 4))
                                                         : (TSNode){0};
        TSNode pnode = {0}, vnode = lhs;
        if (rt_is(lhs, "binary_expression")) {
            char op2[4];
            binary_op(src, lhs, op2, sizeof op2);
            vnode = strcmp(op2, "+") ? (TSNode){0} : ts_node_child_by_field_name(lhs, "left", 4);
            pnode = ts_node_child_by_field_name(lhs, "right", 5);
        }
        if (strcmp(op, "<") || !rt_is(vnode, "identifier")) {
            kl_snprintf(why, size, "the loop condition at line %u is not <index> < <an invariant bound>", line);
            level = GS_FORM;
            break;
        }
        L->var = kl_node_text(src, vnode);
        L->bound = ts_node_child_by_field_name(cond, "right", 5);
        /* the index: declared by the for, or at the top level before it */
        TSNode value = {0};
        if (rt_is(init, "declaration") &&
            rt_is(ts_node_child_by_field_name(init, "declarator", 10), "init_declarator")) {
            TSNode idecl = ts_node_child_by_field_name(init, "declarator", 10);
            if (!kl_node_text_is(src, ts_node_child_by_field_name(idecl, "declarator", 10), L->var ? L->var : "")) {
                kl_snprintf(why, size, "the loop at line %u declares one index and tests another", line);
                level = GS_FORM;
                break;
            }
            L->decl = init;
            L->declares = true;
            value = ts_node_child_by_field_name(idecl, "value", 5);
        } else if (ts_node_is_null(init)) {
            L->decl = top_decl_of(src, fbody, s, L->var ? L->var : "", &value);
        }
        if (ts_node_is_null(L->decl) || ts_node_is_null(value)) {
            kl_snprintf(why, size, "the grid-stride loop at line %u does not declare its index", line);
            level = GS_FORM;
            break;
        }
        /* start + the global thread index */
        kl_grid_index pg;
        TSNode e = kl_ast_unparen(value);
        if (!split_index(src, ax, e, &pg, &L->start, &oom)) {
            kl_snprintf(why, size, "the index of the loop at line %u is not <start> + blockIdx.x * <block> + threadIdx.x",
                        line);
            level = GS_FORM;
            break;
        }
        if (i == 0) g = pg;
        else if (!same_grid_form(&pg, &g)) {
            kl_snprintf(why, size, "the loops at lines %u and %u index different grids", kl_ast_line(loops[0]), line);
            level = GS_FORM;
            break;
        } else if (pg.coef < g.coef) {
            /* `if (nIsPow2)` pairs a block apart, else one element: the grid is sized by the smaller step,
             * and covers the other loop too (it steps by more) */
            g = pg;
        }
        /* the step: var += u grids */
        char aop[4] = "";
        if (rt_is(upd, "assignment_expression")) binary_op(src, upd, aop, sizeof aop);
        TSNode ul = ts_node_child_by_field_name(upd, "left", 4);
        if (!strcmp(aop, "+=") && rt_is(ul, "identifier") && kl_node_text_is(src, ul, L->var)) {
            const kl_poly *ps;
            oom |= kl_affine_poly_of(ax, ts_node_child_by_field_name(upd, "right", 5), &ps) != KL_OK;
            L->u = kl_poly_grid_multiple(ps, &pg);
        }
        if (!ts_node_is_null(pnode)) {
            const kl_poly *pp;
            oom |= kl_affine_poly_of(ax, pnode, &pp) != KL_OK;
            L->k = kl_poly_grid_multiple(pp, &pg);
            gs_prove pz = {src, ax, fbody, ""};
            if (L->k == 0 && L->u == 1 && rt_is(s, "while_statement") && !reads_index_or_grid(pp) &&
                nonneg(&pz, pnode, 0)) {
                /* a tile of loads a block apart, whole tiles only: `while (i + (LOADS - 1) * BLOCK < n) { …;
                 * i += one grid; }`; with one grid covering n it runs at most once (i + G + K >= n, K >= 0) */
                L->tile = true;
            } else if (L->k == 0) {
                L->u = 0;
            }
        }
        char *ut = kl_node_text(src, upd);
        bool main_loop = L->u >= 2 && L->k >= 1 && !L->declares;
        if (L->u == 0 || (!main_loop && (L->u != 1 || L->k != 0))) {
            kl_snprintf(why, size, "the loop at line %u steps by %s, not one grid of threads (several elements per step?)",
                        line, ut ? ut : "?");
            level = GS_FORM;
        }
        free(ut);
        const kl_poly *pb;
        oom |= kl_affine_poly_of(ax, L->bound, &pb) != KL_OK;
        if (level == GS_OK && reads_index_or_grid(pb)) {
            kl_snprintf(why, size, "the bound of the loop at line %u depends on the thread or the grid", line);
            level = GS_FORM;
        }
        /* an unrolled loop is followed by its remainder: the next statement, the same index and bound */
        if (level == GS_OK && i > 0 && li[i - 1].u >= 2) {
            TSNode nx = rt_next_stmt(li[i - 1].stmt);
            char *b0 = kl_node_text(src, li[i - 1].bound), *b1 = kl_node_text(src, L->bound);
            if (!ts_node_eq(nx, s) || L->declares || L->u != 1 || strcmp(L->var, li[i - 1].var) || !b0 || !b1 ||
                strcmp(b0, b1)) {
                kl_snprintf(why, size, "the unrolled loop at line %u is not followed by its remainder over %s < %s",
                            kl_ast_line(li[i - 1].stmt), li[i - 1].var, b0 ? b0 : "?");
                level = GS_FORM;
            }
            free(b0);
            free(b1);
        }
    }
    if (oom) {
        kl_snprintf(why, size, "out of memory");
        level = GS_FORM;
    }
    if (level == GS_OK && li[nl - 1].u >= 2) {
        char *b0 = kl_node_text(src, li[nl - 1].bound);
        kl_snprintf(why, size, "the unrolled loop at line %u is not followed by its remainder over %s < %s",
                    kl_ast_line(li[nl - 1].stmt), li[nl - 1].var, b0 ? b0 : "?");
        free(b0);
        level = GS_FORM;
    }
    uint32_t ra_[GS_MAXRANGES], rt_[GS_MAXRANGES];
    unsigned nr = 0;
    char *accum[GS_MAXACCUM];
    unsigned naccum = 0;
    /* each index is used only by its loops (and its declaration) */
    for (unsigned i = 0; i < nl && level == GS_OK; i++) {
        nr = 0;
        for (unsigned j = 0; j < nl; j++)
            if (!strcmp(li[j].var, li[i].var) && li[j].declares == li[i].declares &&
                (li[i].declares ? j == i : true)) {
                ra_[nr] = ts_node_start_byte(li[j].stmt);
                rt_[nr++] = ts_node_end_byte(li[j].stmt);
            }
        grid_stride__use_scan us = {src, li[i].var, ra_, rt_, nr, ts_node_start_byte(li[i].decl), ts_node_end_byte(li[i].decl), 0,
                       NULL};
        kl_ast_walk(fbody, grid_stride__use_visit, &us);
        bool whiles = !li[i].declares;
        for (unsigned j = 0; j < nl; j++)
            if (!strcmp(li[j].var, li[i].var) && (ts_node_is_null(li[j].step) || li[j].u != 1 || !li[j].tile))
                whiles = false;
        if (us.line && whiles) {
            tail_scan ts = {src, li[i].var, li[i].bound, ra_, rt_, nr, ts_node_start_byte(li[i].decl),
                            ts_node_end_byte(li[i].decl), 0};
            kl_ast_walk(fbody, tail_visit, &ts);
            if (ts.line) {
                kl_snprintf(why, size,
                            "%s is also used outside the loops (line %u), not as the tail of its last tile "
                            "(`T j = %s + c; if (j < bound) …`)",
                            li[i].var, ts.line, li[i].var);
                level = GS_PROOF;
                whiles = false;
                us.line = 0;
            }
        }
        if (us.line && whiles) {
            /* read after the loops (a tail over the last tile): each while keeps its step, so the index
             * ends where the loop, run at most once, would have left it */
            for (unsigned j = 0; j < nl; j++)
                if (!strcmp(li[j].var, li[i].var)) li[j].keep = true;
        } else if (us.line) {
            kl_snprintf(why, size, "%s is also used outside the loops (line %u)", li[i].var, us.line);
            level = GS_PROOF;
        }
        if (level == GS_OK && li[i].u == 1 && ts_node_is_null(li[i].step))
            grid_stride__check_body_acc(src, fbody, li[i].stmt, li[i].body, li[i].body, li[i].var, accum, &naccum, why,
                                        size);
        else if (level == GS_OK && li[i].u == 1) {
            /* a while's body up to its step */
            TSNode first = ts_node_named_child(li[i].body, 0), before = rt_prev_stmt(li[i].step);
            if (!ts_node_is_null(before) && !ts_node_eq(li[i].step, first))
                grid_stride__check_body_acc(src, fbody, li[i].stmt, first, before, li[i].var, accum, &naccum, why,
                                            size);
        }
        if (why[0]) level = GS_PROOF;
    }
    for (unsigned a = 0; a < naccum && level == GS_OK; a++) {
        /* inside the loops a partial sum is only added to: a read would see the elements before */
        acc_read_scan ar = {src, accum[a], 0};
        for (unsigned i = 0; i < nl && !ar.line; i++) kl_ast_walk(li[i].body, acc_read_visit, &ar);
        if (ar.line) {
            kl_snprintf(why, size, "the body updates %s and reads it (line %u): it would carry over between elements",
                        accum[a], ar.line);
            level = GS_PROOF;
        }
    }
    if (level == GS_OK && naccum) {
        /* partial sums: they must reach memory by sums only (gs_flow) */
        nr = 0;
        for (unsigned i = 0; i < nl; i++) {
            ra_[nr] = ts_node_start_byte(li[i].stmt);
            rt_[nr++] = ts_node_end_byte(li[i].stmt);
        }
        grid_stride__partials_by_sums(ctx, fn, ax, accum, naccum, ra_, rt_, nr, why, size);
        if (why[0]) level = GS_PROOF;
    }
    for (unsigned a = 0; a < naccum; a++) free(accum[a]);
    /* a size parameter N covering every loop: 0 <= bound <= N and start >= 0 */
    const char *size_param = NULL;
    for (unsigned pi = 0; pi < kl_affine_param_count(ax) && level == GS_OK && !size_param; pi++) {
        const kl_param_info *prm = kl_affine_param(ax, pi);
        if (prm->pointer || !prm->elem || strstr(prm->elem, "bool") || strstr(prm->elem, "float") ||
            strstr(prm->elem, "double") || strstr(prm->elem, "char"))
            continue;
        gs_prove pr = {src, ax, fbody, prm->name};
        bool all = true;
        for (unsigned i = 0; i < nl && all; i++)
            all = le_size(&pr, li[i].bound, 0) && (ts_node_is_null(li[i].start) || nonneg(&pr, li[i].start, 0));
        if (all) size_param = prm->name;
    }
    if (level == GS_OK && !size_param) {
        kl_snprintf(why, size,
                    "cannot show that the loops from line %u cover at most <a size parameter> indices each "
                    "(every bound at most the parameter, every start at least 0)",
                    kl_ast_line(loops[0]));
        level = GS_PROOF;
    }
    if (level == GS_OK) {
        /* the grid's size matters nowhere else */
        nr = 0;
        for (unsigned i = 0; i < nl && nr + 3 < GS_MAXRANGES; i++) {
            ra_[nr] = ts_node_start_byte(li[i].stmt);
            rt_[nr++] = li[i].u >= 2 ? ts_node_end_byte(li[i].stmt) : ts_node_start_byte(li[i].body);
            if (!ts_node_is_null(li[i].step)) {
                /* a while's step is its header's update (one kept advances the index past the bound:
                 * what reads it after finds it where the last iteration of any grid leaves it) */
                ra_[nr] = ts_node_start_byte(li[i].step);
                rt_[nr++] = ts_node_end_byte(li[i].step);
            }
            if (!li[i].declares) {
                ra_[nr] = ts_node_start_byte(li[i].decl);
                rt_[nr++] = ts_node_end_byte(li[i].decl);
            }
        }
        grid_stride__grid_free(ctx, fn, ra_, rt_, &nr, why, size);
        if (why[0]) level = GS_PROOF;
    }
    if (level == GS_OK) {
        free(k->var);
        free(k->bound);
        free(k->stride);
        free(k->type);
        free(k->init);
        free(k->cond);
        k->init = k->cond = NULL;
        k->group = true;
        k->ng = nl;
        for (unsigned i = 0; i < nl; i++) {
            k->gl[i] = li[i].stmt;
            k->gkind[i] = li[i].u >= 2 ? 0 : li[i].declares ? 2 : 1;
            k->gkeep[i] = li[i].keep;
        }
        k->block0 = grid_stride__has_block0(src, fn);
        k->stmt = loops[0];
        k->body = li[0].body;
        k->decl = li[0].decl;
        k->var = kl_strdup(li[0].var);
        k->bound = kl_strdup(size_param);
        k->type = grid_stride__decl_type(src, li[0].decl);
        kl_strbuf sb = KL_STRBUF_INIT;
        if (g.sym && g.coef > 1) kl_strbuf_addf(&sb, "%lld * blockDim.x * gridDim.x", (long long)g.coef);
        else if (g.sym) kl_strbuf_adds(&sb, "blockDim.x * gridDim.x");
        else kl_strbuf_addf(&sb, "%lld * gridDim.x", (long long)g.coef);
        k->stride = kl_strbuf_detach(&sb, NULL);
        kl_strbuf_release(&sb);
        k->coef = g.sym ? 0 : g.coef;
        k->mul = g.sym ? g.coef : 0;
    }
    for (unsigned i = 0; i < nl; i++) free(li[i].var);
    return level;
}

/* Several loops: an unrolled main loop goes (with a `// grid-stride` line above it), a loop over an
 * index declared before becomes `if (cond) body`, one declaring its index `T j = E; if (cond) body`. */
kl_status grid_stride__remove_group(const kl_rule_ctx *ctx, const grid_stride__kernel *k, kl_edits *out)
{
    kl_status st = KL_OK;
    for (unsigned i = 0; i < k->ng && st == KL_OK; i++) {
        TSNode s = k->gl[i];
        TSNode body = ts_node_child_by_field_name(s, "body", 4);
        if (k->gkind[i] == 0) {
            uint32_t a, b;
            kl_rules_line_range(ctx, s, "grid-stride", &a, &b);
            st = kl_edits_add(out, a, b, "");
            continue;
        }
        if (rt_is(s, "while_statement")) {
            /* `while (cond) body` -> `if (cond) body`: the keyword alone (the condition stays as written) */
            st = kl_edits_add(out, ts_node_start_byte(s), ts_node_start_byte(s) + 5, "if");
            TSNode upd, step = grid_stride__while_step(s, &upd);
            if (st == KL_OK && !ts_node_is_null(step) && !k->gkeep[i]) {
                /* the step goes with the loop (its index is used by its loops only) */
                uint32_t a, b;
                kl_rules_line_range(ctx, step, NULL, &a, &b);
                st = kl_edits_add(out, a, b, "");
            }
            continue;
        }
        char *cond = kl_node_text(ctx->src, grid_stride__loop_cond(s));
        kl_strbuf head = KL_STRBUF_INIT;
        if (k->gkind[i] == 2) {
            TSNode init = ts_node_child_by_field_name(s, "initializer", 11);
            TSNode idecl = ts_node_child_by_field_name(init, "declarator", 10);
            char *type = grid_stride__decl_type(ctx->src, init);
            char *var = kl_node_text(ctx->src, ts_node_child_by_field_name(idecl, "declarator", 10));
            char *val = kl_node_text(ctx->src, ts_node_child_by_field_name(idecl, "value", 5));
            char ind[64];
            kl_rules_indent(ctx, ts_node_start_byte(s), ind, sizeof ind);
            bool own_line = kl_rules_starts_line(ctx, ts_node_start_byte(s));
            if (type && var && val)
                kl_strbuf_addf(&head, "%s %s = %s;%s%s", type, var, val, own_line ? "\n" : " ", own_line ? ind : "");
            else
                head.failed = true;
            free(type);
            free(var);
            free(val);
        }
        kl_strbuf_addf(&head, "if (%s) ", cond ? cond : "");
        st = head.failed || !cond ? KL_ERR_NOMEM
                                  : kl_edits_add(out, ts_node_start_byte(s), ts_node_start_byte(body), kl_strbuf_str(&head));
        kl_strbuf_release(&head);
        free(cond);
        TSNode upd, step = grid_stride__while_step(s, &upd);
        if (st == KL_OK && !ts_node_is_null(step) && !k->gkeep[i]) {
            /* a while's step goes with the loop (its index is used by its loops only) */
            uint32_t a, b;
            kl_rules_line_range(ctx, step, NULL, &a, &b);
            st = kl_edits_add(out, a, b, "");
        }
    }
    /* a local holding the grid's stride goes when only the loops' steps used it */
    TSNode fbody = kl_ast_function_body(kl_ast_enclosing_function(k->gl[0]));
    uint32_t ra[GS_MAXLOOPS], rb[GS_MAXLOOPS];
    unsigned nr = 0;
    for (unsigned i = 0; i < k->ng; i++) {
        TSNode s = k->gl[i];
        TSNode upd = ts_node_child_by_field_name(s, "update", 6);
        if (rt_is(s, "while_statement")) grid_stride__while_step(s, &upd);
        if (k->gkeep[i]) continue; /* its step stays, and what it reads */
        ra[nr] = ts_node_start_byte(k->gkind[i] == 0 ? s : upd);
        rb[nr++] = ts_node_end_byte(k->gkind[i] == 0 ? s : upd);
    }
    uint32_t c = ts_node_named_child_count(fbody);
    for (uint32_t i = 0; i < c && st == KL_OK; i++) {
        TSNode d = ts_node_named_child(fbody, i);
        if (!rt_is(d, "declaration") || ts_node_start_byte(d) >= ts_node_start_byte(k->gl[0]) ||
            !grid_stride__has_text(ctx->src, d, "gridDim") || grid_stride__has_text(ctx->src, d, "blockIdx"))
            continue;
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(d, "declarator", 10));
        char *name = ts_node_is_null(nm) ? NULL : kl_node_text(ctx->src, nm);
        if (!name || ts_node_named_child_count(d) > 3) {
            free(name);
            continue;
        }
        grid_stride__use_scan u = {ctx->src, name, ra, rb, nr, ts_node_start_byte(d), ts_node_end_byte(d), 0, NULL};
        kl_ast_walk(fbody, grid_stride__use_visit, &u);
        if (!u.line) {
            uint32_t a, b;
            kl_rules_line_range(ctx, d, NULL, &a, &b);
            st = kl_edits_add(out, a, b, "");
        }
        free(name);
    }
    return st;
}

