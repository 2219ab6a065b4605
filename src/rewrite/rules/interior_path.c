/*
 * interior-path — a path without bounds tests for the blocks (or threads) whose whole neighbourhood
 * lies inside the data, beside the tested path that every other block takes. Remove only: the
 * tested path for everyone.
 *
 * Three ways to write it, each a site `function:line` of the `if` that chooses:
 *  - flag: `if (C) f<…, false>(args); else [if (G)] f<…, true>(args);` — two calls of one helper that
 *    differ in one bool (a template argument or an argument) which the helper reads only as a test
 *    dropper: `!P || t`, `P && t` (P true runs every test t) or `P || t`, `!P && t` (P false does);
 *  - two functions: `if (C) f_inner(args); else [if (G)] f_edge(args);` — two __device__ helpers of the
 *    same parameters, the tested one with more comparisons than the other;
 *  - branches: `if (C) { … } else { … }` in the kernel itself, C a block-level test (blockIdx, gridDim and
 *    invariants only, no threadIdx) — a conjunction picks the interior for its `then`, a disjunction the
 *    edge — whose edge branch has more comparisons and writes the same arrays.
 * Remove keeps the tested path for every block: the tested call, under `G` when C implies G (shown
 * through the index analysis: `x < w` where C holds `x0 + TILE_W + HALO <= w` and x - x0 is at most
 * blockDim.x * OUT_X), else under `(C) || (G)`, or unconditionally when the tested call had no guard;
 * the branches form keeps the edge branch. Locals that only C read go, with the comment lines above
 * them, and so does an interior helper nothing else calls.
 *
 * Why it is sound: the tested path is the one the original runs on the blocks along the edges, where
 * a block may sit anywhere the tests pass or fail, so it computes every element it is given; the
 * interior path is that computation with tests that hold inside. Apply is not written: it needs the
 * tests that hold in the interior, a range analysis the catalog does not have.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"

#define NAME "interior-path"
#define IP_MAXDEL 16

typedef enum { IP_FLAG = 1, IP_FUNCTIONS, IP_BRANCHES } ip_form;

typedef struct ip_site {
    ip_form form;
    TSNode ifs;          /* the if_statement that chooses */
    TSNode cond;         /* its condition C (unparenthesized) */
    TSNode guard;        /* G of `else if (G)`, or null */
    TSNode fast, tested; /* the two statements (calls, or the branches) */
    bool tested_then;    /* the tested statement is the `then` branch */
    char callee[128];    /* the tested helper (flag, functions) */
    char fast_callee[128];
    char flag[64];       /* the bool the helper reads (flag form) */
    bool level_block;    /* C does not depend on threadIdx */
    char why[300];       /* non-empty: present, but refused */
} ip_site;

/* The one statement of s: s itself, or the only statement of a compound `{ s; }`. */
static TSNode single_stmt(TSNode s)
{
    if (!rt_is(s, "compound_statement")) return s;
    TSNode only = {{0}, 0, 0};
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(s); i++) {
        TSNode k = ts_node_named_child(s, i);
        if (rt_is(k, "comment")) continue;
        only = k;
        n++;
    }
    return n == 1 ? only : (TSNode){{0}, 0, 0};
}

typedef struct call_find {
    const kl_rule_ctx *ctx;
    TSNode call;
} call_find;

static bool call_visit(TSNode n, void *user)
{
    call_find *c = user;
    if (!ts_node_is_null(c->call)) return false;
    if (rt_is(n, "call_expression") && ts_node_is_null(kl_ast_child_of_type(n, "kernel_call_syntax"))) {
        char nm[128];
        if (rt_callee_name(c->ctx, n, nm, sizeof nm) && !ts_node_is_null(rt_device_fn_named(c->ctx, nm))) {
            c->call = n;
            return false;
        }
    }
    return true;
}

/* The call of a __device__ helper of the file in statement s (an expression statement, `{ s; }` too): the
 * first in document order; a null node when there is none. */
static TSNode stmt_call(const kl_rule_ctx *ctx, TSNode s)
{
    s = single_stmt(s);
    if (!rt_is(s, "expression_statement")) return (TSNode){{0}, 0, 0};
    call_find c = {ctx, {{0}, 0, 0}};
    kl_ast_walk(s, call_visit, &c);
    return c.call;
}

/* Statements a and b read the same outside their calls ca and cb. */
static bool same_outside(const kl_rule_ctx *ctx, TSNode a, TSNode ca, TSNode b, TSNode cb)
{
    a = single_stmt(a), b = single_stmt(b);
    kl_strbuf x = KL_STRBUF_INIT, y = KL_STRBUF_INIT;
    kl_strbuf_add(&x, ctx->text + ts_node_start_byte(a), ts_node_start_byte(ca) - ts_node_start_byte(a));
    kl_strbuf_addc(&x, '@');
    kl_strbuf_add(&x, ctx->text + ts_node_end_byte(ca), ts_node_end_byte(a) - ts_node_end_byte(ca));
    kl_strbuf_add(&y, ctx->text + ts_node_start_byte(b), ts_node_start_byte(cb) - ts_node_start_byte(b));
    kl_strbuf_addc(&y, '@');
    kl_strbuf_add(&y, ctx->text + ts_node_end_byte(cb), ts_node_end_byte(b) - ts_node_end_byte(cb));
    const char *px = kl_strbuf_str(&x), *py = kl_strbuf_str(&y);
    size_t i = 0, j = 0;
    bool same = true;
    for (;;) {
        while (px[i] == ' ' || px[i] == '\t' || px[i] == '\n' || px[i] == '\r') i++;
        while (py[j] == ' ' || py[j] == '\t' || py[j] == '\n' || py[j] == '\r') j++;
        if (px[i] != py[j]) {
            same = false;
            break;
        }
        if (!px[i]) break;
        i++, j++;
    }
    kl_strbuf_release(&x);
    kl_strbuf_release(&y);
    return same;
}

/* The named children of a list (arguments), comments skipped, at most max. */
static unsigned list_items(TSNode list, TSNode *out, unsigned max)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(list); i++) {
        TSNode k = ts_node_named_child(list, i);
        if (rt_is(k, "comment")) continue;
        if (n < max) out[n] = k;
        n++;
    }
    return n;
}

/* Two lists that differ in exactly one item, `false` on one side and `true` on the other: its index
 * (into *pos) and which side holds `true` (*a_true). 0: identical, 1: one such item, -1: otherwise. */
static int bool_difference(const kl_rule_ctx *ctx, TSNode la, TSNode lb, unsigned *pos, bool *a_true)
{
    if (ts_node_is_null(la) || ts_node_is_null(lb)) return ts_node_is_null(la) && ts_node_is_null(lb) ? 0 : -1;
    TSNode ia[16], ib[16];
    unsigned na = list_items(la, ia, 16), nb = list_items(lb, ib, 16);
    if (na != nb || na > 16) return -1;
    int diffs = 0;
    for (unsigned i = 0; i < na; i++) {
        if (rt_same_text(ctx, ia[i], ib[i])) continue;
        bool at = rt_text_is(ctx, ia[i], "true"), af = rt_text_is(ctx, ia[i], "false");
        bool bt = rt_text_is(ctx, ib[i], "true"), bf = rt_text_is(ctx, ib[i], "false");
        if (!((at && bf) || (af && bt))) return -1;
        *pos = i;
        *a_true = at;
        diffs++;
    }
    return diffs == 0 ? 0 : diffs == 1 ? 1 : -1;
}

/* ---- how a helper reads its flag --------------------------------------------------------------------- */

typedef struct flag_use {
    const kl_rule_ctx *ctx;
    const char *name;
    int tested;    /* the value of the flag that runs the tests: 1 true, 0 false, -1 not yet seen */
    bool bad;
    unsigned line; /* of the first use that is no test dropper */
} flag_use;

/* Does e hold a comparison < <= > >= (a bounds test)? Read from the text: the grammar may take `yy < 0 || yy >= h`
 * for a template's arguments. */
static bool has_relational(const kl_rule_ctx *ctx, TSNode e)
{
    uint32_t a = ts_node_start_byte(e), b = ts_node_end_byte(e);
    for (uint32_t i = a; i < b; i++) {
        char c = ctx->text[i];
        if (c != '<' && c != '>') continue;
        char prev = i > a ? ctx->text[i - 1] : ' ', next = i + 1 < b ? ctx->text[i + 1] : ' ';
        if (next == c || prev == c || (c == '>' && prev == '-')) continue; /* << >> -> */
        return true;
    }
    return false;
}

/* `P && t` / `!P || t` (P true runs t), `P || t` / `!P && t` (P false does): the value, or -1. The test t
 * must be a bounds test: a comparison, or a name (a local holding one, `row_in`). */
static int dropper_value(const kl_rule_ctx *ctx, TSNode id)
{
    TSNode at = id;
    bool neg = false;
    TSNode p = ts_node_parent(at);
    while (rt_is(p, "parenthesized_expression")) at = p, p = ts_node_parent(p);
    if (rt_is(p, "unary_expression") && rt_text_is(ctx, rt_field(p, "operator"), "!")) {
        neg = true;
        at = p;
        p = ts_node_parent(p);
        while (rt_is(p, "parenthesized_expression")) at = p, p = ts_node_parent(p);
    }
    if (!rt_is(p, "binary_expression")) return -1;
    TSNode op = rt_field(p, "operator");
    bool conj = rt_text_is(ctx, op, "&&"), disj = rt_text_is(ctx, op, "||");
    if (!conj && !disj) return -1;
    TSNode l = rt_field(p, "left"), r = rt_field(p, "right");
    TSNode t = ts_node_start_byte(l) == ts_node_start_byte(at) ? r : l;
    while (rt_is(t, "parenthesized_expression")) t = ts_node_named_child(t, 0);
    if (!rt_is(t, "identifier") && !has_relational(ctx, t)) return -1;
    if (conj) return neg ? 0 : 1;
    return neg ? 1 : 0;
}

static bool flag_visit(TSNode n, void *user)
{
    flag_use *f = user;
    if (f->bad) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(f->ctx, n, f->name)) return true;
    int v = dropper_value(f->ctx, n);
    if (v < 0 || (f->tested >= 0 && v != f->tested)) {
        f->bad = true;
        f->line = ts_node_start_point(n).row + 1;
        return false;
    }
    f->tested = v;
    return true;
}

/* The declaration of the pos-th template parameter (template args) or parameter of fn, its name into buf
 * when it is a bool. */
static bool flag_param(const kl_rule_ctx *ctx, TSNode fn, bool template_arg, unsigned pos, char *buf, size_t size)
{
    TSNode list;
    if (template_arg) {
        TSNode outer = kl_ast_function_outer(fn);
        if (!rt_is(outer, "template_declaration")) return false;
        list = rt_field(outer, "parameters");
    } else {
        list = kl_ast_function_params(fn);
    }
    TSNode items[16];
    unsigned n = list_items(list, items, 16);
    if (pos >= n || n > 16) return false;
    TSNode d = items[pos];
    TSNode ty = rt_field(d, "type");
    if (!rt_text_is(ctx, ty, "bool")) return false;
    TSNode nm = rt_field(d, "declarator");
    if (!ts_node_is_null(nm) && !rt_is(nm, "identifier")) nm = kl_ast_declarator_name(nm);
    if (ts_node_is_null(nm)) return false;
    char *t = rt_text(ctx, nm);
    if (!t) return false;
    kl_snprintf(buf, size, "%s", t);
    free(t);
    return true;
}

/* ---- comparisons and writes -------------------------------------------------------------------------- */

typedef struct census {
    const kl_rule_ctx *ctx;
    unsigned compares;
    char writes[8][64];
    unsigned nwrites;
    bool thread, block;
    int depth;
} census;

static bool census_visit(TSNode n, void *user)
{
    census *c = user;
    if (rt_is(n, "binary_expression")) {
        TSNode op = rt_field(n, "operator");
        if (rt_text_is(c->ctx, op, "<") || rt_text_is(c->ctx, op, "<=") || rt_text_is(c->ctx, op, ">") ||
            rt_text_is(c->ctx, op, ">="))
            c->compares++;
    } else if (rt_is(n, "conditional_expression")) {
        c->compares++;
    } else if (rt_is(n, "assignment_expression")) {
        TSNode l = rt_field(n, "left");
        while (rt_is(l, "subscript_expression")) l = rt_field(l, "argument");
        if (rt_is(l, "identifier") && c->nwrites < 8) {
            char *t = rt_text(c->ctx, l);
            bool seen = false;
            for (unsigned i = 0; t && i < c->nwrites; i++) seen |= !strcmp(c->writes[i], t);
            if (t && !seen) kl_snprintf(c->writes[c->nwrites++], 64, "%s", t);
            free(t);
        }
    } else if (rt_is(n, "field_expression")) {
        TSNode a = rt_field(n, "argument");
        if (rt_text_is(c->ctx, a, "threadIdx")) c->thread = true;
        if (rt_text_is(c->ctx, a, "blockIdx") || rt_text_is(c->ctx, a, "gridDim")) c->block = true;
    }
    return true;
}

/* What C depends on, locals followed to their one initializer (to depth 4). */
static void cond_deps(const kl_rule_ctx *ctx, TSNode fn, TSNode e, census *c);

typedef struct dep_walk {
    const kl_rule_ctx *ctx;
    TSNode fn;
    census *c;
} dep_walk;

static bool dep_visit(TSNode n, void *user)
{
    dep_walk *d = user;
    if (rt_is(n, "field_expression")) {
        census_visit(n, d->c);
        return false;
    }
    if (rt_is(n, "identifier") && d->c->depth < 4) {
        char *t = rt_text(d->ctx, n);
        TSNode init = t ? kl_ast_local_init(d->ctx->src, d->fn, t) : (TSNode){{0}, 0, 0};
        free(t);
        if (!ts_node_is_null(init)) {
            d->c->depth++;
            cond_deps(d->ctx, d->fn, init, d->c);
            d->c->depth--;
        }
    }
    return true;
}

static void cond_deps(const kl_rule_ctx *ctx, TSNode fn, TSNode e, census *c)
{
    dep_walk d = {ctx, fn, c};
    kl_ast_walk(e, dep_visit, &d);
}

/* ---- C implies G ------------------------------------------------------------------------------------- */

/* The block extent along d of every launch of kernel k, when they agree and are compile-time. */
static bool block_extent(const kl_rule_ctx *ctx, const char *k, unsigned d, int64_t *out)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, k, ls, 16);
    if (n == 0 || n > 16) return false;
    for (unsigned i = 0; i < n; i++) {
        TSNode list = rt_dim3_args(ctx, &ls[i], ls[i].cfg[1]);
        int64_t v;
        if (ts_node_is_null(list)) {
            if (d != 0 || !kl_const_eval(ctx->src, ls[i].host.def, ls[i].cfg[1], false, &v, NULL, 0)) return false;
        } else {
            TSNode e = rt_dim3_extent(list, d);
            if (ts_node_is_null(e)) v = 1;
            else if (!kl_const_eval(ctx->src, ls[i].host.def, e, false, &v, NULL, 0)) return false;
        }
        if (i > 0 && v != *out) return false;
        *out = v;
    }
    return true;
}

/* a - c as a bound: max over the threads of a block (threadIdx.d < blockDim.d of the launches) of a - c,
 * when everything else cancels and the rest is compile-time. */
static bool max_difference(const kl_rule_ctx *ctx, const rt_func *f, kl_affine_ctx *ax, TSNode a, TSNode c,
                           int64_t *out)
{
    kl_affine fa = {0}, fc = {0};
    bool ok = false;
    if (kl_affine_of(ax, a, &fa) != KL_OK || kl_affine_of(ax, c, &fc) != KL_OK || !fa.ok || !fc.ok) goto done;
    if (!fa.const_is_int || !fc.const_is_int) goto done;
    int64_t m = fa.const_int - fc.const_int;
    const kl_affine *both[2] = {&fa, &fc};
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned i = 0; i < both[s]->nterms; i++) {
            const char *var = both[s]->terms[i].var;
            const char *ca = kl_affine_coef(&fa, var), *cc = kl_affine_coef(&fc, var);
            if (ca && cc && !strcmp(ca, cc)) continue; /* cancels */
            if (s == 1 && ca) continue;                /* seen from a */
            int64_t ia = 0, ic = 0;
            if (!kl_affine_coef_int(&fa, var, &ia) || !kl_affine_coef_int(&fc, var, &ic)) goto done;
            int64_t k = ia - ic;
            if (k == 0) continue;
            if (strncmp(var, "threadIdx.", 10) || !var[10] || var[11] || !f->global) goto done;
            int64_t b;
            if (!block_extent(ctx, f->name, (unsigned)(var[10] - 'x'), &b) || b < 1) goto done;
            if (k > 0) m += k * (b - 1);
        }
    }
    *out = m;
    ok = true;
done:
    kl_affine_release(&fa);
    kl_affine_release(&fc);
    return ok;
}

/* A comparison as `lo REL hi` with REL < or <= (flipping > and >=); false for anything else. */
static bool as_less(const kl_rule_ctx *ctx, TSNode e, TSNode *lo, TSNode *hi, bool *strict)
{
    e = rt_unparen_cond(e);
    if (!rt_is(e, "binary_expression")) return false;
    TSNode op = rt_field(e, "operator");
    TSNode l = rt_field(e, "left"), r = rt_field(e, "right");
    if (rt_text_is(ctx, op, "<") || rt_text_is(ctx, op, "<=")) *lo = l, *hi = r, *strict = rt_text_is(ctx, op, "<");
    else if (rt_text_is(ctx, op, ">") || rt_text_is(ctx, op, ">=")) *lo = r, *hi = l, *strict = rt_text_is(ctx, op, ">");
    else return false;
    return true;
}

/* Does C (a conjunction, a local followed to its initializer) imply G (`a < b` or `a <= b`)? */
static bool implies_one(const kl_rule_ctx *ctx, const rt_func *f, TSNode cond, TSNode guard)
{
    TSNode a, b;
    bool gstrict;
    if (!as_less(ctx, guard, &a, &b, &gstrict)) return false;
    cond = rt_unparen_cond(cond);
    if (rt_is(cond, "identifier")) {
        char *t = rt_text(ctx, cond);
        TSNode init = t ? kl_ast_local_init(ctx->src, f->def, t) : (TSNode){{0}, 0, 0};
        free(t);
        if (ts_node_is_null(init)) return false;
        cond = rt_unparen_cond(init);
    }
    kl_affine_ctx *ax = NULL;
    kl_error err = {0};
    if (kl_rules_affine(ctx, f->def, &ax, &err) != KL_OK) return false;
    bool found = false;
    TSNode stack[32];
    unsigned sp = 0;
    stack[sp++] = cond;
    while (sp > 0 && !found) {
        TSNode e = rt_unparen_cond(stack[--sp]);
        if (rt_is(e, "binary_expression") && rt_text_is(ctx, rt_field(e, "operator"), "&&")) {
            if (sp + 2 <= 32) stack[sp++] = rt_field(e, "right"), stack[sp++] = rt_field(e, "left");
            continue;
        }
        TSNode c, b2;
        bool cstrict;
        if (!as_less(ctx, e, &c, &b2, &cstrict) || !rt_same_text(ctx, b, b2)) continue;
        int64_t m;
        if (!max_difference(ctx, f, ax, a, c, &m)) continue;
        /* a <= c + m, c (<|<=) b: a < b when m < 0, or m <= 0 with c < b; a <= b when m <= 0 */
        found = gstrict ? (m < 0 || (m <= 0 && cstrict)) : m <= 0;
    }
    kl_rules_affine_done(ctx, ax);
    return found;
}

/* ... and G a conjunction of such comparisons: each of them. */
static bool implies(const kl_rule_ctx *ctx, const rt_func *f, TSNode cond, TSNode guard)
{
    guard = rt_unparen_cond(guard);
    if (rt_is(guard, "binary_expression") && rt_text_is(ctx, rt_field(guard, "operator"), "&&"))
        return implies(ctx, f, cond, rt_field(guard, "left")) && implies(ctx, f, cond, rt_field(guard, "right"));
    return implies_one(ctx, f, cond, guard);
}

/* ---- finding the sites ------------------------------------------------------------------------------- */

static bool recognise(const kl_rule_ctx *ctx, const rt_func *f, TSNode s, ip_site *site)
{
    memset(site, 0, sizeof *site);
    site->ifs = s;
    TSNode alt = rt_field(s, "alternative");
    if (ts_node_is_null(alt)) return false;
    TSNode then = rt_field(s, "consequence");
    TSNode other = ts_node_named_child(alt, 0);
    while (rt_is(other, "comment")) other = ts_node_next_named_sibling(other);
    TSNode guard = {{0}, 0, 0};
    if (rt_is(other, "if_statement")) {
        if (!ts_node_is_null(rt_field(other, "alternative"))) return false;
        guard = rt_unparen_cond(rt_field(other, "condition"));
        other = rt_field(other, "consequence");
    }
    site->cond = rt_unparen_cond(rt_field(s, "condition"));
    site->guard = guard;
    census cc = {.ctx = ctx};
    cond_deps(ctx, f->def, site->cond, &cc);
    site->level_block = !cc.thread;

    TSNode ca = stmt_call(ctx, then), cb = stmt_call(ctx, other);
    if (!ts_node_is_null(ca) && !ts_node_is_null(cb)) {
        if (!same_outside(ctx, then, ca, other, cb)) return false;
        char na[128], nb[128];
        if (!rt_callee_name(ctx, ca, na, sizeof na) || !rt_callee_name(ctx, cb, nb, sizeof nb)) return false;
        TSNode fa = rt_field(ca, "function"), fb = rt_field(cb, "function");
        TSNode ta = rt_is(fa, "template_function") ? rt_field(fa, "arguments") : (TSNode){{0}, 0, 0};
        TSNode tb = rt_is(fb, "template_function") ? rt_field(fb, "arguments") : (TSNode){{0}, 0, 0};
        TSNode aa = rt_field(ca, "arguments"), ab = rt_field(cb, "arguments");
        if (!strcmp(na, nb)) {
            unsigned pos = 0;
            bool a_true = false;
            int dt = bool_difference(ctx, ta, tb, &pos, &a_true);
            int da = dt == 0 ? bool_difference(ctx, aa, ab, &pos, &a_true) : (rt_same_text(ctx, aa, ab) ? 0 : -1);
            if (dt < 0 || da < 0 || dt + da != 1) return false;
            TSNode fn = rt_device_fn_named(ctx, na);
            if (ts_node_is_null(fn)) return false;
            if (!flag_param(ctx, fn, dt == 1, pos, site->flag, sizeof site->flag)) return false;
            flag_use fu = {ctx, site->flag, -1, false, 0};
            kl_ast_walk(kl_ast_function_body(fn), flag_visit, &fu);
            if (fu.bad || fu.tested < 0) return false; /* a flag that selects code, not tests (VEC) */
            site->form = IP_FLAG;
            site->tested_then = (fu.tested == 1) == a_true;
            kl_snprintf(site->callee, sizeof site->callee, "%s", na);
            kl_snprintf(site->fast_callee, sizeof site->fast_callee, "%s", na);
        } else {
            if (!rt_same_text(ctx, ta, tb) || !rt_same_text(ctx, aa, ab)) return false;
            TSNode fa2 = rt_device_fn_named(ctx, na), fb2 = rt_device_fn_named(ctx, nb);
            if (ts_node_is_null(fa2) || ts_node_is_null(fb2)) return false;
            TSNode pa[16], pb[16];
            if (list_items(kl_ast_function_params(fa2), pa, 16) != list_items(kl_ast_function_params(fb2), pb, 16))
                return false;
            census xa = {.ctx = ctx}, xb = {.ctx = ctx};
            kl_ast_walk(kl_ast_function_body(fa2), census_visit, &xa);
            kl_ast_walk(kl_ast_function_body(fb2), census_visit, &xb);
            if (xa.compares == xb.compares) return false;
            site->form = IP_FUNCTIONS;
            site->tested_then = xa.compares > xb.compares;
            kl_snprintf(site->callee, sizeof site->callee, "%s", site->tested_then ? na : nb);
            kl_snprintf(site->fast_callee, sizeof site->fast_callee, "%s", site->tested_then ? nb : na);
        }
        site->tested = site->tested_then ? then : other;
        site->fast = site->tested_then ? other : then;
        return true;
    }
    /* branches: a block-level test between two blocks of code */
    if (!ts_node_is_null(guard) || !rt_is(then, "compound_statement") || !rt_is(other, "compound_statement"))
        return false;
    if (!site->level_block || !cc.block) return false;
    TSNode c = site->cond;
    bool neg = false;
    while (rt_is(c, "unary_expression") && rt_text_is(ctx, rt_field(c, "operator"), "!"))
        neg = !neg, c = rt_unparen_cond(rt_field(c, "argument"));
    bool disj = rt_is(c, "binary_expression") && rt_text_is(ctx, rt_field(c, "operator"), "||");
    bool then_edge = disj != neg;
    TSNode edge = then_edge ? then : other, inner = then_edge ? other : then;
    census xe = {.ctx = ctx}, xi = {.ctx = ctx};
    kl_ast_walk(edge, census_visit, &xe);
    kl_ast_walk(inner, census_visit, &xi);
    if (xe.compares <= xi.compares || xe.nwrites == 0 || xe.nwrites != xi.nwrites) return false;
    for (unsigned i = 0; i < xe.nwrites; i++) {
        bool in = false;
        for (unsigned j = 0; j < xi.nwrites; j++) in |= !strcmp(xe.writes[i], xi.writes[j]);
        if (!in) return false;
    }
    site->form = IP_BRANCHES;
    site->tested_then = then_edge;
    site->tested = edge;
    site->fast = inner;
    return true;
}

typedef struct find_walk {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    kl_sites *out;
    kl_status st;
} find_walk;

static const char *form_name(ip_form f)
{
    return f == IP_FLAG ? "flag" : f == IP_FUNCTIONS ? "two-functions" : "branches";
}

static bool find_visit(TSNode n, void *user)
{
    find_walk *w = user;
    if (w->st != KL_OK) return false;
    if (!rt_is(n, "if_statement")) return true;
    ip_site s;
    if (!recognise(w->ctx, w->f, n, &s)) return true;
    char id[256];
    kl_site_id(id, sizeof id, w->f->name, n, NULL);
    char *cond = rt_text(w->ctx, s.cond);
    if (cond) {
        size_t k = 0;
        for (size_t i = 0; cond[i]; i++) {
            bool sp = cond[i] == ' ' || cond[i] == '\n' || cond[i] == '\t' || cond[i] == '\r';
            if (sp && (k == 0 || cond[k - 1] == ' ')) continue;
            cond[k++] = sp ? ' ' : cond[i];
        }
        cond[k] = '\0';
    }
    json_t *feat = json_pack("{s:s, s:s, s:s, s:b}", "form", form_name(s.form), "condition", cond ? cond : "",
                             "level", s.level_block ? "block" : "thread", "guarded", !ts_node_is_null(s.guard));
    free(cond);
    if (s.form != IP_BRANCHES) json_object_set_new(feat, "tested", json_string(s.callee));
    if (s.form == IP_FUNCTIONS) json_object_set_new(feat, "interior", json_string(s.fast_callee));
    if (s.form == IP_FLAG) json_object_set_new(feat, "flag", json_string(s.flag));
    w->st = kl_sites_add(w->out, id, KL_SITE_PRESENT, kl_node_span(n), w->f->name, feat, NULL,
                         s.form == IP_BRANCHES ? "a path without bounds tests for the interior blocks, beside the tested one"
                                               : "interior blocks call a helper without bounds tests, the others the tested one");
    return true;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        if (!fs[i].global && !fs[i].device) continue;
        find_walk w = {ctx, &fs[i], out, KL_OK};
        kl_ast_walk(fs[i].body, find_visit, &w);
        if (w.st != KL_OK) return kl_error_set(err, w.st, "out of memory");
    }
    return KL_OK;
}

/* ---- remove ------------------------------------------------------------------------------------------ */

/* The statement's text re-indented from its own line's indentation to `ind`. */
static char *moved_text(const kl_rule_ctx *ctx, TSNode stmt, const char *ind)
{
    char from[64];
    uint32_t a = ts_node_start_byte(stmt), b = ts_node_end_byte(stmt);
    rt_indent_of(ctx, a, from, sizeof from);
    /* the first line starts at the node: give it its line's indentation so every line shifts alike */
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, from, strlen(from));
    kl_strbuf_add(&sb, ctx->text + a, b - a);
    int delta = (int)strlen(ind) - (int)strlen(from);
    char *r = rt_reindent(kl_strbuf_str(&sb), sb.len, delta);
    kl_strbuf_release(&sb);
    if (!r) return NULL;
    size_t lead = 0;
    while (r[lead] == ' ' || r[lead] == '\t') lead++;
    memmove(r, r + lead, strlen(r + lead) + 1);
    return r;
}

/* Names declared at the top level of compound c. */
static bool declares_clash(const kl_rule_ctx *ctx, TSNode c, TSNode outer, TSNode skip)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(c); i++) {
        TSNode d = ts_node_named_child(c, i);
        if (!rt_is(d, "declaration")) continue;
        TSNode ds[8];
        unsigned n = rt_declarators(d, ds, 8);
        for (unsigned k = 0; k < n && k < 8; k++) {
            TSNode nm = kl_ast_declarator_name(ds[k]);
            char *t = rt_text(ctx, nm);
            if (!t) return true;
            /* declared elsewhere in the enclosing block (outside the if) */
            unsigned all = rt_count_ident(ctx, outer, t), here = rt_count_ident(ctx, skip, t);
            free(t);
            if (all > here) return true;
        }
    }
    return false;
}

/* Delete locals of f with a pure initializer that nothing reads once [a, b) is replaced by kept text. */
typedef struct deadloc {
    uint32_t start[IP_MAXDEL], end[IP_MAXDEL];
    TSNode decl[IP_MAXDEL];
    unsigned n;
} deadloc;

static bool impure_visit(TSNode n, void *user)
{
    bool *bad = user;
    if (rt_is(n, "call_expression") || rt_is(n, "assignment_expression") || rt_is(n, "update_expression")) *bad = true;
    return !*bad;
}

static bool in_deleted(const deadloc *dl, TSNode n)
{
    for (unsigned i = 0; i < dl->n; i++)
        if (ts_node_start_byte(n) >= ts_node_start_byte(dl->decl[i]) && ts_node_end_byte(n) <= ts_node_end_byte(dl->decl[i]))
            return true;
    return false;
}

typedef struct use_count {
    const kl_rule_ctx *ctx;
    const char *name;
    const deadloc *dl;
    TSNode gone;   /* the replaced statement */
    TSNode kept[3];
    unsigned n;
} use_count;

static bool use_visit(TSNode n, void *user)
{
    use_count *u = user;
    if (in_deleted(u->dl, n)) return false;
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    if (a >= ts_node_start_byte(u->gone) && b <= ts_node_end_byte(u->gone)) {
        bool kept = false;
        for (unsigned k = 0; k < 3; k++)
            if (!ts_node_is_null(u->kept[k]) && a >= ts_node_start_byte(u->kept[k]) && b <= ts_node_end_byte(u->kept[k]))
                kept = true;
        if (!kept && !rt_is(n, "identifier")) return true;
        if (!kept) return false;
    }
    if (rt_is(n, "identifier") && rt_text_is(u->ctx, n, u->name)) u->n++;
    return true;
}

static void dead_locals(const kl_rule_ctx *ctx, const rt_func *f, TSNode gone, TSNode kept0, TSNode kept1, TSNode kept2,
                        deadloc *dl)
{
    bool changed = true;
    while (changed && dl->n < IP_MAXDEL) {
        changed = false;
        for (uint32_t i = 0; i < ts_node_named_child_count(f->body) && dl->n < IP_MAXDEL; i++) {
            TSNode d = ts_node_named_child(f->body, i);
            if (!rt_is(d, "declaration") || in_deleted(dl, d)) continue;
            if (ts_node_start_byte(d) >= ts_node_start_byte(gone) && ts_node_end_byte(d) <= ts_node_end_byte(gone)) continue;
            TSNode ds[8];
            unsigned nd = rt_declarators(d, ds, 8);
            bool dead = nd >= 1 && nd <= 8;
            for (unsigned k = 0; dead && k < nd; k++) {
                if (!rt_is(ds[k], "init_declarator")) {
                    dead = false;
                    break;
                }
                bool bad = false;
                kl_ast_walk(rt_field(ds[k], "value"), impure_visit, &bad);
                char *nm = bad ? NULL : rt_text(ctx, kl_ast_declarator_name(ds[k]));
                if (!nm) {
                    dead = false;
                    break;
                }
                use_count u = {ctx, nm, dl, gone, {kept0, kept1, kept2}, 0};
                kl_ast_walk(f->body, use_visit, &u);
                free(nm);
                /* its own declarator is the one use left */
                dead = u.n == 1;
            }
            if (!dead) continue;
            uint32_t a, b;
            rt_stmt_range(ctx, d, NULL, &a, &b);
            /* the comment lines just above go with it */
            if (a == rt_line_start(ctx, a)) {
                TSNode prev = ts_node_prev_named_sibling(d);
                while (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
                       rt_line_end(ctx, ts_node_end_byte(prev)) == a) {
                    a = rt_line_start(ctx, ts_node_start_byte(prev));
                    prev = ts_node_prev_named_sibling(prev);
                }
            }
            dl->start[dl->n] = a;
            dl->end[dl->n] = b;
            dl->decl[dl->n++] = d;
            changed = true;
        }
    }
}

/* A function of the file that nothing but the replaced statement names: its definition, with the comment
 * lines above it. */
static bool unused_function(const kl_rule_ctx *ctx, const char *name, TSNode gone, TSNode kept, uint32_t *a, uint32_t *b)
{
    TSNode fn = rt_device_fn_named(ctx, name);
    if (ts_node_is_null(fn)) return false;
    TSNode root = kl_source_root(ctx->src);
    unsigned all = rt_count_ident(ctx, root, name), in_gone = rt_count_ident(ctx, gone, name);
    unsigned in_kept = ts_node_is_null(kept) ? 0 : rt_count_ident(ctx, kept, name);
    unsigned own = rt_count_ident(ctx, kl_ast_function_outer(fn), name);
    if (all - in_gone + in_kept != own) return false;
    TSNode outer = kl_ast_function_outer(fn);
    *a = rt_line_start(ctx, ts_node_start_byte(outer));
    *b = rt_line_end(ctx, ts_node_end_byte(outer));
    TSNode prev = ts_node_prev_named_sibling(outer);
    while (rt_is(prev, "comment") && rt_line_end(ctx, ts_node_end_byte(prev)) == *a) {
        *a = rt_line_start(ctx, ts_node_start_byte(prev));
        prev = ts_node_prev_named_sibling(prev);
    }
    /* one blank line after it */
    if (*b < ctx->len && ctx->text[*b] == '\n') (*b)++;
    return true;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf < 64 ? nf : 64, site->kernel);
    if (!f) return kl_rule_not_applicable(err, "no function %s", site->kernel);
    TSNode ifs = {{0}, 0, 0};
    if (!kl_source_node_at(ctx->src, site->span, &ifs)) ifs = (TSNode){{0}, 0, 0};
    while (!ts_node_is_null(ifs) && !rt_is(ifs, "if_statement")) ifs = ts_node_parent(ifs);
    ip_site s;
    if (ts_node_is_null(ifs) || !recognise(ctx, f, ifs, &s))
        return kl_rule_not_applicable(err, "no interior/edge choice at %s", site->id);

    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(ifs), ind, sizeof ind);
    kl_strbuf sb = KL_STRBUF_INIT;
    TSNode kept_cond = {{0}, 0, 0};
    kl_status st = KL_OK;
    if (s.form == IP_BRANCHES) {
        TSNode outer = ts_node_parent(ifs);
        bool unwrap = rt_is(outer, "compound_statement") && !declares_clash(ctx, s.tested, f->body, ifs);
        if (unwrap) {
            /* the statements of the block, at the if's indentation */
            TSNode first = {{0}, 0, 0}, last = {{0}, 0, 0};
            for (uint32_t i = 0; i < ts_node_named_child_count(s.tested); i++) {
                TSNode k = ts_node_named_child(s.tested, i);
                if (ts_node_is_null(first)) first = k;
                last = k;
            }
            if (ts_node_is_null(first)) {
                kl_strbuf_release(&sb);
                return kl_rule_not_applicable(err, "the edge branch at line %u is empty", kl_ast_line(s.tested));
            }
            char from[64];
            uint32_t a = rt_line_start(ctx, ts_node_start_byte(first)), b = ts_node_end_byte(last);
            rt_indent_of(ctx, ts_node_start_byte(first), from, sizeof from);
            char *r = rt_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(from));
            if (!r) {
                kl_strbuf_release(&sb);
                return kl_rule_not_applicable(err, "cannot re-indent the edge branch at line %u", kl_ast_line(s.tested));
            }
            size_t lead = 0;
            while (r[lead] == ' ' || r[lead] == '\t') lead++;
            kl_strbuf_add(&sb, r + lead, strlen(r + lead));
            free(r);
        } else {
            char *t = moved_text(ctx, s.tested, ind);
            if (!t) {
                kl_strbuf_release(&sb);
                return kl_rule_not_applicable(err, "cannot re-indent the edge branch at line %u", kl_ast_line(s.tested));
            }
            kl_strbuf_add(&sb, t, strlen(t));
            free(t);
        }
    } else {
        TSNode call_stmt = single_stmt(s.tested);
        char inner[80];
        kl_snprintf(inner, sizeof inner, "%s    ", ind);
        char *t = moved_text(ctx, call_stmt, ts_node_is_null(s.guard) ? ind : inner);
        if (!t) {
            kl_strbuf_release(&sb);
            return kl_rule_not_applicable(err, "cannot re-indent the call at line %u", kl_ast_line(call_stmt));
        }
        if (!ts_node_is_null(s.guard)) {
            char *g = rt_text(ctx, s.guard);
            if (!s.tested_then && implies(ctx, f, s.cond, s.guard)) {
                kl_strbuf_addf(&sb, "if (%s)\n%s%s", g ? g : "", inner, t);
            } else {
                char *c = rt_text(ctx, s.cond);
                kl_strbuf_addf(&sb, "if ((%s) || (%s))\n%s%s", c ? c : "", g ? g : "", inner, t);
                free(c);
                kept_cond = s.cond;
            }
            free(g);
        } else {
            kl_strbuf_add(&sb, t, strlen(t));
        }
        free(t);
    }
    /* the comment lines just above the choice describe it: they go with it */
    uint32_t from = ts_node_start_byte(ifs);
    if (rt_line_blank_before(ctx, from)) {
        TSNode prev = ts_node_prev_named_sibling(ifs);
        uint32_t ls = rt_line_start(ctx, from);
        while (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
               rt_line_end(ctx, ts_node_end_byte(prev)) == ls) {
            ls = rt_line_start(ctx, ts_node_start_byte(prev));
            prev = ts_node_prev_named_sibling(prev);
        }
        if (ls != rt_line_start(ctx, from)) {
            kl_strbuf pre = KL_STRBUF_INIT;
            kl_strbuf_add(&pre, ind, strlen(ind));
            kl_strbuf_add(&pre, kl_strbuf_str(&sb), sb.len);
            kl_strbuf_release(&sb);
            sb = pre;
            from = ls;
        }
    }
    st = kl_edits_add(out, from, ts_node_end_byte(ifs), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");

    deadloc dl = {0};
    dead_locals(ctx, f, ifs, s.tested, s.guard, kept_cond, &dl);
    for (unsigned i = 0; i < dl.n && st == KL_OK; i++) st = kl_edits_add(out, dl.start[i], dl.end[i], "");
    uint32_t a, b;
    if (st == KL_OK && s.form == IP_FUNCTIONS && unused_function(ctx, s.fast_callee, ifs, s.tested, &a, &b))
        st = kl_edits_add(out, a, b, "");
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    return KL_OK;
}

const kl_rule kl_rule_interior_path = {
    NAME,
    "blocks whose neighbourhood lies inside the data take a path without bounds tests; the others the tested one",
    NULL,
    0,
    find,
    remove_site,
    NULL,
};
