/*
 * test_coco.c — the COCO instances parser (src/dataset/coco.c): items sorted
 * by image id, boxes in file order as xyxy, categories numbered by id,
 * every repair counted (clipped, dropped, unmatched, truncated, missing
 * files), paths joined as os.path.join does, and every malformed input an
 * E_DATASET naming the file and where: line and column for a syntax error,
 * the JSON path of a missing or ill-typed member; file_names that leave the
 * image root (absolute, "..", a symlink out of it) refused unless
 * allow_outside_root; the memory bound (max_bytes): members nostall does not
 * use cost nothing, an over-large tree fails before it is built with a
 * message naming the file and the limit, and the pre-scan's rewrite keeps
 * jansson's lines and columns; a folder holding one instances*.json.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "dataset/coco.h"

static nst_coco *load(const char *json, const nst_coco_opts *o)
{
    nst_coco *c = NULL;
    nst_coco_opts none = {0};
    int rc = nst_coco_load_buffer(&c, json, strlen(json), "/d/ann.json", o ? o : &none);
    if (rc < 0) fprintf(stderr, "unexpected: %s\n", nostall_last_error());
    return c;
}

/* The parse fails with E_DATASET and a message containing every `want`. */
static void fails(const char *json, const char *want1, const char *want2)
{
    nst_coco *c = NULL;
    nst_coco_opts o = {0};
    int rc = nst_coco_load_buffer(&c, json, strlen(json), "dir/ann.json", &o);
    const char *m = nostall_last_error();
    CHECK_EQ(rc, NOSTALL_E_DATASET);
    CHECK(c == NULL);
    if (!strstr(m, "dir/ann.json") || !strstr(m, want1) || (want2 && !strstr(m, want2))) {
        fprintf(stderr, "message '%s' lacks '%s' / '%s' (input %s)\n", m, want1, want2 ? want2 : "",
                json);
        CHECK(0);
    }
}

/* The parse fails with E_DATASET and exactly the message `want`. */
static void rc_message(const char *json, const char *want)
{
    nst_coco *c = NULL;
    nst_coco_opts o = {0};
    int rc = nst_coco_load_buffer(&c, json, strlen(json), "dir/ann.json", &o);
    CHECK_EQ(rc, NOSTALL_E_DATASET);
    if (strncmp(nostall_last_error(), want, strlen(want)) != 0) {
        fprintf(stderr, "message '%s', want '%s'\n", nostall_last_error(), want);
        CHECK(0);
    }
}

static int box_is(const nst_coco_box *b, double x0, double y0, double x1, double y1, uint32_t label,
                  uint32_t crowd)
{
    int ok = b->x0 == (float)x0 && b->y0 == (float)y0 && b->x1 == (float)x1 && b->y1 == (float)y1 &&
             b->label == label && b->iscrowd == crowd;
    if (!ok)
        fprintf(stderr, "box (%g %g %g %g label %u crowd %u), want (%g %g %g %g %u %u)\n", b->x0,
                b->y0, b->x1, b->y1, b->label, b->iscrowd, x0, y0, x1, y1, label, crowd);
    return ok;
}

static void test_valid(void)
{
    /* images out of id order, category ids with gaps and out of order */
    const char *j =
        "{\"info\": {\"x\": [1, 2]},\n"
        " \"images\": [{\"id\": 5, \"file_name\": \"b.jpg\", \"width\": 100, \"height\": 50},\n"
        "            {\"id\": 2, \"file_name\": \"sub/a.jpg\", \"width\": 64, \"height\": 48.0, \"license\": 3},\n"
        "            {\"id\": 9, \"file_name\": \"/abs/c.png\", \"width\": 10, \"height\": 10}],\n"
        " \"categories\": [{\"id\": 10, \"name\": \"ten\"}, {\"id\": 3, \"name\": \"three\"}, {\"id\": 7}],\n"
        " \"annotations\": [\n"
        "  {\"id\": 1, \"image_id\": 5, \"bbox\": [10, 5, 20, 10.5], \"category_id\": 7, \"iscrowd\": 0},\n"
        "  {\"id\": 2, \"image_id\": 2, \"bbox\": [1, 2, 3, 4], \"category_id\": 10, \"iscrowd\": 1,"
        "   \"segmentation\": {\"counts\": [1, 2], \"size\": [48, 64]}},\n"
        "  {\"id\": 3, \"image_id\": 5, \"bbox\": [0.5, 0.25, 1, 1], \"category_id\": 3, \"iscrowd\": false},\n"
        "  {\"id\": 4, \"image_id\": 5, \"bbox\": [90, 40, 10, 10], \"category_id\": 10},\n"
        "  {\"id\": 5, \"image_id\": 2, \"bbox\": [5, 5, 2, 2], \"category_id\": 3, \"iscrowd\": true}\n"
        " ]}";
    nst_coco_opts outside = {.allow_outside_root = 1}; /* for /abs/c.png */
    nst_coco *c = load(j, &outside);
    CHECK(c != NULL);
    if (!c) return;
    CHECK_EQ(c->nimages, 3);
    CHECK_EQ(c->images[0].id, 2);
    CHECK_EQ(c->images[1].id, 5);
    CHECK_EQ(c->images[2].id, 9);
    CHECK(strcmp(c->paths[0], "/d/sub/a.jpg") == 0);
    CHECK(strcmp(c->paths[1], "/d/b.jpg") == 0);
    CHECK(strcmp(c->paths[2], "/abs/c.png") == 0); /* an absolute file_name stands alone */
    CHECK_EQ(c->images[0].width, 64);
    CHECK_EQ(c->images[0].height, 48);
    CHECK_EQ(c->ncategories, 3);
    CHECK_EQ(c->category_ids[0], 3);
    CHECK_EQ(c->category_ids[1], 7);
    CHECK_EQ(c->category_ids[2], 10);
    CHECK(strcmp(c->category_names[0], "three") == 0 && strcmp(c->category_names[2], "ten") == 0);
    CHECK(strcmp(c->category_names[1], "") == 0);
    CHECK_EQ(c->nboxes, 5);
    CHECK_EQ(c->images[0].count, 2);
    CHECK_EQ(c->images[1].count, 3);
    CHECK_EQ(c->images[2].count, 0);
    CHECK_EQ(c->max_count, 3);
    const nst_coco_box *b0 = c->boxes + c->images[0].first, *b1 = c->boxes + c->images[1].first;
    CHECK(box_is(&b0[0], 1, 2, 4, 6, 2, 1));
    CHECK(box_is(&b0[1], 5, 5, 7, 7, 0, 1));
    CHECK(box_is(&b1[0], 10, 5, 30, 15.5, 1, 0));
    CHECK(box_is(&b1[1], 0.5, 0.25, 1.5, 1.25, 0, 0));
    CHECK(box_is(&b1[2], 90, 40, 100, 50, 2, 0)); /* touching the edges is not clipping */
    CHECK_EQ(c->parts_clipped + c->parts_dropped + c->parts_unmatched + c->items_truncated +
                 c->items_missing,
             0);
    nst_coco_free(c);
}

static void test_repairs(void)
{
    const char *j =
        "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 100, \"height\": 50},\n"
        "            {\"id\": 2, \"file_name\": \"b.jpg\", \"width\": 20, \"height\": 20}],\n"
        " \"categories\": [{\"id\": 1, \"name\": \"x\"}],\n"
        " \"annotations\": [\n"
        "  {\"image_id\": 1, \"bbox\": [-5, 10, 20, 20], \"category_id\": 1},\n" /* clipped left */
        "  {\"image_id\": 1, \"bbox\": [90, 40, 30, 30], \"category_id\": 1},\n" /* clipped right, bottom */
        "  {\"image_id\": 1, \"bbox\": [150, 10, 20, 20], \"category_id\": 1},\n" /* outside: dropped */
        "  {\"image_id\": 1, \"bbox\": [10, 10, 0, 20], \"category_id\": 1},\n" /* w 0: dropped */
        "  {\"image_id\": 1, \"bbox\": [10, 10, 5, -2], \"category_id\": 1},\n" /* h < 0: dropped */
        "  {\"image_id\": 1, \"bbox\": [1e308, 0, 1e308, 5], \"category_id\": 1},\n" /* x + w = inf: dropped */
        "  {\"image_id\": 7, \"bbox\": [1, 1, 2, 2], \"category_id\": 1},\n" /* no image 7 */
        "  {\"image_id\": 2, \"bbox\": [1, 1, 2, 2], \"category_id\": 1},\n"
        "  {\"image_id\": 2, \"bbox\": [3, 1, 2, 2], \"category_id\": 1},\n"
        "  {\"image_id\": 2, \"bbox\": [5, 1, 2, 2], \"category_id\": 1},\n"
        "  {\"image_id\": 1, \"bbox\": [30, 1, 1e-30, 2], \"category_id\": 1}\n" /* too thin for a float */
        " ]}";
    nst_coco_opts o = {.max_boxes = 2};
    nst_coco *c = load(j, &o);
    CHECK(c != NULL);
    if (!c) return;
    CHECK_EQ(c->parts_clipped, 2);
    CHECK_EQ(c->parts_dropped, 5);
    CHECK_EQ(c->parts_unmatched, 1);
    CHECK_EQ(c->items_truncated, 1); /* image 2: 3 boxes > max_boxes 2 */
    CHECK_EQ(c->images[0].count, 2);
    CHECK_EQ(c->images[1].count, 3);
    CHECK_EQ(c->max_count, 3);
    const nst_coco_box *b = c->boxes + c->images[0].first;
    CHECK(box_is(&b[0], 0, 10, 15, 30, 0, 0));
    CHECK(box_is(&b[1], 90, 40, 100, 50, 0, 0));
    nst_coco_free(c);
    o.max_boxes = 3; /* exactly max_boxes is not truncated */
    c = load(j, &o);
    CHECK(c && c->items_truncated == 0);
    nst_coco_free(c);
}

static void test_errors(void)
{
    const char *img =
        "\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 10, \"height\": 10}]";
    const char *cat = "\"categories\": [{\"id\": 1, \"name\": \"x\"}]";
    char j[2048];
    /* syntax errors name the line and the column */
    fails("{\n  \"images\": [],\n  \"annotations\": [}\n",
          "dir/ann.json:3:19:", "JSON syntax error");
    fails("{\"images\": [1,]}", "dir/ann.json:1:", "syntax error");
    fails("", "dir/ann.json:", "syntax error");
    fails("{\"images\": [], \"images\": []}", "dir/ann.json:1:", "duplicate");
    fails("{\"a\": 123456789012345678901234567890}", "dir/ann.json:1:", "too big");
    fails("[1, 2]", "top level is not an object", NULL);
    /* members */
    fails("{\"annotations\": [], \"categories\": []}", "no \"images\" member", NULL);
    fails("{\"images\": {}, \"annotations\": [], \"categories\": []}", "images: expected an array",
          NULL);
    fails("{\"images\": [], \"annotations\": [], \"categories\": []}", "images: empty", NULL);
    fails("{\"images\": [7], \"annotations\": [], \"categories\": []}",
          "images[0]: expected an object", NULL);
    fails("{\"images\": [{\"id\": 1, \"width\": 1, \"height\": 1}]}",
          "images[0].file_name: missing", NULL);
    fails("{\"images\": [{\"id\": \"1\", \"file_name\": \"a\", \"width\": 1, \"height\": 1}]}",
          "images[0].id: expected an integer", NULL);
    fails("{\"images\": [{\"id\": 1, \"file_name\": \"\", \"width\": 1, \"height\": 1}]}",
          "images[0].file_name: expected a non-empty string", NULL);
    fails("{\"images\": [{\"id\": 1, \"file_name\": \"a\", \"width\": 1, \"height\": 1},"
          " {\"id\": 2, \"file_name\": \"b\", \"width\": 0, \"height\": 1}]}",
          "images[1].width: expected an integer in 1..", NULL);
    fails("{\"images\": [{\"id\": 1, \"file_name\": \"a\", \"width\": 1, \"height\": 2.5}]}",
          "images[0].height: expected an integer", NULL);
    fails("{\"images\": [{\"id\": 1, \"file_name\": \"a\", \"width\": 1, \"height\": 1e9}]}",
          "images[0].height: expected an integer", NULL);
    fails("{\"images\": [{\"id\": 4, \"file_name\": \"a\", \"width\": 1, \"height\": 1},"
          " {\"id\": 4, \"file_name\": \"b\", \"width\": 1, \"height\": 1}]}",
          "images[1].id: 4 is also the id of images[0]", NULL);
    snprintf(j, sizeof j, "{%s, \"annotations\": []}", img);
    fails(j, "no \"categories\" member", NULL);
    snprintf(j, sizeof j,
             "{%s, \"categories\": [{\"id\": 1}, {\"id\": 2, \"name\": 5}], \"annotations\": []}",
             img);
    fails(j, "categories[1].name: expected a string", NULL);
    snprintf(j, sizeof j, "{%s, \"categories\": [{\"id\": 3}, {\"id\": 3}], \"annotations\": []}",
             img);
    fails(j, "categories[1].id: 3 is also the id of categories[0]", NULL);
    snprintf(j, sizeof j, "{%s, %s}", img, cat);
    fails(j, "no \"annotations\" member", NULL);
    static const struct {
        const char *ann, *want;
    } anns[] = {
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, 1], \"category_id\": 1}, 5]",
         "annotations[1]: expected an object"},
        {"[{\"bbox\": [1, 1, 1, 1], \"category_id\": 1}]", "annotations[0].image_id: missing"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, 1]}]", "annotations[0].category_id: missing"},
        {"[{\"image_id\": 1, \"category_id\": 1}]", "annotations[0].bbox: missing"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1], \"category_id\": 1}]",
         "annotations[0].bbox: expected an array of 4"},
        {"[{\"image_id\": 1, \"bbox\": {}, \"category_id\": 1}]",
         "annotations[0].bbox: expected an array of 4"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, \"2\", 1], \"category_id\": 1}]",
         "annotations[0].bbox[2]: expected a number"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, null], \"category_id\": 1}]",
         "annotations[0].bbox[3]: expected a number"},
        {"[{\"image_id\": 1.0, \"bbox\": [1, 1, 1, 1], \"category_id\": 1}]",
         "annotations[0].image_id: expected an integer"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, 1], \"category_id\": 2}]",
         "annotations[0].category_id: 2 is not a category"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, 1], \"category_id\": 1, \"iscrowd\": 2}]",
         "annotations[0].iscrowd: expected 0 or 1"},
        {"[{\"image_id\": 1, \"bbox\": [1, 1, 1, 1], \"category_id\": 1, \"iscrowd\": \"0\"}]",
         "annotations[0].iscrowd: expected 0 or 1"},
        {"{}", "annotations: expected an array"},
    };
    for (size_t i = 0; i < sizeof anns / sizeof *anns; i++) {
        snprintf(j, sizeof j, "{%s, %s, \"annotations\": %s}", img, cat, anns[i].ann);
        fails(j, anns[i].want, NULL);
    }
    /* an unknown category is an error even for an unmatched annotation */
    snprintf(
        j, sizeof j,
        "{%s, %s, \"annotations\": [{\"image_id\": 9, \"bbox\": [1, 1, 1, 1], \"category_id\": 5}]}",
        img, cat);
    fails(j, "annotations[0].category_id: 5", NULL);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static void test_files(void)
{
    const char *dir = test_tmpdir("test_coco");
    char p[4096], ann[4096], j[4096];
    snprintf(p, sizeof p, "mkdir -p '%s/im' '%s/other'", dir, dir);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/im/a.jpg", dir);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/other/b.jpg", dir);
    write_file(p, "x");
    snprintf(
        j, sizeof j,
        "{\"images\": [{\"id\": 1, \"file_name\": \"im/a.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 2, \"file_name\": \"im/missing.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 3, \"file_name\": \"http://example.invalid/c.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 4, \"file_name\": \"%s/other/b.jpg\", \"width\": 10, \"height\": 10},\n"
        " {\"id\": 5, \"file_name\": \"im/a.jpg/not_a_dir.jpg\", \"width\": 10, \"height\": 10}],\n"
        " \"categories\": [{\"id\": 1}],\n"
        " \"annotations\": [{\"image_id\": 2, \"bbox\": [-1, 1, 1, 1], \"category_id\": 1},\n"
        "  {\"image_id\": 4, \"bbox\": [1, 1, 100, 1], \"category_id\": 1}]}\n",
        dir);
    snprintf(ann, sizeof ann, "%s/ann.json", dir);
    write_file(ann, j);
    nst_coco_opts o = {.check_files = 1};
    nst_coco *c = NULL;
    CHECK_OK(nst_coco_load(&c, ann, &o));
    if (c) {
        CHECK_EQ(c->nimages, 3);
        CHECK_EQ(c->items_missing, 2); /* ENOENT and ENOTDIR */
        snprintf(p, sizeof p, "%s/im/a.jpg", dir);
        CHECK(strcmp(c->paths[0], p) == 0);
        CHECK(strcmp(c->paths[1], "http://example.invalid/c.jpg") == 0); /* a URL is not checked */
        CHECK_EQ(c->images[1].id, 3);
        CHECK_EQ(c->images[2].id, 4);
        /* the missing image's box is neither clipped nor counted; image 4's is clipped */
        CHECK_EQ(c->parts_clipped, 1);
        CHECK_EQ(c->nboxes, 1);
        CHECK_EQ(c->images[2].count, 1);
    }
    nst_coco_free(c);
    /* image_root replaces the annotation file's folder */
    snprintf(p, sizeof p, "%s/", dir);
    o.image_root = p;
    CHECK_OK(nst_coco_load(&c, ann, &o));
    if (c) {
        char want[4096];
        snprintf(want, sizeof want, "%s/im/a.jpg", dir); /* no doubled slash */
        CHECK(strcmp(c->paths[0], want) == 0);
    }
    nst_coco_free(c);
    snprintf(p, sizeof p, "%s/other", dir);
    o.image_root = p;
    CHECK_OK(nst_coco_load(&c, ann, &o)); /* now every relative one is missing */
    CHECK(c && c->nimages == 2 && c->items_missing == 3);
    nst_coco_free(c);
    c = NULL;
    /* every file missing */
    snprintf(j, sizeof j,
             "{\"images\": [{\"id\": 1, \"file_name\": \"gone.jpg\", \"width\": 10, \"height\": 10}],"
             " \"categories\": [], \"annotations\": []}");
    write_file(ann, j);
    o.image_root = NULL;
    CHECK_RC(nst_coco_load(&c, ann, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "gone.jpg") &&
          strstr(nostall_last_error(), "all 1 images are missing"));
    /* not checked: kept */
    o.check_files = 0;
    CHECK_OK(nst_coco_load(&c, ann, &o));
    CHECK(c && c->nimages == 1 && c->items_missing == 0);
    nst_coco_free(c);
    /* a syntax error in a file: file, line, column */
    write_file(ann, "{\"images\": [\n\n   {\"id\": 1,, }]}\n");
    CHECK_RC(nst_coco_load(&c, ann, &o), NOSTALL_E_DATASET);
    snprintf(p, sizeof p, "%s:3:13: JSON syntax error", ann); /* the second comma */
    CHECK(strstr(nostall_last_error(), p) != NULL);
    fprintf(stderr, "syntax error message: %s\n", nostall_last_error());
    /* the annotation file itself missing, or a folder */
    snprintf(p, sizeof p, "%s/nope.json", dir);
    CHECK_RC(nst_coco_load(&c, p, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), p) && strstr(nostall_last_error(), "No such file"));
    CHECK_RC(nst_coco_load(&c, dir, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "directory") != NULL);
}

/* A file_name leaving the image root is refused (A): by its text when the
 * files are not checked, after realpath when they are (symlinks too). */
static void test_outside_root(void)
{
    const char *dir = test_tmpdir("test_coco_root");
    char p[4096], ann[4096], j[8192], root[4096];
    snprintf(p, sizeof p, "mkdir -p '%s/root/im' '%s/secret'", dir, dir);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/root/im/a.jpg", dir);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/secret/credentials", dir);
    write_file(p, "AKIASECRETBYTES");
    snprintf(p, sizeof p, "%s/root/link.jpg", dir);
    CHECK(symlink("../secret/credentials", p) == 0);
    snprintf(p, sizeof p, "%s/root/inner.jpg", dir);
    CHECK(symlink("im/a.jpg", p) == 0); /* a symlink inside the root is fine */
    snprintf(root, sizeof root, "%s/root", dir);
    snprintf(ann, sizeof ann, "%s/root/ann.json", dir);
    static const struct {
        const char *file; /* %s: the test's folder */
        int refused_checked, refused_text;
    } cases[] = {
        {"im/a.jpg", 0, 0},
        {"im/../im/a.jpg", 0, 0},
        {"inner.jpg", 0, 0},
        {"%s/root/im/a.jpg", 0, 0},      /* absolute, under the root */
        {"../secret/credentials", 1, 1}, /* the file_name */
        {"im/../../secret/credentials", 1, 1},
        {"../gone.jpg", 1, 1},           /* refused even though it does not exist */
        {"%s/secret/credentials", 1, 1}, /* absolute, outside */
        {"/etc/passwd", 1, 1},
        {"link.jpg", 1, 0},                     /* a symlink out: only realpath sees it */
        {"http://example.invalid/a.jpg", 0, 0}, /* a URL is not a path */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char file[4096];
        snprintf(file, sizeof file, cases[k].file, dir);
        snprintf(j, sizeof j,
                 "{\"images\": [{\"id\": 1, \"file_name\": \"im/a.jpg\", \"width\": 10, \"height\": 10},\n"
                 " {\"id\": 2, \"file_name\": \"%s\", \"width\": 10, \"height\": 10}],\n"
                 " \"categories\": [{\"id\": 1}], \"annotations\": []}\n",
                 file);
        write_file(ann, j);
        for (int checked = 1; checked >= 0; checked--) {
            nst_coco_opts o = {.check_files = checked};
            nst_coco *c = NULL;
            int rc = nst_coco_load(&c, ann, &o),
                want = checked ? cases[k].refused_checked : cases[k].refused_text;
            if (want) {
                const char *m = nostall_last_error();
                CHECK_EQ(rc, NOSTALL_E_DATASET);
                if (!strstr(m, "images[1].file_name") || !strstr(m, "leaves the image root") ||
                    !strstr(m, root) || !strstr(m, "allow_outside_root=1") || strstr(m, "AKIA")) {
                    fprintf(stderr, "case %s: %s\n", file, m);
                    CHECK(0);
                }
            } else {
                CHECK_OK(rc);
                CHECK(c && c->nimages == 2);
            }
            nst_coco_free(c);
            /* opted in: read as before (the missing one counted) */
            o.allow_outside_root = 1;
            CHECK_OK(nst_coco_load(&c, ann, &o));
            CHECK(c && c->nimages + c->items_missing == 2);
            nst_coco_free(c);
        }
    }
}

/* Many values: the memory bound (B). */
static char *big_doc(const char *fmt, size_t copies, const char *unit)
{
    size_t ul = strlen(unit), n = copies * (ul + 1);
    char *fill = malloc(n + 1), *w = fill;
    if (!fill) exit(1);
    for (size_t i = 0; i < copies; i++) {
        memcpy(w, unit, ul);
        w += ul;
        *w++ = i + 1 < copies ? ',' : ' ';
    }
    *w = '\0';
    char *doc = malloc(n + strlen(fmt) + 1);
    if (!doc) exit(1);
    sprintf(doc, fmt, fill);
    free(fill);
    return doc;
}

static void test_memory_bound(void)
{
    const char *img =
        "\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 10, \"height\": 10}], "
        "\"categories\": [{\"id\": 1}]";
    char fmt[1024];
    /* 4 MB of {} in members nostall does not use: cheap, read within 8 MB */
    snprintf(fmt, sizeof fmt,
             "{\"info\": [%%s], %s, \"annotations\": [{\"image_id\": 1, \"category_id\": 1, "
             "\"bbox\": [1, 1, 2, 2], \"segmentation\": [%%s]}]}",
             img);
    char *fill = big_doc("%s", 1000000, "{}"), *doc = malloc(2 * strlen(fill) + sizeof fmt);
    if (!doc) exit(1);
    sprintf(doc, fmt, fill, fill);
    free(fill);
    nst_coco_opts o = {.max_bytes = 8u << 20};
    nst_coco *c = NULL;
    CHECK_OK(nst_coco_load_buffer(&c, doc, strlen(doc), "dir/ann.json", &o));
    CHECK(c && c->nimages == 1 && c->nboxes == 1);
    nst_coco_free(c);
    c = NULL;
    /* 300 KB of {} where nostall reads them (annotations): refused before
     * jansson builds them, naming the file and the limit */
    free(doc);
    snprintf(fmt, sizeof fmt, "{%s, \"annotations\": [%%s]}", img);
    doc = big_doc(fmt, 100000, "{}");
    CHECK_RC(nst_coco_load_buffer(&c, doc, strlen(doc), "dir/ann.json", &o), NOSTALL_E_DATASET);
    const char *m = nostall_last_error();
    fprintf(stderr, "over the limit: %s\n", m);
    CHECK(c == NULL && strstr(m, "coco: dir/ann.json: ") &&
          strstr(m, "over max_annotation_bytes=8388608"));
    /* the file alone over the limit, through nst_coco_load */
    const char *dir = test_tmpdir("test_coco_mem");
    char path[4096];
    snprintf(path, sizeof path, "%s/instances_big.json", dir);
    write_file(path, doc);
    o.max_bytes = 100 * 1024;
    CHECK_RC(nst_coco_load(&c, path, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), path) &&
          strstr(nostall_last_error(), "over max_annotation_bytes=102400"));
    /* a limit above the estimate: parsed (the annotations, objects without
     * the members an annotation needs, are an error of their own) */
    o.max_bytes = 64u << 20;
    CHECK_RC(nst_coco_load_buffer(&c, doc, strlen(doc), "dir/ann.json", &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "annotations[0].image_id: missing"));
    free(doc);
    /* the rewrite keeps lines and columns: a syntax error after skipped
     * members spanning lines, with multi-byte characters, is where jansson
     * puts it in the original text */
    static const char *const after[] = {
        "{\"info\": {\"a\": [1,\n 2, \"\xc3\xa9t\xc3\xa9\"], \"b\": \"\xe2\x82\xac\"}, \"images\": "
        "[\n  {\"id\": 1,, }]}",
        "{\"licenses\": [{\"x\": \"\xf0\x9f\x98\x80\"}], \"images\": [{\"id\": 1, \"file_name\": "
        "\"a\", \"width\": 1, \"height\": 1, \"coco_url\": \"\xc3\xa9\"}], \"x\": [1 2]}",
        "{\"info\": [1, 2, 01]}",
        "{\"info\": \"\\ud800\"}",
        "{\"info\": \"\xc0\xaf\"}",
        "{\"info\": 1e999}",
        "{\"info\": [-]}",
        "{\"info\": {\"a\": tru}}",
        "{\"info\": {}} x",
    };
    for (size_t k = 0; k < sizeof after / sizeof *after; k++) {
        json_error_t e;
        json_t *t = json_loadb(after[k], strlen(after[k]), JSON_REJECT_DUPLICATES, &e);
        CHECK(t == NULL);
        json_decref(t);
        char want[256];
        snprintf(want, sizeof want, "coco: dir/ann.json:%d:%d: JSON syntax error: %s", e.line,
                 e.column, e.text);
        rc_message(after[k], want);
    }
}

/* A folder holding exactly one instances*.json stands for it (C). */
static void test_folder(void)
{
    const char *dir = test_tmpdir("test_coco_dir");
    char p[4096], want[4096];
    snprintf(p, sizeof p, "%s/im.jpg", dir);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/instances_val.json", dir);
    write_file(p,
               "{\"images\": [{\"id\": 1, \"file_name\": \"im.jpg\", \"width\": 10, \"height\": 10}],"
               " \"categories\": [], \"annotations\": []}");
    nst_coco_opts o = {.check_files = 1};
    nst_coco *c = NULL;
    CHECK_OK(nst_coco_load(&c, dir, &o));
    snprintf(want, sizeof want, "%s/im.jpg", dir);
    CHECK(c && c->nimages == 1 && strcmp(c->paths[0], want) == 0);
    nst_coco_free(c);
    c = NULL;
    snprintf(p, sizeof p, "%s/instances_train.json", dir);
    write_file(p, "{}");
    CHECK_RC(nst_coco_load(&c, dir, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "2 instances*.json files"));
    /* a tar archive where the JSON is expected: said so, not a syntax error */
    snprintf(p, sizeof p, "%s/shard-000000.tar", dir);
    char tar[1024] = "a.jpg";
    memcpy(tar + 257, "ustar", 6);
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(tar, 1, sizeof tar, f) == sizeof tar);
    if (f) fclose(f);
    CHECK_RC(nst_coco_load(&c, p, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "a tar archive: task=detect does not read shards") &&
          !strstr(nostall_last_error(), "syntax"));
    snprintf(p, sizeof p, "rm -f '%s'/instances_*.json", dir);
    CHECK(system(p) == 0);
    CHECK_RC(nst_coco_load(&c, dir, &o), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "a directory of tar shards"));
}

int main(void)
{
    test_valid();
    test_repairs();
    test_errors();
    test_files();
    test_outside_root();
    test_memory_bound();
    test_folder();
    TEST_EXIT();
}
