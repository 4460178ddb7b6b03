/*
 * hcomm.hpp: a header-only C++ (11 and later) convenience over hcomm.h.
 *
 *     #include <hcomm.hpp>
 *     int main(int argc, char **argv) {
 *         hcomm::Session job(&argc, &argv);          // hcomm_init ... hcomm_finalize
 *         std::vector<float> g(1024, hcomm::rank());
 *         hcomm::allreduce(g);                       // in place, dtype from float
 *         hcomm::allreduce(g.data(), g.size(), hcomm::Op::max);
 *     }
 *
 * Every failure throws hcomm::Error (a std::runtime_error) carrying the
 * status and hcomm_last_error()'s message. The dtype is deduced from the
 * element type: int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t,
 * float, double, and hcomm::float16 / hcomm::bfloat16 (16-bit storage for
 * data produced elsewhere). Calls take a Comm (default: the world); the
 * usual rule holds: one thread communicates at a time.
 */
#ifndef HCOMM_HPP
#define HCOMM_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <hcomm.h>

namespace hcomm
{

/* A failed hcomm call: status() and what() = "<hcomm_last_error()> [status text]". */
class Error : public std::runtime_error
{
  public:
    Error(hcomm_status_t st, const std::string &msg) : std::runtime_error(msg), status_(st) {}
    hcomm_status_t status() const noexcept
    {
        return status_;
    }

  private:
    hcomm_status_t status_;
};

namespace detail
{
inline void check(hcomm_status_t st, const char *fn)
{
    if (st == HCOMM_OK) return;
    const char *m = hcomm_last_error();
    std::string msg = (m && *m) ? std::string(m) : std::string(fn);
    throw Error(st, msg + " [" + hcomm_strerror(st) + "]");
}
} // namespace detail

/* 16-bit floats as stored bits (hcomm reduces them; C++ does no arithmetic on them). */
struct float16 {
    uint16_t bits;
};
struct bfloat16 {
    uint16_t bits;
};

/* hcomm's dtype of T: dtype_of<T>::value. */
template <class T> struct dtype_of; /* no dtype: a compile error names T */
#define HCOMM_HPP_DTYPE_(T, D)                                                                     \
    template <> struct dtype_of<T> {                                                               \
        static constexpr hcomm_dtype_t value = D;                                                  \
    };
HCOMM_HPP_DTYPE_(int8_t, HCOMM_INT8)
HCOMM_HPP_DTYPE_(uint8_t, HCOMM_UINT8)
HCOMM_HPP_DTYPE_(int32_t, HCOMM_INT32)
HCOMM_HPP_DTYPE_(uint32_t, HCOMM_UINT32)
HCOMM_HPP_DTYPE_(int64_t, HCOMM_INT64)
HCOMM_HPP_DTYPE_(uint64_t, HCOMM_UINT64)
HCOMM_HPP_DTYPE_(float, HCOMM_FLOAT32)
HCOMM_HPP_DTYPE_(double, HCOMM_FLOAT64)
HCOMM_HPP_DTYPE_(float16, HCOMM_FLOAT16)
HCOMM_HPP_DTYPE_(bfloat16, HCOMM_BFLOAT16)
#undef HCOMM_HPP_DTYPE_

enum class Op {
    sum = HCOMM_SUM,
    prod = HCOMM_PROD,
    max = HCOMM_MAX,
    min = HCOMM_MIN,
    avg = HCOMM_AVG
};

/* A communicator. Comm() and world() are the world (owned by the library);
 * split() returns one this object owns and frees (move-only). */
class Comm
{
  public:
    Comm() : c_(hcomm_comm_world()), owned_(false) {}
    explicit Comm(hcomm_comm_t c, bool owned) : c_(c), owned_(owned) {}
    Comm(const Comm &) = delete;
    Comm &operator=(const Comm &) = delete;
    Comm(Comm &&o) noexcept : c_(o.c_), owned_(o.owned_)
    {
        o.c_ = nullptr, o.owned_ = false;
    }
    Comm &operator=(Comm &&o) noexcept
    {
        std::swap(c_, o.c_);
        std::swap(owned_, o.owned_);
        return *this;
    }
    ~Comm()
    {
        if (owned_ && c_ && hcomm_initialized()) hcomm_comm_free(c_);
    }
    hcomm_comm_t get() const
    {
        if (!c_)
            throw Error(HCOMM_ERR_INVALID, "hcomm::Comm: no communicator (hcomm not initialized, "
                                           "a moved-from Comm, or an UNDEFINED color)");
        return c_;
    }
    explicit operator bool() const noexcept
    {
        return c_ != nullptr;
    }
    int rank() const
    {
        return hcomm_comm_rank(get());
    }
    int size() const
    {
        return hcomm_comm_size(get());
    }
    /* hcomm_comm_split: collective; a negative color gives an empty Comm. */
    Comm split(int color, int key) const
    {
        hcomm_comm_t n = nullptr;
        detail::check(hcomm_comm_split(get(), color, key, &n), "hcomm_comm_split");
        return Comm(n, true);
    }
    Comm split(int color) const
    {
        return split(color, rank());
    }

  private:
    hcomm_comm_t c_;
    bool owned_;
};

/* The job: hcomm_init (or hcomm_init_rank) here, hcomm_finalize at the end of scope. */
class Session
{
  public:
    Session() : Session(nullptr, nullptr) {}
    Session(int *argc, char ***argv)
    {
        detail::check(hcomm_init(argc, argv), "hcomm_init");
    }
    explicit Session(const hcomm_init_params_t &p)
    {
        detail::check(hcomm_init_rank(&p), "hcomm_init_rank");
    }
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;
    ~Session()
    {
        if (hcomm_initialized()) hcomm_finalize();
    }
};

inline Comm world()
{
    return Comm();
}
inline int rank()
{
    return Comm().rank();
}
inline int size()
{
    return Comm().size();
}

/* A non-blocking operation: wait() completes it (the destructor waits too,
 * ignoring a failure: call wait() to see it). Move-only. */
class Request
{
  public:
    explicit Request(hcomm_request_t r) : r_(r) {}
    Request(const Request &) = delete;
    Request &operator=(const Request &) = delete;
    Request(Request &&o) noexcept : r_(o.r_)
    {
        o.r_ = nullptr;
    }
    ~Request()
    {
        if (r_ && hcomm_initialized()) hcomm_wait(r_);
    }
    void wait()
    {
        hcomm_request_t r = r_;
        r_ = nullptr;
        if (r) detail::check(hcomm_wait(r), "hcomm_wait");
    }
    bool test()
    {
        if (!r_) return true;
        int done = 0;
        hcomm_status_t st = hcomm_test(r_, &done);
        if (done || st != HCOMM_OK) r_ = nullptr;
        detail::check(st, "hcomm_test");
        return done != 0;
    }

  private:
    hcomm_request_t r_;
};

/* hcomm_group_start now, hcomm_group_end at end() or the end of scope: the
 * collectives issued meanwhile are launched together (small allreduces fused). */
class Group
{
  public:
    Group()
    {
        detail::check(hcomm_group_start(), "hcomm_group_start");
    }
    Group(const Group &) = delete;
    Group &operator=(const Group &) = delete;
    void end()
    {
        if (open_) {
            open_ = false;
            detail::check(hcomm_group_end(), "hcomm_group_end");
        }
    }
    ~Group()
    {
        if (open_ && hcomm_initialized()) hcomm_group_end();
    }

  private:
    bool open_ = true;
};

template <class T>
void allreduce(const T *send, T *recv, size_t n, Op op = Op::sum, const Comm &c = Comm())
{
    detail::check(hcomm_allreduce(send, recv, n, dtype_of<T>::value, (hcomm_op_t)op, c.get()),
                  "hcomm_allreduce");
}
template <class T> void allreduce(T *buf, size_t n, Op op = Op::sum, const Comm &c = Comm())
{
    allreduce<T>(buf, buf, n, op, c);
}
template <class T> void allreduce(std::vector<T> &v, Op op = Op::sum, const Comm &c = Comm())
{
    allreduce<T>(v.data(), v.data(), v.size(), op, c);
}
template <class T> Request iallreduce(T *buf, size_t n, Op op = Op::sum, const Comm &c = Comm())
{
    hcomm_request_t r = nullptr;
    detail::check(hcomm_iallreduce(buf, buf, n, dtype_of<T>::value, (hcomm_op_t)op, c.get(), &r),
                  "hcomm_iallreduce");
    return Request(r);
}
template <class T> void broadcast(T *buf, size_t n, int root, const Comm &c = Comm())
{
    detail::check(hcomm_broadcast(buf, n, dtype_of<T>::value, root, c.get()), "hcomm_broadcast");
}
template <class T> void broadcast(std::vector<T> &v, int root, const Comm &c = Comm())
{
    broadcast<T>(v.data(), v.size(), root, c);
}
/* Every rank's send (n each) into recv (size() * n), in rank order. */
template <class T> void allgather(const T *send, T *recv, size_t n, const Comm &c = Comm())
{
    detail::check(hcomm_allgather(send, recv, n, dtype_of<T>::value, c.get()), "hcomm_allgather");
}
template <class T> std::vector<T> allgather(const std::vector<T> &send, const Comm &c = Comm())
{
    std::vector<T> out(send.size() * (size_t)c.size());
    allgather<T>(send.data(), out.data(), send.size(), c);
    return out;
}
template <class T>
void reduce_scatter(const T *send, T *recv, size_t recvcount, Op op = Op::sum,
                    const Comm &c = Comm())
{
    detail::check(
        hcomm_reduce_scatter(send, recv, recvcount, dtype_of<T>::value, (hcomm_op_t)op, c.get()),
        "hcomm_reduce_scatter");
}
inline void barrier(const Comm &c = Comm())
{
    detail::check(hcomm_barrier(c.get()), "hcomm_barrier");
}
template <class T> void send(const T *buf, size_t n, int peer, int tag = 0, const Comm &c = Comm())
{
    detail::check(hcomm_send(buf, n, dtype_of<T>::value, peer, tag, c.get()), "hcomm_send");
}
template <class T> void recv(T *buf, size_t n, int peer, int tag = 0, const Comm &c = Comm())
{
    detail::check(hcomm_recv(buf, n, dtype_of<T>::value, peer, tag, c.get()), "hcomm_recv");
}

} // namespace hcomm

#endif /* HCOMM_HPP */
