/* tensor-core: the tensor-core (wmma) and mma.sync forms and their remove (tensor_core_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tensor_core_int.h"
#include "util/util.h"

/* ---- the tensor-core form ---------------------------------------------------------------------------------- */



/* A __device__ function of the file whose body holds mma.sync PTX. */
static bool calls_mma_helper(const kl_rule_ctx *ctx, const char *name)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char *t = rt_text(ctx, f);
    bool b = t && strstr(t, "mma.sync");
    free(t);
    return b;
}

bool tensor_core__mma_visit(TSNode n, void *user)
{
    tensor_core__mma_scan *m = user;
    if (!ts_node_is_null(m->hit)) return false;
    if (rt_is(n, "call_expression")) {
        char f[128];
        tensor_core__text_to(m->ctx, rt_field(n, "function"), f, sizeof f);
        const char *base = strrchr(f, ':');
        base = base ? base + 1 : f;
        if (!strcmp(base, "mma_sync") || (rt_is(rt_field(n, "function"), "identifier") && calls_mma_helper(m->ctx, f))) {
            m->hit = n;
            kl_snprintf(m->what, sizeof m->what, "%s", f);
            return false;
        }
    }
    if (rt_is(n, "gnu_asm_expression") || rt_is(n, "asm_statement")) {
        char *t = rt_text(m->ctx, n);
        if (t && strstr(t, "mma.sync")) m->hit = n, kl_snprintf(m->what, sizeof m->what, "mma.sync PTX");
        free(t);
    }
    return ts_node_is_null(m->hit);
}

/* Read the declaration `const T name = …;` into type and name. */
static bool decl_name(const kl_rule_ctx *ctx, TSNode d, char *type, char *name, size_t size)
{
    if (!rt_is(d, "declaration") || ts_node_named_child_count(d) < 2) return false;
    char t[64];
    tensor_core__text_to(ctx, rt_field(d, "type"), t, sizeof t);
    tensor_core__strip_const(t, type, size);
    TSNode nm = kl_ast_declarator_name(ts_node_named_child(d, ts_node_named_child_count(d) - 1));
    tensor_core__text_to(ctx, nm, name, size);
    return name[0] != '\0';
}

/* `X = (n1 < B1 && n2 < B2) ? ACCESS : ZERO;` (stmt): the bounds into b1 and b2 (128 bytes each),
 * ACCESS into access (asize bytes), ZERO into zero (64 bytes). */
static bool guarded_load(const kl_rule_ctx *ctx, TSNode stmt, const char *n1, const char *n2, char *b1, char *b2,
                         char *access, size_t asize, char *zero)
{
    if (!rt_is(stmt, "expression_statement")) return false;
    TSNode asg = ts_node_named_child(stmt, 0);
    if (!rt_is(asg, "assignment_expression")) return false;
    TSNode c = rt_field(asg, "right");
    if (!rt_is(c, "conditional_expression")) return false;
    char x[64], y[64];
    if (!tensor_core__guard_parts(ctx, rt_field(c, "condition"), false, x, b1, y, b2, 128) || strcmp(x, n1) || strcmp(y, n2)) return false;
    tensor_core__text_to(ctx, rt_field(c, "consequence"), access, asize);
    tensor_core__text_to(ctx, rt_field(c, "alternative"), zero, 64);
    return true;
}

/* A tile load: `const R r = …; const K k = …; kl_xs[…] = (r < M && k < K) ? ACCESS : zero;`.
 * The names, the bound of the first and second comparisons, and the access text. */
static bool tile_load(const kl_rule_ctx *ctx, TSNode loop, char *t1, char *n1, char *t2, char *n2, char *b1, char *b2,
                      char *access, size_t asize, char *zero)
{
    TSNode s[4];
    if (!rt_is(loop, "for_statement") || tensor_core__stmts_of(rt_field(loop, "body"), s, 4) != 3) return false;
    if (!decl_name(ctx, s[0], t1, n1, 64) || !decl_name(ctx, s[1], t2, n2, 64)) return false;
    return guarded_load(ctx, s[2], n1, n2, b1, b2, access, asize, zero);
}

/* The same load, 8 elements at a time (vector_loads=1): `const int kl_r = …, kl_c = …; const R r = …;
 * const K k = …; if (… aligned …) { 16-byte copy } else { for (kl_q …) { const K k = …; kl_xs[…] =
 * (r < M && k < K) ? ACCESS : zero; } }`. */
static bool tile_load_vec(const kl_rule_ctx *ctx, TSNode loop, char *t1, char *n1, char *t2, char *n2, char *b1, char *b2,
                          char *access, size_t asize, char *zero)
{
    TSNode s[5], in[3];
    if (!rt_is(loop, "for_statement") || tensor_core__stmts_of(rt_field(loop, "body"), s, 5) != 4) return false;
    char tr[64], nr[64];
    if (!decl_name(ctx, s[0], tr, nr, 64) || !decl_name(ctx, s[1], t1, n1, 64) || !decl_name(ctx, s[2], t2, n2, 64) ||
        !rt_is(s[3], "if_statement"))
        return false;
    TSNode alt = rt_field(s[3], "alternative");
    if (rt_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
    if (!rt_is(alt, "compound_statement") || tensor_core__stmts_of(alt, in, 3) != 1 || !rt_is(in[0], "for_statement")) return false;
    TSNode q[3];
    if (tensor_core__stmts_of(rt_field(in[0], "body"), q, 3) != 2) return false;
    return guarded_load(ctx, q[1], n1, n2, b1, b2, access, asize, zero);
}

typedef struct elane_scan {
    const kl_rule_ctx *ctx;
    TSNode found;
} elane_scan;

static bool elane_visit(TSNode n, void *user)
{
    elane_scan *e = user;
    if (!ts_node_is_null(e->found)) return false;
    if (rt_is(n, "for_statement")) {
        char t[64];
        tensor_core__text_to(e->ctx, rt_field(n, "initializer"), t, sizeof t);
        if (strstr(t, "kl_e = kl_lane")) {
            e->found = n;
            return false;
        }
    }
    return true;
}

/* Recognise the form apply writes; false when fn is not it (why says what differs). */
bool tensor_core__analyse_wmma(const kl_rule_ctx *ctx, TSNode fn, tensor_core__tc_wmma *w)
{
    TSNode body = kl_ast_function_body(fn);
    w->fn = fn;
    w->body = body;
#define WHY(...) (kl_snprintf(w->why, sizeof w->why, __VA_ARGS__), false)
    uint32_t n = ts_node_named_child_count(body);
    uint32_t i = 0;
    for (; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        char t[32];
        tensor_core__text_to(ctx, c, t, sizeof t);
        if (rt_is(c, "comment") && !strncmp(t, MARKER, strlen(MARKER))) {
            w->marker = c;
            break;
        }
    }
    if (ts_node_is_null(w->marker)) return false;
    for (i++; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        if (rt_is(c, "comment")) continue;
        char t[200];
        tensor_core__text_to(ctx, c, t, sizeof t);
        if (!strncmp(t, "constexpr int KL_FM", 19)) {
            w->consts = c;
            if (sscanf(t, "constexpr int KL_FM = %d, KL_FN = %d, KL_WARPS_M = %d, KL_WARPS_N = %d;", &w->fm, &w->fn_, &w->wm,
                       &w->wn) != 4)
                return WHY("the tile constants at line %u are not the ones apply writes", kl_ast_line(c));
            break;
        }
        if (!rt_is(c, "declaration") || w->npro == MAXPRO) return WHY("the statement at line %u is not a declaration", kl_ast_line(c));
        w->prologue[w->npro++] = c;
    }
    TSNode loader = {0};
    for (; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        if (rt_is(c, "declaration") && ts_node_named_child_count(c) >= 2) {
            /* the pipelined form: the tile loads sit in `auto kl_load = [&](…) { … };` */
            char nm[64], ty[64];
            if (decl_name(ctx, c, ty, nm, sizeof nm) && !strcmp(nm, "kl_load")) loader = c;
        }
        if (!rt_is(c, "for_statement")) continue;
        char t[64];
        tensor_core__text_to(ctx, rt_field(c, "initializer"), t, sizeof t);
        if (strstr(t, "kl_k0 = 0")) w->k0loop = c;
        if (strstr(t, "kl_e = threadIdx.x")) w->eloop = c;
        if (ts_node_is_null(w->eloop) && !ts_node_is_null(w->k0loop) && !ts_node_eq(c, w->k0loop)) {
            /* the pipelined form: each warp stores its fragments, `for (kl_e = kl_lane; …)` inside */
            elane_scan es = {.ctx = ctx};
            kl_ast_walk(c, elane_visit, &es);
            if (!ts_node_is_null(es.found)) w->eloop = es.found;
        }
    }
    if (ts_node_is_null(w->consts) || ts_node_is_null(w->k0loop) || ts_node_is_null(w->eloop))
        return WHY("the kernel is not the wmma form apply writes (tile constants, k0 loop, store loop)");
    TSNode kd = rt_field(w->k0loop, "initializer");
    char t[64];
    tensor_core__text_to(ctx, rt_field(kd, "type"), t, sizeof t);
    tensor_core__strip_const(t, w->ktype, sizeof w->ktype);
    tensor_core__text_to(ctx, rt_field(kl_ast_unparen(rt_field(w->k0loop, "condition")), "right"), w->K, sizeof w->K);
    TSNode loads[2];
    unsigned nl = 0;
    TSNode lbody = rt_field(w->k0loop, "body");
    if (!ts_node_is_null(loader)) {
        TSNode lam = {0};
        for (uint32_t k = 0; k < ts_node_named_child_count(loader); k++) {
            TSNode d = ts_node_named_child(loader, k);
            if (rt_is(d, "init_declarator") && rt_is(rt_field(d, "value"), "lambda_expression")) lam = rt_field(d, "value");
        }
        if (!ts_node_is_null(lam)) lbody = rt_field(lam, "body");
    }
    for (uint32_t k = 0; k < ts_node_named_child_count(lbody) && nl < 2; k++) {
        TSNode c = ts_node_named_child(lbody, k);
        if (rt_is(c, "for_statement")) loads[nl++] = c;
    }
    char t1[64], t2[64], k1[64], k2[64], kb1[128], kb2[128], zero[64];
    if (nl != 2 ||
        !(tile_load(ctx, loads[0], w->rtype, w->row, t1, w->k, w->M, kb1, w->a_text, sizeof w->a_text, zero) ||
          tile_load_vec(ctx, loads[0], w->rtype, w->row, t1, w->k, w->M, kb1, w->a_text, sizeof w->a_text, zero)) ||
        !(tile_load(ctx, loads[1], t2, k2, w->ctype, w->col, kb2, w->N, w->b_text, sizeof w->b_text, zero) ||
          tile_load_vec(ctx, loads[1], t2, k2, w->ctype, w->col, kb2, w->N, w->b_text, sizeof w->b_text, zero)))
        return WHY("the tile loads of the k loop at line %u are not the ones apply writes", kl_ast_line(w->k0loop));
    (void)k1;
    /* the element type: from the zero, `T(0.0f)` */
    const char *paren = strchr(zero, '(');
    kl_snprintf(w->elem, sizeof w->elem, "%.*s", paren ? (int)(paren - zero) : 0, zero);
    if (!w->elem[0] || strcmp(k2, w->k)) return WHY("the tile loads at line %u disagree", kl_ast_line(w->k0loop));
    /* the store loop: row, col, then `if (g) { float acc = …; store }` or `if (g) continue; float acc = …; store` */
    TSNode s[8];
    unsigned ns = tensor_core__stmts_of(rt_field(w->eloop, "body"), s, 8);
    if (ns < 3 || ns > 8 || !rt_is(s[2], "if_statement"))
        return WHY("the store loop at line %u is not the one apply writes", kl_ast_line(w->eloop));
    tensor_core__text_to(ctx, tensor_core__if_cond(s[2]), w->guard, sizeof w->guard);
    TSNode cons = rt_field(s[2], "consequence");
    TSNode rest[8];
    unsigned nr;
    if (rt_is(cons, "continue_statement")) {
        w->early = true;
        nr = ns - 3;
        for (unsigned k = 0; k < nr; k++) rest[k] = s[3 + k];
    } else {
        if (ns != 3) return WHY("the store loop at line %u has statements after its guard", kl_ast_line(w->eloop));
        nr = tensor_core__stmts_of(cons, rest, 8);
    }
    char at[64];
    if (nr < 2 || nr > 5 || !decl_name(ctx, rest[0], at, w->acc, sizeof w->acc) || strcmp(at, "float"))
        return WHY("the store loop at line %u does not read the accumulator back", kl_ast_line(w->eloop));
    for (unsigned k = 1; k < nr; k++) w->store[w->nstore++] = rest[k];
#undef WHY
    return true;
}

static const char *to_float(const char *elem)
{
    if (strstr(elem, "bfloat16")) return "__bfloat162float";
    if (!strcmp(elem, "__half") || !strcmp(elem, "half")) return "__half2float";
    return "static_cast<float>";
}

/* Undo launch_smem: the `cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, n);` right
 * before a launch goes, and its dynamic shared memory becomes 0. */
static kl_status launch_unsmem(const kl_rule_ctx *ctx, tensor_core__launch_plan *plans, unsigned np, kl_edits *out)
{
    for (unsigned i = 0; i < np; i++) {
        kl_launch_site *l = plans[i].l;
        TSNode stmt = ts_node_parent(l->call);
        TSNode prev = rt_is(stmt, "expression_statement") ? rt_prev_stmt(stmt) : (TSNode){0};
        TSNode call = rt_is(prev, "expression_statement") ? ts_node_named_child(prev, 0) : (TSNode){0};
        if (!rt_is(call, "call_expression") || !tensor_core__text_is(ctx, rt_field(call, "function"), "cudaFuncSetAttribute")) continue;
        char *t = rt_text(ctx, call);
        bool ours = t && strstr(t, "cudaFuncAttributeMaxDynamicSharedMemorySize");
        free(t);
        if (!ours) continue;
        uint32_t a, b;
        rt_stmt_range(ctx, prev, NULL, &a, &b);
        kl_status st = kl_edits_add(out, a, b, "");
        if (st == KL_OK && !ts_node_is_null(l->smem)) st = kl_edits_add(out, ts_node_start_byte(l->smem), ts_node_end_byte(l->smem), "0");
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

kl_status tensor_core__remove_wmma(const kl_rule_ctx *ctx, const tensor_core__tc_wmma *w, const char *kernel, kl_edits *out, kl_error *err)
{
    if (w->why[0]) return kl_rule_not_applicable(err, "%s", w->why);
    kl_affine_ctx *ax = NULL;
    kl_status st = kl_rules_affine(ctx, w->fn, &ax, err);
    if (st != KL_OK) return st;
    kl_launch_sites ls = {0};
    st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) {
        kl_rules_affine_done(ctx, ax);
        return st;
    }
    tensor_core__launch_plan plans[8];
    unsigned np = 0;
    char why[300];
    if (!tensor_core__plan_launches(ctx, ax, w->fn, kernel, w->M, w->N, &ls, plans, 8, &np, why, sizeof why)) {
        kl_launch_sites_release(&ls);
        kl_rules_affine_done(ctx, ax);
        return kl_rule_not_applicable(err, "%s", why);
    }
    char in[16] = "    ", in2[24], in3[32], fnind[16];
    rt_indent_of(ctx, ts_node_start_byte(w->marker), in, sizeof in);
    if (!in[0]) kl_snprintf(in, sizeof in, "    ");
    kl_snprintf(in2, sizeof in2, "%s%s", in, in);
    kl_snprintf(in3, sizeof in3, "%s%s", in2, in);
    rt_indent_of(ctx, ts_node_start_byte(w->fn), fnind, sizeof fnind);
    const char *cv = to_float(w->elem);
    const char *sind = w->early ? in : in2;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "{\n");
    for (unsigned i = 0; i < w->npro; i++) tensor_core__add_stmt_text(ctx, &sb, w->prologue[i], in);
    kl_strbuf_addf(&sb, "%s%s %s = blockIdx.y * blockDim.y + threadIdx.y;\n", in, w->rtype, w->row);
    kl_strbuf_addf(&sb, "%s%s %s = blockIdx.x * blockDim.x + threadIdx.x;\n", in, w->ctype, w->col);
    if (w->early) kl_strbuf_addf(&sb, "%sif (%s) return;\n", in, w->guard);
    else kl_strbuf_addf(&sb, "%sif (%s) {\n", in, w->guard);
    kl_strbuf_addf(&sb, "%sfloat %s = 0.0f;\n", sind, w->acc);
    kl_strbuf_addf(&sb, "%sfor (%s %s = 0; %s < %s; %s++) {\n", sind, w->ktype, w->k, w->k, w->K, w->k);
    kl_strbuf_addf(&sb, "%s%s%s += %s(%s) * %s(%s);\n", sind, in, w->acc, cv, w->a_text, cv, w->b_text);
    kl_strbuf_addf(&sb, "%s}\n", sind);
    for (unsigned i = 0; i < w->nstore; i++) tensor_core__add_stmt_text(ctx, &sb, w->store[i], sind);
    if (!w->early) kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%s}", fnind);
    (void)in3;
    st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(w->body), ts_node_end_byte(w->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st == KL_OK) st = tensor_core__write_launches(ctx, plans, np, 16, 16, "16, 16", false, out);
    if (st == KL_OK) st = launch_unsmem(ctx, plans, np, out);
    /* <mma.h> goes when no other kernel uses wmma */
    if (st == KL_OK) {
        const char *inc = strstr(ctx->text, "#include <mma.h>\n");
        unsigned uses = 0;
        for (const char *p = ctx->text; (p = strstr(p, "nvcuda::")); p++) uses++;
        unsigned here = 0;
        uint32_t a = ts_node_start_byte(w->body), b = ts_node_end_byte(w->body);
        for (const char *p = ctx->text + a; (p = strstr(p, "nvcuda::")) && p < ctx->text + b; p++) here++;
        if (inc && uses == here && (inc == ctx->text || inc[-1] == '\n')) {
            uint32_t ia = (uint32_t)(inc - ctx->text);
            st = kl_edits_add(out, ia, ia + (uint32_t)strlen("#include <mma.h>\n"), "");
        }
    }
    kl_launch_sites_release(&ls);
    kl_rules_affine_done(ctx, ax);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* Why a tensor-core kernel that is not apply's form cannot be taken back to a scalar loop. */
void tensor_core__foreign_why(const kl_rule_ctx *ctx, TSNode fn, const tensor_core__mma_scan *m, char *why, size_t size)
{
    char *t = rt_text(ctx, fn);
    const char *body = t ? t : "";
    bool ldm = strstr(body, "ldmatrix") != NULL, cpa = strstr(body, "cp_async") || strstr(body, "cp.async");
    bool ptx = !strstr(m->what, "mma_sync");
    (void)ldm;
    if (ptx)
        kl_snprintf(why, size,
                    "the tensor-core step at line %u (%s) is mma.sync PTX whose operands are register fragments "
                    "(%s%s): a scalar loop needs each accumulator's (row, col) in the m16n8k16 layout and the shared tiles "
                    "the fragments came from, which the analysis does not derive from PTX; remove %sthe register tile first, "
                    "or bring the kernel to the wmma form",
                    kl_ast_line(m->hit), m->what,
                    strstr(body, "ldmatrix") ? "loaded by ldmatrix from shared memory" : "loaded from registers",
                    cpa ? ", filled by a cp.async pipeline" : "", cpa ? "the cp.async pipeline and " : "");
    else
        kl_snprintf(why, size,
                    "the wmma code at line %u is not the form apply writes (a `" MARKER "` block with guarded tile loads "
                    "and a staged store): its fragments' sources and layout are not analysed",
                    kl_ast_line(m->hit));
    free(t);
}

/* ---- the mma.sync form: ldmatrix fragments from shared tiles, mma.sync.m16n8k16 ---------------------- */

/*
 * The hgemm expert's warp tile (and kernels written like it): inside one block
 *     uint32_t AF[FM][4];  uint32_t BF[FN][2];
 *     for (i = 0; i < FM; i++) { <locals>; LDM_X4(AF[i], PA); }
 *     for (j = 0; j < FN / 2; j++) { <locals>; uint32_t R[4]; LDM_X4_TRANS(R, PB);
 *                                    BF[2*j][0] = R[0]; BF[2*j][1] = R[1]; BF[2*j+1][0] = R[2]; BF[2*j+1][1] = R[3]; }
 *     for (mi = 0; mi < FM; mi++) for (ni = 0; ni < FN; ni++) MMA(ACC[mi][ni], AF[mi], BF[ni][0], BF[ni][1]);
 * with LDM_X4 / LDM_X4_TRANS `__device__` helpers holding ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 and
 * MMA one holding mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with D = C.
 *
 * The PTX ISA fixes what each lane holds. ldmatrix .x4: lanes 8m..8m+7 give the row addresses of matrix m
 * (8 contiguous 16-bit elements each), and lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1
 * of every matrix (.trans: column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1). mma m16n8k16: A register q
 * holds row l / 4 + 8 (q % 2), k 2 (l % 4) + 8 (q / 2); B register q holds k 2 (l % 4) + 8 q, column l / 4;
 * accumulator e sits at row l / 4 + 8 (e / 2), column 2 (l % 4) + e % 2. So element (r, k) of the A tile of
 * AF[i] is the element k % 8 after the address lane r + 16 (k / 8) gave, and element (k, n) of the B tile of
 * n-tile ni is the element n after the address lane k + 16 (ni % 2) gave in iteration ni / 2. Remove
 * writes, per accumulator element, the 16-term dot product over exactly those shared-memory elements,
 * reading them through the kernel's own address expressions (padding or swizzles included) with the lane
 * replaced by that virtual lane.
 */

#define PTX_MAXLOC 8

typedef struct ptx_local {
    char name[64];
    TSNode value;
} ptx_local;


void tensor_core__ptx_release(tensor_core__tc_ptx *p)
{
    free(p->aread);
    free(p->bread);
    p->aread = p->bread = NULL;
}

/* The text of n with blanks, quotes and `\n` escapes taken out: asm operands compare as one string. */
char *tensor_core__squeeze(const kl_rule_ctx *ctx, TSNode n)
{
    char *t = rt_text(ctx, n);
    if (!t) return NULL;
    size_t k = 0;
    for (size_t i = 0; t[i]; i++) {
        if (t[i] == '\\' && t[i + 1] == 'n') {
            i++;
            continue;
        }
        if (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r' || t[i] == '"') continue;
        t[k++] = t[i];
    }
    t[k] = '\0';
    return t;
}

/* The names of fn's parameters, at most max; returns how many there are. */
unsigned tensor_core__param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max)
{
    TSNode ps = kl_ast_function_params(fn);
    unsigned n = 0;
    for (uint32_t i = 0; !ts_node_is_null(ps) && i < ts_node_named_child_count(ps); i++) {
        TSNode p = ts_node_named_child(ps, i);
        if (!rt_is(p, "parameter_declaration")) continue;
        if (n < max) tensor_core__text_to(ctx, kl_ast_declarator_name(rt_field(p, "declarator")), names[n], 64);
        n++;
    }
    return n;
}

static unsigned count_sub(const char *s, const char *sub)
{
    unsigned n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

/* Is `name` a __device__ helper holding exactly one asm statement, the m16n8k16 mma with f32
 * accumulators D = C, operands in parameter order (d[4], a[4], b0, b1)? dtype gets bf16 / f16. */
static bool mma_helper(const kl_rule_ctx *ctx, const char *name, char *dtype)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char ps[4][64];
    if (tensor_core__param_names(ctx, f, ps, 4) != 4) return false;
    char *t = tensor_core__squeeze(ctx, kl_ast_function_body(f));
    if (!t) return false;
    bool ok = false;
    static const char *const types[] = {"bf16", "f16"};
    for (int i = 0; i < 2 && !ok; i++) {
        char want[400];
        kl_snprintf(want, sizeof want,
                    "mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32{%%0,%%1,%%2,%%3},{%%4,%%5,%%6,%%7},{%%8,%%9},{%%0,%%1,%%2,"
                    "%%3};:+f(%s[0]),+f(%s[1]),+f(%s[2]),+f(%s[3]):r(%s[0]),r(%s[1]),r(%s[2]),r(%s[3]),r(%s),r(%s));",
                    types[i], types[i], ps[0], ps[0], ps[0], ps[0], ps[1], ps[1], ps[1], ps[1], ps[2], ps[3]);
        if (strstr(t, want)) ok = true, kl_snprintf(dtype, 8, "%s", types[i]);
    }
    ok = ok && count_sub(t, "asm") == 1;
    free(t);
    return ok;
}

/* Is `name` a __device__ helper holding exactly one ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16
 * into its first parameter's four registers, in order, from the address of its second? */
static bool ldmatrix_helper(const kl_rule_ctx *ctx, const char *name, bool trans)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char ps[2][64];
    if (tensor_core__param_names(ctx, f, ps, 2) != 2) return false;
    char *t = tensor_core__squeeze(ctx, kl_ast_function_body(f));
    if (!t) return false;
    char want[300];
    kl_snprintf(want, sizeof want,
                "ldmatrix.sync.aligned.m8n8.x4%s.shared.b16{%%0,%%1,%%2,%%3},[%%4];:=r(%s[0]),=r(%s[1]),=r(%s[2]),=r(%s[3]):r(",
                trans ? ".trans" : "", ps[0], ps[0], ps[0], ps[0]);
    /* the address operand comes from the second parameter (directly, or through a local of the helper) */
    bool ok = strstr(t, want) && rt_count_ident(ctx, kl_ast_function_body(f), ps[1]) > 0 && count_sub(t, "asm") == 1;
    free(t);
    return ok;
}

/* `for (T v = 0; v < B; v++)` (or ++v): v and B's text. */
bool tensor_core__plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize)
{
    if (!rt_is(loop, "for_statement")) return false;
    TSNode init = rt_field(loop, "initializer"), cond = kl_ast_unparen(rt_field(loop, "condition")), upd = rt_field(loop, "update");
    if (!rt_is(init, "declaration") || ts_node_named_child_count(init) != 2) return false;
    TSNode d = ts_node_named_child(init, 1);
    if (!rt_is(d, "init_declarator") || !tensor_core__text_is(ctx, rt_field(d, "value"), "0")) return false;
    tensor_core__text_to(ctx, kl_ast_declarator_name(d), v, 64);
    if (!rt_is(cond, "binary_expression") || !tensor_core__text_is(ctx, rt_field(cond, "operator"), "<") ||
        !tensor_core__text_is(ctx, rt_field(cond, "left"), v))
        return false;
    tensor_core__text_to(ctx, rt_field(cond, "right"), bound, bsize);
    char u[80], a[80], b[80];
    tensor_core__text_to(ctx, upd, u, sizeof u);
    kl_snprintf(a, sizeof a, "%s++", v);
    kl_snprintf(b, sizeof b, "++%s", v);
    return !strcmp(u, a) || !strcmp(u, b);
}

/* The header `for (…)` of a loop, on one line: false when it spans lines. */
static bool for_header(const kl_rule_ctx *ctx, TSNode loop, char *buf, size_t size)
{
    uint32_t end = 0;
    TSNode body = rt_field(loop, "body");
    for (uint32_t i = 0; i < ts_node_child_count(loop); i++) {
        TSNode c = ts_node_child(loop, i);
        if (ts_node_eq(c, body)) break;
        if (!strcmp(ts_node_type(c), ")")) end = ts_node_end_byte(c);
    }
    uint32_t s = ts_node_start_byte(loop);
    if (!end || end - s + 1 > size || memchr(ctx->text + s, '\n', end - s)) return false;
    kl_snprintf(buf, size, "%.*s", (int)(end - s), ctx->text + s);
    return true;
}

/* The statements of a block or loop body, comments and preprocessor lines (#pragma) skipped. */
unsigned tensor_core__body_stmts(TSNode block, TSNode *out, unsigned max)
{
    if (!rt_is(block, "compound_statement")) {
        if (max) out[0] = block;
        return 1;
    }
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(block); i++) {
        TSNode c = ts_node_named_child(block, i);
        if (rt_is(c, "comment") || !strncmp(ts_node_type(c), "preproc_", 8)) continue;
        if (n < max) out[n] = c;
        n++;
    }
    return n;
}

/* A call statement `f(args)`: the callee's name and the arguments. */
static bool call_stmt(const kl_rule_ctx *ctx, TSNode st, char *f, TSNode *args, unsigned max, unsigned *n)
{
    if (!rt_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return false;
    TSNode c = ts_node_named_child(st, 0);
    if (!rt_is(c, "call_expression") || !rt_is(rt_field(c, "function"), "identifier")) return false;
    tensor_core__text_to(ctx, rt_field(c, "function"), f, 64);
    TSNode a = rt_field(c, "arguments");
    *n = ts_node_named_child_count(a);
    for (unsigned i = 0; i < *n && i < max; i++) args[i] = ts_node_named_child(a, i);
    return true;
}

/* Does the text of n, without blanks, read s? */
static bool squeezed_is(const kl_rule_ctx *ctx, TSNode n, const char *s)
{
    char *t = tensor_core__squeeze(ctx, n);
    bool b = t && !strcmp(t, s);
    free(t);
    return b;
}

/* The one declarator of a declaration (`const int a = …;`), or a null node when it has several. */
static TSNode single_declarator(TSNode d)
{
    TSNode none = {{0}, 0, 0}, found = none;
    if (!rt_is(d, "declaration")) return none;
    TSNode type = rt_field(d, "type");
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode c = ts_node_named_child(d, i);
        const char *t = ts_node_type(c);
        if (ts_node_eq(c, type) || !(strstr(t, "declarator") || !strcmp(t, "identifier"))) continue;
        if (!ts_node_is_null(found)) return none;
        found = c;
    }
    return found;
}

/* `const int a = …;` declarations (one name each) at the head of a loop body, into locals. */
static bool loop_locals(const kl_rule_ctx *ctx, TSNode *st, unsigned n, ptx_local *loc, unsigned *nloc)
{
    *nloc = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode d = single_declarator(st[i]);
        if (!rt_is(d, "init_declarator") || *nloc == PTX_MAXLOC) return false;
        tensor_core__text_to(ctx, kl_ast_declarator_name(d), loc[*nloc].name, 64);
        loc[*nloc].value = rt_field(d, "value");
        (*nloc)++;
    }
    return true;
}

/* ---- rendering an address for one virtual lane ---- */

typedef struct ptx_render {
    const kl_rule_ctx *ctx;
    TSNode body;                 /* the kernel's body (declarations of the names the address uses) */
    const char *lane;
    const char *mod16, *div16, *vlane;   /* lane % 16, lane / 16, lane */
    const char *ivar, *ito;              /* the load loop's variable and what replaces it */
    const ptx_local *loc;
    unsigned nloc;
    int depth;
    char why[300];
} ptx_render;

static bool warp_uniform(const kl_rule_ctx *ctx, TSNode body, const char *name, int depth, char *why, size_t size);

typedef struct uni_scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    int depth;
    char *why;
    size_t size;
} uni_scan;

/* threadIdx.x / C with C a multiple of 32 (the warp, or the warpgroup at 128), or >> S with S >= 5: the
 * same in every lane of a warp */
static bool is_warp_index(const kl_rule_ctx *ctx, TSNode field)
{
    TSNode p = ts_node_parent(field);
    while (rt_is(p, "parenthesized_expression")) p = ts_node_parent(p);
    if (!rt_is(p, "binary_expression") || !rt_is_builtin(ctx, field, "threadIdx", 'x')) return false;
    TSNode l = kl_ast_unparen(rt_field(p, "left"));
    if (!ts_node_eq(l, field)) return false;
    long long c = 0;
    TSNode fn = p;
    while (!ts_node_is_null(fn) && !rt_is(fn, "function_definition")) fn = ts_node_parent(fn);
    TSNode body = ts_node_is_null(fn) ? fn : kl_ast_function_body(fn);
    if (!rt_const_eval(ctx, body, rt_field(p, "right"), &c)) return false;
    return (tensor_core__text_is(ctx, rt_field(p, "operator"), "/") && c > 0 && c % 32 == 0) ||
           (tensor_core__text_is(ctx, rt_field(p, "operator"), ">>") && c >= 5 && c < 32);
}

static bool uni_visit(TSNode n, void *user)
{
    uni_scan *u = user;
    if (u->why[0]) return false;
    if (rt_is(n, "field_expression")) {
        TSNode a = rt_field(n, "argument");
        if (tensor_core__text_is(u->ctx, a, "threadIdx") && !is_warp_index(u->ctx, n))
            kl_snprintf(u->why, u->size, "line %u reads threadIdx other than as the warp (threadIdx.x / 32)", kl_ast_line(n));
        return false;
    }
    if (rt_is(n, "identifier")) {
        char nm[64];
        tensor_core__text_to(u->ctx, n, nm, sizeof nm);
        TSNode par = ts_node_parent(n);
        if (rt_is(par, "call_expression") && ts_node_eq(rt_field(par, "function"), n)) {
            if (tensor_core__callee_reads_builtins(u->ctx, nm))
                kl_snprintf(u->why, u->size, "`%s` (line %u) reads thread or block indices", nm, kl_ast_line(n));
            return false;
        }
        warp_uniform(u->ctx, u->body, nm, u->depth + 1, u->why, u->size);
    }
    return true;
}

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl, dc;
    unsigned count;
} decl_find;

static bool decl_find_visit(TSNode n, void *user)
{
    decl_find *f = user;
    if (rt_is(n, "declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n); k++) {
            TSNode dc = ts_node_named_child(n, k);
            if (!tensor_core__text_is(f->ctx, kl_ast_declarator_name(dc), f->name)) continue;
            if (!f->count) f->decl = n, f->dc = dc;
            f->count++;
        }
    return true;
}

typedef struct assign_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool found;
} assign_find;

static bool assign_visit(TSNode n, void *user)
{
    assign_find *a = user;
    if (a->found) return false;
    TSNode target = {{0}, 0, 0};
    if (rt_is(n, "assignment_expression")) target = rt_field(n, "left");
    if (rt_is(n, "update_expression")) target = rt_field(n, "argument");
    if (!ts_node_is_null(target) && tensor_core__text_is(a->ctx, kl_ast_unparen(target), a->name)) {
        /* a loop's own update (`kk++`) keeps its value the same in every lane */
        TSNode p = ts_node_parent(n);
        if (!(rt_is(p, "for_statement") && ts_node_eq(rt_field(p, "update"), n))) a->found = true;
    }
    return !a->found;
}

/* Is the kernel-local `name` the same in every lane of a warp: declared once, never assigned (a loop's
 * own update aside), from values that are (the warp index, parameters, constants, shared arrays)? A
 * name that is not declared in the kernel is a parameter or a file-level name: uniform. */
static bool warp_uniform(const kl_rule_ctx *ctx, TSNode body, const char *name, int depth, char *why, size_t size)
{
    if (why[0]) return false;
    if (depth > 12) {
        kl_snprintf(why, size, "`%s` is defined too deep for the analysis", name);
        return false;
    }
    decl_find f = {ctx, name, {{0}, 0, 0}, {{0}, 0, 0}, 0};
    kl_ast_walk(body, decl_find_visit, &f);
    if (!f.count) return true;
    if (f.count > 1) {
        kl_snprintf(why, size, "`%s` is declared %u times in the kernel", name, f.count);
        return false;
    }
    assign_find a = {ctx, name, false};
    kl_ast_walk(body, assign_visit, &a);
    if (a.found) {
        kl_snprintf(why, size, "`%s` (line %u) is assigned after its declaration", name, kl_ast_line(f.decl));
        return false;
    }
    TSNode v = rt_is(f.dc, "init_declarator") ? rt_field(f.dc, "value") : (TSNode){{0}, 0, 0};
    if (ts_node_is_null(v)) {
        if (tt_is_shared_decl(ctx, f.decl)) return true;
        kl_snprintf(why, size, "`%s` (line %u) has no initial value", name, kl_ast_line(f.decl));
        return false;
    }
    uni_scan u = {ctx, body, depth, why, size};
    kl_ast_walk(v, uni_visit, &u);
    return !why[0];
}

static void render(ptx_render *r, TSNode n, kl_strbuf *sb);

static void render_children(ptx_render *r, TSNode n, kl_strbuf *sb)
{
    uint32_t at = ts_node_start_byte(n), end = ts_node_end_byte(n);
    for (uint32_t i = 0; i < ts_node_child_count(n); i++) {
        TSNode c = ts_node_child(n, i);
        uint32_t cs = ts_node_start_byte(c);
        if (cs > at) kl_strbuf_add(sb, r->ctx->text + at, cs - at);
        render(r, c, sb);
        at = ts_node_end_byte(c);
    }
    if (end > at) kl_strbuf_add(sb, r->ctx->text + at, end - at);
}

/* `lane % 16` / `lane / 16` */
static bool lane_op(const ptx_render *r, TSNode n, const char *op)
{
    return rt_is(n, "binary_expression") && tensor_core__text_is(r->ctx, rt_field(n, "operator"), op) &&
           tensor_core__text_is(r->ctx, kl_ast_unparen(rt_field(n, "left")), r->lane) && tensor_core__text_is(r->ctx, rt_field(n, "right"), "16");
}

static void render_paren(kl_strbuf *sb, const char *s, bool paren)
{
    if (paren) kl_strbuf_addf(sb, "(%s)", s);
    else kl_strbuf_adds(sb, s);
}

static bool simple_text(const char *s)
{
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) return false;
    return *s != '\0';
}

static void render(ptx_render *r, TSNode n, kl_strbuf *sb)
{
    if (r->why[0]) return;
    bool in_paren = rt_is(ts_node_parent(n), "parenthesized_expression");
    if (lane_op(r, n, "%")) {
        render_paren(sb, r->mod16, !in_paren && !simple_text(r->mod16));
        return;
    }
    if (lane_op(r, n, "/")) {
        render_paren(sb, r->div16, !in_paren && !simple_text(r->div16));
        return;
    }
    if (rt_is(n, "field_expression")) {
        if (tensor_core__text_is(r->ctx, rt_field(n, "argument"), "threadIdx") && !is_warp_index(r->ctx, n)) {
            kl_snprintf(r->why, sizeof r->why, "the ldmatrix address at line %u reads threadIdx other than through the lane `%s`",
                        kl_ast_line(n), r->lane);
            return;
        }
        render_children(r, n, sb);
        return;
    }
    if (rt_is(n, "identifier")) {
        char nm[64];
        tensor_core__text_to(r->ctx, n, nm, sizeof nm);
        TSNode par = ts_node_parent(n);
        bool callee = rt_is(par, "call_expression") && ts_node_eq(rt_field(par, "function"), n);
        if (callee) {
            if (tensor_core__callee_reads_builtins(r->ctx, nm))
                kl_snprintf(r->why, sizeof r->why, "`%s` (line %u) in the ldmatrix address reads thread or block indices", nm,
                            kl_ast_line(n));
            kl_strbuf_adds(sb, nm);
            return;
        }
        if (!strcmp(nm, r->lane)) {
            render_paren(sb, r->vlane, !in_paren && !simple_text(r->vlane));
            return;
        }
        if (r->ivar && !strcmp(nm, r->ivar)) {
            render_paren(sb, r->ito, !in_paren && !simple_text(r->ito));
            return;
        }
        for (unsigned i = 0; i < r->nloc; i++) {
            if (strcmp(nm, r->loc[i].name)) continue;
            if (r->depth > 8) {
                kl_snprintf(r->why, sizeof r->why, "the locals of the ldmatrix address nest too deep");
                return;
            }
            kl_strbuf inner = KL_STRBUF_INIT;
            r->depth++;
            render(r, kl_ast_unparen(r->loc[i].value), &inner);
            r->depth--;
            const char *s = kl_strbuf_str(&inner);
            render_paren(sb, s, !in_paren && !simple_text(s));
            kl_strbuf_release(&inner);
            return;
        }
        char why[300] = "";
        if (!warp_uniform(r->ctx, r->body, nm, 0, why, sizeof why)) {
            kl_snprintf(r->why, sizeof r->why, "the ldmatrix address at line %u uses `%s`, which may differ between lanes: %s",
                        kl_ast_line(n), nm, why);
            return;
        }
        kl_strbuf_adds(sb, nm);
        return;
    }
    if (ts_node_child_count(n) == 0) {
        uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
        kl_strbuf_add(sb, r->ctx->text + a, b - a);
        return;
    }
    render_children(r, n, sb);
}

/* The element `off` elements past the address ptr in lane vlane: `P[rest + off]` when ptr is
 * `P + rest`, else `(ptr)[off]`. New string, or NULL with r->why set. */
static char *element_read(ptx_render *r, TSNode ptr, const char *off)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    TSNode p = kl_ast_unparen(ptr);
    TSNode leftmost = p;
    while (rt_is(leftmost, "binary_expression") && tensor_core__text_is(r->ctx, rt_field(leftmost, "operator"), "+"))
        leftmost = rt_field(leftmost, "left");
    if (rt_is(p, "binary_expression") && tensor_core__text_is(r->ctx, rt_field(p, "operator"), "+") && rt_is(leftmost, "identifier")) {
        /* P + a + b …: P[a + b … + off]; the rest is rendered from the text after `P +` */
        TSNode first = ts_node_parent(leftmost); /* P + a */
        kl_strbuf rest = KL_STRBUF_INIT;
        render(r, leftmost, &sb);
        TSNode right = rt_field(first, "right");
        /* the text from the first operand after P to the end of the chain, rendered piecewise */
        render(r, right, &rest);
        for (TSNode q = ts_node_parent(first); !ts_node_is_null(q) && ts_node_start_byte(q) == ts_node_start_byte(p) &&
                                               ts_node_end_byte(q) <= ts_node_end_byte(p);
             q = ts_node_parent(q)) {
            TSNode rr = rt_field(q, "right");
            uint32_t gap = ts_node_end_byte(rt_field(q, "left"));
            kl_strbuf_add(&rest, r->ctx->text + gap, ts_node_start_byte(rr) - gap);
            render(r, rr, &rest);
            if (ts_node_eq(q, p)) break;
        }
        kl_strbuf_addf(&sb, "[%s + %s]", kl_strbuf_str(&rest), off);
        kl_strbuf_release(&rest);
    } else {
        kl_strbuf_adds(&sb, "(");
        render(r, p, &sb);
        kl_strbuf_addf(&sb, ")[%s]", off);
    }
    char *out = (r->why[0] || sb.failed) ? NULL : kl_strdup(kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return out;
}

/* The lane: a declaration at the top of the kernel `lane = threadIdx.x % 32` (or `& 31`), never assigned. */
bool tensor_core__find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode d = ts_node_named_child(body, i);
        if (!rt_is(d, "declaration")) continue;
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dc = ts_node_named_child(d, k);
            if (!rt_is(dc, "init_declarator")) continue;
            TSNode v = kl_ast_unparen(rt_field(dc, "value"));
            if (!squeezed_is(ctx, v, "threadIdx.x%32") && !squeezed_is(ctx, v, "threadIdx.x&31")) continue;
            tensor_core__text_to(ctx, kl_ast_declarator_name(dc), lane, 64);
            assign_find a = {ctx, lane, false};
            kl_ast_walk(body, assign_visit, &a);
            if (!a.found) return true;
        }
    }
    return false;
}

/* Recognise the form around the mma call (hit); false with p->why when it is not it. */
bool tensor_core__analyse_ptx(const kl_rule_ctx *ctx, TSNode fn, TSNode hit, tensor_core__tc_ptx *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->body = kl_ast_function_body(fn);
    p->call = hit;
#define WHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), false)
    unsigned ln = kl_ast_line(hit);
    if (!rt_is(hit, "call_expression") || !rt_is(rt_field(hit, "function"), "identifier"))
        return WHY("the mma.sync at line %u is not a call of a __device__ helper", ln);
    tensor_core__text_to(ctx, rt_field(hit, "function"), p->helpers[0], 64);
    if (!mma_helper(ctx, p->helpers[0], p->dtype))
        return WHY("%s (called at line %u) is not one mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32 with D = C and "
                   "its operands in parameter order (d[4], a[4], b0, b1)", p->helpers[0], ln);
    kl_snprintf(p->conv, sizeof p->conv, "%s", !strcmp(p->dtype, "bf16") ? "__bfloat162float" : "__half2float");
    if (!tensor_core__find_lane(ctx, p->body, p->lane))
        return WHY("no `lane = threadIdx.x %% 32` at the top of the kernel: the fragment layout is per lane");
    /* the mma nest */
    TSNode st = ts_node_parent(hit);
    p->inner = ts_node_parent(st);
    if (rt_is(p->inner, "compound_statement")) {
        TSNode one[2];
        if (tensor_core__body_stmts(p->inner, one, 2) != 1) return WHY("the mma call at line %u is not alone in its loop", ln);
        p->inner = ts_node_parent(p->inner);
    }
    p->outer = ts_node_parent(p->inner);
    if (rt_is(p->outer, "compound_statement")) {
        TSNode one[2];
        if (tensor_core__body_stmts(p->outer, one, 2) != 1) return WHY("the loop at line %u is not alone in its loop", kl_ast_line(p->inner));
        p->outer = ts_node_parent(p->outer);
    }
    char b1[128], b2[128];
    if (!rt_is(st, "expression_statement") || !tensor_core__plain_loop(ctx, p->inner, p->v2, b2, sizeof b2) ||
        !tensor_core__plain_loop(ctx, p->outer, p->v1, b1, sizeof b1))
        return WHY("the mma call at line %u is not in a nest `for (mi = 0; mi < FM; mi++) for (ni = 0; ni < FN; ni++)`", ln);
    p->block = ts_node_parent(p->outer);
    if (!rt_is(p->block, "compound_statement")) return WHY("the mma nest at line %u is not in a block", kl_ast_line(p->outer));
    if (!for_header(ctx, p->outer, p->hdr1, sizeof p->hdr1) || !for_header(ctx, p->inner, p->hdr2, sizeof p->hdr2))
        return WHY("the mma nest's loop headers (line %u) are not on one line each", kl_ast_line(p->outer));
    /* the operands: ACC[mi][ni], AF[mi], BF[ni][0], BF[ni][1] */
    TSNode args = rt_field(hit, "arguments");
    if (ts_node_named_child_count(args) != 4) return WHY("the mma call at line %u does not take 4 operands", ln);
    TSNode d = ts_node_named_child(args, 0), a = ts_node_named_child(args, 1);
    TSNode b0 = ts_node_named_child(args, 2), bb1 = ts_node_named_child(args, 3);
    tensor_core__text_to(ctx, d, p->acc, sizeof p->acc);
    char af[64], bf[64], want[200];
    if (!rt_is(a, "subscript_expression") || !rt_is(rt_field(a, "argument"), "identifier"))
        return WHY("the A operand at line %u is not a fragment array `AF[%s]`", ln, p->v1);
    tensor_core__text_to(ctx, rt_field(a, "argument"), af, sizeof af);
    if (!rt_is(b0, "subscript_expression") || !rt_is(rt_field(b0, "argument"), "subscript_expression") ||
        !rt_is(rt_field(rt_field(b0, "argument"), "argument"), "identifier"))
        return WHY("the B operands at line %u are not `BF[%s][0], BF[%s][1]`", ln, p->v2, p->v2);
    tensor_core__text_to(ctx, rt_field(rt_field(b0, "argument"), "argument"), bf, sizeof bf);
    kl_snprintf(want, sizeof want, "%s[%s]", af, p->v1);
    bool ok = squeezed_is(ctx, a, want);
    kl_snprintf(want, sizeof want, "%s[%s][0]", bf, p->v2);
    ok = ok && squeezed_is(ctx, b0, want);
    kl_snprintf(want, sizeof want, "%s[%s][1]", bf, p->v2);
    ok = ok && squeezed_is(ctx, bb1, want);
    if (!ok) return WHY("the mma call at line %u does not read `%s[%s]`, `%s[%s][0]`, `%s[%s][1]`", ln, af, p->v1, bf, p->v2, bf, p->v2);
    if (!rt_is(d, "subscript_expression") || rt_count_ident(ctx, d, p->v1) != 1 || rt_count_ident(ctx, d, p->v2) != 1)
        return WHY("the accumulator operand `%s` at line %u is not indexed by %s and %s", p->acc, ln, p->v1, p->v2);
    /* the four statements before the nest: the fragment arrays and their loads */
    TSNode stmts[64];
    unsigned ns = tensor_core__body_stmts(p->block, stmts, 64), at = 0;
    if (ns > 64) return WHY("the block of the mma nest (line %u) is too long", kl_ast_line(p->block));
    while (at < ns && !ts_node_eq(stmts[at], p->outer)) at++;
    if (at < 4 || at + 1 != ns) return WHY("the mma nest at line %u is not the last of a block that loads its fragments", kl_ast_line(p->outer));
    for (unsigned i = at - 4; i < at; i++) {
        TSNode s = stmts[i];
        if (rt_is(s, "declaration")) {
            if (ts_node_is_null(single_declarator(s))) return WHY("the declaration at line %u declares more than one name", kl_ast_line(s));
            char nm[64];
            tensor_core__text_to(ctx, kl_ast_declarator_name(single_declarator(s)), nm, sizeof nm);
            if (!strcmp(nm, af) && ts_node_is_null(p->adecl)) p->adecl = s;
            else if (!strcmp(nm, bf) && ts_node_is_null(p->bdecl)) p->bdecl = s;
            else return WHY("the declaration at line %u is not one of the fragments %s, %s", kl_ast_line(s), af, bf);
        } else if (rt_is(s, "for_statement")) {
            if (rt_count_ident(ctx, s, af) && ts_node_is_null(p->aloop)) p->aloop = s;
            else if (rt_count_ident(ctx, s, bf) && ts_node_is_null(p->bloop)) p->bloop = s;
            else return WHY("the loop at line %u loads neither %s nor %s", kl_ast_line(s), af, bf);
        } else {
            return WHY("the statement at line %u is neither a fragment declaration nor its load", kl_ast_line(s));
        }
    }
    if (ts_node_is_null(p->adecl) || ts_node_is_null(p->bdecl) || ts_node_is_null(p->aloop) || ts_node_is_null(p->bloop))
        return WHY("the four statements before the mma nest (line %u) are not %s, %s and their loads", kl_ast_line(p->outer), af, bf);
    if (ts_node_start_byte(p->adecl) > ts_node_start_byte(p->aloop) || ts_node_start_byte(p->bdecl) > ts_node_start_byte(p->bloop))
        return WHY("a fragment array is loaded before its declaration (line %u)", kl_ast_line(p->aloop));
    p->first = stmts[at - 4];
    if (!rt_line_blank_before(ctx, tt_pragma_above(ctx, ts_node_start_byte(p->first))) ||
        rt_line_end(ctx, ts_node_end_byte(p->outer) - 1) != rt_line_end(ctx, ts_node_end_byte(p->outer)))
        return WHY("the fragment code (lines %u-%u) does not sit on lines of its own", kl_ast_line(p->first), kl_ast_line(p->outer));
    char t[96];
    kl_snprintf(t, sizeof t, "uint32_t%s[%s][4];", af, b1);
    char t2[96];
    kl_snprintf(t2, sizeof t2, "uint32_t%s[%s][2];", bf, b2);
    if (!squeezed_is(ctx, p->adecl, t) || !squeezed_is(ctx, p->bdecl, t2))
        return WHY("the fragments are not declared `uint32_t %s[%s][4]; uint32_t %s[%s][2];` (lines %u, %u)", af, b1, bf, b2,
                   kl_ast_line(p->adecl), kl_ast_line(p->bdecl));
    if (rt_count_ident(ctx, p->block, af) != 3 || rt_count_ident(ctx, p->block, bf) != 7)
        return WHY("the fragments %s, %s are used other than by their loads and the mma call", af, bf);
    /* B's n-tiles come in pairs: FN must be even */
    long long fnv = 0;
    TSNode bnode = rt_field(kl_ast_unparen(rt_field(p->inner, "condition")), "right");
    if (!rt_const_eval(ctx, p->body, bnode, &fnv) || fnv <= 0 || fnv % 2)
        return WHY("the n-tile count %s (line %u) is not a known even number (B fragments come in pairs from ldmatrix.x4.trans)",
                   b2, kl_ast_line(p->inner));
    /* the A load: for (i = 0; i < FM; i++) { locals; LDM(AF[i], PTR); } */
    char iv[64], ib[128], fname[64];
    TSNode ls[PTX_MAXLOC + 8], cargs[3];
    unsigned nls, nargs;
    ptx_local aloc[PTX_MAXLOC], bloc[PTX_MAXLOC];
    unsigned na = 0, nb = 0;
    if (!tensor_core__plain_loop(ctx, p->aloop, iv, ib, sizeof ib) || strcmp(ib, b1))
        return WHY("the A fragment loop at line %u is not `for (i = 0; i < %s; i++)`", kl_ast_line(p->aloop), b1);
    nls = tensor_core__body_stmts(rt_field(p->aloop, "body"), ls, PTX_MAXLOC + 8);
    kl_snprintf(want, sizeof want, "%s[%s]", af, iv);
    if (nls < 1 || nls > PTX_MAXLOC + 1 || !call_stmt(ctx, ls[nls - 1], fname, cargs, 3, &nargs) || nargs != 2 ||
        !squeezed_is(ctx, cargs[0], want) || !ldmatrix_helper(ctx, fname, false) || !loop_locals(ctx, ls, nls - 1, aloc, &na))
        return WHY("the A fragment loop at line %u is not `const int` locals and one ldmatrix.x4 helper call into %s[%s]",
                   kl_ast_line(p->aloop), af, iv);
    kl_snprintf(p->helpers[1], 64, "%s", fname);
    TSNode aptr = cargs[1];
    /* the B load: for (j = 0; j < FN / 2; j++) { locals; uint32_t R[4]; LDMT(R, PTR); BF[2*j][0] = R[0]; … } */
    char jv[64], jb[128];
    if (!tensor_core__plain_loop(ctx, p->bloop, jv, jb, sizeof jb))
        return WHY("the B fragment loop at line %u is not `for (j = 0; j < %s / 2; j++)`", kl_ast_line(p->bloop), b2);
    long long jn = 0;
    if (!rt_const_eval(ctx, p->body, rt_field(kl_ast_unparen(rt_field(p->bloop, "condition")), "right"), &jn) || jn * 2 != fnv)
        return WHY("the B fragment loop at line %u does not load %s / 2 pairs of n-tiles", kl_ast_line(p->bloop), b2);
    nls = tensor_core__body_stmts(rt_field(p->bloop, "body"), ls, PTX_MAXLOC + 8);
    if (nls < 6 || nls > PTX_MAXLOC + 6)
        return WHY("the B fragment loop at line %u is not locals, `uint32_t r[4];`, ldmatrix.x4.trans and four moves", kl_ast_line(p->bloop));
    unsigned rd = nls - 6;
    char rn[64];
    if (ts_node_is_null(single_declarator(ls[rd])))
        return WHY("the B fragment loop at line %u does not declare its four registers", kl_ast_line(p->bloop));
    tensor_core__text_to(ctx, kl_ast_declarator_name(single_declarator(ls[rd])), rn, sizeof rn);
    kl_snprintf(t, sizeof t, "uint32_t%s[4];", rn);
    if (!squeezed_is(ctx, ls[rd], t) || !call_stmt(ctx, ls[rd + 1], fname, cargs, 3, &nargs) || nargs != 2 ||
        !tensor_core__text_is(ctx, cargs[0], rn) || !ldmatrix_helper(ctx, fname, true) || !loop_locals(ctx, ls, rd, bloc, &nb))
        return WHY("the B fragment loop at line %u is not `const int` locals, `uint32_t r[4];` and one ldmatrix.x4.trans helper "
                   "call into r", kl_ast_line(p->bloop));
    kl_snprintf(p->helpers[2], 64, "%s", fname);
    TSNode bptr = cargs[1];
    for (unsigned i = 0; i < 4; i++) {
        kl_snprintf(want, sizeof want, "%s[2*%s%s][%u]=%s[%u];", bf, jv, i >= 2 ? "+1" : "", i % 2, rn, i);
        if (!squeezed_is(ctx, ls[rd + 2 + i], want))
            return WHY("line %u does not read `%s[2 * %s%s][%u] = %s[%u];`: the registers of ldmatrix.x4.trans are b0, b1 of "
                       "n-tile 2j, then of 2j + 1", kl_ast_line(ls[rd + 2 + i]), bf, jv, i >= 2 ? " + 1" : "", i % 2, rn, i);
    }
    if (rt_count_ident(ctx, p->bloop, rn) != 6) return WHY("the registers %s of line %u are used elsewhere", rn, kl_ast_line(ls[rd]));
    /* the element reads: A (r, k) from lane r + 16 (k / 8), element k % 8; B (k, n) of n-tile ni from lane k + 16 (ni % 2)
     * in iteration ni / 2, element n */
    char ito[80], jto[80];
    kl_snprintf(ito, sizeof ito, "%s", p->v1);
    kl_snprintf(jto, sizeof jto, "%s / 2", p->v2);
    char bdiv[80], bvl[120];
    kl_snprintf(bdiv, sizeof bdiv, "%s %% 2", p->v2);
    kl_snprintf(bvl, sizeof bvl, "kl_x + 16 * (%s %% 2)", p->v2);
    ptx_render ra = {ctx, p->body, p->lane, "kl_r", "kl_x / 8", "kl_r + 16 * (kl_x / 8)", iv, ito, aloc, na, 0, ""};
    p->aread = element_read(&ra, aptr, "kl_x % 8");
    if (!p->aread) return WHY("%s", ra.why[0] ? ra.why : "out of memory");
    ptx_render rbb = {ctx, p->body, p->lane, "kl_x", bdiv, bvl, jv, jto, bloc, nb, 0, ""};
    p->bread = element_read(&rbb, bptr, "kl_c");
    if (!p->bread) return WHY("%s", rbb.why[0] ? rbb.why : "out of memory");
    /* names the scalar loop introduces */
    static const char *const mine[] = {"kl_e", "kl_r", "kl_c", "kl_x"};
    for (unsigned i = 0; i < 4; i++)
        if (rt_count_ident(ctx, p->body, mine[i])) return WHY("the kernel already uses the name %s", mine[i]);
#undef WHY
    return true;
}

/* A __device__ helper used only by the removed code goes, with a comment line right above it that
 * names mma or ldmatrix. */
static kl_status drop_helper(const kl_rule_ctx *ctx, const char *name, unsigned removed_uses, kl_edits *out)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f)) return KL_OK;
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    if (rt_count_ident(ctx, root, name) != 1 + removed_uses) return KL_OK;
    TSNode outer = kl_ast_function_outer(f);
    uint32_t s = rt_line_start(ctx, ts_node_start_byte(outer)), e = rt_line_end(ctx, ts_node_end_byte(outer) - 1);
    if (!rt_line_blank_before(ctx, ts_node_start_byte(outer))) return KL_OK;
    TSNode prev = ts_node_prev_sibling(outer);
    if (rt_is(prev, "comment") && rt_line_end(ctx, ts_node_end_byte(prev) - 1) == s) {
        char *c = rt_text(ctx, prev);
        if (c && (strstr(c, "mma") || strstr(c, "ldmatrix")) && rt_line_blank_before(ctx, ts_node_start_byte(prev)))
            s = rt_line_start(ctx, ts_node_start_byte(prev));
        free(c);
    }
    /* one blank line of the two around it goes too */
    if (s >= 2 && ctx->text[s - 1] == '\n' && ctx->text[s - 2] == '\n' && e < ctx->len && ctx->text[e] == '\n') e++;
    return kl_edits_add(out, s, e, "");
}

kl_status tensor_core__remove_ptx(const kl_rule_ctx *ctx, const tensor_core__tc_ptx *p, kl_edits *out, kl_error *err)
{
    char in[32] = "", in2[48], in3[64], in4[80], in5[96];
    rt_indent_of(ctx, ts_node_start_byte(p->first), in, sizeof in);
    kl_snprintf(in2, sizeof in2, "%s    ", in);
    kl_snprintf(in3, sizeof in3, "%s    ", in2);
    kl_snprintf(in4, sizeof in4, "%s    ", in3);
    kl_snprintf(in5, sizeof in5, "%s    ", in4);
    const char *L = p->lane;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s// tensor-core removed: scalar f32 FMAs over the same shared tiles; each lane computes the m16n8k16\n", in);
    kl_strbuf_addf(&sb, "%s// accumulator elements it held (element e: row %s / 4 + 8 * (e / 2), col 2 * (%s %% 4) + e %% 2 of the\n",
                   in, L, L);
    kl_strbuf_addf(&sb, "%s// 16 x 8 tile), reading A and B where its ldmatrix lanes read them\n", in);
    /* the mma nest's loops keep the #pragma unroll they had; the loops this adds get none (a
     * removal must not add what the catalog recognizes as an optimization: the walk counts them) */
    bool u1 = tt_pragma_above(ctx, ts_node_start_byte(p->outer)) != ts_node_start_byte(p->outer);
    bool u2 = tt_pragma_above(ctx, ts_node_start_byte(p->inner)) != ts_node_start_byte(p->inner);
    kl_strbuf_addf(&sb, "%s%s%s\n", u1 ? "#pragma unroll\n" : "", in, p->hdr1);
    kl_strbuf_addf(&sb, "%s%s%s\n", u2 ? "#pragma unroll\n" : "", in2, p->hdr2);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = 0; kl_e < 4; kl_e++) {\n", in3);
    kl_strbuf_addf(&sb, "%sconst int kl_r = %s / 4 + 8 * (kl_e / 2), kl_c = 2 * (%s %% 4) + kl_e %% 2;\n", in4, L, L);
    kl_strbuf_addf(&sb, "%sfor (int kl_x = 0; kl_x < 16; kl_x++)\n", in4);
    kl_strbuf_addf(&sb, "%s%s[kl_e] += %s(%s) *\n%s    %s(%s);\n", in5, p->acc, p->conv, p->aread, in5, p->conv, p->bread);
    kl_strbuf_addf(&sb, "%s}\n", in3);
    kl_status st = KL_ERR_NOMEM;
    if (!sb.failed) {
        uint32_t s = tt_pragma_above(ctx, ts_node_start_byte(p->first));
        s = rt_line_start(ctx, s);
        uint32_t e = rt_line_end(ctx, ts_node_end_byte(p->outer) - 1);
        st = kl_edits_add(out, s, e, kl_strbuf_str(&sb));
    }
    kl_strbuf_release(&sb);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[0], 1, out);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[1], 1, out);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[2], 1, out);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

