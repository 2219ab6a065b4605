/*
 * coalesce — a 2-D thread mapping that puts threadIdx.x on the non-contiguous dimension
 * (`A[(blockIdx.x*B + threadIdx.x) * N + col]`: the lanes of a warp stride by N) ↔ the x and
 * y roles swapped, so that consecutive lanes touch consecutive elements.
 *
 * The rewrite swaps .x and .y of threadIdx, blockIdx, blockDim and gridDim throughout the
 * kernel and swaps the first two dimensions of the grid and the block at every launch of the
 * kernel in the file. That relabelling keeps every thread's work the same (the kernel computes
 * the same result); only which threads share a warp changes.
 *
 * Applicable: a kernel using both threadIdx.x and threadIdx.y whose global accesses, counted
 * by the index analysis, are coalesced along threadIdx.y more often than along threadIdx.x;
 * every launch in the file passes a dim3 grid and block (literal `dim3(a, b)` or a local
 * `dim3 g(a, b)` used by that launch only); no warp-synchronous code (shuffles, votes,
 * __syncwarp: lanes would be regrouped) and no helper or macro that reads the thread indices
 * (it would not be relabelled).
 * Present: a kernel marked `// coalesce: ...` (the experts' and this rule's marker) whose
 * launches can be swapped the same way. When reads and writes disagree (a transpose), the
 * staged exchange through shared memory is not produced here: the site says so.
 */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_b.h"

#define NAME "coalesce"
#define MARKER "// coalesce: threadIdx.x on the contiguous dimension (x and y roles swapped)"

static const char *const builtins[] = {"threadIdx", "blockIdx", "blockDim", "gridDim", NULL};

/* The x/y letter node of a builtin field expression, or a null node. Sees through the
 * tree-sitter-cuda misparse of `threadIdx.x < n)` as a template method. */
static TSNode builtin_letter(const kl_rule_ctx *ctx, TSNode n)
{
    if (!rb_is(n, "field_expression")) return (TSNode){0};
    TSNode arg = rb_field(n, "argument"), fld = rb_field(n, "field");
    if (!rb_is(arg, "identifier")) return (TSNode){0};
    bool b = false;
    for (int i = 0; builtins[i]; i++) b |= rb_text_is(ctx, arg, builtins[i]);
    if (!b) return (TSNode){0};
    if (rb_is(fld, "template_method")) fld = rb_field(fld, "name");
    if (rb_text_is(ctx, fld, "x") || rb_text_is(ctx, fld, "y")) return fld;
    return (TSNode){0};
}

typedef struct swap_collect {
    const kl_rule_ctx *ctx;
    kl_edits *out;
    kl_status st;
    unsigned count;
} swap_collect;

static bool swap_visit(TSNode n, void *user)
{
    swap_collect *s = user;
    TSNode l = builtin_letter(s->ctx, n);
    if (!ts_node_is_null(l)) {
        if (s->out && s->st == KL_OK)
            s->st = kl_edits_add(s->out, ts_node_start_byte(l), ts_node_end_byte(l), rb_text_is(s->ctx, l, "x") ? "y" : "x");
        s->count++;
    }
    return true;
}

/* Warp-synchronous constructs and thread-index reads outside the kernel's own text. */
typedef struct hazards {
    const kl_rule_ctx *ctx;
    const rb_func *fs;
    unsigned nf;
    TSNode at;
    char what[160];
} hazards;

static bool uses_builtins(const kl_rule_ctx *ctx, TSNode n)
{
    swap_collect s = {.ctx = ctx};
    rb_walk(n, swap_visit, &s);
    return s.count > 0;
}

static bool hazard_visit(TSNode n, void *user)
{
    hazards *h = user;
    if (!ts_node_is_null(h->at)) return false;
    if (!rb_is(n, "call_expression")) return true;
    TSNode fn = rb_field(n, "function");
    if (!rb_is(fn, "identifier")) return true;
    char *name = rb_text(h->ctx, fn);
    if (!name) return false;
    if (strstr(name, "__shfl") || strstr(name, "__syncwarp") || strstr(name, "__ballot") || strstr(name, "__any_sync") ||
        strstr(name, "__all_sync") || strstr(name, "__activemask") || strstr(name, "__match") ||
        strstr(name, "__reduce_")) {
        h->at = n;
        kl_snprintf(h->what, sizeof h->what, "'%s' is warp-synchronous: swapping x and y regroups the lanes of a warp",
                    name);
    } else {
        const rb_func *callee = rb_function_named(h->fs, h->nf, name);
        if (callee && uses_builtins(h->ctx, callee->body)) {
            h->at = n;
            kl_snprintf(h->what, sizeof h->what, "the helper '%s' reads thread or block indices and would not be relabelled",
                        name);
        } else {
            /* a function-like macro whose body reads them */
            TSNode root = kl_source_root(h->ctx->src);
            uint32_t c = ts_node_named_child_count(root);
            for (uint32_t i = 0; i < c; i++) {
                TSNode m = ts_node_named_child(root, i);
                if (!rb_is(m, "preproc_function_def") || !rb_text_is(h->ctx, rb_field(m, "name"), name)) continue;
                char *body = rb_text(h->ctx, rb_field(m, "value"));
                bool reads = body && (strstr(body, "threadIdx") || strstr(body, "blockIdx") || strstr(body, "blockDim") ||
                                      strstr(body, "gridDim"));
                free(body);
                if (reads) {
                    h->at = n;
                    kl_snprintf(h->what, sizeof h->what,
                                "the macro '%s' reads thread or block indices and would not be relabelled", name);
                }
            }
        }
    }
    free(name);
    return true;
}

/* Object-like macros that read the indices, used in the kernel. */
static bool macro_reads_builtins(const kl_rule_ctx *ctx, const rb_func *f, char *which, size_t size)
{
    TSNode root = kl_source_root(ctx->src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode m = ts_node_named_child(root, i);
        if (!rb_is(m, "preproc_def")) continue;
        TSNode v = rb_field(m, "value");
        if (ts_node_is_null(v)) continue;
        char *body = rb_text(ctx, v);
        char *name = rb_text(ctx, rb_field(m, "name"));
        bool reads = body && name &&
                     (strstr(body, "threadIdx") || strstr(body, "blockIdx") || strstr(body, "blockDim") ||
                      strstr(body, "gridDim")) &&
                     rb_count_ident(ctx, f->body, name) > 0;
        if (reads) kl_snprintf(which, size, "%s", name);
        free(body);
        free(name);
        if (reads) return true;
    }
    return false;
}

/* ---- the accesses ------------------------------------------------------------------------------- */

typedef struct tally {
    const kl_rule_ctx *ctx;
    const rb_func *f;
    rb_affine *af;
    unsigned x_unit;     /* accesses coalesced along threadIdx.x */
    unsigned y_unit;     /* accesses strided along x but coalesced along threadIdx.y */
    unsigned strided;    /* strided along both */
    unsigned reads_y, writes_y; /* of y_unit: reads / writes */
    unsigned reads_x, writes_x;
} tally;

/* Is the base of a subscript global memory: a pointer parameter, or a local pointer derived
 * from one? (Shared and local arrays are not.) */
static bool global_base(const kl_rule_ctx *ctx, const rb_func *f, TSNode base)
{
    if (!rb_is(base, "identifier")) return false;
    char *name = rb_text(ctx, base);
    if (!name) return false;
    bool g = rb_pointer_param(ctx, f, name, NULL, 0);
    if (!g) {
        /* `const float *row = x + ...;` */
        TSNode body = f->body;
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c && !g; i++) {
            TSNode d = ts_node_named_child(body, i);
            if (!rb_is(d, "declaration")) continue;
            TSNode dd = rb_field(d, "declarator");
            if (!rb_is(dd, "init_declarator") || !rb_is(rb_field(dd, "declarator"), "pointer_declarator")) continue;
            TSNode id = rb_declarator_name(dd);
            if (!rb_text_is(ctx, id, name)) continue;
            TSNode v = rb_field(dd, "value");
            uint32_t np = ts_node_named_child_count(f->params);
            for (uint32_t k = 0; k < np && !g; k++) {
                TSNode pid = rb_declarator_name(rb_field(ts_node_named_child(f->params, k), "declarator"));
                char *pn = ts_node_is_null(pid) ? NULL : rb_text(ctx, pid);
                if (pn && rb_pointer_param(ctx, f, pn, NULL, 0) && rb_count_ident(ctx, v, pn)) g = true;
                free(pn);
            }
        }
    }
    free(name);
    return g;
}

static bool tally_visit(TSNode n, void *user)
{
    tally *t = user;
    if (!rb_is(n, "subscript_expression")) return true;
    TSNode base = rb_field(n, "argument");
    if (!global_base(t->ctx, t->f, base)) return true;
    TSNode idx = ts_node_named_child(rb_field(n, "indices"), 0);
    rb_poly p;
    rb_affine_eval(t->af, idx, &p);
    /* a local pointer's offset counts too */
    rb_poly b;
    rb_affine_eval(t->af, base, &b);
    int sx = rb_poly_stride(&p, RB_TX, NULL), sy = rb_poly_stride(&p, RB_TY, NULL);
    if (!b.opaque) {
        int bx = rb_poly_stride(&b, RB_TX, NULL), by = rb_poly_stride(&b, RB_TY, NULL);
        if (bx) sx = sx ? -1 : bx;
        if (by) sy = sy ? -1 : by;
    }
    TSNode par = ts_node_parent(n);
    bool write = rb_is(par, "assignment_expression") && ts_node_eq(rb_field(par, "left"), n);
    if (sx == 1) {
        t->x_unit++;
        write ? t->writes_x++ : t->reads_x++;
    } else if (sy == 1 && sx != -1) {
        t->y_unit++;
        write ? t->writes_y++ : t->reads_y++;
    } else if ((sx == 2 || sx == 3) && (sy == 2 || sy == 3)) t->strided++;
    return true;
}

/* ---- launches -------------------------------------------------------------------------------- */

/* The node whose first two named children are the x and y extents of a dim3 configuration
 * expression, or a null node with *why set. */
static TSNode dim3_list(const kl_rule_ctx *ctx, const rb_launch *l, TSNode cfg, char *why, size_t size)
{
    if (rb_is(cfg, "call_expression") && rb_text_is(ctx, rb_field(cfg, "function"), "dim3")) {
        TSNode args = rb_field(cfg, "arguments");
        if (ts_node_named_child_count(args) >= 2) return args;
        kl_snprintf(why, size, "'%.*s' is 1-D", (int)(ts_node_end_byte(cfg) - ts_node_start_byte(cfg)),
                    ctx->text + ts_node_start_byte(cfg));
        return (TSNode){0};
    }
    if (rb_is(cfg, "identifier")) {
        char *name = rb_text(ctx, cfg);
        if (!name) return (TSNode){0};
        TSNode found = {0};
        unsigned uses = rb_count_ident(ctx, l->host.body, name);
        uint32_t c = ts_node_named_child_count(l->host.body);
        for (uint32_t i = 0; i < c; i++) {
            TSNode d = ts_node_named_child(l->host.body, i);
            if (!rb_is(d, "declaration") || !rb_text_is(ctx, rb_field(d, "type"), "dim3")) continue;
            TSNode dd = rb_field(d, "declarator");
            TSNode id = rb_declarator_name(dd);
            if (ts_node_is_null(id) && rb_is(dd, "function_declarator")) id = rb_field(dd, "declarator");
            if (!rb_text_is(ctx, id, name)) continue;
            TSNode list = {0};
            if (rb_is(dd, "function_declarator")) list = rb_field(dd, "parameters");
            else if (rb_is(dd, "init_declarator")) {
                TSNode v = rb_field(dd, "value");
                if (rb_is(v, "argument_list") || rb_is(v, "initializer_list")) list = v;
                else if (rb_is(v, "call_expression") && rb_text_is(ctx, rb_field(v, "function"), "dim3"))
                    list = rb_field(v, "arguments");
            }
            if (!ts_node_is_null(list) && ts_node_named_child_count(list) >= 2) found = list;
            else kl_snprintf(why, size, "'%s' is not declared as a 2-D dim3 in '%s'", name, l->host.name);
        }
        if (!ts_node_is_null(found) && uses != 2) {
            kl_snprintf(why, size, "'%s' is used %u times in '%s': swapping it would change other launches", name,
                        uses - 1, l->host.name);
            found = (TSNode){0};
        } else if (ts_node_is_null(found) && !why[0])
            kl_snprintf(why, size, "'%s' is not a local dim3 of '%s'", name, l->host.name);
        free(name);
        return found;
    }
    kl_snprintf(why, size, "'%.*s' is not a dim3", (int)(ts_node_end_byte(cfg) - ts_node_start_byte(cfg)),
                ctx->text + ts_node_start_byte(cfg));
    return (TSNode){0};
}

/* Edits swapping the x and y extents of every launch of the kernel. */
static kl_status swap_launches(const kl_rule_ctx *ctx, const rb_func *f, kl_edits *out, kl_error *err)
{
    rb_launch ls[16];
    unsigned n = rb_launches(ctx, f->name, ls, 16);
    if (!n)
        return kl_rule_not_applicable(err,
                            "%s: kernel '%s' is not launched in this file: its grid must change with the mapping",
                            kl_source_name(ctx->src), f->name);
    for (unsigned i = 0; i < n; i++) {
        if (ls[i].ncfg < 2) return kl_error_set(err, KL_ERR_INVALID, "%s: a launch of '%s' without a block", kl_source_name(ctx->src), f->name);
        for (int k = 0; k < 2; k++) {
            char why[256] = "";
            TSNode list = dim3_list(ctx, &ls[i], ls[i].cfg[k], why, sizeof why);
            if (ts_node_is_null(list)) {
                kl_span sp = kl_node_span(ls[i].cfg[k]);
                return kl_rule_not_applicable(err,
                                    "%s:%u:%u: the %s of this launch of '%s' cannot be swapped: %s",
                                    kl_source_name(ctx->src), sp.line, sp.column, k ? "block" : "grid", f->name, why);
            }
            /* the same list may serve several launches only if it is a literal; a shared
             * variable was refused above */
            TSNode a = ts_node_named_child(list, 0), b = ts_node_named_child(list, 1);
            char *ta = rb_text(ctx, a), *tb = rb_text(ctx, b);
            kl_status st = (!ta || !tb) ? KL_ERR_NOMEM : KL_OK;
            if (st == KL_OK && strcmp(ta, tb)) {
                st = kl_edits_add(out, ts_node_start_byte(a), ts_node_end_byte(a), tb);
                if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(b), ts_node_end_byte(b), ta);
            }
            free(ta);
            free(tb);
            if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        }
    }
    return KL_OK;
}

/* ---- find / apply / remove ---------------------------------------------------------------------- */

static bool uses_letter(const kl_rule_ctx *ctx, TSNode body, const char *b, char c)
{
    /* a direct scan */
    TSTreeCursor cur = ts_tree_cursor_new(body);
    bool yes = false, more = true;
    while (more && !yes) {
        TSNode n = ts_tree_cursor_current_node(&cur);
        TSNode l = builtin_letter(ctx, n);
        if (!ts_node_is_null(l) && rb_text_is(ctx, rb_field(n, "argument"), b)) {
            char s1[2] = {c, 0};
            yes = rb_text_is(ctx, l, s1);
        }
        if (ts_tree_cursor_goto_first_child(&cur)) continue;
        while (!ts_tree_cursor_goto_next_sibling(&cur))
            if (!ts_tree_cursor_goto_parent(&cur)) {
                more = false;
                break;
            }
    }
    ts_tree_cursor_delete(&cur);
    return yes;
}

static bool has_marker(const kl_rule_ctx *ctx, const rb_func *f)
{
    return rb_has_marker(ctx, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "coalesce:");
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    kl_status st = KL_OK;
    for (unsigned i = 0; i < nf; i++) {
        const rb_func *f = &fs[i];
        if (!f->global) continue;
        if (!uses_letter(ctx, f->body, "threadIdx", 'x') || !uses_letter(ctx, f->body, "threadIdx", 'y')) continue;
        rb_affine *af = rb_affine_new(ctx, f);
        if (!af) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        tally t = {.ctx = ctx, .f = f, .af = af};
        rb_walk(f->body, tally_visit, &t);
        rb_affine_free(af);
        kl_span sp = kl_node_span(f->def);
        char id[200];
        kl_snprintf(id, sizeof id, "%s:%u", f->name, sp.line);
        json_t *feat = json_pack("{s:i, s:i, s:i, s:i, s:i}", "coalesced_x", (int)t.x_unit, "coalesced_y",
                                 (int)t.y_unit, "strided", (int)t.strided, "reads_along_y", (int)t.reads_y,
                                 "writes_along_y", (int)t.writes_y);
        if (has_marker(ctx, f)) {
            KL_TRY(kl_sites_add(out, id, KL_SITE_PRESENT, sp, f->name, feat, json_object(),
                                "threadIdx.x on the contiguous dimension (marked)"));
            continue;
        }
        if (t.y_unit > t.x_unit) {
            char note[200];
            kl_snprintf(note, sizeof note, "%u global access(es) contiguous along threadIdx.y, %u along threadIdx.x",
                        t.y_unit, t.x_unit);
            KL_TRY(kl_sites_add(out, id, KL_SITE_APPLICABLE, sp, f->name, feat, NULL, note));
        } else if (t.y_unit && t.y_unit == t.x_unit) {
            /* reads and writes disagree: a staged exchange would be needed */
            json_object_set_new(feat, "needs_staging", json_true());
            KL_TRY(kl_sites_add(out, id, KL_SITE_APPLICABLE, sp, f->name, feat, NULL,
                                "reads and writes disagree on the contiguous dimension (a transpose)"));
        } else json_decref(feat);
    }
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static kl_status check_swappable(const kl_rule_ctx *ctx, const rb_func *fs, unsigned nf, const rb_func *f,
                                 kl_error *err)
{
    hazards h = {.ctx = ctx, .fs = fs, .nf = nf};
    rb_walk(f->body, hazard_visit, &h);
    if (!ts_node_is_null(h.at)) {
        kl_span sp = kl_node_span(h.at);
        return kl_rule_not_applicable(err, "%s:%u:%u: %s", kl_source_name(ctx->src), sp.line, sp.column,
                            h.what);
    }
    char which[128];
    if (macro_reads_builtins(ctx, f, which, sizeof which))
        return kl_rule_not_applicable(err,
                            "%s: kernel '%s' uses the macro '%s', which reads thread or block indices and would not "
                            "be relabelled",
                            kl_source_name(ctx->src), f->name, which);
    return KL_OK;
}

static kl_status swap_kernel(const kl_rule_ctx *ctx, const rb_func *f, kl_edits *out, kl_error *err)
{
    swap_collect s = {.ctx = ctx, .out = out, .st = KL_OK};
    rb_walk(f->body, swap_visit, &s);
    if (s.st != KL_OK) return kl_error_set(err, s.st, "out of memory");
    return KL_OK;
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                       kl_error *err)
{
    (void)params;
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    const rb_func *f = rb_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    json_t *ns = site->features ? json_object_get(site->features, "needs_staging") : NULL;
    if (ns && json_is_true(ns))
        return kl_rule_not_applicable(err,
                            "%s: kernel '%s': its reads and writes are contiguous along different thread dimensions; "
                            "swapping x and y would only move the strided access (a staged exchange through shared "
                            "memory is needed, which this rule does not write)",
                            kl_source_name(ctx->src), f->name);
    kl_status st = check_swappable(ctx, fs, nf, f, err);
    if (st != KL_OK) return st;
    if ((st = swap_launches(ctx, f, out, err)) != KL_OK) return st;
    if ((st = swap_kernel(ctx, f, out, err)) != KL_OK) return st;
    /* the marker, first in the body */
    TSNode first = ts_node_named_child(f->body, 0);
    char ind[64] = "    ";
    if (!ts_node_is_null(first)) rb_indent_of(ctx, ts_node_start_byte(first), ind, sizeof ind);
    uint32_t at = rb_line_end(ctx, ts_node_start_byte(f->body));
    if (!rb_line_blank_before(ctx, ts_node_end_byte(f->body) - 1) || at > ts_node_end_byte(f->body))
        return kl_rule_not_applicable(err, "%s: kernel '%s': expected its body's braces on lines of their own",
                            kl_source_name(ctx->src), f->name);
    if ((st = kl_edits_addf(out, at, at, "%s%s\n", ind, MARKER)) != KL_OK) return kl_error_set(err, st, "out of memory");
    return KL_OK;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    const rb_func *f = rb_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    if (!has_marker(ctx, f))
        return kl_rule_not_applicable(err, "%s: kernel '%s' carries no `// coalesce:` marker",
                            kl_source_name(ctx->src), f->name);
    kl_status st = check_swappable(ctx, fs, nf, f, err);
    if (st != KL_OK) return st;
    if ((st = swap_launches(ctx, f, out, err)) != KL_OK) return st;
    if ((st = swap_kernel(ctx, f, out, err)) != KL_OK) return st;
    /* drop the marker line(s) */
    uint32_t c = ts_node_named_child_count(f->body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode n = ts_node_named_child(f->body, i);
        if (!rb_is(n, "comment") || !rb_has_marker(ctx, ts_node_start_byte(n), ts_node_end_byte(n), "coalesce:"))
            continue;
        uint32_t a, b;
        rb_stmt_range(ctx, n, NULL, &a, &b);
        if ((st = kl_edits_add(out, a, b, "")) != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

const kl_rule kl_rule_coalesce = {
    NAME,
    "threadIdx.x on the non-contiguous dimension -> x and y roles swapped so that a warp reads contiguous memory",
    NULL,
    0,
    find,
    remove_site,
    apply,
};
