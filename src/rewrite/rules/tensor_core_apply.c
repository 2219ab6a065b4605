/* tensor-core: the scalar bf16/f16 GEMM and its apply, wmma fragments over shared tiles, pipelined
 * with cp.async (tensor_core_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tensor_core_int.h"
#include "util/util.h"

/* ---- the scalar form ------------------------------------------------------------------------------- */



/* The element access inside a conversion to float: __bfloat162float(x), __half2float(x),
 * float(x), (float)x, static_cast<float>(x); a null node otherwise. */
static TSNode converted(const kl_rule_ctx *ctx, TSNode e)
{
    TSNode null = {{0}, 0, 0};
    e = kl_ast_unparen(e);
    TSNode inner = null;
    if (rt_is(e, "call_expression")) {
        TSNode f = rt_field(e, "function");
        char ft[64];
        tensor_core__text_to(ctx, f, ft, sizeof ft);
        char sq[64];
        size_t k = 0;
        for (const char *p = ft; *p && k + 1 < sizeof sq; p++)
            if (*p != ' ') sq[k++] = *p;
        sq[k] = '\0';
        TSNode args = rt_field(e, "arguments");
        if ((!strcmp(sq, "__bfloat162float") || !strcmp(sq, "__half2float") || !strcmp(sq, "float") ||
             !strcmp(sq, "static_cast<float>")) &&
            ts_node_named_child_count(args) == 1)
            inner = ts_node_named_child(args, 0);
    } else if (rt_is(e, "cast_expression")) {
        char tt[32];
        tensor_core__text_to(ctx, rt_field(e, "type"), tt, sizeof tt);
        if (!strcmp(tt, "float")) inner = rt_field(e, "value");
    }
    inner = kl_ast_unparen(inner);
    return rt_is(inner, "subscript_expression") && rt_is(rt_field(inner, "argument"), "identifier") ? inner : null;
}

/* Does the statement read `acc += X * Y` / `acc = acc + X * Y`? X and Y into *x, *y. */
static bool mac_stmt(const kl_rule_ctx *ctx, TSNode st, char *acc, size_t size, TSNode *x, TSNode *y)
{
    if (!rt_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return false;
    TSNode e = ts_node_named_child(st, 0);
    if (!rt_is(e, "assignment_expression")) return false;
    TSNode l = rt_field(e, "left"), r = kl_ast_unparen(rt_field(e, "right"));
    char op[8];
    tensor_core__text_to(ctx, rt_field(e, "operator"), op, sizeof op);
    if (!rt_is(l, "identifier")) return false;
    tensor_core__text_to(ctx, l, acc, size);
    if (!strcmp(op, "=")) {
        if (!rt_is(r, "binary_expression") || !tensor_core__text_is(ctx, rt_field(r, "operator"), "+") ||
            !tensor_core__text_is(ctx, rt_field(r, "left"), acc))
            return false;
        r = kl_ast_unparen(rt_field(r, "right"));
    } else if (strcmp(op, "+=")) {
        return false;
    }
    if (!rt_is(r, "binary_expression") || !tensor_core__text_is(ctx, rt_field(r, "operator"), "*")) return false;
    *x = converted(ctx, rt_field(r, "left"));
    *y = converted(ctx, rt_field(r, "right"));
    return !ts_node_is_null(*x) && !ts_node_is_null(*y);
}

/* The declaration (top level of body) declaring name, or a null node. */
static TSNode top_decl(const kl_rule_ctx *ctx, TSNode body, const char *name, TSNode *value)
{
    TSNode null = {{0}, 0, 0};
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode d = ts_node_named_child(body, i);
        if (!rt_is(d, "declaration")) continue;
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dc = ts_node_named_child(d, k);
            if (!tensor_core__text_is(ctx, kl_ast_declarator_name(dc), name)) continue;
            if (value) *value = rt_is(dc, "init_declarator") ? rt_field(dc, "value") : null;
            return d;
        }
    }
    return null;
}

/* The element type of the array an access reads: a pointer parameter, or a pointer declared in
 * the kernel body; "" when unknown. */
static void elem_of(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode body, TSNode access, char *buf, size_t size)
{
    char name[64];
    tensor_core__text_to(ctx, rt_field(access, "argument"), name, sizeof name);
    buf[0] = '\0';
    int pi = kl_affine_param_index(ax, name);
    if (pi >= 0) {
        const kl_param_info *p = kl_affine_param(ax, (unsigned)pi);
        if (p->pointer) tensor_core__strip_const(p->elem, buf, size);
        return;
    }
    TSNode d = top_decl(ctx, body, name, NULL);
    if (ts_node_is_null(d)) return;
    char t[64];
    tensor_core__text_to(ctx, rt_field(d, "type"), t, sizeof t);
    tensor_core__strip_const(t, buf, size);
}

/* Is T a type parameter of the (templated) kernel? */
static bool template_type(const kl_rule_ctx *ctx, TSNode fn, const char *t)
{
    TSNode outer = kl_ast_function_outer(fn);
    if (!rt_is(outer, "template_declaration")) return false;
    char ps[256], a[80], b[80];
    tensor_core__text_to(ctx, rt_field(outer, "parameters"), ps, sizeof ps);
    kl_snprintf(a, sizeof a, "typename %s", t);
    kl_snprintf(b, sizeof b, "class %s", t);
    return strstr(ps, a) || strstr(ps, b);
}

/* ---- what an expression may depend on ---------------------------------------------------------------- */

typedef struct deps {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const tensor_core__tc_naive *g;
    const char *allowed[4];
    char why[300];
} deps;

static bool in_prologue(const kl_rule_ctx *ctx, const tensor_core__tc_naive *g, const char *name)
{
    for (unsigned i = 0; i < g->npro; i++)
        if (rt_is(g->prologue[i], "declaration"))
            for (uint32_t k = 0; k < ts_node_named_child_count(g->prologue[i]); k++)
                if (tensor_core__text_is(ctx, kl_ast_declarator_name(ts_node_named_child(g->prologue[i], k)), name)) return true;
    return false;
}

typedef struct local_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool found;
} local_find;

static bool local_visit(TSNode n, void *user)
{
    local_find *f = user;
    if (f->found) return false;
    if (rt_is(n, "declaration") || rt_is(n, "parameter_declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n); k++)
            if (tensor_core__text_is(f->ctx, kl_ast_declarator_name(ts_node_named_child(n, k)), f->name)) f->found = true;
    return !f->found;
}

static bool builtin_source(const char *t)
{
    return strstr(t, "threadIdx") || strstr(t, "blockIdx") || strstr(t, "blockDim") || strstr(t, "gridDim");
}

/* A function-like macro or helper of the file named name reads thread or block indices. */
bool tensor_core__callee_reads_builtins(const kl_rule_ctx *ctx, const char *name)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (!ts_node_is_null(f)) {
        char *t = rt_text(ctx, f);
        bool b = t && builtin_source(t);
        free(t);
        return b;
    }
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if ((rt_is(d, "preproc_function_def") || rt_is(d, "preproc_def")) && tensor_core__text_is(ctx, rt_field(d, "name"), name)) {
            char *t = rt_text(ctx, d);
            bool b = t && builtin_source(t);
            free(t);
            return b;
        }
    }
    return false;
}

static bool deps_visit(TSNode n, void *user)
{
    deps *d = user;
    if (d->why[0]) return false;
    if (!rt_is(n, "identifier")) return true;
    char name[64];
    tensor_core__text_to(d->ctx, n, name, sizeof name);
    TSNode par = ts_node_parent(n);
    if (rt_is(par, "field_expression") && ts_node_eq(rt_field(par, "argument"), n)) {
        char f[16];
        tensor_core__text_to(d->ctx, rt_field(par, "field"), f, sizeof f);
        bool bad = !strcmp(name, "threadIdx") || !strcmp(name, "blockDim") ||
                   ((!strcmp(name, "blockIdx") || !strcmp(name, "gridDim")) && strcmp(f, "z"));
        if (bad)
            kl_snprintf(d->why, sizeof d->why, "`%s.%s` at line %u: only blockIdx.z / gridDim.z keep their meaning in the "
                        "tiled kernel", name, f, kl_ast_line(n));
        return false;
    }
    if (rt_is(par, "call_expression") && ts_node_eq(rt_field(par, "function"), n)) {
        if (tensor_core__callee_reads_builtins(d->ctx, name))
            kl_snprintf(d->why, sizeof d->why, "`%s` (line %u) reads thread or block indices", name, kl_ast_line(n));
        return false;
    }
    for (unsigned i = 0; i < 4; i++)
        if (d->allowed[i] && !strcmp(d->allowed[i], name)) return false;
    int pi = kl_affine_param_index(d->ax, name);
    if (pi >= 0) {
        if (kl_affine_assign_count(d->ax, name) > 0)
            kl_snprintf(d->why, sizeof d->why, "the parameter %s is assigned in the kernel (line %u)", name, kl_ast_line(n));
        return false;
    }
    if (in_prologue(d->ctx, d->g, name)) return false;
    local_find f = {d->ctx, name, false};
    kl_ast_walk(d->g->body, local_visit, &f);
    if (f.found)
        kl_snprintf(d->why, sizeof d->why, "`%s` at line %u is a local of the kernel that the tiled form cannot rebind", name,
                    kl_ast_line(n));
    return false;
}

/* Does n depend only on the allowed names, parameters, prologue locals and file-level names? */
static bool deps_ok(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, TSNode n, const char *a0,
                    const char *a1, const char *a2, char *why, size_t size, const char *what)
{
    deps d = {ctx, ax, g, {a0, a1, a2, NULL}, ""};
    kl_ast_walk(n, deps_visit, &d);
    if (d.why[0]) kl_snprintf(why, size, "%s depends on %s", what, d.why);
    return !d.why[0];
}

/* The guard `X < M && Y < N` (early: `X >= M || Y >= N`): the two names and bounds. */
bool tensor_core__guard_parts(const kl_rule_ctx *ctx, TSNode c, bool early, char *x, char *m, char *y, char *n, size_t size)
{
    c = kl_ast_unparen(c);
    if (!rt_is(c, "binary_expression") || !tensor_core__text_is(ctx, rt_field(c, "operator"), early ? "||" : "&&")) return false;
    TSNode s[2] = {kl_ast_unparen(rt_field(c, "left")), kl_ast_unparen(rt_field(c, "right"))};
    char *names[2] = {x, y}, *bounds[2] = {m, n};
    for (int i = 0; i < 2; i++) {
        if (!rt_is(s[i], "binary_expression") || !tensor_core__text_is(ctx, rt_field(s[i], "operator"), early ? ">=" : "<") ||
            !rt_is(rt_field(s[i], "left"), "identifier"))
            return false;
        tensor_core__text_to(ctx, rt_field(s[i], "left"), names[i], size);
        tensor_core__text_to(ctx, rt_field(s[i], "right"), bounds[i], size);
    }
    return true;
}

/* The thread axis of an index: 'y' for blockIdx.y/threadIdx.y, 'x' for x; 0 when it is not one
 * output coordinate per thread along one axis. */
static char index_axis(kl_affine_ctx *ax, TSNode value)
{
    kl_affine a;
    memset(&a, 0, sizeof a);
    if (ts_node_is_null(value) || kl_affine_of(ax, value, &a) != KL_OK || !a.ok) {
        kl_affine_release(&a);
        return 0;
    }
    char axis = 0;
    int64_t tx = 0, ty = 0;
    bool okx = kl_affine_coef_int(&a, "threadIdx.x", &tx), oky = kl_affine_coef_int(&a, "threadIdx.y", &ty);
    bool other = kl_affine_coef(&a, "threadIdx.z") != NULL;
    for (unsigned i = 0; i < a.nterms; i++)
        if (strncmp(a.terms[i].var, "threadIdx.", 10) && strncmp(a.terms[i].var, "blockIdx.", 9)) other = true;
    if (okx && oky && tx == 1 && ty == 0 && kl_affine_coef(&a, "blockIdx.x") && !kl_affine_coef(&a, "blockIdx.y")) axis = 'x';
    if (okx && oky && ty == 1 && tx == 0 && kl_affine_coef(&a, "blockIdx.y") && !kl_affine_coef(&a, "blockIdx.x")) axis = 'y';
    if (kl_affine_coef(&a, "blockIdx.z") || other) axis = 0;
    kl_affine_release(&a);
    return axis;
}

/* Find the multiply-add loop of fn: true when there is one (a site), with g->why set where the
 * rest of the kernel does not fit. */
bool tensor_core__analyse_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, tensor_core__tc_naive *g)
{
    memset(g, 0, sizeof *g);
    g->fn = fn;
    g->body = kl_ast_function_body(fn);
    g->loop = L->node;
    if (L->kind != KL_LOOP_FOR || !L->var) return false;
    TSNode one[2];
    if (tensor_core__stmts_of(rt_field(L->node, "body"), one, 2) != 1) return false;
    TSNode x, y;
    if (!mac_stmt(ctx, one[0], g->acc, sizeof g->acc, &x, &y)) return false;
    kl_snprintf(g->k, sizeof g->k, "%s", L->var);
    char ex[64], ey[64];
    elem_of(ctx, ax, g->body, x, ex, sizeof ex);
    elem_of(ctx, ax, g->body, y, ey, sizeof ey);
    bool tmpl = ex[0] && template_type(ctx, fn, ex);
    if (!(tensor_core__is_16bit(ex) || tmpl) || strcmp(ex, ey)) return false; /* not a 16-bit GEMM loop: no site */
    kl_snprintf(g->elem, sizeof g->elem, "%s", ex);
#define WHY(...) (kl_snprintf(g->why, sizeof g->why, __VA_ARGS__), true)
    if (!L->start || strcmp(L->start, "0") || !L->cmp || strcmp(L->cmp, "<") || !L->step_is_int || L->step_int != 1)
        return WHY("the loop over %s at line %u is not `for (%s = 0; %s < K; %s++)`", L->var, kl_ast_line(L->node), L->var,
                   L->var, L->var);
    kl_snprintf(g->K, sizeof g->K, "%s", L->bound ? L->bound : "");
    TSNode init = rt_field(L->node, "initializer");
    if (!rt_is(init, "declaration"))
        return WHY("the loop at line %u does not declare %s", kl_ast_line(L->node), L->var);
    char kt[64];
    tensor_core__text_to(ctx, rt_field(init, "type"), kt, sizeof kt);
    tensor_core__strip_const(kt, g->ktype, sizeof g->ktype);
    /* float acc = 0; loop; store — the whole of an if's block, or the end of the kernel */
    TSNode block = ts_node_parent(L->node);
    TSNode st[8];
    unsigned ns = tensor_core__stmts_of(block, st, 8), at = 0;
    if (!rt_is(block, "compound_statement") || ns > 8) return WHY("the loop at line %u is not in a plain block", kl_ast_line(L->node));
    while (at < ns && !ts_node_eq(st[at], L->node)) at++;
    if (at == 0 || at + 2 != ns)
        return WHY("the loop at line %u is not preceded by `float %s = 0.0f;` and followed by the store alone", kl_ast_line(L->node),
                   g->acc);
    g->accdecl = st[at - 1];
    g->store = st[at + 1];
    TSNode av;
    char at_t[32], av_t[32];
    if (!ts_node_eq(top_decl(ctx, block, g->acc, &av), g->accdecl) || ts_node_named_child_count(g->accdecl) != 2)
        return WHY("%s is not declared right before the loop at line %u", g->acc, kl_ast_line(L->node));
    tensor_core__text_to(ctx, rt_field(g->accdecl, "type"), at_t, sizeof at_t);
    tensor_core__text_to(ctx, av, av_t, sizeof av_t);
    if (strcmp(at_t, "float") || (strcmp(av_t, "0") && strcmp(av_t, "0.0f") && strcmp(av_t, "0.f") && strcmp(av_t, "0.0")))
        return WHY("the accumulator %s (line %u) is not a float starting at 0: f32 accumulation is what the fragments do",
                   g->acc, kl_ast_line(g->accdecl));
    if (!rt_is(g->store, "expression_statement") || rt_count_ident(ctx, g->store, g->acc) == 0)
        return WHY("the statement after the loop (line %u) does not store %s", kl_ast_line(g->store), g->acc);
    /* the guard */
    char gx[64], gy[64];
    if (ts_node_eq(block, g->body)) {
        g->early = true;
        if (at < 2 || !rt_is(st[at - 2], "if_statement") || !ts_node_is_null(rt_field(st[at - 2], "alternative")))
            return WHY("no `if (row >= M || col >= N) return;` before the accumulator (line %u)", kl_ast_line(g->accdecl));
        g->guard = st[at - 2];
        TSNode ret[2];
        if (tensor_core__stmts_of(rt_field(g->guard, "consequence"), ret, 2) != 1 || !rt_is(ret[0], "return_statement"))
            return WHY("the guard at line %u does not just return", kl_ast_line(g->guard));
    } else {
        g->guard = ts_node_parent(block);
        TSNode top = ts_node_parent(g->guard);
        if (!rt_is(g->guard, "if_statement") || !ts_node_is_null(rt_field(g->guard, "alternative")) || !ts_node_eq(top, g->body))
            return WHY("the loop at line %u is not under an `if (row < M && col < N)` of the kernel's body", kl_ast_line(L->node));
    }
    if (!tensor_core__guard_parts(ctx, tensor_core__if_cond(g->guard), g->early, gx, g->M, gy, g->N, sizeof gx))
        return WHY("the guard at line %u is not `row %s M %s col %s N`", kl_ast_line(g->guard), g->early ? ">=" : "<",
                   g->early ? "||" : "&&", g->early ? ">=" : "<");
    /* row and col: declared at the top, one output per thread along different axes; the row is
     * the one along y (the staging tile is then stored along x, the col) */
    TSNode xv, yv;
    TSNode xd = top_decl(ctx, g->body, gx, &xv), yd = top_decl(ctx, g->body, gy, &yv);
    if (ts_node_is_null(xd) || ts_node_is_null(yd)) return WHY("%s and %s are not declared at the top of the kernel", gx, gy);
    char xa = index_axis(ax, xv), ya = index_axis(ax, yv);
    if (!xa || !ya || xa == ya)
        return WHY("%s and %s (lines %u, %u) are not one output per thread on a 2-D grid (blockIdx * B + threadIdx along two "
                   "different axes)",
                   gx, gy, kl_ast_line(xd), kl_ast_line(yd));
    bool swap = xa == 'x';
    kl_snprintf(g->row, sizeof g->row, "%s", swap ? gy : gx);
    kl_snprintf(g->col, sizeof g->col, "%s", swap ? gx : gy);
    if (swap) {
        char tb[128];
        kl_snprintf(tb, sizeof tb, "%s", g->M), kl_snprintf(g->M, sizeof g->M, "%s", g->N), kl_snprintf(g->N, sizeof g->N, "%s", tb);
    }
    g->rdecl = swap ? yd : xd;
    g->cdecl = swap ? xd : yd;
    /* A: the operand that uses the row and not the col; B: the other way round */
#define USES(n, a, b) (rt_count_ident(ctx, n, a) > 0 && rt_count_ident(ctx, n, b) == 0)
    if (USES(x, g->row, g->col) && USES(y, g->col, g->row)) g->aacc = x, g->bacc = y;
    else if (USES(y, g->row, g->col) && USES(x, g->col, g->row)) g->aacc = y, g->bacc = x;
    else
        return WHY("the operands at line %u do not split into one that uses %s (not %s) and one that uses %s (not %s)",
                   kl_ast_line(one[0]), g->row, g->col, g->col, g->row);
#undef USES
    unsigned ndecl = ts_node_eq(g->rdecl, g->cdecl) ? 2 : 1;
    if (ts_node_named_child_count(g->rdecl) != ndecl + 1 || ts_node_named_child_count(g->cdecl) != ndecl + 1)
        return WHY("the declaration at line %u declares other names too", kl_ast_line(g->rdecl));
    char t[64];
    tensor_core__text_to(ctx, rt_field(g->rdecl, "type"), t, sizeof t);
    tensor_core__strip_const(t, g->rtype, sizeof g->rtype);
    tensor_core__text_to(ctx, rt_field(g->cdecl, "type"), t, sizeof t);
    tensor_core__strip_const(t, g->ctype, sizeof g->ctype);
    /* the rest of the body is the prologue: declarations that do not depend on the thread */
    TSNode top[MAXPRO + 8];
    unsigned nt = tensor_core__stmts_of(g->body, top, MAXPRO + 8);
    if (nt > MAXPRO + 8) return WHY("the kernel has too many statements");
    for (unsigned i = 0; i < nt; i++) {
        if (ts_node_eq(top[i], g->rdecl) || ts_node_eq(top[i], g->cdecl)) continue;
        if (ts_node_eq(top[i], g->guard)) {
            if (!g->early && i + 1 != nt)
                return WHY("statements follow the guarded block (line %u)", kl_ast_line(top[i + 1]));
            if (g->early && i + 4 != nt)
                return WHY("statements other than the accumulator, the loop and the store follow the guard (line %u)",
                           kl_ast_line(g->guard));
            break;
        }
        if (!rt_is(top[i], "declaration"))
            return WHY("the statement at line %u is not a declaration the tiled form can keep", kl_ast_line(top[i]));
        if (g->npro == MAXPRO) return WHY("too many declarations in the kernel");
        g->prologue[g->npro++] = top[i];
    }
    for (unsigned i = 0; i < g->npro; i++) {
        char w[64];
        kl_snprintf(w, sizeof w, "the declaration at line %u", kl_ast_line(g->prologue[i]));
        if (!deps_ok(ctx, ax, g, g->prologue[i], NULL, NULL, NULL, g->why, sizeof g->why, w)) return true;
        if (rt_count_ident(ctx, g->prologue[i], g->row) || rt_count_ident(ctx, g->prologue[i], g->col))
            return WHY("the declaration at line %u uses %s or %s", kl_ast_line(g->prologue[i]), g->row, g->col);
    }
    /* what each piece may depend on */
    char wa[80], wb[80];
    kl_snprintf(wa, sizeof wa, "A's element at line %u", kl_ast_line(g->aacc));
    kl_snprintf(wb, sizeof wb, "B's element at line %u", kl_ast_line(g->bacc));
    if (!deps_ok(ctx, ax, g, g->aacc, g->row, g->k, NULL, g->why, sizeof g->why, wa) ||
        !deps_ok(ctx, ax, g, g->bacc, g->k, g->col, NULL, g->why, sizeof g->why, wb) ||
        !deps_ok(ctx, ax, g, g->store, g->row, g->col, g->acc, g->why, sizeof g->why, "the store") ||
        !deps_ok(ctx, ax, g, tensor_core__if_cond(g->guard), g->row, g->col, NULL, g->why, sizeof g->why, "the guard"))
        return true;
    TSNode cond = rt_field(L->node, "condition");
    if (!ts_node_is_null(cond) && !deps_ok(ctx, ax, g, rt_field(kl_ast_unparen(cond), "right"), NULL, NULL, NULL, g->why,
                                           sizeof g->why, "the loop bound"))
        return true;
    /* A and B must not be what the store writes */
    char ab[64], bb[64];
    tensor_core__text_to(ctx, rt_field(g->aacc, "argument"), ab, sizeof ab);
    tensor_core__text_to(ctx, rt_field(g->bacc, "argument"), bb, sizeof bb);
    if (rt_count_ident(ctx, g->store, ab) || rt_count_ident(ctx, g->store, bb))
        return WHY("the store at line %u touches %s or %s, which the loop reads", kl_ast_line(g->store), ab, bb);
#undef WHY
    return true;
}

/* ---- launches ------------------------------------------------------------------------------------------- */


static void cfg_args(const kl_rule_ctx *ctx, TSNode v, tensor_core__cfg *c)
{
    TSNode args = v;
    if (rt_is(v, "call_expression") && tensor_core__text_is(ctx, rt_field(v, "function"), "dim3")) args = rt_field(v, "arguments");
    if (rt_is(args, "argument_list") || rt_is(args, "initializer_list") || rt_is(args, "parameter_list")) {
        c->nargs = 0;
        for (uint32_t i = 0; i < ts_node_named_child_count(args) && c->nargs < 3; i++)
            tensor_core__text_to(ctx, ts_node_named_child(args, i), c->args[c->nargs++], sizeof c->args[0]);
        return;
    }
    c->nargs = 1;
    tensor_core__text_to(ctx, v, c->args[0], sizeof c->args[0]);
}

static void cfg_read(const kl_rule_ctx *ctx, const kl_launch_site *l, TSNode e, tensor_core__cfg *c)
{
    memset(c, 0, sizeof *c);
    c->expr = e;
    if (rt_is(e, "identifier")) {
        char name[64];
        tensor_core__text_to(ctx, e, name, sizeof name);
        TSNode body = kl_ast_function_body(l->host_fn);
        TSNode v = {{0}, 0, 0};
        TSNode d = top_decl(ctx, body, name, &v);
        TSNode dc = {{0}, 0, 0};
        if (!ts_node_is_null(d))
            for (uint32_t k = 0; k < ts_node_named_child_count(d); k++)
                if (tensor_core__text_is(ctx, kl_ast_declarator_name(ts_node_named_child(d, k)), name)) dc = ts_node_named_child(d, k);
        /* `dim3 block(BLOCK, BLOCK);` reads as a function declarator: its "parameters" are the arguments */
        if (rt_is(dc, "function_declarator") && ts_node_is_null(v)) v = rt_field(dc, "parameters");
        if (!ts_node_is_null(dc) && rt_count_ident(ctx, body, name) == 2 && ts_node_named_child_count(d) == 2 &&
            !ts_node_is_null(v)) {
            c->decl = d;
            c->name = kl_ast_declarator_name(dc);
            cfg_args(ctx, v, c);
            return;
        }
    }
    cfg_args(ctx, e, c);
}

/* Replace a configuration with dim3(args). */
static kl_status cfg_write(const kl_rule_ctx *ctx, const tensor_core__cfg *c, const char *args, bool plain, kl_edits *out)
{
    if (!ts_node_is_null(c->decl)) {
        char name[64];
        tensor_core__text_to(ctx, c->name, name, sizeof name);
        uint32_t a = ts_node_start_byte(c->decl), b = ts_node_start_byte(c->name);
        return kl_edits_addf(out, a, ts_node_end_byte(c->decl), "%.*s%s(%s);", (int)(b - a), ctx->text + a, name, args);
    }
    if (plain) return kl_edits_addf(out, ts_node_start_byte(c->expr), ts_node_end_byte(c->expr), "%s", args);
    return kl_edits_addf(out, ts_node_start_byte(c->expr), ts_node_end_byte(c->expr), "dim3(%s)", args);
}

/* A kernel-side bound (a parameter name or a constant) in the launch's terms, into buf. */
static bool host_bound(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_launch_site *l, const char *b,
                       char *buf, size_t size)
{
    int pi = kl_affine_param_index(ax, b);
    if (pi >= 0) {
        if ((uint32_t)pi >= ts_node_named_child_count(l->args)) return false;
        TSNode a = ts_node_named_child(l->args, (uint32_t)pi);
        char t[150];
        tensor_core__text_to(ctx, a, t, sizeof t);
        bool simple = rt_is(a, "identifier") || rt_is(a, "number_literal") || rt_is(a, "field_expression");
        kl_snprintf(buf, size, simple ? "%s" : "(%s)", t);
        return true;
    }
    for (const char *p = b; *p; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))) return false;
    /* a name the host sees too: a macro or a file-level constant */
    TSNode fb = kl_ast_function_body(fn);
    local_find f = {ctx, b, false};
    kl_ast_walk(fb, local_visit, &f);
    if (f.found) return false;
    kl_snprintf(buf, size, "%s", b);
    return true;
}


/* The launches of the kernel, with the host-side M and N: false with why when one cannot be
 * rewritten. */
bool tensor_core__plan_launches(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kernel, const char *M,
                          const char *N, kl_launch_sites *ls, tensor_core__launch_plan *plans, unsigned max, unsigned *np, char *why,
                          size_t size)
{
    *np = 0;
    for (unsigned i = 0; i < ls->count; i++) {
        kl_launch_site *l = &ls->items[i];
        if (strcmp(l->kernel, kernel)) continue;
        if (*np == max) {
            kl_snprintf(why, size, "more than %u launches of %s", max, kernel);
            return false;
        }
        tensor_core__launch_plan *p = &plans[(*np)++];
        memset(p, 0, sizeof *p);
        p->l = l;
        if (ts_node_is_null(l->grid) || ts_node_is_null(l->block)) {
            kl_snprintf(why, size, "the launch at line %u has no grid and block", kl_ast_line(l->call));
            return false;
        }
        cfg_read(ctx, l, l->grid, &p->grid);
        cfg_read(ctx, l, l->block, &p->block);
        if (!host_bound(ctx, ax, fn, l, M, p->m, sizeof p->m) || !host_bound(ctx, ax, fn, l, N, p->n, sizeof p->n)) {
            kl_snprintf(why, size, "the bounds %s and %s are not parameters or file-level constants that the launch at line %u "
                        "can use", M, N, kl_ast_line(l->call));
            return false;
        }
    }
    if (*np == 0) {
        kl_snprintf(why, size, "%s is not launched in the file: its grid could not follow the new tiles", kernel);
        return false;
    }
    return true;
}

/* The edits of every launch: grid (n + BN-1) / BN x (m + BM-1) / BM (x z), block as given. */
kl_status tensor_core__write_launches(const kl_rule_ctx *ctx, tensor_core__launch_plan *plans, unsigned np, int bm, int bn, const char *block,
                                bool plain_block, kl_edits *out)
{
    for (unsigned i = 0; i < np; i++) {
        tensor_core__launch_plan *p = &plans[i];
        char g[600];
        kl_snprintf(g, sizeof g, "(%s + %d) / %d, (%s + %d) / %d%s%s", p->n, bn - 1, bn, p->m, bm - 1, bm,
                    p->grid.nargs == 3 ? ", " : "", p->grid.nargs == 3 ? p->grid.args[2] : "");
        kl_status st = cfg_write(ctx, &p->grid, g, false, out);
        if (st == KL_OK) st = cfg_write(ctx, &p->block, block, plain_block, out);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* ---- apply ------------------------------------------------------------------------------------------------- */

void tensor_core__add_stmt_text(const kl_rule_ctx *ctx, kl_strbuf *sb, TSNode n, const char *ind)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    kl_strbuf_addf(sb, "%s%.*s\n", ind, (int)(b - a), ctx->text + a);
}

/* The #include line position for <mma.h>: after the last top-level #include, else 0. */
static uint32_t include_at(const kl_rule_ctx *ctx)
{
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    uint32_t at = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if (rt_is(d, "preproc_include")) at = ts_node_end_byte(d);
    }
    if (at && ctx->text[at - 1] != '\n') at = rt_line_end(ctx, at);
    return at;
}

/* Is the access (a subscript) contiguous along variable v: coefficient 1 on it? */
static bool unit_stride(kl_affine_ctx *ax, TSNode access, const char *v)
{
    if (!rt_is(access, "subscript_expression")) return false;
    TSNode idx = kl_ast_subscript_index(access);
    kl_affine a;
    memset(&a, 0, sizeof a);
    int64_t c = 0;
    bool ok = !ts_node_is_null(idx) && kl_affine_of(ax, idx, &a) == KL_OK && a.ok && kl_affine_coef_int(&a, v, &c) && c == 1;
    kl_affine_release(&a);
    return ok;
}

static void cp_async_text(kl_strbuf *sb, const char *ind, const char *dst, const char *src)
{
    kl_strbuf_addf(sb, "%sasm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(%s)), \"l\"(%s));\n",
                   ind, dst, src);
}

/* How a tile load moves its 16-byte pieces. */
typedef enum { COPY_REGS, COPY_ASYNC, COPY_ASYNC_UNCHECKED } copy_kind;

/* One tile's load, 8 elements (16 bytes) per thread and step: `kl_xs[r][c..c+7]` from ACCESS with
 * n1 = o1 + r and n2 = o2 + c. Checked (COPY_REGS through registers, COPY_ASYNC by cp.async): 16 bytes
 * where the 8 are in bounds and the address 16-byte aligned, else element by element (n2 + q, the
 * contiguous one). COPY_ASYNC_UNCHECKED: cp.async always (the caller knows the tile is inside). The
 * loop starts at indentation in3. */
static void tile_copy_loop(kl_strbuf *sb, const char *in3, const char *in4, const char *in5, const char *in6,
                           const char *tile, const char *rows, const char *cols, const char *t1, const char *n1,
                           const char *o1, const char *b1, const char *t2, const char *n2, const char *o2, const char *b2,
                           const char *access, const char *E, copy_kind kind)
{
    bool fast = kind == COPY_ASYNC_UNCHECKED;
    char dst[96], src[600];
    kl_snprintf(dst, sizeof dst, "&%s[kl_r][kl_c]", tile);
    kl_snprintf(src, sizeof src, "&%s", access);
    if (fast) kl_strbuf_addf(sb, "%s#pragma unroll\n", in3);
    kl_strbuf_addf(sb, "%sfor (int kl_e = threadIdx.x; kl_e < %s * %s / 8; kl_e += KL_THREADS) {\n", in3, rows, cols);
    kl_strbuf_addf(sb, "%sconst int kl_r = kl_e / (%s / 8), kl_c = kl_e %% (%s / 8) * 8;\n", in4, cols, cols);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_r;\n", in4, t1, n1, o1);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_c;\n", in4, t2, n2, o2);
    if (fast) cp_async_text(sb, in4, dst, src);
    else {
        kl_strbuf_addf(sb, "%sif (%s < %s && %s + 7 < %s && reinterpret_cast<unsigned long long>(&%s) %% 16 == 0) {\n", in4, n1,
                       b1, n2, b2, access);
        if (kind == COPY_ASYNC) cp_async_text(sb, in5, dst, src);
        else kl_strbuf_addf(sb, "%s*reinterpret_cast<uint4*>(%s) = *reinterpret_cast<const uint4*>(%s);\n", in5, dst, src);
        kl_strbuf_addf(sb, "%s} else {\n", in4);
        kl_strbuf_addf(sb, "%sfor (int kl_q = 0; kl_q < 8; kl_q++) {\n", in5);
        kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_c + kl_q;\n", in6, t2, n2, o2);
        kl_strbuf_addf(sb, "%s%s[kl_r][kl_c + kl_q] = (%s < %s && %s < %s) ? %s : %s(0.0f);\n", in6, tile, n1, b1, n2, b2,
                       access, E);
        kl_strbuf_addf(sb, "%s}\n", in5);
        kl_strbuf_addf(sb, "%s}\n", in4);
    }
    kl_strbuf_addf(sb, "%s}\n", in3);
}

/* One tile's load, an element per thread and step: `kl_xs[r][c]` from ACCESS with n1 = o1 + r and
 * n2 = o2 + c, zero outside the bounds (the arguments as tile_copy_loop's). */
static void tile_elem_loop(kl_strbuf *sb, const char *in2, const char *in3, const char *tile, const char *rows, const char *cols,
                           const char *t1, const char *n1, const char *o1, const char *b1, const char *t2, const char *n2,
                           const char *o2, const char *b2, const char *access, const char *E)
{
    kl_strbuf_addf(sb, "%sfor (int kl_e = threadIdx.x; kl_e < %s * %s; kl_e += KL_THREADS) {\n", in2, rows, cols);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_e / %s;\n", in3, t1, n1, o1, cols);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_e %% %s;\n", in3, t2, n2, o2, cols);
    kl_strbuf_addf(sb, "%s%s[kl_e / %s][kl_e %% %s] = (%s < %s && %s < %s) ? %s : %s(0.0f);\n", in3, tile, cols, cols, n1, b1, n2,
                   b2, access, E);
    kl_strbuf_addf(sb, "%s}\n", in2);
}

/* Is B's access contiguous along col, a local of the thread index: the same coefficient (not 0) on
 * threadIdx.x in the access and in col's definition? */
static bool unit_stride_col(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g)
{
    if (!rt_is(g->bacc, "subscript_expression")) return false;
    TSNode value = {0};
    for (uint32_t i = 0; i < ts_node_named_child_count(g->cdecl); i++) {
        TSNode d = ts_node_named_child(g->cdecl, i);
        if (rt_is(d, "init_declarator") && rt_text_is(ctx, rt_field(d, "declarator"), g->col)) value = rt_field(d, "value");
    }
    if (ts_node_is_null(value)) return false;
    TSNode idx = kl_ast_subscript_index(g->bacc);
    kl_affine a, c;
    memset(&a, 0, sizeof a);
    memset(&c, 0, sizeof c);
    int64_t ka = 0, kc = 0;
    bool ok = !ts_node_is_null(idx) && kl_affine_of(ax, idx, &a) == KL_OK && a.ok && kl_affine_of(ax, value, &c) == KL_OK &&
              c.ok && kl_affine_coef_int(&a, "threadIdx.x", &ka) && kl_affine_coef_int(&c, "threadIdx.x", &kc) && ka == kc &&
              ka != 0;
    kl_affine_release(&a);
    kl_affine_release(&c);
    return ok;
}


/* The texts both apply forms write with: indentation levels (in[k]: k levels of the body's), the
 * operands' subscripts, the store guard and the function's indentation. */
typedef struct tc_text {
    char in[7][96];
    char a_text[512], b_text[512], guard[400], fnind[16];
} tc_text;

static void tc_text_of(const kl_rule_ctx *ctx, const tensor_core__tc_naive *g, tc_text *t)
{
    char unit[16] = "    ";
    TSNode first = ts_node_named_child(g->body, 0);
    if (!ts_node_is_null(first)) {
        rt_indent_of(ctx, ts_node_start_byte(first), unit, sizeof unit);
        if (!unit[0] || !kl_rules_starts_line(ctx, ts_node_start_byte(first))) kl_snprintf(unit, sizeof unit, "    ");
    }
    t->in[0][0] = '\0';
    for (int k = 1; k < 7; k++) kl_snprintf(t->in[k], sizeof t->in[k], "%s%s", t->in[k - 1], unit);
    tensor_core__text_to(ctx, g->aacc, t->a_text, sizeof t->a_text);
    tensor_core__text_to(ctx, g->bacc, t->b_text, sizeof t->b_text);
    tensor_core__text_to(ctx, tensor_core__if_cond(g->guard), t->guard, sizeof t->guard);
    rt_indent_of(ctx, ts_node_start_byte(g->fn), t->fnind, sizeof t->fnind);
}

/* The epilogue's store of one element of the staging tile: `float ACC = src;` and the kernel's own
 * store, under its guard — `if (guard) continue;` for a kernel that returned early, else
 * `if (guard) { … }` (the guarded lines at in_more). */
static void epilogue_store(const kl_rule_ctx *ctx, kl_strbuf *sb, const tensor_core__tc_naive *g, const char *guard,
                           const char *src, const char *in, const char *in_more)
{
    if (g->early) {
        kl_strbuf_addf(sb, "%sif (%s) continue;\n", in, guard);
        kl_strbuf_addf(sb, "%sfloat %s = %s;\n", in, g->acc, src);
        tensor_core__add_stmt_text(ctx, sb, g->store, in);
    } else {
        kl_strbuf_addf(sb, "%sif (%s) {\n", in, guard);
        kl_strbuf_addf(sb, "%sfloat %s = %s;\n", in_more, g->acc, src);
        tensor_core__add_stmt_text(ctx, sb, g->store, in_more);
        kl_strbuf_addf(sb, "%s}\n", in);
    }
}

/* What both apply forms work from: the file's launches of the kernel and their plans (at most 8),
 * and the texts they write with. */
typedef struct tc_apply {
    kl_launch_sites ls;
    tensor_core__launch_plan plans[8];
    unsigned np;
    tc_text T;
} tc_apply;

/* Fill a (a->ls the caller's to release on KL_OK), or why the launches cannot be rewritten. */
static kl_status tc_begin(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, const char *kernel,
                          tc_apply *a, kl_error *err)
{
    a->ls = (kl_launch_sites){0};
    a->np = 0;
    kl_status st = kl_ast_launches(ctx->src, &a->ls, err);
    if (st != KL_OK) return st;
    char why[300];
    if (!tensor_core__plan_launches(ctx, ax, g->fn, kernel, g->M, g->N, &a->ls, a->plans, 8, &a->np, why, sizeof why)) {
        kl_launch_sites_release(&a->ls);
        return kl_rule_not_applicable(err, "%s", why);
    }
    tc_text_of(ctx, g, &a->T);
    return KL_OK;
}

/* Each launch: the dynamic shared memory in its configuration, and cudaFuncSetAttribute before it. */
static kl_status launch_smem(const kl_rule_ctx *ctx, tensor_core__launch_plan *plans, unsigned np, size_t bytes, kl_edits *out,
                             kl_error *err)
{
    for (unsigned i = 0; i < np; i++) {
        kl_launch_site *l = plans[i].l;
        TSNode stmt = ts_node_parent(l->call);
        if (!rt_is(stmt, "expression_statement") || !rt_is(ts_node_parent(stmt), "compound_statement") ||
            !kl_rules_starts_line(ctx, ts_node_start_byte(stmt)))
            return kl_rule_not_applicable(err, "%s:%u: the launch is not a statement of its own in a block: "
                                          "cudaFuncSetAttribute cannot go before it", kl_source_name(ctx->src),
                                          kl_node_span(l->call).line);
        char ind[64];
        rt_indent_of(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
        uint32_t fa = ts_node_start_byte(l->call), fb = ts_node_start_byte(l->config);
        kl_status st = kl_edits_addf(out, ts_node_start_byte(stmt), ts_node_start_byte(stmt),
                                     "cudaFuncSetAttribute(%.*s, cudaFuncAttributeMaxDynamicSharedMemorySize, %zu);\n%s",
                                     (int)(fb - fa), ctx->text + fa, bytes, ind);
        if (st == KL_OK) {
            if (!ts_node_is_null(l->smem)) st = kl_edits_addf(out, ts_node_start_byte(l->smem), ts_node_end_byte(l->smem), "%zu", bytes);
            else st = kl_edits_addf(out, ts_node_end_byte(l->block), ts_node_end_byte(l->block), ", %zu", bytes);
        }
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

/* The edits of an apply: g's body becomes sb's text, the launches get the bm x bn block tile of
 * `threads` threads (and, with smem, that many bytes of dynamic shared memory), and <mma.h> is
 * included. Releases sb and a->ls. */
static kl_status tc_finish(const kl_rule_ctx *ctx, const tensor_core__tc_naive *g, tc_apply *a, kl_strbuf *sb, int bm, int bn,
                           int threads, size_t smem, kl_edits *out, kl_error *err)
{
    kl_status st = sb->failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(g->body), ts_node_end_byte(g->body), kl_strbuf_str(sb));
    kl_strbuf_release(sb);
    char block[32];
    kl_snprintf(block, sizeof block, "%d", threads);
    if (st == KL_OK) st = tensor_core__write_launches(ctx, a->plans, a->np, bm, bn, block, true, out);
    if (st == KL_OK && smem) {
        st = launch_smem(ctx, a->plans, a->np, smem, out, err);
        if (st != KL_OK) {
            kl_launch_sites_release(&a->ls);
            return st;
        }
    }
    if (st == KL_OK && !strstr(ctx->text, "<mma.h>")) {
        uint32_t at = include_at(ctx);
        st = kl_edits_add(out, at, at, "#include <mma.h>\n");
    }
    kl_launch_sites_release(&a->ls);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* The block's shape as constants, KL_FM … KL_THREADS (and KL_STAGES past one stage), and its check. */
static void tc_shape_text(kl_strbuf *sb, const char *in, int wm, int wn, int fm, int fn_, int bk, int stages)
{
    kl_strbuf_addf(sb, "%sconstexpr int KL_FM = %d, KL_FN = %d, KL_WARPS_M = %d, KL_WARPS_N = %d;\n", in, fm, fn_, wm, wn);
    kl_strbuf_addf(sb, "%sconstexpr int KL_BM = %d, KL_BN = %d, KL_BK = %d, KL_THREADS = %d", in, 16 * wm * fm, 16 * wn * fn_, bk,
                   32 * wm * wn);
    if (stages > 1) kl_strbuf_addf(sb, ", KL_STAGES = %d", stages);
    kl_strbuf_addf(sb, ";\n%sstatic_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, \"a warp per %d x %d piece of C\");\n", in,
                   16 * fm, 16 * fn_);
}

/* The warp's place in the block tile, the block's in C, and the warp's accumulators, zeroed. */
static void tc_warp_text(kl_strbuf *sb, const tensor_core__tc_naive *g, const char *in, const char *in2)
{
    kl_strbuf_addf(sb, "%sconst int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp %% KL_WARPS_N * 16 * KL_FN;\n", in);
    kl_strbuf_addf(sb, "%sconst %s kl_m0 = (%s)blockIdx.y * KL_BM;\n", in, g->rtype, g->rtype);
    kl_strbuf_addf(sb, "%sconst %s kl_n0 = (%s)blockIdx.x * KL_BN;\n", in, g->ctype, g->ctype);
    kl_strbuf_addf(sb, "%snvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];\n", in);
    kl_strbuf_addf(sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);\n", in2);
}

/* A loop's head at indentation in, under `#pragma unroll` with unroll. */
static void tc_for(kl_strbuf *sb, const char *in, bool unroll, const char *head)
{
    if (unroll) kl_strbuf_addf(sb, "%s#pragma unroll\n", in);
    kl_strbuf_addf(sb, "%s%s\n", in, head);
}

/* The warp's mma over the k tile: its fragments of A and B loaded and multiplied into the
 * accumulators, at T->in[2]; with kloop in KL_BK / 16 steps (kl_kk), else in one at column 0;
 * unroll: every loop under #pragma unroll. */
static void tc_mma_text(kl_strbuf *sb, const tc_text *T, bool kloop, bool unroll)
{
    const char *kk = kloop ? "kl_kk" : "0";
    const int d = kloop ? 3 : 2; /* the level of the loops over fragments */
    if (kloop) tc_for(sb, T->in[2], unroll, "for (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16) {");
    tc_for(sb, T->in[d], unroll, "for (int kl_i = 0; kl_i < KL_FM; kl_i++)");
    kl_strbuf_addf(sb, "%snvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][%s], KL_BK + 8);\n", T->in[d + 1],
                   kk);
    tc_for(sb, T->in[d], unroll, "for (int kl_j = 0; kl_j < KL_FN; kl_j++)");
    kl_strbuf_addf(sb, "%snvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[%s][kl_wn + 16 * kl_j], KL_BN + 8);\n", T->in[d + 1],
                   kk);
    tc_for(sb, T->in[d], unroll, "for (int kl_i = 0; kl_i < KL_FM; kl_i++)");
    tc_for(sb, T->in[d + 1], unroll, "for (int kl_j = 0; kl_j < KL_FN; kl_j++)");
    kl_strbuf_addf(sb, "%snvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);\n",
                   T->in[d + 2]);
    if (kloop) kl_strbuf_addf(sb, "%s}\n", T->in[2]);
}

/* The warp's operand fragments of one k step. */
static void tc_frags_text(kl_strbuf *sb, const char *E, const char *in)
{
    kl_strbuf_addf(sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fa[KL_FM];\n",
                   in, E);
    kl_strbuf_addf(sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fb[KL_FN];\n",
                   in, E);
}

static kl_status apply_pipelined(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, const char *kernel, int wm,
                                 int wn, int fm, int fn_, int bk, int stages, kl_edits *out, kl_error *err);

/* A block tile no larger than the sizes that are compile-time constants (M, N, K written as a
 * constant of the file or a #define): past them the tile is padding the block loads and
 * multiplies for nothing, and a smaller tile does the same work with more blocks. Sizes known
 * only at run time are not judged here. */
static kl_status tile_fits_sizes(const kl_rule_ctx *ctx, const tensor_core__tc_naive *g, int bm, int bn, int bk, kl_error *err)
{
    const struct {
        const char *name, *what;
        int tile;
    } dims[] = {{g->M, "block tile's rows", bm}, {g->N, "block tile's columns", bn}, {g->K, "k tile", bk}};
    for (unsigned i = 0; i < 3; i++) {
        int64_t v = 0;
        if (!dims[i].name[0] || !kl_const_eval_name(ctx->src, g->fn, dims[i].name, &v, NULL, 0) || v <= 0) continue;
        if (dims[i].tile > v)
            return kl_rule_not_applicable(err, "the %s (%d) exceed%s %s = %lld, a compile-time size: the rest of the tile "
                                          "would be padding; a smaller tile fits", dims[i].what, dims[i].tile,
                                          i == 2 ? "s" : "", dims[i].name, (long long)v);
    }
    return KL_OK;
}

kl_status tensor_core__apply_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, const char *kernel, int wm,
                             int wn, int fm, int fn_, int bk, bool vec, int stages, kl_edits *out, kl_error *err)
{
    if (g->why[0]) return kl_rule_not_applicable(err, "%s", g->why);
    kl_status fit = tile_fits_sizes(ctx, g, 16 * wm * fm, 16 * wn * fn_, bk, err);
    if (fit != KL_OK) return fit;
    if (stages > 1) return apply_pipelined(ctx, ax, g, kernel, wm, wn, fm, fn_, bk, stages, out, err);
    const int bm = 16 * wm * fm, bn = 16 * wn * fn_, threads = 32 * wm * wn;
    /* the A and B tiles, and the f32 staging tile of C used after the k loop: one buffer for both
     * when together they would not fit */
    const size_t ab = (size_t)bm * (bk + 8) * 2 + (size_t)bk * (bn + 8) * 2, cs = (size_t)bm * (bn + 4) * 4;
    const bool alias = ab + cs > SMEM_LIMIT;
    if ((alias ? (ab > cs ? ab : cs) : ab + cs) > SMEM_LIMIT)
        return kl_rule_not_applicable(err, "a %d x %d block tile (k tile %d) needs %zu bytes of shared memory, over 48 KiB",
                                      bm, bn, bk, ab > cs ? ab : cs);
    if (vec && !unit_stride(ax, g->aacc, g->k))
        return kl_rule_not_applicable(err, "vector_loads: A's elements are not contiguous along '%s'", g->k);
    if (vec && !unit_stride_col(ctx, ax, g))
        return kl_rule_not_applicable(err, "vector_loads: B's elements are not contiguous along '%s'", g->col);
    tc_apply ap;
    kl_status st = tc_begin(ctx, ax, g, kernel, &ap, err);
    if (st != KL_OK) return st;
    const tc_text *T = &ap.T;
    const char *in = T->in[1], *in2 = T->in[2], *in3 = T->in[3], *in4 = T->in[4], *in5 = T->in[5];
    const char *E = g->elem, *a_text = T->a_text, *b_text = T->b_text, *guard = T->guard, *fnind = T->fnind;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s%s %dx16x16 fragments of %s, f32 accumulators: %d x %d warps, each %d x %d fragments\n", in,
                   MARKER, 16, tensor_core__dtype_of(E), wm, wn, fm, fn_);
    for (unsigned i = 0; i < g->npro; i++) tensor_core__add_stmt_text(ctx, &sb, g->prologue[i], in);
    tc_shape_text(&sb, in, wm, wn, fm, fn_, bk, 1);
    if (alias) {
        kl_strbuf_addf(&sb, "%s// the A and B tiles during the k loop, the f32 tile of C after it: one buffer\n", in);
        kl_strbuf_addf(&sb, "%sconstexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * %d, KL_CB = KL_BM * (KL_BN + 4) * 4;\n",
                       in, (int)sizeof(uint16_t));
        kl_strbuf_addf(&sb, "%s__shared__ __align__(128) unsigned char kl_smem[KL_AB > KL_CB ? KL_AB : KL_CB];\n", in);
        kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem);\n", in, E);
        kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + KL_BM * (KL_BK + 8) * %d);\n", in, E,
                       (int)sizeof(uint16_t));
        kl_strbuf_addf(&sb, "%sauto kl_cs = reinterpret_cast<float (*)[KL_BN + 4]>(kl_smem);\n", in);
    } else {
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) %s kl_as[KL_BM][KL_BK + 8];\n", in, E);
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) %s kl_bs[KL_BK][KL_BN + 8];\n", in, E);
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) float kl_cs[KL_BM][KL_BN + 4];\n", in);
    }
    kl_strbuf_addf(&sb, "%sconst int kl_warp = threadIdx.x / 32;\n", in);
    tc_warp_text(&sb, g, in, in2);
    kl_strbuf_addf(&sb, "%sfor (%s kl_k0 = 0; kl_k0 < %s; kl_k0 += KL_BK) {\n", in, g->ktype, g->K);
    if (vec) {
        tile_copy_loop(&sb, in2, in3, in4, in5, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k,
                       "kl_k0", g->K, a_text, E, COPY_REGS);
        tile_copy_loop(&sb, in2, in3, in4, in5, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col,
                       "kl_n0", g->N, b_text, E, COPY_REGS);
    } else {
        tile_elem_loop(&sb, in2, in3, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k, "kl_k0", g->K,
                       a_text, E);
        tile_elem_loop(&sb, in2, in3, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col, "kl_n0", g->N,
                       b_text, E);
    }
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    tc_frags_text(&sb, E, in2);
    tc_mma_text(&sb, T, bk != 16, false);
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in2);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::store_matrix_sync(&kl_cs[kl_wm + 16 * kl_i][kl_wn + 16 * kl_j], kl_acc[kl_i][kl_j], "
                   "KL_BN + 4, nvcuda::wmma::mem_row_major);\n", in3);
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BN; kl_e += KL_THREADS) {\n", in);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_m0 + kl_e / KL_BN;\n", in2, g->rtype, g->row);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_n0 + kl_e %% KL_BN;\n", in2, g->ctype, g->col);
    epilogue_store(ctx, &sb, g, guard, "kl_cs[kl_e / KL_BN][kl_e % KL_BN]", in2, in3);
    kl_strbuf_addf(&sb, "%s}\n%s}", in, fnind);
    return tc_finish(ctx, g, &ap, &sb, bm, bn, threads, 0, out, err);
}

/* ---- apply, pipelined (stages > 1) -----------------------------------------------------------------------------
 *
 * The k tiles go through a ring of `stages` buffers in dynamic shared memory, filled with 16-byte
 * cp.async copies issued stages - 1 tiles ahead; one barrier per k tile (the copy into the buffer
 * the previous tile used is issued after it). A block whose tile lies inside A and B, with every row
 * of both 16-byte aligned (tested once: the index is affine, so two rows tell), copies without a
 * test per copy; other blocks copy 16 bytes where the 8 elements are in bounds and aligned and
 * element by element elsewhere, as vector_loads does. Each warp stores its accumulators through a
 * 16 x 16 f32 staging tile of its own (the block's C tile would not fit beside the ring), running
 * the original store per element under the original guard. Launches get the dynamic shared memory
 * (cudaFuncSetAttribute before each, for more than 48 KiB). */

static kl_status apply_pipelined(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, const char *kernel, int wm,
                                 int wn, int fm, int fn_, int bk, int stages, kl_edits *out, kl_error *err)
{
    const int bm = 16 * wm * fm, bn = 16 * wn * fn_, threads = 32 * wm * wn;
    const size_t ab = ((size_t)bm * (bk + 8) + (size_t)bk * (bn + 8)) * 2, cs = (size_t)wm * wn * 16 * 20 * 4;
    const size_t smem = (size_t)stages * ab > cs ? (size_t)stages * ab : cs;
    if (smem > 227 * 1024)
        return kl_rule_not_applicable(err, "%d stages of a %d x %d block tile (k tile %d) need %zu bytes of shared memory, "
                                      "over the 227 KiB a block can have", stages, bm, bn, bk, smem);
    if (!unit_stride(ax, g->aacc, g->k))
        return kl_rule_not_applicable(err, "stages: A's elements are not contiguous along '%s' (16-byte copies)", g->k);
    if (!unit_stride_col(ctx, ax, g))
        return kl_rule_not_applicable(err, "stages: B's elements are not contiguous along '%s' (16-byte copies)", g->col);
    tc_apply ap;
    kl_status st = tc_begin(ctx, ax, g, kernel, &ap, err);
    if (st != KL_OK) return st;
    const tc_text *T = &ap.T;
    const char *in = T->in[1], *in2 = T->in[2], *in3 = T->in[3], *in4 = T->in[4], *in5 = T->in[5], *in6 = T->in[6];
    const char *E = g->elem, *a_text = T->a_text, *b_text = T->b_text, *guard = T->guard, *fnind = T->fnind;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s%s %dx16x16 fragments of %s, f32 accumulators: %d x %d warps, each %d x %d fragments; a ring of %d "
                        "k tiles filled by cp.async\n",
                   in, MARKER, 16, tensor_core__dtype_of(E), wm, wn, fm, fn_, stages);
    for (unsigned i = 0; i < g->npro; i++) tensor_core__add_stmt_text(ctx, &sb, g->prologue[i], in);
    tc_shape_text(&sb, in, wm, wn, fm, fn_, bk, stages);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * %d;  // bytes of one stage\n", in,
                   (int)sizeof(uint16_t));
    kl_strbuf_addf(&sb, "%s// the ring of stages during the k loop, a 16 x 16 f32 tile per warp after it (%zu bytes, given at launch)\n",
                   in, smem);
    kl_strbuf_addf(&sb, "%sextern __shared__ __align__(128) unsigned char kl_smem[];\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_cs = reinterpret_cast<float (*)[16][20]>(kl_smem);\n", in);
    kl_strbuf_addf(&sb, "%sconst int kl_warp = threadIdx.x / 32, kl_lane = threadIdx.x %% 32;\n", in);
    tc_warp_text(&sb, g, in, in2);
    kl_strbuf_addf(&sb, "%s// every row of A and of B 16-byte aligned? (the indices are affine: two rows tell)\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_a_at = [&](%s %s, %s %s) { return reinterpret_cast<unsigned long long>(&%s); };\n", in, g->rtype,
                   g->row, g->ktype, g->k, a_text);
    kl_strbuf_addf(&sb, "%sauto kl_b_at = [&](%s %s, %s %s) { return reinterpret_cast<unsigned long long>(&%s); };\n", in, g->ktype,
                   g->k, g->ctype, g->col, b_text);
    kl_strbuf_addf(&sb, "%sconst bool kl_aligned = (kl_a_at(kl_m0, 0) | kl_a_at(kl_m0 + 1, 0) | kl_b_at(0, kl_n0) | "
                        "kl_b_at(1, kl_n0)) %% 16 == 0;\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_load = [&](int kl_st, %s kl_k0) {\n", in, g->ktype);
    kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem + kl_st * KL_AB);\n", in2, E);
    kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + kl_st * KL_AB + KL_BM * (KL_BK + 8) * %d);\n",
                   in2, E, (int)sizeof(uint16_t));
    kl_strbuf_addf(&sb, "%sif (kl_aligned && kl_m0 + KL_BM <= %s && kl_n0 + KL_BN <= %s && kl_k0 + KL_BK <= %s) {\n", in2, g->M,
                   g->N, g->K);
    tile_copy_loop(&sb, in3, in4, in5, in6, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k, "kl_k0",
                    g->K, a_text, E, COPY_ASYNC_UNCHECKED);
    tile_copy_loop(&sb, in3, in4, in5, in6, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col, "kl_n0",
                    g->N, b_text, E, COPY_ASYNC_UNCHECKED);
    kl_strbuf_addf(&sb, "%sreturn;\n%s}\n", in3, in2);
    tile_copy_loop(&sb, in2, in3, in4, in5, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k, "kl_k0",
                    g->K, a_text, E, COPY_ASYNC);
    tile_copy_loop(&sb, in2, in3, in4, in5, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col, "kl_n0",
                    g->N, b_text, E, COPY_ASYNC);
    kl_strbuf_addf(&sb, "%s};\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_s = 0; kl_s < KL_STAGES - 1; kl_s++) {\n", in);
    kl_strbuf_addf(&sb, "%sif ((%s)kl_s * KL_BK < %s) kl_load(kl_s, (%s)kl_s * KL_BK);\n", in2, g->ktype, g->K, g->ktype);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.commit_group;\\n\");\n%s}\n", in2, in);
    kl_strbuf_addf(&sb, "%sfor (%s kl_k0 = 0, kl_it = 0; kl_k0 < %s; kl_k0 += KL_BK, kl_it++) {\n", in, g->ktype, g->K);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.wait_group %%0;\\n\" :: \"n\"(KL_STAGES - 2));  // this tile's copies are done\n", in2);
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    kl_strbuf_addf(&sb, "%sif (kl_k0 + (KL_STAGES - 1) * KL_BK < %s) kl_load((kl_it + KL_STAGES - 1) %% KL_STAGES, kl_k0 + (KL_STAGES - 1) * KL_BK);\n",
                   in2, g->K);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.commit_group;\\n\");\n", in2);
    kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem + kl_it %% KL_STAGES * KL_AB);\n", in2, E);
    kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + kl_it %% KL_STAGES * KL_AB + KL_BM * (KL_BK + 8) * %d);\n",
                   in2, E, (int)sizeof(uint16_t));
    tc_frags_text(&sb, E, in2);
    tc_mma_text(&sb, T, true, true);
    kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.wait_group 0;\\n\");\n%s__syncthreads();\n", in, in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++) {\n", in2);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::store_matrix_sync(&kl_cs[kl_warp][0][0], kl_acc[kl_i][kl_j], 20, nvcuda::wmma::mem_row_major);\n",
                   in3);
    kl_strbuf_addf(&sb, "%s__syncwarp();\n", in3);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = kl_lane; kl_e < 256; kl_e += 32) {\n", in3);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_m0 + kl_wm + 16 * kl_i + kl_e / 16;\n", in4, g->rtype, g->row);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_n0 + kl_wn + 16 * kl_j + kl_e %% 16;\n", in4, g->ctype, g->col);
    epilogue_store(ctx, &sb, g, guard, "kl_cs[kl_warp][kl_e / 16][kl_e % 16]", in4, in5);
    kl_strbuf_addf(&sb, "%s}\n%s__syncwarp();\n%s}\n%s}", in3, in3, in2, fnind);
    return tc_finish(ctx, g, &ap, &sb, bm, bn, threads, smem, out, err);
}

