/* The store: one SQLite file of JSON documents by (kind, key), and its archive (docs/store.md).
 * The only file in klineage that includes sqlite3.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* One integer from a PRAGMA or a query. */
static kl_status query_int(kl_store *s, const char *sql, int *out, kl_error *err)
{
    sqlite3_stmt *q;
    kl_status st = prepare(s, sql, &q, err);
    if (st != KL_OK) return st;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int(q, 0);
    else st = db_error(s, err, sql);
    sqlite3_finalize(q);
    return st;
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

/* Is this a klineage store (or an empty database)? Reads only: run before anything writes,
 * so that another application's database is refused untouched (not even switched to WAL).
 * *current: the schema is this klineage's. */
static kl_status check_ours(kl_store *s, bool *current, kl_error *err)
{
    int version = 0, app = 0, tables = 0;
    *current = false;
    kl_status st = query_int(s, "PRAGMA user_version", &version, err);
    if (st == KL_OK) st = query_int(s, "PRAGMA application_id", &app, err);
    if (st != KL_OK) return st;
    if (version == SCHEMA_VERSION && app == STORE_APP_ID) {
        *current = true;
        return KL_OK;
    }
    st = query_int(s, "SELECT count(*) FROM sqlite_master", &tables, err);
    if (st != KL_OK) return st;
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

static kl_status migrate(kl_store *s, kl_error *err)
{
    kl_status st;
    int version = 0, app = 0, tables = 0;
    /* The common case, a current store, needs no write lock: a writer elsewhere must not
     * block opening. */
    st = query_int(s, "PRAGMA user_version", &version, err);
    if (st == KL_OK) st = query_int(s, "PRAGMA application_id", &app, err);
    if (st != KL_OK) return st;
    if (version == SCHEMA_VERSION && app == STORE_APP_ID) return KL_OK;
    /* Otherwise read the state again inside an immediate transaction: two processes opening
     * a new store at once must not both migrate it. */
    st = exec(s, "BEGIN IMMEDIATE", err, "starting the migration");
    if (st != KL_OK) return st;
    KL_TRY(query_int(s, "PRAGMA user_version", &version, err));
    KL_TRY(query_int(s, "PRAGMA application_id", &app, err));
    KL_TRY(query_int(s, "SELECT count(*) FROM sqlite_master", &tables, err));
    if (app != 0 && app != STORE_APP_ID)
        KL_TRY(kl_error_set(err, KL_ERR_STORE,
                            "%s: a SQLite database of another application (application_id %d); refusing to touch it",
                            s->path, app));
    if (app == 0 && version == 0 && tables > 0)
        KL_TRY(kl_error_set(err, KL_ERR_STORE,
                            "%s: a SQLite database that klineage did not create (it has %d tables and no klineage "
                            "schema); refusing to touch it",
                            s->path, tables));
    if (version > SCHEMA_VERSION)
        KL_TRY(kl_error_set(err, KL_ERR_STORE,
                            "%s: schema version %d was written by a newer klineage (this one knows up to %d)", s->path,
                            version, SCHEMA_VERSION));
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
    json_decref(doc);
    char now[32];
    kl_utc_stamp(now, sizeof now);
    sqlite3_stmt *q;
    st = prepare(s,
                 "INSERT INTO documents (kind, key, json, created, updated) VALUES (?1, ?2, ?3, ?4, ?4) "
                 "ON CONFLICT (kind, key) DO UPDATE SET json = excluded.json, updated = excluded.updated",
                 &q, err);
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

static void add_json_string(kl_strbuf *sb, const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (t) kl_strbuf_adds(sb, t);
    else sb->failed = true;
    free(t);
    json_decref(j);
}

kl_status kl_store_export(kl_store *s, const char *const *kinds, const char *archive_path, kl_error *err)
{
    kl_status st = KL_OK;
    kl_strbuf out = KL_STRBUF_INIT, sql = KL_STRBUF_INIT;
    sqlite3_stmt *q = NULL;
    unsigned nk = 0;
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
        char *compact = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        json_decref(doc);
        if (!compact) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
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
    KL_TRY(kl_file_write(archive_path, out.buf ? out.buf : "", out.len, err));
cleanup:
    sqlite3_finalize(q);
    kl_strbuf_release(&out);
    kl_strbuf_release(&sql);
    return st;
}

/* Does the store hold exactly this text under (kind, key)? False on any doubt. */
static bool same_document(kl_store *s, const char *kind, const char *key, const char *json)
{
    sqlite3_stmt *q;
    if (check_kind_key(s, kind, key, NULL) != KL_OK) return false;
    if (sqlite3_prepare_v2(s->db, "SELECT json FROM documents WHERE kind = ?1 AND key = ?2", -1, &q, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, key, -1, SQLITE_STATIC);
    bool same = false;
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(q, 0);
        same = t && !strcmp(t, json);
    }
    sqlite3_finalize(q);
    return same;
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

kl_status kl_store_import_kinds(kl_store *s, const char *archive_path, const char *const *kinds, unsigned *count,
                                kl_error *err)
{
    kl_status st = KL_OK;
    char *text = NULL, *doc_text = NULL;
    size_t len = 0;
    json_t *line_json = NULL;
    bool began = false;
    unsigned n = 0;
    if (count) *count = 0;
    KL_TRY(kl_file_read(archive_path, ARCHIVE_MAX, &text, &len, err));
    KL_TRY(kl_store_begin(s, err));
    began = true;
    unsigned lineno = 0;
    for (size_t pos = 0; pos < len;) {
        lineno++;
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        pos += llen + (nl ? 1 : 0);
        if (llen > 0 && line[llen - 1] == '\r') llen--;
        bool blank = true;
        for (size_t i = 0; i < llen; i++)
            if (line[i] != ' ' && line[i] != '\t') blank = false;
        if (blank) continue;
        json_error_t je;
        line_json = json_loadb(line, llen, JSON_REJECT_DUPLICATES, &je);
        if (!line_json)
            KL_TRY(kl_error_set(err, KL_ERR_PARSE, "%s:%u:%d: not a JSON line: %s; nothing was imported", archive_path,
                                lineno, je.column, je.text));
        json_t *kind = json_object_get(line_json, "kind"), *key = json_object_get(line_json, "key"),
               *doc = json_object_get(line_json, "doc");
        if (!json_is_object(line_json) || json_object_size(line_json) != 3 || !json_is_string(kind) ||
            !json_is_string(key) || !doc)
            KL_TRY(kl_error_set(err, KL_ERR_PARSE,
                                "%s:%u: expected {\"kind\": STRING, \"key\": STRING, \"doc\": JSON} and nothing else; "
                                "nothing was imported",
                                archive_path, lineno));
        if (!kind_wanted(kinds, json_string_value(kind))) {
            json_decref(line_json);
            line_json = NULL;
            continue;
        }
        doc_text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        if (!doc_text) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
        /* the same document already there (every replay imports the whole archive): no write */
        st = same_document(s, json_string_value(kind), json_string_value(key), doc_text) ? KL_OK
             : kl_store_put(s, json_string_value(kind), json_string_value(key), doc_text, err);
        if (st != KL_OK) {
            kl_error_prefix(err, "%s:%u (nothing was imported)", archive_path, lineno);
            goto cleanup;
        }
        free(doc_text);
        doc_text = NULL;
        json_decref(line_json);
        line_json = NULL;
        n++;
    }
    KL_TRY(kl_store_commit(s, err));
    began = false;
    if (count) *count = n;
cleanup:
    if (began) kl_store_rollback(s);
    json_decref(line_json);
    free(doc_text);
    free(text);
    return st;
}
