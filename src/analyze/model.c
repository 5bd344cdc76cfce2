/*
 * model.c — the stall analyzer's what-if model: the epoch time of a
 * configuration (nst_an_scenario) predicted from the measurements.
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
 * CPU work per item is measured (process CPU time of the prep run, or of the
 * cached run less the step's CPU, per item) and split into
 * fetch/decode/augment by the workers' busy times; echoing repeats the later
 * stages per delivered item and the earlier ones per fresh item. Stalls are
 * attributed as DS-Analyzer does: prep stall = epoch without any fetch cost
 * - compute; fetch stall = the rest of the waiting. docs/analyzer.md has the
 * model in prose.
 *
 * With prep servers (prep_servers), prep is the items/s of the trainer's
 * own threads and of the servers together (nst_an_prep_mix: the servers'
 * measured rate, the trainer's CPU to receive an item, the cores left);
 * the trainer reads from storage only for its own threads' share.
 *
 * Pure functions of their arguments: any thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_impl.h"

/* Bytes this rank reads in an epoch (its shard of the dataset): what a
 * cache fraction is a fraction of. */
double nst_an_shard_bytes(const nostall_analyze_meas *m)
{
    double mean_b = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
    return fmin(m->dataset_bytes, mean_b * m->items_per_epoch);
}

nst_an_scenario nst_an_scenario_current(const nostall_analyze_meas *m)
{
    nst_an_scenario s;
    memset(&s, 0, sizeof s);
    s.threads = m->threads;
    s.io_depth = m->io_depth >= 1 ? m->io_depth : 1;
    s.cores = m->cores;
    s.minio = m->cache_minio > 0;
    s.cache_frac = s.minio && nst_an_shard_bytes(m) > 0
                       ? fmin(1.0, m->cache_bytes / nst_an_shard_bytes(m))
                       : 0;
    s.emu_mbps = m->emu_mbps;
    s.emu_latency_ms = m->emu_latency_ms;
    s.bw_scale = 1;
    s.step_s = m->step_s;
    s.echo_factor = m->echo_factor >= 1 ? m->echo_factor : 1;
    s.echo_point = (int)m->echo_point;
    s.nodes = 1;
    s.cpu_scale = 1;
    s.net_mbps = 1250; /* 10 Gb/s Ethernet, until told (--predict net_mbps=) */
    s.net_latency_ms = 0.2;
    s.prep_servers = m->prep_servers;
    /* per server: items over the time it had items outstanding (the run
     * with the servers, as fast as they went) */
    s.server_rate =
        m->srv_remote_busy_ns > 0 ? m->srv_remote_items / (m->srv_remote_busy_ns * 1e-9) : 0;
    s.recv_cpu_s = m->srv_remote_items > 0 ? m->srv_recv_cpu_s / m->srv_remote_items : 0;
    return s;
}

void nst_an_prep_mix(double k, double server_rate, double recv_cpu_s, double net_items_s,
                     double threads, double cores, double local_cpu_s, nst_an_mix *o)
{
    memset(o, 0, sizeof *o);
    double rmax = k > 0 && server_rate > 0 ? k * server_rate : 0;
    if (recv_cpu_s > 0) rmax = fmin(rmax, k / recv_cpu_s); /* a thread per server */
    if (net_items_s > 0) rmax = fmin(rmax, net_items_s);
    cores = fmax(0, cores);
    double lmax = threads > 0 && local_cpu_s > 0 ? fmin(threads, cores) / local_cpu_s : 0;
    if (recv_cpu_s <= local_cpu_s) { /* received items are the cheaper: first */
        o->remote = recv_cpu_s > 0 ? fmin(rmax, cores / recv_cpu_s) : rmax;
        if (local_cpu_s > 0)
            o->local = fmin(lmax, fmax(0, cores - o->remote * recv_cpu_s) / local_cpu_s);
    } else {
        o->local = fmin(lmax, cores / local_cpu_s);
        o->remote = fmin(rmax, fmax(0, cores - o->local * local_cpu_s) / recv_cpu_s);
    }
    o->total = o->remote + o->local;
    o->cpu = o->remote * recv_cpu_s + o->local * local_cpu_s;
}

double nst_an_cpu_free(const nostall_analyze_meas *m, const nst_an_scenario *s)
{
    double step_cores = s->step_s > 0 ? fmin(m->step_cpu_s / s->step_s, s->cores - 1) : 0;
    if (step_cores < 0) step_cores = 0;
    return fmax(fmin(1.0, s->cores), s->cores - step_cores);
}

/* CPU seconds per item: from the prep run (workers busy throughout) when
 * there is one, else from the cached run less the step's CPU. */
static double cpu_per_item(const nostall_analyze_meas *m)
{
    if (m->prep_items > 0 && m->prep_cpu_s > 0) return m->prep_cpu_s / m->prep_items;
    double warm_items = m->warm_items > 0 ? m->warm_items : 1;
    double cpu = (m->warm_cpu_s - m->warm_batches * m->step_cpu_s) / warm_items;
    double busy = m->warm_fetch_ns + m->warm_decode_ns + m->warm_augment_ns;
    if (!(cpu > 0)) cpu = busy > 0 ? busy * 1e-9 / warm_items : 1e-6;
    return cpu;
}

/* Upstream time of one epoch; with_fetch = 0 leaves out every storage cost. */
static double upstream_s(const nostall_analyze_meas *m, const nst_an_scenario *s, double n,
                         int with_fetch, double *prep_out, double *fetch_out, double *eff_out,
                         double *remote_out)
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
    double bf = pr ? m->prep_fetch_ns : m->warm_fetch_ns,
           bd = pr ? m->prep_decode_ns : m->warm_decode_ns;
    double ba = pr ? m->prep_augment_ns : m->warm_augment_ns, busy = bf + bd + ba;
    double ff = busy > 0 ? bf / busy : 0, fd = busy > 0 ? bd / busy : 1,
           fa = busy > 0 ? ba / busy : 0;
    double cf = cpu * ff, cd = cpu * fd, ca = cpu * fa, copy = 0;
    if (m->mem_bw > 0) copy = m->item_out_bytes / m->mem_bw;
    double work;
    switch (s->echo_point) {
    case NOSTALL_ECHO_POINT_FETCH: work = n * cf + delivered * (cd + ca); break;
    case NOSTALL_ECHO_POINT_DECODE: work = n * (cf + cd) + delivered * ca; break;
    default: work = n * cpu + (delivered - n) * copy; break; /* AUGMENT, BATCH */
    }
    /* The cores are the machine's (dedicated to the job). The CPU share other
     * processes leave the job (cpu_available) is reported as a warning, not
     * applied: load from others comes and goes; to model it, predict with
     * cores=<that share>. */
    const double free_cores = nst_an_cpu_free(m, s);
    double eff = fmin(s->threads, free_cores);
    if (eff < 0.01) eff = 0.01;
    double prep = work / eff;
    /* Prep servers: the trainer's threads make `own` of the items, and only
     * those are read from its storage; the servers read their own. */
    double own = 1;
    if (s->prep_servers > 0) {
        nst_an_mix x;
        /* bytes an item sends: as received, else the output tensor's */
        double ib =
            m->srv_remote_items > 0 ? m->srv_remote_bytes / m->srv_remote_items : m->item_out_bytes;
        double net = s->prep_net_mbps > 0 && ib > 0 ? s->prep_net_mbps * 1e6 / ib : 0;
        nst_an_prep_mix(s->prep_servers, s->server_rate, s->recv_cpu_s, net, s->threads, free_cores,
                        n > 0 ? work / n : cpu, &x);
        prep = x.total > 0 ? n / x.total : INFINITY;
        own = x.total > 0 ? x.local / x.total : 0;
    }
    if (remote_out) *remote_out = 1 - own;

    double device = 0, wait = 0;
    if (with_fetch) {
        double mean_b = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
        double c = s->minio ? fmin(1, fmax(0, s->cache_frac)) : 0;
        int fits = nst_an_shard_bytes(m) <= 0.8 * m->mem_available_bytes;
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
        double miss_emu = s->cold ? 1 : 1 - agg; /* reads that reach the emulated storage */
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
    device *= own;
    wait *= own;
    serial *= own;
    double up = fmax(prep, fmax(device, serial));
    if (prep_out) *prep_out = prep;
    if (fetch_out) *fetch_out = fmax(device, wait / (threads * depth));
    if (eff_out) *eff_out = eff;
    return up;
}

void nst_an_rates_get(const nostall_analyze_meas *m, nst_an_rates *r)
{
    nst_an_scenario s = nst_an_scenario_current(m);
    nst_an_pred p;
    double n = m->items_per_epoch > 0 ? m->items_per_epoch : 1;
    memset(r, 0, sizeof *r);
    r->cpu_item_s = cpu_per_item(m);
    r->per_core = r->cpu_item_s > 0 ? 1 / r->cpu_item_s : 0;
    s.echo_factor = 1;
    s.cold = 1;
    nst_an_predict(m, &s, &p);
    r->prep = p.prep_s > 0 ? n / p.prep_s : 0;
    r->fetch = p.fetch_s > 0 ? n / p.fetch_s : 0;
    r->accel = m->step_s > 0 ? m->batch_size / m->step_s : 0;
    r->item_bytes = m->dataset_items > 0 ? m->dataset_bytes / m->dataset_items : 0;
    r->remote = p.prep_s > 0 ? p.remote_items / p.prep_s : 0;
}

static double epoch_of(double nb, double up, double compute, int single)
{
    if (nb < 1) nb = 1;
    double u = up / nb, c = compute / nb;
    return nb * fmax(u, c) + (single ? fmin(u, c) : 0);
}

void nst_an_predict(const nostall_analyze_meas *m, const nst_an_scenario *s, nst_an_pred *p)
{
    memset(p, 0, sizeof *p);
    double n = m->items_per_epoch;
    double e = s->echo_factor >= 1 ? s->echo_factor : 1;
    double bs = m->batch_size >= 1 ? m->batch_size : 1;
    double nb = ceil(n * e / bs);
    int single = s->cold;
    p->delivered = n * e;
    p->compute_s = nb * s->step_s;
    double remote = 0;
    double up = upstream_s(m, s, n, 1, &p->prep_s, &p->fetch_s, &p->eff_cores, &remote);
    double up_nofetch = upstream_s(m, s, n, 0, NULL, NULL, NULL, NULL);
    p->remote_items = n * remote;
    p->epoch_s = epoch_of(nb, up, p->compute_s, single);
    double t_prep = epoch_of(nb, up_nofetch, p->compute_s, single);
    p->nofetch_s = t_prep;
    /* the compute the consumer does in the epoch; the rest is waiting */
    p->prep_stall_s = fmax(0, t_prep - p->compute_s);
    p->fetch_stall_s = fmax(0, p->epoch_s - t_prep);
    double stall = p->prep_stall_s + p->fetch_stall_s;
    if (p->epoch_s <= 0 || stall < NST_AN_STALL_OK * p->epoch_s)
        p->bound = "compute";
    else
        p->bound = p->fetch_stall_s > p->prep_stall_s ? "fetch" : "prep";
}

int nst_an_scenario_parse(const nostall_analyze_meas *m, nst_an_scenario *s, const char *spec,
                          char *err, size_t errlen)
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
                snprintf(err, errlen,
                         "--predict '%s': echo_point must be fetch|decode|augment|batch", spec);
                return -1;
            }
            s->echo_point = found;
            continue;
        }
        if (end == v || *end || !(x >= 0)) {
            snprintf(err, errlen, "--predict '%s': value of '%s' is not a number >= 0", spec, k);
            return -1;
        }
        if (!strcmp(k, "threads"))
            s->threads = x;
        else if (!strcmp(k, "io_depth") || !strcmp(k, "io-depth"))
            s->io_depth = x < 1 ? 1 : x;
        else if (!strcmp(k, "cores"))
            s->cores = x;
        else if (!strcmp(k, "cache_fraction") || !strcmp(k, "cache-fraction")) {
            s->cache_frac = fmin(1, x);
            s->minio = x > 0 || s->minio;
        } else if (!strcmp(k, "cache_bytes") || !strcmp(k, "cache-bytes")) {
            s->cache_frac = nst_an_shard_bytes(m) > 0 ? fmin(1, x / nst_an_shard_bytes(m)) : 0;
            s->minio = x > 0 || s->minio;
        } else if (!strcmp(k, "minio"))
            s->minio = x > 0;
        else if (!strcmp(k, "storage_mbps") || !strcmp(k, "storage-mbps"))
            s->emu_mbps = x;
        else if (!strcmp(k, "storage_latency_ms") || !strcmp(k, "storage-latency-ms"))
            s->emu_latency_ms = x;
        else if (!strcmp(k, "bw_scale"))
            s->bw_scale = x;
        else if (!strcmp(k, "step_ms") || !strcmp(k, "step-ms"))
            s->step_s = x / 1000;
        else if (!strcmp(k, "echo_factor") || !strcmp(k, "echo-factor"))
            s->echo_factor = x < 1 ? 1 : x;
        else if (!strcmp(k, "cold"))
            s->cold = x > 0;
        else if (!strcmp(k, "transcode")) {
            if (x > 0 && !(m->rst_cpu_ratio > 0)) {
                snprintf(err, errlen,
                         "--predict '%s': transcode: the restart-marker sample was not "
                         "measured (no JPEG items, or none could be transcoded)",
                         spec);
                return -1;
            }
            s->cpu_scale = x > 0 ? m->rst_cpu_ratio : 1;
        } else if (!strcmp(k, "cache_transcode") || !strcmp(k, "cache-transcode")) {
            if (x > 0 && !(m->rst_cpu_ratio > 0)) {
                snprintf(err, errlen,
                         "--predict '%s': cache_transcode: the restart-marker sample "
                         "was not measured (no JPEG items, or none could be transcoded)",
                         spec);
                return -1;
            }
            s->cache_transcode = x > 0;
        } else if (!strcmp(k, "nodes"))
            s->nodes = x < 1 ? 1 : x;
        else if (!strcmp(k, "net_mbps") || !strcmp(k, "net-mbps"))
            s->net_mbps = x;
        else if (!strcmp(k, "net_latency_ms") || !strcmp(k, "net-latency-ms"))
            s->net_latency_ms = x;
        else if (!strcmp(k, "prep_servers") || !strcmp(k, "prep-servers")) {
            if (x > 0 && !(s->server_rate > 0)) {
                snprintf(err, errlen,
                         "--predict '%s': prep_servers: no server rate (measure with "
                         "prep_servers, or give server_rate=ITEMS_PER_S first)",
                         spec);
                return -1;
            }
            s->prep_servers = x;
        } else if (!strcmp(k, "server_rate") || !strcmp(k, "server-rate"))
            s->server_rate = x;
        else if (!strcmp(k, "recv_cpu_ms") || !strcmp(k, "recv-cpu-ms"))
            s->recv_cpu_s = x / 1000;
        else if (!strcmp(k, "prep_net_mbps") || !strcmp(k, "prep-net-mbps"))
            s->prep_net_mbps = x;
        else {
            snprintf(err, errlen,
                     "--predict '%s': unknown key '%s' (threads, io_depth, cores, cache_fraction, "
                     "cache_bytes, minio, storage_mbps, storage_latency_ms, bw_scale, step_ms, "
                     "echo_factor, echo_point, cold, transcode, cache_transcode, nodes, net_mbps, net_latency_ms, "
                     "server_rate, recv_cpu_ms, prep_servers, prep_net_mbps)",
                     spec, k);
            return -1;
        }
    }
    return 0;
}
