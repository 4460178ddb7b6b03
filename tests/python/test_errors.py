"""Errors raise: hcomm.Error with the status and hcomm_last_error()'s message
for what the library refuses, TypeError/ValueError for what the binding
cannot take, and the library stays usable after each. Under hcommrun (2+ ranks):

    hcommrun -n 2 /usr/bin/python3 test_errors.py
"""
import sys

from hcomm_testlib import hcomm, np

try:
    import torch
except ImportError:
    torch = None

failures = []
checks = 0


def expect(name, exc_type, fn, status=None, words=()):
    """fn() must raise exc_type (with .status == status) whose text has every word."""
    global checks
    checks += 1
    try:
        fn()
    except exc_type as e:
        text = str(e)
        if status is not None and getattr(e, "status", None) != status:
            failures.append(f"{name}: status {getattr(e, 'status', None)}, want {status} ({text})")
        for wd in words:
            if wd not in text:
                failures.append(f"{name}: {wd!r} not in {text!r}")
        if status is not None:
            if e.message != text.rsplit(" [", 1)[0] or e.status_name != text.rsplit("[", 1)[1][:-1]:
                failures.append(f"{name}: .message/.status_name {e.message!r} {e.status_name!r} "
                                f"do not match {text!r}")
        return e
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name}: raised {type(e).__name__}: {e}, want {exc_type.__name__}")
        return None
    failures.append(f"{name}: did not raise")
    return None


def ok(name, cond):
    global checks
    checks += 1
    if not cond:
        failures.append(name)


# before init
expect("world before init", hcomm.Error, hcomm.world, hcomm.ERR_NOT_INITIALIZED, ["not initialized"])
expect("finalize before init", hcomm.Error, hcomm.finalize, hcomm.ERR_NOT_INITIALIZED)
expect("init rank without store", ValueError, lambda: hcomm.init(rank=0, size=2))

w = hcomm.init()
R, N = w.rank, w.size
x = np.arange(16, dtype=np.float32)

# the library's refusals: status and hcomm_last_error()'s words
expect("init twice", hcomm.Error, hcomm.init, hcomm.ERR_ALREADY_INITIALIZED, ["already initialized"])
expect("broadcast root", hcomm.Error, lambda: w.broadcast(x, root=N + 5), hcomm.ERR_INVALID,
       ["hcomm_broadcast", "root", str(N + 5)])
expect("ibroadcast root", hcomm.Error, lambda: w.ibroadcast(x, root=-2), hcomm.ERR_INVALID,
       ["hcomm_ibroadcast", "root"])
expect("allreduce op", hcomm.Error, lambda: w.allreduce(x, op=42), hcomm.ERR_INVALID, ["op"])
expect("send peer", hcomm.Error, lambda: w.send(x, N), hcomm.ERR_INVALID, ["hcomm_send", "peer"])
expect("recv tag", hcomm.Error, lambda: w.recv(x, 0, tag=-1), hcomm.ERR_INVALID, ["tag"])
expect("split all", hcomm.Error, lambda: hcomm.Comm.free(w), hcomm.ERR_INVALID, ["world"])

# a receive buffer smaller than the message: ERR_TRUNCATED on the receiver
if R == 0:
    w.send(np.ones(64, dtype=np.float64), 1, tag=7)
elif R == 1:
    expect("recv truncated", hcomm.Error, lambda: w.recv(np.zeros(8), 0, tag=7),
           hcomm.ERR_TRUNCATED)
w.barrier()
# alltoallv counts that disagree with the peers': ERR_TRUNCATED (non-blocking: at wait).
# A failed collective leaves its communicator unusable (the library's rule):
# on a communicator of its own, then freed.
bad = w.split(0)
sc = [2] * N
rc = [1] * N
sc[R] = rc[R] = 1  # the block a rank sends itself must agree (a local check, ERR_INVALID)
req = None


def bad_a2av():
    global req
    req = bad.ialltoallv(np.ones(sum(sc)), sc, np.zeros(N), rc)
    req.wait()


expect("alltoallv counts", hcomm.Error, bad_a2av, hcomm.ERR_TRUNCATED, ["does not fit"])
ok("failed request is done", req is None or req.done)
if req is not None:
    expect("failed request waits again", hcomm.Error, req.wait, hcomm.ERR_TRUNCATED)
expect("communicator unusable after", hcomm.Error, bad.barrier, None, ["unusable"])
bad.free()
w.barrier()

# the binding's refusals (nothing is sent)
expect("non-contiguous", ValueError, lambda: w.allreduce(x[::2]), None, ["contiguous"])
ro = np.ones(4, dtype=np.float32)
ro.setflags(write=False)
expect("read-only recvbuf", ValueError, lambda: w.allreduce(np.ones(4, np.float32), ro), None,
       ["recvbuf"])
expect("size mismatch", ValueError, lambda: w.allreduce(x, np.zeros(3, np.float32)), None,
       ["elements"])
expect("type mismatch", TypeError, lambda: w.allreduce(x, np.zeros(16, np.float64)), None,
       ["different types"])
expect("allgather size", ValueError, lambda: w.allgather(x, np.zeros(16 * N + 1, np.float32)), None,
       ["elements"])
expect("counts length", ValueError, lambda: w.allgatherv(x, np.zeros(64, np.float32), [1]), None,
       ["entries"])
expect("negative count", ValueError,
       lambda: w.allgatherv(x, np.zeros(64, np.float32), [-1] * N), None, ["negative"])
expect("counts overrun", ValueError,
       lambda: w.allgatherv(x, np.zeros(4, np.float32), [4] * N), None, ["reach"])
expect("not a buffer", TypeError, lambda: w.allreduce([1.0, 2.0]), None, ["numpy array"])
expect("int16 reduce", TypeError, lambda: w.allreduce(np.ones(3, np.int16)), None, ["does not reduce"])
expect("bool reduce", TypeError, lambda: w.allreduce(np.ones(3, bool)), None, ["does not reduce"])
expect("bad dtype", ValueError, lambda: w.allreduce(x, dtype=77), None, ["dtype"])
expect("odd bytes for dtype", ValueError, lambda: w.allreduce(np.ones(3, np.uint8),
                                                               dtype=hcomm.FLOAT32), None, ["bytes"])
if torch is not None:
    t = torch.arange(16.0).reshape(4, 4)
    expect("torch non-contiguous", ValueError, lambda: w.allreduce(t.t()), None, ["contiguous"])
    expect("torch int16 reduce", TypeError, lambda: w.allreduce(torch.ones(3, dtype=torch.int16)),
           None, ["torch.int16"])
    expect("torch bool reduce", TypeError, lambda: w.allreduce(torch.ones(3, dtype=torch.bool)),
           None, ["does not reduce"])

# still usable after all of that
y = np.full(8, R + 1.0)
w.allreduce(y)
ok("usable after errors", np.array_equal(y, np.full(8, N * (N + 1) / 2)))

# finalize: communicators and requests of the old world refuse politely
sub = w.split(0)
pending = w.irecv(np.zeros(4), (R + 1) % N, tag=99)  # never sent: cancelled by finalize
w.barrier()
hcomm.finalize()
expect("comm after finalize", hcomm.Error, lambda: w.allreduce(y), hcomm.ERR_NOT_INITIALIZED,
       ["finalized"])
expect("split comm after finalize", hcomm.Error, sub.barrier, hcomm.ERR_NOT_INITIALIZED)
expect("request after finalize", hcomm.Error, pending.wait, hcomm.ERR_NOT_INITIALIZED, ["cancelled"])
expect("finalize twice", hcomm.Error, hcomm.finalize, hcomm.ERR_NOT_INITIALIZED)
ok("no op left", hcomm._hcomm._pending() == 0)
e = hcomm.Error("x")
ok("Error is a RuntimeError", isinstance(e, RuntimeError))

for f in failures:
    print(f"FAIL rank {R}: {f}")
print(f"rank {R}/{N}: {checks} error checks, {len(failures)} failed")
sys.exit(1 if failures else 0)
