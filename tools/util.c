/* util.c — small helpers shared by the CLI's subcommands (see util.h). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

double tool_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tool_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int tool_dir_nonempty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int any = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            any = 1;
            break;
        }
    }
    closedir(d);
    return any;
}

void tool_flag_name(const char *arg, char *name, size_t cap, const char **value)
{
    const char *eq = strchr(arg + 2, '=');
    size_t n = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
    if (n >= cap) n = cap - 1;
    memcpy(name, arg + 2, n);
    name[n] = '\0';
    for (char *q = name; *q; q++)
        if (*q == '-') *q = '_';
    *value = eq ? eq + 1 : NULL;
}

int tool_loader_option(nostall_config *cfg, const char *cmd, const char *name, const char *value,
                       int argc, char **argv, int *i)
{
    int id = nostall_option_find(name);
    if (id < 0) return -1;
    nostall_option_info info;
    nostall_option_info_get(id, &info);
    if (!value) {
        /* A bare boolean flag means 1, unless a boolean value follows. */
        if (info.type == NOSTALL_TYPE_BOOL &&
            (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2) ||
             nostall_config_set(cfg, name, argv[*i + 1]) < 0)) {
            value = "1";
        } else if (info.type == NOSTALL_TYPE_BOOL) {
            ++*i; /* set just above */
            return id;
        } else if (*i + 1 < argc) {
            value = argv[++*i];
        } else {
            fprintf(stderr, "nostall %s: option '--%s' needs a value\n", cmd, info.name);
            return -2;
        }
    }
    if (nostall_config_set(cfg, name, value) < 0) {
        fprintf(stderr, "nostall %s: %s\n", cmd, nostall_last_error());
        return -2;
    }
    return id;
}

long long tool_read_file(const char *path, uint8_t **buf, size_t *cap, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
        if (errno == 0) errno = EINVAL;
        fclose(f);
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        fclose(f);
        errno = EFBIG;
        return -1;
    }
    size_t want = (size_t)st.st_size;
    if (want + 1 > *cap) {
        uint8_t *p = realloc(*buf, want + 1);
        if (!p) {
            fclose(f);
            errno = ENOMEM;
            return -1;
        }
        *buf = p;
        *cap = want + 1;
    }
    size_t got = fread(*buf, 1, want, f);
    int bad = ferror(f) || got != want;
    fclose(f);
    if (bad) {
        errno = EIO;
        return -1;
    }
    return (long long)got;
}
