#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

#define DEFAULT_READ_MAX ((size_t)256 << 20)

kl_status kl_file_read(const char *path, size_t max, char **out, size_t *len, kl_error *err)
{
    *out = NULL;
    if (len) *len = 0;
    if (!max) max = DEFAULT_READ_MAX;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return kl_error_set(err, errno == ENOENT ? KL_ERR_NOT_FOUND : KL_ERR_IO, "%s: cannot open: %s",
                            path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return kl_error_set(err, KL_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return kl_error_set(err, KL_ERR_INVALID, "%s: is a directory, expected a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        const char *what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "not a regular file";
        close(fd);
        return kl_error_set(err, KL_ERR_INVALID, "%s: is %s, expected a regular file", path, what);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (S_ISREG(st.st_mode) && (size_t)st.st_size > max) {
        close(fd);
        return kl_error_set(err, KL_ERR_TOO_LARGE, "%s: %lld bytes, more than the limit of %zu", path,
                            (long long)st.st_size, max);
    }
    kl_strbuf sb;
    kl_strbuf_init(&sb, max);
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            kl_strbuf_release(&sb);
            return kl_error_set(err, KL_ERR_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (n == 0) break;
        kl_strbuf_add(&sb, chunk, (size_t)n);
        if (sb.truncated) {
            close(fd);
            kl_strbuf_release(&sb);
            return kl_error_set(err, KL_ERR_TOO_LARGE, "%s: more than the limit of %zu bytes", path, max);
        }
    }
    close(fd);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return kl_error_set(err, KL_ERR_NOMEM, "%s: out of memory reading", path);
    }
    *out = kl_strbuf_detach(&sb, len);
    return *out ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

kl_status kl_file_write(const char *path, const void *data, size_t len, kl_error *err)
{
    kl_strbuf tmp = KL_STRBUF_INIT;
    kl_strbuf_addf(&tmp, "%s.tmp.%ld", path, (long)getpid());
    /* O_NOFOLLOW: a link planted under the temporary name is not followed out of the folder */
    int fd = open(kl_strbuf_str(&tmp), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        kl_status st = kl_error_set(err, KL_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        kl_strbuf_release(&tmp);
        return st;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            kl_status st = kl_error_set(err, KL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
            close(fd);
            unlink(kl_strbuf_str(&tmp));
            kl_strbuf_release(&tmp);
            return st;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(kl_strbuf_str(&tmp), path) != 0) {
        kl_status st = kl_error_set(err, KL_ERR_IO, "%s: cannot finish writing: %s", path, strerror(errno));
        unlink(kl_strbuf_str(&tmp));
        kl_strbuf_release(&tmp);
        return st;
    }
    kl_strbuf_release(&tmp);
    return KL_OK;
}

kl_status kl_mkdirs(const char *path, kl_error *err)
{
    char *p = kl_strdup(path);
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            kl_status st = kl_error_set(err, KL_ERR_IO, "%s: cannot create folder: %s", p, strerror(errno));
            free(p);
            return st;
        }
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        kl_status st = kl_error_set(err, KL_ERR_IO, "%s: cannot create folder: %s", p, strerror(errno));
        free(p);
        return st;
    }
    free(p);
    return kl_dir_exists(path) ? KL_OK : kl_error_set(err, KL_ERR_IO, "%s: exists and is not a folder", path);
}

bool kl_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool kl_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *kl_path_join(const char *dir, const char *name)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (name[0] == '/' || !dir || !*dir) {
        kl_strbuf_adds(&sb, name);
    } else {
        kl_strbuf_adds(&sb, dir);
        if (!kl_str_ends(dir, "/")) kl_strbuf_addc(&sb, '/');
        kl_strbuf_adds(&sb, name);
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

char *kl_path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return kl_strdup(".");
    if (slash == path) return kl_strdup("/");
    return kl_strndup(path, (size_t)(slash - path));
}

kl_status kl_remove_tree(const char *path, kl_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? KL_OK : kl_error_set(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return kl_error_set(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
        struct dirent *e;
        kl_status st2 = KL_OK;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *child = kl_path_join(path, e->d_name);
            if (!child) {
                st2 = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                break;
            }
            st2 = kl_remove_tree(child, err);
            free(child);
            if (st2 != KL_OK) break;
        }
        closedir(d);
        if (st2 != KL_OK) return st2;
        if (rmdir(path) != 0) return kl_error_set(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
        return KL_OK;
    }
    if (unlink(path) != 0) return kl_error_set(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    return KL_OK;
}

kl_status kl_tempdir(const char *tag, char **out, kl_error *err)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s/klineage-%s-XXXXXX", base, tag);
    if (sb.failed) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char *p = kl_strbuf_detach(&sb, NULL);
    if (!mkdtemp(p)) {
        kl_status st = kl_error_set(err, KL_ERR_IO, "%s: cannot create a temporary folder: %s", p, strerror(errno));
        free(p);
        return st;
    }
    *out = p;
    return KL_OK;
}

char *kl_cache_dir(void)
{
    const char *e = getenv("KLINEAGE_CACHE");
    if (e && *e) return kl_strdup(e);
    e = getenv("XDG_CACHE_HOME");
    if (e && *e) return kl_path_join(e, "klineage");
    e = getenv("HOME");
    if (e && *e) return kl_path_join(e, ".cache/klineage");
    return kl_strdup("/tmp/klineage-cache");
}
