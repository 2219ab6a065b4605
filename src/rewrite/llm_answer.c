/* Answers are never trusted: pull the code out, and check it before it becomes a candidate. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rewrite/llm_int.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

/* ---- code blocks ------------------------------------------------------------------------------ */

typedef struct fence {
    const char *body;      /* first byte after the opening line */
    size_t len;            /* up to the closing fence line */
    bool preferred;        /* tagged with a C/C++/CUDA language */
    bool closed;
} fence;

static bool preferred_lang(const char *info, size_t n)
{
    static const char *const langs[] = {"cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "cuh", "h", "hpp"};
    size_t w = 0;
    while (w < n && !isspace((unsigned char)info[w]) && info[w] != '{') w++;
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++)
        if (strlen(langs[i]) == w && !strncasecmp(info, langs[i], w)) return true;
    return false;
}

/* A fence line: up to 3 spaces, then 3 or more of ` or ~. Returns the run length, 0 if not. */
static size_t fence_run(const char *line, const char *end, char *ch)
{
    const char *p = line;
    int sp = 0;
    while (p < end && *p == ' ' && sp < 4) p++, sp++;
    if (sp > 3 || p >= end || (*p != '`' && *p != '~')) return 0;
    char c = *p;
    size_t n = 0;
    while (p + n < end && p[n] == c) n++;
    if (n < 3) return 0;
    *ch = c;
    return n;
}

/* Scan fenced blocks; choose the longest preferred one, else the longest. */
static bool best_fence(const char *text, fence *best, bool *saw_unclosed)
{
    bool found = false;
    *saw_unclosed = false;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        char ch;
        size_t run = fence_run(p, end, &ch);
        if (!run) {
            p = eol ? eol + 1 : end;
            continue;
        }
        const char *info = p;
        while (info < end && (*info == ' ' || *info == ch)) info++;
        fence f = {eol ? eol + 1 : end, 0, preferred_lang(info, (size_t)(end - info)), false};
        /* find the closing fence */
        const char *q = f.body;
        while (*q) {
            const char *qe = strchr(q, '\n');
            const char *qend = qe ? qe : q + strlen(q);
            char ch2;
            size_t run2 = fence_run(q, qend, &ch2);
            if (run2 >= run && ch2 == ch) {
                /* only the fence characters (and spaces) on the line */
                const char *r = q;
                while (r < qend && (*r == ' ' || *r == ch)) r++;
                while (r < qend && isspace((unsigned char)*r)) r++;
                if (r == qend) {
                    f.closed = true;
                    f.len = (size_t)(q - f.body);
                    p = qe ? qe + 1 : qend;
                    break;
                }
            }
            q = qe ? qe + 1 : qend;
        }
        if (!f.closed) {
            *saw_unclosed = true;
            break;
        }
        if (!found || (f.preferred && !best->preferred) || (f.preferred == best->preferred && f.len > best->len)) {
            *best = f;
            found = true;
        }
    }
    return found;
}

static bool looks_like_code(const char *s)
{
    return strstr(s, "#include") || strstr(s, "__global__") || strstr(s, "extern \"C\"");
}

char *kl_llm_extract_code(const char *answer, const char **why)
{
    fence f = {NULL, 0, false, false};
    bool unclosed;
    *why = NULL;
    if (!answer || !*answer) {
        *why = "an empty answer";
        return NULL;
    }
    if (best_fence(answer, &f, &unclosed)) return kl_strndup(f.body, f.len);
    if (unclosed) {
        *why = "an unterminated code block (the answer was cut off)";
        return NULL;
    }
    if (looks_like_code(answer)) return kl_strdup(answer);
    *why = "no code in the answer";
    return NULL;
}

bool kl_llm_is_refusal(const char *answer)
{
    static const char *const openings[] = {
        "i can't", "i can’t", "i cannot", "i can not", "i won't", "i won’t", "i will not", "i'm sorry", "i’m sorry",
        "i am sorry", "sorry, ", "i'm unable", "i’m unable", "i am unable", "i'm not able", "i am not able",
        "as an ai", "unfortunately, i",
    };
    if (!answer) return false;
    const char *p = answer;
    while (*p && (isspace((unsigned char)*p) || *p == '*' || *p == '>' || *p == '"')) p++;
    for (size_t i = 0; i < sizeof openings / sizeof openings[0]; i++)
        if (!strncasecmp(p, openings[i], strlen(openings[i]))) return true;
    return false;
}

/* "Key: value" at the start of a line outside code blocks (markdown emphasis allowed). */
static char *field_value(const char *answer, const char *key)
{
    size_t klen = strlen(key);
    bool in_code = false;
    const char *p = answer;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        char ch;
        if (fence_run(p, end, &ch)) {
            /* the answer format sits in a fence in the prompt; a model may copy that fence */
            const char *q = p;
            while (q < end && (*q == ' ' || *q == ch)) q++;
            bool bare = q == end || !preferred_lang(q, (size_t)(end - q));
            in_code = !in_code && !bare;
        } else if (!in_code) {
            const char *q = p;
            while (q < end && (*q == ' ' || *q == '*' || *q == '-' || *q == '_')) q++;
            if ((size_t)(end - q) > klen && !strncasecmp(q, key, klen) && q[klen] == ':') {
                q += klen + 1;
                while (q < end && (*q == ' ' || *q == '*' || *q == '_')) q++;
                const char *e = end;
                while (e > q && (isspace((unsigned char)e[-1]) || e[-1] == '*' || e[-1] == '`')) e--;
                while (q < e && *q == '`') q++;
                if (e > q) return kl_strndup(q, (size_t)(e - q) > 200 ? 200 : (size_t)(e - q));
            }
        }
        p = eol ? eol + 1 : end;
    }
    return NULL;
}

void kl_llm_answer_fields(const char *answer, char **transform, char **site, char **note)
{
    *transform = answer ? field_value(answer, "transform") : NULL;
    *site = answer ? field_value(answer, "site") : NULL;
    *note = answer ? field_value(answer, "note") : NULL;
}

/* ---- the launch() signature ---------------------------------------------------------------------- */

static bool node_is(TSNode n, const char *type) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), type); }

/* The identifier a declarator declares, or a null node. */
static TSNode declared_name(TSNode d)
{
    for (int depth = 0; depth < 32 && !ts_node_is_null(d); depth++) {
        const char *t = ts_node_type(d);
        if (!strcmp(t, "identifier") || !strcmp(t, "field_identifier")) return d;
        TSNode next = ts_node_child_by_field_name(d, "declarator", 10);
        if (ts_node_is_null(next)) {
            /* reference_declarator and friends: the declarator is a plain named child */
            uint32_t n = ts_node_named_child_count(d);
            for (uint32_t i = 0; i < n; i++) {
                TSNode c = ts_node_named_child(d, i);
                const char *ct = ts_node_type(c);
                if (!strcmp(ct, "identifier") || strstr(ct, "declarator")) {
                    next = c;
                    break;
                }
            }
        }
        d = next;
    }
    return (TSNode){0};
}

/* Append text with runs of whitespace collapsed, and kept only between two word characters. */
static void add_normalized(kl_strbuf *sb, const char *s, size_t n)
{
    bool pending_space = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c)) {
            pending_space = true;
            continue;
        }
        if (pending_space && sb->len) {
            unsigned char prev = (unsigned char)sb->buf[sb->len - 1];
            bool wprev = isalnum(prev) || prev == '_', wcur = isalnum(c) || c == '_';
            if (wprev && wcur) kl_strbuf_addc(sb, ' ');
        }
        pending_space = false;
        kl_strbuf_addc(sb, (char)c);
    }
}

/* Find function_definition nodes named launch: top level or in an extern "C" block. */
static bool find_launch(const kl_source *src, TSNode node, bool in_c, TSNode *fn, bool *fn_in_c)
{
    uint32_t n = ts_node_named_child_count(node);
    for (uint32_t i = 0; i < n; i++) {
        TSNode c = ts_node_named_child(node, i);
        if (node_is(c, "linkage_specification")) {
            TSNode value = ts_node_child_by_field_name(c, "value", 5);
            bool is_c = !ts_node_is_null(value) && kl_node_text_is(src, value, "\"C\"");
            TSNode body = ts_node_child_by_field_name(c, "body", 4);
            if (node_is(body, "function_definition")) {
                TSNode d = ts_node_child_by_field_name(body, "declarator", 10);
                if (node_is(d, "function_declarator")) {
                    TSNode name = ts_node_child_by_field_name(d, "declarator", 10);
                    if (node_is(name, "identifier") && kl_node_text_is(src, name, "launch")) {
                        *fn = body;
                        *fn_in_c = is_c;
                        return true;
                    }
                }
            } else if (!ts_node_is_null(body) && find_launch(src, body, is_c, fn, fn_in_c)) {
                return true;
            }
        } else if (node_is(c, "function_definition")) {
            TSNode d = ts_node_child_by_field_name(c, "declarator", 10);
            if (node_is(d, "function_declarator")) {
                TSNode name = ts_node_child_by_field_name(d, "declarator", 10);
                if (node_is(name, "identifier") && kl_node_text_is(src, name, "launch")) {
                    *fn = c;
                    *fn_in_c = in_c;
                    return true;
                }
            }
        } else if (node_is(c, "preproc_if") || node_is(c, "preproc_ifdef") || node_is(c, "declaration_list")) {
            if (find_launch(src, c, in_c, fn, fn_in_c)) return true;
        }
    }
    return false;
}

char *kl_llm_launch_signature(const kl_source *src)
{
    TSNode fn = ts_tree_root_node(kl_source_tree(src));
    bool in_c = false;
    if (!find_launch(src, kl_source_root(src), false, &fn, &in_c)) return NULL;
    size_t len;
    const char *text = kl_source_text(src, &len);
    kl_strbuf sb = KL_STRBUF_INIT;
    if (in_c) kl_strbuf_adds(&sb, "extern \"C\" ");
    /* everything of the definition before its declarator: storage, return type, qualifiers */
    TSNode decl = ts_node_child_by_field_name(fn, "declarator", 10);
    add_normalized(&sb, text + ts_node_start_byte(fn), ts_node_start_byte(decl) - ts_node_start_byte(fn));
    kl_strbuf_adds(&sb, " launch(");
    TSNode params = ts_node_child_by_field_name(decl, "parameters", 10);
    uint32_t n = ts_node_named_child_count(params);
    bool first = true;
    for (uint32_t i = 0; i < n; i++) {
        TSNode p = ts_node_named_child(params, i);
        if (node_is(p, "comment")) continue;
        if (!first) kl_strbuf_addc(&sb, ',');
        first = false;
        uint32_t a = ts_node_start_byte(p), b = ts_node_end_byte(p);
        TSNode name = declared_name(ts_node_child_by_field_name(p, "declarator", 10));
        if (node_is(p, "optional_parameter_declaration") || ts_node_is_null(name)) {
            add_normalized(&sb, text + a, b - a);
        } else {
            add_normalized(&sb, text + a, ts_node_start_byte(name) - a);
            add_normalized(&sb, text + ts_node_end_byte(name), b - ts_node_end_byte(name));
        }
    }
    kl_strbuf_addc(&sb, ')');
    /* "extern \"C\" void" + " launch(" collapse to one space */
    char *out = kl_strbuf_detach(&sb, NULL);
    if (!out) return NULL;
    char *dbl;
    while ((dbl = strstr(out, "  ")) != NULL) memmove(dbl, dbl + 1, strlen(dbl));
    return out;
}

/* ---- the checks ------------------------------------------------------------------------------ */

static char *reasonf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *reasonf(const char *fmt, ...)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    return kl_strbuf_detach(&sb, NULL);
}

kl_status kl_llm_check_source(const kl_llm_check *chk, const char *source, char **reason)
{
    *reason = NULL;
    size_t len = strlen(source);
    if (chk->max_bytes && len > chk->max_bytes) {
        *reason = reasonf("the proposed file is %zu bytes, over the limit of %zu", len, chk->max_bytes);
        return *reason ? KL_ERR_INVALID : KL_ERR_NOMEM;
    }
    /* the same file, up to whitespace at its ends, is no proposal */
    const char *a = source, *b = chk->old_source;
    size_t la = len, lb = strlen(b);
    while (la && isspace((unsigned char)*a)) a++, la--;
    while (la && isspace((unsigned char)a[la - 1])) la--;
    while (lb && isspace((unsigned char)*b)) b++, lb--;
    while (lb && isspace((unsigned char)b[lb - 1])) lb--;
    if (la == lb && !memcmp(a, b, la)) {
        *reason = reasonf("the proposed file is the current file, unchanged");
        return *reason ? KL_ERR_INVALID : KL_ERR_NOMEM;
    }
    kl_source *src = NULL;
    kl_error e = {0};
    kl_status st = kl_source_parse_text("proposal", source, len, &src, &e);
    if (st == KL_ERR_NOMEM) return st;
    if (st != KL_OK) {
        *reason = reasonf("the proposed file does not parse: %s", e.message);
        return *reason ? KL_ERR_INVALID : KL_ERR_NOMEM;
    }
    if (kl_source_partial(src)) {
        kl_span where;
        char msg[128] = "";
        kl_source_error(src, 0, &where, msg, sizeof msg);
        *reason = reasonf("the proposed file does not parse: %u error(s), the first at line %u, column %u: %s",
                          kl_source_error_count(src), where.line, where.column, msg);
        kl_source_free(src);
        return *reason ? KL_ERR_INVALID : KL_ERR_NOMEM;
    }
    if (chk->old_signature) {
        char *sig = kl_llm_launch_signature(src);
        if (!sig)
            *reason = reasonf("the proposed file has no launch() (expected `%s`)", chk->old_signature);
        else if (strcmp(sig, chk->old_signature))
            *reason = reasonf("the launch() signature changed: expected `%s`, got `%s`", chk->old_signature, sig);
        free(sig);
        if (*reason) {
            kl_source_free(src);
            return KL_ERR_INVALID;
        }
    }
    kl_source_free(src);
    return KL_OK;
}

char *kl_llm_scrub(char *s, const char *secret)
{
    if (!s || !secret || !*secret || !strstr(s, secret)) return s;
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t n = strlen(secret);
    const char *p = s, *hit;
    while ((hit = strstr(p, secret)) != NULL) {
        kl_strbuf_add(&sb, p, (size_t)(hit - p));
        kl_strbuf_adds(&sb, "[redacted]");
        p = hit + n;
    }
    kl_strbuf_adds(&sb, p);
    if (sb.failed) {
        /* could not allocate: blank the secret out in place instead */
        for (char *q = s; (q = strstr(q, secret)) != NULL;) memset(q, '*', n);
        kl_strbuf_release(&sb);
        return s;
    }
    free(s);
    return kl_strbuf_detach(&sb, NULL);
}
