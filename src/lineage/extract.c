/* From a lineage document: the Markdown table, and one skill card per admitted step. */
#include <ctype.h>
#include <strings.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "lineage/lineage_int.h"

#define HUNK_MAX_LINES 30

typedef struct lines {
    const char **start;
    size_t *len;
    size_t n;
} lines;

static void split(const char *t, lines *l)
{
    size_t cap = 64;
    l->n = 0;
    l->start = malloc(cap * sizeof *l->start);
    l->len = malloc(cap * sizeof *l->len);
    if (!l->start || !l->len) {
        free(l->start), free(l->len);
        l->start = NULL, l->len = NULL;
        return;
    }
    const char *p = t;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (l->n == cap) {
            cap *= 2;
            const char **s2 = realloc(l->start, cap * sizeof *s2);
            size_t *l2 = s2 ? realloc(l->len, cap * sizeof *l2) : NULL;
            if (!s2 || !l2) {
                if (s2) l->start = s2;
                return;
            }
            l->start = s2, l->len = l2;
        }
        l->start[l->n] = p;
        l->len[l->n++] = n;
        p += n + (e ? 1 : 0);
    }
}

static bool line_eq(const lines *a, size_t i, const lines *b, size_t j)
{
    return a->len[i] == b->len[j] && !memcmp(a->start[i], b->start[j], a->len[i]);
}

static char *join(const lines *l, size_t from, size_t to)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t shown = 0;
    for (size_t i = from; i < to && i < l->n; i++) {
        if (shown++ == HUNK_MAX_LINES) {
            kl_strbuf_addf(&sb, "… (%zu more lines)\n", to - i);
            break;
        }
        kl_strbuf_add(&sb, l->start[i], l->len[i]);
        kl_strbuf_addc(&sb, '\n');
    }
    return kl_strbuf_detach(&sb, NULL);
}

void kl_text_hunk(const char *before, const char *after, char **hb, char **ha, unsigned *line)
{
    lines a = {0}, b = {0};
    split(before, &a);
    split(after, &b);
    *hb = *ha = NULL;
    *line = 0;
    if (!a.start || !b.start) goto cleanup;
    size_t p = 0;
    while (p < a.n && p < b.n && line_eq(&a, p, &b, p)) p++;
    size_t s = 0;
    while (s < a.n - p && s < b.n - p && line_eq(&a, a.n - 1 - s, &b, b.n - 1 - s)) s++;
    size_t from = p > 0 ? p - 1 : 0; /* one line of context */
    *hb = join(&a, from, a.n - s + (s > 0 ? 1 : 0));
    *ha = join(&b, from, b.n - s + (s > 0 ? 1 : 0));
    *line = (unsigned)from + 1;
cleanup:
    free(a.start), free(a.len), free(b.start), free(b.len);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double num(const json_t *o, const char *k, double dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* "0.77x" for a ratio near one, "1565x faster" / "3.2x slower" phrasings are the caller's:
 * a ratio with the digits it needs (never "0.00x"). */
static void ratio_text(double r, char *buf, size_t size)
{
    if (r >= 0.995 || r <= 0) kl_snprintf(buf, size, "%.2fx", r);
    else if (r >= 0.01) kl_snprintf(buf, size, "%.3gx", r);
    else kl_snprintf(buf, size, "%.2gx", r);
}

/* A factor with the digits it needs: 1565, 35.6, 3.23. */
static void factor_text(double x, char *buf, size_t size)
{
    if (x >= 100) kl_snprintf(buf, size, "%.0f", x);
    else if (x >= 10) kl_snprintf(buf, size, "%.1f", x);
    else kl_snprintf(buf, size, "%.2f", x);
}

char *kl_lineage_markdown(const char *doc_json)
{
    json_t *doc = json_loads(doc_json, 0, NULL);
    if (!doc) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    json_t *steps = json_object_get(doc, "steps");
    size_t n = json_array_size(steps);
    kl_strbuf_addf(&sb, "### %s\n\n", str(doc, "task"));
    kl_strbuf_addf(&sb, "Expert `%s`, rewriter `%s`, %zu step(s) (%s).\n\n", str(doc, "expert"), str(doc, "rewriter"), n,
                   json_object_get(doc, "stop_reason") ? str(doc, "stop_reason") : str(doc, "state"));
    /* the expert's total, as the steps give it: each step's share of it in log terms */
    double total = 1;
    bool total_known = true;
    for (size_t k = 0; k < n; k++) {
        double sp = num(json_array_get(steps, k), "speedup", -1);
        if (sp > 0) total *= 1.0 / sp;
        else total_known = false;
    }
    /* the expert's total speedup: over the naive kernel when the walk judged it, else the product */
    double ev = num(json_object_get(doc, "expert_verdict"), "speedup", -1);
    double whole = ev > 1.0001 ? ev : total;
    kl_strbuf_adds(&sb, "| step | transform | site | gain | share | measured at | time after (ms) |\n"
                        "| --- | --- | --- | --- | --- | --- | --- |\n");
    /* Root to expert: the last step of the walk is the first forward step. */
    for (size_t k = n; k-- > 0;) {
        json_t *s = json_array_get(steps, k);
        double sp = num(s, "speedup", -1); /* t_parent / t_child, measured in the walk */
        char gain[32] = "?", share[32] = "?";
        if (sp > 0) {
            kl_snprintf(gain, sizeof gain, "%.2fx", 1.0 / sp);
            double sh = whole > 1.0001 ? 100.0 * log(1.0 / sp) / log(whole) : 0;
            if (whole > 1.0001 && (total_known || ev > 1.0001))
                kl_snprintf(share, sizeof share, "%.0f %%", fabs(sh) < 0.5 ? 0.0 : sh);
            else
                kl_snprintf(share, sizeof share, "-");
        }
        char after[32] = "?";
        if (num(s, "base_ms", -1) > 0) kl_snprintf(after, sizeof after, "%.4f", num(s, "base_ms", -1));
        char at[160] = "bench";
        json_t *shape = json_object_get(s, "shape");
        if (json_is_object(shape)) {
            kl_strbuf t = KL_STRBUF_INIT;
            kl_strbuf_adds(&t, "path: ");
            const char *key;
            json_t *v;
            bool first = true;
            json_object_foreach(shape, key, v) {
                kl_strbuf_addf(&t, "%s%s=%lld", first ? "" : ", ", key, (long long)json_integer_value(v));
                first = false;
            }
            kl_snprintf(at, sizeof at, "%s", kl_strbuf_str(&t));
            kl_strbuf_release(&t);
        }
        kl_strbuf_addf(&sb, "| %zu | %s | `%s` | %s | %s | %s | %s |\n", n - k, str(s, "transform"), str(s, "site"), gain,
                       share, at, after);
    }
    if (total_known && n) {
        char t[32];
        ratio_text(total, t, sizeof t);
        kl_strbuf_addf(&sb, "\nRoot to expert, product of the step gains: %s", t);
        double big = 0;
        size_t bk = 0;
        for (size_t k = 0; k < n; k++) {
            double g = 1.0 / num(json_array_get(steps, k), "speedup", 1);
            if (g > big) big = g, bk = k;
        }
        char wt[32];
        factor_text(whole, wt, sizeof wt);
        if (whole > 1.0001 && big > 1)
            kl_strbuf_addf(&sb, "; the largest step (%s, %.2fx) carries %.0f %% of the expert's %sx over %s "
                                "(shares in log terms).\n",
                           str(json_array_get(steps, bk), "transform"), big, 100.0 * log(big) / log(whole), wt,
                           ev > 1.0001 ? "the naive kernel" : "the root");
        else
            kl_strbuf_adds(&sb, ".\n");
    }
    json_t *rn = json_object_get(doc, "root_vs_naive");
    double rs = rn ? num(rn, "speedup", -1) : -1; /* t(naive) / t(root) */
    if (rs > 0) {
        double r = 1.0 / rs; /* the root's time over the naive kernel's */
        char t[32];
        ratio_text(r, t, sizeof t);
        char f[32];
        factor_text(r < 0.5 ? rs : r, f, sizeof f);
        if (r < 0.5)
            kl_strbuf_addf(&sb, "The root is %sx faster than the naive kernel: it takes %s its time (same-run ratio).\n",
                           f, t);
        else if (r > 2)
            kl_strbuf_addf(&sb, "The root is %sx slower than the naive kernel (same-run ratio).\n", f);
        else
            kl_strbuf_addf(&sb, "The root takes %s the naive kernel's time (same-run ratio).\n", t);
    }
    size_t nrej = json_array_size(json_object_get(doc, "rejected"));
    kl_strbuf_addf(&sb, "%zu proposal(s) rejected along the way (kept as evidence).\n", nrej);
    json_decref(doc);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- cards ---------------------------------------------------------------------------- */

/* Is s a whole word of text (an identifier the kernel uses)? */
static bool word_in(const char *text, const char *s)
{
    size_t n = strlen(s);
    if (!n || !text) return false;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) {
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (left && right) return true;
    }
    return false;
}

/* text with its comments blanked out (string literals kept as they are); free() it */
static char *without_comments(const char *text)
{
    char *out = kl_strdup(text ? text : "");
    for (char *p = out; *p; p++) {
        if (*p == '"' || *p == '\'') {
            char q = *p;
            for (p++; *p && *p != q; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) break;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            if (!*p) break;
        } else if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            for (; p < end; p++)
                if (*p != '\n') *p = ' ';
            p--;
        }
    }
    return out;
}

/* Is s a word of text in any case ("COLS" for a parameter cols)? */
static bool word_in_nocase(const char *text, const char *s)
{
    size_t n = strlen(s);
    if (!n || !text) return false;
    for (const char *p = text; *p; p++) {
        if (strncasecmp(p, s, n) != 0) continue;
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (left && right) return true;
    }
    return false;
}

/* Does s hold a word of text of 4 characters or more ("blur_generic_K" holds blur_generic)? */
static bool holds_a_word(const char *text, const char *s)
{
    if (!text) return false;
    for (const char *p = text; *p;) {
        if (!(isalpha((unsigned char)*p) || *p == '_')) {
            p++;
            continue;
        }
        const char *a = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        size_t n = (size_t)(p - a);
        if (n < 4) continue;
        char w[128];
        if (n >= sizeof w) continue;
        memcpy(w, a, n);
        w[n] = '\0';
        if (strstr(s, w)) return true;
    }
    return false;
}

/* A feature whose value is a name the kernel chose (a loop variable, an array, a helper, a
 * constant, or a name the rules make of one: "COLS" for cols, "blur_generic_K") or a piece of
 * its code (an expression: "blockIdx.x * BLOCK + threadIdx.x", "256") says where the site is,
 * not when the step is valid: it stays in the anchor and is neither a condition nor part of the
 * card's identity, so that the same step found under other names merges into one card. Type
 * names and keywords are not names; prose ("run time, at the loop start") is not code. */
static bool names_an_identifier(const json_t *v, const char *source)
{
    static const char *const keywords[] = {"float", "double", "int", "unsigned", "size_t", "char", "if", "for",
                                           "while", "bool", "void", "long", "short", "else", "return", NULL};
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (!names_an_identifier(e, source)) return false;
        return json_array_size(v) > 0;
    }
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    if (!*s) return false;
    /* code: an expression or a literal */
    bool digits = true, spaces = false;
    for (const char *p = s; *p; p++) {
        if (strchr("*+/%()[]<>=&|^~.:", *p)) return true;
        if (!isdigit((unsigned char)*p)) digits = false;
        if (*p == ' ' || *p == ',') spaces = true;
    }
    if (digits || spaces) return digits;
    if (!(isalpha((unsigned char)*s) || *s == '_')) return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
    for (const char *const *k = keywords; *k; k++)
        if (!strcmp(s, *k)) return false;
    return word_in(source, s) || word_in_nocase(source, s) || (strchr(s, '_') && holds_a_word(source, s));
}

/* A list of per-item records (restrict's pointers, each with its type and loads): a description
 * of this kernel's parameters, not a condition. */
static bool is_record_list(const json_t *v)
{
    return json_is_array(v) && json_array_size(v) > 0 && json_is_object(json_array_get(v, 0));
}

/* The site features that describe when the step applies: every feature but the names and the
 * per-item record lists. */
static json_t *condition_features(const json_t *features, const char *source)
{
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)features, k, v) {
        if (names_an_identifier(v, source) || is_record_list(v)) continue;
        /* why a site cannot take the rewrite says nothing of when the step is valid */
        if (!strcmp(k, "why_not")) continue;
        /* a name the observables give (dtype): the observable is what a card states */
        if (kl_observable_name(k)) continue;
        json_object_set(out, k, v);
    }
    return out;
}

/* ---- what a card of each transform states about its site ------------------------------------ */

/* The observables (docs/skill-card.md, "Observables") that a card of a transform states as
 * static conditions, besides the rules' own features of the forward site: what the rewrite
 * reads at the site. A transform not listed (another rewriter's) states the default row. */
static const struct {
    const char *transform;
    const char *names[5];
} stated[] = {
    {"vectorize", {"dtype", "loop_access", NULL}},
    {"coalesce", {"access", "write_access", NULL}},
    {"smem-tile", {"dtype", "loop_access", "reduction", NULL}},
    {"smem-pad", {"dtype", NULL}},
    {"register-tile", {"dtype", "reduction", NULL}},
    {"double-buffer", {"dtype", NULL}},
    {"tensor-core", {"dtype", NULL}},
    {"wgmma", {"dtype", NULL}},
    {"row-parallel", {"access", "reduction", NULL}},
    {"warp-reduce", {"reduction", NULL}},
    {"tree-addressing", {"reduction", NULL}},
    {"block-reduce", {"reduction", "atomics", NULL}},
    {"two-pass", {"reduction", "atomics", NULL}},
    {"accumulators", {"reduction", NULL}},
    {"coarsen", {"access", NULL}},
    {"privatize", {"atomics", NULL}},
    {"grid-stride", {"access", NULL}},
    {"unroll", {"trip_known", NULL}},
    {"fast-math", {"dtype", NULL}},
    {"specialize", {"dispatch", NULL}},
    {"launch-bounds", {NULL}},
    {"restrict", {NULL}},
    {"block-size", {NULL}},
    {NULL, {"dtype", "access", "loop_access", "reduction", NULL}},
};

static const char *const *stated_for(const char *transform)
{
    unsigned i = 0;
    while (stated[i].transform && strcmp(stated[i].transform, transform) != 0) i++;
    return stated[i].names;
}

/* The observables an effect or a risk carries as its context (the closest context wins forward). */
static const char *const context_names[] = {"dtype", "access", "write_access", "loop_access", "runs_at_shape",
                                            "contiguous_extent", "reduced_extent", "independent_rows",
                                            "grid_blocks", "block_threads", "elements", "bytes_moved",
                                            "arithmetic_intensity", NULL};

static json_t *context_of(const json_t *obs)
{
    json_t *c = json_object();
    for (const char *const *n = context_names; *n; n++) {
        json_t *v = json_object_get(obs, *n);
        if (v) json_object_set(c, *n, v);
    }
    return c;
}

static void add_static(json_t *pre, const char *name, const json_t *v, const char *where)
{
    char pred[256];
    if (json_is_string(v)) {
        const char *t = json_string_value(v);
        if (strchr(t, '"') || strchr(t, '\\') || strlen(t) > 100) return;
        kl_snprintf(pred, sizeof pred, "%s == \"%s\"", name, t);
    } else if (json_is_boolean(v)) {
        kl_snprintf(pred, sizeof pred, "%s == %s", name, json_is_true(v) ? "true" : "false");
    } else if (json_is_integer(v)) {
        kl_snprintf(pred, sizeof pred, "%s == %lld", name, (long long)json_integer_value(v));
    } else {
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(pre, i, e) if (!strcmp(json_string_value(json_object_get(e, "predicate")), pred)) return;
    json_t *c = json_object();
    json_object_set_new(c, "predicate", json_string(pred));
    json_object_set_new(c, "kind", json_string("static"));
    json_object_set_new(c, "verified", json_true());
    json_object_set_new(c, "evidence", json_pack("[s]", where));
    json_array_append_new(pre, c);
}

/* One step of a lineage, read forward: its site in the simpler version, its identity. */
typedef struct fstep {
    kl_fwd_site fs;
    json_t *conditional;     /* the forward site's features that say when it applies (owned) */
    json_t *obs;             /* the forward site's observables where the step was measured (owned) */
    char id[128];
    char pid[160];           /* the walk's proposal id of the step ("T@offset:hash") */
    bool off_path;           /* measured at the bench shape, which does not run the step's function */
    const char *child, *parent;
} fstep;

static const char *hash_part(const char *pid)
{
    const char *c = strrchr(pid ? pid : "", ':');
    return c ? c + 1 : "";
}

static void kernel_of_site(const char *site, char *buf, size_t size)
{
    const char *colon = strchr(site, ':');
    kl_snprintf(buf, size, "%.*s", colon ? (int)(colon - site) : (int)strlen(site), site);
}

/* The transforms the walk showed step k needs: a later step (earlier forward) whose removal,
 * at the same site, was rejected — it broke the kernel, or the rewriter refused it — last at
 * the version where step k was taken, while step k's optimization was still there: removing
 * step k is what let it through. */
static json_t *shown_requires(const json_t *doc, const json_t *steps, size_t k, const fstep *fst, json_t **why)
{
    json_t *req = json_array();
    *why = json_array();
    json_int_t vk = json_integer_value(json_object_get(json_array_get(steps, k), "from"));
    static const char *const failing[] = {"compile", "correct", "crash", "determinism", "integrity", "stream",
                                          "rewrite", NULL};
    for (size_t q = k + 1; q < json_array_size(steps); q++) {
        const json_t *sq = json_array_get(steps, q);
        const char *tq = str(sq, "transform");
        char kq[128];
        kernel_of_site(str(sq, "site"), kq, sizeof kq);
        json_int_t last = -1;
        const json_t *last_r = NULL;
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(doc, "rejected"), i, r) {
            if (strcmp(str(r, "transform"), tq) != 0) continue;
            json_int_t v = json_integer_value(json_object_get(r, "version"));
            const char *stage = str(r, "stage");
            bool fails = false;
            for (const char *const *f = failing; *f; f++) fails |= !strcmp(stage, *f);
            if (!fails) continue;
            if (!strcmp(stage, "rewrite") && !kl_str_starts(str(r, "reason"), "not applicable")) continue;
            bool same;
            if (*str(r, "id")) {
                same = !strcmp(hash_part(str(r, "id")), hash_part(fst[q].pid));
            } else {
                char kr[128];
                kernel_of_site(str(r, "site"), kr, sizeof kr);
                same = !strcmp(kr, kq);
            }
            if (same && v > last) last = v, last_r = r;
        }
        if (last != vk || !last_r) continue;
        size_t j;
        json_t *e;
        bool seen = false;
        json_array_foreach(req, j, e) if (!strcmp(json_string_value(e), tq)) seen = true;
        if (seen) continue;
        json_array_append_new(req, json_string(tq));
        char line[400];
        kl_snprintf(line, sizeof line, "removing %s at %s was rejected while this step's optimization was there (%s: %.200s)",
                    tq, str(last_r, "site"), str(last_r, "stage"), str(last_r, "reason"));
        json_array_append_new(*why, json_string(line));
    }
    return req;
}

static json_t *step_ref(const fstep *fst, const json_t *steps, size_t q, const char *lineage)
{
    json_t *o = json_object();
    json_object_set_new(o, "card", json_string(fst[q].id));
    json_object_set_new(o, "transform", json_string(str(json_array_get(steps, q), "transform")));
    json_object_set_new(o, "lineage", json_string(lineage));
    return o;
}

static json_t *card_of_step(const json_t *doc, const json_t *steps, size_t k, const fstep *fst, const kl_task *task)
{
    const json_t *s = json_array_get(steps, k);
    size_t n = json_array_size(steps);
    const fstep *f = &fst[k];
    const char *transform = str(s, "transform");
    const char *lineage = str(doc, "key"), *task_name = str(doc, "task");
    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(f->id));
    json_object_set_new(c, "format", json_integer(1));
    json_object_set_new(c, "transform", json_string(transform));
    /* the step's note says what was removed ("removed T at SITE: what it is"); the card is the
     * step forward, so its intent is what the optimization is */
    const char *intent = str(s, "note");
    char removed[300];
    kl_snprintf(removed, sizeof removed, "removed %s at %s: ", transform, str(s, "site"));
    if (kl_str_starts(intent, removed)) intent += strlen(removed);
    json_object_set_new(c, "intent", json_string(intent));
    json_t *params = json_object_get(s, "params");
    json_object_set(c, "params", params ? params : json_object());
    if (!params) json_decref(json_object_get(c, "params"));

    /* where it sits: the optimized site it was learned at, and the site it applies to forward */
    json_t *anchor = json_object();
    const char *site = str(s, "site");
    char kname[128];
    kernel_of_site(site, kname, sizeof kname);
    json_object_set_new(anchor, "kernel", json_string(kname));
    json_object_set_new(anchor, "site", json_string(site));
    json_t *diff = json_object_get(s, "diff");
    json_object_set_new(anchor, "before", json_string(str(diff, "before")));
    json_object_set_new(anchor, "after", json_string(str(diff, "after")));
    json_t *pattern = json_object();
    json_object_set_new(pattern, "transform", json_string(transform));
    json_object_set(pattern, "site_features", f->conditional);
    json_object_set_new(anchor, "pattern", pattern);
    json_t *features = json_object_get(s, "features");
    if (features) json_object_set(anchor, "features", features); /* the optimized site's, names included */
    json_t *fwd = json_object();
    json_object_set_new(fwd, "found", json_boolean(f->fs.found));
    json_object_set_new(fwd, "site", json_string(f->fs.site));
    json_object_set_new(fwd, "kernel", json_string(f->fs.kernel));
    json_object_set_new(fwd, "line", json_integer(f->fs.line));
    if (f->fs.features) json_object_set(fwd, "features", f->fs.features);
    if (!f->fs.found) json_object_set_new(fwd, "why", json_string(f->fs.why));
    if (f->fs.found && f->fs.refused[0]) json_object_set_new(fwd, "refused", json_string(f->fs.refused));
    json_object_set_new(fwd, "observables", json_deep_copy(f->obs));
    json_object_set_new(anchor, "forward", fwd);
    json_object_set_new(c, "anchor", anchor);

    /* when it is valid: the forward site's features and observables, then what probing found */
    json_t *pre = json_array();
    char where[300];
    kl_snprintf(where, sizeof where, "site feature at %s in the simpler version (%s lineage)", f->fs.site, task_name);
    const char *fk;
    json_t *fv;
    json_object_foreach(f->conditional, fk, fv) if (json_is_string(fv) || json_is_boolean(fv)) add_static(pre, fk, fv, where);
    kl_snprintf(where, sizeof where, "observable at %s in the simpler version (%s lineage)", f->fs.site, task_name);
    for (const char *const *nm = stated_for(transform); *nm; nm++) {
        json_t *v = json_object_get(f->obs, *nm);
        if (v && !(json_is_string(v) && (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "other") ||
                                         !strcmp(json_string_value(v), "unknown"))))
            add_static(pre, *nm, v, where);
    }
    size_t i;
    json_t *cond;
    json_array_foreach(json_object_get(s, "conditions"), i, cond) {
        /* only conditions over sizes by role: a stored walk's old conditions named the task's sizes */
        json_array_append(pre, cond);
    }
    json_object_set_new(c, "preconditions", pre);

    json_t *why_req = NULL;
    json_object_set_new(c, "requires", shown_requires(doc, steps, k, fst, &why_req));
    if (json_array_size(why_req)) json_object_set_new(c, "requires_evidence", why_req);
    else json_decref(why_req);

    /* what it gained, where the code runs: the bench shape, or the shape that runs its path */
    json_t *effect = json_array(), *risks = json_array(), *verdicts = json_array();
    double sp = num(s, "speedup", -1);
    json_t *at = json_object_get(s, "shape");
    bool path = json_is_object(at);
    if (*str(s, "verdict")) json_array_append_new(verdicts, json_string(str(s, "verdict")));
    if (sp > 0) {
        json_t *e = json_object();
        json_object_set_new(e, "device", json_string(str(s, "device")));
        json_object_set_new(e, "date", json_string(str(s, "date")));
        json_object_set_new(e, "label", json_string(path ? "path" : f->off_path ? "off-path" : "bench"));
        json_object_set(e, "shape", path ? at : json_object_get(doc, "bench"));
        json_object_set_new(e, "speedup", json_real(1.0 / sp));
        if (num(s, "cand_ms", -1) > 0) json_object_set_new(e, "before_ms", json_real(num(s, "cand_ms", -1)));
        if (num(s, "base_ms", -1) > 0) json_object_set_new(e, "after_ms", json_real(num(s, "base_ms", -1)));
        json_object_set_new(e, "verdict", json_string(str(s, "verdict")));
        json_object_set_new(e, "lineage", json_string(lineage));
        json_object_set_new(e, "task", json_string(task_name));
        json_object_set_new(e, "context", context_of(f->obs));
        json_array_append_new(effect, e);
        if (1.0 / sp < KL_SLOWER_BELOW && !f->off_path) {
            /* a step the walk took although it lost: a slowdown in this context */
            json_t *r = json_object();
            json_object_set(r, "shape", path ? at : json_object_get(doc, "bench"));
            json_object_set_new(r, "broke", json_string("slower"));
            char detail[200];
            kl_snprintf(detail, sizeof detail, "the optimized version took %.2fx the simpler one's time at the %s shape",
                        sp, path ? "path's" : "bench");
            json_object_set_new(r, "detail", json_string(detail));
            json_object_set_new(r, "speedup", json_real(1.0 / sp));
            json_object_set_new(r, "label", json_string(path ? "path" : "bench"));
            json_object_set_new(r, "verdict", json_string(str(s, "verdict")));
            json_object_set_new(r, "lineage", json_string(lineage));
            json_object_set_new(r, "task", json_string(task_name));
            json_object_set_new(r, "context", context_of(f->obs));
            json_array_append_new(risks, r);
        }
    }
    json_t *probes = json_object_get(s, "probes");
    unsigned failures = 0;
    json_t *pshapes = json_array();
    json_t *p;
    json_array_foreach(probes, i, p) {
        json_t *shape = json_object_get(p, "shape");
        json_array_append(pshapes, shape);
        if (*str(p, "verdict")) json_array_append_new(verdicts, json_string(str(p, "verdict")));
        double psp = num(p, "speedup", -1);
        json_t *obs = NULL;
        kl_error e0 = {0};
        if (kl_step_observe(task, f->child, &f->fs, shape, &obs, &e0) != KL_OK) obs = json_object();
        if (psp > 0 && json_is_true(json_object_get(p, "pass"))) {
            json_t *e = json_object();
            json_object_set_new(e, "device", json_string(str(p, "device")));
            json_object_set_new(e, "date", json_string(str(p, "date")));
            json_object_set_new(e, "label", json_string("probe"));
            json_object_set(e, "shape", shape);
            json_object_set_new(e, "speedup", json_real(psp));
            json_object_set_new(e, "verdict", json_string(str(p, "verdict")));
            json_object_set_new(e, "lineage", json_string(lineage));
            json_object_set_new(e, "task", json_string(task_name));
            json_object_set_new(e, "context", context_of(obs));
            json_array_append_new(effect, e);
        }
        if (json_object_get(p, "broke")) {
            failures++;
            json_t *r = json_object();
            json_object_set(r, "shape", shape);
            json_object_set_new(r, "broke", json_string(str(p, "broke")));
            char detail[600];
            if (!strcmp(str(p, "broke"), "slower")) {
                kl_snprintf(detail, sizeof detail, "the optimized version took %.2fx the simpler one's time", 1.0 / psp);
                json_object_set_new(r, "speedup", json_real(psp));
            } else {
                kl_snprintf(detail, sizeof detail, "%s: %s", str(p, "stage"), str(p, "reason"));
            }
            json_object_set_new(r, "detail", json_string(detail));
            json_object_set_new(r, "label", json_string("probe"));
            json_object_set_new(r, "verdict", json_string(str(p, "verdict")));
            json_object_set_new(r, "lineage", json_string(lineage));
            json_object_set_new(r, "task", json_string(task_name));
            json_object_set_new(r, "context", context_of(obs));
            json_array_append_new(risks, r);
        }
        json_decref(obs);
    }
    json_object_set_new(c, "effect", effect);
    json_object_set_new(c, "risks", risks);
    json_t *pr = json_object();
    json_object_set_new(pr, "count", json_integer((json_int_t)json_array_size(probes)));
    json_object_set_new(pr, "failures", json_integer(failures));
    json_object_set_new(pr, "shapes", pshapes);
    const char *skipped = json_string_value(json_object_get(s, "probe_skipped"));
    if (skipped) {
        json_object_set_new(pr, "note", json_string(skipped));
    } else if (failures == 0) {
        char note[160];
        kl_snprintf(note, sizeof note, "probed on %zu shape(s); no failure found", json_array_size(probes));
        json_object_set_new(pr, "note", json_string(note));
    }
    json_object_set_new(c, "probes", pr);
    json_t *ev = json_object();
    json_object_set_new(ev, "lineages", json_pack("[s]", lineage));
    json_object_set_new(ev, "verdicts", verdicts);
    json_object_set_new(ev, "task", json_string(task_name));
    json_object_set_new(c, "evidence", ev);
    json_object_set_new(c, "contradictions", json_array());

    /* the lineage path: what came before and after this step, forward (root to expert) */
    json_t *lp = json_object(), *before = json_array(), *after = json_array();
    for (size_t q = n; q-- > k + 1;) json_array_append_new(before, json_string(fst[q].id));
    for (size_t q = k; q-- > 0;) json_array_append_new(after, json_string(fst[q].id));
    json_object_set_new(lp, "lineage", json_string(lineage));
    json_object_set_new(lp, "task", json_string(task_name));
    json_object_set_new(lp, "step", json_integer((json_int_t)(n - k)));
    json_object_set_new(lp, "of", json_integer((json_int_t)n));
    json_object_set_new(lp, "before", before);
    json_object_set_new(lp, "after", after);
    json_t *path_o = json_object(), *follows = json_array(), *precedes = json_array();
    if (k + 1 < n) json_array_append_new(follows, step_ref(fst, steps, k + 1, lineage));
    if (k > 0) json_array_append_new(precedes, step_ref(fst, steps, k - 1, lineage));
    json_object_set_new(path_o, "follows", follows);
    json_object_set_new(path_o, "precedes", precedes);
    json_object_set_new(path_o, "lineages", json_pack("[o]", lp));
    json_object_set_new(c, "path", path_o);
    return c;
}

/* The forward reading of every step: its site in the simpler version, the features that say when
 * it applies, its observables where it was measured, its card id. */
static kl_status read_forward(const json_t *doc, const json_t *steps, const kl_task *task, fstep *fst, kl_error *err)
{
    json_t *versions = json_object_get(doc, "versions");
    for (size_t k = 0; k < json_array_size(steps); k++) {
        const json_t *s = json_array_get(steps, k);
        fstep *f = &fst[k];
        const json_t *vp = json_array_get(versions, (size_t)json_integer_value(json_object_get(s, "from")));
        const json_t *vc = json_array_get(versions, (size_t)json_integer_value(json_object_get(s, "to")));
        f->parent = str(vp, "source");
        f->child = str(vc, "source");
        const char *transform = str(s, "transform");
        kl_status st = KL_OK;
        if (*f->child && *f->parent && strcmp(f->child, f->parent) != 0) {
            st = kl_step_forward_site(task, f->parent, f->child, transform, str(s, "site"), &f->fs, err);
            if (st == KL_OK) {
                json_t *at = json_object_get(s, "shape");
                st = kl_step_observe(task, f->child, &f->fs, json_is_object(at) ? at : NULL, &f->obs, err);
            }
            if (st != KL_OK) return st;
            kl_proposal_id(transform, f->parent, f->child, f->pid, sizeof f->pid);
            if (task && !json_is_object(json_object_get(s, "shape"))) {
                kl_source *ps = NULL;
                kl_error pe = {0};
                char fn[128];
                kernel_of_site(str(s, "site"), fn, sizeof fn);
                if (kl_source_parse_text("parent.cu", f->parent, strlen(f->parent), &ps, &pe) == KL_OK)
                    f->off_path = kl_skill_runs_at(ps, task, &task->bench, fn) < 0;
                kl_source_free(ps);
            }
        } else {
            /* a document without its versions (a card written by hand around a step): the step's
             * own features are all there is */
            f->fs.features = json_incref(json_object_get(s, "features"));
            kl_snprintf(f->fs.site, sizeof f->fs.site, "%s", str(s, "site"));
            kernel_of_site(str(s, "site"), f->fs.kernel, sizeof f->fs.kernel);
            f->fs.found = f->fs.features != NULL;
            f->obs = json_object();
        }
        char *code = without_comments(*f->child ? f->child : "");
        f->conditional = f->fs.features ? condition_features(f->fs.features, code) : json_object();
        free(code);
        /* identity: the transform and the kind of site (the string and boolean features of the
         * forward site, and the observables its card states) */
        json_t *kind = json_object();
        json_object_set_new(kind, "transform", json_string(transform));
        const char *fk;
        json_t *fv;
        json_object_foreach(f->conditional, fk, fv) if (json_is_string(fv) || json_is_boolean(fv)) json_object_set(kind, fk, fv);
        for (const char *const *nm = stated_for(transform); *nm; nm++) {
            json_t *v = json_object_get(f->obs, *nm);
            if (json_is_string(v) || json_is_boolean(v)) json_object_set(kind, *nm, v);
        }
        char *ptext = json_dumps(kind, JSON_SORT_KEYS | JSON_COMPACT);
        json_decref(kind);
        char hex[KL_HASH_HEX];
        kl_hash_hex(ptext ? ptext : "", ptext ? strlen(ptext) : 0, hex);
        free(ptext);
        kl_snprintf(f->id, sizeof f->id, "%s-%.6s", transform, hex);
    }
    return KL_OK;
}

kl_status kl_lineage_extract_skills(kl_store *store, const kl_task *task, const char *doc_json,
                                    kl_extract_stats *stats, kl_error *err)
{
    memset(stats, 0, sizeof *stats);
    json_error_t je;
    json_t *doc = json_loads(doc_json, 0, &je);
    if (!doc) return kl_error_set(err, KL_ERR_PARSE, "lineage document: line %d: %s", je.line, je.text);
    kl_status st = KL_OK;
    json_t *steps = json_object_get(doc, "steps");
    size_t nsteps = json_array_size(steps), ncards = 0;
    /* Steps of this lineage with the same id (the same step at several sites) are merged here
     * into one card, which is then stored: storing a lineage's card again replaces it. */
    char **ids = calloc(nsteps + 1, sizeof *ids), **texts = calloc(nsteps + 1, sizeof *texts);
    fstep *fst = calloc(nsteps + 1, sizeof *fst);
    if (!ids || !texts || !fst) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(read_forward(doc, steps, task, fst, err));
    for (size_t k = 0; k < nsteps; k++) {
        json_t *card = card_of_step(doc, steps, k, fst, task);
        char *text = json_dumps(card, JSON_INDENT(2) | JSON_REAL_PRECISION(15)); /* kl_skill_put orders the keys */
        json_decref(card);
        if (!text) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        size_t at = 0;
        while (at < ncards && strcmp(ids[at], fst[k].id) != 0) at++;
        if (at == ncards) {
            ids[ncards] = kl_strdup(fst[k].id);
            texts[ncards++] = text;
        } else {
            char *merged = NULL;
            st = kl_skill_merge(texts[at], text, &merged, err);
            free(text);
            if (st != KL_OK) goto cleanup;
            free(texts[at]);
            texts[at] = merged;
        }
        stats->steps++;
    }
    stats->cards = (unsigned)ncards;
    const char *lineage = str(doc, "key");
    for (size_t c = 0; c < ncards; c++) {
        /* new to the library, or merged with the parts of other lineages */
        char *old = NULL;
        kl_status g = kl_store_get(store, "skill", ids[c], &old, err);
        bool other = false;
        if (g == KL_OK) {
            json_t *o = json_loads(old, 0, NULL);
            size_t i;
            json_t *l;
            json_array_foreach(json_object_get(json_object_get(o, "evidence"), "lineages"), i, l)
                if (strcmp(json_string_value(l), lineage) != 0) other = true;
            json_decref(o);
        } else if (g != KL_ERR_NOT_FOUND) {
            st = g;
            goto cleanup;
        }
        kl_error_clear(err);
        free(old);
        if (other) stats->merged_cards++;
        else stats->new_cards++;
        if ((st = kl_skill_put(store, texts[c], err)) != KL_OK) goto cleanup;
    }
cleanup:
    for (size_t c = 0; c < ncards; c++) free(ids[c]), free(texts[c]);
    for (size_t k = 0; fst && k < nsteps; k++) {
        kl_fwd_site_release(&fst[k].fs);
        json_decref(fst[k].conditional);
        json_decref(fst[k].obs);
    }
    free(ids), free(texts), free(fst);
    json_decref(doc);
    return st;
}
