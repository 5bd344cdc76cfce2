/*
 * test_analyze_model.c — the analyzer's model and reports fed by hand, as a
 * driver that measured another loader's runs does (nostall.profile: a torch
 * DataLoader): the measured runs are classified by their stalls (a long
 * cached wait: prep-bound; a cold wait far above the cached one:
 * fetch-bound; worker start-up above both: start-bound, with its
 * recommendation; stalls under 5%: compute-bound), start-up counts once per
 * epoch however few batches were run, and the caller's notes and warnings
 * reach the text, JSON and HTML reports, escaped, cut at a character, at
 * most NOSTALL_ANALYZE_MAX_NOTES. No timing: every figure is given.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "nostall_analyze.h"

/* 160 items in batches of 16 (10 batches an epoch); a 10 ms step; runs of
 * a whole epoch unless the caller changes them. */
static nostall_analyze_meas base(void)
{
    nostall_analyze_meas m;
    memset(&m, 0, sizeof m);
    m.items_per_epoch = m.dataset_items = 160;
    m.batch_size = 16;
    m.dataset_bytes = 160 * 20000.0;
    m.dataset_files = 160;
    m.cores = 4;
    m.mem_available_bytes = 8e9;
    m.threads = 2;
    m.io_depth = 1;
    m.echo_factor = 1;
    m.step_s = 0.01;
    m.step_cpu_s = 0.001;
    m.syn_seconds = 0.1;
    m.syn_batches = 10;
    m.prep_items = 160;
    m.prep_seconds = 1.0;
    m.prep_cpu_s = 2.0;
    m.warm_items = m.cold_items = 160;
    m.warm_batches = m.cold_batches = 10;
    return m;
}

static const char *measured(const nostall_analyze_meas *m)
{
    nostall_analysis *a = NULL;
    CHECK_OK(nostall_analyze_create(&a, m, sizeof *m));
    if (!a) return "error";
    const char *b = nostall_analyze_measured_bound(a);
    nostall_analyze_free(a);
    return b;
}

static char *report(nostall_analysis *a, int format, const char *data)
{
    size_t n = 0;
    CHECK_OK(nostall_analyze_report(a, format, data, NULL, 0, &n));
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    CHECK_OK(nostall_analyze_report(a, format, data, buf, n + 1, &n));
    return buf;
}

int main(void)
{
    nostall_analyze_meas m = base();

    /* prep-bound: the cached run waited 1 s of its 1.1 s, the cold one no more */
    m.warm_seconds = m.cold_seconds = 1.1;
    m.warm_stall_s = m.cold_stall_s = 1.0;
    CHECK(!strcmp(measured(&m), "prep"));

    /* fetch-bound: the cold run waited 3 s more than the cached one */
    m = base();
    m.warm_seconds = 0.2;
    m.warm_stall_s = 0.1;
    m.cold_seconds = 3.2;
    m.cold_stall_s = 3.1;
    CHECK(!strcmp(measured(&m), "fetch"));

    /* compute-bound: 0.02 s of waiting in a 1 s epoch */
    m = base();
    m.syn_seconds = 1.0;
    m.warm_seconds = m.cold_seconds = 1.02;
    m.warm_stall_s = m.cold_stall_s = 0.02;
    CHECK(!strcmp(measured(&m), "compute"));

    /* without a cold run: the cached run's wait is the prep stall */
    m = base();
    m.cold_batches = m.cold_items = 0;
    m.warm_seconds = 2.0;
    m.warm_stall_s = 1.5;
    CHECK(!strcmp(measured(&m), "prep"));

    /* start-bound: 2 of 10 batches run; each run 0.5 s of start-up (once
     * an epoch: not multiplied by 5) and 0.02 s of waiting (x5: 0.1 s) */
    m = base();
    m.warm_batches = m.cold_batches = 2;
    m.warm_items = m.cold_items = 32;
    m.syn_seconds = 0.02;
    m.syn_batches = 2;
    m.warm_seconds = m.cold_seconds = 0.5 + 0.02 + 0.02;
    m.warm_start_s = m.cold_start_s = 0.5;
    m.warm_stall_s = m.cold_stall_s = 0.02;
    nostall_analysis *a = NULL;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    if (!a) TEST_EXIT();
    CHECK(!strcmp(nostall_analyze_measured_bound(a), "start"));
    CHECK_EQ(nostall_analyze_recommendation_count(a), 5);
    nostall_analyze_recommendation rc;
    CHECK_OK(nostall_analyze_recommendation_get(a, 4, &rc, sizeof rc));
    CHECK(!strcmp(rc.what, "start") && rc.needed && fabs(rc.value - 0.5) < 1e-9);
    CHECK(strstr(rc.text, "persistent_workers=True") != NULL);

    /* notes and warnings: in every report, escaped; the 17th refused */
    CHECK_OK(nostall_analyze_note(a, 1, "the files could not be dropped <b>"));
    CHECK_OK(nostall_analyze_note(a, 0, "nostall on this machine: 1.2 s per epoch"));
    char *text = report(a, NOSTALL_ANALYZE_TEXT, "DataLoader over ImageFolder");
    char *json = report(a, NOSTALL_ANALYZE_JSON, "DataLoader over ImageFolder");
    char *html = report(a, NOSTALL_ANALYZE_HTML, "DataLoader over ImageFolder");
    CHECK(text && strstr(text, "WARNING      the files could not be dropped <b>"));
    CHECK(text && strstr(text, "measured verdict: start-bound"));
    CHECK(text && strstr(text, "notes\n    nostall on this machine: 1.2 s per epoch"));
    CHECK(json && strstr(json, "\"warnings\": [\"the files could not be dropped <b>\"]"));
    CHECK(json && strstr(json, "\"notes\": [\"nostall on this machine: 1.2 s per epoch\"]"));
    CHECK(json && strstr(json, "\"measured\": {\"bound\": \"start\""));
    CHECK(json && strstr(json, "\"start_stall_s\": 0.5,"));
    CHECK(html && strstr(html, "could not be dropped &lt;b&gt;</p>"));
    CHECK(html && strstr(html, "<li>nostall on this machine: 1.2 s per epoch</li>\n</ul>"));
    CHECK(html && strstr(html, "id=\"measured-verdict\">Measured runs: <strong class=\"b-start\">"));
    free(text);
    free(json);
    free(html);
    for (int i = 2; i < NOSTALL_ANALYZE_MAX_NOTES; i++) CHECK_OK(nostall_analyze_note(a, 0, "x"));
    CHECK_RC(nostall_analyze_note(a, 0, "one too many"), NOSTALL_E_INVALID);
    CHECK_RC(nostall_analyze_note(NULL, 0, "x"), NOSTALL_E_INVALID);
    nostall_analyze_free(a);

    /* a long note is cut before a character, never inside one */
    static char longer[1100];
    memset(longer, 'a', sizeof longer - 1);
    memcpy(longer + 1021, "\xc3\xa9\xc3\xa9", 4); /* é at 1021-1022, 1023-1024 */
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    if (!a) TEST_EXIT();
    CHECK_OK(nostall_analyze_note(a, 0, longer));
    json = report(a, NOSTALL_ANALYZE_JSON, "d");
    CHECK(json && strstr(json, "a\xc3\xa9\"]}") != NULL); /* one é kept whole, none split */
    free(json);
    nostall_analyze_free(a);

    /* nostall's own runs (no start-up measured) are classified as before:
     * no start stall in the figures, four recommendations */
    m = base();
    m.warm_seconds = m.cold_seconds = 1.1;
    m.warm_stall_s = m.cold_stall_s = 1.0;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    if (!a) TEST_EXIT();
    CHECK_EQ(nostall_analyze_recommendation_count(a), 4);
    json = report(a, NOSTALL_ANALYZE_JSON, "d");
    CHECK(json && strstr(json, "\"start_stall_s\": 0,"));
    CHECK(json && strstr(json, "\"notes\": []"));
    free(json);
    nostall_analyze_free(a);
    TEST_EXIT();
}
