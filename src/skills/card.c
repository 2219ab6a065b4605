/* The card model: parse and validate against docs/skill-card.md, accessors, the summary and
 * the JSON rendering in a fixed key order. One schema table drives both the validation and
 * the key order, so they cannot disagree. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills_int.h"

/* ---- small helpers shared by the stage ---------------------------------------------------- */

const char *kl_sk_str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

double kl_sk_num(const json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

void kl_sk_shape_text(kl_strbuf *sb, const json_t *shape)
{
    const char *k;
    json_t *v;
    bool first = true;
    json_object_foreach((json_t *)shape, k, v) {
        kl_strbuf_addf(sb, "%s%s=", first ? "" : ", ", k);
        if (json_is_integer(v)) kl_strbuf_addf(sb, "%lld", (long long)json_integer_value(v));
        else kl_strbuf_adds(sb, "?");
        first = false;
    }
}

void kl_sk_short_hash(const char *hash, char *buf, size_t size)
{
    kl_snprintf(buf, size, "%.8s", hash ? hash : "");
}

char *kl_sk_lineages_text(const json_t *card)
{
    json_t *l = json_object_get(json_object_get(card, "evidence"), "lineages");
    if (!json_array_size(l)) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t i;
    json_t *v;
    json_array_foreach(l, i, v) kl_strbuf_addf(&sb, "%s%s", i ? ", " : "", json_string_value(v));
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the schema ------------------------------------------------------------------------- */

typedef enum ftype {
    F_STRING,      /* a string */
    F_NAME,        /* a non-empty string */
    F_INT,         /* an integer >= 0 */
    F_NUMBER,      /* a number */
    F_BOOL,
    F_FREE,        /* any object, members free */
    F_SHAPE,       /* an object of integers */
    F_STRINGS,     /* an array of strings */
    F_SHAPES,      /* an array of shapes */
    F_OBJECT,      /* an object of `sub` */
    F_OBJECTS,     /* an array of objects of `sub` */
    F_PREDICATE    /* a string or null (checked with the condition's kind) */
} ftype;

typedef struct schema schema;
typedef struct field {
    const char *key;
    ftype type;
    const schema *sub;
    bool required;
} field;
struct schema {
    const field *fields;
    unsigned n;
};
#define SCHEMA(arr) {arr, sizeof arr / sizeof arr[0]}

static const field f_pattern[] = {{"transform", F_STRING, NULL, false}, {"site_features", F_FREE, NULL, false}};
static const schema s_pattern = SCHEMA(f_pattern);
static const field f_anchor[] = {{"kernel", F_STRING, NULL, false}, {"site", F_STRING, NULL, false},
                                 {"before", F_STRING, NULL, false}, {"after", F_STRING, NULL, false},
                                 {"pattern", F_OBJECT, &s_pattern, false}, {"features", F_FREE, NULL, false},
                                 {"forward", F_FREE, NULL, false}};
static const schema s_anchor = SCHEMA(f_anchor);
static const field f_pre[] = {{"predicate", F_PREDICATE, NULL, true}, {"kind", F_NAME, NULL, true},
                              {"verified", F_BOOL, NULL, false},      {"because", F_STRING, NULL, false},
                              {"evidence", F_STRINGS, NULL, false}, {"bracket", F_FREE, NULL, false}};
static const schema s_pre = SCHEMA(f_pre);
static const field f_effect[] = {{"device", F_STRING, NULL, false},  {"date", F_STRING, NULL, false},
                                 {"label", F_STRING, NULL, false},   {"shape", F_SHAPE, NULL, false},
                                 {"speedup", F_NUMBER, NULL, true},  {"before_ms", F_NUMBER, NULL, false},
                                 {"after_ms", F_NUMBER, NULL, false}, {"verdict", F_STRING, NULL, false},
                                 {"lineage", F_STRING, NULL, false}, {"task", F_STRING, NULL, false},
                                 {"context", F_FREE, NULL, false}};
static const schema s_effect = SCHEMA(f_effect);
static const field f_risk[] = {{"shape", F_SHAPE, NULL, false},   {"broke", F_NAME, NULL, true},
                               {"detail", F_STRING, NULL, false},  {"speedup", F_NUMBER, NULL, false},
                               {"label", F_STRING, NULL, false},   {"verdict", F_STRING, NULL, false},
                               {"lineage", F_STRING, NULL, false}, {"task", F_STRING, NULL, false},
                               {"context", F_FREE, NULL, false}};
static const schema s_risk = SCHEMA(f_risk);
static const field f_probes[] = {{"count", F_INT, NULL, true},
                                 {"failures", F_INT, NULL, false},
                                 {"note", F_STRING, NULL, false},
                                 {"shapes", F_SHAPES, NULL, false}};
static const schema s_probes = SCHEMA(f_probes);
static const field f_evidence[] = {{"task", F_STRING, NULL, false},
                                   {"lineages", F_STRINGS, NULL, false},
                                   {"verdicts", F_STRINGS, NULL, false}};
static const schema s_evidence = SCHEMA(f_evidence);
static const field f_contra[] = {{"predicate", F_NAME, NULL, true},
                                 {"held_in", F_STRING, NULL, false},
                                 {"not_found_in", F_STRING, NULL, false}};
static const schema s_contra = SCHEMA(f_contra);
static const field f_step[] = {{"card", F_STRING, NULL, false},
                               {"transform", F_STRING, NULL, false},
                               {"lineage", F_STRING, NULL, false}};
static const schema s_step = SCHEMA(f_step);
static const field f_lpath[] = {{"lineage", F_STRING, NULL, false}, {"task", F_STRING, NULL, false},
                                {"step", F_INT, NULL, false},       {"of", F_INT, NULL, false},
                                {"before", F_STRINGS, NULL, false}, {"after", F_STRINGS, NULL, false}};
static const schema s_lpath = SCHEMA(f_lpath);
static const field f_path[] = {{"follows", F_OBJECTS, &s_step, false},
                               {"precedes", F_OBJECTS, &s_step, false},
                               {"lineages", F_OBJECTS, &s_lpath, false}};
static const schema s_path = SCHEMA(f_path);
static const field f_trial[] = {{"task", F_STRING, NULL, false},    {"site", F_STRING, NULL, false},
                                {"gain", F_NUMBER, NULL, false},    {"verdict", F_NAME, NULL, true},
                                {"recorded", F_NUMBER, NULL, false}, {"detail", F_STRING, NULL, false},
                                {"key", F_STRING, NULL, false},     {"own", F_BOOL, NULL, false}};
static const schema s_trial = SCHEMA(f_trial);
static const field f_admission[] = {{"status", F_NAME, NULL, true},
                                    {"tolerance", F_NUMBER, NULL, false},
                                    {"date", F_STRING, NULL, false},
                                    {"trials", F_OBJECTS, &s_trial, false}};
static const schema s_admission = SCHEMA(f_admission);
static const field f_card[] = {
    {"id", F_NAME, NULL, true},           {"format", F_INT, NULL, false},
    {"transform", F_NAME, NULL, true},    {"intent", F_STRING, NULL, false},
    {"params", F_FREE, NULL, false},      {"anchor", F_OBJECT, &s_anchor, false},
    {"preconditions", F_OBJECTS, &s_pre, false}, {"requires", F_STRINGS, NULL, false},
    {"requires_evidence", F_STRINGS, NULL, false},
    {"effect", F_OBJECTS, &s_effect, false},     {"risks", F_OBJECTS, &s_risk, false},
    {"probes", F_OBJECT, &s_probes, false},      {"evidence", F_OBJECT, &s_evidence, false},
    {"contradictions", F_OBJECTS, &s_contra, false}, {"path", F_OBJECT, &s_path, false},
    {"admission", F_OBJECT, &s_admission, false}};
static const schema s_card = SCHEMA(f_card);

static const char *const precondition_kinds[] = {"static", "probed", "probed-perf", "unexplained", NULL};
static const char *const risk_kinds[] = {"wrong", "slower", "crash", "compile", NULL};
static const char *const admission_statuses[] = {"admitted", "rejected", "untried", NULL};
static const char *const trial_verdicts[] = {"reproduced", "lost", "failed", "not-applicable", NULL};

/* ---- validation ---------------------------------------------------------------------------- */

typedef struct vctx {
    const char *origin;
    const char *prefix;       /* before every key path: "[2]" for an element of an array */
    kl_error *err;
} vctx;

static kl_status bad(vctx *v, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kl_status bad(vctx *v, const char *path, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bool pre = *v->prefix != '\0';
    return kl_error_set(v->err, KL_ERR_INVALID, "%s: %s%s%s%s%s", v->origin, v->prefix, pre && *path ? "." : "", path,
                        pre || *path ? ": " : "", msg);
}

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static void join_key(char *out, size_t size, const char *path, const char *key)
{
    if (*path) kl_snprintf(out, size, "%s.%s", path, key);
    else kl_snprintf(out, size, "%s", key);
}

static bool one_of(const char *s, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(s, *names)) return true;
    return false;
}

static void list_names(char *out, size_t size, const char *const *names)
{
    out[0] = '\0';
    size_t len = 0;
    for (unsigned i = 0; names[i]; i++) {
        kl_snprintf(out + len, size - len, "%s%s", i ? ", " : "", names[i]);
        len = strlen(out);
    }
}

static kl_status check_object(vctx *v, const json_t *o, const schema *s, const char *path);

static kl_status check_shape(vctx *v, const json_t *j, const char *path)
{
    if (!json_is_object(j)) return bad(v, path, "expected an object of sizes, not %s", type_name(j));
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)j, k, val) {
        char p[300];
        join_key(p, sizeof p, path, k);
        if (!json_is_integer(val)) return bad(v, p, "expected an integer size, not %s", type_name(val));
    }
    return KL_OK;
}

static kl_status check_value(vctx *v, const json_t *j, const field *f, const char *path)
{
    char p[300];
    size_t i;
    json_t *e;
    switch (f->type) {
    case F_STRING:
        if (!json_is_string(j)) return bad(v, path, "expected a string, not %s", type_name(j));
        return KL_OK;
    case F_NAME:
        if (!json_is_string(j)) return bad(v, path, "expected a string, not %s", type_name(j));
        if (!*json_string_value(j)) return bad(v, path, "expected a non-empty string");
        return KL_OK;
    case F_PREDICATE:
        if (!json_is_string(j) && !json_is_null(j)) return bad(v, path, "expected a string, not %s", type_name(j));
        return KL_OK;
    case F_INT:
        if (!json_is_integer(j)) return bad(v, path, "expected an integer, not %s", type_name(j));
        if (json_integer_value(j) < 0) return bad(v, path, "expected an integer >= 0, not %lld",
                                                  (long long)json_integer_value(j));
        return KL_OK;
    case F_NUMBER:
        if (!json_is_number(j)) return bad(v, path, "expected a number, not %s", type_name(j));
        return KL_OK;
    case F_BOOL:
        if (!json_is_boolean(j)) return bad(v, path, "expected true or false, not %s", type_name(j));
        return KL_OK;
    case F_FREE:
        if (!json_is_object(j)) return bad(v, path, "expected an object, not %s", type_name(j));
        return KL_OK;
    case F_SHAPE: return check_shape(v, j, path);
    case F_STRINGS:
        if (!json_is_array(j)) return bad(v, path, "expected an array of strings, not %s", type_name(j));
        json_array_foreach(j, i, e) if (!json_is_string(e)) {
            kl_snprintf(p, sizeof p, "%s[%zu]", path, i);
            return bad(v, p, "expected a string, not %s", type_name(e));
        }
        return KL_OK;
    case F_SHAPES:
        if (!json_is_array(j)) return bad(v, path, "expected an array of shapes, not %s", type_name(j));
        json_array_foreach(j, i, e) {
            kl_snprintf(p, sizeof p, "%s[%zu]", path, i);
            kl_status st = check_shape(v, e, p);
            if (st != KL_OK) return st;
        }
        return KL_OK;
    case F_OBJECT:
        if (!json_is_object(j)) return bad(v, path, "expected an object, not %s", type_name(j));
        return check_object(v, j, f->sub, path);
    case F_OBJECTS:
        if (!json_is_array(j)) return bad(v, path, "expected an array of objects, not %s", type_name(j));
        json_array_foreach(j, i, e) {
            kl_snprintf(p, sizeof p, "%s[%zu]", path, i);
            if (!json_is_object(e)) return bad(v, p, "expected an object, not %s", type_name(e));
            kl_status st = check_object(v, e, f->sub, p);
            if (st != KL_OK) return st;
        }
        return KL_OK;
    }
    return KL_OK;
}

static const field *find_field(const schema *s, const char *key)
{
    for (unsigned i = 0; i < s->n; i++)
        if (!strcmp(s->fields[i].key, key)) return &s->fields[i];
    return NULL;
}

static kl_status check_object(vctx *v, const json_t *o, const schema *s, const char *path)
{
    char p[300];
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)o, k, val) {
        if (find_field(s, k) || kl_str_starts(k, "x-")) continue;
        join_key(p, sizeof p, path, k);
        return bad(v, p, "unknown key (docs/skill-card.md lists the keys; extensions start with \"x-\")");
    }
    for (unsigned i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        json_t *j = json_object_get(o, f->key);
        join_key(p, sizeof p, path, f->key);
        if (!j) {
            if (f->required) return bad(v, p, "missing");
            continue;
        }
        kl_status st = check_value(v, j, f, p);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* What the schema cannot say: the id is a safe folder name, the format is one this build
 * reads, the kinds are known, predicates parse, counts add up. */
static kl_status check_meaning(vctx *v, const json_t *c)
{
    const char *id = kl_sk_str(c, "id");
    if (strlen(id) > 128) return bad(v, "id", "longer than 128 characters");
    if (id[0] == '-') return bad(v, "id", "\"%s\" starts with '-': it would read as an option on the command line", id);
    if (id[0] == '.' || strchr(id, '/') || strchr(id, '\\'))
        return bad(v, "id", "\"%s\" cannot name a folder (no '/', '\\', or leading '.')", id);
    for (const unsigned char *s = (const unsigned char *)id; *s; s++)
        if (*s < 0x20 || *s == 0x7f || *s == ' ') return bad(v, "id", "\"%s\" holds a blank or a control character", id);
    json_t *fmt = json_object_get(c, "format");
    if (fmt && json_integer_value(fmt) != KL_SKILL_FORMAT)
        return bad(v, "format", "%lld is not a card format this klineage reads (%d)", (long long)json_integer_value(fmt),
                   KL_SKILL_FORMAT);
    char p[300], names[200];
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c, "preconditions"), i, e) {
        const char *kind = kl_sk_str(e, "kind");
        kl_snprintf(p, sizeof p, "preconditions[%zu].kind", i);
        if (!one_of(kind, precondition_kinds)) {
            list_names(names, sizeof names, precondition_kinds);
            return bad(v, p, "\"%s\" is not one of %s", kind, names);
        }
        json_t *pred = json_object_get(e, "predicate");
        kl_snprintf(p, sizeof p, "preconditions[%zu].predicate", i);
        if (json_is_null(pred)) {
            if (strcmp(kind, "unexplained") != 0)
                return bad(v, p, "expected a string (only an \"unexplained\" condition has no predicate)");
            continue;
        }
        kl_predicate pr;
        kl_error perr = {0};
        if (kl_predicate_parse(json_string_value(pred), &pr, &perr) != KL_OK) return bad(v, p, "%s", perr.message);
    }
    json_array_foreach(json_object_get(c, "effect"), i, e) {
        kl_snprintf(p, sizeof p, "effect[%zu].speedup", i);
        if (!(kl_sk_num(e, "speedup", 0) > 0)) return bad(v, p, "expected a number > 0 (time before / time after)");
    }
    json_array_foreach(json_object_get(c, "risks"), i, e) {
        kl_snprintf(p, sizeof p, "risks[%zu].broke", i);
        if (!one_of(kl_sk_str(e, "broke"), risk_kinds)) {
            list_names(names, sizeof names, risk_kinds);
            return bad(v, p, "\"%s\" is not one of %s", kl_sk_str(e, "broke"), names);
        }
    }
    json_t *adm = json_object_get(c, "admission");
    if (adm) {
        if (!one_of(kl_sk_str(adm, "status"), admission_statuses)) {
            list_names(names, sizeof names, admission_statuses);
            return bad(v, "admission.status", "\"%s\" is not one of %s", kl_sk_str(adm, "status"), names);
        }
        json_array_foreach(json_object_get(adm, "trials"), i, e) {
            kl_snprintf(p, sizeof p, "admission.trials[%zu].verdict", i);
            if (!one_of(kl_sk_str(e, "verdict"), trial_verdicts)) {
                list_names(names, sizeof names, trial_verdicts);
                return bad(v, p, "\"%s\" is not one of %s", kl_sk_str(e, "verdict"), names);
            }
        }
    }
    json_t *pr = json_object_get(c, "probes");
    if (pr && json_integer_value(json_object_get(pr, "failures")) > json_integer_value(json_object_get(pr, "count")))
        return bad(v, "probes.failures", "%lld failures in %lld probes",
                   (long long)json_integer_value(json_object_get(pr, "failures")),
                   (long long)json_integer_value(json_object_get(pr, "count")));
    return KL_OK;
}

kl_status kl_sk_from_json_at(const json_t *doc, const char *origin, const char *prefix, kl_skill **out, kl_error *err)
{
    *out = NULL;
    vctx v = {origin ? origin : "skill card", prefix ? prefix : "", err};
    if (!json_is_object(doc)) return bad(&v, "", "expected a card (a JSON object), not %s", type_name(doc));
    kl_status st = check_object(&v, doc, &s_card, "");
    if (st == KL_OK) st = check_meaning(&v, doc);
    if (st != KL_OK) return st;
    kl_skill *c = calloc(1, sizeof *c);
    if (!c || !(c->doc = json_deep_copy(doc))) {
        free(c);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    c->id = kl_sk_str(c->doc, "id");
    c->transform = kl_sk_str(c->doc, "transform");
    c->intent = kl_sk_str(c->doc, "intent");
    *out = c;
    return KL_OK;
}

kl_status kl_skill_from_json(const json_t *doc, const char *origin, kl_skill **out, kl_error *err)
{
    return kl_sk_from_json_at(doc, origin, NULL, out, err);
}

kl_status kl_skill_parse(const char *json_text, const char *origin, kl_skill **out, kl_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *doc = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return kl_error_set(err, KL_ERR_PARSE, "%s:%d:%d: %s", origin ? origin : "skill card", je.line, je.column,
                            je.text);
    kl_status st = kl_skill_from_json(doc, origin, out, err);
    json_decref(doc);
    return st;
}

void kl_skill_free(kl_skill *card)
{
    if (!card) return;
    json_decref(card->doc);
    free(card);
}

const char *kl_skill_id(const kl_skill *card) { return card->id; }
const char *kl_skill_transform(const kl_skill *card) { return card->transform; }
const char *kl_skill_intent(const kl_skill *card) { return card->intent; }
const json_t *kl_skill_doc(const kl_skill *card) { return card->doc; }

void kl_skill_summarize(const kl_skill *card, kl_skill_summary *out)
{
    memset(out, 0, sizeof *out);
    const json_t *c = card->doc;
    out->id = card->id;
    out->transform = card->transform;
    out->intent = card->intent;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c, "preconditions"), i, e) {
        if (!json_is_string(json_object_get(e, "predicate"))) continue;
        out->npreconditions++;
        if (kl_str_starts(kl_sk_str(e, "kind"), "probed")) out->nprobed++;
    }
    out->nrisks = (unsigned)json_array_size(json_object_get(c, "risks"));
    out->nlineages = (unsigned)json_array_size(json_object_get(json_object_get(c, "evidence"), "lineages"));
    out->ncontradictions = (unsigned)json_array_size(json_object_get(c, "contradictions"));
    out->nrequires = (unsigned)json_array_size(json_object_get(c, "requires"));
    out->probes = (unsigned)json_integer_value(json_object_get(json_object_get(c, "probes"), "count"));
    out->probe_failures = (unsigned)json_integer_value(json_object_get(json_object_get(c, "probes"), "failures"));
    out->best_gain = out->best_probe = -1;
    json_array_foreach(json_object_get(c, "effect"), i, e) {
        double s = kl_sk_num(e, "speedup", -1);
        const char *label = kl_sk_str(e, "label");
        /* at the bench shape (or, for a step on a path the bench shape does not run, at the
         * shape that runs it); an effect without a label counts as the bench's */
        if (!strcmp(label, "probe")) {
            if (s > out->best_probe) out->best_probe = s;
        } else if (!strcmp(label, "off-path")) {
            continue; /* measured where its code did not run: it says nothing */
        } else if (s > out->best_gain) {
            out->best_gain = s;
        }
    }
    json_array_foreach(json_object_get(c, "risks"), i, e) if (!strcmp(kl_sk_str(e, "broke"), "slower")) out->nslower++;
    const char *adm = kl_sk_str(json_object_get(c, "admission"), "status");
    out->admission = *adm ? adm : "untried";
}

/* ---- JSON in the fixed key order ------------------------------------------------------------- */

static json_t *ordered(const json_t *o, const schema *s);

static json_t *ordered_value(const json_t *j, const field *f)
{
    if (f->type == F_OBJECT) return ordered(j, f->sub);
    if (f->type == F_OBJECTS) {
        json_t *a = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) json_array_append_new(a, ordered(e, f->sub));
        return a;
    }
    return json_deep_copy(j);
}

/* A copy of o with the schema's keys first, in the schema's order, then the "x-" keys in
 * their own order. */
static json_t *ordered(const json_t *o, const schema *s)
{
    json_t *out = json_object();
    for (unsigned i = 0; i < s->n; i++) {
        json_t *j = json_object_get(o, s->fields[i].key);
        if (j) json_object_set_new(out, s->fields[i].key, ordered_value(j, &s->fields[i]));
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) if (!find_field(s, k)) json_object_set_new(out, k, json_deep_copy(v));
    return out;
}

json_t *kl_sk_ordered(const kl_skill *card) { return ordered(card->doc, &s_card); }

char *kl_skill_to_json(const kl_skill *card)
{
    json_t *o = ordered(card->doc, &s_card);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(o);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return NULL;
    }
    t2[n] = '\n';
    t2[n + 1] = '\0';
    return t2;
}
