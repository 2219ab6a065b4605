/*
 * The compile stage: a kernel file and a generated typed shim in one translation unit,
 * compiled by nvcc into a shared object; the ptxas report read back per kernel; errors
 * located in the candidate's own file and line; objects cached by content hash; several
 * compiles at once.
 */
#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/gate_int.h"

#define NVCC_LOG_MAX ((size_t)1 << 20)
#define MAX_FLAGS 16

/* ---- nvcc ------------------------------------------------------------------------------- */

static char *find_in_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) return NULL;
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n) {
            char *dir = kl_strndup(p, n);
            char *full = dir ? kl_path_join(dir, prog) : NULL;
            free(dir);
            if (full && access(full, X_OK) == 0 && kl_file_exists(full)) return full;
            free(full);
        }
        p += n;
        if (*p == ':') p++;
    }
    return NULL;
}

char *kl_nvcc_version_parse(const char *text)
{
    /* "Cuda compilation tools, release 13.0, V13.0.88" */
    const char *v = text ? strstr(text, ", V") : NULL;
    if (!v) return NULL;
    v += 3;
    size_t n = 0;
    while (isdigit((unsigned char)v[n]) || v[n] == '.') n++;
    return n ? kl_strndup(v, n) : NULL;
}

kl_status kl_gate_nvcc(kl_gate *gate, kl_error *err)
{
    if (gate->nvcc && gate->nvcc_version) return KL_OK;
    if (!gate->nvcc) {
        const char *e = getenv("KLINEAGE_NVCC");
        if (e && *e) gate->nvcc = kl_strdup(e);
        else if (!(gate->nvcc = find_in_path("nvcc")) && access("/usr/local/cuda/bin/nvcc", X_OK) == 0)
            gate->nvcc = kl_strdup("/usr/local/cuda/bin/nvcc");
        if (!gate->nvcc)
            return kl_error_set(err, KL_ERR_NOT_FOUND,
                                "nvcc not found: set $KLINEAGE_NVCC, put nvcc in PATH or install CUDA in /usr/local/cuda");
    }
    kl_child c;
    kl_child_init(&c);
    const char *argv[] = {gate->nvcc, "--version", NULL};
    c.argv = argv;
    c.timeout_s = 60;
    c.merge_stderr = true;
    c.out_max = 65536;
    kl_status st = kl_child_run(&c, err);
    if (st != KL_OK) {
        kl_child_release(&c);
        return kl_error_prefix(err, "nvcc (%s)", gate->nvcc);
    }
    if (c.exit_code != 0 || !(gate->nvcc_version = kl_nvcc_version_parse(kl_strbuf_str(&c.out)))) {
        char how[128];
        kl_child_describe(&c, how, sizeof how);
        st = kl_error_set(err, KL_ERR_CHILD, "%s --version: %s, expected a line \"release X.Y, VX.Y.Z\"; it printed: %.300s",
                          gate->nvcc, how, kl_strbuf_str(&c.out));
    }
    kl_child_release(&c);
    return st;
}

kl_status kl_gate_arch(kl_gate *gate, char **arch, kl_error *err)
{
    *arch = NULL;
    if (gate->arch) {
        *arch = kl_strdup(gate->arch);
        return *arch ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    json_t *dev = gate->gpu ? json_object_get(gate->gpu, "device") : NULL;
    const char *cc = json_string_value(json_object_get(dev, "cc"));
    int major = 0, minor = 0;
    if (!cc || sscanf(cc, "%d.%d", &major, &minor) != 2 || major <= 0 || minor < 0)
        return kl_error_set(err, KL_ERR_INVALID,
                            "the device document gives no compute capability (device.cc \"X.Y\"); pass --arch sm_XY");
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "sm_%d%d", major, minor);
    *arch = kl_strbuf_detach(&sb, NULL);
    return *arch ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

unsigned kl_nvcc_flags(const char *arch, char *arch_buf, size_t size, const char **flags, unsigned max)
{
    static const char *const fixed[] = {"-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden", "-cudart", "shared",
                                        "-Xptxas", "-v", "-lineinfo", "-O3"};
    unsigned n = 0;
    for (unsigned i = 0; i < sizeof fixed / sizeof fixed[0] && n < max; i++) flags[n++] = fixed[i];
    size_t len = strlen(arch);
    if (len > 3 && arch[len - 1] == 'a')
        /* nvcc 13.0's -arch=sm_90a also runs a plain sm_90 pass, which rejects wgmma */
        kl_snprintf(arch_buf, size, "-gencode=arch=compute_%.*s,code=%s", (int)(len - 3), arch + 3, arch);
    else
        kl_snprintf(arch_buf, size, "-arch=%s", arch);
    if (n < max) flags[n++] = arch_buf;
    return n;
}

/* Inline PTX only an arch-specific target assembles, as it appears in an asm string. */
static const char *const arch_specific_ptx[] = {"wgmma.", "setmaxnreg.", NULL};

bool kl_source_arch_specific(const char *text)
{
    for (const char *p = text; p && *p; p++) {
        if (p[0] == '/' && p[1] == '/') {
            p = strchr(p, '\n');
            if (!p) break;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            if (!e) break;
            p = e + 1;
            continue;
        }
        for (unsigned i = 0; arch_specific_ptx[i]; i++)
            if (!strncmp(p, arch_specific_ptx[i], strlen(arch_specific_ptx[i]))) return true;
    }
    return false;
}

char *kl_source_arch(const char *arch, const char *text)
{
    size_t len = strlen(arch);
    int cc = 0;
    bool plain = len > 3 && arch[len - 1] != 'a' && sscanf(arch, "sm_%d", &cc) == 1 && cc >= 90;
    if (!plain || !kl_source_arch_specific(text)) return kl_strdup(arch);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%sa", arch);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the shim --------------------------------------------------------------------------- */

static bool arg_ctype(const kl_arg *a, kl_strbuf *sb)
{
    if (a->dtype == KL_DTYPE_NONE) {
        kl_strbuf_adds(sb, "int");
        return true;
    }
    const char *ct = kl_dtype_ctype(a->dtype);
    if (!ct || !*ct || !strcmp(ct, "?")) return false;
    kl_strbuf_addf(sb, "%s%s *", a->role == KL_ROLE_IN ? "const " : "", ct);
    return true;
}

char *kl_shim_launch_decl(const kl_task *task)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "extern \"C\" void launch(");
    for (unsigned i = 0; i < task->nargs; i++) {
        if (!arg_ctype(&task->args[i], &sb)) {
            kl_strbuf_release(&sb);
            return NULL;
        }
        if (task->args[i].dtype == KL_DTYPE_NONE) kl_strbuf_addc(&sb, ' ');
        kl_strbuf_addf(&sb, "%s, ", task->args[i].name);
    }
    kl_strbuf_adds(&sb, "cudaStream_t stream)");
    return sb.failed ? (kl_strbuf_release(&sb), NULL) : kl_strbuf_detach(&sb, NULL);
}

static void add_c_string(kl_strbuf *sb, const char *s)
{
    kl_strbuf_addc(sb, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') kl_strbuf_addc(sb, '\\');
        if (*s == '\n') kl_strbuf_adds(sb, "\\n");
        else kl_strbuf_addc(sb, *s);
    }
    kl_strbuf_addc(sb, '"');
}

kl_status kl_shim_source(const kl_task *task, const char *name, const char *text, char **out, kl_error *err)
{
    *out = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "/* klineage: kernel file + typed shim (%s) for task %s */\n", KL_SHIM_ABI,
                   task->name ? task->name : "?");
    kl_strbuf_adds(&sb, "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n");
    kl_strbuf_adds(&sb, "#line 1 ");
    add_c_string(&sb, name);
    kl_strbuf_addc(&sb, '\n');
    kl_strbuf_adds(&sb, text);
    if (!*text || text[strlen(text) - 1] != '\n') kl_strbuf_addc(&sb, '\n');
    kl_strbuf_adds(&sb, "#line 1 \"<klineage shim>\"\n");
    kl_strbuf_adds(&sb, "extern \"C\" __attribute__((visibility(\"default\"))) int kl_shim_launch(void *const *args, "
                        "cudaStream_t stream)\n{\n    launch(");
    for (unsigned i = 0; i < task->nargs; i++) {
        const kl_arg *a = &task->args[i];
        if (a->dtype == KL_DTYPE_NONE) {
            kl_strbuf_addf(&sb, "*(const int *)args[%u], ", i);
            continue;
        }
        kl_strbuf_addc(&sb, '(');
        if (!arg_ctype(a, &sb)) {
            kl_strbuf_release(&sb);
            return kl_error_set(err, KL_ERR_INVALID, "task %s: argument %u (%s) has no C type for the shim",
                                task->name ? task->name : "?", i, a->name ? a->name : "?");
        }
        kl_strbuf_addf(&sb, ")args[%u], ", i);
    }
    kl_strbuf_adds(&sb, "stream);\n    return (int)cudaPeekAtLastError();\n}\n");
    kl_strbuf_addf(&sb,
                   "extern \"C\" __attribute__((visibility(\"default\"))) const char *kl_shim_abi(void) { return \"%s\"; }\n",
                   KL_SHIM_ABI);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    *out = kl_strbuf_detach(&sb, NULL);
    return KL_OK;
}

void kl_compile_key(const char *shim_source, const char *const *flags, unsigned nflags, const char *nvcc_version,
                    char hex[KL_HASH_HEX])
{
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, "klineage-object-1");
    kl_hasher_parts(h, shim_source);
    for (unsigned i = 0; i < nflags; i++) kl_hasher_parts(h, flags[i]);
    kl_hasher_parts(h, nvcc_version);
    kl_hasher_finish(h, hex);
}

/* ---- the ptxas report ------------------------------------------------------------------- */

void kl_kernel_reports_free(kl_kernel_report *k, unsigned n)
{
    if (!k) return;
    for (unsigned i = 0; i < n; i++) {
        free(k[i].name);
        free(k[i].demangled);
    }
    free(k);
}

static int number_before(const char *line, const char *what)
{
    /* the integer just before `what` in line ("1024 bytes smem" → 1024); -1 when absent */
    const char *p = strstr(line, what);
    if (!p) return -1;
    while (p > line && p[-1] == ' ') p--;
    const char *end = p;
    while (p > line && isdigit((unsigned char)p[-1])) p--;
    if (p == end) return -1;
    return atoi(p);
}

kl_status kl_ptxas_parse(const char *log, kl_kernel_report **out, unsigned *n, kl_error *err)
{
    *out = NULL;
    *n = 0;
    kl_kernel_report *k = NULL;
    unsigned nk = 0, cap = 0;
    int current = -1, props = -1;
    const char *p = log ? log : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *line = kl_strndup(p, len);
        if (!line) goto nomem;
        const char *q;
        if ((q = strstr(line, "Compiling entry function '")) != NULL) {
            q += strlen("Compiling entry function '");
            const char *e = strchr(q, '\'');
            if (e) {
                if (nk == cap) {
                    unsigned nc = cap ? cap * 2 : 8;
                    kl_kernel_report *nkp = realloc(k, nc * sizeof *k);
                    if (!nkp) {
                        free(line);
                        goto nomem;
                    }
                    k = nkp;
                    cap = nc;
                }
                memset(&k[nk], 0, sizeof k[nk]);
                k[nk].name = kl_strndup(q, (size_t)(e - q));
                k[nk].demangled = kl_strndup(q, (size_t)(e - q));
                if (!k[nk].name || !k[nk].demangled) {
                    free(k[nk].name);
                    free(k[nk].demangled);
                    free(line);
                    goto nomem;
                }
                current = (int)nk++;
                props = -1;
            }
        } else if ((q = strstr(line, "Function properties for ")) != NULL) {
            q += strlen("Function properties for ");
            props = -1;
            for (unsigned i = 0; i < nk; i++)
                if (!strcmp(k[i].name, q)) props = (int)i;
        } else if (strstr(line, "bytes stack frame")) {
            if (props >= 0) {
                k[props].stack = number_before(line, " bytes stack frame");
                int s = number_before(line, " bytes spill stores"), l = number_before(line, " bytes spill loads");
                k[props].spill_stores = s > 0 ? s : 0;
                k[props].spill_loads = l > 0 ? l : 0;
                if (k[props].stack < 0) k[props].stack = 0;
            }
        } else if (strstr(line, "Used ") && strstr(line, " registers")) {
            if (current >= 0) {
                int r = number_before(line, " registers");
                int b = number_before(line, " barriers");
                int s = number_before(line, " bytes smem");
                k[current].registers = r > 0 ? r : 0;
                k[current].barriers = b > 0 ? b : 0;
                k[current].smem_static = s > 0 ? s : 0;
            }
        }
        free(line);
        p += len;
        if (*p == '\n') p++;
    }
    *out = k;
    *n = nk;
    return KL_OK;
nomem:
    kl_kernel_reports_free(k, nk);
    return kl_error_set(err, KL_ERR_NOMEM, "out of memory reading the ptxas report");
}

void kl_kernel_reports_demangle(kl_kernel_report *k, unsigned n)
{
    if (!n) return;
    char *filt = find_in_path("c++filt");
    if (!filt) return;
    const char **argv = calloc(n + 2, sizeof *argv);
    if (!argv) {
        free(filt);
        return;
    }
    argv[0] = filt;
    for (unsigned i = 0; i < n; i++) argv[i + 1] = k[i].name;
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.timeout_s = 10;
    c.out_max = 1 << 20;
    if (kl_child_run(&c, NULL) == KL_OK && c.exit_code == 0 && !c.out.truncated) {
        const char *p = kl_strbuf_str(&c.out);
        for (unsigned i = 0; i < n && *p; i++) {
            const char *eol = strchr(p, '\n');
            size_t len = eol ? (size_t)(eol - p) : strlen(p);
            char *d = kl_strndup(p, len);
            if (d) {
                free(k[i].demangled);
                k[i].demangled = d;
            }
            p += len;
            if (*p == '\n') p++;
        }
    }
    kl_child_release(&c);
    free(argv);
    free(filt);
}

/* ---- nvcc's diagnostics ----------------------------------------------------------------- */

static bool parse_error_line(const char *line, char **file, unsigned *lineno, char **msg)
{
    const char *m;
    /* FILE(LINE): error: MSG   or   FILE(LINE): catastrophic error: MSG */
    if ((m = strstr(line, "): error")) || (m = strstr(line, "): catastrophic error"))) {
        const char *open = m;
        while (open > line && *open != '(') open--;
        if (*open == '(' && open > line) {
            *file = kl_strndup(line, (size_t)(open - line));
            *lineno = (unsigned)strtoul(open + 1, NULL, 10);
        }
        const char *colon = strchr(m + 2, ':');
        *msg = kl_strdup(colon ? colon + 1 + (colon[1] == ' ') : m + 3);
        return true;
    }
    /* FILE:LINE[:COL]: error: MSG  (the host compiler) */
    if ((m = strstr(line, ": error:")) || (m = strstr(line, ": fatal error:"))) {
        const char *colon = strchr(line, ':');
        if (colon && colon < m && isdigit((unsigned char)colon[1])) {
            *file = kl_strndup(line, (size_t)(colon - line));
            *lineno = (unsigned)strtoul(colon + 1, NULL, 10);
        }
        const char *txt = strstr(m + 1, "error:");
        *msg = kl_strdup(txt + 6 + (txt[6] == ' '));
        return true;
    }
    /* nvcc fatal   : MSG, ptxas fatal   : MSG, ptxas error   : MSG */
    if ((kl_str_starts(line, "nvcc fatal") || kl_str_starts(line, "ptxas fatal") || kl_str_starts(line, "ptxas error") ||
         kl_str_starts(line, "nvlink error") || kl_str_starts(line, "nvlink fatal")) &&
        (m = strchr(line, ':')) != NULL) {
        *msg = kl_strdup(line);
        return true;
    }
    return false;
}

bool kl_nvcc_first_error(const char *log, char **file, unsigned *line, char **msg)
{
    *file = NULL;
    *msg = NULL;
    *line = 0;
    const char *p = log ? log : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *l = kl_strndup(p, len);
        if (!l) return false;
        bool found = parse_error_line(l, file, line, msg);
        free(l);
        if (found) return true;
        p += len;
        if (*p == '\n') p++;
    }
    return false;
}

/* ---- the object's symbols ---------------------------------------------------------------- */

static bool import_banned(const char *name)
{
    static const char *const banned[] = {
        "pthread_create", "thrd_create", "clone", "clone3", "fork", "vfork", "system", "popen", "posix_spawn",
        "posix_spawnp", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "dlopen",
        "dlmopen", "dlsym", "dlvsym", "syscall", "cudaDeviceReset", "cuCtxDestroy", "cuDevicePrimaryCtxReset",
        "cudaProfilerStop", "cuptiActivityDisable", "cuptiUnsubscribe"};
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
        if (!strcmp(name, banned[i])) return true;
    /* std::thread, std::jthread, std::async */
    return strstr(name, "St6thread") || strstr(name, "St7jthread") || strstr(name, "St5async");
}

static bool export_allowed(const char *name)
{
    static const char *const ok[] = {"kl_shim_launch", "kl_shim_abi", "_init", "_fini", "_edata", "_end", "__bss_start"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(name, ok[i])) return true;
    return false;
}

kl_status kl_object_check(const char *so_path, kl_error *err)
{
    char *data = NULL;
    size_t len = 0;
    kl_status st = kl_file_read(so_path, (size_t)1 << 30, &data, &len, err);
    if (st != KL_OK) return st;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)data;
    if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > len ||
        (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > len - eh->e_shoff) {
        st = kl_error_set(err, KL_ERR_PARSE, "%s: not a 64-bit ELF shared object", so_path);
        goto cleanup;
    }
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(data + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM) continue;
        if (sh[i].sh_link >= eh->e_shnum || sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
            sh[sh[i].sh_link].sh_offset > len || sh[sh[i].sh_link].sh_size > len - sh[sh[i].sh_link].sh_offset) {
            st = kl_error_set(err, KL_ERR_PARSE, "%s: malformed dynamic symbol table", so_path);
            goto cleanup;
        }
        const Elf64_Sym *sym = (const Elf64_Sym *)(data + sh[i].sh_offset);
        size_t nsym = sh[i].sh_size / sizeof(Elf64_Sym);
        const char *strtab = data + sh[sh[i].sh_link].sh_offset;
        size_t strsz = sh[sh[i].sh_link].sh_size;
        for (size_t s = 1; s < nsym; s++) {
            if (sym[s].st_name >= strsz || !memchr(strtab + sym[s].st_name, '\0', strsz - sym[s].st_name)) continue;
            const char *name = strtab + sym[s].st_name;
            unsigned bind = ELF64_ST_BIND(sym[s].st_info);
            if (sym[s].st_shndx == SHN_UNDEF) {
                if (*name && import_banned(name)) {
                    st = kl_error_set(err, KL_ERR_INVALID,
                                      "the kernel's shared object calls %s: a candidate may not start threads or "
                                      "processes, load code or reset the device",
                                      name);
                    goto cleanup;
                }
            } else if ((bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE) &&
                       ELF64_ST_VISIBILITY(sym[s].st_other) == STV_DEFAULT && !export_allowed(name)) {
                st = kl_error_set(err, KL_ERR_INVALID,
                                  "the kernel's shared object exports the symbol %s: a candidate may export only "
                                  "kl_shim_launch and kl_shim_abi (an exported symbol could interpose the harness)",
                                  name);
                goto cleanup;
            }
        }
    }
cleanup:
    free(data);
    return st;
}

/* ---- compiling -------------------------------------------------------------------------- */

void kl_compiled_free(kl_compiled *c)
{
    if (!c) return;
    free(c->object);
    free(c->hash);
    free(c->log);
    free(c->error);
    free(c->error_file);
    free(c->nvcc_version);
    free(c->arch);
    free(c->flags);
    kl_kernel_reports_free(c->kernels, c->nkernels);
    free(c);
}

static kl_status read_source(const kl_gate_source *src, char **text, kl_error *err)
{
    *text = NULL;
    if (!src || !src->name) return kl_error_set(err, KL_ERR_INVALID, "no kernel file given");
    if (src->text) {
        *text = kl_strdup(src->text);
        return *text ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    char *t = NULL;
    size_t len = 0;
    kl_status st = kl_file_read(src->name, (size_t)64 << 20, &t, &len, err);
    if (st != KL_OK) return st;
    if (memchr(t, '\0', len)) {
        free(t);
        return kl_error_set(err, KL_ERR_INVALID, "%s: holds NUL bytes, expected CUDA source text", src->name);
    }
    *text = t;
    return KL_OK;
}

/* The cached report beside an object: {"log", "seconds", "kernels"}. */
static kl_status load_cached(const char *json_path, kl_compiled *c)
{
    json_error_t je;
    json_t *doc = json_load_file(json_path, 0, &je);
    if (!doc) return KL_ERR_NOT_FOUND;
    c->log = kl_strdup(json_string_value(json_object_get(doc, "log")) ? json_string_value(json_object_get(doc, "log")) : "");
    json_t *ks = json_object_get(doc, "kernels");
    size_t n = json_array_size(ks);
    c->kernels = n ? calloc(n, sizeof *c->kernels) : NULL;
    if ((n && !c->kernels) || !c->log) {
        json_decref(doc);
        return KL_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *k = json_array_get(ks, i);
        kl_kernel_report *r = &c->kernels[c->nkernels++];
        const char *name = json_string_value(json_object_get(k, "name"));
        const char *dem = json_string_value(json_object_get(k, "demangled"));
        r->name = kl_strdup(name ? name : "");
        r->demangled = kl_strdup(dem ? dem : r->name ? r->name : "");
        r->registers = (int)json_integer_value(json_object_get(k, "registers"));
        r->smem_static = (int)json_integer_value(json_object_get(k, "smem_static"));
        r->spill_stores = (int)json_integer_value(json_object_get(k, "spill_stores"));
        r->spill_loads = (int)json_integer_value(json_object_get(k, "spill_loads"));
        r->stack = (int)json_integer_value(json_object_get(k, "stack"));
        r->barriers = (int)json_integer_value(json_object_get(k, "barriers"));
        if (!r->name || !r->demangled) {
            json_decref(doc);
            return KL_ERR_NOMEM;
        }
    }
    json_decref(doc);
    return KL_OK;
}

static kl_status save_report(const char *json_path, const kl_compiled *c, kl_error *err)
{
    json_t *doc = kl_compiled_json(c);
    json_object_set_new(doc, "log", json_string(c->log ? c->log : ""));
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st = kl_file_write(json_path, text, strlen(text), err);
    free(text);
    return st;
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The object nvcc made, inspected (kl_object_check): one that exports or imports what a
 * candidate may not is not compiled, whatever nvcc said — the same for `gate --compile-only`,
 * a walk's prepared proposals and a judgement. Errors only when out of memory. */
static kl_status object_verdict(kl_compiled *c, kl_error *err)
{
    kl_error oerr = {0};
    if (kl_object_check(c->object, &oerr) == KL_OK) return KL_OK;
    c->ok = false;
    free(c->error);
    c->error = kl_strdup(oerr.message);
    return c->error ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

static kl_status compile_one(kl_gate *gate, const kl_task *task, const kl_gate_source *src, const char *arch,
                             kl_compiled **out, kl_error *err)
{
    static unsigned long counter;
    kl_status st = KL_OK;
    char *text = NULL, *shim = NULL, *dir = NULL, *obj = NULL, *report = NULL, *cu = NULL, *tmp = NULL;
    char arch_flag[96];
    const char *flags[MAX_FLAGS];
    unsigned nflags = 0;
    char *src_arch = NULL;
    char hex[KL_HASH_HEX];
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_child child;
    kl_child_init(&child);
    kl_compiled *c = calloc(1, sizeof *c);
    if (!c) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");

    KL_TRY(read_source(src, &text, err));
    /* wgmma and setmaxnreg assemble only for the arch-specific target (sm_90 -> sm_90a) */
    src_arch = kl_source_arch(arch, text);
    if (!src_arch) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    arch = src_arch;
    nflags = kl_nvcc_flags(arch, arch_flag, sizeof arch_flag, flags, MAX_FLAGS);
    KL_TRY(kl_shim_source(task, src->name, text, &shim, err));
    kl_compile_key(shim, flags, nflags, gate->nvcc_version, hex);
    for (unsigned i = 0; i < nflags; i++) kl_strbuf_addf(&sb, "%s%s", i ? " " : "", flags[i]);
    c->flags = kl_strbuf_detach(&sb, NULL);
    c->hash = kl_strdup(hex);
    c->nvcc_version = kl_strdup(gate->nvcc_version);
    c->arch = kl_strdup(arch);
    dir = kl_path_join(gate->cache_dir, "gate/obj");
    if (!c->flags || !c->hash || !c->nvcc_version || !c->arch || !dir) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_mkdirs(dir, err));
    kl_strbuf_addf(&sb, "%s/%s.so", dir, hex);
    obj = kl_strbuf_detach(&sb, NULL);
    kl_strbuf_addf(&sb, "%s/%s.json", dir, hex);
    report = kl_strbuf_detach(&sb, NULL);
    if (!obj || !report) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (kl_file_exists(obj) && load_cached(report, c) == KL_OK) {
        c->ok = true;
        c->cached = true;
        c->object = obj;
        obj = NULL;
        st = object_verdict(c, err);
        goto cleanup;
    }
    unsigned long id = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    kl_strbuf_addf(&sb, "%s/%s.%ld.%lu.cu", dir, hex, (long)getpid(), id);
    cu = kl_strbuf_detach(&sb, NULL);
    kl_strbuf_addf(&sb, "%s/%s.%ld.%lu.so", dir, hex, (long)getpid(), id);
    tmp = kl_strbuf_detach(&sb, NULL);
    if (!cu || !tmp) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_file_write(cu, shim, strlen(shim), err));
    const char *argv[MAX_FLAGS + 8];
    unsigned na = 0;
    argv[na++] = gate->nvcc;
    for (unsigned i = 0; i < nflags; i++) argv[na++] = flags[i];
    argv[na++] = "-o";
    argv[na++] = tmp;
    argv[na++] = cu;
    argv[na] = NULL;
    child.argv = argv;
    child.timeout_s = gate->compile_timeout_s;
    child.merge_stderr = true;
    child.out_max = NVCC_LOG_MAX;
    KL_TRY(kl_child_run(&child, err));
    c->seconds = child.wall_s;
    c->log = kl_strdup(kl_strbuf_str(&child.out));
    if (!c->log) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (child.timed_out || child.term_signal) {
        char how[128];
        kl_child_describe(&child, how, sizeof how);
        st = kl_error_set(err, child.timed_out ? KL_ERR_TIMEOUT : KL_ERR_CHILD, "%s: nvcc %s", src->name, how);
        goto cleanup;
    }
    if (child.exit_code != 0 || !kl_file_exists(tmp)) {
        char *file = NULL, *msg = NULL;
        unsigned line = 0;
        kl_strbuf e = KL_STRBUF_INIT;
        if (kl_nvcc_first_error(c->log, &file, &line, &msg)) {
            if (file && !strcmp(file, "<klineage shim>")) {
                char *decl = kl_shim_launch_decl(task);
                kl_strbuf_addf(&e, "%s: launch() does not match the task's args (expected %s): %s", src->name,
                               decl ? decl : "?", msg ? msg : "");
                free(decl);
            } else if (file && line) {
                kl_strbuf_addf(&e, "%s:%u: error: %s", file, line, msg ? msg : "");
            } else {
                kl_strbuf_addf(&e, "%s: %s", src->name, msg ? msg : "");
            }
            c->error_file = file;
            c->error_line = line;
            file = NULL;
        } else {
            kl_strbuf_addf(&e, "%s: nvcc exit %d", src->name, child.exit_code);
        }
        free(file);
        free(msg);
        c->error = kl_strbuf_detach(&e, NULL);
        unlink(tmp);
        goto cleanup; /* KL_OK: nvcc ran and said no */
    }
    KL_TRY(kl_ptxas_parse(c->log, &c->kernels, &c->nkernels, err));
    kl_kernel_reports_demangle(c->kernels, c->nkernels);
    /* the same file twice in one batch: the two threads finish the same cache entry in turn */
    pthread_mutex_lock(&cache_lock);
    if (rename(tmp, obj) != 0) {
        st = kl_error_set(err, KL_ERR_IO, "%s: cannot move the object into the cache: %s", obj, strerror(errno));
        unlink(tmp);
    } else {
        st = save_report(report, c, err);
    }
    pthread_mutex_unlock(&cache_lock);
    if (st != KL_OK) goto cleanup;
    c->ok = true;
    c->object = obj;
    obj = NULL;
    st = object_verdict(c, err);
cleanup:
    if (cu) unlink(cu);
    kl_child_release(&child);
    kl_strbuf_release(&sb);
    free(src_arch);
    free(text);
    free(shim);
    free(dir);
    free(obj);
    free(report);
    free(cu);
    free(tmp);
    if (st != KL_OK) {
        kl_compiled_free(c);
        return st;
    }
    *out = c;
    return KL_OK;
}

kl_status kl_gate_compile(kl_gate *gate, const kl_task *task, const kl_gate_source *src, kl_compiled **out,
                          kl_error *err)
{
    return kl_gate_compile_many(gate, task, 1, src, out, err);
}

typedef struct compile_pool {
    kl_gate *gate;
    const kl_task *task;
    const kl_gate_source *srcs;
    kl_compiled **outs;
    const char *arch;
    unsigned n;
    unsigned next;
    kl_status *status;
    kl_error *errs;
    pthread_mutex_t lock;
} compile_pool;

static void *compile_thread(void *arg)
{
    compile_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        unsigned i = p->next++;
        pthread_mutex_unlock(&p->lock);
        if (i >= p->n) return NULL;
        p->status[i] = compile_one(p->gate, p->task, &p->srcs[i], p->arch, &p->outs[i], &p->errs[i]);
    }
}

kl_status kl_gate_compile_many(kl_gate *gate, const kl_task *task, unsigned n, const kl_gate_source *srcs,
                               kl_compiled **outs, kl_error *err)
{
    for (unsigned i = 0; i < n; i++) outs[i] = NULL;
    if (!n) return KL_OK;
    char *arch = NULL;
    kl_status st = kl_gate_nvcc(gate, err);
    if (st != KL_OK) return st;
    if (!gate->arch && !gate->gpu && (st = kl_gate_device(gate, err)) != KL_OK) return st;
    if ((st = kl_gate_arch(gate, &arch, err)) != KL_OK) return st;
    compile_pool p = {gate, task, srcs, outs, arch, n, 0, calloc(n, sizeof(kl_status)), calloc(n, sizeof(kl_error)),
                      PTHREAD_MUTEX_INITIALIZER};
    unsigned nthreads = gate->jobs > 0 ? (unsigned)gate->jobs : 1;
    if (nthreads > n) nthreads = n;
    pthread_t *threads = calloc(nthreads, sizeof *threads);
    if (!p.status || !p.errs || !threads) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    unsigned started = 0;
    if (nthreads == 1) {
        compile_thread(&p);
    } else {
        for (; started < nthreads; started++)
            if (pthread_create(&threads[started], NULL, compile_thread, &p) != 0) break;
        if (!started) compile_thread(&p); /* no thread could start: do the work here */
        for (unsigned t = 0; t < started; t++) pthread_join(threads[t], NULL);
    }
    for (unsigned i = 0; i < n; i++) {
        if (p.status[i] != KL_OK) {
            st = p.status[i];
            if (err) *err = p.errs[i];
            break;
        }
    }
    if (st != KL_OK)
        for (unsigned i = 0; i < n; i++) {
            kl_compiled_free(outs[i]);
            outs[i] = NULL;
        }
cleanup:
    free(threads);
    free(p.status);
    free(p.errs);
    free(arch);
    return st;
}
