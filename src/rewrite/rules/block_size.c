/* block-size: the threads per block at a launch site, and the compile-time constant tied to it.
 * A 1-D block moves between 64 … 1024 threads (canonical 256); a 2-D block dim3(X, Y) moves both
 * extents (canonical 16x16), under the rules of the "2-D blocks" section below (docs/rules.md). */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/block_size.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const threads_values[] = {"64", "128", "256", "512", "1024", NULL};
static const char *const extent_values[] = {"8", "16", "32", "64", NULL};
static const kl_rule_param bs_params[] = {
    {"threads", threads_values, "256"}, /* a 1-D block */
    {"bx", extent_values, "32"},        /* a 2-D block: threads across … */
    {"by", extent_values, "8"},         /* … and down */
};

/* The canonical "simplest" block size the backward walk returns to. */
#define BS_NAIVE 256



static void trim_range(const char *t, uint32_t *a, uint32_t *b)
{
    while (*a < *b && (t[*a] == ' ' || t[*a] == '\t')) (*a)++;
    while (*b > *a && (t[*b - 1] == ' ' || t[*b - 1] == '\t' || t[*b - 1] == '\r' || t[*b - 1] == '\n')) (*b)--;
}

/* A declaration (top level or in fn) `[static] [constexpr|const] int NAME = v;` or `dim3 NAME(…)`:
 * the declaration and the value node. */
static bool find_decl(const kl_source *src, TSNode scope, const char *name, TSNode *decl, TSNode *value, TSNode *dnode)
{
    uint32_t c = ts_node_named_child_count(scope);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(scope, i);
        if (!rt_is(d, "declaration")) continue;
        uint32_t dc = ts_node_named_child_count(d);
        for (uint32_t k = 0; k < dc; k++) {
            TSNode x = ts_node_named_child(d, k);
            TSNode nm = {0}, v = {0};
            if (rt_is(x, "init_declarator")) {
                nm = ts_node_child_by_field_name(x, "declarator", 10);
                v = ts_node_child_by_field_name(x, "value", 5);
            } else if (rt_is(x, "function_declarator")) { /* dim3 block(T) read as a prototype */
                nm = ts_node_child_by_field_name(x, "declarator", 10);
                v = ts_node_child_by_field_name(x, "parameters", 10);
            }
            if (rt_is(nm, "identifier") && kl_node_text_is(src, nm, name)) {
                *decl = d;
                *value = v;
                *dnode = x;
                return true;
            }
        }
    }
    return false;
}

/* Does scope (a function body, the file) hold `using namespace ns;` at its top level? */
static bool uses_namespace(const kl_source *src, TSNode scope, TSNode ns)
{
    uint32_t c = ts_node_named_child_count(scope);
    for (uint32_t i = 0; i < c; i++) {
        TSNode u = ts_node_named_child(scope, i);
        if (!rt_is(u, "using_declaration") || ts_node_named_child_count(u) != 1) continue;
        char *t = kl_node_text(src, u);
        bool yes = t && strstr(t, "namespace");
        free(t);
        if (!yes) continue;
        char *want = kl_node_text(src, ns), *got = kl_node_text(src, ts_node_named_child(u, 0));
        yes = want && got && !strcmp(want, got);
        free(want);
        free(got);
        if (yes) return true;
    }
    return false;
}

/* find_decl in the host function, the file, then the file's namespaces the host function or the
 * file opens with `using namespace` (`namespace cfg { constexpr int THREADS = …; }`). */
static bool find_decl_host(const kl_source *src, TSNode host_fn, const char *name, TSNode *decl, TSNode *value,
                           TSNode *dnode)
{
    TSNode body = kl_ast_function_body(host_fn), root = kl_source_root(src);
    if (find_decl(src, body, name, decl, value, dnode) || find_decl(src, root, name, decl, value, dnode)) return true;
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode ns = ts_node_named_child(root, i);
        if (!rt_is(ns, "namespace_definition")) continue;
        TSNode nm = ts_node_child_by_field_name(ns, "name", 4), in = ts_node_child_by_field_name(ns, "body", 4);
        if (ts_node_is_null(nm) || ts_node_is_null(in)) continue;
        if ((uses_namespace(src, body, nm) || uses_namespace(src, root, nm)) && find_decl(src, in, name, decl, value, dnode))
            return true;
    }
    return false;
}

static bool find_define(const kl_source *src, const char *name, TSNode *def, TSNode *value)
{
    TSNode root = kl_source_root(src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!rt_is(d, "preproc_def")) continue;
        if (kl_node_text_is(src, ts_node_child_by_field_name(d, "name", 4), name)) {
            *def = d;
            *value = ts_node_child_by_field_name(d, "value", 5);
            return true;
        }
    }
    return false;
}

/* The threads-per-block expression of a launch: through `dim3 b(x)`, `dim3(x)`; 2-D blocks say why. */
static bool block_expr(const kl_source *src, const kl_launch_site *l, TSNode *expr, char *why, size_t size)
{
    TSNode b = l->block;
    if (ts_node_is_null(b)) {
        kl_snprintf(why, size, "the launch at line %u has no block size", kl_ast_line(l->call));
        return false;
    }
    while (rt_is(b, "parenthesized_expression")) b = ts_node_named_child(b, 0);
    TSNode args = {0};
    if (rt_is(b, "call_expression") && kl_node_text_is(src, ts_node_child_by_field_name(b, "function", 8), "dim3"))
        args = ts_node_child_by_field_name(b, "arguments", 9);
    if (rt_is(b, "identifier")) {
        TSNode decl, value, dn;
        TSNode body = kl_ast_function_body(l->host_fn);
        char *name = kl_node_text(src, b);
        bool dim3 = false;
        if (name && find_decl(src, body, name, &decl, &value, &dn)) {
            TSNode ty = ts_node_child_by_field_name(decl, "type", 4);
            if (kl_node_text_is(src, ty, "dim3")) {
                dim3 = true;
                args = value;
            }
        }
        free(name);
        if (dim3 && (rt_is(args, "argument_list") || rt_is(args, "parameter_list"))) {
            /* fall through to the argument check */
        } else if (dim3) {
            kl_snprintf(why, size, "the dim3 block at line %u is not built from its dimensions", kl_ast_line(l->call));
            return false;
        } else {
            args = (TSNode){0};
        }
    }
    if (!ts_node_is_null(args)) {
        uint32_t n = ts_node_named_child_count(args);
        for (uint32_t k = 1; k < n; k++) {
            TSNode a = ts_node_named_child(args, k);
            if (!kl_node_text_is(src, a, "1")) {
                kl_snprintf(why, size, "the block at line %u is 2-D or 3-D", kl_ast_line(l->call));
                return false;
            }
        }
        if (n == 0) {
            kl_snprintf(why, size, "the block at line %u has no dimensions", kl_ast_line(l->call));
            return false;
        }
        b = ts_node_named_child(args, 0);
        if (rt_is(b, "parameter_declaration")) b = ts_node_child_by_field_name(b, "type", 4);
    }
    *expr = b;
    return true;
}

/* Does the text name the identifier (a whole word)? */
bool block_size__text_mentions(const char *t, const char *name)
{
    size_t l = strlen(name);
    bool yes = false;
    if (!l) return false;
    for (const char *p = strstr(t, name); p && !yes; p = strstr(p + 1, name)) {
        bool lb = p == t || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                              (p[-1] >= '0' && p[-1] <= '9'));
        char a = p[l];
        bool rb = !(a == '_' || (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9'));
        yes = lb && rb;
    }
    return yes;
}

static bool mentions(const kl_source *src, TSNode n, const char *name)
{
    char *t = kl_node_text(src, n);
    if (!t) return false;
    bool yes = block_size__text_mentions(t, name);
    free(t);
    return yes;
}

typedef struct lit_scan {
    const kl_source *src;
    int64_t b;
    TSNode hit;
} lit_scan;

bool block_size__number(const kl_source *src, TSNode n, int64_t *v)
{
    char *t = kl_node_text(src, n);
    if (!t) return false;
    char *end;
    long long x = strtoll(t, &end, 0);
    bool ok = end != t && (*end == '\0' || *end == 'u' || *end == 'U' || *end == 'l' || *end == 'L');
    free(t);
    *v = x;
    return ok;
}

/* A literal in the kernel equal to the block size (or half of it, above a warp): an assumption
 * about the size that does not follow a change. */
static bool find_literal(TSNode n, void *user)
{
    lit_scan *s = user;
    if (!ts_node_is_null(s->hit)) return false;
    if (!rt_is(n, "number_literal")) return true;
    int64_t v;
    if (block_size__number(s->src, n, &v) && (v == s->b || (s->b / 2 > 32 && v == s->b / 2))) s->hit = n;
    return true;
}

/* Rewrite the grid of a launch where it divides by the old size as a literal: `/ B` and `+ (B - 1)`.
 * Other uses of the literal B there: not applicable. */
typedef struct grid_scan {
    const kl_source *src;
    int64_t b, nb;
    kl_edits *out;
    char *why;
    size_t why_size;
    kl_status st;
} grid_scan;

static bool grid_literal(TSNode n, void *user)
{
    grid_scan *g = user;
    if (g->why[0] || g->st != KL_OK) return false;
    if (!rt_is(n, "number_literal")) return true;
    int64_t v;
    if (!block_size__number(g->src, n, &v) || (v != g->b && v != g->b - 1)) return true;
    TSNode p = ts_node_parent(n);
    while (rt_is(p, "parenthesized_expression")) p = ts_node_parent(p);
    char *op = rt_is(p, "binary_expression") ? kl_node_text(g->src, ts_node_child_by_field_name(p, "operator", 8))
                                                : NULL;
    bool div = op && v == g->b && !strcmp(op, "/");
    bool add = op && v == g->b - 1 && !strcmp(op, "+");
    free(op);
    if (div || add) {
        if (g->out) g->st = kl_edits_addf(g->out, ts_node_start_byte(n), ts_node_end_byte(n), "%lld",
                                          (long long)(div ? g->nb : g->nb - 1));
    } else if (v == g->b) {
        kl_snprintf(g->why, g->why_size, "the grid at line %u uses the literal %lld other than as the divisor",
                    kl_ast_line(n), (long long)v);
    }
    return true;
}

/* The grid expression of a launch, through a local `int grid = …` / `dim3 grid(…)` of the host. */
static TSNode grid_expr(const kl_source *src, const kl_launch_site *l)
{
    TSNode g = l->grid;
    if (!rt_is(g, "identifier")) return g;
    char *name = kl_node_text(src, g);
    TSNode decl, value, dn;
    if (name && find_decl(src, kl_ast_function_body(l->host_fn), name, &decl, &value, &dn) && !ts_node_is_null(value))
        g = value;
    free(name);
    return g;
}

/* Does the value text name another identifier (a size derived from other constants)? */
bool block_size__derived(const char *t, uint32_t a, uint32_t b)
{
    for (uint32_t i = a; i < b; i++) {
        char c = t[i];
        bool start = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        char p = i > a ? t[i - 1] : ' ';
        bool after_word = p == '_' || (p >= 'a' && p <= 'z') || (p >= 'A' && p <= 'Z') || (p >= '0' && p <= '9');
        if (start && !after_word) return true;
    }
    return false;
}


/* A template kernel told its block size twice: `reduce<float, 256, true><<<g, 256>>>` or
 * `k<BS><<<g, THREADS>>>` with BS == THREADS. A non-type template argument of the launch whose value
 * is the block size, naming a parameter the kernel reads, must change with the block: it does when
 * it names the block's constant; a literal at a launch whose block is that literal is rewritten
 * with it; anything else is refused (the kernel would index with the old size). */
static kl_status template_args(bs_state *s, const bs_group *g, const kl_launch_site *l, int64_t nb, kl_edits *out,
                               char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    TSNode fn = ts_node_child_by_field_name(l->call, "function", 8);
    if (!rt_is(fn, "template_function")) return KL_OK;
    TSNode args = ts_node_child_by_field_name(fn, "arguments", 9);
    TSNode kf[4];
    if (block_size__kernels_named(src, l->kernel, kf, 4) != 1) return KL_OK;
    TSNode tpl = ts_node_parent(kf[0]);
    if (!rt_is(tpl, "template_declaration")) return KL_OK;
    TSNode params = ts_node_child_by_field_name(tpl, "parameters", 10);
    uint32_t np = 0;
    TSNode pnames[16];
    for (uint32_t i = 0; i < ts_node_named_child_count(params) && np < 16; i++) {
        TSNode p = ts_node_named_child(params, i);
        if (rt_is(p, "comment")) continue;
        TSNode nm = {0};
        if (rt_is(p, "parameter_declaration") || rt_is(p, "optional_parameter_declaration"))
            nm = kl_ast_declarator_name(ts_node_child_by_field_name(p, "declarator", 10));
        pnames[np++] = nm; /* null: a type parameter */
    }
    uint32_t na = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(args) && !why[0]; i++) {
        TSNode a = ts_node_named_child(args, i);
        if (rt_is(a, "comment")) continue;
        uint32_t k = na++;
        if (k >= np || ts_node_is_null(pnames[k])) continue;
        int64_t v;
        char w[200];
        bool known;
        if (rt_is(a, "type_descriptor")) {
            /* `k<BS>`: the grammar reads a lone name there as a type */
            char *t = kl_node_text(src, a);
            known = t && kl_const_eval_name(src, l->host_fn, t, &v, w, sizeof w);
            free(t);
        } else {
            known = kl_const_eval(src, l->host_fn, a, true, &v, w, sizeof w);
        }
        if (!known || v != g->value) continue;
        char *pn = kl_node_text(src, pnames[k]);
        /* read by its name, or by the argument's (the canonical form binds `blockSize` to `BS`) */
        char *at0 = kl_node_text(src, a);
        bool read = (pn && mentions(src, kl_ast_function_body(kf[0]), pn)) ||
                    (at0 && !rt_is(a, "number_literal") && mentions(src, kl_ast_function_body(kf[0]), at0));
        free(at0);
        if (read && g->name[0] && mentions(src, a, g->name)) read = false; /* follows the constant */
        if (!read) {
            free(pn);
            continue;
        }
        if (!g->name[0] && rt_is(a, "number_literal")) {
            /* the launch's literal block and the literal argument: one size written twice */
            if (out) {
                kl_status st = kl_edits_addf(out, ts_node_start_byte(a), ts_node_end_byte(a), "%lld", (long long)nb);
                if (st != KL_OK) {
                    free(pn);
                    return st;
                }
            }
            free(pn);
            continue;
        }
        char *at = kl_node_text(src, a);
        kl_snprintf(why, size,
                    "the launch at line %u passes %s = %s to %s, which the kernel reads, and it equals the block size "
                    "(%lld): changing the block alone would leave it at %lld",
                    kl_ast_line(l->call), pn ? pn : "?", at ? at : "?", l->kernel, (long long)g->value,
                    (long long)g->value);
        free(at);
        free(pn);
    }
    return KL_OK;
}

/* Check a group can move from its size to nb, and (out set) write the edits. */
static kl_status check_group(bs_state *s, bs_group *g, int64_t nb, kl_edits *out, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    why[0] = '\0';
    if (g->why[0]) {
        kl_snprintf(why, size, "%s", g->why);
        return KL_OK;
    }
    TSNode fns[256];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 256);
    if (nf > 256) nf = 256;
    for (unsigned k = 0; k < g->nlaunch && !why[0]; k++) {
        const kl_launch_site *l = &s->ls.items[g->launches[k]];
        /* the kernel's code: no literal that assumes the old size */
        for (unsigned f = 0; f < nf && !why[0]; f++) {
            char *fname = kl_ast_function_name(src, fns[f]);
            bool same = fname && !strcmp(fname, l->kernel);
            free(fname);
            if (!same) continue;
            TSNode lb = kl_ast_child_of_type(fns[f], "launch_bounds");
            lit_scan ls;
            ls.src = src;
            ls.b = g->value;
            memset(&ls.hit, 0, sizeof ls.hit);
            if (!ts_node_is_null(lb)) kl_ast_walk(lb, find_literal, &ls);
            kl_ast_walk(kl_ast_function_body(fns[f]), find_literal, &ls);
            if (!ts_node_is_null(ls.hit)) {
                char *t = kl_node_text(src, ls.hit);
                kl_snprintf(why, size, "%s hard-codes %s at line %u, an assumption about the block size of %lld",
                            l->kernel, t ? t : "a literal", kl_ast_line(ls.hit), (long long)g->value);
                free(t);
            }
            if (!why[0]) block_size__depends_1d(src, fns[f], g, nb, why, size);
        }
        if (!why[0]) {
            kl_status tst = template_args(s, g, l, nb, out, why, size);
            if (tst != KL_OK) return tst;
        }
        grid_scan gs = {src, g->value, nb, out, why, size, KL_OK};
        TSNode ge = grid_expr(src, l);
        if (!ts_node_is_null(ge) && !why[0]) kl_ast_walk(ge, grid_literal, &gs);
        if (gs.st != KL_OK) return gs.st;
    }
    /* a named constant: every kernel that uses it must be launched with it */
    if (g->name[0] && !why[0]) {
        for (unsigned f = 0; f < nf && !why[0]; f++) {
            if (!mentions(src, fns[f], g->name)) continue;
            char *fname = kl_ast_function_name(src, fns[f]);
            bool launched_with = false, launched = false;
            for (unsigned i = 0; fname && i < s->ls.count; i++) {
                if (strcmp(s->ls.items[i].kernel, fname)) continue;
                launched = true;
                for (unsigned k = 0; k < g->nlaunch; k++)
                    if (g->launches[k] == i) launched_with = true;
            }
            if (launched && !launched_with)
                kl_snprintf(why, size, "%s uses %s but is launched with another block size", fname ? fname : "a kernel",
                            g->name);
            free(fname);
        }
    }
    if (!why[0] && out) {
        kl_status st = kl_edits_addf(out, g->val_start, g->val_end, "%lld", (long long)nb);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* The value of the block expression. `dim3 b(NAME)` reads NAME as a type (the grammar takes it for a
 * prototype): its definition is evaluated instead. */
static bool block_value(bs_state *s, const kl_launch_site *l, TSNode e, int64_t *v, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    if (!rt_is(e, "type_identifier")) return kl_const_eval(src, l->host_fn, e, false, v, why, size);
    char *name = kl_node_text(src, e);
    TSNode decl, value, dn;
    bool ok = false;
    if (!name) {
        kl_snprintf(why, size, "out of memory");
    } else if (find_decl_host(src, l->host_fn, name, &decl, &value, &dn)) {
        ok = !ts_node_is_null(value) && kl_const_eval(src, l->host_fn, value, false, v, why, size);
    } else if (find_define(src, name, &decl, &value)) {
        char *t = kl_node_text(src, value), *end = NULL;
        long long x = t ? strtoll(t, &end, 0) : 0;
        while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
        ok = end && end != t && *end == '\0';
        if (ok) *v = x;
        else kl_snprintf(why, size, "%s is not a number", name);
        free(t);
    } else {
        kl_snprintf(why, size, "%s is not defined in this file", name);
    }
    free(name);
    return ok;
}

/* ---- 2-D blocks ------------------------------------------------------------------------------------
 * A launch whose block is dim3(X, Y) (Y not 1): one site per shape, changed where X and Y are defined.
 * The soundness rules are those of the 1-D form plus the ones a 2-D mapping needs:
 *  - loops stepping by a block extent (`for (r = ty; r < TILE; r += BLOCK_ROWS)`) must start at the
 *    thread index of the same dimension, so that the block still covers the range with no gap and no
 *    repeat; a compile-time bound that was a multiple of the step stays one (every thread runs the
 *    loop equally often), and must be one where the loop holds __syncthreads();
 *  - warp-level code (shuffles, votes, warpSize, `/ 32`, `% 32`, `& 31`, `>> 5`) keeps its warps only
 *    when X is a multiple of 32 before and after;
 *  - no register array, template argument or static_assert may depend on X or Y (or on a file
 *    constant derived from them): those are widths that cannot follow. */

#define BS2_NAIVE 16     /* the canonical simplest 2-D block: 16 x 16 */

/* The extents list of a block value: dim3(…), {…}, or the (…) of `dim3 b(…)`. */
static TSNode extent_list(const kl_source *src, TSNode b)
{
    b = kl_ast_unparen(b);
    if (rt_is(b, "call_expression") && kl_node_text_is(src, ts_node_child_by_field_name(b, "function", 8), "dim3"))
        return ts_node_child_by_field_name(b, "arguments", 9);
    if (rt_is(b, "initializer_list") || rt_is(b, "argument_list") || rt_is(b, "parameter_list")) return b;
    if (rt_is(b, "compound_literal_expression")) {
        TSNode v = ts_node_child_by_field_name(b, "value", 5);
        if (rt_is(v, "initializer_list")) return v;
    }
    return (TSNode){0};
}

/* The extents of a launch's block: `dim3(X, Y)`, `{X, Y}`, or a local `dim3 b(X, Y)` /
 * `dim3 b = dim3(X, Y)` / `dim3 b{X, Y}` of the host. Null when it is none of these. */
static TSNode block_extents(const kl_source *src, const kl_launch_site *l)
{
    TSNode b = kl_ast_unparen(l->block);
    if (ts_node_is_null(b)) return b;
    if (!rt_is(b, "identifier")) return extent_list(src, b);
    TSNode decl, value, dn, list = {0};
    char *name = kl_node_text(src, b);
    if (name && find_decl(src, kl_ast_function_body(l->host_fn), name, &decl, &value, &dn) &&
        kl_node_text_is(src, ts_node_child_by_field_name(decl, "type", 4), "dim3") && !ts_node_is_null(value))
        list = extent_list(src, value);
    free(name);
    return list;
}

static TSNode extent_at(TSNode list, uint32_t k)
{
    TSNode a = ts_node_named_child(list, k);
    if (rt_is(a, "parameter_declaration")) a = ts_node_child_by_field_name(a, "type", 4);
    return a;
}

/* Is the launch's block 2-D: two or three extents, the second not 1, the third (if any) 1? */
static bool is_2d(const kl_source *src, const kl_launch_site *l, TSNode *list)
{
    *list = block_extents(src, l);
    if (ts_node_is_null(*list)) return false;
    uint32_t n = ts_node_named_child_count(*list);
    if (n < 2 || n > 3) return false;
    if (kl_node_text_is(src, extent_at(*list, 1), "1")) return false;
    return n == 2 || kl_node_text_is(src, extent_at(*list, 2), "1");
}

/* The value of a #define's body that is one integer. */
static bool define_number(const kl_source *src, TSNode value, int64_t *v)
{
    char *t = kl_node_text(src, value), *end = NULL;
    long long x = t ? strtoll(t, &end, 0) : 0;
    while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
    bool ok = end && end != t && *end == '\0';
    if (ok) *v = x;
    free(t);
    return ok;
}

/* One extent: a literal, or a constant defined in the file by a number. False with why otherwise. */
static bool resolve_dim(bs_state *s, const kl_launch_site *l, TSNode a, bs_dim *d, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    d->def = a;
    if (rt_is(a, "number_literal")) {
        d->val_start = ts_node_start_byte(a);
        d->val_end = ts_node_end_byte(a);
        if (block_size__number(src, a, &d->value)) return true;
        kl_snprintf(why, size, "the block extent %s at line %u is not an integer", d->text, kl_ast_line(a));
        return false;
    }
    if (!rt_is(a, "identifier") && !rt_is(a, "type_identifier")) {
        kl_snprintf(why, size, "the block extent %s at line %u is an expression, not one constant", d->text,
                    kl_ast_line(l->call));
        return false;
    }
    kl_snprintf(d->name, sizeof d->name, "%s", d->text);
    TSNode decl, value, dn;
    char w[200] = "";
    if (find_decl_host(src, l->host_fn, d->name, &decl, &value, &dn)) {
        d->def = decl;
        if (ts_node_is_null(value) || rt_is(value, "argument_list") || rt_is(value, "parameter_list") ||
            rt_is(value, "initializer_list")) {
            kl_snprintf(why, size, "%s (line %u) has no initializer to change", d->name, kl_ast_line(decl));
            return false;
        }
        d->val_start = ts_node_start_byte(value);
        d->val_end = ts_node_end_byte(value);
        if (!kl_const_eval(src, l->host_fn, value, false, &d->value, w, sizeof w)) {
            kl_snprintf(why, size, "the block extent %s (line %u) is not a compile-time constant: %s", d->name,
                        kl_ast_line(decl), w);
            return false;
        }
    } else if (find_define(src, d->name, &decl, &value)) {
        d->def = decl;
        d->val_start = ts_node_start_byte(value);
        d->val_end = ts_node_end_byte(value);
        trim_range(s->ctx->text, &d->val_start, &d->val_end);
        if (!define_number(src, value, &d->value)) {
            kl_snprintf(why, size, "%s (line %u) is not a number", d->name, kl_ast_line(decl));
            return false;
        }
    } else {
        d->def = l->call;
        kl_snprintf(why, size, "the definition of %s is not in this file", d->name);
        return false;
    }
    if (block_size__derived(s->ctx->text, d->val_start, d->val_end)) {
        kl_snprintf(why, size, "%s is derived from other constants (%.*s): the tiling that defines it would have to change",
                    d->name, (int)(d->val_end - d->val_start), s->ctx->text + d->val_start);
        return false;
    }
    return true;
}

static kl_status add_launch2(bs_state *s, unsigned i, TSNode list)
{
    const kl_source *src = s->ctx->src;
    const kl_launch_site *l = &s->ls.items[i];
    bs_group2 g;
    memset(&g, 0, sizeof g);
    kl_snprintf(g.kernel, sizeof g.kernel, "%s", l->kernel);
    for (uint32_t k = 0; k < 2; k++) {
        char *t = kl_node_text(src, extent_at(list, k));
        if (!t) return KL_ERR_NOMEM;
        kl_snprintf(g.d[k].text, sizeof g.d[k].text, "%s", t);
        free(t);
    }
    for (uint32_t k = 0; k < 2 && !g.why[0]; k++) resolve_dim(s, l, extent_at(list, k), &g.d[k], g.why, sizeof g.why);
    /* the launches naming the same two constants share one site */
    if (!g.why[0] && g.d[0].name[0] && g.d[1].name[0])
        for (unsigned k = 0; k < s->count2; k++) {
            bs_group2 *o = &s->groups2[k];
            if (!o->why[0] && !strcmp(o->d[0].name, g.d[0].name) && !strcmp(o->d[1].name, g.d[1].name) &&
                o->nlaunch < 32) {
                o->launches[o->nlaunch++] = i;
                return KL_OK;
            }
        }
    g.def = g.d[0].name[0] && !ts_node_is_null(g.d[0].def)   ? g.d[0].def
            : g.d[1].name[0] && !ts_node_is_null(g.d[1].def) ? g.d[1].def
                                                              : l->call;
    char what[260];
    size_t w = 0;
    for (int k = 0; k < 2; k++) { /* the extents as written, blanks left out: "TILExBLOCK_ROWS", "32x8" */
        for (const char *c = g.d[k].text; *c && w + 2 < sizeof what; c++)
            if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') what[w++] = *c;
        if (k == 0 && w + 2 < sizeof what) what[w++] = 'x';
    }
    what[w] = '\0';
    kl_site_id(g.id, sizeof g.id, l->kernel, g.def, what);
    if (!g.why[0] && (g.d[0].value <= 0 || g.d[1].value <= 0 || g.d[0].value * g.d[1].value > 1024))
        kl_snprintf(g.why, sizeof g.why, "the block %lldx%lld is not 1 to 1024 threads", (long long)g.d[0].value,
                    (long long)g.d[1].value);
    g.launches[g.nlaunch++] = i;
    bs_group2 *ng = realloc(s->groups2, (s->count2 + 1) * sizeof *ng);
    if (!ng) return KL_ERR_NOMEM;
    s->groups2 = ng;
    s->groups2[s->count2++] = g;
    return KL_OK;
}

/* ---- the 2-D checks ---- */

typedef struct lit2_scan {
    const kl_source *src;
    int64_t vals[3];
    unsigned n;
    TSNode hit;
} lit2_scan;

static bool find_literal2(TSNode n, void *user)
{
    lit2_scan *s = user;
    if (!ts_node_is_null(s->hit)) return false;
    if (!rt_is(n, "number_literal")) return true;
    int64_t v;
    if (!block_size__number(s->src, n, &v)) return true;
    for (unsigned k = 0; k < s->n; k++)
        if (v == s->vals[k]) s->hit = n;
    return true;
}

typedef struct warp_scan {
    const kl_source *src;
    TSNode hit;
} warp_scan;

static bool find_warp(TSNode n, void *user)
{
    static const char *const prefixes[] = {"__shfl", "__ballot", "__any_sync", "__all_sync", "__syncwarp",
                                           "__activemask", "__match_", "__reduce_", "tiled_partition", NULL};
    warp_scan *w = user;
    if (!ts_node_is_null(w->hit)) return false;
    if (rt_is(n, "identifier")) {
        char *t = kl_node_text(w->src, n);
        bool hit = t && !strcmp(t, "warpSize");
        for (unsigned k = 0; t && !hit && prefixes[k]; k++) hit = kl_str_starts(t, prefixes[k]);
        free(t);
        if (hit) w->hit = n;
    } else if (rt_is(n, "binary_expression")) {
        TSNode r = kl_ast_unparen(ts_node_child_by_field_name(n, "right", 5));
        char *op = kl_node_text(w->src, ts_node_child_by_field_name(n, "operator", 8));
        int64_t v;
        if (op && rt_is(r, "number_literal") && block_size__number(w->src, r, &v) &&
            (((!strcmp(op, "/") || !strcmp(op, "%")) && v == 32) || (!strcmp(op, "&") && v == 31) ||
             (!strcmp(op, ">>") && v == 5)))
            w->hit = n;
        free(op);
    }
    return true;
}

typedef struct assert_scan {
    const kl_source *src;
    const bs_names *ns;
    TSNode hit;
    char name[128];
} assert_scan;

static bool find_assert(TSNode n, void *user)
{
    assert_scan *a = user;
    if (!ts_node_is_null(a->hit)) return false;
    if (!rt_is(n, "static_assert_declaration")) return true;
    if (block_size__names_in(a->src, a->ns, n, a->name, sizeof a->name)) a->hit = n;
    return false;
}
static TSNode grid_extents(const kl_source *src, const kl_launch_site *l)
{
    TSNode g = kl_ast_unparen(grid_expr(src, l));
    TSNode list = extent_list(src, g);
    return !ts_node_is_null(list) && ts_node_named_child_count(list) >= 2 ? list : (TSNode){0};
}

/* Rewrite literal divisors of the grid: per extent when the grid is 2-D, the thread count when not. */
static kl_status grid_edits2(bs_state *s, const kl_launch_site *l, const bs_group2 *g, const int64_t ext_new[2],
                             kl_edits *e, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    TSNode list = grid_extents(src, l);
    if (ts_node_is_null(list)) {
        int64_t b = g->d[0].value * g->d[1].value, nb = ext_new[0] * ext_new[1];
        TSNode ge = grid_expr(src, l);
        if (b == nb || ts_node_is_null(ge)) return KL_OK;
        grid_scan gs = {src, b, nb, e, why, size, KL_OK};
        kl_ast_walk(ge, grid_literal, &gs);
        return gs.st;
    }
    for (uint32_t k = 0; k < 2 && !why[0]; k++) {
        if (g->d[k].value == ext_new[k]) continue;
        grid_scan gs = {src, g->d[k].value, ext_new[k], e, why, size, KL_OK};
        kl_ast_walk(extent_at(list, k), grid_literal, &gs);
        if (gs.st != KL_OK) return gs.st;
    }
    return KL_OK;
}

static bool in_group2(const bs_group2 *g, unsigned i)
{
    for (unsigned k = 0; k < g->nlaunch; k++)
        if (g->launches[k] == i) return true;
    return false;
}

/* Replace a constant's value, keeping a trailing comment in its column: a longer number takes
 * the blanks after `;` (keeping one), a shorter one gives them back. */
static kl_status value_edit(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, int64_t v, kl_edits *e)
{
    char num[32];
    kl_snprintf(num, sizeof num, "%lld", (long long)v);
    long grow = (long)strlen(num) - (long)(b - a);
    uint32_t p = b;
    if (p < ctx->len && (ctx->text[p] == ';' || ctx->text[p] == ',')) p++;
    uint32_t q = p;
    while (q < ctx->len && ctx->text[q] == ' ') q++;
    bool comment = q + 1 < ctx->len && ctx->text[q] == '/' && ctx->text[q + 1] == '/';
    if (!comment || grow == 0 || (grow > 0 && (long)(q - p) <= grow)) return kl_edits_add(e, a, b, num);
    if (grow > 0) /* "64;   //" -> "128;  //" */
        return kl_edits_addf(e, a, p + (uint32_t)grow, "%s%.*s", num, (int)(p - b), ctx->text + b);
    return kl_edits_addf(e, a, p, "%s%.*s%*s", num, (int)(p - b), ctx->text + b, (int)-grow, "");
}

/* Check a 2-D group can move to nx x ny, and (out set) write the edits. */
static kl_status check_group2(bs_state *s, const bs_group2 *g, int64_t nx, int64_t ny, kl_edits *out, char *why,
                              size_t size)
{
    const kl_source *src = s->ctx->src;
    const int64_t ext_new[2] = {nx, ny};
    why[0] = '\0';
    if (g->why[0]) {
        kl_snprintf(why, size, "%s", g->why);
        return KL_OK;
    }
    if (g->d[0].name[0] && !strcmp(g->d[0].name, g->d[1].name) && nx != ny) {
        kl_snprintf(why, size, "the block is %s x %s (line %u): one constant cannot give a %lldx%lld block",
                    g->d[0].name, g->d[1].name, kl_ast_line(g->d[0].def), (long long)nx, (long long)ny);
        return KL_OK;
    }
    if (nx <= 0 || ny <= 0 || nx * ny > 1024) {
        kl_snprintf(why, size, "a %lldx%lld block is not 1 to 1024 threads", (long long)nx, (long long)ny);
        return KL_OK;
    }
    /* the names that follow a change: X, Y and the file constants derived from them */
    bs_names *ns = calloc(1, sizeof *ns);
    if (!ns) return KL_ERR_NOMEM;
    for (int k = 0; k < 2; k++) /* a local of the host is seen by no kernel */
        if (ts_node_is_null(kl_ast_enclosing_function(g->d[k].def))) block_size__names_add(ns, g->d[k].name);
    block_size__names_close(src, kl_source_root(src), ns);
    kl_edits e = {0};
    kl_status st = KL_OK;
    const int64_t X = g->d[0].value, Y = g->d[1].value;
    for (unsigned k = 0; k < g->nlaunch && !why[0] && st == KL_OK; k++) {
        const kl_launch_site *l = &s->ls.items[g->launches[k]];
        TSNode fns[8];
        unsigned nf = block_size__kernels_named(src, l->kernel, fns, 8);
        for (unsigned f = 0; f < nf && !why[0]; f++) {
            TSNode body = kl_ast_function_body(fns[f]);
            /* literals of the old extents (16 and up: smaller ones are vector widths and the like) */
            lit2_scan ls = {.src = src};
            if (X != nx && X >= 16) ls.vals[ls.n++] = X;
            if (Y != ny && Y >= 16) ls.vals[ls.n++] = Y;
            if (X * Y != nx * ny && X * Y >= 16) ls.vals[ls.n++] = X * Y;
            TSNode lb = kl_ast_child_of_type(fns[f], "launch_bounds");
            if (!ts_node_is_null(lb)) kl_ast_walk(lb, find_literal2, &ls);
            kl_ast_walk(body, find_literal2, &ls);
            if (!ts_node_is_null(ls.hit)) {
                char *t = kl_node_text(src, ls.hit);
                kl_snprintf(why, size, "%s hard-codes %s at line %u, an assumption about the %lldx%lld block",
                            l->kernel, t ? t : "a literal", kl_ast_line(ls.hit), (long long)X, (long long)Y);
                free(t);
                break;
            }
            /* warps: rows of 32 threads before and after */
            warp_scan ws = {.src = src};
            kl_ast_walk(body, find_warp, &ws);
            if (!ts_node_is_null(ws.hit) && (X % 32 || nx % 32)) {
                char *t = kl_node_text(src, ws.hit);
                kl_snprintf(why, size,
                            "%s has warp-level code at line %u (%s): its warps are rows of the block only while "
                            "blockDim.x is a multiple of 32 (%lld -> %lld)",
                            l->kernel, kl_ast_line(ws.hit), t ? t : "", (long long)X, (long long)nx);
                free(t);
                break;
            }
            /* widths that cannot follow: register arrays, template arguments */
            bs_names *local = malloc(sizeof *local);
            if (!local) {
                st = KL_ERR_NOMEM;
                break;
            }
            *local = *ns;
            block_size__names_close(src, body, local);
            bs_width_scan wd = {.src = src, .ns = local};
            kl_ast_walk(body, block_size__find_width, &wd);
            if (!ts_node_is_null(wd.hit))
                kl_snprintf(why, size, "%s %s at line %u of %s: a width that cannot follow the block", wd.name,
                            wd.what, kl_ast_line(wd.hit), l->kernel);
            free(local);
        }
        if (!why[0] && st == KL_OK) st = grid_edits2(s, l, g, ext_new, &e, why, size);
    }
    /* every other kernel that uses the names is launched by this group only; no other launch uses them */
    TSNode fns[256];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 256);
    if (nf > 256) nf = 256;
    for (unsigned f = 0; f < nf && !why[0] && st == KL_OK; f++) {
        char name[128];
        if (!block_size__names_in(src, ns, fns[f], name, sizeof name)) continue;
        char *fname = kl_ast_function_name(src, fns[f]);
        for (unsigned i = 0; fname && i < s->ls.count && !why[0]; i++)
            if (!strcmp(s->ls.items[i].kernel, fname) && !in_group2(g, i))
                kl_snprintf(why, size, "%s uses %s but its launch at line %u has another block", fname, name,
                            kl_ast_line(s->ls.items[i].call));
        free(fname);
    }
    for (unsigned i = 0; i < s->ls.count && !why[0] && st == KL_OK; i++) {
        if (in_group2(g, i)) continue;
        const kl_launch_site *l = &s->ls.items[i];
        TSNode list = block_extents(src, l);
        TSNode parts[3] = {ts_node_is_null(list) ? l->block : list, grid_expr(src, l), l->smem};
        for (int p = 0; p < 3 && !why[0]; p++) {
            char name[128];
            if (!ts_node_is_null(parts[p]) && block_size__names_in(src, ns, parts[p], name, sizeof name))
                kl_snprintf(why, size, "the launch of %s at line %u also uses %s", l->kernel, kl_ast_line(l->call), name);
        }
    }
    if (!why[0] && st == KL_OK) {
        assert_scan as = {.src = src, .ns = ns};
        kl_ast_walk(kl_source_root(src), find_assert, &as);
        if (!ts_node_is_null(as.hit))
            kl_snprintf(why, size, "the static_assert at line %u tests %s, which the change would move",
                        kl_ast_line(as.hit), as.name);
    }
    /* the values, once each */
    for (int k = 0; k < 2 && !why[0] && st == KL_OK; k++) {
        if (g->d[k].value == ext_new[k]) continue;
        if (k == 1 && g->d[0].name[0] && !strcmp(g->d[0].name, g->d[1].name)) continue;
        st = value_edit(s->ctx, g->d[k].val_start, g->d[k].val_end, ext_new[k], &e);
    }
    if (!why[0] && st == KL_OK) st = block_size__check_loops(s, g, &e, ext_new, why, size);
    for (unsigned k = 0; out && !why[0] && st == KL_OK && k < e.count; k++)
        st = kl_edits_add(out, e.items[k].start, e.items[k].end, e.items[k].text);
    kl_edits_release(&e);
    free(ns);
    return st;
}

static kl_status add_launch(bs_state *s, unsigned i)
{
    const kl_source *src = s->ctx->src;
    const kl_launch_site *l = &s->ls.items[i];
    TSNode list;
    if (is_2d(src, l, &list)) return add_launch2(s, i, list);
    bs_group g;
    memset(&g, 0, sizeof g);
    kl_snprintf(g.kernel, sizeof g.kernel, "%s", l->kernel);
    TSNode e;
    char why[300] = "";
    int64_t v = 0;
    if (!block_expr(src, l, &e, why, sizeof why)) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        kl_snprintf(g.why, sizeof g.why, "%s", why);
        g.def = l->call;
    } else if (!block_value(s, l, e, &v, why, sizeof why)) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        kl_snprintf(g.why, sizeof g.why, "the block size at line %u is not a compile-time constant: %s",
                    kl_ast_line(l->call), why);
        g.def = l->call;
    } else if (rt_is(e, "number_literal")) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        g.value = v;
        g.def = e;
        g.val_start = ts_node_start_byte(e);
        g.val_end = ts_node_end_byte(e);
    } else if (rt_is(e, "identifier") || rt_is(e, "type_identifier")) {
        char *name = kl_node_text(src, e);
        if (!name) return KL_ERR_NOMEM;
        g.value = v;
        kl_snprintf(g.name, sizeof g.name, "%s", name);
        for (unsigned k = 0; k < s->count; k++)
            if (!strcmp(s->groups[k].name, name) && s->groups[k].nlaunch < 32) {
                s->groups[k].launches[s->groups[k].nlaunch++] = i;
                free(name);
                return KL_OK;
            }
        TSNode decl, value, dn;
        if (find_decl_host(src, l->host_fn, name, &decl, &value, &dn)) {
            g.def = decl;
            if (!ts_node_is_null(value)) {
                g.val_start = ts_node_start_byte(value);
                g.val_end = ts_node_end_byte(value);
            }
            if (ts_node_is_null(value) || rt_is(value, "argument_list") || rt_is(value, "parameter_list"))
                kl_snprintf(g.why, sizeof g.why, "%s (line %u) has no initializer to change", name, kl_ast_line(decl));
        } else if (find_define(src, name, &decl, &value)) {
            g.def = decl;
            g.val_start = ts_node_start_byte(value);
            g.val_end = ts_node_end_byte(value);
            trim_range(s->ctx->text, &g.val_start, &g.val_end);
        } else {
            g.def = l->call;
            kl_snprintf(g.why, sizeof g.why, "the definition of %s is not in this file", name);
        }
        kl_site_id(g.id, sizeof g.id, l->kernel, g.def, name);
        free(name);
    } else {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        g.value = v;
        g.def = e;
        char *t = kl_node_text(src, e);
        kl_snprintf(g.why, sizeof g.why, "the block size at line %u is an expression (%s), not one constant",
                    kl_ast_line(l->call), t ? t : "");
        free(t);
    }
    if (!g.why[0] && g.name[0] && block_size__derived(s->ctx->text, g.val_start, g.val_end))
        kl_snprintf(g.why, sizeof g.why, "%s is derived from other constants (%.*s): the tiling that defines it would have to change",
                    g.name, (int)(g.val_end - g.val_start), s->ctx->text + g.val_start);
    if (!g.why[0] && (g.value <= 0 || g.value > 1024))
        kl_snprintf(g.why, sizeof g.why, "the block size %lld is not 1 to 1024 threads", (long long)g.value);
    g.launches[g.nlaunch++] = i;
    bs_group *ng = realloc(s->groups, (s->count + 1) * sizeof *ng);
    if (!ng) return KL_ERR_NOMEM;
    s->groups = ng;
    s->groups[s->count++] = g;
    return KL_OK;
}

static kl_status state_open(const kl_rule_ctx *ctx, bs_state *s, kl_error *err)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    kl_status st = kl_ast_launches(ctx->src, &s->ls, err);
    for (unsigned i = 0; st == KL_OK && i < s->ls.count; i++) st = add_launch(s, i);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static void state_close(bs_state *s)
{
    free(s->groups);
    free(s->groups2);
    kl_launch_sites_release(&s->ls);
}

/* The sites of a 2-D block: present when it is not 16x16, applicable always (why_not: against
 * 16x16 for the present site, against the default 32x8 — or 16x16 where it is 32x8, or 32x32
 * when one constant gives both extents — for the other). */
static kl_status find2(bs_state *s, const bs_group2 *g, kl_sites *out)
{
    const int64_t X = g->d[0].value, Y = g->d[1].value;
    kl_status st = KL_OK;
    for (int dir = 0; dir < 2 && st == KL_OK; dir++) {
        if (dir == 0 && ((X == BS2_NAIVE && Y == BS2_NAIVE) || g->why[0])) continue;
        int64_t nx = BS2_NAIVE, ny = BS2_NAIVE;
        bool square = g->d[0].name[0] && !strcmp(g->d[0].name, g->d[1].name);
        if (dir == 1 && square) nx = ny = X == 32 ? 8 : 32; /* one constant: a square block */
        else if (dir == 1 && !(X == 32 && Y == 8)) nx = 32, ny = 8;
        char why[300];
        st = check_group2(s, g, nx, ny, NULL, why, sizeof why);
        if (st != KL_OK) break;
        json_t *f = json_pack("{s:I, s:I, s:I, s:I}", "bx", (json_int_t)X, "by", (json_int_t)Y, "threads",
                              (json_int_t)(X * Y), "launches", (json_int_t)g->nlaunch);
        if (!f) return KL_ERR_NOMEM;
        json_object_set_new(f, "constant_x", g->d[0].name[0] ? json_string(g->d[0].name) : json_null());
        json_object_set_new(f, "constant_y", g->d[1].name[0] ? json_string(g->d[1].name) : json_null());
        if (why[0]) json_object_set_new(f, "why_not", json_string(why));
        char note[400];
        if (why[0])
            kl_snprintf(note, sizeof note, "%s", why);
        else
            kl_snprintf(note, sizeof note, "a %lldx%lld block (%s x %s)%s", (long long)X, (long long)Y, g->d[0].text,
                        g->d[1].text, g->d[0].name[0] || g->d[1].name[0] ? ", changed where defined" : ", literals at the launch");
        json_t *params = NULL;
        if (dir == 0) {
            char bx[32], by[32];
            kl_snprintf(bx, sizeof bx, "%lld", (long long)X);
            kl_snprintf(by, sizeof by, "%lld", (long long)Y);
            params = json_pack("{s:s, s:s}", "bx", bx, "by", by);
        }
        st = kl_sites_add(out, g->id, dir == 0 ? KL_SITE_PRESENT : KL_SITE_APPLICABLE, kl_node_span(g->def), g->kernel,
                          f, params, note);
    }
    return st;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    bs_state s;
    kl_status st = state_open(ctx, &s, err);
    for (unsigned i = 0; st == KL_OK && i < s.count; i++) {
        bs_group *g = &s.groups[i];
        char why[300];
        st = check_group(&s, g, BS_NAIVE, NULL, why, sizeof why);
        if (st != KL_OK) break;
        for (int dir = 0; dir < 2 && st == KL_OK; dir++) {
            if (dir == 0 && (g->value == BS_NAIVE || g->why[0])) continue; /* present: a size other than 256 */
            json_t *f = json_pack("{s:I, s:I}", "threads", (json_int_t)g->value, "launches", (json_int_t)g->nlaunch);
            if (!f) return KL_ERR_NOMEM;
            json_object_set_new(f, "constant", g->name[0] ? json_string(g->name) : json_null());
            if (why[0]) json_object_set_new(f, "why_not", json_string(why));
            char note[400];
            if (why[0])
                kl_snprintf(note, sizeof note, "%s", why);
            else if (g->name[0])
                kl_snprintf(note, sizeof note, "%lld threads per block, from %s (line %u)", (long long)g->value,
                            g->name, kl_ast_line(g->def));
            else
                kl_snprintf(note, sizeof note, "%lld threads per block, a literal at the launch", (long long)g->value);
            char v[32];
            kl_snprintf(v, sizeof v, "%lld", (long long)g->value);
            json_t *params = dir == 0 ? json_pack("{s:s}", "threads", v) : NULL;
            st = kl_sites_add(out, g->id, dir == 0 ? KL_SITE_PRESENT : KL_SITE_APPLICABLE, kl_node_span(g->def),
                              g->kernel, f, params, note);
        }
    }
    for (unsigned i = 0; st == KL_OK && i < s.count2; i++) st = find2(&s, &s.groups2[i], out);
    state_close(&s);
    return st;
}

/* Move the site's block: a 1-D site to nb threads, a 2-D one to nx x ny (dims: the caller named bx/by). */
static kl_status change(const kl_rule_ctx *ctx, const kl_site *site, int64_t nb, int64_t nx, int64_t ny, bool dims,
                        kl_edits *out, kl_error *err)
{
    bs_state s;
    kl_status st = state_open(ctx, &s, err);
    if (st != KL_OK) return st;
    bs_group2 *g2 = NULL;
    for (unsigned i = 0; i < s.count2; i++)
        if (!g2 && !strcmp(s.groups2[i].id, site->id)) g2 = &s.groups2[i];
    bs_group *g = NULL;
    for (unsigned i = 0; !g2 && i < s.count; i++)
        if (!g && ts_node_start_byte(s.groups[i].def) == site->span.start && !strcmp(s.groups[i].kernel, site->kernel))
            g = &s.groups[i];
    char why[300];
    if (g2) {
        if (g2->d[0].value == nx && g2->d[1].value == ny) {
            /* say first what stops any change, if something does */
            bool square = g2->d[0].name[0] && !strcmp(g2->d[0].name, g2->d[1].name);
            int64_t ox = nx == BS2_NAIVE ? 32 : BS2_NAIVE, oy = square ? ox : ny == BS2_NAIVE ? 8 : BS2_NAIVE;
            kl_edits scratch = {0};
            st = check_group2(&s, g2, ox, oy, &scratch, why, sizeof why);
            kl_edits_release(&scratch);
            if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
            else if (why[0]) st = kl_rule_not_applicable(err, "%s", why);
            else st = kl_rule_not_applicable(err, "the block at %s is already %lldx%lld", site->id, (long long)nx,
                                             (long long)ny);
        } else {
            st = check_group2(&s, g2, nx, ny, out, why, sizeof why);
            if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
            else if (why[0]) st = kl_rule_not_applicable(err, "%s", why);
        }
    } else if (!g) {
        st = kl_rule_not_applicable(err, "no block size at %s", site->id);
    } else if (dims) {
        st = kl_error_set(err, KL_ERR_INVALID, "block-size: bx and by are for a 2-D block; the block at %s is 1-D (use threads)",
                          site->id);
    } else if (g->value == nb) {
        /* say first what stops any change, if something does */
        st = check_group(&s, g, nb == BS_NAIVE ? 2 * nb : BS_NAIVE, NULL, why, sizeof why);
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
        else if (why[0]) st = kl_rule_not_applicable(err, "%s", why);
        else st = kl_rule_not_applicable(err, "the block size at %s is already %lld", site->id, (long long)nb);
    } else {
        st = check_group(&s, g, nb, out, why, sizeof why);
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
        else if (why[0]) st = kl_rule_not_applicable(err, "%s", why);
    }
    state_close(&s);
    return st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return change(ctx, site, BS_NAIVE, BS2_NAIVE, BS2_NAIVE, false, out, err);
}

/* Parameters: `threads` for a 1-D block; `bx` and `by` for a 2-D one. A 2-D site given only
 * threads takes the shape 8x8, 16x8, 32x8, 32x16, 32x32 for 64 … 1024. */
static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    int64_t nb = 0, nx = 0, ny = 0;
    bool dims = json_object_get(params, "bx") != NULL || json_object_get(params, "by") != NULL;
    if (!kl_rule_param_int(&kl_rule_block_size, params, "threads", &nb) || nb < 32 || nb > 1024)
        return kl_error_set(err, KL_ERR_INVALID, "block-size: threads must be 64, 128, 256, 512 or 1024");
    if (!kl_rule_param_int(&kl_rule_block_size, params, "bx", &nx) ||
        !kl_rule_param_int(&kl_rule_block_size, params, "by", &ny) || nx < 1 || ny < 1 || nx > 1024 || ny > 1024)
        return kl_error_set(err, KL_ERR_INVALID, "block-size: bx and by must be 8, 16, 32 or 64");
    if (nx * ny > 1024)
        return kl_error_set(err, KL_ERR_INVALID, "block-size: bx x by = %lld x %lld is more than 1024 threads",
                            (long long)nx, (long long)ny);
    if (!dims && json_object_get(params, "threads")) {
        nx = nb >= 256 ? 32 : nb / 8;
        ny = nb / nx;
    }
    return change(ctx, site, nb, nx, ny, dims, out, err);
}

const kl_rule kl_rule_block_size = {
    "block-size", "choose the threads per block of a launch, changing the constant tied to it once where it is defined",
    bs_params, 3, find, remove_site, apply,
};
