/* double-buffer: the cp.async rings of the hgemm experts, found and removed. */
#include "rewrite/rules/double_buffer.h"

/*
 *     for (int s = 0; s < STAGES - 1; s++) { if (s < k_tiles) load(…s…); commit(); }
 *     for (int kt = 0; kt < k_tiles; kt++) {
 *         wait<STAGES - 2>();  __syncthreads();
 *         const int next = kt + STAGES - 1;
 *         if (next < k_tiles) load(… (next % STAGES) …, next * BK);
 *         commit();
 *         compute on the stage (kt % STAGES)
 *     }
 * where wait and commit are cp.async's (`cp.async.wait_group` / `cp.async.commit_group` in a
 * helper of the file, or __pipeline_wait_prior / __pipeline_commit) and load is any call.
 */

/* Does text[0,len) contain the string w? */
static bool has_text(const char *text, size_t len, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i + wl <= len; i++)
        if (!memcmp(text + i, w, wl)) return true;
    return false;
}

/* The called name of an expression statement `f(…);` / `f<…>(…);` (text up to `<` or `(`), or
 * false. */
static bool call_name(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size)
{
    if (rt_is(s, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(s, one, 2) != 1) return false;
        s = one[0];
    }
    if (!rt_is(s, "expression_statement") || !rt_is(tt_child(s, 0), "call_expression")) return false;
    const char *t = ctx->text + ts_node_start_byte(s);
    size_t k = 0;
    while (k + 1 < size && (t[k] == '_' || t[k] == ':' || (t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z') ||
                            (t[k] >= '0' && t[k] <= '9')))
        name[k] = t[k], k++;
    name[k] = '\0';
    return k > 0;
}

/* 1: a cp.async wait, 2: a commit, 0: another call or none. */
static int async_kind(const kl_rule_ctx *ctx, TSNode s)
{
    char name[128];
    if (!call_name(ctx, s, name, sizeof name)) return 0;
    if (!strcmp(name, "__pipeline_wait_prior")) return 1;
    if (!strcmp(name, "__pipeline_commit")) return 2;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *h = rt_function_named(fs, nf < 64 ? nf : 64, name);
    if (!h || ts_node_is_null(h->body) || h->global) return 0;
    const char *b = ctx->text + ts_node_start_byte(h->body);
    size_t len = ts_node_end_byte(h->body) - ts_node_start_byte(h->body);
    if (has_text(b, len, "cp.async.wait_group") || has_text(b, len, "cp.async.wait_all")) return 1;
    if (has_text(b, len, "cp.async.commit_group")) return 2;
    return 0;
}

/* The depth D of a prefetch `if (next < bound) load(… (next % D) …);` whose prologue fetches `ahead`
 * tiles: D an identifier, ahead a compile-time constant with 0 < ahead < D. */
static bool ring_depth_of(const kl_rule_ctx *ctx, const rt_func *f, TSNode pre, TSNode ahead, char *depth, size_t size)
{
    const char *t = ctx->text + ts_node_start_byte(pre);
    size_t len = ts_node_end_byte(pre) - ts_node_start_byte(pre);
    const char *pct = memchr(t, '%', len);
    if (!pct) return false;
    const char *q = pct + 1;
    while (q < t + len && *q == ' ') q++;
    size_t k = 0;
    while (q + k < t + len && k + 1 < size && (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') || (q[k] >= 'A' && q[k] <= 'Z') ||
                                             (q[k] >= '0' && q[k] <= '9')))
        k++;
    if (!k || q + k >= t + len || q[k] != ')') return false;
    kl_snprintf(depth, size, "%.*s", (int)k, q);
    /* both constants: the depth an identifier of the file, ahead below it */
    long long a = 0, d = 0;
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    TSNode dn = ts_node_descendant_for_byte_range(root, (uint32_t)(q - ctx->text), (uint32_t)(q - ctx->text + k));
    return rt_const_eval(ctx, f->def, ahead, &a) && rt_is(dn, "identifier") && rt_const_eval(ctx, f->def, dn, &d) && a > 0 &&
           a < d;
}

/* A statement calling a helper of the file whose body holds a fence.proxy.async (what a wgmma or
 * bulk-copy reader of shared memory needs after ordinary writes). */
static bool proxy_fence_stmt(const kl_rule_ctx *ctx, TSNode s)
{
    char name[128];
    if (!call_name(ctx, s, name, sizeof name)) return false;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *h = rt_function_named(fs, nf < 64 ? nf : 64, name);
    if (!h || ts_node_is_null(h->body) || h->global) return false;
    const char *b = ctx->text + ts_node_start_byte(h->body);
    return has_text(b, ts_node_end_byte(h->body) - ts_node_start_byte(h->body), "fence.proxy.async");
}

/* Does the compute of the ring call a helper of the file holding wgmma? */
static bool computes_with_wgmma(const kl_rule_ctx *ctx, const db_present *p)
{
    if (p->icompute >= p->n) return false;
    uint32_t cs = ts_node_start_byte(p->st[p->icompute]), ce = ts_node_end_byte(p->st[p->n - 1]);
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        if (ts_node_is_null(fs[i].body) || fs[i].global || !fs[i].name[0]) continue;
        const char *b = ctx->text + ts_node_start_byte(fs[i].body);
        if (has_text(b, ts_node_end_byte(fs[i].body) - ts_node_start_byte(fs[i].body), "wgmma.") &&
            tt_uses(ctx->text, cs, ce, fs[i].name))
            return true;
    }
    return false;
}

bool db_find_ring(const kl_rule_ctx *ctx, const rt_func *f, TSNode *st, unsigned n, db_present *p)
{
    for (unsigned i = 1; i < n && i < MAXSTMT; i++) {
        TSNode loop = st[i], pro = st[i - 1];
        if (!rt_is(loop, "for_statement") || !rt_is(pro, "for_statement")) continue;
        TSNode body = tt_field(loop, "body");
        if (!rt_is(body, "compound_statement")) continue;
        p->n = tt_stmts(body, p->st, MAXSTMT);
        if (p->n < 5 || p->n > MAXSTMT) continue;
        TSNode id = tt_field(tt_field(tt_field(loop, "initializer"), "declarator"), "declarator");
        if (!rt_is(id, "identifier")) continue;
        /* wait; [proxy fence;] __syncthreads(); [const int next = …;] if (next < bound) load(…); commit(); */
        if (async_kind(ctx, p->st[0]) != 1) continue;
        unsigned b = proxy_fence_stmt(ctx, p->st[1]) ? 2 : 1;
        if (!rt_is_syncthreads(ctx, p->st[b])) continue;
        unsigned k = b + 1;
        if (rt_is(p->st[k], "declaration")) k++;
        if (k + 1 >= p->n || !rt_is(p->st[k], "if_statement") || async_kind(ctx, p->st[k + 1]) != 2) continue;
        /* the prologue: `for (s = 0; s < DEPTH - 1; s++)`, or `s < AHEAD` (a constant below the
         * depth, which the prefetch's stage `(next % DEPTH)` names: a ring that keeps more stages than
         * it fetches ahead, e.g. one whose readers finish a tile late) */
        TSNode pc = tt_field(pro, "condition"), pr = kl_ast_unparen(tt_field(pc, "right"));
        if (!rt_is(pc, "binary_expression")) continue;
        memset(p->depth, 0, sizeof p->depth);
        if (rt_is(pr, "binary_expression") && rt_text_is(ctx, tt_field(pr, "operator"), "-") &&
            rt_text_is(ctx, tt_field(pr, "right"), "1")) {
            tt_copy_text(ctx, tt_field(pr, "left"), p->depth, sizeof p->depth);
        } else if (!ring_depth_of(ctx, f, p->st[k], pr, p->depth, sizeof p->depth)) {
            continue;
        }
        tt_copy_text(ctx, id, p->var, sizeof p->var);
        p->loop = loop;
        p->body = body;
        p->pro = pro;
        p->wait = p->st[0];
        p->fence = b == 2 ? p->st[1] : (TSNode){0};
        p->sync = p->st[b];
        p->pre = p->st[k];
        p->commit = p->st[k + 1];
        p->icompute = k + 2;
        p->curdecl = k == b + 2 ? p->st[b + 1] : (TSNode){0};
        p->form = DB_RING;
        /* wgmma reads the stage asynchronously: a group still in flight after the compute would
         * read the one stage while the next tile is copied into it */
        if (!ts_node_is_null(p->fence) || computes_with_wgmma(ctx, p))
            kl_snprintf(p->why, sizeof p->why,
                        "the tiles of the ring at line %u are read by wgmma, asynchronously across the barrier: remove "
                        "wgmma first",
                        ts_node_start_point(loop).row + 1);
        return true;
    }
    return false;
}

/* The ranges that take the stage index `pat` ("(kt % STAGES)") out of text[s,e): ` + (kt % S) * X`
 * goes whole (a stage pointer becomes the base pointer), any other match becomes `0` (zero[k]). */
static unsigned stage_ranges(const char *text, uint32_t s, uint32_t e, const char *pat, uint32_t *rs, uint32_t *re,
                             bool *zero, unsigned max)
{
    uint32_t ms[64], me[64];
    unsigned nm = tt_find(text, s, e, pat, ms, me, 64), k = 0;
    for (unsigned i = 0; i < nm && i < 64 && k < max; i++) {
        uint32_t a = ms[i], b = me[i];
        while (a > s && (text[a - 1] == ' ' || text[a - 1] == '\t')) a--;
        bool plus = a > s && text[a - 1] == '+';
        if (plus) {
            a--;
            while (a > s && (text[a - 1] == ' ' || text[a - 1] == '\t')) a--;
        }
        while (b < e && (text[b] == ' ' || text[b] == '\t')) b++;
        bool times = b < e && text[b] == '*';
        if (times) {
            b++;
            while (b < e && (text[b] == ' ' || text[b] == '\t')) b++;
            uint32_t b0 = b;
            while (b < e && (text[b] == '_' || (text[b] >= 'a' && text[b] <= 'z') || (text[b] >= 'A' && text[b] <= 'Z') ||
                             (text[b] >= '0' && text[b] <= '9')))
                b++;
            times = b > b0;
        }
        if (plus && times) rs[k] = a, re[k] = b, zero[k] = false;
        else rs[k] = ms[i], re[k] = me[i], zero[k] = true;
        k++;
    }
    return nm > max ? max + 1 : k;
}

/* The ring (see db_find_ring): one stage, `load(this tile); commit; wait(0); __syncthreads();
 * compute; __syncthreads();`, the prologue gone. */
kl_status db_remove_ring(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err)
{
    (void)f;
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64], pat[160], name[128], wname[128];
    rt_indent_of(ctx, ts_node_start_byte(p->wait), ind2, sizeof ind2);
    /* the prefetch: `if (next < bound) load(…);`, next declared right before it (or the bound's
     * own local) */
    TSNode pc = kl_ast_unparen(tt_field(tt_field(p->pre, "condition"), "value"));
    if (ts_node_is_null(pc)) pc = kl_ast_unparen(tt_field(p->pre, "condition"));
    TSNode lc = tt_field(p->loop, "condition"), call = tt_field(p->pre, "consequence");
    if (!ts_node_is_null(tt_field(p->pre, "alternative")) || !rt_is(pc, "binary_expression") ||
        !rt_text_is(ctx, tt_field(pc, "operator"), "<") || !rt_is(tt_field(pc, "left"), "identifier") ||
        !rt_is(lc, "binary_expression") || !rt_text_is(ctx, tt_field(lc, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(lc, "left"), p->var))
        return kl_rule_not_applicable(err, "the prefetch at line %u is not `if (next < bound) load(…);`",
                                      ts_node_start_point(p->pre).row + 1);
    char bound[160], lbound[160], next[64];
    tt_copy_text(ctx, tt_field(pc, "right"), bound, sizeof bound);
    tt_copy_text(ctx, tt_field(lc, "right"), lbound, sizeof lbound);
    tt_copy_text(ctx, tt_field(pc, "left"), next, sizeof next);
    if (strcmp(bound, lbound))
        return kl_rule_not_applicable(err, "the prefetch at line %u is bounded by %s, the tile loop by %s",
                                      ts_node_start_point(p->pre).row + 1, bound, lbound);
    if (rt_is(call, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(call, one, 2) != 1)
            return kl_rule_not_applicable(err, "the prefetch at line %u is not one call", ts_node_start_point(p->pre).row + 1);
        call = one[0];
    }
    if (!call_name(ctx, call, name, sizeof name) || async_kind(ctx, call))
        return kl_rule_not_applicable(err, "the prefetch at line %u is not one call", ts_node_start_point(p->pre).row + 1);
    if (!ts_node_is_null(p->curdecl)) {
        char dn[64];
        TSNode v;
        if (!db_decl_named(ctx, p->curdecl, dn, sizeof dn, &v) || strcmp(dn, next))
            return kl_rule_not_applicable(err, "line %u between the barrier and the prefetch does not declare %s",
                                          ts_node_start_point(p->curdecl).row + 1, next);
    }
    /* the prologue: only the same load (guarded or not) and the commit */
    {
        TSNode pb = tt_field(p->pro, "body"), ps[8];
        unsigned np = rt_is(pb, "compound_statement") ? tt_stmts(pb, ps, 8) : 0;
        bool ok = np >= 1 && np <= 8, loads = false;
        for (unsigned k = 0; ok && k < np; k++) {
            TSNode c = ps[k];
            char nm[128];
            if (rt_is(c, "if_statement") && ts_node_is_null(tt_field(c, "alternative"))) c = tt_field(c, "consequence");
            if (async_kind(ctx, c) == 2) continue;
            ok = call_name(ctx, c, nm, sizeof nm) && !strcmp(nm, name);
            loads |= ok;
        }
        if (!ok || !loads)
            return kl_rule_not_applicable(err, "the loop before line %u is not the prologue of the ring (%s and a commit)", line,
                                          name);
    }
    /* the compute: no barrier, no other stage traffic, no exit */
    uint32_t cs = ts_node_start_byte(p->st[p->icompute]), ce = ts_node_end_byte(p->st[p->n - 1]);
    if (p->icompute >= p->n)
        return kl_rule_not_applicable(err, "the tile loop at line %u computes nothing after the prefetch", line);
    static const char *const banned[] = {"__syncthreads", "return", "break", "continue", "__pipeline_commit",
                                         "__pipeline_wait_prior"};
    for (unsigned k = 0; k < sizeof banned / sizeof *banned; k++)
        if (tt_uses(ctx->text, cs, ce, banned[k]))
            return kl_rule_not_applicable(err, "the compute of the tile loop at line %u has %s", line, banned[k]);
    if (tt_uses(ctx->text, cs, ce, name) || tt_uses(ctx->text, cs, ce, next))
        return kl_rule_not_applicable(err, "the compute of the tile loop at line %u uses %s", line,
                                      tt_uses(ctx->text, cs, ce, name) ? name : next);
    for (unsigned k = p->icompute; k < p->n; k++)
        if (async_kind(ctx, p->st[k]))
            return kl_rule_not_applicable(err, "line %u of the compute waits or commits",
                                          ts_node_start_point(p->st[k]).row + 1);
    /* the load of this tile: the prefetch with (next % DEPTH) taken out and next -> var */
    kl_strbuf sb = KL_STRBUF_INIT;
    char *loadt = NULL, *moved = NULL;
    kl_status st = KL_OK;
    uint32_t rs[32], re[32];
    bool zero[32];
    uint32_t a = ts_node_start_byte(call), b = ts_node_end_byte(call);
    kl_snprintf(pat, sizeof pat, "(%s %% %s)", next, p->depth);
    unsigned nr = stage_ranges(ctx->text, a, b, pat, rs, re, zero, 32);
    if (nr > 32) {
        st = kl_rule_not_applicable(err, "the prefetch at line %u names its stage too often", ts_node_start_point(call).row + 1);
        goto done;
    }
    for (unsigned k = 0; k < nr; k++) {
        kl_strbuf_add(&sb, ctx->text + a, rs[k] - a);
        if (zero[k]) kl_strbuf_adds(&sb, "0");
        a = re[k];
    }
    kl_strbuf_add(&sb, ctx->text + a, b - a);
    if (sb.failed) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    {
        const char *t0 = kl_strbuf_str(&sb);
        tt_pair np[1] = {{next, p->var}};
        loadt = tt_subst(t0, 0, (uint32_t)strlen(t0), np, 1);
        if (!loadt) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        char stagepat[96];
        kl_snprintf(stagepat, sizeof stagepat, "%% %s", p->depth);
        if (tt_count(loadt, 0, (uint32_t)strlen(loadt), stagepat)) {
            st = kl_rule_not_applicable(err, "the prefetch at line %u names a stage other than (%s %% %s)",
                                        ts_node_start_point(call).row + 1, next, p->depth);
            goto done;
        }
        /* one level less indented when it sat under the if */
        char ci[64], ii[64];
        rt_indent_of(ctx, ts_node_start_byte(call), ci, sizeof ci);
        rt_indent_of(ctx, ts_node_start_byte(p->pre), ii, sizeof ii);
        if (strlen(ci) > strlen(ii) && rt_line_blank_before(ctx, ts_node_start_byte(call))) {
            moved = tt_indent_tail(loadt, -(int)(strlen(ci) - strlen(ii)));
            if (moved) {
                free(loadt);
                loadt = moved;
                moved = NULL;
            }
        }
    }
    /* the head of the loop: load, commit, wait for everything, barrier */
    {
        char *commit = rt_text(ctx, p->commit);
        if (!commit) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        call_name(ctx, p->wait, wname, sizeof wname);
        const char *after = ctx->text + ts_node_start_byte(p->wait) + strlen(wname);
        while (*after == ' ') after++;
        kl_strbuf h = KL_STRBUF_INIT;
        kl_strbuf_addf(&h, "%s%s\n%s%s\n%s%s%s;\n%s__syncthreads();\n", ind2, loadt, ind2, commit, ind2, wname,
                       *after == '<' ? "<0>()" : "(0)", ind2);
        free(commit);
        uint32_t w0, w1, c0, c1;
        db_stmt_with_comments(ctx, p->wait, &w0, &w1);
        rt_stmt_range(ctx, p->commit, NULL, &c0, &c1);
        if (w0 != rt_line_start(ctx, ts_node_start_byte(p->wait)) && w0 == ts_node_start_byte(p->wait)) {
            kl_strbuf_release(&h);
            st = kl_rule_not_applicable(err, "the wait at line %u does not sit on a line of its own",
                                        ts_node_start_point(p->wait).row + 1);
            goto done;
        }
        if (c1 != rt_line_end(ctx, ts_node_end_byte(p->commit))) {
            kl_strbuf_release(&h);
            st = kl_rule_not_applicable(err, "the commit at line %u does not sit on a line of its own",
                                        ts_node_start_point(p->commit).row + 1);
            goto done;
        }
        st = h.failed ? KL_ERR_NOMEM : kl_edits_add(out, w0, c1, kl_strbuf_str(&h));
        kl_strbuf_release(&h);
        if (st != KL_OK) goto done;
    }
    /* the compute reads stage 0; a barrier after it */
    kl_snprintf(pat, sizeof pat, "(%s %% %s)", p->var, p->depth);
    nr = stage_ranges(ctx->text, cs, ce, pat, rs, re, zero, 32);
    if (nr > 32) {
        st = kl_rule_not_applicable(err, "the compute of the tile loop at line %u names its stage too often", line);
        goto done;
    }
    {
        char stagepat[96];
        kl_snprintf(stagepat, sizeof stagepat, "%% %s", p->depth);
        if (tt_count(ctx->text, cs, ce, stagepat) != nr) {
            st = kl_rule_not_applicable(err, "the compute of the tile loop at line %u names a stage other than (%s %% %s)", line,
                                        p->var, p->depth);
            goto done;
        }
    }
    for (unsigned k = 0; k < nr && st == KL_OK; k++) st = kl_edits_add(out, rs[k], re[k], zero[k] ? "0" : "");
    if (st == KL_OK) st = kl_edits_addf(out, ce, ce, "\n%s__syncthreads();", ind2);
    if (st != KL_OK) goto done;
    /* the prologue goes, with its comment lines (and one of the blank lines around it) */
    {
        uint32_t a0, a1;
        db_stmt_with_comments(ctx, p->pro, &a0, &a1);
        /* a `#pragma unroll` above it, and the comment lines above that */
        uint32_t pg = tt_pragma_above(ctx, ts_node_start_byte(p->pro));
        if (pg != ts_node_start_byte(p->pro) && a0 == rt_line_start(ctx, ts_node_start_byte(p->pro))) {
            a0 = rt_line_start(ctx, pg);
            while (a0 > 0) {
                uint32_t l0 = rt_line_start(ctx, a0 - 1), k = l0;
                while (k < a0 && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++;
                if (k + 1 >= a0 || ctx->text[k] != '/' || ctx->text[k + 1] != '/') break;
                a0 = l0;
            }
        }
        if (a0 == rt_line_start(ctx, a0) && a0 >= 2 && ctx->text[a0 - 1] == '\n' && ctx->text[a0 - 2] == '\n' &&
            a1 < ctx->len && ctx->text[a1] == '\n')
            a1++;
        st = kl_edits_add(out, a0, a1, "");
    }
done:
    kl_strbuf_release(&sb);
    free(loadt);
    free(moved);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
