/*
 * const-mem — small read-only data (a filter's weights) in a `__constant__` array that the host fills from
 * a device pointer before the launch, read by the kernels as an operand at a uniform address. Remove only:
 * the kernels read the weights from the pointer the host copied them from, passed as a parameter.
 *
 * present (site `function:line:NAME` of the first read): a file-level `__constant__ T NAME[SIZE];` whose
 * every use is the declaration, a read `NAME[…]` in device code, or the symbol of the one copy
 * `cudaMemcpyToSymbol[Async](NAME, SRC, BYTES[, OFFSET[, KIND[, STREAM]]])` in a host function H.
 * Remove needs: SRC a pointer parameter of H; OFFSET absent or 0; KIND cudaMemcpyDeviceToDevice or
 * cudaMemcpyDefault (the default kind, HostToDevice, copies from host memory, which a kernel cannot read);
 * every function reading NAME reached only from device code of the same set or from launches in H after
 * the copy. Remove then gives each such function a parameter `const T* P` (P = SRC's name where no such
 * function uses it, else NAME; `__restrict__` when every other pointer parameter of the function has it),
 * reads P where it read NAME, passes P along each call between them and SRC at each launch, and deletes
 * the copy and the declaration with the comment lines just above them.
 *
 * Sound: the kernels read the same values (the copy took them from SRC on the same stream right before the
 * launch, and nothing writes SRC in between) at the same indices. Apply is not written: the __constant__
 * array needs a compile-time size covering every index the kernels read, a range analysis the catalog
 * does not have.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"

#define NAME "const-mem"
#define CM_MAXF 16

typedef struct cm_site {
    TSNode decl;            /* the __constant__ declaration */
    char sym[64], elem[64];
    TSNode copy;            /* the call copying into it */
    TSNode copy_stmt;
    const rt_func *host;    /* H */
    char src[64];           /* SRC */
    char kind[64];
    const rt_func *fn[CM_MAXF]; /* the functions reading it, with their callers in device code */
    unsigned nfn;
    TSNode first_read;
    const rt_func *first_fn;
    char param[64];         /* P */
    char why[300];
} cm_site;

static TSNode strip(TSNode e)
{
    while (rt_is(e, "parenthesized_expression")) e = ts_node_named_child(e, 0);
    return e;
}

static bool has_word(const kl_rule_ctx *ctx, TSNode n, const char *w)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    size_t L = strlen(w);
    for (uint32_t i = a; i + L <= b; i++)
        if (!memcmp(ctx->text + i, w, L)) return true;
    return false;
}

/* The function of fs holding byte offset off. */
static const rt_func *function_at(const rt_func *fs, unsigned nf, uint32_t off)
{
    for (unsigned i = 0; i < nf; i++)
        if (off >= ts_node_start_byte(fs[i].outer) && off < ts_node_end_byte(fs[i].outer)) return &fs[i];
    return NULL;
}

static bool in_set(const cm_site *s, const rt_func *f)
{
    for (unsigned i = 0; i < s->nfn; i++)
        if (s->fn[i] == f) return true;
    return false;
}

typedef struct use_walk {
    const kl_rule_ctx *ctx;
    cm_site *s;
    const rt_func *fs;
    unsigned nf;
} use_walk;

/* Classify each use of the symbol. */
static bool use_visit(TSNode n, void *user)
{
    use_walk *u = user;
    cm_site *s = u->s;
    if (s->why[0]) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(u->ctx, n, s->sym)) return true;
    uint32_t off = ts_node_start_byte(n);
    if (off >= ts_node_start_byte(s->decl) && off < ts_node_end_byte(s->decl)) return true;
    unsigned line = kl_ast_line(n);
    const rt_func *f = function_at(u->fs, u->nf, off);
    if (!f) {
        kl_snprintf(s->why, sizeof s->why, "%s is used at line %u outside a function", s->sym, line);
        return false;
    }
    TSNode p = ts_node_parent(n);
    if (f->global || f->device) {
        bool read = rt_is(p, "subscript_expression") && ts_node_start_byte(rt_field(p, "argument")) == off;
        TSNode up = ts_node_parent(p);
        if (read && rt_is(up, "assignment_expression") && ts_node_start_byte(rt_field(up, "left")) == ts_node_start_byte(p))
            read = false;
        if (read && (rt_is(up, "update_expression") || (rt_is(up, "pointer_expression")))) read = false;
        if (!read) {
            kl_snprintf(s->why, sizeof s->why, "%s is used at line %u other than as a read of an element", s->sym, line);
            return false;
        }
        if (!in_set(s, f)) {
            if (s->nfn >= CM_MAXF) {
                kl_snprintf(s->why, sizeof s->why, "%s is read in too many functions", s->sym);
                return false;
            }
            s->fn[s->nfn++] = f;
        }
        if (ts_node_is_null(s->first_read)) s->first_read = n, s->first_fn = f;
        return true;
    }
    /* host: the symbol of a copy */
    TSNode args = p;
    TSNode call = ts_node_parent(args);
    char cal[64];
    if (!rt_is(args, "argument_list") || !rt_is(call, "call_expression") || !rt_callee_name(u->ctx, call, cal, sizeof cal) ||
        (strcmp(cal, "cudaMemcpyToSymbol") && strcmp(cal, "cudaMemcpyToSymbolAsync")) ||
        ts_node_start_byte(ts_node_named_child(args, 0)) != off) {
        kl_snprintf(s->why, sizeof s->why, "%s is used at line %u in host code other than as the symbol of a copy", s->sym,
                    line);
        return false;
    }
    if (!ts_node_is_null(s->copy)) {
        kl_snprintf(s->why, sizeof s->why, "%s is copied to twice (lines %u and %u)", s->sym, kl_ast_line(s->copy), line);
        return false;
    }
    s->copy = call;
    s->host = f;
    return true;
}

/* The callers of function g: device calls (added to the set) and launches (which must be in H after the copy). */
static bool close_callers(const kl_rule_ctx *ctx, cm_site *s, const rt_func *fs, unsigned nf)
{
    for (unsigned k = 0; k < s->nfn; k++) {
        const rt_func *g = s->fn[k];
        if (g->global) {
            rt_launch ls[32];
            unsigned nl = rt_launches(ctx, g->name, ls, 32);
            for (unsigned i = 0; i < nl && i < 32; i++) {
                if (strcmp(ls[i].host.name, s->host->name) || ts_node_start_byte(ls[i].call) < ts_node_end_byte(s->copy)) {
                    kl_snprintf(s->why, sizeof s->why, "%s is launched at line %u, not after the copy to %s in %s", g->name,
                                kl_ast_line(ls[i].call), s->sym, s->host->name);
                    return false;
                }
            }
            if (nl > 32) {
                kl_snprintf(s->why, sizeof s->why, "%s is launched too often", g->name);
                return false;
            }
            continue;
        }
        /* every call of a __device__ reader sits in another function of the set (added) */
        for (unsigned i = 0; i < nf; i++) {
            if (!rt_count_ident(ctx, fs[i].body, g->name)) continue;
            if (!fs[i].global && !fs[i].device) {
                kl_snprintf(s->why, sizeof s->why, "%s is named in host code (%s)", g->name, fs[i].name);
                return false;
            }
            if (!in_set(s, &fs[i])) {
                if (s->nfn >= CM_MAXF) return false;
                s->fn[s->nfn++] = &fs[i];
            }
        }
    }
    return true;
}

static bool analyse(const kl_rule_ctx *ctx, TSNode decl, const rt_func *fs, unsigned nf, cm_site *s)
{
    memset(s, 0, sizeof *s);
    s->decl = decl;
    TSNode ds[2];
    if (rt_declarators(decl, ds, 2) != 1) return false;
    if (rt_is(ds[0], "init_declarator")) ds[0] = rt_field(ds[0], "declarator");
    if (!rt_is(ds[0], "array_declarator")) return false;
    char *nm = rt_text(ctx, kl_ast_declarator_name(ds[0]));
    char *ty = rt_text(ctx, rt_field(decl, "type"));
    if (!nm || !ty) {
        free(nm), free(ty);
        return false;
    }
    kl_snprintf(s->sym, sizeof s->sym, "%s", nm);
    kl_snprintf(s->elem, sizeof s->elem, "%s", ty);
    free(nm), free(ty);
    use_walk u = {ctx, s, fs, nf};
    kl_ast_walk(kl_source_root(ctx->src), use_visit, &u);
    if (ts_node_is_null(s->first_read)) return false; /* not read on the device: nothing to say */
    if (s->why[0]) return true;
    if (ts_node_is_null(s->copy)) {
        kl_snprintf(s->why, sizeof s->why, "%s is never copied to from a pointer (a table of constants in the file?)",
                    s->sym);
        return true;
    }
    s->copy_stmt = ts_node_parent(s->copy);
    if (!rt_is(s->copy_stmt, "expression_statement")) {
        kl_snprintf(s->why, sizeof s->why, "the copy at line %u is not a statement of its own", kl_ast_line(s->copy));
        return true;
    }
    TSNode args[8];
    TSNode al = rt_field(s->copy, "arguments");
    unsigned na = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(al) && na < 8; i++) {
        TSNode k = ts_node_named_child(al, i);
        if (!rt_is(k, "comment")) args[na++] = k;
    }
    unsigned line = kl_ast_line(s->copy);
    TSNode src = strip(na > 1 ? args[1] : (TSNode){{0}, 0, 0});
    char elem[64];
    char *st = rt_is(src, "identifier") ? rt_text(ctx, src) : NULL;
    if (!st || !rt_pointer_param(ctx, s->host, st, elem, sizeof elem)) {
        kl_snprintf(s->why, sizeof s->why, "the copy at line %u does not read a pointer parameter of %s", line, s->host->name);
        free(st);
        return true;
    }
    kl_snprintf(s->src, sizeof s->src, "%s", st);
    free(st);
    int64_t off = 0;
    if (na > 3 && (!kl_const_eval(ctx->src, s->host->def, args[3], false, &off, NULL, 0) || off != 0)) {
        kl_snprintf(s->why, sizeof s->why, "the copy at line %u writes at an offset into %s", line, s->sym);
        return true;
    }
    char *kind = na > 4 ? rt_text(ctx, args[4]) : NULL;
    kl_snprintf(s->kind, sizeof s->kind, "%s", kind ? kind : "cudaMemcpyHostToDevice");
    free(kind);
    if (strcmp(s->kind, "cudaMemcpyDeviceToDevice") && strcmp(s->kind, "cudaMemcpyDefault")) {
        kl_snprintf(s->why, sizeof s->why, "the copy at line %u is %s%s: %s is host memory, which a kernel cannot read", line,
                    s->kind, na > 4 ? "" : " (the default kind)", s->src);
        return true;
    }
    if (!close_callers(ctx, s, fs, nf)) {
        if (!s->why[0]) kl_snprintf(s->why, sizeof s->why, "%s is read through too many functions", s->sym);
        return true;
    }
    /* the parameter's name */
    bool taken = false;
    for (unsigned i = 0; i < s->nfn; i++) taken |= rt_count_ident(ctx, s->fn[i]->outer, s->src) > 0;
    kl_snprintf(s->param, sizeof s->param, "%s", taken ? s->sym : s->src);
    for (unsigned i = 0; i < s->nfn && !taken; i++)
        if (has_word(ctx, s->fn[i]->params, "...")) {
            kl_snprintf(s->why, sizeof s->why, "%s takes a variable argument list", s->fn[i]->name);
            return true;
        }
    return true;
}

static bool is_constant_decl(const kl_rule_ctx *ctx, TSNode d)
{
    if (!rt_is(d, "declaration")) return false;
    /* the qualifier before the type (the grammar keeps it as a storage class or an attribute) */
    TSNode ty = rt_field(d, "type");
    uint32_t a = ts_node_start_byte(d), b = ts_node_is_null(ty) ? ts_node_end_byte(d) : ts_node_start_byte(ty);
    for (uint32_t i = a; i + 12 <= b; i++)
        if (!memcmp(ctx->text + i, "__constant__", 12)) return true;
    return false;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    if (nf > 64) nf = 64;
    TSNode root = kl_source_root(ctx->src);
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!is_constant_decl(ctx, d)) continue;
        cm_site *s = malloc(sizeof *s);
        if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        if (!analyse(ctx, d, fs, nf, s)) {
            free(s);
            continue;
        }
        char id[256];
        kl_site_id(id, sizeof id, s->first_fn->name, s->first_read, s->sym);
        json_t *readers = json_array();
        for (unsigned k = 0; k < s->nfn; k++) json_array_append_new(readers, json_string(s->fn[k]->name));
        json_t *feat = json_pack("{s:s, s:s, s:o}", "symbol", s->sym, "dtype", s->elem, "readers", readers);
        if (s->src[0]) json_object_set_new(feat, "source", json_string(s->src));
        if (s->kind[0]) json_object_set_new(feat, "kind", json_string(s->kind));
        TSNode ds[1];
        int64_t n;
        if (rt_declarators(d, ds, 1) == 1 && rt_is(ds[0], "init_declarator")) ds[0] = rt_field(ds[0], "declarator");
        if (kl_const_eval(ctx->src, (TSNode){{0}, 0, 0}, rt_field(ds[0], "size"), false, &n, NULL, 0))
            json_object_set_new(feat, "elements", json_integer(n));
        if (s->why[0]) json_object_set_new(feat, "why_not", json_string(s->why));
        kl_status st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(s->first_read), s->first_fn->name, feat, NULL,
                                    "read-only data in __constant__ memory, copied there from a pointer by the host");
        free(s);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

/* ---- remove ------------------------------------------------------------------------------------------ */

/* The whole lines of n with the comment lines just above it. */
static void lines_with_comments(const kl_rule_ctx *ctx, TSNode n, uint32_t *a, uint32_t *b)
{
    rt_stmt_range(ctx, n, NULL, a, b);
    if (*a != rt_line_start(ctx, *a)) return;
    TSNode prev = ts_node_prev_named_sibling(n);
    while (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
           rt_line_end(ctx, ts_node_end_byte(prev)) == *a) {
        *a = rt_line_start(ctx, ts_node_start_byte(prev));
        prev = ts_node_prev_named_sibling(prev);
    }
}

/* Append `, text` (or `text` to an empty list) before the closing parenthesis of a list. */
static kl_status append_to_list(const kl_rule_ctx *ctx, TSNode list, const char *text, kl_edits *out)
{
    uint32_t close = ts_node_end_byte(list) - 1;
    bool empty = true;
    for (uint32_t i = 0; i < ts_node_named_child_count(list); i++)
        if (!rt_is(ts_node_named_child(list, i), "comment")) empty = false;
    /* before trailing blanks inside the parenthesis */
    uint32_t at = close;
    while (at > ts_node_start_byte(list) + 1 && (ctx->text[at - 1] == ' ' || ctx->text[at - 1] == '\n')) at--;
    return kl_edits_addf(out, at, at, "%s%s", empty ? "" : ", ", text);
}

typedef struct call_walk {
    const kl_rule_ctx *ctx;
    const cm_site *s;
    kl_edits *out;
    kl_status st;
} call_walk;

static bool call_visit(TSNode n, void *user)
{
    call_walk *c = user;
    if (c->st != KL_OK) return false;
    if (!rt_is(n, "call_expression") || !ts_node_is_null(kl_ast_child_of_type(n, "kernel_call_syntax"))) return true;
    char nm[128];
    if (!rt_callee_name(c->ctx, n, nm, sizeof nm)) return true;
    for (unsigned i = 0; i < c->s->nfn; i++)
        if (!strcmp(c->s->fn[i]->name, nm) && c->s->fn[i]->device)
            c->st = append_to_list(c->ctx, rt_field(n, "arguments"), c->s->param, c->out);
    return true;
}

/* Every pointer parameter of f is __restrict__ (and there is one). */
static bool all_restrict(const kl_rule_ctx *ctx, const rt_func *f)
{
    unsigned ptr = 0, res = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(f->params); i++) {
        TSNode p = ts_node_named_child(f->params, i);
        if (!rt_is(p, "parameter_declaration")) continue;
        char *t = rt_text(ctx, p);
        if (t && strchr(t, '*')) {
            ptr++;
            if (strstr(t, "__restrict__")) res++;
        }
        free(t);
    }
    return ptr > 0 && ptr == res;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    const char *sym = json_string_value(json_object_get(site->features, "symbol"));
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    if (nf > 64) nf = 64;
    TSNode root = kl_source_root(ctx->src);
    cm_site *s = NULL;
    for (uint32_t i = 0; sym && i < ts_node_named_child_count(root) && !s; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!is_constant_decl(ctx, d)) continue;
        s = malloc(sizeof *s);
        if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        if (!analyse(ctx, d, fs, nf, s) || strcmp(s->sym, sym)) free(s), s = NULL;
    }
    if (!s) return kl_rule_not_applicable(err, "no __constant__ array %s read on the device", sym ? sym : "?");
    kl_status st = KL_OK;
    if (s->why[0]) {
        st = kl_rule_not_applicable(err, "%s", s->why);
        goto done;
    }
    uint32_t a, b;
    /* the declaration (and a blank line after it when one is before it too) */
    lines_with_comments(ctx, s->decl, &a, &b);
    if (b < ctx->len && ctx->text[b] == '\n' && a >= 2 && ctx->text[a - 1] == '\n' && ctx->text[a - 2] == '\n') b++;
    st = kl_edits_add(out, a, b, "");
    if (st == KL_OK) {
        lines_with_comments(ctx, s->copy_stmt, &a, &b);
        st = kl_edits_add(out, a, b, "");
    }
    for (unsigned i = 0; i < s->nfn && st == KL_OK; i++) {
        const rt_func *f = s->fn[i];
        char decl[200];
        kl_snprintf(decl, sizeof decl, "const %s*%s %s", s->elem, all_restrict(ctx, f) ? " __restrict__" : "", s->param);
        st = append_to_list(ctx, f->params, decl, out);
        if (st == KL_OK && strcmp(s->param, s->sym)) st = kl_edits_rename(ctx, f->body, s->sym, s->param, out);
        if (st == KL_OK) {
            call_walk c = {ctx, s, out, KL_OK};
            kl_ast_walk(f->body, call_visit, &c);
            st = c.st;
        }
        if (st == KL_OK && f->global) {
            rt_launch ls[32];
            unsigned nl = rt_launches(ctx, f->name, ls, 32);
            for (unsigned k = 0; k < nl && k < 32 && st == KL_OK; k++) st = append_to_list(ctx, ls[k].args, s->src, out);
        }
    }
    if (st != KL_OK) st = kl_error_set(err, st, "out of memory");
done:
    free(s);
    return st;
}

const kl_rule kl_rule_const_mem = {
    NAME,
    "read small read-only data (filter weights) from __constant__ memory, copied there by the host before the launch",
    NULL,
    0,
    find,
    remove_site,
    NULL,
};
