/*
 * recommend.c — what the analyzer concludes from the model (model.c): the
 * measured runs as the model sees them, the what-if rows (cache fraction,
 * cores, storage bandwidth, echo factor, a partitioned cache, combinations)
 * and the four recommendations: cores per accelerator, storage (reads in
 * flight or a MinIO cache), data echoing for what remains, and the
 * restart-marker transcode measured on a sample; a fifth, start-up, when
 * the measured runs of a foreign loader say its worker start-up stalls; a
 * sixth, prep servers, when prep stalls and this machine's cores are the
 * limit. With prep servers measured, the what-if rows include 1, 2, 4 and
 * 8 of them.
 *
 * Called by nostall_analyze_create() on the creating thread; writes only
 * into the analysis it is given.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze_impl.h"

static nst_an_row *add_row(struct nostall_analysis *r, const char *group, double x,
                           const nst_an_scenario *s, const char *fmt, double a, double b)
{
    if (r->nrows >= (int)(sizeof r->rows / sizeof r->rows[0])) return NULL;
    nst_an_row *row = &r->rows[r->nrows++];
    snprintf(row->group, sizeof row->group, "%s", group);
    snprintf(row->label, sizeof row->label, fmt, a, b);
    row->x = x;
    row->s = *s;
    nst_an_predict(&r->m, s, &row->p);
    return row;
}

static double stall_frac(const nst_an_pred *p)
{
    return p->epoch_s > 0 ? (p->prep_stall_s + p->fetch_stall_s) / p->epoch_s : 0;
}

/* Throughput in delivered items per second. */
static double rate(const nst_an_pred *p) { return p->epoch_s > 0 ? p->delivered / p->epoch_s : 0; }

/* The measured runs, as the model sees them. */
static void measured_runs(struct nostall_analysis *r)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s = r->cur;
    s.cold = 1;
    s.echo_factor = 1;
    nst_an_predict(m, &s, &r->cold_run);
    s.emu_mbps = s.emu_latency_ms = 0;
    s.minio = 1;
    s.cache_frac = 1;
    s.cold = 1; /* a run from start (pipeline fill) ... */
    {
        /* ... with every byte in memory: no storage cost at all */
        nostall_analyze_meas mm = *m;
        mm.disk_bw = 0;
        nst_an_predict(&mm, &s, &r->warm_run);
    }
}

/* What-if rows: each dimension varied alone. */
static void whatif_rows(struct nostall_analysis *r)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s;
    /* cache fraction (MinIO) */
    static const double fracs[] = {0, 0.1, 0.25, 0.5, 0.75, 1};
    for (size_t i = 0; i < sizeof fracs / sizeof fracs[0]; i++) {
        s = r->cur;
        s.minio = 1;
        s.cache_frac = fracs[i];
        add_row(r, "cache", fracs[i], &s, "cache %.0f%% of the dataset (MinIO)", 100 * fracs[i], 0);
    }
    /* cores (and as many worker threads, at least the configured count) */
    double cores = m->cores >= 1 ? m->cores : 1, prev = 0;
    const double kmul[] = {0, 0.5, 1, 1.5, 2, 3, 4};
    for (size_t i = 0; i < sizeof kmul / sizeof kmul[0]; i++) {
        double k = i == 0 ? 1 : floor(cores * kmul[i] + 0.5);
        if (k <= prev) continue;
        prev = k;
        s = r->cur;
        s.cores = k;
        s.threads = fmax(r->cur.threads, k);
        add_row(r, "cores", k, &s, "%.0f cores, %.0f threads", k, s.threads);
    }
    /* storage bandwidth, relative to what was measured (emulated if set) */
    double base_bw = m->emu_mbps > 0 ? m->emu_mbps : m->disk_bw / 1e6;
    const double scales[] = {0.25, 0.5, 1, 2, 4, 1e6};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        s = r->cur;
        s.bw_scale = scales[i];
        if (scales[i] >= 1e6) {
            s.emu_latency_ms = 0;
            nst_an_row *row =
                add_row(r, "storage", base_bw * 1e3, &s, "unlimited storage (no fetch cost)", 0, 0);
            if (row) {
                nostall_analyze_meas mm = *m;
                mm.disk_bw = 0;
                s.emu_mbps = 0;
                row->s = s;
                nst_an_predict(&mm, &s, &row->p);
            }
        } else {
            add_row(r, "storage", base_bw * scales[i], &s, "storage %.0f MB/s (x%.2g)",
                    base_bw * scales[i], scales[i]);
        }
    }
    /* echo factor (not with prep servers: refused at create) */
    const double echoes[] = {1, 1.5, 2, 3, 4};
    for (size_t i = 0; !(r->cur.prep_servers > 0) && i < sizeof echoes / sizeof echoes[0]; i++) {
        s = r->cur;
        s.echo_factor = echoes[i];
        add_row(r, "echo", echoes[i], &s, "echo factor %.1f", echoes[i], 0);
    }

    /* partitioned cache over MPI: N ranks, each caching the current
     * fraction (or 1/N without a cache), peers over the network */
    const double nodes[] = {2, 4, 8};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        s = r->cur;
        s.nodes = nodes[i];
        if (!(s.cache_frac > 0)) s.cache_frac = 1 / nodes[i];
        s.minio = 1;
        nst_an_row *row = add_row(r, "partitioned", nodes[i], &s, "%.0f ranks x cache %.0f%%",
                                  nodes[i], 100 * s.cache_frac);
        if (row)
            snprintf(row->label, sizeof row->label, "%.0f ranks x cache %.0f%%, peers at %.0f MB/s",
                     nodes[i], 100 * s.cache_frac, s.net_mbps);
    }
    /* prep servers as fast as those measured (x: the number of servers) */
    if (r->cur.server_rate > 0) {
        const double ks[] = {1, 2, 4, 8};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            s = r->cur;
            s.prep_servers = ks[i];
            add_row(r, "servers", ks[i], &s, "%.0f prep servers at %.0f items/s each", ks[i],
                    s.server_rate);
        }
    }
}

/* 1. Cores per accelerator: the fewest cores whose prep stall is negligible. */
static void reco_cores(struct nostall_analysis *r)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s;
    nst_an_pred p;
    const double cores = m->cores >= 1 ? m->cores : 1;
    nst_an_reco *rc = &r->reco[r->nreco++];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->what, sizeof rc->what, "cores");
    rc->value = -1;
    for (double k = 1; k <= 64 * cores; k++) {
        s = r->cur;
        s.cores = k;
        s.threads = fmax(r->cur.threads, k);
        nst_an_predict(m, &s, &p);
        if (p.prep_stall_s < NST_AN_STALL_OK * p.nofetch_s) {
            rc->value = k;
            break;
        }
    }
    /* judged on the epoch without fetch cost: would prep stall once storage keeps up? */
    rc->needed = r->now.prep_stall_s >= NST_AN_STALL_OK * r->now.nofetch_s;
    /* the gain is judged without fetch cost too (storage is recommendation 2) */
    int fetchy = r->now.fetch_stall_s >= NST_AN_STALL_OK * r->now.epoch_s;
    rc->epoch_before_s = r->now.nofetch_s;
    if (rc->value > 0) {
        s = r->cur;
        s.cores = fmax(rc->value, r->cur.cores);
        s.threads = fmax(r->cur.threads, s.cores);
        nst_an_predict(m, &s, &p);
        rc->epoch_after_s = p.nofetch_s;
    }
    if (rc->value < 0)
        snprintf(rc->text, sizeof rc->text,
                 "Preprocessing: no core count up to %.0f removes the prep stall.", 64 * cores);
    else if (rc->needed)
        snprintf(rc->text, sizeof rc->text,
                 "Preprocessing: give each accelerator %.0f cores (and at least as many --threads); "
                 "this machine has %.0f. Predicted epoch %.2f s instead of %.2f s (%.0f%% faster)%s.",
                 rc->value, cores, rc->epoch_after_s, rc->epoch_before_s,
                 100 * (rc->epoch_before_s / rc->epoch_after_s - 1),
                 fetchy ? " once storage keeps up" : "");
    else
        snprintf(rc->text, sizeof rc->text,
                 "Preprocessing: %.0f core(s) per accelerator keep the prep stall under %.0f%%; "
                 "this machine has %.0f, so none is needed.",
                 rc->value, 100 * NST_AN_STALL_OK, cores);
}

/* 2. Storage: reads in flight, else the smallest MinIO fraction whose fetch
 * stall is negligible. Returns the cache fraction the later steps assume
 * (*cache_rec, feasible in memory) and the epoch with io_depth at auto's
 * cap when that alone removes the fetch stall (*io_fix_epoch, else 0). */
static void reco_cache(struct nostall_analysis *r, double *cache_rec_out, double *io_fix_out)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s;
    nst_an_pred p;
    double cache_feasible = 1, cache_rec = r->cur.minio ? r->cur.cache_frac : 0;
    if (nst_an_shard_bytes(m) > 0 && m->mem_available_bytes > 0)
        cache_feasible = fmin(1, 0.8 * m->mem_available_bytes / nst_an_shard_bytes(m));
    /* Reads in flight come first: a fixed io_depth under auto's cap whose
     * reads wait (latency) is fixed without memory. */
    double io_fix_epoch = 0;
    if (r->now.fetch_stall_s >= NST_AN_STALL_OK * r->now.epoch_s &&
        r->cur.io_depth < NOSTALL_IO_DEPTH_AUTO_MAX) {
        s = r->cur;
        s.io_depth = NOSTALL_IO_DEPTH_AUTO_MAX;
        nst_an_predict(m, &s, &p);
        if (p.fetch_stall_s < NST_AN_STALL_OK * p.epoch_s) io_fix_epoch = p.epoch_s;
    }
    {
        nst_an_reco *rc = &r->reco[r->nreco++];
        memset(rc, 0, sizeof *rc);
        snprintf(rc->what, sizeof rc->what, "cache");
        rc->value = -1;
        for (int i = 0; i <= 100; i++) {
            s = r->cur;
            s.minio = 1;
            s.cache_frac = fmax(i / 100.0, r->cur.minio ? r->cur.cache_frac : 0);
            nst_an_predict(m, &s, &p);
            if (p.fetch_stall_s < NST_AN_STALL_OK * p.epoch_s) {
                rc->value = s.cache_frac;
                rc->epoch_after_s = p.epoch_s;
                break;
            }
        }
        rc->needed = r->now.fetch_stall_s >= NST_AN_STALL_OK * r->now.epoch_s;
        rc->epoch_before_s = r->now.epoch_s;
        if (!rc->needed) {
            rc->epoch_after_s = r->now.epoch_s;
            snprintf(rc->text, sizeof rc->text,
                     "Storage: the fetch stall is under %.0f%% already; no cache needed%s.",
                     100 * NST_AN_STALL_OK,
                     r->cur.minio && r->cur.cache_frac > 0 ? " beyond the configured one" : "");
        } else if (io_fix_epoch > 0) {
            rc->value = r->cur.minio ? r->cur.cache_frac : 0; /* no more cache than now */
            rc->epoch_after_s = io_fix_epoch;
            snprintf(
                rc->text, sizeof rc->text,
                "Storage: the reads wait rather than saturate the device: more of them in flight "
                "remove the fetch stall without a cache. --io-depth 0 (auto: up to %d per worker "
                "thread, as reads wait; now %.0f) predicts epoch %.2f s instead of %.2f s (%.0f%% "
                "faster).",
                NOSTALL_IO_DEPTH_AUTO_MAX, r->cur.io_depth, rc->epoch_after_s, rc->epoch_before_s,
                100 * (rc->epoch_before_s / rc->epoch_after_s - 1));
        } else if (rc->value < 0) {
            snprintf(rc->text, sizeof rc->text,
                     "Storage: even a cache of the whole dataset leaves a fetch stall.");
        } else {
            cache_rec = rc->value;
            double bytes = rc->value * nst_an_shard_bytes(m);
            char sz[32];
            if (bytes >= 1073741824.0)
                snprintf(sz, sizeof sz, "%.2fG", bytes / 1073741824.0);
            else
                snprintf(sz, sizeof sz, "%.0fM", ceil(bytes / 1048576.0));
            snprintf(rc->text, sizeof rc->text,
                     "Storage: a MinIO cache of %.0f%% of the data this rank reads (--cache-bytes %s) removes the fetch "
                     "stall: predicted epoch %.2f s instead of %.2f s (%.0f%% faster)%s.",
                     100 * rc->value, sz, rc->epoch_after_s, rc->epoch_before_s,
                     100 * (rc->epoch_before_s / rc->epoch_after_s - 1),
                     rc->value > cache_feasible
                         ? "; more than this machine's available memory allows"
                         : "");
            if (rc->value > cache_feasible) cache_rec = cache_feasible;
        }
    }
    *cache_rec_out = cache_rec;
    *io_fix_out = io_fix_epoch;
}

/* 3. Echo: what remains with this machine's cores and the feasible cache. */
static void reco_echo(struct nostall_analysis *r, double cache_rec, double io_fix_epoch)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s;
    nst_an_pred p;
    nst_an_reco *rc = &r->reco[r->nreco++];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->what, sizeof rc->what, "echo");
    nst_an_scenario base = r->cur;
    base.threads = fmax(base.threads, base.cores);
    if (cache_rec > 0) {
        base.minio = 1;
        base.cache_frac = cache_rec;
    }
    if (io_fix_epoch > 0) base.io_depth = NOSTALL_IO_DEPTH_AUTO_MAX;
    const char *with = cache_rec > 0      ? " and the cache above"
                       : io_fix_epoch > 0 ? " and the reads in flight above"
                                          : "";
    nst_an_pred pb;
    nst_an_predict(m, &base, &pb);
    rc->value = -1;
    rc->epoch_before_s = pb.epoch_s;
    rc->needed = stall_frac(&pb) >= NST_AN_STALL_OK;
    if (base.prep_servers > 0) { /* the loader refuses the two together */
        rc->epoch_after_s = pb.epoch_s;
        snprintf(rc->text, sizeof rc->text,
                 "Echoing: not with prep servers (a loader refuses the two together); with %.0f "
                 "threads%s the predicted stall is %.1f%%.",
                 base.threads, with, 100 * stall_frac(&pb));
        return;
    }
    for (double e = 1; e <= 16; e += 0.25) {
        s = base;
        s.echo_factor = e;
        nst_an_predict(m, &s, &p);
        if (stall_frac(&p) < NST_AN_STALL_OK) {
            rc->value = e;
            rc->epoch_after_s = p.epoch_s;
            break;
        }
    }
    if (!rc->needed)
        snprintf(rc->text, sizeof rc->text,
                 "Echoing: not needed; with %.0f threads%s the predicted stall is %.1f%%.",
                 base.threads, with, 100 * stall_frac(&pb));
    else if (rc->value < 0)
        snprintf(rc->text, sizeof rc->text,
                 "Echoing: no echo factor up to 16 removes the remaining stall.");
    else {
        s = base;
        s.echo_factor = rc->value;
        nst_an_predict(m, &s, &p);
        snprintf(rc->text, sizeof rc->text,
                 "Echoing: what remains (%.1f%% stall with %.0f threads%s) is covered by --echo-factor "
                 "%.2g (echo point %s): %.0f -> %.0f items/s to the step (repeated items count less "
                 "than fresh ones for accuracy).",
                 100 * stall_frac(&pb), base.threads, with, rc->value,
                 (const char *[]){"fetch", "decode", "augment", "batch"}[base.echo_point & 3],
                 rate(&pb), rate(&p));
    }
}

/* 4. Decoding: the restart-marker copy (`nostall transcode`), measured on a sample. */
static void reco_transcode(struct nostall_analysis *r)
{
    const nostall_analyze_meas *m = &r->m;
    nst_an_scenario s;
    nst_an_pred p;
    nst_an_reco *rc = &r->reco[r->nreco++];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->what, sizeof rc->what, "transcode");
    rc->value = m->rst_cpu_ratio > 0 ? m->rst_cpu_ratio : -1;
    rc->needed = r->now.prep_stall_s >= NST_AN_STALL_OK * r->now.nofetch_s;
    rc->epoch_before_s = r->now.nofetch_s;
    rc->epoch_after_s = r->now.nofetch_s;
    if (rc->value > 0) {
        s = r->cur;
        s.cpu_scale = rc->value;
        nst_an_predict(m, &s, &p);
        rc->epoch_after_s = p.nofetch_s;
    }
    if (rc->value < 0)
        snprintf(rc->text, sizeof rc->text,
                 "Decoding: the restart-marker copy was not measured (fewer than 16 JPEG items "
                 "could be sampled and transcoded).");
    else if (rc->value >= NST_AN_RST_USEFUL)
        snprintf(rc->text, sizeof rc->text,
                 "Decoding: `nostall transcode` would not help these files (CPU per item x%.2f on "
                 "a sample of %.0f: they already have restart markers, or the crops cover most of "
                 "each image).",
                 rc->value, m->rst_sample_items);
    else if (!rc->needed)
        snprintf(rc->text, sizeof rc->text,
                 "Decoding: not needed (the prep stall is under %.0f%%); for CPU to spare, "
                 "`nostall transcode` would cut CPU per item x%.2f (measured on %.0f items).",
                 100 * NST_AN_STALL_OK, rc->value, m->rst_sample_items);
    else
        snprintf(rc->text, sizeof rc->text,
                 "Decoding: `nostall transcode DATA DATA-rst` rewrites the JPEGs losslessly (same "
                 "pixels) with restart markers, so each crop entropy-decodes only its own part: "
                 "CPU per item x%.2f (measured on %.0f items), predicted epoch %.2f s instead of "
                 "%.2f s (%.0f%% faster)%s, with the same cores; train on the copy (or, with "
                 "a MinIO cache that holds the data, set cache_transcode=1: the same rewrite "
                 "as items enter the cache).",
                 rc->value, m->rst_sample_items, rc->epoch_after_s, rc->epoch_before_s,
                 100 * (rc->epoch_before_s / rc->epoch_after_s - 1),
                 r->now.fetch_stall_s >= NST_AN_STALL_OK * r->now.epoch_s ? " once storage keeps up"
                                                                          : "");
}

/* 5. Start-up, only when the measured runs say it stalls (another loader's
 * worker processes, started each epoch: nostall's threads start once). */
static void reco_start(struct nostall_analysis *r)
{
    nst_an_measured ms;
    nst_an_measured_get(&r->m, &ms);
    if (!(ms.ref > 0) || ms.start_stall < NST_AN_STALL_OK * ms.ref) return;
    nst_an_reco *rc = &r->reco[r->nreco++];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->what, sizeof rc->what, "start");
    rc->value = ms.start_stall;
    rc->needed = 1;
    rc->epoch_before_s = ms.ref;
    rc->epoch_after_s = ms.ref - ms.start_stall;
    snprintf(rc->text, sizeof rc->text,
             "Start-up: starting the loader (its iterator and %.0f worker process(es)) stalls "
             "the step %.2f s per epoch (%.0f%% of the measured epoch); keep the workers "
             "between epochs (persistent_workers=True in a torch DataLoader) to pay it once.",
             r->m.threads, ms.start_stall, 100 * ms.start_stall / ms.ref);
}

/* 6. Prep servers, only when prep stalls and this machine's cores are the
 * limit (more threads would not help; without servers, not even all of its
 * cores would do): the fewest servers, as fast as those measured, whose
 * prep stall is negligible; without servers measured, what they are and
 * how to have their number predicted. Runs after reco_cores (reco[0]). */
static void reco_servers(struct nostall_analysis *r)
{
    const nostall_analyze_meas *m = &r->m;
    const nst_an_scenario *cur = &r->cur;
    const double free_cores = nst_an_cpu_free(m, cur);
    if (r->now.prep_stall_s < NST_AN_STALL_OK * r->now.nofetch_s) return;
    if (cur->prep_servers > 0) { /* the cores busy preparing and receiving */
        nst_an_mix x;
        nst_an_rates rt;
        nst_an_rates_get(m, &rt);
        nst_an_prep_mix(cur->prep_servers, cur->server_rate, cur->recv_cpu_s, 0, cur->threads,
                        free_cores, rt.cpu_item_s, &x);
        if (x.cpu < 0.99 * free_cores && cur->threads < free_cores) return;
    } else if (cur->threads < free_cores || (r->reco[0].value > 0 && r->reco[0].value <= m->cores))
        return; /* more threads first, or this machine's cores suffice: recommendation 1 */
    nst_an_reco *rc = &r->reco[r->nreco++];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->what, sizeof rc->what, "servers");
    rc->value = -1;
    rc->needed = 1;
    rc->epoch_before_s = rc->epoch_after_s = r->now.nofetch_s;
    if (!(cur->server_rate > 0)) {
        snprintf(rc->text, sizeof rc->text,
                 "Prep servers: this machine's %.0f cores are the limit of preprocessing; prep "
                 "servers (`nostall serve` on other hosts, the loader's prep_servers, "
                 "docs/serve.md) add their CPUs. Analyze with one of them to have the number "
                 "needed predicted.",
                 m->cores);
        return;
    }
    nst_an_scenario s;
    nst_an_pred p;
    double best_k = cur->prep_servers, best = r->now.nofetch_s;
    for (double k = fmax(1, cur->prep_servers + 1); k <= 256; k++) {
        s = *cur;
        s.prep_servers = k;
        nst_an_predict(m, &s, &p);
        if (p.nofetch_s < best * 0.999) {
            best = p.nofetch_s;
            best_k = k;
        }
        if (p.prep_stall_s < NST_AN_STALL_OK * p.nofetch_s) {
            rc->value = k;
            rc->epoch_after_s = p.nofetch_s;
            break;
        }
    }
    if (rc->value > 0)
        snprintf(rc->text, sizeof rc->text,
                 "Prep servers: this machine's %.0f cores are the limit of preprocessing; with "
                 "%.0f prep servers (now %.0f), each as fast as those measured (%.0f items/s), "
                 "the predicted epoch is %.2f s instead of %.2f s (%.0f%% faster)%s.",
                 m->cores, rc->value, cur->prep_servers, cur->server_rate, rc->epoch_after_s,
                 rc->epoch_before_s, 100 * (rc->epoch_before_s / rc->epoch_after_s - 1),
                 r->now.fetch_stall_s >= NST_AN_STALL_OK * r->now.epoch_s ? " once storage keeps up"
                                                                          : "");
    else {
        rc->epoch_after_s = best;
        snprintf(rc->text, sizeof rc->text,
                 "Prep servers: more of them stop helping at %.0f (predicted epoch %.2f s): "
                 "receiving their items (%.3f ms of CPU each here) then takes this machine's "
                 "%.0f cores; fewer bytes per item (e.g. output=uint8) cost less to receive.",
                 best_k, best, cur->recv_cpu_s * 1e3, m->cores);
    }
}

/* Combinations: cache x cores, and all recommendations together. */
static void combined_rows(struct nostall_analysis *r, double cache_rec, double io_fix_epoch)
{
    const nostall_analyze_meas *m = &r->m;
    const double cores = m->cores >= 1 ? m->cores : 1;
    nst_an_scenario s;
    const double cfr[] = {0, 0.5, 1};
    for (size_t i = 0; i < 3; i++)
        for (int k = 1; k <= 2; k++) {
            s = r->cur;
            s.minio = 1;
            s.cache_frac = cfr[i];
            s.cores = cores * k;
            s.threads = fmax(r->cur.threads, s.cores);
            add_row(r, "combined", cfr[i], &s, "cache %.0f%% + %.0f cores", 100 * cfr[i], s.cores);
        }
    s = r->cur;
    if (r->reco[0].value > 0) {
        s.cores = fmax(s.cores, r->reco[0].value);
        s.threads = fmax(s.threads, s.cores);
    }
    if (cache_rec > 0) {
        s.minio = 1;
        s.cache_frac = cache_rec;
    }
    if (r->reco[2].value > 1) s.echo_factor = r->reco[2].value;
    if (io_fix_epoch > 0) s.io_depth = NOSTALL_IO_DEPTH_AUTO_MAX;
    add_row(r, "combined", -1, &s, "all recommendations (%.0f cores, cache %.0f%%, echo)", s.cores,
            100 * (s.minio ? s.cache_frac : 0));
}

void nst_an_analyze(struct nostall_analysis *r)
{
    r->cur = nst_an_scenario_current(&r->m);
    nst_an_predict(&r->m, &r->cur, &r->now);
    r->bound = r->now.bound;
    measured_runs(r);
    r->nrows = 0;
    whatif_rows(r);
    r->nreco = 0;
    double cache_rec = 0, io_fix_epoch = 0;
    reco_cores(r);
    reco_cache(r, &cache_rec, &io_fix_epoch);
    reco_echo(r, cache_rec, io_fix_epoch);
    reco_transcode(r);
    reco_start(r);
    reco_servers(r);
    combined_rows(r, cache_rec, io_fix_epoch);
}
