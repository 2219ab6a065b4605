/*
 * specialize: a kernel specialized for the shapes that allow it (a compile-time size, a
 * register-resident row, an aligned case …), chosen at the launch site, beside a general kernel
 * that handles every shape.
 *
 * Present (remove): a host function whose launch of the general kernel G is reached under a
 * condition on the sizes, the other branch reaching a different kernel S (directly or through host
 * helpers of the file). Three forms: `if (C) { …G…; return; } rest` (the rest reaches S), an
 * if / else-if / else chain, and a `switch` with a `default`. Remove keeps only the general path:
 * the dispatch statement becomes the general branch's statements (its trailing `return;` /
 * `break;` dropped), and every file-level item that only the removed path used (S, its host
 * helpers, device helpers, constants, static_asserts, locals of the host function) is deleted with
 * the comment lines just above it; the header's list entry describing the removed path goes too.
 *
 * Which branch is general: the branch taken under a condition that admits unbounded shapes
 * (`n > B`, `n >= B`, `B < n`, `n != V`), else the else / fall-through when every condition is
 * bounded (`n == V`, `n <= B`, `n < B`, conjunctions with one of these); a switch's `default`.
 * Anything else is "not applicable: cannot tell which branch is general".
 *
 * Applicable (apply): a non-template kernel with an integer parameter P used as a loop bound
 * (`for (…; j < P; …)`), never assigned, launched from host code: apply adds, after the kernel, a
 * copy `template <int PU> __global__ void <kernel>_<PU>(same parameters)` whose body uses PU
 * wherever it used P (a `#pragma unroll` on each loop bounded by it), and turns each launch into
 * `if (P == V1) <kernel>_<PU><V1><<<…>>>(…); else if … else <kernel><<<…>>>(…);` for the values
 * of the parameter `values` (e.g. values=5,7; required).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/specialize.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const kl_rule_param sp_params[] = {{"values", NULL, NULL}};

/* ---- identifier tokens (comments, strings and numbers skipped) ----------------------------- */

static bool toks_push(toks *t, uint32_t a, uint32_t b)
{
    if (t->n == t->cap) {
        unsigned nc = t->cap ? t->cap * 2 : 256;
        tok *ni = realloc(t->items, nc * sizeof *ni);
        if (!ni) return false;
        t->items = ni;
        t->cap = nc;
    }
    t->items[t->n++] = (tok){a, b};
    return true;
}

static bool is_id0(char c) { return isalpha((unsigned char)c) || c == '_'; }
bool specialize__is_id(char c) { return isalnum((unsigned char)c) || c == '_'; }

bool specialize__tokenize(const char *s, size_t len, toks *out)
{
    size_t i = 0;
    while (i < len) {
        char c = s[i];
        if (c == '/' && i + 1 < len && s[i + 1] == '/') {
            while (i < len && s[i] != '\n') i++;
        } else if (c == '/' && i + 1 < len && s[i + 1] == '*') {
            i += 2;
            while (i + 1 < len && !(s[i] == '*' && s[i + 1] == '/')) i++;
            i += 2;
        } else if (c == '"' || c == '\'') {
            i++;
            while (i < len && s[i] != c && s[i] != '\n') i += s[i] == '\\' ? 2 : 1;
            i++;
        } else if (isdigit((unsigned char)c)) {
            while (i < len && (specialize__is_id(s[i]) || s[i] == '.')) i++;
        } else if (is_id0(c)) {
            size_t a = i;
            while (i < len && specialize__is_id(s[i])) i++;
            if (!toks_push(out, (uint32_t)a, (uint32_t)i)) return false;
        } else {
            i++;
        }
    }
    return true;
}

bool specialize__tok_is(const char *text, const tok *t, const char *name)
{
    size_t n = strlen(name);
    return t->end - t->start == n && !memcmp(text + t->start, name, n);
}

/* ---- byte ranges --------------------------------------------------------------------------- */

bool specialize__ranges_add(ranges *r, uint32_t a, uint32_t b)
{
    if (r->n == SP_MAXRANGE) return false;
    r->a[r->n] = a;
    r->b[r->n] = b;
    r->n++;
    return true;
}

bool specialize__ranges_has(const ranges *r, uint32_t off)
{
    for (unsigned i = 0; i < r->n; i++)
        if (off >= r->a[i] && off < r->b[i]) return true;
    return false;
}

/* ---- text helpers ---------------------------------------------------------------------------- */

/* Is the line starting at `ls` blank? */
bool specialize__line_blank(const kl_rule_ctx *ctx, uint32_t ls)
{
    for (uint32_t i = ls; i < ctx->len && ctx->text[i] != '\n'; i++)
        if (!isspace((unsigned char)ctx->text[i])) return false;
    return ls < ctx->len;
}

/* Does the line starting at `ls` hold only a `//` comment? */
bool specialize__line_comment(const kl_rule_ctx *ctx, uint32_t ls)
{
    uint32_t i = ls;
    while (i < ctx->len && (ctx->text[i] == ' ' || ctx->text[i] == '\t')) i++;
    return i + 1 < ctx->len && ctx->text[i] == '/' && ctx->text[i + 1] == '/';
}

/* The whole lines of [a, b) when only blanks surround it on its first and last line (the end
 * may be followed by a `//` comment, which goes with it); false otherwise. */
bool specialize__whole_lines(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, uint32_t *ra, uint32_t *rb)
{
    if (!rt_line_blank_before(ctx, a)) return false;
    uint32_t e = b;
    while (e < ctx->len && (ctx->text[e] == ' ' || ctx->text[e] == '\t' || ctx->text[e] == '\r')) e++;
    if (e + 1 < ctx->len && ctx->text[e] == '/' && ctx->text[e + 1] == '/')
        while (e < ctx->len && ctx->text[e] != '\n') e++;
    if (e < ctx->len && ctx->text[e] != '\n') return false;
    *ra = rt_line_start(ctx, a);
    *rb = e < ctx->len ? e + 1 : e;
    return true;
}

/* Move a line start up over the `//` comment lines just above it (not into the file's header:
 * a comment block that reaches the first line stays). */
uint32_t specialize__comments_above(const kl_rule_ctx *ctx, uint32_t ls)
{
    uint32_t at = ls;
    while (at > 0) {
        uint32_t prev = rt_line_start(ctx, at - 1);
        if (!specialize__line_comment(ctx, prev)) break;
        at = prev;
    }
    return at == 0 ? ls : at;
}

/* Write [a, b) (trimmed) re-indented: its least indented line at `indent`, the others kept
 * relative to it; a first line that does not start its line counts from its column. */
void specialize__emit_block(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *indent, kl_strbuf *sb)
{
    while (a < b && isspace((unsigned char)ctx->text[a])) a++;
    while (b > a && isspace((unsigned char)ctx->text[b - 1])) b--;
    if (a >= b) return;
    /* the least indentation of the non-blank lines */
    unsigned m = a - rt_line_start(ctx, a);
    for (uint32_t i = a; i < b; i++) {
        if (ctx->text[i] != '\n') continue;
        uint32_t k = i + 1;
        unsigned w = 0;
        while (k < b && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++, w++;
        if (k < b && ctx->text[k] != '\n' && w < m) m = w;
    }
    unsigned first = a - rt_line_start(ctx, a);
    uint32_t i = a;
    bool firstline = true;
    while (i < b) {
        uint32_t e = i;
        while (e < b && ctx->text[e] != '\n') e++;
        unsigned w = 0;
        uint32_t k = i;
        if (firstline) {
            w = first;
        } else {
            while (k < e && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++, w++;
        }
        if (k < e) {
            kl_strbuf_adds(sb, indent);
            for (unsigned x = m; x < w; x++) kl_strbuf_addc(sb, ' ');
            kl_strbuf_add(sb, ctx->text + k, e - k);
        }
        kl_strbuf_addc(sb, '\n');
        firstline = false;
        i = e + 1;
    }
}

/* ---- functions, kernels, reach ------------------------------------------------------------------- */

static bool is_host(const rt_func *f) { return !f->global && !f->device; }

/* The name a call calls: `f(…)`, `f<…>(…)`, `k<<<…>>>(…)`. */
static TSNode callee_name(TSNode call)
{
    TSNode f = rt_field(call, "function");
    if (rt_is(f, "template_function")) f = rt_field(f, "name");
    return rt_is(f, "identifier") ? f : (TSNode){0};
}

static bool is_launch(TSNode call) { return !ts_node_is_null(kl_ast_child_of_type(call, "kernel_call_syntax")); }

static int func_index(const kl_rule_ctx *ctx, const fileinfo *fi, TSNode name)
{
    if (ts_node_is_null(name)) return -1;
    for (unsigned i = 0; i < fi->nf; i++)
        if (rt_text_is(ctx, name, fi->fs[i].name)) return (int)i;
    return -1;
}

typedef struct reach_walk {
    const kl_rule_ctx *ctx;
    const fileinfo *fi;
    uint64_t mask;
    bool use_reach;   /* add the reach of called host functions */
    uint64_t calls;   /* host functions called (bits by function index) */
} reach_walk;

static bool reach_visit(TSNode n, void *user)
{
    reach_walk *w = user;
    if (!rt_is(n, "call_expression")) return true;
    int f = func_index(w->ctx, w->fi, callee_name(n));
    if (f < 0 || f >= 64) return true;
    if (is_launch(n)) {
        if (w->fi->kernel_of[f] >= 0) w->mask |= (uint64_t)1 << w->fi->kernel_of[f];
    } else if (is_host(&w->fi->fs[f])) {
        w->calls |= (uint64_t)1 << f;
        if (w->use_reach) w->mask |= w->fi->reach[f];
    }
    return true;
}

static uint64_t reach_of(const kl_rule_ctx *ctx, const fileinfo *fi, TSNode n)
{
    reach_walk w = {ctx, fi, 0, true, 0};
    if (!ts_node_is_null(n)) kl_ast_walk(n, reach_visit, &w);
    return w.mask;
}

void specialize__file_info(const kl_rule_ctx *ctx, fileinfo *fi)
{
    memset(fi, 0, sizeof *fi);
    fi->nf = rt_functions(ctx, fi->fs, SP_MAXFN);
    int nk = 0;
    for (unsigned i = 0; i < fi->nf; i++) fi->kernel_of[i] = fi->fs[i].global && nk < 64 ? nk++ : -1;
    /* direct launches, then the helpers' reach until nothing changes */
    uint64_t calls[SP_MAXFN];
    for (unsigned i = 0; i < fi->nf; i++) {
        reach_walk w = {ctx, fi, 0, false, 0};
        if (is_host(&fi->fs[i])) kl_ast_walk(fi->fs[i].body, reach_visit, &w);
        fi->reach[i] = w.mask;
        calls[i] = w.calls;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (unsigned i = 0; i < fi->nf && i < 64; i++)
            for (unsigned k = 0; k < fi->nf && k < 64; k++)
                if ((calls[i] >> k & 1) && (fi->reach[i] | fi->reach[k]) != fi->reach[i]) {
                    fi->reach[i] |= fi->reach[k];
                    changed = true;
                }
    }
}

static const char *kernel_name(const fileinfo *fi, int bit)
{
    for (unsigned i = 0; i < fi->nf; i++)
        if (fi->kernel_of[i] == bit) return fi->fs[i].name;
    return "";
}

static const rt_func *kernel_func(const fileinfo *fi, int bit)
{
    for (unsigned i = 0; i < fi->nf; i++)
        if (fi->kernel_of[i] == bit) return &fi->fs[i];
    return NULL;
}

/* ---- conditions: which side admits the unbounded shapes ------------------------------------------- */

static bool is_const(const kl_rule_ctx *ctx, TSNode scope, TSNode e)
{
    int64_t v;
    return kl_const_eval(ctx->src, scope, e, false, &v, NULL, 0);
}

/* +1: the condition admits shapes without an upper bound (the general kernel's branch); -1: it
 * bounds them (equality, an upper bound: the specialized branch); 0: cannot tell. */
static int cond_class(const kl_rule_ctx *ctx, TSNode scope, TSNode e)
{
    e = rt_unparen_cond(e);
    if (rt_is(e, "unary_expression")) {
        char *op = rt_text(ctx, rt_field(e, "operator"));
        int r = op && !strcmp(op, "!") ? -cond_class(ctx, scope, rt_field(e, "argument")) : 0;
        free(op);
        return r;
    }
    if (!rt_is(e, "binary_expression")) return 0;
    TSNode l = rt_field(e, "left"), r = rt_field(e, "right");
    char *op = rt_text(ctx, rt_field(e, "operator"));
    if (!op) return 0;
    int out = 0;
    if (!strcmp(op, "||") || !strcmp(op, "&&")) {
        int a = cond_class(ctx, scope, l), b = cond_class(ctx, scope, r);
        bool conj = op[0] == '&';
        if (conj) out = (a < 0 || b < 0) ? -1 : (a > 0 && b > 0) ? 1 : 0;
        else out = (a > 0 || b > 0) ? 1 : (a < 0 && b < 0) ? -1 : 0;
    } else if (!strcmp(op, "==")) {
        out = -1;
    } else if (!strcmp(op, "!=")) {
        out = 1;
    } else if (!strcmp(op, "<") || !strcmp(op, "<=") || !strcmp(op, ">") || !strcmp(op, ">=")) {
        bool lc = is_const(ctx, scope, l), rc = is_const(ctx, scope, r);
        bool less = op[0] == '<';
        if (rc && !lc) out = less ? -1 : 1;
        else if (lc && !rc) out = less ? 1 : -1;
    }
    free(op);
    return out;
}

/* ---- the dispatch sites --------------------------------------------------------------------------- */

/* The statements after `stmt` in its compound, as one mask. */
static uint64_t rest_mask(const kl_rule_ctx *ctx, const fileinfo *fi, TSNode stmt)
{
    uint64_t m = 0;
    for (TSNode s = ts_node_next_named_sibling(stmt); !ts_node_is_null(s); s = ts_node_next_named_sibling(s))
        m |= reach_of(ctx, fi, s);
    return m;
}

static bool ends_with_return(TSNode s)
{
    if (rt_is(s, "return_statement")) return ts_node_named_child_count(s) == 0;
    if (!rt_is(s, "compound_statement")) return false;
    TSNode l = rt_last_stmt(s);
    return rt_is(l, "return_statement") && ts_node_named_child_count(l) == 0;
}

/* Recognise a dispatch at statement s of host h. False: not one (kernels not different). */
bool specialize__dispatch_at(const kl_rule_ctx *ctx, const fileinfo *fi, const rt_func *h, TSNode s, dispatch *d)
{
    memset(d, 0, sizeof *d);
    d->stmt = s;
    d->host = h;
    d->general = -1;
    unsigned line = ts_node_start_point(s).row + 1;
    if (rt_is(s, "if_statement")) {
        TSNode alt = rt_field(s, "alternative");
        if (ts_node_is_null(alt)) {
            TSNode cons = rt_field(s, "consequence");
            if (!ends_with_return(cons)) return false;
            d->form = FORM_RETURN;
            d->br[0] = (branch){rt_field(s, "condition"), cons, reach_of(ctx, fi, cons)};
            d->br[1] = (branch){.mask = rest_mask(ctx, fi, s)};
            d->nbr = 2;
        } else {
            d->form = FORM_CHAIN;
            TSNode cur = s;
            while (d->nbr < SP_MAXBR) {
                TSNode cons = rt_field(cur, "consequence");
                d->br[d->nbr++] = (branch){rt_field(cur, "condition"), cons, reach_of(ctx, fi, cons)};
                TSNode a = rt_field(cur, "alternative");
                if (ts_node_is_null(a)) break;
                TSNode in = ts_node_named_child(a, 0);
                while (rt_is(in, "comment")) in = ts_node_next_named_sibling(in);
                if (rt_is(in, "if_statement")) {
                    cur = in;
                    continue;
                }
                if (d->nbr < SP_MAXBR) d->br[d->nbr++] = (branch){.body = in, .mask = reach_of(ctx, fi, in)};
                break;
            }
        }
    } else if (rt_is(s, "switch_statement")) {
        d->form = FORM_SWITCH;
        TSNode body = rt_field(s, "body");
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c && d->nbr < SP_MAXBR; i++) {
            TSNode cs = ts_node_named_child(body, i);
            if (!rt_is(cs, "case_statement")) continue;
            d->br[d->nbr++] = (branch){rt_field(cs, "value"), cs, reach_of(ctx, fi, cs)};
        }
    } else {
        return false;
    }
    /* kernels on at least two sides, not the same ones everywhere */
    uint64_t all = 0;
    unsigned with = 0;
    for (unsigned i = 0; i < d->nbr; i++) {
        if (d->br[i].mask) with++;
        all |= d->br[i].mask;
    }
    if (with < 2 || !(all & (all - 1))) return false;

    /* which branch is general */
    if (d->form == FORM_SWITCH) {
        for (unsigned i = 0; i < d->nbr; i++)
            if (ts_node_is_null(d->br[i].cond)) d->general = (int)i;
        if (d->general < 0)
            kl_snprintf(d->why, sizeof d->why, "the switch at line %u has no default: no branch handles every value", line);
    } else {
        int unbounded = -1, nunb = 0;
        bool all_bounded = true;
        TSNode unknown = {0};
        for (unsigned i = 0; i < d->nbr; i++) {
            if (ts_node_is_null(d->br[i].cond)) continue;
            int c = cond_class(ctx, h->def, d->br[i].cond);
            if (c > 0) unbounded = (int)i, nunb++;
            if (c <= 0 && c != -1) all_bounded = false;
            if (c > 0) all_bounded = false;
            if (c == 0 && ts_node_is_null(unknown)) unknown = d->br[i].cond;
        }
        bool has_else = ts_node_is_null(d->br[d->nbr - 1].cond);
        if (all_bounded && has_else) {
            d->general = (int)d->nbr - 1;
        } else if (nunb == 1 && ts_node_is_null(unknown)) {
            d->general = unbounded;
        } else {
            char *ct = rt_text(ctx, rt_unparen_cond(ts_node_is_null(unknown) ? d->br[0].cond : unknown));
            kl_snprintf(d->why, sizeof d->why,
                        "cannot tell which branch is general at line %u: the condition '%s' neither bounds the sizes "
                        "(==, <, <=) nor admits unbounded ones (>, >=, !=)%s",
                        line, ct ? ct : "?", has_else || d->form == FORM_RETURN ? "" : ", and there is no else");
            free(ct);
        }
    }
    if (d->general >= 0) {
        /* the general kernel is launched on its branch only */
        uint64_t others = 0;
        for (unsigned i = 0; i < d->nbr; i++)
            if ((int)i != d->general) others |= d->br[i].mask;
        if ((others & d->br[d->general].mask) || !others) return false;
    }
    if (d->general >= 0 && !d->br[d->general].mask) {
        kl_snprintf(d->why, sizeof d->why, "the general branch at line %u launches no kernel", line);
        d->general = -1;
    }
    return true;
}

/* The condition as one line: the chain's conditions for the specialized branches. */
static char *dispatch_condition(const kl_rule_ctx *ctx, const dispatch *d)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (d->form == FORM_SWITCH) {
        char *v = rt_text(ctx, rt_unparen_cond(rt_field(d->stmt, "condition")));
        for (unsigned i = 0; i < d->nbr; i++) {
            if (ts_node_is_null(d->br[i].cond)) continue;
            char *c = rt_text(ctx, d->br[i].cond);
            kl_strbuf_addf(&sb, "%s%s == %s", sb.len ? " || " : "", v ? v : "?", c ? c : "?");
            free(c);
        }
        free(v);
    } else if (d->general >= 0 && !ts_node_is_null(d->br[d->general].cond)) {
        char *c = rt_text(ctx, rt_unparen_cond(d->br[d->general].cond));
        kl_strbuf_adds(&sb, c ? c : "?");
        free(c);
    } else {
        /* the general branch is the else: the specialized branches' conditions */
        for (unsigned i = 0; i < d->nbr; i++) {
            if (ts_node_is_null(d->br[i].cond)) continue;
            char *c = rt_text(ctx, rt_unparen_cond(d->br[i].cond));
            kl_strbuf_addf(&sb, "%s%s", sb.len ? " || " : "", c ? c : "?");
            free(c);
        }
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

static bool template_on_size(const kl_rule_ctx *ctx, const rt_func *f)
{
    if (!f || !f->templated) return false;
    TSNode tl = rt_field(f->outer, "parameters");
    uint32_t c = ts_node_named_child_count(tl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode p = ts_node_named_child(tl, i);
        if (!rt_is(p, "parameter_declaration") && !rt_is(p, "optional_parameter_declaration")) continue;
        char *t = rt_text(ctx, rt_field(p, "type"));
        bool sized = t && (!strcmp(t, "int") || !strcmp(t, "unsigned") || !strcmp(t, "size_t") ||
                           !strcmp(t, "unsigned int") || !strcmp(t, "long"));
        free(t);
        if (sized) return true;
    }
    return false;
}

/* ---- find -------------------------------------------------------------------------------------------- */

static kl_status add_present(const kl_rule_ctx *ctx, const fileinfo *fi, const dispatch *d, kl_sites *out)
{
    char id[256];
    kl_site_id(id, sizeof id, d->host->name, d->stmt, NULL);
    json_t *f = json_object(), *spec = json_array();
    if (!f || !spec) {
        json_decref(f);
        json_decref(spec);
        return KL_ERR_NOMEM;
    }
    char *cond = dispatch_condition(ctx, d);
    static const char *const forms[] = {"if-return", "if-else", "switch"};
    json_object_set_new(f, "form", json_string(forms[d->form]));
    json_object_set_new(f, "condition", json_string(cond ? cond : ""));
    json_object_set_new(f, "host", json_string(d->host->name));
    bool tmpl = false;
    uint64_t seen = 0;
    kl_strbuf note = KL_STRBUF_INIT;
    uint64_t gm = d->general >= 0 ? d->br[d->general].mask : 0;
    for (int b = 0; b < 64; b++) {
        uint64_t bit = (uint64_t)1 << b;
        if (gm & bit) {
            json_object_set_new(f, "general", json_string(kernel_name(fi, b)));
            kl_strbuf_addf(&note, "%s", kernel_name(fi, b));
        }
    }
    for (unsigned i = 0; i < d->nbr; i++) {
        if ((int)i == d->general) continue;
        for (int b = 0; b < 64; b++)
            if ((d->br[i].mask >> b & 1) && !(seen >> b & 1)) {
                seen |= (uint64_t)1 << b;
                json_array_append_new(spec, json_string(kernel_name(fi, b)));
                tmpl |= template_on_size(ctx, kernel_func(fi, b));
            }
    }
    json_object_set_new(f, "specialized", spec);
    json_object_set_new(f, "template_size", json_boolean(tmpl));
    if (d->general < 0) json_object_set_new(f, "why_not", json_string(d->why));
    kl_strbuf txt = KL_STRBUF_INIT;
    if (d->general >= 0)
        kl_strbuf_addf(&txt, "%s dispatches on %s: %s handles every shape", d->host->name, cond ? cond : "",
                       kl_strbuf_str(&note));
    else
        kl_strbuf_adds(&txt, d->why);
    free(cond);
    kl_strbuf_release(&note);
    kl_status st = txt.failed ? KL_ERR_NOMEM
                              : kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(d->stmt), d->host->name, f, NULL,
                                             kl_strbuf_str(&txt));
    kl_strbuf_release(&txt);
    return st;
}

/* An applicable site: kernel k with an int parameter used as a loop bound. */
typedef struct loopbound {
    char param[64];
    int index;        /* among the kernel's parameters */
    unsigned loops;
} loopbound;

static bool find_loop_bound(const kl_rule_ctx *ctx, const rt_func *k, loopbound *lb, char *why, size_t wsize)
{
    kl_affine_ctx *ax = NULL;
    kl_error e = {0};
    if (kl_rules_affine(ctx, k->def, &ax, &e) != KL_OK) return false;
    bool found = false;
    unsigned nl = kl_affine_loop_count(ax);
    for (unsigned i = 0; i < nl && !found; i++) {
        const kl_ax_loop *l = kl_affine_loop(ax, i);
        if (!l->var || !l->bound || !l->cmp || (strcmp(l->cmp, "<") && strcmp(l->cmp, "<="))) continue;
        int pi = kl_affine_param_index(ax, l->bound);
        if (pi < 0) continue;
        const kl_param_info *p = kl_affine_param(ax, (unsigned)pi);
        if (p->pointer || !p->elem || (strcmp(p->elem, "int") && strcmp(p->elem, "unsigned") &&
                                       strcmp(p->elem, "unsigned int") && strcmp(p->elem, "size_t")))
            continue;
        if (kl_affine_assign_count(ax, l->bound) > 0) {
            kl_snprintf(why, wsize, "%s assigns %s: it is no constant to specialize on", k->name, l->bound);
            continue;
        }
        kl_snprintf(lb->param, sizeof lb->param, "%s", l->bound);
        lb->index = pi;
        found = true;
    }
    if (found) {
        lb->loops = 0;
        for (unsigned i = 0; i < nl; i++) {
            const kl_ax_loop *l = kl_affine_loop(ax, i);
            if (l->bound && !strcmp(l->bound, lb->param)) lb->loops++;
        }
    }
    kl_rules_affine_done(ctx, ax);
    return found;
}

static void upper_name(const char *p, char *out, size_t size)
{
    size_t i = 0;
    for (; p[i] && i + 1 < size; i++) out[i] = (char)toupper((unsigned char)p[i]);
    out[i] = '\0';
}

/* Does the file define `name` at top level (a function, a declaration) or does text [a, b) use it? */
static bool name_taken(const kl_rule_ctx *ctx, const fileinfo *fi, const char *name, uint32_t a, uint32_t b)
{
    for (unsigned i = 0; i < fi->nf; i++)
        if (!strcmp(fi->fs[i].name, name)) return true;
    toks t = {0};
    bool taken = false;
    if (!specialize__tokenize(ctx->text, ctx->len, &t)) return true;
    for (unsigned i = 0; i < t.n && !taken; i++) {
        if (!specialize__tok_is(ctx->text, &t.items[i], name)) continue;
        /* inside the kernel, or at file level (a constant, a macro) */
        if (t.items[i].start >= a && t.items[i].start < b) taken = true;
        TSNode n = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), t.items[i].start, t.items[i].end);
        if (ts_node_is_null(kl_ast_enclosing_function(n)) && !rt_is(ts_node_parent(n), "template_parameter_list") &&
            ts_node_is_null(rt_ancestor(n, "template_parameter_list")))
            taken = true;
    }
    free(t.items);
    return taken;
}

static kl_status add_applicable(const kl_rule_ctx *ctx, const fileinfo *fi, const rt_func *k, kl_sites *out)
{
    loopbound lb = {0};
    char why[300] = "";
    if (k->templated || !find_loop_bound(ctx, k, &lb, why, sizeof why)) return KL_OK;
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, k->name, ls, 16);
    if (nl == 0) return KL_OK;
    char up[64], tname[200];
    upper_name(lb.param, up, sizeof up);
    if (!strcmp(up, lb.param) || name_taken(ctx, fi, up, ts_node_start_byte(k->outer), ts_node_end_byte(k->outer))) {
        char alt[80];
        kl_snprintf(alt, sizeof alt, "KL_%s", up);
        kl_snprintf(up, sizeof up, "%s", alt);
    }
    kl_snprintf(tname, sizeof tname, "%s_%s", k->name, up);
    json_t *f = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s}", "kernel", k->name, "param", lb.param, "loops", (int)lb.loops,
                          "launches", (int)nl, "template_param", up, "template_kernel", tname);
    if (!f) return KL_ERR_NOMEM;
    if (name_taken(ctx, fi, tname, 0, 0)) {
        kl_snprintf(why, sizeof why, "%s is already specialized: the file defines %s", k->name, tname);
        json_object_set_new(f, "why_not", json_string(why));
    }
    for (unsigned i = 0; i < nl && !json_object_get(f, "why_not"); i++) {
        TSNode stmt = ts_node_parent(ls[i].call);
        unsigned line = ts_node_start_point(ls[i].call).row + 1;
        if (!rt_is(stmt, "expression_statement") || !rt_is(ts_node_parent(stmt), "compound_statement")) {
            kl_snprintf(why, sizeof why, "the launch of %s at line %u is not a statement of its own in a block",
                        k->name, line);
            json_object_set_new(f, "why_not", json_string(why));
        } else if (!is_host(&ls[i].host)) {
            kl_snprintf(why, sizeof why, "the launch of %s at line %u is in device code", k->name, line);
            json_object_set_new(f, "why_not", json_string(why));
        } else if (ts_node_is_null(ls[i].args) || ts_node_named_child_count(ls[i].args) <= (uint32_t)lb.index) {
            kl_snprintf(why, sizeof why, "the launch of %s at line %u does not pass %s", k->name, line, lb.param);
            json_object_set_new(f, "why_not", json_string(why));
        } else {
            TSNode arg = ts_node_named_child(ls[i].args, (uint32_t)lb.index);
            bool pure = true;
            char *at = rt_text(ctx, arg);
            if (at && (strchr(at, '(') || strstr(at, "++") || strstr(at, "--") || strchr(at, '='))) pure = false;
            free(at);
            if (!pure) {
                kl_snprintf(why, sizeof why, "the launch of %s at line %u passes %s as an expression with a call or a "
                            "side effect", k->name, line, lb.param);
                json_object_set_new(f, "why_not", json_string(why));
            }
        }
    }
    char id[256];
    kl_site_id(id, sizeof id, k->name, k->def, lb.param);
    char note[400];
    const char *w = json_string_value(json_object_get(f, "why_not"));
    if (w) kl_snprintf(note, sizeof note, "%s", w);
    else
        kl_snprintf(note, sizeof note, "%s bounds loops by its parameter %s: a copy with %s a template constant can "
                    "be dispatched for typical values", k->name, lb.param, lb.param);
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(k->def), k->name, f, NULL, note);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    (void)err;
    fileinfo *fi = malloc(sizeof *fi);
    if (!fi) return KL_ERR_NOMEM;
    specialize__file_info(ctx, fi);
    kl_status st = KL_OK;
    for (unsigned i = 0; i < fi->nf && st == KL_OK; i++) {
        const rt_func *h = &fi->fs[i];
        if (!is_host(h)) continue;
        uint32_t c = ts_node_named_child_count(h->body);
        for (uint32_t k = 0; k < c && st == KL_OK; k++) {
            TSNode s = ts_node_named_child(h->body, k);
            dispatch d;
            if (specialize__dispatch_at(ctx, fi, h, s, &d)) st = add_present(ctx, fi, &d, out);
        }
    }
    for (unsigned i = 0; i < fi->nf && st == KL_OK; i++)
        if (fi->fs[i].global) st = add_applicable(ctx, fi, &fi->fs[i], out);
    free(fi);
    return st;
}

/* ---- apply ------------------------------------------------------------------------------------------------ */

static bool parse_values(const char *s, long long *v, unsigned *n, unsigned max)
{
    *n = 0;
    while (s && *s) {
        while (*s == ' ') s++;
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || *n == max) return false;
        for (unsigned i = 0; i < *n; i++)
            if (v[i] == x) return false;
        v[(*n)++] = x;
        s = end;
        while (*s == ' ') s++;
        if (*s == ',') s++;
        else if (*s) return false;
    }
    return *n > 0;
}

typedef struct ident_walk {
    const kl_rule_ctx *ctx;
    const char *name;
    uint32_t base;
    kl_edits *ed;
    const char *repl;
    bool failed;
} ident_walk;

static bool ident_visit(TSNode n, void *user)
{
    ident_walk *w = user;
    if (rt_is(n, "identifier") && rt_text_is(w->ctx, n, w->name)) {
        TSNode par = ts_node_parent(n);
        if (rt_is(par, "field_expression") && ts_node_eq(rt_field(par, "field"), n)) return false;
        if (kl_edits_add(w->ed, ts_node_start_byte(n) - w->base, ts_node_end_byte(n) - w->base, w->repl) != KL_OK)
            w->failed = true;
    }
    return true;
}

/* Without values=, the task's bench value of the parameter, when at most this: the copy unrolls
 * every loop the parameter bounds, and a trip count in the thousands is no constant to unroll. */
#define SP_DERIVED_MAX 64

/* The task's bench value of the kernel parameter at position index: every launch of kname passes
 * it as a parameter of the task's launch() that is one of the task's sizes (launch takes the
 * task's arguments in order; a size argument is named after its size). */
static bool bench_value(const kl_rule_ctx *ctx, const char *kname, int index, long long *v)
{
    if (!ctx->task || index < 0) return false;
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, kname, ls, 16);
    bool found = false;
    for (unsigned i = 0; i < nl; i++) {
        if (strcmp(ls[i].host.name, "launch") || ts_node_is_null(ls[i].args) ||
            ts_node_named_child_count(ls[i].args) <= (uint32_t)index)
            return false;
        TSNode arg = ts_node_named_child(ls[i].args, (uint32_t)index);
        if (!rt_is(arg, "identifier")) return false;
        long long here = 0;
        bool ok = false;
        uint32_t np = ts_node_named_child_count(ls[i].host.params), p = 0;
        for (uint32_t k = 0; k < np && !ok; k++) {
            TSNode pd = ts_node_named_child(ls[i].host.params, k);
            if (!rt_is(pd, "parameter_declaration")) continue;
            TSNode nm = kl_ast_declarator_name(rt_field(pd, "declarator"));
            char *b = ts_node_is_null(nm) ? NULL : rt_text(ctx, nm);
            bool same = b && rt_text_is(ctx, arg, b);
            free(b);
            for (unsigned z = 0; same && p < ctx->task->nargs && z < ctx->task->nsizes && !ok; z++)
                if (ctx->task->args[p].name && !strcmp(ctx->task->args[p].name, ctx->task->sizes[z])) {
                    here = ctx->task->bench.values[z];
                    ok = true;
                }
            p++;
        }
        if (!ok || (found && here != *v)) return false;
        *v = here;
        found = true;
    }
    return found;
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    kl_status refused = kl_site_why_not(site, err);
    if (refused != KL_OK) return refused;
    const char *vs = NULL;
    kl_rule_param_str(&kl_rule_specialize, params, "values", &vs);
    if ((!vs || !*vs) && !ctx->task)
        return kl_rule_not_applicable(err, "%s needs values=… (the typical values of %s, e.g. values=5,7)", site->id,
                                      json_string_value(json_object_get(site->features, "param")));
    long long vals[16];
    unsigned nv = 0;
    if (vs && *vs && !parse_values(vs, vals, &nv, 16))
        return kl_error_set(err, KL_ERR_INVALID,
                            "specialize: values=%s is not a comma-separated list of distinct integers (at most 16)", vs);
    const char *param = json_string_value(json_object_get(site->features, "param"));
    const char *tp = json_string_value(json_object_get(site->features, "template_param"));
    const char *tk = json_string_value(json_object_get(site->features, "template_kernel"));
    const char *kname = json_string_value(json_object_get(site->features, "kernel"));
    if (!param || !tp || !tk || !kname) return kl_rule_not_applicable(err, "no kernel at %s", site->id);
    kl_status st = KL_OK;
    fileinfo *fi = malloc(sizeof *fi);
    kl_edits local = {0};
    char *copy = NULL;
    if (!fi) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    specialize__file_info(ctx, fi);
    const rt_func *k = rt_function_named(fi->fs, fi->nf, kname);
    loopbound lb = {0};
    char w[300];
    if (!k || !find_loop_bound(ctx, k, &lb, w, sizeof w) || strcmp(lb.param, param)) {
        st = kl_rule_not_applicable(err, "no loop bounded by %s in %s", param, kname);
        goto cleanup;
    }
    if (nv == 0) {
        /* no values given: the one the task measures at, where launch() passes a size of the task
         * and the value is small enough to unroll the loops it bounds */
        if (!bench_value(ctx, kname, lb.index, &vals[0])) {
            st = kl_rule_not_applicable(err,
                                        "%s needs values=… (the typical values of %s, e.g. values=5,7): launch() "
                                        "does not pass it from a size of the task",
                                        site->id, param);
            goto cleanup;
        }
        if (vals[0] < 1 || vals[0] > SP_DERIVED_MAX) {
            st = kl_rule_not_applicable(err,
                                        "%s needs values=… (the typical values of %s, e.g. values=5,7): the task's "
                                        "bench value, %lld, is not one to unroll loops for (1 to %d)",
                                        site->id, param, vals[0], SP_DERIVED_MAX);
            goto cleanup;
        }
        nv = 1;
    }
    /* the copy: renamed, the parameter replaced by the template constant, the loops unrolled */
    uint32_t ka = ts_node_start_byte(k->def), kb = ts_node_end_byte(k->def);
    TSNode d = rt_field(k->def, "declarator");
    while (!ts_node_is_null(d) && !rt_is(d, "function_declarator")) d = rt_field(d, "declarator");
    TSNode nm = rt_field(d, "declarator");
    if (ts_node_is_null(nm)) {
        st = kl_rule_not_applicable(err, "the kernel at %s has no name", site->id);
        goto cleanup;
    }
    KL_TRY(kl_edits_add(&local, ts_node_start_byte(nm) - ka, ts_node_end_byte(nm) - ka, tk));
    ident_walk iw = {ctx, param, ka, &local, tp, false};
    kl_ast_walk(k->body, ident_visit, &iw);
    if (iw.failed) {
        st = KL_ERR_NOMEM;
        goto cleanup;
    }
    kl_affine_ctx *ax = NULL;
    KL_TRY(kl_rules_affine(ctx, k->def, &ax, err));
    for (unsigned i = 0; i < kl_affine_loop_count(ax) && st == KL_OK; i++) {
        const kl_ax_loop *l = kl_affine_loop(ax, i);
        if (!l->bound || strcmp(l->bound, param) || l->has_pragma_unroll) continue;
        uint32_t at = ts_node_start_byte(l->node);
        char ind[64];
        kl_rules_indent(ctx, at, ind, sizeof ind);
        if (kl_rules_starts_line(ctx, at)) st = kl_edits_addf(&local, rt_line_start(ctx, at) - ka, rt_line_start(ctx, at) - ka, "#pragma unroll\n");
        else st = kl_edits_addf(&local, at - ka, at - ka, "\n#pragma unroll\n%s", ind);
    }
    kl_rules_affine_done(ctx, ax);
    if (st != KL_OK) goto cleanup;
    KL_TRY(kl_edits_apply(&local, ctx->text + ka, kb - ka, &copy, err));
    {
        char vlist[256] = "";
        for (unsigned i = 0; i < nv; i++) {
            char one[32];
            kl_snprintf(one, sizeof one, "%s%lld", i ? ", " : "", vals[i]);
            strncat(vlist, one, sizeof vlist - strlen(vlist) - 1);
        }
        /* a blank line between the kernel and its copy when one follows the kernel (so that removing
         * the copy gives the text back) */
        uint32_t end = ts_node_end_byte(k->outer);
        uint32_t le = rt_line_end(ctx, end);
        bool blank_after = le < ctx->len && specialize__line_blank(ctx, le);
        KL_TRY(kl_edits_addf(out, end, end,
                             "%s// specialize: %s with %s a compile-time constant (launched for %s = %s)\n"
                             "template <int %s>\n%s",
                             blank_after ? "\n\n" : "\n", kname, param, param, vlist, tp, copy));
    }
    /* the launches: a dispatch on the values, the original launch in the else */
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, kname, ls, 16);
    for (unsigned i = 0; i < nl; i++) {
        TSNode stmt = ts_node_parent(ls[i].call);
        uint32_t a = ts_node_start_byte(stmt), b = ts_node_end_byte(stmt);
        char ind[64], in2[80];
        kl_rules_indent(ctx, a, ind, sizeof ind);
        kl_snprintf(in2, sizeof in2, "%s    ", ind);
        char *arg = rt_text(ctx, ts_node_named_child(ls[i].args, (uint32_t)lb.index));
        char *fn = rt_text(ctx, rt_field(ls[i].call, "function"));
        uint32_t after_fn = ts_node_end_byte(rt_field(ls[i].call, "function"));
        bool simple = arg && (rt_is(ts_node_named_child(ls[i].args, (uint32_t)lb.index), "identifier") ||
                              rt_is(ts_node_named_child(ls[i].args, (uint32_t)lb.index), "field_expression"));
        kl_strbuf sb = KL_STRBUF_INIT;
        for (unsigned v = 0; v < nv; v++) {
            kl_strbuf_addf(&sb, "%sif (%s%s%s == %lld)\n%s%s<%lld>", v ? "else " : "", simple ? "" : "(", arg ? arg : "",
                           simple ? "" : ")", vals[v], in2, tk, vals[v]);
            kl_strbuf_add(&sb, ctx->text + after_fn, b - after_fn);
            kl_strbuf_addf(&sb, "\n%s", ind);
        }
        kl_strbuf_addf(&sb, "else\n%s", in2);
        kl_strbuf_add(&sb, ctx->text + a, b - a);
        free(arg);
        free(fn);
        st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, a, b, kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
        if (st != KL_OK) goto cleanup;
    }
cleanup:
    if (st == KL_ERR_NOMEM && !err->message[0]) kl_error_set(err, st, "out of memory");
    free(copy);
    kl_edits_release(&local);
    free(fi);
    return st;
}

const kl_rule kl_rule_specialize = {
    "specialize",
    "a kernel specialized for the shapes that allow it (a compile-time size, a register-resident row), chosen at "
    "the launch site beside a general kernel that handles every shape",
    sp_params, 1, find, specialize__remove_site, apply,
};
