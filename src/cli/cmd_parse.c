/* klineage parse FILE.cu [FILE.cu…] [--json]: what a CUDA file holds (docs/cli/parse.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "klineage/syntax.h"

/* Print text on one line: newlines and runs of blanks become one space, at most max bytes. */
static void put_flat(FILE *f, const char *s, size_t max)
{
    if (!s) return;
    size_t n = 0;
    bool space = false;
    for (; *s && n < max; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = true;
            continue;
        }
        if (space && n) {
            fputc(' ', f);
            n++;
        }
        space = false;
        fputc(c < 0x20 ? '?' : (int)c, f);
        n++;
    }
    if (*s) fputs("…", f);
}

static const char *plural(unsigned n, const char *one, const char *many) { return n == 1 ? one : many; }

static void print_loops(FILE *f, const kl_model *m, unsigned fi)
{
    unsigned n, nloops, npragmas;
    const unsigned *ix = kl_model_items_of(m, KL_ITEMS_LOOPS, fi, &n);
    const kl_loop *loops = kl_model_loops(m, &nloops);
    const kl_pragma *pragmas = kl_model_pragmas(m, &npragmas);
    if (!n) return;
    fprintf(f, "  loops:\n");
    for (unsigned i = 0; i < n; i++) {
        const kl_loop *lp = &loops[ix[i]];
        fprintf(f, "    %*s%s %u:%u", (int)(2 * (lp->depth - 1)), "", kl_loop_kind_name(lp->kind), lp->span.line,
                lp->span.column);
        if (lp->kind == KL_LOOP_FOR) {
            fputs(" (", f);
            put_flat(f, lp->init.text, 60);
            fputs("; ", f);
            put_flat(f, lp->cond.text, 60);
            fputs("; ", f);
            put_flat(f, lp->step.text, 60);
            fputs(")", f);
        } else if (lp->kind == KL_LOOP_RANGE_FOR) {
            fputs(" (", f);
            put_flat(f, lp->init.text, 60);
            fputs(")", f);
        } else {
            fputs(" (", f);
            put_flat(f, lp->cond.text, 60);
            fputs(")", f);
        }
        fprintf(f, " depth %u", lp->depth);
        if (lp->grid_stride) fputs(", grid-stride", f);
        if (lp->in_lambda) fputs(", in a lambda", f);
        for (unsigned k = 0; k < lp->npragmas; k++) {
            fputs(", ", f);
            put_flat(f, pragmas[lp->pragma + (int)k].text.text, 60);
        }
        fputc('\n', f);
    }
}

static void print_shared(FILE *f, const kl_model *m, unsigned fi)
{
    unsigned n, nshared;
    const unsigned *ix = kl_model_items_of(m, KL_ITEMS_SHARED, fi, &n);
    const kl_shared_decl *sh = kl_model_shared(m, &nshared);
    if (!n) return;
    fprintf(f, "  shared:\n");
    for (unsigned i = 0; i < n; i++) {
        const kl_shared_decl *s = &sh[ix[i]];
        fprintf(f, "    %s%s %s", s->is_extern ? "extern " : "", s->elem_type, s->name);
        for (unsigned d = 0; d < s->ndims; d++) {
            fputc('[', f);
            put_flat(f, s->dims[d].text, 60);
            fputc(']', f);
        }
        fprintf(f, " %u:%u", s->span.line, s->span.column);
        if (s->is_extern) fputs(", dynamic (sized at launch)", f);
        if (s->align) fprintf(f, ", aligned %s", s->align);
        fputc('\n', f);
    }
}

/* Uses, grouped by kind and name in order of first appearance: "__syncthreads x2". */
static void print_uses(FILE *f, const kl_model *m, unsigned fi)
{
    unsigned n, nuses, nfn;
    const unsigned *ix = kl_model_items_of(m, KL_ITEMS_USES, fi, &n);
    const kl_use *uses = kl_model_uses(m, &nuses);
    const kl_function *fns = kl_model_functions(m, &nfn);
    if (!n) return;
    unsigned *count = calloc(n, sizeof *count);
    if (!count) return;
    for (unsigned i = 0; i < n; i++) {
        const kl_use *u = &uses[ix[i]];
        unsigned k = 0;
        while (k < i && !(count[k] && uses[ix[k]].kind == u->kind && !strcmp(uses[ix[k]].name, u->name))) k++;
        count[k]++;
    }
    fprintf(f, "  uses:");
    bool any = false;
    for (unsigned i = 0; i < n; i++) {
        if (!count[i]) continue;
        const kl_use *u = &uses[ix[i]];
        fprintf(f, "%s %s", any ? "," : "", u->name);
        any = true;
        if (u->kind == KL_USE_CALL && u->target >= 0) fprintf(f, " (%s)", kl_function_kind_name(fns[u->target].kind));
        else fprintf(f, " (%s)", kl_use_kind_name(u->kind));
        if (count[i] > 1) fprintf(f, " x%u", count[i]);
    }
    fputc('\n', f);
    free(count);
}

/* True flags and non-zero counts of the features object. */
static void print_features(FILE *f, const kl_model *m, unsigned fi)
{
    json_t *feat = kl_model_features(m, fi);
    if (!feat) return;
    fprintf(f, "  features:");
    const char *key;
    json_t *v;
    json_object_foreach(feat, key, v) {
        if (json_is_true(v)) fprintf(f, " %s", key);
        else if (json_is_integer(v) && json_integer_value(v) != 0) fprintf(f, " %s=%lld", key, (long long)json_integer_value(v));
    }
    fputc('\n', f);
    json_decref(feat);
}

static void print_summary(FILE *f, const kl_model *m)
{
    const kl_source *src = kl_model_source(m);
    unsigned nfn, nlaunch, nloops, nshared;
    const kl_function *fns = kl_model_functions(m, &nfn);
    const kl_launch *launches = kl_model_launches(m, &nlaunch);
    kl_model_loops(m, &nloops);
    kl_model_shared(m, &nshared);
    unsigned nk = 0, nd = 0, nh = 0;
    for (unsigned i = 0; i < nfn; i++) {
        if (fns[i].kind == KL_FUNCTION_KERNEL) nk++;
        else if (fns[i].kind == KL_FUNCTION_DEVICE) nd++;
        else nh++;
    }
    fprintf(f, "%s: %u %s, %u device %s, %u host %s, %u launch %s, %u %s, %u shared %s%s\n", kl_source_name(src), nk,
            plural(nk, "kernel", "kernels"), nd, plural(nd, "function", "functions"), nh,
            plural(nh, "function", "functions"), nlaunch, plural(nlaunch, "site", "sites"), nloops,
            plural(nloops, "loop", "loops"), nshared, plural(nshared, "declaration", "declarations"),
            kl_source_partial(src) ? " (partial: the file has syntax errors)" : "");
    for (unsigned i = 0; i < nfn; i++) {
        const kl_function *fn = &fns[i];
        fprintf(f, "%s %s %u:%u", fn->kind == KL_FUNCTION_KERNEL ? "kernel"
                                   : fn->kind == KL_FUNCTION_DEVICE ? "device function"
                                                                    : "host function",
                fn->name, fn->span.line, fn->span.column);
        if (fn->is_extern_c) fputs(" extern \"C\"", f);
        if (fn->is_host && fn->is_device) fputs(" __host__ __device__", f);
        if (fn->guard) fprintf(f, " #if %s", fn->guard);
        fputc('\n', f);
        if (fn->ntparams) {
            fputs("  template <", f);
            for (unsigned k = 0; k < fn->ntparams; k++)
                fprintf(f, "%s%s%s %s", k ? ", " : "", fn->tparams[k].kind, fn->tparams[k].is_pack ? "..." : "",
                        fn->tparams[k].name);
            fputs(">\n", f);
        }
        fputs("  params: ", f);
        if (!fn->nparams) fputs("(none)", f);
        for (unsigned k = 0; k < fn->nparams; k++) {
            const kl_param *p = &fn->params[k];
            size_t tl = strlen(p->type);
            bool glue = !*p->name || (tl && (p->type[tl - 1] == '*' || p->type[tl - 1] == '&'));
            fprintf(f, "%s%s%s%s", k ? ", " : "", p->type, glue ? "" : " ", p->name);
        }
        fputc('\n', f);
        if (fn->nlaunch_bounds) {
            fputs("  launch bounds: ", f);
            for (unsigned k = 0; k < fn->nlaunch_bounds; k++) {
                if (k) fputs(", ", f);
                put_flat(f, fn->launch_bounds[k].text, 60);
            }
            fputc('\n', f);
        }
        print_loops(f, m, i);
        print_shared(f, m, i);
        print_uses(f, m, i);
        unsigned n;
        const unsigned *ix = kl_model_items_of(m, KL_ITEMS_LAUNCHES, i, &n);
        if (n) fputs("  launches:\n", f);
        for (unsigned k = 0; k < n; k++) {
            const kl_launch *l = &launches[ix[k]];
            fprintf(f, "    %u:%u %s", l->span.line, l->span.column, l->kernel);
            if (l->ntemplate_args) {
                fputc('<', f);
                for (unsigned t = 0; t < l->ntemplate_args; t++) {
                    if (t) fputs(", ", f);
                    put_flat(f, l->template_args[t].text, 60);
                }
                fputc('>', f);
            }
            fputs("<<<", f);
            const kl_text *cfg[4] = {&l->grid, &l->block, &l->smem, &l->stream};
            for (unsigned c = 0; c < 4 && cfg[c]->text; c++) {
                if (c) fputs(", ", f);
                put_flat(f, cfg[c]->text, 60);
            }
            fputs(">>>(", f);
            for (unsigned a = 0; a < l->nargs; a++) {
                if (a) fputs(", ", f);
                put_flat(f, l->args[a].text, 60);
            }
            fputs(")", f);
            if (l->kernel_function < 0) fputs("  (kernel not defined in this file)", f);
            if (l->in_lambda) fputs("  (in a lambda)", f);
            fputc('\n', f);
        }
        if (fn->kind != KL_FUNCTION_HOST) print_features(f, m, i);
    }
    /* launch sites outside any function are impossible in C++; shared at file scope is not */
    unsigned nfile = 0;
    const kl_shared_decl *sh = kl_model_shared(m, &nshared);
    for (unsigned i = 0; i < nshared; i++)
        if (sh[i].function < 0) nfile++;
    if (nfile) {
        fputs("file scope:\n  shared:", f);
        for (unsigned i = 0; i < nshared; i++)
            if (sh[i].function < 0) fprintf(f, " %s%s %s (%u:%u)", sh[i].is_extern ? "extern " : "", sh[i].elem_type,
                                            sh[i].name, sh[i].span.line, sh[i].span.column);
        fputc('\n', f);
    }
}

/* Report a partial source's errors on stderr. */
static void report_errors(const kl_source *src)
{
    unsigned total = kl_source_error_count(src), shown = 0;
    kl_span where;
    char msg[256];
    for (unsigned i = 0; kl_source_error(src, i, &where, msg, sizeof msg); i++, shown++)
        cli_error("%s:%u:%u: %s", kl_source_name(src), where.line, where.column, msg);
    if (total > shown) cli_error("%s: %u more syntax errors", kl_source_name(src), total - shown);
}

KL_CMD(parse)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    int nfiles = 0;
    bool dashdash = false;
    for (int i = 1; i < argc; i++) {
        if (!dashdash && !strcmp(argv[i], "--")) {
            dashdash = true;
            continue;
        }
        if (!dashdash && !strcmp(argv[i], "--json")) {
            cli->json = true;
            continue;
        }
        if (!dashdash && argv[i][0] == '-' && argv[i][1] != '\0')
            return cli_usage_error(cli, "unknown option '%s' for 'parse'", argv[i]);
        nfiles++;
    }
    if (!nfiles) return cli_usage_error(cli, "'parse' needs at least one FILE.cu");

    int rc = KL_EXIT_OK;
    json_t *all = (cli->json && nfiles > 1) ? json_array() : NULL;
    if (cli->json && nfiles > 1 && !all) return cli_error("out of memory");
    dashdash = false;
    bool first = true;
    for (int i = 1; i < argc; i++) {
        if (!dashdash && !strcmp(argv[i], "--")) {
            dashdash = true;
            continue;
        }
        if (!dashdash && !strcmp(argv[i], "--json")) continue;
        const char *path = argv[i];
        kl_error err = {0};
        kl_source *src = NULL;
        kl_model *m = NULL;
        json_t *doc = NULL;
        kl_status st = kl_source_parse_file(path, &src, &err);
        if (st == KL_OK) st = kl_model_build(src, &m, &err);
        if (st != KL_OK) {
            cli_error("%s", err.message);
            rc = KL_EXIT_FAILED;
            if (cli->json) doc = json_pack("{s:s,s:s,s:s}", "file", path, "status", kl_strerror(st), "error", err.message);
        } else {
            if (kl_source_partial(src)) {
                report_errors(src);
                rc = KL_EXIT_FAILED;
            }
            if (cli->json) {
                doc = kl_model_json(m);
                if (!doc) {
                    cli_error("%s: out of memory writing JSON", path);
                    rc = KL_EXIT_FAILED;
                }
            } else {
                if (!first) fputc('\n', stdout);
                print_summary(stdout, m);
            }
        }
        first = false;
        if (doc) {
            if (all) {
                json_array_append_new(all, doc);
            } else {
                json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', stdout);
                json_decref(doc);
            }
        }
        kl_model_free(m);
        kl_source_free(src);
    }
    if (all) {
        json_dumpf(all, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(all);
    }
    if (fflush(stdout) != 0) return cli_error("cannot write to standard output");
    return rc;
}
