/*
 * hcommrun: starts the N ranks of an hcomm job on this host and watches them.
 *
 * Spawn: fork + exec per rank. Each child, before exec, asks for SIGKILL when
 * hcommrun dies (PR_SET_PDEATHSIG, so a killed launcher takes its ranks
 * with it), joins the job's process group (rank 0's pid), sets the HCOMM_*
 * variables, binds its CPUs and restores the signal state hcommrun changed.
 * Whatever fails in the child before or at exec is reported through a
 * close-on-exec pipe: end of file means exec succeeded. Rank 0 is checked
 * before the others are started, so a bad program name costs one fork.
 *
 * The ranks' process group is not hcommrun's: a terminal's ^C reaches only
 * hcommrun, which forwards it exactly once; and killing the group also reaches
 * processes the ranks started. Group kills are sent only while some rank is
 * still unreaped in the group, because only then is the group id certain not
 * to have been reused.
 *
 * Watching: SIGCHLD/SIGINT/SIGTERM/SIGHUP are blocked and read from a
 * signalfd; with --tag-output the ranks' pipes are in the same epoll set; the
 * timeout and the SIGTERM -> SIGKILL escalation are deadlines turned into the
 * epoll_wait timeout. hcommrun sleeps unless something happens, so it takes
 * no CPU from the ranks.
 *
 * Verdict: the first rank that fails (exit status not 0 or 77, or killed by a
 * signal hcommrun did not send) is reported in one line, the others are
 * terminated and its status (128+signal for a signal) becomes hcommrun's.
 * Exit status 77 ("skip") is a verdict only when rank 0 gave it and every
 * other rank exited 0 or 77.
 */
#include "hcommrun.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILL_GRACE_SEC 3.0   /* SIGTERM (or a forwarded signal) -> SIGKILL */
#define REAP_GIVE_UP_SEC 5.0 /* after SIGKILL: a rank stuck in the kernel */
#define DRAIN_GRACE_SEC 1.0  /* all ranks gone, a grandchild still holds a pipe */
#define EXEC_CHECK_BATCH 256 /* exec report pipes open at once */
#define REPORT_WAIT_SEC 2.0  /* ranks' answers to a hang report request */
#define REPORT_MAX 8192
#define EXIT_USAGE 2
#define EXIT_INTERNAL 1
#define EXIT_TIMEOUT 124
#define EXIT_SKIP 77

/* Variables hcommrun owns; --env may not set them. */
static const char *const launcher_vars[] = {"HCOMM_RANK",       "HCOMM_SIZE",
                                            "HCOMM_LOCAL_RANK", "HCOMM_LOCAL_SIZE",
                                            "HCOMM_BOOTSTRAP",  "HCOMM_JOB_KEY",
                                            "HCOMM_CONTROL_FD"};

typedef struct {
    int nranks;
    hc_run_bind_mode_t bind;
    int tag_output;
    int verbose;
    double timeout; /* seconds, 0: none */
    const char *timeout_str;
    char **envs; /* "VAR=VAL" */
    int nenvs;
    char **argv; /* prog and its arguments, NULL terminated */
} hc_run_opts_t;

typedef struct {
    pid_t pid;
    int alive;   /* forked and not yet reaped */
    int exec_fd; /* read end of the exec report pipe, -1 once checked */
    int ctl_fd;  /* our end of the rank's control socket (hang reports), -1 */
    int hcomm;   /* the rank said "hcomm-up" on it: an hcomm process that answers */
} hc_run_rank_t;

/* What the child writes to the exec report pipe when something fails. */
typedef struct {
    int stage;
    int err;
} hc_run_child_report_t;

enum { STAGE_SETUP, STAGE_AFFINITY, STAGE_EXEC };

typedef enum { TERM_NONE, TERM_SENT, KILL_SENT } hc_run_term_t;

typedef struct {
    hc_run_opts_t opts;
    hc_run_bind_plan_t plan;
    hc_run_rank_t *ranks;
    int nspawned, nalive;
    pid_t pgid;
    char bootstrap[64];
    char job_key[33];

    /* the state the children get back before exec */
    sigset_t orig_mask;
    struct sigaction orig_sigpipe;
    struct rlimit orig_nofile;
    int stdin_null; /* rank 0 gets /dev/null too (stdin is a terminal) */

    int sfd, epfd;
    hc_run_tag_stream_t *streams; /* 2 per rank with --tag-output */
    int nstreams_open;

    /* verdict */
    int failed, fail_code;
    int timed_out;
    int got_signal; /* the signal that ended the job, 0 */
    int nsignals;   /* SIGINT/TERM/HUP received; the second one kills */
    int rank0_skipped;
    int skip_rank; /* a rank other than 0 that exited 77, -1 */
    hc_run_term_t term;
    double term_deadline;
    double start;
} hc_run_job_t;

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hcommrun -n N [options] prog [args...]\n"
            "Starts N ranks of prog on this host as one hcomm job.\n"
            "\n"
            "  -n N, --np N        number of ranks, 1..%d (required)\n"
            "  --bind core|numa|none\n"
            "                      core (default): each rank on one CPU, filling a NUMA\n"
            "                      node first; numa: rank i on all CPUs of NUMA node\n"
            "                      i mod nodes; none: no binding\n"
            "  --tag-output        prefix every output line with \"[rank] \"\n"
            "  --timeout SEC       kill the job after SEC seconds (exit 124), after\n"
            "                      printing every rank's hang report (as SIGUSR1 does)\n"
            "  --env VAR=VAL       set VAR in every rank (repeatable)\n"
            "  -v, --verbose       print the job layout and every rank's exit\n"
            "  -h, --help          this text\n"
            "\n"
            "Each rank gets HCOMM_RANK, HCOMM_SIZE, HCOMM_LOCAL_RANK, HCOMM_LOCAL_SIZE,\n"
            "HCOMM_BOOTSTRAP (tcp://127.0.0.1:PORT) and HCOMM_JOB_KEY (fresh per job).\n"
            "SIGUSR1 to hcommrun: every rank reports what it waits for (who, which\n"
            "operation and step); the job goes on.\n"
            "Exit: 0 all ranks succeeded; the first failing rank's status (128+signal\n"
            "if killed); 77 rank 0 skipped; 124 timeout; 2 bad usage or prog cannot\n"
            "be executed; 1 launcher error; 128+sig when hcommrun got SIGINT/TERM/HUP.\n",
            HC_RUN_MAX_RANKS);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "hcommrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see hcommrun --help)\n");
    return -1;
}

/* Matches "--name VALUE" and "--name=VALUE"; advances *i past the value. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t len = strlen(name);
    if (strncmp(a, name, len) != 0) return 0;
    if (a[len] == '=') {
        *val = a + len + 1;
        return 1;
    }
    if (a[len] != '\0') return 0;
    if (*i + 1 >= argc) {
        *val = NULL;
        return 1;
    }
    *val = argv[++*i];
    return 1;
}

static int parse_nranks(const char *s, int *n_p)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < 1 || v > HC_RUN_MAX_RANKS) {
        fprintf(stderr,
                "hcommrun: -n: the number of ranks must be an integer in [1, %d] (got '%s') "
                "(see hcommrun --help)\n",
                HC_RUN_MAX_RANKS, s ? s : "nothing");
        return -1;
    }
    *n_p = (int)v;
    return 0;
}

static int check_env_arg(const char *s)
{
    const char *eq = s ? strchr(s, '=') : NULL;
    if (eq == NULL || eq == s)
        return usage_error("--env: expected VAR=VALUE, got '%s'", s ? s : "nothing");
    for (const char *p = s; p < eq; p++) {
        if (!(isalnum((unsigned char)*p) || *p == '_') || (p == s && isdigit((unsigned char)*p)))
            return usage_error("--env: '%s' does not start with a valid variable name", s);
    }
    for (size_t k = 0; k < sizeof(launcher_vars) / sizeof(launcher_vars[0]); k++) {
        size_t l = strlen(launcher_vars[k]);
        if ((size_t)(eq - s) == l && strncmp(s, launcher_vars[k], l) == 0)
            return usage_error("--env: '%s' is set by hcommrun itself and cannot be overridden", s);
    }
    return 0;
}

/* Returns 0 to run, 1 after --help, -1 on bad usage (message printed). */
static int parse_args(int argc, char **argv, hc_run_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->bind = HC_RUN_BIND_CORE;
    o->envs = calloc((size_t)argc, sizeof(char *));
    if (o->envs == NULL) return usage_error("%s", "out of memory");

    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *val;
        if (a[0] != '-' || a[1] == '\0') break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "--tag-output") == 0) {
            o->tag_output = 1;
        } else if (strncmp(a, "-n", 2) == 0 && a[2] != '\0' && a[2] != '-') {
            if (parse_nranks(a[2] == '=' ? a + 3 : a + 2, &o->nranks) != 0) return -1;
        } else if (opt_value(argc, argv, &i, "-n", &val) ||
                   opt_value(argc, argv, &i, "--np", &val)) {
            if (parse_nranks(val, &o->nranks) != 0) return -1;
        } else if (opt_value(argc, argv, &i, "--bind", &val)) {
            if (val && strcmp(val, "core") == 0)
                o->bind = HC_RUN_BIND_CORE;
            else if (val && strcmp(val, "numa") == 0)
                o->bind = HC_RUN_BIND_NUMA;
            else if (val && strcmp(val, "none") == 0)
                o->bind = HC_RUN_BIND_NONE;
            else
                return usage_error("--bind: expected core, numa or none (got '%s')",
                                   val ? val : "nothing");
        } else if (opt_value(argc, argv, &i, "--timeout", &val)) {
            char *end;
            double t = val ? strtod(val, &end) : 0;
            if (val == NULL || *val == '\0' || *end != '\0' || !isfinite(t) || t <= 0 || t > 1e9)
                return usage_error("--timeout: expected a positive number of seconds (got '%s')",
                                   val ? val : "nothing");
            o->timeout = t;
            o->timeout_str = val;
        } else if (opt_value(argc, argv, &i, "--env", &val)) {
            if (check_env_arg(val) != 0) return -1;
            o->envs[o->nenvs++] = (char *)val;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (o->nranks == 0) return usage_error("%s", "missing -n N (the number of ranks)");
    if (i >= argc) return usage_error("%s", "missing the program to run");
    o->argv = argv + i;
    return 0;
}

/* ---- job setup ------------------------------------------------------------ */

/* The rendezvous port: the kernel picks a free one; rank 0 will listen there.
 * Another process could take it in between; the library then fails its bind
 * with a message, and a rerun gets another port. */
static int pick_port(int *port_p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(sa);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "hcommrun: socket() for the bootstrap port failed: %s\n", strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "hcommrun: cannot bind 127.0.0.1:0 for the bootstrap port: %s\n",
                strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    *port_p = ntohs(sa.sin_port);
    return 0;
}

static int make_job_key(char key[33])
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            fprintf(stderr, "hcommrun: getrandom() failed: %s\n", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t k = 0; k < sizeof(raw); k++)
        snprintf(key + 2 * k, 3, "%02x", raw[k]);
    return 0;
}

/* Enough descriptors for the tag pipes and a batch of exec pipes; the ranks
 * get the original limit back (select()-based code expects <= 1024). */
static int raise_nofile(hc_run_job_t *job)
{
    rlim_t need = (rlim_t)(job->opts.tag_output ? 2 * job->opts.nranks : 0) + EXEC_CHECK_BATCH + 64;
    if (getrlimit(RLIMIT_NOFILE, &job->orig_nofile) != 0) {
        fprintf(stderr, "hcommrun: getrlimit(RLIMIT_NOFILE) failed: %s\n", strerror(errno));
        return -1;
    }
    if (job->orig_nofile.rlim_cur >= need) return 0;
    if (job->orig_nofile.rlim_max != RLIM_INFINITY && job->orig_nofile.rlim_max < need) {
        fprintf(stderr,
                "hcommrun: %d ranks%s need %llu file descriptors but RLIMIT_NOFILE allows %llu\n",
                job->opts.nranks, job->opts.tag_output ? " with --tag-output" : "",
                (unsigned long long)need, (unsigned long long)job->orig_nofile.rlim_max);
        return -1;
    }
    struct rlimit r = {.rlim_cur = need, .rlim_max = job->orig_nofile.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
        fprintf(stderr, "hcommrun: setrlimit(RLIMIT_NOFILE, %llu) failed: %s\n",
                (unsigned long long)need, strerror(errno));
        return -1;
    }
    return 0;
}

static int setup_signals(hc_run_job_t *job)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTSTP);
    sigaddset(&set, SIGCONT);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, &job->orig_mask) != 0) goto err;
    job->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (job->sfd < 0) goto err;
    /* Tagged output goes to our stdout; a closed reader must not kill us. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    if (sigaction(SIGPIPE, &ign, &job->orig_sigpipe) != 0) goto err;
    return 0;
err:
    fprintf(stderr, "hcommrun: signal setup failed: %s\n", strerror(errno));
    return -1;
}

/* ---- the child side ------------------------------------------------------- */

static __attribute__((noreturn)) void child_fail(int report_fd, int stage, int err)
{
    hc_run_child_report_t r = {stage, err};
    (void)hc_run_write_all(report_fd, &r, sizeof(r));
    _exit(127);
}

static int child_setenv_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", v);
    return setenv(name, buf, 1);
}

static __attribute__((noreturn)) void child_exec(hc_run_job_t *job, int rank, pid_t parent,
                                                 int report_fd, const int out_pipe[2],
                                                 const int err_pipe[2], int ctl_fd)
{
    /* The parent is single-threaded, so the usual async-signal-safety limits
     * after fork do not bind us: setenv and friends are fine here. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report_fd, STAGE_SETUP, errno);
    if (getppid() != parent) _exit(127); /* hcommrun died before prctl took effect */
    if (setpgid(0, rank == 0 ? 0 : job->pgid) != 0) child_fail(report_fd, STAGE_SETUP, errno);

    if (job->opts.tag_output) {
        if (dup2(out_pipe[1], STDOUT_FILENO) < 0 || dup2(err_pipe[1], STDERR_FILENO) < 0)
            child_fail(report_fd, STAGE_SETUP, errno);
        close(out_pipe[0]);
        close(out_pipe[1]);
        close(err_pipe[0]);
        close(err_pipe[1]);
    }
    /* Ranks are not in the terminal's foreground group: reading a terminal
     * would stop them (SIGTTIN). Only rank 0 reads stdin, and only if it is
     * not a terminal. */
    if (rank != 0 || job->stdin_null) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0 || dup2(fd, STDIN_FILENO) < 0) child_fail(report_fd, STAGE_SETUP, errno);
        if (fd != STDIN_FILENO) close(fd);
    }

    for (int k = 0; k < job->opts.nenvs; k++) {
        if (putenv(job->opts.envs[k]) != 0) child_fail(report_fd, STAGE_SETUP, errno);
    }
    if (child_setenv_int("HCOMM_RANK", rank) != 0 ||
        child_setenv_int("HCOMM_SIZE", job->opts.nranks) != 0 ||
        child_setenv_int("HCOMM_LOCAL_RANK", rank) != 0 ||
        child_setenv_int("HCOMM_LOCAL_SIZE", job->opts.nranks) != 0 ||
        setenv("HCOMM_BOOTSTRAP", job->bootstrap, 1) != 0 ||
        setenv("HCOMM_JOB_KEY", job->job_key, 1) != 0)
        child_fail(report_fd, STAGE_SETUP, errno);
    /* The rank's end of its control socket survives exec; the library
     * marks it close-on-exec again at init. */
    if (ctl_fd >= 0 && (fcntl(ctl_fd, F_SETFD, 0) != 0 ||
                        child_setenv_int("HCOMM_CONTROL_FD", ctl_fd) != 0))
        child_fail(report_fd, STAGE_SETUP, errno);

    cpu_set_t *set = hc_run_bind_plan_set(&job->plan, rank);
    if (set != NULL && sched_setaffinity(0, job->plan.setsize, set) != 0)
        child_fail(report_fd, STAGE_AFFINITY, errno);

    (void)setrlimit(RLIMIT_NOFILE, &job->orig_nofile);
    (void)sigaction(SIGPIPE, &job->orig_sigpipe, NULL);
    (void)sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);

    execvp(job->opts.argv[0], job->opts.argv);
    child_fail(report_fd, STAGE_EXEC, errno);
}

/* ---- the parent side ------------------------------------------------------ */

static const char *signame(int sig)
{
    const char *d = sigdescr_np(sig);
    return d ? d : "unknown signal";
}

static int rank_of_pid(const hc_run_job_t *job, pid_t pid)
{
    for (int r = 0; r < job->nspawned; r++) {
        if (job->ranks[r].pid == pid) return r;
    }
    return -1;
}

/* Sends sig to the job's process group (reaching what the ranks started) and
 * to every live rank by pid (reaching ranks that left the group). */
static void signal_all(hc_run_job_t *job, int sig)
{
    int group_ok = 0;
    for (int r = 0; r < job->nspawned; r++) {
        if (!job->ranks[r].alive) continue;
        if (!group_ok && getpgid(job->ranks[r].pid) == job->pgid) group_ok = 1;
        kill(job->ranks[r].pid, sig);
    }
    if (group_ok) kill(-job->pgid, sig);
}

static void start_termination(hc_run_job_t *job, int sig)
{
    if (job->term == KILL_SENT) return;
    if (job->term == TERM_SENT && sig != SIGKILL) {
        signal_all(job, sig);
        return;
    }
    signal_all(job, sig);
    if (sig == SIGKILL) {
        job->term = KILL_SENT;
        job->term_deadline = now_sec() + REAP_GIVE_UP_SEC;
    } else {
        job->term = TERM_SENT;
        job->term_deadline = now_sec() + KILL_GRACE_SEC;
    }
}

static void record_failure(hc_run_job_t *job, int code)
{
    if (job->failed || job->timed_out || job->got_signal) return;
    job->failed = 1;
    job->fail_code = code;
    start_termination(job, SIGTERM);
}

static void on_rank_exit(hc_run_job_t *job, int r, int status)
{
    pid_t pid = job->ranks[r].pid;
    job->ranks[r].alive = 0;
    job->nalive--;
    /* Once we are terminating the job, deaths are expected, not news. */
    int quiet = job->failed || job->timed_out || job->got_signal;

    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (job->opts.verbose)
            fprintf(stderr, "hcommrun: rank %d (pid %d) exited with status %d\n", r, (int)pid,
                    code);
        if (code == 0) return;
        if (code == EXIT_SKIP) {
            if (r == 0)
                job->rank0_skipped = 1;
            else if (job->skip_rank < 0)
                job->skip_rank = r;
            return;
        }
        if (!quiet && !job->opts.verbose)
            fprintf(stderr, "hcommrun: rank %d (pid %d) exited with status %d\n", r, (int)pid,
                    code);
        record_failure(job, code);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (!quiet || job->opts.verbose)
            fprintf(stderr, "hcommrun: rank %d (pid %d) killed by signal %d (%s)%s\n", r, (int)pid,
                    sig, signame(sig), WCOREDUMP(status) ? ", core dumped" : "");
        record_failure(job, 128 + sig);
    }
}

static void reap(hc_run_job_t *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        int r = rank_of_pid(job, pid);
        if (r >= 0 && job->ranks[r].alive) on_rank_exit(job, r, status);
    }
}

static void on_signal(hc_run_job_t *job, int sig)
{
    const char *abbrev = sigabbrev_np(sig) ?: "?";
    if (job->nalive == 0) return;
    if (++job->nsignals > 1) {
        fprintf(stderr, "hcommrun: got SIG%s again, killing %d ranks\n", abbrev, job->nalive);
        start_termination(job, SIGKILL);
        return;
    }
    if (!job->failed && !job->timed_out) job->got_signal = sig;
    fprintf(stderr, "hcommrun: got SIG%s, forwarding it to %d ranks\n", abbrev, job->nalive);
    /* Forward the signal itself, not SIGTERM: a rank may handle ^C its own way. */
    signal_all(job, sig);
    if (job->term == TERM_NONE) {
        job->term = TERM_SENT;
        job->term_deadline = now_sec() + KILL_GRACE_SEC;
    }
}

/* ^Z reaches only hcommrun (the ranks are not in the terminal's foreground
 * group): stop the ranks with it, and continue them when the shell continues
 * us (SIGCONT resumes us even while blocked; the signalfd still reports it). */
static void on_job_control(hc_run_job_t *job, int sig)
{
    if (job->nalive == 0) return;
    if (sig == SIGTSTP) {
        signal_all(job, SIGTSTP);
        raise(SIGSTOP);
    } else {
        signal_all(job, SIGCONT);
    }
}

/* ---- hang reports ------------------------------------------------------------- */

/* "R" or "R (stopped)": what /proc says of a rank that did not answer. */
static const char *proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return "gone";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return "unknown";
    switch (p[2]) {
    case 'R': return "running (busy outside hcomm, or spinning where it cannot answer)";
    case 'S': return "sleeping outside hcomm (application code, I/O or another library)";
    case 'D': return "in uninterruptible sleep (I/O)";
    case 'T': return "stopped (SIGSTOP or a debugger)";
    case 't': return "stopped by a debugger";
    case 'Z': return "exited, not yet reaped";
    default: return "in an unusual state";
    }
}

/* Asks every live rank what it waits for and prints the answers: the ranks
 * that do not answer (not inside an hcomm wait) and the ranks the others
 * wait for come first. */
static void collect_reports(hc_run_job_t *job, const char *why)
{
    int n = job->nspawned;
    char **ans = calloc((size_t)n, sizeof(*ans));
    int *waited = calloc((size_t)n, sizeof(*waited));
    if (!ans || !waited) {
        free(ans);
        free(waited);
        return;
    }
    int asked = 0, hcomm_ranks = 0;
    for (int r = 0; r < n; r++) {
        hc_run_rank_t *rk = &job->ranks[r];
        if (!rk->alive || rk->ctl_fd < 0) continue;
        /* its hello from hcomm_init, or a late answer to an earlier request */
        char junk[REPORT_MAX];
        ssize_t m;
        while ((m = recv(rk->ctl_fd, junk, sizeof(junk), MSG_DONTWAIT)) > 0)
            if (m >= 8 && !memcmp(junk, "hcomm-up", 8)) rk->hcomm = 1;
        if (!rk->hcomm) continue; /* not an hcomm process (yet): nobody would answer */
        hcomm_ranks++;
        if (send(rk->ctl_fd, "report", 6, MSG_DONTWAIT | MSG_NOSIGNAL) == 6) asked++;
    }
    if (hcomm_ranks == 0) { /* plain programs: nothing to report */
        free(ans);
        free(waited);
        return;
    }
    double end = now_sec() + REPORT_WAIT_SEC;
    int got = 0;
    while (got < asked && now_sec() < end) {
        struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
        int *who = calloc((size_t)n, sizeof(*who));
        int k = 0;
        for (int r = 0; pfd && who && r < n; r++) {
            if (ans[r] || !job->ranks[r].alive || job->ranks[r].ctl_fd < 0) continue;
            pfd[k] = (struct pollfd){.fd = job->ranks[r].ctl_fd, .events = POLLIN};
            who[k++] = r;
        }
        int ms = (int)((end - now_sec()) * 1000) + 1;
        int pr = k ? poll(pfd, (nfds_t)k, ms) : 0;
        for (int i = 0; i < k && pr > 0; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[REPORT_MAX];
            ssize_t m = recv(pfd[i].fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
            if (m <= 0) {
                ans[who[i]] = strdup("-"); /* finalized: closed its end */
            } else {
                buf[m] = 0;
                ans[who[i]] = strdup(buf);
            }
            got++;
        }
        free(pfd);
        free(who);
        if (k == 0 || pr < 0) break;
    }
    /* tally: "hcomm-report rank=R waits_for=a,b" */
    for (int r = 0; r < n; r++) {
        const char *w = ans[r] ? strstr(ans[r], "waits_for=") : NULL;
        if (!w) continue;
        w += strlen("waits_for=");
        while (*w >= '0' && *w <= '9') {
            int q = atoi(w);
            if (q >= 0 && q < n && q != r) waited[q]++;
            while (*w >= '0' && *w <= '9') w++;
            if (*w == ',') w++;
        }
    }
    fprintf(stderr, "hcommrun: hang report (%s), %d of %d live ranks answered:\n", why, got,
            job->nalive);
    int top = -1;
    for (int r = 0; r < n; r++)
        if (waited[r] && (top < 0 || waited[r] > waited[top])) top = r;
    if (top >= 0)
        fprintf(stderr, "hcommrun:   most waited for: rank %d (%d rank%s wait%s for it)\n", top,
                waited[top], waited[top] > 1 ? "s" : "", waited[top] > 1 ? "" : "s");
    /* the ranks that did not answer, then the waited-for, then the rest */
    for (int pass = 0; pass < 3; pass++) {
        for (int r = 0; r < n; r++) {
            hc_run_rank_t *rk = &job->ranks[r];
            if (!rk->alive) {
                if (pass == 0 && ans[r] == NULL && rk->pid)
                    fprintf(stderr, "hcommrun:   rank %d: exited\n", r);
                continue;
            }
            int cls = !ans[r] || !strcmp(ans[r], "-") ? 0 : waited[r] ? 1 : 2;
            if (cls != pass) continue;
            if (cls == 0 && !rk->hcomm) {
                fprintf(stderr, "hcommrun:   rank %d (pid %d)%s: no report: it has not called "
                                "hcomm_init; process %s\n",
                        r, (int)rk->pid, waited[r] ? " [waited for]" : "", proc_state(rk->pid));
                continue;
            }
            if (cls == 0) {
                fprintf(stderr, "hcommrun:   rank %d (pid %d)%s: no report: %s%s\n", r, (int)rk->pid,
                        waited[r] ? " [waited for]" : "",
                        ans[r] ? "it closed its control socket (finalized?), process " : "",
                        rk->ctl_fd < 0 ? "no control socket" : proc_state(rk->pid));
                continue;
            }
            const char *text = strchr(ans[r], '\n');
            text = text ? text + 1 : ans[r];
            fprintf(stderr, "hcommrun:   rank %d (pid %d)%s: ", r, (int)rk->pid,
                    waited[r] ? " [waited for]" : "");
            for (const char *p = text; *p; p++) {
                fputc(*p, stderr);
                if (*p == '\n' && p[1]) fputs("hcommrun:     ", stderr);
            }
            if (text[0] && text[strlen(text) - 1] != '\n') fputc('\n', stderr);
        }
    }
    for (int r = 0; r < n; r++) free(ans[r]);
    free(ans);
    free(waited);
}

static int drain_signalfd(hc_run_job_t *job)
{
    struct signalfd_siginfo si[16];
    for (;;) {
        ssize_t n = read(job->sfd, si, sizeof(si));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        for (size_t k = 0; k < (size_t)n / sizeof(si[0]); k++) {
            int sig = (int)si[k].ssi_signo;
            if (sig == SIGCHLD)
                reap(job);
            else if (sig == SIGTSTP || sig == SIGCONT)
                on_job_control(job, sig);
            else if (sig == SIGUSR1)
                collect_reports(job, "SIGUSR1");
            else
                on_signal(job, sig);
        }
    }
}

static const char *stage_name(int stage)
{
    switch (stage) {
    case STAGE_AFFINITY:
        return "cannot bind to its CPUs";
    case STAGE_EXEC:
        return "cannot execute";
    default:
        return "cannot be set up to execute";
    }
}

/* Reads rank r's exec report. Returns 0 when exec succeeded, else prints
 * the reason and returns -1. */
static int check_exec(hc_run_job_t *job, int r)
{
    hc_run_rank_t *rk = &job->ranks[r];
    hc_run_child_report_t rep;
    ssize_t n;
    do {
        n = read(rk->exec_fd, &rep, sizeof(rep));
    } while (n < 0 && errno == EINTR);
    close(rk->exec_fd);
    rk->exec_fd = -1;
    if (n == 0) return 0;
    if (n != (ssize_t)sizeof(rep)) {
        rep.stage = STAGE_SETUP;
        rep.err = n < 0 ? errno : EIO;
    }
    if (rep.stage == STAGE_AFFINITY) {
        char cpus[256];
        hc_run_bind_set_format(hc_run_bind_plan_set(&job->plan, r), job->plan.setsize, cpus,
                               sizeof(cpus));
        fprintf(stderr, "hcommrun: rank %d %s (%s): %s\n", r, stage_name(rep.stage), cpus,
                strerror(rep.err));
    } else {
        fprintf(stderr, "hcommrun: rank %d %s '%s': %s\n", r, stage_name(rep.stage),
                job->opts.argv[0], strerror(rep.err));
    }
    return -1;
}

static int check_exec_batch(hc_run_job_t *job, int upto)
{
    int bad = 0;
    for (int r = 0; r < upto; r++) {
        if (job->ranks[r].exec_fd >= 0 && check_exec(job, r) != 0) bad = 1;
    }
    return bad ? -1 : 0;
}

static int spawn_rank(hc_run_job_t *job, int r)
{
    int report[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, ctl[2] = {-1, -1};
    /* A control socket per rank (hang reports): without one the job runs,
     * the reports just say so. */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) ctl[0] = ctl[1] = -1;
    if (pipe2(report, O_CLOEXEC) != 0 ||
        (job->opts.tag_output && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))) {
        fprintf(stderr, "hcommrun: pipe for rank %d failed: %s\n", r, strerror(errno));
        goto err_close;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "hcommrun: fork for rank %d failed: %s\n", r, strerror(errno));
        goto err_close;
    }
    if (pid == 0) {
        close(report[0]);
        if (ctl[0] >= 0) close(ctl[0]);
        child_exec(job, r, parent, report[1], out, err, ctl[1]);
    }
    if (ctl[1] >= 0) close(ctl[1]);
    job->ranks[r].ctl_fd = ctl[0];
    if (r == 0) job->pgid = pid;
    /* Also set in the child; doing it here too closes the race where the next
     * rank or a group kill comes before the child ran. EACCES: it has exec'd. */
    (void)setpgid(pid, job->pgid);
    job->ranks[r].pid = pid;
    job->ranks[r].alive = 1;
    job->ranks[r].exec_fd = report[0];
    job->nspawned++;
    job->nalive++;
    close(report[1]);
    if (job->opts.tag_output) {
        close(out[1]);
        close(err[1]);
        int fds[2] = {out[0], err[0]};
        for (int k = 0; k < 2; k++) {
            hc_run_tag_stream_t *s = &job->streams[2 * r + k];
            *s = (hc_run_tag_stream_t){.fd = fds[k], .dest_fd = k + 1, .rank = r};
            fcntl(s->fd, F_SETFL, O_NONBLOCK);
            struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)(2 * r + k)};
            if (epoll_ctl(job->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
                fprintf(stderr, "hcommrun: epoll_ctl for rank %d failed: %s\n", r, strerror(errno));
                return -1; /* the rank is running: the caller terminates the job */
            }
            job->nstreams_open++;
        }
    }
    return 0;

err_close:
    for (int k = 0; k < 2; k++) {
        if (ctl[k] >= 0) close(ctl[k]);
        if (report[k] >= 0) close(report[k]);
        if (out[k] >= 0) close(out[k]);
        if (err[k] >= 0) close(err[k]);
    }
    return -1;
}

static void print_layout(hc_run_job_t *job)
{
    static const char *modes[] = {"none", "core", "numa"};
    fprintf(stderr, "hcommrun: %d ranks of '%s', bootstrap %s, bind %s\n", job->opts.nranks,
            job->opts.argv[0], job->bootstrap, modes[job->opts.bind]);
    for (int r = 0; r < job->nspawned; r++) {
        char cpus[256] = "any";
        cpu_set_t *set = hc_run_bind_plan_set(&job->plan, r);
        if (set != NULL) hc_run_bind_set_format(set, job->plan.setsize, cpus, sizeof(cpus));
        fprintf(stderr, "hcommrun: rank %d pid %d cpus %s\n", r, (int)job->ranks[r].pid, cpus);
    }
}

/* Starts every rank. Returns 0, or the exit status to use after the ranks
 * already started have been terminated. */
static int spawn_all(hc_run_job_t *job)
{
    for (int r = 0; r < job->opts.nranks; r++) {
        if (spawn_rank(job, r) != 0) return EXIT_INTERNAL;
        /* Rank 0 alone first: a wrong program name is found with one fork. */
        if ((r == 0 || r % EXEC_CHECK_BATCH == 0) && check_exec_batch(job, r + 1) != 0)
            return EXIT_USAGE;
    }
    if (check_exec_batch(job, job->nspawned) != 0) return EXIT_USAGE;
    return 0;
}

static int next_timeout_ms(hc_run_job_t *job, double now)
{
    double deadline = INFINITY;
    if (job->opts.timeout > 0 && !job->timed_out) deadline = job->start + job->opts.timeout;
    if (job->term != TERM_NONE && job->term_deadline < deadline) deadline = job->term_deadline;
    if (job->nalive == 0) deadline = job->term_deadline; /* draining output */
    if (isinf(deadline)) return -1;
    double ms = ceil((deadline - now) * 1000.0);
    return ms < 0 ? 0 : ms > 1e9 ? 1000000000 : (int)ms;
}

static void check_deadlines(hc_run_job_t *job, double now)
{
    if (job->nalive == 0) return;
    /* A job already being terminated for a failure or a signal keeps that verdict. */
    if (job->opts.timeout > 0 && !job->timed_out && !job->failed && !job->got_signal &&
        now >= job->start + job->opts.timeout) {
        collect_reports(job, "timeout");
        fprintf(stderr, "hcommrun: timeout after %s s, killing %d ranks\n", job->opts.timeout_str,
                job->nalive);
        job->timed_out = 1;
        start_termination(job, SIGTERM);
    }
    if (job->term == TERM_SENT && now >= job->term_deadline) {
        fprintf(stderr, "hcommrun: %d ranks still alive %.0f s after SIGTERM, sending SIGKILL\n",
                job->nalive, KILL_GRACE_SEC);
        start_termination(job, SIGKILL);
    }
}

/* Runs until every rank is reaped and the output pipes are drained. Returns
 * 0, or -1 when ranks survived SIGKILL. */
static int event_loop(hc_run_job_t *job)
{
    int draining = 0;
    for (;;) {
        double now = now_sec();
        check_deadlines(job, now);
        if (job->nalive == 0) {
            if (job->nstreams_open == 0) return 0;
            if (!draining) {
                draining = 1;
                job->term_deadline = now + DRAIN_GRACE_SEC;
            } else if (now >= job->term_deadline) {
                return 0; /* something the ranks started still holds a pipe */
            }
        } else if (job->term == KILL_SENT && now >= job->term_deadline) {
            fprintf(stderr,
                    "hcommrun: %d ranks did not exit %.0f s after SIGKILL (stuck in the "
                    "kernel?); giving up on them\n",
                    job->nalive, REAP_GIVE_UP_SEC);
            return -1;
        }

        struct epoll_event evs[64];
        int n = epoll_wait(job->epfd, evs, 64, next_timeout_ms(job, now));
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "hcommrun: epoll_wait failed: %s\n", strerror(errno));
            return -1;
        }
        for (int k = 0; k < n; k++) {
            if (evs[k].data.u32 == UINT32_MAX) {
                drain_signalfd(job);
                continue;
            }
            hc_run_tag_stream_t *s = &job->streams[evs[k].data.u32];
            if (s->fd >= 0 && hc_run_tag_stream_pump(s) == 0) {
                /* Explicitly: a rank being forked may briefly hold a copy of
                 * the fd, and epoll follows the file, not our descriptor. */
                epoll_ctl(job->epfd, EPOLL_CTL_DEL, s->fd, NULL);
                hc_run_tag_stream_close(s);
                job->nstreams_open--;
            }
        }
    }
}

static int verdict(hc_run_job_t *job)
{
    if (job->timed_out) return EXIT_TIMEOUT;
    if (job->failed) return job->fail_code;
    if (job->got_signal) return 128 + job->got_signal;
    if (job->rank0_skipped) return EXIT_SKIP;
    if (job->skip_rank >= 0) {
        fprintf(stderr,
                "hcommrun: rank %d (pid %d) exited with status 77 (skip) but rank 0 did not "
                "skip; counting the job as failed\n",
                job->skip_rank, (int)job->ranks[job->skip_rank].pid);
        return EXIT_INTERNAL;
    }
    return 0;
}

/* A closed stdin/stdout/stderr would let a pipe land on fd 0-2 and be closed
 * again by the child's dup2 dance; keep them occupied. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n >= 0 && n != fd) close(n); /* cannot happen: open returns the lowest free fd */
        }
    }
}

int main(int argc, char **argv)
{
    hc_run_job_t job = {.sfd = -1, .epfd = -1, .skip_rank = -1};
    int ret = EXIT_INTERNAL, port;

    ensure_std_fds();
    int prc = parse_args(argc, argv, &job.opts);
    if (prc != 0) {
        free(job.opts.envs);
        return prc > 0 ? 0 : EXIT_USAGE;
    }
    job.start = now_sec();
    job.stdin_null = isatty(STDIN_FILENO);
    job.ranks = calloc((size_t)job.opts.nranks, sizeof(*job.ranks));
    if (job.opts.tag_output)
        job.streams = calloc(2 * (size_t)job.opts.nranks, sizeof(*job.streams));
    if (job.ranks == NULL || (job.opts.tag_output && job.streams == NULL)) {
        fprintf(stderr, "hcommrun: out of memory for %d ranks\n", job.opts.nranks);
        goto out_free;
    }
    for (int r = 0; r < job.opts.nranks; r++)
        job.ranks[r].exec_fd = job.ranks[r].ctl_fd = -1;
    for (int k = 0; job.streams && k < 2 * job.opts.nranks; k++)
        job.streams[k].fd = -1;

    if (pick_port(&port) != 0 || make_job_key(job.job_key) != 0 || raise_nofile(&job) != 0 ||
        hc_run_bind_plan_create(job.opts.bind, &job.plan) != 0)
        goto out_free;
    snprintf(job.bootstrap, sizeof(job.bootstrap), "tcp://127.0.0.1:%d", port);

    if (setup_signals(&job) != 0) goto out_plan;
    job.epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (job.epfd < 0 || epoll_ctl(job.epfd, EPOLL_CTL_ADD, job.sfd, &ev) != 0) {
        fprintf(stderr, "hcommrun: epoll setup failed: %s\n", strerror(errno));
        goto out_fds;
    }

    int spawn_rc = spawn_all(&job);
    if (job.opts.verbose) print_layout(&job);
    if (spawn_rc != 0) {
        /* Not a rank failure: the job never ran. Quietly take down the rest. */
        job.failed = 1;
        job.fail_code = spawn_rc;
        start_termination(&job, SIGTERM);
    }
    if (event_loop(&job) != 0 && !job.failed && !job.timed_out && !job.got_signal)
        ret = EXIT_INTERNAL;
    else
        ret = verdict(&job);

out_fds:
    for (int r = 0; r < job.nspawned; r++) {
        if (job.ranks[r].exec_fd >= 0) close(job.ranks[r].exec_fd);
        if (job.ranks[r].ctl_fd >= 0) close(job.ranks[r].ctl_fd);
    }
    for (int k = 0; job.streams && k < 2 * job.nspawned; k++)
        hc_run_tag_stream_close(&job.streams[k]);
    if (job.epfd >= 0) close(job.epfd);
    if (job.sfd >= 0) close(job.sfd);
out_plan:
    hc_run_bind_plan_destroy(&job.plan);
out_free:
    free(job.streams);
    free(job.ranks);
    free(job.opts.envs);
    return ret;
}
