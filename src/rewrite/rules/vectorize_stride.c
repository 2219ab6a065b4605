/* vectorize, the grid-stride form: see vectorize_stride.h.
 *
 * applicable: `for (T i = V; i < N; i += S) body` in a kernel where V is the global thread
 *   index (C*blockIdx.x + threadIdx.x, or blockDim.x*blockIdx.x + threadIdx.x), S the grid's
 *   thread count (C*gridDim.x, blockDim.x*gridDim.x), N invariant in the loop, and i used only
 *   as the whole index of reads `p[i]` of const pointer parameters (at most 4 arrays) whose
 *   element type has a W-wide vector (4-byte types: float2/4, int2/4, uint2/4; bytes: uchar4 /
 *   char4, or 8 and 16 bytes packed in uint2 / uint4; double2); no return, break, continue,
 *   lambda or barrier in the body.
 * apply: thread t reads vectors t, t+S, … of every array (the grid covers vector indexes the way
 *   it covered element indexes), and runs the body once per element of the vector, in element
 *   order; the original loop, started at element nv*W + V, does the rest. nv is 0 when an
 *   array's address is not W-element aligned (a run-time test), so every layout stays correct.
 * present: `const T NV = …;` then `for (T v = V; v < NV; v += S) …` then a loop
 *   `for (T i = V + NV * W; …)`: remove deletes the declaration and the vector loop (with the
 *   marker comment above them) and starts the last loop at V again. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/vectorize_stride.h"
#include "util/util.h"

#define VS_MAXARR 4
#define VS_MARKER "vectorize:"

typedef struct vs_array {
    char name[64];
    char elem[64];           /* without const */
    unsigned size;           /* bytes */
} vs_array;

typedef struct vs_loop {
    TSNode loop, value, bound, stride, body;
    char var[64], type[64];
    vs_array arr[VS_MAXARR];
    unsigned narr;
    char why[256];
} vs_loop;

static bool text_copy(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    if (ts_node_is_null(n) || b - a >= size) return false;
    memcpy(buf, ctx->text + a, b - a);
    buf[b - a] = '\0';
    return true;
}

/* ---- the body --------------------------------------------------------------------------------- */

typedef struct vs_scan {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    vs_loop *L;
    TSNode bad;
    char why[200];
} vs_scan;

/* Is the subscript s written (left of an assignment, ++/--, or its address taken)? */
static bool written(TSNode s)
{
    TSNode p = ts_node_parent(s);
    while (rt_is(p, "parenthesized_expression")) {
        s = p;
        p = ts_node_parent(p);
    }
    if (rt_is(p, "assignment_expression") && ts_node_eq(rt_field(p, "left"), s)) return true;
    if (rt_is(p, "update_expression")) return true;
    if (rt_is(p, "pointer_expression")) return true;
    return false;
}

/* Is parameter `name` a pointer to const data (`const T *p`, `T const *p`)? */
static bool const_data(const kl_rule_ctx *ctx, const rt_func *f, const char *name)
{
    TSNode p = rt_param(ctx, f, name);
    uint32_t c = ts_node_is_null(p) ? 0 : ts_node_named_child_count(p);
    for (uint32_t i = 0; i < c; i++) {
        TSNode q = ts_node_named_child(p, i);
        if (rt_is(q, "type_qualifier") && rt_text_is(ctx, q, "const")) return true;
    }
    return false;
}

static bool scan_visit(TSNode n, void *user)
{
    vs_scan *s = user;
    if (!ts_node_is_null(s->bad)) return false;
    const char *what = rt_is(n, "return_statement") ? "a return"
                       : rt_is(n, "break_statement") ? "a break"
                       : rt_is(n, "continue_statement") ? "a continue"
                       : rt_is(n, "goto_statement") ? "a goto"
                       : rt_is(n, "lambda_expression") ? "a lambda"
                       : NULL;
    if (!what && rt_is(n, "call_expression") && rt_text_is(s->ctx, rt_field(n, "function"), "__syncthreads"))
        what = "a barrier";
    if (what) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "the loop body holds %s (written once per element it would repeat)", what);
        return false;
    }
    if (!rt_is(n, "identifier") || !rt_text_is(s->ctx, n, s->L->var)) return true;
    TSNode list = ts_node_parent(n), sub = ts_node_parent(list);
    TSNode arr = rt_field(sub, "argument");
    if (!rt_is(sub, "subscript_expression") || !ts_node_eq(rt_field(sub, "indices"), list) ||
        ts_node_named_child_count(list) != 1 || !rt_is(arr, "identifier")) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "'%s' is used other than as the index of an array, p[%s]", s->L->var, s->L->var);
        return false;
    }
    char name[64], elem[64];
    if (!text_copy(s->ctx, arr, name, sizeof name) || !rt_pointer_param(s->ctx, s->f, name, elem, sizeof elem)) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "'%.60s[%s]' is not a read of a pointer parameter", name, s->L->var);
        return false;
    }
    if (!const_data(s->ctx, s->f, name) || written(sub)) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why,
                    "'%s' is not a const pointer parameter read at %s (a vector load could miss its own writes)", name,
                    s->L->var);
        return false;
    }
    for (unsigned i = 0; i < s->L->narr; i++)
        if (!strcmp(s->L->arr[i].name, name)) return false;
    if (s->L->narr == VS_MAXARR) {
        s->bad = n;
        kl_snprintf(s->why, sizeof s->why, "more than %d arrays are read at %s", VS_MAXARR, s->L->var);
        return false;
    }
    vs_array *a = &s->L->arr[s->L->narr++];
    kl_snprintf(a->name, sizeof a->name, "%s", name);
    const char *e = elem;
    while (!strncmp(e, "const ", 6)) e += 6;
    kl_snprintf(a->elem, sizeof a->elem, "%s", e);
    a->size = rt_type_size(a->elem);
    return false;
}

/* Is `name` assigned (=, op=, ++, --) inside n? */
typedef struct assigned_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    bool yes;
} assigned_scan;

static bool assigned_visit(TSNode n, void *user)
{
    assigned_scan *a = user;
    if (a->yes) return false;
    TSNode t = {0};
    if (rt_is(n, "assignment_expression")) t = kl_ast_unparen(rt_field(n, "left"));
    else if (rt_is(n, "update_expression")) t = kl_ast_unparen(rt_field(n, "argument"));
    if (!ts_node_is_null(t) && rt_is(t, "identifier") && rt_text_is(a->ctx, t, a->name)) a->yes = true;
    return !a->yes;
}

typedef struct bound_scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    char bad[64];
} bound_scan;

static bool bound_visit(TSNode n, void *user)
{
    bound_scan *b = user;
    if (b->bad[0] || !rt_is(n, "identifier")) return !b->bad[0];
    char name[64];
    if (!text_copy(b->ctx, n, name, sizeof name)) return true;
    assigned_scan a = {b->ctx, name, false};
    kl_ast_walk(b->body, assigned_visit, &a);
    if (a.yes) kl_snprintf(b->bad, sizeof b->bad, "%s", name);
    return true;
}

/* ---- the loop ---------------------------------------------------------------------------------- */

/* *form: loop is this form (L->why then says why it cannot be vectorized, or is empty). KL_ERR_NOMEM
 * when memory runs out. */
static kl_status analyse(const kl_rule_ctx *ctx, const rt_func *f, kl_affine_ctx *ax, TSNode loop, vs_loop *L,
                         bool *form)
{
    *form = false;
    memset(L, 0, sizeof *L);
    L->loop = loop;
    TSNode init = rt_field(loop, "initializer"), cond = kl_ast_unparen(rt_field(loop, "condition")),
           upd = rt_field(loop, "update");
    if (!rt_is(init, "declaration") || ts_node_named_child_count(init) != 2) return KL_OK;
    TSNode d = rt_field(init, "declarator");
    if (!rt_is(d, "init_declarator") || !rt_is(rt_field(d, "declarator"), "identifier")) return KL_OK;
    L->value = rt_field(d, "value");
    if (!text_copy(ctx, rt_field(d, "declarator"), L->var, sizeof L->var)) return KL_OK;
    char type[64];
    uint32_t ta = ts_node_start_byte(init), tb = ts_node_start_byte(d);
    if (tb - ta >= sizeof type) return KL_OK;
    kl_snprintf(type, sizeof type, "%.*s", (int)(tb - ta), ctx->text + ta);
    size_t tl = strlen(type);
    while (tl && (type[tl - 1] == ' ' || type[tl - 1] == '\t')) type[--tl] = '\0';
    kl_snprintf(L->type, sizeof L->type, "%s", type);
    const kl_poly *pv, *ps, *pb;
    kl_grid_index g;
    kl_status st = kl_affine_poly_of(ax, L->value, &pv);
    if (st != KL_OK || !kl_poly_grid_index(pv, &g)) return st;
    /* i += S, S the grid's thread count */
    if (!rt_is(upd, "assignment_expression") || !rt_text_is(ctx, rt_field(upd, "operator"), "+=") ||
        !rt_text_is(ctx, kl_ast_unparen(rt_field(upd, "left")), L->var))
        return KL_OK;
    L->stride = rt_field(upd, "right");
    if ((st = kl_affine_poly_of(ax, L->stride, &ps)) != KL_OK || kl_poly_grid_multiple(ps, &g) != 1) return st;
    /* i < N */
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, rt_field(cond, "operator"), "<") ||
        !rt_text_is(ctx, kl_ast_unparen(rt_field(cond, "left")), L->var))
        return KL_OK;
    L->bound = rt_field(cond, "right");
    L->body = rt_field(loop, "body");
    if ((st = kl_affine_poly_of(ax, L->bound, &pb)) != KL_OK) return st;
    *form = true; /* the form; what follows finds why it cannot be vectorized */
    if (rt_count_ident(ctx, L->bound, L->var) || kl_poly_depends(pb, "threadIdx") || kl_poly_depends(pb, "blockIdx.x")) {
        kl_snprintf(L->why, sizeof L->why, "the bound of '%s' is not the same for every thread and pass", L->var);
        return KL_OK;
    }
    bound_scan bs = {ctx, L->body, ""};
    kl_ast_walk(L->bound, bound_visit, &bs);
    if (bs.bad[0]) {
        kl_snprintf(L->why, sizeof L->why, "the loop body assigns '%s', which the bound reads", bs.bad);
        return KL_OK;
    }
    vs_scan s = {.ctx = ctx, .f = f, .L = L};
    kl_ast_walk(L->body, scan_visit, &s);
    if (!ts_node_is_null(s.bad)) {
        kl_snprintf(L->why, sizeof L->why, "%s (line %u)", s.why, kl_node_span(s.bad).line);
        return KL_OK;
    }
    if (!L->narr) {
        kl_snprintf(L->why, sizeof L->why, "the loop reads no array at '%s'", L->var);
        return KL_OK;
    }
    return KL_OK;
}

/* The vector type holding w elements of a (its text into vt), and whether elements are packed
 * bytes of 32-bit words (uint2/uint4 of u8) rather than fields. False: no such vector. */
static bool vec_type(const vs_array *a, int w, char *vt, size_t size, bool *packed)
{
    const char *e = a->elem;
    *packed = false;
    if (a->size == 4 && (w == 2 || w == 4)) {
        const char *base = !strcmp(e, "float") ? "float"
                           : (!strcmp(e, "int") || !strcmp(e, "int32_t")) ? "int"
                           : (!strcmp(e, "unsigned") || !strcmp(e, "unsigned int") || !strcmp(e, "uint32_t")) ? "uint"
                                                                                                              : NULL;
        if (!base) return false;
        kl_snprintf(vt, size, "%s%d", base, w);
        return true;
    }
    if (a->size == 1) {
        bool u = !strcmp(e, "uint8_t") || !strcmp(e, "unsigned char");
        bool sgn = !strcmp(e, "int8_t") || !strcmp(e, "char") || !strcmp(e, "signed char");
        if (!u && !sgn) return false;
        if (w == 4) {
            kl_snprintf(vt, size, "%s", u ? "uchar4" : "char4");
            return true;
        }
        if (w == 8 || w == 16) {
            kl_snprintf(vt, size, "%s", w == 8 ? "uint2" : "uint4");
            *packed = true;
            return true;
        }
        return false;
    }
    if (a->size == 8 && !strcmp(e, "double") && w == 2) {
        kl_snprintf(vt, size, "double2");
        return true;
    }
    return false;
}

/* ---- find ---------------------------------------------------------------------------------------- */

typedef struct vs_present {
    TSNode decl, vloop, tail, tail_value, start; /* start: the V of the tail's `NV * W + V` */
    long long width;
} vs_present;

/* `V + NV * W` or `NV * W + V` with NV the name nv: W and V (written `V + NV * W`, a sum V parses
 * as the left operand whole). */
static bool tail_start(const kl_rule_ctx *ctx, TSNode value, const char *nv, long long *w, TSNode *v)
{
    value = kl_ast_unparen(value);
    if (!rt_is(value, "binary_expression") || !rt_text_is(ctx, rt_field(value, "operator"), "+")) return false;
    for (int side = 0; side < 2; side++) {
        TSNode m = kl_ast_unparen(rt_field(value, side ? "right" : "left"));
        if (!rt_is(m, "binary_expression") || !rt_text_is(ctx, rt_field(m, "operator"), "*")) continue;
        if (!rt_text_is(ctx, kl_ast_unparen(rt_field(m, "left")), nv)) continue;
        if (!rt_const_eval(ctx, (TSNode){0}, rt_field(m, "right"), w) || *w < 2) continue;
        *v = rt_field(value, side ? "left" : "right");
        return true;
    }
    return false;
}

/* The next statement, past comments and preprocessor lines (a `#pragma unroll` kept above the
 * scalar loop). */
static TSNode next_stmt(TSNode n)
{
    do n = rt_next_stmt(n);
    while (!ts_node_is_null(n) && kl_str_starts(ts_node_type(n), "preproc"));
    return n;
}

/* Is `decl` the start of this form's vector part: `const T NV = …;`, a loop `for (T v = V; v <
 * NV; v += S)`, then a loop `for (T i = V + NV * W; …)`? */
static bool present_at(const kl_rule_ctx *ctx, TSNode decl, vs_present *p)
{
    memset(p, 0, sizeof *p);
    if (!rt_is(decl, "declaration") || ts_node_named_child_count(decl) < 2) return false;
    TSNode d = rt_field(decl, "declarator");
    if (!rt_is(d, "init_declarator")) return false;
    char nv[64];
    if (!text_copy(ctx, kl_ast_declarator_name(d), nv, sizeof nv)) return false;
    TSNode vl = rt_next_stmt(decl), tl = ts_node_is_null(vl) ? vl : next_stmt(vl);
    if (!rt_is(vl, "for_statement") || !rt_is(tl, "for_statement")) return false;
    TSNode vc = kl_ast_unparen(rt_field(vl, "condition")), vi = rt_field(vl, "initializer");
    if (!rt_is(vc, "binary_expression") || !rt_text_is(ctx, rt_field(vc, "operator"), "<") ||
        !rt_text_is(ctx, kl_ast_unparen(rt_field(vc, "right")), nv) || !rt_is(vi, "declaration"))
        return false;
    TSNode ti = rt_field(tl, "initializer");
    if (!rt_is(ti, "declaration")) return false;
    TSNode vd = rt_field(vi, "declarator"), td = rt_field(ti, "declarator");
    if (!rt_is(vd, "init_declarator") || !rt_is(td, "init_declarator")) return false;
    TSNode start;
    if (!tail_start(ctx, rt_field(td, "value"), nv, &p->width, &start)) return false;
    if (!rt_same_text(ctx, start, rt_field(vd, "value"))) return false;
    if (!rt_same_text(ctx, rt_field(vl, "update"), rt_field(tl, "update")) &&
        !rt_text_is(ctx, rt_field(rt_field(vl, "update"), "operator"), "+="))
        return false;
    p->decl = decl, p->vloop = vl, p->tail = tl, p->tail_value = rt_field(td, "value"), p->start = start;
    return true;
}

typedef struct vs_find_walk {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    kl_affine_ctx *ax;
    const char *name;
    kl_sites *out;
    kl_status st;
    uint32_t skip_a, skip_b; /* the vector loop of a present site: not a site of its own */
} vs_find_walk;

static bool find_visit(TSNode n, void *user)
{
    vs_find_walk *w = user;
    if (w->st != KL_OK) return false;
    if (ts_node_start_byte(n) >= w->skip_a && ts_node_end_byte(n) <= w->skip_b) return true;
    vs_present p;
    if (rt_is(n, "declaration") && present_at(w->ctx, n, &p)) {
        char id[256], note[200], wv[16];
        kl_site_id(id, sizeof id, w->name, p.vloop, NULL);
        /* the grid's form starts at the global thread index, the thread-strided one (a warp or a block
         * over a row: vectorize_lane.h) at the thread's index in its group */
        const kl_poly *pv;
        kl_grid_index g;
        if ((w->st = kl_affine_poly_of(w->ax, p.start, &pv)) != KL_OK) return false;
        bool grid = kl_poly_grid_index(pv, &g);
        if (grid) kl_snprintf(note, sizeof note, "a grid-stride loop over %lld-element vectors, then the scalar loop", p.width);
        else
            kl_snprintf(note, sizeof note,
                        "a thread-strided loop over %lld-element vectors (%lld consecutive elements a thread a step), "
                        "then the scalar loop",
                        p.width, p.width);
        kl_snprintf(wv, sizeof wv, "%lld", p.width);
        json_t *feat = json_pack("{s:s, s:I}", "form", grid ? "grid-stride" : "thread-stride", "width", (json_int_t)p.width);
        w->st = feat ? kl_sites_add(w->out, id, KL_SITE_PRESENT, kl_node_span(p.vloop), w->name, feat,
                                    json_pack("{s:s}", "width", wv), note)
                     : KL_ERR_NOMEM;
        w->skip_a = ts_node_start_byte(p.vloop), w->skip_b = ts_node_end_byte(p.tail);
        return false;
    }
    if (!rt_is(n, "for_statement")) return true;
    vs_loop L;
    bool form;
    if ((w->st = analyse(w->ctx, w->f, w->ax, n, &L, &form)) != KL_OK) return false;
    if (!form) return true;
    json_t *arrs = json_array();
    for (unsigned k = 0; k < L.narr; k++)
        json_array_append_new(arrs, json_pack("{s:s, s:s}", "array", L.arr[k].name, "dtype", L.arr[k].elem));
    json_t *feat = json_pack("{s:s, s:s, s:o, s:s}", "form", "grid-stride", "contiguous_in", L.var, "arrays", arrs,
                             "alignment_guard", "run time, before the loop");
    if (!feat) {
        w->st = KL_ERR_NOMEM;
        return false;
    }
    char fb[300];
    if (kl_vec_fallback(w->ctx, w->f->def, n, fb, sizeof fb)) kl_snprintf(L.why, sizeof L.why, "%s", fb);
    if (L.why[0]) json_object_set_new(feat, "why_not", json_string(L.why));
    char id[256], note[200];
    kl_site_id(id, sizeof id, w->name, n, NULL);
    kl_snprintf(note, sizeof note, "a grid-stride loop over %s reading %u const array%s at %s", L.var, L.narr,
                L.narr == 1 ? "" : "s", L.var);
    w->st = kl_sites_add(w->out, id, KL_SITE_APPLICABLE, kl_node_span(n), w->name, feat, NULL, note);
    return true;
}

static const rt_func *func_of(const kl_rule_ctx *ctx, TSNode fn, rt_func *fs, unsigned max)
{
    unsigned nf = rt_functions(ctx, fs, max);
    for (unsigned i = 0; i < nf; i++)
        if (ts_node_eq(fs[i].def, fn)) return &fs[i];
    return NULL;
}

kl_status kl_vs_find(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, kl_sites *out)
{
    rt_func fs[64];
    const rt_func *f = func_of(ctx, fn, fs, 64);
    if (!f) return KL_OK;
    vs_find_walk w = {ctx, f, ax, name, out, KL_OK, 0, 0};
    kl_ast_walk(f->body, find_visit, &w);
    return w.st;
}

bool kl_vs_is_site(const kl_site *site)
{
    const char *form = site->features ? json_string_value(json_object_get(site->features, "form")) : NULL;
    if (!form) return false;
    /* the thread-strided form is vectorize.c's to apply, this file's to read back and remove */
    return !strcmp(form, "grid-stride") || (!strcmp(form, "thread-stride") && site->dir == KL_SITE_PRESENT);
}

/* ---- apply ---------------------------------------------------------------------------------------- */

typedef struct lane_sub {
    const kl_rule_ctx *ctx;
    const vs_loop *L;
    char (*vname)[72];
    const bool *packed;
    int lane;
    kl_edits *e;
    kl_status st;
} lane_sub;

static bool lane_visit(TSNode n, void *user)
{
    lane_sub *s = user;
    if (s->st != KL_OK) return false;
    if (!rt_is(n, "subscript_expression")) return true;
    TSNode list = rt_field(n, "indices");
    if (ts_node_named_child_count(list) != 1 || !rt_text_is(s->ctx, ts_node_named_child(list, 0), s->L->var)) return true;
    for (unsigned k = 0; k < s->L->narr; k++) {
        if (!rt_text_is(s->ctx, rt_field(n, "argument"), s->L->arr[k].name)) continue;
        static const char comp[] = "xyzw";
        uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
        if (s->packed[k]) {
            int word = s->lane / 4, shift = 8 * (s->lane % 4);
            if (shift)
                s->st = kl_edits_addf(s->e, a, b, "(%s)(%s.%c >> %d)", s->L->arr[k].elem, s->vname[k], comp[word], shift);
            else s->st = kl_edits_addf(s->e, a, b, "(%s)%s.%c", s->L->arr[k].elem, s->vname[k], comp[word]);
        } else s->st = kl_edits_addf(s->e, a, b, "%s.%c", s->vname[k], comp[s->lane]);
        return false;
    }
    return true;
}

/* Does the body declare anything at its top level (then each copy keeps its own braces)? */
static bool declares(TSNode body)
{
    if (!rt_is(body, "compound_statement")) return rt_is(body, "declaration");
    uint32_t c = ts_node_named_child_count(body);
    for (uint32_t i = 0; i < c; i++)
        if (rt_is(ts_node_named_child(body, i), "declaration")) return true;
    return false;
}

static kl_status site_loop(const kl_rule_ctx *ctx, const kl_site *site, rt_func *fs, const rt_func **f, TSNode *loop,
                           kl_error *err)
{
    unsigned nf = rt_functions(ctx, fs, 64);
    *f = rt_function_named(fs, nf, site->kernel);
    if (!*f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    TSNode n = ts_node_descendant_for_byte_range((*f)->body, site->span.start, site->span.start);
    while (!ts_node_is_null(n) && !(rt_is(n, "for_statement") && ts_node_start_byte(n) == site->span.start))
        n = ts_node_parent(n);
    if (ts_node_is_null(n))
        return kl_rule_not_applicable(err, "%s:%u: no loop at the site %s", kl_source_name(ctx->src), site->span.line,
                                      site->id);
    *loop = n;
    return KL_OK;
}

kl_status kl_vs_apply(const kl_rule_ctx *ctx, const kl_site *site, int width, kl_edits *out, kl_error *err)
{
    const char *file = kl_source_name(ctx->src);
    rt_func fs[64];
    const rt_func *f;
    TSNode loop;
    kl_status st = site_loop(ctx, site, fs, &f, &loop, err);
    if (st != KL_OK) return st;
    kl_affine_ctx *ax = NULL;
    if ((st = kl_rules_affine(ctx, f->def, &ax, err)) != KL_OK) return st;
    vs_loop L;
    bool form;
    st = analyse(ctx, f, ax, loop, &L, &form);
    kl_rules_affine_done(ctx, ax);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    if (!form) return kl_rule_not_applicable(err, "%s:%u: not a grid-stride loop", file, site->span.line);
    if (L.why[0]) return kl_rule_not_applicable(err, "%s:%u: %s", file, site->span.line, L.why);
    char vt[VS_MAXARR][32], vname[VS_MAXARR][72];
    bool packed[VS_MAXARR];
    for (unsigned k = 0; k < L.narr; k++) {
        if (!vec_type(&L.arr[k], width, vt[k], sizeof vt[k], &packed[k]))
            return kl_rule_not_applicable(err, "%s:%u: no %d-element vector of '%s' elements (%s)", file, site->span.line,
                                          width, L.arr[k].elem, L.arr[k].name);
        char want[72];
        kl_snprintf(want, sizeof want, "%s_v", L.arr[k].name);
        rt_fresh_name(ctx, f->outer, want, vname[k], sizeof vname[k]);
    }
    char nv[32], v[32];
    rt_fresh_name(ctx, f->outer, "nv", nv, sizeof nv);
    rt_fresh_name(ctx, f->outer, "v", v, sizeof v);
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(loop)))
        return kl_rule_not_applicable(err, "%s:%u: the loop does not start its own line", file, site->span.line);
    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(loop), ind, sizeof ind);
    char *value = rt_text(ctx, L.value), *bound = rt_text(ctx, L.bound), *stride = rt_text(ctx, L.stride);
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the marker, the element count in whole vectors (0 when an array is misaligned) */
    kl_strbuf_addf(&sb, "%s// vectorize: %d elements per load of", ind, width);
    for (unsigned k = 0; k < L.narr; k++)
        kl_strbuf_addf(&sb, "%s '%s' (%s)", k ? "," : "", L.arr[k].name, vt[k]);
    kl_strbuf_addf(&sb, "; the loop below does the last %s %% %d, or all when an address is not aligned\n", bound, width);
    kl_strbuf_addf(&sb, "%sconst %s %s = ", ind, L.type, nv);
    for (unsigned k = 0; k < L.narr; k++)
        kl_strbuf_addf(&sb, "%sreinterpret_cast<unsigned long long>(%s) %% %u == 0", k ? " && " : "(", L.arr[k].name,
                       L.arr[k].size * (unsigned)width);
    bool atom = rt_is(L.bound, "identifier") || rt_is(L.bound, "number_literal") || rt_is(L.bound, "field_expression");
    kl_strbuf_addf(&sb, atom ? ") ? %s / %d : 0;\n" : ") ? (%s) / %d : 0;\n", bound, width);
    kl_strbuf_addf(&sb, "%sfor (%s %s = %s; %s < %s; %s += %s) {\n", ind, L.type, v, value, v, nv, v, stride);
    for (unsigned k = 0; k < L.narr; k++)
        kl_strbuf_addf(&sb, "%s    const %s %s = reinterpret_cast<const %s*>(%s)[%s];\n", ind, vt[k], vname[k], vt[k],
                       L.arr[k].name, v);
    /* the body once per element: its statements (inside braces of their own when it declares) */
    bool braces = declares(L.body), layout_ok = true;
    uint32_t ba, bb;
    if (rt_is(L.body, "compound_statement")) {
        ba = rt_line_end(ctx, ts_node_start_byte(L.body));
        bb = rt_line_start(ctx, ts_node_end_byte(L.body) - 1);
        layout_ok = bb >= ba && rt_line_blank_before(ctx, ts_node_end_byte(L.body) - 1);
    } else {
        ba = ts_node_start_byte(L.body);
        bb = ts_node_end_byte(L.body);
    }
    for (int lane = 0; lane < width && st == KL_OK && layout_ok; lane++) {
        kl_edits e = {0};
        lane_sub ls = {ctx, &L, vname, packed, lane, &e, KL_OK};
        kl_ast_walk(L.body, lane_visit, &ls);
        char *text = NULL;
        st = ls.st == KL_OK ? kl_edits_apply_range(&e, ctx->text, ba, bb, &text, err) : ls.st;
        kl_edits_release(&e);
        if (st != KL_OK) break;
        if (rt_is(L.body, "compound_statement")) {
            /* its lines, moved from the body's indentation to the new loop's (+4, or +8 in braces) */
            char bind[64];
            rt_indent_of(ctx, ba, bind, sizeof bind);
            int delta = (int)strlen(ind) + (braces ? 8 : 4) - (int)strlen(bind);
            char *moved = rt_reindent(text, strlen(text), delta);
            if (!moved) layout_ok = false;
            else {
                if (braces) kl_strbuf_addf(&sb, "%s    {\n", ind);
                kl_strbuf_adds(&sb, moved);
                if (braces) kl_strbuf_addf(&sb, "%s    }\n", ind);
            }
            free(moved);
        } else if (braces) kl_strbuf_addf(&sb, "%s    {\n%s        %s\n%s    }\n", ind, ind, text, ind);
        else kl_strbuf_addf(&sb, "%s    %s\n", ind, text);
        free(text);
    }
    kl_strbuf_addf(&sb, "%s}\n%s", ind, ind);
    if (st == KL_OK && sb.failed) st = KL_ERR_NOMEM;
    if (st == KL_OK && layout_ok) st = kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(loop)), ts_node_start_byte(loop), kl_strbuf_str(&sb));
    if (st == KL_OK && layout_ok)
        st = kl_edits_addf(out, ts_node_start_byte(L.value), ts_node_end_byte(L.value), "%s + %s * %d", value, nv, width);
    kl_strbuf_release(&sb);
    free(value);
    free(bound);
    free(stride);
    if (!layout_ok)
        return kl_rule_not_applicable(err, "%s:%u: expected the loop body's braces on lines of their own, indented", file,
                                      site->span.line);
    if (st != KL_OK && err->status != st) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- remove ---------------------------------------------------------------------------------------- */

typedef struct present_walk {
    const kl_rule_ctx *ctx;
    uint32_t at;
    vs_present p;
    bool found;
} present_walk;

static bool present_visit(TSNode n, void *user)
{
    present_walk *w = user;
    if (w->found) return false;
    vs_present p;
    if (rt_is(n, "declaration") && present_at(w->ctx, n, &p) && ts_node_start_byte(p.vloop) == w->at) {
        w->p = p;
        w->found = true;
        return false;
    }
    return true;
}

kl_status kl_vs_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    present_walk w = {.ctx = ctx, .at = site->span.start};
    kl_ast_walk(f->body, present_visit, &w);
    if (!w.found)
        return kl_rule_not_applicable(err, "%s:%u: no vector loop with its tail loop at the site %s",
                                      kl_source_name(ctx->src), site->span.line, site->id);
    uint32_t a, b, a2, b2;
    rt_stmt_range(ctx, w.p.decl, VS_MARKER, &a, &b);
    rt_stmt_range(ctx, w.p.vloop, NULL, &a2, &b2);
    kl_status st = kl_edits_add(out, a, b2 > b ? b2 : b, "");
    if (st == KL_OK) {
        char *v = rt_text(ctx, w.p.start);
        st = v ? kl_edits_add(out, ts_node_start_byte(w.p.tail_value), ts_node_end_byte(w.p.tail_value), v) : KL_ERR_NOMEM;
        free(v);
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

bool kl_vs_present_loop(const kl_rule_ctx *ctx, TSNode loop)
{
    if (!rt_is(loop, "for_statement")) return false;
    TSNode d = rt_prev_stmt(loop);
    vs_present p;
    return !ts_node_is_null(d) && present_at(ctx, d, &p) && ts_node_eq(p.vloop, loop);
}
