/* One POST to an endpoint, with time and size limits, retried on 429 and 5xx with back-off
 * and jitter, honouring Retry-After, under a cap on the total wait. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rewrite/llm_int.h"
#include "util/util.h"

/* libcurl, opened on the first request (kl_dl_open): a run that asks no endpoint does not load it.
 * lc.easy_init is curl_easy_init, and so on. */
#define CURL_FUNCTIONS(X)                                                                          \
    X(global_init) X(easy_init) X(easy_setopt) X(easy_perform) X(easy_getinfo) X(easy_strerror)  \
    X(easy_cleanup) X(slist_append) X(slist_free_all)
#define CURL_SLOT(f) __typeof__(&curl_##f) f;
#define CURL_SYMBOL(f) {"curl_" #f, &lc.f},
static struct {
    CURL_FUNCTIONS(CURL_SLOT)
} lc;
static const kl_dl_symbol lc_symbols[] = {CURL_FUNCTIONS(CURL_SYMBOL)};
static const char *const lc_sonames[] = {"libcurl.so.4", "libcurl-gnutls.so.4", NULL};
static kl_dl_lib libcurl = KL_DL_LIB("libcurl", lc_sonames, lc_symbols, "libcurl4");

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code = CURLE_OK;
static void curl_init(void) { curl_init_code = lc.global_init(CURL_GLOBAL_DEFAULT); }

void kl_http_result_release(kl_http_result *res)
{
    if (!res) return;
    free(res->body);
    memset(res, 0, sizeof *res);
}

/* ---- Retry-After and back-off ---------------------------------------------------------------- */

static int month_index(const char *m)
{
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    for (int i = 0; i < 12; i++)
        if (!strncmp(m, months[i], 3)) return i;
    return -1;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static long days_from_civil(long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long)doe - 719468;
}

double kl_http_retry_after(const char *value, double now)
{
    if (!value) return -1;
    while (isspace((unsigned char)*value)) value++;
    if (isdigit((unsigned char)*value)) {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        while (isspace((unsigned char)*end)) end++;
        if (errno || *end || v < 0 || !isfinite(v)) return -1;
        return v;
    }
    /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
    int day, year, hh, mm, ss;
    char mon[4] = "", wd[4] = "", zone[4] = "";
    if (sscanf(value, "%3[A-Za-z], %d %3[A-Za-z] %d %d:%d:%d %3s", wd, &day, mon, &year, &hh, &mm, &ss, zone) != 8)
        return -1;
    int m = month_index(mon);
    if (m < 0 || strcmp(zone, "GMT") || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60) return -1;
    double t = (double)days_from_civil(year, (unsigned)m + 1, (unsigned)day) * 86400.0 + hh * 3600.0 + mm * 60.0 + ss;
    double wait = t - now;
    return wait > 0 ? wait : 0;
}

static uint64_t next_random(uint64_t *s)
{
    /* xorshift64*: enough for jitter */
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

double kl_http_backoff(double backoff_s, unsigned attempt, double retry_after, uint64_t *rng)
{
    double base = backoff_s * ldexp(1.0, (int)(attempt > 30 ? 30 : attempt) - 1);
    double jitter = 0.5 + 0.5 * (double)(next_random(rng) >> 11) / 9007199254740992.0; /* [0.5, 1) */
    double wait = base * jitter;
    if (retry_after >= 0 && wait < retry_after) wait = retry_after;
    return wait;
}

static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- one attempt ------------------------------------------------------------------------------- */

typedef struct sink {
    kl_strbuf body;
    size_t max;
    bool too_large;
    char retry_after[64];
} sink;

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    sink *s = user;
    size_t n = size * nmemb;
    if (s->body.len + n > s->max) {
        s->too_large = true;
        return 0; /* stops the transfer: CURLE_WRITE_ERROR */
    }
    kl_strbuf_add(&s->body, data, n);
    return s->body.failed ? 0 : n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    sink *s = user;
    size_t n = size * nmemb;
    static const char key[] = "retry-after:";
    if (n > sizeof key - 1 && !strncasecmp(data, key, sizeof key - 1)) {
        const char *v = data + sizeof key - 1;
        size_t vn = n - (sizeof key - 1);
        while (vn && isspace((unsigned char)*v)) v++, vn--;
        while (vn && isspace((unsigned char)v[vn - 1])) vn--;
        if (vn >= sizeof s->retry_after) vn = sizeof s->retry_after - 1;
        memcpy(s->retry_after, v, vn);
        s->retry_after[vn] = '\0';
    }
    return n;
}

/* NO_PROXY from the environment, plus the loopback names: a local server is never proxied. */
static char *no_proxy_list(void)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *env = getenv("NO_PROXY");
    if (!env) env = getenv("no_proxy");
    if (env && *env) kl_strbuf_addf(&sb, "%s,", env);
    kl_strbuf_adds(&sb, "127.0.0.1,localhost,::1");
    return kl_strbuf_detach(&sb, NULL);
}

kl_status kl_http_post(const char *url, const char *const *headers, const char *body, const kl_http_opts *opts,
                       kl_http_result *res, kl_error *err)
{
    kl_status st = KL_OK;
    CURL *curl = NULL;
    struct curl_slist *hl = NULL;
    char *no_proxy = NULL;
    sink s;
    kl_strbuf_init(&s.body, 0);
    memset(res, 0, sizeof *res);
    uint64_t rng = (uint64_t)(kl_now() * 1e9) ^ ((uint64_t)(uintptr_t)res << 17);

    KL_TRY(kl_dl_open(&libcurl, err));
    pthread_once(&curl_once, curl_init);
    if (curl_init_code != CURLE_OK) {
        st = kl_error_set(err, KL_ERR_NETWORK, "libcurl failed to initialise: %s", lc.easy_strerror(curl_init_code));
        goto cleanup;
    }
    curl = lc.easy_init();
    no_proxy = no_proxy_list();
    if (!curl || !no_proxy) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (const char *const *h = headers; h && *h; h++) {
        struct curl_slist *n = lc.slist_append(hl, *h);
        if (!n) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        hl = n;
    }
    char errbuf[CURL_ERROR_SIZE];
    lc.easy_setopt(curl, CURLOPT_URL, url);
    lc.easy_setopt(curl, CURLOPT_HTTPHEADER, hl);
    lc.easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    lc.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    lc.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    lc.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)(opts->connect_timeout_s * 1000));
    lc.easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(opts->timeout_s * 1000));
    lc.easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)opts->max_bytes);
    lc.easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    lc.easy_setopt(curl, CURLOPT_WRITEDATA, &s);
    lc.easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    lc.easy_setopt(curl, CURLOPT_HEADERDATA, &s);
    lc.easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    lc.easy_setopt(curl, CURLOPT_NOPROXY, no_proxy);
    lc.easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
    lc.easy_setopt(curl, CURLOPT_USERAGENT, "klineage/" KL_VERSION_STRING);

    for (unsigned attempt = 0;; attempt++) {
        kl_strbuf_reset(&s.body);
        s.max = opts->max_bytes ? opts->max_bytes : (size_t)64 << 20;
        s.too_large = false;
        s.retry_after[0] = '\0';
        errbuf[0] = '\0';
        res->attempts = attempt + 1;
        CURLcode rc = lc.easy_perform(curl);
        long status = 0;
        lc.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        res->status = status;
        if (rc == CURLE_OPERATION_TIMEDOUT) {
            double elapsed = 0;
            lc.easy_getinfo(curl, CURLINFO_TOTAL_TIME, &elapsed);
            if (status == 0 && elapsed < opts->timeout_s * 0.99)
                st = kl_error_set(err, KL_ERR_TIMEOUT, "%s: could not connect within %.1f s (connect_timeout_s)", url,
                                  opts->connect_timeout_s);
            else
                st = kl_error_set(err, KL_ERR_TIMEOUT, "%s: no complete answer within %.1f s (timeout_s)", url,
                                  opts->timeout_s);
            goto cleanup;
        }
        if (s.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
            res->too_large = true;
            break;
        }
        if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR) {
            res->cut_off = status != 0;
            if (!res->cut_off) {
                st = kl_error_set(err, KL_ERR_NETWORK, "%s: %s", url, errbuf[0] ? errbuf : lc.easy_strerror(rc));
                goto cleanup;
            }
            break;
        }
        if (rc != CURLE_OK) {
            if (s.body.failed) {
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            st = kl_error_set(err, KL_ERR_NETWORK, "%s: %s", url, errbuf[0] ? errbuf : lc.easy_strerror(rc));
            goto cleanup;
        }
        bool retryable = status == 429 || (status >= 500 && status <= 599);
        if (!retryable || attempt >= opts->max_retries) break;
        double ra = kl_http_retry_after(s.retry_after[0] ? s.retry_after : NULL, (double)time(NULL));
        double wait = kl_http_backoff(opts->backoff_s, attempt + 1, ra, &rng);
        if (res->waited_s + wait > opts->max_wait_s) {
            /* the server asks for more than we may still wait: stop here, with its answer */
            kl_log(KL_LOG_WARN, "%s: HTTP %ld: not retrying: a wait of %.1f s would pass max_wait_s (%.1f s)", url,
                   status, wait, opts->max_wait_s);
            break;
        }
        kl_log(KL_LOG_INFO, "%s: HTTP %ld, retry %u of %u in %.1f s", url, status, attempt + 1, opts->max_retries,
               wait);
        sleep_s(wait);
        res->waited_s += wait;
    }
    if (s.body.failed) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    res->body = kl_strbuf_detach(&s.body, &res->len);
    if (!res->body) res->body = kl_strdup("");
    if (!res->body) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st != KL_OK && err) {
        /* never let the key out, even if a server echoed it into an error text */
        char *m = kl_llm_scrub(kl_strdup(err->message), opts->secret);
        if (m) kl_snprintf(err->message, sizeof err->message, "%s", m);
        free(m);
    }
    kl_strbuf_release(&s.body);
    if (hl) lc.slist_free_all(hl);
    if (curl) lc.easy_cleanup(curl);
    free(no_proxy);
    return st;
}
