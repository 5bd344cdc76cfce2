/*
 * test_cpubudget.c — the CPU budget's parsing on fixed texts: cgroup v2
 * cpu.max and v1 cfs quota/period ("max", -1, bad text), the process's cgroup
 * directory from /proc/self/cgroup and /proc/self/mountinfo texts (v1, v2,
 * hybrid, a container's mount of its own subtree), and how affinity, quota
 * and LOCAL_WORLD_SIZE combine; the walk up a fake cgroup tree (the
 * tightest quota from the cgroup to its mount, nothing above the mount).
 * Then the live reading: within the machine's online CPUs and at least 1.
 */
#include <sys/stat.h>

#include "check.h"
#include "common/cpubudget.h"

static void put(const char *dir, const char *sub, const char *name, const char *text)
{
    char p[4200];
    snprintf(p, sizeof p, "%s%s", dir, sub);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s%s/%s", dir, sub, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void walk(void)
{
    const char *t = test_tmpdir("cpubudget");
    char mount[4200], dir[4200], where[128];
    snprintf(mount, sizeof mount, "%s/root", t);
    snprintf(dir, sizeof dir, "%s/root/a/b/c", t);
    /* v2: above the mount 0.5 (never read), the root "max", a: 3 CPUs,
     * b "max", c bad text */
    put(t, "", "cpu.max", "50000 100000\n");
    put(t, "/root", "cpu.max", "max 100000\n");
    put(t, "/root/a", "cpu.max", "300000 100000\n");
    put(t, "/root/a/b", "cpu.max", "max 100000\n");
    put(t, "/root/a/b/c", "cpu.max", "lots\n");
    CHECK(nst_cpu_quota_walk(dir, mount, 1, where, sizeof where) == 3.0);
    CHECK(strstr(where, "/root/a/cpu.max") != NULL);
    put(t, "/root/a/b", "cpu.max", "150000 100000\n"); /* tighter, lower down */
    CHECK(nst_cpu_quota_walk(dir, mount, 1, where, sizeof where) == 1.5);
    CHECK(nst_cpu_quota_walk(mount, mount, 1, where, sizeof where) == 0); /* root: max */
    /* v1: -1 below, 2 CPUs on the mount itself; a directory with no files */
    put(t, "/v1", "cpu.cfs_quota_us", "200000\n");
    put(t, "/v1", "cpu.cfs_period_us", "100000\n");
    put(t, "/v1/x", "cpu.cfs_quota_us", "-1\n");
    put(t, "/v1/x", "cpu.cfs_period_us", "100000\n");
    snprintf(mount, sizeof mount, "%s/v1", t);
    snprintf(dir, sizeof dir, "%s/v1/x/none", t);
    CHECK(nst_cpu_quota_walk(dir, mount, 1, where, sizeof where) == 0); /* no cpu.max */
    CHECK(nst_cpu_quota_walk(dir, mount, 0, where, sizeof where) == 2.0);
    CHECK(strstr(where, "/v1/cpu.cfs_quota_us") != NULL);
}

static void quotas(void)
{
    double q = -7;
    CHECK_EQ(nst_cpu_quota_v2("max 100000\n", &q), 0);
    CHECK_EQ(nst_cpu_quota_v2("max\n", &q), 0);
    CHECK(q == -7); /* untouched */
    CHECK_EQ(nst_cpu_quota_v2("150000 100000\n", &q), 1);
    CHECK(q == 1.5);
    CHECK_EQ(nst_cpu_quota_v2("400000 100000", &q), 1);
    CHECK(q == 4.0);
    q = -7;
    CHECK_EQ(nst_cpu_quota_v2("", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("maximum 100000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("150000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("150000 0", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("0 100000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("-1 100000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("15x 100000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("150000 100000 7", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2("99999999999999999999999 1", &q), -1);
    CHECK_EQ(nst_cpu_quota_v2(NULL, &q), -1);
    CHECK(q == -7);

    CHECK_EQ(nst_cpu_quota_v1("-1\n", "100000\n", &q), 0);
    CHECK_EQ(nst_cpu_quota_v1("50000\n", "100000\n", &q), 1);
    CHECK(q == 0.5);
    CHECK_EQ(nst_cpu_quota_v1("300000\n", "100000\n", &q), 1);
    CHECK(q == 3.0);
    q = -7;
    CHECK_EQ(nst_cpu_quota_v1("-2\n", "100000\n", &q), -1);
    CHECK_EQ(nst_cpu_quota_v1("max\n", "100000\n", &q), -1);
    CHECK_EQ(nst_cpu_quota_v1("50000\n", "0\n", &q), -1);
    CHECK_EQ(nst_cpu_quota_v1("50000\n", "abc\n", &q), -1);
    CHECK_EQ(nst_cpu_quota_v1("", "100000", &q), -1);
    CHECK_EQ(nst_cpu_quota_v1("0", "100000", &q), -1);
    CHECK(q == -7);
}

static const char *const MOUNTS_V1 =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
    "rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static const char *const CGROUP_V1 = "12:cpuset:/\n"
                                     "4:memory:/job/7\n"
                                     "3:cpu,cpuacct:/job/7/rank0\n"
                                     "0::/job/7\n";

static void dirs(void)
{
    char dir[256], mnt[256];
    /* v1: the cpu controller's line (not cpuset's), under its mount */
    CHECK_EQ(nst_cpu_cgroup_dir(CGROUP_V1, MOUNTS_V1, 0, dir, mnt, sizeof dir), 1);
    CHECK(strcmp(dir, "/sys/fs/cgroup/cpu,cpuacct/job/7/rank0") == 0);
    CHECK(strcmp(mnt, "/sys/fs/cgroup/cpu,cpuacct") == 0);
    /* hybrid: the v2 hierarchy is the unified mount */
    CHECK_EQ(nst_cpu_cgroup_dir(CGROUP_V1, MOUNTS_V1, 1, dir, mnt, sizeof dir), 1);
    CHECK(strcmp(dir, "/sys/fs/cgroup/unified/job/7") == 0);
    /* the root cgroup is the mount itself */
    CHECK_EQ(nst_cpu_cgroup_dir("1:cpu:/\n", MOUNTS_V1, 0, dir, mnt, sizeof dir), 1);
    CHECK(strcmp(dir, "/sys/fs/cgroup/cpu,cpuacct") == 0);
    /* no cpu controller line, or no mount: not found */
    CHECK_EQ(nst_cpu_cgroup_dir("12:cpuset:/\n4:memory:/a\n", MOUNTS_V1, 0, dir, mnt, sizeof dir),
             0);
    CHECK_EQ(nst_cpu_cgroup_dir(CGROUP_V1, "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", 0, dir, mnt,
                                sizeof dir),
             0);
    CHECK_EQ(nst_cpu_cgroup_dir("", MOUNTS_V1, 1, dir, mnt, sizeof dir), 0);
    CHECK_EQ(nst_cpu_cgroup_dir("garbage\n::\n", "garbage\n - \n", 1, dir, mnt, sizeof dir), 0);
    /* too long for the buffer: not found, no overflow */
    CHECK_EQ(nst_cpu_cgroup_dir(CGROUP_V1, MOUNTS_V1, 0, dir, mnt, 20), 0);

    /* pure v2, a container whose mount is its own subtree (root field
     * /kubepods/pod1/c1): that prefix is stripped; an escaped space decoded */
    const char *mounts_v2 = "25 1 0:22 /kubepods/pod1/c1 /sys/fs/cgroup\\040x ro,nosuid - cgroup2 "
                            "cgroup2 rw,nsdelegate\n";
    CHECK_EQ(nst_cpu_cgroup_dir("0::/kubepods/pod1/c1/sub\n", mounts_v2, 1, dir, mnt, sizeof dir),
             1);
    CHECK(strcmp(dir, "/sys/fs/cgroup x/sub") == 0);
    CHECK(strcmp(mnt, "/sys/fs/cgroup x") == 0);
    CHECK_EQ(nst_cpu_cgroup_dir("0::/kubepods/pod1/c1\n", mounts_v2, 1, dir, mnt, sizeof dir), 1);
    CHECK(strcmp(dir, "/sys/fs/cgroup x") == 0);
    /* a path outside the mount's subtree: the mount's top */
    CHECK_EQ(nst_cpu_cgroup_dir("0::/other\n", mounts_v2, 1, dir, mnt, sizeof dir), 1);
    CHECK(strcmp(dir, "/sys/fs/cgroup x") == 0);
    /* v1 asked of a v2-only machine: nothing */
    CHECK_EQ(nst_cpu_cgroup_dir("0::/a\n", mounts_v2, 0, dir, mnt, sizeof dir), 0);
}

static void combine(void)
{
    uint32_t lws = 0;
    CHECK_EQ(nst_cpu_budget_combine(16, 0, NULL, &lws), 16);
    CHECK_EQ(lws, 1);
    CHECK_EQ(nst_cpu_budget_combine(16, 4.0, NULL, NULL), 4);
    CHECK_EQ(nst_cpu_budget_combine(16, 1.5, NULL, NULL), 2); /* rounded up */
    CHECK_EQ(nst_cpu_budget_combine(16, 0.1, NULL, NULL), 1); /* at least 1 */
    CHECK_EQ(nst_cpu_budget_combine(2, 8.0, NULL, NULL), 2);  /* the mask binds */
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "8", &lws), 2);
    CHECK_EQ(lws, 8);
    CHECK_EQ(nst_cpu_budget_combine(2, 0, "2", NULL), 1);
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "3", NULL), 5);   /* floor */
    CHECK_EQ(nst_cpu_budget_combine(4, 0, "8", NULL), 1);    /* at least 1 */
    CHECK_EQ(nst_cpu_budget_combine(16, 6.0, "2", NULL), 3); /* quota, then divided */
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "", &lws), 16);
    CHECK_EQ(lws, 1);
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "0", &lws), 16); /* invalid: ignored */
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "two", &lws), 16);
    CHECK_EQ(nst_cpu_budget_combine(16, 0, "-2", &lws), 16);
    CHECK_EQ(nst_cpu_budget_combine(0, 0, NULL, NULL), 1);
}

int main(void)
{
    quotas();
    dirs();
    combine();
    walk();

    nst_cpu_budget b;
    unsetenv("LOCAL_WORLD_SIZE");
    nst_cpu_budget_get(&b);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(b.threads >= 1);
    CHECK(b.affinity >= 1);
    CHECK(online < 1 || b.threads <= (uint32_t)online);
    CHECK(b.threads <= b.affinity);
    CHECK_EQ(b.local_world_size, 1);
    CHECK(strstr(b.source, "affinity") != NULL);
    setenv("LOCAL_WORLD_SIZE", "1000000", 1);
    nst_cpu_budget_get(&b);
    CHECK_EQ(b.threads, 1);
    CHECK_EQ(b.local_world_size, 1000000);
    CHECK(strstr(b.source, "LOCAL_WORLD_SIZE=1000000") != NULL);
    TEST_EXIT();
}
