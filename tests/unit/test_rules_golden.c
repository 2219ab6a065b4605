/* The rules catalog's golden cases, all of them: every folder under tests/data/rules/ (and one level
 * below, e.g. grid-stride/multi/) holding NAME.before.cu / NAME.after.cu pairs is one test. Each
 * case's operation is its `// test: apply T@SITE [k=v…] [| remove T@SITE2 [exact|parses]]` line (in
 * the .before.cu, or in NAME.test beside it): the rewrite must give the .after.cu byte for byte, the
 * reverse (after '|') the original (exact), or only succeed (parses), or what the folder's
 * round-trip rule accepts. The folder's
 * golden.conf says that rule and the counts it needs (trip = site | same-site | free-site | exact,
 * min_cases, min_trips, min_exact, every_trip, must_change, compile_trips; transform = T when the
 * folder is not named for it). Every result is compiled at the end, in one batch, through the
 * content-hash cache the other rules tests share (rules_golden.h). KL_UPDATE_GOLDEN=1 rewrites
 * the .after.cu files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rules_golden.h"

typedef struct folder {
    char rel[256];       /* under tests/data/rules/ */
    char transform[64];
    golden_opts opts;
} folder;

static golden_batch compiles;
static folder *folders;
static unsigned nfolders;

static bool has_goldens(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool yes = false;
    while (!yes && (e = readdir(d))) yes = kl_str_ends(e->d_name, ".before.cu");
    closedir(d);
    return yes;
}

/* golden.conf: `key = value` lines, '#' comments. */
static void read_conf(const char *dir, folder *f)
{
    char p[1400];
    kl_snprintf(p, sizeof p, "%s/golden.conf", dir);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s (each golden folder says its rules there)", p, err.message);
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        while (*line == ' ') line++;
        if (*line == '#' || !*line) continue;
        char key[64], val[64];
        if (sscanf(line, "%63[a-z_] = %63s", key, val) != 2) fail_msg("%s: cannot read '%s'", p, line);
        unsigned v = (unsigned)atoi(val);
        if (!strcmp(key, "transform")) kl_snprintf(f->transform, sizeof f->transform, "%s", val);
        else if (!strcmp(key, "min_cases")) f->opts.min_cases = v;
        else if (!strcmp(key, "min_trips")) f->opts.min_trips = v;
        else if (!strcmp(key, "min_exact")) f->opts.min_exact = v;
        else if (!strcmp(key, "every_trip")) f->opts.every_trip = v != 0;
        else if (!strcmp(key, "must_change")) f->opts.must_change = v != 0;
        else if (!strcmp(key, "compile_trips")) f->opts.compile_trips = v != 0;
        else if (!strcmp(key, "trip")) {
            if (!strcmp(val, "site")) f->opts.trip = GOLDEN_TRIP_SITE;
            else if (!strcmp(val, "same-site")) f->opts.trip = GOLDEN_TRIP_SAME_SITE;
            else if (!strcmp(val, "free-site")) f->opts.trip = GOLDEN_TRIP_FREE_SITE;
            else if (!strcmp(val, "exact")) f->opts.trip = GOLDEN_TRIP_EXACT;
            else fail_msg("%s: trip = %s: site, same-site, free-site or exact", p, val);
        } else fail_msg("%s: unknown key '%s'", p, key);
    }
    free(t);
}

static int name_cmp(const void *a, const void *b) { return strcmp(((const folder *)a)->rel, ((const folder *)b)->rel); }

/* Every folder with golden pairs, up to two levels below tests/data/rules/. */
static void discover(const char *root, const char *rel, unsigned depth)
{
    char dir[1200];
    kl_snprintf(dir, sizeof dir, "%s/%s", root, rel);
    if (*rel && has_goldens(dir)) {
        folders = realloc(folders, (nfolders + 1) * sizeof *folders);
        folder *f = &folders[nfolders++];
        memset(f, 0, sizeof *f);
        kl_snprintf(f->rel, sizeof f->rel, "%s", rel);
        const char *slash = strchr(rel, '/');
        kl_snprintf(f->transform, sizeof f->transform, "%.*s", (int)(slash ? (size_t)(slash - rel) : strlen(rel)), rel);
        read_conf(dir, f);
    }
    if (depth >= 2) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1400];
        kl_snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(sub, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        char r[512];
        kl_snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        discover(root, r, depth + 1);
    }
    closedir(d);
}

static void golden_folder(void **state)
{
    folder *f = *state;
    golden_opts o = f->opts;
    o.sub = f->rel;
    o.batch = &compiles;
    golden_run_opts(f->transform, &o);
}

/* Every .after.cu, and every round trip that is not the original where the folder asks, compiles. */
static void golden_results_compile(void **state)
{
    (void)state;
    assert_true(compiles.n > 0);
    golden_batch_compile(&compiles);
}

static int teardown(void **state)
{
    (void)state;
    golden_batch_release(&compiles);
    return 0;
}

int main(void)
{
    const char *data = getenv("KL_TEST_DATA");
    if (!data) {
        fprintf(stderr, "KL_TEST_DATA is not set\n");
        return 1;
    }
    char root[1024];
    kl_snprintf(root, sizeof root, "%s/rules", data);
    discover(root, "", 0);
    qsort(folders, nfolders, sizeof *folders, name_cmp);
    struct CMUnitTest *tests = calloc(nfolders + 1, sizeof *tests);
    char **names = calloc(nfolders + 1, sizeof *names);
    if (!tests || !names || nfolders < 20) {
        fprintf(stderr, "%u golden folders found under %s (at least 20 expected)\n", nfolders, root);
        return 1;
    }
    for (unsigned i = 0; i < nfolders; i++) {
        names[i] = malloc(300);
        kl_snprintf(names[i], 300, "golden %s", folders[i].rel);
        tests[i] = (struct CMUnitTest){names[i], golden_folder, NULL, NULL, &folders[i]};
    }
    tests[nfolders] = (struct CMUnitTest){"golden results compile", golden_results_compile, NULL, NULL, NULL};
    int rc = _cmocka_run_group_tests("rules golden", tests, nfolders + 1, NULL, teardown);
    for (unsigned i = 0; i < nfolders; i++) free(names[i]);
    free(names);
    free(tests);
    free(folders);
    return rc;
}
