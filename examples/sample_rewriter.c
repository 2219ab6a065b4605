/*
 * A sample program for klineage's `command` rewriter (docs/llm.md, "The command backend").
 *
 * It reads one JSON request on stdin and prints one JSON answer on stdout:
 *   simplify: remove the first `#pragma unroll` line ("unroll"), and separately every
 *             `__restrict__` qualifier ("restrict"): one candidate each, when present;
 *   apply:    add `__restrict__` to the pointer parameters of every __global__ function
 *             (transform "restrict"), or put `#pragma unroll` before the first `for` loop
 *             that has none (transform "unroll", the default).
 * Text edits only, no parsing: klineage checks every candidate anyway (it must parse and
 * keep launch()), and the gate judges it. Use it as a template for your own agent:
 *
 *   klineage lineage tasks/softmax --rewriter command \
 *       --rewriter-config '{"program": "build/kl_sample_rewriter"}'
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable string. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void text_add(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            fputs("sample_rewriter: out of memory\n", stderr);
            exit(1);
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static unsigned line_of(const char *src, const char *at)
{
    unsigned line = 1;
    for (const char *p = src; p < at; p++) line += *p == '\n';
    return line;
}

static const char *line_start(const char *src, const char *at)
{
    while (at > src && at[-1] != '\n') at--;
    return at;
}

static void add_candidate(json_t *cands, const char *source, const char *transform, const char *site,
                          const char *note)
{
    json_array_append_new(cands, json_pack("{s:s, s:s, s:s, s:{}, s:s}", "source", source, "transform", transform,
                                           "site", site, "params", "note", note));
}

static void add_rejection(json_t *rejected, const char *transform, const char *reason)
{
    json_array_append_new(rejected, json_pack("{s:s, s:s, s:s}", "transform", transform, "site", "", "reason", reason));
}

/* simplify: drop the first line holding `#pragma unroll`. */
static void remove_unroll(const char *src, json_t *cands, json_t *rejected)
{
    const char *hit = strstr(src, "#pragma unroll");
    if (!hit) {
        add_rejection(rejected, "unroll", "no #pragma unroll to remove");
        return;
    }
    const char *a = line_start(src, hit);
    const char *b = strchr(hit, '\n');
    b = b ? b + 1 : hit + strlen(hit);
    text t = {0};
    text_add(&t, src, (size_t)(a - src));
    text_add(&t, b, strlen(b));
    char site[32];
    snprintf(site, sizeof site, "line %u", line_of(src, hit));
    add_candidate(cands, t.s, "unroll", site, "removed a #pragma unroll");
    free(t.s);
}

/* simplify: drop every `__restrict__` (and one space after it). */
static void remove_restrict(const char *src, json_t *cands, json_t *rejected)
{
    static const char kw[] = "__restrict__";
    const char *first = strstr(src, kw);
    if (!first) {
        add_rejection(rejected, "restrict", "no __restrict__ to remove");
        return;
    }
    text t = {0};
    const char *p = src, *hit;
    while ((hit = strstr(p, kw)) != NULL) {
        text_add(&t, p, (size_t)(hit - p));
        p = hit + sizeof kw - 1;
        if (*p == ' ') p++;
    }
    text_add(&t, p, strlen(p));
    char site[32];
    snprintf(site, sizeof site, "line %u", line_of(src, first));
    add_candidate(cands, t.s, "restrict", site, "removed __restrict__ from the kernel parameters");
    free(t.s);
}

/* apply: `__restrict__` after each '*' in the parameter lists of __global__ functions. */
static void add_restrict(const char *src, json_t *cands, json_t *rejected)
{
    text t = {0};
    const char *p = src, *g;
    unsigned added = 0, first_line = 0;
    while ((g = strstr(p, "__global__")) != NULL) {
        const char *open = strchr(g, '(');
        const char *close = open ? strchr(open, ')') : NULL;
        if (!close) break;
        text_add(&t, p, (size_t)(open - p));
        for (const char *q = open; q < close; q++) {
            text_add(&t, q, 1);
            if (*q == '*' && strncmp(q + 1, " __restrict__", 13) && strncmp(q + 1, "__restrict__", 12)) {
                text_add(&t, "__restrict__ ", 13);
                if (!added++) first_line = line_of(src, q);
            }
        }
        p = close;
    }
    text_add(&t, p, strlen(p));
    if (!added) {
        add_rejection(rejected, "restrict", "no __global__ pointer parameter without __restrict__");
    } else {
        char site[32];
        snprintf(site, sizeof site, "line %u", first_line);
        add_candidate(cands, t.s, "restrict", site, "added __restrict__ to the kernel's pointer parameters");
    }
    free(t.s);
}

/* The next "for (" or "for(", whichever comes first. */
static const char *next_for(const char *p)
{
    const char *a = strstr(p, "for ("), *b = strstr(p, "for(");
    return !a ? b : !b ? a : a < b ? a : b;
}

/* apply: `#pragma unroll` before the first `for` loop that lacks one. */
static void add_unroll(const char *src, json_t *cands, json_t *rejected)
{
    const char *p = src;
    for (const char *hit; (hit = next_for(p)) != NULL; p = hit + 3) {
        const char *ls = line_start(src, hit);
        bool only_space = true;
        for (const char *q = ls; q < hit; q++) only_space = only_space && (*q == ' ' || *q == '\t');
        if (!only_space) continue;
        /* the previous line, if any, must not be a pragma already */
        if (ls > src) {
            const char *prev = line_start(src, ls - 1);
            while (*prev == ' ' || *prev == '\t') prev++;
            if (!strncmp(prev, "#pragma", 7)) continue;
        }
        text t = {0};
        text_add(&t, src, (size_t)(ls - src));
        text_add(&t, ls, (size_t)(hit - ls)); /* same indentation */
        text_add(&t, "#pragma unroll\n", 15);
        text_add(&t, ls, strlen(ls));
        char site[32];
        snprintf(site, sizeof site, "line %u", line_of(src, hit));
        add_candidate(cands, t.s, "unroll", site, "unrolled the loop with #pragma unroll");
        free(t.s);
        return;
    }
    add_rejection(rejected, "unroll", "no loop without a #pragma unroll");
}

int main(void)
{
    json_error_t je;
    json_t *req = json_loadf(stdin, 0, &je);
    if (!req) {
        fprintf(stderr, "sample_rewriter: stdin: line %d, column %d: %s\n", je.line, je.column, je.text);
        return 1;
    }
    const char *kind = json_string_value(json_object_get(req, "kind"));
    const char *src = json_string_value(json_object_get(req, "source"));
    if (!kind || !src) {
        fputs("sample_rewriter: the request has no \"kind\" or \"source\"\n", stderr);
        json_decref(req);
        return 1;
    }
    json_t *cands = json_array(), *rejected = json_array();
    if (!strcmp(kind, "simplify")) {
        remove_unroll(src, cands, rejected);
        remove_restrict(src, cands, rejected);
    } else {
        const char *t = json_string_value(json_object_get(req, "transform"));
        const char *st = json_string_value(json_object_get(json_object_get(req, "skill"), "transform"));
        if (st) t = st;
        if (t && strstr(t, "restrict"))
            add_restrict(src, cands, rejected);
        else
            add_unroll(src, cands, rejected);
    }
    json_t *answer = json_pack("{s:o, s:o}", "candidates", cands, "rejected", rejected);
    json_dumpf(answer, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(answer);
    json_decref(req);
    return 0;
}
