// include/hcomm.hpp under hcommrun: Session (init and finalize), rank/size,
// allreduce deducing every dtype (in place, out of place, vectors, each op),
// broadcast, allgather, reduce_scatter, send/recv, iallreduce's Request, a
// Group of allreduces, split into an owned Comm, and hcomm::Error carrying
// the status and hcomm_last_error()'s message. Exit 0: pass.
#include <hcomm.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

static int failures, my_rank = -1;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "rank %d: FAIL %s:%d: %s\n", my_rank, __FILE__, __LINE__, #cond); \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

// sum over ranks of (r + i) % 5 + 1, in every type; max and min too.
template <class T> static void sums(int r, int n)
{
    const size_t m = 37;
    std::vector<T> v(m), out(m);
    for (size_t i = 0; i < m; i++)
        v[i] = (T)((r + i) % 5 + 1);
    hcomm::allreduce(v.data(), out.data(), m); // out of place
    for (size_t i = 0; i < m; i++) {
        long want = 0;
        for (int j = 0; j < n; j++)
            want += (long)((j + i) % 5 + 1);
        CHECK((long)out[i] == want);
    }
    hcomm::allreduce(v, hcomm::Op::max); // in place, a vector
    for (size_t i = 0; i < m; i++) {
        long want = 0;
        for (int j = 0; j < n; j++)
            want = std::max(want, (long)((j + i) % 5 + 1));
        CHECK((long)v[i] == want);
    }
}

static void bf16(int n)
{
    std::vector<hcomm::bfloat16> v(8);
    for (auto &x : v)
        x.bits = 0x3f80; // 1.0
    hcomm::allreduce(v);
    float f;
    uint32_t w = (uint32_t)v[3].bits << 16;
    std::memcpy(&f, &w, sizeof(f));
    CHECK(f == (float)n);
}

int main(int argc, char **argv)
{
    {
        hcomm::Session job(&argc, &argv);
        int r = hcomm::rank(), n = hcomm::size();
        my_rank = r;
        CHECK(r >= 0 && r < n && hcomm::world().size() == n);
        sums<int8_t>(r, n);
        sums<uint8_t>(r, n);
        sums<int32_t>(r, n);
        sums<uint32_t>(r, n);
        sums<int64_t>(r, n);
        sums<uint64_t>(r, n);
        sums<float>(r, n);
        sums<double>(r, n);
        bf16(n);
        std::vector<double> b(5, r);
        hcomm::broadcast(b, n - 1);
        CHECK(b[4] == n - 1);
        std::vector<int32_t> all = hcomm::allgather(std::vector<int32_t>{r, 10 * r});
        CHECK(all.size() == (size_t)(2 * n) && all[2 * (n - 1) + 1] == 10 * (n - 1));
        std::vector<float> rs(2 * (size_t)n, 1.0f), mine(2);
        hcomm::reduce_scatter(rs.data(), mine.data(), 2);
        CHECK(mine[0] == (float)n && mine[1] == (float)n);
        int to = (r + 1) % n, from = (r + n - 1) % n;
        std::vector<int64_t> got(3);
        if (n > 1) {
            std::vector<int64_t> s{r, r, r};
            if (r % 2 == 0) {
                hcomm::send(s.data(), 3, to, 4);
                hcomm::recv(got.data(), 3, from, 4);
            } else {
                hcomm::recv(got.data(), 3, from, 4);
                hcomm::send(s.data(), 3, to, 4);
            }
            CHECK(got[2] == from);
        }
        {
            std::vector<float> a(100, 1.0f), c(3, 2.0f);
            hcomm::Group g; // two allreduces launched together (fused by hcomm)
            hcomm::allreduce(a);
            hcomm::allreduce(c);
            g.end();
            CHECK(a[99] == (float)n && c[2] == 2.0f * n);
        }
        std::vector<uint32_t> x(1000, 2);
        hcomm::Request q = hcomm::iallreduce(x.data(), x.size(), hcomm::Op::prod);
        q.wait();
        uint32_t p = 1;
        for (int j = 0; j < n; j++)
            p *= 2;
        CHECK(x[999] == p);
        {
            hcomm::Comm half = hcomm::world().split(r % 2); // owned, freed at scope end
            CHECK(half.size() == (n + 1 - r % 2) / 2);
            std::vector<int32_t> one{1};
            hcomm::allreduce(one, hcomm::Op::sum, half);
            CHECK(one[0] == half.size());
            hcomm::Comm none = hcomm::world().split(HCOMM_UNDEFINED);
            CHECK(!none);
        }
        try {
            std::vector<float> z(4);
            hcomm::broadcast(z, n + 3); // root out of range
            CHECK(!"broadcast to a missing root did not throw");
        } catch (const hcomm::Error &e) {
            CHECK(e.status() == HCOMM_ERR_INVALID);
            CHECK(std::strstr(e.what(), "root") != nullptr);
            CHECK(std::strstr(e.what(), "invalid argument") != nullptr);
        }
        hcomm::barrier();
        std::printf("rank %d/%d: hcomm.hpp %s\n", r, n, failures ? "FAILED" : "passed");
    }
    CHECK(!hcomm_initialized()); // the Session finalized
    try {
        hcomm::rank();
        CHECK(!"rank() after finalize did not throw");
    } catch (const hcomm::Error &e) {
        CHECK(e.status() == HCOMM_ERR_INVALID);
    }
    return failures ? 1 : 0;
}
