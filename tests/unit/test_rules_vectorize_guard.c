/* The rules catalog: vectorize's guarded form (src/rewrite/rules/vectorize.c) when several
 * vector paths share one guard. The softmax expert fills a register array with float4 loads
 * under `if (VECTOR)` (element c+e of the row in v[i*VEC+e]) and writes it back with float4
 * stores under the same guard; the scalar else paths use another order (v[i] is column
 * i*THREADS+tid). Removing one path alone mixes the two orders: on the H200 both single
 * removals were rejected at the correct stage (rel_l2 1.12 at 1024x1024). They are one site. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

static char *read_expert(const char *task)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/tasks/%s/expert.cu", root, task);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The vectorize sites found present (removable or refused) in kernel `kernel`, as a JSON array (owned). */
static json_t *present_in(const char *text, const char *kernel)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, "vectorize", &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *all = json_loads(json, 0, NULL), *out = json_array();
    free(json);
    assert_non_null(all);
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s) {
        const char *site = json_string_value(json_object_get(s, "site"));
        const char *dir = json_string_value(json_object_get(s, "direction"));
        bool found = !strcmp(dir, "present") ||
                     (!strcmp(dir, "refused") && !strcmp(json_string_value(json_object_get(s, "refused")), "remove"));
        if (found && !strncmp(site, kernel, strlen(kernel)) &&
            site[strlen(kernel)] == ':')
            json_array_append(out, s);
    }
    json_decref(all);
    return out;
}

static void one_site_for_paths_on_one_guard(void **state)
{
    (void)state;
    const char *tasks[] = {"softmax", "layernorm"};
    const char *kernels[] = {"softmax_rows", "layernorm_rows"};
    const int paths[] = {2, 3}; /* softmax: load, store; layernorm: load, variance pass, store */
    for (unsigned k = 0; k < 2; k++) {
        char *text = read_expert(tasks[k]);
        json_t *sites = present_in(text, kernels[k]);
        /* every branch on `if (VECTOR)`: one site, which says how many it takes */
        assert_int_equal(json_array_size(sites), 1);
        json_t *feat = json_object_get(json_array_get(sites, 0), "features");
        assert_int_equal(json_integer_value(json_object_get(feat, "same_guard")), paths[k]);
        const char *site = json_string_value(json_object_get(json_array_get(sites, 0), "site"));
        char *out = NULL, *note = NULL;
        kl_error err = {0};
        if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, "vectorize", site, true, NULL, &out, &note, &err) != KL_OK)
            fail_msg("%s: %s", site, err.message);
        /* every vector path of the kernel is gone, the scalar ones stay, nothing else changed */
        char decl[64];
        kl_snprintf(decl, sizeof decl, "%s(const", kernels[k]); /* the kernel's definition, not a mention */
        const char *body = strstr(out, decl);
        assert_non_null(body);
        const char *next = strstr(body, "__global__");
        size_t len = next ? (size_t)(next - body) : strlen(body);
        char *kernel = kl_strndup(body, len);
        assert_null(strstr(kernel, "float4"));
        assert_null(strstr(kernel, "if (VECTOR)"));
        assert_non_null(strstr(kernel, "v[i] ="));
        json_t *left = present_in(out, kernels[k]);
        assert_int_equal(json_array_size(left), 0);
        json_decref(left);
        free(kernel);
        free(out);
        free(note);
        json_decref(sites);
        free(text);
    }
}

/* A guarded vector path whose twin on the same guard has no scalar else: not removable. */
static void a_twin_without_scalar_path_blocks_removal(void **state)
{
    (void)state;
    const char *text =
        "__global__ void k(const float* x, float* y, int n, bool vec)\n"
        "{\n"
        "    float v[4];\n"
        "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n"
        "    if (i + 3 >= n) return;\n"
        "    if (vec) {\n"
        "        float4 t = *reinterpret_cast<const float4*>(x + i);\n"
        "        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;\n"
        "    } else {\n"
        "        for (int e = 0; e < 4; e++) v[e] = x[i + e];\n"
        "    }\n"
        "    if (vec) {\n"
        "        *reinterpret_cast<float4*>(y + i) = make_float4(v[0], v[1], v[2], v[3]);\n"
        "    } else {\n"
        "        *reinterpret_cast<float4*>(y + i) = make_float4(v[3], v[2], v[1], v[0]);\n"
        "    }\n"
        "}\n"
        "extern \"C\" void launch(const float* x, float* y, int n, cudaStream_t s)\n"
        "{ k<<<(n + 1023) / 1024, 256, 0, s>>>(x, y, n, true); }\n";
    json_t *sites = present_in(text, "k");
    assert_int_equal(json_array_size(sites), 1);
    json_t *feat = json_object_get(json_array_get(sites, 0), "features");
    const char *why = json_string_value(json_object_get(feat, "why_not"));
    assert_non_null(why);
    assert_non_null(strstr(why, "shares its guard but has no plain scalar else path"));
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    const char *site = json_string_value(json_object_get(json_array_get(sites, 0), "site"));
    assert_int_not_equal(kl_rules_rewrite("t.cu", text, strlen(text), NULL, "vectorize", site, true, NULL, &out, &note, &err),
                         KL_OK);
    assert_non_null(strstr(err.message, "line 12"));
    free(out);
    free(note);
    json_decref(sites);
}

/* The else branch of a template flag fills the vector path's float4 registers one lane at a time
 * (`r.x = p[0]; …`, as SGEMM experts stage a tile): a scalar path, so the site is present and
 * removable; an else that builds whole vectors (a make_float4, a macro around a float4 cast) is
 * no scalar path. */
static void lane_by_lane_registers_are_a_scalar_path(void **state)
{
    (void)state;
    static const char *const fills[] = {
        "r.x = p[0]; r.y = p[1]; r.z = p[2]; r.w = p[3];",
        "r = make_float4(p[0], p[1], p[2], p[3]);",
        "r = LD4(p);",
    };
    for (unsigned f = 0; f < 3; f++) {
        char text[2048];
        kl_snprintf(text, sizeof text,
                    "#define LD4(q) (*reinterpret_cast<const float4*>(q))\n"
                    "template <bool VEC>\n"
                    "__global__ void k(const float* x, float* y, int n)\n"
                    "{\n"
                    "    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n"
                    "    if (i + 3 >= n) return;\n"
                    "    const float* p = x + i;\n"
                    "    float4 r;\n"
                    "    if (VEC) {\n"
                    "        r = LD4(p);\n"
                    "    } else {\n"
                    "        %s\n"
                    "    }\n"
                    "    y[i] = r.x + r.y + r.z + r.w;\n"
                    "}\n"
                    "extern \"C\" void launch(const float* x, float* y, int n, cudaStream_t s)\n"
                    "{ k<true><<<(n + 1023) / 1024, 256, 0, s>>>(x, y, n); }\n",
                    fills[f]);
        json_t *sites = present_in(text, "k");
        assert_int_equal(json_array_size(sites), 1);
        json_t *s = json_array_get(sites, 0);
        assert_string_equal(json_string_value(json_object_get(s, "site")), "k:9");
        const char *dir = json_string_value(json_object_get(s, "direction"));
        char *out = NULL, *note = NULL;
        kl_error err = {0};
        kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "vectorize", "k:9", true, NULL, &out, &note, &err);
        if (f == 0) {
            assert_string_equal(dir, "present");
            assert_int_equal(st, KL_OK);
            assert_null(strstr(out, "if (VEC)"));
            assert_non_null(strstr(out, "r.w = p[3];"));
            assert_null(strstr(out, "LD4(p);"));
        } else {
            assert_string_equal(dir, "refused");
            const char *why = json_string_value(json_object_get(s, "reason"));
            assert_non_null(why);
            assert_non_null(strstr(why, "uses vector types too"));
            assert_int_not_equal(st, KL_OK);
            assert_non_null(strstr(err.message, "uses vector types too"));
        }
        free(out);
        free(note);
        json_decref(sites);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_site_for_paths_on_one_guard),
        cmocka_unit_test(a_twin_without_scalar_path_blocks_removal),
        cmocka_unit_test(lane_by_lane_registers_are_a_scalar_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
