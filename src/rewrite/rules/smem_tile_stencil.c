/* smem-tile: a stencil around each thread's pixel read through a halo tile, and the staged tile with halo
 * of the blur expert (apply and remove; smem_tile.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coalesce.h"
#include "rewrite/rules/smem_tile.h"
#include "util/util.h"

#define NAME "smem-tile"

/* ---- present: a staged tile with halo, read through ----------------------------------------------- */


typedef struct store_scan {
    const kl_rule_ctx *ctx;
    const char *arr;
    TSNode stores[4];
    unsigned nstores, reads;
} store_scan;

static bool store_visit(TSNode n, void *user)
{
    store_scan *s = user;
    if (rt_is(n, "assignment_expression")) {
        TSNode l = rt_field(n, "left");
        if (rt_is(l, "subscript_expression") && rt_is(rt_field(l, "argument"), "subscript_expression") &&
            smem_tile__text_is(s->ctx, rt_field(rt_field(l, "argument"), "argument"), s->arr)) {
            if (s->nstores < 4) s->stores[s->nstores] = n;
            s->nstores++;
            kl_ast_walk(rt_field(n, "right"), store_visit, s);
            return false;
        }
    }
    if (rt_is(n, "identifier") && smem_tile__text_is(s->ctx, n, s->arr)) s->reads++;
    return true;
}

/* The declaration (in the load statement `in`) that defines `name`, with its value. */
static TSNode local_decl(const kl_rule_ctx *ctx, TSNode in, const char *name, TSNode *value)
{
    TSNode stack[128];
    unsigned sp = 0;
    stack[sp++] = in;
    while (sp) {
        TSNode n = stack[--sp];
        if (rt_is(n, "init_declarator") && smem_tile__text_is(ctx, kl_ast_declarator_name(rt_field(n, "declarator")), name)) {
            *value = rt_field(n, "value");
            return ts_node_parent(n);
        }
        for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 128; c++) stack[sp++] = ts_node_named_child(n, c);
    }
    return (TSNode){0};
}

/* Does the text of n assign (`=` that is not part of a comparison, `++`, `--`, `op=`)? */
static bool text_assigns(const kl_rule_ctx *ctx, TSNode n)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    for (uint32_t i = a; i < b; i++) {
        char c = ctx->text[i], prev = i > a ? ctx->text[i - 1] : ' ', next = i + 1 < b ? ctx->text[i + 1] : ' ';
        if ((c == '+' && next == '+') || (c == '-' && next == '-')) return true;
        if (c != '=') continue;
        if (next == '=') {
            i++;
            continue;
        }
        if (prev == '<' || prev == '>' || prev == '!') {
            /* <= >= != ; but <<= >>= assign */
            if (i >= a + 2 && ctx->text[i - 2] == prev && prev != '!') return true;
            continue;
        }
        return true;
    }
    return false;
}

/* A read `*reinterpret_cast<const float4*>(&S[a][b])` (float2 too): the dereference node and the
 * width, or a null node. */
static TSNode vector_read(const kl_rule_ctx *ctx, TSNode rd, int *width)
{
    TSNode amp = ts_node_parent(rd);
    if (!rt_is(amp, "pointer_expression") || !smem_tile__text_is(ctx, rt_field(amp, "operator"), "&")) return (TSNode){0};
    TSNode args = ts_node_parent(amp);
    if (!rt_is(args, "argument_list") || ts_node_named_child_count(args) != 1) return (TSNode){0};
    TSNode call = ts_node_parent(args);
    if (!rt_is(call, "call_expression")) return (TSNode){0};
    char fn[128];
    smem_tile__squeezed(ctx, rt_field(call, "function"), fn, sizeof fn);
    if (!strcmp(fn, "reinterpret_cast<constfloat4*>") || !strcmp(fn, "reinterpret_cast<floatconst4*>")) *width = 4;
    else if (!strcmp(fn, "reinterpret_cast<constfloat2*>")) *width = 2;
    else return (TSNode){0};
    TSNode deref = ts_node_parent(call);
    if (!rt_is(deref, "pointer_expression") || !smem_tile__text_is(ctx, rt_field(deref, "operator"), "*")) return (TSNode){0};
    return deref;
}

/* Does kernel fn hold coalesce's staged exchange (coalesce_remove.c reads it)? */
static bool coalesce_exchange(const kl_rule_ctx *ctx, TSNode fn)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        if (!ts_node_eq(fs[i].def, fn)) continue;
        staged_form sf;
        char why[300] = "";
        return co_find_staged(ctx, &fs[i], &sf, why, sizeof why) > 0;
    }
    return false;
}

bool smem_tile__analyse_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, smem_tile__hp *h)
{
    memset(h, 0, sizeof *h);
    h->decl = decl;
    const char *src = kl_source_name(ctx->src);
    TSNode d = rt_field(decl, "declarator");
    if (!rt_is(d, "array_declarator") || !rt_is(rt_field(d, "declarator"), "array_declarator")) return false;
    if (ts_node_named_child_count(decl) > 3) return false;
    TSNode id = kl_ast_declarator_name(d);
    uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
    kl_snprintf(h->arr, sizeof h->arr, "%.*s", (int)(b - a), ctx->text + a);
    TSNode ty = rt_field(decl, "type");
    kl_snprintf(h->elem, sizeof h->elem, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                ctx->text + ts_node_start_byte(ty));
    /* one statement after the declaration stores into it, then a barrier, then only reads */
    store_scan all = {.ctx = ctx, .arr = h->arr};
    kl_ast_walk(kl_ast_function_body(fn), store_visit, &all);
    if (all.nstores != 1) return false;
    TSNode store = all.stores[0];
    TSNode load = store;
    while (!ts_node_eq(ts_node_parent(load), ts_node_parent(decl))) {
        load = ts_node_parent(load);
        if (ts_node_is_null(load)) return false;
    }
#define WHY(...) (kl_snprintf(h->why, sizeof h->why, __VA_ARGS__), true)
    h->load = load;
    h->store = store;
    h->sync = rt_next_stmt(load);
    /* not this shape (the GEMM tiles are reloaded inside their loop): no site */
    if (!rt_is_syncthreads(ctx, h->sync) || kl_affine_loop_enclosing(ax, load) >= 0) return false;
    if (!rt_is(ts_node_parent(load), "compound_statement") || !ts_node_eq(ts_node_parent(load), kl_ast_function_body(fn)))
        return WHY("%s:%u: the load is not at the kernel's top level", src, kl_ast_line(load));
    TSNode l = rt_field(store, "left");
    h->sub[0] = kl_ast_subscript_index(rt_field(l, "argument"));
    h->sub[1] = kl_ast_subscript_index(l);
    for (int i = 0; i < 2; i++) {
        if (!rt_is(h->sub[i], "identifier")) {
            if (coalesce_exchange(ctx, fn))
                return WHY("%s:%u: the tile is stored at a subscript that is not a variable: it is a transposed exchange "
                           "(`tile[threadIdx.y + j][threadIdx.x]` stored, read transposed), which coalesce removes",
                           src, kl_ast_line(store));
            return WHY("%s:%u: the tile is stored at a subscript that is not a variable", src, kl_ast_line(store));
        }
        uint32_t sa = ts_node_start_byte(h->sub[i]), sb = ts_node_end_byte(h->sub[i]);
        kl_snprintf(h->sv[i], sizeof h->sv[i], "%.*s", (int)(sb - sa), ctx->text + sa);
    }
    h->value = rt_field(store, "right");
    if (!smem_tile__text_is(ctx, rt_field(store, "operator"), "="))
        return WHY("%s:%u: the tile is updated, not stored", src, kl_ast_line(store));
    /* the value: from sy, sx, locals of the load defined from them, and block-uniform values */
    TSNode work[16];
    unsigned nw = 0, done = 0;
    work[nw++] = h->value;
    while (done < nw) {
        TSNode e = work[done++];
        TSNode stack[256];
        unsigned sp = 0;
        stack[sp++] = e;
        while (sp) {
            TSNode n = stack[--sp];
            if (rt_is(n, "field_expression")) {
                TSNode arg = rt_field(n, "argument");
                if (smem_tile__text_is(ctx, arg, "threadIdx"))
                    return WHY("%s:%u: the tile's value depends on the thread", src, kl_ast_line(n));
                continue;
            }
            if (rt_is(n, "identifier")) {
                char nm[64];
                smem_tile__squeezed(ctx, n, nm, sizeof nm);
                if (!strcmp(nm, h->sv[0]) || !strcmp(nm, h->sv[1])) continue;
                TSNode v = {0};
                TSNode dl = local_decl(ctx, h->load, nm, &v);
                if (!ts_node_is_null(dl)) {
                    bool seen = false;
                    for (unsigned q = 0; q < h->nv; q++) seen |= ts_node_eq(h->vdecls[q], dl);
                    if (!seen) {
                        if (h->nv >= 8 || nw >= 16) return WHY("%s:%u: too many locals in the load", src, kl_ast_line(dl));
                        h->vdecls[h->nv++] = dl;
                        work[nw++] = dl;
                    }
                    continue;
                }
                /* a value of the kernel outside the load: must not depend on the thread */
                if (smem_tile__depends(ax, ctx, n, "threadIdx.x") == 1 || smem_tile__depends(ax, ctx, n, "threadIdx.y") == 1 ||
                    smem_tile__depends(ax, ctx, n, "threadIdx.z") == 1)
                    return WHY("%s:%u: the tile's value depends on '%s', which differs between threads", src, kl_ast_line(n), nm);
                continue;
            }
            if (rt_is(n, "call_expression")) {
                stack[sp++] = rt_field(n, "arguments");
                continue;
            }
            if (rt_is(n, "assignment_expression") || rt_is(n, "update_expression")) {
                /* the tree may read `a < b && c >= d` as a template and an assignment: judge the text */
                if (text_assigns(ctx, n))
                    return WHY("%s:%u: the tile's value has side effects ('%.*s')", src, kl_ast_line(n),
                               (int)(ts_node_end_byte(n) - ts_node_start_byte(n)), ctx->text + ts_node_start_byte(n));
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 256; c++) stack[sp++] = ts_node_named_child(n, c);
        }
    }
    /* the declarations of sy, sx (and the value's locals) must be in the load, each once */
    for (int i = 0; i < 2; i++) {
        TSNode v;
        TSNode dl = local_decl(ctx, h->load, h->sv[i], &v);
        if (ts_node_is_null(dl))
            return WHY("%s:%u: the tile coordinate '%s' is not declared in the load", src, kl_ast_line(store), h->sv[i]);
        /* a loop's own variable (`for (int sy = threadIdx.y; sy < SH; sy += BY)`) is updated only there */
        TSNode lp = ts_node_parent(dl);
        bool loop_var = rt_is(lp, "for_statement") && ts_node_eq(rt_field(lp, "initializer"), dl) &&
                        kl_affine_loop_index(ax, lp) >= 0 && kl_affine_loop(ax, (unsigned)kl_affine_loop_index(ax, lp))->var &&
                        !strcmp(kl_affine_loop(ax, (unsigned)kl_affine_loop_index(ax, lp))->var, h->sv[i]);
        if (!loop_var && kl_affine_assign_count(ax, h->sv[i]) > 1)
            return WHY("%s:%u: the tile coordinate '%s' is assigned more than once", src, kl_ast_line(store), h->sv[i]);
    }
    /* every other use of the tile, after the barrier, is a read S[a][b] */
    smem_tile__read_scan rs = {.ctx = ctx, .arr = {h->arr, h->arr}};
    for (TSNode s = rt_next_stmt(h->sync); !ts_node_is_null(s); s = rt_next_stmt(s)) kl_ast_walk(s, smem_tile__read_visit, &rs);
    if (rs.n > 32) return WHY("%s: more than 32 reads of '%s'", src, h->arr);
    if (smem_tile__uses_of(ctx, kl_ast_function_body(fn), h->arr) != rs.n + 2)
        return WHY("%s: '%s' is used other than by its load and reads after the barrier", src, h->arr);
    for (unsigned r = 0; r < rs.n; r++) {
        TSNode p = ts_node_parent(rs.reads[r]);
        int width = 0;
        if (!strcmp(h->elem, "float") && !ts_node_is_null(vector_read(ctx, rs.reads[r], &width))) continue;
        if ((rt_is(p, "assignment_expression") && ts_node_eq(rt_field(p, "left"), rs.reads[r])) || rt_is(p, "update_expression") ||
            (rt_is(p, "pointer_expression") && smem_tile__text_is(ctx, rt_field(p, "operator"), "&")))
            return WHY("%s:%u: '%s' is written or its address taken after the barrier", src, kl_ast_line(p), h->arr);
    }
#undef WHY
    return true;
}

kl_status smem_tile__remove_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const smem_tile__hp *h, kl_edits *out, kl_error *err)
{
    (void)ax;
    const char *src = kl_source_name(ctx->src);
    if (h->why[0]) return kl_rule_not_applicable(err, "%s", h->why);
    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(h->load), ind, sizeof ind);
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the value's locals, in document order */
    TSNode vd[8];
    unsigned nv = h->nv;
    memcpy(vd, h->vdecls, nv * sizeof *vd);
    for (unsigned i = 0; i < nv; i++)
        for (unsigned j = i + 1; j < nv; j++)
            if (ts_node_start_byte(vd[j]) < ts_node_start_byte(vd[i])) {
                TSNode t = vd[i];
                vd[i] = vd[j], vd[j] = t;
            }
    kl_strbuf_addf(&sb, "%s// " NAME " removed: '%s' reads global memory where the tile was loaded from it\n", ind, h->arr);
    kl_strbuf_addf(&sb, "%sauto %s = [&](int %s, int %s) -> %s {\n", ind, h->arr, h->sv[0], h->sv[1], h->elem);
    for (unsigned i = 0; i < nv; i++) {
        char *t = rt_text(ctx, vd[i]);
        if (!t) goto oom;
        kl_strbuf_addf(&sb, "%s    %s\n", ind, t);
        free(t);
    }
    {
        char *v = rt_text(ctx, h->value);
        if (!v) goto oom;
        kl_strbuf_addf(&sb, "%s    return %s;\n%s};\n", ind, v, ind);
        free(v);
    }
    if (sb.failed) goto oom;
    {
        uint32_t a, b, a2, b2, a3, b3;
        rt_stmt_range(ctx, h->decl, NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
        rt_stmt_range(ctx, h->load, NULL, &a2, &b2);
        /* a comment / pragma line right above the load goes with it */
        uint32_t ls = rt_line_start(ctx, a2);
        if (ls > 0) {
            uint32_t pl = rt_line_start(ctx, ls - 1);
            const char *t = ctx->text + pl;
            while (*t == ' ' || *t == '\t') t++;
            if (!strncmp(t, "#pragma", 7) && pl >= b) a2 = pl;
        }
        KL_TRY(kl_edits_add(out, a2, b2, kl_strbuf_str(&sb)));
        rt_stmt_range(ctx, h->sync, NULL, &a3, &b3);
        KL_TRY(kl_edits_add(out, a3, b3, ""));
    }
    {
        smem_tile__read_scan rs = {.ctx = ctx, .arr = {h->arr, h->arr}};
        for (TSNode s = rt_next_stmt(h->sync); !ts_node_is_null(s); s = rt_next_stmt(s)) kl_ast_walk(s, smem_tile__read_visit, &rs);
        for (unsigned r = 0; r < rs.n && r < 32; r++) {
            TSNode rd = rs.reads[r];
            TSNode in = rt_field(rd, "argument");
            TSNode s0 = kl_ast_subscript_index(in), s1 = kl_ast_subscript_index(rd);
            int width = 0;
            TSNode deref = vector_read(ctx, rd, &width);
            if (!ts_node_is_null(deref)) {
                /* a float4 read of the row: its elements one by one */
                int l0 = (int)(ts_node_end_byte(s0) - ts_node_start_byte(s0)), l1 = (int)(ts_node_end_byte(s1) - ts_node_start_byte(s1));
                const char *t0 = ctx->text + ts_node_start_byte(s0), *t1 = ctx->text + ts_node_start_byte(s1);
                kl_strbuf vb = KL_STRBUF_INIT;
                kl_strbuf_addf(&vb, "make_float%d(", width);
                for (int e = 0; e < width; e++) {
                    if (e == 0) kl_strbuf_addf(&vb, "%s(%.*s, %.*s)", h->arr, l0, t0, l1, t1);
                    else kl_strbuf_addf(&vb, ", %s(%.*s, %.*s + %d)", h->arr, l0, t0, l1, t1, e);
                }
                kl_strbuf_addc(&vb, ')');
                char *vt = kl_strbuf_detach(&vb, NULL);
                if (!vt) goto oom;
                st = kl_edits_add(out, ts_node_start_byte(deref), ts_node_end_byte(deref), vt);
                free(vt);
                KL_TRY(st);
                continue;
            }
            KL_TRY(kl_edits_addf(out, ts_node_start_byte(rd), ts_node_end_byte(rd), "%s(%.*s, %.*s)", h->arr,
                                 (int)(ts_node_end_byte(s0) - ts_node_start_byte(s0)), ctx->text + ts_node_start_byte(s0),
                                 (int)(ts_node_end_byte(s1) - ts_node_start_byte(s1)), ctx->text + ts_node_start_byte(s1)));
        }
    }
    (void)fn;
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    kl_strbuf_release(&sb);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    (void)src;
    return st;
}

/* ---- apply: a stencil around each thread's pixel, read through a halo tile ------------------------ */




static bool cmp_op(const char *op)
{
    return !strcmp(op, "<") || !strcmp(op, "<=") || !strcmp(op, ">") || !strcmp(op, ">=") || !strcmp(op, "==") ||
           !strcmp(op, "!=") || !strcmp(op, "&&") || !strcmp(op, "||");
}

/* A token that needs no parentheses in a sum: an identifier or a number, maybe negated. */
bool smem_tile__simple_token(const char *s)
{
    if (*s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return false;
    return true;
}

bool smem_tile__is_continue_if(TSNode st)
{
    if (!rt_is(st, "if_statement") || !ts_node_is_null(rt_field(st, "alternative"))) return false;
    TSNode c = rt_field(st, "consequence");
    if (rt_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
    return rt_is(c, "continue_statement");
}

/* The conditions under which control reaches the read inside the loop nest: the conjuncts of the
 * enclosing ifs (and ternaries), and the negated disjuncts of `if (c) continue;` before it. */
static bool stencil_path(const kl_rule_ctx *ctx, smem_tile__sa *s)
{
    const char *src = kl_source_name(ctx->src);
#define SWHY(...) (kl_snprintf(s->why, sizeof s->why, __VA_ARGS__), false)
    for (TSNode c = s->read; !ts_node_eq(c, s->outer);) {
        TSNode p = ts_node_parent(c);
        if (ts_node_is_null(p)) return SWHY("%s: the read is not inside the loop", src);
        TSNode parts[SMAXC];
        unsigned np = 0;
        bool negated = false;
        if (rt_is(p, "if_statement") || rt_is(p, "conditional_expression")) {
            TSNode cons = rt_field(p, "consequence");
            if (!ts_node_eq(c, cons))
                return SWHY("%s:%u: the read sits in the condition or the else branch of a conditional", src, kl_ast_line(p));
            smem_tile__split_on(ctx, rt_is(p, "if_statement") ? smem_tile__if_cond(p) : rt_field(p, "condition"), "&&", parts, &np, SMAXC);
        } else if (rt_is(p, "else_clause"))
            return SWHY("%s:%u: the read sits in an else branch", src, kl_ast_line(p));
        else if (rt_is(p, "compound_statement")) {
            for (TSNode q = rt_prev_stmt(c); !ts_node_is_null(q); q = rt_prev_stmt(q)) {
                if (!smem_tile__is_continue_if(q)) continue;
                TSNode ps[SMAXC];
                unsigned nq = 0;
                smem_tile__split_on(ctx, smem_tile__if_cond(q), "||", ps, &nq, SMAXC);
                if (nq > SMAXC || s->nconj + nq > SMAXC) return SWHY("%s:%u: too many conditions", src, kl_ast_line(q));
                for (unsigned i = 0; i < nq; i++) {
                    s->conj[s->nconj] = ps[i];
                    s->neg[s->nconj++] = true;
                }
            }
        }
        (void)negated;
        if (np > SMAXC || s->nconj + np > SMAXC) return SWHY("%s:%u: too many conditions", src, kl_ast_line(p));
        for (unsigned i = 0; i < np; i++) {
            s->conj[s->nconj] = parts[i];
            s->neg[s->nconj++] = false;
        }
        c = p;
    }
    /* document order */
    for (unsigned i = 0; i < s->nconj; i++)
        for (unsigned j = i + 1; j < s->nconj; j++)
            if (ts_node_start_byte(s->conj[j]) < ts_node_start_byte(s->conj[i])) {
                TSNode t = s->conj[i];
                s->conj[i] = s->conj[j], s->conj[j] = t;
                bool b = s->neg[i];
                s->neg[i] = s->neg[j], s->neg[j] = b;
            }
    return true;
}

/* Is every leaf of e (the operands of comparisons, logical operators and `!`) a function of the
 * tile coordinates only: affine, each stencil axis' thread index moving it exactly as that axis'
 * loop offset does, no other thread index or loop? *mask gets the axes (dims) it depends on. */
static bool tile_expressible(const kl_rule_ctx *ctx, kl_affine_ctx *ax, smem_tile__sa *s, TSNode e, unsigned *mask)
{
    const char *src = kl_source_name(ctx->src);
    e = smem_tile__strip(e);
    if (ts_node_is_null(e) || ts_node_has_error(e)) return SWHY("%s: the read's guard or index does not parse", src);
    char b[8];
    smem_tile__binop(ctx, e, b, sizeof b);
    if (b[0] && cmp_op(b))
        return tile_expressible(ctx, ax, s, rt_field(e, "left"), mask) &&
               tile_expressible(ctx, ax, s, rt_field(e, "right"), mask);
    if (rt_is(e, "unary_expression") && smem_tile__text_is(ctx, rt_field(e, "operator"), "!"))
        return tile_expressible(ctx, ax, s, rt_field(e, "argument"), mask);
    kl_affine a = {0};
    if (kl_affine_of(ax, e, &a) != KL_OK) return SWHY("out of memory");
    bool ok = a.ok;
    if (!ok)
        kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' is not affine in the thread indices and loop offsets (%s)", src,
                    kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e),
                    a.why ? a.why : "unknown");
    static const char axes[] = "xyz";
    for (int k = 0; k < 3 && ok; k++) {
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", axes[k]);
        const char *ct = kl_affine_coef(&a, thr), *cv = NULL;
        bool has_dim = false;
        for (unsigned d = 0; d < s->nd; d++)
            if (s->d[d].axis == axes[k]) {
                has_dim = true;
                cv = kl_affine_coef(&a, s->d[d].L->var);
                if (cv) *mask |= 1u << d;
            }
        if ((!ct && !cv) || (ct && cv && !strcmp(ct, cv))) continue;
        ok = false;
        if (has_dim)
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' moves with %s by %s but with its loop offset by %s: its "
                        "value is not a function of the tile position", src, kl_ast_line(e),
                        (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e), thr,
                        ct ? ct : "0", cv ? cv : "0");
        else
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' depends on %s, along which the stencil has no offset", src,
                        kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e),
                        thr);
    }
    for (unsigned t = 0; t < a.nterms && ok; t++) {
        const char *v = a.terms[t].var;
        bool known = !strncmp(v, "threadIdx.", 10) || !strncmp(v, "blockIdx.", 9);
        for (unsigned d = 0; d < s->nd; d++) known |= !strcmp(v, s->d[d].L->var);
        if (!known) {
            ok = false;
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' depends on the loop variable '%s', which is not a stencil "
                        "offset", src, kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)),
                        ctx->text + ts_node_start_byte(e), v);
        }
    }
    kl_affine_release(&a);
    return ok;
}


bool smem_tile__ident_visit(TSNode n, void *user)
{
    smem_tile__ident_scan *s = user;
    if (rt_is(n, "identifier")) {
        char nm[64];
        smem_tile__squeezed(s->ctx, n, nm, sizeof nm);
        for (unsigned i = 0; i < s->n; i++)
            if (!strcmp(s->names[i], nm)) return false;
        if (s->n < s->max) kl_snprintf(s->names[s->n++], 64, "%s", nm);
        return false;
    }
    if (rt_is(n, "field_expression")) {
        kl_ast_walk(rt_field(n, "argument"), smem_tile__ident_visit, user);
        return false;
    }
    return true;
}

/* Does declaration d declare `name`? */
bool smem_tile__declares(const kl_rule_ctx *ctx, TSNode d, const char *name)
{
    if (!rt_is(d, "declaration")) return false;
    for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
        TSNode ch = ts_node_named_child(d, k);
        if (!rt_is(ch, "init_declarator") && !rt_is(ch, "identifier") && !rt_is(ch, "array_declarator") &&
            !rt_is(ch, "pointer_declarator"))
            continue;
        if (smem_tile__text_is(ctx, kl_ast_declarator_name(ch), name) || (rt_is(ch, "identifier") && smem_tile__text_is(ctx, ch, name))) return true;
    }
    return false;
}


bool smem_tile__decl_scan_visit(TSNode n, void *user)
{
    smem_tile__decl_scan *d = user;
    if (!ts_node_is_null(d->found)) return false;
    if (rt_is(n, "declaration") && smem_tile__declares(d->ctx, n, d->name)) {
        d->found = n;
        return false;
    }
    return true;
}

/* The declarations in the loop bodies (before the loop or statement leading to the read) that the
 * guard and the index need, transitively; each must be free of memory reads and assigned once. */
static bool stencil_decls(const kl_rule_ctx *ctx, kl_affine_ctx *ax, smem_tile__sa *s)
{
    const char *src = kl_source_name(ctx->src);
    char names[96][64];
    smem_tile__ident_scan is = {.ctx = ctx, .names = names, .max = 96};
    kl_ast_walk(s->ridx, smem_tile__ident_visit, &is);
    for (unsigned i = 0; i < s->nconj; i++) kl_ast_walk(s->conj[i], smem_tile__ident_visit, &is);
    for (unsigned w = 0; w < is.n; w++) {
        const char *nm = names[w];
        bool loopvar = false;
        for (unsigned d = 0; d < s->nd; d++) loopvar |= !strcmp(nm, s->d[d].L->var);
        if (loopvar) continue;
        bool found = false;
        for (unsigned d = 0; d < s->nd && !found; d++) {
            TSNode body = rt_field(s->d[d].loop, "body");
            if (!rt_is(body, "compound_statement")) continue;
            /* the child of the body on the way to the read */
            TSNode path = s->read;
            while (!ts_node_is_null(path) && !ts_node_eq(ts_node_parent(path), body)) path = ts_node_parent(path);
            for (uint32_t k = 0; k < ts_node_named_child_count(body) && !found; k++) {
                TSNode st = ts_node_named_child(body, k);
                if (ts_node_eq(st, path)) break;
                if (!smem_tile__declares(ctx, st, nm)) continue;
                found = true;
                if (!smem_tile__hoistable(ctx, st))
                    return SWHY("%s:%u: the declaration of '%s' reads memory or calls a function: the tile load cannot "
                                "repeat it", src, kl_ast_line(st), nm);
                if (kl_affine_assign_count(ax, nm) > 1)
                    return SWHY("%s:%u: '%s' is assigned more than once", src, kl_ast_line(st), nm);
                bool seen = false;
                for (unsigned q = 0; q < s->d[d].ndecls; q++) seen |= ts_node_eq(s->d[d].decls[q], st);
                if (!seen) {
                    if (s->d[d].ndecls >= 16) return SWHY("%s:%u: too many declarations in the loop", src, kl_ast_line(st));
                    s->d[d].decls[s->d[d].ndecls++] = st;
                    kl_ast_walk(st, smem_tile__ident_visit, &is);
                }
            }
        }
        if (found) continue;
        smem_tile__decl_scan ds = {.ctx = ctx, .name = nm};
        kl_ast_walk(s->outer, smem_tile__decl_scan_visit, &ds);
        if (!ts_node_is_null(ds.found))
            return SWHY("%s:%u: '%s' is declared inside the loops where a tile load cannot repeat it", src,
                        kl_ast_line(ds.found), nm);
    }
    if (is.n >= is.max) return SWHY("%s:%u: too many names in the read's guard", src, kl_ast_line(s->read));
    for (unsigned d = 0; d < s->nd; d++)
        for (unsigned i = 0; i < s->d[d].ndecls; i++)
            for (unsigned j = i + 1; j < s->d[d].ndecls; j++)
                if (ts_node_start_byte(s->d[d].decls[j]) < ts_node_start_byte(s->d[d].decls[i])) {
                    TSNode t = s->d[d].decls[i];
                    s->d[d].decls[i] = s->d[d].decls[j], s->d[d].decls[j] = t;
                }
    return true;
}

/* The offset count of a loop as text: B for `v = 0; v < B`, else B - S (+ 1 for `<=`). */
static void trip_text(const kl_ax_loop *L, char *buf, size_t size)
{
    char b[256], st[256];
    smem_tile__squeeze_str(L->bound, b, sizeof b);
    smem_tile__squeeze_str(L->start, st, sizeof st);
    bool le = !strcmp(L->cmp, "<=");
    const char *bp = smem_tile__simple_token(b) ? "" : "(", *bq = smem_tile__simple_token(b) ? "" : ")";
    if (!strcmp(st, "0")) kl_snprintf(buf, size, "%s%s%s%s", le ? bp : "", L->bound, le ? bq : "", le ? " + 1" : "");
    else if (st[0] == '-' && smem_tile__simple_token(st + 1))
        kl_snprintf(buf, size, "%s%s%s + %s%s", bp, L->bound, bq, st + 1, le ? " + 1" : "");
    else
        kl_snprintf(buf, size, "%s%s%s - %s%s%s%s", bp, L->bound, bq, smem_tile__simple_token(st) ? "" : "(", L->start,
                    smem_tile__simple_token(st) ? "" : ")", le ? " + 1" : "");
}

/* A candidate stencil: a top-level loop holding a read whose index moves with a loop offset inside
 * it exactly as with a thread index. */
bool smem_tile__stencil_candidate(const kl_rule_ctx *ctx, kl_affine_ctx *ax, unsigned li)
{
    (void)ctx;
    const kl_ax_loop *L = kl_affine_loop(ax, li);
    if (L->kind != KL_LOOP_FOR || !L->var || L->parent >= 0) return false;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || a->param < 0 || !a->flat.ok || !smem_tile__node_in(a->node, L->node)) continue;
        for (unsigned k = 0; k < kl_affine_loop_count(ax); k++) {
            const kl_ax_loop *M = kl_affine_loop(ax, k);
            if (!M->var || !smem_tile__node_in(M->node, L->node)) continue;
            const char *cv = kl_affine_coef(&a->flat, M->var);
            const char *cx = kl_affine_coef(&a->flat, "threadIdx.x"), *cy = kl_affine_coef(&a->flat, "threadIdx.y");
            if (cv && ((cx && !strcmp(cv, cx)) || (cy && !strcmp(cv, cy)))) return true;
        }
    }
    return false;
}

bool smem_tile__analyse_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode outer, smem_tile__sa *s)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->outer = outer;
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(outer);
    if (ts_node_has_error(outer)) return SWHY("%s:%u: the loop does not parse", src, ln);
    /* the read: one subscript of a pointer parameter moving with a loop offset as with a thread index */
    const kl_ax_access *rd = NULL;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || a->param < 0 || !a->flat.ok || !smem_tile__node_in(a->node, outer)) continue;
        bool moves = false;
        for (unsigned k = 0; k < kl_affine_loop_count(ax) && !moves; k++) {
            const kl_ax_loop *M = kl_affine_loop(ax, k);
            if (!M->var || !smem_tile__node_in(M->node, outer)) continue;
            const char *cv = kl_affine_coef(&a->flat, M->var);
            const char *cx = kl_affine_coef(&a->flat, "threadIdx.x"), *cy = kl_affine_coef(&a->flat, "threadIdx.y");
            moves = cv && ((cx && !strcmp(cv, cx)) || (cy && !strcmp(cv, cy)));
        }
        if (!moves) continue;
        if (rd)
            return SWHY("%s:%u: two reads ('%s' at lines %u and %u) move with the thread and the loop offsets; one "
                        "stencil operand is tiled", src, ln, a->array, kl_ast_line(rd->node), kl_ast_line(a->node));
        rd = a;
    }
    if (!rd) return SWHY("%s:%u: no read moves with a loop offset as with a thread index", src, ln);
    s->read = rd->node;
    kl_snprintf(s->arr, sizeof s->arr, "%s", rd->array);
    if (rd->ndims != 1 || !rt_is(s->read, "subscript_expression"))
        return SWHY("%s:%u: the read of '%s' is not a 1-D subscript", src, kl_ast_line(s->read), s->arr);
    s->ridx = kl_ast_subscript_index(s->read);
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->write && !strcmp(a->array, s->arr))
            return SWHY("%s:%u: '%s' is written in the kernel: a tile of it would go stale", src, kl_ast_line(a->node), s->arr);
        if (a != rd && !strcmp(a->array, s->arr) && smem_tile__node_in(a->node, outer))
            return SWHY("%s:%u: '%s' is read twice in the loop; one read is tiled", src, kl_ast_line(a->node), s->arr);
    }
    if (!smem_tile__elem_of(ctx, ax, fn, s->arr, s->elem, sizeof s->elem))
        return SWHY("%s:%u: the element type of '%s' is unknown", src, kl_ast_line(s->read), s->arr);
    /* the loops from the read out to the outer one */
    TSNode loops[4];
    unsigned nl = 0;
    for (TSNode n = ts_node_parent(s->read); !ts_node_is_null(n); n = ts_node_parent(n)) {
        if (rt_is(n, "while_statement") || rt_is(n, "do_statement"))
            return SWHY("%s:%u: the read sits in a while loop", src, kl_ast_line(n));
        if (rt_is(n, "for_statement")) {
            if (nl >= 3) return SWHY("%s:%u: more than two loops around the read", src, kl_ast_line(n));
            loops[nl++] = n;
        }
        if (ts_node_eq(n, outer)) break;
    }
    if (nl > 2) return SWHY("%s:%u: more than two loops around the read; a 1-D or 2-D stencil is tiled", src, ln);
    s->nd = nl;
    for (unsigned d = 0; d < nl; d++) {
        smem_tile__sdim *D = &s->d[d];
        D->loop = loops[nl - 1 - d];
        int li = kl_affine_loop_index(ax, D->loop);
        if (li < 0) return SWHY("%s:%u: the loop is not understood", src, kl_ast_line(D->loop));
        D->L = kl_affine_loop(ax, (unsigned)li);
        const kl_ax_loop *L = D->L;
        if (!L->var || !L->start || !L->bound || !L->cmp || (strcmp(L->cmp, "<") && strcmp(L->cmp, "<=")) ||
            !L->step_is_int || L->step_int != 1)
            return SWHY("%s:%u: the loop is not `for (T v = S; v < B; v++)` (or `v <= B`)", src, kl_ast_line(D->loop));
        if (strlen(L->bound) > 160 || strlen(L->start) > 60 || strlen(L->var) > 48)
            return SWHY("%s:%u: the loop's bounds are too long to rewrite", src, kl_ast_line(D->loop));
        TSNode init = rt_field(D->loop, "initializer");
        if (!rt_is(init, "declaration")) return SWHY("%s:%u: the loop does not declare its variable", src, kl_ast_line(D->loop));
        TSNode ty = rt_field(init, "type");
        kl_snprintf(D->type, sizeof D->type, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                    ctx->text + ts_node_start_byte(ty));
        const char *cv = kl_affine_coef(&rd->flat, L->var);
        const char *cx = kl_affine_coef(&rd->flat, "threadIdx.x"), *cy = kl_affine_coef(&rd->flat, "threadIdx.y");
        if (cv && cx && !strcmp(cv, cx)) D->axis = 'x';
        else if (cv && cy && !strcmp(cv, cy)) D->axis = 'y';
        else
            return SWHY("%s:%u: the offset '%s' moves the read of '%s' by %s, unlike threadIdx.x (%s) and threadIdx.y (%s)",
                        src, kl_ast_line(D->loop), L->var, s->arr, cv ? cv : "0", cx ? cx : "0", cy ? cy : "0");
        D->fixed = L->trip_known && L->trip >= 1;
        D->ntrip = L->trip;
        trip_text(L, D->trip, sizeof D->trip);
    }
    if (nl == 2 && s->d[0].axis == s->d[1].axis)
        return SWHY("%s:%u: both loops move the read along threadIdx.%c", src, ln, s->d[0].axis);
    if (nl == 1 && s->d[0].axis != 'x') return SWHY("%s:%u: a 1-D stencil along threadIdx.y is not tiled", src, ln);
    /* the guard of the read, and everything the load repeats, must be a function of the tile position */
    if (!stencil_path(ctx, s)) return false;
    unsigned mask = 0;
    if (!tile_expressible(ctx, ax, s, s->ridx, &mask)) return false;
    unsigned nb[2] = {0, 0};
    for (unsigned i = 0; i < s->nconj; i++) {
        unsigned m = 0;
        if (!tile_expressible(ctx, ax, s, s->conj[i], &m)) return false;
        for (unsigned d = 0; d < s->nd; d++)
            if (m & (1u << d)) nb[d]++;
    }
    for (unsigned d = 0; d < s->nd; d++)
        if (nb[d] < 2)
            return SWHY("%s:%u: the read of '%s' is not guarded on both sides along %s ('%s'): a halo tile would load "
                        "outside the image", src, kl_ast_line(s->read), s->arr, s->d[d].axis == 'x' ? "x" : "y", s->d[d].L->var);
    if (!stencil_decls(ctx, ax, s)) return false;
    /* where the loop sits: the barrier must be reached by every thread */
    smem_tile__placement pl;
    if (!smem_tile__loop_placement(ctx, src, fn, outer, &pl, s->why, sizeof s->why)) return false;
    s->form = pl.form, s->guard = pl.guard, s->npre = pl.npre;
    memcpy(s->pre, pl.pre, sizeof pl.pre);
    for (unsigned i = 0; i < pl.npre; i++)
        if (pl.guarded[i])
            return SWHY("%s:%u: the statement between the early return and the loop reads memory or calls a function: "
                        "it cannot run in the threads that returned", src, kl_ast_line(pl.pre[i]));
    char bwhy[300];
    if (!smem_tile__launch_block(ctx, kname, s->dim, s->btext, bwhy, sizeof bwhy)) return SWHY("%s: %s", src, bwhy);
    if (s->dim[2] != 1 || (nl == 1 && s->dim[1] != 1))
        return SWHY("%s: kernel '%s' is launched with a %lldx%lldx%lld block; a %s stencil tile needs a %s block", src,
                    kname, (long long)s->dim[0], (long long)s->dim[1], (long long)s->dim[2], nl == 1 ? "1-D" : "2-D",
                    nl == 1 ? "1-D" : "2-D");
    return true;
}

/* The text of a guard conjunct: negated, or parenthesized where `&&` would bind it differently. */
static char *conj_text(const kl_rule_ctx *ctx, TSNode c, bool neg)
{
    if (neg) return smem_tile__negate(ctx, c);
    TSNode s = smem_tile__strip(c);
    char b[8];
    smem_tile__binop(ctx, s, b, sizeof b);
    bool wrap = !rt_is(c, "parenthesized_expression") &&
                (!strcmp(b, "||") || rt_is(s, "conditional_expression") || rt_is(s, "assignment_expression") ||
                 rt_is(s, "comma_expression"));
    char *t = rt_text(ctx, c);
    if (!t || !wrap) return t;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "(%s)", t);
    free(t);
    return kl_strbuf_detach(&sb, NULL);
}

/* The compute-side read of the tile for axis dim d: `threadIdx.y + i` (or `threadIdx.y + (i - S)`). */
void smem_tile__tile_coord(const smem_tile__sdim *D, char *buf, size_t size)
{
    char st[256];
    smem_tile__squeeze_str(D->L->start, st, sizeof st);
    if (!strcmp(st, "0")) kl_snprintf(buf, size, "threadIdx.%c + %s", D->axis, D->L->var);
    else if (st[0] == '-' && smem_tile__simple_token(st + 1))
        kl_snprintf(buf, size, "threadIdx.%c + (%s + %s)", D->axis, D->L->var, st + 1);
    else if (smem_tile__simple_token(st)) kl_snprintf(buf, size, "threadIdx.%c + (%s - %s)", D->axis, D->L->var, D->L->start);
    else kl_snprintf(buf, size, "threadIdx.%c + (%s - (%s))", D->axis, D->L->var, D->L->start);
}

/* What the halo load stores: the read's guard ? the read : 0 (a new string, NULL when out of memory). */
char *smem_tile__stencil_value(const kl_rule_ctx *ctx, const smem_tile__sa *s)
{
    char zero[96];
    smem_tile__zero_of(s->elem, zero, sizeof zero);
    kl_strbuf vb = KL_STRBUF_INIT;
    for (unsigned i = 0; i < s->nconj; i++) {
        char *t = conj_text(ctx, s->conj[i], s->neg[i]);
        if (!t) {
            kl_strbuf_release(&vb);
            return NULL;
        }
        kl_strbuf_addf(&vb, "%s%s", i ? " && " : "", t);
        free(t);
    }
    char *rt = rt_text(ctx, s->read);
    if (!rt) {
        kl_strbuf_release(&vb);
        return NULL;
    }
    kl_strbuf_addf(&vb, " ? %s : %s", rt, zero);
    free(rt);
    return kl_strbuf_detach(&vb, NULL);
}

kl_status smem_tile__apply_stencil(const kl_rule_ctx *ctx, smem_tile__sa *s, int64_t maxr, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(s->outer);
    if (maxr < 1 || maxr > 32)
        return kl_rule_not_applicable(err, "%s:%u: max_radius %lld is outside 1..32", src, ln, (long long)maxr);
    char tname[96], base[80];
    kl_snprintf(base, sizeof base, "%s_s", s->arr);
    smem_tile__fresh_name(ctx, s->fn, base, tname, sizeof tname);
    /* per axis: the tile's extent, the load's extent, the coordinate names */
    bool runtime = false;
    int64_t elems = 1;
    kl_strbuf cond = KL_STRBUF_INIT;
    for (unsigned d = 0; d < s->nd; d++) {
        smem_tile__sdim *D = &s->d[d];
        const char *bt = s->btext[D->axis == 'x' ? 0 : 1];
        int64_t bv = s->dim[D->axis == 'x' ? 0 : 1];
        kl_snprintf(base, sizeof base, "s%c", D->axis);
        smem_tile__fresh_name(ctx, s->fn, base, D->svar, sizeof D->svar);
        if (D->fixed) {
            if (D->ntrip > 1) kl_snprintf(D->ext, sizeof D->ext, "%s + %lld", bt, (long long)(D->ntrip - 1));
            else kl_snprintf(D->ext, sizeof D->ext, "%s", bt);
            kl_snprintf(D->loadext, sizeof D->loadext, "%s", D->ext);
            elems *= bv + D->ntrip - 1;
        } else {
            runtime = true;
            kl_snprintf(D->ext, sizeof D->ext, "%s + 2 * %lld", bt, (long long)maxr);
            kl_snprintf(D->loadext, sizeof D->loadext, "%s + %s - 1", bt, D->trip);
            elems *= bv + 2 * maxr;
            char t1[256], t0[256];
            smem_tile__squeeze_str(D->trip, t1, sizeof t1);
            smem_tile__squeeze_str(d ? s->d[0].trip : "", t0, sizeof t0);
            if (d == 1 && !s->d[0].fixed && !strcmp(t0, t1)) continue;
            kl_strbuf_addf(&cond, "%s%s <= 2 * %lld + 1", cond.len ? " && " : "", D->trip, (long long)maxr);
        }
    }
    unsigned esize = rt_type_size(s->elem);
    if (!esize) esize = 8;
    if (elems * esize > 48 * 1024) {
        kl_strbuf_release(&cond);
        return kl_rule_not_applicable(err, "%s:%u: the tile with its halo takes %lld bytes of shared memory, more than "
                                      "48 KiB", src, ln, (long long)(elems * esize));
    }
    char *ctext = kl_strbuf_detach(&cond, NULL);
    if (!ctext) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char ind[64], lind[64], unit[64];
    TSNode anchor = s->form == 'N' ? s->outer : s->guard;
    rt_indent_of(ctx, ts_node_start_byte(anchor), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(s->outer), lind, sizeof lind);
    if (s->form == 'I' && strlen(lind) > strlen(ind)) kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    else if (ind[0] && !strchr(ind, '\t')) kl_snprintf(unit, sizeof unit, "%s", ind);
    else kl_snprintf(unit, sizeof unit, "    ");
    kl_status st = KL_OK;
    char *pre = NULL, *load = NULL, *guard_text = NULL, *compute = NULL, *copy = NULL, *orig = NULL, *value = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the stored value: the naive's guard ? the read : 0 */
    value = smem_tile__stencil_value(ctx, s);
    if (!value) goto oom;
    /* the cooperative load: the loops over the tile, each repeating the offset and the locals it needs */
    {
        char bind[192];
        kl_snprintf(bind, sizeof bind, "%s%s", ind, runtime ? unit : "");
        if (runtime) kl_strbuf_addf(&sb, "if (%s) {\n%s", ctext, bind);
        for (unsigned d = 0; d < s->nd; d++) {
            const smem_tile__sdim *D = &s->d[d];
            const char *bt = s->btext[D->axis == 'x' ? 0 : 1];
            char li[256] = "";
            for (unsigned k = 0; k <= d; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "for (int %s = threadIdx.%c; %s < %s; %s += %s) {\n", D->svar, D->axis, D->svar, D->loadext,
                           D->svar, bt);
            char st0[256];
            smem_tile__squeeze_str(D->L->start, st0, sizeof st0);
            if (!strcmp(st0, "0"))
                kl_strbuf_addf(&sb, "%s%s%s %s = %s - (int)threadIdx.%c;\n", bind, li, D->type, D->L->var, D->svar, D->axis);
            else
                kl_strbuf_addf(&sb, "%s%s%s %s = %s%s%s + %s - (int)threadIdx.%c;\n", bind, li, D->type, D->L->var,
                               smem_tile__simple_token(st0) ? "" : "(", D->L->start, smem_tile__simple_token(st0) ? "" : ")", D->svar, D->axis);
            for (unsigned q = 0; q < D->ndecls; q++) {
                char dind[64];
                rt_indent_of(ctx, ts_node_start_byte(D->decls[q]), dind, sizeof dind);
                char *t = rt_text(ctx, D->decls[q]);
                char *r = t ? smem_tile__reindent_node_text(dind, t, (int)(strlen(bind) + strlen(li)) - (int)strlen(dind)) : NULL;
                free(t);
                if (!r) {
                    st = kl_rule_not_applicable(err, "%s:%u: the declaration is indented with tabs", src,
                                                kl_ast_line(D->decls[q]));
                    goto cleanup;
                }
                kl_strbuf_addf(&sb, "%s%s%s\n", bind, li, r);
                free(r);
            }
            if (d + 1 < s->nd) kl_strbuf_addf(&sb, "%s%s", bind, li);
        }
        {
            char li[256] = "";
            for (unsigned k = 0; k < s->nd; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "%s%s%s", bind, li, tname);
            for (unsigned k = 0; k < s->nd; k++) kl_strbuf_addf(&sb, "[%s]", s->d[s->nd == 2 && s->d[0].axis == 'x' ? 1 - k : k].svar);
            kl_strbuf_addf(&sb, " = %s;\n", value);
        }
        for (unsigned d = s->nd; d-- > 0;) {
            char li[256] = "";
            for (unsigned k = 0; k < d; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "%s%s}\n", bind, li);
        }
        if (runtime) kl_strbuf_addf(&sb, "%s__syncthreads();\n%s}", bind, ind);
        else kl_strbuf_addf(&sb, "%s__syncthreads();", ind);
        load = kl_strbuf_detach(&sb, NULL);
        if (!load) goto oom;
    }
    /* the read of the tile ([y][x] order) */
    char tread[512];
    {
        char c[2][192];
        unsigned order[2] = {0, 1};
        if (s->nd == 2 && s->d[0].axis == 'x') order[0] = 1, order[1] = 0;
        kl_snprintf(tread, sizeof tread, "%s", tname);
        for (unsigned k = 0; k < s->nd; k++) {
            smem_tile__tile_coord(&s->d[order[k]], c[k], sizeof c[k]);
            kl_snprintf(tread + strlen(tread), sizeof tread - strlen(tread), "[%s]", c[k]);
        }
    }
    /* the declaration and its marker */
    kl_strbuf_addf(&sb, "%s// " NAME ": '%s' with its halo in shared memory", ind, s->arr);
    if (runtime) kl_strbuf_addf(&sb, " (the loop reads global memory unless %s)", ctext);
    kl_strbuf_addf(&sb, "\n%s__shared__ %s %s", ind, s->elem, tname);
    {
        unsigned order[2] = {0, 1};
        if (s->nd == 2 && s->d[0].axis == 'x') order[0] = 1, order[1] = 0;
        for (unsigned k = 0; k < s->nd; k++) kl_strbuf_addf(&sb, "[%s]", s->d[order[k]].ext);
    }
    kl_strbuf_adds(&sb, ";\n");
    char *decl = kl_strbuf_detach(&sb, NULL);
    if (!decl) goto oom;
    /* the compute: the loop with the read from the tile; with a run-time extent, the original loop
     * stays as the path for offsets beyond max_radius */
    if (runtime) {
        smem_tile__rep r = {ts_node_start_byte(s->read), ts_node_end_byte(s->read), tread};
        char *raw = smem_tile__splice(ctx, ts_node_start_byte(s->outer), ts_node_end_byte(s->outer), &r, 1);
        char *otext = rt_text(ctx, s->outer);
        if (!raw || !otext) {
            free(raw);
            free(otext);
            free(decl);
            goto oom;
        }
        copy = smem_tile__reindent_node_text(lind, raw, (int)strlen(unit));
        orig = smem_tile__reindent_node_text(lind, otext, (int)strlen(unit));
        free(raw);
        free(otext);
        if (!copy || !orig) {
            free(decl);
            goto oom;
        }
        kl_strbuf_addf(&sb, "if (%s) {\n%s%s%s\n%s} else {\n%s%s%s\n%s}", ctext, lind, unit, copy, lind, lind, unit, orig,
                       lind);
        compute = kl_strbuf_detach(&sb, NULL);
        if (!compute) {
            free(decl);
            goto oom;
        }
    }
    if (s->form == 'I' && s->npre) {
        uint32_t a = rt_line_start(ctx, ts_node_start_byte(s->pre[0]));
        uint32_t b = rt_line_start(ctx, ts_node_start_byte(s->outer));
        pre = rt_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) {
            free(decl);
            st = kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs", src,
                                        kl_ast_line(s->pre[0]));
            goto cleanup;
        }
    }
    if (s->form == 'I') {
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(s->guard));
        st = kl_edits_addf(out, at, at, "%s%s%s%s\n", decl, pre ? pre : "", ind, load);
        if (st == KL_OK && s->npre)
            st = kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(s->pre[0])),
                              rt_line_start(ctx, ts_node_start_byte(s->outer)), "");
    } else if (s->form == 'R') {
        uint32_t a = rt_line_start(ctx, ts_node_start_byte(s->guard));
        uint32_t b = rt_line_end(ctx, ts_node_end_byte(s->guard) - 1);
        st = kl_edits_add(out, a, b, decl);
        guard_text = rt_text(ctx, s->guard);
        if (!guard_text) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(s->outer));
        if (st == KL_OK) st = kl_edits_addf(out, at, at, "%s%s\n%s%s\n", ind, load, ind, guard_text);
    } else {
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(s->outer));
        st = kl_edits_addf(out, at, at, "%s%s%s\n", decl, ind, load);
    }
    free(decl);
    if (st == KL_OK) {
        if (runtime) st = kl_edits_add(out, ts_node_start_byte(s->outer), ts_node_end_byte(s->outer), compute);
        else st = kl_edits_add(out, ts_node_start_byte(s->read), ts_node_end_byte(s->read), tread);
    }
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    kl_strbuf_release(&sb);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(ctext);
    free(pre);
    free(load);
    free(guard_text);
    free(compute);
    free(copy);
    free(orig);
    free(value);
    return st;
}
#undef SWHY

/* ---- present: a stencil halo tile (apply's output) ------------------------------------------------ */


typedef struct chain_scan {
    const kl_rule_ctx *ctx;
    const char *arr;
    TSNode chains[40];
    unsigned depth[40];
    unsigned n;
} chain_scan;

static bool chain_visit(TSNode n, void *user)
{
    chain_scan *c = user;
    if (!rt_is(n, "subscript_expression")) return true;
    unsigned depth = 0;
    TSNode b = n;
    while (rt_is(b, "subscript_expression")) b = rt_field(b, "argument"), depth++;
    if (!rt_is(b, "identifier") || !smem_tile__text_is(c->ctx, b, c->arr)) return true;
    if (c->n < 40) c->chains[c->n] = n, c->depth[c->n] = depth;
    c->n++;
    return false;
}

/* The outermost for loop around n below `stop` (a null node when none). */
static TSNode outermost_for(TSNode n, TSNode stop)
{
    TSNode best = {0};
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p) && !ts_node_eq(p, stop); p = ts_node_parent(p))
        if (rt_is(p, "for_statement")) best = p;
    return best;
}

static TSNode only_stmt(TSNode compound)
{
    if (rt_is(compound, "else_clause")) compound = ts_node_named_child(compound, 0);
    if (!rt_is(compound, "compound_statement")) return compound;
    TSNode one = {0};
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(compound); i++) {
        TSNode c = ts_node_named_child(compound, i);
        if (rt_is(c, "comment")) continue;
        one = c;
        n++;
    }
    return n == 1 ? one : (TSNode){0};
}

/* Is decl a stencil halo tile as apply writes it (the shape only; remove_stencil checks that the
 * global reads it writes back are sound)? */
bool smem_tile__analyse_stencil_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, smem_tile__sp *p)
{
    memset(p, 0, sizeof *p);
    p->decl = decl;
    TSNode fbody = kl_ast_function_body(fn);
    if (!ts_node_eq(ts_node_parent(decl), fbody) || ts_node_named_child_count(decl) > 3) return false;
    TSNode d = rt_field(decl, "declarator");
    if (!rt_is(d, "array_declarator")) return false;
    p->nd = rt_is(rt_field(d, "declarator"), "array_declarator") ? 2 : 1;
    if (p->nd == 2 && rt_is(rt_field(rt_field(d, "declarator"), "declarator"), "array_declarator")) return false;
    TSNode id = kl_ast_declarator_name(d);
    kl_snprintf(p->arr, sizeof p->arr, "%.*s", (int)(ts_node_end_byte(id) - ts_node_start_byte(id)),
                ctx->text + ts_node_start_byte(id));
    chain_scan cs = {.ctx = ctx, .arr = p->arr};
    kl_ast_walk(fbody, chain_visit, &cs);
    if (cs.n > 40 || smem_tile__uses_of(ctx, fbody, p->arr) != cs.n + 1) return false;
    for (unsigned i = 0; i < cs.n; i++) {
        if (cs.depth[i] != p->nd) return false;
        TSNode par = ts_node_parent(cs.chains[i]);
        if (rt_is(par, "assignment_expression") && ts_node_eq(rt_field(par, "left"), cs.chains[i])) {
            if (!ts_node_is_null(p->store) || !smem_tile__text_is(ctx, rt_field(par, "operator"), "=")) return false;
            p->store = par;
        } else if (p->nreads < 32)
            p->reads[p->nreads++] = cs.chains[i];
        else return false;
    }
    if (ts_node_is_null(p->store) || !p->nreads) return false;
    /* the value: cond ? G[idx] : 0 */
    TSNode v = smem_tile__strip(rt_field(p->store, "right"));
    if (rt_is(v, "conditional_expression")) {
        if (!smem_tile__zero_value(ctx, rt_field(v, "alternative"))) return false;
        p->cond = rt_field(v, "condition");
        p->gread = smem_tile__strip(rt_field(v, "consequence"));
    } else p->gread = v;
    if (!rt_is(p->gread, "subscript_expression") || !rt_is(rt_field(p->gread, "argument"), "identifier")) return false;
    /* the load: `if (C) { loops; __syncthreads(); }`, or the loops and a barrier */
    p->load = p->store;
    while (!ts_node_is_null(p->load) && !ts_node_eq(ts_node_parent(p->load), fbody)) p->load = ts_node_parent(p->load);
    if (ts_node_is_null(p->load) || ts_node_start_byte(p->load) < ts_node_end_byte(decl)) return false;
    TSNode loops;
    if (rt_is(p->load, "if_statement")) {
        TSNode cons = rt_field(p->load, "consequence");
        if (!ts_node_is_null(rt_field(p->load, "alternative")) || !rt_is(cons, "compound_statement")) return false;
        TSNode st[3];
        unsigned ns = smem_tile__stmts_of(cons, st, 3);
        if (ns != 2 || !rt_is(st[0], "for_statement") || !rt_is_syncthreads(ctx, st[1])) return false;
        p->runtime = true;
        p->load_end = p->load;
        loops = st[0];
    } else if (rt_is(p->load, "for_statement")) {
        p->load_end = rt_next_stmt(p->load);
        if (!rt_is_syncthreads(ctx, p->load_end)) return false;
        loops = p->load;
    } else return false;
    /* the load's loops start at the thread index: `for (int sy = threadIdx.y; …)` */
    unsigned nfor = 0;
    for (TSNode q = ts_node_parent(p->store); !ts_node_is_null(q) && !ts_node_eq(q, ts_node_parent(loops));
         q = ts_node_parent(q)) {
        if (!rt_is(q, "for_statement")) continue;
        nfor++;
        char init[128];
        smem_tile__squeezed(ctx, rt_field(q, "initializer"), init, sizeof init);
        if (!strstr(init, "=threadIdx.")) return false;
    }
    if (nfor != p->nd) return false;
    /* the reads: all in one loop nest, at threadIdx.<a> + offset */
    TSNode T = {0};
    for (unsigned r = 0; r < p->nreads; r++) {
        TSNode t = outermost_for(p->reads[r], fbody);
        if (ts_node_is_null(t)) return false;
        if (r && !ts_node_eq(t, T)) return false;
        T = t;
        TSNode ch = p->reads[r];
        for (unsigned k = 0; k < p->nd; k++, ch = rt_field(ch, "argument")) {
            char sub[256];
            smem_tile__squeezed(ctx, kl_ast_subscript_index(ch), sub, sizeof sub);
            if (strlen(sub) < 13 || strncmp(sub, "threadIdx.", 10) || sub[11] != '+') return false;
        }
        TSNode par = ts_node_parent(p->reads[r]);
        if (rt_is(par, "update_expression") || (rt_is(par, "pointer_expression") && smem_tile__text_is(ctx, rt_field(par, "operator"), "&"))) return false;
    }
    if (p->runtime) {
        TSNode X = ts_node_parent(ts_node_parent(T));
        if (!rt_is(ts_node_parent(T), "compound_statement") || !rt_is(X, "if_statement")) return false;
        char c1[256], c2[256];
        smem_tile__squeezed(ctx, smem_tile__if_cond(X), c1, sizeof c1);
        smem_tile__squeezed(ctx, smem_tile__if_cond(p->load), c2, sizeof c2);
        TSNode alt = rt_field(X, "alternative");
        if (strcmp(c1, c2) || ts_node_is_null(alt)) return false;
        p->tiled = only_stmt(rt_field(X, "consequence"));
        p->fallback = only_stmt(alt);
        if (!ts_node_eq(p->tiled, T) || !rt_is(p->fallback, "for_statement")) return false;
        p->compute = X;
    } else p->compute = T;
    /* where the guard is */
    TSNode par = ts_node_parent(p->compute);
    TSNode after = rt_next_stmt(p->load_end);
    if (ts_node_eq(par, fbody)) {
        if (smem_tile__early_return(after) && ts_node_eq(rt_next_stmt(after), p->compute)) {
            p->form = 'R';
            p->guard = after;
        } else if (ts_node_eq(after, p->compute)) p->form = 'N';
        else return false;
    } else if (rt_is(par, "compound_statement") && rt_is(ts_node_parent(par), "if_statement") &&
               ts_node_eq(ts_node_parent(ts_node_parent(par)), fbody) && ts_node_eq(ts_node_parent(par), after)) {
        p->form = 'I';
        p->guard = after;
    } else return false;
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(p->compute)) || !kl_rules_starts_line(ctx, ts_node_start_byte(p->load))) return false;
    (void)ax;
    return true;
}

/* The loop with every tile read written back as the global read it holds. New string. */
static char *stencil_untiled(const kl_rule_ctx *ctx, const smem_tile__sp *p, TSNode loop)
{
    char *g = rt_text(ctx, p->gread);
    if (!g) return NULL;
    smem_tile__rep reps[32];
    unsigned nr = 0;
    for (unsigned r = 0; r < p->nreads; r++)
        if (smem_tile__node_in(p->reads[r], loop)) reps[nr++] = (smem_tile__rep){ts_node_start_byte(p->reads[r]), ts_node_end_byte(p->reads[r]), g};
    char *t = smem_tile__splice(ctx, ts_node_start_byte(loop), ts_node_end_byte(loop), reps, nr);
    free(g);
    return t;
}

kl_status smem_tile__remove_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, smem_tile__sp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    kl_status st = KL_OK;
    char *orig = NULL, *pre = NULL, *gtext = NULL, *g = NULL;
    char ind[64], cind[64];
    rt_indent_of(ctx, ts_node_start_byte(p->decl), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(p->compute), cind, sizeof cind);
    if (p->runtime) {
        /* the fallback is the loop itself: check that the tiled branch is it with the reads from the tile */
        char *t = stencil_untiled(ctx, p, p->tiled), *f = rt_text(ctx, p->fallback);
        bool same = false;
        if (t && f) {
            size_t n1 = strlen(t) + 1, n2 = strlen(f) + 1;
            char *a = malloc(n1), *b = malloc(n2);
            if (a && b) {
                smem_tile__squeeze_str(t, a, n1);
                smem_tile__squeeze_str(f, b, n2);
                same = !strcmp(a, b);
            }
            free(a);
            free(b);
        }
        free(t);
        if (!f) goto oom;
        if (!same) {
            free(f);
            return kl_rule_not_applicable(err, "%s:%u: the loop reading the tile and its fallback differ by more than the "
                                          "tile reads", src, kl_ast_line(p->compute));
        }
        char find[64];
        rt_indent_of(ctx, ts_node_start_byte(p->fallback), find, sizeof find);
        orig = smem_tile__reindent_node_text(find, f, (int)strlen(cind) - (int)strlen(find));
        free(f);
        if (!orig) return kl_rule_not_applicable(err, "%s:%u: the fallback loop is indented with tabs", src,
                                                 kl_ast_line(p->fallback));
    } else {
        /* every read happens under the load's guard, with the same locals */
        smem_tile__sa s;
        memset(&s, 0, sizeof s);
        char want[1024] = "";
        if (!ts_node_is_null(p->cond)) {
            if (ts_node_end_byte(p->cond) - ts_node_start_byte(p->cond) >= sizeof want - 1)
                return kl_rule_not_applicable(err, "%s:%u: the load's guard is too long", src, kl_ast_line(p->cond));
            smem_tile__squeezed(ctx, p->cond, want, sizeof want);
        }
        for (unsigned r = 0; r < p->nreads; r++) {
            s.read = p->reads[r];
            s.outer = p->compute;
            s.nconj = 0;
            s.why[0] = '\0';
            if (!stencil_path(ctx, &s)) return kl_rule_not_applicable(err, "%s", s.why);
            kl_strbuf cb = KL_STRBUF_INIT;
            for (unsigned i = 0; i < s.nconj; i++) {
                char *t = conj_text(ctx, s.conj[i], s.neg[i]);
                kl_strbuf_addf(&cb, "%s%s", i ? "&&" : "", t ? t : "");
                free(t);
            }
            char *have = kl_strbuf_detach(&cb, NULL);
            if (!have) goto oom;
            if (strlen(have) >= 1000) {
                free(have);
                return kl_rule_not_applicable(err, "%s:%u: the tile read's guard is too long", src, kl_ast_line(p->reads[r]));
            }
            char hs[1024];
            smem_tile__squeeze_str(have, hs, sizeof hs);
            free(have);
            if (strcmp(hs, want))
                return kl_rule_not_applicable(err, "%s:%u: the tile read is guarded by '%s', the load by '%s': the global "
                                              "read could leave the image", src, kl_ast_line(p->reads[r]), hs, want);
        }
        /* the load's locals (but the offsets it maps from its coordinates) appear in the loop as they are */
        TSNode stack[128];
        unsigned sp_ = 0;
        stack[sp_++] = p->load;
        while (sp_) {
            TSNode n = stack[--sp_];
            if (rt_is(n, "declaration") && !rt_is(ts_node_parent(n), "for_statement")) {
                char dt[512];
                smem_tile__squeezed(ctx, n, dt, sizeof dt);
                if (strstr(dt, "(int)threadIdx.")) continue;
                bool found = false;
                TSNode st2[128];
                unsigned sq = 0;
                st2[sq++] = p->compute;
                while (sq && !found) {
                    TSNode m = st2[--sq];
                    if (rt_is(m, "declaration")) {
                        char mt[512];
                        smem_tile__squeezed(ctx, m, mt, sizeof mt);
                        found = !strcmp(mt, dt);
                        continue;
                    }
                    for (uint32_t c = 0; c < ts_node_named_child_count(m) && sq < 128; c++) st2[sq++] = ts_node_named_child(m, c);
                }
                if (!found)
                    return kl_rule_not_applicable(err, "%s:%u: the load's declaration '%s' is not in the loop reading the "
                                                  "tile", src, kl_ast_line(n), dt);
                continue;
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp_ < 128; c++) stack[sp_++] = ts_node_named_child(n, c);
        }
    }
    uint32_t a, b;
    rt_stmt_range(ctx, p->decl, NAME, &a, &b);
    if (p->form == 'I') {
        uint32_t ls = rt_line_start(ctx, ts_node_start_byte(p->load));
        if (ls > b) {
            pre = rt_reindent(ctx->text + b, ls - b, (int)strlen(cind) - (int)strlen(ind));
            if (!pre) return kl_rule_not_applicable(err, "%s:%u: tabs in the indentation", src, kl_ast_line(p->decl));
        }
        KL_TRY(kl_edits_add(out, a, rt_line_end(ctx, ts_node_end_byte(p->load_end) - 1), ""));
        if (pre) {
            uint32_t at = rt_line_start(ctx, ts_node_start_byte(p->compute));
            KL_TRY(kl_edits_add(out, at, at, pre));
        }
    } else {
        if (p->form == 'R') {
            gtext = rt_text(ctx, p->guard);
            if (!gtext) goto oom;
            KL_TRY(kl_edits_addf(out, a, b, "%s%s\n", ind, gtext));
        } else KL_TRY(kl_edits_add(out, a, b, ""));
        KL_TRY(kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(p->load)),
                            rt_line_start(ctx, ts_node_start_byte(p->compute)), ""));
    }
    if (p->runtime) KL_TRY(kl_edits_add(out, ts_node_start_byte(p->compute), ts_node_end_byte(p->compute), orig));
    else {
        g = rt_text(ctx, p->gread);
        if (!g) goto oom;
        for (unsigned r = 0; r < p->nreads; r++)
            KL_TRY(kl_edits_add(out, ts_node_start_byte(p->reads[r]), ts_node_end_byte(p->reads[r]), g));
    }
    (void)ax;
    (void)fn;
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(orig);
    free(pre);
    free(gtext);
    free(g);
    return st;
}

