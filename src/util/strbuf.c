#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

void kl_strbuf_init(kl_strbuf *sb, size_t max)
{
    memset(sb, 0, sizeof *sb);
    sb->max = max;
}

void kl_strbuf_release(kl_strbuf *sb)
{
    if (!sb) return;
    free(sb->buf);
    size_t max = sb->max;
    kl_strbuf_init(sb, max);
}

void kl_strbuf_reset(kl_strbuf *sb)
{
    sb->len = 0;
    sb->truncated = false;
    if (sb->buf) sb->buf[0] = '\0';
}

char *kl_strbuf_detach(kl_strbuf *sb, size_t *len)
{
    char *b = sb->buf ? sb->buf : kl_strdup("");
    if (len) *len = sb->len;
    size_t max = sb->max;
    kl_strbuf_init(sb, max);
    return b;
}

/* Make room for n more bytes plus the NUL; returns how many of the n fit. */
static size_t reserve(kl_strbuf *sb, size_t n)
{
    if (sb->max && sb->len + n > sb->max) {
        sb->truncated = true;
        n = sb->len < sb->max ? sb->max - sb->len : 0;
    }
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (cap < sb->len + n + 1) cap *= 2;
        char *nb = realloc(sb->buf, cap);
        if (!nb) {
            sb->failed = true;
            return 0;
        }
        sb->buf = nb;
        sb->cap = cap;
    }
    return n;
}

void kl_strbuf_add(kl_strbuf *sb, const void *data, size_t n)
{
    size_t fit = reserve(sb, n);
    if (!sb->buf) return;
    memcpy(sb->buf + sb->len, data, fit);
    sb->len += fit;
    sb->buf[sb->len] = '\0';
}

void kl_strbuf_adds(kl_strbuf *sb, const char *s) { kl_strbuf_add(sb, s, strlen(s)); }

void kl_strbuf_addc(kl_strbuf *sb, char c) { kl_strbuf_add(sb, &c, 1); }

void kl_strbuf_vaddf(kl_strbuf *sb, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0) return;
    char small[256];
    if ((size_t)n < sizeof small) {
        vsnprintf(small, sizeof small, fmt, ap);
        kl_strbuf_add(sb, small, (size_t)n);
        return;
    }
    char *tmp = malloc((size_t)n + 1);
    if (!tmp) {
        sb->failed = true;
        return;
    }
    vsnprintf(tmp, (size_t)n + 1, fmt, ap);
    kl_strbuf_add(sb, tmp, (size_t)n);
    free(tmp);
}

void kl_strbuf_addf(kl_strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(sb, fmt, ap);
    va_end(ap);
}

const char *kl_strbuf_str(const kl_strbuf *sb) { return sb->buf ? sb->buf : ""; }

char *kl_strdup(const char *s) { return s ? kl_strndup(s, strlen(s)) : NULL; }

bool kl_ident_char(char c) { return c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }

char *kl_str_unblank(const char *t)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    for (; t && *t; t++)
        if (!isspace((unsigned char)*t)) kl_strbuf_addc(&sb, *t);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

char *kl_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

bool kl_snprintf(char *dst, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, size, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < size;
}

bool kl_str_starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

bool kl_str_ends(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

void kl_text_position(const char *text, size_t len, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}
