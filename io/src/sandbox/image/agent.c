/*
 * chorus-agent: runs a live sandbox's commands for its node over one long-lived exec, so a
 * command costs a fork and an exec inside the sandbox instead of three Engine calls (create,
 * start and inspect an exec). The node starts it once per live sandbox, as the commands' user,
 * and speaks to it on its stdin and stdout in frames (little-endian):
 *
 *   u32 len, u8 type, u32 id, payload (len counts type, id and payload)
 *
 * From the node:
 *   1 RUN    u32 argc, argc x (u32 n, n bytes), u32 envc, envc x (u32 n, "K=V"),
 *            u32 n, cwd (n bytes), u8 stdin (1: the command reads STDIN frames, else /dev/null)
 *   2 STDIN  bytes for the command's stdin; an empty one closes it
 *   3 KILL   u32 signal, sent to the command's process group
 * To the node:
 *   0 HELLO  u32 version (id 0), once at start
 *   1 STARTED u32 pid
 *   2 OUT    u8 stream (1 stdout, 2 stderr), bytes
 *   3 EXIT   i32 code (128 + signal when killed), u8 killed by a signal
 *   4 FAIL   u8 stage (1 chdir, 3 no room), u32 errno: the command did not start
 *   5 TAKEN  u32 n: n more bytes of the command's STDIN frames were written to it (or dropped
 *            with its closed stdin). The node keeps at most a window of bytes sent and not yet
 *            taken, so a command that reads slowly holds back the upload at the node instead
 *            of filling this agent's memory up to MAX_STDIN (which then closes its stdin).
 *
 * Two commands are the agent's own, run without a process of their own (a fork and an exec of
 * `cat` or `install` cost a file call more than the bytes do): argv
 *   ["chorus-agent:read", PATH, LIMIT]  PATH's bytes as stdout, at most LIMIT (decimal) of them;
 *                                       a path that is not a regular file is refused (exit 1)
 *   ["chorus-agent:write", MODE, PATH]  stdin written to PATH (made with its folders, MODE
 *                                       octal whatever the umask), as `install -D -T -m` does
 * each ending with EXIT 0, or with the reason on stderr and EXIT 1, as the commands would; paths
 * are the sandbox's own, as any command's. They get no STARTED and cannot be signalled.
 *
 * A command that cannot be executed ends as a shell's would: its reason on stderr and exit code
 * 127 (not found) or 126. A command's result is sent once it exited and its pipes were read to
 * the end of what it wrote; what it left running in the background may hold the pipes further,
 * and is read and discarded (bounded: the oldest such pipes are closed past MAX_SLOTS), so it
 * never stops on a full pipe nor dies of SIGPIPE while the node waits for nothing.
 *
 * Nothing here is a security boundary: the agent has the commands' user and privileges, and a
 * command may kill it (the node then starts another, or runs commands through the Engine).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION 3
#define MAX_FRAME (4u << 20)
#define MAX_SLOTS 128
#define MAX_RUNNING 64
#define CHUNK 65536
#define MAX_STDIN (64u << 20)

enum { IN_RUN = 1, IN_STDIN = 2, IN_KILL = 3 };
enum { OUT_HELLO = 0, OUT_STARTED = 1, OUT_OUT = 2, OUT_EXIT = 3, OUT_FAIL = 4, OUT_TAKEN = 5 };

struct slot {
    int used;
    uint32_t id;
    pid_t pid;
    int out, err, in;     /* -1 when closed */
    int exited, status;   /* waitpid's */
    int done;             /* EXIT sent: an orphan while its pipes are open */
    unsigned long order;  /* when it became an orphan (oldest closed first) */
    char *pending;        /* stdin not yet written */
    size_t pending_len, pending_off;
    int stdin_eof;
    int builtin;          /* a chorus-agent:write: `in` is the file, not a pipe */
    char *what;           /* its path, for its error */
};

static struct slot slots[MAX_SLOTS];
static unsigned long orphan_clock;
static char chunk[CHUNK];

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void write_all(const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(0); /* the node is gone */
        p += w; n -= (size_t)w;
    }
}

static void send_frame(uint8_t type, uint32_t id, const void *a, size_t an, const void *b,
                       size_t bn) {
    unsigned char head[9];
    put32(head, (uint32_t)(1 + 4 + an + bn));
    head[4] = type;
    put32(head + 5, id);
    write_all(head, 9);
    if (an) write_all(a, an);
    if (bn) write_all(b, bn);
}

static void send_out(uint32_t id, uint8_t stream, const char *data, size_t n) {
    send_frame(OUT_OUT, id, &stream, 1, data, n);
}

/* Says that n stdin bytes of command id left the agent's hands (see TAKEN). */
static void taken(uint32_t id, size_t n) {
    if (n == 0) return;
    unsigned char p[4];
    put32(p, (uint32_t)n);
    send_frame(OUT_TAKEN, id, p, 4, NULL, 0);
}

/* Drops what stdin still held (its pipe closed): taken too, so the node sends the rest. */
static void drop_pending(struct slot *s) {
    taken(s->id, s->pending_len - s->pending_off);
    s->pending_off = s->pending_len = 0;
}

static struct slot *find(uint32_t id) {
    for (int i = 0; i < MAX_SLOTS; i++)
        if (slots[i].used && !slots[i].done && slots[i].id == id) return &slots[i];
    return NULL;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void free_slot(struct slot *s) {
    close_fd(&s->out);
    close_fd(&s->err);
    close_fd(&s->in);
    free(s->pending);
    free(s->what);
    memset(s, 0, sizeof *s);
    s->out = s->err = s->in = -1;
}

/* A free slot, closing the oldest orphan's pipes when none is free. */
static struct slot *take_slot(void) {
    int running = 0;
    struct slot *oldest = NULL;
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (!slots[i].used) continue;
        if (!slots[i].done) running++;
        else if (!oldest || slots[i].order < oldest->order) oldest = &slots[i];
    }
    if (running >= MAX_RUNNING) return NULL;
    for (int i = 0; i < MAX_SLOTS; i++)
        if (!slots[i].used) return &slots[i];
    if (oldest) { free_slot(oldest); return oldest; }
    return NULL;
}

/* Reads what one pipe holds now; returns 0 at its end. Forwards unless the slot is done. */
static int pump(struct slot *s, int *fd, uint8_t stream) {
    for (;;) {
        ssize_t n = read(*fd, chunk, sizeof chunk);
        if (n > 0) {
            if (!s->done) send_out(s->id, stream, chunk, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 1;
        close_fd(fd);
        return 0;
    }
}

static void fail(uint32_t id, uint8_t stage, int err) {
    unsigned char p[5];
    p[0] = stage;
    put32(p + 1, (uint32_t)err);
    send_frame(OUT_FAIL, id, p, 5, NULL, 0);
}

/* Parses a u32-length-prefixed string list at *p (bounded by end) into a NULL-ended array. */
static char **strings(const unsigned char **p, const unsigned char *end) {
    if (end - *p < 4) return NULL;
    uint32_t n = get32(*p);
    *p += 4;
    if (n > 65536) return NULL;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (end - *p < 4) goto bad;
        uint32_t len = get32(*p);
        *p += 4;
        if ((size_t)(end - *p) < len) goto bad;
        v[i] = malloc((size_t)len + 1);
        if (!v[i]) goto bad;
        memcpy(v[i], *p, len);
        v[i][len] = 0;
        *p += len;
    }
    return v;
bad:
    for (uint32_t i = 0; i < n; i++) free(v[i]);
    free(v);
    return NULL;
}

static void free_strings(char **v) {
    if (!v) return;
    for (char **s = v; *s; s++) free(*s);
    free(v);
}

/* The command's environment: the request's, then the agent's own for names it does not set. */
static char **environment(char **req) {
    extern char **environ;
    size_t n = 0, m = 0;
    while (req[n]) n++;
    while (environ[m]) m++;
    char **all = calloc(n + m + 1, sizeof *all);
    if (!all) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) all[k++] = req[i];
    for (size_t j = 0; j < m; j++) {
        const char *eq = strchr(environ[j], '=');
        size_t key = eq ? (size_t)(eq - environ[j]) + 1 : strlen(environ[j]);
        int set = 0;
        for (size_t i = 0; i < n && !set; i++)
            set = strncmp(req[i], environ[j], key) == 0;
        if (!set) all[k++] = environ[j];
    }
    return all;
}

/* The end of a command of the agent's own: its reason on stderr (none when it succeeded). */
static void builtin_end(uint32_t id, const char *what, const char *path, int err) {
    if (err) {
        char msg[512];
        int n = snprintf(msg, sizeof msg, "chorus-agent: %s %s: %s\n", what, path,
                         strerror(err));
        if (n > 0) send_out(id, 2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    }
    unsigned char p[5] = {0};
    put32(p, err ? 1u : 0u);
    send_frame(OUT_EXIT, id, p, 5, NULL, 0);
}

/* chorus-agent:read PATH LIMIT: a regular file's bytes, at most LIMIT of them. */
static void builtin_read(uint32_t id, char **argv) {
    if (!argv[1] || !argv[2]) { builtin_end(id, "reading", "", EINVAL); return; }
    unsigned long long limit = strtoull(argv[2], NULL, 10);
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) { builtin_end(id, "reading", argv[1], errno); return; }
    struct stat st;
    int bad = fstat(fd, &st) != 0 ? errno : 0;
    if (bad || !S_ISREG(st.st_mode)) {
        int err = bad ? bad : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        close(fd);
        builtin_end(id, "reading", argv[1], err);
        return;
    }
    unsigned long long sent = 0;
    while (sent < limit) {
        size_t want = limit - sent < CHUNK ? (size_t)(limit - sent) : CHUNK;
        ssize_t n = read(fd, chunk, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { int err = errno; close(fd); builtin_end(id, "reading", argv[1], err); return; }
        if (n == 0) break;
        send_out(id, 1, chunk, (size_t)n);
        sent += (unsigned long long)n;
    }
    close(fd);
    builtin_end(id, "reading", argv[1], 0);
}

/* Makes the folders above `path` (0755 before the umask), as `install -D` does. */
static int make_parents(const char *path) {
    char *copy = strdup(path);
    if (!copy) return ENOMEM;
    for (char *c = copy + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(copy, 0755) != 0 && errno != EEXIST) {
            int err = errno;
            free(copy);
            return err;
        }
        *c = '/';
    }
    free(copy);
    return 0;
}

/* chorus-agent:write MODE PATH: opens PATH for the stdin frames that follow (written by
 * `feed`, ended by `write_done`). Returns the slot, or NULL after answering the failure. */
static struct slot *builtin_write(uint32_t id, char **argv) {
    if (!argv[1] || !argv[2]) { builtin_end(id, "writing", "", EINVAL); return NULL; }
    mode_t mode = (mode_t)strtoul(argv[1], NULL, 8) & 07777;
    const char *path = argv[2];
    int err = make_parents(path);
    if (err) { builtin_end(id, "writing", path, err); return NULL; }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) { builtin_end(id, "writing", path, errno); return NULL; }
    if (fchmod(fd, mode) != 0) {
        err = errno;
        close(fd);
        builtin_end(id, "writing", path, err);
        return NULL;
    }
    struct slot *s = take_slot();
    char *what = strdup(path);
    if (!s || !what) {
        close(fd);
        free(what);
        builtin_end(id, "writing", path, EAGAIN);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->used = 1;
    s->id = id;
    s->out = s->err = -1;
    s->in = fd;
    s->builtin = 1;
    s->what = what;
    return s;
}

/* A chorus-agent:write whose file is closed: its end (`err` 0: written whole). */
static void write_done(struct slot *s, int err) {
    builtin_end(s->id, "writing", s->what, err);
    s->done = 1;
    free_slot(s);
}

static void run(uint32_t id, const unsigned char *p, const unsigned char *end, sigset_t *old) {
    char **argv = strings(&p, end);
    char **env = argv ? strings(&p, end) : NULL;
    char *cwd = NULL;
    int want_stdin = 0;
    if (env && end - p >= 4) {
        uint32_t n = get32(p);
        p += 4;
        if ((size_t)(end - p) >= (size_t)n + 1) {
            cwd = strndup((const char *)p, n);
            want_stdin = p[n] == 1;
        }
    }
    if (argv && argv[0] && cwd && strcmp(argv[0], "chorus-agent:read") == 0) {
        builtin_read(id, argv);
        free_strings(argv);
        free_strings(env);
        free(cwd);
        return;
    }
    if (argv && argv[0] && cwd && strcmp(argv[0], "chorus-agent:write") == 0) {
        builtin_write(id, argv);
        free_strings(argv);
        free_strings(env);
        free(cwd);
        return;
    }
    struct slot *s = (argv && argv[0] && cwd) ? take_slot() : NULL;
    int o[2] = {-1, -1}, e[2] = {-1, -1}, i[2] = {-1, -1}, r[2] = {-1, -1};
    char **all = env ? environment(env) : NULL;
    if (!s || !all || pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC) || pipe2(r, O_CLOEXEC) ||
        (want_stdin && pipe2(i, O_CLOEXEC))) {
        fail(id, 3, s ? errno : EAGAIN);
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fail(id, 3, errno);
        goto out;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int null = want_stdin ? i[0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
        dup2(null, 0);
        dup2(o[1], 1);
        dup2(e[1], 2);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, old, NULL);
        if (chdir(cwd) != 0) {
            unsigned char why[5] = {1};
            put32(why + 1, (uint32_t)errno);
            (void)!write(r[1], why, 5);
            _exit(126);
        }
        extern char **environ;
        environ = all;
        execvp(argv[0], argv);
        unsigned char why[5] = {2};
        put32(why + 1, (uint32_t)errno);
        (void)!write(r[1], why, 5);
        _exit(errno == ENOENT ? 127 : 126);
    }
    setpgid(pid, pid); /* either side may win the race; both set the same group */
    close_fd(&o[1]);
    close_fd(&e[1]);
    close_fd(&r[1]);
    close_fd(&i[0]);
    unsigned char why[5];
    ssize_t got;
    do got = read(r[0], why, 5); while (got < 0 && errno == EINTR);
    close_fd(&r[0]);
    if (got == 5 && why[0] == 1) {
        /* Not started: reaped by the SIGCHLD handling, which finds no slot for it. */
        fail(id, 1, (int)get32(why + 1));
        goto out;
    }
    memset(s, 0, sizeof *s);
    s->used = 1;
    s->id = id;
    s->pid = pid;
    s->out = o[0];
    s->err = e[0];
    s->in = i[1];
    o[0] = e[0] = i[1] = -1; /* the slot's now */
    fcntl(s->out, F_SETFL, O_NONBLOCK);
    fcntl(s->err, F_SETFL, O_NONBLOCK);
    if (s->in >= 0) fcntl(s->in, F_SETFL, O_NONBLOCK);
    unsigned char pidbuf[4];
    put32(pidbuf, (uint32_t)pid);
    send_frame(OUT_STARTED, id, pidbuf, 4, NULL, 0);
    if (got == 5 && why[0] == 2) {
        int err = (int)get32(why + 1);
        char msg[512];
        int n = snprintf(msg, sizeof msg, "chorus: cannot run \"%s\": %s\n", argv[0],
                         strerror(err));
        if (n > 0) send_out(id, 2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    }
out:
    /* Whatever was opened and not handed to a slot (a pipe2 or fork that failed midway). */
    for (int k = 0; k < 2; k++) {
        close_fd(&o[k]);
        close_fd(&e[k]);
        close_fd(&i[k]);
        close_fd(&r[k]);
    }
    free(all);
    free_strings(argv);
    free_strings(env);
    free(cwd);
}

static void stdin_data(struct slot *s, const unsigned char *p, size_t n) {
    if (s->in < 0) { taken(s->id, n); return; }
    if (n == 0) { s->stdin_eof = 1; return; }
    if (s->pending_len - s->pending_off + n > MAX_STDIN) {
        if (s->builtin) { write_done(s, EFBIG); return; }
        close_fd(&s->in);
        drop_pending(s);
        taken(s->id, n);
        return;
    }
    if (s->pending_off > 0) {
        memmove(s->pending, s->pending + s->pending_off, s->pending_len - s->pending_off);
        s->pending_len -= s->pending_off;
        s->pending_off = 0;
    }
    char *grown = realloc(s->pending, s->pending_len + n);
    if (!grown) {
        if (s->builtin) { write_done(s, ENOMEM); return; }
        close_fd(&s->in);
        drop_pending(s);
        taken(s->id, n);
        return;
    }
    s->pending = grown;
    memcpy(s->pending + s->pending_len, p, n);
    s->pending_len += n;
}

static void feed(struct slot *s) {
    size_t wrote = 0;
    while (s->in >= 0 && s->pending_off < s->pending_len) {
        ssize_t w = write(s->in, s->pending + s->pending_off, s->pending_len - s->pending_off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) break;
        if (w <= 0) {
            /* A file that takes no more (a full tmpfs): the write fails as install's would. */
            if (s->builtin) { write_done(s, w < 0 ? errno : ENOSPC); return; }
            close_fd(&s->in);
            taken(s->id, wrote);
            drop_pending(s);
            return;
        }
        s->pending_off += (size_t)w;
        wrote += (size_t)w;
    }
    taken(s->id, wrote);
    if (s->pending_off < s->pending_len) return;
    if (s->in >= 0 && s->stdin_eof) {
        if (s->builtin) {
            int err = close(s->in) == 0 ? 0 : errno;
            s->in = -1;
            write_done(s, err);
            return;
        }
        close_fd(&s->in);
    }
}

static void handle(const unsigned char *f, uint32_t len, sigset_t *old) {
    uint8_t type = f[0];
    uint32_t id = get32(f + 1);
    const unsigned char *p = f + 5, *end = f + len;
    struct slot *s = find(id);
    if (type == IN_RUN) {
        if (s) fail(id, 3, EEXIST);
        else run(id, p, end, old);
    } else if (type == IN_STDIN && s) {
        stdin_data(s, p, (size_t)(end - p));
        feed(s);
    } else if (type == IN_KILL && s && s->builtin) {
        /* Not a process: the write stops where it is (a timed-out write). */
        write_done(s, EINTR);
    } else if (type == IN_KILL && s && end - p >= 4 && !s->exited) {
        int sig = (int)get32(p);
        if (kill(-s->pid, sig) != 0) kill(s->pid, sig);
    }
}

/* After its exit, a command's result: what its pipes hold now, then EXIT. */
static void finish(struct slot *s) {
    if (s->out >= 0) pump(s, &s->out, 1);
    if (s->err >= 0) pump(s, &s->err, 2);
    unsigned char p[5];
    int code = WIFEXITED(s->status) ? WEXITSTATUS(s->status)
               : WIFSIGNALED(s->status) ? 128 + WTERMSIG(s->status) : 255;
    put32(p, (uint32_t)code);
    p[4] = WIFSIGNALED(s->status) ? 1 : 0;
    send_frame(OUT_EXIT, s->id, p, 5, NULL, 0);
    s->done = 1;
    s->order = ++orphan_clock;
    close_fd(&s->in);
    if (s->out < 0 && s->err < 0) free_slot(s);
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < MAX_SLOTS; i++) {
            if (slots[i].used && !slots[i].done && slots[i].pid == pid) {
                slots[i].exited = 1;
                slots[i].status = status;
                finish(&slots[i]);
            }
        }
    }
}

int main(void) {
    for (int i = 0; i < MAX_SLOTS; i++) slots[i].out = slots[i].err = slots[i].in = -1;
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) return 1;
    fcntl(0, F_SETFD, FD_CLOEXEC);
    fcntl(1, F_SETFD, FD_CLOEXEC);
    unsigned char v[4];
    put32(v, VERSION);
    send_frame(OUT_HELLO, 0, v, 4, NULL, 0);

    size_t cap = 1 << 16, have = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) return 1;
    struct pollfd pfd[2 + 3 * MAX_SLOTS];
    struct { struct slot *s; int which; } who[2 + 3 * MAX_SLOTS];
    for (;;) {
        int n = 0;
        pfd[n] = (struct pollfd){.fd = 0, .events = POLLIN};
        n++;
        pfd[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
        n++;
        for (int i = 0; i < MAX_SLOTS; i++) {
            struct slot *s = &slots[i];
            if (!s->used) continue;
            int fds[3] = {s->out, s->err, s->in};
            for (int k = 0; k < 3; k++) {
                if (fds[k] < 0) continue;
                if (k == 2 && s->pending_off >= s->pending_len) continue;
                pfd[n] = (struct pollfd){.fd = fds[k], .events = k == 2 ? POLLOUT : POLLIN};
                who[n].s = s;
                who[n].which = k;
                n++;
            }
        }
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {}
            reap();
        }
        for (int k = 2; k < n; k++) {
            struct slot *s = who[k].s;
            if (!pfd[k].revents || !s->used) continue;
            if (who[k].which == 2) feed(s);
            else if (who[k].which == 0 && s->out == pfd[k].fd) pump(s, &s->out, 1);
            else if (who[k].which == 1 && s->err == pfd[k].fd) pump(s, &s->err, 2);
            if (s->done && s->out < 0 && s->err < 0) free_slot(s);
        }
        if (pfd[0].revents) {
            if (have == cap) {
                if (cap >= MAX_FRAME + 4) return 1;
                cap *= 2;
                unsigned char *grown = realloc(buf, cap);
                if (!grown) return 1;
                buf = grown;
            }
            ssize_t got = read(0, buf + have, cap - have);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return 0; /* the node is gone; the sandbox goes with it */
            have += (size_t)got;
            size_t at = 0;
            while (have - at >= 4) {
                uint32_t len = get32(buf + at);
                if (len < 5 || len > MAX_FRAME) return 1;
                if (have - at - 4 < len) {
                    if ((size_t)len + 4 > cap) {
                        unsigned char *grown = realloc(buf, (size_t)len + 4);
                        if (!grown) return 1;
                        buf = grown;
                        cap = (size_t)len + 4;
                    }
                    break;
                }
                handle(buf + at + 4, len, &old);
                at += 4 + len;
            }
            memmove(buf, buf + at, have - at);
            have -= at;
        }
    }
}
