/*
 * reader.h — fetch: read an item (a whole file, or a byte range of one)
 * from storage into a worker's buffer.
 * Room: source/ (reading bytes).
 *
 * nst_read_file opens the path, checks its size against the limit before
 * reading, and reads with pread() until EOF, handling short reads and EINTR.
 * nst_read_range reads exactly `length` bytes at `offset` (a token window of
 * a big corpus file, a member of a tar shard): the limit applies to the
 * range, not to the file, and a file that ends before the range does is
 * E_TRUNCATED. Only regular files are read (opened non-blocking, so a FIFO
 * cannot stall a worker; the type is checked with fstat before any read).
 * Errors, each message naming the path (long paths shortened in the middle,
 * see NST_MSG_PATH) and then the reason:
 *   E_NOT_FOUND     no such file; "symlink target missing" (a dangling
 *                   symlink, its target named)
 *   E_PERMISSION    permission denied
 *   E_IO            "is a directory", "is a FIFO (named pipe)", "is a
 *                   socket", "is a character/block device" (never read),
 *                   "path longer than PATH_MAX", a symlink loop, read errors
 *   E_EMPTY         an empty file (whole-file reads)
 *   E_FILE_TOO_LARGE the file (whole-file reads) or the range over max_bytes
 *   E_TRUNCATED     ranges: "bytes 100-199 asked, the file has 150"
 *   E_INVALID       ranges: offset + length past 2^63, or an offset with
 *                   length 0 (which means the whole file)
 * A read that blocks in the kernel (a hung network filesystem) cannot be
 * interrupted: stop/free wait for it.
 * Called by worker threads; touches only its arguments.
 */
#ifndef NST_SOURCE_READER_H
#define NST_SOURCE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* NST_READ_DROP_CACHE: after reading, tell the kernel to drop the file's
 * pages (posix_fadvise DONTNEED; for a range only the range's pages), so
 * bytes cached by nostall are not held twice and every storage read is a
 * real one. */
enum { NST_READ_DROP_CACHE = 1 };

int nst_read_file(const char *path, uint64_t max_bytes, int flags, nst_buf *buf, size_t *len);

/* The steps of nst_read_file, for readers that read asynchronously
 * (fetch.c's io_uring path): open + fstat + the checks above, giving an
 * open descriptor of a regular file of `*size` bytes (<= max_bytes), which
 * the caller closes; then the pread loop; and the checks on what was read
 * (over the limit: E_FILE_TOO_LARGE; nothing: E_EMPTY). */
int nst_open_item(const char *path, uint64_t max_bytes, int *fd, size_t *size);
int nst_read_fd(int fd, const char *path, size_t size, uint64_t max_bytes, nst_buf *buf,
                size_t *len);
int nst_read_check(const char *path, size_t have, uint64_t max_bytes);

/* Read bytes [offset, offset + length) of `path` (length > 0) into buf;
 * *len = length on success. flags as for nst_read_file. */
int nst_read_range(const char *path, uint64_t offset, uint64_t length, uint64_t max_bytes,
                   int flags, nst_buf *buf, size_t *len);
/* Its steps, for asynchronous readers. nst_range_check: the range itself
 * (E_INVALID, E_FILE_TOO_LARGE as above; prefix starts the message, e.g.
 * "read" or "http"). nst_open_range: nst_range_check, then open + fstat +
 * the checks of nst_open_item except the file's size, which must reach
 * offset + length (else E_TRUNCATED); *size = length. nst_read_fd_range:
 * the pread loop for exactly `length` bytes at `offset` (EOF before:
 * E_TRUNCATED, via nst_range_got). nst_range_got: the check on what an
 * asynchronous reader got: `have` < `length` bytes means the file ended at
 * offset + have. */
int nst_range_check(const char *prefix, const char *path, uint64_t offset, uint64_t length,
                    uint64_t max_bytes);
int nst_open_range(const char *path, uint64_t offset, uint64_t length, uint64_t max_bytes, int *fd,
                   size_t *size);
int nst_read_fd_range(int fd, const char *path, uint64_t offset, size_t length, nst_buf *buf,
                      size_t *len);
int nst_range_got(const char *path, uint64_t offset, size_t length, size_t have);

/* A path as it is written into messages: the path itself when shorter than
 * NST_MSG_PATH_MAX bytes, else its first and last bytes around "...", cut
 * at UTF-8 character boundaries, in buf (NST_MSG_PATH_MAX + 1 bytes). So a
 * message naming a path of any length (longer than PATH_MAX even) still
 * fits NST_ERROR_MAX with its reason, which comes after the path. */
#define NST_MSG_PATH_MAX 400
typedef struct nst_msg_path {
    char s[NST_MSG_PATH_MAX + 1];
} nst_msg_path;
const char *nst_msg_path_of(nst_msg_path *buf, const char *path);
/* The same with a buffer that lives until the end of the enclosing block:
 * nst_error(..., "read: %s: ...", NST_MSG_PATH(path)). */
#define NST_MSG_PATH(path) nst_msg_path_of(&(nst_msg_path){{0}}, (path))

#endif
