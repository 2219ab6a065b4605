/* Renderings of cards: Markdown for people, SKILL.md for coding agents, and the library as
 * one JSON array, one Markdown document or a folder of agent skills. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "skills/skills_int.h"

/* ---- Markdown pieces ------------------------------------------------------------------------ */

/* Text for a table cell: '|' escaped, line breaks as spaces. */
static void add_cell(kl_strbuf *sb, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') kl_strbuf_adds(sb, "\\|");
        else if (*s == '\n' || *s == '\r') kl_strbuf_addc(sb, ' ');
        else kl_strbuf_addc(sb, *s);
    }
}

/* Text on one line (line breaks as spaces). */
static void add_line(kl_strbuf *sb, const char *s)
{
    for (; *s; s++) kl_strbuf_addc(sb, (*s == '\n' || *s == '\r') ? ' ' : *s);
}

/* Text on one line, its first letter in upper case (an ASCII letter). */
static void add_sentence_start(kl_strbuf *sb, const char *s)
{
    if (*s >= 'a' && *s <= 'z') {
        kl_strbuf_addc(sb, (char)(*s - 'a' + 'A'));
        s++;
    }
    add_line(sb, s);
}

/* Inline code: a fence of backticks one longer than any run inside. */
static void add_code(kl_strbuf *sb, const char *s)
{
    size_t run = 0, longest = 0;
    for (const char *p = s; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        if (run > longest) longest = run;
    }
    for (size_t i = 0; i <= longest; i++) kl_strbuf_addc(sb, '`');
    if (longest || *s == '`') kl_strbuf_addc(sb, ' ');
    add_line(sb, s);
    if (longest || (*s && s[strlen(s) - 1] == '`')) kl_strbuf_addc(sb, ' ');
    for (size_t i = 0; i <= longest; i++) kl_strbuf_addc(sb, '`');
}

/* A fenced block of CUDA: the fence is longer than any run of backticks in the code. */
static void add_block(kl_strbuf *sb, const char *code)
{
    size_t run = 0, longest = 2;
    for (const char *p = code; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        if (run > longest) longest = run;
    }
    for (size_t i = 0; i <= longest; i++) kl_strbuf_addc(sb, '`');
    kl_strbuf_adds(sb, "cuda\n");
    kl_strbuf_adds(sb, code);
    if (*code && code[strlen(code) - 1] != '\n') kl_strbuf_addc(sb, '\n');
    for (size_t i = 0; i <= longest; i++) kl_strbuf_addc(sb, '`');
    kl_strbuf_addc(sb, '\n');
}

static void heading(kl_strbuf *sb, unsigned level, const char *text)
{
    for (unsigned i = 0; i < level; i++) kl_strbuf_addc(sb, '#');
    kl_strbuf_addc(sb, ' ');
    add_line(sb, text);
    kl_strbuf_adds(sb, "\n\n");
}

/* "width=4, dtype=f32" for an object of scalars; strings without quotes. */
static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* name=value, ..., in the keys' order (a card's objects keep the order of whatever wrote them
 * last — a walk, a merge, an import — and the rendering must not depend on it). */
static void add_params(kl_strbuf *sb, const json_t *o)
{
    size_t n = json_object_size(o), i = 0;
    const char **keys = n ? malloc(n * sizeof *keys) : NULL;
    if (n && !keys) {
        kl_strbuf_adds(sb, "?");
        return;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) keys[i++] = key;
    qsort(keys, n, sizeof *keys, cmp_key);
    for (i = 0; i < n; i++) {
        const char *k = keys[i];
        json_t *v = json_object_get(o, k);
        kl_strbuf_addf(sb, "%s%s=", i == 0 ? "" : ", ", k);
        if (json_is_string(v)) {
            kl_strbuf_adds(sb, json_string_value(v));
        } else {
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            kl_strbuf_adds(sb, t ? t : "?");
            free(t);
        }
    }
    free(keys);
}

static const char *plural(size_t n, const char *one, const char *many) { return n == 1 ? one : many; }

static bool is_probed(const json_t *pre) { return kl_str_starts(kl_sk_str(pre, "kind"), "probed"); }

static const char *kind_words(const char *kind)
{
    if (!strcmp(kind, "static")) return "static: a feature of the site it was learned at";
    if (!strcmp(kind, "probed")) return "probed for correctness";
    if (!strcmp(kind, "probed-perf")) return "probed for speed";
    return kind;
}

/* "probed on 9 shapes; no failure found" when no condition was probed (and none failed). */
static void probes_sentence(kl_strbuf *sb, const json_t *c)
{
    json_t *pr = json_object_get(c, "probes");
    if (!pr || json_integer_value(json_object_get(pr, "count")) == 0) {
        const char *why = kl_sk_str(pr, "note");
        if (kl_str_starts(why, "not probed: "))
            kl_strbuf_addf(sb, "Not probed: %s (a step within measurement noise is not worth the gate calls that "
                               "probing costs); no shape other than those it was learned on was tried.",
                           why + strlen("not probed: "));
        else
            kl_strbuf_adds(sb, "Not probed: no shape other than those it was learned on was tried.");
        return;
    }
    json_int_t n = json_integer_value(json_object_get(pr, "count"));
    json_int_t f = json_integer_value(json_object_get(pr, "failures"));
    if (f == 0) {
        kl_strbuf_addf(sb, "Probed on %lld %s; no failure found.", (long long)n, plural((size_t)n, "shape", "shapes"));
    } else {
        kl_strbuf_addf(sb, "Probed on %lld %s; %lld failed.", (long long)n, plural((size_t)n, "shape", "shapes"),
                       (long long)f);
    }
}

/* The evidence of a condition: the first EVIDENCE_SHOWN items, then how many more (the JSON
 * rendering keeps them all). */
#define EVIDENCE_SHOWN 4
static void add_evidence_items(kl_strbuf *sb, const json_t *pre, const char *indent)
{
    size_t i;
    json_t *e;
    const json_t *ev = json_object_get(pre, "evidence");
    json_array_foreach(ev, i, e) {
        if (i == EVIDENCE_SHOWN && json_array_size(ev) > EVIDENCE_SHOWN + 1) {
            kl_strbuf_addf(sb, "%s- … and %zu more\n", indent, json_array_size(ev) - EVIDENCE_SHOWN);
            break;
        }
        kl_strbuf_addf(sb, "%s- ", indent);
        add_line(sb, json_string_value(e));
        kl_strbuf_addc(sb, '\n');
    }
}

/* ---- sections, shared by the card and SKILL.md -------------------------------------------- */

/* The context of an effect or a risk in a few words: the sizes by role that decide where a
 * step pays ("rows 8192, contiguous 8192, reduced 8192, blocks 32, strided"). */
static void context_text(kl_strbuf *sb, const json_t *ctx)
{
    static const struct {
        const char *key, *word;
    } show[] = {{"independent_rows", "rows"}, {"contiguous_extent", "contiguous"}, {"reduced_extent", "reduced"},
                {"grid_blocks", "blocks"},    {"block_threads", "threads"}};
    bool first = true;
    for (unsigned i = 0; i < sizeof show / sizeof show[0]; i++) {
        json_t *v = json_object_get(ctx, show[i].key);
        if (!json_is_integer(v)) continue;
        kl_strbuf_addf(sb, "%s%s %lld", first ? "" : ", ", show[i].word, (long long)json_integer_value(v));
        first = false;
    }
    const char *acc = json_string_value(json_object_get(ctx, "access"));
    if (acc && strcmp(acc, "none") != 0) kl_strbuf_addf(sb, "%s%s", first ? "" : ", ", acc), first = false;
    if (json_is_false(json_object_get(ctx, "runs_at_shape"))) kl_strbuf_addf(sb, "%snot run at this shape", first ? "" : ", ");
    if (first) kl_strbuf_adds(sb, "–");
}

static void gains_table(kl_strbuf *sb, const json_t *c)
{
    json_t *eff = json_object_get(c, "effect");
    if (!json_array_size(eff)) {
        kl_strbuf_adds(sb, "Not measured.\n\n");
        return;
    }
    kl_strbuf_adds(sb, "| task | shape | speedup | context | before (ms) | after (ms) | device, date | verdict |\n"
                       "| --- | --- | ---: | --- | ---: | ---: | --- | --- |\n");
    size_t i;
    json_t *e;
    json_array_foreach(eff, i, e) {
        kl_strbuf_adds(sb, "| ");
        add_cell(sb, *kl_sk_str(e, "task") ? kl_sk_str(e, "task") : "?");
        kl_strbuf_adds(sb, " | ");
        kl_strbuf shape = KL_STRBUF_INIT;
        kl_sk_shape_text(&shape, json_object_get(e, "shape"));
        add_cell(sb, shape.len ? kl_strbuf_str(&shape) : "?");
        kl_strbuf_release(&shape);
        if (*kl_sk_str(e, "label")) {
            kl_strbuf_adds(sb, " (");
            add_cell(sb, kl_sk_str(e, "label"));
            kl_strbuf_adds(sb, ")");
        }
        kl_strbuf_addf(sb, " | %.2fx | ", kl_sk_num(e, "speedup", 0));
        kl_strbuf ctx = KL_STRBUF_INIT;
        context_text(&ctx, json_object_get(e, "context"));
        add_cell(sb, kl_strbuf_str(&ctx));
        kl_strbuf_release(&ctx);
        kl_strbuf_adds(sb, " | ");
        double b = kl_sk_num(e, "before_ms", -1), a = kl_sk_num(e, "after_ms", -1);
        if (b >= 0) kl_strbuf_addf(sb, "%.4f", b);
        else kl_strbuf_adds(sb, "–");
        kl_strbuf_adds(sb, " | ");
        if (a >= 0) kl_strbuf_addf(sb, "%.4f", a);
        else kl_strbuf_adds(sb, "–");
        kl_strbuf_adds(sb, " | ");
        add_cell(sb, *kl_sk_str(e, "device") ? kl_sk_str(e, "device") : "?");
        if (*kl_sk_str(e, "date")) {
            kl_strbuf_adds(sb, ", ");
            add_cell(sb, kl_sk_str(e, "date"));
        }
        char h[16];
        kl_sk_short_hash(kl_sk_str(e, "verdict"), h, sizeof h);
        if (*h) kl_strbuf_addf(sb, " | `%s` |\n", h);
        else kl_strbuf_adds(sb, " | – |\n");
    }
    kl_strbuf_adds(sb, "\nSpeedup is the simpler version's time over the optimized one's, measured in the same process: "
                       "`bench` at the task's bench shape, `path` at a shape that runs the code the step changed (the "
                       "bench shape does not), `probe` at a probe shape; `off-path` at the bench shape although it does not run that "
                       "code (a walk made before gains were measured where the code runs): such a gain says nothing of "
                       "the step.\n\n");
    /* each context's effect, kept: where it helped, where it hurt */
    unsigned helped = 0, hurt = 0;
    json_array_foreach(eff, i, e) {
        double g = kl_sk_num(e, "speedup", 0);
        if (g >= 1.05) helped++;
        if (g < 0.95) hurt++;
    }
    json_array_foreach(json_object_get(c, "risks"), i, e) if (!strcmp(kl_sk_str(e, "broke"), "slower") &&
                                                               kl_sk_num(e, "speedup", -1) < 0)
        hurt++;
    if (helped || hurt) {
        kl_strbuf_addf(sb, "It helped (1.05x or more) in %u of these contexts and hurt (below 0.95x) in %u.\n\n", helped,
                       hurt);
    }
}

static void risk_items(kl_strbuf *sb, const json_t *c, const char *indent)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(c, "risks"), i, r) {
        kl_strbuf_addf(sb, "%s- ", indent);
        kl_strbuf shape = KL_STRBUF_INIT;
        kl_sk_shape_text(&shape, json_object_get(r, "shape"));
        add_line(sb, shape.len ? kl_strbuf_str(&shape) : "at a shape not recorded");
        kl_strbuf_release(&shape);
        if (*kl_sk_str(r, "label")) kl_strbuf_addf(sb, " (%s)", kl_sk_str(r, "label"));
        if (*kl_sk_str(r, "task")) {
            kl_strbuf_adds(sb, " in ");
            add_line(sb, kl_sk_str(r, "task"));
        }
        kl_strbuf_addf(sb, ": **%s**", kl_sk_str(r, "broke"));
        if (json_is_object(json_object_get(r, "context"))) {
            kl_strbuf_adds(sb, " [");
            context_text(sb, json_object_get(r, "context"));
            kl_strbuf_adds(sb, "]");
        }
        if (*kl_sk_str(r, "detail")) {
            kl_strbuf_adds(sb, " — ");
            add_line(sb, kl_sk_str(r, "detail"));
        }
        char h[16];
        kl_sk_short_hash(kl_sk_str(r, "verdict"), h, sizeof h);
        if (*h) kl_strbuf_addf(sb, " (verdict `%s`)", h);
        kl_strbuf_addc(sb, '\n');
    }
}

/* A ", "-separated list of lineage keys, each SHA-256 key shortened to its first 8 hex digits
 * (as verdicts are): `f0bbf603`, `f767a90a`. */
static void add_lineages(kl_strbuf *sb, const char *list)
{
    for (const char *p = list; *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t)(e - p) : strlen(p), hex = 0;
        while (hex < len && isxdigit((unsigned char)p[hex])) hex++;
        if (len >= 16 && hex == len)
            kl_strbuf_addf(sb, "`%.8s`", p);
        else
            for (size_t i = 0; i < len; i++) kl_strbuf_addc(sb, (p[i] == '\n' || p[i] == '\r') ? ' ' : p[i]);
        if (!e) break;
        kl_strbuf_adds(sb, ", ");
        p = e + 2;
    }
}

static void contradiction_items(kl_strbuf *sb, const json_t *c)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(c, "contradictions"), i, x) {
        kl_strbuf_adds(sb, "- ");
        add_code(sb, kl_sk_str(x, "predicate"));
        kl_strbuf_adds(sb, " held in ");
        add_lineages(sb, *kl_sk_str(x, "held_in") ? kl_sk_str(x, "held_in") : "one lineage");
        kl_strbuf_adds(sb, " but was not found in ");
        add_lineages(sb, *kl_sk_str(x, "not_found_in") ? kl_sk_str(x, "not_found_in") : "another");
        kl_strbuf_adds(sb, ", so it is not a condition of this card.\n");
    }
}

static void before_after(kl_strbuf *sb, const json_t *anchor, const char *before_words, const char *after_words)
{
    if (*kl_sk_str(anchor, "before")) {
        kl_strbuf_addf(sb, "%s:\n\n", before_words);
        add_block(sb, kl_sk_str(anchor, "before"));
        kl_strbuf_addc(sb, '\n');
    }
    if (*kl_sk_str(anchor, "after")) {
        kl_strbuf_addf(sb, "%s:\n\n", after_words);
        add_block(sb, kl_sk_str(anchor, "after"));
        kl_strbuf_addc(sb, '\n');
    }
}

static void site_sentence(kl_strbuf *sb, const json_t *anchor)
{
    if (!anchor) {
        kl_strbuf_adds(sb, "The card records no site.\n\n");
        return;
    }
    if (*kl_sk_str(anchor, "kernel")) {
        kl_strbuf_adds(sb, "In kernel ");
        add_code(sb, kl_sk_str(anchor, "kernel"));
    } else {
        kl_strbuf_adds(sb, "In a kernel");
    }
    if (*kl_sk_str(anchor, "site")) {
        kl_strbuf_adds(sb, ", at ");
        add_code(sb, kl_sk_str(anchor, "site"));
    }
    kl_strbuf_adds(sb, ".");
    json_t *sf = json_object_get(json_object_get(anchor, "pattern"), "site_features");
    if (json_object_size(sf)) {
        kl_strbuf_adds(sb, " It finds sites like it by ");
        kl_strbuf params = KL_STRBUF_INIT;
        add_params(&params, sf);
        add_code(sb, kl_strbuf_str(&params));
        kl_strbuf_release(&params);
        kl_strbuf_adds(sb, ".");
    }
    json_t *fwd = json_object_get(anchor, "forward");
    if (json_is_object(fwd)) {
        if (json_is_true(json_object_get(fwd, "found")) && *kl_sk_str(fwd, "refused")) {
            kl_strbuf_adds(sb, " Forward, the rules find it at ");
            add_code(sb, kl_sk_str(fwd, "site"));
            kl_strbuf_adds(sb, " of the simpler version but do not apply it there (");
            add_line(sb, kl_sk_str(fwd, "refused"));
            kl_strbuf_adds(sb, "); its conditions are read there.");
        } else if (json_is_true(json_object_get(fwd, "found"))) {
            kl_strbuf_adds(sb, " Forward, the rules apply it at ");
            add_code(sb, kl_sk_str(fwd, "site"));
            kl_strbuf_adds(sb, " of the simpler version; its conditions are read there.");
        } else if (*kl_sk_str(fwd, "why")) {
            kl_strbuf_adds(sb, " Forward: ");
            add_line(sb, kl_sk_str(fwd, "why"));
            kl_strbuf_adds(sb, "; its conditions are read where the step edited ");
            add_code(sb, kl_sk_str(fwd, "site"));
            kl_strbuf_adds(sb, ".");
        }
    }
    kl_strbuf_adds(sb, "\n\n");
}

/* The lineage path: where the step stands in each lineage's forward order. */
static void path_items(kl_strbuf *sb, const json_t *c)
{
    const json_t *path = json_object_get(c, "path");
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(path, "lineages"), i, l) {
        kl_strbuf_addf(sb, "- step %lld of %lld in ", (long long)json_integer_value(json_object_get(l, "step")),
                       (long long)json_integer_value(json_object_get(l, "of")));
        add_line(sb, *kl_sk_str(l, "task") ? kl_sk_str(l, "task") : "a lineage");
        kl_strbuf_adds(sb, " (");
        add_lineages(sb, kl_sk_str(l, "lineage"));
        kl_strbuf_adds(sb, ")");
        json_t *before = json_object_get(l, "before"), *after = json_object_get(l, "after");
        size_t nb = json_array_size(before), na = json_array_size(after);
        if (nb) {
            kl_strbuf_adds(sb, ": after ");
            add_code(sb, json_string_value(json_array_get(before, nb - 1)));
            if (nb > 1) kl_strbuf_addf(sb, " (%zu before it)", nb - 1);
        } else {
            kl_strbuf_adds(sb, ": first from the root");
        }
        if (na) {
            kl_strbuf_adds(sb, "; then ");
            add_code(sb, json_string_value(json_array_get(after, 0)));
            if (na > 1) kl_strbuf_addf(sb, " (%zu after it)", na - 1);
        } else {
            kl_strbuf_adds(sb, "; the last before the expert");
        }
        kl_strbuf_adds(sb, "\n");
    }
}

/* The admission: its status and trials. */
static void admission_text(kl_strbuf *sb, const json_t *c)
{
    const json_t *a = json_object_get(c, "admission");
    if (!json_is_object(a)) {
        kl_strbuf_adds(sb, "Not tried yet (`klineage skills admit` applies it forward, from the card alone).\n\n");
        return;
    }
    kl_strbuf_addf(sb, "**%s**", kl_sk_str(a, "status"));
    double tol = kl_sk_num(a, "tolerance", KL_ADMIT_TOLERANCE);
    kl_strbuf_addf(sb, " (a trial reproduces the card when its gain is at least 1.0 and at least its recorded gain / "
                       "%.2f).\n\n",
                   tol);
    json_t *trials = json_object_get(a, "trials");
    if (!json_array_size(trials)) return;
    kl_strbuf_adds(sb, "| task | site | gain | recorded | verdict | detail |\n| --- | --- | ---: | ---: | --- | --- |\n");
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        kl_strbuf_adds(sb, "| ");
        add_cell(sb, kl_sk_str(t, "task"));
        if (json_is_true(json_object_get(t, "own"))) kl_strbuf_adds(sb, " (own)");
        kl_strbuf_adds(sb, " | ");
        add_cell(sb, kl_sk_str(t, "site"));
        double g = kl_sk_num(t, "gain", -1), r = kl_sk_num(t, "recorded", -1);
        if (g > 0) kl_strbuf_addf(sb, " | %.2fx | ", g);
        else kl_strbuf_adds(sb, " | – | ");
        if (r > 0) kl_strbuf_addf(sb, "%.2fx | ", r);
        else kl_strbuf_adds(sb, "– | ");
        add_cell(sb, kl_sk_str(t, "verdict"));
        kl_strbuf_adds(sb, " | ");
        add_cell(sb, kl_sk_str(t, "detail"));
        kl_strbuf_adds(sb, " |\n");
    }
    kl_strbuf_adds(sb, "\n");
}

/* ---- the card as Markdown ---------------------------------------------------------------------- */

char *kl_skill_markdown(const kl_skill *card, unsigned level)
{
    if (level < 1) level = 1;
    if (level > 4) level = 4;
    const json_t *c = card->doc;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf title = KL_STRBUF_INIT;
    kl_strbuf_adds(&title, card->id);
    if (*card->intent) kl_strbuf_addf(&title, ": %s", card->intent);
    heading(&sb, level, kl_strbuf_str(&title));
    kl_strbuf_release(&title);

    kl_strbuf_adds(&sb, "Transform ");
    add_code(&sb, card->transform);
    json_t *params = json_object_get(c, "params");
    if (json_object_size(params)) {
        kl_strbuf_adds(&sb, " with ");
        kl_strbuf p = KL_STRBUF_INIT;
        add_params(&p, params);
        add_code(&sb, kl_strbuf_str(&p));
        kl_strbuf_release(&p);
    }
    json_t *ev = json_object_get(c, "evidence");
    size_t nl = json_array_size(json_object_get(ev, "lineages")), nv = json_array_size(json_object_get(ev, "verdicts"));
    kl_strbuf_addf(&sb, "; learned from %zu %s", nl, plural(nl, "lineage", "lineages"));
    if (*kl_sk_str(ev, "task")) {
        kl_strbuf_adds(&sb, strchr(kl_sk_str(ev, "task"), ',') ? " (tasks " : " (task ");
        add_line(&sb, kl_sk_str(ev, "task"));
        kl_strbuf_adds(&sb, ")");
    }
    kl_strbuf_addf(&sb, ", %zu %s.\n\n", nv, plural(nv, "verdict", "verdicts"));

    /* Where it sits */
    heading(&sb, level + 1, "Where it sits");
    json_t *anchor = json_object_get(c, "anchor");
    site_sentence(&sb, anchor);
    before_after(&sb, anchor, "Before (the simpler version)", "After (with the optimization)");

    /* When it is valid */
    heading(&sb, level + 1, "When it is valid");
    json_t *pres = json_object_get(c, "preconditions");
    bool any_probed = false, any = false;
    size_t i;
    json_t *e;
    json_array_foreach(pres, i, e) {
        any = true;
        if (is_probed(e)) any_probed = true;
        kl_strbuf_adds(&sb, "- ");
        if (json_is_string(json_object_get(e, "predicate"))) {
            add_code(&sb, kl_sk_str(e, "predicate"));
            kl_strbuf_adds(&sb, " — ");
            add_line(&sb, kind_words(kl_sk_str(e, "kind")));
        } else {
            kl_strbuf_adds(&sb, "**unexplained failures**: no condition on the sizes separates them");
        }
        if (json_is_false(json_object_get(e, "verified"))) kl_strbuf_adds(&sb, " (not verified)");
        if (*kl_sk_str(e, "because")) {
            kl_strbuf_adds(&sb, json_is_string(json_object_get(e, "predicate")) ? ": " : ". ");
            add_line(&sb, kl_sk_str(e, "because"));
        }
        kl_strbuf_addc(&sb, '\n');
        add_evidence_items(&sb, e, "  ");
    }
    if (any) kl_strbuf_addc(&sb, '\n');
    else kl_strbuf_adds(&sb, "No condition recorded.\n\n");
    if (!any_probed) {
        probes_sentence(&sb, c);
        kl_strbuf_adds(&sb, "\n\n");
    }

    /* What it gained */
    heading(&sb, level + 1, "What it gained");
    gains_table(&sb, c);

    /* What broke */
    heading(&sb, level + 1, "What broke where the conditions failed");
    if (json_array_size(json_object_get(c, "risks"))) {
        risk_items(&sb, c, "");
        kl_strbuf_addc(&sb, '\n');
    } else {
        json_int_t np = json_integer_value(json_object_get(json_object_get(c, "probes"), "count"));
        if (np > 0)
            kl_strbuf_addf(&sb, "Nothing broke on the %lld %s probed.\n\n", (long long)np,
                           plural((size_t)np, "shape", "shapes"));
        else
            kl_strbuf_adds(&sb, "No failure recorded (it was not probed).\n\n");
    }

    /* Requires */
    heading(&sb, level + 1, "Requires");
    json_t *req = json_object_get(c, "requires");
    if (json_array_size(req)) {
        kl_strbuf_adds(&sb, "Shown to be needed first (the step failed or was refused without them):\n\n");
        json_array_foreach(req, i, e) {
            kl_strbuf_adds(&sb, "- ");
            add_code(&sb, json_string_value(e));
            kl_strbuf_addc(&sb, '\n');
        }
        json_array_foreach(json_object_get(c, "requires_evidence"), i, e) {
            kl_strbuf_adds(&sb, "  - ");
            add_line(&sb, json_string_value(e));
            kl_strbuf_addc(&sb, '\n');
        }
        kl_strbuf_addc(&sb, '\n');
    } else {
        kl_strbuf_adds(&sb, "Nothing was shown to be needed first. The order the walk found is the lineage path.\n\n");
    }

    /* Lineage path */
    if (json_array_size(json_object_get(json_object_get(c, "path"), "lineages"))) {
        heading(&sb, level + 1, "Lineage path");
        kl_strbuf_adds(&sb, "Where it stands in each lineage, read forward from the root:\n\n");
        path_items(&sb, c);
        kl_strbuf_addc(&sb, '\n');
    }

    /* Admission */
    heading(&sb, level + 1, "Admission");
    admission_text(&sb, c);

    /* Contradictions */
    if (json_array_size(json_object_get(c, "contradictions"))) {
        heading(&sb, level + 1, "Contradictions");
        kl_strbuf_adds(&sb, "Lineages that disagree about a condition:\n\n");
        contradiction_items(&sb, c);
        kl_strbuf_addc(&sb, '\n');
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    /* one trailing newline */
    while (sb.len > 1 && sb.buf[sb.len - 1] == '\n' && sb.buf[sb.len - 2] == '\n') sb.buf[--sb.len] = '\0';
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the card as an agent skill ---------------------------------------------------------------- */

void kl_skill_agent_name(const kl_skill *card, char *buf, size_t size) { kl_sk_agent_name_of(card->id, buf, size); }

void kl_sk_agent_name_of(const char *id, char *buf, size_t size)
{
    size_t n = 0, max = size ? size - 1 : 0;
    if (max > 64) max = 64;
    bool dash = false;
    for (const char *p = id; *p && n < max; p++) {
        char ch = *p;
        if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
            if (dash && n > 0 && n < max) buf[n++] = '-';
            dash = false;
            if (n < max) buf[n++] = ch;
        } else {
            dash = true;
        }
    }
    while (n > 0 && buf[n - 1] == '-') n--;
    if (n == 0 && max >= 5) {
        memcpy(buf, "skill", 5);
        n = 5;
    }
    if (size) buf[n] = '\0';
}

/* YAML double-quoted scalar, on one line. */
static void add_yaml_string(kl_strbuf *sb, const char *s)
{
    kl_strbuf_addc(sb, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') kl_strbuf_addc(sb, '\\');
        kl_strbuf_addc(sb, (*s == '\n' || *s == '\r' || *s == '\t') ? ' ' : *s);
    }
    kl_strbuf_addc(sb, '"');
}

/* The one-line description: what it does (intent) and when to use it (conditions, requires). */
static char *description(const kl_skill *card)
{
    const json_t *c = card->doc;
    kl_strbuf sb = KL_STRBUF_INIT;
    if (*card->intent) {
        add_sentence_start(&sb, card->intent);
        while (sb.len && (sb.buf[sb.len - 1] == '.' || sb.buf[sb.len - 1] == ' ')) sb.buf[--sb.len] = '\0';
    } else {
        kl_strbuf_addf(&sb, "Apply the %s optimization to a CUDA kernel", card->transform);
    }
    kl_strbuf_addf(&sb, " (CUDA, transform %s). ", card->transform);
    size_t i, k = 0;
    json_t *e;
    json_array_foreach(json_object_get(c, "preconditions"), i, e) {
        if (!json_is_string(json_object_get(e, "predicate"))) continue;
        kl_strbuf_adds(&sb, k++ ? " and " : "Use when ");
        add_line(&sb, kl_sk_str(e, "predicate"));
    }
    json_t *req = json_object_get(c, "requires");
    if (json_array_size(req)) {
        kl_strbuf_adds(&sb, k ? ", in a kernel that already has " : "Use in a kernel that already has ");
        json_array_foreach(req, i, e) {
            if (i) kl_strbuf_adds(&sb, i + 1 == json_array_size(req) ? " and " : ", ");
            add_line(&sb, json_string_value(e));
        }
        k++;
    }
    if (!k) kl_strbuf_adds(&sb, "Use where the transform applies");
    kl_strbuf_adds(&sb, ".");
    double best = -1;
    const char *dev = "";
    json_array_foreach(json_object_get(c, "effect"), i, e) if (kl_sk_num(e, "speedup", -1) > best) {
        best = kl_sk_num(e, "speedup", -1);
        dev = kl_sk_str(e, "device");
    }
    if (best > 0) {
        kl_strbuf_addf(&sb, " Measured up to %.2fx faster", best);
        if (*dev) {
            kl_strbuf_adds(&sb, " on ");
            add_line(&sb, dev);
        }
        kl_strbuf_adds(&sb, ".");
    }
    char *d = kl_strbuf_detach(&sb, NULL);
    /* at most 1024 characters (the agent-skill limit), cut at a character boundary */
    if (d && strlen(d) > 1024) {
        size_t cut = 1021;
        while (cut > 0 && ((unsigned char)d[cut] & 0xC0) == 0x80) cut--;
        memcpy(d + cut, "...", 4);
    }
    return d;
}

char *kl_skill_agent_markdown(const kl_skill *card)
{
    const json_t *c = card->doc;
    char name[72];
    kl_skill_agent_name(card, name, sizeof name);
    char *desc = description(card);
    if (!desc) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "---\nname: %s\ndescription: ", name);
    add_yaml_string(&sb, desc);
    kl_strbuf_adds(&sb, "\n---\n\n");
    free(desc);

    kl_strbuf_addf(&sb, "# %s\n\n", name);
    if (*card->intent) {
        add_sentence_start(&sb, card->intent);
        kl_strbuf_adds(&sb, "\n\n");
    }
    kl_strbuf_adds(&sb, "This skill was learned by klineage from an expert CUDA kernel: the optimization was removed "
                        "and the two versions were compiled, checked against a float64 reference and timed. "
                        "Apply it one step at a time and check every step the same way.\n\n");

    /* When to use it */
    kl_strbuf_adds(&sb, "## When to use it\n\n");
    size_t i, n = 0;
    json_t *e;
    json_array_foreach(json_object_get(c, "preconditions"), i, e) {
        if (!json_is_string(json_object_get(e, "predicate"))) continue;
        if (!n++)
            kl_strbuf_adds(&sb, "Every one of these must hold at the site (names are observables of the site and sizes by "
                                "role: docs/skill-card.md, \"Observables\"):\n\n");
        kl_strbuf_adds(&sb, "- ");
        add_code(&sb, kl_sk_str(e, "predicate"));
        kl_strbuf_adds(&sb, " (");
        add_line(&sb, kind_words(kl_sk_str(e, "kind")));
        kl_strbuf_adds(&sb, ")");
        if (*kl_sk_str(e, "because")) {
            kl_strbuf_adds(&sb, ": ");
            add_line(&sb, kl_sk_str(e, "because"));
        }
        kl_strbuf_addc(&sb, '\n');
    }
    if (n) kl_strbuf_addc(&sb, '\n');
    else kl_strbuf_adds(&sb, "No condition was found.\n\n");
    json_t *req = json_object_get(c, "requires");
    if (json_array_size(req)) {
        kl_strbuf_adds(&sb, "The kernel must already have: ");
        json_array_foreach(req, i, e) {
            if (i) kl_strbuf_adds(&sb, ", ");
            add_code(&sb, json_string_value(e));
        }
        kl_strbuf_adds(&sb, ".\n\n");
    }
    probes_sentence(&sb, c);
    kl_strbuf_adds(&sb, "\n\n");

    /* When not to use it */
    kl_strbuf_adds(&sb, "## When not to use it\n\n");
    bool said = false;
    if (json_array_size(json_object_get(c, "risks"))) {
        kl_strbuf_adds(&sb, "Where the conditions failed, this broke:\n\n");
        risk_items(&sb, c, "");
        kl_strbuf_addc(&sb, '\n');
        said = true;
    }
    json_array_foreach(json_object_get(c, "preconditions"), i, e) {
        if (json_is_string(json_object_get(e, "predicate"))) continue;
        kl_strbuf_adds(&sb, "Failures no condition explains: ");
        add_line(&sb, kl_sk_str(e, "because"));
        kl_strbuf_adds(&sb, ".\n\n");
        said = true;
    }
    if (json_array_size(json_object_get(c, "contradictions"))) {
        kl_strbuf_adds(&sb, "Lineages disagree about these conditions; check them yourself:\n\n");
        contradiction_items(&sb, c);
        kl_strbuf_addc(&sb, '\n');
        said = true;
    }
    if (!said) kl_strbuf_adds(&sb, "No failure was seen. Outside the conditions above it is untested.\n\n");

    /* How to apply it */
    kl_strbuf_adds(&sb, "## How to apply it\n\n");
    kl_strbuf_adds(&sb, "Transform ");
    add_code(&sb, card->transform);
    json_t *params = json_object_get(c, "params");
    if (json_object_size(params)) {
        kl_strbuf_adds(&sb, " with ");
        kl_strbuf p = KL_STRBUF_INIT;
        add_params(&p, params);
        add_code(&sb, kl_strbuf_str(&p));
        kl_strbuf_release(&p);
    }
    kl_strbuf_adds(&sb, ". ");
    json_t *anchor = json_object_get(c, "anchor");
    site_sentence(&sb, anchor);
    before_after(&sb, anchor, "Before", "After");
    kl_strbuf_adds(&sb, "Then compile, compare with the reference on every check shape (include sizes that are not "
                        "multiples of anything), and time it against the version before.\n\n");

    /* Evidence */
    kl_strbuf_adds(&sb, "## Evidence\n\n");
    gains_table(&sb, c);
    json_t *ev = json_object_get(c, "evidence");
    json_array_foreach(json_object_get(ev, "lineages"), i, e) {
        if (!i) kl_strbuf_adds(&sb, "Lineages: ");
        else kl_strbuf_adds(&sb, ", ");
        add_code(&sb, json_string_value(e));
    }
    if (json_array_size(json_object_get(ev, "lineages"))) kl_strbuf_adds(&sb, ".\n");
    size_t nv = json_array_size(json_object_get(ev, "verdicts"));
    if (nv) kl_strbuf_addf(&sb, "Verdicts behind it: %zu (in the klineage store).\n", nv);
    kl_strbuf_adds(&sb, "Admission: ");
    admission_text(&sb, c);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    while (sb.len > 1 && sb.buf[sb.len - 1] == '\n' && sb.buf[sb.len - 2] == '\n') sb.buf[--sb.len] = '\0';
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the library ---------------------------------------------------------------------------------- */

kl_status kl_skill_format_parse(const char *name, kl_skill_format *out, kl_error *err)
{
    if (!strcmp(name, "json")) *out = KL_SKILL_FORMAT_JSON;
    else if (!strcmp(name, "md") || !strcmp(name, "markdown")) *out = KL_SKILL_FORMAT_MARKDOWN;
    else if (!strcmp(name, "agent-skills")) *out = KL_SKILL_FORMAT_AGENT;
    else return kl_error_set(err, KL_ERR_INVALID, "unknown format \"%s\" (expected json, md or agent-skills)", name);
    return KL_OK;
}

static char *library_markdown(const kl_skill *const *cards, unsigned n)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "# Skill library\n\n");
    if (!n) {
        kl_strbuf_adds(&sb, "No skills yet: `klineage lineage TASK_DIR` walks an expert kernel and learns them.\n");
        return kl_strbuf_detach(&sb, NULL);
    }
    /* distinct lineages and transforms */
    json_t *lineages = json_object(), *transforms = json_object();
    for (unsigned k = 0; k < n; k++) {
        json_object_set_new(transforms, cards[k]->transform, json_true());
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(json_object_get(cards[k]->doc, "evidence"), "lineages"), i, e)
            json_object_set_new(lineages, json_string_value(e), json_true());
    }
    kl_strbuf_addf(&sb, "%u %s of %zu %s, from %zu %s.\n\n", n, plural(n, "skill", "skills"),
                   json_object_size(transforms), plural(json_object_size(transforms), "transform", "transforms"),
                   json_object_size(lineages), plural(json_object_size(lineages), "lineage", "lineages"));
    json_decref(lineages);
    json_decref(transforms);
    kl_strbuf_adds(&sb, "`gain`: where the step was measured in its walk (the bench shape, or a shape that runs its code); "
                        "`best probe`: the best gain at a probe shape, apart; `risks`: what broke (slowdowns among them).\n\n");
    kl_strbuf_adds(&sb, "| skill | transform | what it does | conditions | gain | best probe | risks | admission |\n"
                        "| --- | --- | --- | --- | ---: | ---: | ---: | --- |\n");
    for (unsigned k = 0; k < n; k++) {
        kl_skill_summary s;
        kl_skill_summarize(cards[k], &s);
        kl_strbuf_adds(&sb, "| [");
        add_cell(&sb, s.id);
        kl_strbuf_adds(&sb, "](#");
        char name[72];
        kl_skill_agent_name(cards[k], name, sizeof name);
        kl_strbuf_adds(&sb, name);
        kl_strbuf_adds(&sb, ") | ");
        add_cell(&sb, s.transform);
        kl_strbuf_adds(&sb, " | ");
        add_cell(&sb, s.intent);
        kl_strbuf_addf(&sb, " | %u", s.npreconditions);
        if (s.nprobed) kl_strbuf_addf(&sb, " (%u probed)", s.nprobed);
        else if (s.probes && !s.probe_failures) kl_strbuf_addf(&sb, " (no failure in %u probes)", s.probes);
        else if (s.probes) kl_strbuf_addf(&sb, " (%u of %u probes failed)", s.probe_failures, s.probes);
        if (s.ncontradictions) kl_strbuf_addf(&sb, ", %u contradicted", s.ncontradictions);
        if (s.best_gain > 0) kl_strbuf_addf(&sb, " | %.2fx", s.best_gain);
        else kl_strbuf_adds(&sb, " | –");
        if (s.best_probe > 0) kl_strbuf_addf(&sb, " | %.2fx", s.best_probe);
        else kl_strbuf_adds(&sb, " | –");
        kl_strbuf_addf(&sb, " | %u", s.nrisks);
        if (s.nslower) kl_strbuf_addf(&sb, " (%u slower)", s.nslower);
        kl_strbuf_addf(&sb, " | %s |\n", s.admission);
    }
    kl_strbuf_addc(&sb, '\n');
    for (unsigned k = 0; k < n; k++) {
        char name[72];
        kl_skill_agent_name(cards[k], name, sizeof name);
        kl_strbuf_addf(&sb, "<a id=\"%s\"></a>\n\n", name);
        char *md = kl_skill_markdown(cards[k], 2);
        if (!md) {
            kl_strbuf_release(&sb);
            return NULL;
        }
        kl_strbuf_adds(&sb, md);
        free(md);
        if (k + 1 < n) kl_strbuf_addc(&sb, '\n');
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

kl_status kl_skills_render(const kl_skill *const *cards, unsigned n, kl_skill_format format, char **out, kl_error *err)
{
    *out = NULL;
    if (format == KL_SKILL_FORMAT_MARKDOWN) {
        *out = library_markdown(cards, n);
    } else if (format == KL_SKILL_FORMAT_JSON) {
        json_t *a = json_array();
        for (unsigned k = 0; k < n && a; k++) json_array_append_new(a, kl_sk_ordered(cards[k]));
        char *t = a ? json_dumps(a, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
        json_decref(a);
        if (t) {
            size_t len = strlen(t);
            *out = malloc(len + 2);
            if (*out) {
                memcpy(*out, t, len);
                memcpy(*out + len, "\n", 2);
            }
            free(t);
        }
    } else {
        return kl_error_set(err, KL_ERR_INVALID, "agent-skills is a folder, not a text: write it with kl_skills_write_agent");
    }
    return *out ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

kl_status kl_skills_write_agent(const kl_skill *const *cards, unsigned n, const char *dir, kl_error *err)
{
    kl_status st = KL_OK;
    char (*names)[72] = calloc(n ? n : 1, sizeof *names);
    if (!names) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    for (unsigned k = 0; k < n; k++) {
        kl_skill_agent_name(cards[k], names[k], sizeof names[k]);
        for (unsigned q = 0; q < k; q++)
            if (!strcmp(names[q], names[k])) {
                st = kl_error_set(err, KL_ERR_INVALID, "skills %s and %s would share the agent-skill folder %s/%s",
                                  cards[q]->id, cards[k]->id, dir, names[k]);
                goto cleanup;
            }
    }
    KL_TRY(kl_mkdirs(dir, err));
    for (unsigned k = 0; k < n; k++) {
        char *sub = kl_path_join(dir, names[k]);
        char *file = sub ? kl_path_join(sub, "SKILL.md") : NULL;
        char *md = file ? kl_skill_agent_markdown(cards[k]) : NULL;
        if (!md) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        struct stat sb;
        if (st == KL_OK && lstat(sub, &sb) == 0 && !S_ISDIR(sb.st_mode)) /* a link placed there leads elsewhere */
            st = kl_error_set(err, KL_ERR_INVALID, "%s exists and is not a folder (a symbolic link?): no skill is written through it",
                              sub);
        if (st == KL_OK) st = kl_mkdirs(sub, err);
        if (st == KL_OK) st = kl_file_write(file, md, strlen(md), err);
        free(sub), free(file), free(md);
        if (st != KL_OK) goto cleanup;
    }
cleanup:
    free(names);
    return st;
}
