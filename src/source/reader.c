/*
 * reader.c — the plain pread() reader, of whole files and of byte ranges
 * (see reader.h).
 * Room: source/ (reading bytes).
 *
 * Whole files: the size is taken from fstat() and checked against the limit
 * before any buffer is sized; the read loop then continues until EOF in case
 * the file grew or fstat() lied (procfs, network filesystems), never past the
 * limit. Ranges: the range is checked against the limit and the file's size
 * before the buffer is sized, then exactly `length` bytes are read (a file
 * that shrank meanwhile is E_TRUNCATED, like one that was short at open).
 * Called by worker threads; touches only its arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "source/reader.h"

const char *nst_msg_path_of(nst_msg_path *buf, const char *path)
{
    size_t n = strlen(path);
    if (n < NST_MSG_PATH_MAX) return path;
    /* head + "..." + tail < NST_MSG_PATH_MAX, never splitting a UTF-8
     * sequence (a cut lands before a lead byte, not on a continuation). */
    size_t head = NST_MSG_PATH_MAX / 3, tail = NST_MSG_PATH_MAX - head - 4;
    while (head > 0 && ((unsigned char)path[head] & 0xC0) == 0x80) head--;
    size_t from = n - tail;
    while (from < n && ((unsigned char)path[from] & 0xC0) == 0x80) from++;
    memcpy(buf->s, path, head);
    memcpy(buf->s + head, "...", 3);
    memcpy(buf->s + head + 3, path + from, n - from + 1);
    return buf->s;
}

/* The reason a file of mode `m` is not read, NULL for a regular file. */
static const char *not_regular(mode_t m)
{
    if (S_ISREG(m)) return NULL;
    if (S_ISDIR(m)) return "is a directory";
    if (S_ISFIFO(m)) return "is a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "is a socket";
    if (S_ISCHR(m)) return "is a character device";
    if (S_ISBLK(m)) return "is a block device";
    return "is of an unknown type";
}

/* Why opening `path` failed with `err` (and what it is, when it exists but
 * is no file). */
static int open_error(const char *path, int err)
{
    const char *mp = NST_MSG_PATH(path);
    struct stat st;
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
            char target[256];
            ssize_t n = readlink(path, target, sizeof target - 1);
            if (n < 0) n = 0;
            target[n] = '\0';
            return nst_error(NOSTALL_E_NOT_FOUND, "read: %s: symlink target missing (-> '%s%s')",
                             mp, target, (size_t)n == sizeof target - 1 ? "..." : "");
        }
        return nst_error(NOSTALL_E_NOT_FOUND, "read: %s: no such file", mp);
    case EACCES:
    case EPERM: return nst_error(NOSTALL_E_PERMISSION, "read: %s: permission denied", mp);
    case ENAMETOOLONG:
        return nst_error(NOSTALL_E_IO,
                         "read: %s: cannot be opened: the path (%zu bytes) is longer "
                         "than PATH_MAX or has a name longer than NAME_MAX",
                         mp, strlen(path));
    case ELOOP:
        return nst_error(NOSTALL_E_IO,
                         "read: %s: too many levels of symbolic links (a symlink "
                         "loop?)",
                         mp);
    case ENXIO: /* a socket, or a device without its driver */
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) break;
        /* fall through */
    default: return nst_error(NOSTALL_E_IO, "read: %s: %s", mp, strerror(err));
    }
    return nst_error(NOSTALL_E_IO, "read: %s: %s, not a regular file", mp, not_regular(st.st_mode));
}

/* Open `path` and check it is a regular file; *st its fstat. */
static int open_regular(const char *path, int *fd_out, struct stat *st)
{
    int fd, rc = 0;
    const char *why;

    *fd_out = -1;
    do {
        /* O_NONBLOCK: opening a FIFO must not block the worker; anything
         * that is not a regular file is rejected below, before any read.
         * O_NOCTTY: a terminal device never becomes our controlling one. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return open_error(path, errno);
    if (fstat(fd, st) != 0) {
        rc = nst_error(NOSTALL_E_IO, "read: %s: fstat: %s", NST_MSG_PATH(path), strerror(errno));
    } else if ((why = not_regular(st->st_mode)) != NULL) {
        /* FIFOs, sockets and devices could block or never end. */
        rc = nst_error(NOSTALL_E_IO, "read: %s: %s, not a regular file", NST_MSG_PATH(path), why);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

/* A regular file: reads may block as usual (io_uring would otherwise
 * answer -EAGAIN instead of reading in the background). */
static void set_blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int nst_open_item(const char *path, uint64_t max_bytes, int *fd_out, size_t *size)
{
    struct stat st;
    int fd, rc;

    *size = 0;
    if ((rc = open_regular(path, fd_out, &st)) < 0) return rc;
    fd = *fd_out;
    if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
        rc = nst_error(NOSTALL_E_FILE_TOO_LARGE, "read: %s: %lld bytes is over max_file_bytes=%llu",
                       NST_MSG_PATH(path), (long long)st.st_size, (unsigned long long)max_bytes);
        close(fd);
        *fd_out = -1;
        return rc;
    }
    set_blocking(fd);
    *size = (size_t)st.st_size;
    return 0;
}

/* "bytes A-B" of a range (length > 0), inclusive as in HTTP. */
#define RANGE_FMT "bytes %llu-%llu"
#define RANGE_ARGS(off, len) (unsigned long long)(off), (unsigned long long)((off) + (len)-1)

int nst_range_check(const char *prefix, const char *path, uint64_t offset, uint64_t length,
                    uint64_t max_bytes)
{
    if (length == 0)
        return offset == 0 ? 0
                           : nst_error(NOSTALL_E_INVALID,
                                       "%s: %s: offset %llu with length 0 (length 0 is the "
                                       "whole file, from offset 0)",
                                       prefix, NST_MSG_PATH(path), (unsigned long long)offset);
    /* off_t is signed: the range must end below 2^63. */
    if (offset > (uint64_t)INT64_MAX || length > (uint64_t)INT64_MAX - offset)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: %s: range of %llu bytes at offset %llu ends past 2^63", prefix,
                         NST_MSG_PATH(path), (unsigned long long)length, (unsigned long long)offset);
    if (length > max_bytes)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE,
                         "%s: %s: " RANGE_FMT " asked: %llu bytes is over max_file_bytes=%llu",
                         prefix, NST_MSG_PATH(path), RANGE_ARGS(offset, length),
                         (unsigned long long)length, (unsigned long long)max_bytes);
    return 0;
}

static int range_truncated(const char *path, uint64_t offset, uint64_t length, uint64_t fsize)
{
    return nst_error(NOSTALL_E_TRUNCATED, "read: %s: " RANGE_FMT " asked, the file has %llu",
                     NST_MSG_PATH(path), RANGE_ARGS(offset, length), (unsigned long long)fsize);
}

int nst_open_range(const char *path, uint64_t offset, uint64_t length, uint64_t max_bytes,
                   int *fd_out, size_t *size)
{
    struct stat st;
    int rc;

    *fd_out = -1;
    *size = 0;
    if ((rc = nst_range_check("read", path, offset, length, max_bytes)) < 0) return rc;
    if (length == 0) return nst_open_item(path, max_bytes, fd_out, size);
    if ((rc = open_regular(path, fd_out, &st)) < 0) return rc;
    if (st.st_size < 0 || (uint64_t)st.st_size < offset + length) {
        rc = range_truncated(path, offset, length, st.st_size < 0 ? 0 : (uint64_t)st.st_size);
        close(*fd_out);
        *fd_out = -1;
        return rc;
    }
    set_blocking(*fd_out);
    *size = (size_t)length;
    return 0;
}

int nst_range_got(const char *path, uint64_t offset, size_t length, size_t have)
{
    if (have < length) return range_truncated(path, offset, length, offset + have);
    return 0;
}

int nst_read_fd_range(int fd, const char *path, uint64_t offset, size_t length, nst_buf *buf,
                      size_t *len)
{
    int rc;
    size_t have = 0;

    *len = 0;
    if ((rc = nst_buf_reserve(buf, length)) < 0) return rc;
    while (have < length) {
        ssize_t n = pread(fd, buf->data + have, length - have, (off_t)(offset + have));
        if (n < 0) {
            if (errno == EINTR) continue;
            return nst_error(NOSTALL_E_IO, "read: %s: read at offset %llu: %s", NST_MSG_PATH(path),
                             (unsigned long long)(offset + have), strerror(errno));
        }
        if (n == 0) break; /* the file ended early (it shrank since fstat) */
        have += (size_t)n;
    }
    if ((rc = nst_range_got(path, offset, length, have)) < 0) return rc;
    *len = have;
    return 0;
}

int nst_read_check(const char *path, size_t have, uint64_t max_bytes)
{
    if (have > max_bytes)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE, "read: %s: more than max_file_bytes=%llu bytes",
                         NST_MSG_PATH(path), (unsigned long long)max_bytes);
    if (have == 0) return nst_error(NOSTALL_E_EMPTY, "read: %s: empty file", NST_MSG_PATH(path));
    return 0;
}

int nst_read_fd(int fd, const char *path, size_t size, uint64_t max_bytes, nst_buf *buf, size_t *len)
{
    int rc;
    size_t have = 0;

    *len = 0;
    /* One spare byte lets the loop see EOF without a second buffer growth. */
    if ((rc = nst_buf_reserve(buf, size + 1)) < 0) return rc;
    for (;;) {
        if (have == buf->cap) {
            if (have >= max_bytes + 1) break;
            size_t next = have * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : have * 2;
            nst_buf tmp = {0};
            if ((rc = nst_buf_reserve(&tmp, next)) < 0) return rc;
            memcpy(tmp.data, buf->data, have);
            nst_buf_free(buf);
            *buf = tmp;
        }
        ssize_t n = pread(fd, buf->data + have, buf->cap - have, (off_t)have);
        if (n < 0) {
            if (errno == EINTR) continue;
            return nst_error(NOSTALL_E_IO, "read: %s: read at offset %zu: %s", NST_MSG_PATH(path),
                             have, strerror(errno));
        }
        if (n == 0) break;
        have += (size_t)n;
    }
    if ((rc = nst_read_check(path, have, max_bytes)) < 0) return rc;
    *len = have;
    return 0;
}

int nst_read_file(const char *path, uint64_t max_bytes, int flags, nst_buf *buf, size_t *len)
{
    int fd, rc;
    size_t size;

    *len = 0;
    if ((rc = nst_open_item(path, max_bytes, &fd, &size)) < 0) return rc;
    rc = nst_read_fd(fd, path, size, max_bytes, buf, len);
    if (rc == 0 && (flags & NST_READ_DROP_CACHE)) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}

int nst_read_range(const char *path, uint64_t offset, uint64_t length, uint64_t max_bytes,
                   int flags, nst_buf *buf, size_t *len)
{
    int fd, rc;
    size_t size;

    *len = 0;
    if (length == 0 && offset == 0) return nst_read_file(path, max_bytes, flags, buf, len);
    if ((rc = nst_open_range(path, offset, length, max_bytes, &fd, &size)) < 0) return rc;
    rc = nst_read_fd_range(fd, path, offset, size, buf, len);
    if (rc == 0 && (flags & NST_READ_DROP_CACHE))
        posix_fadvise(fd, (off_t)offset, (off_t)length, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}
