/* launch-bounds: __launch_bounds__(threads[, minBlocks]) matching the block size of the launches. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const min_values[] = {"0", "1", "2", "4", NULL};
static const kl_rule_param lb_params[] = {{"min_blocks", min_values, "0"}};

typedef struct dim3_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode list;          /* the extents of `dim3 name(…)` / `= dim3(…)` / `{…}`, when found */
} dim3_find;

static bool find_dim3(TSNode n, void *user)
{
    dim3_find *d = user;
    if (!ts_node_is_null(d->list)) return false;
    if (strcmp(ts_node_type(n), "declaration")) return true;
    if (!kl_node_text_is(d->ctx->src, ts_node_child_by_field_name(n, "type", 4), "dim3")) return false;
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(n, i), nm = {0}, v = {0};
        if (!strcmp(ts_node_type(k), "function_declarator")) {
            nm = ts_node_child_by_field_name(k, "declarator", 10);
            v = ts_node_child_by_field_name(k, "parameters", 10);
        } else if (!strcmp(ts_node_type(k), "init_declarator")) {
            nm = ts_node_child_by_field_name(k, "declarator", 10);
            v = ts_node_child_by_field_name(k, "value", 5);
            if (!ts_node_is_null(v) && !strcmp(ts_node_type(v), "call_expression") &&
                kl_node_text_is(d->ctx->src, ts_node_child_by_field_name(v, "function", 8), "dim3"))
                v = ts_node_child_by_field_name(v, "arguments", 9);
        }
        if (ts_node_is_null(nm) || ts_node_is_null(v) || !kl_node_text_is(d->ctx->src, nm, d->name)) continue;
        const char *t = ts_node_type(v);
        if (!strcmp(t, "parameter_list") || !strcmp(t, "argument_list") || !strcmp(t, "initializer_list")) d->list = v;
    }
    return false;
}

/* A local `dim3 block(BLOCK, BLOCK)` of the host whose extents are file-level constants or
 * literals, at least one of them named: "BLOCK * BLOCK" into text (extents of 1 left out), so
 * that the bounds follow a later change of the constants. False otherwise. */
static bool dim3_named_product(const kl_rule_ctx *ctx, TSNode host, const char *name, char *text, size_t size)
{
    dim3_find d = {.ctx = ctx, .name = name};
    kl_ast_walk(kl_ast_function_body(host), find_dim3, &d);
    if (ts_node_is_null(d.list)) return false;
    kl_strbuf sb = KL_STRBUF_INIT;
    bool named = false, ok = true;
    uint32_t c = ts_node_named_child_count(d.list);
    for (uint32_t i = 0; i < c && ok; i++) {
        TSNode a = ts_node_named_child(d.list, i);
        if (!strcmp(ts_node_type(a), "parameter_declaration")) a = ts_node_child_by_field_name(a, "type", 4);
        const char *t = ts_node_type(a);
        int64_t v;
        /* evaluated without the host as scope: only file-level names count */
        if (strcmp(t, "number_literal") && strcmp(t, "identifier") && strcmp(t, "type_identifier")) ok = false;
        else if (!kl_const_eval(ctx->src, (TSNode){0}, a, false, &v, NULL, 0)) ok = false;
        else if (strcmp(t, "number_literal") || v != 1) {
            char *at = kl_node_text(ctx->src, a);
            if (!at) ok = false;
            else kl_strbuf_addf(&sb, "%s%s", sb.len ? " * " : "", at);
            free(at);
            named |= strcmp(t, "number_literal") != 0;
        }
    }
    ok = ok && named && !sb.failed && sb.len > 0 && sb.len < size;
    if (ok) kl_snprintf(text, size, "%s", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return ok;
}

/* The block size every launch of `kernel` uses: its value and the text to write (a named
 * constant when the launch names one of the file, else the number). */
static bool launch_threads(const kl_rule_ctx *ctx, const char *kernel, int64_t *threads, char *text, size_t size,
                           char *why, size_t why_size, unsigned *nlaunch)
{
    kl_launch_sites ls;
    *nlaunch = 0;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) {
        kl_snprintf(why, why_size, "out of memory");
        return false;
    }
    bool ok = true;
    text[0] = '\0';
    for (unsigned i = 0; i < ls.count && ok; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, kernel)) continue;
        (*nlaunch)++;
        int64_t v;
        char w[200];
        if (ts_node_is_null(l->block) || !kl_const_eval(ctx->src, l->host_fn, l->block, true, &v, w, sizeof w)) {
            kl_snprintf(why, why_size, "the block size at line %u is not a compile-time constant: %s",
                        ts_node_start_point(l->call).row + 1, ts_node_is_null(l->block) ? "absent" : w);
            ok = false;
        } else if (*nlaunch > 1 && v != *threads) {
            kl_snprintf(why, why_size, "launches of %s use different block sizes (%lld and %lld)", kernel,
                        (long long)*threads, (long long)v);
            ok = false;
        } else {
            *threads = v;
            /* a file-level constant named at the launch is written by name */
            char *bt = kl_node_text(ctx->src, l->block);
            bool named = bt && strcmp(ts_node_type(l->block), "identifier") == 0;
            if (named) {
                /* only if it is not a local of the host function */
                TSNode body = kl_ast_function_body(l->host_fn);
                char *bodyt = kl_node_text(ctx->src, body);
                char decl1[160], decl2[160], decl3[160];
                kl_snprintf(decl1, sizeof decl1, " %s =", bt);
                kl_snprintf(decl2, sizeof decl2, " %s(", bt);
                kl_snprintf(decl3, sizeof decl3, " %s{", bt);
                if (bodyt && (strstr(bodyt, decl1) || strstr(bodyt, decl2) || strstr(bodyt, decl3))) named = false;
                free(bodyt);
            }
            if (named)
                kl_snprintf(text, size, "%s", bt);
            else if (bt && !strcmp(ts_node_type(l->block), "identifier") &&
                     dim3_named_product(ctx, l->host_fn, bt, text, size))
                ; /* `dim3 block(BLOCK, BLOCK)`: "BLOCK * BLOCK" */
            else
                kl_snprintf(text, size, "%lld", (long long)v);
            free(bt);
        }
    }
    kl_launch_sites_release(&ls);
    if (ok && *nlaunch == 0) {
        kl_snprintf(why, why_size, "the file never launches %s", kernel);
        ok = false;
    }
    return ok;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    (void)ax;
    TSNode lb = kl_ast_child_of_type(fn, "launch_bounds");
    char id[256];
    kl_site_id(id, sizeof id, name, fn, NULL);
    if (!ts_node_is_null(lb)) {
        json_t *params = json_object();
        uint32_t c = ts_node_named_child_count(lb);
        if (c >= 1) json_object_set_new(params, "threads", json_string(""));
        char *t0 = c >= 1 ? kl_node_text(ctx->src, ts_node_named_child(lb, 0)) : NULL;
        char *t1 = c >= 2 ? kl_node_text(ctx->src, ts_node_named_child(lb, 1)) : NULL;
        json_object_set_new(params, "threads", json_string(t0 ? t0 : ""));
        if (t1) json_object_set_new(params, "min_blocks", json_string(t1));
        free(t0);
        free(t1);
        return kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(lb), name, json_object(), params,
                            "__launch_bounds__ on the kernel");
    }
    int64_t threads = 0;
    char text[128], why[300];
    unsigned nl = 0;
    json_t *f = json_object();
    if (!f) return KL_ERR_NOMEM;
    bool ok = launch_threads(ctx, name, &threads, text, sizeof text, why, sizeof why, &nl);
    if (nl == 0) {
        json_decref(f); /* never launched here: nothing to match the bounds to */
        return KL_OK;
    }
    json_object_set_new(f, "launches", json_integer(nl));
    if (ok) {
        json_object_set_new(f, "threads", json_integer(threads));
        json_object_set_new(f, "threads_text", json_string(text));
    } else {
        json_object_set_new(f, "why_not", json_string(why));
    }
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(fn), name, f, NULL,
                        ok ? "the kernel has no __launch_bounds__ and a constant block size" : why);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_function(ctx, "__global__", visit, out, err);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    uint32_t a = site->span.start, b = site->span.end;
    if (b > ctx->len || b - a < 17 || memcmp(ctx->text + a, "__launch_bounds__", 17))
        return kl_rule_not_applicable(err, "no __launch_bounds__ at %s", site->id);
    while (b < ctx->len && (ctx->text[b] == ' ' || ctx->text[b] == '\t' || ctx->text[b] == '\n' || ctx->text[b] == '\r'))
        b++;
    bool space_before = a > 0 && (ctx->text[a - 1] == ' ' || ctx->text[a - 1] == '\n' || ctx->text[a - 1] == '\t');
    kl_status st = kl_edits_add(out, a, b, space_before ? "" : " ");
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    kl_status refused = kl_site_why_not(site, err);
    if (refused != KL_OK) return refused;
    const char *text = json_string_value(json_object_get(site->features, "threads_text"));
    json_int_t threads = json_integer_value(json_object_get(site->features, "threads"));
    if (!text || threads <= 0) return kl_rule_not_applicable(err, "the block size of %s is unknown", site->kernel);
    if (threads > 1024)
        return kl_rule_not_applicable(err, "the block size %lld is more than 1024 threads", (long long)threads);
    int64_t minb = 0;
    if (!kl_rule_param_int(&kl_rule_launch_bounds, params, "min_blocks", &minb) || minb < 0)
        return kl_error_set(err, KL_ERR_INVALID, "launch-bounds: min_blocks must be a number");
    /* insert before the function's name */
    TSNode fn = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), site->span.start, site->span.end);
    while (!ts_node_is_null(fn) && strcmp(ts_node_type(fn), "function_definition")) fn = ts_node_parent(fn);
    if (ts_node_is_null(fn)) return kl_rule_not_applicable(err, "no kernel at %s", site->id);
    TSNode d = ts_node_child_by_field_name(fn, "declarator", 10);
    if (ts_node_is_null(d)) return kl_rule_not_applicable(err, "the kernel at %s has no declarator", site->id);
    uint32_t at = ts_node_start_byte(d);
    kl_status st = minb ? kl_edits_addf(out, at, at, "__launch_bounds__(%s, %lld) ", text, (long long)minb)
                        : kl_edits_addf(out, at, at, "__launch_bounds__(%s) ", text);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

const kl_rule kl_rule_launch_bounds = {
    "launch-bounds", "tell the compiler the kernel's block size (__launch_bounds__) so it can budget registers",
    lb_params, 1, find, remove_site, apply,
};
