/* A `command` rewriter for the walk's tests: reads the request (JSON on stdin) and, for a
 * "simplify" request, proposes the source with one "OPT:name…" line removed, for every
 * such line. Deterministic. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                char site[80];
                snprintf(site, sizeof site, "scale_kernel:%u", line);
                json_t *c = json_pack("{s:s, s:s, s:s, s:{}, s:s}", "source", out, "transform", name, "site", site,
                                      "params", "note", "remove a marked line");
                json_array_append_new(cands, c);
                free(out);
            }
            p += n;
            line++;
        }
    }
    json_t *ans = json_pack("{s:o}", "candidates", cands);
    json_dumpf(ans, stdout, JSON_COMPACT);
    json_decref(ans);
    json_decref(req);
    return 0;
}
