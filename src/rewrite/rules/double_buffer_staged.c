/* double-buffer: the experts' register staging through lambdas (load/fetch into registers, store/stash
 * into the other stage), removed. */
#include "rewrite/rules/double_buffer.h"

/* The names of the functions (lambdas) called by the statements of an if's body. */
static unsigned called_names(const kl_rule_ctx *ctx, TSNode s, char names[][64], unsigned max)
{
    unsigned n = 0;
    TSNode b = tt_field(s, "consequence");
    TSNode st[8];
    unsigned k = rt_is(b, "compound_statement") ? tt_stmts(b, st, 8) : (st[0] = b, 1u);
    for (unsigned i = 0; i < k && i < 8 && n < max; i++) {
        TSNode c = tt_child(st[i], 0);
        if (rt_is(st[i], "expression_statement") && rt_is(c, "call_expression"))
            tt_copy_text(ctx, tt_field(c, "function"), names[n++], 64);
    }
    return n;
}

/* The expert's form: see the top of the file. */
kl_status db_remove_staged(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out,
                               kl_error *err)
{
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(p->curdecl), ind2, sizeof ind2);
    /* the prefetch (first `if` after the stage index) and the store (the `if` naming cur ^ 1) */
    char curx[96];
    kl_snprintf(curx, sizeof curx, "%s ^ 1", p->cur);
    TSNode pre = {0}, post = {0};
    unsigned ipre = 0, ipost = 0;
    for (unsigned k = 0; k < p->n; k++) {
        if (!rt_is(p->st[k], "if_statement")) continue;
        bool names_next = tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]), curx);
        if (names_next && ts_node_is_null(post)) post = p->st[k], ipost = k;
        else if (!names_next && ts_node_is_null(pre)) pre = p->st[k], ipre = k;
    }
    TSNode last = p->st[p->n - 1];
    if (ts_node_is_null(pre) || ts_node_is_null(post) || ipre > ipost || ipost + 2 != p->n || !rt_is_syncthreads(ctx, last) ||
        !rt_is_syncthreads(ctx, rt_prev_stmt(p->loop)))
        return kl_rule_not_applicable(err, "the tile loop at line %u is not `if (next) load(next); compute; "
                                           "if (next) store(%s ^ 1); __syncthreads();` after a prologue and a barrier",
                                      line, p->cur);
    /* the next tile's expression in the prefetch: `var + 1` or `var + step` */
    TSNode upd = tt_field(p->loop, "update");
    char step[64] = "1";
    if (rt_is(upd, "assignment_expression")) tt_copy_text(ctx, tt_field(upd, "right"), step, sizeof step);
    char nx2[160];
    kl_snprintf(nx2, sizeof nx2, "%s + %s", p->var, step);
    TSNode pb = tt_field(pre, "consequence");
    /* `(kt + 1)` only as a parenthesized expression: `load(kt + 1)` keeps its call parentheses */
    tt_pair np[1] = {{nx2, p->var}};
    char *loads = tt_subst(ctx->text, ts_node_start_byte(pb), ts_node_end_byte(pb), np, 1);
    TSNode sb = tt_field(post, "consequence");
    tt_pair sp[1] = {{curx, "0"}};
    char *stores = tt_subst(ctx->text, ts_node_start_byte(sb), ts_node_end_byte(sb), sp, 1);
    kl_status st = KL_OK;
    if (!loads || !stores) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    /* the prologue: the barrier before the loop and the calls before it that the loop makes too */
    char names[16][64];
    unsigned nn = called_names(ctx, pre, names, 8);
    nn += called_names(ctx, post, names + nn, 8);
    TSNode bar = rt_prev_stmt(p->loop), first = bar;
    for (TSNode s = rt_prev_stmt(bar); !ts_node_is_null(s); s = rt_prev_stmt(s)) {
        TSNode c = tt_child(s, 0);
        if (!rt_is(s, "expression_statement") || !rt_is(c, "call_expression")) break;
        bool known = false;
        for (unsigned k = 0; k < nn; k++) known |= rt_text_is(ctx, tt_field(c, "function"), names[k]);
        if (!known) break;
        first = s;
    }
    if (ts_node_eq(first, bar)) {
        st = kl_rule_not_applicable(err, "no prologue loading the first tile before line %u", line);
        goto done;
    }
    uint32_t a0, a1, b0, b1;
    db_stmt_with_comments(ctx, first, &a0, &a1);
    rt_stmt_range(ctx, bar, NULL, &b0, &b1);
    if ((st = kl_edits_add(out, a0, b1, "")) != KL_OK) goto done;
    /* the stage index and the prefetch become the loads of this tile, the stores and a barrier */
    {
        uint32_t c0, c1;
        db_stmt_with_comments(ctx, p->curdecl, &c0, &c1);
        c0 = rt_line_blank_before(ctx, ts_node_start_byte(p->curdecl)) ? c0 : ts_node_start_byte(p->curdecl);
        if (!rt_is(pb, "expression_statement") || !rt_is(sb, "expression_statement")) {
            st = kl_rule_not_applicable(err, "the prefetch and the store at line %u are not single statements",
                                        ts_node_start_point(pre).row + 1);
            goto done;
        }
        kl_strbuf b = KL_STRBUF_INIT;
        kl_strbuf_addf(&b, "%s%s\n%s%s\n%s__syncthreads();\n", ind2, loads, ind2, stores, ind2);
        char *txt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
        kl_strbuf_release(&b);
        if (!txt) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        uint32_t p0, p1;
        rt_stmt_range(ctx, pre, NULL, &p0, &p1);
        if (c0 != rt_line_start(ctx, ts_node_start_byte(p->curdecl)) || p1 != rt_line_end(ctx, ts_node_end_byte(pre))) {
            free(txt);
            st = kl_rule_not_applicable(err, "the stage index and the prefetch at line %u do not sit on lines of their own",
                                        ts_node_start_point(p->curdecl).row + 1);
            goto done;
        }
        if (!ts_node_eq(rt_next_stmt(p->curdecl), pre)) {
            free(txt);
            st = kl_rule_not_applicable(err, "the stage index at line %u is not right before the prefetch",
                                        ts_node_start_point(p->curdecl).row + 1);
            goto done;
        }
        st = kl_edits_add(out, c0, p1, txt);
        free(txt);
        if (st != KL_OK) goto done;
        uint32_t s0, s1;
        db_stmt_with_comments(ctx, post, &s0, &s1);
        if ((st = kl_edits_add(out, s0, s1, "")) != KL_OK) goto done;
    }
    /* every staged array loses its first subscript: As[cur][k][m] → As[k][m] (lambdas too) */
    for (unsigned m = 0; m < p->narrs; m++) {
        if (!p->staged[m]) continue;
        uint32_t ms[256], me[256];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), p->arrs[m].name, ms, me, 256);
        for (unsigned k = 0; k < nm && k < 256; k++) {
            if (ms[k] == ts_node_start_byte(p->arrs[m].ident)) continue;
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
            TSNode sub = tt_parent(id);
            if (!rt_is(sub, "subscript_expression") || !ts_node_eq(tt_field(sub, "argument"), id) ||
                !rt_is(tt_parent(sub), "subscript_expression")) {
                st = kl_rule_not_applicable(err, "%s at line %u is not indexed by stage, row and column", p->arrs[m].name,
                                            ts_node_start_point(id).row + 1);
                goto done;
            }
            if ((st = kl_edits_add(out, me[k], ts_node_end_byte(sub), "")) != KL_OK) goto done;
        }
    }
    st = db_drop_stage_decls(ctx, p, out, err);
done:
    free(loads);
    free(stores);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
