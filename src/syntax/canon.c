/* The canonical form of a kernel file (canon.h, docs/syntax.md "The canonical form"). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/affine_int.h"
#include "syntax/canon.h"
#include "util/util.h"

/* ---- replacements and the pieces they leave --------------------------------------------------- */

/* One replacement of a step: [a, b) of the step's input by text. group 0: self-contained; other
 * groups are coupled (all or none of their pieces may be rewritten). */
typedef struct rep {
    uint32_t a, b;
    char *text;
    unsigned group;
} rep;

typedef struct reps {
    rep *v;
    unsigned n, cap;
    bool oom;
    kl_strbuf bumped;  /* the pointers folded with their bumps, each followed by a space */
    bool whole;        /* the change holds only as a whole (a launch's block with its kernel) */
} reps;

/* A changed piece: [os, oe) of a step's input became [cs, ce) of its output. */
typedef struct piece {
    uint32_t os, oe, cs, ce;
    unsigned group;
} piece;

typedef struct step {
    piece *p;
    unsigned n;
    kl_source *out; /* the step's output, parsed */
    char *bumped;   /* the pointers it folded with their bumps ("x y "), NULL when none */
    bool whole;     /* no edit maps back through it (step 4: the block's shape changed with its kernel) */
} step;

struct kl_canon {
    const kl_source *orig;
    step st[4];
    unsigned nst;
    char *summary;
};

static void reps_add(reps *r, uint32_t a, uint32_t b, char *text, unsigned group)
{
    if (!text) {
        r->oom = true;
        return;
    }
    if (r->n == r->cap) {
        unsigned cap = r->cap ? 2 * r->cap : 16;
        rep *nv = realloc(r->v, cap * sizeof *nv);
        if (!nv) {
            free(text);
            r->oom = true;
            return;
        }
        r->v = nv;
        r->cap = cap;
    }
    r->v[r->n++] = (rep){a, b, text, group};
}

static void reps_release(reps *r)
{
    for (unsigned i = 0; i < r->n; i++) free(r->v[i].text);
    free(r->v);
    kl_strbuf_release(&r->bumped);
    memset(r, 0, sizeof *r);
}

static int rep_cmp(const void *x, const void *y)
{
    const rep *a = x, *b = y;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    return a->b > b->b ? -1 : a->b < b->b ? 1 : 0; /* the outer one first */
}

/* Apply the replacements to text (len bytes): the new text (new string) and its pieces. Replacements
 * inside or overlapping an earlier one are dropped (the outer one's text already holds them). */
static char *apply_reps(reps *r, const char *text, size_t len, piece **pieces, unsigned *npieces)
{
    qsort(r->v, r->n, sizeof *r->v, rep_cmp);
    kl_strbuf sb = KL_STRBUF_INIT;
    piece *p = calloc(r->n ? r->n : 1, sizeof *p);
    unsigned np = 0;
    uint32_t at = 0;
    for (unsigned i = 0; p && i < r->n; i++) {
        rep *e = &r->v[i];
        if (e->a < at || e->b > len) continue;
        kl_strbuf_add(&sb, text + at, e->a - at);
        uint32_t cs = (uint32_t)sb.len;
        kl_strbuf_adds(&sb, e->text);
        p[np++] = (piece){e->a, e->b, cs, (uint32_t)sb.len, e->group};
        at = e->b;
    }
    kl_strbuf_add(&sb, text + at, len - at);
    if (!p || sb.failed) {
        free(p);
        kl_strbuf_release(&sb);
        return NULL;
    }
    char *out = kl_strbuf_detach(&sb, NULL);
    if (!out) out = kl_strdup("");
    *pieces = p;
    *npieces = np;
    return out;
}

/* ---- small helpers -------------------------------------------------------------------------- */

static bool is_type(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }

static bool same_text(const char *a, const char *b)
{
    char *x = kl_str_unblank(a), *y = kl_str_unblank(b);
    bool same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

/* The text with its newlines made spaces (new string): what goes into one line. */
static char *one_line(const char *t)
{
    char *r = kl_strdup(t ? t : "");
    for (char *p = r; p && *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return r;
}

/* An expression's text, parenthesised unless it is one token. */
static char *operand(const char *t)
{
    char *s = one_line(t);
    if (!s) return NULL;
    bool token = *s != '\0';
    for (const char *p = s; *p && token; p++) token = kl_ident_char(*p) || *p == '.';
    if (token) return s;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "(%s)", s);
    free(s);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- step 1: function-like macros ------------------------------------------------------------ */

/* A macro of the file as the expansion reads it: its entry in the analysis's table (name and
 * parameters, owned by the source's memo) with the body as one line. */
typedef struct macro {
    const affine__macro_def *def;
    char *body;
    bool usable;
} macro;

typedef struct macros {
    macro *v;
    unsigned n;
    const kl_source *src;
    bool oom;
} macros;

static void macros_free(macros *m)
{
    for (unsigned i = 0; i < m->n; i++) free(m->v[i].body);
    free(m->v);
}

static macro *macro_named(const macros *m, const char *name, size_t len)
{
    for (unsigned i = 0; i < m->n; i++)
        if (strlen(m->v[i].def->name) == len && !memcmp(m->v[i].def->name, name, len)) return &m->v[i];
    return NULL;
}

/* A macro body as one line: continuations joined, comments dropped, blanks trimmed. */
static char *clean_body(const char *body)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = body; *p; p++) {
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
            if (!*p) break;
            kl_strbuf_addc(&sb, ' ');
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            if (!e) break;
            p = e + 1;
            kl_strbuf_addc(&sb, ' ');
            continue;
        }
        if (p[0] == '\\' && (p[1] == '\n' || (p[1] == '\r' && p[2] == '\n'))) {
            p += p[1] == '\r' ? 2 : 1;
            kl_strbuf_addc(&sb, ' ');
            continue;
        }
        kl_strbuf_addc(&sb, *p == '\n' || *p == '\r' ? ' ' : *p);
    }
    char *s = kl_strbuf_detach(&sb, NULL);
    if (!s) return kl_strdup("");
    size_t n = strlen(s), lead = 0;
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    while (s[lead] && isspace((unsigned char)s[lead])) lead++;
    memmove(s, s + lead, n - lead + 1);
    return s;
}

/* The file's macros, from the table the index analysis collects once per source (affine_int.h),
 * each body as one line; usable when function-like, defined once, and with neither '#' nor
 * __VA_ARGS__ in its body. False when out of memory. */
static bool macros_load(macros *m)
{
    const affine__macro_table *t = affine__macros_of(m->src);
    if (!t) return false;
    m->v = calloc(t->count ? t->count : 1, sizeof *m->v);
    if (!m->v) return false;
    for (unsigned i = 0; i < t->count; i++) {
        const affine__macro_def *a = &t->items[i];
        macro *d = &m->v[m->n++];
        d->def = a;
        d->body = clean_body(a->body);
        if (!d->body) return false;
        d->usable = a->function_like && a->defs == 1 && !strchr(d->body, '#') && !strstr(d->body, "__VA_ARGS__");
    }
    return true;
}

#define EXPAND_MAX_DEPTH 16
#define EXPAND_MAX_BYTES (256u << 10)

static char *expand_text(const macros *m, const char *t, const bool *disabled, unsigned depth, bool *fail);

/* Skip a string or character literal starting at p (a quote): past its end. */
static const char *skip_literal(const char *p)
{
    char q = *p++;
    while (*p && *p != q) p += (*p == '\\' && p[1]) ? 2 : 1;
    return *p ? p + 1 : p;
}

/* The arguments of an invocation whose '(' is at p: up to max, each a new string (trimmed); *end past
 * the ')'. False when unbalanced. */
static bool split_args(const char *p, char **args, unsigned max, unsigned *n, const char **end)
{
    *n = 0;
    int depth = 0;
    const char *start = p + 1;
    for (const char *q = p; *q; q++) {
        if (*q == '"' || *q == '\'') {
            q = skip_literal(q) - 1;
            continue;
        }
        if (*q == '(' || *q == '[' || *q == '{') depth++;
        else if (*q == ')' || *q == ']' || *q == '}') depth--;
        if ((*q == ',' && depth == 1) || depth == 0) {
            if (*n >= max) return false;
            const char *a = start, *b = q;
            while (a < b && isspace((unsigned char)*a)) a++;
            while (b > a && isspace((unsigned char)b[-1])) b--;
            args[(*n)++] = kl_strndup(a, (size_t)(b - a));
            start = q + 1;
            if (depth == 0) {
                *end = q + 1;
                return true;
            }
        }
    }
    return false;
}

/* Append s, with a blank between it and what precedes when the two would paste into one token. */
static void add_separated(kl_strbuf *sb, const char *s)
{
    static const char ops[] = "+-*/%<>=&|!^~.";
    char prev = sb->len ? sb->buf[sb->len - 1] : ' ';
    char first = *s;
    if ((kl_ident_char(prev) && kl_ident_char(first)) || (strchr(ops, prev) && first && strchr(ops, first)))
        kl_strbuf_addc(sb, ' ');
    kl_strbuf_adds(sb, s);
}

/* One invocation of d with args (already expanded): the body with the parameters replaced, rescanned. */
static char *expand_one(const macros *m, const macro *d, char **args, unsigned nargs, const bool *disabled,
                        unsigned depth, bool *fail)
{
    if (nargs != d->def->nparams && !(d->def->nparams == 0 && nargs == 1 && !args[0][0])) {
        *fail = true;
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = d->body; *p;) {
        if (*p == '"' || *p == '\'') {
            const char *e = skip_literal(p);
            kl_strbuf_add(&sb, p, (size_t)(e - p));
            p = e;
        } else if (kl_ident_char(*p) && !isdigit((unsigned char)*p)) {
            const char *q = p;
            while (kl_ident_char(*q)) q++;
            bool done = false;
            for (unsigned i = 0; i < d->def->nparams && !done; i++)
                if (strlen(d->def->params[i]) == (size_t)(q - p) && !memcmp(d->def->params[i], p, (size_t)(q - p))) {
                    add_separated(&sb, args[i]);
                    if (*q && (kl_ident_char(*q) || strchr("+-*/%<>=&|!^~.", *q))) kl_strbuf_addc(&sb, ' ');
                    done = true;
                }
            if (!done) kl_strbuf_add(&sb, p, (size_t)(q - p));
            p = q;
        } else {
            kl_strbuf_addc(&sb, *p++);
        }
    }
    if (sb.failed || sb.len > EXPAND_MAX_BYTES) {
        *fail = true;
        kl_strbuf_release(&sb);
        return NULL;
    }
    /* rescan with this macro disabled */
    bool *dis = calloc(m->n ? m->n : 1, sizeof *dis);
    if (!dis) {
        *fail = true;
        kl_strbuf_release(&sb);
        return NULL;
    }
    memcpy(dis, disabled, m->n * sizeof *dis);
    dis[d - m->v] = true;
    char *r = expand_text(m, kl_strbuf_str(&sb), dis, depth + 1, fail);
    free(dis);
    kl_strbuf_release(&sb);
    return r;
}

/* The text with every enabled function-like macro invocation expanded (new string). */
static char *expand_text(const macros *m, const char *t, const bool *disabled, unsigned depth, bool *fail)
{
    if (depth > EXPAND_MAX_DEPTH) {
        *fail = true;
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = t; *p && !*fail;) {
        if (*p == '"' || *p == '\'') {
            const char *e = skip_literal(p);
            kl_strbuf_add(&sb, p, (size_t)(e - p));
            p = e;
            continue;
        }
        if (p[0] == '/' && (p[1] == '/' || p[1] == '*')) {
            /* a comment in an argument: gone (the result is one line) */
            const char *e = p[1] == '/' ? strchr(p, '\n') : strstr(p + 2, "*/");
            p = e ? e + (p[1] == '*' ? 2 : 0) : p + strlen(p);
            kl_strbuf_addc(&sb, ' ');
            continue;
        }
        if (!kl_ident_char(*p) || isdigit((unsigned char)*p) || (p > t && kl_ident_char(p[-1]))) {
            kl_strbuf_addc(&sb, *p == '\n' || *p == '\r' ? ' ' : *p);
            p++;
            continue;
        }
        const char *q = p;
        while (kl_ident_char(*q)) q++;
        const macro *d = macro_named(m, p, (size_t)(q - p));
        const char *paren = q;
        while (isspace((unsigned char)*paren)) paren++;
        if (!d || !d->usable || disabled[d - m->v] || *paren != '(') {
            kl_strbuf_add(&sb, p, (size_t)(q - p));
            p = q;
            continue;
        }
        char *args[32];
        unsigned nargs = 0;
        const char *end = NULL;
        if (!split_args(paren, args, 32, &nargs, &end)) {
            for (unsigned i = 0; i < nargs; i++) free(args[i]);
            *fail = true;
            break;
        }
        for (unsigned i = 0; i < nargs && !*fail; i++) {
            char *e = args[i] ? expand_text(m, args[i], disabled, depth + 1, fail) : NULL;
            if (!e) *fail = true;
            free(args[i]);
            args[i] = e;
        }
        char *x = *fail ? NULL : expand_one(m, d, args, nargs, disabled, depth, fail);
        for (unsigned i = 0; i < nargs; i++) free(args[i]);
        if (x) add_separated(&sb, x);
        free(x);
        p = end;
    }
    if (*fail || sb.failed || sb.len > EXPAND_MAX_BYTES) {
        *fail = true;
        kl_strbuf_release(&sb);
        return NULL;
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

typedef struct macro_scan {
    const kl_source *src;
    const macros *m;
    reps *r;
    kl_strbuf *names;
} macro_scan;

static bool find_invocations(TSNode n, void *user)
{
    macro_scan *s = user;
    if (!is_type(n, "call_expression")) return true;
    TSNode f = ts_node_child_by_field_name(n, "function", 8);
    if (!is_type(f, "identifier")) return true;
    char *name = kl_node_text(s->src, f);
    const macro *d = name ? macro_named(s->m, name, strlen(name)) : NULL;
    if (!d || !d->usable) {
        free(name);
        return true;
    }
    char *t = kl_node_text(s->src, n);
    bool *dis = calloc(s->m->n ? s->m->n : 1, sizeof *dis);
    bool fail = !t || !dis;
    char *x = fail ? NULL : expand_text(s->m, t, dis, 0, &fail);
    if (!fail && x) {
        /* one line, then the invocation's own line breaks, so that every later line stays where it was */
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_adds(&sb, x);
        for (const char *p = t; *p; p++)
            if (*p == '\n') kl_strbuf_addc(&sb, '\n');
        reps_add(s->r, ts_node_start_byte(n), ts_node_end_byte(n), kl_strbuf_detach(&sb, NULL), 0);
        if (!strstr(kl_strbuf_str(s->names), name))
            kl_strbuf_addf(s->names, "%s%s", s->names->len ? ", " : "", name);
    }
    free(x);
    free(t);
    free(dis);
    free(name);
    return false; /* the expansion holds what is inside */
}

static bool find_bodies(TSNode n, void *user)
{
    if (!is_type(n, "function_definition")) return true;
    kl_ast_walk(kl_ast_function_body(n), find_invocations, user);
    return false;
}

static void step_macros(const kl_source *src, reps *r, kl_strbuf *summary)
{
    macros m = {NULL, 0, src, false};
    if (!macros_load(&m)) m.oom = true;
    bool any = false;
    for (unsigned i = 0; i < m.n; i++) any |= m.v[i].usable;
    if (any && !m.oom) {
        kl_strbuf names = KL_STRBUF_INIT;
        macro_scan s = {src, &m, r, &names};
        kl_ast_walk(kl_source_root(src), find_bodies, &s);
        if (names.len) kl_strbuf_addf(summary, "%sexpanded %s", summary->len ? "; " : "", kl_strbuf_str(&names));
        kl_strbuf_release(&names);
    }
    if (m.oom) r->oom = true;
    macros_free(&m);
}

/* ---- step 2: template parameters of kernels --------------------------------------------------- */

typedef struct tbind {
    const kl_source *src;
    char *names[16];
    char *values[16];
    bool is_type[16];
    unsigned n;
    reps *r;
    TSNode skip; /* the template parameter list */
} tbind;

static bool bind_visit(TSNode n, void *user)
{
    tbind *b = user;
    if (ts_node_eq(n, b->skip)) return false;
    bool id = is_type(n, "identifier"), ty = is_type(n, "type_identifier");
    if (!id && !ty) return true;
    for (unsigned i = 0; i < b->n; i++) {
        if (b->is_type[i] != ty || !kl_node_text_is(b->src, n, b->names[i])) continue;
        /* not a member name, not a declaration of the same name */
        TSNode p = ts_node_parent(n);
        if (is_type(p, "field_expression") && !ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n)) break;
        reps_add(b->r, ts_node_start_byte(n), ts_node_end_byte(n), ty ? one_line(b->values[i]) : operand(b->values[i]),
                 0);
        break;
    }
    return true;
}

static void step_templates(const kl_source *src, reps *r, kl_strbuf *summary)
{
    kl_launch_sites ls = {0};
    if (kl_ast_launches(src, &ls, NULL) != KL_OK) {
        r->oom = true;
        return;
    }
    TSNode fns[64];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 64);
    if (nf > 64) nf = 64;
    for (unsigned f = 0; f < nf; f++) {
        TSNode tpl = ts_node_parent(fns[f]);
        if (!is_type(tpl, "template_declaration")) continue;
        TSNode params = ts_node_child_by_field_name(tpl, "parameters", 10);
        char *kname = kl_ast_function_name(src, fns[f]);
        tbind b;
        memset(&b, 0, sizeof b);
        b.src = src;
        b.r = r;
        b.skip = params;
        bool ok = kname != NULL;
        char *defaults[16] = {0};
        bool differ[16] = {0};
        uint32_t np = ts_node_named_child_count(params);
        for (uint32_t i = 0; ok && i < np; i++) {
            TSNode p = ts_node_named_child(params, i);
            const char *t = ts_node_type(p);
            TSNode nm = {0}, dv = {0};
            bool ty = false;
            if (!strcmp(t, "parameter_declaration") || !strcmp(t, "optional_parameter_declaration")) {
                nm = kl_ast_declarator_name(ts_node_child_by_field_name(p, "declarator", 10));
                dv = ts_node_child_by_field_name(p, "default_value", 13);
            } else if (!strcmp(t, "type_parameter_declaration") || !strcmp(t, "optional_type_parameter_declaration")) {
                ty = true;
                nm = kl_ast_child_of_type(p, "type_identifier");
                dv = ts_node_child_by_field_name(p, "default_type", 12);
            } else if (!strcmp(t, "comment")) {
                continue;
            } else {
                ok = false; /* variadic, template template */
            }
            if (!ok || ts_node_is_null(nm) || b.n >= 16) {
                ok = false;
                break;
            }
            b.names[b.n] = kl_node_text(src, nm);
            defaults[b.n] = ts_node_is_null(dv) ? NULL : kl_node_text(src, dv);
            b.is_type[b.n] = ty;
            b.n++;
        }
        /* what every launch of the kernel passes for each parameter */
        unsigned launches = 0;
        for (unsigned i = 0; ok && i < ls.count; i++) {
            if (strcmp(ls.items[i].kernel, kname)) continue;
            TSNode fn = ts_node_child_by_field_name(ls.items[i].call, "function", 8);
            TSNode args = ts_node_child_by_field_name(fn, "arguments", 9);
            if (!is_type(fn, "template_function")) {
                ok = false;
                break;
            }
            uint32_t na = ts_node_named_child_count(args);
            if (na > b.n) ok = false;
            for (unsigned k = 0; ok && k < b.n; k++) {
                char *v = k < na ? kl_node_text(src, ts_node_named_child(args, k))
                                 : defaults[k] ? kl_strdup(defaults[k]) : NULL;
                if (!v) differ[k] = true;
                else if (!b.values[k] && !launches) b.values[k] = v, v = NULL;
                else if (!b.values[k] || !same_text(b.values[k], v)) differ[k] = true;
                free(v);
            }
            launches++;
        }
        /* a parameter is bound when every launch gives it the same argument: `reduce<float, 256,
         * true>` and `reduce<float, 256, false>` bind T and the block size, not the flag */
        unsigned kept = 0;
        for (unsigned k = 0; ok && k < b.n; k++) {
            if (differ[k]) {
                free(b.names[k]);
                free(b.values[k]);
                free(defaults[k]);
                continue;
            }
            b.names[kept] = b.names[k];
            b.values[kept] = b.values[k];
            b.is_type[kept] = b.is_type[k];
            defaults[kept] = defaults[k];
            kept++;
        }
        if (ok) b.n = kept;
        if (ok && launches && b.n) {
            size_t before = r->n;
            kl_ast_walk(fns[f], bind_visit, &b);
            if (r->n > before) {
                kl_strbuf_addf(summary, "%sbound ", summary->len ? "; " : "");
                for (unsigned k = 0; k < b.n; k++)
                    kl_strbuf_addf(summary, "%s%s = %s", k ? ", " : "", b.names[k], b.values[k]);
                kl_strbuf_addf(summary, " (%s, from its launch)", kname);
            }
        }
        for (unsigned k = 0; k < b.n; k++) {
            free(b.names[k]);
            free(b.values[k]);
            free(defaults[k]);
        }
        free(kname);
    }
    kl_launch_sites_release(&ls);
}

/* ---- step 3: pointer locals and bumped pointers ---------------------------------------------- */

typedef struct name_use {
    const kl_source *src;
    const char *name;
    TSNode *v;
    unsigned n, cap;
    bool oom;
} name_use;

static bool collect_uses(TSNode n, void *user)
{
    name_use *u = user;
    if (!is_type(n, "identifier") || !kl_node_text_is(u->src, n, u->name)) return true;
    if (u->n == u->cap) {
        unsigned cap = u->cap ? 2 * u->cap : 16;
        TSNode *nv = realloc(u->v, cap * sizeof *nv);
        if (!nv) {
            u->oom = true;
            return false;
        }
        u->v = nv;
        u->cap = cap;
    }
    u->v[u->n++] = n;
    return true;
}

/* How a use of a pointer name is written: 1 the base of a subscript, 2 the operand of a unary `*`,
 * 3 the left of `+=` (a bump), 4 assigned or moved otherwise (=, ++, --, &), 0 anything else. The
 * node the use's rewrite replaces into *whole. */
static int use_kind(const kl_source *src, TSNode id, TSNode *whole)
{
    TSNode n = id, p = ts_node_parent(n);
    while (is_type(p, "parenthesized_expression")) n = p, p = ts_node_parent(p);
    *whole = n;
    if (is_type(p, "subscript_expression") && ts_node_eq(ts_node_child_by_field_name(p, "argument", 8), n)) {
        *whole = p;
        return 1;
    }
    if (is_type(p, "pointer_expression")) {
        *whole = p;
        return kl_node_text_is(src, ts_node_child_by_field_name(p, "operator", 8), "*") ? 2 : 4;
    }
    if (is_type(p, "assignment_expression") && ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n)) {
        *whole = p;
        return kl_node_text_is(src, ts_node_child_by_field_name(p, "operator", 8), "+=") ? 3 : 4;
    }
    if (is_type(p, "update_expression")) return 4;
    return 0;
}

/* The replacement of one use of base whose offset is off: `base[(off) + (i)]`, `base[off]`, or
 * `(base + (off))`. */
static char *use_text(const kl_source *src, TSNode whole, int kind, const char *base, const char *off)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (kind == 1) {
        TSNode idx = ts_node_child_by_field_name(whole, "indices", 7);
        if (ts_node_is_null(idx)) idx = ts_node_child_by_field_name(whole, "index", 5);
        char *it = kl_node_text(src, idx);
        if (!it) return NULL;
        /* `indices` is the bracketed list: its text holds the brackets */
        size_t l = strlen(it);
        if (l >= 2 && it[0] == '[' && it[l - 1] == ']') {
            it[l - 1] = '\0';
            memmove(it, it + 1, l - 1);
        }
        kl_strbuf_addf(&sb, "%s[%s + (%s)]", base, off, it);
        free(it);
    } else if (kind == 2) {
        kl_strbuf_addf(&sb, "%s[%s]", base, off);
    } else {
        kl_strbuf_addf(&sb, "(%s + %s)", base, off);
    }
    return kl_strbuf_detach(&sb, NULL);
}

static bool is_pointer_param(const kl_source *src, TSNode fn, const char *name)
{
    TSNode ps = kl_ast_function_params(fn);
    uint32_t c = ts_node_named_child_count(ps);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_child_by_field_name(ts_node_named_child(ps, i), "declarator", 10);
        bool ptr = false;
        for (TSNode x = d; !ts_node_is_null(x); x = ts_node_child_by_field_name(x, "declarator", 10))
            ptr |= is_type(x, "pointer_declarator");
        TSNode nm = kl_ast_declarator_name(d);
        if (ptr && !ts_node_is_null(nm) && kl_node_text_is(src, nm, name)) return true;
    }
    return false;
}

/* Every use of name in fn's body (a new array in *out, freed by the caller). */
static unsigned uses_of(const kl_source *src, TSNode fn, const char *name, TSNode **out, bool *oom)
{
    name_use u = {src, name, NULL, 0, 0, false};
    kl_ast_walk(kl_ast_function_body(fn), collect_uses, &u);
    if (u.oom) *oom = true;
    *out = u.v;
    return u.n;
}

/* A loop `for (v = S; v < B; v += D)` (or v++): its variable, start and step as text (new strings). */
static bool loop_parts(const kl_source *src, TSNode loop, char **var, char **start, char **stepv)
{
    *var = *start = *stepv = NULL;
    TSNode init = ts_node_child_by_field_name(loop, "initializer", 11);
    TSNode nm = {0}, sv = {0};
    if (is_type(init, "declaration") && ts_node_named_child_count(init) == 2) {
        TSNode d = ts_node_named_child(init, 1);
        nm = ts_node_child_by_field_name(d, "declarator", 10);
        sv = ts_node_child_by_field_name(d, "value", 5);
    } else if (is_type(init, "assignment_expression")) {
        nm = ts_node_child_by_field_name(init, "left", 4);
        sv = ts_node_child_by_field_name(init, "right", 5);
    }
    if (!is_type(nm, "identifier") || ts_node_is_null(sv)) return false;
    TSNode up = kl_ast_unparen(ts_node_child_by_field_name(loop, "update", 6));
    TSNode uv = {0};
    if (is_type(up, "assignment_expression") &&
        kl_node_text_is(src, ts_node_child_by_field_name(up, "operator", 8), "+=")) {
        uv = ts_node_child_by_field_name(up, "left", 4);
        *stepv = kl_node_text(src, ts_node_child_by_field_name(up, "right", 5));
    } else if (is_type(up, "update_expression")) {
        char *t = kl_node_text(src, up);
        bool inc = t && strstr(t, "++");
        free(t);
        if (!inc) return false;
        uv = ts_node_child_by_field_name(up, "argument", 8);
        *stepv = kl_strdup("1");
    }
    *var = kl_node_text(src, nm);
    *start = kl_node_text(src, sv);
    bool ok = *var && *start && *stepv && is_type(uv, "identifier") && kl_node_text_is(src, uv, *var);
    if (!ok) {
        free(*var), free(*start), free(*stepv);
        *var = *start = *stepv = NULL;
    }
    return ok;
}

/* The distance a pointer bumped by x once per iteration of loop has moved at the top of an iteration:
 * `(v - S)` when x is the loop's step, `(v - S) * E` when it is step * E. NULL when neither. */
static char *bump_term(const kl_source *src, TSNode fn, TSNode loop, TSNode x)
{
    char *var, *start, *stepv;
    if (!loop_parts(src, loop, &var, &start, &stepv)) return NULL;
    char *xt = kl_node_text(src, x);
    kl_strbuf sb = KL_STRBUF_INIT;
    (void)fn;
    kl_strbuf d = KL_STRBUF_INIT;
    if (same_text(start, "0"))
        kl_strbuf_adds(&d, var);
    else
        kl_strbuf_addf(&d, "(%s - %s)", var, start);
    char *dist = kl_strbuf_detach(&d, NULL);
    TSNode xs = kl_ast_unparen(x);
    if (xt && dist && same_text(xt, stepv)) {
        kl_strbuf_adds(&sb, dist);
    } else if (xt && dist && same_text(stepv, "1")) {
        char *op = operand(xt);
        if (op) kl_strbuf_addf(&sb, "%s * %s", dist, op);
        free(op);
    } else if (dist && is_type(xs, "binary_expression") &&
               kl_node_text_is(src, ts_node_child_by_field_name(xs, "operator", 8), "*")) {
        char *l = kl_node_text(src, ts_node_child_by_field_name(xs, "left", 4));
        char *rr = kl_node_text(src, ts_node_child_by_field_name(xs, "right", 5));
        char *other = l && same_text(l, stepv) ? rr : rr && same_text(rr, stepv) ? l : NULL;
        char *op = other ? operand(other) : NULL;
        if (op) kl_strbuf_addf(&sb, "%s * %s", dist, op);
        free(op);
        free(l);
        free(rr);
    }
    free(dist);
    free(xt);
    free(var);
    free(start);
    free(stepv);
    return sb.len ? kl_strbuf_detach(&sb, NULL) : (kl_strbuf_release(&sb), NULL);
}

/* The pointer a name holds, as a parameter plus an offset: a pointer parameter is itself; a local
 * `T *N = E;` (one declarator) with E `M + X`, `X + M`, `&M[X]` or `M` is M's base plus X, for M a
 * pointer parameter or such a local that is never moved itself. Depth-bounded; false otherwise. */
static bool resolve_pointer(const kl_source *src, TSNode fn, const char *name, char **base, char **off, TSNode *decl,
                            unsigned depth);

/* How a name's uses read, for folding: false when some use is neither a subscript, a dereference, a
 * bump `N += X` / `++N` / `N++` as a statement, nor the initializer of another pointer local. */
static bool only_folding_uses(const kl_source *src, TSNode *u, unsigned nu, TSNode decl_name)
{
    for (unsigned i = 0; i < nu; i++) {
        if (ts_node_eq(u[i], decl_name)) continue;
        TSNode w;
        int k = use_kind(src, u[i], &w);
        if (k == 1 || k == 2 || k == 3) continue;
        TSNode p = ts_node_parent(w);
        if (is_type(p, "update_expression") && is_type(ts_node_parent(p), "expression_statement")) continue;
        if (k == 4 && is_type(w, "update_expression") && is_type(ts_node_parent(w), "expression_statement")) continue;
        /* `T *q = N + e;`: another local's initializer (that local is folded on its own) */
        TSNode x = w;
        while (is_type(ts_node_parent(x), "binary_expression") || is_type(ts_node_parent(x), "parenthesized_expression"))
            x = ts_node_parent(x);
        TSNode id = ts_node_parent(x);
        if (is_type(id, "init_declarator") && is_type(ts_node_child_by_field_name(id, "declarator", 10), "pointer_declarator"))
            continue;
        return false;
    }
    return true;
}

static bool moved(const kl_source *src, TSNode fn, const char *name)
{
    TSNode *u = NULL;
    bool oom = false, yes = false;
    unsigned nu = uses_of(src, fn, name, &u, &oom);
    for (unsigned i = 0; i < nu && !yes; i++) {
        TSNode w;
        int k = use_kind(src, u[i], &w);
        yes = k == 3 || k == 4 || is_type(ts_node_parent(w), "update_expression");
    }
    free(u);
    return yes || oom;
}

static bool resolve_pointer(const kl_source *src, TSNode fn, const char *name, char **base, char **off, TSNode *decl,
                            unsigned depth)
{
    *base = *off = NULL;
    if (decl) *decl = (TSNode){{0}, 0, 0};
    if (depth > 4) return false;
    if (is_pointer_param(src, fn, name)) {
        *base = kl_strdup(name);
        return *base != NULL;
    }
    /* the local's one declaration */
    TSNode *u = NULL;
    bool oom = false;
    unsigned nu = uses_of(src, fn, name, &u, &oom);
    TSNode init = {{0}, 0, 0};
    for (unsigned i = 0; i < nu; i++) {
        TSNode d = ts_node_parent(u[i]);
        if (is_type(d, "pointer_declarator")) d = ts_node_parent(d);
        if (is_type(d, "init_declarator") && ts_node_is_null(init) &&
            is_type(ts_node_child_by_field_name(d, "declarator", 10), "pointer_declarator") &&
            ts_node_eq(kl_ast_declarator_name(ts_node_child_by_field_name(d, "declarator", 10)), u[i])) {
            init = d;
            if (decl) *decl = u[i];
        }
    }
    free(u);
    if (ts_node_is_null(init) || oom) return false;
    TSNode dl = ts_node_parent(init);
    for (uint32_t i = 0; i < ts_node_named_child_count(dl); i++) {
        TSNode k = ts_node_named_child(dl, i);
        if (is_type(k, "init_declarator") && !ts_node_eq(k, init)) return false; /* one name per declaration */
    }
    TSNode v = kl_ast_unparen(ts_node_child_by_field_name(init, "value", 5));
    TSNode m = {{0}, 0, 0}, x = {{0}, 0, 0};
    if (is_type(v, "identifier")) {
        m = v;
    } else if (is_type(v, "binary_expression") && kl_node_text_is(src, ts_node_child_by_field_name(v, "operator", 8), "+")) {
        TSNode l = kl_ast_unparen(ts_node_child_by_field_name(v, "left", 4)), rr = ts_node_child_by_field_name(v, "right", 5);
        if (is_type(l, "identifier")) m = l, x = rr;
        else if (is_type(kl_ast_unparen(rr), "identifier")) m = kl_ast_unparen(rr), x = ts_node_child_by_field_name(v, "left", 4);
    } else if (is_type(v, "pointer_expression") && kl_node_text_is(src, ts_node_child_by_field_name(v, "operator", 8), "&")) {
        TSNode sx = kl_ast_unparen(ts_node_child_by_field_name(v, "argument", 8));
        TSNode idx = ts_node_child_by_field_name(sx, "indices", 7);
        if (is_type(sx, "subscript_expression") && is_type(ts_node_child_by_field_name(sx, "argument", 8), "identifier") &&
            ts_node_named_child_count(idx) == 1)
            m = ts_node_child_by_field_name(sx, "argument", 8), x = ts_node_named_child(idx, 0);
    }
    if (ts_node_is_null(m)) return false;
    char *mname = kl_node_text(src, m);
    char *mb = NULL, *mo = NULL;
    bool ok = mname && !moved(src, fn, mname) && resolve_pointer(src, fn, mname, &mb, &mo, NULL, depth + 1);
    free(mname);
    if (!ok) {
        free(mb);
        free(mo);
        return false;
    }
    char *xt = ts_node_is_null(x) ? NULL : kl_node_text(src, x);
    char *xo = xt ? operand(xt) : NULL;
    free(xt);
    kl_strbuf sb = KL_STRBUF_INIT;
    if (mo) kl_strbuf_adds(&sb, mo);
    if (xo) kl_strbuf_addf(&sb, "%s%s", sb.len ? " + " : "", xo);
    free(mo);
    free(xo);
    *base = mb;
    *off = sb.len ? kl_strbuf_detach(&sb, NULL) : (kl_strbuf_release(&sb), NULL);
    return true;
}

typedef struct bump {
    TSNode stmt;   /* the expression statement `P += X;` / `++P;` */
    TSNode loop;   /* the loop it bumps once per iteration, or null: straight-line code */
    char *amount;  /* X as an operand */
    char *term;    /* in a loop: the distance at the top of an iteration */
} bump;

/* Is stmt in straight-line code of the body: no loop, condition or switch between it and the body? */
static bool straight_line(TSNode stmt, TSNode body)
{
    for (TSNode p = ts_node_parent(stmt); !ts_node_is_null(p); p = ts_node_parent(p)) {
        if (ts_node_eq(p, body)) return true;
        if (!is_type(p, "compound_statement")) return false;
    }
    return false;
}

/* A pointer (a parameter, or a local resolved to a parameter plus an offset) read only through
 * subscripts and dereferences, and moved only by bumps in straight-line code or once per iteration
 * of its innermost loop: every subscript and dereference reads the parameter at the offset the
 * bumps before it have reached; the bumps go. A local's own declaration stays. */
static void fold_pointer(const kl_source *src, TSNode fn, const char *name, unsigned group, reps *r, kl_strbuf *names)
{
    char *base = NULL, *init_off = NULL;
    TSNode decl_name = {{0}, 0, 0};
    TSNode *u = NULL;
    bool oom = false;
    bump b[8];
    unsigned nb = 0, nu = 0;
    if (!resolve_pointer(src, fn, name, &base, &init_off, &decl_name, 0)) goto done;
    nu = uses_of(src, fn, name, &u, &oom);
    if (oom || !only_folding_uses(src, u, nu, decl_name)) goto done;
    TSNode body = kl_ast_function_body(fn);
    bool ok = true;
    for (unsigned i = 0; ok && i < nu; i++) {
        if (ts_node_eq(u[i], decl_name)) continue;
        TSNode w;
        int k = use_kind(src, u[i], &w);
        TSNode stmt = {{0}, 0, 0}, amount = {{0}, 0, 0};
        if (k == 3) {
            stmt = ts_node_parent(w);
            amount = ts_node_child_by_field_name(w, "right", 5);
        } else if (is_type(ts_node_parent(w), "update_expression") || is_type(w, "update_expression")) {
            TSNode ue = is_type(w, "update_expression") ? w : ts_node_parent(w);
            char *t = kl_node_text(src, ue);
            bool inc = t && strstr(t, "++");
            free(t);
            if (!inc) ok = false;
            stmt = ts_node_parent(ue);
        } else {
            continue;
        }
        if (!ok || !is_type(stmt, "expression_statement") || nb >= 8) {
            ok = false;
            break;
        }
        memset(&b[nb], 0, sizeof b[nb]);
        b[nb].stmt = stmt;
        char *x = ts_node_is_null(amount) ? kl_strdup("1") : kl_node_text(src, amount);
        b[nb].amount = x ? operand(x) : NULL;
        free(x);
        if (!b[nb].amount) ok = false;
        TSNode block = ts_node_parent(stmt), loop = ts_node_parent(block);
        if (ok && straight_line(stmt, body)) {
            /* in straight-line code: every later use has moved by it */
        } else if (ok && is_type(block, "compound_statement") && is_type(loop, "for_statement")) {
            b[nb].loop = loop;
            TSNode amt = amount;
            if (ts_node_is_null(amt)) {
                /* ++p: a bump of 1 */
                char *var, *start, *stepv;
                if (loop_parts(src, loop, &var, &start, &stepv) && same_text(stepv, "1")) {
                    kl_strbuf d = KL_STRBUF_INIT;
                    if (same_text(start, "0")) kl_strbuf_adds(&d, var);
                    else kl_strbuf_addf(&d, "(%s - %s)", var, start);
                    b[nb].term = kl_strbuf_detach(&d, NULL);
                }
                free(var);
                free(start);
                free(stepv);
            } else {
                b[nb].term = bump_term(src, fn, loop, amt);
            }
            if (!b[nb].term) ok = false;
            for (unsigned k2 = 0; k2 < nb; k2++)
                if (ts_node_eq(b[k2].loop, loop)) ok = false; /* one bump per loop */
            for (unsigned k2 = 0; ok && k2 < nu; k2++)
                if (ts_node_start_byte(u[k2]) >= ts_node_end_byte(loop)) ok = false; /* no use after the loop */
        } else {
            ok = false;
        }
        nb++;
    }
    if (!ok || (!nb && !init_off)) goto done;
    if (!nb && !strcmp(base, name)) goto done;
    unsigned before = r->n;
    for (unsigned i = 0; i < nu; i++) {
        if (ts_node_eq(u[i], decl_name)) continue;
        TSNode w;
        int k = use_kind(src, u[i], &w);
        if (k != 1 && k != 2) continue; /* bumps (deleted below) and other locals' initializers */
        uint32_t at = ts_node_start_byte(u[i]);
        kl_strbuf off = KL_STRBUF_INIT;
        if (init_off) kl_strbuf_adds(&off, init_off);
        for (unsigned j = 0; j < nb; j++) {
            uint32_t se = ts_node_end_byte(b[j].stmt);
            if (ts_node_is_null(b[j].loop)) {
                if (se <= at) kl_strbuf_addf(&off, "%s%s", off.len ? " + " : "", b[j].amount);
            } else if (at >= ts_node_start_byte(b[j].loop) && at < ts_node_end_byte(b[j].loop)) {
                kl_strbuf_addf(&off, "%s%s", off.len ? " + " : "", b[j].term);
                if (se <= at) kl_strbuf_addf(&off, " + %s", b[j].amount);
            }
        }
        kl_strbuf o2 = KL_STRBUF_INIT;
        if (off.len) kl_strbuf_addf(&o2, "(%s)", kl_strbuf_str(&off));
        else kl_strbuf_adds(&o2, "0");
        reps_add(r, ts_node_start_byte(w), ts_node_end_byte(w), use_text(src, w, k, base, kl_strbuf_str(&o2)),
                 nb ? group : 0);
        kl_strbuf_release(&o2);
        kl_strbuf_release(&off);
    }
    for (unsigned j = 0; j < nb; j++)
        reps_add(r, ts_node_start_byte(b[j].stmt), ts_node_end_byte(b[j].stmt), kl_strdup(""), group);
    if (r->n > before) kl_strbuf_addf(names, "%s%s%s", names->len ? ", " : "", name, nb ? " (bumped)" : "");
    if (r->n > before && nb) kl_strbuf_addf(&r->bumped, "%s ", name);
done:
    for (unsigned j = 0; j < nb; j++) {
        free(b[j].amount);
        free(b[j].term);
    }
    if (oom) r->oom = true;
    free(u);
    free(base);
    free(init_off);
}

typedef struct ptr_scan {
    const kl_source *src;
    TSNode fn;
    reps *r;
    kl_strbuf *names;
    unsigned *group;
} ptr_scan;

static bool find_pointer_locals(TSNode n, void *user)
{
    ptr_scan *d = user;
    if (is_type(n, "init_declarator") && is_type(ts_node_child_by_field_name(n, "declarator", 10), "pointer_declarator")) {
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(n, "declarator", 10));
        char *name = ts_node_is_null(nm) ? NULL : kl_node_text(d->src, nm);
        if (name) fold_pointer(d->src, d->fn, name, (*d->group)++, d->r, d->names);
        free(name);
    }
    return !is_type(n, "lambda_expression");
}

static void step_pointers(const kl_source *src, reps *r, kl_strbuf *summary)
{
    TSNode fns[64];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 64);
    if (nf > 64) nf = 64;
    kl_strbuf names = KL_STRBUF_INIT;
    unsigned group = 1;
    for (unsigned f = 0; f < nf; f++) {
        /* parameters moved by bumps */
        TSNode ps = kl_ast_function_params(fns[f]);
        uint32_t c = ts_node_named_child_count(ps);
        for (uint32_t i = 0; i < c; i++) {
            TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(ts_node_named_child(ps, i), "declarator", 10));
            char *name = ts_node_is_null(nm) ? NULL : kl_node_text(src, nm);
            if (name && is_pointer_param(src, fns[f], name)) fold_pointer(src, fns[f], name, group++, r, &names);
            free(name);
        }
        /* pointer locals */
        ptr_scan d = {src, fns[f], r, &names, &group};
        kl_ast_walk(kl_ast_function_body(fns[f]), find_pointer_locals, &d);
    }
    if (names.len) kl_strbuf_addf(summary, "%sfolded pointers %s", summary->len ? "; " : "", kl_strbuf_str(&names));
    kl_strbuf_release(&names);
}

/* ---- step 4: a 1-D block read as rows and columns ---------------------------------------------
 * A kernel whose every thread index is `threadIdx.x / C` or `threadIdx.x % C` (one compile-time C,
 * no other thread index or blockDim, no helper of the file that reads them), launched only with a
 * 1-D block of C * C threads, is the same program with the 2-D block dim3(C, C): threadIdx.x / C is
 * threadIdx.y and threadIdx.x % C is threadIdx.x, the linear thread order (and so every warp) the
 * same. The launch changes with the kernel, so no edit maps back through this step. */

typedef struct split_scan {
    const kl_source *src;
    TSNode fn;
    TSNode at[64];
    bool row[64];
    unsigned n;
    int64_t c;
    TSNode ctext;
    bool bad;
} split_scan;

static bool split_visit(TSNode n, void *user)
{
    split_scan *s = user;
    if (s->bad) return false;
    if (is_type(n, "call_expression")) {
        TSNode f = ts_node_child_by_field_name(n, "function", 8);
        char *name = is_type(f, "identifier") ? kl_node_text(s->src, f) : NULL;
        TSNode d = name ? kl_ast_function_named(s->src, name) : (TSNode){0};
        char *t = ts_node_is_null(d) ? NULL : kl_node_text(s->src, d);
        if (t && (strstr(t, "threadIdx") || strstr(t, "blockDim"))) s->bad = true;
        free(name);
        free(t);
        return !s->bad;
    }
    if (!is_type(n, "field_expression")) return true;
    TSNode arg = ts_node_child_by_field_name(n, "argument", 8);
    if (!kl_node_text_is(s->src, arg, "threadIdx") && !kl_node_text_is(s->src, arg, "blockDim")) return true;
    TSNode p = ts_node_parent(n), r = ts_node_child_by_field_name(p, "right", 5);
    char *op = is_type(p, "binary_expression") ? kl_node_text(s->src, ts_node_child_by_field_name(p, "operator", 8)) : NULL;
    int64_t v = 0;
    bool split = kl_node_text_is(s->src, n, "threadIdx.x") && op && (!strcmp(op, "/") || !strcmp(op, "%")) &&
                 ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n) && kl_const_eval(s->src, s->fn, r, false, &v, NULL, 0) &&
                 v > 1 && (!s->c || v == s->c) && s->n < 64;
    if (split) {
        s->c = v;
        s->ctext = r;
        s->row[s->n] = !strcmp(op, "/");
        s->at[s->n++] = p;
    } else s->bad = true;
    free(op);
    return false;
}

/* Is name a constant of the file's top level (#define or a declaration), visible at the launch? */
static bool file_level_name(const kl_source *src, TSNode n)
{
    n = kl_ast_unparen(n);
    if (!is_type(n, "identifier")) return false;
    TSNode root = kl_source_root(src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(root, i);
        if (!is_type(d, "preproc_def")) continue;
        char *a = kl_node_text(src, ts_node_child_by_field_name(d, "name", 4)), *b = kl_node_text(src, n);
        bool same = a && b && !strcmp(a, b);
        free(a);
        free(b);
        if (same) return true;
    }
    return false;
}

static void step_blocks(const kl_source *src, reps *r, kl_strbuf *summary)
{
    kl_launch_sites ls = {0};
    if (kl_ast_launches(src, &ls, NULL) != KL_OK) {
        r->oom = true;
        return;
    }
    TSNode fns[64];
    unsigned nf = kl_ast_functions(src, "__global__", fns, 64);
    if (nf > 64) nf = 64;
    for (unsigned f = 0; f < nf; f++) {
        split_scan sc = {.src = src, .fn = fns[f]};
        kl_ast_walk(kl_ast_function_body(fns[f]), split_visit, &sc);
        bool rows = false, cols = false;
        for (unsigned i = 0; i < sc.n; i++) {
            if (sc.row[i]) rows = true;
            else cols = true;
        }
        if (sc.bad || !rows || !cols || sc.c > 32) continue;
        char *kname = kl_ast_function_name(src, fns[f]);
        unsigned launches = 0;
        bool ok = kname != NULL;
        for (unsigned i = 0; ok && i < ls.count; i++) {
            if (strcmp(ls.items[i].kernel, kname)) continue;
            int64_t nt = 0;
            TSNode b = ls.items[i].block;
            ok = !ts_node_is_null(b) && kl_const_eval(src, ls.items[i].host_fn, b, false, &nt, NULL, 0) &&
                 nt == sc.c * sc.c;
            launches++;
        }
        if (ok && launches) {
            char *ct = file_level_name(src, sc.ctext) ? kl_node_text(src, kl_ast_unparen(sc.ctext)) : NULL;
            char dim[300];
            if (ct) kl_snprintf(dim, sizeof dim, "dim3(%s, %s)", ct, ct);
            else kl_snprintf(dim, sizeof dim, "dim3(%lld, %lld)", (long long)sc.c, (long long)sc.c);
            for (unsigned i = 0; i < sc.n; i++)
                reps_add(r, ts_node_start_byte(sc.at[i]), ts_node_end_byte(sc.at[i]),
                         kl_strdup(sc.row[i] ? "threadIdx.y" : "threadIdx.x"), 0);
            for (unsigned i = 0; i < ls.count; i++)
                if (!strcmp(ls.items[i].kernel, kname))
                    reps_add(r, ts_node_start_byte(ls.items[i].block), ts_node_end_byte(ls.items[i].block), kl_strdup(dim), 0);
            r->whole = true;
            kl_strbuf_addf(summary, "%sread the 1-D block of %s as %s (threadIdx.x / %lld, %% %lld)",
                           summary->len ? "; " : "", kname, dim, (long long)sc.c, (long long)sc.c);
            free(ct);
        }
        free(kname);
    }
    kl_launch_sites_release(&ls);
}

/* ---- building ----------------------------------------------------------------------------------- */

typedef void (*step_fn)(const kl_source *src, reps *r, kl_strbuf *summary);

kl_status kl_canon_build(const kl_source *src, kl_canon **out, kl_error *err)
{
    *out = NULL;
    kl_canon *c = calloc(1, sizeof *c);
    kl_strbuf summary = KL_STRBUF_INIT;
    if (!c) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    c->orig = src;
    static const step_fn steps[] = {step_macros, step_templates, step_pointers, step_blocks};
    const kl_source *cur = src;
    kl_status st = KL_OK;
    for (unsigned s = 0; s < 4; s++) {
        reps r = {0};
        kl_strbuf what = KL_STRBUF_INIT;
        steps[s](cur, &r, &what);
        if (r.oom || what.failed || r.bumped.failed) {
            reps_release(&r);
            kl_strbuf_release(&what);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        if (r.n) {
            size_t len = 0;
            const char *text = kl_source_text(cur, &len);
            piece *p = NULL;
            unsigned np = 0;
            char *nt = apply_reps(&r, text, len, &p, &np);
            kl_source *ns = NULL;
            kl_error perr = {0};
            if (!nt) {
                reps_release(&r);
                kl_strbuf_release(&what);
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            if (kl_source_parse_text(kl_source_name(src), nt, strlen(nt), &ns, &perr) == KL_OK &&
                kl_source_error_count(ns) <= kl_source_error_count(cur) && strcmp(nt, text)) {
                c->st[c->nst++] = (step){p, np, ns, r.bumped.len ? kl_strbuf_detach(&r.bumped, NULL) : NULL, r.whole};
                cur = ns;
                kl_strbuf_addf(&summary, "%s%s", summary.len ? "; " : "", kl_strbuf_str(&what));
            } else {
                /* the step would add parse errors (or changed nothing): without it */
                kl_source_free(ns);
                free(p);
            }
            free(nt);
        }
        reps_release(&r);
        kl_strbuf_release(&what);
    }
    if (!c->nst) goto cleanup;
    c->summary = kl_strbuf_detach(&summary, NULL);
    if (!c->summary) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    *out = c;
    c = NULL;
cleanup:
    kl_strbuf_release(&summary);
    kl_canon_free(c);
    return st;
}

void kl_canon_free(kl_canon *c)
{
    if (!c) return;
    for (unsigned i = 0; i < c->nst; i++) {
        free(c->st[i].p);
        free(c->st[i].bumped);
        kl_source_free(c->st[i].out);
    }
    free(c->summary);
    free(c);
}

const kl_source *kl_canon_source(const kl_canon *c) { return c->nst ? c->st[c->nst - 1].out : c->orig; }
const char *kl_canon_summary(const kl_canon *c) { return c->summary ? c->summary : ""; }

/* ---- mapping edits back ------------------------------------------------------------------------ */

/* A point of a step's output in its input: identity outside the pieces, a piece's ends at its ends.
 * False when the point is strictly inside a piece. */
static bool map_point(const step *s, uint32_t p, uint32_t *out)
{
    int64_t delta = 0;
    for (unsigned i = 0; i < s->n; i++) {
        const piece *q = &s->p[i];
        if (p < q->cs) break;
        if (p == q->cs) {
            *out = q->os;
            return true;
        }
        if (p < q->ce) return false;
        if (p == q->ce) {
            *out = q->oe;
            return true;
        }
        delta = (int64_t)q->oe - (int64_t)q->ce;
    }
    *out = (uint32_t)((int64_t)p + delta);
    return true;
}

/* Is piece q wholly inside the edit [a, b)? (An empty piece at b is not.) */
static bool covers(uint32_t a, uint32_t b, const piece *q)
{
    return a <= q->cs && (q->ce < b || (q->ce == b && q->ce > q->cs));
}

/* Does text name `name` (as a whole identifier)? */
static bool names_word(const char *text, const char *name, size_t len)
{
    if (!text || !len) return false;
    for (const char *p = text; *p; p++) {
        if (strncmp(p, name, len)) continue;
        bool before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool after = isalnum((unsigned char)p[len]) || p[len] == '_';
        if (!before && !after) return true;
    }
    return false;
}

static bool map_step(const step *s, const kl_canon_edit *in, unsigned n, kl_canon_edit *out, char *why, size_t size)
{
    if (s->whole && n) {
        kl_snprintf(why, size, "the canonical form reads a 1-D block as a 2-D one, its launch with it: an edit holds "
                               "only there");
        return false;
    }
    /* a pointer folded with its bumps means another address in the text as written wherever a bump
     * came before: an edit naming it lands on the canonical form's meaning only there */
    for (const char *b = s->bumped; b && *b;) {
        const char *e = strchr(b, ' ');
        size_t len = e ? (size_t)(e - b) : strlen(b);
        for (unsigned i = 0; i < n; i++)
            if (names_word(in[i].text, b, len)) {
                kl_snprintf(why, size, "an edit names %.*s, a pointer the canonical form folded with its bumps", (int)len, b);
                return false;
            }
        b += len + (e ? 1 : 0);
    }
    for (unsigned i = 0; i < n; i++) {
        out[i].text = in[i].text;
        if (!map_point(s, in[i].start, &out[i].start) || !map_point(s, in[i].end, &out[i].end)) {
            kl_snprintf(why, size, "an edit at byte %u starts or ends inside a piece the canonical form changed",
                        in[i].start);
            return false;
        }
    }
    /* coupled pieces: all rewritten or none */
    for (unsigned i = 0; i < s->n; i++) {
        unsigned g = s->p[i].group;
        if (!g) continue;
        bool first = true;
        for (unsigned k = 0; k < i; k++) first &= s->p[k].group != g;
        if (!first) continue;
        unsigned total = 0, covered = 0;
        for (unsigned k = i; k < s->n; k++) {
            if (s->p[k].group != g) continue;
            total++;
            for (unsigned e = 0; e < n; e++)
                if (covers(in[e].start, in[e].end, &s->p[k])) {
                    covered++;
                    break;
                }
        }
        if (covered && covered < total) {
            kl_snprintf(why, size, "the edits reach %u of the %u places of one pointer the canonical form folded", covered,
                        total);
            return false;
        }
    }
    return true;
}

bool kl_canon_map_edits(const kl_canon *c, const kl_canon_edit *edits, unsigned n, kl_canon_edit *out, char *why,
                        size_t why_size)
{
    if (why && why_size) why[0] = '\0';
    kl_canon_edit *tmp = calloc(n ? n : 1, sizeof *tmp);
    char scratch[160];
    if (!why || !why_size) why = scratch, why_size = sizeof scratch;
    if (!tmp) {
        kl_snprintf(why, why_size, "out of memory");
        return false;
    }
    memcpy(out, edits, n * sizeof *out);
    bool ok = true;
    for (unsigned s = c->nst; ok && s-- > 0;) {
        ok = map_step(&c->st[s], out, n, tmp, why, why_size);
        if (ok) memcpy(out, tmp, n * sizeof *out);
    }
    free(tmp);
    return ok;
}
