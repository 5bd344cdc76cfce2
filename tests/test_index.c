/*
 * test_index.c — the dataset index: ImageFolder (class order, recursion,
 * extension matching, hidden and ignored files, empty classes) and list files
 * (relative/absolute paths, comments, CRLF, malformed lines), plus the error
 * statuses for missing and empty sources.
 */
#include <errno.h>
#include <sys/stat.h>

#include "check.h"
#include "source/index.h"

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
static int path_is(const nst_index *ix, uint64_t i, const char *dir,
                   const char *rel)
{
    const char *p = nst_index_path(ix, i);
    char want[4096];
    snprintf(want, sizeof want, "%s/%s", dir, rel);
    if (!p || strcmp(p, want) != 0) {
        fprintf(stderr, "item %llu: got '%s', want '%s'\n",
                (unsigned long long)i, p ? p : "(null)", want);
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
    mkdir_p(root, "c");          /* empty class */
    mkdir_p(root, ".cache");     /* hidden dir: not a class */
    mkdir_p(root, "b/sub");
    mkdir_p(root, "b/sub/deeper");
    mkdir_p(root, "b/.hiddendir");
    write_file(root, "b/z.jpg", "x");
    write_file(root, "b/A.JPG", "x");      /* upper case extension */
    write_file(root, "b/m.png", "x");
    write_file(root, "b/sub/k.jpeg", "x");
    write_file(root, "b/sub/deeper/q.PnG", "x");
    write_file(root, "b/sub.jpg", "x");    /* "sub.jpg" < "sub/..." bytewise */
    write_file(root, "b/.hidden.jpg", "x"); /* hidden file: ignored */
    write_file(root, "b/.hiddendir/x.jpg", "x"); /* inside hidden dir: skipped */
    write_file(root, "b/notes.txt", "x");  /* ignored */
    write_file(root, "b/jpg", "x");        /* no extension: ignored */
    write_file(root, "b/x.jpgx", "x");     /* ignored */
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
        "a/10.jpg", "a/2.jpg", "b/A.JPG", "b/m.png", "b/sub.jpg",
        "b/sub/deeper/q.PnG", "b/sub/k.jpeg", "b/z.jpg",
    };
    static const int64_t labels[] = {0, 0, 1, 1, 1, 1, 1, 1};
    for (uint64_t i = 0; i < 8 && i < nst_index_count(ix); i++) {
        CHECK(path_is(ix, i, root, want[i]));
        CHECK_EQ(nst_index_label(ix, i), labels[i]);
    }
    CHECK(nst_index_path(ix, 8) == NULL);
    nst_index_free(ix);

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

    /* Largest label allowed: 2^62 - 1. */
    write_file(dir, "big.txt", "x.jpg\t4611686018427387903\n");
    snprintf(list, sizeof list, "%s/big.txt", dir);
    ix = NULL;
    CHECK_OK(nst_index_build(&ix, list));
    if (ix) {
        CHECK_EQ(nst_index_label(ix, 0), 4611686018427387903LL);
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
    write_file(dir, "s3.txt", "s3://bucket/a.jpg\t0\n");
    snprintf(list, sizeof list, "%s/s3.txt", dir);
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "scheme 's3://'") != NULL);

    /* Malformed lines: E_DATASET naming the list and the line number. */
    static const struct {
        const char *text;
        const char *line;
    } bad[] = {
        {"a.jpg\t1\nno_tab_here\n", ":2:"},
        {"# c\n\na.jpg\tone\n", ":3:"},
        {"a.jpg\t-1\n", ":1:"},
        {"a.jpg\t1\nb.jpg\t\n", ":2:"},
        {"a.jpg\t1\nb.jpg\t4611686018427387904\n", ":2:"},  /* 2^62 */
        {"a.jpg\t99999999999999999999999\n", ":1:"},        /* overflow */
        {"a.jpg\t1\nb.jpg\t18446744073709551616\n", ":2:"}, /* 2^64: wrapped to 0 */
        {"a.jpg\t18446744073709551617\n", ":1:"},          /* 2^64 + 1: wrapped to 1 */
        {"a.jpg\t36893488147419103232\n", ":1:"},          /* 2^65: wrapped to 0 */
        {"a.jpg\t9223372036854775808\n", ":1:"},           /* 2^63 */
        {"a.jpg\t18446744073709551615\n", ":1:"},          /* 2^64 - 1 */
        {"a.jpg\t+1\n", ":1:"},
        {"a.jpg\t1 \n", ":1:"},
        {"a.jpg\t0x10\n", ":1:"},
        {"a.jpg\t1e3\n", ":1:"},
        {"a.jpg\t1\n\t5\n", ":2:"},                          /* empty path */
        {"a.jpg\t 1\n", ":1:"},
        {"a.jpg\t1x\n", ":1:"},
        /* URLs: only http:// and https:// */
        {"http://h/a.jpg\t1\ns3://bucket/b.jpg\t2\n", ":2:"},
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
        if (!strstr(msg, bad[i].line) || !strstr(msg, list) ||
            !strstr(msg, "index")) {
            fprintf(stderr, "bad list %zu: message '%s' lacks '%s' or path\n", i,
                    msg, bad[i].line);
            check_failures_++;
        }
    }

    /* Out of range and malformed labels say which. */
    write_file(dir, "bad.txt", "a.jpg\t18446744073709551616\n");
    snprintf(list, sizeof list, "%s/bad.txt", dir);
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "'18446744073709551616' is out of range") != NULL);
    write_file(dir, "bad.txt", "a.jpg\t12a\n");
    CHECK_RC(nst_index_build(&ix, list), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "'12a' is not a decimal integer") != NULL);

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

int main(void)
{
    const char *tmp = test_tmpdir("index");
    test_folder(tmp);
    test_list(tmp);
    test_errors(tmp);
    TEST_EXIT();
}
