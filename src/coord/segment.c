/*
 * segment.c — a coordinated group's shared-memory segment: its name, its
 * plan (the group header, then the batch engine's block), creating it
 * (under a temporary name, then linked to the group's name, so nobody ever
 * maps a half-made one), attaching to it, comparing a joiner's plan and
 * fingerprint with the group's, and retiring it when the last member
 * leaves. Called by group.c at join and leave.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "coord/group_impl.h"

int nst_group_path(const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "/dev/shm/nostall-%u-%s", (unsigned)getuid(), name ? name : "");
    return n < 0 || (size_t)n >= cap ? NOSTALL_E_INVALID : 0;
}

int grp_valid_name(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > NST_GROUP_NAME_MAX || n[0] == '.') return 0;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

/* The group's plan of epochs (the same arithmetic in every member). */
static uint32_t grp_batch_len(void *ctx, uint64_t epoch, uint64_t pos)
{
    const header *h = ctx;
    (void)epoch;
    if (pos >= h->items_per_epoch) return 0;
    uint64_t rem = h->items_per_epoch - pos;
    if (rem >= h->batch_size) return h->batch_size;
    return h->drop_last ? 0 : (uint32_t)rem;
}

void grp_set_plan(nst_group *g)
{
    g->plan = (nst_engine_plan){.batch_len = grp_batch_len, .ctx = g->h, .epochs = g->h->epochs};
}

int grp_make_plan(const nst_group_params *p, grp_plan *pl, const char *fn)
{
    const char *nm = p->name;
    if (p->nslots == 0 || p->nslots > NST_GROUP_MAX_SLOTS)
        return nst_error(NOSTALL_E_OPTION, "%s: group %s: nslots %u out of 1..%u", fn, nm,
                         p->nslots, NST_GROUP_MAX_SLOTS);
    if (p->batch_size == 0 || (!p->fields && p->item_bytes == 0) || p->items_per_epoch == 0)
        return nst_error(NOSTALL_E_INVALID, "%s: group %s: empty batch, item or epoch", fn, nm);
    if (p->max_lead > p->nslots)
        return nst_error(NOSTALL_E_OPTION, "%s: group %s: max_lead %u exceeds nslots %u", fn, nm,
                         p->max_lead, p->nslots);
    pl->max_lead = p->max_lead ? p->max_lead : p->nslots;
    pl->batches_per_epoch = p->drop_last ? p->items_per_epoch / p->batch_size
                                         : (p->items_per_epoch + p->batch_size - 1) / p->batch_size;
    if (pl->batches_per_epoch == 0)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: group %s: %llu items make no batch of %u with drop_last", fn, nm,
                         (unsigned long long)p->items_per_epoch, p->batch_size);
    if (p->fields) {
        if (p->nfields == 0 || p->nfields > NST_FIELDS_MAX)
            return nst_error(NOSTALL_E_INVALID, "%s: group %s: %u fields", fn, nm, p->nfields);
        pl->nfields = p->nfields;
        memcpy(pl->fields, p->fields, p->nfields * sizeof *p->fields);
    } else { /* the tests' plain items: bytes and a label */
        memset(pl->fields, 0, sizeof pl->fields);
        pl->nfields = 2;
        pl->fields[0] = (nst_field_decl){.name = "item",
                                         .dtype = NOSTALL_DTYPE_UINT8,
                                         .ndim = 1,
                                         .shape = {p->item_bytes},
                                         .item_bytes = p->item_bytes};
        pl->fields[1] = (nst_field_decl){.name = "label",
                                         .dtype = NOSTALL_DTYPE_INT64,
                                         .item_bytes = sizeof(int64_t)};
    }
    size_t eng = nst_engine_size(p->nslots, p->batch_size, pl->fields, pl->nfields);
    if (!eng) return nst_error(NOSTALL_E_INVALID, "%s: group %s: ring too large", fn, nm);
    pl->engine_off = (sizeof(header) + 4095) & ~(uint64_t)4095;
    pl->total = pl->engine_off + eng;
    /* fingerprint: name\0value\0 ... */
    size_t off = 0;
    for (uint32_t i = 0; i < p->nfp; i++) {
        const char *n = p->fp[i].name ? p->fp[i].name : "",
                   *v = p->fp[i].value ? p->fp[i].value : "";
        size_t ln = strlen(n) + 1, lv = strlen(v) + 1;
        if (off + ln + lv > sizeof pl->fp)
            return nst_error(NOSTALL_E_OPTION,
                             "%s: group %s: fingerprint over %d bytes at option %s", fn, nm,
                             NST_GROUP_FP_MAX, n);
        memcpy(pl->fp + off, n, ln);
        memcpy(pl->fp + off + ln, v, lv);
        off += ln + lv;
    }
    pl->fp_len = (uint32_t)off;
    return 0;
}

/* First difference between the group's plan and ours: E_OPTION naming it. */
int grp_compare(nst_group *g, const nst_group_params *p, const grp_plan *pl)
{
    header *h = g->h;
    const char *a = h->fp, *ae = h->fp + h->fp_len, *b = pl->fp, *be = pl->fp + pl->fp_len;
    while (a < ae || b < be) {
        if (a >= ae || b >= be) {
            const char *extra = a < ae ? a : b;
            return nst_error(NOSTALL_E_OPTION, "group %s: option %s is set by %s but not by %s",
                             g->name, extra, a < ae ? "the group" : "this job",
                             a < ae ? "this job" : "the group");
        }
        const char *av = a + strlen(a) + 1, *bv = b + strlen(b) + 1;
        if (strcmp(a, b) != 0)
            return nst_error(NOSTALL_E_OPTION,
                             "group %s: option lists differ: group has %s, this job %s", g->name, a,
                             b);
        if (strcmp(av, bv) != 0)
            return nst_error(NOSTALL_E_OPTION,
                             "group %s: option %s differs: group has '%s', this job '%s'", g->name,
                             a, av, bv);
        a = av + strlen(av) + 1;
        b = bv + strlen(bv) + 1;
    }
#define CMP_(field, what, val)                                                                     \
    if ((uint64_t)h->field != (uint64_t)(val))                                                     \
        return nst_error(NOSTALL_E_OPTION,                                                         \
                         "group %s: option %s differs: group has %llu, this job %llu", g->name,    \
                         what, (unsigned long long)h->field, (unsigned long long)(val));
    CMP_(items_per_epoch, "items_per_epoch", p->items_per_epoch)
    CMP_(batch_size, "batch_size", p->batch_size)
    CMP_(drop_last, "drop_last", p->drop_last ? 1 : 0)
    CMP_(epochs, "epochs", p->epochs)
    CMP_(field_bytes[0], "item_bytes", pl->fields[0].item_bytes)
    CMP_(nfields, "fields", pl->nfields)
    CMP_(nslots, "nslots", p->nslots)
    CMP_(max_lead, "max_lead", pl->max_lead)
    CMP_(fail_on_bad, "on_bad_item (fail)", p->fail_on_bad ? 1 : 0)
    CMP_(fill, "drop_last top-up", p->fill ? 1 : 0)
#undef CMP_
    for (uint32_t f = 1; f < pl->nfields; f++)
        if (h->field_bytes[f] != pl->fields[f].item_bytes)
            return nst_error(NOSTALL_E_OPTION,
                             "group %s: field %s differs: group has %llu bytes, "
                             "this job %zu",
                             g->name, pl->fields[f].name, (unsigned long long)h->field_bytes[f],
                             pl->fields[f].item_bytes);
    return 0;
}

void grp_unmap(nst_group *g)
{
    if (g->h) munmap(g->h, g->size);
    g->h = NULL;
    g->q = NULL;
    g->base = NULL;
}

/* Mark the segment defunct and remove its name if the name is still ours
 * (mutex held, so no two processes unlink the same name). */
void grp_retire(nst_group *g)
{
    struct stat st;
    char path[sizeof g->shm + 16];
    atomic_store(&g->h->seg_state, SEG_DEFUNCT);
    snprintf(path, sizeof path, "/dev/shm%s", g->shm);
    if (stat(path, &st) == 0 && st.st_ino == g->ino && st.st_dev == g->dev) shm_unlink(g->shm);
}

static void init_header(nst_group *g, const nst_group_params *p, const grp_plan *pl, uint64_t gen)
{
    header *h = g->h;
    h->abi = GRP_ABI;
    h->layout = LAYOUT_SIG;
    h->generation = gen;
    h->total_bytes = pl->total;
    h->engine_off = pl->engine_off;
    h->items_per_epoch = p->items_per_epoch;
    h->epochs = p->epochs;
    h->batches_per_epoch = pl->batches_per_epoch;
    h->batch_size = p->batch_size;
    h->drop_last = p->drop_last ? 1 : 0;
    h->nslots = p->nslots;
    h->max_lead = pl->max_lead;
    h->fail_on_bad = p->fail_on_bad ? 1 : 0;
    h->fill = p->fill ? 1 : 0;
    h->nfields = pl->nfields;
    for (uint32_t f = 0; f < pl->nfields; f++) h->field_bytes[f] = pl->fields[f].item_bytes;
    h->nfp = p->nfp;
    h->fp_len = pl->fp_len;
    memcpy(h->fp, pl->fp, pl->fp_len);
}

/* Build a segment under a temporary name with ourselves as member 0, then
 * link it to the group's name. 1: created; 0: someone else won; <0 error. */
int grp_create(nst_group *g, const nst_group_params *p, const grp_plan *pl, uint64_t gen,
               int *fd_out)
{
    static atomic_uint counter;
    char tmp[sizeof g->shm + 48], tpath[sizeof tmp + 16], fpath[sizeof g->shm + 16];
    snprintf(tmp, sizeof tmp, "/nostall-%u~tmp~%d~%u", (unsigned)getuid(), (int)g->pid,
             atomic_fetch_add(&counter, 1));
    snprintf(tpath, sizeof tpath, "/dev/shm%s", tmp);
    snprintf(fpath, sizeof fpath, "/dev/shm%s", g->shm);
    int fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return nst_error(errno == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO,
                         "group %s: cannot create %s: %s", g->name, tpath, strerror(errno));
    int rc, err;
    if (ftruncate(fd, (off_t)pl->total) < 0 ||
        (err = posix_fallocate(fd, 0, (off_t)pl->total)) != 0) {
        rc = nst_error(NOSTALL_E_NOMEM, "group %s: cannot reserve %llu bytes in /dev/shm", g->name,
                       (unsigned long long)pl->total);
        goto fail;
    }
    void *mem = mmap(NULL, pl->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        rc = nst_error(NOSTALL_E_NOMEM, "group %s: cannot map %llu bytes: %s", g->name,
                       (unsigned long long)pl->total, strerror(errno));
        goto fail;
    }
    g->h = mem;
    g->base = mem;
    g->size = pl->total;
    init_header(g, p, pl, gen);
    if ((rc = grp_init_mutex(g->h, g->name)) < 0) {
        grp_unmap(g);
        goto fail;
    }
    g->q =
        nst_engine_init(g->base + pl->engine_off, p->nslots, p->batch_size, pl->fields, pl->nfields,
                        (p->fail_on_bad ? NST_ENGINE_FAIL : 0) | (p->fill ? NST_ENGINE_FILL : 0));
    g->q->max_lead = pl->max_lead;
    grp_set_plan(g);
    grp_fill_member(g, 0, 0, 0);
    atomic_store(&g->h->seg_state, SEG_LIVE);
    g->h->magic = GRP_MAGIC;
    struct stat st;
    fstat(fd, &st);
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    if (link(tpath, fpath) < 0) {
        err = errno;
        grp_unmap(g);
        close(fd);
        shm_unlink(tmp);
        if (err == EEXIST) return 0;
        return nst_error(NOSTALL_E_IO, "group %s: cannot link %s: %s", g->name, fpath,
                         strerror(err));
    }
    shm_unlink(tmp);
    *fd_out = fd;
    return 1;
fail:
    close(fd);
    shm_unlink(tmp);
    return rc;
}

/* Map an existing segment and check it is one of ours. 0 mapped; *retry
 * set when the name vanished meanwhile (try again); <0 error. */
int grp_attach(nst_group *g, int *retry, const char *fn)
{
    *retry = 0;
    int fd = shm_open(g->shm, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0 && errno == ENOENT) {
        *retry = 1;
        return 0;
    }
    if (fd < 0)
        return nst_error(errno == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO,
                         "%s: group %s: cannot open /dev/shm%s: %s", fn, g->name, g->shm,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != getuid() || (st.st_mode & 077) ||
        (size_t)st.st_size < sizeof(header)) {
        close(fd);
        return nst_error(NOSTALL_E_PERMISSION,
                         "%s: group %s: /dev/shm%s is not a private nostall segment of this user "
                         "(owner, mode 0600, size); remove it",
                         fn, g->name, g->shm);
    }
    void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED)
        return nst_error(NOSTALL_E_NOMEM, "%s: group %s: cannot map /dev/shm%s: %s", fn, g->name,
                         g->shm, strerror(errno));
    g->h = mem;
    g->base = mem;
    g->size = (size_t)st.st_size;
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    header *h = g->h;
    if (h->magic != GRP_MAGIC || h->abi != GRP_ABI || h->layout != LAYOUT_SIG ||
        h->total_bytes != (uint64_t)st.st_size) {
        int rc = nst_error(NOSTALL_E_STATE,
                           "%s: group %s: /dev/shm%s has magic %016llx ABI %u size %llu, not a "
                           "segment of this library (ABI %u); remove it or use another name",
                           fn, g->name, g->shm, (unsigned long long)h->magic, h->abi,
                           (unsigned long long)st.st_size, GRP_ABI);
        grp_unmap(g);
        return rc;
    }
    g->q = (nst_engine *)(g->base + h->engine_off);
    grp_set_plan(g);
    return 0;
}

/* Remove temporary segments of creators that died before linking. */
void grp_clean_tmp(void)
{
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "nostall-%u~tmp~", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)n) != 0) continue;
        pid_t pid = (pid_t)atoi(e->d_name + n);
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}
