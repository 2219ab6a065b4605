/* The rules catalog's listing and its refusals (docs/rules.md, "Listing"): every site --list calls
 * present or applicable rewrites, the refused ones say why (the reason --apply/--remove gives);
 * unusual or malformed code never crashes the catalog (issue 18: launches outside a named function,
 * mutated kernels, nesting deep enough to overflow a recursive walk); and the refusals that keep a
 * rewrite from writing code nvcc rejects or that silently changes the program (restrict on an
 * element bound to a reference, block-size under a warp tiling, warp-reduce over a struct, a
 * #pragma unroll that does nothing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

static char *read_rel(const char *rel)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/%s", root, rel);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* Every .cu file of a folder of the repository, sorted (free each and the array). */
static char **cu_files(const char *rel, unsigned *n)
{
    const char *root = getenv("KL_SOURCE_DIR");
    char dir[1024];
    kl_snprintf(dir, sizeof dir, "%s/%s", root, rel);
    DIR *d = opendir(dir);
    if (!d) fail_msg("%s: cannot open", dir);
    char **v = NULL;
    *n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (kl_str_ends(e->d_name, ".cu")) {
            v = realloc(v, (*n + 1) * sizeof *v);
            char p[1200];
            kl_snprintf(p, sizeof p, "%s/%s", rel, e->d_name);
            v[(*n)++] = kl_strdup(p);
        }
    closedir(d);
    for (unsigned i = 1; i < *n; i++)
        for (unsigned k = i; k > 0 && strcmp(v[k - 1], v[k]) > 0; k--) {
            char *t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return v;
}

static json_t *list_sites(const char *name, const char *text, const char *transform)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list(name, text, strlen(text), NULL, transform, &json, &err) != KL_OK)
        fail_msg("%s: --list failed: %s", name, err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The listing's promise on one file: each present site removes, each applicable one applies (with
 * the parameters it names), each refused one is refused by the rewrite with the reason listed. */
static void check_listing(const char *name, const char *text)
{
    json_t *sites = list_sites(name, text, NULL);
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        const char *dir = json_string_value(json_object_get(s, "direction"));
        const char *t = json_string_value(json_object_get(s, "transform"));
        const char *site = json_string_value(json_object_get(s, "site"));
        bool refused = !strcmp(dir, "refused");
        bool remove = refused ? !strcmp(json_string_value(json_object_get(s, "refused")), "remove")
                              : !strcmp(dir, "present");
        json_t *with = json_object_get(s, "applies_with");
        char *params = with ? json_dumps(with, JSON_COMPACT) : NULL;
        char *out = NULL, *note = NULL;
        kl_error err = {0};
        kl_status st = kl_rules_rewrite(name, text, strlen(text), NULL, t, site, remove, params, &out, &note, &err);
        if (!refused && st != KL_OK)
            fail_msg("%s: %s@%s is listed %s but %s fails: %s", name, t, site, dir, remove ? "--remove" : "--apply",
                     err.message);
        if (refused) {
            if (st == KL_OK) fail_msg("%s: %s@%s is listed refused but rewrites", name, t, site);
            const char *reason = json_string_value(json_object_get(s, "reason"));
            assert_non_null(reason);
            assert_true(reason[0] != '\0');
            if (!strstr(err.message, reason))
                fail_msg("%s: %s@%s: the listed reason '%s' is not what the rewrite says: '%s'", name, t, site, reason,
                         err.message);
        }
        free(out);
        free(note);
        free(params);
    }
    json_decref(sites);
}

/* Propose both ways through the rules backend: never an error on a file the catalog reads. */
static void check_propose(const char *name, const char *text)
{
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    for (int kind = 0; kind < 2; kind++) {
        kl_rewrite_request req = {0};
        req.kind = kind ? KL_REQ_APPLY : KL_REQ_SIMPLIFY;
        req.source = text;
        req.source_name = name;
        req.max_candidates = 64;
        kl_candidates c = {0};
        kl_status st = kl_rewriter_propose(rw, &req, &c, &err);
        if (st != KL_OK) fail_msg("%s: propose (%s) failed: %s", name, kind ? "apply" : "simplify", err.message);
        kl_candidates_free(&c);
    }
    kl_rewriter_free(rw);
}

/* Launches outside a named function and mutated kernels (each crashed --list with a null node
 * before, issue 18): listed honestly and proposed from, both ways. */
static void malformed_kernels_never_crash(void **state)
{
    (void)state;
    unsigned n = 0;
    char **files = cu_files("tests/data/rules/malformed", &n);
    assert_true(n >= 6);
    for (unsigned i = 0; i < n; i++) {
        char *text = read_rel(files[i]);
        check_listing(files[i], text);
        check_propose(files[i], text);
        free(text);
        free(files[i]);
    }
    free(files);
}

/* A launch inside a lambda at file scope has sites, and refusals that name the lambda's block. */
static void lambda_launch_is_listed(void **state)
{
    (void)state;
    char *text = read_rel("tests/data/rules/malformed/lambda_file_scope.cu");
    json_t *sites = list_sites("lambda.cu", text, "block-size");
    assert_int_equal(json_array_size(sites), 1);
    json_t *s = json_array_get(sites, 0);
    assert_string_equal(json_string_value(json_object_get(s, "direction")), "refused");
    assert_non_null(strstr(json_string_value(json_object_get(s, "reason")), "not a compile-time constant"));
    json_decref(sites);
    free(text);
}

/* Nesting past the catalog's depth is refused with where; just under it, listed (no overflow).
 * 100000 terms and 5000 braces are past the parser's own limits (syntax.h, KL_SOURCE_MAX_*:
 * "more than N tokens" / "brackets nested more than N deep"); 600 terms parse (the parser allows
 * KL_SOURCE_MAX_DEPTH levels) and meet the catalog's KL_AST_MAX_DEPTH ("nests more than"). */
static void deep_nesting_is_refused(void **state)
{
    (void)state;
    const unsigned sizes[] = {100000, 5000, 600, 150};
    assert_true(600 > KL_AST_MAX_DEPTH && 600 + 10 < KL_SOURCE_MAX_DEPTH);
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_adds(&sb, "__global__ void k(float *a)\n{\n");
        if (k == 1) {
            for (unsigned i = 0; i < sizes[k]; i++) kl_strbuf_adds(&sb, "{ ");
            kl_strbuf_adds(&sb, "a[0] = 1.0f;");
            for (unsigned i = 0; i < sizes[k]; i++) kl_strbuf_adds(&sb, " }");
        } else {
            kl_strbuf_adds(&sb, "    a[0] = 1");
            for (unsigned i = 1; i < sizes[k]; i++) kl_strbuf_adds(&sb, " + 1");
            kl_strbuf_adds(&sb, ";");
        }
        kl_strbuf_adds(&sb, "\n}\nextern \"C\" void launch(float *a) { k<<<1, 32>>>(a); }\n");
        const char *text = kl_strbuf_str(&sb);
        char *json = NULL;
        kl_error err = {0};
        kl_status st = kl_rules_list("deep.cu", text, sb.len, NULL, NULL, &json, &err);
        if (sizes[k] > KL_AST_MAX_DEPTH) {
            /* the parser's limit for the first two, the catalog's for 600 terms */
            const char *why = k < 2 ? "more than" : "nests more than";
            assert_int_equal(st, KL_ERR_TOO_LARGE);
            if (!strstr(err.message, why)) fail_msg("%u: '%s' does not say '%s'", sizes[k], err.message, why);
            assert_non_null(strstr(err.message, "deep.cu:"));
            /* a walk is told the same, as a rejection, not an error */
            kl_rewriter *rw = NULL;
            assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
            kl_rewrite_request req = {0};
            req.kind = KL_REQ_SIMPLIFY;
            req.source = text;
            kl_candidates c = {0};
            assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
            assert_int_equal(c.count, 0);
            assert_int_equal(c.nrejected, 1);
            if (!strstr(c.rejected[0].reason, why)) fail_msg("%u: rejected as '%s'", sizes[k], c.rejected[0].reason);
            kl_candidates_free(&c);
            kl_rewriter_free(rw);
        } else {
            if (st != KL_OK) fail_msg("%u terms: %s", sizes[k], err.message);
            check_listing("shallow.cu", text);
        }
        free(json);
        kl_strbuf_release(&sb);
    }
}

/* The built-in kernels and the idiom kernels keep the listing's promise. */
static void listed_sites_rewrite(void **state)
{
    (void)state;
    static const char *const tasks[] = {"softmax", "layernorm", "reduce_sum", "histogram", "transpose", "blur",
                                        "sgemm", "hgemm", NULL};
    for (unsigned t = 0; tasks[t]; t++) {
        char rel[256];
        kl_snprintf(rel, sizeof rel, "tasks/%s/naive.cu", tasks[t]);
        char *text = read_rel(rel);
        check_listing(rel, text);
        free(text);
    }
    unsigned n = 0;
    char **files = cu_files("tests/data/rules/idioms", &n);
    assert_true(n >= 1);
    for (unsigned i = 0; i < n; i++) {
        char *text = read_rel(files[i]);
        check_listing(files[i], text);
        free(text);
        free(files[i]);
    }
    free(files);
}

static char *apply_ok(const char *text, const char *transform, const char *site, const char *params)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, false, params, &out, &note, &err) != KL_OK)
        fail_msg("%s@%s: %s", transform, site, err.message);
    free(note);
    return out;
}

/* restrict keeps a pointer non-const when an element is bound to a reference or passed by one. */
static void restrict_sees_reference_writes(void **state)
{
    (void)state;
    const char *text = "#include <cuda_runtime.h>\n"
                       "__device__ void bump(float &v) { v += 1.0f; }\n"
                       "__global__ void k(const float *x, float *y, float *z, int n)\n"
                       "{\n"
                       "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "    if (i >= n) return;\n"
                       "    float &r = y[i];\n"
                       "    r = x[i];\n"
                       "    bump(z[i]);\n"
                       "}\n"
                       "extern \"C\" void launch(const float *x, float *y, float *z, int n, cudaStream_t s)\n"
                       "{\n"
                       "    k<<<(n + 255) / 256, 256, 0, s>>>(x, y, z, n);\n"
                       "}\n";
    char *out = apply_ok(text, "restrict", "k:3", NULL);
    assert_non_null(strstr(out, "const float *__restrict__ x, float *__restrict__ y, float *__restrict__ z"));
    free(out);
    /* writes through an accessor macro: read on the canonical form, where the macro is expanded */
    const char *macro = "#define OUT(i) out[(i) * stride]\n"
                        "#define IN(i) in[(i) * stride]\n"
                        "__global__ void k(const float *in, float *out, int n, int stride)\n"
                        "{\n"
                        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "    if (i < n) OUT(i) = 2.0f * IN(i);\n"
                        "}\n"
                        "extern \"C\" void launch(const float *in, float *out, int n, cudaStream_t s)\n"
                        "{\n"
                        "    k<<<(n + 255) / 256, 256, 0, s>>>(in, out, n, 1);\n"
                        "}\n";
    out = apply_ok(macro, "restrict", "k:3", NULL);
    assert_non_null(strstr(out, "__global__ void k(const float *__restrict__ in, float *__restrict__ out, int n"));
    assert_non_null(strstr(out, "if (i < n) OUT(i) = 2.0f * IN(i);")); /* the macros stay */
    free(out);
}

static const char *refusal_of(json_t *sites, const char *dir_wanted)
{
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), "refused")) continue;
        if (!strcmp(json_string_value(json_object_get(s, "refused")), dir_wanted))
            return json_string_value(json_object_get(s, "reason"));
    }
    return NULL;
}

/* block-size refuses, with the reason, where the kernel's layout follows its thread count. */
static void block_size_refuses_dependent_layouts(void **state)
{
    (void)state;
    /* a warp tiling (the idiom kernel) */
    char *text = read_rel("tests/data/rules/idioms/warptile_sgemm.cu");
    json_t *sites = list_sites("w.cu", text, "block-size");
    const char *why = refusal_of(sites, "apply");
    assert_non_null(why);
    assert_non_null(strstr(why, "warp index"));
    json_decref(sites);
    free(text);
    /* a thread count derived from the warp layout, in a namespace the launch opens (the matmul
     * expert's style): refused for that, not as a name defined elsewhere */
    const char *warps = "namespace lay {\n"
                        "constexpr int WARPS_M = 2, WARPS_N = 4;\n"
                        "constexpr int THREADS = WARPS_M * WARPS_N * 32;\n"
                        "}\n"
                        "__global__ void k(float *y) { y[threadIdx.x] = 1.0f; }\n"
                        "extern \"C\" void launch(float *y)\n"
                        "{\n"
                        "    using namespace lay;\n"
                        "    k<<<1, THREADS>>>(y);\n"
                        "}\n";
    sites = list_sites("warps.cu", warps, "block-size");
    why = refusal_of(sites, "apply");
    assert_non_null(why);
    assert_non_null(strstr(why, "THREADS is derived from other constants (WARPS_M * WARPS_N * 32)"));
    json_decref(sites);
    /* rows strided by the thread count from a start that is not the thread index */
    const char *rows = "#define THREADS 128\n"
                       "#define BM 64\n"
                       "__global__ void load(const float *a, float *out)\n"
                       "{\n"
                       "    __shared__ float t[BM][8];\n"
                       "    for (int r = threadIdx.x / 8; r < BM; r += THREADS / 8) t[r][threadIdx.x % 8] = a[r * 8 + threadIdx.x % 8];\n"
                       "    __syncthreads();\n"
                       "    out[threadIdx.x] = t[threadIdx.x % BM][0];\n"
                       "}\n"
                       "extern \"C\" void launch(const float *a, float *out) { load<<<1, THREADS>>>(a, out); }\n";
    sites = list_sites("rows.cu", rows, "block-size");
    why = refusal_of(sites, "apply");
    assert_non_null(why);
    assert_non_null(strstr(why, "not from threadIdx.x"));
    json_decref(sites);
    /* a register array sized by a constant derived from the thread count */
    const char *regs = "#define THREADS 128\n"
                       "constexpr int ITEMS = 1024 / THREADS;\n"
                       "__global__ void row(const float *x, float *y)\n"
                       "{\n"
                       "    float v[ITEMS];\n"
                       "    for (int i = 0; i < ITEMS; i++) v[i] = x[i * THREADS + threadIdx.x];\n"
                       "    for (int i = 0; i < ITEMS; i++) y[i * THREADS + threadIdx.x] = 2.0f * v[i];\n"
                       "}\n"
                       "extern \"C\" void launch(const float *x, float *y) { row<<<1, THREADS>>>(x, y); }\n";
    sites = list_sites("regs.cu", regs, "block-size");
    why = refusal_of(sites, "apply");
    assert_non_null(why);
    assert_non_null(strstr(why, "sizes the register array"));
    json_decref(sites);
    /* a grid-stride loop from blockIdx.x * THREADS + threadIdx.x does not depend on it: still a site */
    text = read_rel("tasks/reduce_sum/expert.cu");
    sites = list_sites("r.cu", text, "block-size");
    bool present = false;
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) present |= !strcmp(json_string_value(json_object_get(s, "direction")), "present");
    assert_true(present);
    json_decref(sites);
    free(text);
}

/* `#pragma unroll` without a count on a loop whose trip count is known only at run time does
 * nothing: no present site. With a count, or on a compile-time (or template) bound, it is one. */
static void unroll_runtime_pragma_is_no_site(void **state)
{
    (void)state;
    const char *text = "template <int K>\n"
                       "__global__ void k(const float *x, float *y, int n)\n"
                       "{\n"
                       "    float s = 0.0f;\n"
                       "    #pragma unroll\n"
                       "    for (int i = 0; i < n; i++) s += x[i];\n"
                       "    #pragma unroll 4\n"
                       "    for (int i = 0; i < n; i++) s += x[i];\n"
                       "    #pragma unroll\n"
                       "    for (int i = threadIdx.x; i < 256; i += blockDim.x) s += x[i];\n"
                       "    #pragma unroll\n"
                       "    for (int i = 0; i < 8; i++) s += x[i];\n"
                       "    #pragma unroll\n"
                       "    for (int i = 0; i < K; i++) s += x[i];\n"
                       "    y[threadIdx.x] = s;\n"
                       "}\n"
                       "extern \"C\" void launch(const float *x, float *y, int n) { k<4><<<1, 32>>>(x, y, n); }\n";
    json_t *sites = list_sites("u.cu", text, "unroll");
    char lines[256] = "";
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), "present")) continue;
        char b[16];
        kl_snprintf(b, sizeof b, "%lld ", (long long)json_integer_value(json_object_get(s, "line")));
        size_t l = strlen(lines);
        kl_snprintf(lines + l, sizeof lines - l, "%s", b);
    }
    assert_string_equal(lines, "8 12 14 ");
    json_decref(sites);
}

/* A conversion operator (`operator T*()` of a shared-memory helper struct) is a function without a
 * declared name: the catalog skips it instead of failing the whole listing with "out of memory",
 * and the kernel beside it keeps its sites. */
static void conversion_operator_is_no_site(void **state)
{
    (void)state;
    const char *text = "template <class T> struct Smem {\n"
                       "    __device__ inline operator T *() { extern __shared__ int s_[]; return (T *)s_; }\n"
                       "};\n"
                       "__global__ void k(const float *x, float *y)\n"
                       "{\n"
                       "    float *s = Smem<float>();\n"
                       "    for (int i = 0; i < 4; i++) s[i] = x[i];\n"
                       "    y[threadIdx.x] = s[threadIdx.x % 4];\n"
                       "}\n"
                       "extern \"C\" void launch(const float *x, float *y) { k<<<1, 32, 16>>>(x, y); }\n";
    json_t *sites = list_sites("op.cu", text, NULL);
    bool unroll = false;
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        const char *t = json_string_value(json_object_get(s, "transform"));
        const char *site = json_string_value(json_object_get(s, "site"));
        if (!strcmp(t, "unroll") && !strcmp(site, "k:7")) unroll = true;
        assert_null(strstr(site, "operator"));
    }
    assert_true(unroll);
    json_decref(sites);
}

/* warp-reduce shuffles a struct of scalars field by field, and refuses one it cannot move (an
 * array field): nvcc has no __shfl_xor_sync for a struct. */
static void warp_reduce_moves_structs_by_field(void **state)
{
    (void)state;
    char *text = read_rel("tests/data/rules/specialize/softmax_root.before.cu");
    json_t *sites = list_sites("s.cu", text, "warp-reduce");
    assert_null(refusal_of(sites, "apply"));
    char *out = apply_ok(text, "warp-reduce", "block_reduce:48", NULL);
    assert_non_null(strstr(out, "kl_o.m = __shfl_xor_sync(0xffffffff, kl_v.m, o); kl_o.s = __shfl_xor_sync"));
    free(out);
    json_decref(sites);
    free(text);
    const char *pair = "struct Pair { float v[2]; };\n"
                       "__device__ Pair add(Pair a, Pair b) { Pair r; r.v[0] = a.v[0] + b.v[0]; r.v[1] = a.v[1] + b.v[1]; return r; }\n"
                       "__global__ void k(const Pair *x, Pair *y)\n"
                       "{\n"
                       "    __shared__ Pair sh[256];\n"
                       "    sh[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];\n"
                       "    __syncthreads();\n"
                       "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
                       "        if (threadIdx.x < s) sh[threadIdx.x] = add(sh[threadIdx.x], sh[threadIdx.x + s]);\n"
                       "        __syncthreads();\n"
                       "    }\n"
                       "    if (threadIdx.x == 0) y[blockIdx.x] = sh[0];\n"
                       "}\n"
                       "extern \"C\" void launch(const Pair *x, Pair *y, int n) { k<<<n / 256, 256>>>(x, y); }\n";
    sites = list_sites("pair.cu", pair, "warp-reduce");
    const char *why = refusal_of(sites, "apply");
    assert_non_null(why);
    assert_non_null(strstr(why, "a warp shuffle does not move"));
    json_decref(sites);
}

/* The compile check of a rewrite: a result nvcc rejects is refused with nvcc's error where the
 * original compiles; nothing is said where the original does not compile (or without nvcc). */
static void compile_check_refuses_what_nvcc_rejects(void **state)
{
    (void)state;
    if (!kl_rules_nvcc()) {
        print_message("nvcc not found: the compile check is not tested\n");
        skip();
    }
    const char *good = "__global__ void k(float *a) { a[threadIdx.x] = 1.0f; }\n";
    const char *bad = "__global__ void k(const float *a) { a[threadIdx.x] = 1.0f; }\n";
    bool checked = false;
    kl_error err = {0};
    assert_int_equal(kl_rules_compile_check("k.cu", good, good, 300, &checked, &err), KL_OK);
    assert_true(checked);
    assert_int_equal(kl_rules_compile_check("k.cu", good, bad, 300, &checked, &err), KL_ERR_COMPILE);
    assert_non_null(strstr(err.message, "does not compile where the original does"));
    assert_non_null(strstr(err.message, "k.cu"));
    checked = true;
    assert_int_equal(kl_rules_compile_check("k.cu", bad, bad, 300, &checked, &err), KL_OK);
    assert_false(checked);
}

/* The compile queue (kl_rules_compile_texts) with a stand-in nvcc: batches of one include set, a
 * failed batch compiled text by text (the failing text named, the others compiled), every text's
 * verdict where it belongs whatever the order the lanes took them in; and a text that hangs is
 * stopped at its time limit, named, while the lanes are not waited for to the end. */
static void compile_queue_with_a_stand_in_nvcc(void **state)
{
    (void)state;
    char *dir = NULL, *cache = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-fake-nvcc", &dir, &err), KL_OK);
    assert_int_equal(kl_tempdir("rules-fake-cache", &cache, &err), KL_OK);
    char nvcc[1200];
    kl_snprintf(nvcc, sizeof nvcc, "%s/nvcc", dir);
    const char *script = "#!/bin/sh\n"
                         "f=; out=\n"
                         "while [ $# -gt 0 ]; do case \"$1\" in -o) out=$2; shift ;; *.cu) f=$1 ;; esac; shift; done\n"
                         "if grep -q HANGS_HERE \"$f\"; then sleep 60; fi\n"
                         "if grep -q REJECT_ME \"$f\"; then echo \"$f(2): error: rejected by the stand-in\"; exit 2; fi\n"
                         ": > \"$out\"\n";
    assert_int_equal(kl_file_write(nvcc, script, strlen(script), &err), KL_OK);
    assert_int_equal(chmod(nvcc, 0755), 0);
    char *old_nvcc = getenv("KLINEAGE_NVCC") ? kl_strdup(getenv("KLINEAGE_NVCC")) : NULL;
    char *old_cache = getenv("KLINEAGE_CACHE") ? kl_strdup(getenv("KLINEAGE_CACHE")) : NULL;
    setenv("KLINEAGE_NVCC", nvcc, 1);
    setenv("KLINEAGE_CACHE", cache, 1);

    /* seven texts: four of one include set (one of them rejected), three alone */
    const char *texts[7] = {
        "#include <cuda_runtime.h>\n__global__ void a(float *x) { x[0] = 1; }\n",
        "#include <cuda_runtime.h>\n__global__ void b(float *x) { x[0] = 2; } // REJECT_ME\n",
        "#include <cuda_runtime.h>\n__global__ void c(float *x) { x[0] = 3; }\n",
        "#include <cuda_runtime.h>\n__global__ void d(float *x) { x[0] = 4; }\n",
        "#include <stdint.h>\n__global__ void e(int32_t *x) { x[0] = 5; }\n",
        "#include <cuda_fp16.h>\n__global__ void f(__half *x) { } // REJECT_ME\n",
        "__global__ void g(float *x) { x[0] = 7; }\n",
    };
    const char *names[7] = {"a.cu", "b.cu", "c.cu", "d.cu", "e.cu", "f.cu", "g.cu"};
    bool ok[7];
    char *why[7];
    assert_int_equal(kl_rules_compile_texts(7, names, texts, NULL, 2, 60, ok, why, &err), KL_OK);
    for (unsigned i = 0; i < 7; i++) {
        bool rejected = strstr(texts[i], "REJECT_ME") != NULL;
        if (ok[i] == rejected) fail_msg("%s: compiled %d", names[i], ok[i]);
        if (rejected) {
            assert_non_null(why[i]);
            if (!strstr(why[i], names[i]) || !strstr(why[i], "rejected by the stand-in"))
                fail_msg("%s: %s", names[i], why[i]);
        } else {
            assert_null(why[i]);
        }
        free(why[i]);
    }

    /* a text that hangs: stopped at its limit (1 s here), named */
    const char *slow[3] = {texts[0], "__global__ void h(float *x) { } // HANGS_HERE\n", texts[4]};
    const char *slow_names[3] = {"a2.cu", "hangs.cu", "e2.cu"};
    double t0 = kl_now();
    kl_status st = kl_rules_compile_texts(3, slow_names, slow, NULL, 2, 1, ok, NULL, &err);
    double took = kl_now() - t0;
    assert_int_equal(st, KL_ERR_TIMEOUT);
    if (!strstr(err.message, "hangs.cu")) fail_msg("the timeout does not name the text: %s", err.message);
    if (took > 30) fail_msg("the hanging text was not stopped at its limit: %.1f s", took);

    if (old_nvcc) setenv("KLINEAGE_NVCC", old_nvcc, 1);
    else unsetenv("KLINEAGE_NVCC");
    if (old_cache) setenv("KLINEAGE_CACHE", old_cache, 1);
    else unsetenv("KLINEAGE_CACHE");
    free(old_nvcc);
    free(old_cache);
    kl_remove_tree(dir, NULL);
    kl_remove_tree(cache, NULL);
    free(dir);
    free(cache);
}

/* The canonical form: a site only it shows (a GEMM indexed through macros, its tile size a template
 * parameter) is listed, marked, and rewritten on the text as written (the macros kept elsewhere). */
static void canonical_form_sites_map_back(void **state)
{
    (void)state;
    char *text = read_rel("tests/data/rules/idioms/gemm_macro_nt.cu");
    char *canon = NULL, *summary = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_canonical("g.cu", text, strlen(text), &canon, &summary, &err), KL_OK);
    assert_non_null(strstr(canon, "sum += a[(i) * lda + (k)] * b[(j) * ldb + (k)];"));
    assert_non_null(strstr(canon, "const int j = blockIdx.x * 16 + threadIdx.x;"));
    assert_non_null(strstr(summary, "expanded A_AT, B_AT, C_AT"));
    assert_non_null(strstr(summary, "bound TILE = 16"));
    json_t *sites = list_sites("g.cu", text, "smem-tile");
    assert_int_equal(json_array_size(sites), 1);
    json_t *s = json_array_get(sites, 0);
    assert_string_equal(json_string_value(json_object_get(s, "direction")), "applicable");
    assert_non_null(json_object_get(s, "canonical"));
    char *out = apply_ok(text, "smem-tile", json_string_value(json_object_get(s, "site")), NULL);
    assert_non_null(strstr(out, "#define A_AT(i, k) a[(i) * lda + (k)]"));
    assert_non_null(strstr(out, "C_AT(i, j) = sum;"));            /* untouched: still the macro */
    assert_non_null(strstr(out, "__shared__ float as[16][16];"));
    json_decref(sites);
    free(out);
    free(canon);
    free(summary);
    free(text);
    /* per-batch pointer locals and bumped pointers fold into the subscripts */
    text = read_rel("tests/data/rules/idioms/warptile_sgemm.cu");
    assert_int_equal(kl_rules_canonical("w.cu", text, strlen(text), &canon, &summary, &err), KL_OK);
    assert_non_null(strstr(canon, "&A[((blockIdx.y * BM * K) + k0) + (r * K + aCol * 4)]"));
    assert_non_null(strstr(canon, "&B[((blockIdx.x * BN) + k0 * N) + (r * N + bCol * 4)]"));
    assert_null(strstr(canon, "A += BK;"));
    /* every line where it was */
    unsigned l1 = 0, l2 = 0;
    for (const char *p = text; *p; p++) l1 += *p == '\n';
    for (const char *p = canon; *p; p++) l2 += *p == '\n';
    assert_int_equal(l1, l2);
    free(canon);
    free(summary);
    free(text);
    /* a 1-D block of TILE * TILE threads read as threadIdx.x / TILE and % TILE is the 2-D block
     * dim3(TILE, TILE), its launch with it: smem-tile applies there, the whole file in that form */
    text = read_rel("tests/data/rules/idioms/gemm_split_block.cu");
    assert_int_equal(kl_rules_canonical("s.cu", text, strlen(text), &canon, &summary, &err), KL_OK);
    assert_non_null(strstr(canon, "const int r = blockIdx.y * TILE + threadIdx.y;"));
    assert_non_null(strstr(canon, "const int c = blockIdx.x * TILE + threadIdx.x;"));
    assert_non_null(strstr(canon, "matmul_flat_block<<<grid, dim3(TILE, TILE), 0, stream>>>"));
    assert_non_null(strstr(summary, "read the 1-D block of matmul_flat_block as dim3(TILE, TILE)"));
    free(canon);
    free(summary);
    sites = list_sites("s.cu", text, "smem-tile");
    assert_int_equal(json_array_size(sites), 1);
    s = json_array_get(sites, 0);
    assert_string_equal(json_string_value(json_object_get(s, "direction")), "applicable");
    out = apply_ok(text, "smem-tile", json_string_value(json_object_get(s, "site")), NULL);
    assert_non_null(strstr(out, "__shared__ float As[TILE][TILE];"));
    assert_non_null(strstr(out, "matmul_flat_block<<<grid, dim3(TILE, TILE), 0, stream>>>"));
    json_decref(sites);
    free(out);
    /* … not when the thread index is read otherwise too (`threadIdx.x == 0`) */
    const char *at = strstr(text, "    C[r * N + c] = sum;");
    assert_non_null(at);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, text, (size_t)(at - text));
    kl_strbuf_adds(&sb, "    C[r * N + c] = sum + (threadIdx.x == 0);");
    kl_strbuf_adds(&sb, at + strlen("    C[r * N + c] = sum;"));
    char *other = kl_strbuf_detach(&sb, NULL);
    assert_non_null(other);
    assert_int_equal(kl_rules_canonical("s.cu", other, strlen(other), &canon, &summary, &err), KL_OK);
    assert_true(!canon || !strstr(canon, "dim3(TILE, TILE)"));
    free(canon);
    free(summary);
    free(other);
    free(text);
}

/* Template parameters are bound one by one: the samples-style reduction launches `<float, THREADS,
 * true>` and `<float, THREADS, false>`, so T and blockSize are bound and nIsPow2 is not. The
 * grid-stride refusal then names the obstacle the canonical form reaches (the per-block store),
 * not the index the text as written cannot evaluate. */
static void canonical_binds_agreeing_template_parameters(void **state)
{
    (void)state;
    char *text = read_rel("tests/data/rules/idioms/reduce_pairs_ballot.cu");
    char *canon = NULL, *summary = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_canonical("r.cu", text, strlen(text), &canon, &summary, &err), KL_OK);
    assert_non_null(strstr(summary, "bound T = float, blockSize = THREADS (reduce_pairs"));
    assert_null(strstr(summary, "nIsPow2 ="));
    assert_non_null(strstr(canon, "unsigned int i = blockIdx.x * THREADS * 2 + threadIdx.x;"));
    assert_non_null(strstr(canon, "if (nIsPow2 || i + THREADS < n)"));
    json_t *sites = list_sites("r.cu", text, "grid-stride");
    assert_int_equal(json_array_size(sites), 1);
    const char *why = json_string_value(json_object_get(json_array_get(sites, 0), "reason"));
    if (!why || !strstr(why, "line 46 stores one value per block"))
        fail_msg("grid-stride's refusal: %s", why ? why : "(none)");
    json_decref(sites);
    free(canon);
    free(summary);
    free(text);
}

/* An apply request for one transform that gives nothing says why, once, for the whole kernel: a
 * transform the catalog only takes apart (interior-path), or no site of it in the kernel
 * (tensor-core on a stencil). Roundtrip admission shows these reasons (docs/lineages.md). */
static const char *apply_refusal(const char *name, const char *text, const char *transform)
{
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = text;
    req.source_name = name;
    req.transform = transform;
    kl_candidates c = {0};
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(c.nrejected, 1);
    assert_string_equal(c.rejected[0].transform, transform);
    static char reason[256];
    kl_snprintf(reason, sizeof reason, "%s", c.rejected[0].reason);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    return reason;
}

static void apply_request_says_why_nothing(void **state)
{
    (void)state;
    char *text = read_rel("tests/data/rules/interior-path/branches_3x3.before.cu");
    const char *why = apply_refusal("s.cu", text, "interior-path");
    if (!strstr(why, "removes this transform but does not apply it")) fail_msg("interior-path: %s", why);
    why = apply_refusal("s.cu", text, "tensor-core");
    if (!strstr(why, "no site in the kernel where the rules apply it")) fail_msg("tensor-core: %s", why);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_kernels_never_crash),
        cmocka_unit_test(apply_request_says_why_nothing),
        cmocka_unit_test(lambda_launch_is_listed),
        cmocka_unit_test(deep_nesting_is_refused),
        cmocka_unit_test(compile_queue_with_a_stand_in_nvcc),
        cmocka_unit_test(listed_sites_rewrite),
        cmocka_unit_test(restrict_sees_reference_writes),
        cmocka_unit_test(block_size_refuses_dependent_layouts),
        cmocka_unit_test(unroll_runtime_pragma_is_no_site),
        cmocka_unit_test(conversion_operator_is_no_site),
        cmocka_unit_test(warp_reduce_moves_structs_by_field),
        cmocka_unit_test(compile_check_refuses_what_nvcc_rejects),
        cmocka_unit_test(canonical_form_sites_map_back),
        cmocka_unit_test(canonical_binds_agreeing_template_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
