/* Helpers of the rules tests that read the built-in tasks and list sites (test_rules_warp_reduce_vectorize.c,
 * test_rules_row_parallel.c, test_rules_smem_tile.c). Header-only: each test is one executable;
 * include after cmocka.h. */
#ifndef KL_TEST_RULES_HELPERS_H
#define KL_TEST_RULES_HELPERS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

static inline char *read_task_file(const char *task, const char *file)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/tasks/%s/%s", root, task, file);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The sites of one transform in text, as a JSON array (owned). */
static inline json_t *sites_of(const char *text, const char *transform)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, transform, &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The first site found in the given direction ("present" / "applicable") that rewrites (ok: listed
 * in that direction, no why_not in its features) or that is refused (!ok: listed "refused" for that
 * direction, or with a why_not). */
static inline const char *site_where(json_t *sites, const char *dir, bool ok)
{
    size_t i;
    json_t *s;
    const char *refusal = !strcmp(dir, "present") ? "remove" : "apply";
    json_array_foreach(sites, i, s) {
        const char *d = json_string_value(json_object_get(s, "direction"));
        bool refused = !strcmp(d, "refused") && !strcmp(json_string_value(json_object_get(s, "refused")), refusal);
        if (strcmp(d, dir) && !refused) continue;
        bool has_why = refused || json_object_get(json_object_get(s, "features"), "why_not") != NULL;
        if (has_why != ok) return json_string_value(json_object_get(s, "site"));
    }
    return NULL;
}

static inline char *write_temp(const char *dir, const char *name, const char *text)
{
    char *p = kl_path_join(dir, name);
    kl_error err = {0};
    assert_int_equal(kl_file_write(p, text, strlen(text), &err), KL_OK);
    return p;
}

/* Expect the operation to fail as not applicable, with `want` in the reason. */
static inline void expect_not_applicable(const char *text, const char *transform, const char *site, bool remove,
                                  const char *want)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, remove, NULL, &out, &note, &err);
    if (st != KL_ERR_NOT_APPLICABLE) fail_msg("%s@%s: expected not applicable, got status %d (%s)", transform, site, st, err.message);
    if (!strstr(err.message, want)) fail_msg("%s@%s: the reason '%s' does not say '%s'", transform, site, err.message, want);
    assert_null(out);
}

#endif
