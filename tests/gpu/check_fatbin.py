#!/usr/bin/env python3
"""Checks the fatbin of hcomm's GPU kernels (gpu/cuda/cuda_kernels.cu).

    check_fatbin.py FATBIN LIB "sm_75 sm_80 ..." compute_120 [CUOBJDUMP]

- parses the fatbin (magic 0xBA55ED50; entries of kind 2 = ELF (SASS) and
  1 = PTX, the architecture at byte 28 of each entry's header) and requires
  an ELF for every listed sm_XX and the PTX of the listed compute_XX;
- requires every kernel name (hc_reduce_<dtype>_<op> for 10 dtypes x 5 ops,
  hc_wait_geq32) in every ELF's symbol strings;
- requires the fatbin's bytes inside LIB (libhcomm.so: embedded, not a file
  read at run time);
- with CUOBJDUMP (cuobjdump, where one is found): --list-elf and --list-ptx
  must name the same architectures.
Exit 0 when all hold, 1 naming what does not.
"""
import struct
import subprocess
import sys

DTYPES = "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64".split()
OPS = "sum prod max min avg".split()


def entries(b):
    magic, _ver, hsize, size = struct.unpack_from("<IHHQ", b, 0)
    if magic != 0xBA55ED50:
        raise SystemExit(f"not a fatbin: magic {magic:#x}")
    off, end = hsize, hsize + size
    while off < end:
        kind, _u, ehs, psize = struct.unpack_from("<HHIQ", b, off)
        arch = struct.unpack_from("<I", b, off + 28)[0]
        compressed = struct.unpack_from("<I", b, off + 16)[0]
        yield kind, arch, b[off + ehs: off + ehs + psize], compressed
        off += ehs + psize


def main():
    fatbin, lib, sass, ptx = sys.argv[1:5]
    cuobjdump = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
    b = open(fatbin, "rb").read()
    bad = []
    elfs, ptxs = {}, set()
    for kind, arch, payload, compressed in entries(b):
        if kind == 2:
            elfs[arch] = (payload, compressed)
        elif kind == 1:
            ptxs.add(arch)
    names = [f"hc_reduce_{t}_{o}" for t in DTYPES for o in OPS] + ["hc_wait_geq32"]
    for sm in sass.split():
        a = int(sm[3:])
        if a not in elfs:
            bad.append(f"no SASS for {sm}")
            continue
        payload, compressed = elfs[a]
        if compressed:
            continue  # compressed ELF: names not visible; cuobjdump checks it
        if not payload.startswith(b"\x7fELF"):
            bad.append(f"{sm}: the entry is not an ELF")
        missing = [n for n in names if n.encode() + b"\0" not in payload]
        if missing:
            bad.append(f"{sm}: kernels missing: {' '.join(missing[:5])}")
    if int(ptx[len("compute_"):]) not in ptxs:
        bad.append(f"no PTX for {ptx}")
    if b not in open(lib, "rb").read():
        bad.append(f"{lib} does not embed {fatbin}")
    print(f"fatbin {fatbin}: {len(b)} bytes; SASS sm_"
          + " sm_".join(str(a) for a in sorted(elfs)) + "; PTX compute_"
          + " compute_".join(str(a) for a in sorted(ptxs)))
    if cuobjdump:
        elf = subprocess.run([cuobjdump, "--list-elf", fatbin], capture_output=True, text=True)
        lptx = subprocess.run([cuobjdump, "--list-ptx", fatbin], capture_output=True, text=True)
        out = elf.stdout + lptx.stdout
        print(f"{cuobjdump}:\n{out}", end="")
        for sm in sass.split():
            if f".{sm}.cubin" not in elf.stdout:
                bad.append(f"cuobjdump --list-elf lists no {sm}")
        if f".sm_{ptx[len('compute_'):]}.ptx" not in lptx.stdout:
            bad.append(f"cuobjdump --list-ptx lists no {ptx}")
    else:
        print("cuobjdump: not found (the fatbin was parsed here only)")
    for m in bad:
        print("FAIL:", m)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
