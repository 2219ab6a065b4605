/* smem-tile: tiles filled through register staging in lambdas (corpus/matmul's expert, after
 * double-buffer), removed (smem_tile.h).
 *
 *     auto fetch = [&](int k0) { for (i …) { locals; R[i].x = g ? P[…] : 0; … } };   global → registers
 *     auto stash = [&](int buf) { for (i …) { locals; T[a + c][b] = R[i].x; … } };  registers → tiles
 *     for (…) { fetch(ARG); stash(…); __syncthreads(); compute reading T[e1][e2]; __syncthreads(); }
 *
 * Each tile element the stash writes is the value the fetch computed for that register: with the
 * stash's subscripts solved for the fetch's locals they name (`a = kl_p - c`, `b = kl_q`), the value
 * is a function of the tile coordinates alone, `T(k0, kl_p, kl_q)`. Remove writes that function as a
 * lambda of the tile's name, reads the compute's elements through it (`T(ARG, e1, e2)`; a float4 read
 * of four elements becomes make_float4 of four calls), and deletes the tiles, the registers, both
 * lambdas, their calls and (when no shared memory is left) the loop's barriers.
 *
 * Sound when: every write of a tile gives the same function (checked by evaluating the functions of
 * all writes at 64 random points: integer values for every name, subscripts as reads of a memory
 * whose contents hash the address); the function depends on no thread index, no local of the
 * lambdas and no local that depends on a thread index; nothing it reads is assigned in the loop
 * between the fetch and the compute. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/smem_tile.h"
#include "rewrite/rules/tile_text.h"

#define LMAX 32   /* locals in scope of one write */
#define WMAX 48   /* tile element writes */

typedef struct lam_local {
    char name[64];
    char *def;    /* its definition, fully inlined (owned) */
} lam_local;

typedef struct lam_write {
    int tile;
    char *p, *q;             /* the subscripts' atoms, inlined (owned) */
    long long cp, cq;        /* their constant offsets */
    TSNode node;             /* the statement */
    TSNode reg;              /* R[i] (the register element), component comp (0: none) */
    char comp;
    char *formula;           /* the element's value as a function of kl_p, kl_q (owned) */
} lam_write;

/* ---- a small evaluator: is every write's function the same? ------------------------------------- */

typedef struct ev {
    const char *s;
    unsigned seed;
    long long p, q;
    bool bad;
} ev;

static unsigned long long ev_hash(unsigned long long x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static void ev_ws(ev *e)
{
    while (*e->s == ' ' || *e->s == '\n' || *e->s == '\t' || *e->s == '\r') e->s++;
}

static bool ev_eat(ev *e, const char *op)
{
    ev_ws(e);
    size_t n = strlen(op);
    if (strncmp(e->s, op, n)) return false;
    /* `<` is not `<=` or `<<`, `&` not `&&`, `|` not `||` */
    if (n == 1 && (op[0] == '<' || op[0] == '>') && (e->s[1] == '=' || e->s[1] == op[0])) return false;
    if (n == 1 && (op[0] == '&' || op[0] == '|') && e->s[1] == op[0]) return false;
    if (n == 1 && (op[0] == '=' || op[0] == '!') && e->s[1] == '=') return false;
    e->s += n;
    return true;
}

static long long ev_cond(ev *e);

static long long ev_primary(ev *e)
{
    ev_ws(e);
    if (*e->s == '(') {
        /* a cast to an integer type is the identity here */
        static const char *const types[] = {"(size_t)", "(int)", "(long long)", "(long)", "(unsigned)", "(unsigned int)",
                                            "(int64_t)", "(uint32_t)", "(int32_t)", "(ptrdiff_t)"};
        for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++)
            if (!strncmp(e->s, types[i], strlen(types[i]))) {
                e->s += strlen(types[i]);
                return ev_primary(e);
            }
        e->s++;
        long long v = ev_cond(e);
        if (!ev_eat(e, ")")) e->bad = true;
        return v;
    }
    if (*e->s >= '0' && *e->s <= '9') {
        char *end;
        long long v = strtoll(e->s, &end, 0);
        if (*end == '.' || *end == 'e' || *end == 'f' || *end == 'F') {
            double d = strtod(e->s, &end);
            v = (long long)d;
            if (*end == 'f' || *end == 'F') end++;
        }
        while (*end == 'u' || *end == 'U' || *end == 'l' || *end == 'L') end++;
        e->s = end;
        return v;
    }
    if (kl_ident_char(*e->s)) {
        const char *a = e->s;
        while (kl_ident_char(*e->s)) e->s++;
        size_t n = (size_t)(e->s - a);
        ev_ws(e);
        if (*e->s == '(' ) {
            e->bad = true; /* a call: not modelled */
            return 0;
        }
        if (n == 4 && !strncmp(a, "kl_p", 4)) return e->p;
        if (n == 4 && !strncmp(a, "kl_q", 4)) return e->q;
        unsigned long long h = e->seed;
        for (size_t i = 0; i < n; i++) h = ev_hash(h ^ (unsigned char)a[i]);
        return (long long)(h % 61) + 1;
    }
    e->bad = true;
    return 0;
}

static long long ev_postfix(ev *e)
{
    long long v = ev_primary(e);
    while (!e->bad && ev_eat(e, "[")) {
        long long i = ev_cond(e);
        if (!ev_eat(e, "]")) e->bad = true;
        v = (long long)(ev_hash((unsigned long long)(v + i) * 2654435761ULL + e->seed) % 1000003);
    }
    return v;
}

static long long ev_unary(ev *e)
{
    if (ev_eat(e, "-")) return -ev_unary(e);
    if (ev_eat(e, "+")) return ev_unary(e);
    if (ev_eat(e, "!")) return !ev_unary(e);
    return ev_postfix(e);
}

static long long ev_mul(ev *e)
{
    long long v = ev_unary(e);
    for (;;) {
        if (ev_eat(e, "*")) v *= ev_unary(e);
        else if (ev_eat(e, "/") || ev_eat(e, "%")) {
            bool div = e->s[-1] == '/';
            long long d = ev_unary(e);
            if (!d) {
                e->bad = true;
                return 0;
            }
            v = div ? v / d : v % d;
        } else return v;
    }
}

static long long ev_add(ev *e)
{
    long long v = ev_mul(e);
    for (;;) {
        if (ev_eat(e, "+")) v += ev_mul(e);
        else if (ev_eat(e, "-")) v -= ev_mul(e);
        else return v;
    }
}

static long long ev_rel(ev *e)
{
    long long v = ev_add(e);
    for (;;) {
        if (ev_eat(e, "<=")) v = v <= ev_add(e);
        else if (ev_eat(e, ">=")) v = v >= ev_add(e);
        else if (ev_eat(e, "<")) v = v < ev_add(e);
        else if (ev_eat(e, ">")) v = v > ev_add(e);
        else if (ev_eat(e, "==")) v = v == ev_add(e);
        else if (ev_eat(e, "!=")) v = v != ev_add(e);
        else return v;
    }
}

static long long ev_and(ev *e)
{
    long long v = ev_rel(e);
    while (ev_eat(e, "&&")) {
        long long w = ev_rel(e);
        v = v && w;
    }
    return v;
}

static long long ev_or(ev *e)
{
    long long v = ev_and(e);
    while (ev_eat(e, "||")) {
        long long w = ev_and(e);
        v = v || w;
    }
    return v;
}

static long long ev_cond(ev *e)
{
    long long c = ev_or(e);
    if (!ev_eat(e, "?")) return c;
    long long a = ev_cond(e);
    if (!ev_eat(e, ":")) e->bad = true;
    long long b = ev_cond(e);
    return c ? a : b;
}

/* The value of expr at (p, q) with the names drawn from seed; false when it is not modelled. */
static bool ev_run(const char *expr, unsigned seed, long long p, long long q, long long *v)
{
    ev e = {expr, seed, p, q, false};
    *v = ev_cond(&e);
    ev_ws(&e);
    return !e.bad && !*e.s;
}

/* ---- text helpers --------------------------------------------------------------------------------- */

/* text with blanks removed and outer parentheses stripped (new string). */
static char *squeeze(const char *t)
{
    char *o = kl_str_unblank(t);
    if (!o) return NULL;
    for (;;) {
        size_t m = strlen(o);
        if (m < 2 || o[0] != '(' || o[m - 1] != ')') break;
        int depth = 0;
        bool whole = true;
        for (size_t i = 0; i < m; i++) {
            depth += o[i] == '(' ? 1 : o[i] == ')' ? -1 : 0;
            if (!depth && i + 1 < m) whole = false;
        }
        if (!whole) break;
        memmove(o, o + 1, m - 2);
        o[m - 2] = 0;
    }
    return o;
}

/* t with every local replaced by `(definition)` until none is left (at most 12 rounds); the
 * locals of skip[] (may be NULL) are replaced by their `to` instead. New string. */
static char *inline_locals(const char *t, const lam_local *ls, unsigned nl, const tt_pair *extra, unsigned ne)
{
    char *cur = strdup(t);
    for (unsigned round = 0; cur && round < 12; round++) {
        tt_pair ps[LMAX + 4];
        char *defs[LMAX];
        unsigned np = 0;
        for (unsigned i = 0; i < ne && np < LMAX + 4; i++) ps[np++] = extra[i];
        bool any = false;
        for (unsigned i = 0; i < nl; i++) {
            defs[i] = NULL;
            bool skipped = false;
            for (unsigned j = 0; j < ne; j++) skipped |= !strcmp(extra[j].from, ls[i].name);
            if (skipped) continue;
            any |= tt_uses(cur, 0, (uint32_t)strlen(cur), ls[i].name);
            size_t n = strlen(ls[i].def) + 3;
            defs[i] = malloc(n);
            if (!defs[i]) continue;
            snprintf(defs[i], n, "(%s)", ls[i].def);
            if (np < LMAX + 4) ps[np++] = (tt_pair){ls[i].name, defs[i]};
        }
        for (unsigned i = 0; i < ne; i++) any |= tt_uses(cur, 0, (uint32_t)strlen(cur), extra[i].from);
        char *next = any ? tt_subst(cur, 0, (uint32_t)strlen(cur), ps, np) : NULL;
        for (unsigned i = 0; i < nl; i++) free(defs[i]);
        if (!any) return cur;
        free(cur);
        cur = next;
    }
    return cur;
}

/* The locals declared by declaration d (each `name = value`), appended with their values as
 * written (inline_locals expands them through the locals before them). */
static void add_locals(const kl_rule_ctx *ctx, TSNode d, lam_local *ls, unsigned *nl)
{
    TSNode ds[16];
    unsigned n = rt_declarators(d, ds, 16);
    for (unsigned i = 0; i < n && i < 16 && *nl < LMAX; i++) {
        if (!rt_is(ds[i], "init_declarator")) continue;
        TSNode id = kl_ast_declarator_name(ds[i]);
        if (!rt_is(id, "identifier")) continue;
        char *v = rt_text(ctx, tt_field(ds[i], "value"));
        if (!v) continue;
        tt_copy_text(ctx, id, ls[*nl].name, sizeof ls[*nl].name);
        ls[*nl].def = v;
        (*nl)++;
    }
}

static void free_locals(lam_local *ls, unsigned n)
{
    for (unsigned i = 0; i < n; i++) free(ls[i].def);
}

/* The body of a function-like macro `#define name(…) body` of the file, or NULL. */
static const char *macro_body(const kl_rule_ctx *ctx, const char *name, size_t *len)
{
    char pat[96];
    kl_snprintf(pat, sizeof pat, "#define %s(", name);
    const char *at = strstr(ctx->text, pat);
    if (!at) return NULL;
    const char *close = strchr(at + strlen(pat), ')');
    if (!close) return NULL;
    const char *end = strchr(close, '\n');
    if (!end) end = close + strlen(close);
    *len = (size_t)(end - close - 1);
    return close + 1;
}

/* Is call `NAME(x, …)` a float4 access macro (its body a reinterpret_cast to float4)? */
static bool float4_macro(const kl_rule_ctx *ctx, TSNode call)
{
    char name[64];
    if (!rt_is(call, "call_expression") || !rt_is(tt_field(call, "function"), "identifier")) return false;
    tt_copy_text(ctx, tt_field(call, "function"), name, sizeof name);
    size_t n;
    const char *b = macro_body(ctx, name, &n);
    if (!b) return false;
    char *t = strndup(b, n);
    if (!t) return false;
    char *sq = squeeze(t);
    free(t);
    bool is = sq && strstr(sq, "reinterpret_cast<") && strstr(sq, "float4*>");
    free(sq);
    return is;
}

/* The float4 access around a tile element e (`T[a][b]`): the node to replace (the macro call,
 * or `*reinterpret_cast<…float4*>(&(T[a][b]))`), null when e is a scalar access. */
static TSNode float4_around(const kl_rule_ctx *ctx, TSNode e)
{
    TSNode p = tt_parent(e);
    while (rt_is(p, "parenthesized_expression")) p = tt_parent(p);
    if (rt_is(p, "argument_list")) {
        TSNode call = tt_parent(p);
        if (float4_macro(ctx, call)) return call;
        return (TSNode){0};
    }
    if (!rt_is(p, "pointer_expression") || !rt_text_is(ctx, tt_field(p, "operator"), "&")) return (TSNode){0};
    TSNode q = tt_parent(p);
    while (rt_is(q, "parenthesized_expression")) q = tt_parent(q);
    if (!rt_is(q, "argument_list")) return (TSNode){0};
    TSNode call = tt_parent(q);
    char *ct = rt_text(ctx, tt_field(call, "function"));
    bool cast = ct && strstr(ct, "reinterpret_cast") && strstr(ct, "float4");
    free(ct);
    if (!cast) return (TSNode){0};
    TSNode star = tt_parent(call);
    while (rt_is(star, "parenthesized_expression")) star = tt_parent(star);
    if (!rt_is(star, "pointer_expression") || !rt_text_is(ctx, tt_field(star, "operator"), "*")) return (TSNode){0};
    return star;
}

/* ---- the analysis ---------------------------------------------------------------------------------- */

typedef struct lam {
    const kl_rule_ctx *ctx;
    TSNode fn, body;
    TSNode tdecl[4];
    char tname[4][64], telem[4][64];
    unsigned nt;
    TSNode fetch, stash;          /* the lambdas' declarations */
    char fname[64], sname[64];
    char kparam[128], kname[64];  /* fetch's parameter ("int k0") and its name; empty without one */
    TSNode loop, fcall, scall;
    char *karg;                   /* the fetch call's argument (owned; NULL without one) */
    char regs[8][64];
    unsigned nregs;
    lam_write w[WMAX];
    unsigned nw;
    char *formula[4];             /* per tile (borrowed from a write) */
    char why[480];
} lam;

static void lam_release(lam *L)
{
    for (unsigned i = 0; i < L->nw; i++) free(L->w[i].p), free(L->w[i].q), free(L->w[i].formula);
    free(L->karg);
    memset(L->w, 0, sizeof L->w);
    L->nw = 0;
    L->karg = NULL;
}

static int tile_of(const lam *L, const kl_rule_ctx *ctx, TSNode n)
{
    for (unsigned i = 0; i < L->nt; i++)
        if (rt_text_is(ctx, n, L->tname[i])) return (int)i;
    return -1;
}

/* `auto name = [...](...) {...};`: the lambda expression, null when s is not one */
static TSNode lambda_of(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size)
{
    TSNode d = tt_field(s, "declarator");
    if (!rt_is(s, "declaration") || !rt_is(d, "init_declarator") || !rt_is(tt_field(d, "value"), "lambda_expression"))
        return (TSNode){0};
    tt_copy_text(ctx, tt_field(d, "declarator"), name, size);
    return tt_field(d, "value");
}

/* The subscript chain T[a][b] of a tile: its tile and subscripts. */
static int tile_elem(const lam *L, TSNode e, TSNode *a, TSNode *b)
{
    e = smem_tile__strip(e);
    if (!rt_is(e, "subscript_expression")) return -1;
    TSNode in = tt_field(e, "argument");
    if (!rt_is(in, "subscript_expression")) return -1;
    TSNode base = tt_field(in, "argument");
    int t = tile_of(L, L->ctx, base);
    if (t < 0) return -1;
    TSNode ia = tt_field(in, "index"), ib = tt_field(e, "index");
    if (ts_node_is_null(ia)) ia = tt_child(tt_field(in, "indices"), 0);
    if (ts_node_is_null(ib)) ib = tt_child(tt_field(e, "indices"), 0);
    *a = ia, *b = ib;
    return t;
}

/* A subscript as atom + constant. */
static char *atom_of(const kl_rule_ctx *ctx, TSNode n, const lam_local *ls, unsigned nl, long long *c)
{
    n = smem_tile__strip(n);
    *c = 0;
    if (rt_is(n, "binary_expression") && rt_is(smem_tile__strip(tt_field(n, "right")), "number_literal")) {
        char op[4], num[32];
        tt_copy_text(ctx, tt_field(n, "operator"), op, sizeof op);
        tt_copy_text(ctx, smem_tile__strip(tt_field(n, "right")), num, sizeof num);
        char *end;
        long long v = strtoll(num, &end, 0);
        if (!*end && (!strcmp(op, "+") || !strcmp(op, "-"))) {
            *c = !strcmp(op, "+") ? v : -v;
            n = smem_tile__strip(tt_field(n, "left"));
        }
    }
    char *t = rt_text(ctx, n);
    if (!t) return NULL;
    char *in = inline_locals(t, ls, nl, NULL, 0);
    free(t);
    if (!in) return NULL;
    char *sq = squeeze(in);
    free(in);
    return sq;
}

/* Walk a lambda's body collecting, per statement of interest, the locals in scope. cb returns
 * false to stop. */
typedef bool (*lam_cb)(lam *L, TSNode s, const lam_local *ls, unsigned nl, void *user);

static bool walk_scope(lam *L, TSNode blk, lam_local *ls, unsigned nl, lam_cb cb, void *user, char *loopvar, size_t lvsize)
{
    const kl_rule_ctx *ctx = L->ctx;
    TSNode st[64];
    unsigned n = rt_is(blk, "compound_statement") ? tt_stmts(blk, st, 64) : (st[0] = blk, 1u);
    unsigned base = nl;
    bool ok = true;
    for (unsigned i = 0; i < n && i < 64 && ok; i++) {
        TSNode s = st[i];
        if (rt_is(s, "declaration")) {
            add_locals(ctx, s, ls, &nl);
        } else if (rt_is(s, "for_statement")) {
            TSNode init = tt_field(s, "initializer");
            TSNode id = tt_field(tt_field(init, "declarator"), "declarator");
            if (rt_is(id, "identifier") && loopvar) tt_copy_text(ctx, id, loopvar, lvsize);
            ok = walk_scope(L, tt_field(s, "body"), ls, nl, cb, user, loopvar, lvsize);
        } else if (rt_is(s, "compound_statement")) {
            ok = walk_scope(L, s, ls, nl, cb, user, loopvar, lvsize);
        } else {
            ok = cb(L, s, ls, nl, user);
        }
    }
    free_locals(ls + base, nl - base);
    return ok;
}

/* the fetch: find the write of register reg[i] (component comp) and build the write's formula */
typedef struct fetch_find {
    lam_write *w;
    char reg[64];
    char idx[64];   /* the fetch's subscript of the register */
    bool found;
} fetch_find;

/* A vector component `E.c`: E into *n, and the component's letter ('?' for a longer field name); 0
 * when *n is not a member access. */
static char component_of(const kl_rule_ctx *ctx, TSNode *n)
{
    if (!rt_is(*n, "field_expression")) return 0;
    char f[16];
    tt_copy_text(ctx, tt_field(*n, "field"), f, sizeof f);
    *n = tt_field(*n, "argument");
    return f[1] ? '?' : f[0];
}

static bool fetch_cb(lam *L, TSNode s, const lam_local *ls, unsigned nl, void *user)
{
    fetch_find *ff = user;
    const kl_rule_ctx *ctx = L->ctx;
    lam_write *w = ff->w;
    if (rt_is(s, "if_statement")) {
        if (tt_uses(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), ff->reg)) {
            kl_snprintf(L->why, sizeof L->why, "%s writes %s under a condition at line %u (remove vectorize first)", L->fname,
                        ff->reg, ts_node_start_point(s).row + 1);
            return false;
        }
        return true;
    }
    TSNode as = tt_child(s, 0);
    if (!rt_is(s, "expression_statement") || !rt_is(as, "assignment_expression")) return true;
    TSNode l = tt_field(as, "left");
    char comp = component_of(ctx, &l);
    if (!rt_is(l, "subscript_expression") || !rt_text_is(ctx, tt_field(l, "argument"), ff->reg) || comp != w->comp) return true;
    if (ff->found) {
        kl_snprintf(L->why, sizeof L->why, "%s writes %s twice", L->fname, ff->reg);
        return false;
    }
    ff->found = true;
    tt_copy_text(ctx, tt_field(l, "index"), ff->idx, sizeof ff->idx);
    /* the fetch's locals that the stash's subscripts name: a → (kl_p - cp), b → (kl_q - cq) */
    char rp[96], rq[96];
    if (w->cp) kl_snprintf(rp, sizeof rp, "(kl_p - %lld)", w->cp);
    else kl_snprintf(rp, sizeof rp, "kl_p");
    if (w->cq) kl_snprintf(rq, sizeof rq, "(kl_q - %lld)", w->cq);
    else kl_snprintf(rq, sizeof rq, "kl_q");
    tt_pair ex[8];
    unsigned ne = 0;
    bool hp = false, hq = false;
    for (unsigned i = 0; i < nl && ne < 8; i++) {
        char *in = inline_locals(ls[i].def, ls, i, NULL, 0);
        char *sq = in ? squeeze(in) : NULL;
        free(in);
        if (!sq) continue;
        if (!strcmp(sq, w->p)) ex[ne++] = (tt_pair){ls[i].name, rp}, hp = true;
        else if (!strcmp(sq, w->q)) ex[ne++] = (tt_pair){ls[i].name, rq}, hq = true;
        free(sq);
    }
    char *v = rt_text(ctx, tt_field(as, "right"));
    char *f = v ? inline_locals(v, ls, nl, ex, ne) : NULL;
    free(v);
    if (!f) return false;
    /* the atoms written out in the value itself (no local of the fetch names them) */
    (void)hp, (void)hq;
    {
        tt_pair ap[2] = {{w->p, rp}, {w->q, rq}};
        char *g = tt_subst(f, 0, (uint32_t)strlen(f), ap, 2);
        free(f);
        f = g;
        if (!f) return false;
    }
    w->formula = f;
    return true;
}

/* the stash: each statement writing a tile */
static bool stash_cb(lam *L, TSNode s, const lam_local *ls, unsigned nl, void *user)
{
    (void)user;
    const kl_rule_ctx *ctx = L->ctx;
    unsigned line = ts_node_start_point(s).row + 1;
    bool writes = false;
    for (unsigned t = 0; t < L->nt; t++) writes |= tt_uses(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), L->tname[t]);
    if (!writes) return true;
    TSNode e = smem_tile__strip(tt_child(s, 0));
    TSNode target = {0}, value = {0};
    bool vec = false;
    if (rt_is(s, "expression_statement") && rt_is(e, "call_expression") && float4_macro(ctx, e)) {
        TSNode args = tt_field(e, "arguments");
        target = ts_node_named_child(args, 0), value = ts_node_named_child(args, 1);
        vec = true;
    } else if (rt_is(s, "expression_statement") && rt_is(e, "assignment_expression") &&
               rt_text_is(ctx, tt_field(e, "operator"), "=")) {
        TSNode l = smem_tile__strip(tt_field(e, "left"));
        value = tt_field(e, "right");
        if (rt_is(l, "pointer_expression") && rt_text_is(ctx, tt_field(l, "operator"), "*")) {
            /* *reinterpret_cast<float4*>(&(T[a][b])) = v */
            TSNode call = smem_tile__strip(tt_field(l, "argument"));
            char *ct = rt_is(call, "call_expression") ? rt_text(ctx, tt_field(call, "function")) : NULL;
            bool cast = ct && strstr(ct, "reinterpret_cast") && strstr(ct, "float4");
            free(ct);
            TSNode amp = smem_tile__strip(ts_node_named_child(tt_field(call, "arguments"), 0));
            if (cast && rt_is(amp, "pointer_expression")) target = tt_field(amp, "argument"), vec = true;
        } else {
            target = l;
        }
    }
    TSNode a, b;
    int t = ts_node_is_null(target) ? -1 : tile_elem(L, target, &a, &b);
    value = smem_tile__strip(value);
    TSNode reg = value;
    char comp = component_of(ctx, &reg);
    if (t < 0 || !rt_is(reg, "subscript_expression") || !rt_is(tt_field(reg, "argument"), "identifier") ||
        (vec && comp) || comp == '?') {
        kl_snprintf(L->why, sizeof L->why, "line %u of %s is not a tile element written from a staged register", line, L->sname);
        return false;
    }
    char rname[64];
    tt_copy_text(ctx, tt_field(reg, "argument"), rname, sizeof rname);
    bool known = false;
    for (unsigned i = 0; i < L->nregs; i++) known |= !strcmp(L->regs[i], rname);
    if (!known && L->nregs < 8) snprintf(L->regs[L->nregs++], 64, "%s", rname);
    unsigned parts = vec ? 4 : 1;
    long long cp, cq;
    char *pa = atom_of(ctx, a, ls, nl, &cp), *qa = atom_of(ctx, b, ls, nl, &cq);
    if (!pa || !qa) {
        free(pa), free(qa);
        return false;
    }
    for (unsigned j = 0; j < parts; j++) {
        if (L->nw >= WMAX) {
            kl_snprintf(L->why, sizeof L->why, "%s writes more than %d tile elements", L->sname, WMAX);
            free(pa), free(qa);
            return false;
        }
        lam_write *w = &L->w[L->nw++];
        memset(w, 0, sizeof *w);
        w->tile = t;
        w->p = strdup(pa), w->q = strdup(qa);
        w->cp = cp, w->cq = cq + (long long)j;
        w->node = s;
        w->reg = reg;
        w->comp = vec ? "xyzw"[j] : comp;
    }
    free(pa), free(qa);
    return true;
}

/* Is the identifier name, or a macro it calls, dependent on a thread index (a local of the kernel
 * computed from threadIdx, or threadIdx itself)? names: the thread-dependent locals. */
static bool thread_dependent_text(const char *t, char (*names)[64], unsigned n)
{
    if (strstr(t, "threadIdx")) return true;
    for (unsigned i = 0; i < n; i++)
        if (tt_uses(t, 0, (uint32_t)strlen(t), names[i])) return true;
    return false;
}

/* The kernel's locals (top level, before `upto`) that depend on a thread index. */
static unsigned thread_locals(const kl_rule_ctx *ctx, TSNode body, TSNode upto, char (*names)[64], unsigned max)
{
    TSNode st[128];
    unsigned n = tt_stmts(body, st, 128), k = 0;
    for (unsigned i = 0; i < n && i < 128 && !ts_node_eq(st[i], upto); i++) {
        if (!rt_is(st[i], "declaration")) continue;
        TSNode ds[16];
        unsigned nd = rt_declarators(st[i], ds, 16);
        for (unsigned j = 0; j < nd && j < 16 && k < max; j++) {
            if (!rt_is(ds[j], "init_declarator")) continue;
            char *v = rt_text(ctx, tt_field(ds[j], "value"));
            if (v && thread_dependent_text(v, names, k)) tt_copy_text(ctx, tt_field(ds[j], "declarator"), names[k++], 64);
            free(v);
        }
    }
    return k;
}

typedef struct assign_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode hit;
} assign_find;

static bool assign_visit(TSNode n, void *user)
{
    assign_find *a = user;
    TSNode t = {0};
    if (rt_is(n, "assignment_expression")) t = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = tt_field(n, "argument");
    if (rt_is(t, "identifier") && rt_text_is(a->ctx, t, a->name) && ts_node_is_null(a->hit)) a->hit = n;
    return true;
}

/* The names declared anywhere in n (locals of a lambda, its loops' variables). */
typedef struct decl_names {
    const kl_rule_ctx *ctx;
    char (*names)[64];
    unsigned n, max;
} decl_names;

static bool decl_names_visit(TSNode n, void *user)
{
    decl_names *d = user;
    if (rt_is(n, "declaration") || rt_is(n, "parameter_declaration")) {
        TSNode ds[16];
        unsigned nd = rt_is(n, "declaration") ? rt_declarators(n, ds, 16) : (ds[0] = tt_field(n, "declarator"), 1u);
        for (unsigned i = 0; i < nd && i < 16 && d->n < d->max; i++) {
            TSNode id = kl_ast_declarator_name(ds[i]);
            if (rt_is(id, "identifier")) tt_copy_text(d->ctx, id, d->names[d->n++], 64);
        }
    }
    return true;
}

/* Is the node a descendant of (or equal to) outer? */
static bool inside(TSNode n, TSNode outer)
{
    return ts_node_start_byte(n) >= ts_node_start_byte(outer) && ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* 1: the form, analysed (why empty: removable); 0: not this form. */
static int analyse(const kl_rule_ctx *ctx, TSNode fn, lam *L)
{
    memset(L, 0, sizeof *L);
    L->ctx = ctx;
    L->fn = fn;
    L->body = kl_ast_function_body(fn);
    TSNode st[128];
    unsigned n = tt_stmts(L->body, st, 128);
    if (n > 128) n = 128;
    bool staged = false;
    for (unsigned i = 0; i < n; i++) {
        if (!rt_is(st[i], "declaration") || !tt_is_shared_decl(ctx, st[i]) || L->nt >= 4) continue;
        unsigned dims = 0;
        TSNode d = tt_field(st[i], "declarator"), id = d;
        for (; rt_is(id, "array_declarator"); id = tt_field(id, "declarator")) dims++;
        if (!rt_is(id, "identifier")) continue;
        staged |= dims == 3;
        if (dims != 2 && dims != 3) continue;
        L->tdecl[L->nt] = st[i];
        tt_copy_text(ctx, id, L->tname[L->nt], 64);
        tt_copy_text(ctx, tt_field(st[i], "type"), L->telem[L->nt], 64);
        L->nt++;
    }
    if (!L->nt && !staged) return 0;
    /* the stash: a lambda writing tiles; the fetch: the lambda writing what the stash reads */
    for (unsigned i = 0; i < n; i++) {
        char name[64];
        TSNode lx = lambda_of(ctx, st[i], name, sizeof name);
        if (ts_node_is_null(lx)) continue;
        TSNode b = tt_field(lx, "body");
        bool w = false;
        for (unsigned t = 0; t < L->nt; t++) w |= tt_uses(ctx->text, ts_node_start_byte(b), ts_node_end_byte(b), L->tname[t]);
        if (w && ts_node_is_null(L->stash)) L->stash = st[i], snprintf(L->sname, sizeof L->sname, "%s", name);
    }
    if (ts_node_is_null(L->stash)) return 0;
    if (staged) {
        kl_snprintf(L->why, sizeof L->why, "the tiles have a stage dimension: remove double-buffer first");
        return 1;
    }
    /* the stash's writes */
    lam_local ls[LMAX];
    char lv[64] = "";
    TSNode sb = tt_field(tt_field(tt_field(L->stash, "declarator"), "value"), "body");
    if (!walk_scope(L, sb, ls, 0, stash_cb, NULL, lv, sizeof lv)) {
        if (!L->why[0]) kl_snprintf(L->why, sizeof L->why, "out of memory");
        return 1;
    }
    if (!L->nw || !L->nregs) return 0;
    for (unsigned i = 0; i < n && ts_node_is_null(L->fetch); i++) {
        char name[64];
        TSNode lx = lambda_of(ctx, st[i], name, sizeof name);
        if (ts_node_is_null(lx) || ts_node_eq(st[i], L->stash)) continue;
        TSNode b = tt_field(lx, "body");
        char pat[96];
        kl_snprintf(pat, sizeof pat, "%s [", L->regs[0]);
        if (tt_count(ctx->text, ts_node_start_byte(b), ts_node_end_byte(b), pat)) {
            L->fetch = st[i];
            snprintf(L->fname, sizeof L->fname, "%s", name);
            TSNode params = tt_field(tt_field(lx, "declarator"), "parameters");
            unsigned np = ts_node_named_child_count(params);
            if (np > 1) {
                kl_snprintf(L->why, sizeof L->why, "%s takes more than one parameter", name);
                return 1;
            }
            if (np == 1) {
                TSNode pd = ts_node_named_child(params, 0);
                tt_copy_text(ctx, pd, L->kparam, sizeof L->kparam);
                tt_copy_text(ctx, tt_field(pd, "declarator"), L->kname, sizeof L->kname);
            }
        }
    }
    if (ts_node_is_null(L->fetch)) {
        kl_snprintf(L->why, sizeof L->why, "no lambda writes the registers %s that %s stores", L->regs[0], L->sname);
        return 1;
    }
    /* each write's function of the tile coordinates */
    TSNode fb = tt_field(tt_field(tt_field(L->fetch, "declarator"), "value"), "body");
    for (unsigned i = 0; i < L->nw; i++) {
        fetch_find ff = {.w = &L->w[i]};
        tt_copy_text(ctx, tt_field(L->w[i].reg, "argument"), ff.reg, sizeof ff.reg);
        char flv[64] = "";
        if (!walk_scope(L, fb, ls, 0, fetch_cb, &ff, flv, sizeof flv)) {
            if (!L->why[0]) kl_snprintf(L->why, sizeof L->why, "out of memory");
            return 1;
        }
        if (!ff.found || !L->w[i].formula) {
            kl_snprintf(L->why, sizeof L->why, "%s does not write %s%s%c that line %u of %s stores", L->fname, ff.reg,
                        L->w[i].comp ? "." : "", L->w[i].comp ? L->w[i].comp : ' ', ts_node_start_point(L->w[i].node).row + 1,
                        L->sname);
            return 1;
        }
        /* the stash and the fetch index the register alike */
        char ri[64];
        tt_copy_text(ctx, tt_field(L->w[i].reg, "index"), ri, sizeof ri);
        bool same_index = !strcmp(ri, ff.idx) && !strcmp(lv, flv);
        if (!same_index) {
            kl_snprintf(L->why, sizeof L->why, "%s and %s index %s by different loops", L->fname, L->sname, ff.reg);
            return 1;
        }
    }
    /* the function depends on the tile coordinates only */
    char dep[128][64];
    unsigned nd = thread_locals(ctx, L->body, L->fetch, dep, 64);
    /* the lambdas' own names (but the fetch's parameter, which the function takes) */
    {
        decl_names dn = {ctx, dep + nd, 0, 128 - nd};
        kl_ast_walk(tt_field(tt_field(L->fetch, "declarator"), "value"), decl_names_visit, &dn);
        kl_ast_walk(tt_field(tt_field(L->stash, "declarator"), "value"), decl_names_visit, &dn);
        unsigned base = nd;
        for (unsigned i = 0; i < dn.n; i++) {
            if (!strcmp(dep[base + i], L->kname)) continue;
            if (nd != base + i) memmove(dep[nd], dep[base + i], 64);
            nd++;
        }
    }
    for (unsigned i = 0; i < L->nw; i++) {
        const char *f = L->w[i].formula;
        bool bad = thread_dependent_text(f, dep, nd) || (lv[0] && tt_uses(f, 0, (uint32_t)strlen(f), lv));
        for (unsigned r = 0; r < L->nregs; r++) bad |= tt_uses(f, 0, (uint32_t)strlen(f), L->regs[r]);
        /* a macro of the file that reads a thread index or a loop's variable */
        for (const char *m = strstr(ctx->text, "#define "); m && !bad; m = strstr(m + 1, "#define ")) {
            char mn[64];
            size_t k = 0;
            for (const char *c = m + 8; kl_ident_char(*c) && k + 1 < sizeof mn; c++) mn[k++] = *c;
            mn[k] = 0;
            if (!k || !tt_uses(f, 0, (uint32_t)strlen(f), mn)) continue;
            const char *end = strchr(m, '\n');
            char *body = strndup(m, end ? (size_t)(end - m) : strlen(m));
            bad |= body && thread_dependent_text(body, dep, nd);
            free(body);
        }
        if (bad) {
            kl_snprintf(L->why, sizeof L->why,
                        "the element line %u of %s stores is not a function of its tile coordinates alone: %s",
                        ts_node_start_point(L->w[i].node).row + 1, L->sname, f);
            return 1;
        }
    }
    /* every write of a tile, the same function */
    for (unsigned t = 0; t < L->nt; t++) {
        int first = -1;
        for (unsigned i = 0; i < L->nw; i++) {
            if (L->w[i].tile != (int)t) continue;
            if (first < 0) {
                first = (int)i;
                L->formula[t] = L->w[i].formula;
                continue;
            }
            for (unsigned trial = 0; trial < 64; trial++) {
                long long p = (long long)(ev_hash(trial * 7 + 1) % 48) - 4, q = (long long)(ev_hash(trial * 13 + 5) % 48) - 4;
                long long a, b;
                if (!ev_run(L->w[first].formula, trial + 1, p, q, &a) || !ev_run(L->w[i].formula, trial + 1, p, q, &b)) {
                    kl_snprintf(L->why, sizeof L->why, "the value of %s written at line %u is not plain arithmetic: %s",
                                L->tname[t], ts_node_start_point(L->w[i].node).row + 1, L->w[i].formula);
                    return 1;
                }
                if (a != b) {
                    kl_snprintf(L->why, sizeof L->why,
                                "the writes of %s at lines %u and %u give different elements at the same coordinates (%s against %s)",
                                L->tname[t], ts_node_start_point(L->w[first].node).row + 1,
                                ts_node_start_point(L->w[i].node).row + 1, L->w[first].formula, L->w[i].formula);
                    return 1;
                }
            }
        }
        if (first < 0) {
            kl_snprintf(L->why, sizeof L->why, "%s does not write %s", L->sname, L->tname[t]);
            return 1;
        }
    }
    /* the tile loop: fetch(ARG); stash(…); at its top level, the lambdas called nowhere else */
    for (unsigned i = 0; i < n && ts_node_is_null(L->loop); i++) {
        if (!rt_is(st[i], "for_statement")) continue;
        TSNode b = tt_field(st[i], "body");
        TSNode bs[64];
        unsigned bn = rt_is(b, "compound_statement") ? tt_stmts(b, bs, 64) : 0;
        for (unsigned k = 0; k < bn && k < 64; k++) {
            TSNode c = tt_child(bs[k], 0);
            if (!rt_is(bs[k], "expression_statement") || !rt_is(c, "call_expression")) continue;
            if (rt_text_is(ctx, tt_field(c, "function"), L->fname) && ts_node_is_null(L->fcall)) L->fcall = bs[k];
            if (rt_text_is(ctx, tt_field(c, "function"), L->sname) && !ts_node_is_null(L->fcall)) L->scall = bs[k];
        }
        if (!ts_node_is_null(L->fcall) && !ts_node_is_null(L->scall)) L->loop = st[i];
        else L->fcall = L->scall = (TSNode){0};
    }
    if (ts_node_is_null(L->loop)) {
        kl_snprintf(L->why, sizeof L->why, "no loop calls %s then %s at its top level", L->fname, L->sname);
        return 1;
    }
    uint32_t b0 = ts_node_start_byte(L->body), b1 = ts_node_end_byte(L->body);
    if (tt_count(ctx->text, b0, b1, L->fname) != 2 || tt_count(ctx->text, b0, b1, L->sname) != 2) {
        kl_snprintf(L->why, sizeof L->why, "%s or %s is called outside the loop at line %u (a prologue: remove double-buffer first)",
                    L->fname, L->sname, ts_node_start_point(L->loop).row + 1);
        return 1;
    }
    TSNode fargs = tt_field(tt_child(L->fcall, 0), "arguments");
    if (ts_node_named_child_count(fargs) != (L->kname[0] ? 1u : 0u)) {
        kl_snprintf(L->why, sizeof L->why, "the call of %s at line %u does not pass its one parameter", L->fname,
                    ts_node_start_point(L->fcall).row + 1);
        return 1;
    }
    if (L->kname[0]) L->karg = rt_text(ctx, ts_node_named_child(fargs, 0));
    /* the tiles: declared, written by the stash, read in the loop only; the registers used by the
     * lambdas only */
    TSNode last = L->scall;
    for (unsigned t = 0; t < L->nt; t++) {
        uint32_t ms[256], me[256];
        unsigned nm = tt_find(ctx->text, b0, b1, L->tname[t], ms, me, 256);
        for (unsigned k = 0; k < nm && k < 256; k++) {
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
            if (inside(id, L->tdecl[t]) || inside(id, L->stash)) continue;
            TSNode a, bb;
            TSNode sub = tt_parent(tt_parent(id));
            unsigned line = ts_node_start_point(id).row + 1;
            if (!inside(id, L->loop) || tile_elem(L, sub, &a, &bb) != (int)t) {
                kl_snprintf(L->why, sizeof L->why, "%s at line %u is used other than as an element read in the loop", L->tname[t], line);
                return 1;
            }
            TSNode up = tt_parent(sub);
            while (rt_is(up, "parenthesized_expression")) up = tt_parent(up);
            if ((rt_is(up, "assignment_expression") && inside(sub, tt_field(up, "left"))) || rt_is(up, "update_expression") ||
                (rt_is(up, "pointer_expression") && ts_node_is_null(float4_around(ctx, sub)))) {
                kl_snprintf(L->why, sizeof L->why, "%s at line %u is written or aliased in the loop", L->tname[t], line);
                return 1;
            }
            TSNode s = sub;
            while (!ts_node_eq(tt_parent(s), tt_field(L->loop, "body"))) s = tt_parent(s);
            if (ts_node_start_byte(s) < ts_node_start_byte(L->scall)) {
                kl_snprintf(L->why, sizeof L->why, "%s is read at line %u before %s", L->tname[t], line, L->sname);
                return 1;
            }
            if (ts_node_start_byte(s) > ts_node_start_byte(last)) last = s;
        }
    }
    for (unsigned r = 0; r < L->nregs; r++) {
        unsigned all = tt_count(ctx->text, b0, b1, L->regs[r]);
        unsigned in = tt_count(ctx->text, ts_node_start_byte(L->fetch), ts_node_end_byte(L->fetch), L->regs[r]) +
                      tt_count(ctx->text, ts_node_start_byte(L->stash), ts_node_end_byte(L->stash), L->regs[r]);
        if (all != in + 1) {
            kl_snprintf(L->why, sizeof L->why, "the register %s is used outside %s and %s", L->regs[r], L->fname, L->sname);
            return 1;
        }
    }
    /* nothing the functions read changes between the fetch and the last read */
    for (unsigned t = 0; t < L->nt; t++) {
        size_t tn = strlen(L->formula[t]) + (L->karg ? strlen(L->karg) : 0) + 2;
        char *txt = malloc(tn);
        if (!txt) return 1;
        kl_snprintf(txt, tn, "%s %s", L->formula[t], L->karg ? L->karg : "");
        TSNode bs[64];
        unsigned bn = tt_stmts(tt_field(L->loop, "body"), bs, 64);
        for (unsigned k = 0; k < bn && k < 64; k++) {
            if (ts_node_start_byte(bs[k]) < ts_node_start_byte(L->fcall) || ts_node_start_byte(bs[k]) > ts_node_start_byte(last))
                continue;
            /* the identifiers assigned in this statement */
            char names[32][64];
            smem_tile__ident_scan is = {ctx, names, 0, 32};
            kl_ast_walk(bs[k], smem_tile__ident_visit, &is);
            for (unsigned q = 0; q < is.n && q < 32; q++) {
                if (!tt_uses(txt, 0, (uint32_t)strlen(txt), names[q]) || !strcmp(names[q], L->kname)) continue;
                assign_find af = {.ctx = ctx, .name = names[q]};
                kl_ast_walk(bs[k], assign_visit, &af);
                if (!ts_node_is_null(af.hit)) {
                    kl_snprintf(L->why, sizeof L->why, "%s, which %s's elements read, is assigned at line %u before the tile is read",
                                names[q], L->tname[t], ts_node_start_point(af.hit).row + 1);
                    free(txt);
                    return 1;
                }
            }
        }
        free(txt);
    }
    return 1;
}

/* ---- the rule's entry points ----------------------------------------------------------------------- */

bool smem_tile__lambda_site(const kl_rule_ctx *ctx, TSNode fn, char *why, size_t wsize, TSNode *at, char *what, size_t size)
{
    lam *L = malloc(sizeof *L);
    if (!L) return false;
    int r = analyse(ctx, fn, L);
    if (r) {
        kl_snprintf(why, wsize, "%s", L->why);
        *at = L->stash;
        kl_snprintf(what, size, "%s", L->sname);
    }
    lam_release(L);
    free(L);
    return r == 1;
}

/* The whole lines of a statement, with a comment after it on its last line. */
static void stmt_lines(const kl_rule_ctx *ctx, TSNode s, uint32_t *a, uint32_t *b)
{
    rt_stmt_range(ctx, s, NULL, a, b);
    TSNode c = ts_node_next_named_sibling(s);
    if (*b == ts_node_end_byte(s) && rt_is(c, "comment") && ts_node_start_point(c).row == ts_node_end_point(s).row &&
        rt_line_blank_before(ctx, ts_node_start_byte(s))) {
        *a = rt_line_start(ctx, ts_node_start_byte(s));
        *b = rt_line_end(ctx, ts_node_end_byte(c));
    }
}

/* The whole lines of a statement with the comment lines right above it. */
static void with_comments(const kl_rule_ctx *ctx, TSNode s, uint32_t *a, uint32_t *b)
{
    stmt_lines(ctx, s, a, b);
    for (TSNode c = ts_node_prev_named_sibling(s); rt_is(c, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(c)) &&
                                                  rt_line_end(ctx, ts_node_end_byte(c)) == *a;
         c = ts_node_prev_named_sibling(c))
        *a = rt_line_start(ctx, ts_node_start_byte(c));
}

/* A float4 read v4 that initializes `[const] float4 v = …;` whose every later use in its block is
 * `v.x`, `v.y`, `v.z` or `v.w` (read): the declaration, its block and the uses (at most 16). */
static bool float4_local(const kl_rule_ctx *ctx, TSNode v4, TSNode *decl, TSNode *uses, unsigned *nu)
{
    TSNode init = tt_parent(v4);
    while (rt_is(init, "parenthesized_expression")) init = tt_parent(init);
    TSNode d = tt_parent(init);
    TSNode ds[4];
    if (!rt_is(init, "init_declarator") || !rt_is(d, "declaration") || rt_declarators(d, ds, 4) != 1 ||
        !rt_is(tt_field(init, "declarator"), "identifier") || !rt_text_is(ctx, tt_field(d, "type"), "float4"))
        return false;
    TSNode blk = tt_parent(d);
    if (!rt_is(blk, "compound_statement")) return false;
    char name[64];
    tt_copy_text(ctx, tt_field(init, "declarator"), name, sizeof name);
    uint32_t ms[32], me[32];
    unsigned n = tt_find(ctx->text, ts_node_end_byte(d), ts_node_end_byte(blk), name, ms, me, 32);
    if (n > 16) return false;
    *nu = 0;
    for (unsigned k = 0; k < n; k++) {
        TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
        TSNode fe = tt_parent(id);
        char f[8] = "";
        if (rt_is(fe, "field_expression")) tt_copy_text(ctx, tt_field(fe, "field"), f, sizeof f);
        if (!rt_is(fe, "field_expression") || !ts_node_eq(tt_field(fe, "argument"), id) || f[1] || !strchr("xyzw", f[0]) ||
            !f[0])
            return false;
        TSNode up = tt_parent(fe);
        if ((rt_is(up, "assignment_expression") && ts_node_eq(tt_field(up, "left"), fe)) || rt_is(up, "update_expression") ||
            (rt_is(up, "pointer_expression") && rt_text_is(ctx, tt_field(up, "operator"), "&")))
            return false;
        uses[(*nu)++] = fe;
    }
    *decl = d;
    return true;
}

/* `e + c` for the text of node e: parenthesized unless e is a sum, product, name, literal or call. */
static void plus_const(const kl_rule_ctx *ctx, TSNode e, const char *et, int c, char *buf, size_t size)
{
    e = smem_tile__strip(e);
    char op[4] = "";
    if (rt_is(e, "binary_expression")) tt_copy_text(ctx, tt_field(e, "operator"), op, sizeof op);
    bool bare = rt_is(e, "identifier") || rt_is(e, "number_literal") || rt_is(e, "call_expression") ||
                rt_is(e, "subscript_expression") || rt_is(e, "field_expression") || !strcmp(op, "+") || !strcmp(op, "-") ||
                !strcmp(op, "*") || !strcmp(op, "/") || !strcmp(op, "%");
    if (!c) kl_snprintf(buf, size, "%s", et);
    else kl_snprintf(buf, size, bare ? "%s + %d" : "(%s) + %d", et, c);
}

kl_status smem_tile__remove_lambda(const kl_rule_ctx *ctx, TSNode fn, kl_edits *out, kl_error *err)
{
    lam *L = malloc(sizeof *L);
    if (!L) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    if (analyse(ctx, fn, L) != 1) {
        st = kl_rule_not_applicable(err, "no tiles staged through lambdas");
        goto done;
    }
    if (L->why[0]) {
        st = kl_rule_not_applicable(err, "%s", L->why);
        goto done;
    }
    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(L->fetch), ind, sizeof ind);
    /* the tiles as functions of (k0, row, column), where the fetch was */
    kl_strbuf_addf(&sb, "%s// smem-tile: the tiles' elements read from global memory where the compute uses them\n", ind);
    for (unsigned t = 0; t < L->nt; t++)
        kl_strbuf_addf(&sb, "%sauto %s = [&](%s%sint kl_p, int kl_q) -> %s { return %s; };\n", ind, L->tname[t], L->kparam,
                       L->kparam[0] ? ", " : "", L->telem[t], L->formula[t]);
    if (sb.failed) goto oom;
    uint32_t a, b;
    with_comments(ctx, L->fetch, &a, &b);
    if ((st = kl_edits_add(out, a, b, kl_strbuf_str(&sb))) != KL_OK) goto done;
    with_comments(ctx, L->stash, &a, &b);
    if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
    for (unsigned t = 0; t < L->nt; t++) {
        stmt_lines(ctx, L->tdecl[t], &a, &b);
        if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
    }
    /* the registers' declarations (when they declare nothing else) */
    TSNode ts[128];
    unsigned n = tt_stmts(L->body, ts, 128);
    for (unsigned i = 0; i < n && i < 128; i++) {
        if (!rt_is(ts[i], "declaration") || tt_is_shared_decl(ctx, ts[i])) continue;
        TSNode ds[16];
        unsigned nd = rt_declarators(ts[i], ds, 16), regs = 0;
        for (unsigned j = 0; j < nd && j < 16; j++) {
            TSNode id = kl_ast_declarator_name(ds[j]);
            for (unsigned r = 0; r < L->nregs; r++) regs += rt_text_is(ctx, id, L->regs[r]);
        }
        if (!regs) continue;
        if (regs != nd) {
            st = kl_rule_not_applicable(err, "the declaration at line %u declares the registers with other names",
                                        ts_node_start_point(ts[i]).row + 1);
            goto done;
        }
        stmt_lines(ctx, ts[i], &a, &b);
        if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
    }
    /* the calls, and the barriers when no shared memory is left */
    rt_stmt_range(ctx, L->fcall, NULL, &a, &b);
    if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
    rt_stmt_range(ctx, L->scall, NULL, &a, &b);
    if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
    unsigned shared = 0;
    for (unsigned i = 0; i < n && i < 128; i++) shared += rt_is(ts[i], "declaration") && tt_is_shared_decl(ctx, ts[i]);
    if (shared == L->nt) {
        TSNode bs[64];
        unsigned bn = tt_stmts(tt_field(L->loop, "body"), bs, 64);
        for (unsigned k = 0; k < bn && k < 64; k++) {
            if (!rt_is_syncthreads(ctx, bs[k])) continue;
            rt_stmt_range(ctx, bs[k], NULL, &a, &b);
            if ((st = kl_edits_add(out, a, b, "")) != KL_OK) goto done;
        }
    }
    /* the reads */
    for (unsigned t = 0; t < L->nt; t++) {
        uint32_t ms[256], me[256];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(L->loop), ts_node_end_byte(L->loop), L->tname[t], ms, me, 256);
        for (unsigned k = 0; k < nm && k < 256; k++) {
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
            TSNode sub = tt_parent(tt_parent(id)), e1, e2;
            if (tile_elem(L, sub, &e1, &e2) != (int)t) continue;
            char *x = rt_text(ctx, e1), *y = rt_text(ctx, e2);
            kl_strbuf r = KL_STRBUF_INIT;
            const char *k0 = L->karg ? L->karg : "", *sep = L->karg ? ", " : "";
            TSNode v4 = float4_around(ctx, sub), decl, uses[16];
            unsigned nu = 0;
            char yc[4][600];
            for (int c = 0; c < 4 && y; c++) plus_const(ctx, e2, y, c, yc[c], sizeof yc[c]);
            if (x && y && !ts_node_is_null(v4) && float4_local(ctx, v4, &decl, uses, &nu)) {
                /* `const float4 v = LD4(T[a][b]); … v.y …` → `… T(k0, a, b + 1) …`: each lane read where it is used */
                uint32_t a0, a1;
                stmt_lines(ctx, decl, &a0, &a1);
                if ((st = kl_edits_add(out, a0, a1, "")) != KL_OK) {
                    free(x), free(y);
                    goto done;
                }
                for (unsigned q = 0; q < nu && st == KL_OK; q++) {
                    char f[8];
                    tt_copy_text(ctx, tt_field(uses[q], "field"), f, sizeof f);
                    int c = (int)(strchr("xyzw", f[0]) - "xyzw");
                    char call[1400];
                    kl_snprintf(call, sizeof call, "%s(%s%s%s, %s)", L->tname[t], k0, sep, x, yc[c]);
                    st = kl_edits_add(out, ts_node_start_byte(uses[q]), ts_node_end_byte(uses[q]), call);
                }
                free(x), free(y);
                if (st != KL_OK) goto done;
                continue;
            }
            if (x && y && ts_node_is_null(v4)) {
                kl_strbuf_addf(&r, "%s(%s%s%s, %s)", L->tname[t], k0, sep, x, y);
            } else if (x && y) {
                kl_strbuf_addf(&r, "make_float4(%s(%s%s%s, %s), %s(%s%s%s, %s), %s(%s%s%s, %s), %s(%s%s%s, %s))", L->tname[t], k0,
                               sep, x, yc[0], L->tname[t], k0, sep, x, yc[1], L->tname[t], k0, sep, x, yc[2], L->tname[t], k0,
                               sep, x, yc[3]);
            }
            free(x), free(y);
            TSNode whole = ts_node_is_null(v4) ? sub : v4;
            if (r.failed || !r.len) {
                kl_strbuf_release(&r);
                goto oom;
            }
            st = kl_edits_add(out, ts_node_start_byte(whole), ts_node_end_byte(whole), kl_strbuf_str(&r));
            kl_strbuf_release(&r);
            if (st != KL_OK) goto done;
        }
    }
    goto done;
oom:
    st = KL_ERR_NOMEM;
done:
    kl_strbuf_release(&sb);
    lam_release(L);
    free(L);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
