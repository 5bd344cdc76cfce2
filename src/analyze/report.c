/*
 * report.c — the stall analyzer's terminal report and JSON object (its
 * "measurements" member reads back with nostall_analyze_meas_read()); the
 * HTML report is report_html.c. Each writes one analysis to a stdio stream
 * (nostall_analyze_report() gives it a memory stream); nothing else is
 * touched, so any thread may write the reports of an analysis it holds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_impl.h"

/* Measured epoch figures, scaled from the (possibly capped) runs.
 *
 * The stalls are the parts of one epoch's waiting: the cold run's (the
 * configuration as given), or the cached run's when there is no cold run
 * (measurements from elsewhere); `ref` is that run's epoch, which the
 * fractions are of. A stall is time the step waited inside its run, so it
 * is never more than the run's epoch and each fraction is at most 1. Before,
 * the prep stall (the cached run's) was divided by the cold epoch, or by
 * 1 s when there was no cold run: more than 1 whenever the cached run
 * waited longer than the whole cold epoch (a shared machine slowing the
 * cached run) or longer than a second. */
/* A run's wall time scaled to an epoch of nb batches: its start-up (once per
 * run) as it is, the rest by batches. */
static double run_epoch(double seconds, double start, double batches, double nb)
{
    if (!(batches > 0)) return 0;
    start = fmin(fmax(0, start), fmax(0, seconds));
    return (seconds - start) * nb / batches + start;
}

void nst_an_measured_get(const nostall_analyze_meas *m, nst_an_measured *o)
{
    double nb = m->batch_size > 0 ? ceil(m->items_per_epoch / m->batch_size) : 0;
    memset(o, 0, sizeof *o);
    o->syn = m->syn_batches > 0 ? m->syn_seconds * nb / m->syn_batches : 0;
    o->warm = run_epoch(m->warm_seconds, m->warm_start_s, m->warm_batches, nb);
    o->cold = run_epoch(m->cold_seconds, m->cold_start_s, m->cold_batches, nb);
    /* Starting the loader (a foreign loader's worker processes): once per
     * epoch, the mean of the runs that were measured. */
    const int wr = m->warm_batches > 0, cr = m->cold_batches > 0;
    const double ws0 = wr ? fmin(fmax(0, m->warm_start_s), o->warm) : 0,
                 cs0 = cr ? fmin(fmax(0, m->cold_start_s), o->cold) : 0;
    o->start_stall = wr + cr > 0 ? (ws0 + cs0) / (wr + cr) : 0;
    /* The differential measurement, read from the loader's stall counter (time
     * the step waited in next) rather than from differences of wall times,
     * which on a shared machine also carry the jitter of every step. */
    double ws = m->warm_batches > 0 ? m->warm_stall_s * nb / m->warm_batches : 0;
    double cs = m->cold_batches > 0 ? m->cold_stall_s * nb / m->cold_batches : 0;
    ws = fmin(fmax(0, ws), o->warm);
    cs = fmin(fmax(0, cs), o->cold);
    if (o->cold > 0) {
        /* the cold run's waiting, split: the part prep explains (what the
         * cached run waited; on a busy machine that can exceed the cold
         * run's whole stall: then all of it) and the rest, fetch */
        o->ref = o->cold;
        o->prep_stall = fmin(ws, cs);
        o->fetch_stall = cs - o->prep_stall;
    } else {
        o->ref = o->warm; /* no cold run: no fetch stall measured */
        o->prep_stall = ws;
    }
    if (o->ref > 0) o->start_stall = fmin(o->start_stall, o->ref);
    /* (the waits exclude start-up, the run's time includes it: their sum
     * stays within the run's epoch unless the inputs disagree) */
    o->stall_frac =
        o->ref > 0 ? fmin(1, (o->prep_stall + o->fetch_stall + o->start_stall) / o->ref) : 0;
    if (o->stall_frac < NST_AN_STALL_OK)
        o->bound = "compute";
    else if (o->start_stall > fmax(o->prep_stall, o->fetch_stall))
        o->bound = "start";
    else
        o->bound = o->fetch_stall > o->prep_stall ? "fetch" : "prep";
}

static double pct(double a, double b) { return b > 0 ? 100 * a / b : 0; }

const char nst_an_remote_models[] =
    "each server's rate is measured while it had items outstanding (the run with the servers, "
    "the loader alone) and taken to scale with their number; the trainer's CPU to receive an "
    "item is measured (its prep-server threads); its own threads take the cores left; the "
    "trainer reads storage only for its own threads' items";
const char nst_an_remote_omits[] =
    "network bandwidth is not probed: the bytes/s are what the run moved, not what the link "
    "can (prep_net_mbps= caps it in --predict); servers on this machine (loopback) share its "
    "cores, so their rate here is not a remote host's; the request latency is reported, not "
    "modelled (credits keep items in flight); failures and reconnects are not modelled";

void nst_an_remote_get(const nostall_analyze_meas *m, nst_an_remote *o)
{
    memset(o, 0, sizeof *o);
    if (!(m->prep_servers > 0)) return;
    o->servers = m->prep_servers;
    o->items = m->srv_remote_items;
    o->bytes = m->srv_remote_bytes;
    o->seconds = m->srv_seconds;
    o->items_s = m->srv_seconds > 0 ? o->items / m->srv_seconds : 0;
    o->per_server = m->srv_remote_busy_ns > 0 ? o->items / (m->srv_remote_busy_ns * 1e-9) : 0;
    o->net_bps = m->srv_seconds > 0 ? o->bytes / m->srv_seconds : 0;
    o->item_bytes = o->items > 0 ? o->bytes / o->items : 0;
    o->wait_ms = o->items > 0 ? m->srv_remote_wait_ns * 1e-6 / o->items : 0;
    o->recv_cpu_ms = o->items > 0 ? m->srv_recv_cpu_s * 1e3 / o->items : 0;
    o->local_cpu_ms = m->prep_items > 0 ? m->prep_cpu_s * 1e3 / m->prep_items : 0;
    /* (items received while the first epoch ended are the second's too) */
    o->share = m->srv_items > 0 ? fmin(1, o->items / m->srv_items) : 0;
}

const char *nst_an_bound_words(const char *b)
{
    if (!strcmp(b, "compute"))
        return "compute-bound (the step is the bottleneck; stalls are negligible)";
    if (!strcmp(b, "prep")) return "prep-bound (CPU preprocessing cannot keep up)";
    if (!strcmp(b, "start"))
        return "start-bound (starting the loader's worker processes dominates the stall)";
    return "fetch-bound (storage cannot keep up)";
}

static void fmt_bytes(char *buf, size_t len, double b)
{
    if (b >= 1073741824.0)
        snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0)
        snprintf(buf, len, "%.1f MiB", b / 1048576.0);
    else
        snprintf(buf, len, "%.1f KiB", b / 1024.0);
}

/* Prep servers as measured, and what their model includes (none: nothing). */
static void text_remote(FILE *f, const nostall_analyze_meas *m)
{
    char b1[32];
    nst_an_remote rm;
    nst_an_remote_get(m, &rm);
    if (rm.servers > 0) {
        fmt_bytes(b1, sizeof b1, rm.item_bytes);
        fprintf(f,
                "  remote prep  %.0f prep server(s), the loader alone: %.0f items/s from them (%.0f%% "
                "of its items),\n"
                "               %.1f items/s per server while it had items outstanding; network "
                "%.1f MB/s (%s per item);\n"
                "               request to reply %.1f ms mean; the trainer's CPU %.3f ms per "
                "received item, %.3f ms\n"
                "               per item it prepares itself\n",
                rm.servers, rm.items_s, 100 * rm.share, rm.per_server, rm.net_bps / 1e6, b1,
                rm.wait_ms, rm.recv_cpu_ms, rm.local_cpu_ms);
        if (!(rm.items > 0))
            fprintf(f, "  WARNING      no item came from the prep servers while measuring\n");
        fprintf(f, "               the measured runs below used them: their stalls are the ones "
                   "the servers leave\n");
        fprintf(f, "               modelled: %s\n", nst_an_remote_models);
        fprintf(f, "               not modelled: %s\n", nst_an_remote_omits);
    }
}

/* ---- terminal ------------------------------------------------------------- */

void nst_an_report_text(FILE *f, const struct nostall_analysis *r, const char *data)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_measured ms;
    nst_an_rates rt;
    char b1[32], b2[32];
    nst_an_measured_get(m, &ms);
    nst_an_rates_get(m, &rt);
    fmt_bytes(b1, sizeof b1, m->dataset_bytes);
    fmt_bytes(b2, sizeof b2, rt.item_bytes);
    nst_an_line(f, "nostall analyze: %s", data);
    fprintf(f, "  dataset      %.0f items, %s", m->dataset_items, b1);
    if (m->dataset_files > 0) fprintf(f, " in %.0f files", m->dataset_files);
    fprintf(f, " (mean %s per item); %.0f items and %.0f batches per epoch\n", b2,
            m->items_per_epoch, ceil(m->items_per_epoch / fmax(1, m->batch_size)));
    if (m->disk_bw > 0)
        fprintf(f,
                "  machine      %.0f cores (%.1f available to this job now); memory %.1f GB/s (memcpy); storage %.1f MB/s with 8 reads in "
                "flight, %.1f MB/s one at a time, latency %.2f ms",
                m->cores, m->cpu_available, m->mem_bw / 1e9, m->disk_bw / 1e6, m->disk_bw1 / 1e6,
                m->disk_latency_s * 1e3);
    else /* measurements of another loader's runs without nostall's */
        fprintf(f,
                "  machine      %.0f cores; storage not measured (the model has no fetch cost: the "
                "measured runs do)",
                m->cores);
    if (m->emu_mbps > 0 || m->emu_latency_ms > 0)
        fprintf(f, "; emulated storage %.1f MB/s, %.1f ms", m->emu_mbps, m->emu_latency_ms);
    fprintf(f, "\n");
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f,
                "  WARNING      other processes left this job only %.1f of the %.0f cores while it measured:\n"
                "               the runs are slowed by them; predictions assume dedicated cores (to model the\n"
                "               share, add --predict cores=%.1f)\n",
                m->cpu_available, m->cores, m->cpu_available);
    for (int i = 0; i < r->nnotes; i++)
        if (r->note_warning[i]) nst_an_line(f, "  WARNING      %s", r->notes[i]);
    fprintf(f,
            "  rates        step %.0f items/s; prep %.0f items/s per core, %.0f with %.0f threads",
            rt.accel, rt.per_core, rt.prep, m->threads);
    if (m->prep_servers > 0)
        fprintf(f, " and %.0f prep server(s) (%.0f from them)", m->prep_servers, rt.remote);
    fprintf(f, "; storage %.0f items/s\n", rt.fetch);
    text_remote(f, m);
    if (m->decode_gpu > 0)
        nst_an_line(f,
                    "  GPU decode   decode and augment run on the GPU (nvJPEG, CUDA kernels); the "
                    "time workers wait for them is prep time, so the prep rate above is the GPU "
                    "route's with these threads. Not modelled: the GPU shared with the training "
                    "step, and the GPU's own limit: the what-if rows for more threads assume "
                    "prep grows with CPU cores");
    fprintf(f, "\n  measured (per epoch)       time      compute   prep stall        fetch stall\n");
    fprintf(f, "    synthetic (step only) %7.2f s\n", ms.syn);
    fprintf(f, "    cached                %7.2f s  %7.2f s  %6.2f s\n", ms.warm, ms.syn,
            ms.prep_stall);
    fprintf(f, "    cold                  %7.2f s  %7.2f s  %6.2f s %5.1f%%  %6.2f s %5.1f%%\n",
            ms.cold, ms.syn, ms.prep_stall, pct(ms.prep_stall, ms.ref), ms.fetch_stall,
            pct(ms.fetch_stall, ms.ref));
    if (ms.start_stall > 0)
        fprintf(f, "    start-up of the loader (once per epoch, in both) %.2f s %5.1f%%\n",
                ms.start_stall, pct(ms.start_stall, ms.ref));
    fprintf(f, "  measured verdict: %s\n", nst_an_bound_words(ms.bound));
    if (m->cold_autotune > 0) { /* the cold run tuned itself: what it had chosen at its end */
        char cache[64] = "";
        if (m->cold_tuned_cache > 0)
            snprintf(cache, sizeof cache, ", MinIO cache capped at %.1f MB",
                     m->cold_tuned_cache / 1e6);
        fprintf(f,
                "  autotune in the cold run: %.0f of %.0f workers active, %.0f batches ahead, "
                "%.0f reads in flight%s (%s) at its end; the model below plans with all %.0f\n",
                m->cold_tuned_workers, m->threads, m->cold_tuned_ahead, m->cold_tuned_depth, cache,
                nostall_tune_reason_name((int)m->cold_tune_reason), m->threads);
    }
    fprintf(f, "  model of the same runs: cached %.2f s, cold %.2f s (errors %+.0f%%, %+.0f%%)\n",
            r->warm_run.epoch_s, r->cold_run.epoch_s, pct(r->warm_run.epoch_s - ms.warm, ms.warm),
            pct(r->cold_run.epoch_s - ms.cold, ms.cold));
    const nst_an_pred *p = &r->now;
    fprintf(f,
            "\n  steady state as configured (epochs after the first): %.2f s per epoch; prep stall "
            "%.2f s (%.1f%%), fetch stall %.2f s (%.1f%%)\n",
            p->epoch_s, p->prep_stall_s, pct(p->prep_stall_s, p->epoch_s), p->fetch_stall_s,
            pct(p->fetch_stall_s, p->epoch_s));
    fprintf(f, "  the job is %s\n", nst_an_bound_words(r->bound));
    fprintf(f, "\n  recommendations\n");
    for (int i = 0; i < r->nreco; i++) nst_an_line(f, "    - %s", r->reco[i].text);
    fprintf(
        f,
        "\n  what if (predicted, steady state)                      epoch     compute  prep stall  fetch stall  bound\n");
    const nst_an_row *rows[2] = {r->rows, r->predict};
    int counts[2] = {r->nrows, r->npredict};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            const nst_an_row *row = &rows[k][i];
            char label[45];
            nst_an_text_buf(label, sizeof label, row->label); /* --predict text */
            fprintf(f, "    %-8s %-44s %7.2f s %7.2f s %5.1f%% %10.1f%%     %s\n", row->group, label,
                    row->p.epoch_s, row->p.compute_s, pct(row->p.prep_stall_s, row->p.epoch_s),
                    pct(row->p.fetch_stall_s, row->p.epoch_s), row->p.bound);
        }
    int notes = 0;
    for (int i = 0; i < r->nnotes; i++)
        if (!r->note_warning[i]) {
            if (!notes++) fprintf(f, "\n  notes\n");
            nst_an_line(f, "    %s", r->notes[i]);
        }
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.9g", x);
    else
        fputs("null", f);
}

/* ", \"key\": number" */
static void json_kv(FILE *f, const char *key, double x)
{
    fprintf(f, ", \"%s\": ", key);
    json_num(f, x);
}

static void json_pred(FILE *f, const nst_an_pred *p)
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
    json_kv(f, "remote_items", p->remote_items);
    fputc('}', f);
}

static const char *point_name(int p)
{
    static const char *names[] = {"fetch", "decode", "augment", "batch"};
    return names[p & 3];
}

static void json_rows(FILE *f, const nst_an_row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        const nst_an_row *row = &rows[i];
        const nst_an_scenario *s = &row->s;
        fprintf(f, "%s{\"group\": ", i ? ", " : "");
        nst_an_json_string(f, row->group);
        fprintf(f, ", \"label\": ");
        nst_an_json_string(f, row->label);
        fprintf(f, ", \"x\": ");
        json_num(f, row->x);
        fprintf(f,
                ", \"config\": {\"threads\": %g, \"io_depth\": %g, \"cores\": %g, \"cache_fraction\": %g, \"minio\": %d, "
                "\"storage_mbps\": %g, \"storage_latency_ms\": %g, \"bw_scale\": %g, \"step_ms\": %g, "
                "\"echo_factor\": %g, \"echo_point\": \"%s\", \"cold\": %d, \"nodes\": %g, "
                "\"net_mbps\": %g, \"net_latency_ms\": %g, \"cpu_scale\": %g, "
                "\"cache_transcode\": %d, \"prep_servers\": %g, \"server_rate\": %g, "
                "\"recv_cpu_ms\": %g, \"prep_net_mbps\": %g}, \"prediction\": ",
                s->threads, s->io_depth, s->cores, s->cache_frac, s->minio, s->emu_mbps,
                s->emu_latency_ms, s->bw_scale, s->step_s * 1e3, s->echo_factor,
                point_name(s->echo_point), s->cold, s->nodes, s->net_mbps, s->net_latency_ms,
                s->cpu_scale, s->cache_transcode, s->prep_servers, s->server_rate,
                s->recv_cpu_s * 1e3, s->prep_net_mbps);
        json_pred(f, &row->p);
        fputc('}', f);
    }
}

void nst_an_report_json(FILE *f, const struct nostall_analysis *r, const char *data)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_measured ms;
    nst_an_rates rt;
    nst_an_measured_get(m, &ms);
    nst_an_rates_get(m, &rt);
    fprintf(f, "{");
    nst_an_json_member(f, "data", data);
    fprintf(f, ", \"measurements\": {");
    int first = 1;
#define NST_AN_JSON_MEAS_(name, help)                                                              \
    fprintf(f, "%s\"" #name "\": ", first ? "" : ", ");                                            \
    if (isfinite(m->name))                                                                         \
        fprintf(f, "%.17g", m->name); /* exact round trip */                                       \
    else                                                                                           \
        fputs("null", f);                                                                          \
    first = 0;
    NOSTALL_ANALYZE_MEAS_TABLE(NST_AN_JSON_MEAS_)
#undef NST_AN_JSON_MEAS_
    fprintf(f, "}, \"measured\": {\"bound\": \"%s\"", ms.bound);
    double ce = ms.ref > 0 ? ms.ref : 1; /* (stalls are 0 without a run) */
    json_kv(f, "synthetic_s", ms.syn);
    json_kv(f, "cached_s", ms.warm);
    json_kv(f, "cold_s", ms.cold);
    json_kv(f, "prep_stall_s", ms.prep_stall);
    json_kv(f, "fetch_stall_s", ms.fetch_stall);
    json_kv(f, "prep_stall_fraction", ms.prep_stall / ce);
    json_kv(f, "fetch_stall_fraction", ms.fetch_stall / ce);
    json_kv(f, "start_stall_s", ms.start_stall);
    json_kv(f, "start_stall_fraction", ms.start_stall / ce);
    json_kv(f, "stall_fraction", ms.stall_frac);
    fprintf(f, "}, \"rates\": {\"unit\": \"items/s\"");
    json_kv(f, "accelerator_items_per_s", rt.accel);
    json_kv(f, "prep_items_per_s_per_core", rt.per_core);
    json_kv(f, "prep_items_per_s", rt.prep);
    json_kv(f, "storage_items_per_s", rt.fetch);
    json_kv(f, "cpu_s_per_item", rt.cpu_item_s);
    json_kv(f, "remote_items_per_s", rt.remote);
    fprintf(f, "}, \"remote_prep\": ");
    nst_an_remote rm;
    nst_an_remote_get(m, &rm);
    if (rm.servers > 0) {
        fprintf(f, "{\"servers\": %.17g", rm.servers);
        json_kv(f, "items", rm.items);
        json_kv(f, "bytes", rm.bytes);
        json_kv(f, "seconds", rm.seconds);
        json_kv(f, "items_per_s", rm.items_s);
        json_kv(f, "per_server_items_per_s", rm.per_server);
        json_kv(f, "net_bytes_per_s", rm.net_bps);
        json_kv(f, "item_bytes", rm.item_bytes);
        json_kv(f, "request_ms_mean", rm.wait_ms);
        json_kv(f, "recv_cpu_ms_per_item", rm.recv_cpu_ms);
        json_kv(f, "local_cpu_ms_per_item", rm.local_cpu_ms);
        json_kv(f, "remote_share", rm.share);
        json_kv(f, "prep_stall_s", ms.prep_stall);
        json_kv(f, "fetch_stall_s", ms.fetch_stall);
        fprintf(f, ", \"models\": ");
        nst_an_json_string(f, nst_an_remote_models);
        fprintf(f, ", \"not_modelled\": ");
        nst_an_json_string(f, nst_an_remote_omits);
        fputc('}', f);
    } else
        fputs("null", f);
    fprintf(f, ", \"model\": {\"cached_run\": ");
    json_pred(f, &r->warm_run);
    fprintf(f, ", \"cold_run\": ");
    json_pred(f, &r->cold_run);
    fprintf(f, ", \"steady_state\": ");
    json_pred(f, &r->now);
    fprintf(f, "}, \"bound\": \"%s\", \"warnings\": [", r->bound);
    if (m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores)
        fprintf(f,
                "\"shared machine: other processes left this job %.1f of %.0f cores while it measured\"",
                m->cpu_available, m->cores);
    int nw = m->cpu_available > 0 && m->cpu_available < 0.9 * m->cores;
    for (int i = 0; i < r->nnotes; i++)
        if (r->note_warning[i]) {
            if (nw++) fputs(", ", f);
            nst_an_json_string(f, r->notes[i]);
        }
    fprintf(f, "], \"recommendations\": [");
    for (int i = 0; i < r->nreco; i++) {
        const nst_an_reco *rc = &r->reco[i];
        fprintf(f, "%s{\"what\": \"%s\", \"value\": ", i ? ", " : "", rc->what);
        if (rc->value >= 0)
            json_num(f, rc->value);
        else
            fputs("null", f);
        fprintf(f, ", \"needed\": %s, \"epoch_before_s\": ", rc->needed ? "true" : "false");
        json_num(f, rc->epoch_before_s);
        fprintf(f, ", \"epoch_after_s\": ");
        json_num(f, rc->epoch_after_s);
        fprintf(f, ", \"text\": ");
        nst_an_json_string(f, rc->text);
        fputc('}', f);
    }
    fprintf(f, "], \"whatif\": [");
    json_rows(f, r->rows, r->nrows);
    fprintf(f, "], \"predictions\": [");
    json_rows(f, r->predict, r->npredict);
    fprintf(f, "], \"notes\": [");
    for (int i = 0, n = 0; i < r->nnotes; i++)
        if (!r->note_warning[i]) {
            if (n++) fputs(", ", f);
            nst_an_json_string(f, r->notes[i]);
        }
    fprintf(f, "]}\n");
}
