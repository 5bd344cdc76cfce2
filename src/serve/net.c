/*
 * net.c — sockets for the prep-server protocol (proto.h): whole reads and
 * writes that end at a deadline or when a stop flag is set (each tries the
 * socket first and polls, in steps of at most 100 ms, only when it would
 * block, so every wait has a shutdown exit and a steady stream costs no
 * poll per message), one frame read with its length bounded before the
 * payload arrives, host:port parsing, connect with a deadline, listen. No
 * state of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "serve/proto.h"

/* Wait for `events` on fd: 1 ready, 0 not yet (call again), -1 with why. */
static int wait_fd(int fd, short events, uint64_t deadline_ns, const atomic_int *stop, char *why,
                   size_t whyn)
{
    if (stop && atomic_load(stop)) {
        snprintf(why, whyn, "stopped");
        return -1;
    }
    int ms = 100;
    if (deadline_ns) {
        uint64_t now = nst_now_ns();
        if (now >= deadline_ns) {
            snprintf(why, whyn, "no answer within the deadline");
            return -1;
        }
        if (deadline_ns - now < 100000000ull) ms = (int)((deadline_ns - now) / 1000000) + 1;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int k = poll(&p, 1, ms);
    if (k < 0 && errno != EINTR) {
        snprintf(why, whyn, "poll: %s", strerror(errno));
        return -1;
    }
    return k > 0;
}

int nst_net_read(int fd, void *buf, size_t n, uint64_t deadline_ns, const atomic_int *stop,
                 char *why, size_t whyn)
{
    uint8_t *p = buf;
    while (n) { /* receive first; poll only when it would block */
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            snprintf(why, whyn, "connection closed by the peer");
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(why, whyn, "receive: %s", strerror(errno));
            return -1;
        }
        if (wait_fd(fd, POLLIN, deadline_ns, stop, why, whyn) < 0) return -1;
    }
    return 0;
}

int nst_net_write(int fd, const void *buf, size_t n, uint64_t deadline_ns, const atomic_int *stop,
                  char *why, size_t whyn)
{
    const uint8_t *p = buf;
    while (n) { /* send first; poll only when it would block */
        ssize_t k = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k >= 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(why, whyn, "send: %s", strerror(errno));
            return -1;
        }
        if (wait_fd(fd, POLLOUT, deadline_ns, stop, why, whyn) < 0) return -1;
    }
    return 0;
}

int nst_net_read_frame(int fd, uint8_t *buf, size_t cap, uint32_t max_payload, nst_frame *f,
                       uint64_t deadline_ns, const atomic_int *stop, char *why, size_t whyn)
{
    size_t need = 0;
    if (cap < 5 + (size_t)max_payload) {
        snprintf(why, whyn, "frame buffer too small");
        return -1;
    }
    if (nst_net_read(fd, buf, 5, deadline_ns, stop, why, whyn) < 0) return -1;
    int rc = nst_proto_frame(buf, 5, max_payload, f, &need, why, whyn);
    if (rc < 0) return -1;
    if (rc == 1 && nst_net_read(fd, buf + 5, need - 5, deadline_ns, stop, why, whyn) < 0) return -1;
    return nst_proto_frame(buf, need > 5 ? need : 5, max_payload, f, &need, why, whyn) == 0 ? 0 : -1;
}

int nst_net_split(const char *hp, char *host, size_t cap, uint16_t *port)
{
    const char *colon;
    size_t hl;
    if (hp[0] == '[') {
        const char *end = strchr(hp, ']');
        if (!end || end[1] != ':') return -1;
        hl = (size_t)(end - hp - 1);
        hp++;
        colon = end + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon) return -1;
        hl = (size_t)(colon - hp);
    }
    if (hl == 0 || hl >= cap) return -1;
    char *e;
    errno = 0;
    unsigned long v = strtoul(colon + 1, &e, 10);
    if (errno || *e || e == colon + 1 || v > 65535) return -1;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    *port = (uint16_t)v;
    return 0;
}

static int resolve(const char *host, uint16_t port, int passive, struct addrinfo **res, char *why,
                   size_t whyn)
{
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    int g = getaddrinfo(host, ps, &hints, res);
    if (g != 0) {
        snprintf(why, whyn, "%s: %s", host, gai_strerror(g));
        return -1;
    }
    return 0;
}

int nst_net_connect(const char *host, uint16_t port, uint64_t deadline_ns, const atomic_int *stop,
                    char *why, size_t whyn)
{
    struct addrinfo *res = NULL;
    if (resolve(host, port, 0, &res, why, whyn) < 0) return -1;
    int fd = -1;
    snprintf(why, whyn, "no address");
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        while (rc < 0 && errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline_ns, stop, why, whyn);
            if (w < 0) break;
            if (w == 0) continue;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
            rc = err ? -1 : 0;
            errno = err;
            if (err) snprintf(why, whyn, "connect: %s", strerror(err));
            break;
        }
        if (rc == 0) break;
        if (errno && errno != EINPROGRESS) snprintf(why, whyn, "connect: %s", strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

int nst_net_listen(const char *host, uint16_t port, uint16_t *bound, char *why, size_t whyn)
{
    struct addrinfo *res = NULL;
    if (resolve(host, port, 1, &res, why, whyn) < 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            snprintf(why, whyn, "%s:%u: %s", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}
