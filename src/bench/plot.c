/*
 * The optimizer's budget curves (docs/optimize.md, "Evaluation"): one panel per task, one
 * line per policy, the best speedup so far (log scale) against the gate calls spent. Drawn
 * with cairo, once on an SVG surface and once on an image surface written as PNG.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "klineage/bench.h"
#include "kl_config.h"
#include "util/util.h"

#if KL_HAVE_CAIRO
#include <cairo-svg.h>
#include <cairo.h>

/* cairo, opened when a plot is drawn (kl_dl_open): other commands do not load it and the dozen
 * libraries it needs. cx.create is cairo_create, and so on. */
#define CAIRO_FUNCTIONS(X)                                                                         \
    X(create) X(destroy) X(image_surface_create) X(line_to) X(move_to) X(paint) X(rectangle)       \
    X(select_font_face) X(set_dash) X(set_font_size) X(set_line_width) X(set_source_rgb)           \
    X(show_text) X(status_to_string) X(stroke) X(surface_destroy) X(surface_finish)                \
    X(surface_status) X(surface_write_to_png) X(svg_surface_create) X(text_extents)
#define CAIRO_SLOT(f) __typeof__(&cairo_##f) f;
#define CAIRO_SYMBOL(f) {"cairo_" #f, &cx.f},
static struct {
    CAIRO_FUNCTIONS(CAIRO_SLOT)
} cx;
static const kl_dl_symbol cx_symbols[] = {CAIRO_FUNCTIONS(CAIRO_SYMBOL)};
static const char *const cx_sonames[] = {"libcairo.so.2", NULL};
static kl_dl_lib libcairo = KL_DL_LIB("cairo", cx_sonames, cx_symbols, "libcairo2");

#define PANEL_W 320.0
#define PANEL_H 230.0
#define MARGIN_L 52.0
#define MARGIN_R 14.0
#define MARGIN_T 30.0
#define MARGIN_B 36.0
#define HEADER 44.0

typedef struct policy_style {
    const char *name;
    double r, g, b;
    double dash;
} policy_style;

static const policy_style styles[] = {
    {"blind", 0.45, 0.45, 0.45, 4.0},
    {"memory", 0.85, 0.50, 0.05, 0.0},
    {"skills", 0.10, 0.35, 0.80, 0.0},
};

static void text_at(cairo_t *cr, double x, double y, const char *s, double size, double align)
{
    cx.set_font_size(cr, size);
    cairo_text_extents_t e;
    cx.text_extents(cr, s, &e);
    cx.move_to(cr, x - align * e.x_advance, y);
    cx.show_text(cr, s);
}

/* The nice log-scale ticks between 1 and top: 1, 2, 5, 10, 20, 50, … */
static unsigned ticks(double top, double *out, unsigned max)
{
    unsigned n = 0;
    for (double dec = 1; dec <= top * 1.0001 && n < max; dec *= 10) {
        static const double m[] = {1, 2, 5};
        for (unsigned k = 0; k < 3 && n < max; k++)
            if (dec * m[k] <= top * 1.0001) out[n++] = dec * m[k];
    }
    return n;
}

static void panel(cairo_t *cr, double x0, double y0, const json_t *row, unsigned budget)
{
    double w = PANEL_W - MARGIN_L - MARGIN_R, h = PANEL_H - MARGIN_T - MARGIN_B;
    double px = x0 + MARGIN_L, py = y0 + MARGIN_T;
    /* the range: 1 to the highest speedup any policy reached here */
    double top = 1.0;
    const json_t *pols = json_object_get(row, "policies");
    for (unsigned s = 0; s < sizeof styles / sizeof styles[0]; s++) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(json_object_get(pols, styles[s].name), "curve"), i, v) {
            if (json_number_value(v) > top) top = json_number_value(v);
        }
    }
    double ltop = log10(top > 1.5 ? top * 1.15 : 1.75);
    cx.set_source_rgb(cr, 0, 0, 0);
    cx.select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    text_at(cr, px + w / 2, y0 + 18, json_string_value(json_object_get(row, "task")) ?: "?", 13, 0.5);
    cx.select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    /* grid and ticks */
    double yt[16];
    unsigned nt = ticks(pow(10, ltop), yt, 16);
    cx.set_line_width(cr, 0.5);
    for (unsigned k = 0; k < nt; k++) {
        double y = py + h - h * log10(yt[k]) / ltop;
        cx.set_source_rgb(cr, 0.88, 0.88, 0.88);
        cx.move_to(cr, px, y);
        cx.line_to(cr, px + w, y);
        cx.stroke(cr);
        char lab[32];
        kl_snprintf(lab, sizeof lab, "%gx", yt[k]);
        cx.set_source_rgb(cr, 0.2, 0.2, 0.2);
        text_at(cr, px - 5, y + 4, lab, 10, 1.0);
    }
    for (unsigned k = 0; k <= 4; k++) {
        double x = px + w * k / 4.0;
        char lab[32];
        kl_snprintf(lab, sizeof lab, "%u", (unsigned)lround(budget * k / 4.0));
        text_at(cr, x, py + h + 14, lab, 10, 0.5);
    }
    text_at(cr, px + w / 2, py + h + 30, "gate calls", 10, 0.5);
    cx.set_source_rgb(cr, 0, 0, 0);
    cx.set_line_width(cr, 1.0);
    cx.rectangle(cr, px, py, w, h);
    cx.stroke(cr);
    /* the curves: a step after each gate call */
    for (unsigned s = 0; s < sizeof styles / sizeof styles[0]; s++) {
        const json_t *p = json_object_get(pols, styles[s].name);
        const json_t *curve = json_object_get(p, "curve");
        if (!json_array_size(curve) || json_is_false(json_object_get(p, "counted"))) continue;
        cx.set_source_rgb(cr, styles[s].r, styles[s].g, styles[s].b);
        cx.set_line_width(cr, 2.0);
        if (styles[s].dash > 0) cx.set_dash(cr, &styles[s].dash, 1, 0);
        size_t i;
        json_t *v;
        double last_y = py + h;
        json_array_foreach((json_t *)curve, i, v) {
            double val = json_number_value(v) > 1 ? json_number_value(v) : 1;
            double x = px + w * (double)i / (budget ? budget : 1);
            double y = py + h - h * log10(val) / ltop;
            if (x > px + w) x = px + w;
            if (i == 0)
                cx.move_to(cr, x, y);
            else {
                cx.line_to(cr, x, last_y);
                cx.line_to(cr, x, y);
            }
            last_y = y;
        }
        cx.stroke(cr);
        cx.set_dash(cr, NULL, 0, 0);
    }
}

static void draw(cairo_t *cr, const json_t *doc, double width, double height, unsigned cols)
{
    cx.set_source_rgb(cr, 1, 1, 1);
    cx.paint(cr);
    unsigned budget = (unsigned)json_integer_value(json_object_get(doc, "budget"));
    /* the header: what is drawn, and the legend */
    cx.set_source_rgb(cr, 0, 0, 0);
    cx.select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    text_at(cr, 12, 18, "Best speedup over the naive kernel so far, against gate calls spent (log scale)", 12, 0);
    double lx = 12;
    for (unsigned s = 0; s < sizeof styles / sizeof styles[0]; s++) {
        cx.set_source_rgb(cr, styles[s].r, styles[s].g, styles[s].b);
        cx.set_line_width(cr, 2.0);
        if (styles[s].dash > 0) cx.set_dash(cr, &styles[s].dash, 1, 0);
        cx.move_to(cr, lx, 33);
        cx.line_to(cr, lx + 26, 33);
        cx.stroke(cr);
        cx.set_dash(cr, NULL, 0, 0);
        cx.set_source_rgb(cr, 0, 0, 0);
        text_at(cr, lx + 31, 37, styles[s].name, 11, 0);
        lx += 100;
    }
    (void)width, (void)height;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(doc, "tasks"), i, row) {
        double x0 = (double)(i % cols) * PANEL_W, y0 = HEADER + (double)(i / cols) * PANEL_H;
        panel(cr, x0, y0, row, budget);
    }
}

kl_status kl_bench_optimize_plot(const char *json, const char *svg_path, const char *png_path, kl_error *err)
{
    kl_status loaded = kl_dl_open(&libcairo, err);
    if (loaded != KL_OK) return loaded;
    json_t *doc = json_loads(json, 0, NULL);
    size_t n = json_array_size(json_object_get(doc, "tasks"));
    if (!n) {
        json_decref(doc);
        return kl_error_set(err, KL_ERR_INVALID, "nothing to plot: the evaluation has no task");
    }
    unsigned cols = n < 4 ? (unsigned)n : 4;
    unsigned rows = (unsigned)((n + cols - 1) / cols);
    double width = cols * PANEL_W, height = HEADER + rows * PANEL_H;
    kl_status st = KL_OK;
    if (svg_path) {
        cairo_surface_t *s = cx.svg_surface_create(svg_path, width, height);
        cairo_t *cr = cx.create(s);
        draw(cr, doc, width, height, cols);
        cx.destroy(cr);
        cx.surface_finish(s);
        if (cx.surface_status(s) != CAIRO_STATUS_SUCCESS)
            st = kl_error_set(err, KL_ERR_IO, "%s: %s", svg_path, cx.status_to_string(cx.surface_status(s)));
        cx.surface_destroy(s);
    }
    if (st == KL_OK && png_path) {
        cairo_surface_t *s = cx.image_surface_create(CAIRO_FORMAT_ARGB32, (int)width, (int)height);
        cairo_t *cr = cx.create(s);
        draw(cr, doc, width, height, cols);
        cx.destroy(cr);
        cairo_status_t cs = cx.surface_write_to_png(s, png_path);
        if (cs != CAIRO_STATUS_SUCCESS) st = kl_error_set(err, KL_ERR_IO, "%s: %s", png_path, cx.status_to_string(cs));
        cx.surface_destroy(s);
    }
    json_decref(doc);
    return st;
}

#else

kl_status kl_bench_optimize_plot(const char *json, const char *svg_path, const char *png_path, kl_error *err)
{
    (void)json, (void)svg_path, (void)png_path;
    return kl_error_set(err, KL_ERR_UNSUPPORTED, "this build has no cairo (configured with -DKL_CAIRO=OFF): plots "
                                                 "are drawn where klineage was built with it");
}

#endif
