/* klineage skills list | show | delete | export | import | match: the skill library (docs/cli/skills.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "klineage/lineage.h"
#include "klineage/rewrite.h"
#include "klineage/skills.h"
#include "klineage/store.h"
#include "klineage/syntax.h"
#include "klineage/task.h"
#include "measure.h"

/* ---- the store ------------------------------------------------------------------------------ */

static bool db_exists(const char *path)
{
    struct stat st;
    return !strcmp(path, ":memory:") || stat(path, &st) == 0;
}

/* Open the store; for commands that only read, a store that does not exist is an empty
 * library (*store stays NULL) and no file is created. Returns an exit code. */
static int open_store(kl_cli *cli, bool create, kl_store **store)
{
    *store = NULL;
    if (!create && !db_exists(cli->db_path)) return KL_EXIT_OK;
    kl_error err = {0};
    if (kl_store_open(cli->db_path, store, &err) != KL_OK) return cli_error("%s", err.message);
    return KL_EXIT_OK;
}

/* Which cards an action reads: all, those of the library without one task's lineages
 * (--exclude-task NAME), only admitted ones (--admitted). */
typedef struct filter {
    const char *exclude_task;
    bool admitted;
} filter;

static int load_list(kl_cli *cli, const filter *f, kl_skill_list *list)
{
    kl_store *store = NULL;
    int rc = open_store(cli, false, &store);
    if (rc != KL_EXIT_OK || !store) return rc;
    kl_error err = {0};
    kl_status st = f && f->exclude_task ? kl_skill_list_load_excluding(store, f->exclude_task, list, &err)
                                        : kl_skill_list_load(store, list, &err);
    if (st != KL_OK) rc = cli_error("%s", err.message);
    else if (f && f->admitted) kl_skill_list_keep_admitted(list);
    kl_store_close(store);
    return rc;
}

/* --exclude-task NAME and --admitted, wherever a card list is read: 1 taken (i moved past its
 * value), 0 not one of them, -1 a usage error printed. */
static int filter_option(kl_cli *cli, int argc, char **argv, int *i, filter *f)
{
    if (!strcmp(argv[*i], "--admitted")) {
        f->admitted = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--exclude-task")) {
        if (*i + 1 >= argc) {
            cli_usage_error(cli, "option --exclude-task needs a task name");
            return -1;
        }
        f->exclude_task = argv[++*i];
        return 1;
    }
    if (!strncmp(argv[*i], "--exclude-task=", 15)) {
        f->exclude_task = argv[*i] + 15;
        return 1;
    }
    return 0;
}

static int write_stdout(const char *text)
{
    fputs(text, stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) return cli_error("cannot write to standard output");
    return KL_EXIT_OK;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return cli_error("%s: cannot write: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    if (fclose(f) != 0) ok = false;
    if (!ok) return cli_error("%s: cannot write: %s", path, strerror(errno));
    return KL_EXIT_OK;
}

/* Options of a subcommand: "--json" was taken by the globals; anything else starting with
 * '-' is unknown unless the caller knows it. */
static bool is_option(const char *a) { return a[0] == '-' && a[1] != '\0'; }

/* ---- list ----------------------------------------------------------------------------------- */

static int cmd_list(int argc, char **argv, kl_cli *cli)
{
    filter f = {0};
    for (int i = 1; i < argc; i++) {
        int r = filter_option(cli, argc, argv, &i, &f);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) continue;
        if (is_option(argv[i])) return cli_usage_error(cli, "unknown option '%s' for 'skills list'", argv[i]);
        return cli_usage_error(cli, "'skills list' takes no arguments");
    }
    kl_skill_list list = KL_SKILL_LIST_INIT;
    int rc = load_list(cli, &f, &list);
    if (rc != KL_EXIT_OK) return rc;
    if (cli->json) {
        json_t *a = json_array();
        for (unsigned k = 0; k < list.count; k++) {
            kl_skill_summary s;
            kl_skill_summarize(list.items[k], &s);
            json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:s}", "id", s.id,
                                  "transform", s.transform, "intent", s.intent, "preconditions",
                                  (json_int_t)s.npreconditions, "probed", (json_int_t)s.nprobed, "gain",
                                  s.best_gain > 0 ? json_real(s.best_gain) : json_null(), "best_probe",
                                  s.best_probe > 0 ? json_real(s.best_probe) : json_null(), "risks",
                                  (json_int_t)s.nrisks, "slower", (json_int_t)s.nslower, "lineages",
                                  (json_int_t)s.nlineages, "contradictions", (json_int_t)s.ncontradictions,
                                  "requires", (json_int_t)s.nrequires, "probes", (json_int_t)s.probes, "admission",
                                  s.admission);
            json_array_append_new(a, o);
        }
        char *t = json_dumps(a, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
        json_decref(a);
        rc = t ? write_stdout(t) : cli_error("out of memory");
        if (t) rc = write_stdout("\n");
        free(t);
        kl_skill_list_release(&list);
        return rc;
    }
    if (!list.count) {
        cli_note(cli, "no skills in %s%s yet: 'klineage lineage TASK_DIR' learns them\n", cli->db_path,
                 f.admitted ? " admitted" : "");
        kl_skill_list_release(&list);
        return KL_EXIT_OK;
    }
    int wid = 2, wtr = 9;
    for (unsigned k = 0; k < list.count; k++) {
        int a = (int)strlen(kl_skill_id(list.items[k])), b = (int)strlen(kl_skill_transform(list.items[k]));
        if (a > wid) wid = a;
        if (b > wtr) wtr = b;
    }
    /* GAIN: where the step was measured in its walk (the bench shape, or the shape that runs its
     * path); BEST PROBE: the best gain at a probe shape, apart */
    printf("%-*s  %-*s  %-14s  %8s  %10s  %-11s  %8s  %s\n", wid, "ID", wtr, "TRANSFORM", "CONDITIONS", "GAIN",
           "BEST PROBE", "RISKS", "LINEAGES", "ADMISSION");
    for (unsigned k = 0; k < list.count; k++) {
        kl_skill_summary s;
        kl_skill_summarize(list.items[k], &s);
        char cond[32], gain[32], probe[32], risks[32];
        if (s.nprobed) snprintf(cond, sizeof cond, "%u (%u probed)", s.npreconditions, s.nprobed);
        else snprintf(cond, sizeof cond, "%u", s.npreconditions);
        if (s.best_gain > 0) snprintf(gain, sizeof gain, "%.2fx", s.best_gain);
        else snprintf(gain, sizeof gain, "-");
        if (s.best_probe > 0) snprintf(probe, sizeof probe, "%.2fx", s.best_probe);
        else snprintf(probe, sizeof probe, "-");
        if (s.nslower) snprintf(risks, sizeof risks, "%u (%u slower)", s.nrisks, s.nslower);
        else snprintf(risks, sizeof risks, "%u", s.nrisks);
        printf("%-*s  %-*s  %-14s  %8s  %10s  %-11s  %8u  %s%s\n", wid, s.id, wtr, s.transform, cond, gain, probe, risks,
               s.nlineages, s.admission, s.ncontradictions ? "  (contradictions)" : "");
    }
    kl_skill_list_release(&list);
    if (fflush(stdout) != 0) return cli_error("cannot write to standard output");
    return KL_EXIT_OK;
}

/* ---- show ----------------------------------------------------------------------------------- */

static int cmd_show(int argc, char **argv, kl_cli *cli)
{
    const char *id = NULL;
    bool positional = false; /* after "--": an id that starts with '-' (a card stored before they were refused) */
    for (int i = 1; i < argc; i++) {
        if (!positional && !strcmp(argv[i], "--")) {
            positional = true;
            continue;
        }
        if (!positional && is_option(argv[i])) return cli_usage_error(cli, "unknown option '%s' for 'skills show'", argv[i]);
        if (id) return cli_usage_error(cli, "'skills show' takes one ID");
        id = argv[i];
    }
    if (!id) return cli_usage_error(cli, "'skills show' needs an ID (or a unique prefix of one)");
    kl_store *store = NULL;
    int rc = open_store(cli, false, &store);
    if (rc != KL_EXIT_OK) return rc;
    if (!store) return cli_error("no skill \"%s\": %s does not exist", id, cli->db_path);
    kl_error err = {0};
    kl_skill *card = NULL;
    if (kl_skill_get(store, id, &card, &err) != KL_OK) {
        kl_store_close(store);
        return cli_error("%s", err.message);
    }
    kl_store_close(store);
    char *text = cli->json ? kl_skill_to_json(card) : kl_skill_markdown(card, 1);
    rc = text ? write_stdout(text) : cli_error("out of memory");
    free(text);
    kl_skill_free(card);
    return rc;
}

/* ---- delete --------------------------------------------------------------------------------- */

static int cmd_delete(int argc, char **argv, kl_cli *cli)
{
    const char *id = NULL;
    bool positional = false;
    for (int i = 1; i < argc; i++) {
        if (!positional && !strcmp(argv[i], "--")) {
            positional = true;
            continue;
        }
        if (!positional && is_option(argv[i]))
            return cli_usage_error(cli, "unknown option '%s' for 'skills delete'", argv[i]);
        if (id) return cli_usage_error(cli, "'skills delete' takes one ID");
        id = argv[i];
    }
    if (!id) return cli_usage_error(cli, "'skills delete' needs the ID of a card (the whole id, not a prefix)");
    kl_store *store = NULL;
    int rc = open_store(cli, false, &store);
    if (rc != KL_EXIT_OK) return rc;
    if (!store) return cli_error("no skill \"%s\": %s does not exist", id, cli->db_path);
    kl_error err = {0};
    unsigned parts = 0;
    if (kl_skill_delete(store, id, &parts, &err) != KL_OK) rc = cli_error("%s", err.message);
    else cli_note(cli, "deleted skill %s (and the %u part%s it was merged from) from %s\n", id, parts,
                  parts == 1 ? "" : "s", cli->db_path);
    kl_store_close(store);
    return rc;
}

/* ---- export --------------------------------------------------------------------------------- */

static int cmd_export(int argc, char **argv, kl_cli *cli)
{
    const char *fmt_name = "md", *out = NULL;
    filter f = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = filter_option(cli, argc, argv, &i, &f);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--format") || !strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) return cli_usage_error(cli, "option %s needs a value", a);
            if (!strcmp(a, "--format")) fmt_name = argv[++i];
            else out = argv[++i];
        } else if (!strncmp(a, "--format=", 9)) {
            fmt_name = a + 9;
        } else if (!strncmp(a, "--output=", 9)) {
            out = a + 9;
        } else if (is_option(a)) {
            return cli_usage_error(cli, "unknown option '%s' for 'skills export'", a);
        } else {
            return cli_usage_error(cli, "'skills export' takes no arguments (the output goes to -o PATH)");
        }
    }
    kl_skill_format fmt;
    kl_error err = {0};
    if (kl_skill_format_parse(fmt_name, &fmt, &err) != KL_OK) return cli_usage_error(cli, "--format: %s", err.message);
    if (fmt == KL_SKILL_FORMAT_AGENT && !out)
        return cli_usage_error(cli, "--format agent-skills writes folders: give the destination with -o DIR");
    kl_skill_list list = KL_SKILL_LIST_INIT;
    int rc = load_list(cli, &f, &list);
    if (rc != KL_EXIT_OK) return rc;
    const kl_skill *const *cards = (const kl_skill *const *)list.items;
    if (fmt == KL_SKILL_FORMAT_AGENT) {
        if (kl_skills_write_agent(cards, list.count, out, &err) != KL_OK) rc = cli_error("%s", err.message);
        else cli_note(cli, "wrote %u agent skill%s under %s\n", list.count, list.count == 1 ? "" : "s", out);
    } else {
        char *text = NULL;
        if (kl_skills_render(cards, list.count, fmt, &text, &err) != KL_OK) {
            rc = cli_error("%s", err.message);
        } else if (out) {
            rc = write_file(out, text);
            if (rc == KL_EXIT_OK)
                cli_note(cli, "wrote %u skill%s to %s\n", list.count, list.count == 1 ? "" : "s", out);
        } else {
            rc = write_stdout(text);
        }
        free(text);
    }
    kl_skill_list_release(&list);
    return rc;
}

/* ---- import --------------------------------------------------------------------------------- */

static int cmd_import(int argc, char **argv, kl_cli *cli)
{
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (is_option(argv[i])) return cli_usage_error(cli, "unknown option '%s' for 'skills import'", argv[i]);
        if (file) return cli_usage_error(cli, "'skills import' takes one FILE.json");
        file = argv[i];
    }
    if (!file) return cli_usage_error(cli, "'skills import' needs a FILE.json (one card or an array of cards)");
    kl_store *store = NULL;
    int rc = open_store(cli, true, &store);
    if (rc != KL_EXIT_OK) return rc;
    kl_error err = {0};
    unsigned n = 0, merged = 0;
    if (kl_skill_import(store, file, &n, &merged, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
    } else {
        printf("imported %u skill card%s into %s", n, n == 1 ? "" : "s", cli->db_path);
        if (merged) printf(" (%u met a stored card of the same id and merged with it)", merged);
        printf("\n");
    }
    kl_store_close(store);
    return rc;
}

/* ---- match ---------------------------------------------------------------------------------- */

/* "k=v,k=v" into obj (integers). Returns false with a message in msg. */
static bool parse_shape(const char *text, json_t *obj, char *msg, size_t size)
{
    const char *p = text;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        if (!comma) comma = p + strlen(p);
        if (!eq || eq > comma || eq == p) {
            snprintf(msg, size, "--shape: expected NAME=INTEGER at \"%.*s\"", (int)(comma - p), p);
            return false;
        }
        char name[64];
        if ((size_t)(eq - p) >= sizeof name) {
            snprintf(msg, size, "--shape: the name \"%.*s\" is too long", (int)(eq - p), p);
            return false;
        }
        memcpy(name, p, (size_t)(eq - p));
        name[eq - p] = '\0';
        char *end;
        errno = 0;
        long long v = strtoll(eq + 1, &end, 10);
        if (errno || end == eq + 1 || end != comma) {
            snprintf(msg, size, "--shape: %s: expected an integer, not \"%.*s\"", name, (int)(comma - eq - 1), eq + 1);
            return false;
        }
        json_object_set_new(obj, name, json_integer(v));
        p = *comma ? comma + 1 : comma;
    }
    return true;
}

static const char *str_or_empty(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* A site of kl_rules_list's answer by the way the transform is found there: "present" or
 * "applicable", a site the rules refuse to rewrite included ("refused": "remove" is a present
 * optimization, "apply" a site of the transform all the same); "" for anything else. */
static const char *site_way(const json_t *s)
{
    const char *dir = json_string_value(json_object_get(s, "direction"));
    const char *refused = json_string_value(json_object_get(s, "refused"));
    if (!dir) return "";
    if (strcmp(dir, "refused") != 0) return dir;
    return !refused ? "" : !strcmp(refused, "remove") ? "present" : !strcmp(refused, "apply") ? "applicable" : "";
}

typedef struct best {
    kl_skill_match_result r;
    bool have;
    bool no_site;             /* the rules know the transform and find no site for it here */
    char where[200];
} best;

/* Rank: holds < unknown < fails. */
static int rank(kl_truth t) { return t == KL_TRUTH_HOLDS ? 0 : t == KL_TRUTH_UNKNOWN ? 1 : 2; }

static void keep_best(best *b, kl_skill_match_result *r, const char *where)
{
    if (!b->have || rank(r->truth) < rank(b->r.truth)) {
        if (b->have) kl_skill_match_release(&b->r);
        b->r = *r;
        b->have = true;
        snprintf(b->where, sizeof b->where, "%s", where);
    } else {
        kl_skill_match_release(r);
    }
}

static void print_reasons(const best *b, const char *transform)
{
    bool first = true;
    if (b->no_site) {
        printf(": the rules find no site where %s applies in this file", transform);
        return;
    }
    for (unsigned k = 0; k < b->r.nchecks; k++) {
        const kl_skill_check *c = &b->r.checks[k];
        if (c->truth == KL_TRUTH_HOLDS) continue;
        printf("%s%s %s", first ? ": " : "; ", c->predicate, c->truth == KL_TRUTH_FAILS ? "fails" : "unknown");
        if (c->shape[0]) printf(" at %s", c->shape);
        printf(" (%s)", c->why);
        first = false;
    }
    for (unsigned k = 0; k < b->r.nmissing; k++) {
        printf("%sneeds %s first (not present)", first ? ": " : "; ", b->r.missing[k]);
        first = false;
    }
    if (b->r.requires_unknown) printf("%srequired transforms not known", first ? ": " : "; ");
}

/* The device the store has measured (kind "gpu"): its architecture as "arch" (cc 9.0: 90), unless
 * the caller gave one. */
static bool first_gpu(const char *key, const char *json, void *user)
{
    (void)key;
    json_t *d = json_loads(json, 0, NULL);
    const char *cc = json_string_value(json_object_get(json_object_get(d, "device"), "cc"));
    int major = 0, minor = 0;
    if (cc && sscanf(cc, "%d.%d", &major, &minor) == 2) json_object_set_new(user, "arch", json_integer(major * 10 + minor));
    json_decref(d);
    return false;
}

static void device_arch(kl_cli *cli, json_t *extra)
{
    if (json_object_get(extra, "arch")) return;
    kl_store *store = NULL;
    if (open_store(cli, false, &store) != KL_EXIT_OK || !store) return;
    kl_error err = {0};
    (void)kl_store_each(store, "gpu", NULL, first_gpu, extra, &err);
    kl_store_close(store);
}

static int cmd_match(int argc, char **argv, kl_cli *cli)
{
    const char *file = NULL, *task_dir = NULL, *shape_text = NULL, *features_path = NULL;
    filter f = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = filter_option(cli, argc, argv, &i, &f);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) continue;
        const char **dst = !strcmp(a, "--task") ? &task_dir
                           : !strcmp(a, "--shape") ? &shape_text
                           : !strcmp(a, "--features") ? &features_path
                                                      : NULL;
        if (dst) {
            if (i + 1 >= argc) return cli_usage_error(cli, "option %s needs a value", a);
            *dst = argv[++i];
        } else if (is_option(a)) {
            return cli_usage_error(cli, "unknown option '%s' for 'skills match'", a);
        } else if (file) {
            return cli_usage_error(cli, "'skills match' takes one FILE.cu");
        } else {
            file = a;
        }
    }
    if (!file) return cli_usage_error(cli, "'skills match' needs a FILE.cu");

    int rc = KL_EXIT_OK;
    kl_error err = {0};
    kl_task *task = NULL;
    kl_source *src = NULL;
    kl_model *model = NULL;
    char *sites_text = NULL;
    json_t *given = json_object(), *extra = json_object(), *sites = NULL, *present_set = json_object(),
           *catalog = json_object();
    const char **present = NULL;
    unsigned npresent = 0;
    kl_skill_list list = KL_SKILL_LIST_INIT;
    best *results = NULL;

    if (shape_text) {
        char msg[300];
        if (!parse_shape(shape_text, given, msg, sizeof msg)) {
            rc = cli_usage_error(cli, "%s", msg);
            goto cleanup;
        }
    }
    if (task_dir) {
        if (kl_task_load(task_dir, &task, &err) != KL_OK) {
            rc = cli_error("%s", err.message);
            goto cleanup;
        }
        /* --shape over the bench shape: a name it gives must be a size of the task */
        const char *k;
        json_t *v;
        json_object_foreach(given, k, v) {
            unsigned q = 0;
            while (q < task->nsizes && strcmp(task->sizes[q], k) != 0) q++;
            if (q == task->nsizes) {
                rc = cli_usage_error(cli, "--shape: \"%s\" is not a size of task %s", k, task->name);
                goto cleanup;
            }
            task->bench.values[q] = json_integer_value(v);
        }
    } else {
        json_object_update(extra, given); /* no task: the sizes given are named values */
    }
    if (features_path) {
        json_error_t je;
        json_t *user = json_load_file(features_path, JSON_REJECT_DUPLICATES, &je);
        if (!user) {
            rc = cli_error("%s:%d:%d: %s", features_path, je.line, je.column, je.text);
            goto cleanup;
        }
        if (!json_is_object(user)) {
            json_decref(user);
            rc = cli_error("%s: expected an object of named values (features and sizes)", features_path);
            goto cleanup;
        }
        json_object_update(extra, user);
        json_decref(user);
    }
    device_arch(cli, extra);

    /* the kernel, and the rules' sites (present and applicable) */
    if (kl_source_parse_file(file, &src, &err) != KL_OK || kl_model_build(src, &model, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    if (kl_source_partial(src)) cli_note(cli, "warning: %s has syntax errors; its features may be incomplete\n", file);
    size_t len = 0;
    const char *text = kl_source_text(src, &len);
    if (kl_rules_list(file, text, len, task, NULL, &sites_text, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    sites = json_loads(sites_text, 0, NULL);
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        const char *t = json_string_value(json_object_get(s, "transform"));
        if (t && !strcmp(site_way(s), "present")) json_object_set_new(present_set, t, json_true());
    }
    present = calloc(json_object_size(present_set) + 1, sizeof *present);
    if (!present) {
        rc = cli_error("out of memory");
        goto cleanup;
    }
    const char *pk;
    json_t *pv;
    json_object_foreach(present_set, pk, pv) present[npresent++] = pk;

    char *cat_text = NULL;
    if (kl_rules_catalog_json(&cat_text, &err) != KL_OK) {
        rc = cli_error("%s", err.message);
        goto cleanup;
    }
    json_t *cat = json_loads(cat_text, 0, NULL);
    free(cat_text);
    json_array_foreach(cat, i, s) json_object_set_new(catalog, str_or_empty(s, "name"), json_true());
    json_decref(cat);
    rc = load_list(cli, &f, &list);
    if (rc != KL_EXIT_OK) goto cleanup;
    results = calloc(list.count ? list.count : 1, sizeof *results);
    if (!results) {
        rc = cli_error("out of memory");
        goto cleanup;
    }
    unsigned nfn;
    const kl_function *fns = kl_model_functions(model, &nfn);
    for (unsigned c = 0; c < list.count && rc == KL_EXIT_OK; c++) {
        const kl_skill *card = list.items[c];
        bool any_site = false;
        /* each site where the rules could apply the card's transform */
        json_array_foreach(sites, i, s) {
            if (strcmp(site_way(s), "applicable") != 0 || strcmp(str_or_empty(s, "transform"), kl_skill_transform(card)) != 0)
                continue;
            any_site = true;
            char *feat = json_dumps(json_object_get(s, "features"), JSON_COMPACT);
            kl_skill_site site = {str_or_empty(s, "kernel"), (unsigned)json_integer_value(json_object_get(s, "line")),
                                  feat};
            kl_skill_match_result r;
            kl_status st = kl_skill_match_site(card, src, task, &site, extra, present, npresent, &r, &err);
            free(feat);
            if (st != KL_OK) {
                rc = cli_error("%s", err.message);
                break;
            }
            char where[200];
            snprintf(where, sizeof where, "site %s", str_or_empty(s, "site"));
            keep_best(&results[c], &r, where);
        }
        if (any_site || rc != KL_EXIT_OK) continue;
        if (json_object_get(catalog, kl_skill_transform(card))) {
            /* a transform of the rules with no site here: a card is about a site, and there is none */
            memset(&results[c].r, 0, sizeof results[c].r);
            results[c].r.truth = KL_TRUTH_FAILS;
            results[c].have = true;
            results[c].no_site = true;
            snprintf(results[c].where, sizeof results[c].where, "no site");
            continue;
        }
        /* a transform the rules do not know (another rewriter's): each kernel as a whole */
        for (unsigned k = 0; k < nfn && rc == KL_EXIT_OK; k++) {
            if (fns[k].kind != KL_FUNCTION_KERNEL) continue;
            kl_skill_site site = {fns[k].name, 0, NULL};
            kl_skill_match_result r;
            if (kl_skill_match_site(card, src, task, &site, extra, present, npresent, &r, &err) != KL_OK) {
                rc = cli_error("%s", err.message);
                break;
            }
            char where[200];
            snprintf(where, sizeof where, "kernel %s", fns[k].name);
            keep_best(&results[c], &r, where);
        }
        if (!results[c].have && rc == KL_EXIT_OK) {
            kl_skill_match_result r;
            if (kl_skill_match(card, extra, present, npresent, &r, &err) != KL_OK) {
                rc = cli_error("%s", err.message);
                break;
            }
            keep_best(&results[c], &r, "the file (no kernel found)");
        }
    }
    if (rc == KL_EXIT_OK) {
        unsigned counts[3] = {0, 0, 0}, checks[3] = {0, 0, 0};
        for (unsigned c = 0; c < list.count; c++) {
            counts[rank(results[c].r.truth)]++;
            for (unsigned k = 0; k < results[c].r.nchecks; k++) checks[rank(results[c].r.checks[k].truth)]++;
        }
        if (cli->json) {
            json_t *doc = json_object();
            json_object_set_new(doc, "file", json_string(file));
            json_t *sz = json_object();
            for (unsigned k = 0; task && k < task->nsizes; k++)
                json_object_set_new(sz, task->sizes[k], json_integer(task->bench.values[k]));
            if (!task) json_object_update(sz, given);
            json_object_set_new(doc, "sizes", sz);
            json_t *pa = json_array();
            for (unsigned k = 0; k < npresent; k++) json_array_append_new(pa, json_string(present[k]));
            json_object_set_new(doc, "present", pa);
            json_object_set_new(doc, "counts", json_pack("{s:I, s:I, s:I}", "holds", (json_int_t)counts[0], "unknown",
                                                         (json_int_t)counts[1], "fails", (json_int_t)counts[2]));
            json_object_set_new(doc, "conditions", json_pack("{s:I, s:I, s:I}", "holds", (json_int_t)checks[0],
                                                             "unknown", (json_int_t)checks[1], "fails",
                                                             (json_int_t)checks[2]));
            json_t *arr = json_array();
            for (unsigned c = 0; c < list.count; c++) {
                const best *b = &results[c];
                json_t *o = json_object();
                json_object_set_new(o, "id", json_string(kl_skill_id(list.items[c])));
                json_object_set_new(o, "transform", json_string(kl_skill_transform(list.items[c])));
                json_object_set_new(o, "result", json_string(kl_truth_name(b->r.truth)));
                json_object_set_new(o, "where", json_string(b->where));
                json_object_set_new(o, "no_site", json_boolean(b->no_site));
                json_object_set_new(o, "already_present",
                                    json_boolean(json_object_get(present_set, kl_skill_transform(list.items[c])) != NULL));
                json_t *cks = json_array();
                for (unsigned k = 0; k < b->r.nchecks; k++)
                    json_array_append_new(cks, json_pack("{s:s, s:s, s:s, s:s, s:s}", "predicate", b->r.checks[k].predicate,
                                                         "kind", b->r.checks[k].kind, "result",
                                                         kl_truth_name(b->r.checks[k].truth), "why", b->r.checks[k].why,
                                                         "shape", b->r.checks[k].shape));
                json_object_set_new(o, "checks", cks);
                json_t *miss = json_array();
                for (unsigned k = 0; k < b->r.nmissing; k++) json_array_append_new(miss, json_string(b->r.missing[k]));
                json_object_set_new(o, "missing_requires", miss);
                json_object_set_new(o, "requires_unknown", json_boolean(b->r.requires_unknown));
                if (b->r.observables) json_object_set(o, "observables", b->r.observables);
                json_array_append_new(arr, o);
            }
            json_object_set_new(doc, "skills", arr);
            char *t = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
            json_decref(doc);
            rc = t ? write_stdout(t) : cli_error("out of memory");
            if (t) rc = write_stdout("\n");
            free(t);
        } else {
            printf("%s: %u skill%s: %u hold, %u unknown, %u fail (conditions: %u hold, %u unknown, %u fail)\n", file,
                   list.count, list.count == 1 ? "" : "s", counts[0], counts[1], counts[2], checks[0], checks[1],
                   checks[2]);
            int wid = 2;
            for (unsigned c = 0; c < list.count; c++)
                if ((int)strlen(kl_skill_id(list.items[c])) > wid) wid = (int)strlen(kl_skill_id(list.items[c]));
            for (int r = 0; r < 3; r++)
                for (unsigned c = 0; c < list.count; c++) {
                    const best *b = &results[c];
                    if (rank(b->r.truth) != r) continue;
                    printf("%-7s  %-*s  at %s", kl_truth_name(b->r.truth), wid, kl_skill_id(list.items[c]), b->where);
                    if (json_object_get(present_set, kl_skill_transform(list.items[c])))
                        printf(" (the kernel already has %s somewhere)", kl_skill_transform(list.items[c]));
                    print_reasons(b, kl_skill_transform(list.items[c]));
                    printf("\n");
                }
            if (!list.count) cli_note(cli, "no skills in %s yet: 'klineage lineage TASK_DIR' learns them\n", cli->db_path);
            if (fflush(stdout) != 0) rc = cli_error("cannot write to standard output");
        }
    }
cleanup:
    for (unsigned c = 0; results && c < list.count; c++)
        if (results[c].have) kl_skill_match_release(&results[c].r);
    free(results);
    kl_skill_list_release(&list);
    free((void *)present);
    free(sites_text);
    json_decref(sites);
    json_decref(given);
    json_decref(extra);
    json_decref(present_set);
    json_decref(catalog);
    kl_model_free(model);
    kl_source_free(src);
    kl_task_free(task);
    return rc;
}

/* ---- admit --------------------------------------------------------------------------------- */

static volatile sig_atomic_t admit_stop;
static void admit_on_sigint(int sig)
{
    (void)sig;
    admit_stop = 1;
}

typedef struct admit_progress {
    const kl_cli *cli;
    const cli_measure *m;
} admit_progress;

static void on_trial(void *user, const char *card, const char *task, const char *verdict, double gain)
{
    admit_progress *p = user;
    if (p->cli->quiet) return;
    if (gain > 0) cli_measure_printf(p->m, stderr, "  %s on %s: %s (%.2fx)\n", card, task, verdict, gain);
    else cli_measure_printf(p->m, stderr, "  %s on %s: %s\n", card, task, verdict);
}

/* The task folders of the stored lineages (their "task_dir"), for admit without --task. */
static bool lineage_dir(const char *key, const char *json, void *user)
{
    (void)key;
    json_t *d = json_loads(json, 0, NULL);
    const char *dir = json_string_value(json_object_get(d, "task_dir"));
    if (dir && !json_object_get(user, dir)) json_object_set_new(user, dir, json_true());
    json_decref(d);
    return true;
}

static int cmd_admit(int argc, char **argv, kl_cli *cli)
{
    json_t *dirs = json_object();
    const char *only = NULL;
    double min_gain = 1.02;
    unsigned max_other = 1;
    cli_measure m = CLI_MEASURE_INIT;
    int rc = KL_EXIT_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) {
            json_decref(dirs);
            return KL_EXIT_USAGE;
        }
        if (r > 0) {
            i--;
            continue;
        }
        if (!strcmp(a, "--task") || !strcmp(a, "--card") || !strcmp(a, "--min-gain") || !strcmp(a, "--max-other")) {
            if (i + 1 >= argc) {
                json_decref(dirs);
                return cli_usage_error(cli, "option %s needs a value", a);
            }
            const char *v = argv[++i];
            char *end;
            if (!strcmp(a, "--task")) {
                json_object_set_new(dirs, v, json_true());
            } else if (!strcmp(a, "--card")) {
                only = v;
            } else if (!strcmp(a, "--min-gain")) {
                min_gain = strtod(v, &end);
                if (*end || min_gain < 0 || min_gain > 100) {
                    json_decref(dirs);
                    return cli_usage_error(cli, "--min-gain takes a ratio such as 1.02, not '%s'", v);
                }
            } else {
                long n = strtol(v, &end, 10);
                if (*end || n < 0 || n > 16) {
                    json_decref(dirs);
                    return cli_usage_error(cli, "--max-other takes a count (0 to 16), not '%s'", v);
                }
                max_other = (unsigned)n;
            }
        } else if (is_option(a)) {
            json_decref(dirs);
            return cli_usage_error(cli, "unknown option '%s' for 'skills admit'", a);
        } else {
            json_decref(dirs);
            return cli_usage_error(cli, "'skills admit' takes no arguments (tasks are given with --task DIR)");
        }
    }
    cli_measure_auto(cli);
    kl_error err = {0};
    kl_gate *gate = NULL;
    kl_rewriter *rw = NULL;
    kl_task **tasks = NULL;
    unsigned ntasks = 0;
    char *report = NULL;
    const char *first_dir = NULL;
    {
        const char *k;
        json_t *v;
        json_object_foreach(dirs, k, v) {
            first_dir = k;
            break;
        }
    }
    rc = cli_measure_open(cli, &m, first_dir);
    if (rc != KL_EXIT_OK) goto cleanup;
    if (!json_object_size(dirs)) (void)kl_store_each(m.store, "lineage", NULL, lineage_dir, dirs, &err);
    if (!json_object_size(dirs)) {
        rc = cli_measure_error(&m, "no task to admit on: give --task DIR (no stored lineage names one)");
        goto cleanup;
    }
    tasks = calloc(json_object_size(dirs), sizeof *tasks);
    if (!tasks) {
        rc = cli_measure_error(&m, "out of memory");
        goto cleanup;
    }
    const char *dir;
    json_t *dv;
    json_object_foreach(dirs, dir, dv) {
        if (kl_task_load(dir, &tasks[ntasks], &err) != KL_OK) {
            rc = cli_measure_error(&m, "%s", err.message);
            goto cleanup;
        }
        ntasks++;
    }
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    if (kl_gate_open(&go, &gate, &err) != KL_OK || kl_rewriter_open_ex("rules", NULL, m.store, &rw, &err) != KL_OK) {
        rc = cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    admit_progress ap = {cli, &m};
    kl_admit_options ao = {0};
    ao.store = m.store;
    ao.rewriter = rw;
    ao.judge = kl_gate_search_judge;
    ao.judge_user = gate;
    if (!m.replay) ao.prepare = kl_gate_search_prepare;
    ao.tasks = (const kl_task *const *)tasks;
    ao.ntasks = ntasks;
    ao.min_gain = min_gain;
    ao.max_other = max_other;
    ao.only_id = only;
    ao.interrupt = &admit_stop;
    ao.progress = on_trial;
    ao.progress_user = &ap;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = admit_on_sigint;
    sigaction(SIGINT, &sa, &old);
    kl_status st = kl_lineage_admit(&ao, &report, &err);
    sigaction(SIGINT, &old, NULL);
    if (st != KL_OK) {
        rc = cli_measure_error(&m, "%s", err.message);
        if (st == KL_ERR_INTERRUPTED) cli_measure_finish(cli, &m);
        if (st == KL_ERR_INTERRUPTED) rc = KL_EXIT_INTERRUPTED;
        goto cleanup;
    }
    json_t *rep = json_loads(report, 0, NULL);
    if (cli->json) {
        json_t *d = m.replay ? json_loads(report, 0, NULL) : NULL;
        if (d) json_object_set_new(d, "replayed", json_true());
        char *t = d ? json_dumps(d, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
        printf("%s\n", t ? t : report);
        free(t);
        json_decref(d);
    } else {
        cli_measure_printf(&m, stdout, "| card | transform | from | admission | trials (task: verdict, gain) |\n"
                                       "| --- | --- | --- | --- | --- |\n");
        size_t i, j;
        json_t *row, *t;
        json_array_foreach(json_object_get(rep, "cards"), i, row) {
            json_t *adm = json_object_get(row, "admission");
            char trials[2048] = "";
            size_t used = 0;
            json_array_foreach(json_object_get(adm, "trials"), j, t) {
                double g = json_number_value(json_object_get(t, "gain"));
                char one[400];
                if (g > 0)
                    snprintf(one, sizeof one, "%s%s%s: %s %.2fx", j ? "; " : "", str_or_empty(t, "task"),
                             json_is_true(json_object_get(t, "own")) ? " (own)" : "", str_or_empty(t, "verdict"), g);
                else
                    snprintf(one, sizeof one, "%s%s%s: %s (%.120s)", j ? "; " : "", str_or_empty(t, "task"),
                             json_is_true(json_object_get(t, "own")) ? " (own)" : "", str_or_empty(t, "verdict"),
                             str_or_empty(t, "detail"));
                size_t n = strlen(one);
                if (used + n + 1 < sizeof trials) {
                    memcpy(trials + used, one, n + 1);
                    used += n;
                }
            }
            cli_measure_printf(&m, stdout, "| `%s` | %s | %s | %s | %s |\n", str_or_empty(row, "id"),
                               str_or_empty(row, "transform"), str_or_empty(row, "task"), str_or_empty(adm, "status"),
                               used ? trials : "–");
        }
        cli_measure_printf(&m, stdout, "\n%lld admitted, %lld rejected, %lld untried (of %zu cards).\n",
                           (long long)json_integer_value(json_object_get(rep, "admitted")),
                           (long long)json_integer_value(json_object_get(rep, "rejected")),
                           (long long)json_integer_value(json_object_get(rep, "untried")),
                           json_array_size(json_object_get(rep, "cards")));
    }
    json_decref(rep);
    rc = cli_measure_finish(cli, &m);
cleanup:
    free(report);
    kl_rewriter_free(rw);
    kl_gate_close(gate);
    for (unsigned i = 0; i < ntasks; i++) kl_task_free(tasks[i]);
    free(tasks);
    json_decref(dirs);
    cli_measure_close(&m);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

KL_CMD(skills)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    if (argc < 2) return cli_usage_error(cli, "'skills' needs an action: list, show, delete, export, import, match or admit");
    const char *action = argv[1];
    if (!strcmp(action, "list")) return cmd_list(argc - 1, argv + 1, cli);
    if (!strcmp(action, "show")) return cmd_show(argc - 1, argv + 1, cli);
    if (!strcmp(action, "delete")) return cmd_delete(argc - 1, argv + 1, cli);
    if (!strcmp(action, "export")) return cmd_export(argc - 1, argv + 1, cli);
    if (!strcmp(action, "import")) return cmd_import(argc - 1, argv + 1, cli);
    if (!strcmp(action, "match")) return cmd_match(argc - 1, argv + 1, cli);
    if (!strcmp(action, "admit")) return cmd_admit(argc - 1, argv + 1, cli);
    return cli_usage_error(cli, "unknown action '%s' for 'skills' (list, show, delete, export, import, match, admit)",
                           action);
}
