/*
 * A mock OpenAI-compatible chat-completions server for the llm rewriter's tests.
 *
 *   mock_llm --data DIR [--key KEY] [--lifetime SECONDS]
 *
 * Listens on 127.0.0.1, on a port the system picks, and prints that port on stdout (one line).
 * Serves one request per connection, one connection at a time, and exits by itself after
 * --lifetime seconds (default 60). DIR holds the kernels it answers with (tests/data/llm).
 *
 * The answer is chosen by the request's "model": "SCENARIO" or "SCENARIO:TAG" (the tag only
 * keeps the counters of one test apart from another's):
 *   good        one choice: Transform/Site/Note lines and simplified.cu in a ```cuda block
 *   multi       as many choices as "n" asks: simplified.cu, simplified2.cu, signature.cu,
 *               then copies of the first
 *   retry429    HTTP 429 with Retry-After: 1 on the first request, then good
 *   retry5xx    HTTP 503 on the first request, then good
 *   always503   HTTP 503, always
 *   bigwait     HTTP 429 with Retry-After: 3600
 *   slow        nothing for 10 s (or until the client hangs up), then good
 *   garbage     HTTP 200 with a body of random bytes
 *   rawgarbage  random bytes with no HTTP at all
 *   truncated   HTTP 200, a complete body holding the first half of a good JSON answer
 *   cutoff      HTTP 200 whose Content-Length promises more than is sent
 *   nocode      prose, no code      refusal     "I'm sorry, but I can't…"
 *   refusalfield  content null, message.refusal set (the OpenAI refusal field)
 *   signature   a file whose launch() takes a long instead of an int
 *   parsefail   a file that does not parse
 *   unterminated  a ```cuda block that never closes (finish_reason "length")
 *   huge        a 2 MiB answer
 *   leak        a good answer that repeats the Authorization header in its note and code
 *   unauth      HTTP 401 that echoes the Authorization header it got
 * With --key, a request without "Authorization: Bearer KEY" gets a 401 (echoing what it got).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char *kernel_simplified, *kernel_simplified2, *kernel_signature, *kernel_broken;
static const char *want_key;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mock_llm: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) exit(2);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* ---- counters per model string ------------------------------------------------------ */

static struct {
    char model[128];
    unsigned count;
} counters[256];

static unsigned bump(const char *model)
{
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        if (!counters[i].model[0]) snprintf(counters[i].model, sizeof counters[i].model, "%s", model);
        if (!strcmp(counters[i].model, model)) return counters[i].count++;
    }
    return 0;
}

/* ---- I/O ------------------------------------------------------------------------------ */

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, int status, const char *extra_headers, const char *body, size_t len)
{
    char head[512];
    const char *text = status == 200 ? "OK" : status == 429 ? "Too Many Requests" : status == 401 ? "Unauthorized"
                     : status == 503 ? "Service Unavailable" : "Error";
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n",
                      status, text, len, extra_headers ? extra_headers : "");
    send_all(fd, head, (size_t)hn);
    send_all(fd, body, len);
}

static void respond_json(int fd, int status, const char *extra_headers, json_t *doc)
{
    char *s = json_dumps(doc, JSON_COMPACT);
    respond(fd, status, extra_headers, s, strlen(s));
    free(s);
    json_decref(doc);
}

static json_t *error_doc(const char *msg)
{
    return json_pack("{s:{s:s, s:s}}", "error", "message", msg, "type", "mock_error");
}

/* A chat-completions answer with the given contents (NULL content: refusal field set). */
static json_t *answer_doc(const char *model, const char *const *contents, unsigned n, const char *refusal,
                          const char *finish)
{
    json_t *choices = json_array();
    for (unsigned i = 0; i < n; i++) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", contents && contents[i] ? json_string(contents[i]) : json_null());
        if (refusal) json_object_set_new(msg, "refusal", json_string(refusal));
        json_array_append_new(choices, json_pack("{s:i, s:o, s:s}", "index", (int)i, "message", msg, "finish_reason",
                                                 finish ? finish : "stop"));
    }
    return json_pack("{s:s, s:s, s:s, s:o, s:{s:i, s:i, s:i}}", "id", "chatcmpl-mock", "object", "chat.completion",
                     "model", model, "choices", choices, "usage", "prompt_tokens", 1200, "completion_tokens",
                     300 * (int)n, "total_tokens", 1200 + 300 * (int)n);
}

static char *code_answer(const char *transform, const char *code, const char *extra)
{
    size_t n = strlen(code) + 512 + (extra ? strlen(extra) : 0);
    char *s = malloc(n);
    snprintf(s, n, "Transform: %s\nSite: saxpy4:7\nNote: removed it%s%s\n\n```cuda\n%s```\n", transform,
             extra ? " " : "", extra ? extra : "", code);
    return s;
}

static void serve_good(int fd, const char *model)
{
    char *c = code_answer("unroll", kernel_simplified, NULL);
    const char *contents[] = {c};
    respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
    free(c);
}

static void random_bytes(char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (char)(seed >> 16);
    }
}

/* ---- one request ------------------------------------------------------------------------ */

static void handle(int fd)
{
    char *req = NULL;
    json_t *body = NULL;
    size_t len = 0, cap = 0;
    char *hdr_end = NULL;
    size_t content_length = 0, need = 0;
    double deadline = now() + 5;
    for (;;) {
        if (len + 65536 > cap) {
            cap = (len + 65536) * 2;
            req = realloc(req, cap);
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) {
            if (now() > deadline) goto done;
            continue;
        }
        ssize_t r = recv(fd, req + len, cap - len - 1, 0);
        if (r <= 0) goto done;
        len += (size_t)r;
        req[len] = '\0';
        if (!hdr_end && (hdr_end = strstr(req, "\r\n\r\n")) != NULL) {
            const char *cl = strcasestr(req, "\r\ncontent-length:");
            content_length = cl ? strtoul(cl + 17, NULL, 10) : 0;
            need = (size_t)(hdr_end - req) + 4 + content_length;
        }
        if (hdr_end && len >= need) break;
    }
    char auth[512] = "";
    const char *ah = strcasestr(req, "\r\nauthorization:");
    if (ah && ah < hdr_end) {
        ah += 16;
        while (*ah == ' ') ah++;
        const char *e = strstr(ah, "\r\n");
        snprintf(auth, sizeof auth, "%.*s", (int)(e - ah), ah);
    }
    body = json_loadb(hdr_end + 4, content_length, 0, NULL);
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!model) {
        respond_json(fd, 400, NULL, error_doc("no model in the request"));
        goto done;
    }
    char echo[600];
    snprintf(echo, sizeof echo, "bad credentials: got '%s'", auth);
    if (want_key) {
        char expect[300];
        snprintf(expect, sizeof expect, "Bearer %s", want_key);
        if (strcmp(auth, expect)) {
            respond_json(fd, 401, NULL, error_doc(echo));
            goto done;
        }
    }
    char scenario[64];
    snprintf(scenario, sizeof scenario, "%s", model);
    char *colon = strchr(scenario, ':');
    if (colon) *colon = '\0';
    unsigned count = bump(model);
    int n = (int)json_integer_value(json_object_get(body, "n"));
    if (n < 1) n = 1;

    if (!strcmp(scenario, "good")) {
        serve_good(fd, model);
    } else if (!strcmp(scenario, "multi")) {
        char *a = code_answer("unroll", kernel_simplified, NULL);
        char *b = code_answer("restrict", kernel_simplified2, NULL);
        char *c = code_answer("int-to-long", kernel_signature, NULL);
        const char *contents[16];
        for (int i = 0; i < n && i < 16; i++) contents[i] = i == 0 ? a : i == 1 ? b : i == 2 ? c : a;
        respond_json(fd, 200, NULL, answer_doc(model, contents, (unsigned)(n < 16 ? n : 16), NULL, NULL));
        free(a), free(b), free(c);
    } else if (!strcmp(scenario, "retry429")) {
        if (count == 0)
            respond_json(fd, 429, "Retry-After: 1\r\n", error_doc("rate limited, try again in a second"));
        else
            serve_good(fd, model);
    } else if (!strcmp(scenario, "retry5xx")) {
        if (count == 0)
            respond_json(fd, 503, NULL, error_doc("overloaded"));
        else
            serve_good(fd, model);
    } else if (!strcmp(scenario, "always503")) {
        respond_json(fd, 503, NULL, error_doc("overloaded, always"));
    } else if (!strcmp(scenario, "bigwait")) {
        respond_json(fd, 429, "Retry-After: 3600\r\n", error_doc("come back in an hour"));
    } else if (!strcmp(scenario, "slow")) {
        double until = now() + 10;
        while (now() < until) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 100) > 0) {
                char b[64];
                if (recv(fd, b, sizeof b, MSG_DONTWAIT) <= 0) goto done; /* the client gave up */
            }
        }
        serve_good(fd, model);
    } else if (!strcmp(scenario, "garbage")) {
        char junk[4096];
        random_bytes(junk, sizeof junk, 7);
        respond(fd, 200, NULL, junk, sizeof junk);
    } else if (!strcmp(scenario, "rawgarbage")) {
        char junk[4096];
        random_bytes(junk, sizeof junk, 11);
        send_all(fd, junk, sizeof junk);
    } else if (!strcmp(scenario, "truncated") || !strcmp(scenario, "cutoff")) {
        char *c = code_answer("unroll", kernel_simplified, NULL);
        const char *contents[] = {c};
        json_t *doc = answer_doc(model, contents, 1, NULL, NULL);
        char *s = json_dumps(doc, JSON_COMPACT);
        size_t half = strlen(s) / 2;
        if (!strcmp(scenario, "truncated")) {
            respond(fd, 200, NULL, s, half);
        } else {
            char head[256];
            int hn = snprintf(head, sizeof head,
                              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n",
                              strlen(s));
            send_all(fd, head, (size_t)hn);
            send_all(fd, s, half);
        }
        free(s), free(c);
        json_decref(doc);
    } else if (!strcmp(scenario, "nocode")) {
        const char *contents[] = {"The kernel is already about as simple as it gets; I would leave it alone."};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
    } else if (!strcmp(scenario, "refusal")) {
        const char *contents[] = {"I'm sorry, but I can't help with modifying this code."};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
    } else if (!strcmp(scenario, "refusalfield")) {
        respond_json(fd, 200, NULL, answer_doc(model, NULL, 1, "I can't assist with that request.", NULL));
    } else if (!strcmp(scenario, "signature")) {
        char *c = code_answer("int-to-long", kernel_signature, NULL);
        const char *contents[] = {c};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
        free(c);
    } else if (!strcmp(scenario, "parsefail")) {
        char *c = code_answer("unroll", kernel_broken, NULL);
        const char *contents[] = {c};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
        free(c);
    } else if (!strcmp(scenario, "unterminated")) {
        char *c = code_answer("unroll", kernel_simplified, NULL);
        c[strlen(c) / 2] = '\0';
        const char *contents[] = {c};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, "length"));
        free(c);
    } else if (!strcmp(scenario, "huge")) {
        size_t big = (size_t)2 << 20;
        char *pad = malloc(big + 1);
        memset(pad, 'x', big);
        pad[big] = '\0';
        const char *contents[] = {pad};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
        free(pad);
    } else if (!strcmp(scenario, "leak")) {
        char code[8192];
        snprintf(code, sizeof code, "// %s\n%s", auth, kernel_simplified);
        char *c = code_answer("unroll", code, auth);
        const char *contents[] = {c};
        respond_json(fd, 200, NULL, answer_doc(model, contents, 1, NULL, NULL));
        free(c);
    } else if (!strcmp(scenario, "unauth")) {
        respond_json(fd, 401, NULL, error_doc(echo));
    } else {
        respond_json(fd, 404, NULL, error_doc("unknown scenario"));
    }
done:
    json_decref(body);
    free(req);
}

int main(int argc, char **argv)
{
    const char *data = NULL;
    double lifetime = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--key") && i + 1 < argc)
            want_key = argv[++i];
        else if (!strcmp(argv[i], "--lifetime") && i + 1 < argc)
            lifetime = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: mock_llm --data DIR [--key KEY] [--lifetime SECONDS]\n");
            return 2;
        }
    }
    if (!data) {
        fprintf(stderr, "mock_llm: --data DIR is required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    kernel_simplified = slurp(data, "simplified.cu");
    kernel_simplified2 = slurp(data, "simplified2.cu");
    kernel_signature = slurp(data, "signature.cu");
    kernel_broken = slurp(data, "broken.cu");

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t alen = sizeof addr;
    if (ls < 0 || bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 16) != 0 ||
        getsockname(ls, (struct sockaddr *)&addr, &alen) != 0) {
        fprintf(stderr, "mock_llm: cannot listen on 127.0.0.1: %s\n", strerror(errno));
        return 1;
    }
    printf("%u\n", (unsigned)ntohs(addr.sin_port));
    fflush(stdout);

    double end = now() + lifetime;
    while (now() < end) {
        struct pollfd p = {ls, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        handle(fd);
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
    close(ls);
    free(kernel_simplified), free(kernel_simplified2), free(kernel_signature), free(kernel_broken);
    return 0;
}
