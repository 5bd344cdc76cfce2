/*
 * report_html.c — the stall analyzer's HTML report: one self-contained page
 * (inline CSS and SVG, no external resources) with the verdict, the
 * recommendations, the time breakdown as stacked bars, one what-if curve
 * per dimension and the tables. Written to a stdio stream; any thread.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze_impl.h"

static double pct(double a, double b) { return b > 0 ? 100 * a / b : 0; }

/* ---- HTML ----------------------------------------------------------------- */

static const char *COL_COMPUTE = "#4c78a8", *COL_PREP = "#f58518", *COL_FETCH = "#e45756",
                  *COL_START = "#9d9d9d";

/* Horizontal stacked bars: compute / prep stall / fetch stall / start-up
 * (the last in the legend only when a bar has some). */
static void svg_breakdown(FILE *f, const char *labels[], const double (*v)[4], int n)
{
    double maxv = 0;
    int nseg = 3;
    for (int i = 0; i < n; i++) {
        maxv = fmax(maxv, v[i][0] + v[i][1] + v[i][2] + v[i][3]);
        if (v[i][3] > 0) nseg = 4;
    }
    if (maxv <= 0) maxv = 1;
    int w = 720, left = 230, bar = 26, gap = 14, h = 40 + n * (bar + gap) + 30;
    fprintf(f,
            "<svg class=\"chart\" data-chart=\"breakdown\" xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            w, h, w, h);
    fprintf(f, "<title>Time per epoch: compute, prep stall, fetch stall%s</title>\n",
            nseg > 3 ? ", start-up" : "");
    double scale = (w - left - 70) / maxv;
    for (int i = 0; i < n; i++) {
        int y = 30 + i * (bar + gap);
        double x = left;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + bar - 8);
        nst_an_html_text(f, labels[i]);
        fprintf(f, "</text>\n");
        const char *cols[4] = {COL_COMPUTE, COL_PREP, COL_FETCH, COL_START};
        const char *names[4] = {"compute", "prep stall", "fetch stall", "start-up"};
        for (int k = 0; k < nseg; k++) {
            double bw = v[i][k] * scale;
            if (bw <= 0) continue;
            fprintf(f,
                    "<rect class=\"seg\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">"
                    "<title>%s %.2f s</title></rect>\n",
                    x, y, bw, bar, cols[k], names[k], v[i][k]);
            x += bw;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">%.2f s</text>\n", x + 6, y + bar - 8,
                v[i][0] + v[i][1] + v[i][2] + v[i][3]);
    }
    int ly = h - 14;
    const char *cols[4] = {COL_COMPUTE, COL_PREP, COL_FETCH, COL_START};
    const char *names[4] = {"compute", "prep stall", "fetch stall", "start-up"};
    for (int k = 0; k < nseg; k++) {
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%s</text>\n",
                left + k * 130, ly - 10, cols[k], left + k * 130 + 16, ly, names[k]);
    }
    fprintf(f, "</svg>\n");
}

/* A what-if curve: epoch time and compute time over the rows of one group,
 * evenly spaced in x (the values are labels). */
static void svg_curve(FILE *f, const struct nostall_analysis *r, const char *group,
                      const char *title, const char *xfmt, double xmul)
{
    const nst_an_row *pts[32];
    int n = 0;
    for (int i = 0; i < r->nrows && n < 32; i++)
        if (!strcmp(r->rows[i].group, group)) pts[n++] = &r->rows[i];
    if (n == 0) return;
    double maxv = 0;
    for (int i = 0; i < n; i++) maxv = fmax(maxv, fmax(pts[i]->p.epoch_s, pts[i]->p.compute_s));
    if (maxv <= 0) maxv = 1;
    int w = 350, h = 240, l = 50, rt = 15, t = 30, b = 45;
    double pw = w - l - rt, ph = h - t - b;
    fprintf(f,
            "<svg class=\"chart\" data-chart=\"whatif-%s\" xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            group, w, h, w, h);
    fprintf(f, "<title>");
    nst_an_html_text(f, title);
    fprintf(f, "</title>\n<text x=\"%d\" y=\"18\" class=\"ct\">", l);
    nst_an_html_text(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", l, t, l, h - b);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", l, h - b,
            w - rt, h - b);
    for (int k = 0; k <= 4; k++) {
        double yv = maxv * k / 4, y = t + ph - ph * k / 4;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"ax\">%.2g</text>\n",
                l - 4, y + 4, yv);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n", l, y,
                w - rt, y);
    }
    fprintf(f,
            "<text x=\"12\" y=\"%d\" class=\"ax\" transform=\"rotate(-90 12 %d)\">seconds / epoch</text>\n",
            t + (int)ph / 2 + 30, t + (int)ph / 2 + 30);
    const char *cols[2] = {"#222", COL_COMPUTE};
    for (int line = 0; line < 2; line++) {
        fprintf(f,
                "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
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
                        : !strcmp(pts[i]->p.bound, "prep")  ? COL_PREP
                                                            : COL_FETCH;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>", x,
                t + ph - ph * v / maxv, c);
        nst_an_html_text(f, pts[i]->label);
        fprintf(f, ": %.2f s, %s-bound</title></circle>\n", v, pts[i]->p.bound);
        char xl[32];
        if (pts[i]->x * xmul >= 1e5)
            snprintf(xl, sizeof xl, "inf");
        else
            snprintf(xl, sizeof xl, xfmt, pts[i]->x * xmul);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"ax\">%s</text>\n", x,
                h - b + 14, xl);
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" class=\"ax\">— epoch   - - compute   ● colour: bound</text>\n",
            l, h - 8);
    fprintf(f, "</svg>\n");
}

/* Prep servers as measured, and what their model includes (none: nothing). */
static void html_remote(FILE *f, const nostall_analyze_meas *m, const nst_an_measured *ms)
{
    nst_an_remote rm;
    nst_an_remote_get(m, &rm);
    if (!(rm.servers > 0)) return;
    fprintf(f,
            "<h2 id=\"remote-prep\">Remote prep</h2>\n<table>\n"
            "<tr><td class=\"l\">prep servers</td><td>%.0f</td></tr>\n"
            "<tr><td class=\"l\">items/s from them (the loader alone), share of its items</td>"
            "<td>%.1f, %.0f%%</td></tr>\n"
            "<tr><td class=\"l\">items/s per server while it had items outstanding</td>"
            "<td>%.1f</td></tr>\n"
            "<tr><td class=\"l\">network: MB/s received, bytes per item</td><td>%.1f, %.0f</td>"
            "</tr>\n"
            "<tr><td class=\"l\">request to reply, mean</td><td>%.1f ms</td></tr>\n"
            "<tr><td class=\"l\">trainer CPU per received item / per item it prepares</td>"
            "<td>%.3f ms / %.3f ms</td></tr>\n"
            "<tr><td class=\"l\">stalls the servers leave (the measured runs used them): prep / "
            "fetch</td><td>%.2f s / %.2f s</td></tr>\n</table>\n",
            rm.servers, rm.items_s, 100 * rm.share, rm.per_server, rm.net_bps / 1e6, rm.item_bytes,
            rm.wait_ms, rm.recv_cpu_ms, rm.local_cpu_ms, ms->prep_stall, ms->fetch_stall);
    fprintf(f, "<p>Modelled: ");
    nst_an_html_text(f, nst_an_remote_models);
    fprintf(f, ".</p>\n<p>Not modelled: ");
    nst_an_html_text(f, nst_an_remote_omits);
    fprintf(f, ".</p>\n");
}

void nst_an_report_html(FILE *f, const struct nostall_analysis *r, const char *data)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_measured ms;
    nst_an_rates rt;
    nst_an_measured_get(m, &ms);
    nst_an_rates_get(m, &rt);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<title>nostall analyze: ");
    nst_an_html_text(f, data);
    fprintf(f,
            "</title>\n<style>\n"
            "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\n"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
            "text-align:right}th{background:#f3f3f3}td.l{text-align:left}\n"
            "svg{font-size:12px;margin:6px}.ct{font-weight:bold}.ax{fill:#555;font-size:11px}\n"
            ".warn{background:#fff3cd;padding:6px}.b-compute{color:#4c78a8}.b-prep{color:#f58518}.b-fetch{color:#e45756}"
            ".b-start{color:#777}\n"
            "</style></head>\n<body>\n<h1>Data stall analysis</h1>\n<p>Dataset <code>");
    nst_an_html_text(f, data);
    fprintf(f,
            "</code>: %.0f items, %.1f MB; %.0f items per epoch in batches of %.0f; %.0f worker threads "
            "on %.0f cores.</p>\n",
            m->dataset_items, m->dataset_bytes / 1e6, m->items_per_epoch, m->batch_size, m->threads,
            m->cores);
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f,
                "<p class=\"warn\"><strong>Warning:</strong> other processes left this job only %.1f of the "
                "%.0f cores while it measured; predictions assume dedicated cores.</p>\n",
                m->cpu_available, m->cores);
    for (int i = 0; i < r->nnotes; i++)
        if (r->note_warning[i]) {
            fprintf(f, "<p class=\"warn\"><strong>Warning:</strong> ");
            nst_an_html_text(f, r->notes[i]);
            fprintf(f, "</p>\n");
        }
    fprintf(f, "<p id=\"verdict\">The job is <strong class=\"b-%s\">%s</strong>.</p>\n", r->bound,
            nst_an_bound_words(r->bound));
    fprintf(f, "<p id=\"measured-verdict\">Measured runs: <strong class=\"b-%s\">%s</strong>.</p>\n",
            ms.bound, nst_an_bound_words(ms.bound));
    fprintf(f, "<h2>Recommendations</h2>\n<ul>\n");
    for (int i = 0; i < r->nreco; i++) {
        fprintf(f, "<li>");
        nst_an_html_text(f, r->reco[i].text);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "</ul>\n<h2>Where the time goes (per epoch)</h2>\n");
    const char *labels[4] = {"measured: cold (first) epoch", "model: cold epoch",
                             "model: steady state as configured", "model: all recommendations"};
    double v[4][4] = {{ms.syn, ms.prep_stall, ms.fetch_stall, ms.start_stall},
                      {r->cold_run.compute_s, r->cold_run.prep_stall_s, r->cold_run.fetch_stall_s,
                       0},
                      {r->now.compute_s, r->now.prep_stall_s, r->now.fetch_stall_s, 0},
                      {0, 0, 0, 0}};
    const nst_an_row *all = &r->rows[r->nrows - 1];
    v[3][0] = all->p.compute_s;
    v[3][1] = all->p.prep_stall_s;
    v[3][2] = all->p.fetch_stall_s;
    svg_breakdown(f, labels, (const double(*)[4])v, 4);
    fprintf(f, "<h2>What if</h2>\n<div>\n");
    svg_curve(f, r, "cache", "MinIO cache (% of dataset)", "%.0f%%", 100);
    svg_curve(f, r, "cores", "CPU cores", "%.0f", 1);
    svg_curve(f, r, "storage", "storage bandwidth (MB/s)", "%.3g", 1);
    svg_curve(f, r, "echo", "echo factor", "%.1f", 1);
    svg_curve(f, r, "servers", "prep servers", "%.0f", 1);
    fprintf(f,
            "</div>\n<table><tr><th>what if</th><th>epoch s</th><th>compute s</th><th>prep stall</th>"
            "<th>fetch stall</th><th>bound</th></tr>\n");
    for (int k = 0; k < 2; k++) {
        const nst_an_row *rows = k ? r->predict : r->rows;
        int n = k ? r->npredict : r->nrows;
        for (int i = 0; i < n; i++) {
            const nst_an_pred *p = &rows[i].p;
            fprintf(f, "<tr><td class=\"l\">%s: ", rows[i].group);
            nst_an_html_text(f, rows[i].label);
            fprintf(f,
                    "</td><td>%.2f</td><td>%.2f</td><td>%.1f%%</td><td>%.1f%%</td>"
                    "<td class=\"b-%s\">%s</td></tr>\n",
                    p->epoch_s, p->compute_s, pct(p->prep_stall_s, p->epoch_s),
                    pct(p->fetch_stall_s, p->epoch_s), p->bound, p->bound);
        }
    }
    fprintf(f, "</table>\n");
    html_remote(f, m, &ms);
    fprintf(f, "<h2>Measurements</h2>\n<table>\n");
    fprintf(f,
            "<tr><td class=\"l\">synthetic / cached / cold epoch</td><td>%.2f s / %.2f s / %.2f s</td></tr>\n",
            ms.syn, ms.warm, ms.cold);
    fprintf(f,
            "<tr><td class=\"l\">model of cached / cold epoch</td><td>%.2f s / %.2f s</td></tr>\n",
            r->warm_run.epoch_s, r->cold_run.epoch_s);
    fprintf(f,
            "<tr><td class=\"l\">rates (items/s): step / prep per core / prep / storage</td>"
            "<td>%.0f / %.0f / %.0f / %.0f</td></tr>\n",
            rt.accel, rt.per_core, rt.prep, rt.fetch);
    if (m->disk_bw > 0)
        fprintf(f,
                "<tr><td class=\"l\">storage: MB/s (8 in flight) / MB/s (1) / latency ms</td>"
                "<td>%.1f / %.1f / %.3f</td></tr>\n",
                m->disk_bw / 1e6, m->disk_bw1 / 1e6, m->disk_latency_s * 1e3);
    else
        fprintf(f, "<tr><td class=\"l\">storage</td><td>not measured (no fetch cost in the "
                   "model)</td></tr>\n");
    if (ms.start_stall > 0)
        fprintf(f,
                "<tr><td class=\"l\">start-up of the loader (once per epoch)</td><td>%.2f s</td>"
                "</tr>\n",
                ms.start_stall);
    fprintf(f, "<tr><td class=\"l\">memory bandwidth</td><td>%.1f GB/s</td></tr>\n",
            m->mem_bw / 1e9);
    fprintf(f, "</table>\n");
    int notes = 0;
    for (int i = 0; i < r->nnotes; i++)
        if (!r->note_warning[i]) {
            fprintf(f, "%s<li>", notes++ ? "" : "<h2>Notes</h2>\n<ul class=\"notes\">\n");
            nst_an_html_text(f, r->notes[i]);
            fprintf(f, "</li>\n");
        }
    fprintf(f,
            "%s<p>Model and assumptions: docs/analyzer.md.</p>\n"
            "<script>document.body.setAttribute('data-charts', "
            "String(document.querySelectorAll('svg.chart').length));</script>\n</body></html>\n",
            notes ? "</ul>\n" : "");
}
