/* The rules rewriter: the catalog of transforms and the `rules` backend (docs/rules.md). */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rewrite_int.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "syntax/canon.h"
#include "util/util.h"

/* The catalog, in a fixed order: this is the order of sites, candidates and listings.
 * Transforms 9-16 are added here by their authors as they land (declared in rules_tree.h). */
const kl_rule *const kl_rules[] = {
    &kl_rule_unroll, &kl_rule_launch_bounds, &kl_rule_restrict, &kl_rule_fast_math, &kl_rule_vectorize, &kl_rule_grid_stride, &kl_rule_block_size, &kl_rule_warp_reduce, &kl_rule_tree_addressing, &kl_rule_smem_pad, &kl_rule_privatize, &kl_rule_block_reduce, &kl_rule_two_pass, &kl_rule_accumulators, &kl_rule_coarsen,
    &kl_rule_coalesce,
    &kl_rule_row_parallel,
    &kl_rule_specialize,
    &kl_rule_tensor_core,
    &kl_rule_wgmma,
    &kl_rule_smem_tile,
    &kl_rule_register_tile,
    &kl_rule_double_buffer,
    &kl_rule_row_cache,
    &kl_rule_interior_path,
    &kl_rule_const_mem,
};
const unsigned kl_rules_count = sizeof kl_rules / sizeof kl_rules[0];

const kl_rule *kl_rule_find(const char *name)
{
    for (unsigned i = 0; i < kl_rules_count; i++)
        if (!strcmp(kl_rules[i]->name, name)) return kl_rules[i];
    return NULL;
}

/* ---- helpers for transforms --------------------------------------------------------------- */

static kl_status not_applicable_v(kl_error *err, const char *fmt, va_list ap)
{
    char buf[KL_ERROR_MAX];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return kl_error_set(err, KL_ERR_NOT_APPLICABLE, "not applicable: %s", buf);
}

kl_status kl_rule_not_applicable(kl_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_status st = not_applicable_v(err, fmt, ap);
    va_end(ap);
    return st;
}

void kl_site_id(char *buf, size_t size, const char *kernel, TSNode at, const char *what)
{
    unsigned line = ts_node_start_point(at).row + 1;
    if (what && *what)
        kl_snprintf(buf, size, "%s:%u:%s", kernel ? kernel : "", line, what);
    else
        kl_snprintf(buf, size, "%s:%u", kernel ? kernel : "", line);
}

const kl_site *kl_sites_find(const kl_sites *s, const char *id, kl_site_dir dir)
{
    for (unsigned i = 0; i < s->count; i++)
        if (s->items[i].dir == dir && !strcmp(s->items[i].id, id)) return &s->items[i];
    return NULL;
}

kl_status kl_site_why_not(const kl_site *site, kl_error *err)
{
    const char *why = json_string_value(json_object_get(site->features, "why_not"));
    return why ? kl_rule_not_applicable(err, "%s", why) : KL_OK;
}

static const kl_rule_param *rule_param(const kl_rule *rule, const char *name)
{
    for (unsigned i = 0; i < rule->nparams; i++)
        if (rule->params[i].name && !strcmp(rule->params[i].name, name)) return &rule->params[i];
    return NULL;
}

bool kl_rule_param_str(const kl_rule *rule, const json_t *params, const char *name, const char **out)
{
    const kl_rule_param *p = rule_param(rule, name);
    if (!p) return false;
    *out = p->deflt;
    json_t *v = params ? json_object_get(params, name) : NULL;
    if (json_is_string(v)) *out = json_string_value(v);
    return true;
}

bool kl_rule_param_int(const kl_rule *rule, const json_t *params, const char *name, int64_t *out)
{
    const kl_rule_param *p = rule_param(rule, name);
    if (!p) return false;
    json_t *v = params ? json_object_get(params, name) : NULL;
    const char *t = p->deflt;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) t = json_string_value(v);
    if (!t) return false;
    char *end;
    long long x = strtoll(t, &end, 10);
    if (end == t || *end) return false;
    *out = x;
    return true;
}

/* The extern "C" launch()'s parameter list, spaces removed (new string), or NULL. */
static char *launch_signature(const kl_source *src)
{
    TSNode fn = kl_ast_function_named(src, "launch");
    if (ts_node_is_null(fn)) return NULL;
    TSNode ps = kl_ast_function_params(fn);
    if (ts_node_is_null(ps)) return NULL;
    char *t = kl_node_text(src, ps);
    if (!t) return NULL;
    char *s = kl_str_unblank(t);
    free(t);
    return s;
}

kl_status kl_rules_check(const kl_source *orig, const char *result, size_t len, kl_error *err)
{
    kl_source *back = NULL;
    kl_status st = kl_source_parse_edited(orig, result, len, &back, err);
    if (st != KL_OK) return st;
    char *want = NULL, *got = NULL;
    unsigned before = kl_source_error_count(orig), after = kl_source_error_count(back);
    if (after > before) {
        kl_span where = {0};
        char msg[128] = "";
        /* name the first error that is new: the first one past the original's count */
        for (unsigned i = 0; i < after && i < 64; i++) {
            if (kl_source_error(back, i, &where, msg, sizeof msg)) break;
        }
        st = kl_error_set(err, KL_ERR_PARSE,
                          "%s:%u:%u: the rewritten file does not parse back (%s; %u parse errors, the original had %u)",
                          kl_source_name(orig), where.line, where.column, msg, after, before);
        goto cleanup;
    }
    want = launch_signature(orig);
    if (want) {
        got = launch_signature(back);
        if (!got) {
            st = kl_error_set(err, KL_ERR_INVALID, "%s: the rewritten file lost extern \"C\" launch()",
                              kl_source_name(orig));
            goto cleanup;
        }
        if (strcmp(want, got)) {
            st = kl_error_set(err, KL_ERR_INVALID, "%s: the rewritten launch() has parameters %s, expected %s",
                              kl_source_name(orig), got, want);
            goto cleanup;
        }
    }
cleanup:
    free(want);
    free(got);
    kl_source_free(back);
    return st;
}

void kl_rules_indent(const kl_rule_ctx *ctx, uint32_t off, char *buf, size_t size)
{
    uint32_t a = kl_ast_line_start(ctx->text, off);
    size_t n = 0;
    while (a + n < ctx->len && (ctx->text[a + n] == ' ' || ctx->text[a + n] == '\t') && n + 1 < size) {
        buf[n] = ctx->text[a + n];
        n++;
    }
    buf[n] = '\0';
}

bool kl_rules_starts_line(const kl_rule_ctx *ctx, uint32_t off)
{
    uint32_t a = kl_ast_line_start(ctx->text, off);
    for (uint32_t i = a; i < off; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t') return false;
    return true;
}

void kl_rules_line_range(const kl_rule_ctx *ctx, TSNode n, const char *marker, uint32_t *start, uint32_t *end)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    *start = a;
    *end = b;
    if (!kl_rules_starts_line(ctx, a)) return;
    uint32_t e = b;
    while (e < ctx->len && (ctx->text[e] == ' ' || ctx->text[e] == '\t' || ctx->text[e] == '\r')) e++;
    if (e < ctx->len && ctx->text[e] != '\n') return;
    *start = kl_ast_line_start(ctx->text, a);
    *end = e < ctx->len ? e + 1 : e;
    if (!marker || *start == 0) return;
    uint32_t pa = kl_ast_line_start(ctx->text, *start - 1);
    uint32_t p = pa;
    while (p < *start && (ctx->text[p] == ' ' || ctx->text[p] == '\t')) p++;
    char want[64];
    kl_snprintf(want, sizeof want, "// %s", marker);
    size_t wl = strlen(want);
    if (p + wl <= *start && !memcmp(ctx->text + p, want, wl)) {
        char after = ctx->text[p + wl];
        if (after == '\n' || after == ':' || after == ' ' || after == '\r') *start = pa;
    }
}

void kl_rules_stmt_range(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, const char *marker, uint32_t *start,
                         uint32_t *end)
{
    rt_stmt_range(ctx, st, NULL, start, end);
    if (*start == ts_node_start_byte(st)) return;
    int li = ax ? kl_affine_loop_index(ax, st) : -1;
    if (li >= 0 && kl_affine_loop(ax, (unsigned)li)->has_pragma_unroll)
        *start = kl_ast_line_start(ctx->text, kl_affine_loop(ax, (unsigned)li)->pragma_start);
    if (*start == 0) return;
    uint32_t pa = kl_ast_line_start(ctx->text, *start - 1), p = pa;
    while (p < *start && (ctx->text[p] == ' ' || ctx->text[p] == '\t')) p++;
    size_t ml = strlen(marker);
    if (p + 3 + ml <= *start && !memcmp(ctx->text + p, "// ", 3) && !memcmp(ctx->text + p + 3, marker, ml)) *start = pa;
}

/* ---- the analyses of an open source ---------------------------------------------------------- */

struct kl_rules_memo {
    struct memo_entry {
        uint32_t start, end;  /* the function's bytes: functions do not overlap */
        kl_affine_ctx *ax;
    } *items;
    unsigned count, cap;
};

kl_rules_memo *kl_rules_memo_new(void) { return calloc(1, sizeof(kl_rules_memo)); }

void kl_rules_memo_free(kl_rules_memo *m)
{
    if (!m) return;
    for (unsigned i = 0; i < m->count; i++) kl_affine_ctx_free(m->items[i].ax);
    free(m->items);
    free(m);
}

kl_status kl_rules_affine(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx **ax, kl_error *err)
{
    kl_rules_memo *m = ctx->memo;
    *ax = NULL;
    if (!m) return kl_affine_ctx_new(ctx->src, fn, ax, err);
    uint32_t s = ts_node_start_byte(fn), e = ts_node_end_byte(fn);
    for (unsigned i = 0; i < m->count; i++)
        if (m->items[i].start == s && m->items[i].end == e) {
            *ax = m->items[i].ax;
            return KL_OK;
        }
    if (m->count == m->cap) {
        unsigned cap = m->cap ? 2 * m->cap : 16;
        struct memo_entry *it = realloc(m->items, cap * sizeof *it);
        if (!it) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        m->items = it;
        m->cap = cap;
    }
    kl_status st = kl_affine_ctx_new(ctx->src, fn, ax, err);
    if (st != KL_OK) return st;
    m->items[m->count++] = (struct memo_entry){s, e, *ax};
    return KL_OK;
}

void kl_rules_affine_done(const kl_rule_ctx *ctx, kl_affine_ctx *ax)
{
    if (!ctx->memo) kl_affine_ctx_free(ax);
}

kl_status kl_rules_each_function(const kl_rule_ctx *ctx, const char *qualifier, kl_rules_fn_visit fn, void *user,
                                 kl_error *err)
{
    TSNode fns[256];
    unsigned n = kl_ast_functions(ctx->src, qualifier, fns, 256);
    if (n > 256) n = 256;
    kl_status st = KL_OK;
    for (unsigned i = 0; i < n && st == KL_OK; i++) {
        /* a function without a declared name (a conversion operator `operator T*()`, as in a
         * shared-memory helper struct) holds no site: skipped, not taken for an allocation failure */
        if (!kl_ast_function_has_name(fns[i])) continue;
        char *name = kl_ast_function_name(ctx->src, fns[i]);
        if (!name) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        kl_affine_ctx *ax = NULL;
        st = kl_rules_affine(ctx, fns[i], &ax, err);
        if (st == KL_ERR_INVALID) st = KL_OK; /* a declaration without a body: nothing to see */
        else if (st == KL_OK) st = fn(ctx, name, fns[i], ax, user);
        kl_rules_affine_done(ctx, ax);
        free(name);
    }
    return st;
}

kl_status kl_rules_each_gpu_function(const kl_rule_ctx *ctx, kl_rules_fn_visit fn, void *user, kl_error *err)
{
    kl_status st = kl_rules_each_function(ctx, "__global__", fn, user, err);
    return st == KL_OK ? kl_rules_each_function(ctx, "__device__", fn, user, err) : st;
}

kl_status kl_rules_run_site(const kl_rule_ctx *ctx, kl_rules_fn_visit fn, void *user, struct rt_run *r, bool device,
                            const char *fmt, ...)
{
    kl_status st = kl_rules_each_function(ctx, "__global__", fn, user, r->err);
    if (st == KL_OK && device && !r->done) st = kl_rules_each_function(ctx, "__device__", fn, user, r->err);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(r->err, st, "out of memory") : st;
    if (r->done) return r->st;
    va_list ap;
    va_start(ap, fmt);
    st = not_applicable_v(r->err, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- running one transform ---------------------------------------------------------------------- */

/* Give sites of one rule and direction unique ids: a repeated id gets "#2", "#3" … */
static kl_status unique_ids(kl_sites *s)
{
    for (unsigned i = 1; i < s->count; i++) {
        unsigned same = 1;
        for (unsigned k = 0; k < i; k++)
            if (s->items[k].dir == s->items[i].dir && !strcmp(s->items[k].id, s->items[i].id)) same++;
        if (same > 1) {
            kl_strbuf sb = KL_STRBUF_INIT;
            kl_strbuf_addf(&sb, "%s#%u", s->items[i].id, same);
            char *n = kl_strbuf_detach(&sb, NULL);
            if (!n) return KL_ERR_NOMEM;
            free(s->items[i].id);
            s->items[i].id = n;
        }
    }
    return KL_OK;
}

static kl_status find_sites(const kl_rule *rule, const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    kl_status st = rule->find(ctx, out, err);
    if (st == KL_OK) st = unique_ids(out);
    if (st != KL_OK) {
        kl_sites_release(out);
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    }
    return st;
}

/* Check every given parameter against the rule: a known name, one of the listed values. */
static kl_status check_params(const kl_rule *rule, const json_t *params, kl_error *err)
{
    if (!params) return KL_OK;
    if (!json_is_object(params)) return kl_error_set(err, KL_ERR_INVALID, "%s: parameters must be a JSON object", rule->name);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)params, key, v) {
        const kl_rule_param *p = rule_param(rule, key);
        if (!p) {
            kl_strbuf sb = KL_STRBUF_INIT;
            for (unsigned i = 0; i < rule->nparams; i++)
                if (rule->params[i].name) kl_strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", rule->params[i].name);
            kl_status st = kl_error_set(err, KL_ERR_INVALID, "%s has no parameter '%s' (it takes: %s)", rule->name, key,
                                        sb.len ? kl_strbuf_str(&sb) : "none");
            kl_strbuf_release(&sb);
            return st;
        }
        char val[64];
        if (json_is_integer(v))
            kl_snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_string(v))
            kl_snprintf(val, sizeof val, "%s", json_string_value(v));
        else
            return kl_error_set(err, KL_ERR_INVALID, "%s: parameter '%s' must be a number or a string", rule->name, key);
        if (!p->values) continue;
        bool ok = false;
        kl_strbuf sb = KL_STRBUF_INIT;
        for (unsigned i = 0; p->values[i]; i++) {
            if (!strcmp(p->values[i], val)) ok = true;
            kl_strbuf_addf(&sb, "%s%s", i ? ", " : "", p->values[i]);
        }
        kl_status st = ok ? KL_OK
                          : kl_error_set(err, KL_ERR_INVALID, "%s: parameter %s=%s is not one of %s", rule->name, key, val,
                                         kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* ---- forward presets (rules.h, docs/rules.md "Forward presets") ------------------------------- */

/* Append to err's message (truncated at its size). */
static void error_append(kl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void error_append(kl_error *err, const char *fmt, ...)
{
    size_t n = strnlen(err->message, sizeof err->message);
    if (n + 1 >= sizeof err->message) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message + n, sizeof err->message - n, fmt, ap);
    va_end(ap);
}

static const kl_rule_presets *const presets_all[] = {
    &kl_presets_tensor_core,
    &kl_presets_smem_tile,
    &kl_presets_register_tile,
    &kl_presets_row_parallel,
};

const kl_rule_presets *kl_rule_presets_of(const kl_rule *rule)
{
    for (unsigned i = 0; i < sizeof presets_all / sizeof presets_all[0]; i++)
        if (presets_all[i]->rule == rule) return presets_all[i];
    return NULL;
}

json_t *kl_rule_preset_params(const kl_rule *rule, const kl_rule_preset *p, kl_error *err)
{
    json_t *o = json_object();
    if (!o) {
        kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (const char *w = p->params ? p->params : ""; *w;) {
        while (*w == ' ') w++;
        size_t n = strcspn(w, " ");
        if (!n) break;
        const char *eq = memchr(w, '=', n);
        if (!eq || eq == w || eq == w + n - 1) {
            kl_error_set(err, KL_ERR_INVALID, "%s: preset %s: '%.*s' is not name=value", rule->name, p->name, (int)n, w);
            json_decref(o);
            return NULL;
        }
        char key[64], val[64];
        kl_snprintf(key, sizeof key, "%.*s", (int)(eq - w), w);
        kl_snprintf(val, sizeof val, "%.*s", (int)(w + n - eq - 1), eq + 1);
        if (json_object_set_new(o, key, json_string(val))) {
            kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            json_decref(o);
            return NULL;
        }
        w += n;
    }
    kl_error e = {0};
    if (check_params(rule, o, &e) != KL_OK) {
        kl_error_set(err, e.status, "preset %s: %s", p->name, e.message);
        json_decref(o);
        return NULL;
    }
    return o;
}

bool kl_rule_preset_fits(const kl_rule_preset *p, const json_t *features)
{
    if (!p->when) return true;
    const char *eq = strchr(p->when, '=');
    if (!eq) return false;
    char key[64];
    kl_snprintf(key, sizeof key, "%.*s", (int)(eq - p->when), p->when);
    const char *v = json_string_value(json_object_get(features, key));
    return v && !strcmp(v, eq + 1);
}

/* The parameter set a try amounts to: every declared parameter, given or its default, as one
 * sorted compact JSON text (new string; NULL when memory runs out). Two tries with the same one
 * are the same rewrite. */
static char *params_full(const kl_rule *rule, const json_t *given)
{
    json_t *o = json_object();
    if (!o) return NULL;
    for (unsigned i = 0; i < rule->nparams; i++) {
        const kl_rule_param *p = &rule->params[i];
        if (!p->name) continue;
        json_t *v = given ? json_object_get(given, p->name) : NULL;
        if (v) json_object_set(o, p->name, v);
        else if (p->deflt) json_object_set_new(o, p->name, json_string(p->deflt));
    }
    char *t = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return t;
}

/* The parameter sets an APPLY request without parameters tries at site s of rule r, into tries
 * (a JSON array; json null for "the defaults"): the presets that fit the site, then each value of
 * the first parameter (at most max_sweep of them when it is not 0), a set equal to an earlier
 * one (defaults filled in) dropped, at most KL_RULES_TRIES_PER_SITE in all. names (a parallel
 * array) holds each try's preset name, or null. KL_ERR_NOMEM, or KL_ERR_INVALID for a malformed
 * preset table (a defect the tests catch). */
static kl_status site_tries(const kl_rule *r, const kl_site *s, unsigned max_sweep, json_t *tries, json_t *names,
                            kl_error *err)
{
    json_t *seen = json_object();
    if (!seen) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st = KL_OK;
    const kl_rule_presets *ps = kl_rule_presets_of(r);
    /* 0 .. count-1: the presets; then the sweep */
    unsigned npre = ps ? ps->count : 0;
    bool sweep = r->nparams && r->params[0].name && r->params[0].values;
    for (unsigned i = 0; st == KL_OK && json_array_size(tries) < KL_RULES_TRIES_PER_SITE; i++) {
        json_t *p = NULL; /* NULL: the defaults */
        const char *name = NULL;
        if (i < npre) {
            if (!kl_rule_preset_fits(&ps->items[i], s->features)) continue;
            p = kl_rule_preset_params(r, &ps->items[i], err);
            if (!p) {
                st = err->status;
                break;
            }
            name = ps->items[i].name;
        } else if (sweep) {
            unsigned pv = i - npre;
            if (!r->params[0].values[pv] || (max_sweep && pv >= max_sweep)) break;
            p = json_pack("{s:s}", r->params[0].name, r->params[0].values[pv]);
            if (!p) {
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                break;
            }
        } else if (i > npre) {
            break; /* no sweep: the defaults once, after the presets */
        }
        char *key = params_full(r, p);
        if (!key) {
            json_decref(p);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            break;
        }
        if (json_object_get(seen, key)) {
            json_decref(p);
        } else if (json_object_set_new(seen, key, json_true()) || json_array_append_new(tries, p ? p : json_null()) ||
                   json_array_append_new(names, name ? json_string(name) : json_null())) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        free(key);
    }
    json_decref(seen);
    return st;
}

/* The transforms the catalog removes but does not write (their apply is NULL), and why. */
static const struct {
    const kl_rule *rule;
    const char *why;
} no_writers[] = {
    {&kl_rule_interior_path,
     "a path without tests needs the tests that hold for every interior block, a range analysis the "
     "catalog does not have"},
    {&kl_rule_const_mem,
     "a __constant__ array needs a compile-time size covering every index the kernels read, a range "
     "analysis the catalog does not have"},
    {&kl_rule_wgmma,
     "wgmma needs its tiles in a descriptor's canonical layout, and the mma.sync form's tiles are laid out for ldmatrix"},
    {&kl_rule_two_pass,
     "a second pass needs a place to write one slot per block and a second launch, which the catalog does not add"},
    {&kl_rule_accumulators,
     "several partial sums need a loop to split by a count the catalog does not choose"},
    {&kl_rule_coarsen,
     "several elements per thread need a grid divided by a count the catalog does not choose"},
};

const char *kl_rule_no_writer(const kl_rule *rule)
{
    for (size_t i = 0; i < sizeof no_writers / sizeof no_writers[0]; i++)
        if (no_writers[i].rule == rule) return no_writers[i].why;
    return rule && !rule->apply ? "the catalog has no writer for it" : NULL;
}

/* The edits of a site (on ctx's text): KL_ERR_NOT_APPLICABLE when there are none. */
static kl_status site_edits(const kl_rule *rule, const kl_rule_ctx *ctx, const kl_site *site, const json_t *params,
                            kl_edits *ed, kl_error *err)
{
    memset(ed, 0, sizeof *ed);
    kl_status st = site->dir == KL_SITE_PRESENT ? rule->remove(ctx, site, ed, err)
                   : rule->apply                 ? rule->apply(ctx, site, params, ed, err)
                                                 : kl_rule_not_applicable(err, "%s at %s: there is no writer (%s)", rule->name,
                                                                          site->id, kl_rule_no_writer(rule));
    if (st == KL_OK && ed->count == 0) st = kl_rule_not_applicable(err, "%s at %s changes nothing", rule->name, site->id);
    if (st != KL_OK) kl_edits_release(ed);
    return st;
}

/* Turn a site into a new, checked source. */
static kl_status run_site(const kl_rule *rule, const kl_rule_ctx *ctx, const kl_site *site, const json_t *params,
                          char **out, kl_error *err)
{
    *out = NULL;
    kl_edits ed = {0};
    kl_status st = site_edits(rule, ctx, site, params, &ed, err);
    if (st != KL_OK) return st;
    KL_TRY(kl_edits_apply(&ed, ctx->text, ctx->len, out, err));
    st = kl_rules_check(ctx->src, *out, strlen(*out), err);
    if (st != KL_OK) {
        kl_error_prefix(err, "%s at %s", rule->name, site->id);
        free(*out);
        *out = NULL;
    }
cleanup:
    kl_edits_release(&ed);
    return st;
}

/* ---- the file as written and its canonical form ------------------------------------------------- */

/* What the transforms read: the text as written, and its canonical form (syntax/canon.h) where that
 * differs. A site found on the text as written is rewritten there; one found only on the canonical
 * form, or refused on the text as written and not on the canonical form, is rewritten on the
 * canonical form and its edits mapped back onto the text as written where they can be. */
typedef struct view {
    kl_source *src;
    kl_canon *canon;    /* NULL when the canonical form is the text itself */
    kl_rule_ctx ctx;    /* the text as written */
    kl_rule_ctx cctx;   /* the canonical text (when canon) */
} view;

static kl_status parse_source(const char *name, const char *source, size_t len, kl_source **src, kl_error *err);

static void view_close(view *v)
{
    kl_rules_memo_free(v->ctx.memo);
    kl_rules_memo_free(v->cctx.memo);
    kl_canon_free(v->canon);
    kl_source_free(v->src);
    memset(v, 0, sizeof *v);
}

static kl_status view_open(const char *name, const char *source, size_t len, const kl_task *task, view *v,
                           kl_error *err)
{
    memset(v, 0, sizeof *v);
    kl_status st = parse_source(name, source, len, &v->src, err);
    if (st != KL_OK) return st;
    v->ctx = (kl_rule_ctx){v->src, kl_source_text(v->src, NULL), len, task, kl_rules_memo_new()};
    if (!v->ctx.memo) {
        view_close(v);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    st = kl_canon_build(v->src, &v->canon, err);
    if (st != KL_OK) {
        view_close(v);
        return st;
    }
    if (v->canon) {
        const kl_source *cs = kl_canon_source(v->canon);
        size_t clen = 0;
        const char *ct = kl_source_text(cs, &clen);
        if (kl_ast_depth(kl_source_root(cs), KL_AST_MAX_DEPTH, NULL) > KL_AST_MAX_DEPTH) {
            kl_canon_free(v->canon);
            v->canon = NULL;
        } else {
            v->cctx = (kl_rule_ctx){cs, ct, clen, task, kl_rules_memo_new()};
            if (!v->cctx.memo) {
                view_close(v);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
        }
    }
    return KL_OK;
}

/* The sites of one transform on both texts. */
typedef struct site_pair {
    kl_sites o, c;
} site_pair;

static void pair_release(site_pair *sp)
{
    kl_sites_release(&sp->o);
    kl_sites_release(&sp->c);
}

static kl_status find_pair(const kl_rule *r, const view *v, site_pair *sp, kl_error *err)
{
    memset(sp, 0, sizeof *sp);
    kl_status st = find_sites(r, &v->ctx, &sp->o, err);
    if (st == KL_OK && v->canon) {
        st = find_sites(r, &v->cctx, &sp->c, err);
        if (st != KL_OK) kl_sites_release(&sp->o);
    }
    return st;
}

/* Turn a site of the canonical form into a new, checked source of the file: its edits mapped onto the
 * text as written, or where they cannot be, the canonical text rewritten. *how says which (new string). */
static kl_status run_canonical(const kl_rule *rule, const view *v, const kl_site *site, const json_t *params,
                               char **out, char **how, kl_error *err)
{
    *out = NULL;
    *how = NULL;
    kl_edits ed = {0}, mapped = {0};
    kl_canon_edit *ce = NULL, *mo = NULL;
    kl_status st = site_edits(rule, &v->cctx, site, params, &ed, err);
    if (st != KL_OK) return st;
    ce = calloc(ed.count, sizeof *ce);
    mo = calloc(ed.count, sizeof *mo);
    if (!ce || !mo) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned i = 0; i < ed.count; i++) ce[i] = (kl_canon_edit){ed.items[i].start, ed.items[i].end, ed.items[i].text};
    char why[200];
    kl_strbuf note = KL_STRBUF_INIT;
    if (kl_canon_map_edits(v->canon, ce, ed.count, mo, why, sizeof why)) {
        for (unsigned i = 0; i < ed.count && st == KL_OK; i++) st = kl_edits_add(&mapped, mo[i].start, mo[i].end, mo[i].text);
        if (st == KL_OK) st = kl_edits_apply(&mapped, v->ctx.text, v->ctx.len, out, err);
        kl_strbuf_addf(&note, "found on the canonical form (%s), the edits land on the text as written",
                       kl_canon_summary(v->canon));
    } else {
        st = kl_edits_apply(&ed, v->cctx.text, v->cctx.len, out, err);
        kl_strbuf_addf(&note, "written on the canonical form (%s): %s, so the whole file is given in that form",
                       kl_canon_summary(v->canon), why);
    }
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    if (st == KL_OK) st = kl_rules_check(v->src, *out, strlen(*out), err);
    if (st == KL_OK) {
        *how = kl_strbuf_detach(&note, NULL);
        if (!*how) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    } else if (st != KL_ERR_NOMEM) {
        kl_error_prefix(err, "%s at %s (on the canonical form)", rule->name, site->id);
    }
    kl_strbuf_release(&note);
    if (st != KL_OK) {
        free(*out);
        *out = NULL;
    }
cleanup:
    free(ce);
    free(mo);
    kl_edits_release(&mapped);
    kl_edits_release(&ed);
    return st;
}

/* Run a site: one of the text as written there, and where that fails and the canonical form has the
 * same site, there (the first failure's reason is kept); a canonical-only one on the canonical form.
 * *how (new string) is NULL for a rewrite of the text as written. */
static kl_status run_any(const kl_rule *r, const view *v, const site_pair *sp, const kl_site *s, bool canonical_only,
                         const json_t *params, char **out, char **how, const kl_site **used, kl_error *err)
{
    *how = NULL;
    if (used) *used = s;
    if (canonical_only) return run_canonical(r, v, s, params, out, how, err);
    kl_status st = run_site(r, &v->ctx, s, params, out, err);
    if (st == KL_OK || st == KL_ERR_NOMEM || !v->canon) return st;
    const kl_site *t = kl_sites_find(&sp->c, s->id, s->dir);
    if (!t) return st;
    kl_error e2 = {0};
    kl_status st2 = run_canonical(r, v, t, params, out, how, &e2);
    if (st2 == KL_ERR_NOMEM) return kl_error_set(err, st2, "out of memory");
    if (st2 == KL_OK && used) *used = t;
    if (st2 == KL_ERR_NOT_APPLICABLE && st == KL_ERR_NOT_APPLICABLE && e2.message[0] &&
        strstr(kl_canon_summary(v->canon), "bound ")) {
        /* both refuse: where the canonical form bound the kernel's template parameters, it sees past a
         * `blockSize` the text as written cannot evaluate, and its reason names the real obstacle */
        kl_error_set(err, st2, "%s", e2.message);
        return st2;
    }
    return st2 == KL_OK ? KL_OK : st;
}

static char *params_text(const kl_site *site, const json_t *given)
{
    const json_t *p = given ? given : site->params;
    if (!p) return kl_strdup("{}");
    return json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the public entry points ----------------------------------------------------------------- */

kl_status kl_rules_catalog_json(char **json, kl_error *err)
{
    *json = NULL;
    json_t *arr = json_array();
    for (unsigned i = 0; arr && i < kl_rules_count; i++) {
        const kl_rule *r = kl_rules[i];
        json_t *ps = json_array();
        for (unsigned k = 0; ps && k < r->nparams; k++) {
            if (!r->params[k].name) continue;
            json_t *vals = json_array();
            for (unsigned v = 0; vals && r->params[k].values && r->params[k].values[v]; v++)
                json_array_append_new(vals, json_string(r->params[k].values[v]));
            json_array_append_new(ps, json_pack("{s:s, s:o, s:s?}", "name", r->params[k].name, "values", vals,
                                                "default", r->params[k].deflt));
        }
        json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", r->name, "intent", r->intent, "params", ps));
    }
    *json = arr ? json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(arr);
    return *json ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

/* Parse source for the catalog. The transforms' analyses recurse over the tree, so a file
 * nested deeper than KL_AST_MAX_DEPTH (an expression of thousands of terms, thousands of
 * nested blocks) is refused here, with where, rather than analysed. */
static kl_status parse_source(const char *name, const char *source, size_t len, kl_source **src, kl_error *err)
{
    kl_status st = kl_source_parse_text(name ? name : "<source>", source, len, src, err);
    if (st != KL_OK) return st;
    TSNode deep = {0};
    if (kl_ast_depth(kl_source_root(*src), KL_AST_MAX_DEPTH, &deep) > KL_AST_MAX_DEPTH) {
        st = kl_error_set(err, KL_ERR_TOO_LARGE,
                          "%s:%u: the code nests more than %u levels deep here (an expression or statement of that "
                          "many nested parts): the rules catalog does not analyse it",
                          kl_source_name(*src), ts_node_start_point(deep).row + 1, (unsigned)KL_AST_MAX_DEPTH);
        kl_source_free(*src);
        *src = NULL;
    }
    return st;
}

/* The reason of a refusal: the error's message without "not applicable: ". */
static const char *refusal_reason(const kl_error *e)
{
    const char *m = e->message[0] ? e->message : kl_strerror(e->status);
    return kl_str_starts(m, "not applicable: ") ? m + strlen("not applicable: ") : m;
}

/* At most this many parameter sets are tried before an applicable site is called refused. */
#define LIST_MAX_TRIES 16

/* One try of verify_site with params (taken over): KL_OK with *ok set and *with = params when
 * the rewrite succeeds, params released otherwise. Fails only when memory runs out. */
static kl_status try_params(const kl_rule *r, const view *v, const site_pair *sp, const kl_site *s,
                            bool canonical_only, json_t *params, bool *ok, json_t **with, char **how)
{
    kl_error e = {0};
    char *text = NULL;
    free(*how);
    *how = NULL;
    kl_status st = run_any(r, v, sp, s, canonical_only, params, &text, how, NULL, &e);
    free(text);
    if (st == KL_OK) {
        *ok = true;
        *with = params;
        return KL_OK;
    }
    json_decref(params);
    return st == KL_ERR_NOMEM ? st : KL_OK;
}

/* Does the site's rewrite succeed? A present site is removed; an applicable one applied with
 * the defaults, then with each value of each parameter in turn (one changed at a time), then with
 * each preset that fits the site, until one succeeds: *with is then NULL (the defaults) or those
 * parameters (a new reference), and *how (new string) says when it took the canonical form. False
 * with the first attempt's error in *why. Fails only when memory runs out. */
static kl_status verify_site(const kl_rule *r, const view *v, const site_pair *sp, const kl_site *s,
                             bool canonical_only, bool *ok, json_t **with, char **how, kl_error *why)
{
    *ok = false;
    *with = NULL;
    *how = NULL;
    char *text = NULL;
    kl_status st = run_any(r, v, sp, s, canonical_only, NULL, &text, how, NULL, why);
    free(text);
    if (st == KL_OK) {
        *ok = true;
        return KL_OK;
    }
    if (st == KL_ERR_NOMEM) return st;
    if (s->dir == KL_SITE_PRESENT) return KL_OK;
    unsigned tries = 1;
    for (unsigned i = 0; i < r->nparams && tries < LIST_MAX_TRIES && !*ok; i++) {
        const kl_rule_param *p = &r->params[i];
        if (!p->name || !p->values) continue;
        for (unsigned k = 0; p->values[k] && tries < LIST_MAX_TRIES && !*ok; k++) {
            if (p->deflt && !strcmp(p->deflt, p->values[k])) continue;
            json_t *params = json_pack("{s:s}", p->name, p->values[k]);
            if (!params) return KL_ERR_NOMEM;
            tries++;
            if (try_params(r, v, sp, s, canonical_only, params, ok, with, how) != KL_OK) return KL_ERR_NOMEM;
        }
    }
    /* then the joint presets that fit the site (a point no single change reaches) */
    const kl_rule_presets *ps = kl_rule_presets_of(r);
    for (unsigned i = 0; ps && i < ps->count && tries < LIST_MAX_TRIES && !*ok; i++) {
        if (!kl_rule_preset_fits(&ps->items[i], s->features)) continue;
        kl_error e = {0};
        json_t *params = kl_rule_preset_params(r, &ps->items[i], &e);
        if (!params) {
            if (e.status == KL_ERR_NOMEM) return KL_ERR_NOMEM;
            continue;
        }
        tries++;
        if (try_params(r, v, sp, s, canonical_only, params, ok, with, how) != KL_OK) return KL_ERR_NOMEM;
    }
    return KL_OK;
}

/* One site of the listing as JSON (a new object), NULL when memory runs out. */
static json_t *list_entry(const kl_rule *r, const view *v, const kl_site *s, bool canonical_only, bool ok,
                          json_t *with, const char *how, const kl_error *why)
{
    const char *dir = !ok ? "refused" : s->dir == KL_SITE_PRESENT ? "present" : "applicable";
    json_t *pv = s->params ? json_incref(s->params) : json_object();
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:O, s:o, s:s}", "transform", r->name, "site", s->id,
                          "direction", dir, "kernel", s->kernel, "line", (json_int_t)s->span.line, "column",
                          (json_int_t)s->span.column, "features", s->features, "params", pv, "note",
                          ok ? s->note : refusal_reason(why));
    if (!o) return NULL;
    if (!ok) {
        json_object_set_new(o, "refused", json_string(s->dir == KL_SITE_PRESENT ? "remove" : "apply"));
        json_object_set_new(o, "reason", json_string(refusal_reason(why)));
    }
    if (with) json_object_set(o, "applies_with", with);
    /* a site the canonical form shows (or rewrites), and what that form changed */
    if (ok && how) json_object_set_new(o, "canonical", json_string(how));
    else if (canonical_only) json_object_set_new(o, "canonical", json_string(kl_canon_summary(v->canon)));
    return o;
}

kl_status kl_rules_list(const char *name, const char *source, size_t len, const kl_task *task, const char *transform,
                        char **json, kl_error *err)
{
    *json = NULL;
    view v = {0};
    json_t *arr = NULL;
    kl_status st = KL_OK;
    if (transform && !kl_rule_find(transform)) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "no transform named '%s' (see docs/rules.md)", transform);
        goto cleanup;
    }
    KL_TRY(view_open(name, source, len, task, &v, err));
    arr = json_array();
    if (!arr) goto oom;
    for (unsigned i = 0; i < kl_rules_count; i++) {
        const kl_rule *r = kl_rules[i];
        if (transform && strcmp(transform, r->name)) continue;
        site_pair sp;
        KL_TRY(find_pair(r, &v, &sp, err));
        for (int which = 0; which < 2; which++) {
            const kl_sites *list = which ? &sp.c : &sp.o;
            for (unsigned k = 0; k < list->count; k++) {
                const kl_site *s = &list->items[k];
                /* the canonical form's own sites: those the text as written does not show */
                if (which && kl_sites_find(&sp.o, s->id, s->dir)) continue;
                bool ok = false;
                json_t *with = NULL;
                char *how = NULL;
                kl_error why = {0};
                if (verify_site(r, &v, &sp, s, which == 1, &ok, &with, &how, &why) != KL_OK) {
                    pair_release(&sp);
                    goto oom;
                }
                const kl_site *shown = s;
                if (ok && how && !which) {
                    const kl_site *t = kl_sites_find(&sp.c, s->id, s->dir);
                    if (t) shown = t;
                }
                json_t *o = list_entry(r, &v, shown, which == 1, ok, with, how, &why);
                json_decref(with);
                free(how);
                if (!o || json_array_append_new(arr, o)) {
                    pair_release(&sp);
                    goto oom;
                }
            }
        }
        pair_release(&sp);
    }
    *json = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!*json) goto oom;
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    json_decref(arr);
    view_close(&v);
    return st;
}

kl_status kl_rules_canonical(const char *name, const char *source, size_t len, char **out, char **summary,
                             kl_error *err)
{
    *out = NULL;
    if (summary) *summary = NULL;
    view v = {0};
    kl_status st = view_open(name, source, len, NULL, &v, err);
    if (st != KL_OK) return st;
    *out = kl_strdup(v.canon ? v.cctx.text : v.ctx.text);
    if (summary) *summary = kl_strdup(v.canon ? kl_canon_summary(v.canon) : "");
    if (!*out || (summary && !*summary)) {
        free(*out);
        *out = NULL;
        if (summary) {
            free(*summary);
            *summary = NULL;
        }
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    view_close(&v);
    return st;
}

kl_status kl_rules_rewrite(const char *name, const char *source, size_t len, const kl_task *task, const char *transform,
                           const char *site_id, bool remove, const char *params_json, char **out, char **note,
                           kl_error *err)
{
    *out = NULL;
    if (note) *note = NULL;
    const kl_rule *rule = kl_rule_find(transform);
    if (!rule) return kl_error_set(err, KL_ERR_NOT_FOUND, "no transform named '%s' (see docs/rules.md)", transform);
    view v = {0};
    json_t *params = NULL;
    site_pair sp = {0};
    char *how = NULL;
    kl_status st = KL_OK;
    if (params_json && *params_json) {
        json_error_t je;
        params = json_loads(params_json, 0, &je);
        if (!params) {
            st = kl_error_set(err, KL_ERR_INVALID, "parameters: %s (column %d)", je.text, je.column);
            goto cleanup;
        }
    }
    if (remove && params && json_object_size(params)) {
        st = kl_error_set(err, KL_ERR_INVALID, "%s: removing takes no parameters", rule->name);
        goto cleanup;
    }
    KL_TRY(check_params(rule, params, err));
    KL_TRY(view_open(name, source, len, task, &v, err));
    KL_TRY(find_pair(rule, &v, &sp, err));
    kl_site_dir dir = remove ? KL_SITE_PRESENT : KL_SITE_APPLICABLE;
    const kl_site *site = kl_sites_find(&sp.o, site_id, dir);
    bool canonical_only = false;
    if (!site && (site = kl_sites_find(&sp.c, site_id, dir))) canonical_only = true;
    if (!site) {
        kl_strbuf sb = KL_STRBUF_INIT;
        for (int which = 0; which < 2; which++) {
            const kl_sites *list = which ? &sp.c : &sp.o;
            for (unsigned i = 0; i < list->count; i++)
                if (list->items[i].dir == dir && (!which || !kl_sites_find(&sp.o, list->items[i].id, dir)))
                    kl_strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", list->items[i].id);
        }
        kl_site_dir other_dir = remove ? KL_SITE_APPLICABLE : KL_SITE_PRESENT;
        const kl_site *other = kl_sites_find(&sp.o, site_id, other_dir);
        if (!other) other = kl_sites_find(&sp.c, site_id, other_dir);
        if (other)
            st = kl_error_set(err, KL_ERR_NOT_APPLICABLE, "not applicable: %s at %s is a site to %s, not to %s",
                              rule->name, site_id, remove ? "apply" : "remove", remove ? "remove" : "apply");
        else
            st = kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no site '%s' to %s in %s (sites: %s)", rule->name, site_id,
                              remove ? "remove" : "apply", name ? name : "the source",
                              sb.len ? kl_strbuf_str(&sb) : "none");
        kl_strbuf_release(&sb);
        goto cleanup;
    }
    const kl_site *used = site;
    KL_TRY(run_any(rule, &v, &sp, site, canonical_only, params, out, &how, &used, err));
    if (note) {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s %s at %s: %s", remove ? "removed" : "applied", rule->name, site->id, used->note);
        if (how) kl_strbuf_addf(&sb, " [%s]", how);
        *note = kl_strbuf_detach(&sb, NULL);
    }
cleanup:
    free(how);
    pair_release(&sp);
    json_decref(params);
    view_close(&v);
    return st;
}

/* ---- the backend ------------------------------------------------------------------------------ */

typedef struct rules_state {
    unsigned max_per_site; /* APPLY without params: values of the first parameter tried per site (after the presets) */
} rules_state;

static kl_status rules_open(const char *config_json, void **state, kl_error *err)
{
    rules_state *s = calloc(1, sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->max_per_site = 0;
    if (config_json && *config_json) {
        json_error_t je;
        json_t *c = json_loads(config_json, 0, &je);
        if (!c || !json_is_object(c)) {
            json_decref(c);
            free(s);
            return kl_error_set(err, KL_ERR_INVALID, "rules config: expected a JSON object (%s)", c ? "" : je.text);
        }
        json_t *m = json_object_get(c, "max_per_site");
        if (json_is_integer(m) && json_integer_value(m) > 0) s->max_per_site = (unsigned)json_integer_value(m);
        json_decref(c);
    }
    *state = s;
    return KL_OK;
}

static void rules_close(void *state) { free(state); }

/* Was (transform, site, params) already tried and rejected? */
static bool was_rejected(const json_t *rejected, const char *transform, const char *site, const char *params)
{
    size_t i;
    json_t *r;
    if (!json_is_array(rejected)) return false;
    json_array_foreach((json_t *)rejected, i, r) {
        const char *t = json_string_value(json_object_get(r, "transform"));
        const char *s = json_string_value(json_object_get(r, "site"));
        if (!t || !s || strcmp(t, transform) || strcmp(s, site)) continue;
        json_t *p = json_object_get(r, "params");
        if (!p) return true;
        char *pt = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
        bool same = pt && !strcmp(pt, params);
        free(pt);
        if (same) return true;
    }
    return false;
}

static kl_status add_candidate(kl_candidates *out, const char *text, const kl_rule *rule, const kl_site *site,
                               const char *params, bool removing, const char *how)
{
    kl_strbuf note = KL_STRBUF_INIT;
    kl_strbuf_addf(&note, "%s %s at %s: %s", removing ? "removed" : "applied", rule->name, site->id, site->note);
    if (how) kl_strbuf_addf(&note, " [%s]", how);
    kl_status st = note.failed ? KL_ERR_NOMEM
                               : kl_candidates_add(out, text, rule->name, site->id, params, kl_strbuf_str(&note));
    kl_strbuf_release(&note);
    if (st == KL_OK && site->features) out->items[out->count - 1].features_json = json_dumps(site->features, JSON_COMPACT | JSON_SORT_KEYS);
    return st;
}

static kl_status reject(kl_candidates *out, const kl_rule *rule, const kl_site *site, const kl_error *e)
{
    return kl_candidates_reject(out, rule->name, site->id, e->message[0] ? e->message : kl_strerror(e->status));
}

static bool full(const kl_rewrite_request *req, const kl_candidates *out)
{
    return req->max_candidates && out->count >= req->max_candidates;
}

static kl_status rules_propose(void *state, const kl_rewrite_request *req, kl_candidates *out, kl_error *err)
{
    rules_state *rs = state;
    view v = {0};
    json_t *card = NULL, *rejected = NULL, *card_params = NULL, *by_transform = NULL;
    const char *want = req->kind == KL_REQ_APPLY ? req->transform : NULL;
    unsigned sites_seen = 0; /* sites in the request's direction */
    kl_status st = KL_OK;
    if (!req->source) return kl_error_set(err, KL_ERR_INVALID, "rules: the request has no source");
    const char *name = req->source_name ? req->source_name : "<source>";
    if (req->kind == KL_REQ_APPLY && req->skill_json) {
        json_error_t je;
        card = json_loads(req->skill_json, 0, &je);
        if (!card) {
            st = kl_error_set(err, KL_ERR_PARSE, "skill card, line %d: %s", je.line, je.text);
            goto cleanup;
        }
        const char *t = json_string_value(json_object_get(card, "transform"));
        if (!t) {
            st = kl_error_set(err, KL_ERR_INVALID, "skill card: no \"transform\" string (docs/skill-card.md)");
            goto cleanup;
        }
        want = t;
        card_params = json_object_get(card, "params");
        if (card_params && !json_is_object(card_params)) card_params = NULL;
    }
    if (want && !kl_rule_find(want)) {
        /* not ours: the card names a transform the catalog does not have */
        st = kl_candidates_reject(out, want, "", "not applicable: the rules catalog has no transform of this name");
        goto cleanup;
    }
    if (want && req->kind == KL_REQ_APPLY && !kl_rule_find(want)->apply) {
        /* a transform the catalog takes apart but does not write (docs/rules.md) */
        char why[400];
        kl_snprintf(why, sizeof why,
                    "not applicable: the rules catalog removes this transform but does not apply it (%s)",
                    kl_rule_no_writer(kl_rule_find(want)));
        st = kl_candidates_reject(out, want, "", why);
        goto cleanup;
    }
    if (req->rejected_json) rejected = json_loads(req->rejected_json, 0, NULL);
    size_t len = strlen(req->source);
    st = view_open(name, req->source, len, req->task, &v, err);
    if (st == KL_ERR_TOO_LARGE) {
        /* a file the catalog does not analyse: no candidates, and the reason as a rejection */
        st = kl_candidates_reject(out, want ? want : "", "", err->message);
        goto cleanup;
    }
    if (st != KL_OK) goto cleanup;
    for (unsigned i = 0; i < kl_rules_count && !full(req, out); i++) {
        const kl_rule *r = kl_rules[i];
        if (want && strcmp(want, r->name)) continue;
        site_pair sp;
        KL_TRY(find_pair(r, &v, &sp, err));
        for (unsigned k = 0; k < sp.o.count + sp.c.count && !full(req, out) && st == KL_OK; k++) {
            bool canonical_only = k >= sp.o.count;
            const kl_site *s = canonical_only ? &sp.c.items[k - sp.o.count] : &sp.o.items[k];
            if (canonical_only && kl_sites_find(&sp.o, s->id, s->dir)) continue;
            if (req->kind == KL_REQ_SIMPLIFY ? s->dir != KL_SITE_PRESENT : s->dir != KL_SITE_APPLICABLE) continue;
            sites_seen++;
            if (req->kind == KL_REQ_SIMPLIFY) {
                out->present++;
                if (!by_transform) by_transform = json_object();
                json_int_t had = json_integer_value(json_object_get(by_transform, r->name));
                json_object_set_new(by_transform, r->name, json_integer(had + 1));
            }
            if (req->kind == KL_REQ_SIMPLIFY && req->count_only) continue;
            /* the parameter sets to try at this site */
            json_t *tries = json_array(), *names = json_array(), *texts = json_object();
            if (!tries || !names || !texts) {
                json_decref(tries), json_decref(names), json_decref(texts);
                st = KL_ERR_NOMEM;
                break;
            }
            if (req->kind == KL_REQ_SIMPLIFY) {
                json_array_append_new(tries, json_null());
            } else if (card_params) {
                json_array_append(tries, card_params);
            } else {
                kl_status tst = site_tries(r, s, rs->max_per_site, tries, names, err);
                if (tst != KL_OK) {
                    json_decref(tries), json_decref(names), json_decref(texts);
                    pair_release(&sp);
                    st = tst;
                    goto cleanup;
                }
            }
            size_t ti;
            json_t *p;
            json_array_foreach(tries, ti, p) {
                if (full(req, out)) break;
                const json_t *given = json_is_null(p) ? NULL : p;
                const char *preset = json_string_value(json_array_get(names, ti));
                char *ptext = params_text(s, given);
                if (!ptext) {
                    st = KL_ERR_NOMEM;
                    break;
                }
                if (was_rejected(rejected, r->name, s->id, ptext)) {
                    free(ptext);
                    continue;
                }
                kl_error e = {0};
                char *text = NULL;
                kl_status rst = check_params(r, given, &e);
                char *how = NULL;
                const kl_site *used = s;
                if (rst == KL_OK) rst = run_any(r, &v, &sp, s, canonical_only, given, &text, &how, &used, &e);
                if (rst == KL_OK) {
                    /* two parameter sets that write the same file (a parameter the site's form
                     * ignores) are one proposal: the first */
                    char hex[KL_HASH_HEX];
                    kl_hash_hex(text, strlen(text), hex);
                    if (json_object_get(texts, hex))
                        st = KL_OK;
                    else if (json_object_set_new(texts, hex, json_true()))
                        st = KL_ERR_NOMEM;
                    else
                        st = add_candidate(out, text, r, used, ptext, req->kind == KL_REQ_SIMPLIFY, how);
                } else if (rst == KL_ERR_NOMEM) {
                    st = KL_ERR_NOMEM;
                } else {
                    if (preset) error_append(&e, " (preset %s: %s)", preset, ptext);
                    st = reject(out, r, s, &e);
                }
                free(text);
                free(how);
                free(ptext);
                if (st != KL_OK) break;
            }
            json_decref(tries);
            json_decref(names);
            json_decref(texts);
        }
        pair_release(&sp);
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
        if (st != KL_OK) goto cleanup;
    }
    if (st == KL_OK && want && req->kind == KL_REQ_APPLY && !sites_seen)
        st = kl_candidates_reject(out, want, "", "not applicable: no site in the kernel where the rules apply it");
cleanup:
    if (st == KL_OK && by_transform) {
        out->present_by_transform = json_dumps(by_transform, JSON_COMPACT | JSON_SORT_KEYS);
        if (!out->present_by_transform) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    json_decref(by_transform);
    json_decref(card);
    json_decref(rejected);
    view_close(&v);
    return st;
}

const kl_rewriter_ops kl_rewriter_rules_ops = {"rules", rules_open, rules_close, rules_propose};
