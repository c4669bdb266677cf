"""Zero every non-sm_90 cubin in a CUDA library's .nv_fatbin, in place (sizes and offsets unchanged).

    python bench/gpu/sm90_only.py libonnxruntime_providers_cuda.so

onnxruntime-gpu 1.31.1's CUDA provider holds 218 MB of machine code for sm_75/80/86/89/90/120 and no PTX.  An H100 or
H200 loads sm_90 code only (SASS does not run across major versions), so the rest is never read there; zeroed, it
compresses to nothing and the payload fits two device calls instead of five.  Never ship such a file to other GPUs.
"""

import struct
import subprocess
import sys

MAGIC = 0xBA55ED50  # a fatbin's header; its entries follow, each (kind u16, version u16, header size u32, size u64)


def fatbin_section(path: str) -> tuple[int, int]:
    for line in subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True).stdout.splitlines():
        if ".nv_fatbin" in line:
            parts = line.split()
            i = parts.index(".nv_fatbin")
            return int(parts[i + 3], 16), int(parts[i + 4], 16)
    raise SystemExit(f"{path}: no .nv_fatbin section")


def main(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    off, size = fatbin_section(path)
    pos, zeroed = off, 0
    while pos < off + size:
        magic, _ver, header, fat = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:
            pos += 8  # fatbins are 8-byte aligned
            continue
        entry, end = pos + header, pos + header + fat
        while entry < end:
            _kind, _ev, eh, payload = struct.unpack_from("<HHIQ", data, entry)
            if struct.unpack_from("<I", data, entry + 28)[0] != 90:  # the entry's sm version
                data[entry + eh : entry + eh + payload] = bytes(payload)
                zeroed += payload
            entry += eh + payload
        pos = end
    open(path, "wb").write(data)
    print(f"{path}: {zeroed / 1e6:.1f} MB of non-sm_90 code zeroed")


if __name__ == "__main__":
    main(sys.argv[1])
