/*
 * Shared code of the benchmark tools: arguments, the size loop, buffers,
 * dtype conversions, reference data and the collective harness.
 *
 * Checking a reduction needs a reference that does not depend on the
 * library's reduction order or accumulation precision (fp16/bf16 are summed
 * in fp32 per step and rounded per step). So inputs are small integers whose
 * every partial result is exactly representable in the dtype: then any order
 * gives the same bits, and the check is a bitwise compare against a
 * reference computed in int64 and converted once.
 *
 * Timing follows nccl-tests: warmup, barrier, a loop of back-to-back calls,
 * the per-call average; the row shows the slowest rank's average. The check
 * runs outside the timed loop, on a fresh run with freshly written inputs
 * and sentinel-filled outputs, so stale data cannot pass for a result.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
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
static int hb_prog_is_coll;

void hb_check(hcomm_status_t status, const char *what)
{
    if (status == HCOMM_OK) return;
    fprintf(stderr, "rank %d: %s failed: %s: %s\n", hb_rank, what, hcomm_strerror(status),
            hcomm_last_error());
    exit(1);
}

void hb_init(int *argc, char ***argv)
{
    hcomm_comm_t world;

    if (*argc > 0 && (*argv)[0]) {
        const char *slash = strrchr((*argv)[0], '/');
        hb_prog = slash ? slash + 1 : (*argv)[0];
    }
    hb_check(hcomm_init(argc, argv), "hcomm_init");
    world = hcomm_comm_world();
    hb_rank = hcomm_comm_rank(world);
    hb_nranks = hcomm_comm_size(world);
    if (hb_rank < 0 || hb_nranks < 1) {
        fprintf(stderr, "%s: hcomm_comm_rank/size of the world failed: %s\n", hb_prog,
                hcomm_last_error());
        exit(1);
    }
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
    fprintf(f,
            "usage: hcommrun -n NRANKS %s [options]\n"
            "  -b, --minbytes MIN      smallest size in bytes, K/M/G suffixes allowed "
            "(default 8; 0 allowed)\n"
            "  -e, --maxbytes MAX      largest size (default %s)\n"
            "  -f, --stepfactor F      multiply the size by F, an integer >= 2 (default 2)\n"
            "  -n, --iters N           timed iterations per size (default: by size, as the "
            "peers' mpi_bench.c)\n"
            "  -w, --warmup_iters N    warmup iterations per size (default: iters/10+1%s)\n",
            hb_prog, hb_prog_is_coll ? "32M" : "4M", hb_prog_is_coll ? ", at least 5" : "");
    if (hb_prog_is_coll)
        fprintf(f, "  -d, --datatype T        float|half|bfloat16|double|int8|uint8|int32|uint32|"
                   "int64|uint64 (default float)\n"
                   "  -o, --op OP             sum|prod|max|min|avg|all (default sum)\n"
                   "  -r, --root R            root rank of broadcast and reduce (default 0)\n"
                   "  -c, --check 0|1         check every result against an exact reference "
                   "(default 1)\n");
    fprintf(f, "  -m, --mem malloc|hcomm  buffers from aligned_alloc (default) or "
               "hcomm_mem_alloc\n"
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
    }
    if (hcomm_initialized()) hcomm_finalize();
    exit(2);
}

/* BYTES with an optional K, M or G (binary) suffix, optionally followed by B or iB. */
static int hb_parse_size(const char *s, size_t *size_p)
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

const char *hb_op_name(int op)
{
    if (op == HB_OP_NONE) return "none";
    for (const struct hb_name *n = hb_op_names; n->name; n++)
        if (n->value == op) return n->name;
    return "?";
}

void hb_opts_parse(int argc, char **argv, int is_coll, struct hb_opts *opts_p)
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
        {"mem", required_argument, NULL, 'm'},
        {"csv", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct hb_opts o = {
        .min_bytes = 8,
        .max_bytes = is_coll ? (size_t)32 << 20 : (size_t)4 << 20,
        .factor = 2,
        .iters = -1,
        .warmup = -1,
        .dtype = HCOMM_FLOAT32,
        .op = HCOMM_SUM,
        .root = 0,
        .check = 1,
    };
    const char *shortopts = is_coll ? ":b:e:f:n:w:d:o:r:c:m:h" : ":b:e:f:n:w:m:h";
    int ch, v;
    long l;

    hb_prog_is_coll = is_coll;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
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
            if (hb_lookup(hb_dtype_names, optarg, &v))
                hb_usage_error("-d: unknown data type '%s'", optarg);
            o.dtype = (hcomm_dtype_t)v;
            break;
        case 'o':
            if (hb_lookup(hb_op_names, optarg, &v))
                hb_usage_error("-o: unknown op '%s' (sum, prod, max, min, avg or all)", optarg);
            o.op = v;
            break;
        case 'r':
            if (hb_parse_int(optarg, 0, INT_MAX, &l))
                hb_usage_error("-r: bad root '%s' (a rank >= 0)", optarg);
            if (l >= hb_nranks)
                hb_usage_error("-r: root %ld out of range for a job of %d ranks", l, hb_nranks);
            o.root = (int)l;
            break;
        case 'c':
            if (strcmp(optarg, "0") && strcmp(optarg, "1"))
                hb_usage_error("-c: bad value '%s' (0 or 1)", optarg);
            o.check = optarg[0] == '1';
            break;
        case 'm':
            if (!strcmp(optarg, "malloc"))
                o.mem_hcomm = 0;
            else if (!strcmp(optarg, "hcomm"))
                o.mem_hcomm = 1;
            else
                hb_usage_error("-m: bad memory kind '%s' (malloc or hcomm)", optarg);
            break;
        case 'C':
            o.csv = 1;
            break;
        case 'h':
            if (hb_rank == 0) hb_usage_print(stdout);
            hcomm_finalize();
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
    *opts_p = o;
}

int hb_size_next(const struct hb_opts *opts, size_t *size_p)
{
    size_t s = *size_p;

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

void *hb_buf_alloc(size_t bytes, int mem_hcomm)
{
    size_t rounded;
    void *buf = NULL;

    if (bytes == 0) bytes = 1;
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
    if (mem_hcomm) {
        hb_check(hcomm_mem_free(buf), "hcomm_mem_free");
        return;
    }
    hb_check(hcomm_mem_deregister(buf, bytes ? bytes : 1), "hcomm_mem_deregister");
    free(buf);
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

void hb_fill(void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op, int rank)
{
    for (size_t k = 0; k < count; k++)
        hb_elem_store(dtype, buf, k, hb_value(dtype, op, rank, hb_nranks, first + k));
}

void hb_fill_sentinel(void *buf, size_t count, hcomm_dtype_t dtype)
{
    memset(buf, 0xff, count * hcomm_dtype_size(dtype));
}

size_t hb_count_wrong(const void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op,
                      int rank, const char *what)
{
    static int reported;
    size_t esize = hcomm_dtype_size(dtype), wrong = 0;
    const char *p = buf;
    uint64_t want;

    for (size_t k = 0; k < count; k++) {
        int64_t v = rank == HB_REDUCED ? hb_expected(dtype, op, hb_nranks, first + k)
                                       : hb_value(dtype, op, rank, hb_nranks, first + k);
        hb_elem_store(dtype, &want, 0, v);
        if (!memcmp(&want, p + k * esize, esize)) continue;
        if (wrong++ == 0 && reported < 8) {
            reported++;
            fprintf(stderr, "rank %d: %s: element %zu is %.17g, expected %.17g\n", hb_rank, what,
                    first + k, hb_elem_load(dtype, buf, k), hb_elem_load(dtype, &want, 0));
        }
    }
    return wrong;
}

/* ------------------------------------------------------------------------
 * Collective harness
 * ---------------------------------------------------------------------- */

struct hb_phase {
    double us;
    double algbw, busbw;
    int64_t wrong; /* -1: not checked */
};

static void hb_coll_phase(const struct hb_coll *coll, struct hb_coll_ctx *c, int in_place,
                          int iters, int warmup, int check, double busbw_factor, size_t bytes,
                          struct hb_phase *ph)
{
    char call[64], what[160], what_input[192];
    double us, worst;
    int64_t wrong, total;
    uint64_t t0;

    snprintf(call, sizeof(call), "hcomm_%s", coll->name);
    snprintf(what, sizeof(what), "%s %s %s count %zu root %d %s", coll->name,
             hb_dtype_name(c->dtype), hb_op_name(c->op), c->count, c->root,
             in_place ? "in-place" : "out-of-place");
    snprintf(what_input, sizeof(what_input), "%s: input buffer changed", what);
    c->what = what;
    c->what_input = what_input;

    /* defined inputs: garbage could hold NaNs or denormals that slow floats */
    coll->fill(c, in_place);
    for (int i = 0; i < warmup; i++)
        hb_check(coll->run(c, in_place), call);
    hb_check(hcomm_barrier(c->comm), "hcomm_barrier");
    t0 = hb_now_ns();
    for (int i = 0; i < iters; i++)
        hb_check(coll->run(c, in_place), call);
    us = (double)(hb_now_ns() - t0) / 1e3 / iters;
    hb_check(hcomm_allreduce(&us, &worst, 1, HCOMM_FLOAT64, HCOMM_MAX, c->comm), "hcomm_allreduce");
    ph->us = worst;
    ph->algbw = bytes && worst > 0 ? (double)bytes / worst / 1e3 : 0;
    ph->busbw = ph->algbw * busbw_factor;
    ph->wrong = -1;
    if (!check) return;
    coll->fill(c, in_place);
    hb_check(coll->run(c, in_place), call);
    wrong = (int64_t)coll->check(c, in_place);
    hb_check(hcomm_allreduce(&wrong, &total, 1, HCOMM_INT64, HCOMM_SUM, c->comm),
             "hcomm_allreduce");
    ph->wrong = total;
}

static void hb_coll_header(const struct hb_coll *coll, const struct hb_opts *o)
{
    if (o->csv) {
        printf("size,count,type,redop,root,time_us,algbw_GBs,busbw_GBs,wrong,"
               "ip_time_us,ip_algbw_GBs,ip_busbw_GBs,ip_wrong\n");
        return;
    }
    printf("# %s_bw: %s\n", coll->name, hcomm_version_string());
    printf("# ranks %d  iters %s  warmup %s  check %d  mem %s\n", hb_nranks,
           o->iters < 0 ? "auto" : "fixed", o->warmup < 0 ? "auto" : "fixed", o->check,
           o->mem_hcomm ? "hcomm" : "malloc");
    printf("#\n");
    printf("# %10s %12s %8s %6s %6s %33s %33s\n", "", "", "", "", "", "out-of-place", "in-place");
    printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
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
        printf("%zu,%zu,%s,%s,%d,%.3f,%.4f,%.4f,%s,%.3f,%.4f,%.4f,%s\n", bytes, elems,
               hb_dtype_name(c->dtype), hb_op_name(c->op), c->root, ph[0].us, ph[0].algbw,
               ph[0].busbw, w0, ph[1].us, ph[1].algbw, ph[1].busbw, w1);
    else
        printf("  %10zu %12zu %8s %6s %6d %9.2f %8.3f %8.3f %6s %9.2f %8.3f %8.3f %6s\n", bytes,
               elems, hb_dtype_name(c->dtype), hb_op_name(c->op), c->root, ph[0].us, ph[0].algbw,
               ph[0].busbw, w0, ph[1].us, ph[1].algbw, ph[1].busbw, w1);
    fflush(stdout);
}

int hb_coll_main(int argc, char **argv, const struct hb_coll *coll)
{
    static const int all_ops[] = {HCOMM_SUM, HCOMM_PROD, HCOMM_MAX, HCOMM_MIN, HCOMM_AVG};
    struct hb_coll_ctx c = {0};
    struct hb_opts o;
    size_t max_elems, send_elems, recv_elems, last_elems = SIZE_MAX, size;
    int ops[5], nops = 0;
    int64_t total_wrong = 0;
    double bw_sum = 0;
    int bw_count = 0;

    hb_init(&argc, &argv);
    hb_opts_parse(argc, argv, 1, &o);

    c.comm = hcomm_comm_world();
    c.rank = hb_rank;
    c.nranks = hb_nranks;
    c.dtype = o.dtype;
    c.esize = hcomm_dtype_size(o.dtype);
    c.root = coll->rooted ? o.root : -1;
    if (!coll->reduces)
        ops[nops++] = HB_OP_NONE;
    else if (o.op == HB_OP_ALL)
        for (nops = 0; nops < 5; nops++)
            ops[nops] = all_ops[nops];
    else
        ops[nops++] = o.op;

    max_elems = o.max_bytes / c.esize;
    if (coll->per_rank) max_elems = max_elems / (size_t)c.nranks * (size_t)c.nranks;
    coll->buf_elems(max_elems, c.nranks, &send_elems, &recv_elems);
    c.sendbuf = send_elems ? hb_buf_alloc(send_elems * c.esize, o.mem_hcomm) : NULL;
    c.recvbuf = recv_elems ? hb_buf_alloc(recv_elems * c.esize, o.mem_hcomm) : NULL;

    if (c.rank == 0) hb_coll_header(coll, &o);
    size = o.min_bytes;
    do {
        size_t elems = size / c.esize, bytes;
        int iters, warmup;

        if (coll->per_rank) elems = elems / (size_t)c.nranks * (size_t)c.nranks;
        /* sizes that round to nothing, or to the previous row, add no row */
        if ((elems == 0 && size != 0) || elems == last_elems) continue;
        last_elems = elems;
        bytes = elems * c.esize;
        c.count = coll->per_rank ? elems / (size_t)c.nranks : elems;
        iters = o.iters >= 0 ? o.iters : hb_iters_for(bytes, 1000, 20);
        warmup = o.warmup >= 0 ? o.warmup : (iters / 10 + 1 > 5 ? iters / 10 + 1 : 5);
        for (int i = 0; i < nops; i++) {
            struct hb_phase ph[2];
            double factor = coll->busbw_factor(c.nranks);

            c.op = ops[i];
            for (int in_place = 0; in_place < 2; in_place++) {
                hb_coll_phase(coll, &c, in_place, iters, warmup, o.check, factor, bytes,
                              &ph[in_place]);
                total_wrong += ph[in_place].wrong > 0 ? ph[in_place].wrong : 0;
                bw_sum += ph[in_place].busbw;
                bw_count++;
            }
            if (c.rank == 0) hb_coll_row(&o, &c, bytes, elems, ph);
        }
    } while (hb_size_next(&o, &size));

    if (c.rank == 0) {
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
    hb_buf_free(c.sendbuf, send_elems * c.esize, o.mem_hcomm);
    hb_buf_free(c.recvbuf, recv_elems * c.esize, o.mem_hcomm);
    hb_check(hcomm_finalize(), "hcomm_finalize");
    return total_wrong ? 1 : 0;
}
