/*
 * loader_stats.c — what the loader tells about itself: the counters of
 * nostall_loader_stats (per-worker ones summed at snapshot, the consumer's,
 * and those of delivered batches), their names, and the table of distinct
 * bad items (filled by the batch backend's sink as batches are delivered).
 *
 * THREADS  Any thread. skip_mu guards the skip table.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "loader_impl.h"
#include "serve/serve.h"

/* Record a bad item of a delivered batch (the backend's sink): counted each
 * time, listed once. Errors here are only allocation failures of the report
 * itself; the skip is still counted. */
static void skip_record(struct nostall_loader *ld, uint64_t index, int status, const char *msg)
{
    uint64_t lo = 0, hi = ld->nskips;
    ld->skipped_total++;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ld->skips[mid].index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ld->nskips && ld->skips[lo].index == index) return;
    if (ld->nskips == ld->skips_cap) {
        uint64_t cap = ld->skips_cap ? ld->skips_cap * 2 : 64;
        skip_entry *p = realloc(ld->skips, cap * sizeof *p);
        if (!p) return;
        ld->skips = p;
        ld->skips_cap = cap;
    }
    memmove(&ld->skips[lo + 1], &ld->skips[lo], (ld->nskips - lo) * sizeof *ld->skips);
    ld->skips[lo].index = index;
    ld->skips[lo].status = status;
    ld->skips[lo].msg = strdup(msg);
    ld->nskips++;
}

void nst_loader_skip(void *ctx, uint64_t index, int status, const char *msg)
{
    struct nostall_loader *ld = ctx;
    pthread_mutex_lock(&ld->skip_mu);
    skip_record(ld, index, status, msg);
    pthread_mutex_unlock(&ld->skip_mu);
}

int nostall_loader_stats(const nostall_loader *cld, nostall_stats *out, size_t size)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nostall_stats s;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_stats: NULL argument");
    memset(&s, 0, sizeof s);
    nst_engine_cursor at;
    ld->bq->ops->cursor(ld->bq, &at);
    s.epoch = at.epoch;
    s.position = at.position;
    s.batches_delivered = STAT_GET(ld->batches_delivered);
    s.items_delivered = STAT_GET(ld->items_delivered);
    s.consumer_wait_ns = STAT_GET(ld->wait_ns);
    s.consumer_busy_ns = STAT_GET(ld->consumer_busy_ns);
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        worker_stats *w = &ld->workers[i].st;
        s.fetch_items += STAT_GET(w->fetch_items);
        s.fetch_bytes += STAT_GET(w->fetch_bytes);
        s.fetch_busy_ns += STAT_GET(w->fetch_ns);
        s.decode_items += STAT_GET(w->decode_items);
        s.decode_pixels += STAT_GET(w->decode_pixels);
        s.decode_busy_ns += STAT_GET(w->decode_ns);
        s.augment_items += STAT_GET(w->augment_items);
        s.augment_bytes += STAT_GET(w->augment_bytes);
        s.augment_busy_ns += STAT_GET(w->augment_ns);
        s.worker_idle_ns += STAT_GET(w->idle_ns);
        s.upstream_busy_ns +=
            STAT_GET(w->fetch_ns) + STAT_GET(w->decode_ns) + STAT_GET(w->augment_ns);
        s.storage_wait_ns += STAT_GET(w->storage_wait_ns);
        s.cache_transcoded += STAT_GET(w->transcoded);
        s.cache_transcode_ns += STAT_GET(w->transcode_ns);
        s.gpu_hw_items += STAT_GET(w->gpu_hw_items);
        s.gpu_default_items += STAT_GET(w->gpu_default_items);
        s.gpu_cpu_items += STAT_GET(w->gpu_cpu_items);
        if (STAT_GET(w->depth) > s.io_depth_max) s.io_depth_max = STAT_GET(w->depth);
    }
    /* Storage and cache counts are those of the delivered batches' items,
     * so a snapshot at an epoch end covers exactly that epoch's items (work
     * already done for batches not yet delivered is counted when they are). */
    s.storage_reads = STAT_GET(ld->dlv[NST_IO_storage_reads]);
    s.storage_bytes_read = STAT_GET(ld->dlv[NST_IO_storage_bytes]);
    s.cache_hits = STAT_GET(ld->dlv[NST_IO_cache_hits]);
    s.cache_misses = STAT_GET(ld->dlv[NST_IO_cache_misses]);
    s.peer_hits = STAT_GET(ld->dlv[NST_IO_peer_hits]);
    s.peer_bytes = STAT_GET(ld->dlv[NST_IO_peer_bytes]);
    s.http_transfers = STAT_GET(ld->dlv[NST_IO_http_transfers]);
    s.http_retries = STAT_GET(ld->dlv[NST_IO_http_retries]);
    s.fresh_items = STAT_GET(ld->dlv[NST_IO_fresh]);
    s.echoed_items = STAT_GET(ld->dlv[NST_IO_echoed]);
    s.echo_uses_1 = STAT_GET(ld->dlv[NST_IO_uses_1]);
    s.echo_uses_2 = STAT_GET(ld->dlv[NST_IO_uses_2]);
    s.echo_uses_3 = STAT_GET(ld->dlv[NST_IO_uses_3]);
    s.echo_uses_4 = STAT_GET(ld->dlv[NST_IO_uses_4]);
    s.echo_uses_5_8 = STAT_GET(ld->dlv[NST_IO_uses_5_8]);
    s.echo_uses_9_up = STAT_GET(ld->dlv[NST_IO_uses_9_up]);
    s.echo_batch_duplicates = STAT_GET(ld->dlv[NST_IO_dups]);
    s.echo_repeat_distance = STAT_GET(ld->dlv[NST_IO_distance]);
    if (ld->cache) {
        nst_cache_stats cs;
        nst_cache_stats_get(ld->cache, &cs);
        s.cache_bytes = cs.bytes;
        s.cache_items = cs.items;
    }
    if (ld->bq->ops->coord_stats) ld->bq->ops->coord_stats(ld->bq, &s);
    pthread_mutex_lock(&ld->skip_mu);
    s.skipped = ld->skipped_total;
    s.skipped_unique = ld->nskips;
    pthread_mutex_unlock(&ld->skip_mu);
    s.threads = ld->nthreads;
    s.cpu_budget = ld->cpu_budget;
    nst_prep_stats(ld->prep, &s);
    nst_tune_stats(ld, &s);
    if (ld->bq->ops->memory) {
        void *mem;
        size_t bytes;
        uint32_t ns, si;
        ld->bq->ops->memory(ld->bq, &mem, &bytes, &ns, &si);
        s.ring_bytes_max = bytes;
        s.ring_slots_usable = ns;
        if (ld->autotune && ld->bq->ops->limit) {
            uint32_t lim = nst_loader_slots(ld, atomic_load(&ld->ahead_now));
            if (lim < ns) s.ring_slots_usable = lim;
        }
    }
    memcpy(out, &s, size < sizeof s ? size : sizeof s);
    return 0;
}

static const char *const stat_names[] = {
#define NST_STAT_NAME_(name, help) #name,
    NOSTALL_STATS_TABLE(NST_STAT_NAME_)
#undef NST_STAT_NAME_
};
static const char *const stat_helps[] = {
#define NST_STAT_HELP_(name, help) help,
    NOSTALL_STATS_TABLE(NST_STAT_HELP_)
#undef NST_STAT_HELP_
};

int nostall_stats_count(void) { return (int)(sizeof stat_names / sizeof *stat_names); }

const char *nostall_stats_name(int i)
{
    return i >= 0 && i < nostall_stats_count() ? stat_names[i] : NULL;
}

const char *nostall_stats_help(int i)
{
    return i >= 0 && i < nostall_stats_count() ? stat_helps[i] : NULL;
}

/* The counters that are values now rather than totals; one list, used by
 * the analyzer's runs and the CLI's differences of snapshots. */
int nostall_stats_gauge(int i)
{
    static const char *const g[] = {"threads",
                                    "cache_bytes",
                                    "cache_items",
                                    "autotune",
                                    "active_workers",
                                    "tuned_batches_ahead",
                                    "tuned_io_depth",
                                    "tune_reason",
                                    "cpu_budget",
                                    "cpu_budget_milli",
                                    "cpu_returned_milli",
                                    "ring_bytes_max",
                                    "ring_slots_usable",
                                    "io_depth_max",
                                    "prep_servers_up",
                                    "cache_budget_bytes",
                                    "tuned_cache_bytes",
                                    "tuned_echo_max",
                                    "epoch",
                                    "position",
                                    "coord_members",
                                    "tune_last_change_batch",
                                    "tune_last_change_ms"};
    const char *name = nostall_stats_name(i);
    if (!name) return -1;
    for (size_t k = 0; k < sizeof g / sizeof *g; k++)
        if (!strcmp(name, g[k])) return 1;
    return 0;
}

uint64_t nostall_loader_skipped_count(const nostall_loader *cld)
{
    nostall_loader *ld = (nostall_loader *)cld;
    if (!ld) return 0;
    pthread_mutex_lock(&ld->skip_mu);
    uint64_t n = ld->nskips;
    pthread_mutex_unlock(&ld->skip_mu);
    return n;
}

int nostall_loader_skipped(const nostall_loader *cld, uint64_t i, nostall_skip_info *out)
{
    nostall_loader *ld = (nostall_loader *)cld;
    int rc = 0;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_skipped: NULL argument");
    pthread_mutex_lock(&ld->skip_mu);
    if (i >= ld->nskips) {
        rc = nst_error(NOSTALL_E_INVALID, "nostall_loader_skipped: %llu >= %llu skipped items",
                       (unsigned long long)i, (unsigned long long)ld->nskips);
    } else {
        const skip_entry *e = &ld->skips[i];
        free(ld->skip_reason);
        ld->skip_reason = strdup(e->msg ? e->msg : nostall_strerror(e->status));
        out->index = e->index;
        out->path = nst_recipe_path(ld->recipe, e->index);
        out->status = e->status;
        out->reason = ld->skip_reason ? ld->skip_reason : nostall_strerror(e->status);
    }
    pthread_mutex_unlock(&ld->skip_mu);
    return rc;
}
