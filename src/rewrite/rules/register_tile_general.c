/* register-tile: the general register-tiled GEMM, any author's form (remove; register_tile.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define NAME "register-tile"

/* ---- the general register-tiled GEMM (any author's form) ------------------------------------------ */
/*
 * A kernel whose threads each hold a 2-D accumulator `T acc[TM][TN]`, updated by one
 * `acc[..][..] += x * y;` (an outer product of values read from two __shared__ tiles), fed by
 * exactly one guarded scalar read of each of two pointer parameters (`c ? P[X * LD + Y] : 0`)
 * and storing `C[X * LD + Y] = acc…` under guards on both coordinates (enclosing `if`s, earlier
 * `if (c) continue;` / `return;`). Whatever the tile layout (transposed, padded, quadrant-split,
 * float4 reads of the tiles, lambdas, a 1-D block), the global indices and their guards say
 * which GEMM it computes: each operand's two coordinates are bounded by two of M, N, K, the
 * bound shared by the two read operands is K, the others pair the reads with the store's row
 * and column. Remove writes that GEMM as the one-output-per-thread shared-tile kernel (16 x 16
 * tiles, a 16 x 16 block, the form smem-tile apply writes and register-tile apply takes) and
 * relaunches it on a (N + 15) / 16 x (M + 15) / 16 grid. Every element of C is computed by one
 * thread as the sum over k in order of tile products, with zeros outside A and B, so any M, N,
 * K (1, 3, 1023) is exact up to the order of the additions.
 */





TSNode register_tile__rg_strip(TSNode n)
{
    while (rt_is(n, "parenthesized_expression") && tt_child_count(n) == 1) n = tt_child(n, 0);
    return n;
}

/* The text of n without blanks and outer parentheses. */
void register_tile__rg_norm(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    n = register_tile__rg_strip(n);
    size_t k = 0;
    for (uint32_t i = ts_node_start_byte(n); i < ts_node_end_byte(n) && k + 1 < size; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\n' && ctx->text[i] != '\r')
            buf[k++] = ctx->text[i];
    buf[k] = 0;
}

/* The operands of a chain of binary `op` (through parentheses), at most max. */
static unsigned rg_flatten(const kl_rule_ctx *ctx, TSNode n, const char *op, TSNode *out, unsigned n0, unsigned max)
{
    n = register_tile__rg_strip(n);
    if (rt_is(n, "binary_expression") && rt_text_is(ctx, tt_field(n, "operator"), op)) {
        n0 = rg_flatten(ctx, tt_field(n, "left"), op, out, n0, max);
        return rg_flatten(ctx, tt_field(n, "right"), op, out, n0, max);
    }
    if (n0 < max) out[n0] = n;
    return n0 + 1;
}

/* Is e the same in every thread and iteration: literals, non-pointer parameters and
 * file-level constants, combined by arithmetic? */
bool register_tile__rg_invariant(const kl_rule_ctx *ctx, const rt_func *f, TSNode e)
{
    e = register_tile__rg_strip(e);
    if (rt_is(e, "number_literal")) return true;
    if (rt_is(e, "identifier")) {
        char name[64];
        long long v;
        tt_copy_text(ctx, e, name, sizeof name);
        if (!ts_node_is_null(rt_param(ctx, f, name))) return !rt_pointer_param(ctx, f, name, NULL, 0);
        return rt_const_name(ctx, f->def, name, &v);
    }
    if (rt_is(e, "binary_expression")) {
        const char *ops[] = {"+", "-", "*", "/", "%"};
        for (unsigned i = 0; i < 5; i++)
            if (rt_text_is(ctx, tt_field(e, "operator"), ops[i]))
                return register_tile__rg_invariant(ctx, f, tt_field(e, "left")) && register_tile__rg_invariant(ctx, f, tt_field(e, "right"));
    }
    return false;
}

/* Add the conjuncts `a < b` (`b > a`) of cond to g; negate: the disjuncts of a condition that
 * skips (`a >= b` gives a < b). Other conjuncts are ignored (a coordinate without a bound is
 * refused later). */
void register_tile__rg_add_cond(const kl_rule_ctx *ctx, TSNode cond, bool negate, register_tile__rg_guard *g, unsigned *ng)
{
    if (rt_is(cond, "condition_clause")) cond = tt_field(cond, "value");
    TSNode parts[RG_MAXG];
    unsigned n = rg_flatten(ctx, cond, negate ? "||" : "&&", parts, 0, RG_MAXG);
    for (unsigned i = 0; i < n && i < RG_MAXG && *ng < RG_MAXG; i++) {
        TSNode c = parts[i];
        if (!rt_is(c, "binary_expression")) continue;
        TSNode l = tt_field(c, "left"), r = tt_field(c, "right"), o = tt_field(c, "operator");
        TSNode lhs = {0}, b = {0};
        if (rt_text_is(ctx, o, negate ? ">=" : "<")) lhs = l, b = r;
        else if (rt_text_is(ctx, o, negate ? "<=" : ">")) lhs = r, b = l;
        if (ts_node_is_null(lhs)) continue;
        register_tile__rg_norm(ctx, lhs, g[*ng].lhs, sizeof g[*ng].lhs);
        g[*ng].bound = register_tile__rg_strip(b);
        (*ng)++;
    }
}

/* Is s `if (c) continue;`, `if (c) break;` or `if (c) return;` (braced or not, no else)? */
bool register_tile__rg_skip_if(const kl_rule_ctx *ctx, TSNode s, TSNode *cond)
{
    if (!rt_is(s, "if_statement") || !ts_node_is_null(tt_field(s, "alternative"))) return false;
    TSNode c = tt_field(s, "consequence");
    if (rt_is(c, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(c, one, 2) != 1) return false;
        c = one[0];
    }
    if (!rt_is(c, "continue_statement") && !rt_is(c, "break_statement") &&
        !(rt_is(c, "return_statement") && tt_child_count(c) == 0))
        return false;
    (void)ctx;
    *cond = tt_field(s, "condition");
    return true;
}

/* Is n inside the first branch of `if (T)` (in_else: inside its else branch) with T a template
 * parameter of f and an else branch? */
bool register_tile__in_template_if(const kl_rule_ctx *ctx, const rt_func *f, TSNode n, bool in_else)
{
    if (!f->templated) return false;
    TSNode tp = tt_field(f->outer, "parameters");
    for (TSNode ch = n, p = tt_parent(n); !ts_node_is_null(p) && !ts_node_eq(ch, f->body); ch = p, p = tt_parent(p)) {
        if (!rt_is(p, "if_statement") || ts_node_is_null(tt_field(p, "alternative"))) continue;
        if (!ts_node_eq(ch, tt_field(p, in_else ? "alternative" : "consequence"))) continue;
        TSNode c = register_tile__rg_strip(tt_field(tt_field(p, "condition"), "value"));
        if (ts_node_is_null(c)) c = register_tile__rg_strip(tt_field(p, "condition"));
        if (!rt_is(c, "identifier")) continue;
        char name[64];
        tt_copy_text(ctx, c, name, sizeof name);
        if (!ts_node_is_null(tp) && tt_uses(ctx->text, ts_node_start_byte(tp), ts_node_end_byte(tp), name)) return true;
    }
    return false;
}

/* The guards under which node n runs, up to f's body: conditions of enclosing `?:` and `if`s,
 * and the skipped cases of earlier `if (c) continue;` / `return;` in the blocks around it. False
 * when n sits in an else branch (with template_else, other than that of a template `if (T)`). */
bool register_tile__rg_guards(const kl_rule_ctx *ctx, const rt_func *f, TSNode n, bool template_else,
                              register_tile__rg_guard *g, unsigned *ng)
{
    *ng = 0;
    TSNode ch = n;
    for (TSNode p = tt_parent(n); !ts_node_is_null(p); ch = p, p = tt_parent(p)) {
        if (rt_is(p, "conditional_expression") || rt_is(p, "if_statement")) {
            if (ts_node_eq(ch, tt_field(p, "consequence")))
                register_tile__rg_add_cond(ctx, tt_field(p, "condition"), false, g, ng);
            else if (ts_node_eq(ch, tt_field(p, "alternative")) &&
                     !(template_else && register_tile__in_template_if(ctx, f, ch, true)))
                return false;
        } else if (rt_is(p, "compound_statement")) {
            for (TSNode s = rt_prev_stmt(ch); !ts_node_is_null(s); s = rt_prev_stmt(s)) {
                TSNode c;
                if (register_tile__rg_skip_if(ctx, s, &c)) register_tile__rg_add_cond(ctx, c, true, g, ng);
            }
        }
        if (ts_node_eq(p, f->body)) break;
    }
    return true;
}

/* index = X * LD + Y (X possibly cast), with X and Y bounded by guards. */
bool register_tile__rg_operand_index(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg_operand *o, const register_tile__rg_guard *g, unsigned ng,
                             char *why, size_t size)
{
    unsigned line = ts_node_start_point(o->at).row + 1;
    TSNode idx = tt_field(o->at, "index");
    if (ts_node_is_null(idx)) {
        TSNode ixs = tt_field(o->at, "indices");
        if (tt_child_count(ixs) != 1) {
            kl_snprintf(why, size, "the index of %s at line %u is not one expression", o->ptr, line);
            return false;
        }
        idx = tt_child(ixs, 0);
    }
    return register_tile__rg_index_split(ctx, f, o, idx, NULL, g, ng, why, size);
}

/* The index expression idx (plus the constant term `extra` when not NULL: an element offset
 * from a local pointer) as X * LD + Y, X and Y bounded by guards. */
bool register_tile__rg_index_split(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg_operand *o, TSNode idx, const char *extra,
                           const register_tile__rg_guard *g, unsigned ng, char *why, size_t size)
{
    unsigned line = ts_node_start_point(o->at).row + 1;
    TSNode terms[16];
    unsigned nt = rg_flatten(ctx, idx, "+", terms, 0, 16);
    int prod = -1;
    TSNode x = {0};
    for (unsigned i = 0; i < nt && i < 16; i++) {
        TSNode t = terms[i];
        if (!rt_is(t, "binary_expression") || !rt_text_is(ctx, tt_field(t, "operator"), "*")) continue;
        TSNode l = tt_field(t, "left"), r = tt_field(t, "right");
        bool li = register_tile__rg_invariant(ctx, f, l), ri = register_tile__rg_invariant(ctx, f, r);
        if (li == ri) continue;
        if (prod >= 0) {
            kl_snprintf(why, size, "the index of %s at line %u has two strided terms", o->ptr, line);
            return false;
        }
        prod = (int)i;
        x = li ? r : l;
        o->ld = register_tile__rg_strip(li ? l : r);
    }
    if (prod < 0 || nt > 16 || nt < 2) {
        kl_snprintf(why, size, "the index of %s at line %u is not `X * LD + Y` with LD the same in every thread", o->ptr,
                    line);
        return false;
    }
    x = register_tile__rg_strip(x);
    o->cast[0] = 0;
    if (rt_is(x, "cast_expression")) {
        char ty[40];
        tt_copy_text(ctx, tt_field(x, "type"), ty, sizeof ty);
        kl_snprintf(o->cast, sizeof o->cast, "(%s)", ty);
        x = tt_field(x, "value");
    }
    register_tile__rg_norm(ctx, x, o->x, sizeof o->x);
    o->y[0] = 0;
    for (unsigned i = 0; i < nt; i++) {
        if ((int)i == prod) continue;
        char t[160];
        register_tile__rg_norm(ctx, terms[i], t, sizeof t);
        if (extra && !strcmp(t, o->ptr)) continue; /* `P + X * LD + Y`: the base of a local pointer */
        size_t k = strlen(o->y);
        kl_snprintf(o->y + k, sizeof o->y - k, "%s%s", k ? "+" : "", t);
    }
    if (extra && extra[0]) {
        size_t k = strlen(o->y);
        kl_snprintf(o->y + k, sizeof o->y - k, "%s%s", k ? "+" : "", extra);
    }
    o->bx = o->by = (TSNode){0};
    for (unsigned i = 0; i < ng; i++) {
        if (ts_node_is_null(o->bx) && !strcmp(g[i].lhs, o->x)) o->bx = g[i].bound;
        else if (ts_node_is_null(o->by) && !strcmp(g[i].lhs, o->y)) o->by = g[i].bound;
    }
    if (ts_node_is_null(o->bx) || ts_node_is_null(o->by)) {
        kl_snprintf(why, size, "the access to %s at line %u has no guard `%s < bound` (its edges are not handled)", o->ptr,
                    line, ts_node_is_null(o->bx) ? o->x : o->y);
        return false;
    }
    if (!register_tile__rg_invariant(ctx, f, o->bx) || !register_tile__rg_invariant(ctx, f, o->by)) {
        kl_snprintf(why, size, "a bound of %s at line %u is not the same in every thread", o->ptr, line);
        return false;
    }
    return true;
}

bool register_tile__rg_zero(const kl_rule_ctx *ctx, TSNode v)
{
    v = register_tile__rg_strip(v);
    if (rt_is(v, "cast_expression")) v = register_tile__rg_strip(tt_field(v, "value"));
    if (!rt_is(v, "number_literal")) return false;
    char t[32];
    tt_copy_text(ctx, v, t, sizeof t);
    return strtod(t, NULL) == 0.0;
}

bool register_tile__rg_acc_elem(const kl_rule_ctx *ctx, TSNode n, const char *acc, int depth)
{
    int d = 0;
    while (rt_is(n, "subscript_expression")) n = tt_field(n, "argument"), d++;
    return d == depth && rt_text_is(ctx, n, acc);
}

void register_tile__rg_acc_note(const kl_rule_ctx *ctx, TSNode n, const char *acc, int depth, register_tile__rg_acc_writes *w)
{
    if (rt_is_builtin(ctx, n, "blockIdx", 'z') || rt_is_builtin(ctx, n, "gridDim", 'z')) w->zuse = true;
    if (!rt_is(n, "assignment_expression") || !register_tile__rg_acc_elem(ctx, tt_field(n, "left"), acc, depth)) return;
    TSNode r = register_tile__rg_strip(tt_field(n, "right"));
    if (rt_text_is(ctx, tt_field(n, "operator"), "+=") && rt_is(r, "binary_expression") &&
        rt_text_is(ctx, tt_field(r, "operator"), "*")) {
        w->updates++;
        w->update = n;
    } else if (rt_text_is(ctx, tt_field(n, "operator"), "=") && register_tile__rg_zero(ctx, r)) {
        w->fills++;
        w->fill = r;
    } else {
        w->others++;
    }
}

typedef struct rg_acc_scan {
    const kl_rule_ctx *ctx;
    const char *acc;
    int depth;
    register_tile__rg_acc_writes *w;
} rg_acc_scan;

static bool rg_acc_visit(TSNode n, void *user)
{
    rg_acc_scan *s = user;
    register_tile__rg_acc_note(s->ctx, n, s->acc, s->depth, s->w);
    return true;
}

void register_tile__rg_acc_scan(const kl_rule_ctx *ctx, TSNode body, const char *acc, int depth, register_tile__rg_acc_writes *w)
{
    memset(w, 0, sizeof *w);
    rg_acc_scan s = {ctx, acc, depth, w};
    kl_ast_walk(body, rg_acc_visit, &s);
}

typedef struct rg_walk {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    register_tile__rg *g;
    register_tile__rg_acc_writes acc;
    TSNode bad;            /* a pointer use that is not a scalar subscript */
    TSNode subs[8];
    unsigned nsubs;
} rg_walk;

static bool rg_visit(TSNode n, void *user)
{
    rg_walk *w = user;
    const kl_rule_ctx *ctx = w->ctx;
    register_tile__rg_acc_note(ctx, n, w->g->acc, 2, &w->acc);
    if (rt_is(n, "identifier")) {
        char name[64];
        tt_copy_text(ctx, n, name, sizeof name);
        if (rt_pointer_param(ctx, w->f, name, NULL, 0)) {
            TSNode p = tt_parent(n);
            if (rt_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), n) &&
                !rt_is(tt_parent(p), "subscript_expression")) {
                if (w->nsubs < 8) w->subs[w->nsubs] = p;
                w->nsubs++;
            } else if (ts_node_is_null(w->bad)) {
                w->bad = n;
            }
        }
    }
    return true;
}

/* Is there a general register tile in f (an accumulator array updated by an outer product
 * beside two shared tiles)? Fills acc_decl, acc, tm, tn. */
bool register_tile__rg_detect(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g)
{
    memset(g, 0, sizeof *g);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rt_is(st[i], "declaration")) continue;
        if (tt_is_shared_decl(ctx, st[i])) {
            g->nshared++;
            continue;
        }
        TSNode d = tt_field(st[i], "declarator");
        TSNode in = tt_field(d, "declarator");
        if (!ts_node_is_null(g->acc_decl) || !rt_is(d, "array_declarator") || !rt_is(in, "array_declarator") ||
            !rt_is(tt_field(in, "declarator"), "identifier"))
            continue;
        if (!rt_const_eval(ctx, f->def, tt_field(in, "size"), &g->tm) ||
            !rt_const_eval(ctx, f->def, tt_field(d, "size"), &g->tn) || g->tm * g->tn < 2)
            continue;
        if (i + 1 < n && register_tile__is_kl_loop(ctx, st[i + 1], "kl_i")) return false; /* apply's own form */
        g->acc_decl = st[i];
        tt_copy_text(ctx, tt_field(in, "declarator"), g->acc, sizeof g->acc);
        tt_copy_text(ctx, tt_field(st[i], "type"), g->acc_type, sizeof g->acc_type);
    }
    if (ts_node_is_null(g->acc_decl) || g->nshared != 2) return false;
    rg_walk w = {.ctx = ctx, .f = f, .g = g};
    kl_ast_walk(f->body, rg_visit, &w);
    g->update = w.acc.update;
    g->fill = w.acc.fill;
    return w.acc.updates == 1;
}

/* The full analysis of a detected tile: 1, or 0 with why. */
int register_tile__rg_analyse(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g, char *why, size_t size)
{
    rg_walk w = {.ctx = ctx, .f = f, .g = g};
    kl_ast_walk(f->body, rg_visit, &w);
    g->update = w.acc.update;
    g->fill = w.acc.fill;
    unsigned line = ts_node_start_point(g->acc_decl).row + 1;
    if (w.acc.zuse) {
        kl_snprintf(why, size, "%s uses blockIdx.z / gridDim.z (a batched or split product)", f->name);
        return 0;
    }
    if (w.acc.fills < 1 || w.acc.others) {
        kl_snprintf(why, size, "the accumulator %s (line %u) is not zero-filled then only updated", g->acc, line);
        return 0;
    }
    if (!ts_node_is_null(w.bad)) {
        char name[64];
        tt_copy_text(ctx, w.bad, name, sizeof name);
        kl_snprintf(why, size,
                    "%s at line %u is used other than as a scalar element (a vector access or an alias): remove "
                    "vectorize first",
                    name, ts_node_start_point(w.bad).row + 1);
        return 0;
    }
    if (w.nsubs != 3) {
        kl_snprintf(why, size, "%u accesses to pointer parameters in %s, not one read of each operand and one store",
                    w.nsubs, f->name);
        return 0;
    }
    /* the shared tiles' element type */
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    g->elem[0] = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rt_is(st[i], "declaration") || !tt_is_shared_decl(ctx, st[i])) continue;
        char ty[64];
        tt_copy_text(ctx, tt_field(st[i], "type"), ty, sizeof ty);
        unsigned dims = 0;
        for (TSNode d = tt_field(st[i], "declarator"); rt_is(d, "array_declarator"); d = tt_field(d, "declarator")) dims++;
        if (dims != 2) {
            kl_snprintf(why, size, "the shared tile at line %u has %u dimensions, not 2 (stages: remove double-buffer first)",
                        ts_node_start_point(st[i]).row + 1, dims);
            return 0;
        }
        if (g->elem[0] && strcmp(ty, g->elem)) {
            kl_snprintf(why, size, "the shared tiles of %s hold %s and %s", f->name, g->elem, ty);
            return 0;
        }
        kl_snprintf(g->elem, sizeof g->elem, "%s", ty);
    }
    g->nreads = 0;
    bool stored = false;
    for (unsigned i = 0; i < 3; i++) {
        TSNode s = w.subs[i];
        unsigned l = ts_node_start_point(s).row + 1;
        TSNode p = tt_parent(s);
        while (rt_is(p, "parenthesized_expression")) p = tt_parent(p);
        register_tile__rg_operand *o;
        register_tile__rg_guard gs[RG_MAXG];
        unsigned ng = 0;
        if (rt_is(p, "assignment_expression") && ts_node_eq(tt_field(p, "left"), s)) {
            if (stored || !rt_text_is(ctx, tt_field(p, "operator"), "=") ||
                !rt_is(tt_parent(p), "expression_statement")) {
                kl_snprintf(why, size, "the write at line %u is not one plain store `C[...] = value;`", l);
                return 0;
            }
            /* the stored value: an accumulator element, directly or through a local pointer into it */
            TSNode v = register_tile__rg_strip(tt_field(p, "right"));
            TSNode base = v;
            while (rt_is(base, "subscript_expression")) base = tt_field(base, "argument");
            bool ok = rt_is(v, "subscript_expression") && rt_is(base, "identifier");
            if (ok && !rt_text_is(ctx, base, g->acc)) {
                char bname[64];
                tt_copy_text(ctx, base, bname, sizeof bname);
                /* `T *v = &acc[...]` or `= acc[...]` declared once in the kernel */
                uint32_t ms[4], me[4];
                char pat[96];
                kl_snprintf(pat, sizeof pat, "* %s = &%s", bname, g->acc);
                unsigned k1 = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 4);
                kl_snprintf(pat, sizeof pat, "* %s = %s", bname, g->acc);
                unsigned k2 = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 4);
                ok = k1 + k2 == 1 && rt_count_ident(ctx, f->body, bname) >= 2;
                /* and never assigned again */
                kl_snprintf(pat, sizeof pat, "%s =", bname);
                ok = ok && tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat) == 1;
            }
            if (!ok) {
                kl_snprintf(why, size, "the value stored at line %u is not an element of %s", l, g->acc);
                return 0;
            }
            o = &g->op[2];
            stored = true;
            if (!register_tile__rg_guards(ctx, f, tt_parent(p), false, gs, &ng)) {
                kl_snprintf(why, size, "the store at line %u sits in an else branch", l);
                return 0;
            }
        } else {
            if (g->nreads == 2) {
                kl_snprintf(why, size, "three reads of pointer parameters (line %u): not a product of two operands", l);
                return 0;
            }
            o = &g->op[g->nreads++];
            TSNode c = p;
            if (!rt_is(c, "conditional_expression") || !ts_node_eq(register_tile__rg_strip(tt_field(c, "consequence")), s) ||
                !register_tile__rg_zero(ctx, tt_field(c, "alternative"))) {
                kl_snprintf(why, size, "the read at line %u is not guarded as `cond ? P[...] : 0`", l);
                return 0;
            }
            o->zero = register_tile__rg_strip(tt_field(c, "alternative"));
            if (!register_tile__rg_guards(ctx, f, s, false, gs, &ng)) {
                kl_snprintf(why, size, "the read at line %u sits in an else branch", l);
                return 0;
            }
        }
        o->at = s;
        tt_copy_text(ctx, tt_field(s, "argument"), o->ptr, sizeof o->ptr);
        if (!register_tile__rg_operand_index(ctx, f, o, gs, ng, why, size)) return 0;
    }
    if (!stored || g->nreads != 2) {
        kl_snprintf(why, size, "%s does not read two operands and store one result", f->name);
        return 0;
    }
    if (!strcmp(g->op[0].ptr, g->op[1].ptr) || !strcmp(g->op[0].ptr, g->op[2].ptr) ||
        !strcmp(g->op[1].ptr, g->op[2].ptr)) {
        kl_snprintf(why, size, "%s reads and writes the same pointer", f->name);
        return 0;
    }
    return 1;
}


bool register_tile__rg_same(const kl_rule_ctx *ctx, TSNode a, TSNode b)
{
    char x[160], y[160];
    register_tile__rg_norm(ctx, a, x, sizeof x);
    register_tile__rg_norm(ctx, b, y, sizeof y);
    return !strcmp(x, y);
}

kl_status register_tile__rg_solve(const register_tile__rg_operand op[3], const char *const bx[3], const char *const by[3],
                                  register_tile__rg_roles *out, kl_error *err)
{
    int found = 0;
    for (int a = 0; a < 2; a++)
        for (int akx = 0; akx < 2; akx++)
            for (int bkx = 0; bkx < 2; bkx++)
                for (int crx = 0; crx < 2; crx++) {
                    int b = 1 - a;
                    const char *ak = akx ? bx[a] : by[a], *am = akx ? by[a] : bx[a];
                    const char *bk = bkx ? bx[b] : by[b], *bn = bkx ? by[b] : bx[b];
                    const char *cm = crx ? bx[2] : by[2], *cn = crx ? by[2] : bx[2];
                    if (strcmp(ak, bk) || strcmp(am, cm) || strcmp(bn, cn)) continue;
                    /* the swap of A and B with C transposed is the same product */
                    register_tile__rg_roles r = {a, akx, bkx, crx};
                    if (a == 1) r = (register_tile__rg_roles){0, bkx, akx, !crx};
                    if (found && r.a == out->a && r.a_kx == out->a_kx && r.b_kx == out->b_kx && r.c_rowx == out->c_rowx) continue;
                    if (found++) goto refuse;
                    *out = r;
                }
    if (found == 1) return KL_OK;
refuse:
    return kl_rule_not_applicable(err,
                                  found ? "the bounds of %s, %s and %s do not tell M, N and K apart (the same text bounds "
                                          "two dimensions)"
                                        : "the bounds of %s, %s and %s are not those of one product (A: M x K, B: K x N, "
                                          "C: M x N)",
                                  op[0].ptr, op[1].ptr, op[2].ptr);
}

/* A name not taken by a parameter or a file-level constant: base, else kl_<base>. */
void register_tile__rg_name(const kl_rule_ctx *ctx, const rt_func *f, const char *base, char *out, size_t size)
{
    long long v;
    bool taken = !ts_node_is_null(rt_param(ctx, f, base)) || rt_const_name(ctx, f->def, base, &v);
    kl_snprintf(out, size, "%s%s", taken ? "kl_" : "", base);
}

/* The launch argument passed for bound b (a parameter of f), or b's own text. */
static char *rg_host_bound(const kl_rule_ctx *ctx, const rt_func *f, const rt_launch *l, TSNode b)
{
    if (rt_is(b, "identifier")) {
        char name[64];
        tt_copy_text(ctx, b, name, sizeof name);
        unsigned np = tt_child_count(f->params);
        for (unsigned i = 0, k = 0; i < np; i++) {
            TSNode p = tt_child(f->params, i);
            if (!rt_is(p, "parameter_declaration")) continue;
            if (rt_text_is(ctx, kl_ast_declarator_name(tt_field(p, "declarator")), name)) {
                TSNode arg = tt_child(l->args, k);
                if (ts_node_is_null(arg)) return NULL;
                char *t = rt_text(ctx, arg);
                if (!t || rt_is(arg, "identifier") || rt_is(arg, "number_literal")) return t;
                size_t n = strlen(t) + 3;
                char *w = malloc(n);
                if (w) kl_snprintf(w, n, "(%s)", t);
                free(t);
                return w;
            }
            k++;
        }
    }
    /* a constant: only when it names no parameter */
    return rt_text(ctx, b);
}

/* Is the local dim3 named by launch l's configuration argument `which` used only as that
 * argument of launches of f (so its extents may change)? */
static bool rg_local_only_here(const kl_rule_ctx *ctx, const rt_func *f, const rt_launch *ls, unsigned nl,
                               const rt_launch *l, int which)
{
    char name[64];
    tt_copy_text(ctx, l->cfg[which], name, sizeof name);
    unsigned uses = 0;
    for (unsigned i = 0; i < nl; i++)
        if (ts_node_eq(ls[i].host.def, l->host.def) && rt_text_is(ctx, ls[i].cfg[which], name)) uses++;
    (void)f;
    return rt_count_ident(ctx, l->host.body, name) == uses + 1;
}

/* "cast x * ld + y": an index of the written kernel. */
static void rg_index(kl_strbuf *sb, const char *cast, const char *x, const char *ld, const char *y)
{
    kl_strbuf_addf(sb, "%s%s * %s + %s", cast, x, ld, y);
}

kl_status register_tile__rg_write(const kl_rule_ctx *ctx, const rt_func *f, const register_tile__rg_roles *r,
                                  const register_tile__rg_text *t, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                                  kl_error *err)
{
    const register_tile__rg_operand *A = t->a, *B = t->b, *C = t->c;
    char row[32], col[32], k0[32], kk[32], as[32], bs[32];
    register_tile__rg_name(ctx, f, "row", row, sizeof row);
    register_tile__rg_name(ctx, f, "col", col, sizeof col);
    register_tile__rg_name(ctx, f, "k0", k0, sizeof k0);
    register_tile__rg_name(ctx, f, "kk", kk, sizeof kk);
    register_tile__rg_name(ctx, f, "As", as, sizeof as);
    register_tile__rg_name(ctx, f, "Bs", bs, sizeof bs);
    char ind[64], ak[64], bk[64];
    rt_indent_of(ctx, ts_node_start_byte(f->def), ind, sizeof ind);
    kl_snprintf(ak, sizeof ak, "(%s + threadIdx.x)", k0);
    kl_snprintf(bk, sizeof bk, "(%s + threadIdx.y)", k0);
    const char *i1 = ind, *acc = t->acc;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s    // smem-tile: %d x %d tiles of %s and %s in shared memory (one output per thread)\n", i1, RG_TILE,
                   RG_TILE, A->ptr, B->ptr);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, t->elem, as, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, t->elem, bs, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.y * %d + threadIdx.y;\n", i1, row, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.x * %d + threadIdx.x;\n", i1, col, RG_TILE);
    kl_strbuf_addf(&sb, "%s    %s %s = %s;\n", i1, t->acc_type, acc, t->acc_zero);
    kl_strbuf_addf(&sb, "%s    for (int %s = 0; %s < %s; %s += %d) {\n", i1, k0, k0, t->k, k0, RG_TILE);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s < %s && %s + threadIdx.x < %s ? %s[", i1, as, row, t->m,
                   k0, t->k, A->ptr);
    if (r->a_kx) rg_index(&sb, A->cast, ak, t->lda, row);
    else rg_index(&sb, A->cast, row, t->lda, ak);
    kl_strbuf_addf(&sb, "] : %s;\n", t->zero_a);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s + threadIdx.y < %s && %s < %s ? %s[", i1, bs, k0, t->k,
                   col, t->n, B->ptr);
    if (r->b_kx) rg_index(&sb, B->cast, bk, t->ldb, col);
    else rg_index(&sb, B->cast, col, t->ldb, bk);
    kl_strbuf_addf(&sb, "] : %s;\n", t->zero_b);
    kl_strbuf_addf(&sb, "%s        __syncthreads();\n", i1);
    kl_strbuf_addf(&sb, "%s        for (int %s = 0; %s < %d; %s++) {\n", i1, kk, kk, RG_TILE, kk);
    if (t->cvt_in[0])
        kl_strbuf_addf(&sb, "%s            %s += %s(%s[threadIdx.y][%s]) * %s(%s[%s][threadIdx.x]);\n", i1, acc, t->cvt_in, as,
                       kk, t->cvt_in, bs, kk);
    else
        kl_strbuf_addf(&sb, "%s            %s += %s[threadIdx.y][%s] * %s[%s][threadIdx.x];\n", i1, acc, as, kk, bs, kk);
    kl_strbuf_addf(&sb, "%s        }\n%s        __syncthreads();\n%s    }\n", i1, i1, i1);
    kl_strbuf_addf(&sb, "%s    if (%s < %s && %s < %s) {\n%s        %s[", i1, row, t->m, col, t->n, i1, C->ptr);
    if (r->c_rowx) rg_index(&sb, C->cast, row, t->ldc, col);
    else rg_index(&sb, C->cast, col, t->ldc, row);
    if (t->cvt_out[0]) kl_strbuf_addf(&sb, "] = %s(%s);\n", t->cvt_out, acc);
    else kl_strbuf_addf(&sb, "] = %s;\n", acc);
    kl_strbuf_addf(&sb, "%s    }\n%s}", i1, i1);
    kl_status st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(f->body), ts_node_end_byte(f->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
    return register_tile__rg_relaunch(ctx, f, Mb, Nb, no_smem, out, err);
}

kl_status register_tile__rg_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g, kl_edits *out, kl_error *err)
{
    char why[320];
    if (!register_tile__rg_analyse(ctx, f, g, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    /* the bounds as text, compared without blanks and outer parentheses */
    char *bounds[6] = {0};
    kl_status st = KL_OK;
    for (unsigned k = 0; k < 3; k++) {
        bounds[k] = rt_text_unblank(ctx, register_tile__rg_strip(g->op[k].bx));
        bounds[3 + k] = rt_text_unblank(ctx, register_tile__rg_strip(g->op[k].by));
        if (!bounds[k] || !bounds[3 + k]) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    register_tile__rg_roles r;
    if (st == KL_OK) st = register_tile__rg_solve(g->op, (const char *const *)bounds, (const char *const *)bounds + 3, &r, err);
    for (unsigned k = 0; k < 6; k++) free(bounds[k]);
    if (st != KL_OK) return st;
    const register_tile__rg_operand *A = &g->op[r.a], *B = &g->op[1 - r.a], *C = &g->op[2];
    TSNode Mb = r.a_kx ? A->by : A->bx, Kb = r.a_kx ? A->bx : A->by, Nb = r.b_kx ? B->by : B->bx;
    /* __launch_bounds__ must allow the new block */
    {
        uint32_t ms[2], me[2];
        TSNode hs = f->outer;
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(hs), ts_node_start_byte(f->body), "__launch_bounds__", ms, me, 2);
        if (nm) {
            const char *p = ctx->text + me[0];
            while (*p == ' ' || *p == '(') p++;
            char t[64];
            size_t k = 0;
            while (k + 1 < sizeof t && p[k] && p[k] != ',' && p[k] != ')' && p[k] != ' ') t[k] = p[k], k++;
            t[k] = 0;
            long long v = -1;
            char *end = NULL;
            if (t[0] >= '0' && t[0] <= '9') v = strtoll(t, &end, 0);
            else if (!rt_const_name(ctx, f->def, t, &v)) v = -1;
            if (v < RG_TILE * RG_TILE)
                return kl_rule_not_applicable(err, "__launch_bounds__(%s) of %s does not allow the %d x %d block of one "
                                                   "output per thread", t, f->name, RG_TILE, RG_TILE);
        }
    }
    char *M = rt_text(ctx, Mb), *N = rt_text(ctx, Nb), *K = rt_text(ctx, Kb);
    char *lda = rt_text(ctx, A->ld), *ldb = rt_text(ctx, B->ld), *ldc = rt_text(ctx, C->ld);
    char *za = rt_text(ctx, A->zero), *zb = rt_text(ctx, B->zero), *zacc = rt_text(ctx, g->fill);
    if (!M || !N || !K || !lda || !ldb || !ldc || !za || !zb || !zacc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    } else {
        register_tile__rg_text t = {.a = A, .b = B, .c = C, .lda = lda, .ldb = ldb, .ldc = ldc, .m = M, .n = N, .k = K,
                                    .elem = g->elem, .acc_type = g->acc_type, .acc = g->acc, .acc_zero = zacc,
                                    .zero_a = za, .zero_b = zb, .cvt_in = "", .cvt_out = ""};
        st = register_tile__rg_write(ctx, f, &r, &t, Mb, Nb, false, out, err);
    }
    free(M), free(N), free(K), free(lda), free(ldb), free(ldc), free(za), free(zb), free(zacc);
    return st;
}

/* Every launch of f: a TILE x TILE block, a grid over C (Mb, Nb: f's bounds of C's rows and
 * columns); no_smem: a dynamic shared memory size becomes 0 (the new body declares its tiles). */
kl_status register_tile__rg_relaunch(const kl_rule_ctx *ctx, const rt_func *f, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                             kl_error *err)
{
    kl_status st = KL_OK;
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, f->name, ls, 16);
    if (nl == 0 || nl > 16) return kl_rule_not_applicable(err, "%s is not launched in the file", f->name);
    uint32_t done[32];
    unsigned ndone = 0;
    for (unsigned i = 0; i < nl && st == KL_OK; i++) {
        unsigned line = ts_node_start_point(ls[i].call).row + 1;
        if (ls[i].ncfg < 2) {
            st = kl_rule_not_applicable(err, "the launch at line %u has no grid and block", line);
            break;
        }
        char *hm = rg_host_bound(ctx, f, &ls[i], Mb), *hn = rg_host_bound(ctx, f, &ls[i], Nb);
        TSNode ga[3];
        unsigned gn = 0;
        if (!hm || !hn) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        } else if (rt_is(ls[i].cfg[0], "identifier") && tt_dim3_args(ctx, ls[i].host.body, ls[i].cfg[0], ga, &gn) &&
                   gn >= 2 && rg_local_only_here(ctx, f, ls, nl, &ls[i], 0)) {
            /* a local dim3: its extents */
            if (gn == 3 && !rt_text_is(ctx, ga[2], "1")) {
                st = kl_rule_not_applicable(err, "the grid of the launch at line %u has a z extent", line);
            } else {
                bool seen = false;
                for (unsigned k = 0; k < ndone; k++) seen |= done[k] == ts_node_start_byte(ga[0]);
                if (!seen && ndone < 32) {
                    done[ndone++] = ts_node_start_byte(ga[0]);
                    st = kl_edits_addf(out, ts_node_start_byte(ga[0]), ts_node_end_byte(ga[0]), "(%s + %d) / %d", hn,
                                       RG_TILE - 1, RG_TILE);
                    if (st == KL_OK)
                        st = kl_edits_addf(out, ts_node_start_byte(ga[1]), ts_node_end_byte(ga[1]), "(%s + %d) / %d", hm,
                                           RG_TILE - 1, RG_TILE);
                }
            }
        } else {
            st = kl_edits_addf(out, ts_node_start_byte(ls[i].cfg[0]), ts_node_end_byte(ls[i].cfg[0]),
                               "dim3((%s + %d) / %d, (%s + %d) / %d)", hn, RG_TILE - 1, RG_TILE, hm, RG_TILE - 1, RG_TILE);
        }
        TSNode ba[3];
        unsigned bn = 0;
        if (st != KL_OK) {
        } else if (rt_is(ls[i].cfg[1], "identifier") && tt_dim3_args(ctx, ls[i].host.body, ls[i].cfg[1], ba, &bn) &&
                   bn >= 2 && rg_local_only_here(ctx, f, ls, nl, &ls[i], 1)) {
            bool seen = false;
            for (unsigned k = 0; k < ndone; k++) seen |= done[k] == ts_node_start_byte(ba[0]);
            if (!seen && ndone < 32) {
                done[ndone++] = ts_node_start_byte(ba[0]);
                if (bn == 3 && !rt_text_is(ctx, ba[2], "1"))
                    st = kl_rule_not_applicable(err, "the block of the launch at line %u has a z extent", line);
                else
                    st = kl_edits_addf(out, ts_node_start_byte(ba[0]), ts_node_end_byte(ba[1]), "%d, %d", RG_TILE, RG_TILE);
            }
        } else {
            st = kl_edits_addf(out, ts_node_start_byte(ls[i].cfg[1]), ts_node_end_byte(ls[i].cfg[1]), "dim3(%d, %d)",
                               RG_TILE, RG_TILE);
        }
        if (st == KL_OK && no_smem && ls[i].ncfg >= 3 && !ts_node_is_null(ls[i].cfg[2]) && !rt_text_is(ctx, ls[i].cfg[2], "0"))
            st = kl_edits_add(out, ts_node_start_byte(ls[i].cfg[2]), ts_node_end_byte(ls[i].cfg[2]), "0");
        if (st == KL_ERR_NOMEM) st = kl_error_set(err, st, "out of memory");
        free(hm);
        free(hn);
    }
    return st;
}

