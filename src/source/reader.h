/*
 * reader.h — fetch: read a whole item from storage into a worker's buffer.
 *
 * nst_read_file opens the path, checks its size against the limit before
 * reading, and reads with pread() until EOF, handling short reads and EINTR.
 * Only regular files are read (opened non-blocking, so a FIFO cannot stall a
 * worker). Errors (each message names the path): E_NOT_FOUND, E_PERMISSION,
 * E_IO (including "is a directory" and "not a regular file"), E_EMPTY,
 * E_FILE_TOO_LARGE. A read that blocks in the kernel (a hung network
 * filesystem) cannot be interrupted: stop/free wait for it.
 * Called by worker threads; touches only its arguments.
 */
#ifndef NST_SOURCE_READER_H
#define NST_SOURCE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* NST_READ_DROP_CACHE: after reading, tell the kernel to drop the file's
 * pages (posix_fadvise DONTNEED), so bytes cached by nostall are not held
 * twice and every storage read is a real one. */
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

#endif
