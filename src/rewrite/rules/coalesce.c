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
 * launches can be swapped the same way.
 *
 * When reads and writes disagree (a transpose), swapping would only move the strided access:
 * the site is listed with `needs_staging` and apply writes the staged exchange through a shared
 * tile instead; remove undoes a staged exchange (this rule's or an expert's) wherever it finds
 * one. See "the staged exchange" below and docs/rules.md.
 */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coalesce.h"
#include "rewrite/rules/rules_tree.h"

#define NAME "coalesce"
#define MARKER "// coalesce: threadIdx.x on the contiguous dimension (x and y roles swapped)"

static const char *const builtins[] = {"threadIdx", "blockIdx", "blockDim", "gridDim", NULL};

/* The staged exchange only: how many rows of the tile each thread moves (the block becomes
 * B x B/rows_per_thread; 1 keeps the block). */
static const char *const rpt_values[] = {"1", "2", "4", "8", NULL};
static const kl_rule_param coalesce_params[] = {{"rows_per_thread", rpt_values, "1"}};

/* The x/y letter node of a builtin field expression, or a null node. Sees through the
 * tree-sitter-cuda misparse of `threadIdx.x < n)` as a template method. */
static TSNode builtin_letter(const kl_rule_ctx *ctx, TSNode n)
{
    if (!rt_is(n, "field_expression")) return (TSNode){0};
    TSNode arg = rt_field(n, "argument"), fld = rt_field(n, "field");
    if (!rt_is(arg, "identifier")) return (TSNode){0};
    bool b = false;
    for (int i = 0; builtins[i]; i++) b |= rt_text_is(ctx, arg, builtins[i]);
    if (!b) return (TSNode){0};
    if (rt_is(fld, "template_method")) fld = rt_field(fld, "name");
    if (rt_text_is(ctx, fld, "x") || rt_text_is(ctx, fld, "y")) return fld;
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
            s->st = kl_edits_add(s->out, ts_node_start_byte(l), ts_node_end_byte(l), rt_text_is(s->ctx, l, "x") ? "y" : "x");
        s->count++;
    }
    return true;
}

/* Warp-synchronous constructs and thread-index reads outside the kernel's own text. */
typedef struct hazards {
    const kl_rule_ctx *ctx;
    const rt_func *fs;
    unsigned nf;
    TSNode at;
    char what[160];
} hazards;

static bool uses_builtins(const kl_rule_ctx *ctx, TSNode n)
{
    swap_collect s = {.ctx = ctx};
    kl_ast_walk(n, swap_visit, &s);
    return s.count > 0;
}

static bool hazard_visit(TSNode n, void *user)
{
    hazards *h = user;
    if (!ts_node_is_null(h->at)) return false;
    if (!rt_is(n, "call_expression")) return true;
    TSNode fn = rt_field(n, "function");
    if (!rt_is(fn, "identifier")) return true;
    char *name = rt_text(h->ctx, fn);
    if (!name) return false;
    if (strstr(name, "__shfl") || strstr(name, "__syncwarp") || strstr(name, "__ballot") || strstr(name, "__any_sync") ||
        strstr(name, "__all_sync") || strstr(name, "__activemask") || strstr(name, "__match") ||
        strstr(name, "__reduce_")) {
        h->at = n;
        kl_snprintf(h->what, sizeof h->what, "'%s' is warp-synchronous: swapping x and y regroups the lanes of a warp",
                    name);
    } else {
        const rt_func *callee = rt_function_named(h->fs, h->nf, name);
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
                if (!rt_is(m, "preproc_function_def") || !rt_text_is(h->ctx, rt_field(m, "name"), name)) continue;
                char *body = rt_text(h->ctx, rt_field(m, "value"));
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
static bool macro_reads_builtins(const kl_rule_ctx *ctx, const rt_func *f, char *which, size_t size)
{
    TSNode root = kl_source_root(ctx->src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode m = ts_node_named_child(root, i);
        if (!rt_is(m, "preproc_def")) continue;
        TSNode v = rt_field(m, "value");
        if (ts_node_is_null(v)) continue;
        char *body = rt_text(ctx, v);
        char *name = rt_text(ctx, rt_field(m, "name"));
        bool reads = body && name &&
                     (strstr(body, "threadIdx") || strstr(body, "blockIdx") || strstr(body, "blockDim") ||
                      strstr(body, "gridDim")) &&
                     rt_count_ident(ctx, f->body, name) > 0;
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
    const rt_func *f;
    kl_affine_ctx *ax;
    kl_status st;
    unsigned x_unit;     /* accesses coalesced along threadIdx.x */
    unsigned y_unit;     /* accesses strided along x but coalesced along threadIdx.y */
    unsigned strided;    /* strided along both */
    unsigned reads_y, writes_y; /* of y_unit: reads / writes */
    unsigned reads_x, writes_x;
} tally;

/* Is the base of a subscript global memory: a pointer parameter, or a local pointer derived
 * from one? (Shared and local arrays are not.) */
static bool global_base(const kl_rule_ctx *ctx, const rt_func *f, TSNode base)
{
    if (!rt_is(base, "identifier")) return false;
    char *name = rt_text(ctx, base);
    if (!name) return false;
    bool g = rt_pointer_param(ctx, f, name, NULL, 0);
    if (!g) {
        /* `const float *row = x + ...;` */
        TSNode body = f->body;
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c && !g; i++) {
            TSNode d = ts_node_named_child(body, i);
            if (!rt_is(d, "declaration")) continue;
            TSNode dd = rt_field(d, "declarator");
            if (!rt_is(dd, "init_declarator") || !rt_is(rt_field(dd, "declarator"), "pointer_declarator")) continue;
            TSNode id = kl_ast_declarator_name(dd);
            if (!rt_text_is(ctx, id, name)) continue;
            TSNode v = rt_field(dd, "value");
            uint32_t np = ts_node_named_child_count(f->params);
            for (uint32_t k = 0; k < np && !g; k++) {
                TSNode pid = kl_ast_declarator_name(rt_field(ts_node_named_child(f->params, k), "declarator"));
                char *pn = ts_node_is_null(pid) ? NULL : rt_text(ctx, pid);
                if (pn && rt_pointer_param(ctx, f, pn, NULL, 0) && rt_count_ident(ctx, v, pn)) g = true;
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
    if (t->st != KL_OK) return false;
    if (!rt_is(n, "subscript_expression")) return true;
    TSNode base = rt_field(n, "argument");
    if (!global_base(t->ctx, t->f, base)) return true;
    const kl_poly *p, *b;
    if ((t->st = kl_affine_poly_of(t->ax, kl_ast_subscript_index(n), &p)) != KL_OK ||
        (t->st = kl_affine_poly_of(t->ax, base, &b)) != KL_OK)
        return false;
    kl_stride sx = kl_poly_stride(p, "threadIdx.x", NULL), sy = kl_poly_stride(p, "threadIdx.y", NULL);
    /* a local pointer's offset counts too */
    if (!b->opaque) {
        kl_stride bx = kl_poly_stride(b, "threadIdx.x", NULL), by = kl_poly_stride(b, "threadIdx.y", NULL);
        if (bx != KL_STRIDE_ABSENT) sx = sx != KL_STRIDE_ABSENT ? KL_STRIDE_OPAQUE : bx;
        if (by != KL_STRIDE_ABSENT) sy = sy != KL_STRIDE_ABSENT ? KL_STRIDE_OPAQUE : by;
    }
    TSNode par = ts_node_parent(n);
    bool write = rt_is(par, "assignment_expression") && ts_node_eq(rt_field(par, "left"), n);
    if (sx == KL_STRIDE_UNIT) {
        t->x_unit++;
        write ? t->writes_x++ : t->reads_x++;
    } else if (sy == KL_STRIDE_UNIT && sx != KL_STRIDE_OPAQUE) {
        t->y_unit++;
        write ? t->writes_y++ : t->reads_y++;
    } else if ((sx == KL_STRIDE_CONST || sx == KL_STRIDE_SYMBOLIC) &&
               (sy == KL_STRIDE_CONST || sy == KL_STRIDE_SYMBOLIC)) {
        t->strided++;
    }
    return true;
}

/* ---- launches -------------------------------------------------------------------------------- */

/* The node whose first two named children are the x and y extents of a dim3 configuration
 * expression, or a null node with *why set. */
static TSNode dim3_list(const kl_rule_ctx *ctx, const rt_launch *l, TSNode cfg, char *why, size_t size)
{
    if (rt_is(cfg, "call_expression") && rt_text_is(ctx, rt_field(cfg, "function"), "dim3")) {
        TSNode args = rt_field(cfg, "arguments");
        if (ts_node_named_child_count(args) >= 2) return args;
        kl_snprintf(why, size, "'%.*s' is 1-D", (int)(ts_node_end_byte(cfg) - ts_node_start_byte(cfg)),
                    ctx->text + ts_node_start_byte(cfg));
        return (TSNode){0};
    }
    if (rt_is(cfg, "identifier")) {
        char *name = rt_text(ctx, cfg);
        if (!name) return (TSNode){0};
        TSNode found = {0};
        unsigned uses = rt_count_ident(ctx, l->host.body, name);
        uint32_t c = ts_node_named_child_count(l->host.body);
        for (uint32_t i = 0; i < c; i++) {
            TSNode d = ts_node_named_child(l->host.body, i);
            if (!rt_is(d, "declaration") || !rt_text_is(ctx, rt_field(d, "type"), "dim3")) continue;
            TSNode dd = rt_field(d, "declarator");
            TSNode id = kl_ast_declarator_name(dd);
            if (ts_node_is_null(id) && rt_is(dd, "function_declarator")) id = rt_field(dd, "declarator");
            if (!rt_text_is(ctx, id, name)) continue;
            TSNode list = {0};
            if (rt_is(dd, "function_declarator")) list = rt_field(dd, "parameters");
            else if (rt_is(dd, "init_declarator")) {
                TSNode v = rt_field(dd, "value");
                if (rt_is(v, "argument_list") || rt_is(v, "initializer_list")) list = v;
                else if (rt_is(v, "call_expression") && rt_text_is(ctx, rt_field(v, "function"), "dim3"))
                    list = rt_field(v, "arguments");
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
static kl_status swap_launches(const kl_rule_ctx *ctx, const rt_func *f, kl_edits *out, kl_error *err)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, f->name, ls, 16);
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
            char *ta = rt_text(ctx, a), *tb = rt_text(ctx, b);
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

static kl_status check_swappable(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, const rt_func *f,
                                 kl_error *err)
{
    hazards h = {.ctx = ctx, .fs = fs, .nf = nf};
    kl_ast_walk(f->body, hazard_visit, &h);
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

/* ---- the staged exchange (a transpose) ------------------------------------------------------------
 *
 * Apply, on a kernel whose one global write is contiguous along threadIdx.y while its reads are
 * contiguous along threadIdx.x (`y[c * rows + r] = x[r * cols + c]`), launched with a square
 * compile-time block B x B: the body P runs twice around a barrier, through a B x B __shared__
 * tile:
 *   phase 1 — P with the write's destination replaced by tile[threadIdx.y][threadIdx.x]: each
 *             thread computes its value exactly as before (the read stays along threadIdx.x);
 *   phase 2 — P with threadIdx.x and threadIdx.y exchanged and the write's value replaced by
 *             tile[threadIdx.x][threadIdx.y]: thread (a, b) plays thread (b, a) of the same block,
 *             so it writes where (b, a) wrote, the value (b, a) stored; its writes now move along
 *             threadIdx.x.
 * The guards of P guard both phases the same way (an edge thread that stored nothing writes
 * nothing). Each phase is a block of its own (`{ … }`), or a lambda run in place
 * (`[&]() { … }();`) when P returns early, so that every thread reaches the barrier. The tile is
 * the block (no launch changes) and is not padded (that is smem-pad's job).
 *
 * Remove, on any kernel with one top-level __syncthreads() between a store into a 2-D __shared__
 * tile `T[i1][j1] = v` and one global write `y[w] = T[i2][j2]` after it: the statements after the
 * barrier, the barrier and the tile go; the store becomes `y[w'] = v`, where w' is w seen from the
 * storing thread: i2 and j2 (variables, or threadIdx.x/y) replaced by i1 and j1, locals depending
 * on them inlined, and an inlined local written by the name of a local of the store's side with
 * the same definition (`yr = col0 + r` becomes `c` where `c = col0 + tx`). Each element is then
 * written by the thread that read it: the kernel is one read and one write per element again,
 * the write strided (like a naive transpose). When the statements before the barrier are one
 * block or lambda (this rule's own form), it is unwrapped.
 */

#define STAGED_MARKER "// coalesce: staged through a shared tile, so that the read and the write both move along threadIdx.x"

void co_se_add(span_edits *e, uint32_t start, uint32_t end, const char *text)
{
    if (e->failed) return;
    if (e->count == e->cap) {
        unsigned cap = e->cap ? e->cap * 2 : 16;
        span_edit *n = realloc(e->items, cap * sizeof *n);
        if (!n) {
            e->failed = true;
            return;
        }
        e->items = n;
        e->cap = cap;
    }
    char *t = kl_strdup(text);
    if (!t) {
        e->failed = true;
        return;
    }
    e->items[e->count++] = (span_edit){start, end, t};
}

void co_se_release(span_edits *e)
{
    for (unsigned i = 0; i < e->count; i++) free(e->items[i].text);
    free(e->items);
    memset(e, 0, sizeof *e);
}

static int se_cmp(const void *a, const void *b)
{
    const span_edit *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The text [a, b) with the edits inside it applied (edits must not overlap); NULL on overlap or
 * when memory runs out. */
char *co_se_splice(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, span_edits *e)
{
    if (e->failed) return NULL;
    if (e->count) qsort(e->items, e->count, sizeof *e->items, se_cmp);
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t at = a;
    for (unsigned i = 0; i < e->count; i++) {
        const span_edit *x = &e->items[i];
        if (x->start < at || x->end > b || x->end < x->start) {
            kl_strbuf_release(&sb);
            return NULL;
        }
        kl_strbuf_add(&sb, ctx->text + at, x->start - at);
        kl_strbuf_adds(&sb, x->text);
        at = x->end;
    }
    kl_strbuf_add(&sb, ctx->text + at, b - at);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* Text without blanks (for comparing definitions). */
char *co_squeeze(const char *s)
{
    char *o = malloc(strlen(s) + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') *p++ = *s;
    *p = '\0';
    return o;
}

static bool is_loop(TSNode n)
{
    return rt_is(n, "for_statement") || rt_is(n, "while_statement") || rt_is(n, "do_statement") ||
           rt_is(n, "for_range_loop");
}

/* Is threadIdx.<c> (c 'x' or 'y') at n? */
bool co_is_thread_letter(const kl_rule_ctx *ctx, TSNode n, char c)
{
    TSNode l = builtin_letter(ctx, n);
    if (ts_node_is_null(l) || !rt_text_is(ctx, rt_field(n, "argument"), "threadIdx")) return false;
    char s[2] = {c, 0};
    return rt_text_is(ctx, l, s);
}

/* What the kernel does that the two phases could not repeat or regroup. */
typedef struct staged_scan {
    const kl_rule_ctx *ctx;
    TSNode write;          /* the one memory write */
    unsigned writes;
    TSNode bad;            /* a construct that forbids the staging */
    char why[200];
    bool has_return;
} staged_scan;

static bool staged_visit(TSNode n, void *user)
{
    staged_scan *s = user;
    if (!ts_node_is_null(s->bad)) return false;
    if (rt_is(n, "return_statement")) s->has_return = true;
    if (rt_is(n, "lambda_expression")) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "a lambda (the phases would run it twice)");
        return false;
    }
    if (rt_is(n, "type_qualifier") && rt_text_is(s->ctx, n, "__shared__")) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "shared memory already (the phases would share it)");
        return false;
    }
    if (rt_is(n, "call_expression")) {
        TSNode fn = rt_field(n, "function");
        char *name = rt_is(fn, "identifier") ? rt_text(s->ctx, fn) : NULL;
        if (name && (!strncmp(name, "atomic", 6) || !strncmp(name, "__syncthreads", 13) || !strcmp(name, "__threadfence"))) {
            s->bad = n;
            kl_snprintf(s->why, sizeof s->why, "'%s' (the phases would run it twice or out of order)", name);
        }
        free(name);
    }
    if (rt_is(n, "assignment_expression")) {
        TSNode l = rt_field(n, "left");
        if (!rt_is(l, "identifier")) {
            s->writes++;
            s->write = n;
        }
    } else if (rt_is(n, "update_expression")) {
        TSNode a = rt_field(n, "argument");
        if (!rt_is(a, "identifier")) {
            s->bad = n;
            kl_snprintf(s->why, sizeof s->why, "an increment of memory");
        }
    }
    return true;
}

/* The square block B of every launch of f, with the text naming it (a file-level constant
 * when both extents name the same one, else the number). */
static kl_status square_block(const kl_rule_ctx *ctx, const rt_func *f, long long *edge, char *text, size_t size,
                              kl_error *err)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, f->name, ls, 16);
    if (!n)
        return kl_rule_not_applicable(err, "%s: kernel '%s' is not launched in this file: the tile is its block",
                                      kl_source_name(ctx->src), f->name);
    *edge = 0;
    for (unsigned i = 0; i < n; i++) {
        kl_span sp = kl_node_span(ls[i].call);
        if (ls[i].ncfg < 2)
            return kl_rule_not_applicable(err, "%s:%u: a launch of '%s' without a block", kl_source_name(ctx->src),
                                          sp.line, f->name);
        TSNode list = rt_dim3_args(ctx, &ls[i], ls[i].cfg[1]);
        uint32_t k = ts_node_is_null(list) ? 0 : ts_node_named_child_count(list);
        int64_t v[3] = {1, 1, 1};
        bool ok = k >= 2 && k <= 3;
        for (uint32_t j = 0; ok && j < k; j++) ok = kl_const_eval(ctx->src, ls[i].host.def, rt_dim3_extent(list, j), false, &v[j], NULL, 0);
        if (!ok)
            return kl_rule_not_applicable(err,
                                          "%s:%u: the block of this launch of '%s' is not a 2-D dim3 of compile-time "
                                          "constants (the tile is the block)",
                                          kl_source_name(ctx->src), sp.line, f->name);
        if (v[0] != v[1] || v[2] != 1 || v[0] < 2 || v[0] > 32)
            return kl_rule_not_applicable(err,
                                          "%s:%u: the block of this launch of '%s' is %lld x %lld x %lld, not square: "
                                          "a thread must find its transposed partner in its block",
                                          kl_source_name(ctx->src), sp.line, f->name, (long long)v[0],
                                          (long long)v[1], (long long)v[2]);
        if (*edge && *edge != v[0])
            return kl_rule_not_applicable(err, "%s:%u: launches of '%s' use different blocks (%lld and %lld)",
                                          kl_source_name(ctx->src), sp.line, f->name, *edge, (long long)v[0]);
        *edge = v[0];
        /* a name both extents share, when it is a file-level constant */
        char *a = rt_text(ctx, rt_dim3_extent(list, 0)), *b = rt_text(ctx, rt_dim3_extent(list, 1));
        int64_t w;
        TSNode e0 = rt_dim3_extent(list, 0);
        bool named = a && b && !strcmp(a, b) && (rt_is(e0, "identifier") || rt_is(e0, "type_identifier")) &&
                     kl_const_eval(ctx->src, (TSNode){0}, e0, false, &w, NULL, 0);
        if (i == 0) {
            if (named) kl_snprintf(text, size, "%s", a);
            else kl_snprintf(text, size, "%lld", (long long)v[0]);
        } else if (!named || strcmp(text, a)) kl_snprintf(text, size, "%lld", (long long)v[0]);
        free(a);
        free(b);
    }
    return KL_OK;
}

/* Edits making the block of every launch of f B x B/r: its y extent `E` becomes `E / r` (or
 * `(E) / r`). A local dim3 used by several launches is edited once; refused when host code
 * reads the block's extents (`block.y`), which would see the smaller block. */
static kl_status narrow_blocks(const kl_rule_ctx *ctx, const rt_func *f, long long r, const char *rows, kl_edits *out,
                               kl_error *err)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, f->name, ls, 16);
    uint32_t done[16];
    unsigned ndone = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode cfg = ls[i].cfg[1];
        if (rt_is(cfg, "identifier")) {
            char *name = rt_text(ctx, cfg);
            unsigned uses = name ? rt_count_ident(ctx, ls[i].host.body, name) : 0;
            free(name);
            unsigned launches_using = 0;
            for (unsigned j = 0; j < n; j++)
                if (ts_node_eq(ls[j].host.def, ls[i].host.def) && rt_is(ls[j].cfg[1], "identifier") &&
                    ts_node_start_byte(ls[j].cfg[1]) != ts_node_start_byte(cfg)) {
                    char *a = rt_text(ctx, ls[j].cfg[1]), *b = rt_text(ctx, cfg);
                    if (a && b && !strcmp(a, b)) launches_using++;
                    free(a);
                    free(b);
                }
            /* its declaration, this launch and the other launches naming it: nothing else */
            if (uses != 2 + launches_using)
                return kl_rule_not_applicable(err,
                                              "%s:%u: the block '%.*s' is used besides the launch: its y extent "
                                              "cannot change (rows_per_thread=1 keeps it)",
                                              kl_source_name(ctx->src), kl_node_span(cfg).line,
                                              (int)(ts_node_end_byte(cfg) - ts_node_start_byte(cfg)),
                                              ctx->text + ts_node_start_byte(cfg));
        }
        TSNode list = rt_dim3_args(ctx, &ls[i], cfg), ey = rt_dim3_extent(list, 1);
        uint32_t a = ts_node_start_byte(ey), b = ts_node_end_byte(ey);
        bool seen = false;
        for (unsigned j = 0; j < ndone; j++) seen |= done[j] == a;
        if (seen) continue;
        done[ndone++] = a;
        bool atom = rt_is(ey, "identifier") || rt_is(ey, "number_literal") || rt_is(ey, "type_identifier");
        kl_status st = rows && rows[0] ? kl_edits_add(out, a, b, rows)
                                       : kl_edits_addf(out, a, b, atom ? "%.*s / %lld" : "(%.*s) / %lld", (int)(b - a),
                                                       ctx->text + a, r);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

/* Swap threadIdx.x and threadIdx.y inside [a, b), outside [skip_a, skip_b). */
typedef struct tswap {
    const kl_rule_ctx *ctx;
    span_edits *e;
    uint32_t skip_a, skip_b;
    bool swap;      /* exchange .x and .y */
    const char *ty; /* non-NULL: the thread's row (threadIdx.y, after the exchange) is this name */
} tswap;

static bool tswap_visit(TSNode n, void *user)
{
    tswap *t = user;
    if (ts_node_start_byte(n) >= t->skip_a && ts_node_end_byte(n) <= t->skip_b) return false;
    TSNode l = builtin_letter(t->ctx, n);
    if (ts_node_is_null(l) || !rt_text_is(t->ctx, rt_field(n, "argument"), "threadIdx")) return true;
    char to = rt_text_is(t->ctx, l, "x") ? (t->swap ? 'y' : 'x') : rt_text_is(t->ctx, l, "y") ? (t->swap ? 'x' : 'y') : 'z';
    if (to == 'y' && t->ty) co_se_add(t->e, ts_node_start_byte(n), ts_node_end_byte(l), t->ty);
    else if (t->swap && to != 'z') co_se_add(t->e, ts_node_start_byte(l), ts_node_end_byte(l), to == 'x' ? "x" : "y");
    return true;
}

/* The file-level definition of constant `name` (`#define N 16`, `constexpr int N = 16;`): true with
 * its node and whether it is a #define. */
static bool file_constant(const kl_rule_ctx *ctx, const char *name, TSNode *def, bool *define)
{
    if (!name[0] || (name[0] >= '0' && name[0] <= '9')) return false;
    TSNode root = kl_source_root(ctx->src);
    uint32_t n = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < n; i++) {
        TSNode c = ts_node_named_child(root, i);
        if (rt_is(c, "preproc_def") && rt_text_is(ctx, rt_field(c, "name"), name)) {
            *def = c;
            *define = true;
            return true;
        }
        if (rt_is(c, "declaration")) {
            TSNode ds[8];
            unsigned k = rt_declarators(c, ds, 8);
            for (unsigned j = 0; j < k && j < 8; j++)
                if (rt_text_is(ctx, kl_ast_declarator_name(ds[j]), name)) {
                    *def = c;
                    *define = false;
                    return true;
                }
        }
    }
    return false;
}

/* How the index idx of kernel f moves along threadIdx.x and threadIdx.y. */
static kl_status index_strides(const kl_rule_ctx *ctx, const rt_func *f, TSNode idx, kl_stride *sx, kl_stride *sy,
                               kl_error *err)
{
    kl_affine_ctx *ax = NULL;
    const kl_poly *p = NULL;
    kl_status st = kl_rules_affine(ctx, f->def, &ax, err);
    if (st == KL_OK && (st = kl_affine_poly_of(ax, idx, &p)) != KL_OK) st = kl_error_set(err, st, "out of memory");
    if (st == KL_OK) {
        *sx = kl_poly_stride(p, "threadIdx.x", NULL);
        *sy = kl_poly_stride(p, "threadIdx.y", NULL);
    }
    kl_rules_affine_done(ctx, ax);
    return st;
}

static kl_status apply_staged(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, const rt_func *f,
                              const json_t *params, kl_edits *out, kl_error *err)
{
    const char *file = kl_source_name(ctx->src);
    kl_status st = check_swappable(ctx, fs, nf, f, err);
    if (st != KL_OK) return st;
    staged_scan sc = {.ctx = ctx};
    kl_ast_walk(f->body, staged_visit, &sc);
    if (!ts_node_is_null(sc.bad)) {
        kl_span sp = kl_node_span(sc.bad);
        return kl_rule_not_applicable(err, "%s:%u: kernel '%s' uses %s", file, sp.line, f->name, sc.why);
    }
    if (sc.writes != 1)
        return kl_rule_not_applicable(err, "%s: kernel '%s' writes memory at %u places; the staged exchange moves one write",
                                      file, f->name, sc.writes);
    TSNode w = sc.write, lhs = rt_field(w, "left"), rhs = rt_field(w, "right");
    kl_span wsp = kl_node_span(w);
    if (!rt_text_is(ctx, rt_field(w, "operator"), "=") || !rt_is(ts_node_parent(w), "expression_statement"))
        return kl_rule_not_applicable(err, "%s:%u: the write is not a plain `dst[i] = value;` statement", file, wsp.line);
    TSNode base = rt_field(lhs, "argument");
    char elem[128] = "";
    char *bname = rt_is(lhs, "subscript_expression") && rt_is(base, "identifier") ? rt_text(ctx, base) : NULL;
    bool param = bname && rt_pointer_param(ctx, f, bname, elem, sizeof elem) && elem[0];
    free(bname);
    if (!param)
        return kl_rule_not_applicable(err, "%s:%u: the write is not a subscript of a pointer parameter", file, wsp.line);
    for (TSNode a = ts_node_parent(w); !ts_node_is_null(a) && !ts_node_eq(a, f->body); a = ts_node_parent(a))
        if (is_loop(a))
            return kl_rule_not_applicable(err, "%s:%u: the write is inside a loop: a thread writes more than the one element "
                                          "the tile holds for it", file, wsp.line);
    kl_stride sx = KL_STRIDE_ABSENT, sy = KL_STRIDE_ABSENT;
    if ((st = index_strides(ctx, f, kl_ast_subscript_index(lhs), &sx, &sy, err)) != KL_OK) return st;
    if (sy != KL_STRIDE_UNIT || sx == KL_STRIDE_UNIT)
        return kl_rule_not_applicable(err, "%s:%u: the write is not contiguous along threadIdx.y (and strided along .x)",
                                      file, wsp.line);
    long long edge = 0;
    char btext[128];
    if ((st = square_block(ctx, f, &edge, btext, sizeof btext, err)) != KL_OK) return st;
    int64_t rpt = 1;
    if (!kl_rule_param_int(&kl_rule_coalesce, params, "rows_per_thread", &rpt) || rpt < 1 || rpt > 8 || (rpt & (rpt - 1)))
        return kl_error_set(err, KL_ERR_INVALID, "%s: rows_per_thread must be 1, 2, 4 or 8", file);
    if (edge % rpt || edge / rpt < 1)
        return kl_rule_not_applicable(err, "%s: the %lld x %lld tile has no %lld equal parts of rows", file, edge, edge,
                                      (long long)rpt);
    if (rpt > 1 && rt_count_ident(ctx, f->body, "blockDim"))
        return kl_rule_not_applicable(err,
                                      "%s: kernel '%s' reads blockDim, which a block of %lld x %lld would change "
                                      "(rows_per_thread=1 keeps the block)",
                                      file, f->name, edge, edge / rpt);
    const char *tile = rt_count_ident(ctx, f->def, "tile") ? "coalesce_tile" : "tile";
    if (rt_count_ident(ctx, f->def, tile))
        return kl_rule_not_applicable(err, "%s: kernel '%s' already uses the names 'tile' and 'coalesce_tile'", file, f->name);
    char ty[32] = "", part[32] = "", rows_name[160] = "", step[200];
    rt_fresh_name(ctx, f->def, "ty", ty, sizeof ty);
    rt_fresh_name(ctx, f->def, "j", part, sizeof part);
    /* the rows of the block: a constant beside the tile's (`#define BLOCK_ROWS 4`), the loops over
     * rows stepping by it from 0 (the blog-style form block-size and coalesce read) */
    TSNode cdef = {0};
    bool define = false;
    if (rpt > 1 && file_constant(ctx, btext, &cdef, &define)) {
        char rbase[160];
        kl_snprintf(rbase, sizeof rbase, "%s_ROWS", btext);
        rt_fresh_name(ctx, ts_node_parent(f->def), rbase, rows_name, sizeof rows_name);
        while (!ts_node_is_null(ts_node_parent(cdef)) && !rt_is(ts_node_parent(cdef), "translation_unit"))
            cdef = ts_node_parent(cdef);
    }
    if (rows_name[0]) kl_snprintf(step, sizeof step, "%s", rows_name);
    else kl_snprintf(step, sizeof step, "%s / %lld", btext, (long long)rpt);
    /* the body between its braces, which must sit on lines of their own */
    uint32_t bs = ts_node_start_byte(f->body), be = ts_node_end_byte(f->body);
    uint32_t a = rt_line_end(ctx, bs), b = rt_line_start(ctx, be - 1);
    bool braces_ok = a <= b && rt_line_blank_before(ctx, be - 1);
    for (uint32_t i = bs + 1; braces_ok && i + 1 < a; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\r') braces_ok = false;
    if (!braces_ok || !ts_node_named_child_count(f->body))
        return kl_rule_not_applicable(err, "%s: kernel '%s': expected its body's braces on lines of their own", file, f->name);
    char ind[64] = "    ";
    rt_indent_of(ctx, ts_node_start_byte(ts_node_named_child(f->body, 0)), ind, sizeof ind);
    /* phase 1: the write goes into the tile; phase 2: the roles exchanged, the value from the tile.
     * With several rows per thread, the thread's row of the tile (threadIdx.y, after the
     * exchange) is `ty`, one of its rows per pass of a loop. */
    const char *row = rpt > 1 ? ty : "threadIdx.y";
    char store[192], load[192];
    kl_snprintf(store, sizeof store, "%s[%s][threadIdx.x]", tile, row);
    kl_snprintf(load, sizeof load, "%s[threadIdx.x][%s]", tile, row);
    span_edits e1 = {0}, e2 = {0};
    co_se_add(&e1, ts_node_start_byte(lhs), ts_node_end_byte(lhs), store);
    co_se_add(&e2, ts_node_start_byte(rhs), ts_node_end_byte(rhs), load);
    if (rpt > 1) {
        tswap t1 = {ctx, &e1, ts_node_start_byte(lhs), ts_node_end_byte(lhs), false, ty};
        kl_ast_walk(f->body, tswap_visit, &t1);
    }
    tswap t2 = {ctx, &e2, ts_node_start_byte(rhs), ts_node_end_byte(rhs), true, rpt > 1 ? ty : NULL};
    kl_ast_walk(f->body, tswap_visit, &t2);
    int depth = rpt > 1 ? (sc.has_return ? 8 : 4) : 4;
    char *p1 = co_se_splice(ctx, a, b, &e1), *p2 = co_se_splice(ctx, a, b, &e2);
    char *r1 = p1 ? rt_reindent(p1, strlen(p1), depth) : NULL, *r2 = p2 ? rt_reindent(p2, strlen(p2), depth) : NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *open = sc.has_return ? "[&]() {" : "{", *close = sc.has_return ? "}();" : "}";
    if (r1 && r2 && rpt == 1) {
        kl_strbuf_addf(&sb, "%s%s\n%s__shared__ %s %s[%s][%s];\n", ind, STAGED_MARKER, ind, elem, tile, btext, btext);
        kl_strbuf_addf(&sb, "%s%s\n%s%s%s\n%s__syncthreads();\n", ind, open, r1, ind, close, ind);
        kl_strbuf_addf(&sb, "%s%s\n%s%s%s\n", ind, open, r2, ind, close);
    } else if (r1 && r2) {
        kl_strbuf_addf(&sb, rows_name[0] ? "%s%s; each thread moves %s / %s of its rows\n%s__shared__ %s %s[%s][%s];\n"
                                         : "%s%s; each thread moves %s / (%s) of its rows\n%s__shared__ %s %s[%s][%s];\n",
                       ind, STAGED_MARKER, btext, step, ind, elem, tile, btext, btext);
        for (int phase = 0; phase < 2; phase++) {
            kl_strbuf_addf(&sb, "%sfor (int %s = 0; %s < %s; %s += %s) {\n", ind, part, part, btext, part, step);
            kl_strbuf_addf(&sb, "%s    const unsigned int %s = threadIdx.y + %s;\n", ind, ty, part);
            if (sc.has_return) kl_strbuf_addf(&sb, "%s    %s\n", ind, open);
            kl_strbuf_adds(&sb, phase ? r2 : r1);
            if (sc.has_return) kl_strbuf_addf(&sb, "%s    %s\n", ind, close);
            kl_strbuf_addf(&sb, "%s}\n", ind);
            if (!phase) kl_strbuf_addf(&sb, "%s__syncthreads();\n", ind);
        }
    }
    st = (!r1 || !r2 || sb.failed) ? KL_ERR_NOMEM : kl_edits_add(out, a, b, kl_strbuf_str(&sb));
    if (st == KL_OK && rows_name[0]) {
        uint32_t at = rt_line_end(ctx, ts_node_end_byte(cdef) - 1);
        if (define) st = kl_edits_addf(out, at, at, "#define %s %lld\n", rows_name, edge / rpt);
        else st = kl_edits_addf(out, at, at, "constexpr int %s = %lld;\n", rows_name, edge / rpt);
    }
    kl_strbuf_release(&sb);
    free(p1);
    free(p2);
    free(r1);
    free(r2);
    co_se_release(&e1);
    co_se_release(&e2);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    return rpt > 1 ? narrow_blocks(ctx, f, rpt, rows_name, out, err) : KL_OK;
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
        if (!ts_node_is_null(l) && rt_text_is(ctx, rt_field(n, "argument"), b)) {
            char s1[2] = {c, 0};
            yes = rt_text_is(ctx, l, s1);
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

static bool has_marker(const kl_rule_ctx *ctx, const rt_func *f)
{
    return rt_has_marker(ctx, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "coalesce:");
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    kl_status st = KL_OK;
    for (unsigned i = 0; i < nf; i++) {
        const rt_func *f = &fs[i];
        if (!f->global) continue;
        if (!uses_letter(ctx, f->body, "threadIdx", 'x') || !uses_letter(ctx, f->body, "threadIdx", 'y')) continue;
        kl_affine_ctx *ax = NULL;
        if ((st = kl_rules_affine(ctx, f->def, &ax, err)) != KL_OK) return st;
        tally t = {.ctx = ctx, .f = f, .ax = ax, .st = KL_OK};
        kl_ast_walk(f->body, tally_visit, &t);
        kl_rules_affine_done(ctx, ax);
        if (t.st != KL_OK) return kl_error_set(err, t.st, "out of memory");
        kl_span sp = kl_node_span(f->def);
        char id[200];
        kl_snprintf(id, sizeof id, "%s:%u", f->name, sp.line);
        json_t *feat = json_pack("{s:i, s:i, s:i, s:i, s:i}", "coalesced_x", (int)t.x_unit, "coalesced_y",
                                 (int)t.y_unit, "strided", (int)t.strided, "reads_along_y", (int)t.reads_y,
                                 "writes_along_y", (int)t.writes_y);
        staged_form sf;
        char why[300] = "";
        int staged = co_find_staged(ctx, f, &sf, why, sizeof why);
        /* a tile and a barrier that are not the exchange (a stencil's halo…) are no site
         * unless the kernel says it is coalesced that way */
        if (staged < 0 && !has_marker(ctx, f) && !sf.exchange) staged = 0;
        if (staged) {
            json_object_set_new(feat, "staged", json_true());
            json_object_set_new(feat, "tile", json_string(sf.tile));
            if (staged < 0) json_object_set_new(feat, "why_not", json_string(why));
        }
        if (staged || has_marker(ctx, f)) {
            KL_TRY(kl_sites_add(out, id, KL_SITE_PRESENT, sp, f->name, feat, json_object(),
                                staged ? "a staged exchange through a shared tile (the read and the write both along "
                                         "threadIdx.x)"
                                       : "threadIdx.x on the contiguous dimension (marked)"));
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

static kl_status swap_kernel(const kl_rule_ctx *ctx, const rt_func *f, kl_edits *out, kl_error *err)
{
    swap_collect s = {.ctx = ctx, .out = out, .st = KL_OK};
    kl_ast_walk(f->body, swap_visit, &s);
    if (s.st != KL_OK) return kl_error_set(err, s.st, "out of memory");
    return KL_OK;
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                       kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    json_t *ns = site->features ? json_object_get(site->features, "needs_staging") : NULL;
    if (ns && json_is_true(ns)) return apply_staged(ctx, fs, nf, f, params, out, err);
    kl_status st = check_swappable(ctx, fs, nf, f, err);
    if (st != KL_OK) return st;
    if ((st = swap_launches(ctx, f, out, err)) != KL_OK) return st;
    if ((st = swap_kernel(ctx, f, out, err)) != KL_OK) return st;
    /* the marker, first in the body */
    TSNode first = ts_node_named_child(f->body, 0);
    char ind[64] = "    ";
    if (!ts_node_is_null(first)) rt_indent_of(ctx, ts_node_start_byte(first), ind, sizeof ind);
    uint32_t at = rt_line_end(ctx, ts_node_start_byte(f->body));
    if (!rt_line_blank_before(ctx, ts_node_end_byte(f->body) - 1) || at > ts_node_end_byte(f->body))
        return kl_rule_not_applicable(err, "%s: kernel '%s': expected its body's braces on lines of their own",
                            kl_source_name(ctx->src), f->name);
    if ((st = kl_edits_addf(out, at, at, "%s%s\n", ind, MARKER)) != KL_OK) return kl_error_set(err, st, "out of memory");
    return KL_OK;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    staged_form sf;
    char why[300] = "";
    int staged = co_find_staged(ctx, f, &sf, why, sizeof why);
    if (staged > 0) return co_remove_staged(ctx, f, &sf, out, err);
    if (staged < 0)
        return kl_rule_not_applicable(err, "%s: kernel '%s': the staged exchange cannot be undone: %s",
                                      kl_source_name(ctx->src), f->name, why);
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
        if (!rt_is(n, "comment") || !rt_has_marker(ctx, ts_node_start_byte(n), ts_node_end_byte(n), "coalesce:"))
            continue;
        uint32_t a, b;
        rt_stmt_range(ctx, n, NULL, &a, &b);
        if ((st = kl_edits_add(out, a, b, "")) != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

const kl_rule kl_rule_coalesce = {
    NAME,
    "threadIdx.x on the non-contiguous dimension -> x and y roles swapped so that a warp reads contiguous memory",
    coalesce_params,
    sizeof coalesce_params / sizeof coalesce_params[0],
    find,
    remove_site,
    apply,
};
