/*
 * src/util — small shared pieces only: errors, string buffers, files, hashing,
 * child processes with deadlines, logging. Every other stage may use these; they use
 * nothing of klineage but the public status codes.
 */
#ifndef KL_UTIL_H
#define KL_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "klineage/klineage.h"
#include "util/banned.h"

/* ---- errors ------------------------------------------------------------------------ */

/* Fill err (may be NULL) with status and a printf-style message; returns status. */
kl_status kl_error_set(kl_error *err, kl_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix err's message with "context: " (e.g. a file name). Returns err->status. */
kl_status kl_error_prefix(kl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl_error_clear(kl_error *err);

/* Forward a failing status to the caller's cleanup label. */
#define KL_TRY(expr)                                                                       \
    do {                                                                                   \
        st = (expr);                                                                       \
        if (st != KL_OK) goto cleanup;                                                     \
    } while (0)

/* ---- string buffer ----------------------------------------------------------------- */

/* A growable NUL-terminated buffer with an optional maximum (0: unbounded).
 * Appends past the maximum are dropped and set `truncated`. */
typedef struct kl_strbuf {
    char *buf;       /* always NUL-terminated once anything was appended; NULL before */
    size_t len;
    size_t cap;
    size_t max;
    bool truncated;
    bool failed;     /* an allocation failed; content is what fit */
} kl_strbuf;

#define KL_STRBUF_INIT {NULL, 0, 0, 0, false, false}
void kl_strbuf_init(kl_strbuf *sb, size_t max);
void kl_strbuf_release(kl_strbuf *sb);
/* Hand the buffer to the caller (free with free()); sb is reset. Never NULL unless OOM. */
char *kl_strbuf_detach(kl_strbuf *sb, size_t *len);
void kl_strbuf_reset(kl_strbuf *sb);
void kl_strbuf_add(kl_strbuf *sb, const void *data, size_t n);
void kl_strbuf_adds(kl_strbuf *sb, const char *s);
void kl_strbuf_addc(kl_strbuf *sb, char c);
void kl_strbuf_addf(kl_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl_strbuf_vaddf(kl_strbuf *sb, const char *fmt, va_list ap);
/* The content, "" when empty. */
const char *kl_strbuf_str(const kl_strbuf *sb);

/* ---- strings ----------------------------------------------------------------------- */

/* strdup that reports OOM through NULL; kl_strndup copies at most n bytes. */
char *kl_strdup(const char *s);
/* t without its blanks (spaces, tabs, newlines), as a new string ("" for NULL); NULL only when
 * out of memory. For comparing code written with other spacing. */
char *kl_str_unblank(const char *t);
/* A character of a C identifier: a letter, a digit or '_' (ASCII, whatever the locale). */
bool kl_ident_char(char c);
char *kl_strndup(const char *s, size_t n);
/* snprintf into a fixed buffer; returns false if it was truncated. */
bool kl_snprintf(char *dst, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool kl_str_starts(const char *s, const char *prefix);
bool kl_str_ends(const char *s, const char *suffix);
/* 1-based line and column of byte offset `off` in text[0..len). */
void kl_text_position(const char *text, size_t len, size_t off, unsigned *line, unsigned *col);

/* ---- files ------------------------------------------------------------------------- */

/* Read a whole regular file, at most max bytes (0: 256 MiB). *out is NUL-terminated,
 * owned by the caller (free()). Errors name the path: missing, a directory, too large. */
kl_status kl_file_read(const char *path, size_t max, char **out, size_t *len, kl_error *err);
/* Write atomically: a temporary file in the same folder, fsync, rename. */
kl_status kl_file_write(const char *path, const void *data, size_t len, kl_error *err);
/* mkdir -p */
kl_status kl_mkdirs(const char *path, kl_error *err);
bool kl_file_exists(const char *path);
bool kl_dir_exists(const char *path);
/* Join dir and name into a new string (free()). */
char *kl_path_join(const char *dir, const char *name);
/* The folder part of a path, new string (free()); "." when there is none. */
char *kl_path_dirname(const char *path);
/* Remove a folder and everything in it. */
kl_status kl_remove_tree(const char *path, kl_error *err);
/* A fresh temporary folder under $TMPDIR (or /tmp) named klineage-<tag>-XXXXXX. */
kl_status kl_tempdir(const char *tag, char **out, kl_error *err);
/* The cache folder: $KLINEAGE_CACHE, else $XDG_CACHE_HOME/klineage, else ~/.cache/klineage. */
char *kl_cache_dir(void);

/* ---- hashing ----------------------------------------------------------------------- */

/* SHA-256 in lowercase hex (64 chars + NUL). Incremental form for composite keys:
 * every part is length-prefixed, so ("ab","c") and ("a","bc") differ. */
#define KL_HASH_HEX 65
typedef struct kl_hasher kl_hasher;
kl_hasher *kl_hasher_new(void);
void kl_hasher_part(kl_hasher *h, const void *data, size_t len);
void kl_hasher_parts(kl_hasher *h, const char *s); /* a NUL-terminated part; NULL hashes as "" marked null */
void kl_hasher_finish(kl_hasher *h, char hex[KL_HASH_HEX]); /* frees h */
void kl_hash_hex(const void *data, size_t len, char hex[KL_HASH_HEX]);

/* ---- libraries opened when first needed -------------------------------------------------- */

/* A shared library that only some commands need (libcurl for a model's endpoint, cairo for
 * plots), opened with dlopen on first use rather than linked: every start of klineage and of
 * its worker would otherwise map it and the dozens of libraries it depends on (about 15 ms a
 * start for libcurl alone). Declare one statically with KL_DL_LIB; each symbol's slot is the
 * address of a function pointer of the symbol's own type (__typeof__(&name)). */
typedef struct kl_dl_symbol {
    const char *name;
    void *slot;
} kl_dl_symbol;

typedef struct kl_dl_lib {
    const char *what;                /* what it is for the user: "libcurl" */
    const char *const *sonames;      /* tried in turn, NULL-terminated */
    const kl_dl_symbol *symbols;
    size_t count;
    const char *package;             /* the Debian package that has it, for the message */
    pthread_mutex_t lock;
    bool tried;
    void *handle;                    /* NULL: not opened (why says why) */
    char *why;
} kl_dl_lib;

#define KL_DL_LIB(what, sonames, symbols, package)                                                 \
    {what, sonames, symbols, sizeof symbols / sizeof *symbols, package, PTHREAD_MUTEX_INITIALIZER, \
     false, NULL, NULL}

/* Open lib and fill every slot, once per process (thread-safe); later calls answer as the
 * first did. KL_ERR_UNSUPPORTED naming the library, the files tried and the package when it
 * cannot be opened or lacks a symbol. */
kl_status kl_dl_open(kl_dl_lib *lib, kl_error *err);

/* ---- child processes (modelled on git's run-command, with a deadline) ------------------- */

typedef struct kl_child {
    /* in */
    const char *const *argv;   /* argv[0] is looked up in PATH */
    const char *const *env;    /* extra "K=V" entries added to the environment, NULL-terminated; may be NULL */
    const char *dir;           /* working directory, or NULL */
    const char *stdin_data;    /* written to the child's stdin, then closed; NULL: /dev/null */
    size_t stdin_len;
    double timeout_s;          /* wall-clock limit; <= 0: none */
    size_t out_max, err_max;   /* bounds on captured output (0: 16 MiB each) */
    bool merge_stderr;         /* capture stderr into out */
    /* out */
    kl_strbuf out, err;
    int exit_code;             /* exit status, or 128+signal when killed by a signal */
    int term_signal;           /* the signal that ended it, 0 if it exited */
    bool timed_out;            /* killed at the deadline (its whole process group) */
    double wall_s;
} kl_child;

/* Initialise to defaults (no argv yet). */
void kl_child_init(kl_child *c);
/* Run to completion: output pumped with poll so pipes never deadlock; at the deadline the
 * child's process group gets SIGKILL. KL_OK when the child ran (whatever its exit code);
 * KL_ERR_CHILD when it could not be started. */
kl_status kl_child_run(kl_child *c, kl_error *err);
void kl_child_release(kl_child *c);
/* A short description of how a child ended: "exit 0", "killed by SIGSEGV", "timed out after 5.0 s". */
void kl_child_describe(const kl_child *c, char *buf, size_t size);

/* ---- time and logging ---------------------------------------------------------------- */

double kl_now(void);            /* monotonic seconds */
/* "2026-11-29T19:40:00Z" for now, into buf (>= 21 bytes). */
void kl_utc_stamp(char *buf, size_t size);

typedef enum { KL_LOG_ERROR, KL_LOG_WARN, KL_LOG_INFO, KL_LOG_DEBUG } kl_log_level;
/* The library logs only through a sink the application installs; default: none. */
typedef void (*kl_log_fn)(kl_log_level level, const char *msg, void *user);
void kl_log_set_sink(kl_log_fn fn, void *user);
void kl_log(kl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KL_UTIL_H */
