/* smem-tile: the GEMM dot-product loop ↔ shared-memory tiles of A and B (apply and remove; smem_tile.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/smem_tile.h"
#include "util/util.h"

#define NAME "smem-tile"

/* ---- apply: the GEMM dot-product loop ------------------------------------------------------------ */

#define MAXC 16


void smem_tile__ga_release(smem_tile__ga *g)
{
    free(g->gtext[0]);
    free(g->gtext[1]);
    g->gtext[0] = g->gtext[1] = NULL;
}

/* Is the declaration safe to run in every thread: no memory read, no call but casts/conversions? */
typedef struct hoist_scan {
    const kl_rule_ctx *ctx;
    bool reads;
} hoist_scan;

/* A load or a call: a subscript not under `&`, a `*p`, a call. (`&b[j]` computes an address only.) */
static bool hoist_visit(TSNode n, void *user)
{
    hoist_scan *r = user;
    if (r->reads) return false;
    if (rt_is(n, "call_expression")) r->reads = true;
    if (rt_is(n, "pointer_expression")) {
        if (!smem_tile__text_is(r->ctx, rt_field(n, "operator"), "&")) r->reads = true;
        else if (rt_is(smem_tile__strip(rt_field(n, "argument")), "subscript_expression")) {
            /* &p[i]: the address; its index may still read */
            TSNode s = smem_tile__strip(rt_field(n, "argument"));
            kl_ast_walk(rt_field(s, "indices"), hoist_visit, r);
            return false;
        }
    }
    if (rt_is(n, "subscript_expression")) r->reads = true;
    return !r->reads;
}

/* A declaration of one variable whose value reads memory but calls nothing and assigns nothing
 * (`float acc = bias[o];`): it may run guarded by a condition in threads that must not read. */
typedef struct guard_scan {
    bool bad;
} guard_scan;

static bool guard_visit(TSNode n, void *user)
{
    guard_scan *g = user;
    if (rt_is(n, "call_expression") || rt_is(n, "assignment_expression") || rt_is(n, "update_expression") ||
        rt_is(n, "lambda_expression"))
        g->bad = true;
    return !g->bad;
}

static bool guardable(const kl_rule_ctx *ctx, TSNode d)
{
    if (!rt_is(d, "declaration")) return false;
    char ty[512];
    smem_tile__squeezed(ctx, d, ty, sizeof ty);
    if (strstr(ty, "__shared__") || strstr(ty, "static")) return false;
    TSNode decls[2];
    if (rt_declarators(d, decls, 2) != 1 || !rt_is(decls[0], "init_declarator") ||
        !rt_is(rt_field(decls[0], "declarator"), "identifier"))
        return false;
    TSNode v = rt_field(decls[0], "value");
    if (ts_node_is_null(v) || rt_is(v, "initializer_list") || rt_is(v, "argument_list")) return false;
    guard_scan g = {false};
    kl_ast_walk(v, guard_visit, &g);
    return !g.bad;
}

bool smem_tile__hoistable(const kl_rule_ctx *ctx, TSNode d)
{
    if (!rt_is(d, "declaration")) return false;
    char ty[512];
    smem_tile__squeezed(ctx, d, ty, sizeof ty);
    if (strstr(ty, "__shared__") || strstr(ty, "static")) return false;
    hoist_scan r = {ctx, false};
    kl_ast_walk(d, hoist_visit, &r);
    return !r.reads;
}

/* Where a loop that is to get barriers sits: at the kernel's top level ('N'), after an early
 * `if (…) return;` ('R', guard = that if), or as the only body of the output guard
 * `if (…) { … }` ('I', guard = that if); the statements before it that move with the guard
 * (hoistable ones only) into pre. Every thread must reach the barriers, so no other return
 * may come before the loop. False with the reason in why. */

bool smem_tile__loop_placement(const kl_rule_ctx *ctx, const char *src, TSNode fn, TSNode loop, smem_tile__placement *pl,
                           char *why, size_t wsize)
{
#define PWHY(...) (kl_snprintf(why, wsize, __VA_ARGS__), false)
    unsigned ln = kl_ast_line(loop);
    TSNode fbody = kl_ast_function_body(fn);
    TSNode par = ts_node_parent(loop);
    memset(pl, 0, sizeof *pl);
    if (ts_node_eq(par, fbody)) {
        pl->form = 'N';
        for (TSNode q = rt_prev_stmt(loop); !ts_node_is_null(q); q = rt_prev_stmt(q)) {
            if (smem_tile__early_return(q)) {
                if (pl->form == 'R') return PWHY("%s:%u: two early returns before the loop", src, kl_ast_line(q));
                pl->form = 'R';
                pl->guard = q;
            } else if (smem_tile__count_type(q, "return_statement", NULL) || smem_tile__count_type(q, "goto_statement", NULL))
                return PWHY("%s:%u: a return before the loop would skip the barriers", src, kl_ast_line(q));
        }
        if (pl->form == 'R')
            for (TSNode q = rt_next_stmt(pl->guard); !ts_node_eq(q, loop); q = rt_next_stmt(q)) {
                bool guard = !smem_tile__hoistable(ctx, q);
                if (guard && !guardable(ctx, q))
                    return PWHY("%s:%u: the statement between the early return and the loop reads memory or calls "
                                "a function: it cannot run in the threads that returned", src, kl_ast_line(q));
                if (pl->npre < 32) {
                    pl->guarded[pl->npre] = guard;
                    pl->pre[pl->npre++] = q;
                }
            }
    } else if (rt_is(par, "compound_statement") && rt_is(ts_node_parent(par), "if_statement") &&
               ts_node_eq(ts_node_parent(ts_node_parent(par)), fbody) &&
               ts_node_is_null(rt_field(ts_node_parent(par), "alternative"))) {
        pl->form = 'I';
        pl->guard = ts_node_parent(par);
        for (TSNode q = rt_prev_stmt(pl->guard); !ts_node_is_null(q); q = rt_prev_stmt(q))
            if (smem_tile__count_type(q, "return_statement", NULL) || smem_tile__count_type(q, "goto_statement", NULL))
                return PWHY("%s:%u: a return before the loop would skip the barriers", src, kl_ast_line(q));
        for (uint32_t i = 0; i < ts_node_named_child_count(par); i++) {
            TSNode q = ts_node_named_child(par, i);
            if (ts_node_eq(q, loop)) break;
            if (rt_is(q, "comment")) continue;
            if (!smem_tile__hoistable(ctx, q))
                return PWHY("%s:%u: the statement before the loop reads memory or calls a function: it cannot move "
                            "out of the guard", src, kl_ast_line(q));
            if (pl->npre < 32) pl->pre[pl->npre++] = q;
        }
        if (rt_line_end(ctx, ts_node_start_byte(par)) > ts_node_start_byte(ts_node_named_child(par, 0)) ||
            !rt_line_blank_before(ctx, ts_node_end_byte(par) - 1))
            return PWHY("%s:%u: the guard and the loop are not laid out one statement a line", src, ln);
    } else
        return PWHY("%s:%u: the loop is not at the kernel's top level nor directly inside its output guard (a "
                    "barrier would sit in divergent control flow)", src, ln);
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(loop)))
        return PWHY("%s:%u: the loop does not start its line", src, ln);
    for (unsigned i = 0; i < pl->npre; i++)
        if (!kl_rules_starts_line(ctx, ts_node_start_byte(pl->pre[i])))
            return PWHY("%s:%u: the statements are not one a line", src, kl_ast_line(pl->pre[i]));
    return true;
#undef PWHY
}

typedef struct sub_scan {
    const kl_rule_ctx *ctx;
    TSNode subs[16];
    unsigned n;
} sub_scan;

static bool sub_visit(TSNode n, void *user)
{
    sub_scan *s = user;
    if (rt_is(n, "subscript_expression")) {
        if (s->n < 16) s->subs[s->n] = n;
        s->n++;
        return false;
    }
    return true;
}

bool smem_tile__analyse_apply(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode loop, smem_tile__ga *g)
{
    memset(g, 0, sizeof *g);
    g->fn = fn;
    g->loop = loop;
    int li = kl_affine_loop_index(ax, loop);
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(loop);
#define WHY(...) (kl_snprintf(g->why, sizeof g->why, __VA_ARGS__), false)
    if (li < 0 || !rt_is(loop, "for_statement")) return WHY("%s:%u: not a for loop", src, ln);
    const kl_ax_loop *L = kl_affine_loop(ax, (unsigned)li);
    g->L = L;
    if (!L->var || !L->cmp || strcmp(L->cmp, "<") || !L->step_is_int || L->step_int != 1 || !L->start || !L->bound)
        return WHY("%s:%u: the loop is not `for (T k = S; k < K; k++)`", src, ln);
    if (L->parent >= 0) return WHY("%s:%u: the loop is nested in another loop", src, ln);
    TSNode init = rt_field(loop, "initializer");
    if (!rt_is(init, "declaration")) return WHY("%s:%u: the loop does not declare its variable", src, ln);
    smem_tile__squeezed(ctx, rt_field(init, "type"), g->type, sizeof g->type);
    if (!strcmp(g->type, "unsigned")) kl_snprintf(g->type, sizeof g->type, "unsigned");
    /* the raw type text (keeps `size_t`, `unsigned int`) */
    {
        TSNode ty = rt_field(init, "type");
        kl_snprintf(g->type, sizeof g->type, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                    ctx->text + ts_node_start_byte(ty));
    }
    g->body = rt_field(loop, "body");
    /* the body: `acc += X * Y;` statements */
    TSNode stmts[16];
    unsigned ns = 0;
    if (rt_is(g->body, "compound_statement")) {
        for (uint32_t i = 0; i < ts_node_named_child_count(g->body); i++) {
            TSNode s = ts_node_named_child(g->body, i);
            if (rt_is(s, "comment")) continue;
            if (ns < 16) stmts[ns] = s;
            ns++;
        }
    } else stmts[ns++] = g->body;
    if (!ns || ns > 16) return WHY("%s:%u: the loop body is not a few accumulations", src, ln);
    sub_scan ss = {.ctx = ctx};
    for (unsigned i = 0; i < ns; i++) {
        TSNode e = ts_node_named_child(stmts[i], 0);
        char op[8] = "";
        if (rt_is(e, "assignment_expression")) {
            TSNode o = rt_field(e, "operator");
            kl_snprintf(op, sizeof op, "%.*s", (int)(ts_node_end_byte(o) - ts_node_start_byte(o)), ctx->text + ts_node_start_byte(o));
        }
        if (!rt_is(stmts[i], "expression_statement") || strcmp(op, "+=") || !rt_is(rt_field(e, "left"), "identifier"))
            return WHY("%s:%u: the loop body is not `acc += X * Y` accumulations into locals", src, kl_ast_line(stmts[i]));
        char b[8];
        if (strcmp(smem_tile__binop(ctx, smem_tile__strip(rt_field(e, "right")), b, sizeof b), "*"))
            return WHY("%s:%u: the accumulated value is not a product (a zero-padded tile adds 0*0 terms, which only a "
                       "product of the operands keeps exact)", src, kl_ast_line(stmts[i]));
        kl_ast_walk(rt_field(e, "right"), sub_visit, &ss);
    }
    if (smem_tile__count_type(g->body, "call_expression", NULL) > 2 * ns + 2 && 0) return false;
    /* the operands: subscripts varying along k */
    unsigned nvar = 0;
    for (unsigned i = 0; i < ss.n && i < 16; i++) {
        TSNode s = ss.subs[i];
        TSNode base = rt_field(s, "argument"), ix = rt_field(s, "indices");
        if (!rt_is(base, "identifier") || ts_node_named_child_count(ix) != 1)
            return WHY("%s:%u: '%.*s' is not a 1-D subscript of a pointer", src, kl_ast_line(s),
                       (int)(ts_node_end_byte(s) - ts_node_start_byte(s)), ctx->text + ts_node_start_byte(s));
        TSNode index = ts_node_named_child(ix, 0);
        if (!smem_tile__uses_of(ctx, index, L->var)) continue;
        if (nvar >= 2) return WHY("%s:%u: more than two operands vary along '%s'", src, kl_ast_line(s), L->var);
        g->op[nvar] = s;
        g->idx[nvar] = index;
        nvar++;
    }
    if (nvar != 2) return WHY("%s:%u: %u operand(s) vary along '%s'; a GEMM-like loop reads two", src, ln, nvar, L->var);
    /* k only inside the operands' indices */
    unsigned inside = smem_tile__uses_of(ctx, g->idx[0], L->var) + smem_tile__uses_of(ctx, g->idx[1], L->var);
    if (smem_tile__uses_of(ctx, g->body, L->var) != inside)
        return WHY("%s:%u: '%s' is used outside the operands' indices", src, ln, L->var);
    /* which operand is the row one (no threadIdx.x) and which the column one (no threadIdx.y) */
    int dx[2], dy[2], dz[2];
    for (int i = 0; i < 2; i++) {
        dx[i] = smem_tile__depends(ax, ctx, g->idx[i], "threadIdx.x");
        dy[i] = smem_tile__depends(ax, ctx, g->idx[i], "threadIdx.y");
        dz[i] = smem_tile__depends(ax, ctx, g->idx[i], "threadIdx.z");
        if (dx[i] < 0 || dy[i] < 0 || dz[i] < 0) {
            kl_affine a = {0};
            kl_affine_of(ax, g->idx[i], &a);
            const char *q = a.why ? strstr(a.why, "is not affine: '") : NULL;
            if (q && (!strncmp(q + 16, "/' of an index", 14) || !strncmp(q + 16, "%' of an index", 14)))
                /* `row = idx / n, col = idx % n`, `threadIdx.x / BLOCK_N`: a linearized grid or block */
                kl_snprintf(g->why, sizeof g->why,
                            "%s:%u: the output's row and column come from a linear index split by '/' and '%%' "
                            "(%.*s in the index of '%.*s'): smem-tile shares tiles between the rows of threadIdx.y and "
                            "the columns of threadIdx.x of a square 2-D block, which this launch does not have (a 2-D "
                            "launch, rows from threadIdx.y and columns from threadIdx.x, would be tiled)",
                            src, kl_ast_line(g->op[i]), (int)(q - a.why) - 1, a.why,
                            (int)(ts_node_end_byte(rt_field(g->op[i], "argument")) -
                                  ts_node_start_byte(rt_field(g->op[i], "argument"))),
                            ctx->text + ts_node_start_byte(rt_field(g->op[i], "argument")));
            else
                kl_snprintf(g->why, sizeof g->why, "%s:%u: the index of '%.*s' is not affine (%s)", src,
                            kl_ast_line(g->op[i]), (int)(ts_node_end_byte(g->op[i]) - ts_node_start_byte(g->op[i])),
                            ctx->text + ts_node_start_byte(g->op[i]), a.why ? a.why : "unknown");
            kl_affine_release(&a);
            return false;
        }
        if (dz[i]) return WHY("%s:%u: the operand depends on threadIdx.z", src, kl_ast_line(g->op[i]));
    }
    if (dx[0] && !dx[1]) {
        TSNode t = g->op[0];
        g->op[0] = g->op[1], g->op[1] = t;
        t = g->idx[0];
        g->idx[0] = g->idx[1], g->idx[1] = t;
        int u = dy[0];
        dy[0] = dy[1], dy[1] = u;
        u = dx[0];
        dx[0] = dx[1], dx[1] = u;
    }
    if (dx[0]) return WHY("%s:%u: both operands depend on threadIdx.x: no row of the block shares one", src, ln);
    if (dy[1]) return WHY("%s:%u: the operand '%.*s' depends on both threadIdx.x and threadIdx.y: the threads of a block "
                          "share no tile of it", src, kl_ast_line(g->op[1]),
                          (int)(ts_node_end_byte(g->op[1]) - ts_node_start_byte(g->op[1])), ctx->text + ts_node_start_byte(g->op[1]));
    for (int i = 0; i < 2; i++) {
        TSNode base = rt_field(g->op[i], "argument");
        uint32_t a = ts_node_start_byte(base), b = ts_node_end_byte(base);
        kl_snprintf(g->arr[i], sizeof g->arr[i], "%.*s", (int)(b - a), ctx->text + a);
        if (!smem_tile__elem_of(ctx, ax, fn, g->arr[i], g->elem[i], sizeof g->elem[i]))
            return WHY("%s:%u: the element type of '%s' is unknown", src, kl_ast_line(g->op[i]), g->arr[i]);
    }
    /* the structure: top level, inside an if guard, or after an early return */
    smem_tile__placement pl;
    if (!smem_tile__loop_placement(ctx, src, fn, loop, &pl, g->why, sizeof g->why)) return false;
    g->form = pl.form, g->guard = pl.guard, g->npre = pl.npre;
    memcpy(g->pre, pl.pre, sizeof pl.pre);
    memcpy(g->guarded, pl.guarded, sizeof pl.guarded);
    /* the load guards from the output guard */
    kl_strbuf gs[2] = {KL_STRBUF_INIT, KL_STRBUF_INIT};
    if (g->form != 'N') {
        TSNode c = smem_tile__if_cond(g->guard);
        TSNode parts[MAXC];
        unsigned np = 0;
        smem_tile__split_on(ctx, c, g->form == 'I' ? "&&" : "||", parts, &np, MAXC);
        if (np > MAXC) return WHY("%s:%u: the guard has too many conditions", src, kl_ast_line(g->guard));
        for (unsigned i = 0; i < np; i++) {
            int px = smem_tile__depends(ax, ctx, parts[i], "threadIdx.x"), py = smem_tile__depends(ax, ctx, parts[i], "threadIdx.y");
            if (px < 0 || py < 0 || (px && py)) {
                kl_snprintf(g->why, sizeof g->why,
                            "%s:%u: the guard condition '%.*s' %s: it bounds neither operand's loads", src,
                            kl_ast_line(parts[i]), (int)(ts_node_end_byte(parts[i]) - ts_node_start_byte(parts[i])),
                            ctx->text + ts_node_start_byte(parts[i]),
                            px < 0 || py < 0 ? "is not affine in the thread indices" : "depends on both threadIdx.x and threadIdx.y");
                kl_strbuf_release(&gs[0]);
                kl_strbuf_release(&gs[1]);
                return false;
            }
            char *t = g->form == 'I' ? rt_text(ctx, smem_tile__strip(parts[i])) : smem_tile__negate(ctx, parts[i]);
            if (!t) break;
            if (!px) kl_strbuf_addf(&gs[0], "%s%s", gs[0].len ? " && " : "", t);
            if (!py) kl_strbuf_addf(&gs[1], "%s%s", gs[1].len ? " && " : "", t);
            free(t);
        }
    }
    g->gtext[0] = kl_strbuf_detach(&gs[0], NULL);
    g->gtext[1] = kl_strbuf_detach(&gs[1], NULL);
    if (!g->gtext[0]) g->gtext[0] = kl_strdup("");
    if (!g->gtext[1]) g->gtext[1] = kl_strdup("");
    char bwhy[300], btext[3][64];
    if (!smem_tile__launch_block(ctx, kname, g->dim, btext, bwhy, sizeof bwhy)) return WHY("%s: %s", src, bwhy);
    kl_snprintf(g->tile_text, sizeof g->tile_text, "%s", btext[0]);
    if (g->dim[0] != g->dim[1] || g->dim[2] != 1 || (g->dim[0] != 16 && g->dim[0] != 32 && g->dim[0] != 8))
        return WHY("%s: kernel '%s' is launched with a %lldx%lldx%lld block; tiles need a square 8, 16 or 32 block "
                   "(change the block size first)", src, kname, (long long)g->dim[0], (long long)g->dim[1],
                   (long long)g->dim[2]);
#undef WHY
    return true;
}

kl_status smem_tile__apply_gemm(const kl_rule_ctx *ctx, const smem_tile__ga *g, int64_t tile, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (tile != g->dim[0])
        return kl_rule_not_applicable(err, "%s:%u: tile %lld differs from the %lldx%lld block; change the block size "
                                      "first (block-size)", src, kl_ast_line(g->loop), (long long)tile,
                                      (long long)g->dim[0], (long long)g->dim[1]);
    const char *k = g->L->var;
    char k0[64], kk[64], as[80], bs[80], base[80];
    kl_snprintf(base, sizeof base, "%s0", k);
    smem_tile__fresh_name(ctx, g->fn, base, k0, sizeof k0);
    kl_snprintf(base, sizeof base, "%s%s", k, k);
    smem_tile__fresh_name(ctx, g->fn, base, kk, sizeof kk);
    kl_snprintf(base, sizeof base, "%ss", g->arr[0]);
    smem_tile__fresh_name(ctx, g->fn, base, as, sizeof as);
    kl_snprintf(base, sizeof base, "%ss", g->arr[1]);
    smem_tile__fresh_name(ctx, g->fn, base, bs, sizeof bs);
    if (!strcmp(as, bs)) kl_snprintf(bs, sizeof bs, "%s_b", as);
    const char *T = g->tile_text;
    char ind[64], lind[64], unit[64];
    TSNode anchor = g->form == 'N' ? g->loop : g->guard;
    rt_indent_of(ctx, ts_node_start_byte(anchor), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(g->loop), lind, sizeof lind);
    if (g->form == 'I' && strlen(lind) > strlen(ind)) kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    else kl_snprintf(unit, sizeof unit, "    ");
    kl_status st = KL_OK;
    char *ld[2] = {NULL, NULL}, *body = NULL, *pre = NULL, *guard_text = NULL, *loop_text = NULL;
    /* the loads: k -> (k0 + threadIdx.x) in A's index, (k0 + threadIdx.y) in B's */
    for (int i = 0; i < 2; i++) {
        char sub[160], zero[96];
        kl_snprintf(sub, sizeof sub, "(%s + threadIdx.%c)", k0, i == 0 ? 'x' : 'y');
        smem_tile__rep reps[16];
        unsigned nr = 0;
        TSNode stack[64];
        unsigned sp = 0;
        stack[sp++] = g->idx[i];
        while (sp) {
            TSNode n = stack[--sp];
            if (rt_is(n, "identifier") && smem_tile__text_is(ctx, n, k)) {
                if (nr < 16) reps[nr++] = (smem_tile__rep){ts_node_start_byte(n), ts_node_end_byte(n), sub};
                continue;
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 64; c++) stack[sp++] = ts_node_named_child(n, c);
        }
        char *ix = smem_tile__splice(ctx, ts_node_start_byte(g->idx[i]), ts_node_end_byte(g->idx[i]), reps, nr);
        if (!ix) goto oom;
        smem_tile__zero_of(g->elem[i], zero, sizeof zero);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s%s[threadIdx.y][threadIdx.x] = ", i == 0 ? "" : "", i == 0 ? as : bs);
        if (i == 0) kl_strbuf_addf(&sb, "%s%s%s + threadIdx.x < %s", g->gtext[0], g->gtext[0][0] ? " && " : "", k0, g->L->bound);
        else kl_strbuf_addf(&sb, "%s + threadIdx.y < %s%s%s", k0, g->L->bound, g->gtext[1][0] ? " && " : "", g->gtext[1]);
        kl_strbuf_addf(&sb, " ? %s[%s] : %s;", g->arr[i], ix, zero);
        free(ix);
        ld[i] = kl_strbuf_detach(&sb, NULL);
        if (!ld[i]) goto oom;
    }
    /* the inner loop's body: the operands read from the tiles */
    {
        char ra[200], rbuf[200];
        kl_snprintf(ra, sizeof ra, "%s[threadIdx.y][%s]", as, kk);
        kl_snprintf(rbuf, sizeof rbuf, "%s[%s][threadIdx.x]", bs, kk);
        smem_tile__rep reps[2] = {{ts_node_start_byte(g->op[0]), ts_node_end_byte(g->op[0]), ra},
                       {ts_node_start_byte(g->op[1]), ts_node_end_byte(g->op[1]), rbuf}};
        char *raw = smem_tile__splice(ctx, ts_node_start_byte(g->body), ts_node_end_byte(g->body), reps, 2);
        if (!raw) goto oom;
        int delta = (int)(strlen(ind) + strlen(unit)) - (int)strlen(lind);
        body = smem_tile__reindent_node_text(lind, raw, delta);
        free(raw);
        if (!body) return kl_rule_not_applicable(err, "%s:%u: the loop body is indented with tabs", src, kl_ast_line(g->loop));
    }
    /* the pre statements, moved out of the guard */
    if (g->form == 'I' && g->npre) {
        uint32_t a = rt_line_start(ctx, ts_node_start_byte(g->pre[0]));
        uint32_t b = rt_line_end(ctx, ts_node_end_byte(g->pre[g->npre - 1]) - 1);
        pre = rt_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) return kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs", src,
                                                kl_ast_line(g->pre[0]));
    }
    {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "for (%s %s = %s; %s < %s; %s += %s) {\n", g->type, k0, g->L->start, k0, g->L->bound, k0, T);
        kl_strbuf_addf(&sb, "%s%s%s\n%s%s%s\n", ind, unit, ld[0], ind, unit, ld[1]);
        kl_strbuf_addf(&sb, "%s%s__syncthreads();\n", ind, unit);
        kl_strbuf_addf(&sb, "%s%sfor (%s %s = 0; %s < %s; %s++) %s\n", ind, unit, g->type, kk, kk, T, kk, body);
        kl_strbuf_addf(&sb, "%s%s__syncthreads();\n%s}", ind, unit, ind);
        loop_text = kl_strbuf_detach(&sb, NULL);
        if (!loop_text) goto oom;
    }
    {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s// " NAME ": %s x %s tiles of %s and %s in shared memory\n", ind, T, T, g->arr[0], g->arr[1]);
        kl_strbuf_addf(&sb, "%s__shared__ %s %s[%s][%s];\n", ind, g->elem[0], as, T, T);
        kl_strbuf_addf(&sb, "%s__shared__ %s %s[%s][%s];\n", ind, g->elem[1], bs, T, T);
        char *decls = kl_strbuf_detach(&sb, NULL);
        if (!decls) goto oom;
        if (g->form == 'I') {
            /* decls, pre and the tile loop before the guard; pre and the loop leave it */
            st = kl_edits_addf(out, rt_line_start(ctx, ts_node_start_byte(g->guard)),
                               rt_line_start(ctx, ts_node_start_byte(g->guard)), "%s%s%s%s\n", decls, pre ? pre : "", ind,
                               loop_text);
            uint32_t a = rt_line_start(ctx, ts_node_start_byte(g->npre ? g->pre[0] : g->loop));
            uint32_t b = rt_line_end(ctx, ts_node_end_byte(g->loop) - 1);
            if (st == KL_OK) st = kl_edits_add(out, a, b, "");
        } else if (g->form == 'R') {
            uint32_t a = rt_line_start(ctx, ts_node_start_byte(g->guard));
            uint32_t b = rt_line_end(ctx, ts_node_end_byte(g->guard) - 1);
            st = kl_edits_add(out, a, b, decls);
            guard_text = rt_text(ctx, g->guard);
            /* a value read from memory in the statements before the loop: not in the threads that
             * return after it (they compute nothing that is stored) */
            for (unsigned i = 0; i < g->npre && st == KL_OK; i++) {
                if (!g->guarded[i]) continue;
                TSNode one[1];
                rt_declarators(g->pre[i], one, 1);
                TSNode v = rt_field(one[0], "value"), ty = rt_field(g->pre[i], "type");
                char *tt = rt_text(ctx, ty), *ct = rt_text(ctx, smem_tile__if_cond(g->guard));
                char zero[96];
                smem_tile__zero_of(tt ? tt : "", zero, sizeof zero);
                bool atom = rt_is(v, "subscript_expression") || rt_is(v, "identifier") ||
                            rt_is(v, "field_expression") || rt_is(v, "parenthesized_expression") ||
                            rt_is(v, "pointer_expression");
                TSNode cs = smem_tile__if_cond(g->guard);
                bool cparen = rt_is(cs, "parenthesized_expression") || rt_is(cs, "condition_clause");
                if (!tt || !ct) st = KL_ERR_NOMEM;
                else
                    st = kl_edits_addf(out, ts_node_start_byte(v), ts_node_start_byte(v), "%s%s%s ? %s : %s",
                                       cparen ? "" : "(", ct, cparen ? "" : ")", zero, atom ? "" : "(");
                if (st == KL_OK && !atom) st = kl_edits_add(out, ts_node_end_byte(v), ts_node_end_byte(v), ")");
                free(tt);
                free(ct);
            }
            if (st == KL_OK && guard_text)
                st = kl_edits_addf(out, ts_node_start_byte(g->loop), ts_node_end_byte(g->loop), "%s\n%s%s", loop_text, ind,
                                   guard_text);
        } else {
            st = kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(g->loop)), rt_line_start(ctx, ts_node_start_byte(g->loop)),
                              decls);
            if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(g->loop), ts_node_end_byte(g->loop), loop_text);
        }
        free(decls);
    }
    goto done;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    free(ld[0]);
    free(ld[1]);
    free(body);
    free(pre);
    free(guard_text);
    free(loop_text);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- present: GEMM tiles -------------------------------------------------------------------------- */



/* The thread index a subscript is exactly: 'x' / 'y', 0 otherwise. */
static int thread_index(kl_affine_ctx *ax, TSNode n)
{
    kl_affine a = {0};
    if (kl_affine_of(ax, n, &a) != KL_OK) return 0;
    int r = 0;
    if (a.ok && a.nterms == 1 && a.const_is_int && a.const_int == 0 && a.terms[0].coef_is_int && a.terms[0].coef_int == 1) {
        if (!strcmp(a.terms[0].var, "threadIdx.x")) r = 'x';
        else if (!strcmp(a.terms[0].var, "threadIdx.y")) r = 'y';
    }
    kl_affine_release(&a);
    return r;
}

bool smem_tile__zero_value(const kl_rule_ctx *ctx, TSNode v)
{
    v = smem_tile__strip(v);
    if (rt_is(v, "number_literal")) {
        char t[32];
        smem_tile__squeezed(ctx, v, t, sizeof t);
        for (char *p = t; *p; p++)
            if (*p != '0' && *p != '.' && *p != 'f' && *p != 'F') return false;
        return true;
    }
    if (rt_is(v, "call_expression")) {
        TSNode args = rt_field(v, "arguments");
        return ts_node_named_child_count(args) == 1 && smem_tile__zero_value(ctx, ts_node_named_child(args, 0));
    }
    if (rt_is(v, "cast_expression")) return smem_tile__zero_value(ctx, rt_field(v, "value"));
    return false;
}

/* Is the statement a guarded load into a 2-D shared subscript? */
static bool parse_load(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, smem_tile__tload *l)
{
    memset(l, 0, sizeof *l);
    l->stmt = st;
    TSNode asg = {0};
    if (rt_is(st, "expression_statement")) {
        asg = ts_node_named_child(st, 0);
        if (!rt_is(asg, "assignment_expression") || !smem_tile__text_is(ctx, rt_field(asg, "operator"), "=")) return false;
        TSNode r = smem_tile__strip(rt_field(asg, "right"));
        if (rt_is(r, "conditional_expression")) {
            if (!smem_tile__zero_value(ctx, rt_field(r, "alternative"))) return false;
            l->cond = rt_field(r, "condition");
            l->value = smem_tile__strip(rt_field(r, "consequence"));
        } else l->value = r;
    } else if (rt_is(st, "if_statement")) {
        TSNode c = rt_field(st, "consequence"), e = rt_field(st, "alternative");
        if (rt_is(e, "else_clause")) e = ts_node_named_child(e, 0);
        if (rt_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
        if (rt_is(e, "compound_statement") && ts_node_named_child_count(e) == 1) e = ts_node_named_child(e, 0);
        if (!rt_is(c, "expression_statement") || !rt_is(e, "expression_statement")) return false;
        asg = ts_node_named_child(c, 0);
        TSNode a2 = ts_node_named_child(e, 0);
        if (!rt_is(asg, "assignment_expression") || !rt_is(a2, "assignment_expression")) return false;
        char t1[256], t2[256];
        smem_tile__squeezed(ctx, rt_field(asg, "left"), t1, sizeof t1);
        smem_tile__squeezed(ctx, rt_field(a2, "left"), t2, sizeof t2);
        if (strcmp(t1, t2) || !smem_tile__zero_value(ctx, rt_field(a2, "right"))) return false;
        l->cond = smem_tile__if_cond(st);
        l->value = smem_tile__strip(rt_field(asg, "right"));
    } else return false;
    TSNode t = rt_field(asg, "left");
    if (!rt_is(t, "subscript_expression")) return false;
    TSNode inner = rt_field(t, "argument");
    if (!rt_is(inner, "subscript_expression") || !rt_is(rt_field(inner, "argument"), "identifier")) return false;
    l->target = t;
    l->sub[0] = kl_ast_subscript_index(inner);
    l->sub[1] = kl_ast_subscript_index(t);
    uint32_t a = ts_node_start_byte(rt_field(inner, "argument")), b = ts_node_end_byte(rt_field(inner, "argument"));
    kl_snprintf(l->arr, sizeof l->arr, "%.*s", (int)(b - a), ctx->text + a);
    for (int i = 0; i < 2; i++) l->thr[i] = thread_index(ax, l->sub[i]);
    if (!l->thr[0] || !l->thr[1] || l->thr[0] == l->thr[1]) return false;
    if (!rt_is(l->value, "subscript_expression") || !rt_is(rt_field(l->value, "argument"), "identifier")) return false;
    TSNode ix = rt_field(l->value, "indices");
    if (ts_node_named_child_count(ix) != 1) return false;
    l->gidx = ts_node_named_child(ix, 0);
    a = ts_node_start_byte(rt_field(l->value, "argument")), b = ts_node_end_byte(rt_field(l->value, "argument"));
    kl_snprintf(l->garr, sizeof l->garr, "%.*s", (int)(b - a), ctx->text + a);
    return true;
}

static bool is_shared_decl_of(const kl_rule_ctx *ctx, TSNode d, const char *name, unsigned *ndecls)
{
    if (!rt_is(d, "declaration")) return false;
    bool shared = false;
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode ch = ts_node_named_child(d, i);
        if ((rt_is(ch, "type_qualifier") || rt_is(ch, "storage_class_specifier") || rt_is(ch, "attribute_specifier")) &&
            smem_tile__text_is(ctx, ch, "__shared__"))
            shared = true;
    }
    if (!shared) {
        char t[256];
        smem_tile__squeezed(ctx, d, t, sizeof t);
        if (strncmp(t, "__shared__", 10)) return false;
    }
    bool found = false;
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode ch = ts_node_named_child(d, i);
        if (!rt_is(ch, "array_declarator") && !rt_is(ch, "init_declarator")) continue;
        n++;
        if (smem_tile__text_is(ctx, kl_ast_declarator_name(ch), name)) found = true;
    }
    *ndecls = n;
    return found;
}

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl;
    unsigned ndecls;
} decl_find;

static bool decl_find_visit(TSNode n, void *user)
{
    decl_find *d = user;
    unsigned k;
    if (ts_node_is_null(d->decl) && is_shared_decl_of(d->ctx, n, d->name, &k)) {
        d->decl = n;
        d->ndecls = k;
    }
    return ts_node_is_null(d->decl);
}

/* The node(s) of e holding the k part (affine equal to the load's k coordinate): the smallest
 * subtree holding every use of the tile variable, which must be c*t + thread. */
static bool affine_equal(kl_affine_ctx *ax, TSNode a, const kl_affine *want)
{
    kl_affine x = {0};
    if (kl_affine_of(ax, a, &x) != KL_OK || !x.ok) {
        kl_affine_release(&x);
        return false;
    }
    char *s1 = kl_affine_to_text(&x), *s2 = kl_affine_to_text(want);
    bool eq = s1 && s2 && !strcmp(s1, s2);
    free(s1);
    free(s2);
    kl_affine_release(&x);
    return eq;
}

typedef struct kpart {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const kl_affine *want;
    const char *tvar;
    TSNode found[8];
    unsigned n;
} kpart;

static bool kpart_visit(TSNode n, void *user)
{
    kpart *k = user;
    if (!rt_count_ident(k->ctx, n, k->tvar)) return false;
    if (rt_is(n, "parenthesized_expression") || rt_is(n, "binary_expression")) {
        if (affine_equal(k->ax, n, k->want)) {
            if (k->n < 8) k->found[k->n] = n;
            k->n++;
            return false;
        }
    }
    return true;
}

/* The replacements in e turning its k part into `kname`; false with why when e has none. For a
 * `+` chain holding c*t and the thread index as separate terms, the chain is rebuilt. */
static bool k_replace(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode e, const kl_affine *want, const char *tvar,
                      const char *thr_var, const char *kname, smem_tile__rep *reps, unsigned *nr, char **owned)
{
    kpart kp = {.ctx = ctx, .ax = ax, .want = want, .tvar = tvar};
    kl_ast_walk(e, kpart_visit, &kp);
    *owned = NULL;
    if (kp.n && kp.n <= 8) {
        for (unsigned i = 0; i < kp.n; i++)
            reps[(*nr)++] = (smem_tile__rep){ts_node_start_byte(kp.found[i]), ts_node_end_byte(kp.found[i]), kname};
        return true;
    }
    /* a + chain: find the chain whose terms include the t part and the thread index */
    TSNode terms[16];
    unsigned nt = 0;
    smem_tile__split_on(ctx, e, "+", terms, &nt, 16);
    if (nt > 16 || nt < 2) return false;
    int ti = -1, hi = -1;
    for (unsigned i = 0; i < nt; i++) {
        int dt = smem_tile__depends(ax, ctx, terms[i], tvar);
        if (dt != 0) {
            if (ti >= 0 || dt < 0) return false;
            ti = (int)i;
        } else if (thread_index(ax, terms[i]) == thr_var[10]) {
            if (hi >= 0) return false;
            hi = (int)i;
        }
    }
    if (ti < 0 || hi < 0) return false;
    /* the two terms together must be the k coordinate */
    kl_affine a = {0}, b = {0};
    kl_affine_of(ax, terms[ti], &a);
    bool ok = a.ok;
    if (ok) {
        /* c*t alone: the want minus the thread index */
        kl_affine_of(ax, terms[hi], &b);
        char *wt = kl_affine_to_text(want), *at = kl_affine_to_text(&a);
        char expect[256];
        kl_snprintf(expect, sizeof expect, "%s + %s", at ? at : "", thr_var);
        char s1[256], s2[256];
        smem_tile__squeeze_str(expect, s1, sizeof s1);
        smem_tile__squeeze_str(wt ? wt : "", s2, sizeof s2);
        ok = !strcmp(s1, s2);
        if (!ok) {
            kl_snprintf(expect, sizeof expect, "%s + %s", thr_var, at ? at : "");
            smem_tile__squeeze_str(expect, s1, sizeof s1);
            ok = !strcmp(s1, s2);
        }
        free(wt);
        free(at);
    }
    kl_affine_release(&a);
    kl_affine_release(&b);
    if (!ok) return false;
    kl_strbuf sb = KL_STRBUF_INIT;
    bool first = true;
    for (unsigned i = 0; i < nt; i++) {
        if ((int)i == hi) continue;
        if (!first) kl_strbuf_adds(&sb, " + ");
        first = false;
        if ((int)i == ti) kl_strbuf_adds(&sb, kname);
        else kl_strbuf_add(&sb, ctx->text + ts_node_start_byte(terms[i]), ts_node_end_byte(terms[i]) - ts_node_start_byte(terms[i]));
    }
    *owned = kl_strbuf_detach(&sb, NULL);
    if (!*owned) return false;
    TSNode chain = smem_tile__strip(e);
    reps[(*nr)++] = (smem_tile__rep){ts_node_start_byte(chain), ts_node_end_byte(chain), *owned};
    return true;
}


bool smem_tile__read_visit(TSNode n, void *user)
{
    smem_tile__read_scan *r = user;
    if (rt_is(n, "subscript_expression")) {
        TSNode in = rt_field(n, "argument");
        if (rt_is(in, "subscript_expression") && rt_is(rt_field(in, "argument"), "identifier")) {
            for (int i = 0; i < 2; i++)
                if (smem_tile__text_is(r->ctx, rt_field(in, "argument"), r->arr[i])) {
                    if (r->n < 32) r->reads[r->n] = n;
                    r->n++;
                    return true;
                }
        }
    }
    return true;
}

bool smem_tile__analyse_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode tl, smem_tile__gp *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->tl = tl;
    const char *src = kl_source_name(ctx->src);
#define WHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), true)
    int ti = kl_affine_loop_index(ax, tl);
    if (ti < 0) return false;
    p->T = kl_affine_loop(ax, (unsigned)ti);
    TSNode body = rt_field(tl, "body");
    if (!rt_is(body, "compound_statement")) return false;
    TSNode st[12];
    unsigned ns = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode s = ts_node_named_child(body, i);
        if (rt_is(s, "comment") || rt_is(s, "preproc_call")) continue;
        if (ns >= 12) return false;
        st[ns++] = s;
    }
    /* loads, sync, compute loop, sync */
    if (ns != 5 || !rt_is_syncthreads(ctx, st[2]) || !rt_is_syncthreads(ctx, st[4]) || !rt_is(st[3], "for_statement"))
        return false;
    for (int i = 0; i < 2; i++)
        if (!parse_load(ctx, ax, st[i], &p->ld[i])) return false;
    if (!strcmp(p->ld[0].arr, p->ld[1].arr)) return false;
    p->cl = st[3];
    int ci = kl_affine_loop_index(ax, p->cl);
    if (ci < 0) return false;
    p->C = kl_affine_loop(ax, (unsigned)ci);
    /* from here on the shape is the tiled GEMM: say why when it cannot be undone */
    if (!p->T->var || !p->T->start || !p->T->bound || !p->T->step || !p->T->cmp || strcmp(p->T->cmp, "<"))
        return WHY("%s:%u: the tile loop is not `for (t = S; t < B; t += step)`", src, kl_ast_line(tl));
    if (!p->C->var || !p->C->start || strcmp(p->C->start, "0") || !p->C->step_is_int || p->C->step_int != 1 ||
        !p->C->trip_known || !p->C->cmp || strcmp(p->C->cmp, "<"))
        return WHY("%s:%u: the loop over the tile is not `for (kk = 0; kk < TILE; kk++)`", src, kl_ast_line(p->cl));
    int64_t tile = p->C->trip;
    TSNode init = rt_field(tl, "initializer");
    if (!rt_is(init, "declaration")) return WHY("%s:%u: the tile loop does not declare its variable", src, kl_ast_line(tl));
    TSNode ty = rt_field(init, "type");
    kl_snprintf(p->ttype, sizeof p->ttype, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                ctx->text + ts_node_start_byte(ty));
    const char *tv = p->T->var;
    /* each load: its k coordinate c*t + thread, the thread index that moves along k */
    char bound[2][256] = {"", ""};
    const char *other[2][MAXC];
    (void)other;
    for (int i = 0; i < 2; i++) {
        smem_tile__tload *l = &p->ld[i];
        int kd = -1;
        if (!ts_node_is_null(l->cond)) {
            TSNode parts[MAXC];
            unsigned np = 0;
            smem_tile__split_on(ctx, l->cond, "&&", parts, &np, MAXC);
            for (unsigned c = 0; c < np && c < MAXC; c++) {
                TSNode s = smem_tile__strip(parts[c]);
                char b[8];
                if (smem_tile__depends(ax, ctx, s, tv) == 0) continue;
                if (strcmp(smem_tile__binop(ctx, s, b, sizeof b), "<") || smem_tile__depends(ax, ctx, rt_field(s, "right"), tv) != 0)
                    return WHY("%s:%u: the load's k condition is not `k < K`", src, kl_ast_line(s));
                smem_tile__squeezed(ctx, rt_field(s, "right"), bound[i], sizeof bound[i]);
                kl_affine a = {0};
                kl_affine_of(ax, rt_field(s, "left"), &a);
                for (int d = 0; d < 2 && a.ok; d++) {
                    char thr[16];
                    kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[d]);
                    if (kl_affine_coef(&a, thr)) kd = kd == -1 ? d : -2;
                }
                kl_affine_release(&a);
            }
        }
        if (kd < 0) {
            /* no k condition: the thread index of the subscript that e moves with */
            for (int d = 0; d < 2; d++) {
                char thr[16];
                kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[d]);
                int dt = smem_tile__depends(ax, ctx, l->gidx, thr);
                int other_d = smem_tile__depends(ax, ctx, l->gidx, l->thr[!d] == 'x' ? "threadIdx.x" : "threadIdx.y");
                if (dt == 1 && other_d == 0) kd = d;
            }
        }
        if (kd < 0) return WHY("%s:%u: cannot tell which thread index of the load moves along k", src, kl_ast_line(l->stmt));
        l->kdim = kd;
    }
    if (p->ld[0].kdim == p->ld[1].kdim && p->ld[0].thr[p->ld[0].kdim] == p->ld[1].thr[p->ld[1].kdim] && 0)
        return false;
    if (strcmp(bound[0], bound[1])) return WHY("%s:%u: the two loads bound k differently", src, kl_ast_line(tl));
    /* the naive loop: k from the tile loop's start, up to the bound */
    bool k0_style = p->T->step_is_int ? p->T->step_int == tile : false;
    if (!k0_style) {
        long long sv;
        TSNode upd = rt_field(tl, "update");
        (void)upd;
        char s2[64];
        smem_tile__squeeze_str(p->T->step, s2, sizeof s2);
        if (rt_const_name(ctx, fn, s2, &sv) && sv == tile) k0_style = true;
    }
    char kbase[64];
    size_t tl_len = strlen(tv);
    if (tl_len > 1 && tv[tl_len - 1] == '0') kl_snprintf(kbase, sizeof kbase, "%.*s", (int)(tl_len - 1), tv);
    else kl_snprintf(kbase, sizeof kbase, "k");
    smem_tile__fresh_name(ctx, fn, kbase, p->kname, sizeof p->kname);
    if (k0_style) {
        char tb[256];
        smem_tile__squeeze_str(p->T->bound, tb, sizeof tb);
        if (bound[0][0] && strcmp(tb, bound[0]))
            return WHY("%s:%u: the tile loop runs to '%s' but the loads to '%s'", src, kl_ast_line(tl), p->T->bound, bound[0]);
        kl_snprintf(p->bound, sizeof p->bound, "%s", p->T->bound);
    } else if (p->T->step_is_int && p->T->step_int == 1 && !strcmp(p->T->start, "0")) {
        if (!bound[0][0]) kl_snprintf(p->bound, sizeof p->bound, "(%s) * %lld", p->T->bound, (long long)tile);
        else {
            /* t < (K + TILE - 1) / TILE */
            char want1[300], want2[300], tb[256];
            smem_tile__squeeze_str(p->T->bound, tb, sizeof tb);
            kl_snprintf(want1, sizeof want1, "(%s+%lld)/%lld", bound[0], (long long)tile - 1, (long long)tile);
            bool ok = !strcmp(tb, want1);
            for (int pass = 0; pass < 2 && !ok; pass++) {
                /* the tile size by name: (K + TILE - 1) / TILE */
                const char *slash = strrchr(tb, '/');
                long long v;
                if (!slash || !rt_const_name(ctx, fn, slash + 1, &v) || v != tile) break;
                kl_snprintf(want2, sizeof want2, "(%s+%s-1)/%s", bound[0], slash + 1, slash + 1);
                ok = !strcmp(tb, want2);
                break;
            }
            if (!ok)
                return WHY("%s:%u: the tile count '%s' is not (%s + %lld) / %lld", src, kl_ast_line(tl), p->T->bound, bound[0],
                           (long long)tile - 1, (long long)tile);
            kl_snprintf(p->bound, sizeof p->bound, "%s", bound[0]);
        }
    } else return WHY("%s:%u: the tile loop steps by '%s', not by the tile (%lld) or by 1", src, kl_ast_line(tl), p->T->step,
                      (long long)tile);
    /* the shared arrays: declared once each, used only by the loads and the compute loop */
    for (int i = 0; i < 2; i++) {
        decl_find df = {.ctx = ctx, .name = p->ld[i].arr};
        kl_ast_walk(kl_ast_function_body(fn), decl_find_visit, &df);
        if (ts_node_is_null(df.decl)) return WHY("%s: '%s' is not a __shared__ array of the kernel", src, p->ld[i].arr);
        if (i == 1 && ts_node_eq(df.decl, p->decl[0])) {
            if (df.ndecls != 2) return WHY("%s:%u: the declaration declares other arrays too", src, kl_ast_line(df.decl));
            continue;
        }
        if (df.ndecls != 1 && !(df.ndecls == 2 && i == 0))
            return WHY("%s:%u: the declaration declares other arrays too", src, kl_ast_line(df.decl));
        p->decl[p->ndecl++] = df.decl;
    }
    smem_tile__read_scan rs = {.ctx = ctx, .arr = {p->ld[0].arr, p->ld[1].arr}};
    kl_ast_walk(rt_field(p->cl, "body"), smem_tile__read_visit, &rs);
    unsigned all = smem_tile__uses_of(ctx, kl_ast_function_body(fn), p->ld[0].arr) + smem_tile__uses_of(ctx, kl_ast_function_body(fn), p->ld[1].arr);
    if (rs.n > 32 || all != rs.n + 2 + 2 + (ts_node_is_null(p->ld[0].cond) || rt_is(p->ld[0].stmt, "expression_statement") ? 0 : 1) +
                                 (ts_node_is_null(p->ld[1].cond) || rt_is(p->ld[1].stmt, "expression_statement") ? 0 : 1))
        return WHY("%s: the tiles '%s' and '%s' are used other than by the loads and the loop over the tile", src,
                   p->ld[0].arr, p->ld[1].arr);
    if (smem_tile__uses_of(ctx, rt_field(p->cl, "body"), p->C->var) != 0) {
        /* every use of kk must be a tile subscript */
        unsigned in_reads = 0;
        for (unsigned r = 0; r < rs.n; r++) in_reads += smem_tile__uses_of(ctx, rs.reads[r], p->C->var);
        if (in_reads != smem_tile__uses_of(ctx, rt_field(p->cl, "body"), p->C->var))
            return WHY("%s:%u: '%s' is used outside the tile subscripts", src, kl_ast_line(p->cl), p->C->var);
    }
    if (smem_tile__uses_of(ctx, rt_field(p->cl, "body"), tv))
        return WHY("%s:%u: the loop over the tile uses '%s'", src, kl_ast_line(p->cl), tv);
    /* where the guard went: after the tile loop */
    TSNode parts_all[2][MAXC];
    unsigned npa[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (ts_node_is_null(p->ld[i].cond)) continue;
        TSNode parts[MAXC];
        unsigned np = 0;
        smem_tile__split_on(ctx, p->ld[i].cond, "&&", parts, &np, MAXC);
        for (unsigned c = 0; c < np && c < MAXC; c++)
            if (smem_tile__depends(ax, ctx, parts[c], tv) == 0) parts_all[i][npa[i]++] = parts[c];
    }
    TSNode nx = rt_next_stmt(tl);
    p->form = 'N';
    if (npa[0] + npa[1]) {
        if (!rt_is(nx, "if_statement") || !ts_node_is_null(rt_field(nx, "alternative")))
            return WHY("%s:%u: the loads are guarded but no store guard follows the tile loop", src, kl_ast_line(tl));
        p->form = smem_tile__early_return(nx) ? 'R' : 'I';
        p->after = nx;
        TSNode gparts[MAXC];
        unsigned ng = 0;
        smem_tile__split_on(ctx, smem_tile__if_cond(nx), p->form == 'R' ? "||" : "&&", gparts, &ng, MAXC);
        if (ng > MAXC) ng = MAXC;
        for (int i = 0; i < 2; i++)
            for (unsigned c = 0; c < npa[i]; c++) {
                char want[256];
                smem_tile__squeezed(ctx, smem_tile__strip(parts_all[i][c]), want, sizeof want);
                bool found = false;
                for (unsigned g = 0; g < ng && !found; g++) {
                    char have[256];
                    if (p->form == 'R') {
                        char *t = smem_tile__negate(ctx, gparts[g]);
                        smem_tile__squeeze_str(t ? t : "", have, sizeof have);
                        free(t);
                    } else smem_tile__squeezed(ctx, smem_tile__strip(gparts[g]), have, sizeof have);
                    found = !strcmp(want, have);
                }
                if (!found)
                    return WHY("%s:%u: the load condition '%s' is not part of the guard at line %u", src,
                               kl_ast_line(parts_all[i][c]), want, kl_ast_line(nx));
            }
    }
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(tl)))
        return WHY("%s:%u: the tile loop does not start its line", src, kl_ast_line(tl));
    /* the declarations right before the tile loop that only it and later code use */
    for (TSNode s = rt_prev_stmt(tl); !ts_node_is_null(s) && p->form != 'N'; s = rt_prev_stmt(s)) {
        if (!rt_is(s, "declaration") || !smem_tile__hoistable(ctx, s) || !kl_rules_starts_line(ctx, ts_node_start_byte(s))) break;
        bool used = false, in_guard = false;
        for (uint32_t k = 0; k < ts_node_named_child_count(s); k++) {
            TSNode nm = kl_ast_declarator_name(ts_node_named_child(s, k));
            if (ts_node_is_null(nm)) continue;
            char *t = rt_text(ctx, nm);
            if (!t) break;
            if (smem_tile__uses_of(ctx, tl, t)) used = true;
            if (smem_tile__uses_of(ctx, smem_tile__if_cond(nx), t)) in_guard = true;
            free(t);
        }
        if (!used || in_guard) break;
        if (p->npre >= 32) break;
        memmove(p->pre + 1, p->pre, p->npre * sizeof *p->pre);
        p->pre[0] = s;
        p->npre++;
    }
#undef WHY
    return true;
}

/* Every use of the k thread index in the load's index must be inside its k part: checked on the
 * naive text by the affine analysis of the original (dependence outside the replaced nodes). */
typedef struct outside_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const smem_tile__rep *reps;
    unsigned nr;
    const char *thr;
    bool bad;
} outside_scan;

static bool outside_visit(TSNode n, void *user)
{
    outside_scan *o = user;
    for (unsigned i = 0; i < o->nr; i++)
        if (ts_node_start_byte(n) >= o->reps[i].a && ts_node_end_byte(n) <= o->reps[i].b) return false;
    if (rt_is(n, "call_expression")) {
        /* a macro or helper: its arguments carry the dependence (the affine analysis expands it) */
        kl_ast_walk(rt_field(n, "arguments"), outside_visit, o);
        return false;
    }
    if (rt_is(n, "identifier") || rt_is(n, "field_expression")) {
        if (smem_tile__depends(o->ax, o->ctx, n, o->thr) != 0) o->bad = true;
        return false;
    }
    return true;
}

/* The naive loop's text at indentation `ind` (the loop's own line not indented). */
static char *naive_loop(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const smem_tile__gp *p, const char *ind, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    smem_tile__read_scan rs = {.ctx = ctx, .arr = {p->ld[0].arr, p->ld[1].arr}};
    TSNode cb = rt_field(p->cl, "body");
    kl_ast_walk(cb, smem_tile__read_visit, &rs);
    smem_tile__rep reps[32];
    char *texts[32] = {0};
    unsigned nr = 0;
    char *result = NULL;
    for (unsigned r = 0; r < rs.n && r < 32; r++) {
        TSNode rd = rs.reads[r];
        TSNode in = rt_field(rd, "argument");
        int li = smem_tile__text_is(ctx, rt_field(in, "argument"), p->ld[0].arr) ? 0 : 1;
        const smem_tile__tload *l = &p->ld[li];
        TSNode sub[2] = {kl_ast_subscript_index(in), kl_ast_subscript_index(rd)};
        /* the k dimension reads kk, the other the load's own thread index */
        char s1[128], s2[128];
        smem_tile__squeezed(ctx, sub[l->kdim], s1, sizeof s1);
        int od = !l->kdim;
        if (strcmp(s1, p->C->var) || thread_index(ax, sub[od]) != l->thr[od]) {
            kl_rule_not_applicable(err, "%s:%u: the tile read '%.*s' is not at [thread][%s] as loaded", src, kl_ast_line(rd),
                                   (int)(ts_node_end_byte(rd) - ts_node_start_byte(rd)), ctx->text + ts_node_start_byte(rd),
                                   p->C->var);
            goto done;
        }
        (void)s2;
        /* the k coordinate c*t + threadIdx.<kdim>, from the load's index */
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[l->kdim]);
        /* what the load's index depends on besides t and that thread index must not involve it */
        kl_affine ea = {0};
        kl_affine_of(ax, l->gidx, &ea);
        if (!ea.ok) {
            kl_rule_not_applicable(err, "%s:%u: the load's index is not affine (%s)", src, kl_ast_line(l->stmt),
                                   ea.why ? ea.why : "");
            kl_affine_release(&ea);
            goto done;
        }
        /* want: the part of e made of t and the thread index, c*t + thread */
        kl_affine want = {0};
        want.ok = true;
        want.constant = kl_strdup("0");
        want.const_is_int = true;
        want.const_int = 0;
        want.terms = calloc(2, sizeof *want.terms);
        const char *ct = kl_affine_coef(&ea, p->T->var), *ch = kl_affine_coef(&ea, thr);
        bool okw = want.terms && ct && ch;
        char ratio[128] = "";
        if (okw) {
            /* the k coordinate is (ct/ch)*t + thread: ct must be ch times a constant */
            int64_t vt, vh;
            if (kl_affine_coef_int(&ea, p->T->var, &vt) && kl_affine_coef_int(&ea, thr, &vh) && vh && vt % vh == 0)
                kl_snprintf(ratio, sizeof ratio, "%lld", (long long)(vt / vh));
            else if (!strcmp(ct, ch)) kl_snprintf(ratio, sizeof ratio, "1");
            else {
                /* "16*N" over "N" */
                size_t lh = strlen(ch), lt = strlen(ct);
                if (lt > lh + 1 && !strcmp(ct + lt - lh, ch) && ct[lt - lh - 1] == '*')
                    kl_snprintf(ratio, sizeof ratio, "%.*s", (int)(lt - lh - 1), ct);
                else if (lt > lh + 1 && !strncmp(ct, ch, lh) && ct[lh] == '*')
                    kl_snprintf(ratio, sizeof ratio, "%s", ct + lh + 1);
            }
            okw = ratio[0] != '\0';
        }
        if (okw) {
            const char *vars[2] = {p->T->var, thr};
            const char *coefs[2] = {ratio, "1"};
            /* terms sorted by var name */
            int first = strcmp(vars[0], vars[1]) < 0 ? 0 : 1;
            for (int t = 0; t < 2; t++) {
                int s = t == 0 ? first : !first;
                want.terms[t].var = kl_strdup(vars[s]);
                want.terms[t].coef = kl_strdup(coefs[s]);
                char *end = NULL;
                long long v = strtoll(coefs[s], &end, 10);
                want.terms[t].coef_is_int = end && !*end;
                want.terms[t].coef_int = v;
            }
            want.nterms = 2;
        }
        kl_affine_release(&ea);
        char *owned = NULL;
        bool ok = okw && k_replace(ctx, ax, l->gidx, &want, p->T->var, thr, p->kname, reps, &nr, &owned);
        /* e must not depend on the thread index outside its k part */
        kl_affine_release(&want);
        char *etext = NULL;
        if (ok) {
            smem_tile__rep local[8];
            unsigned nl = 0;
            for (unsigned q = 0; q < nr; q++)
                if (reps[q].a >= ts_node_start_byte(l->gidx) && reps[q].b <= ts_node_end_byte(l->gidx) && nl < 8)
                    local[nl++] = reps[q];
            /* drop the index-local replacements from reps: they apply to the load's text */
            unsigned keep = 0;
            for (unsigned q = 0; q < nr; q++)
                if (!(reps[q].a >= ts_node_start_byte(l->gidx) && reps[q].b <= ts_node_end_byte(l->gidx))) reps[keep++] = reps[q];
            nr = keep;
            outside_scan os = {ctx, ax, local, nl, thr, false};
            kl_ast_walk(l->gidx, outside_visit, &os);
            if (os.bad) ok = false;
            else etext = smem_tile__splice(ctx, ts_node_start_byte(l->gidx), ts_node_end_byte(l->gidx), local, nl);
        }
        free(owned);
        if (!ok || !etext) {
            free(etext);
            kl_rule_not_applicable(err, "%s:%u: cannot find the k coordinate (%s times '%s' plus %s) in the load's index",
                                   src, kl_ast_line(l->stmt), ratio[0] ? ratio : "?", p->T->var, thr);
            goto done;
        }
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s[%s]", l->garr, etext);
        free(etext);
        texts[r] = kl_strbuf_detach(&sb, NULL);
        if (!texts[r]) {
            kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto done;
        }
        reps[nr++] = (smem_tile__rep){ts_node_start_byte(rd), ts_node_end_byte(rd), texts[r]};
    }
    /* the check that e's dependence on the k thread index is only through the k part is done by
     * construction: the replaced node is the whole k coordinate, and the rest was checked free of it */
    {
        char *raw = smem_tile__splice(ctx, ts_node_start_byte(cb), ts_node_end_byte(cb), reps, nr);
        char cind[64];
        rt_indent_of(ctx, ts_node_start_byte(p->cl), cind, sizeof cind);
        char *body = raw ? smem_tile__reindent_node_text(cind, raw, (int)strlen(ind) - (int)strlen(cind)) : NULL;
        free(raw);
        if (!body) {
            kl_rule_not_applicable(err, "%s:%u: the loop over the tile is indented with tabs", src, kl_ast_line(p->cl));
            goto done;
        }
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "for (%s %s = %s; %s < %s; %s++) %s", p->ttype, p->kname, p->T->start, p->kname, p->bound,
                       p->kname, body);
        free(body);
        result = kl_strbuf_detach(&sb, NULL);
        if (!result) kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
done:
    for (unsigned i = 0; i < 32; i++) free(texts[i]);
    return result;
}

kl_status smem_tile__remove_gemm(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const smem_tile__gp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    /* the loads' indices depend on the k thread index only through the k coordinate */
    for (int i = 0; i < 2; i++) {
        const smem_tile__tload *l = &p->ld[i];
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[l->kdim]);
        kpart kp = {0};
        (void)kp;
        /* find the k part again (as naive_loop does) and scan the rest */
        kl_affine ea = {0};
        kl_affine_of(ax, l->gidx, &ea);
        bool ok = ea.ok;
        kl_affine_release(&ea);
        if (!ok) return kl_rule_not_applicable(err, "%s:%u: the load's index is not affine", src, kl_ast_line(l->stmt));
    }
    char ind[64], gind[64], unit[8] = "    ";
    rt_indent_of(ctx, ts_node_start_byte(p->tl), ind, sizeof ind);
    kl_status st = KL_OK;
    char *loop = NULL, *pre = NULL, *after = NULL;
    /* the shared declarations (with a marker comment above) */
    for (unsigned i = 0; i < p->ndecl; i++) {
        uint32_t a, b;
        rt_stmt_range(ctx, p->decl[i], NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
    }
    if (p->form == 'I') {
        TSNode cons = rt_field(p->after, "consequence");
        bool compound = rt_is(cons, "compound_statement");
        TSNode first = compound ? ts_node_named_child(cons, 0) : cons;
        rt_indent_of(ctx, ts_node_start_byte(p->after), gind, sizeof gind);
        char iind[64];
        if (compound && !ts_node_is_null(first) && kl_rules_starts_line(ctx, ts_node_start_byte(first)))
            rt_indent_of(ctx, ts_node_start_byte(first), iind, sizeof iind);
        else kl_snprintf(iind, sizeof iind, "%s%s", gind, unit);
        loop = naive_loop(ctx, ax, p, iind, err);
        if (!loop) return err->status;
        if (p->npre) {
            uint32_t a = rt_line_start(ctx, ts_node_start_byte(p->pre[0]));
            uint32_t b = rt_line_end(ctx, ts_node_end_byte(p->pre[p->npre - 1]) - 1);
            pre = rt_reindent(ctx->text + a, b - a, (int)strlen(iind) - (int)strlen(ind));
            if (!pre) {
                st = kl_rule_not_applicable(err, "%s:%u: tabs in the indentation", src, kl_ast_line(p->pre[0]));
                goto cleanup;
            }
        }
        uint32_t a = rt_line_start(ctx, ts_node_start_byte(p->npre ? p->pre[0] : p->tl));
        uint32_t b = rt_line_end(ctx, ts_node_end_byte(p->tl) - 1);
        KL_TRY(kl_edits_add(out, a, b, ""));
        if (compound) {
            uint32_t at = rt_line_end(ctx, ts_node_start_byte(cons));
            if (at > ts_node_start_byte(first) && !ts_node_is_null(first)) {
                st = kl_rule_not_applicable(err, "%s:%u: the guard's block does not open on a line of its own", src,
                                            kl_ast_line(p->after));
                goto cleanup;
            }
            KL_TRY(kl_edits_addf(out, at, at, "%s%s%s\n", pre ? pre : "", iind, loop));
        } else {
            after = rt_text(ctx, cons);
            if (!after) goto oom;
            KL_TRY(kl_edits_addf(out, ts_node_start_byte(cons), ts_node_end_byte(cons), "{\n%s%s%s\n%s%s\n%s}",
                                 pre ? pre : "", iind, loop, iind, after, gind));
        }
    } else {
        loop = naive_loop(ctx, ax, p, ind, err);
        if (!loop) return err->status;
        if (p->form == 'R') {
            uint32_t a, b;
            rt_stmt_range(ctx, p->after, NULL, &a, &b);
            after = rt_text(ctx, p->after);
            if (!after) goto oom;
            KL_TRY(kl_edits_add(out, a, b, ""));
            /* `T v = (C) ? 0 : E;` (apply's guard of a read for the threads that return on C) right
             * before the tiles: E again, after the return, which moves before the first of them */
            TSNode anchor = p->npre ? p->pre[0] : p->tl;
            char *ct = rt_text(ctx, smem_tile__strip(smem_tile__if_cond(p->after)));
            if (!ct) goto oom;
            TSNode guarded[8];
            unsigned ng = 0;
            for (TSNode q = rt_prev_stmt(p->tl); !ts_node_is_null(q) && rt_is(q, "declaration") && ng < 8;
                 q = rt_prev_stmt(q)) {
                char *qt = rt_text(ctx, q);
                bool shared = qt && strstr(qt, "__shared__");
                free(qt);
                if (shared) break;
                TSNode one[2];
                if (rt_declarators(q, one, 2) != 1) continue;
                TSNode v = rt_field(one[0], "value");
                if (!rt_is(v, "conditional_expression") ||
                    !smem_tile__text_is(ctx, smem_tile__strip(rt_field(v, "condition")), ct) ||
                    !smem_tile__zero_value(ctx, rt_field(v, "consequence")))
                    continue;
                guarded[ng++] = v;
                if (ts_node_start_byte(q) < ts_node_start_byte(anchor)) anchor = q;
            }
            free(ct);
            uint32_t at = rt_line_start(ctx, ts_node_start_byte(anchor));
            KL_TRY(kl_edits_addf(out, at, at, "%s%s\n", ind, after));
            for (unsigned i = 0; i < ng; i++) {
                TSNode alt = rt_field(guarded[i], "alternative"), alt_in = smem_tile__strip(alt);
                TSNode keep = rt_is(alt, "parenthesized_expression") ? alt_in : alt;
                char *kt = rt_text(ctx, keep);
                if (!kt) goto oom;
                kl_status s2 = kl_edits_add(out, ts_node_start_byte(guarded[i]), ts_node_end_byte(guarded[i]), kt);
                free(kt);
                if (s2 != KL_OK) goto oom;
            }
        }
        KL_TRY(kl_edits_add(out, ts_node_start_byte(p->tl), ts_node_end_byte(p->tl), loop));
    }
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(loop);
    free(pre);
    free(after);
    return st;
}

