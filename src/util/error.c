#include <stdio.h>
#include <string.h>

#include "util/util.h"

static const char *const status_names[] = {
    [KL_OK] = "ok",
    [KL_ERR_NOMEM] = "out of memory",
    [KL_ERR_IO] = "input/output error",
    [KL_ERR_NOT_FOUND] = "not found",
    [KL_ERR_INVALID] = "invalid input",
    [KL_ERR_PARSE] = "parse error",
    [KL_ERR_TOO_LARGE] = "too large",
    [KL_ERR_CHILD] = "child process failed",
    [KL_ERR_TIMEOUT] = "timed out",
    [KL_ERR_COMPILE] = "compilation failed",
    [KL_ERR_NO_GPU] = "no GPU",
    [KL_ERR_STORE] = "store error",
    [KL_ERR_NOT_APPLICABLE] = "not applicable",
    [KL_ERR_UNMEASURED] = "unmeasured",
    [KL_ERR_NETWORK] = "network error",
    [KL_ERR_INTERRUPTED] = "interrupted",
    [KL_ERR_UNSUPPORTED] = "unsupported",
};

const char *kl_strerror(kl_status status)
{
    if ((unsigned)status < sizeof status_names / sizeof status_names[0] && status_names[status])
        return status_names[status];
    return "unknown status";
}

const char *kl_version(void) { return KL_VERSION_STRING; }

kl_status kl_error_set(kl_error *err, kl_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

kl_status kl_error_prefix(kl_error *err, const char *fmt, ...)
{
    if (!err) return KL_OK;
    kl_strbuf sb;
    kl_strbuf_init(&sb, KL_ERROR_MAX - 1);
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    kl_strbuf_adds(&sb, ": ");
    kl_strbuf_adds(&sb, err->message);
    memcpy(err->message, kl_strbuf_str(&sb), strlen(kl_strbuf_str(&sb)) + 1);
    kl_strbuf_release(&sb);
    return err->status;
}

void kl_error_clear(kl_error *err)
{
    if (err) {
        err->status = KL_OK;
        err->message[0] = '\0';
    }
}
