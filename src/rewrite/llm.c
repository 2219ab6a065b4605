/* The "llm" rewriter: any OpenAI-compatible chat-completions endpoint. Prompts come from
 * prompts/ (llm_prompt.c), answers are checked like any untrusted file (llm_answer.c), the
 * transport has limits and retries (llm_http.c), and every request and answer is kept in
 * the store (kind "llm") so that a run replays with no endpoint at all. docs/llm.md. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/llm_int.h"
#include "rewrite/rewrite_int.h"
#include "util/util.h"

#define DEFAULT_KEY_ENV "KLINEAGE_LLM_API_KEY"
#define CACHE_FORMAT 1

typedef struct llm_state {
    char *url;                 /* the chat-completions endpoint */
    char *model;
    char *key_env;             /* the variable the key comes from */
    char *key;                 /* the key itself: only ever put in the Authorization header */
    double timeout_s, connect_timeout_s, max_wait_s, backoff_s;
    unsigned max_retries, n, max_tokens;
    double temperature;
    size_t max_answer_bytes;
    bool replay, use_cache;
    kl_llm_prompts *prompts;
    kl_store *store;           /* borrowed (kl_rewriter_open_ex) or own_store */
    kl_store *own_store;       /* opened from the "store" config key */
} llm_state;

static void llm_close(void *state)
{
    llm_state *s = state;
    if (!s) return;
    free(s->url);
    free(s->model);
    free(s->key_env);
    if (s->key) {
        memset(s->key, 0, strlen(s->key));
        free(s->key);
    }
    kl_llm_prompts_free(s->prompts);
    kl_store_close(s->own_store);
    free(s);
}

void kl_llm_attach_store(void *state, kl_store *store)
{
    llm_state *s = state;
    s->store = store;
}

/* ---- config --------------------------------------------------------------------------------- */

static const char *const config_keys[] = {
    "base_url", "model", "api_key_env", "timeout_s", "connect_timeout_s", "max_retries", "max_wait_s", "backoff_s",
    "n", "temperature", "max_tokens", "max_answer_bytes", "prompts_dir", "store", "replay", "cache", NULL,
};

static kl_status config_string(json_t *cfg, const char *key, const char *env, char **out, kl_error *err)
{
    json_t *v = json_object_get(cfg, key);
    const char *s = NULL;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return kl_error_set(err, KL_ERR_INVALID, "llm rewriter config: \"%s\": expected a string", key);
        s = json_string_value(v);
    } else if (env) {
        s = getenv(env);
    }
    *out = NULL;
    if (s && *s) {
        *out = kl_strdup(s);
        if (!*out) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    return KL_OK;
}

static kl_status config_number(json_t *cfg, const char *key, double lo, double hi, double *out, kl_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return KL_OK;
    if (!json_is_number(v))
        return kl_error_set(err, KL_ERR_INVALID, "llm rewriter config: \"%s\": expected a number from %g to %g", key,
                            lo, hi);
    double d = json_number_value(v);
    if (d < lo || d > hi)
        return kl_error_set(err, KL_ERR_INVALID, "llm rewriter config: \"%s\": %g is out of range (expected %g to %g)",
                            key, d, lo, hi);
    *out = d;
    return KL_OK;
}

static kl_status config_bool(json_t *cfg, const char *key, bool *out, kl_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return KL_OK;
    if (!json_is_boolean(v))
        return kl_error_set(err, KL_ERR_INVALID, "llm rewriter config: \"%s\": expected true or false", key);
    *out = json_is_true(v);
    return KL_OK;
}

static kl_status endpoint_url(const char *base, char **out, kl_error *err)
{
    *out = NULL;
    if (!kl_str_starts(base, "http://") && !kl_str_starts(base, "https://"))
        return kl_error_set(err, KL_ERR_INVALID,
                            "llm rewriter: base_url \"%s\": expected an http:// or https:// URL such as "
                            "http://127.0.0.1:8080/v1",
                            base);
    size_t n = strlen(base);
    while (n && base[n - 1] == '/') n--;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, base, n);
    if (!kl_str_ends(kl_strbuf_str(&sb), "/chat/completions")) kl_strbuf_adds(&sb, "/chat/completions");
    *out = kl_strbuf_detach(&sb, NULL);
    return *out ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

static kl_status llm_open(const char *config_json, void **state, kl_error *err)
{
    kl_status st = KL_OK;
    json_t *cfg = NULL;
    char *base = NULL, *prompts_dir = NULL, *store_path = NULL;
    *state = NULL;
    llm_state *s = calloc(1, sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->timeout_s = 120;
    s->connect_timeout_s = 10;
    s->max_wait_s = 60;
    s->backoff_s = 1;
    s->max_retries = 3;
    s->n = 1;
    s->temperature = 0.2;
    s->max_answer_bytes = (size_t)1 << 20;
    s->use_cache = true;

    if (config_json && *config_json) {
        json_error_t je;
        cfg = json_loads(config_json, 0, &je);
        if (!cfg) {
            st = kl_error_set(err, KL_ERR_PARSE, "llm rewriter config: line %d, column %d: %s (expected a JSON object)",
                              je.line, je.column, je.text);
            goto cleanup;
        }
        if (!json_is_object(cfg)) {
            st = kl_error_set(err, KL_ERR_INVALID, "llm rewriter config: expected a JSON object");
            goto cleanup;
        }
        const char *k;
        json_t *v;
        json_object_foreach(cfg, k, v) {
            if (!strcmp(k, "api_key")) {
                /* a key in a config string ends up in shell history, logs and files */
                st = kl_error_set(err, KL_ERR_INVALID,
                                  "llm rewriter config: \"api_key\" is not accepted: put the key in an environment "
                                  "variable and name it with \"api_key_env\" (default " DEFAULT_KEY_ENV ")");
                goto cleanup;
            }
            bool known = false;
            for (const char *const *c = config_keys; *c; c++) known = known || !strcmp(*c, k);
            if (!known) {
                st = kl_error_set(err, KL_ERR_INVALID,
                                  "llm rewriter config: unknown key \"%s\" (expected base_url, model, api_key_env, "
                                  "timeout_s, connect_timeout_s, max_retries, max_wait_s, backoff_s, n, temperature, "
                                  "max_tokens, max_answer_bytes, prompts_dir, store, replay, cache)",
                                  k);
                goto cleanup;
            }
        }
    }
    KL_TRY(config_string(cfg, "base_url", "KLINEAGE_LLM_BASE_URL", &base, err));
    KL_TRY(config_string(cfg, "model", "KLINEAGE_LLM_MODEL", &s->model, err));
    KL_TRY(config_string(cfg, "api_key_env", NULL, &s->key_env, err));
    KL_TRY(config_string(cfg, "prompts_dir", "KLINEAGE_PROMPTS", &prompts_dir, err));
    KL_TRY(config_string(cfg, "store", NULL, &store_path, err));
    double d;
    KL_TRY(config_number(cfg, "timeout_s", 0.001, 86400, &s->timeout_s, err));
    KL_TRY(config_number(cfg, "connect_timeout_s", 0.001, 3600, &s->connect_timeout_s, err));
    KL_TRY(config_number(cfg, "max_wait_s", 0, 86400, &s->max_wait_s, err));
    KL_TRY(config_number(cfg, "backoff_s", 0, 3600, &s->backoff_s, err));
    KL_TRY(config_number(cfg, "temperature", 0, 2, &s->temperature, err));
    d = s->max_retries;
    KL_TRY(config_number(cfg, "max_retries", 0, 100, &d, err));
    s->max_retries = (unsigned)d;
    d = s->n;
    KL_TRY(config_number(cfg, "n", 1, 64, &d, err));
    s->n = (unsigned)d;
    d = 0;
    KL_TRY(config_number(cfg, "max_tokens", 0, 1e7, &d, err));
    s->max_tokens = (unsigned)d;
    d = (double)s->max_answer_bytes;
    KL_TRY(config_number(cfg, "max_answer_bytes", 256, (double)KL_SOURCE_MAX, &d, err));
    s->max_answer_bytes = (size_t)d;
    KL_TRY(config_bool(cfg, "replay", &s->replay, err));
    KL_TRY(config_bool(cfg, "cache", &s->use_cache, err));

    if (!base) {
        st = kl_error_set(err, KL_ERR_INVALID,
                          "llm rewriter: no endpoint: set KLINEAGE_LLM_BASE_URL (e.g. http://127.0.0.1:8080/v1) or "
                          "\"base_url\" in the config");
        goto cleanup;
    }
    if (!s->model) {
        st = kl_error_set(err, KL_ERR_INVALID,
                          "llm rewriter: no model: set KLINEAGE_LLM_MODEL or \"model\" in the config");
        goto cleanup;
    }
    KL_TRY(endpoint_url(base, &s->url, err));
    if (!s->key_env && !(s->key_env = kl_strdup(DEFAULT_KEY_ENV))) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    const char *key = getenv(s->key_env);
    if (key && *key && !(s->key = kl_strdup(key))) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_llm_prompts_load(prompts_dir, &s->prompts, err));
    if (store_path) {
        st = kl_store_open(store_path, &s->own_store, err);
        if (st != KL_OK) {
            kl_error_prefix(err, "llm rewriter: store");
            goto cleanup;
        }
        s->store = s->own_store;
    }
    *state = s;
    s = NULL;
cleanup:
    llm_close(s);
    json_decref(cfg);
    free(base);
    free(prompts_dir);
    free(store_path);
    return st;
}

/* ---- one answer --------------------------------------------------------------------------------- */

/* A short, one-line excerpt of an answer for a rejection reason (new string). */
static char *excerpt(const char *s, size_t max)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t n = 0;
    for (const char *p = s; *p && n < max; p++, n++) {
        unsigned char c = (unsigned char)*p;
        kl_strbuf_addc(&sb, c == '\n' || c == '\r' || c == '\t' ? ' ' : (c < 0x20 || c == 0x7f) ? '?' : (char)c);
    }
    if (s[n]) kl_strbuf_adds(&sb, "…");
    return kl_strbuf_detach(&sb, NULL);
}

/* A transform name as the model gave it, made safe: lowercase letters, digits, '-', '_'. */
static char *clean_name(const char *s)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = s; *p && sb.len < 40; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '_' || c == '-')
            kl_strbuf_addc(&sb, (char)tolower(c));
        else if ((c == ' ' || c == '/') && sb.len && sb.buf[sb.len - 1] != '-')
            kl_strbuf_addc(&sb, '-');
    }
    while (sb.len && sb.buf[sb.len - 1] == '-') sb.buf[--sb.len] = '\0';
    if (!sb.len) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

typedef struct answer_ctx {
    const llm_state *s;
    const kl_rewrite_request *req;
    kl_llm_check chk;
    const char *skill_transform;   /* the card's transform, for apply */
    const char *skill_params;      /* the card's params as JSON, for apply */
    unsigned max_candidates;
} answer_ctx;

/* Record a rejection, with the key scrubbed out of everything. */
static kl_status reject(const answer_ctx *a, kl_candidates *out, const char *transform, const char *site,
                        const char *reason)
{
    char *r = kl_llm_scrub(kl_strdup(reason ? reason : "out of memory"), a->s->key);
    char *t = kl_llm_scrub(kl_strdup(transform ? transform : "llm"), a->s->key);
    char *si = kl_llm_scrub(kl_strdup(site ? site : ""), a->s->key);
    kl_status st = (r && t && si) ? kl_candidates_reject(out, t, si, r) : KL_ERR_NOMEM;
    free(r), free(t), free(si);
    return st;
}

static kl_status rejectf(const answer_ctx *a, kl_candidates *out, const char *transform, const char *site,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static kl_status rejectf(const answer_ctx *a, kl_candidates *out, const char *transform, const char *site,
                         const char *fmt, ...)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    kl_status st = reject(a, out, transform, site, sb.failed ? NULL : kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return st;
}

/* One choice's content: extract, check, and add it as a candidate or a rejection. */
static kl_status take_choice(const answer_ctx *a, kl_candidates *out, unsigned index, const char *content,
                             const char *finish_reason)
{
    kl_status st = KL_OK;
    char *code = NULL, *ftransform = NULL, *fsite = NULL, *fnote = NULL, *transform = NULL, *reason = NULL,
         *ex = NULL;
    kl_strbuf note = KL_STRBUF_INIT;
    kl_llm_answer_fields(content, &ftransform, &fsite, &fnote);
    if (a->skill_transform)
        transform = kl_strdup(a->skill_transform);
    else if (a->req->kind == KL_REQ_APPLY && a->req->transform)
        transform = kl_strdup(a->req->transform);
    else if (ftransform)
        transform = clean_name(ftransform);
    if (!transform) transform = kl_strdup("llm");
    if (!transform) {
        st = KL_ERR_NOMEM;
        goto cleanup;
    }
    const char *why = NULL;
    code = kl_llm_extract_code(content, &why);
    if (!code) {
        ex = excerpt(content, 120);
        bool cut = finish_reason && !strcmp(finish_reason, "length");
        if (kl_llm_is_refusal(content))
            st = rejectf(a, out, transform, fsite, "choice %u: a refusal: \"%s\"", index, ex ? ex : "");
        else
            st = rejectf(a, out, transform, fsite, "choice %u: %s%s: \"%s\"", index, why,
                         cut ? " (finish_reason \"length\": the model ran out of tokens)" : "", ex ? ex : "");
        goto cleanup;
    }
    st = kl_llm_check_source(&a->chk, code, &reason);
    if (st == KL_ERR_NOMEM) goto cleanup;
    if (st != KL_OK) {
        st = rejectf(a, out, transform, fsite, "choice %u: %s", index, reason ? reason : "out of memory");
        goto cleanup;
    }
    for (unsigned j = 0; j < out->count; j++) {
        if (!strcmp(out->items[j].source, code)) {
            st = rejectf(a, out, transform, fsite, "choice %u: the same file as an earlier choice", index);
            goto cleanup;
        }
    }
    if (a->max_candidates && out->count >= a->max_candidates) {
        st = rejectf(a, out, transform, fsite, "choice %u: more candidates than asked for (max_candidates %u)", index,
                     a->max_candidates);
        goto cleanup;
    }
    kl_strbuf_adds(&note, fnote ? fnote : "proposed by the model");
    kl_strbuf_addf(&note, " (llm %s, choice %u)", a->s->model, index);
    code = kl_llm_scrub(code, a->s->key);
    char *n = kl_llm_scrub(kl_strbuf_detach(&note, NULL), a->s->key);
    fsite = kl_llm_scrub(fsite, a->s->key);
    st = n ? kl_candidates_add(out, code, transform, fsite, a->skill_params, n) : KL_ERR_NOMEM;
    free(n);
cleanup:
    kl_strbuf_release(&note);
    free(code), free(ftransform), free(fsite), free(fnote), free(transform), free(reason), free(ex);
    return st;
}

/* Read a chat-completions body: usage, then every choice. Malformed bodies are rejections. */
static kl_status take_body(const answer_ctx *a, kl_candidates *out, const char *body, size_t len, kl_error *err)
{
    kl_status st = KL_OK;
    json_error_t je;
    const char *fallback = a->skill_transform ? a->skill_transform : "llm";
    json_t *doc = json_loadb(body, len, 0, &je);
    if (!doc) {
        char *ex = excerpt(body, 60);
        bool at_end = je.position >= (int)len || strstr(je.text, "end of file") || strstr(je.text, "premature");
        st = rejectf(a, out, fallback, NULL,
                     "malformed answer: %s JSON at line %d, column %d: %s (%zu bytes, starting \"%s\")",
                     at_end ? "truncated" : "not", je.line, je.column, je.text, len, ex ? ex : "");
        free(ex);
        return st;
    }
    json_t *usage = json_object_get(doc, "usage");
    json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
    if (json_is_integer(pt) && json_integer_value(pt) > 0) out->tokens_in += (uint64_t)json_integer_value(pt);
    if (json_is_integer(ct) && json_integer_value(ct) > 0) out->tokens_out += (uint64_t)json_integer_value(ct);
    json_t *choices = json_object_get(doc, "choices");
    if (!json_is_array(choices) || !json_array_size(choices)) {
        const char *msg = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
        if (msg)
            st = rejectf(a, out, fallback, NULL, "the endpoint answered with an error: %s", msg);
        else
            st = rejectf(a, out, fallback, NULL, "malformed answer: expected a non-empty \"choices\" array");
        goto cleanup;
    }
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c) {
        json_t *msg = json_object_get(c, "message");
        const char *refusal = json_string_value(json_object_get(msg, "refusal"));
        const char *content = json_string_value(json_object_get(msg, "content"));
        const char *finish = json_string_value(json_object_get(c, "finish_reason"));
        if (refusal && *refusal) {
            char *ex = excerpt(refusal, 120);
            st = rejectf(a, out, fallback, NULL, "choice %zu: a refusal: \"%s\"", i, ex ? ex : "");
            free(ex);
        } else if (!content) {
            st = rejectf(a, out, fallback, NULL, "malformed answer: choice %zu has no message.content string", i);
        } else {
            st = take_choice(a, out, (unsigned)i, content, finish);
        }
        if (st != KL_OK) break;
    }
cleanup:
    json_decref(doc);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- cache ---------------------------------------------------------------------------------------- */

static void cache_key(const llm_state *s, const char *request_body, char hex[KL_HASH_HEX])
{
    /* request_body holds the model, the messages and every parameter; the key is never in it */
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, "klineage-llm-1");
    kl_hasher_parts(h, s->url);
    kl_hasher_parts(h, s->model);
    kl_hasher_parts(h, request_body);
    kl_hasher_finish(h, hex);
}

/* The recorded answer for key, if any. KL_ERR_NOT_FOUND when there is none. */
static kl_status cache_get(const llm_state *s, const char *key, json_t **doc, kl_error *err)
{
    char *text = NULL;
    *doc = NULL;
    kl_status st = kl_store_get(s->store, "llm", key, &text, err);
    if (st != KL_OK) return st;
    json_error_t je;
    *doc = json_loads(text, 0, &je);
    free(text);
    if (!*doc || !json_is_object(*doc) || json_integer_value(json_object_get(*doc, "format")) != CACHE_FORMAT) {
        json_decref(*doc);
        *doc = NULL;
        return kl_error_set(err, KL_ERR_STORE, "store: llm/%s: not a recorded answer of format %d", key, CACHE_FORMAT);
    }
    return KL_OK;
}

/* The body as text fit for JSON and for reading: NUL bytes and, when it is not UTF-8, every
 * byte past ASCII become '?'; the key is scrubbed out. New string (free()). */
static char *clean_body(const llm_state *s, const kl_http_result *res)
{
    char *b = malloc(res->len + 1);
    if (!b) return NULL;
    memcpy(b, res->body, res->len);
    b[res->len] = '\0';
    json_t *probe = json_stringn(b, res->len);
    for (size_t i = 0; i < res->len; i++)
        if (b[i] == '\0' || (!probe && (unsigned char)b[i] >= 0x80)) b[i] = '?';
    json_decref(probe);
    return kl_llm_scrub(b, s->key);
}

static void cache_put(const llm_state *s, const char *key, json_t *request, const kl_http_result *res,
                      const char *body, double wall_s)
{
    json_t *doc = json_object();
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(doc, "format", json_integer(CACHE_FORMAT));
    json_object_set_new(doc, "endpoint", json_string(s->url));
    json_object_set_new(doc, "model", json_string(s->model));
    json_object_set_new(doc, "request", json_incref(request));
    json_object_set_new(doc, "status", json_integer(res->status));
    json_object_set_new(doc, "body", body && !res->too_large ? json_string(body) : json_null());
    json_object_set_new(doc, "too_large", json_boolean(res->too_large));
    json_object_set_new(doc, "cut_off", json_boolean(res->cut_off));
    json_object_set_new(doc, "bytes", json_integer((json_int_t)res->len));
    json_object_set_new(doc, "attempts", json_integer(res->attempts));
    json_object_set_new(doc, "wall_s", json_real(wall_s));
    json_object_set_new(doc, "recorded", json_string(stamp));
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    kl_error e = {0};
    if (!text || kl_store_put(s->store, "llm", key, text, &e) != KL_OK)
        kl_log(KL_LOG_WARN, "llm: could not record the answer for %s: %s", key, text ? e.message : "out of memory");
    free(text);
}

/* ---- propose ------------------------------------------------------------------------------------- */

static kl_status llm_propose(void *state, const kl_rewrite_request *req, kl_candidates *out, kl_error *err)
{
    llm_state *s = state;
    kl_status st = KL_OK;
    double t0 = kl_now();
    char *system = NULL, *user = NULL, *request_text = NULL, *old_sig = NULL, *skill_params = NULL;
    char *auth = NULL, *clean = NULL;
    json_t *request = NULL, *skill = NULL, *cached = NULL;
    kl_source *old = NULL;
    kl_http_result res = {0};
    answer_ctx a = {s, req, {0}, NULL, NULL, req->max_candidates};

    if (!req->source) {
        st = kl_error_set(err, KL_ERR_INVALID, "llm rewriter: the request has no source");
        goto cleanup;
    }
    const char *name = req->source_name ? req->source_name : "<source>";
    KL_TRY(kl_source_parse_text(name, req->source, strlen(req->source), &old, err));
    old_sig = kl_llm_launch_signature(old);
    a.chk = (kl_llm_check){req->source, old_sig, s->max_answer_bytes};
    if (req->kind == KL_REQ_APPLY && req->skill_json) {
        skill = json_loads(req->skill_json, 0, NULL);
        const char *t = json_string_value(json_object_get(skill, "transform"));
        a.skill_transform = t;
        json_t *p = json_object_get(skill, "params");
        if (json_is_object(p)) skill_params = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
        a.skill_params = skill_params;
    }
    KL_TRY(kl_llm_prompts_render(s->prompts, req, &system, &user, err));

    unsigned n = s->n;
    if (req->max_candidates && n > req->max_candidates) n = req->max_candidates;
    request = json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:s}], s:f}", "model", s->model, "messages", "role", "system",
                        "content", system, "role", "user", "content", user, "temperature", s->temperature);
    if (!request) {
        st = kl_error_set(err, KL_ERR_INVALID, "%s: the prompt is not valid UTF-8", name);
        goto cleanup;
    }
    if (n > 1) json_object_set_new(request, "n", json_integer(n));
    if (s->max_tokens) json_object_set_new(request, "max_tokens", json_integer(s->max_tokens));
    request_text = json_dumps(request, JSON_COMPACT | JSON_SORT_KEYS);
    if (!request_text) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char key[KL_HASH_HEX];
    cache_key(s, request_text, key);

    out->requests++;
    if (s->replay && !s->store) {
        st = kl_error_set(err, KL_ERR_INVALID,
                          "llm rewriter: replay needs a store (\"store\" in the config, or kl_rewriter_open_ex)");
        goto cleanup;
    }
    if (s->store && (s->use_cache || s->replay)) {
        kl_error e = {0};
        kl_status cs = cache_get(s, key, &cached, &e);
        if (cs != KL_OK && cs != KL_ERR_NOT_FOUND) {
            st = kl_error_set(err, cs, "%s", e.message);
            goto cleanup;
        }
    }
    if (cached) {
        out->cached++;
        json_t *body = json_object_get(cached, "body");
        if (json_is_true(json_object_get(cached, "too_large"))) {
            st = rejectf(&a, out, a.skill_transform ? a.skill_transform : "llm", NULL,
                         "the answer is over the size limit of %zu bytes (max_answer_bytes; recorded)",
                         s->max_answer_bytes);
        } else if (json_is_true(json_object_get(cached, "cut_off"))) {
            st = rejectf(&a, out, a.skill_transform ? a.skill_transform : "llm", NULL,
                         "truncated answer: the connection closed after %zu bytes, before the end of the body "
                         "(recorded)",
                         json_string_length(body));
        } else if (!json_is_string(body)) {
            st = kl_error_set(err, KL_ERR_STORE, "store: llm/%s: the recorded answer has no body", key);
        } else {
            st = take_body(&a, out, json_string_value(body), json_string_length(body), err);
        }
        goto cleanup;
    }
    if (s->replay) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND,
                          "llm rewriter (replay): no recorded answer for this request (%s, model %s, key llm/%s): "
                          "run it once against the endpoint to record it",
                          s->url, s->model, key);
        goto cleanup;
    }

    kl_strbuf hb = KL_STRBUF_INIT;
    if (s->key) kl_strbuf_addf(&hb, "Authorization: Bearer %s", s->key);
    auth = kl_strbuf_detach(&hb, NULL);
    /* "Expect:" off: a server that does not answer 100-continue would cost a second per request */
    const char *headers[] = {"Content-Type: application/json", "Accept: application/json", "Expect:",
                             auth && *auth ? auth : NULL, NULL};
    kl_http_opts opts = {s->connect_timeout_s, s->timeout_s, s->max_answer_bytes, s->max_retries, s->max_wait_s,
                         s->backoff_s, s->key};
    double t_req = kl_now();
    st = kl_http_post(s->url, headers, request_text, &opts, &res, err);
    if (st != KL_OK) {
        kl_error_prefix(err, "llm rewriter");
        goto cleanup;
    }
    if (res.status != 200) {
        char *body = kl_llm_scrub(excerpt(res.body, 300), s->key);
        const char *emsg = NULL;
        json_t *ej = json_loadb(res.body, res.len, 0, NULL);
        if (ej) emsg = json_string_value(json_object_get(json_object_get(ej, "error"), "message"));
        char *em = emsg ? kl_llm_scrub(excerpt(emsg, 300), s->key) : NULL;
        st = kl_error_set(err, KL_ERR_NETWORK, "llm rewriter: %s: HTTP %ld after %u attempt(s)%s: %s", s->url,
                          res.status, res.attempts,
                          res.status == 429 || res.status >= 500 ? " (retries spent)" : "",
                          em ? em : (body ? body : ""));
        free(em);
        free(body);
        json_decref(ej);
        goto cleanup;
    }
    clean = clean_body(s, &res);
    if (!clean) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (s->store) cache_put(s, key, request, &res, clean, kl_now() - t_req);
    if (res.too_large) {
        st = rejectf(&a, out, a.skill_transform ? a.skill_transform : "llm", NULL,
                     "the answer is over the size limit of %zu bytes (max_answer_bytes)", s->max_answer_bytes);
    } else if (res.cut_off) {
        st = rejectf(&a, out, a.skill_transform ? a.skill_transform : "llm", NULL,
                     "truncated answer: the connection closed after %zu bytes, before the end of the body", res.len);
    } else {
        st = take_body(&a, out, clean, strlen(clean), err);
    }
cleanup:
    if (st == KL_ERR_NOMEM && err && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    if (st != KL_OK && err) {
        char *m = kl_llm_scrub(kl_strdup(err->message), s->key);
        if (m) kl_snprintf(err->message, sizeof err->message, "%s", m);
        free(m);
        /* nothing to free for the caller on failure; the accounting stays */
        kl_candidates keep = *out;
        kl_candidates_free(out);
        out->tokens_in = keep.tokens_in, out->tokens_out = keep.tokens_out;
        out->requests = keep.requests, out->cached = keep.cached;
    }
    out->wall_s = kl_now() - t0;
    kl_http_result_release(&res);
    kl_source_free(old);
    json_decref(request);
    json_decref(skill);
    json_decref(cached);
    free(system), free(user), free(request_text), free(old_sig), free(skill_params), free(clean);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    return st;
}

const kl_rewriter_ops kl_rewriter_llm_ops = {
    .name = "llm",
    .open = llm_open,
    .close = llm_close,
    .propose = llm_propose,
};
