/* Token-level text helpers of register-tile and double-buffer (tile_text.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tile_text.h"

/* ---- tokens --------------------------------------------------------------------------------- */

typedef struct tok {
    uint32_t s, e;
} tok;

typedef struct toks {
    tok *v;
    unsigned n, cap;
} toks;

static bool ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }

/* Split text[s,e) into tokens: identifiers, numbers, string and character literals, and single
 * punctuation characters. Comments and blanks separate tokens and are not tokens. */
static bool lex(const char *t, uint32_t s, uint32_t e, toks *out)
{
    out->v = NULL;
    out->n = out->cap = 0;
    uint32_t i = s;
    while (i < e) {
        char c = t[i];
        if (isspace((unsigned char)c)) {
            i++;
            continue;
        }
        if (c == '/' && i + 1 < e && t[i + 1] == '/') {
            while (i < e && t[i] != '\n') i++;
            continue;
        }
        if (c == '/' && i + 1 < e && t[i + 1] == '*') {
            i += 2;
            while (i + 1 < e && !(t[i] == '*' && t[i + 1] == '/')) i++;
            i = i + 2 < e ? i + 2 : e;
            continue;
        }
        uint32_t b = i;
        if (ident_start(c)) {
            while (i < e && kl_ident_char(t[i])) i++;
        } else if (isdigit((unsigned char)c) || (c == '.' && i + 1 < e && isdigit((unsigned char)t[i + 1]))) {
            while (i < e && (kl_ident_char(t[i]) || t[i] == '.' ||
                             ((t[i] == '+' || t[i] == '-') && strchr("eEpP", t[i - 1]))))
                i++;
        } else if (c == '"' || c == '\'') {
            i++;
            while (i < e && t[i] != c) i += t[i] == '\\' ? 2 : 1;
            i = i < e ? i + 1 : e;
        } else {
            i++;
        }
        if (out->n == out->cap) {
            unsigned nc = out->cap ? out->cap * 2 : 64;
            tok *nv = realloc(out->v, nc * sizeof *nv);
            if (!nv) {
                free(out->v);
                out->v = NULL;
                return false;
            }
            out->v = nv;
            out->cap = nc;
        }
        out->v[out->n++] = (tok){b, i > e ? e : i};
    }
    return true;
}

static bool tok_is(const char *t, tok k, const char *s)
{
    size_t n = strlen(s);
    return k.e - k.s == n && !memcmp(t + k.s, s, n);
}

static bool tok_eq(const char *t1, tok a, const char *t2, tok b)
{
    return a.e - a.s == b.e - b.s && !memcmp(t1 + a.s, t2 + b.s, a.e - a.s);
}

/* Is token k a member name (after `.`, `->` or `::`)? */
static bool is_member(const char *t, const toks *ts, unsigned k)
{
    if (k == 0) return false;
    tok p = ts->v[k - 1];
    if (tok_is(t, p, ".")) return true;
    if (k >= 2 && tok_is(t, p, ">") && tok_is(t, ts->v[k - 2], "-") && ts->v[k - 2].e == p.s) return true;
    if (k >= 2 && tok_is(t, p, ":") && tok_is(t, ts->v[k - 2], ":")) return true;
    return false;
}

/* Does the pattern (tokens pt of text pat) match at token k? */
static bool match_at(const char *t, const toks *ts, unsigned k, const char *pat, const toks *pt)
{
    if (!pt->n || k + pt->n > ts->n || is_member(t, ts, k)) return false;
    for (unsigned m = 0; m < pt->n; m++)
        if (!tok_eq(t, ts->v[k + m], pat, pt->v[m])) return false;
    /* an identifier pattern must not continue into a longer name (tokens already separate) */
    return true;
}

char *tt_subst(const char *text, uint32_t s, uint32_t e, const tt_pair *pairs, unsigned n)
{
    toks ts;
    if (!lex(text, s, e, &ts)) return NULL;
    toks *pts = calloc(n ? n : 1, sizeof *pts);
    kl_strbuf sb = KL_STRBUF_INIT;
    bool ok = pts != NULL;
    for (unsigned p = 0; ok && p < n; p++) ok = lex(pairs[p].from, 0, (uint32_t)strlen(pairs[p].from), &pts[p]);
    uint32_t emitted = s;
    for (unsigned k = 0; ok && k < ts.n;) {
        unsigned hit = n;
        for (unsigned p = 0; p < n && hit == n; p++)
            if (match_at(text, &ts, k, pairs[p].from, &pts[p])) hit = p;
        if (hit == n) {
            k++;
            continue;
        }
        kl_strbuf_add(&sb, text + emitted, ts.v[k].s - emitted);
        kl_strbuf_adds(&sb, pairs[hit].to);
        emitted = ts.v[k + pts[hit].n - 1].e;
        k += pts[hit].n;
    }
    if (ok) kl_strbuf_add(&sb, text + emitted, e - emitted);
    for (unsigned p = 0; pts && p < n; p++) free(pts[p].v);
    free(pts);
    free(ts.v);
    if (!ok || sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

/* The matches of `from` in text[s,e) as match_at sees them: every token a match starts at
 * (overlapping), or each after the end of the one before; the first max into starts/ends. */
static unsigned matches(const char *text, uint32_t s, uint32_t e, const char *from, bool overlapping, uint32_t *starts,
                        uint32_t *ends, unsigned max)
{
    toks ts, pt;
    unsigned c = 0;
    if (!lex(text, s, e, &ts)) return 0;
    if (!lex(from, 0, (uint32_t)strlen(from), &pt)) {
        free(ts.v);
        return 0;
    }
    for (unsigned k = 0; pt.n && k < ts.n; k++)
        if (match_at(text, &ts, k, from, &pt)) {
            if (c < max) {
                starts[c] = ts.v[k].s;
                ends[c] = ts.v[k + pt.n - 1].e;
            }
            c++;
            if (!overlapping) k += pt.n - 1;
        }
    free(ts.v);
    free(pt.v);
    return c;
}

unsigned tt_count(const char *text, uint32_t s, uint32_t e, const char *from)
{
    return matches(text, s, e, from, true, NULL, NULL, 0);
}

bool tt_uses(const char *text, uint32_t s, uint32_t e, const char *name) { return tt_count(text, s, e, name) > 0; }

char *tt_unstride(const char *text, uint32_t s, uint32_t e, const char *var)
{
    toks ts;
    if (!lex(text, s, e, &ts)) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t emitted = s;
    for (unsigned k = 0; k < ts.n;) {
        /* ( X [. Y] + var * R ) */
        unsigned m = k;
        bool ok = tok_is(text, ts.v[m], "(") && m + 1 < ts.n && ident_start(text[ts.v[m + 1].s]);
        unsigned xs = m + 1, xe = m + 1;
        if (ok) {
            m += 2;
            if (m + 1 < ts.n && tok_is(text, ts.v[m], ".") && ident_start(text[ts.v[m + 1].s])) {
                xe = m + 1;
                m += 2;
            }
            ok = m + 2 < ts.n && tok_is(text, ts.v[m], "+") && tok_is(text, ts.v[m + 1], var) &&
                 tok_is(text, ts.v[m + 2], "*");
            m += 3;
        }
        unsigned rest = m;
        if (ok) {
            int depth = 1;
            while (m < ts.n && depth > 0) {
                if (tok_is(text, ts.v[m], "(")) depth++;
                if (tok_is(text, ts.v[m], ")")) depth--;
                if (depth > 0) m++;
            }
            ok = m < ts.n && m > rest;
        }
        if (!ok) {
            k++;
            continue;
        }
        kl_strbuf_add(&sb, text + emitted, ts.v[k].s - emitted);
        kl_strbuf_add(&sb, text + ts.v[xs].s, ts.v[xe].e - ts.v[xs].s);
        emitted = ts.v[m].e;
        k = m + 1;
    }
    kl_strbuf_add(&sb, text + emitted, e - emitted);
    free(ts.v);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

char *tt_indent_tail(const char *text, int delta)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *nl = strchr(text, '\n');
    if (!nl) return kl_strdup(text);
    kl_strbuf_add(&sb, text, (size_t)(nl - text) + 1);
    const char *p = nl + 1;
    while (*p) {
        const char *le = strchr(p, '\n');
        size_t len = le ? (size_t)(le - p) : strlen(p);
        bool blank = true;
        for (size_t k = 0; k < len; k++)
            if (p[k] != ' ' && p[k] != '\t' && p[k] != '\r') blank = false;
        if (blank) {
            /* keep blank lines empty */
        } else if (delta >= 0) {
            for (int k = 0; k < delta; k++) kl_strbuf_addc(&sb, ' ');
            kl_strbuf_add(&sb, p, len);
        } else {
            size_t drop = (size_t)-delta;
            for (size_t k = 0; k < drop; k++)
                if (k >= len || p[k] != ' ') {
                    kl_strbuf_release(&sb);
                    return NULL;
                }
            kl_strbuf_add(&sb, p + drop, len - drop);
        }
        if (!le) break;
        kl_strbuf_addc(&sb, '\n');
        p = le + 1;
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- tree ------------------------------------------------------------------------------------ */

TSNode tt_field(TSNode n, const char *field)
{
    if (ts_node_is_null(n)) return n;
    return ts_node_child_by_field_name(n, field, (uint32_t)strlen(field));
}

TSNode tt_child(TSNode n, uint32_t i)
{
    if (ts_node_is_null(n)) return n;
    return ts_node_named_child(n, i);
}

uint32_t tt_child_count(TSNode n) { return ts_node_is_null(n) ? 0 : ts_node_named_child_count(n); }

TSNode tt_parent(TSNode n)
{
    if (ts_node_is_null(n)) return n;
    return ts_node_parent(n);
}

unsigned tt_stmts(TSNode compound, TSNode *out, unsigned max)
{
    unsigned n = 0;
    uint32_t c = tt_child_count(compound);
    for (uint32_t i = 0; i < c; i++) {
        TSNode ch = tt_child(compound, i);
        if (rt_is(ch, "comment")) continue;
        if (n < max) out[n] = ch;
        n++;
    }
    return n;
}

uint32_t tt_pragma_above(const kl_rule_ctx *ctx, uint32_t off)
{
    if (!rt_line_blank_before(ctx, off)) return off;
    uint32_t ls = rt_line_start(ctx, off);
    if (ls == 0) return off;
    uint32_t ps = rt_line_start(ctx, ls - 1);
    uint32_t k = ps;
    while (k < ls && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++;
    static const char prag[] = "#pragma unroll";
    if (ls - k >= sizeof prag - 1 && !memcmp(ctx->text + k, prag, sizeof prag - 1)) {
        uint32_t q = k + (uint32_t)(sizeof prag - 1);
        while (q < ls && (ctx->text[q] == ' ' || ctx->text[q] == '\t' || ctx->text[q] == '\r')) q++;
        if (q == ls - 1 || q == ls) return k;
    }
    return off;
}

typedef struct dim3_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl;   /* the declarator naming it */
    unsigned count;
} dim3_find;

static bool dim3_visit(TSNode n, void *user)
{
    dim3_find *f = user;
    if (!rt_is(n, "declaration")) return true;
    TSNode ty = tt_field(n, "type");
    if (!rt_text_is(f->ctx, ty, "dim3")) return false;
    uint32_t c = tt_child_count(n);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = tt_child(n, i);
        if (!rt_is(d, "init_declarator") && !rt_is(d, "function_declarator")) continue;
        TSNode id = tt_field(d, "declarator");
        if (rt_is(id, "identifier") && rt_text_is(f->ctx, id, f->name)) {
            f->decl = d;
            f->count++;
        }
    }
    return false;
}

bool tt_dim3_args(const kl_rule_ctx *ctx, TSNode host_body, TSNode cfg, TSNode *args, unsigned *n)
{
    *n = 0;
    if (rt_is(cfg, "call_expression") && rt_text_is(ctx, tt_field(cfg, "function"), "dim3")) {
        *n = tt_stmts(tt_field(cfg, "arguments"), args, 3);
        return *n >= 1 && *n <= 3;
    }
    if (!rt_is(cfg, "identifier") || ts_node_is_null(host_body)) return false;
    char *name = rt_text(ctx, cfg);
    if (!name) return false;
    dim3_find f = {.ctx = ctx, .name = name};
    kl_ast_walk(host_body, dim3_visit, &f);
    free(name);
    if (f.count != 1) return false;
    TSNode list = {0};
    if (rt_is(f.decl, "function_declarator")) {
        list = tt_field(f.decl, "parameters");
    } else {
        TSNode v = tt_field(f.decl, "value");
        if (rt_is(v, "argument_list") || rt_is(v, "initializer_list")) list = v;
        else if (rt_is(v, "call_expression") && rt_text_is(ctx, tt_field(v, "function"), "dim3"))
            list = tt_field(v, "arguments");
    }
    if (ts_node_is_null(list)) return false;
    *n = tt_stmts(list, args, 3);
    return *n >= 1 && *n <= 3;
}

unsigned tt_find(const char *text, uint32_t s, uint32_t e, const char *from, uint32_t *starts, uint32_t *ends,
                 unsigned max)
{
    return matches(text, s, e, from, false, starts, ends, max);
}

void tt_copy_text(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    uint32_t s = ts_node_start_byte(n), e = ts_node_end_byte(n);
    if (e - s >= size) e = s + (uint32_t)size - 1;
    memcpy(buf, ctx->text + s, e - s);
    buf[e - s] = '\0';
}

bool tt_is_shared_decl(const kl_rule_ctx *ctx, TSNode d)
{
    if (!rt_is(d, "declaration")) return false;
    uint32_t c = tt_child_count(d);
    for (uint32_t i = 0; i < c; i++) {
        TSNode ch = tt_child(d, i);
        if ((rt_is(ch, "type_qualifier") || rt_is(ch, "storage_class_specifier")) &&
            rt_text_is(ctx, ch, "__shared__"))
            return true;
    }
    return false;
}

typedef struct shared_decls {
    const kl_rule_ctx *ctx;
    TSNode *items;
    unsigned n, max;
} shared_decls;

static bool shared_decl_visit(TSNode n, void *user)
{
    shared_decls *d = user;
    if (d->n < d->max && tt_is_shared_decl(d->ctx, n)) d->items[d->n++] = n;
    return true;
}

unsigned tt_shared_decls(const kl_rule_ctx *ctx, TSNode n, TSNode *items, unsigned max)
{
    shared_decls d = {ctx, items, 0, max};
    kl_ast_walk(n, shared_decl_visit, &d);
    return d.n;
}
