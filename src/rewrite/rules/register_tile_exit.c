/* register-tile's split form, its last step (remove; register_tile.h): the one output's tests first.
 *
 * Once the splits have left one output per thread, the kernel's threads share nothing and store one
 * element each, under tests of its row and column (`if (row >= m) continue;`, `if (col + j < n)
 * dst[j] = acc[0][0];`). The element functions that smem-tile's removal wrote for the tiles test the
 * same row and column at every k (`auto As = [&](int k0, int kl_p, int kl_q) -> float { return
 * (block_m0 + kl_q < m) && k0 + kl_p < k ? … : 0.f; }`), a test per load that the naive kernel does not
 * make: it returns first when its output lies outside the result. This step writes the same: the
 * store's tests, read at the top of the kernel (its loops run once, so each loop variable is its
 * share; the locals they read are written out), become early returns, and a conjunct `X + q < B` of an
 * element function goes where every call of the function makes it one of those tests (X + the call's
 * argument equals the tested row or column as a sum of the same terms, B the same bound): a thread that
 * reaches the call has passed that test already.
 *
 * Sound because the thread's one store is its only effect on memory (a thread that returns early
 * stored nothing, and its threads share nothing), the tests read only values that are the same at the
 * top as at the store (loop variables of loops that run once, locals written once, parameters never
 * assigned, constants), and a conjunct is dropped only where the function's call is reached with it
 * true. Applied by register_tile__sp_remove_edits after the splits and the lanes; where any of this
 * does not hold the kernel is left as the splits wrote it. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define EX_MAX 32

typedef struct ex_fact {
    char *lhs, *rhs; /* L < R on the store's path, L written out (canonical sum), R without blanks */
} ex_fact;

typedef struct ex {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    TSNode top;                 /* the statement of the body the early returns go before */
    tt_pair subst[EX_MAX];      /* loop variable → its share, inner local → (its value) */
    char *to[EX_MAX];
    char from[EX_MAX][64];
    unsigned ns;
    char *exits[EX_MAX];        /* the early returns' conditions (written out) */
    bool negate[EX_MAX];        /* `if (!(c)) return;` (the store sits under `if (c)`) */
    unsigned ne;
    ex_fact facts[EX_MAX];
    unsigned nf;
    bool bad;
} ex;

static void ex_release(ex *x)
{
    for (unsigned i = 0; i < x->ns; i++) free(x->to[i]);
    for (unsigned i = 0; i < x->ne; i++) free(x->exits[i]);
    for (unsigned i = 0; i < x->nf; i++) free(x->facts[i].lhs), free(x->facts[i].rhs);
}

/* ---- sums as sets of terms ------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Append the terms of text[0,n) (a sum at the top level: `+` outside parentheses; a term that is all
 * in parentheses is a sum of its own) without blanks, zeros left out. False on a `-` at the top level
 * (or a term too long to keep): not read as a sum. */
static bool sum_terms(const char *t, size_t n, char **out, unsigned *k, unsigned max)
{
    while (n && (*t == ' ' || *t == '\t' || *t == '\n')) t++, n--;
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\n')) n--;
    /* all in parentheses: its inside */
    if (n >= 2 && t[0] == '(' && t[n - 1] == ')') {
        int d = 0;
        size_t i = 0;
        for (; i < n; i++) {
            d += t[i] == '(' ? 1 : t[i] == ')' ? -1 : 0;
            if (d == 0) break;
        }
        if (i == n - 1) return sum_terms(t + 1, n - 2, out, k, max);
    }
    int d = 0;
    size_t from = 0;
    for (size_t i = 0; i <= n; i++) {
        char c = i < n ? t[i] : '+';
        if (c == '(' || c == '[') d++;
        else if (c == ')' || c == ']') d--;
        else if (d == 0 && c == '-' && i > 0) return false;
        else if (d == 0 && c == '+') {
            if (i == from) return false;
            /* a parenthesized term: its terms (when it is a sum) */
            bool whole = false;
            size_t a = from, b = i;
            while (a < b && t[a] == ' ') a++;
            while (b > a && t[b - 1] == ' ') b--;
            if (b - a >= 2 && t[a] == '(' && t[b - 1] == ')') {
                int e = 0;
                size_t j = a;
                for (; j < b; j++) {
                    e += t[j] == '(' ? 1 : t[j] == ')' ? -1 : 0;
                    if (e == 0) break;
                }
                whole = j == b - 1;
            }
            if (whole && (b - a != n)) {
                if (!sum_terms(t + a, b - a, out, k, max)) return false;
            } else {
                if (*k >= max) return false;
                char *s = malloc(b - a + 1);
                if (!s) return false;
                size_t m = 0;
                for (size_t j = a; j < b; j++)
                    if (t[j] != ' ' && t[j] != '\t' && t[j] != '\n') s[m++] = t[j];
                s[m] = 0;
                if (!strcmp(s, "0")) free(s);
                else out[(*k)++] = s;
            }
            from = i + 1;
        }
    }
    return d == 0;
}

/* The terms of a sum, sorted and joined by `+` (new string), or NULL when it is not read as one. */
static char *canon_sum(const char *text)
{
    char *terms[64];
    unsigned k = 0;
    bool ok = sum_terms(text, strlen(text), terms, &k, 64);
    char *r = NULL;
    if (ok) {
        qsort(terms, k, sizeof terms[0], cmp_str);
        kl_strbuf b = KL_STRBUF_INIT;
        for (unsigned i = 0; i < k; i++) kl_strbuf_addf(&b, "%s%s", i ? "+" : "", terms[i]);
        r = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
        kl_strbuf_release(&b);
    }
    for (unsigned i = 0; i < k; i++) free(terms[i]);
    return r;
}

static char *unblank(const char *t)
{
    char *s = malloc(strlen(t) + 1);
    if (!s) return NULL;
    size_t m = 0;
    for (; *t; t++)
        if (*t != ' ' && *t != '\t' && *t != '\n') s[m++] = *t;
    s[m] = 0;
    return s;
}

/* ---- the store's path ------------------------------------------------------------------------ */

/* Text of node n with the substitutions made until none applies (new string; NULL when they do not end). */
static char *written_out(const ex *x, const kl_rule_ctx *ctx, TSNode n)
{
    char *t = tt_subst(ctx->text, ts_node_start_byte(n), ts_node_end_byte(n), x->subst, x->ns);
    for (unsigned round = 0; t && round < 8; round++) {
        bool more = false;
        for (unsigned i = 0; i < x->ns && !more; i++) more = tt_uses(t, 0, (uint32_t)strlen(t), x->from[i]);
        if (!more) return t;
        char *u = tt_subst(t, 0, (uint32_t)strlen(t), x->subst, x->ns);
        free(t);
        t = u;
    }
    free(t);
    return NULL;
}

static bool subst_add(ex *x, const char *from, char *to)
{
    if (!to || x->ns >= EX_MAX || strlen(from) >= sizeof x->from[0]) {
        free(to);
        return false;
    }
    kl_snprintf(x->from[x->ns], sizeof x->from[0], "%s", from);
    x->to[x->ns] = to;
    x->subst[x->ns] = (tt_pair){x->from[x->ns], to};
    x->ns++;
    return true;
}

/* `for (int V = S; V < S + 1; ++V)` (a loop the splits left with one iteration): V → S. */
static bool one_iteration(ex *x, TSNode loop)
{
    const kl_rule_ctx *ctx = x->ctx;
    TSNode d = tt_field(tt_field(loop, "initializer"), "declarator"), cond = tt_field(loop, "condition");
    TSNode v = tt_field(d, "declarator"), s = tt_field(d, "value");
    if (!rt_is(d, "init_declarator") || !rt_is(v, "identifier") || !rt_is(s, "identifier") || !rt_op_is(ctx, cond, "<") ||
        !rt_same_text(ctx, tt_field(cond, "left"), v))
        return false;
    TSNode b = register_tile__rg_strip(tt_field(cond, "right"));
    long long one;
    if (!rt_op_is(ctx, b, "+") || !rt_same_text(ctx, tt_field(b, "left"), s) ||
        !rt_const_eval(ctx, (TSNode){{0}, 0, 0}, tt_field(b, "right"), &one) || one != 1)
        return false;
    char var[64], share[64];
    tt_copy_text(ctx, v, var, sizeof var);
    tt_copy_text(ctx, s, share, sizeof share);
    /* a variable of two such loops on the way: the same share, or not read */
    for (unsigned i = 0; i < x->ns; i++)
        if (!strcmp(x->from[i], var)) return !strcmp(x->to[i], share);
    return subst_add(x, var, kl_strdup(share));
}

/* The comparisons `L < R` a condition (negated: its negation) asserts, one per conjunct. */
static void add_facts(ex *x, TSNode cond, bool negate)
{
    const kl_rule_ctx *ctx = x->ctx;
    if (rt_is(cond, "condition_clause")) cond = tt_field(cond, "value");
    cond = register_tile__rg_strip(cond);
    if (rt_op_is(ctx, cond, negate ? "||" : "&&")) {
        add_facts(x, tt_field(cond, "left"), negate);
        add_facts(x, tt_field(cond, "right"), negate);
        return;
    }
    if (!rt_is(cond, "binary_expression") || x->nf >= EX_MAX) return;
    TSNode o = tt_field(cond, "operator"), l = {{0}, 0, 0}, r = {{0}, 0, 0};
    if (rt_text_is(ctx, o, negate ? ">=" : "<")) l = tt_field(cond, "left"), r = tt_field(cond, "right");
    else if (rt_text_is(ctx, o, negate ? "<=" : ">")) l = tt_field(cond, "right"), r = tt_field(cond, "left");
    if (ts_node_is_null(l)) return;
    char *lt = written_out(x, ctx, l), *rt = written_out(x, ctx, r);
    char *lc = lt ? canon_sum(lt) : NULL, *rc = rt ? unblank(rt) : NULL;
    free(lt);
    free(rt);
    if (lc && rc) x->facts[x->nf++] = (ex_fact){lc, rc};
    else free(lc), free(rc);
}

/* The locals a compound statement declares before `before` (null: all), each written once: name → (value). */
static void inner_locals(ex *x, TSNode block, TSNode before)
{
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(block, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!ts_node_is_null(before) && ts_node_start_byte(st[i]) >= ts_node_start_byte(before)) break;
        if (!rt_is(st[i], "declaration")) continue;
        TSNode ds[8];
        unsigned nd = rt_declarators(st[i], ds, 8);
        for (unsigned j = 0; j < nd && j < 8; j++) {
            char name[64];
            tt_copy_text(x->ctx, kl_ast_declarator_name(ds[j]), name, sizeof name);
            TSNode v = kl_ast_local_init(x->ctx->src, x->f->def, name);
            if (ts_node_is_null(v)) continue;
            char *vt = rt_text(x->ctx, v);
            size_t len = vt ? strlen(vt) + 3 : 0;
            char *p = vt ? malloc(len) : NULL;
            if (p) kl_snprintf(p, len, "(%s)", vt);
            free(vt);
            if (!subst_add(x, name, p)) x->bad = true;
        }
    }
}

/* Is name assigned anywhere in n (=, op=, ++, --)? */
typedef struct assign_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    bool hit;
} assign_scan;

static bool assign_visit(TSNode n, void *user)
{
    assign_scan *a = user;
    TSNode t = {{0}, 0, 0};
    if (rt_is(n, "assignment_expression")) t = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = tt_field(n, "argument");
    t = register_tile__rg_strip(t);
    if (rt_is(t, "identifier") && rt_text_is(a->ctx, t, a->name)) a->hit = true;
    return !a->hit;
}

static bool stable(const ex *x, const char *name);

/* Every identifier the written-out text of n reads (through the substitutions) is the same at the
 * top as at n: not a local of the body declared at or after the top statement, not assigned. */
typedef struct id_scan {
    ex *x;
    bool ok;
    unsigned depth;
} id_scan;

static bool id_visit(TSNode n, void *user);

static void ids_of(id_scan *s, TSNode n)
{
    if (++s->depth > 8) s->ok = false;
    else kl_ast_walk(n, id_visit, s);
    s->depth--;
}

static bool id_visit(TSNode n, void *user)
{
    id_scan *s = user;
    ex *x = s->x;
    const kl_rule_ctx *ctx = x->ctx;
    if (!s->ok) return false;
    if (!rt_is(n, "identifier")) return true;
    char name[64];
    tt_copy_text(ctx, n, name, sizeof name);
    for (unsigned i = 0; i < x->ns; i++) {
        if (strcmp(x->from[i], name)) continue;
        TSNode v = kl_ast_local_init(ctx->src, x->f->def, name);
        if (!ts_node_is_null(v)) ids_of(s, v);
        return false;
    }
    s->ok = stable(x, name);
    return false;
}

/* ---- the element functions --------------------------------------------------------------------- */

/* `auto NAME = [&](P p, …) -> T { return C ? X : Y; };`: its conditional, parameters into ps. */
static TSNode element_function(const kl_rule_ctx *ctx, TSNode st, char *name, size_t size, TSNode *ps, unsigned *np)
{
    TSNode d = tt_field(st, "declarator"), lam = tt_field(d, "value"), none = {{0}, 0, 0};
    if (!rt_is(st, "declaration") || !rt_is(d, "init_declarator") || !rt_is(lam, "lambda_expression")) return none;
    tt_copy_text(ctx, tt_field(d, "declarator"), name, size);
    TSNode params = tt_field(tt_field(lam, "declarator"), "parameters"), body = tt_field(lam, "body"), one[2];
    *np = 0;
    for (uint32_t i = 0; i < tt_child_count(params) && *np < 8; i++) {
        TSNode p = tt_child(params, i);
        if (rt_is(p, "parameter_declaration")) ps[(*np)++] = tt_field(p, "declarator");
    }
    if (tt_stmts(body, one, 2) != 1 || !rt_is(one[0], "return_statement")) return none;
    TSNode c = tt_child(one[0], 0);
    return rt_is(c, "conditional_expression") ? c : none;
}

/* Is the local or name the same wherever the early returns have been passed: a local of the body
 * written once before the top statement, or a name that is no local of the body and is never assigned
 * there (a parameter, a constant)? */
typedef struct decl_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    bool hit;
} decl_scan;

static bool decl_visit(TSNode n, void *user)
{
    decl_scan *d = user;
    if (rt_is(n, "declaration")) {
        TSNode ds[8];
        unsigned nd = rt_declarators(n, ds, 8);
        for (unsigned i = 0; i < nd && i < 8; i++) d->hit |= rt_text_is(d->ctx, kl_ast_declarator_name(ds[i]), d->name);
    }
    return !d->hit;
}

static bool stable(const ex *x, const char *name)
{
    const kl_rule_ctx *ctx = x->ctx;
    TSNode def = kl_ast_local_init(ctx->src, x->f->def, name);
    if (!ts_node_is_null(def)) return ts_node_start_byte(def) < ts_node_start_byte(x->top);
    decl_scan d = {ctx, name, false};
    kl_ast_walk(x->f->body, decl_visit, &d);
    assign_scan a = {ctx, name, false};
    kl_ast_walk(x->f->body, assign_visit, &a);
    return !d.hit && !a.hit;
}

/* The identifiers of n: each a variable of y's loops (x->ns and on) or stable. */
typedef struct stable_scan {
    const ex *y;
    unsigned from;
    bool ok;
} stable_scan;

static bool stable_visit(TSNode n, void *user)
{
    stable_scan *s = user;
    if (!s->ok || !rt_is(n, "identifier")) return s->ok;
    char name[64];
    tt_copy_text(s->y->ctx, n, name, sizeof name);
    for (unsigned i = s->from; i < s->y->ns; i++)
        if (!strcmp(s->y->from[i], name)) return false;
    s->ok = stable(s->y, name);
    return false;
}

/* The identifiers of L in fact_holds: a parameter (pn), a variable of y's loops, or stable. */
typedef struct x_names {
    const ex *y;
    char **pn;
    unsigned np;
    bool ok;
} x_names;

static bool names_visit(TSNode n, void *user)
{
    x_names *s = user;
    if (!s->ok || !rt_is(n, "identifier")) return s->ok;
    char name[64];
    tt_copy_text(s->y->ctx, n, name, sizeof name);
    for (unsigned i = 0; i < s->np; i++)
        if (!strcmp(s->pn[i], name)) return false;
    /* an element function's body sees no loop variable of the call */
    for (unsigned i = 0; i < s->y->ns && !s->np; i++)
        if (!strcmp(s->y->from[i], name)) return false;
    s->ok = stable(s->y, name);
    return false;
}

/* Does `L < R` (a conjunct of a test at node `at`; params[i] of an element function standing for
 * args[i] of its call at `at`) hold wherever the early returns were passed: L, with the variables of the
 * loops around `at` that run once read as their shares, equals the left side of one of the store's tests
 * as a sum of the same terms, R its bound? */
static bool fact_holds(const ex *x, TSNode at, TSNode conj, const TSNode *params, const TSNode *args, unsigned np)
{
    const kl_rule_ctx *ctx = x->ctx;
    ex *y = malloc(sizeof *y);
    if (!y) return false;
    *y = *x;
    y->ns = 0;
    for (TSNode p = tt_parent(at); !ts_node_is_null(p) && !ts_node_eq(p, x->f->body); p = tt_parent(p))
        if (rt_is(p, "for_statement") && y->ns < EX_MAX) (void)one_iteration(y, p);
    TSNode l = tt_field(conj, "left"), r = tt_field(conj, "right");
    /* what L reads: the parameters' arguments, and its other names */
    bool ok = true;
    tt_pair pp[8];
    char *an[8] = {0}, *pn[8] = {0};
    unsigned npp = 0;
    for (unsigned i = 0; i < np && ok; i++) {
        /* only the arguments of the parameters L reads */
        char *name = rt_text(ctx, params[i]);
        bool used = name && tt_uses(ctx->text, ts_node_start_byte(l), ts_node_end_byte(l), name);
        free(name);
        if (!used) continue;
        stable_scan s = {y, 0, true};
        kl_ast_walk(args[i], stable_visit, &s);
        char *w = s.ok ? tt_subst(ctx->text, ts_node_start_byte(args[i]), ts_node_end_byte(args[i]), y->subst, y->ns) : NULL;
        size_t len = w ? strlen(w) + 3 : 0;
        an[npp] = w ? malloc(len) : NULL;
        if (an[npp]) kl_snprintf(an[npp], len, "(%s)", w);
        free(w);
        pn[npp] = rt_text(ctx, params[i]);
        ok = an[npp] && pn[npp];
        pp[npp] = (tt_pair){pn[npp], an[npp]};
        npp++;
    }
    if (ok) {
        /* L's own names: parameters, the loops' variables (no parameters: an inline test), or stable */
        char *all[8] = {0};
        for (unsigned i = 0; i < np; i++) all[i] = rt_text(ctx, params[i]);
        x_names n = {y, all, np, true};
        kl_ast_walk(l, names_visit, &n);
        ok = n.ok;
        for (unsigned i = 0; i < np; i++) {
            ok &= all[i] != NULL;
            free(all[i]);
        }
    }
    char *lt = NULL;
    if (ok) {
        /* parameters first (their arguments already read), then the loops' variables */
        char *u = tt_subst(ctx->text, ts_node_start_byte(l), ts_node_end_byte(l), pp, npp);
        lt = u && !np ? tt_subst(u, 0, (uint32_t)strlen(u), y->subst, y->ns) : u;
        if (lt != u) free(u);
    }
    char *lc = lt ? canon_sum(lt) : NULL, *rt = rt_text(ctx, r), *rc = rt ? unblank(rt) : NULL;
    bool hit = false;
    for (unsigned i = 0; i < x->nf && lc && rc && !hit; i++) hit = !strcmp(x->facts[i].lhs, lc) && !strcmp(x->facts[i].rhs, rc);
    free(lt), free(lc), free(rt), free(rc);
    for (unsigned i = 0; i < npp; i++) free(an[i]), free(pn[i]);
    for (unsigned i = 0; i < y->ns; i++) free(y->to[i]);
    free(y);
    return hit;
}

typedef struct call_scan {
    const ex *x;
    const char *fn;
    TSNode *params;
    unsigned np;
    TSNode conj;      /* the conjunct `L < R` */
    unsigned calls;
    bool all;         /* every call makes it a fact */
} call_scan;

static bool call_visit(TSNode n, void *user)
{
    call_scan *c = user;
    const kl_rule_ctx *ctx = c->x->ctx;
    if (!c->all || !rt_is(n, "call_expression") || !rt_text_is(ctx, tt_field(n, "function"), c->fn)) return c->all;
    c->calls++;
    TSNode a[8];
    unsigned na = tt_stmts(tt_field(n, "arguments"), a, 8);
    c->all = na == c->np && ts_node_start_byte(n) >= ts_node_start_byte(c->x->top) && fact_holds(c->x, n, c->conj, c->params, a, na);
    return false;
}

/* The conjuncts of c (`&&` through parentheses), at most max. */
static unsigned conjuncts(const kl_rule_ctx *ctx, TSNode c, TSNode *out, unsigned n, unsigned max)
{
    c = register_tile__rg_strip(c);
    if (rt_op_is(ctx, c, "&&")) {
        n = conjuncts(ctx, tt_field(c, "left"), out, n, max);
        return conjuncts(ctx, tt_field(c, "right"), out, n, max);
    }
    if (n < max) out[n] = c;
    return n + 1;
}

/* The test of `C ? X : Y` without the conjuncts not kept (all gone: X), as an edit; how many went. */
static unsigned drop_conjuncts(const kl_rule_ctx *ctx, TSNode cond_e, const TSNode *cj, const bool *keep, unsigned nc,
                               kl_edits *out, kl_status *st)
{
    unsigned kept = 0;
    for (unsigned k = 0; k < nc; k++) kept += keep[k];
    if (kept == nc) return 0;
    kl_strbuf b = KL_STRBUF_INIT;
    TSNode whole = tt_field(cond_e, "condition");
    if (!kept) {
        whole = cond_e;
        char *xt = rt_text(ctx, tt_field(cond_e, "consequence"));
        if (xt) kl_strbuf_adds(&b, xt);
        else b.failed = true;
        free(xt);
    } else {
        unsigned w = 0;
        for (unsigned k = 0; k < nc; k++) {
            if (!keep[k]) continue;
            char *t = rt_text(ctx, cj[k]);
            if (!t) b.failed = true;
            else kl_strbuf_addf(&b, "%s%s", w++ ? " && " : "", t);
            free(t);
        }
    }
    char *t = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
    kl_strbuf_release(&b);
    *st = t ? kl_edits_add(out, ts_node_start_byte(whole), ts_node_end_byte(whole), t) : KL_ERR_NOMEM;
    free(t);
    return nc - kept;
}

/* The tests `C ? X : Y` written in the kernel's body after the top statement (not in an element
 * function: those are read through their calls). */
typedef struct inline_scan {
    ex *x;
    kl_edits *out;
    kl_status *st;
    unsigned dropped;
} inline_scan;

static bool inline_visit(TSNode n, void *user)
{
    inline_scan *s = user;
    const kl_rule_ctx *ctx = s->x->ctx;
    if (*s->st != KL_OK || rt_is(n, "lambda_expression")) return false;
    if (!rt_is(n, "conditional_expression") || ts_node_start_byte(n) < ts_node_start_byte(s->x->top)) return true;
    TSNode cj[8];
    unsigned nc = conjuncts(ctx, tt_field(n, "condition"), cj, 0, 8);
    if (nc > 8) return true;
    bool keep[8];
    for (unsigned k = 0; k < nc; k++) keep[k] = !rt_op_is(ctx, cj[k], "<") || !fact_holds(s->x, n, cj[k], NULL, NULL, 0);
    unsigned d = drop_conjuncts(ctx, n, cj, keep, nc, s->out, s->st);
    s->dropped += d;
    return !d; /* a test rewritten: none inside it */
}

/* The conjuncts of tests that every evaluation finds true once the early returns are passed: those of
 * element functions (every call) and those written inline; dropped (edits into out); how many. */
static unsigned drop_tests(ex *x, kl_edits *out, kl_status *st)
{
    const kl_rule_ctx *ctx = x->ctx;
    TSNode st_[MAXSTMT];
    unsigned n = tt_stmts(x->f->body, st_, MAXSTMT), dropped = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT && *st == KL_OK; i++) {
        char name[64];
        TSNode ps[8];
        unsigned np = 0;
        TSNode cond_e = element_function(ctx, st_[i], name, sizeof name, ps, &np);
        if (ts_node_is_null(cond_e)) continue;
        TSNode cj[8];
        unsigned nc = conjuncts(ctx, tt_field(cond_e, "condition"), cj, 0, 8);
        if (nc > 8) continue;
        bool keep[8];
        for (unsigned k = 0; k < nc; k++) {
            call_scan c = {x, name, ps, np, cj[k], 0, true};
            if (rt_op_is(ctx, cj[k], "<")) kl_ast_walk(x->f->body, call_visit, &c);
            keep[k] = !rt_op_is(ctx, cj[k], "<") || !(c.all && c.calls);
        }
        dropped += drop_conjuncts(ctx, cond_e, cj, keep, nc, out, st);
    }
    inline_scan is = {x, out, st, 0};
    if (*st == KL_OK) kl_ast_walk(x->f->body, inline_visit, &is);
    return dropped + is.dropped;
}

/* ---- the step ------------------------------------------------------------------------------- */

typedef struct store_scan {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    const char *acc;
    TSNode store;     /* the expression statement of `M[…] = acc[…];` */
    unsigned writes;  /* writes to memory, and other effects (a call that has some, asm) */
    unsigned depth;   /* helpers entered */
} store_scan;

/* Calls with an effect besides their value: atomics, store intrinsics, output, memory functions. */
static bool effect_call(const char *name)
{
    static const char *const named[] = {"printf", "memcpy", "memset", "malloc", "free", "assert", "__trap", "__brkpt",
                                        "__nanosleep"};
    if (!strncmp(name, "atomic", 6) || !strncmp(name, "__st", 4)) return true;
    for (unsigned i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(name, named[i])) return true;
    return false;
}

static bool store_visit(TSNode n, void *user);

/* A call: an effect when the callee has one, or is a function of the file whose body writes memory
 * (helpers entered up to 4 deep; deeper counts as an effect). */
static void call_effects(store_scan *s, TSNode call)
{
    char name[128];
    if (!rt_callee_name(s->ctx, call, name, sizeof name) || effect_call(name)) {
        s->writes++; /* a callee not named (a pointer to a function) may do anything */
        return;
    }
    rt_func fs[64];
    unsigned nf = rt_functions(s->ctx, fs, 64);
    if (nf > 64) s->writes++;
    /* every function of that name (overloads: whichever the call reaches) */
    for (unsigned i = 0; i < nf && i < 64; i++) {
        const rt_func *h = &fs[i];
        if (strcmp(h->name, name) || ts_node_is_null(h->body) || ts_node_eq(h->def, s->f->def)) continue;
        if (s->depth >= 4) {
            s->writes++;
            return;
        }
        store_scan in = {s->ctx, h, "", {{0}, 0, 0}, 0, s->depth + 1};
        kl_ast_walk(h->body, store_visit, &in);
        s->writes += in.writes;
    }
}

/* Is name declared in the body as a local array (registers, not memory)? */
static bool local_array(const kl_rule_ctx *ctx, TSNode body, const char *name)
{
    uint32_t ms[64], me[64];
    unsigned n = tt_find(ctx->text, ts_node_start_byte(body), ts_node_end_byte(body), name, ms, me, 64);
    for (unsigned i = 0; i < n && i < 64; i++) {
        TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[i], me[i]);
        if (rt_is(tt_parent(id), "array_declarator") && ts_node_eq(tt_field(tt_parent(id), "declarator"), id)) return true;
    }
    return false;
}

static bool store_visit(TSNode n, void *user)
{
    store_scan *s = user;
    TSNode t = {{0}, 0, 0};
    if (rt_is(n, "call_expression")) call_effects(s, n);
    if (strstr(ts_node_type(n), "asm")) s->writes++;
    if (rt_is(n, "assignment_expression")) t = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = tt_field(n, "argument");
    t = register_tile__rg_strip(t);
    if (ts_node_is_null(t)) return true;
    TSNode base = t;
    while (rt_is(base, "subscript_expression")) base = tt_field(base, "argument");
    /* memory: through a pointer (`*p`, `p->f`, `p[i]`); registers: a local scalar or array */
    bool memory = rt_is(t, "pointer_expression") || rt_is(t, "field_expression") || rt_is(t, "subscript_expression");
    if (rt_is(t, "subscript_expression") && rt_is(base, "identifier")) {
        char name[64];
        tt_copy_text(s->ctx, base, name, sizeof name);
        memory = !local_array(s->ctx, s->f->body, name);
    }
    if (!memory) return true;
    s->writes++;
    TSNode v = register_tile__rg_strip(tt_field(n, "right")), vb = v;
    while (rt_is(vb, "subscript_expression")) vb = tt_field(vb, "argument");
    if (rt_is(n, "assignment_expression") && rt_text_is(s->ctx, tt_field(n, "operator"), "=") && rt_is(v, "subscript_expression") &&
        rt_text_is(s->ctx, vb, s->acc) && rt_is(tt_parent(n), "expression_statement"))
        s->store = tt_parent(n);
    return true;
}

/* Does a statement hold work: a loop or a function (lambda)? */
typedef struct work_scan {
    bool hit;
} work_scan;

static bool work_visit(TSNode n, void *user)
{
    work_scan *w = user;
    if (rt_is(n, "for_statement") || rt_is(n, "while_statement") || rt_is(n, "do_statement") || rt_is(n, "lambda_expression"))
        w->hit = true;
    return !w->hit;
}

kl_status register_tile__sp_exit_edits(const kl_rule_ctx *ctx, const rt_func *f, const char *acc, kl_edits *out)
{
    store_scan ss = {ctx, f, acc, {{0}, 0, 0}, 0, 0};
    kl_ast_walk(f->body, store_visit, &ss);
    if (ss.writes != 1 || ts_node_is_null(ss.store)) return KL_ERR_NOT_APPLICABLE;
    ex *x = calloc(1, sizeof *x);
    if (!x) return KL_ERR_NOMEM;
    x->ctx = ctx;
    x->f = f;
    kl_status st = KL_ERR_NOT_APPLICABLE;
    /* the top statement: the first of the body that holds a loop, a function or the accumulator */
    TSNode body_st[MAXSTMT];
    unsigned nb = tt_stmts(f->body, body_st, MAXSTMT);
    for (unsigned i = 0; i < nb && i < MAXSTMT && ts_node_is_null(x->top); i++) {
        work_scan w = {false};
        kl_ast_walk(body_st[i], work_visit, &w);
        if (w.hit || tt_uses(ctx->text, ts_node_start_byte(body_st[i]), ts_node_end_byte(body_st[i]), acc)) x->top = body_st[i];
    }
    if (ts_node_is_null(x->top) || ts_node_start_byte(ss.store) < ts_node_end_byte(x->top)) goto done;
    /* up from the store: loops of one iteration, the tests it sits under or that skip it */
    TSNode at = ss.store;
    TSNode path[32];
    unsigned np = 0;
    for (TSNode p = tt_parent(at); !ts_node_eq(p, f->body); at = p, p = tt_parent(p)) {
        if (ts_node_is_null(p) || np >= 32) goto done;
        if (rt_is(p, "for_statement")) {
            if (!ts_node_eq(at, tt_field(p, "body")) || !one_iteration(x, p)) goto done;
        } else if (rt_is(p, "if_statement")) {
            if (!ts_node_eq(at, tt_field(p, "consequence"))) goto done;
        } else if (rt_is(p, "compound_statement")) {
            inner_locals(x, p, at);
        } else if (!rt_is(p, "expression_statement")) {
            goto done;
        }
        path[np++] = p;
    }
    /* body-level locals declared at or after the top statement, before the store's statement */
    inner_locals(x, f->body, at);
    /* those declared before the top are read by name there */
    unsigned kept = 0;
    for (unsigned i = 0; i < x->ns; i++) {
        TSNode v = kl_ast_local_init(ctx->src, f->def, x->from[i]);
        if (!ts_node_is_null(v) && ts_node_start_byte(v) < ts_node_start_byte(x->top)) {
            free(x->to[i]);
            continue;
        }
        memmove(x->from[kept], x->from[i], sizeof x->from[0]);
        x->to[kept] = x->to[i];
        x->subst[kept] = (tt_pair){x->from[kept], x->to[kept]};
        kept++;
    }
    x->ns = kept;
    if (x->bad) goto done;
    /* the tests, outermost first */
    for (unsigned k = np; k-- > 0;) {
        TSNode p = path[k], ch = k ? path[k - 1] : ss.store;
        TSNode cond = {{0}, 0, 0};
        bool neg = false;
        if (rt_is(p, "if_statement")) {
            cond = tt_field(p, "condition");
            neg = true;
            add_facts(x, cond, false);
        } else if (rt_is(p, "compound_statement")) {
            TSNode st_[MAXSTMT];
            unsigned n = tt_stmts(p, st_, MAXSTMT);
            for (unsigned i = 0; i < n && i < MAXSTMT && ts_node_start_byte(st_[i]) < ts_node_start_byte(ch); i++) {
                TSNode c;
                if (!register_tile__rg_skip_if(ctx, st_[i], &c) || x->ne >= EX_MAX) continue;
                id_scan s = {x, true, 0};
                ids_of(&s, c);
                char *w = s.ok ? written_out(x, ctx, rt_is(c, "condition_clause") ? tt_field(c, "value") : c) : NULL;
                if (!w) continue;
                x->exits[x->ne] = w, x->negate[x->ne++] = false;
                add_facts(x, c, true);
            }
        }
        if (ts_node_is_null(cond) || x->ne >= EX_MAX) continue;
        id_scan s = {x, true, 0};
        ids_of(&s, cond);
        char *w = s.ok ? written_out(x, ctx, rt_is(cond, "condition_clause") ? tt_field(cond, "value") : cond) : NULL;
        if (!w) continue;
        x->exits[x->ne] = w, x->negate[x->ne++] = neg;
    }
    if (!x->ne || !x->nf) goto done;
    kl_edits drops = {0};
    kl_status ds = KL_OK;
    unsigned dropped = drop_tests(x, &drops, &ds);
    if (ds != KL_OK || !dropped) {
        kl_edits_release(&drops);
        st = ds == KL_OK ? KL_ERR_NOT_APPLICABLE : ds;
        goto done;
    }
    /* the early returns, before the comment lines right above the top statement */
    uint32_t ins = rt_line_start(ctx, ts_node_start_byte(x->top));
    TSNode below = x->top;
    for (TSNode pv = ts_node_prev_named_sibling(below);
         rt_is(pv, "comment") && ts_node_end_point(pv).row + 1 == ts_node_start_point(below).row;
         below = pv, pv = ts_node_prev_named_sibling(pv))
        ins = rt_line_start(ctx, ts_node_start_byte(pv));
    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(x->top), ind, sizeof ind);
    kl_strbuf b = KL_STRBUF_INIT;
    kl_strbuf_addf(&b,
                   "%s// register-tile: one output per thread: a thread whose output lies outside the result returns here, and "
                   "its loads test its row and column no more\n",
                   ind);
    for (unsigned i = 0; i < x->ne; i++)
        kl_strbuf_addf(&b, x->negate[i] ? "%sif (!(%s)) return;\n" : "%sif (%s) return;\n", ind, x->exits[i]);
    kl_strbuf_addc(&b, '\n');
    char *t = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
    kl_strbuf_release(&b);
    st = t ? kl_edits_add(out, ins, ins, t) : KL_ERR_NOMEM;
    free(t);
    for (unsigned i = 0; i < drops.count && st == KL_OK; i++)
        st = kl_edits_add(out, drops.items[i].start, drops.items[i].end, drops.items[i].text);
    kl_edits_release(&drops);
done:
    ex_release(x);
    free(x);
    return st;
}
