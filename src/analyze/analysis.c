/*
 * analysis.c — the public face of the stall analyzer's model
 * (nostall_analyze.h): an analysis is the measurements plus everything the
 * model concludes from them (recommend.c), made once at create; predictions
 * asked for later, and the caller's notes and warnings, are appended to it;
 * reports are written from it into a memory stream and copied into the
 * caller's buffer.
 *
 * Threads: an analysis belongs to one thread at a time (nothing here is
 * shared between analyses).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_impl.h"
#include "common/error.h"

/* Copy at most `size` bytes of `full` (a struct of `full_size`) out. */
static void copy_out(void *out, size_t size, const void *full, size_t full_size)
{
    memcpy(out, full, size < full_size ? size : full_size);
}

int nostall_analyze_create(nostall_analysis **out, const nostall_analyze_meas *m, size_t size)
{
    nst_error_clear();
    if (!out) return nst_error(NOSTALL_E_INVALID, "nostall_analyze_create: out is NULL");
    *out = NULL;
    if (!m) return nst_error(NOSTALL_E_INVALID, "nostall_analyze_create: measurements are NULL");
    nostall_analyze_meas full;
    memset(&full, 0, sizeof full);
    memcpy(&full, m, size < sizeof full ? size : sizeof full);
    if (!(full.items_per_epoch > 0) || !(full.batch_size > 0))
        return nst_error(NOSTALL_E_INVALID,
                         "nostall_analyze_create: items_per_epoch (%g) and batch_size (%g) must "
                         "be > 0",
                         full.items_per_epoch, full.batch_size);
    nostall_analysis *a = calloc(1, sizeof *a);
    if (!a) return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_create: out of memory");
    a->m = full;
    nst_an_analyze(a);
    *out = a;
    return 0;
}

void nostall_analyze_free(nostall_analysis *a) { free(a); }

static void pred_out(const nst_an_pred *p, nostall_analyze_prediction *out, size_t size)
{
    nostall_analyze_prediction o = {.epoch_s = p->epoch_s,
                                    .compute_s = p->compute_s,
                                    .prep_stall_s = p->prep_stall_s,
                                    .fetch_stall_s = p->fetch_stall_s,
                                    .nofetch_s = p->nofetch_s,
                                    .prep_s = p->prep_s,
                                    .fetch_s = p->fetch_s,
                                    .effective_cores = p->eff_cores,
                                    .delivered_items = p->delivered,
                                    .bound = p->bound};
    copy_out(out, size, &o, sizeof o);
}

int nostall_analyze_prediction_get(const nostall_analysis *a, int which,
                                   nostall_analyze_prediction *out, size_t size)
{
    nst_error_clear();
    if (!a || !out)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_prediction_get: NULL argument");
    const nst_an_pred *p = which == NOSTALL_ANALYZE_STEADY_STATE ? &a->now
                           : which == NOSTALL_ANALYZE_CACHED_RUN ? &a->warm_run
                           : which == NOSTALL_ANALYZE_COLD_RUN   ? &a->cold_run
                                                                 : NULL;
    if (!p)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_prediction_get: no prediction %d",
                         which);
    pred_out(p, out, size);
    return 0;
}

int nostall_analyze_predict(nostall_analysis *a, const char *spec, nostall_analyze_prediction *out,
                            size_t size)
{
    nst_error_clear();
    if (!a || !spec) return nst_error(NOSTALL_E_INVALID, "nostall_analyze_predict: NULL argument");
    if (a->npredict >= NST_AN_MAX_PREDICT)
        return nst_error(NOSTALL_E_INVALID, "at most %d --predict", NST_AN_MAX_PREDICT);
    nst_an_row *row = &a->predict[a->npredict];
    char err[512];
    memset(row, 0, sizeof *row);
    row->s = a->cur;
    if (nst_an_scenario_parse(&a->m, &row->s, spec, err, sizeof err) < 0)
        return nst_error(NOSTALL_E_INVALID, "%s", err);
    snprintf(row->group, sizeof row->group, "predict");
    snprintf(row->label, sizeof row->label, "%s", spec);
    nst_an_predict(&a->m, &row->s, &row->p);
    a->npredict++;
    if (out) pred_out(&row->p, out, size);
    return 0;
}

const char *nostall_analyze_bound(const nostall_analysis *a) { return a ? a->bound : NULL; }

const char *nostall_analyze_measured_bound(const nostall_analysis *a)
{
    if (!a) return NULL;
    nst_an_measured ms;
    nst_an_measured_get(&a->m, &ms);
    return ms.bound; /* a static string */
}

int nostall_analyze_note(nostall_analysis *a, int warning, const char *text)
{
    nst_error_clear();
    if (!a || !text) return nst_error(NOSTALL_E_INVALID, "nostall_analyze_note: NULL argument");
    if (a->nnotes >= NOSTALL_ANALYZE_MAX_NOTES)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_note: at most %d notes",
                         NOSTALL_ANALYZE_MAX_NOTES);
    char *dst = a->notes[a->nnotes];
    size_t n = strlen(text), cap = sizeof a->notes[0] - 1;
    if (n > cap) { /* cut before a UTF-8 continuation byte, not inside a character */
        n = cap;
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, text, n);
    dst[n] = '\0';
    a->note_warning[a->nnotes++] = warning != 0;
    return 0;
}

int nostall_analyze_recommendation_count(const nostall_analysis *a) { return a ? a->nreco : 0; }

int nostall_analyze_recommendation_get(const nostall_analysis *a, int i,
                                       nostall_analyze_recommendation *out, size_t size)
{
    nst_error_clear();
    if (!a || !out)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_recommendation_get: NULL argument");
    if (i < 0 || i >= a->nreco)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_recommendation_get: %d of %d", i,
                         a->nreco);
    const nst_an_reco *r = &a->reco[i];
    nostall_analyze_recommendation o = {.what = r->what,
                                        .value = r->value,
                                        .needed = r->needed,
                                        .epoch_before_s = r->epoch_before_s,
                                        .epoch_after_s = r->epoch_after_s,
                                        .text = r->text};
    copy_out(out, size, &o, sizeof o);
    return 0;
}

int nostall_analyze_report(const nostall_analysis *a, int format, const char *data, char *buf,
                           size_t cap, size_t *len)
{
    nst_error_clear();
    if (!a || !len) return nst_error(NOSTALL_E_INVALID, "nostall_analyze_report: NULL argument");
    *len = 0;
    if (format < NOSTALL_ANALYZE_TEXT || format > NOSTALL_ANALYZE_HTML)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_report: unknown format %d", format);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_report: out of memory");
    if (!data) data = "";
    if (format == NOSTALL_ANALYZE_TEXT)
        nst_an_report_text(f, a, data);
    else if (format == NOSTALL_ANALYZE_JSON)
        nst_an_report_json(f, a, data);
    else
        nst_an_report_html(f, a, data);
    if (fclose(f) != 0 || !text) {
        free(text);
        return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_report: out of memory");
    }
    *len = n;
    int rc = 0;
    if (buf && cap > n)
        memcpy(buf, text, n + 1);
    else if (buf)
        rc = nst_error(NOSTALL_E_INVALID,
                       "nostall_analyze_report: a buffer of %zu bytes, the report needs %zu", cap,
                       n + 1);
    free(text);
    return rc;
}
