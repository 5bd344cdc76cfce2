/*
 * analyze_report.c — the stall analyzer's outputs: the terminal report, the
 * JSON object (--json; its "measurements" member reads back with
 * --measurements), the self-contained HTML report with inline SVG charts
 * (--report), and the reader of a measurements file.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "util.h"

/* Measured epoch figures, scaled from the (possibly capped) runs. */
typedef struct measured {
    double syn, warm, cold, prep_stall, fetch_stall, stall_frac;
    const char *bound;
} measured;

static void measured_get(const an_meas *m, measured *o)
{
    double nb = m->batch_size > 0 ? ceil(m->items_per_epoch / m->batch_size) : 0;
    memset(o, 0, sizeof *o);
    o->syn = m->syn_batches > 0 ? m->syn_seconds * nb / m->syn_batches : 0;
    o->warm = m->warm_batches > 0 ? m->warm_seconds * nb / m->warm_batches : 0;
    o->cold = m->cold_batches > 0 ? m->cold_seconds * nb / m->cold_batches : 0;
    /* The differential measurement, read from the loader's stall counter (time
     * the step waited in next) rather than from differences of wall times,
     * which on a shared machine also carry the jitter of every step. */
    double ws = m->warm_batches > 0 ? m->warm_stall_s * nb / m->warm_batches : 0;
    double cs = m->cold_batches > 0 ? m->cold_stall_s * nb / m->cold_batches : 0;
    o->prep_stall = fmax(0, ws);
    o->fetch_stall = fmax(0, cs - ws);
    o->stall_frac = o->cold > 0 ? (o->prep_stall + o->fetch_stall) / o->cold : 0;
    if (o->stall_frac < AN_STALL_OK) o->bound = "compute";
    else o->bound = o->fetch_stall > o->prep_stall ? "fetch" : "prep";
}

static double pct(double a, double b) { return b > 0 ? 100 * a / b : 0; }

static const char *bound_words(const char *b)
{
    if (!strcmp(b, "compute")) return "compute-bound (the step is the bottleneck; stalls are negligible)";
    if (!strcmp(b, "prep")) return "prep-bound (CPU preprocessing cannot keep up)";
    return "fetch-bound (storage cannot keep up)";
}

static void fmt_bytes(char *buf, size_t len, double b)
{
    if (b >= 1073741824.0) snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, len, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, len, "%.1f KiB", b / 1024.0);
}

/* ---- terminal ------------------------------------------------------------- */

void an_report_text(FILE *f, const an_result *r, const char *data)
{
    const an_meas *m = &r->m;
    measured ms;
    an_rates rt;
    char b1[32], b2[32];
    measured_get(m, &ms);
    an_rates_get(m, &rt);
    fmt_bytes(b1, sizeof b1, m->dataset_bytes);
    fmt_bytes(b2, sizeof b2, rt.item_bytes);
    tool_line(f, "nostall analyze: %s", data);
    fprintf(f, "  dataset      %.0f items, %s (mean %s per file); %.0f items and %.0f batches per epoch\n",
            m->dataset_items, b1, b2, m->items_per_epoch, ceil(m->items_per_epoch / fmax(1, m->batch_size)));
    fprintf(f, "  machine      %.0f cores (%.1f available to this job now); memory %.1f GB/s (memcpy); storage %.1f MB/s with 8 reads in "
               "flight, %.1f MB/s one at a time, latency %.2f ms",
            m->cores, m->cpu_available, m->mem_bw / 1e9, m->disk_bw / 1e6, m->disk_bw1 / 1e6,
            m->disk_latency_s * 1e3);
    if (m->emu_mbps > 0 || m->emu_latency_ms > 0)
        fprintf(f, "; emulated storage %.1f MB/s, %.1f ms", m->emu_mbps, m->emu_latency_ms);
    fprintf(f, "\n");
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f, "  WARNING      other processes left this job only %.1f of the %.0f cores while it measured:\n"
                   "               the runs are slowed by them; predictions assume dedicated cores (to model the\n"
                   "               share, add --predict cores=%.1f)\n",
                m->cpu_available, m->cores, m->cpu_available);
    fprintf(f, "  rates        step %.0f items/s; prep %.0f items/s per core, %.0f with %.0f threads; "
               "storage %.0f items/s\n",
            rt.accel, rt.per_core, rt.prep, m->threads, rt.fetch);
    fprintf(f, "\n  measured (per epoch)       time      compute   prep stall        fetch stall\n");
    fprintf(f, "    synthetic (step only) %7.2f s\n", ms.syn);
    fprintf(f, "    cached                %7.2f s  %7.2f s  %6.2f s\n", ms.warm, ms.syn, ms.prep_stall);
    fprintf(f, "    cold                  %7.2f s  %7.2f s  %6.2f s %5.1f%%  %6.2f s %5.1f%%\n", ms.cold,
            ms.syn, ms.prep_stall, pct(ms.prep_stall, ms.cold), ms.fetch_stall, pct(ms.fetch_stall, ms.cold));
    fprintf(f, "  model of the same runs: cached %.2f s, cold %.2f s (errors %+.0f%%, %+.0f%%)\n",
            r->warm_run.epoch_s, r->cold_run.epoch_s, pct(r->warm_run.epoch_s - ms.warm, ms.warm),
            pct(r->cold_run.epoch_s - ms.cold, ms.cold));
    const an_pred *p = &r->now;
    fprintf(f, "\n  steady state as configured (epochs after the first): %.2f s per epoch; prep stall "
               "%.2f s (%.1f%%), fetch stall %.2f s (%.1f%%)\n",
            p->epoch_s, p->prep_stall_s, pct(p->prep_stall_s, p->epoch_s), p->fetch_stall_s,
            pct(p->fetch_stall_s, p->epoch_s));
    fprintf(f, "  the job is %s\n", bound_words(r->bound));
    fprintf(f, "\n  recommendations\n");
    for (int i = 0; i < r->nreco; i++) tool_line(f, "    - %s", r->reco[i].text);
    fprintf(f, "\n  what if (predicted, steady state)                      epoch     compute  prep stall  fetch stall  bound\n");
    const an_row *rows[2] = {r->rows, r->predict};
    int counts[2] = {r->nrows, r->npredict};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            const an_row *row = &rows[k][i];
            char label[45];
            tool_text_buf(label, sizeof label, row->label); /* --predict text */
            fprintf(f, "    %-8s %-44s %7.2f s %7.2f s %5.1f%% %10.1f%%     %s\n", row->group, label,
                    row->p.epoch_s, row->p.compute_s, pct(row->p.prep_stall_s, row->p.epoch_s),
                    pct(row->p.fetch_stall_s, row->p.epoch_s), row->p.bound);
        }
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_num(FILE *f, double x)
{
    if (isfinite(x)) fprintf(f, "%.9g", x);
    else fputs("null", f);
}

/* ", \"key\": number" */
static void json_kv(FILE *f, const char *key, double x)
{
    fprintf(f, ", \"%s\": ", key);
    json_num(f, x);
}

static void json_pred(FILE *f, const an_pred *p)
{
    double e = p->epoch_s > 0 ? p->epoch_s : 1;
    fprintf(f, "{\"bound\": \"%s\"", p->bound);
    json_kv(f, "epoch_s", p->epoch_s);
    json_kv(f, "compute_s", p->compute_s);
    json_kv(f, "prep_stall_s", p->prep_stall_s);
    json_kv(f, "fetch_stall_s", p->fetch_stall_s);
    json_kv(f, "prep_stall_fraction", p->prep_stall_s / e);
    json_kv(f, "fetch_stall_fraction", p->fetch_stall_s / e);
    json_kv(f, "stall_fraction", (p->prep_stall_s + p->fetch_stall_s) / e);
    json_kv(f, "delivered_items", p->delivered);
    json_kv(f, "effective_cores", p->eff_cores);
    fputc('}', f);
}

static const char *point_name(int p)
{
    static const char *names[] = {"fetch", "decode", "augment", "batch"};
    return names[p & 3];
}

static void json_rows(FILE *f, const an_row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        const an_row *row = &rows[i];
        const an_scenario *s = &row->s;
        fprintf(f, "%s{\"group\": ", i ? ", " : "");
        tool_json_string(f, row->group);
        fprintf(f, ", \"label\": ");
        tool_json_string(f, row->label);
        fprintf(f, ", \"x\": ");
        json_num(f, row->x);
        fprintf(f, ", \"config\": {\"threads\": %g, \"io_depth\": %g, \"cores\": %g, \"cache_fraction\": %g, \"minio\": %d, "
                   "\"storage_mbps\": %g, \"storage_latency_ms\": %g, \"bw_scale\": %g, \"step_ms\": %g, "
                   "\"echo_factor\": %g, \"echo_point\": \"%s\", \"cold\": %d, \"nodes\": %g, "
                   "\"net_mbps\": %g, \"net_latency_ms\": %g, \"cpu_scale\": %g, "
                   "\"cache_transcode\": %d}, \"prediction\": ",
                s->threads, s->io_depth, s->cores, s->cache_frac, s->minio, s->emu_mbps, s->emu_latency_ms, s->bw_scale,
                s->step_s * 1e3, s->echo_factor, point_name(s->echo_point), s->cold, s->nodes,
                s->net_mbps, s->net_latency_ms, s->cpu_scale, s->cache_transcode);
        json_pred(f, &row->p);
        fputc('}', f);
    }
}

void an_report_json(FILE *f, const an_result *r, const char *data)
{
    const an_meas *m = &r->m;
    measured ms;
    an_rates rt;
    measured_get(m, &ms);
    an_rates_get(m, &rt);
    fprintf(f, "{");
    tool_json_member(f, "data", data);
    fprintf(f, ", \"measurements\": {");
    int first = 1;
#define AN_JSON_MEAS_(name, help)                                                                  \
    fprintf(f, "%s\"" #name "\": ", first ? "" : ", ");                                            \
    if (isfinite(m->name)) fprintf(f, "%.17g", m->name); /* exact round trip */                    \
    else fputs("null", f);                                                                         \
    first = 0;
    AN_MEAS_TABLE(AN_JSON_MEAS_)
#undef AN_JSON_MEAS_
    fprintf(f, "}, \"measured\": {\"bound\": \"%s\"", ms.bound);
    double ce = ms.cold > 0 ? ms.cold : 1;
    json_kv(f, "synthetic_s", ms.syn);
    json_kv(f, "cached_s", ms.warm);
    json_kv(f, "cold_s", ms.cold);
    json_kv(f, "prep_stall_s", ms.prep_stall);
    json_kv(f, "fetch_stall_s", ms.fetch_stall);
    json_kv(f, "prep_stall_fraction", ms.prep_stall / ce);
    json_kv(f, "fetch_stall_fraction", ms.fetch_stall / ce);
    json_kv(f, "stall_fraction", ms.stall_frac);
    fprintf(f, "}, \"rates\": {\"unit\": \"items/s\"");
    json_kv(f, "accelerator_items_per_s", rt.accel);
    json_kv(f, "prep_items_per_s_per_core", rt.per_core);
    json_kv(f, "prep_items_per_s", rt.prep);
    json_kv(f, "storage_items_per_s", rt.fetch);
    json_kv(f, "cpu_s_per_item", rt.cpu_item_s);
    fprintf(f, "}, \"model\": {\"cached_run\": ");
    json_pred(f, &r->warm_run);
    fprintf(f, ", \"cold_run\": ");
    json_pred(f, &r->cold_run);
    fprintf(f, ", \"steady_state\": ");
    json_pred(f, &r->now);
    fprintf(f, "}, \"bound\": \"%s\", \"warnings\": [", r->bound);
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f, "\"shared machine: other processes left this job %.1f of %.0f cores while it measured\"",
                m->cpu_available, m->cores);
    fprintf(f, "], \"recommendations\": [");
    for (int i = 0; i < r->nreco; i++) {
        const an_reco *rc = &r->reco[i];
        fprintf(f, "%s{\"what\": \"%s\", \"value\": ", i ? ", " : "", rc->what);
        if (rc->value >= 0) json_num(f, rc->value);
        else fputs("null", f);
        fprintf(f, ", \"needed\": %s, \"epoch_before_s\": ", rc->needed ? "true" : "false");
        json_num(f, rc->epoch_before_s);
        fprintf(f, ", \"epoch_after_s\": ");
        json_num(f, rc->epoch_after_s);
        fprintf(f, ", \"text\": ");
        tool_json_string(f, rc->text);
        fputc('}', f);
    }
    fprintf(f, "], \"whatif\": [");
    json_rows(f, r->rows, r->nrows);
    fprintf(f, "], \"predictions\": [");
    json_rows(f, r->predict, r->npredict);
    fprintf(f, "]}\n");
}

/* ---- HTML ----------------------------------------------------------------- */

static const char *COL_COMPUTE = "#4c78a8", *COL_PREP = "#f58518", *COL_FETCH = "#e45756";

/* Horizontal stacked bars: compute / prep stall / fetch stall. */
static void svg_breakdown(FILE *f, const char *labels[], const double (*v)[3], int n)
{
    double maxv = 0;
    for (int i = 0; i < n; i++) maxv = fmax(maxv, v[i][0] + v[i][1] + v[i][2]);
    if (maxv <= 0) maxv = 1;
    int w = 720, left = 230, bar = 26, gap = 14, h = 40 + n * (bar + gap) + 30;
    fprintf(f, "<svg class=\"chart\" data-chart=\"breakdown\" xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            w, h, w, h);
    fprintf(f, "<title>Time per epoch: compute, prep stall, fetch stall</title>\n");
    double scale = (w - left - 70) / maxv;
    for (int i = 0; i < n; i++) {
        int y = 30 + i * (bar + gap);
        double x = left;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + bar - 8);
        tool_html_text(f, labels[i]);
        fprintf(f, "</text>\n");
        const char *cols[3] = {COL_COMPUTE, COL_PREP, COL_FETCH};
        const char *names[3] = {"compute", "prep stall", "fetch stall"};
        for (int k = 0; k < 3; k++) {
            double bw = v[i][k] * scale;
            if (bw <= 0) continue;
            fprintf(f, "<rect class=\"seg\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">"
                       "<title>%s %.2f s</title></rect>\n",
                    x, y, bw, bar, cols[k], names[k], v[i][k]);
            x += bw;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">%.2f s</text>\n", x + 6, y + bar - 8,
                v[i][0] + v[i][1] + v[i][2]);
    }
    int ly = h - 14;
    const char *cols[3] = {COL_COMPUTE, COL_PREP, COL_FETCH};
    const char *names[3] = {"compute", "prep stall", "fetch stall"};
    for (int k = 0; k < 3; k++) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"%d\">%s</text>\n",
                left + k * 130, ly - 10, cols[k], left + k * 130 + 16, ly, names[k]);
    }
    fprintf(f, "</svg>\n");
}

/* A what-if curve: epoch time and compute time over the rows of one group,
 * evenly spaced in x (the values are labels). */
static void svg_curve(FILE *f, const an_result *r, const char *group, const char *title,
                      const char *xfmt, double xmul)
{
    const an_row *pts[32];
    int n = 0;
    for (int i = 0; i < r->nrows && n < 32; i++)
        if (!strcmp(r->rows[i].group, group)) pts[n++] = &r->rows[i];
    if (n == 0) return;
    double maxv = 0;
    for (int i = 0; i < n; i++) maxv = fmax(maxv, fmax(pts[i]->p.epoch_s, pts[i]->p.compute_s));
    if (maxv <= 0) maxv = 1;
    int w = 350, h = 240, l = 50, rt = 15, t = 30, b = 45;
    double pw = w - l - rt, ph = h - t - b;
    fprintf(f, "<svg class=\"chart\" data-chart=\"whatif-%s\" xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            group, w, h, w, h);
    fprintf(f, "<title>");
    tool_html_text(f, title);
    fprintf(f, "</title>\n<text x=\"%d\" y=\"18\" class=\"ct\">", l);
    tool_html_text(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", l, t, l, h - b);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", l, h - b, w - rt, h - b);
    for (int k = 0; k <= 4; k++) {
        double yv = maxv * k / 4, y = t + ph - ph * k / 4;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"ax\">%.2g</text>\n", l - 4, y + 4, yv);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n", l, y, w - rt, y);
    }
    fprintf(f, "<text x=\"12\" y=\"%d\" class=\"ax\" transform=\"rotate(-90 12 %d)\">seconds / epoch</text>\n",
            t + (int)ph / 2 + 30, t + (int)ph / 2 + 30);
    const char *cols[2] = {"#222", COL_COMPUTE};
    for (int line = 0; line < 2; line++) {
        fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
                line ? "compute" : "epoch", cols[line], line ? " stroke-dasharray=\"5,3\"" : "");
        for (int i = 0; i < n; i++) {
            double x = l + (n > 1 ? pw * i / (n - 1) : pw / 2);
            double v = line ? pts[i]->p.compute_s : pts[i]->p.epoch_s;
            fprintf(f, "%.1f,%.1f ", x, t + ph - ph * v / maxv);
        }
        fprintf(f, "\"/>\n");
    }
    for (int i = 0; i < n; i++) {
        double x = l + (n > 1 ? pw * i / (n - 1) : pw / 2), v = pts[i]->p.epoch_s;
        const char *c = !strcmp(pts[i]->p.bound, "compute") ? COL_COMPUTE
                        : !strcmp(pts[i]->p.bound, "prep") ? COL_PREP : COL_FETCH;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>", x, t + ph - ph * v / maxv, c);
        tool_html_text(f, pts[i]->label);
        fprintf(f, ": %.2f s, %s-bound</title></circle>\n", v, pts[i]->p.bound);
        char xl[32];
        if (pts[i]->x * xmul >= 1e5) snprintf(xl, sizeof xl, "inf");
        else snprintf(xl, sizeof xl, xfmt, pts[i]->x * xmul);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"ax\">%s</text>\n", x, h - b + 14, xl);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"ax\">— epoch   - - compute   ● colour: bound</text>\n", l,
            h - 8);
    fprintf(f, "</svg>\n");
}

int an_report_html(const char *path, const an_result *r, const char *data)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        tool_line(stderr, "nostall analyze: cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    const an_meas *m = &r->m;
    measured ms;
    an_rates rt;
    measured_get(m, &ms);
    an_rates_get(m, &rt);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<title>nostall analyze: ");
    tool_html_text(f, data);
    fprintf(f, "</title>\n<style>\n"
               "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\n"
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
               "text-align:right}th{background:#f3f3f3}td.l{text-align:left}\n"
               "svg{font-size:12px;margin:6px}.ct{font-weight:bold}.ax{fill:#555;font-size:11px}\n"
               ".warn{background:#fff3cd;padding:6px}.b-compute{color:#4c78a8}.b-prep{color:#f58518}.b-fetch{color:#e45756}\n"
               "</style></head>\n<body>\n<h1>Data stall analysis</h1>\n<p>Dataset <code>");
    tool_html_text(f, data);
    fprintf(f, "</code>: %.0f items, %.1f MB; %.0f items per epoch in batches of %.0f; %.0f worker threads "
               "on %.0f cores.</p>\n",
            m->dataset_items, m->dataset_bytes / 1e6, m->items_per_epoch, m->batch_size, m->threads, m->cores);
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f, "<p class=\"warn\"><strong>Warning:</strong> other processes left this job only %.1f of the "
                   "%.0f cores while it measured; predictions assume dedicated cores.</p>\n",
                m->cpu_available, m->cores);
    fprintf(f, "<p id=\"verdict\">The job is <strong class=\"b-%s\">%s</strong>.</p>\n", r->bound,
            bound_words(r->bound));
    fprintf(f, "<h2>Recommendations</h2>\n<ul>\n");
    for (int i = 0; i < r->nreco; i++) {
        fprintf(f, "<li>");
        tool_html_text(f, r->reco[i].text);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "</ul>\n<h2>Where the time goes (per epoch)</h2>\n");
    const char *labels[4] = {"measured: cold (first) epoch", "model: cold epoch",
                             "model: steady state as configured", "model: all recommendations"};
    double v[4][3] = {
        {ms.syn, ms.prep_stall, ms.fetch_stall},
        {r->cold_run.compute_s, r->cold_run.prep_stall_s, r->cold_run.fetch_stall_s},
        {r->now.compute_s, r->now.prep_stall_s, r->now.fetch_stall_s},
        {0, 0, 0}};
    const an_row *all = &r->rows[r->nrows - 1];
    v[3][0] = all->p.compute_s;
    v[3][1] = all->p.prep_stall_s;
    v[3][2] = all->p.fetch_stall_s;
    svg_breakdown(f, labels, (const double(*)[3])v, 4);
    fprintf(f, "<h2>What if</h2>\n<div>\n");
    svg_curve(f, r, "cache", "MinIO cache (% of dataset)", "%.0f%%", 100);
    svg_curve(f, r, "cores", "CPU cores", "%.0f", 1);
    svg_curve(f, r, "storage", "storage bandwidth (MB/s)", "%.3g", 1);
    svg_curve(f, r, "echo", "echo factor", "%.1f", 1);
    fprintf(f, "</div>\n<table><tr><th>what if</th><th>epoch s</th><th>compute s</th><th>prep stall</th>"
               "<th>fetch stall</th><th>bound</th></tr>\n");
    for (int k = 0; k < 2; k++) {
        const an_row *rows = k ? r->predict : r->rows;
        int n = k ? r->npredict : r->nrows;
        for (int i = 0; i < n; i++) {
            const an_pred *p = &rows[i].p;
            fprintf(f, "<tr><td class=\"l\">%s: ", rows[i].group);
            tool_html_text(f, rows[i].label);
            fprintf(f, "</td><td>%.2f</td><td>%.2f</td><td>%.1f%%</td><td>%.1f%%</td>"
                       "<td class=\"b-%s\">%s</td></tr>\n",
                    p->epoch_s, p->compute_s, pct(p->prep_stall_s, p->epoch_s),
                    pct(p->fetch_stall_s, p->epoch_s), p->bound, p->bound);
        }
    }
    fprintf(f, "</table>\n<h2>Measurements</h2>\n<table>\n");
    fprintf(f, "<tr><td class=\"l\">synthetic / cached / cold epoch</td><td>%.2f s / %.2f s / %.2f s</td></tr>\n",
            ms.syn, ms.warm, ms.cold);
    fprintf(f, "<tr><td class=\"l\">model of cached / cold epoch</td><td>%.2f s / %.2f s</td></tr>\n",
            r->warm_run.epoch_s, r->cold_run.epoch_s);
    fprintf(f, "<tr><td class=\"l\">rates (items/s): step / prep per core / prep / storage</td>"
               "<td>%.0f / %.0f / %.0f / %.0f</td></tr>\n",
            rt.accel, rt.per_core, rt.prep, rt.fetch);
    fprintf(f, "<tr><td class=\"l\">storage: MB/s (8 in flight) / MB/s (1) / latency ms</td>"
               "<td>%.1f / %.1f / %.3f</td></tr>\n",
            m->disk_bw / 1e6, m->disk_bw1 / 1e6, m->disk_latency_s * 1e3);
    fprintf(f, "<tr><td class=\"l\">memory bandwidth</td><td>%.1f GB/s</td></tr>\n", m->mem_bw / 1e9);
    fprintf(f, "</table>\n<p>Model and assumptions: docs/analyzer.md.</p>\n"
               "<script>document.body.setAttribute('data-charts', "
               "String(document.querySelectorAll('svg.chart').length));</script>\n</body></html>\n");
    if (fclose(f) != 0) {
        tool_line(stderr, "nostall analyze: cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- reading measurements -------------------------------------------------- */

static const char *skip_ws(const char *p)
{
    while (*p && isspace((unsigned char)*p)) p++;
    return p;
}

int an_read_measurements(const char *path, an_meas *m, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open measurements %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap + 1);
    for (size_t n; text && (n = fread(text + len, 1, cap - len, f)) > 0;) {
        len += n;
        if (len == cap) {
            char *t = realloc(text, 2 * cap + 1);
            if (!t) {
                free(text);
                text = NULL;
                break;
            }
            text = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "out of memory reading %s", path);
        return -1;
    }
    text[len] = '\0';
    memset(m, 0, sizeof *m);
    const char *p = strstr(text, "\"measurements\"");
    p = p ? strchr(p, '{') : skip_ws(text);
    int ok = p && *p == '{', found = 0;
    if (ok) p++;
    while (ok) {
        p = skip_ws(p);
        if (*p == '}') break;
        if (*p != '"') { ok = 0; break; }
        const char *k = ++p;
        while (*p && *p != '"') p++;
        if (!*p) { ok = 0; break; }
        size_t klen = (size_t)(p - k);
        p = skip_ws(p + 1);
        if (*p != ':') { ok = 0; break; }
        p = skip_ws(p + 1);
        char *end;
        double x = strtod(p, &end);
        if (end == p) {
            if (!strncmp(p, "null", 4)) { x = 0; end = (char *)p + 4; }
            else { ok = 0; break; }
        }
        p = skip_ws(end);
#define AN_READ_MEAS_(name, help)                                                                   \
    if (klen == strlen(#name) && !strncmp(k, #name, klen)) {                                        \
        m->name = x;                                                                                \
        found++;                                                                                    \
    }
        AN_MEAS_TABLE(AN_READ_MEAS_)
#undef AN_READ_MEAS_
        if (*p == ',') p++;
        else if (*p != '}') ok = 0;
    }
    free(text);
    if (!ok) {
        snprintf(err, errlen, "measurements %s: not a JSON object of numbers (or an object with a "
                 "\"measurements\" member holding one)", path);
        return -1;
    }
    if (!(m->items_per_epoch > 0) || !(m->batch_size > 0) || !(m->warm_items > 0)) {
        snprintf(err, errlen, "measurements %s: items_per_epoch, batch_size and warm_items must be > 0 "
                 "(%d known fields read)", path, found);
        return -1;
    }
    return 0;
}
