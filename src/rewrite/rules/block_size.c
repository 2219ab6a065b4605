/* block-size: the threads per block at a launch site, and the compile-time constant tied to it. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const threads_values[] = {"64", "128", "256", "512", "1024", NULL};
static const kl_rule_param bs_params[] = {{"threads", threads_values, "256"}};

/* The canonical "simplest" block size the backward walk returns to. */
#define BS_NAIVE 256

static bool is_type(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }
static unsigned line_of(TSNode n) { return ts_node_start_point(n).row + 1; }

/* One block size: a named constant shared by the launches that name it, or one launch's literal. */
typedef struct bs_group {
    char id[256];
    char kernel[128];
    char name[128];        /* the constant's name; "" for a literal */
    int64_t value;
    TSNode def;            /* the node holding the definition (declaration, preproc_def, literal) */
    uint32_t val_start, val_end; /* the value's text, replaced on a change */
    unsigned launches[32]; /* indices into the launch list */
    unsigned nlaunch;
    char why[300];         /* not empty: why it cannot change */
} bs_group;

typedef struct bs_state {
    const kl_rule_ctx *ctx;
    kl_launch_sites ls;
    bs_group *groups;
    unsigned count;
} bs_state;

static void trim_range(const char *t, uint32_t *a, uint32_t *b)
{
    while (*a < *b && (t[*a] == ' ' || t[*a] == '\t')) (*a)++;
    while (*b > *a && (t[*b - 1] == ' ' || t[*b - 1] == '\t' || t[*b - 1] == '\r' || t[*b - 1] == '\n')) (*b)--;
}

/* A declaration (top level or in fn) `[static] [constexpr|const] int NAME = v;` or `dim3 NAME(…)`:
 * the declaration and the value node. */
static bool find_decl(const kl_source *src, TSNode scope, const char *name, TSNode *decl, TSNode *value, TSNode *dnode)
{
    uint32_t c = ts_node_named_child_count(scope);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(scope, i);
        if (!is_type(d, "declaration")) continue;
        uint32_t dc = ts_node_named_child_count(d);
        for (uint32_t k = 0; k < dc; k++) {
            TSNode x = ts_node_named_child(d, k);
            TSNode nm = {0}, v = {0};
            if (is_type(x, "init_declarator")) {
                nm = ts_node_child_by_field_name(x, "declarator", 10);
                v = ts_node_child_by_field_name(x, "value", 5);
            } else if (is_type(x, "function_declarator")) { /* dim3 block(T) read as a prototype */
                nm = ts_node_child_by_field_name(x, "declarator", 10);
                v = ts_node_child_by_field_name(x, "parameters", 10);
            }
            if (is_type(nm, "identifier") && kl_node_text_is(src, nm, name)) {
                *decl = d;
                *value = v;
                *dnode = x;
                return true;
            }
        }
    }
    return false;
}

static bool find_define(const kl_source *src, const char *name, TSNode *def, TSNode *value)
{
    TSNode root = kl_source_root(src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!is_type(d, "preproc_def")) continue;
        if (kl_node_text_is(src, ts_node_child_by_field_name(d, "name", 4), name)) {
            *def = d;
            *value = ts_node_child_by_field_name(d, "value", 5);
            return true;
        }
    }
    return false;
}

/* The threads-per-block expression of a launch: through `dim3 b(x)`, `dim3(x)`; 2-D blocks say why. */
static bool block_expr(const kl_source *src, const kl_launch_site *l, TSNode *expr, char *why, size_t size)
{
    TSNode b = l->block;
    if (ts_node_is_null(b)) {
        kl_snprintf(why, size, "the launch at line %u has no block size", line_of(l->call));
        return false;
    }
    while (is_type(b, "parenthesized_expression")) b = ts_node_named_child(b, 0);
    TSNode args = {0};
    if (is_type(b, "call_expression") && kl_node_text_is(src, ts_node_child_by_field_name(b, "function", 8), "dim3"))
        args = ts_node_child_by_field_name(b, "arguments", 9);
    if (is_type(b, "identifier")) {
        TSNode decl, value, dn;
        TSNode body = kl_ast_function_body(l->host_fn);
        char *name = kl_node_text(src, b);
        bool dim3 = false;
        if (name && find_decl(src, body, name, &decl, &value, &dn)) {
            TSNode ty = ts_node_child_by_field_name(decl, "type", 4);
            if (kl_node_text_is(src, ty, "dim3")) {
                dim3 = true;
                args = value;
            }
        }
        free(name);
        if (dim3 && (is_type(args, "argument_list") || is_type(args, "parameter_list"))) {
            /* fall through to the argument check */
        } else if (dim3) {
            kl_snprintf(why, size, "the dim3 block at line %u is not built from its dimensions", line_of(l->call));
            return false;
        } else {
            args = (TSNode){0};
        }
    }
    if (!ts_node_is_null(args)) {
        uint32_t n = ts_node_named_child_count(args);
        for (uint32_t k = 1; k < n; k++) {
            TSNode a = ts_node_named_child(args, k);
            if (!kl_node_text_is(src, a, "1")) {
                kl_snprintf(why, size, "the block at line %u is 2-D or 3-D", line_of(l->call));
                return false;
            }
        }
        if (n == 0) {
            kl_snprintf(why, size, "the block at line %u has no dimensions", line_of(l->call));
            return false;
        }
        b = ts_node_named_child(args, 0);
        if (is_type(b, "parameter_declaration")) b = ts_node_child_by_field_name(b, "type", 4);
    }
    *expr = b;
    return true;
}

static bool mentions(const kl_source *src, TSNode n, const char *name)
{
    char *t = kl_node_text(src, n);
    if (!t) return false;
    size_t l = strlen(name);
    bool yes = false;
    for (char *p = strstr(t, name); p && !yes; p = strstr(p + 1, name)) {
        bool lb = p == t || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                              (p[-1] >= '0' && p[-1] <= '9'));
        char a = p[l];
        bool rb = !(a == '_' || (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9'));
        yes = lb && rb;
    }
    free(t);
    return yes;
}

typedef struct lit_scan {
    const kl_source *src;
    int64_t b;
    TSNode hit;
} lit_scan;

static bool number_value(const kl_source *src, TSNode n, int64_t *v)
{
    char *t = kl_node_text(src, n);
    if (!t) return false;
    char *end;
    long long x = strtoll(t, &end, 0);
    bool ok = end != t && (*end == '\0' || *end == 'u' || *end == 'U' || *end == 'l' || *end == 'L');
    free(t);
    *v = x;
    return ok;
}

/* A literal in the kernel equal to the block size (or half of it, above a warp): an assumption
 * about the size that does not follow a change. */
static bool find_literal(TSNode n, void *user)
{
    lit_scan *s = user;
    if (!ts_node_is_null(s->hit)) return false;
    if (!is_type(n, "number_literal")) return true;
    int64_t v;
    if (number_value(s->src, n, &v) && (v == s->b || (s->b / 2 > 32 && v == s->b / 2))) s->hit = n;
    return true;
}

/* Rewrite the grid of a launch where it divides by the old size as a literal: `/ B` and `+ (B - 1)`.
 * Other uses of the literal B there: not applicable. */
typedef struct grid_scan {
    const kl_source *src;
    int64_t b, nb;
    kl_edits *out;
    char *why;
    size_t why_size;
    kl_status st;
} grid_scan;

static bool grid_literal(TSNode n, void *user)
{
    grid_scan *g = user;
    if (g->why[0] || g->st != KL_OK) return false;
    if (!is_type(n, "number_literal")) return true;
    int64_t v;
    if (!number_value(g->src, n, &v) || (v != g->b && v != g->b - 1)) return true;
    TSNode p = ts_node_parent(n);
    while (is_type(p, "parenthesized_expression")) p = ts_node_parent(p);
    char *op = is_type(p, "binary_expression") ? kl_node_text(g->src, ts_node_child_by_field_name(p, "operator", 8))
                                                : NULL;
    bool div = op && v == g->b && !strcmp(op, "/");
    bool add = op && v == g->b - 1 && !strcmp(op, "+");
    free(op);
    if (div || add) {
        if (g->out) g->st = kl_edits_addf(g->out, ts_node_start_byte(n), ts_node_end_byte(n), "%lld",
                                          (long long)(div ? g->nb : g->nb - 1));
    } else if (v == g->b) {
        kl_snprintf(g->why, g->why_size, "the grid at line %u uses the literal %lld other than as the divisor",
                    line_of(n), (long long)v);
    }
    return true;
}

/* The grid expression of a launch, through a local `int grid = …` / `dim3 grid(…)` of the host. */
static TSNode grid_expr(const kl_source *src, const kl_launch_site *l)
{
    TSNode g = l->grid;
    if (!is_type(g, "identifier")) return g;
    char *name = kl_node_text(src, g);
    TSNode decl, value, dn;
    if (name && find_decl(src, kl_ast_function_body(l->host_fn), name, &decl, &value, &dn) && !ts_node_is_null(value))
        g = value;
    free(name);
    return g;
}

/* Does the value text name another identifier (a size derived from other constants)? */
static bool derived(const char *t, uint32_t a, uint32_t b)
{
    for (uint32_t i = a; i < b; i++) {
        char c = t[i];
        bool start = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        char p = i > a ? t[i - 1] : ' ';
        bool after_word = p == '_' || (p >= 'a' && p <= 'z') || (p >= 'A' && p <= 'Z') || (p >= '0' && p <= '9');
        if (start && !after_word) return true;
    }
    return false;
}

/* Check a group can move from its size to nb, and (out set) write the edits. */
static kl_status check_group(bs_state *s, bs_group *g, int64_t nb, kl_edits *out, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    why[0] = '\0';
    if (g->why[0]) {
        kl_snprintf(why, size, "%s", g->why);
        return KL_OK;
    }
    TSNode fns[256];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 256);
    if (nf > 256) nf = 256;
    for (unsigned k = 0; k < g->nlaunch && !why[0]; k++) {
        const kl_launch_site *l = &s->ls.items[g->launches[k]];
        /* the kernel's code: no literal that assumes the old size */
        for (unsigned f = 0; f < nf && !why[0]; f++) {
            char *fname = kl_ast_function_name(src, fns[f]);
            bool same = fname && !strcmp(fname, l->kernel);
            free(fname);
            if (!same) continue;
            TSNode lb = kl_ast_child_of_type(fns[f], "launch_bounds");
            lit_scan ls;
            ls.src = src;
            ls.b = g->value;
            memset(&ls.hit, 0, sizeof ls.hit);
            if (!ts_node_is_null(lb)) kl_ast_walk(lb, find_literal, &ls);
            kl_ast_walk(kl_ast_function_body(fns[f]), find_literal, &ls);
            if (!ts_node_is_null(ls.hit)) {
                char *t = kl_node_text(src, ls.hit);
                kl_snprintf(why, size, "%s hard-codes %s at line %u, an assumption about the block size of %lld",
                            l->kernel, t ? t : "a literal", line_of(ls.hit), (long long)g->value);
                free(t);
            }
        }
        grid_scan gs = {src, g->value, nb, out, why, size, KL_OK};
        TSNode ge = grid_expr(src, l);
        if (!ts_node_is_null(ge) && !why[0]) kl_ast_walk(ge, grid_literal, &gs);
        if (gs.st != KL_OK) return gs.st;
    }
    /* a named constant: every kernel that uses it must be launched with it */
    if (g->name[0] && !why[0]) {
        for (unsigned f = 0; f < nf && !why[0]; f++) {
            if (!mentions(src, fns[f], g->name)) continue;
            char *fname = kl_ast_function_name(src, fns[f]);
            bool launched_with = false, launched = false;
            for (unsigned i = 0; fname && i < s->ls.count; i++) {
                if (strcmp(s->ls.items[i].kernel, fname)) continue;
                launched = true;
                for (unsigned k = 0; k < g->nlaunch; k++)
                    if (g->launches[k] == i) launched_with = true;
            }
            if (launched && !launched_with)
                kl_snprintf(why, size, "%s uses %s but is launched with another block size", fname ? fname : "a kernel",
                            g->name);
            free(fname);
        }
    }
    if (!why[0] && out) {
        kl_status st = kl_edits_addf(out, g->val_start, g->val_end, "%lld", (long long)nb);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* The value of the block expression. `dim3 b(NAME)` reads NAME as a type (the grammar takes it for a
 * prototype): its definition is evaluated instead. */
static bool block_value(bs_state *s, const kl_launch_site *l, TSNode e, int64_t *v, char *why, size_t size)
{
    const kl_source *src = s->ctx->src;
    if (!is_type(e, "type_identifier")) return kl_const_eval(src, l->host_fn, e, false, v, why, size);
    char *name = kl_node_text(src, e);
    TSNode decl, value, dn;
    bool ok = false;
    if (!name) {
        kl_snprintf(why, size, "out of memory");
    } else if (find_decl(src, kl_ast_function_body(l->host_fn), name, &decl, &value, &dn) ||
               find_decl(src, kl_source_root(src), name, &decl, &value, &dn)) {
        ok = !ts_node_is_null(value) && kl_const_eval(src, l->host_fn, value, false, v, why, size);
    } else if (find_define(src, name, &decl, &value)) {
        char *t = kl_node_text(src, value), *end = NULL;
        long long x = t ? strtoll(t, &end, 0) : 0;
        while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
        ok = end && end != t && *end == '\0';
        if (ok) *v = x;
        else kl_snprintf(why, size, "%s is not a number", name);
        free(t);
    } else {
        kl_snprintf(why, size, "%s is not defined in this file", name);
    }
    free(name);
    return ok;
}

static kl_status add_launch(bs_state *s, unsigned i)
{
    const kl_source *src = s->ctx->src;
    const kl_launch_site *l = &s->ls.items[i];
    bs_group g;
    memset(&g, 0, sizeof g);
    kl_snprintf(g.kernel, sizeof g.kernel, "%s", l->kernel);
    TSNode e;
    char why[300] = "";
    int64_t v = 0;
    if (!block_expr(src, l, &e, why, sizeof why)) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        kl_snprintf(g.why, sizeof g.why, "%s", why);
        g.def = l->call;
    } else if (!block_value(s, l, e, &v, why, sizeof why)) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        kl_snprintf(g.why, sizeof g.why, "the block size at line %u is not a compile-time constant: %s",
                    line_of(l->call), why);
        g.def = l->call;
    } else if (is_type(e, "number_literal")) {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        g.value = v;
        g.def = e;
        g.val_start = ts_node_start_byte(e);
        g.val_end = ts_node_end_byte(e);
    } else if (is_type(e, "identifier") || is_type(e, "type_identifier")) {
        char *name = kl_node_text(src, e);
        if (!name) return KL_ERR_NOMEM;
        g.value = v;
        kl_snprintf(g.name, sizeof g.name, "%s", name);
        for (unsigned k = 0; k < s->count; k++)
            if (!strcmp(s->groups[k].name, name) && s->groups[k].nlaunch < 32) {
                s->groups[k].launches[s->groups[k].nlaunch++] = i;
                free(name);
                return KL_OK;
            }
        TSNode decl, value, dn;
        if (find_decl(src, kl_ast_function_body(l->host_fn), name, &decl, &value, &dn) ||
            find_decl(src, kl_source_root(src), name, &decl, &value, &dn)) {
            g.def = decl;
            if (!ts_node_is_null(value)) {
                g.val_start = ts_node_start_byte(value);
                g.val_end = ts_node_end_byte(value);
            }
            if (ts_node_is_null(value) || is_type(value, "argument_list") || is_type(value, "parameter_list"))
                kl_snprintf(g.why, sizeof g.why, "%s (line %u) has no initializer to change", name, line_of(decl));
        } else if (find_define(src, name, &decl, &value)) {
            g.def = decl;
            g.val_start = ts_node_start_byte(value);
            g.val_end = ts_node_end_byte(value);
            trim_range(s->ctx->text, &g.val_start, &g.val_end);
        } else {
            g.def = l->call;
            kl_snprintf(g.why, sizeof g.why, "the definition of %s is not in this file", name);
        }
        kl_site_id(g.id, sizeof g.id, l->kernel, g.def, name);
        free(name);
    } else {
        kl_site_id(g.id, sizeof g.id, l->kernel, l->call, NULL);
        g.value = v;
        g.def = e;
        char *t = kl_node_text(src, e);
        kl_snprintf(g.why, sizeof g.why, "the block size at line %u is an expression (%s), not one constant",
                    line_of(l->call), t ? t : "");
        free(t);
    }
    if (!g.why[0] && g.name[0] && derived(s->ctx->text, g.val_start, g.val_end))
        kl_snprintf(g.why, sizeof g.why, "%s is derived from other constants (%.*s): the tiling that defines it would have to change",
                    g.name, (int)(g.val_end - g.val_start), s->ctx->text + g.val_start);
    if (!g.why[0] && (g.value <= 0 || g.value > 1024))
        kl_snprintf(g.why, sizeof g.why, "the block size %lld is not 1 to 1024 threads", (long long)g.value);
    g.launches[g.nlaunch++] = i;
    bs_group *ng = realloc(s->groups, (s->count + 1) * sizeof *ng);
    if (!ng) return KL_ERR_NOMEM;
    s->groups = ng;
    s->groups[s->count++] = g;
    return KL_OK;
}

static kl_status state_open(const kl_rule_ctx *ctx, bs_state *s, kl_error *err)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    kl_status st = kl_ast_launches(ctx->src, &s->ls, err);
    for (unsigned i = 0; st == KL_OK && i < s->ls.count; i++) st = add_launch(s, i);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static void state_close(bs_state *s)
{
    free(s->groups);
    kl_launch_sites_release(&s->ls);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    bs_state s;
    kl_status st = state_open(ctx, &s, err);
    for (unsigned i = 0; st == KL_OK && i < s.count; i++) {
        bs_group *g = &s.groups[i];
        char why[300];
        st = check_group(&s, g, BS_NAIVE, NULL, why, sizeof why);
        if (st != KL_OK) break;
        for (int dir = 0; dir < 2 && st == KL_OK; dir++) {
            if (dir == 0 && (g->value == BS_NAIVE || g->why[0])) continue; /* present: a size other than 256 */
            json_t *f = json_pack("{s:I, s:I}", "threads", (json_int_t)g->value, "launches", (json_int_t)g->nlaunch);
            if (!f) return KL_ERR_NOMEM;
            json_object_set_new(f, "constant", g->name[0] ? json_string(g->name) : json_null());
            if (why[0]) json_object_set_new(f, "why_not", json_string(why));
            char note[400];
            if (why[0])
                kl_snprintf(note, sizeof note, "%s", why);
            else if (g->name[0])
                kl_snprintf(note, sizeof note, "%lld threads per block, from %s (line %u)", (long long)g->value,
                            g->name, line_of(g->def));
            else
                kl_snprintf(note, sizeof note, "%lld threads per block, a literal at the launch", (long long)g->value);
            char v[32];
            kl_snprintf(v, sizeof v, "%lld", (long long)g->value);
            json_t *params = dir == 0 ? json_pack("{s:s}", "threads", v) : NULL;
            st = kl_sites_add(out, g->id, dir == 0 ? KL_SITE_PRESENT : KL_SITE_APPLICABLE, kl_node_span(g->def),
                              g->kernel, f, params, note);
        }
    }
    state_close(&s);
    return st;
}

static kl_status change(const kl_rule_ctx *ctx, const kl_site *site, int64_t nb, kl_edits *out, kl_error *err)
{
    bs_state s;
    kl_status st = state_open(ctx, &s, err);
    if (st != KL_OK) return st;
    bs_group *g = NULL;
    for (unsigned i = 0; i < s.count; i++)
        if (!g && ts_node_start_byte(s.groups[i].def) == site->span.start && !strcmp(s.groups[i].kernel, site->kernel))
            g = &s.groups[i];
    if (!g) {
        st = kl_rule_not_applicable(err, "no block size at %s", site->id);
    } else if (g->value == nb) {
        st = kl_rule_not_applicable(err, "the block size at %s is already %lld", site->id, (long long)nb);
    } else {
        char why[300];
        st = check_group(&s, g, nb, out, why, sizeof why);
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
        else if (why[0]) st = kl_rule_not_applicable(err, "%s", why);
    }
    state_close(&s);
    return st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return change(ctx, site, BS_NAIVE, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    int64_t nb = 0;
    if (!kl_rule_param_int(&kl_rule_block_size, params, "threads", &nb) || nb < 32 || nb > 1024)
        return kl_error_set(err, KL_ERR_INVALID, "block-size: threads must be 64, 128, 256, 512 or 1024");
    return change(ctx, site, nb, out, err);
}

const kl_rule kl_rule_block_size = {
    "block-size", "choose the threads per block of a launch, changing the constant tied to it once where it is defined",
    bs_params, 1, find, remove_site, apply,
};
