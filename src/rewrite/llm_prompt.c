/* Prompt templates (the files of prompts/, embedded; a folder may replace them) and their rendering,
 * and the request as JSON for the command backend. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/llm_int.h"
#include "util/util.h"

/* The templates a prompt set holds, in this order. */
static const char *const template_names[] = {"system.md", "simplify.md", "apply.md"};
enum { T_SYSTEM, T_SIMPLIFY, T_APPLY, T_COUNT };

struct kl_llm_prompts {
    char *text[T_COUNT];
    char *origin[T_COUNT]; /* for messages: "prompts/apply.md (built in)" or the file's path */
};

void kl_llm_prompts_free(kl_llm_prompts *p)
{
    if (!p) return;
    for (int i = 0; i < T_COUNT; i++) {
        free(p->text[i]);
        free(p->origin[i]);
    }
    free(p);
}

static const char *builtin_text(const char *name)
{
    for (unsigned i = 0; i < kl_llm_prompt_files_count; i++)
        if (kl_llm_prompt_files[i].name && !strcmp(kl_llm_prompt_files[i].name, name)) return kl_llm_prompt_files[i].text;
    return NULL;
}

kl_status kl_llm_prompts_load(const char *dir, kl_llm_prompts **out, kl_error *err)
{
    kl_status st = KL_OK;
    *out = NULL;
    kl_llm_prompts *p = calloc(1, sizeof *p);
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    if (dir && !kl_dir_exists(dir)) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no such folder (prompts_dir or KLINEAGE_PROMPTS: a folder of "
                          "system.md, simplify.md, apply.md)", dir);
        goto cleanup;
    }
    for (int i = 0; i < T_COUNT; i++) {
        char *path = dir ? kl_path_join(dir, template_names[i]) : NULL;
        if (path && kl_file_exists(path)) {
            size_t len = 0;
            st = kl_file_read(path, 1 << 20, &p->text[i], &len, err);
            if (st == KL_OK && memchr(p->text[i], '\0', len)) {
                st = kl_error_set(err, KL_ERR_INVALID, "%s: holds a NUL byte; a prompt template is text", path);
            }
            p->origin[i] = path;
            if (st != KL_OK) goto cleanup;
            continue;
        }
        free(path);
        const char *t = builtin_text(template_names[i]);
        if (!t) {
            st = kl_error_set(err, KL_ERR_NOT_FOUND, "prompts/%s: not built into this binary", template_names[i]);
            goto cleanup;
        }
        p->text[i] = kl_strdup(t);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "prompts/%s (built in)", template_names[i]);
        p->origin[i] = kl_strbuf_detach(&sb, NULL);
        if (!p->text[i] || !p->origin[i]) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
    }
    *out = p;
    p = NULL;
cleanup:
    kl_llm_prompts_free(p);
    return st;
}

/* ---- JSON fields of the request ----------------------------------------------------------- */

/* Parse an optional JSON field of the request; NULL text gives NULL. */
static kl_status parse_field(const char *field, const char *text, json_t **out, kl_error *err)
{
    *out = NULL;
    if (!text) return KL_OK;
    json_error_t je;
    *out = json_loads(text, JSON_DECODE_ANY, &je);
    if (!*out)
        return kl_error_set(err, KL_ERR_PARSE, "rewrite request: %s: line %d, column %d: %s (expected JSON)", field,
                            je.line, je.column, je.text);
    return KL_OK;
}

static const char *role_name(kl_role r)
{
    switch (r) {
    case KL_ROLE_IN: return "in";
    case KL_ROLE_OUT: return "out";
    case KL_ROLE_INOUT: return "inout";
    }
    return "?";
}

static char *arg_type(const kl_arg *a)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (a->dtype == KL_DTYPE_NONE)
        kl_strbuf_adds(&sb, "int");
    else
        kl_strbuf_addf(&sb, "%s*", kl_dtype_name(a->dtype));
    return kl_strbuf_detach(&sb, NULL);
}

json_t *kl_llm_task_json(const kl_task *task)
{
    if (!task) return json_null();
    json_t *t = json_object();
    if (!t) return NULL;
    json_object_set_new(t, "name", json_string(task->name ? task->name : ""));
    json_object_set_new(t, "summary", json_string(task->summary ? task->summary : ""));
    json_t *sizes = json_array();
    for (unsigned i = 0; i < task->nsizes; i++) json_array_append_new(sizes, json_string(task->sizes[i]));
    json_object_set_new(t, "sizes", sizes);
    json_t *args = json_array();
    for (unsigned i = 0; i < task->nargs; i++) {
        const kl_arg *a = &task->args[i];
        json_t *o = json_object();
        char *type = arg_type(a);
        json_object_set_new(o, "name", json_string(a->name ? a->name : ""));
        json_object_set_new(o, "type", json_string(type ? type : ""));
        free(type);
        if (a->dtype == KL_DTYPE_NONE) {
            if (a->value) json_object_set_new(o, "value", json_string(a->value));
        } else {
            if (a->shape) json_object_set_new(o, "shape", json_string(a->shape));
            json_object_set_new(o, "role", json_string(role_name(a->role)));
        }
        json_array_append_new(args, o);
    }
    json_object_set_new(t, "args", args);
    json_t *tol = json_object();
    if (task->exact) {
        json_object_set_new(tol, "exact", json_true());
    } else {
        json_object_set_new(tol, "rel_l2", json_real(task->rel_l2));
        if (task->max_abs >= 0) json_object_set_new(tol, "max_abs", json_real(task->max_abs));
    }
    json_object_set_new(t, "tolerance", tol);
    if (task->cost_flops || task->cost_bytes) {
        json_t *cost = json_object();
        if (task->cost_flops) json_object_set_new(cost, "flops", json_string(task->cost_flops));
        if (task->cost_bytes) json_object_set_new(cost, "bytes", json_string(task->cost_bytes));
        json_object_set_new(t, "cost", cost);
    }
    if (task->bench.values && task->nsizes) {
        json_t *b = json_object();
        for (unsigned i = 0; i < task->nsizes; i++)
            json_object_set_new(b, task->sizes[i], json_integer((json_int_t)task->bench.values[i]));
        json_object_set_new(t, "bench", b);
    }
    return t;
}

/* The launch() signature of the request's source, or NULL. */
static char *request_signature(const kl_rewrite_request *req)
{
    kl_source *src = NULL;
    kl_error e = {0};
    if (kl_source_parse_text(req->source_name ? req->source_name : "<source>", req->source, strlen(req->source),
                             &src, &e) != KL_OK)
        return NULL;
    char *sig = kl_llm_launch_signature(src);
    kl_source_free(src);
    return sig;
}

kl_status kl_llm_request_json(const kl_rewrite_request *req, json_t **out, kl_error *err)
{
    kl_status st = KL_OK;
    json_t *features = NULL, *skill = NULL, *rejected = NULL, *doc = NULL;
    char *sig = NULL;
    *out = NULL;
    if (!req->source) return kl_error_set(err, KL_ERR_INVALID, "rewrite request: no source");
    KL_TRY(parse_field("features_json", req->features_json, &features, err));
    KL_TRY(parse_field("skill_json", req->skill_json, &skill, err));
    KL_TRY(parse_field("rejected_json", req->rejected_json, &rejected, err));
    if (rejected && !json_is_array(rejected)) {
        st = kl_error_set(err, KL_ERR_INVALID, "rewrite request: rejected_json: expected a JSON array");
        goto cleanup;
    }
    sig = request_signature(req);
    doc = json_object();
    if (!doc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    json_object_set_new(doc, "kind", json_string(req->kind == KL_REQ_APPLY ? "apply" : "simplify"));
    json_object_set_new(doc, "source", json_string(req->source));
    json_object_set_new(doc, "source_name", json_string(req->source_name ? req->source_name : ""));
    json_object_set_new(doc, "task", kl_llm_task_json(req->task));
    json_object_set_new(doc, "launch", sig ? json_string(sig) : json_null());
    json_object_set_new(doc, "features", features ? features : json_null());
    features = NULL;
    json_object_set_new(doc, "skill", skill ? skill : json_null());
    skill = NULL;
    json_object_set_new(doc, "transform", req->transform ? json_string(req->transform) : json_null());
    json_object_set_new(doc, "rejected", rejected ? rejected : json_array());
    rejected = NULL;
    json_object_set_new(doc, "max_candidates", json_integer(req->max_candidates));
    if (!json_is_string(json_object_get(doc, "source"))) {
        /* jansson refuses text that is not UTF-8 */
        st = kl_error_set(err, KL_ERR_INVALID, "%s: the source is not valid UTF-8",
                          req->source_name ? req->source_name : "<source>");
        goto cleanup;
    }
    *out = doc;
    doc = NULL;
cleanup:
    json_decref(features);
    json_decref(skill);
    json_decref(rejected);
    json_decref(doc);
    free(sig);
    return st;
}

/* ---- rendering ------------------------------------------------------------------------------ */

static void add_json_block(kl_strbuf *sb, const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
    kl_strbuf_adds(sb, "```json\n");
    kl_strbuf_adds(sb, s ? s : "null");
    kl_strbuf_adds(sb, "\n```");
    free(s);
}

static void render_task(kl_strbuf *sb, const json_t *task)
{
    if (!json_is_object(task)) {
        kl_strbuf_adds(sb, "(no task description: keep the kernel's outputs exactly as they are)");
        return;
    }
    kl_strbuf_addf(sb, "**%s**: %s\n", json_string_value(json_object_get(task, "name")),
                   json_string_value(json_object_get(task, "summary")));
    kl_strbuf_adds(sb, "\n`launch()` arguments, in order (then a `cudaStream_t`):\n");
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(task, "args"), i, a) {
        const char *shape = json_string_value(json_object_get(a, "shape"));
        const char *value = json_string_value(json_object_get(a, "value"));
        kl_strbuf_addf(sb, "- `%s`: %s", json_string_value(json_object_get(a, "name")),
                       json_string_value(json_object_get(a, "type")));
        if (shape)
            kl_strbuf_addf(sb, ", %s elements, %s", shape, json_string_value(json_object_get(a, "role")));
        else if (value)
            kl_strbuf_addf(sb, " = %s", value);
        kl_strbuf_addc(sb, '\n');
    }
    json_t *tol = json_object_get(task, "tolerance");
    if (json_is_true(json_object_get(tol, "exact")))
        kl_strbuf_adds(sb, "\nOutputs must match the reference exactly.\n");
    else
        kl_strbuf_addf(sb, "\nOutputs must match a float64 reference within a relative L2 error of %g.\n",
                       json_number_value(json_object_get(tol, "rel_l2")));
    json_t *bench = json_object_get(task, "bench");
    if (json_object_size(bench)) {
        kl_strbuf_adds(sb, "Timed at");
        const char *k;
        json_t *v;
        const char *sep = " ";
        json_object_foreach(bench, k, v) {
            kl_strbuf_addf(sb, "%s%s=%" JSON_INTEGER_FORMAT, sep, k, json_integer_value(v));
            sep = ", ";
        }
        kl_strbuf_adds(sb, "; checked also on tiny and odd sizes.\n");
    }
}

static void render_rejected(kl_strbuf *sb, const json_t *rejected)
{
    if (!json_array_size(rejected)) {
        kl_strbuf_adds(sb, "(nothing yet)");
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(rejected, i, r) {
        if (json_is_object(r)) {
            const char *t = json_string_value(json_object_get(r, "transform"));
            const char *s = json_string_value(json_object_get(r, "site"));
            const char *why = json_string_value(json_object_get(r, "reason"));
            kl_strbuf_addf(sb, "- %s", t && *t ? t : "(unnamed)");
            if (s && *s) kl_strbuf_addf(sb, " at %s", s);
            if (why && *why) kl_strbuf_addf(sb, ": %s", why);
            kl_strbuf_addc(sb, '\n');
        } else if (json_is_string(r)) {
            kl_strbuf_addf(sb, "- %s\n", json_string_value(r));
        } else {
            char *s = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);
            kl_strbuf_addf(sb, "- %s\n", s ? s : "?");
            free(s);
        }
    }
}

static void add_code_excerpt(kl_strbuf *sb, const char *label, const char *code)
{
    if (!code || !*code) return;
    kl_strbuf_addf(sb, "\n%s:\n```cuda\n%s\n```\n", label, code);
}

/* The skill card as Markdown: its intent, transform, anchor, conditions and risks. */
static void render_skill(kl_strbuf *sb, const json_t *skill, const char *transform)
{
    if (!json_is_object(skill)) {
        if (transform)
            kl_strbuf_addf(sb, "Apply the optimization `%s` where it fits and pays.", transform);
        else
            kl_strbuf_adds(sb, "No particular one: apply the single optimization you judge most likely to make "
                               "this kernel faster on the timed shape.");
        return;
    }
    const char *id = json_string_value(json_object_get(skill, "id"));
    const char *t = json_string_value(json_object_get(skill, "transform"));
    const char *intent = json_string_value(json_object_get(skill, "intent"));
    kl_strbuf_addf(sb, "Skill `%s`: transform `%s`.\n", id ? id : "?", t ? t : (transform ? transform : "?"));
    if (intent) kl_strbuf_addf(sb, "\nIntent: %s\n", intent);
    json_t *params = json_object_get(skill, "params");
    if (json_object_size(params)) {
        char *p = json_dumps(params, JSON_COMPACT);
        kl_strbuf_addf(sb, "\nParameters: `%s`\n", p ? p : "{}");
        free(p);
    }
    json_t *anchor = json_object_get(skill, "anchor");
    if (json_is_object(anchor)) {
        const char *kernel = json_string_value(json_object_get(anchor, "kernel"));
        if (kernel) kl_strbuf_addf(sb, "\nLearned in kernel `%s`.\n", kernel);
        const char *before = json_string_value(json_object_get(anchor, "before"));
        const char *after = json_string_value(json_object_get(anchor, "after"));
        if (!before) before = json_string_value(json_object_get(anchor, "code_before"));
        if (!after) after = json_string_value(json_object_get(anchor, "code_after"));
        add_code_excerpt(sb, "There, the code before", before);
        add_code_excerpt(sb, "became", after);
    }
    json_t *pre = json_object_get(skill, "preconditions");
    if (json_array_size(pre)) {
        kl_strbuf_adds(sb, "\nConditions under which it is valid (apply it only where they hold):\n");
        size_t i;
        json_t *c;
        json_array_foreach(pre, i, c) {
            const char *pred = json_is_string(c) ? json_string_value(c) : json_string_value(json_object_get(c, "predicate"));
            const char *kind = json_string_value(json_object_get(c, "kind"));
            kl_strbuf_addf(sb, "- `%s`%s%s%s\n", pred ? pred : "?", kind ? " (" : "", kind ? kind : "", kind ? ")" : "");
        }
    }
    json_t *risks = json_object_get(skill, "risks");
    if (json_array_size(risks)) {
        kl_strbuf_adds(sb, "\nWhat went wrong where the conditions did not hold:\n");
        size_t i;
        json_t *r;
        json_array_foreach(risks, i, r) {
            if (json_is_string(r)) {
                kl_strbuf_addf(sb, "- %s\n", json_string_value(r));
                continue;
            }
            const char *broke = json_string_value(json_object_get(r, "broke"));
            const char *detail = json_string_value(json_object_get(r, "detail"));
            char *shape = json_object_get(r, "shape") ? json_dumps(json_object_get(r, "shape"), JSON_COMPACT) : NULL;
            kl_strbuf_addf(sb, "- %s%s%s%s%s\n", broke ? broke : "failed", shape ? " at " : "", shape ? shape : "",
                           detail ? ": " : "", detail ? detail : "");
            free(shape);
        }
    }
}

/* The value of placeholder `name`, or NULL when it is not one. */
static char *placeholder(const char *name, const kl_rewrite_request *req, const json_t *doc)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (!strcmp(name, "source")) {
        kl_strbuf_adds(&sb, req->source);
    } else if (!strcmp(name, "source_name")) {
        kl_strbuf_adds(&sb, req->source_name ? req->source_name : "kernel.cu");
    } else if (!strcmp(name, "task")) {
        render_task(&sb, json_object_get(doc, "task"));
    } else if (!strcmp(name, "launch")) {
        const char *sig = json_string_value(json_object_get(doc, "launch"));
        kl_strbuf_adds(&sb, sig ? sig : "(no extern \"C\" launch() found)");
    } else if (!strcmp(name, "features")) {
        json_t *f = json_object_get(doc, "features");
        if (json_is_null(f) || (json_is_array(f) && !json_array_size(f)))
            kl_strbuf_adds(&sb, "(none recognized by the rules analysis)");
        else
            add_json_block(&sb, f);
    } else if (!strcmp(name, "rejected")) {
        render_rejected(&sb, json_object_get(doc, "rejected"));
    } else if (!strcmp(name, "skill")) {
        render_skill(&sb, json_object_get(doc, "skill"), req->transform);
    } else if (!strcmp(name, "transform")) {
        const char *t = json_string_value(json_object_get(json_object_get(doc, "skill"), "transform"));
        if (!t) t = req->transform;
        kl_strbuf_adds(&sb, t ? t : "<a short name for the optimization>");
    } else {
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* Substitute {{name}} in tmpl. An unknown placeholder or an unclosed "{{" is an error naming
 * the template and the line. */
static kl_status render(const char *tmpl, const char *origin, const kl_rewrite_request *req, const json_t *doc,
                        char **out, kl_error *err)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *p = tmpl;
    *out = NULL;
    for (;;) {
        const char *open = strstr(p, "{{");
        if (!open) {
            kl_strbuf_adds(&sb, p);
            break;
        }
        kl_strbuf_add(&sb, p, (size_t)(open - p));
        const char *close = strstr(open + 2, "}}");
        const char *nl = strchr(open, '\n');
        unsigned line, col;
        kl_text_position(tmpl, strlen(tmpl), (size_t)(open - tmpl), &line, &col);
        if (!close || (nl && nl < close)) {
            kl_strbuf_release(&sb);
            return kl_error_set(err, KL_ERR_PARSE, "%s:%u:%u: \"{{\" without \"}}\" on the same line", origin, line,
                                col);
        }
        char name[64];
        size_t n = (size_t)(close - open - 2);
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, open + 2, n);
        name[n] = '\0';
        char *value = placeholder(name, req, doc);
        if (!value) {
            kl_strbuf_release(&sb);
            return kl_error_set(err, KL_ERR_INVALID,
                                "%s:%u:%u: unknown placeholder {{%s}} (expected one of source, source_name, task, "
                                "launch, features, rejected, skill, transform)",
                                origin, line, col, name);
        }
        kl_strbuf_adds(&sb, value);
        free(value);
        p = close + 2;
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    *out = kl_strbuf_detach(&sb, NULL);
    return *out ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

kl_status kl_llm_prompts_render(const kl_llm_prompts *p, const kl_rewrite_request *req, char **system, char **user,
                                kl_error *err)
{
    kl_status st = KL_OK;
    json_t *doc = NULL;
    *system = *user = NULL;
    KL_TRY(kl_llm_request_json(req, &doc, err));
    int which = req->kind == KL_REQ_APPLY ? T_APPLY : T_SIMPLIFY;
    KL_TRY(render(p->text[T_SYSTEM], p->origin[T_SYSTEM], req, doc, system, err));
    KL_TRY(render(p->text[which], p->origin[which], req, doc, user, err));
cleanup:
    if (st != KL_OK) {
        free(*system);
        *system = NULL;
    }
    json_decref(doc);
    return st;
}
