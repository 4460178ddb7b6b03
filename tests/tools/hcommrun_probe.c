/*
 * A rank for the hcommrun tests: one program, several behaviours, chosen by
 * the first argument. Everything it observes goes to files in DIR (one per
 * rank) so the shell driver can check ranks independently of output order.
 *
 *   env DIR              validate the HCOMM_* variables, write DIR/env.RANK
 *   affinity DIR         write the CPU affinity to DIR/aff.RANK ("self" when
 *                        not run under hcommrun)
 *   codes C0 C1 ...      rank r exits with C_r (the last one for the rest)
 *   fail R CODE          rank R exits CODE after 0.2 s; others sleep 30 s
 *   kill R SIG           rank R raises SIG after 0.2 s; others sleep 30 s
 *   sleep SEC            sleep
 *   trap DIR [ignore]    write DIR/pid.RANK; on SIGINT/TERM/HUP write
 *                        DIR/sig.RANK and exit 0 (ignore: keep sleeping)
 *   spawn DIR            start a grandchild (pid in DIR/gc.RANK), sleep 30 s
 *   print N              N lines to stdout and stderr, then a partial line
 *   longline LEN         one line of LEN 'x' to stdout
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static const char *g_dir;
static volatile sig_atomic_t g_ignore;

static void sleep_sec(double sec)
{
    struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Writes text to DIR/name.RANK atomically (rename), so a reader never sees
 * half a file. */
static void write_file(const char *name, const char *text)
{
    char tmp[4200], path[4096];
    if (g_rank >= 0)
        snprintf(path, sizeof(path), "%s/%s.%d", g_dir, name, g_rank);
    else
        snprintf(path, sizeof(path), "%s/%s.self", g_dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0 ||
        rename(tmp, path) != 0) {
        fprintf(stderr, "probe: cannot write %s: %s\n", path, strerror(errno));
        _exit(1);
    }
}

static int env_int(const char *name, long *v)
{
    const char *s = getenv(name);
    char *end;
    if (s == NULL || *s == '\0') return -1;
    *v = strtol(s, &end, 10);
    return *end == '\0' ? 0 : -1;
}

static int do_env(void)
{
    long rank, size, lrank, lsize;
    if (env_int("HCOMM_RANK", &rank) || env_int("HCOMM_SIZE", &size) ||
        env_int("HCOMM_LOCAL_RANK", &lrank) || env_int("HCOMM_LOCAL_SIZE", &lsize)) {
        fprintf(stderr, "probe: HCOMM_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE missing or not integers\n");
        return 1;
    }
    if (size < 1 || rank < 0 || rank >= size || lrank != rank || lsize != size) {
        fprintf(stderr, "probe: inconsistent rank %ld size %ld local %ld/%ld\n", rank, size, lrank,
                lsize);
        return 1;
    }
    const char *bs = getenv("HCOMM_BOOTSTRAP"), *key = getenv("HCOMM_JOB_KEY");
    int port = 0, n = 0;
    if (bs == NULL || sscanf(bs, "tcp://127.0.0.1:%d%n", &port, &n) != 1 || n != (int)strlen(bs) ||
        port < 1 || port > 65535) {
        fprintf(stderr, "probe: bad HCOMM_BOOTSTRAP '%s'\n", bs ? bs : "(unset)");
        return 1;
    }
    if (key == NULL || strlen(key) != 32 || strspn(key, "0123456789abcdef") != 32) {
        fprintf(stderr, "probe: bad HCOMM_JOB_KEY '%s'\n", key ? key : "(unset)");
        return 1;
    }
    const char *extra = getenv("HCR_TEST_VAR");
    char buf[512];
    snprintf(buf, sizeof(buf), "%ld %ld %ld %ld %s %s %s\n", rank, size, lrank, lsize, bs, key,
             extra ? extra : "-");
    write_file("env", buf);
    return 0;
}

static int do_affinity(void)
{
    cpu_set_t set;
    char buf[8192];
    size_t off = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "probe: sched_getaffinity: %s\n", strerror(errno));
        return 1;
    }
    off += (size_t)snprintf(buf, sizeof(buf), "%d", CPU_COUNT(&set));
    for (int c = 0; c < CPU_SETSIZE && off < sizeof(buf) - 16; c++) {
        if (CPU_ISSET(c, &set)) off += (size_t)snprintf(buf + off, sizeof(buf) - off, " %d", c);
    }
    snprintf(buf + off, sizeof(buf) - off, "\n");
    write_file("aff", buf);
    return 0;
}

static void on_signal(int sig)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d\n", sig);
    write_file("sig", buf);
    if (!g_ignore) _exit(0);
}

static int do_trap(int ignore)
{
    struct sigaction sa = {.sa_handler = on_signal};
    char buf[32];
    g_ignore = ignore;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
    write_file("pid", buf);
    sleep_sec(30);
    return 0;
}

static int do_spawn(void)
{
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        sleep_sec(30);
        _exit(0);
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "%d\n", (int)pid);
    write_file("gc", buf);
    sleep_sec(30);
    return 0;
}

static int do_print(int n)
{
    for (int k = 0; k < n; k++) {
        printf("line %d of rank %d\n", k, g_rank);
        fprintf(stderr, "err %d of rank %d\n", k, g_rank);
    }
    printf("tail of rank %d", g_rank);
    fflush(stdout);
    return 0;
}

static int do_longline(long len)
{
    char *s = malloc((size_t)len + 2);
    if (s == NULL) return 1;
    memset(s, 'x', (size_t)len);
    s[len] = '\n';
    fwrite(s, 1, (size_t)len + 1, stdout);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    long v;
    if (env_int("HCOMM_RANK", &v) == 0) g_rank = (int)v;
    if (argc < 2) {
        fprintf(stderr, "probe: missing mode\n");
        return 1;
    }
    const char *mode = argv[1];
    g_dir = argc > 2 ? argv[2] : ".";
    if (strcmp(mode, "env") == 0) return do_env();
    if (strcmp(mode, "affinity") == 0) return do_affinity();
    if (strcmp(mode, "codes") == 0 && argc > 2) {
        int idx = 2 + g_rank;
        return atoi(argv[idx < argc ? idx : argc - 1]);
    }
    if ((strcmp(mode, "fail") == 0 || strcmp(mode, "kill") == 0) && argc > 3) {
        if (g_rank != atoi(argv[2])) {
            sleep_sec(30);
            return 0;
        }
        sleep_sec(0.2);
        if (mode[0] == 'f') return atoi(argv[3]);
        raise(atoi(argv[3]));
        return 1;
    }
    if (strcmp(mode, "sleep") == 0 && argc > 2) {
        sleep_sec(atof(argv[2]));
        return 0;
    }
    if (strcmp(mode, "trap") == 0 && argc > 2)
        return do_trap(argc > 3 && strcmp(argv[3], "ignore") == 0);
    if (strcmp(mode, "spawn") == 0 && argc > 2) return do_spawn();
    if (strcmp(mode, "print") == 0 && argc > 2) return do_print(atoi(argv[2]));
    if (strcmp(mode, "longline") == 0 && argc > 2) return do_longline(atol(argv[2]));
    fprintf(stderr, "probe: unknown mode or missing arguments: %s\n", mode);
    return 1;
}
