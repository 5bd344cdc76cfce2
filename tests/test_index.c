/*
 * test_index.c — the dataset index: ImageFolder (class order, recursion,
 * extension matching, hidden and ignored files, empty classes) and list files
 * (relative/absolute paths, comments, CRLF, malformed lines), plus the error
 * statuses for missing and empty sources. Entries named like images that are
 * no readable file (dangling symlinks, directories, FIFOs, sockets, devices,
 * unreadable files) are items whose fetch says why; symlinked subtrees that
 * form a DAG are walked once; paths longer than PATH_MAX and messages that
 * keep their reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "check.h"
#include "common/error.h"
#include "dataset/index.h"
#include "source/reader.h"

static char path_buf[4096];

static const char *join(const char *dir, const char *rel)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, rel);
    return path_buf;
}

static void mkdir_p(const char *dir, const char *rel)
{
    if (mkdir(join(dir, rel), 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", path_buf, strerror(errno));
        exit(1);
    }
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    FILE *f = fopen(join(dir, rel), "wb");
    if (!f) {
        fprintf(stderr, "create %s: %s\n", path_buf, strerror(errno));
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Checks path i of ix is dir/rel. */
static int path_is(const nst_index *ix, uint64_t i, const char *dir, const char *rel)
{
    const char *p = nst_index_path(ix, i);
    char want[4096];
    snprintf(want, sizeof want, "%s/%s", dir, rel);
    if (!p || strcmp(p, want) != 0) {
        fprintf(stderr, "item %llu: got '%s', want '%s'\n", (unsigned long long)i, p ? p : "(null)",
                want);
        return 0;
    }
    return 1;
}

static void test_folder(const char *tmp)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/folder", tmp);
    mkdir_p(tmp, "folder");
    mkdir_p(root, "b");
    mkdir_p(root, "a");
    mkdir_p(root, "c");      /* empty class */
    mkdir_p(root, ".cache"); /* hidden dir: not a class */
    mkdir_p(root, "b/sub");
    mkdir_p(root, "b/sub/deeper");
    mkdir_p(root, "b/.hiddendir");
    write_file(root, "b/z.jpg", "x");
    write_file(root, "b/A.JPG", "x"); /* upper case extension */
    write_file(root, "b/m.png", "x");
    write_file(root, "b/sub/k.jpeg", "x");
    write_file(root, "b/sub/deeper/q.PnG", "x");
    write_file(root, "b/sub.jpg", "x");          /* "sub.jpg" < "sub/..." bytewise */
    write_file(root, "b/.hidden.jpg", "x");      /* hidden file: ignored */
    write_file(root, "b/.hiddendir/x.jpg", "x"); /* inside hidden dir: skipped */
    write_file(root, "b/notes.txt", "x");        /* ignored */
    write_file(root, "b/jpg", "x");              /* no extension: ignored */
    write_file(root, "b/x.jpgx", "x");           /* ignored */
    write_file(root, "a/2.jpg", "x");
    write_file(root, "a/10.jpg", "x");     /* bytewise: "10.jpg" < "2.jpg" */
    write_file(root, "README.txt", "x");   /* root level: ignored */
    write_file(root, "top.jpg", "x");      /* root level: ignored */
    write_file(root, ".DS_Store", "x");    /* hidden at root: ignored */
    write_file(root, ".cache/y.jpg", "x"); /* never seen */

    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (!ix) return;
    CHECK_EQ(nst_index_classes(ix), 3);
    CHECK(nst_index_class_name(ix, 0) && strcmp(nst_index_class_name(ix, 0), "a") == 0);
    CHECK(nst_index_class_name(ix, 1) && strcmp(nst_index_class_name(ix, 1), "b") == 0);
    CHECK(nst_index_class_name(ix, 2) && strcmp(nst_index_class_name(ix, 2), "c") == 0);
    CHECK(nst_index_class_name(ix, 3) == NULL);
    CHECK_EQ(nst_index_count(ix), 8);
    /* b: hidden.jpg, notes.txt, jpg, x.jpgx = 4; root: README, top.jpg,
     * .DS_Store = 3. */
    CHECK_EQ(nst_index_ignored(ix), 7);
    static const char *const want[] = {
        "a/10.jpg",           "a/2.jpg",      "b/A.JPG", "b/m.png", "b/sub.jpg",
        "b/sub/deeper/q.PnG", "b/sub/k.jpeg", "b/z.jpg",
    };
    static const int64_t labels[] = {0, 0, 1, 1, 1, 1, 1, 1};
    for (uint64_t i = 0; i < 8 && i < nst_index_count(ix); i++) {
        CHECK(path_is(ix, i, root, want[i]));
        CHECK_EQ(nst_index_label(ix, i), labels[i]);
    }
    CHECK(nst_index_path(ix, 8) == NULL);
    /* The ignored files by name: root first (sorted), then the walk's order. */
    static const char *const ign[] = {".DS_Store", "README.txt",  "top.jpg", "b/.hidden.jpg",
                                      "b/jpg",     "b/notes.txt", "b/x.jpgx"};
    for (uint64_t i = 0; i < 7; i++) {
        const char *got = nst_index_ignored_path(ix, i);
        char w[4300];
        snprintf(w, sizeof w, "%s/%s", root, ign[i]);
        if (!got || strcmp(got, w) != 0) {
            fprintf(stderr, "ignored %llu: '%s', want '%s'\n", (unsigned long long)i,
                    got ? got : "(null)", w);
            check_failures_++;
        }
    }
    CHECK(nst_index_ignored_path(ix, 7) == NULL);
    nst_index_free(ix);

    /* Only the first NST_INDEX_IGNORED_KEEP names are kept; all are counted. */
    mkdir_p(root, "c/many");
    for (int i = 0; i < NST_INDEX_IGNORED_KEEP + 36; i++) {
        char name[64];
        snprintf(name, sizeof name, "c/many/n%03d.txt", i);
        write_file(root, name, "x");
    }
    ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (ix) {
        CHECK_EQ(nst_index_ignored(ix), 7 + NST_INDEX_IGNORED_KEEP + 36);
        CHECK(nst_index_ignored_path(ix, NST_INDEX_IGNORED_KEEP - 1) &&
              strstr(nst_index_ignored_path(ix, NST_INDEX_IGNORED_KEEP - 1), "c/many/n056.txt"));
        CHECK(nst_index_ignored_path(ix, NST_INDEX_IGNORED_KEEP) == NULL);
        nst_index_free(ix);
    }
    for (int i = 0; i < NST_INDEX_IGNORED_KEEP + 36; i++) {
        char name[64];
        snprintf(name, sizeof name, "c/many/n%03d.txt", i);
        unlink(join(root, name));
    }
    rmdir(join(root, "c/many"));

    /* Deterministic: a second build gives the same index; a trailing slash
     * on the root is dropped. */
    char slashed[4200];
    snprintf(slashed, sizeof slashed, "%s/", root);
    ix = NULL;
    CHECK_OK(nst_index_build(&ix, slashed));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 8);
        CHECK(path_is(ix, 5, root, "b/sub/deeper/q.PnG"));
        nst_index_free(ix);
    }

    /* Symlinks are followed; a symlink loop fails instead of hanging. */
    char target[4200];
    snprintf(target, sizeof target, "%s/a", root);
    if (symlink(target, join(root, "c/link")) == 0) {
        ix = NULL;
        CHECK_OK(nst_index_build(&ix, root));
        if (ix) {
            CHECK_EQ(nst_index_count(ix), 10);
            CHECK(path_is(ix, 8, root, "c/link/10.jpg"));
            CHECK_EQ(nst_index_label(ix, 9), 2);
            nst_index_free(ix);
        }
        if (symlink(target, join(root, "a/loop")) == 0) {
            ix = NULL;
            CHECK_RC(nst_index_build(&ix, root), NOSTALL_E_DATASET);
            CHECK(ix == NULL);
            CHECK(strstr(nostall_last_error(), "symlink loop") != NULL);
            CHECK(strstr(nostall_last_error(), "a/loop") != NULL);
            nst_index_free(ix);
            unlink(join(root, "a/loop"));
        }
        unlink(join(root, "c/link"));
    }
}

static void test_list(const char *tmp)
{
    char dir[4096], list[4200];
    snprintf(dir, sizeof dir, "%s/lists", tmp);
    mkdir_p(tmp, "lists");
    snprintf(list, sizeof list, "%s/train.txt", dir);
    write_file(dir, "train.txt",
               "# comment line\n"
               "img/one.jpg\t3\n"
               "\n"
               "/abs/two.png\t0\r\n"
               "HTTPS://bucket.example/three.jpg\t7\n"
               "with space.jpg\t12\r\n"
               "\r\n"
               "last.jpg\t1"); /* no final newline */
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 5);
        CHECK(path_is(ix, 0, dir, "img/one.jpg"));
        CHECK(nst_index_path(ix, 1) && strcmp(nst_index_path(ix, 1), "/abs/two.png") == 0);
        CHECK(nst_index_path(ix, 2) &&
              strcmp(nst_index_path(ix, 2), "HTTPS://bucket.example/three.jpg") == 0);
        CHECK(path_is(ix, 3, dir, "with space.jpg"));
        CHECK(path_is(ix, 4, dir, "last.jpg"));
        CHECK_EQ(nst_index_label(ix, 0), 3);
        CHECK_EQ(nst_index_label(ix, 1), 0);
        CHECK_EQ(nst_index_label(ix, 2), 7);
        CHECK_EQ(nst_index_label(ix, 3), 12);
        CHECK_EQ(nst_index_label(ix, 4), 1);
        CHECK_EQ(nst_index_classes(ix), 13);
        CHECK(nst_index_class_name(ix, 0) == NULL);
        CHECK_EQ(nst_index_ignored(ix), 0);
        nst_index_free(ix);
    }

    /* Largest labels allowed: +-(2^31 - 1) (a job's class index) */
    write_file(dir, "big.txt", "x.jpg\t2147483647\ny.jpg\t-2147483647\n");
    snprintf(list, sizeof list, "%s/big.txt", dir);
    ix = NULL;
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_label(ix, 0), 2147483647LL);
        CHECK_EQ(nst_index_label(ix, 1), -2147483647LL);
        CHECK_EQ(nst_index_classes(ix), 2147483648ULL);
        nst_index_free(ix);
    }

    /* "://" not after a scheme at the start: an ordinary relative path. */
    write_file(dir, "odd.txt", "sub/odd://name.jpg\t0\nhttp://h:8080/x.jpg\t1\n");
    snprintf(list, sizeof list, "%s/odd.txt", dir);
    ix = NULL;
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK(path_is(ix, 0, dir, "sub/odd://name.jpg"));
        CHECK(strcmp(nst_index_path(ix, 1), "http://h:8080/x.jpg") == 0);
        nst_index_free(ix);
    }
    write_file(dir, "gs.txt", "gs://bucket/a.jpg\t0\n"); /* s3:// is fetched: test_s3.c */
    snprintf(list, sizeof list, "%s/gs.txt", dir);
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "scheme 'gs://'") != NULL);

    /* Malformed lines: E_DATASET naming the list and the line number. */
    static const struct {
        const char *text;
        const char *line;
    } bad[] = {
        {"a.jpg\t1\nno_tab_here\n", ":2:"}, /* a label on some lines only */
        {"no_tab\na.jpg\t1\n", ":2:"},
        {"a.jpg\t0.5\nb.jpg\t1,2\n", ":2:"}, /* floats and lists do not mix */
        {"a.jpg\t,,\n", ":1:"},
        {"a.jpg\t1,,\n", ":1:"},
        {"a.jpg\t1,,2\n", ":1:"},
        {"a.jpg\t1, 2\n", ":1:"},
        {"a.jpg\t1,-2\n", ":1:"},
        {"a.jpg\t1,4294967296\n", ":1:"},
        {"a.jpg\tinf\n", ":1:"},
        {"a.jpg\tnan\n", ":1:"},
        {"a.jpg\t1e999\n", ":1:"},
        {"a.jpg\t.\n", ":1:"},
        {"a.jpg\t--1\n", ":1:"},
        {"# c\n\na.jpg\tone\n", ":3:"},
        {"a.jpg\t1\nb.jpg\t\n", ":2:"},
        {"a.jpg\t1\nb.jpg\t4611686018427387904\n", ":2:"}, /* 2^62 */
        {"a.jpg\t1\nb.jpg\t4611686018427387903\n", ":2:"}, /* 2^62 - 1 */
        {"a.jpg\t1\nb.jpg\t2147483648\n", ":2:"},          /* 2^31 */
        {"a.jpg\t1\nb.jpg\t-2147483648\n", ":2:"},         /* -2^31 */
        {"a.jpg\t1,2147483648\n", ":1:"},
        {"a.jpg\t99999999999999999999999\n", ":1:"},        /* overflow */
        {"a.jpg\t1\nb.jpg\t18446744073709551616\n", ":2:"}, /* 2^64: wrapped to 0 */
        {"a.jpg\t18446744073709551617\n", ":1:"},           /* 2^64 + 1: wrapped to 1 */
        {"a.jpg\t36893488147419103232\n", ":1:"},           /* 2^65: wrapped to 0 */
        {"a.jpg\t9223372036854775808\n", ":1:"},            /* 2^63 */
        {"a.jpg\t18446744073709551615\n", ":1:"},           /* 2^64 - 1 */
        {"a.jpg\t+1\n", ":1:"},
        {"a.jpg\t1 \n", ":1:"},
        {"a.jpg\t0x10\n", ":1:"},
        {"a.jpg\t1\n\t5\n", ":2:"}, /* empty path */
        {"a.jpg\t 1\n", ":1:"},
        {"a.jpg\t1x\n", ":1:"},
        /* URLs: only http://, https:// and s3:// */
        {"http://h/a.jpg\t1\ngs://bucket/b.jpg\t2\n", ":2:"},
        {"ftp://h/a.jpg\t1\n", ":1:"},
        {"file:///abs/a.jpg\t1\n", ":1:"},
        {"# c\nhttps://h/a.jpg\t1\ngs+x.y-z://b/c.jpg\t1\n", ":3:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(dir, "bad.txt", bad[i].text);
        snprintf(list, sizeof list, "%s/bad.txt", dir);
        ix = NULL;
        CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
        CHECK(ix == NULL);
        const char *msg = nostall_last_error();
        if (!strstr(msg, bad[i].line) || !strstr(msg, list) || !strstr(msg, "index")) {
            fprintf(stderr, "bad list %zu: message '%s' lacks '%s' or path\n", i, msg, bad[i].line);
            check_failures_++;
        }
    }

    /* Out of range and malformed labels say which. */
    write_file(dir, "bad.txt", "a.jpg\t18446744073709551616\n");
    snprintf(list, sizeof list, "%s/bad.txt", dir);
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "'18446744073709551616' is out of range") != NULL);
    write_file(dir, "bad.txt", "a.jpg\t0\nb.jpg\t2147483648\n");
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "bad.txt:2: label '2147483648' is out of range") != NULL);
    CHECK(strstr(nostall_last_error(), "(-2^31, 2^31)") != NULL);
    write_file(dir, "bad.txt", "a.jpg\t12a\n");
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "'12a' is malformed") != NULL);

    /* Label kinds: none, int (negative too), float, multi. */
    write_file(dir, "k.txt", "a.jpg\nb.jpg\n");
    snprintf(list, sizeof list, "%s/k.txt", dir);
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_NONE);
        CHECK_EQ(nst_index_count(ix), 2);
        CHECK_EQ(nst_index_classes(ix), 0);
        nst_index_free(ix);
    }
    write_file(dir, "k.txt", "a.jpg\t-1\nb.jpg\t4\n");
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_INT);
        CHECK_EQ(nst_index_label(ix, 0), -1);
        CHECK_EQ(nst_index_classes(ix), 5);
        nst_index_free(ix);
    }
    write_file(dir, "k.txt", "a.jpg\t0.25\nb.jpg\t3\nc.jpg\t-1e3\n");
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_FLOAT);
        CHECK(nst_index_label_float(ix, 0) == 0.25 && nst_index_label_float(ix, 1) == 3.0 &&
              nst_index_label_float(ix, 2) == -1000.0);
        nst_index_free(ix);
    }
    write_file(dir, "k.txt", "a.jpg\t3,1,7\nb.jpg\t2\n");
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        const uint32_t *l;
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_MULTI);
        CHECK_EQ(nst_index_labels(ix, 0, &l), 3);
        CHECK(l[0] == 3 && l[1] == 1 && l[2] == 7);
        CHECK_EQ(nst_index_labels(ix, 1, &l), 1);
        CHECK(l[0] == 2);
        CHECK_EQ(nst_index_classes(ix), 8);
        nst_index_free(ix);
    }
    /* "4," is one label of a multi-label list, "," none, "1,2," two. */
    write_file(dir, "k.txt", "a.jpg\t4,\nb.jpg\t,\nc.jpg\t1,2,\n");
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        const uint32_t *l;
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_MULTI);
        CHECK_EQ(nst_index_labels(ix, 0, &l), 1);
        CHECK(l[0] == 4);
        CHECK_EQ(nst_index_labels(ix, 1, &l), 0);
        CHECK_EQ(nst_index_labels(ix, 2, &l), 2);
        CHECK(l[0] == 1 && l[1] == 2);
        CHECK_EQ(nst_index_classes(ix), 5);
        nst_index_free(ix);
    }

    /* A list with only comments and blank lines is empty. */
    write_file(dir, "empty.txt", "# nothing\n\n\r\n");
    snprintf(list, sizeof list, "%s/empty.txt", dir);
    ix = NULL;
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), list) != NULL);
}

static void test_errors(const char *tmp)
{
    nst_index *ix = NULL;
    char p[4200];
    snprintf(p, sizeof p, "%s/does-not-exist", tmp);
    CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_NOT_FOUND);
    CHECK(ix == NULL);
    CHECK(strstr(nostall_last_error(), p) != NULL);

    /* Empty directory, and one with only empty classes and stray files. */
    mkdir_p(tmp, "empty");
    snprintf(p, sizeof p, "%s/empty", tmp);
    CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_DATASET);
    CHECK(ix == NULL);
    CHECK(strstr(nostall_last_error(), p) != NULL);
    CHECK(strstr(nostall_last_error(), "no images") != NULL);

    mkdir_p(tmp, "noimg");
    mkdir_p(tmp, "noimg/cls");
    write_file(tmp, "noimg/cls/readme.md", "x");
    write_file(tmp, "noimg/top.jpg", "x");
    snprintf(p, sizeof p, "%s/noimg", tmp);
    CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "no images") != NULL);

    /* Unreadable class folder (skipped when running as root). */
    if (geteuid() != 0) {
        mkdir_p(tmp, "locked");
        mkdir_p(tmp, "locked/ok");
        mkdir_p(tmp, "locked/shut");
        write_file(tmp, "locked/ok/a.jpg", "x");
        chmod(join(tmp, "locked/shut"), 0);
        snprintf(p, sizeof p, "%s/locked", tmp);
        CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_DATASET);
        CHECK(strstr(nostall_last_error(), "locked/shut") != NULL);
        chmod(join(tmp, "locked/shut"), 0755);

        /* Unreadable source: E_PERMISSION. */
        write_file(tmp, "secret.txt", "a.jpg\t1\n");
        chmod(join(tmp, "secret.txt"), 0);
        snprintf(p, sizeof p, "%s/secret.txt", tmp);
        CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_PERMISSION);
        CHECK(strstr(nostall_last_error(), p) != NULL);
        chmod(join(tmp, "locked"), 0);
        snprintf(p, sizeof p, "%s/locked", tmp);
        CHECK_RC(nst_index_build(&ix, p), NOSTALL_E_PERMISSION);
        chmod(join(tmp, "locked"), 0755);
    }

    CHECK_RC(nst_index_build(&ix, ""), NOSTALL_E_INVALID);
    CHECK_RC(nst_index_build(&ix, NULL), NOSTALL_E_INVALID);
    nst_index_free(NULL);
}

/* Index of item whose path ends in `tail`, or -1. */
static long long find_item(const nst_index *ix, const char *tail)
{
    size_t tl = strlen(tail);
    for (uint64_t i = 0; i < nst_index_count(ix); i++) {
        const char *p = nst_index_path(ix, i);
        size_t pl = strlen(p);
        if (pl >= tl && strcmp(p + pl - tl, tail) == 0) return (long long)i;
    }
    return -1;
}

/* Reading `path` fails with `want` and a message containing `why`. */
static void check_read_fails(const char *path, int want, const char *why)
{
    nst_buf buf = {0};
    size_t len = 7;
    int rc = nst_read_file(path, 1 << 20, 0, &buf, &len);
    const char *msg = nostall_last_error();
    if (rc != want || !strstr(msg, why) || len != 0) {
        fprintf(stderr, "read %s: got %d (%s) '%s', want %s with '%s'\n", path, rc,
                nostall_status_name(rc), msg, nostall_status_name(want), why);
        check_failures_++;
    }
    nst_buf_free(&buf);
}

/* Entries named like images that are no readable file are items (not
 * "ignored"), and reading one says why, without blocking. */
static void test_odd_entries(const char *tmp)
{
    char root[4096], p[4300];
    snprintf(root, sizeof root, "%s/odd", tmp);
    mkdir_p(tmp, "odd");
    mkdir_p(root, "c");
    mkdir_p(root, "c/dir.jpg");                   /* a directory named like an image */
    write_file(root, "c/dir.jpg/inner.jpg", "x"); /* not walked: its parent is an item */
    write_file(root, "c/good.jpg", "x");
    write_file(root, "c/notes.txt", "x"); /* the only ignored file */
    snprintf(p, sizeof p, "%s/c/dangling.jpg", root);
    CHECK(symlink("no-such-target.jpg", p) == 0);
    snprintf(p, sizeof p, "%s/c/other-dangling", root); /* not named like an image */
    CHECK(symlink("nowhere", p) == 0);
    snprintf(p, sizeof p, "%s/c/fifo.jpg", root);
    CHECK(mkfifo(p, 0644) == 0);
    int have_dev = 0, have_sock = 0;
    if (geteuid() == 0) {
        snprintf(p, sizeof p, "%s/c/null.png", root);
        have_dev = mknod(p, S_IFCHR | 0644, makedev(1, 3)) == 0; /* /dev/null */
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (sfd >= 0 && (size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/c/sock.jpeg", root) <
                        sizeof sa.sun_path)
        have_sock = bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (sfd >= 0) close(sfd);
    write_file(root, "c/secret.jpg", "x");
    chmod(join(root, "c/secret.jpg"), 0);

    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (!ix) return;
    /* good, dir.jpg, dangling, fifo, secret (+ null.png, sock.jpeg) */
    CHECK_EQ(nst_index_count(ix), 5 + have_dev + have_sock);
    CHECK_EQ(nst_index_ignored(ix), 2); /* notes.txt, other-dangling */
    CHECK(find_item(ix, "/c/dir.jpg") >= 0);
    CHECK(find_item(ix, "inner.jpg") < 0);
    CHECK(find_item(ix, "/c/dangling.jpg") >= 0);
    CHECK(find_item(ix, "/c/fifo.jpg") >= 0);
    CHECK(find_item(ix, "/c/secret.jpg") >= 0);
    if (have_dev) CHECK(find_item(ix, "/c/null.png") >= 0);
    if (have_sock) CHECK(find_item(ix, "/c/sock.jpeg") >= 0);
    nst_index_free(ix);

    snprintf(p, sizeof p, "%s/c/dangling.jpg", root);
    check_read_fails(p, NOSTALL_E_NOT_FOUND, "symlink target missing (-> 'no-such-target.jpg')");
    snprintf(p, sizeof p, "%s/c/dir.jpg", root);
    check_read_fails(p, NOSTALL_E_IO, "is a directory");
    snprintf(p, sizeof p, "%s/c/fifo.jpg", root);
    check_read_fails(p, NOSTALL_E_IO, "is a FIFO (named pipe), not a regular file");
    if (have_dev) {
        snprintf(p, sizeof p, "%s/c/null.png", root);
        check_read_fails(p, NOSTALL_E_IO, "is a character device, not a regular file");
    }
    if (have_sock) {
        snprintf(p, sizeof p, "%s/c/sock.jpeg", root);
        check_read_fails(p, NOSTALL_E_IO, "is a socket");
    }
    snprintf(p, sizeof p, "%s/c/missing.jpg", root);
    check_read_fails(p, NOSTALL_E_NOT_FOUND, "no such file");

    /* A FIFO with a writer still attached is refused at once, not read. */
    snprintf(p, sizeof p, "%s/c/fifo.jpg", root);
    int rfd = open(p, O_RDONLY | O_NONBLOCK), wfd = rfd >= 0 ? open(p, O_WRONLY | O_NONBLOCK) : -1;
    CHECK(wfd >= 0);
    check_read_fails(p, NOSTALL_E_IO, "FIFO");
    if (wfd >= 0) close(wfd);
    if (rfd >= 0) close(rfd);

    /* Unreadable: root reads anything, so drop privileges in a child. */
    snprintf(p, sizeof p, "%s/c/secret.jpg", root);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(77);
        if (access(root, X_OK) != 0) _exit(77); /* test folder not reachable as nobody */
        check_read_fails(p, NOSTALL_E_PERMISSION, "permission denied");
        /* The index does not open it: still an item. */
        nst_index *ix2 = NULL;
        if (nst_index_build(&ix2, root) < 0 || find_item(ix2, "/c/secret.jpg") < 0)
            check_failures_++;
        nst_index_free(ix2);
        _exit(check_failures_ ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        fprintf(stderr, "note: unreadable-file case skipped (cannot drop privileges or reach %s)\n",
                root);
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    chmod(join(root, "c/secret.jpg"), 0644);
}

/* dir/L0 holds one image; dir/Lk holds two symlinks a, b to L(k-1). */
static void make_dag(const char *dir, int n)
{
    char p[4300], t[64];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/L0", dir);
    mkdir(p, 0755);
    write_file(p, "img.jpg", "x");
    for (int k = 1; k <= n; k++) {
        snprintf(p, sizeof p, "%s/L%d", dir, k);
        mkdir(p, 0755);
        snprintf(t, sizeof t, "../L%d", k - 1);
        snprintf(p, sizeof p, "%s/L%d/a", dir, k);
        CHECK(symlink(t, p) == 0);
        snprintf(p, sizeof p, "%s/L%d/b", dir, k);
        CHECK(symlink(t, p) == 0);
    }
}

/* Symlinked subtrees that form a DAG are walked once, under the first path
 * (bytewise); 2^n paths, n + 1 directories. */
static void test_dag(const char *tmp)
{
    static const int sizes[] = {12, 24};
    for (int s = 0; s < 2; s++) {
        int n = sizes[s];
        char root[4096], store[4200], p[4300], t[64], want[4096];
        snprintf(root, sizeof root, "%s/dag%d", tmp, n);
        snprintf(store, sizeof store, "%s/dag%d-store", tmp, n);
        mkdir(root, 0755);
        make_dag(store, n);
        snprintf(p, sizeof p, "%s/c", root);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/c/top", root);
        snprintf(t, sizeof t, "../../dag%d-store/L%d", n, n);
        CHECK(symlink(t, p) == 0);
        nst_index *ix = NULL;
        CHECK_OK(nst_index_build(&ix, root));
        if (!ix) continue;
        CHECK_EQ(nst_index_count(ix), 1);
        CHECK_EQ(nst_index_dirs_walked(ix), n + 2); /* c, L_n .. L0 */
        CHECK_EQ(nst_index_dirs_shared(ix), n);     /* every b */
        int k = snprintf(want, sizeof want, "%s/c/top", root);
        for (int i = 0; i < n; i++) k += snprintf(want + k, sizeof want - (size_t)k, "/a");
        snprintf(want + k, sizeof want - (size_t)k, "/img.jpg");
        CHECK(nst_index_path(ix, 0) && strcmp(nst_index_path(ix, 0), want) == 0);
        nst_index_free(ix);
    }
    /* The same directory under two class folders is indexed in each. */
    char root[4096], p[4300];
    snprintf(root, sizeof root, "%s/dag12", tmp);
    snprintf(p, sizeof p, "%s/d", root);
    CHECK(symlink("c", p) == 0);
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 2);
        CHECK_EQ(nst_index_label(ix, 1), 1);
        nst_index_free(ix);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Items come out in bytewise order of their whole path, whatever the walk
 * meets first: names around '/' (0x2f) and above 0x7f. */
static void test_order(const char *tmp)
{
    static const char *const dirs[] = {"a", "a-b", "a0", "a/a", "a/a.b", "\xff", "a!", "a.jpgx"};
    static const char *const files[] = {
        "a.jpg",       "a-b.jpg",      "a0.jpg",   "a/x.jpg",    "a/a.jpg",  "a/a/z.png",
        "a/a.b/q.jpg", "a-b/k.jpeg",   "a0/m.jpg", "\xff/n.jpg", "\xfe.jpg", "a!/b.jpg",
        "a!.jpg",      "a.jpgx/y.JPG", "A.jpg",    " .jpg",      "a.b.jpg",
    };
    char root[4096], cls[4200];
    snprintf(root, sizeof root, "%s/order", tmp);
    snprintf(cls, sizeof cls, "%s/order/k", tmp);
    mkdir_p(tmp, "order");
    mkdir_p(root, "k");
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) mkdir_p(cls, dirs[i]);
    size_t n = sizeof files / sizeof files[0];
    for (size_t i = 0; i < n; i++) write_file(cls, files[i], "x");
    char **want = calloc(n, sizeof *want);
    for (size_t i = 0; i < n; i++) {
        want[i] = malloc(4400);
        snprintf(want[i], 4400, "%s/%s", cls, files[i]);
    }
    qsort(want, n, sizeof *want, cmp_str);
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), n);
        for (size_t i = 0; i < n && i < nst_index_count(ix); i++) {
            if (strcmp(nst_index_path(ix, i), want[i]) != 0) {
                fprintf(stderr, "order: item %zu is '%s', want '%s'\n", i, nst_index_path(ix, i),
                        want[i]);
                check_failures_++;
            }
        }
        nst_index_free(ix);
    }
    for (size_t i = 0; i < n; i++) free(want[i]);
    free(want);
}

/* A message must keep its reason whatever the length of the path. */
static void check_reason_kept(const char *msg, const char *reason)
{
    size_t len = strlen(msg);
    if (!strstr(msg, reason) || len >= NST_ERROR_MAX - 1 || len > 900) {
        fprintf(stderr, "message (%zu bytes) lacks '%s': '%.300s...'\n", len, reason, msg);
        check_failures_++;
    }
}

/* Paths longer than PATH_MAX: the ImageFolder builds, the file is an item
 * that fails with its reason; long list paths keep the line and reason. */
static void test_long_paths(const char *tmp)
{
    char root[4096], name[256];
    snprintf(root, sizeof root, "%s/long", tmp);
    mkdir_p(tmp, "long");
    mkdir_p(root, "c");
    write_file(root, "c/ok.jpg", "x");
    memset(name, 'd', 250);
    name[250] = '\0';
    int fd = open(join(root, "c"), O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    for (int i = 0; i < 20 && fd >= 0; i++) { /* 20 x 251 bytes > PATH_MAX */
        CHECK(mkdirat(fd, name, 0755) == 0);
        int nfd = openat(fd, name, O_RDONLY | O_DIRECTORY);
        close(fd);
        fd = nfd;
    }
    if (fd >= 0) {
        int f = openat(fd, "deep.jpg", O_WRONLY | O_CREAT, 0644);
        CHECK(f >= 0 && write(f, "x", 1) == 1);
        if (f >= 0) close(f);
        close(fd);
    }
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, root));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 2);
        long long i = find_item(ix, "/deep.jpg");
        CHECK(i >= 0);
        if (i >= 0) {
            const char *deep = nst_index_path(ix, (uint64_t)i);
            CHECK(strlen(deep) > 5000);
            nst_buf buf = {0};
            size_t len;
            CHECK_RC(nst_read_file(deep, 1 << 20, 0, &buf, &len), NOSTALL_E_IO);
            check_reason_kept(nostall_last_error(), "longer than PATH_MAX");
            CHECK(strstr(nostall_last_error(), "/deep.jpg: cannot be opened") != NULL);
            CHECK(strstr(nostall_last_error(), "read: ") == nostall_last_error());
            nst_buf_free(&buf);
        }
        nst_index_free(ix);
    }

    /* A list in a folder with a long name: the message keeps line and reason. */
    char dir[4096], list[4200];
    int k = snprintf(dir, sizeof dir, "%s/", tmp);
    for (int i = 0; i < 3; i++) { /* 3 x 251 bytes */
        k += snprintf(dir + k, sizeof dir - (size_t)k, "%s/", name);
        dir[k - 1] = '\0';
        mkdir(dir, 0755);
        dir[k - 1] = '/';
    }
    snprintf(list, sizeof list, "%sbad-label.txt", dir);
    FILE *f = fopen(list, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("a.jpg\t1\nb.jpg\t18446744073709551616\n", f);
        fclose(f);
    }
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    check_reason_kept(nostall_last_error(),
                      "bad-label.txt:2: label '18446744073709551616' is out of range");
}

int main(void)
{
    const char *tmp = test_tmpdir("index");
    test_folder(tmp);
    test_list(tmp);
    test_errors(tmp);
    test_odd_entries(tmp);
    test_dag(tmp);
    test_order(tmp);
    test_long_paths(tmp);
    TEST_EXIT();
}
