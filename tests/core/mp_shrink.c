/*
 * mp_shrink: survivors shrink and go on (issue 30.8). A training loop of
 * allreduces on a communicator; a rank is SIGKILLed mid-step; the
 * survivors revoke the communicator, shrink it, check who is in the new
 * one, and finish the remaining steps on it with correct sums.
 *
 *   mp_shrink VICTIM [--second V2] [--steps N] [--count C] [--seed S]
 *
 * --second V2: a second rank dies during the agreement itself (a timer
 * fires SIGKILL a pseudo-random few milliseconds into its
 * hcomm_comm_shrink, rank 0 included, which coordinates it): the remaining
 * survivors must still agree, among themselves.
 * Every step allreduces C int64 (default 100000) on the current
 * communicator: element k of world rank w at step s is (w+1)*(s+1)+k, and
 * the sum over the current members is checked exactly. Survivors print
 * "rank R: shrunk to N members {...} after X s" (a failure after an
 * agreement, the second victim's after one that still had it, is shrunk
 * again; the survivors agree on the step to redo, since a step can fail on
 * some of them only) and, at the end, "rank R: finished N steps"; exit 0
 * when every check held (the driver,
 * tests/core/shrink_test.sh, checks the lines and the exit codes).
 */
#include "common/mp_test.h"

#include <signal.h>
#include <sys/time.h>

static void die_now(int sig)
{
    (void)sig;
    raise(SIGKILL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mp_shrink VICTIM [--second V2] [--steps N] [--count C]\n");
        return 2;
    }
    int victim = atoi(argv[1]), second = -1, steps = 12;
    size_t count = 100000;
    uint64_t seed = 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--second") && i + 1 < argc)
            second = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t comm = hcomm_comm_world();
    int64_t *in = mp_xmalloc(count * sizeof(int64_t)), *out = mp_xmalloc(count * sizeof(int64_t));
    int32_t *members = mp_xmalloc(sizeof(int32_t) * (size_t)mp_size);
    int die_step = 3, shrinks = 0;
    for (int s = 0; s < steps; s++) {
        for (size_t k = 0; k < count; k++)
            in[k] = (int64_t)(mp_rank + 1) * (s + 1) + (int64_t)k;
        hcomm_status_t st;
        if (mp_rank == victim && s == die_step) {
            hcomm_request_t req;
            MP_OK(hcomm_iallreduce(in, out, count, HCOMM_INT64, HCOMM_SUM, comm, &req));
            usleep((useconds_t)(mp_hash(seed) % 3000));
            (void)hcomm_test(req, NULL);
            raise(SIGKILL);
        }
        /* its size now: a revoke arriving once the step is done makes
         * hcomm_comm_size refuse the communicator (-1) */
        int n = hcomm_comm_size(comm);
        st = hcomm_allreduce(in, out, count, HCOMM_INT64, HCOMM_SUM, comm);
        int32_t me = mp_rank;
        if (st == HCOMM_OK)
            st = hcomm_allgather(&me, members, 1, HCOMM_INT32, comm);
        char err[512];
        snprintf(err, sizeof(err), "%s", st == HCOMM_OK ? "" : hcomm_last_error());
        if (st != HCOMM_OK) {
            /* a failure (the victim, or the second one after an agreement
             * that still had it): revoke, shrink, the step again */
            if (st != HCOMM_ERR_PEER_FAILED && st != HCOMM_ERR_REVOKED)
                mp_fail("step %d: expected PEER_FAILED or REVOKED got %s (%s)", s,
                        mp_status_name(st), err);
            /* the words describe this status, not a later failure's (a
             * revoke that arrived after the collective had failed) */
            if ((st == HCOMM_ERR_PEER_FAILED) == (strstr(err, "revoked the") != NULL))
                mp_fail("step %d: %s with the words of another failure: %s", s,
                        mp_status_name(st), err);
            double t0 = mp_now();
            MP_OK(hcomm_comm_revoke(comm));
            if (mp_rank == second && shrinks == 0) {
                /* die during the agreement: a few ms into the shrink */
                signal(SIGALRM, die_now);
                struct itimerval it = {{0, 0}, {0, (long)(50 + mp_hash(seed * 31) % 1500)}};
                setitimer(ITIMER_REAL, &it, NULL);
            }
            hcomm_comm_t smaller;
            MP_OK(hcomm_comm_shrink(comm, &smaller));
            if (mp_rank == second) { /* finished before the timer: die right after instead */
                printf("rank %d: the shrink returned before the timer\n", mp_rank);
                raise(SIGKILL);
            }
            if (comm != hcomm_comm_world())
                MP_OK(hcomm_comm_free(comm));
            comm = smaller;
            shrinks++;
            n = hcomm_comm_size(comm);
            char list[256] = "";
            st = hcomm_allgather(&me, members, 1, HCOMM_INT32, comm);
            if (st == HCOMM_OK) {
                for (int r = 0; r < n; r++) {
                    snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d",
                             r ? "," : "", members[r]);
                    if (members[r] == victim)
                        mp_fail("the victim %d is in the shrunk communicator", victim);
                    if (r && members[r] <= members[r - 1])
                        mp_fail("members out of order");
                }
                printf("rank %d: shrunk to %d members {%s} after %.3f s\n", mp_rank, n, list,
                       mp_now() - t0);
            }
            /* A collective can fail on some members and succeed on others
             * (it completed here before the failure reached the others):
             * the survivors agree on the step to go on from, the lowest
             * any of them failed, as a training loop agrees on its
             * checkpoint. */
            int64_t mine = s, from = s;
            if (st == HCOMM_OK &&
                (st = hcomm_allreduce(&mine, &from, 1, HCOMM_INT64, HCOMM_MIN, comm)) == HCOMM_OK)
                s = (int)from;
            s--; /* the failed step again, on the survivors */
            continue;
        }
        int64_t wsum = 0;
        for (int r = 0; r < n; r++)
            wsum += members[r] + 1;
        for (size_t k = 0; k < count; k++)
            if (out[k] != wsum * (s + 1) + (int64_t)n * (int64_t)k) {
                mp_fail("step %d: element %zu is %lld, expected %lld", s, k, (long long)out[k],
                        (long long)(wsum * (s + 1) + (int64_t)n * (int64_t)k));
                break;
            }
    }
    printf("rank %d: finished %d steps after %d shrinks\n", mp_rank, steps, shrinks);
    /* The last step's sums are checked. A survivor must not exit while
     * another still reads its last message (a closed socket with unread
     * data resets the connection): a barrier, then time for the slowest to
     * read it. hcomm_finalize's own barrier goes through rank 0's
     * bootstrap, which is gone when rank 0 was a victim. */
    MP_OK(hcomm_barrier(comm));
    mp_sleep_ms(500);
    if (comm != hcomm_comm_world())
        MP_OK(hcomm_comm_free(comm));
    hcomm_status_t fst = hcomm_finalize();
    if (fst != HCOMM_OK)
        printf("rank %d: hcomm_finalize: %s (%s)\n", mp_rank, mp_status_name(fst),
               hcomm_last_error());
    fflush(stdout);
    free(in);
    free(out);
    free(members);
    return mp_failures ? 1 : 0;
}
