/* src/store: documents, transactions, the archive, concurrent handles, files that are not stores. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "klineage/store.h"
#include "util/util.h"

typedef struct fixture {
    char *dir;
    char *db;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    if (kl_tempdir("test-store", &f->dir, &err) != KL_OK) return -1;
    f->db = kl_path_join(f->dir, "k.db");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kl_remove_tree(f->dir, NULL);
    free(f->dir);
    free(f->db);
    free(f);
    return 0;
}

static kl_store *open_ok(const char *path)
{
    kl_store *s = NULL;
    kl_error err = {0};
    if (kl_store_open(path, &s, &err) != KL_OK) fail_msg("%s", err.message);
    return s;
}

static void put_ok(kl_store *s, const char *kind, const char *key, const char *json)
{
    kl_error err = {0};
    if (kl_store_put(s, kind, key, json, &err) != KL_OK) fail_msg("%s", err.message);
}

/* The document as compact JSON with sorted keys (for comparisons that ignore spacing). */
static char *canonical(const char *json)
{
    json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(j);
    char *t = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(j);
    return t;
}

static bool has_doc(kl_store *s, const char *kind, const char *key)
{
    char *json = NULL;
    kl_error err = {0};
    kl_status st = kl_store_get(s, kind, key, &json, &err);
    free(json);
    if (st != KL_OK && st != KL_ERR_NOT_FOUND) fail_msg("%s", err.message);
    return st == KL_OK;
}

static void put_get_replace_delete(void **state)
{
    fixture *f = *state;
    kl_store *s = open_ok(f->db);
    kl_error err = {0};
    char *json = NULL;
    put_ok(s, "verdict", "abc", "{\"ok\": true, \"n\": 1}");
    assert_int_equal(kl_store_get(s, "verdict", "abc", &json, &err), KL_OK);
    assert_string_equal(json, "{\"ok\": true, \"n\": 1}");
    free(json);
    put_ok(s, "verdict", "abc", "{\"ok\": false}");
    assert_int_equal(kl_store_get(s, "verdict", "abc", &json, &err), KL_OK);
    assert_string_equal(json, "{\"ok\": false}");
    free(json);
    /* kinds are separate namespaces */
    assert_int_equal(kl_store_get(s, "skill", "abc", &json, &err), KL_ERR_NOT_FOUND);
    assert_null(json);
    assert_non_null(strstr(err.message, "skill"));
    /* any JSON value, not only objects */
    put_ok(s, "gpu", "list", "[1, 2.5, \"x\"]");
    assert_int_equal(kl_store_delete(s, "verdict", "abc", &err), KL_OK);
    assert_false(has_doc(s, "verdict", "abc"));
    assert_int_equal(kl_store_delete(s, "verdict", "abc", &err), KL_ERR_NOT_FOUND);
    /* invalid documents and names are refused, and nothing is written */
    assert_int_equal(kl_store_put(s, "verdict", "bad", "{\"ok\": tru}", &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "verdict/bad"));
    assert_non_null(strstr(err.message, "column"));
    assert_false(has_doc(s, "verdict", "bad"));
    assert_int_equal(kl_store_put(s, "verdict", "bad", "{} trailing", &err), KL_ERR_PARSE);
    assert_int_equal(kl_store_put(s, "", "k", "{}", &err), KL_ERR_INVALID);
    assert_int_equal(kl_store_put(s, "Verdict", "k", "{}", &err), KL_ERR_INVALID);
    assert_int_equal(kl_store_put(s, "verdict", "", "{}", &err), KL_ERR_INVALID);
    assert_int_equal(kl_store_put(s, "verdict", "a\nb", "{}", &err), KL_ERR_INVALID);
    kl_store_close(s);
    kl_store_close(NULL);
    /* it persists */
    s = open_ok(f->db);
    assert_true(has_doc(s, "gpu", "list"));
    kl_store_close(s);
}

typedef struct visit {
    char keys[16][16];
    unsigned n, stop_after;
} visit;

static bool collect(const char *key, const char *json, void *user)
{
    visit *v = user;
    (void)json;
    kl_snprintf(v->keys[v->n++], sizeof v->keys[0], "%s", key);
    return v->n < v->stop_after;
}

static void each_in_key_order_with_prefix(void **state)
{
    (void)state;
    kl_store *s = open_ok(":memory:");
    const char *keys[] = {"b2", "a1", "b10", "c", "b1", "ba"};
    for (size_t i = 0; i < 6; i++) put_ok(s, "skill", keys[i], "{}");
    put_ok(s, "verdict", "b0", "{}");
    kl_error err = {0};
    visit v = {.stop_after = 100};
    assert_int_equal(kl_store_each(s, "skill", NULL, collect, &v, &err), KL_OK);
    assert_int_equal(v.n, 6);
    for (unsigned i = 1; i < v.n; i++) assert_true(strcmp(v.keys[i - 1], v.keys[i]) < 0);
    memset(&v, 0, sizeof v);
    v.stop_after = 100;
    assert_int_equal(kl_store_each(s, "skill", "b", collect, &v, &err), KL_OK);
    assert_int_equal(v.n, 4); /* b1 b10 b2 ba, not b0 of another kind */
    assert_string_equal(v.keys[0], "b1");
    assert_string_equal(v.keys[3], "ba");
    memset(&v, 0, sizeof v);
    v.stop_after = 2;
    assert_int_equal(kl_store_each(s, "skill", "", collect, &v, &err), KL_OK);
    assert_int_equal(v.n, 2);
    kl_store_close(s);
}

static void transactions_nest_by_count(void **state)
{
    fixture *f = *state;
    kl_store *s = open_ok(f->db);
    kl_error err = {0};
    /* rolled back: gone */
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "lineage", "x", "{}");
    assert_int_equal(kl_store_rollback(s), KL_OK);
    assert_false(has_doc(s, "lineage", "x"));
    /* nested: the inner rollback undoes only the inner puts */
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "lineage", "outer", "{}");
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "lineage", "inner", "{}");
    assert_int_equal(kl_store_rollback(s), KL_OK);
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "lineage", "inner2", "{}");
    assert_int_equal(kl_store_commit(s, &err), KL_OK);
    /* not visible to another handle before the outer commit */
    kl_store *other = open_ok(f->db);
    assert_false(has_doc(other, "lineage", "outer"));
    assert_int_equal(kl_store_commit(s, &err), KL_OK);
    assert_true(has_doc(other, "lineage", "outer"));
    assert_true(has_doc(other, "lineage", "inner2"));
    assert_false(has_doc(other, "lineage", "inner"));
    /* unbalanced */
    assert_int_equal(kl_store_commit(s, &err), KL_ERR_INVALID);
    assert_int_equal(kl_store_rollback(s), KL_ERR_INVALID);
    /* closing with an open transaction rolls it back */
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "lineage", "dropped", "{}");
    kl_store_close(s);
    assert_false(has_doc(other, "lineage", "dropped"));
    kl_store_close(other);
}

static void two_handles_and_two_processes(void **state)
{
    fixture *f = *state;
    kl_store *a = open_ok(f->db), *b = open_ok(f->db);
    for (int i = 0; i < 50; i++) {
        char key[16];
        kl_snprintf(key, sizeof key, "k%02d", i);
        put_ok(i % 2 ? a : b, "verdict", key, "{\"i\": 1}");
    }
    visit v = {.stop_after = 1000};
    kl_error err = {0};
    /* both handles see everything: k00 … k09 */
    assert_int_equal(kl_store_each(a, "verdict", "k0", collect, &v, &err), KL_OK);
    assert_int_equal(v.n, 10);
    memset(&v, 0, sizeof v);
    v.stop_after = 1000;
    assert_int_equal(kl_store_each(b, "verdict", "k4", collect, &v, &err), KL_OK);
    assert_int_equal(v.n, 10);
    /* a writer's open transaction does not block a reader (WAL) */
    assert_int_equal(kl_store_begin(a, &err), KL_OK);
    put_ok(a, "verdict", "pending", "{}");
    assert_true(has_doc(b, "verdict", "k00"));
    assert_false(has_doc(b, "verdict", "pending"));
    assert_int_equal(kl_store_commit(a, &err), KL_OK);
    assert_true(has_doc(b, "verdict", "pending"));
    kl_store_close(a);
    kl_store_close(b);
    /* two processes writing at once: every document lands (busy timeout, no lost writes) */
    pid_t pids[2];
    for (int p = 0; p < 2; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            kl_store *s = NULL;
            if (kl_store_open(f->db, &s, NULL) != KL_OK) _exit(1);
            for (int i = 0; i < 100; i++) {
                char key[16];
                kl_snprintf(key, sizeof key, "p%d-%03d", p, i);
                if (kl_store_begin(s, NULL) != KL_OK || kl_store_put(s, "run", key, "{}", NULL) != KL_OK ||
                    kl_store_commit(s, NULL) != KL_OK)
                    _exit(2);
            }
            kl_store_close(s);
            _exit(0);
        }
    }
    for (int p = 0; p < 2; p++) {
        int status = 0;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    kl_store *s = open_ok(f->db);
    unsigned count = 0;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 100; i++) {
            char key[16];
            kl_snprintf(key, sizeof key, "p%d-%03d", p, i);
            count += has_doc(s, "run", key);
        }
    assert_int_equal(count, 200);
    kl_store_close(s);
}

static void export_import_round_trip(void **state)
{
    fixture *f = *state;
    kl_store *s = open_ok(f->db);
    put_ok(s, "verdict", "zz", "{\"b\": 1, \"a\": {\"d\": [3, 2], \"c\": null}}");
    put_ok(s, "verdict", "aa", "{\"x\":   0.1}");
    put_ok(s, "skill", "vectorize", "{\"id\": \"vectorize\", \"intent\": \"wider loads\\n\\\"quoted\\\"\"}");
    put_ok(s, "llm", "cache1", "\"just a string\"");
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    kl_error err = {0};
    const char *kinds[] = {"verdict", "skill", NULL};
    assert_int_equal(kl_store_export(s, kinds, archive, &err), KL_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kl_file_read(archive, 0, &text, &len, &err), KL_OK);
    /* one line per document, sorted by (kind, key), keys of each doc sorted, compact */
    const char *want_order[][2] = {{"skill", "vectorize"}, {"verdict", "aa"}, {"verdict", "zz"}};
    char *save = NULL;
    unsigned lines = 0;
    char *copy = kl_strdup(text);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
        assert_true(lines < 3);
        assert_true(kl_str_starts(line, "{\"kind\":"));
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "kind")), want_order[lines][0]);
        assert_string_equal(json_string_value(json_object_get(j, "key")), want_order[lines][1]);
        char *stored = NULL;
        assert_int_equal(kl_store_get(s, want_order[lines][0], want_order[lines][1], &stored, &err), KL_OK);
        char *want_doc = canonical(stored);
        assert_non_null(strstr(line, want_doc)); /* compact, sorted: exactly the canonical text */
        free(want_doc);
        free(stored);
        json_decref(j);
    }
    assert_int_equal(lines, 3);
    free(copy);
    /* stable: the same store exports the same bytes */
    char *archive2 = kl_path_join(f->dir, "archive2.jsonl");
    assert_int_equal(kl_store_export(s, kinds, archive2, &err), KL_OK);
    char *text2 = NULL;
    assert_int_equal(kl_file_read(archive2, 0, &text2, NULL, &err), KL_OK);
    assert_string_equal(text, text2);
    /* import into a fresh store: the same documents */
    kl_store *t = open_ok(":memory:");
    unsigned count = 0;
    assert_int_equal(kl_store_import(t, archive, &count, &err), KL_OK);
    assert_int_equal(count, 3);
    for (unsigned i = 0; i < 3; i++) {
        char *x = NULL, *y = NULL;
        assert_int_equal(kl_store_get(s, want_order[i][0], want_order[i][1], &x, &err), KL_OK);
        assert_int_equal(kl_store_get(t, want_order[i][0], want_order[i][1], &y, &err), KL_OK);
        char *cx = canonical(x), *cy = canonical(y);
        assert_string_equal(cx, cy);
        free(cx);
        free(cy);
        free(x);
        free(y);
    }
    assert_false(has_doc(t, "llm", "cache1"));
    /* and its export is byte-identical to the first */
    assert_int_equal(kl_store_export(t, kinds, archive2, &err), KL_OK);
    free(text2);
    assert_int_equal(kl_file_read(archive2, 0, &text2, NULL, &err), KL_OK);
    assert_string_equal(text, text2);
    /* NULL kinds: everything */
    assert_int_equal(kl_store_export(s, NULL, archive2, &err), KL_OK);
    free(text2);
    assert_int_equal(kl_file_read(archive2, 0, &text2, NULL, &err), KL_OK);
    assert_non_null(strstr(text2, "\"kind\":\"llm\""));
    kl_store_close(t);
    kl_store_close(s);
    free(text);
    free(text2);
    free(archive);
    free(archive2);
}

static void import_is_all_or_nothing(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "bad.jsonl");
    kl_error err = {0};
    const char *bad_lines[] = {
        "{\"kind\":\"verdict\",\"key\":\"a\",\"doc\":{}}\n\n{\"kind\":\"verdict\",\"key\":\"b\",\"doc\":{}}\n"
        "{\"kind\":\"verdict\",\"key\":\"c\",\"doc\":{\n",
        "{\"kind\":\"verdict\",\"key\":\"a\",\"doc\":{}}\n{\"kind\":\"verdict\",\"key\":\"b\",\"doc\":{}}\n"
        "{\"kind\":\"verdict\",\"key\":\"c\"}\n",
        "{\"kind\":\"verdict\",\"key\":\"a\",\"doc\":{}}\n{\"kind\":\"verdict\",\"key\":\"b\",\"doc\":{}}\n"
        "{\"kind\":\"BAD KIND\",\"key\":\"c\",\"doc\":{}}\n",
    };
    const char *want_line[] = {":4", ":3", ":3"};
    kl_store *s = open_ok(f->db);
    put_ok(s, "verdict", "a", "{\"old\": true}");
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(kl_file_write(archive, bad_lines[i], strlen(bad_lines[i]), &err), KL_OK);
        unsigned count = 99;
        kl_status st = kl_store_import(s, archive, &count, &err);
        assert_true(st == KL_ERR_PARSE || st == KL_ERR_INVALID);
        assert_int_equal(count, 0);
        char want[512];
        kl_snprintf(want, sizeof want, "%s%s", archive, want_line[i]);
        if (!strstr(err.message, want)) fail_msg("case %zu: '%s' does not name %s", i, err.message, want);
        /* nothing half-imported: b is absent, a is still the old one */
        assert_false(has_doc(s, "verdict", "b"));
        char *json = NULL;
        assert_int_equal(kl_store_get(s, "verdict", "a", &json, &err), KL_OK);
        assert_string_equal(json, "{\"old\": true}");
        free(json);
    }
    /* a missing archive */
    char *missing = kl_path_join(f->dir, "none.jsonl");
    assert_int_equal(kl_store_import(s, missing, NULL, &err), KL_ERR_NOT_FOUND);
    kl_store_close(s);
    free(missing);
    free(archive);
}

/* ---- the import's fingerprint and its canonical path ---- */

static kl_store_import_stats import_stats(const kl_store *s)
{
    kl_store_import_stats st;
    kl_store_import_stats_get(s, &st);
    return st;
}

/* The file's mtime set to `ago` seconds before now (negative: after): a file written a while
 * ago, as archives are, since one written in the last second is never recorded. */
static void set_mtime(const char *path, long ago)
{
    struct timespec now, times[2];
    clock_gettime(CLOCK_REALTIME, &now);
    times[0] = now;
    times[1].tv_sec = now.tv_sec - ago;
    times[1].tv_nsec = 123456789;
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
}

static void write_archive(const char *path, const char *text)
{
    kl_error err = {0};
    assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    set_mtime(path, 3600);
}

static unsigned import_ok(kl_store *s, const char *archive, const char *const *kinds)
{
    kl_error err = {0};
    unsigned count = 12345;
    if (kl_store_import_kinds(s, archive, kinds, &count, &err) != KL_OK) fail_msg("%s", err.message);
    return count;
}

static char *get_ok(kl_store *s, const char *kind, const char *key)
{
    kl_error err = {0};
    char *json = NULL;
    if (kl_store_get(s, kind, key, &json, &err) != KL_OK) fail_msg("%s", err.message);
    return json;
}

#define THREE_DOCS                                                                                                     \
    "{\"kind\":\"skill\",\"key\":\"s1\",\"doc\":{\"id\":\"s1\"}}\n"                                                 \
    "{\"kind\":\"verdict\",\"key\":\"v1\",\"doc\":{\"a\":1,\"b\":[0.5,\"x\"]}}\n"                                   \
    "{\"kind\": \"verdict\", \"key\": \"v2\", \"doc\": {\"b\": 2, \"a\": 1}}\n"

/* A second import of an archive nobody touched reads nothing, and says as many documents. */
static void an_unchanged_archive_is_not_read_again(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, THREE_DOCS);
    kl_store *s = open_ok(f->db);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    kl_store_import_stats st = import_stats(s);
    assert_int_equal(st.imports, 1);
    assert_int_equal(st.lines, 3);
    assert_int_equal(st.written, 3);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    st = import_stats(s);
    assert_int_equal(st.imports, 1); /* not read again */
    assert_int_equal(st.skipped, 1);
    assert_int_equal(st.lines, 3);
    /* a part of it: held too, and counted as the import would */
    const char *skills[] = {"skill", NULL}, *none[] = {"lineage", NULL};
    assert_int_equal(import_ok(s, archive, skills), 1);
    assert_int_equal(import_ok(s, archive, none), 0);
    assert_int_equal(import_stats(s).imports, 1);
    kl_store_close(s);
    /* the fingerprint is the store's: another handle on it skips, another store reads */
    s = open_ok(f->db);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 0);
    assert_int_equal(import_stats(s).skipped, 1);
    kl_store_close(s);
    char *other_db = kl_path_join(f->dir, "other.db");
    s = open_ok(other_db);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 1);
    kl_store_close(s);
    /* only some kinds taken: a later import of all of them reads it, then holds it all */
    unlink(other_db);
    s = open_ok(other_db);
    assert_int_equal(import_ok(s, archive, skills), 1);
    assert_false(has_doc(s, "verdict", "v1"));
    assert_int_equal(import_ok(s, archive, skills), 1);
    assert_int_equal(import_stats(s).imports, 1);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 2);
    assert_true(has_doc(s, "verdict", "v1"));
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 2);
    kl_store_close(s);
    free(other_db);
    free(archive);
}

/* Any write to the archive is seen: an appended line, a change of the same size with the same
 * mtime (its ctime differs), a new file in its place. */
static void a_changed_archive_is_imported_again(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, THREE_DOCS);
    kl_store *s = open_ok(f->db);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 1);
    /* appended in place, the mtime put back as it was */
    struct stat before;
    assert_int_equal(stat(archive, &before), 0);
    FILE *a = fopen(archive, "a");
    assert_non_null(a);
    fputs("{\"kind\":\"verdict\",\"key\":\"v3\",\"doc\":{\"new\":true}}\n", a);
    fclose(a);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, archive, times, 0), 0);
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 2);
    char *json = get_ok(s, "verdict", "v3");
    assert_string_equal(json, "{\"new\":true}");
    free(json);
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 2);
    /* rewritten in place, the same size, the same mtime */
    assert_int_equal(stat(archive, &before), 0);
    char *text = NULL;
    size_t len = 0;
    kl_error err = {0};
    assert_int_equal(kl_file_read(archive, 0, &text, &len, &err), KL_OK);
    char *at = strstr(text, "{\"new\":true}");
    assert_non_null(at);
    memcpy(at, "{\"new\":null}", 12);
    FILE *w = fopen(archive, "r+");
    assert_non_null(w);
    assert_int_equal(fwrite(text, 1, len, w), len);
    fclose(w);
    free(text);
    times[0] = before.st_atim;
    times[1] = before.st_mtim;
    assert_int_equal(utimensat(AT_FDCWD, archive, times, 0), 0);
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 3);
    json = get_ok(s, "verdict", "v3");
    assert_string_equal(json, "{\"new\":null}");
    free(json);
    /* another file in its place (renamed over it), with the same text */
    assert_int_equal(kl_file_read(archive, 0, &text, &len, &err), KL_OK);
    write_archive(archive, text);
    free(text);
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 4);
    assert_int_equal(import_stats(s).written, 5); /* 3, then v3, then v3 again: nothing this time */
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 4);
    kl_store_close(s);
    free(archive);
}

/* A failed import records nothing: the same bad file fails again, with the same message; once
 * fixed it is imported, and then held. */
static void a_bad_archive_records_no_fingerprint(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    const char *bad[] = {
        "{\"kind\":\"verdict\",\"key\":\"a\",\"doc\":{}}\n{\"kind\":\"verdict\",\"key\":\"b\",\"doc\":{}}\n"
        "{\"kind\":\"verdict\",\"key\":\"c\",\"doc\":{\n",
        "{\"kind\":\"verdict\",\"key\":\"a\",\"doc\":{}}\n{\"kind\":\"BAD KIND\",\"key\":\"c\",\"doc\":{}}\n",
    };
    const char *want[] = {":3:", ":2 (nothing was imported)"};
    kl_store *s = open_ok(f->db);
    for (size_t i = 0; i < 2; i++) {
        write_archive(archive, bad[i]);
        char first[KL_ERROR_MAX] = "";
        for (int round = 0; round < 2; round++) {
            kl_error err = {0};
            unsigned count = 99;
            kl_status st = kl_store_import(s, archive, &count, &err);
            assert_true(st == KL_ERR_PARSE || st == KL_ERR_INVALID);
            assert_int_equal(count, 0);
            char where[512];
            kl_snprintf(where, sizeof where, "%s%s", archive, want[i]);
            if (!strstr(err.message, where)) fail_msg("case %zu: '%s' does not name %s", i, err.message, where);
            if (round == 0) kl_snprintf(first, sizeof first, "%s", err.message);
            else assert_string_equal(err.message, first);
            assert_false(has_doc(s, "verdict", "a"));
        }
    }
    assert_int_equal(import_stats(s).imports, 4);
    assert_int_equal(import_stats(s).skipped, 0);
    write_archive(archive, THREE_DOCS);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 5);
    assert_int_equal(import_stats(s).skipped, 1);
    kl_store_close(s);
    free(archive);
}

/* Skipping must not change what the store holds: a stored document changed or deleted since
 * (by anything) has the archive read again, and its document back, as before. */
static void a_changed_store_compares_again(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, THREE_DOCS);
    kl_store *s = open_ok(f->db);
    kl_error err = {0};
    assert_int_equal(import_ok(s, archive, NULL), 3);
    put_ok(s, "verdict", "v1", "{\"a\": 2}");
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 2);
    char *json = get_ok(s, "verdict", "v1");
    assert_string_equal(json, "{\"a\":1,\"b\":[0.5,\"x\"]}");
    free(json);
    assert_int_equal(kl_store_delete(s, "skill", "s1", &err), KL_OK);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 3);
    assert_true(has_doc(s, "skill", "s1"));
    /* a document the archive does not hold, or the same text again: nothing to compare */
    put_ok(s, "verdict", "elsewhere", "{}");
    put_ok(s, "verdict", "v2", "{\"a\":1,\"b\":2}");
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 3);
    /* the same document written otherwise (indented, keys in another order): nothing is written,
     * the store keeps the archive's text, and nothing needs comparing */
    put_ok(s, "verdict", "v2", "{\n  \"b\": 2,\n  \"a\": 1\n}");
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 3);
    json = get_ok(s, "verdict", "v2");
    assert_string_equal(json, "{\"a\":1,\"b\":2}");
    free(json);
    /* a real change in the same clothes is one */
    put_ok(s, "verdict", "v2", "{\n  \"b\": 2.0,\n  \"a\": 1\n}");
    json = get_ok(s, "verdict", "v2");
    assert_string_equal(json, "{\n  \"b\": 2.0,\n  \"a\": 1\n}");
    free(json);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 4);
    /* a change by another handle on the store counts as well */
    kl_store *other = open_ok(f->db);
    put_ok(other, "verdict", "v2", "{\"a\":0}");
    kl_store_close(other);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 5);
    json = get_ok(s, "verdict", "v2");
    assert_string_equal(json, "{\"a\":1,\"b\":2}");
    free(json);
    kl_store_close(s);
    free(archive);
}

/* The record mode imports the archive, adds verdicts and exports it again: the store then holds
 * all of it, and the next import reads nothing. Not when a stored document is in another form
 * than the archive's (an import rewrites it). */
static void an_export_records_the_archive_it_wrote(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, THREE_DOCS);
    kl_store *s = open_ok(f->db);
    const char *kinds[] = {"verdict", "skill", NULL};
    kl_error err = {0};
    assert_int_equal(import_ok(s, archive, NULL), 3);
    put_ok(s, "verdict", "v9", "{\"measured\":1.5}");
    put_ok(s, "llm", "cache", "{}"); /* not exported */
    assert_int_equal(kl_store_export(s, kinds, archive, &err), KL_OK);
    assert_int_equal(import_ok(s, archive, NULL), 4);
    assert_int_equal(import_stats(s).imports, 1);
    /* another store has no such record */
    char *other_db = kl_path_join(f->dir, "other.db");
    kl_store *t = open_ok(other_db);
    assert_int_equal(import_ok(t, archive, NULL), 4);
    assert_int_equal(import_stats(t).imports, 1);
    kl_store_close(t);
    /* a document stored with spaces: exported canonical, so the store does not hold the
     * archive's text until an import rewrote it */
    put_ok(s, "verdict", "v8", "{\"b\": 1, \"a\": 2}");
    assert_int_equal(kl_store_export(s, kinds, archive, &err), KL_OK);
    assert_int_equal(import_ok(s, archive, NULL), 5);
    assert_int_equal(import_stats(s).imports, 2);
    char *json = get_ok(s, "verdict", "v8");
    assert_string_equal(json, "{\"a\":2,\"b\":1}");
    free(json);
    assert_int_equal(kl_store_export(s, kinds, archive, &err), KL_OK);
    assert_int_equal(import_ok(s, archive, NULL), 5);
    assert_int_equal(import_stats(s).imports, 2);
    /* inside a transaction of the caller's, recorded with it; rolled back with it */
    assert_int_equal(kl_store_begin(s, &err), KL_OK);
    put_ok(s, "verdict", "v7", "{}");
    assert_int_equal(kl_store_export(s, kinds, archive, &err), KL_OK);
    assert_int_equal(kl_store_rollback(s), KL_OK);
    assert_int_equal(import_ok(s, archive, NULL), 6);
    assert_int_equal(import_stats(s).imports, 3);
    assert_true(has_doc(s, "verdict", "v7"));
    kl_store_close(s);
    free(other_db);
    free(archive);
}

/* A file modified within the last second could be modified again within the same tick of the
 * clock that stamps it, unseen: it is imported but not recorded. */
static void an_archive_written_just_now_is_not_recorded(void **state)
{
    fixture *f = *state;
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, THREE_DOCS);
    set_mtime(archive, -30); /* stamped in the future: as racy as now */
    kl_store *s = open_ok(f->db);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 2);
    set_mtime(archive, 5);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_ok(s, archive, NULL), 3);
    assert_int_equal(import_stats(s).imports, 3);
    kl_store_close(s);
    free(archive);
}

/* Documents already in the archive's form are stored as written, the others parsed and dumped:
 * either way the store holds the same bytes as json_dumps(doc, COMPACT | SORT_KEYS) of the
 * parsed document. */
static void imported_documents_are_stored_in_the_canonical_form(void **state)
{
    fixture *f = *state;
    static const char *const docs[] = {
        "{}", "[]", "null", "true", "false", "0", "-1", "9223372036854775807", "-9223372036854775808", "-0",
        "0.5", "1.0", "1.5e300", "1e300", "1.0000000000000001e300", "5e-324", "4.9406564584124654e-324",
        "2.2250738585072014e-308", "-0.0", "0.1", "0.10000000000000001", "1e-7", "9.9999999999999995e-08",
        "1E5", "1e+5", "100000.0", "1e22", "1.0e22", "123456789012345680.0", "1.2345678901234568e+17",
        "\"\"", "\"plain\"", "\"tab\\tnew\\nline\\r\\f\\b\"", "\"ctl\\u0001\\u001F\\u000B\"", "\"ctl\\u001f\"",
        "\"\\u0041\"", "\"slash\\/\"", "\"q\\\"b\\\\\"", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
        "\"\\u00e9\"", "\"\\ud83d\\ude00\"", "\"del\x7f\"",
        "{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}", "{\"\":0,\"a\":{\"\":[]}}", "{\"a\":1,\"ab\":2,\"b\":3}",
        "{\"ab\":1,\"a\":2}", "{\"Z\":1,\"a\":2,\"\xc3\xa9\":3}", "{\"\xc3\xa9\":3,\"a\":2}",
        "{\"k\\n\":1,\"a\":2}", "[1,[2,[3,{\"x\":[]}]],\"s\",null]", "[1, 2]", "{\"a\" :1}", "[ ]",
        "{\"v\":[1.5,2.25,-3.125e-5,6.02214076e23]}", "{\"n\":[0,-5,17,1e2]}",
    };
    size_t nd = sizeof docs / sizeof docs[0];
    kl_strbuf text = KL_STRBUF_INIT;
    unsigned canonical_lines = 0;
    for (size_t i = 0; i < nd; i++) {
        kl_strbuf_addf(&text, "{\"kind\":\"verdict\",\"key\":\"d%03zu\",\"doc\":%s}\n", i, docs[i]);
        char *c = canonical(docs[i]);
        assert_non_null(c);
        if (!strcmp(c, docs[i])) canonical_lines++;
        free(c);
    }
    char *archive = kl_path_join(f->dir, "archive.jsonl");
    write_archive(archive, kl_strbuf_str(&text));
    kl_store *s = open_ok(f->db);
    assert_int_equal(import_ok(s, archive, NULL), nd);
    for (size_t i = 0; i < nd; i++) {
        char key[16];
        kl_snprintf(key, sizeof key, "d%03zu", i);
        char *json = get_ok(s, "verdict", key), *want = canonical(docs[i]);
        if (strcmp(json, want) != 0) fail_msg("%s: stored %s, want %s", docs[i], json, want);
        free(json);
        free(want);
    }
    kl_store_import_stats st = import_stats(s);
    assert_int_equal(st.lines, nd);
    assert_true(canonical_lines > 20);
    assert_int_equal(st.verbatim, canonical_lines);
    kl_store_close(s);
    kl_strbuf_release(&text);
    /* what jansson refuses is refused, whatever its form: a line number, nothing imported */
    static const char *const refused[] = {
        "9223372036854775808", "-9223372036854775809", "12345678901234567890", "1e400", "-1e400",
        "\"nul\\u0000\"", "{\"a\":1,\"a\":1}", "{\"a\":1,\"a\":2}", "\"bad\xc3\"", "\"bad\xed\xa0\x80\"",
        "\"over\xc0\xaf\"", "\"raw\ttab\"", "01", "1.", ".5", "+1", "[1,]", "{\"a\":}", "tru", "\"\\x\"",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        kl_strbuf bad = KL_STRBUF_INIT;
        kl_strbuf_addf(&bad,
                       "{\"kind\":\"verdict\",\"key\":\"ok\",\"doc\":{}}\n"
                       "{\"kind\":\"verdict\",\"key\":\"x\",\"doc\":%s}\n",
                       refused[i]);
        write_archive(archive, kl_strbuf_str(&bad));
        kl_strbuf_release(&bad);
        kl_store *t = open_ok(":memory:");
        kl_error err = {0};
        unsigned count = 99;
        if (kl_store_import(t, archive, &count, &err) == KL_OK) fail_msg("%s was imported", refused[i]);
        assert_int_equal(count, 0);
        char where[512];
        kl_snprintf(where, sizeof where, "%s:2", archive);
        if (!strstr(err.message, where)) fail_msg("%s: '%s' does not name %s", refused[i], err.message, where);
        assert_false(has_doc(t, "verdict", "ok"));
        kl_store_close(t);
    }
    free(archive);
}

static void files_that_are_not_stores_are_left_alone(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    kl_store *s = NULL;
    /* text */
    const char *text = "this is not a database\n";
    assert_int_equal(kl_file_write(f->db, text, strlen(text), &err), KL_OK);
    assert_int_equal(kl_store_open(f->db, &s, &err), KL_ERR_STORE);
    assert_null(s);
    assert_non_null(strstr(err.message, f->db));
    assert_non_null(strstr(err.message, "not a SQLite database"));
    char *back = NULL;
    size_t len = 0;
    assert_int_equal(kl_file_read(f->db, 0, &back, &len, &err), KL_OK);
    assert_string_equal(back, text);
    free(back);
    /* SQLite's magic followed by garbage */
    char junk[8192];
    memcpy(junk, "SQLite format 3", 16);
    for (size_t i = 16; i < sizeof junk; i++) junk[i] = (char)(i * 131 + 7);
    assert_int_equal(kl_file_write(f->db, junk, sizeof junk, &err), KL_OK);
    assert_int_equal(kl_store_open(f->db, &s, &err), KL_ERR_STORE);
    assert_null(s);
    assert_non_null(strstr(err.message, f->db));
    assert_int_equal(kl_file_read(f->db, 0, &back, &len, &err), KL_OK);
    assert_int_equal(len, sizeof junk);
    assert_memory_equal(back, junk, sizeof junk);
    free(back);
    /* a folder, a path in a missing folder */
    assert_int_equal(kl_store_open(f->dir, &s, &err), KL_ERR_INVALID);
    char *deep = kl_path_join(f->dir, "no/such/dir/k.db");
    assert_int_equal(kl_store_open(deep, &s, &err), KL_ERR_STORE);
    assert_non_null(strstr(err.message, deep));
    free(deep);
}

/* Another application's SQLite database (an application_id of its own, or tables and no
 * klineage schema) is refused before anything is written: its bytes stay the same and it
 * stays in its journal mode (opening it used to switch it to WAL first). */
static void a_foreign_sqlite_file_is_not_modified(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    for (int variant = 0; variant < 2; variant++) {
        unlink(f->db);
        const char *sql = variant == 0 ? "PRAGMA application_id = 1234; CREATE TABLE t (x); INSERT INTO t VALUES (1);"
                                       : "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');";
        /* made by SQLite itself, as another application would (the test's only use of sqlite3.h) */
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        char *before = NULL, *after = NULL;
        size_t nb = 0, na = 0;
        assert_int_equal(kl_file_read(f->db, 0, &before, &nb, &err), KL_OK);
        kl_store *s = NULL;
        assert_int_equal(kl_store_open(f->db, &s, &err), KL_ERR_STORE);
        assert_null(s);
        assert_non_null(strstr(err.message, f->db));
        assert_non_null(strstr(err.message, "refusing to touch it"));
        assert_int_equal(kl_file_read(f->db, 0, &after, &na, &err), KL_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(after, before, nb);
        /* no WAL was started beside it */
        char *wal = NULL;
        kl_strbuf w = KL_STRBUF_INIT;
        kl_strbuf_addf(&w, "%s-wal", f->db);
        wal = kl_strbuf_detach(&w, NULL);
        assert_false(kl_file_exists(wal));
        free(wal);
        /* header byte 18/19 (file format write/read version): 1 = rollback journal, 2 = WAL */
        assert_int_equal((unsigned char)after[18], 1);
        free(before);
        free(after);
    }
}

/* A store in a folder this process cannot write can still be read (and says so when written). */
static void a_store_in_a_read_only_folder_can_be_read(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    kl_store *s = open_ok(f->db);
    put_ok(s, "skill", "a", "{\"id\":\"a\"}");
    kl_store_close(s);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* root writes anywhere: read-only folders exist for other users, so be one */
        bool root = getuid() == 0;
        if (chmod(f->dir, 0555) != 0 || chmod(f->db, root ? 0644 : 0444) != 0) _exit(10);
        if (root && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(11);
        kl_store *r = NULL;
        if (kl_store_open(f->db, &r, &err) != KL_OK) {
            fprintf(stderr, "open: %s\n", err.message);
            _exit(12);
        }
        if (!kl_store_readonly(r)) _exit(13);
        char *json = NULL;
        if (kl_store_get(r, "skill", "a", &json, &err) != KL_OK || strcmp(json, "{\"id\":\"a\"}") != 0) _exit(14);
        free(json);
        if (kl_store_put(r, "skill", "b", "{}", &err) != KL_ERR_STORE || !strstr(err.message, "only be read")) {
            fprintf(stderr, "put: %s\n", err.message);
            _exit(15);
        }
        kl_store_close(r);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    chmod(f->dir, 0700);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* still writable for its owner afterwards, and unchanged */
    s = open_ok(f->db);
    assert_false(kl_store_readonly(s));
    char *json = NULL;
    assert_int_equal(kl_store_get(s, "skill", "b", &json, &err), KL_ERR_NOT_FOUND);
    kl_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(put_get_replace_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(each_in_key_order_with_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(transactions_nest_by_count, setup, teardown),
        cmocka_unit_test_setup_teardown(two_handles_and_two_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(export_import_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(import_is_all_or_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(an_unchanged_archive_is_not_read_again, setup, teardown),
        cmocka_unit_test_setup_teardown(a_changed_archive_is_imported_again, setup, teardown),
        cmocka_unit_test_setup_teardown(a_bad_archive_records_no_fingerprint, setup, teardown),
        cmocka_unit_test_setup_teardown(a_changed_store_compares_again, setup, teardown),
        cmocka_unit_test_setup_teardown(an_export_records_the_archive_it_wrote, setup, teardown),
        cmocka_unit_test_setup_teardown(an_archive_written_just_now_is_not_recorded, setup, teardown),
        cmocka_unit_test_setup_teardown(imported_documents_are_stored_in_the_canonical_form, setup, teardown),
        cmocka_unit_test_setup_teardown(files_that_are_not_stores_are_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(a_foreign_sqlite_file_is_not_modified, setup, teardown),
        cmocka_unit_test_setup_teardown(a_store_in_a_read_only_folder_can_be_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
