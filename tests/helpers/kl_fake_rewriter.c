/* A `command` rewriter for the walk's tests: reads the request (JSON on stdin) and, for a
 * "simplify" request, proposes the source with one "OPT:name…" line removed, for every
 * such line. Deterministic. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The function a line is in: the name before the first '(' of the last line above it that starts
 * at column 0 with a letter and holds a '(' (the test files write every function header so). */
static void function_of(const char *src, const char *at, char *name, size_t size)
{
    snprintf(name, size, "scale_kernel");
    for (const char *p = src; p < at;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *paren = memchr(p, '(', n);
        if ((isalpha((unsigned char)*p) || *p == '_') && paren && strncmp(p, "extern", 6) != 0 && strncmp(p, "template", 8) != 0) {
            const char *b = paren;
            while (b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_')) b--;
            if (b < paren) snprintf(name, size, "%.*s", (int)(paren - b), b);
        } else if (!strncmp(p, "extern \"C\"", 10) && paren) {
            const char *b = paren;
            while (b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_')) b--;
            if (b < paren) snprintf(name, size, "%.*s", (int)(paren - b), b);
        }
        if (!e) break;
        p = e + 1;
    }
}

int main(void)
{
    json_error_t je;
    json_t *req = json_loadf(stdin, 0, &je);
    if (!req) {
        fprintf(stderr, "bad request: %s\n", je.text);
        return 1;
    }
    const char *src = json_string_value(json_object_get(req, "source"));
    const char *kind = json_string_value(json_object_get(req, "kind"));
    json_t *cands = json_array();
    if (src && kind && !strcmp(kind, "simplify")) {
        unsigned line = 1;
        for (const char *p = src; *p;) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
            const char *m = strstr(p, "OPT:");
            if (m && m < p + n) {
                char name[64] = {0};
                size_t k = 0;
                for (const char *q = m + 4; *q && *q != ':' && *q != '\n' && k < sizeof name - 1; q++) name[k++] = *q;
                size_t before = (size_t)(p - src);
                char *out = malloc(strlen(src) + 1);
                memcpy(out, src, before);
                memcpy(out + before, p + n, strlen(p + n) + 1);
                char site[160], fn[96];
                function_of(src, p, fn, sizeof fn);
                snprintf(site, sizeof site, "%s:%u", fn, line);
                json_t *c = json_pack("{s:s, s:s, s:s, s:{}, s:s}", "source", out, "transform", name, "site", site,
                                      "params", "note", "remove a marked line");
                /* "…:dispatch=S/G": a dispatch between a specialized kernel S and a general one G */
                const char *d = strstr(m, ":dispatch=");
                if (d && d < p + n) {
                    char spec[64] = {0}, gen[64] = {0};
                    sscanf(d + 10, "%63[A-Za-z0-9_]/%63[A-Za-z0-9_]", spec, gen);
                    json_object_set_new(c, "features", json_pack("{s:[s], s:s}", "specialized", spec, "general", gen));
                }
                json_array_append_new(cands, c);
                free(out);
            }
            p += n;
            line++;
        }
    }
    /* "apply": the card's own hunk, before -> after, where the before text is found */
    json_t *skill = json_object_get(req, "skill");
    if (src && kind && !strcmp(kind, "apply") && json_is_object(skill)) {
        json_t *anchor = json_object_get(skill, "anchor");
        const char *before = json_string_value(json_object_get(anchor, "before"));
        const char *after = json_string_value(json_object_get(anchor, "after"));
        const char *at = before && *before ? strstr(src, before) : NULL;
        if (at && after) {
            size_t pre = (size_t)(at - src), bl = strlen(before), al = strlen(after), rest = strlen(at + bl);
            char *out = malloc(pre + al + rest + 1);
            memcpy(out, src, pre);
            memcpy(out + pre, after, al);
            memcpy(out + pre + al, at + bl, rest + 1);
            char site[160], fn[96];
            unsigned line = 1;
            for (const char *q = src; q < at; q++) line += *q == '\n';
            function_of(src, at, fn, sizeof fn);
            snprintf(site, sizeof site, "%s:%u", fn, line);
            const char *t = json_string_value(json_object_get(skill, "transform"));
            json_array_append_new(cands, json_pack("{s:s, s:s, s:s, s:{}, s:s}", "source", out, "transform", t ? t : "",
                                                   "site", site, "params", "note", "the card's hunk, applied"));
            free(out);
        }
    }
    json_t *ans = json_pack("{s:o}", "candidates", cands);
    json_dumpf(ans, stdout, JSON_COMPACT);
    json_decref(ans);
    json_decref(req);
    return 0;
}
