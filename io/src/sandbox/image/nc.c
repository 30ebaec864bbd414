/* A small netcat for the sandbox image, compiled with the host's gcc when the image is built
 * (hosts have no netcat by default, and the image is made only of what the host has).
 * It covers what the tests and network probes need, with busybox nc's flags:
 *
 *   nc [-w SECS] HOST PORT            connect; copy stdin to the peer and the peer to stdout
 *   nc -l[l] -p PORT [-w SECS] [-e PROG [ARG...]]
 *                                     listen on PORT (IPv4, all addresses); serve a connection
 *                                     with PROG on its stdin/stdout, or copy as above; -ll keeps
 *                                     listening, one child per connection
 *
 * -w bounds the connect and every wait for data. Exit status 0, or 1 on any failure. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "nc: %s: %s\n", what, strerror(errno));
    return 1;
}

static int usage(void) {
    fputs("usage: nc [-w SECS] HOST PORT\n"
          "       nc -l[l] -p PORT [-w SECS] [-e PROG [ARG...]]\n", stderr);
    return 1;
}

/* Copies stdin to the socket and the socket to stdout until the peer closes (or, with a
 * timeout, until nothing arrives for that long). */
static int pump(int sock, int timeout_ms) {
    struct pollfd fds[2] = {{.fd = 0, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
    char buf[16384];
    int stdin_open = 1;
    for (;;) {
        int n = poll(stdin_open ? fds : fds + 1, stdin_open ? 2 : 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail("poll");
        if (n == 0) return 0;
        if (stdin_open && fds[0].revents) {
            ssize_t r = read(0, buf, sizeof buf);
            if (r <= 0) {
                stdin_open = 0;
                shutdown(sock, SHUT_WR);
            } else if (write(sock, buf, (size_t)r) != r) {
                return fail("write");
            }
        }
        if (fds[1].revents) {
            ssize_t r = read(sock, buf, sizeof buf);
            if (r <= 0) return 0;
            if (write(1, buf, (size_t)r) != r) return fail("write");
        }
    }
}

static int connect_to(const char *host, const char *port, int timeout_ms) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    int err = getaddrinfo(host, port, &hints, &res);
    if (err) {
        fprintf(stderr, "nc: %s: %s\n", host, gai_strerror(err));
        return 1;
    }
    int sock = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        sock = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, ai->ai_protocol);
        if (sock < 0) continue;
        if (connect(sock, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = sock, .events = POLLOUT};
            int soerr = 0;
            socklen_t len = sizeof soerr;
            if (poll(&p, 1, timeout_ms) == 1 &&
                getsockopt(sock, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
                break;
            errno = soerr ? soerr : ETIMEDOUT;
        }
        close(sock);
        sock = -1;
    }
    freeaddrinfo(res);
    if (sock < 0) return fail(host);
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);
    return pump(sock, timeout_ms);
}

static int serve(const char *port, int keep, char **prog, int timeout_ms) {
    int sock = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (sock < 0) return fail("socket");
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (bind(sock, (struct sockaddr *)&addr, sizeof addr) < 0) return fail("bind");
    if (listen(sock, 16) < 0) return fail("listen");
    signal(SIGCHLD, SIG_IGN); /* children are reaped by the kernel */
    do {
        int conn = accept(sock, NULL, NULL);
        if (conn < 0) {
            if (errno == EINTR) continue;
            return fail("accept");
        }
        pid_t pid = keep ? fork() : 0;
        if (pid < 0) return fail("fork");
        if (pid > 0) {
            close(conn);
            continue;
        }
        close(sock);
        if (!prog) return pump(conn, timeout_ms);
        dup2(conn, 0);
        dup2(conn, 1);
        if (conn > 1) close(conn);
        execvp(prog[0], prog);
        return fail(prog[0]);
    } while (keep);
    return 0;
}

int main(int argc, char **argv) {
    int listen_level = 0, timeout_ms = -1, i;
    const char *port = NULL;
    char **prog = NULL;
    for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] && !prog; i++) {
        const char *a = argv[i] + 1;
        if (strspn(a, "l") == strlen(a)) {
            listen_level += (int)strlen(a);
        } else if (!strcmp(a, "p") && i + 1 < argc) {
            port = argv[++i];
        } else if (!strcmp(a, "w") && i + 1 < argc) {
            timeout_ms = atoi(argv[++i]) * 1000;
        } else if (!strcmp(a, "e") && i + 1 < argc) {
            prog = argv + i + 1;
        } else {
            return usage();
        }
    }
    if (listen_level) return port && (prog || i == argc) ? serve(port, listen_level > 1, prog, timeout_ms) : usage();
    if (argc - i != 2) return usage();
    return connect_to(argv[i], argv[i + 1], timeout_ms);
}
