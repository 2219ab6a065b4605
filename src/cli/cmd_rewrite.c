/* klineage rewrite FILE.cu: the rules catalog by hand (docs/cli/rewrite.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/rewrite.h"
#include "klineage/task.h"

#define MAX_PARAMS 16
#define MAX_SOURCE ((size_t)64 << 20)

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > MAX_SOURCE + 1) break;
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    bool bad = ferror(f) || !buf || n > MAX_SOURCE;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void print_site(json_t *s, const char *label)
{
    char *feat = json_dumps(json_object_get(s, "features"), JSON_COMPACT | JSON_SORT_KEYS);
    char *params = json_dumps(json_object_get(s, "params"), JSON_COMPACT | JSON_SORT_KEYS);
    char *with = json_object_get(s, "applies_with")
                     ? json_dumps(json_object_get(s, "applies_with"), JSON_COMPACT | JSON_SORT_KEYS)
                     : NULL;
    printf("%-10s %s@%s  line %lld  %s\n", label, json_string_value(json_object_get(s, "transform")),
           json_string_value(json_object_get(s, "site")), (long long)json_integer_value(json_object_get(s, "line")),
           json_string_value(json_object_get(s, "note")));
    if (params && strcmp(params, "{}")) printf("           params   %s\n", params);
    if (with) printf("           applies with %s (not with the defaults)\n", with);
    const char *canon = json_string_value(json_object_get(s, "canonical"));
    if (canon) printf("           canonical form: %s\n", canon);
    printf("           features %s\n", feat ? feat : "{}");
    free(feat);
    free(params);
    free(with);
}

/* The sites that rewrite (present, applicable), then the refused ones with their reason. */
static int print_list(const char *json_text, bool as_json)
{
    if (as_json) {
        printf("%s\n", json_text);
        return KL_EXIT_OK;
    }
    json_t *arr = json_loads(json_text, 0, NULL);
    if (!arr) return cli_error("could not read the site list");
    size_t i;
    json_t *s;
    unsigned refused = 0;
    if (json_array_size(arr) == 0) printf("no sites\n");
    json_array_foreach(arr, i, s) {
        const char *dir = json_string_value(json_object_get(s, "direction"));
        if (dir && !strcmp(dir, "refused")) {
            refused++;
            continue;
        }
        print_site(s, dir && !strcmp(dir, "present") ? "present" : "applicable");
    }
    if (refused) printf("refused (found, but the transform does not rewrite them):\n");
    json_array_foreach(arr, i, s) {
        const char *dir = json_string_value(json_object_get(s, "direction"));
        if (!dir || strcmp(dir, "refused")) continue;
        const char *what = json_string_value(json_object_get(s, "refused"));
        print_site(s, what && !strcmp(what, "remove") ? "no remove" : "no apply");
    }
    json_decref(arr);
    return KL_EXIT_OK;
}

KL_CMD(rewrite)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    const char *file = NULL, *out_path = NULL, *task_dir = NULL, *target = NULL, *only = NULL;
    bool list = false, remove = false, compile_check = true, canonical = false;
    int actions = 0;
    json_t *params = json_object();
    int rc = KL_EXIT_FAILED;
    char *source = NULL, *json_text = NULL, *result = NULL, *note = NULL, *ptext = NULL, *name = NULL;
    kl_task *task = NULL;
    kl_error err = {0};
    if (!params) return cli_error("out of memory");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--list")) {
            list = true;
            actions++;
        } else if (!strcmp(a, "--canonical")) {
            canonical = true;
            actions++;
        } else if (!strcmp(a, "--apply") || !strcmp(a, "--remove")) {
            if (!next) {
                rc = cli_usage_error(cli, "%s needs NAME@SITE", a);
                goto cleanup;
            }
            remove = !strcmp(a, "--remove");
            target = argv[++i];
            actions++;
        } else if (!strcmp(a, "--param")) {
            const char *eq = next ? strchr(next, '=') : NULL;
            if (!eq || eq == next) {
                rc = cli_usage_error(cli, "--param takes KEY=VALUE");
                goto cleanup;
            }
            if (json_object_size(params) >= MAX_PARAMS) {
                rc = cli_usage_error(cli, "at most %d --param", MAX_PARAMS);
                goto cleanup;
            }
            char key[128];
            size_t kl = (size_t)(eq - next);
            if (kl >= sizeof key) {
                rc = cli_usage_error(cli, "--param: the key is too long");
                goto cleanup;
            }
            memcpy(key, next, kl);
            key[kl] = '\0';
            json_object_set_new(params, key, json_string(eq + 1));
            i++;
        } else if (!strcmp(a, "--no-compile-check")) {
            compile_check = false;
        } else if (!strcmp(a, "--transform")) {
            if (!next) {
                rc = cli_usage_error(cli, "--transform needs a NAME");
                goto cleanup;
            }
            only = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!next) {
                rc = cli_usage_error(cli, "%s needs a FILE", a);
                goto cleanup;
            }
            out_path = argv[++i];
        } else if (!strcmp(a, "--task")) {
            if (!next) {
                rc = cli_usage_error(cli, "--task needs a DIR");
                goto cleanup;
            }
            task_dir = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            rc = cli_usage_error(cli, "unknown option '%s'", a);
            goto cleanup;
        } else if (!file) {
            file = a;
        } else {
            rc = cli_usage_error(cli, "one FILE.cu only ('%s' is extra)", a);
            goto cleanup;
        }
    }
    if (!file) {
        rc = cli_usage_error(cli, "a FILE.cu is needed");
        goto cleanup;
    }
    if (actions != 1) {
        rc = cli_usage_error(cli, "give exactly one of --list, --apply NAME@SITE, --remove NAME@SITE, --canonical");
        goto cleanup;
    }
    if (list && (json_object_size(params) || out_path || !compile_check)) {
        rc = cli_usage_error(cli, "--param, -o and --no-compile-check go with --apply or --remove, not --list");
        goto cleanup;
    }
    if (canonical && (json_object_size(params) || out_path || only || !compile_check)) {
        rc = cli_usage_error(cli, "--canonical takes no other option");
        goto cleanup;
    }
    if (!list && only) {
        rc = cli_usage_error(cli, "--transform goes with --list");
        goto cleanup;
    }
    if (remove && json_object_size(params)) {
        rc = cli_usage_error(cli, "--remove takes no --param");
        goto cleanup;
    }
    const char *at = target ? strchr(target, '@') : NULL;
    if (target && (!at || at == target || !at[1])) {
        rc = cli_usage_error(cli, "'%s': expected NAME@SITE, e.g. unroll@saxpy:12", target);
        goto cleanup;
    }

    size_t len = 0;
    source = read_file(file, &len);
    if (!source) {
        rc = cli_error("%s: cannot read it (missing, a folder, unreadable or over 64 MiB)", file);
        goto cleanup;
    }
    if (memchr(source, '\0', len)) {
        rc = cli_error("%s: holds a NUL byte: not a text file", file);
        goto cleanup;
    }
    if (task_dir && kl_task_load(task_dir, &task, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    if (canonical) {
        char *summary = NULL;
        if (kl_rules_canonical(file, source, len, &result, &summary, &err) != KL_OK) {
            rc = cli_error("%s", err.message);
            goto cleanup;
        }
        fputs(result, stdout);
        cli_note(cli, "%s\n", summary[0] ? summary : "the canonical form is the file as written");
        free(summary);
        rc = KL_EXIT_OK;
        goto cleanup;
    }
    if (list) {
        if (kl_rules_list(file, source, len, task, only, &json_text, &err) != KL_OK) {
            rc = cli_error("%s", err.message);
            goto cleanup;
        }
        rc = print_list(json_text, cli->json);
        goto cleanup;
    }
    name = strndup(target, (size_t)(at - target));
    ptext = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    if (!name || !ptext) {
        rc = cli_error("out of memory");
        goto cleanup;
    }
    kl_status st = kl_rules_rewrite(file, source, len, task, name, at + 1, remove, ptext, &result, &note, &err);
    if (st == KL_ERR_INVALID && strstr(err.message, "parameter")) {
        rc = cli_usage_error(cli, "%s", err.message);
        goto cleanup;
    }
    if (st != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    if (compile_check) {
        /* what the transform wrote must compile where the original does */
        bool checked = false;
        st = kl_rules_compile_check(file, source, result, 0, &checked, &err);
        if (st == KL_ERR_COMPILE) {
            rc = cli_error("%s %s at %s: %s", remove ? "removing" : "applying", name, at + 1, err.message);
            goto cleanup;
        }
        if (st != KL_OK)
            cli_note(cli, "note: the result was not compiled: %s\n", err.message);
        else if (!checked)
            cli_note(cli, "note: the result was not compiled (%s)\n",
                     kl_rules_nvcc() ? "the original does not compile here" : "no nvcc");
    }
    if (out_path) {
        FILE *f = fopen(out_path, "wb");
        size_t n = strlen(result);
        if (!f || fwrite(result, 1, n, f) != n || fclose(f) != 0) {
            rc = cli_error("%s: cannot write it", out_path);
            goto cleanup;
        }
        cli_note(cli, "%s (wrote %s)\n", note, out_path);
    } else {
        fputs(result, stdout);
        cli_note(cli, "%s\n", note);
    }
    rc = KL_EXIT_OK;
cleanup:
    json_decref(params);
    free(source);
    free(json_text);
    free(result);
    free(note);
    free(ptext);
    free(name);
    kl_task_free(task);
    return rc;
}
