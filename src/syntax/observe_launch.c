/* Observables of a site, the interpreter of launch() at a shape: values and bindings, the
 * evaluator, the statements it follows and the launches it records (observe_int.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/observe.h"
#include "syntax/observe_int.h"
#include "util/util.h"

/* ======================================================================================
 * values and bindings
 * ====================================================================================== */

bool observe__bind(observe__interp *ip, const char *name, observe__val v)
{
    if (ip->n == ip->cap) {
        unsigned cap = ip->cap ? ip->cap * 2 : 32;
        observe__binding *nb = realloc(ip->b, cap * sizeof *nb);
        if (!nb) {
            ip->oom = true;
            return false;
        }
        ip->b = nb;
        ip->cap = cap;
    }
    ip->b[ip->n].name = kl_strdup(name);
    if (!ip->b[ip->n].name) {
        ip->oom = true;
        return false;
    }
    ip->b[ip->n++].v = v;
    return true;
}

observe__binding *observe__lookup(observe__interp *ip, const char *name)
{
    for (unsigned i = ip->n; i-- > ip->base;)
        if (!strcmp(ip->b[i].name, name)) return &ip->b[i];
    return NULL;
}

void observe__truncate_to(observe__interp *ip, unsigned n)
{
    while (ip->n > n) free(ip->b[--ip->n].name);
}

static void assign(observe__interp *ip, const char *name, observe__val v)
{
    observe__binding *b = observe__lookup(ip, name);
    if (b) b->v = ip->uncertain ? observe__unknown_val() : v;
}

/* ======================================================================================
 * expressions
 * ====================================================================================== */


static char *text_of(observe__interp *ip, TSNode n)
{
    char *t = kl_node_text(ip->src, n);
    if (!t) ip->oom = true;
    return t;
}

static observe__val number(observe__interp *ip, TSNode n)
{
    char *t = text_of(ip, n);
    if (!t) return observe__unknown_val();
    char *end;
    long long x = strtoll(t, &end, 0);
    while (*end == 'u' || *end == 'U' || *end == 'l' || *end == 'L') end++;
    observe__val v = *end || end == t ? observe__unknown_val() : observe__int_val(x);
    free(t);
    return v;
}

/* The operator of a binary / unary / assignment expression, from the text (the tree may be
 * built from adjusted text: syntax_int.h). */
static void op_text(observe__interp *ip, TSNode n, char *buf, size_t size)
{
    buf[0] = '\0';
    TSNode o = ts_node_child_by_field_name(n, "operator", 8);
    if (ts_node_is_null(o)) return;
    const char *text = kl_source_text(ip->src, NULL);
    uint32_t a = ts_node_start_byte(o), e = ts_node_end_byte(o);
    kl_snprintf(buf, size, "%.*s", (int)(e - a), text + a);
}

static bool binop(const char *op, int64_t a, int64_t b, int64_t *r)
{
    if (!strcmp(op, "+")) *r = a + b;
    else if (!strcmp(op, "-")) *r = a - b;
    else if (!strcmp(op, "*")) *r = a * b;
    else if (!strcmp(op, "/")) {
        if (b == 0) return false;
        *r = a / b;
    } else if (!strcmp(op, "%")) {
        if (b == 0) return false;
        *r = a % b;
    } else if (!strcmp(op, "<<")) {
        if (b < 0 || b > 62) return false;
        *r = a << b;
    } else if (!strcmp(op, ">>")) {
        if (b < 0 || b > 62) return false;
        *r = a >> b;
    } else if (!strcmp(op, "<")) *r = a < b;
    else if (!strcmp(op, "<=")) *r = a <= b;
    else if (!strcmp(op, ">")) *r = a > b;
    else if (!strcmp(op, ">=")) *r = a >= b;
    else if (!strcmp(op, "==")) *r = a == b;
    else if (!strcmp(op, "!=")) *r = a != b;
    else if (!strcmp(op, "&")) *r = a & b;
    else if (!strcmp(op, "|")) *r = a | b;
    else if (!strcmp(op, "^")) *r = a ^ b;
    else return false;
    return true;
}

/* A local of the function being evaluated, declared with an initializer (a kernel's
 * `const int n4 = n / 4;`): its initializer, or a null node. */
typedef struct find_decl {
    const kl_source *src;
    const char *name;
    TSNode value;
} find_decl;

static bool find_decl_visit(TSNode n, void *user)
{
    find_decl *f = user;
    if (!ts_node_is_null(f->value)) return false;
    if (observe__type_is(n, "init_declarator")) {
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(n, "declarator", 10));
        if (!ts_node_is_null(nm) && kl_node_text_is(f->src, nm, f->name)) {
            TSNode v = ts_node_child_by_field_name(n, "value", 5);
            if (!ts_node_is_null(v) && !observe__type_is(v, "argument_list") && !observe__type_is(v, "initializer_list")) f->value = v;
        }
    }
    return true;
}

static observe__val identifier(observe__interp *ip, TSNode n)
{
    char *name = text_of(ip, n);
    if (!name) return observe__unknown_val();
    observe__val v = observe__unknown_val();
    observe__binding *b = observe__lookup(ip, name);
    if (b) {
        v = b->v;
    } else {
        int64_t x;
        if (kl_const_eval(ip->src, ip->fn, n, false, &x, NULL, 0)) {
            v = observe__int_val(x);
        } else if (ip->depth < MAX_DEPTH && !ts_node_is_null(ip->fn)) {
            /* a local with an initializer (inside a kernel: evaluated with the kernel's bindings) */
            find_decl fd = {.src = ip->src, .name = name};
            kl_ast_walk(kl_ast_function_body(ip->fn), find_decl_visit, &fd);
            if (!ts_node_is_null(fd.value) && ts_node_start_byte(fd.value) < ts_node_start_byte(n)) {
                ip->depth++;
                v = observe__eval(ip, fd.value);
                ip->depth--;
            }
        }
    }
    free(name);
    return v;
}

int observe__dim_of(const char *field)
{
    return !strcmp(field, "x") ? 0 : !strcmp(field, "y") ? 1 : !strcmp(field, "z") ? 2 : -1;
}

static observe__val field(observe__interp *ip, TSNode n)
{
    TSNode arg = ts_node_child_by_field_name(n, "argument", 8);
    TSNode fld = ts_node_child_by_field_name(n, "field", 5);
    char *a = text_of(ip, arg), *f = text_of(ip, fld);
    observe__val v = observe__unknown_val();
    int d = f ? observe__dim_of(f) : -1;
    if (a && d >= 0) {
        if (ip->launch && !strcmp(a, "blockDim") && ip->launch->block_known) v = observe__int_val(ip->launch->block[d]);
        else if (ip->launch && !strcmp(a, "gridDim") && ip->launch->grid_known) v = observe__int_val(ip->launch->grid[d]);
        else if (observe__type_is(arg, "identifier")) {
            observe__binding *b = observe__lookup(ip, a);
            if (b && b->v.known && b->v.nd == 3) v = observe__int_val(b->v.v[d]);
        }
    }
    free(a), free(f);
    return v;
}

/* dim3(a, b, c) or an argument list / initializer list of up to three integers */
static observe__val dims_of(observe__interp *ip, TSNode list)
{
    observe__val v = {true, {1, 1, 1}, 3, -1};
    uint32_t c = ts_node_named_child_count(list);
    if (c == 0 || c > 3) return observe__unknown_val();
    for (uint32_t i = 0; i < c; i++) {
        observe__val a = observe__eval(ip, ts_node_named_child(list, i));
        if (!a.known || a.nd != 1) return observe__unknown_val();
        v.v[i] = a.v[0];
    }
    return v;
}

static void callee_name(observe__interp *ip, TSNode fnode, char *buf, size_t size, TSNode *targs)
{
    buf[0] = '\0';
    TSNode none = {0};
    if (targs) *targs = none;
    TSNode nm = fnode;
    if (observe__type_is(fnode, "template_function")) {
        nm = ts_node_child_by_field_name(fnode, "name", 4);
        if (targs) *targs = ts_node_child_by_field_name(fnode, "arguments", 9);
    }
    char *t = text_of(ip, nm);
    if (t) kl_snprintf(buf, size, "%s", t);
    free(t);
}

static observe__val run_call(observe__interp *ip, TSNode call, TSNode fn_def, TSNode targs);

static observe__val call(observe__interp *ip, TSNode n)
{
    TSNode fnode = ts_node_child_by_field_name(n, "function", 8);
    TSNode args = ts_node_child_by_field_name(n, "arguments", 9);
    char name[128];
    TSNode targs;
    callee_name(ip, fnode, name, sizeof name, &targs);
    const char *base = strrchr(name, ':') ? strrchr(name, ':') + 1 : name;
    if (!strcmp(base, "dim3")) return dims_of(ip, args);
    if (!strcmp(base, "min") || !strcmp(base, "max")) {
        if (ts_node_named_child_count(args) != 2) return observe__unknown_val();
        observe__val a = observe__eval(ip, ts_node_named_child(args, 0)), b = observe__eval(ip, ts_node_named_child(args, 1));
        if (!a.known || !b.known || a.nd != 1 || b.nd != 1) return observe__unknown_val();
        bool mn = !strcmp(base, "min");
        return observe__int_val(mn ? (a.v[0] < b.v[0] ? a.v[0] : b.v[0]) : (a.v[0] > b.v[0] ? a.v[0] : b.v[0]));
    }
    if (!*name || ip->kernel_side) return observe__unknown_val(); /* inside a kernel: no host calls */
    TSNode def = kl_ast_function_named(ip->src, name);
    if (ts_node_is_null(def) || kl_ast_function_has(ip->src, def, "__global__") ||
        kl_ast_function_has(ip->src, def, "__device__"))
        return observe__unknown_val();
    return run_call(ip, n, def, targs);
}

observe__val observe__eval(observe__interp *ip, TSNode n)
{
    if (ts_node_is_null(n) || ip->oom || ++ip->steps > MAX_STEPS) return observe__unknown_val();
    const char *t = ts_node_type(n);
    if (!strcmp(t, "number_literal")) return number(ip, n);
    if (!strcmp(t, "true")) return observe__int_val(1);
    if (!strcmp(t, "false")) return observe__int_val(0);
    if (!strcmp(t, "identifier")) return identifier(ip, n);
    if (!strcmp(t, "parenthesized_expression")) return observe__eval(ip, ts_node_named_child(n, 0));
    if (!strcmp(t, "field_expression")) return field(ip, n);
    if (!strcmp(t, "call_expression")) return call(ip, n);
    if (!strcmp(t, "argument_list") || !strcmp(t, "initializer_list")) return dims_of(ip, n);
    if (!strcmp(t, "sizeof_expression")) {
        int64_t x;
        return kl_const_eval(ip->src, ip->fn, n, false, &x, NULL, 0) ? observe__int_val(x) : observe__unknown_val();
    }
    if (!strcmp(t, "cast_expression")) {
        observe__val v = observe__eval(ip, ts_node_child_by_field_name(n, "value", 5));
        if (v.origin >= 0) return observe__int_val(0); /* a device allocation's address: 256-byte aligned */
        return v;
    }
    if (!strcmp(t, "unary_expression")) {
        char op[8];
        op_text(ip, n, op, sizeof op);
        observe__val a = observe__eval(ip, ts_node_child_by_field_name(n, "argument", 8));
        if (!a.known || a.nd != 1) return observe__unknown_val();
        if (!strcmp(op, "-")) return observe__int_val(-a.v[0]);
        if (!strcmp(op, "+")) return a;
        if (!strcmp(op, "!")) return observe__int_val(!a.v[0]);
        if (!strcmp(op, "~")) return observe__int_val(~a.v[0]);
        return observe__unknown_val();
    }
    if (!strcmp(t, "conditional_expression")) {
        observe__val c = observe__eval(ip, ts_node_child_by_field_name(n, "condition", 9));
        observe__val a = observe__eval(ip, ts_node_child_by_field_name(n, "consequence", 11));
        observe__val b = observe__eval(ip, ts_node_child_by_field_name(n, "alternative", 11));
        if (c.known) return c.v[0] ? a : b;
        if (a.known && b.known && a.nd == 1 && b.nd == 1 && a.v[0] == b.v[0]) return a;
        return observe__unknown_val();
    }
    if (!strcmp(t, "binary_expression")) {
        char op[8];
        op_text(ip, n, op, sizeof op);
        observe__val a = observe__eval(ip, ts_node_child_by_field_name(n, "left", 4));
        observe__val b = observe__eval(ip, ts_node_child_by_field_name(n, "right", 5));
        bool ak = a.known && a.nd == 1, bk = b.known && b.nd == 1;
        if (!strcmp(op, "&&")) {
            if ((ak && !a.v[0]) || (bk && !b.v[0])) return observe__int_val(0);
            return ak && bk ? observe__int_val(1) : observe__unknown_val();
        }
        if (!strcmp(op, "||")) {
            if ((ak && a.v[0]) || (bk && b.v[0])) return observe__int_val(1);
            return ak && bk ? observe__int_val(0) : observe__unknown_val();
        }
        /* pointer arithmetic keeps the pointer it started from */
        if (!strcmp(op, "+") && (a.origin >= 0 || b.origin >= 0)) {
            observe__val p = observe__unknown_val();
            p.origin = a.origin >= 0 ? a.origin : b.origin;
            return p;
        }
        int64_t r;
        if (ak && bk && binop(op, a.v[0], b.v[0], &r)) return observe__int_val(r);
        return observe__unknown_val();
    }
    return observe__unknown_val();
}

/* ======================================================================================
 * statements of host code
 * ====================================================================================== */

typedef enum flow { F_NEXT, F_RETURN, F_BREAK } flow;

static flow exec(observe__interp *ip, TSNode n);

static void record_launch(observe__interp *ip, TSNode callnode, TSNode config)
{
    kl_obs_launches *o = ip->out;
    kl_obs_launch *items = realloc(o->items, (o->count + 1) * sizeof *items);
    if (!items) {
        ip->oom = true;
        return;
    }
    o->items = items;
    kl_obs_launch *l = &o->items[o->count];
    memset(l, 0, sizeof *l);
    char name[128];
    TSNode targs;
    callee_name(ip, ts_node_child_by_field_name(callnode, "function", 8), name, sizeof name, &targs);
    l->kernel = kl_strdup(name);
    if (!l->kernel) {
        ip->oom = true;
        return;
    }
    o->count++;
    l->certain = !ip->uncertain;
    for (int d = 0; d < 3; d++) l->grid[d] = l->block[d] = 1;
    for (unsigned k = 0; k < 2 && k < ts_node_named_child_count(config); k++) {
        observe__val v = observe__eval(ip, ts_node_named_child(config, k));
        int64_t *dst = k == 0 ? l->grid : l->block;
        if (!v.known) continue;
        for (unsigned d = 0; d < v.nd && d < 3; d++) dst[d] = v.v[d];
        if (k == 0) l->grid_known = true;
        else l->block_known = true;
    }
    TSNode args = ts_node_child_by_field_name(callnode, "arguments", 9);
    unsigned na = ts_node_named_child_count(args);
    l->arg = calloc(na ? na : 1, sizeof *l->arg);
    l->arg_known = calloc(na ? na : 1, sizeof *l->arg_known);
    l->arg_origin = calloc(na ? na : 1, sizeof *l->arg_origin);
    unsigned nt = ts_node_is_null(targs) ? 0 : ts_node_named_child_count(targs);
    l->targ = calloc(nt ? nt : 1, sizeof *l->targ);
    l->targ_known = calloc(nt ? nt : 1, sizeof *l->targ_known);
    if (!l->arg || !l->arg_known || !l->arg_origin || !l->targ || !l->targ_known) {
        ip->oom = true;
        return;
    }
    l->nargs = na;
    for (unsigned i = 0; i < na; i++) {
        observe__val v = observe__eval(ip, ts_node_named_child(args, i));
        l->arg_origin[i] = v.origin;
        l->arg_known[i] = v.known && v.nd == 1;
        l->arg[i] = v.v[0];
    }
    l->ntargs = nt;
    for (unsigned i = 0; i < nt; i++) {
        TSNode a = ts_node_named_child(targs, i);
        if (observe__type_is(a, "type_descriptor")) continue;
        observe__val v = observe__eval(ip, a);
        l->targ_known[i] = v.known && v.nd == 1;
        l->targ[i] = v.v[0];
    }
}

/* The parameter names of a function definition, in order (into names, at most max). */
unsigned observe__param_names(observe__interp *ip, TSNode def, char **names, unsigned max)
{
    TSNode pl = kl_ast_function_params(def);
    unsigned k = 0;
    uint32_t c = ts_node_named_child_count(pl);
    for (uint32_t i = 0; i < c && k < max; i++) {
        TSNode p = ts_node_named_child(pl, i);
        if (!observe__type_is(p, "parameter_declaration") && !observe__type_is(p, "optional_parameter_declaration")) continue;
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(p, "declarator", 10));
        names[k++] = ts_node_is_null(nm) ? NULL : text_of(ip, nm);
    }
    return k;
}

/* The names of a template's value parameters, in order (type parameters as NULL). */
unsigned observe__template_names(observe__interp *ip, TSNode def, char **names, unsigned max)
{
    TSNode outer = kl_ast_function_outer(def);
    if (!observe__type_is(outer, "template_declaration")) return 0;
    TSNode pl = ts_node_child_by_field_name(outer, "parameters", 10);
    unsigned k = 0;
    uint32_t c = ts_node_named_child_count(pl);
    for (uint32_t i = 0; i < c && k < max; i++) {
        TSNode p = ts_node_named_child(pl, i);
        TSNode nm = {0};
        if (observe__type_is(p, "parameter_declaration") || observe__type_is(p, "optional_parameter_declaration"))
            nm = kl_ast_declarator_name(ts_node_child_by_field_name(p, "declarator", 10));
        names[k++] = ts_node_is_null(nm) ? NULL : text_of(ip, nm);
    }
    return k;
}

static observe__val run_call(observe__interp *ip, TSNode callnode, TSNode def, TSNode targs)
{
    if (ip->depth >= MAX_DEPTH) return observe__unknown_val();
    TSNode args = ts_node_child_by_field_name(callnode, "arguments", 9);
    char *pn[32] = {0}, *tn[16] = {0};
    observe__val av[32], tv[16];
    unsigned np = observe__param_names(ip, def, pn, 32), nt = observe__template_names(ip, def, tn, 16);
    unsigned na = ts_node_named_child_count(args);
    for (unsigned i = 0; i < np; i++) av[i] = i < na ? observe__eval(ip, ts_node_named_child(args, i)) : observe__unknown_val();
    unsigned ntargs = ts_node_is_null(targs) ? 0 : ts_node_named_child_count(targs);
    for (unsigned i = 0; i < nt; i++) {
        TSNode a = i < ntargs ? ts_node_named_child(targs, i) : (TSNode){0};
        tv[i] = ts_node_is_null(a) || observe__type_is(a, "type_descriptor") ? observe__unknown_val() : observe__eval(ip, a);
    }
    unsigned saved_n = ip->n, saved_base = ip->base;
    TSNode saved_fn = ip->fn;
    ip->base = ip->n;
    for (unsigned i = 0; i < np; i++)
        if (pn[i]) observe__bind(ip, pn[i], av[i]);
    for (unsigned i = 0; i < nt; i++)
        if (tn[i]) observe__bind(ip, tn[i], tv[i]);
    ip->fn = def;
    ip->depth++;
    ip->ret = observe__unknown_val();
    exec(ip, kl_ast_function_body(def));
    observe__val r = ip->ret;
    ip->depth--;
    ip->fn = saved_fn;
    observe__truncate_to(ip, saved_n);
    ip->base = saved_base;
    for (unsigned i = 0; i < np; i++) free(pn[i]);
    for (unsigned i = 0; i < nt; i++) free(tn[i]);
    return r;
}

static void note_undecided(observe__interp *ip, TSNode cond)
{
    if (!ip->out->complete) return;
    ip->out->complete = false;
    char *t = text_of(ip, cond);
    kl_snprintf(ip->out->why, sizeof ip->out->why, "line %u: cannot decide `%.150s`", ts_node_start_point(cond).row + 1,
                t ? t : "?");
    free(t);
}

static void expression(observe__interp *ip, TSNode e)
{
    if (observe__type_is(e, "call_expression")) {
        TSNode cfg = kl_ast_child_of_type(e, "kernel_call_syntax");
        if (!ts_node_is_null(cfg)) record_launch(ip, e, cfg);
        else (void)call(ip, e);
    } else if (observe__type_is(e, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(e, "left", 4);
        if (!observe__type_is(l, "identifier")) return;
        char op[8];
        op_text(ip, e, op, sizeof op);
        observe__val r = observe__eval(ip, ts_node_child_by_field_name(e, "right", 5));
        char *name = text_of(ip, l);
        if (!name) return;
        if (strcmp(op, "=") != 0) {
            observe__binding *b = observe__lookup(ip, name);
            char bop[4];
            kl_snprintf(bop, sizeof bop, "%.*s", (int)strlen(op) - 1, op);
            int64_t x;
            if (b && b->v.known && r.known && binop(bop, b->v.v[0], r.v[0], &x)) r = observe__int_val(x);
            else r = observe__unknown_val();
        }
        assign(ip, name, r);
        free(name);
    } else if (observe__type_is(e, "comma_expression")) {
        expression(ip, ts_node_child_by_field_name(e, "left", 4));
        expression(ip, ts_node_child_by_field_name(e, "right", 5));
    }
}

static void declaration(observe__interp *ip, TSNode d)
{
    uint32_t c = ts_node_named_child_count(d);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(d, i);
        TSNode decl = k, value = {0};
        if (observe__type_is(k, "init_declarator")) {
            decl = ts_node_child_by_field_name(k, "declarator", 10);
            value = ts_node_child_by_field_name(k, "value", 5);
        } else if (!observe__type_is(k, "identifier") && !observe__type_is(k, "pointer_declarator") && !observe__type_is(k, "function_declarator")) {
            continue;
        }
        TSNode nm = kl_ast_declarator_name(decl);
        if (ts_node_is_null(nm)) continue;
        char *name = text_of(ip, nm);
        if (!name) return;
        observe__val v = ts_node_is_null(value) ? observe__unknown_val() : observe__eval(ip, value);
        /* `dim3 block(BLOCK, BLOCK);` parses as a function declaration: its "parameter types"
         * are the constants */
        if (ts_node_is_null(value) && observe__type_is(decl, "function_declarator")) {
            TSNode pl = ts_node_child_by_field_name(decl, "parameters", 10);
            uint32_t pc = ts_node_named_child_count(pl);
            v = (observe__val){pc >= 1 && pc <= 3, {1, 1, 1}, 3, -1};
            for (uint32_t q = 0; q < pc && v.known; q++) {
                TSNode pd = ts_node_named_child(pl, q);
                TSNode ty = ts_node_child_by_field_name(pd, "type", 4);
                if (!observe__type_is(pd, "parameter_declaration") || !ts_node_is_null(ts_node_child_by_field_name(pd, "declarator", 10)) ||
                    !observe__type_is(ty, "type_identifier")) {
                    v.known = false;
                    break;
                }
                observe__val cv = identifier(ip, ty);
                if (!cv.known || cv.nd != 1) v.known = false;
                else v.v[q] = cv.v[0];
            }
            if (!v.known) v = observe__unknown_val();
        }
        observe__bind(ip, name, v);
        free(name);
    }
}

/* Both ways of an undecided condition: each with the bindings as they were. */
static flow both(observe__interp *ip, TSNode a, TSNode b)
{
    bool was = ip->uncertain;
    ip->uncertain = true;
    unsigned n = ip->n;
    flow fa = ts_node_is_null(a) ? F_NEXT : exec(ip, a);
    observe__truncate_to(ip, n);
    flow fb = ts_node_is_null(b) ? F_NEXT : exec(ip, b);
    observe__truncate_to(ip, n);
    ip->uncertain = was;
    return fa == F_RETURN && fb == F_RETURN ? F_RETURN : F_NEXT;
}

static TSNode else_body(TSNode alt)
{
    if (observe__type_is(alt, "else_clause")) return ts_node_named_child(alt, 0);
    return alt;
}

static flow switch_stmt(observe__interp *ip, TSNode s)
{
    TSNode cond = ts_node_child_by_field_name(s, "condition", 9);
    if (observe__type_is(cond, "condition_clause")) cond = ts_node_child_by_field_name(cond, "value", 5);
    observe__val v = ip->explore_all ? observe__unknown_val() : observe__eval(ip, cond);
    TSNode body = ts_node_child_by_field_name(s, "body", 4);
    uint32_t nc = ts_node_named_child_count(body);
    int start = -1;
    if (v.known) {
        for (uint32_t i = 0; i < nc && start < 0; i++) {
            TSNode cs = ts_node_named_child(body, i);
            TSNode cv = ts_node_child_by_field_name(cs, "value", 5);
            if (!observe__type_is(cs, "case_statement") || ts_node_is_null(cv)) continue;
            observe__val x = observe__eval(ip, cv);
            if (x.known && x.v[0] == v.v[0]) start = (int)i;
        }
        for (uint32_t i = 0; i < nc && start < 0; i++) {
            TSNode cs = ts_node_named_child(body, i);
            if (observe__type_is(cs, "case_statement") && ts_node_is_null(ts_node_child_by_field_name(cs, "value", 5)))
                start = (int)i;
        }
        if (start < 0) return F_NEXT;
    } else {
        note_undecided(ip, cond);
    }
    bool was = ip->uncertain;
    if (!v.known) ip->uncertain = true;
    flow f = F_NEXT;
    /* undecided: every case from its label on; decided: from the matching label on */
    for (uint32_t first = v.known ? (uint32_t)start : 0; first < nc; first++) {
        unsigned n = ip->n;
        f = F_NEXT;
        for (uint32_t i = first; i < nc && f == F_NEXT; i++) {
            TSNode cs = ts_node_named_child(body, i);
            uint32_t kc = ts_node_named_child_count(cs);
            TSNode cv = ts_node_child_by_field_name(cs, "value", 5);
            for (uint32_t k = 0; k < kc && f == F_NEXT; k++) {
                TSNode st = ts_node_named_child(cs, k);
                if (!ts_node_is_null(cv) && ts_node_eq(st, cv)) continue;
                f = exec(ip, st);
            }
        }
        if (v.known) break;
        observe__truncate_to(ip, n);
    }
    ip->uncertain = was;
    return f == F_RETURN && v.known ? F_RETURN : F_NEXT;
}

static flow exec(observe__interp *ip, TSNode n)
{
    if (ts_node_is_null(n) || ip->oom || ++ip->steps > MAX_STEPS) return F_NEXT;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "compound_statement")) {
        unsigned mark = ip->n;
        flow f = F_NEXT;
        uint32_t c = ts_node_named_child_count(n);
        for (uint32_t i = 0; i < c && f == F_NEXT; i++) f = exec(ip, ts_node_named_child(n, i));
        observe__truncate_to(ip, mark);
        return f;
    }
    if (!strcmp(t, "declaration")) {
        declaration(ip, n);
        return F_NEXT;
    }
    if (!strcmp(t, "expression_statement")) {
        if (ts_node_named_child_count(n)) expression(ip, ts_node_named_child(n, 0));
        return F_NEXT;
    }
    if (!strcmp(t, "return_statement")) {
        if (ts_node_named_child_count(n)) ip->ret = observe__eval(ip, ts_node_named_child(n, 0));
        return F_RETURN;
    }
    if (!strcmp(t, "break_statement")) return F_BREAK;
    if (!strcmp(t, "if_statement")) {
        TSNode cond = ts_node_child_by_field_name(n, "condition", 9);
        TSNode cv = observe__type_is(cond, "condition_clause") ? ts_node_child_by_field_name(cond, "value", 5) : cond;
        TSNode yes = ts_node_child_by_field_name(n, "consequence", 11);
        TSNode no = else_body(ts_node_child_by_field_name(n, "alternative", 11));
        observe__val v = ip->explore_all ? observe__unknown_val() : observe__eval(ip, cv);
        if (v.known) return v.v[0] ? exec(ip, yes) : ts_node_is_null(no) ? F_NEXT : exec(ip, no);
        note_undecided(ip, cv);
        return both(ip, yes, no);
    }
    if (!strcmp(t, "switch_statement")) return switch_stmt(ip, n);
    if (!strcmp(t, "for_statement") || !strcmp(t, "while_statement") || !strcmp(t, "do_statement")) {
        note_undecided(ip, n);
        TSNode none = {0};
        return both(ip, ts_node_child_by_field_name(n, "body", 4), none) == F_RETURN ? F_NEXT : F_NEXT;
    }
    return F_NEXT;
}

/* The inputs bound to launch()'s parameters: scalars by value, pointers as their origin. */
static void bind_inputs(observe__interp *ip, TSNode launch)
{
    char *pn[64] = {0};
    unsigned np = observe__param_names(ip, launch, pn, 64);
    for (unsigned i = 0; i < np; i++) {
        if (!pn[i]) continue;
        observe__val v = observe__unknown_val();
        if (ip->in && i < ip->in->n) {
            if (ip->in->pointer[i]) v.origin = (int)i;
            else v = observe__int_val(ip->in->value[i]);
        } else {
            /* no shape: pointers are still known as launch()'s own */
            TSNode p = ts_node_named_child(kl_ast_function_params(launch), i);
            TSNode d = ts_node_child_by_field_name(p, "declarator", 10);
            if (observe__type_is(d, "pointer_declarator")) v.origin = (int)i;
        }
        observe__bind(ip, pn[i], v);
        free(pn[i]);
    }
}

kl_status kl_obs_run_launch(const kl_source *src, const kl_obs_inputs *in, kl_obs_launches *out, kl_error *err)
{
    return observe__run_launch(src, in, false, out, err);
}

kl_status observe__run_launch(const kl_source *src, const kl_obs_inputs *in, bool explore_all, kl_obs_launches *out,
                            kl_error *err)
{
    memset(out, 0, sizeof *out);
    out->complete = true;
    TSNode launch = kl_ast_function_named(src, "launch");
    if (ts_node_is_null(launch))
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no launch() function", kl_source_name(src));
    observe__interp ip = {0};
    ip.src = src;
    ip.in = in;
    ip.out = out;
    ip.fn = launch;
    ip.ret = observe__unknown_val();
    ip.explore_all = explore_all;
    bind_inputs(&ip, launch);
    exec(&ip, kl_ast_function_body(launch));
    if (ip.steps > MAX_STEPS && out->complete) {
        out->complete = false;
        kl_snprintf(out->why, sizeof out->why, "launch() is too long to follow (%u steps)", MAX_STEPS);
    }
    observe__truncate_to(&ip, 0);
    free(ip.b);
    if (ip.oom) {
        kl_obs_launches_release(out);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    return KL_OK;
}

void kl_obs_launches_release(kl_obs_launches *l)
{
    if (!l) return;
    for (unsigned i = 0; i < l->count; i++) {
        kl_obs_launch *k = &l->items[i];
        free(k->kernel), free(k->arg), free(k->arg_known), free(k->arg_origin), free(k->targ), free(k->targ_known);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* ======================================================================================
 * which functions run
 * ====================================================================================== */

/* Does kernel `k` reach function `fn` through the calls of the file? (model features "calls") */
