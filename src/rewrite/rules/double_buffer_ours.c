/* double-buffer: the form apply writes (via=regs and via=cp.async), applied and removed. */
#include "rewrite/rules/double_buffer.h"

/* ---- text builders ------------------------------------------------------------------------------ */

/* The statement text of a load, with the innermost assignment replaced by `inner` (first line
 * unindented). */
static char *load_with(const db *d, const db_load *L, const char *inner)
{
    const kl_rule_ctx *ctx = d->ctx;
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t s = tt_pragma_above(ctx, ts_node_start_byte(L->stmt)), is = ts_node_start_byte(L->inner),
             ie = ts_node_end_byte(L->inner);
    kl_strbuf_add(&sb, ctx->text + s, is - s);
    kl_strbuf_adds(&sb, inner);
    kl_strbuf_add(&sb, ctx->text + ie, ts_node_end_byte(L->stmt) - ie);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* The load's value (its right side) with the loop variable advanced one tile: new string. */
static char *next_text(const db *d, TSNode e)
{
    char to[160];
    kl_snprintf(to, sizeof to, "(%s + %s)", d->var, d->step);
    tt_pair p = {d->var, to};
    return tt_subst(d->ctx->text, ts_node_start_byte(e), ts_node_end_byte(e), &p, 1);
}

/* The register subscript of a load: "[kl_i][kl_j]" (empty without loops). */
static void reg_index(const db_load *L, char *buf, size_t size)
{
    buf[0] = '\0';
    size_t k = 0;
    for (unsigned v = 0; v < L->nvars; v++) if (k < size) k += (size_t)snprintf(buf + k, size - k, "[%s]", L->vars[v]);
}

/* The element reference `X[stage]…` of the load's target, `X` replaced by `X[stage]`. */
static char *target_with_stage(const db *d, const db_load *L, const char *stage)
{
    TSNode l = tt_field(L->assign, "left");
    char to[128];
    kl_snprintf(to, sizeof to, "%s[%s]", d->arrs[L->arr].name, stage);
    tt_pair p = {d->arrs[L->arr].name, to};
    return tt_subst(d->ctx->text, ts_node_start_byte(l), ts_node_end_byte(l), &p, 1);
}

/* cp.async of one element: the target at stage, the value v (its text already advanced when
 * next), from the load's right side: `c ? P[i] : 0` or `P[i]`. */
static char *cp_async_text(const db *d, const db_load *L, const char *stage, bool next)
{
    const kl_rule_ctx *ctx = d->ctx;
    TSNode r = tt_field(L->assign, "right");
    char *tgt = target_with_stage(d, L, stage);
    char *out = NULL;
    if (!tgt) return NULL;
    TSNode cond = {0}, src = r;
    if (rt_is(r, "conditional_expression")) {
        cond = tt_field(r, "condition");
        src = tt_field(r, "consequence");
    }
    TSNode base = tt_field(src, "argument");
    char *ct = NULL, *st = NULL, *bt = NULL;
    if (!ts_node_is_null(cond)) ct = next ? next_text(d, cond) : rt_text(ctx, cond);
    st = next ? next_text(d, src) : rt_text(ctx, src);
    bt = rt_text(ctx, base);
    kl_strbuf sb = KL_STRBUF_INIT;
    if (st && bt && (ts_node_is_null(cond) || ct)) {
        if (ct)
            kl_strbuf_addf(&sb, "__pipeline_memcpy_async(&%s, %s ? &%s : %s, sizeof(float), %s ? 0 : sizeof(float));", tgt,
                           ct, st, bt, ct);
        else
            kl_strbuf_addf(&sb, "__pipeline_memcpy_async(&%s, &%s, sizeof(float));", tgt, st);
        if (!sb.failed) out = kl_strbuf_detach(&sb, NULL);
    }
    kl_strbuf_release(&sb);
    free(tgt);
    free(ct);
    free(st);
    free(bt);
    return out;
}

/* Can cp.async do this load: an f32 array loaded from an f32 pointer, `c ? P[i] : 0` or `P[i]`? */
bool db_cp_async_ok(const db *d, const db_load *L, char *why, size_t size)
{
    const kl_rule_ctx *ctx = d->ctx;
    unsigned line = ts_node_start_point(L->inner).row + 1;
    if (strcmp(d->arrs[L->arr].elem, "float")) {
        kl_snprintf(why, size, "cp.async: %s holds %s, not f32", d->arrs[L->arr].name, d->arrs[L->arr].elem);
        return false;
    }
    TSNode r = tt_field(L->assign, "right"), src = r;
    if (rt_is(r, "conditional_expression")) {
        TSNode z = tt_field(r, "alternative");
        char zt[32];
        tt_copy_text(ctx, z, zt, sizeof zt);
        if (!rt_is(z, "number_literal") || (strcmp(zt, "0") && strcmp(zt, "0.0f") && strcmp(zt, "0.f") &&
                                            strcmp(zt, "0.0"))) {
            kl_snprintf(why, size, "cp.async: the load at line %u does not fall back to zero", line);
            return false;
        }
        src = tt_field(r, "consequence");
    }
    TSNode base = tt_field(src, "argument");
    char elem[64] = "";
    char name[64];
    if (rt_is(base, "identifier")) tt_copy_text(ctx, base, name, sizeof name);
    if (!rt_is(src, "subscript_expression") || !rt_is(base, "identifier") ||
        !rt_pointer_param(ctx, &d->f, name, elem, sizeof elem) || strcmp(elem, "float")) {
        kl_snprintf(why, size, "cp.async: the load at line %u is not an element of an f32 pointer parameter", line);
        return false;
    }
    return true;
}

/* ---- apply ---------------------------------------------------------------------------------------- */

kl_status db_apply_edits(const db *d, bool cp, kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = d->ctx;
    char ind[64], ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(d->loop), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(d->st[0]), ind2, sizeof ind2);
    kl_strbuf pro = KL_STRBUF_INIT, head = KL_STRBUF_INIT, tail = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    char cur[160], next[256];
    if (!strcmp(d->step, "1")) kl_snprintf(cur, sizeof cur, "%s & 1", d->var);
    else kl_snprintf(cur, sizeof cur, "(%s / %s) & 1", d->var, d->step);
    {
        char *c = next_text(d, d->cond);
        kl_snprintf(next, sizeof next, "%s", c ? c : "");
        free(c);
    }
    /* the prologue: the loads of the first tile into stage 0 */
    kl_strbuf_addf(&pro, "{\n%s    const %s %s = %s;\n", ind, d->vtype, d->var, d->start);
    for (unsigned k = 0; k < d->nloads; k++) {
        const db_load *L = &d->loads[k];
        char *one = NULL;
        if (cp) {
            char *c = cp_async_text(d, L, "0", false);
            one = c ? load_with(d, L, c) : NULL;
            free(c);
        } else {
            char to[128];
            kl_snprintf(to, sizeof to, "%s[0]", d->arrs[L->arr].name);
            tt_pair p = {d->arrs[L->arr].name, to};
            one = tt_subst(ctx->text, tt_pragma_above(ctx, ts_node_start_byte(L->stmt)), ts_node_end_byte(L->stmt), &p, 1);
        }
        if (!one) goto oom;
        kl_strbuf_addf(&pro, "%s    %s\n", ind, one);
        free(one);
    }
    kl_strbuf_addf(&pro, "%s}\n%s%s\n%s", ind, ind, cp ? "__pipeline_commit();" : "__syncthreads();", ind);
    /* the head of the loop body */
    kl_strbuf_addf(&head, "const int kl_cur = %s;\n", cur);
    if (cp) {
        kl_strbuf_addf(&head, "%s__pipeline_wait_prior(0);\n%s__syncthreads();\n%sif (%s) {\n", ind2, ind2, ind2, next);
        for (unsigned k = 0; k < d->nloads; k++) {
            char *c = cp_async_text(d, &d->loads[k], "kl_cur ^ 1", true);
            char *one = c ? load_with(d, &d->loads[k], c) : NULL;
            char *re = one ? tt_indent_tail(one, 4) : NULL;
            free(c);
            free(one);
            if (!re) goto oom;
            kl_strbuf_addf(&head, "%s    %s\n", ind2, re);
            free(re);
        }
        kl_strbuf_addf(&head, "%s}\n%s__pipeline_commit();", ind2, ind2);
    } else {
        for (unsigned k = 0; k < d->nloads; k++) {
            const db_load *L = &d->loads[k];
            kl_strbuf_addf(&head, "%s%s kl_r%u", ind2, d->arrs[L->arr].elem, k);
            for (unsigned v = 0; v < L->nvars; v++) kl_strbuf_addf(&head, "[%lld]", L->trips[v]);
            kl_strbuf_adds(&head, ";\n");
        }
        kl_strbuf_addf(&head, "%sif (%s) {\n", ind2, next);
        kl_strbuf_addf(&tail, "if (%s) {\n", next);
        for (unsigned k = 0; k < d->nloads; k++) {
            const db_load *L = &d->loads[k];
            char ri[80], reg[96];
            reg_index(L, ri, sizeof ri);
            kl_snprintf(reg, sizeof reg, "kl_r%u%s", k, ri);
            char *v = next_text(d, tt_field(L->assign, "right"));
            char *tgt = target_with_stage(d, L, "kl_cur ^ 1");
            kl_strbuf a = KL_STRBUF_INIT, b = KL_STRBUF_INIT;
            kl_strbuf_addf(&a, "%s = %s;", reg, v ? v : "");
            kl_strbuf_addf(&b, "%s = %s;", tgt ? tgt : "", reg);
            char *la = !v || !tgt || a.failed || b.failed ? NULL : load_with(d, L, kl_strbuf_str(&a));
            char *lb = la ? load_with(d, L, kl_strbuf_str(&b)) : NULL;
            char *ra = la ? tt_indent_tail(la, 4) : NULL, *rb = lb ? tt_indent_tail(lb, 4) : NULL;
            if (ra && rb) {
                kl_strbuf_addf(&head, "%s    %s\n", ind2, ra);
                kl_strbuf_addf(&tail, "%s    %s\n", ind2, rb);
            }
            bool ok = ra && rb;
            free(v), free(tgt), free(la), free(lb), free(ra), free(rb);
            kl_strbuf_release(&a);
            kl_strbuf_release(&b);
            if (!ok) goto oom;
        }
        kl_strbuf_addf(&head, "%s}", ind2);
        kl_strbuf_addf(&tail, "%s}\n%s__syncthreads();", ind2, ind2);
    }
    if (pro.failed || head.failed || tail.failed) goto oom;
    uint32_t at = tt_pragma_above(ctx, ts_node_start_byte(d->loop));
    if ((st = kl_edits_add(out, at, at, kl_strbuf_str(&pro))) != KL_OK) goto done;
    if ((st = kl_edits_add(out, tt_pragma_above(ctx, ts_node_start_byte(d->st[0])), ts_node_end_byte(d->sync1),
                           kl_strbuf_str(&head))) != KL_OK)
        goto done;
    if (cp) {
        /* the trailing barrier goes: the next iteration's barrier protects the stage */
        uint32_t s, e;
        rt_stmt_range(ctx, d->sync2, NULL, &s, &e);
        TSNode prev = rt_prev_stmt(d->sync2);
        if (rt_line_blank_before(ctx, ts_node_start_byte(d->sync2)) && !ts_node_is_null(prev)) {
            s = ts_node_end_byte(prev);
            e = ts_node_end_byte(d->sync2);
        }
        if ((st = kl_edits_add(out, s, e, "")) != KL_OK) goto done;
    } else if ((st = kl_edits_add(out, ts_node_start_byte(d->sync2), ts_node_end_byte(d->sync2), kl_strbuf_str(&tail))) !=
               KL_OK) {
        goto done;
    }
    /* the compute reads the current stage */
    for (unsigned k = 0; k < d->narrs; k++) {
        bool staged = false;
        for (unsigned m = 0; m < d->nloads; m++) staged |= d->loads[m].arr == (int)k;
        if (!staged) continue;
        uint32_t ms[128], me[128];
        unsigned nm = tt_find(ctx->text, ts_node_end_byte(d->sync1), ts_node_start_byte(d->sync2), d->arrs[k].name, ms, me, 128);
        if (nm > 128) {
            st = kl_rule_not_applicable(err, "%s is read more than 128 times", d->arrs[k].name);
            goto done;
        }
        for (unsigned m = 0; m < nm; m++)
            if ((st = kl_edits_addf(out, ms[m], me[m], "%s[kl_cur]", d->arrs[k].name)) != KL_OK) goto done;
        if ((st = kl_edits_add(out, ts_node_end_byte(d->arrs[k].ident), ts_node_end_byte(d->arrs[k].ident), "[2]")) != KL_OK)
            goto done;
    }
    if (cp && !strstr(ctx->text, "cuda_pipeline.h")) {
        if ((st = kl_edits_add(out, 0, 0, "#include <cuda_pipeline.h>\n")) != KL_OK) goto done;
    }
    goto done;
oom:
    st = KL_ERR_NOMEM;
done:
    kl_strbuf_release(&pro);
    kl_strbuf_release(&head);
    kl_strbuf_release(&tail);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- remove ---------------------------------------------------------------------------------------- */

/* ours (regs / cp.async): the original loads come back from the prologue */
kl_status db_remove_ours(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err)
{
    (void)f;
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(p->st[0]), ind2, sizeof ind2);
    TSNode ps[16];
    unsigned np = tt_stmts(p->pro, ps, 16);
    if (np < 2 || np > 16) return kl_rule_not_applicable(err, "the prologue before line %u is not the loads of the first tile", line);
    /* the loads of the loop, from the prologue's statements (stage 0 dropped) */
    kl_strbuf loads = KL_STRBUF_INIT;
    for (unsigned k = 1; k < np; k++) {
        char *one = NULL;
        if (p->form == DB_CP) {
            /* __pipeline_memcpy_async(&X[0][..], c ? &P[i] : P, sizeof(float)[, c ? 0 : sizeof(float)]); */
            TSNode s = ps[k], call = {0};
            TSNode wrap_s = s;
            while (rt_is(s, "for_statement")) {
                TSNode b = tt_field(s, "body");
                if (rt_is(b, "compound_statement")) {
                    TSNode one1[2];
                    if (tt_stmts(b, one1, 2) != 1) break;
                    b = one1[0];
                }
                s = b;
            }
            call = tt_child(s, 0);
            TSNode args[4];
            unsigned na = 0;
            TSNode al = tt_field(call, "arguments");
            uint32_t c = tt_child_count(al);
            for (uint32_t m = 0; m < c && na < 4; m++)
                if (!rt_is(tt_child(al, m), "comment")) args[na++] = tt_child(al, m);
            if (!rt_is(call, "call_expression") || !rt_text_is(ctx, tt_field(call, "function"), "__pipeline_memcpy_async") ||
                na < 3 || !rt_is(args[0], "pointer_expression")) {
                kl_strbuf_release(&loads);
                return kl_rule_not_applicable(err, "line %u of the prologue is not a cp.async of one element",
                                              ts_node_start_point(ps[k]).row + 1);
            }
            TSNode tgt = tt_field(args[0], "argument");
            kl_strbuf a = KL_STRBUF_INIT;
            char *t = NULL;
            {
                /* drop the [0] right after the array name */
                TSNode in = tgt;
                while (rt_is(tt_field(in, "argument"), "subscript_expression")) in = tt_field(in, "argument");
                uint32_t ns = ts_node_start_byte(in), ne = ts_node_end_byte(tt_field(in, "argument"));
                kl_strbuf_add(&a, ctx->text + ns, ne - ns);
                kl_strbuf_add(&a, ctx->text + ts_node_end_byte(in), ts_node_end_byte(tgt) - ts_node_end_byte(in));
            }
            TSNode src = args[1];
            if (rt_is(src, "conditional_expression")) {
                TSNode cons = tt_field(src, "consequence");
                char *ct = rt_text(ctx, tt_field(src, "condition"));
                char *st = rt_is(cons, "pointer_expression") ? rt_text(ctx, tt_field(cons, "argument")) : NULL;
                kl_strbuf_addf(&a, " = %s ? %s : 0.0f;", ct ? ct : "", st ? st : "");
                free(ct);
                free(st);
            } else {
                char *st = rt_is(src, "pointer_expression") ? rt_text(ctx, tt_field(src, "argument")) : NULL;
                kl_strbuf_addf(&a, " = %s;", st ? st : "");
                free(st);
            }
            if (!a.failed) {
                kl_strbuf w = KL_STRBUF_INIT;
                uint32_t ws = tt_pragma_above(ctx, ts_node_start_byte(wrap_s)), is = ts_node_start_byte(s),
                         ie = ts_node_end_byte(s);
                kl_strbuf_add(&w, ctx->text + ws, is - ws);
                kl_strbuf_adds(&w, kl_strbuf_str(&a));
                kl_strbuf_add(&w, ctx->text + ie, ts_node_end_byte(wrap_s) - ie);
                t = w.failed ? NULL : kl_strbuf_detach(&w, NULL);
                kl_strbuf_release(&w);
            }
            kl_strbuf_release(&a);
            one = t;
        } else {
            tt_pair pairs[8];
            char from[8][80];
            unsigned npair = 0;
            for (unsigned m = 0; m < p->narrs && npair < 8; m++) {
                if (!p->staged[m]) continue;
                kl_snprintf(from[npair], sizeof from[0], "%s[0]", p->arrs[m].name);
                pairs[npair].from = from[npair];
                pairs[npair].to = p->arrs[m].name;
                npair++;
            }
            one = tt_subst(ctx->text, tt_pragma_above(ctx, ts_node_start_byte(ps[k])), ts_node_end_byte(ps[k]), pairs,
                           npair);
        }
        if (!one) {
            kl_strbuf_release(&loads);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        kl_strbuf_addf(&loads, "%s%s", k > 1 ? "\n" : "", k > 1 ? ind2 : "");
        kl_strbuf_adds(&loads, one);
        free(one);
    }
    kl_strbuf_addf(&loads, "\n%s__syncthreads();", ind2);
    kl_status st = KL_OK;
    /* the prologue goes (up to where the loop, or its pragma, starts) */
    uint32_t at = tt_pragma_above(ctx, ts_node_start_byte(p->loop));
    if ((st = kl_edits_add(out, ts_node_start_byte(p->pro), at, "")) != KL_OK) goto done;
    /* the head of the body: up to the prefetch `if` (regs) or the commit (cp.async) */
    unsigned ihead = 0;
    for (unsigned k = 0; k < p->n; k++) {
        bool end = p->form == DB_CP ? tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]),
                                              "__pipeline_commit")
                                    : rt_is(p->st[k], "if_statement");
        if (end) {
            ihead = k;
            break;
        }
    }
    if (!ihead || ihead + 2 > p->n) {
        st = kl_rule_not_applicable(err, "the tile loop at line %u is not the form this transform writes", line);
        goto done;
    }
    if ((st = kl_edits_add(out, ts_node_start_byte(p->st[0]), ts_node_end_byte(p->st[ihead]), kl_strbuf_str(&loads))) !=
        KL_OK)
        goto done;
    /* the tail: the store `if` and the barrier (regs), or nothing (cp.async: the barrier comes back) */
    TSNode last = p->st[p->n - 1];
    if (p->form == DB_REGS) {
        TSNode store = p->st[p->n - 2];
        if (!rt_is_syncthreads(ctx, last) || !rt_is(store, "if_statement")) {
            st = kl_rule_not_applicable(err, "the tile loop at line %u does not end with the store and a barrier", line);
            goto done;
        }
        if ((st = kl_edits_add(out, ts_node_start_byte(store), ts_node_end_byte(last), "__syncthreads();")) != KL_OK) goto done;
    } else {
        if ((st = kl_edits_addf(out, ts_node_end_byte(last), ts_node_end_byte(last), "\n%s__syncthreads();", ind2)) != KL_OK)
            goto done;
    }
    /* the compute: X[kl_cur] → X */
    for (unsigned m = 0; m < p->narrs; m++) {
        if (!p->staged[m]) continue;
        char pat[96];
        kl_snprintf(pat, sizeof pat, "%s[kl_cur]", p->arrs[m].name);
        uint32_t ms[128], me[128];
        uint32_t ce = p->form == DB_CP ? ts_node_end_byte(last) : ts_node_start_byte(last);
        unsigned nm = tt_find(ctx->text, ts_node_end_byte(p->st[ihead]), ce, pat, ms, me, 128);
        for (unsigned k = 0; k < nm && k < 128; k++)
            if ((st = kl_edits_add(out, ms[k], me[k], p->arrs[m].name)) != KL_OK) goto done;
    }
    /* the include apply put first, when nothing else uses the pipeline */
    static const char inc[] = "#include <cuda_pipeline.h>\n";
    if (p->form == DB_CP && !strncmp(ctx->text, inc, sizeof inc - 1)) {
        uint32_t s0 = ts_node_start_byte(p->pro), e0 = ts_node_end_byte(p->loop);
        bool others = false;
        static const char *const calls[] = {"__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior"};
        for (unsigned k = 0; k < 3; k++)
            others |= tt_count(ctx->text, 0, (uint32_t)ctx->len, calls[k]) != tt_count(ctx->text, s0, e0, calls[k]);
        if (!others && (st = kl_edits_add(out, 0, sizeof inc - 1, "")) != KL_OK) goto done;
    }
    st = db_drop_stage_decls(ctx, p, out, err);
done:
    kl_strbuf_release(&loads);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
