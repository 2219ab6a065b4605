/* unroll: `#pragma unroll [N]` on loops whose trip count is a compile-time constant. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const factor_values[] = {"full", "2", "4", "8", NULL};
static const kl_rule_param unroll_params[] = {{"factor", factor_values, "full"}};

/* Is the loop's trip count known only at run time (its start, bound or step reads one)? */
static bool runtime_trip(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, char *why, size_t size)
{
    static const char *const fields[] = {"initializer", "condition", "update", NULL};
    for (unsigned i = 0; fields[i]; i++) {
        TSNode part = ts_node_child_by_field_name(loop, fields[i], (uint32_t)strlen(fields[i]));
        if (kl_expr_runtime(ctx->src, fn, part, why, size)) return true;
    }
    return false;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    for (unsigned i = 0; i < kl_affine_loop_count(ax); i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        char id[256];
        kl_site_id(id, sizeof id, name, L->node, NULL);
        json_t *f = json_pack("{s:s, s:I, s:b}", "loop_var", L->var ? L->var : "", "depth", (json_int_t)L->depth,
                              "trip_known", L->trip_known);
        if (!f) return KL_ERR_NOMEM;
        if (L->trip_known) json_object_set_new(f, "trip", json_integer(L->trip));
        char rt_why[200];
        if (L->has_pragma_unroll && !L->trip_known && (!L->pragma_arg[0] || !strcmp(L->pragma_arg, "full")) &&
            runtime_trip(ctx, fn, L->node, rt_why, sizeof rt_why)) {
            /* `#pragma unroll` without a count unrolls only a compile-time trip count: on this
             * loop it does nothing, and its removal is no step */
            json_decref(f);
            continue;
        }
        if (L->has_pragma_unroll) {
            json_t *params = json_pack("{s:s}", "factor", L->pragma_arg[0] ? L->pragma_arg : "full");
            kl_status st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(L->node), name, f, params,
                                        "a #pragma unroll on this loop");
            if (st != KL_OK) return st;
        } else if (L->kind == KL_LOOP_FOR && L->trip_known && L->trip > 1) {
            char note[128];
            kl_snprintf(note, sizeof note, "a loop over %s with %lld iterations", L->var, (long long)L->trip);
            kl_status st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, f, NULL, note);
            if (st != KL_OK) return st;
        } else {
            json_decref(f);
        }
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_gpu_function(ctx, visit, out, err);
}

/* The loop node of a site: the for/while/do statement starting at the site's span. */
static TSNode site_loop(const kl_rule_ctx *ctx, const kl_site *site)
{
    TSNode n = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), site->span.start, site->span.end);
    while (!ts_node_is_null(n) && !(ts_node_start_byte(n) == site->span.start && ts_node_end_byte(n) == site->span.end))
        n = ts_node_parent(n);
    return n;
}

typedef struct find_loop {
    const kl_site *site;
    uint32_t a, b;
    bool found;
} find_loop;

static kl_status pragma_of(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    find_loop *fl = user;
    (void)ctx, (void)fn;
    if (strcmp(name, fl->site->kernel)) return KL_OK;
    for (unsigned i = 0; i < kl_affine_loop_count(ax); i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        if (ts_node_start_byte(L->node) == fl->site->span.start && L->has_pragma_unroll) {
            fl->a = L->pragma_start;
            fl->b = L->pragma_end;
            fl->found = true;
        }
    }
    return KL_OK;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    find_loop fl = {site, 0, 0, false};
    kl_status st = kl_rules_each_gpu_function(ctx, pragma_of, &fl, err);
    if (st != KL_OK) return st;
    if (!fl.found) return kl_rule_not_applicable(err, "no #pragma unroll before the loop at %s", site->id);
    /* the whole pragma line, with its newline */
    uint32_t a = kl_ast_line_start(ctx->text, fl.a), b = kl_ast_line_end(ctx->text, ctx->len, fl.b);
    /* a marker comment line "// unroll" just above goes too */
    if (a > 0) {
        uint32_t pa = kl_ast_line_start(ctx->text, a - 1), p = pa;
        while (p < a && (ctx->text[p] == ' ' || ctx->text[p] == '\t')) p++;
        if (a - p >= 10 && !memcmp(ctx->text + p, "// unroll", 9) &&
            (ctx->text[p + 9] == '\n' || ctx->text[p + 9] == ':' || ctx->text[p + 9] == '\r'))
            a = pa;
    }
    st = kl_edits_add(out, a, b, "");
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    TSNode loop = site_loop(ctx, site);
    if (ts_node_is_null(loop)) return kl_rule_not_applicable(err, "no loop at %s", site->id);
    const char *factor = "full";
    int64_t k = 0;
    if (kl_rule_param_int(&kl_rule_unroll, params, "factor", &k)) {
        json_t *t = json_object_get(site->features, "trip");
        if (json_is_integer(t) && k > json_integer_value(t))
            return kl_rule_not_applicable(err, "factor %lld exceeds the trip count %lld at %s", (long long)k,
                                          (long long)json_integer_value(t), site->id);
        if (k < 2) return kl_rule_not_applicable(err, "factor %lld: an unroll factor is at least 2", (long long)k);
    } else {
        kl_rule_param_str(&kl_rule_unroll, params, "factor", &factor);
        if (strcmp(factor, "full")) return kl_error_set(err, KL_ERR_INVALID, "unroll: factor must be full or a number");
    }
    uint32_t at = ts_node_start_byte(loop);
    if (!kl_rules_starts_line(ctx, at))
        return kl_rule_not_applicable(err, "the loop at %s does not start its own line", site->id);
    char ind[64];
    kl_rules_indent(ctx, at, ind, sizeof ind);
    kl_status st = k ? kl_edits_addf(out, kl_ast_line_start(ctx->text, at), kl_ast_line_start(ctx->text, at),
                                     "%s#pragma unroll %lld\n", ind, (long long)k)
                     : kl_edits_addf(out, kl_ast_line_start(ctx->text, at), kl_ast_line_start(ctx->text, at),
                                     "%s#pragma unroll\n", ind);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

const kl_rule kl_rule_unroll = {
    "unroll", "unroll loops whose trip count is a compile-time constant (#pragma unroll [N])",
    unroll_params, 1, find, remove_site, apply,
};
