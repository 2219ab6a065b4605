/* register-tile: the per-warp fragment tile of the hgemm expert after tensor-core's remove (remove;
 * register_tile.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define NAME "register-tile"

/* ---- the per-warp fragment tile (the hgemm expert after tensor-core's remove) ---------------------- */
/*
 * A kernel whose threads hold the accumulators of an mma warp tile, `float acc[FM][FN][4]`,
 * zero-filled and updated by one `acc[..][..][..] += x * y;`, its tiles loaded by one call of a
 * `__device__` helper (the pipeline gone: double-buffer first) that reads each operand once
 * element-wise, `cond ? P[X * LD + Y] : zero` (P a pointer parameter of the helper given a pointer
 * parameter of the kernel; `zero` 0 or a local holding `__float2bfloat16(0.0f)`), and storing
 * elements `cvt(v)` of the accumulator through `T* dst = C + X * LD + Y;` (`dst[0] = …`, `dst[1] =
 * …`) or `C[X * LD + Y] = …` under guards on both coordinates. What sits in the branch of an
 * `if (T)` on a template parameter with an element-wise `else` (the 16-byte cp.async copies and
 * bf16x2 stores of the aligned instance) is not read: both instances become the same kernel.
 * The bounds name the product as for the general form; remove writes it as the
 * one-output-per-thread shared-tile GEMM (16 x 16), with the operands converted to float in the
 * product and the store's conversion kept, like naive.cu.
 */


static bool rf_in_template_branch(const kl_rule_ctx *ctx, const rt_func *f, TSNode n)
{
    return register_tile__in_template_if(ctx, f, n, false);
}

/* The value local `v` (an identifier) of f is initialised with, when f's body assigns it only in
 * its declaration (`T v = value;`); a null node otherwise. */
static TSNode rf_local_value(const kl_rule_ctx *ctx, const rt_func *f, TSNode v)
{
    char name[64], pat[96];
    if (!rt_text_copy(ctx, v, name, sizeof name)) return (TSNode){0};
    kl_snprintf(pat, sizeof pat, "%s =", name);
    uint32_t ms[2], me[2];
    if (tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 2) != 1) return (TSNode){0};
    TSNode d = tt_parent(ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[0], ms[0] + (uint32_t)strlen(name)));
    return rt_is(d, "init_declarator") ? tt_field(d, "value") : (TSNode){0};
}

/* A zero: a literal 0, E(0.0f), __float2bfloat16(0.0f) / __float2half(0.0f), or a local of f
 * initialised so. */
static bool rf_zero(const kl_rule_ctx *ctx, const rt_func *f, TSNode v, int depth)
{
    v = register_tile__rg_strip(v);
    if (register_tile__rg_zero(ctx, v)) return true;
    if (rt_is(v, "call_expression")) {
        TSNode args = tt_field(v, "arguments");
        return tt_child_count(args) == 1 && register_tile__rg_zero(ctx, tt_child(args, 0));
    }
    if (rt_is(v, "identifier") && depth == 0) {
        TSNode value = rf_local_value(ctx, f, v);
        return !ts_node_is_null(value) && rf_zero(ctx, f, value, 1);
    }
    return false;
}

/* Is there a fragment tile in f? Fills acc_decl and acc. */
bool register_tile__rf_detect(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rf *r)
{
    memset(r, 0, sizeof *r);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rt_is(st[i], "declaration") || tt_is_shared_decl(ctx, st[i])) continue;
        TSNode d = tt_field(st[i], "declarator"), d2 = tt_field(d, "declarator"), d3 = tt_field(d2, "declarator");
        if (!rt_is(d, "array_declarator") || !rt_is(d2, "array_declarator") || !rt_is(d3, "array_declarator") ||
            !rt_is(tt_field(d3, "declarator"), "identifier"))
            continue;
        long long a, b, c;
        if (!rt_const_eval(ctx, f->def, tt_field(d, "size"), &c) || !rt_const_eval(ctx, f->def, tt_field(d2, "size"), &b) ||
            !rt_const_eval(ctx, f->def, tt_field(d3, "size"), &a) || c != 4)
            continue;
        r->acc_decl = st[i];
        tt_copy_text(ctx, tt_field(d3, "declarator"), r->acc, sizeof r->acc);
        break;
    }
    if (ts_node_is_null(r->acc_decl)) return false;
    register_tile__rg_acc_writes w;
    register_tile__rg_acc_scan(ctx, f->body, r->acc, 3, &w);
    return w.updates == 1;
}

/* The kernel-side text (and node) of a bound: a parameter of the helper becomes the argument the
 * kernel passes for it (an identifier), anything else must be a constant. */
static bool rf_bound(const kl_rule_ctx *ctx, const rt_func *h, TSNode call, TSNode b, char *out, size_t size, TSNode *kn)
{
    *kn = (TSNode){0};
    if (!h) {
        tt_copy_text(ctx, b, out, size);
        *kn = b;
        return true;
    }
    if (rt_is(b, "identifier")) {
        char name[64];
        tt_copy_text(ctx, b, name, sizeof name);
        unsigned np = tt_child_count(h->params);
        for (unsigned i = 0, k = 0; i < np; i++) {
            TSNode p = tt_child(h->params, i);
            if (!rt_is(p, "parameter_declaration")) continue;
            if (rt_text_is(ctx, kl_ast_declarator_name(tt_field(p, "declarator")), name)) {
                TSNode arg = tt_child(tt_field(call, "arguments"), k);
                if (!rt_is(arg, "identifier")) return false;
                tt_copy_text(ctx, arg, out, size);
                *kn = arg;
                return true;
            }
            k++;
        }
    }
    long long v;
    if (!rt_const_eval(ctx, h->def, b, &v)) return false;
    tt_copy_text(ctx, b, out, size);
    return true;
}

/* The helper parameter a kernel pointer parameter is passed as in call (index of the argument
 * among the call's), or -1. */
static int rf_arg_index(const kl_rule_ctx *ctx, TSNode call, const char *name)
{
    TSNode args = tt_field(call, "arguments");
    int found = -1;
    for (unsigned i = 0; i < tt_child_count(args); i++)
        if (rt_text_is(ctx, tt_child(args, i), name)) {
            if (found >= 0) return -2;
            found = (int)i;
        }
    return found;
}

static TSNode rf_param_at(const rt_func *h, int k)
{
    unsigned np = tt_child_count(h->params);
    for (unsigned i = 0, j = 0; i < np; i++) {
        TSNode p = tt_child(h->params, i);
        if (!rt_is(p, "parameter_declaration")) continue;
        if ((int)j++ == k) return p;
    }
    return (TSNode){0};
}

typedef struct rf_uses {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode hits[16];
    unsigned n;
} rf_uses;

static bool rf_uses_visit(TSNode n, void *user)
{
    rf_uses *u = user;
    if (rt_is(n, "identifier") && rt_text_is(u->ctx, n, u->name)) {
        if (u->n < 16) u->hits[u->n] = n;
        u->n++;
    }
    return true;
}

/* The one element read of pointer `name` in function g (other uses only in a template branch):
 * into o, with its guards' bounds. */
static bool rf_read(const kl_rule_ctx *ctx, const rt_func *g, const char *name, register_tile__rg_operand *o, char *why, size_t size)
{
    rf_uses u = {.ctx = ctx, .name = name};
    kl_ast_walk(g->body, rf_uses_visit, &u);
    if (u.n > 16) {
        kl_snprintf(why, size, "%s is used %u times in %s", name, u.n, g->name);
        return false;
    }
    TSNode read = {0};
    for (unsigned i = 0; i < u.n; i++) {
        TSNode p = tt_parent(u.hits[i]);
        bool elem = rt_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), u.hits[i]) &&
                    !rt_is(tt_parent(p), "subscript_expression");
        if (elem && !rf_in_template_branch(ctx, g, p)) {
            if (!ts_node_is_null(read)) {
                kl_snprintf(why, size, "%s is read twice element-wise in %s (lines %u and %u)", name, g->name,
                            ts_node_start_point(read).row + 1, ts_node_start_point(p).row + 1);
                return false;
            }
            read = p;
        } else if (!rf_in_template_branch(ctx, g, u.hits[i])) {
            kl_snprintf(why, size, "%s at line %u is used other than as a scalar element", name,
                        ts_node_start_point(u.hits[i]).row + 1);
            return false;
        }
    }
    if (ts_node_is_null(read)) {
        kl_snprintf(why, size, "%s is not read element-wise in %s", name, g->name);
        return false;
    }
    unsigned l = ts_node_start_point(read).row + 1;
    TSNode c = tt_parent(read);
    while (rt_is(c, "parenthesized_expression")) c = tt_parent(c);
    if (!rt_is(c, "conditional_expression") || !ts_node_eq(register_tile__rg_strip(tt_field(c, "consequence")), read) ||
        !rf_zero(ctx, g, tt_field(c, "alternative"), 0)) {
        kl_snprintf(why, size, "the read at line %u is not guarded as `cond ? P[...] : 0`", l);
        return false;
    }
    o->at = read;
    kl_snprintf(o->ptr, sizeof o->ptr, "%s", name);
    register_tile__rg_guard gs[RG_MAXG];
    unsigned ng;
    if (!register_tile__rg_guards(ctx, g, read, true, gs, &ng)) {
        kl_snprintf(why, size, "the read at line %u sits in an else branch", l);
        return false;
    }
    return register_tile__rg_operand_index(ctx, g, o, gs, ng, why, size);
}

/* The stored value: cvt(v) with v an element of acc or a local initialised with one. */
static bool rf_value(const kl_rule_ctx *ctx, const rt_func *f, const register_tile__rf *r, TSNode v, char *cvt, size_t size)
{
    v = register_tile__rg_strip(v);
    cvt[0] = 0;
    if (rt_is(v, "call_expression")) {
        TSNode args = tt_field(v, "arguments");
        if (tt_child_count(args) != 1 || !rt_is(tt_field(v, "function"), "identifier")) return false;
        tt_copy_text(ctx, tt_field(v, "function"), cvt, size);
        static const char *const ok[] = {"__float2bfloat16", "__float2bfloat16_rn", "__float2half", "__float2half_rn"};
        bool known = false;
        for (unsigned i = 0; i < 4; i++) known |= !strcmp(cvt, ok[i]);
        if (!known) return false;
        v = register_tile__rg_strip(tt_child(args, 0));
    }
    if (register_tile__rg_acc_elem(ctx, v, r->acc, 3)) return true;
    if (!rt_is(v, "identifier")) return false;
    TSNode value = rf_local_value(ctx, f, v);
    return !ts_node_is_null(value) && register_tile__rg_acc_elem(ctx, register_tile__rg_strip(value), r->acc, 3);
}

/* The stores: every element write of C in f (directly or through one local `T* d = C + idx;`),
 * all at the same X, LD, bounds and conversion; the first one's index into r->op[2]. */
static bool rf_stores(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rf *r, const char *C, char *why, size_t size)
{
    rf_uses u = {.ctx = ctx, .name = C};
    kl_ast_walk(f->body, rf_uses_visit, &u);
    unsigned nstores = 0;
    for (unsigned i = 0; i < u.n && i < 16; i++) {
        TSNode h = u.hits[i], p = tt_parent(h);
        unsigned l = ts_node_start_point(h).row + 1;
        TSNode idx = {0};
        char alias[64] = "";
        if (rt_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), h)) {
            idx = tt_field(p, "index");
            if (ts_node_is_null(idx)) idx = kl_ast_subscript_index(p);
        } else if (rt_is(p, "binary_expression") && rt_text_is(ctx, tt_field(p, "operator"), "+")) {
            TSNode top = p;
            while (rt_is(tt_parent(top), "binary_expression") && rt_text_is(ctx, tt_field(tt_parent(top), "operator"), "+"))
                top = tt_parent(top);
            if (!rt_is(tt_parent(top), "init_declarator")) {
                kl_snprintf(why, size, "%s at line %u is used other than as a stored element", C, l);
                return false;
            }
            idx = top;
            p = top;
            TSNode dn = tt_field(tt_parent(p), "declarator");
            while (rt_is(dn, "pointer_declarator")) dn = tt_field(dn, "declarator");
            if (!rt_is(dn, "identifier")) {
                kl_snprintf(why, size, "%s at line %u initialises something other than a local pointer", C, l);
                return false;
            }
            tt_copy_text(ctx, dn, alias, sizeof alias);
        } else {
            kl_snprintf(why, size, "%s at line %u is used other than as a stored element", C, l);
            return false;
        }
        /* the writes: P[idx] itself, or alias[e] for integer e */
        TSNode writes[8];
        char extras[8][16];
        unsigned nw = 0;
        if (!alias[0]) {
            writes[nw] = p;
            extras[nw++][0] = 0;
        } else {
            rf_uses au = {.ctx = ctx, .name = alias};
            kl_ast_walk(f->body, rf_uses_visit, &au);
            for (unsigned k = 0; k < au.n && k < 16; k++) {
                TSNode a = au.hits[k], ap = tt_parent(a);
                if (rt_is(ap, "init_declarator") || rt_is(ap, "pointer_declarator")) continue;
                if (rf_in_template_branch(ctx, f, a)) continue;
                TSNode ei = tt_field(ap, "index");
                if (ts_node_is_null(ei)) ei = kl_ast_subscript_index(ap);
                long long e;
                if (!rt_is(ap, "subscript_expression") || !rt_is(ei, "number_literal") ||
                    !rt_const_eval(ctx, f->def, ei, &e) || e < 0 || e > 15 || nw >= 8) {
                    kl_snprintf(why, size, "%s at line %u is used other than as `%s[e] = …` (e a literal)", alias,
                                ts_node_start_point(a).row + 1, alias);
                    return false;
                }
                writes[nw] = ap;
                if (e) kl_snprintf(extras[nw], sizeof extras[0], "%lld", e);
                else extras[nw][0] = 0;
                nw++;
            }
            if (au.n > 16 || !nw) {
                kl_snprintf(why, size, "%s (line %u) is not written element-wise", alias, l);
                return false;
            }
        }
        for (unsigned k = 0; k < nw; k++) {
            TSNode w = writes[k], as = tt_parent(w);
            unsigned wl = ts_node_start_point(w).row + 1;
            if (!rt_is(as, "assignment_expression") || !ts_node_eq(tt_field(as, "left"), w) ||
                !rt_text_is(ctx, tt_field(as, "operator"), "=") || !rt_is(tt_parent(as), "expression_statement")) {
                kl_snprintf(why, size, "the write at line %u is not one plain store `C[...] = value;`", wl);
                return false;
            }
            char cvt[64];
            if (!rf_value(ctx, f, r, tt_field(as, "right"), cvt, sizeof cvt)) {
                kl_snprintf(why, size, "the value stored at line %u is not an element of %s (converted or not)", wl, r->acc);
                return false;
            }
            register_tile__rg_operand o;
            memset(&o, 0, sizeof o);
            o.at = w;
            kl_snprintf(o.ptr, sizeof o.ptr, "%s", C);
            register_tile__rg_guard gs[RG_MAXG];
            unsigned ng;
            if (!register_tile__rg_guards(ctx, f, tt_parent(as), true, gs, &ng)) {
                kl_snprintf(why, size, "the store at line %u sits in an else branch", wl);
                return false;
            }
            if (!register_tile__rg_index_split(ctx, f, &o, idx, extras[k], gs, ng, why, size)) return false;
            if (!nstores) {
                r->op[2] = o;
                kl_snprintf(r->cvt_out, sizeof r->cvt_out, "%s", cvt);
            } else if (strcmp(o.x, r->op[2].x) || !register_tile__rg_same(ctx, o.ld, r->op[2].ld) || !register_tile__rg_same(ctx, o.bx, r->op[2].bx) ||
                       !register_tile__rg_same(ctx, o.by, r->op[2].by) || strcmp(cvt, r->cvt_out)) {
                kl_snprintf(why, size, "the stores at lines %u and %u differ in row, stride, bounds or conversion",
                            ts_node_start_point(r->op[2].at).row + 1, wl);
                return false;
            }
            nstores++;
        }
    }
    if (u.n > 16 || !nstores) {
        kl_snprintf(why, size, "%s is not stored element-wise", C);
        return false;
    }
    return true;
}

/* The full analysis: 1, or 0 with why. */
int register_tile__rf_analyse(const kl_rule_ctx *ctx, const rt_func *f, const rt_func *fs, unsigned nf, register_tile__rf *r, char *why,
                      size_t size)
{
    unsigned line = ts_node_start_point(r->acc_decl).row + 1;
    register_tile__rg_acc_writes w;
    register_tile__rg_acc_scan(ctx, f->body, r->acc, 3, &w);
    if (w.zuse) {
        kl_snprintf(why, size, "%s uses blockIdx.z / gridDim.z (a batched or split product)", f->name);
        return 0;
    }
    if (w.fills < 1 || w.others) {
        kl_snprintf(why, size, "the accumulator %s (line %u) is not zero-filled then only updated", r->acc, line);
        return 0;
    }
    /* the kernel's pointer parameters: the two passed to one helper call, the one stored */
    char ptrs[3][64];
    unsigned np = 0, nparams = tt_child_count(f->params);
    for (unsigned i = 0; i < nparams && np < 4; i++) {
        TSNode p = tt_child(f->params, i);
        if (!rt_is(p, "parameter_declaration")) continue;
        char name[64];
        tt_copy_text(ctx, kl_ast_declarator_name(tt_field(p, "declarator")), name, sizeof name);
        if (!rt_pointer_param(ctx, f, name, NULL, 0)) continue;
        if (np == 3) {
            kl_snprintf(why, size, "%s has more than three pointer parameters", f->name);
            return 0;
        }
        kl_snprintf(ptrs[np++], sizeof ptrs[0], "%s", name);
    }
    if (np != 3) {
        kl_snprintf(why, size, "%s has %u pointer parameters, not A, B and C", f->name, np);
        return 0;
    }
    int stored = -1, reads = 0;
    for (unsigned k = 0; k < 3; k++) {
        rf_uses u = {.ctx = ctx, .name = ptrs[k]};
        kl_ast_walk(f->body, rf_uses_visit, &u);
        bool arg = u.n == 1 && rt_is(tt_parent(u.hits[0]), "argument_list");
        if (arg) {
            TSNode call = tt_parent(tt_parent(u.hits[0]));
            if (reads && !ts_node_eq(call, r->call)) {
                kl_snprintf(why, size, "the operands are loaded by two calls (lines %u and %u)", ts_node_start_point(r->call).row + 1,
                            ts_node_start_point(call).row + 1);
                return 0;
            }
            r->call = call;
            reads++;
        } else if (u.n > 1 && rt_is(tt_parent(u.hits[0]), "argument_list")) {
            kl_snprintf(why, size, "%s is passed %u times (a pipeline's prologue and prefetch): remove double-buffer first", ptrs[k],
                        u.n);
            return 0;
        } else {
            if (stored >= 0) {
                kl_snprintf(why, size, "%s and %s are both used in %s other than as arguments of the tile loads", ptrs[stored],
                            ptrs[k], f->name);
                return 0;
            }
            stored = (int)k;
        }
    }
    if (reads != 2 || stored < 0) {
        kl_snprintf(why, size, "%s does not load two operands through one call and store one result", f->name);
        return 0;
    }
    char hname[128];
    {
        const char *t = ctx->text + ts_node_start_byte(r->call);
        size_t k = 0;
        while (k + 1 < sizeof hname && (t[k] == '_' || (t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z') ||
                                        (t[k] >= '0' && t[k] <= '9')))
            hname[k] = t[k], k++;
        hname[k] = 0;
    }
    r->helper = rt_function_named(fs, nf, hname);
    if (!r->helper || ts_node_is_null(r->helper->body) || r->helper->global) {
        kl_snprintf(why, size, "the tile loads at line %u are not a __device__ helper of the file",
                    ts_node_start_point(r->call).row + 1);
        return 0;
    }
    if (tt_uses(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "__syncthreads") &&
        tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), hname) != 1) {
        kl_snprintf(why, size, "%s is called more than once (a pipeline): remove double-buffer first", hname);
        return 0;
    }
    r->nreads = 0;
    for (unsigned k = 0; k < 3; k++) {
        if ((int)k == stored) continue;
        int ai = rf_arg_index(ctx, r->call, ptrs[k]);
        TSNode hp = ai >= 0 ? rf_param_at(r->helper, ai) : (TSNode){0};
        if (ts_node_is_null(hp)) {
            kl_snprintf(why, size, "%s is not passed once to %s", ptrs[k], hname);
            return 0;
        }
        char hpn[64];
        tt_copy_text(ctx, kl_ast_declarator_name(tt_field(hp, "declarator")), hpn, sizeof hpn);
        register_tile__rg_operand *o = &r->op[r->nreads];
        if (!rf_read(ctx, r->helper, hpn, o, why, size)) return 0;
        kl_snprintf(o->ptr, sizeof o->ptr, "%s", ptrs[k]);
        if (!rf_bound(ctx, r->helper, r->call, o->bx, r->bx[r->nreads], sizeof r->bx[0], &r->kbx[r->nreads]) ||
            !rf_bound(ctx, r->helper, r->call, o->by, r->by[r->nreads], sizeof r->by[0], &r->kby[r->nreads])) {
            kl_snprintf(why, size, "a bound of %s in %s is not a size the kernel passes", ptrs[k], hname);
            return 0;
        }
        TSNode kn;
        if (!rf_bound(ctx, r->helper, r->call, o->ld, r->ld[r->nreads], sizeof r->ld[0], &kn)) {
            kl_snprintf(why, size, "the stride of %s in %s is not a size the kernel passes", ptrs[k], hname);
            return 0;
        }
        r->nreads++;
    }
    if (!rf_stores(ctx, f, r, ptrs[stored], why, size)) return 0;
    register_tile__rg_norm(ctx, r->op[2].bx, r->bx[2], sizeof r->bx[2]);
    register_tile__rg_norm(ctx, r->op[2].by, r->by[2], sizeof r->by[2]);
    tt_copy_text(ctx, r->op[2].ld, r->ld[2], sizeof r->ld[2]);
    r->kbx[2] = r->op[2].bx;
    r->kby[2] = r->op[2].by;
    for (unsigned k = 0; k < 3; k++)
        if (!register_tile__rg_invariant(ctx, f, r->kbx[k]) || !register_tile__rg_invariant(ctx, f, r->kby[k])) {
            kl_snprintf(why, size, "a bound of %s is not the same in every thread", r->op[k].ptr);
            return 0;
        }
    if (!rt_pointer_param(ctx, f, r->op[0].ptr, r->elem, sizeof r->elem)) return 0;
    char e2[64];
    if (!rt_pointer_param(ctx, f, r->op[1].ptr, e2, sizeof e2) || strcmp(e2, r->elem)) {
        kl_snprintf(why, size, "%s and %s hold different element types", r->op[0].ptr, r->op[1].ptr);
        return 0;
    }
    return 1;
}

/* The conversion of a 16-bit element to float for the product ("" for float). */
static const char *rf_cvt_in(const char *elem)
{
    if (strstr(elem, "bfloat16")) return "__bfloat162float";
    if (strstr(elem, "half")) return "__half2float";
    return "";
}

kl_status register_tile__rf_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, const rt_func *fs, unsigned nf, register_tile__rf *g,
                                 kl_edits *out, kl_error *err)
{
    char why[320];
    if (!register_tile__rf_analyse(ctx, f, fs, nf, g, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    register_tile__rg_roles r;
    const char *const bx[3] = {g->bx[0], g->bx[1], g->bx[2]}, *const by[3] = {g->by[0], g->by[1], g->by[2]};
    kl_status st = register_tile__rg_solve(g->op, bx, by, &r, err);
    if (st != KL_OK) return st;
    int ia = r.a, ib = 1 - r.a;
    TSNode Mb = r.a_kx ? g->kby[ia] : g->kbx[ia], Nb = r.b_kx ? g->kby[ib] : g->kbx[ib];
    if (ts_node_is_null(Mb) || ts_node_is_null(Nb)) {
        Mb = r.c_rowx ? g->kbx[2] : g->kby[2];
        Nb = r.c_rowx ? g->kby[2] : g->kbx[2];
    }
    {
        uint32_t ms[2], me[2];
        if (tt_find(ctx->text, ts_node_start_byte(f->outer), ts_node_start_byte(f->body), "__launch_bounds__", ms, me, 2))
            return kl_rule_not_applicable(err, "%s has __launch_bounds__: remove launch-bounds first (the new block is %d x %d)",
                                          f->name, RG_TILE, RG_TILE);
    }
    char acc[32], zero[96];
    register_tile__rg_name(ctx, f, "acc", acc, sizeof acc);
    const char *cvt = rf_cvt_in(g->elem);
    if (cvt[0]) kl_snprintf(zero, sizeof zero, "%s(0.0f)", g->elem);
    else kl_snprintf(zero, sizeof zero, "0.0f");
    register_tile__rg_text t = {.a = &g->op[ia], .b = &g->op[ib], .c = &g->op[2], .lda = g->ld[ia], .ldb = g->ld[ib],
                                .ldc = g->ld[2], .m = r.a_kx ? g->by[ia] : g->bx[ia], .n = r.b_kx ? g->by[ib] : g->bx[ib],
                                .k = r.a_kx ? g->bx[ia] : g->by[ia], .elem = g->elem, .acc_type = "float", .acc = acc,
                                .acc_zero = "0.0f", .zero_a = zero, .zero_b = zero, .cvt_in = cvt, .cvt_out = g->cvt_out};
    return register_tile__rg_write(ctx, f, &r, &t, Mb, Nb, true, out, err);
}
