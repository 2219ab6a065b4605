/* restrict: `const T *__restrict__` on the pointer parameters of a kernel (the task's tensors are
 * distinct), and `__ldg` read-only loads through them. */
#include <stdarg.h>
#include <stdio.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const ldg_values[] = {"0", "1", NULL};
static const kl_rule_param restrict_params[] = {{"ldg", ldg_values, "0"}};

#define MAX_PTRS 32

static bool is_type(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }


/* How a pointer parameter is used in the kernel. */
typedef enum use_kind { USE_READ = 0, USE_WRITE = 1, USE_UNKNOWN = 2, USE_ESCAPE = 3 } use_kind;

typedef struct ptr_use {
    use_kind kind;        /* the worst use seen */
    char why[200];        /* for UNKNOWN / ESCAPE / WRITE: where */
    unsigned loads;       /* plain reads p[i] that could take __ldg */
    unsigned ldg;         /* __ldg calls on it */
} ptr_use;

typedef struct scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    const char *name;     /* the identifier followed (the parameter or one of its aliases) */
    ptr_use *u;
    kl_edits *wrap;       /* when set: wrap plain reads p[i] in __ldg (only for the parameter itself) */
    bool is_param;        /* the parameter itself, or a const alias of an __ldg-able type: loads counted */
    unsigned depth;
    kl_status st;
} scan;

/* Record a use of kind k unless a worse one is already recorded (the first of a kind wins). */
static void worse(ptr_use *u, use_kind k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void worse(ptr_use *u, use_kind k, const char *fmt, ...)
{
    if (k < u->kind || (k == u->kind && u->why[0]) || k == USE_READ) return;
    u->kind = k;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->why, sizeof u->why, fmt, ap);
    va_end(ap);
}

/* Climb from n through parentheses. */
static TSNode up_parens(TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (is_type(p, "parenthesized_expression")) {
        n = p;
        p = ts_node_parent(n);
    }
    return n;
}

/* The index of arg among the call's arguments. */
static int arg_index(TSNode args, TSNode arg)
{
    uint32_t c = ts_node_named_child_count(args);
    for (uint32_t i = 0; i < c; i++)
        if (ts_node_eq(ts_node_named_child(args, i), arg)) return (int)i;
    return -1;
}

/* A __device__ function of the file named `fname`: is its parameter `idx` a pointer to const? */
static int device_param_const(const kl_source *src, const char *fname, int idx)
{
    TSNode fn = kl_ast_function_named(src, fname);
    if (ts_node_is_null(fn) || !kl_ast_function_has(src, fn, "__device__")) return -1;
    TSNode ps = kl_ast_function_params(fn);
    if (ts_node_is_null(ps) || idx < 0 || (uint32_t)idx >= ts_node_named_child_count(ps)) return -1;
    TSNode pd = ts_node_named_child(ps, (uint32_t)idx);
    uint32_t kc = ts_node_child_count(pd);
    for (uint32_t k = 0; k < kc; k++) {
        TSNode q = ts_node_child(pd, k);
        if (is_type(q, "type_qualifier") && kl_node_text_is(src, q, "const")) return 1;
    }
    return 0;
}

/* Does the declaration (or parameter declaration) carry `const`? */
static bool decl_has_const(const kl_source *src, TSNode d)
{
    uint32_t kc = ts_node_child_count(d);
    for (uint32_t k = 0; k < kc; k++) {
        TSNode q = ts_node_child(d, k);
        if (is_type(q, "type_qualifier") && kl_node_text_is(src, q, "const")) return true;
    }
    return false;
}

/* An element passed as argument `arg` of the call whose argument_list is args: does the callee
 * take it by non-const reference? A function of the file whose parameter is `T &` without const
 * does; so does swap. Other functions (math, intrinsics, functions elsewhere) take values. */
static bool element_by_reference(const kl_source *src, TSNode args, TSNode arg)
{
    TSNode f = ts_node_child_by_field_name(ts_node_parent(args), "function", 8);
    if (is_type(f, "template_function")) f = ts_node_child_by_field_name(f, "name", 4);
    if (is_type(f, "qualified_identifier")) f = ts_node_child_by_field_name(f, "name", 4);
    if (!is_type(f, "identifier")) return false;
    char *fname = kl_node_text(src, f);
    if (!fname) return false;
    bool yes = !strcmp(fname, "swap");
    TSNode fn = yes ? (TSNode){{0}, 0, 0} : kl_ast_function_named(src, fname);
    free(fname);
    int idx = arg_index(args, arg);
    TSNode ps = kl_ast_function_params(fn);
    if (!yes && idx >= 0 && (uint32_t)idx < ts_node_named_child_count(ps)) {
        TSNode pd = ts_node_named_child(ps, (uint32_t)idx);
        yes = is_type(ts_node_child_by_field_name(pd, "declarator", 10), "reference_declarator") &&
              !decl_has_const(src, pd);
    }
    return yes;
}

static void follow(scan *s, const char *name);
static bool ldg_type(const char *elem);

/* A local pointer declared with the value n: a visible alias. Const pointee: read only. */
static void alias_decl(scan *s, TSNode init)
{
    TSNode decl = ts_node_parent(init);
    const kl_source *src = s->ctx->src;
    bool is_const = false;
    uint32_t kc = ts_node_child_count(decl);
    for (uint32_t k = 0; k < kc; k++) {
        TSNode q = ts_node_child(decl, k);
        if (is_type(q, "type_qualifier") && kl_node_text_is(src, q, "const")) is_const = true;
    }
    TSNode ty = ts_node_child_by_field_name(decl, "type", 4);
    bool is_auto = is_type(ty, "placeholder_type_specifier") || kl_node_text_is(src, ty, "auto");
    TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(init, "declarator", 10));
    if (ts_node_is_null(nm)) {
        worse(s->u, USE_UNKNOWN, "%s is used in a declaration at line %u", s->name, kl_ast_line(init));
        return;
    }
    char *alias = kl_node_text(src, nm);
    if (!alias) {
        s->st = KL_ERR_NOMEM;
        return;
    }
    if (is_const && s->depth < 4) {
        /* a const alias (`const float *xr = x + row * cols;`): its loads are the parameter's loads */
        char *tt = kl_node_text(src, ty);
        scan sub = *s;
        sub.is_param = s->is_param && tt && ldg_type(tt);
        if (!sub.is_param) sub.wrap = NULL;
        sub.depth = s->depth + 1;
        free(tt);
        follow(&sub, alias);
        s->st = sub.st;
    }
    if (!is_const) {
        /* a non-const alias: the parameter cannot become const, and writes through it are writes */
        if (!is_auto) worse(s->u, USE_UNKNOWN, "%s has a non-const alias declared at line %u", s->name, kl_ast_line(init));
        if (s->depth < 4) {
            scan sub = *s;
            sub.name = alias;
            sub.wrap = NULL;
            sub.is_param = false;
            sub.depth = s->depth + 1;
            follow(&sub, alias);
            s->st = sub.st;
        }
    }
    free(alias);
}

/* The context of a pointer VALUE derived from the parameter (p, p + i, (T *)p, p++). */
static void pointer_value(scan *s, TSNode v);

/* The context of an lvalue reached through the parameter (p[i], *(p + i)). */
static void lvalue(scan *s, TSNode lv, bool plain_subscript)
{
    const kl_source *src = s->ctx->src;
    TSNode n = up_parens(lv);
    TSNode p = ts_node_parent(n);
    /* members and further subscripts of the element are still that element */
    while (is_type(p, "field_expression") || (is_type(p, "subscript_expression") &&
                                              ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n))) {
        if (is_type(p, "subscript_expression")) plain_subscript = false;
        n = up_parens(p);
        p = ts_node_parent(n);
    }
    if (is_type(p, "assignment_expression") && ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n)) {
        worse(s->u, USE_WRITE, "%s is written at line %u", s->name, kl_ast_line(p));
        return;
    }
    if (is_type(p, "update_expression")) {
        worse(s->u, USE_WRITE, "%s is written at line %u", s->name, kl_ast_line(p));
        return;
    }
    if (is_type(p, "pointer_expression") && kl_node_text_is(src, ts_node_child_by_field_name(p, "operator", 8), "&")) {
        pointer_value(s, p);
        return;
    }
    if (is_type(p, "init_declarator") && ts_node_eq(ts_node_child_by_field_name(p, "value", 5), n) &&
        is_type(ts_node_child_by_field_name(p, "declarator", 10), "reference_declarator") &&
        !decl_has_const(src, ts_node_parent(p))) {
        /* `float &r = p[i];`: writes through r are writes of the element */
        worse(s->u, USE_WRITE, "%s is bound to a non-const reference at line %u", s->name, kl_ast_line(p));
        return;
    }
    if (is_type(p, "argument_list") && element_by_reference(src, p, n)) {
        worse(s->u, USE_WRITE, "an element of %s is passed by non-const reference at line %u", s->name, kl_ast_line(p));
        return;
    }
    /* a read */
    if (plain_subscript && s->is_param && ts_node_eq(n, up_parens(lv))) {
        s->u->loads++;
        if (s->wrap && s->st == KL_OK) {
            s->st = kl_edits_add(s->wrap, ts_node_start_byte(lv), ts_node_start_byte(lv), "__ldg(&");
            if (s->st == KL_OK) s->st = kl_edits_add(s->wrap, ts_node_end_byte(lv), ts_node_end_byte(lv), ")");
        }
    }
}

static void pointer_value(scan *s, TSNode v)
{
    const kl_source *src = s->ctx->src;
    TSNode n = up_parens(v);
    TSNode p = ts_node_parent(n);
    unsigned line = kl_ast_line(v);
    if (is_type(p, "binary_expression")) {
        char *op = kl_node_text(src, ts_node_child_by_field_name(p, "operator", 8));
        bool arith = op && (!strcmp(op, "+") || !strcmp(op, "-"));
        bool cmp = op && (!strcmp(op, "==") || !strcmp(op, "!=") || !strcmp(op, "<") || !strcmp(op, ">") ||
                          !strcmp(op, "<=") || !strcmp(op, ">=") || !strcmp(op, "&&") || !strcmp(op, "||"));
        free(op);
        if (arith) pointer_value(s, p);
        else if (!cmp) worse(s->u, USE_UNKNOWN, "%s is used in an expression at line %u", s->name, line);
        return;
    }
    if (is_type(p, "pointer_expression")) {
        if (kl_node_text_is(src, ts_node_child_by_field_name(p, "operator", 8), "*")) lvalue(s, p, false);
        else worse(s->u, USE_ESCAPE, "the address of %s is taken at line %u", s->name, line);
        return;
    }
    if (is_type(p, "update_expression")) {
        pointer_value(s, p); /* p++ moves the pointer: its value is still a pointer into the tensor */
        return;
    }
    if (is_type(p, "subscript_expression") && ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n)) {
        lvalue(s, p, false);
        return;
    }
    if (is_type(p, "cast_expression")) {
        char *t = kl_node_text(src, ts_node_child_by_field_name(p, "type", 4));
        bool c = t && strstr(t, "const");
        free(t);
        if (!c) pointer_value(s, p);
        return; /* a cast to a pointer to const: reads only */
    }
    if (is_type(p, "argument_list")) {
        TSNode call = ts_node_parent(p);
        TSNode f = ts_node_child_by_field_name(call, "function", 8);
        if (is_type(f, "template_function")) {
            /* reinterpret_cast<const float4 *>(p), static_cast<…>(p) */
            char *t = kl_node_text(src, f);
            bool cast = t && (kl_str_starts(t, "reinterpret_cast") || kl_str_starts(t, "static_cast") ||
                              kl_str_starts(t, "const_cast"));
            bool c = t && strstr(t, "const") && !kl_str_starts(t, "const_cast");
            free(t);
            if (!cast) worse(s->u, USE_ESCAPE, "%s is passed to a template call at line %u", s->name, line);
            else if (!c) pointer_value(s, call);
            return;
        }
        char *fname = is_type(f, "identifier") ? kl_node_text(src, f) : NULL;
        if (!fname) {
            worse(s->u, USE_ESCAPE, "%s is passed to an indirect call at line %u", s->name, line);
            return;
        }
        int idx = arg_index(p, n);
        if (kl_str_starts(fname, "__ldg") || kl_str_starts(fname, "__ldcg") || kl_str_starts(fname, "__ldca") ||
            kl_str_starts(fname, "__ldcs") || kl_str_starts(fname, "__ldlu") || kl_str_starts(fname, "__ldcv")) {
            if (!strcmp(fname, "__ldg")) s->u->ldg++;
        } else if (kl_str_starts(fname, "atomic") || kl_str_starts(fname, "__st")) {
            worse(s->u, USE_WRITE, "%s is written by an atomic or store at line %u", s->name, line);
        } else {
            int c = device_param_const(src, fname, idx);
            if (c < 0) {
                worse(s->u, USE_ESCAPE, "%s escapes to %s() at line %u, whose accesses cannot be seen", s->name,
                      fname, line);
            } else if (c == 0) {
                worse(s->u, USE_WRITE, "%s is passed to a non-const pointer parameter at line %u", s->name, line);
            }
        }
        free(fname);
        return;
    }
    if (is_type(p, "init_declarator") && ts_node_eq(ts_node_child_by_field_name(p, "value", 5), n)) {
        alias_decl(s, p);
        return;
    }
    if (is_type(p, "assignment_expression")) {
        if (ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n)) return; /* the pointer itself moves */
        worse(s->u, USE_ESCAPE, "%s is stored into another variable at line %u", s->name, line);
        return;
    }
    if (is_type(p, "condition_clause") || is_type(p, "unary_expression")) return; /* if (p), !p */
    if (is_type(p, "conditional_expression") && ts_node_eq(ts_node_child_by_field_name(p, "condition", 9), n)) return;
    worse(s->u, USE_ESCAPE, "%s is used in a way the analysis does not follow at line %u", s->name, line);
}

static bool visit_ident(TSNode n, void *user)
{
    scan *s = user;
    if (s->st != KL_OK) return false;
    if (!is_type(n, "identifier") || !kl_node_text_is(s->ctx->src, n, s->name)) return true;
    TSNode p = ts_node_parent(n);
    /* the declaration of an alias itself, a field name, a called function's name */
    if (is_type(p, "init_declarator") && ts_node_eq(ts_node_child_by_field_name(p, "declarator", 10), n)) return true;
    if (is_type(p, "pointer_declarator") || is_type(p, "field_expression")) {
        if (is_type(p, "field_expression") && ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n))
            worse(s->u, USE_UNKNOWN, "%s is used as a struct at line %u", s->name, kl_ast_line(n));
        return true;
    }
    TSNode up = up_parens(n);
    TSNode pp = ts_node_parent(up);
    if (is_type(pp, "subscript_expression") && ts_node_eq(ts_node_child_by_field_name(pp, "argument", 8), up)) {
        lvalue(s, pp, ts_node_eq(up, n));
        return true;
    }
    pointer_value(s, n);
    return true;
}

static void follow(scan *s, const char *name)
{
    s->name = name;
    kl_ast_walk(s->body, visit_ident, s);
}

/* ---- the kernel's parameters and its launches ---------------------------------------------------- */

/* The element types __ldg has an overload for. */
static bool ldg_type(const char *elem)
{
    static const char *const ok[] = {"float", "double", "int", "unsigned", "unsigned int", "char", "signed char",
                                     "unsigned char", "short", "unsigned short", "long", "unsigned long",
                                     "long long", "unsigned long long", "int8_t", "uint8_t", "int16_t",
                                     "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "float2",
                                     "float4", "double2", "int2", "int4", "uint2", "uint4", "__half", "__half2",
                                     "__nv_bfloat16", "__nv_bfloat162", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(ok[i], elem)) return true;
    return false;
}

static const char *dtype_of(const char *elem)
{
    static const char *const map[][2] = {{"float", "f32"}, {"double", "f64"}, {"__half", "f16"},
                                         {"half", "f16"}, {"__nv_bfloat16", "bf16"}, {"int", "i32"},
                                         {"int32_t", "i32"}, {"uint8_t", "u8"}, {"unsigned char", "u8"},
                                         {"float4", "f32x4"}, {"float2", "f32x2"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], elem)) return map[i][1];
    return elem;
}

/* The root variable of a launch argument: x for x, x + off, &x[i], (const float *)x. NULL when none. */
static char *arg_root(const kl_source *src, TSNode a)
{
    for (;;) {
        if (is_type(a, "parenthesized_expression") || is_type(a, "pointer_expression")) a = ts_node_named_child(a, 0);
        else if (is_type(a, "cast_expression")) a = ts_node_child_by_field_name(a, "value", 5);
        else if (is_type(a, "subscript_expression")) a = ts_node_child_by_field_name(a, "argument", 8);
        else if (is_type(a, "binary_expression")) a = ts_node_child_by_field_name(a, "left", 4);
        else break;
        if (ts_node_is_null(a)) return NULL;
    }
    return is_type(a, "identifier") ? kl_node_text(src, a) : NULL;
}

/* Do the launches of `kernel` pass distinct tensors to its pointer parameters (indices ptr[])? */
static bool distinct_args(const kl_rule_ctx *ctx, const char *kernel, const kl_affine_ctx *ax, unsigned *nlaunch,
                          char *why, size_t size)
{
    kl_launch_sites ls;
    *nlaunch = 0;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) {
        kl_snprintf(why, size, "out of memory");
        return false;
    }
    bool ok = true;
    for (unsigned i = 0; i < ls.count && ok; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, kernel)) continue;
        (*nlaunch)++;
        char *roots[MAX_PTRS] = {0};
        unsigned nr = 0;
        for (unsigned k = 0; k < kl_affine_param_count(ax) && nr < MAX_PTRS && ok; k++) {
            const kl_param_info *pi = kl_affine_param(ax, k);
            if (!pi->pointer) continue;
            TSNode a = k < ts_node_named_child_count(l->args) ? ts_node_named_child(l->args, k) : (TSNode){0};
            char *r = ts_node_is_null(a) ? NULL : arg_root(ctx->src, a);
            for (unsigned j = 0; j < nr && r; j++)
                if (roots[j] && !strcmp(roots[j], r)) {
                    kl_snprintf(why, size, "the launch at line %u passes %s to two pointer parameters of %s",
                                kl_ast_line(l->call), r, kernel);
                    ok = false;
                }
            roots[nr++] = r;
        }
        for (unsigned j = 0; j < nr; j++) free(roots[j]);
    }
    kl_launch_sites_release(&ls);
    if (ok && *nlaunch == 0) {
        kl_snprintf(why, size, "%s is never launched in this file: its pointer arguments cannot be shown distinct",
                    kernel);
        ok = false;
    }
    return ok;
}

/* Is the kernel also declared without a body (a prototype that would have to change too)? */
static bool has_prototype(const kl_rule_ctx *ctx, const char *kernel, unsigned *line)
{
    TSNode root = kl_source_root(ctx->src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (is_type(d, "template_declaration")) d = kl_ast_child_of_type(d, "declaration");
        if (!is_type(d, "declaration")) continue;
        TSNode fd = ts_node_child_by_field_name(d, "declarator", 10);
        if (!is_type(fd, "function_declarator")) continue;
        if (kl_node_text_is(ctx->src, ts_node_child_by_field_name(fd, "declarator", 10), kernel)) {
            *line = kl_ast_line(d);
            return true;
        }
    }
    return false;
}

typedef struct analysis {
    unsigned nptr, nrestrict, ldg_calls, loads;
    ptr_use use[MAX_PTRS];
    unsigned idx[MAX_PTRS]; /* parameter index of each pointer */
    kl_status st;
} analysis;

typedef struct macro_use {
    const kl_rule_ctx *ctx;
    const char *name;  /* the parameter */
    char macro[128];   /* the first macro invoked in the body whose definition names it */
    unsigned line;
} macro_use;

/* The #define of `macro` (function-like or not) in the file, or a null node. */
static TSNode macro_def(const kl_rule_ctx *ctx, const char *macro)
{
    TSNode root = kl_source_root(ctx->src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(root, i);
        if ((is_type(d, "preproc_function_def") || is_type(d, "preproc_def")) &&
            kl_node_text_is(ctx->src, ts_node_child_by_field_name(d, "name", 4), macro))
            return d;
    }
    return (TSNode){{0}, 0, 0};
}

static bool word_in(const char *t, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = t ? strstr(t, w) : NULL; p; p = strstr(p + 1, w)) {
        bool lb = p == t || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool rb = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (lb && rb) return true;
    }
    return false;
}

static bool find_macro_use(TSNode n, void *user)
{
    macro_use *m = user;
    if (m->macro[0]) return false;
    if (!is_type(n, "call_expression")) return true;
    TSNode f = ts_node_child_by_field_name(n, "function", 8);
    if (!is_type(f, "identifier")) return true;
    char *fname = kl_node_text(m->ctx->src, f);
    TSNode d = fname ? macro_def(m->ctx, fname) : (TSNode){{0}, 0, 0};
    char *body = ts_node_is_null(d) ? NULL : kl_node_text(m->ctx->src, ts_node_child_by_field_name(d, "value", 5));
    if (body && word_in(body, m->name)) {
        kl_snprintf(m->macro, sizeof m->macro, "%s", fname);
        m->line = kl_ast_line(n);
    }
    free(body);
    free(fname);
    return true;
}

static kl_status analyse(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, analysis *a, kl_edits *wrap,
                         const bool *wrap_which)
{
    memset(a, 0, sizeof *a);
    for (unsigned k = 0; k < kl_affine_param_count(ax) && a->nptr < MAX_PTRS; k++) {
        const kl_param_info *pi = kl_affine_param(ax, k);
        if (!pi->pointer) continue;
        unsigned j = a->nptr++;
        a->idx[j] = k;
        if (pi->is_restrict) a->nrestrict++;
        scan s = {ctx, kl_ast_function_body(fn), pi->name, &a->use[j], wrap_which && wrap_which[j] ? wrap : NULL,
                  true, 0, KL_OK};
        follow(&s, pi->name);
        if (s.st != KL_OK) return s.st;
        /* a macro of the file that names the pointer in its body: its accesses are not in the tree
         * here (the canonical form, with the macros expanded, sees them) */
        macro_use mu = {ctx, pi->name, "", 0};
        kl_ast_walk(kl_ast_function_body(fn), find_macro_use, &mu);
        if (mu.macro[0])
            worse(&a->use[j], USE_ESCAPE, "%s is used through the macro %s at line %u, which the text as written hides",
                  pi->name, mu.macro, mu.line);
        a->ldg_calls += a->use[j].ldg;
        a->loads += a->use[j].loads;
    }
    return KL_OK;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    analysis a;
    kl_status st = analyse(ctx, fn, ax, &a, NULL, NULL);
    if (st != KL_OK) return st;
    if (a.nptr == 0) return KL_OK;
    char id[256];
    kl_site_id(id, sizeof id, name, fn, NULL);
    json_t *f = json_object(), *ps = json_array();
    if (!f || !ps) {
        json_decref(f);
        json_decref(ps);
        return KL_ERR_NOMEM;
    }
    for (unsigned j = 0; j < a.nptr; j++) {
        const kl_param_info *pi = kl_affine_param(ax, a.idx[j]);
        static const char *const kinds[] = {"read", "written", "unknown", "escapes"};
        json_array_append_new(ps, json_pack("{s:s, s:s, s:b, s:b, s:s, s:I}", "name", pi->name, "dtype",
                                            dtype_of(pi->elem), "restrict", pi->is_restrict, "const", pi->is_const,
                                            "use", kinds[a.use[j].kind], "loads", (json_int_t)a.use[j].loads));
    }
    json_object_set_new(f, "pointers", ps);
    json_object_set_new(f, "restrict", json_integer(a.nrestrict));
    json_object_set_new(f, "ldg_calls", json_integer(a.ldg_calls));
    if (a.nrestrict > 0 || a.ldg_calls > 0) {
        char note[160];
        kl_snprintf(note, sizeof note, "%u __restrict__ pointer parameter%s and %u __ldg load%s in %s", a.nrestrict,
                    a.nrestrict == 1 ? "" : "s", a.ldg_calls, a.ldg_calls == 1 ? "" : "s", name);
        json_t *params = json_pack("{s:s}", "ldg", a.ldg_calls ? "1" : "0");
        return kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(fn), name, f, params, note);
    }
    /* applicable: none of the pointers is restrict yet */
    char why[300] = "";
    unsigned nl = 0, pl = 0;
    bool ok = distinct_args(ctx, name, ax, &nl, why, sizeof why);
    if (nl == 0) {
        json_decref(f); /* never launched here: nothing says its tensors are distinct */
        return KL_OK;
    }
    for (unsigned j = 0; j < a.nptr && ok; j++)
        if (a.use[j].kind == USE_ESCAPE) {
            kl_snprintf(why, sizeof why, "%s", a.use[j].why);
            ok = false;
        }
    if (ok && has_prototype(ctx, name, &pl)) {
        kl_snprintf(why, sizeof why, "%s is also declared at line %u: that prototype would have to change too", name,
                    pl);
        ok = false;
    }
    json_object_set_new(f, "launches", json_integer(nl));
    if (!ok) json_object_set_new(f, "why_not", json_string(why));
    char note[200];
    kl_snprintf(note, sizeof note, "%u pointer parameter%s without __restrict__ in %s", a.nptr, a.nptr == 1 ? "" : "s",
                name);
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(fn), name, f, NULL, ok ? note : why);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_function(ctx, "__global__", visit, out, err);
}

/* ---- the rewrites ------------------------------------------------------------------------------ */

typedef struct run {
    const kl_rule_ctx *ctx;
    const kl_site *site;
    bool remove;
    const json_t *params;
    kl_edits *out;
    kl_error *err;
    kl_status st;         /* of the __ldg rewrite walk */
    bool found;
} run;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Strip every __restrict__ / __restrict in the parameter list, with the blanks after it. */
static kl_status strip_restrict(const kl_rule_ctx *ctx, TSNode ps, kl_edits *out)
{
    uint32_t a = ts_node_start_byte(ps), b = ts_node_end_byte(ps);
    for (uint32_t i = a; i < b; i++) {
        if (i > a && kl_ident_char(ctx->text[i - 1])) continue;
        uint32_t l = 0;
        if (i + 12 <= b && !memcmp(ctx->text + i, "__restrict__", 12)) l = 12;
        else if (i + 10 <= b && !memcmp(ctx->text + i, "__restrict", 10)) l = 10;
        if (!l || (i + l < b && kl_ident_char(ctx->text[i + l]))) continue;
        uint32_t e = i + l;
        while (e < b && is_space(ctx->text[e])) e++;
        /* `float*__restrict__ x`: keep one space between the star and the name */
        const char *keep = (i > a && ctx->text[i - 1] == '*' && e < b && kl_ident_char(ctx->text[e]) && e == i + l)
                               ? " " : "";
        kl_status st = kl_edits_add(out, i, e, keep);
        if (st != KL_OK) return st;
        i = e - 1;
    }
    return KL_OK;
}

static bool strip_parens(TSNode *n)
{
    bool any = false;
    while (is_type(*n, "parenthesized_expression")) {
        *n = ts_node_named_child(*n, 0);
        any = true;
    }
    return any;
}

/* __ldg(&p[i]) -> p[i]; __ldg(p + i) -> p[i]; __ldg(p) -> *p (parenthesised when needed). */
static bool unldg(TSNode n, void *user)
{
    run *r = user;
    const kl_rule_ctx *ctx = r->ctx;
    if (r->st != KL_OK) return false;
    if (!is_type(n, "call_expression")) return true;
    TSNode f = ts_node_child_by_field_name(n, "function", 8), args = ts_node_child_by_field_name(n, "arguments", 9);
    if (!is_type(f, "identifier") || ts_node_named_child_count(args) != 1) return true;
    if (!kl_node_text_is(ctx->src, f, "__ldg")) return true;
    TSNode a = ts_node_named_child(args, 0);
    strip_parens(&a);
    uint32_t cs = ts_node_start_byte(n), ce = ts_node_end_byte(n);
    kl_status st = KL_OK;
    TSNode parent = ts_node_parent(n);
    bool wrap = is_type(parent, "field_expression") || is_type(parent, "subscript_expression") ||
                is_type(parent, "pointer_expression") || is_type(parent, "unary_expression");
    if (is_type(a, "pointer_expression") &&
        kl_node_text_is(ctx->src, ts_node_child_by_field_name(a, "operator", 8), "&")) {
        /* __ldg(&X) -> X */
        TSNode x = ts_node_child_by_field_name(a, "argument", 8);
        TSNode inner = x;
        bool simple = !strip_parens(&inner) && (is_type(x, "subscript_expression") || is_type(x, "identifier") ||
                                                is_type(x, "field_expression"));
        st = kl_edits_add(r->out, cs, ts_node_start_byte(x), simple ? "" : "(");
        if (st == KL_OK) st = kl_edits_add(r->out, ts_node_end_byte(x), ce, simple ? "" : ")");
    } else if (is_type(a, "binary_expression") &&
               kl_node_text_is(ctx->src, ts_node_child_by_field_name(a, "operator", 8), "+")) {
        /* __ldg(p + i) -> p[i] */
        TSNode p = ts_node_child_by_field_name(a, "left", 4), i = ts_node_child_by_field_name(a, "right", 5);
        bool ptr_simple = is_type(p, "identifier") || is_type(p, "field_expression") ||
                          is_type(p, "subscript_expression");
        st = kl_edits_add(r->out, cs, ts_node_start_byte(p), ptr_simple ? "" : "(");
        if (st == KL_OK) st = kl_edits_add(r->out, ts_node_end_byte(p), ts_node_start_byte(i), ptr_simple ? "[" : ")[");
        if (st == KL_OK) st = kl_edits_add(r->out, ts_node_end_byte(i), ce, "]");
    } else {
        /* __ldg(E) -> *(E) or *E */
        bool simple = is_type(a, "identifier");
        const char *pre = wrap ? (simple ? "(*" : "(*(") : (simple ? "*" : "*(");
        const char *post = wrap ? (simple ? ")" : "))") : (simple ? "" : ")");
        st = kl_edits_add(r->out, cs, ts_node_start_byte(a), pre);
        if (st == KL_OK) st = kl_edits_add(r->out, ts_node_end_byte(a), ce, post);
    }
    r->st = st;
    return false;
}

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    run *r = user;
    if (ts_node_start_byte(fn) != r->site->span.start || strcmp(name, r->site->kernel)) return KL_OK;
    r->found = true;
    TSNode ps = kl_ast_function_params(fn);
    if (r->remove) {
        kl_status st = strip_restrict(ctx, ps, r->out);
        if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
        kl_ast_walk(kl_ast_function_body(fn), unldg, r);
        return r->st == KL_OK ? KL_OK : kl_error_set(r->err, r->st, "out of memory");
    }
    const char *why = json_string_value(json_object_get(r->site->features, "why_not"));
    if (why) return kl_rule_not_applicable(r->err, "%s", why);
    int64_t ldg = 0;
    if (!kl_rule_param_int(&kl_rule_restrict, r->params, "ldg", &ldg) || (ldg != 0 && ldg != 1))
        return kl_error_set(r->err, KL_ERR_INVALID, "restrict: ldg must be 0 or 1");
    analysis a;
    kl_status st = analyse(ctx, fn, ax, &a, NULL, NULL);
    if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
    if (a.nrestrict) return kl_rule_not_applicable(r->err, "%s already has __restrict__ parameters", name);
    bool wrap_which[MAX_PTRS] = {false};
    unsigned wrapped = 0;
    for (unsigned j = 0; j < a.nptr; j++) {
        const kl_param_info *pi = kl_affine_param(ax, a.idx[j]);
        if (a.use[j].kind == USE_ESCAPE) return kl_rule_not_applicable(r->err, "%s", a.use[j].why);
        TSNode d = ts_node_child_by_field_name(pi->decl, "declarator", 10);
        TSNode nm = kl_ast_declarator_name(d);
        if (ts_node_is_null(nm) || !is_type(d, "pointer_declarator"))
            return kl_rule_not_applicable(r->err, "the parameter %s of %s is not a plain pointer declarator", pi->name,
                                          name);
        st = kl_edits_add(r->out, ts_node_start_byte(nm), ts_node_start_byte(nm), "__restrict__ ");
        /* const only on a single-level pointer: `const float **` would not take a `float **` */
        bool read_only = a.use[j].kind == USE_READ &&
                         is_type(ts_node_child_by_field_name(d, "declarator", 10), "identifier");
        if (st == KL_OK && read_only && !pi->is_const)
            st = kl_edits_add(r->out, ts_node_start_byte(pi->decl), ts_node_start_byte(pi->decl), "const ");
        if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
        if (ldg && read_only && ldg_type(pi->elem) && a.use[j].loads) {
            wrap_which[j] = true;
            wrapped++;
        }
    }
    if (ldg && wrapped == 0)
        return kl_rule_not_applicable(r->err, "ldg=1: %s has no read-only load of a type __ldg takes", name);
    if (ldg) {
        st = analyse(ctx, fn, ax, &a, r->out, wrap_which);
        if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
    }
    return KL_OK;
}

static kl_status run_site(const kl_rule_ctx *ctx, const kl_site *site, bool remove, const json_t *params,
                          kl_edits *out, kl_error *err)
{
    run r = {ctx, site, remove, params, out, err, KL_OK, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", run_visit, &r, err);
    if (st == KL_OK && !r.found) return kl_rule_not_applicable(err, "no kernel %s at %s", site->kernel, site->id);
    return st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run_site(ctx, site, true, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    return run_site(ctx, site, false, params, out, err);
}

const kl_rule kl_rule_restrict = {
    "restrict", "mark a kernel's pointer parameters const __restrict__ (distinct tensors) and load read-only data with __ldg",
    restrict_params, 1, find, remove_site, apply,
};
