/*
 * register-tile, stencil form (remove): a thread that computes N outputs along one axis of a stencil —
 * rows down a column, or columns across a row — written over a compile-time constant N of the file:
 *  - a loop `for (o = 0; o < N; o++)` over the thread's outputs (in the kernel or a __device__ helper);
 *  - the thread's first output placed at `… threadIdx.d * N` (or `(… + threadIdx.d) * N`) in a kernel;
 *  - every launch of that kernel with a grid whose d extent follows N (through the file's constants:
 *    `(h + TILE_H - 1) / TILE_H`, TILE_H = BY * OUT_Y), so that the grid grows as N shrinks;
 *  - no shared memory in those functions (a halo tile with several outputs per thread is smem-tile's
 *    `outputs_x`; a GEMM tile is the other forms').
 * The code is then written in N: remove sets N to 1 where it is defined. Every output is still covered
 * (the grid follows N), and each is computed by the same statements as before (the loops over o run
 * once, `i = ir - o` reads filter row ir). Refused: N along x while a vector path (float4, float2,
 * reinterpret_cast …) reads the outputs of a thread as one vector ("remove vectorize first"); N compared
 * with == or != in code (a value the code depends on); a static_assert that would fail with N = 1 for
 * any other reason than pinning N itself. A conjunct that pins N (`OUT_X == 4 && …`, the float4 path's
 * requirement) is dropped once no vector path is left: it said what that path needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/syntax.h"
#include "rewrite/rules/register_tile.h"

#define RS_MAXC 64

typedef struct rs_const {
    char name[64];
    TSNode def, value;  /* declaration / preproc_def, and the value edited */
    int64_t v;
} rs_const;

/* The file's integer constants: `#define N v`, `constexpr int N = v;`, `const int N = v;` at the top level. */
static unsigned file_constants(const kl_rule_ctx *ctx, rs_const *out, unsigned max)
{
    TSNode root = kl_source_root(ctx->src);
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(root) && n < max; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (rt_is(d, "preproc_def")) {
            TSNode nm = rt_field(d, "name"), val = rt_field(d, "value");
            char *t = rt_text(ctx, nm);
            int64_t v;
            if (t && !ts_node_is_null(val) && kl_const_eval_name(ctx->src, (TSNode){{0}, 0, 0}, t, &v, NULL, 0)) {
                kl_snprintf(out[n].name, sizeof out[n].name, "%s", t);
                out[n].def = d, out[n].value = val, out[n].v = v;
                n++;
            }
            free(t);
        } else if (rt_is(d, "declaration")) {
            char *t = rt_text(ctx, d);
            bool konst = t && (strstr(t, "constexpr") || strstr(t, "const "));
            free(t);
            if (!konst) continue;
            TSNode ds[8];
            unsigned nd = rt_declarators(d, ds, 8);
            for (unsigned k = 0; k < nd && k < 8 && n < max; k++) {
                if (!rt_is(ds[k], "init_declarator")) continue;
                TSNode val = rt_field(ds[k], "value");
                char *nm = rt_text(ctx, kl_ast_declarator_name(ds[k]));
                int64_t v;
                if (nm && kl_const_eval(ctx->src, (TSNode){{0}, 0, 0}, val, false, &v, NULL, 0)) {
                    kl_snprintf(out[n].name, sizeof out[n].name, "%s", nm);
                    out[n].def = d, out[n].value = val, out[n].v = v;
                    n++;
                }
                free(nm);
            }
        }
    }
    return n;
}

typedef struct ident_any {
    const kl_rule_ctx *ctx;
    const rs_const *cs;
    const bool *set;
    unsigned n;
    bool found;
} ident_any;

static bool ident_any_visit(TSNode n, void *user)
{
    ident_any *a = user;
    if (a->found) return false;
    if (rt_is(n, "identifier") || rt_is(n, "preproc_arg")) {
        char *t = rt_text(a->ctx, n);
        if (!t) return true;
        for (unsigned i = 0; i < a->n && !a->found; i++) {
            if (!a->set[i]) continue;
            if (rt_is(n, "identifier")) {
                a->found = !strcmp(t, a->cs[i].name);
            } else {
                /* a macro's text: the name as a whole word */
                size_t L = strlen(a->cs[i].name);
                for (const char *p = strstr(t, a->cs[i].name); p && !a->found; p = strstr(p + 1, a->cs[i].name)) {
                    bool lb = p == t || !(p[-1] == '_' || (p[-1] >= '0' && p[-1] <= '9') || ((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z'));
                    char c = p[L];
                    bool rb = !(c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'));
                    a->found = lb && rb;
                }
            }
        }
        free(t);
    }
    return true;
}

/* Does n name one of the constants in set? */
static bool mentions(const kl_rule_ctx *ctx, TSNode n, const rs_const *cs, unsigned nc, const bool *set)
{
    ident_any a = {ctx, cs, set, nc, false};
    kl_ast_walk(n, ident_any_visit, &a);
    return a.found;
}

/* set[i]: constant i is N or defined from it (transitively). */
static void followers(const kl_rule_ctx *ctx, const rs_const *cs, unsigned nc, unsigned n0, bool *set)
{
    memset(set, 0, nc * sizeof *set);
    set[n0] = true;
    bool changed = true;
    while (changed) {
        changed = false;
        for (unsigned i = 0; i < nc; i++)
            if (!set[i] && mentions(ctx, cs[i].value, cs, nc, set)) set[i] = changed = true;
    }
}

/* ---- the pieces in the code -------------------------------------------------------------------------- */

typedef struct rs_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode loop;          /* the first `for (o = 0; o < N; o++)` */
    TSNode mult;          /* the first `… threadIdx.d * N` */
    char dim;
    TSNode compare;       /* N == v / N != v */
} rs_scan;

static bool has_threadidx(const kl_rule_ctx *ctx, TSNode n, char *dim)
{
    if (rt_is(n, "field_expression") && rt_text_is(ctx, rt_field(n, "argument"), "threadIdx")) {
        char *f = rt_text(ctx, rt_field(n, "field"));
        bool ok = f && (f[0] == 'x' || f[0] == 'y' || f[0] == 'z') && !f[1];
        if (ok) *dim = f[0];
        free(f);
        return ok;
    }
    for (uint32_t i = 0; i < ts_node_named_child_count(n); i++)
        if (has_threadidx(ctx, ts_node_named_child(n, i), dim)) return true;
    return false;
}

static TSNode strip(TSNode e)
{
    while (rt_is(e, "parenthesized_expression")) e = ts_node_named_child(e, 0);
    return e;
}

static bool scan_visit(TSNode n, void *user)
{
    rs_scan *s = user;
    if (rt_is(n, "for_statement") && ts_node_is_null(s->loop)) {
        TSNode c = strip(rt_field(n, "condition"));
        if (rt_is(c, "binary_expression") && rt_text_is(s->ctx, rt_field(c, "operator"), "<") &&
            rt_text_is(s->ctx, strip(rt_field(c, "right")), s->name) && rt_is(strip(rt_field(c, "left")), "identifier")) {
            TSNode init = rt_field(n, "initializer");
            char *t = rt_text(s->ctx, init);
            /* starts at 0 */
            if (t) {
                size_t L = strlen(t);
                while (L && (t[L - 1] == ';' || t[L - 1] == ' ')) t[--L] = '\0';
                if (L >= 2 && t[L - 1] == '0' && (t[L - 2] == '=' || t[L - 2] == ' ')) s->loop = n;
            }
            free(t);
        }
    }
    if (rt_is(n, "binary_expression")) {
        TSNode op = rt_field(n, "operator");
        TSNode l = strip(rt_field(n, "left")), r = strip(rt_field(n, "right"));
        if (rt_text_is(s->ctx, op, "*") && ts_node_is_null(s->mult)) {
            TSNode other = rt_text_is(s->ctx, r, s->name) ? l : rt_text_is(s->ctx, l, s->name) ? r : (TSNode){{0}, 0, 0};
            char d = 0;
            if (!ts_node_is_null(other) && has_threadidx(s->ctx, other, &d)) s->mult = n, s->dim = d;
        }
        if ((rt_text_is(s->ctx, op, "==") || rt_text_is(s->ctx, op, "!=")) &&
            (rt_text_is(s->ctx, l, s->name) || rt_text_is(s->ctx, r, s->name)) && ts_node_is_null(s->compare) &&
            ts_node_is_null(rt_ancestor(n, "static_assert_declaration")))
            s->compare = n;
    }
    return true;
}

/* Does function f declare shared memory? (read from its text: the grammar keeps __shared__ in several places) */
static bool uses_shared(const kl_rule_ctx *ctx, const rt_func *f)
{
    uint32_t a = ts_node_start_byte(f->body), b = ts_node_end_byte(f->body);
    for (uint32_t i = a; i + 10 <= b; i++)
        if (!memcmp(ctx->text + i, "__shared__", 10)) return true;
    return false;
}

/* The first vector access of f (a float4 / float2 / int4 … type, make_<vector>, reinterpret_cast): its
 * line, 0 when none. */
static unsigned vector_line(const kl_rule_ctx *ctx, const rt_func *f)
{
    static const char *const words[] = {"float4", "float2", "int4", "int2", "uint4", "uint2", "double2",
                                        "half2", "__half2", "__nv_bfloat162", "reinterpret_cast", NULL};
    uint32_t a = ts_node_start_byte(f->body), b = ts_node_end_byte(f->body);
    for (uint32_t i = a; i < b; i++) {
        if (i > 0 && (ctx->text[i - 1] == '_' || ((ctx->text[i - 1] | 32) >= 'a' && (ctx->text[i - 1] | 32) <= 'z'))) continue;
        for (unsigned w = 0; words[w]; w++) {
            size_t L = strlen(words[w]);
            if (i + L <= b && !memcmp(ctx->text + i, words[w], L)) {
                char c = ctx->text[i + L];
                if (c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z')) continue;
                unsigned line = 1;
                for (uint32_t k = 0; k < i; k++) line += ctx->text[k] == '\n';
                return line;
            }
        }
    }
    return 0;
}

/* ---- one site ---------------------------------------------------------------------------------------- */

typedef struct rs_site {
    rs_const c;
    char fn[128];          /* the function of the loop over the outputs */
    TSNode loop;
    char kernel[128];      /* the kernel placing the outputs */
    char dim;
    char why[400];
    /* static_assert conjuncts to drop: [start, end) in the original text */
    uint32_t drop_a[4], drop_b[4];
    unsigned ndrop;
} rs_site;

/* The static_asserts with N = 1: conjuncts that fail, dropped when they pin N and no vector path needs
 * it; otherwise a refusal in s->why. */
static kl_status check_asserts(const kl_rule_ctx *ctx, rs_site *s, const rs_const *cs, unsigned nc, const bool *set,
                               bool vector_path)
{
    uint32_t va = ts_node_start_byte(s->c.value), vb = ts_node_end_byte(s->c.value);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, ctx->text, va);
    kl_strbuf_add(&sb, "1", 1);
    kl_strbuf_add(&sb, ctx->text + vb, ctx->len - vb);
    kl_source *ns = NULL;
    kl_error err = {0};
    kl_status st = kl_source_parse_text("stencil.cu", kl_strbuf_str(&sb), sb.len, &ns, &err);
    kl_strbuf_release(&sb);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? st : KL_OK;
    int64_t delta = 1 - (int64_t)(vb - va);
    TSNode root = kl_source_root(ns);
    for (uint32_t i = 0; i < ts_node_named_child_count(root) && !s->why[0]; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!rt_is(d, "static_assert_declaration")) continue;
        TSNode cond = rt_field(d, "condition");
        /* the conjuncts, left to right */
        TSNode stack[16], conj[16];
        unsigned sp = 0, ncj = 0;
        stack[sp++] = cond;
        while (sp > 0 && ncj < 16) {
            TSNode e = stack[--sp];
            TSNode u = strip(e);
            char *op = rt_is(u, "binary_expression") ? kl_node_text(ns, rt_field(u, "operator")) : NULL;
            bool and = op && !strcmp(op, "&&");
            free(op);
            if (and && sp + 2 <= 16) {
                stack[sp++] = rt_field(u, "right");
                stack[sp++] = rt_field(u, "left");
            } else {
                conj[ncj++] = e;
            }
        }
        for (unsigned k = 0; k < ncj && !s->why[0]; k++) {
            int64_t v;
            if (!kl_const_eval(ns, (TSNode){{0}, 0, 0}, conj[k], false, &v, NULL, 0) || v != 0) continue;
            /* fails: where is it in the original? */
            uint32_t a = ts_node_start_byte(conj[k]), b = ts_node_end_byte(conj[k]);
            if (a >= vb) a = (uint32_t)(a - delta), b = (uint32_t)(b - delta);
            bool pins = false;
            {
                char *t = kl_node_text(ns, conj[k]);
                if (t) {
                    size_t L = strlen(s->c.name);
                    for (const char *p = strstr(t, s->c.name); p && !pins; p = strstr(p + 1, s->c.name)) {
                        char c = p[L];
                        pins = (p == t || !(p[-1] == '_' || ((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z'))) &&
                               !(c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'));
                    }
                    free(t);
                }
            }
            unsigned line = ts_node_start_point(d).row + 1;
            if (!pins) {
                kl_snprintf(s->why, sizeof s->why, "the static_assert at line %u would fail with %s = 1", line, s->c.name);
            } else if (vector_path) {
                kl_snprintf(s->why, sizeof s->why, "the static_assert at line %u needs %s = %lld (a vector path): remove vectorize first",
                            line, s->c.name, (long long)s->c.v);
            } else if (s->ndrop < 4) {
                /* the conjunct and its && (or the whole static_assert) */
                if (ncj == 1) {
                    uint32_t da = ts_node_start_byte(d), db = ts_node_end_byte(d);
                    if (da >= vb) da = (uint32_t)(da - delta), db = (uint32_t)(db - delta);
                    kl_rule_ctx oc = *ctx;
                    da = rt_line_blank_before(&oc, da) ? rt_line_start(&oc, da) : da;
                    db = rt_line_end(&oc, db);
                    s->drop_a[s->ndrop] = da, s->drop_b[s->ndrop++] = db;
                } else {
                    TSNode nb = k + 1 < ncj ? conj[k + 1] : conj[k - 1];
                    uint32_t oa = ts_node_start_byte(nb), ob = ts_node_end_byte(nb);
                    if (oa >= vb) oa = (uint32_t)(oa - delta), ob = (uint32_t)(ob - delta);
                    if (k + 1 < ncj) s->drop_a[s->ndrop] = a, s->drop_b[s->ndrop++] = oa;
                    else s->drop_a[s->ndrop] = ob, s->drop_b[s->ndrop++] = b;
                }
            } else {
                kl_snprintf(s->why, sizeof s->why, "the static_asserts pin %s in too many places", s->c.name);
            }
        }
    }
    (void)cs, (void)nc, (void)set;
    kl_source_free(ns);
    return KL_OK;
}

/* Constant i as a stencil register tile, or false. */
static bool site_of(const kl_rule_ctx *ctx, const rs_const *cs, unsigned nc, unsigned ci, rt_func *fs, unsigned nf,
                    rs_site *s)
{
    memset(s, 0, sizeof *s);
    s->c = cs[ci];
    if (cs[ci].v < 2 || cs[ci].v > 64) return false;
    const rt_func *lf = NULL, *mf = NULL;
    rs_scan sc = {0};
    for (unsigned i = 0; i < nf; i++) {
        if (!fs[i].global && !fs[i].device) continue;
        memset(&sc, 0, sizeof sc);
        sc.ctx = ctx, sc.name = cs[ci].name;
        kl_ast_walk(fs[i].body, scan_visit, &sc);
        if (!ts_node_is_null(sc.compare)) {
            kl_snprintf(s->why, sizeof s->why, "line %u compares %s with a value: the code depends on it",
                        kl_ast_line(sc.compare), cs[ci].name);
        }
        if (!lf && !ts_node_is_null(sc.loop)) lf = &fs[i], s->loop = sc.loop;
        if (!mf && !ts_node_is_null(sc.mult)) mf = &fs[i], s->dim = sc.dim;
    }
    if (!lf || !mf) return false;
    if (uses_shared(ctx, lf) || uses_shared(ctx, mf)) return false;
    kl_snprintf(s->fn, sizeof s->fn, "%s", lf->name);
    kl_snprintf(s->kernel, sizeof s->kernel, "%s", mf->name);
    if (s->why[0]) return true;
    if (!mf->global) {
        kl_snprintf(s->why, sizeof s->why, "%s places a thread's outputs at threadIdx.%c * %s, but is not a kernel: its "
                    "grid is not followed", mf->name, s->dim, cs[ci].name);
        return true;
    }
    bool set[RS_MAXC];
    followers(ctx, cs, nc, ci, set);
    /* the grid follows N on every launch */
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, mf->name, ls, 16);
    if (nl == 0) {
        kl_snprintf(s->why, sizeof s->why, "%s is not launched in the file: its grid is not known", mf->name);
        return true;
    }
    for (unsigned i = 0; i < nl && i < 16; i++) {
        TSNode list = rt_dim3_args(ctx, &ls[i], ls[i].cfg[0]);
        TSNode e = ts_node_is_null(list) ? (s->dim == 'x' ? ls[i].cfg[0] : (TSNode){{0}, 0, 0})
                                         : rt_dim3_extent(list, (uint32_t)(s->dim - 'x'));
        if (ts_node_is_null(e) || !mentions(ctx, e, cs, nc, set)) {
            kl_snprintf(s->why, sizeof s->why, "the grid of the launch at line %u does not follow %s along %c: with fewer "
                        "outputs per thread some would not be computed", kl_ast_line(ls[i].call), cs[ci].name, s->dim);
            return true;
        }
    }
    /* a vector path reading the thread's outputs as one vector */
    bool vector_path = false;
    if (s->dim == 'x') {
        unsigned line = vector_line(ctx, lf);
        if (!line) line = vector_line(ctx, mf);
        if (line) {
            kl_snprintf(s->why, sizeof s->why, "a vector path (line %u) reads %s = %lld outputs per thread as one vector: "
                        "remove vectorize first", line, cs[ci].name, (long long)cs[ci].v);
            vector_path = true;
        }
    }
    if (check_asserts(ctx, s, cs, nc, set, vector_path) != KL_OK) return false;
    return true;
}

kl_status register_tile__rs_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rs_const cs[RS_MAXC];
    unsigned nc = file_constants(ctx, cs, RS_MAXC);
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    if (nf > 64) nf = 64;
    for (unsigned i = 0; i < nc; i++) {
        rs_site s;
        if (!site_of(ctx, cs, nc, i, fs, nf, &s)) continue;
        char id[256];
        kl_site_id(id, sizeof id, s.fn, s.loop, s.c.name);
        json_t *feat = json_pack("{s:s, s:s, s:I, s:s, s:s}", "form", "stencil", "constant", s.c.name, "outputs",
                                 (json_int_t)s.c.v, "axis", s.dim == 'x' ? "x" : s.dim == 'y' ? "y" : "z", "kernel",
                                 s.kernel);
        if (s.why[0]) json_object_set_new(feat, "why_not", json_string(s.why));
        char v[32];
        kl_snprintf(v, sizeof v, "%lld", (long long)s.c.v);
        json_t *params = json_pack("{s:s}", s.dim == 'x' ? "TN" : "TM", v);
        kl_status st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(s.loop), s.fn, feat, params,
                                    s.dim == 'x' ? "several outputs per thread across a row of a stencil (a constant of the file)"
                                                 : "several outputs per thread down a column of a stencil (a constant of the file)");
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

kl_status register_tile__rs_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    const char *name = json_string_value(json_object_get(site->features, "constant"));
    rs_const cs[RS_MAXC];
    unsigned nc = file_constants(ctx, cs, RS_MAXC);
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    if (nf > 64) nf = 64;
    for (unsigned i = 0; name && i < nc; i++) {
        if (strcmp(cs[i].name, name)) continue;
        rs_site s;
        if (!site_of(ctx, cs, nc, i, fs, nf, &s)) break;
        if (s.why[0]) return kl_rule_not_applicable(err, "%s", s.why);
        /* N = 1 where it is defined: the number (a macro's first word), or the whole initializer */
        uint32_t a = ts_node_start_byte(s.c.value), b = ts_node_end_byte(s.c.value);
        if (rt_is(s.c.value, "preproc_arg")) {
            while (a < b && (ctx->text[a] == ' ' || ctx->text[a] == '\t')) a++;
            uint32_t e = a;
            while (e < b && ctx->text[e] != ' ' && ctx->text[e] != '\t' && ctx->text[e] != '/' && ctx->text[e] != '\n') e++;
            b = e;
        }
        kl_status st = kl_edits_add(out, a, b, "1");
        for (unsigned k = 0; k < s.ndrop && st == KL_OK; k++) st = kl_edits_add(out, s.drop_a[k], s.drop_b[k], "");
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        return KL_OK;
    }
    return kl_rule_not_applicable(err, "no stencil register tile at %s", site->id);
}
