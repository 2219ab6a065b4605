/* vectorize: scalar accesses to contiguous f32 elements <-> float4 / float2 accesses, the tail
 * handled by a scalar loop.
 *
 * applicable: `for (j = S; j < N; j++) body` whose body reads (and at most one statement writes)
 *   f32 arrays at indices with coefficient 1 on j, every access to those arrays at the same index,
 *   unconditionally, no inner loops, no break/continue/return. Apply keeps j, runs a vector loop
 *   `for (; j + W-1 < N; j += W)` under a run-time alignment guard of every such address at j = S,
 *   the body written once per lane (in order, so reductions into scalars add in the same order),
 *   and the original loop as the tail `for (; j < N; j++)`.
 * present: (1) `if (guard) { … float4 … } else { scalar }`: remove keeps the else branch, which
 *   computes the same range alone — and the else branch of every other if of the function on the
 *   same guard (the guard chooses a layout: a float4 load and its scalar else fill registers in
 *   different orders, so what reads them back must switch too); one site, the first such if; (2) a vector loop (or an if holding only vector loops) over j
 *   followed by a scalar tail loop `for (; j …)` continuing j: remove deletes the vector part, so the
 *   tail starts where the vector loop did; (3) vector loops over `i` from S to a bound B (float4
 *   units) followed by a tail `for (… j = B * W + S; …)`: remove deletes the vector loops and
 *   starts the tail at S. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/vectorize_lane.h"
#include "rewrite/rules/vectorize_cast.h"
#include "rewrite/rules/vectorize_stride.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const width_values[] = {"4", "2", "8", "16", NULL}; /* 8, 16: bytes, grid-stride form */
static const kl_rule_param vec_params[] = {{"width", width_values, "4"}};

/* rt_text that accepts a null node (NULL). */
static char *text_of(const kl_rule_ctx *ctx, TSNode n) { return ts_node_is_null(n) ? NULL : rt_text(ctx, n); }

static bool node_in(TSNode n, TSNode outer)
{
    return ts_node_start_byte(n) >= ts_node_start_byte(outer) && ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* The declarations at the top of a function's body, one named child at a time (the type, then each
 * declarator): `top_decls t = {.body = body}; while (top_decls_next(&t)) … t.decl, t.child`. */
typedef struct top_decls {
    TSNode body;
    TSNode decl, child;
    uint32_t i, k;             /* the next statement of body, the next child of decl */
} top_decls;

static bool top_decls_next(top_decls *t)
{
    while (ts_node_is_null(t->decl) || t->k >= ts_node_named_child_count(t->decl)) {
        if (t->i >= ts_node_named_child_count(t->body)) return false;
        TSNode d = ts_node_named_child(t->body, t->i++);
        t->decl = rt_is(d, "declaration") ? d : (TSNode){0};
        t->k = 0;
    }
    t->child = ts_node_named_child(t->decl, t->k++);
    return true;
}

/* ---- vector text --------------------------------------------------------------------------------- */

typedef struct vec_scan {
    const kl_rule_ctx *ctx;
    TSNode fn;
    int width;           /* 4, 2; 0 none seen */
} vec_scan;

/* The f32 vector width a type names: float4 4, float2 2, else 0. */
static int vec_type_width(const char *t)
{
    if (strstr(t, "float4")) return 4;
    if (strstr(t, "float2")) return 2;
    return 0;
}

static bool vec_visit(TSNode n, void *user)
{
    vec_scan *v = user;
    if (v->width) return false;
    if (rt_is(n, "type_identifier")) {
        char t[64];
        uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
        kl_snprintf(t, sizeof t, "%.*s", (int)(b - a), v->ctx->text + a);
        v->width = vec_type_width(t);
    }
    return !v->width;
}

/* The vector width the subtree uses (its float4/float2 types, or locals declared with one), 0 none. */
static int vec_width(const kl_rule_ctx *ctx, TSNode fn, TSNode n)
{
    vec_scan v = {ctx, fn, 0};
    kl_ast_walk(n, vec_visit, &v);
    if (v.width) return v.width;
    /* identifiers of the subtree declared in fn with a vector type (x4 = reinterpret_cast<…>) */
    top_decls t = {.body = kl_ast_function_body(fn)};
    while (top_decls_next(&t)) {
        TSNode nm = kl_ast_declarator_name(t.child);
        if (!rt_is(nm, "identifier") || node_in(nm, n)) continue;
        char *name = text_of(ctx, nm);
        bool used = name && rt_count_ident(ctx, n, name) > 0;
        free(name);
        if (!used) continue;
        char *type = text_of(ctx, rt_field(t.decl, "type"));
        int w = type ? vec_type_width(type) : 0;
        free(type);
        if (w) return w;
    }
    return 0;
}

/* ---- the scalar fallback of a vector path ------------------------------------------------------ */

/* Is t the name of a CUDA vector type (float4, uint2, uchar4, __half2 …)? */
static bool vector_type_name(const char *t)
{
    static const char *const base[] = {"float", "double", "int", "uint", "short", "ushort", "char", "uchar",
                                       "long", "ulong", "longlong", "ulonglong", "half", "__half", "__nv_bfloat16",
                                       "nv_bfloat16", NULL};
    for (unsigned i = 0; base[i]; i++) {
        size_t n = strlen(base[i]);
        if (strncmp(t, base[i], n)) continue;
        const char *w = t + n;
        if ((w[0] == '2' || w[0] == '3' || w[0] == '4') && !w[1]) return true;
    }
    return false;
}

typedef struct vtype_scan {
    const kl_rule_ctx *ctx;
    char name[32];
} vtype_scan;

static bool vtype_visit(TSNode n, void *user)
{
    vtype_scan *v = user;
    if (v->name[0]) return false;
    if (rt_is(n, "type_identifier")) {
        uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
        if (b - a < sizeof v->name) {
            char t[32];
            kl_snprintf(t, sizeof t, "%.*s", (int)(b - a), v->ctx->text + a);
            if (vector_type_name(t)) kl_snprintf(v->name, sizeof v->name, "%s", t);
        }
    }
    return !v->name[0];
}

typedef struct vlocal_scan {
    const kl_rule_ctx *ctx;
    TSNode in;            /* the subtree whose identifiers are looked up */
    char name[32];        /* the vector type of a local of the function the subtree uses */
} vlocal_scan;

static bool vlocal_visit(TSNode n, void *user)
{
    vlocal_scan *v = user;
    if (v->name[0]) return false;
    if (!rt_is(n, "declaration")) return true;
    vtype_scan t = {v->ctx, ""};
    kl_ast_walk(rt_field(n, "type"), vtype_visit, &t);
    if (!t.name[0]) return true;
    for (uint32_t k = 0; k < ts_node_named_child_count(n) && !v->name[0]; k++) {
        TSNode nm = kl_ast_declarator_name(ts_node_named_child(n, k));
        if (!rt_is(nm, "identifier") || node_in(nm, v->in)) continue;
        char *name = text_of(v->ctx, nm);
        if (name && rt_count_ident(v->ctx, v->in, name) > 0) kl_snprintf(v->name, sizeof v->name, "%s", t.name);
        free(name);
    }
    return false;
}

/* The vector type the subtree n of fn uses (written in it, or the type of a local of fn it names:
 * `x4[i]` with `const float4* x4 = …`), into name; false when none. */
static bool vector_use(const kl_rule_ctx *ctx, TSNode fn, TSNode n, char *name, size_t size)
{
    if (ts_node_is_null(n)) return false;
    vtype_scan t = {ctx, ""};
    kl_ast_walk(n, vtype_visit, &t);
    if (!t.name[0]) {
        vlocal_scan l = {ctx, n, ""};
        kl_ast_walk(kl_ast_function_body(fn), vlocal_visit, &l);
        memcpy(t.name, l.name, sizeof t.name);
    }
    if (t.name[0]) kl_snprintf(name, size, "%s", t.name);
    return t.name[0] != '\0';
}

typedef struct arr_scan {
    const kl_rule_ctx *ctx;
    TSNode fn, other;     /* does `other` touch an array the visited subtree subscripts? */
    bool yes;
} arr_scan;

typedef struct alias_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode other;
    bool yes;
} alias_scan;

/* A declaration of a pointer initialised from `name` (`xr = x + row * cols`, `x4 =
 * reinterpret_cast<const float4*>(x)`) whose name `other` uses. */
static bool alias_visit(TSNode n, void *user)
{
    alias_scan *a = user;
    if (a->yes) return false;
    if (!rt_is(n, "init_declarator")) return true;
    TSNode v = rt_field(n, "value");
    if (ts_node_is_null(v) || rt_count_ident(a->ctx, v, a->name) == 0) return true;
    char *nm = text_of(a->ctx, kl_ast_declarator_name(n));
    a->yes = nm && strcmp(nm, a->name) && rt_count_ident(a->ctx, a->other, nm) > 0;
    free(nm);
    return !a->yes;
}

static bool arr_visit(TSNode n, void *user)
{
    arr_scan *s = user;
    if (s->yes) return false;
    if (!rt_is(n, "subscript_expression")) return true;
    TSNode arr = rt_field(n, "argument");
    if (!rt_is(arr, "identifier")) return true;
    char *name = text_of(s->ctx, arr);
    if (!name) return true;
    if (rt_count_ident(s->ctx, s->other, name) > 0) s->yes = true;
    else {
        alias_scan a = {s->ctx, name, s->other, false};
        kl_ast_walk(kl_ast_function_body(s->fn), alias_visit, &a);
        s->yes = a.yes;
    }
    free(name);
    return !s->yes;
}

/* Does loop subscript an array that vec names too (itself, or a pointer made from it)? */
static bool touches_same_array(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, TSNode vec)
{
    arr_scan s = {ctx, fn, vec, false};
    kl_ast_walk(loop, arr_visit, &s);
    return s.yes;
}

typedef struct cond_scan {
    const kl_rule_ctx *ctx;
    TSNode start;         /* the remainder's start expression */
    bool yes;
} cond_scan;

typedef struct ident_in {
    const kl_rule_ctx *ctx;
    TSNode where;
    bool yes;
} ident_in;

static bool ident_in_visit(TSNode n, void *user)
{
    ident_in *s = user;
    if (s->yes) return false;
    if (rt_is(n, "identifier")) {
        char *name = text_of(s->ctx, n);
        s->yes = name && rt_count_ident(s->ctx, s->where, name) > 0;
        free(name);
    }
    return !s->yes;
}

/* A loop condition of the vector part that reads a name the remainder's start reads (`i < n4` and
 * `i = n4 * 4 + t`; `v < nv` and `c = lane + nv * 4`). */
static bool cond_visit(TSNode n, void *user)
{
    cond_scan *c = user;
    if (c->yes) return false;
    if (rt_is(n, "for_statement") || rt_is(n, "while_statement") || rt_is(n, "do_statement")) {
        ident_in s = {c->ctx, rt_field(n, "condition"), false};
        if (!ts_node_is_null(s.where)) kl_ast_walk(c->start, ident_in_visit, &s);
        c->yes = s.yes;
    }
    return !c->yes;
}

/* Does loop start where the vector part vec stops: no start of its own (it goes on from the
 * variable the vector part advanced), or a start computed from what bounds the vector part? */
static bool continues(const kl_rule_ctx *ctx, TSNode loop, TSNode vec)
{
    if (!rt_is(loop, "for_statement")) return false;
    TSNode init = rt_field(loop, "initializer");
    if (ts_node_is_null(init)) return true;
    TSNode start = init;
    if (rt_is(init, "declaration")) start = rt_field(ts_node_named_child(init, ts_node_named_child_count(init) - 1), "value");
    else if (rt_is(init, "assignment_expression")) start = rt_field(init, "right");
    if (ts_node_is_null(start)) return false;
    cond_scan c = {ctx, start, false};
    kl_ast_walk(vec, cond_visit, &c);
    return c.yes;
}

/* A vector part a remainder loop follows: a loop using vector types, or an if without else whose
 * branch uses them. */
static bool vector_stmt(const kl_rule_ctx *ctx, TSNode fn, TSNode st, char *vt, size_t size)
{
    if (rt_is(st, "for_statement") || rt_is(st, "while_statement") || rt_is(st, "do_statement"))
        return vector_use(ctx, fn, st, vt, size);
    if (rt_is(st, "if_statement") && ts_node_is_null(rt_field(st, "alternative")))
        return vector_use(ctx, fn, rt_field(st, "consequence"), vt, size);
    return false;
}

bool kl_vec_fallback(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, char *why, size_t size)
{
    TSNode body = kl_ast_function_body(fn);
    char vt[32];
    bool first = true; /* st opens the code that follows the statement before it */
    for (TSNode st = loop; !ts_node_is_null(st) && !ts_node_eq(st, body);) {
        TSNode par = ts_node_parent(st);
        if (ts_node_is_null(par)) break;
        /* (1) right after a vector part on the same array (declarations between them skipped):
         * the remainder it leaves, `for (; i < n; i++)`, `for (i = n4 * 4 + t; …)` */
        if (first && rt_is(par, "compound_statement")) {
            TSNode prev = rt_prev_stmt(st);
            while (rt_is(prev, "declaration") || (!ts_node_is_null(prev) && kl_str_starts(ts_node_type(prev), "preproc")))
                prev = rt_prev_stmt(prev);
            if (!ts_node_is_null(prev) && vector_stmt(ctx, fn, prev, vt, sizeof vt) &&
                touches_same_array(ctx, fn, loop, prev) && continues(ctx, loop, prev)) {
                kl_snprintf(why, size,
                            "the scalar fallback of the %s path at line %u (the remainder that loop leaves): "
                            "vectorizing it would only add another guard and another scalar loop",
                            vt, kl_ast_line(prev));
                return true;
            }
        }
        /* (2) a branch of an if whose other branch is the vector path:
         * `if (aligned && n % 4 == 0) { float4 … } else { scalar }` */
        TSNode ifs = rt_is(par, "else_clause") ? ts_node_parent(par) : par;
        if (rt_is(ifs, "if_statement") && !ts_node_is_null(rt_field(ifs, "alternative"))) {
            TSNode cons = rt_field(ifs, "consequence"), alt = rt_field(ifs, "alternative");
            TSNode other = rt_is(par, "else_clause") ? cons : ts_node_eq(st, cons) ? alt : (TSNode){{0}, 0, 0};
            TSNode mine = rt_is(par, "else_clause") ? alt : cons;
            char mt[32];
            if (!ts_node_is_null(other) && vector_use(ctx, fn, other, vt, sizeof vt) &&
                !vector_use(ctx, fn, mine, mt, sizeof mt)) {
                kl_snprintf(why, size,
                            "the scalar fallback of the %s path at line %u (the other branch of its guard): "
                            "vectorizing it would only add another guard and another scalar loop",
                            vt, kl_ast_line(ifs));
                return true;
            }
        }
        if (rt_is(par, "compound_statement")) {
            TSNode p0 = rt_prev_stmt(st);
            while (rt_is(p0, "declaration")) p0 = rt_prev_stmt(p0);
            if (!ts_node_is_null(p0)) first = false;
        } else if (!rt_is(par, "if_statement") && !rt_is(par, "else_clause")) {
            first = false; /* a loop or a switch: what precedes it is not what this loop follows */
        }
        st = par;
    }
    return false;
}

/* ---- an else branch that fills vector registers lane by lane ------------------------------------ */

typedef struct regfill_scan {
    const kl_rule_ctx *ctx;
    TSNode fn, in;
    bool vector;          /* a vector type, a vector macro or a whole vector local seen */
} regfill_scan;

/* Is name a function-like macro of the file whose body names a vector type or a reinterpret_cast
 * (`#define FETCH_FLOAT4(ref) (*reinterpret_cast<const float4*>(&(ref)))`)? */
static bool vector_macro(const kl_rule_ctx *ctx, const char *name)
{
    TSNode root = kl_source_root(ctx->src);
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!rt_is(d, "preproc_function_def") || !rt_text_is(ctx, rt_field(d, "name"), name)) continue;
        char *v = text_of(ctx, rt_field(d, "value"));
        bool vec = v && (strstr(v, "reinterpret_cast") || vec_type_width(v) || strstr(v, "make_"));
        free(v);
        return vec;
    }
    return false;
}

/* Is the identifier n (a vector local) used as one lane: `v.x`, `v[i].w`? */
static bool lane_use(const kl_rule_ctx *ctx, TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (rt_is(p, "subscript_expression") && ts_node_eq(rt_field(p, "argument"), n)) {
        n = p;
        p = ts_node_parent(p);
    }
    if (!rt_is(p, "field_expression") || !ts_node_eq(rt_field(p, "argument"), n)) return false;
    TSNode f = rt_field(p, "field");
    return rt_text_is(ctx, f, "x") || rt_text_is(ctx, f, "y") || rt_text_is(ctx, f, "z") || rt_text_is(ctx, f, "w");
}

static bool regfill_visit(TSNode n, void *user)
{
    regfill_scan *l = user;
    if (l->vector) return false;
    if (rt_is(n, "type_identifier")) {
        char *t = text_of(l->ctx, n);
        l->vector = t && vector_type_name(t);
        free(t);
        return false;
    }
    if (rt_is(n, "call_expression") && rt_is(rt_field(n, "function"), "identifier")) {
        char *f = text_of(l->ctx, rt_field(n, "function"));
        l->vector = f && (vector_macro(l->ctx, f) || kl_str_starts(f, "make_") || !strcmp(f, "reinterpret_cast"));
        free(f);
        if (l->vector) return false;
    }
    if (rt_is(n, "identifier") && !lane_use(l->ctx, n)) {
        vlocal_scan v = {l->ctx, n, ""};
        kl_ast_walk(kl_ast_function_body(l->fn), vlocal_visit, &v);
        l->vector = v.name[0] != '\0';
    }
    return !l->vector;
}

/* Is the else branch alt a scalar path: no vector type, or vector locals written and read only
 * lane by lane (`stage[i].x = p[0];` — the registers a float4 load fills, here filled element by
 * element from scalar loads, in the same layout), no vector type, macro or make_ call? */
static bool scalar_else(const kl_rule_ctx *ctx, TSNode fn, TSNode alt)
{
    if (!vec_width(ctx, fn, alt)) return true;
    regfill_scan l = {ctx, fn, alt, false};
    kl_ast_walk(alt, regfill_visit, &l);
    return !l.vector;
}

/* ---- present sites --------------------------------------------------------------------------------- */

typedef struct vp {
    char kind;           /* 'E' else branch, 'T' tail continues j, 'S' tail start rewritten */
    TSNode node;         /* the if / the first vector loop */
    TSNode del[4];       /* statements deleted (T, S) */
    unsigned ndel;
    TSNode tail_init;    /* S: the tail's start expression, replaced by start */
    char start[128];     /* S: the vector loop's start */
    int width;
    char why[300];
    TSNode same_guard[8]; /* E: the other guarded vector paths of the function on the same condition */
    unsigned nsame;
    bool covered;         /* E: an earlier if on the same condition is the site */
} vp;

/* The loop variable a for statement updates, into buf; false when none. */
static bool for_var(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode loop, char *buf, size_t size)
{
    int li = kl_affine_loop_index(ax, loop);
    if (li < 0) return false;
    const kl_ax_loop *L = kl_affine_loop(ax, (unsigned)li);
    (void)ctx;
    if (!L->var) return false;
    kl_snprintf(buf, size, "%s", L->var);
    return true;
}

static bool empty_init(TSNode loop) { return ts_node_is_null(rt_field(loop, "initializer")); }

/* The value a local is declared with in fn's body (top level), as text; false when not found. */
static bool local_init(const kl_rule_ctx *ctx, TSNode fn, const char *name, char *buf, size_t size)
{
    top_decls t = {.body = kl_ast_function_body(fn)};
    while (top_decls_next(&t)) {
        if (!rt_is(t.child, "init_declarator") || !rt_text_is(ctx, kl_ast_declarator_name(t.child), name)) continue;
        TSNode v = rt_field(t.child, "value");
        if (ts_node_is_null(v)) return false;
        char *text = text_of(ctx, v);
        kl_snprintf(buf, size, "%s", text ? text : "");
        free(text);
        return text != NULL;
    }
    return false;
}

static void squeeze_text(const char *s, char *out, size_t size)
{
    size_t k = 0;
    for (; *s && k + 1 < size; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n') out[k++] = *s;
    out[k] = '\0';
}

/* A vector part at st: a for loop using vector types, or an if (no else) holding only such loops.
 * On true, the variable of the (last) loop. */
static bool vector_part(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode st, char *var, size_t size,
                        int *width)
{
    if (rt_is(st, "for_statement")) {
        *width = vec_width(ctx, fn, st);
        return *width && for_var(ctx, ax, st, var, size);
    }
    if (rt_is(st, "if_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        TSNode b = rt_field(st, "consequence");
        if (!rt_is(b, "compound_statement")) return vector_part(ctx, ax, fn, b, var, size, width);
        unsigned loops = 0;
        for (uint32_t i = 0; i < ts_node_named_child_count(b); i++) {
            TSNode k = ts_node_named_child(b, i);
            if (rt_is(k, "comment")) continue;
            if (!vector_part(ctx, ax, fn, k, var, size, width) || !rt_is(k, "for_statement")) return false;
            loops++;
        }
        return loops > 0;
    }
    return false;
}

/* Does pointer parameter `param` of fn, or a top-level local of fn initialised from it (an alias
 * `const float4* x4 = reinterpret_cast<...>(x)`), occur in n? */
static bool uses_param_or_alias(const kl_rule_ctx *ctx, TSNode fn, const char *param, TSNode n)
{
    if (rt_count_ident(ctx, n, param) > 0) return true;
    top_decls t = {.body = kl_ast_function_body(fn)};
    while (top_decls_next(&t)) {
        if (!rt_is(t.child, "init_declarator") || rt_count_ident(ctx, rt_field(t.child, "value"), param) == 0) continue;
        char *name = text_of(ctx, kl_ast_declarator_name(t.child));
        bool used = name && rt_count_ident(ctx, n, name) > 0;
        free(name);
        if (used) return true;
    }
    return false;
}

/* Do the vector part (statements del[0..ndel)) and the tail loop touch a common global array
 * (a pointer parameter, directly or through a top-level alias)? Without one, the loop after
 * the vector part is no tail of it (the sgemm expert's k-tile loop, whose float4 are shared-tile
 * reads, followed by its store loop). */
static bool shares_array(const kl_rule_ctx *ctx, TSNode fn, const TSNode *del, unsigned ndel, TSNode tail)
{
    TSNode decl = rt_field(fn, "declarator");
    TSNode params = {{0}, 0, 0};
    for (TSNode d = decl; !ts_node_is_null(d); d = rt_field(d, "declarator"))
        if (!ts_node_is_null(rt_field(d, "parameters"))) {
            params = rt_field(d, "parameters");
            break;
        }
    if (ts_node_is_null(params)) return false;
    for (uint32_t i = 0; i < ts_node_named_child_count(params); i++) {
        TSNode p = ts_node_named_child(params, i);
        TSNode pd = rt_field(p, "declarator");
        if (!rt_is(p, "parameter_declaration") || !rt_is(pd, "pointer_declarator")) continue;
        char *name = text_of(ctx, kl_ast_declarator_name(pd));
        if (!name) return false;
        bool in_vec = false;
        for (unsigned k = 0; k < ndel && !in_vec; k++) in_vec = uses_param_or_alias(ctx, fn, name, del[k]);
        bool both = in_vec && uses_param_or_alias(ctx, fn, name, tail);
        free(name);
        if (both) return true;
    }
    return false;
}

/* Form (1) ifs of fn on the same condition as st (with an else): they choose between two layouts
 * of the same data (a float4 load fills registers in one order, its scalar else in another; the
 * passes and the store that read them back are guarded the same way), so every branch on the
 * guard goes to its else together, or none does. */
typedef struct guard_walk {
    const kl_rule_ctx *ctx;
    TSNode fn, st;
    char *cond;
    vp *p;
    bool before;          /* an equal if was met before st */
    bool seen_st;
} guard_walk;

static bool guard_visit(TSNode n, void *user)
{
    guard_walk *g = user;
    if (ts_node_eq(n, g->st)) {
        g->seen_st = true;
        return false;
    }
    if (!rt_is(n, "if_statement") || ts_node_is_null(rt_field(n, "alternative"))) return true;
    char *c = text_of(g->ctx, rt_field(n, "condition"));
    bool same = c && g->cond && !strcmp(c, g->cond);
    free(c);
    /* every branch on the guard, vector types or not: the guard chooses the layout of the data,
     * and a branch without float4 may still read it in the vector path's order */
    if (!same) return true;
    /* the site is the first if on the guard that has vector accesses */
    if (!g->seen_st && vec_width(g->ctx, g->fn, rt_field(n, "consequence"))) g->before = true;
    if (g->p->nsame < sizeof g->p->same_guard / sizeof g->p->same_guard[0]) g->p->same_guard[g->p->nsame++] = n;
    else kl_snprintf(g->p->why, sizeof g->p->why, "more than %zu vector paths on the guard at line %u",
                     sizeof g->p->same_guard / sizeof g->p->same_guard[0], kl_ast_line(g->st));
    return false;
}

/* Analyse st as a present site; false when it is none. */
static bool present_at(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode st, vp *p)
{
    memset(p, 0, sizeof *p);
    p->node = st;
    /* (1) if (guard) { vector } else { scalar } */
    if (rt_is(st, "if_statement") && !ts_node_is_null(rt_field(st, "alternative"))) {
        TSNode alt = rt_field(st, "alternative");
        if (rt_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
        int w = vec_width(ctx, fn, rt_field(st, "consequence"));
        if (!w) return false;
        p->width = w;
        p->kind = 'E';
        if (!scalar_else(ctx, fn, alt))
            kl_snprintf(p->why, sizeof p->why, "the else branch at line %u uses vector types too: no scalar path to keep",
                        kl_ast_line(alt));
        else if (rt_is(alt, "if_statement"))
            kl_snprintf(p->why, sizeof p->why, "the else branch at line %u is another if: not a plain scalar path",
                        kl_ast_line(alt));
        guard_walk g = {ctx, fn, st, text_of(ctx, rt_field(st, "condition")), p, false, false};
        kl_ast_walk(kl_ast_function_body(fn), guard_visit, &g);
        free(g.cond);
        p->covered = g.before;
        for (unsigned i = 0; i < p->nsame && !p->why[0]; i++) {
            TSNode a2 = rt_field(p->same_guard[i], "alternative");
            if (rt_is(a2, "else_clause")) a2 = ts_node_named_child(a2, 0);
            if (!scalar_else(ctx, fn, a2) || rt_is(a2, "if_statement"))
                kl_snprintf(p->why, sizeof p->why,
                            "the vector path at line %u shares its guard but has no plain scalar else path",
                            kl_ast_line(p->same_guard[i]));
        }
        return true;
    }
    char var[64];
    int w = 0;
    if (!vector_part(ctx, ax, fn, st, var, sizeof var, &w)) return false;
    /* the enclosing if with an else is form (1): not a site of its own */
    TSNode par = ts_node_parent(st);
    if (rt_is(par, "compound_statement")) par = ts_node_parent(par);
    if (rt_is(par, "if_statement") && !ts_node_is_null(rt_field(par, "alternative"))) return false;
    /* only the first of consecutive vector parts is the site */
    char pv[64];
    int pw;
    TSNode prev = rt_prev_stmt(st);
    if (!ts_node_is_null(prev) && vector_part(ctx, ax, fn, prev, pv, sizeof pv, &pw) && !strcmp(pv, var)) return false;
    p->width = w;
    p->del[p->ndel++] = st;
    TSNode nx = rt_next_stmt(st);
    char nv[64];
    int nw;
    while (!ts_node_is_null(nx) && p->ndel < 4 && vector_part(ctx, ax, fn, nx, nv, sizeof nv, &nw) && !strcmp(nv, var)) {
        p->del[p->ndel++] = nx;
        nx = rt_next_stmt(nx);
    }
    char tv[64];
    if (!rt_is(nx, "for_statement") || vec_width(ctx, fn, nx) || !for_var(ctx, ax, nx, tv, sizeof tv))
        return false; /* no scalar tail: vector accesses with no scalar form beside them (shared tiles …) */
    if (!shares_array(ctx, fn, p->del, p->ndel, nx)) return false;
    if (!strcmp(tv, var) && empty_init(nx)) {
        p->kind = 'T'; /* the tail continues the vector loop's variable */
        return true;
    }
    /* (3) the tail starts at B * W + S */
    p->kind = 'S';
    int li = kl_affine_loop_index(ax, p->del[p->ndel - 1]);
    const kl_ax_loop *L = li >= 0 ? kl_affine_loop(ax, (unsigned)li) : NULL;
    TSNode init = rt_field(nx, "initializer");
    TSNode iv = {{0}, 0, 0};
    if (rt_is(init, "declaration")) iv = rt_field(ts_node_named_child(init, ts_node_named_child_count(init) - 1), "value");
    else if (rt_is(init, "assignment_expression")) iv = rt_field(init, "right");
    char s0[128] = "", it[256], want[400], want2[400];
    bool started = L && (L->start ? (kl_snprintf(s0, sizeof s0, "%s", L->start), true)
                                  : local_init(ctx, fn, var, s0, sizeof s0));
    char *ivt = ts_node_is_null(iv) ? NULL : text_of(ctx, iv);
    bool ok = false;
    if (started && ivt && L && L->bound) {
        squeeze_text(ivt, it, sizeof it);
        char sq[128], b[128];
        squeeze_text(s0, sq, sizeof sq);
        squeeze_text(L->bound, b, sizeof b);
        /* B*W+S with W a literal or a name whose value is the width */
        const char *star = strchr(it, '*'), *plus = strrchr(it, '+');
        if (star && plus && plus > star && !strncmp(it, b, strlen(b)) && it + strlen(b) == star && !strcmp(plus + 1, sq)) {
            char wtext[64];
            kl_snprintf(wtext, sizeof wtext, "%.*s", (int)(plus - star - 1), star + 1);
            long long wv = 0;
            ok = atoll(wtext) == w || (rt_const_name(ctx, fn, wtext, &wv) && wv == w);
        }
        kl_snprintf(want, sizeof want, "%s*%d+%s", b, w, sq);
        (void)want2;
    }
    if (ok) {
        p->tail_init = iv;
        kl_snprintf(p->start, sizeof p->start, "%s", s0);
    } else {
        kl_snprintf(p->why, sizeof p->why,
                    "the scalar tail at line %u starts at `%s`, not at the vector loop's end `%s * %d + %s`: it is not "
                    "proven to cover the whole range alone",
                    kl_ast_line(nx), ivt ? ivt : "?", L && L->bound ? L->bound : "?", w, s0[0] ? s0 : "?");
    }
    free(ivt);
    return true;
}

/* ---- applicable sites ------------------------------------------------------------------------------- */

typedef struct va_arr {
    char name[64];
    char index[256];     /* the index text (as written) */
    bool read, write;
    TSNode first;        /* an access node at that index */
} va_arr;

typedef struct va {
    const kl_ax_loop *L;
    char type[64];       /* the loop variable's declared type ("int", "size_t"), "" when declared outside */
    va_arr arr[8];
    unsigned narr;
    TSNode store;        /* the statement writing (null when none) */
    bool strided;        /* the thread-strided form (vectorize_lane.h): its start and step in vl */
    kl_vl_loop vl;
    char why[300];
} va;

typedef struct body_check {
    const kl_rule_ctx *ctx;
    const char *why;
    unsigned line;
} body_check;

static bool body_visit(TSNode n, void *user)
{
    body_check *b = user;
    if (b->why) return false;
    if (rt_is(n, "break_statement") || rt_is(n, "continue_statement") || rt_is(n, "return_statement") ||
        rt_is(n, "goto_statement"))
        b->why = "a break, continue, return or goto", b->line = kl_ast_line(n);
    else if (rt_is(n, "for_statement") || rt_is(n, "while_statement") || rt_is(n, "do_statement"))
        b->why = "an inner loop", b->line = kl_ast_line(n);
    return b->why == NULL;
}

/* Is n under an if / ?: / switch inside the loop (the body itself included)? */
static bool conditional(TSNode n, TSNode body)
{
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p) && !ts_node_eq(p, body); p = ts_node_parent(p))
        if (rt_is(p, "if_statement") || rt_is(p, "conditional_expression") || rt_is(p, "switch_statement")) return true;
    return false;
}

/* Is the index of access a `E + var` (var once, as a term of a sum, E free of it), read on the tree:
 * what the thread-strided form accepts when the affine analysis gave up on E (`row * cols + c` with
 * `row = (blockIdx.x * blockDim.x + threadIdx.x) / 32`); vectorize_lane.c checks that E is the same
 * every pass. */
static bool unit_term(const kl_rule_ctx *ctx, TSNode e, const char *var)
{
    while (rt_is(e, "parenthesized_expression")) e = ts_node_named_child(e, 0);
    if (rt_is(e, "identifier")) return rt_text_is(ctx, e, var);
    if (!rt_is(e, "binary_expression")) return false;
    TSNode op = rt_field(e, "operator"), l = rt_field(e, "left"), r = rt_field(e, "right");
    if (rt_text_is(ctx, op, "+"))
        return (unit_term(ctx, l, var) && rt_count_ident(ctx, r, var) == 0) ||
               (unit_term(ctx, r, var) && rt_count_ident(ctx, l, var) == 0);
    if (rt_text_is(ctx, op, "-")) return unit_term(ctx, l, var) && rt_count_ident(ctx, r, var) == 0;
    return false;
}

static bool unit_index(const kl_rule_ctx *ctx, const kl_ax_access *a, const char *var, bool strided)
{
    int64_t c = 0;
    if (a->flat.ok && kl_affine_coef_int(&a->flat, var, &c)) return c == 1;
    if (!strided || a->ndims != 1 || !rt_is(a->node, "subscript_expression")) return false;
    TSNode ix = rt_field(a->node, "index");
    if (ts_node_is_null(ix)) ix = ts_node_named_child(a->node, 1);
    if (rt_is(ix, "subscript_argument_list") && ts_node_named_child_count(ix) == 1) ix = ts_node_named_child(ix, 0);
    return !ts_node_is_null(ix) && unit_term(ctx, ix, var);
}

/* Does the body of loop L access a pointer's elements (not shared memory) at an index with coefficient 1
 * on its variable (strided: as the thread-strided form reads it), of element type elem (NULL: any)? */
static bool contiguous_access(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, bool strided,
                              const char *elem)
{
    TSNode body = rt_field(L->node, "body");
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        char et[64];
        if (node_in(a->node, body) && unit_index(ctx, a, L->var, strided) && !a->is_shared &&
            rt_pointer_elem(ctx, ax, fn, a->array, et, sizeof et) && (!elem || !strcmp(et, elem)))
            return true;
    }
    return false;
}

/* Does the body of loop L access an f32 array (not shared) at an index with coefficient 1 on its variable? */
static bool contiguous_f32(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L)
{
    return L->var && rt_is(L->node, "for_statement") &&
           contiguous_access(ctx, ax, fn, L, !L->step_is_int || L->step_int != 1, "float");
}

/* What the thread-strided form needs beyond the unit-stride one (into v->why): the loop declares its
 * variable alone (the vector loop and the rest each start it), the body stores only at the element
 * (a thread now holds other elements: a store elsewhere would land elsewhere), and reduces what it
 * keeps across passes (vectorize_lane.c). */
static void strided_checks(const kl_rule_ctx *ctx, kl_affine_ctx *ax, va *v)
{
    TSNode loop = v->L->node, body = rt_field(loop, "body"), init = rt_field(loop, "initializer");
    unsigned decls = 0;
    for (uint32_t k = 0; rt_is(init, "declaration") && k < ts_node_named_child_count(init); k++)
        decls += rt_is(ts_node_named_child(init, k), "init_declarator");
    if (decls != 1 || !v->type[0]) {
        kl_snprintf(v->why, sizeof v->why,
                    "the loop over %s does not declare its variable alone (`for (int %s = …; …)`): the vector loop and "
                    "the scalar rest each need their own start",
                    v->L->var, v->L->var);
        return;
    }
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (!node_in(a->node, body) || !a->write) continue;
        bool mine = false;
        for (unsigned k = 0; k < v->narr && !mine; k++) mine = !strcmp(v->arr[k].name, a->array);
        if (!mine) {
            kl_snprintf(v->why, sizeof v->why,
                        "the loop body writes %s at line %u, not at the loop's element: with other elements per thread "
                        "that store would change",
                        a->array, kl_ast_line(a->node));
            return;
        }
    }
    kl_vl_body_ok(ctx, loop, v->L->var, v->why, sizeof v->why);
}

static bool analyse_apply(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, va *v)
{
    memset(v, 0, sizeof *v);
    v->L = L;
    if (L->kind != KL_LOOP_FOR || !L->var || !L->cmp || !L->bound || strcmp(L->cmp, "<")) return false;
    int form = 0;
    char swhy[300] = "";
    if (!L->step_is_int || L->step_int != 1) {
        form = kl_vl_recognise(ctx, fn, L->node, L->var, &v->vl, swhy, sizeof swhy);
        if (!form) return false;
        v->strided = true;
    }
    TSNode body = rt_field(L->node, "body");
    /* nothing contiguous along the loop: not a site */
    if (!contiguous_access(ctx, ax, fn, L, v->strided, NULL)) return false;
    body_check bc = {ctx, NULL, 0};
    kl_ast_walk(body, body_visit, &bc);
    if (bc.why) {
        kl_snprintf(v->why, sizeof v->why, "the loop body has %s (line %u)", bc.why, bc.line);
        return true;
    }
    TSNode init = rt_field(L->node, "initializer");
    if (rt_is(init, "declaration")) {
        char *t = text_of(ctx, rt_field(init, "type"));
        kl_snprintf(v->type, sizeof v->type, "%s", t ? t : "int");
        free(t);
    }
    char other_type[200] = "";
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (!node_in(a->node, body)) continue;
        int64_t c = 0;
        char et0[64] = "";
        bool pointer = !a->is_shared && rt_pointer_elem(ctx, ax, fn, a->array, et0, sizeof et0);
        (void)c;
        bool contig = pointer && unit_index(ctx, a, L->var, v->strided) && a->ndims == 1;
        if (contig && strcmp(et0, "float")) {
            /* contiguous but not f32: read as it is, lane by lane; never written */
            if (!other_type[0])
                kl_snprintf(other_type, sizeof other_type, "the elements of %s are %s, not f32", a->array,
                            et0[0] ? et0 : "unknown");
            if (a->write) {
                kl_snprintf(v->why, sizeof v->why, "%s", other_type);
                return true;
            }
            contig = false;
        }
        va_arr *x = NULL;
        for (unsigned k = 0; k < v->narr; k++)
            if (!strcmp(v->arr[k].name, a->array)) x = &v->arr[k];
        char *idx = NULL;
        if (rt_is(a->node, "subscript_expression")) {
            TSNode ix = rt_field(a->node, "index");
            if (ts_node_is_null(ix)) ix = ts_node_named_child(a->node, 1);
            if (rt_is(ix, "subscript_argument_list") && ts_node_named_child_count(ix) == 1) ix = ts_node_named_child(ix, 0);
            if (!ts_node_is_null(ix)) idx = text_of(ctx, ix);
        }
        if (!contig) {
            if (x) {
                kl_snprintf(v->why, sizeof v->why, "%s is read at line %u at an index other than %s", a->array,
                            kl_ast_line(a->node), x->index);
                free(idx);
                return true;
            }
            if (a->write && pointer) {
                kl_snprintf(v->why, sizeof v->why, "the body writes %s at line %u, an index not contiguous in %s",
                            a->array, kl_ast_line(a->node), L->var);
                free(idx);
                return true;
            }
            free(idx);
            continue;
        }
        if (!rt_is(a->node, "subscript_expression") || !idx) {
            kl_snprintf(v->why, sizeof v->why, "the access to %s at line %u is not a subscript", a->array, kl_ast_line(a->node));
            free(idx);
            return true;
        }
        char sq1[256], sq2[256];
        squeeze_text(idx, sq1, sizeof sq1);
        if (x) {
            squeeze_text(x->index, sq2, sizeof sq2);
            if (strcmp(sq1, sq2)) {
                kl_snprintf(v->why, sizeof v->why, "%s is accessed at %s and at %s: more than one index", a->array,
                            x->index, idx);
                free(idx);
                return true;
            }
        } else {
            if (v->narr == 8) {
                free(idx);
                kl_snprintf(v->why, sizeof v->why, "more than 8 contiguous arrays in the loop");
                return true;
            }
            x = &v->arr[v->narr++];
            kl_snprintf(x->name, sizeof x->name, "%s", a->array);
            kl_snprintf(x->index, sizeof x->index, "%s", idx);
            x->first = a->node;
        }
        free(idx);
        x->read |= a->read;
        x->write |= a->write;
        if (conditional(a->node, L->node)) {
            kl_snprintf(v->why, sizeof v->why, "the access to %s at line %u is conditional: a vector access would touch "
                        "elements the loop may not", a->array, kl_ast_line(a->node));
            return true;
        }
        if (a->write) {
            /* the store: a statement of the body itself, `p[i] = e;` */
            TSNode asg = ts_node_parent(a->node);
            TSNode stmt = ts_node_parent(asg);
            bool top = rt_is(asg, "assignment_expression") && rt_is(stmt, "expression_statement") &&
                       (ts_node_eq(stmt, body) || ts_node_eq(ts_node_parent(stmt), body));
            if (!top) {
                kl_snprintf(v->why, sizeof v->why, "the store to %s at line %u is not a statement of the loop body",
                            a->array, kl_ast_line(a->node));
                return true;
            }
            if (!ts_node_is_null(v->store) && !ts_node_eq(v->store, stmt)) {
                kl_snprintf(v->why, sizeof v->why, "more than one store in the loop body (lines %u and %u)",
                            kl_ast_line(v->store), kl_ast_line(stmt));
                return true;
            }
            v->store = stmt;
        }
    }
    if (v->narr == 0) {
        kl_snprintf(v->why, sizeof v->why, "%s", other_type[0] ? other_type : "no f32 array is contiguous in the loop");
        return true;
    }
    /* loads of the other arrays are hoisted above the store of lane 0: the stored array must not
     * alias them (__restrict__ on one side, or a task whose buffers are distinct) */
    for (unsigned k = 0; k < v->narr && !ts_node_is_null(v->store); k++) {
        va_arr *w = &v->arr[k];
        if (!w->write) continue;
        for (unsigned m = 0; m < v->narr; m++) {
            if (m == k || !v->arr[m].read) continue;
            bool restrict_ = rt_pointer_restrict(ctx, ax, fn, w->name) || rt_pointer_restrict(ctx, ax, fn, v->arr[m].name);
            if (!restrict_ && !ctx->task) {
                kl_snprintf(v->why, sizeof v->why,
                            "%s may alias %s (neither is __restrict__ and no task says the buffers are distinct): "
                            "loading four elements ahead of the store could read stale values",
                            w->name, v->arr[m].name);
                return true;
            }
        }
    }
    if (v->strided && form == 2) kl_snprintf(v->why, sizeof v->why, "%s", swhy);
    else if (v->strided) strided_checks(ctx, ax, v);
    return true;
}

/* ---- find ---------------------------------------------------------------------------------------------- */

typedef struct vfind {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    TSNode fn;
    const char *name;
    kl_sites *out;
    kl_status st;
} vfind;

static bool find_present_visit(TSNode n, void *user)
{
    vfind *f = user;
    if (f->st != KL_OK) return false;
    if (!rt_is(n, "if_statement") && !rt_is(n, "for_statement")) return true;
    if (kl_vs_present_loop(f->ctx, n)) return false; /* the grid-stride form's (vectorize_stride.c) */
    vp p;
    if (!present_at(f->ctx, f->ax, f->fn, n, &p)) return true;
    if (p.covered) return false; /* part of the site of the first if on this guard */
    json_t *feat = json_pack("{s:s, s:i, s:s}", "dtype", "f32", "width", p.width, "scalar_path",
                             p.kind == 'E' ? "the guard's else branch" : p.kind == 'T' ? "the tail loop continuing the vector loop"
                                                                                      : "the tail loop, started at the vector loop's start");
    if (!feat) {
        f->st = KL_ERR_NOMEM;
        return false;
    }
    if (p.why[0]) json_object_set_new(feat, "why_not", json_string(p.why));
    if (p.nsame) json_object_set_new(feat, "same_guard", json_integer(p.nsame + 1));
    char id[256], note[200];
    kl_site_id(id, sizeof id, f->name, n, NULL);
    kl_snprintf(note, sizeof note, "%d-wide vector accesses (%s)", p.width,
                p.kind == 'E' ? "under a guard with a scalar else path" : "with a scalar tail");
    char wv[8];
    kl_snprintf(wv, sizeof wv, "%d", p.width);
    f->st = kl_sites_add(f->out, id, KL_SITE_PRESENT, kl_node_span(n), f->name, feat, json_pack("{s:s}", "width", wv), note);
    return false; /* what is inside belongs to this site */
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    vfind f = {ctx, ax, fn, name, out, KL_OK};
    kl_ast_walk(kl_ast_function_body(fn), find_present_visit, &f);
    if (f.st != KL_OK) return f.st;
    kl_status gs = kl_vs_find(ctx, name, fn, ax, out);
    if (gs == KL_OK) gs = kl_vc_find(ctx, name, fn, out);
    if (gs != KL_OK) return gs;
    for (unsigned i = 0; i < kl_affine_loop_count(ax); i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        va v;
        bool site = analyse_apply(ctx, ax, fn, L, &v);
        if (vec_width(ctx, fn, L->node)) continue;
        char fb[300];
        bool fallback = kl_vec_fallback(ctx, fn, L->node, fb, sizeof fb);
        if (!site && fallback && contiguous_f32(ctx, ax, fn, L)) {
            /* not a loop this form rewrites, but one it would be offered after a rewrite of the others
             * (the remainder of a strided or grid-stride vector loop): said refused, with why */
            char id[256];
            kl_site_id(id, sizeof id, name, L->node, NULL);
            if (kl_sites_find(out, id, KL_SITE_APPLICABLE)) continue;
            json_t *feat = json_pack("{s:s, s:s, s:s}", "dtype", "f32", "contiguous_in", L->var, "why_not", fb);
            if (!feat) return KL_ERR_NOMEM;
            kl_status st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL,
                                        "a scalar loop after or beside a vector path");
            if (st != KL_OK) return st;
            continue;
        }
        if (!site) continue;
        if (fallback) kl_snprintf(v.why, sizeof v.why, "%s", fb);
        json_t *arrs = json_array();
        for (unsigned k = 0; k < v.narr; k++)
            json_array_append_new(arrs, json_pack("{s:s, s:s, s:b, s:b}", "array", v.arr[k].name, "index", v.arr[k].index,
                                                  "read", v.arr[k].read, "write", v.arr[k].write));
        json_t *feat = json_pack("{s:s, s:s, s:o, s:s}", "dtype", v.narr ? "f32" : "not f32", "contiguous_in", L->var, "arrays", arrs,
                                 "alignment_guard", v.strided ? "run time, before the loop (no vector pass when an address is not aligned)"
                                                              : "run time, at the loop start");
        if (!feat) return KL_ERR_NOMEM;
        char id[256], note[200];
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (kl_sites_find(out, id, KL_SITE_APPLICABLE)) { /* the grid-stride form's already */
            json_decref(feat);
            continue;
        }
        if (v.strided) {
            char *step = text_of(ctx, v.vl.stride);
            json_object_set_new(feat, "form", json_string("thread-stride"));
            if (v.vl.group[0]) json_object_set_new(feat, "group", json_string(v.vl.group));
            kl_snprintf(note, sizeof note, "a %s-strided loop over %s (step %s) reading/writing %u f32 array%s contiguously",
                        !strcmp(v.vl.group, "warp") ? "lane" : "thread", L->var, step ? step : "?", v.narr,
                        v.narr == 1 ? "" : "s");
            free(step);
        } else
            kl_snprintf(note, sizeof note, "a unit-stride loop over %s reading/writing %u f32 array%s contiguously", L->var,
                        v.narr, v.narr == 1 ? "" : "s");
        if (v.why[0]) json_object_set_new(feat, "why_not", json_string(v.why));
        kl_status st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_gpu_function(ctx, visit, out, err);
}

/* ---- remove ---------------------------------------------------------------------------------------------- */

static kl_status remove_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const vp *p, kl_edits *out, kl_error *err)
{
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    kl_status st = KL_OK;
    for (unsigned k = 0; p->kind == 'E' && k <= p->nsame && st == KL_OK; k++) {
        TSNode node = k == 0 ? p->node : p->same_guard[k - 1];
        TSNode alt = rt_field(node, "alternative");
        if (rt_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
        uint32_t a = ts_node_start_byte(node), b = ts_node_end_byte(node);
        uint32_t aa = ts_node_start_byte(alt), ab = ts_node_end_byte(alt);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_add(&sb, ctx->text + aa, ab - aa);
        if (!rt_is(alt, "compound_statement")) {
            kl_strbuf_release(&sb);
            kl_strbuf_adds(&sb, "{ ");
            kl_strbuf_add(&sb, ctx->text + aa, ab - aa);
            kl_strbuf_adds(&sb, " }");
        }
        st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, a, b, kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
    }
    if (p->kind != 'E') {
        for (unsigned i = 0; i < p->ndel && st == KL_OK; i++) {
            uint32_t a, b;
            kl_rules_stmt_range(ctx, ax, p->del[i], "vectorize", &a, &b);
            st = kl_edits_add(out, a, b, "");
        }
        if (st == KL_OK && p->kind == 'S')
            st = kl_edits_add(out, ts_node_start_byte(p->tail_init), ts_node_end_byte(p->tail_init), p->start);
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- apply ------------------------------------------------------------------------------------------------ */

typedef struct lane_edit {
    uint32_t a, b;
    char text[160];
} lane_edit;

typedef struct lane_scan {
    const kl_rule_ctx *ctx;
    const va *v;
    lane_edit *e;
    unsigned n, cap;
    int lane;
    const char *const *comp;
    const char *var;
} lane_scan;

static void lane_add(lane_scan *s, TSNode n, const char *text)
{
    if (s->n == s->cap) return;
    s->e[s->n].a = ts_node_start_byte(n);
    s->e[s->n].b = ts_node_end_byte(n);
    kl_snprintf(s->e[s->n].text, sizeof s->e[s->n].text, "%s", text);
    s->n++;
}

static bool lane_visit(TSNode n, void *user)
{
    lane_scan *s = user;
    if (rt_is(n, "subscript_expression")) {
        TSNode arr = rt_field(n, "argument");
        for (unsigned k = 0; k < s->v->narr; k++)
            if (rt_text_is(s->ctx, arr, s->v->arr[k].name)) {
                char t[160];
                kl_snprintf(t, sizeof t, "kl_%s.%s", s->v->arr[k].name, s->comp[s->lane]);
                lane_add(s, n, t);
                return false;
            }
    }
    if (rt_is(n, "identifier") && rt_text_is(s->ctx, n, s->var)) {
        char t[160];
        kl_snprintf(t, sizeof t, "(%s + %d)", s->var, s->lane);
        lane_add(s, n, t);
    }
    return true;
}

/* The body's text for one lane (new string): contiguous accesses become kl_<array>.<c>, other uses
 * of the loop variable j become (j + lane). */
static char *lane_text(const kl_rule_ctx *ctx, const va *v, TSNode body, int lane, const char *const *comp)
{
    lane_edit e[64];
    lane_scan s = {ctx, v, e, 0, 64, lane, comp, v->L->var};
    kl_ast_walk(body, lane_visit, &s);
    if (s.n == s.cap) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t pos = ts_node_start_byte(body), end = ts_node_end_byte(body);
    for (unsigned i = 0; i < s.n; i++) {
        kl_strbuf_add(&sb, ctx->text + pos, e[i].a - pos);
        kl_strbuf_adds(&sb, e[i].text);
        pos = e[i].b;
    }
    kl_strbuf_add(&sb, ctx->text + pos, end - pos);
    return kl_strbuf_detach(&sb, NULL);
}

/* The body once per lane, each in braces, at indentation ind + more (its later lines moved by more). False
 * when the body has too many accesses. */
static bool add_lanes(kl_strbuf *sb, const kl_rule_ctx *ctx, const va *v, TSNode body, int width, const char *ind,
                      const char *more)
{
    static const char *const comp[] = {"x", "y", "z", "w"};
    bool braces = rt_is(body, "compound_statement");
    for (int lane = 0; lane < width; lane++) {
        char *lt = lane_text(ctx, v, body, lane, comp);
        if (!lt) return false;
        kl_strbuf_addf(sb, "%s%s%s", ind, more, braces ? "" : "{ ");
        for (const char *p = lt; *p; p++) {
            kl_strbuf_addc(sb, *p);
            if (*p == '\n' && p[1]) kl_strbuf_adds(sb, more);
        }
        kl_strbuf_addf(sb, "%s\n", braces ? "" : " }");
        free(lt);
    }
    return true;
}

/* The vector loop's body, each line at ind + more: the arrays read as vectors vt (those only written
 * declared), the lanes of the scalar body (add_lanes), the written arrays stored as vectors. False
 * when the body has too many accesses. */
static bool vector_body(kl_strbuf *sb, const kl_rule_ctx *ctx, const va *v, TSNode body, int width, const char *vt,
                        const char *ind, const char *more)
{
    for (unsigned k = 0; k < v->narr; k++) {
        const va_arr *x = &v->arr[k];
        if (x->read)
            kl_strbuf_addf(sb, "%s%s%s%s kl_%s = *reinterpret_cast<%s%s*>(&%s[%s]);\n", ind, more, x->write ? "" : "const ", vt,
                           x->name, x->write ? "" : "const ", vt, x->name, x->index);
        else
            kl_strbuf_addf(sb, "%s%s%s kl_%s;\n", ind, more, vt, x->name);
    }
    if (!add_lanes(sb, ctx, v, body, width, ind, more)) return false;
    for (unsigned k = 0; k < v->narr; k++)
        if (v->arr[k].write)
            kl_strbuf_addf(sb, "%s%s*reinterpret_cast<%s*>(&%s[%s]) = kl_%s;\n", ind, more, vt, v->arr[k].name, v->arr[k].index,
                           v->arr[k].name);
    return true;
}

/* The text of n with every identifier `var` in it replaced by repl (new string; NULL out of memory). */
static char *subst_text(const kl_rule_ctx *ctx, TSNode n, const char *var, const char *repl)
{
    kl_edits e = {0};
    char *text = NULL;
    kl_error err = {0};
    if (kl_edits_rename(ctx, n, var, repl, &e) != KL_OK ||
        kl_edits_apply_range(&e, ctx->text, ts_node_start_byte(n), ts_node_end_byte(n), &text, &err) != KL_OK)
        text = NULL;
    kl_edits_release(&e);
    return text;
}

/* Can an expression be written as the left operand of `+` (and as it is before `* W`) unparenthesised? */
static bool sum_operand(const kl_rule_ctx *ctx, TSNode n)
{
    if (rt_is(n, "identifier") || rt_is(n, "field_expression") || rt_is(n, "number_literal") ||
        rt_is(n, "call_expression") || rt_is(n, "subscript_expression") || rt_is(n, "parenthesized_expression"))
        return true;
    if (!rt_is(n, "binary_expression")) return false;
    TSNode op = rt_field(n, "operator");
    return rt_text_is(ctx, op, "*") || rt_text_is(ctx, op, "/") || rt_text_is(ctx, op, "%");
}

/* The thread-strided form: before the loop, the number of whole vectors (0 when an address of the row
 * is not aligned) and a loop over them on the same threads, each taking W consecutive elements a step;
 * the loop itself then starts after them. The layout is the grid-stride form's, so that
 * vectorize_stride.c reads it back as a present site. */
static kl_status apply_strided(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const va *v, int width,
                               kl_edits *out, kl_error *err)
{
    if (v->why[0]) return kl_rule_not_applicable(err, "%s", v->why);
    const kl_ax_loop *L = v->L;
    TSNode loop = L->node, body = rt_field(loop, "body");
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(loop)))
        return kl_rule_not_applicable(err, "the loop at line %u does not start its own line", kl_ast_line(loop));
    const char *vt = width == 4 ? "float4" : "float2";
    char ind[64], nv[32], vv[32];
    kl_rules_indent(ctx, ts_node_start_byte(loop), ind, sizeof ind);
    rt_fresh_name(ctx, fn, "nv", nv, sizeof nv);
    rt_fresh_name(ctx, fn, "v", vv, sizeof vv);
    char *start = text_of(ctx, v->vl.start), *stride = text_of(ctx, v->vl.stride);
    TSNode cond = rt_field(loop, "condition");
    while (rt_is(cond, "parenthesized_expression")) cond = ts_node_named_child(cond, 0);
    TSNode bound = rt_field(cond, "right");
    char *btext = text_of(ctx, bound);
    bool spar = !sum_operand(ctx, v->vl.start), bpar = !sum_operand(ctx, bound);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    if (!start || !stride || !btext) st = KL_ERR_NOMEM;
    kl_strbuf_addf(&sb, "%s// vectorize: %d elements per access of", ind, width);
    for (unsigned k = 0; k < v->narr; k++) kl_strbuf_addf(&sb, "%s '%s'", k ? "," : "", v->arr[k].name);
    kl_strbuf_addf(&sb, " (%s); the loop below does the last %s %% %d, or all when an address is not aligned\n", vt,
                   btext ? btext : "", width);
    kl_strbuf_addf(&sb, "%sconst %s %s = ", ind, v->type, nv);
    for (unsigned k = 0; k < v->narr && st == KL_OK; k++) {
        /* the row's first element: the index at 0 */
        TSNode sub = v->arr[k].first, ix = rt_field(sub, "index");
        if (ts_node_is_null(ix)) ix = ts_node_named_child(sub, 1);
        if (rt_is(ix, "subscript_argument_list") && ts_node_named_child_count(ix) == 1) ix = ts_node_named_child(ix, 0);
        char *i0 = subst_text(ctx, ix, L->var, "0");
        if (!i0) st = KL_ERR_NOMEM;
        else kl_strbuf_addf(&sb, "%sreinterpret_cast<unsigned long long>(&%s[%s]) %% %d == 0", k ? " && " : "",
                            v->arr[k].name, i0, 4 * width);
        free(i0);
    }
    kl_strbuf_addf(&sb, bpar ? " ? (%s) / %d : 0;\n" : " ? %s / %d : 0;\n", btext ? btext : "", width);
    kl_strbuf_addf(&sb, "%sfor (%s %s = %s; %s < %s; %s += %s) {\n", ind, v->type, vv, start ? start : "", vv, nv, vv,
                   stride ? stride : "");
    kl_strbuf_addf(&sb, "%s    const %s %s = %s * %d;\n", ind, v->type, L->var, vv, width);
    if (st == KL_OK && !vector_body(&sb, ctx, v, body, width, vt, ind, "    ")) {
        kl_strbuf_release(&sb);
        free(start), free(stride), free(btext);
        return kl_rule_not_applicable(err, "the loop body at line %u has too many accesses", kl_ast_line(body));
    }
    kl_strbuf_addf(&sb, "%s}\n", ind);
    /* before the loop's line (its #pragma line, when it has one, stays with it) */
    int li = kl_affine_loop_index(ax, loop);
    uint32_t at = kl_ast_line_start(ctx->text, ts_node_start_byte(loop));
    if (li >= 0 && kl_affine_loop(ax, (unsigned)li)->has_pragma_unroll)
        at = kl_ast_line_start(ctx->text, kl_affine_loop(ax, (unsigned)li)->pragma_start);
    if (st == KL_OK && sb.failed) st = KL_ERR_NOMEM;
    if (st == KL_OK) st = kl_edits_add(out, at, at, kl_strbuf_str(&sb));
    if (st == KL_OK)
        st = kl_edits_addf(out, ts_node_start_byte(v->vl.start), ts_node_end_byte(v->vl.start), spar ? "(%s) + %s * %d" : "%s + %s * %d",
                           start, nv, width);
    kl_strbuf_release(&sb);
    free(start);
    free(stride);
    free(btext);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

static kl_status apply_loop(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const va *v, int width, kl_edits *out,
                            kl_error *err)
{
    if (v->why[0]) return kl_rule_not_applicable(err, "%s", v->why);
    const kl_ax_loop *L = v->L;
    const char *vt = width == 4 ? "float4" : "float2";
    TSNode loop = L->node, body = rt_field(loop, "body");
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(loop), ind, sizeof ind);
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(loop)))
        return kl_rule_not_applicable(err, "the loop at line %u does not start its own line", kl_ast_line(loop));
    kl_strbuf sb = KL_STRBUF_INIT;
    TSNode init = rt_field(loop, "initializer");
    if (!ts_node_is_null(init) && !L->start)
        return kl_rule_not_applicable(err, "the start of the loop over %s at line %u is not read", L->var, kl_ast_line(loop));
    kl_strbuf_addf(&sb, "{\n");
    /* the loop's start, kept in the variable the vector loop advances (none: it goes on from its value) */
    if (ts_node_is_null(init)) {
    } else if (v->type[0]) {
        kl_strbuf_addf(&sb, "%s    %s %s = %s;\n", ind, v->type, L->var, L->start);
    } else {
        kl_strbuf_addf(&sb, "%s    %s = %s;\n", ind, L->var, L->start);
    }
    kl_strbuf_addf(&sb, "%s    if (", ind);
    for (unsigned k = 0; k < v->narr; k++)
        kl_strbuf_addf(&sb, "%s((uintptr_t)&%s[%s] & %d) == 0", k ? " && " : "", v->arr[k].name, v->arr[k].index,
                       width * 4 - 1);
    kl_strbuf_addf(&sb, ") {\n");
    kl_strbuf_addf(&sb, "%s        for (; %s + %d < %s; %s += %d) {\n", ind, L->var, width - 1, L->bound, L->var, width);
    if (!vector_body(&sb, ctx, v, body, width, vt, ind, "            ")) {
        kl_strbuf_release(&sb);
        return kl_rule_not_applicable(err, "the loop body at line %u has too many accesses", kl_ast_line(body));
    }
    kl_strbuf_addf(&sb, "%s        }\n%s    }\n", ind, ind);
    /* the tail: the original loop without its initializer, one level deeper */
    uint32_t la = ts_node_start_byte(loop), lb = ts_node_end_byte(loop);
    kl_strbuf_addf(&sb, "%s    ", ind);
    kl_strbuf tail = KL_STRBUF_INIT;
    if (ts_node_is_null(init)) {
        kl_strbuf_add(&tail, ctx->text + la, lb - la);
    } else {
        uint32_t ia = ts_node_start_byte(init), ib = ts_node_end_byte(init);
        kl_strbuf_add(&tail, ctx->text + la, ia - la);
        if (rt_is(init, "declaration")) kl_strbuf_adds(&tail, ";"); /* the declaration held the ';' */
        kl_strbuf_add(&tail, ctx->text + ib, lb - ib);
    }
    const char *tt = kl_strbuf_str(&tail);
    for (const char *p = tt; *p; p++) {
        kl_strbuf_addc(&sb, *p);
        if (*p == '\n' && p[1]) kl_strbuf_adds(&sb, "    ");
    }
    kl_strbuf_release(&tail);
    kl_strbuf_addf(&sb, "\n%s}", ind);
    kl_status st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, la, lb, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    /* uintptr_t: <stdint.h>, unless the file includes it already */
    if (st == KL_OK && !strstr(ctx->text, "<stdint.h>") && !strstr(ctx->text, "<cstdint>"))
        st = kl_edits_add(out, 0, 0, "#include <stdint.h>\n");
    (void)ax;
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- running a site ---------------------------------------------------------------------------------------- */

typedef struct vrun {
    rt_run run;
    int width;
    const kl_rule_ctx *ctx;   /* the function being visited */
    kl_affine_ctx *ax;
    TSNode fn;
} vrun;

static bool run_present_visit(TSNode n, void *user)
{
    vrun *r = user;
    if (r->run.done) return false;
    if (ts_node_start_byte(n) != r->run.site->span.start || ts_node_end_byte(n) != r->run.site->span.end) return true;
    vp p;
    if (!present_at(r->ctx, r->ax, r->fn, n, &p)) return true;
    r->run.st = remove_present(r->ctx, r->ax, &p, r->run.out, r->run.err);
    r->run.done = true;
    return false;
}

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    vrun *r = user;
    if (r->run.done || strcmp(name, r->run.site->kernel)) return KL_OK;
    r->ctx = ctx, r->ax = ax, r->fn = fn;
    if (r->run.site->dir == KL_SITE_PRESENT) {
        kl_ast_walk(kl_ast_function_body(fn), run_present_visit, r);
        return KL_OK;
    }
    for (unsigned i = 0; i < kl_affine_loop_count(ax) && !r->run.done; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        if (ts_node_start_byte(L->node) != r->run.site->span.start) continue;
        va v;
        if (!analyse_apply(ctx, ax, fn, L, &v)) continue;
        r->run.st = v.strided ? apply_strided(ctx, ax, fn, &v, r->width, r->run.out, r->run.err)
                              : apply_loop(ctx, ax, &v, r->width, r->run.out, r->run.err);
        r->run.done = true;
    }
    return KL_OK;
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, int width, kl_edits *out, kl_error *err)
{
    vrun r = {.run = {site, NULL, out, err, false, KL_OK}, .width = width};
    return kl_rules_run_site(ctx, run_visit, &r, &r.run, true, "nothing to %s at %s",
                             site->dir == KL_SITE_PRESENT ? "remove" : "vectorize", site->id);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    if (kl_vs_is_site(site)) return kl_vs_remove(ctx, site, out, err);
    if (kl_vc_is_site(site)) return kl_vc_remove(ctx, site, out, err);
    return run(ctx, site, 0, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    kl_status refused = kl_site_why_not(site, err);
    if (refused != KL_OK) return refused;
    int64_t w = 4;
    if (!kl_rule_param_int(&kl_rule_vectorize, params, "width", &w) || (w != 2 && w != 4 && w != 8 && w != 16))
        return kl_error_set(err, KL_ERR_INVALID, "vectorize: width must be 2, 4, 8 or 16");
    if (kl_vs_is_site(site)) return kl_vs_apply(ctx, site, (int)w, out, err);
    if (w > 4) return kl_rule_not_applicable(err, "%s: a unit-stride f32 loop takes width 2 or 4, not %d", site->id, (int)w);
    return run(ctx, site, (int)w, out, err);
}

const kl_rule kl_rule_vectorize = {
    "vectorize", "load and store contiguous elements as 16-, 8- or 4-byte vectors (float4, uint4 …), with a scalar tail",
    vec_params, 1, find, remove_site, apply,
};
