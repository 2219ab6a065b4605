/* vectorize, the cast form: vector loads through a pointer parameter the launch casts from another
 * pointer argument (vectorize_cast.h). The sumsq expert's `const float4* __restrict__ body`, passed
 * as `reinterpret_cast<const float4*>(x + head)` beside `x` and `head`: every `body[e]` is the four
 * floats x[head + 4e … head + 4e + 3], so remove reads them one by one from x. The kernel's scalar
 * code for the unaligned head and tail stays as it is (it was correct for any alignment). */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/vectorize_cast.h"
#include "util/util.h"

#define VC_MAXLAUNCH 16

typedef struct vc_type {
    const char *vec, *elem, *make;
    unsigned width;
} vc_type;

static const vc_type vc_types[] = {
    {"float4", "float", "make_float4", 4}, {"float2", "float", "make_float2", 2},
    {"double2", "double", "make_double2", 2}, {"int4", "int", "make_int4", 4},
    {"int2", "int", "make_int2", 2}, {"uint4", "unsigned int", "make_uint4", 4},
    {"uint2", "unsigned int", "make_uint2", 2},
};

static const vc_type *vector_type(const char *t)
{
    for (size_t i = 0; i < sizeof vc_types / sizeof vc_types[0]; i++)
        if (!strcmp(t, vc_types[i].vec)) return &vc_types[i];
    return NULL;
}

/* An element type as a parameter spells it: "unsigned" is "unsigned int". */
static bool same_elem(const char *a, const char *b)
{
    if (!strcmp(a, "unsigned")) a = "unsigned int";
    if (!strcmp(b, "unsigned")) b = "unsigned int";
    return !strcmp(a, b);
}

/* One vector parameter, analysed. */
typedef struct vc_param {
    unsigned index;         /* its position in the parameter list */
    TSNode decl;            /* its parameter_declaration */
    char name[128];
    const vc_type *type;
    bool cast_seen;         /* some launch passes a cast there (else: not this form, no site) */
    unsigned uses;          /* `V[e]` reads */
    char from[128];         /* P: the kernel parameter the vectors are read from */
    char offset[128];       /* O: a kernel parameter or a literal ("" when none) */
    char why[400];          /* not empty: seen, but not rewritten */
} vc_param;

typedef struct use_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode *reads;          /* the subscript_expression nodes (may be NULL: count only) */
    unsigned max, n;
    unsigned bad_line;      /* a use that is not a read `V[e]` */
} use_scan;

/* Is n (a subscript_expression) written: the left of an assignment, an update's operand, or its
 * address taken? */
static bool written(TSNode n)
{
    TSNode p = ts_node_parent(n);
    if (rt_is(p, "parenthesized_expression")) return written(p);
    if (rt_is(p, "assignment_expression")) return ts_node_eq(rt_field(p, "left"), n);
    if (rt_is(p, "update_expression")) return true;
    if (rt_is(p, "pointer_expression")) return true; /* &V[e]: the address escapes */
    return false;
}

static bool use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    if (u->bad_line) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(u->ctx, n, u->name)) return true;
    TSNode p = ts_node_parent(n);
    if (rt_is(p, "subscript_expression") && ts_node_eq(rt_field(p, "argument"), n) && !written(p)) {
        if (u->reads && u->n < u->max) u->reads[u->n] = p;
        u->n++;
        return false;
    }
    u->bad_line = kl_ast_line(n);
    return false;
}

typedef struct assign_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    unsigned line;
} assign_scan;

static bool assign_visit(TSNode n, void *user)
{
    assign_scan *a = user;
    if (a->line) return false;
    TSNode target = {{0}, 0, 0};
    if (rt_is(n, "assignment_expression")) target = rt_field(n, "left");
    else if (rt_is(n, "update_expression")) target = rt_field(n, "argument");
    else if (rt_is(n, "pointer_expression") && rt_text_is(a->ctx, rt_field(n, "operator"), "&")) target = rt_field(n, "argument");
    if (!ts_node_is_null(target) && rt_is(target, "identifier") && rt_text_is(a->ctx, target, a->name))
        a->line = kl_ast_line(n);
    return true;
}

/* The line where the kernel assigns `name` (or takes its address), 0 when it never does. */
static unsigned assigned_at(const kl_rule_ctx *ctx, TSNode body, const char *name)
{
    assign_scan a = {ctx, name, 0};
    kl_ast_walk(body, assign_visit, &a);
    return a.line;
}

/* `reinterpret_cast<const VT*>(E)` or `(const VT*)(E)`: E, and whether the type is VT. */
static bool cast_of(const kl_rule_ctx *ctx, TSNode arg, const char *vt, TSNode *e)
{
    arg = kl_ast_unparen(arg);
    TSNode type = {{0}, 0, 0};
    if (rt_is(arg, "cast_expression")) {
        type = rt_field(arg, "type");
        *e = rt_field(arg, "value");
    } else if (rt_is(arg, "call_expression") && rt_is(rt_field(arg, "function"), "template_function")) {
        TSNode f = rt_field(arg, "function");
        if (!rt_text_is(ctx, rt_field(f, "name"), "reinterpret_cast")) return false;
        TSNode args = rt_field(arg, "arguments");
        if (ts_node_named_child_count(args) != 1) return false;
        type = rt_field(f, "arguments");
        *e = ts_node_named_child(args, 0);
    } else {
        return false;
    }
    char *t = rt_text(ctx, type);
    bool ok = false;
    if (t) {
        /* the words of the type: const VT * (blanks and the angle brackets aside) */
        char *w = strstr(t, vt);
        size_t n = strlen(vt);
        ok = w && (w == t || !(w[-1] == '_' || (w[-1] >= 'a' && w[-1] <= 'z') || (w[-1] >= '0' && w[-1] <= '9'))) &&
             !(w[n] == '_' || (w[n] >= 'a' && w[n] <= 'z') || (w[n] >= '0' && w[n] <= '9')) && strchr(w + n, '*') &&
             strchr(w + n, '*') == strrchr(t, '*');
    }
    free(t);
    return ok;
}

/* E = `P`, `P + O`, `&P[O]`: P (an identifier) and O (an identifier or an integer literal; a null
 * node when there is none). */
static bool base_offset(TSNode e, TSNode *p, TSNode *o)
{
    e = kl_ast_unparen(e);
    *o = (TSNode){{0}, 0, 0};
    if (rt_is(e, "identifier")) {
        *p = e;
        return true;
    }
    TSNode a, b;
    if (rt_is(e, "binary_expression")) {
        a = kl_ast_unparen(rt_field(e, "left")), b = kl_ast_unparen(rt_field(e, "right"));
        TSNode op = ts_node_child(e, 1);
        if (strcmp(ts_node_type(op), "+")) return false;
    } else if (rt_is(e, "pointer_expression") && rt_is(kl_ast_unparen(rt_field(e, "argument")), "subscript_expression")) {
        TSNode s = kl_ast_unparen(rt_field(e, "argument"));
        a = kl_ast_unparen(rt_field(s, "argument"));
        TSNode idx = rt_field(s, "indices");
        if (ts_node_is_null(idx)) idx = rt_field(s, "index");
        if (rt_is(idx, "subscript_argument_list")) {
            if (ts_node_named_child_count(idx) != 1) return false;
            idx = ts_node_named_child(idx, 0);
        }
        b = kl_ast_unparen(idx);
        if (strcmp(ts_node_type(ts_node_child(e, 0)), "&")) return false;
    } else {
        return false;
    }
    if (!rt_is(a, "identifier") || (!rt_is(b, "identifier") && !rt_is(b, "number_literal"))) return false;
    *p = a;
    *o = b;
    return true;
}

/* The position of the launch argument that is exactly the identifier `name`; -1 when none. */
static int arg_position(const kl_rule_ctx *ctx, TSNode args, TSNode name)
{
    char *want = rt_text(ctx, name);
    int at = -1;
    for (uint32_t i = 0; want && i < ts_node_named_child_count(args) && at < 0; i++) {
        TSNode a = kl_ast_unparen(ts_node_named_child(args, i));
        if (rt_is(a, "identifier") && rt_text_is(ctx, a, want)) at = (int)i;
    }
    free(want);
    return at;
}

/* The name of parameter i of f into buf ("" when it has none). */
static void param_name(const kl_rule_ctx *ctx, const rt_func *f, unsigned i, char *buf, size_t size)
{
    buf[0] = '\0';
    TSNode d = ts_node_named_child(f->params, i);
    TSNode nm = kl_ast_declarator_name(rt_field(d, "declarator"));
    char *t = ts_node_is_null(nm) ? NULL : rt_text(ctx, nm);
    if (t && strlen(t) < size) kl_snprintf(buf, size, "%s", t);
    free(t);
}

static bool has_const(const kl_rule_ctx *ctx, TSNode decl)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(decl); i++) {
        TSNode k = ts_node_named_child(decl, i);
        if (rt_is(k, "type_qualifier") && rt_text_is(ctx, k, "const")) return true;
    }
    return false;
}

/* Reads the launches of the kernel for vector parameter v: what each passes there. */
static void analyse_launches(const kl_rule_ctx *ctx, const rt_func *f, vc_param *v)
{
    rt_launch ls[VC_MAXLAUNCH];
    unsigned nl = rt_launches(ctx, f->name, ls, VC_MAXLAUNCH);
    if (nl > VC_MAXLAUNCH) {
        kl_snprintf(v->why, sizeof v->why, "%s is launched %u times (at most %d are followed)", f->name, nl, VC_MAXLAUNCH);
        return;
    }
    int p_at = -1, o_at = -1;
    char lit[128] = "";
    for (unsigned i = 0; i < nl; i++) {
        const rt_launch *l = &ls[i];
        unsigned line = kl_ast_line(l->call);
        if (v->index >= ts_node_named_child_count(l->args)) continue;
        TSNode e, p, o;
        if (!cast_of(ctx, ts_node_named_child(l->args, v->index), v->type->vec, &e)) {
            if (!v->why[0])
                kl_snprintf(v->why, sizeof v->why, "the launch at line %u passes %s as no cast to const %s* of another argument",
                            line, v->name, v->type->vec);
            continue;
        }
        v->cast_seen = true;
        if (v->why[0]) continue;
        if (!base_offset(e, &p, &o)) {
            kl_snprintf(v->why, sizeof v->why,
                        "the launch at line %u casts %s from an expression that is not P, P + O or &P[O] (P, O passed too)",
                        line, v->name);
            continue;
        }
        int pa = arg_position(ctx, l->args, p), oa = rt_is(o, "identifier") ? arg_position(ctx, l->args, o) : -1;
        char ol[128] = "";
        if (rt_is(o, "number_literal")) {
            char *t = rt_text(ctx, o);
            if (t && strlen(t) < sizeof ol) kl_snprintf(ol, sizeof ol, "%s", t);
            free(t);
        }
        if (pa < 0 || (rt_is(o, "identifier") && oa < 0)) {
            kl_snprintf(v->why, sizeof v->why,
                        "the launch at line %u casts %s from a pointer or an offset that it does not pass as an argument "
                        "of its own",
                        line, v->name);
            continue;
        }
        if (i > 0 && (pa != p_at || oa != o_at || strcmp(ol, lit))) {
            kl_snprintf(v->why, sizeof v->why, "the launches of %s cast %s from different arguments", f->name, v->name);
            continue;
        }
        p_at = pa, o_at = oa;
        kl_snprintf(lit, sizeof lit, "%s", ol);
    }
    if (v->why[0] || !v->cast_seen) return;
    param_name(ctx, f, (unsigned)p_at, v->from, sizeof v->from);
    char elem[128] = "";
    if (!v->from[0] || !rt_pointer_param(ctx, f, v->from, elem, sizeof elem) || !same_elem(elem, v->type->elem)) {
        kl_snprintf(v->why, sizeof v->why, "%s is cast from the kernel's parameter %s, not a pointer to %s", v->name,
                    v->from[0] ? v->from : "?", v->type->elem);
        return;
    }
    if (o_at >= 0) {
        param_name(ctx, f, (unsigned)o_at, v->offset, sizeof v->offset);
        TSNode od = ts_node_named_child(f->params, (uint32_t)o_at);
        char *ot = rt_text(ctx, rt_field(od, "type"));
        bool integer = ot && rt_is(rt_field(od, "declarator"), "identifier") &&
                       (strstr(ot, "int") || strstr(ot, "long") || strstr(ot, "size_t") || strstr(ot, "unsigned") ||
                        strstr(ot, "short"));
        free(ot);
        if (!v->offset[0] || !integer) {
            kl_snprintf(v->why, sizeof v->why, "%s is cast at an offset %s that is not an integer parameter", v->name,
                        v->offset[0] ? v->offset : "?");
            return;
        }
    } else {
        kl_snprintf(v->offset, sizeof v->offset, "%s", lit);
    }
    const char *fixed[] = {v->from, v->offset, v->name};
    for (unsigned k = 0; k < 3; k++) {
        if (!fixed[k][0] || (fixed[k][0] >= '0' && fixed[k][0] <= '9')) continue;
        unsigned line = assigned_at(ctx, f->body, fixed[k]);
        if (line) {
            kl_snprintf(v->why, sizeof v->why, "line %u changes %s (the vectors are read where the launch put them)", line,
                        fixed[k]);
            return;
        }
    }
}

/* The vector parameters of kernel f that a launch passes as a cast, at most max into out. */
static unsigned analyse_kernel(const kl_rule_ctx *ctx, const rt_func *f, vc_param *out, unsigned max)
{
    unsigned n = 0;
    uint32_t np = ts_node_named_child_count(f->params);
    for (uint32_t i = 0; i < np && n < max; i++) {
        TSNode d = ts_node_named_child(f->params, i);
        if (!rt_is(d, "parameter_declaration") || !rt_is(rt_field(d, "declarator"), "pointer_declarator")) continue;
        char *t = rt_text(ctx, rt_field(d, "type"));
        const vc_type *vt = t ? vector_type(t) : NULL;
        free(t);
        if (!vt) continue;
        vc_param *v = &out[n];
        memset(v, 0, sizeof *v);
        v->index = i;
        v->decl = d;
        v->type = vt;
        param_name(ctx, f, i, v->name, sizeof v->name);
        if (!v->name[0]) continue;
        use_scan u = {ctx, v->name, NULL, 0, 0, 0};
        kl_ast_walk(f->body, use_visit, &u);
        v->uses = u.n;
        if (!u.n && !u.bad_line) continue; /* nothing read through it (what remove leaves) */
        analyse_launches(ctx, f, v);
        if (!v->cast_seen) continue;
        if (!v->why[0] && !has_const(ctx, d))
            kl_snprintf(v->why, sizeof v->why, "%s is not a pointer to const: what is written through it is not followed",
                        v->name);
        if (!v->why[0] && u.bad_line)
            kl_snprintf(v->why, sizeof v->why, "line %u uses %s otherwise than reading %s[e]", u.bad_line, v->name, v->name);
        n++;
    }
    return n;
}

static const rt_func *func_of(const rt_func *fs, unsigned n, TSNode fn)
{
    for (unsigned i = 0; i < n; i++)
        if (ts_node_eq(fs[i].def, fn)) return &fs[i];
    return NULL;
}

kl_status kl_vc_find(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_sites *out)
{
    if (!kl_ast_function_has(ctx->src, fn, "__global__")) return KL_OK;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = func_of(fs, nf < 64 ? nf : 64, fn);
    if (!f) return KL_OK;
    vc_param vs[8];
    unsigned n = analyse_kernel(ctx, f, vs, 8);
    for (unsigned i = 0; i < n; i++) {
        const vc_param *v = &vs[i];
        json_t *feat = json_pack("{s:s, s:s, s:s, s:i, s:i}", "form", "cast", "param", v->name, "vector", v->type->vec,
                                 "width", (int)v->type->width, "loads", (int)v->uses);
        if (!feat) return KL_ERR_NOMEM;
        if (v->from[0]) json_object_set_new(feat, "from", json_string(v->from));
        if (v->offset[0]) json_object_set_new(feat, "offset", json_string(v->offset));
        if (v->why[0]) json_object_set_new(feat, "why_not", json_string(v->why));
        char id[256], note[300], wv[8];
        kl_site_id(id, sizeof id, name, v->decl, v->name);
        kl_snprintf(note, sizeof note, "%u %s load%s through %s, a cast of %s%s%s at the launch", v->uses, v->type->vec,
                    v->uses == 1 ? "" : "s", v->name, v->from[0] ? v->from : "another argument", v->offset[0] ? " + " : "",
                    v->offset);
        kl_snprintf(wv, sizeof wv, "%u", v->type->width);
        kl_status st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(v->decl), name, feat,
                                    json_pack("{s:s}", "width", wv), note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

bool kl_vc_is_site(const kl_site *site)
{
    const char *form = site->features ? json_string_value(json_object_get(site->features, "form")) : NULL;
    return form && !strcmp(form, "cast");
}

/* `e` as an operand of `*`: bare when it is a name or a literal, else in parentheses. */
static void operand(kl_strbuf *sb, const kl_rule_ctx *ctx, TSNode e)
{
    char *t = rt_text(ctx, e);
    TSNode u = kl_ast_unparen(e);
    bool bare = rt_is(u, "identifier") || rt_is(u, "number_literal") || !ts_node_eq(u, e);
    kl_strbuf_addf(sb, bare ? "%s" : "(%s)", t ? t : "");
    if (!t) sb->failed = true;
    free(t);
}

kl_status kl_vc_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    const char *pname = json_string_value(json_object_get(site->features, "param"));
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf < 64 ? nf : 64, site->kernel);
    if (!f || !pname) return kl_rule_not_applicable(err, "no vector parameter at %s", site->id);
    vc_param vs[8];
    unsigned n = analyse_kernel(ctx, f, vs, 8);
    const vc_param *v = NULL;
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(vs[i].name, pname)) v = &vs[i];
    if (!v) return kl_rule_not_applicable(err, "no vector parameter %s read through a cast in %s", pname, site->kernel);
    if (v->why[0]) return kl_rule_not_applicable(err, "%s", v->why);
    TSNode reads[256];
    use_scan u = {ctx, v->name, reads, 256, 0, 0};
    kl_ast_walk(f->body, use_visit, &u);
    if (u.n > 256) return kl_rule_not_applicable(err, "%s is read at %u places (at most 256 are rewritten)", v->name, u.n);
    kl_status st = KL_OK;
    for (unsigned i = 0; i < u.n && st == KL_OK; i++) {
        TSNode idx = rt_field(reads[i], "indices");
        if (ts_node_is_null(idx)) idx = rt_field(reads[i], "index");
        if (rt_is(idx, "subscript_argument_list")) {
            if (ts_node_named_child_count(idx) != 1)
                return kl_rule_not_applicable(err, "line %u reads %s with several indices", kl_ast_line(reads[i]), v->name);
            idx = ts_node_named_child(idx, 0);
        }
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s(", v->type->make);
        for (unsigned c = 0; c < v->type->width; c++) {
            kl_strbuf_addf(&sb, "%s%s[", c ? ", " : "", v->from);
            if (v->offset[0]) kl_strbuf_addf(&sb, "%s + ", v->offset);
            kl_strbuf_addf(&sb, "%u * ", v->type->width);
            operand(&sb, ctx, idx);
            if (c) kl_strbuf_addf(&sb, " + %u", c);
            kl_strbuf_adds(&sb, "]");
        }
        kl_strbuf_adds(&sb, ")");
        st = sb.failed ? KL_ERR_NOMEM
                       : kl_edits_add(out, ts_node_start_byte(reads[i]), ts_node_end_byte(reads[i]), kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}
