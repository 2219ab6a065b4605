#include <stdio.h>

#include "util/util.h"

static kl_log_fn sink;
static void *sink_user;

void kl_log_set_sink(kl_log_fn fn, void *user)
{
    sink = fn;
    sink_user = user;
}

void kl_log(kl_log_level level, const char *fmt, ...)
{
    if (!sink) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sink(level, msg, sink_user);
}
