/* grid-stride: one element per thread (`i = blockIdx.x*blockDim.x + threadIdx.x; if (i < n) …`) <->
 * a grid-stride loop over the elements, with the grid at the launch capped at a few waves of the
 * GPU's multiprocessors. Several loops over one grid (an expert's for and while loops, remove only)
 * are grid_stride_group.c's (grid_stride.h). */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/grid_stride.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const waves_values[] = {"4", "8", "16", "32", NULL};
static const kl_rule_param gs_params[] = {{"waves", waves_values, "8"}};

static bool is_type(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }

static TSNode strip(TSNode n)
{
    for (;;) {
        if (is_type(n, "parenthesized_expression")) n = ts_node_named_child(n, 0);
        else if (is_type(n, "cast_expression")) n = ts_node_child_by_field_name(n, "value", 5);
        else return n;
    }
}

/* ---- the kernel side ------------------------------------------------------------------------ */

/* A `while (cond) { …; i += G; }` loop's step: the last statement of its body when that is an
 * expression statement (else a null node). *expr receives the expression. */
TSNode grid_stride__while_step(TSNode s, TSNode *expr)
{
    TSNode none = {0}, body = ts_node_child_by_field_name(s, "body", 4), last = none;
    *expr = none;
    if (!is_type(s, "while_statement") || !is_type(body, "compound_statement")) return none;
    for (uint32_t i = ts_node_named_child_count(body); i-- > 0;) {
        TSNode k = ts_node_named_child(body, i);
        if (!is_type(k, "comment")) {
            last = k;
            break;
        }
    }
    if (!is_type(last, "expression_statement")) return none;
    *expr = ts_node_named_child(last, 0);
    return last;
}

/* A for's or a while's condition (a while's without the clause's parentheses). */
TSNode grid_stride__loop_cond(TSNode s)
{
    TSNode c = ts_node_child_by_field_name(s, "condition", 9);
    if (is_type(c, "condition_clause")) {
        TSNode v = ts_node_child_by_field_name(c, "value", 5);
        c = ts_node_is_null(v) ? ts_node_named_child(c, 0) : v;
    }
    return c;
}

static void gs_kernel_release(grid_stride__kernel *k)
{
    free(k->var);
    free(k->init);
    free(k->cond);
    free(k->stride);
    free(k->bound);
    free(k->type);
}

typedef struct body_scan {
    const kl_source *src;
    const char *var;
    char **outer;           /* names declared before the loop, at the function's top level */
    unsigned nouter;
    char why[300];
    int loops;              /* depth of loops (and switches) around the node being visited */
    char **accum;           /* when not null: outer locals updated by `+=` are collected here, not refused */
    unsigned *naccum;
} body_scan;

static bool scan_body(TSNode n, void *user)
{
    body_scan *b = user;
    if (b->why[0]) return false;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "return_statement")) {
        kl_snprintf(b->why, sizeof b->why, "a return at line %u inside the body", kl_ast_line(n));
        return false;
    }
    if ((!strcmp(t, "break_statement") || !strcmp(t, "continue_statement"))) {
        /* only ones inside an inner loop are harmless */
        bool inner = false;
        for (TSNode p = ts_node_parent(n); !ts_node_is_null(p) && !inner; p = ts_node_parent(p)) {
            const char *pt = ts_node_type(p);
            if (!strcmp(pt, "function_definition")) break;
            if (!strcmp(pt, "for_statement") || !strcmp(pt, "while_statement") || !strcmp(pt, "do_statement") ||
                (!strcmp(pt, "switch_statement") && !strcmp(t, "break_statement")))
                inner = true;
        }
        if (!inner)
            kl_snprintf(b->why, sizeof b->why, "a %s at line %u leaves the loop body", t, kl_ast_line(n));
        return true;
    }
    if (!strcmp(t, "call_expression")) {
        TSNode f = ts_node_child_by_field_name(n, "function", 8);
        char *name = kl_node_text(b->src, f);
        if (name && (kl_str_starts(name, "__syncthreads") || kl_str_starts(name, "__syncwarp") ||
                     strstr(name, "shfl") || kl_str_starts(name, "__ballot") || kl_str_starts(name, "__any") ||
                     kl_str_starts(name, "__all") || strstr(name, "sync")))
            kl_snprintf(b->why, sizeof b->why, "%s() at line %u: the body relies on every thread of the block", name,
                        kl_ast_line(n));
        free(name);
        return true;
    }
    if (!strcmp(t, "declaration")) {
        char *d = kl_node_text(b->src, n);
        if (d && strstr(d, "__shared__"))
            kl_snprintf(b->why, sizeof b->why, "a __shared__ declaration at line %u inside the body", kl_ast_line(n));
        free(d);
        return true;
    }
    if (!strcmp(t, "assignment_expression") || !strcmp(t, "update_expression")) {
        TSNode l = ts_node_child_by_field_name(n, !strcmp(t, "assignment_expression") ? "left" : "argument",
                                               !strcmp(t, "assignment_expression") ? 4 : 8);
        l = strip(l);
        if (b->accum && is_type(l, "subscript_expression") && !strcmp(t, "assignment_expression") &&
            kl_node_text_is(b->src, ts_node_child_by_field_name(n, "operator", 8), "+=")) {
            /* `acc[u] += e` into a local array declared before: partial sums too */
            TSNode base = strip(ts_node_child_by_field_name(l, "argument", 8));
            for (unsigned k = 0; is_type(base, "identifier") && k < b->nouter; k++)
                if (kl_node_text_is(b->src, base, b->outer[k])) {
                    bool have = false;
                    for (unsigned a = 0; a < *b->naccum; a++) have = have || !strcmp(b->accum[a], b->outer[k]);
                    if (!have && *b->naccum < GS_MAXACCUM) b->accum[(*b->naccum)++] = kl_strdup(b->outer[k]);
                }
        }
        if (is_type(l, "identifier")) {
            if (kl_node_text_is(b->src, l, b->var)) {
                kl_snprintf(b->why, sizeof b->why, "the body assigns the index %s at line %u", b->var, kl_ast_line(n));
                return false;
            }
            for (unsigned k = 0; k < b->nouter; k++)
                if (kl_node_text_is(b->src, l, b->outer[k])) {
                    if (b->accum && !strcmp(t, "assignment_expression") &&
                        kl_node_text_is(b->src, ts_node_child_by_field_name(n, "operator", 8), "+=")) {
                        /* a partial sum: the group's removal checks where it goes after the loops */
                        bool have = false;
                        for (unsigned a = 0; a < *b->naccum; a++) have = have || !strcmp(b->accum[a], b->outer[k]);
                        if (!have && *b->naccum < GS_MAXACCUM) b->accum[(*b->naccum)++] = kl_strdup(b->outer[k]);
                        return true;
                    }
                    kl_snprintf(b->why, sizeof b->why,
                                "the body updates %s (line %u), declared before it: it would carry over between elements",
                                b->outer[k], kl_ast_line(n));
                    return false;
                }
        }
    }
    return true;
}

/* Is var used in text as a word of its own? */
static bool uses_word(const char *text, const char *var)
{
    size_t vl = strlen(var);
    for (const char *p = text ? strstr(text, var) : NULL; p; p = strstr(p + 1, var)) {
        char a = p == text ? ' ' : p[-1], b = p[vl];
        bool wa = a == '_' || (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9');
        bool wb = b == '_' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9');
        if (!wa && !wb) return true;
    }
    return false;
}

/* A guarded body with statements after it (`if (i < n) body; more…`) becomes a loop only when
 * what those statements can read is the same after one element per thread as after many: the
 * body's writes must each be an element's own (an index that uses var), an accumulation (a
 * compound assignment, ++/--, an atomic), never a plain store to a place every element shares
 * (`smem[threadIdx.x] = x[i]` — a later element would overwrite it before the statements after
 * read it), and no call into a function of this file, whose writes the rule cannot see. The
 * updates of locals declared before are refused by grid_stride__check_body already. */
typedef struct trailing_scan {
    const kl_source *src;
    const char *var;
    char why[300];
} trailing_scan;

static bool scan_trailing(TSNode n, void *user)
{
    trailing_scan *t = user;
    if (t->why[0]) return false;
    if (is_type(n, "assignment_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        TSNode l = strip(ts_node_child_by_field_name(n, "left", 4));
        if (!kl_node_text_is(t->src, op, "=")) return true;
        if (is_type(l, "subscript_expression")) {
            char *idx = kl_node_text(t->src, ts_node_child_by_field_name(l, "index", 5));
            bool own = uses_word(idx, t->var);
            free(idx);
            if (!own) {
                char *lt = kl_node_text(t->src, l);
                kl_snprintf(t->why, sizeof t->why,
                            "the body stores to %s (line %u), not at an index of %s, and statements follow the guard: "
                            "a later element would overwrite it before they read it",
                            lt ? lt : "?", kl_ast_line(n), t->var);
                free(lt);
            }
        } else if (is_type(l, "pointer_expression") || is_type(l, "field_expression")) {
            kl_snprintf(t->why, sizeof t->why,
                        "the body stores through a pointer or a field (line %u) and statements follow the guard", kl_ast_line(n));
        }
        return true;
    }
    if (is_type(n, "call_expression")) {
        char *name = kl_node_text(t->src, ts_node_child_by_field_name(n, "function", 8));
        if (name && !ts_node_is_null(kl_ast_function_named(t->src, name)))
            kl_snprintf(t->why, sizeof t->why,
                        "the body calls %s() (line %u), defined in this file, and statements follow the guard: the "
                        "rule cannot see what it writes",
                        name, kl_ast_line(n));
        free(name);
    }
    return true;
}

static void check_trailing(const kl_source *src, TSNode stmt, TSNode body, TSNode last, const char *var, char *why,
                           size_t size)
{
    for (TSNode o = ts_node_next_named_sibling(stmt); !ts_node_is_null(o) && !why[0]; o = ts_node_next_named_sibling(o)) {
        char *ot = kl_node_text(src, o);
        if (uses_word(ot, var))
            kl_snprintf(why, size, "%s is also used after the guarded body (line %u)", var, kl_ast_line(o));
        free(ot);
        if (ts_node_eq(o, last)) break;
    }
    if (why[0]) return;
    trailing_scan t = {src, var, ""};
    kl_ast_walk(body, scan_trailing, &t);
    if (t.why[0]) kl_snprintf(why, size, "%s", t.why);
}

/* Names declared at the top level of the function body before `stmt`. */
static unsigned outer_names(const kl_source *src, TSNode fbody, TSNode stmt, char **names, unsigned max)
{
    unsigned n = 0;
    uint32_t c = ts_node_named_child_count(fbody);
    for (uint32_t i = 0; i < c && n < max; i++) {
        TSNode s = ts_node_named_child(fbody, i);
        if (ts_node_start_byte(s) >= ts_node_start_byte(stmt)) break;
        if (!is_type(s, "declaration")) continue;
        uint32_t dc = ts_node_named_child_count(s);
        for (uint32_t k = 0; k < dc && n < max; k++) {
            TSNode nm = kl_ast_declarator_name(ts_node_named_child(s, k));
            if (!ts_node_is_null(nm) && is_type(nm, "identifier")) names[n++] = kl_node_text(src, nm);
        }
    }
    return n;
}

void grid_stride__check_body(const kl_source *src, TSNode fbody, TSNode stmt, TSNode from, TSNode to, const char *var,
                       char *why, size_t size)
{
    grid_stride__check_body_acc(src, fbody, stmt, from, to, var, NULL, NULL, why, size);
}

void grid_stride__check_body_acc(const kl_source *src, TSNode fbody, TSNode stmt, TSNode from, TSNode to,
                                 const char *var, char **accum, unsigned *naccum, char *why, size_t size)
{
    body_scan b = {src, var, NULL, 0, "", 0, accum, naccum};
    /* a loop inside a top-level `if`: the names declared before that if, and before the loop in its branch */
    TSNode top = stmt, block = ts_node_parent(stmt);
    while (!ts_node_is_null(top) && !ts_node_eq(ts_node_parent(top), fbody) && !ts_node_is_null(ts_node_parent(top)))
        top = ts_node_parent(top);
    char *names[64] = {0};
    b.nouter = outer_names(src, fbody, top, names, 64);
    if (!ts_node_eq(block, fbody)) b.nouter += outer_names(src, block, stmt, names + b.nouter, 64 - b.nouter);
    b.outer = names;
    for (TSNode s = from; !ts_node_is_null(s); s = ts_node_next_named_sibling(s)) {
        kl_ast_walk(s, scan_body, &b);
        if (ts_node_eq(s, to) || b.why[0]) break;
    }
    for (unsigned k = 0; k < b.nouter; k++) free(names[k]);
    if (b.why[0] && !why[0]) kl_snprintf(why, size, "%s", b.why);
}

/* The stride of an index `C*blockIdx.x + threadIdx.x`: "blockDim.x * gridDim.x" or "C * gridDim.x". */
static bool find_block_coef(const kl_source *src, TSNode n, TSNode *coef)
{
    n = strip(n);
    if (!is_type(n, "binary_expression")) return false;
    char *op = kl_node_text(src, ts_node_child_by_field_name(n, "operator", 8));
    bool mul = op && !strcmp(op, "*"), add = op && !strcmp(op, "+");
    free(op);
    TSNode l = ts_node_child_by_field_name(n, "left", 4), r = ts_node_child_by_field_name(n, "right", 5);
    if (mul) {
        if (kl_node_text_is(src, strip(l), "blockIdx.x")) {
            *coef = r;
            return true;
        }
        if (kl_node_text_is(src, strip(r), "blockIdx.x")) {
            *coef = l;
            return true;
        }
        return false;
    }
    return add && (find_block_coef(src, l, coef) || find_block_coef(src, r, coef));
}

/* Is init the global thread index (1-D)? Fills the stride text and, when the block coefficient is
 * not blockDim.x, its compile-time value (*coef, 0 when it is blockDim.x). */
static bool index_form(const kl_source *src, kl_affine_ctx *ax, TSNode init, char **stride, int64_t *coef, char *why,
                       size_t size)
{
    kl_affine a = {0};
    *coef = 0;
    if (kl_affine_of(ax, init, &a) != KL_OK) return false;
    bool ok = a.ok;
    int64_t tx = 0;
    if (!ok) {
        kl_snprintf(why, size, "the index at line %u is not affine: %s", kl_ast_line(init), a.why ? a.why : "");
    } else if (!kl_affine_coef_int(&a, "threadIdx.x", &tx) || tx != 1 || !kl_affine_coef(&a, "blockIdx.x") ||
               a.nterms != 2 || !a.const_is_int || a.const_int != 0) {
        kl_snprintf(why, size, "the index at line %u is not blockIdx.x * blockDim.x + threadIdx.x (1-D, no offset)",
                    kl_ast_line(init));
        ok = false;
    }
    if (ok) {
        const char *c = kl_affine_coef(&a, "blockIdx.x");
        TSNode cn = {0};
        kl_strbuf sb = KL_STRBUF_INIT;
        char w[200];
        if (!strcmp(c, "blockDim.x")) {
            kl_strbuf_adds(&sb, "blockDim.x * gridDim.x");
        } else if (find_block_coef(src, init, &cn) &&
                   kl_const_eval(src, kl_affine_ctx_function(ax), cn, false, coef, w, sizeof w)) {
            /* the constant, written as it is in the index, so that a block-size change follows */
            char *t = kl_node_text(src, cn);
            bool simple = is_type(cn, "identifier") || is_type(cn, "number_literal") || is_type(cn, "parenthesized_expression");
            kl_strbuf_addf(&sb, simple ? "%s * gridDim.x" : "(%s) * gridDim.x", t ? t : "");
            free(t);
        } else if (kl_affine_coef_int(&a, "blockIdx.x", coef) && *coef > 0) {
            /* a constant behind a macro or helper: the launch's block size, checked equal to it */
            kl_strbuf_adds(&sb, "blockDim.x * gridDim.x");
        } else {
            kl_snprintf(why, size, "the block coefficient %s of the index at line %u is neither blockDim.x nor a constant",
                        c, kl_ast_line(init));
            ok = false;
        }
        *stride = ok ? kl_strbuf_detach(&sb, NULL) : NULL;
        kl_strbuf_release(&sb);
    }
    kl_affine_release(&a);
    return ok;
}

/* `var < bound` with bound invariant: the bound's text. */
static bool bound_of(const kl_source *src, kl_affine_ctx *ax, TSNode cond, const char *var, const char *op_want,
                     char **bound)
{
    if (is_type(cond, "condition_clause")) cond = ts_node_named_child(cond, 0);
    while (is_type(cond, "parenthesized_expression")) cond = ts_node_named_child(cond, 0);
    if (!is_type(cond, "binary_expression")) return false;
    TSNode l = ts_node_child_by_field_name(cond, "left", 4), r = ts_node_child_by_field_name(cond, "right", 5);
    if (!is_type(l, "identifier") || !kl_node_text_is(src, l, var)) return false;
    /* the operator from the text: the tree may hold '>' for a '<' */
    uint32_t a = ts_node_end_byte(l), b = ts_node_start_byte(r);
    const char *t = kl_source_text(src, NULL);
    char op[4] = "";
    unsigned k = 0;
    for (uint32_t i = a; i < b && k < 3; i++)
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\n') op[k++] = t[i];
    op[k] = '\0';
    if (strcmp(op, op_want)) return false;
    kl_affine f = {0};
    if (kl_affine_of(ax, r, &f) != KL_OK) return false;
    bool inv = f.ok && !kl_affine_varies(&f);
    kl_affine_release(&f);
    if (!inv) return false;
    *bound = kl_node_text(src, r);
    return *bound != NULL;
}

char *grid_stride__decl_type(const kl_source *src, TSNode decl)
{
    /* the declaration's text up to its declarator, without `const` */
    TSNode d = ts_node_child_by_field_name(decl, "declarator", 10);
    const char *t = kl_source_text(src, NULL);
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t a = ts_node_start_byte(decl), b = ts_node_start_byte(d);
    if (b - a >= 6 && !memcmp(t + a, "const ", 6)) a += 6;
    while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t' || t[b - 1] == '\n')) b--;
    kl_strbuf_add(&sb, t + a, b - a);
    return kl_strbuf_detach(&sb, NULL);
}

bool grid_stride__has_text(const kl_source *src, TSNode n, const char *needle)
{
    char *t = kl_node_text(src, n);
    bool yes = t && strstr(t, needle);
    free(t);
    return yes;
}

bool grid_stride__use_visit(TSNode n, void *user)
{
    grid_stride__use_scan *u = user;
    if (u->line) return false;
    uint32_t a = ts_node_start_byte(n);
    bool hit = false;
    if (u->prefix) {
        if (is_type(n, "field_expression")) {
            char *t = kl_node_text(u->src, n);
            hit = t && kl_str_starts(t, u->prefix);
            free(t);
        }
    } else {
        hit = is_type(n, "identifier") && kl_node_text_is(u->src, n, u->name);
    }
    if (!hit) return true;
    if (a >= u->skip_a && a < u->skip_b) return false;
    for (unsigned i = 0; i < u->nr; i++)
        if (a >= u->ra[i] && a < u->rb[i]) return false;
    u->line = ts_node_start_point(n).row + 1;
    return false;
}

typedef struct block0_scan {
    const kl_source *src;
    uint32_t *ra, *rb;
    unsigned *nr;
    bool found;
} block0_scan;

/* `blockIdx.x == 0` / `0 == blockIdx.x` / `!=`: ranges of its own (they do not depend on the grid). */
static bool block0_visit(TSNode n, void *user)
{
    block0_scan *b = user;
    if (!is_type(n, "binary_expression")) return true;
    char *op = kl_node_text(b->src, ts_node_child_by_field_name(n, "operator", 8));
    char *l = kl_node_text(b->src, strip(ts_node_child_by_field_name(n, "left", 4)));
    char *r = kl_node_text(b->src, strip(ts_node_child_by_field_name(n, "right", 5)));
    bool hit = op && l && r && (!strcmp(op, "==") || !strcmp(op, "!=")) &&
               ((!strcmp(l, "blockIdx.x") && !strcmp(r, "0")) || (!strcmp(r, "blockIdx.x") && !strcmp(l, "0")));
    free(op);
    free(l);
    free(r);
    if (!hit) return true;
    b->found = true;
    if (b->ra && *b->nr < GS_MAXRANGES) {
        b->ra[*b->nr] = ts_node_start_byte(n);
        b->rb[(*b->nr)++] = ts_node_end_byte(n);
    }
    return false;
}

bool grid_stride__has_block0(const kl_source *src, TSNode fn)
{
    unsigned nr = 0;
    block0_scan b = {src, NULL, NULL, &nr, false};
    kl_ast_walk(kl_ast_function_body(fn), block0_visit, &b);
    return b.found;
}

/* The grid's size must not matter outside the loops: blockIdx/gridDim, and the locals computed from
 * them, appear only in the loops' headers, in loops that go, in the declarations of the indexes and in
 * one another's definitions. `ra/rb` holds those ranges (loops' headers, dead loops, index
 * declarations) on entry and grows; *nr its count. */
void grid_stride__grid_free(const kl_rule_ctx *ctx, TSNode fn, uint32_t *ra, uint32_t *rb, unsigned *nr, char *why,
                      size_t size)
{
    const kl_source *src = ctx->src;
    TSNode fbody = kl_ast_function_body(fn);
    uint32_t c = ts_node_named_child_count(fbody);
    char *locals[GS_MAXRANGES] = {0};
    unsigned nloc = 0;
    bool grew = true;
    while (grew && !why[0]) {
        grew = false;
        for (uint32_t i = 0; i < c && *nr < GS_MAXRANGES && nloc < GS_MAXRANGES; i++) {
            TSNode d = ts_node_named_child(fbody, i);
            if (!is_type(d, "declaration")) continue;
            bool in = false;
            for (unsigned r = 0; r < *nr; r++)
                if (ts_node_start_byte(d) >= ra[r] && ts_node_start_byte(d) < rb[r]) in = true;
            if (in) continue;
            bool grid = grid_stride__has_text(src, d, "blockIdx") || grid_stride__has_text(src, d, "gridDim");
            for (unsigned l = 0; l < nloc && !grid; l++) grid = rt_count_ident(ctx, d, locals[l]) > 0;
            if (!grid) continue;
            TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(d, "declarator", 10));
            if (ts_node_is_null(nm) || ts_node_named_child_count(d) > 3) {
                kl_snprintf(why, size, "line %u declares from blockIdx/gridDim what cannot be followed",
                            kl_ast_line(d));
                break;
            }
            locals[nloc++] = kl_node_text(src, nm);
            ra[*nr] = ts_node_start_byte(d);
            rb[(*nr)++] = ts_node_end_byte(d);
            grew = true;
        }
    }
    /* "is this block 0" is the same question in any grid of at least one block */
    block0_scan b0 = {src, ra, rb, nr, false};
    kl_ast_walk(fbody, block0_visit, &b0);
    const char *builtins[] = {"blockIdx", "gridDim"};
    for (unsigned b = 0; b < 2 + nloc && !why[0]; b++) {
        if (b >= 2 && !locals[b - 2]) continue;
        grid_stride__use_scan u = {src, b < 2 ? NULL : locals[b - 2], ra, rb, *nr, 0, 0, 0, b < 2 ? builtins[b] : NULL};
        kl_ast_walk(fbody, grid_stride__use_visit, &u);
        if (u.line)
            kl_snprintf(why, size,
                        "line %u uses %s outside the grid-stride loops' headers: the grid's size would change it",
                        u.line, b < 2 ? builtins[b] : locals[b - 2]);
    }
    /* helpers the kernel calls */
    TSNode helpers[64];
    unsigned nh = kl_ast_functions(src, "__device__", helpers, 64);
    for (unsigned h = 0; h < nh && h < 64 && !why[0]; h++) {
        char *name = kl_ast_function_name(src, helpers[h]);
        if (name && rt_count_ident(ctx, fbody, name) &&
            (grid_stride__has_text(src, helpers[h], "blockIdx") || grid_stride__has_text(src, helpers[h], "gridDim")))
            kl_snprintf(why, size, "the helper %s uses blockIdx/gridDim: the grid's size would change it", name);
        free(name);
    }
    for (unsigned l = 0; l < nloc; l++) free(locals[l]);
}

static void analyse_kernel(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, grid_stride__kernel *k)
{
    const kl_source *src = ctx->src;
    memset(k, 0, sizeof *k);
    TSNode body = kl_ast_function_body(fn);
    uint32_t c = ts_node_named_child_count(body);
    unsigned nloops = 0;
    TSNode gsl[GS_MAXLOOPS];
    /* the statements a grid-stride loop may be: the top level's, and those of the branches of a
     * top-level `if (flag) { … } else { … }` whose condition is the same for every thread
     * (`if (nIsPow2)`: a template flag or a parameter) */
    TSNode cand[128];
    unsigned ncand = 0;
    for (uint32_t i = 0; i < c && ncand < 128; i++) {
        TSNode s = ts_node_named_child(body, i);
        cand[ncand++] = s;
        if (!is_type(s, "if_statement")) continue;
        TSNode cond = ts_node_child_by_field_name(s, "condition", 9);
        if (grid_stride__has_text(src, cond, "threadIdx") || grid_stride__has_text(src, cond, "blockIdx") ||
            grid_stride__has_text(src, cond, "gridDim") || grid_stride__has_text(src, cond, "blockDim"))
            continue;
        TSNode br[2] = {ts_node_child_by_field_name(s, "consequence", 11), ts_node_child_by_field_name(s, "alternative", 11)};
        for (unsigned b = 0; b < 2; b++) {
            TSNode blk = br[b];
            if (is_type(blk, "else_clause")) blk = ts_node_named_child(blk, 0);
            if (!is_type(blk, "compound_statement")) continue;
            for (uint32_t j = 0; j < ts_node_named_child_count(blk) && ncand < 128; j++) {
                TSNode t = ts_node_named_child(blk, j);
                if (is_type(t, "for_statement") || is_type(t, "while_statement")) cand[ncand++] = t;
            }
        }
    }
    /* present: a for whose update steps by gridDim.x */
    for (uint32_t ci = 0; ci < ncand; ci++) {
        TSNode s = cand[ci];
        bool is_while = is_type(s, "while_statement");
        if (!is_type(s, "for_statement") && !is_while) continue;
        TSNode upd = ts_node_child_by_field_name(s, "update", 6);
        if (is_while) grid_stride__while_step(s, &upd);
        if (ts_node_is_null(upd)) continue;
        bool stride = grid_stride__has_text(src, upd, "gridDim.x");
        if (!stride) {
            /* a step through a local: `i += stride` with `stride = gridDim.x * …` */
            TSNode r = is_type(upd, "assignment_expression") ? ts_node_child_by_field_name(upd, "right", 5) : upd;
            char *rt = kl_node_text(src, r);
            if (rt) {
                TSNode blocks[2] = {body, ts_node_parent(s)};
                for (unsigned bi = 0; bi < (ts_node_eq(blocks[1], body) ? 1u : 2u); bi++)
                for (uint32_t j = 0; j < ts_node_named_child_count(blocks[bi]) && !stride; j++) {
                    TSNode d = ts_node_named_child(blocks[bi], j);
                    if (ts_node_start_byte(d) >= ts_node_start_byte(s)) break;
                    if (!is_type(d, "declaration") || !grid_stride__has_text(src, d, "gridDim.x")) continue;
                    TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(d, "declarator", 10));
                    char *name = ts_node_is_null(nm) ? NULL : kl_node_text(src, nm);
                    if (name && strstr(rt, name)) stride = true;
                    free(name);
                }
                free(rt);
            }
        }
        if (!stride) continue;
        if (nloops < GS_MAXLOOPS) gsl[nloops] = s;
        nloops++;
        if (k->found) continue;
        k->found = k->present = true;
        k->stmt = s;
        k->body = ts_node_child_by_field_name(s, "body", 4);
        if (is_while) {
            /* read as several loops over one grid (grid_stride__analyse_group), which knows the while form */
            kl_snprintf(k->why, sizeof k->why, "the grid-stride while loop at line %u", kl_ast_line(s));
            continue;
        }
        TSNode init = ts_node_child_by_field_name(s, "initializer", 11);
        TSNode cond = ts_node_child_by_field_name(s, "condition", 9);
        if (!is_type(init, "declaration") ||
            !is_type(ts_node_child_by_field_name(init, "declarator", 10), "init_declarator")) {
            kl_snprintf(k->why, sizeof k->why, "the grid-stride loop at line %u does not declare its index", kl_ast_line(s));
            continue;
        }
        TSNode idecl = ts_node_child_by_field_name(init, "declarator", 10);
        TSNode nm = ts_node_child_by_field_name(idecl, "declarator", 10);
        TSNode val = ts_node_child_by_field_name(idecl, "value", 5);
        k->decl = init;
        k->var = kl_node_text(src, nm);
        k->init = kl_node_text(src, val);
        k->type = grid_stride__decl_type(src, init);
        k->cond = kl_node_text(src, cond);
        char *stride_want = NULL;
        if (!index_form(src, ax, val, &stride_want, &k->coef, k->why, sizeof k->why)) continue;
        k->stride = stride_want;
        char *upd_t = kl_node_text(src, upd);
        char alt[256] = "", want[256] = "";
        kl_snprintf(want, sizeof want, "%s += %s", k->var, stride_want);
        if (!strcmp(stride_want, "blockDim.x * gridDim.x")) kl_snprintf(alt, sizeof alt, "%s += gridDim.x * blockDim.x", k->var);
        if (!upd_t || (strcmp(upd_t, want) && strcmp(upd_t, alt)))
            kl_snprintf(k->why, sizeof k->why, "the loop at line %u steps by %s, not %s (several elements per step?)",
                        kl_ast_line(s), upd_t ? upd_t : "?", want);
        free(upd_t);
        if (!k->why[0] && !bound_of(src, ax, cond, k->var, "<", &k->bound))
            kl_snprintf(k->why, sizeof k->why, "the loop condition at line %u is not %s < <an invariant bound>",
                        kl_ast_line(s), k->var);
        if (!k->why[0]) grid_stride__check_body(src, body, s, k->body, k->body, k->var, k->why, sizeof k->why);
        if (!k->why[0]) {
            /* the index must not be used outside the loop: it would be declared in the function's scope */
            for (uint32_t j = 0; j < c && !k->why[0]; j++) {
                TSNode o = ts_node_named_child(body, j);
                if (ts_node_eq(o, s)) continue;
                char *ot = kl_node_text(src, o);
                if (uses_word(ot, k->var))
                    kl_snprintf(k->why, sizeof k->why, "%s is also used outside the loop (line %u)", k->var,
                                kl_ast_line(o));
                free(ot);
            }
        }
    }
    if (k->found && (nloops > 1 || k->why[0] || !k->bound || kl_affine_param_index(ax, k->bound) < 0)) {
        /* not the standard single loop: several loops over one grid, proven against a size parameter */
        char gwhy[300] = "";
        int level = grid_stride__analyse_group(ctx, fn, ax, gsl, nloops, k, gwhy, sizeof gwhy);
        if (level == GS_OK) k->why[0] = '\0';
        else if (gwhy[0]) kl_snprintf(k->why, sizeof k->why, "%s", gwhy);
    }
    if (k->found && !k->group && !k->why[0]) {
        /* the grid's size must matter nowhere but in the loop's header */
        uint32_t ra[GS_MAXRANGES] = {ts_node_start_byte(k->stmt)}, rb[GS_MAXRANGES] = {ts_node_start_byte(k->body)};
        unsigned nr = 1;
        grid_stride__grid_free(ctx, fn, ra, rb, &nr, k->why, sizeof k->why);
    }
    if (k->found) return;
    /* applicable: `T i = <global index>; [declarations] if (i < n) body` as the last statement, or
     * `if (i >= n) return;` followed by the rest */
    for (uint32_t i = 0; i < c && !k->found; i++) {
        TSNode d = ts_node_named_child(body, i);
        if (!is_type(d, "declaration")) continue;
        TSNode idecl = ts_node_child_by_field_name(d, "declarator", 10);
        if (!is_type(idecl, "init_declarator") || ts_node_named_child_count(d) > 2 + (grid_stride__has_text(src, d, "const") ? 1 : 0))
            continue;
        TSNode nm = ts_node_child_by_field_name(idecl, "declarator", 10);
        TSNode val = ts_node_child_by_field_name(idecl, "value", 5);
        if (!is_type(nm, "identifier") || !grid_stride__has_text(src, val, "threadIdx.x") || !grid_stride__has_text(src, val, "blockIdx.x"))
            continue;
        char *var = kl_node_text(src, nm);
        if (!var) return;
        /* the if that guards it: the next statements that are not declarations free of var */
        TSNode s = ts_node_next_named_sibling(d);
        while (is_type(s, "declaration") || is_type(s, "comment")) {
            if (is_type(s, "declaration")) {
                char *t = kl_node_text(src, s);
                bool uses = uses_word(t, var);
                free(t);
                if (uses) break;
            }
            s = ts_node_next_named_sibling(s);
        }
        if (!is_type(s, "if_statement") || !ts_node_is_null(ts_node_child_by_field_name(s, "alternative", 11))) {
            free(var);
            continue;
        }
        TSNode cond = ts_node_child_by_field_name(s, "condition", 9);
        TSNode cons = ts_node_child_by_field_name(s, "consequence", 11);
        char *bound = NULL;
        bool early = false;
        if (bound_of(src, ax, cond, var, "<", &bound)) {
            early = false;
        } else if (is_type(cons, "return_statement") && ts_node_named_child_count(cons) == 0 &&
                   bound_of(src, ax, cond, var, ">=", &bound)) {
            early = true;
        } else {
            free(var);
            continue;
        }
        k->found = true;
        k->early_return = early;
        k->decl = d;
        k->stmt = s;
        k->body = early ? ts_node_next_named_sibling(s) : cons;
        k->var = var;
        k->bound = bound;
        k->init = kl_node_text(src, val);
        k->type = grid_stride__decl_type(src, d);
        k->cond = NULL;
        TSNode last = s;
        for (TSNode o = ts_node_next_named_sibling(s); !ts_node_is_null(o); o = ts_node_next_named_sibling(o))
            if (!is_type(o, "comment")) last = o;
        k->last = last;
        if (!index_form(src, ax, val, &k->stride, &k->coef, k->why, sizeof k->why)) return;
        if (!early && !ts_node_eq(last, s))
            check_trailing(src, s, k->body, last, var, k->why, sizeof k->why);
        else if (early && ts_node_is_null(k->body))
            kl_snprintf(k->why, sizeof k->why, "nothing follows the early return at line %u", kl_ast_line(s));
        if (!k->why[0]) grid_stride__check_body(src, body, s, k->body, early ? last : k->body, var, k->why, sizeof k->why);
    }
}

/* ---- the launch side ------------------------------------------------------------------------ */

/* The launches of a kernel, checked: 1-D grid, a statement of its own in a block. */
static bool launches_ok(const kl_rule_ctx *ctx, const kl_launch_sites *ls, const char *kernel, bool remove, unsigned *n,
                        char *why, size_t size)
{
    *n = 0;
    for (unsigned i = 0; i < ls->count; i++) {
        const kl_launch_site *l = &ls->items[i];
        if (strcmp(l->kernel, kernel)) continue;
        (*n)++;
        TSNode g = strip(l->grid);
        if (is_type(g, "call_expression") && kl_node_text_is(ctx->src, ts_node_child_by_field_name(g, "function", 8), "dim3") &&
            ts_node_named_child_count(ts_node_child_by_field_name(g, "arguments", 9)) > 1) {
            kl_snprintf(why, size, "the grid at line %u is not 1-D", kl_ast_line(l->call));
            return false;
        }
        if (is_type(g, "identifier")) {
            char *t = kl_node_text(ctx->src, g);
            char pat[160];
            kl_snprintf(pat, sizeof pat, "dim3 %s", t ? t : "");
            if (grid_stride__has_text(ctx->src, l->host_fn, pat)) {
                kl_snprintf(why, size, "the grid at line %u is a dim3", kl_ast_line(l->call));
                free(t);
                return false;
            }
            free(t);
        }
        TSNode st = ts_node_parent(l->call);
        /* apply inserts the SM query before the launch; a removal only rewrites the grid (a launch
         * may then be an if's branch: `if (pow2) k<T, true><<<…>>>(…); else …`) */
        if (!is_type(st, "expression_statement") || (!remove && !is_type(ts_node_parent(st), "compound_statement"))) {
            kl_snprintf(why, size, "the launch at line %u is not a statement of its own in a block", kl_ast_line(l->call));
            return false;
        }
    }
    if (*n == 0) kl_snprintf(why, size, "the file never launches %s", kernel);
    return *n > 0;
}

/* The cap `kl_sms * W` of a capped grid `(G < X ? G : X)` or `min(G, X)`: G's node, and W when found. */
static bool capped_grid(const kl_source *src, TSNode g, TSNode *first, int64_t *waves)
{
    while (is_type(g, "parenthesized_expression")) g = ts_node_named_child(g, 0);
    *waves = 0;
    TSNode cap = {0};
    if (is_type(g, "conditional_expression")) {
        TSNode c = ts_node_child_by_field_name(g, "condition", 9);
        TSNode a = ts_node_child_by_field_name(g, "consequence", 11);
        TSNode b = ts_node_child_by_field_name(g, "alternative", 11);
        if (!is_type(c, "binary_expression")) return false;
        char *ct = kl_node_text(src, ts_node_child_by_field_name(c, "left", 4));
        char *at = kl_node_text(src, a);
        bool ok = ct && at && !strcmp(ct, at);
        free(ct);
        free(at);
        if (!ok) return false;
        *first = a;
        cap = b;
    } else if (is_type(g, "call_expression")) {
        TSNode f = ts_node_child_by_field_name(g, "function", 8);
        TSNode args = ts_node_child_by_field_name(g, "arguments", 9);
        if (!(kl_node_text_is(src, f, "min") || kl_node_text_is(src, f, "std::min")) ||
            ts_node_named_child_count(args) != 2)
            return false;
        *first = ts_node_named_child(args, 0);
        cap = ts_node_named_child(args, 1);
    } else {
        return false;
    }
    char *t = kl_node_text(src, cap);
    if (t && kl_str_starts(t, "kl_sms * ")) *waves = strtoll(t + 9, NULL, 10);
    free(t);
    return true;
}

static const char sm_query[] = "int kl_dev = 0, kl_sms = 0;";

/* ---- find ------------------------------------------------------------------------------------------ */

typedef struct gs_run {
    const kl_site *site;
    bool remove;
    int64_t waves;
    kl_edits *out;
    kl_error *err;
    bool found;
} gs_run;

static kl_status launch_edits(const kl_rule_ctx *ctx, gs_run *r, const grid_stride__kernel *k, const char *kernel);

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    grid_stride__kernel k;
    analyse_kernel(ctx, fn, ax, &k);
    kl_status st = KL_OK;
    if (!k.found) goto done;
    kl_launch_sites ls;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    unsigned nl = 0;
    char why[300] = "";
    bool lok = launches_ok(ctx, &ls, name, k.present, &nl, why, sizeof why);
    int64_t waves = 0;
    if (k.present) {
        for (unsigned i = 0; i < ls.count; i++) {
            TSNode first;
            int64_t w;
            if (!strcmp(ls.items[i].kernel, name) && capped_grid(ctx->src, ls.items[i].grid, &first, &w)) waves = w;
        }
    }
    kl_launch_sites_release(&ls);
    if (nl == 0) goto done; /* never launched here: the grid cannot follow */
    const char *reason = k.why[0] ? k.why : lok ? NULL : why;
    char lwhy[KL_ERROR_MAX] = "";
    if (k.present && !reason) {
        /* what the launch side of a removal would say */
        kl_edits scratch = {0};
        kl_error e2 = {0};
        gs_run r = {NULL, true, 0, &scratch, &e2, false};
        if (launch_edits(ctx, &r, &k, name) == KL_ERR_NOT_APPLICABLE) {
            const char *m = e2.message;
            if (kl_str_starts(m, "not applicable: ")) m += strlen("not applicable: ");
            kl_snprintf(lwhy, sizeof lwhy, "%s", m);
            reason = lwhy;
        }
        kl_edits_release(&scratch);
    }
    json_t *f = json_pack("{s:s, s:s, s:s, s:s, s:I, s:b}", "index", k.var ? k.var : "", "index_type",
                          k.type ? k.type : "", "bound", k.bound ? k.bound : "", "stride", k.stride ? k.stride : "",
                          "launches", (json_int_t)nl, "early_return", k.early_return);
    if (!f) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    if (reason) json_object_set_new(f, "why_not", json_string(reason));
    if (k.group) json_object_set_new(f, "loops", json_integer((json_int_t)k.ng));
    json_t *params = NULL;
    if (k.present && waves > 0) {
        char w[32];
        kl_snprintf(w, sizeof w, "%lld", (long long)waves);
        params = json_pack("{s:s}", "waves", w);
    }
    char id[256], note[400];
    /* an applicable site is named by the index's declaration: where the loop will start */
    TSNode at = k.present ? k.stmt : k.decl;
    kl_site_id(id, sizeof id, name, at, NULL);
    if (reason)
        kl_snprintf(note, sizeof note, "%s", reason);
    else if (k.present && k.group)
        kl_snprintf(note, sizeof note, "%u grid-stride loop(s) over one grid, each covering at most %s indices", k.ng,
                    k.bound);
    else if (k.present)
        kl_snprintf(note, sizeof note, "a grid-stride loop over %s < %s", k.var, k.bound);
    else
        kl_snprintf(note, sizeof note, "one element per thread: %s < %s%s", k.var, k.bound,
                    k.early_return ? " (early return)" : "");
    st = kl_sites_add(out, id, k.present ? KL_SITE_PRESENT : KL_SITE_APPLICABLE, kl_node_span(at), name, f, params, note);
done:
    gs_kernel_release(&k);
    return st;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_function(ctx, "__global__", visit, out, err);
}

/* ---- the rewrites --------------------------------------------------------------------------------- */

static kl_status oom(kl_error *err) { return kl_error_set(err, KL_ERR_NOMEM, "out of memory"); }

/* Add one indent unit to every line of [a, b) that starts inside it. */
static kl_status indent_lines(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *unit, kl_edits *out)
{
    uint32_t p = kl_ast_line_start(ctx->text, a);
    while (p < b) {
        if (p >= a || p == kl_ast_line_start(ctx->text, a)) {
            if (ctx->text[p] != '\n' && ctx->text[p] != '#') {
                kl_status st = kl_edits_add(out, p, p, unit);
                if (st != KL_OK) return st;
            }
        }
        const char *nl = memchr(ctx->text + p, '\n', b - p);
        if (!nl) break;
        p = (uint32_t)(nl - ctx->text) + 1;
    }
    return KL_OK;
}

static kl_status apply_kernel(const kl_rule_ctx *ctx, grid_stride__kernel *k, kl_edits *out)
{
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(k->stmt), ind, sizeof ind);
    kl_strbuf head = KL_STRBUF_INIT;
    kl_strbuf_addf(&head, "for (%s %s = %s; %s < %s; %s += %s) ", k->type, k->var, k->init, k->var, k->bound, k->var,
                   k->stride);
    if (head.failed) return KL_ERR_NOMEM;
    /* the declaration goes (its whole line when alone on it) */
    uint32_t da, db;
    kl_rules_line_range(ctx, k->decl, NULL, &da, &db);
    kl_status st = kl_edits_add(out, da, db, "");
    if (st == KL_OK && !k->early_return) {
        /* `if (cond) ` -> `for (…) ` */
        st = kl_edits_add(out, ts_node_start_byte(k->stmt), ts_node_start_byte(k->body), kl_strbuf_str(&head));
    } else if (st == KL_OK) {
        /* `if (i >= n) return;` -> `for (…) {`, the rest indented, `}` after it */
        kl_strbuf_adds(&head, "{");
        st = kl_edits_add(out, ts_node_start_byte(k->stmt), ts_node_end_byte(k->stmt), kl_strbuf_str(&head));
        const char *unit = strlen(ind) ? ind : "    ";
        if (st == KL_OK) st = indent_lines(ctx, ts_node_start_byte(k->body), ts_node_end_byte(k->last), unit, out);
        if (st == KL_OK) st = kl_edits_addf(out, ts_node_end_byte(k->last), ts_node_end_byte(k->last), "\n%s}", ind);
    }
    kl_strbuf_release(&head);
    return st;
}

static kl_status remove_kernel(const kl_rule_ctx *ctx, grid_stride__kernel *k, kl_edits *out)
{
    if (k->group) return grid_stride__remove_group(ctx, k, out);
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(k->stmt), ind, sizeof ind);
    kl_strbuf head = KL_STRBUF_INIT;
    bool own_line = kl_rules_starts_line(ctx, ts_node_start_byte(k->stmt));
    kl_strbuf_addf(&head, "%s %s = %s;%s%s", k->type, k->var, k->init, own_line ? "\n" : " ", own_line ? ind : "");
    kl_strbuf_addf(&head, "if (%s) ", k->cond);
    if (head.failed) return KL_ERR_NOMEM;
    kl_status st = kl_edits_add(out, ts_node_start_byte(k->stmt), ts_node_start_byte(k->body), kl_strbuf_str(&head));
    kl_strbuf_release(&head);
    return st;
}

static kl_status launch_edits(const kl_rule_ctx *ctx, gs_run *r, const grid_stride__kernel *k, const char *kernel)
{
    kl_launch_sites ls;
    kl_status st = kl_ast_launches(ctx->src, &ls, r->err);
    if (st != KL_OK) return st;
    char why[300] = "";
    unsigned nl = 0;
    if (!launches_ok(ctx, &ls, kernel, r->remove, &nl, why, sizeof why)) {
        st = kl_rule_not_applicable(r->err, "%s", why);
        goto cleanup;
    }
    TSNode queried[16];
    unsigned nq = 0, removed_caps = 0;
    for (unsigned i = 0; i < ls.count && st == KL_OK; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, kernel)) continue;
        char *gt = kl_node_text(ctx->src, l->grid);
        if (!gt) {
            st = oom(r->err);
            break;
        }
        if (!r->remove) {
            /* a constant block coefficient in the index must be the launch's block size */
            if (k->coef) {
                int64_t bv = 0;
                char w[200];
                if (ts_node_is_null(l->block) || !kl_const_eval(ctx->src, l->host_fn, l->block, true, &bv, w, sizeof w) ||
                    bv != k->coef) {
                    st = kl_rule_not_applicable(r->err,
                                                "the index steps blocks by %lld, which is not the block size at line %u",
                                                (long long)k->coef, kl_ast_line(l->call));
                    free(gt);
                    break;
                }
            }
            bool have = false;
            for (unsigned q = 0; q < nq; q++)
                if (ts_node_eq(queried[q], l->host_fn)) have = true;
            if (!have && grid_stride__has_text(ctx->src, l->host_fn, sm_query)) have = true;
            if (!have) {
                /* before the launch; at the top of the host function when launches of the kernel
                 * there sit in different blocks (the query must be in scope for each) */
                TSNode stmt = ts_node_parent(l->call);
                for (unsigned o = i + 1; o < ls.count; o++) {
                    const kl_launch_site *m = &ls.items[o];
                    if (!strcmp(m->kernel, kernel) && ts_node_eq(m->host_fn, l->host_fn) &&
                        !ts_node_eq(ts_node_parent(ts_node_parent(m->call)), ts_node_parent(stmt)))
                        stmt = ts_node_named_child(kl_ast_function_body(l->host_fn), 0);
                }
                if (ts_node_is_null(stmt) || !kl_rules_starts_line(ctx, ts_node_start_byte(stmt))) {
                    st = kl_rule_not_applicable(r->err, "the launch at line %u does not start its own line",
                                                kl_ast_line(l->call));
                    free(gt);
                    break;
                }
                uint32_t at = kl_ast_line_start(ctx->text, ts_node_start_byte(stmt));
                char ind[64];
                kl_rules_indent(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
                st = kl_edits_addf(r->out, at, at,
                                   "%s%s\n%scudaGetDevice(&kl_dev);\n"
                                   "%scudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);\n",
                                   ind, sm_query, ind, ind);
                if (nq < 16) queried[nq++] = l->host_fn;
            }
            if (st == KL_OK)
                st = kl_edits_addf(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                   "(%s < kl_sms * %lld ? %s : kl_sms * %lld)", gt, (long long)r->waves, gt,
                                   (long long)r->waves);
        } else {
            TSNode first;
            int64_t w;
            if (!k->group && capped_grid(ctx->src, l->grid, &first, &w)) {
                char *ft = kl_node_text(ctx->src, first);
                st = ft ? kl_edits_add(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid), ft) : KL_ERR_NOMEM;
                free(ft);
                if (w > 0) removed_caps++;
                bool listed = false;
                for (unsigned q = 0; q < nq; q++)
                    if (ts_node_eq(queried[q], l->host_fn)) listed = true;
                if (w > 0 && !listed && nq < 16) queried[nq++] = l->host_fn;
            } else {
                /* recompute the ceil-div from the loop bound when it is a parameter passed here */
                TSNode kern = kl_ast_function_named(ctx->src, kernel);
                TSNode ps = kl_ast_function_params(kern);
                int idx = -1;
                for (uint32_t p = 0; p < ts_node_named_child_count(ps); p++) {
                    TSNode nm = kl_ast_declarator_name(
                        ts_node_child_by_field_name(ts_node_named_child(ps, p), "declarator", 10));
                    if (!ts_node_is_null(nm) && kl_node_text_is(ctx->src, nm, k->bound)) idx = (int)p;
                }
                TSNode b = l->block;
                int64_t bv;
                char w2[200];
                if (idx < 0 || idx >= (int)ts_node_named_child_count(l->args) || ts_node_is_null(b) ||
                    !kl_const_eval(ctx->src, l->host_fn, b, false, &bv, w2, sizeof w2)) {
                    st = kl_rule_not_applicable(r->err,
                                                "the grid at line %u is neither a capped ceil-div nor recomputable from "
                                                "the bound %s and a constant 1-D block size",
                                                kl_ast_line(l->call), k->bound);
                } else if (k->coef && (bv <= 0 || k->coef % bv)) {
                    /* the loops step by coef * gridDim.x: ceil(N / coef) blocks cover N, each thread once,
                     * only when a block's threads tile its coef elements (or a whole multiple of them) */
                    st = kl_rule_not_applicable(r->err,
                                                "the index steps blocks by %lld, which is not the block size at line %u",
                                                (long long)k->coef, kl_ast_line(l->call));
                } else {
                    /* a block steps over m blocks of elements (the pair form): ceil(N / (m * B)) blocks */
                    long long m = k->coef ? (long long)(k->coef / bv) : k->mul > 1 ? (long long)k->mul : 1;
                    char *at = kl_node_text(ctx->src, ts_node_named_child(l->args, (uint32_t)idx));
                    char *bt = kl_node_text(ctx->src, b);
                    if (!at || !bt) st = KL_ERR_NOMEM;
                    else if (k->block0 && m == 1)
                        /* block 0 has work of its own (a head, a tail): at least one block when N is 0 */
                        st = kl_edits_addf(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                           "(%s > 0 ? (%s + %s - 1) / %s : 1)", at, at, bt, bt);
                    else if (k->block0)
                        st = kl_edits_addf(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                           "(%s > 0 ? (%s + %lld * %s - 1) / (%lld * %s) : 1)", at, at, m, bt, m, bt);
                    else if (m == 1)
                        st = kl_edits_addf(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                           "(%s + %s - 1) / %s", at, bt, bt);
                    else
                        st = kl_edits_addf(r->out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                           "(%s + %lld * %s - 1) / (%lld * %s)", at, m, bt, m, bt);
                    free(at);
                    free(bt);
                }
            }
        }
        free(gt);
    }
    /* our SM query goes when no cap is left using it */
    for (unsigned q = 0; r->remove && st == KL_OK && q < nq; q++) {
        char *ht = kl_node_text(ctx->src, queried[q]);
        unsigned uses = 0;
        for (char *p = ht ? strstr(ht, "kl_sms") : NULL; p; p = strstr(p + 1, "kl_sms")) uses++;
        free(ht);
        if (uses != 2 + 2 * removed_caps) continue;
        const char *h = strstr(ctx->text + ts_node_start_byte(queried[q]), sm_query);
        if (!h || (uint32_t)(h - ctx->text) > ts_node_end_byte(queried[q])) continue;
        uint32_t a = kl_ast_line_start(ctx->text, (uint32_t)(h - ctx->text));
        uint32_t e = a;
        for (int line = 0; line < 3; line++) e = kl_ast_line_end(ctx->text, ctx->len, e);
        const char *block = ctx->text + a;
        if (strstr(block, "cudaDeviceGetAttribute(&kl_sms") && (uint32_t)(strstr(block, "cudaDeviceGetAttribute(&kl_sms") - ctx->text) < e)
            st = kl_edits_add(r->out, a, e, "");
    }
    if (st == KL_ERR_NOMEM) st = oom(r->err);
cleanup:
    kl_launch_sites_release(&ls);
    return st;
}

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    gs_run *r = user;
    if (strcmp(name, r->site->kernel)) return KL_OK;
    grid_stride__kernel k;
    analyse_kernel(ctx, fn, ax, &k);
    kl_status st = KL_OK;
    if (!k.found || k.present != r->remove ||
        ts_node_start_byte(k.present ? k.stmt : k.decl) != r->site->span.start)
        goto done;
    r->found = true;
    if (k.why[0]) {
        st = kl_rule_not_applicable(r->err, "%s", k.why);
        goto done;
    }
    st = r->remove ? remove_kernel(ctx, &k, r->out) : apply_kernel(ctx, &k, r->out);
    if (st != KL_OK) {
        st = oom(r->err);
        goto done;
    }
    st = launch_edits(ctx, r, &k, name);
done:
    gs_kernel_release(&k);
    return st;
}

static kl_status run_site(const kl_rule_ctx *ctx, const kl_site *site, bool remove, int64_t waves, kl_edits *out,
                          kl_error *err)
{
    gs_run r = {site, remove, waves, out, err, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", run_visit, &r, err);
    if (st == KL_OK && !r.found) return kl_rule_not_applicable(err, "no grid-stride site at %s", site->id);
    return st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run_site(ctx, site, true, 0, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    int64_t w = 0;
    if (!kl_rule_param_int(&kl_rule_grid_stride, params, "waves", &w) || w < 1)
        return kl_error_set(err, KL_ERR_INVALID, "grid-stride: waves must be 4, 8, 16 or 32");
    return run_site(ctx, site, false, w, out, err);
}

const kl_rule kl_rule_grid_stride = {
    "grid-stride", "one element per thread <-> a grid-stride loop, with the grid capped at a few waves of the SMs",
    gs_params, 1, find, remove_site, apply,
};
