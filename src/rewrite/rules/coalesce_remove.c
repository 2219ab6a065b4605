/* coalesce: the staged exchange through a shared tile taken out (docs/rules.md, coalesce, "the
 * staged exchange"): the tile's one store before the barrier becomes the global write that read it
 * back after the barrier, its index seen from the storing thread. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coalesce.h"
#include "rewrite/rules/row_step.h"

/* ---- removing a staged exchange ------------------------------------------------------------------ */


static bool is_atom(const kl_rule_ctx *ctx, TSNode n)
{
    return rt_is(n, "identifier") || co_is_thread_letter(ctx, n, 'x') || co_is_thread_letter(ctx, n, 'y');
}

/* The `for` loop declaring v around n (v a loop variable there), or a null node. */
static TSNode loop_of(const kl_rule_ctx *ctx, TSNode n, TSNode v)
{
    for (TSNode a = ts_node_parent(n); !ts_node_is_null(a); a = ts_node_parent(a)) {
        if (!rt_is(a, "for_statement")) continue;
        TSNode up = rt_field(a, "update");
        TSNode lv = rt_is(up, "assignment_expression") ? rt_field(up, "left") : (TSNode){0};
        if (rt_is(lv, "identifier")) {
            char *a1 = rt_text(ctx, lv), *b1 = rt_text(ctx, v);
            bool same = a1 && b1 && !strcmp(a1, b1);
            free(a1);
            free(b1);
            if (same) return a;
        }
    }
    return (TSNode){0};
}

/* A subscript: a variable (base; var null) or `base + v` / `v + base` with v the variable of a
 * loop `for (… v = 0; …; v += S)` around it. */
static bool sub_form(const kl_rule_ctx *ctx, TSNode n, TSNode *base, TSNode *var)
{
    *base = *var = (TSNode){0};
    if (is_atom(ctx, n)) {
        *base = n;
        return true;
    }
    if (!rt_is(n, "binary_expression") || !rt_text_is(ctx, rt_field(n, "operator"), "+")) return false;
    TSNode l = rt_field(n, "left"), r = rt_field(n, "right");
    for (int k = 0; k < 2; k++) {
        TSNode b = k ? r : l, v = k ? l : r;
        TSNode loop = rt_is(v, "identifier") ? loop_of(ctx, n, v) : (TSNode){0};
        if (!is_atom(ctx, b) || ts_node_is_null(loop)) continue;
        TSNode start = kl_loop_start(loop);
        long long s0 = -1;
        if (ts_node_is_null(start) || !rt_const_eval(ctx, (TSNode){0}, start, &s0) || s0 != 0) continue;
        *base = b;
        *var = v;
        return true;
    }
    return false;
}

/* A loop header without blanks, with its variable written as `@`. */
static char *header_text(const kl_rule_ctx *ctx, TSNode loop, TSNode v)
{
    TSNode body = rt_field(loop, "body");
    char *name = rt_text(ctx, v);
    if (!name) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t a = ts_node_start_byte(loop), b = ts_node_start_byte(body);
    size_t nl = strlen(name);
    for (uint32_t i = a; i < b; i++) {
        char c = ctx->text[i];
        bool word_start = i == a || !(ctx->text[i - 1] == '_' || (ctx->text[i - 1] >= 'a' && ctx->text[i - 1] <= 'z') ||
                                      (ctx->text[i - 1] >= 'A' && ctx->text[i - 1] <= 'Z') ||
                                      (ctx->text[i - 1] >= '0' && ctx->text[i - 1] <= '9'));
        if (word_start && i + nl <= b && !strncmp(ctx->text + i, name, nl)) {
            char d = i + nl < b ? ctx->text[i + nl] : ' ';
            if (!(d == '_' || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') || (d >= '0' && d <= '9'))) {
                kl_strbuf_addc(&sb, '@');
                i += (uint32_t)nl - 1;
                continue;
            }
        }
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') kl_strbuf_addc(&sb, c);
    }
    free(name);
    char *out = sb.failed ? NULL : kl_strbuf_detach(&sb, NULL);
    kl_strbuf_release(&sb);
    return out;
}

/* Rows `b + v` on the write's side: its loop over rows must read the thread index b and v only as
 * their sum (row_step.c), so that the write's index is a function of the tile element alone; and
 * the store's side must walk the same rows (the same loop header), so that the elements stored are
 * the elements written. */
static bool rows_loops_agree(const kl_rule_ctx *ctx, const rt_func *f, const staged_form *sf, char *why, size_t size)
{
    TSNode loops[4];
    memset(loops, 0, sizeof loops);
    TSNode at[4] = {sf->store, sf->store, sf->write, sf->write};
    for (int i = 0; i < 4; i++)
        if (!ts_node_is_null(sf->var[i])) loops[i] = loop_of(ctx, at[i], sf->var[i]);
    for (int i = 2; i < 4; i++) {
        if (ts_node_is_null(loops[i])) continue;
        int dim = co_is_thread_letter(ctx, sf->base[i], 'x') ? 0 : co_is_thread_letter(ctx, sf->base[i], 'y') ? 1 : -1;
        char *v = rt_text(ctx, sf->var[i]);
        char rwhy[300] = "";
        bool ok = false;
        for (int d = dim < 0 ? 1 : dim; v && d >= 0 && !ok && !rwhy[0]; d--) {
            ok = kl_row_step_loop(ctx->src, f->def, loops[i], v, d, rwhy, sizeof rwhy);
            if (dim >= 0) break;
        }
        free(v);
        if (!ok) {
            kl_snprintf(why, size, "%s", rwhy[0] ? rwhy : "the write's loop over rows reads its thread's row otherwise");
            return false;
        }
    }
    /* the loops over rows of the two sides, in order */
    TSNode s = ts_node_is_null(loops[0]) ? loops[1] : loops[0], w = ts_node_is_null(loops[2]) ? loops[3] : loops[2];
    TSNode sv = ts_node_is_null(loops[0]) ? sf->var[1] : sf->var[0], wv = ts_node_is_null(loops[2]) ? sf->var[3] : sf->var[2];
    if (ts_node_is_null(s) != ts_node_is_null(w)) {
        kl_span sp = kl_node_span(ts_node_is_null(s) ? w : s);
        kl_snprintf(why, size, "only one side walks the tile's rows in a loop (line %u)", sp.line);
        return false;
    }
    if (ts_node_is_null(s)) return true;
    char *hs = header_text(ctx, s, sv), *hw = header_text(ctx, w, wv);
    bool same = hs && hw && !strcmp(hs, hw);
    free(hs);
    free(hw);
    if (!same) {
        kl_snprintf(why, size, "the loops over the tile's rows at lines %u and %u differ", kl_node_span(s).line,
                    kl_node_span(w).line);
        return false;
    }
    return true;
}

/* The outer T[a][b] of a use of identifier T, or a null node. */
static TSNode tile_access(TSNode use)
{
    TSNode in = ts_node_parent(use);
    if (!rt_is(in, "subscript_expression") || !ts_node_eq(rt_field(in, "argument"), use)) return (TSNode){0};
    TSNode out = ts_node_parent(in);
    if (!rt_is(out, "subscript_expression") || !ts_node_eq(rt_field(out, "argument"), in)) return (TSNode){0};
    if (rt_is(ts_node_parent(out), "subscript_expression")) return (TSNode){0}; /* 3-D */
    return out;
}

static TSNode sub_index(TSNode s) { return kl_ast_subscript_index(s); }

typedef struct uses {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode skip;
    TSNode items[8];
    unsigned n;
} uses;

static bool uses_visit(TSNode n, void *user)
{
    uses *u = user;
    if (ts_node_eq(n, u->skip)) return false;
    if (rt_is(n, "identifier") && rt_text_is(u->ctx, n, u->name)) {
        if (u->n < 8) u->items[u->n] = n;
        u->n++;
    }
    return true;
}

/* Memory side effects after the barrier other than the write itself. */
typedef struct after_scan {
    const kl_rule_ctx *ctx;
    TSNode write;
    TSNode bad;
} after_scan;

static bool after_visit(TSNode n, void *user)
{
    after_scan *s = user;
    if (!ts_node_is_null(s->bad)) return false;
    if (rt_is(n, "assignment_expression") && !ts_node_eq(n, s->write) && !rt_is(rt_field(n, "left"), "identifier"))
        s->bad = n;
    else if (rt_is(n, "update_expression") && !rt_is(rt_field(n, "argument"), "identifier")) s->bad = n;
    else if (rt_is(n, "call_expression")) {
        TSNode fn = rt_field(n, "function");
        char *name = rt_is(fn, "identifier") ? rt_text(s->ctx, fn) : NULL;
        if (name && (!strncmp(name, "atomic", 6) || !strncmp(name, "__sync", 6))) s->bad = n;
        free(name);
    }
    return true;
}

/* 1: f holds the staged form; 0: it holds none (no top-level barrier after a 2-D __shared__
 * tile); -1: it looks staged but cannot be undone here (why says why). */
int co_find_staged(const kl_rule_ctx *ctx, const rt_func *f, staged_form *sf, char *why, size_t size)
{
    memset(sf, 0, sizeof *sf);
    uint32_t c = ts_node_named_child_count(f->body);
    unsigned barriers = 0;
    for (uint32_t i = 0; i < c; i++) {
        TSNode s = ts_node_named_child(f->body, i);
        if (rt_is_syncthreads(ctx, s)) {
            if (!barriers++) sf->barrier = s;
            continue;
        }
        if (barriers || !rt_is(s, "declaration")) continue;
        bool shared = false;
        uint32_t k = ts_node_child_count(s);
        for (uint32_t j = 0; j < k; j++) {
            TSNode q = ts_node_child(s, j);
            if (rt_is(q, "type_qualifier") && rt_text_is(ctx, q, "__shared__")) shared = true;
        }
        TSNode d = rt_field(s, "declarator");
        if (!shared || !rt_is(d, "array_declarator") || !rt_is(rt_field(d, "declarator"), "array_declarator") ||
            !rt_is(rt_field(rt_field(d, "declarator"), "declarator"), "identifier"))
            continue;
        if (!ts_node_is_null(sf->decl)) {
            kl_snprintf(why, size, "more than one 2-D __shared__ array before the barrier");
            return -1;
        }
        sf->decl = s;
        char *name = rt_text(ctx, kl_ast_declarator_name(d));
        kl_snprintf(sf->tile, sizeof sf->tile, "%s", name ? name : "");
        free(name);
    }
    if (ts_node_is_null(sf->decl) || !barriers) return 0;
    if (barriers > 1) {
        kl_snprintf(why, size, "%u barriers at the top of the body; the staged exchange has one", barriers);
        return -1;
    }
    uses u = {.ctx = ctx, .name = sf->tile, .skip = sf->decl};
    kl_ast_walk(f->body, uses_visit, &u);
    uint32_t bar = ts_node_start_byte(sf->barrier);
    TSNode load = {0};
    for (unsigned i = 0; i < u.n && i < 8; i++) {
        TSNode acc = tile_access(u.items[i]);
        TSNode par = ts_node_is_null(acc) ? acc : ts_node_parent(acc);
        bool asg = rt_is(par, "assignment_expression") && rt_text_is(ctx, rt_field(par, "operator"), "=") &&
                   rt_is(ts_node_parent(par), "expression_statement");
        if (asg && ts_node_eq(rt_field(par, "left"), acc) && ts_node_start_byte(acc) < bar && ts_node_is_null(sf->store))
            sf->store = acc;
        else if (asg && ts_node_eq(rt_field(par, "right"), acc) && ts_node_start_byte(acc) > bar &&
                 ts_node_is_null(sf->write) && rt_is(rt_field(par, "left"), "subscript_expression")) {
            sf->write = par;
            load = acc;
        } else {
            kl_span sp = kl_node_span(u.items[i]);
            kl_snprintf(why, size,
                        "'%s' is used at line %u other than by one store before the barrier and one global write "
                        "after it",
                        sf->tile, sp.line);
            return -1;
        }
    }
    if (u.n > 8 || ts_node_is_null(sf->store) || ts_node_is_null(sf->write)) {
        kl_snprintf(why, size, "'%s' is not stored once before the barrier and written out once after it", sf->tile);
        return -1;
    }
    sf->i1 = sub_index(rt_field(sf->store, "argument"));
    sf->j1 = sub_index(sf->store);
    sf->i2 = sub_index(rt_field(load, "argument"));
    sf->j2 = sub_index(load);
    char *t[4] = {rt_text(ctx, sf->i1), rt_text(ctx, sf->j1), rt_text(ctx, sf->i2), rt_text(ctx, sf->j2)};
    TSNode subs[4] = {sf->i1, sf->j1, sf->i2, sf->j2};
    bool ok = t[0] && t[1] && t[2] && t[3] && strcmp(t[0], t[1]) && strcmp(t[2], t[3]);
    for (int i = 0; i < 4 && ok; i++) ok = sub_form(ctx, subs[i], &sf->base[i], &sf->var[i]);
    for (int i = 0; i < 4; i++) free(t[i]);
    if (!ok) {
        kl_snprintf(why, size,
                    "the subscripts of '%s' are not two distinct variables (or rows `v + j` of a loop over rows) on "
                    "each side",
                    sf->tile);
        return -1;
    }
    sf->exchange = true;
    if (!rows_loops_agree(ctx, f, sf, why, size)) return -1;
    after_scan as = {.ctx = ctx, .write = sf->write};
    for (uint32_t i = 0; i < c; i++) {
        TSNode s = ts_node_named_child(f->body, i);
        if (ts_node_start_byte(s) > bar) kl_ast_walk(s, after_visit, &as);
    }
    if (!ts_node_is_null(as.bad)) {
        kl_span sp = kl_node_span(as.bad);
        kl_snprintf(why, size, "line %u, after the barrier, has an effect besides the write (it would be lost)", sp.line);
        return -1;
    }
    return 1;
}

/* ---- names, seen from a place in the kernel ---- */

typedef enum { NM_OTHER, NM_LOCAL, NM_VARYING } nm_kind;

typedef struct assign_count {
    const kl_rule_ctx *ctx;
    const char *name;
    unsigned n;
} assign_count;

static bool assign_visit(TSNode n, void *user)
{
    assign_count *a = user;
    TSNode t = {0};
    if (rt_is(n, "assignment_expression")) t = rt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = rt_field(n, "argument");
    if (rt_is(t, "identifier") && rt_text_is(a->ctx, t, a->name)) a->n++;
    return true;
}

static unsigned assigned_count(const kl_rule_ctx *ctx, TSNode body, const char *name)
{
    assign_count a = {ctx, name, 0};
    kl_ast_walk(body, assign_visit, &a);
    return a.n;
}

/* A declaration's declarator for name: its value (init) or a null node (no initializer). */
static bool decl_declares(const kl_rule_ctx *ctx, TSNode decl, const char *name, TSNode *value)
{
    uint32_t k = ts_node_named_child_count(decl);
    for (uint32_t i = 0; i < k; i++) {
        TSNode d = ts_node_named_child(decl, i);
        if (!rt_is(d, "init_declarator") && !rt_is(d, "identifier") && !rt_is(d, "pointer_declarator") &&
            !rt_is(d, "array_declarator"))
            continue;
        TSNode id = kl_ast_declarator_name(d);
        if (ts_node_is_null(id) || !rt_text_is(ctx, id, name)) continue;
        *value = rt_is(d, "init_declarator") ? rt_field(d, "value") : (TSNode){0};
        return true;
    }
    return false;
}

/* A local declared in block `blk` and assigned again only by statements `name = e;` of that block
 * (the blog-style transpose's `x = blockIdx.y * TILE_DIM + threadIdx.x;` after the barrier): its
 * value before `child` (a statement of blk) is the last of those before it, else the declaration's
 * (*value unchanged). False when it is assigned anywhere else or otherwise. */
typedef struct reach_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode blk;
    bool other;
} reach_scan;

static bool reach_visit(TSNode n, void *user)
{
    reach_scan *r = user;
    TSNode t = {0};
    if (rt_is(n, "assignment_expression")) t = rt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = rt_field(n, "argument");
    if (!rt_is(t, "identifier") || !rt_text_is(r->ctx, t, r->name)) return true;
    TSNode st = ts_node_parent(n);
    if (!rt_is(n, "assignment_expression") || !rt_text_is(r->ctx, rt_field(n, "operator"), "=") ||
        !rt_is(st, "expression_statement") || !ts_node_eq(ts_node_parent(st), r->blk))
        r->other = true;
    return true;
}

static bool reaching(const kl_rule_ctx *ctx, TSNode body, TSNode blk, TSNode child, const char *name, TSNode *value)
{
    reach_scan r = {ctx, name, blk, false};
    kl_ast_walk(body, reach_visit, &r);
    if (r.other) return false;
    uint32_t k = ts_node_named_child_count(blk);
    for (uint32_t i = 0; i < k; i++) {
        TSNode s = ts_node_named_child(blk, i);
        if (ts_node_start_byte(s) >= ts_node_start_byte(child)) break;
        TSNode e = rt_is(s, "expression_statement") ? ts_node_named_child(s, 0) : (TSNode){0};
        if (rt_is(e, "assignment_expression") && rt_is(rt_field(e, "left"), "identifier") &&
            rt_text_is(ctx, rt_field(e, "left"), name))
            *value = rt_field(e, "right");
    }
    return true;
}

/* What `name` is at `at` inside body: a local with one definition (its value), something that
 * varies (a loop variable, a local assigned again or without initializer), or other (a
 * parameter, a file-level name). */
static nm_kind lookup(const kl_rule_ctx *ctx, TSNode body, TSNode at, const char *name, TSNode *value)
{
    TSNode child = at;
    for (TSNode a = ts_node_parent(at); !ts_node_is_null(a); child = a, a = ts_node_parent(a)) {
        if (rt_is(a, "compound_statement")) {
            TSNode v = {0};
            bool any = false;
            uint32_t k = ts_node_named_child_count(a);
            for (uint32_t i = 0; i < k; i++) {
                TSNode s = ts_node_named_child(a, i);
                if (ts_node_start_byte(s) >= ts_node_start_byte(child)) break;
                TSNode val = {0};
                if (rt_is(s, "declaration") && decl_declares(ctx, s, name, &val)) {
                    v = val;
                    any = true;
                }
            }
            if (any) {
                if (ts_node_is_null(v) || rt_is(v, "initializer_list") || rt_is(v, "argument_list"))
                    return NM_VARYING;
                if (assigned_count(ctx, body, name) && !reaching(ctx, body, a, child, name, &v)) return NM_VARYING;
                *value = v;
                return NM_LOCAL;
            }
        } else if (rt_is(a, "for_statement")) {
            TSNode init = rt_field(a, "initializer"), val;
            if (rt_is(init, "declaration") && !ts_node_eq(child, init) && decl_declares(ctx, init, name, &val))
                return NM_VARYING;
        }
        if (ts_node_eq(a, body)) break;
    }
    return NM_OTHER;
}

/* ---- the write's destination, seen from the store ---- */

typedef struct xlate {
    const kl_rule_ctx *ctx;
    TSNode body;
    TSNode from_atoms[2];  /* the variables of i2, j2: replaced by … */
    TSNode to_sub[2];      /* … i1, j1 (parenthesized when a row `b + v`) */
    TSNode to_atoms[4];    /* the variables of i1, j1 (bases and loop variables; null nodes unused) */
    TSNode drop[2];        /* the write's loop variables of rows `b + v`: dropped from their sums */
    TSNode store;          /* the store's place (names visible there) */
    char why[200];
    bool failed;
} xlate;

static bool atom_is(const kl_rule_ctx *ctx, TSNode n, TSNode atom)
{
    if (ts_node_is_null(atom)) return false;
    char *a = rt_text(ctx, n), *b = rt_text(ctx, atom);
    bool eq = a && b && !strcmp(a, b);
    free(a);
    free(b);
    return eq;
}

/* Does expression n (at its place) depend on atoms[0..na), or on something that varies? */
static bool depends(xlate *x, TSNode n, const TSNode *atoms, unsigned na, int depth)
{
    if (depth > 32) return true;
    if (rt_is(n, "identifier") || rt_is(n, "field_expression"))
        for (unsigned k = 0; k < na; k++)
            if (atom_is(x->ctx, n, atoms[k])) return true;
    if (co_is_thread_letter(x->ctx, n, 'x') || co_is_thread_letter(x->ctx, n, 'y')) return true;
    if (rt_is(n, "identifier")) {
        char *name = rt_text(x->ctx, n);
        TSNode v = {0};
        nm_kind k = name ? lookup(x->ctx, x->body, n, name, &v) : NM_VARYING;
        free(name);
        if (k == NM_VARYING) return true;
        return k == NM_LOCAL && depends(x, v, atoms, na, depth + 1);
    }
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++)
        if (depends(x, ts_node_named_child(n, i), atoms, na, depth + 1)) return true;
    return false;
}

/* The same local (by its value node) is visible from the store. */
static bool visible_at_store(xlate *x, const char *name, TSNode value)
{
    TSNode v = {0};
    return lookup(x->ctx, x->body, x->store, name, &v) == NM_LOCAL && ts_node_eq(v, value);
}

static void emit(xlate *x, TSNode n, kl_strbuf *sb, bool subst, bool match, int depth);

/* A local of the store's side whose definition, expanded, is `want`: its name into name. */
static void match_local(xlate *x, const char *want, char *name, size_t size, bool *found)
{
    *found = false;
    TSNode child = x->store;
    for (TSNode a = ts_node_parent(x->store); !ts_node_is_null(a) && !*found; child = a, a = ts_node_parent(a)) {
        if (rt_is(a, "compound_statement")) {
            uint32_t k = ts_node_named_child_count(a);
            for (uint32_t i = 0; i < k && !*found; i++) {
                TSNode s = ts_node_named_child(a, i);
                if (ts_node_start_byte(s) >= ts_node_start_byte(child)) break;
                if (!rt_is(s, "declaration")) continue;
                uint32_t m = ts_node_named_child_count(s);
                for (uint32_t j = 0; j < m && !*found; j++) {
                    TSNode d = ts_node_named_child(s, j);
                    if (!rt_is(d, "init_declarator")) continue;
                    TSNode id = kl_ast_declarator_name(d), v = rt_field(d, "value");
                    char *nm = rt_text(x->ctx, id);
                    TSNode v2 = {0};
                    if (nm && lookup(x->ctx, x->body, x->store, nm, &v2) == NM_LOCAL && ts_node_eq(v2, v)) {
                        kl_strbuf e = KL_STRBUF_INIT;
                        xlate y = *x; /* a definition that does not expand is no candidate, not a failure */
                        emit(&y, v, &e, false, false, 0);
                        char *a1 = e.failed || y.failed ? NULL : co_squeeze(kl_strbuf_str(&e));
                        if (a1 && !strcmp(a1, want)) {
                            kl_snprintf(name, size, "%s", nm);
                            *found = true;
                        }
                        free(a1);
                        kl_strbuf_release(&e);
                    }
                    free(nm);
                }
            }
        }
        if (ts_node_eq(a, x->body)) break;
    }
}

/* Write expression n: with subst, i2/j2 become i1/j1 and locals depending on them are inlined
 * (or named by an equal local of the store's side when match); without, locals depending on
 * the store's own i1/j1 are inlined (the form definitions are compared in). */
static void emit(xlate *x, TSNode n, kl_strbuf *sb, bool subst, bool match, int depth)
{
    if (x->failed) return;
    if (depth > 32) {
        x->failed = true;
        kl_snprintf(x->why, sizeof x->why, "its definitions nest too deeply");
        return;
    }
    const TSNode *atoms = subst ? x->from_atoms : x->to_atoms;
    unsigned na = subst ? 2 : 4;
    if (rt_is(n, "identifier") || rt_is(n, "field_expression")) {
        for (unsigned k = 0; k < na; k++)
            if (atom_is(x->ctx, n, atoms[k])) {
                bool sum = subst && !is_atom(x->ctx, x->to_sub[k]);
                char *t = rt_text(x->ctx, subst ? x->to_sub[k] : n);
                if (t) kl_strbuf_addf(sb, sum ? "(%s)" : "%s", t);
                free(t);
                return;
            }
    }
    /* a row `b + v` of the write's loop: with b replaced by the storing thread's row, v goes */
    if (subst && rt_is(n, "binary_expression") && rt_text_is(x->ctx, rt_field(n, "operator"), "+")) {
        TSNode l = rt_field(n, "left"), r = rt_field(n, "right");
        for (int k = 0; k < 2; k++) {
            TSNode v = kl_ast_unparen(k ? l : r);
            if (rt_is(v, "identifier") && (atom_is(x->ctx, v, x->drop[0]) || atom_is(x->ctx, v, x->drop[1]))) {
                emit(x, k ? r : l, sb, subst, match, depth + 1);
                return;
            }
        }
    }
    /* parentheses around what became one name go */
    if (rt_is(n, "parenthesized_expression") && ts_node_named_child_count(n) == 1) {
        kl_strbuf in = KL_STRBUF_INIT;
        emit(x, ts_node_named_child(n, 0), &in, subst, match, depth + 1);
        const char *t = kl_strbuf_str(&in);
        bool name = !in.failed && t && *t;
        for (const char *c = t; name && *c; c++)
            name = *c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
        if (in.failed) x->failed = true;
        else if (name) kl_strbuf_adds(sb, t);
        else {
            TSNode ch = ts_node_named_child(n, 0);
            kl_strbuf_add(sb, x->ctx->text + ts_node_start_byte(n), ts_node_start_byte(ch) - ts_node_start_byte(n));
            kl_strbuf_adds(sb, t ? t : "");
            kl_strbuf_add(sb, x->ctx->text + ts_node_end_byte(ch), ts_node_end_byte(n) - ts_node_end_byte(ch));
        }
        kl_strbuf_release(&in);
        return;
    }
    if (co_is_thread_letter(x->ctx, n, 'x') || co_is_thread_letter(x->ctx, n, 'y')) {
        x->failed = true;
        kl_span sp = kl_node_span(n);
        kl_snprintf(x->why, sizeof x->why, "the write's index reads threadIdx at line %u besides the tile's subscripts",
                    sp.line);
        return;
    }
    if (rt_is(n, "identifier")) {
        char *name = rt_text(x->ctx, n);
        if (!name) {
            x->failed = true;
            return;
        }
        TSNode v = {0};
        nm_kind k = lookup(x->ctx, x->body, n, name, &v);
        if (k == NM_VARYING) {
            x->failed = true;
            kl_span sp = kl_node_span(n);
            kl_snprintf(x->why, sizeof x->why, "the write's index depends on '%s' (line %u), which the store's side lacks",
                        name, sp.line);
        } else if (k == NM_OTHER || (!depends(x, v, atoms, na, 0) && (!subst || visible_at_store(x, name, v)))) {
            kl_strbuf_adds(sb, name);
        } else {
            bool found = false;
            char other[128];
            if (match) {
                kl_strbuf raw = KL_STRBUF_INIT;
                emit(x, v, &raw, subst, false, depth + 1);
                char *want = raw.failed ? NULL : co_squeeze(kl_strbuf_str(&raw));
                if (want && !x->failed) match_local(x, want, other, sizeof other, &found);
                /* `P + (b + v)`, the storing thread's row b + v added last: a local `P + b` of the
                 * store's side, plus v */
                for (int s2 = 0; s2 < 2 && want && !x->failed && !found; s2++) {
                    TSNode sub = x->to_sub[s2];
                    if (is_atom(x->ctx, sub)) continue;
                    TSNode sb2 = x->to_atoms[2 * s2], sv2 = x->to_atoms[2 * s2 + 1];
                    char *st = rt_text(x->ctx, sub), *bt = rt_text(x->ctx, sb2), *vt = rt_text(x->ctx, sv2);
                    char *sq = st ? co_squeeze(st) : NULL;
                    size_t wl = strlen(want), ql = sq ? strlen(sq) : 0;
                    if (sq && bt && vt && wl > ql + 3 && want[wl - ql - 3] == '+' && want[wl - ql - 2] == '(' &&
                        !strncmp(want + wl - ql - 2 + 1, sq, ql) && want[wl - 1] == ')') {
                        size_t w2n = wl + strlen(bt) + 1;
                        char *w2 = malloc(w2n);
                        if (w2) {
                            kl_snprintf(w2, w2n, "%.*s%s", (int)(wl - ql - 2), want, bt);
                            char *w3 = co_squeeze(w2);
                            char nm[128];
                            if (w3) match_local(x, w3, nm, sizeof nm, &found);
                            if (found) kl_snprintf(other, sizeof other, "(%s + %s)", nm, vt);
                            free(w3);
                            free(w2);
                        }
                    }
                    free(st);
                    free(bt);
                    free(vt);
                    free(sq);
                }
                free(want);
                kl_strbuf_release(&raw);
            }
            if (found) kl_strbuf_adds(sb, other);
            else {
                kl_strbuf_addc(sb, '(');
                emit(x, v, sb, subst, match, depth + 1);
                kl_strbuf_addc(sb, ')');
            }
        }
        free(name);
        return;
    }
    /* copy the node, writing its named children through emit */
    uint32_t at = ts_node_start_byte(n);
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c && !x->failed; i++) {
        TSNode ch = ts_node_named_child(n, i);
        kl_strbuf_add(sb, x->ctx->text + at, ts_node_start_byte(ch) - at);
        emit(x, ch, sb, subst, match, depth + 1);
        at = ts_node_end_byte(ch);
    }
    kl_strbuf_add(sb, x->ctx->text + at, ts_node_end_byte(n) - at);
}

/* The range deleting a top-level statement with the comment lines right above it. */
static void stmt_with_comments(const kl_rule_ctx *ctx, TSNode s, uint32_t *a, uint32_t *b)
{
    rt_stmt_range(ctx, s, NULL, a, b);
    /* a comment after it on its line goes with it */
    TSNode next = ts_node_next_named_sibling(s);
    if (rt_is(next, "comment") && ts_node_start_point(next).row == ts_node_end_point(s).row &&
        rt_line_blank_before(ctx, ts_node_start_byte(s))) {
        uint32_t e = rt_line_end(ctx, ts_node_end_byte(next) - 1);
        bool alone = true;
        for (uint32_t i = ts_node_end_byte(next); i < e; i++)
            if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\r' && ctx->text[i] != '\n') alone = false;
        if (alone) {
            *a = rt_line_start(ctx, ts_node_start_byte(s));
            *b = e;
        }
    }
    if (*a != rt_line_start(ctx, ts_node_start_byte(s))) return;
    for (TSNode p = ts_node_prev_named_sibling(s); rt_is(p, "comment"); p = ts_node_prev_named_sibling(p)) {
        uint32_t pa = ts_node_start_byte(p);
        if (!rt_line_blank_before(ctx, pa) || rt_line_end(ctx, ts_node_end_byte(p) - 1) != *a) break;
        *a = rt_line_start(ctx, pa);
    }
}

/* The block (or run-in-place lambda) statement s: its compound_statement, or a null node. */
static TSNode wrapper_block(const kl_rule_ctx *ctx, TSNode s)
{
    (void)ctx;
    if (rt_is(s, "compound_statement")) return s;
    if (!rt_is(s, "expression_statement")) return (TSNode){0};
    TSNode call = ts_node_named_child(s, 0);
    if (!rt_is(call, "call_expression") || ts_node_named_child_count(rt_field(call, "arguments"))) return (TSNode){0};
    TSNode lam = rt_field(call, "function");
    if (!rt_is(lam, "lambda_expression")) return (TSNode){0};
    return rt_field(lam, "body");
}

/* The line starting at off holds only blanks (and is not the end of the text). */
static bool line_blank(const kl_rule_ctx *ctx, uint32_t off)
{
    if (off >= ctx->len) return false;
    for (uint32_t i = off; i < ctx->len && ctx->text[i] != '\n'; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\r') return false;
    return true;
}

kl_status co_remove_staged(const kl_rule_ctx *ctx, const rt_func *f, const staged_form *sf, kl_edits *out,
                               kl_error *err)
{
    const char *file = kl_source_name(ctx->src);
    xlate x = {.ctx = ctx, .body = f->body, .from_atoms = {sf->base[2], sf->base[3]}, .to_sub = {sf->i1, sf->j1},
               .to_atoms = {sf->base[0], sf->var[0], sf->base[1], sf->var[1]}, .drop = {sf->var[2], sf->var[3]},
               .store = sf->store};
    kl_strbuf dst = KL_STRBUF_INIT;
    emit(&x, rt_field(sf->write, "left"), &dst, true, true, 0);
    if (x.failed || dst.failed) {
        kl_status st = dst.failed ? KL_ERR_NOMEM : KL_ERR_NOT_APPLICABLE;
        kl_strbuf_release(&dst);
        if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
        kl_span sp = kl_node_span(sf->write);
        return kl_rule_not_applicable(err, "%s:%u: the write cannot be moved to the store: %s", file, sp.line, x.why);
    }
    kl_status st = KL_OK;
    uint32_t be = ts_node_end_byte(f->body);
    uint32_t da, db, ba = rt_line_start(ctx, ts_node_start_byte(sf->barrier)), bb = rt_line_start(ctx, be - 1);
    if (!rt_line_blank_before(ctx, be - 1)) bb = be - 1;
    stmt_with_comments(ctx, sf->decl, &da, &db);
    /* no blank line left first or last in the body */
    if (da == rt_line_end(ctx, ts_node_start_byte(f->body)) && line_blank(ctx, db)) db = rt_line_end(ctx, db);
    if (rt_line_blank_before(ctx, be - 1))
        while (ba > ts_node_start_byte(f->body) + 1 && line_blank(ctx, rt_line_start(ctx, ba - 1)) &&
               rt_line_start(ctx, ba - 1) >= db)
            ba = rt_line_start(ctx, ba - 1);
    /* the statements before the barrier: one block or lambda (this rule's form) is unwrapped */
    TSNode only = {0};
    unsigned stmts = 0;
    uint32_t c = ts_node_named_child_count(f->body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode s = ts_node_named_child(f->body, i);
        if (ts_node_start_byte(s) >= ts_node_start_byte(sf->barrier)) break;
        if (ts_node_eq(s, sf->decl) || rt_is(s, "comment")) continue;
        stmts++;
        only = s;
    }
    TSNode blk = stmts == 1 ? wrapper_block(ctx, only) : (TSNode){0};
    char *unwrapped = NULL;
    uint32_t ua = 0, ub = 0;
    if (!ts_node_is_null(blk) && ts_node_start_byte(sf->store) > ts_node_start_byte(blk) &&
        ts_node_end_byte(sf->store) < ts_node_end_byte(blk) && rt_line_blank_before(ctx, ts_node_start_byte(only)) &&
        rt_line_blank_before(ctx, ts_node_end_byte(blk) - 1)) {
        uint32_t ia = rt_line_end(ctx, ts_node_start_byte(blk)), ib = rt_line_start(ctx, ts_node_end_byte(blk) - 1);
        ua = rt_line_start(ctx, ts_node_start_byte(only));
        ub = rt_line_end(ctx, ts_node_end_byte(only) - 1);
        bool alone = ia <= ib && ub <= ba;
        for (uint32_t i = ts_node_end_byte(only); alone && i < ub; i++)
            if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\r' && ctx->text[i] != '\n') alone = false;
        for (uint32_t i = ts_node_start_byte(blk) + 1; alone && i < ia; i++)
            if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\r' && ctx->text[i] != '\n') alone = false;
        if (alone) {
            span_edits e = {0};
            co_se_add(&e, ts_node_start_byte(sf->store), ts_node_end_byte(sf->store), kl_strbuf_str(&dst));
            char *inner = co_se_splice(ctx, ia, ib, &e);
            co_se_release(&e);
            unwrapped = inner ? rt_reindent(inner, strlen(inner), -4) : NULL;
            free(inner);
        }
    }
    if (unwrapped) st = kl_edits_add(out, ua, ub, unwrapped);
    else st = kl_edits_add(out, ts_node_start_byte(sf->store), ts_node_end_byte(sf->store), kl_strbuf_str(&dst));
    free(unwrapped);
    kl_strbuf_release(&dst);
    if (st == KL_OK) st = kl_edits_add(out, da, db, "");
    if (st == KL_OK) st = kl_edits_add(out, ba, bb, "");
    /* marker comments left before the barrier */
    for (uint32_t i = 0; i < c && st == KL_OK; i++) {
        TSNode n = ts_node_named_child(f->body, i);
        if (ts_node_start_byte(n) >= ba) break;
        if (!rt_is(n, "comment") || !rt_has_marker(ctx, ts_node_start_byte(n), ts_node_end_byte(n), "coalesce:")) continue;
        uint32_t a, b;
        rt_stmt_range(ctx, n, NULL, &a, &b);
        if (a >= da && b <= db) continue;
        if (ua < ub && a >= ua && b <= ub) continue;
        st = kl_edits_add(out, a, b, "");
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

