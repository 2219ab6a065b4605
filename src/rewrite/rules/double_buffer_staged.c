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

/* The declaration `auto name = [...](...) {...};` (or any declaration of `name`) among the kernel's
 * top-level statements: null when none. */
static TSNode lambda_decl(const kl_rule_ctx *ctx, const rt_func *f, const char *name)
{
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        TSNode d = tt_field(st[i], "declarator");
        if (rt_is(st[i], "declaration") && rt_is(d, "init_declarator") && rt_text_is(ctx, tt_field(d, "declarator"), name))
            return st[i];
    }
    return (TSNode){0};
}

/* The statements of an if's consequence (one or a block). */
static unsigned branch_stmts(TSNode ifs, TSNode *st, unsigned max)
{
    TSNode b = tt_field(ifs, "consequence");
    if (rt_is(b, "compound_statement")) return tt_stmts(b, st, max);
    st[0] = b;
    return 1;
}

/* A pointer bump `p += e;`, `p -= e;`, `p = e;` or `++p;` of a plain name: its name. */
static bool bump_of(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size)
{
    TSNode e = tt_child(s, 0), t = {0};
    if (!rt_is(s, "expression_statement")) return false;
    if (rt_is(e, "assignment_expression")) t = tt_field(e, "left");
    else if (rt_is(e, "update_expression")) t = tt_field(e, "argument");
    if (!rt_is(t, "identifier")) return false;
    tt_copy_text(ctx, t, name, size);
    return true;
}

/*
 * The experts' register staging (tasks/sgemm/expert.cu, corpus/matmul/expert.cu):
 *
 *     load(0); store(0); __syncthreads();
 *     for (int s = 0; s < n; ++s) {
 *         const int cur = s & 1;                   (or no local: the arrays at [s & 1])
 *         <declarations not using cur>             (`const bool more = s + 1 < n;`)
 *         if (next) { <pointer bumps> load(<s + 1>); }
 *         compute on stage cur
 *         if (next) store(cur ^ 1);                (or store((s + 1) & 1))
 *         __syncthreads();
 *     }
 *
 * becomes
 *
 *     for (int s = 0; s < n; ++s) {
 *         <declarations>
 *         load(<s>); store(0); __syncthreads();
 *         compute on the one stage
 *         if (next) { <pointer bumps> }
 *         __syncthreads();
 *     }
 *
 * The bumps move from before the next slice's load to the end of this slice, so every load sees
 * the pointers it saw: sound when neither the compute nor the store reads them.
 */
kl_status db_remove_staged(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err)
{
    unsigned line = ts_node_start_point(p->loop).row + 1;
    bool named = !ts_node_is_null(p->curdecl);
    /* the prefetch (the first `if` not naming the next stage) and the store (the `if` naming it) */
    TSNode pre = {0}, post = {0};
    unsigned ipre = 0, ipost = 0, icur = 0;
    for (unsigned k = 0; k < p->n; k++) {
        if (named && ts_node_eq(p->st[k], p->curdecl)) icur = k;
        if (!rt_is(p->st[k], "if_statement")) continue;
        bool names_next = tt_count(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]), p->nextx) > 0;
        if (names_next && ts_node_is_null(post)) post = p->st[k], ipost = k;
        else if (!names_next && ts_node_is_null(pre)) pre = p->st[k], ipre = k;
    }
    TSNode last = p->st[p->n - 1];
    if (ts_node_is_null(pre) || ts_node_is_null(post) || ipre > ipost || ipost + 2 != p->n || !rt_is_syncthreads(ctx, last) ||
        !rt_is_syncthreads(ctx, rt_prev_stmt(p->loop)) || !ts_node_is_null(tt_field(pre, "alternative")) ||
        !ts_node_is_null(tt_field(post, "alternative")))
        return kl_rule_not_applicable(err, "the tile loop at line %u is not `if (next) load(next); compute; "
                                           "if (next) store(%s); __syncthreads();` after a prologue and a barrier",
                                      line, p->nextx);
    if (named) {
        if (icur > ipre)
            return kl_rule_not_applicable(err, "the stage index at line %u comes after the prefetch",
                                          ts_node_start_point(p->curdecl).row + 1);
        for (unsigned k = icur + 1; k < ipre; k++)
            if (tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]), p->cur))
                return kl_rule_not_applicable(err, "line %u uses the stage index %s before the prefetch",
                                              ts_node_start_point(p->st[k]).row + 1, p->cur);
    }
    /* the prefetch: pointer bumps, then calls */
    TSNode ps[16];
    unsigned np = branch_stmts(pre, ps, 16), nbump = 0;
    char bumps[16][64];
    if (np > 16) return kl_rule_not_applicable(err, "the prefetch at line %u is too long", ts_node_start_point(pre).row + 1);
    for (unsigned k = 0; k < np; k++) {
        bool call = rt_is(ps[k], "expression_statement") && rt_is(tt_child(ps[k], 0), "call_expression");
        if (!call && k == nbump && bump_of(ctx, ps[k], bumps[nbump], sizeof bumps[0])) {
            nbump++;
            continue;
        }
        if (!call)
            return kl_rule_not_applicable(err, "the prefetch at line %u is not pointer bumps followed by calls (line %u)",
                                          ts_node_start_point(pre).row + 1, ts_node_start_point(ps[k]).row + 1);
    }
    if (nbump == np)
        return kl_rule_not_applicable(err, "the prefetch at line %u calls no load", ts_node_start_point(pre).row + 1);
    TSNode qs[4];
    unsigned nq = branch_stmts(post, qs, 4);
    if (nq != 1 || !rt_is(qs[0], "expression_statement") || !rt_is(tt_child(qs[0], 0), "call_expression"))
        return kl_rule_not_applicable(err, "the store at line %u is not a single call", ts_node_start_point(post).row + 1);
    /* a bumped pointer is read only by the loads: not by the compute, the store or its lambda */
    for (unsigned b = 0; b < nbump; b++) {
        char sname[64];
        tt_copy_text(ctx, tt_field(tt_child(qs[0], 0), "function"), sname, sizeof sname);
        TSNode store_fn = lambda_decl(ctx, f, sname);
        bool read = false;
        for (unsigned k = ipre + 1; k < ipost + 1; k++)
            read |= tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]), bumps[b]);
        if (!ts_node_is_null(store_fn))
            read |= tt_uses(ctx->text, ts_node_start_byte(store_fn), ts_node_end_byte(store_fn), bumps[b]);
        if (read)
            return kl_rule_not_applicable(err, "%s, bumped in the prefetch at line %u, is read by the compute or the store: "
                                               "the bump cannot move after them",
                                          bumps[b], ts_node_start_point(pre).row + 1);
    }
    /* the next slice's arguments: `s + step` → s */
    TSNode upd = tt_field(p->loop, "update");
    char step[64] = "1";
    if (rt_is(upd, "assignment_expression")) tt_copy_text(ctx, tt_field(upd, "right"), step, sizeof step);
    char nx1[160], nx2[160];
    kl_snprintf(nx1, sizeof nx1, "(%s + %s)", p->var, step);
    kl_snprintf(nx2, sizeof nx2, "%s + %s", p->var, step);
    tt_pair np2[2] = {{nx1, p->var}, {nx2, p->var}};
    tt_pair sp[1] = {{p->nextx, "0"}};
    char ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(pre), ind2, sizeof ind2);
    kl_strbuf head = KL_STRBUF_INIT, tail = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    for (unsigned k = nbump; k < np; k++) {
        /* each argument on its own: `load(s + 1)` → `load(s)`, `fetch((s + 1) * BK)` → `fetch(s * BK)` */
        TSNode call = tt_child(ps[k], 0), args = tt_field(call, "arguments");
        char *fn = rt_text(ctx, tt_field(call, "function"));
        if (!fn) goto oom;
        kl_strbuf_addf(&head, "%s%s(", ind2, fn);
        free(fn);
        unsigned na = 0;
        for (uint32_t a = 0; a < ts_node_named_child_count(args); a++) {
            TSNode arg = ts_node_named_child(args, a);
            if (rt_is(arg, "comment")) continue;
            char *t = rt_text_is(ctx, arg, nx2) ? NULL
                                                : tt_subst(ctx->text, ts_node_start_byte(arg), ts_node_end_byte(arg), np2, 1);
            if (!rt_text_is(ctx, arg, nx2) && !t) goto oom;
            kl_strbuf_addf(&head, "%s%s", na++ ? ", " : "", t ? t : p->var);
            free(t);
        }
        kl_strbuf_adds(&head, ");\n");
    }
    {
        char *t = tt_subst(ctx->text, ts_node_start_byte(qs[0]), ts_node_end_byte(qs[0]), sp, 1);
        if (!t) goto oom;
        kl_strbuf_addf(&head, "%s%s\n%s__syncthreads();\n", ind2, t, ind2);
        free(t);
    }
    if (nbump) {
        TSNode cond = tt_field(pre, "condition");
        char *ct = rt_text(ctx, cond);
        if (!ct) goto oom;
        uint32_t b0 = rt_line_start(ctx, ts_node_start_byte(ps[0])), b1 = rt_line_end(ctx, ts_node_end_byte(ps[nbump - 1]));
        kl_strbuf_addf(&tail, "%sif %s {\n", ind2, ct);
        kl_strbuf_add(&tail, ctx->text + b0, b1 - b0);
        kl_strbuf_addf(&tail, "%s}\n", ind2);
        free(ct);
    }
    if (head.failed || tail.failed) goto oom;
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
    /* the stage index goes; the prefetch becomes this slice's loads, the store into stage 0 and a
     * barrier; the store becomes the bumps */
    uint32_t p0, p1, s0, s1;
    db_stmt_with_comments(ctx, pre, &p0, &p1);
    db_stmt_with_comments(ctx, post, &s0, &s1);
    if (!rt_line_blank_before(ctx, ts_node_start_byte(pre)) || p1 != rt_line_end(ctx, ts_node_end_byte(pre)) ||
        s1 != rt_line_end(ctx, ts_node_end_byte(post))) {
        st = kl_rule_not_applicable(err, "the prefetch and the store at lines %u and %u do not sit on lines of their own",
                                    ts_node_start_point(pre).row + 1, ts_node_start_point(post).row + 1);
        goto done;
    }
    if (named) {
        uint32_t c0, c1;
        db_stmt_with_comments(ctx, p->curdecl, &c0, &c1);
        if (c1 != rt_line_end(ctx, ts_node_end_byte(p->curdecl))) {
            st = kl_rule_not_applicable(err, "the stage index at line %u does not sit on a line of its own",
                                        ts_node_start_point(p->curdecl).row + 1);
            goto done;
        }
        if ((st = kl_edits_add(out, c0, c1, "")) != KL_OK) goto done;
    }
    if ((st = kl_edits_add(out, p0, p1, kl_strbuf_str(&head))) != KL_OK) goto done;
    if ((st = kl_edits_add(out, s0, s1, nbump ? kl_strbuf_str(&tail) : "")) != KL_OK) goto done;
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
    goto done;
oom:
    st = KL_ERR_NOMEM;
done:
    kl_strbuf_release(&head);
    kl_strbuf_release(&tail);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
