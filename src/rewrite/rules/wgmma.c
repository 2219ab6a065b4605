/*
 * wgmma: a warpgroup's matrix product from shared-memory descriptors (wgmma.mma_async
 * m64nNk16, sm_90a) <-> the same product as per-warp mma.sync m16n8k16 on ldmatrix fragments,
 * over the same tiles and into the same accumulators. Remove only (no writer: wgmma needs its
 * operands in one of the descriptors' canonical layouts, which the mma.sync form's tiles are not).
 *
 * The form (the hgemm expert's, and kernels written like it):
 *     const uint64_t DB = DESC(BSTART, BLEAD, BSTRIDE);          (or DESC(...) in the call)
 *     for (mi = 0; mi < FM; mi++) WGMMA(ACC[mi], DESC(ASTART, ALEAD, ASTRIDE), DB);
 * alone in a block, where WGMMA is a __device__ helper holding exactly one
 * wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16} with every f32 accumulator of
 * its first parameter d[N/8][4] in order, scale-d from a predicate set to 1, A K-major and B
 * N-major (imm-trans-a 0, imm-trans-b 1); DESC a __device__ helper building a 128-byte-swizzle
 * descriptor (start >> 4, lead >> 4 << 16, stride >> 4 << 32, 1 << 62); ACC a `float ACC[FM][N/8][4]`
 * of the kernel, which has a `lane = threadIdx.x % 32`.
 *
 * The PTX ISA fixes the layouts. Warp w of the warpgroup holds rows 16 w .. 16 w + 15 of the
 * 64-row tile, accumulator d[j][e] at row 16 w + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4)
 * + e % 2: the m16n8k16 accumulator layout, repeated across the N / 8 fragments. So the warp's
 * part is FM x N / 8 mma.sync tiles on the same registers. The 128-byte swizzled K-major A holds
 * element (r, k) at byte (r / 8) SBO + (r % 8) 128 + 2 k past the descriptor's start, the N-major
 * B element (k, n) at (n / 64) LBO + (k / 8) SBO + (k % 8) 128 + 2 (n % 64), each then swizzled
 * on the shared address (bits 4-6 XOR bits 7-9; the tiles sit on 1024-byte boundaries for the
 * descriptor to be valid, so the swizzle of the address is the layout's). An ldmatrix row (8
 * consecutive elements along k for A, along n for B) is one 16-byte chunk there. Remove writes
 * the ldmatrix.x4 (A) and ldmatrix.x4.trans (B) loads of those rows in the order the existing
 * mma.sync form reads (tensor_core.c: lanes 0-15 rows at k 0, lanes 16-31 at k 8; B pairs of
 * n-tiles), deletes the wgmma fences, commits and waits (and the proxy fences, unless bulk
 * copies still need them), and the helpers nothing uses any more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tensor_core.h"
#include "rewrite/rules/tile_text.h"
#include "syntax/affine.h"
#include "util/util.h"


static void text_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    if (ts_node_is_null(n)) {
        if (size) buf[0] = '\0';
        return;
    }
    tt_copy_text(ctx, n, buf, size);
}

static unsigned count_sub(const char *s, const char *sub)
{
    unsigned n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

/* The __device__ helper `name` and its squeezed body (new string), or NULL. */
static char *helper_body(const kl_rule_ctx *ctx, const char *name, TSNode *fn)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return NULL;
    if (fn) *fn = f;
    return kl_tc_squeeze(ctx, kl_ast_function_body(f));
}

/* Is `name` the wgmma helper of the form? n (the instruction's N), dtype (bf16 / f16) and
 * trans_b (imm-trans-b) out; false with why when it holds a wgmma it does not read. */
static bool wgmma_helper(const kl_rule_ctx *ctx, const char *name, int *n, char *dtype, int *trans_b, char *why,
                         size_t wsize)
{
    TSNode f;
    char *t = helper_body(ctx, name, &f);
    if (!t) return false;
    bool ok = false;
    char ps[3][64];
    const char *at = strstr(t, "wgmma.mma_async.sync.aligned.m64n");
    if (!at || count_sub(t, "asm") != 1 || kl_tc_param_names(ctx, f, ps, 3) != 3) {
        if (at) kl_snprintf(why, wsize, "%s is not one wgmma asm statement over (d, desc_a, desc_b)", name);
        goto done;
    }
    int nn = 0;
    char ty[8] = "";
    if (sscanf(at, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%4[bf16].", &nn, ty) != 2 || nn < 16 || nn > 256 ||
        nn % 16) {
        kl_snprintf(why, wsize, "%s: not a wgmma m64nNk16 with f32 accumulators and N a multiple of 16", name);
        goto done;
    }
    if (strcmp(ty, "bf16") && strcmp(ty, "f16")) {
        kl_snprintf(why, wsize, "%s: inputs of type %s (bf16 and f16 are read)", name, ty);
        goto done;
    }
    int regs = nn / 2;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the instruction: every accumulator register, the two descriptors, scale-d p, A K-major, B N-major */
    kl_strbuf_addf(&sb, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s{", nn, ty, ty);
    for (int i = 0; i < regs; i++) kl_strbuf_addf(&sb, "%s%%%d", i ? "," : "", i);
    kl_strbuf_addf(&sb, "},%%%d,%%%d,p,1,1,0,", regs, regs + 1);
    char *instr = kl_strbuf_detach(&sb, NULL);
    /* the predicate set from the constant 1 (accumulate), and the operands */
    kl_strbuf_addf(&sb, "setp.ne.b32p,%%%d,0;", regs + 2);
    char *pred = kl_strbuf_detach(&sb, NULL);
    kl_strbuf_adds(&sb, ":");
    for (int i = 0; i < regs; i++) kl_strbuf_addf(&sb, "%s+f(%s[%d][%d])", i ? "," : "", ps[0], i / 4, i % 4);
    kl_strbuf_addf(&sb, ":l(%s),l(%s),r(1));", ps[1], ps[2]);
    char *ops = kl_strbuf_detach(&sb, NULL);
    const char *ip = instr ? strstr(t, instr) : NULL;
    if (!instr || !pred || !ops || !ip || !strstr(t, pred) || !strstr(t, ops) || (ip[strlen(instr)] != '0' && ip[strlen(instr)] != '1') ||
        ip[strlen(instr) + 1] != ';') {
        kl_snprintf(why, wsize,
                    "%s is not the wgmma form read: every accumulator of %s[%d][4] in order, the descriptors %s and %s, "
                    "scale-d a predicate set from 1, imm-scale 1, A K-major (imm-trans-a 0)",
                    name, ps[0], nn / 8, ps[1], ps[2]);
    } else {
        *n = nn;
        *trans_b = ip[strlen(instr)] - '0';
        kl_snprintf(dtype, 8, "%s", ty);
        ok = true;
    }
    free(instr);
    free(pred);
    free(ops);
done:
    free(t);
    return ok;
}

/* Is `name` a descriptor helper (start, lead, stride) for the 128-byte swizzle? */
static bool desc_helper(const kl_rule_ctx *ctx, const char *name)
{
    TSNode f;
    char *t = helper_body(ctx, name, &f);
    if (!t) return false;
    char ps[3][64], want[400];
    bool ok = false;
    if (kl_tc_param_names(ctx, f, ps, 3) == 3) {
        kl_snprintf(want, sizeof want,
                    "{return(uint64_t)((%s&0x3FFFF)>>4)|(uint64_t)(%s>>4)<<16|(uint64_t)(%s>>4)<<32|(uint64_t)1<<62;}", ps[0],
                    ps[1], ps[2]);
        ok = !strcmp(t, want);
    }
    free(t);
    return ok;
}

enum { SYNC_NONE, SYNC_FENCE, SYNC_COMMIT, SYNC_WAIT, SYNC_PROXY };

/* What a statement `f();` / `f<N>();` of a helper holding one asm does: a wgmma fence, commit or
 * wait, a proxy fence, or none. name gets the helper. */
static int sync_kind(const kl_rule_ctx *ctx, TSNode st, char *name, size_t size)
{
    if (!rt_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return SYNC_NONE;
    TSNode c = ts_node_named_child(st, 0);
    if (!rt_is(c, "call_expression") || ts_node_named_child_count(rt_field(c, "arguments")) != 0) return SYNC_NONE;
    TSNode fnn = rt_field(c, "function");
    if (rt_is(fnn, "template_function")) fnn = rt_field(fnn, "name");
    if (!rt_is(fnn, "identifier")) return SYNC_NONE;
    text_to(ctx, fnn, name, size);
    char *t = helper_body(ctx, name, NULL);
    if (!t) return SYNC_NONE;
    int k = SYNC_NONE;
    if (count_sub(t, "asm") == 1) {
        if (strstr(t, "wgmma.fence.sync.aligned;")) k = SYNC_FENCE;
        else if (strstr(t, "wgmma.commit_group.sync.aligned;")) k = SYNC_COMMIT;
        else if (strstr(t, "wgmma.wait_group.sync.aligned")) k = SYNC_WAIT;
        else if (strstr(t, "fence.proxy.async")) k = SYNC_PROXY;
    }
    free(t);
    return k;
}

#define WG_MAXSYNC 16

typedef struct wg_form {
    TSNode fn, body, call, loop, block, dbdecl;
    int n, trans_b;
    char dtype[8], lane[64], mi[64], fm[128], acc[64], fn_dim[128];
    char wname[64], dname[64];
    char astart[512], astride[128], bstart[512], blead[128], bstride[128];
    TSNode sync[WG_MAXSYNC];
    char syncname[WG_MAXSYNC][64];
    unsigned nsync;
    char why[500];
} wg_form;

/* `DESC(start, lead, stride)`: the three argument texts, and the start's node (when snode). */
static bool desc_call(const kl_rule_ctx *ctx, TSNode e, const char *dname, char *start, size_t ssize, char *lead,
                      char *stride, size_t size, TSNode *snode)
{
    e = kl_ast_unparen(e);
    if (!rt_is(e, "call_expression") || !rt_text_is(ctx, rt_field(e, "function"), dname)) return false;
    TSNode a = rt_field(e, "arguments");
    if (ts_node_named_child_count(a) != 3) return false;
    if (snode) *snode = ts_node_named_child(a, 0);
    text_to(ctx, ts_node_named_child(a, 0), start, ssize);
    text_to(ctx, ts_node_named_child(a, 1), lead, size);
    text_to(ctx, ts_node_named_child(a, 2), stride, size);
    return true;
}

typedef struct sync_scan {
    const kl_rule_ctx *ctx;
    wg_form *w;
    bool bulk;
} sync_scan;

static bool sync_visit(TSNode n, void *user)
{
    sync_scan *s = user;
    char name[64];
    if (!rt_is(n, "expression_statement")) return true;
    int k = sync_kind(s->ctx, n, name, sizeof name);
    if (k == SYNC_NONE || (k == SYNC_PROXY && s->bulk)) return false;
    if (s->w->nsync < WG_MAXSYNC) {
        s->w->sync[s->w->nsync] = n;
        kl_snprintf(s->w->syncname[s->w->nsync], 64, "%s", name);
    }
    s->w->nsync++;
    return false;
}

typedef struct acc_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl;
    unsigned count;
} acc_find;

static bool acc_visit(TSNode n, void *user)
{
    acc_find *a = user;
    if (rt_is(n, "declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n); k++) {
            TSNode id = kl_ast_declarator_name(ts_node_named_child(n, k));
            if (!ts_node_is_null(id) && rt_text_is(a->ctx, id, a->name)) a->decl = n, a->count++;
        }
    return true;
}

/* Recognise the form around the wgmma call hit; false with w->why when it is not it. */
static bool analyse(const kl_rule_ctx *ctx, TSNode fn, TSNode hit, wg_form *w)
{
    memset(w, 0, sizeof *w);
    w->fn = fn;
    w->body = kl_ast_function_body(fn);
    w->call = hit;
#define WHY(...) (kl_snprintf(w->why, sizeof w->why, __VA_ARGS__), false)
    unsigned ln = kl_ast_line(hit);
    text_to(ctx, rt_field(hit, "function"), w->wname, sizeof w->wname);
    if (!wgmma_helper(ctx, w->wname, &w->n, w->dtype, &w->trans_b, w->why, sizeof w->why))
        return w->why[0] ? false : WHY("%s (line %u) is not a wgmma helper", w->wname, ln);
    if (w->trans_b != 1)
        return WHY("the wgmma at line %u reads B K-major (imm-trans-b 0); the mma.sync form written reads an N-major B", ln);
    if (!kl_tc_find_lane(ctx, w->body, w->lane))
        return WHY("no `lane = threadIdx.x %% 32` at the top of the kernel: the fragment layout is per lane");
    TSNode args = rt_field(hit, "arguments");
    if (ts_node_named_child_count(args) != 3) return WHY("the wgmma call at line %u does not take 3 operands", ln);
    TSNode d = ts_node_named_child(args, 0), da = ts_node_named_child(args, 1), db = ts_node_named_child(args, 2);
    /* the loop: for (mi = 0; mi < FM; mi++) WGMMA(ACC[mi], …); alone in its block (and the B descriptor) */
    TSNode st = ts_node_parent(hit);
    w->loop = ts_node_parent(st);
    if (rt_is(w->loop, "compound_statement")) {
        TSNode one[2];
        if (kl_tc_body_stmts(w->loop, one, 2) != 1) return WHY("the wgmma call at line %u is not alone in its loop", ln);
        w->loop = ts_node_parent(w->loop);
    }
    if (!rt_is(st, "expression_statement") || !kl_tc_plain_loop(ctx, w->loop, w->mi, w->fm, sizeof w->fm))
        return WHY("the wgmma call at line %u is not in a loop `for (mi = 0; mi < FM; mi++)`", ln);
    if (!rt_is(d, "subscript_expression") || !rt_is(rt_field(d, "argument"), "identifier"))
        return WHY("the accumulator operand at line %u is not `ACC[%s]`", ln, w->mi);
    text_to(ctx, rt_field(d, "argument"), w->acc, sizeof w->acc);
    char want[200], *sq = kl_tc_squeeze(ctx, d);
    kl_snprintf(want, sizeof want, "%s[%s]", w->acc, w->mi);
    bool okd = sq && !strcmp(sq, want);
    free(sq);
    if (!okd) return WHY("the accumulator operand at line %u is not `%s[%s]`", ln, w->acc, w->mi);
    /* ACC: float ACC[FM][N / 8][4], declared once in the kernel */
    acc_find af = {ctx, w->acc, {{0}, 0, 0}, 0};
    kl_ast_walk(w->body, acc_visit, &af);
    TSNode adc = ts_node_is_null(af.decl) ? af.decl : ts_node_named_child(af.decl, 1);
    TSNode a3 = rt_is(adc, "array_declarator") ? adc : (TSNode){{0}, 0, 0};
    TSNode a2 = rt_is(rt_field(a3, "declarator"), "array_declarator") ? rt_field(a3, "declarator") : (TSNode){{0}, 0, 0};
    TSNode a1 = rt_is(rt_field(a2, "declarator"), "array_declarator") ? rt_field(a2, "declarator") : (TSNode){{0}, 0, 0};
    long long v4 = 0, vn = 0;
    if (af.count != 1 || ts_node_is_null(a1) || !rt_text_is(ctx, rt_field(af.decl, "type"), "float") ||
        !rt_const_eval(ctx, w->body, rt_field(a3, "size"), &v4) || v4 != 4 ||
        !rt_const_eval(ctx, w->body, rt_field(a2, "size"), &vn) || vn != w->n / 8)
        return WHY("the accumulators %s are not declared once as `float %s[%s][%d][4]`", w->acc, w->acc, w->fm, w->n / 8);
    text_to(ctx, rt_field(a2, "size"), w->fn_dim, sizeof w->fn_dim);
    /* the descriptors */
    TSNode dac = kl_ast_unparen(da);
    if (rt_is(dac, "call_expression")) text_to(ctx, rt_field(dac, "function"), w->dname, sizeof w->dname);
    char alead[128];
    if (!w->dname[0] || !desc_helper(ctx, w->dname) ||
        !desc_call(ctx, da, w->dname, w->astart, sizeof w->astart, alead, w->astride, sizeof w->astride, NULL))
        return WHY("the A descriptor at line %u is not a call of a 128-byte-swizzle descriptor helper (start, lead, stride)",
                   ln);
    TSNode block = ts_node_parent(w->loop);
    if (!rt_is(block, "compound_statement")) return WHY("the wgmma loop at line %u is not in a block", kl_ast_line(w->loop));
    w->block = block;
    TSNode bs[4], bnode = {{0}, 0, 0};
    unsigned nb = kl_tc_body_stmts(block, bs, 4);
    if (rt_is(kl_ast_unparen(db), "identifier")) {
        char dbn[64];
        text_to(ctx, kl_ast_unparen(db), dbn, sizeof dbn);
        TSNode dc = {{0}, 0, 0};
        unsigned ndc = 0;
        for (uint32_t k = 0; nb == 2 && rt_is(bs[0], "declaration") && k < ts_node_named_child_count(bs[0]); k++)
            if (rt_is(ts_node_named_child(bs[0], k), "init_declarator")) dc = ts_node_named_child(bs[0], k), ndc++;
        if (ndc != 1) dc = (TSNode){{0}, 0, 0};
        if (!rt_is(dc, "init_declarator") || !rt_text_is(ctx, kl_ast_declarator_name(dc), dbn) ||
            !ts_node_eq(bs[1], w->loop) ||
            !desc_call(ctx, rt_field(dc, "value"), w->dname, w->bstart, sizeof w->bstart, w->blead, w->bstride,
                       sizeof w->bstride, &bnode))
            return WHY("the B descriptor %s (line %u) is not declared `const uint64_t %s = %s(…);` right before the wgmma "
                       "loop, alone with it in their block",
                       dbn, ln, dbn, w->dname);
        if (rt_count_ident(ctx, w->body, dbn) != 2)
            return WHY("the B descriptor %s is used other than by the wgmma call", dbn);
        w->dbdecl = bs[0];
    } else {
        if (nb != 1 ||
            !desc_call(ctx, db, w->dname, w->bstart, sizeof w->bstart, w->blead, w->bstride, sizeof w->bstride, &bnode))
            return WHY("the B descriptor at line %u is not a %s(…) call or a local holding one, alone with the loop", ln,
                       w->dname);
    }
    /* B's fragments are loaded once for all mi: its start must not depend on mi */
    if (rt_count_ident(ctx, bnode, w->mi)) return WHY("the B descriptor's start (line %u) depends on %s", ln, w->mi);
    /* the fences, commits and waits of the kernel; proxy fences stay where bulk copies remain */
    char *ft = rt_text(ctx, fn);
    sync_scan ss = {ctx, w, ft && strstr(ft, "cp.async.bulk")};
    free(ft);
    kl_ast_walk(w->body, sync_visit, &ss);
    if (w->nsync > WG_MAXSYNC) return WHY("the kernel has more than %d wgmma fences, commits and waits", WG_MAXSYNC);
    for (unsigned i = 0; i < w->nsync; i++)
        if (!rt_line_blank_before(ctx, ts_node_start_byte(w->sync[i])) ||
            rt_line_end(ctx, ts_node_end_byte(w->sync[i])) != rt_line_end(ctx, ts_node_end_byte(w->sync[i]) - 1))
            return WHY("the wgmma fence/commit/wait at line %u does not sit on a line of its own", kl_ast_line(w->sync[i]));
    /* names the mma.sync form introduces; tensor-core's next step adds kl_e, kl_r, kl_c, kl_x */
    static const char *const mine[] = {"kl_ar", "kl_ak", "kl_bk", "kl_bn", "kl_b", "kl_nj", "kl_ni", "kl_af", "kl_bf",
                                       "kl_e",  "kl_r",  "kl_c",  "kl_x"};
    for (unsigned i = 0; i < sizeof mine / sizeof *mine; i++)
        if (rt_count_ident(ctx, w->body, mine[i])) return WHY("the kernel already uses the name %s", mine[i]);
#undef WHY
    return true;
}

/* The whole lines of a function and the `//` comment lines right above it, and one of the blank
 * lines around it. */
static void function_range(const kl_rule_ctx *ctx, TSNode f, uint32_t *s, uint32_t *e)
{
    TSNode outer = kl_ast_function_outer(f);
    *s = rt_line_start(ctx, ts_node_start_byte(outer));
    *e = rt_line_end(ctx, ts_node_end_byte(outer) - 1);
    for (TSNode prev = ts_node_prev_sibling(outer); rt_is(prev, "comment"); prev = ts_node_prev_sibling(prev)) {
        uint32_t ps = rt_line_start(ctx, ts_node_start_byte(prev));
        if (rt_line_end(ctx, ts_node_end_byte(prev) - 1) != *s || !rt_line_blank_before(ctx, ts_node_start_byte(prev)))
            break;
        *s = ps;
    }
    if (*s >= 2 && ctx->text[*s - 1] == '\n' && ctx->text[*s - 2] == '\n' && *e < ctx->len && ctx->text[*e] == '\n') (*e)++;
}

/* Drop the __device__ helper `name` when the removed code held all its uses (removed_uses). */
static kl_status drop_unused(const kl_rule_ctx *ctx, const char *name, unsigned removed_uses, kl_edits *out)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f)) return KL_OK;
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    if (rt_count_ident(ctx, root, name) != 1 + removed_uses) return KL_OK;
    uint32_t s, e;
    function_range(ctx, f, &s, &e);
    return kl_edits_add(out, s, e, "");
}

static kl_status remove_form(const kl_rule_ctx *ctx, const wg_form *w, kl_edits *out, kl_error *err)
{
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    char sw[64], ldm[64], ldmt[64], mma[64], afn[64], bfn[64];
    rt_fresh_name(ctx, root, "kl_sw128", sw, sizeof sw);
    rt_fresh_name(ctx, root, "kl_ldmatrix_x4", ldm, sizeof ldm);
    rt_fresh_name(ctx, root, "kl_ldmatrix_x4_trans", ldmt, sizeof ldmt);
    char mbase[32];
    kl_snprintf(mbase, sizeof mbase, "kl_mma_%s", w->dtype);
    rt_fresh_name(ctx, root, mbase, mma, sizeof mma);
    rt_fresh_name(ctx, w->body, "kl_af", afn, sizeof afn);
    rt_fresh_name(ctx, w->body, "kl_bf", bfn, sizeof bfn);
    const char *elem = !strcmp(w->dtype, "bf16") ? "__nv_bfloat16" : "__half";
    const char *L = w->lane;
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the helpers, before the kernel */
    kl_strbuf_addf(&sb,
                   "// wgmma removed: its tiles read by per-warp mma.sync. %s: the element at byte offset off (as the\n"
                   "// descriptor lays the tile out, before the swizzle) past the descriptor's start address; the 128-byte\n"
                   "// swizzle XORs bits 4-6 of the shared address with bits 7-9.\n"
                   "__device__ __forceinline__ const %s* %s(uint32_t start, uint32_t off)\n"
                   "{\n"
                   "    const uint32_t a = start + off;\n"
                   "    return reinterpret_cast<const %s*>(__cvta_shared_to_generic(a ^ (a >> 3 & 0x70)));\n"
                   "}\n",
                   sw, elem, sw, elem);
    kl_strbuf_addf(&sb,
                   "// ldmatrix: four 8 x 8 matrices of 16-bit elements, row addresses from lanes 8 m .. 8 m + 7\n"
                   "__device__ __forceinline__ void %s(uint32_t (&r)[4], const void* p)\n"
                   "{\n"
                   "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%%0, %%1, %%2, %%3}, [%%4];\\n\"\n"
                   "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
                   "                 : \"r\"((uint32_t)__cvta_generic_to_shared(p)));\n"
                   "}\n"
                   "__device__ __forceinline__ void %s(uint32_t (&r)[4], const void* p)\n"
                   "{\n"
                   "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%%0, %%1, %%2, %%3}, [%%4];\\n\"\n"
                   "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
                   "                 : \"r\"((uint32_t)__cvta_generic_to_shared(p)));\n"
                   "}\n",
                   ldm, ldmt);
    kl_strbuf_addf(&sb,
                   "// mma.sync m16n8k16: d += a * b (%s inputs, f32 accumulators)\n"
                   "__device__ __forceinline__ void %s(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)\n"
                   "{\n"
                   "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 \"\n"
                   "                 \"{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\\n\"\n"
                   "                 : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
                   "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
                   "}\n\n",
                   w->dtype, mma, w->dtype, w->dtype);
    if (sb.failed) goto nomem;
    uint32_t kstart = rt_line_start(ctx, ts_node_start_byte(kl_ast_function_outer(w->fn)));
    /* a `//` comment block right above the kernel stays with it */
    for (TSNode prev = ts_node_prev_sibling(kl_ast_function_outer(w->fn)); rt_is(prev, "comment");
         prev = ts_node_prev_sibling(prev)) {
        if (rt_line_end(ctx, ts_node_end_byte(prev) - 1) != kstart || !rt_line_blank_before(ctx, ts_node_start_byte(prev)))
            break;
        kstart = rt_line_start(ctx, ts_node_start_byte(prev));
    }
    if ((st = kl_edits_add(out, kstart, kstart, kl_strbuf_str(&sb))) != KL_OK) goto done;
    kl_strbuf_release(&sb);

    /* the block: fragments, their loads, the mma nest */
    TSNode first = ts_node_named_child(w->block, 0);
    uint32_t bs = rt_line_start(ctx, ts_node_start_byte(first));
    TSNode last = ts_node_named_child(w->block, ts_node_named_child_count(w->block) - 1);
    uint32_t be = rt_line_end(ctx, ts_node_end_byte(last) - 1);
    char in[32] = "";
    rt_indent_of(ctx, ts_node_start_byte(first), in, sizeof in);
    const char *mi = w->mi, *FM = w->fm, *FN = w->fn_dim;
    kl_strbuf_addf(&sb, "%suint32_t %s[%s][4];\n", in, afn, FM);
    kl_strbuf_addf(&sb, "%suint32_t %s[%s][2];\n", in, bfn, FN);
    kl_strbuf_addf(&sb, "%sfor (int %s = 0; %s < %s; %s++) {\n", in, mi, mi, FM, mi);
    kl_strbuf_addf(&sb, "%s    const int kl_ar = 16 * (threadIdx.x / 32 %% 4) + %s %% 16;\n", in, L);
    kl_strbuf_addf(&sb, "%s    const int kl_ak = %s / 16 * 8;\n", in, L);
    kl_strbuf_addf(&sb, "%s    %s(%s[%s], %s(%s, kl_ar / 8 * (%s) + kl_ar %% 8 * 128 + kl_ak * 2));\n", in, ldm, afn, mi, sw,
                   w->astart, w->astride);
    kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_nj = 0; kl_nj < %s / 2; kl_nj++) {\n", in, FN);
    kl_strbuf_addf(&sb, "%s    const int kl_bk = %s %% 16;\n", in, L);
    kl_strbuf_addf(&sb, "%s    const int kl_bn = kl_nj * 16 + %s / 16 * 8;\n", in, L);
    kl_strbuf_addf(&sb, "%s    uint32_t kl_b[4];\n", in);
    kl_strbuf_addf(&sb,
                   "%s    %s(kl_b, %s(%s, kl_bn / 64 * (%s) + kl_bk / 8 * (%s) + kl_bk %% 8 * 128 + kl_bn %% 64 * 2));\n",
                   in, ldmt, sw, w->bstart, w->blead, w->bstride);
    for (int q = 0; q < 4; q++)
        kl_strbuf_addf(&sb, "%s    %s[2 * kl_nj%s][%d] = kl_b[%d];\n", in, bfn, q >= 2 ? " + 1" : "", q % 2, q);
    kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb,
                   "%s// tensor-core: mma.sync m16n8k16 (wgmma removed): warp w of the warpgroup multiplies rows 16 w to\n"
                   "%s// 16 w + 15 of each 64-row tile into the same accumulators\n",
                   in, in);
    kl_strbuf_addf(&sb, "%sfor (int %s = 0; %s < %s; %s++)\n", in, mi, mi, FM, mi);
    kl_strbuf_addf(&sb, "%s    for (int kl_ni = 0; kl_ni < %s; kl_ni++) %s(%s[%s][kl_ni], %s[%s], %s[kl_ni][0], %s[kl_ni][1]);\n", in,
                   FN, mma, w->acc, mi, afn, mi, bfn, bfn);
    if (sb.failed) goto nomem;
    if ((st = kl_edits_add(out, bs, be, kl_strbuf_str(&sb))) != KL_OK) goto done;
    kl_strbuf_release(&sb);

    /* the fences, commits and waits: their lines go */
    for (unsigned i = 0; i < w->nsync; i++) {
        uint32_t s = rt_line_start(ctx, ts_node_start_byte(w->sync[i])), e = rt_line_end(ctx, ts_node_end_byte(w->sync[i]));
        if ((st = kl_edits_add(out, s, e, "")) != KL_OK) goto done;
    }
    /* helpers nothing uses any more */
    if ((st = drop_unused(ctx, w->wname, tt_count(ctx->text, bs, be, w->wname), out)) != KL_OK) goto done;
    if ((st = drop_unused(ctx, w->dname, tt_count(ctx->text, bs, be, w->dname), out)) != KL_OK) goto done;
    for (unsigned i = 0; i < w->nsync; i++) {
        unsigned uses = 0, earlier = 0;
        for (unsigned k = 0; k < w->nsync; k++)
            if (!strcmp(w->syncname[k], w->syncname[i])) uses++, earlier += k < i;
        if (!earlier && (st = drop_unused(ctx, w->syncname[i], uses, out)) != KL_OK) goto done;
    }
    return KL_OK;
nomem:
    st = KL_ERR_NOMEM;
done:
    kl_strbuf_release(&sb);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, st == KL_ERR_NOMEM ? "out of memory" : "wgmma: cannot edit the file");
}

/* ---- find and run ------------------------------------------------------------------------------------ */

typedef struct call_scan {
    const kl_rule_ctx *ctx;
    TSNode hit;
    char why[500];
} call_scan;

/* A call of a helper holding wgmma.mma_async (the first one in the kernel). */
static bool call_visit(TSNode n, void *user)
{
    call_scan *c = user;
    if (!ts_node_is_null(c->hit)) return false;
    if (rt_is(n, "call_expression") && rt_is(rt_field(n, "function"), "identifier")) {
        char f[64];
        text_to(c->ctx, rt_field(n, "function"), f, sizeof f);
        char *t = helper_body(c->ctx, f, NULL);
        if (t && strstr(t, "wgmma.mma_async")) c->hit = n;
        free(t);
    }
    if ((rt_is(n, "gnu_asm_expression") || rt_is(n, "asm_statement")) && ts_node_is_null(c->hit)) {
        char *t = rt_text(c->ctx, n);
        if (t && strstr(t, "wgmma.mma_async")) {
            c->hit = n;
            kl_snprintf(c->why, sizeof c->why, "the wgmma at line %u is asm in the kernel, not a call of a helper",
                        kl_ast_line(n));
        }
        free(t);
    }
    return ts_node_is_null(c->hit);
}

typedef struct wg_job {
    const kl_site *site;
    kl_sites *out;
    kl_edits *edits;
    kl_error *err;
    kl_status st;
    bool done;
} wg_job;

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    (void)ax;
    wg_job *j = user;
    if (j->done || (j->site && strcmp(j->site->kernel, name))) return KL_OK;
    call_scan c = {ctx, {{0}, 0, 0}, ""};
    kl_ast_walk(kl_ast_function_body(fn), call_visit, &c);
    if (ts_node_is_null(c.hit)) return KL_OK;
    wg_form w;
    bool ok = !c.why[0] && analyse(ctx, fn, c.hit, &w);
    if (c.why[0]) kl_snprintf(w.why, sizeof w.why, "%s", c.why);
    char id[256];
    kl_site_id(id, sizeof id, name, c.hit, NULL);
    if (j->site) {
        if (j->site->dir != KL_SITE_PRESENT || strcmp(j->site->id, id)) return KL_OK;
        j->done = true;
        j->st = ok ? remove_form(ctx, &w, j->edits, j->err) : kl_rule_not_applicable(j->err, "%s", w.why);
        return KL_OK;
    }
    json_t *feat = json_object();
    if (!feat) return KL_ERR_NOMEM;
    if (ok) {
        char shape[32];
        kl_snprintf(shape, sizeof shape, "m64n%dk16", w.n);
        json_object_set_new(feat, "form", json_string("wgmma from shared-memory descriptors"));
        json_object_set_new(feat, "shape", json_string(shape));
        json_object_set_new(feat, "dtype", json_string(w.dtype));
        json_object_set_new(feat, "layout", json_string("A K-major, B N-major, 128-byte swizzle"));
    } else {
        json_object_set_new(feat, "why_not", json_string(w.why));
    }
    return kl_sites_add(j->out, id, KL_SITE_PRESENT, kl_node_span(c.hit), name, feat, NULL,
                        ok ? "warpgroup MMA (wgmma) on shared-memory tiles (removable to per-warp mma.sync)"
                           : "warpgroup MMA (wgmma)");
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    wg_job j = {NULL, out, NULL, err, KL_OK, false};
    return kl_rules_each_function(ctx, "__global__", visit, &j, err);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    wg_job j = {site, NULL, out, err, KL_OK, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, &j, err);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
    if (!j.done) return kl_rule_not_applicable(err, "nothing to remove at %s", site->id);
    return j.st;
}

const kl_rule kl_rule_wgmma = {
    "wgmma", "multiply a warpgroup's tile with wgmma.mma_async on shared-memory descriptors (sm_90a)",
    NULL, 0, find, remove_site, NULL,
};
