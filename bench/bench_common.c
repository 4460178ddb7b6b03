/*
 * Shared code of the benchmark tools: arguments, the size loop, buffers,
 * statistics, JSON lines, dtype conversions, reference data and the
 * collective harness.
 *
 * Checking a reduction needs a reference that does not depend on the
 * library's reduction order or accumulation precision (fp16/bf16 are summed
 * in fp32 per step and rounded per step). So inputs are small integers whose
 * every partial result is exactly representable in the dtype: then any order
 * gives the same bits, and the check is a bitwise compare against a
 * reference computed in int64 and converted once.
 *
 * Timing follows nccl-tests: warmup, barrier, a loop of back-to-back calls,
 * each timed on its own (one clock read between calls); each iteration's
 * time is reduced over the ranks as -a says (rank 0, mean, min, max) and
 * time is the mean of that series, p50/p99 its percentiles. The check runs outside the timed
 * loop, on a fresh run with freshly written inputs and sentinel-filled
 * outputs, so stale data cannot pass for a result.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int hb_rank = -1;
int hb_nranks = 0;

static const char *hb_prog = "bench";
static enum hb_tool hb_prog_tool = HB_TOOL_COLL;

void hb_check(hcomm_status_t status, const char *what)
{
    if (status == HCOMM_OK) return;
    fprintf(stderr, "rank %d: %s failed: %s: %s\n", hb_rank, what, hcomm_strerror(status),
            hcomm_last_error());
    exit(1);
}

/* Before hcomm_init: the rank as the launcher gave it (hcommrun, torchrun,
 * PMI, Open MPI, Slurm), so that a usage error is printed once per job. */
static int hb_env_rank(void)
{
    static const char *const vars[] = {"HCOMM_RANK", "RANK", "PMI_RANK", "PMIX_RANK",
                                       "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

void hb_init(int *argc, char ***argv)
{
    if (*argc > 0 && (*argv)[0]) {
        const char *slash = strrchr((*argv)[0], '/');
        hb_prog = slash ? slash + 1 : (*argv)[0];
    }
    /* the options are parsed before the job starts: a typo or -h costs no
     * hcomm_init (no rendezvous, no warnings on a help screen) */
    hb_rank = hb_env_rank();
    hb_nranks = 0;
}

void hb_start(const struct hb_opts *opts)
{
    hcomm_comm_t world;

    hb_check(hcomm_init(NULL, NULL), "hcomm_init");
    world = hcomm_comm_world();
    hb_rank = hcomm_comm_rank(world);
    hb_nranks = hcomm_comm_size(world);
    if (hb_rank < 0 || hb_nranks < 1) {
        fprintf(stderr, "%s: hcomm_comm_rank/size of the world failed: %s\n", hb_prog,
                hcomm_last_error());
        exit(1);
    }
    if (opts && opts->root >= hb_nranks)
        hb_usage_error("-r: root %d out of range for a job of %d ranks", opts->root, hb_nranks);
}

uint64_t hb_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int hb_iters_for(size_t bytes, int small, int large)
{
    return bytes <= 65536 ? small : (bytes <= (1u << 22) ? small / 10 + 1 : large);
}

/* ------------------------------------------------------------------------
 * Arguments
 * ---------------------------------------------------------------------- */

static void hb_usage_print(FILE *f)
{
    fprintf(f, "usage: hcommrun -n NRANKS %s [options]\n", hb_prog);
    if (hb_prog_tool != HB_TOOL_MIXED)
        fprintf(f,
                "  -b, --minbytes MIN      smallest size in bytes, K/M/G suffixes allowed "
                "(default 8; 0 allowed)\n"
                "  -e, --maxbytes MAX      largest size (default %s)\n"
                "  -f, --stepfactor F      multiply the size by F, an integer >= 2 (default 2)\n"
                "  -n, --iters N           timed iterations per size (default: by size, as the "
                "peers' mpi_bench.c%s)\n"
                "  -w, --warmup_iters N    warmup iterations per size (default: iters/10+1%s)\n",
                hb_prog_tool == HB_TOOL_COLL ? "32M" : "4M",
                hb_prog_tool == HB_TOOL_PINGPONG ? "; bw modes: as osu_bw" : "",
                hb_prog_tool == HB_TOOL_COLL ? ", at least 5" : "");
    if (hb_prog_tool == HB_TOOL_PINGPONG)
        fprintf(f, "  -M, --mode lat|bw|bibw  latency (blocking round trips), or osu_bw/osu_bibw "
                   "bandwidth (default lat)\n"
                   "  -W, --window N          messages in flight per window in bw modes "
                   "(default 64)\n");
    if (hb_prog_tool == HB_TOOL_COLL)
        fprintf(f, "  -d, --datatype T        float|half|bfloat16|double|int8|uint8|int32|uint32|"
                   "int64|uint64|all (default float)\n"
                   "  -o, --op OP             sum|prod|max|min|avg|all (default sum)\n"
                   "  -r, --root R            root rank of broadcast and reduce (default 0)\n");
    if (hb_prog_tool == HB_TOOL_MIXED)
        fprintf(f, "  -p, --profile FILE      profile: lines '<collective> <bytes> <count per "
                   "step>'\n"
                   "  -P, --builtin NAME      built-in profile (default mixed; 'list' names "
                   "them)\n"
                   "      --show-profile      print the profile's text and exit\n"
                   "  -n, --iters N           timed steps (default 100)\n"
                   "  -w, --warmup_iters N    untimed steps first (default 10)\n");
    if (hb_prog_tool != HB_TOOL_PINGPONG)
        fprintf(f,
                "  -c, --check 0|1         check results against an exact reference "
                "(default 1)\n"
                "  -z, --blocking 0|1      1: blocking calls; 0: hcomm_i* calls completed "
                "with hcomm_wait (default %d)\n"
                "  -a, --average 0|1|2|3   time of rank 0 (0), mean over ranks (1), min (2), "
                "max (3) (default 3: the slowest rank, as the peers report)\n",
                hb_prog_tool == HB_TOOL_COLL);
    if (hb_prog_tool != HB_TOOL_MIXED)
        fprintf(f, "  -i, --stepbytes BYTES   add BYTES to the size at each step instead of -f\n");
    if (hb_prog_tool == HB_TOOL_COLL)
        fprintf(f, "  -N, --run_cycles N      run the whole sweep N times (default 1)\n");
    fprintf(f, "  -T, --timeout S         seconds any wait may last (sets HCOMM_TIMEOUT)\n"
               "nccl-tests options refused (each says why): -g/--ngpus (one device per\n"
               "process: run one process per device, -m device for its memory), -t/--nthreads\n"
               "(one thread at a time in hcomm per process: run more processes)%s\n",
            hb_prog_tool == HB_TOOL_COLL
                ? ", -C (no device time), -R (registration\nis automatic), -G (no CUDA graphs)"
                : "");
    fprintf(f, "  -m, --mem malloc|hcomm|device  buffers from aligned_alloc (default), "
               "hcomm_mem_alloc or the GPU backend (hcomm_mem_alloc_device)\n"
               "  -J, --json FILE         also write one JSON object per result to FILE "
               "(rank 0)\n"
               "      --csv               comma-separated output\n"
               "  -h, --help              this text\n");
}

void hb_usage_error(const char *fmt, ...)
{
    va_list ap;

    if (hb_rank <= 0) {
        fprintf(stderr, "%s: ", hb_prog);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        hb_usage_print(stderr);
    } else if (!hcomm_initialized()) {
        /* before the job: every rank fails alike and at once, and a
         * launcher ends the job at its first failed rank; the others give
         * rank 0 a moment to say why */
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    if (hcomm_initialized()) hcomm_finalize();
    exit(2);
}

int hb_parse_size(const char *s, size_t *size_p)
{
    unsigned long long v;
    unsigned shift = 0;
    char *end;

    if (!isdigit((unsigned char)s[0])) return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno) return -1;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    }
    if (shift) {
        end++;
        if (end[0] == 'i' && end[1] == 'B')
            end += 2;
        else if (end[0] == 'B')
            end++;
    }
    if (*end || v > (SIZE_MAX >> shift)) return -1;
    *size_p = (size_t)v << shift;
    return 0;
}

static int hb_parse_int(const char *s, long min, long max, long *v_p)
{
    long v;
    char *end;

    if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1]))) return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *v_p = v;
    return 0;
}

struct hb_name {
    const char *name;
    int value;
};

static const struct hb_name hb_dtype_names[] = {
    {"float", HCOMM_FLOAT32},     {"half", HCOMM_FLOAT16},
    {"bfloat16", HCOMM_BFLOAT16}, {"double", HCOMM_FLOAT64},
    {"int8", HCOMM_INT8},         {"uint8", HCOMM_UINT8},
    {"int32", HCOMM_INT32},       {"uint32", HCOMM_UINT32},
    {"int64", HCOMM_INT64},       {"uint64", HCOMM_UINT64},
    {"float32", HCOMM_FLOAT32},   {"fp32", HCOMM_FLOAT32},
    {"float16", HCOMM_FLOAT16},   {"fp16", HCOMM_FLOAT16},
    {"bf16", HCOMM_BFLOAT16},     {"float64", HCOMM_FLOAT64},
    {"fp64", HCOMM_FLOAT64},      {"char", HCOMM_INT8},
    {"int", HCOMM_INT32},         {NULL, 0},
};

/* Indexed by hcomm_dtype_t. */
static const char *const hb_dtype_cnames[HCOMM_DTYPE_COUNT] = {
    [HCOMM_INT8] = "int8",       [HCOMM_UINT8] = "uint8",       [HCOMM_INT32] = "int32",
    [HCOMM_UINT32] = "uint32",   [HCOMM_INT64] = "int64",       [HCOMM_UINT64] = "uint64",
    [HCOMM_FLOAT16] = "float16", [HCOMM_BFLOAT16] = "bfloat16", [HCOMM_FLOAT32] = "float32",
    [HCOMM_FLOAT64] = "float64",
};

static const struct hb_name hb_op_names[] = {
    {"sum", HCOMM_SUM}, {"prod", HCOMM_PROD}, {"max", HCOMM_MAX}, {"min", HCOMM_MIN},
    {"avg", HCOMM_AVG}, {"all", HB_OP_ALL},   {NULL, 0},
};

static int hb_lookup(const struct hb_name *names, const char *s, int *value_p)
{
    for (; names->name; names++) {
        if (!strcmp(names->name, s)) {
            *value_p = names->value;
            return 0;
        }
    }
    return -1;
}

const char *hb_dtype_name(hcomm_dtype_t dtype)
{
    /* the first ten entries are the canonical names, one per dtype */
    for (int i = 0; i < HCOMM_DTYPE_COUNT; i++)
        if (hb_dtype_names[i].value == (int)dtype) return hb_dtype_names[i].name;
    return "?";
}

const char *hb_dtype_cname(hcomm_dtype_t dtype)
{
    return (unsigned)dtype < HCOMM_DTYPE_COUNT ? hb_dtype_cnames[dtype] : "?";
}

const char *hb_op_name(int op)
{
    if (op == HB_OP_NONE) return "none";
    for (const struct hb_name *n = hb_op_names; n->name; n++)
        if (n->value == op) return n->name;
    return "?";
}

/* Long options without a short letter. */
#define HB_OPT_CSV 0x100
#define HB_OPT_SHOW_PROFILE 0x101

/* "0" or "1" .. "max" as one digit. */
static int hb_parse_digit(const char *s, int max, int *v_p)
{
    if (s[0] < '0' || s[0] > '0' + max || s[1]) return -1;
    *v_p = s[0] - '0';
    return 0;
}

void hb_opts_parse(int argc, char **argv, enum hb_tool tool, struct hb_opts *opts_p)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"root", required_argument, NULL, 'r'},
        {"check", required_argument, NULL, 'c'},
        {"blocking", required_argument, NULL, 'z'},
        {"average", required_argument, NULL, 'a'},
        {"mode", required_argument, NULL, 'M'},
        {"window", required_argument, NULL, 'W'},
        {"profile", required_argument, NULL, 'p'},
        {"builtin", required_argument, NULL, 'P'},
        {"show-profile", no_argument, NULL, HB_OPT_SHOW_PROFILE},
        {"mem", required_argument, NULL, 'm'},
        {"json", required_argument, NULL, 'J'},
        {"csv", no_argument, NULL, HB_OPT_CSV},
        {"help", no_argument, NULL, 'h'},
        /* nccl-tests' names */
        {"stepbytes", required_argument, NULL, 'i'},
        {"run_cycles", required_argument, NULL, 'N'},
        {"timeout", required_argument, NULL, 'T'},
        {"ngpus", required_argument, NULL, 'g'},
        {"nthreads", required_argument, NULL, 't'},
        {"report_cputime", required_argument, NULL, 'C'},
        {"local_register", required_argument, NULL, 'R'},
        {"cudagraph", required_argument, NULL, 'G'},
        {NULL, 0, NULL, 0},
    };
    /* the letters each tool takes; a long option is accepted when its
     * letter is (the option-less ones are checked below) */
    static const char *const shortopts[] = {
        [HB_TOOL_PINGPONG] = ":b:e:f:i:n:w:M:W:m:J:T:g:t:h",
        [HB_TOOL_COLL] = ":b:e:f:i:n:w:d:o:r:c:z:a:m:J:N:T:g:t:C:R:G:h",
        [HB_TOOL_MIXED] = ":p:P:n:w:c:z:a:m:J:T:g:t:h",
    };
    struct hb_opts o = {
        .min_bytes = 8,
        .max_bytes = tool == HB_TOOL_COLL ? (size_t)32 << 20 : (size_t)4 << 20,
        .factor = 2,
        .iters = -1,
        .warmup = -1,
        .dtype = HCOMM_FLOAT32,
        .op = HCOMM_SUM,
        .root = 0,
        .check = 1,
        .blocking = tool != HB_TOOL_MIXED, /* a step overlaps its messages */
        .average = HB_AVG_MAX, /* the slowest rank, as the peers' mpi_bench.c reports */
        .mode = HB_PP_LAT,
        .window = 64,
        .cycles = 1,
    };
    int ch, v, idx = -1, factor_given = 0;
    long l;

    hb_prog_tool = tool;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, shortopts[tool], longopts, &idx)) != -1) {
        /* getopt_long() accepts every long option; refuse those whose
         * letter this tool does not take */
        if ((ch != '?' && ch != ':' && ch < 0x100 && !strchr(shortopts[tool] + 1, ch)) ||
            (ch == HB_OPT_SHOW_PROFILE && tool != HB_TOOL_MIXED))
            hb_usage_error("option '--%s' is not an option of %s", longopts[idx].name, hb_prog);
        idx = -1;
        switch (ch) {
        case 'b':
            if (hb_parse_size(optarg, &o.min_bytes))
                hb_usage_error("-b: bad size '%s' (BYTES with an optional K, M or G suffix)",
                               optarg);
            break;
        case 'e':
            if (hb_parse_size(optarg, &o.max_bytes))
                hb_usage_error("-e: bad size '%s' (BYTES with an optional K, M or G suffix)",
                               optarg);
            break;
        case 'f':
            if (hb_parse_int(optarg, 2, INT_MAX, &l))
                hb_usage_error("-f: bad step factor '%s' (an integer >= 2)", optarg);
            o.factor = (size_t)l;
            factor_given = 1;
            break;
        case 'n':
            if (hb_parse_int(optarg, 1, INT_MAX / 2, &l))
                hb_usage_error("-n: bad iteration count '%s' (an integer >= 1)", optarg);
            o.iters = (int)l;
            break;
        case 'w':
            if (hb_parse_int(optarg, 0, INT_MAX / 2, &l))
                hb_usage_error("-w: bad warmup count '%s' (an integer >= 0)", optarg);
            o.warmup = (int)l;
            break;
        case 'd':
            if (!strcmp(optarg, "all")) {
                o.dtype_all = 1;
                break;
            }
            if (hb_lookup(hb_dtype_names, optarg, &v))
                hb_usage_error("-d: unknown data type '%s'", optarg);
            o.dtype = (hcomm_dtype_t)v;
            o.dtype_all = 0;
            break;
        case 'o':
            if (hb_lookup(hb_op_names, optarg, &v))
                hb_usage_error("-o: unknown op '%s' (sum, prod, max, min, avg or all)", optarg);
            o.op = v;
            break;
        case 'r':
            if (hb_parse_int(optarg, 0, INT_MAX, &l))
                hb_usage_error("-r: bad root '%s' (a rank >= 0)", optarg);
            o.root = (int)l;
            break;
        case 'c':
            if (hb_parse_digit(optarg, 1, &o.check))
                hb_usage_error("-c: bad value '%s' (0 or 1)", optarg);
            break;
        case 'z':
            if (hb_parse_digit(optarg, 1, &o.blocking))
                hb_usage_error("-z: bad value '%s' (1 blocking calls, 0 non-blocking)", optarg);
            break;
        case 'a':
            if (hb_parse_digit(optarg, 3, &o.average))
                hb_usage_error("-a: bad value '%s' (0 rank 0, 1 mean, 2 min, 3 max)", optarg);
            break;
        case 'M':
            if (!strcmp(optarg, "lat"))
                o.mode = HB_PP_LAT;
            else if (!strcmp(optarg, "bw"))
                o.mode = HB_PP_BW;
            else if (!strcmp(optarg, "bibw"))
                o.mode = HB_PP_BIBW;
            else
                hb_usage_error("-M: bad mode '%s' (lat, bw or bibw)", optarg);
            break;
        case 'W':
            if (hb_parse_int(optarg, 1, 1 << 20, &l))
                hb_usage_error("-W: bad window '%s' (an integer from 1 to 1048576)", optarg);
            o.window = (int)l;
            break;
        case 'p':
            o.profile_file = optarg;
            o.profile_name = NULL;
            break;
        case 'P':
            o.profile_name = optarg;
            o.profile_file = NULL;
            break;
        case HB_OPT_SHOW_PROFILE:
            o.show_profile = 1;
            break;
        case 'm':
            if (!strcmp(optarg, "malloc"))
                o.mem_hcomm = 0;
            else if (!strcmp(optarg, "hcomm"))
                o.mem_hcomm = 1;
            else if (!strcmp(optarg, "device"))
                o.mem_hcomm = HB_MEM_DEVICE;
            else
                hb_usage_error("-m: bad memory kind '%s' (malloc, hcomm or device)", optarg);
            break;
        case 'J':
            if (!optarg[0]) hb_usage_error("-J: empty file name");
            o.json = optarg;
            break;
        case HB_OPT_CSV:
            o.csv = 1;
            break;
        case 'i':
            if (hb_parse_size(optarg, &o.step_bytes) || !o.step_bytes)
                hb_usage_error("-i: bad step '%s' (BYTES >= 1 added to each size, K/M/G "
                               "suffixes allowed)", optarg);
            break;
        case 'N':
            if (hb_parse_int(optarg, 1, 1000000, &l))
                hb_usage_error("-N: bad run count '%s' (1 to 1000000; nccl-tests' 0, forever, "
                               "is refused: every run of hcomm's tools ends)", optarg);
            o.cycles = (int)l;
            break;
        case 'T': {
            char *end;
            double t = strtod(optarg, &end);
            if (end == optarg || *end || !(t > 0) || t > 1e9)
                hb_usage_error("-T: bad timeout '%s' (seconds > 0)", optarg);
            /* the limit of every wait of the job, read by hcomm_init */
            setenv("HCOMM_TIMEOUT", optarg, 1);
            break;
        }
        case 'g':
            hb_usage_error("-g: GPUs per process: hcomm runs on CPU memory for now (GPU "
                           "buffers come with the GPU work); run one process per device "
                           "instead (hcommrun -n N)");
        case 't':
            hb_usage_error("-t: threads per process: hcomm's calls are serialized per process "
                           "(one progress engine; the threading contract in hcomm.h), so threads "
                           "would measure a lock; run more processes instead (hcommrun -n N)");
        case 'C':
            hb_usage_error("-C: there is no device time to report: the time columns are "
                           "already the host's wall-clock time");
        case 'R':
            hb_usage_error("-R: buffers need no registering by hand: hcomm registers them "
                           "through its registration cache; -m hcomm takes them from hcomm's "
                           "pool, registered up front");
        case 'G':
            hb_usage_error("-G: CUDA graphs: no GPU support yet (the GPU work)");
        case 'h':
            if (hb_rank == 0) hb_usage_print(stdout);
            if (hcomm_initialized()) hcomm_finalize();
            exit(0);
        case ':':
            hb_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt) hb_usage_error("unknown option '-%c'", optopt);
            hb_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) hb_usage_error("unexpected argument '%s'", argv[optind]);
    if (o.min_bytes > o.max_bytes)
        hb_usage_error("-b %zu is larger than -e %zu", o.min_bytes, o.max_bytes);
    if (o.step_bytes && factor_given)
        hb_usage_error("-i and -f: give one (-i adds BYTES to each size, -f multiplies it)");
    *opts_p = o;
}

int hb_size_next(const struct hb_opts *opts, size_t *size_p)
{
    size_t s = *size_p;

    if (opts->step_bytes) {
        if (s > opts->max_bytes - opts->step_bytes) return 0;
        *size_p = s + opts->step_bytes;
        return 1;
    }
    if (s == 0)
        s = 1;
    else if (s > opts->max_bytes / opts->factor)
        return 0;
    else
        s *= opts->factor;
    if (s > opts->max_bytes) return 0;
    *size_p = s;
    return 1;
}

/* ------------------------------------------------------------------------
 * Buffers
 * ---------------------------------------------------------------------- */

const char *hb_mem_name(int mem)
{
    return mem == HB_MEM_DEVICE ? "device" : mem ? "hcomm" : "malloc";
}

void *hb_buf_alloc(size_t bytes, int mem_hcomm)
{
    size_t rounded;
    void *buf = NULL;

    if (bytes == 0) bytes = 1;
    if (mem_hcomm == HB_MEM_DEVICE) { /* refused by name where no GPU backend is active */
        hb_check(hcomm_mem_alloc_device(0, bytes, &buf), "-m device: hcomm_mem_alloc_device");
        return buf;
    }
    if (mem_hcomm) {
        hb_check(hcomm_mem_alloc(bytes, &buf), "hcomm_mem_alloc");
        return buf;
    }
    rounded = (bytes + 4095) & ~(size_t)4095;
    if (rounded < bytes || !(buf = aligned_alloc(4096, rounded))) {
        fprintf(stderr, "rank %d: aligned_alloc of %zu bytes failed\n", hb_rank, bytes);
        exit(1);
    }
    return buf;
}

void hb_buf_free(void *buf, size_t bytes, int mem_hcomm)
{
    if (!buf) return;
    if (mem_hcomm == HB_MEM_DEVICE) {
        hb_check(hcomm_mem_free_device(buf), "hcomm_mem_free_device");
        return;
    }
    if (mem_hcomm) {
        hb_check(hcomm_mem_free(buf), "hcomm_mem_free");
        return;
    }
    hb_check(hcomm_mem_deregister(buf, bytes ? bytes : 1), "hcomm_mem_deregister");
    free(buf);
}

/* ------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------- */

static int hb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void hb_stats_compute(double *v, size_t n, struct hb_stats *stats_p)
{
    struct hb_stats s = {0};
    double sum = 0;

    if (n) {
        for (size_t i = 0; i < n; i++)
            sum += v[i];
        qsort(v, n, sizeof(double), hb_cmp_double);
        s.mean = sum / (double)n;
        s.min = v[0];
        s.max = v[n - 1];
        s.p50 = v[n / 2];
        s.p99 = v[(size_t)((double)n * 0.99)];
    }
    *stats_p = s;
}

void hb_times_reduce(double *v, size_t n, int average, hcomm_comm_t comm)
{
    int nranks = hcomm_comm_size(comm);

    switch (average) {
    case HB_AVG_RANK0:
        hb_check(hcomm_broadcast(v, n, HCOMM_FLOAT64, 0, comm), "hcomm_broadcast");
        break;
    case HB_AVG_MEAN:
        hb_check(hcomm_allreduce(v, v, n, HCOMM_FLOAT64, HCOMM_SUM, comm), "hcomm_allreduce");
        for (size_t i = 0; i < n; i++)
            v[i] /= nranks;
        break;
    case HB_AVG_MIN:
        hb_check(hcomm_allreduce(v, v, n, HCOMM_FLOAT64, HCOMM_MIN, comm), "hcomm_allreduce");
        break;
    default:
        hb_check(hcomm_allreduce(v, v, n, HCOMM_FLOAT64, HCOMM_MAX, comm), "hcomm_allreduce");
        break;
    }
}

const char *hb_average_name(int average)
{
    static const char *const names[] = {"rank0", "mean", "min", "max"};
    return (unsigned)average < 4 ? names[average] : "?";
}

/* ------------------------------------------------------------------------
 * JSON lines
 * ---------------------------------------------------------------------- */

FILE *hb_json_open(const char *path, hcomm_comm_t comm)
{
    FILE *f = NULL;
    int err = 0;

    if (!path) return NULL;
    if (hcomm_comm_rank(comm) == 0 && !(f = fopen(path, "w"))) err = errno;
    hb_check(hcomm_broadcast(&err, 1, HCOMM_INT32, 0, comm), "hcomm_broadcast");
    if (err) hb_usage_error("-J: cannot open '%s' for writing: %s", path, strerror(err));
    return f;
}

void hb_json_close(FILE *f, const char *path)
{
    if (!f) return;
    if (ferror(f) | fclose(f)) {
        fprintf(stderr, "%s: -J: writing '%s' failed: %s\n", hb_prog, path, strerror(errno));
        exit(1);
    }
}

static void hb_json_put(struct hb_json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void hb_json_put(struct hb_json *j, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (j->len >= sizeof(j->buf)) return;
    va_start(ap, fmt);
    n = vsnprintf(j->buf + j->len, sizeof(j->buf) - j->len, fmt, ap);
    va_end(ap);
    j->len = n < 0 ? sizeof(j->buf) : j->len + (size_t)n;
}

static void hb_json_key(struct hb_json *j, const char *key)
{
    hb_json_put(j, "%s\"%s\":", j->len > 1 ? "," : "", key);
}

void hb_json_begin(struct hb_json *j)
{
    j->len = 0;
    hb_json_put(j, "{");
}

void hb_json_str(struct hb_json *j, const char *key, const char *val)
{
    hb_json_key(j, key);
    hb_json_put(j, "\"");
    for (const unsigned char *p = (const unsigned char *)val; *p; p++) {
        if (*p == '"' || *p == '\\')
            hb_json_put(j, "\\%c", *p);
        else if (*p < 0x20)
            hb_json_put(j, "\\u%04x", *p);
        else
            hb_json_put(j, "%c", *p);
    }
    hb_json_put(j, "\"");
}

void hb_json_int(struct hb_json *j, const char *key, long long v)
{
    hb_json_key(j, key);
    hb_json_put(j, "%lld", v);
}

void hb_json_num(struct hb_json *j, const char *key, double v)
{
    hb_json_key(j, key);
    if (v != v || v > DBL_MAX || v < -DBL_MAX)
        hb_json_put(j, "null");
    else
        hb_json_put(j, "%.9g", v);
}

void hb_json_null(struct hb_json *j, const char *key)
{
    hb_json_key(j, key);
    hb_json_put(j, "null");
}

void hb_json_write(struct hb_json *j, FILE *f)
{
    hb_json_put(j, "}\n");
    if (!f) return;
    if (j->len >= sizeof(j->buf)) {
        fprintf(stderr, "%s: -J: a JSON line is longer than %zu bytes (a bug)\n", hb_prog,
                sizeof(j->buf));
        exit(1);
    }
    fputs(j->buf, f);
    fflush(f);
}

/* ------------------------------------------------------------------------
 * fp16 / bf16
 * ---------------------------------------------------------------------- */

uint16_t hb_half_from_float(float f)
{
    uint32_t x, ax, sign, h, rem, mant, shift;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: stay quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {   /* below 2^-14: a half subnormal or zero */
        if (ax < 0x33000000u) /* below 2^-25: rounds to zero */
            return (uint16_t)sign;
        shift = 126 - (ax >> 23);
        mant = (ax & 0x7fffffu) | 0x800000u;
        h = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        if (rem > (1u << (shift - 1)) || (rem == (1u << (shift - 1)) && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    ax -= 0x38000000u; /* rebias the exponent from 127 to 15 */
    h = ax >> 13;
    rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is the right result */
    return (uint16_t)(sign | h);
}

float hb_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;

    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        x = sign | ((e + 112) << 23) | (m << 13);
    } else if (!m) {
        x = sign;
    } else {
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t hb_bf16_from_float(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

float hb_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;

    memcpy(&f, &x, sizeof(f));
    return f;
}

/* ------------------------------------------------------------------------
 * Reference data
 * ---------------------------------------------------------------------- */

static int hb_dtype_is_float(hcomm_dtype_t dtype)
{
    return dtype == HCOMM_FLOAT16 || dtype == HCOMM_BFLOAT16 || dtype == HCOMM_FLOAT32 ||
           dtype == HCOMM_FLOAT64;
}

/* Largest n such that every integer in [0, n] is exact in the dtype. */
static int64_t hb_exact_limit(hcomm_dtype_t dtype)
{
    switch (dtype) {
    case HCOMM_FLOAT16:
        return 2048;
    case HCOMM_BFLOAT16:
        return 256;
    case HCOMM_FLOAT32:
        return (int64_t)1 << 24;
    case HCOMM_FLOAT64:
        return (int64_t)1 << 53;
    default:
        return INT64_MAX; /* integers wrap, and the reference wraps alike */
    }
}

int64_t hb_value(hcomm_dtype_t dtype, int op, int rank, int nranks, size_t idx)
{
    size_t r = (size_t)rank, n = (size_t)nranks;

    switch (op) {
    case HCOMM_AVG:
        if (hb_dtype_is_float(dtype)) {
            /* the sum is n * base, so the average is exact: base + 1 on one
             * rank, base - 1 on the next */
            int64_t base = 3 * (int64_t)n + 1 <= hb_exact_limit(dtype) ? (int64_t)(idx % 3) + 1 : 1;
            return base + (r == idx % n) - (r == (idx + 1) % n);
        }
        /* integers: the truncating division of an uneven sum is the test */
        /* fall through */
    case HCOMM_SUM:
        if (3 * (int64_t)n <= hb_exact_limit(dtype)) return (int64_t)((r + idx) % 3) + 1;
        return r == idx % n ? (int64_t)(idx % 3) + 1 : 0;
    case HCOMM_PROD:
        return idx % (n + 1) == r ? 2 : 1;
    case HCOMM_MAX:
    case HCOMM_MIN:
        return (int64_t)((idx % 11 + (r % 11) * 3) % 11) + 1;
    default:
        return (int64_t)((idx % 113 * 7 + (r % 113) * 37 + 1) % 113);
    }
}

/* v reduced to the dtype's width, read back as that dtype's value. */
static int64_t hb_int_wrap(hcomm_dtype_t dtype, int64_t v)
{
    switch (dtype) {
    case HCOMM_INT8:
        return (int8_t)(uint8_t)v;
    case HCOMM_UINT8:
        return (uint8_t)v;
    case HCOMM_INT32:
        return (int32_t)(uint32_t)v;
    case HCOMM_UINT32:
        return (uint32_t)v;
    default:
        return v;
    }
}

static int64_t hb_expected(hcomm_dtype_t dtype, int op, int nranks, size_t idx)
{
    int64_t acc = hb_value(dtype, op, 0, nranks, idx);

    for (int r = 1; r < nranks; r++) {
        int64_t v = hb_value(dtype, op, r, nranks, idx);
        switch (op) {
        case HCOMM_SUM:
        case HCOMM_AVG:
            acc += v;
            break;
        case HCOMM_PROD:
            acc *= v;
            break;
        case HCOMM_MAX:
            acc = v > acc ? v : acc;
            break;
        case HCOMM_MIN:
            acc = v < acc ? v : acc;
            break;
        }
    }
    if (op == HCOMM_AVG)
        acc = hb_dtype_is_float(dtype) ? acc / nranks : hb_int_wrap(dtype, acc) / nranks;
    return acc;
}

static void hb_elem_store(hcomm_dtype_t dtype, void *buf, size_t k, int64_t v)
{
    switch (dtype) {
    case HCOMM_INT8:
    case HCOMM_UINT8:
        ((uint8_t *)buf)[k] = (uint8_t)v;
        break;
    case HCOMM_INT32:
    case HCOMM_UINT32:
        ((uint32_t *)buf)[k] = (uint32_t)v;
        break;
    case HCOMM_INT64:
    case HCOMM_UINT64:
        ((uint64_t *)buf)[k] = (uint64_t)v;
        break;
    case HCOMM_FLOAT16:
        ((uint16_t *)buf)[k] = hb_half_from_float((float)v);
        break;
    case HCOMM_BFLOAT16:
        ((uint16_t *)buf)[k] = hb_bf16_from_float((float)v);
        break;
    case HCOMM_FLOAT32:
        ((float *)buf)[k] = (float)v;
        break;
    case HCOMM_FLOAT64:
        ((double *)buf)[k] = (double)v;
        break;
    default:
        break;
    }
}

/* For messages only. */
static double hb_elem_load(hcomm_dtype_t dtype, const void *buf, size_t k)
{
    switch (dtype) {
    case HCOMM_INT8:
        return ((const int8_t *)buf)[k];
    case HCOMM_UINT8:
        return ((const uint8_t *)buf)[k];
    case HCOMM_INT32:
        return ((const int32_t *)buf)[k];
    case HCOMM_UINT32:
        return ((const uint32_t *)buf)[k];
    case HCOMM_INT64:
        return (double)((const int64_t *)buf)[k];
    case HCOMM_UINT64:
        return (double)((const uint64_t *)buf)[k];
    case HCOMM_FLOAT16:
        return hb_half_to_float(((const uint16_t *)buf)[k]);
    case HCOMM_BFLOAT16:
        return hb_bf16_to_float(((const uint16_t *)buf)[k]);
    case HCOMM_FLOAT32:
        return ((const float *)buf)[k];
    case HCOMM_FLOAT64:
        return ((const double *)buf)[k];
    default:
        return 0;
    }
}

/*
 * Fast paths. hb_value() depends on idx only through idx modulo a small
 * period (the sum patterns through idx mod 3 and idx mod n, products
 * through idx mod n+1, max/min mod 11, data movement mod 113), and so does
 * the reduced value. Big buffers are then filled by copying, and checked by
 * comparing, whole stretches of one precomputed run of the pattern; a
 * stretch that differs goes through the per-element code, which describes
 * the mismatch. The run is computed with hb_value() itself and verified
 * periodic, so an edit of hb_value() that breaks the period only costs the
 * fast path, never a check.
 */
#define HB_FAST_MIN_BYTES 65536 /* below: per element */
#define HB_RUN_BYTES 16384      /* at least this much of the pattern per copy */

struct hb_run {
    size_t period, len; /* elements: len is a multiple of period */
    unsigned char *bytes;
};

static size_t hb_gcd(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static size_t hb_period(int op, size_t n)
{
    switch (op) {
    case HCOMM_SUM:
    case HCOMM_AVG:
        return 3 * n / hb_gcd(3, n);
    case HCOMM_PROD:
        return n + 1;
    case HCOMM_MAX:
    case HCOMM_MIN:
        return 11;
    default:
        return 113;
    }
}

/* Element idx of the pattern: rank's value, or the reduction (HB_REDUCED). */
static int64_t hb_ref(hcomm_dtype_t dtype, int op, int rank, size_t idx)
{
    return rank == HB_REDUCED ? hb_expected(dtype, op, hb_nranks, idx)
                              : hb_value(dtype, op, rank, hb_nranks, idx);
}

/* 0 with run_p set, -1 when the fast path is not available. */
static int hb_run_make(hcomm_dtype_t dtype, int op, int rank, struct hb_run *run_p)
{
    size_t esize = hcomm_dtype_size(dtype), period = hb_period(op, (size_t)hb_nranks), len;
    unsigned char *bytes;

    if (period > HB_RUN_BYTES) return -1;
    len = (HB_RUN_BYTES / esize + period - 1) / period * period;
    if (len < 2 * period) len = 2 * period;
    if (!(bytes = malloc(len * esize))) return -1;
    for (size_t j = 0; j < len; j++)
        hb_elem_store(dtype, bytes, j, hb_ref(dtype, op, rank, j));
    for (size_t j = period; j < len; j++) {
        if (memcmp(bytes + j * esize, bytes + (j % period) * esize, esize)) {
            free(bytes);
            return -1;
        }
    }
    run_p->period = period;
    run_p->len = len;
    run_p->bytes = bytes;
    return 0;
}

/* Elements [k, k + *n_p) of a buffer starting at pattern index first are
 * bytes of the run from the returned offset on; sets *n_p. */
static const unsigned char *hb_run_at(const struct hb_run *run, size_t esize, size_t first,
                                      size_t k, size_t left, size_t *n_p)
{
    size_t j = (first + k) % run->period;

    *n_p = run->len - j < left ? run->len - j : left;
    return run->bytes + j * esize;
}

void hb_fill(void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op, int rank)
{
    size_t esize = hcomm_dtype_size(dtype), n = 0;
    struct hb_run run;

    if (count * esize >= HB_FAST_MIN_BYTES && !hb_run_make(dtype, op, rank, &run)) {
        for (size_t k = 0; k < count; k += n) {
            const unsigned char *from = hb_run_at(&run, esize, first, k, count - k, &n);
            memcpy((char *)buf + k * esize, from, n * esize);
        }
        free(run.bytes);
        return;
    }
    for (size_t k = 0; k < count; k++)
        hb_elem_store(dtype, buf, k, hb_value(dtype, op, rank, hb_nranks, first + k));
}

void hb_fill_sentinel(void *buf, size_t count, hcomm_dtype_t dtype)
{
    memset(buf, 0xff, count * hcomm_dtype_size(dtype));
}

/* The per-element check of buf[0, count), pattern index first on; the
 * first mismatch is described unless *noted (then set). */
static size_t hb_count_wrong_slow(const char *buf, size_t first, size_t count, hcomm_dtype_t dtype,
                                  int op, int rank, const char *what, int *noted)
{
    static int reported;
    size_t esize = hcomm_dtype_size(dtype), wrong = 0;
    uint64_t want;

    for (size_t k = 0; k < count; k++) {
        hb_elem_store(dtype, &want, 0, hb_ref(dtype, op, rank, first + k));
        if (!memcmp(&want, buf + k * esize, esize)) continue;
        wrong++;
        if (!*noted && reported < 8) {
            *noted = 1;
            reported++;
            fprintf(stderr, "rank %d: %s: element %zu is %.17g, expected %.17g\n", hb_rank, what,
                    first + k, hb_elem_load(dtype, buf, k), hb_elem_load(dtype, &want, 0));
        }
    }
    return wrong;
}

size_t hb_count_wrong(const void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op,
                      int rank, const char *what)
{
    size_t esize = hcomm_dtype_size(dtype), wrong = 0, n = 0;
    const char *p = buf;
    struct hb_run run;
    int noted = 0;

    if (count * esize < HB_FAST_MIN_BYTES || hb_run_make(dtype, op, rank, &run))
        return hb_count_wrong_slow(p, first, count, dtype, op, rank, what, &noted);
    for (size_t k = 0; k < count; k += n) {
        const unsigned char *want = hb_run_at(&run, esize, first, k, count - k, &n);
        if (memcmp(p + k * esize, want, n * esize))
            wrong +=
                hb_count_wrong_slow(p + k * esize, first + k, n, dtype, op, rank, what, &noted);
    }
    free(run.bytes);
    return wrong;
}

/* ------------------------------------------------------------------------
 * Collective harness
 * ---------------------------------------------------------------------- */

struct hb_phase {
    double us;            /* the mean time of one call, reduced over ranks as -a says */
    struct hb_stats iter; /* per-iteration times, reduced over ranks as -a says */
    double algbw, busbw;
    int64_t wrong; /* -1: not checked */
};

void hb_coll_call(const struct hb_coll *coll, const struct hb_coll_ctx *c, int in_place,
                  int blocking)
{
    hcomm_request_t req;
    hcomm_status_t st;
    char call[64];

    /* the name is formatted only on failure: nothing but the call in the
     * timed loop */
    if (blocking) {
        st = coll->run(c, in_place);
        if (st != HCOMM_OK) {
            snprintf(call, sizeof(call), "hcomm_%s", coll->name);
            hb_check(st, call);
        }
        return;
    }
    st = coll->irun(c, in_place, &req);
    if (st != HCOMM_OK) {
        snprintf(call, sizeof(call), "hcomm_i%s", coll->name);
        hb_check(st, call);
    }
    hb_check(hcomm_wait(req), "hcomm_wait");
}

/*
 * One block (out-of-place or in-place) of a row. Each iteration is timed on
 * its own, one clock read between calls, so the loop costs what the
 * back-to-back loop of nccl-tests costs. Each iteration's time is reduced
 * over the ranks (-a), and time, p50, p99, min and max all come from that
 * one series: time is its mean. (nccl-tests' time is the slowest rank's
 * mean, the mean of each rank's own series: at most ours, and it can fall
 * below the p50 of the slowest-per-iteration series, which read as a
 * contradiction; docs/bench.md, "Columns".)
 */
/* -m device: to 1, the host copies' bytes to the device buffers, which the
 * calls then get; to 0, the device bytes back into the host copies, which
 * fill and check get again; -1: the host copies again, nothing moved. */
void hb_dev_move(struct hb_coll_ctx *c, int to_device)
{
    if (!c->dsend && !c->drecv) return;
    if (to_device == 1) {
        if (c->dsend) hb_check(hcomm_memcpy(c->dsend, c->hsend, c->send_bytes), "hcomm_memcpy");
        if (c->drecv) hb_check(hcomm_memcpy(c->drecv, c->hrecv, c->recv_bytes), "hcomm_memcpy");
        c->sendbuf = c->dsend;
        c->recvbuf = c->drecv;
        return;
    }
    if (to_device == 0) {
        if (c->dsend) hb_check(hcomm_memcpy(c->hsend, c->dsend, c->send_bytes), "hcomm_memcpy");
        if (c->drecv) hb_check(hcomm_memcpy(c->hrecv, c->drecv, c->recv_bytes), "hcomm_memcpy");
    }
    c->sendbuf = c->hsend;
    c->recvbuf = c->hrecv;
}

static void hb_coll_phase(const struct hb_coll *coll, struct hb_coll_ctx *c,
                          const struct hb_opts *o, int in_place, int iters, int warmup,
                          double busbw_factor, size_t bytes, double *lat, struct hb_phase *ph)
{
    char what[160], what_input[192];
    int64_t wrong, total;
    uint64_t t0, t1;

    snprintf(what, sizeof(what), "%s %s %s count %zu root %d %s %s", coll->name,
             hb_dtype_name(c->dtype), hb_op_name(c->op), c->count, c->root,
             in_place ? "in-place" : "out-of-place", o->blocking ? "blocking" : "non-blocking");
    snprintf(what_input, sizeof(what_input), "%s: input buffer changed", what);
    c->what = what;
    c->what_input = what_input;

    /* defined inputs: garbage could hold NaNs or denormals that slow floats */
    coll->fill(c, in_place);
    hb_dev_move(c, 1);
    for (int i = 0; i < warmup; i++)
        hb_coll_call(coll, c, in_place, o->blocking);
    hb_check(hcomm_barrier(c->comm), "hcomm_barrier");
    t0 = hb_now_ns();
    for (int i = 0; i < iters; i++) {
        hb_coll_call(coll, c, in_place, o->blocking);
        t1 = hb_now_ns();
        lat[i] = (double)(t1 - t0) / 1e3;
        t0 = t1;
    }
    /* one series: each iteration's time reduced over the ranks (-a; the
     * slowest rank's by default); time is its mean, p50/p99/min/max its
     * order statistics, so min <= time <= max and min <= p50 <= p99 <= max */
    hb_times_reduce(lat, (size_t)iters, o->average, c->comm);
    hb_stats_compute(lat, (size_t)iters, &ph->iter);
    ph->us = ph->iter.mean;
    ph->algbw = bytes && ph->us > 0 ? (double)bytes / ph->us / 1e3 : 0;
    ph->busbw = ph->algbw * busbw_factor;
    ph->wrong = -1;
    hb_dev_move(c, -1);
    if (!o->check) return;
    coll->fill(c, in_place);
    hb_dev_move(c, 1);
    hb_coll_call(coll, c, in_place, o->blocking);
    hb_dev_move(c, 0);
    wrong = (int64_t)coll->check(c, in_place);
    hb_check(hcomm_allreduce(&wrong, &total, 1, HCOMM_INT64, HCOMM_SUM, c->comm),
             "hcomm_allreduce");
    ph->wrong = total;
}

static void hb_coll_header(const struct hb_coll *coll, const struct hb_opts *o)
{
    if (o->csv) {
        printf("size,count,type,redop,root,time_us,algbw_GBs,busbw_GBs,wrong,"
               "ip_time_us,ip_algbw_GBs,ip_busbw_GBs,ip_wrong,"
               "p50_us,p99_us,ip_p50_us,ip_p99_us\n");
        return;
    }
    char own[64];
    snprintf(own, sizeof(own), "%s_bw", coll->name);
    /* under an nccl-tests name (all_reduce_perf): say so, after what
     * scripts read */
    printf("# %s: %s\n", own, hcomm_version_string());
    if (strcmp(hb_prog, own)) printf("# run as %s, nccl-tests' name of %s\n", hb_prog, own);
    printf("# ranks %d  iters %s  warmup %s  check %d  mem %s  blocking %d  average %d (%s)\n",
           hb_nranks, o->iters < 0 ? "auto" : "fixed", o->warmup < 0 ? "auto" : "fixed", o->check,
           hb_mem_name(o->mem_hcomm), o->blocking, o->average, hb_average_name(o->average));
    printf("#\n");
    /* p50/p99 follow #wrong, so the columns of time (6) and busbw (8)
     * stay where scripts read them */
    printf("# %10s %12s %8s %6s %6s %51s %51s\n", "", "", "", "", "", "out-of-place", "in-place");
    printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %8s %8s %9s %8s %8s %6s %8s %8s\n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "p50", "p99",
           "time", "algbw", "busbw", "#wrong", "p50", "p99");
    printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %8s %8s %9s %8s %8s %6s %8s %8s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
           "(GB/s)", "(GB/s)", "", "(us)", "(us)");
}

static void hb_wrong_str(char *buf, size_t len, int64_t wrong)
{
    if (wrong < 0)
        snprintf(buf, len, "N/A");
    else
        snprintf(buf, len, "%lld", (long long)wrong);
}

static void hb_coll_row(const struct hb_opts *o, const struct hb_coll_ctx *c, size_t bytes,
                        size_t elems, const struct hb_phase *ph)
{
    char w0[32], w1[32];

    hb_wrong_str(w0, sizeof(w0), ph[0].wrong);
    hb_wrong_str(w1, sizeof(w1), ph[1].wrong);
    if (o->csv)
        printf("%zu,%zu,%s,%s,%d,%.3f,%.4f,%.4f,%s,%.3f,%.4f,%.4f,%s,%.3f,%.3f,%.3f,%.3f\n", bytes,
               elems, hb_dtype_name(c->dtype), hb_op_name(c->op), c->root, ph[0].us, ph[0].algbw,
               ph[0].busbw, w0, ph[1].us, ph[1].algbw, ph[1].busbw, w1, ph[0].iter.p50,
               ph[0].iter.p99, ph[1].iter.p50, ph[1].iter.p99);
    else
        printf("  %10zu %12zu %8s %6s %6d %9.2f %8.3f %8.3f %6s %8.2f %8.2f %9.2f %8.3f %8.3f %6s "
               "%8.2f %8.2f\n",
               bytes, elems, hb_dtype_name(c->dtype), hb_op_name(c->op), c->root, ph[0].us,
               ph[0].algbw, ph[0].busbw, w0, ph[0].iter.p50, ph[0].iter.p99, ph[1].us, ph[1].algbw,
               ph[1].busbw, w1, ph[1].iter.p50, ph[1].iter.p99);
    fflush(stdout);
}

static void hb_coll_json(FILE *f, const struct hb_coll *coll, const struct hb_opts *o,
                         const struct hb_coll_ctx *c, size_t bytes, size_t elems, int iters,
                         int in_place, const struct hb_phase *ph)
{
    struct hb_json j;
    char tool[64];

    if (!f) return;
    snprintf(tool, sizeof(tool), "%s_bw", coll->name);
    hb_json_begin(&j);
    hb_json_str(&j, "tool", tool);
    hb_json_str(&j, "lib", "hcomm");
    hb_json_int(&j, "nranks", c->nranks);
    hb_json_str(&j, "dtype", hb_dtype_cname(c->dtype));
    hb_json_str(&j, "op", hb_op_name(c->op));
    hb_json_int(&j, "root", c->root);
    hb_json_int(&j, "blocking", o->blocking);
    hb_json_int(&j, "in_place", in_place);
    hb_json_int(&j, "bytes", (long long)bytes);
    hb_json_int(&j, "count", (long long)elems);
    hb_json_num(&j, "time_us", ph->us);
    hb_json_num(&j, "p50_us", ph->iter.p50);
    hb_json_num(&j, "p99_us", ph->iter.p99);
    hb_json_num(&j, "min_us", ph->iter.min);
    hb_json_num(&j, "max_us", ph->iter.max);
    hb_json_num(&j, "algbw_GBps", ph->algbw);
    hb_json_num(&j, "busbw_GBps", ph->busbw);
    if (ph->wrong < 0)
        hb_json_null(&j, "wrong");
    else
        hb_json_int(&j, "wrong", (long long)ph->wrong);
    hb_json_int(&j, "call_count", (long long)c->count);
    hb_json_int(&j, "iters", iters);
    hb_json_str(&j, "average", hb_average_name(o->average));
    hb_json_str(&j, "mem", hb_mem_name(o->mem_hcomm));
    hb_json_write(&j, f);
}

/* The rows of one dtype over every size and op; returns its wrong
 * elements (summed over ranks). */
static int64_t hb_coll_dtype(const struct hb_coll *coll, const struct hb_opts *o,
                             hcomm_dtype_t dtype, const int *ops, int nops, double *lat, FILE *json,
                             double *bw_sum_p, int *bw_count_p)
{
    struct hb_coll_ctx c = {0};
    size_t max_elems, send_elems, recv_elems, last_elems = SIZE_MAX, size;
    int64_t total_wrong = 0;

    c.comm = hcomm_comm_world();
    c.rank = hb_rank;
    c.nranks = hb_nranks;
    c.dtype = dtype;
    c.esize = hcomm_dtype_size(dtype);
    c.root = coll->rooted ? o->root : -1;

    max_elems = o->max_bytes / c.esize;
    if (coll->per_rank) max_elems = max_elems / (size_t)c.nranks * (size_t)c.nranks;
    coll->buf_elems(max_elems, c.nranks, &send_elems, &recv_elems);
    c.sendbuf = send_elems ? hb_buf_alloc(send_elems * c.esize, o->mem_hcomm) : NULL;
    c.recvbuf = recv_elems ? hb_buf_alloc(recv_elems * c.esize, o->mem_hcomm) : NULL;
    if (o->mem_hcomm == HB_MEM_DEVICE) { /* fill and check work on host copies */
        c.dsend = c.sendbuf;
        c.drecv = c.recvbuf;
        c.send_bytes = send_elems * c.esize;
        c.recv_bytes = recv_elems * c.esize;
        c.sendbuf = c.hsend = send_elems ? hb_buf_alloc(c.send_bytes, 0) : NULL;
        c.recvbuf = c.hrecv = recv_elems ? hb_buf_alloc(c.recv_bytes, 0) : NULL;
    }

    size = o->min_bytes;
    do {
        size_t elems = size / c.esize, bytes;
        int iters, warmup;

        if (coll->per_rank) elems = elems / (size_t)c.nranks * (size_t)c.nranks;
        /* sizes that round to nothing, or to the previous row, add no row */
        if ((elems == 0 && size != 0) || elems == last_elems) continue;
        last_elems = elems;
        bytes = elems * c.esize;
        c.count = coll->per_rank ? elems / (size_t)c.nranks : elems;
        iters = o->iters >= 0 ? o->iters : hb_iters_for(bytes, 1000, 20);
        warmup = o->warmup >= 0 ? o->warmup : (iters / 10 + 1 > 5 ? iters / 10 + 1 : 5);
        for (int i = 0; i < nops; i++) {
            struct hb_phase ph[2];
            double factor = coll->busbw_factor(c.nranks);

            c.op = ops[i];
            for (int in_place = 0; in_place < 2; in_place++) {
                hb_coll_phase(coll, &c, o, in_place, iters, warmup, factor, bytes, lat,
                              &ph[in_place]);
                total_wrong += ph[in_place].wrong > 0 ? ph[in_place].wrong : 0;
                *bw_sum_p += ph[in_place].busbw;
                (*bw_count_p)++;
            }
            if (c.rank == 0) {
                hb_coll_row(o, &c, bytes, elems, ph);
                for (int in_place = 0; in_place < 2; in_place++)
                    hb_coll_json(json, coll, o, &c, bytes, elems, iters, in_place, &ph[in_place]);
            }
        }
    } while (hb_size_next(o, &size));

    if (o->mem_hcomm == HB_MEM_DEVICE) {
        hb_buf_free(c.hsend, c.send_bytes, 0);
        hb_buf_free(c.hrecv, c.recv_bytes, 0);
        c.sendbuf = c.dsend;
        c.recvbuf = c.drecv;
    }
    hb_buf_free(c.sendbuf, send_elems * c.esize, o->mem_hcomm);
    hb_buf_free(c.recvbuf, recv_elems * c.esize, o->mem_hcomm);
    return total_wrong;
}

int hb_coll_main(int argc, char **argv, const struct hb_coll *coll)
{
    static const int all_ops[] = {HCOMM_SUM, HCOMM_PROD, HCOMM_MAX, HCOMM_MIN, HCOMM_AVG};
    /* -d all: the order of the -d list in the usage */
    static const hcomm_dtype_t all_dtypes[] = {
        HCOMM_FLOAT32, HCOMM_FLOAT16, HCOMM_BFLOAT16, HCOMM_FLOAT64, HCOMM_INT8,
        HCOMM_UINT8,   HCOMM_INT32,   HCOMM_UINT32,   HCOMM_INT64,   HCOMM_UINT64,
    };
    struct hb_opts o;
    int ops[5], nops = 0, ndtypes, max_iters;
    int64_t total_wrong = 0;
    double bw_sum = 0, *lat;
    int bw_count = 0;
    FILE *json;

    hb_init(&argc, &argv);
    hb_opts_parse(argc, argv, HB_TOOL_COLL, &o);
    hb_start(&o);
    json = hb_json_open(o.json, hcomm_comm_world());

    if (!coll->reduces)
        ops[nops++] = HB_OP_NONE;
    else if (o.op == HB_OP_ALL)
        for (nops = 0; nops < 5; nops++)
            ops[nops] = all_ops[nops];
    else
        ops[nops++] = o.op;
    ndtypes = o.dtype_all ? (int)(sizeof(all_dtypes) / sizeof(all_dtypes[0])) : 1;
    max_iters = o.iters >= 0 ? o.iters : 1000;
    if (!(lat = malloc(sizeof(double) * ((size_t)max_iters + 1)))) {
        fprintf(stderr, "rank %d: out of memory for %d iteration times\n", hb_rank, max_iters);
        exit(1);
    }

    if (hb_rank == 0) hb_coll_header(coll, &o);
    for (int cycle = 0; cycle < o.cycles; cycle++) /* -N: the whole sweep again */
        for (int d = 0; d < ndtypes; d++)
            total_wrong += hb_coll_dtype(coll, &o, o.dtype_all ? all_dtypes[d] : o.dtype, ops,
                                         nops, lat, json, &bw_sum, &bw_count);

    if (hb_rank == 0) {
        if (!o.csv) {
            printf("# Out of bounds values : %lld %s\n", (long long)total_wrong,
                   total_wrong ? "FAILED" : "OK");
            printf("# Avg bus bandwidth : %.4f\n", bw_count ? bw_sum / bw_count : 0.0);
            printf("#\n");
        } else if (total_wrong) {
            fprintf(stderr, "%s: %lld wrong values: FAILED\n", hb_prog, (long long)total_wrong);
        }
        fflush(stdout);
    }
    hb_json_close(json, o.json);
    free(lat);
    hb_check(hcomm_finalize(), "hcomm_finalize");
    return total_wrong ? 1 : 0;
}
