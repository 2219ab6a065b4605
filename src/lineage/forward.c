/* A step read forward: where it applies in the simpler version (the rules' site of its transform
 * at the edit), and that site's observables at the task's shapes. What cards are written over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "lineage/lineage_int.h"

/* The lines of text that the edit parent -> child touches in child (1-based, inclusive). */
static void edit_lines(const char *parent, const char *child, unsigned *first, unsigned *last)
{
    size_t pl = strlen(parent), cl = strlen(child), p = 0, s = 0;
    while (p < pl && p < cl && parent[p] == child[p]) p++;
    while (s < pl - p && s < cl - p && parent[pl - 1 - s] == child[cl - 1 - s]) s++;
    size_t a = p, b = cl - s; /* child's edited bytes [a, b) */
    unsigned line = 1;
    *first = *last = 0;
    for (size_t i = 0; i < cl; i++) {
        if (i == a) *first = line;
        if (i + 1 == b || (b <= a && i == a)) *last = line;
        if (child[i] == '\n') line++;
    }
    if (!*first) *first = line;
    if (*last < *first) *last = *first;
}

/* The function (by name) whose definition holds line in src, or "" (into buf). */
static void function_at(const kl_source *src, unsigned line, char *buf, size_t size)
{
    buf[0] = '\0';
    kl_model *m = NULL;
    if (kl_model_build(src, &m, NULL) != KL_OK) return;
    unsigned n;
    const kl_function *fns = kl_model_functions(m, &n);
    for (unsigned i = 0; i < n; i++) {
        unsigned a = fns[i].span.line;
        /* the end line: count the newlines of the definition */
        size_t len = 0;
        const char *text = kl_source_text(src, &len);
        unsigned b = a;
        for (uint32_t k = fns[i].span.start; k < fns[i].span.end && k < len; k++)
            if (text[k] == '\n') b++;
        if (a <= line && line <= b) kl_snprintf(buf, size, "%s", fns[i].name);
    }
    kl_model_free(m);
}

void kl_fwd_site_release(kl_fwd_site *s)
{
    if (!s) return;
    json_decref(s->features);
    json_decref(s->params);
    memset(s, 0, sizeof *s);
}

kl_status kl_step_forward_site(const kl_task *task, const char *parent, const char *child, const char *transform,
                               const char *step_site, kl_fwd_site *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    unsigned la, lb;
    edit_lines(parent, child, &la, &lb);
    out->edit_first = la, out->edit_last = lb;
    char step_kernel[128] = "";
    const char *colon = strchr(step_site ? step_site : "", ':');
    if (colon) kl_snprintf(step_kernel, sizeof step_kernel, "%.*s", (int)(colon - step_site), step_site);
    char *json = NULL;
    kl_error e = {0};
    json_t *sites = NULL;
    if (kl_rules_list("simpler.cu", child, strlen(child), task, transform, &json, &e) == KL_OK)
        sites = json_loads(json, 0, NULL);
    free(json);
    const json_t *best = NULL;
    long best_score = 0;
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        /* a site to apply the transform at; one the rules find but refuse to apply (a rewrite they
         * cannot prove, a parameter only the step knows) is the transform's site all the same: its
         * features are read there, and the card says it was refused. At the same distance, one
         * that applies wins. */
        const char *dir = json_string_value(json_object_get(s, "direction"));
        const char *refused = json_string_value(json_object_get(s, "refused"));
        bool refused_apply = dir && !strcmp(dir, "refused") && refused && !strcmp(refused, "apply");
        if (!dir || (strcmp(dir, "applicable") != 0 && !refused_apply)) continue;
        long line = (long)json_integer_value(json_object_get(s, "line"));
        long d = line + 1 < (long)la ? (long)la - line : line > (long)lb + 1 ? line - (long)lb : 0;
        const char *k = json_string_value(json_object_get(s, "kernel"));
        long score = d * 4 + (k && !strcmp(k, step_kernel) ? 0 : 2) + (refused_apply ? 1 : 0);
        if (!best || score < best_score) best = s, best_score = score;
    }
    if (best) {
        out->found = true;
        const char *reason = json_string_value(json_object_get(best, "reason"));
        if (!strcmp(json_string_value(json_object_get(best, "direction")), "refused"))
            kl_snprintf(out->refused, sizeof out->refused, "%s", reason && *reason ? reason : "refused");
        kl_snprintf(out->kernel, sizeof out->kernel, "%s", json_string_value(json_object_get(best, "kernel")));
        kl_snprintf(out->site, sizeof out->site, "%s", json_string_value(json_object_get(best, "site")));
        out->line = (unsigned)json_integer_value(json_object_get(best, "line"));
        out->features = json_incref(json_object_get(best, "features"));
        out->params = json_incref(json_object_get(best, "params"));
        if (!out->features) out->features = json_object();
    } else {
        kl_snprintf(out->why, sizeof out->why,
                    "the rules find no site where %s applies in the simpler version (a rewriter that reads the "
                    "card can still apply it)",
                    transform);
        /* the observables are read where the edit is */
        kl_source *src = NULL;
        if (kl_source_parse_text("simpler.cu", child, strlen(child), &src, &e) == KL_OK) {
            function_at(src, la, out->kernel, sizeof out->kernel);
            kl_source_free(src);
        }
        if (!out->kernel[0]) kl_snprintf(out->kernel, sizeof out->kernel, "%s", step_kernel);
        out->line = la;
        kl_snprintf(out->site, sizeof out->site, "%s:%u", out->kernel, la);
    }
    json_decref(sites);
    (void)err;
    return KL_OK;
}

kl_status kl_step_observe(const kl_task *task, const char *child, const kl_fwd_site *site, const json_t *shape,
                          json_t **out, kl_error *err)
{
    *out = NULL;
    kl_source *src = NULL;
    kl_status st = kl_source_parse_text("simpler.cu", child, strlen(child), &src, err);
    if (st != KL_OK) return st;
    int64_t *values = NULL;
    kl_shape sh = {"shape", NULL};
    const kl_shape *use = NULL;
    if (task) {
        use = &task->bench;
        if (shape) {
            values = calloc(task->nsizes ? task->nsizes : 1, sizeof *values);
            if (!values) {
                kl_source_free(src);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            for (unsigned k = 0; k < task->nsizes; k++) {
                json_t *v = json_object_get(shape, task->sizes[k]);
                values[k] = json_is_integer(v) ? json_integer_value(v) : task->bench.values[k];
            }
            sh.values = values;
            use = &sh;
        }
    }
    st = kl_skill_observe(src, task, use, site->kernel, site->line, out, err);
    if (st == KL_ERR_NOT_FOUND) {
        /* the function is gone from the simpler version: observe nothing but the sizes */
        kl_error_clear(err);
        *out = json_object();
        st = KL_OK;
    }
    free(values);
    kl_source_free(src);
    return st;
}
