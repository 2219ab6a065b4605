/* src/gate, the parent side: the shim (compiled by nvcc for every dtype), the ptxas report,
 * nvcc's errors located in the candidate, the object cache and its keys, the verdict key,
 * the object's symbol check, how a worker's end reads, sanitizer summaries, verdict
 * documents, and replay from a store. What needs nvcc is skipped, saying so, without it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate/gate_int.h"
#include "gate/worker.h"
#include "klineage/store.h"

/* ---- fixtures ------------------------------------------------------------------------------ */

static const kl_dtype all_dtypes[] = {KL_DTYPE_F32, KL_DTYPE_F16, KL_DTYPE_BF16, KL_DTYPE_F64, KL_DTYPE_I32, KL_DTYPE_U8};
#define NDTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

/* A task built in memory: args as given, one size "n", one check shape and a bench shape. */
typedef struct fake_task {
    kl_task t;
    kl_arg args[8];
    const char *sizes[1];
    int64_t check_values[1], bench_values[1];
    kl_shape checks[1];
} fake_task;

static void fake_task_init(fake_task *f, const char *dir)
{
    memset(f, 0, sizeof *f);
    f->sizes[0] = "n";
    f->check_values[0] = 7;
    f->bench_values[0] = 1 << 20;
    f->checks[0] = (kl_shape){"check[0]", f->check_values};
    f->t.dir = dir;
    f->t.name = "fake";
    f->t.sizes = f->sizes;
    f->t.nsizes = 1;
    f->t.args = f->args;
    f->t.bench = (kl_shape){"bench", f->bench_values};
    f->t.checks = f->checks;
    f->t.nchecks = 1;
    f->t.rel_l2 = 1e-5;
    f->t.max_abs = -1;
    f->t.reference = "reference.c";
}

static void fake_arg(fake_task *f, const char *name, kl_dtype d, kl_role role)
{
    kl_arg *a = &f->args[f->t.nargs++];
    a->name = name;
    a->dtype = d;
    a->role = role;
    if (d == KL_DTYPE_NONE) a->value = "n";
    else a->shape = "n";
}

static char *nvcc_path(void)
{
    const char *e = getenv("KLINEAGE_NVCC");
    if (e && *e && access(e, X_OK) == 0) return kl_strdup(e);
    const char *path = getenv("PATH");
    char *copy = kl_strdup(path ? path : "");
    for (char *tok = strtok(copy, ":"); tok; tok = strtok(NULL, ":")) {
        char *full = kl_path_join(tok, "nvcc");
        if (access(full, X_OK) == 0) {
            free(copy);
            return full;
        }
        free(full);
    }
    free(copy);
    if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) return kl_strdup("/usr/local/cuda/bin/nvcc");
    return NULL;
}

/* A gate compiling for sm_90 into a fresh cache; NULL (and a message) when nvcc is absent. */
static kl_gate *nvcc_gate(char **cache)
{
    char *nvcc = nvcc_path();
    if (!nvcc) {
        print_message("nvcc not found: skipping the compile test\n");
        return NULL;
    }
    kl_error err = {0};
    assert_int_equal(kl_tempdir("gate-test", cache, &err), KL_OK);
    kl_gate_options o = {0};
    o.arch = "sm_90";
    o.nvcc = nvcc;
    o.cache_dir = *cache;
    o.jobs = 2;
    kl_gate *g = NULL;
    assert_int_equal(kl_gate_open(&o, &g, &err), KL_OK);
    free(nvcc);
    return g;
}

static void remove_tree(char *dir)
{
    kl_error err;
    if (dir) kl_remove_tree(dir, &err);
    free(dir);
}

/* A kernel file for a task of args (in T0*, out T1*, …, int n): each output gets element i
 * of the first input, converted; the launch signature follows kl_shim_launch_decl. */
static char *kernel_for(const kl_task *t)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    char *decl = kl_shim_launch_decl(t);
    assert_non_null(decl);
    kl_strbuf_adds(&sb, "template <typename O, typename I> __global__ void conv(O *y, const I *x, int n)\n"
                        "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "    if (i < n) y[i] = (O)(float)x[i];\n}\n\n");
    kl_strbuf_adds(&sb, decl);
    kl_strbuf_adds(&sb, "\n{\n");
    const kl_arg *in = NULL;
    for (unsigned i = 0; i < t->nargs; i++)
        if (t->args[i].role == KL_ROLE_IN && t->args[i].dtype != KL_DTYPE_NONE && !in) in = &t->args[i];
    for (unsigned i = 0; i < t->nargs; i++)
        if (t->args[i].role != KL_ROLE_IN)
            kl_strbuf_addf(&sb, "    conv<<<(n + 255) / 256, 256, 0, stream>>>(%s, %s, n);\n", t->args[i].name,
                           in->name);
    kl_strbuf_adds(&sb, "}\n");
    free(decl);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the shim ------------------------------------------------------------------------------ */

static void shim_keeps_the_candidate_and_types_every_arg(void **state)
{
    (void)state;
    fake_task f;
    fake_task_init(&f, "/nonexistent");
    fake_arg(&f, "x", KL_DTYPE_BF16, KL_ROLE_IN);
    fake_arg(&f, "y", KL_DTYPE_F32, KL_ROLE_OUT);
    fake_arg(&f, "z", KL_DTYPE_U8, KL_ROLE_INOUT);
    fake_arg(&f, "n", KL_DTYPE_NONE, KL_ROLE_IN);
    const char *text = "// my kernel\n__global__ void k() {}";
    char *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_shim_source(&f.t, "dir/my \"odd\".cu", text, &src, &err), KL_OK);
    assert_non_null(strstr(src, "#line 1 \"dir/my \\\"odd\\\".cu\"\n// my kernel\n"));
    assert_non_null(strstr(src, text));
    char want[128];
    kl_snprintf(want, sizeof want, "(const %s *)args[0]", kl_dtype_ctype(KL_DTYPE_BF16));
    assert_non_null(strstr(src, want));
    kl_snprintf(want, sizeof want, "(%s *)args[1]", kl_dtype_ctype(KL_DTYPE_F32));
    assert_non_null(strstr(src, want));
    kl_snprintf(want, sizeof want, "(%s *)args[2]", kl_dtype_ctype(KL_DTYPE_U8));
    assert_non_null(strstr(src, want));
    assert_non_null(strstr(src, "*(const int *)args[3], stream)"));
    assert_non_null(strstr(src, "kl_shim_abi"));
    assert_non_null(strstr(src, KL_SHIM_ABI));
    /* the candidate's text ends before the shim starts on a line of its own */
    assert_non_null(strstr(src, "__global__ void k() {}\n#line 1 \"<klineage shim>\""));
    free(src);
}

static void compile_and_check(kl_gate *g, fake_task *f, const char *label)
{
    char *text = kernel_for(&f->t);
    kl_gate_source s = {label, text};
    kl_compiled *c = NULL;
    kl_error err = {0};
    assert_int_equal(kl_gate_compile(g, &f->t, &s, &c, &err), KL_OK);
    if (!c->ok) print_message("%s: %s\n%s\n", label, c->error ? c->error : "", c->log ? c->log : "");
    assert_true(c->ok);
    assert_non_null(c->object);
    assert_true(kl_file_exists(c->object));
    assert_true(c->nkernels >= 1);
    assert_int_equal(kl_object_check(c->object, &err), KL_OK);
    kl_compiled_free(c);
    free(text);
}

static void shim_compiles_for_every_dtype(void **state)
{
    (void)state;
    char *cache = NULL;
    kl_gate *g = nvcc_gate(&cache);
    if (!g) {
        skip();
        return;
    }
    /* every dtype in every role, all in one signature: one nvcc run types every combination
     * of dtype and role in the shim (the kernel converts the first input into each output) */
    static const kl_role roles[] = {KL_ROLE_IN, KL_ROLE_OUT, KL_ROLE_INOUT};
    fake_task all;
    fake_task_init(&all, "/nonexistent");
    all.t.args = calloc(NDTYPES * 3 + 1, sizeof(kl_arg));
    char names[NDTYPES * 3][16];
    for (size_t r = 0; r < 3; r++)
        for (size_t i = 0; i < NDTYPES; i++) {
            char *name = names[r * NDTYPES + i];
            kl_snprintf(name, sizeof names[0], "%s_%zu", kl_dtype_name(all_dtypes[i]), r);
            kl_arg *a = &all.t.args[all.t.nargs++];
            a->name = name;
            a->dtype = all_dtypes[i];
            a->role = roles[r];
            a->shape = "n";
        }
    kl_arg *n = &all.t.args[all.t.nargs++];
    n->name = "n";
    n->value = "n";
    compile_and_check(g, &all, "all-dtypes.cu");
    free(all.t.args);
    kl_gate_close(g);
    remove_tree(cache);
}

static void compile_many_runs_in_parallel_and_caches(void **state)
{
    (void)state;
    char *cache = NULL;
    kl_gate *g = nvcc_gate(&cache);
    if (!g) {
        skip();
        return;
    }
    fake_task f;
    fake_task_init(&f, "/nonexistent");
    fake_arg(&f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    fake_arg(&f, "y", KL_DTYPE_F32, KL_ROLE_OUT);
    fake_arg(&f, "n", KL_DTYPE_NONE, KL_ROLE_IN);
    char *base = kernel_for(&f.t);
    /* two different files and the same file twice under another name */
    kl_strbuf other = KL_STRBUF_INIT;
    kl_strbuf_addf(&other, "%s// a comment changes the content\n", base);
    kl_gate_source srcs[3] = {{"a.cu", base}, {"b.cu", kl_strbuf_str(&other)}, {"a.cu", base}};
    kl_compiled *outs[3];
    kl_error err = {0};
    assert_int_equal(kl_gate_compile_many(g, &f.t, 2, srcs, outs, &err), KL_OK);
    assert_true(outs[0]->ok && outs[1]->ok);
    assert_false(outs[0]->cached);
    assert_string_not_equal(outs[0]->hash, outs[1]->hash);
    kl_compiled *again = NULL;
    assert_int_equal(kl_gate_compile(g, &f.t, &srcs[2], &again, &err), KL_OK);
    assert_true(again->ok);
    assert_true(again->cached);
    assert_string_equal(again->hash, outs[0]->hash);
    assert_string_equal(again->object, outs[0]->object);
    assert_int_equal(again->nkernels, outs[0]->nkernels);
    assert_string_equal(again->kernels[0].name, outs[0]->kernels[0].name);
    assert_int_equal(again->kernels[0].registers, outs[0]->kernels[0].registers);
    for (int i = 0; i < 2; i++) kl_compiled_free(outs[i]);
    kl_compiled_free(again);
    kl_strbuf_release(&other);
    free(base);
    kl_gate_close(g);
    remove_tree(cache);
}

/* A stand-in nvcc that takes `secs` per compile (sleeping, so the machine's load does not
 * matter) and writes an empty object: shows that --jobs N runs N compiles at once. */
static void compile_many_overlaps_its_children(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("fake-nvcc", &dir, &err), KL_OK);
    char *nvcc = kl_path_join(dir, "nvcc");
    const double secs = 1.0;
    /* a real shared object exporting the shim's two symbols (the gate inspects what nvcc made),
     * built once here so that the stand-in only copies it */
    char *tmpl_c = kl_path_join(dir, "tmpl.c"), *tmpl = kl_path_join(dir, "tmpl.so");
    const char *tsrc = "int kl_shim_launch(void){return 0;} const char *kl_shim_abi(void){return \"\";}\n";
    assert_int_equal(kl_file_write(tmpl_c, tsrc, strlen(tsrc), &err), KL_OK);
    const char *cc_argv[] = {"cc", "-shared", "-fPIC", "-o", tmpl, tmpl_c, NULL};
    kl_child cc;
    kl_child_init(&cc);
    cc.argv = cc_argv;
    cc.timeout_s = 120;
    assert_int_equal(kl_child_run(&cc, &err), KL_OK);
    assert_int_equal(cc.exit_code, 0);
    kl_child_release(&cc);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "#!/bin/sh\n"
                        "if [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 13.0, V13.0.88'; exit 0; fi\n"
                        "out=; while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                        "sleep %g; cp '%s' \"$out\"\n",
                   secs, tmpl);
    free(tmpl_c);
    free(tmpl);
    assert_int_equal(kl_file_write(nvcc, kl_strbuf_str(&sb), sb.len, &err), KL_OK);
    assert_int_equal(chmod(nvcc, 0755), 0);
    char *cache = kl_path_join(dir, "cache");
    enum { N = 4 };
    kl_gate_options o = {0};
    o.arch = "sm_90";
    o.nvcc = nvcc;
    o.cache_dir = cache;
    o.jobs = N;
    kl_gate *g = NULL;
    assert_int_equal(kl_gate_open(&o, &g, &err), KL_OK);
    fake_task f;
    fake_task_init(&f, "/nonexistent");
    fake_arg(&f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    kl_gate_source srcs[N];
    char texts[N][32];
    for (int i = 0; i < N; i++) {
        kl_snprintf(texts[i], sizeof texts[i], "// file %d\n", i);
        srcs[i] = (kl_gate_source){"f.cu", texts[i]};
    }
    kl_compiled *outs[N];
    double t0 = kl_now();
    assert_int_equal(kl_gate_compile_many(g, &f.t, N, srcs, outs, &err), KL_OK);
    double wall = kl_now() - t0;
    for (int i = 0; i < N; i++) {
        assert_true(outs[i]->ok);
        assert_true(outs[i]->seconds >= secs);
        kl_compiled_free(outs[i]);
    }
    /* N children at once: far less than N in a row */
    assert_true(wall < (N - 1) * secs);
    kl_gate_close(g);
    /* one at a time with jobs = 1 */
    o.jobs = 1;
    o.cache_dir = dir; /* a fresh cache: nothing served */
    assert_int_equal(kl_gate_open(&o, &g, &err), KL_OK);
    t0 = kl_now();
    assert_int_equal(kl_gate_compile_many(g, &f.t, 2, srcs, outs, &err), KL_OK);
    assert_true(kl_now() - t0 >= 2 * secs);
    kl_compiled_free(outs[0]);
    kl_compiled_free(outs[1]);
    kl_gate_close(g);
    kl_strbuf_release(&sb);
    free(nvcc);
    free(cache);
    remove_tree(dir);
}

/* The 1-based line of the first occurrence of needle in text. */
static unsigned line_of(const char *text, const char *needle)
{
    const char *p = strstr(text, needle);
    assert_non_null(p);
    unsigned line = 1;
    for (const char *q = text; q < p; q++)
        if (*q == '\n') line++;
    return line;
}

static void compile_errors_name_the_candidates_line(void **state)
{
    (void)state;
    char *cache = NULL;
    kl_gate *g = nvcc_gate(&cache);
    if (!g) {
        skip();
        return;
    }
    fake_task f;
    fake_task_init(&f, "/nonexistent");
    fake_arg(&f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    fake_arg(&f, "y", KL_DTYPE_F32, KL_ROLE_OUT);
    fake_arg(&f, "n", KL_DTYPE_NONE, KL_ROLE_IN);
    char *good = kernel_for(&f.t);
    kl_strbuf bad = KL_STRBUF_INIT;
    kl_strbuf_adds(&bad, "// a broken kernel\n\n");
    kl_strbuf_adds(&bad, good);
    kl_strbuf_adds(&bad, "__global__ void broken(float *y) { y[0] = undefined_name; }\n");
    kl_gate_source s = {"cands/broken.cu", kl_strbuf_str(&bad)};
    kl_compiled *c = NULL;
    kl_error err = {0};
    assert_int_equal(kl_gate_compile(g, &f.t, &s, &c, &err), KL_OK);
    assert_false(c->ok);
    assert_null(c->object);
    assert_non_null(c->error_file);
    assert_string_equal(c->error_file, "cands/broken.cu");
    assert_int_equal(c->error_line, line_of(kl_strbuf_str(&bad), "undefined_name"));
    char where[256];
    kl_snprintf(where, sizeof where, "cands/broken.cu:%u: error:", c->error_line);
    assert_true(kl_str_starts(c->error, where));
    assert_non_null(strstr(c->error, "undefined_name"));
    kl_compiled_free(c);

    /* a launch() whose signature is not the task's: the shim's call fails, said so */
    kl_strbuf wrong = KL_STRBUF_INIT;
    kl_strbuf_adds(&wrong, "extern \"C\" void launch(float *x, float *y, int n, cudaStream_t s) {}\n");
    kl_gate_source w = {"cands/wrong.cu", kl_strbuf_str(&wrong)};
    assert_int_equal(kl_gate_compile(g, &f.t, &w, &c, &err), KL_OK);
    assert_false(c->ok);
    assert_non_null(strstr(c->error, "launch() does not match the task's args"));
    assert_non_null(strstr(c->error, "const float *x"));
    kl_compiled_free(c);
    kl_strbuf_release(&wrong);
    kl_strbuf_release(&bad);
    free(good);
    kl_gate_close(g);
    remove_tree(cache);
}

static void nvcc_first_error_forms(void **state)
{
    (void)state;
    char *file, *msg;
    unsigned line;
    assert_true(kl_nvcc_first_error("warning: x\na/b.cu(12): error: identifier \"q\" is undefined\nc.cu(3): error: z\n",
                                    &file, &line, &msg));
    assert_string_equal(file, "a/b.cu");
    assert_int_equal(line, 12);
    assert_string_equal(msg, "identifier \"q\" is undefined");
    free(file), free(msg);
    assert_true(kl_nvcc_first_error("x.cu(4): catastrophic error: cannot open source file \"y.h\"\n", &file, &line, &msg));
    assert_int_equal(line, 4);
    assert_non_null(strstr(msg, "cannot open"));
    free(file), free(msg);
    assert_true(kl_nvcc_first_error("host.cpp:9:3: error: expected ';'\n", &file, &line, &msg));
    assert_string_equal(file, "host.cpp");
    assert_int_equal(line, 9);
    assert_string_equal(msg, "expected ';'");
    free(file), free(msg);
    assert_true(kl_nvcc_first_error("ptxas fatal   : Unresolved extern function 'f'\n", &file, &line, &msg));
    assert_null(file);
    assert_int_equal(line, 0);
    assert_non_null(strstr(msg, "Unresolved extern"));
    free(file), free(msg);
    assert_false(kl_nvcc_first_error("ptxas info    : Used 10 registers\n", &file, &line, &msg));
}

/* ---- the ptxas report ------------------------------------------------------------------------- */

static const kl_kernel_report *kernel_named(const kl_kernel_report *k, unsigned n, const char *part)
{
    for (unsigned i = 0; i < n; i++)
        if (strstr(k[i].name, part)) return &k[i];
    return NULL;
}

/* tests/data/ptxas_sm90.txt: nvcc 13.0 -arch=sm_90 -Xptxas -v -maxrregcount=24 on
 * tests/data/ptxas_sm90.cu (tile<T>: a 32x33 T tile; heavy: 40 live floats under 24 registers). */
static void check_sample_kernels(const kl_kernel_report *k, unsigned n, int max_regs)
{
    assert_int_equal(n, 3); /* three entries; the device function helper is not one */
    const kl_kernel_report *td = kernel_named(k, n, "tileId"), *tf = kernel_named(k, n, "tileIf");
    const kl_kernel_report *h = kernel_named(k, n, "heavy");
    assert_non_null(td);
    assert_non_null(tf);
    assert_non_null(h);
    assert_int_equal(td->smem_static, 32 * 33 * (int)sizeof(double));
    assert_int_equal(tf->smem_static, 32 * 33 * (int)sizeof(float));
    assert_int_equal(td->barriers, 1);
    assert_int_equal(td->spill_stores + td->spill_loads + td->stack, 0);
    assert_true(h->registers > 0 && h->registers <= max_regs);
    assert_true(h->spill_stores > 0);
    assert_true(h->spill_loads > 0);
    assert_true(h->stack >= 64 * (int)sizeof(float)); /* helper's local array lives on the stack */
    assert_int_equal(h->smem_static, 0);
    assert_null(kernel_named(k, n, "helper"));
}

static void ptxas_report_from_captured_sample(void **state)
{
    (void)state;
    char *path = kl_path_join(getenv("KL_TEST_DATA"), "ptxas_sm90.txt");
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    assert_int_equal(kl_file_read(path, 0, &text, &len, &err), KL_OK);
    kl_kernel_report *k = NULL;
    unsigned n = 0;
    assert_int_equal(kl_ptxas_parse(text, &k, &n, &err), KL_OK);
    check_sample_kernels(k, n, 24);
    kl_kernel_reports_demangle(k, n);
    const kl_kernel_report *tf = kernel_named(k, n, "tileIf");
    if (strcmp(tf->demangled, tf->name) != 0) assert_non_null(strstr(tf->demangled, "tile<float>"));
    kl_kernel_reports_free(k, n);
    free(text);
    free(path);
}

static void ptxas_report_from_nvcc_now(void **state)
{
    (void)state;
    char *nvcc = nvcc_path();
    if (!nvcc) {
        print_message("nvcc not found: the captured sample stands in\n");
        skip();
        return;
    }
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("ptxas", &dir, &err), KL_OK);
    char *src = kl_path_join(getenv("KL_TEST_DATA"), "ptxas_sm90.cu");
    char *obj = kl_path_join(dir, "s.o");
    const char *argv[] = {nvcc, "-c", "-arch=sm_90", "-Xptxas", "-v", "-maxrregcount=24", "-o", obj, src, NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.merge_stderr = true;
    c.timeout_s = 300;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_int_equal(c.exit_code, 0);
    kl_kernel_report *k = NULL;
    unsigned n = 0;
    assert_int_equal(kl_ptxas_parse(kl_strbuf_str(&c.out), &k, &n, &err), KL_OK);
    check_sample_kernels(k, n, 24);
    kl_kernel_reports_free(k, n);
    kl_child_release(&c);
    free(obj);
    free(src);
    free(nvcc);
    remove_tree(dir);
}

/* ---- the target a kernel file compiles for ---------------------------------------------------- */

/* wgmma and setmaxnreg in a file's asm send it to the arch-specific target, in the -gencode form
 * (nvcc 13.0's -arch=sm_90a also runs a plain sm_90 pass that rejects them); a mention in a comment
 * does not, nor does an arch before sm_90 or one already arch-specific. */
static void arch_specific_sources(void **state)
{
    (void)state;
    static const struct {
        const char *arch, *text, *want;
    } cases[] = {
        {"sm_90", "asm volatile(\"wgmma.fence.sync.aligned;\\n\");", "sm_90a"},
        {"sm_90", "asm volatile(\"setmaxnreg.inc.sync.aligned.u32 232;\\n\");", "sm_90a"},
        {"sm_100", "asm(\"wgmma.mma_async\");", "sm_100a"},
        {"sm_90", "// tensor-core: wgmma.mma_async m64n256k16\n/* or setmaxnreg.dec */\nint x;", "sm_90"},
        {"sm_90", "asm(\"mma.sync.aligned.m16n8k16\");", "sm_90"},
        {"sm_80", "asm(\"wgmma.fence.sync.aligned;\");", "sm_80"},
        {"sm_90a", "asm(\"wgmma.fence.sync.aligned;\");", "sm_90a"},
        {"sm_90", "/* unterminated comment wgmma.fence", "sm_90"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *a = kl_source_arch(cases[i].arch, cases[i].text);
        assert_non_null(a);
        if (strcmp(a, cases[i].want)) fail_msg("case %u: %s for %s, expected %s", i, a, cases[i].arch, cases[i].want);
        free(a);
    }
    char buf[96];
    const char *flags[16];
    unsigned n = kl_nvcc_flags("sm_90a", buf, sizeof buf, flags, 16);
    assert_string_equal(flags[n - 1], "-gencode=arch=compute_90a,code=sm_90a");
    n = kl_nvcc_flags("sm_90", buf, sizeof buf, flags, 16);
    assert_string_equal(flags[n - 1], "-arch=sm_90");
}

/* ---- keys --------------------------------------------------------------------------------- */

static void compile_key_changes_with_every_part(void **state)
{
    (void)state;
    const char *flags[] = {"-O3", "-arch=sm_90"};
    const char *flags2[] = {"-O3", "-arch=sm_90a"};
    char a[KL_HASH_HEX], b[KL_HASH_HEX];
    kl_compile_key("src", flags, 2, "13.0.88", a);
    kl_compile_key("src", flags, 2, "13.0.88", b);
    assert_string_equal(a, b);
    kl_compile_key("src ", flags, 2, "13.0.88", b);
    assert_string_not_equal(a, b);
    kl_compile_key("src", flags2, 2, "13.0.88", b);
    assert_string_not_equal(a, b);
    kl_compile_key("src", flags, 1, "13.0.88", b);
    assert_string_not_equal(a, b);
    kl_compile_key("src", flags, 2, "13.0.89", b);
    assert_string_not_equal(a, b);
}

static void verdict_key_changes_with_every_part(void **state)
{
    (void)state;
    kl_verdict_key_parts p = {"cand", "base", "{task}", "ref", "check[0],bench", "correct,profile", "NVIDIA H200",
                              "nvcc 13.0.88 sm_90"};
    char a[KL_HASH_HEX], b[KL_HASH_HEX];
    kl_verdict_key(&p, a);
    kl_verdict_key(&p, b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), 64);
    const char **fields[] = {&p.candidate, &p.baseline, &p.task_json, &p.reference, &p.shapes, &p.stages, &p.device,
                             &p.toolchain};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        kl_verdict_key_parts q = p;
        const char **f = (const char **)((char *)&q + ((char *)fields[i] - (char *)&p));
        *f = "changed";
        kl_verdict_key(&q, b);
        assert_string_not_equal(a, b);
        *f = NULL; /* absent differs from present */
        kl_verdict_key(&q, b);
        assert_string_not_equal(a, b);
    }
    /* parts do not run into each other */
    kl_verdict_key_parts r = p;
    r.candidate = "candb";
    r.baseline = "ase";
    kl_verdict_key(&r, b);
    assert_string_not_equal(a, b);
}

/* ---- the object's symbols ------------------------------------------------------------------ */

static char *build_so(const char *dir, const char *name, const char *code)
{
    char *c_path = NULL, *so_path = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s/%s.c", dir, name);
    c_path = kl_strbuf_detach(&sb, NULL);
    kl_strbuf_addf(&sb, "%s/%s.so", dir, name);
    so_path = kl_strbuf_detach(&sb, NULL);
    kl_error err = {0};
    assert_int_equal(kl_file_write(c_path, code, strlen(code), &err), KL_OK);
    const char *argv[] = {"cc", "-shared", "-fPIC", "-fvisibility=hidden", "-o", so_path, c_path, "-lpthread", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.merge_stderr = true;
    c.timeout_s = 120;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    if (c.exit_code != 0) print_message("%s\n", kl_strbuf_str(&c.out));
    assert_int_equal(c.exit_code, 0);
    kl_child_release(&c);
    free(c_path);
    return so_path;
}

static void object_check_rejects_interposers_and_threads(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("objcheck", &dir, &err), KL_OK);
    const char *shim = "#define API __attribute__((visibility(\"default\")))\n"
                       "API int kl_shim_launch(void *const *a, void *s) { (void)a; (void)s; return 0; }\n"
                       "API const char *kl_shim_abi(void) { return \"klineage-shim-1\"; }\n";
    kl_strbuf sb = KL_STRBUF_INIT;
    char *clean = build_so(dir, "clean", shim);
    assert_int_equal(kl_object_check(clean, &err), KL_OK);

    kl_strbuf_addf(&sb, "%sAPI int cudaMemcpy(void *d, const void *s, unsigned long n, int k) { return 0; }\n", shim);
    char *interposer = build_so(dir, "interposer", kl_strbuf_str(&sb));
    assert_int_equal(kl_object_check(interposer, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "exports the symbol cudaMemcpy"));

    kl_strbuf_reset(&sb);
    kl_strbuf_addf(&sb, "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n%s"
                        "API int start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n",
                   shim);
    char *threads = build_so(dir, "threads", kl_strbuf_str(&sb));
    assert_int_equal(kl_object_check(threads, &err), KL_ERR_INVALID);
    assert_true(strstr(err.message, "pthread_create") || strstr(err.message, "exports the symbol start"));

    kl_strbuf_reset(&sb);
    kl_strbuf_addf(&sb, "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n%s"
                        "int hidden_start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n",
                   shim);
    char *hidden = build_so(dir, "hidden", kl_strbuf_str(&sb));
    assert_int_equal(kl_object_check(hidden, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "pthread_create"));

    char *notelf = kl_path_join(dir, "clean.c");
    assert_int_equal(kl_object_check(notelf, &err), KL_ERR_PARSE);
    free(notelf);
    free(clean);
    free(interposer);
    free(threads);
    free(hidden);
    kl_strbuf_release(&sb);
    remove_tree(dir);
}

/* ---- how a worker's end reads ----------------------------------------------------------- */

static void child_reasons(void **state)
{
    (void)state;
    const char *child = getenv("KL_TESTCHILD");
    assert_non_null(child);
    kl_error err = {0};
    char buf[128];
    kl_child c;
    const char *crash[] = {child, "crash", NULL};
    kl_child_init(&c);
    c.argv = crash;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    kl_gate_child_reason(&c, buf, sizeof buf);
    assert_string_equal(buf, "killed by SIGSEGV");
    kl_child_release(&c);

    const char *hang[] = {child, "hang", NULL};
    kl_child_init(&c);
    c.argv = hang;
    c.timeout_s = 0.5;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    kl_gate_child_reason(&c, buf, sizeof buf);
    assert_string_equal(buf, "timed out after 0.5 s");
    kl_child_release(&c);

    const char *ex[] = {child, "exit", "3", NULL};
    kl_child_init(&c);
    c.argv = ex;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    kl_gate_child_reason(&c, buf, sizeof buf);
    assert_string_equal(buf, "exit 3");
    kl_child_release(&c);
}

static void cuda_reasons_say_sticky(void **state)
{
    (void)state;
    json_t *e = json_pack("{s:s, s:s, s:s}", "stage", "correct", "cuda", "an illegal memory access was encountered",
                          "detail", "after launch at check[1]");
    char *r = kl_gate_cuda_reason(e);
    assert_string_equal(r, "CUDA error: an illegal memory access was encountered (sticky CUDA error: the context is "
                           "lost) in correct: after launch at check[1]");
    free(r);
    json_decref(e);
    e = json_pack("{s:s, s:s}", "stage", "profile", "cuda", "out of memory");
    r = kl_gate_cuda_reason(e);
    assert_string_equal(r, "CUDA error: out of memory in profile");
    free(r);
    json_decref(e);
}

/* ---- the sanitizer's summaries ------------------------------------------------------------ */

static void sanitizer_counts(void **state)
{
    (void)state;
    assert_int_equal(kl_sanitizer_count("memcheck", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"), 0);
    assert_int_equal(kl_sanitizer_count("memcheck", "========= Invalid __global__ write of size 4 bytes\n"
                                                    "========= ERROR SUMMARY: 12 errors\n"),
                     12);
    /* racecheck: warnings count too */
    assert_int_equal(kl_sanitizer_count("racecheck", "========= RACECHECK SUMMARY: 3 hazards displayed (0 errors, 3 "
                                                     "warnings)\n========= ERROR SUMMARY: 0 errors\n"),
                     3);
    assert_int_equal(kl_sanitizer_count("initcheck", "no summary here\n"), -1);
    assert_int_equal(kl_sanitizer_count("synccheck", NULL), -1);
}

/* ---- verdict documents ------------------------------------------------------------------ */

static const char *sample_verdict =
    "{\"format\":\"klineage-verdict-1\",\"key\":\"k1\",\"pass\":false,\"failed_stage\":\"correct\","
    "\"reason\":\"wrong at check[1]\",\"device\":{\"name\":\"Dev\"},\"toolchain\":{\"text\":\"nvcc 1 sm_90\"},"
    "\"candidate\":{\"name\":\"c.cu\"},\"stages\":{"
    "\"compile\":{\"ok\":true,\"cached\":true,\"kernels\":[{\"name\":\"_Z1kv\",\"demangled\":\"k()\",\"registers\":"
    "17,\"smem_static\":0,\"spill_stores\":0,\"spill_loads\":0,\"stack\":0}]},"
    "\"correct\":{\"ok\":false,\"reason\":\"wrong at check[1]\"},"
    "\"determinism\":{\"skipped\":\"an earlier stage failed\"}}}";

static void verdict_documents_read_back(void **state)
{
    (void)state;
    kl_verdict *v = NULL;
    kl_error err = {0};
    assert_int_equal(kl_verdict_parse(sample_verdict, &v, &err), KL_OK);
    assert_int_equal(v->status, KL_OK);
    assert_false(v->pass);
    assert_string_equal(v->failed_stage, "correct");
    assert_string_equal(v->device, "Dev");
    assert_string_equal(v->candidate, "c.cu");
    assert_int_equal(v->nstages, kl_gate_stage_count);
    assert_string_equal(v->stages[0].name, "compile");
    assert_int_equal(v->stages[0].state, KL_STAGE_PASSED);
    assert_non_null(strstr(v->stages[0].summary, "k 17 regs"));
    assert_int_equal(v->stages[1].state, KL_STAGE_FAILED);
    assert_string_equal(v->stages[1].summary, "wrong at check[1]");
    assert_int_equal(v->stages[2].state, KL_STAGE_SKIPPED);
    assert_non_null(strstr(v->stages[2].summary, "earlier stage failed"));
    assert_true(v->median_ms < 0 && v->speedup < 0);
    v->replayed = true;
    char *json = kl_verdict_json(v, false);
    assert_non_null(strstr(json, "\"replayed\":true"));
    assert_null(strchr(json, '\n'));
    kl_verdict *w = NULL;
    assert_int_equal(kl_verdict_parse(json, &w, &err), KL_OK);
    assert_string_equal(w->key, v->key);
    free(json);
    kl_verdict_free(w);
    kl_verdict_free(v);

    assert_int_equal(kl_verdict_parse("{\"format\":\"other\"}", &v, &err), KL_ERR_INVALID);
    assert_int_equal(kl_verdict_parse("{\"format\":\"klineage-verdict-1\",\"key\":\"k\",\"pass\":false}", &v, &err),
                     KL_ERR_INVALID);
    assert_int_equal(kl_verdict_parse("not json", &v, &err), KL_ERR_PARSE);
    assert_null(v);
}

/* ---- replay --------------------------------------------------------------------------------- */

static void replay_serves_recorded_verdicts_and_never_invents(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("replay", &dir, &err), KL_OK);
    char *tj = kl_path_join(dir, "task.json"), *rc = kl_path_join(dir, "reference.c"), *cu = kl_path_join(dir, "c.cu");
    assert_int_equal(kl_file_write(tj, "{}", 2, &err), KL_OK);
    assert_int_equal(kl_file_write(rc, "void reference(void) {}", 23, &err), KL_OK);
    assert_int_equal(kl_file_write(cu, "// candidate\n", 13, &err), KL_OK);
    fake_task f;
    fake_task_init(&f, dir);
    fake_arg(&f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    kl_store *store = NULL;
    assert_int_equal(kl_store_open(":memory:", &store, &err), KL_OK);
    kl_gate_options o = {0};
    o.mode = KL_GATE_REPLAY;
    o.store = store;
    kl_gate *g = NULL;
    assert_int_equal(kl_gate_open(&o, &g, &err), KL_OK);
    kl_gate_source cand = {cu, NULL};
    kl_verdict *v = NULL;

    /* no device recorded: unmeasured */
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, NULL, NULL, &v, &err), KL_ERR_UNMEASURED);
    assert_non_null(v);
    assert_int_equal(v->status, KL_ERR_UNMEASURED);
    assert_false(v->pass);
    kl_verdict_free(v);
    kl_gate_close(g);

    const char *gpu = "{\"format\":\"klineage-gpu-1\",\"device\":{\"name\":\"Dev X\",\"cc\":\"9.0\"},"
                      "\"toolchain\":{\"nvcc\":\"13.0.88\",\"arch\":\"sm_90\",\"text\":\"nvcc 13.0.88 sm_90\"}}";
    assert_int_equal(kl_store_put(store, "gpu", "Dev X", gpu, &err), KL_OK);
    assert_int_equal(kl_gate_open(&o, &g, &err), KL_OK);
    /* a miss: an unmeasured verdict naming the key, no figures */
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, NULL, NULL, &v, &err), KL_ERR_UNMEASURED);
    assert_non_null(strstr(err.message, "unmeasured"));
    assert_non_null(v);
    assert_true(v->replayed);
    assert_int_equal(strlen(v->key), 64);
    assert_true(v->median_ms < 0 && v->speedup < 0);
    char key[KL_HASH_HEX];
    memcpy(key, v->key, KL_HASH_HEX);
    kl_verdict_free(v);
    /* checking the bench shape against the baseline is another verdict (another key), and
     * needs a baseline */
    kl_judge_options against = {0};
    against.bench_against_baseline = true;
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, NULL, &against, &v, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "needs a baseline"));
    assert_null(v);
    kl_gate_source base = {"base.cu", "__global__ void k() {}\n"};
    kl_judge_options plain = {0};
    char key_plain[KL_HASH_HEX];
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, &base, &plain, &v, &err), KL_ERR_UNMEASURED);
    memcpy(key_plain, v->key, KL_HASH_HEX);
    kl_verdict_free(v);
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, &base, &against, &v, &err), KL_ERR_UNMEASURED);
    assert_string_not_equal(v->key, key_plain);
    kl_verdict_free(v);

    /* record one under that key: served, marked replayed, figures as recorded */
    json_t *doc = json_loads(sample_verdict, 0, NULL);
    json_object_set_new(doc, "key", json_string(key));
    json_object_set_new(doc, "pass", json_true());
    json_object_set_new(doc, "failed_stage", json_null());
    json_object_set_new(doc, "reason", json_null());
    json_object_set_new(json_object_get(doc, "stages"), "profile",
                        json_pack("{s:b, s:{s:f}, s:f}", "ok", 1, "candidate", "median_ms", 0.25, "speedup", 3.0));
    char *text = json_dumps(doc, JSON_COMPACT);
    assert_int_equal(kl_store_put(store, "verdict", key, text, &err), KL_OK);
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, NULL, NULL, &v, &err), KL_OK);
    assert_true(v->replayed);
    assert_true(v->pass);
    assert_string_equal(v->key, key);
    assert_true(v->median_ms == json_real_value(json_object_get(json_object_get(json_object_get(json_object_get(doc, "stages"), "profile"), "candidate"), "median_ms")));
    kl_verdict_free(v);

    /* the same candidate under another shape list (a changed task.json) is another key */
    assert_int_equal(kl_file_write(tj, "{ }", 3, &err), KL_OK);
    assert_int_equal(kl_gate_judge(g, &f.t, &cand, NULL, NULL, &v, &err), KL_ERR_UNMEASURED);
    assert_string_not_equal(v->key, key);
    kl_verdict_free(v);

    json_decref(doc);
    free(text);
    kl_gate_close(g);
    kl_store_close(store);
    free(tj), free(rc), free(cu);
    remove_tree(dir);
}


/* ---- verdicts from worker ends ------------------------------------------------------------ */

typedef struct run_fixture {
    char *dir;
    fake_task f;
    kl_gate *gate;
    kl_gate_source cand;
    char *cand_path;
} run_fixture;

static const double copy_ceiling_gbs = 1000.0;

static void run_fixture_init(run_fixture *r)
{
    kl_error err = {0};
    assert_int_equal(kl_tempdir("run", &r->dir, &err), KL_OK);
    char *tj = kl_path_join(r->dir, "task.json"), *rc = kl_path_join(r->dir, "reference.c");
    r->cand_path = kl_path_join(r->dir, "c.cu");
    assert_int_equal(kl_file_write(tj, "{}", 2, &err), KL_OK);
    assert_int_equal(kl_file_write(rc, "/* ref */", 9, &err), KL_OK);
    assert_int_equal(kl_file_write(r->cand_path, "// candidate\n", 13, &err), KL_OK);
    free(tj);
    free(rc);
    fake_task_init(&r->f, r->dir);
    fake_arg(&r->f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    fake_arg(&r->f, "y", KL_DTYPE_F32, KL_ROLE_OUT);
    fake_arg(&r->f, "n", KL_DTYPE_NONE, KL_ROLE_IN);
    r->f.t.cost_bytes = "8*n";
    r->cand = (kl_gate_source){r->cand_path, NULL};
    assert_int_equal(kl_gate_open(NULL, &r->gate, &err), KL_OK);
    r->gate->gpu = json_pack("{s:{s:s, s:s}, s:{s:f, s:f, s:f}}", "device", "name", "Dev", "cc", "9.0", "ceilings",
                             "copy_gbs", copy_ceiling_gbs, "fma_tflops", 50.0, "tensor_tflops", 500.0);
    r->gate->gpu_key = kl_strdup("Dev");
    r->gate->nvcc_version = kl_strdup("13.0.88");
}

static void run_fixture_release(run_fixture *r)
{
    kl_gate_close(r->gate);
    free(r->cand_path);
    remove_tree(r->dir);
}

/* A worker end: exit code or signal or timeout, and its stdout. */
static kl_verdict *verdict_of(run_fixture *r, int exit_code, int sig, double timeout, const char *out, kl_status want)
{
    kl_child c;
    kl_child_init(&c);
    kl_strbuf_init(&c.out, 0);
    kl_strbuf_init(&c.err, 0);
    c.exit_code = sig ? 128 + sig : exit_code;
    c.term_signal = sig;
    c.timed_out = timeout > 0;
    c.timeout_s = timeout;
    kl_strbuf_adds(&c.out, out);
    kl_strbuf_adds(&c.err, "the worker's last words\n");
    kl_verdict *v = NULL;
    kl_error err = {0};
    kl_status st = kl_gate_verdict_of_run(r->gate, &r->f.t, &r->cand, NULL, &c, &v, &err);
    if (st != want) print_message("status %d: %s\n", st, err.message);
    assert_int_equal(st, want);
    kl_child_release(&c);
    return v;
}

#define OK_TRIAL "{\"shape\":\"check[0]\",\"seed\":11,\"ok\":true,\"outputs\":[{\"arg\":\"y\",\"ok\":true,\"rel_l2\":0,\"max_abs\":0,\"first_bad\":-1,\"nan\":0,\"inf\":0,\"unwritten\":0,\"count\":7}]}"
#define OK_SIMPLE "{\"ok\":true,\"detail\":\"fine\"}"

static char *result_json(const char *correct, const char *hygiene, double cand_ms, double base_ms, bool with_stream)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\"device\":{\"name\":\"Dev\",\"sms\":132},\"correct\":[%s],\"determinism\":%s,\"integrity\":%s,", correct,
                   OK_SIMPLE, OK_SIMPLE);
    if (with_stream) kl_strbuf_addf(&sb, "\"stream\":%s,", OK_SIMPLE);
    kl_strbuf_addf(&sb, "\"profile\":{\"ok\":true,\"timer\":\"cupti\",\"shape\":\"bench\",\"reps\":40,"
                        "\"candidate\":{\"median_ms\":%.17g,\"q1_ms\":%.17g,\"q3_ms\":%.17g},"
                        "\"baseline\":{\"median_ms\":%.17g,\"q1_ms\":%.17g,\"q3_ms\":%.17g}},"
                        "\"hygiene\":%s,\"error\":null}",
                   cand_ms, cand_ms, cand_ms, base_ms, base_ms, base_ms, hygiene);
    return kl_strbuf_detach(&sb, NULL);
}

static const kl_verdict_stage *stage_of(const kl_verdict *v, const char *name)
{
    for (unsigned i = 0; i < v->nstages; i++)
        if (!strcmp(v->stages[i].name, name)) return &v->stages[i];
    fail_msg("no stage %s", name);
    return NULL;
}

static void verdicts_from_worker_ends(void **state)
{
    (void)state;
    run_fixture r;
    run_fixture_init(&r);
    const double cand_ms = 0.5, base_ms = 2.0;

    /* a clean run passes, with the figures computed from the task's cost */
    char *res = result_json(OK_TRIAL, OK_SIMPLE, cand_ms, base_ms, true);
    kl_verdict *v = verdict_of(&r, 0, 0, 0, res, KL_OK);
    assert_true(v->pass);
    assert_null(v->failed_stage);
    assert_true(v->speedup == base_ms / cand_ms);
    double bytes = 8.0 * (double)r.f.bench_values[0];
    assert_true(fabs(v->gbps - bytes / (cand_ms * 1e-3) / 1e9) < 1e-9 * v->gbps);
    assert_int_equal(stage_of(v, "sanitize")->state, KL_STAGE_SKIPPED);
    assert_int_equal(stage_of(v, "profile")->state, KL_STAGE_PASSED);
    json_t *frac = json_object_get(json_object_get(json_object_get(kl_verdict_document(v), "stages"), "profile"), "fraction");
    assert_true(fabs(json_number_value(json_object_get(frac, "bandwidth")) - v->gbps / copy_ceiling_gbs) < 1e-12);
    kl_verdict_free(v);
    free(res);

    /* wrong output: rejected at correct, naming the shape, its sizes, the seed and the counts */
    res = result_json("{\"shape\":\"check[0]\",\"seed\":11,\"ok\":false,\"outputs\":[{\"arg\":\"y\",\"ok\":false,\"rel_l2\":0.5,"
                      "\"max_abs\":1,\"first_bad\":4,\"nan\":0,\"inf\":0,\"unwritten\":3,\"count\":7,\"detail\":\"3 unwritten\"}]}",
                      OK_SIMPLE, cand_ms, base_ms, true);
    v = verdict_of(&r, 0, 0, 0, res, KL_OK);
    assert_false(v->pass);
    assert_string_equal(v->failed_stage, "correct");
    char want[128];
    kl_snprintf(want, sizeof want, "wrong at check[0] (n=%lld), seed 11: y:", (long long)r.f.check_values[0]);
    assert_non_null(strstr(v->reason, want));
    assert_non_null(strstr(v->reason, "first bad index 4"));
    assert_non_null(strstr(v->reason, "3 unwritten of 7"));
    kl_verdict_free(v);
    free(res);

    /* a hang: the first stage is charged, the limit named */
    v = verdict_of(&r, 0, 9, 20, "", KL_OK);
    assert_string_equal(v->failed_stage, "correct");
    assert_non_null(strstr(v->reason, "timed out after 20 s"));
    assert_int_equal(stage_of(v, "profile")->state, KL_STAGE_SKIPPED);
    kl_verdict_free(v);

    /* a crash */
    v = verdict_of(&r, 0, 11, 0, "", KL_OK);
    assert_string_equal(v->failed_stage, "correct");
    assert_non_null(strstr(v->reason, "killed by SIGSEGV"));
    assert_non_null(strstr(v->reason, "the worker's last words"));
    kl_verdict_free(v);

    /* a sticky CUDA error in determinism, after correct passed */
    v = verdict_of(&r, KL_WORKER_EXIT_CUDA, 0, 0,
                   "{\"correct\":[" OK_TRIAL "],\"error\":{\"stage\":\"determinism\",\"cuda\":\"cudaErrorIllegalAddress\","
                   "\"detail\":\"an illegal memory access was encountered\",\"sticky\":true}}",
                   KL_OK);
    assert_string_equal(v->failed_stage, "determinism");
    assert_non_null(strstr(v->reason, "CUDA error: cudaErrorIllegalAddress (sticky"));
    assert_int_equal(stage_of(v, "correct")->state, KL_STAGE_PASSED);
    kl_verdict_free(v);

    /* threads started: integrity fails with the worker's words */
    res = result_json(OK_TRIAL, "{\"ok\":false,\"detail\":\"the candidate started 1 thread while running\"}", cand_ms,
                      base_ms, true);
    v = verdict_of(&r, 0, 0, 0, res, KL_OK);
    assert_string_equal(v->failed_stage, "integrity");
    assert_non_null(strstr(v->reason, "started 1 thread"));
    kl_verdict_free(v);
    free(res);

    /* faster than the copy ceiling allows */
    double too_fast_ms = bytes / (2.0 * copy_ceiling_gbs * 1e9) * 1e3;
    res = result_json(OK_TRIAL, OK_SIMPLE, too_fast_ms, base_ms, true);
    v = verdict_of(&r, 0, 0, 0, res, KL_OK);
    assert_string_equal(v->failed_stage, "profile");
    assert_non_null(strstr(v->reason, "faster than the device allows"));
    kl_verdict_free(v);
    free(res);

    /* a stage asked for and not reported */
    res = result_json(OK_TRIAL, OK_SIMPLE, cand_ms, base_ms, false);
    v = verdict_of(&r, 0, 0, 0, res, KL_OK);
    assert_string_equal(v->failed_stage, "stream");
    assert_non_null(strstr(v->reason, "did not report"));
    kl_verdict_free(v);
    free(res);

    /* stdout that is not JSON (a kernel that prints) */
    v = verdict_of(&r, 0, 0, 0, "hello from launch()\n", KL_OK);
    assert_string_equal(v->failed_stage, "correct");
    assert_non_null(strstr(v->reason, "not JSON"));
    kl_verdict_free(v);

    /* not the candidate's doing: no verdict */
    assert_null(verdict_of(&r, KL_WORKER_EXIT_JOB, 0, 0, "{\"error\":{\"stage\":\"init\",\"detail\":\"job: bad\"}}", KL_ERR_CHILD));
    assert_null(verdict_of(&r, KL_WORKER_EXIT_HARNESS, 0, 0, "{\"error\":{\"stage\":\"init\",\"detail\":\"x\"}}", KL_ERR_CHILD));
    assert_null(verdict_of(&r, KL_WORKER_EXIT_NO_GPU, 0, 0, "{\"error\":{\"stage\":\"init\",\"detail\":\"x\"}}", KL_ERR_NO_GPU));
    /* the same exit code with no result: a candidate that called exit(4) is judged, not taken for
     * the harness */
    v = verdict_of(&r, KL_WORKER_EXIT_HARNESS, 0, 0, "", KL_OK);
    assert_non_null(v);
    assert_false(v->pass);
    assert_string_equal(v->failed_stage, "correct");
    assert_non_null(strstr(v->reason, "exit 4"));
    kl_verdict_free(v);
    run_fixture_release(&r);
}

static void live_without_a_gpu_says_so(void **state)
{
    (void)state;
    if (kl_gate_gpu_available()) {
        print_message("this machine has a GPU: the no-GPU path is not tested here\n");
        skip();
        return;
    }
    fake_task f;
    fake_task_init(&f, "/nonexistent");
    fake_arg(&f, "x", KL_DTYPE_F32, KL_ROLE_IN);
    kl_gate *g = NULL;
    kl_error err = {0};
    assert_int_equal(kl_gate_open(NULL, &g, &err), KL_OK);
    char *json = NULL;
    assert_int_equal(kl_gate_gpu_info(g, false, &json, &err), KL_ERR_NO_GPU);
    assert_non_null(strstr(err.message, "no GPU"));
    assert_null(json);
    kl_gate_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shim_keeps_the_candidate_and_types_every_arg),
        cmocka_unit_test(shim_compiles_for_every_dtype),
        cmocka_unit_test(compile_many_runs_in_parallel_and_caches),
        cmocka_unit_test(compile_many_overlaps_its_children),
        cmocka_unit_test(compile_errors_name_the_candidates_line),
        cmocka_unit_test(nvcc_first_error_forms),
        cmocka_unit_test(ptxas_report_from_captured_sample),
        cmocka_unit_test(ptxas_report_from_nvcc_now),
        cmocka_unit_test(arch_specific_sources),
        cmocka_unit_test(compile_key_changes_with_every_part),
        cmocka_unit_test(verdict_key_changes_with_every_part),
        cmocka_unit_test(object_check_rejects_interposers_and_threads),
        cmocka_unit_test(child_reasons),
        cmocka_unit_test(cuda_reasons_say_sticky),
        cmocka_unit_test(sanitizer_counts),
        cmocka_unit_test(verdict_documents_read_back),
        cmocka_unit_test(replay_serves_recorded_verdicts_and_never_invents),
        cmocka_unit_test(verdicts_from_worker_ends),
        cmocka_unit_test(live_without_a_gpu_says_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
