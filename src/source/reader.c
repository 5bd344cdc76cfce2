/*
 * reader.c — the plain pread() reader (see reader.h).
 *
 * The size is taken from fstat() and checked against the limit before any
 * buffer is sized; the read loop then continues until EOF in case the file
 * grew or fstat() lied (procfs, network filesystems), never past the limit.
 * Called by worker threads; touches only its arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "source/reader.h"

static int open_error(const char *path, int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return nst_error(NOSTALL_E_NOT_FOUND, "read: %s: no such file", path);
    case EACCES:
    case EPERM:
        return nst_error(NOSTALL_E_PERMISSION, "read: %s: permission denied", path);
    default:
        return nst_error(NOSTALL_E_IO, "read: %s: %s", path, strerror(err));
    }
}

int nst_read_file(const char *path, uint64_t max_bytes, int flags, nst_buf *buf, size_t *len)
{
    struct stat st;
    int fd, rc = 0;
    size_t have = 0;

    *len = 0;
    do {
        /* O_NONBLOCK: opening a FIFO must not block the worker; anything
         * that is not a regular file is rejected below. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return open_error(path, errno);
    if (fstat(fd, &st) != 0) {
        rc = nst_error(NOSTALL_E_IO, "read: %s: fstat: %s", path, strerror(errno));
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = nst_error(NOSTALL_E_IO, "read: %s: is a directory", path);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        /* FIFOs, sockets and devices could block or never end. */
        rc = nst_error(NOSTALL_E_IO, "read: %s: not a regular file", path);
        goto out;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
        rc = nst_error(NOSTALL_E_FILE_TOO_LARGE, "read: %s: %lld bytes is over max_file_bytes=%llu",
                       path, (long long)st.st_size, (unsigned long long)max_bytes);
        goto out;
    }
    /* One spare byte lets the loop see EOF without a second buffer growth. */
    size_t want = (size_t)st.st_size + 1;
    if ((rc = nst_buf_reserve(buf, want)) < 0) goto out;
    for (;;) {
        if (have == buf->cap) {
            if (have >= max_bytes + 1) break;
            size_t next = have * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : have * 2;
            nst_buf tmp = {0};
            if ((rc = nst_buf_reserve(&tmp, next)) < 0) goto out;
            memcpy(tmp.data, buf->data, have);
            nst_buf_free(buf);
            *buf = tmp;
        }
        ssize_t n = pread(fd, buf->data + have, buf->cap - have, (off_t)have);
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = nst_error(NOSTALL_E_IO, "read: %s: read at offset %zu: %s", path, have,
                           strerror(errno));
            goto out;
        }
        if (n == 0) break;
        have += (size_t)n;
    }
    if (have > max_bytes) {
        rc = nst_error(NOSTALL_E_FILE_TOO_LARGE, "read: %s: more than max_file_bytes=%llu bytes",
                       path, (unsigned long long)max_bytes);
        goto out;
    }
    if (have == 0) {
        rc = nst_error(NOSTALL_E_EMPTY, "read: %s: empty file", path);
        goto out;
    }
    *len = have;
    if (flags & NST_READ_DROP_CACHE) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
out:
    close(fd);
    return rc;
}
