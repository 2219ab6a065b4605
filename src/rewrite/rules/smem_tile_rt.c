/* smem-tile: a stencil with several outputs per thread along x over the halo tile (a register tile;
 * apply and remove; smem_tile.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/smem_tile.h"
#include "util/util.h"

#define NAME "smem-tile"

/* ---- apply with several outputs per thread along x (a register tile) --------------------------------
 *
 * outputs_x = OX > 1, for a 2-D stencil (offset loops over y outside x) in the output guard
 * `if (G) { pre; loop; post }`, whose read sits in `ACC += E * READ;` (or READ * E) with ACC declared
 * in pre and E the same for every output of the thread (no threadIdx.x, nothing declared in the loops):
 * each thread computes the OX adjacent outputs x0 .. x0+OX-1 of a block OX times as wide. The
 * statements before the guard run with threadIdx.x -> threadIdx.x * OX and blockIdx.x -> blockIdx.x * OX
 * (the thread's first column); the halo tile is (BX - 1) * OX + RN floats wide, RN = OX + count - 1
 * rounded up to the vector width VW (OX, at most 4); for each offset row a thread reads its RN values
 * once as VW-wide vectors and each E feeds OX accumulators. The outputs are stored by the statements
 * before the guard run again per output (threadIdx.x -> threadIdx.x * OX + c), ACC = its accumulator, then
 * `if (G) { post }`. The read's guard is left out: the tile holds 0 where it failed, so the product
 * adds 0 — the same sum unless E is an infinity or NaN at an offset outside the image. With a run-time
 * count the original loop stays, per output, for counts beyond max_radius. */

/* The replacements of threadIdx.x and blockIdx.x (subst_x). */
typedef struct bx_sub {
    const kl_rule_ctx *ctx;
    smem_tile__rep reps[64];
    unsigned n;
    const char *tx, *bx;
    bool grid;                /* gridDim.x seen */
} bx_sub;

static bool bx_visit(TSNode n, void *user)
{
    bx_sub *b = user;
    if (!rt_is(n, "field_expression")) return true;
    TSNode arg = rt_field(n, "argument"), fld = rt_field(n, "field");
    if (rt_is(fld, "template_method")) fld = rt_field(fld, "name");
    if (!rt_is(arg, "identifier") || !smem_tile__text_is(b->ctx, fld, "x")) return true;
    const char *to = smem_tile__text_is(b->ctx, arg, "threadIdx") ? b->tx : smem_tile__text_is(b->ctx, arg, "blockIdx") ? b->bx : NULL;
    if (smem_tile__text_is(b->ctx, arg, "gridDim")) b->grid = true;
    if (to && b->n < 64) b->reps[b->n++] = (smem_tile__rep){ts_node_start_byte(n), ts_node_end_byte(fld), to};
    return false;
}

/* The statements of scope inside [a,b) as text, with threadIdx.x and blockIdx.x replaced by tx and bx;
 * *grid is set when gridDim.x is read (a wider block would change it). NULL with more than 64 uses. */
static char *subst_x(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, TSNode scope, const char *tx, const char *bx,
                     bool *grid)
{
    bx_sub s = {.ctx = ctx, .tx = tx, .bx = bx};
    for (uint32_t i = 0; i < ts_node_named_child_count(scope); i++) {
        TSNode c = ts_node_named_child(scope, i);
        if (ts_node_start_byte(c) >= a && ts_node_end_byte(c) <= b) kl_ast_walk(c, bx_visit, &s);
    }
    if (grid) *grid |= s.grid;
    return s.n >= 64 ? NULL : smem_tile__splice(ctx, a, b, s.reps, s.n);
}

/* Are the statements of compound c only declarations, `if (…) continue;`, and `keep`? */
static bool only_decls_and(TSNode c, TSNode keep)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(c); i++) {
        TSNode q = ts_node_named_child(c, i);
        if (ts_node_eq(q, keep) || rt_is(q, "comment") || rt_is(q, "declaration") || smem_tile__is_continue_if(q)) continue;
        return false;
    }
    return true;
}

/* The first of the `#pragma …` lines right above byte off (only blanks before off on its line, and
 * before each directive on its own), or off when there is none: directives that belong to the
 * statement at off. */
static uint32_t pragmas_above(const kl_rule_ctx *ctx, uint32_t off)
{
    uint32_t lead = off;
    while (rt_line_blank_before(ctx, lead)) {
        uint32_t ls = rt_line_start(ctx, lead);
        if (ls == 0) break;
        uint32_t k = rt_line_start(ctx, ls - 1);
        while (k < ls && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++;
        if (ls - k < 7 || memcmp(ctx->text + k, "#pragma", 7)) break;
        lead = k;
    }
    return lead;
}

/* The directive lines in [a, b) (pragmas_above's), each trimmed and written after indent. */
static void add_directives(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *indent, kl_strbuf *sb)
{
    for (uint32_t qa = a; qa < b;) {
        uint32_t qe = rt_line_end(ctx, qa), qb = qe;
        while (qb > qa && isspace((unsigned char)ctx->text[qb - 1])) qb--;
        kl_strbuf_addf(sb, "%s%.*s\n", indent, (int)(qb - qa), ctx->text + qa);
        qa = qe;
        while (qa < b && isspace((unsigned char)ctx->text[qa])) qa++;
    }
}

/* Every launch of the kernel covers the same columns with blocks OX times as wide: the grid's x
 * extent G becomes (G + OX - 1) / OX (ceil(ceil(w / B) / OX) = ceil(w / (B * OX))). */
static kl_status widen_launches(const kl_rule_ctx *ctx, const smem_tile__sa *s, int ox, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = NULL;
    for (unsigned i = 0; i < nf && !f; i++)
        if (ts_node_eq(fs[i].def, s->fn)) f = &fs[i];
    if (!f) return kl_rule_not_applicable(err, "%s: the kernel is not a function of the file", src);
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, f->name, ls, 16);
    if (!n) return kl_rule_not_applicable(err, "%s: kernel '%s' is not launched in this file", src, f->name);
    uint32_t done[16];
    unsigned nd = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode cfg = ls[i].cfg[0];
        TSNode list = ls[i].ncfg ? rt_dim3_args(ctx, &ls[i], cfg) : (TSNode){0};
        if (ts_node_is_null(list) || ts_node_named_child_count(list) < 2)
            return kl_rule_not_applicable(err, "%s:%u: the grid of this launch is not a dim3 of the file", src,
                                          kl_node_span(ls[i].call).line);
        if (rt_is(cfg, "identifier")) {
            char nm[64];
            smem_tile__squeezed(ctx, cfg, nm, sizeof nm);
            unsigned launches = 0;
            for (unsigned j = 0; j < n; j++)
                if (ts_node_eq(ls[j].host.def, ls[i].host.def) && rt_is(ls[j].cfg[0], "identifier") &&
                    smem_tile__text_is(ctx, ls[j].cfg[0], nm))
                    launches++;
            if (smem_tile__uses_of(ctx, ls[i].host.body, nm) != 1 + launches) {
                /* the grid serves more than this kernel (specialize's dispatch launches the generic
                 * kernel with it too): this launch alone gets the narrower grid */
                kl_status st = kl_edits_addf(out, ts_node_start_byte(cfg), ts_node_end_byte(cfg),
                                             "dim3((%s.x + %d) / %d, %s.y, %s.z)", nm, ox - 1, ox, nm, nm);
                if (st != KL_OK) return kl_error_set(err, st, "out of memory");
                continue;
            }
        }
        TSNode ex = rt_dim3_extent(list, 0);
        uint32_t a = ts_node_start_byte(ex), b = ts_node_end_byte(ex);
        bool seen = false;
        for (unsigned j = 0; j < nd; j++) seen |= done[j] == a;
        if (seen) continue;
        if (nd < 16) done[nd++] = a;
        kl_status st = kl_edits_addf(out, a, b, "(%.*s + %d) / %d", (int)(b - a), ctx->text + a, ox - 1, ox);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

kl_status smem_tile__apply_stencil_rt(const kl_rule_ctx *ctx, smem_tile__sa *s, int64_t maxr, int ox, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(s->outer);
#define RWHY(...) kl_rule_not_applicable(err, __VA_ARGS__)
    if (s->nd != 2 || s->d[0].axis != 'y' || s->d[1].axis != 'x')
        return RWHY("%s:%u: outputs_x needs a 2-D stencil whose outer offset loop moves along y", src, ln);
    if (s->form != 'I') return RWHY("%s:%u: outputs_x needs the loop inside the output guard `if (…) { … }`", src, ln);
    if (strcmp(s->elem, "float")) return RWHY("%s:%u: outputs_x reads rows of float; '%s' holds %s", src, ln, s->arr, s->elem);
    if (maxr < 1 || maxr > 32) return RWHY("%s:%u: max_radius %lld is outside 1..32", src, ln, (long long)maxr);
    /* the accumulation: ACC += E * READ */
    TSNode st = ts_node_parent(s->read);
    while (rt_is(st, "parenthesized_expression")) st = ts_node_parent(st);
    TSNode mul = st, asg = ts_node_parent(mul);
    if (!rt_is(mul, "binary_expression") || !smem_tile__text_is(ctx, rt_field(mul, "operator"), "*") ||
        !rt_is(asg, "assignment_expression") || !smem_tile__text_is(ctx, rt_field(asg, "operator"), "+=") ||
        !ts_node_eq(rt_field(asg, "right"), mul) || !rt_is(ts_node_parent(asg), "expression_statement") ||
        !rt_is(rt_field(asg, "left"), "identifier"))
        return RWHY("%s:%u: the read is not in `acc += e * %s[…];`", src, kl_ast_line(s->read), s->arr);
    TSNode accstmt = ts_node_parent(asg);
    TSNode E = ts_node_eq(smem_tile__strip(rt_field(mul, "left")), s->read) ? rt_field(mul, "right") : rt_field(mul, "left");
    char acc[64];
    uint32_t aa = ts_node_start_byte(rt_field(asg, "left")), ab = ts_node_end_byte(rt_field(asg, "left"));
    kl_snprintf(acc, sizeof acc, "%.*s", (int)(ab - aa), ctx->text + aa);
    if (smem_tile__uses_of(ctx, s->outer, acc) != 1) return RWHY("%s:%u: '%s' is used in the loop besides the sum", src, ln, acc);
    /* ACC: declared in pre with an initializer */
    TSNode accinit = {0};
    char acctype[64] = "";
    for (unsigned i = 0; i < s->npre; i++) {
        TSNode d = s->pre[i];
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dd = ts_node_named_child(d, k);
            if (rt_is(dd, "init_declarator") && smem_tile__text_is(ctx, rt_field(dd, "declarator"), acc)) {
                accinit = rt_field(dd, "value");
                TSNode ty = rt_field(d, "type");
                kl_snprintf(acctype, sizeof acctype, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                            ctx->text + ts_node_start_byte(ty));
            }
        }
    }
    if (ts_node_is_null(accinit)) return RWHY("%s:%u: '%s' is not declared with a value before the loop", src, ln, acc);
    /* E: the same for the thread's outputs */
    {
        char et[512];
        smem_tile__squeezed(ctx, E, et, sizeof et);
        if (strstr(et, "threadIdx.x")) return RWHY("%s:%u: the factor `%s` depends on threadIdx.x", src, kl_ast_line(E), et);
        char names[32][64];
        smem_tile__ident_scan is = {.ctx = ctx, .names = names, .max = 32};
        kl_ast_walk(E, smem_tile__ident_visit, &is);
        TSNode fbody = kl_ast_function_body(s->fn);
        for (unsigned w = 0; w < is.n && w < 32; w++) {
            smem_tile__decl_scan ds = {.ctx = ctx, .name = names[w]};
            kl_ast_walk(s->outer, smem_tile__decl_scan_visit, &ds);
            if (!ts_node_is_null(ds.found) && !ts_node_eq(ds.found, rt_field(s->d[0].loop, "initializer")) &&
                !ts_node_eq(ds.found, rt_field(s->d[1].loop, "initializer")))
                return RWHY("%s:%u: the factor `%s` reads '%s', declared in the loops", src, kl_ast_line(E), et, names[w]);
            for (uint32_t k = 0; k < ts_node_named_child_count(fbody); k++) {
                TSNode q = ts_node_named_child(fbody, k);
                if (ts_node_eq(q, s->guard)) break;
                char qt[512];
                smem_tile__squeezed(ctx, q, qt, sizeof qt);
                if (smem_tile__declares(ctx, q, names[w]) && strstr(qt, "threadIdx.x"))
                    return RWHY("%s:%u: the factor `%s` reads '%s', which depends on threadIdx.x", src, kl_ast_line(E), et,
                                names[w]);
            }
        }
    }
    /* the loops hold only declarations, continues and the way to the sum */
    for (TSNode c = accstmt; !ts_node_eq(c, s->outer); c = ts_node_parent(c)) {
        TSNode p = ts_node_parent(c);
        if (rt_is(p, "compound_statement") && !only_decls_and(p, c))
            return RWHY("%s:%u: the loop does more than accumulate `%s`", src, kl_ast_line(p), acc);
        if (rt_is(p, "if_statement") && !ts_node_is_null(rt_field(p, "alternative")))
            return RWHY("%s:%u: the sum sits in an if with an else", src, kl_ast_line(p));
    }
    /* the statements before the guard: declarations, run per output too */
    TSNode fbody = kl_ast_function_body(s->fn);
    uint32_t ta = 0, tb = 0;
    bool any = false;
    for (uint32_t k = 0; k < ts_node_named_child_count(fbody); k++) {
        TSNode q = ts_node_named_child(fbody, k);
        if (ts_node_eq(q, s->guard)) break;
        if (rt_is(q, "comment")) continue;
        if (!smem_tile__hoistable(ctx, q)) return RWHY("%s:%u: the statement before the guard is not a plain declaration", src, kl_ast_line(q));
        if (!any) ta = rt_line_start(ctx, ts_node_start_byte(q));
        tb = rt_line_end(ctx, ts_node_end_byte(q) - 1);
        any = true;
    }
    if (!any) return RWHY("%s:%u: no declaration of the thread's column before the guard", src, ln);
    if (!ts_node_is_null(rt_next_stmt(s->guard))) return RWHY("%s:%u: statements follow the output guard", src, ln);
    /* the guard's body: pre, the loop, post */
    TSNode gbody = rt_field(s->guard, "consequence");
    uint32_t pa = 0, pb = 0;
    bool after = false, havepost = false;
    for (uint32_t k = 0; k < ts_node_named_child_count(gbody); k++) {
        TSNode q = ts_node_named_child(gbody, k);
        if (ts_node_eq(q, s->outer)) {
            after = true;
            continue;
        }
        if (!after) continue;
        if (!havepost) pa = rt_line_start(ctx, ts_node_start_byte(q));
        pb = rt_line_end(ctx, ts_node_end_byte(q) - 1);
        havepost = true;
    }
    if (!havepost) return RWHY("%s:%u: nothing after the loop stores the sum", src, ln);
    bool runtime = !s->d[0].fixed || !s->d[1].fixed;
    int vw = ox < 4 ? ox : 4;
    int64_t extx = s->d[1].fixed ? s->d[1].ntrip : 2 * maxr + 1;
    int64_t rn = (ox + extx - 1 + vw - 1) / vw * vw;
    int64_t bx = s->dim[0], by = s->dim[1];
    int64_t sw = (bx - 1) * ox + rn;
    int64_t rows = s->d[0].fixed ? by + s->d[0].ntrip - 1 : by + 2 * maxr;
    if (rows * sw * 4 > 48 * 1024)
        return RWHY("%s:%u: the tile takes %lld bytes of shared memory, over 48 KiB", src, ln, (long long)(rows * sw * 4));
    /* names */
    char tname[96], base[80], cn[32], rown[32], accn[32], fn_[32];
    kl_snprintf(base, sizeof base, "%s_s", s->arr);
    smem_tile__fresh_name(ctx, s->fn, base, tname, sizeof tname);
    smem_tile__fresh_name(ctx, s->fn, "kl_c", cn, sizeof cn);
    smem_tile__fresh_name(ctx, s->fn, "kl_row", rown, sizeof rown);
    smem_tile__fresh_name(ctx, s->fn, "kl_acc", accn, sizeof accn);
    smem_tile__fresh_name(ctx, s->fn, "kl_f", fn_, sizeof fn_);
    char fsn[32], vn[32];
    smem_tile__fresh_name(ctx, s->fn, "kl_f_s", fsn, sizeof fsn);
    smem_tile__fresh_name(ctx, s->fn, "kl_v", vn, sizeof vn);
    for (unsigned d = 0; d < 2; d++) {
        kl_snprintf(base, sizeof base, "s%c", s->d[d].axis);
        smem_tile__fresh_name(ctx, s->fn, base, s->d[d].svar, sizeof s->d[d].svar);
    }
    kl_status stt = KL_OK;
    char *top = NULL, *top_c = NULL, *pre = NULL, *post = NULL, *value = NULL, *guardtxt = NULL, *ltext = NULL;
    char *ctext = NULL, *etext = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    char txo[64], txc[96], bxo[64];
    kl_snprintf(txo, sizeof txo, "(threadIdx.x * %d)", ox);
    kl_snprintf(txc, sizeof txc, "(threadIdx.x * %d + %s)", ox, cn);
    kl_snprintf(bxo, sizeof bxo, "(blockIdx.x * %d)", ox);
    bool grid = false;
    top = subst_x(ctx, ta, tb, fbody, txo, bxo, &grid);
    top_c = subst_x(ctx, ta, tb, fbody, txc, bxo, &grid);
    if (grid) {
        stt = RWHY("%s:%u: the statements before the guard read gridDim.x, which a wider block changes", src, ln);
        goto done;
    }
    char ind[64], unit[64], lind[64];
    rt_indent_of(ctx, ts_node_start_byte(s->guard), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(s->outer), lind, sizeof lind);
    if (strlen(lind) <= strlen(ind)) {
        stt = RWHY("%s:%u: the loop is not indented inside the guard", src, ln);
        goto done;
    }
    kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    /* directives right before the loop (`#pragma unroll`) belong to it, not to the statements before it */
    uint32_t lead = pragmas_above(ctx, ts_node_start_byte(s->outer));
    if (s->npre) {
        uint32_t a = rt_line_start(ctx, ts_node_start_byte(s->pre[0]));
        uint32_t b = rt_line_start(ctx, lead);
        pre = rt_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) {
            stt = kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs or left of it",
                                         src, kl_ast_line(s->pre[0]));
            goto done;
        }
    } else pre = kl_strdup("");
    post = havepost ? rt_reindent(ctx->text + pa, pb - pa, 0) : kl_strdup("");
    guardtxt = rt_text(ctx, smem_tile__if_cond(s->guard));
    etext = rt_text(ctx, E);
    ltext = rt_text(ctx, s->outer);
    if (!top || !top_c || !pre || !post || !guardtxt || !etext || !ltext) goto oom;
    /* the run-time condition (counts within max_radius) */
    {
        kl_strbuf cb = KL_STRBUF_INIT;
        for (unsigned d = 0; d < 2; d++) {
            if (s->d[d].fixed) continue;
            char t1[256], t0[256];
            smem_tile__squeeze_str(s->d[d].trip, t1, sizeof t1);
            smem_tile__squeeze_str(s->d[0].trip, t0, sizeof t0);
            if (d == 1 && !s->d[0].fixed && !strcmp(t0, t1)) continue;
            kl_strbuf_addf(&cb, "%s%s <= 2 * %lld + 1", cb.len ? " && " : "", s->d[d].trip, (long long)maxr);
        }
        ctext = kl_strbuf_detach(&cb, NULL);
        if (!ctext) goto oom;
    }
    /* the stored value */
    value = smem_tile__stencil_value(ctx, s);
    if (!value) goto oom;
    /* the body, written whole */
    uint32_t body_a = rt_line_end(ctx, ts_node_start_byte(fbody)), body_b = rt_line_start(ctx, ts_node_end_byte(fbody) - 1);
    if (body_a > ta || !rt_line_blank_before(ctx, ts_node_end_byte(fbody) - 1)) {
        stt = RWHY("%s: expected the kernel's braces on lines of their own", src);
        goto done;
    }
    kl_strbuf_add(&sb, ctx->text + body_a, ta - body_a);  /* comments before the first statement */
    kl_strbuf_adds(&sb, top);
    kl_strbuf_addf(&sb, "%s// " NAME ": '%s' with its halo in shared memory, %d outputs per thread along x (a register "
                        "tile)%s%s\n", ind, s->arr, ox, runtime ? "; the loop reads global memory unless " : "",
                   runtime ? ctext : "");
    kl_strbuf_addf(&sb, "%s__shared__ __align__(16) %s %s[%s + %lld][(%s - 1) * %d + %lld];\n", ind, s->elem, tname,
                   s->btext[1], (long long)(rows - by), s->btext[0], ox, (long long)rn);
    kl_strbuf_addf(&sb, "%s__shared__ %s %s[%lld];  // the factor `%s` per offset pair\n", ind, acctype, fsn,
                   (long long)((s->d[0].fixed ? s->d[0].ntrip : 2 * maxr + 1) * (s->d[1].fixed ? s->d[1].ntrip : 2 * maxr + 1)),
                   etext);
    kl_strbuf_adds(&sb, pre);
    char in1[80];
    kl_snprintf(in1, sizeof in1, "%s%s", ind, runtime ? unit : "");
    if (runtime) kl_strbuf_addf(&sb, "%sif (%s) {\n", ind, ctext);
    /* the load: each element is what the thread at that offset would have read, or 0 */
    {
        const smem_tile__sdim *Y = &s->d[0], *X = &s->d[1];
        char sty[256], stx[256];
        smem_tile__squeeze_str(Y->L->start, sty, sizeof sty);
        smem_tile__squeeze_str(X->L->start, stx, sizeof stx);
        if (Y->fixed) kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y; %s < %s + %lld; %s += %s) {\n", in1, Y->svar, Y->svar,
                                     s->btext[1], (long long)(Y->ntrip - 1), Y->svar, s->btext[1]);
        else kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y; %s < %s + %s - 1; %s += %s) {\n", in1, Y->svar, Y->svar,
                            s->btext[1], Y->trip, Y->svar, s->btext[1]);
        if (!strcmp(sty, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s - (int)threadIdx.y;\n", in1, unit, Y->type, Y->L->var, Y->svar);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s - (int)threadIdx.y;\n", in1, unit, Y->type, Y->L->var, Y->L->start, Y->svar);
        for (unsigned q = 0; q < Y->ndecls; q++) {
            char dind[64];
            rt_indent_of(ctx, ts_node_start_byte(Y->decls[q]), dind, sizeof dind);
            char *t = rt_text(ctx, Y->decls[q]);
            char *r = t ? smem_tile__reindent_node_text(dind, t, (int)(strlen(in1) + strlen(unit)) - (int)strlen(dind)) : NULL;
            free(t);
            if (!r) goto oom;
            kl_strbuf_addf(&sb, "%s%s%s\n", in1, unit, r);
            free(r);
        }
        kl_strbuf_addf(&sb, "%s%sfor (int %s = threadIdx.x; %s < (%s - 1) * %d + %lld; %s += %s) {\n", in1, unit, X->svar,
                       X->svar, s->btext[0], ox, (long long)rn, X->svar, s->btext[0]);
        if (!strcmp(stx, "0"))
            kl_strbuf_addf(&sb, "%s%s%s%s %s = %s - (int)(threadIdx.x * %d);\n", in1, unit, unit, X->type, X->L->var, X->svar, ox);
        else
            kl_strbuf_addf(&sb, "%s%s%s%s %s = (%s) + %s - (int)(threadIdx.x * %d);\n", in1, unit, unit, X->type, X->L->var,
                           X->L->start, X->svar, ox);
        for (unsigned q = 0; q < X->ndecls; q++) {
            char dind[64];
            rt_indent_of(ctx, ts_node_start_byte(X->decls[q]), dind, sizeof dind);
            char *t = rt_text(ctx, X->decls[q]);
            char *r = t ? smem_tile__reindent_node_text(dind, t, (int)(strlen(in1) + 2 * strlen(unit)) - (int)strlen(dind)) : NULL;
            free(t);
            if (!r) goto oom;
            kl_strbuf_addf(&sb, "%s%s%s%s\n", in1, unit, unit, r);
            free(r);
        }
        kl_strbuf_addf(&sb, "%s%s%s%s[%s][%s] = %s;\n", in1, unit, unit, tname, Y->svar, X->svar, value);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
        /* the factor, once per offset pair, staged too: every output of every thread reads it */
        char ty_[300], tx_[300];
        if (Y->fixed) kl_snprintf(ty_, sizeof ty_, "%lld", (long long)Y->ntrip);
        else kl_snprintf(ty_, sizeof ty_, "%s", smem_tile__simple_token(Y->trip) ? Y->trip : "");
        if (X->fixed) kl_snprintf(tx_, sizeof tx_, "%lld", (long long)X->ntrip);
        else kl_snprintf(tx_, sizeof tx_, "%s", smem_tile__simple_token(X->trip) ? X->trip : "");
        if (!ty_[0]) kl_snprintf(ty_, sizeof ty_, "(%s)", Y->trip);
        if (!tx_[0]) kl_snprintf(tx_, sizeof tx_, "(%s)", X->trip);
        kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y * %s + threadIdx.x; %s < %s * %s; %s += %s * %s) {\n", in1, cn,
                       s->btext[0], cn, ty_, tx_, cn, s->btext[0], s->btext[1]);
        if (!strcmp(sty, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s / %s;\n", in1, unit, Y->type, Y->L->var, cn, tx_);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s / %s;\n", in1, unit, Y->type, Y->L->var, Y->L->start, cn, tx_);
        if (!strcmp(stx, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s %% %s;\n", in1, unit, X->type, X->L->var, cn, tx_);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s %% %s;\n", in1, unit, X->type, X->L->var, X->L->start, cn, tx_);
        kl_strbuf_addf(&sb, "%s%s%s[%s] = %s;\n%s}\n", in1, unit, fsn, cn, etext, in1);
        kl_strbuf_addf(&sb, "%s__syncthreads();\n", in1);
        /* the register tile: per offset row, the thread's values read once as vectors */
        char yc[320], xo[256];
        smem_tile__tile_coord(Y, yc, sizeof yc);
        if (!strcmp(stx, "0")) kl_snprintf(xo, sizeof xo, "%s", X->L->var);
        else kl_snprintf(xo, sizeof xo, "(%s - (%s))", X->L->var, X->L->start);
        kl_strbuf_addf(&sb, "%s%s %s[%d];\n", in1, acctype, accn, ox);
        kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int %s = 0; %s < %d; %s++) %s[%s] = ", in1, in1, cn, cn, ox, cn, accn, cn);
        {
            char *it = rt_text(ctx, accinit);
            if (!it) goto oom;
            kl_strbuf_addf(&sb, "%s;\n", it);
            free(it);
        }
        uint32_t ya = ts_node_start_byte(Y->loop), yb = ts_node_start_byte(rt_field(Y->loop, "body"));
        uint32_t xa = ts_node_start_byte(X->loop), xb = ts_node_start_byte(rt_field(X->loop, "body"));
        if (ts_node_eq(Y->loop, s->outer)) add_directives(ctx, lead, ya, in1, &sb); /* the loop's own `#pragma unroll` */
        kl_strbuf_addf(&sb, "%s%.*s{\n", in1, (int)(yb - ya), ctx->text + ya);
        kl_strbuf_addf(&sb, "%s%s%s %s[%lld];\n", in1, unit, s->elem, rown, (long long)rn);
        kl_strbuf_addf(&sb, "%s%s#pragma unroll\n%s%sfor (int %s = 0; %s < %lld; %s++) {\n", in1, unit, in1, unit, cn, cn,
                       (long long)(rn / vw), cn);
        if (vw == 1)
            kl_strbuf_addf(&sb, "%s%s%s%s[%s] = %s[%s][threadIdx.x * %d + %s];\n", in1, unit, unit, rown, cn, tname, yc, ox, cn);
        else {
            kl_strbuf_addf(&sb, "%s%s%sconst float%d %s = *reinterpret_cast<const float%d*>(&%s[%s][threadIdx.x * %d + %d * %s]);\n",
                           in1, unit, unit, vw, vn, vw, tname, yc, ox, vw, cn);
            static const char comp[] = "xyzw";
            for (int m = 0; m < vw; m++)
                kl_strbuf_addf(&sb, "%s%s%s%s[%d * %s + %d] = %s.%c;\n", in1, unit, unit, rown, vw, cn, m, vn, comp[m]);
        }
        kl_strbuf_addf(&sb, "%s%s}\n", in1, unit);
        kl_strbuf_addf(&sb, "%s%s%.*s{\n", in1, unit, (int)(xb - xa), ctx->text + xa);
        {
            char yo[256];
            if (!strcmp(sty, "0")) kl_snprintf(yo, sizeof yo, "%s", Y->L->var);
            else kl_snprintf(yo, sizeof yo, "(%s - (%s))", Y->L->var, Y->L->start);
            kl_strbuf_addf(&sb, "%s%s%sconst %s %s = %s[%s * %s + %s];\n", in1, unit, unit, acctype, fn_, fsn, yo, tx_, xo);
        }
        kl_strbuf_addf(&sb, "%s%s%s#pragma unroll\n%s%s%sfor (int %s = 0; %s < %d; %s++) %s[%s] += %s * %s[%s + %s];\n", in1,
                       unit, unit, in1, unit, unit, cn, cn, ox, cn, accn, cn, fn_, rown, cn, xo);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
        /* the outputs */
        kl_strbuf_addf(&sb, "%sfor (int %s = 0; %s < %d; %s++) {\n", in1, cn, cn, ox, cn);
        char *t2 = rt_reindent(top_c, strlen(top_c), (int)(strlen(in1) + strlen(unit)) - (int)strlen(ind));
        if (!t2) goto oom;
        kl_strbuf_adds(&sb, t2);
        free(t2);
        kl_strbuf_addf(&sb, "%s%s%s = %s[%s];\n", in1, unit, acc, accn, cn);
        kl_strbuf_addf(&sb, "%s%sif (%s) {\n", in1, unit, guardtxt);
        char *p2 = rt_reindent(post, strlen(post), (int)(strlen(in1) + 2 * strlen(unit)) - (int)strlen(lind));
        if (!p2) goto oom;
        kl_strbuf_adds(&sb, p2);
        free(p2);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
    }
    if (runtime) {
        /* counts beyond max_radius: the original loop, per output */
        kl_strbuf_addf(&sb, "%s} else {\n", ind);
        kl_strbuf_addf(&sb, "%s%sfor (int %s = 0; %s < %d; %s++) {\n", ind, unit, cn, cn, ox, cn);
        char *t2 = rt_reindent(top_c, strlen(top_c), 2 * (int)strlen(unit));
        char *p2 = rt_reindent(pre, strlen(pre), 2 * (int)strlen(unit));
        if (!t2 || !p2) {
            free(t2);
            free(p2);
            goto oom;
        }
        kl_strbuf_adds(&sb, t2);
        kl_strbuf_adds(&sb, p2);
        free(t2);
        free(p2);
        kl_strbuf_addf(&sb, "%s%s%sif (%s) {\n", ind, unit, unit, guardtxt);
        char *l2 = smem_tile__reindent_node_text(lind, ltext, (int)(strlen(ind) + 3 * strlen(unit)) - (int)strlen(lind));
        char *p3 = rt_reindent(post, strlen(post), (int)(strlen(ind) + 3 * strlen(unit)) - (int)strlen(lind));
        if (!l2 || !p3) {
            free(l2);
            free(p3);
            goto oom;
        }
        char in3[256];
        kl_snprintf(in3, sizeof in3, "%s%s%s%s", ind, unit, unit, unit);
        add_directives(ctx, lead, ts_node_start_byte(s->outer), in3, &sb);
        kl_strbuf_addf(&sb, "%s%s%s%s%s\n", ind, unit, unit, unit, l2);
        kl_strbuf_adds(&sb, p3);
        free(l2);
        free(p3);
        kl_strbuf_addf(&sb, "%s%s%s}\n%s%s}\n%s}\n", ind, unit, unit, ind, unit, ind);
    }
    if (sb.failed) goto oom;
    stt = kl_edits_add(out, body_a, body_b, kl_strbuf_str(&sb));
    if (stt == KL_OK) stt = widen_launches(ctx, s, ox, out, err);
    goto done;
oom:
    stt = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    kl_strbuf_release(&sb);
    free(top);
    free(top_c);
    free(pre);
    free(post);
    free(value);
    free(guardtxt);
    free(ltext);
    free(ctext);
    free(etext);
    return stt;
#undef RWHY
}

/* The statements (not comments) of a compound statement, at most max; returns how many. */
unsigned smem_tile__stmts_of(TSNode compound, TSNode *out, unsigned max)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(compound); i++) {
        TSNode c = ts_node_named_child(compound, i);
        if (rt_is(c, "comment")) continue;
        if (n < max) out[n] = c;
        n++;
    }
    return n;
}

/* ---- present: the register-tiled stencil (outputs_x > 1) ------------------------------------------------
 *
 * Recognised by apply_stencil_rt's marker ("N outputs per thread along x (a register tile)") right
 * above the halo tile, the factor tile after it. Remove writes the one-output-per-thread stencil
 * back: the statements before the marker with `(threadIdx.x * N)` and `(blockIdx.x * N)` back to
 * threadIdx.x and blockIdx.x, then `if (G) { pre; loop; post }` — with a run-time count the loop
 * and post are the original ones kept under `else`; with a compile-time count the loop is rebuilt
 * from the pieces the form keeps (the offset loops' headers, the load's locals, guard and read, the
 * staged factor, the sum's name): `if (guard) acc += factor * read;` — and every launch's grid x
 * extent `(G + N - 1) / N` is G again. */


#define RT_MARKER "outputs per thread along x (a register tile)"

static TSNode only_for(TSNode compound)
{
    TSNode st[4];
    return smem_tile__stmts_of(compound, st, 4) == 1 && rt_is(st[0], "for_statement") ? st[0] : (TSNode){0};
}

bool smem_tile__analyse_rt_present(const kl_rule_ctx *ctx, TSNode fn, TSNode decl, smem_tile__rtp *p)
{
    memset(p, 0, sizeof *p);
    TSNode c = ts_node_prev_named_sibling(decl);
    if (!rt_is(c, "comment") || !rt_has_marker(ctx, ts_node_start_byte(c), ts_node_end_byte(c), RT_MARKER)) return false;
    char *mt = rt_text(ctx, c);
    const char *at = mt ? strstr(mt, " outputs per thread along x") : NULL;
    while (at && at > mt && at[-1] >= '0' && at[-1] <= '9') at--;
    p->ox = at ? atoi(at) : 0;
    free(mt);
    if (p->ox < 2) return false;
    p->marker = c, p->decl = decl;
    p->fdecl = rt_next_stmt(decl);
#define RPWHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), true)
    const char *src = kl_source_name(ctx->src);
    TSNode body = kl_ast_function_body(fn);
    if (!ts_node_eq(ts_node_parent(decl), body) || !rt_is(p->fdecl, "declaration"))
        return RPWHY("%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(decl));
    p->top_a = rt_line_end(ctx, ts_node_start_byte(body));
    p->top_b = rt_line_start(ctx, ts_node_start_byte(c));
    /* pre: up to the `if (C)` with an else, or the first loop */
    TSNode q = rt_next_stmt(p->fdecl);
    p->pre_a = p->pre_b = rt_line_end(ctx, ts_node_end_byte(p->fdecl) - 1);
    while (!ts_node_is_null(q) && rt_is(q, "declaration")) {
        p->pre_b = rt_line_end(ctx, ts_node_end_byte(q) - 1);
        q = rt_next_stmt(q);
    }
    if (rt_is(q, "if_statement") && !ts_node_is_null(rt_field(q, "alternative"))) {
        p->cond_if = q;
        TSNode alt = rt_field(q, "alternative");
        if (rt_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
        TSNode per = rt_is(alt, "compound_statement") ? only_for(alt) : (TSNode){0};
        TSNode pb = ts_node_is_null(per) ? per : rt_field(per, "body");
        TSNode st[40];
        unsigned n = rt_is(pb, "compound_statement") ? smem_tile__stmts_of(pb, st, 40) : 0;
        if (!n || n > 40 || !rt_is(st[n - 1], "if_statement") || !rt_is(rt_field(st[n - 1], "consequence"), "compound_statement"))
            return RPWHY("%s:%u: the original loop under else is not as apply writes it", src, kl_ast_line(q));
        p->orig_if = st[n - 1];
        return true;
    }
    /* a compile-time count: load loops, factor staging, barrier, accumulators, compute, epilogue */
    TSNode st[12];
    unsigned n = 0;
    for (; !ts_node_is_null(q) && n < 12; q = rt_next_stmt(q)) st[n++] = q;
    if (n < 7 || !rt_is(st[0], "for_statement") || !rt_is(st[1], "for_statement") || !rt_is_syncthreads(ctx, st[2]) ||
        !rt_is(st[n - 2], "for_statement") || !rt_is(st[n - 1], "for_statement"))
        return RPWHY("%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(decl));
    p->ly = st[0], p->stage = st[1], p->yloop = st[n - 2], p->epi = st[n - 1];
    p->lx = only_for(rt_field(p->ly, "body"));
    if (ts_node_is_null(p->lx)) {
        TSNode b = rt_field(p->ly, "body");
        for (uint32_t k = 0; k < ts_node_named_child_count(b); k++)
            if (rt_is(ts_node_named_child(b, k), "for_statement")) p->lx = ts_node_named_child(b, k);
    }
    if (ts_node_is_null(p->lx)) return RPWHY("%s:%u: the tile load is not as apply writes it", src, kl_ast_line(p->ly));
    return true;
#undef RPWHY
}

/* Text with every `(threadIdx.x * N)` / `(blockIdx.x * N)` back to threadIdx.x / blockIdx.x. */
static char *unsubst(const char *t, int ox)
{
    char a[48], b[48];
    kl_snprintf(a, sizeof a, "(threadIdx.x * %d)", ox);
    kl_snprintf(b, sizeof b, "(blockIdx.x * %d)", ox);
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *s = t; *s;) {
        if (!strncmp(s, a, strlen(a))) kl_strbuf_adds(&sb, "threadIdx.x"), s += strlen(a);
        else if (!strncmp(s, b, strlen(b))) kl_strbuf_adds(&sb, "blockIdx.x"), s += strlen(b);
        else kl_strbuf_add(&sb, s++, 1);
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* The statements of a loop body after its first (the offset declaration), each on its line. */
static void body_decls_after_first(const kl_rule_ctx *ctx, TSNode loop, const char *ind, kl_strbuf *sb, TSNode stop)
{
    TSNode b = rt_field(loop, "body");
    TSNode st[16];
    unsigned n = smem_tile__stmts_of(b, st, 16);
    for (unsigned k = 1; k < n && k < 16; k++) {
        if (!ts_node_is_null(stop) && ts_node_eq(st[k], stop)) break;
        if (!rt_is(st[k], "declaration")) continue;
        char *t = rt_text(ctx, st[k]);
        if (t) kl_strbuf_addf(sb, "%s%s\n", ind, t);
        free(t);
    }
}

kl_status smem_tile__remove_rt(const kl_rule_ctx *ctx, TSNode fn, const smem_tile__rtp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    TSNode body = kl_ast_function_body(fn);
    char ind[64], unit[64] = "    ";
    rt_indent_of(ctx, ts_node_start_byte(p->decl), ind, sizeof ind);
    if (!ind[0] || strchr(ind, '\t')) kl_snprintf(unit, sizeof unit, "    ");
    else kl_snprintf(unit, sizeof unit, "%s", ind);
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    char *top = NULL, *pre = NULL, *inner = NULL, *guard = NULL;
    top = kl_strndup(ctx->text + p->top_a, p->top_b - p->top_a);
    char *top2 = top ? unsubst(top, p->ox) : NULL;
    free(top);
    top = top2;
    pre = rt_reindent(ctx->text + p->pre_a, p->pre_b - p->pre_a, (int)strlen(unit));
    if (!top || !pre) goto oom;
    kl_strbuf_adds(&sb, top);
    if (!ts_node_is_null(p->cond_if)) {
        TSNode cons = rt_field(p->orig_if, "consequence");
        uint32_t a = rt_line_end(ctx, ts_node_start_byte(cons)), b = rt_line_start(ctx, ts_node_end_byte(cons) - 1);
        char cind[64];
        rt_indent_of(ctx, a, cind, sizeof cind);
        inner = b > a ? rt_reindent(ctx->text + a, b - a, (int)(strlen(ind) + strlen(unit)) - (int)strlen(cind)) : NULL;
        guard = rt_text(ctx, smem_tile__if_cond(p->orig_if));
        if (!inner || !guard) {
            st = kl_rule_not_applicable(err, "%s:%u: the original loop under else cannot be moved back", src,
                                        kl_ast_line(p->orig_if));
            goto done;
        }
        kl_strbuf_addf(&sb, "%sif (%s) {\n%s%s%s}\n", ind, guard, pre, inner, ind);
    } else {
        /* rebuild: the load's offsets and locals, guard and read; the factor; the sum; the epilogue's guard and store */
        TSNode lyb = rt_field(p->ly, "body"), lxb = rt_field(p->lx, "body");
        TSNode ys[16], xs[16], ss[8], es[24];
        unsigned ny = smem_tile__stmts_of(lyb, ys, 16), nx = smem_tile__stmts_of(lxb, xs, 16), ns = smem_tile__stmts_of(rt_field(p->stage, "body"), ss, 8);
        unsigned ne = smem_tile__stmts_of(rt_field(p->epi, "body"), es, 24);
        TSNode store = nx ? xs[nx - 1] : (TSNode){0};
        TSNode asg = rt_is(store, "expression_statement") ? ts_node_named_child(store, 0) : (TSNode){0};
        TSNode val = rt_is(asg, "assignment_expression") ? rt_field(asg, "right") : (TSNode){0};
        TSNode fst = ns ? ss[ns - 1] : (TSNode){0};
        TSNode fasg = rt_is(fst, "expression_statement") ? ts_node_named_child(fst, 0) : (TSNode){0};
        TSNode eif = ne ? es[ne - 1] : (TSNode){0};
        TSNode accasg = ne >= 2 && rt_is(es[ne - 2], "expression_statement") ? ts_node_named_child(es[ne - 2], 0) : (TSNode){0};
        TSNode xin = rt_field(p->yloop, "body");
        TSNode xloop = {0};
        for (uint32_t k = 0; k < ts_node_named_child_count(xin); k++)
            if (rt_is(ts_node_named_child(xin, k), "for_statement")) xloop = ts_node_named_child(xin, k);
        if (!ny || !nx || !rt_is(val, "conditional_expression") || !rt_is(fasg, "assignment_expression") ||
            !rt_is(eif, "if_statement") || !rt_is(accasg, "assignment_expression") || ts_node_is_null(xloop)) {
            st = kl_rule_not_applicable(err, "%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(p->decl));
            goto done;
        }
        char *cond = rt_text(ctx, rt_field(val, "condition")), *read = rt_text(ctx, rt_field(val, "consequence"));
        char *fac = rt_text(ctx, rt_field(fasg, "right")), *acc = rt_text(ctx, rt_field(accasg, "left"));
        guard = rt_text(ctx, smem_tile__if_cond(eif));
        TSNode econs = rt_field(eif, "consequence");
        uint32_t ea = rt_line_end(ctx, ts_node_start_byte(econs)), eb = rt_line_start(ctx, ts_node_end_byte(econs) - 1);
        char eind[64];
        rt_indent_of(ctx, ea, eind, sizeof eind);
        char *post = eb > ea ? rt_reindent(ctx->text + ea, eb - ea, (int)(strlen(ind) + strlen(unit)) - (int)strlen(eind)) : NULL;
        if (cond && read && fac && acc && guard && post) {
            char i1[160], i2[160], i3[160];
            kl_snprintf(i1, sizeof i1, "%s%s", ind, unit);
            kl_snprintf(i2, sizeof i2, "%s%s", i1, unit);
            kl_snprintf(i3, sizeof i3, "%s%s", i2, unit);
            uint32_t ya = ts_node_start_byte(p->yloop), yb = ts_node_start_byte(rt_field(p->yloop, "body"));
            uint32_t xa = ts_node_start_byte(xloop), xb = ts_node_start_byte(rt_field(xloop, "body"));
            kl_strbuf_addf(&sb, "%sif (%s) {\n%s", ind, guard, pre);
            kl_strbuf_addf(&sb, "%s%.*s{\n", i1, (int)(yb - ya), ctx->text + ya);
            body_decls_after_first(ctx, p->ly, i2, &sb, p->lx);
            kl_strbuf_addf(&sb, "%s%.*s{\n", i2, (int)(xb - xa), ctx->text + xa);
            body_decls_after_first(ctx, p->lx, i3, &sb, store);
            kl_strbuf_addf(&sb, "%sif (%s) %s += %s * %s;\n%s}\n%s}\n%s%s}\n", i3, cond, acc, fac, read, i2, i1, post, ind);
        } else st = KL_ERR_NOMEM;
        free(cond);
        free(read);
        free(fac);
        free(acc);
        free(post);
        if (st != KL_OK) goto oom;
    }
    if (sb.failed) goto oom;
    st = kl_edits_add(out, p->top_a, rt_line_start(ctx, ts_node_end_byte(body) - 1), kl_strbuf_str(&sb));
    /* the grids: (G + N - 1) / N -> G */
    if (st == KL_OK) {
        rt_func fs[64];
        unsigned nf = rt_functions(ctx, fs, 64);
        const rt_func *f = NULL;
        for (unsigned i = 0; i < nf && !f; i++)
            if (ts_node_eq(fs[i].def, fn)) f = &fs[i];
        rt_launch ls[16];
        unsigned nl = f ? rt_launches(ctx, f->name, ls, 16) : 0;
        uint32_t done[16];
        unsigned nd = 0;
        for (unsigned i = 0; i < nl && st == KL_OK; i++) {
            TSNode list = ls[i].ncfg ? rt_dim3_args(ctx, &ls[i], ls[i].cfg[0]) : (TSNode){0};
            TSNode ex = ts_node_is_null(list) ? list : smem_tile__strip(rt_dim3_extent(list, 0));
            TSNode num = rt_is(ex, "binary_expression") ? smem_tile__strip(rt_field(ex, "left")) : (TSNode){0};
            long long d = 0, a1 = 0;
            if (!rt_is(num, "binary_expression") || !smem_tile__text_is(ctx, rt_field(ex, "operator"), "/") ||
                !rt_const_eval(ctx, (TSNode){0}, rt_field(ex, "right"), &d) || d != p->ox ||
                !smem_tile__text_is(ctx, rt_field(num, "operator"), "+") ||
                !rt_const_eval(ctx, (TSNode){0}, rt_field(num, "right"), &a1) || a1 != p->ox - 1) {
                st = kl_rule_not_applicable(err, "%s:%u: the grid of this launch is not `(G + %d) / %d`", src,
                                            kl_node_span(ls[i].call).line, p->ox - 1, p->ox);
                break;
            }
            if (rt_is(ls[i].cfg[0], "identifier")) {
                /* a grid local shared with other kernels' launches stays: they were widened with it */
                char nm[64];
                smem_tile__squeezed(ctx, ls[i].cfg[0], nm, sizeof nm);
                unsigned mine = 0;
                for (unsigned j = 0; j < nl; j++)
                    if (ts_node_eq(ls[j].host.def, ls[i].host.def) && smem_tile__text_is(ctx, ls[j].cfg[0], nm)) mine++;
                if (smem_tile__uses_of(ctx, ls[i].host.body, nm) != 1 + mine) {
                    st = kl_rule_not_applicable(err, "%s:%u: the grid '%s' is used by other launches too", src,
                                                kl_node_span(ls[i].cfg[0]).line, nm);
                    break;
                }
            }
            bool seen = false;
            for (unsigned j = 0; j < nd; j++) seen |= done[j] == ts_node_start_byte(ex);
            if (seen) continue;
            if (nd < 16) done[nd++] = ts_node_start_byte(ex);
            TSNode g = rt_field(num, "left");
            char *gt = rt_text(ctx, g);
            st = gt ? kl_edits_add(out, ts_node_start_byte(rt_dim3_extent(list, 0)), ts_node_end_byte(rt_dim3_extent(list, 0)), gt)
                    : KL_ERR_NOMEM;
            free(gt);
        }
    }
    goto done;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    kl_strbuf_release(&sb);
    free(top);
    free(pre);
    free(inner);
    free(guard);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

