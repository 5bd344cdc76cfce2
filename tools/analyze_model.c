/*
 * analyze_model.c — the stall analyzer's what-if model, its only copy (the
 * Python nostall.analyze() hands its measurements to `nostall analyze
 * --measurements`, which lands here).
 *
 * One epoch is a pipeline of two stages that overlap: upstream (the worker
 * threads: fetch, decode, augment) and the consumer (the training step).
 * Per batch, upstream takes u and the step c; an epoch of nb batches takes
 * nb * max(u, c) in steady state (epochs follow each other without a gap)
 * and nb * max(u, c) + min(u, c) when started from nothing (pipeline fill).
 * Upstream per epoch is the largest of
 *   prep   = CPU work of the epoch / effective cores
 *            (effective cores = min(threads, cores - the step's own CPU use))
 *   device = bytes missing from the caches / storage bandwidth
 *   serial = per worker: with io_depth 1, (latency + transfer of each miss +
 *            CPU work) / threads (a worker reads an item, then prepares it);
 *            with io_depth D > 1, max(CPU work, reads' latency+transfer / D)
 *            / threads (reads overlap each other and the preparing)
 * CPU work per item is measured (process CPU time of the cached run, less
 * the step's CPU, per item) and split into fetch/decode/augment by the
 * workers' busy times; echoing repeats the later stages per delivered item
 * and the earlier ones per fresh item. Stalls are attributed as DS-Analyzer
 * does: prep stall = epoch without any fetch cost - compute; fetch stall =
 * the rest of the waiting.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "nostall.h"

/* Bytes this rank reads in an epoch (its shard of the dataset): what a
 * cache fraction is a fraction of. */
static double shard_bytes(const an_meas *m)
{
    double mean_b = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
    return fmin(m->dataset_bytes, mean_b * m->items_per_epoch);
}

an_scenario an_scenario_current(const an_meas *m)
{
    an_scenario s;
    memset(&s, 0, sizeof s);
    s.threads = m->threads;
    s.io_depth = m->io_depth >= 1 ? m->io_depth : 1;
    s.cores = m->cores;
    s.minio = m->cache_minio > 0;
    s.cache_frac = s.minio && shard_bytes(m) > 0 ? fmin(1.0, m->cache_bytes / shard_bytes(m)) : 0;
    s.emu_mbps = m->emu_mbps;
    s.emu_latency_ms = m->emu_latency_ms;
    s.bw_scale = 1;
    s.step_s = m->step_s;
    s.echo_factor = m->echo_factor >= 1 ? m->echo_factor : 1;
    s.echo_point = (int)m->echo_point;
    s.nodes = 1;
    s.cpu_scale = 1;
    s.net_mbps = 1250;     /* 10 Gb/s Ethernet, until told (--predict net_mbps=) */
    s.net_latency_ms = 0.2;
    return s;
}

/* CPU seconds per item: from the prep run (workers busy throughout) when
 * there is one, else from the cached run less the step's CPU. */
static double cpu_per_item(const an_meas *m)
{
    if (m->prep_items > 0 && m->prep_cpu_s > 0) return m->prep_cpu_s / m->prep_items;
    double warm_items = m->warm_items > 0 ? m->warm_items : 1;
    double cpu = (m->warm_cpu_s - m->warm_batches * m->step_cpu_s) / warm_items;
    double busy = m->warm_fetch_ns + m->warm_decode_ns + m->warm_augment_ns;
    if (!(cpu > 0)) cpu = busy > 0 ? busy * 1e-9 / warm_items : 1e-6;
    return cpu;
}

/* Upstream time of one epoch; with_fetch = 0 leaves out every storage cost. */
static double upstream_s(const an_meas *m, const an_scenario *s, double n, int with_fetch,
                         double *prep_out, double *fetch_out, double *eff_out)
{
    double e = s->echo_factor >= 1 ? s->echo_factor : 1, delivered = n * e;
    /* CPU per item, split by stage (the transcode what-ifs scale it; with
     * cache_transcode only the cached share, and not in a cold epoch, which
     * is the one that fills the cache) */
    double cpu_x = s->cpu_scale > 0 ? s->cpu_scale : 1;
    /* (after `nostall transcode` the files already have restart markers,
     * which the cache's rewrite declines: nothing more to gain) */
    if (s->cache_transcode && cpu_x == 1 && s->minio && !s->cold && m->rst_cpu_ratio > 0)
        cpu_x = s->cache_frac * m->rst_cpu_ratio + (1 - s->cache_frac);
    double cpu = cpu_per_item(m) * cpu_x;
    int pr = m->prep_items > 0;
    double bf = pr ? m->prep_fetch_ns : m->warm_fetch_ns, bd = pr ? m->prep_decode_ns : m->warm_decode_ns;
    double ba = pr ? m->prep_augment_ns : m->warm_augment_ns, busy = bf + bd + ba;
    double ff = busy > 0 ? bf / busy : 0, fd = busy > 0 ? bd / busy : 1, fa = busy > 0 ? ba / busy : 0;
    double cf = cpu * ff, cd = cpu * fd, ca = cpu * fa, copy = 0;
    if (m->mem_bw > 0) copy = m->item_out_bytes / m->mem_bw;
    double work;
    switch (s->echo_point) {
    case 0: work = n * cf + delivered * (cd + ca); break;            /* fetch */
    case 1: work = n * (cf + cd) + delivered * ca; break;            /* decode */
    default: work = n * cpu + (delivered - n) * copy; break;         /* augment, batch */
    }
    double step_cores = s->step_s > 0 ? fmin(m->step_cpu_s / s->step_s, s->cores - 1) : 0;
    if (step_cores < 0) step_cores = 0;
    /* The cores are the machine's (dedicated to the job). The CPU share other
     * processes leave the job (cpu_available) is reported as a warning, not
     * applied: load from others comes and goes; to model it, predict with
     * cores=<that share>. */
    double eff = fmin(s->threads, fmax(fmin(1.0, s->cores), s->cores - step_cores));
    if (eff < 0.01) eff = 0.01;
    double prep = work / eff;

    double device = 0, wait = 0;
    if (with_fetch) {
        double mean_b = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
        double c = s->minio ? fmin(1, fmax(0, s->cache_frac)) : 0;
        int fits = shard_bytes(m) <= 0.8 * m->mem_available_bytes;
        /* Partitioned cache: a rank holds c of the items, the ranks together
         * agg = min(1, nodes * c); the part agg - c comes from peers. */
        double agg = c, remote = 0;
        if (s->nodes > 1 && !s->cold) {
            agg = fmin(1, s->nodes * c);
            remote = agg - c;
            double net_bw = s->net_mbps > 0 ? s->net_mbps * 1e6 : 0;
            double rreads = n * remote;
            if (net_bw > 0) device = fmax(device, rreads * mean_b / net_bw);
            wait += rreads * (s->net_latency_ms * 1e-3 + (net_bw > 0 ? mean_b / net_bw : 0));
        }
        double miss_emu = s->cold ? 1 : 1 - agg;        /* reads that reach the emulated storage */
        double miss_real = s->cold ? 1 : s->minio ? 1 - agg : fits ? 0 : 1; /* ... and the disk */
        if (s->emu_mbps > 0 || s->emu_latency_ms > 0) {
            double bw = s->emu_mbps > 0 ? s->emu_mbps * 1e6 * s->bw_scale : 0;
            double reads = n * miss_emu;
            if (bw > 0) device = fmax(device, reads * mean_b / bw);
            wait += reads * (s->emu_latency_ms * 1e-3 + (bw > 0 ? mean_b / bw : 0));
        }
        if (m->disk_bw > 0) {
            /* without emulation, the what-if bandwidth scales the real disk */
            double scale = s->emu_mbps > 0 ? 1 : s->bw_scale;
            double bw = m->disk_bw * scale, reads = n * miss_real;
            device = fmax(device, reads * mean_b / bw);
            wait += reads * (m->disk_latency_s + mean_b / bw);
        }
    }
    double threads = s->threads >= 1 ? s->threads : 1;
    /* A worker keeps io_depth reads in flight: with one, it waits for each
     * read and then prepares the item; with more, reading overlaps both the
     * other reads and its own preparing. */
    double depth = s->io_depth >= 1 ? s->io_depth : 1;
    double serial = depth <= 1 ? (wait + work) / threads : fmax(work, wait / depth) / threads;
    double up = fmax(prep, fmax(device, serial));
    if (prep_out) *prep_out = prep;
    if (fetch_out) *fetch_out = fmax(device, wait / (threads * depth));
    if (eff_out) *eff_out = eff;
    return up;
}

void an_rates_get(const an_meas *m, an_rates *r)
{
    an_scenario s = an_scenario_current(m);
    an_pred p;
    double n = m->items_per_epoch > 0 ? m->items_per_epoch : 1;
    memset(r, 0, sizeof *r);
    r->cpu_item_s = cpu_per_item(m);
    r->per_core = r->cpu_item_s > 0 ? 1 / r->cpu_item_s : 0;
    s.echo_factor = 1;
    s.cold = 1;
    an_predict(m, &s, &p);
    r->prep = p.prep_s > 0 ? n / p.prep_s : 0;
    r->fetch = p.fetch_s > 0 ? n / p.fetch_s : 0;
    r->accel = m->step_s > 0 ? m->batch_size / m->step_s : 0;
    r->item_bytes = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
}

static double epoch_of(double nb, double up, double compute, int single)
{
    if (nb < 1) nb = 1;
    double u = up / nb, c = compute / nb;
    return nb * fmax(u, c) + (single ? fmin(u, c) : 0);
}

void an_predict(const an_meas *m, const an_scenario *s, an_pred *p)
{
    memset(p, 0, sizeof *p);
    double n = m->items_per_epoch;
    double e = s->echo_factor >= 1 ? s->echo_factor : 1;
    double bs = m->batch_size >= 1 ? m->batch_size : 1;
    double nb = ceil(n * e / bs);
    int single = s->cold;
    p->delivered = n * e;
    p->compute_s = nb * s->step_s;
    double up = upstream_s(m, s, n, 1, &p->prep_s, &p->fetch_s, &p->eff_cores);
    double up_nofetch = upstream_s(m, s, n, 0, NULL, NULL, NULL);
    p->epoch_s = epoch_of(nb, up, p->compute_s, single);
    double t_prep = epoch_of(nb, up_nofetch, p->compute_s, single);
    p->nofetch_s = t_prep;
    /* the compute the consumer does in the epoch; the rest is waiting */
    p->prep_stall_s = fmax(0, t_prep - p->compute_s);
    p->fetch_stall_s = fmax(0, p->epoch_s - t_prep);
    double stall = p->prep_stall_s + p->fetch_stall_s;
    if (p->epoch_s <= 0 || stall < AN_STALL_OK * p->epoch_s) p->bound = "compute";
    else p->bound = p->fetch_stall_s > p->prep_stall_s ? "fetch" : "prep";
}

int an_scenario_parse(const an_meas *m, an_scenario *s, const char *spec, char *err, size_t errlen)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, errlen, "--predict '%s': '%s' is not key=value", spec, tok);
            return -1;
        }
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        char *end;
        double x = strtod(v, &end);
        if (!strcmp(k, "echo_point") || !strcmp(k, "echo-point")) {
            const char *pts[] = {"fetch", "decode", "augment", "batch"};
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(v, pts[i])) found = i;
            if (found < 0) {
                snprintf(err, errlen, "--predict '%s': echo_point must be fetch|decode|augment|batch", spec);
                return -1;
            }
            s->echo_point = found;
            continue;
        }
        if (end == v || *end || !(x >= 0)) {
            snprintf(err, errlen, "--predict '%s': value of '%s' is not a number >= 0", spec, k);
            return -1;
        }
        if (!strcmp(k, "threads")) s->threads = x;
        else if (!strcmp(k, "io_depth") || !strcmp(k, "io-depth")) s->io_depth = x < 1 ? 1 : x;
        else if (!strcmp(k, "cores")) s->cores = x;
        else if (!strcmp(k, "cache_fraction") || !strcmp(k, "cache-fraction")) {
            s->cache_frac = fmin(1, x);
            s->minio = x > 0 || s->minio;
        } else if (!strcmp(k, "cache_bytes") || !strcmp(k, "cache-bytes")) {
            s->cache_frac = shard_bytes(m) > 0 ? fmin(1, x / shard_bytes(m)) : 0;
            s->minio = x > 0 || s->minio;
        } else if (!strcmp(k, "minio")) s->minio = x > 0;
        else if (!strcmp(k, "storage_mbps") || !strcmp(k, "storage-mbps")) s->emu_mbps = x;
        else if (!strcmp(k, "storage_latency_ms") || !strcmp(k, "storage-latency-ms")) s->emu_latency_ms = x;
        else if (!strcmp(k, "bw_scale")) s->bw_scale = x;
        else if (!strcmp(k, "step_ms") || !strcmp(k, "step-ms")) s->step_s = x / 1000;
        else if (!strcmp(k, "echo_factor") || !strcmp(k, "echo-factor")) s->echo_factor = x < 1 ? 1 : x;
        else if (!strcmp(k, "cold")) s->cold = x > 0;
        else if (!strcmp(k, "transcode")) {
            if (x > 0 && !(m->rst_cpu_ratio > 0)) {
                snprintf(err, errlen, "--predict '%s': transcode: the restart-marker sample was not "
                         "measured (no JPEG items, or none could be transcoded)", spec);
                return -1;
            }
            s->cpu_scale = x > 0 ? m->rst_cpu_ratio : 1;
        } else if (!strcmp(k, "cache_transcode") || !strcmp(k, "cache-transcode")) {
            if (x > 0 && !(m->rst_cpu_ratio > 0)) {
                snprintf(err, errlen, "--predict '%s': cache_transcode: the restart-marker sample "
                         "was not measured (no JPEG items, or none could be transcoded)", spec);
                return -1;
            }
            s->cache_transcode = x > 0;
        }
        else if (!strcmp(k, "nodes")) s->nodes = x < 1 ? 1 : x;
        else if (!strcmp(k, "net_mbps") || !strcmp(k, "net-mbps")) s->net_mbps = x;
        else if (!strcmp(k, "net_latency_ms") || !strcmp(k, "net-latency-ms")) s->net_latency_ms = x;
        else {
            snprintf(err, errlen, "--predict '%s': unknown key '%s' (threads, io_depth, cores, cache_fraction, "
                     "cache_bytes, minio, storage_mbps, storage_latency_ms, bw_scale, step_ms, "
                     "echo_factor, echo_point, cold, transcode, cache_transcode, nodes, net_mbps, net_latency_ms)",
                     spec, k);
            return -1;
        }
    }
    return 0;
}

static an_row *add_row(an_result *r, const char *group, double x, const an_scenario *s,
                       const char *fmt, double a, double b)
{
    if (r->nrows >= (int)(sizeof r->rows / sizeof r->rows[0])) return NULL;
    an_row *row = &r->rows[r->nrows++];
    snprintf(row->group, sizeof row->group, "%s", group);
    snprintf(row->label, sizeof row->label, fmt, a, b);
    row->x = x;
    row->s = *s;
    an_predict(&r->m, s, &row->p);
    return row;
}

static double stall_frac(const an_pred *p)
{
    return p->epoch_s > 0 ? (p->prep_stall_s + p->fetch_stall_s) / p->epoch_s : 0;
}

/* Throughput in delivered items per second. */
static double rate(const an_pred *p) { return p->epoch_s > 0 ? p->delivered / p->epoch_s : 0; }

void an_analyze(an_result *r)
{
    const an_meas *m = &r->m;
    r->cur = an_scenario_current(m);
    an_predict(m, &r->cur, &r->now);
    r->bound = r->now.bound;

    /* the measured runs, as the model sees them */
    an_scenario s = r->cur;
    s.cold = 1;
    s.echo_factor = 1;
    an_predict(m, &s, &r->cold_run);
    s.emu_mbps = s.emu_latency_ms = 0;
    s.minio = 1;
    s.cache_frac = 1;
    s.cold = 1; /* a run from start (pipeline fill) ... */
    {
        /* ... with every byte in memory: no storage cost at all */
        an_meas mm = *m;
        mm.disk_bw = 0;
        an_predict(&mm, &s, &r->warm_run);
    }

    /* what-if: cache fraction (MinIO) */
    r->nrows = 0;
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
            an_row *row = add_row(r, "storage", base_bw * 1e3, &s, "unlimited storage (no fetch cost)", 0, 0);
            if (row) {
                an_meas mm = *m;
                mm.disk_bw = 0;
                s.emu_mbps = 0;
                row->s = s;
                an_predict(&mm, &s, &row->p);
            }
        } else {
            add_row(r, "storage", base_bw * scales[i], &s, "storage %.0f MB/s (x%.2g)",
                    base_bw * scales[i], scales[i]);
        }
    }
    /* echo factor */
    const double echoes[] = {1, 1.5, 2, 3, 4};
    for (size_t i = 0; i < sizeof echoes / sizeof echoes[0]; i++) {
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
        an_row *row = add_row(r, "partitioned", nodes[i], &s, "%.0f ranks x cache %.0f%%", nodes[i],
                              100 * s.cache_frac);
        if (row)
            snprintf(row->label, sizeof row->label, "%.0f ranks x cache %.0f%%, peers at %.0f MB/s",
                     nodes[i], 100 * s.cache_frac, s.net_mbps);
    }

    /* recommendations */
    r->nreco = 0;
    an_pred p;
    /* 1. cores per accelerator: fewest cores whose prep stall is negligible */
    {
        an_reco *rc = &r->reco[r->nreco++];
        memset(rc, 0, sizeof *rc);
        snprintf(rc->what, sizeof rc->what, "cores");
        rc->value = -1;
        for (double k = 1; k <= 64 * cores; k++) {
            s = r->cur;
            s.cores = k;
            s.threads = fmax(r->cur.threads, k);
            an_predict(m, &s, &p);
            if (p.prep_stall_s < AN_STALL_OK * p.nofetch_s) {
                rc->value = k;
                break;
            }
        }
        /* judged on the epoch without fetch cost: would prep stall once storage keeps up? */
        rc->needed = r->now.prep_stall_s >= AN_STALL_OK * r->now.nofetch_s;
        /* the gain is judged without fetch cost too (storage is recommendation 2) */
        int fetchy = r->now.fetch_stall_s >= AN_STALL_OK * r->now.epoch_s;
        rc->epoch_before_s = r->now.nofetch_s;
        if (rc->value > 0) {
            s = r->cur;
            s.cores = fmax(rc->value, r->cur.cores);
            s.threads = fmax(r->cur.threads, s.cores);
            an_predict(m, &s, &p);
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
                     rc->value, 100 * AN_STALL_OK, cores);
    }
    /* 2. cache: smallest MinIO fraction whose fetch stall is negligible */
    double cache_feasible = 1, cache_rec = r->cur.minio ? r->cur.cache_frac : 0;
    if (shard_bytes(m) > 0 && m->mem_available_bytes > 0)
        cache_feasible = fmin(1, 0.8 * m->mem_available_bytes / shard_bytes(m));
    /* Reads in flight come first: a fixed io_depth under auto's cap whose
     * reads wait (latency) is fixed without memory. */
    double io_fix_epoch = 0;
    if (r->now.fetch_stall_s >= AN_STALL_OK * r->now.epoch_s && r->cur.io_depth < NOSTALL_IO_DEPTH_AUTO_MAX) {
        s = r->cur;
        s.io_depth = NOSTALL_IO_DEPTH_AUTO_MAX;
        an_predict(m, &s, &p);
        if (p.fetch_stall_s < AN_STALL_OK * p.epoch_s) io_fix_epoch = p.epoch_s;
    }
    {
        an_reco *rc = &r->reco[r->nreco++];
        memset(rc, 0, sizeof *rc);
        snprintf(rc->what, sizeof rc->what, "cache");
        rc->value = -1;
        for (int i = 0; i <= 100; i++) {
            s = r->cur;
            s.minio = 1;
            s.cache_frac = fmax(i / 100.0, r->cur.minio ? r->cur.cache_frac : 0);
            an_predict(m, &s, &p);
            if (p.fetch_stall_s < AN_STALL_OK * p.epoch_s) {
                rc->value = s.cache_frac;
                rc->epoch_after_s = p.epoch_s;
                break;
            }
        }
        rc->needed = r->now.fetch_stall_s >= AN_STALL_OK * r->now.epoch_s;
        rc->epoch_before_s = r->now.epoch_s;
        if (!rc->needed) {
            rc->epoch_after_s = r->now.epoch_s;
            snprintf(rc->text, sizeof rc->text,
                     "Storage: the fetch stall is under %.0f%% already; no cache needed%s.",
                     100 * AN_STALL_OK, r->cur.minio && r->cur.cache_frac > 0 ? " beyond the configured one" : "");
        } else if (io_fix_epoch > 0) {
            rc->value = r->cur.minio ? r->cur.cache_frac : 0; /* no more cache than now */
            rc->epoch_after_s = io_fix_epoch;
            snprintf(rc->text, sizeof rc->text,
                     "Storage: the reads wait rather than saturate the device: more of them in flight "
                     "remove the fetch stall without a cache. --io-depth 0 (auto: up to %d per worker "
                     "thread, as reads wait; now %.0f) predicts epoch %.2f s instead of %.2f s (%.0f%% "
                     "faster).",
                     NOSTALL_IO_DEPTH_AUTO_MAX, r->cur.io_depth, rc->epoch_after_s, rc->epoch_before_s,
                     100 * (rc->epoch_before_s / rc->epoch_after_s - 1));
        } else if (rc->value < 0) {
            snprintf(rc->text, sizeof rc->text, "Storage: even a cache of the whole dataset leaves a fetch stall.");
        } else {
            cache_rec = rc->value;
            double bytes = rc->value * shard_bytes(m);
            char sz[32];
            if (bytes >= 1073741824.0) snprintf(sz, sizeof sz, "%.2fG", bytes / 1073741824.0);
            else snprintf(sz, sizeof sz, "%.0fM", ceil(bytes / 1048576.0));
            snprintf(rc->text, sizeof rc->text,
                     "Storage: a MinIO cache of %.0f%% of the data this rank reads (--cache-bytes %s) removes the fetch "
                     "stall: predicted epoch %.2f s instead of %.2f s (%.0f%% faster)%s.",
                     100 * rc->value, sz, rc->epoch_after_s, rc->epoch_before_s,
                     100 * (rc->epoch_before_s / rc->epoch_after_s - 1),
                     rc->value > cache_feasible ? "; more than this machine's available memory allows" : "");
            if (rc->value > cache_feasible) cache_rec = cache_feasible;
        }
    }
    /* 3. echo: what remains with this machine's cores and the feasible cache */
    {
        an_reco *rc = &r->reco[r->nreco++];
        memset(rc, 0, sizeof *rc);
        snprintf(rc->what, sizeof rc->what, "echo");
        an_scenario base = r->cur;
        base.threads = fmax(base.threads, base.cores);
        if (cache_rec > 0) {
            base.minio = 1;
            base.cache_frac = cache_rec;
        }
        if (io_fix_epoch > 0) base.io_depth = NOSTALL_IO_DEPTH_AUTO_MAX;
        const char *with = cache_rec > 0 ? " and the cache above"
                           : io_fix_epoch > 0 ? " and the reads in flight above" : "";
        an_pred pb;
        an_predict(m, &base, &pb);
        rc->value = -1;
        rc->epoch_before_s = pb.epoch_s;
        rc->needed = stall_frac(&pb) >= AN_STALL_OK;
        for (double e = 1; e <= 16; e += 0.25) {
            s = base;
            s.echo_factor = e;
            an_predict(m, &s, &p);
            if (stall_frac(&p) < AN_STALL_OK) {
                rc->value = e;
                rc->epoch_after_s = p.epoch_s;
                break;
            }
        }
        if (!rc->needed)
            snprintf(rc->text, sizeof rc->text,
                     "Echoing: not needed; with %.0f threads%s the predicted stall is %.1f%%.", base.threads,
                     with, 100 * stall_frac(&pb));
        else if (rc->value < 0)
            snprintf(rc->text, sizeof rc->text, "Echoing: no echo factor up to 16 removes the remaining stall.");
        else {
            s = base;
            s.echo_factor = rc->value;
            an_predict(m, &s, &p);
            snprintf(rc->text, sizeof rc->text,
                     "Echoing: what remains (%.1f%% stall with %.0f threads%s) is covered by --echo-factor "
                     "%.2g (echo point %s): %.0f -> %.0f items/s to the step (repeated items count less "
                     "than fresh ones for accuracy).",
                     100 * stall_frac(&pb), base.threads, with,
                     rc->value, (const char *[]){"fetch", "decode", "augment", "batch"}[base.echo_point & 3],
                     rate(&pb), rate(&p));
        }
    }
    /* 4. decoding: the restart-marker copy (`nostall transcode`), measured on a sample */
    {
        an_reco *rc = &r->reco[r->nreco++];
        memset(rc, 0, sizeof *rc);
        snprintf(rc->what, sizeof rc->what, "transcode");
        rc->value = m->rst_cpu_ratio > 0 ? m->rst_cpu_ratio : -1;
        rc->needed = r->now.prep_stall_s >= AN_STALL_OK * r->now.nofetch_s;
        rc->epoch_before_s = r->now.nofetch_s;
        rc->epoch_after_s = r->now.nofetch_s;
        if (rc->value > 0) {
            s = r->cur;
            s.cpu_scale = rc->value;
            an_predict(m, &s, &p);
            rc->epoch_after_s = p.nofetch_s;
        }
        if (rc->value < 0)
            snprintf(rc->text, sizeof rc->text,
                     "Decoding: the restart-marker copy was not measured (fewer than 16 JPEG items "
                     "could be sampled and transcoded).");
        else if (rc->value >= AN_RST_USEFUL)
            snprintf(rc->text, sizeof rc->text,
                     "Decoding: `nostall transcode` would not help these files (CPU per item x%.2f on "
                     "a sample of %.0f: they already have restart markers, or the crops cover most of "
                     "each image).", rc->value, m->rst_sample_items);
        else if (!rc->needed)
            snprintf(rc->text, sizeof rc->text,
                     "Decoding: not needed (the prep stall is under %.0f%%); for CPU to spare, "
                     "`nostall transcode` would cut CPU per item x%.2f (measured on %.0f items).",
                     100 * AN_STALL_OK, rc->value, m->rst_sample_items);
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
                     r->now.fetch_stall_s >= AN_STALL_OK * r->now.epoch_s ? " once storage keeps up"
                                                                         : "");
    }
    /* combinations: cache x cores, and all recommendations together */
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
