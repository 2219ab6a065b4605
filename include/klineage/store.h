/*
 * The store: one SQLite file (default klineage.db) for verdicts, lineages, skills, runs
 * and caches. Everything is kept as JSON documents of a kind under a key; the kinds in
 * use are listed in docs/store.md. Only src/store/ touches SQLite.
 */
#ifndef KLINEAGE_STORE_H
#define KLINEAGE_STORE_H

#include <stdbool.h>
#include "klineage/klineage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_store kl_store;

/* Open (creating and migrating as needed) the store at path; ":memory:" for a private one.
 * Safe against concurrent readers and writers (WAL, busy timeout). *out: kl_store_close.
 * A file that is not a klineage store is refused before anything is written to it. A store
 * whose file or folder cannot be written is opened to be read only (kl_store_readonly);
 * writing to it then fails with a message that says so. */
kl_status kl_store_open(const char *path, kl_store **out, kl_error *err);
void kl_store_close(kl_store *store);
/* Whether the store was opened to be read only (see kl_store_open). */
bool kl_store_readonly(const kl_store *store);

/* Put a JSON document (text, validated) under (kind, key), replacing any old one.
 * kind: "verdict", "skill", "lineage", "llm", "gpu", …; key: usually a content hash. */
kl_status kl_store_put(kl_store *store, const char *kind, const char *key, const char *json, kl_error *err);
/* Get it: *json owned by caller (free()). KL_ERR_NOT_FOUND when absent. */
kl_status kl_store_get(kl_store *store, const char *kind, const char *key, char **json, kl_error *err);
kl_status kl_store_delete(kl_store *store, const char *kind, const char *key, kl_error *err);

/* Visit every document of a kind, in key order (prefix may be NULL). The callback returns
 * false to stop. Strings are valid only during the call. */
typedef bool (*kl_store_visit_fn)(const char *key, const char *json, void *user);
kl_status kl_store_each(kl_store *store, const char *kind, const char *key_prefix, kl_store_visit_fn fn, void *user,
                        kl_error *err);

/* Transactions, for several puts that must land together (a walk's step). Nestable by count. */
kl_status kl_store_begin(kl_store *store, kl_error *err);
kl_status kl_store_commit(kl_store *store, kl_error *err);
kl_status kl_store_rollback(kl_store *store);

/* The archive: a text file in the repository (JSON lines, sorted by kind and key, stable
 * across runs, so it diffs well) holding the documents that must replay without a GPU.
 * Export writes every document of the given kinds (NULL-terminated list); import loads
 * an archive into the store, replacing documents with the same (kind, key).
 * An import is skipped, the file not even read, when the archive (its real path, size,
 * mtime, ctime, inode) is the one the store recorded at its last complete import of it, or
 * at its export of it, and no stored document was changed or deleted since; *count is then
 * the count of that import (docs/store.md). */
kl_status kl_store_export(kl_store *store, const char *const *kinds, const char *archive_path, kl_error *err);
kl_status kl_store_import(kl_store *store, const char *archive_path, unsigned *count, kl_error *err);
/* The same, only the documents of the given kinds (NULL-terminated; NULL: all); the others are
 * read (a malformed line still refuses the whole file) but not stored. */
kl_status kl_store_import_kinds(kl_store *store, const char *archive_path, const char *const *kinds, unsigned *count,
                                kl_error *err);

/* What this handle's imports did, added up since it was opened: for tests and timings. */
typedef struct kl_store_import_stats {
    unsigned long imports;  /* imports that read the archive */
    unsigned long skipped;  /* imports skipped: the archive unchanged since the store took it whole */
    unsigned long lines;    /* document lines read */
    unsigned long verbatim; /* of them, documents stored as written (already in the archive's canonical form) */
    unsigned long written;  /* documents written: new, or different from the one stored */
} kl_store_import_stats;
void kl_store_import_stats_get(const kl_store *store, kl_store_import_stats *out);

#ifdef __cplusplus
}
#endif
#endif
