/*
 * test_analyze_servers.c — the analyzer's model of prep servers, fed by
 * hand: nst_an_prep_mix (items/s of a trainer's own threads and of k
 * servers on the cores it has) against figures worked out here, the epoch
 * it predicts for 1, 2, 4, 8 and 16 servers, the what-if rows, the
 * "servers" recommendation (only when prep stalls and the cores are the
 * limit), the --predict keys, and the reports' remote-prep section. No
 * timing: every figure is given.
 */
#include <math.h>
#include <string.h>

#include "analyze/analyze_impl.h"
#include "check.h"
#include "nostall_analyze.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1, fabs(b)); }

#define CHECK_NEAR(a, b)                                                                           \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!near(a_, b_)) fprintf(stderr, "  %s = %.12g, expected %.12g\n", #a, a_, b_);          \
        CHECK(near(a_, b_));                                                                       \
    } while (0)

static void test_mix(void)
{
    nst_an_mix x;
    /* 2 servers of 100 items/s, 2 ms of CPU to receive one; 2 threads of
     * 10 ms per item on 2 cores: received 200/s take 0.4 cores, the 1.6
     * left make 160/s. */
    nst_an_prep_mix(2, 100, 0.002, 0, 2, 2, 0.01, &x);
    CHECK_NEAR(x.remote, 200);
    CHECK_NEAR(x.local, 160);
    CHECK_NEAR(x.total, 360);
    CHECK_NEAR(x.cpu, 2);
    /* 8 servers (800/s) at 4 ms each: receiving alone fills the 2 cores at
     * 500/s, nothing left for the threads */
    nst_an_prep_mix(8, 100, 0.004, 0, 2, 2, 0.01, &x);
    CHECK_NEAR(x.remote, 500);
    CHECK_NEAR(x.local, 0);
    CHECK_NEAR(x.cpu, 2);
    /* the network caps received items at 150/s; one thread makes 100/s */
    nst_an_prep_mix(4, 100, 0.001, 150, 1, 2, 0.01, &x);
    CHECK_NEAR(x.remote, 150);
    CHECK_NEAR(x.local, 100);
    CHECK_NEAR(x.total, 250);
    CHECK_NEAR(x.cpu, 1.15);
    /* threads=0: the server alone */
    nst_an_prep_mix(1, 50, 0.002, 0, 0, 2, 0.01, &x);
    CHECK_NEAR(x.remote, 50);
    CHECK_NEAR(x.local, 0);
    /* a thread per server: 1 server at 20 ms per received item, 50/s at
     * most; receiving costlier than preparing: the thread's 100/s first
     * (1 core), the 0.5 core left receives 25/s */
    nst_an_prep_mix(1, 1000, 0.02, 0, 1, 1.5, 0.01, &x);
    CHECK_NEAR(x.local, 100);
    CHECK_NEAR(x.remote, 25);
    /* no servers: the threads alone, at most the cores */
    nst_an_prep_mix(0, 100, 0.002, 0, 4, 2, 0.01, &x);
    CHECK_NEAR(x.remote, 0);
    CHECK_NEAR(x.local, 200);
}

/* 1000 items in batches of 10 (100 batches), a 10 ms step without CPU (1 s
 * of compute an epoch); 2 cores, 2 threads at 10 ms of CPU per item; no
 * storage cost. One server measured: 200 items in 2 s outstanding (100/s),
 * 0.4 s of the trainer's CPU to receive them (2 ms each). */
static nostall_analyze_meas base(void)
{
    nostall_analyze_meas m;
    memset(&m, 0, sizeof m);
    m.items_per_epoch = m.dataset_items = 1000;
    m.batch_size = 10;
    m.dataset_bytes = 1000 * 1000.0;
    m.item_out_bytes = 4000;
    m.cores = 2;
    m.mem_available_bytes = 8e9;
    m.threads = 2;
    m.echo_factor = 1;
    m.step_s = 0.01;
    m.syn_seconds = 1;
    m.syn_batches = 100;
    m.prep_items = 100;
    m.prep_seconds = 0.5;
    m.prep_cpu_s = 1.0;
    m.warm_items = m.cold_items = 1000;
    m.warm_batches = m.cold_batches = 100;
    m.prep_servers = 1;
    m.srv_items = 400;
    m.srv_seconds = 2;
    m.srv_remote_items = 200;
    m.srv_remote_bytes = 200 * 4000.0;
    m.srv_remote_busy_ns = 2e9;
    m.srv_remote_wait_ns = 200 * 5e6;
    m.srv_recv_cpu_s = 0.4;
    return m;
}

static void test_predict(void)
{
    nostall_analyze_meas m = base();
    nst_an_scenario s = nst_an_scenario_current(&m);
    CHECK_NEAR(s.server_rate, 100);
    CHECK_NEAR(s.recv_cpu_s, 0.002);
    nst_an_pred p;
    /* k servers: 100k/s received (0.2k cores), the threads 200 - 20k/s on
     * the rest, until receiving takes both cores (k = 10: 1000/s) */
    const double ks[] = {0, 1, 2, 4, 8, 16};
    const double epoch[] = {5, 1000 / 280.0, 1000 / 360.0, 1000 / 520.0, 1000 / 840.0, 1};
    const double remote[] =
        {0, 1000 * 100 / 280.0, 1000 * 200 / 360.0, 1000 * 400 / 520.0, 1000 * 800 / 840.0, 1000};
    for (int i = 0; i < 6; i++) {
        s.prep_servers = ks[i];
        nst_an_predict(&m, &s, &p);
        CHECK_NEAR(p.epoch_s, epoch[i]);
        CHECK_NEAR(p.compute_s, 1);
        CHECK_NEAR(p.remote_items, remote[i]);
        CHECK_NEAR(p.prep_stall_s, epoch[i] - 1);
        CHECK_NEAR(p.fetch_stall_s, 0);
    }
    /* prep_net_mbps: 0.8 MB/s of 4000-byte items is 200/s from 4 servers */
    s.prep_servers = 4;
    s.prep_net_mbps = 0.8;
    nst_an_predict(&m, &s, &p);
    CHECK_NEAR(p.epoch_s, 1000 / 360.0);
}

static char *report(nostall_analysis *a, int format)
{
    size_t n = 0;
    CHECK_OK(nostall_analyze_report(a, format, "data", NULL, 0, &n));
    char *buf = malloc(n + 1);
    if (buf) CHECK_OK(nostall_analyze_report(a, format, "data", buf, n + 1, &n));
    return buf;
}

static void test_analysis(void)
{
    nostall_analyze_meas m = base();
    nostall_analysis *a = NULL;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    if (!a) return;
    /* the what-if rows: 1, 2, 4, 8 servers */
    const double ks[] = {1, 2, 4, 8},
                 epoch[] = {1000 / 280.0, 1000 / 360.0, 1000 / 520.0, 1000 / 840.0};
    int found = 0;
    for (int i = 0; i < a->nrows; i++)
        if (!strcmp(a->rows[i].group, "servers")) {
            CHECK(found < 4);
            if (found >= 4) break;
            CHECK_NEAR(a->rows[i].x, ks[found]);
            CHECK_NEAR(a->rows[i].p.epoch_s, epoch[found]);
            found++;
        }
    CHECK(found == 4);
    /* prep stalls and the 2 cores are busy (receiving 0.2, the threads
     * 1.8): 10 servers make 1000/s, the step's rate (9: 920/s, 8% stall) */
    int rs = -1;
    for (int i = 0; i < nostall_analyze_recommendation_count(a); i++) {
        nostall_analyze_recommendation rc;
        CHECK_OK(nostall_analyze_recommendation_get(a, i, &rc, sizeof rc));
        if (!strcmp(rc.what, "servers")) {
            rs = i;
            CHECK(rc.needed);
            CHECK_NEAR(rc.value, 10);
            CHECK_NEAR(rc.epoch_before_s, 1000 / 280.0);
            CHECK_NEAR(rc.epoch_after_s, 1);
            CHECK(strstr(rc.text, "10 prep servers") != NULL);
        }
    }
    CHECK(rs >= 0);
    nostall_analyze_prediction pr;
    CHECK_OK(nostall_analyze_predict(a, "prep_servers=4", &pr, sizeof pr));
    CHECK_NEAR(pr.epoch_s, 1000 / 520.0);
    CHECK_OK(nostall_analyze_predict(a, "server_rate=50,prep_servers=2", &pr, sizeof pr));
    CHECK_NEAR(pr.epoch_s, 1000 / 280.0);
    CHECK_OK(nostall_analyze_predict(a, "recv_cpu_ms=0,prep_servers=8", &pr, sizeof pr));
    CHECK_NEAR(pr.epoch_s, 1); /* 800/s received + 200/s made */
    char *j = report(a, NOSTALL_ANALYZE_JSON), *t = report(a, NOSTALL_ANALYZE_TEXT),
         *h = report(a, NOSTALL_ANALYZE_HTML);
    CHECK(j && strstr(j, "\"remote_prep\": {\"servers\": 1, \"items\": 200, \"bytes\": 800000"));
    CHECK(j && strstr(j, "\"per_server_items_per_s\": 100"));
    CHECK(j && strstr(j, "\"request_ms_mean\": 5,"));
    CHECK(j && strstr(j, "\"not_modelled\": \"network bandwidth is not probed"));
    CHECK(t && strstr(t, "remote prep  1 prep server(s)"));
    CHECK(t && strstr(t, "servers  8 prep servers at 100 items/s each"));
    CHECK(h && strstr(h, "id=\"remote-prep\""));
    CHECK(h && strstr(h, "data-chart=\"whatif-servers\""));
    free(j);
    free(t);
    free(h);
    nostall_analyze_free(a);

    /* the threads are fewer than the cores: more threads first, no servers */
    m = base();
    m.cores = 4;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    for (int i = 0; a && i < nostall_analyze_recommendation_count(a); i++) {
        nostall_analyze_recommendation rc;
        CHECK_OK(nostall_analyze_recommendation_get(a, i, &rc, sizeof rc));
        CHECK(strcmp(rc.what, "servers") != 0);
    }
    nostall_analyze_free(a);

    /* no servers measured: no rows, no remote section; prep_servers= alone is
     * refused (no rate), with server_rate it predicts; prep-bound on all the
     * cores: a recommendation without a number */
    m = base();
    m.prep_servers = m.srv_items = m.srv_seconds = m.srv_remote_items = m.srv_remote_bytes = 0;
    m.srv_remote_busy_ns = m.srv_remote_wait_ns = m.srv_recv_cpu_s = 0;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    if (!a) return;
    for (int i = 0; i < a->nrows; i++) CHECK(strcmp(a->rows[i].group, "servers") != 0);
    CHECK(nostall_analyze_predict(a, "prep_servers=2", &pr, sizeof pr) == NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "server_rate") != NULL);
    CHECK_OK(
        nostall_analyze_predict(a, "server_rate=100,recv_cpu_ms=2,prep_servers=2", &pr, sizeof pr));
    CHECK_NEAR(pr.epoch_s, 1000 / 360.0);
    j = report(a, NOSTALL_ANALYZE_JSON);
    CHECK(j && strstr(j, "\"remote_prep\": null"));
    CHECK(j && strstr(j, "\"what\": \"servers\", \"value\": null, \"needed\": true"));
    free(j);
    nostall_analyze_free(a);

    /* no servers, and 16 threads on 16 cores remove the prep stall (1.6 ms
     * an item against 1 ms of step): more cores, not servers */
    m.cores = m.threads = 16;
    CHECK_OK(nostall_analyze_create(&a, &m, sizeof m));
    for (int i = 0; a && i < nostall_analyze_recommendation_count(a); i++) {
        nostall_analyze_recommendation rc;
        CHECK_OK(nostall_analyze_recommendation_get(a, i, &rc, sizeof rc));
        CHECK(strcmp(rc.what, "servers") != 0);
    }
    nostall_analyze_free(a);
}

int main(void)
{
    test_mix();
    test_predict();
    test_analysis();
    TEST_EXIT();
}
