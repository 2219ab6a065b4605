/* The store: one SQLite file of JSON documents by (kind, key), and its archive (docs/store.md).
 * The only file in klineage that includes sqlite3.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "klineage/store.h"
#include "util/util.h"

#define STORE_APP_ID 0x6B6C6E67 /* "klng" in PRAGMA application_id */
/* How long a writer waits for another: long enough for the largest write transaction, the
 * first import of the archive into a fresh store (seconds; tens under a sanitizer on a busy
 * machine), so that a walk and an import sharing a store never fail as "locked". */
#define STORE_BUSY_MS 60000
#define STORE_KIND_MAX 64
#define STORE_KEY_MAX 1024
#define ARCHIVE_MAX ((size_t)1 << 30)

/* Migrations, in order: migrations[i] takes the schema from version i to i + 1. Append only. */
static const char *const migrations[] = {
    /* 1: documents by (kind, key) */
    "CREATE TABLE documents ("
    "  kind TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  json TEXT NOT NULL,"
    "  created TEXT NOT NULL,"
    "  updated TEXT NOT NULL,"
    "  PRIMARY KEY (kind, key)"
    ") WITHOUT ROWID;",
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

struct kl_store {
    sqlite3 *db;
    char *path;
    unsigned depth; /* open transactions: 1 is BEGIN, deeper ones are savepoints */
    bool readonly;  /* the file or its folder cannot be written: opened immutable, reads only */
    kl_store_import_stats stats;
};

static kl_status db_error(kl_store *s, kl_error *err, const char *what)
{
    int code = sqlite3_extended_errcode(s->db);
    const char *msg = sqlite3_errmsg(s->db);
    if (s->readonly && (code & 0xff) == SQLITE_READONLY)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: the store can only be read here (the file or its folder is not writable) while %s",
                            s->path, what);
    if ((code & 0xff) == SQLITE_NOTADB || (code & 0xff) == SQLITE_CORRUPT)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: not a usable SQLite database (%s) while %s; the file was left as it is", s->path,
                            msg, what);
    if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED)
        return kl_error_set(err, KL_ERR_STORE, "%s: the database stayed locked for %d s while %s (%s)", s->path,
                            STORE_BUSY_MS / 1000, what, msg);
    return kl_error_set(err, KL_ERR_STORE, "%s: %s: %s", s->path, what, msg);
}

static kl_status exec(kl_store *s, const char *sql, kl_error *err, const char *what)
{
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    sqlite3_free(msg);
    return rc == SQLITE_OK ? KL_OK : db_error(s, err, what);
}

static kl_status prepare(kl_store *s, const char *sql, sqlite3_stmt **st, kl_error *err)
{
    *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return db_error(s, err, "preparing a statement");
    return KL_OK;
}

/* A file that exists and is not empty must start with SQLite's magic: never write into
 * anything else. */
static kl_status check_header(const char *path, kl_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return KL_OK; /* it will be created */
        return kl_error_set(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode)) return kl_error_set(err, KL_ERR_INVALID, "%s: is a directory, not a store file", path);
    if (sb.st_size == 0) return KL_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return kl_error_set(err, KL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char head[16] = {0};
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n < sizeof head || memcmp(head, "SQLite format 3", 16) != 0)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: not a SQLite database (its first bytes are not \"SQLite format 3\"); refusing to "
                            "touch it: give another --db path or move the file away",
                            path);
    return KL_OK;
}

/* The schema version, the application id and the number of schema objects, read in one statement
 * (one snapshot): read one at a time, a store that another process creates meanwhile can show
 * version 0 and then its tables, and be taken for a foreign database (CI saw it:
 * tests/cli/test_store_concurrency.sh). */
static kl_status read_state(kl_store *s, int *version, int *app, int *tables, kl_error *err)
{
    static const char sql[] = "SELECT (SELECT user_version FROM pragma_user_version), "
                              "(SELECT application_id FROM pragma_application_id), "
                              "(SELECT count(*) FROM sqlite_master)";
    sqlite3_stmt *q;
    kl_status st = prepare(s, sql, &q, err);
    if (st != KL_OK) return st;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *version = sqlite3_column_int(q, 0);
        *app = sqlite3_column_int(q, 1);
        *tables = sqlite3_column_int(q, 2);
    } else
        st = db_error(s, err, "reading the store's schema version");
    sqlite3_finalize(q);
    return st;
}

/* What refuses a database that is not a current klineage store: another application's, one with
 * tables and no klineage schema, a newer schema. */
static kl_status refuse_foreign(const kl_store *s, int version, int app, int tables, kl_error *err)
{
    if (app != 0 && app != STORE_APP_ID)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: a SQLite database of another application (application_id %d); refusing to touch it",
                            s->path, app);
    if (app == 0 && version == 0 && tables > 0)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: a SQLite database that klineage did not create (it has %d tables and no klineage "
                            "schema); refusing to touch it",
                            s->path, tables);
    if (version > SCHEMA_VERSION)
        return kl_error_set(err, KL_ERR_STORE,
                            "%s: schema version %d was written by a newer klineage (this one knows up to %d)", s->path,
                            version, SCHEMA_VERSION);
    return KL_OK;
}

/* Is this a klineage store (or an empty database)? Reads only: run before anything writes,
 * so that another application's database is refused untouched (not even switched to WAL).
 * *current: the schema is this klineage's. */
static kl_status check_ours(kl_store *s, bool *current, kl_error *err)
{
    int version = 0, app = 0, tables = 0;
    *current = false;
    kl_status st = read_state(s, &version, &app, &tables, err);
    if (st != KL_OK) return st;
    if (version == SCHEMA_VERSION && app == STORE_APP_ID) {
        *current = true;
        return KL_OK;
    }
    return refuse_foreign(s, version, app, tables, err);
}

static kl_status migrate(kl_store *s, kl_error *err)
{
    kl_status st;
    int version = 0, app = 0, tables = 0;
    /* The common case, a current store, needs no write lock: a writer elsewhere must not
     * block opening. */
    st = read_state(s, &version, &app, &tables, err);
    if (st != KL_OK) return st;
    if (version == SCHEMA_VERSION && app == STORE_APP_ID) return KL_OK;
    /* Otherwise read the state again inside an immediate transaction: two processes opening
     * a new store at once must not both migrate it. */
    st = exec(s, "BEGIN IMMEDIATE", err, "starting the migration");
    if (st != KL_OK) return st;
    KL_TRY(read_state(s, &version, &app, &tables, err));
    KL_TRY(refuse_foreign(s, version, app, tables, err));
    for (int v = version; v < SCHEMA_VERSION; v++) {
        char what[64];
        kl_snprintf(what, sizeof what, "migrating the schema to version %d", v + 1);
        KL_TRY(exec(s, migrations[v], err, what));
    }
    if (version < SCHEMA_VERSION) {
        char sql[96];
        kl_snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", SCHEMA_VERSION,
                    STORE_APP_ID);
        KL_TRY(exec(s, sql, err, "recording the schema version"));
    }
    return exec(s, "COMMIT", err, "committing the migration");
cleanup:
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

/* A store that exists but whose file or folder this process cannot write: it is opened to be
 * read only, as immutable (SQLite then needs neither the -wal nor the -shm file, which a
 * read-only folder could not hold). */
static bool read_only_place(const char *path)
{
    if (access(path, F_OK) != 0) return false; /* to be created: let SQLite say why it cannot */
    if (access(path, W_OK) != 0) return true;
    char *dir = kl_path_dirname(path);
    bool ro = dir && access(dir, W_OK) != 0;
    free(dir);
    return ro;
}

/* "file:PATH?immutable=1", with the URI's special characters escaped. NULL when out of memory. */
static char *immutable_uri(const char *path)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x20 || *p >= 0x7f) kl_strbuf_addf(&sb, "%%%02X", *p);
        else kl_strbuf_addc(&sb, (char)*p);
    }
    kl_strbuf_adds(&sb, "?immutable=1");
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

bool kl_store_readonly(const kl_store *store) { return store && store->readonly; }

kl_status kl_store_open(const char *path, kl_store **out, kl_error *err)
{
    kl_status st = KL_OK;
    *out = NULL;
    if (!path || !*path) return kl_error_set(err, KL_ERR_INVALID, "no store path given");
    bool memory = !strcmp(path, ":memory:");
    if (!memory) {
        st = check_header(path, err);
        if (st != KL_OK) return st;
    }
    kl_store *s = calloc(1, sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->path = kl_strdup(path);
    if (!s->path) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    s->readonly = !memory && read_only_place(path);
    char *uri = s->readonly ? immutable_uri(path) : NULL;
    if (s->readonly && !uri) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    int rc = s->readonly ? sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL)
                         : sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                           NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        st = kl_error_set(err, KL_ERR_STORE, "%s: cannot open the store: %s", path,
                          s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto cleanup;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, STORE_BUSY_MS);
    bool current = false;
    KL_TRY(check_ours(s, &current, err));
    if (s->readonly) {
        if (!current)
            KL_TRY(kl_error_set(err, KL_ERR_STORE,
                                "%s: cannot be written here (the file or its folder is read-only) and is not a "
                                "current klineage store to read",
                                path));
        *out = s;
        return KL_OK;
    }
    if (!memory) {
        /* WAL: readers never block the writer. The answer is the mode now in force. */
        sqlite3_stmt *q;
        KL_TRY(prepare(s, "PRAGMA journal_mode = WAL", &q, err));
        rc = sqlite3_step(q);
        bool wal = rc == SQLITE_ROW && sqlite3_column_text(q, 0) &&
                   !strcmp((const char *)sqlite3_column_text(q, 0), "wal");
        sqlite3_finalize(q);
        if (rc != SQLITE_ROW) KL_TRY(db_error(s, err, "switching to WAL"));
        if (!wal) KL_TRY(kl_error_set(err, KL_ERR_STORE, "%s: the store cannot use WAL on this file system", path));
        KL_TRY(exec(s, "PRAGMA synchronous = NORMAL", err, "setting synchronous"));
    }
    KL_TRY(migrate(s, err));
    *out = s;
    s = NULL;
cleanup:
    kl_store_close(s);
    return st;
}

void kl_store_close(kl_store *s)
{
    if (!s) return;
    if (s->db) {
        if (s->depth) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close_v2(s->db);
    }
    free(s->path);
    free(s);
}

static kl_status check_kind_key(const kl_store *s, const char *kind, const char *key, kl_error *err)
{
    if (!kind || !*kind) return kl_error_set(err, KL_ERR_INVALID, "%s: a document needs a kind", s->path);
    if (strlen(kind) > STORE_KIND_MAX)
        return kl_error_set(err, KL_ERR_INVALID, "%s: kind \"%.20s…\" is longer than %d bytes", s->path, kind,
                            STORE_KIND_MAX);
    for (const char *p = kind; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '.'))
            return kl_error_set(err, KL_ERR_INVALID,
                                "%s: kind \"%s\": expected lowercase letters, digits, '_', '-' or '.'", s->path, kind);
    if (key) {
        if (!*key) return kl_error_set(err, KL_ERR_INVALID, "%s: a %s document needs a non-empty key", s->path, kind);
        size_t n = strlen(key);
        if (n > STORE_KEY_MAX)
            return kl_error_set(err, KL_ERR_INVALID, "%s: %s key \"%.20s…\" is longer than %d bytes", s->path, kind,
                                key, STORE_KEY_MAX);
        for (const char *p = key; *p; p++)
            if ((unsigned char)*p < 0x20)
                return kl_error_set(err, KL_ERR_INVALID, "%s: %s key holds a control character", s->path, kind);
    }
    return KL_OK;
}

/* A document written under (kind, key), ?1 to ?4 (?4: now); the import adds a WHERE. */
#define UPSERT_SQL                                                                                                    \
    "INSERT INTO documents (kind, key, json, created, updated) VALUES (?1, ?2, ?3, ?4, ?4) "                          \
    "ON CONFLICT (kind, key) DO UPDATE SET json = excluded.json, updated = excluded.updated"

/* Does the store hold (kind, key) as this document already: the same text, or the same JSON written
 * otherwise (spacing, key order: a document imported from an archive is in the canonical form, the
 * one a stage writes is indented)? Such a put writes nothing: the document, its time stamps and what
 * the store knows of the archives it holds (archive_imports, which any change of a document clears)
 * stay as they are, so that storing the same result again (a replayed walk's cards) does not make the
 * next replay import the whole archive again. False on any doubt. */
static bool stored_equal(kl_store *s, const char *kind, const char *key, const char *json, const json_t *doc)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "SELECT json FROM documents WHERE kind = ?1 AND key = ?2", -1, &q, NULL) !=
        SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    bool same = false;
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *old = (const char *)sqlite3_column_text(q, 0);
        if (old && !strcmp(old, json)) {
            same = true;
        } else if (old) {
            json_t *o = json_loads(old, JSON_DECODE_ANY, NULL);
            same = o && json_equal(o, doc);
            json_decref(o);
        }
    }
    sqlite3_finalize(q);
    return same;
}

kl_status kl_store_put(kl_store *s, const char *kind, const char *key, const char *json, kl_error *err)
{
    kl_status st = check_kind_key(s, kind, key, err);
    if (st != KL_OK) return st;
    if (!json) return kl_error_set(err, KL_ERR_INVALID, "%s: %s/%s: no document", s->path, kind, key);
    json_error_t je;
    json_t *doc = json_loads(json, JSON_DECODE_ANY, &je);
    if (!doc)
        return kl_error_set(err, KL_ERR_PARSE, "%s: %s/%s: the document is not valid JSON (line %d, column %d: %s)",
                            s->path, kind, key, je.line, je.column, je.text);
    bool same = stored_equal(s, kind, key, json, doc);
    json_decref(doc);
    if (same) return KL_OK;
    char now[32];
    kl_utc_stamp(now, sizeof now);
    sqlite3_stmt *q;
    st = prepare(s, UPSERT_SQL, &q, err);
    if (st != KL_OK) return st;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, now, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) st = db_error(s, err, "writing a document");
    sqlite3_finalize(q);
    return st;
}

kl_status kl_store_get(kl_store *s, const char *kind, const char *key, char **json, kl_error *err)
{
    *json = NULL;
    kl_status st = check_kind_key(s, kind, key, err);
    if (st != KL_OK) return st;
    sqlite3_stmt *q;
    st = prepare(s, "SELECT json FROM documents WHERE kind = ?1 AND key = ?2", &q, err);
    if (st != KL_OK) return st;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(q, 0);
        *json = kl_strdup(t ? t : "null");
        if (!*json) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    } else if (rc == SQLITE_DONE) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no %s document with key %s", s->path, kind, key);
    } else {
        st = db_error(s, err, "reading a document");
    }
    sqlite3_finalize(q);
    return st;
}

kl_status kl_store_delete(kl_store *s, const char *kind, const char *key, kl_error *err)
{
    kl_status st = check_kind_key(s, kind, key, err);
    if (st != KL_OK) return st;
    sqlite3_stmt *q;
    st = prepare(s, "DELETE FROM documents WHERE kind = ?1 AND key = ?2", &q, err);
    if (st != KL_OK) return st;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) st = db_error(s, err, "deleting a document");
    else if (sqlite3_changes(s->db) == 0)
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no %s document with key %s", s->path, kind, key);
    sqlite3_finalize(q);
    return st;
}

kl_status kl_store_each(kl_store *s, const char *kind, const char *key_prefix, kl_store_visit_fn fn, void *user,
                        kl_error *err)
{
    kl_status st = check_kind_key(s, kind, NULL, err);
    if (st != KL_OK) return st;
    sqlite3_stmt *q;
    /* keys compare as bytes (BINARY): a prefix is the range [prefix, prefix with its last
     * byte incremented), and 0xFF never occurs in UTF-8 text. */
    st = prepare(s,
                 "SELECT key, json FROM documents WHERE kind = ?1 AND (?2 IS NULL OR (key >= ?2 AND key < ?3)) "
                 "ORDER BY key",
                 &q, err);
    if (st != KL_OK) return st;
    char *upper = NULL;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    if (key_prefix && *key_prefix) {
        size_t n = strlen(key_prefix);
        upper = kl_strdup(key_prefix);
        if (!upper) {
            sqlite3_finalize(q);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        while (n > 0 && (unsigned char)upper[n - 1] == 0xFF) upper[--n] = '\0';
        if (n > 0) upper[n - 1] = (char)((unsigned char)upper[n - 1] + 1);
        sqlite3_bind_text(q, 2, key_prefix, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 3, upper, -1, SQLITE_STATIC);
    }
    for (;;) {
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) {
            st = db_error(s, err, "listing documents");
            break;
        }
        const char *key = (const char *)sqlite3_column_text(q, 0);
        const char *json = (const char *)sqlite3_column_text(q, 1);
        if (!fn(key ? key : "", json ? json : "null", user)) break;
    }
    sqlite3_finalize(q);
    free(upper);
    return st;
}

kl_status kl_store_begin(kl_store *s, kl_error *err)
{
    char sql[48];
    if (s->depth == 0) kl_snprintf(sql, sizeof sql, "BEGIN IMMEDIATE");
    else kl_snprintf(sql, sizeof sql, "SAVEPOINT kl_%u", s->depth);
    kl_status st = exec(s, sql, err, "starting a transaction");
    if (st == KL_OK) s->depth++;
    return st;
}

kl_status kl_store_commit(kl_store *s, kl_error *err)
{
    if (s->depth == 0) return kl_error_set(err, KL_ERR_INVALID, "%s: commit without a transaction", s->path);
    char sql[48];
    if (s->depth == 1) kl_snprintf(sql, sizeof sql, "COMMIT");
    else kl_snprintf(sql, sizeof sql, "RELEASE kl_%u", s->depth - 1);
    kl_status st = exec(s, sql, err, "committing a transaction");
    if (st == KL_OK) s->depth--;
    return st;
}

kl_status kl_store_rollback(kl_store *s)
{
    if (!s || s->depth == 0) return KL_ERR_INVALID;
    char sql[64];
    if (s->depth == 1) kl_snprintf(sql, sizeof sql, "ROLLBACK");
    else kl_snprintf(sql, sizeof sql, "ROLLBACK TO kl_%u; RELEASE kl_%u", s->depth - 1, s->depth - 1);
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    s->depth--;
    return rc == SQLITE_OK ? KL_OK : KL_ERR_STORE;
}

/* ---- the archive ----------------------------------------------------------------------------- */

/* Every document is written to the archive as jansson writes it with these flags: the
 * archive's canonical form (docs/store.md), which the import also stores. */
#define CANON_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)

void kl_store_import_stats_get(const kl_store *s, kl_store_import_stats *out)
{
    if (s) *out = s->stats;
    else memset(out, 0, sizeof *out);
}

static void add_json_string(kl_strbuf *sb, const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (t) kl_strbuf_adds(sb, t);
    else sb->failed = true;
    free(t);
    json_decref(j);
}

/* -- the import's fingerprint --
 * What the store recorded when it last held every document of an archive: the archive's real
 * path and what stat says of it. A table beside the documents, made by the first import that
 * records one (not a migration: a klineage that does not know it opens the store as before),
 * and two triggers that forget every fingerprint as soon as a stored document is changed or
 * deleted, by whichever klineage: from then on an import must compare again. */
static const char fingerprint_schema[] =
    "CREATE TABLE IF NOT EXISTS archive_imports ("
    "  archive TEXT NOT NULL,"  /* the archive's real path */
    "  covers TEXT NOT NULL,"   /* '*': every line of it is in the store; else the kinds imported, "a,b" */
    "  file TEXT NOT NULL,"     /* device, inode, size, mtime and ctime (ns) when it was read */
    "  counts TEXT NOT NULL,"   /* its lines by kind, {"verdict": 2220, ...}: the count a skipped import gives */
    "  PRIMARY KEY (archive, covers)"
    ") WITHOUT ROWID;"
    "CREATE TRIGGER IF NOT EXISTS archive_imports_on_update AFTER UPDATE ON documents"
    "  WHEN old.json IS NOT new.json OR old.kind IS NOT new.kind OR old.key IS NOT new.key"
    "  BEGIN DELETE FROM archive_imports; END;"
    "CREATE TRIGGER IF NOT EXISTS archive_imports_on_delete AFTER DELETE ON documents"
    "  BEGIN DELETE FROM archive_imports; END;";

/* An archive file when it is about to be read (or was just written). */
typedef struct archive_fp {
    bool ok;       /* a regular file with a real path: the fingerprint can be kept */
    bool racy;     /* modified within the last second: a write in the same timestamp tick could go unseen */
    char *path;    /* realpath() */
    char file[160];
} archive_fp;

static void fingerprint_release(archive_fp *fp)
{
    free(fp->path);
    memset(fp, 0, sizeof *fp);
}

static void fingerprint_take(const char *archive_path, archive_fp *fp)
{
    memset(fp, 0, sizeof *fp);
    struct stat sb;
    if (stat(archive_path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    fp->path = realpath(archive_path, NULL);
    if (!fp->path) return;
    if (!kl_snprintf(fp->file, sizeof fp->file, "dev %ju ino %ju size %jd mtime %jd.%09ld ctime %jd.%09ld",
                     (uintmax_t)sb.st_dev, (uintmax_t)sb.st_ino, (intmax_t)sb.st_size, (intmax_t)sb.st_mtim.tv_sec,
                     (long)sb.st_mtim.tv_nsec, (intmax_t)sb.st_ctim.tv_sec, (long)sb.st_ctim.tv_nsec)) {
        fingerprint_release(fp);
        return;
    }
    /* A file's times come from a clock that ticks every few milliseconds: a second write within
     * the tick of the one seen here, of the same size, would leave the same fingerprint. So one
     * written within the last second (or stamped in the future) is imported but not recorded. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fp->racy = sb.st_mtim.tv_sec > now.tv_sec - 1 ||
               (sb.st_mtim.tv_sec == now.tv_sec - 1 && sb.st_mtim.tv_nsec >= now.tv_nsec);
    fp->ok = true;
}

/* "a,b" for a list of kinds; NULL: all ("*"). False when one of them cannot be written so
 * (not a kind name), or out of memory: then no fingerprint is kept. */
static bool covers_of(const kl_store *s, const char *const *kinds, kl_strbuf *out)
{
    if (!kinds) {
        kl_strbuf_adds(out, "*");
        return !out->failed;
    }
    for (unsigned i = 0; kinds[i]; i++) {
        if (check_kind_key(s, kinds[i], NULL, NULL) != KL_OK) return false;
        kl_strbuf_addf(out, "%s%s", i ? "," : "", kinds[i]);
    }
    return !out->failed;
}

static bool covers_kind(const char *covers, const char *kind)
{
    size_t n = strlen(kind);
    for (const char *p = covers; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !memcmp(p, kind, n)) return true;
        if (!comma) break;
        p = comma + 1;
    }
    return false;
}

/* Does the store hold every document of these kinds that the archive, as fingerprinted, holds?
 * *count: how many there are (what the import would count). False on any doubt. */
static bool fingerprint_matches(kl_store *s, const archive_fp *fp, const char *const *kinds, unsigned *count)
{
    sqlite3_stmt *q;
    /* no table yet: nothing was ever recorded */
    if (sqlite3_prepare_v2(s->db, "SELECT covers, counts FROM archive_imports WHERE archive = ?1 AND file = ?2", -1,
                           &q, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, fp->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, fp->file, -1, SQLITE_STATIC);
    bool hit = false;
    while (!hit && sqlite3_step(q) == SQLITE_ROW) {
        const char *covers = (const char *)sqlite3_column_text(q, 0);
        const char *counts_text = (const char *)sqlite3_column_text(q, 1);
        if (!covers || !counts_text) continue;
        bool all = !strcmp(covers, "*");
        if (!kinds && !all) continue;
        if (kinds && !all) {
            bool every = true;
            for (unsigned i = 0; kinds[i] && every; i++) every = covers_kind(covers, kinds[i]);
            if (!every) continue;
        }
        json_t *counts = json_loads(counts_text, 0, NULL);
        if (!json_is_object(counts)) {
            json_decref(counts);
            continue;
        }
        unsigned long long n = 0;
        const char *kind;
        json_t *v;
        json_object_foreach(counts, kind, v)
        {
            bool wanted = !kinds;
            for (unsigned i = 0; kinds && kinds[i] && !wanted; i++) wanted = !strcmp(kinds[i], kind);
            if (wanted && json_is_integer(v) && json_integer_value(v) > 0)
                n += (unsigned long long)json_integer_value(v);
        }
        json_decref(counts);
        if (n > UINT_MAX) continue;
        *count = (unsigned)n;
        hit = true;
    }
    sqlite3_finalize(q);
    return hit;
}

/* Record that the store holds what fp's archive holds (covers: "*" or the kinds taken), inside
 * the caller's write transaction, after its last write to the documents (the triggers would
 * forget it otherwise). Best effort: a fingerprint that cannot be written only costs the next
 * import its parse. */
static void fingerprint_record(kl_store *s, const archive_fp *fp, const char *covers, json_t *counts)
{
    char *counts_text = json_dumps(counts, JSON_COMPACT | JSON_SORT_KEYS);
    sqlite3_stmt *q = NULL;
    if (!counts_text || sqlite3_exec(s->db, fingerprint_schema, NULL, NULL, NULL) != SQLITE_OK) goto done;
    /* what was recorded of an older state of this file is no longer true of anything */
    if (sqlite3_prepare_v2(s->db, "DELETE FROM archive_imports WHERE archive = ?1 AND file <> ?2", -1, &q, NULL) !=
        SQLITE_OK)
        goto done;
    sqlite3_bind_text(q, 1, fp->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, fp->file, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    q = NULL;
    if (rc != SQLITE_DONE) goto done;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO archive_imports (archive, covers, file, counts) "
                           "VALUES (?1, ?2, ?3, ?4)",
                           -1, &q, NULL) != SQLITE_OK)
        goto done;
    sqlite3_bind_text(q, 1, fp->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, covers, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, fp->file, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, counts_text, -1, SQLITE_STATIC);
    sqlite3_step(q);
done:
    sqlite3_finalize(q);
    free(counts_text);
}

/* One more line of this kind. False when out of memory. */
static bool count_kind(json_t *counts, const char *kind)
{
    json_t *v = json_object_get(counts, kind);
    if (v) return json_integer_set(v, json_integer_value(v) + 1) == 0;
    return json_object_set_new(counts, kind, json_integer(1)) == 0;
}

/* -- the canonical form --
 * kl_store_export writes each document as json_dumps(doc, CANON_FLAGS) gives it (jansson 2.x):
 * no white space; object keys in byte order; strings raw UTF-8 in which only '"', '\', \b, \f,
 * \n, \r, \t and, as \u00XX with upper-case digits, the other control characters are escaped;
 * integers as %lld; reals as %.17g, with ".0" where that looks like an integer and an exponent
 * without '+' or leading zeros. A document already in that form is what parsing it and
 * dumping it again gives, byte for byte: the import stores it as written. The canon_*
 * functions accept that form only, and only text that jansson parses too (so whatever they
 * accept is valid JSON: no \u0000, no integer beyond json_int_t, no real that overflows, no
 * duplicate key); anything else, the import parses and dumps as before. */

#define CANON_DEPTH 256 /* deeper documents take the parser (jansson stops at 2048) */

static const char *canon_value(const char *p, const char *end, int depth);

/* A string from its opening quote: just past the closing one, or NULL. *plain: no escapes. */
static const char *canon_string(const char *p, const char *end, bool *plain)
{
    bool escaped = false;
    for (p++; p < end;) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            p++;
            continue;
        }
        if (c == '"') {
            if (plain) *plain = !escaped;
            return p + 1;
        }
        if (c == '\\') {
            escaped = true;
            if (end - p < 2) return NULL;
            char e = p[1];
            if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            /* \u00XX: only the control characters without a short escape, not NUL */
            if (e != 'u' || end - p < 6 || p[2] != '0' || p[3] != '0' || (p[4] != '0' && p[4] != '1')) return NULL;
            int lo = p[5] >= '0' && p[5] <= '9' ? p[5] - '0' : p[5] >= 'A' && p[5] <= 'F' ? p[5] - 'A' + 10 : -1;
            if (lo < 0) return NULL;
            int cp = (p[4] - '0') * 16 + lo;
            if (cp == 0 || cp == '\b' || cp == '\f' || cp == '\n' || cp == '\r' || cp == '\t') return NULL;
            p += 6;
            continue;
        }
        if (c < 0x20) return NULL;
        /* UTF-8, as jansson checks it: no overlong form, no surrogate, nothing above U+10FFFF */
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
        else return NULL;
        if ((size_t)(end - p) < n) return NULL;
        for (size_t i = 1; i < n; i++) {
            unsigned char d = (unsigned char)p[i];
            if ((d & 0xC0) != 0x80) return NULL;
            cp = cp << 6 | (d & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return NULL;
        p += n;
    }
    return NULL;
}

/* jansson's jsonp_dtostr with its default precision, 17 (C locale). Its length, or -1. */
static int canon_real(char *buf, size_t size, double v)
{
    int n = snprintf(buf, size, "%.17g", v);
    if (n < 0 || (size_t)n >= size) return -1;
    size_t len = (size_t)n;
    if (!strchr(buf, '.') && !strchr(buf, 'e')) {
        if (len + 3 >= size) return -1;
        memcpy(buf + len, ".0", 3);
        len += 2;
    }
    char *start = strchr(buf, 'e');
    if (start) {
        start++;
        char *end = start + 1;
        if (*start == '-') start++;
        while (*end == '0') end++;
        if (end != start) {
            memmove(start, end, len - (size_t)(end - buf) + 1);
            len -= (size_t)(end - start);
        }
    }
    return (int)len;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static const char *canon_number(const char *p, const char *end)
{
    const char *start = p;
    bool negative = p < end && *p == '-';
    if (negative) p++;
    const char *digits = p;
    if (p < end && *p == '0') p++;
    else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && is_digit(*p)) p++;
    else return NULL;
    size_t ndigits = (size_t)(p - digits);
    bool real = false;
    if (p < end && *p == '.') {
        real = true;
        const char *f = ++p;
        while (p < end && is_digit(*p)) p++;
        if (p == f) return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *x = p;
        while (p < end && is_digit(*p)) p++;
        if (p == x) return NULL;
    }
    if (!real) {
        if (negative && *digits == '0') return NULL; /* "-0": %lld writes 0 */
        if (ndigits < 19) return p;
        if (ndigits > 19) return NULL; /* beyond json_int_t: jansson refuses it */
        return memcmp(digits, negative ? "9223372036854775808" : "9223372036854775807", 19) <= 0 ? p : NULL;
    }
    char tok[40], out[40];
    size_t len = (size_t)(p - start);
    if (len >= sizeof tok) return NULL; /* longer than %.17g ever writes */
    memcpy(tok, start, len);
    tok[len] = '\0';
    errno = 0;
    char *te;
    double v = strtod(tok, &te);
    if (te != tok + len || ((v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE)) return NULL;
    int n = canon_real(out, sizeof out, v);
    return n == (int)len && !memcmp(out, tok, len) ? p : NULL;
}

/* A value: just past its end, or NULL when it is not in the canonical form. */
static const char *canon_value(const char *p, const char *end, int depth)
{
    if (p >= end) return NULL;
    switch (*p) {
    case '"':
        return canon_string(p, end, NULL);
    case '{': {
        if (++depth > CANON_DEPTH) return NULL;
        if (++p < end && *p == '}') return p + 1;
        const char *prev = NULL;
        size_t prev_len = 0;
        for (;;) {
            bool plain = false;
            if (p >= end || *p != '"') return NULL;
            const char *key = p + 1, *q = canon_string(p, end, &plain);
            if (!q || !plain) return NULL; /* a key with escapes: compared decoded, left to the parser */
            size_t len = (size_t)(q - 1 - key);
            if (prev) {
                int c = memcmp(prev, key, prev_len < len ? prev_len : len);
                if (c > 0 || (c == 0 && prev_len >= len)) return NULL; /* out of order, or twice */
            }
            prev = key;
            prev_len = len;
            if (q >= end || *q != ':') return NULL;
            p = canon_value(q + 1, end, depth);
            if (!p || p >= end) return NULL;
            if (*p == '}') return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    case '[':
        if (++depth > CANON_DEPTH) return NULL;
        if (++p < end && *p == ']') return p + 1;
        for (;;) {
            p = canon_value(p, end, depth);
            if (!p || p >= end) return NULL;
            if (*p == ']') return p + 1;
            if (*p++ != ',') return NULL;
        }
    case 't':
        return end - p >= 4 && !memcmp(p, "true", 4) ? p + 4 : NULL;
    case 'f':
        return end - p >= 5 && !memcmp(p, "false", 5) ? p + 5 : NULL;
    case 'n':
        return end - p >= 4 && !memcmp(p, "null", 4) ? p + 4 : NULL;
    default:
        return *p == '-' || is_digit(*p) ? canon_number(p, end) : NULL;
    }
}

/* A line exactly as kl_store_export writes it, {"kind":K,"key":KEY,"doc":DOC}, with K and KEY
 * free of escapes and DOC canonical: K and KEY are then terminated in place, *kind and *key
 * point at them, and DOC is doc[0..doc_len). False, and the line untouched, otherwise. */
static bool canon_line(char *line, size_t len, char **kind, char **key, const char **doc, size_t *doc_len)
{
    static const char lead[] = "{\"kind\":", mid[] = ",\"key\":", tail[] = ",\"doc\":";
    const char *end = line + len, *p = line;
    bool plain = false;
    if (len < sizeof lead - 1 || memcmp(p, lead, sizeof lead - 1)) return false;
    p += sizeof lead - 1;
    if (p >= end || *p != '"') return false;
    char *k = line + (p + 1 - line);
    const char *q = canon_string(p, end, &plain);
    if (!q || !plain || (size_t)(end - q) < sizeof mid - 1 || memcmp(q, mid, sizeof mid - 1)) return false;
    char *k_end = line + (q - 1 - line);
    p = q + sizeof mid - 1;
    if (p >= end || *p != '"') return false;
    char *y = line + (p + 1 - line);
    q = canon_string(p, end, &plain);
    if (!q || !plain || (size_t)(end - q) < sizeof tail - 1 || memcmp(q, tail, sizeof tail - 1)) return false;
    char *y_end = line + (q - 1 - line);
    p = q + sizeof tail - 1;
    q = canon_value(p, end, 1);
    if (!q || q != end - 1 || *q != '}') return false;
    *k_end = '\0';
    *y_end = '\0';
    *kind = k;
    *key = y;
    *doc = p;
    *doc_len = (size_t)(q - p);
    return true;
}

/* -- export and import -- */

kl_status kl_store_export(kl_store *s, const char *const *kinds, const char *archive_path, kl_error *err)
{
    kl_status st = KL_OK;
    kl_strbuf out = KL_STRBUF_INIT, sql = KL_STRBUF_INIT;
    sqlite3_stmt *q = NULL;
    unsigned nk = 0;
    json_t *counts = json_object();
    archive_fp fp = {0};
    /* Read in one transaction of our own when none is open: the fingerprint recorded below is
     * written in it, which SQLite refuses (SQLITE_BUSY_SNAPSHOT) if another connection wrote
     * to the store after this one read it. */
    bool own = false;
    /* every document exported already in the canonical form: the store holds exactly what an
     * import of the file written would store */
    bool canonical = counts != NULL;
    if (kinds)
        for (; kinds[nk]; nk++) KL_TRY(check_kind_key(s, kinds[nk], NULL, err));
    kl_strbuf_adds(&sql, "SELECT kind, key, json FROM documents");
    if (kinds) {
        kl_strbuf_adds(&sql, " WHERE kind IN (");
        for (unsigned i = 0; i < nk; i++) kl_strbuf_addf(&sql, "%s?%u", i ? ", " : "", i + 1);
        if (nk == 0) kl_strbuf_adds(&sql, "NULL");
        kl_strbuf_adds(&sql, ")");
    }
    kl_strbuf_adds(&sql, " ORDER BY kind, key");
    if (sql.failed) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    if (!s->readonly && s->depth == 0) own = sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    KL_TRY(prepare(s, kl_strbuf_str(&sql), &q, err));
    for (unsigned i = 0; i < nk; i++) sqlite3_bind_text(q, (int)i + 1, kinds[i], -1, SQLITE_STATIC);
    for (;;) {
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) KL_TRY(db_error(s, err, "reading documents for the archive"));
        const char *kind = (const char *)sqlite3_column_text(q, 0);
        const char *key = (const char *)sqlite3_column_text(q, 1);
        const char *json = (const char *)sqlite3_column_text(q, 2);
        json_error_t je;
        json_t *doc = json_loads(json ? json : "null", JSON_DECODE_ANY, &je);
        if (!doc)
            KL_TRY(kl_error_set(err, KL_ERR_PARSE, "%s: %s/%s holds invalid JSON (%s); not exported", s->path, kind,
                                key, je.text));
        char *compact = json_dumps(doc, CANON_FLAGS);
        json_decref(doc);
        if (!compact) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
        if (canonical && (!json || strcmp(json, compact) != 0 || !count_kind(counts, kind ? kind : "")))
            canonical = false;
        kl_strbuf_adds(&out, "{\"kind\":");
        add_json_string(&out, kind);
        kl_strbuf_adds(&out, ",\"key\":");
        add_json_string(&out, key);
        kl_strbuf_adds(&out, ",\"doc\":");
        kl_strbuf_adds(&out, compact);
        kl_strbuf_adds(&out, "}\n");
        free(compact);
        if (out.failed) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory while writing the archive"));
    }
    sqlite3_finalize(q);
    q = NULL;
    KL_TRY(kl_file_write(archive_path, out.buf ? out.buf : "", out.len, err));
    /* The archive now holds what the store holds (the record mode's run, ending): the next
     * import of it needs no parse. Not when the store holds a document in another form than
     * the archive's (an import would rewrite it), nor when the store can only be read. The
     * file is trusted as just written, however recently: it was renamed into place whole. */
    if (canonical && (own || s->depth > 0)) {
        fingerprint_take(archive_path, &fp);
        if (fp.ok) fingerprint_record(s, &fp, "*", counts);
    }
cleanup:
    sqlite3_finalize(q);
    if (own && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    fingerprint_release(&fp);
    json_decref(counts);
    kl_strbuf_release(&out);
    kl_strbuf_release(&sql);
    return st;
}

kl_status kl_store_import(kl_store *s, const char *archive_path, unsigned *count, kl_error *err)
{
    return kl_store_import_kinds(s, archive_path, NULL, count, err);
}

static bool kind_wanted(const char *const *kinds, const char *kind)
{
    if (!kinds) return true;
    for (; *kinds; kinds++)
        if (!strcmp(*kinds, kind)) return true;
    return false;
}

/* The archive, line by line, through stdio's getline (with a buffer of a megabyte): reading
 * 56 MB into one buffer, as kl_file_read does, cost a third of an import on a virtual machine,
 * in page faults. What is not a regular file of at most ARCHIVE_MAX bytes (a missing file, a
 * folder, a FIFO, /dev/null, a file too large) is left to kl_file_read, its checks and its
 * messages, and split here. */
typedef struct line_reader {
    const char *path;
    FILE *f;         /* NULL: the whole text is in buf, taken from pos */
    char *buf;
    size_t cap;      /* getline's buffer size */
    size_t len, pos; /* the whole text's length, and how far it was taken */
    size_t total;    /* bytes read through f */
} line_reader;

static kl_status reader_open(line_reader *r, const char *path, kl_error *err)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size <= ARCHIVE_MAX) {
        r->f = fdopen(fd, "r");
        if (r->f && setvbuf(r->f, NULL, _IOFBF, (size_t)1 << 20) == 0) return KL_OK;
        if (r->f) fclose(r->f);
        else close(fd);
        r->f = NULL;
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    if (fd >= 0) close(fd);
    return kl_file_read(path, ARCHIVE_MAX, &r->buf, &r->len, err);
}

static void reader_close(line_reader *r)
{
    if (r->f) fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* The next line, without its '\n', in place (valid until the next call): false at the end,
 * and false with *st set on an error. */
static bool reader_next(line_reader *r, char **line, size_t *len, kl_status *st, kl_error *err)
{
    if (!r->f) {
        if (r->pos >= r->len) return false;
        *line = r->buf + r->pos;
        char *nl = memchr(*line, '\n', r->len - r->pos);
        *len = nl ? (size_t)(nl - *line) : r->len - r->pos;
        r->pos += *len + (nl ? 1 : 0);
        return true;
    }
    errno = 0;
    ssize_t n = getline(&r->buf, &r->cap, r->f);
    if (n < 0) {
        if (ferror(r->f))
            *st = errno == ENOMEM ? kl_error_set(err, KL_ERR_NOMEM, "%s: out of memory for a line", r->path)
                                  : kl_error_set(err, KL_ERR_IO, "%s: read failed: %s", r->path, strerror(errno));
        return false;
    }
    r->total += (size_t)n;
    if (r->total > ARCHIVE_MAX) {
        *st = kl_error_set(err, KL_ERR_TOO_LARGE, "%s: more than the limit of %zu bytes", r->path, (size_t)ARCHIVE_MAX);
        return false;
    }
    *line = r->buf;
    *len = (size_t)n - (n > 0 && r->buf[n - 1] == '\n');
    return true;
}

/* The import's write: the document, already known to be valid JSON (the canonical form, or
 * what jansson dumped of what it parsed), under (kind, key); nothing written when the store
 * holds the same text. */
static kl_status import_put(kl_store *s, sqlite3_stmt *put, const char *kind, const char *key, const char *json,
                            size_t len, kl_error *err)
{
    kl_status st = check_kind_key(s, kind, key, err);
    if (st != KL_OK) return st;
    if (len > INT_MAX)
        return kl_error_set(err, KL_ERR_TOO_LARGE, "%s: %s/%s: the document is too large", s->path, kind, key);
    sqlite3_bind_text(put, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(put, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(put, 3, json, (int)len, SQLITE_STATIC);
    if (sqlite3_step(put) != SQLITE_DONE) st = db_error(s, err, "writing a document");
    else if (sqlite3_changes(s->db) > 0) s->stats.written++;
    sqlite3_reset(put);
    return st;
}

kl_status kl_store_import_kinds(kl_store *s, const char *archive_path, const char *const *kinds, unsigned *count,
                                kl_error *err)
{
    kl_status st = KL_OK;
    char *doc_text = NULL;
    line_reader reader = {0};
    json_t *line_json = NULL, *counts = NULL;
    sqlite3_stmt *put = NULL;
    kl_strbuf covers = KL_STRBUF_INIT;
    archive_fp fp;
    bool began = false;
    unsigned n = 0;
    char now[32];
    if (count) *count = 0;
    /* Taken before the file is read: a write after it changes what is recorded, not the
     * reverse. */
    fingerprint_take(archive_path, &fp);
    if (fp.ok && fingerprint_matches(s, &fp, kinds, &n)) {
        s->stats.skipped++;
        if (count) *count = n;
        goto cleanup;
    }
    n = 0;
    KL_TRY(reader_open(&reader, archive_path, err));
    s->stats.imports++;
    counts = json_object();
    if (!counts) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    KL_TRY(kl_store_begin(s, err));
    began = true;
    kl_utc_stamp(now, sizeof now);
    /* the same document already there (every first replay imports the whole archive): no write */
    KL_TRY(prepare(s, UPSERT_SQL " WHERE documents.json IS NOT excluded.json", &put, err));
    sqlite3_bind_text(put, 4, now, -1, SQLITE_STATIC);
    unsigned lineno = 0;
    char *line;
    size_t llen;
    while (reader_next(&reader, &line, &llen, &st, err)) {
        lineno++;
        if (llen > 0 && line[llen - 1] == '\r') llen--;
        bool blank = true;
        for (size_t i = 0; i < llen && blank; i++)
            if (line[i] != ' ' && line[i] != '\t') blank = false;
        if (blank) continue;
        s->stats.lines++;
        const char *kind = NULL, *key = NULL, *doc = NULL;
        char *ckind, *ckey;
        size_t doc_len = 0;
        if (canon_line(line, llen, &ckind, &ckey, &doc, &doc_len)) {
            s->stats.verbatim++;
            kind = ckind;
            key = ckey;
        } else {
            /* any other form: parsed, checked and dumped in the canonical form */
            json_error_t je;
            line_json = json_loadb(line, llen, JSON_REJECT_DUPLICATES, &je);
            if (!line_json)
                KL_TRY(kl_error_set(err, KL_ERR_PARSE, "%s:%u:%d: not a JSON line: %s; nothing was imported",
                                    archive_path, lineno, je.column, je.text));
            json_t *jkind = json_object_get(line_json, "kind"), *jkey = json_object_get(line_json, "key"),
                   *jdoc = json_object_get(line_json, "doc");
            if (!json_is_object(line_json) || json_object_size(line_json) != 3 || !json_is_string(jkind) ||
                !json_is_string(jkey) || !jdoc)
                KL_TRY(kl_error_set(err, KL_ERR_PARSE,
                                    "%s:%u: expected {\"kind\": STRING, \"key\": STRING, \"doc\": JSON} and nothing "
                                    "else; nothing was imported",
                                    archive_path, lineno));
            kind = json_string_value(jkind);
            key = json_string_value(jkey);
            if (kind_wanted(kinds, kind)) {
                doc_text = json_dumps(jdoc, CANON_FLAGS);
                if (!doc_text) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
                doc = doc_text;
                doc_len = strlen(doc_text);
            }
        }
        if (!count_kind(counts, kind)) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
        if (kind_wanted(kinds, kind)) {
            st = import_put(s, put, kind, key, doc, doc_len, err);
            if (st != KL_OK) {
                kl_error_prefix(err, "%s:%u (nothing was imported)", archive_path, lineno);
                goto cleanup;
            }
            n++;
        }
        free(doc_text);
        doc_text = NULL;
        json_decref(line_json);
        line_json = NULL;
    }
    if (st != KL_OK) goto cleanup;
    sqlite3_finalize(put);
    put = NULL;
    /* Every line read and stored: record the fingerprint, in the same transaction, after the
     * last write (a failed or partial import never gets here, and rolls back). */
    if (fp.ok && !fp.racy && covers_of(s, kinds, &covers)) fingerprint_record(s, &fp, kl_strbuf_str(&covers), counts);
    KL_TRY(kl_store_commit(s, err));
    began = false;
    if (count) *count = n;
cleanup:
    sqlite3_finalize(put);
    if (began) kl_store_rollback(s);
    json_decref(line_json);
    json_decref(counts);
    free(doc_text);
    reader_close(&reader);
    kl_strbuf_release(&covers);
    fingerprint_release(&fp);
    return st;
}
