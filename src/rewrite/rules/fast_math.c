/* fast-math: single-precision math calls <-> their fast hardware intrinsics. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"
#include "util/util.h"

/* precise <-> fast, one-argument calls renamed in place */
static const char *const renames[][2] = {
    {"expf", "__expf"}, {"logf", "__logf"}, {"sinf", "__sinf"}, {"cosf", "__cosf"},
    {"exp10f", "__exp10f"}, {"log2f", "__log2f"}, {"tanf", "__tanf"},
};
#define NRENAMES (sizeof renames / sizeof renames[0])

typedef struct fm_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    bool present;        /* collecting fast intrinsics (else: precise forms) */
    kl_edits *edits;     /* NULL: count only */
    unsigned count;
    json_t *ops;         /* name -> count */
    kl_status st;
} fm_scan;

static bool is_type(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }

/* Does a simple operand print safely inside a binary expression without parentheses? */
static bool atomic_expr(TSNode n)
{
    static const char *const ok[] = {"identifier", "number_literal", "call_expression", "subscript_expression",
                                     "field_expression", "parenthesized_expression", NULL};
    for (int i = 0; ok[i]; i++)
        if (is_type(n, ok[i])) return true;
    return false;
}

/* Is the expression of type float, as far as the file shows? */
static bool is_float_expr(fm_scan *s, TSNode n)
{
    const kl_source *src = s->ctx->src;
    while (is_type(n, "parenthesized_expression")) n = ts_node_named_child(n, 0);
    if (is_type(n, "number_literal")) {
        char *t = kl_node_text(src, n);
        size_t l = t ? strlen(t) : 0;
        bool f = l > 1 && (t[l - 1] == 'f' || t[l - 1] == 'F') && strchr(t, 'x') == NULL;
        free(t);
        return f;
    }
    if (is_type(n, "call_expression")) {
        char *t = kl_node_text(src, ts_node_child_by_field_name(n, "function", 8));
        bool f = t && strlen(t) > 1 && t[strlen(t) - 1] == 'f' &&
                 (!strcmp(t, "expf") || !strcmp(t, "__expf") || !strcmp(t, "sqrtf") || !strcmp(t, "logf") ||
                  !strcmp(t, "fabsf") || !strcmp(t, "fmaxf") || !strcmp(t, "fminf") || !strcmp(t, "rsqrtf") ||
                  !strcmp(t, "sinf") || !strcmp(t, "cosf") || !strcmp(t, "tanhf") || !strcmp(t, "powf"));
        free(t);
        return f;
    }
    if (is_type(n, "binary_expression")) {
        char *op = kl_node_text(src, ts_node_child_by_field_name(n, "operator", 8));
        bool arith = op && (!strcmp(op, "+") || !strcmp(op, "-") || !strcmp(op, "*") || !strcmp(op, "/"));
        free(op);
        return arith && is_float_expr(s, ts_node_child_by_field_name(n, "left", 4)) &&
               is_float_expr(s, ts_node_child_by_field_name(n, "right", 5));
    }
    TSNode base = n;
    while (is_type(base, "subscript_expression")) base = ts_node_child_by_field_name(base, "argument", 8);
    if (!is_type(base, "identifier")) return false;
    char *name = kl_node_text(src, base);
    if (!name) return false;
    bool f = false;
    int p = kl_affine_param_index(s->ax, name);
    if (p >= 0) {
        const kl_param_info *pi = kl_affine_param(s->ax, (unsigned)p);
        bool subscripted = !ts_node_eq(base, n);
        f = !strcmp(pi->elem, "float") && pi->pointer == subscripted;
    } else {
        /* a local: find its declaration in the function and read its type */
        TSNode body = kl_ast_function_body(kl_affine_ctx_function(s->ax));
        char *bt = kl_node_text(src, body);
        char pat1[160], pat2[160];
        kl_snprintf(pat1, sizeof pat1, "float %s ", name);
        kl_snprintf(pat2, sizeof pat2, "float %s=", name);
        char pat3[160];
        kl_snprintf(pat3, sizeof pat3, "float %s;", name);
        f = bt && ts_node_eq(base, n) && (strstr(bt, pat1) || strstr(bt, pat2) || strstr(bt, pat3));
        free(bt);
    }
    free(name);
    return f;
}

static void count_op(fm_scan *s, const char *op)
{
    json_t *c = json_object_get(s->ops, op);
    json_object_set_new(s->ops, op, json_integer(c ? json_integer_value(c) + 1 : 1));
    s->count++;
}

static void edit(fm_scan *s, uint32_t a, uint32_t b, const char *text)
{
    if (s->edits && s->st == KL_OK) s->st = kl_edits_add(s->edits, a, b, text);
}

static bool needs_parens(TSNode n)
{
    TSNode p = ts_node_parent(n);
    return is_type(p, "binary_expression") || is_type(p, "unary_expression") || is_type(p, "cast_expression") ||
           is_type(p, "pointer_expression") || is_type(p, "field_expression") || is_type(p, "subscript_expression");
}

static bool scan(TSNode n, void *user)
{
    fm_scan *s = user;
    const kl_source *src = s->ctx->src;
    if (s->st != KL_OK) return false;
    if (is_type(n, "call_expression")) {
        TSNode fnode = ts_node_child_by_field_name(n, "function", 8);
        TSNode args = ts_node_child_by_field_name(n, "arguments", 9);
        if (!is_type(fnode, "identifier")) return true;
        for (unsigned i = 0; i < NRENAMES; i++) {
            const char *from = renames[i][s->present ? 1 : 0], *to = renames[i][s->present ? 0 : 1];
            if (kl_node_text_is(src, fnode, from) && ts_node_named_child_count(args) == 1) {
                count_op(s, from);
                edit(s, ts_node_start_byte(fnode), ts_node_end_byte(fnode), to);
                return true;
            }
        }
        if (s->present && kl_node_text_is(src, fnode, "__fdividef") && ts_node_named_child_count(args) == 2) {
            count_op(s, "__fdividef");
            /* piecewise, so calls inside the operands are rewritten too */
            TSNode a = ts_node_named_child(args, 0), b = ts_node_named_child(args, 1);
            bool wrap = needs_parens(n), pa = !atomic_expr(a), pb = !atomic_expr(b);
            char t[16];
            kl_snprintf(t, sizeof t, "%s%s", wrap ? "(" : "", pa ? "(" : "");
            edit(s, ts_node_start_byte(n), ts_node_start_byte(a), t);
            kl_snprintf(t, sizeof t, "%s / %s", pa ? ")" : "", pb ? "(" : "");
            edit(s, ts_node_end_byte(a), ts_node_start_byte(b), t);
            kl_snprintf(t, sizeof t, "%s%s", pb ? ")" : "", wrap ? ")" : "");
            edit(s, ts_node_end_byte(b), ts_node_end_byte(n), t);
            return true;
        }
        if (s->present && kl_node_text_is(src, fnode, "rsqrtf") && ts_node_named_child_count(args) == 1) {
            count_op(s, "rsqrtf");
            TSNode a = ts_node_named_child(args, 0);
            bool wrap = needs_parens(n);
            edit(s, ts_node_start_byte(n), ts_node_start_byte(a), wrap ? "(1.0f / sqrtf(" : "1.0f / sqrtf(");
            edit(s, ts_node_end_byte(a), ts_node_end_byte(n), wrap ? "))" : ")");
            return true;
        }
        return true;
    }
    if (!s->present && is_type(n, "binary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        if (!kl_node_text_is(src, op, "/")) return true;
        TSNode l = ts_node_child_by_field_name(n, "left", 4), r = ts_node_child_by_field_name(n, "right", 5);
        /* 1.0f / sqrtf(x) -> rsqrtf(x) */
        TSNode rf = ts_node_child_by_field_name(r, "function", 8);
        if (is_type(l, "number_literal") && (kl_node_text_is(src, l, "1.0f") || kl_node_text_is(src, l, "1.f")) &&
            is_type(r, "call_expression") && kl_node_text_is(src, rf, "sqrtf")) {
            TSNode args = ts_node_child_by_field_name(r, "arguments", 9);
            if (ts_node_named_child_count(args) == 1) {
                count_op(s, "1/sqrtf");
                TSNode a = ts_node_named_child(args, 0);
                edit(s, ts_node_start_byte(n), ts_node_start_byte(a), "rsqrtf(");
                edit(s, ts_node_end_byte(a), ts_node_end_byte(n), ")");
                return true;
            }
        }
        /* x / y with both sides float -> __fdividef(x, y) */
        if (is_float_expr(s, l) && is_float_expr(s, r)) {
            count_op(s, "/");
            edit(s, ts_node_start_byte(n), ts_node_start_byte(l), "__fdividef(");
            edit(s, ts_node_end_byte(l), ts_node_start_byte(r), ", ");
            edit(s, ts_node_end_byte(r), ts_node_end_byte(n), ")");
            return true;
        }
    }
    return true;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    for (int dir = 0; dir < 2; dir++) {
        fm_scan s = {ctx, ax, dir == 0, NULL, 0, json_object(), KL_OK};
        if (!s.ops) return KL_ERR_NOMEM;
        kl_ast_walk(kl_ast_function_body(fn), scan, &s);
        if (s.count == 0) {
            json_decref(s.ops);
            continue;
        }
        char id[256], note[160];
        kl_site_id(id, sizeof id, name, fn, NULL);
        kl_snprintf(note, sizeof note, "%u %s in %s", s.count,
                    dir == 0 ? "fast intrinsics" : "single-precision operations with a fast intrinsic", name);
        json_t *f = json_pack("{s:o, s:s}", "ops", s.ops, "dtype", "f32");
        kl_status st = kl_sites_add(out, id, dir == 0 ? KL_SITE_PRESENT : KL_SITE_APPLICABLE, kl_node_span(fn), name, f,
                                    NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_gpu_function(ctx, visit, out, err);
}

typedef struct fm_run {
    const kl_site *site;
    bool present;
    kl_edits *edits;
    kl_status st;
} fm_run;

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    fm_run *r = user;
    if (ts_node_start_byte(fn) != r->site->span.start || strcmp(name, r->site->kernel)) return KL_OK;
    fm_scan s = {ctx, ax, r->present, r->edits, 0, json_object(), KL_OK};
    if (!s.ops) return KL_ERR_NOMEM;
    kl_ast_walk(kl_ast_function_body(fn), scan, &s);
    json_decref(s.ops);
    return s.st;
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, bool present, kl_edits *out, kl_error *err)
{
    fm_run r = {site, present, out, KL_OK};
    kl_status st = kl_rules_each_gpu_function(ctx, run_visit, &r, err);
    if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
    if (st == KL_OK && out->count == 0) return kl_rule_not_applicable(err, "nothing to rewrite in %s", site->kernel);
    return st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run(ctx, site, true, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    (void)params;
    return run(ctx, site, false, out, err);
}

const kl_rule kl_rule_fast_math = {
    "fast-math", "use the fast single-precision intrinsics (__expf, __fdividef, rsqrtf, …) in a function",
    NULL, 0, find, remove_site, apply,
};
